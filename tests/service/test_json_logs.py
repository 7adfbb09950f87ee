"""JSON logs joined to requests (issue 22, item 3): with ``log_format = "json"`` every line is one JSON
object, and the lines written while serving a REST request or a gRPC call carry its ``x-request-id``."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from edgepath.logs import new_request_id
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from service_harness import captured_json_log, running_service


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    with captured_json_log("DEBUG") as stream:
        yield stream


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_rest_and_grpc_error_lines_carry_the_request_id(json_log: io.StringIO) -> None:
    with running_service() as svc:
        bad = {"device_id": "phone-log", "interfaces": [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": 9}]}
        resp = httpx.post(f"{svc.http_url}/v1/recommendations", json=bad, headers={"x-request-id": "rest-req-7"})
        assert resp.status_code == 422 and resp.headers["x-request-id"] == "rest-req-7"
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
            request = pb.RecommendRequest(device_id="phone-log", interfaces=[pb.InterfaceContext(name="wlan0")])
            with pytest.raises(grpc.RpcError):
                pb_grpc.PathServiceStub(channel).Recommend(
                    request, timeout=5, metadata=(("x-request-id", "grpc-req-8"),)
                )
    records = lines(json_log)  # every line parses as JSON
    assert records and all({"time", "level", "logger", "message", "request_id"} <= set(r) for r in records)
    rest = [r for r in records if r["request_id"] == "rest-req-7"]
    assert rest and rest[0]["logger"] == "edgepath.rest" and rest[0]["status"] == 422
    assert rest[0]["field"] == "interfaces[0].wifi_rssi_dbm"
    grpc_lines = [r for r in records if r["request_id"] == "grpc-req-8"]
    assert grpc_lines and grpc_lines[0]["grpc_code"] == "INVALID_ARGUMENT"
    assert any(r["request_id"] is None for r in records)  # lines outside a call (start, stop) have none


def test_a_generated_request_id_is_a_uuid4_over_both_transports() -> None:
    """A call without an ``x-request-id`` gets a fresh version-4 UUID as 32 hex digits (``new_request_id``), in the
    REST answer's header and in the gRPC call's trailers, and it is the id the problem body names."""
    ids = {new_request_id() for _ in range(2000)}
    assert len(ids) == 2000
    for value in ids:
        parsed = uuid.UUID(hex=value)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and parsed.hex == value
    with running_service() as svc:
        bad = {"device_id": "phone-log", "interfaces": [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": 9}]}
        resp = httpx.post(f"{svc.http_url}/v1/recommendations", json=bad)
        generated = resp.headers["x-request-id"]
        assert resp.status_code == 422 and resp.json()["request_id"] == generated
        assert uuid.UUID(hex=generated).version == 4 and uuid.UUID(hex=generated).hex == generated
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
            request = pb.RecommendRequest(device_id="phone-log", interfaces=[pb.InterfaceContext(name="wlan0")])
            with pytest.raises(grpc.RpcError) as err:
                pb_grpc.PathServiceStub(channel).Recommend(request, timeout=5)
            trailer = dict(err.value.trailing_metadata())["x-request-id"]  # type: ignore[attr-defined]
            assert uuid.UUID(hex=trailer).version == 4 and trailer not in {generated} | ids


def test_a_handler_that_raises_answers_with_the_request_id_only_and_logs_its_traceback_under_it(
    json_log: io.StringIO,
) -> None:
    """A handler that raised (here the plane's outcome path, as a Redis ACL user without EVALSHA made it): REST
    answers a 500 problem (``application/problem+json``, the request id in the body and the header), gRPC
    ``UNKNOWN``; neither hands the client the exception's type or message, and the log has the traceback as a JSON
    line under the call's request id (the service's own, not uvicorn's "Exception in ASGI application" too, which
    it logged for every such request, unbounded). Before, REST answered ``text/plain`` "Internal Server Error" with
    no request id (the traceback in uvicorn's own format, not JSON) and gRPC "Unexpected <class 'RuntimeError'>:
    <message>"."""
    with running_service() as svc:

        async def report_outcome(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("internal detail: redis user edgepath may not run evalsha")

        svc.service.plane.report_outcome = report_outcome  # type: ignore[method-assign]
        report = {"device_id": "phone-log", "decision_id": "d-1", "throughput_bps": 1e6}
        resp = httpx.post(f"{svc.http_url}/v1/outcomes", json=report, headers={"x-request-id": "rest-boom-1"})
        assert resp.status_code == 500 and resp.headers["content-type"] == "application/problem+json"
        assert resp.headers["x-request-id"] == "rest-boom-1"
        problem = resp.json()
        assert problem["status"] == 500 and problem["request_id"] == "rest-boom-1" and problem["error"] == "internal"
        assert "evalsha" not in resp.text and "RuntimeError" not in resp.text
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
            request = pb.OutcomeRequest(device_id="phone-log", decision_id="d-1", throughput_bps=1e6)
            with pytest.raises(grpc.RpcError) as err:
                pb_grpc.PathServiceStub(channel).ReportOutcome(
                    request, timeout=5, metadata=(("x-request-id", "grpc-boom-2"),)
                )
        assert err.value.code() == grpc.StatusCode.UNKNOWN  # type: ignore[attr-defined]
        details = err.value.details()  # type: ignore[attr-defined]
        assert details.endswith("grpc-boom-2") and "evalsha" not in details and "RuntimeError" not in details
    records = lines(json_log)  # every line parses as JSON
    for request_id in ("rest-boom-1", "grpc-boom-2"):
        tracebacks = [r for r in records if r["request_id"] == request_id and "exc_info" in r]
        assert len(tracebacks) == 1, records
        assert tracebacks[0]["level"] == "ERROR" and "may not run evalsha" in tracebacks[0]["exc_info"]
    # the service's own line, once: uvicorn no longer logs the exception the app answered
    assert not [r for r in records if "Exception in ASGI application" in r["message"]], records


def test_the_default_handler_writes_to_stderr_as_it_is_at_each_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """``configure_logging()`` without a stream follows ``sys.stderr`` line by line: a command run in process with its
    stderr captured and closed (typer's CliRunner: ``serve`` refused after logging was configured) leaves no handler
    on a closed file ("--- Logging error --- ValueError: I/O operation on closed file" at the next line)."""
    import logging

    from edgepath.logs import configure_logging

    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    captured, after = io.StringIO(), io.StringIO()
    try:
        monkeypatch.setattr("sys.stderr", captured)
        configure_logging("INFO", "json")
        logging.getLogger("edgepath.test").info("while captured")
        captured.close()
        monkeypatch.setattr("sys.stderr", after)
        logging.getLogger("edgepath.test").info("after the capture closed")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)
    assert [json.loads(line)["message"] for line in after.getvalue().splitlines()] == ["after the capture closed"]
