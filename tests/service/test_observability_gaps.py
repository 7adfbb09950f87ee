"""What an operator reading the logs and the metrics could not see (issue 22, observability gaps).

1. The request counters of both transports and ``edgepath_decisions_total`` are exported at 0 for every label set
   known in advance (the routes × the statuses they answer, PathService's methods × the codes its calls end with,
   the served policy × the access types), so ``increase()``/``rate()`` and the alerts' ratios see a pod's first
   event.
2. Outcome reports refused 429 / RESOURCE_EXHAUSTED or 503 / UNAVAILABLE are counted in ``edgepath_outcomes_total``
   (``rate_limited``, ``unavailable``) over both transports.
3. Log lines are stamped RFC 3339 in UTC with milliseconds, in both formats.
4. Every refused request (4xx, a client's gRPC error) is one INFO line naming the route or method, the status, the
   field and the caller, with the request id, bounded per process (:class:`edgepath.logs.RefusalLog`).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import grpc
import httpx
import pytest
from edgepath.admission import Admission
from edgepath.grpc.server import GRPC_STATUS
from edgepath.logs import RefusalLog, configure_logging
from edgepath.main import Service
from edgepath.metrics import GRPC_CODES, OUTCOME_METHOD, PATH_SERVICE, PATH_SERVICE_METHODS, Metrics
from edgepath.rest.app import RequestMetrics, create_app
from edgepath.security.auth import TokenFile, issue_jwt
from edgepath.settings import Settings
from edgepath.types import AccessType
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from prometheus_client.parser import text_string_to_metric_families
from service_harness import captured_json_log, running_service

CONTEXT: dict[str, Any] = {
    "device_id": "dev-obs",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "sinr_db": 8.0, "cqi": 9},
    ],
}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def outcomes(metrics: Metrics, result: str) -> float:
    return metrics.outcomes.labels(result)._value.get()


# --- 1. label sets known in advance, at 0 ------------------------------------------------------------------------
def test_a_fresh_service_exports_the_request_and_decision_series_at_zero() -> None:
    with running_service() as svc:
        scrape = httpx.get(f"{svc.http_url}/metrics", timeout=5)
        policy = svc.service.plane.registry.current.model.policy_name
    assert scrape.status_code == 200
    got = samples(scrape.text)

    def at_zero(name: str, **labels: str) -> bool:
        return got.get((name, frozenset(labels.items()))) == 0

    missing = [
        f"{name}/{code}"
        for name in PATH_SERVICE_METHODS
        for code in GRPC_CODES
        if not at_zero("grpc_server_handled_total", grpc_service=PATH_SERVICE, grpc_method=name, grpc_code=code)
    ]
    assert not missing, missing
    for handler, method, status in (
        ("/v1/recommendations", "POST", "200"),
        ("/v1/recommendations", "POST", "503"),  # shed: EdgePathServerErrors' numerator
        ("/v1/recommendations", "POST", "500"),
        ("/v1/recommendations/batch", "POST", "422"),
        ("/v1/outcomes", "POST", "429"),  # EdgePathRateLimited's numerator
        ("/v1/outcomes", "POST", "404"),
        ("/v1/admin/quarantine/{device_id}", "PUT", "403"),
        ("/healthz", "GET", "200"),
        ("/mts/v1/mts_sessions", "POST", "201"),
        ("/mts/v1/mts_sessions/{sessionId}", "DELETE", "204"),
    ):
        assert at_zero("edgepath_http_requests_total", handler=handler, method=method, status=status), (handler, status)
    handlers = {dict(labels)["handler"] for name, labels in got if name == "edgepath_http_requests_total"}
    assert "none" not in handlers and "/metrics" not in handlers  # the client's label values, and the uncounted
    for access in AccessType:
        assert at_zero("edgepath_decisions_total", policy=policy, access_type=access.value), access
    assert at_zero("edgepath_decisions_explored_total", policy=policy)
    assert at_zero("edgepath_outcomes_total", result="rate_limited")
    assert at_zero("edgepath_outcomes_total", result="unavailable")


def test_requests_are_counted_under_the_pre_created_series() -> None:
    """The label sets created at start are the ones requests count under: the MTS routes (an included router, whose
    routes FastAPI leaves in the scope with their own paths) under their full template."""
    plane = Service.build(Settings()).plane
    app = create_app(plane)
    created = set(plane.metrics.http_requests._children)

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            assert (await http.get("/mts/v1/mts_sessions/abc")).status_code == 404
            assert (await http.get("/mts/v1/mts_sessions")).status_code == 200
            assert (await http.post("/v1/recommendations", json=CONTEXT)).status_code == 200
            assert (await http.post("/v1/outcomes", json={"device_id": "x"})).status_code == 422
            assert (await http.get("/readyz")).status_code == 200

    asyncio.run(run())
    counted = {labels for labels, child in plane.metrics.http_requests._children.items() if child._value.get()}
    assert ("/mts/v1/mts_sessions/{sessionId}", "GET", "404") in counted
    assert len(counted) == 5 and counted <= created


def test_the_pre_created_grpc_methods_and_codes_are_the_services() -> None:
    methods = pb.DESCRIPTOR.services_by_name["PathService"].methods
    assert sorted(m.name for m in methods) == sorted(PATH_SERVICE_METHODS)
    assert pb.DESCRIPTOR.services_by_name["PathService"].full_name == PATH_SERVICE
    # every code the errors map to (no PathService path raises Conflict: ALREADY_EXISTS), OK and the observer's own
    answered = {code.name for code in GRPC_STATUS.values()} - {"ALREADY_EXISTS"}
    assert answered | {"OK", "UNKNOWN", "CANCELLED", "DEADLINE_EXCEEDED"} == set(GRPC_CODES)


def test_apprentice_mode_and_a_published_policy_are_pre_created() -> None:
    plane = Service.build(Settings(mode="apprentice", apprentice_baseline="lte_first")).plane
    decided = plane.metrics.decisions._children
    served = plane.registry.current.model.policy_name
    assert {(p, a.value) for p in (served, "apprentice:lte_first") for a in AccessType} <= set(decided)
    assert all(decided[(p, a.value)]._value.get() == 0 for p in (served, "apprentice:lte_first") for a in AccessType)
    asyncio.run(plane.registry.publish(SimpleNamespace(policy_name="other_policy")))  # type: ignore[arg-type]
    assert ("other_policy", "NR") in plane.metrics.decisions._children
    assert ("other_policy",) in plane.metrics.explored._children


# --- 2. refused outcome reports counted ----------------------------------------------------------------------------
def test_refused_outcome_statuses_count_as_outcomes_on_the_outcome_route_and_method_only() -> None:
    m = Metrics.create()
    recommend = f"/{PATH_SERVICE}/Recommend"
    for _ in range(2):  # the second call of each takes the cached children
        m.grpc_call(OUTCOME_METHOD, "RESOURCE_EXHAUSTED", 0.001)
        m.grpc_call(OUTCOME_METHOD, "UNAVAILABLE", 0.001)
        m.grpc_call(OUTCOME_METHOD, "NOT_FOUND", 0.001)
        m.grpc_call(recommend, "RESOURCE_EXHAUSTED", 0.001)
        m.http_request("/v1/outcomes", "POST", 429, 0.001)
        m.http_request("/v1/outcomes", "POST", 503, 0.001)
        m.http_request("/v1/outcomes", "POST", 422, 0.001)
        m.http_request("/v1/recommendations", "POST", 429, 0.001)
        m.http_request("/v1/recommendations", "POST", 503, 0.001)
    assert outcomes(m, "rate_limited") == 4 and outcomes(m, "unavailable") == 4
    # each call still counted once by its transport
    assert m.grpc_handled.labels(PATH_SERVICE, "ReportOutcome", "RESOURCE_EXHAUSTED")._value.get() == 2
    assert m.http_requests.labels("/v1/outcomes", "POST", "429")._value.get() == 2
    assert m.http_requests.labels("/v1/recommendations", "POST", "503")._value.get() == 2
    assert m.http_request_seconds.labels("/v1/outcomes", "POST").sum == pytest.approx(0.006)


def test_outcome_reports_shed_or_capped_over_rest_are_counted() -> None:
    shedding = Service.build(Settings())
    app = create_app(shedding.plane, admission=Admission(max_inflight=0))
    capped = Service.build(Settings(outcome_cap_per_window=1))
    capped_app = create_app(capped.plane)

    async def run() -> tuple[int, int, int, int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            shed = await http.post("/v1/outcomes", json={"device_id": "d", "decision_id": "x", "throughput_bps": 1.0})
            await http.post("/v1/recommendations", json=CONTEXT)  # shed too: not an outcome report
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=capped_app), base_url="http://edge") as http:
            rec = (await http.post("/v1/recommendations", json=CONTEXT)).json()
            report = {"device_id": "dev-obs", "decision_id": rec["decision_id"], "throughput_bps": 4e7}
            first = await http.post("/v1/outcomes", json=report)
            second = await http.post("/v1/outcomes", json=report)
            unknown = await http.post("/v1/outcomes", json={**report, "decision_id": "no-such"})
        return shed.status_code, first.status_code, second.status_code, unknown.status_code

    assert asyncio.run(run()) == (503, 200, 429, 404)
    assert outcomes(shedding.plane.metrics, "unavailable") == 1
    assert outcomes(shedding.plane.metrics, "rate_limited") == 0
    assert outcomes(capped.plane.metrics, "rate_limited") == 1
    assert outcomes(capped.plane.metrics, "new") == 1 and outcomes(capped.plane.metrics, "unknown") == 1


def test_outcome_reports_capped_over_grpc_are_counted() -> None:
    with running_service(outcome_cap_per_window=1) as svc:
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
            stub = pb_grpc.PathServiceStub(channel)
            request = pb.RecommendRequest(
                device_id="dev-grpc-cap",
                interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI, wifi_rssi_dbm=-60.0)],
            )
            rec = stub.Recommend(request, timeout=5)
            report = pb.OutcomeRequest(device_id="dev-grpc-cap", decision_id=rec.decision_id, throughput_bps=4e7)
            assert stub.ReportOutcome(report, timeout=5).accepted
            with pytest.raises(grpc.RpcError) as err:
                stub.ReportOutcome(report, timeout=5)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        scrape = httpx.get(f"{svc.http_url}/metrics", timeout=5)
    got = samples(scrape.text)
    assert got[("edgepath_outcomes_total", frozenset({("result", "rate_limited")}))] == 1
    assert got[("edgepath_outcomes_total", frozenset({("result", "new")}))] == 1


# --- 3. RFC 3339 UTC timestamps ----------------------------------------------------------------------------------
@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone 5 h 30 min east of UTC, so a local timestamp cannot pass for UTC."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.usefixtures("far_from_utc")
def test_log_time_is_rfc3339_utc_with_milliseconds(log_format: str) -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    handler = configure_logging("INFO", log_format, stream=io.StringIO())
    try:
        record = logging.LogRecord("edgepath.test", logging.INFO, __file__, 1, "hello", None, None)
        record.created, record.msecs = 1_800_000_000.5, 500.0  # 2027-01-15 08:00:00.500 UTC
        assert handler.filter(record)  # the request id filter
        line = handler.format(record)
    finally:
        root.removeHandler(handler)
        for h in saved_handlers:
            root.addHandler(h)
        root.setLevel(saved_level)
    stamp = json.loads(line)["time"] if log_format == "json" else line.split(" ", 1)[0]
    assert stamp == "2027-01-15T08:00:00.500Z"


# --- 4. refused requests logged, bounded -------------------------------------------------------------------------
@pytest.fixture
def info_log() -> Iterator[io.StringIO]:
    """JSON lines at INFO (the default level: the refusal lines must be there, not at DEBUG)."""
    with captured_json_log("INFO") as stream:
        yield stream


def refusal_lines(stream: io.StringIO, transport: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    return [r for r in lines if r.get("transport") == transport]


def test_refused_rest_requests_are_logged_at_info_with_route_status_field_and_caller(
    info_log: io.StringIO, tmp_path: Any
) -> None:
    tokens = TokenFile(tmp_path / "tokens.json")
    token = tokens.add("dev-log")
    platform = tokens.add("mec-platform", admin=True)
    # invalid (a positive RSSI), with a marker that must not reach the log: a refusal's line never carries the body
    marked = {
        "device_id": "dev-log",
        "interfaces": [{"name": "body-marker-7", "access_type": "WIFI", "wifi_rssi_dbm": 9}],
    }
    with running_service(auth_tokens_file=tokens.path, outcome_cap_per_window=1, max_message_bytes=4096) as svc:
        with httpx.Client(base_url=svc.http_url, timeout=10) as http:
            auth = {"Authorization": f"Bearer {token}"}

            def post(path: str, rid: str, **kwargs: Any) -> int:
                headers = {**kwargs.pop("headers", {}), "x-request-id": rid}
                return http.post(path, headers=headers, **kwargs).status_code

            assert post("/v1/recommendations", "r-401", json=CONTEXT) == 401
            assert post("/v1/recommendations", "r-422", json=marked, headers=auth) == 422
            rec = http.post("/v1/recommendations", json={**CONTEXT, "device_id": "dev-log"}, headers=auth).json()
            report = {"device_id": "dev-log", "decision_id": "no-such", "throughput_bps": 1e6}
            assert post("/v1/outcomes", "r-404", json=report, headers=auth) == 404  # takes the outcome cap's token
            assert post("/v1/outcomes", "r-413", content=b"x" * 5000, headers=auth) == 413
            assert (
                post("/v1/outcomes", "r-429", json={**report, "decision_id": rec["decision_id"]}, headers=auth) == 429
            )
            assert http.get("/healthz").status_code == 200
            assert post("/mts/v1/mts_sessions", "r-mts", json={"appInsId": 1}, headers=auth) == 403
            admin = {"Authorization": f"Bearer {platform}"}
            assert post("/mts/v1/mts_sessions", "r-mts-400", json={"appInsId": 1}, headers=admin) == 400
            missing = http.get("/mts/v1/mts_sessions/no-such", headers={**admin, "x-request-id": "r-mts-404"})
            assert missing.status_code == 404
    by_id = {r["request_id"]: r for r in refusal_lines(info_log, "rest")}
    # no line for the answered ones
    assert set(by_id) == {"r-401", "r-422", "r-404", "r-413", "r-429", "r-mts", "r-mts-400", "r-mts-404"}
    assert all(r["level"] == "INFO" and r["logger"] == "edgepath.rest" for r in by_id.values())
    assert by_id["r-401"]["status"] == 401 and "principal" not in by_id["r-401"]
    assert by_id["r-422"]["route"] == "/v1/recommendations"
    assert by_id["r-422"]["field"] == "interfaces[0].wifi_rssi_dbm"
    assert by_id["r-422"]["principal"] == "dev-log"
    r404 = by_id["r-404"]
    assert (r404["method"], r404["route"], r404["status"], r404["field"]) == (
        "POST",
        "/v1/outcomes",
        404,
        "decision_id",
    )
    assert (r404["principal"], r404["device_id"]) == ("dev-log", "dev-log")
    assert by_id["r-413"]["status"] == 413 and by_id["r-413"]["route"] == "/v1/outcomes"
    assert by_id["r-429"]["status"] == 429 and by_id["r-429"]["error"] == "rate_limited"
    assert by_id["r-mts"]["route"] == "/mts/v1/mts_sessions" and by_id["r-mts"]["status"] == 403
    assert by_id["r-mts"]["principal"] == "dev-log"  # the MTS router's own authentication names its caller
    assert (by_id["r-mts-400"]["status"], by_id["r-mts-400"]["principal"]) == (400, "mec-platform")
    assert by_id["r-mts-400"]["field"] == "appInsId"
    r_mts_404 = by_id["r-mts-404"]
    assert (r_mts_404["route"], r_mts_404["status"], r_mts_404["principal"]) == (
        "/mts/v1/mts_sessions/{sessionId}",
        404,
        "mec-platform",
    )
    text = info_log.getvalue()
    assert token not in text and platform not in text and "body-marker-7" not in text  # no credential, no body


def test_refused_grpc_calls_are_logged_at_info_with_method_code_field_and_device(info_log: io.StringIO) -> None:
    with running_service() as svc, grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
        stub = pb_grpc.PathServiceStub(channel)
        bad = pb.RecommendRequest(
            device_id="dev-g",
            interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI, wifi_rssi_dbm=9.0)],
        )
        with pytest.raises(grpc.RpcError):
            stub.Recommend(bad, timeout=5, metadata=(("x-request-id", "g-invalid"),))
        unknown = pb.OutcomeRequest(device_id="dev-g", decision_id="no-such", throughput_bps=1e6)
        with pytest.raises(grpc.RpcError):
            stub.ReportOutcome(unknown, timeout=5, metadata=(("x-request-id", "g-unknown"),))
        good = pb.RecommendRequest(
            device_id="dev-g", interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)]
        )
        stub.Recommend(good, timeout=5, metadata=(("x-request-id", "g-ok"),))
    by_id = {r["request_id"]: r for r in refusal_lines(info_log, "grpc")}
    assert set(by_id) == {"g-invalid", "g-unknown"}
    invalid, unknown_line = by_id["g-invalid"], by_id["g-unknown"]
    assert invalid["level"] == "INFO" and invalid["logger"] == "edgepath.grpc"
    assert invalid["method"] == f"/{PATH_SERVICE}/Recommend" and invalid["grpc_code"] == "INVALID_ARGUMENT"
    assert invalid["field"] == "interfaces[0].wifi_rssi_dbm" and invalid["device_id"] == "dev-g"
    assert invalid["peer"].startswith("ipv")
    assert unknown_line["grpc_code"] == "NOT_FOUND" and unknown_line["field"] == "decision_id"
    assert unknown_line["device_id"] == "dev-g"


def test_refused_grpc_calls_of_a_token_or_jwt_caller_name_it_and_only_that_call(
    info_log: io.StringIO, tmp_path: Any
) -> None:
    """A caller the servicer authenticated with a bearer token or a JWT, refused for a later reason (an invalid body,
    an unknown decision, an invalid stream message), is the ``principal`` of the line; a call without credentials
    on the same channel right after has none (the caller is the call's own, not the last one's)."""
    tokens = TokenFile(tmp_path / "tokens.json")
    token = tokens.add("dev-tok")
    key = "k" * 32
    bad = pb.RecommendRequest(
        device_id="dev-tok",
        interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI, wifi_rssi_dbm=9.0)],
    )
    with (
        running_service(auth_tokens_file=tokens.path, auth_jwt_key=key) as svc,
        grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel,
    ):
        stub = pb_grpc.PathServiceStub(channel)
        auth = (("authorization", f"Bearer {token}"),)
        jwt_auth = (("authorization", f"Bearer {issue_jwt(key, 'dev-jwt')}"),)
        calls: list[tuple[str, Any]] = [
            ("t-invalid", lambda md: stub.Recommend(bad, timeout=5, metadata=auth + md)),
            ("t-jwt", lambda md: stub.Recommend(bad, timeout=5, metadata=jwt_auth + md)),
            ("t-anon", lambda md: stub.Recommend(bad, timeout=5, metadata=md)),
            (
                "t-unknown",
                lambda md: stub.ReportOutcome(
                    pb.OutcomeRequest(device_id="dev-tok", decision_id="no-such", throughput_bps=1e6),
                    timeout=5,
                    metadata=auth + md,
                ),
            ),
            ("t-stream", lambda md: list(stub.RecommendStream(iter([bad]), timeout=5, metadata=auth + md))),
        ]
        codes = {}
        for rid, call in calls:
            with pytest.raises(grpc.RpcError) as err:
                call((("x-request-id", rid),))
            codes[rid] = err.value.code().name  # type: ignore[attr-defined]
    assert codes == {
        "t-invalid": "INVALID_ARGUMENT",
        "t-jwt": "INVALID_ARGUMENT",
        "t-anon": "UNAUTHENTICATED",
        "t-unknown": "NOT_FOUND",
        "t-stream": "INVALID_ARGUMENT",
    }
    by_id = {r["request_id"]: r for r in refusal_lines(info_log, "grpc")}
    assert set(by_id) == set(codes)
    assert {rid: by_id[rid].get("principal") for rid in codes} == {
        "t-invalid": "dev-tok",
        "t-jwt": "dev-jwt",
        "t-anon": None,
        "t-unknown": "dev-tok",
        "t-stream": "dev-tok",
    }
    assert by_id["t-invalid"]["field"] == "interfaces[0].wifi_rssi_dbm"
    assert "(principal dev-tok, device dev-tok)" in by_id["t-invalid"]["message"]
    assert token not in info_log.getvalue()


def test_a_device_hammering_with_bad_input_is_bounded_and_the_rest_counted(info_log: io.StringIO) -> None:
    app = create_app(Service.build(Settings()).plane)
    now = [100.0]

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            assert (await http.get("/healthz")).status_code == 200  # builds the middleware stack
            middleware = app.middleware_stack
            while not isinstance(middleware, RequestMetrics):
                middleware = middleware.app  # type: ignore[union-attr]
            middleware.refusals = RefusalLog(
                logging.getLogger("edgepath.rest"), rate_per_s=1.0, burst=5, clock=lambda: now[0]
            )
            for _ in range(100):
                assert (await http.post("/v1/recommendations", json={"device_id": 7})).status_code == 422
            now[0] += 1.0  # one more line's worth of time
            assert (await http.post("/v1/recommendations", json={"device_id": 8})).status_code == 422

    asyncio.run(run())
    lines = refusal_lines(info_log, "rest")
    assert len(lines) == 6
    assert all("suppressed" not in r for r in lines[:5])
    assert lines[5]["suppressed"] == 95 and "(95 more refusals not logged)" in lines[5]["message"]


def test_the_refusal_bound_refills_at_its_rate_and_stays_silent_below_info() -> None:
    now = [0.0]
    logger = logging.getLogger("edgepath.test.refusals")
    log = RefusalLog(logger, rate_per_s=2.0, burst=3, clock=lambda: now[0])
    logger.setLevel(logging.INFO)
    try:
        assert [log.admit() for _ in range(5)] == [True, True, True, False, False]
        assert log.suppressed == 2
        now[0] += 0.5  # one token back (2/s)
        assert [log.admit(), log.admit()] == [True, False]
        assert log.suppressed == 3
        logger.setLevel(logging.WARNING)  # the operator's switch: no line, nothing counted
        now[0] += 10.0
        assert not log.admit() and log.suppressed == 3
    finally:
        logger.setLevel(logging.NOTSET)
    with pytest.raises(ValueError):
        RefusalLog(logger, rate_per_s=0.0)
