"""ATSSS steering rules (``steering``): :mod:`edgepath.engines.steering` over the device's MEC 015 sessions.

Reads the primary-path decision (``decision.record.interface``), the MLPM section computed
just before (``decision.sections["scheduler"]``; recomputed when that adapter is not
registered), the request's interfaces (RTT, loss) and the device's MEC 015 sessions
(``StateStore.device_mts_sessions``, one read per recommendation). It also remembers the
access types the device reported (``StateStore.record_device_accesses``, written only when
they change or once an hour per replica), which MEC 015 capability info and session
validation read. Learns nothing from outcomes.

Rules, in precedence order (TS 24.193 §5.2.1: lower precedence value first): one per
``flowFilter`` entry of each flow-specific session (``requestType`` 1), oldest session
first, precedence 10, 11, … up to 254 (:data:`MAX_FLOW_RULES`; the MEC 015 API refuses a
device's filters beyond it, so only sessions stored before that bound can have more, and
those get no rule); then the device's default rule (match-all, precedence 255),
whose intent is the newest application-specific session's ``mtsMode`` (``requestType`` 0),
else DEFAULT.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from edgepath import types as ep_types
from edgepath.adapters.base import DecisionInput, EngineAdapter
from edgepath.adapters.mlpm import scheduler_advice
from edgepath.engines import steering
from edgepath.memo import bounded_put
from edgepath.settings import Settings
from edgepath.state.base import MtsSession

#: Precedence of the device's match-all rule, and of the first flow-specific rule (TS 24.193 §5.2.1: 0..255).
DEFAULT_PRECEDENCE = 255
FLOW_PRECEDENCE = 10
#: Flow-specific rules one device's advice carries at most, 245: one per precedence value from FLOW_PRECEDENCE to
#: just before the match-all rule's (TS 24.193 §5.2.1: one octet), each its own. The MEC 015 API refuses flow
#: filters beyond it per device (:data:`edgepath.rest.mts.MAX_DEVICE_FLOW_FILTERS`), which bounds the reply (every
#: filter maximal: ~190 kB over gRPC, under the 1 MiB message bound; 4,800 rules were 1.1 MB, never delivered).
MAX_FLOW_RULES = DEFAULT_PRECEDENCE - FLOW_PRECEDENCE
#: The match-all traffic descriptor of every device's default rule.
_MATCH_ALL = ep_types.TrafficDescriptor(match_all=True)
#: Access types are written again after this long even when unchanged (keeps the store's TTL fresh), s.
ACCESS_REFRESH_S = 3600.0


def path_states(request: ep_types.RecommendRequest, scheduler: ep_types.SchedulerAdvice) -> list[steering.PathState]:
    """The engine's view of each interface: MLPM weight, RTT (forecast, else reported), loss, throughput."""
    by_name = {w.interface: w for w in scheduler.weights}
    out = []
    for iface in request.interfaces:
        w = by_name.get(iface.name)
        # the first known of: forecast, current (MLPM), reported (the radio context); conditionals, not generators
        # over the candidates (issue 16: a generator costs ~1 µs, four per request)
        if w is None:
            weight, rtt, tpt = None, iface.rtt_ms, None
        else:
            weight = w.weight
            rtt = w.rtt_forecast_ms if w.rtt_forecast_ms is not None else w.rtt_ms
            if rtt is None:
                rtt = iface.rtt_ms
            tpt = w.throughput_forecast_bps if w.throughput_forecast_bps is not None else w.throughput_bps
        out.append(
            steering.PathState(
                interface=iface.name,
                access_type=iface.access_type,
                weight=weight,
                rtt_ms=None if rtt is None else max(float(rtt), 0.0),
                loss=iface.loss,
                throughput_bps=None if tpt is None else max(float(tpt), 0.0),
            )
        )
    return out


def qos_of(info: dict[str, Any]) -> steering.QosRequirement | None:
    """MEC 015 ``qosD`` of a stored session in SI units (None when absent)."""
    q = info.get("qosD")
    if not isinstance(q, dict):
        return None
    return steering.QosRequirement.from_mec(
        min_tpt=q.get("minTpt"),
        max_latency=q.get("maxLatency"),
        max_loss=q.get("maxLoss"),
        max_jitter=q.get("maxJitter"),
        priority=q.get("priority"),
    )


def traffic_descriptor(flow: dict[str, Any] | None, direction: str | None) -> ep_types.TrafficDescriptor:
    """Match-all (``flow`` None) or the IP 3-tuple etc. of one MEC 015 ``flowFilter`` entry."""
    if flow is None:
        return _MATCH_ALL
    return ep_types.TrafficDescriptor(
        match_all=False,
        source_ip=flow.get("sourceIp"),
        destination_ip=flow.get("dstIp"),
        source_ports=list(flow.get("sourcePort") or []),
        destination_ports=list(flow.get("dstPort") or []),
        protocol=flow.get("protocol"),
        dscp=flow.get("dscp"),
        flow_label=flow.get("flowlabel"),
        traffic_direction=direction,
    )


