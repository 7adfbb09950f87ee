"""Overload is explicit (issue 16): past the in-flight bound both transports shed with a retry hint.

Real servers (grpc.aio on loopback; the real FastAPI app through its ASGI interface) built with an
in-flight bound of 0 (or a loop lag past the bound), so every decision call is past capacity and the
shedding path is what answers. Health checks and metrics are never shed.
"""

from __future__ import annotations

import asyncio
import math
import time

import grpc
import httpx
from edgepath.admission import Admission, thread_busy_clock
from edgepath.grpc.server import create_server
from edgepath.main import Service
from edgepath.rest.app import create_app
from edgepath.settings import Settings
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from service_harness import running_service

BODY = {"device_id": "phone-1", "interfaces": [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60.0}]}


def test_rest_past_capacity_is_503_with_retry_after_and_health_still_answers() -> None:
    service = Service.build(Settings())
    app = create_app(service.plane, admission=Admission(max_inflight=0))

    async def run() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            shed = await http.post("/v1/recommendations", json=BODY)
            health = await http.get("/healthz")
            metrics = await http.get("/metrics")
            return shed, health, metrics

    shed, health, metrics = asyncio.run(run())
    assert shed.status_code == 503
    assert shed.headers["retry-after"] == "1"
    assert shed.json()["error"] == "unavailable" and "overloaded" in shed.json()["message"]
    assert health.status_code == 200
    assert 'edgepath_shed_total{transport="rest"} 1.0' in metrics.text
    # counted under the route it was for, though it never reached the router
    assert 'edgepath_http_requests_total{handler="/v1/recommendations",method="POST",status="503"} 1.0' in metrics.text
    assert service.plane.metrics.decisions.labels("active_explorer", "WIFI")._value.get() == 0


def test_rest_within_capacity_is_served() -> None:
    service = Service.build(Settings())
    app = create_app(service.plane, admission=Admission(max_inflight=1))

    async def run() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            return await http.post("/v1/recommendations", json=BODY)

    assert asyncio.run(run()).status_code == 200


def test_grpc_past_capacity_is_resource_exhausted_with_retry_after_ms() -> None:
    service = Service.build(Settings())

    async def run() -> tuple[grpc.StatusCode, dict[str, str]]:
        server, _, port = create_server(service.plane, "127.0.0.1:0", admission=Admission(max_inflight=0))
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.PathServiceStub(channel)
                request = pb.RecommendRequest(
                    device_id="phone-1",
                    interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)],
                )
                try:
                    await stub.Recommend(request, timeout=10.0)
                except grpc.aio.AioRpcError as exc:
                    trailing = {str(k): str(v) for k, v in exc.trailing_metadata() or ()}
                    code = exc.code()
                else:
                    raise AssertionError("a call past capacity was served")
                return code, trailing
        finally:
            await server.stop(None)

    code, trailing = asyncio.run(run())
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert int(trailing["retry-after-ms"]) > 0
    assert service.plane.metrics.shed.labels("grpc")._value.get() == 1


def test_a_lagging_loop_sheds_and_a_recovered_one_serves() -> None:
    admission = Admission(max_inflight=100, max_lag_ms=10.0)  # lag_s: the smaller of the last two lags
    assert not admission.shed(0)
    admission.lag_s = 0.050  # what the monitor measures when a timer fires 50 ms late
    assert admission.shed(0)
    admission.lag_s = 0.001
    assert not admission.shed(99) and admission.shed(100)


def test_the_monitor_measures_the_lag_of_a_blocked_loop() -> None:
    admission = Admission(period_s=0.02)

    async def run() -> float:
        task = asyncio.create_task(admission.monitor())
        await asyncio.sleep(0)  # let the monitor arm its timer
        for _ in range(2):  # two late timers in a row: a sustained backlog, in miniature
            seen = admission._last_lag_s
            time.sleep(0.1)  # block the loop 80 ms past the 20 ms timer
            async with asyncio.timeout(5):
                while admission._last_lag_s == seen:
                    await asyncio.sleep(0)  # resume right after the late timer, well before the next one
        task.cancel()
        return admission.lag_s

    assert asyncio.run(run()) >= 0.05


def test_the_monitor_ticks_at_the_lagging_period_while_the_loop_lags_past_half_the_bound() -> None:
    """An idle loop is woken every ``period_s``; near or in a shed the readings come every ``lagging_period_s``, so a
    shed ends soon after the loop recovers (a reading is the shedding signal until the next one)."""
    admission = Admission(max_lag_ms=100.0, period_s=0.025, lagging_period_s=0.005)
    assert admission.next_period_s() == 0.025
    admission._last_lag_s = 0.049  # below half the bound
    assert admission.next_period_s() == 0.025
    admission._last_lag_s = 0.051
    assert admission.next_period_s() == 0.005
    admission._last_lag_s = 0.0  # recovered
    assert admission.next_period_s() == 0.025
    assert Admission(period_s=0.002, lagging_period_s=0.005).lagging_period_s == 0.002  # never slower than period_s


