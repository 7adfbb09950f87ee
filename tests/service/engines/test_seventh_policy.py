# ruff: noqa: N803  (X: design matrix, scikit-learn convention, as the policies it implements)
"""A seventh primary-path policy, added by the steps README "Extending EdgePath" documents and nothing else.

The steps: write the policy's class (implementing ``PathPolicy``), then register one ``PolicySpec`` (in the source
that is one line in ``_SPECS``; here ``monkeypatch.setitem(REGISTRY, …)``, as the test must not change the module).
Two toys take them: a policy of its own (per-arm SGD oracles, explores with a fixed probability ε that decays) and a
contextualbandits ε-greedy variant (a ``LibraryPolicy`` subclass built by ``_library``: the case that once chose
arms 28 %/72 % but logged propensity 1.0). Each must then be served: its logged propensity is the probability it
drew with (empirically too), it learns, survives a snapshot round trip, and its decaying ε is carried to refits and
advanced by other replicas' decisions.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from edgepath.engines.features import context_features
from edgepath.engines.primary_path import (
    REGISTRY,
    BanditConfig,
    LibraryPolicy,
    PolicySpec,
    PrimaryPathBandit,
    TrainingSample,
    _library,
)
from edgepath.training import snapshots
from edgepath.types import AccessType, InterfaceContext
from sklearn.linear_model import SGDClassifier

ARMS = (AccessType.WIFI, AccessType.LTE)
KEY = b"test-key"


class FixedExplorePolicy:
    """Toy: with probability ε a uniform arm, else the oracles' greedy one: P(a) = ε/K + (1 − ε)·1[a = g] (exact);
    ε ← ε·decay after each fitted decision. Bernoulli reward, one SGD oracle per arm."""

    EXPLORATION_STATE = ("explore_prob", "random_state")

    def __init__(self, oracles: list[SGDClassifier], explore_prob: float, decay: float | None, seed: int) -> None:
        self.oracles, self.explore_prob, self.decay = oracles, explore_prob, decay
        self.random_state = np.random.default_rng(seed)
        self.seen = np.array([hasattr(o, "coef_") for o in oracles])

    @property
    def is_fitted(self) -> bool:
        return bool(self.seen.all())

    @property
    def _oracles(self) -> SimpleNamespace:
        return SimpleNamespace(algos=self.oracles)

    def probabilities(self, x: np.ndarray, floor: float = 0.0) -> np.ndarray:
        k = len(self.oracles)
        if not self.is_fitted:
            return np.full(k, 1.0 / k)
        greedy = int(np.argmax([o.decision_function(x.reshape(1, -1))[0] for o in self.oracles]))
        p = np.full(k, self.explore_prob / k)
        p[greedy] += 1.0 - self.explore_prob
        return p

    def decide(self, x: np.ndarray, floor: float = 0.0, native: bool = False) -> tuple[int, float]:
        p = self.probabilities(x, floor)
        arm = min(int(np.searchsorted(np.cumsum(p), self.random_state.random(), side="right")), len(p) - 1)
        if self.is_fitted and self.decay is not None:
            self.explore_prob *= self.decay
        return arm, float(p[arm])

    def learn(self, X: np.ndarray, a: np.ndarray, r: np.ndarray, w: np.ndarray | None = None) -> None:
        for q, oracle in enumerate(self.oracles):
            m = a == q
            if m.any():
                oracle.partial_fit(X[m], r[m], classes=[0, 1], sample_weight=None if w is None else w[m])
                self.seen[q] = True

    def carry_exploration_from(self, live: Any) -> None:
        if isinstance(live, FixedExplorePolicy):
            for attr in self.EXPLORATION_STATE:
                setattr(self, attr, getattr(live, attr))

    def advance_exploration(self, decisions: int) -> None:
        if self.is_fitted and self.decay is not None and decisions > 0:
            self.explore_prob *= self.decay**decisions


def _build_fixed(k: int, cfg: BanditConfig, seed: int, base: list[Any] | None) -> FixedExplorePolicy:
    oracles = [SGDClassifier(loss="log_loss", alpha=cfg.sgd_alpha, random_state=cfg.seed) for _ in range(k)]
    return FixedExplorePolicy(oracles if base is None else list(base), cfg.epsilon, cfg.epsilon_decay, seed)


class EpsilonVariantPolicy(LibraryPolicy):
    """Toy: contextualbandits' EpsilonGreedy through the library's own ``predict`` (no fast path):
    ``(1 − ε)·1[a = g] + ε/K``; exploration state ε and the generator; ε ← ε·decay per decision."""

    EXPLORATION_STATE = ("lib.explore_prob", "lib.random_state")

    def _rule(self, X: np.ndarray, greedy: int) -> tuple[str, float]:
        return ("epsilon", float(self.lib.explore_prob))

    def advance_exploration(self, decisions: int) -> None:
        if decisions > 0 and self.lib.decay is not None:
            self.lib.explore_prob *= self.lib.decay**decisions


TOYS = {
    "fixed_explore": lambda: PolicySpec(
        "fixed_explore", "bernoulli", _build_fixed, "test toy", FixedExplorePolicy, ("sgd_alpha", "epsilon")
    ),
    "epsilon_variant": lambda: PolicySpec(
        "epsilon_variant",
        "bernoulli",
        _library(REGISTRY["epsilon_greedy"].build.factory),  # the library object epsilon_greedy's spec makes
        "test toy",
        EpsilonVariantPolicy,
        ("sgd_alpha", "epsilon", "epsilon_decay"),
    ),
}


def _ifaces(rssi: float, rsrp: float) -> list[InterfaceContext]:
    return [
        InterfaceContext(name="wlan0", access_type=AccessType.WIFI, wifi_rssi_dbm=rssi),
        InterfaceContext(name="wwan0", access_type=AccessType.LTE, rsrp_dbm=rsrp),
    ]


def _samples(n: int, seed: int) -> list[TrainingSample]:
    """WiFi (arm 0) always rewards, LTE never: the oracles' greedy arm is WiFi everywhere."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        x = context_features(_ifaces(float(rng.uniform(-90, -45)), float(rng.uniform(-120, -75))))
        out.append(TrainingSample(list(x), ARMS, i % 2, int(i % 2 == 0), 0.5))
    return out


