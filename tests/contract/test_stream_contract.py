"""Contract cases for the bidirectional ``RecommendStream`` (issue 16), against real gRPC servers.

REST has no stream (HTTP/1.1 request/response; a gateway that batches uses ``POST
/v1/recommendations/batch``): the REST case checks that no stream route exists, every other case is
gRPC. The stream's replies are compared with unary ``Recommend`` replies for the same contexts: same
sections, same decision-record members, and a propensity that is the serving model's exact
probability of the chosen arm (the warm-started shipped model, so the probabilities are not uniform).

Errors end the stream with Recommend's status and details plus trailing metadata ``message-index``;
the replies already sent stand (their decisions are logged and accept outcomes).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from edgepath.admission import Admission
from edgepath.grpc.server import create_server
from edgepath.main import Service
from edgepath.security.auth import TokenFile
from edgepath.settings import Settings
from edgepath.types import RecommendRequest
from edgepath_agent.wire import edgepath_pb2 as pb
from edgepath_agent.wire import edgepath_pb2_grpc as pb_grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from service_harness import RunningService, running_service

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "primary-path-v2"
CONTEXT: dict[str, Any] = {
    "device_id": "phone-1",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0, "rtt_ms": 30.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "sinr_db": 8.0, "cqi": 9},
    ],
}
ACCESS = {"WIFI": pb.ACCESS_TYPE_WIFI, "LTE": pb.ACCESS_TYPE_LTE}
#: Members that differ between any two decisions (the primary path is a random draw: checked apart).
PER_DECISION = ("decision_id", "decided_at_unix_ms", "primary_path")


def context(device_id: str, **wifi: Any) -> dict[str, Any]:
    body = copy.deepcopy(CONTEXT)
    body["device_id"] = device_id
    body["interfaces"][0].update(wifi)
    return body


def proto(body: dict[str, Any]) -> pb.RecommendRequest:
    item = copy.deepcopy(body)
    for iface in item["interfaces"]:
        iface["access_type"] = ACCESS.get(iface["access_type"], 0)
    return json_format.ParseDict(item, pb.RecommendRequest())


def as_dict(rec: pb.Recommendation) -> dict[str, Any]:
    return json_format.MessageToDict(rec, preserving_proto_field_name=True)


def trailing(exc: grpc.RpcError) -> dict[str, str]:
    return {str(k): str(v) for k, v in exc.trailing_metadata() or ()}  # type: ignore[attr-defined]


def stream(port: int, bodies: list[dict[str, Any]], token: str | None = None) -> tuple[list[pb.Recommendation], Any]:
    """Send ``bodies`` on one RecommendStream; the replies received and the error that ended it (or None)."""
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    replies: list[pb.Recommendation] = []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.PathServiceStub(channel).RecommendStream(
            iter([proto(b) for b in bodies]), timeout=10.0, metadata=metadata
        )
        try:
            for reply in call:
                replies.append(reply)
        except grpc.RpcError as exc:
            return replies, exc
    return replies, None


def unary(port: int, body: dict[str, Any]) -> Any:
    """One Recommend; the reply, or the RpcError."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            return pb_grpc.PathServiceStub(channel).Recommend(proto(body), timeout=10.0)
        except grpc.RpcError as exc:
            return exc


def decisions(svc: RunningService) -> float:
    m = svc.service.metrics.decisions
    return sum(
        m.labels(p, a)._value.get() for p in (svc.service.plane.registry.current.model.policy_name,) for a in ACCESS
    )


@pytest.fixture
def warm() -> Iterator[RunningService]:
    """A service serving the shipped warm-start model (fitted: propensities are not 1/K), no outcomes."""
    with running_service(model_path=SHIPPED, batch_size=1000) as running:
        yield running


def test_rest_has_no_stream_route(service: RunningService, transport: str) -> None:
    """The stream is gRPC only: REST answers a stream path with 404 and its OpenAPI names none."""
    if transport == "grpc":
        replies, error = stream(service.grpc_port, [context("phone-1")])
        assert error is None and len(replies) == 1
        return
    assert httpx.post(service.http_url + "/v1/recommendations/stream", json=CONTEXT).status_code == 404
    paths = httpx.get(service.http_url + "/openapi.json").json()["paths"]
    assert not [p for p in paths if "stream" in p]


