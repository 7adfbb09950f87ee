"""Congestion edge measurements cannot be poisoned with made-up algorithm names (issue 20), on both stores.

A profile's statistics keep at most ``MAX_CC_ALGORITHMS`` (32) algorithms. Any name of the wire's pattern used to take
a place, first come first served: 32 outcomes naming ``junk0`` … ``junk31`` for INTERACTIVE filled its places for good
and the real algorithms reported afterwards were dropped, so INTERACTIVE's advice never learned again while STREAMING's
switched on the same genuine reports. Now a measurement counts only for a known algorithm the decision's kernel
reported available; the others are ignored and counted, and their outcomes still count for the bandit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from edgepath.adapters.congestion import CongestionAdapter
from edgepath.adapters.registry import build_engines
from edgepath.engines.congestion import MIN_EDGE_TRANSFERS
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit
from edgepath.metrics import Metrics
from edgepath.plane import DecisionPlane
from edgepath.settings import Settings
from edgepath.state.base import MAX_CC_ALGORITHMS, StateStore
from edgepath.state.memory import MemoryStore
from edgepath.state.redis import RedisStore
from edgepath.training.online import ModelRegistry
from edgepath.types import OutcomeReport, Principal, RecommendRequest

ME = Principal(device_id="cpe-9")
KERNEL = ["reno", "cubic", "bbr"]


def request(profile: str, kernel: list[str]) -> RecommendRequest:
    return RecommendRequest.model_validate(
        {
            "device_id": "cpe-9",
            "interfaces": [{"name": "wlan0", "access_type": "WIFI"}, {"name": "wwan0", "access_type": "LTE"}],
            "application_profile": profile,
            "kernel": {"available_congestion_controls": kernel},
        }
    )


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[StateStore]:
    if request.param == "memory":
        s: Any = MemoryStore()
    else:
        server = request.getfixturevalue("redis_server")
        s = RedisStore(server.url, namespace=request.getfixturevalue("namespace"))
    yield s
    await s.close()


def plane_on(store: StateStore) -> DecisionPlane:
    """A plane whose congestion adapter re-reads the statistics on every request."""
    settings = Settings(congestion={"edge_refresh_s": 0.0})
    model = PrimaryPathBandit(BanditConfig(policy=settings.policy, seed=0))
    engines = tuple(CongestionAdapter(settings) if e.section == "congestion" else e for e in build_engines(settings))
    return DecisionPlane(ModelRegistry(model), store, settings, Metrics.create(), engines=engines)


async def report(plane: DecisionPlane, profile: str, algorithm: str, delay_ms: float, kernel: list[str]) -> None:
    rec = await plane.recommend(ME, request(profile, kernel))
    body = {
        "device_id": "cpe-9",
        "decision_id": rec.decision_id,
        "throughput_bps": 5e6,
        "latency_ms": 20.0,
        "congestion_measurement": {"algorithm": algorithm, "protocol_delay_ms": delay_ms, "hol_degree_ms": delay_ms},
    }
    ack = await plane.report_outcome(ME, OutcomeReport.model_validate(body))
    assert ack.accepted and not ack.duplicate  # whatever the measurement, the outcome counts


def new_outcomes(plane: DecisionPlane) -> float:
    return plane.metrics.outcomes.labels("new")._value.get()


def ignored(plane: DecisionPlane, reason: str) -> float:
    return plane.metrics.cc_measurements_ignored.labels(reason)._value.get()


async def advice(plane: DecisionPlane, profile: str) -> str:
    return (await plane.recommend(ME, request(profile, KERNEL))).congestion.subflow_level


async def test_made_up_names_take_no_place_and_the_profile_still_learns(store: StateStore) -> None:
    plane = plane_on(store)
    for i in range(MAX_CC_ALGORITHMS):  # each from a device that claims its kernel offers the name
        await report(plane, "INTERACTIVE", f"junk{i}", 5.0, [*KERNEL, f"junk{i}"])
    assert new_outcomes(plane) == MAX_CC_ALGORITHMS  # every outcome reached the bandit's log
    assert ignored(plane, "unknown_algorithm") == MAX_CC_ALGORITHMS
    assert await store.cc_measurement_stats("INTERACTIVE") == {}
    # the same genuine reports for a poisoned and an untouched profile: cubic slow, bbr fast
    for profile in ("INTERACTIVE", "STREAMING"):
        assert await advice(plane, profile) == "cubic"
        for i in range(MIN_EDGE_TRANSFERS):
            await report(plane, profile, "cubic", 300.0 + i, KERNEL)
            await report(plane, profile, "bbr", 100.0 + i, KERNEL)
            await report(plane, profile, "reno", 200.0 + i, KERNEL)
    for profile in ("INTERACTIVE", "STREAMING"):
        assert await advice(plane, profile) == "bbr", profile
    stats = await store.cc_measurement_stats("INTERACTIVE")
    assert stats is not None and sorted(stats) == ["bbr", "cubic", "reno"]


async def test_a_known_algorithm_the_decisions_kernel_does_not_offer_is_ignored(store: StateStore) -> None:
    plane = plane_on(store)
    await report(plane, "BULK", "westwood", 50.0, KERNEL)
    assert ignored(plane, "not_offered") == 1 and new_outcomes(plane) == 1
    assert await store.cc_measurement_stats("BULK") == {}
    await report(plane, "BULK", "westwood", 50.0, ["reno", "WESTWOOD"])  # offered (any case): counted
    await report(plane, "BULK", "vegas", 50.0, [])  # no list reported: the known names alone apply
    stats = await store.cc_measurement_stats("BULK")
    assert stats is not None and sorted(stats) == ["vegas", "westwood"]
    assert ignored(plane, "not_offered") == 1 and ignored(plane, "unknown_algorithm") == 0


async def test_a_profile_filled_before_the_allow_list_learns_again(store: StateStore) -> None:
    """Places a release before the allow-list gave to made-up names (here written straight into the store, as that
    release's adapter did, each name reported more often than any real one will be) go to the real algorithms as
    they are reported: INTERACTIVE's advice learns on the same reports as STREAMING's."""
    for i in range(MAX_CC_ALGORITHMS):
        for _ in range(MIN_EDGE_TRANSFERS + 5):
            await store.record_cc_measurement("INTERACTIVE", f"junk{i}", {"protocol_delay_avg_ms": 1.0})
    plane = plane_on(store)
    for i in range(MIN_EDGE_TRANSFERS):
        await report(plane, "INTERACTIVE", "cubic", 300.0 + i, KERNEL)
        await report(plane, "INTERACTIVE", "bbr", 100.0 + i, KERNEL)
    assert await advice(plane, "INTERACTIVE") == "bbr"
    stats = await store.cc_measurement_stats("INTERACTIVE")
    assert stats is not None and len(stats) == MAX_CC_ALGORITHMS
    assert stats["bbr"]["protocol_delay_avg_ms"].count == MIN_EDGE_TRANSFERS