def steering_rule(
    d: steering.SteeringDecision,
    precedence: int,
    descriptor: ep_types.TrafficDescriptor,
    mts_mode: int | None = None,
    session_id: str | None = None,
) -> ep_types.SteeringRule:
    """The wire form of one engine decision (TS 24.193 §5.2.1 rule)."""
    mode = d.steering_mode
    active = d.access(steering.Priority.ACTIVE)
    if mode is steering.SteeringMode.SMALLEST_DELAY:
        active = next((a.access for a in d.accesses if a.initial_subflow), None)
    pct = d.percentages
    return ep_types.service_output(  # faster than model_construct, and checked (see service_output)
        ep_types.SteeringRule,
        {
            "rule_precedence": precedence,
            "traffic_descriptor": descriptor,
            "steering_functionality": d.steering_functionality,
            "steering_mode": mode.value,
            "active_access": None if active is None else active.value,
            "standby_access": _value(d.access(steering.Priority.STANDBY)),
            "high_priority_access": _value(d.access(steering.Priority.HIGH)),
            "low_priority_access": _value(d.access(steering.Priority.LOW)),
            "percentage_3gpp": pct.get(steering.Access.THREE_GPP),
            "percentage_non_3gpp": pct.get(steering.Access.NON_THREE_GPP),
            "rtt_threshold_ms": d.rtt_threshold_ms,
            "packet_loss_rate_threshold": d.packet_loss_rate_threshold,
            "accesses": [
                {
                    "access": a.access.value,
                    "interface": a.interface,
                    "access_type": a.access_type,
                    "priority": None if a.priority is None else a.priority.value,
                    "percentage": a.percentage,
                    "metered": a.metered,
                    "initial_subflow": a.initial_subflow,
                }
                for a in d.accesses
            ],
            "intent": d.intent.value,
            "mts_mode": mts_mode,
            "mts_session_id": session_id,
            "unmet_qos": list(d.unmet),
            "reason": d.reason,
        },
    )


def _value(a: steering.Access | None) -> str | None:
    return None if a is None else a.value


@dataclass(frozen=True)
class ParsedSession:
    """What a stored session means for the rules: its mtsMode, intent, qosD and (flow sessions) descriptors."""

    mts_mode: int
    intent: steering.Intent
    qos: steering.QosRequirement | None
    flows: tuple[ep_types.TrafficDescriptor, ...]


@functools.lru_cache(maxsize=4096)
def parsed_session(info: str) -> ParsedSession:
    """Parse a stored ``MtsSessionInfo`` once (cached by its JSON text, which includes its ``sessionId``)."""
    body = json.loads(info)
    mode = int(body["mtsMode"])
    flows: tuple[ep_types.TrafficDescriptor, ...] = ()
    if body.get("requestType") == 1:
        flows = tuple(traffic_descriptor(f, body.get("trafficDirection")) for f in body.get("flowFilter") or [])
    return ParsedSession(mode, steering.MTS_MODE_INTENT[mode], qos_of(body), flows)


def default_decision(
    request: ep_types.RecommendRequest,
    primary_interface: str,
    scheduler: ep_types.SchedulerAdvice,
    config: steering.SteeringConfig,
) -> steering.SteeringDecision:
    """The engine's decision behind the default rule of a device with no MEC 015 session (DEFAULT intent, no qosD)."""
    return steering.decide(path_states(request, scheduler), primary_interface, steering.Intent.DEFAULT, None, config)


def default_advice(d: steering.SteeringDecision) -> ep_types.SteeringAdvice:
    """The section of a device with no MEC 015 session: its default rule alone, from ``d``
    (:func:`default_decision`)."""
    rule = steering_rule(d, DEFAULT_PRECEDENCE, traffic_descriptor(None, None))
    return ep_types.SteeringAdvice(rules=[rule], source=steering.SOURCE)


def steering_advice(
    request: ep_types.RecommendRequest,
    primary_interface: str,
    scheduler: ep_types.SchedulerAdvice,
    sessions: list[MtsSession],
    config: steering.SteeringConfig,
) -> ep_types.SteeringAdvice:
    """Every ATSSS rule for the device (module docstring: precedence and sessions): at most :data:`MAX_FLOW_RULES`
    flow rules, then the match-all rule."""
    if not sessions:
        return default_advice(default_decision(request, primary_interface, scheduler, config))
    paths = path_states(request, scheduler)
    rules: list[ep_types.SteeringRule] = []
    default_intent = steering.Intent.DEFAULT
    default_qos: steering.QosRequirement | None = None
    default_mode: int | None = None
    default_session: str | None = None
    for s in sessions:
        p = parsed_session(s.info)
        if p.flows:  # flow-specific session: one rule per flowFilter entry, MAX_FLOW_RULES in all (precedence)
            # decided once for the session: the decision is a function of the paths and the session's intent and
            # qosD, not of the filter (decided per filter, a RecommendBatch of 256 items for a device of 245 filters
            # ran the engine 62,720 times, ~9 of its ~11 s, on the serving loop)
            d = steering.decide(paths, primary_interface, p.intent, p.qos, config)
            for descriptor in p.flows[: MAX_FLOW_RULES - len(rules)]:
                rules.append(steering_rule(d, FLOW_PRECEDENCE + len(rules), descriptor, p.mts_mode, s.session_id))
        else:  # the newest application-wide session wins
            default_intent, default_qos, default_mode, default_session = p.intent, p.qos, p.mts_mode, s.session_id
    d = steering.decide(paths, primary_interface, default_intent, default_qos, config)
    rules.append(steering_rule(d, DEFAULT_PRECEDENCE, traffic_descriptor(None, None), default_mode, default_session))
    return ep_types.SteeringAdvice(rules=rules, source=steering.SOURCE)


