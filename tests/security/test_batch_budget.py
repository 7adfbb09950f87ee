"""A RecommendBatch costs one request token per decision, charged to that decision's principal, over both transports.

Before, a batch took one token of its caller whatever its size (up to 256 decisions), so one device could make
thousands of decisions a second past its budget and evict other devices' pending decisions. Now a device's batches
are limited as its single requests are (the same burst); a gateway's admin identity charges each item to the
device it names (and one token of its own per call), so it keeps working within its clients' budgets. Real
services on loopback; refill at 0.05 token/s, so no token comes back within a test.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from edge_security_helpers import TransportClient, issue_tokens, proto_from_rest, secured_service
from edgepath.wire import edgepath_pb2 as pb
from service_harness import RunningService, running_service

BURST = 30
CONTEXT: dict[str, Any] = {
    "device_id": "",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "cqi": 9},
    ],
}
OK = "ok"
LIMITED = {"rest": "429", "grpc": "RESOURCE_EXHAUSTED"}
INVALID = {"rest": "422", "grpc": "INVALID_ARGUMENT"}


def context(device_id: str) -> dict[str, Any]:
    return {**copy.deepcopy(CONTEXT), "device_id": device_id}


class Caller(TransportClient):
    """Recommend and RecommendBatch over one transport: (``"ok"`` or the HTTP status / gRPC code name, detail, retry
    hint in s or None)."""

    timeout_s = 10.0

    def _rest(self, path: str, body: dict[str, Any], token: str | None) -> tuple[str, str, float | None]:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        resp = self.http.post(path, json=body, headers=headers)
        if resp.status_code == 200:
            return OK, "", None
        retry = resp.headers.get("retry-after")
        problem = resp.json()
        return str(resp.status_code), f"{problem.get('field')}: {problem['detail']}", float(retry) if retry else None

    def _grpc(self, method: Any, message: Any, token: str | None) -> tuple[str, str, float | None]:
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        try:
            method(message, metadata=metadata, timeout=10.0)
        except grpc.RpcError as exc:
            trailers = {m.key: m.value for m in exc.trailing_metadata() or ()}  # type: ignore[attr-defined]
            retry = trailers.get("retry-after-ms")
            return exc.code().name, exc.details() or "", float(retry) / 1000 if retry else None  # type: ignore[attr-defined]
        return OK, "", None

    def one(self, device_id: str, token: str | None = None) -> tuple[str, str, float | None]:
        if self.transport == "rest":
            return self._rest("/v1/recommendations", context(device_id), token)
        return self._grpc(self.stub.Recommend, proto_from_rest(context(device_id), pb.RecommendRequest()), token)

    def batch(self, device_ids: list[str], token: str | None = None) -> tuple[str, str, float | None]:
        if self.transport == "rest":
            return self._rest("/v1/recommendations/batch", {"requests": [context(d) for d in device_ids]}, token)
        request = pb.RecommendBatchRequest()
        for d in device_ids:
            proto_from_rest(context(d), request.requests.add())
        return self._grpc(self.stub.RecommendBatch, request, token)


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    devices = [f"{name}-{transport}" for transport in ("rest", "grpc") for name in ("phone", "greedy")]
    return issue_tokens(tmp_path_factory.mktemp("batch-budget"), devices, admins=["gateway"])


@pytest.fixture(scope="module")
def secured(tokens: dict[str, Any]) -> Iterator[RunningService]:
    with secured_service(tokens, rate_limit_burst=BURST, rate_limit_per_s=0.05) as svc:
        yield svc


@pytest.fixture
def caller(secured: RunningService, transport: str) -> Iterator[Caller]:
    with Caller(transport, secured) as c:
        yield c


def test_a_devices_batches_spend_its_budget_as_its_single_requests_do(
    caller: Caller, tokens: dict[str, Any], transport: str
) -> None:
    """Burst 30: two batches of 20 of a device's own contexts are 20 decisions, then a refusal naming the batch
    with a retry hint; 10 more fill the burst; then a single request of the device is refused too."""
    device = f"phone-{transport}"
    token = tokens[device]
    assert caller.batch([device] * 20, token)[0] == OK
    status, detail, retry = caller.batch([device] * 20, token)
    assert status == LIMITED[transport], detail
    assert "batch of 20 decisions" in detail and retry is not None and retry > 0
    assert caller.batch([device] * 10, token)[0] == OK  # the 30 of the burst, all told
    status, detail, retry = caller.one(device, token)
    assert status == LIMITED[transport] and retry is not None and retry > 0, detail


def test_a_batch_larger_than_the_burst_is_refused_naming_requests(
    caller: Caller, tokens: dict[str, Any], transport: str
) -> None:
    """More of a device's decisions than its full bucket holds: no wait helps, so invalid input, not a rate limit;
    nothing was taken, the device is still served."""
    device = f"greedy-{transport}"
    status, detail, _ = caller.batch([device] * (BURST + 1), tokens[device])
    assert status == INVALID[transport] and "requests" in detail, detail
    assert caller.batch([device] * BURST, tokens[device])[0] == OK


def test_a_gateway_charges_each_item_to_the_device_it_names(
    caller: Caller, tokens: dict[str, Any], transport: str
) -> None:
    """The admin identity of a gateway: a batch of 40 clients is served though the burst is 30 (each client pays
    one token); a client named 30 times has spent its burst, and the next batch naming it is refused naming the
    batch; other clients are still served."""
    gateway = tokens["gateway"]
    clients = [f"client-{transport}-{i}" for i in range(40)]
    assert caller.batch(clients, gateway)[0] == OK
    assert caller.batch([clients[0]] * (BURST - 1), gateway)[0] == OK  # its 30th token
    status, detail, retry = caller.batch([clients[1], clients[0]], gateway)
    assert status == LIMITED[transport] and clients[0] in detail and "batch of 2 decisions" in detail, detail
    assert retry is not None and retry > 0
    assert caller.batch(clients[1:], gateway)[0] == OK


def test_without_authentication_each_declared_device_pays_for_its_items(transport: str) -> None:
    with running_service(rate_limit_burst=BURST, rate_limit_per_s=0.05) as svc, Caller(transport, svc) as c:
        assert c.batch(["open-1"] * BURST + ["open-2"])[0] == OK
        status, detail, _ = c.one("open-1")
        assert status == LIMITED[transport], detail
        assert c.one("open-2")[0] == OK
