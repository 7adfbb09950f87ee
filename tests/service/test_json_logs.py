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
