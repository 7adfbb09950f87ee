"""The compiled gRPC request decoding (service/native/src/request.rs, ``edgepath_native``) against its reference,
:func:`edgepath.grpc.convert.recommend_request_fields`.

Messages are drawn from the proto's own descriptors, every field of every message a request reaches (a field added
to the proto is drawn without this file changing), with any value the wire carries: NaN and infinities, enum values
the service does not know, empty and absent sub-messages. The compiled decoding must give the same plain values,
compared by ``repr`` (key order, ``int`` against ``float``, ``-0.0`` and NaN show), and the same validated request
or the same validation error. Since Session 51 a history the model accepts as it is comes decoded as its model
(:data:`edgepath.grpc.convert.HISTORY_MODEL`): the plain values compared here are those without it, and the
validated requests are compared with it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from edgepath.grpc import convert
from edgepath.types import MAX_HISTORY_SAMPLES, MAX_NAME_LEN, InterfaceContext, SubflowHistory
from edgepath.wire import edgepath_pb2 as pb
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import given, settings
from hypothesis import strategies as st
from native_twin import compiled_package, decoded_fields, messages, require_compiled
from pydantic import Field, ValidationError, field_validator
from test_grpc_convert import FULL_REQUEST, REQUEST_FIELDS

compiled_part = require_compiled(convert.NATIVE_DECODING, "the compiled request decoding")

edgepath_native = compiled_package()  # None where not installed: each test fails, above

ENUMS = (convert.ACCESS_FROM_PROTO, convert.PROFILE_FROM_PROTO)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)  # what UTF-8 can carry
SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FieldDescriptor.TYPE_DOUBLE: st.floats() | st.sampled_from([-0.0, 0.0, float("nan"), 5e-324]),
    FieldDescriptor.TYPE_INT32: st.integers(-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: st.integers(-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_STRING: TEXT | st.sampled_from(["wlan0", "wwan0"]),
    FieldDescriptor.TYPE_ENUM: st.integers(-2, 7),  # open enums: values the service does not know too
}


REQUESTS = messages(pb, pb.RecommendRequest.DESCRIPTOR, SCALARS)


def native_fields(msg: pb.RecommendRequest) -> Any:
    return edgepath_native.recommend_fields(msg.SerializeToString(), *ENUMS)


@settings(max_examples=400, deadline=None)
@given(REQUESTS)
def test_a_request_decodes_to_the_same_plain_values(msg: pb.RecommendRequest) -> None:
    assert repr(native_fields(msg)) == repr(convert.recommend_request_fields(msg))


@settings(max_examples=100, deadline=None)
@given(st.lists(REQUESTS, max_size=4))
def test_a_batch_decodes_to_each_requests_plain_values_in_order(requests: list[pb.RecommendRequest]) -> None:
    wire = pb.RecommendBatchRequest(requests=requests).SerializeToString()
    want = [convert.recommend_request_fields(r) for r in requests]
    assert repr(edgepath_native.recommend_batch_fields(wire, *ENUMS)) == repr(want)


def _validated(read: Any) -> str:
    """The validated value, or the validation error as the transports report it (each error's location and message;
    not the input pydantic was handed, which holds a history as its model where the compiled decoding built it)."""
    try:
        return repr(read())
    except ValidationError as exc:
        return f"invalid: {exc.errors(include_url=False, include_input=False)!r}"


@settings(max_examples=200, deadline=None)
@given(REQUESTS)
def test_the_validated_request_or_its_error_is_the_same(msg: pb.RecommendRequest) -> None:
    native = _validated(lambda: convert.recommend_request(msg, native=True))
    assert native == _validated(lambda: convert.recommend_request(msg, native=False))
    batch = pb.RecommendBatchRequest(requests=[msg, msg])
    assert _validated(lambda: convert.recommend_batch_request(batch, native=True)) == _validated(
        lambda: convert.recommend_batch_request(batch, native=False)
    )


@pytest.mark.parametrize("path", list(REQUEST_FIELDS))
def test_every_field_of_a_request_reaches_the_compiled_decoding(path: str) -> None:
    """A request with every field of the proto set (its messages' too) decodes with the compiled decoding to each
    value the Python reader reads, alone and in a batch: both name the fields they copy by hand (request.rs,
    grpc/convert.py), so a field added to the proto that the compiled one misses is named here."""
    python = decoded_fields(
        convert.recommend_request_values(FULL_REQUEST, native=False), pb.RecommendRequest.DESCRIPTOR
    )
    native = decoded_fields(convert.recommend_request_values(FULL_REQUEST, native=True), pb.RecommendRequest.DESCRIPTOR)
    batch = pb.RecommendBatchRequest(requests=[FULL_REQUEST]).SerializeToString()
    (item,) = edgepath_native.recommend_batch_fields(batch, *convert._DECODING_ARGS)
    in_batch = decoded_fields(item, pb.RecommendRequest.DESCRIPTOR)
    assert native[path] is not None, f"{path} is set on the wire but the compiled decoding (request.rs) drops it"
    assert repr(native[path]) == repr(python[path]) == repr(in_batch[path])


def test_a_request_with_every_field_set_decodes_its_interfaces_as_the_model() -> None:
    """The interfaces of :data:`FULL_REQUEST` (each measurement within the model's bounds) come as the model the
    compiled decoding builds (``InterfaceModel``), so the check above covers that path too."""
    values = convert.recommend_request_values(FULL_REQUEST, native=True)
    assert type(values["interfaces"][0]) is InterfaceContext


def test_an_agents_request_decodes_to_the_values_it_carries() -> None:
    """One request written out: what the agent sends (radio readings, columns of samples, kernel, sections)."""
    msg = pb.RecommendRequest(
        device_id="phone-1",
        interfaces=[
            pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI, wifi_rssi_dbm=-61.0, cqi=0),
            pb.InterfaceContext(name="wwan0", access_type=9, rsrp_dbm=-97.0),
        ],
        subflow_histories=[pb.SubflowHistory(interface="wlan0", rtt_t_ms=[1.0, 2.0], rtt_ms=[30.0, 31.5])],
        application_profile=pb.APPLICATION_PROFILE_STREAMING,
        kernel=pb.KernelCapabilities(mptcp_schedulers=["default"]),
        sections=["primary_path"],
    )
    d = native_fields(msg)
    assert d["interfaces"][0] == {
        "name": "wlan0",
        "access_type": convert.ACCESS_FROM_PROTO[1],
        "wifi_rssi_dbm": -61.0,
        "cqi": 0,
    }
    assert d["interfaces"][1]["access_type"] == 9  # unknown: the int, for validation to name
    assert d["subflow_histories"] == [{"interface": "wlan0", "rtt_t_ms": [1.0, 2.0], "rtt_ms": [30.0, 31.5]}]
    assert d["kernel"]["mptcp_schedulers"] == ["default"] and d["kernel"]["path_managers"] == []
    assert d["sections"] == ["primary_path"] and "content" not in d


@pytest.mark.parametrize("wire", [b"\xff", b"\x0a\x05ab", b"\x12\x02\x08"])
def test_bytes_that_do_not_decode_are_handed_back(wire: bytes) -> None:
    assert edgepath_native.recommend_fields(wire, *ENUMS) is None
    assert edgepath_native.recommend_batch_fields(wire, *ENUMS) is None


def _schema() -> descriptor_pb2.FileDescriptorSet:
    return descriptor_pb2.FileDescriptorSet.FromString(edgepath_native.wire_schema())


def _message(fds: descriptor_pb2.FileDescriptorSet, name: str) -> Any:
    return next(m for m in fds.file[0].message_type if m.name == name)


@pytest.mark.parametrize(
    "change",
    [
        lambda fds: setattr(_message(fds, "InterfaceContext").field[2], "number", 99),
        lambda fds: _message(fds, "SubflowHistory").field.add(name="jitter_ms", number=8, type=1, label=3),
        lambda fds: setattr(_message(fds, "ServerPath").field[2], "proto3_optional", False),
        lambda fds: setattr(_message(fds, "RecommendRequest").field[0], "name", "device"),
        lambda fds: _message(fds, "InterfaceContext").field[2].ClearField("oneof_index"),
        lambda fds: _message(fds, "ContentRequest").nested_type.add(name="Hint").field.add(name="x", number=1, type=1),
    ],
)
def test_a_decoding_built_from_another_proto_is_not_used(change: Any) -> None:
    assert convert._same_schema(_schema().SerializeToString())
    fds = _schema()
    change(fds)
    assert not convert._same_schema(fds.SerializeToString())


# --- histories decoded as their models (request.rs: HistoryModel; convert.HISTORY_MODEL), Session 51 ---------------

#: Each column's bounds (ms, ms, ms, bit/s), as the model declares them.
BOUNDS = {"rtt_t_ms": 1e13, "rtt_ms": 600_000.0, "throughput_t_ms": 1e13, "throughput_bps": 1e12}
#: What no column admits, and what lies just outside one column's bounds or at them.
EDGE_VALUES = [float("nan"), float("inf"), -float("inf"), -1.0, -5e-324, 5e-324, -0.0]
EDGE_VALUES += [x for hi in BOUNDS.values() for x in (hi, math.nextafter(hi, math.inf))]
NAMES = st.sampled_from(["", "wlan0", "w" * 64, "w" * 65, "é" * 64, "é" * 65, "wwan0"])


@st.composite
def column_histories(draw: st.DrawFn) -> pb.SubflowHistory:
    """A history in the column form: valid values, often one edge value put in one column (just outside a bound,
    or at it, NaN...), sometimes columns of unequal length or too many samples, sometimes sample objects beside."""
    n = draw(st.integers(0, 66) | st.integers(0, 3))
    columns = {k: draw(st.lists(st.floats(0.0, hi), min_size=n, max_size=n)) for k, hi in BOUNDS.items()}
    if n and draw(st.booleans()):
        column = draw(st.sampled_from(sorted(columns)))
        columns[column][draw(st.integers(0, n - 1))] = draw(st.sampled_from(EDGE_VALUES))
    if draw(st.integers(0, 9)) == 0:
        columns[draw(st.sampled_from(sorted(columns)))].append(1.0)
    h = pb.SubflowHistory(interface=draw(NAMES), **columns)
    if draw(st.integers(0, 9)) == 0:
        h.rtt_samples.add(t_ms=1.0, rtt_ms=2.0)
    return h


def _histories_validated(read: Any) -> str:
    """The validated request's histories with the fields each had set, or the validation error."""
    try:
        request = read()
    except ValidationError as exc:
        return f"invalid: {exc.errors(include_url=False, include_input=False)!r}"
    return repr([(h, sorted(h.model_fields_set)) for h in request.subflow_histories])


@settings(max_examples=300, deadline=None)
@given(st.lists(column_histories(), min_size=1, max_size=2))
def test_a_history_decoded_as_its_model_is_the_one_pydantic_validates(histories: list[pb.SubflowHistory]) -> None:
    """The compiled decoding builds a history's model only where pydantic would accept its values as they are: the
    same model with the same fields set, or the same error (naming the same field) where pydantic refuses."""
    assert convert.HISTORY_MODEL is not None
    interfaces = [pb.InterfaceContext(name=n, access_type=pb.ACCESS_TYPE_WIFI) for n in ("wlan0", "wwan0")]
    names = iter(["wlan0", "wwan0"])
    for h in histories:  # most name an interface, so the request's own check passes and the histories show
        if h.interface in ("", "wlan0"):
            h.interface = next(names)
    msg = pb.RecommendRequest(device_id="phone-1", interfaces=interfaces, subflow_histories=histories)
    batch = pb.RecommendBatchRequest(requests=[msg, msg])
    native = _histories_validated(lambda: convert.recommend_request(msg, native=True))
    assert native == _histories_validated(lambda: convert.recommend_request(msg, native=False))
    assert _histories_validated(lambda: convert.recommend_batch_request(batch, native=True).requests[1]) == (
        _histories_validated(lambda: convert.recommend_batch_request(batch, native=False).requests[1])
    )


def _edge_cases() -> list[tuple[str, pb.SubflowHistory]]:
    """One history per edge: each column with one edge value among valid ones, each column one sample too long or
    at the most samples, each name length, unequal columns, both forms at once."""
    cases = []
    valid = {k: [1.0, 2.0, 3.0] for k in BOUNDS}
    for column in BOUNDS:
        for value in EDGE_VALUES:
            columns = {k: list(v) for k, v in valid.items()}
            columns[column][1] = value
            cases.append((f"{column}={value!r}", pb.SubflowHistory(interface="wlan0", **columns)))
        for n in (MAX_HISTORY_SAMPLES, MAX_HISTORY_SAMPLES + 1):
            columns = {k: [1.0] * n if k.split("_")[0] == column.split("_")[0] else [] for k in BOUNDS}
            cases.append((f"{column}*{n}", pb.SubflowHistory(interface="wlan0", **columns)))
    for name in ("w" * MAX_NAME_LEN, "w" * (MAX_NAME_LEN + 1), "é" * MAX_NAME_LEN, "é" * (MAX_NAME_LEN + 1)):
        cases.append((f"name of {len(name)}", pb.SubflowHistory(interface=name, **valid)))
    cases.append(("unequal", pb.SubflowHistory(interface="wlan0", rtt_t_ms=[1.0], rtt_ms=[1.0, 2.0])))
    both = pb.SubflowHistory(interface="wlan0", **valid)
    both.rtt_samples.add(t_ms=1.0, rtt_ms=2.0)
    cases.append(("both forms", both))
    return cases


@pytest.mark.parametrize(("case", "history"), _edge_cases(), ids=[c for c, _ in _edge_cases()])
def test_each_edge_of_a_history_decodes_as_pydantic_validates_it(case: str, history: pb.SubflowHistory) -> None:
    """A value at a bound is accepted as the model, one just outside it (NaN, an infinity, one sample too many, a
    name one character too long, unequal columns, both forms) is refused by pydantic with its error."""
    interfaces = [pb.InterfaceContext(name=history.interface, access_type=pb.ACCESS_TYPE_WIFI)]
    msg = pb.RecommendRequest(device_id="phone-1", interfaces=interfaces, subflow_histories=[history])
    native = _histories_validated(lambda: convert.recommend_request(msg, native=True))
    assert native == _histories_validated(lambda: convert.recommend_request(msg, native=False))


#: Each measurement's bounds as the model declares them (dBm, Mbit/s, MHz, dBm, dB, dB, CQI, dBm, ms, fraction, dB,
#: Mbit/s, dB, MHz), in the proto's order.
_MEASUREMENTS = {m: next(a for a in p["anyOf"] if a["type"] != "null")  # from the JSON schema: types.Cqi's too
                 for m, p in InterfaceContext.model_json_schema()["properties"].items()
                 if m not in ("name", "access_type")}  # fmt: skip
MEASUREMENT_BOUNDS = {m: (p["minimum"], p["maximum"]) for m, p in _MEASUREMENTS.items()}
#: Names at and just past each rule of ``IFNAME_PATTERN`` and the length bound (characters).
IFNAMES = ["wlan0", "w" * MAX_NAME_LEN, "w" * (MAX_NAME_LEN + 1), "é" * MAX_NAME_LEN, "é" * (MAX_NAME_LEN + 1), ""]
IFNAMES += [f"w{c}0" for c in ("/", " ", "\t", "\n", "\x00", "\x1f", "\x7f", "\x80", "\x85", "\xa0", "\u2003")]
IFNAMES += ["w\u200b0", "wé0", "w🛰0", "w:0", "w.0", "w-0", "w@0"]


def _interface_edge_cases() -> list[tuple[str, pb.InterfaceContext]]:
    """One interface per edge: each measurement at its bounds, just past them, NaN, an infinity; each name of
    :data:`IFNAMES`; each access type the wire carries, known to the service or not."""
    cases = []
    for m, (lo, hi) in MEASUREMENT_BOUNDS.items():
        edges = [lo, hi, -1 if lo == 0 else lo - 1, hi + 1] if m == "cqi" else [lo, hi, -0.0, float("nan")]
        if m != "cqi":
            edges += [math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf), float("inf"), -float("inf")]
        for value in edges:
            kind = int if m == "cqi" else float
            iface = pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_LTE, **{m: kind(value)})
            cases.append((f"{m}={value!r}", iface))
    for name in IFNAMES:
        cases.append((f"name {name!r}", pb.InterfaceContext(name=name, access_type=pb.ACCESS_TYPE_WIFI, rtt_ms=9.0)))
    for access in range(-1, 6):
        cases.append((f"access {access}", pb.InterfaceContext(name="wlan0", access_type=access)))
    return cases


