"""gRPC authenticates before it parses, as REST does before it reads a body (``test_rest_auth_first.py``).

A caller without valid credentials learns nothing about its message and costs no parse: UNAUTHENTICATED on every
``PathService`` method whatever it sent (before, a unary call's bytes were decoded and validated first, and
malformed or invalid ones were answered INVALID_ARGUMENT naming their fields). With valid credentials the message is
judged as before, and the credential is verified once per call. A real service on loopback with a hashed-tokens
file; raw request bytes through identity serializers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from edge_security_helpers import grpc_unary, issue_tokens, secured_service
from edgepath.wire import edgepath_pb2 as pb
from grpc_status import rpc_status
from service_harness import RunningService

SERVICE = "/edgepath.v1.PathService/"
MALFORMED = b"\xff\xff\xff"  # no protobuf message at all
#: Per unary method: bytes that parse but fail validation (an empty device id; a batch of such items).
INVALID: dict[str, bytes] = {
    "Recommend": pb.RecommendRequest(device_id="").SerializeToString(),
    "RecommendBatch": pb.RecommendBatchRequest(requests=[pb.RecommendRequest(device_id="")] * 4).SerializeToString(),
    "ReportOutcome": pb.OutcomeRequest(device_id="", decision_id="", throughput_bps=-1.0).SerializeToString(),
}
#: A full batch (256 items) of invalid contexts: what an unauthenticated caller must not get parsed.
FULL_INVALID_BATCH = pb.RecommendBatchRequest(requests=[pb.RecommendRequest(device_id="")] * 256).SerializeToString()
CREDENTIALS: dict[str, tuple[tuple[str, str], ...]] = {
    "none": (),
    "unknown token": (("authorization", "Bearer ept_" + "A" * 43),),
    "not bearer": (("authorization", "Basic eDp5"),),
}


@pytest.fixture(scope="module")
def authed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningService, str]]:
    tokens = issue_tokens(tmp_path_factory.mktemp("grpc-auth-first"), ["dev-a"])
    with secured_service(tokens) as svc:
        yield svc, tokens["dev-a"]


@pytest.fixture
def channel(authed: tuple[RunningService, str]) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{authed[0].grpc_port}") as ch:
        yield ch


@pytest.mark.parametrize("method", sorted(INVALID))
@pytest.mark.parametrize("credential", sorted(CREDENTIALS))
def test_no_valid_credentials_is_unauthenticated_whatever_the_message(
    channel: grpc.Channel, method: str, credential: str
) -> None:
    payloads = (MALFORMED, INVALID[method]) + ((FULL_INVALID_BATCH,) if method == "RecommendBatch" else ())
    for payload in payloads:
        code, _, details, _ = grpc_unary(channel, SERVICE + method, payload, CREDENTIALS[credential])
        assert code is grpc.StatusCode.UNAUTHENTICATED, (payload[:8], code, details)
        assert "malformed" not in details and "device_id" not in details


@pytest.mark.parametrize("method", sorted(INVALID))
def test_with_valid_credentials_the_message_is_judged_as_before(
    channel: grpc.Channel, authed: tuple[RunningService, str], method: str
) -> None:
    metadata = (("authorization", f"Bearer {authed[1]}"),)
    code, _, details, _ = grpc_unary(channel, SERVICE + method, MALFORMED, metadata)
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "malformed" in details
    call = channel.unary_unary(SERVICE + method, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as err:
        call(INVALID[method], metadata=metadata, timeout=5.0)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(err.value)  # type: ignore[arg-type]
    assert status is not None and status.details, "a BadRequest naming the invalid fields"
    assert "device_id" in (err.value.details() or "")


def test_the_stream_refuses_a_caller_without_credentials_before_its_first_message(channel: grpc.Channel) -> None:
    for metadata in CREDENTIALS.values():
        for first in (MALFORMED, INVALID["Recommend"]):
            call = channel.stream_stream(SERVICE + "RecommendStream")(iter([first]), metadata=metadata, timeout=5.0)
            with pytest.raises(grpc.RpcError) as err:
                list(call)
            assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED, (first[:8], err.value.details())
            trailers = {m.key: m.value for m in err.value.trailing_metadata() or ()}  # type: ignore[attr-defined]
            assert trailers["message-index"] == "0"


def test_a_call_verifies_its_credential_once(
    channel: grpc.Channel, authed: tuple[RunningService, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Authentication first does not mean authentication twice: one verification per call (the CPU per call)."""
    svc, token = authed
    auth = svc.service.security.auth  # type: ignore[union-attr]
    calls: list[Any] = []
    verify = auth.authenticate

    def counted(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return verify(**kwargs)

    monkeypatch.setattr(auth, "authenticate", counted)
    metadata = (("authorization", f"Bearer {token}"),)
    request = pb.RecommendRequest(
        device_id="dev-a",
        interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI, wifi_rssi_dbm=-60.0)],
    )
    code, reply, details, _ = grpc_unary(channel, SERVICE + "Recommend", request.SerializeToString(), metadata)
    assert code is grpc.StatusCode.OK, details
    assert reply is not None
    decision_id = pb.Recommendation.FromString(reply).decision_id
    outcome = pb.OutcomeRequest(device_id="dev-a", decision_id=decision_id, throughput_bps=1e6)
    code, _, details, _ = grpc_unary(channel, SERVICE + "ReportOutcome", outcome.SerializeToString(), metadata)
    assert code is grpc.StatusCode.OK, details
    batch = pb.RecommendBatchRequest(requests=[request] * 3)
    code, _, details, _ = grpc_unary(channel, SERVICE + "RecommendBatch", batch.SerializeToString(), metadata)
    assert code is grpc.StatusCode.OK, details
    assert len(calls) == 3
