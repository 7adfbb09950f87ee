"""Contract cases for Recommend / ReportOutcome, run identically over REST and gRPC against real servers."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest
from edgepath_agent.client import RestServiceClient, ServiceClient, ServiceError

CONTEXT: dict[str, Any] = {
    "device_id": "phone-1",
    "interfaces": [
        {
            "name": "wlan0",
            "access_type": "WIFI",
            "wifi_rssi_dbm": -61.0,
            "link_speed_mbps": 144.0,
            "frequency_mhz": 5180.0,
        },
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "sinr_db": 8.0, "cqi": 9},
    ],
}


def _has_non_finite(body: Any) -> bool:
    if isinstance(body, dict):
        return any(_has_non_finite(v) for v in body.values())
    if isinstance(body, list):
        return any(_has_non_finite(v) for v in body)
    return isinstance(body, float) and not math.isfinite(body)


def _call(client: ServiceClient, method: str, body: dict[str, Any]) -> dict[str, Any]:
    """Call through the client; NaN/Infinity bodies go raw over REST (httpx refuses to encode them)."""
    if isinstance(client, RestServiceClient) and _has_non_finite(body):
        path = "/v1/recommendations" if method == "recommend" else "/v1/outcomes"
        resp = httpx.post(client.url + path, content=json.dumps(body), headers={"content-type": "application/json"})
        detail = resp.json()
        raise ServiceError(resp.status_code, f"{detail.get('field')} {detail.get('message')}")
    result: dict[str, Any] = getattr(client, method)(body)
    return result


# The status each transport must give for an error kind.
CODES = {
    "rest": {"invalid": 422, "not_found": 404, "forbidden": 403},
    "grpc": {"invalid": "INVALID_ARGUMENT", "not_found": "NOT_FOUND", "forbidden": "PERMISSION_DENIED"},
}


def test_recommendation_is_a_complete_decision_record(client: ServiceClient) -> None:
    rec = client.recommend(CONTEXT)
    assert len(rec["decision_id"]) >= 20
    assert rec["model_version"] == 1
    assert rec["policy"] == "ridge_squarecb"  # the service's default policy (issue 15)
    primary = rec["primary_path"]
    assert (primary["interface"], primary["access_type"]) in {("wlan0", "WIFI"), ("wwan0", "LTE")}
    assert 0.0 < primary["propensity"] <= 1.0
    assert primary["arms"] == ["WIFI", "LTE"]
    assert rec["decided_at_unix_ms"] > 1_600_000_000_000


def test_decision_ids_are_unique(client: ServiceClient) -> None:
    ids = {client.recommend(CONTEXT)["decision_id"] for _ in range(20)}
    assert len(ids) == 20


def test_outcome_is_accepted_once_and_repeats_are_not_counted(client: ServiceClient, service: Any) -> None:
    rec = client.recommend(CONTEXT)
    outcome = {"device_id": "phone-1", "decision_id": rec["decision_id"], "throughput_bps": 40e6, "latency_ms": 30.0}
    first = client.report_outcome(outcome)
    assert first["accepted"] is True and first["duplicate"] is False and first["reward"] == 1
    again = client.report_outcome(outcome)
    assert again["accepted"] is False and again["duplicate"] is True
    assert service.service.metrics.outcomes.labels("new")._value.get() == 1
    assert service.service.metrics.outcomes.labels("duplicate")._value.get() == 1


def test_reward_is_zero_below_the_throughput_threshold_or_above_the_latency_one(client: ServiceClient) -> None:
    slow = client.report_outcome(
        {"device_id": "phone-1", "decision_id": client.recommend(CONTEXT)["decision_id"], "throughput_bps": 1e6}
    )
    laggy = client.report_outcome(
        {
            "device_id": "phone-1",
            "decision_id": client.recommend(CONTEXT)["decision_id"],
            "throughput_bps": 90e6,
            "latency_ms": 400.0,
        }
    )
    assert slow["reward"] == 0 and laggy["reward"] == 0


def test_unknown_decision_id_is_not_found(client: ServiceClient, transport: str) -> None:
    with pytest.raises(ServiceError) as err:
        client.report_outcome({"device_id": "phone-1", "decision_id": "no-such-decision", "throughput_bps": 1e6})
    assert err.value.code == CODES[transport]["not_found"]
    assert "decision_id" in err.value.message


def test_outcome_for_another_devices_decision_is_refused(client: ServiceClient, transport: str) -> None:
    rec = client.recommend(CONTEXT)
    with pytest.raises(ServiceError) as err:
        client.report_outcome({"device_id": "phone-2", "decision_id": rec["decision_id"], "throughput_bps": 1e6})
    assert err.value.code == CODES[transport]["forbidden"]


def test_every_batch_of_outcomes_publishes_a_new_model_version(client: ServiceClient, service: Any) -> None:
    # The fixture's batch size is 10.
    for i in range(20):
        rec = client.recommend(CONTEXT)
        client.report_outcome({"device_id": "phone-1", "decision_id": rec["decision_id"], "throughput_bps": 1e6 * i})
    published = service.call(service.service.registry.wait_for_version(3, timeout_s=20))
    assert published.version == 3
    assert service.service.trainer.outcomes_used == 20
    assert client.recommend(CONTEXT)["model_version"] == 3


def _with_interface(**fields: Any) -> dict[str, Any]:
    iface = {"name": "wwan0", "access_type": "LTE", **fields}
    return {"device_id": "phone-1", "interfaces": [CONTEXT["interfaces"][0], iface]}


BAD_REQUESTS = [
    pytest.param(_with_interface(rsrp_dbm=-200.0), "interfaces[1].rsrp_dbm", id="rsrp-below-range"),
    pytest.param(_with_interface(rsrq_db=10.0), "interfaces[1].rsrq_db", id="rsrq-above-range"),
    pytest.param(_with_interface(cqi=16), "interfaces[1].cqi", id="cqi-16"),
    pytest.param(_with_interface(rtt_ms=-1.0), "interfaces[1].rtt_ms", id="negative-rtt"),
    pytest.param(_with_interface(loss=1.5), "interfaces[1].loss", id="loss-above-1"),
    pytest.param(_with_interface(rtt_ms=float("nan")), "interfaces[1].rtt_ms", id="nan-rtt"),
    pytest.param(_with_interface(access_type="CARRIER_PIGEON"), "interfaces[1].access_type", id="bad-access-type"),
    pytest.param({"device_id": "phone-1", "interfaces": []}, "interfaces", id="no-interfaces"),
    pytest.param({"device_id": "", "interfaces": CONTEXT["interfaces"]}, "device_id", id="empty-device"),
    pytest.param(
        {"device_id": "phone-1", "interfaces": [CONTEXT["interfaces"][0], CONTEXT["interfaces"][0]]},
        "interfaces",
        id="duplicate-names",
    ),
]


@pytest.mark.parametrize(("request_body", "field"), BAD_REQUESTS)
def test_bad_context_is_rejected_naming_the_field(
    client: ServiceClient, transport: str, request_body: dict[str, Any], field: str
) -> None:
    if transport == "grpc" and field.endswith("access_type"):
        # The proto enum cannot carry an unknown name; send UNSPECIFIED (0) instead.
        request_body = _with_interface(access_type="UNSPECIFIED")
    with pytest.raises(ServiceError) as err:
        _call(client, "recommend", request_body)
    assert err.value.code == CODES[transport]["invalid"]
    assert field in err.value.message


@pytest.mark.parametrize(
    ("outcome", "field"),
    [
        pytest.param({"throughput_bps": -5.0}, "throughput_bps", id="negative-throughput"),
        pytest.param({"throughput_bps": 1e6, "loss": 2.0}, "loss", id="loss-2"),
        pytest.param({"throughput_bps": 1e6, "latency_ms": -3.0}, "latency_ms", id="negative-latency"),
        pytest.param({"throughput_bps": float("inf")}, "throughput_bps", id="infinite-throughput"),
    ],
)
def test_bad_outcome_is_rejected_naming_the_field(
    client: ServiceClient, transport: str, outcome: dict[str, Any], field: str
) -> None:
    rec = client.recommend(CONTEXT)
    with pytest.raises(ServiceError) as err:
        _call(client, "report_outcome", {"device_id": "phone-1", "decision_id": rec["decision_id"], **outcome})
    assert err.value.code == CODES[transport]["invalid"]
    assert field in err.value.message
    # The rejected outcome did not consume the decision: a valid one is still accepted.
    ok = client.report_outcome({"device_id": "phone-1", "decision_id": rec["decision_id"], "throughput_bps": 1e6})
    assert ok["accepted"] is True
