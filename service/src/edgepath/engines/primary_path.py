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

Policy registry
---------------
:data:`REGISTRY` maps each policy name to a :class:`PolicySpec`, the one place a
policy is defined: the reward it learns from (``utility``,
:func:`~edgepath.engines.reward.utility`, or the paper's ``bernoulli``), how to
build its per-arm-set state, its class (which states its propensity rule and its
exploration state: :class:`RidgePolicy`, :class:`ActiveExplorerPolicy`, one
:class:`LibraryPolicy` subclass per library policy), the :class:`BanditConfig`
parameters it reads (settings ``bandit.*``, ``EDGEPATH_BANDIT__*``) and its sources.

Every per-arm-set policy object implements :class:`PathPolicy`: ``decide(x, floor, native) -> (arm, probability)``
with the **exact** probability of the chosen arm at decision time, ``probabilities(x, floor)``, ``learn(X, a, r,
w)``, ``is_fitted``, ``carry_exploration_from(live)``, ``advance_exploration(decisions)`` and the class attribute
``EXPLORATION_STATE``; a utility learner also :class:`UtilityPathPolicy` (``warm``, ``model.coef``/``intercept``),
a Bernoulli one :class:`OraclePathPolicy` (``_oracles.algos``, its per-arm SGD oracles). Adding a policy = its class
(if new) and one ``PolicySpec`` line in ``_SPECS``: the spec is checked when it is created (a member missing is a
``TypeError`` naming it), its ``build`` makes an instance of its ``policy_class`` (a library builder,
:func:`_library`, is bound to it), and :meth:`PrimaryPathBandit.advance_exploration` and
:attr:`PolicySpec.exploration_state` ask the class. What else a new policy may need (settings, the offline
trainer's flags, ``edgepath eval policies``) is listed in README "Extending EdgePath".

EdgePath's learners (numpy, :mod:`edgepath.engines.linear_bandit`; per-arm
discounted ridge regression of the utility, forgetting factor γ):

=======================  =====================================================================
name                     policy and parameters (BanditConfig fields)
=======================  =====================================================================
ridge_squarecb           SquareCB inverse-gap weighting (Foster & Rakhlin 2020),
(default)                γ_t = squarecb_gamma0·(n+1)^0.5, ridge_lambda, forgetting
ridge_lints              linear Thompson sampling (Agrawal & Goyal 2013), ts_scale
ridge_linucb             LinUCB (Li et al. 2010), ucb_alpha (deterministic, propensity 1)
ridge_egreedy            ε-greedy on the ridge estimates, ridge_epsilon
=======================  =====================================================================

The paper's six policies, Bernoulli reward, ``SGDClassifier(loss="log_loss")``
oracles (``alpha=sgd_alpha``), ``batch_train=True`` and ``njobs=1`` (the
library default of -1 spawns a pool that costs ~12 ms a call on 2 cores).
Library parameters are the contextualbandits defaults (v0.3.x docs, which
follow Cortes, arXiv:1811.04383) except ``beta_prior=None``: the library's
``"auto"`` prior replaces an arm's oracle by a *random* Beta draw until it has
seen a few positive outcomes, which makes the chosen arm's probability an
integral no policy logs; without it each decision is a deterministic function
of the oracles plus the policy's own exploration draw, so the propensity
below is exact.

=======================  =====================================================================
name                     policy and parameters
=======================  =====================================================================
active_explorer          the paper's Algorithm 1, EdgePath's implementation
                         (:mod:`edgepath.engines.active_explorer`: w_q criterion, p = probability
                         of the active-learning branch as the paper's text says), explore_prob=0.15,
                         decay=0.9997
adaptive_greedy          AdaptiveGreedy, window_size=500, percentile=30, decay=0.9998
adaptive_active_greedy   AdaptiveGreedy as above with active_choice="weighted" (library criterion)
bootstrapped_ucb         BootstrappedUCB, nsamples=10, percentile=80
epsilon_greedy           EpsilonGreedy, explore_prob=0.2, decay=0.9999
explore_first            ExploreFirst, explore_rounds=500 (library default 2500 is longer
                         than a demo; configurable)
=======================  =====================================================================

Propensity
----------
The probability of the chosen arm under the policy at decision time, with the
oracle's greedy arm ``g`` and ``K`` arms:

* unfitted policy (an arm without outcomes yet): uniform, ``1/K``;
* ridge_*: the exploration rule's probability vector (see linear_bandit);
* active_explorer: ``(1−p)·1[a=g] + p·1[a=q*]``, q* the w_q arm;
* epsilon_greedy: ``(1-ε)·1[a=g] + ε/K`` with the current (decayed) ε;
* adaptive_greedy: ``1/K`` when the best oracle score is at or below the
  policy's threshold (random choice), else 1;
* adaptive_active_greedy, bootstrapped_ucb: deterministic given the fitted
  oracles, so 1;
* explore_first: ``1/K`` during the exploration rounds, 1 after.

Exploration floor (``propensity_floor``, default 0.01: inverse-propensity
weights stay ≤ 100):

* ridge_squarecb, ridge_lints, ridge_egreedy draw from a distribution that
  already gives every arm at least the floor — the smallest mixture of the
  rule's vector with a uniform draw that meets it
  (:func:`~edgepath.engines.linear_bandit.floor_mix`; untouched where the rule
  already does, e.g. ridge_egreedy's ε/K = 0.025). Their logged propensity is
  the exact probability of the drawn arm, floor included
  (``ArmChoice.propensity == ArmChoice.probability``), so IPS/DR on their logs
  are unbiased. The floor is read from :class:`BanditConfig` at each decision
  (a loaded model follows the serving settings); a floor above ``1/K`` is
  capped at ``1/K`` (uniform), and then the logged ``max(floor, p)`` is a bound.
* ridge_linucb, adaptive_active_greedy, bootstrapped_ucb and adaptive_greedy
  outside its random branch are deterministic (propensity 1, exact).
* The paper's randomised policies keep their published rules (their decisions
  are not changed): their logged propensity is ``max(floor, p)``, which is a
  *bound*, not the probability, whenever ``p`` < floor — epsilon_greedy's
  exploration arms once its decayed ε/K falls below the floor (after ~23,000
  decisions at ε = 0.2, decay 0.9999, K = 2), active_explorer's active-learning
  arm (when it is not the greedy one) once its decayed p does (~9,000 decisions
  at 0.15, decay 0.9997). ``ArmChoice.probability`` keeps the policy's exact
  value; IPS/DR weight such rows by 1/floor instead of the larger 1/p.

Bad outcomes never reach a model: :meth:`PrimaryPathBandit.update` drops
samples whose features, propensity, throughput (negative, non-finite or above
:data:`MAX_PLAUSIBLE_THROUGHPUT_BPS`), latency or loss are out of range, and
counts them in ``samples_rejected``.
"""

from __future__ import annotations

import copy
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

import numpy as np

from edgepath.engines import reward as rewards
from edgepath.engines.active_explorer import PaperActiveExplorer
from edgepath.engines.features import (
    N_FEATURES,
    SLOT_INDEX,
    SLOTS,
    context_features,
    context_features_batch,
    native_features,
    native_features_batch,
    representative,
)
from edgepath.engines.features import NATIVE_AVAILABLE as FEATURES_NATIVE
from edgepath.engines.linear_bandit import MODES, LinearBandit, LinearBanditConfig
from edgepath.types import AccessType, InterfaceContext

if TYPE_CHECKING:
    from sklearn.linear_model import SGDClassifier

ArmSet = tuple[AccessType, ...]

#: The service's default policy (settings ``policy``).
DEFAULT_POLICY = "ridge_squarecb"
#: Outcomes above this throughput are absurd for one primary path and never reach a model, bit/s.
MAX_PLAUSIBLE_THROUGHPUT_BPS = 1e11


@dataclass(frozen=True)
class UtilityConfig:
    """Parameters of :func:`edgepath.engines.reward.utility` (settings ``utility_*``)."""

    throughput_cap_bps: float = rewards.UTILITY_THROUGHPUT_CAP_BPS
    latency_cap_ms: float = rewards.UTILITY_LATENCY_CAP_MS
    latency_weight: float = rewards.UTILITY_LATENCY_WEIGHT
    loss_weight: float = rewards.UTILITY_LOSS_WEIGHT

    def __call__(self, throughput_bps: float, latency_ms: float | None, loss: float | None) -> float:
        return rewards.utility(
            throughput_bps,
            latency_ms,
            loss,
            throughput_cap_bps=self.throughput_cap_bps,
            latency_cap_ms=self.latency_cap_ms,
            latency_weight=self.latency_weight,
            loss_weight=self.loss_weight,
        )

    def describe(self) -> str:
        return (
            f"utility = clip(T/{self.throughput_cap_bps:g} bit/s, 0, 1) · (1 − {self.latency_weight:g}·"
            f"clip(latency/{self.latency_cap_ms:g} ms, 0, 1)) · (1 − {self.loss_weight:g}·clip(loss, 0, 1))"
        )


@dataclass(frozen=True)
class BanditConfig:
    """Hyper-parameters of the primary-path bandit (see module docstring for sources)."""

    policy: str = DEFAULT_POLICY
    seed: int = 0
    propensity_floor: float = 0.01
    # paper policies (SGD oracles, Bernoulli reward)
    explore_prob: float = 0.15
    explore_decay: float | None = 0.9997
    epsilon: float = 0.2
    epsilon_decay: float | None = 0.9999
    explore_rounds: int = 500
    ucb_nsamples: int = 10
    ucb_percentile: int = 80
    sgd_alpha: float = 1e-4
    # EdgePath's learners (ridge regression of the utility)
    ridge_lambda: float = 1.0
    forgetting: float = 0.999
    squarecb_gamma0: float = 100.0
    ts_scale: float = 0.02
    ucb_alpha: float = 0.05
    ridge_epsilon: float = 0.05
    utility: UtilityConfig = field(default_factory=UtilityConfig)

    def linear(self, mode: str) -> LinearBanditConfig:
        return LinearBanditConfig(
            mode=mode,  # type: ignore[arg-type]
            ridge_lambda=self.ridge_lambda,
            forgetting=self.forgetting,
            gamma0=self.squarecb_gamma0,
            ts_scale=self.ts_scale,
            ucb_alpha=self.ucb_alpha,
            epsilon=self.ridge_epsilon,
        )


@dataclass(frozen=True)
class ArmChoice:
    """What :meth:`PrimaryPathBandit.decide` returns.

    ``features`` has shape ``(N_FEATURES,)``; ``arm_index`` indexes ``arms``;
    ``probability`` is the exact probability the policy gave the chosen arm (for the
    ridge policies with the propensity floor enforced in the draw); ``propensity``
    (logged) is ``max(propensity_floor, probability)`` — equal to ``probability`` for
    the ridge policies, a bound for the paper's policies when their probability is
    below the floor (module docstring, "Exploration floor").
    """

    arms: ArmSet
    arm_index: int
    access_type: AccessType
    interface: str
    propensity: float
    features: np.ndarray = field(repr=False)
    probability: float = 1.0


@dataclass(frozen=True)
class TrainingSample:
    """One logged decision with its outcome, as the trainer feeds it back.

    ``reward`` is the paper's Bernoulli reward (0/1); ``throughput_bps``
    (bit/s), ``latency_ms`` and ``loss`` are the measured outcome the utility
    is computed from. A sample without a throughput (synthetic worlds, old
    logs) gives utility learners its Bernoulli reward as the target.
    """

    features: Sequence[float]
    arms: ArmSet
    arm_index: int
    reward: int
    propensity: float
    throughput_bps: float | None = None
    latency_ms: float | None = None
    loss: float | None = None


def _oracle(cfg: BanditConfig) -> SGDClassifier:
    """One arm's SGD logistic oracle (the paper's). scikit-learn is imported here, on first use: it brings SciPy
    and pandas (~1.4 s and ~110 MB of a process), which the default learner's serving process never needs."""
    from sklearn.linear_model import SGDClassifier

    return SGDClassifier(loss="log_loss", alpha=cfg.sgd_alpha, random_state=cfg.seed)


def _is_sgd_classifier(obj: object) -> bool:
    """``isinstance(obj, SGDClassifier)`` without importing scikit-learn: no object is one while it is not loaded
    (an unpickled oracle loads it first)."""
    module = sys.modules.get("sklearn.linear_model")
    return module is not None and isinstance(obj, module.SGDClassifier)


# --- the contract of a per-arm-set policy ---------------------------------------------------------------------------
@runtime_checkable
class PathPolicy(Protocol):
    """What :class:`PrimaryPathBandit`, the trainers and the fleet's exploration sync need of a policy object.

    One object serves one arm set of K ≥ 2 arms (a one-arm device never reaches a policy); arms are indices
    ``0..K−1`` into the arm set. ``x`` is one context's feature vector, shape ``(N_FEATURES,)``, float64
    (:mod:`edgepath.engines.features`); ``X`` a batch of them, ``(n, N_FEATURES)``.

    ``floor`` is the service's ``propensity_floor`` (:class:`BanditConfig`, a probability, default 0.01: IPS weights
    stay ≤ 100), passed at every call so that a loaded model follows the serving settings. A randomised rule should
    give every arm at least ``min(floor, 1/K)`` in the distribution it draws from (as the ridge policies do,
    :func:`~edgepath.engines.linear_bandit.floor_mix`); a rule that keeps a published form may ignore it, and then the
    logged propensity ``max(floor, probability)`` is a bound, not the probability (module docstring, "Exploration
    floor").

    Registering a class (``PolicySpec.policy_class``) checks it has every member below (:func:`policy_class_problems`;
    ``EXPLORATION_STATE`` and ``advance_exploration`` must be the class's own, not the generic
    :class:`LibraryPolicy`'s). Optional: ``decide_batch(X, floor) -> (arms (m,) int, probabilities (m,))``, which
    :meth:`PrimaryPathBandit.decide_batch` uses where present; it must draw what ``m`` calls of :meth:`decide` would,
    in row order (else rows are decided one by one with :meth:`decide`).
    """

    #: Dotted attribute paths, relative to the policy object (``"lib.explore_prob"``, ``"model.rng"``), of the state
    #: that changes as the policy decides (decayed exploration probability, round counters, random generator).
    #: Non-empty. :meth:`carry_exploration_from` copies them from the serving copy to a refitted clone;
    #: :attr:`PolicySpec.exploration_state` reports them.
    EXPLORATION_STATE: ClassVar[tuple[str, ...]]

    @property
    def is_fitted(self) -> bool:
        """True once the policy decides from what it learnt (every arm has an outcome); until then it draws
        uniformly, probability ``1/K``."""
        ...

    def decide(self, x: np.ndarray, floor: float = 0.0, native: bool = False) -> tuple[int, float]:
        """Draw an arm for ``x``: ``(arm index, probability)``, the **exact** probability in (0, 1] the drawn arm had
        at decision time (it is logged as the propensity; see ``floor`` above). Advances the exploration schedule by
        one decision. ``native``: the caller allows compiled code that gives the same arm and probability bit for
        bit; a policy without any ignores it."""
        ...

    def probabilities(self, x: np.ndarray, floor: float = 0.0) -> np.ndarray:
        """The distribution :meth:`decide` would draw from now, shape ``(K,)``, sums to 1; draws nothing and does not
        advance the schedule (the ground-truth OPE harness evaluates models with it)."""
        ...

    def learn(self, X: np.ndarray, a: np.ndarray, r: np.ndarray, w: np.ndarray | None = None) -> None:
        """Learn from outcomes in arrival order: ``X`` ``(n, N_FEATURES)``, arm indices ``a`` ``(n,)``, targets
        ``r`` ``(n,)`` (utility in [0, 1] or Bernoulli reward 0/1, per the spec's ``reward``), weights ``w`` ``(n,)``
        (None = 1). Only valid samples reach it (:func:`valid_sample`)."""
        ...

    def carry_exploration_from(self, live: Any) -> None:
        """Adopt the :attr:`EXPLORATION_STATE` of ``live``, the serving copy this refitted clone replaces (ignore a
        ``live`` of another kind: a model of another policy was loaded)."""
        ...

    def advance_exploration(self, decisions: int) -> None:
        """Advance the exploration schedule as if ``decisions`` (≥ 1) more decisions had been made (by other
        replicas: :mod:`edgepath.training.exploration`), so N replicas explore like one. A policy whose schedule
        does not count decisions implements it as a documented no-op."""
        ...


@runtime_checkable
class UtilityPathPolicy(PathPolicy, Protocol):
    """A policy with ``reward="utility"``: also warm-started from offline rows, and greedy by a linear model.

    ``model`` has ``coef`` ``(K, N_FEATURES)`` and ``intercept`` ``(K,)``, the per-arm linear estimates of the
    utility (:class:`~edgepath.engines.linear_bandit.LinearBandit`): ``OfflineModel.greedy_arms``
    (:mod:`edgepath.training.offline`) takes ``argmax(X @ coef.T + intercept)`` for the static evaluation rows.
    """

    model: Any

    def warm(self, X: np.ndarray, a: np.ndarray, r: np.ndarray, w: np.ndarray | None = None) -> None:
        """Add offline rows (shapes as :meth:`PathPolicy.learn`) without forgetting
        (:meth:`PrimaryPathBandit.warm_start_rows`)."""
        ...


@runtime_checkable
class OraclePathPolicy(PathPolicy, Protocol):
    """A policy with ``reward="bernoulli"``: per-arm SGD oracles (the paper's), once fitted.

    ``_oracles.algos`` is the list of its K per-arm ``SGDClassifier(loss="log_loss")`` oracles, in arm order (present
    once fitted: the library creates it on the first fit). Its builder receives ``base``, pre-fit oracles of the
    offline trainer (or None), and must keep those very objects as its oracles:
    :meth:`PrimaryPathBandit.warm_start` restores their offline coefficients after one ``learn``,
    ``OfflineModel.greedy_arms`` and ``select_alpha`` (:mod:`edgepath.training.offline`) read their
    ``decision_function`` / ``predict_proba``.
    """

    @property
    def _oracles(self) -> Any: ...


#: The members every registered class must have (:func:`policy_class_problems`), by reward.
_PATH_POLICY_MEMBERS: tuple[str, ...] = (
    "EXPLORATION_STATE",
    "is_fitted",
    "decide",
    "probabilities",
    "learn",
    "carry_exploration_from",
    "advance_exploration",
)
_REQUIRED_MEMBERS: dict[str, tuple[str, ...]] = {
    "utility": (*_PATH_POLICY_MEMBERS, "warm"),  # UtilityPathPolicy
    "bernoulli": _PATH_POLICY_MEMBERS,  # OraclePathPolicy: its _oracles exist only once fitted
}
#: Members a class must state itself: the generic :class:`LibraryPolicy`'s would silently keep a new decaying
#: policy's ε/counters out of refits and out of the fleet-wide schedule.
_OWN_MEMBERS: tuple[str, ...] = ("EXPLORATION_STATE", "advance_exploration")


def policy_class_problems(policy_class: type, reward: str) -> list[str]:
    """What keeps ``policy_class`` from being registered for ``reward``: one sentence a problem, [] if none.

    Checks the class (not an instance): every member of :class:`PathPolicy` (and ``warm`` for ``utility``) is defined
    by the class or a base other than the protocols, ``EXPLORATION_STATE`` and ``advance_exploration`` not by the
    generic :class:`LibraryPolicy`, and ``EXPLORATION_STATE`` is a non-empty tuple of attribute paths.
    """
    if reward not in _REQUIRED_MEMBERS:
        return [f"reward must be one of {sorted(_REQUIRED_MEMBERS)}, not {reward!r}"]
    problems = []
    for member in _REQUIRED_MEMBERS[reward]:
        owner = next((c for c in policy_class.__mro__ if member in vars(c)), None)
        if owner is None or owner in (PathPolicy, UtilityPathPolicy, OraclePathPolicy):
            problems.append(f"{member} is missing (PathPolicy)")
        elif member in _OWN_MEMBERS and owner is LibraryPolicy:
            problems.append(f"{member} is LibraryPolicy's generic one: the class must state its own")
    state = getattr(policy_class, "EXPLORATION_STATE", None)
    if state is not None and not (isinstance(state, tuple) and state and all(isinstance(s, str) and s for s in state)):
        problems.append(f"EXPLORATION_STATE must be a non-empty tuple of attribute paths, not {state!r}")
    return problems


def _carry_state(policy: Any, live: Any) -> None:
    """Copy each dotted path of ``policy.EXPLORATION_STATE`` that ``live`` has from ``live`` to ``policy``."""
    for path in policy.EXPLORATION_STATE:
        *parents, attr = path.split(".")
        src, dst = live, policy
        for part in parents:
            src, dst = getattr(src, part, None), getattr(dst, part)
        if src is not None and hasattr(src, attr):
            setattr(dst, attr, getattr(src, attr))


# --- per-arm-set policy objects -------------------------------------------------------------------------------------
class RidgePolicy:
    """EdgePath's learner for one arm set: a :class:`LinearBandit` over the shared features.

    ``floor`` (the :class:`BanditConfig`'s ``propensity_floor``, passed by :class:`PrimaryPathBandit` at each
    decision so that a loaded model follows the serving settings) is enforced in the distribution the arm is
    drawn from (:func:`~edgepath.engines.linear_bandit.floor_mix`; not for the deterministic ``linucb``), so the
    returned propensity is the exact probability of the drawn arm and already ≥ the floor.
    """

    #: Deciding advances only the generator of the draws (SquareCB's γ_t counts *trained* outcomes, carried by the
    #: model itself).
    EXPLORATION_STATE: ClassVar[tuple[str, ...]] = ("model.rng",)

    def __init__(self, k: int, cfg: BanditConfig, seed: int, mode: str) -> None:
        self.model = LinearBandit(k, N_FEATURES, cfg.linear(mode), seed=seed)

    @property
    def is_fitted(self) -> bool:
        return self.model.is_fitted

    def decide(self, x: np.ndarray, floor: float = 0.0, native: bool = False) -> tuple[int, float]:
        """``native``: the compiled single decision where the rule has one (:meth:`LinearBandit.decide`)."""
        return self.model.decide(x, floor, native)

    def probabilities(self, x: np.ndarray, floor: float = 0.0) -> np.ndarray:
        return self.model.probabilities(x, floor)

    def decide_batch(self, X: np.ndarray, floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`decide` for the rows of ``X`` ``(m, N_FEATURES)``: arm indices ``(m,)``, propensities ``(m,)``."""
        return self.model.decide_batch(X, floor)

    def learn(self, X: np.ndarray, a: np.ndarray, r: np.ndarray, w: np.ndarray | None = None) -> None:
        self.model.update(X, a, r, w)

    def warm(self, X: np.ndarray, a: np.ndarray, r: np.ndarray, w: np.ndarray | None = None) -> None:
        """Add offline rows without forgetting (warm start)."""
        self.model.update(X, a, r, w, forget=False)

    def carry_exploration_from(self, live: Any) -> None:
        if isinstance(live, RidgePolicy):
            _carry_state(self, live)

    def advance_exploration(self, decisions: int) -> None:
        """No-op: SquareCB's γ_t = gamma0·(n_t + 1)^0.5 counts *trained* outcomes (n_t), which the trainer's
        published model carries; it is the same on every replica by construction."""


class ActiveExplorerPolicy(PaperActiveExplorer):
    """The paper's ActiveExplorer as a registry policy (Bernoulli reward); exploration state
    :attr:`PaperActiveExplorer.EXPLORATION_STATE` (the decayed p and the generator)."""

    def decide(self, x: np.ndarray, floor: float = 0.0, native: bool = False) -> tuple[int, float]:
        """The paper's Algorithm 1 (``floor`` not used: its published rule is kept; module docstring; ``native``
        not used: no compiled form)."""
        return super().decide(x)

    def probabilities(self, x: np.ndarray, floor: float = 0.0) -> np.ndarray:
        return super().probabilities(x)

    def learn(self, X: np.ndarray, a: np.ndarray, r: np.ndarray, w: np.ndarray | None = None) -> None:
        self.partial_fit(X, a, r, w)

    def carry_exploration_from(self, live: Any) -> None:
        if isinstance(live, PaperActiveExplorer):
            super().carry_exploration_from(live)

    def advance_exploration(self, decisions: int) -> None:
        """Apply the decay of ``decisions`` decisions made by other replicas: p ← p·decay^decisions
        (the per-decision decay of the paper's ActiveExplorer, once fitted, as :meth:`decide` does)."""
        if self.decay is not None and self.is_fitted and decisions > 0:
            self.explore_prob *= self.decay**decisions


class LibraryPolicy:
    """A contextualbandits policy with the exploration-state bookkeeping that makes its propensity exact.

    One subclass per registered library policy (its spec's ``policy_class``, which the spec's :func:`_library` builder
    instantiates) states its propensity rule (:meth:`_rule`), its exploration state (:attr:`EXPLORATION_STATE`,
    ``lib.*`` paths, carried from the serving copy to a refitted clone), how the fleet's decisions advance it
    (:meth:`advance_exploration`; both required of every registered subclass, :func:`policy_class_problems`) and,
    where it has one, its numpy fast path (:meth:`_fast_choice`). Attribute reads not defined here go to the library
    object (``_oracles``, ``predict``…).
    """

    #: Paths (``lib.*``) of the library object's state that changes as it decides (:attr:`PathPolicy.EXPLORATION_STATE`;
    #: the generic class's is only for pickles of unregistered policies: a registered subclass states its own).
    EXPLORATION_STATE: ClassVar[tuple[str, ...]] = ("lib.random_state",)
    #: True when :meth:`_fast_choice` reproduces the library's ``predict`` (same decisions, same random draws).
    FAST = False

    def __init__(self, name: str, lib: Any) -> None:
        self.name = name
        self.lib = lib

    @staticmethod
    def of(name: str, lib: Any) -> LibraryPolicy:
        """The registered class of policy ``name`` around ``lib`` (a plain :class:`LibraryPolicy` if ``name`` is not
        registered with a :class:`LibraryPolicy` subclass)."""
        return _library_class(name)(name, lib)

    def __getattr__(self, attr: str) -> Any:
        if attr in ("lib", "name") or attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self.lib, attr)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Pickles of the single ``LibraryPolicy`` class of earlier releases load as their policy's class."""
        self.__dict__.update(state)
        if type(self) is LibraryPolicy:
            self.__class__ = _library_class(state.get("name"))

    @property
    def is_fitted(self) -> bool:
        """The library object's ``is_fitted``."""
        return self.lib.is_fitted  # type: ignore[no-any-return]

    def _snapshot(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Oracles' ``coef_`` (K, d) and ``intercept_`` (K,), read once per model version; None if ineligible.

        Eligible when every arm's oracle is a fitted ``SGDClassifier`` and the library adds nothing to its
        ``predict_proba`` (no smoothing, no Beta-prior draws, no zero-counter override): then the library's
        score of arm q is exactly ``σ(coef_q·x + b_q)``.
        """
        cached = self.__dict__.get("_fast")
        if cached is not None:
            return cached[0]
        snap = None
        ovr = getattr(self.lib, "_oracles", None)
        if self.FAST and self.lib.is_fitted and ovr is not None:
            algos = list(ovr.algos)
            thr = np.asarray(getattr(ovr, "thr", 0.0))
            if (
                all(_is_sgd_classifier(a) and hasattr(a, "coef_") for a in algos)
                and getattr(ovr, "smooth", None) is None
                and not np.any(thr > 0)
                and (
                    not getattr(ovr, "force_counters", False)
                    or bool(np.all(np.asarray(ovr.beta_counters)[1:3].sum(axis=0) > 0))
                )
            ):
                coef = np.vstack([np.asarray(a.coef_, dtype=np.float64).reshape(-1) for a in algos])
                intercept = np.asarray([float(np.ravel(a.intercept_)[0]) for a in algos])
                snap = (coef, intercept)
        self.__dict__["_fast"] = (snap,)
        return snap

    def _fast_decide(self, x: np.ndarray, snap: tuple[np.ndarray, np.ndarray]) -> tuple[int, float]:
        """The library's ``predict`` for one row, in numpy, consuming its random generator identically."""
        coef, intercept = snap
        greedy = int(np.argmax(0.5 * (1.0 + np.tanh(0.5 * (coef @ x + intercept)))))  # σ, as predict_proba
        return self._fast_choice(x, greedy)

    def _fast_choice(self, x: np.ndarray, greedy: int) -> tuple[int, float]:
        """The policy's choice and its probability given the oracles' greedy arm (only where ``FAST``)."""
        raise NotImplementedError(f"{self.name} has no fast path")

    def _rule(self, X: np.ndarray, greedy: int) -> tuple[str, float]:
        """Propensity rule of a fitted policy before ``predict`` mutates it: (``uniform`` | ``epsilon`` | ``greedy``,
        probability parameter). Deterministic given the fitted oracles by default."""
        return ("greedy", 1.0)

    def _state(self, X: np.ndarray) -> tuple[str, float, int]:
        """(rule, probability parameter, greedy arm) captured before ``predict`` mutates the policy."""
        policy = self.lib
        if not policy.is_fitted:
            return ("uniform", 1.0, -1)
        # greedy = argmax of the oracles' scores (not predict(exploit=True), which also decays ε)
        greedy = int(np.argmax(np.asarray(policy._oracles.decision_function(X)).reshape(-1)))
        return (*self._rule(X, greedy), greedy)

    def probabilities(self, x: np.ndarray, floor: float = 0.0) -> np.ndarray:
        """Exact probability of each arm at the current state (does not advance the policy). ``floor`` is not
        used: the paper's policies keep their published rules (module docstring, "Exploration floor")."""
        k = self.lib.nchoices
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rule, p, greedy = self._state(x.reshape(1, -1))
        if rule == "uniform":
            return np.full(k, 1.0 / k)
        out = np.full(k, p / k) if rule == "epsilon" else np.zeros(k)
        out[greedy] += 1.0 - p if rule == "epsilon" else 1.0
        return out

    def decide(self, x: np.ndarray, floor: float = 0.0, native: bool = False) -> tuple[int, float]:
        """Arm and its exact probability under the published rule (``floor`` not used, as :meth:`probabilities`;
        ``native`` not used: no compiled form)."""
        snap = self._snapshot()
        if snap is not None:
            return self._fast_decide(x, snap)
        X = x.reshape(1, -1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rule, p, greedy = self._state(X)
            index = int(np.asarray(self.lib.predict(X)).reshape(-1)[0])
        k = self.lib.nchoices
        if rule == "uniform":
            return index, 1.0 / k
        if rule == "epsilon":
            return index, (1.0 - p) * (index == greedy) + p / k
        return index, 1.0

    def learn(self, X: np.ndarray, a: np.ndarray, r: np.ndarray, w: np.ndarray | None = None) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.lib.partial_fit(X, a, r)
        self.__dict__.pop("_fast", None)  # a new model version: re-read the coefficients

    def carry_exploration_from(self, live: Any) -> None:
        if isinstance(live, LibraryPolicy):
            _carry_state(self, live)

    def advance_exploration(self, decisions: int) -> None:
        """No-op, for pickles of unregistered policies only: a registered subclass states its own
        (:func:`policy_class_problems`)."""


class EpsilonGreedyPolicy(LibraryPolicy):
    """EpsilonGreedy: ``(1-ε)·1[a=g] + ε/K`` with the current (decayed) ε; exploration state ε and the RNG."""

    EXPLORATION_STATE = ("lib.explore_prob", "lib.random_state")
    FAST = True

    def advance_exploration(self, decisions: int) -> None:
        """ε ← ε·decay^decisions, as ``decisions`` calls of ``predict`` would (no decay: unchanged)."""
        lib = self.lib
        if decisions > 0 and getattr(lib, "decay", None) is not None:
            lib.explore_prob *= lib.decay**decisions

    def _rule(self, X: np.ndarray, greedy: int) -> tuple[str, float]:
        return ("epsilon", float(self.lib.explore_prob))

    def _fast_choice(self, x: np.ndarray, greedy: int) -> tuple[int, float]:
        lib, k = self.lib, self.lib.nchoices
        p = float(lib.explore_prob)
        arm = greedy
        if lib.random_state.random(size=1)[0] <= p:
            arm = int(lib.random_state.integers(k, size=1)[0])
        if lib.decay is not None:
            lib.explore_prob *= lib.decay
        return arm, (1.0 - p) * (arm == greedy) + p / k


class ExploreFirstPolicy(LibraryPolicy):
    """ExploreFirst: ``1/K`` during the exploration rounds, 1 after; exploration state the round counter and RNG."""

    EXPLORATION_STATE = ("lib.explore_cnt", "lib.random_state")
    FAST = True

    def advance_exploration(self, decisions: int) -> None:
        """The round counter + ``decisions``, capped at ``explore_rounds``."""
        lib = self.lib
        if decisions > 0:
            lib.explore_cnt = min(int(lib.explore_cnt) + decisions, int(lib.explore_rounds))

    def _exploring(self) -> bool:
        return bool(self.lib.explore_cnt < self.lib.explore_rounds)

    def _rule(self, X: np.ndarray, greedy: int) -> tuple[str, float]:
        return ("uniform", 1.0) if self._exploring() else ("greedy", 1.0)

    def _fast_choice(self, x: np.ndarray, greedy: int) -> tuple[int, float]:
        lib, k = self.lib, self.lib.nchoices
        if self._exploring():
            lib.explore_cnt += 1
            arm = int(lib.random_state.integers(k, size=1)[0])
            lib._choose_active(x.reshape(1, -1), np.asarray([arm]))  # no-op without active_choice
            return arm, 1.0 / k
        return greedy, 1.0

    def probabilities(self, x: np.ndarray, floor: float = 0.0) -> np.ndarray:
        if self._exploring():
            return np.full(self.lib.nchoices, 1.0 / self.lib.nchoices)
        return super().probabilities(x, floor)


class AdaptiveGreedyPolicy(LibraryPolicy):
    """AdaptiveGreedy: ``1/K`` when the best oracle score is at or below the policy's threshold, else 1.

    Exploration state carried across refits: the generator only. The threshold (``lib.thr``, moved by the window of
    scores ``predict`` sees and its decay) is neither carried nor advanced by other replicas' decisions: it follows
    the scores this copy saw, not a count of decisions.
    """

    EXPLORATION_STATE = ("lib.random_state",)

    def _rule(self, X: np.ndarray, greedy: int) -> tuple[str, float]:
        best = float(np.max(self.lib._oracles.decision_function(X)))
        return ("uniform" if best <= self.lib.thr else "greedy", 1.0)

    def advance_exploration(self, decisions: int) -> None:
        """No-op: the threshold follows the scores this copy saw, not a counter."""


class DeterministicLibraryPolicy(LibraryPolicy):
    """adaptive_active_greedy, bootstrapped_ucb: deterministic given the fitted oracles (propensity 1)."""

    EXPLORATION_STATE = ("lib.random_state",)

    def advance_exploration(self, decisions: int) -> None:
        """No-op: no per-decision schedule."""


def _library_class(name: str | None) -> type[LibraryPolicy]:
    """The :class:`LibraryPolicy` subclass ``name`` is registered with (:data:`REGISTRY`), else the generic class."""
    spec = REGISTRY.get(name) if isinstance(name, str) else None
    cls = spec.policy_class if spec is not None else LibraryPolicy
    return cls if isinstance(cls, type) and issubclass(cls, LibraryPolicy) else LibraryPolicy


# --- registry -------------------------------------------------------------------------------------------------------
Builder = Callable[[int, BanditConfig, int, "list[Any] | None"], Any]


@dataclass(frozen=True)
class PolicySpec:
    """One registered policy: everything that defines it, in one place.

    ``reward`` is what it learns from; ``build(k, cfg, seed, base)`` makes its per-arm-set object for ``k`` arms
    (``base``: the offline trainer's pre-fit per-arm oracles for a Bernoulli policy, else None), an instance of
    ``policy_class`` (:class:`PathPolicy`; its docstring states the propensity rule, its ``EXPLORATION_STATE`` what
    is carried across refits); ``parameters`` are the :class:`BanditConfig` fields (settings ``bandit.*``,
    ``EDGEPATH_BANDIT__*``) it reads besides ``seed`` and ``propensity_floor``; ``source`` the paper or library it
    follows.

    Raises
    ------
    TypeError
        When created with a ``policy_class`` that does not implement :class:`PathPolicy` for its ``reward``
        (:func:`policy_class_problems`, naming each missing member), or a :func:`_library` builder with a class that
        is not a :class:`LibraryPolicy`.
    """

    name: str
    reward: Literal["utility", "bernoulli"]
    build: Builder
    source: str
    policy_class: type
    parameters: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problems = policy_class_problems(self.policy_class, self.reward)
        if problems:
            raise TypeError(f"policy {self.name!r}, class {self.policy_class.__name__}: " + "; ".join(problems))
        if isinstance(self.build, _LibraryBuilder):
            if not issubclass(self.policy_class, LibraryPolicy):
                raise TypeError(f"policy {self.name!r}: a _library builder needs a LibraryPolicy subclass")
            object.__setattr__(self, "build", self.build.bind(self.name, self.policy_class))

    @property
    def exploration_state(self) -> tuple[str, ...]:
        """What changes as the policy decides and moves from the serving copy to a refitted clone: its class's
        :attr:`PathPolicy.EXPLORATION_STATE` (attribute paths of the per-arm-set object)."""
        return tuple(self.policy_class.EXPLORATION_STATE)  # type: ignore[attr-defined]


#: Install command of the optional contextualbandits library (the five library policies below, v1 artefacts).
LIBRARY_EXTRA = "pip install 'edgepath[library-policies]'"


def _contextualbandits() -> Any:
    """``contextualbandits.online``, imported on first use: the serving runtime does not need it (nor the pandas
    it imports) unless a library policy is chosen (issue 14, item 5).

    Raises
    ------
    ModuleNotFoundError
        Naming the extra to install when the library is absent.
    """
    try:
        import contextualbandits.online as online
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"the contextualbandits policies need the library-policies extra ({exc.name} is not installed): "
            + LIBRARY_EXTRA,
            name=exc.name,
        ) from exc
    return online


LibraryFactory = Callable[[Any, BanditConfig, dict[str, Any]], Any]


class _LibraryBuilder:
    """The builder of a contextualbandits policy (:func:`_library`): ``factory(oracle or base oracles, cfg, common)``
    makes the library object, wrapped in the ``policy_class`` of the :class:`PolicySpec` it is registered in (bound
    when the spec is created, so the class stating the propensity rule is always the registered one)."""

    needs_contextualbandits = True

    def __init__(
        self, factory: LibraryFactory, name: str | None = None, policy_class: type[LibraryPolicy] | None = None
    ) -> None:
        self.factory, self.name, self.policy_class = factory, name, policy_class

    def bind(self, name: str, policy_class: type[LibraryPolicy]) -> _LibraryBuilder:
        return _LibraryBuilder(self.factory, name, policy_class)

    def __call__(self, k: int, cfg: BanditConfig, seed: int, base: list[Any] | None) -> LibraryPolicy:
        if self.name is None or self.policy_class is None:
            raise TypeError("a _library builder builds once registered in a PolicySpec (which gives it its class)")
        _contextualbandits()  # absent library: the error names the extra before anything is built
        common: dict[str, Any] = dict(nchoices=k, batch_train=True, random_state=seed, beta_prior=None)
        return self.policy_class(self.name, self.factory(_oracle(cfg) if base is None else base, cfg, common))


def _library(factory: LibraryFactory) -> Builder:
    """The builder of a library policy from ``factory(oracles, cfg, common)``, which returns the contextualbandits
    object: ``oracles`` is one ``SGDClassifier`` (the library clones it per arm) or the list of pre-fit per-arm
    oracles, ``common`` the keyword arguments every registered library policy takes (``nchoices``, ``batch_train``,
    ``random_state``, ``beta_prior=None``: module docstring). The :class:`PolicySpec` binds its ``policy_class``."""
    return _LibraryBuilder(factory)


def _ridge(mode: str) -> Builder:
    """The builder of a :class:`RidgePolicy` with linear bandit rule ``mode``; raises ``ValueError`` for a mode not
    in :data:`~edgepath.engines.linear_bandit.MODES`."""
    if mode not in MODES:
        raise ValueError(f"unknown linear bandit mode {mode!r}; choose one of {MODES}")
    return lambda k, cfg, seed, _base: RidgePolicy(k, cfg, seed, mode)


def _active(k: int, cfg: BanditConfig, seed: int, base: list[Any] | None) -> ActiveExplorerPolicy:
    oracles = [_oracle(cfg) for _ in range(k)] if base is None else list(base)
    return ActiveExplorerPolicy(oracles, cfg.explore_prob, cfg.explore_decay, seed)


_RIDGE = ("ridge_lambda", "forgetting", "utility")
_SGD = ("sgd_alpha",)
_SPECS: tuple[PolicySpec, ...] = (
    PolicySpec(
        "ridge_squarecb",
        "utility",
        _ridge("squarecb"),
        "Foster & Rakhlin, ICML 2020 (SquareCB)",
        RidgePolicy,
        (*_RIDGE, "squarecb_gamma0"),
    ),
    PolicySpec(
        "ridge_lints",
        "utility",
        _ridge("lints"),
        "Agrawal & Goyal, ICML 2013 (LinTS)",
        RidgePolicy,
        (*_RIDGE, "ts_scale"),
    ),
    PolicySpec(
        "ridge_linucb", "utility", _ridge("linucb"), "Li et al., WWW 2010 (LinUCB)", RidgePolicy, (*_RIDGE, "ucb_alpha")
    ),
    PolicySpec(
        "ridge_egreedy",
        "utility",
        _ridge("egreedy"),
        "ε-greedy on ridge estimates (issue 15 baseline)",
        RidgePolicy,
        (*_RIDGE, "ridge_epsilon"),
    ),
    PolicySpec(
        "active_explorer",
        "bernoulli",
        _active,
        "Alzadjali et al., Algorithm 1",
        ActiveExplorerPolicy,
        (*_SGD, "explore_prob", "explore_decay"),
    ),
    PolicySpec(
        "adaptive_greedy",
        "bernoulli",
        _library(lambda o, cfg, c: _contextualbandits().AdaptiveGreedy(o, njobs=1, **c)),
        "contextualbandits AdaptiveGreedy (Chakrabarti et al. 2009)",
        AdaptiveGreedyPolicy,
        _SGD,
    ),
    PolicySpec(
        "adaptive_active_greedy",
        "bernoulli",
        _library(
            lambda o, cfg, c: _contextualbandits().AdaptiveGreedy(o, active_choice="weighted", njobs=1, **c),
        ),
        "contextualbandits AdaptiveGreedy, active_choice='weighted'",
        DeterministicLibraryPolicy,
        _SGD,
    ),
    PolicySpec(
        "bootstrapped_ucb",
        "bernoulli",
        _library(
            lambda o, cfg, c: _contextualbandits().BootstrappedUCB(
                o, nsamples=cfg.ucb_nsamples, percentile=cfg.ucb_percentile, njobs_arms=1, njobs_samples=1, **c
            ),
        ),
        "contextualbandits BootstrappedUCB",
        DeterministicLibraryPolicy,
        (*_SGD, "ucb_nsamples", "ucb_percentile"),
    ),
    PolicySpec(
        "epsilon_greedy",
        "bernoulli",
        _library(
            lambda o, cfg, c: _contextualbandits().EpsilonGreedy(
                o, explore_prob=cfg.epsilon, decay=cfg.epsilon_decay, njobs=1, **c
            ),
        ),
        "contextualbandits EpsilonGreedy",
        EpsilonGreedyPolicy,
        (*_SGD, "epsilon", "epsilon_decay"),
    ),
    PolicySpec(
        "explore_first",
        "bernoulli",
        _library(
            lambda o, cfg, c: _contextualbandits().ExploreFirst(o, explore_rounds=cfg.explore_rounds, njobs=1, **c),
        ),
        "contextualbandits ExploreFirst",
        ExploreFirstPolicy,
        (*_SGD, "explore_rounds"),
    ),
)
REGISTRY: dict[str, PolicySpec] = {s.name: s for s in _SPECS}
"""Policy name → :class:`PolicySpec`."""

POLICIES: tuple[str, ...] = tuple(REGISTRY)
#: The policies that learn from the paper's Bernoulli reward (SGD oracles): the paper's six and any added since.
BERNOULLI_POLICIES: tuple[str, ...] = tuple(s.name for s in _SPECS if s.reward == "bernoulli")
#: The paper's six policies (Alzadjali et al.; Bernoulli reward): a fixed list, not every Bernoulli policy.
PAPER_POLICIES: tuple[str, ...] = (
    "active_explorer",
    "adaptive_greedy",
    "adaptive_active_greedy",
    "bootstrapped_ucb",
    "epsilon_greedy",
    "explore_first",
)
#: EdgePath's utility learners.
UTILITY_POLICIES: tuple[str, ...] = tuple(s.name for s in _SPECS if s.reward == "utility")


def policy_spec(name: str) -> PolicySpec:
    """The registered spec of ``name``; raises ``ValueError`` naming the choices for an unknown name."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {sorted(REGISTRY)}") from None


def _make_policy(name: str, k: int, cfg: BanditConfig, seed: int, base: list[Any] | None = None) -> Any:
    """Build policy ``name`` over ``k`` arms; ``base`` = pre-fit per-arm oracles (SGD policies' warm start).

    Raises
    ------
    ValueError
        For an unknown name (:func:`policy_spec`).
    TypeError
        When the spec's builder makes something other than an instance of its ``policy_class``.
    """
    spec = policy_spec(name)
    policy = spec.build(k, cfg, seed, base)
    if not isinstance(policy, spec.policy_class):
        raise TypeError(f"policy {name!r}: its builder made a {type(policy).__name__}, not its {spec.policy_class}")
    return policy


def arm_set(interfaces: Sequence[InterfaceContext]) -> ArmSet:
    """The arms a device offers: its distinct access types in :data:`SLOTS` order."""
    offered = {i.access_type for i in interfaces}
    return tuple(s for s in SLOTS if s in offered)


def _features_batch(
    contexts: Sequence[Sequence[InterfaceContext]], native: bool
) -> tuple[np.ndarray, list[list[InterfaceContext | None]], list[ArmSet]]:
    """The features of ``contexts`` (shape ``(n, N_FEATURES)``), each one's representative per slot of
    :data:`SLOTS` (None: not offered) and its arm set (:func:`arm_set`): by the compiled encoder where installed and
    ``native``, unless it hands a context back; else :func:`~edgepath.engines.features.context_features_batch`."""
    if native and FEATURES_NATIVE and contexts:
        encoded = native_features_batch(contexts)
        if encoded is not None:
            return encoded
    X, by_access = context_features_batch(contexts)
    reps = [[r.get(slot) for slot in SLOTS] for r in by_access]
    return X, reps, [tuple(s for s, r in zip(SLOTS, rep, strict=True) if r is not None) for rep in reps]


def _finite(v: float | None) -> bool:
    return v is None or math.isfinite(v)


def valid_sample(s: TrainingSample) -> bool:
    """True when a sample may reach a model (see module docstring: bad outcomes never do)."""
    try:
        x = np.asarray(s.features, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    if x.shape != (N_FEATURES,) or not np.all(np.isfinite(x)):
        return False
    if not 0 <= s.arm_index < len(s.arms) or s.reward not in (0, 1):
        return False
    if not (math.isfinite(s.propensity) and 0.0 < s.propensity <= 1.0):
        return False
    t = s.throughput_bps
    if t is not None and not (math.isfinite(t) and 0.0 <= t <= MAX_PLAUSIBLE_THROUGHPUT_BPS):
        return False
    if not _finite(s.latency_ms) or (s.latency_ms is not None and s.latency_ms < 0.0):
        return False
    return s.loss is None or (math.isfinite(s.loss) and 0.0 <= s.loss <= 1.0)


class PrimaryPathBandit:
    """Contextual bandit choosing the primary path, one policy per arm set.

    Raises
    ------
    ValueError
        From the constructor for an unknown policy name.
    """

    def __init__(self, config: BanditConfig | None = None) -> None:
        self.config = config or BanditConfig()
        spec = policy_spec(self.config.policy)  # validate the name early
        if getattr(spec.build, "needs_contextualbandits", False):
            _contextualbandits()  # a library policy without the library: fail at start, naming the extra
        self._policies: dict[ArmSet, Any] = {}
        self.samples_seen = 0
        self.samples_rejected = 0
        #: Decisions per arm set not yet reported to the fleet's shared count (issue 17; see
        #: :mod:`edgepath.training.exploration`). Carried to the next model version.
        self.decisions_unsynced: dict[ArmSet, int] = {}

    @property
    def policy_name(self) -> str:
        return self.config.policy

    @property
    def spec(self) -> PolicySpec:
        return policy_spec(self.config.policy)

    @property
    def reward_name(self) -> str:
        """What the policy maximises: ``utility`` or ``bernoulli``."""
        return self.spec.reward

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
        """Install offline-fitted SGD oracles (one per arm) as the policy of ``arms`` (paper policies' warm start).

        contextualbandits accepts a list of per-arm classifiers as
        ``base_algorithm``; the policy keeps those very objects as its oracles
        and later ``partial_fit`` calls continue from their coefficients. To
        mark the policy fitted and set its per-arm reward counters, the policy
        is ``partial_fit`` once on the offline rows ``X, a, r``; the oracles'
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
            When the number of oracles differs from the number of arms, or the policy is not an SGD policy.
        """
        if len(oracles) != len(arms) or len(arms) < 2:
            raise ValueError(f"need one oracle per arm ({len(arms)} arms, {len(oracles)} oracles)")
        if self.reward_name != "bernoulli":
            raise ValueError(f"policy {self.policy_name} has no SGD oracles; use warm_start_rows")
        fitted = [(o.coef_.copy(), o.intercept_.copy(), o.t_) for o in oracles]
        policy = _make_policy(self.config.policy, len(arms), self.config, self._seed(arms), base=list(oracles))
        if isinstance(policy, PaperActiveExplorer):
            policy.seen[:] = True  # the oracles are the offline fit; nothing to replay
            policy._snapshot()
        else:
            policy.learn(np.asarray(X, dtype=np.float64), np.asarray(a), np.asarray(r, dtype=np.float64))
            if getattr(policy, "_oracles", None) is None:
                raise TypeError(f"policy {self.policy_name} has no _oracles.algos once fitted (OraclePathPolicy)")
            for algo, oracle, (coef, intercept, t) in zip(policy._oracles.algos, oracles, fitted, strict=True):
                if algo is oracle:  # plain oracles; bootstrapped policies keep their resampled copies
                    algo.coef_, algo.intercept_, algo.t_ = coef, intercept, t
            policy.__dict__.pop("_fast", None)
        self._policies[tuple(arms)] = policy

    def warm_start_rows(
        self, arms: ArmSet, X: np.ndarray, a: np.ndarray, r: np.ndarray, w: np.ndarray | None = None
    ) -> None:
        """Warm-start a utility learner of ``arms`` from offline rows (added without forgetting).

        Parameters
        ----------
        X, a, r, w:
            Features ``(n, N_FEATURES)``, arm indices ``(n,)``, utilities ``(n,)`` in [0, 1] and
            weights ``(n,)`` (1 for full-information rows, 1/propensity for logged decisions).

        Raises
        ------
        ValueError
            For a paper (SGD) policy, or on shape mismatch / non-finite values.
        """
        if self.reward_name != "utility":
            raise ValueError(f"policy {self.policy_name} learns from SGD oracles; use warm_start")
        policy = _make_policy(self.config.policy, len(arms), self.config, self._seed(arms))
        policy.warm(np.asarray(X, dtype=np.float64), np.asarray(a), np.asarray(r, dtype=np.float64), w)
        self._policies[tuple(arms)] = policy

    def decide(self, interfaces: Sequence[InterfaceContext], native: bool = True) -> ArmChoice:
        """Choose the primary path for one context.

        Parameters
        ----------
        interfaces:
            Validated interfaces of the request (at least one).
        native:
            Encode the context with the compiled encoder where it is installed
            (:func:`~edgepath.engines.features.native_features`: the same vector, bit for bit), and let the
            compiled single decision draw the arm where the policy has one (the ridge SquareCB and ε-greedy
            rules, :meth:`~edgepath.engines.linear_bandit.LinearBandit.decide`: the same arm and propensity, bit
            for bit); False: the Python encoder and rules.

        Returns
        -------
        ArmChoice
            The chosen arm, its interface, its propensity in (0, 1] and the features used.
        """
        encoded = native_features(interfaces) if native and FEATURES_NATIVE else None
        if encoded is not None:
            x, reps, arms = encoded
            return self._decide(arms, x, lambda access: reps[SLOT_INDEX[access]], native)
        x = context_features(interfaces, native=False)
        return self.decide_features(interfaces, arm_set(interfaces), x, native)

    def decide_features(
        self, interfaces: Sequence[InterfaceContext], arms: ArmSet, x: np.ndarray, native: bool = False
    ) -> ArmChoice:
        """:meth:`decide` with the arm set and features already computed (``x`` shape ``(N_FEATURES,)``)."""
        return self._decide(arms, x, lambda access: representative(interfaces, access), native)

    def _decide(
        self,
        arms: ArmSet,
        x: np.ndarray,
        representative_of: Callable[[AccessType], InterfaceContext | None],
        native: bool,
    ) -> ArmChoice:
        if len(arms) == 1:
            index, probability = 0, 1.0
        else:
            index, probability = self._policy(arms).decide(x, self.config.propensity_floor, native)
            self.decisions_unsynced[arms] = self.decisions_unsynced.get(arms, 0) + 1
        chosen = arms[index]
        iface = representative_of(chosen)
        assert iface is not None  # arms come from the interfaces themselves
        return ArmChoice(
            arms=arms,
            arm_index=index,
            access_type=chosen,
            interface=iface.name,
            propensity=max(self.config.propensity_floor, min(1.0, probability)),
            features=x,
            probability=probability,
        )

    def decide_batch(self, contexts: Sequence[Sequence[InterfaceContext]], native: bool = True) -> list[ArmChoice]:
        """:meth:`decide` for many contexts (``RecommendBatch``), in order.

        The features of all contexts are encoded into one ``(n, N_FEATURES)`` matrix: by the compiled encoder
        context by context where it is installed and ``native`` (the single path's vectors, bit for bit, and faster
        than numpy's for a batch of 64), else by :func:`~edgepath.engines.features.context_features_batch`. The
        contexts of one arm set are decided by that arm set's policy together when it has a ``decide_batch`` (the
        ridge policies: one matrix product, one vector of draws from the policy's generator in context order, see
        :meth:`~edgepath.engines.linear_bandit.LinearBandit.decide_batch`), else one by one in order (the
        SGD-oracle policies). Each arm set's policy consumes its own random generator in the same order as
        ``n`` calls of :meth:`decide` would, so the choices and exact propensities are those of the single path.
        """
        X, reps, arm_sets = _features_batch(contexts, native)
        n = len(contexts)
        index = np.zeros(n, dtype=np.int64)
        probability = np.ones(n)
        groups: dict[ArmSet, list[int]] = {}
        for i, arms in enumerate(arm_sets):
            if len(arms) > 1:
                groups.setdefault(arms, []).append(i)
        floor = self.config.propensity_floor
        for arms, rows in groups.items():
            policy = self._policy(arms)
            batch = getattr(policy, "decide_batch", None)
            if batch is not None:  # the ridge policies (vectorised)
                index[rows], probability[rows] = batch(X[rows], floor)
            else:
                for i in rows:
                    index[i], probability[i] = policy.decide(X[i], floor)
        out = []
        for i, (arms, arm, p) in enumerate(zip(arm_sets, index.tolist(), probability.tolist(), strict=True)):
            chosen = arms[arm]
            iface = reps[i][SLOT_INDEX[chosen]]
            assert iface is not None  # arms come from the interfaces themselves
            out.append(
                ArmChoice(
                    arms=arms,
                    arm_index=arm,
                    access_type=chosen,
                    interface=iface.name,
                    propensity=max(floor, min(1.0, p)),
                    features=X[i],
                    probability=p,
                )
            )
        return out

    def probabilities(self, interfaces: Sequence[InterfaceContext]) -> np.ndarray:
        """Exact probability of each arm of ``arm_set(interfaces)`` now, without deciding; shape ``(K,)``.

        The distribution :meth:`decide` draws from: for the ridge policies with the propensity floor enforced in it.
        """
        return self.probabilities_features(arm_set(interfaces), context_features(interfaces))[0]

    def probabilities_features(self, arms: ArmSet, X: np.ndarray) -> np.ndarray:
        """:meth:`probabilities` of arm set ``arms`` at already-encoded features ``X`` ``(m, N_FEATURES)``; ``(m, K)``.

        Row by row the vector :meth:`decide_features` draws from now (the same computation, so the same floats).
        An arm set without a policy gets its (unfitted) one, as :meth:`decide` would. Off the serving path: the
        ground-truth harness evaluates every model version at every context with it.
        """
        arms = tuple(arms)
        X = np.asarray(X, dtype=np.float64).reshape(-1, N_FEATURES)
        if len(arms) == 1:
            return np.ones((X.shape[0], 1))
        policy, floor = self._policy(arms), self.config.propensity_floor
        return np.asarray([policy.probabilities(x, floor) for x in X], dtype=np.float64).reshape(-1, len(arms))

    def target(self, s: TrainingSample) -> float:
        """The value the policy learns from for sample ``s``: its utility or its Bernoulli reward."""
        if self.reward_name == "utility" and s.throughput_bps is not None:
            return self.config.utility(s.throughput_bps, s.latency_ms, s.loss)
        return float(s.reward)

    def update(self, samples: Sequence[TrainingSample]) -> int:
        """Learn from a batch of rewarded decisions, in arrival order.

        Samples are grouped by arm set; single-arm samples carry no choice and
        are skipped; invalid samples (:func:`valid_sample`) are dropped and
        counted in ``samples_rejected``. Returns the number of samples used.
        """
        groups: dict[ArmSet, list[TrainingSample]] = {}
        for s in samples:
            if not valid_sample(s):
                self.samples_rejected += 1
                continue
            if len(s.arms) > 1:
                groups.setdefault(tuple(s.arms), []).append(s)
        used = 0
        for arms, group in groups.items():
            policy = self._policy(arms)
            X = np.asarray([s.features for s in group], dtype=np.float64)
            a = np.asarray([s.arm_index for s in group], dtype=np.int64)
            r = np.asarray([self.target(s) for s in group], dtype=np.float64)
            policy.learn(X, a, r)
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
            if old is not None:
                policy.carry_exploration_from(old)
        self.decisions_unsynced = live.decisions_unsynced  # not yet counted fleet-wide: keep counting them

    def take_unsynced_decisions(self) -> dict[ArmSet, int]:
        """The decisions per arm set made since the last call (and reset the count)."""
        taken, self.decisions_unsynced = self.decisions_unsynced, {}
        return taken

    def return_unsynced_decisions(self, taken: dict[ArmSet, int]) -> None:
        """Put back counts :meth:`take_unsynced_decisions` returned that could not be reported."""
        for arms, n in taken.items():
            self.decisions_unsynced[arms] = self.decisions_unsynced.get(arms, 0) + n

    def advance_exploration(self, arms: ArmSet, decisions: int) -> None:
        """Advance the exploration schedule of ``arms`` by ``decisions`` decisions other replicas made, so N
        replicas explore like one (issue 17): the policy's own :meth:`PathPolicy.advance_exploration` (a no-op for
        policies without a per-decision schedule)."""
        if len(arms) < 2 or decisions <= 0:
            return
        self._policy(tuple(arms)).advance_exploration(decisions)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Load pickles of earlier versions (v1 artefacts: no ``samples_rejected``, bare library policies)."""
        state.setdefault("samples_rejected", 0)
        state.setdefault("decisions_unsynced", {})
        self.__dict__.update(state)
        cfg = self.config
        for name, default in (("utility", UtilityConfig()),):
            if not hasattr(cfg, name):
                object.__setattr__(cfg, name, default)
        for arms, policy in list(self._policies.items()):
            if not hasattr(policy, "decide"):  # a bare contextualbandits object (v1)
                self._policies[arms] = _from_v1(cfg.policy, policy, self._seed(arms))


def _from_v1(name: str, lib: Any, seed: int) -> Any:
    """A v1 (bare contextualbandits) policy as a registry policy.

    v1's ``active_explorer`` was the library's ActiveExplorer (wrong criterion,
    bounded propensities); its fitted SGD oracles and current p become the
    paper-faithful :class:`ActiveExplorerPolicy`.
    """
    algos = list(getattr(getattr(lib, "_oracles", None), "algos", []) or [])
    if name == "active_explorer" and algos and all(_is_sgd_classifier(o) for o in algos):
        policy = ActiveExplorerPolicy(algos, float(lib.explore_prob), getattr(lib, "decay", None), seed)
        policy.seen[:] = bool(lib.is_fitted)
        policy._snapshot()
        return policy
    return LibraryPolicy.of(name, lib)
