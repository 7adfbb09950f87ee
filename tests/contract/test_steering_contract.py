"""Contract cases for the ATSSS steering section (issue 19), identical over REST and gRPC.

A real service per test (tests/conftest.py); REST with httpx, gRPC with the generated stub (protobuf's
JSON mapping). Sessions are put in the service's own state store here; the MEC 015 API that creates them
over HTTP has its own tests (tests/service/test_mts_api.py).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import grpc
import httpx
import pytest
from edgepath.state.base import MtsSession
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from google.protobuf import json_format

DEVICE = "phone-atsss"
BODY = {
    "device_id": DEVICE,
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60.0, "rtt_ms": 45.0, "loss": 0.01},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -95.0, "rtt_ms": 20.0, "loss": 0.001},
    ],
}


def recommend(transport: str, service: Any, body: dict[str, Any] = BODY) -> dict[str, Any]:
    """The recommendation REST-shaped (gRPC: proto JSON with field names; zero values filled in)."""
    if transport == "rest":
        resp = httpx.post(f"{service.http_url}/v1/recommendations", json=body, timeout=5.0)
        assert resp.status_code == 200, resp.text
        return resp.json()
    msg = copy.deepcopy(body)
    for iface in msg["interfaces"]:
        iface["access_type"] = f"ACCESS_TYPE_{iface['access_type']}"
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        reply = pb_grpc.PathServiceStub(channel).Recommend(json_format.ParseDict(msg, pb.RecommendRequest()), timeout=5)
    return json_format.MessageToDict(reply, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


def put_session(service: Any, session_id: str, info: dict[str, Any], created_at: float = 1.0) -> None:
    service.call(
        service.service.plane.store.put_mts_session(MtsSession(session_id, DEVICE, json.dumps(info), created_at))
    )


def session(mts_mode: int, request_type: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "appInsId": "app-1",
        "requestType": request_type,
        "flowFilter": [{"dstIp": "192.0.2.10", "dstPort": [443], "protocol": 6}],
        "qosD": {},
        "mtsMode": mts_mode,
        "trafficDirection": "00",
        **extra,
    }


def default_rule(rec: dict[str, Any]) -> dict[str, Any]:
    rules = rec["steering"]["rules"]
    assert rules[-1]["traffic_descriptor"]["match_all"] is True
    return rules[-1]


def test_every_recommendation_carries_a_default_mptcp_rule(service: Any, transport: str) -> None:
    rec = recommend(transport, service)
    rule = default_rule(rec)
    assert rule["steering_functionality"] == "MPTCP"
    assert rule["steering_mode"] in {"ACTIVE_STANDBY", "PRIORITY_BASED"}
    assert rule["intent"] == "DEFAULT"
    assert rule["rule_precedence"] == 255
    primary = rec["primary_path"]["interface"]
    first = next(a for a in rule["accesses"] if a["initial_subflow"])
    assert first["interface"] == primary  # the primary path opens the initial subflow
    assert {a["access"] for a in rule["accesses"]} == {"3GPP", "NON_3GPP"}
    assert rule["rtt_threshold_ms"] == pytest.approx(100.0)  # reward_latency_ms
    assert "TS 23.501" in rec["steering"]["source"]


@pytest.mark.parametrize(
    ("mts_mode", "mode"),
    [(0, "ACTIVE_STANDBY"), (1, "SMALLEST_DELAY"), (2, "LOAD_BALANCING"), (3, "REDUNDANT")],
)
def test_an_application_session_sets_the_default_rule(service: Any, transport: str, mts_mode: int, mode: str) -> None:
    put_session(service, "s-app", session(mts_mode))
    rule = default_rule(recommend(transport, service))
    assert rule["steering_mode"] == mode
    assert rule["mts_mode"] == mts_mode and rule["mts_session_id"] == "s-app"
    if mode == "SMALLEST_DELAY":
        assert rule["active_access"] == "3GPP"  # 20 ms < 45 ms
    if mode == "LOAD_BALANCING":
        assert rule["percentage_3gpp"] + rule["percentage_non_3gpp"] == 100
    if mode == "ACTIVE_STANDBY":  # low cost, no qosD: unmetered WiFi active
        assert (rule["active_access"], rule["standby_access"]) == ("NON_3GPP", "3GPP")
    if mode == "REDUNDANT":
        assert all(a.get("priority") in (None, "") for a in rule["accesses"])


def test_a_flow_session_adds_a_rule_before_the_default(service: Any, transport: str) -> None:
    put_session(service, "s-flow", session(1, request_type=1))
    rules = recommend(transport, service)["steering"]["rules"]
    assert len(rules) == 2
    flow, default = rules
    assert flow["rule_precedence"] < default["rule_precedence"]
    assert flow["traffic_descriptor"]["match_all"] is False
    assert flow["traffic_descriptor"]["destination_ip"] == "192.0.2.10"
    assert flow["traffic_descriptor"]["destination_ports"] == [443]
    assert flow["steering_mode"] == "SMALLEST_DELAY"
    assert default["intent"] == "DEFAULT"


def test_qos_session_reports_unmet_requirements(service: Any, transport: str) -> None:
    # 1 Gbit/s is not known to be reachable on either access: best available, minTpt unmet
    put_session(service, "s-qos", session(4, qosD={"minTpt": 1_000_000}))
    rule = default_rule(recommend(transport, service))
    assert rule["intent"] == "QOS"
    assert rule["unmet_qos"] == ["minTpt"]
    assert "no mode meets qosD" in rule["reason"]


def test_sessions_of_other_devices_do_not_steer(service: Any, transport: str) -> None:
    service.call(
        service.service.plane.store.put_mts_session(MtsSession("s-other", "someone-else", json.dumps(session(3)), 1.0))
    )
    assert default_rule(recommend(transport, service))["intent"] == "DEFAULT"


def test_the_agent_reads_the_same_plan_over_both_transports(service: Any, client: Any) -> None:
    """The agent's client (REST or gRPC) hands the applier a steering plan: the device's match-all rule."""
    from edgepath_agent import safety

    put_session(service, "s-ld", session(1))
    rec = client.recommend(copy.deepcopy(BODY))
    plan = safety.safe_decision(rec, {"wlan0", "wwan0"}).steering
    assert plan is not None
    assert (plan.mode, plan.initial, plan.backup) == ("SMALLEST_DELAY", "wwan0", ())
