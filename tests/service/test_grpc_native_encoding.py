"""The compiled reply encoding (service/native/src/reply.rs, ``edgepath_native.encode_message``) against its
reference, :func:`edgepath.grpc.convert.recommendation_batch_to_proto` serialised by protobuf (upb).

Two kinds of input. Replies drawn from the proto's own descriptors, every field of every message a
``RecommendBatchResponse`` reaches with any value its type carries (NaN, -0.0, zero in a field with and without
presence, empty and absent sub-messages; a field added to the proto is drawn without this file changing), handed to
the encoder as plain objects with one attribute per field: the bytes must be protobuf's, byte for byte. And the
service's own replies, decided by a real plane for agent, gateway and content requests: the same bytes as the
converters of :mod:`edgepath.grpc.convert`.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from edgepath.adapters.base import cacheable_context
from edgepath.grpc import convert
from edgepath.main import Service
from edgepath.settings import Settings
from edgepath.types import AccessType, Principal, RecommendBatch
from edgepath.wire import edgepath_pb2 as pb
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import given, settings
from hypothesis import strategies as st
from native_twin import compiled_package, messages, require_compiled
from service_harness import reply_requests

compiled_part = require_compiled(convert.NATIVE_ENCODING, "the compiled reply encoding")

edgepath_native = compiled_package()  # None where not installed: each test fails, above

BATCH = pb.RecommendBatchResponse.DESCRIPTOR.full_name
#: A wire enum's values as the service's members, by the enum's full name (the encoder's tables, reversed).
MEMBERS = {name: {number: member for member, number in table.items()} for name, table in convert._ENUM_NUMBERS.items()}
SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FieldDescriptor.TYPE_DOUBLE: st.floats() | st.sampled_from([-0.0, 0.0, float("nan"), 5e-324]),
    FieldDescriptor.TYPE_INT32: st.integers(-(2**31), 2**31 - 1) | st.just(0),
    FieldDescriptor.TYPE_INT64: st.integers(-(2**63), 2**63 - 1) | st.just(0),
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_STRING: st.text(st.characters(exclude_categories=("Cs",)), max_size=8) | st.just(""),
    # the service's replies carry only the values its enums have
    FieldDescriptor.TYPE_ENUM: st.sampled_from(sorted({n for t in convert._ENUM_NUMBERS.values() for n in t.values()})),
}


def _known_enums(msg: Any) -> bool:
    """Whether every enum value in ``msg``, set or at its default, is one of its own enum's members (the draw takes
    numbers of any of them; a reply's ``AccessType`` is never 0)."""
    for f in msg.DESCRIPTOR.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE and not f.is_repeated and not msg.HasField(f.name):
            continue
        value = getattr(msg, f.name)
        for v in value if f.is_repeated else [value]:
            if f.type == FieldDescriptor.TYPE_MESSAGE and not _known_enums(v):
                return False
            if f.type == FieldDescriptor.TYPE_ENUM and v not in MEMBERS[f.enum_type.full_name]:
                return False
    return True


REPLIES = messages(pb, pb.RecommendBatchResponse.DESCRIPTOR, SCALARS).filter(_known_enums)


def mirror(msg: Any) -> SimpleNamespace:
    """``msg`` as the service's models hold it: one attribute per field, None where unset (a message, a proto3
    ``optional``), lists for repeated fields, enum values as the service's members."""

    def value(f: FieldDescriptor, v: Any) -> Any:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            return mirror(v)
        if f.type == FieldDescriptor.TYPE_ENUM:
            return MEMBERS[f.enum_type.full_name][v]
        return v

    attrs: dict[str, Any] = {}
    for f in msg.DESCRIPTOR.fields:
        if f.is_repeated:
            attrs[f.name] = [value(f, v) for v in getattr(msg, f.name)]
        elif f.has_presence and not msg.HasField(f.name):
            attrs[f.name] = None
        else:
            attrs[f.name] = value(f, getattr(msg, f.name))
    return SimpleNamespace(**attrs)


def encode(obj: Any) -> bytes:
    out: bytes = edgepath_native.encode_message(BATCH, obj, convert._ENUM_NUMBERS)
    return out


@settings(max_examples=300, deadline=None)
@given(REPLIES)
def test_any_reply_encodes_to_protobufs_bytes(msg: pb.RecommendBatchResponse) -> None:
    assert encode(mirror(msg)) == msg.SerializeToString()


