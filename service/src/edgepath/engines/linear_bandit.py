# ruff: noqa: N803  (X, A, S: design and precision matrices, linear-algebra convention)
"""Regression-oracle contextual bandit in numpy: per-arm discounted ridge regression (pure engine).

One :class:`LinearBandit` serves one arm set. Each arm ``a`` keeps a ridge
regression of the reward (EdgePath's continuous utility,
:func:`edgepath.engines.reward.utility`) on the shared feature vector ``x``
(shape ``(d,)``, :mod:`edgepath.engines.features`) plus an intercept,
``x̃ = [x, 1]`` of shape ``(d+1,)``:

* discounted statistics ``S_a = Σ_i γ^{t_a−i} w_i x̃_i x̃_iᵀ`` ``(d+1, d+1)`` and
  ``u_a = Σ_i γ^{t_a−i} w_i r_i x̃_i`` ``(d+1,)``, where ``t_a`` counts arm
  ``a``'s own outcomes and ``γ`` is the forgetting factor (``forgetting``).
  Forgetting per own outcome (not per wall-clock outcome) is deliberate: a
  path that degrades is the one being chosen, so its old outcomes age out
  within ~``1/(1−γ)`` of its own outcomes, while a rarely tried arm keeps its
  estimate instead of shrinking toward the prior's 0 (which would make it
  look worse the less it is tried);
* precision ``A_a = S_a + λ I`` (the ridge prior λ is not discounted), estimate
  ``θ_a = A_a⁻¹ u_a`` and covariance ``A_a⁻¹`` — the Bayesian linear regression
  posterior with prior ``N(0, σ²/λ I)`` (Bishop, PRML §3.3), with exponential
  forgetting (Russac, Vernade & Cappé, "Weighted Linear Bandits for
  Non-Stationary Environments", NeurIPS 2019: discounted LinUCB). An outcome's
  weight falls to 1/e after ``1/(1−γ)`` outcomes (1,000 at γ = 0.999).

``θ_a`` and ``A_a⁻¹`` are recomputed once per :meth:`update` (a batch), so a
decision costs one ``(K, d+1) @ (d+1,)`` product (SquareCB, ε-greedy) plus,
for LinTS/LinUCB, ``K`` quadratic forms ``x̃ᵀ A_a⁻¹ x̃``.

Exploration rules (``mode``), each with the *exact* probability of every arm
(:meth:`LinearBandit.probabilities`; the chosen arm is drawn from that vector
with one uniform number, so the logged propensity is the probability the
choice had, not a bound):

``squarecb``
    Inverse-gap weighting (Abe & Long 1999; Foster & Rakhlin, "Beyond UCB",
    ICML 2020, Algorithm 1): with ``μ`` the K estimates, ``b = argmax μ``,
    ``p_a = 1 / (K + γ_t (μ_b − μ_a))`` for ``a ≠ b`` and ``p_b = 1 − Σ_{a≠b} p_a``;
    ``γ_t = gamma0 · (n_t + 1)^gamma_exponent`` with ``n_t`` the discounted
    number of outcomes seen (VW's ``--gamma_scale``/``--gamma_exponent``
    schedule, the square-root rate of the paper's Theorem 1).
``lints``
    Linear Thompson sampling (Agrawal & Goyal, ICML 2013): ``θ̃_a ~ N(θ_a, v² A_a⁻¹)``
    and the arm of the largest ``x̃·θ̃_a``. Only the scalars ``x̃·θ̃_a ~ N(μ_a, v² s_a²)``
    (``s_a² = x̃ᵀ A_a⁻¹ x̃``) matter, and they are independent across arms, so
    ``P(a) = ∫ φ_a(z) Π_{b≠a} Φ_b(z) dz``: ``Φ((μ_a − μ_b)/√(v²s_a² + v²s_b²))``
    in closed form for two arms, Gauss–Hermite quadrature (64 nodes) otherwise.
``linucb``
    Optimism (Li et al., WWW 2010): the arm of the largest ``μ_a + α s_a``;
    deterministic, propensity 1.
``egreedy``
    ε-greedy on the ridge estimates (the "thirty lines of numpy" baseline of
    issue 15): ``p = ε/K + (1−ε)·1[a = argmax μ]``.

Until every arm has an outcome the choice is uniform (``1/K``). Ties in an
argmax go to the lowest arm index, so every rule is a function of the state
and one uniform draw.

Exploration floor (``floor`` argument of :meth:`LinearBandit.probabilities`,
:meth:`~LinearBandit.decide` and their batch forms; the service passes its
``propensity_floor``, 0.01)
    For the randomised rules (``squarecb``, ``lints``, ``egreedy``) the floor is
    enforced *in the distribution the arm is drawn from*, so the logged
    propensity is the draw's probability, never a bound: with ``p`` the rule's
    vector, ``f = min(floor, 1/K)`` and ``p_min = min_a p_a``, the arm is drawn
    from ``p' = (1 − λ) p + λ/K`` with
    ``λ = clip((f − p_min) / (1/K − p_min), 0, 1)`` — the smallest mixture with a
    uniform draw whose every arm has probability ≥ ``f`` (the uniform mixing of
    Exp3, Auer, Cesa-Bianchi, Freund & Schapire, SIAM J. Comput. 2002, with the
    smallest weight that meets the floor). Where the rule already gives every
    arm ≥ ``f`` (``λ = 0``) nothing changes: ``egreedy``'s ``ε/K`` = 0.025 ≥ 0.01
    never binds, SquareCB binds only where ``γ_t (μ_b − μ_a) > 1/f − K`` (98 at
    0.01, K = 2: a confident learner), LinTS where a tail probability is < ``f``.
    ``linucb`` is deterministic and stays so (its probabilities are 0/1; the
    service's logged ``max(floor, 1)`` = 1 for the chosen arm is exact, and no
    other arm is ever logged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

try:  # the compiled single decision (service/native, the edgepath-native package): the same results, bit for bit
    from edgepath_native import ridge_decide as _native_decide
except ImportError:  # not installed, or a build from before it: the Python rule decides alone
    _native_decide = None  # type: ignore[assignment]

#: Whether the compiled single decision of the SquareCB and ε-greedy rules (``edgepath_native.ridge_decide``,
#: built from service/native) is installed: :meth:`LinearBandit.decide` hands it the decision when asked
#: (``native=True``); this module is its reference (``tests/service/engines/test_ridge_native.py``).
NATIVE_AVAILABLE = _native_decide is not None

#: The rules the compiled decision serves.
NATIVE_MODES: tuple[str, ...] = ("squarecb", "egreedy")

Mode = Literal["squarecb", "lints", "linucb", "egreedy"]
MODES: tuple[str, ...] = ("squarecb", "lints", "linucb", "egreedy")

#: Rules whose arm is drawn from a distribution, so that a probability floor can be enforced in the draw.
FLOORED_MODES: tuple[str, ...] = ("squarecb", "lints", "egreedy")
#: Rules that are deterministic given the state (probabilities 0/1): no floor, propensity 1. Every mode of
#: :data:`MODES` is in exactly one of :data:`FLOORED_MODES` and this (checked by :class:`LinearBanditConfig`), so a
#: new rule cannot be left unfloored by omission.
DETERMINISTIC_MODES: tuple[str, ...] = ("linucb",)

_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(64)  # ∫ f(z) e^{-z²/2} dz


def floor_mix(p: np.ndarray, floor: float) -> np.ndarray:
    """The smallest uniform mixture of ``p`` whose every arm has probability ≥ ``min(floor, 1/K)``.

    ``p`` shape ``(K,)`` or ``(m, K)`` (rows sum to 1) → same shape, rows sum to 1 (to rounding):
    ``p' = (1 − λ) p + λ/K`` with ``λ = clip((f − p_min)/(1/K − p_min), 0, 1)`` per row, ``f = min(floor, 1/K)``
    (module docstring). Rows already at or above ``f`` are returned unchanged (bit for bit); in mixed rows the
    arms at the floor are set to exactly ``f`` (the mixture gives ``f`` up to the last bit), so a probability
    logged as ``max(floor, p'_a)`` equals ``p'_a``.
    """
    k = p.shape[-1]
    f = min(float(floor), 1.0 / k)
    lo = p.min(axis=-1, keepdims=True)
    if f <= 0.0 or bool(np.all(lo >= f)):
        return p
    lam = np.clip((f - lo) / np.maximum(1.0 / k - lo, 1e-300), 0.0, 1.0)
    mixed = np.maximum((1.0 - lam) * p + lam / k, f)
    mixed = np.where(p == lo, f, mixed)  # the lowest arms: exactly f (the mixture's value to the last bit)
    return np.where(lo < f, mixed, p)


@dataclass(frozen=True)
class LinearBanditConfig:
    """Hyper-parameters of :class:`LinearBandit` (units: reward units, i.e. utility in [0, 1]).

    ``ridge_lambda`` λ (prior precision), ``forgetting`` γ in (0, 1] (1 = no
    forgetting), ``gamma0``/``gamma_exponent`` the SquareCB schedule,
    ``ts_scale`` v (LinTS posterior scale, ≈ the reward noise s.d.),
    ``ucb_alpha`` α, ``epsilon`` ε.
    """

    mode: Mode = "squarecb"
    ridge_lambda: float = 1.0
    forgetting: float = 0.999
    gamma0: float = 100.0
    gamma_exponent: float = 0.5
    ts_scale: float = 0.05
    ucb_alpha: float = 0.05
    epsilon: float = 0.05

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown linear bandit mode {self.mode!r}; choose one of {MODES}")
        if (self.mode in FLOORED_MODES) == (self.mode in DETERMINISTIC_MODES):
            raise ValueError(
                f"linear bandit mode {self.mode!r} must be in exactly one of FLOORED_MODES (drawn from a distribution: "
                "the propensity floor is enforced in the draw) and DETERMINISTIC_MODES (linear_bandit.py)"
            )
        if not self.ridge_lambda > 0.0:
            raise ValueError("ridge_lambda must be > 0")
        if not 0.0 < self.forgetting <= 1.0:
            raise ValueError("forgetting must be in (0, 1]")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError("epsilon must be in [0, 1]")
        if self.gamma0 < 0.0 or self.ts_scale < 0.0 or self.ucb_alpha < 0.0:
            raise ValueError("gamma0, ts_scale and ucb_alpha must be >= 0")


class LinearBandit:
    """Per-arm discounted ridge regression with an exploration rule (see module docstring).

    Parameters
    ----------
    n_arms:
        K ≥ 2.
    n_features:
        d, the length of the feature vectors passed to :meth:`decide` / :meth:`update`.
    config:
        Hyper-parameters.
    seed:
        Seed of the generator of the exploration draws.

    Raises
    ------
    ValueError
        For K < 2, d < 1 or invalid hyper-parameters.
    """

    def __init__(self, n_arms: int, n_features: int, config: LinearBanditConfig | None = None, seed: int = 0) -> None:
        if n_arms < 2 or n_features < 1:
            raise ValueError("need n_arms >= 2 and n_features >= 1")
        self.config = config or LinearBanditConfig()
        self.k, self.d = n_arms, n_features
        p = n_features + 1
        self.S = np.zeros((n_arms, p, p))
        self.u = np.zeros((n_arms, p))
        self.n = np.zeros(n_arms)  # discounted weight of each arm's outcomes
        self.n_total = 0.0  # discounted number of outcomes (all arms), drives γ_t
        self.outcomes = 0  # undiscounted count of outcomes learned from
        self.rng = np.random.default_rng(seed)
        self._refresh()

    # --- state -------------------------------------------------------------------------------------------------
    def _refresh(self) -> None:
        """Recompute θ_a and A_a⁻¹ from the statistics (once per batch)."""
        eye = self.config.ridge_lambda * np.eye(self.d + 1)
        self.cov = np.linalg.inv(self.S + eye)  # (K, d+1, d+1), batched inverse
        self.theta = np.einsum("kij,kj->ki", self.cov, self.u)  # (K, d+1)
        self.coef = np.ascontiguousarray(self.theta[:, :-1])
        self.intercept = self.theta[:, -1].copy()
        self._fitted = bool(np.all(self.n > 0.0))

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Pickles of releases before ``_fitted`` load with it computed."""
        self.__dict__.update(state)
        self._fitted = bool(np.all(self.n > 0.0))

    @property
    def is_fitted(self) -> bool:
        """True once every arm has some (discounted) outcome weight (computed when the statistics change: numpy's
        ``all`` over K weights took ~3 µs of every decision, issue 16)."""
        return self._fitted

    def gamma_t(self) -> float:
        """SquareCB's current γ_t = gamma0 · (n_t + 1)^gamma_exponent."""
        return self.config.gamma0 * (self.n_total + 1.0) ** self.config.gamma_exponent

    # --- deciding ----------------------------------------------------------------------------------------------
    def estimates(self, x: np.ndarray) -> np.ndarray:
        """Estimated reward of each arm for features ``x`` (shape ``(d,)``); shape ``(K,)``.

        Each estimate is the correctly rounded sum of the arm's rounded products and its intercept,
        ``math.fsum(coef[a, 0]·x_0, …, coef[a, d−1]·x_{d−1}, intercept[a])``: a function of the values alone, which
        the compiled decision (:data:`NATIVE_AVAILABLE`) reproduces bit for bit, where BLAS's ``coef @ x`` sums in an
        order of its own kernel's (the batch's :meth:`probabilities_batch` uses it and agrees to rounding). Where
        ``fsum`` raises (an intermediate overflow, ``inf − inf``) numpy's sum, not finite either way.
        """
        try:
            return np.array(
                [math.fsum((*row, b)) for row, b in zip((self.coef * x).tolist(), self.intercept.tolist(), strict=True)]
            )
        except (OverflowError, ValueError):
            return self.coef @ x + self.intercept

    def _sd(self, x: np.ndarray) -> np.ndarray:
        xt = np.append(x, 1.0)
        return np.sqrt(np.maximum(np.einsum("i,kij,j->k", xt, self.cov, xt), 0.0))

    def probabilities(self, x: np.ndarray, floor: float = 0.0) -> np.ndarray:
        """Exact probability of each arm under the exploration rule; shape ``(K,)``, sums to 1.

        ``floor`` (a probability, e.g. the service's ``propensity_floor`` 0.01): for the randomised rules
        (:data:`FLOORED_MODES`) every arm gets at least ``min(floor, 1/K)`` by :func:`floor_mix`; this is the
        vector :meth:`decide` draws from. ``linucb`` ignores it (deterministic). 0 = the rule as published.
        """
        return np.asarray(self._floored(self._rule_list(x), floor))

    def _floored(self, p: list[float], floor: float) -> list[float]:
        """:func:`floor_mix` of one probability vector as a list, for the single decision (a few scalar operations
        instead of numpy reductions on a length-K array: the common case, no arm below the floor, costs one ``min``).
        Same operations in the same order as :func:`floor_mix`, so the same floats."""
        k = self.k
        f = min(float(floor), 1.0 / k)
        lo = min(p)
        if f <= 0.0 or lo >= f or self.config.mode not in FLOORED_MODES:
            return p
        lam = min(max((f - lo) / max(1.0 / k - lo, 1e-300), 0.0), 1.0)
        return [f if pa == lo else max((1.0 - lam) * pa + lam / k, f) for pa in p]

    def _rule_list(self, x: np.ndarray) -> list[float]:
        """:meth:`_rule_probabilities` as a list, for one decision: SquareCB and ε-greedy (and the uniform start) in
        Python floats over the K estimates, the same operations in the same order as the numpy form (so the same
        floats), ~2.6 µs less than numpy's on arrays of K = 2 (issue 16); the other rules, and estimates that are
        not all finite, by :meth:`_rule_probabilities`."""
        cfg, k = self.config, self.k
        if not self.is_fitted:
            return [1.0 / k] * k
        if cfg.mode != "squarecb" and cfg.mode != "egreedy":
            return self._rule_probabilities(x).tolist()
        mu: list[float] = self.estimates(x).tolist()
        if not math.isfinite(sum(mu)):  # numpy's argmax takes a NaN as the largest; max() does not
            return self._rule_probabilities(x).tolist()
        best = mu.index(max(mu))  # the first of equals, as argmax
        if cfg.mode == "egreedy":
            p = [cfg.epsilon / k] * k
            p[best] += 1.0 - cfg.epsilon
            return p
        gamma, mu_best = self.gamma_t(), mu[best]
        p = [1.0 / (k + gamma * (mu_best - m)) for m in mu]
        p[best] = 0.0
        total = 0.0
        for pa in p:  # left to right, as numpy's sum of fewer than 8 (CPython 3.12's sum() compensates)
            total += pa
        p[best] = 1.0 - total
        return p

    def _rule_probabilities(self, x: np.ndarray) -> np.ndarray:
        cfg, k = self.config, self.k
        if not self.is_fitted:  # an arm never tried: uniform until every arm has an outcome
            return np.full(k, 1.0 / k)
        mu = self.estimates(x)
        if cfg.mode == "squarecb":
            best = int(mu.argmax())
            p = 1.0 / (k + self.gamma_t() * (mu[best] - mu))
            p[best] = 0.0
            p[best] = 1.0 - p.sum()
            return p
        if cfg.mode == "egreedy":
            p = np.full(k, cfg.epsilon / k)
            p[int(np.argmax(mu))] += 1.0 - cfg.epsilon
            return p
        sd = self._sd(x)
        if cfg.mode == "linucb":
            p = np.zeros(k)
            p[int(np.argmax(mu + cfg.ucb_alpha * sd))] = 1.0
            return p
        if cfg.mode == "lints":
            return _thompson_probabilities(mu, cfg.ts_scale * sd)
        raise _unhandled(cfg.mode, "_rule_probabilities")

    def decide(self, x: np.ndarray, floor: float = 0.0, native: bool = False) -> tuple[int, float]:
        """Draw an arm for features ``x`` (shape ``(d,)``, float64) from :meth:`probabilities` ``(x, floor)``;
        returns ``(arm index, exact propensity)`` — the probability the drawn arm had, ≥ ``min(floor, 1/K)`` for the
        randomised rules. One uniform number from the generator per decision.

        ``native``: let the compiled decision (:data:`NATIVE_AVAILABLE`) decide a fitted SquareCB or ε-greedy
        bandit's draw (12.5 → ~4.6 µs in a loop, issue 16): the same arm and propensity, bit for bit; where it hands the
        decision back (an estimate not finite) this method decides with the same draw.
        """
        cfg = self.config
        if native and _native_decide is not None and self._fitted and cfg.mode in NATIVE_MODES:
            draw = self.rng.random()
            egreedy = cfg.mode == "egreedy"
            gamma = 0.0 if egreedy else self.gamma_t()
            decided = _native_decide(self.coef, self.intercept, x, egreedy, cfg.epsilon, gamma, float(floor), draw)
            if decided is not None:
                return decided
            return _pick(self._floored(self._rule_list(x), floor), draw)
        p = self._floored(self._rule_list(x), floor)
        return _pick(p, self.rng.random())

    def probabilities_batch(self, X: np.ndarray, floor: float = 0.0) -> np.ndarray:
        """:meth:`probabilities` of many contexts: ``X`` shape ``(m, d)`` → shape ``(m, K)``, rows sum to 1.

        One ``(m, d) @ (d, K)`` product for the estimates (plus, for LinTS/LinUCB, one batched quadratic form);
        the same rules as :meth:`probabilities`, row by row (LinTS with K > 2 falls back to its quadrature per row),
        and the same ``floor`` (:func:`floor_mix`, row-wise).
        """
        p = self._rule_probabilities_batch(X)
        return floor_mix(p, floor) if self.config.mode in FLOORED_MODES else p

    def _rule_probabilities_batch(self, X: np.ndarray) -> np.ndarray:
        cfg, k = self.config, self.k
        X = np.asarray(X, dtype=np.float64).reshape(-1, self.d)
        m = X.shape[0]
        if not self.is_fitted:
            return np.full((m, k), 1.0 / k)
        mu = X @ self.coef.T + self.intercept  # (m, K)
        rows = np.arange(m)
        if cfg.mode == "squarecb":
            best = mu.argmax(axis=1)
            p = 1.0 / (k + self.gamma_t() * (mu[rows, best][:, None] - mu))
            p[rows, best] = 0.0
            p[rows, best] = 1.0 - p.sum(axis=1)
            return p
        if cfg.mode == "egreedy":
            p = np.full((m, k), cfg.epsilon / k)
            p[rows, mu.argmax(axis=1)] += 1.0 - cfg.epsilon
            return p
        xt = np.hstack([X, np.ones((m, 1))])
        sd = np.sqrt(np.maximum(np.einsum("mi,kij,mj->mk", xt, self.cov, xt), 0.0))
        if cfg.mode == "linucb":
            p = np.zeros((m, k))
            p[rows, (mu + cfg.ucb_alpha * sd).argmax(axis=1)] = 1.0
            return p
        if cfg.mode == "lints":
            return np.vstack([_thompson_probabilities(mu[i], cfg.ts_scale * sd[i]) for i in range(m)])
        raise _unhandled(cfg.mode, "_rule_probabilities_batch")

    def decide_batch(self, X: np.ndarray, floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`decide` for the rows of ``X`` (shape ``(m, d)``), in row order: arm indices ``(m,)`` (int) and
        exact propensities ``(m,)`` (drawn from :meth:`probabilities_batch` ``(X, floor)``).

        The draws are ``m`` uniform numbers from the same generator, in row order (``rng.random(m)`` yields the
        numbers ``m`` calls of ``rng.random()`` would), and each row's arm is picked from its probability vector
        by the same cumulative rule, so a batch decides what the same rows decided one by one would (up to the
        last bit of the matrix product's rounding).
        """
        p = self.probabilities_batch(X, floor)
        m = p.shape[0]
        draws: np.ndarray = np.asarray(self.rng.random(size=m), dtype=np.float64)
        below = draws[:, None] < np.cumsum(p, axis=1)
        arms = np.where(below.any(axis=1), below.argmax(axis=1), self.k - 1)
        rows = np.arange(m)
        for i in np.flatnonzero(p[rows, arms] <= 0.0):  # a draw at a float boundary never lands on an impossible arm
            while p[i, arms[i]] <= 0.0:
                arms[i] -= 1
        return arms, p[rows, arms]

    # --- learning ----------------------------------------------------------------------------------------------
    def update(
        self,
        X: np.ndarray,
        arms: np.ndarray,
        rewards: np.ndarray,
        weights: np.ndarray | None = None,
        *,
        forget: bool = True,
    ) -> None:
        """Learn from outcomes in arrival order: features ``(n, d)``, arm indices ``(n,)``, rewards ``(n,)``.

        ``weights`` (shape ``(n,)``, default 1) scale each row (importance
        weights for logged data). With ``forget`` (online), older statistics
        are discounted by γ per outcome; offline warm-start rows are added
        without forgetting.

        Raises
        ------
        ValueError
            On shape mismatch, an arm index out of range, or non-finite values.
        """
        X = np.asarray(X, dtype=np.float64).reshape(-1, self.d)
        a = np.asarray(arms, dtype=np.int64).reshape(-1)
        r = np.asarray(rewards, dtype=np.float64).reshape(-1)
        w = np.ones(len(r)) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
        n = X.shape[0]
        if not (len(a) == len(r) == len(w) == n):
            raise ValueError("X, arms, rewards and weights must have the same length")
        if n == 0:
            return
        if np.any((a < 0) | (a >= self.k)):
            raise ValueError("arm index out of range")
        if not (np.all(np.isfinite(X)) and np.all(np.isfinite(r)) and np.all(np.isfinite(w)) and np.all(w >= 0)):
            raise ValueError("features, rewards and weights must be finite (weights >= 0)")
        g = self.config.forgetting if forget else 1.0
        Xt = np.hstack([X, np.ones((n, 1))])
        self.n_total = self.n_total * g**n + float((g ** np.arange(n, dtype=np.float64)).sum())
        for arm in range(self.k):
            m = a == arm
            count = int(m.sum())
            if count == 0:
                continue
            decay = g ** np.arange(count - 1, -1, -1, dtype=np.float64)  # the arm's i-th row ages count-1-i
            Xa, wa = Xt[m], w[m] * decay
            total = g**count
            self.S[arm] = total * self.S[arm] + (Xa * wa[:, None]).T @ Xa
            self.u[arm] = total * self.u[arm] + (wa * r[m]) @ Xa
            self.n[arm] = total * self.n[arm] + float(wa.sum())
        self.outcomes += n
        self._refresh()


def _unhandled(mode: str, method: str) -> NotImplementedError:
    """The error of a mode listed in :data:`MODES` that a rule method has no branch for (never a silent fallback to
    another rule: the logged propensities would be another rule's)."""
    return NotImplementedError(f"linear bandit mode {mode!r} is in MODES but LinearBandit.{method} has no rule for it")


def _pick(p: list[float], draw: float) -> tuple[int, float]:
    """The arm a uniform ``draw`` in [0, 1) picks from the probabilities ``p`` (the first whose cumulative sum
    exceeds it, else the last) and its probability; a draw at a float boundary never lands on an impossible arm."""
    acc, arm = 0.0, len(p) - 1
    for a, pa in enumerate(p):
        acc += pa
        if draw < acc:
            arm = a
            break
    while p[arm] <= 0.0:
        arm -= 1
    return arm, p[arm]


def _thompson_probabilities(mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """P(arm a has the largest of independent N(μ_a, sd_a²)); shape ``(K,)``, sums to 1."""
    k = len(mu)
    if np.all(sd <= 1e-12):
        p = np.zeros(k)
        p[int(np.argmax(mu))] = 1.0
        return p
    if k == 2:
        z = (mu[0] - mu[1]) / math.sqrt(float(sd[0] ** 2 + sd[1] ** 2))
        p0 = 0.5 * math.erfc(-z / math.sqrt(2.0))
        return np.array([p0, 1.0 - p0])
    # Gauss-Hermite: ∫ φ(z) Π_{b≠a} Φ((μ_a + sd_a z − μ_b)/sd_b) dz, sd_b = 0 treated as a step.
    from scipy.special import ndtr

    p = np.zeros(k)
    for a in range(k):
        if sd[a] <= 1e-12:
            t = np.full_like(_GH_NODES, mu[a])
        else:
            t = mu[a] + sd[a] * _GH_NODES
        prod = np.ones_like(_GH_NODES)
        for b in range(k):
            if b == a:
                continue
            if sd[b] <= 1e-12:
                prod *= (t > mu[b]).astype(np.float64)
            else:
                prod *= ndtr((t - mu[b]) / sd[b])
        p[a] = float(_GH_WEIGHTS @ prod) / math.sqrt(2.0 * math.pi)
    return p / p.sum()
