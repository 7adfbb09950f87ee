"""Vectorised batch decide (issue 16, RecommendBatch): the batch path decides what the single path would.

Two bandits with the same seed and the same training decide the same contexts, one with
``decide_batch`` and one with ``decide`` per context in order: same arms, same exact propensities
(up to the matrix product's last bits), for every policy (the ridge policies vectorise, the SGD-oracle
policies fall back to the per-item loop), over mixed arm sets and single-arm devices.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from edgepath.engines.features import N_FEATURES, SLOTS, context_features, context_features_batch, representative
from edgepath.engines.features import NATIVE_AVAILABLE as FEATURES_NATIVE
from edgepath.engines.linear_bandit import LinearBandit, LinearBanditConfig
from edgepath.engines.primary_path import POLICIES, BanditConfig, PrimaryPathBandit, TrainingSample
from edgepath.types import AccessType, InterfaceContext

WIFI_FIELDS = {
    "wifi_rssi_dbm": (-90.0, -35.0),
    "link_speed_mbps": (1.0, 1200.0),
    "frequency_mhz": (2412.0, 5900.0),
    "wifi_rssi_spread_db": (0.0, 8.0),
    "max_link_speed_mbps": (72.0, 2400.0),
    "rtt_ms": (2.0, 400.0),
    "loss": (0.0, 0.3),
}
CELL_FIELDS = {
    "rsrp_dbm": (-135.0, -50.0),
    "rsrq_db": (-19.5, -3.0),
    "sinr_db": (-10.0, 30.0),
    "cqi": (0, 15),
    "cell_rssi_dbm": (-110.0, -40.0),
    "rsrp_spread_db": (0.0, 8.0),
    "frequency_mhz": (700.0, 3800.0),
    "channel_bandwidth_mhz": (1.4, 100.0),
    "rtt_ms": (10.0, 600.0),
    "loss": (0.0, 0.3),
}
ETH_FIELDS = {"link_speed_mbps": (10.0, 10000.0), "rtt_ms": (0.5, 50.0), "loss": (0.0, 0.05)}
FIELDS = {AccessType.WIFI: WIFI_FIELDS, AccessType.LTE: CELL_FIELDS, AccessType.NR: CELL_FIELDS}
FIELDS[AccessType.ETHERNET] = ETH_FIELDS
ARM_SETS = [
    (AccessType.WIFI, AccessType.LTE),
    (AccessType.WIFI, AccessType.NR),
    (AccessType.WIFI, AccessType.LTE, AccessType.NR),
    (AccessType.LTE,),
    (AccessType.WIFI, AccessType.ETHERNET),
]


def interface(rng: np.random.Generator, name: str, access: AccessType) -> InterfaceContext:
    """An interface reporting a random subset of its access type's measurements."""
    fields = {}
    for field, (lo, hi) in FIELDS[access].items():
        if rng.random() < 0.7:
            fields[field] = int(rng.integers(lo, hi + 1)) if field == "cqi" else float(rng.uniform(lo, hi))
    return InterfaceContext(name=name, access_type=access, **fields)


