"""The compiled gRPC request decoding (service/native/src/request.rs, ``edgepath_native``) against its reference,
:func:`edgepath.grpc.convert.recommend_request_fields`.

Messages are drawn from the proto's own descriptors, every field of every message a request reaches (a field added
to the proto is drawn without this file changing), with any value the wire carries: NaN and infinities, enum values
the service does not know, empty and absent sub-messages. The compiled decoding must give the same plain values,
compared by ``repr`` (key order, ``int`` against ``float``, ``-0.0`` and NaN show), and the same validated request
or the same validation error.
"""

from __future__ import annotations

from typing import Any

import pytest
from edgepath.grpc import convert
from edgepath.wire import edgepath_pb2 as pb
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import given, settings
from hypothesis import strategies as st
from native_twin import messages, require_compiled
from pydantic import ValidationError

require_compiled(convert.NATIVE_DECODING, "the compiled request decoding")

import edgepath_native  # noqa: E402  (installed: checked above)

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
    try:
        return repr(read())
    except ValidationError as exc:
        return f"invalid: {exc.errors(include_url=False)!r}"


@settings(max_examples=200, deadline=None)
@given(REQUESTS)
def test_the_validated_request_or_its_error_is_the_same(msg: pb.RecommendRequest) -> None:
    native = _validated(lambda: convert.recommend_request(msg, native=True))
    assert native == _validated(lambda: convert.recommend_request(msg, native=False))
    batch = pb.RecommendBatchRequest(requests=[msg, msg])
    assert _validated(lambda: convert.recommend_batch_request(batch, native=True)) == _validated(
        lambda: convert.recommend_batch_request(batch, native=False)
    )


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
