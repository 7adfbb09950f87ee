"""ATSSS steering rules from EdgePath's decisions (pure engine: no I/O, no async).

3GPP ATSSS (Access Traffic Steering, Switching and Splitting) steers a flow between one
3GPP access (here: LTE, NR) and one non-3GPP access (here: WiFi, Ethernet). This module
turns the primary-path decision, the MLPM scheduler weights and the request's *intent* (a
MEC 015 ``mtsMode``, :class:`Intent`) into the access selection of one ATSSS rule:

* steering functionality: always ``MPTCP`` (TS 23.501 §5.32.6.2.1; PFCP Steering
  Functionality IE, TS 29.244 §8.2.124: 0 = ATSSS-LL, 1 = MPTCP);
* steering mode (TS 23.501 §5.32.8; TS 24.193 §5.2; PFCP Steering Mode IE, TS 29.244
  §8.2.125: 0 Active-Standby, 1 Smallest Delay, 2 Load Balancing, 3 Priority-based;
  Redundant is the Rel-18 addition of TS 23.501 §5.32.8, not encoded here);
* per access its PFCP Priority (TS 29.244 §8.2.127: Active, Standby, No Standby, High, Low)
  and, for Load-Balancing, its Weight in percent (TS 29.244 §8.2.126; the two sum to 100);
* thresholds (TS 23.501 §5.32.8, Rel-17 "threshold values": a maximum RTT, ms, and a maximum
  packet loss rate) for the threshold-based modes Active-Standby, Priority-based and
  Load-Balancing with fixed percentages; none for Smallest Delay and Redundant.

The mapping table (the one place it is decided)
-----------------------------------------------
``other`` is the access that is not the primary path's; ``w(other)`` its MLPM weight summed
over its interfaces. RTTs are the MLPM RTT forecast, else the interface's reported ``rtt_ms``.

================  ===============================  =================  ====================================
intent (mtsMode)  condition                        steering mode      accesses / numbers
================  ===============================  =================  ====================================
DEFAULT (none)    w(other) < ``standby_weight``    Active-Standby     active = primary path, standby = other
DEFAULT (none)    otherwise                        Priority-based     high = primary path, low = other
LOW_COST (0)      non-3GPP meets qosD              Active-Standby     active = non-3GPP (unmetered), standby = 3GPP
LOW_COST (0)      non-3GPP fails qosD / absent     Active-Standby     active = 3GPP, standby = non-3GPP (reason)
LOW_LATENCY (1)   —                                Smallest Delay     active = lower-RTT access (unknown: primary)
HIGH_THROUGHPUT   —                                Load-Balancing     percentages = MLPM weights per access;
(2)                                                                   initial subflow on the primary path
REDUNDANCY (3)    —                                Redundant          both accesses, no standby
QOS (4)           first candidate meeting qosD     (candidate's)      candidates by cost: Active-Standby on
                                                                      non-3GPP, Active-Standby on 3GPP,
                                                                      Smallest Delay, Load-Balancing,
                                                                      Redundant; none meets: the one meeting
                                                                      most requirements (ties: the later),
                                                                      with the unmet ones in ``reason``
any               only one access class offered    Active-Standby     active = it, No Standby
================  ===============================  =================  ====================================

Thresholds: ``rtt_threshold_ms`` = 2 × qosD ``maxLatency`` (qosD is one-way delay; ATSSS
thresholds are RTT), else ``config.rtt_threshold_ms`` (the service uses its reward's latency
bound); ``packet_loss_rate_threshold`` = qosD ``maxLoss`` as a fraction, else none.

Predicted outcomes for qosD (MEC 015 §7.2.5: ``minTpt`` kbit/s, ``maxLatency`` one-way in
10 ns, ``maxLoss`` as 10^-x, ``maxJitter`` 10 ns): one access → its RTT, loss, throughput;
Smallest Delay → the lower-RTT access; Load-Balancing → throughput summed, RTT of the slower
access, loss weighted by the percentages; Redundant → RTT of the faster access, loss the
product of both (independent losses), throughput of the slower. One-way latency is RTT / 2.
A requirement whose prediction is unknown counts as unmet (nothing is promised on no data);
jitter is not measured by EdgePath and is never met. Metered: 3GPP access is metered, non-3GPP
is not (MEC 015 ``metered``; an assumption stated here, as devices report no tariff).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from edgepath.types import CELLULAR, AccessType

#: Steering functionality of every rule EdgePath emits (TS 23.501 §5.32.6.2.1).
STEERING_FUNCTIONALITY = "MPTCP"
SOURCE = "3GPP TS 23.501 §5.32.8, TS 24.193 §5.2, TS 29.244 §8.2.124-127; ETSI GS MEC 015 v2.1.1 §7.2.5"


class Access(enum.StrEnum):
    """The two ATSSS accesses (TS 23.501 §5.32.1)."""

    THREE_GPP = "3GPP"
    NON_THREE_GPP = "NON_3GPP"


class SteeringMode(enum.StrEnum):
    """ATSSS steering modes (TS 23.501 §5.32.8; TS 24.193 §5.2)."""

    ACTIVE_STANDBY = "ACTIVE_STANDBY"
    SMALLEST_DELAY = "SMALLEST_DELAY"
    LOAD_BALANCING = "LOAD_BALANCING"
    PRIORITY_BASED = "PRIORITY_BASED"
    REDUNDANT = "REDUNDANT"


#: PFCP Steering Mode IE values (TS 29.244 §8.2.125); Redundant (Rel-18) has none here.
PFCP_STEERING_MODE: Mapping[SteeringMode, int | None] = {
    SteeringMode.ACTIVE_STANDBY: 0,
    SteeringMode.SMALLEST_DELAY: 1,
    SteeringMode.LOAD_BALANCING: 2,
    SteeringMode.PRIORITY_BASED: 3,
    SteeringMode.REDUNDANT: None,
}


class Priority(enum.StrEnum):
    """PFCP Priority IE values of an access (TS 29.244 §8.2.127)."""

    ACTIVE = "ACTIVE"
    STANDBY = "STANDBY"
    NO_STANDBY = "NO_STANDBY"
    HIGH = "HIGH"
    LOW = "LOW"


class Intent(enum.StrEnum):
    """What the application asked for: a MEC 015 ``mtsMode`` (§7.2.5), or nothing (DEFAULT)."""

    DEFAULT = "DEFAULT"
    LOW_COST = "LOW_COST"
    LOW_LATENCY = "LOW_LATENCY"
    HIGH_THROUGHPUT = "HIGH_THROUGHPUT"
    REDUNDANCY = "REDUNDANCY"
    QOS = "QOS"


#: MEC 015 ``mtsMode`` → intent (GS MEC 015 v2.1.1 §7.2.5, MtsSessionInfo.mtsMode).
MTS_MODE_INTENT: Mapping[int, Intent] = {
    0: Intent.LOW_COST,
    1: Intent.LOW_LATENCY,
    2: Intent.HIGH_THROUGHPUT,
    3: Intent.REDUNDANCY,
    4: Intent.QOS,
}


def access_of(access_type: AccessType) -> Access:
    """LTE and NR are 3GPP access; WiFi and Ethernet are non-3GPP (TS 23.501 §5.32.1)."""
    return Access.THREE_GPP if access_type in CELLULAR else Access.NON_THREE_GPP


@dataclass(frozen=True)
class PathState:
    """One interface as the engine sees it (None = unknown).

    ``weight``: MLPM share in [0, 1]; ``rtt_ms``: ms; ``loss``: fraction; ``throughput_bps``: bit/s.
    """

    interface: str
    access_type: AccessType
    weight: float | None = None
    rtt_ms: float | None = None
    loss: float | None = None
    throughput_bps: float | None = None


@dataclass(frozen=True)
class QosRequirement:
    """MEC 015 ``qosD`` in SI units (None = not required).

    ``min_throughput_bps`` bit/s, ``max_latency_ms`` one-way ms, ``max_loss`` fraction,
    ``max_jitter_ms`` ms, ``priority`` 0 low … 3 critical.
    """

    min_throughput_bps: float | None = None
    max_latency_ms: float | None = None
    max_loss: float | None = None
    max_jitter_ms: float | None = None
    priority: int | None = None

    @classmethod
    def from_mec(
        cls,
        *,
        min_tpt: int | None = None,
        max_latency: int | None = None,
        max_loss: int | None = None,
        max_jitter: int | None = None,
        priority: int | None = None,
    ) -> QosRequirement:
        """From MEC 015 §7.2.5 units: ``minTpt`` kbit/s, ``maxLatency``/``maxJitter`` 10 ns, ``maxLoss`` x of 10^-x."""
        return cls(
            min_throughput_bps=None if min_tpt is None else min_tpt * 1000.0,
            max_latency_ms=None if max_latency is None else max_latency * 1e-5,
            max_loss=None if max_loss is None else 10.0 ** (-max_loss),
            max_jitter_ms=None if max_jitter is None else max_jitter * 1e-5,
            priority=priority,
        )

    @property
    def empty(self) -> bool:
        """True when no requirement is set (priority alone requires nothing measurable)."""
        return (
            self.min_throughput_bps is None
            and self.max_latency_ms is None
            and self.max_loss is None
            and self.max_jitter_ms is None
        )


@dataclass(frozen=True)
class SteeringConfig:
    """``standby_weight``: MLPM share below which the other access is only a standby (DEFAULT intent).

    ``rtt_threshold_ms``: RTT threshold when qosD gives none (ms; None = no RTT threshold).
    """

    standby_weight: float = 0.2
    rtt_threshold_ms: float | None = None


@dataclass(frozen=True)
class AccessSelection:
    """One access of the rule: its interface, PFCP priority and (Load-Balancing) weight in percent."""

    access: Access
    interface: str
    access_type: AccessType
    priority: Priority | None
    percentage: int | None
    metered: bool
    initial_subflow: bool


@dataclass(frozen=True)
class Prediction:
    """Predicted outcome of a mode: RTT ms, loss fraction, throughput bit/s (None = unknown)."""

    rtt_ms: float | None
    loss: float | None
    throughput_bps: float | None


@dataclass(frozen=True)
class SteeringDecision:
    """The access selection descriptor of one ATSSS rule (TS 24.193 §5.2) and why.

    Equality and hash leave out ``prediction``: two decisions are equal when they steer alike (mode, accesses,
    thresholds, reason, unmet requirements), whatever outcome was predicted on the way. The service shares one rule
    object between equal decisions (``edgepath.adapters.steering``, issue 16).
    """

    steering_mode: SteeringMode
    accesses: tuple[AccessSelection, ...]
    intent: Intent
    reason: str
    rtt_threshold_ms: float | None = None
    packet_loss_rate_threshold: float | None = None
    prediction: Prediction | None = field(default=None, compare=False)
    unmet: tuple[str, ...] = field(default=())
    steering_functionality: str = STEERING_FUNCTIONALITY

    def access(self, priority: Priority) -> Access | None:
        """The access holding ``priority`` (e.g. the active one), or None."""
        return next((a.access for a in self.accesses if a.priority is priority), None)

    @property
    def percentages(self) -> dict[Access, int]:
        """Load-Balancing split in percent per access (empty for other modes)."""
        return {a.access: a.percentage for a in self.accesses if a.percentage is not None}


@dataclass(frozen=True)
class _Group:
    access: Access
    interface: str  # the representative interface of this access
    access_type: AccessType
    weight: float | None
    rtt_ms: float | None
    loss: float | None
    throughput_bps: float | None


#: One path as :func:`default_rule_key` and :func:`_representative` read it: ``(interface, access_type, MLPM
#: weight or None)``.
PathWeight = tuple[str, AccessType, float | None]


def _groups(paths: Sequence[PathState], primary_interface: str) -> dict[Access, _Group]:
    """One representative per access: the primary path's interface, else the highest MLPM weight."""
    by_access: dict[Access, list[PathState]] = {}
    for p in paths:
        by_access.setdefault(access_of(p.access_type), []).append(p)
    out: dict[Access, _Group] = {}
    for access, ps in by_access.items():
        if len(ps) == 1:  # the common case, one interface per access
            rep, weight = ps[0], ps[0].weight
        else:
            i, weight = _representative([(p.interface, p.access_type, p.weight) for p in ps], primary_interface)
            rep = ps[i]
        out[access] = _Group(access, rep.interface, rep.access_type, weight, rep.rtt_ms, rep.loss, rep.throughput_bps)
    return out


