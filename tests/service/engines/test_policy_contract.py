# ruff: noqa: N803  (X: design matrix, scikit-learn convention, as the policies it implements)
"""The contract of a primary-path policy (``PathPolicy``) is checked where a policy is registered, not discovered by a
silent fallback at serving time; an unhandled ridge mode is an error, never another rule."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from edgepath.engines import linear_bandit
from edgepath.engines.features import N_FEATURES
from edgepath.engines.linear_bandit import LinearBandit, LinearBanditConfig
from edgepath.engines.primary_path import (
    REGISTRY,
    BanditConfig,
    EpsilonGreedyPolicy,
    LibraryPolicy,
    OraclePathPolicy,
    PathPolicy,
    PolicySpec,
    PrimaryPathBandit,
    RidgePolicy,
    UtilityPathPolicy,
    _contextualbandits,
    _library,
    _ridge,
    policy_class_problems,
)
from edgepath.types import AccessType

ARMS_K = 2


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_policy_implements_the_contract_of_its_reward(name: str) -> None:
    spec = REGISTRY[name]
    assert policy_class_problems(spec.policy_class, spec.reward) == []
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        policy = spec.build(ARMS_K, BanditConfig(policy=name), 1, None)
        policy.learn(rng.random((40, N_FEATURES)), np.arange(40) % 2, (np.arange(40) % 3 == 0).astype(float))
    assert isinstance(policy, UtilityPathPolicy if spec.reward == "utility" else OraclePathPolicy)
    for path in spec.exploration_state:  # every declared path exists on the object
        obj: Any = policy
        for part in path.split("."):
            obj = getattr(obj, part)


class _Incomplete:
    """Decides and learns, but says nothing of its exploration schedule."""

    EXPLORATION_STATE = ("rng",)
    is_fitted = True

    def decide(self, x: np.ndarray, floor: float = 0.0, native: bool = False) -> tuple[int, float]:
        return 0, 1.0

    def probabilities(self, x: np.ndarray, floor: float = 0.0) -> np.ndarray:
        return np.array([1.0, 0.0])

    def learn(self, X: np.ndarray, a: np.ndarray, r: np.ndarray, w: np.ndarray | None = None) -> None:
        pass

    def carry_exploration_from(self, live: Any) -> None:
        pass


def test_a_class_without_a_member_is_refused_at_registration_naming_it() -> None:
    with pytest.raises(TypeError, match="advance_exploration is missing"):
        PolicySpec("toy", "bernoulli", lambda k, cfg, seed, base: _Incomplete(), "test", _Incomplete)
    with pytest.raises(TypeError, match="warm is missing"):  # a utility learner is also warm-started
        PolicySpec("toy", "utility", lambda k, cfg, seed, base: _Incomplete(), "test", _Incomplete)


def test_an_explicit_subclass_of_the_protocol_must_still_implement_it() -> None:
    class Declared(PathPolicy):
        EXPLORATION_STATE = ("rng",)

    with pytest.raises(TypeError, match="decide is missing"):
        PolicySpec("toy", "bernoulli", lambda k, cfg, seed, base: Declared(), "test", Declared)


def test_a_library_policy_must_state_its_own_exploration_state_and_schedule() -> None:
    class Variant(LibraryPolicy):  # an ε-greedy variant that forgot both: its ε would never be carried nor synced
        def _rule(self, X: np.ndarray, greedy: int) -> tuple[str, float]:
            return ("epsilon", float(self.lib.explore_prob))

    build = _library(lambda o, cfg, c: _contextualbandits().EpsilonGreedy(o, njobs=1, **c))
    with pytest.raises(TypeError, match="EXPLORATION_STATE is LibraryPolicy's generic one") as err:
        PolicySpec("toy", "bernoulli", build, "test", Variant)
    assert "advance_exploration is LibraryPolicy's generic one" in str(err.value)


def test_a_library_builder_builds_its_spec_class_and_nothing_else() -> None:
    build = _library(lambda o, cfg, c: _contextualbandits().EpsilonGreedy(o, njobs=1, **c))
    with pytest.raises(TypeError, match="registered in a PolicySpec"):
        build(2, BanditConfig(), 1, None)
    with pytest.raises(TypeError, match="LibraryPolicy subclass"):
        PolicySpec("toy", "utility", build, "test", RidgePolicy)
    spec = PolicySpec("toy", "bernoulli", build, "test", EpsilonGreedyPolicy)
    assert type(spec.build(2, BanditConfig(), 1, None)) is EpsilonGreedyPolicy


def test_a_builder_making_another_class_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        REGISTRY, "toy", PolicySpec("toy", "bernoulli", _ridge("squarecb"), "test", EpsilonGreedyPolicy)
    )
    with pytest.raises(TypeError, match="its builder made a RidgePolicy"):
        PrimaryPathBandit(BanditConfig(policy="toy"))._policy((AccessType.WIFI, AccessType.LTE))


def test_an_unknown_ridge_mode_is_refused_when_registered() -> None:
    with pytest.raises(ValueError, match="unknown linear bandit mode 'softmax'"):
        _ridge("softmax")


def test_a_new_ridge_mode_must_say_whether_it_is_floored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linear_bandit, "MODES", (*linear_bandit.MODES, "softmax"))
    with pytest.raises(ValueError, match="exactly one of FLOORED_MODES"):
        LinearBanditConfig(mode="softmax")  # type: ignore[arg-type]


def test_a_ridge_mode_without_a_rule_is_an_error_not_thompson_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linear_bandit, "MODES", (*linear_bandit.MODES, "softmax"))
    monkeypatch.setattr(linear_bandit, "FLOORED_MODES", (*linear_bandit.FLOORED_MODES, "softmax"))
    bandit = LinearBandit(2, 3, LinearBanditConfig(mode="softmax"), seed=1)  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    bandit.update(rng.random((10, 3)), np.arange(10) % 2, rng.random(10))
    x = rng.random(3)
    with pytest.raises(NotImplementedError, match=r"'softmax'.*_rule_probabilities"):
        bandit.decide(x, 0.01)
    with pytest.raises(NotImplementedError, match=r"'softmax'.*_rule_probabilities_batch"):
        bandit.decide_batch(x.reshape(1, -1), 0.01)
