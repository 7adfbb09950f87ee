"""A service started from the shipped model (``serve --model``), over REST and gRPC alike.

The warm-start context fields (reading-series spreads, max link speed, channel
bandwidth) must reach the feature function identically through both transports,
and the warm-started service must decide and keep learning from outcomes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from edgepath.engines.features import FEATURE_NAMES
from edgepath_agent.client import connect
from service_harness import RunningService, running_service

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "primary-path-v1"

CONTEXT: dict[str, Any] = {
    "device_id": "phone-warm",
    "interfaces": [
        {
            "name": "wlan0",
            "access_type": "WIFI",
            "wifi_rssi_dbm": -61.0,
            "link_speed_mbps": 144.0,
            "frequency_mhz": 2437.0,
            "wifi_rssi_spread_db": 1.5,
            "max_link_speed_mbps": 300.0,
        },
        {
            "name": "wwan0",
            "access_type": "LTE",
            "rsrp_dbm": -97.0,
            "rsrq_db": -11.0,
            "sinr_db": 8.0,
            "rsrp_spread_db": 0.5,
            "channel_bandwidth_mhz": 20.0,
            "frequency_mhz": 1850.0,
        },
    ],
}


@pytest.fixture(scope="module")
def warm() -> Iterator[RunningService]:
    with running_service(model_path=SHIPPED, batch_size=5) as running:
        yield running


def _features(warm: RunningService, decision_id: str) -> tuple[float, ...]:
    record = warm.call(warm.service.store.get_decision(decision_id))
    assert record is not None
    return tuple(record.features)


def test_new_context_fields_reach_the_features_identically_over_both_transports(warm: RunningService) -> None:
    seen = {}
    for transport, url in (("rest", warm.http_url), ("grpc", warm.grpc_url)):
        c = connect(url)
        try:
            rec = c.recommend(CONTEXT)
        finally:
            c.close()
        assert rec["policy"] == "active_explorer"
        seen[transport] = _features(warm, rec["decision_id"])
    assert seen["rest"] == seen["grpc"]
    x = dict(zip(FEATURE_NAMES, seen["rest"], strict=True))
    for name in (
        "wifi.wifi_rssi_spread_db",
        "wifi.max_link_speed_mbps",
        "lte.rsrp_spread_db",
        "lte.channel_bandwidth_mhz",
        "lte.carrier_ghz",
        "lte.shannon_capacity_mbps",
    ):
        assert x[f"{name}.missing"] == 0.0, name


def test_out_of_range_new_field_is_rejected_naming_it(warm: RunningService) -> None:
    bad = {
        **CONTEXT,
        "interfaces": [{**CONTEXT["interfaces"][0], "wifi_rssi_spread_db": -1.0}, CONTEXT["interfaces"][1]],
    }
    for url in (warm.http_url, warm.grpc_url):
        c = connect(url)
        try:
            with pytest.raises(Exception, match="wifi_rssi_spread_db"):
                c.recommend(bad)
        finally:
            c.close()


def test_warm_started_service_keeps_learning(warm: RunningService) -> None:
    c = connect(warm.grpc_url)
    try:
        start = warm.service.registry.current.version
        for _ in range(5):
            rec = c.recommend(CONTEXT)
            c.report_outcome({"device_id": "phone-warm", "decision_id": rec["decision_id"], "throughput_bps": 40e6})
        warm.call(warm.service.registry.wait_for_version(start + 1, timeout_s=20.0), timeout=25.0)
    finally:
        c.close()
    assert warm.service.registry.current.version > start