def _representative(ps: Sequence[PathWeight], primary_interface: str) -> tuple[int, float | None]:
    """The interface standing for one access (its index in ``ps``) and the access's MLPM weight: the primary path's
    interface, else the highest weight (unknown ranks below 0; the first of equals); the weight is the sum of the
    known ones (None: none known)."""

    def weight_of(k: int) -> float:
        w = ps[k][2]
        return -1.0 if w is None else w

    i = next((k for k, p in enumerate(ps) if p[0] == primary_interface), None)
    if i is None:
        i = max(range(len(ps)), key=weight_of)
    known = [p[2] for p in ps if p[2] is not None]
    return i, sum(known) if known else None


def _percentages(first: _Group, second: _Group) -> tuple[int, int]:
    """Whole percentages summing to 100 from the two weights (unknown weights: 50/50)."""
    w1, w2 = first.weight, second.weight
    if w1 is None or w2 is None or w1 + w2 <= 0.0:
        return 50, 50
    p1 = round(100.0 * w1 / (w1 + w2))
    return p1, 100 - p1


def _predict(mode: SteeringMode, groups: Sequence[_Group], percentages: Sequence[int] = ()) -> Prediction:
    if len(groups) == 1 or mode in (SteeringMode.ACTIVE_STANDBY, SteeringMode.PRIORITY_BASED):
        g = groups[0]
        return Prediction(g.rtt_ms, g.loss, g.throughput_bps)
    a, b = groups[0], groups[1]
    if mode is SteeringMode.SMALLEST_DELAY:
        g = _lower_rtt(a, b)
        return Prediction(g.rtt_ms, g.loss, g.throughput_bps)
    rtts = [x for x in (a.rtt_ms, b.rtt_ms) if x is not None]
    both_rtt = len(rtts) == 2
    if mode is SteeringMode.LOAD_BALANCING:
        tpts = [x for x in (a.throughput_bps, b.throughput_bps) if x is not None]
        pa, pb = percentages if percentages else (50, 50)
        loss = None if a.loss is None or b.loss is None else (pa * a.loss + pb * b.loss) / 100.0
        return Prediction(max(rtts) if both_rtt else None, loss, sum(tpts) if tpts else None)
    # Redundant: every packet on both accesses
    loss = None if a.loss is None or b.loss is None else a.loss * b.loss
    tpt = None if a.throughput_bps is None or b.throughput_bps is None else min(a.throughput_bps, b.throughput_bps)
    return Prediction(min(rtts) if rtts else None, loss, tpt)


