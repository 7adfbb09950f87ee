"""The log lines of calls the server failed, and whose lines a bound left out (on-call drill, Redis outage).

1. A 12 s Redis outage under load wrote one WARNING per 503 (REST) or ``UNAVAILABLE`` (gRPC), each without its
   caller: now a :class:`edgepath.logs.FaultLog` of its own bounds them (the refusals' budget and theirs apart), the
   first line of each route or method and status written at once, each line naming the principal, the declared
   device, the route or method and the peer. ``/readyz``'s 503 is no longer one WARNING per probe: the readiness
   watcher logs each change once, both ways.
2. A line after lines left out names the callers of most of them (``suppressed_by``), with a bounded number of
   callers counted.
3. A refused body's ``device_id`` is named by its line even when the body did not validate (it was ``device None``).

The REST app through httpx's ASGI transport, the gRPC server on loopback; the limiters' clocks are the tests'.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import httpx
import pytest
from edgepath.errors import Unavailable
from edgepath.grpc import observe
from edgepath.grpc.server import create_server
from edgepath.logs import CrashLog, FaultLog, RefusalLog
from edgepath.main import Service
from edgepath.rest.app import RequestMetrics, create_app
from edgepath.security.auth import TokenFile
from edgepath.settings import Settings
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from grpc_health.v1 import health
from service_harness import captured_json_log, running_service

REPORT_OUTCOME = "/edgepath.v1.PathService/ReportOutcome"


def context(device_id: str) -> dict[str, Any]:
    return {
        "device_id": device_id,
        "interfaces": [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0}],
    }


def report(device_id: str) -> dict[str, Any]:
    return {"device_id": device_id, "decision_id": "d-1", "throughput_bps": 4e7}


@pytest.fixture
def info_log() -> Iterator[io.StringIO]:
    with captured_json_log("INFO") as stream:
        yield stream


def lines(stream: io.StringIO, logger: str, level: str | None = None) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    return [r for r in records if r["logger"] == logger and (level is None or r["level"] == level)]


async def store_down(*args: Any) -> Any:
    raise Unavailable("state store unreachable")


def request_metrics(app: Any) -> RequestMetrics:
    middleware = app.middleware_stack
    while not isinstance(middleware, RequestMetrics):
        middleware = middleware.app
    return middleware


# --- 1. server faults bounded, with their callers -------------------------------------------------------------------
def test_an_outage_answering_503_is_a_bounded_number_of_warnings_naming_callers(info_log: io.StringIO) -> None:
    """Three devices reporting outcomes in a loop while the store is down: 60 answers 503, 5 WARNING lines (the
    burst) and one more a second later counting the 55 left out by device; each line names its caller, route and
    peer. Before: 60 lines, each ``<url> -> 503 ...`` without any of them."""
    service = Service.build(Settings())
    service.plane.report_outcome = store_down  # type: ignore[method-assign]
    app = create_app(service.plane)
    now = [100.0]

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            assert (await http.get("/healthz")).status_code == 200  # builds the middleware stack
            request_metrics(app).faults = FaultLog(logging.getLogger("edgepath.rest"), clock=lambda: now[0])
            for i in range(20):
                for device in ("dev-a", "dev-b", "dev-c"):
                    rid = {"x-request-id": f"o-{device}-{i}"}
                    assert (await http.post("/v1/outcomes", json=report(device), headers=rid)).status_code == 503
            now[0] += 1.0  # one line's worth of time (1/s)
            assert (await http.post("/v1/outcomes", json=report("dev-a"))).status_code == 503

    asyncio.run(run())
    warned = lines(info_log, "edgepath.rest", "WARNING")
    assert len(warned) == 6, [w["message"] for w in warned]
    first = warned[0]
    assert first["request_id"] == "o-dev-a-0" and first["status"] == 503 and first["error"] == "unavailable"
    assert (first["transport"], first["method"], first["route"], first["device_id"]) == (
        "rest",
        "POST",
        "/v1/outcomes",
        "dev-a",
    )
    assert first["peer"].startswith("127.0.0.1:") and "state store unreachable" in first["message"]
    assert all("suppressed" not in w for w in warned[:5])
    assert warned[5]["suppressed"] == 55
    assert warned[5]["suppressed_by"] == {"dev-a": 18, "dev-b": 18, "dev-c": 19}
    assert "(55 more server faults not logged) (most from dev-c 19, dev-a 18, dev-b 18)" in warned[5]["message"]


def test_refusals_and_faults_have_budgets_of_their_own_and_a_new_fault_is_written_at_once(
    info_log: io.StringIO,
) -> None:
    """Both budgets spent, by refusals then by 503s: one more of each kind is still written when its own bucket
    has room, and the first 503 of another route, and the first 500 (a handler that raised), are written while the
    faults' bucket is empty."""
    service = Service.build(Settings())
    service.plane.report_outcome = store_down  # type: ignore[method-assign]
    app = create_app(service.plane)
    now = [100.0]

    async def run() -> None:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://edge"
        ) as http:
            assert (await http.get("/healthz")).status_code == 200
            middleware = request_metrics(app)
            rest = logging.getLogger("edgepath.rest")
            middleware.refusals = RefusalLog(rest, rate_per_s=1.0, burst=2, clock=lambda: now[0])
            middleware.faults = FaultLog(rest, rate_per_s=1.0, burst=2, clock=lambda: now[0])
            for _ in range(5):  # the refusals' budget spent
                assert (await http.post("/v1/recommendations", json={"device_id": 7})).status_code == 422
            for _ in range(5):  # the faults' own: two lines
                assert (await http.post("/v1/outcomes", json=report("dev-f"))).status_code == 503
            service.plane.recommend = store_down  # type: ignore[method-assign]
            assert (await http.post("/v1/recommendations", json=context("dev-r"))).status_code == 503  # new fault

            async def broken(*args: Any) -> Any:
                raise RuntimeError("a bug")

            service.plane.recommend = broken  # type: ignore[method-assign]
            assert (
                await http.post("/v1/recommendations", json=context("dev-r"), headers={"x-request-id": "bug"})
            ).status_code == 500
            assert (await http.post("/v1/recommendations", json=context("dev-r"))).status_code == 500  # not new
            now[0] += 1.0
            assert (await http.post("/v1/recommendations", json={"device_id": 8})).status_code == 422

    asyncio.run(run())
    refused = lines(info_log, "edgepath.rest", "INFO")
    warned = lines(info_log, "edgepath.rest", "WARNING")
    assert [r["status"] for r in refused] == [422, 422, 422]
    assert refused[2]["suppressed"] == 3  # only the refusals left out: the faults' are not counted here
    assert [(w["route"], w["status"]) for w in warned] == [
        ("/v1/outcomes", 503),
        ("/v1/outcomes", 503),
        ("/v1/recommendations", 503),
        ("/v1/recommendations", 500),
    ]
    assert warned[2]["device_id"] == "dev-r" and warned[3]["request_id"] == "bug"


