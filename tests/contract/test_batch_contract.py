"""Contract cases for RecommendBatch (issue 16), run identically over REST and gRPC against real servers.

The agent's client has no batch call (a gateway speaks it), so the cases call the wire directly:
``POST /v1/recommendations/batch`` with httpx, ``PathService.RecommendBatch`` with the generated stub.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import pytest
from edgepath.engines.primary_path import DEFAULT_POLICY
from edgepath.grpc.observe import MAX_FIELD_VIOLATIONS
from edgepath.security.auth import TokenFile
from edgepath.types import MAX_BATCH
from edgepath_agent.client import ServiceClient, connect
from edgepath_agent.wire import edgepath_pb2 as pb
from edgepath_agent.wire import edgepath_pb2_grpc as pb_grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from service_harness import RunningService, running_service

CONTEXT: dict[str, Any] = {
    "device_id": "phone-1",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "sinr_db": 8.0, "cqi": 9},
    ],
}
ACCESS = {"WIFI": pb.ACCESS_TYPE_WIFI, "LTE": pb.ACCESS_TYPE_LTE}
CODES = {
    "rest": {"invalid": 422, "forbidden": 403},
    "grpc": {"invalid": "INVALID_ARGUMENT", "forbidden": "PERMISSION_DENIED"},
}


def context(device_id: str, **lte: Any) -> dict[str, Any]:
    body = copy.deepcopy(CONTEXT)
    body["device_id"] = device_id
    body["interfaces"][1].update(lte)
    return body


class BatchError(Exception):
    def __init__(self, code: Any, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


@dataclass
class BatchClient:
    """RecommendBatch over one transport; replies as JSON-like dicts with the REST field names."""

    transport: str
    service: RunningService
    token: str | None = None

    def recommend_batch(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        if self.transport == "rest":
            resp = httpx.post(
                self.service.http_url + "/v1/recommendations/batch",
                json={"requests": requests},
                headers=headers,
                timeout=10.0,
            )
            if resp.status_code != 200:
                detail = resp.json()
                raise BatchError(resp.status_code, f"{detail.get('field')} {detail.get('message')}")
            recs: list[dict[str, Any]] = resp.json()["recommendations"]
            return recs
        msg = pb.RecommendBatchRequest()
        for r in requests:
            item = copy.deepcopy(r)
            for iface in item["interfaces"]:
                iface["access_type"] = ACCESS.get(iface["access_type"], 0)
            json_format.ParseDict(item, msg.requests.add())
        with grpc.insecure_channel(f"127.0.0.1:{self.service.grpc_port}") as channel:
            try:
                reply = pb_grpc.PathServiceStub(channel).RecommendBatch(
                    msg, timeout=10.0, metadata=tuple(headers.items())
                )
            except grpc.RpcError as exc:
                raise BatchError(exc.code().name, exc.details() or "") from None
        out = []
        for rec in reply.recommendations:
            d = json_format.MessageToDict(
                rec, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )
            p = d["primary_path"]
            p["access_type"] = p["access_type"].removeprefix("ACCESS_TYPE_")
            p["arms"] = [a.removeprefix("ACCESS_TYPE_") for a in p["arms"]]
            d["model_version"] = int(d["model_version"])
            out.append(d)
        return out


@pytest.fixture
def batch(service: RunningService, transport: str) -> BatchClient:
    return BatchClient(transport, service)


@pytest.fixture
def single(service: RunningService, transport: str) -> Iterator[ServiceClient]:
    c = connect(service.http_url if transport == "rest" else service.grpc_url)
    yield c
    c.close()


def test_one_complete_decision_record_per_device_in_request_order(batch: BatchClient, single: ServiceClient) -> None:
    devices = [f"cpe-client-{i}" for i in range(5)]
    recs = batch.recommend_batch([context(d) for d in devices])
    assert len(recs) == 5
    assert len({r["decision_id"] for r in recs}) == 5
    for device, rec in zip(devices, recs, strict=True):
        assert rec["model_version"] == 1 and rec["policy"] == DEFAULT_POLICY
        assert rec["primary_path"]["arms"] == ["WIFI", "LTE"]
        assert (rec["primary_path"]["interface"], rec["primary_path"]["access_type"]) in {
            ("wlan0", "WIFI"),
            ("wwan0", "LTE"),
        }
        assert 0.0 < rec["primary_path"]["propensity"] <= 1.0
        assert rec["scheduler"]["weights"] and rec["congestion"]["profile"]
        # Each decision is logged for its own device: that device's outcome is accepted, once.
        ack = single.report_outcome({"device_id": device, "decision_id": rec["decision_id"], "throughput_bps": 3e7})
        assert ack["accepted"] is True and ack["duplicate"] is False


def test_an_invalid_item_refuses_the_whole_batch_naming_it(
    batch: BatchClient, transport: str, service: RunningService
) -> None:
    before = service.service.metrics.decisions.labels(DEFAULT_POLICY, "WIFI")._value.get()
    before += service.service.metrics.decisions.labels(DEFAULT_POLICY, "LTE")._value.get()
    with pytest.raises(BatchError) as err:
        batch.recommend_batch([context("a"), context("b", rsrp_dbm=-200.0), context("c")])
    assert err.value.code == CODES[transport]["invalid"]
    assert "requests[1].interfaces[1].rsrp_dbm" in err.value.message
    after = service.service.metrics.decisions.labels(DEFAULT_POLICY, "WIFI")._value.get()
    after += service.service.metrics.decisions.labels(DEFAULT_POLICY, "LTE")._value.get()
    assert after == before, "nothing of a refused batch is decided"


def test_an_empty_or_oversized_batch_is_invalid(batch: BatchClient, transport: str) -> None:
    with pytest.raises(BatchError) as err:
        batch.recommend_batch([])
    assert err.value.code == CODES[transport]["invalid"] and "requests" in err.value.message
    with pytest.raises(BatchError) as err:
        batch.recommend_batch([context(f"d{i}") for i in range(257)])
    assert err.value.code == CODES[transport]["invalid"] and "requests" in err.value.message


@pytest.fixture(scope="module")
def authed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningService, str]]:
    tokens = TokenFile(tmp_path_factory.mktemp("batch") / "tokens.json")
    token = tokens.add("gateway-1")
    with running_service(auth_tokens_file=tokens.path) as svc:
        yield svc, token


def test_an_authenticated_caller_may_batch_only_for_itself(authed: tuple[RunningService, str], transport: str) -> None:
    svc, token = authed
    client = BatchClient(transport, svc, token)
    recs = client.recommend_batch([context("gateway-1"), context("gateway-1")])
    assert len(recs) == 2
    with pytest.raises(BatchError) as err:
        client.recommend_batch([context("gateway-1"), context("someone-else")])
    assert err.value.code == CODES[transport]["forbidden"]
    assert "requests[1].device_id" in err.value.message
    with pytest.raises(BatchError) as err:
        BatchClient(transport, svc, "ep_not-a-token").recommend_batch([context("gateway-1")])
    assert err.value.code in (401, "UNAUTHENTICATED")


def test_a_full_batch_of_invalid_items_is_invalid_argument_naming_the_first_over_grpc(
    authed: tuple[RunningService, str],
) -> None:
    """An authenticated RecommendBatch of as many items as a batch may hold, each with two invalid fields, over a
    channel with gRPC's default options: INVALID_ARGUMENT naming the first invalid field, its ``google.rpc.BadRequest``
    the first violations and how many more. (Listing all 512 put ~45 KB in the trailers, past the client's 16 KiB
    metadata limit: the client saw RESOURCE_EXHAUSTED "Stream removed (received metadata size exceeds hard
    limit)".)"""
    svc, token = authed
    request = _grpc_request(["gateway-1"] * MAX_BATCH)
    for item in request.requests:
        item.interfaces[0].wifi_rssi_dbm = 9.0
        item.interfaces[1].rsrp_dbm = -200.0
    with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.PathServiceStub(channel).RecommendBatch(
                request, timeout=10.0, metadata=(("authorization", f"Bearer {token}"),)
            )
    code, details = err.value.code(), err.value.details()  # type: ignore[attr-defined]
    assert code is grpc.StatusCode.INVALID_ARGUMENT, (code, details)
    assert (details or "").startswith("requests[0].interfaces[0].wifi_rssi_dbm: ")
    status = rpc_status.from_call(err.value)  # type: ignore[arg-type]
    assert status is not None
    bad = error_details_pb2.BadRequest()
    status.details[0].Unpack(bad)
    fields = [v.field for v in bad.field_violations]
    assert fields[:3] == [
        "requests[0].interfaces[0].wifi_rssi_dbm",
        "requests[0].interfaces[1].rsrp_dbm",
        "requests[1].interfaces[0].wifi_rssi_dbm",
    ]
    assert len(fields) == MAX_FIELD_VIOLATIONS + 1 and fields[-1] == ""
    assert (
        bad.field_violations[-1].description == f"{2 * MAX_BATCH - MAX_FIELD_VIOLATIONS} more invalid fields not listed"
    )