def test_stream_replies_match_unary_replies_member_for_member(warm: RunningService) -> None:
    bodies = [context(f"phone-{i}", wifi_rssi_dbm=-50.0 - 6 * i) for i in range(6)]
    replies, error = stream(warm.grpc_port, bodies)
    assert error is None and len(replies) == len(bodies)
    model = warm.service.plane.registry.current.model
    floor = model.config.propensity_floor
    for body, streamed in zip(bodies, replies, strict=True):
        single = unary(warm.grpc_port, body)
        s, u = as_dict(streamed), as_dict(single)
        assert {k: v for k, v in s.items() if k not in PER_DECISION} == {
            k: v for k, v in u.items() if k not in PER_DECISION
        }
        assert s["decision_id"] != u["decision_id"]
        probabilities = model.probabilities(RecommendRequest.model_validate(body).interfaces)
        assert len(set(probabilities.round(6))) > 1, "a fitted model: the propensities say which arm was drawn"
        for rec in (streamed, single):
            p = rec.primary_path
            assert list(p.arms) == [pb.ACCESS_TYPE_WIFI, pb.ACCESS_TYPE_LTE]
            expected = max(floor, float(probabilities[list(p.arms).index(p.access_type)]))
            assert p.propensity == pytest.approx(expected, rel=1e-12)
            assert p.interface == {pb.ACCESS_TYPE_WIFI: "wlan0", pb.ACCESS_TYPE_LTE: "wwan0"}[p.access_type]


def test_every_streamed_decision_is_logged_for_its_device(service: RunningService) -> None:
    devices = [f"agent-{i}" for i in range(4)]
    replies, error = stream(service.grpc_port, [context(d) for d in devices])
    assert error is None and len({r.decision_id for r in replies}) == 4
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = pb_grpc.PathServiceStub(channel)
        for device, rec in zip(devices, replies, strict=True):
            ack = stub.ReportOutcome(
                pb.OutcomeRequest(device_id=device, decision_id=rec.decision_id, throughput_bps=2e7)
            )
            assert ack.accepted and not ack.duplicate
        with pytest.raises(grpc.RpcError) as err:  # each decision belongs to its own device
            stub.ReportOutcome(
                pb.OutcomeRequest(device_id="agent-0", decision_id=replies[1].decision_id, throughput_bps=1)
            )
        assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED


def test_an_invalid_message_ends_the_stream_as_recommend_refuses_it(service: RunningService) -> None:
    bad = context("phone-1", wifi_rssi_dbm=40.0)
    single = unary(service.grpc_port, bad)
    assert isinstance(single, grpc.RpcError) and single.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "interfaces[0].wifi_rssi_dbm" in (single.details() or "")
    before = decisions(service)
    replies, error = stream(service.grpc_port, [context("phone-1"), bad, context("phone-1")])
    assert len(replies) == 1, "the reply before the invalid message stands"
    assert error is not None and error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == single.details()
    assert trailing(error)["message-index"] == "1"
    assert decisions(service) == before + 1, "nothing after the invalid message is decided"
    # Recommend's rich details too: the field violations of a google.rpc.BadRequest (the stream had none before)
    violations = bad_request_fields(single)
    assert [field for field, _ in violations] == ["interfaces[0].wifi_rssi_dbm"]
    assert bad_request_fields(error) == violations


def test_a_validators_own_message_reads_the_same_over_rest_grpc_and_the_stream(service: RunningService) -> None:
    """A rule of the service's own (two interfaces of one name) is worded as the service wrote it on every path:
    REST's problem ``errors``, Recommend's and RecommendStream's ``BadRequest``, without pydantic's
    ``"Value error, "``."""
    twice = context("phone-1")
    twice["interfaces"].append(copy.deepcopy(twice["interfaces"][0]))
    rest = httpx.post(f"{service.http_url}/v1/recommendations", json=twice, timeout=10.0).json()
    single = unary(service.grpc_port, twice)
    _, streamed = stream(service.grpc_port, [twice])
    assert rest["errors"] == [{"field": "interfaces", "message": "duplicate interface name 'wlan0'"}]
    for error in (single, streamed):
        assert isinstance(error, grpc.RpcError) and error.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == "interfaces: duplicate interface name 'wlan0'"
        assert bad_request_fields(error) == [("interfaces", "duplicate interface name 'wlan0'")]


