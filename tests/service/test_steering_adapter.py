"""The steering adapter's shared default rule: one section object per distinct rule, equal to computing it afresh.

An agent's subflow histories move the MLPM weights with every request; the default ATSSS rule they lead to seldom
changes. The adapter shares one section per distinct engine decision (issue 16); these tests check that sharing
never changes what a device is told.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from edgepath.adapters.base import DecisionInput, cacheable_context
from edgepath.adapters.mlpm import scheduler_advice
from edgepath.adapters.steering import MAX_FLOW_RULES, SteeringAdapter, default_decision, steering_advice
from edgepath.engines import steering
from edgepath.settings import Settings
from edgepath.state.base import DecisionRecord, MtsSession
from edgepath.state.memory import MemoryStore
from edgepath.types import AccessType, InterfaceContext, RecommendRequest, SubflowHistory

SETTINGS = Settings()


def _request(wlan_tput_bps: float, lte_tput_bps: float, rtt_step_ms: float = 0.0) -> RecommendRequest:
    """Two interfaces with 10-sample histories; the throughputs set the MLPM weights (and so the rule)."""
    t_ms = [1000.0 * i for i in range(10)]

    def history(name: str, rtt_ms: float, tput_bps: float) -> SubflowHistory:
        return SubflowHistory(
            interface=name,
            rtt_t_ms=t_ms,
            rtt_ms=[rtt_ms + rtt_step_ms * i for i in range(10)],
            throughput_t_ms=t_ms,
            throughput_bps=[tput_bps * (1.0 + 0.01 * i) for i in range(10)],
        )

    return RecommendRequest(
        device_id="d-1",
        interfaces=[
            InterfaceContext(name="wlan0", access_type=AccessType.WIFI, rtt_ms=20.0),
            InterfaceContext(name="wwan0", access_type=AccessType.LTE, rtt_ms=45.0),
        ],
        subflow_histories=[history("wlan0", 20.0, wlan_tput_bps), history("wwan0", 45.0, lte_tput_bps)],
    )


def _input(request: RecommendRequest, interface: str = "wlan0") -> DecisionInput:
    record = DecisionRecord(
        decision_id="dec-1",
        device_id=request.device_id,
        model_version=1,
        policy="p",
        arms=("WIFI", "LTE"),
        arm_index=0,
        interface=interface,
        propensity=1.0,
        features=(),
        decided_at=0.0,
    )
    sections = {"scheduler": scheduler_advice(request, SETTINGS)}
    return DecisionInput(request=request, store=MemoryStore(), record=record, now_s=0.0, sections=sections)


def _fresh(decision: DecisionInput, sessions: list[MtsSession] | None = None) -> object:
    adapter = SteeringAdapter(SETTINGS)
    return steering_advice(
        decision.request, decision.record.interface, decision.sections["scheduler"], sessions or [], adapter.config
    )


def test_requests_whose_weights_differ_but_lead_to_one_rule_share_its_section() -> None:
    adapter = SteeringAdapter(SETTINGS)
    a, b = _input(_request(50e6, 1e6)), _input(_request(60e6, 1.5e6, rtt_step_ms=0.5))
    assert not cacheable_context(a.request)  # agent contexts: nothing is cached per context
    assert a.sections["scheduler"] != b.sections["scheduler"]  # the MLPM weights differ
    first, second = adapter._advice(a, []), adapter._advice(b, [])
    assert first is second
    assert first == _fresh(a) == _fresh(b)


def test_a_different_rule_gets_its_own_section() -> None:
    """The LTE access carries little MLPM weight in one request (Active-Standby) and much in the other
    (Priority-based): each device is told its own rule, the same as computed afresh."""
    adapter = SteeringAdapter(SETTINGS)
    standby, both = _input(_request(50e6, 1e6)), _input(_request(50e6, 50e6))
    first, second = adapter._advice(standby, []), adapter._advice(both, [])
    assert first is not second
    assert first.rules[0].steering_mode == steering.SteeringMode.ACTIVE_STANDBY.value
    assert second.rules[0].steering_mode == steering.SteeringMode.PRIORITY_BASED.value
    assert first == _fresh(standby)
    assert second == _fresh(both)
    assert adapter._advice(_input(_request(50e6, 1e6), interface="wwan0"), []) == _fresh(
        _input(_request(50e6, 1e6), interface="wwan0")
    )  # another primary path: another rule


def test_a_device_with_a_session_is_decided_per_request() -> None:
    adapter = SteeringAdapter(SETTINGS)
    decision = _input(_request(50e6, 1e6))
    session = MtsSession(
        session_id="s-1", device_id="d-1", info='{"sessionId": "s-1", "requestType": 0, "mtsMode": 1}', created_at=0.0
    )
    advice = adapter._advice(decision, [session])
    assert advice == _fresh(decision, [session])
    assert advice is not adapter._advice(decision, [])  # the default rule alone is another section
    assert advice.rules[0].mts_session_id == "s-1"


def test_a_device_gets_at_most_max_flow_rules_each_with_its_own_precedence() -> None:
    """Sessions stored before the MEC 015 API bounded a device's flow filters may hold more than MAX_FLOW_RULES (245):
    the oldest sessions' filters get the precedences 10..254 (TS 24.193 §5.2.1: one octet, 255 the match-all rule),
    the rest no rule (before, all of them were rules, the excess sharing precedence 254, and the reply could outgrow
    the gRPC message bound)."""
    decision = _input(_request(50e6, 1e6))

    def session(i: int, ports: range) -> MtsSession:
        flows = [{"dstPort": [p]} for p in ports]
        info = {"sessionId": f"s-{i}", "requestType": 1, "mtsMode": 1, "flowFilter": flows, "trafficDirection": "00"}
        return MtsSession(session_id=f"s-{i}", device_id="d-1", info=json.dumps(info), created_at=float(i))

    sessions = [session(i, range(1000 * i, 1000 * i + 16)) for i in range(MAX_FLOW_RULES // 16 + 2)]
    advice = SteeringAdapter(SETTINGS)._advice(decision, sessions)
    assert [r.rule_precedence for r in advice.rules] == [*range(10, 255), 255]
    ports = [r.traffic_descriptor.destination_ports[0] for r in advice.rules[:-1]]
    assert ports == [1000 * i + k for i in range(len(sessions)) for k in range(16)][:MAX_FLOW_RULES]
    assert advice.rules[-1].traffic_descriptor.match_all


def test_a_flow_sessions_rules_are_decided_once_per_session_not_per_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's decision is a function of the paths and the session's intent and qosD, not of its filters: two
    sessions of 16 filters each run it twice, and once more for the match-all rule (it ran once per filter: a
    RecommendBatch of 256 items for a device of 245 filters held the serving loop ~6 s, ~9 of ~11 s of its CPU in the
    engine). Every rule is the one decided per filter."""
    decision = _input(_request(50e6, 1e6))
    qos = {"minTpt": 1_000_000, "maxLatency": 20}
    sessions = [
        MtsSession(
            session_id=f"s-{i}",
            device_id="d-1",
            info=json.dumps(
                {"sessionId": f"s-{i}", "requestType": 1, "mtsMode": mode, "qosD": qos, "flowFilter": flows}
            ),
            created_at=float(i),
        )
        for i, (mode, flows) in enumerate([(3, [{"dstPort": [p]} for p in range(16)]), (1, [{"protocol": 17}] * 16)])
    ]
    expected = _fresh(decision, sessions)
    calls = []
    decide = steering.decide

    def counted(*args: object) -> steering.SteeringDecision:
        calls.append(args)
        return decide(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(steering, "decide", counted)
    advice = _fresh(decision, sessions)
    assert len(calls) == 3 and len(advice.rules) == 33  # type: ignore[attr-defined]
    assert advice == expected


@pytest.mark.parametrize(
    ("field", "value"),
    [("reason", "another reason"), ("rtt_threshold_ms", 99.0), ("unmet", ("maxLoss",))],
)
def test_decisions_are_equal_when_they_steer_alike_whatever_was_predicted(field: str, value: object) -> None:
    request = _request(50e6, 1e6)
    d = default_decision(request, "wlan0", scheduler_advice(request, SETTINGS), SteeringAdapter(SETTINGS).config)
    assert d.prediction is not None
    other_prediction = dataclasses.replace(d, prediction=steering.Prediction(rtt_ms=1.0, loss=0.0, throughput_bps=1.0))
    assert other_prediction == d and hash(other_prediction) == hash(d)
    assert dataclasses.replace(d, **{field: value}) != d


def test_the_rule_cache_is_bounded_and_a_dropped_rule_is_built_again() -> None:
    """``cache_size`` rules are kept; a further one drops the oldest, which is built again (equal) when asked."""
    adapter = SteeringAdapter(SETTINGS, cache_size=2)
    standby, both = _input(_request(50e6, 1e6)), _input(_request(50e6, 50e6))
    other_primary = _input(_request(50e6, 1e6), interface="wwan0")
    first = adapter._advice(standby, [])
    adapter._advice(both, [])
    assert adapter._advice(standby, []) is first  # still kept
    adapter._advice(other_primary, [])  # a third rule: the oldest (standby's) is dropped
    assert len(adapter._by_rule_key) == 2
    again = adapter._advice(standby, [])
    assert again is not first and again == first == _fresh(standby)


async def test_a_devices_access_types_are_written_when_they_change_and_sorted_by_name() -> None:
    adapter = SteeringAdapter(SETTINGS)
    adapter._recorded_max = 2
    store = MemoryStore()
    written: list[tuple[str, tuple[str, ...]]] = []

    async def record(device_id: str, access_types: tuple[str, ...]) -> None:
        written.append((device_id, access_types))

    store.record_device_accesses = record  # type: ignore[method-assign]
    decision = dataclasses.replace(_input(_request(50e6, 1e6)), store=store)
    await adapter._record_accesses(decision)
    await adapter._record_accesses(decision)  # unchanged: not written again
    assert written == [("d-1", ("LTE", "WIFI"))]
    wifi_only = dataclasses.replace(decision, record=dataclasses.replace(decision.record, arms=("WIFI",)))
    await adapter._record_accesses(wifi_only)
    assert written[-1] == ("d-1", ("WIFI",))
    for device in ("d-2", "d-3"):  # past the bound the oldest device is dropped, then written again when seen
        await adapter._record_accesses(
            dataclasses.replace(decision, request=decision.request.model_copy(update={"device_id": device}))
        )
    assert "d-1" not in adapter._recorded and len(adapter._recorded) == 2
    await adapter._record_accesses(decision)
    assert written[-1] == ("d-1", ("LTE", "WIFI"))
