# ruff: noqa: N803  (X, T: design matrix and outcome matrix, scikit-learn convention)
"""Offline training of the primary-path policy (warm start), from real measurements.

Two sources of rewarded decisions feed the same per-arm oracles
(``SGDClassifier(loss="log_loss")``, the oracle of the online bandit, Alzadjali
et al.), one oracle per arm of the arm set (WIFI, LTE):

* **Full information** — paired situations (see
  :mod:`edgepath.datasets.mobilebandwidth`) know both arms' outcomes, so every
  situation gives each arm's oracle a labelled row: the Bernoulli reward the
  service would have computed (``throughput ≥ reward_threshold``; the data has
  no latency, so the latency condition is moot), weight 1.
* **Inverse-propensity weighted** — the service's own decision log knows only
  the chosen arm's reward and the propensity it was chosen with. The chosen
  arm's oracle gets the row with weight ``1/propensity`` (capped at
  ``max_ips_weight``): importance weighting makes the arm's training
  distribution of contexts that of all decisions, not of those the logging
  policy happened to route to that arm (Horvitz & Thompson 1952; for
  bandit logs, Strehl et al., "Learning from Logged Implicit Exploration
  Data", NeurIPS 2010, eq. 1). Unchosen arms get nothing from that row.

For EdgePath's utility learners (``ridge_*`` policies) the same rows feed
per-arm ridge regressions of the utility (:func:`~edgepath.engines.reward.utility`
of the measured throughput; the data has no latency or loss) instead of
oracles: full-information rows with weight 1, logged rows with weight
``1/propensity`` (capped), added to the very statistics the online learner
keeps updating (:meth:`PrimaryPathBandit.warm_start_rows`) — no cliff between
the static and the online model.

For the paper's policies each oracle is trained by ``epochs`` passes of ``partial_fit`` (``classes=[0,
1]``, rows permuted by a seeded generator) with ``sample_weight``, then handed
to the contextualbandits policy with :meth:`PrimaryPathBandit.warm_start`,
after which online ``partial_fit`` continues from it.

Besides the bandit, a **better-arm classifier** is trained on the paired
situations (full information only): logistic regression (same SGD oracle) of
``1[LTE throughput > WiFi throughput]``, cost-sensitive with weight
``|T_LTE − T_WiFi| / mean|T_LTE − T_WiFi|`` so that mistakes cost what they cost
in throughput (Elkan, "The Foundations of Cost-Sensitive Learning", IJCAI 2001).
It is the static "offline classifier" of the evaluation.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.linear_model import SGDClassifier

from edgepath.engines.features import N_FEATURES, context_features, feature_mask
from edgepath.engines.primary_path import (
    DEFAULT_POLICY,
    BanditConfig,
    PrimaryPathBandit,
    TrainingSample,
    UtilityConfig,
    policy_spec,
    valid_sample,
)
from edgepath.types import AccessType

if TYPE_CHECKING:  # the lab's dataset type, for annotations only: the runtime (and the image) has no lab
    from edgepath.datasets.mobilebandwidth import Situation

ARMS: tuple[AccessType, AccessType] = (AccessType.WIFI, AccessType.LTE)
"""The arm set the mobilebandwidth data covers (WiFi 4 × 4G)."""


@dataclass(frozen=True)
class OfflineConfig:
    """Hyper-parameters of offline training (recorded in the model card).

    ``explore_prob`` replaces active_explorer's initial probability ``p`` of the active-learning branch
    (a warm-started policy needs less exploration than a cold one, 0.15); no other policy reads it
    (:func:`policy_reads`; each explores by its own parameters, :func:`exploration_parameters`), and
    ``edgepath train-offline`` refuses ``--explore-prob`` for them. Likewise the ``ridge_*`` fields are
    read by the ``ridge_*`` policies only; :func:`policy_config_dict` keeps what ``policy`` reads.
    ``drop_groups`` zeroes feature groups (ablation only).
    """

    policy: str = DEFAULT_POLICY
    reward_threshold_mbps: float = 25.0
    sgd_alpha: float = 1e-2
    epochs: int = 20
    seed: int = 0
    explore_prob: float = 0.05
    max_ips_weight: float = 100.0
    drop_groups: tuple[str, ...] = field(default_factory=tuple)
    # EdgePath's learners (ridge_*): see edgepath.engines.linear_bandit
    ridge_lambda: float = 1.0
    forgetting: float = 0.999
    squarecb_gamma0: float = 100.0
    ts_scale: float = 0.02
    ucb_alpha: float = 0.05
    ridge_epsilon: float = 0.05
    utility_throughput_cap_bps: float = 1e9
    warm_window: bool = True

    def bandit_config(self) -> BanditConfig:
        """The :class:`BanditConfig` of the bandit trained offline, derived by name: every field of this config that
        :class:`BanditConfig` also has (``policy``, ``seed``, ``sgd_alpha``, ``ridge_lambda`` …), and every
        ``utility_NAME`` field as :class:`UtilityConfig`'s ``NAME`` (``utility_throughput_cap_bps``, bit/s); the other
        bandit parameters at their :class:`BanditConfig` defaults. So a new bandit parameter reaches
        ``train-offline`` and the evaluations by one field of the same name here (and its CLI flag), no line here.
        """
        mine = {name: getattr(self, name) for name in self.__dataclass_fields__}
        shared = {n: v for n, v in mine.items() if n in BanditConfig.__dataclass_fields__ and n != "utility"}
        utility = {n: mine[f"utility_{n}"] for n in UtilityConfig.__dataclass_fields__ if f"utility_{n}" in mine}
        return BanditConfig(**shared, utility=UtilityConfig(**utility))

    @property
    def reward(self) -> str:
        """``utility`` or ``bernoulli``: what the policy learns from."""
        return policy_spec(self.policy).reward


class DecisionLogError(ValueError):
    """A decision-log line is malformed (the message names the line and field)."""


def read_decision_log(path: Path | str) -> list[TrainingSample]:
    """Read a JSON-lines decision log: one rewarded decision a line.

    Each line is an object with ``features`` (list of ``N_FEATURES`` floats,
    the layout of :data:`~edgepath.engines.features.FEATURE_NAMES`), ``arms``
    (access-type names in policy order), ``arm_index``, ``reward`` (0/1) and
    ``propensity`` (in (0, 1]) and, optionally, the measured ``throughput_bps``,
    ``latency_ms`` and ``loss`` (the utility learners' target) — the fields of
    :class:`~edgepath.state.base.OutcomeRecord`; other keys are ignored.

    Raises
    ------
    DecisionLogError
        Naming the line number and the field at fault.
    """
    return [sample for _, sample in read_decision_log_rows(path)]


def read_decision_log_rows(path: Path | str) -> list[tuple[str | None, TrainingSample]]:
    """:func:`read_decision_log` with each line's ``device_id`` (None when the line has none or not a string),
    for :func:`drop_held_out_devices`.

    Raises
    ------
    DecisionLogError
        Naming the line number and the field at fault.
    """
    out: list[tuple[str | None, TrainingSample]] = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            features = [float(v) for v in obj["features"]]
            arms = tuple(AccessType(a) for a in obj["arms"])
            arm_index, reward, propensity = int(obj["arm_index"]), int(obj["reward"]), float(obj["propensity"])
        except (KeyError, ValueError, TypeError) as exc:
            raise DecisionLogError(f"decision log line {lineno}: {exc!r}") from exc
        if len(features) != N_FEATURES or not all(math.isfinite(v) for v in features):
            raise DecisionLogError(f"decision log line {lineno}: features must be {N_FEATURES} finite numbers")
        if not 0 <= arm_index < len(arms):
            raise DecisionLogError(f"decision log line {lineno}: arm_index {arm_index} out of range")
        if reward not in (0, 1):
            raise DecisionLogError(f"decision log line {lineno}: reward must be 0 or 1")
        if not 0.0 < propensity <= 1.0:
            raise DecisionLogError(f"decision log line {lineno}: propensity must be in (0, 1]")
        measured = {k: obj.get(k) for k in ("throughput_bps", "latency_ms", "loss")}
        try:
            values = {k: None if v is None else float(v) for k, v in measured.items()}
        except (TypeError, ValueError) as exc:
            raise DecisionLogError(f"decision log line {lineno}: {exc!r}") from exc
        sample = TrainingSample(features, arms, arm_index, reward, propensity, **values)
        if not valid_sample(sample):
            raise DecisionLogError(
                f"decision log line {lineno}: throughput_bps, latency_ms or loss out of range (or not finite)"
            )
        device = obj.get("device_id")
        out.append((device if isinstance(device, str) else None, sample))
    return out


#: The replay's device ids (``edgepath_agent.replay.run_replay``): ``<device_prefix>-<first 16 hex digits of the
#: WiFi test's user_uid>``; a bare or prefixed whole 32-digit ``user_uid`` maps too.
_DEVICE_USER = re.compile(r"(?:.*-)?([0-9a-f]{16})(?:[0-9a-f]{16})?")


def device_user_key(device_id: str | None) -> str | None:
    """The user key (first 16 hex digits of a ``user_uid``, lower case) a device id carries, or None."""
    if not device_id:
        return None
    match = _DEVICE_USER.fullmatch(device_id.lower())
    return match.group(1) if match else None


@dataclass(frozen=True)
class LogUserFilter:
    """What :func:`drop_held_out_devices` kept of a decision log, and why the rest went."""

    kept: list[TrainingSample]
    dropped_held_out: int
    """Rows of devices of held-out users: dropped (their outcomes are what the held-out scores measure)."""
    training_users: int
    """Rows kept whose device maps to a training user."""
    unmapped: int
    """Rows kept whose device id maps to no user of the data: they cannot be checked against the split."""

    @property
    def held_out_verified(self) -> bool:
        """Every kept row maps to a training user: scores on the held-out users are held out from the log too."""
        return self.unmapped == 0


def drop_held_out_devices(
    rows: Sequence[tuple[str | None, TrainingSample]], training_uids: Iterable[str], held_out_uids: Iterable[str]
) -> LogUserFilter:
    """Drop the decision-log rows of the held-out users' devices (see :func:`device_user_key`).

    A replay of the full data set (README: ``edgepath-agent replay`` into a service, then ``log export``) logs
    the held-out users' situations too; training on them would leak the test users into the warm start. A row
    whose key is a held-out user's is dropped (also when a training user shares the 16-digit prefix); one whose
    key is a training user's is kept; any other (a real device, another prefix format) is kept and counted as
    ``unmapped``. Only the device's (WiFi) user is checked: a replayed situation pairs it with another user's
    cellular test of the same city.
    """
    test_keys = {uid[:16].lower() for uid in held_out_uids}
    train_keys = {uid[:16].lower() for uid in training_uids}
    kept: list[TrainingSample] = []
    dropped = training = unmapped = 0
    for device, sample in rows:
        key = device_user_key(device)
        if key is not None and key in test_keys:
            dropped += 1
            continue
        kept.append(sample)
        if key is not None and key in train_keys:
            training += 1
        else:
            unmapped += 1
    return LogUserFilter(kept, dropped, training, unmapped)


def ips_weights(propensities: Sequence[float] | np.ndarray, max_weight: float = 100.0) -> np.ndarray:
    """Inverse-propensity weights ``min(1/p, max_weight)``; shape ``(n,)``.

    Raises
    ------
    ValueError
        When a propensity is outside (0, 1].
    """
    p = np.asarray(propensities, dtype=np.float64)
    if np.any(~(p > 0.0)) or np.any(p > 1.0):
        raise ValueError("propensities must be in (0, 1]")
    return np.minimum(1.0 / p, max_weight)


@dataclass
class ArmRows:
    """Training rows of one arm's oracle: features ``(n, F)``, labels ``(n,)``, weights ``(n,)``."""

    X: list[np.ndarray] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    w: list[float] = field(default_factory=list)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        X = np.vstack(self.X) if self.X else np.zeros((0, N_FEATURES))
        return X, np.asarray(self.y, dtype=np.float64), np.asarray(self.w, dtype=np.float64)


def situation_matrix(situations: Sequence[Situation]) -> tuple[np.ndarray, np.ndarray]:
    """Features ``(n, N_FEATURES)`` and throughputs ``(n, 2)`` in Mbit/s, columns in :data:`ARMS` order."""
    X = np.vstack([context_features(s.interfaces) for s in situations]) if situations else np.zeros((0, N_FEATURES))
    T = np.asarray([[s.wifi.throughput_mbps, s.cellular.throughput_mbps] for s in situations], dtype=np.float64)
    return X, T.reshape(-1, 2)


def arm_rows(
    X: np.ndarray, T: np.ndarray, logged: Sequence[TrainingSample], cfg: OfflineConfig
) -> tuple[list[ArmRows], int]:
    """Per-arm training rows from full-information situations and IPS-weighted logged decisions.

    Returns the rows of each arm of :data:`ARMS` and the number of logged
    decisions used (those whose arm set is :data:`ARMS`).
    """
    rows = [ArmRows() for _ in ARMS]
    utility = cfg.bandit_config().utility if cfg.reward == "utility" else None
    for k in range(len(ARMS)):
        for x, t in zip(X, T[:, k], strict=True):
            rows[k].X.append(x)
            if utility is not None:
                rows[k].y.append(utility(float(t) * 1e6, None, None))
            else:
                rows[k].y.append(1.0 if t >= cfg.reward_threshold_mbps else 0.0)
            rows[k].w.append(1.0)
    used = [s for s in logged if tuple(s.arms) == ARMS]
    if used:
        weights = ips_weights([s.propensity for s in used], cfg.max_ips_weight)
        for s, w in zip(used, weights, strict=True):
            rows[s.arm_index].X.append(np.asarray(s.features, dtype=np.float64))
            if utility is not None and s.throughput_bps is not None:
                rows[s.arm_index].y.append(utility(s.throughput_bps, s.latency_ms, s.loss))
            else:
                rows[s.arm_index].y.append(float(s.reward))
            rows[s.arm_index].w.append(float(w))
    return rows, len(used)


def _mask(X: np.ndarray, cfg: OfflineConfig) -> np.ndarray:
    if not cfg.drop_groups:
        return X
    return X * feature_mask(cfg.drop_groups)  # dropped columns become the constant 0


def fit_oracle(X: np.ndarray, y: np.ndarray, w: np.ndarray, cfg: OfflineConfig, seed: int) -> SGDClassifier:
    """``epochs`` seeded passes of ``partial_fit`` with ``sample_weight``; works with one class present."""
    clf = SGDClassifier(loss="log_loss", alpha=cfg.sgd_alpha, random_state=seed)
    rng = np.random.default_rng(seed)
    X = _mask(X, cfg)
    if X.shape[0] == 0:  # no data for this arm: a neutral oracle (P = 1/2 everywhere)
        clf.partial_fit(np.zeros((2, N_FEATURES)), np.array([0.0, 1.0]), classes=[0, 1])
        return clf
    for _ in range(cfg.epochs):
        order = rng.permutation(X.shape[0])
        clf.partial_fit(X[order], y[order], classes=[0, 1], sample_weight=w[order])
    return clf


def fit_better_arm_classifier(X: np.ndarray, T: np.ndarray, cfg: OfflineConfig) -> SGDClassifier:
    """Cost-sensitive logistic classifier of ``1[LTE faster]`` (see module docstring)."""
    gap = np.abs(T[:, 1] - T[:, 0])
    w = gap / gap.mean() if gap.size and gap.mean() > 0 else np.ones_like(gap)
    y = (T[:, 1] > T[:, 0]).astype(np.float64)
    return fit_oracle(X, y, w, cfg, seed=cfg.seed + 7)


class BetterArmPolicy:
    """Static policy from the better-arm classifier: index into :data:`ARMS` per row (no exploration)."""

    def __init__(self, classifier: SGDClassifier, drop_groups: tuple[str, ...] = ()) -> None:
        self.classifier = classifier
        self.drop_groups = drop_groups

    def choose(self, X: np.ndarray) -> np.ndarray:
        X = X * feature_mask(self.drop_groups) if self.drop_groups else X
        return (self.classifier.decision_function(X) > 0).astype(np.int64)


@dataclass(frozen=True)
class OfflineModel:
    """Result of :func:`train_offline`."""

    bandit: PrimaryPathBandit
    classifier: SGDClassifier
    config: OfflineConfig
    n_situations: int
    n_logged: int
    positives: tuple[float, ...]
    """Mean training target per arm: reward rate (Bernoulli) or mean utility."""

    def greedy_arms(self, X: np.ndarray) -> np.ndarray:
        """Arm index per row by the offline model alone (argmax of its estimates), no exploration."""
        Xm = _mask(X, self.config)
        policy = self.bandit._policies[ARMS]
        if self.config.reward == "utility":
            model = policy.model
            return np.argmax(Xm @ model.coef.T + model.intercept, axis=1)
        return np.argmax(_oracle_scores(policy, Xm), axis=1)


def _oracle_scores(policy: Any, X: np.ndarray) -> np.ndarray:
    return np.column_stack([algo.decision_function(X) for algo in policy._oracles.algos])


def train_offline(
    situations: Sequence[Situation], logged: Sequence[TrainingSample] = (), cfg: OfflineConfig | None = None
) -> OfflineModel:
    """Train the warm-start bandit and the better-arm classifier.

    Parameters
    ----------
    situations:
        Paired training situations (full information); may be empty when ``logged`` is not.
    logged:
        Rewarded decisions of the service's log (IPS-weighted).

    Raises
    ------
    ValueError
        When there is nothing to train on.
    """
    cfg = cfg or OfflineConfig()
    X, T = situation_matrix(situations)
    rows, n_logged = arm_rows(X, T, logged, cfg)
    if X.shape[0] == 0 and n_logged == 0:
        raise ValueError("no training data: no paired situation and no WIFI/LTE decision in the log")
    if cfg.reward == "utility":
        bandit = PrimaryPathBandit(cfg.bandit_config())
        parts = [(_mask(r.arrays()[0], cfg), np.full(len(r.y), k), *r.arrays()[1:]) for k, r in enumerate(rows)]
        if cfg.warm_window and cfg.forgetting < 1.0:
            # the offline evidence counts as one forgetting window of outcomes per arm (1/(1−γ)), so that a
            # path degrading after deployment ages it out as fast as it would age out online evidence
            window = 1.0 / (1.0 - cfg.forgetting)
            parts = [(X_, a_, r_, w_ * min(1.0, window / max(float(w_.sum()), 1e-12))) for X_, a_, r_, w_ in parts]
        bandit.warm_start_rows(
            ARMS,
            np.vstack([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
            np.concatenate([p[3] for p in parts]),
        )
        classifier = fit_better_arm_classifier(X, T, cfg)
        positives = tuple(float(r.arrays()[1].mean()) if r.y else 0.0 for r in rows)
        return OfflineModel(bandit, classifier, cfg, X.shape[0], n_logged, positives)
    oracles = []
    all_X, all_a, all_r = [], [], []
    for k, arm_r in enumerate(rows):
        Xk, yk, wk = arm_r.arrays()
        oracles.append(fit_oracle(Xk, yk, wk, cfg, seed=cfg.seed * 100 + k + 1))
        all_X.append(_mask(Xk, cfg))
        all_a.append(np.full(len(yk), k))
        all_r.append(yk)
    bandit = PrimaryPathBandit(cfg.bandit_config())
    bandit.warm_start(ARMS, oracles, np.vstack(all_X), np.concatenate(all_a), np.concatenate(all_r))
    classifier = fit_better_arm_classifier(X, T, cfg)  # neutral when there are no paired situations
    positives = tuple(float(r.arrays()[1].mean()) if r.y else 0.0 for r in rows)
    return OfflineModel(bandit, classifier, cfg, X.shape[0], n_logged, positives)


def config_dict(cfg: OfflineConfig) -> dict[str, Any]:
    """Every field of ``cfg`` as JSON-ready values (``drop_groups`` a list), whether its policy reads it or not."""
    d = asdict(cfg)
    d["drop_groups"] = list(cfg.drop_groups)
    return d


#: :class:`OfflineConfig` fields that only some policies read → the :attr:`PolicySpec.parameters` entry reading them.
#: The other fields (policy, reward threshold, ``sgd_alpha`` of the better-arm classifier, epochs, seed, IPS cap,
#: ablation) configure the training itself, whatever the policy.
POLICY_FIELDS: dict[str, str] = {
    "explore_prob": "explore_prob",
    "ridge_lambda": "ridge_lambda",
    "forgetting": "forgetting",
    "squarecb_gamma0": "squarecb_gamma0",
    "ts_scale": "ts_scale",
    "ucb_alpha": "ucb_alpha",
    "ridge_epsilon": "ridge_epsilon",
    "utility_throughput_cap_bps": "utility",
    "warm_window": "utility",
}
#: Parameters a whole family of policies reads (model, reward), not how one of them explores.
_FAMILY_PARAMETERS = ("ridge_lambda", "forgetting", "utility", "sgd_alpha")


def policy_reads(policy: str, name: str) -> bool:
    """Whether ``policy`` reads :class:`OfflineConfig` field ``name`` (training fields: always).

    Raises
    ------
    ValueError
        For an unknown policy (naming the choices).
    """
    reader = POLICY_FIELDS.get(name)
    return reader is None or reader in policy_spec(policy).parameters


def exploration_parameters(policy: str) -> tuple[str, ...]:
    """The :class:`BanditConfig` fields (settings ``bandit.*``) setting how ``policy`` explores, e.g.
    ``("epsilon", "epsilon_decay")`` for epsilon_greedy, ``("squarecb_gamma0",)`` for ridge_squarecb; empty for a
    policy with no configurable exploration (adaptive_greedy)."""
    return tuple(p for p in policy_spec(policy).parameters if p not in _FAMILY_PARAMETERS)


def policy_config_dict(cfg: OfflineConfig) -> dict[str, Any]:
    """:func:`config_dict` without the fields ``cfg.policy`` does not read (the model card's hyper-parameters)."""
    return {k: v for k, v in config_dict(cfg).items() if policy_reads(cfg.policy, k)}


ALPHA_GRID: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 3e-2, 1e-1)


def select_alpha(
    wifi: Sequence[Any], cellular: Sequence[Any], cfg: OfflineConfig, grid: Sequence[float] = ALPHA_GRID
) -> tuple[float, dict[str, float]]:
    """L2 strength of the oracles by validation log-loss on the *training* users only.

    The training side's users are split again (:func:`split_by_user`, salt ``"validation"``, 25%);
    each ``alpha`` of ``grid`` is trained on the rest and scored by the mean log-loss of the two
    arms' reward oracles on the validation users' situations (pairing seeds 1, 2, 3). Returns the
    best alpha and the score of each.
    """
    from sklearn.metrics import log_loss

    from edgepath.datasets.mobilebandwidth import pair_situations, split_by_user

    fit_w, val_w = split_by_user(wifi, 0.25, "validation")
    fit_c, val_c = split_by_user(cellular, 0.25, "validation")
    train = pair_situations(fit_w, fit_c, cfg.seed)
    vals = [situation_matrix(pair_situations(val_w, val_c, seed)) for seed in (1, 2, 3)]
    scores: dict[str, float] = {}
    for alpha in grid:
        vcfg = OfflineConfig(**{**cfg.__dict__, "sgd_alpha": alpha, "policy": "active_explorer"})  # SGD oracles
        model = train_offline(train, (), vcfg)
        algos = model.bandit._policies[ARMS]._oracles.algos
        losses = []
        for X, T in vals:
            for k, algo in enumerate(algos):
                y = (T[:, k] >= cfg.reward_threshold_mbps).astype(int)
                losses.append(log_loss(y, algo.predict_proba(_mask(X, cfg))[:, 1], labels=[0, 1]))
        scores[repr(alpha)] = float(np.mean(losses))
    best = min(grid, key=lambda a: scores[repr(a)])
    return best, scores