def test_readyz_logs_no_line_per_probe(info_log: io.StringIO) -> None:
    """Not ready (the store unreachable): every probe is answered 503, none is logged; the change of state is the
    readiness watcher's line (next test). Before: one WARNING per probe."""
    service = Service.build(Settings())

    async def not_ready() -> bool:
        return False

    service.plane.ready = not_ready  # type: ignore[method-assign]
    app = create_app(service.plane)

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            for _ in range(5):
                probe = await http.get("/readyz")
                assert probe.status_code == 503 and probe.json()["degraded"] is True

    asyncio.run(run())
    assert lines(info_log, "edgepath.rest") == []


def test_the_readiness_watcher_logs_each_change_once_both_ways(info_log: io.StringIO) -> None:
    """Ready, not ready for three polls, ready again: one WARNING when it turns not ready, one INFO when it is ready
    again; nothing per poll. Before: the change back went unlogged."""
    service = Service.build(Settings())
    states = iter([True, True, False, False, False, True, True])
    polled = asyncio.Event()

    async def ready() -> bool:
        try:
            return next(states)
        except StopIteration:
            polled.set()
            await asyncio.Event().wait()  # the watcher waits here until cancelled
            raise AssertionError("not cancelled") from None

    service.plane.ready = ready  # type: ignore[method-assign]

    async def run() -> None:
        watcher = asyncio.create_task(service._watch_readiness(health.aio.HealthServicer(), period_s=0.0))
        await asyncio.wait_for(polled.wait(), 10.0)
        watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher

    asyncio.run(run())
    said = [(r["level"], r["message"]) for r in lines(info_log, "edgepath") if "ready" in r["message"]]
    assert said == [
        ("WARNING", "not ready: state store unreachable; still deciding with model v1"),
        ("INFO", "ready again: state store reachable; serving model v1"),
    ]


