"""Redis-only behaviour: consumer-group reclaim, acknowledgement, degraded mode and its outbox.

Real redis-server processes (started by the fixtures on free loopback ports). Degraded mode is caused
for real: the server is paused with SIGSTOP (commands time out) or stopped and restarted on the same
port (connections refused).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from edgepath.errors import Unavailable
from edgepath.metrics import Metrics
from edgepath.state.base import ClaimResult
from edgepath.state.redis import RedisStore
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from state.redis_helpers import REDIS_SERVER, RedisServer, decision, outcome, wait_for

pytestmark = pytest.mark.redis


@pytest.fixture
async def stores(redis_server: RedisServer, namespace: str) -> AsyncIterator[Callable[..., RedisStore]]:
    made: list[RedisStore] = []

    def make(**kw: Any) -> RedisStore:
        store = RedisStore(redis_server.url, namespace=namespace, **kw)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test alone (it gets paused or restarted)."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it from apt)")
    server = RedisServer(tmp_path, appendonly=True).start()
    yield server
    server.stop()


async def test_dead_consumer_entries_are_reclaimed_once(stores: Callable[..., RedisStore]) -> None:
    writer = stores()
    for i in range(6):
        d = decision(f"x-{i}")
        await writer.put_decision(d, 60)
        await writer.claim_outcome(outcome(d))
    dead = stores(claim_idle_ms=100)
    taken = await dead.read_outcomes("consumer-dead", 4, 0)  # delivered, never acknowledged: the process died
    assert len(taken) == 4
    alive = stores(claim_idle_ms=100)
    first = await alive.read_outcomes("consumer-alive", 10, 0)  # not idle long enough yet: only the new ones
    assert [o.decision_id for _, o in first] == ["x-4", "x-5"]

    async def reclaimed() -> list[Any]:
        return await alive.read_outcomes("consumer-alive", 10, 0)

    got = await wait_for(reclaimed)
    assert sorted(o.decision_id for _, o in got) == ["x-0", "x-1", "x-2", "x-3"]
    # the consumer's own in-flight entries are never handed to it twice
    assert await alive.read_outcomes("consumer-alive", 10, 0) == []
    await alive.ack_outcomes([i for i, _ in first + got])
    assert await alive.pending_count() == 0
    assert await alive.stream_length() == 0  # acknowledged entries are deleted from the log


async def test_ack_is_per_entry(stores: Callable[..., RedisStore]) -> None:
    store = stores()
    for i in range(3):
        d = decision(f"a-{i}")
        await store.put_decision(d, 60)
        await store.claim_outcome(outcome(d))
    got = await store.read_outcomes("c", 3, 0)
    await store.ack_outcomes([got[1][0]])
    assert await store.pending_count() == 2
    assert await store.stream_length() == 2


async def test_degraded_mode_buffers_and_flushes(own_server: RedisServer, namespace: str, tmp_path: Path) -> None:
    metrics = Metrics.create()
    store = RedisStore(
        own_server.url, namespace=namespace, socket_timeout_s=0.3, metrics=metrics, outbox_dir=str(tmp_path)
    )
    other = RedisStore(own_server.url, namespace=namespace)
    try:
        before = decision("before-outage")
        await store.put_decision(before, 60)
        assert await store.claim_outcome(outcome(before)) is ClaimResult.NEW
        own_server.pause()
        during = decision("during-outage")
        await store.put_decision(during, 60)  # times out once, then works from memory
        assert store.degraded
        assert await store.ping() is False
        assert metrics.store_degraded._value.get() == 1
        assert await store.get_decision("during-outage") == during
        assert await store.claim_outcome(outcome(during)) is ClaimResult.NEW
        assert await store.claim_outcome(outcome(during)) is ClaimResult.DUPLICATE
        assert await store.claim_outcome(outcome(before)) is ClaimResult.DUPLICATE  # claimed before the outage
        with pytest.raises(Unavailable):  # maybe another replica's decision, only in Redis: retryable, not unknown
            await store.claim_outcome(outcome(decision("nobody-knows")))
        assert store.status()["outbox_outcomes"] == 1
        own_server.resume()

        async def recovered() -> bool:
            return not store.degraded

        await wait_for(recovered)
        assert await store.ping() is True
        assert metrics.store_degraded._value.get() == 0
        assert await other.get_decision("during-outage") == during  # the decision reached Redis
        got = await other.read_outcomes("trainer", 10, 0)
        assert sorted(o.decision_id for _, o in got) == ["before-outage", "during-outage"]  # each once
    finally:
        own_server.resume()
        await store.close()
        await other.close()


async def test_outbox_bound_drops_with_a_counted_reason(
    own_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    metrics = Metrics.create()
    store = RedisStore(
        own_server.url, namespace=namespace, outbox_max_outcomes=2, metrics=metrics, outbox_dir=str(tmp_path)
    )
    try:
        own_server.stop()  # connection refused
        ds = [decision(f"o-{i}") for i in range(3)]
        for d in ds:
            await store.put_decision(d, 60)
        assert store.degraded
        assert await store.claim_outcome(outcome(ds[0])) is ClaimResult.NEW
        assert await store.claim_outcome(outcome(ds[1])) is ClaimResult.NEW
        with pytest.raises(Unavailable):
            await store.claim_outcome(outcome(ds[2]))
        assert metrics.outcomes_dropped.labels("outbox_full")._value.get() == 1
        own_server.start()  # same port, appendonly: what was written before comes back

        async def recovered() -> bool:
            return not store.degraded

        await wait_for(recovered)
        got = await store.read_outcomes("trainer", 10, 0)
        assert sorted(o.decision_id for _, o in got) == ["o-0", "o-1"]
        # the dropped outcome can be reported again now that Redis is back
        assert await store.claim_outcome(outcome(ds[2])) is ClaimResult.NEW
    finally:
        await store.close()


async def test_outcome_reported_to_two_replicas_during_outage_counts_once(
    own_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    a = RedisStore(own_server.url, namespace=namespace, outbox_dir=str(tmp_path / "a"))
    b = RedisStore(own_server.url, namespace=namespace, outbox_dir=str(tmp_path / "b"))
    try:
        d = decision("both")
        await a.put_decision(d, 60)
        await b.get_decision("both")  # replica b has seen it (e.g. a first report that timed out)
        own_server.stop()
        assert await a.claim_outcome(outcome(d)) is ClaimResult.NEW
        assert await b.claim_outcome(outcome(d)) is ClaimResult.NEW  # b cannot know; the flush decides
        own_server.start()

        async def both_back() -> bool:
            return not a.degraded and not b.degraded

        await wait_for(both_back)
        got = await a.read_outcomes("trainer", 10, 0)
        assert [o.decision_id for _, o in got] == ["both"]
    finally:
        await a.close()
        await b.close()


async def test_fail_fast_client_follows_degraded_mode(own_server: RedisServer, namespace: str) -> None:
    """Other components' Redis calls (rate limits, quarantine) do not wait on a hung server while degraded."""
    store = RedisStore(own_server.url, namespace=namespace, socket_timeout_s=0.3)
    shared = store.fail_fast_client()
    script = shared.register_script("return redis.call('INCR', KEYS[1])")
    try:
        assert await script(keys=[f"{namespace}:n"]) == 1
        assert await shared.sadd(f"{namespace}:set", "a") == 1
        own_server.pause()
        with pytest.raises(RedisTimeoutError):  # the first call finds out, and tells the store
            await shared.smembers(f"{namespace}:set")
        assert store.degraded
        for call in (lambda: script(keys=[f"{namespace}:n"]), lambda: shared.smembers(f"{namespace}:set")):
            with pytest.raises(RedisConnectionError, match="degraded mode"):  # raised here: no socket touched
                await call()
        own_server.resume()

        async def recovered() -> bool:
            return not store.degraded

        await wait_for(recovered)
        assert await script(keys=[f"{namespace}:n"]) == 2
    finally:
        own_server.resume()
        await store.close()


async def test_idle_empty_consumers_are_pruned(stores: Callable[..., RedisStore]) -> None:
    store = stores(claim_idle_ms=50)
    d = decision("prune")
    await store.put_decision(d, 60)
    await store.claim_outcome(outcome(d))
    assert await store.read_outcomes("old-trainer", 10, 0)  # holds one pending entry
    assert await store.read_outcomes("empty-trainer", 10, 0) == []  # registered, holds nothing

    async def pruned() -> bool:
        return await store.prune_consumers(keep="me") == 1

    await wait_for(pruned)  # once idle > 50 ms: only the consumer with nothing pending goes
    names = {c["name"] for c in await store.redis.xinfo_consumers(store.stream, "trainers")}
    assert names == {b"old-trainer"}
