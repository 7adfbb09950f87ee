"""REST replies written with the shared sections' JSON kept per object (``edgepath.rest.app.recommendation_json``):
byte for byte what pydantic-core writes for the whole model, for the service's own replies of every kind."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from edgepath.main import Service
from edgepath.rest import app as rest_app
from edgepath.settings import Settings
from edgepath.types import AccessType, Principal, Recommendation, RecommendBatch, RecommendRequest


def _requests() -> list[RecommendRequest]:
    wlan = {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -58.0, "link_speed_mbps": 300.0}
    lte = {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -101.0, "rsrq_db": -11.0, "sinr_db": 9.0, "cqi": 9}
    t = [1000.0 * i for i in range(10)]
    histories = [
        {
            "interface": n,
            "rtt_t_ms": t,
            "rtt_ms": [r + i for i in range(10)],
            "throughput_t_ms": t,
            "throughput_bps": [b * (1 + 0.02 * i) for i in range(10)],
        }
        for n, r, b in (("wlan0", 20.0, 40e6), ("wwan0", 45.0, 2e6))
    ]
    content = {
        "expected_size_bytes": 50_000_000,
        "candidates": [
            {
                "address": "203.0.113.10",
                "dns_interface": "wlan0",
                "paths": [{"interface": "wlan0", "rtt_ms_samples": [12.0, 13.5], "loss": 0.001}],
            },
            {
                "address": "198.51.100.7",
                "dns_interface": "wwan0",
                "paths": [{"interface": "wwan0", "rtt_ms_samples": [30.0], "bandwidth_bps": 3e7}],
            },
        ],
    }
    bodies: list[dict[str, Any]] = [
        {"device_id": "phone-1", "interfaces": [wlan, lte], "subflow_histories": histories},
        {"device_id": "phone-2", "interfaces": [wlan, lte]},
        {"device_id": "cpe-3", "interfaces": [wlan, lte], "sections": ["primary_path", "steering"]},
        {"device_id": "tv-4", "interfaces": [wlan, lte], "application_profile": "BULK", "content": content},
        {"device_id": "phone-5", "interfaces": [lte]},
    ]
    return [RecommendRequest.model_validate(b) for b in bodies]


def _decided() -> list[Recommendation]:
    service = Service.build(Settings(store_url="memory://"))

    async def decide() -> list[Recommendation]:
        items = [(Principal(device_id=r.device_id), r) for r in _requests() * 2]
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
