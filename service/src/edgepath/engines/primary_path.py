# ruff: noqa: N803  (X, T: design matrix and outcome matrix, scikit-learn convention)
"""Primary-path contextual bandit (pure engine: no I/O, no async, no globals).

Seed paper: Alzadjali, Esposito, Deogun, "A Contextual Bi-armed Bandit Approach
for MPTCP Path Management in Heterogeneous LTE and WiFi Edge Networks" — an
online contextual bandit whose oracle is an SGD-trained logistic classifier,
Bernoulli rewards, batches of 50, ActiveExplorer (their Algorithm 1) as the
policy of choice among six compared.

Arms
----
The arms are the access types the device offers (WIFI, LTE, NR, ETHERNET).
One policy is kept per *arm set* (the sorted tuple of offered access types):
a WiFi+LTE phone uses the paper's bi-armed bandit; a WiFi+NR laptop gets its
own. A device offering one access type needs no decision (propensity 1). When
several interfaces share an access type, the arm's interface is the one
:func:`~edgepath.engines.features.representative` picks (strongest signal).

Policies and their parameters
-----------------------------
All use ``SGDClassifier(loss="log_loss")`` (scikit-learn defaults otherwise:
``alpha=1e-4``) as the oracle, ``batch_train=True`` (refit with
``partial_fit``) and ``njobs=1`` (the library default of -1 spawns a pool that
costs ~12 ms a call on 2 cores). Parameters are the contextualbandits
defaults (v0.3.x docs, which follow Cortes, "Adapting multi-armed bandits
policies to contextual bandits scenarios", arXiv:1811.04383) unless noted:

=======================  =====================================================================
name                     policy and parameters
=======================  =====================================================================
active_explorer          ActiveExplorer, explore_prob=0.15, decay=0.9997, active_choice=weighted
                         (paper's pick; its Algorithm 1: gradient-norm criterion w_q)
adaptive_greedy          AdaptiveGreedy, window_size=500, percentile=30, decay=0.9998
adaptive_active_greedy   AdaptiveGreedy as above with active_choice="weighted"
bootstrapped_ucb         BootstrappedUCB, nsamples=10, percentile=80
epsilon_greedy           EpsilonGreedy, explore_prob=0.2, decay=0.9999
explore_first            ExploreFirst, explore_rounds=500 (library default 2500 is longer
                         than a demo; configurable)
=======================  =====================================================================

Propensity
----------
``propensity`` is the probability of the chosen arm under the policy at
decision time, computed from the policy's exploration rule with the oracle's
greedy arm ``g`` (``predict(exploit=True)``) and ``K`` arms:

* unfitted policy (no outcome yet for this arm set): uniform, ``1/K``;
* epsilon_greedy: ``(1-ε)·1[a=g] + ε/K`` with the current (decayed) ε;
* active_explorer: ``p`` when ``a ≠ g`` (only the active-learning branch picks
  a non-greedy arm), ``1-p`` when ``a = g`` (exact unless the gradient
  criterion also points at ``g``; then it is a lower bound);
* adaptive_greedy: ``1/K`` when the best oracle score is at or below the
  policy's threshold (random choice), else 1;
* adaptive_active_greedy, bootstrapped_ucb: deterministic given the fitted
  oracles, so 1;
* explore_first: ``1/K`` during the exploration rounds, 1 after.

It is floored at ``propensity_floor`` (default 0.01) so that inverse-propensity
weights stay bounded (≤ 100).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from contextualbandits.online import (
    ActiveExplorer,
    AdaptiveGreedy,
    BootstrappedUCB,
    EpsilonGreedy,
    ExploreFirst,
)
from sklearn.linear_model import SGDClassifier

from edgepath.engines.features import SLOTS, context_features, representative
from edgepath.types import AccessType, InterfaceContext

ArmSet = tuple[AccessType, ...]


@dataclass(frozen=True)
class BanditConfig:
    """Hyper-parameters of the primary-path bandit (see module docstring for sources)."""

    policy: str = "active_explorer"
    seed: int = 0
    propensity_floor: float = 0.01
    explore_prob: float = 0.15
    explore_decay: float | None = 0.9997
    epsilon: float = 0.2
    epsilon_decay: float | None = 0.9999
    explore_rounds: int = 500
    ucb_nsamples: int = 10
    ucb_percentile: int = 80
    sgd_alpha: float = 1e-4


@dataclass(frozen=True)
class ArmChoice:
    """What :meth:`PrimaryPathBandit.decide` returns.

    ``features`` has shape ``(N_FEATURES,)``; ``arm_index`` indexes ``arms``.
    """

    arms: ArmSet
    arm_index: int
    access_type: AccessType
    interface: str
    propensity: float
    features: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class TrainingSample:
    """One logged decision with its reward, as the trainer feeds it back."""

    features: Sequence[float]
    arms: ArmSet
    arm_index: int
    reward: int
    propensity: float


def _oracle(cfg: BanditConfig) -> SGDClassifier:
    return SGDClassifier(loss="log_loss", alpha=cfg.sgd_alpha, random_state=cfg.seed)


def _make_policy(name: str, k: int, cfg: BanditConfig, seed: int, base: list[Any] | None = None) -> Any:
    """Build policy ``name`` over ``k`` arms; ``base`` = pre-fit per-arm oracles (warm start) or None."""
    common: dict[str, Any] = dict(nchoices=k, batch_train=True, random_state=seed)

    def oracle() -> Any:
        return _oracle(cfg) if base is None else base

    factories: dict[str, Callable[[], Any]] = {
        "active_explorer": lambda: ActiveExplorer(
            oracle(), explore_prob=cfg.explore_prob, decay=cfg.explore_decay, njobs=1, **common
        ),
        "adaptive_greedy": lambda: AdaptiveGreedy(oracle(), njobs=1, **common),
        "adaptive_active_greedy": lambda: AdaptiveGreedy(oracle(), active_choice="weighted", njobs=1, **common),
        "bootstrapped_ucb": lambda: BootstrappedUCB(
            oracle(),
            nsamples=cfg.ucb_nsamples,
            percentile=cfg.ucb_percentile,
            njobs_arms=1,
            njobs_samples=1,
            **common,
        ),
        "epsilon_greedy": lambda: EpsilonGreedy(
            oracle(), explore_prob=cfg.epsilon, decay=cfg.epsilon_decay, njobs=1, **common
        ),
        "explore_first": lambda: ExploreFirst(oracle(), explore_rounds=cfg.explore_rounds, njobs=1, **common),
    }
    if name not in factories:
        raise ValueError(f"unknown policy {name!r}; choose one of {sorted(factories)}")
    return factories[name]()


POLICIES: tuple[str, ...] = (
    "active_explorer",
    "adaptive_greedy",
    "adaptive_active_greedy",
    "bootstrapped_ucb",
    "epsilon_greedy",
    "explore_first",
)


def arm_set(interfaces: Sequence[InterfaceContext]) -> ArmSet:
    """The arms a device offers: its distinct access types in :data:`SLOTS` order."""
    offered = {i.access_type for i in interfaces}
    return tuple(s for s in SLOTS if s in offered)


class PrimaryPathBandit:
    """Contextual bandit choosing the primary path, one policy per arm set.

    Raises
    ------
    ValueError
        From the constructor for an unknown policy name.
    """

    def __init__(self, config: BanditConfig | None = None) -> None:
        self.config = config or BanditConfig()
        _make_policy(self.config.policy, 2, self.config, 1)  # validate the name early
        self._policies: dict[ArmSet, Any] = {}
        self.samples_seen = 0

    @property
    def policy_name(self) -> str:
        return self.config.policy

    def _seed(self, arms: ArmSet) -> int:
        return 1 + self.config.seed * 1000 + sum((SLOTS.index(a) + 1) * 10**i for i, a in enumerate(arms))

    def _policy(self, arms: ArmSet) -> Any:
        policy = self._policies.get(arms)
        if policy is None:
            policy = _make_policy(self.config.policy, len(arms), self.config, self._seed(arms))
            self._policies[arms] = policy
        return policy

    @property
    def arm_sets(self) -> tuple[ArmSet, ...]:
        """The arm sets that have a policy (fitted or not)."""
        return tuple(self._policies)

    def warm_start(
        self, arms: ArmSet, oracles: Sequence[SGDClassifier], X: np.ndarray, a: np.ndarray, r: np.ndarray
    ) -> None:
        """Install offline-fitted oracles (one per arm) as the policy of ``arms`` (warm start).

        contextualbandits accepts a list of per-arm classifiers as
        ``base_algorithm``; the policy keeps those very objects as its oracles
        and later ``partial_fit`` calls continue from their coefficients. To
        mark the policy fitted and set its per-arm reward counters (which
        decide when it trusts an oracle over its Beta prior), the policy is
        ``partial_fit`` once on the offline rows ``X, a, r``; the oracles'
        offline coefficients (``coef_``, ``intercept_``, ``t_``) are then
        restored, so the served oracles are exactly the offline fit.

        Parameters
        ----------
        arms:
            The arm set, e.g. ``(WIFI, LTE)``.
        oracles:
            Fitted ``SGDClassifier(loss="log_loss")`` with ``classes_ == [0, 1]``, one per arm, in arm order.
        X, a, r:
            Offline rows: features ``(n, N_FEATURES)``, arm indices ``(n,)``, binary rewards ``(n,)``.

        Raises
        ------
        ValueError
            When the number of oracles differs from the number of arms.
        """
        if len(oracles) != len(arms) or len(arms) < 2:
            raise ValueError(f"need one oracle per arm ({len(arms)} arms, {len(oracles)} oracles)")
        fitted = [(o.coef_.copy(), o.intercept_.copy(), o.t_) for o in oracles]
        policy = _make_policy(self.config.policy, len(arms), self.config, self._seed(arms), base=list(oracles))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            policy.partial_fit(np.asarray(X, dtype=np.float64), np.asarray(a), np.asarray(r, dtype=np.float64))
        for algo, oracle, (coef, intercept, t) in zip(policy._oracles.algos, oracles, fitted, strict=True):
            if algo is oracle:  # plain oracles; bootstrapped policies keep their resampled copies
                algo.coef_, algo.intercept_, algo.t_ = coef, intercept, t
        self._policies[tuple(arms)] = policy

    def decide(self, interfaces: Sequence[InterfaceContext]) -> ArmChoice:
        """Choose the primary path for one context.

        Parameters
        ----------
        interfaces:
            Validated interfaces of the request (at least one).

        Returns
        -------
        ArmChoice
            The chosen arm, its interface, its propensity in (0, 1] and the features used.
        """
        arms = arm_set(interfaces)
        x = context_features(interfaces)
        if len(arms) == 1:
            index, propensity = 0, 1.0
        else:
            policy = self._policy(arms)
            X = x.reshape(1, -1)
            state_before = self._exploration_state(policy, X, len(arms))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                index = int(np.asarray(policy.predict(X)).reshape(-1)[0])
            propensity = self._propensity(state_before, index, len(arms))
        chosen = arms[index]
        iface = representative(interfaces, chosen)
        assert iface is not None  # arms come from the interfaces themselves
        return ArmChoice(
            arms=arms,
            arm_index=index,
            access_type=chosen,
            interface=iface.name,
            propensity=max(self.config.propensity_floor, min(1.0, propensity)),
            features=x,
        )

    def _exploration_state(self, policy: Any, X: np.ndarray, k: int) -> tuple[str, float, int]:
        """(rule, probability parameter, greedy arm) captured before ``predict`` mutates the policy."""
        if not policy.is_fitted:
            return ("uniform", 1.0, -1)
        name = self.config.policy
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            greedy = int(np.asarray(policy.predict(X, exploit=True)).reshape(-1)[0])
            if name == "epsilon_greedy":
                return ("epsilon", float(policy.explore_prob), greedy)
            if name == "active_explorer":
                return ("active", float(policy.explore_prob), greedy)
            if name == "adaptive_greedy":
                best = float(np.max(policy._oracles.decision_function(X)))
                return ("uniform" if best <= policy.thr else "greedy", 1.0, greedy)
            if name == "explore_first" and policy.explore_cnt < policy.explore_rounds:
                return ("uniform", 1.0, greedy)
        return ("greedy", 1.0, greedy)

    @staticmethod
    def _propensity(state: tuple[str, float, int], chosen: int, k: int) -> float:
        rule, p, greedy = state
        if rule == "uniform":
            return 1.0 / k
        if rule == "epsilon":
            return (1.0 - p) * (chosen == greedy) + p / k
        if rule == "active":
            return 1.0 - p if chosen == greedy else p
        return 1.0

    def update(self, samples: Sequence[TrainingSample]) -> int:
        """Refit the policies with a batch of rewarded decisions (``partial_fit``).

        Samples are grouped by arm set; single-arm samples carry no choice and
        are skipped. Returns the number of samples used.
        """
        groups: dict[ArmSet, list[TrainingSample]] = {}
        for s in samples:
            if len(s.arms) > 1:
                groups.setdefault(tuple(s.arms), []).append(s)
        used = 0
        for arms, group in groups.items():
            policy = self._policy(arms)
            X = np.asarray([s.features for s in group], dtype=np.float64)
            a = np.asarray([s.arm_index for s in group], dtype=np.int64)
            r = np.asarray([s.reward for s in group], dtype=np.float64)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                policy.partial_fit(X, a, r)
            used += len(group)
        self.samples_seen += used
        return used

    def clone(self) -> PrimaryPathBandit:
        """Deep copy, for refitting off the serving path."""
        return copy.deepcopy(self)

    def carry_exploration_from(self, live: PrimaryPathBandit) -> None:
        """Adopt the exploration schedule (decayed ε/p, explore counters, RNG) of the serving copy.

        Decisions made while a clone was being refitted advanced the live
        policies' decay, counters and random generator; the refitted clone
        continues from there (reusing the clone's older RNG state would replay
        the same random draws).
        """
        for arms, policy in self._policies.items():
            old = live._policies.get(arms)
            if old is None:
                continue
            for attr in ("explore_prob", "explore_cnt", "random_state"):
                if hasattr(old, attr):
                    setattr(policy, attr, getattr(old, attr))