def _lower_rtt(a: _Group, b: _Group) -> _Group:
    """The group with the lower known RTT; ``a`` (the primary path's) when either is unknown or tied."""
    if a.rtt_ms is None or b.rtt_ms is None or a.rtt_ms <= b.rtt_ms:
        return a
    return b


def unmet_requirements(qos: QosRequirement | None, prediction: Prediction) -> tuple[str, ...]:
    """The qosD fields (MEC 015 names) the prediction does not meet; unknown predictions are unmet."""
    if qos is None:
        return ()
    unmet: list[str] = []
    if qos.min_throughput_bps is not None and (
        prediction.throughput_bps is None or prediction.throughput_bps < qos.min_throughput_bps
    ):
        unmet.append("minTpt")
    if qos.max_latency_ms is not None and (prediction.rtt_ms is None or prediction.rtt_ms / 2.0 > qos.max_latency_ms):
        unmet.append("maxLatency")
    if qos.max_loss is not None and (prediction.loss is None or prediction.loss > qos.max_loss):
        unmet.append("maxLoss")
    if qos.max_jitter_ms is not None:
        unmet.append("maxJitter")
    return tuple(unmet)


def _sel(g: _Group, priority: Priority | None, initial: bool, percentage: int | None = None) -> AccessSelection:
    return AccessSelection(
        access=g.access,
        interface=g.interface,
        access_type=g.access_type,
        priority=priority,
        percentage=percentage,
        metered=g.access is Access.THREE_GPP,
        initial_subflow=initial,
    )