def bad_request_fields(error: Any) -> list[tuple[str, str]]:
    """The ``(field, description)`` pairs of the ``google.rpc.BadRequest`` a failed call carries (none: [])."""
    status = rpc_status.from_call(error)
    out: list[tuple[str, str]] = []
    for detail in status.details if status is not None else ():
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request):
            out += [(v.field, v.description) for v in bad_request.field_violations]
    return out


def test_malformed_bytes_end_the_stream_with_invalid_argument(service: RunningService) -> None:
    good = proto(context("phone-1")).SerializeToString()
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        call = channel.stream_stream("/edgepath.v1.PathService/RecommendStream")(
            iter([good, b"\xff\xff\xff"]), timeout=10.0
        )
        replies = []
        with pytest.raises(grpc.RpcError) as err:
            for raw in call:
                replies.append(pb.Recommendation.FromString(raw))
    assert len(replies) == 1
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "malformed" in (err.value.details() or "")
    assert trailing(err.value)["message-index"] == "1"


@pytest.fixture(scope="module")
def authed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningService, str]]:
    tokens = TokenFile(tmp_path_factory.mktemp("stream") / "tokens.json")
    token = tokens.add("agent-1")
    with running_service(auth_tokens_file=tokens.path) as svc:
        yield svc, token


def test_the_stream_is_authenticated_and_each_message_must_be_the_callers(
    authed: tuple[RunningService, str],
) -> None:
    svc, token = authed
    replies, error = stream(svc.grpc_port, [context("agent-1"), context("agent-1")], token)
    assert error is None and len(replies) == 2
    replies, error = stream(svc.grpc_port, [context("agent-1"), context("someone-else")], token)
    assert len(replies) == 1
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED and "device_id" in error.details()
    assert trailing(error)["message-index"] == "1"
    replies, error = stream(svc.grpc_port, [context("agent-1")], "ep_not-a-token")
    assert replies == [] and error.code() is grpc.StatusCode.UNAUTHENTICATED


def test_each_message_takes_a_rate_limit_token() -> None:
    """Burst 3, refill far slower than the test: the 4th message of one device is refused with a retry hint."""
    with running_service(rate_limit_per_s=0.001, rate_limit_burst=3) as svc:
        replies, error = stream(svc.grpc_port, [context("phone-9")] * 5)
    assert len(replies) == 3
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    meta = trailing(error)
    assert meta["message-index"] == "3" and int(meta["retry-after-ms"]) > 0


def test_a_message_past_capacity_is_shed_with_a_retry_hint() -> None:
    """Admission per message: the first is served; then the loop-lag signal says overloaded (set on the real
    Admission object the server consults, as its monitor would) and the next message is shed."""
    service = Service.build(Settings())
    admission = Admission()

    async def run() -> grpc.aio.AioRpcError:
        server, _, port = create_server(service.plane, "127.0.0.1:0", admission=admission)
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = pb_grpc.PathServiceStub(channel).RecommendStream(timeout=10.0)
                await call.write(proto(context("phone-1")))
                await call.read()
                admission.lag_s = 10.0  # the monitor's measurement of a loop far past its lag bound
                await call.write(proto(context("phone-1")))
                try:
                    await call.read()
                except grpc.aio.AioRpcError as exc:
                    return exc
                raise AssertionError("a message past capacity was served")
        finally:
            await server.stop(None)

    error = asyncio.run(run())
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    meta = {str(k): str(v) for k, v in error.trailing_metadata() or ()}
    assert meta["message-index"] == "1" and meta["retry-after-ms"] == "100"
    assert service.plane.metrics.shed.labels("grpc")._value.get() == 1
