"""The congestion adapter's edge statistics (issue 20): read at most every ``edge_refresh_s``, never per request;
counted from the decision's profile; off means neither counted nor read."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import pytest
from edgepath.adapters.base import DecisionInput, OutcomeInput
from edgepath.adapters.congestion import CongestionAdapter, measured_metrics
from edgepath.settings import Settings
from edgepath.state.base import DecisionRecord, MetricSums
from edgepath.state.memory import MemoryStore
from edgepath.types import CongestionMeasurement, OutcomeReport, RecommendRequest

REQUEST = RecommendRequest.model_validate(
    {
        "device_id": "cpe-1",
        "interfaces": [{"name": "wlan0", "access_type": "WIFI"}, {"name": "wwan0", "access_type": "LTE"}],
        "application_profile": "BULK",
        "kernel": {"available_congestion_controls": ["reno", "cubic", "bbr"]},
    }
)
RECORD = DecisionRecord(
    decision_id="d-1",
    device_id="cpe-1",
    model_version=1,
    policy="ridge_squarecb",
    arms=("WIFI", "LTE"),
    arm_index=0,
    interface="wlan0",
    propensity=0.9,
    features=(0.0,),
    decided_at=0.0,
    application_profile="BULK",
)


class CountingStore(MemoryStore):
    """A memory store that counts statistics reads and can pretend to be unreachable."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.unreachable = False

    async def cc_measurement_stats(self, profile: str) -> dict[str, dict[str, MetricSums]] | None:
        self.reads += 1
        return None if self.unreachable else await super().cc_measurement_stats(profile)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def adapter(clock: Clock, **congestion: Any) -> CongestionAdapter:
    return CongestionAdapter(Settings(congestion={"edge_refresh_s": 5.0, **congestion}), clock=clock)


def decided(store: CountingStore) -> DecisionInput:
    return DecisionInput(request=REQUEST, store=store, record=RECORD, now_s=time.time())


async def learn(a: CongestionAdapter, store: CountingStore, algorithm: str, mbps: float, profile: str = "BULK") -> None:
    report = OutcomeReport(
        device_id="cpe-1",
        decision_id="d-1",
        throughput_bps=1e6,
        congestion_measurement=CongestionMeasurement(algorithm=algorithm, throughput_bps=mbps * 1e6, drop_rate=0.02),
    )
    record = dataclasses.replace(RECORD, application_profile=profile)
    await a.learn(OutcomeInput(report=report, decision=record, store=store, now_s=time.time()))


async def refute(a: CongestionAdapter, store: CountingStore) -> None:
    for i in range(10):
        await learn(a, store, "cubic", 8.0 + 0.1 * (i % 3))
        await learn(a, store, "reno", 15.0 + 0.1 * (i % 3))


async def test_statistics_are_read_at_most_once_per_refresh_interval() -> None:
    clock, store = Clock(), CountingStore()
    a = adapter(clock)
    first = await a.recommend(decided(store))
    assert first.subflow_level == "cubic" and store.reads == 1
    await refute(a, store)
    for _ in range(50):  # within the interval: no store round trip, the cached advice
        assert (await a.recommend(decided(store))) is first
    assert store.reads == 1
    clock.t += 5.0
    after = await a.recommend(decided(store))
    assert store.reads == 2
    assert after.subflow_level == "reno" and "edge measurements override" in after.explanation
    clock.t += 1.0
    assert (await a.recommend(decided(store))) is after  # same statistics version: the same advice object
    assert (await a.recommend_batch([decided(store)] * 4)) == [after] * 4
    assert store.reads == 2


async def test_an_unreachable_store_keeps_the_statistics_read_before() -> None:
    clock, store = Clock(), CountingStore()
    a = adapter(clock, edge_refresh_s=0.0)
    await refute(a, store)
    assert (await a.recommend(decided(store))).subflow_level == "reno"
    store.unreachable = True
    assert (await a.recommend(decided(store))).subflow_level == "reno"


async def test_measurements_count_under_the_decisions_profile_only() -> None:
    clock, store = Clock(), CountingStore()
    a = adapter(clock)
    await learn(a, store, "cubic", 8.0, profile="STREAMING")
    await learn(a, store, "cubic", 8.0, profile="")  # a record written before records carried their profile
    assert await store.cc_measurement_stats("BULK") == {}
    streaming = (await store.cc_measurement_stats("STREAMING"))["cubic"]
    assert streaming["throughput_avg_mbps"].count == 1
    assert streaming["throughput_avg_mbps"].total == pytest.approx(8.0)  # bit/s → Mbit/s
    assert streaming["drop_rate_fraction"].total == pytest.approx(0.02)


async def test_switched_off_neither_counts_nor_reads() -> None:
    clock, store = Clock(), CountingStore()
    a = adapter(clock, edge_measurements=False)
    await refute(a, store)
    assert await MemoryStore.cc_measurement_stats(store, "BULK") == {}
    assert (await a.recommend(decided(store))).subflow_level == "cubic"
    assert store.reads == 0


def test_measured_metrics_are_in_the_engines_units() -> None:
    m = CongestionMeasurement(
        algorithm="BBR", hol_degree_ms=-1.5, protocol_delay_ms=90.0, drop_rate=0.3, throughput_bps=2.5e7
    )
    got: Mapping[str, float] = measured_metrics(m)
    assert m.algorithm == "bbr"
    assert got == {
        "hol_degree_avg_ms": -1.5,
        "protocol_delay_avg_ms": 90.0,
        "drop_rate_fraction": 0.3,
        "throughput_avg_mbps": pytest.approx(25.0),
    }
    assert measured_metrics(CongestionMeasurement(algorithm="cubic")) == {}


async def test_an_unknown_or_not_offered_algorithm_is_not_counted_and_nothing_raises_without_metrics() -> None:
    """The adapter alone (no plane, so no metrics to count in): such measurements are left out, known ones count."""
    clock, store = Clock(), CountingStore()
    a = adapter(clock)
    await learn(a, store, "junk0", 8.0)  # RECORD has no kernel list: the known names alone apply
    assert await MemoryStore.cc_measurement_stats(store, "BULK") == {}
    offered = dataclasses.replace(RECORD, congestion_controls=("reno", "cubic"))
    for algorithm in ("bbr", "cubic"):
        report = OutcomeReport(
            device_id="cpe-1",
            decision_id="d-1",
            throughput_bps=1e6,
            congestion_measurement=CongestionMeasurement(algorithm=algorithm, throughput_bps=8e6),
        )
        await a.learn(OutcomeInput(report=report, decision=offered, store=store, now_s=time.time()))
    assert list(await MemoryStore.cc_measurement_stats(store, "BULK") or {}) == ["cubic"]