def _thresholds(qos: QosRequirement | None, config: SteeringConfig) -> tuple[float | None, float | None]:
    rtt = 2.0 * qos.max_latency_ms if qos is not None and qos.max_latency_ms is not None else config.rtt_threshold_ms
    loss = qos.max_loss if qos is not None else None
    return rtt, loss


def _build(
    mode: SteeringMode,
    first: _Group,
    second: _Group | None,
    intent: Intent,
    reason: str,
    qos: QosRequirement | None,
    config: SteeringConfig,
) -> SteeringDecision:
    """The decision for ``mode`` with ``first`` as active / high / initial-subflow access."""
    groups = [first] if second is None else [first, second]
    percentages: tuple[int, ...] = ()
    if second is None:
        accesses: tuple[AccessSelection, ...] = (_sel(first, Priority.ACTIVE, True),)
        mode = SteeringMode.ACTIVE_STANDBY
    elif mode is SteeringMode.ACTIVE_STANDBY or mode is SteeringMode.SMALLEST_DELAY:
        roles = (Priority.ACTIVE, Priority.STANDBY) if mode is SteeringMode.ACTIVE_STANDBY else (None, None)
        accesses = (_sel(first, roles[0], True), _sel(second, roles[1], False))
    elif mode is SteeringMode.PRIORITY_BASED:
        accesses = (_sel(first, Priority.HIGH, True), _sel(second, Priority.LOW, False))
    elif mode is SteeringMode.LOAD_BALANCING:
        percentages = _percentages(first, second)
        accesses = (_sel(first, None, True, percentages[0]), _sel(second, None, False, percentages[1]))
    else:  # REDUNDANT
        accesses = (_sel(first, None, True), _sel(second, None, False))
    prediction = _predict(mode, groups, percentages)
    threshold_based = mode in (SteeringMode.ACTIVE_STANDBY, SteeringMode.PRIORITY_BASED, SteeringMode.LOAD_BALANCING)
    rtt, loss = _thresholds(qos, config) if threshold_based else (None, None)
    return SteeringDecision(
        steering_mode=mode,
        accesses=accesses,
        intent=intent,
        reason=reason,
        rtt_threshold_ms=rtt,
        packet_loss_rate_threshold=loss,
        prediction=prediction,
        unmet=unmet_requirements(qos, prediction),
    )


