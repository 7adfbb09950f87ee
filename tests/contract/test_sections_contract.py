"""Contract cases for ``RecommendRequest.sections`` (issue 16: compute only the sections a caller acts on), run
identically over REST and gRPC against real servers: Recommend, RecommendBatch and (gRPC) RecommendStream.

A gateway deciding primary paths for its clients asks for ``["primary_path"]``; the engines of the sections
left out do not run and those sections are absent (REST ``null``, gRPC unset). An empty list asks for all.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from edgepath.engines.primary_path import DEFAULT_POLICY
from edgepath_agent.wire import edgepath_pb2 as pb
from edgepath_agent.wire import edgepath_pb2_grpc as pb_grpc
from google.protobuf import json_format
from service_harness import RunningService
from test_batch_contract import CODES, BatchClient, BatchError, context

ENGINE_SECTIONS = ("scheduler", "congestion", "server_selection", "steering")
T0_MS = 1_700_000_000_000.0


def asking(device_id: str, sections: list[str], *, histories: bool = False) -> dict[str, Any]:
    body = context(device_id)
    body["sections"] = sections
    if histories:  # an agent's context: MLPM computes on these
        body["subflow_histories"] = [
            {
                "interface": name,
                "rtt_t_ms": [T0_MS + 1000 * i for i in range(10)],
                "rtt_ms": [base + i for i in range(10)],
                "throughput_t_ms": [T0_MS + 1000 * i for i in range(10)],
                "throughput_bps": [2e7 - 1e5 * i for i in range(10)],
            }
            for name, base in (("wlan0", 20.0), ("wwan0", 45.0))
        ]
    return body


def present(rec: dict[str, Any]) -> set[str]:
    """The engine sections a reply carries (REST: not null; gRPC: set)."""
    return {name for name in ENGINE_SECTIONS if rec.get(name) is not None}


class Unary:
    """Recommend over one transport; replies as dicts with the REST field names (unset gRPC messages absent)."""

    def __init__(self, transport: str, service: RunningService) -> None:
        self.transport, self.service = transport, service

    def recommend(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.transport == "rest":
            resp = httpx.post(self.service.http_url + "/v1/recommendations", json=body, timeout=10.0)
            if resp.status_code != 200:
                detail = resp.json()
                raise BatchError(resp.status_code, f"{detail.get('field')} {detail.get('message')}")
            out: dict[str, Any] = resp.json()
            return out
        msg = copy.deepcopy(body)
        for iface in msg["interfaces"]:
            iface["access_type"] = f"ACCESS_TYPE_{iface['access_type']}"
        with grpc.insecure_channel(f"127.0.0.1:{self.service.grpc_port}") as channel:
            try:
                reply = pb_grpc.PathServiceStub(channel).Recommend(
                    json_format.ParseDict(msg, pb.RecommendRequest()), timeout=10.0
                )
            except grpc.RpcError as exc:
                raise BatchError(exc.code().name, exc.details() or "") from None
        return json_format.MessageToDict(reply, preserving_proto_field_name=True)


@pytest.fixture
def unary(service: RunningService, transport: str) -> Unary:
    return Unary(transport, service)


@pytest.fixture
def batch(service: RunningService, transport: str) -> BatchClient:
    return BatchClient(transport, service)


def decisions_counted(service: RunningService) -> float:
    m = service.service.metrics.decisions
    return float(sum(m.labels(DEFAULT_POLICY, arm)._value.get() for arm in ("WIFI", "LTE")))


def test_a_request_gets_the_sections_it_names_and_every_section_when_it_names_none(unary: Unary) -> None:
    every = unary.recommend(asking("sec-1", []))
    assert present(every) == {"scheduler", "congestion", "steering"}  # no content request: no server selection
    only_path = unary.recommend(asking("sec-1", ["primary_path"]))
    assert present(only_path) == set()
    assert only_path["primary_path"]["interface"] in {"wlan0", "wwan0"} and only_path["decision_id"]
    two = unary.recommend(asking("sec-1", ["congestion", "scheduler"]))
    assert present(two) == {"scheduler", "congestion"}
    assert two["congestion"]["explanation"] == every["congestion"]["explanation"]
    # steering reads MLPM's weights: asked alone, with an agent's histories, it is computed all the same
    steering = unary.recommend(asking("sec-1", ["steering"], histories=True))
    assert present(steering) == {"steering"}
    assert steering["steering"]["rules"]


def test_an_unknown_section_is_refused_naming_it_and_nothing_is_decided(
    unary: Unary, transport: str, service: RunningService
) -> None:
    before = decisions_counted(service)
    for sections, field in ((["primary_path", "qos"], "sections[1]"), (["Steering"], "sections[0]")):
        with pytest.raises(BatchError) as err:
            unary.recommend(asking("sec-2", sections))
        assert err.value.code == CODES[transport]["invalid"]
        assert field in err.value.message
    assert decisions_counted(service) == before


def test_a_primary_path_only_decision_takes_its_outcome(unary: Unary, service: RunningService) -> None:
    rec = unary.recommend(asking("sec-3", ["primary_path"]))
    ack = httpx.post(
        service.http_url + "/v1/outcomes",
        json={"device_id": "sec-3", "decision_id": rec["decision_id"], "throughput_bps": 2.5e7},
        timeout=10.0,
    ).json()
    assert ack["accepted"] is True and ack["duplicate"] is False


def test_each_batch_item_gets_the_sections_it_names(batch: BatchClient) -> None:
    recs = batch.recommend_batch(
        [
            asking("gw-1", ["primary_path"]),
            asking("gw-2", []),
            asking("gw-3", ["congestion"]),
            asking("gw-4", ["steering", "primary_path"], histories=True),
        ]
    )
    # gRPC's MessageToDict (always_print_fields_with_no_presence) prints no unset message field either
    assert [present(r) for r in recs] == [
        set(),
        {"scheduler", "congestion", "steering"},
        {"congestion"},
        {"steering"},
    ]
    assert len({r["decision_id"] for r in recs}) == 4


def test_a_batch_item_naming_an_unknown_section_refuses_the_batch(
    batch: BatchClient, transport: str, service: RunningService
) -> None:
    before = decisions_counted(service)
    with pytest.raises(BatchError) as err:
        batch.recommend_batch([asking("gw-5", []), asking("gw-6", ["primary_path", "qos"])])
    assert err.value.code == CODES[transport]["invalid"]
    assert "requests[1].sections[1]" in err.value.message
    assert decisions_counted(service) == before


@pytest.fixture
def stream_stub(service: RunningService) -> Iterator[pb_grpc.PathServiceStub]:
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        yield pb_grpc.PathServiceStub(channel)


def _proto(body: dict[str, Any]) -> pb.RecommendRequest:
    item = copy.deepcopy(body)
    for iface in item["interfaces"]:
        iface["access_type"] = f"ACCESS_TYPE_{iface['access_type']}"
    return json_format.ParseDict(item, pb.RecommendRequest())


def test_a_stream_message_gets_the_sections_it_names(stream_stub: pb_grpc.PathServiceStub) -> None:
    """gRPC only: REST has no stream (tests/contract/test_stream_contract.py)."""
    replies = list(
        stream_stub.RecommendStream(
            iter([_proto(asking("st-1", ["primary_path"])), _proto(asking("st-1", ["scheduler"]))]), timeout=10.0
        )
    )
    assert [r.HasField("scheduler") for r in replies] == [False, True]
    assert [r.HasField("congestion") or r.HasField("steering") for r in replies] == [False, False]
    with pytest.raises(grpc.RpcError) as err:
        list(stream_stub.RecommendStream(iter([_proto(asking("st-1", ["qos"]))]), timeout=10.0))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "sections[0]" in (err.value.details() or "")
