"""Congestion edge measurements across replicas (issue 20): two planes sharing one real Redis.

An outcome reported to one replica is counted once in Redis and changes the other replica's advice once that
replica's refresh interval has passed (``congestion.edge_refresh_s``), without a store round trip per request.
"""

from __future__ import annotations

from typing import Any

import pytest
from edgepath.adapters.congestion import CongestionAdapter
from edgepath.adapters.registry import build_engines
from edgepath.engines.congestion import MIN_EDGE_TRANSFERS
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit
from edgepath.metrics import Metrics
from edgepath.plane import DecisionPlane
from edgepath.settings import Settings
from edgepath.state.redis import RedisStore
from edgepath.training.online import ModelRegistry
from edgepath.types import OutcomeReport, Principal, RecommendRequest

pytestmark = pytest.mark.redis

REQUEST = RecommendRequest.model_validate(
    {
        "device_id": "cpe-7",
        "interfaces": [{"name": "wlan0", "access_type": "WIFI"}, {"name": "wwan0", "access_type": "LTE"}],
        "application_profile": "STREAMING",
        "kernel": {"available_congestion_controls": ["reno", "cubic", "bbr"]},
    }
)
ME = Principal(device_id="cpe-7")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def replica(store: RedisStore, clock: Clock) -> DecisionPlane:
    settings = Settings(congestion={"edge_refresh_s": 5.0})
    engines = tuple(
        CongestionAdapter(settings, clock=clock) if e.section == "congestion" else e for e in build_engines(settings)
    )
    model = PrimaryPathBandit(BanditConfig(policy=settings.policy, seed=0))
    return DecisionPlane(ModelRegistry(model), store, settings, Metrics.create(), engines=engines)


async def report(plane: DecisionPlane, algorithm: str, hol_ms: float) -> Any:
    rec = await plane.recommend(ME, REQUEST)
    body = {
        "device_id": "cpe-7",
        "decision_id": rec.decision_id,
        "throughput_bps": 1e6,
        "congestion_measurement": {"algorithm": algorithm, "hol_degree_ms": hol_ms},
    }
    ack = await plane.report_outcome(ME, OutcomeReport.model_validate(body))
    assert ack.accepted
    return body


async def test_an_outcome_on_one_replica_moves_the_others_advice_after_its_refresh(
    redis_server: Any, namespace: str
) -> None:
    stores = [RedisStore(redis_server.url, namespace=namespace) for _ in range(2)]
    clock = Clock()
    a, b = (replica(s, clock) for s in stores)
    try:
        assert (await b.recommend(ME, REQUEST)).congestion.subflow_level == "cubic"  # b has read: nothing yet
        last = None
        for i in range(MIN_EDGE_TRANSFERS):
            await report(a, "cubic", 300.0 + i)
            last = await report(a, "reno", 100.0 + i)
        again = OutcomeReport.model_validate(last)
        assert (await b.report_outcome(ME, again)).duplicate  # reported to the other replica: not counted twice
        stats = await stores[1].cc_measurement_stats("STREAMING")
        assert stats is not None and stats["reno"]["hol_degree_avg_ms"].count == MIN_EDGE_TRANSFERS
        assert (await b.recommend(ME, REQUEST)).congestion.subflow_level == "cubic"  # within b's refresh interval
        clock.t += 5.0
        advice = (await b.recommend(ME, REQUEST)).congestion
        assert advice.subflow_level == "reno" and advice.deciding_metric == "hol_degree_avg_ms"
        assert "edge measurements override" in advice.explanation
    finally:
        for s in stores:
            await s.close()