@pytest.mark.parametrize(("case", "iface"), _interface_edge_cases(), ids=[c for c, _ in _interface_edge_cases()])
def test_each_edge_of_an_interface_decodes_as_pydantic_validates_it(case: str, iface: pb.InterfaceContext) -> None:
    """A value at a bound is accepted as the model (the same fields set), one past it is refused by pydantic with its
    error; so is a name the pattern refuses or an access type the service does not know."""
    msg = pb.RecommendRequest(device_id="phone-1", interfaces=[iface])

    def interfaces(native: bool) -> str:
        try:
            request = convert.recommend_request(msg, native=native)
        except ValidationError as exc:
            return f"invalid: {exc.errors(include_url=False, include_input=False)!r}"
        return repr([(i, sorted(i.model_fields_set)) for i in request.interfaces])

    assert interfaces(True) == interfaces(False)


def test_an_agents_history_comes_decoded_as_a_frozen_model_with_the_fields_it_carried() -> None:
    msg = pb.RecommendRequest(
        device_id="phone-1",
        interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)],
        subflow_histories=[pb.SubflowHistory(interface="wlan0", rtt_t_ms=[1.0, 2.0], rtt_ms=[30.0, 31.5])],
    )
    decoded = edgepath_native.recommend_fields(msg.SerializeToString(), *convert._DECODING_ARGS)
    (h,) = decoded["subflow_histories"]
    assert type(h) is SubflowHistory and type(decoded["interfaces"][0]) is InterfaceContext
    assert decoded["interfaces"][0].model_fields_set == {"name", "access_type"}
    assert h.model_fields_set == {"interface", "rtt_t_ms", "rtt_ms"}
    assert h.model_dump() == SubflowHistory(interface="wlan0", rtt_t_ms=[1.0, 2.0], rtt_ms=[30.0, 31.5]).model_dump()
    with pytest.raises(ValidationError, match="frozen"):
        h.interface = "wwan0"  # type: ignore[misc]
    out_of_bounds = pb.SubflowHistory(interface="wlan0", rtt_t_ms=[1.0], rtt_ms=[600_001.0])
    msg.subflow_histories[0].CopyFrom(out_of_bounds)
    (d,) = edgepath_native.recommend_fields(msg.SerializeToString(), *convert._DECODING_ARGS)["subflow_histories"]
    assert d == {"interface": "wlan0", "rtt_t_ms": [1.0], "rtt_ms": [600_001.0]}  # plain values, for pydantic