def _resolve(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.fixture(params=sorted(TOYS))
def toy(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> PolicySpec:
    spec = TOYS[request.param]()
    monkeypatch.setitem(REGISTRY, spec.name, spec)  # = its PolicySpec line in _SPECS
    return spec


def _fitted(spec: PolicySpec, **cfg: Any) -> PrimaryPathBandit:
    bandit = PrimaryPathBandit(BanditConfig(policy=spec.name, seed=7, sgd_alpha=1e-2, epsilon=0.5, **cfg))
    assert bandit.update(_samples(200, seed=1)) == 200
    return bandit


def test_the_registered_class_is_served_and_states_its_exploration_state(toy: PolicySpec) -> None:
    bandit = PrimaryPathBandit(BanditConfig(policy=toy.name))
    assert type(bandit._policy(ARMS)) is toy.policy_class  # built as registered, not as a default class
    assert toy.exploration_state and set(toy.exploration_state) == set(toy.policy_class.EXPLORATION_STATE)


def test_the_logged_propensity_is_the_probability_it_chose_with(toy: PolicySpec) -> None:
    bandit = _fitted(toy, epsilon_decay=None)
    ifaces = _ifaces(-60.0, -100.0)
    assert bandit.probabilities(ifaces).tolist() == [0.75, 0.25]  # it learnt: WiFi greedy, ε/K = 0.25
    n, counts = 1000, np.zeros(2)
    for _ in range(n):
        before = bandit.probabilities(ifaces)
        choice = bandit.decide(ifaces)
        assert choice.propensity == choice.probability == before[choice.arm_index]
        counts[choice.arm_index] += 1
    # what it logged is what it did: frequencies within 5 s.d. (0.068) of the logged probabilities
    assert abs(counts[0] / n - 0.75) < 0.07, counts


def test_the_batch_decides_as_one_by_one(toy: PolicySpec) -> None:
    bandit = _fitted(toy, epsilon_decay=None)
    one_by_one = bandit.clone()
    contexts = [_ifaces(-50.0 - i, -80.0 - i) for i in range(30)]
    batch = bandit.decide_batch(contexts)
    single = [one_by_one.decide(c) for c in contexts]
    assert [(c.arm_index, c.propensity) for c in batch] == [(c.arm_index, c.propensity) for c in single]
    assert all(c.propensity == c.probability for c in batch)


def test_it_survives_a_snapshot_round_trip(toy: PolicySpec) -> None:
    bandit = _fitted(toy, epsilon_decay=0.999)
    blob = snapshots.dumps(bandit)
    loaded = snapshots.loads_verified(KEY, 1, b"{}", blob, snapshots.sign(KEY, 1, b"{}", blob))
    assert type(loaded._policies[ARMS]) is toy.policy_class
    contexts = [_ifaces(-50.0 - i, -80.0 - i) for i in range(40)]
    got = [(c.arm_index, c.propensity) for c in (loaded.decide(i) for i in contexts)]
    assert got == [(c.arm_index, c.propensity) for c in (bandit.decide(i) for i in contexts)]


@pytest.mark.filterwarnings("ignore:Warning. 'EpsilonGreedy' has a very high decay rate")
def test_its_decaying_exploration_is_carried_and_synchronised(toy: PolicySpec) -> None:
    decay = 0.99
    live = _fitted(toy, epsilon_decay=decay)
    ifaces = _ifaces(-60.0, -100.0)
    # refit: a clone learns while the live copy decides; the clone continues the live schedule
    refit = live.clone()
    for _ in range(25):
        live.decide(ifaces)
    refit.update(_samples(50, seed=2))
    refit.carry_exploration_from(live)
    for path in toy.exploration_state:
        assert _resolve(refit._policies[ARMS], path) is _resolve(live._policies[ARMS], path), path
    # fleet: this replica's 10 decisions and another replica told of them explore alike
    other = live.clone()
    for _ in range(10):
        live.decide(ifaces)
    other.advance_exploration(ARMS, 10)
    expected_eps = 0.5 * decay**35
    assert other.probabilities(ifaces) == pytest.approx([1 - expected_eps / 2, expected_eps / 2], rel=1e-12)
    assert other.probabilities(ifaces) == pytest.approx(live.probabilities(ifaces), rel=1e-12)
