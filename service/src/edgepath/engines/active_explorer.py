# ruff: noqa: N803  (X: design matrix, scikit-learn convention)
"""The paper's ActiveExplorer (Alzadjali et al., Algorithm 1) over per-arm SGD logistic oracles (pure engine).

Algorithm 1 of the paper, for a context ``x`` and per-arm oracles
``f̂_q(x) = σ(β_q·x + β_q0)`` (``SGDClassifier(loss="log_loss")``, one per arm,
Bernoulli rewards):

* with probability ``p``: the *active-learning* choice ``argmax_q w_q`` with
  ``w_q = (1 − f̂_q(x))·‖g_q(x, 0)‖ + f̂_q(x)·‖g_q(x, 1)‖``, where ``g_q(x, r)``
  is the gradient of arm ``q``'s logistic loss at label ``r`` with respect to
  its coefficients and intercept, ``g_q(x, r) = (f̂_q(x) − r)·[x, 1]``
  (so ``‖g_q(x, 0)‖ = f̂_q‖[x,1]‖``, ``‖g_q(x, 1)‖ = (1 − f̂_q)‖[x,1]‖`` and
  ``w_q = 2 f̂_q (1 − f̂_q) ‖[x,1]‖``: the arm whose oracle is least sure);
* otherwise (probability ``1 − p``): the greedy choice ``argmax_q f̂_q(x)``.

**Which branch is p.** The paper's text (§V-A, policy 6) says the policy
"can control the probability p of selecting an action according to active
learning criteria w_q", while its Algorithm 1 box writes "with probability p:
argmax f̂ … otherwise: w_q". This implementation follows the *text*: ``p`` is
the probability of the active-learning branch (as in contextualbandits'
``explore_prob``), decayed after each decision by ``decay`` (``p ← p·decay``).

Not the library's variant: contextualbandits' ``ActiveExplorer`` scores arms
by ``f̂·Σ‖g‖²`` — with one shared context and logistic oracles that rises with
``f̂``, so its "explore" branch lands on the greedy arm once fitted (issue 15).

Propensity (exact): with ``g`` the greedy arm and ``q*`` the active arm
(ties → lowest index), ``P(a) = (1 − p)·1[a = g] + p·1[a = q*]`` — 1 when the
two coincide. Until every arm's oracle has seen an outcome, the choice is
uniform (``1/K``).

Decisions run in numpy from the oracles' ``coef_``/``intercept_``, read once
per model version (after each :meth:`PaperActiveExplorer.partial_fit`).
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from sklearn.linear_model import SGDClassifier


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # = 1/(1+e^{-z}), overflow-free


class PaperActiveExplorer:
    """Algorithm 1 of Alzadjali et al. with exact propensities (see module docstring).

    Parameters
    ----------
    oracles:
        One ``SGDClassifier(loss="log_loss")`` per arm (fitted or not), in arm order; K ≥ 2.
    explore_prob:
        Initial p, probability of the active-learning branch, in [0, 1].
    decay:
        Multiplier of p after every decision (None = no decay).
    seed:
        Seed of the branch draws.

    Raises
    ------
    ValueError
        For fewer than two oracles or p outside [0, 1].
    """

    #: What changes as it decides (p decays, the branch draws advance the generator): carried from the serving copy
    #: to a refitted clone by :meth:`carry_exploration_from`.
    EXPLORATION_STATE: ClassVar[tuple[str, ...]] = ("explore_prob", "random_state")

    def __init__(self, oracles: list[SGDClassifier], explore_prob: float, decay: float | None, seed: int) -> None:
        if len(oracles) < 2:
            raise ValueError("need one oracle per arm, at least two arms")
        if not 0.0 <= explore_prob <= 1.0:
            raise ValueError("explore_prob must be in [0, 1]")
        self.oracles = list(oracles)
        self.explore_prob = float(explore_prob)
        self.decay = decay
        self.random_state = np.random.default_rng(seed)
        self.seen = np.array([hasattr(o, "coef_") for o in self.oracles], dtype=bool)
        self._snapshot()

    # --- compatibility with the contextualbandits attributes the tools read --------------------------------------
    @property
    def _oracles(self) -> SimpleNamespace:
        return SimpleNamespace(algos=self.oracles)

    @property
    def is_fitted(self) -> bool:
        return bool(np.all(self.seen))

    def _snapshot(self) -> None:
        """Read coefficients once per model version: ``coef`` (K, d), ``intercept`` (K,)."""
        if self.is_fitted:
            self.coef = np.vstack([np.asarray(o.coef_, dtype=np.float64).reshape(-1) for o in self.oracles])
            self.intercept = np.asarray([float(np.ravel(o.intercept_)[0]) for o in self.oracles])
        else:
            self.coef, self.intercept = np.zeros((0, 0)), np.zeros(0)

    # --- deciding -------------------------------------------------------------------------------------------------
    def scores(self, x: np.ndarray) -> np.ndarray:
        """``f̂_q(x)`` of every arm, shape ``(K,)`` (the oracles' P(reward = 1))."""
        return _sigmoid(self.coef @ x + self.intercept)

    def active_weights(self, x: np.ndarray) -> np.ndarray:
        """Algorithm 1's ``w_q`` for every arm, shape ``(K,)``."""
        f = self.scores(x)
        norm = float(np.sqrt(x @ x + 1.0))  # ‖[x, 1]‖
        return (1.0 - f) * (f * norm) + f * ((1.0 - f) * norm)

    def branch_arms(self, x: np.ndarray) -> tuple[int, int]:
        """(greedy arm, active-learning arm) for features ``x`` (shape ``(d,)``)."""
        return int(np.argmax(self.scores(x))), int(np.argmax(self.active_weights(x)))

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """Exact probability of each arm at the current p; shape ``(K,)``, sums to 1."""
        k = len(self.oracles)
        if not self.is_fitted:
            return np.full(k, 1.0 / k)
        greedy, active = self.branch_arms(x)
        p = np.zeros(k)
        p[greedy] += 1.0 - self.explore_prob
        p[active] += self.explore_prob
        return p

    def decide(self, x: np.ndarray) -> tuple[int, float]:
        """Choose an arm for ``x``; returns ``(arm index, exact propensity)`` and decays p."""
        k = len(self.oracles)
        if not self.is_fitted:
            arm = int(self.random_state.integers(k))
            return arm, 1.0 / k
        probs = self.probabilities(x)
        greedy, active = self.branch_arms(x)
        arm = active if self.random_state.random() < self.explore_prob else greedy
        if self.decay is not None:
            self.explore_prob *= self.decay
        return arm, float(probs[arm])

    def predict(self, X: np.ndarray, exploit: bool = False) -> np.ndarray:
        """Greedy arms for rows of ``X`` ``(n, d)`` when ``exploit``, else one decision per row."""
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        if exploit and self.is_fitted:
            return np.argmax(X @ self.coef.T + self.intercept, axis=1)
        return np.asarray([self.decide(x)[0] for x in X])

    # --- learning -------------------------------------------------------------------------------------------------
    def partial_fit(self, X: np.ndarray, a: np.ndarray, r: np.ndarray, sample_weight: Any = None) -> None:
        """One ``partial_fit`` per arm on that arm's rows (``classes=[0, 1]``), then re-read coefficients."""
        X = np.asarray(X, dtype=np.float64)
        a = np.asarray(a).astype(np.int64).reshape(-1)
        r = np.asarray(r, dtype=np.float64).reshape(-1)
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).reshape(-1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for q, oracle in enumerate(self.oracles):
                m = a == q
                if np.any(m):
                    oracle.partial_fit(X[m], r[m], classes=[0, 1], sample_weight=None if w is None else w[m])
                    self.seen[q] = True
        self._snapshot()

    def carry_exploration_from(self, live: PaperActiveExplorer) -> None:
        """Adopt the serving copy's :attr:`EXPLORATION_STATE` (its decayed p and its generator)."""
        for attr in self.EXPLORATION_STATE:
            setattr(self, attr, getattr(live, attr))
