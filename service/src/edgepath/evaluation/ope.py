# ruff: noqa: N803  (X: design matrix, scikit-learn convention)
"""Off-policy evaluation of primary-path policies on a decision log (issue 18, ``edgepath eval ope``).

Why home-made: Open Bandit Pipeline (``obp`` 0.4.1) would install here only with PyTorch and the
CUDA stack (> 2 GB) for estimators that are a few lines of numpy each; vw-estimators has no wheel
for this Python. The estimators below follow their papers exactly; their formulas are in the
docstrings.

Protocol
--------
1. Read the log (the ``edgepath log export`` format, :func:`edgepath.training.offline.read_decision_log`);
   refuse it when a propensity is missing, not in (0, 1], or when the log is *degenerate*: every
   propensity is 1 (the logging policy never explored, so no other policy is identifiable).
   Decisions whose arm set is not WiFi × LTE are left out and counted.
2. Split the rows with ``numpy.random.default_rng(seed)`` into a *model* part (``model_fraction``,
   default ½) and an *evaluation* part. The direct model of DR and every learned candidate policy
   are fitted on the model part only; every estimate is computed on the evaluation part (Dudík et
   al. 2011 fit the reward model on data disjoint from the evaluation rows to keep DR unbiased
   when propensities are right). DR's reward model is per-arm gradient-boosted trees by default
   (:class:`BoostedDirectModel`; ``reward_model="ridge"`` for the linear :class:`DirectModel`).
3. Each estimate gets a 95% percentile-bootstrap interval (``n_bootstrap`` resamples of the
   evaluation rows, Efron & Tibshirani 1993 §13.3; DR's reward model is fitted once on the model
   part, the resamples are of the evaluation rows' terms), a normal (Wald) interval
   (:func:`wald_interval`), and the effective sample size of its weights. The reported ``ci95`` is DR's
   Wald interval and IPS's and SNIPS's percentile interval (:data:`REPORTED_INTERVAL`, chosen on ground
   truth). On the service's own log the percentile interval of DR under-covered: where a few heavy rows
   dominate the mean, each row's count in a resample is ~Poisson(1), so the resampled means are lumpy and
   the percentile interval reaches about one heavy row's worth away from it, where the Wald interval reaches
   1.96 standard errors.

   The BCa interval (:func:`bca_interval`: bias-corrected and accelerated, Efron 1987; Efron &
   Tibshirani 1993 §14.3, acceleration from the jackknife, :func:`jackknife`) is the standard
   second-order-accurate alternative for a skewed statistic such as an importance-weighted mean
   (Thomas, Theocharous & Ghavamzadeh, "High Confidence Policy Improvement", ICML 2015, use it for
   importance-sampling estimates). ``edgepath eval ope-truth`` measures both against ground truth;
   on the service's own log BCa covered the truth *less* often than the percentile interval (README,
   "Ground truth"), so it is not reported. No interval computed from the rows can represent heavy rows
   the evaluation part does not contain.
4. ``adr``, the adaptively-weighted doubly robust estimator (:func:`adaptive_dr`; Hadad, Hirshberg, Zhan,
   Wager & Athey, PNAS 2021; for a policy's value on contextual-bandit logs, Zhan, Hadad, Hirshberg &
   Athey, KDD 2021) has its own normal 95% interval, valid for *adaptively collected* rows: the log is
   read in its order (the decision log is appended in join order; :func:`split` keeps that order
   within each part), its reward model and weights use only the rows before each evaluated row.
5. ``cadr_exact`` (:func:`contextual_adaptive_dr`, the same paper's *contextual* weights) needs the logging
   policy of every time at every context, which a decision log does not hold: only ``edgepath eval ope-truth``
   reports it (its harness runs the logging policy and keeps every model version).

Rewards: ``utility`` (default; :func:`edgepath.engines.reward.utility` of the reported throughput,
latency and loss, what the ``ridge_*`` learners maximise) or ``bernoulli`` (the logged 0/1 reward).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgepath.engines.primary_path import POLICIES, TrainingSample, UtilityConfig
from edgepath.training.offline import ARMS, DecisionLogError, OfflineConfig, read_decision_log, train_offline

#: Candidate policies that need no training (π(a|x) fixed); every registry policy is also a candidate.
FIXED_POLICIES: tuple[str, ...] = ("wifi_first", "lte_first", "uniform")
ESTIMATORS: tuple[str, ...] = ("ips", "snips", "dr")
"""The estimators with a percentile-bootstrap interval; ``adr`` (:func:`adaptive_dr`) is reported beside them."""
REPORTED_ESTIMATORS: tuple[str, ...] = (*ESTIMATORS, "adr")
"""Every estimator ``eval ope`` and ``eval ope-truth`` report, in table order."""
REPORTED_INTERVAL: dict[str, str] = {"ips": "percentile", "snips": "percentile", "dr": "normal"}
"""The interval ``eval ope`` reports as ``ci95`` per bootstrap estimator: the one that covered the true value more
often in ``eval ope-truth`` (README, "Ground truth"). On the held-out seeds DR's Wald interval covered ≥ 96 % in
every cell, where its percentile interval fell to 87 %; for SNIPS the percentile interval covered more; for IPS
neither did consistently, and the percentile interval stays."""


class LogRefused(ValueError):
    """The log cannot support off-policy evaluation (the message says why and where)."""


@dataclass(frozen=True)
class BanditLog:
    """Logged bandit data on the WiFi × LTE arm set.

    ``X`` features ``(n, d)``; ``actions`` chosen arm index ``(n,)`` in :data:`ARMS` order;
    ``propensity`` ``(n,)`` in (0, 1]; ``reward`` ``(n,)``; ``samples`` the rows as read (training
    learned candidates).
    """

    X: np.ndarray
    actions: np.ndarray
    propensity: np.ndarray
    reward: np.ndarray
    samples: tuple[TrainingSample, ...]
    skipped_other_arm_sets: int = 0

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def subset(self, idx: np.ndarray) -> BanditLog:
        return BanditLog(
            self.X[idx],
            self.actions[idx],
            self.propensity[idx],
            self.reward[idx],
            tuple(self.samples[i] for i in idx) if self.samples else (),
        )


def check_propensities(path: Path) -> None:
    """Refuse a log with a missing propensity (naming the line) before the general reader runs.

    Raises
    ------
    LogRefused
    """
    for lineno, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise LogRefused(f"line {lineno}: not JSON ({exc})") from exc
        if not isinstance(obj, dict) or obj.get("propensity") is None:
            raise LogRefused(
                f"line {lineno}: no propensity. Off-policy evaluation needs the probability the logging "
                "policy gave the chosen arm (EdgePath's decision log records it)"
            )


def samples_to_log(samples: Sequence[TrainingSample], reward: str = "utility", skipped: int = 0) -> BanditLog:
    """A :class:`BanditLog` from WiFi × LTE samples; ``reward`` is ``utility`` or ``bernoulli``.

    Raises
    ------
    LogRefused
        No usable row, or every propensity is 1 (degenerate: the logging policy never explored).
    """
    if reward not in ("utility", "bernoulli"):
        raise ValueError("reward must be 'utility' or 'bernoulli'")
    if not samples:
        raise LogRefused("no WiFi × LTE decision in the log")
    utility = UtilityConfig()
    X = np.asarray([s.features for s in samples], dtype=np.float64)
    a = np.asarray([s.arm_index for s in samples], dtype=np.int64)
    p = np.asarray([s.propensity for s in samples], dtype=np.float64)
    if reward == "utility":
        r = np.asarray(
            [
                utility(s.throughput_bps, s.latency_ms, s.loss) if s.throughput_bps is not None else float(s.reward)
                for s in samples
            ],
            dtype=np.float64,
        )
    else:
        r = np.asarray([s.reward for s in samples], dtype=np.float64)
    if not np.all((p > 0.0) & (p <= 1.0)):
        raise LogRefused("propensities must be in (0, 1]")
    if np.all(p >= 1.0 - 1e-12):
        raise LogRefused(
            "degenerate propensities: every one is 1, so the logging policy never explored and no other "
            "policy's value is identifiable from this log (log with an exploring policy, e.g. ridge_squarecb "
            "or apprentice mode with --explore > 0)"
        )
    return BanditLog(X, a, p, r, tuple(samples), skipped)


def load_log(path: Path, reward: str = "utility") -> BanditLog:
    """Read and check a decision log (see module docstring).

    Raises
    ------
    LogRefused
        Missing, out-of-range or degenerate propensities, malformed lines (message names the line).
    """
    check_propensities(path)
    try:
        samples = read_decision_log(path)
    except DecisionLogError as exc:
        raise LogRefused(str(exc)) from exc
    used = [s for s in samples if tuple(s.arms) == ARMS]
    return samples_to_log(used, reward, skipped=len(samples) - len(used))


# --------------------------------------------------------------------------------------------- policies
PolicyFn = Callable[[np.ndarray], np.ndarray]
"""Candidate policy: features ``(n, d)`` → action probabilities ``(n, K)`` (rows sum to 1)."""


def one_hot(actions: np.ndarray, k: int = len(ARMS)) -> np.ndarray:
    """``(n,)`` arm indices → ``(n, k)`` deterministic policy matrix."""
    out = np.zeros((actions.shape[0], k))
    out[np.arange(actions.shape[0]), actions] = 1.0
    return out


def fixed_policy(name: str) -> PolicyFn:
    """``wifi_first``, ``lte_first`` (always that arm) or ``uniform`` (½, ½)."""
    if name == "wifi_first":
        return lambda X: one_hot(np.zeros(X.shape[0], dtype=np.int64))
    if name == "lte_first":
        return lambda X: one_hot(np.ones(X.shape[0], dtype=np.int64))
    if name == "uniform":
        return lambda X: np.full((X.shape[0], len(ARMS)), 1.0 / len(ARMS))
    raise ValueError(f"unknown fixed policy {name!r}")


def learned_policy(name: str, train: BanditLog, seed: int = 0) -> PolicyFn:
    """Registry policy ``name`` trained offline on ``train`` (IPS-weighted rows, :func:`train_offline`),
    evaluated as its *greedy* choice (argmax of its estimates: what it serves once exploration is small)."""
    model = train_offline([], list(train.samples), OfflineConfig(policy=name, seed=seed))
    return lambda X: one_hot(model.greedy_arms(X))


def candidate(name: str, train: BanditLog, seed: int = 0) -> PolicyFn:
    """A fixed policy or a registry policy trained on ``train``.

    Raises
    ------
    ValueError
        Unknown name.
    """
    if name in FIXED_POLICIES:
        return fixed_policy(name)
    if name in POLICIES:
        return learned_policy(name, train, seed)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join((*FIXED_POLICIES, *POLICIES))}")


# ---------------------------------------------------------------------------------------- reward model
@dataclass(frozen=True)
class DirectModel:
    """Per-arm ridge regression q̂(x, a) of the reward on the features (the DM/DR reward model).

    Closed form ``β_a = (X_aᵀX_a + λI)⁻¹ X_aᵀ r_a`` with an unpenalised intercept (centred columns),
    fitted on the rows where arm ``a`` was chosen.
    """

    coef: np.ndarray  # (K, d)
    intercept: np.ndarray  # (K,)

    @classmethod
    def fit(cls, log: BanditLog, ridge_lambda: float = 1.0) -> DirectModel:
        k, d = len(ARMS), log.X.shape[1]
        coef, intercept = np.zeros((k, d)), np.zeros(k)
        overall = float(log.reward.mean()) if len(log) else 0.0
        for a in range(k):
            rows = log.actions == a
            if rows.sum() < 2:
                intercept[a] = overall
                continue
            Xa, ra = log.X[rows], log.reward[rows]
            mx, mr = Xa.mean(axis=0), ra.mean()
            Xc = Xa - mx
            coef[a] = np.linalg.solve(Xc.T @ Xc + ridge_lambda * np.eye(d), Xc.T @ (ra - mr))
            intercept[a] = mr - mx @ coef[a]
        return cls(coef, intercept)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """q̂ ``(n, K)``."""
        return X @ self.coef.T + self.intercept


@dataclass(frozen=True)
class BoostedDirectModel:
    """Per-arm gradient-boosted regression trees q̂(x, a): DR's default reward model.

    scikit-learn's ``HistGradientBoostingRegressor`` (its default hyper-parameters: 100 trees, 31 leaves,
    learning rate 0.1, at least 20 rows per leaf; early stopping off and ``random_state`` fixed, so a fit is
    deterministic), one per arm, fitted on the rows where arm ``a`` was chosen (squared error). An arm
    with fewer than 2 such rows predicts the log's mean reward.

    Why not the linear :class:`DirectModel`: a log written by an adaptive learner holds an arm's rewards mostly
    where the learner chose it, and a linear model of a nonlinear reward extrapolates from there with a
    systematic error the importance-weighted correction must repair through a handful of rows drawn at
    propensity 0.01–0.05. Measured on the service's own logs of paired real data (the ``edgepath eval ope-truth``
    harness, development seeds 5000–5039, README "Ground truth"): the ridge's direct estimate of ``lte_first`` was
    low by 0.008 (15% of the value), the trees' by 0.0002. DR's bias is the product of the reward model's and the
    propensities' errors (Dudík, Langford & Li, ICML 2011, Theorem 1), and its variance grows with the residuals the
    weights multiply (ibid., Theorem 2): a better reward model shrinks what the rare heavy rows must carry.

    Fits and predictions run on one OpenMP thread (threadpoolctl): the trees are the same bit for bit (checked on the
    test's log), a 6,000-row fit took 0.62 s against 0.86 s on this 2-core machine's every core, and OpenMP's spinning
    threads on cores that other processes keep busy (an edge node's service, or two test suites at once) made the
    same fit take over 60 s in one run.
    """

    models: tuple[Any, ...]  # per arm: a fitted regressor, or a float (constant prediction)

    @classmethod
    def fit(cls, log: BanditLog, seed: int = 0) -> BoostedDirectModel:
        from sklearn.ensemble import HistGradientBoostingRegressor
        from threadpoolctl import threadpool_limits

        overall = float(log.reward.mean()) if len(log) else 0.0
        models: list[Any] = []
        with threadpool_limits(limits=1, user_api="openmp"):
            for a in range(len(ARMS)):
                rows = log.actions == a
                if rows.sum() < 2:
                    models.append(overall)
                    continue
                model = HistGradientBoostingRegressor(random_state=seed, early_stopping=False)
                models.append(model.fit(log.X[rows], log.reward[rows]))
        return cls(tuple(models))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """q̂ ``(n, K)``."""
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="openmp"):
            return np.column_stack(
                [np.full(X.shape[0], m) if isinstance(m, float) else m.predict(X) for m in self.models]
            )


DR_FOLDS = 1
"""Cross-fitting folds of DR's reward model (:func:`cross_fitted_q`; 1 = one model from the model part)."""
REWARD_MODELS: tuple[str, ...] = ("gbm", "ridge")
"""DR's reward models: ``gbm`` (:class:`BoostedDirectModel`, the default) or ``ridge`` (:class:`DirectModel`)."""


def fit_reward_model(log: BanditLog, kind: str = "gbm") -> BoostedDirectModel | DirectModel:
    """DR's reward model ``kind`` (one of :data:`REWARD_MODELS`) fitted on ``log``.

    Raises
    ------
    ValueError
        Unknown ``kind``.
    """
    if kind == "gbm":
        return BoostedDirectModel.fit(log)
    if kind == "ridge":
        return DirectModel.fit(log)
    raise ValueError(f"unknown reward model {kind!r}; choose from {', '.join(REWARD_MODELS)}")


def cross_fitted_q(
    log: BanditLog, model_idx: np.ndarray, eval_idx: np.ndarray, kind: str = "gbm", folds: int = 1
) -> np.ndarray:
    """DR's reward-model predictions q̂ at the evaluation rows, ``(len(eval_idx), K)``; no row's q̂ saw that row.

    ``folds = 1``: one model fitted on the model part ``model_idx`` (Dudík, Langford & Li, ICML 2011, §4: the
    reward model from data disjoint from the evaluated rows). ``folds = k ≥ 2`` (*cross-fitting*, Chernozhukov et
    al., "Double/debiased machine learning", Econometrics Journal 2018, Definition 3.1; for DR policy evaluation,
    Kallus & Uehara, JMLR 2020): the evaluation rows are dealt into ``k`` folds by position (row ``j`` of
    ``eval_idx`` into fold ``j mod k``, so each fold spans the whole log in its order), and fold ``f``'s q̂ comes
    from a model fitted on the model part plus the other ``k − 1`` folds. Each row's q̂ is still out of sample, and
    each model sees ``(1 − f_eval/k)`` of the log instead of the model part alone: with ``k = 2`` and a ½ split, ¾
    of the log. ``kind`` as :func:`fit_reward_model`.

    Raises
    ------
    ValueError
        ``folds`` below 1, or an unknown ``kind``.
    """
    if folds < 1:
        raise ValueError(f"folds must be >= 1, got {folds}")
    if folds == 1:
        return fit_reward_model(log.subset(model_idx), kind).predict(log.X[eval_idx])
    q = np.empty((len(eval_idx), len(ARMS)))
    position = np.arange(len(eval_idx))
    for f in range(folds):
        held = position % folds == f
        rows = np.sort(np.concatenate([model_idx, eval_idx[~held]]))
        q[held] = fit_reward_model(log.subset(rows), kind).predict(log.X[eval_idx[held]])
    return q


# ------------------------------------------------------------------------------------------ estimators
def ips_terms(pi: np.ndarray, log: BanditLog) -> tuple[np.ndarray, np.ndarray]:
    """Importance weights ``w_i = π(a_i|x_i) / p_i`` and ``w_i r_i``, each ``(n,)``."""
    n = len(log)
    w = pi[np.arange(n), log.actions] / log.propensity
    return w, w * log.reward


def dr_terms(pi: np.ndarray, log: BanditLog, q: np.ndarray) -> np.ndarray:
    """Per-row doubly robust terms ``Σ_a π(a|x_i) q̂(x_i,a) + w_i (r_i − q̂(x_i,a_i))``, ``(n,)``.

    Dudík, Langford & Li, "Doubly Robust Policy Evaluation and Learning", ICML 2011, Eq. (2): unbiased
    when either the propensities or the reward model q̂ are correct.
    """
    n = len(log)
    w, _ = ips_terms(pi, log)
    return (pi * q).sum(axis=1) + w * (log.reward - q[np.arange(n), log.actions])


def estimate(name: str, pi: np.ndarray, log: BanditLog, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
    """Estimator ``name`` on the rows ``idx`` (``(B, n)`` bootstrap indices, or all rows); shape ``(B,)`` or ``()``.

    * ``ips``: V̂ = (1/n) Σ w_i r_i (Horvitz & Thompson 1952; for bandits, Li et al. WSDM 2011).
    * ``snips``: V̂ = Σ w_i r_i / Σ w_i (Swaminathan & Joachims, "The Self-Normalized Estimator for
      Counterfactual Learning", NeurIPS 2015, Eq. 3).
    * ``dr``: V̂ = (1/n) Σ DR_i (:func:`dr_terms`).
    """
    w, wr = ips_terms(pi, log)
    if name == "ips":
        terms = wr
    elif name == "dr":
        terms = dr_terms(pi, log, q)
    elif name == "snips":
        if idx is None:
            return np.asarray(wr.sum() / w.sum() if w.sum() > 0 else 0.0)
        den = w[idx].sum(axis=-1)
        return np.where(den > 0, wr[idx].sum(axis=-1) / np.where(den > 0, den, 1.0), 0.0)
    else:
        raise ValueError(f"unknown estimator {name!r}")
    return np.asarray(terms.mean()) if idx is None else terms[idx].mean(axis=-1)


def wald_interval(
    name: str, pi: np.ndarray, log: BanditLog, q: np.ndarray, alpha: float = 0.05
) -> tuple[float, float, float]:
    """Estimator ``name``'s value with its normal (Wald) interval: ``(estimate, low, high)``, ``V̂ ± z_{1−α/2}·SE``.

    * ``ips``, ``dr``: means of per-row terms, ``SE = s/√n`` with ``s`` the terms' sample standard deviation
      (``ddof=1``); the interval the DR literature states with the estimator (Dudík, Erhan, Langford & Li,
      "Doubly Robust Policy Evaluation and Optimization", Statistical Science 29(4) 2014, §4: DR is a mean of
      independent terms given the contexts, asymptotically normal).
    * ``snips``: a ratio of means; delta-method ``SE = √(Σ w_i² (r_i − V̂)²) / Σ w_i`` (Owen, *Monte Carlo
      theory, methods and examples*, 2013, §9.2, the self-normalised importance-sampling variance estimate).

    ``pi`` ``(n, K)``, ``q`` ``(n, K)`` (used by ``dr`` only). Fewer than 2 rows, or SNIPS with ``Σ w = 0``: the
    interval collapses to the estimate. Raises ``ValueError`` for an unknown estimator.
    """
    from scipy.special import ndtri

    value = float(estimate(name, pi, log, q))
    n = len(log)
    w, wr = ips_terms(pi, log)
    if name == "snips":
        den = float(w.sum())
        se = float(np.sqrt((w * w * (log.reward - value) ** 2).sum())) / den if den > 0 else 0.0
    else:
        terms = wr if name == "ips" else dr_terms(pi, log, q)
        se = float(terms.std(ddof=1)) / float(np.sqrt(n)) if n >= 2 else 0.0
    half = float(ndtri(1 - alpha / 2)) * se
    return value, value - half, value + half


def effective_sample_size(w: np.ndarray) -> float:
    """Kish's effective sample size ``(Σ w)² / Σ w²`` of importance weights (Kish 1965, §11.7)."""
    s2 = float((w * w).sum())
    return float(w.sum() ** 2 / s2) if s2 > 0 else 0.0


def jackknife(name: str, pi: np.ndarray, log: BanditLog, q: np.ndarray) -> np.ndarray:
    """Leave-one-out values of estimator ``name`` on ``log``, shape ``(n,)`` (for BCa's acceleration).

    IPS and DR are means of per-row terms (DR's model ``q`` stays fixed), so the i-th value is
    ``(Σ t − t_i)/(n − 1)``; SNIPS's is ``(Σ w r − w_i r_i)/(Σ w − w_i)`` (0 where the denominator is 0).
    """
    n = len(log)
    w, wr = ips_terms(pi, log)
    if name == "snips":
        den = w.sum() - w
        return np.where(den > 0, (wr.sum() - wr) / np.where(den > 0, den, 1.0), 0.0)
    if name == "ips":
        terms = wr
    elif name == "dr":
        terms = dr_terms(pi, log, q)
    else:
        raise ValueError(f"unknown estimator {name!r}")
    return (terms.sum() - terms) / max(n - 1, 1)


def bca_interval(boots: np.ndarray, theta: float, jack: np.ndarray, alpha: float = 0.05) -> tuple[float, float]:
    """Bias-corrected and accelerated bootstrap interval (Efron & Tibshirani 1993, §14.3).

    ``boots`` the ``(B,)`` bootstrap replications, ``theta`` the estimate on all rows, ``jack`` its ``(n,)``
    leave-one-out values. Bias correction ``z₀ = Φ⁻¹(#{θ*_b < θ̂}/B)``, acceleration
    ``a = Σ (θ̄₍.₎ − θ₍ᵢ₎)³ / (6 [Σ (θ̄₍.₎ − θ₍ᵢ₎)²]^{3/2})``; the interval is the bootstrap quantiles at
    ``Φ(z₀ + (z₀ + z_q)/(1 − a(z₀ + z_q)))`` for ``q = α/2, 1 − α/2`` (the book's formulas, §14.3). A degenerate
    case (all replications equal) gives ``(θ̂, θ̂)``; ``z₀`` is clipped to ±4 when every replication falls on
    one side of θ̂.
    """
    from scipy.special import ndtr, ndtri

    boots = np.asarray(boots, dtype=np.float64)
    if boots.size == 0 or float(boots.max() - boots.min()) == 0.0:
        return float(theta), float(theta)
    share = float((boots < theta).sum()) / boots.size
    z0 = float(np.clip(ndtri(share), -4.0, 4.0))
    d = jack.mean() - jack
    s2 = float((d * d).sum())
    a = float((d**3).sum()) / (6.0 * s2**1.5) if s2 > 0 else 0.0
    levels = []
    for q_ in (alpha / 2, 1 - alpha / 2):
        zq = z0 + float(ndtri(q_))
        levels.append(float(ndtr(z0 + zq / (1.0 - a * zq))))
    lo, hi = np.quantile(boots, levels)
    return float(lo), float(hi)


# ------------------------------------------------------------------- adaptively-weighted doubly robust
def logging_probabilities(log: BanditLog) -> np.ndarray:
    """The logging policy's probabilities of *both* arms at each row's context, ``(n, 2)``.

    The log records the probability ``p_t`` of the chosen arm only; on the two-arm WiFi × LTE set the other
    arm's is ``1 − p_t`` exactly (the logging distribution sums to 1), so the row's whole distribution
    ``e_t(·|x_t)`` is known. (It is not known at *other* contexts: see :func:`stablevar_weights`.)
    """
    n = len(log)
    e = np.empty((n, len(ARMS)))
    e[np.arange(n), log.actions] = log.propensity
    e[np.arange(n), 1 - log.actions] = 1.0 - log.propensity
    return e


def predictable_reward_model(log: BanditLog, ridge_lambda: float = 1.0) -> np.ndarray:
    """q̂_t(x_t, a) for every row ``t`` and arm, ``(n, K)``, fitted on the rows *before* ``t`` only.

    The same per-arm ridge as :class:`DirectModel` (unpenalised intercept; fewer than 2 earlier rows of an arm:
    the mean reward of all earlier rows, 0 before the first), refitted at every row from running sums, so
    q̂_t depends on the history alone — the condition under which the AIPW scores of :func:`adaptive_dr` are a
    martingale difference sequence (Hadad et al. 2021: "μ̂_t is estimated with data up to t − 1").
    With an intercept column ``z = (1, x)`` the centred ridge of :class:`DirectModel` is
    ``(Σ z zᵀ + λ diag(0, 1, …, 1)) β = Σ z r`` (the intercept's normal equation centres the columns).
    """
    n, d = log.X.shape
    k = len(ARMS)
    Z = np.column_stack([np.ones(n), log.X])
    pen = ridge_lambda * np.eye(d + 1)
    pen[0, 0] = 0.0
    gram = np.zeros((k, d + 1, d + 1))
    rhs = np.zeros((k, d + 1))
    count = np.zeros(k, dtype=np.int64)
    total = 0.0
    q = np.empty((n, k))
    for t in range(n):
        overall = total / t if t else 0.0
        for a in range(k):
            if count[a] < 2:
                q[t, a] = overall
            else:
                q[t, a] = Z[t] @ np.linalg.solve(gram[a] + pen, rhs[a])
        a_t = int(log.actions[t])
        gram[a_t] += np.outer(Z[t], Z[t])
        rhs[a_t] += Z[t] * log.reward[t]
        count[a_t] += 1
        total += float(log.reward[t])
    return q


def stablevar_weights(pi: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Non-contextual "StableVar" evaluation weights ``h_t``, ``(n,)`` (Zhan et al. 2021; Hadad et al. 2021).

    The paper's weight is ``h_t = (E_x[Σ_a π(a|x)² / e_t(a|x)])^{-1/2}``: the inverse square root of the
    conditional variance scale of the t-th AIPW score, so each term contributes a comparable share of the
    variance; for a deterministic π and a non-contextual design it is Hadad et al.'s ``h_t = √e_t(π)`` (the
    authors' code, github.com/gsbDBI/contextual_bandits_evaluation ``adaptive/inference.py``, ``lvdl_expected``).
    Its expectation needs the *current* logging policy e_t at every context; a decision log has e_s only at
    its own context x_s. The expectation is therefore taken over the earlier rows with their own logging
    probabilities, ``h_t = ((1/t) Σ_{s<t} Σ_a π(a|x_s)² / e_s(a|x_s))^{-1/2}`` — still predictable (the
    history only), lagging the paper's when the logging policy changes. The first row (no history) takes the
    uniform design's value ``Σ_a π(a|x_0)² · K``. An arm π uses where the logging probability is 0 makes the
    variance infinite and every later weight 0 (that policy's value is not identified there).
    """
    k = pi.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(pi > 0, pi * pi / e, 0.0)
    cond_var = ratio.sum(axis=1)
    past = np.concatenate([[(pi[0] ** 2).sum() * k], np.cumsum(cond_var)[:-1] / np.arange(1, len(cond_var))])
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(past), 1.0 / np.sqrt(past), 0.0)


def weighted_estimate(gamma: np.ndarray, h: np.ndarray) -> tuple[float, float]:
    """``Q̂ = Σ h_t Γ_t / Σ h_t`` and ``V̂ = Σ h_t² (Γ_t − Q̂)² / (Σ h_t)²`` (NaN when every weight is 0).

    Hadad et al. 2021's adaptively-weighted estimator and its variance (the authors' ``aw_estimate``, ``aw_var``).
    """
    s = float(h.sum())
    if s <= 0.0:
        return float("nan"), float("nan")
    value = float((h * gamma).sum()) / s
    return value, float((h * h * (gamma - value) ** 2).sum()) / s**2


def adaptive_dr(
    pi: np.ndarray, log: BanditLog, rows: np.ndarray, q: np.ndarray | None = None, alpha: float = 0.05
) -> dict[str, Any]:
    """Adaptively-weighted DR ("adr") of the policy ``pi`` (``(n, K)`` on *every* row of ``log``) over ``rows``.

    Hadad, Hirshberg, Zhan, Wager & Athey, "Confidence intervals for policy evaluation in adaptive experiments",
    PNAS 118(15) 2021, applied to a policy's value as in Zhan, Hadad, Hirshberg & Athey, "Off-Policy Evaluation via
    Adaptive Weighting with Data from Contextual Bandits", KDD 2021 (non-contextual weighting): ``Q̂ = Σ_{t∈rows}
    h_t Γ_t / Σ h_t`` with the policy-value AIPW scores Γ_t (Zhan et al. 2021; :func:`dr_terms`, here with a
    predictable model), the reward model q̂_t fitted on *all* rows of ``log`` before t
    (:func:`predictable_reward_model`) and the StableVar weights of :func:`stablevar_weights` (also from all rows
    before t); interval ``Q̂ ± z_{1−α/2} √V̂`` (:func:`weighted_estimate`), asymptotically valid when the rows are
    collected adaptively (the t-statistic is a martingale CLT's) given exact propensities. ``log`` must be in time
    order; ``rows`` (sorted) are the evaluation part (a seeded split, independent of the data, keeps the scores a
    martingale difference sequence).
    ``q``: :func:`predictable_reward_model` of ``log`` when already computed (it does not depend on π).
    """
    from scipy.special import ndtri

    rows = np.asarray(rows, dtype=np.int64)
    e = logging_probabilities(log)
    q = predictable_reward_model(log) if q is None else q
    gamma = dr_terms(pi, log, q)[rows]  # π(a_t|x_t)/e_t(a_t|x_t) is π(a_t|x_t)/p_t: the logged propensity
    h = stablevar_weights(pi, e)[rows]
    value, var = weighted_estimate(gamma, h)
    half = float(ndtri(1 - alpha / 2)) * float(np.sqrt(var))
    return {"estimate": value, "ci95": [value - half, value + half], "se": float(np.sqrt(var))}


def contextual_stablevar_weights(pi_rows: np.ndarray, probs_all: np.ndarray) -> np.ndarray:
    """Contextual StableVar weights ``h[t, s] = h_t(x_s) = (Σ_a π(a|x_s)² / e_t(a|x_s))^{-1/2}``, ``(T, T)``.

    ``pi_rows`` ``(T, K)``: the candidate at the T evaluated rows' contexts; ``probs_all`` ``(T, T, K)``:
    ``probs_all[t, s, a] = e_t(a|x_s)``, the logging policy that decided row t evaluated at row s's context.
    As the authors' code (github.com/gsbDBI/contextual_bandits_evaluation, ``adaptive/inference.py``,
    ``analyze``: ``lvdl_X = sqrt(1 / condVar)``), ``h = 0`` where the conditional variance ``Σ_a π²/e`` is
    ≤ 1e-6; where π plays an arm whose logging probability is 0 the variance is infinite and ``h = 0`` (an arm
    π does not play contributes 0, where the authors' ``0²/0`` would be NaN).
    """
    p = pi_rows[None, :, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        cond_var = np.where(p > 0, p * p / probs_all, 0.0).sum(axis=-1)
        return np.where(cond_var > 1e-6, 1.0 / np.sqrt(cond_var), 0.0)


def contextual_weighted_estimate(gamma: np.ndarray, h: np.ndarray) -> tuple[float, float]:
    """``Q̂ = Σ_t B_t`` and ``V̂ = Σ_t (B_t − Σ_s [h_t(x_s)/Z(x_s)] B_s)²`` with ``B_t = h_t(x_t)/Z(x_t) · Γ_t`` and
    ``Z(x) = Σ_t h_t(x)``; ``gamma`` ``(T,)``, ``h`` ``(T, T)`` (``h[t, s] = h_t(x_s)``). NaN when no context has
    ``Z > 1e-6``.

    The authors' ``calculate_continuous_X_statistics`` (gsbDBI/contextual_bandits_evaluation,
    ``adaptive/inference.py``), including its rule that a context with ``Z(x) ≤ 1e-6`` is left undivided (its
    weights are then ≤ 1e-6 themselves). With ``h_t(x) = h(x)`` for all t every weight is 1/T: the plain mean
    and ``V̂ = Σ (Γ_t − Q̂)² / T²``.
    """
    ok = h.sum(axis=0) > 1e-6
    if gamma.size == 0 or not ok.any():
        return float("nan"), float("nan")
    hz = h.copy()
    hz[:, ok] /= h.sum(axis=0)[ok]
    b = np.diagonal(hz) * gamma
    return float(b.sum()), float(((b - hz @ b) ** 2).sum())


def contextual_adaptive_dr(
    pi: np.ndarray,
    log: BanditLog,
    rows: np.ndarray,
    probs_all: np.ndarray,
    q: np.ndarray | None = None,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """Adaptively-weighted DR with the paper's *contextual* StableVar weights ("cadr_exact"); needs the logging
    policy of every evaluated time at every evaluated context, so it is computable in the ground-truth harness
    (``eval ope-truth``, which runs the logging policy itself), not from a decision log.

    Zhan, Hadad, Hirshberg & Athey, "Off-Policy Evaluation via Adaptive Weighting with Data from Contextual
    Bandits", KDD 2021, contextual weighting; formulas as in the authors' code (github.com/gsbDBI/
    contextual_bandits_evaluation, ``adaptive/inference.py``: ``analyze`` → ``lvdl_X`` and
    ``calculate_continuous_X_statistics``). Over the T evaluated rows ``rows`` (sorted, log order):

    * ``h_t(x) = (Σ_a π(a|x)² / e_t(a|x))^{-1/2}`` (:func:`contextual_stablevar_weights`), ``Z(x) = Σ_t h_t(x)``
      over the T evaluated times;
    * ``Q̂ = Σ_t h_t(x_t)/Z(x_t) · Γ_t``, ``V̂ = Σ_t (B_t − Σ_s h_t(x_s)/Z(x_s) · B_s)²`` with ``B_t`` the t-th
      term of Q̂ (:func:`contextual_weighted_estimate`); interval ``Q̂ ± z_{1−α/2} √V̂``;
    * Γ_t the same AIPW scores as :func:`adaptive_dr` (:func:`dr_terms` with the predictable reward model
      :func:`predictable_reward_model` of *all* rows of ``log`` before t): the two differ only in the weights.

    Shapes: ``pi`` ``(n, K)`` on every row of ``log``; ``rows`` ``(T,)``; ``probs_all`` ``(T, T, K)`` with
    ``probs_all[t, s, a] = e_{rows[t]}(a | x_{rows[s]})``, the distribution the policy that decided row ``rows[t]``
    gave at row ``rows[s]``'s context (a stationary logging policy: ``e(a | x_{rows[s]})`` for every t; a broadcast
    view is fine). ``q``: :func:`predictable_reward_model` of ``log`` when already computed. No rows, or no
    context with a positive weight: estimate, interval and se are NaN; a NaN reward propagates.

    Raises
    ------
    ValueError
        ``probs_all`` not ``(T, T, K)``, not finite or outside [0, 1], or its diagonal ``probs_all[t, t]`` not the
        logged distribution at row ``rows[t]`` (:func:`logging_probabilities`: the logged propensity of the chosen
        arm and its complement) within 1e-9 — the weights would then describe another policy than the scores.
    """
    from scipy.special import ndtri

    rows = np.asarray(rows, dtype=np.int64)
    n_rows, k = rows.shape[0], pi.shape[1]
    if probs_all.shape != (n_rows, n_rows, k):
        raise ValueError(f"probs_all must have shape {(n_rows, n_rows, k)}, not {probs_all.shape}")
    if not np.all(np.isfinite(probs_all)) or np.any(probs_all < 0.0) or np.any(probs_all > 1.0):
        raise ValueError("probs_all must hold probabilities in [0, 1]")
    nan = float("nan")
    if n_rows == 0:
        return {"estimate": nan, "ci95": [nan, nan], "se": nan}
    diagonal = probs_all[np.arange(n_rows), np.arange(n_rows)]
    if not np.allclose(diagonal, logging_probabilities(log)[rows], rtol=0.0, atol=1e-9):
        raise ValueError("probs_all[t, t] is not the logged distribution at row rows[t]")
    q = predictable_reward_model(log) if q is None else q
    gamma = dr_terms(pi, log, q)[rows]
    value, var = contextual_weighted_estimate(gamma, contextual_stablevar_weights(pi[rows], probs_all))
    se = float(np.sqrt(var))
    half = float(ndtri(1 - alpha / 2)) * se
    return {"estimate": value, "ci95": [value - half, value + half], "se": se}


def bootstrap_indices(n: int, n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """``(n_bootstrap, n)`` row indices drawn with replacement."""
    return rng.integers(0, n, size=(n_bootstrap, n))


def evaluate_policy(
    pi: np.ndarray, log: BanditLog, q: np.ndarray, idx: np.ndarray, alpha: float = 0.05
) -> dict[str, Any]:
    """Every estimator with its reported 95% interval, plus ESS and support, for one policy on ``log``.

    ``pi`` ``(n, K)``; ``q`` the direct model's ``(n, K)`` predictions; ``idx`` ``(B, n)`` bootstrap rows.
    Each estimator's entry holds ``estimate``, ``ci95`` (the interval named by ``interval``:
    :data:`REPORTED_INTERVAL`), ``ci95_percentile`` and ``ci95_normal`` (:func:`wald_interval`).
    """
    w, _ = ips_terms(pi, log)
    out: dict[str, Any] = {
        "effective_sample_size": effective_sample_size(w),
        "n": len(log),
        "max_weight": float(w.max()) if w.size else 0.0,
        "matched_fraction": float((w > 0).mean()) if w.size else 0.0,
    }
    for est in ESTIMATORS:
        boots = estimate(est, pi, log, q, idx)
        lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
        value, n_lo, n_hi = wald_interval(est, pi, log, q, alpha)
        percentile, normal = [float(lo), float(hi)], [n_lo, n_hi]
        out[est] = {
            "estimate": value,
            "ci95": normal if REPORTED_INTERVAL[est] == "normal" else percentile,
            "interval": REPORTED_INTERVAL[est],
            "ci95_percentile": percentile,
            "ci95_normal": normal,
        }
    out["dm"] = {"estimate": float((pi * q).sum(axis=1).mean())}
    return out


def split(n: int, model_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint model / evaluation row indices (seeded permutation)."""
    order = rng.permutation(n)
    cut = round(n * model_fraction)
    return np.sort(order[:cut]), np.sort(order[cut:])


def off_policy_evaluation(
    log: BanditLog,
    policies: Sequence[str],
    *,
    model_fraction: float = 0.5,
    n_bootstrap: int = 500,
    seed: int = 0,
    reward_model: str = "gbm",
    dr_folds: int = DR_FOLDS,
) -> dict[str, Any]:
    """OPE report of ``policies`` on ``log`` (see module docstring); JSON-ready. ``reward_model`` is DR's
    (:func:`fit_reward_model`), fitted with ``dr_folds`` (:func:`cross_fitted_q`); ``adr`` keeps its predictable
    ridge.

    Raises
    ------
    LogRefused
        Fewer than 20 rows, or a part of the split without both arms.
    ValueError
        Unknown policy name or reward model.
    """
    if len(log) < 20:
        raise LogRefused(f"{len(log)} usable decisions: too few for off-policy evaluation (need ≥ 20)")
    rng = np.random.default_rng(seed)
    model_idx, eval_idx = split(len(log), model_fraction, rng)
    train, ev = log.subset(model_idx), log.subset(eval_idx)
    q = cross_fitted_q(log, model_idx, eval_idx, reward_model, dr_folds)
    idx = bootstrap_indices(len(ev), n_bootstrap, rng)
    w_min = float(log.propensity.min())
    q_pred = predictable_reward_model(log)
    report: dict[str, Any] = {
        "n_log": len(log),
        "n_model_part": len(train),
        "n_evaluation_part": len(ev),
        "skipped_other_arm_sets": log.skipped_other_arm_sets,
        "min_propensity": w_min,
        "logged_policy_value": {
            "estimate": float(ev.reward.mean()),
            "ci95": [float(v) for v in np.quantile(ev.reward[idx].mean(axis=1), [0.025, 0.975])],
        },
        "n_bootstrap": n_bootstrap,
        "seed": seed,
        "reward_model": reward_model,
        "dr_folds": dr_folds,
        "policies": {},
    }
    for name in policies:
        pi_all = candidate(name, train, seed)(log.X)
        report["policies"][name] = evaluate_policy(pi_all[eval_idx], ev, q, idx)
        report["policies"][name]["adr"] = adaptive_dr(pi_all, log, eval_idx, q_pred)
    return report


def format_table(report: dict[str, Any]) -> str:
    """Plain-text table of a report (one line per policy and estimator)."""
    lines = [
        f"log: {report['n_log']} decisions (model part {report['n_model_part']}, evaluation part "
        f"{report['n_evaluation_part']}), min propensity {report['min_propensity']:.3f}",
        f"logged policy: {report['logged_policy_value']['estimate']:.4f} "
        f"[{report['logged_policy_value']['ci95'][0]:.4f}, {report['logged_policy_value']['ci95'][1]:.4f}]",
        f"{'policy':<24}{'estimator':<10}{'value':>9}{'95% CI':>22}{'interval':>12}{'ESS':>9}",
    ]
    for name, row in report["policies"].items():
        for est in REPORTED_ESTIMATORS:
            lo, hi = row[est]["ci95"]
            ess = f"{row['effective_sample_size']:.0f}" if est in ("ips", "snips") else ""
            kind = row[est].get("interval", "normal")  # adr: its own normal interval
            lines.append(f"{name:<24}{est:<10}{row[est]['estimate']:>9.4f}   [{lo:.4f}, {hi:.4f}]{kind:>12}{ess:>9}")
    return "\n".join(lines)