class _Slotted:
    """A reply member without an instance dict: read by attribute."""

    __slots__ = ("access_type", "arms", "interface", "propensity")

    def __init__(self) -> None:
        self.interface, self.access_type, self.propensity, self.arms = "wwan0", AccessType.LTE, 0.25, [AccessType.LTE]


def test_a_member_without_an_instance_dict_is_read_by_attribute() -> None:
    rec = mirror(pb.Recommendation(decision_id="d1", model_version=3))
    rec.primary_path = _Slotted()
    want = pb.RecommendBatchResponse(
        recommendations=[
            pb.Recommendation(
                decision_id="d1",
                model_version=3,
                primary_path=pb.PrimaryPath(
                    interface="wwan0", access_type=pb.ACCESS_TYPE_LTE, propensity=0.25, arms=[pb.ACCESS_TYPE_LTE]
                ),
            )
        ]
    )
    assert encode(SimpleNamespace(recommendations=[rec])) == want.SerializeToString()


def _reply_with(**primary_path: Any) -> SimpleNamespace:
    rec = mirror(
        pb.Recommendation(
            decision_id="d1", primary_path=pb.PrimaryPath(interface="wlan0", access_type=pb.ACCESS_TYPE_WIFI)
        )
    )
    for name, v in primary_path.items():
        setattr(rec.primary_path, name, v)
    return SimpleNamespace(recommendations=[rec])


@pytest.mark.parametrize(
    ("change", "error", "names"),
    [
        ({"propensity": "high"}, TypeError, "edgepath.v1.PrimaryPath.propensity"),
        ({"arms": [AccessType.WIFI, "satellite"]}, KeyError, "edgepath.v1.PrimaryPath.arms"),
        ({"access_type": 1}, KeyError, "edgepath.v1.PrimaryPath.access_type"),
    ],
)
def test_a_value_its_field_cannot_carry_is_an_error_naming_the_field(change: Any, error: Any, names: str) -> None:
    with pytest.raises(error, match=names.replace(".", r"\.")):
        encode(_reply_with(**change))


def test_a_member_missing_an_attribute_is_an_error_naming_the_field() -> None:
    reply = _reply_with()
    del reply.recommendations[0].primary_path.arms
    with pytest.raises(TypeError, match=r"edgepath\.v1\.PrimaryPath\.arms"):
        encode(reply)


@pytest.mark.parametrize("native_engines", [True, False], ids=["compiled engines", "python engines"])
def test_the_services_replies_encode_to_the_converters_bytes(native_engines: bool) -> None:
    service = Service.build(Settings(store_url="memory://", native_engines=native_engines))
    requests = reply_requests()

    async def decide() -> list[Any]:
        return await service.plane.recommend_batch([(Principal(device_id=r.device_id), r) for r in requests])

    batch = RecommendBatch(recommendations=asyncio.run(decide()))
    assert {"server_selection", "steering", "scheduler"} <= {
        k for r in batch.recommendations for k, v in r.__dict__.items() if v is not None
    }, "the replies fill every section somewhere"
    shared = [cacheable_context(r) for r in requests]
    python = convert.recommendation_batch_wire(batch, shared, native=False)
    assert convert.recommendation_batch_wire(batch, shared, native=True) == python
    assert python == convert.recommendation_batch_to_proto(batch, shared).SerializeToString()
    for rec, s in zip(batch.recommendations, shared, strict=True):  # one reply (Recommend, RecommendStream)
        assert convert.recommendation_wire(rec, s, native=True) == convert.recommendation_wire(rec, s, native=False)
        assert (
            convert.recommendation_wire(rec, s, native=False)
            == convert.recommendation_to_proto(rec, s).SerializeToString()
        )


# --- the memo of shared section objects (WireMemo) -------------------------------------------------------------------
STEERING = pb.SteeringAdvice.DESCRIPTOR.full_name
REC = pb.Recommendation.DESCRIPTOR.full_name


class _Section:
    """A section as any object with its message's attributes (weak references allowed, as a model's)."""

    def __init__(self, msg: Any) -> None:
        self.__dict__.update(vars(mirror(msg)))


