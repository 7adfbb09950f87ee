"""The rich error details of a gRPC status stay within a client's default metadata limit (issue 22 follow-up).

The ``google.rpc.BadRequest`` of an INVALID_ARGUMENT travels in trailing metadata (``grpc-status-details-bin``); a
client refuses trailers past ``grpc.max_metadata_size`` (gRPC core: 8 KiB soft, refused at random past it, and
16 KiB hard) and sees RESOURCE_EXHAUSTED "Stream removed" instead of the status. Listing every invalid field of a
request with many did that: :func:`edgepath.grpc.observe.rich_status` lists the first
:data:`~edgepath.grpc.observe.MAX_FIELD_VIOLATIONS` and says how many more. (The batch case, 256 invalid items,
is in tests/contract/test_batch_contract.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from edgepath.grpc.observe import (
    MAX_DESCRIPTION_BYTES,
    MAX_FIELD_BYTES,
    MAX_FIELD_VIOLATIONS,
    MAX_MESSAGE_BYTES,
    rich_status,
)
from edgepath.grpc.server import MESSAGE_INDEX_KEY
from edgepath.types import MAX_INTERFACES
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from service_harness import running_service

#: gRPC core's default soft limit of a client's received metadata (GRPC_ARG_MAX_METADATA_SIZE), bytes: past it
#: trailers are refused at random.
SOFT_LIMIT = 8192
#: Fields of an ``InterfaceContext`` set out of their range below: 14 invalid fields per interface.
OUT_OF_RANGE: dict[str, Any] = {
    "wifi_rssi_dbm": 9.0,
    "link_speed_mbps": -1.0,
    "frequency_mhz": -1.0,
    "rsrp_dbm": -200.0,
    "rsrq_db": -99.0,
    "sinr_db": 99.0,
    "cqi": 99,
    "cell_rssi_dbm": 9.0,
    "rtt_ms": -1.0,
    "loss": 2.0,
    "wifi_rssi_spread_db": -1.0,
    "max_link_speed_mbps": -1.0,
    "rsrp_spread_db": -1.0,
    "channel_bandwidth_mhz": -1.0,
}


def metadata_size(trailers: Any, message: str) -> int:
    """What gRPC core counts of these trailers against the limit: name + value + 32 bytes per entry (RFC 7541
    §4.1, values decoded), ``grpc-message`` percent-encoded (gRPC's PROTOCOL-HTTP2: bytes outside 0x20-0x7E and
    ``%``)."""
    size = 0
    for key, value in trailers:
        size += len(key) + len(value if isinstance(value, bytes) else value.encode()) + 32
    encoded = message.encode()
    size += len("grpc-message") + 32 + sum(1 if 0x20 <= b <= 0x7E and b != 0x25 else 3 for b in encoded)
    return size


def bad_request(trailers: Any) -> error_details_pb2.BadRequest:
    details = dict(trailers)["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(details)
    (packed,) = [d for d in status.details if d.Is(error_details_pb2.BadRequest.DESCRIPTOR)]
    bad = error_details_pb2.BadRequest()
    packed.Unpack(bad)
    return bad


def test_the_details_of_the_largest_error_stay_under_the_soft_metadata_limit() -> None:
    """However many violations, however long their fields, descriptions and message (in characters of 2-4 UTF-8
    bytes), the trailers stay under 8 KiB with room to spare, and every text is cut at a character boundary."""
    violations = [(f"requests[{i}]." + "é" * 500, "€" * 500) for i in range(5000)]
    status = rich_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        "😀" * 10_000,
        violations=violations,
        retry_after_ms=10**9,
        trailing_metadata=(("x-request-id", "r" * 128), ("retry-after-ms", "1000000000"), (MESSAGE_INDEX_KEY, "99")),
    )
    size = metadata_size(status.trailing_metadata, status.details)
    assert size < SOFT_LIMIT * 3 // 4, size
    assert len(status.details.encode()) <= MAX_MESSAGE_BYTES and set(status.details) == {"😀"}
    bad = bad_request(status.trailing_metadata)
    listed = bad.field_violations[:-1]
    assert len(listed) == MAX_FIELD_VIOLATIONS
    assert [v.field.partition(".")[0] for v in listed] == [f"requests[{i}]" for i in range(MAX_FIELD_VIOLATIONS)]
    assert all(len(v.field.encode()) <= MAX_FIELD_BYTES and v.field.endswith("é") for v in listed)
    assert all(len(v.description.encode()) <= MAX_DESCRIPTION_BYTES and set(v.description) == {"€"} for v in listed)
    summary = bad.field_violations[-1]
    assert (summary.field, summary.description) == ("", f"{5000 - MAX_FIELD_VIOLATIONS} more invalid fields not listed")


def test_a_few_violations_are_listed_whole_without_a_summary() -> None:
    violations = [(f"interfaces[{i}].rsrp_dbm", "Input should be greater than or equal to -156") for i in range(3)]
    status = rich_status(grpc.StatusCode.INVALID_ARGUMENT, "interfaces[0].rsrp_dbm: bad", violations=violations)
    assert [(v.field, v.description) for v in bad_request(status.trailing_metadata).field_violations] == violations
    assert status.details == "interfaces[0].rsrp_dbm: bad"
    exactly = [(f"f{i}", "d") for i in range(MAX_FIELD_VIOLATIONS)]
    status = rich_status(grpc.StatusCode.INVALID_ARGUMENT, "f0: d", violations=exactly)
    assert [(v.field, v.description) for v in bad_request(status.trailing_metadata).field_violations] == exactly


def crowded_request() -> pb.RecommendRequest:
    """The most interfaces a request may name, each with every range-checked field out of range (224 violations)."""
    request = pb.RecommendRequest(device_id="dev-crowded")
    for i in range(MAX_INTERFACES):
        request.interfaces.add(name=f"eth{i}", access_type=pb.ACCESS_TYPE_ETHERNET, **OUT_OF_RANGE)
    return request


@pytest.fixture(scope="module")
def channel() -> Iterator[grpc.Channel]:
    """A channel with gRPC's default options (its 8/16 KiB metadata limits) to a real server."""
    with running_service() as svc, grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as chan:
        yield chan


