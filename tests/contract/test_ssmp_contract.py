"""Contract cases for SSMP server selection (issue 4), identical over REST and gRPC.

A real service (tests/conftest.py) on loopback; the cases talk to the transports directly: httpx for
REST, the generated stub for gRPC (protobuf's JSON mapping turns the REST-shaped bodies into messages).
Server scores live in the service's state store: each test gets a fresh service.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from google.protobuf import json_format

MBPS = 1e6
INTERFACES = [
    {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60.0},
    {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -95.0},
]


def path(interface: str, rtt_ms: float, loss: float | None = None, bandwidth_bps: float | None = None) -> dict:
    p: dict[str, Any] = {"interface": interface, "rtt_ms_samples": [rtt_ms]}
    if loss is not None:
        p["loss"] = loss
    if bandwidth_bps is not None:
        p["bandwidth_bps"] = bandwidth_bps
    return p


def server(address: str, *paths: dict, dns: str = "wlan0") -> dict:
    return {"address": address, "dns_interface": dns, "paths": list(paths)}


def body(size_bytes: int, candidates: list[dict], **content: Any) -> dict[str, Any]:
    return {
        "device_id": "phone-ssmp",
        "interfaces": copy.deepcopy(INTERFACES),
        "content": {"expected_size_bytes": size_bytes, "candidates": candidates, **content},
    }


#: Section V-A (mice) and V-B (elephants) servers of Yang et al.
MICE_SERVERS = [
    server("10.0.0.3", path("wlan0", 30.0), path("wwan0", 30.0)),
    server("10.0.0.2", path("wlan0", 10.0), path("wwan0", 10.0)),
    server("10.0.0.1", path("wlan0", 15.0), path("wwan0", 5.0), dns="wwan0"),
]
ELEPHANT_SERVERS = [
    server("10.0.0.1", path("wlan0", 10.0, 0.0, 80 * MBPS), path("wwan0", 20.0, 0.0, 30 * MBPS)),
    server("10.0.0.2", path("wlan0", 10.0, 0.0, 40 * MBPS), path("wwan0", 20.0, 0.0, 20 * MBPS), dns="wwan0"),
]


class Caller:
    """REST-shaped bodies over one transport; replies REST-shaped; errors as ("invalid", message+field)."""

    def __init__(self, transport: str, service: Any) -> None:
        self.transport = transport
        if transport == "rest":
            self.http = httpx.Client(base_url=service.http_url, timeout=5.0)
        else:
            self.channel = grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}")
            self.stub = pb_grpc.PathServiceStub(self.channel)

    def close(self) -> None:
        if self.transport == "rest":
            self.http.close()
        else:
            self.channel.close()

    def _rest(self, route: str, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        resp = self.http.post(route, json=payload)
        if resp.status_code == 422:
            err = resp.json()
            return "invalid", {"text": f"{err['field']}: {err['message']}"}
        assert resp.status_code == 200, resp.text
        return "ok", resp.json()

    def _grpc(self, method: Any, message: Any) -> tuple[str, dict[str, Any]]:
        try:
            reply = method(message, timeout=5.0)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                return "invalid", {"text": exc.details()}
            raise
        return "ok", json_format.MessageToDict(reply, preserving_proto_field_name=True)

    def recommend(self, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if self.transport == "rest":
            return self._rest("/v1/recommendations", payload)
        msg = copy.deepcopy(payload)
        for iface in msg["interfaces"]:
            iface["access_type"] = f"ACCESS_TYPE_{iface['access_type']}"
        return self._grpc(self.stub.Recommend, json_format.ParseDict(msg, pb.RecommendRequest()))

    def report(self, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if self.transport == "rest":
            return self._rest("/v1/outcomes", payload)
        return self._grpc(self.stub.ReportOutcome, json_format.ParseDict(payload, pb.OutcomeRequest()))


@pytest.fixture
def caller(service: Any, transport: str) -> Iterator[Caller]:
    c = Caller(transport, service)
    yield c
    c.close()


def selection(rec: dict[str, Any]) -> dict[str, Any]:
    sel = dict(rec["server_selection"])
    sel.setdefault("candidate_index", 0)  # proto3 JSON omits zero values
    sel.setdefault("stale_servers", [])
    return sel


def test_no_content_no_server_selection(caller: Caller) -> None:
    payload = body(10, MICE_SERVERS)
    del payload["content"]
    status, rec = caller.recommend(payload)
    assert status == "ok"
    assert rec.get("server_selection") is None


def test_mice_tie_goes_to_the_shortest_path_and_names_the_initial_subflow(caller: Caller) -> None:
    status, rec = caller.recommend(body(100 * 1024, MICE_SERVERS))
    assert status == "ok"
    sel = selection(rec)
    assert sel["address"] == "10.0.0.1"
    assert sel["candidate_index"] == 2
    assert sel["flow_class"] == "MICE"
    assert sel["rule"] == "mice_min_rtt_tiebreak"
    assert sel["score"] == pytest.approx(10.0)
    assert sel["score_name"] == "mean_rtt_ms"
    assert sel["initial_subflow_interface"] == "wwan0"
    assert sel["stale_servers"] == ["10.0.0.3", "10.0.0.2", "10.0.0.1"]  # never measured: probe


def test_elephant_q_and_outcome_updates_the_stored_score(caller: Caller) -> None:
    status, rec = caller.recommend(body(300 * 2**20, ELEPHANT_SERVERS))
    assert status == "ok"
    sel = selection(rec)
    assert (sel["address"], sel["flow_class"], sel["rule"]) == ("10.0.0.1", "ELEPHANT", "elephant_q")
    assert sel["score"] == pytest.approx(95 * MBPS)  # 80 + (10/20)·30 Mbit/s

    # A completed transfer from server 2 measured 500 Mbit/s goodput (62.5 MB in 1 s): stored Q = 500 Mbit/s.
    transfer = {"address": "10.0.0.2", "size_bytes": 62_500_000, "duration_ms": 1000.0}
    outcome = {"device_id": "phone-ssmp", "decision_id": rec["decision_id"], "throughput_bps": 5e8}
    status, ack = caller.report({**outcome, "server_transfer": transfer})
    assert status == "ok" and ack["accepted"] is True
    # The same outcome again (with another measurement) is a duplicate: the score must not move.
    status, ack = caller.report({**outcome, "server_transfer": {**transfer, "size_bytes": 12_500_000}})
    assert status == "ok" and ack["duplicate"] is True

    status, rec = caller.recommend(body(300 * 2**20, ELEPHANT_SERVERS))
    sel = selection(rec)
    # Eq. 3 with α = 0.5: 0.5·50 (request) + 0.5·500 (stored) = 275 Mbit/s > 95 → server 2.
    assert sel["address"] == "10.0.0.2"
    assert sel["score"] == pytest.approx(275 * MBPS)
    assert sel["stale_servers"] == ["10.0.0.1"]
    assert sel["initial_subflow_interface"] == "wlan0"


def test_stored_per_path_b_and_p_fill_a_request_with_rtts_only(caller: Caller) -> None:
    """The device sends RTTs only; B and p come from the servers' stored transfers (issue 20)."""
    rtt_only = [
        server("10.0.0.1", path("wlan0", 10.0), path("wwan0", 20.0)),
        server("10.0.0.2", path("wlan0", 10.0), path("wwan0", 20.0), dns="wwan0"),
    ]
    status, rec = caller.recommend(body(300 * 2**20, rtt_only, default_interface="wwan0"))
    assert status == "ok"
    assert (selection(rec)["address"], selection(rec)["rule"]) == ("10.0.0.2", "elephant_dss_unmeasured")

    measured = {  # per-subflow B (bit/s) and p of one transfer from each server
        "10.0.0.1": [path("wlan0", 10.0, 0.0, 80 * MBPS), path("wwan0", 20.0, 0.0, 30 * MBPS)],
        "10.0.0.2": [path("wlan0", 10.0, 0.0, 40 * MBPS), path("wwan0", 20.0, 0.0, 20 * MBPS)],
    }
    for address, paths in measured.items():
        status, rec = caller.recommend(body(300 * 2**20, rtt_only, default_interface="wwan0"))
        transfer = {"address": address, "size_bytes": 50_000_000, "duration_ms": 8000.0, "paths": paths}
        outcome = {"device_id": "phone-ssmp", "decision_id": rec["decision_id"], "throughput_bps": 5e7}
        status, ack = caller.report({**outcome, "server_transfer": transfer})
        assert status == "ok" and ack["accepted"] is True

    status, rec = caller.recommend(body(300 * 2**20, rtt_only, default_interface="wwan0"))
    sel = selection(rec)
    assert (sel["address"], sel["rule"]) == ("10.0.0.1", "elephant_q")
    # Eq. 2 on the stored B (p = 0): 80 + (10/20)·30 = 95 Mbit/s new, smoothed (α = 0.5) with the stored 95.
    assert sel["score"] == pytest.approx(95 * MBPS)
    assert sel["stale_servers"] == []