def test_the_compiled_interface_checks_are_read_from_the_model() -> None:
    assert convert.interface_model_refusal() is None  # else: why the model is not built (a field, a check)
    assert convert.interface_model_checks() == {"name_max": MAX_NAME_LEN, "bounds": list(MEASUREMENT_BOUNDS.values())}
    # built where the compiled decoding is (a check or field the compiled one lacks would turn it off unnoticed)
    assert convert.INTERFACE_MODEL is not None and convert.HISTORY_MODEL is not None
    assert tuple(edgepath_native.InterfaceModel.MEASUREMENTS) == tuple(MEASUREMENT_BOUNDS)

    class Checked(InterfaceContext):  # a check the compiled decoding does not make: every interface to pydantic
        @field_validator("rtt_ms")
        @classmethod
        def _short(cls, v: float | None) -> float | None:
            return v

    class Named(InterfaceContext):
        name: str = Field(min_length=1, max_length=MAX_NAME_LEN, pattern=r"^w")

    class Unbounded(InterfaceContext):
        loss: float | None = None

    assert convert.interface_model_checks(Checked) is None
    assert convert.interface_model_checks(Named) is None
    assert convert.interface_model_checks(Unbounded) is None
    assert "validator" in (convert.interface_model_refusal(Checked) or "")
    assert "IFNAME_PATTERN" in (convert.interface_model_refusal(Named) or "")
    assert "loss: not a float bounded" in (convert.interface_model_refusal(Unbounded) or "")

    class Extended(InterfaceContext):  # a measurement the compiled decoding does not read
        jitter_ms: float | None = Field(default=None, ge=0.0, le=1e4)

    assert convert.interface_model_checks(Extended) is None
    assert "jitter_ms" in (convert.interface_model_refusal(Extended) or "")