def default_rule_key(
    paths: Sequence[PathWeight], primary_interface: str, config: SteeringConfig
) -> tuple[object, ...] | None:
    """What the DEFAULT intent's decision (:func:`decide` with ``Intent.DEFAULT``, no qosD, this ``config``) is a
    function of, computed without building it: two path lists with equal keys get equal decisions and unequal keys
    unequal ones (``tests/service/engines/test_steering.py``). ~2.5 µs against ~16 for the decision, ~0.5 for the
    common device of two interfaces on two accesses, which needs no grouping (issue 16): a caller keeps the rules it
    built by this key.

    ``paths``: shape (n,), :data:`PathWeight` (rtt, loss and throughput only shape the prediction, which the
    decision's equality leaves out). The key: the mode's rule (``only`` one access, ``standby``, ``priority``),
    the representative interface and access type of the primary path's access and of the other, and for
    Active-Standby the other's weight as the reason prints it. None where :func:`decide` raises (no path, or
    ``primary_interface`` names none).
    """
    if len(paths) == 2:  # the common device, one WiFi and one cellular interface: one path per access, no grouping
        first, second = paths
        if (first[1] in CELLULAR) != (second[1] in CELLULAR):
            if first[0] == primary_interface:
                return _rule_key(first[0], first[1], second, config)
            if second[0] == primary_interface:
                return _rule_key(second[0], second[1], first, config)
            return None
    return _grouped_rule_key(paths, primary_interface, config)


def _grouped_rule_key(
    paths: Sequence[PathWeight], primary_interface: str, config: SteeringConfig
) -> tuple[object, ...] | None:
    """:func:`default_rule_key` for any paths: grouped by access, one representative each (:func:`_group_key`)."""
    by_access: dict[Access, list[PathWeight]] = {}
    mine: Access | None = None
    for p in paths:
        access = Access.THREE_GPP if p[1] in CELLULAR else Access.NON_THREE_GPP
        by_access.setdefault(access, []).append(p)
        if mine is None and p[0] == primary_interface:
            mine = access
    if mine is None:
        return None
    groups = {access: _group_key(ps, primary_interface) for access, ps in by_access.items()}
    name, access_type, _ = groups[mine]
    return _rule_key(name, access_type, next((g for access, g in groups.items() if access is not mine), None), config)


def _rule_key(
    name: str, access_type: AccessType, other: PathWeight | None, config: SteeringConfig
) -> tuple[object, ...]:
    """:func:`default_rule_key` from the primary path's access's representative (``name``, ``access_type``) and the
    other access's (interface, access type, weight; None: the device has one access)."""
    if other is None:
        return ("only", name, access_type)
    if other[2] is not None and other[2] < config.standby_weight:
        return ("standby", name, access_type, other[0], other[1], f"{other[2]:.2f}")
    return ("priority", name, access_type, other[0], other[1])


def _group_key(ps: list[PathWeight], primary_interface: str) -> PathWeight:
    """:func:`_groups`' representative (interface, access type) and weight of one access, from plain paths."""
    if len(ps) == 1:
        return ps[0]
    i, weight = _representative(ps, primary_interface)
    return ps[i][0], ps[i][1], weight


