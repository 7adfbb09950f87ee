"""Contract cases for the issue-3 sections (MLPM scheduler weights, congestion-control advice).

Run identically over REST and gRPC against a real service (tests/conftest.py). The requests carry
the new fields (subflow histories, application profile, kernel capabilities), which the agent's
client does not send yet, so the cases talk to the transports directly: httpx for REST, the
generated stub for gRPC, with protobuf's JSON mapping translating the enum spellings.
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
from google.rpc import error_details_pb2
from grpc_status import rpc_status

BASE: dict[str, Any] = {
    "device_id": "phone-3",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0},
    ],
}

T0_MS = 1_700_000_000_000.0


def history(name: str, rtts: list[float], tputs: list[float]) -> dict[str, Any]:
    return {
        "interface": name,
        "rtt_samples": [{"t_ms": T0_MS + 1000 * i, "rtt_ms": v} for i, v in enumerate(rtts)],
        "throughput_samples": [{"t_ms": T0_MS + 1000 * i, "throughput_bps": v} for i, v in enumerate(tputs)],
    }


def columns(name: str, rtts: list[float], tputs: list[float]) -> dict[str, Any]:
    """:func:`history` in the columnar form the agent sends (``rtt_t_ms``/``rtt_ms``, ``throughput_t_ms``/…)."""
    entry: dict[str, Any] = {"interface": name}
    if rtts:
        entry.update(rtt_t_ms=[T0_MS + 1000 * i for i in range(len(rtts))], rtt_ms=list(rtts))
    if tputs:
        entry.update(throughput_t_ms=[T0_MS + 1000 * i for i in range(len(tputs))], throughput_bps=list(tputs))
    return entry


def with_(**fields: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    body.update(fields)
    return body


class Caller:
    """Sends a REST-shaped body over one transport and returns a REST-shaped reply."""

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

    def recommend(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """(status, reply): status "ok" or the error (REST 422 → "invalid", gRPC INVALID_ARGUMENT → "invalid")."""
        if self.transport == "rest":
            resp = self.http.post("/v1/recommendations", json=body)
            if resp.status_code == 422:
                return "invalid", resp.json()
            assert resp.status_code == 200, resp.text
            return "ok", resp.json()
        msg = copy.deepcopy(body)
        for iface in msg["interfaces"]:
            iface["access_type"] = f"ACCESS_TYPE_{iface['access_type']}"
        if "application_profile" in msg:
            msg["application_profile"] = f"APPLICATION_PROFILE_{msg['application_profile']}"
        request = json_format.ParseDict(msg, pb.RecommendRequest())
        try:
            reply = self.stub.Recommend(request, timeout=5.0)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                status = rpc_status.from_call(exc)
                bad_request = error_details_pb2.BadRequest()
                assert status is not None and status.details[0].Unpack(bad_request)
                return "invalid", {"message": exc.details(), "field": bad_request.field_violations[0].field}
            raise
        out = json_format.MessageToDict(reply, preserving_proto_field_name=True)
        cong = out["congestion"]
        cong["profile"] = cong.get("profile", "APPLICATION_PROFILE_UNSPECIFIED").removeprefix("APPLICATION_PROFILE_")
        for key in ("mainline_fallback", "assumed_capabilities"):
            cong.setdefault(key, False)
        for key in ("mptcp_level", "subflow_level", "deciding_metric"):
            cong.setdefault(key, "")
        cong.setdefault("deciding_value", 0.0)
        return "ok", out


@pytest.fixture
def caller(service: Any, transport: str) -> Iterator[Caller]:
    c = Caller(transport, service)
    yield c
    c.close()


def weights_of(rec: dict[str, Any]) -> dict[str, float]:
    return {w["interface"]: w["weight"] for w in rec["scheduler"]["weights"]}


def test_plain_request_carries_both_sections(caller: Caller) -> None:
    status, rec = caller.recommend(copy.deepcopy(BASE))
    assert status == "ok"
    w = weights_of(rec)
    assert set(w) == {"wlan0", "wwan0"}
    assert w["wlan0"] == pytest.approx(0.5) and w["wwan0"] == pytest.approx(0.5)
    assert "uniform" in rec["scheduler"]["reason"]
    cong = rec["congestion"]
    assert cong["mainline_fallback"] is True and cong["assumed_capabilities"] is True
    assert cong["mptcp_level"] == ""
    assert cong["subflow_level"] in {"reno", "cubic"}
    assert "mainline" in cong["explanation"]
    assert "EdgePath testbed" in cong["source"]  # mainline: the testbed's measurement decides, not Table 3


def test_current_rtt_decides_without_histories(caller: Caller) -> None:
    body = copy.deepcopy(BASE)
    body["interfaces"][0]["rtt_ms"] = 20.0
    body["interfaces"][1]["rtt_ms"] = 80.0
    _, rec = caller.recommend(body)
    w = weights_of(rec)
    assert rec["scheduler"]["prioritised_subflow"] == "wlan0"
    assert w["wlan0"] > w["wwan0"]
    assert sum(w.values()) == pytest.approx(1.0)


def test_histories_forecasts_and_weights(caller: Caller) -> None:
    body = with_(
        application_profile="INTERACTIVE",
        subflow_histories=[
            history("wlan0", [40, 45, 50, 55, 60], [20e6] * 5),  # RTT rising 5 ms/s
            history("wwan0", [70, 66, 62, 58, 54], [20e6] * 5),  # RTT falling 4 ms/s
        ],
    )
    status, rec = caller.recommend(body)
    assert status == "ok"
    sched = rec["scheduler"]
    assert sched["priority"] == "latency"
    by = {w["interface"]: w for w in sched["weights"]}
    assert by["wlan0"]["rtt_slope_ms_per_s"] == pytest.approx(5.0)
    assert by["wlan0"]["rtt_forecast_ms"] == pytest.approx(65.0)
    assert by["wwan0"]["rtt_forecast_ms"] == pytest.approx(50.0)
    assert int(by["wwan0"]["rtt_samples"]) == 5
    assert sched["prioritised_subflow"] == "wwan0"
    assert sum(w["weight"] for w in sched["weights"]) == pytest.approx(1.0)


def test_coupled_kernel_gets_a_pair_with_deciding_metric(caller: Caller) -> None:
    kernel = {
        "available_congestion_controls": ["reno", "cubic", "bbr", "lia", "olia", "balia", "wvegas"],
        "allowed_congestion_controls": ["reno", "cubic", "bbr", "lia", "olia", "balia", "wvegas"],
        "mptcp_schedulers": ["default"],
        "path_managers": ["fullmesh"],
    }
    _, rec = caller.recommend(with_(application_profile="BULK", kernel=kernel))
    cong = rec["congestion"]
    assert (cong["mptcp_level"], cong["subflow_level"]) == ("balia", "reno")
    assert cong["deciding_metric"] == "throughput_avg_mbps"
    assert cong["deciding_value"] == pytest.approx(11.40)
    assert cong["mainline_fallback"] is False
    assert cong["profile"] == "BULK"
    assert "advisory" in rec["scheduler"]["reason"]  # only the default MPTCP scheduler


def test_mainline_kernel_falls_back_to_subflow_level(caller: Caller) -> None:
    kernel = {"available_congestion_controls": ["reno", "cubic", "bbr"], "allowed_congestion_controls": ["reno", "bbr"]}
    _, rec = caller.recommend(with_(application_profile="LOSS_SENSITIVE", kernel=kernel))
    cong = rec["congestion"]
    assert cong["mainline_fallback"] is True and cong["mptcp_level"] == ""
    assert cong["subflow_level"] in {"reno", "bbr"}
    assert cong["deciding_metric"] == "drop_rate_mean_seg_s"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"subflow_histories": [history("eth9", [10, 11, 12], [])]}, "subflow_histories"),
        ({"subflow_histories": [history("wlan0", [-1.0, 2.0, 3.0], [])]}, "rtt_ms"),
        ({"subflow_histories": [history("wlan0", [], [1e13])]}, "throughput_bps"),
        ({"subflow_histories": [history("wlan0", [1.0] * 65, [])]}, "rtt_samples"),
        ({"kernel": {"available_congestion_controls": ["cubic; rm -rf /"]}}, "available_congestion_controls"),
    ],
)
def test_bad_issue3_fields_are_invalid_and_named(caller: Caller, fields: dict[str, Any], named: str) -> None:
    status, reply = caller.recommend(with_(**fields))
    assert status == "invalid"
    text = str(reply)
    assert named in text


def test_nan_sample_rejected_over_rest(service: Any) -> None:
    # JSON has no NaN literal; Python's encoder emits one, which must be refused, not scored.
    body = '{"device_id": "phone-3", "interfaces": [{"name": "wlan0", "access_type": "WIFI"}], ' + (
        '"subflow_histories": [{"interface": "wlan0", "rtt_samples": [{"t_ms": 1, "rtt_ms": NaN}]}]}'
    )
    with httpx.Client(base_url=service.http_url, timeout=5.0) as http:
        resp = http.post("/v1/recommendations", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 422


def test_nan_sample_rejected_over_grpc(service: Any) -> None:
    msg = pb.RecommendRequest(
        device_id="phone-3",
        interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)],
        subflow_histories=[
            pb.SubflowHistory(interface="wlan0", rtt_samples=[pb.RttSample(t_ms=1, rtt_ms=float("nan"))])
        ],
    )
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.PathServiceStub(channel).Recommend(msg, timeout=5.0)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "rtt_ms" in (err.value.details() or "")


def test_columns_give_the_advice_sample_objects_give(caller: Caller) -> None:
    """The same samples as columns or as objects (and mixed: one quantity each way) are the same MLPM input."""
    rtts, tputs = ([40.0, 45.0, 50.0, 55.0, 60.0], [70.0, 66.0, 62.0, 58.0, 54.0]), ([20e6, 22e6, 25e6], [9e6] * 3)
    objects = [history("wlan0", rtts[0], tputs[0]), history("wwan0", rtts[1], tputs[1])]
    as_columns = [columns("wlan0", rtts[0], tputs[0]), columns("wwan0", rtts[1], tputs[1])]
    mixed = [
        {**columns("wlan0", rtts[0], []), "throughput_samples": history("wlan0", [], tputs[0])["throughput_samples"]},
        history("wwan0", rtts[1], tputs[1]),
    ]
    sections = []
    for histories in (objects, as_columns, mixed):
        status, rec = caller.recommend(with_(application_profile="INTERACTIVE", subflow_histories=histories))
        assert status == "ok"
        sections.append(rec["scheduler"])
    assert sections[0] == sections[1] == sections[2]
    by = {w["interface"]: w for w in sections[1]["weights"]}
    assert by["wlan0"]["rtt_slope_ms_per_s"] == pytest.approx(5.0) and int(by["wlan0"]["rtt_samples"]) == 5


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"interface": "wlan0", "rtt_t_ms": [T0_MS, T0_MS + 1000], "rtt_ms": [10.0]}, "rtt_t_ms"),
        ({**columns("wlan0", [10.0, 11.0], []), **history("wlan0", [10.0], [])}, "rtt_samples"),
        (columns("wlan0", [10.0, -1.0], []), "rtt_ms"),
        (columns("wlan0", [], [1e13]), "throughput_bps"),
        ({"interface": "wlan0", "throughput_t_ms": [-5.0], "throughput_bps": [1e6]}, "throughput_t_ms"),
        (columns("wlan0", [1.0] * 65, []), "rtt_"),
    ],
)
def test_bad_columns_are_invalid_and_named(caller: Caller, entry: dict[str, Any], named: str) -> None:
    status, reply = caller.recommend(with_(subflow_histories=[entry]))
    assert status == "invalid"
    assert named in str(reply)


@pytest.mark.parametrize(
    ("histories", "field"),
    [
        ([columns("wwan9", [10.0], [])], "subflow_histories[0].interface"),
        ([columns("wlan0", [10.0], []), columns("wlan0", [11.0], [])], "subflow_histories[1].interface"),
        ([{"interface": "wlan0", "rtt_t_ms": [T0_MS, T0_MS + 1000], "rtt_ms": [10.0]}], "subflow_histories[0].rtt_ms"),
        ([{**columns("wlan0", [10.0], []), **history("wlan0", [10.0], [])}], "subflow_histories[0].rtt_samples"),
    ],
)
def test_a_rule_across_members_names_its_field_over_both_transports(
    caller: Caller, histories: list[dict[str, Any]], field: str
) -> None:
    """A model validator's rule (a history naming an interface of the request, one form per quantity) names the
    member at fault, the same over REST (``field``) and gRPC (``BadRequest``), not the body or nothing."""
    status, reply = caller.recommend(with_(subflow_histories=histories))
    assert status == "invalid"
    assert reply["field"] == field


def test_nan_in_a_column_is_rejected_over_both_transports(service: Any) -> None:
    body = '{"device_id": "phone-3", "interfaces": [{"name": "wlan0", "access_type": "WIFI"}], ' + (
        '"subflow_histories": [{"interface": "wlan0", "rtt_t_ms": [1], "rtt_ms": [NaN]}]}'
    )
    with httpx.Client(base_url=service.http_url, timeout=5.0) as http:
        resp = http.post("/v1/recommendations", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 422 and "rtt_ms" in resp.text
    msg = pb.RecommendRequest(
        device_id="phone-3",
        interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)],
        subflow_histories=[pb.SubflowHistory(interface="wlan0", rtt_t_ms=[1.0], rtt_ms=[float("nan")])],
    )
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.PathServiceStub(channel).Recommend(msg, timeout=5.0)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "rtt_ms" in (err.value.details() or "")
