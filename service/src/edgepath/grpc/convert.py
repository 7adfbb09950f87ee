"""Protobuf ⇄ domain-model converters for the gRPC transport.

Messages are turned into plain dicts and validated by the same pydantic models
the REST transport uses, so both reject the same inputs, naming the same field.
Optional proto3 fields are copied only when present (``HasField``). Where the
compiled decoding is installed it reads the wire bytes itself and hands over a
history or an interface its model accepts as it is as that model's instance
(:data:`HISTORY_MODEL`, :data:`INTERFACE_MODEL`: the model's own checks, read
from the model); pydantic takes those as they are and validates the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from google.protobuf import descriptor_pb2
from google.protobuf.message import Message
from pydantic import BaseModel

from edgepath.constructed import constructible, fields_schema
from edgepath.errors import InvalidInput
from edgepath.grpc import enums
from edgepath.memo import IdentityMemo
from edgepath.types import (
    IFNAME_PATTERN,
    AccessType,
    ApplicationProfile,
    CongestionAdvice,
    InterfaceContext,
    OutcomeAck,
    OutcomeReport,
    Recommendation,
    RecommendBatch,
    RecommendBatchRequest,
    RecommendRequest,
    SchedulerAdvice,
    ServerSelection,
    SteeringAdvice,
    SubflowHistory,
)
from edgepath.wire import edgepath_pb2 as pb

try:  # the compiled decoding (service/native, the edgepath-native package): the same plain values, built faster
    from edgepath_native import recommend_batch_fields as _native_batch_fields
    from edgepath_native import recommend_fields as _native_fields
    from edgepath_native import wire_schema as _native_schema
except ImportError:  # optional: this module's readers decide alone, with the same results
    _native_batch_fields = _native_fields = _native_schema = None  # type: ignore[assignment]
try:  # the compiled decoding's models (request.rs: HistoryModel, InterfaceModel); a build from before: plain values
    from edgepath_native import HistoryModel as _NativeHistoryModel
    from edgepath_native import InterfaceModel as _NativeInterfaceModel
except ImportError:
    _NativeHistoryModel = _NativeInterfaceModel = None  # type: ignore[misc,assignment]
try:  # the compiled encoding of replies (service/native/src/reply.rs): the same bytes, built faster
    from edgepath_native import WireMemo as _NativeWireMemo
    from edgepath_native import encode_message as _native_encode
except ImportError:  # not installed, or a build from before it existed: this module's converters alone
    _native_encode = None  # type: ignore[assignment]
    _NativeWireMemo = None  # type: ignore[assignment,misc]

# Enum spellings: derived once from the proto descriptors (edgepath.grpc.enums), never hand-written.
ACCESS_FROM_PROTO: dict[int, AccessType] = enums.from_proto_map(AccessType, pb.AccessType)
ACCESS_TO_PROTO: dict[AccessType, int] = enums.to_proto_map(AccessType, pb.AccessType)
PROFILE_FROM_PROTO: dict[int, ApplicationProfile] = enums.from_proto_map(ApplicationProfile, pb.ApplicationProfile)
PROFILE_TO_PROTO: dict[ApplicationProfile, int] = enums.to_proto_map(ApplicationProfile, pb.ApplicationProfile)

_OPTIONAL_INTERFACE_FIELDS = (
    "wifi_rssi_dbm",
    "link_speed_mbps",
    "frequency_mhz",
    "rsrp_dbm",
    "rsrq_db",
    "sinr_db",
    "cqi",
    "cell_rssi_dbm",
    "rtt_ms",
    "loss",
    # warm-start features (issue 8)
    "wifi_rssi_spread_db",
    "max_link_speed_mbps",
    "rsrp_spread_db",
    "channel_bandwidth_mhz",
)


def _interface_dict(msg: pb.InterfaceContext) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": msg.name,
        # Unknown/unspecified enum values stay raw ints so validation names the field.
        "access_type": ACCESS_FROM_PROTO.get(msg.access_type, msg.access_type),
    }
    for name in _OPTIONAL_INTERFACE_FIELDS:
        if msg.HasField(name):
            d[name] = getattr(msg, name)
    return d


def recommend_request_fields(msg: pb.RecommendRequest) -> dict[str, Any]:
    """A ``RecommendRequest`` as plain values for pydantic validation (nothing validated yet)."""
    d: dict[str, Any] = {"device_id": msg.device_id, "interfaces": [_interface_dict(i) for i in msg.interfaces]}
    d.update(mlpm_cc_request_fields(msg))  # issue 3
    d.update(ssmp_request_fields(msg))  # issue 4
    if msg.sections:  # issue 16
        d["sections"] = list(msg.sections)
    return d


def recommend_request(msg: pb.RecommendRequest | bytes, native: bool = True) -> RecommendRequest:
    """Validate a ``RecommendRequest`` (the message, or its wire bytes: :func:`recommend_request_values`).

    Raises
    ------
    pydantic.ValidationError
        A value is invalid.
    InvalidInput
        ``msg`` is bytes that are no ``RecommendRequest`` (:data:`MALFORMED`).
    """
    return RecommendRequest.model_validate(recommend_request_values(msg, native))


def recommend_request_values(msg: pb.RecommendRequest | bytes, native: bool = True) -> dict[str, Any]:
    """A ``RecommendRequest`` as plain values for validation (:func:`recommend_request_fields`' form; nothing
    validated yet), from the message or its wire bytes (what a :func:`edgepath.grpc.server.takes_wire_bytes`
    method is handed).

    ``native``: read it with the compiled decoding where installed (:data:`NATIVE_DECODING`; the same values as
    :func:`recommend_request_fields`, ~12 → ~5.5 µs for an agent's context with 20 samples per column, issue 16),
    straight from the bytes; False: this module's reader (bytes parsed by protobuf first).

    Raises
    ------
    InvalidInput
        ``msg`` is bytes that are no ``RecommendRequest`` (:data:`MALFORMED`).
    """
    if native and NATIVE_DECODING:
        fields = _native_fields(msg if isinstance(msg, bytes) else msg.SerializeToString(), *_DECODING_ARGS)
        if fields is not None:
            return fields  # type: ignore[no-any-return]
    return recommend_request_fields(parse_wire(pb.RecommendRequest, msg) if isinstance(msg, bytes) else msg)


def recommend_batch_request(msg: pb.RecommendBatchRequest | bytes, native: bool = True) -> RecommendBatchRequest:
    """Validate a ``RecommendBatchRequest`` in one pass (errors name ``requests[i]....``); ``native``: as
    :func:`recommend_request`'s.

    ``msg``: the message, or its wire bytes as the call carried them (what the gRPC method is handed, see
    :func:`edgepath.grpc.server.takes_wire_bytes`): the compiled decoding reads those directly, without the parse into
    a message and the serialisation back that a message costs (issue 16: 0.981× the serving process's CPU per
    decision of batches of 64 agent contexts, ``loadtest/cpu_ab.py --batch-size 64``).

    Raises
    ------
    pydantic.ValidationError
        A value is invalid.
    InvalidInput
        ``msg`` is bytes that are no ``RecommendBatchRequest`` (:data:`MALFORMED`).
    """
    items = None
    if native and NATIVE_DECODING:
        items = _native_batch_fields(msg if isinstance(msg, bytes) else msg.SerializeToString(), *_DECODING_ARGS)
    if items is None:
        message = parse_wire(pb.RecommendBatchRequest, msg) if isinstance(msg, bytes) else msg
        items = [recommend_request_fields(r) for r in message.requests]
    return RecommendBatchRequest.model_validate({"requests": items})


#: The message of a request whose bytes do not parse (both transports' refusals say "malformed").
MALFORMED = "malformed protobuf message"

_Message = TypeVar("_Message", bound=Message)


def parse_wire(cls: type[_Message], wire: bytes) -> _Message:
    """``cls`` parsed from ``wire``.

    Raises
    ------
    InvalidInput
        The bytes are no ``cls`` (:data:`MALFORMED`; protobuf's ``DecodeError``, or anything a corrupt buffer
        provokes in the parser).
    """
    try:
        return cls.FromString(wire)
    except Exception:  # DecodeError, or anything a corrupt buffer provokes in the parser
        raise InvalidInput(MALFORMED) from None


def _constructible(model: type[BaseModel], model_validators: set[str]) -> bool:
    """Whether the compiled decoding may build ``model`` (:func:`~edgepath.constructed.constructible`), its extras
    forbidden and NaN and the infinities refused (the decoding's checks are the bounds of finite values)."""
    return (
        constructible(model, model_validators)
        and model.model_config.get("extra") == "forbid"
        and model.model_config.get("allow_inf_nan") is False
    )


def _column_schema(field: Any) -> tuple[int, float, float] | None:
    """``(max_length, ge, le)`` of a history column's core schema: a list (default: empty) of floats bounded by
    ``ge``/``le`` and nothing else; None for any other form (the compiled check would not be the model's)."""
    schema = field.get("schema", {})
    if schema.get("type") == "default":
        schema = schema.get("schema", {})
    items = schema.get("items_schema", {})
    if schema.get("type") != "list" or set(schema) - {"type", "items_schema", "max_length", "metadata"}:
        return None
    if (
        items.get("type") != "float"
        or set(items) - {"type", "ge", "le", "metadata", "strict"}
        or "max_length" not in schema
    ):
        return None
    if "ge" not in items or "le" not in items:
        return None
    return schema["max_length"], float(items["ge"]), float(items["le"])


#: ``SubflowHistory``'s fields in its order, as the compiled decoding fills an instance's values (request.rs).
_HISTORY_FIELDS = (
    "interface",
    "rtt_samples",
    "throughput_samples",
    "rtt_t_ms",
    "rtt_ms",
    "throughput_t_ms",
    "throughput_bps",
)


def history_model_checks(model: type[SubflowHistory] = SubflowHistory) -> dict[str, Any] | None:
    """What the compiled decoding checks before it builds a ``model`` instance of a history in the column form
    (``edgepath_native.HistoryModel``), read from the model's own core schema, so the checks have one source: the
    interface name's length bounds, each column's bound and most samples. None where the model holds anything that
    check would not be (a pattern on the name, a validator besides ``_one_form_per_quantity``, private attributes,
    extras allowed, a column of another form): then every history is validated by pydantic
    (:func:`history_model_refusal` says which)."""
    checks = _history_checks(model)
    return checks if isinstance(checks, dict) else None


def history_model_refusal(model: type[SubflowHistory] = SubflowHistory) -> str | None:
    """Why :func:`history_model_checks` is None for ``model`` (None: it is not)."""
    checks = _history_checks(model)
    return checks if isinstance(checks, str) else None


def _history_checks(model: type[SubflowHistory]) -> dict[str, Any] | str:
    """:func:`history_model_checks`' checks, or why there are none."""
    if not _constructible(model, {"_one_form_per_quantity"}):
        return "the model has a validator, private attributes, extras or non-finite values the check would not make"
    fields = fields_schema(model.__pydantic_core_schema__)
    if fields is None or tuple(fields["fields"]) != _HISTORY_FIELDS:  # the fields the compiled decoding fills
        got = None if fields is None else tuple(fields["fields"])
        return f"the model's fields {got} are not those the compiled decoding fills, {_HISTORY_FIELDS}"
    name = fields["fields"]["interface"]["schema"]
    if name.get("type") != "str" or set(name) - {"type", "min_length", "max_length", "metadata"}:
        return f"the interface name's schema {name} is not a string bounded in length alone"
    if name.get("min_length") != 1 or "max_length" not in name:
        return f"the interface name's schema {name} is not 1 to most characters"
    columns = {
        c: _column_schema(fields["fields"][c]) for c in ("rtt_t_ms", "rtt_ms", "throughput_t_ms", "throughput_bps")
    }
    if odd := [c for c, v in columns.items() if v is None]:
        return f"the column(s) {odd} are not lists of floats bounded by ge/le with a most length"
    max_len = {c[0] for c in columns.values() if c is not None}
    t_bounds = {c[1:] for k, c in columns.items() if c is not None and k.endswith("_t_ms")}
    if len(max_len) != 1 or len(t_bounds) != 1:
        return f"the columns' most lengths {max_len} or time bounds {t_bounds} differ"
    return {
        "name_max": name["max_length"],
        "max_len": max_len.pop(),
        "t_ms": t_bounds.pop(),
        "rtt_ms": columns["rtt_ms"][1:],  # type: ignore[index]
        "throughput_bps": columns["throughput_bps"][1:],  # type: ignore[index]
    }


def _json_number(schema: dict[str, Any]) -> dict[str, Any]:
    """A measurement's number schema without ``strict`` (types.Number, types.Integer: no ``true``, no ``"12"``),
    which only JSON can send: a protobuf double or int32 always passes it."""
    return {k: v for k, v in schema.items() if k != "strict"}


def interface_model_checks(model: type[InterfaceContext] = InterfaceContext) -> dict[str, Any] | None:
    """What the compiled decoding checks before it builds a ``model`` instance of an interface
    (``edgepath_native.InterfaceModel``), read from the model's own core schema: the name's most characters (its
    pattern must be ``IFNAME_PATTERN``, which the compiled check implements), and each measurement's bounds, in the
    proto's order (:data:`_OPTIONAL_INTERFACE_FIELDS`). None where the model holds anything that check would not be
    (a validator, another pattern, a measurement of another form or order, extras allowed): then every interface is
    validated by pydantic (:func:`interface_model_refusal` says which)."""
    checks = _interface_checks(model)
    return checks if isinstance(checks, dict) else None


def interface_model_refusal(model: type[InterfaceContext] = InterfaceContext) -> str | None:
    """Why :func:`interface_model_checks` is None for ``model`` (None: it is not)."""
    checks = _interface_checks(model)
    return checks if isinstance(checks, str) else None


def _interface_checks(model: type[InterfaceContext]) -> dict[str, Any] | str:
    """:func:`interface_model_checks`' checks, or why there are none."""
    if not _constructible(model, set()):
        return "the model has a validator, private attributes, extras or non-finite values the check would not make"
    fields = fields_schema(model.__pydantic_core_schema__)
    want = ["name", "access_type", *_OPTIONAL_INTERFACE_FIELDS]
    if fields is None or list(fields["fields"]) != want:
        got = None if fields is None else list(fields["fields"])
        return f"the model's fields {got} are not the name, the access type and _OPTIONAL_INTERFACE_FIELDS: {want}"
    name = fields["fields"]["name"]["schema"]
    if name != {"type": "str", "min_length": 1, "max_length": name.get("max_length"), "pattern": IFNAME_PATTERN}:
        return f"the name's schema {name} is not 1 to most characters matching IFNAME_PATTERN"
    access = fields["fields"]["access_type"]["schema"]
    if access.get("type") != "enum" or access.get("cls") is not AccessType or access.get("missing") is not None:
        return "the access type's schema is not the AccessType enum alone"
    bounds = []
    for measurement in _OPTIONAL_INTERFACE_FIELDS:
        field = fields["fields"][measurement]["schema"]
        inner = field.get("schema", {}).get("schema", {})
        kind = "int" if measurement == "cqi" else "float"
        if field.get("type") != "default" or field.get("default") is not None:
            return f"{measurement}: not optional with the default None"
        if field["schema"].get("type") != "nullable":
            return f"{measurement}: not nullable"
        inner = _json_number(inner)
        if set(inner) - {"metadata"} != {"type", "ge", "le"} or inner["type"] != kind:
            return f"{measurement}: not a {kind} bounded by ge and le alone ({inner})"
        bounds.append((float(inner["ge"]), float(inner["le"])))
    return {"name_max": name["max_length"], "bounds": bounds}


def _interface_model() -> Any:
    """The compiled decoding's builder of ``InterfaceContext`` instances (:func:`interface_model_checks`), or None."""
    checks = interface_model_checks()
    if _NativeInterfaceModel is None or checks is None:
        return None
    if tuple(_NativeInterfaceModel.MEASUREMENTS) != _OPTIONAL_INTERFACE_FIELDS:  # a build of another proto's fields
        return None
    return _NativeInterfaceModel(InterfaceContext, object.__new__, **checks)


def _history_model() -> Any:
    """The compiled decoding's builder of ``SubflowHistory`` instances (:func:`history_model_checks`), or None."""
    checks = history_model_checks()
    if _NativeHistoryModel is None or checks is None:
        return None
    return _NativeHistoryModel(SubflowHistory, object.__new__, **checks)


def _message_fields(files: Sequence[descriptor_pb2.FileDescriptorProto]) -> dict[str, list[tuple[Any, ...]]]:
    """Every message's fields in a schema, nested messages included, as what decoding depends on: name, number,
    label, type, type name, oneof and proto3 presence (not json names, options or comments, which compilers fill in
    differently)."""
    out: dict[str, list[tuple[Any, ...]]] = {}

    def add(prefix: str, messages: Sequence[descriptor_pb2.DescriptorProto]) -> None:
        for m in messages:
            out[f"{prefix}.{m.name}"] = [
                (
                    f.name,
                    f.number,
                    f.label,
                    f.type,
                    f.type_name,
                    f.oneof_index if f.HasField("oneof_index") else None,
                    f.proto3_optional,
                )
                for f in m.field
            ]
            add(f"{prefix}.{m.name}", m.nested_type)

    for file in files:
        add(file.package, file.message_type)
    return out


def _same_schema(compiled: bytes) -> bool:
    """Whether the compiled decoding was generated from this package's schema (a build from another checkout of
    proto/ would drop or misread a field)."""
    ours = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(ours)
    return _message_fields(descriptor_pb2.FileDescriptorSet.FromString(compiled).file) == _message_fields([ours])


#: Whether the compiled decoding (``edgepath_native.recommend_fields`` / ``recommend_batch_fields``; service/native/
#: src/request.rs) is installed and generated from the same schema as :mod:`edgepath.wire`. Where it is,
#: :func:`recommend_request` and :func:`recommend_batch_request` read requests with it unless told ``native=False``;
#: :func:`recommend_request_fields` is its reference (``tests/service/test_grpc_native_decoding.py``).
NATIVE_DECODING: bool = _native_schema is not None and _same_schema(_native_schema())


#: The compiled decoding's builder of history models: with it, a history in the column form that the model accepts
#: as it is comes decoded as the ``SubflowHistory`` itself, built as ``model_construct`` builds one, and pydantic
#: takes it as it is (issue 16: two such histories were ~5.5 of the ~10 µs pydantic-core took for an agent's context);
#: any other history comes as plain values, for pydantic to validate or refuse naming the field. None where the
#: compiled decoding lacks it or the model holds checks it would not make (:func:`history_model_checks`).
HISTORY_MODEL: Any = _history_model() if NATIVE_DECODING else None

#: The compiled decoding's builder of interface models (:data:`HISTORY_MODEL`'s reason and way: an interface whose
#: values the model accepts as they are comes decoded as the ``InterfaceContext`` itself, any other as plain values;
#: ~2.5 of the ~6 µs pydantic-core still took for an agent's context once its histories came as models). None where
#: the compiled decoding lacks it or the model holds checks it would not make (:func:`interface_model_checks`).
INTERFACE_MODEL: Any = _interface_model() if NATIVE_DECODING else None

#: The compiled decoding's arguments after the bytes: the wire enums' tables it reads enum values through (a value
#: missing stays an ``int``), and the model builders where the build has them.
_DECODING_ARGS: tuple[Any, ...] = (
    ACCESS_FROM_PROTO,
    PROFILE_FROM_PROTO,
    *((HISTORY_MODEL, INTERFACE_MODEL) if _NativeHistoryModel is not None else ()),
)


#: Whether the compiled encoding of replies (``edgepath_native.encode_message``; service/native/src/reply.rs) is
#: installed and generated from the same schema as :mod:`edgepath.wire` (:data:`NATIVE_DECODING`'s check). Where it
#: is, :func:`recommendation_batch_wire` writes replies with it unless told ``native=False``;
#: :func:`recommendation_batch_to_proto` is its reference (``tests/service/test_grpc_native_encoding.py``).
NATIVE_ENCODING: bool = _native_encode is not None and NATIVE_DECODING

#: The compiled gRPC parts by name, each installed and of this schema: the start-up line names them, the image's
#: ``REQUIRE_NATIVE`` verify requires them.
COMPILED_WIRE: dict[str, bool] = {"request decoding": NATIVE_DECODING, "reply encoding": NATIVE_ENCODING}


def stale_compiled_wire(installed: bool | None = None, same_schema: bool | None = None) -> str | None:
    """The start-up warning of an ``edgepath_native`` that is installed but was built from another
    proto/edgepath/v1/edgepath.proto than the wire code of this checkout (the proto edited and proto/generate.py run
    without a rebuild): its compiled gRPC parts are off (:data:`COMPILED_WIRE`), which the start-up line alone says
    only as "no". None where it is not installed or matches. ``installed``, ``same_schema``: this process's, unless
    given."""
    installed = _native_schema is not None if installed is None else installed
    same_schema = NATIVE_DECODING if same_schema is None else same_schema
    if not installed or same_schema:
        return None
    return (
        "edgepath_native is installed but was built from another proto/edgepath/v1/edgepath.proto than this "
        f"checkout's wire code: compiled gRPC {' and '.join(COMPILED_WIRE)} are off (the Python converters serve "
        "every call, slower); `make setup` rebuilds it"
    )


#: The wire enums' tables the compiled encoding writes enum members through, by the proto enum's full name.
_ENUM_NUMBERS: dict[str, dict[Any, int]] = {
    pb.AccessType.DESCRIPTOR.full_name: ACCESS_TO_PROTO,
    pb.ApplicationProfile.DESCRIPTOR.full_name: PROFILE_TO_PROTO,
}
_BATCH_RESPONSE = pb.RecommendBatchResponse.DESCRIPTOR.full_name
_RECOMMENDATION = pb.Recommendation.DESCRIPTOR.full_name
#: The bytes of the section objects the engine adapters share between replies (the same frozen object per distinct
#: steering rule and per congestion context, whose messages :data:`_STEERING_PB` and :data:`_CONGESTION_PB` keep),
#: kept by identity by the compiled encoding (``WireMemo``: weak references, 4,096 at most): their encoding was ~65 %
#: of a Recommend's (issue 16). The MLPM section is made per request for an agent's context and is encoded each time.
_WIRE_MEMO = (
    _NativeWireMemo([pb.SteeringAdvice.DESCRIPTOR.full_name, pb.CongestionAdvice.DESCRIPTOR.full_name], 4096)
    if NATIVE_ENCODING and _NativeWireMemo is not None
    else None
)


def recommendation_batch_wire(batch: RecommendBatch, shared: Sequence[bool], native: bool = True) -> bytes:
    """``RecommendBatch`` → ``RecommendBatchResponse`` wire bytes (what the gRPC method answers; ``shared`` as
    :func:`recommendation_batch_to_proto`'s).

    ``native``: written by the compiled encoding where installed (:data:`NATIVE_ENCODING`): each field read from
    the model attribute of its name, the same bytes as :func:`recommendation_batch_to_proto` serialised, without a
    protobuf message per reply and section (issue 16: 9.4 → 3.6 µs per decision of a batch of agent contexts, in
    process). False: :func:`recommendation_batch_to_proto`, serialised.

    Raises
    ------
    TypeError, KeyError
        A section holds a value its proto field cannot carry (the service's bug; the message names the field).
    """
    if native and NATIVE_ENCODING:
        return _native_encode(_BATCH_RESPONSE, batch, _ENUM_NUMBERS, _WIRE_MEMO)  # type: ignore[no-any-return]
    return recommendation_batch_to_proto(batch, shared).SerializeToString()


def recommendation_wire(rec: Recommendation, shared: bool = True, native: bool = True) -> bytes:
    """``Recommendation`` → its wire bytes (what ``Recommend`` and ``RecommendStream`` answer; ``shared`` as
    :func:`recommendation_to_proto`'s): by the compiled encoding where installed and ``native``
    (:func:`recommendation_batch_wire`'s), else :func:`recommendation_to_proto` serialised. Raises as
    :func:`recommendation_batch_wire`."""
    if native and NATIVE_ENCODING:
        return _native_encode(_RECOMMENDATION, rec, _ENUM_NUMBERS, _WIRE_MEMO)  # type: ignore[no-any-return]
    return recommendation_to_proto(rec, shared).SerializeToString()


def recommendation_batch_to_proto(batch: RecommendBatch, shared: Sequence[bool]) -> pb.RecommendBatchResponse:
    """``RecommendBatch`` → proto; ``shared[i]``: :func:`recommendation_to_proto`'s ``shared`` of item ``i``.

    Each reply is built in place in the response (``add``): a list of finished messages would be copied into it,
    ~3 µs more per reply in a batch of 64 (issue 16)."""
    out = pb.RecommendBatchResponse()
    add = out.recommendations.add
    for r, s in zip(batch.recommendations, shared, strict=True):
        add(**_recommendation_fields(r, s))
    return out


def outcome_report(msg: pb.OutcomeRequest) -> OutcomeReport:
    """Validate an ``OutcomeRequest``; raises ``pydantic.ValidationError``."""
    d: dict[str, Any] = {
        "device_id": msg.device_id,
        "decision_id": msg.decision_id,
        "throughput_bps": msg.throughput_bps,
    }
    for name in ("latency_ms", "loss"):
        if msg.HasField(name):
            d[name] = getattr(msg, name)
    if msg.HasField("server_transfer"):  # issue 4
        d["server_transfer"] = server_transfer_dict(msg.server_transfer)
    if msg.HasField("congestion_measurement"):  # issue 20
        d["congestion_measurement"] = congestion_measurement_dict(msg.congestion_measurement)
    return OutcomeReport.model_validate(d)


def recommendation_to_proto(rec: Recommendation, shared: bool = True) -> pb.Recommendation:
    """``Recommendation`` → proto. ``shared``: the request's MLPM section may be an object the adapter shares
    between replies (:func:`edgepath.adapters.base.cacheable_context`), so its proto form is memoised; False
    passes its fields to the reply directly (made for this request alone, it would only cost the memo a weak
    reference and an eviction).
    The congestion and steering sections always go through the memo: their adapters share one object per context
    or per distinct rule (``edgepath.adapters.steering``), also for requests with subflow histories."""
    return pb.Recommendation(**_recommendation_fields(rec, shared))


def _recommendation_fields(rec: Recommendation, shared: bool) -> dict[str, Any]:
    """:func:`recommendation_to_proto`'s fields, for a ``Recommendation`` constructor or a repeated field's ``add``
    (the primary path as a dict: the constructor reads it in C, without a message of its own to copy)."""
    p = rec.primary_path
    return {
        "decision_id": rec.decision_id,
        "model_version": rec.model_version,
        "policy": rec.policy,
        "primary_path": {
            "interface": p.interface,
            "access_type": ACCESS_TO_PROTO[p.access_type],
            "propensity": p.propensity,
            "arms": [ACCESS_TO_PROTO[a] for a in p.arms],
        },
        "decided_at_unix_ms": rec.decided_at_unix_ms,
        "scheduler": (_SCHEDULER_PB if shared else _scheduler_fields)(rec.scheduler),  # issue 3
        "congestion": _CONGESTION_PB(rec.congestion),  # issue 3
        "server_selection": server_selection_to_proto(rec.server_selection),  # issue 4 (None leaves it unset)
        "steering": _STEERING_PB(rec.steering),  # issue 19 (None leaves it unset)
    }


def ack_to_proto(ack: OutcomeAck) -> pb.OutcomeAck:
    return pb.OutcomeAck(decision_id=ack.decision_id, accepted=ack.accepted, duplicate=ack.duplicate, reward=ack.reward)


# --- MLPM scheduler weights + congestion-control advice (issue 3) -------------------------------------------------


def mlpm_cc_request_fields(msg: pb.RecommendRequest) -> dict[str, Any]:
    """Issue-3 fields of a ``RecommendRequest`` as plain values for pydantic validation."""
    d: dict[str, Any] = {
        # Unknown enum values stay raw ints so validation names the field.
        "application_profile": PROFILE_FROM_PROTO.get(msg.application_profile, msg.application_profile),
        "subflow_histories": [_history_fields(h) for h in msg.subflow_histories],
    }
    if msg.HasField("kernel"):
        k = msg.kernel
        d["kernel"] = {
            "available_congestion_controls": list(k.available_congestion_controls),
            "allowed_congestion_controls": list(k.allowed_congestion_controls),
            "mptcp_schedulers": list(k.mptcp_schedulers),
            "path_managers": list(k.path_managers),
        }
    return d


def _history_fields(h: pb.SubflowHistory) -> dict[str, Any]:
    """A ``SubflowHistory`` as plain values: its columns as lists (C-level copies of the packed doubles), its sample
    messages (the older form) as sample dicts; an empty form is left out, so validation sees what was sent."""
    d: dict[str, Any] = {"interface": h.interface}
    if h.rtt_samples:
        d["rtt_samples"] = [{"t_ms": s.t_ms, "rtt_ms": s.rtt_ms} for s in h.rtt_samples]
    if h.throughput_samples:
        d["throughput_samples"] = [{"t_ms": s.t_ms, "throughput_bps": s.throughput_bps} for s in h.throughput_samples]
    for column in _HISTORY_COLUMNS:
        values = getattr(h, column)
        if values:
            d[column] = values[:]  # a list, copied in C (half the time of list(values) for 20 doubles)
    return d


#: The columns of ``SubflowHistory`` (its repeated doubles), read from the proto descriptor rather than written out.
_HISTORY_COLUMNS = tuple(
    f.name for f in pb.SubflowHistory.DESCRIPTOR.fields if f.is_repeated and f.type == f.TYPE_DOUBLE
)
_CONGESTION_METRICS = ("hol_degree_ms", "protocol_delay_ms", "drop_rate", "throughput_bps")


def congestion_measurement_dict(m: pb.CongestionMeasurement) -> dict[str, Any]:
    """``CongestionMeasurement`` → plain values for :class:`~edgepath.types.CongestionMeasurement` (issue 20);
    metrics copied only when present."""
    d: dict[str, Any] = {"algorithm": m.algorithm}
    for name in _CONGESTION_METRICS:
        if m.HasField(name):
            d[name] = getattr(m, name)
    return d


def scheduler_to_proto(s: SchedulerAdvice | None) -> pb.SchedulerAdvice | None:
    """``SchedulerAdvice`` → proto (None stays None); None forecasts stay unset (proto3 optional).

    One ``model_dump`` and one constructor that reads the nested dicts in C: building each ``SubflowWeight``
    message first and copying it into the parent cost ~2 µs more per section (issue 16)."""
    fields = _scheduler_fields(s)
    return None if fields is None else pb.SchedulerAdvice(**fields)


def _scheduler_fields(s: SchedulerAdvice | None) -> dict[str, Any] | None:
    """:func:`scheduler_to_proto`'s fields, for a section made for one reply: the reply's constructor reads the dict
    in C, where a message of its own would be built and then copied into it (~1 µs more per reply, issue 16)."""
    return None if s is None else s.model_dump(exclude_none=True)


def congestion_to_proto(c: CongestionAdvice) -> pb.CongestionAdvice:
    """``CongestionAdvice`` → proto."""
    fields = c.model_dump()
    fields["profile"] = PROFILE_TO_PROTO[c.profile]
    return pb.CongestionAdvice(**fields)


# --- end issue 3 ----------------------------------------------------------------------------------------------------


# --- SSMP CDN server selection (issue 4) ----------------------------------------------------------------------------
def _server_path_dict(p: pb.ServerPath) -> dict[str, Any]:
    d: dict[str, Any] = {"interface": p.interface, "rtt_ms_samples": list(p.rtt_ms_samples)}
    for name in ("loss", "bandwidth_bps"):
        if p.HasField(name):
            d[name] = getattr(p, name)
    return d


def ssmp_request_fields(msg: pb.RecommendRequest) -> dict[str, Any]:
    """Issue-4 ``content`` of a ``RecommendRequest`` as plain values (absent when the message has none)."""
    if not msg.HasField("content"):
        return {}
    c = msg.content
    content: dict[str, Any] = {
        "expected_size_bytes": c.expected_size_bytes,
        "candidates": [
            {
                "address": s.address,
                "dns_interface": s.dns_interface,
                "paths": [_server_path_dict(p) for p in s.paths],
            }
            for s in c.candidates
        ],
    }
    if c.HasField("default_interface"):
        content["default_interface"] = c.default_interface
    return {"content": content}


def server_transfer_dict(t: pb.ServerTransfer) -> dict[str, Any]:
    """``ServerTransfer`` → plain values for :class:`~edgepath.types.ServerTransfer`."""
    return {
        "address": t.address,
        "size_bytes": t.size_bytes,
        "duration_ms": t.duration_ms,
        "paths": [_server_path_dict(p) for p in t.paths],
    }


def server_selection_to_proto(s: ServerSelection | None) -> pb.ServerSelection | None:
    """``ServerSelection`` → proto (None stays None); a None score stays unset."""
    if s is None:
        return None
    return pb.ServerSelection(**s.model_dump(exclude_none=True))


# --- end issue 4 ----------------------------------------------------------------------------------------------------


# --- ATSSS steering rules (issue 19) ------------------------------------------------------------------------------
def steering_to_proto(s: SteeringAdvice | None) -> pb.SteeringAdvice | None:
    """``SteeringAdvice`` → proto (None stays None); None fields stay unset, access types become enum values.

    One ``model_dump`` and one constructor over the nested dicts, as :func:`scheduler_to_proto` (a rule with two
    accesses: ~12.6 → 8.0 µs)."""
    if s is None:
        return None
    d = s.model_dump(exclude_none=True)
    for rule, rule_dict in zip(s.rules, d["rules"], strict=True):
        for access, access_dict in zip(rule.accesses, rule_dict["accesses"], strict=True):
            access_dict["access_type"] = ACCESS_TO_PROTO[access.access_type]
    return pb.SteeringAdvice(**d)


# issue 16: the proto form of the shared section objects, converted once per object (IdentityMemo; their messages are
# only ever copied into a reply, a proto constructor copies sub-messages, never handed out).
_SCHEDULER_PB = IdentityMemo(scheduler_to_proto)
_CONGESTION_PB = IdentityMemo(congestion_to_proto)
_STEERING_PB = IdentityMemo(steering_to_proto)