def contexts(n: int, seed: int) -> list[list[InterfaceContext]]:
    """Mixed arm sets; some devices with two interfaces of one access type (the representative decides)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        arms = ARM_SETS[int(rng.integers(len(ARM_SETS)))]
        ifaces = [interface(rng, f"if{j}", a) for j, a in enumerate(arms)]
        if i % 5 == 0:
            ifaces.append(interface(rng, "extra", arms[0]))
        out.append(ifaces)
    return out


def test_batch_features_equal_the_single_encoding_and_representatives() -> None:
    ctxs = contexts(400, seed=3)
    X, reps = context_features_batch(ctxs)
    assert X.shape == (400, N_FEATURES)
    single = np.vstack([context_features(c) for c in ctxs])
    np.testing.assert_allclose(X, single, rtol=1e-12, atol=1e-12)
    for c, r in zip(ctxs, reps, strict=True):
        assert {s: representative(c, s) for s in SLOTS if representative(c, s) is not None} == r
    empty, no_reps = context_features_batch([])
    assert empty.shape == (0, N_FEATURES) and no_reps == []


def trained(policy: str, seed: int = 5) -> PrimaryPathBandit:
    """A bandit that has learned from outcomes on every arm set (fitted policies, non-uniform propensities).

    The SGD-oracle policies learn from fewer rounds (bootstrapped_ucb refits 10 resampled oracles per arm).
    """
    bandit = PrimaryPathBandit(BanditConfig(policy=policy, seed=seed))
    rng = np.random.default_rng(seed)
    samples = []
    for ctx in contexts(600 if policy.startswith("ridge_") else 200, seed=seed + 1):
        choice = bandit.decide(ctx)
        throughput = float(rng.uniform(1e6, 8e7)) * (1.5 if choice.access_type is AccessType.WIFI else 1.0)
        samples.append(
            TrainingSample(
                choice.features,
                choice.arms,
                choice.arm_index,
                int(throughput > 3e7),
                choice.propensity,
                throughput,
                float(rng.uniform(5, 80)),
            )
        )
    bandit.update(samples)
    return bandit


@pytest.mark.parametrize("native", [True, False], ids=["compiled encoder", "python encoder"])
@pytest.mark.parametrize("policy", POLICIES)
def test_batch_decisions_are_the_single_decisions_for_the_same_seed_and_model(policy: str, native: bool) -> None:
    """Where the compiled encoder is installed the batch encodes context by context as the single path does (the
    same vectors, bit for bit); numpy's batch encoder (``native=False``, or not installed) agrees to rounding."""
    model = trained(policy)
    twin = copy.deepcopy(model)
    ctxs = contexts(300 if policy.startswith("ridge_") else 100, seed=11)
    batch = model.decide_batch(ctxs, native=native)
    single = [twin.decide(c, native=native) for c in ctxs]
    if native and FEATURES_NATIVE:
        assert np.vstack([b.features for b in batch]).tobytes() == np.vstack([s.features for s in single]).tobytes()
    assert len(batch) == len(single) == len(ctxs)
    for b, s in zip(batch, single, strict=True):
        assert (b.arms, b.arm_index, b.access_type, b.interface) == (s.arms, s.arm_index, s.access_type, s.interface)
        assert b.propensity == pytest.approx(s.propensity, rel=1e-9, abs=1e-12)
        assert b.probability == pytest.approx(s.probability, rel=1e-9, abs=1e-12)
        np.testing.assert_allclose(b.features, s.features, rtol=1e-12, atol=1e-12)
    # the generators advanced alike: the next decisions agree too
    nxt = contexts(20, seed=12)
    assert [c.arm_index for c in model.decide_batch(nxt, native=native)] == [
        twin.decide(c, native=native).arm_index for c in nxt
    ]


@pytest.mark.parametrize("floor", [0.0, 0.05])
@pytest.mark.parametrize("mode", ["squarecb", "lints", "linucb", "egreedy"])
def test_ridge_batch_propensities_are_the_exact_probabilities_of_the_chosen_arms(mode: str, floor: float) -> None:
    rng = np.random.default_rng(0)
    bandit = LinearBandit(3, 6, LinearBanditConfig(mode=mode, epsilon=0.06), seed=4)
    X = rng.normal(size=(500, 6))
    bandit.update(X, rng.integers(0, 3, 500), rng.uniform(0, 1, 500))
    Q = rng.normal(size=(200, 6))
    P = bandit.probabilities_batch(Q, floor)
    np.testing.assert_allclose(P, np.vstack([bandit.probabilities(q, floor) for q in Q]), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    if floor and mode != "linucb":  # the floor binds in some rows and holds in all of them
        assert np.any(bandit.probabilities_batch(Q).min(axis=1) < floor) and np.all(P >= floor)
    twin = copy.deepcopy(bandit)
    arms, propensities = bandit.decide_batch(Q, floor)
    assert np.all(P[np.arange(200), arms] > 0.0)
    np.testing.assert_array_equal(propensities, P[np.arange(200), arms])
    single = [twin.decide(q, floor) for q in Q]
    assert arms.tolist() == [a for a, _ in single]
    np.testing.assert_allclose(propensities, [p for _, p in single], rtol=1e-9, atol=1e-12)


def test_batch_draws_follow_the_probabilities() -> None:
    """One context repeated 20,000 times in a batch: arm frequencies within 5 standard errors of P."""
    model = trained("ridge_squarecb")
    ctx = [
        InterfaceContext(name="wlan0", access_type=AccessType.WIFI, wifi_rssi_dbm=-70.0, link_speed_mbps=65.0),
        InterfaceContext(name="wwan0", access_type=AccessType.LTE, rsrp_dbm=-95.0, sinr_db=9.0),
    ]
    p = model.probabilities(ctx)
    assert p.min() > 0.001, "both arms possible: the frequencies say something"
    choices = model.decide_batch([ctx] * 20_000)
    counts = np.bincount([c.arm_index for c in choices], minlength=len(p)) / 20_000
    se = np.sqrt(p * (1 - p) / 20_000)
    assert np.all(np.abs(counts - p) <= 5 * se + 1e-9), (counts, p)