def test_the_compiled_history_checks_are_read_from_the_model() -> None:
    assert convert.history_model_refusal() is None  # else: why the model is not built
    assert convert.history_model_checks() == {
        "name_max": MAX_NAME_LEN,
        "max_len": MAX_HISTORY_SAMPLES,
        "t_ms": (0.0, 1e13),
        "rtt_ms": (0.0, 600_000.0),
        "throughput_bps": (0.0, 1e12),
    }

    class Checked(SubflowHistory):  # a check the compiled decoding does not make: every history to pydantic
        @field_validator("rtt_ms")
        @classmethod
        def _short(cls, v: list[float]) -> list[float]:
            return v

    class Named(SubflowHistory):
        interface: str = Field(min_length=1, max_length=MAX_NAME_LEN, pattern=r"^w")

    class Wider(SubflowHistory):
        rtt_ms: list[float] = Field(default_factory=list, max_length=MAX_HISTORY_SAMPLES)

    assert convert.history_model_checks(Checked) is None
    assert convert.history_model_checks(Named) is None
    assert convert.history_model_checks(Wider) is None
    assert "validator" in (convert.history_model_refusal(Checked) or "")
    assert "interface name" in (convert.history_model_refusal(Named) or "")
    assert "rtt_ms" in (convert.history_model_refusal(Wider) or "")
