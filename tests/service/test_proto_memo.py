"""The gRPC reply's section memo: a shared section is converted once, and the memo keeps no section alive."""

from __future__ import annotations

import gc

from edgepath.adapters.congestion import congestion_advice
from edgepath.adapters.mlpm import scheduler_advice
from edgepath.grpc.convert import _ProtoMemo, scheduler_to_proto
from edgepath.settings import Settings
from edgepath.types import AccessType, InterfaceContext, RecommendRequest, RttSample, SubflowHistory


def _request(rtt_ms: float) -> RecommendRequest:
    return RecommendRequest(
        device_id="d-1",
        interfaces=[
            InterfaceContext(name="wlan0", access_type=AccessType.WIFI),
            InterfaceContext(name="wwan0", access_type=AccessType.LTE),
        ],
        subflow_histories=[
            SubflowHistory(
                interface="wlan0", rtt_samples=[RttSample(t_ms=1000.0 * i, rtt_ms=rtt_ms + i) for i in range(5)]
            )
        ],
    )


def test_a_shared_section_is_converted_once() -> None:
    calls: list[object] = []

    def convert(section: object) -> object:
        calls.append(section)
        return object()

    memo = _ProtoMemo(convert)
    shared = congestion_advice(_request(20.0))  # cached per (profile, kernel): the same object every time
    assert memo(shared) is memo(shared) is memo(congestion_advice(_request(30.0)))
    assert calls == [shared]
    assert memo(None) is None


def test_the_memo_keeps_no_section_alive() -> None:
    """A section made for one request (a context with subflow histories) leaves the memo when the reply is done:
    holding it kept ~28 tracked objects per request for the garbage collector to walk."""
    memo = _ProtoMemo(scheduler_to_proto)
    settings = Settings()
    kept = scheduler_advice(_request(20.0), settings)
    for rtt in range(50):
        memo(scheduler_advice(_request(30.0 + rtt), settings))  # each dies after its conversion
    memo(kept)
    gc.collect()  # CPython frees them at once; a collection changes nothing, it only rules the collector out
    assert list(memo.cache) == [id(kept)]
    assert memo(kept) is memo(kept)
