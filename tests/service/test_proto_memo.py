"""The gRPC reply's section memo: a shared section is converted once, and the memo keeps no section alive."""

from __future__ import annotations

import gc

from edgepath.adapters.base import cacheable_context
from edgepath.adapters.congestion import congestion_advice
from edgepath.adapters.mlpm import scheduler_advice
from edgepath.grpc import convert
from edgepath.grpc.convert import scheduler_to_proto
from edgepath.memo import IdentityMemo
from edgepath.settings import Settings
from edgepath.types import (
    AccessType,
    InterfaceContext,
    PrimaryPath,
    Recommendation,
    RecommendRequest,
    RttSample,
    SubflowHistory,
)


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

    memo = IdentityMemo(convert)
    shared = congestion_advice(_request(20.0))  # cached per (profile, kernel): the same object every time
    assert memo(shared) is memo(shared) is memo(congestion_advice(_request(30.0)))
    assert calls == [shared]
    assert memo(None) is None


def test_the_memo_keeps_no_section_alive() -> None:
    """A section made for one request (a context with subflow histories) leaves the memo when the reply is done:
    holding it kept ~28 tracked objects per request for the garbage collector to walk."""
    memo = IdentityMemo(scheduler_to_proto)
    settings = Settings()
    kept = scheduler_advice(_request(20.0), settings)
    for rtt in range(50):
        memo(scheduler_advice(_request(30.0 + rtt), settings))  # each dies after its conversion
    memo(kept)
    gc.collect()  # CPython frees them at once; a collection changes nothing, it only rules the collector out
    assert list(memo.cache) == [id(kept)]
    assert memo(kept) is memo(kept)


def test_sections_made_for_one_request_are_encoded_without_the_memo() -> None:
    """A context with subflow histories gets sections of its own (``cacheable_context`` False): the encoder converts
    them directly, to the same proto the memo would give, and leaves the memo untouched."""
    settings = Settings()
    request = _request(20.0)
    assert not cacheable_context(request)
    rec = Recommendation(
        decision_id="dec-1",
        model_version=1,
        policy="p",
        primary_path=PrimaryPath(
            interface="wlan0", access_type=AccessType.WIFI, propensity=0.9, arms=[AccessType.WIFI]
        ),
        decided_at_unix_ms=1,
        scheduler=scheduler_advice(request, settings),
        congestion=congestion_advice(request),
    )
    before = dict(convert._SCHEDULER_PB.cache)
    direct = convert.recommendation_to_proto(rec, shared=False)
    assert convert._SCHEDULER_PB.cache == before
    assert direct == convert.recommendation_to_proto(rec, shared=True)
    assert id(rec.scheduler) in convert._SCHEDULER_PB.cache  # the shared path does memoise
    assert cacheable_context(RecommendRequest(device_id="d-1", interfaces=request.interfaces))
