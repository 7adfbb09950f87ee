"""Rolling upgrade: a decision record written by a replica of the previous release has no ``server_candidates``.

The codecs decode the absent field as None ("not recorded"), not as () ("the request named no content"); the
outcome guard takes a ``server_transfer`` on such a record under its rate bounds only, and the transfer moves the
reporting device's own score of that server (and one rank of the fleet median). Before, the record decoded with ()
and every such transfer was refused naming ``server_transfer.address``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit
from edgepath.errors import InvalidInput
from edgepath.metrics import Metrics
from edgepath.plane import DecisionPlane
from edgepath.security.plausibility import MemoryQuarantine, OutcomeGuard
from edgepath.settings import Settings
from edgepath.state.codec import decode_decision, encode_record
from edgepath.state.memory import MemoryStore
from edgepath.state.outbox import read_journal
from edgepath.state.redis import RedisStore
from edgepath.training.online import ModelRegistry
from edgepath.types import OutcomeReport, Principal, RecommendRequest

from state.redis_helpers import decision

SERVER = "192.0.2.20"
#: A 10 Mbit/s Wi-Fi link: the outcome guard's bound is 1.5 × 10 = 15 Mbit/s.
REQUEST = {
    "device_id": "dev-1",
    "interfaces": [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60.0, "link_speed_mbps": 10.0}],
    "content": {
        "expected_size_bytes": 300 * 2**20,
        "candidates": [
            {"address": SERVER, "dns_interface": "wlan0", "paths": [{"interface": "wlan0", "rtt_ms_samples": [10.0]}]}
        ],
    },
}


def as_previous_release(raw: bytes) -> bytes:
    """A record's JSON as the release before ``server_candidates`` wrote it: every other field, that one absent."""
    fields = orjson.loads(raw)
    del fields["server_candidates"]
    return orjson.dumps(fields)


def test_the_codecs_tell_an_absent_field_from_an_empty_one(tmp_path: Path) -> None:
    record = decision("d1")
    assert record.server_candidates is None  # built without it: not recorded
    with_field = orjson.loads(encode_record(record))
    for written, decoded in (([], ()), ([SERVER], (SERVER,)), (None, None)):
        raw = orjson.dumps({**with_field, "server_candidates": written})
        assert decode_decision(raw).server_candidates == decoded
    old = as_previous_release(encode_record(record))
    assert b"server_candidates" not in old
    assert decode_decision(old).server_candidates is None
    # the degraded-mode journal of a previous release's replica, replayed by this one
    journal = tmp_path / "outbox-1-x.jsonl"
    lines = [{"k": "d", "r": orjson.loads(old)}, {"k": "d", "r": {**orjson.loads(old), "server_candidates": []}}]
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [r.server_candidates for r in read_journal(journal)] == [None, ()]  # type: ignore[union-attr]


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "memory":
        s: Any = MemoryStore(max_decisions=100)
    else:
        server = request.getfixturevalue("redis_server")
        s = RedisStore(server.url, namespace=request.getfixturevalue("namespace"))
    yield s
    await s.close()


async def store_as_previous_release(store: Any, decision_id: str) -> None:
    """Replace the stored record of ``decision_id`` by its previous-release JSON, as an older replica stored it."""
    current = await store.get_decision(decision_id)
    old = as_previous_release(encode_record(current))
    if isinstance(store, RedisStore):
        await store.redis.set(store.decision_key(decision_id), old, px=3_600_000)  # the bytes as they were written
    else:
        await store.put_decision(decode_decision(old), 3600.0)


async def test_a_transfer_on_a_previous_release_decision_is_taken_under_the_rate_bounds(store: Any) -> None:
    settings = Settings()
    model = PrimaryPathBandit(BanditConfig(policy=settings.policy, seed=0))
    guard = OutcomeGuard(1.5, None, MemoryQuarantine())
    plane = DecisionPlane(ModelRegistry(model), store, settings, Metrics.create(), guard=guard)
    me = Principal(device_id="dev-1")
    rec = await plane.recommend(me, RecommendRequest.model_validate(REQUEST))
    await store_as_previous_release(store, rec.decision_id)
    assert (await store.get_decision(rec.decision_id)).server_candidates is None

    outcome = {"device_id": "dev-1", "decision_id": rec.decision_id, "throughput_bps": 1e6}
    too_fast = {"address": "198.51.100.9", "size_bytes": 2_500_000, "duration_ms": 1000.0}  # 20 Mbit/s > 15
    with pytest.raises(InvalidInput) as err:
        await plane.report_outcome(me, OutcomeReport.model_validate({**outcome, "server_transfer": too_fast}))
    assert err.value.field == "server_transfer.duration_ms"
    # the record names no candidates to check against: any server, within the bounds
    within = {**too_fast, "size_bytes": 1_000_000}  # 8 Mbit/s
    ack = await plane.report_outcome(me, OutcomeReport.model_validate({**outcome, "server_transfer": within}))
    assert ack.accepted
    views = await store.get_server_views(["198.51.100.9"], "dev-1")
    assert views["198.51.100.9"].own is not None and views["198.51.100.9"].own.q_bps == pytest.approx(8e6)
