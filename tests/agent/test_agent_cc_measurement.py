"""The outcome's congestion_measurement (issue 20): built from the meter's trailer, typed, sent by the daemon."""

from __future__ import annotations

import math

import pytest
from edgepath_agent.applier import Applier, DryRunBackend, Journal
from edgepath_agent.client import FailoverClient, connect
from edgepath_agent.collector import StaticCollector, TraceCollector
from edgepath_agent.daemon import Agent, AgentConfig, congestion_measurement
from edgepath_agent.messages import CongestionMeasurement, outcome_to_proto
from edgepath_agent.meter import TransferResult, TransferServer, transfer
from edgepath_agent.wire import edgepath_pb2 as pb
from test_agent_daemon import ADDRS, RADIO, ROUTES

TRAILER = {
    "congestion_control": "bbr",
    "paper_metrics": {
        "hol_degree_avg_ms": -1.25,
        "protocol_delay_avg_ms": 84.0,
        "drop_rate_pct": 2.5,
        "drop_rate_seg_s": 40.0,
        "samples": 12,
    },
}


def result(counters: dict | None, throughput_bps: float = 1.2e7) -> TransferResult:
    return TransferResult(65536, 0.05, throughput_bps, "127.0.0.1", True, server_counters=counters)


def test_the_trailer_gives_the_block_with_the_senders_algorithm() -> None:
    m = congestion_measurement(result(TRAILER), device_algorithm="cubic")
    assert m == CongestionMeasurement(
        algorithm="bbr", hol_degree_ms=-1.25, protocol_delay_ms=84.0, drop_rate=0.025, throughput_bps=1.2e7
    )
    assert m is not None and m.as_json()["drop_rate"] == pytest.approx(0.025)  # % → fraction
    msg = outcome_to_proto(
        {"device_id": "d", "decision_id": "x", "throughput_bps": 1.0, "congestion_measurement": m.as_json()}
    )
    assert msg.congestion_measurement == pb.CongestionMeasurement(**m.as_json())
    assert msg.congestion_measurement.algorithm == "bbr" and msg.congestion_measurement.drop_rate == 0.025


def test_without_the_senders_algorithm_the_devices_is_used() -> None:
    trailer = {"paper_metrics": TRAILER["paper_metrics"]}
    m = congestion_measurement(result(trailer), device_algorithm="CUBIC")
    assert m is not None and m.algorithm == "cubic"
    assert congestion_measurement(result(trailer), device_algorithm=None) is None


def test_no_trailer_metrics_no_block_and_bad_values_are_left_out() -> None:
    assert congestion_measurement(result(None), "cubic") is None
    assert congestion_measurement(result({"rtt_ms": 3.0, "congestion_control": "cubic"}), "cubic") is None
    bad = {
        "congestion_control": "cubic",
        "paper_metrics": {
            "hol_degree_avg_ms": math.nan,
            "protocol_delay_avg_ms": "84",
            "drop_rate_pct": 250.0,
        },
    }
    m = congestion_measurement(result(bad, throughput_bps=math.inf), "cubic")
    assert m is None  # nothing valid left
    m = congestion_measurement(result(bad, throughput_bps=8e6), "cubic")
    assert m == CongestionMeasurement(algorithm="cubic", throughput_bps=8e6)
    assert congestion_measurement(result({**TRAILER, "congestion_control": "cubic; reboot"}), None) is None


def test_a_measured_step_reports_the_block_and_the_service_counts_it(service) -> None:
    """Real loopback transfer against a sampling meter server running reno; real service over gRPC."""
    config = AgentConfig(device_id="dev-cc", service=[service.grpc_url], interfaces={"wlan0": "WIFI", "wwan0": "LTE"})
    applier = Applier(DryRunBackend(ROUTES, ADDRS, out=None), Journal(), config.applier_config(), allowed_cc=("reno",))
    trace = TraceCollector()
    # The transfer runs over loopback (several Gbit/s on an idle machine): the device reports a WiFi link at Wi-Fi 7's
    # 46 Gbit/s peak so that the service's plausibility guard (throughput <= 1.5 x the reported capacity) admits it.
    # With RADIO's 6 Mbit/s WiFi the capacity was LTE's 4 Gbit/s peak plus 6 Mbit/s: a 6.1 Gbit/s run was refused.
    trace.set({**RADIO, "wlan0": {**RADIO["wlan0"], "link_speed_mbps": 46_000.0}})
    client = FailoverClient([connect(service.grpc_url, 2.0)], attempts=1)
    with TransferServer("127.0.0.1", 0, congestion_control="reno", sample_interval_s=0.005) as srv:
        agent = Agent(
            config,
            client,
            applier,
            [trace, StaticCollector(config.interfaces)],
            measure=lambda _p: transfer("127.0.0.1", srv.port, 2 * 1024 * 1024),
        )
        step = agent.step()
    assert step.ack is not None and step.ack["accepted"]
    block = step.outcome["congestion_measurement"]
    assert block["algorithm"] == "reno"
    assert block["throughput_bps"] == pytest.approx(step.measurement.throughput_bps)
    assert 0.0 <= block.get("drop_rate", 0.0) <= 1.0
    stats = service.call(service.service.store.cc_measurement_stats("UNSPECIFIED"))
    assert stats["reno"]["throughput_avg_mbps"].count == 1
    assert stats["reno"]["throughput_avg_mbps"].total == pytest.approx(step.measurement.throughput_bps / 1e6)
    agent.close(restore=True)
