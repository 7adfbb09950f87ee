"""Typed replies of the EdgePath service, as the agent uses them (issue 14, item 4), and the typed
congestion measurement an outcome carries (:class:`CongestionMeasurement`, issue 20).

Each transport parses a reply once, here: :meth:`Recommendation.from_proto` (gRPC) and
:meth:`Recommendation.from_rest` (REST JSON) build the same frozen objects, which the
upstream guard, the safety checks (:func:`edgepath_agent.safety.safe_decision`) and the applier
consume as they are. Fields, units and meanings are those of ``proto/edgepath/v1/edgepath.proto``
(the generated code in :mod:`edgepath_agent.wire` is the schema both ends share; the service's core
types are not importable here, the agent being its own package).

The models check *shapes* only (a string where a name is expected, a number where a weight is);
what a recommendation may make this device do (its own interfaces, weights in [0, 1], allowlisted
congestion controls) stays in :mod:`edgepath_agent.safety`. Fields the agent does not act on are kept
untyped (forecasts, explanations, the rest of a steering rule) and never acted on.

Enum spellings: the proto writes ``ACCESS_TYPE_WIFI`` (number 1), REST writes ``"WIFI"``; the one
normaliser of the agent, :func:`rest_spelling`, derives the prefix from the generated enum
descriptor (protobuf style: values carry the enum's name as prefix) and accepts all three forms.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Annotated, Any

from google.protobuf import json_format
from google.protobuf.message import Message
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from edgepath_agent.wire import edgepath_pb2 as pb


def enum_prefix(pb_enum: Any) -> str:
    """``"ACCESS_TYPE_"`` for the proto enum ``AccessType`` (``pb_enum``: a generated enum wrapper)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", pb_enum.DESCRIPTOR.name).upper() + "_"


def rest_spelling(pb_enum: Any, value: object) -> object:
    """REST spelling (``"WIFI"``) of a proto enum value given as its number, proto name or REST name.

    Anything else is returned unchanged (the model's own validation then names the field).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        described = pb_enum.DESCRIPTOR.values_by_number.get(value)
        return value if described is None else described.name.removeprefix(enum_prefix(pb_enum))
    if isinstance(value, str):
        return value.removeprefix(enum_prefix(pb_enum))
    return value


def proto_spelling(pb_enum: Any, value: str) -> str:
    """Proto name of a REST spelling (``"WIFI"`` → ``"ACCESS_TYPE_WIFI"``); a proto name stays as it is."""
    prefix = enum_prefix(pb_enum)
    return value if value.startswith(prefix) else prefix + value


AccessName = Annotated[str, BeforeValidator(partial(rest_spelling, pb.AccessType))]
ProfileName = Annotated[str, BeforeValidator(partial(rest_spelling, pb.ApplicationProfile))]


class _Reply(BaseModel):
    """Frozen; fields the agent does not act on are kept as they came (``extra="allow"``), so the reply
    reads back whole as its REST JSON (:meth:`as_json`, ``reply["primary_path"]["interface"]``)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    def as_json(self) -> dict[str, Any]:
        """The reply in its REST JSON shape: the fields it came with (REST spellings, lists, ints)."""
        return self.model_dump(mode="json", exclude_unset=True)

    # Read-only JSON view for callers written against the REST body (the contract tests, scripts).
    def __getitem__(self, key: str) -> Any:
        return self.as_json()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.as_json()

    def get(self, key: str, default: Any = None) -> Any:
        """``self[key]``, or ``default`` when the reply has no such field."""
        return self.as_json().get(key, default)

    def keys(self) -> Any:
        return self.as_json().keys()


class PrimaryPath(_Reply):
    """The interface to make primary (its default route first, the initial subflow on it)."""

    interface: StrictStr
    access_type: AccessName | None = None
    propensity: float | None = None
    arms: tuple[AccessName, ...] = ()
    address: StrictStr | None = None


class SubflowWeight(_Reply):
    """One subflow's share of traffic (MLPM); a weight below the applier's threshold marks it ``backup``."""

    interface: StrictStr
    weight: StrictFloat | StrictInt
    address: StrictStr | None = None


def _weights(value: object) -> object:
    """``{"wlan0": 0.8}`` → ``[{"interface": "wlan0", "weight": 0.8}]`` (the flat form the agent also accepts)."""
    if isinstance(value, Mapping):
        return [{"interface": k, "weight": v} for k, v in value.items()]
    return value


class SchedulerAdvice(_Reply):
    """MLPM scheduler weights (``weights``; ``subflows`` is the older name, still accepted)."""

    weights: tuple[SubflowWeight, ...] = ()
    subflows: tuple[SubflowWeight, ...] = ()
    prioritised_subflow: str = ""


