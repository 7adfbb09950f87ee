"""Primary-path bandit engine: learning on a synthetic separable world, propensities, missing data."""

from __future__ import annotations

import numpy as np
import pytest
from edgepath.engines.features import N_FEATURES, context_features
from edgepath.engines.primary_path import POLICIES, BanditConfig, PrimaryPathBandit, TrainingSample, arm_set
from edgepath.types import AccessType, InterfaceContext


def _world(rng: np.random.Generator) -> tuple[list[InterfaceContext], int]:
    """WiFi is the right primary path iff its RSSI is above -70 dBm (separable on one feature)."""
    rssi = float(rng.uniform(-90, -45))
    rsrp = float(rng.uniform(-120, -75))
    ifaces = [
        InterfaceContext(name="wlan0", access_type=AccessType.WIFI, wifi_rssi_dbm=rssi),
        InterfaceContext(name="wwan0", access_type=AccessType.LTE, rsrp_dbm=rsrp),
    ]
    return ifaces, 0 if rssi > -70 else 1


def _simulate(bandit: PrimaryPathBandit, rounds: int, seed: int, noise: float = 0.0) -> np.ndarray:
    """Run the bandit; returns per-round 1[chose the best arm]. ``noise`` flips the observed reward."""
    rng = np.random.default_rng(seed)
    rewards, batch = [], []
    for _ in range(rounds):
        ifaces, best = _world(rng)
        choice = bandit.decide(ifaces)
        assert 0.0 < choice.propensity <= 1.0
        rewards.append(int(choice.arm_index == best))
        reward = rewards[-1] if rng.random() >= noise else 1 - rewards[-1]
        batch.append(TrainingSample(choice.features, choice.arms, choice.arm_index, reward, choice.propensity))
        if len(batch) == 50:
            bandit.update(batch)
            batch = []
    return np.asarray(rewards)


def test_active_explorer_learns_a_separable_world() -> None:
    rewards = _simulate(PrimaryPathBandit(BanditConfig(policy="active_explorer", seed=3)), 2000, seed=11)
    # A coin flip earns 0.5; the last 500 rounds must be far above it.
    assert rewards[-500:].mean() > 0.85


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_beats_chance_with_noisy_rewards(policy: str) -> None:
    # 15% of rewards flipped, as real throughput outcomes are noisy. (On a noiseless separable
    # world the SGD oracle saturates to probabilities of 1.0, which pins AdaptiveGreedy's
    # percentile threshold at 1.0 and makes it choose at random: a property of that policy.)
    bandit = PrimaryPathBandit(BanditConfig(policy=policy, seed=5, explore_rounds=200))
    rewards = _simulate(bandit, 1200, seed=2, noise=0.15)
    assert rewards[-400:].mean() > 0.7, policy


def test_unknown_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        PrimaryPathBandit(BanditConfig(policy="thompson_magic"))


def test_unfitted_policy_is_uniform_with_propensity_half() -> None:
    bandit = PrimaryPathBandit()
    ifaces, _ = _world(np.random.default_rng(0))
    choice = bandit.decide(ifaces)
    assert choice.propensity == pytest.approx(0.5)
    assert choice.arms == (AccessType.WIFI, AccessType.LTE)


def test_single_interface_needs_no_choice() -> None:
    choice = PrimaryPathBandit().decide([InterfaceContext(name="eth0", access_type=AccessType.ETHERNET)])
    assert (choice.interface, choice.propensity, choice.arms) == ("eth0", 1.0, (AccessType.ETHERNET,))


def test_all_measurements_missing_never_crash() -> None:
    bandit = PrimaryPathBandit()
    bare = [InterfaceContext(name=f"if{i}", access_type=t) for i, t in enumerate(AccessType)]
    for _ in range(3):
        choice = bandit.decide(bare)
        bandit.update([TrainingSample(choice.features, choice.arms, choice.arm_index, 1, choice.propensity)] * 10)
    x = context_features(bare)
    assert x.shape == (N_FEATURES,) and np.all(np.isfinite(x))
    assert choice.arms == tuple(AccessType)


def test_representative_interface_is_strongest_of_its_type() -> None:
    ifaces = [
        InterfaceContext(name="wlan0", access_type=AccessType.WIFI, wifi_rssi_dbm=-80),
        InterfaceContext(name="wlan1", access_type=AccessType.WIFI, wifi_rssi_dbm=-50),
        InterfaceContext(name="wwan0", access_type=AccessType.LTE),
    ]
    assert arm_set(ifaces) == (AccessType.WIFI, AccessType.LTE)
    bandit = PrimaryPathBandit()
    names = {bandit.decide(ifaces).interface for _ in range(30)}
    assert names <= {"wlan1", "wwan0"} and "wlan0" not in names


def test_update_groups_by_arm_set_and_skips_single_arm_samples() -> None:
    bandit = PrimaryPathBandit()
    x = np.zeros(N_FEATURES)
    used = bandit.update(
        [
            TrainingSample(x, (AccessType.WIFI, AccessType.LTE), 0, 1, 0.5),
            TrainingSample(x, (AccessType.WIFI, AccessType.NR), 1, 0, 0.5),
            TrainingSample(x, (AccessType.ETHERNET,), 0, 1, 1.0),
        ]
    )
    assert used == 2 and bandit.samples_seen == 2


def test_epsilon_greedy_propensity_matches_its_formula() -> None:
    bandit = PrimaryPathBandit(BanditConfig(policy="epsilon_greedy", epsilon=0.2, epsilon_decay=None))
    _simulate(bandit, 200, seed=1)
    rng = np.random.default_rng(9)
    seen = set()
    for _ in range(200):
        seen.add(round(bandit.decide(_world(rng)[0]).propensity, 6))
    # (1-ε)+ε/K for the greedy arm, ε/K for the other one.
    assert seen <= {0.9, 0.1} and 0.9 in seen


def test_probabilities_features_are_the_decision_distribution_at_encoded_contexts() -> None:
    """What the ground-truth harness evaluates every kept model version with: row by row the vector ``probabilities``
    (and so ``decide``) uses, at features already encoded."""
    bandit = PrimaryPathBandit(BanditConfig(seed=4))
    _simulate(bandit, 300, seed=9)
    rng = np.random.default_rng(1)
    worlds = [_world(rng)[0] for _ in range(20)]
    X = np.vstack([context_features(w) for w in worlds])
    arms = arm_set(worlds[0])
    got = bandit.probabilities_features(arms, X)
    assert got.shape == (20, 2)
    for row, w in zip(got, worlds, strict=True):
        assert np.array_equal(row, bandit.probabilities(w))
    assert len(np.unique(got[:, 0])) > 1  # fitted: the distribution depends on the context
    np.testing.assert_array_equal(bandit.probabilities_features((AccessType.ETHERNET,), X[:3]), np.ones((3, 1)))
