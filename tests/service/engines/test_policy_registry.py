"""The policy registry: each policy one spec (class, parameters, exploration state), every parameter settable."""

from __future__ import annotations

import dataclasses
import pickle
import warnings

import cloudpickle
import numpy as np
import pytest
from edgepath.engines.features import N_FEATURES
from edgepath.engines.primary_path import (
    REGISTRY,
    BanditConfig,
    EpsilonGreedyPolicy,
    LibraryPolicy,
    PrimaryPathBandit,
    TrainingSample,
)
from edgepath.settings import BanditSettings
from edgepath.types import AccessType

ARMS = (AccessType.WIFI, AccessType.LTE)
CONFIG_FIELDS = {f.name for f in dataclasses.fields(BanditConfig)}


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_spec_states_class_parameters_and_exploration_state(name: str) -> None:
    spec = REGISTRY[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        policy = spec.build(2, BanditConfig(policy=name), 1, None)
    assert type(policy) is spec.policy_class  # the class that states its propensity rule
    assert set(spec.parameters) <= CONFIG_FIELDS, set(spec.parameters) - CONFIG_FIELDS
    assert spec.parameters and spec.exploration_state
    settable = set(BanditSettings.model_fields) | {"utility"}  # utility: the bandit.utility_* group
    assert set(spec.parameters) <= settable, f"{name}: not settable via EDGEPATH_BANDIT__*"


def test_a_parameter_reaches_the_library_object() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        policy = REGISTRY["epsilon_greedy"].build(2, BanditConfig(epsilon=0.37, epsilon_decay=None), 1, None)
    assert policy.lib.explore_prob == 0.37 and policy.lib.decay is None


def test_pickles_of_the_single_library_class_load_as_their_policy() -> None:
    """Snapshots and artefacts written before the per-policy classes existed keep their propensity rule."""
    bandit = PrimaryPathBandit(BanditConfig(policy="epsilon_greedy", seed=4, epsilon=0.3))
    rng = np.random.default_rng(0)
    samples = [
        TrainingSample(
            features=list(rng.random(N_FEATURES)), arms=ARMS, arm_index=i % 2, reward=int(i % 3 == 0), propensity=0.5
        )
        for i in range(40)
    ]
    bandit.update(samples)
    expected = pickle.loads(cloudpickle.dumps(bandit))  # as snapshots and artefacts serialize a bandit
    old = pickle.loads(cloudpickle.dumps(bandit))
    old._policies[ARMS].__class__ = LibraryPolicy  # as an earlier release pickled it
    loaded = pickle.loads(cloudpickle.dumps(old))
    assert type(loaded._policies[ARMS]) is EpsilonGreedyPolicy
    x = np.asarray(samples[0].features)
    for _ in range(20):
        assert loaded._policies[ARMS].decide(x) == expected._policies[ARMS].decide(x)