class CongestionAdvice(_Reply):
    """Congestion-control pair (Łuczak et al. 2023, Table 3); "" = keep the kernel default."""

    profile: ProfileName = "UNSPECIFIED"
    mptcp_level: StrictStr = ""
    subflow_level: StrictStr = ""
    deciding_metric: str = ""
    mainline_fallback: bool = False


class ServerSelection(_Reply):
    """SSMP's choice among the candidate servers of the request's ``content``."""

    address: str
    candidate_index: int = 0
    flow_class: str = ""
    score: float | None = None
    score_name: str = ""
    initial_subflow_interface: str = ""
    rule: str = ""
    stale_servers: tuple[str, ...] = ()


class SteeringAccess(_Reply):
    """One access of an ATSSS rule (3GPP TS 23.501 §5.32.8)."""

    interface: StrictStr
    access_type: AccessName | None = None
    initial_subflow: bool = False


class SteeringRule(_Reply):
    """An ATSSS rule; the last one of :class:`SteeringAdvice` matches all traffic."""

    steering_mode: StrictStr
    accesses: tuple[SteeringAccess, ...] = ()


class SteeringAdvice(_Reply):
    """ATSSS steering rules (issue 19)."""

    rules: tuple[SteeringRule, ...] = ()
    source: str = ""


