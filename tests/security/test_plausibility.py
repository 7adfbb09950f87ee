"""Bounded learning: plausibility of outcomes, per-device caps, quarantine; the GCRA token bucket."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import httpx
import pytest
from edge_security_helpers import (
    assert_outcome_cap_counts_every_report,
    context_body,
    proto_from_rest,
    running_service,
)
from edgepath.engines.features import context_features
from edgepath.errors import InvalidInput, RateLimited
from edgepath.security.plausibility import (
    ACCESS_PEAK_BPS,
    MemoryQuarantine,
    OutcomeGuard,
    reported_capacity_bps,
    reported_link_speeds_mbps,
)
from edgepath.security.ratelimit import MemoryRateLimiter, gcra_step
from edgepath.state.base import DecisionRecord
from edgepath.types import AccessType, InterfaceContext, OutcomeReport


def _decision(interfaces: list[InterfaceContext], device_id: str = "dev-a") -> DecisionRecord:
    arms = tuple(sorted({i.access_type.value for i in interfaces}))
    return DecisionRecord(
        decision_id="d1",
        device_id=device_id,
        model_version=0,
        policy="p",
        arms=arms,
        arm_index=0,
        interface=interfaces[0].name,
        propensity=0.5,
        features=tuple(float(v) for v in context_features(interfaces)),
        decided_at=0.0,
        link_speed_mbps=reported_link_speeds_mbps(arms, interfaces),
    )


def _wifi(mbps: float | None) -> InterfaceContext:
    return InterfaceContext(name="wlan0", access_type=AccessType.WIFI, wifi_rssi_dbm=-60.0, link_speed_mbps=mbps)


def _lte() -> InterfaceContext:
    return InterfaceContext(name="wwan0", access_type=AccessType.LTE, rsrp_dbm=-90.0)


def _content(*addresses: str) -> dict[str, Any]:
    """A request's ``content`` block offering ``addresses`` (a transfer's server must be one of them)."""
    paths = [{"interface": "wlan0", "rtt_ms_samples": [20.0]}]
    candidates = [{"address": a, "dns_interface": "wlan0", "paths": paths} for a in addresses]
    return {"expected_size_bytes": 5_000_000, "candidates": candidates}


@pytest.mark.parametrize("mbps", [0.0, 6.5, 54.0, 866.7, 2402.0])
def test_capacity_decodes_the_reported_link_speed(mbps: float) -> None:
    d = _decision([_wifi(mbps)])
    assert math.isclose(reported_capacity_bps(d.arms, d.link_speed_mbps), mbps * 1e6, rel_tol=1e-9, abs_tol=1.0)


def test_capacity_sums_paths_and_uses_peak_rates_when_unreported() -> None:
    d = _decision([_wifi(100.0), _lte()])
    assert math.isclose(reported_capacity_bps(d.arms, d.link_speed_mbps), 100e6 + ACCESS_PEAK_BPS[AccessType.LTE])
    d = _decision([_wifi(None)])
    assert reported_capacity_bps(d.arms, d.link_speed_mbps) == ACCESS_PEAK_BPS[AccessType.WIFI]


def test_capacity_sums_interfaces_of_one_access_type_and_caps_at_the_peak_rate() -> None:
    second = InterfaceContext(name="wlan1", access_type=AccessType.WIFI, link_speed_mbps=300.0)
    d = _decision([_wifi(100.0), second])
    assert d.link_speed_mbps == (400.0,)
    assert math.isclose(reported_capacity_bps(d.arms, d.link_speed_mbps), 400e6)
    d = _decision([_wifi(None), second])  # one WiFi path of unknown capacity: the peak rate
    assert d.link_speed_mbps == (None,)
    assert reported_capacity_bps(d.arms, d.link_speed_mbps) == ACCESS_PEAK_BPS[AccessType.WIFI]
    assert reported_capacity_bps(("WIFI",), (100_000.0,)) == ACCESS_PEAK_BPS[AccessType.WIFI]  # 100 > 46 Gbit/s


def test_cellular_link_speed_is_not_trusted() -> None:
    lte = InterfaceContext(name="wwan0", access_type=AccessType.LTE, rsrp_dbm=-90.0, link_speed_mbps=10.0)
    d = _decision([lte])
    assert d.link_speed_mbps == (None,)
    assert reported_capacity_bps(d.arms, d.link_speed_mbps) == ACCESS_PEAK_BPS[AccessType.LTE]


async def test_guard_bounds_records_without_link_speeds_by_the_peak_rates() -> None:
    # A decision logged by an older replica (no link_speed_mbps): the technology's peak rate bounds it.
    d = dataclasses.replace(_decision([_wifi(100.0)]), link_speed_mbps=())
    guard = OutcomeGuard(1.5, None, MemoryQuarantine())
    assert guard.max_throughput_bps(d) == 1.5 * ACCESS_PEAK_BPS[AccessType.WIFI]
    assert await guard.admit(d, OutcomeReport(device_id="dev-a", decision_id="d1", throughput_bps=151e6)) is True


async def test_guard_rejects_throughput_above_factor_times_capacity() -> None:
    guard = OutcomeGuard(1.5, None, MemoryQuarantine())
    d = _decision([_wifi(100.0)])
    ok = OutcomeReport(device_id="dev-a", decision_id="d1", throughput_bps=149e6)
    assert await guard.admit(d, ok) is True
    bad = OutcomeReport(device_id="dev-a", decision_id="d1", throughput_bps=151e6)
    with pytest.raises(InvalidInput) as err:
        await guard.admit(d, bad)
    assert err.value.field == "throughput_bps"


async def test_guard_caps_outcomes_per_device_and_quarantines() -> None:
    now = [0.0]
    guard = OutcomeGuard(1.5, MemoryRateLimiter(3 / 3600, 3, clock=lambda: now[0]), MemoryQuarantine(["dev-q"]))
    report = OutcomeReport(device_id="dev-a", decision_id="d1", throughput_bps=1e6)
    d = _decision([_wifi(100.0)])
    assert [await guard.admit(d, report) for _ in range(3)] == [True] * 3
    with pytest.raises(RateLimited) as err:
        await guard.admit(d, report)
    assert math.isclose(err.value.retry_after_s, 1200.0)  # one outcome every 3600/3 s
    assert await guard.admit(_decision([_wifi(100.0)], "dev-b"), report) is True  # per device
    assert await guard.admit(_decision([_wifi(100.0)], "dev-q"), report) is False  # quarantined: not trained
    await guard.quarantine.remove("dev-q")
    assert await guard.admit(_decision([_wifi(100.0)], "dev-q"), report) is True


def test_the_outcome_cap_counts_every_report_a_device_makes() -> None:
    """The cap's token is taken as the report arrives, before its decision is looked up (in-process store here;
    the Redis store's, where the token shares the lookup's round trip: test_redis_limits.py)."""
    with running_service(outcome_cap_per_window=3) as svc:
        assert_outcome_cap_counts_every_report(svc.http_port, "dev-cap")


async def test_a_cap_token_taken_before_the_lookup_is_the_one_admit_refuses_on() -> None:
    guard = OutcomeGuard(1.5, MemoryRateLimiter(1 / 3600, 1), MemoryQuarantine(()))
    d, report = _decision([_wifi(100.0)]), OutcomeReport(device_id="dev-a", decision_id="d1", throughput_bps=1e6)
    first = await guard.take_cap_token("dev-a")
    assert first is not None and first.result() == 0.0  # in process: taken at once
    assert await guard.admit(d, report, first) is True
    with pytest.raises(RateLimited):
        await guard.admit(d, report, await guard.take_cap_token("dev-a"))
    assert await OutcomeGuard(1.5, None, MemoryQuarantine(())).take_cap_token("dev-a") is None  # no cap


def test_gcra_is_a_token_bucket() -> None:
    # rate 2/s, burst 3: three at once, then one every 0.5 s.
    tat, t = 0.0, 10.0
    allowed = []
    for _ in range(4):
        tat, retry = gcra_step(tat, t, 0.5, 3)
        allowed.append(retry == 0.0)
    assert allowed == [True, True, True, False]
    assert math.isclose(gcra_step(tat, t, 0.5, 3)[1], 0.5)
    assert gcra_step(tat, t + 0.5, 0.5, 3)[1] == 0.0


async def test_memory_limiter_refills_with_time() -> None:
    now = [0.0]
    limiter = MemoryRateLimiter(1.0, 2, clock=lambda: now[0])
    assert [await limiter.acquire("k") for _ in range(3)][:2] == [0.0, 0.0]
    assert await limiter.acquire("k") > 0.0
    now[0] += 1.0
    assert await limiter.acquire("k") == 0.0


def test_implausible_outcome_is_refused_over_rest() -> None:
    with (
        running_service(plausibility_factor=1.5) as svc,
        httpx.Client(base_url=f"http://127.0.0.1:{svc.http_port}", timeout=5.0) as http,
    ):
        rec = http.post("/v1/recommendations", json=context_body("dev-a", link_speed_mbps=50.0)).json()
        # WiFi at 50 Mbit/s + LTE (peak 4 Gbit/s): 1 Tbit/s is implausible.
        body: dict[str, Any] = {"device_id": "dev-a", "decision_id": rec["decision_id"], "throughput_bps": 1e12}
        resp = http.post("/v1/outcomes", json=body)
        assert resp.status_code == 422 and resp.json()["field"] == "throughput_bps"
        body["throughput_bps"] = 40e6
        assert http.post("/v1/outcomes", json=body).json()["accepted"] is True


async def test_guard_bounds_the_rate_an_ssmp_transfer_implies() -> None:
    guard = OutcomeGuard(1.5, None, MemoryQuarantine())
    d = dataclasses.replace(_decision([_wifi(100.0)]), server_candidates=("192.0.2.1",))
    ok = {"address": "192.0.2.1", "size_bytes": 10_000_000, "duration_ms": 1000.0}  # 80 Mbit/s
    report = OutcomeReport(device_id="dev-a", decision_id="d1", throughput_bps=8e7, server_transfer=ok)
    assert await guard.admit(d, report) is True
    fast = {**ok, "duration_ms": 10.0}  # 8 Gbit/s over a 100 Mbit/s link
    report = OutcomeReport(device_id="dev-a", decision_id="d1", throughput_bps=8e7, server_transfer=fast)
    with pytest.raises(InvalidInput) as err:
        await guard.admit(d, report)
    assert err.value.field == "server_transfer.duration_ms"


@pytest.mark.parametrize("duration_ms", [5e-324, 1e-310, 0.0009])
def test_denormal_transfer_duration_is_a_4xx_naming_the_field(duration_ms: float) -> None:
    """A duration that underflows as a divisor (issue 17: 5e-324 ms answered 500) is refused where it enters.

    The outcome is not consumed: the same decision still accepts a valid report afterwards.
    """
    with (
        running_service() as svc,
        httpx.Client(base_url=f"http://127.0.0.1:{svc.http_port}", timeout=5.0) as http,
    ):
        request = {**context_body("dev-a", link_speed_mbps=50.0), "content": _content("192.0.2.1")}
        rec = http.post("/v1/recommendations", json=request).json()
        body: dict[str, Any] = {
            "device_id": "dev-a",
            "decision_id": rec["decision_id"],
            "throughput_bps": 1e6,
            "server_transfer": {"address": "192.0.2.1", "size_bytes": 3, "duration_ms": duration_ms},
        }
        resp = http.post("/v1/outcomes", json=body)
        assert resp.status_code == 422 and resp.json()["field"] == "server_transfer.duration_ms", resp.text
        body["server_transfer"]["duration_ms"] = 1000.0
        assert http.post("/v1/outcomes", json=body).json()["accepted"] is True


@pytest.mark.parametrize("duration_ms", [5e-324, 1e-310, 0.0009])
def test_denormal_transfer_duration_is_invalid_argument_over_grpc(duration_ms: float) -> None:
    """The gRPC half of the regression above: INVALID_ARGUMENT naming ``server_transfer.duration_ms`` (never
    INTERNAL/UNKNOWN), and the decision still accepts a valid report afterwards."""
    import grpc
    from edgepath_agent.wire import edgepath_pb2 as pb
    from edgepath_agent.wire import edgepath_pb2_grpc as pb_grpc

    with running_service() as svc, grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
        stub = pb_grpc.PathServiceStub(channel)
        body = {**context_body("dev-a", link_speed_mbps=50.0), "content": _content("192.0.2.1")}
        rec = stub.Recommend(proto_from_rest(body, pb.RecommendRequest()), timeout=5)
        transfer = pb.ServerTransfer(address="192.0.2.1", size_bytes=3, duration_ms=duration_ms)
        report = pb.OutcomeRequest(
            device_id="dev-a", decision_id=rec.decision_id, throughput_bps=1e6, server_transfer=transfer
        )
        with pytest.raises(grpc.RpcError) as err:
            stub.ReportOutcome(report, timeout=5)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        assert "server_transfer.duration_ms" in (err.value.details() or "")
        report.server_transfer.duration_ms = 1000.0
        assert stub.ReportOutcome(report, timeout=5).accepted
