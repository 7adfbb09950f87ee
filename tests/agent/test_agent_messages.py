"""The agent's typed wire (issue 14, item 4): each transport's reply is parsed once into
:class:`edgepath_agent.messages.Recommendation`, which the safety checks and the applier consume as it is.

These tests fail if a second conversion path comes back: a client returning dicts, an applier that
re-parses a typed reply, ``json_format`` used outside messages.py, or a per-transport patch of enum
spellings (e.g. ``"ACCESS_TYPE_WIFI"`` reaching the applier over gRPC but ``"WIFI"`` over REST).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
from edgepath_agent import messages
from edgepath_agent.applier import Applier, DryRunBackend, Journal, NetState, Route
from edgepath_agent.client import connect
from edgepath_agent.messages import OutcomeAck, Recommendation, rest_spelling
from edgepath_agent.wire import edgepath_pb2 as pb
from service_harness import running_service

AGENT_SRC = Path(__file__).resolve().parents[2] / "client-agent" / "src" / "edgepath_agent"

REQUEST: dict[str, Any] = {
    "device_id": "dev-typed",
    "application_profile": "BULK",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60.0, "link_speed_mbps": 150.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -95.0, "rsrq_db": -11.0, "sinr_db": 9.0},
    ],
    "kernel": {"available_congestion_controls": ["reno", "cubic", "bbr"], "allowed_congestion_controls": ["reno"]},
}


@pytest.fixture(scope="module")
def service() -> Iterator[Any]:
    with running_service() as svc:
        yield svc


@pytest.mark.parametrize("scheme", ["grpc", "http"])
def test_both_transports_return_the_same_typed_reply(service: Any, scheme: str) -> None:
    url = service.grpc_url if scheme == "grpc" else service.http_url
    client = connect(url, timeout_s=5.0)
    try:
        rec = client.recommend(REQUEST)
        ack = client.report_outcome({"device_id": "dev-typed", "decision_id": rec.decision_id, "throughput_bps": 3e7})
    finally:
        client.close()
    assert type(rec) is Recommendation and type(ack) is OutcomeAck
    # REST spellings and Python types on both transports: no per-transport patching downstream.
    assert rec.primary_path.access_type in ("WIFI", "LTE") and rec.primary_path.arms == ("WIFI", "LTE")
    assert isinstance(rec.model_version, int) and rec.model_version == 1 and rec.decided_at_unix_ms > 1_600_000_000_000
    assert rec.congestion is not None and rec.congestion.profile == "BULK"
    assert rec.scheduler is not None and {w.interface for w in rec.scheduler.weights} == {"wlan0", "wwan0"}
    assert ack.decision_id == rec.decision_id and ack.accepted and not ack.duplicate
    # The REST JSON view reads the same reply (what the contract tests and scripts use).
    assert rec["primary_path"]["arms"] == ["WIFI", "LTE"] and rec["congestion"]["profile"] == "BULK"


def test_the_applier_acts_on_the_typed_reply_without_parsing_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recommendation.from_proto(
        pb.Recommendation(
            decision_id="d-typed",
            primary_path=pb.PrimaryPath(interface="wwan0", access_type=pb.ACCESS_TYPE_LTE),
            scheduler=pb.SchedulerAdvice(
                weights=[
                    pb.SubflowWeight(interface="wlan0", weight=0.0),
                    pb.SubflowWeight(interface="wwan0", weight=1.0),
                ]
            ),
            congestion=pb.CongestionAdvice(profile=pb.APPLICATION_PROFILE_BULK, subflow_level="cubic"),
        )
    )

    def no_second_parse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a typed reply was parsed a second time")

    monkeypatch.setattr(Recommendation, "model_validate", no_second_parse)
    routes = NetState(
        default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)),
        sysctls=(("net.ipv4.tcp_congestion_control", "reno"),),
    )
    backend = DryRunBackend(routes, {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}, out=None)
    applied = Applier(backend, Journal(), allowed_cc=("reno", "cubic")).apply(rec)
    # a 0.0 weight survives the proto (implicit presence) and makes wlan0 a backup subflow
    assert applied.primary == "wwan0" and applied.congestion_control == "cubic" and applied.backup == ("wlan0",)


@pytest.mark.parametrize("value", [pb.ACCESS_TYPE_NR, "ACCESS_TYPE_NR", "NR"])
def test_one_enum_normaliser_accepts_number_proto_name_and_rest_name(value: object) -> None:
    assert rest_spelling(pb.AccessType, value) == "NR"
    assert messages.proto_spelling(pb.AccessType, "NR") == "ACCESS_TYPE_NR"
    assert (
        messages.request_to_proto({"device_id": "d", "interfaces": [{"name": "x", "access_type": "NR"}]})
        .interfaces[0]
        .access_type
        == pb.ACCESS_TYPE_NR
    )


def test_a_reply_of_the_wrong_shape_names_the_field() -> None:
    with pytest.raises(pydantic.ValidationError, match=r"primary_path\.interface"):
        Recommendation.from_rest({"decision_id": "d", "primary_path": {"interface": ["wlan0"]}})


def test_json_format_and_enum_prefixes_live_in_messages_only() -> None:
    """One conversion per direction: nothing else in the agent converts between dicts and proto messages."""
    offenders = [
        str(p.relative_to(AGENT_SRC))
        for p in AGENT_SRC.rglob("*.py")
        if "wire" not in p.relative_to(AGENT_SRC).parts
        and p.name != "messages.py"
        and any(s in p.read_text() for s in ("MessageToDict", "ParseDict", 'removeprefix("ACCESS', "ACCESS_TYPE_"))
    ]
    assert offenders == []