class Recommendation(_Reply):
    """A ``Recommendation`` reply (or a fixed-policy one the agent builds itself: ``decision_id`` None).

    ``scheduler_weights`` (a list of ``{interface, weight}`` or a mapping), ``sysctls`` and
    ``congestion_control`` are not on the wire: they are accepted for recommendations the agent's
    operators write by hand (fixed policies, tests) and checked like the rest. ``demoted`` is not on the
    wire either: the interfaces the agent's upstream guard found without upstream connectivity and moved the
    initial subflow off (:meth:`with_primary`), which the applier makes MPTCP ``backup`` endpoints.
    """

    decision_id: StrictStr | None = None
    model_version: int = 0
    policy: str = ""
    primary_path: PrimaryPath
    decided_at_unix_ms: int = 0
    scheduler: SchedulerAdvice | None = None
    congestion: CongestionAdvice | None = None
    server_selection: ServerSelection | None = None
    steering: SteeringAdvice | None = None
    scheduler_weights: tuple[SubflowWeight, ...] = ()
    sysctls: dict[StrictStr, StrictStr] = {}
    congestion_control: StrictStr | None = None
    demoted: tuple[StrictStr, ...] = ()

    @field_validator("scheduler_weights", mode="before")
    @classmethod
    def _flat_weights(cls, value: object) -> object:
        return _weights(value)

    @classmethod
    def from_rest(cls, body: Any) -> Recommendation:
        """Parse a ``POST /v1/recommendations`` body; raises ``pydantic.ValidationError`` naming the field."""
        return cls.model_validate(body)

    @classmethod
    def from_proto(cls, msg: Message) -> Recommendation:
        """Parse an ``edgepath.v1.Recommendation``; raises ``pydantic.ValidationError`` naming the field."""
        return cls.model_validate(_proto_fields(msg))

    def initial_interface(self, follow_mlpm: bool = False) -> str:
        """The interface this recommendation puts the initial subflow on, read as the applier reads it
        (:meth:`edgepath_agent.applier.Applier.apply`): with ``follow_mlpm`` and MLPM advice (weights or a
        ``prioritised_subflow``), the prioritised subflow, else the highest weight; else the match-all (last)
        steering rule's single ``initial_subflow`` access; else ``primary_path.interface``. Shapes only: whether
        the interface is the device's own is the safety checks' to say."""
        if follow_mlpm:
            weights = {w.interface: float(w.weight) for w in self._weight_items()}
            prioritised = self.scheduler.prioritised_subflow if self.scheduler is not None else ""
            if prioritised or weights:
                return prioritised or max(sorted(weights), key=lambda k: weights[k])
        if self.steering is not None and self.steering.rules:
            initial = [a.interface for a in self.steering.rules[-1].accesses if a.initial_subflow]
            if len(initial) == 1:
                return initial[0]
        return self.primary_path.interface

    def _weight_items(self) -> tuple[SubflowWeight, ...]:
        advice = self.scheduler
        return (*(advice.weights if advice else ()), *(advice.subflows if advice else ()), *self.scheduler_weights)

    def with_primary(self, interface: str, access_type: str | None, demoted: Iterable[str]) -> Recommendation:
        """This recommendation with the initial subflow on ``interface`` and the ``demoted`` interfaces ``backup``
        (the upstream guard's override; ``demoted``: the interfaces it found without upstream connectivity).

        Every field the applier may take the initial subflow from says ``interface``, so the override is what is
        applied whichever one the applier reads (:meth:`initial_interface`): ``primary_path``; the match-all
        (last) steering rule, whose ``initial_subflow`` moves to ``interface``'s access (added, with
        ``access_type``, when the rule has none for it) while the previous initial access stays in the rule; and
        MLPM's ``prioritised_subflow`` (set when the recommendation carries MLPM advice), its weights kept. A
        ``primary_path.address`` (a hand-written recommendation's source address) is dropped when ``interface`` is
        another interface: it is the old primary's.

        ``demoted`` (with those this recommendation already demotes, ``interface`` left out) becomes the
        ``demoted`` field, which the applier adds to the backup set whatever the steering mode or MLPM's weights
        say: the interfaces stay MPTCP endpoints (the kernel can fail back to them when ``interface`` dies too) but
        are ``backup`` (RFC 8684 §3.3.8 MP_PRIO). Without it a dead path kept a non-backup subflow in every mode but
        Active-Standby and Priority-based (their standby / low-priority access is ``backup`` anyway), and mainline's
        default scheduler (net/mptcp/protocol.c ``mptcp_subflow_get_send``) sends on any non-backup subflow,
        using backup ones only when no non-backup one is usable, so new connections' data went to the dead
        upstream until retransmission timeouts marked its subflow stale. The override ends when the next
        recommendation is applied without them (:meth:`with_demoted`): the interfaces' flags are then the
        recommendation's again.
        """
        moved = interface != self.primary_path.interface
        # a source address named for the old primary is not one of ``interface``'s (the safety check would refuse it)
        address = None if moved else self.primary_path.address
        pp = self.primary_path.model_copy(
            update={"interface": interface, "access_type": access_type, "address": address}
        )
        update: dict[str, Any] = {"primary_path": pp}
        if self.steering is not None and self.steering.rules:
            *rules, match_all = self.steering.rules
            accesses = [a.model_copy(update={"initial_subflow": a.interface == interface}) for a in match_all.accesses]
            if not any(a.interface == interface for a in accesses):
                accesses.append(SteeringAccess(interface=interface, access_type=access_type, initial_subflow=True))
            rule = match_all.model_copy(update={"accesses": tuple(accesses)})
            update["steering"] = self.steering.model_copy(update={"rules": (*rules, rule)})
        if self.scheduler is not None or self.scheduler_weights:
            advice = self.scheduler if self.scheduler is not None else SchedulerAdvice()
            update["scheduler"] = advice.model_copy(update={"prioritised_subflow": interface})
        return self.model_copy(update=update).with_demoted(demoted, interface)

    def with_demoted(self, demoted: Iterable[str], primary: str) -> Recommendation:
        """This recommendation with the ``demoted`` interfaces (the upstream guard's: without upstream
        connectivity) added to its ``demoted`` field, ``primary`` (the interface carrying the initial subflow) left
        out: the applier makes them MPTCP ``backup`` endpoints (:meth:`with_primary` says why). Itself when that
        adds nothing."""
        backup = tuple(n for n in dict.fromkeys((*self.demoted, *demoted)) if n != primary)
        return self if backup == self.demoted else self.model_copy(update={"demoted": backup})

    def summary(self) -> dict[str, Any]:
        """``decision_id``, ``model_version``, ``policy``, ``primary_path``, ``decided_at_unix_ms`` as JSON values
        (the agent's status file)."""
        return self.model_dump(
            mode="json",
            include={"decision_id", "model_version", "policy", "primary_path", "decided_at_unix_ms"},
            exclude_none=True,
        )


class OutcomeAck(_Reply):
    """The service's acknowledgement of an outcome (``reward`` in the service's integer reward units)."""

    decision_id: str = ""
    accepted: bool = False
    duplicate: bool = False
    reward: int = 0

    @classmethod
    def from_rest(cls, body: Any) -> OutcomeAck:
        return cls.model_validate(body)

    @classmethod
    def from_proto(cls, msg: Message) -> OutcomeAck:
        return cls.model_validate(_proto_fields(msg))


#: What a congestion-control algorithm's name may look like on the wire (the service's ``AlgorithmName``).
ALGORITHM_PATTERN = r"^[A-Za-z0-9_.\-]{1,32}$"
_ALGORITHM = re.compile(ALGORITHM_PATTERN)