def test_elephant_without_loss_keeps_the_default_server(caller: Caller) -> None:
    candidates = copy.deepcopy(ELEPHANT_SERVERS)
    del candidates[0]["paths"][0]["loss"]
    status, rec = caller.recommend(body(300 * 2**20, candidates, default_interface="wwan0"))
    assert status == "ok"
    sel = selection(rec)
    assert (sel["address"], sel["rule"]) == ("10.0.0.2", "elephant_dss_unmeasured")
    assert sel.get("score") is None


def test_single_candidate(caller: Caller) -> None:
    status, rec = caller.recommend(body(10, [ELEPHANT_SERVERS[1]]))
    assert status == "ok"
    assert selection(rec)["rule"] == "single_candidate"


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b["content"]["candidates"][0]["paths"][0].update(rtt_ms_samples=[-3.0]), "rtt_ms_samples"),
        (lambda b: b["content"]["candidates"][1]["paths"][1].update(loss=1.5), "candidates[1].paths[1].loss"),
        (lambda b: b["content"].update(candidates=[]), "content.candidates"),
        (lambda b: b["content"].update(expected_size_bytes=-1), "content.expected_size_bytes"),
        (lambda b: b["content"]["candidates"][0]["paths"][0].update(interface="eth9"), "content.candidates[0]"),
        (lambda b: b["content"]["candidates"][0]["paths"][0].update(bandwidth_bps=-1.0), "bandwidth_bps"),
    ],
    ids=["negative_rtt", "loss_above_1", "empty_candidates", "negative_size", "unknown_interface", "negative_b"],
)
def test_bad_content_is_rejected_naming_the_field(caller: Caller, mutate: Any, field: str) -> None:
    payload = body(300 * 2**20, copy.deepcopy(ELEPHANT_SERVERS))
    mutate(payload)
    status, err = caller.recommend(payload)
    assert status == "invalid"
    assert field in err["text"]


def test_bad_server_transfer_is_rejected_naming_the_field(caller: Caller) -> None:
    _, rec = caller.recommend(body(300 * 2**20, ELEPHANT_SERVERS))
    bad = {"address": "10.0.0.2", "size_bytes": 10, "duration_ms": 0.0}
    payload = {"device_id": "phone-ssmp", "decision_id": rec["decision_id"], "throughput_bps": 1e6}
    status, err = caller.report({**payload, "server_transfer": bad})
    assert status == "invalid"
    assert "server_transfer.duration_ms" in err["text"]
    # Nothing was recorded: the valid outcome is still accepted afterwards.
    status, ack = caller.report(payload)
    assert status == "ok" and ack["accepted"] is True