def decide(
    paths: Sequence[PathState],
    primary_interface: str,
    intent: Intent = Intent.DEFAULT,
    qos: QosRequirement | None = None,
    config: SteeringConfig | None = None,
) -> SteeringDecision:
    """The ATSSS access selection for ``intent`` (the module's mapping table).

    ``paths``: the device's interfaces (≥ 1); ``primary_interface``: the primary path's interface
    (one of ``paths``); ``qos``: the session's qosD (used by LOW_COST and QOS).

    Raises
    ------
    ValueError
        ``paths`` is empty or ``primary_interface`` names none of them.
    """
    config = config or SteeringConfig()
    if not paths:
        raise ValueError("paths is empty")
    primary = next((p for p in paths if p.interface == primary_interface), None)
    if primary is None:
        raise ValueError(f"primary_interface {primary_interface!r} names no path")
    if qos is not None and qos.empty:
        qos = None
    groups = _groups(paths, primary_interface)
    mine = groups[access_of(primary.access_type)]
    others = [g for a, g in groups.items() if a is not mine.access]
    if not others:
        return _build(
            SteeringMode.ACTIVE_STANDBY,
            mine,
            None,
            intent,
            f"only {mine.access.value} access offered: active with no standby",
            qos,
            config,
        )
    other = others[0]
    three_gpp, non_3gpp = groups[Access.THREE_GPP], groups[Access.NON_THREE_GPP]
    if intent is Intent.DEFAULT:
        if other.weight is not None and other.weight < config.standby_weight:
            why = f"MLPM weight of {other.access.value} {other.weight:.2f} < {config.standby_weight}: standby"
            return _build(SteeringMode.ACTIVE_STANDBY, mine, other, intent, why, qos, config)
        why = "both accesses carry MLPM weight: the primary path has high priority, the other overflows"
        return _build(SteeringMode.PRIORITY_BASED, mine, other, intent, why, qos, config)
    if intent is Intent.LOW_COST:
        wifi_first = _build(SteeringMode.ACTIVE_STANDBY, non_3gpp, three_gpp, intent, "", qos, config)
        if not wifi_first.unmet:
            return dataclasses.replace(wifi_first, reason="unmetered (non-3GPP) access active while it meets qosD")
        cell_first = _build(SteeringMode.ACTIVE_STANDBY, three_gpp, non_3gpp, intent, "", qos, config)
        why = f"unmetered access does not meet qosD ({', '.join(wifi_first.unmet)}): metered 3GPP active"
        return dataclasses.replace(cell_first, reason=why)
    if intent is Intent.LOW_LATENCY:
        fast = _lower_rtt(mine, other)
        slow = other if fast is mine else mine
        known = mine.rtt_ms is not None and other.rtt_ms is not None
        why = (
            f"smallest delay: {fast.access.value} RTT {fast.rtt_ms:.1f} ms active"
            if known
            else "smallest delay: RTTs unknown, the primary path starts (the PMF measures RTT)"
        )
        return _build(SteeringMode.SMALLEST_DELAY, fast, slow, intent, why, qos, config)
    if intent is Intent.HIGH_THROUGHPUT:
        why = "load-balancing with the MLPM weights; the initial subflow on the bandit's primary path"
        return _build(SteeringMode.LOAD_BALANCING, mine, other, intent, why, qos, config)
    if intent is Intent.REDUNDANCY:
        why = "redundant: both subflows active, no standby"
        return _build(SteeringMode.REDUNDANT, mine, other, intent, why, qos, config)
    # QOS: the cheapest candidate whose prediction meets qosD
    fast = _lower_rtt(mine, other)
    candidates = [
        _build(SteeringMode.ACTIVE_STANDBY, non_3gpp, three_gpp, intent, "", qos, config),
        _build(SteeringMode.ACTIVE_STANDBY, three_gpp, non_3gpp, intent, "", qos, config),
        _build(SteeringMode.SMALLEST_DELAY, fast, other if fast is mine else mine, intent, "", qos, config),
        _build(SteeringMode.LOAD_BALANCING, mine, other, intent, "", qos, config),
        _build(SteeringMode.REDUNDANT, mine, other, intent, "", qos, config),
    ]
    for c in candidates:
        if not c.unmet:
            return dataclasses.replace(
                c, reason=f"cheapest mode whose predicted outcome meets qosD: {c.steering_mode.value}"
            )
    best = min(reversed(candidates), key=lambda c: len(c.unmet))
    return dataclasses.replace(best, reason=f"no mode meets qosD; best available leaves unmet: {', '.join(best.unmet)}")