class CongestionMeasurement(BaseModel):
    """The ``congestion_measurement`` an outcome carries (issue 20): Łuczak et al.'s metrics of one transfer.

    Source: Ł. P. Łuczak, P. Ignaciuk, M. Morawski, Future Internet 15(10):328, 2023, Section 2.1, computed by the
    meter (:mod:`edgepath_agent.ccmetrics`) on the sending connection: ``hol_degree_ms`` ζ_av (Eq. 7–8, ms; a
    derived estimate that may be slightly negative), ``protocol_delay_ms`` v_av (Eq. 2–3, ms), ``drop_rate`` δ
    (Eq. 12 as a fraction of data segments retransmitted, not %), ``throughput_bps`` (bit/s, measured by the
    receiver). ``algorithm`` is the sender's subflow-level congestion control (``TCP_CONGESTION``). The same ranges
    as the service's (``edgepath.types.CongestionMeasurement``), so a measurement this model accepts is never a 422;
    raises ``pydantic.ValidationError`` naming the field otherwise.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    algorithm: Annotated[StrictStr, Field(pattern=ALGORITHM_PATTERN)]
    hol_degree_ms: float | None = Field(None, ge=-600_000.0, le=600_000.0)
    protocol_delay_ms: float | None = Field(None, ge=0.0, le=600_000.0)
    drop_rate: float | None = Field(None, ge=0.0, le=1.0)
    throughput_bps: float | None = Field(None, ge=0.0, le=1e12)

    def as_json(self) -> dict[str, Any]:
        """The REST JSON shape of ``CongestionMeasurement`` (absent metrics left out)."""
        return self.model_dump(exclude_none=True)

    @classmethod
    def from_meter(
        cls, paper_metrics: Mapping[str, Any], algorithm: str | None, throughput_bps: float | None
    ) -> CongestionMeasurement | None:
        """From the meter trailer's ``paper_metrics`` (:func:`edgepath_agent.ccmetrics.paper_metrics`: ms, ``%``).

        Each value is taken only when it is a number that passes this model's own field bounds (a trailer is a
        server's JSON: NaN, strings and absurd values are left out rather than refused); ``drop_rate_pct`` becomes
        a fraction. None when there is no valid ``algorithm`` or no metric at all (no block is then sent).
        """
        if not isinstance(algorithm, str) or not _ALGORITHM.match(algorithm.strip()):
            return None
        raw = {
            "hol_degree_ms": paper_metrics.get("hol_degree_avg_ms"),
            "protocol_delay_ms": paper_metrics.get("protocol_delay_avg_ms"),
            "drop_rate": paper_metrics.get("drop_rate_pct"),
            "throughput_bps": throughput_bps,
        }
        numbers = {k: float(v) for k, v in raw.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        if "drop_rate" in numbers:
            numbers["drop_rate"] *= 0.01
        name = algorithm.strip().lower()
        try:
            return cls(algorithm=name, **numbers) if numbers else None
        except ValidationError as exc:  # leave out the fields the bounds refuse, keep the rest
            refused = {e["loc"][0] for e in exc.errors()}
            kept = {k: v for k, v in numbers.items() if k not in refused}
            return cls(algorithm=name, **kept) if kept else None


def _proto_fields(msg: Message) -> dict[str, Any]:
    # Field names as in the proto (= REST), implicit-presence zeros kept (a 0.0 weight is a weight),
    # optional fields left out when unset; enum values as numbers, named by :func:`rest_spelling`.
    return json_format.MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True, use_integers_for_enums=True
    )


def request_to_proto(request: Mapping[str, Any]) -> pb.RecommendRequest:
    """A ``RecommendRequest`` in its REST JSON shape → the proto message (one conversion; REST enum spellings
    accepted). Raises ``google.protobuf.json_format.ParseError`` naming the field for a wrong shape."""
    body = {k: v for k, v in request.items() if v is not None}
    interfaces = []
    for iface in body.get("interfaces", []):
        fields = {k: v for k, v in iface.items() if v is not None}
        if isinstance(fields.get("access_type"), str):
            fields["access_type"] = proto_spelling(pb.AccessType, fields["access_type"])
        interfaces.append(fields)
    body["interfaces"] = interfaces
    if isinstance(body.get("application_profile"), str):
        body["application_profile"] = proto_spelling(pb.ApplicationProfile, body["application_profile"])
    return json_format.ParseDict(body, pb.RecommendRequest())


def outcome_to_proto(outcome: Mapping[str, Any]) -> pb.OutcomeRequest:
    """An ``OutcomeRequest`` in its REST JSON shape → the proto message."""
    return json_format.ParseDict({k: v for k, v in outcome.items() if v is not None}, pb.OutcomeRequest())