def test_the_busy_share_is_an_exponential_average_of_clipped_measurements() -> None:
    admission = Admission(busy_window_s=0.1)
    admission.observe(1.0, 0.1)  # one time constant at full demand: 1 - e^-1
    assert abs(admission.busy - (1 - math.exp(-1))) < 1e-12
    admission.observe(7.0, 10.0)  # a share above 1 (clock skew between two reads) counts as 1
    assert admission.busy == 1.0
    for interval in (0.0, -1.0, float("nan")):  # no time passed (or a broken clock): nothing learned
        admission.observe(0.0, interval)
    assert admission.busy == 1.0


def test_the_monitor_sees_a_spinning_loop_busy_and_an_idle_one_not() -> None:
    admission = Admission(period_s=0.005, busy_window_s=0.05)

    async def run() -> tuple[float, float, float]:
        task = asyncio.create_task(admission.monitor())
        await asyncio.sleep(0)  # let the monitor take its first reading
        with thread_busy_clock() as demand_clock:
            demand_ns, wall_ns = demand_clock(), time.monotonic_ns()
            spin_until = time.perf_counter() + 0.3
            while time.perf_counter() < spin_until:  # 300 ms of CPU on the serving thread, no yield
                pass
            # What the demand clock itself saw of the spin: 1.0 on a free core, less where the host's scheduler
            # hides time from it (a CI runner's CPU quota once showed 0.80).
            seen = (demand_clock() - demand_ns) / (time.monotonic_ns() - wall_ns)
        async with asyncio.timeout(5):
            while admission.busy == 0.0:  # its first sample, overdue: it folds in the 300 ms
                await asyncio.sleep(0)
        busy_after_spin = admission.busy
        await asyncio.sleep(0.4)  # the loop idles (blocked in the selector), the monitor samples every 5 ms
        task.cancel()
        return busy_after_spin, admission.busy, seen

    busy, idle, seen = asyncio.run(run())
    # The first sample spans the 300 ms spin (weight 1 − e^(−0.3/0.05) ≈ 0.998): busy is the spin's share as
    # the clock saw it, whatever the host let the clock see.
    assert seen > 0.1, f"the demand clock saw only {seen:.2f} of a spinning thread"
    assert abs(busy - seen) < 0.1
    assert idle < 0.3 * busy


def test_metrics_export_the_admission_signals_of_a_running_service() -> None:
    with running_service(trainer=False) as running:
        text = httpx.get(f"{running.http_url}/metrics", timeout=10.0).text
    values = {
        line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line.startswith("edgepath_admission_")
    }
    assert set(values) == {"edgepath_admission_busy_ratio", "edgepath_admission_loop_lag_seconds"}
    assert 0.0 <= values["edgepath_admission_busy_ratio"] <= 1.0
    assert values["edgepath_admission_loop_lag_seconds"] >= 0.0


def test_grpc_core_refuses_calls_past_the_pending_bound_and_serves_all_without_it() -> None:
    """300 calls at once on one channel: grpc.aio takes one call per loop wake-up, so the rest wait in gRPC core.
    With a pending bound of 1 (refusals certain from 2 on) gRPC core refuses most of them with CANCELLED before
    any handler runs; with gRPC's defaults (1,000 / 3,000) every call is served."""
    service = Service.build(Settings())
    request = pb.RecommendRequest(
        device_id="phone-1", interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)]
    )

    async def burst(max_pending_calls: int | None) -> tuple[int, set[grpc.StatusCode]]:
        server, _, port = create_server(service.plane, "127.0.0.1:0", max_pending_calls=max_pending_calls)
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.PathServiceStub(channel)
                replies = await asyncio.gather(
                    *[stub.Recommend(request, timeout=30.0) for _ in range(300)], return_exceptions=True
                )
        finally:
            await server.stop(None)
        errors = [r for r in replies if isinstance(r, BaseException)]
        assert all(isinstance(e, grpc.aio.AioRpcError) for e in errors), errors[:1]
        return 300 - len(errors), {e.code() for e in errors}

    served, codes = asyncio.run(burst(1))
    assert 1 <= served < 300
    assert codes == {grpc.StatusCode.CANCELLED}
    assert asyncio.run(burst(None)) == (300, set())


def test_the_agent_retries_a_call_grpc_core_refused() -> None:
    from edgepath_agent.client import ServiceError, is_transient

    assert is_transient(ServiceError("CANCELLED", "CANCELLED"))


def test_the_settings_spell_out_the_admission_defaults() -> None:
    from edgepath.admission import DEFAULT_MAX_INFLIGHT, DEFAULT_MAX_LAG_MS

    settings = Settings()
    assert (settings.admission_max_inflight, settings.admission_max_lag_ms) == (
        DEFAULT_MAX_INFLIGHT,
        DEFAULT_MAX_LAG_MS,
    )
