"""An invalid request costs its device no rate-limit token, over REST, unary gRPC and the gRPC stream alike.

REST validated a Recommend or an outcome before taking its token; gRPC's Recommend, ReportOutcome and each
RecommendStream message took the token first, so a device whose agent sent a few malformed contexts (a modem
reporting RSRP +50 dBm) over gRPC was then rate-limited on its valid ones, and the same device over REST was not.
Real service on loopback, authentication off (each request's declared device pays), burst 3 refilled at 0.001
token/s: no token comes back within a test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from edge_security_helpers import TransportClient, context_body, proto_from_rest
from edgepath.wire import edgepath_pb2 as pb
from service_harness import RunningService, running_service

BURST = 3
INVALID = {"rest": "422", "grpc": "INVALID_ARGUMENT"}
LIMITED = {"rest": "429", "grpc": "RESOURCE_EXHAUSTED"}


def context(device_id: str, rsrp_dbm: float = -95.0) -> dict[str, Any]:
    """A valid WiFi + LTE context of ``device_id``, its LTE RSRP ``rsrp_dbm`` (dBm)."""
    body = context_body(device_id)
    body["interfaces"][1]["rsrp_dbm"] = rsrp_dbm
    return body


class Caller(TransportClient):
    """Recommend, ReportOutcome and (gRPC) a one-message RecommendStream: ``"OK"`` or the HTTP status / gRPC code
    name."""

    def _grpc(self, method: Any, message: Any) -> str:
        try:
            method(message, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            return exc.code().name  # type: ignore[attr-defined,no-any-return]
        return "OK"

    def recommend(self, body: dict[str, Any]) -> str:
        if self.transport == "rest":
            resp = self.http.post("/v1/recommendations", json=body)
            return "OK" if resp.status_code == 200 else str(resp.status_code)
        return self._grpc(self.stub.Recommend, proto_from_rest(body, pb.RecommendRequest()))

    def outcome(self, body: dict[str, Any]) -> str:
        if self.transport == "rest":
            resp = self.http.post("/v1/outcomes", json=body)
            return "OK" if resp.status_code == 200 else str(resp.status_code)
        return self._grpc(self.stub.ReportOutcome, pb.OutcomeRequest(**body))

    def stream_one(self, body: dict[str, Any]) -> str:
        """A stream of the one message ``body``: the code it ends with (``"OK"`` after its one reply)."""
        replies = self.stub.RecommendStream(
            iter([proto_from_rest(body, pb.RecommendRequest())]), timeout=self.timeout_s
        )
        try:
            assert len(list(replies)) == 1
        except grpc.RpcError as exc:
            return exc.code().name  # type: ignore[attr-defined,no-any-return]
        return "OK"


@pytest.fixture(scope="module")
def limited() -> Iterator[RunningService]:
    with running_service(rate_limit_burst=BURST, rate_limit_per_s=0.001) as svc:
        yield svc


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_invalid_requests_leave_the_devices_burst_whole(limited: RunningService, transport: str) -> None:
    """Five invalid Recommends (RSRP +50 dBm), five invalid outcomes (negative throughput) and, over gRPC, five
    streams of one invalid message: each refused as invalid, never as rate-limited; then the device's burst of 3
    valid Recommends is served whole and the 4th is rate-limited (the limit is live)."""
    device = f"modem-{transport}"
    with Caller(transport, limited) as caller:
        for _ in range(5):
            assert caller.recommend(context(device, rsrp_dbm=50.0)) == INVALID[transport]
            outcome = {"device_id": device, "decision_id": "d-1", "throughput_bps": -1.0}
            assert caller.outcome(outcome) == INVALID[transport]
            if transport == "grpc":
                assert caller.stream_one(context(device, rsrp_dbm=50.0)) == INVALID[transport]
        assert [caller.recommend(context(device)) for _ in range(BURST)] == ["OK"] * BURST
        assert caller.recommend(context(device)) == LIMITED[transport]


def test_a_valid_stream_message_still_takes_a_token(limited: RunningService) -> None:
    """The stream's token moved after validation, not away: a device's burst of 3 is spent by 3 streamed
    messages, and its next stream's message is rate-limited."""
    with Caller("grpc", limited) as caller:
        assert [caller.stream_one(context("phone-stream")) for _ in range(BURST)] == ["OK"] * BURST
        assert caller.stream_one(context("phone-stream")) == "RESOURCE_EXHAUSTED"