def _steering(reason: str) -> pb.SteeringAdvice:
    rule = pb.SteeringRule(rule_precedence=255, steering_mode="ACTIVE_STANDBY", reason=reason)
    return pb.SteeringAdvice(rules=[rule], source="TS 23.501")


def _reply(steering: Any) -> SimpleNamespace:
    rec = mirror(pb.Recommendation(decision_id="d1", model_version=3))
    rec.steering = steering
    return rec


def _wire(rec: Any, memo: Any) -> bytes:
    out: bytes = edgepath_native.encode_message(REC, rec, convert._ENUM_NUMBERS, memo)
    return out


def test_a_kept_section_is_answered_with_its_bytes_and_only_for_that_object() -> None:
    memo = edgepath_native.WireMemo([STEERING], 16)
    first = _Section(_steering("standby"))
    want = pb.Recommendation(decision_id="d1", model_version=3, steering=_steering("standby")).SerializeToString()
    assert _wire(_reply(first), memo) == want and len(memo) == 1
    assert _wire(_reply(first), memo) == want and len(memo) == 1  # the kept bytes
    # What the memo documents: bytes are kept by identity, so a changed object keeps its old bytes (the adapters'
    # sections are frozen) ...
    first.rules[0].reason = "changed"
    assert _wire(_reply(first), memo) == want
    # ... and another object, even with equal fields, is encoded on its own
    other = _Section(_steering("priority"))
    assert (
        _wire(_reply(other), memo)
        == pb.Recommendation(decision_id="d1", model_version=3, steering=_steering("priority")).SerializeToString()
    )
    assert len(memo) == 2
    with pytest.raises(KeyError):
        edgepath_native.WireMemo(["edgepath.v1.NoSuchMessage"], 4)


def test_a_dead_sections_id_is_never_answered_with_its_bytes() -> None:
    """An entry answers only while its weak reference gives the very object: sections made one after the other
    reuse the freed ids (CPython's allocator), and each is encoded with its own fields."""
    memo = edgepath_native.WireMemo([STEERING], 64)
    reused = 0
    seen: set[int] = set()
    for k in range(50):
        attrs = vars(mirror(_steering(f"rule {k}")))
        section = _Section.__new__(_Section)  # made last: it takes the block the previous one freed
        section.__dict__.update(attrs)
        reused += id(section) in seen
        seen.add(id(section))
        want = pb.Recommendation(decision_id="d1", model_version=3, steering=_steering(f"rule {k}"))
        assert _wire(_reply(section), memo) == want.SerializeToString()
        del section
    assert reused > 0, "no id was reused: the case this test is for did not occur"


class _NoWeakref:
    __slots__ = ("rules", "source")


def test_the_memo_is_bounded_and_objects_without_weak_references_are_encoded_each_time() -> None:
    memo = edgepath_native.WireMemo([STEERING], 2)
    kept = [_Section(_steering(f"r{k}")) for k in range(3)]
    for section in kept:
        _wire(_reply(section), memo)
    assert len(memo) == 2  # the oldest dropped
    plain = _NoWeakref()
    plain.rules, plain.source = [mirror(pb.SteeringRule(rule_precedence=1, reason="x"))], "s"
    want = pb.Recommendation(
        decision_id="d1",
        model_version=3,
        steering=pb.SteeringAdvice(rules=[pb.SteeringRule(rule_precedence=1, reason="x")], source="s"),
    ).SerializeToString()
    assert _wire(_reply(plain), memo) == want and len(memo) == 2
    plain.rules[0].reason = "y"  # not kept: its change shows
    assert _wire(_reply(plain), memo) != want


def test_the_services_shared_sections_are_kept_and_their_replies_unchanged() -> None:
    """The service's memo keeps its steering and congestion sections (shared by the adapters) and writes the
    converters' bytes, replay after replay."""
    service = Service.build(Settings(store_url="memory://"))
    requests = reply_requests()

    async def decide() -> list[Any]:
        return await service.plane.recommend_batch([(Principal(device_id=r.device_id), r) for r in requests])

    recs = asyncio.run(decide())
    shared = [cacheable_context(r) for r in requests]
    for _ in range(2):
        for rec, s in zip(recs, shared, strict=True):
            assert convert.recommendation_wire(rec, s, native=True) == convert.recommendation_wire(rec, s, native=False)
    assert convert._WIRE_MEMO is not None and len(convert._WIRE_MEMO) >= 2