@contextlib.asynccontextmanager
async def served_stub(service: Service) -> AsyncIterator[pb_grpc.PathServiceStub]:
    """A PathService stub on a channel to ``service``'s gRPC server on loopback; the server stops after a grace
    period (the calls' observers finish first)."""
    server, _, port = create_server(service.plane, "127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield pb_grpc.PathServiceStub(channel)
    finally:
        await server.stop(5.0)


def test_grpc_unavailable_calls_are_bounded_warnings_naming_their_callers(
    info_log: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ReportOutcome answering UNAVAILABLE in a loop (the store down): the burst of WARNING lines, then one counting
    the calls left out by device; each names the method, the declared device and the peer; INVALID_ARGUMENT calls
    afterwards are logged from the refusals' own budget. Before: one WARNING per call, ``<method> -> UNAVAILABLE``."""
    now = [100.0]
    made: list[FaultLog] = []

    def fault_log(logger: logging.Logger) -> FaultLog:
        made.append(FaultLog(logger, clock=lambda: now[0]))
        return made[-1]

    monkeypatch.setattr(observe, "FaultLog", fault_log)
    service = Service.build(Settings())
    service.plane.report_outcome = store_down  # type: ignore[method-assign]

    async def run() -> None:
        async with served_stub(service) as stub:
            for i in range(10):
                for device in ("dev-x", "dev-y"):
                    call = pb.OutcomeRequest(device_id=device, decision_id="d-1", throughput_bps=4e7)
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await stub.ReportOutcome(call, timeout=5, metadata=(("x-request-id", f"g-{device}-{i}"),))
                    assert err.value.code() == grpc.StatusCode.UNAVAILABLE

            async def all_seen() -> None:  # the client has its status before the server's observer runs
                while made[0].suppressed < 15:
                    await asyncio.sleep(0)

            await asyncio.wait_for(all_seen(), 10.0)
            now[0] += 1.0
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.ReportOutcome(
                    pb.OutcomeRequest(device_id="dev-x", decision_id="d-1", throughput_bps=4e7), timeout=5
                )
            bad = pb.RecommendRequest(device_id="dev-x", interfaces=[pb.InterfaceContext(name="wlan0")])
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Recommend(bad, timeout=5)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    asyncio.run(run())
    warned = lines(info_log, "edgepath.grpc", "WARNING")
    assert len(warned) == 6, [w["message"] for w in warned]
    first = warned[0]
    assert (first["request_id"], first["method"], first["grpc_code"], first["device_id"]) == (
        "g-dev-x-0",
        REPORT_OUTCOME,
        "UNAVAILABLE",
        "dev-x",
    )
    assert first["transport"] == "grpc" and first["peer"].startswith("ipv")
    assert first["detail"] == "state store unreachable"
    assert warned[5]["suppressed"] == 15 and warned[5]["suppressed_by"] == {"dev-x": 7, "dev-y": 8}
    refused = lines(info_log, "edgepath.grpc", "INFO")
    assert [r["grpc_code"] for r in refused] == ["INVALID_ARGUMENT"] and "suppressed" not in refused[0]


# --- 2. whose lines were left out ------------------------------------------------------------------------------------
def test_the_line_after_refusals_left_out_names_the_devices_of_most_of_them(info_log: io.StringIO) -> None:
    """One noisy device and two quiet ones: the count of the lines left out says whose they were, most first."""
    app = create_app(Service.build(Settings()).plane)
    now = [100.0]
    bad = {"interfaces": "not a list"}

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            assert (await http.get("/healthz")).status_code == 200
            request_metrics(app).refusals = RefusalLog(
                logging.getLogger("edgepath.rest"), rate_per_s=1.0, burst=5, clock=lambda: now[0]
            )
            sent = ["noisy"] * 45 + ["quiet-1"] * 3 + ["quiet-2"]
            for device in sent:
                assert (await http.post("/v1/recommendations", json={**bad, "device_id": device})).status_code == 422
            assert (
                await http.post("/v1/recommendations", content=b"{", headers={"content-type": "application/json"})
            ).status_code == 400
            now[0] += 1.0
            assert (await http.post("/v1/recommendations", json={**bad, "device_id": "quiet-1"})).status_code == 422

    asyncio.run(run())
    refused = [r for r in lines(info_log, "edgepath.rest") if r.get("transport") == "rest"]
    assert len(refused) == 6 and refused[5]["suppressed"] == 45
    assert refused[5]["suppressed_by"] == {"noisy": 40, "quiet-1": 3, "peer 127.0.0.1": 1, "quiet-2": 1}
    assert "(45 more refusals not logged) (most from noisy 40, quiet-1 3, " in refused[5]["message"]


def test_the_callers_counted_are_bounded_and_forgotten_once_named() -> None:
    now = [0.0]
    logger = logging.getLogger("edgepath.test.refusal_callers")
    logger.setLevel(logging.INFO)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    logger.addHandler(keep)
    try:
        log = RefusalLog(logger, rate_per_s=1.0, burst=1, clock=lambda: now[0], max_keys=3, top=2)
        assert log.admit("first")
        for i in range(100):
            assert not log.admit(f"dev-{i % 10}")
        assert not log.admit(None)
        assert log.suppressed == 101 and log.suppressed_by == {"dev-0": 10, "dev-1": 10, "dev-2": 10}
        now[0] += 1.0
        assert log.admit("dev-0")
        log.write("refused %s", ("x",), {})
        fields = records[-1].__dict__
        assert fields["suppressed"] == 101 and fields["suppressed_by"] == {"dev-0": 10, "dev-1": 10}
        assert log.suppressed == 0 and log.suppressed_by == {}
    finally:
        logger.removeHandler(keep)
        logger.setLevel(logging.NOTSET)
    with pytest.raises(ValueError):
        RefusalLog(logger, max_keys=0)


def test_a_fault_not_seen_for_a_while_is_written_at_once_and_the_faults_remembered_are_bounded() -> None:
    now = [0.0]
    logger = logging.getLogger("edgepath.test.faults")
    log = FaultLog(logger, rate_per_s=1.0, burst=1, clock=lambda: now[0], fresh_s=60.0, max_faults=2)
    assert [log.admit_fault("a", "k") for _ in range(3)] == [True, False, False]
    assert log.admit_fault("b", "k")  # new: written with the bucket empty
    now[0] += 30.0
    assert log.admit_fault("a", "k")  # a token back (refilled)
    assert not log.admit_fault("a", "k")
    now[0] += 61.0
    log._tokens, log._at = 0.0, now[0]  # the bucket empty: "b" unseen for 91 s is written, "a" (seen 61 s ago) too
    assert log.admit_fault("b", "k") and log.admit_fault("a", "k") and not log.admit_fault("a", "k")
    assert log.admit_fault("c", "k")  # a third fault: the oldest remembered ("b") forgotten
    assert set(log._seen) == {"a", "c"}
    assert log.suppressed == 4 and log.suppressed_by == {"k": 4}
    logger.setLevel(logging.ERROR)  # the operator's switch: nothing written, nothing counted
    try:
        assert not log.admit_fault("d", "k") and log.suppressed == 4
    finally:
        logger.setLevel(logging.NOTSET)


# --- 3. the device a refused body declared ---------------------------------------------------------------------------
def test_a_refused_body_names_the_device_it_declared(info_log: io.StringIO, tmp_path: Any) -> None:
    """An authenticated device's body that does not validate (422) but declares a ``device_id`` string: its line
    names that device beside the principal; one that is not JSON (400) or declares none names none; a long or
    multi-line one is cut and escaped. Before: ``device None``."""
    tokens = TokenFile(tmp_path / "tokens.json")
    token = tokens.add("dev-tok")
    auth = {"Authorization": f"Bearer {token}"}
    long_id = "garbage\nline " + "x" * 400
    with running_service(auth_tokens_file=tokens.path) as svc, httpx.Client(base_url=svc.http_url, timeout=10) as http:

        def post(path: str, rid: str, **kwargs: Any) -> int:
            headers = {**auth, **kwargs.pop("headers", {}), "x-request-id": rid}
            return http.post(path, headers=headers, **kwargs).status_code

        bad_interfaces = {"interfaces": [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": 9}]}
        assert post("/v1/recommendations", "r-garbage", json={**bad_interfaces, "device_id": "garbage-dev"}) == 422
        assert post("/v1/outcomes", "o-garbage", json={"device_id": "garbage-dev", "decision_id": 5}) == 422
        assert post("/v1/recommendations", "r-long", json={**bad_interfaces, "device_id": long_id}) == 422
        assert post("/v1/recommendations", "r-number", json={**bad_interfaces, "device_id": 7}) == 422
        truncated = b'{"device_id": "garbage-dev"'
        assert (
            post("/v1/outcomes", "o-not-json", content=truncated, headers={"content-type": "application/json"}) == 400
        )
    by_id = {r["request_id"]: r for r in lines(info_log, "edgepath.rest") if r.get("transport") == "rest"}
    for rid in ("r-garbage", "o-garbage"):
        assert (by_id[rid]["principal"], by_id[rid]["device_id"]) == ("dev-tok", "garbage-dev"), rid
        assert "(principal dev-tok, device garbage-dev)" in by_id[rid]["message"]
    assert by_id["r-long"]["device_id"] == ("garbage\\nline " + "x" * 400)[:256]
    assert "device_id" not in by_id["r-number"] and "device_id" not in by_id["o-not-json"]


# --- 4. handlers that raised: one traceback per distinct crash, the repeats bounded ----------------------------------
def test_a_rest_handler_raising_on_every_request_writes_a_bounded_number_of_tracebacks(info_log: io.StringIO) -> None:
    """A bug every request hits: the first request's traceback at ERROR at once (its request id, route, method and
    exception type), the repeats left out and counted on the next line written: another exception type on the same
    route, a new crash written at once. Each request is still answered the 500 problem with its request id and
    nothing of the exception, and counted 500; the exception no longer leaves the app (uvicorn logged one
    "Exception in ASGI application" traceback per request). Before: one traceback per request, and the app re-raised
    every exception to the server."""
    service = Service.build(Settings())
    app = create_app(service.plane)
    now = [100.0]
    raised: list[type[Exception]] = [RuntimeError]

    async def broken(*args: Any) -> Any:
        raise raised[0]("a bug: redis user edgepath may not run evalsha")

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            assert (await http.get("/healthz")).status_code == 200
            rest = logging.getLogger("edgepath.rest")
            request_metrics(app).crashes = CrashLog(rest, rate_per_s=1.0, burst=1, clock=lambda: now[0])
            service.plane.recommend = broken  # type: ignore[method-assign]
            for i in range(5):
                resp = await http.post("/v1/recommendations", json=context("dev-a"), headers={"x-request-id": f"c{i}"})
                assert resp.status_code == 500 and resp.headers["x-request-id"] == f"c{i}"
                assert resp.json()["request_id"] == f"c{i}" and resp.json()["error"] == "internal"
                assert "evalsha" not in resp.text and "RuntimeError" not in resp.text
            raised[0] = ValueError
            assert (await http.post("/v1/recommendations", json=context("dev-a"))).status_code == 500  # a new crash
            raised[0] = RuntimeError
            now[0] += 1.0
            resp = await http.post("/v1/recommendations", json=context("dev-a"), headers={"x-request-id": "c-last"})
            assert resp.status_code == 500
            scraped = (await http.get("/metrics")).text
            assert 'handler="/v1/recommendations",method="POST",status="500"} 7.0' in scraped

    asyncio.run(run())
    errors = lines(info_log, "edgepath.rest", "ERROR")
    assert [(e["request_id"], e["exception"]) for e in errors[:1] + errors[2:]] == [
        ("c0", "RuntimeError"),
        ("c-last", "RuntimeError"),
    ]
    assert errors[1]["exception"] == "ValueError" and len(errors) == 3, [e["message"] for e in errors]
    assert all("may not run evalsha" in e["exc_info"] for e in errors)
    first = errors[0]
    assert (first["route"], first["method"], first["status"], first["transport"]) == (
        "/v1/recommendations",
        "POST",
        500,
        "rest",
    )
    assert first["message"] == "POST /v1/recommendations failed: unexpected RuntimeError (principal None, device dev-a)"
    assert "suppressed" not in first and "suppressed" not in errors[2]
    assert errors[1]["suppressed"] == 4 and errors[1]["suppressed_by"] == {"dev-a": 4}  # the next line written
    assert "(4 more crashes not logged) (most from dev-a 4)" in errors[1]["message"]


def test_a_grpc_handler_raising_on_every_call_writes_a_bounded_number_of_tracebacks(
    info_log: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same over gRPC: each call answered ``UNKNOWN`` with the request id only, the first call's traceback at
    ERROR at once, the repeats counted on the next line written (a second later). Before: ``unexpected()`` wrote one
    traceback per call."""
    now = [100.0]

    def crash_log(logger: logging.Logger) -> CrashLog:
        return CrashLog(logger, rate_per_s=1.0, burst=1, clock=lambda: now[0])

    monkeypatch.setattr(observe, "CrashLog", crash_log)
    service = Service.build(Settings())

    async def broken(*args: Any) -> Any:
        raise RuntimeError("a bug: redis user edgepath may not run evalsha")

    service.plane.report_outcome = broken  # type: ignore[method-assign]

    async def run() -> None:
        async with served_stub(service) as stub:
            for i in [*range(5), "last"]:
                if i == "last":
                    now[0] += 1.0
                call = pb.OutcomeRequest(device_id="dev-x", decision_id="d-1", throughput_bps=4e7)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.ReportOutcome(call, timeout=5, metadata=(("x-request-id", f"g{i}"),))
                assert err.value.code() == grpc.StatusCode.UNKNOWN
                details = err.value.details() or ""
                assert details.endswith(f"g{i}") and "evalsha" not in details

    asyncio.run(run())
    errors = lines(info_log, "edgepath.grpc", "ERROR")
    assert [e["request_id"] for e in errors] == ["g0", "glast"], [e["message"] for e in errors]
    assert all("may not run evalsha" in e["exc_info"] for e in errors)
    assert errors[0]["message"] == f"{REPORT_OUTCOME} failed: unexpected RuntimeError"
    assert errors[0]["method"] == REPORT_OUTCOME and errors[0]["exception"] == "RuntimeError"
    assert errors[1]["suppressed"] == 4 and "(4 more crashes not logged)" in errors[1]["message"]