class SteeringAdapter(EngineAdapter):
    """``steering`` in every recommendation that asks for it (RTT threshold from ``reward_latency_ms``).

    A device without MEC 015 sessions gets only the default rule, a function of the primary path, its
    interfaces' access types and the MLPM weights. Its section is shared (issue 16; the section cost ~50 µs per
    decision, the largest stage of the breakdown once the bandit became fast): one bounded LRU keyed by
    :func:`~edgepath.engines.steering.default_rule_key`, what the engine's decision is a function of (equal keys,
    equal decisions), ~2 µs to compute where the decision takes ~16. An agent's MLPM weights move with every
    request, but the rule they lead to (which access is active or high priority, and why) seldom does, so the
    engine runs and the rule's model (and its gRPC form, ``edgepath.grpc.convert``) is built once per distinct
    rule, with or without subflow histories.

    A device with sessions gets its rules computed per request. The advice is immutable (frozen).
    """

    section = "steering"
    #: The plane computes MLPM's section (its adapter caches it per context) for a request that asks for steering
    #: without it (``RecommendRequest.sections``): cheaper than this adapter's own recomputation below.
    reads = ("scheduler",)

    def __init__(self, settings: Settings, cache_size: int = 4096) -> None:
        self.settings = settings
        self.config = steering.SteeringConfig(rtt_threshold_ms=settings.reward_latency_ms)
        # Plain dicts bounded by :func:`~edgepath.memo.bounded_put` (two lookups per decision): a dropped device's
        # access types are written again, a dropped rule is built again.
        self._recorded: dict[str, tuple[tuple[str, ...], float]] = {}
        self._recorded_max = 100_000
        self._by_rule_key: dict[tuple[object, ...], ep_types.SteeringAdvice] = {}
        self._cache_size = cache_size

    async def recommend(self, decision: DecisionInput) -> ep_types.SteeringAdvice:
        await self._record_accesses(decision)
        return self._advice(decision, await decision.store.device_mts_sessions(decision.request.device_id))

    async def recommend_batch(self, decisions: Sequence[DecisionInput]) -> list[ep_types.SteeringAdvice]:
        """:meth:`recommend` of every item of a ``RecommendBatch``, in order: the devices' sessions are read in one
        store call (``StateStore.devices_mts_sessions``)."""
        if not decisions:
            return []
        for decision in decisions:
            await self._record_accesses(decision)
        sessions = await decisions[0].store.devices_mts_sessions([d.request.device_id for d in decisions])
        return [self._advice(d, s) for d, s in zip(decisions, sessions, strict=True)]

    async def _record_accesses(self, decision: DecisionInput) -> None:
        """Remember the device's access types (written only when they change, or once per ACCESS_REFRESH_S)."""
        device_id = decision.request.device_id
        accesses = _sorted_accesses(decision.record.arms)  # the arm set: the request's distinct access types
        last = self._recorded.get(device_id)
        now = time.monotonic()
        if last is None or last[0] != accesses or now - last[1] > ACCESS_REFRESH_S:
            await decision.store.record_device_accesses(device_id, accesses)
            bounded_put(self._recorded, device_id, (accesses, now), self._recorded_max)

    def _advice(self, decision: DecisionInput, sessions: list[MtsSession]) -> ep_types.SteeringAdvice:
        request = decision.request
        scheduler = decision.sections.get("scheduler")
        if not isinstance(scheduler, ep_types.SchedulerAdvice):
            scheduler = scheduler_advice(request, self.settings)
        primary = decision.record.interface
        if sessions:
            return steering_advice(request, primary, scheduler, sessions, self.config)
        by_name = {w.interface: w.weight for w in scheduler.weights}
        paths = [(i.name, i.access_type, by_name.get(i.name)) for i in request.interfaces]
        rule_key = steering.default_rule_key(paths, primary, self.config)
        if rule_key is None:  # the primary path names no interface: the engine raises, saying so
            return default_advice(default_decision(request, primary, scheduler, self.config))
        advice = self._by_rule_key.get(rule_key)
        if advice is None:
            advice = default_advice(default_decision(request, primary, scheduler, self.config))
            bounded_put(self._by_rule_key, rule_key, advice, self._cache_size)
        return advice


@functools.cache
def _sorted_accesses(arms: tuple[str, ...]) -> tuple[str, ...]:
    """A decision record's arm set (access type names) sorted by name, as the store keeps a device's access types;
    one tuple per arm set (at most 2^4 - 1)."""
    return tuple(sorted(arms))
