"""A Redis that comes back full: the reconnect flush keeps its records and says so once, without a traceback.

A real ``redis-server`` of the test's own at a ``maxmemory`` below what it uses, policy ``noeviction`` (the chart's):
every write is refused with an ``OOM`` reply (:class:`~edgepath.state.redis.StoreFull`). A store adopts the journal
of a dead replica (a decision and its outcome, buffered: degraded mode) and flushes it on reconnect. Before, each
retry of the flush logged "flushing the outbox failed" with a traceback, every ``reconnect_interval_s``, for as
long as Redis stayed full. The test counts the flushes that met the full Redis (an event after the third, not a
sleep) and, once memory is raised, waits for the flush that succeeds. The drain's flush meets it as it meets an
unreachable Redis.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from edgepath.state.base import ClaimResult
from edgepath.state.outbox import DurableOutbox
from edgepath.state.redis import RedisStore, StoreFull
from redis import Redis

from state.redis_helpers import RedisServer, decision, outcome

pytestmark = pytest.mark.redis

FULL_FLUSHES = 3


async def test_a_full_redis_during_the_reconnect_flush_is_one_warning_and_loses_nothing(
    appendonly_redis: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    admin = Redis.from_url(appendonly_redis.url)
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", 1)  # below what Redis uses: every write is refused (OOM)
    d = decision("d-full")
    dead = DurableOutbox(tmp_path / "outbox")  # a replica that died while Redis was away
    dead.append_decision(d)
    dead.append_outcome(outcome(d))
    dead.close(remove=False)

    caplog.set_level(logging.INFO, logger="edgepath.state.redis")
    store = RedisStore(appendonly_redis.url, outbox_dir=str(tmp_path / "outbox"), reconnect_interval_s=0.01)
    flush = store._flush
    full_flushes = 0
    met_full, flushed = asyncio.Event(), asyncio.Event()

    async def observed_flush() -> None:
        nonlocal full_flushes
        try:
            await flush()
        except StoreFull:
            full_flushes += 1
            if full_flushes == FULL_FLUSHES:
                met_full.set()
            raise
        flushed.set()

    store._flush = observed_flush  # type: ignore[method-assign]
    try:
        assert store.degraded and store.status() == {"degraded": True, "outbox_outcomes": 1, "unsynced_decisions": 1}
        assert not await store.ping()  # starts the reconnect probe
        async with asyncio.timeout(10):  # a bound on the flushes' arrival, not a wait for timing
            await met_full.wait()
        assert store.degraded and store.status() == {"degraded": True, "outbox_outcomes": 1, "unsynced_decisions": 1}
        lines = [r for r in caplog.records if r.name == "edgepath.state.redis"]
        assert [r.levelno for r in lines] == [logging.WARNING], [r.getMessage() for r in lines]
        assert lines[0].getMessage() == (
            f"state store {appendonly_redis.url} full (its memory bound): 1 outcomes and 1 decisions stay buffered; "
            "retrying every 0.01 s"
        )
        assert not any(r.exc_info for r in caplog.records), "a traceback was logged"

        admin.config_set("maxmemory", 0)
        async with asyncio.timeout(10):
            await flushed.wait()
        assert not store.degraded and store.status()["unsynced_decisions"] == 0
        assert await store.claim_outcome(outcome(d)) is ClaimResult.DUPLICATE  # the buffered one was claimed
        assert [o.decision_id for _, o in await store.read_outcomes("trainer", 10, 0)] == ["d-full"]
        lines = [r for r in caplog.records if r.name == "edgepath.state.redis"]
        assert [r.levelno for r in lines] == [logging.WARNING, logging.INFO]
        assert "reachable again; outbox flushed (1 outcomes so far)" in lines[1].getMessage()
        assert not any(r.exc_info for r in caplog.records)
    finally:
        admin.config_set("maxmemory", 0)
        admin.close()
        await store.close()


async def test_a_full_redis_at_the_shutdown_flush_leaves_the_records_in_the_journal(
    appendonly_redis: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The drain's flush (:meth:`RedisStore.flush_outbox`) meets a full Redis: it reports what is still buffered
    (kept in the journal for the next process) with one warning and no traceback, as for an unreachable Redis;
    before, :class:`StoreFull` went up through the service's stop, which then never closed the store."""
    admin = Redis.from_url(appendonly_redis.url)
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", 1)
    d = decision("d-drain")
    dead = DurableOutbox(tmp_path / "outbox")
    dead.append_decision(d)
    dead.append_outcome(outcome(d))
    dead.close(remove=False)
    caplog.set_level(logging.INFO, logger="edgepath.state.redis")
    store = RedisStore(appendonly_redis.url, outbox_dir=str(tmp_path / "outbox"))
    try:
        assert await store.flush_outbox(5.0) == 2
        assert store.degraded
        lines = [r for r in caplog.records if r.name == "edgepath.state.redis"]
        assert [r.levelno for r in lines] == [logging.WARNING] and not lines[0].exc_info
        assert lines[0].getMessage() == (
            f"outbox flush at shutdown incomplete: state store {appendonly_redis.url} full (its memory bound)"
        )
    finally:
        admin.config_set("maxmemory", 0)
        admin.close()
        await store.close()
    kept = list((tmp_path / "outbox").glob("outbox-*.jsonl"))
    assert len(kept) == 1 and len(kept[0].read_text().splitlines()) == 2  # for the next process to replay