def _grpc_request(devices: list[str]) -> pb.RecommendBatchRequest:
    request = pb.RecommendBatchRequest()
    for device in devices:
        item = copy.deepcopy(context(device))
        for iface in item["interfaces"]:
            iface["access_type"] = ACCESS[iface["access_type"]]
        json_format.ParseDict(item, request.requests.add())
    return request


@pytest.mark.parametrize("native", [True, False], ids=["compiled", "python"])
def test_grpc_request_bytes_are_read_by_the_method_and_refused_when_they_do_not_parse(native: bool) -> None:
    """Recommend and RecommendBatch are handed their request's wire bytes (``takes_wire_bytes``), read by the
    compiled decoding or, with ``native_engines`` off, parsed by protobuf: bytes that are no message are
    INVALID_ARGUMENT "malformed" on both, nothing is decided, and the same server then answers valid calls (the
    replies written by the compiled encoding or by protobuf)."""
    with running_service(native_engines=native) as svc:
        counted = [svc.service.metrics.decisions.labels(DEFAULT_POLICY, a) for a in ("WIFI", "LTE")]
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
            batch = channel.unary_unary("/edgepath.v1.PathService/RecommendBatch")
            single = channel.unary_unary("/edgepath.v1.PathService/Recommend")
            for call in (batch, single):
                for garbage in (b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\x03\x0a\x02\xc3"):  # past the end, truncated
                    with pytest.raises(grpc.RpcError) as err:
                        call(garbage, timeout=10.0)
                    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                    assert "malformed" in (err.value.details() or "")
            assert sum(c._value.get() for c in counted) == 0, "nothing of a refused call is decided"
            request = _grpc_request(["a", "b"])
            reply = pb.RecommendBatchResponse.FromString(batch(request.SerializeToString(), timeout=10.0))
            one = pb.Recommendation.FromString(single(request.requests[0].SerializeToString(), timeout=10.0))
    for rec in (*reply.recommendations, one):
        assert rec.primary_path.interface in ("wlan0", "wwan0") and rec.decision_id
        assert rec.scheduler.weights and rec.HasField("congestion")
    assert len(reply.recommendations) == 2


def test_the_kept_self_declared_principals_hold_at_most_128_characters_of_an_id() -> None:
    """Authentication off, both transports keep one Principal per declared device (65,536 at most): an id as long as
    a message may carry is kept by its first 128 characters, the principal's, so the kept ids stay bounded in size."""
    from edgepath.security.auth import _declared_principal, declared_principal

    before = _declared_principal.cache_info().currsize
    long_id = "gw-" + "x" * 500_000
    principal = declared_principal(long_id)
    assert principal.device_id == long_id[:128]
    assert declared_principal(long_id[:128] + "another tail") is principal  # one entry, keyed by the 128 characters
    assert _declared_principal.cache_info().currsize == before + 1


def test_a_full_batch_reply_reaches_a_client_with_default_options_past_the_message_bound(transport: str) -> None:
    """256 devices with 16 interfaces of 64-character names each (a request under the default ``max_message_bytes``,
    1 MiB) to a client with its transport's default options (gRPC: 4 MiB received at most): every decision arrives.
    The reply (~1.1 MB as protobuf) outweighs the request bound, and the gRPC server once bounded its replies by it
    too: the batch was decided and recorded, then refused with RESOURCE_EXHAUSTED "Sent message larger than max" (under
    the chart's 256 KiB bound, already a batch of 256 two-interface devices, ~0.36 MB)."""
    names = [f"if{k}-".ljust(64, "x") for k in range(16)]
    requests = [
        {
            "device_id": f"cpe-client-{i}",
            "interfaces": [
                {"name": name, "access_type": ("WIFI", "LTE")[k % 2], "rtt_ms": 20.0} for k, name in enumerate(names)
            ],
        }
        for i in range(MAX_BATCH)
    ]
    with running_service() as svc:
        recs = BatchClient(transport, svc).recommend_batch(requests)
    assert [len(r["scheduler"]["weights"]) for r in recs] == [16] * MAX_BATCH
    assert {r["primary_path"]["interface"] for r in recs} <= set(names)
