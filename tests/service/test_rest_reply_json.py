"""REST replies written with the shared sections' JSON kept per object (``edgepath.rest.app.recommendation_json``):
byte for byte what pydantic-core writes for the whole model, for the service's own replies of every kind."""

from __future__ import annotations

import asyncio

import orjson
from edgepath.main import Service
from edgepath.rest import app as rest_app
from edgepath.settings import Settings
from edgepath.types import AccessType, Principal, Recommendation, RecommendBatch
from service_harness import reply_requests


def _decided() -> list[Recommendation]:
    service = Service.build(Settings(store_url="memory://"))

    async def decide() -> list[Recommendation]:
        items = [(Principal(device_id=r.device_id), r) for r in reply_requests() * 2]
        return await service.plane.recommend_batch(items)

    return asyncio.run(decide())


def test_replies_are_written_as_pydantic_writes_them() -> None:
    recs = _decided()
    assert {k for r in recs for k, v in r.__dict__.items() if v is not None} >= {
        "scheduler",
        "congestion",
        "server_selection",
        "steering",
    }, "the replies fill every section somewhere"
    for _ in range(2):  # the second pass answers the shared sections from the memo
        for rec in recs:
            assert orjson.dumps(rest_app.recommendation_json(rec)) == rec.model_dump_json().encode()
            assert rest_app.recommendation_response(rec).body == rec.model_dump_json().encode()
    assert (
        rest_app.recommendation_response(recs).body == RecommendBatch(recommendations=recs).model_dump_json().encode()
    )
    steering = {id(r.steering) for r in recs if r.steering is not None}
    assert 0 < len(steering) < len([r for r in recs if r.steering is not None])  # shared objects: the memo's case
    assert steering <= set(rest_app._SHARED_SECTIONS["steering"].cache)


def test_a_reply_with_an_undeclared_section_is_written_by_pydantic_whole() -> None:
    rec = _decided()[1]
    extra = Recommendation.model_validate({**rec.model_dump(), "experimental": {"score": 0.5, "arm": AccessType.LTE}})
    assert extra.__pydantic_extra__
    assert rest_app.recommendation_response(extra).body == extra.model_dump_json().encode()