def assert_first_field_named(err: grpc.RpcError) -> error_details_pb2.BadRequest:
    code, details = err.code(), err.details()  # type: ignore[attr-defined]
    assert code is grpc.StatusCode.INVALID_ARGUMENT, (code, details)
    assert (details or "").startswith("interfaces[0].wifi_rssi_dbm: ")
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None
    bad = error_details_pb2.BadRequest()
    status.details[0].Unpack(bad)
    assert bad.field_violations[0].field == "interfaces[0].wifi_rssi_dbm"
    assert len(bad.field_violations) == MAX_FIELD_VIOLATIONS + 1
    more = MAX_INTERFACES * len(OUT_OF_RANGE) - MAX_FIELD_VIOLATIONS
    assert bad.field_violations[-1].description == f"{more} more invalid fields not listed"
    return bad


def test_a_recommend_with_every_field_of_every_interface_invalid_is_invalid_argument(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as err:
        pb_grpc.PathServiceStub(channel).Recommend(crowded_request(), timeout=10.0)
    assert_first_field_named(err.value)


def test_a_recommend_stream_ended_by_such_a_message_is_invalid_argument_with_its_index(channel: grpc.Channel) -> None:
    good = pb.RecommendRequest(
        device_id="dev-crowded", interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)]
    )
    call = pb_grpc.PathServiceStub(channel).RecommendStream(iter([good, crowded_request()]), timeout=10.0)
    replies = []
    with pytest.raises(grpc.RpcError) as err:
        for reply in call:
            replies.append(reply)
    assert len(replies) == 1
    assert_first_field_named(err.value)
    assert dict(err.value.trailing_metadata())[MESSAGE_INDEX_KEY] == "1"  # type: ignore[attr-defined]
