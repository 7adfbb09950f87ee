"""Issue 17, item 2: an outcome acknowledged to a device is never lost.

Real processes only: a redis-server with its append-only file, ``edgepath serve`` replicas and an
``edgepath train`` trainer (``state/cluster_helpers.py``). The replica is SIGKILLed while Redis is down,
after it acknowledged outcomes from its durable journal; the next replica started on the same outbox
directory replays the journal, and the trainer's published model counts every acknowledged outcome
exactly once (a retry of one of them, with the same ``decision_id``, is counted once).
Without an outbox directory the store refuses outcomes while Redis is away (retryable 503): nothing is
acknowledged that only lives in a process's memory.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from edgepath.errors import Unavailable
from edgepath.state.base import ClaimResult
from edgepath.state.outbox import DurableOutbox, read_journal
from edgepath.state.redis import RedisStore
from redis import Redis

from state.cluster_helpers import Cluster, snapshot
from state.redis_helpers import REDIS_SERVER, RedisServer, decision, outcome, wait_until

pytestmark = pytest.mark.redis

CONTEXT = {
    "device_id": "phone-1",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "sinr_db": 8.0, "cqi": 9},
    ],
}


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it from apt)")
    server = RedisServer(tmp_path, appendonly=True).start()
    yield server
    server.stop()


async def test_without_a_journal_outcomes_are_refused_while_redis_is_down(own_server: RedisServer) -> None:
    store = RedisStore(own_server.url, namespace="nojournal")
    try:
        d = decision("d-1")
        await store.put_decision(d, 60)
        own_server.stop()
        with pytest.raises(Unavailable, match="retry later"):
            await store.claim_outcome(outcome(d))
        assert store.status()["outbox_outcomes"] == 0
        own_server.start()
        await _until_recovered(store)
        assert await store.claim_outcome(outcome(d)) is ClaimResult.NEW  # the device's retry lands
    finally:
        await store.close()


async def _until_recovered(store: RedisStore) -> None:
    import asyncio

    async with asyncio.timeout(10):
        while not await store.ping() or store.degraded:  # ping also starts the reconnect probe
            await asyncio.sleep(0.02)


async def test_a_dead_stores_journal_is_adopted_and_replayed_once(own_server: RedisServer, tmp_path: Path) -> None:
    """Store-level: a journal whose process is gone (no flock) is adopted by the next store and flushed."""
    outbox = tmp_path / "outbox"
    first = RedisStore(own_server.url, namespace="adopt", outbox_dir=str(outbox), socket_timeout_s=0.3)
    ds = [decision(f"a-{i}") for i in range(3)]
    own_server.stop()
    for d in ds:
        await first.put_decision(d, 60)
        assert await first.claim_outcome(outcome(d)) is ClaimResult.NEW
    journal = first._journal
    assert journal is not None and journal.fsyncs == 3
    kinds = [type(r).__name__ for r in read_journal(journal.path)]
    assert kinds == ["DecisionRecord", "OutcomeRecord"] * 3
    assert list(read_journal(journal.path))[::2] == ds  # every field back as written (tuples as tuples)
    # The process "dies": its lock goes away with its descriptor, the file stays.
    import os

    os.close(journal._fd)
    journal._fd = -1
    first._journal = None
    own_server.start()
    second = RedisStore(own_server.url, namespace="adopt", outbox_dir=str(outbox))
    try:
        assert second.degraded and second.status()["outbox_outcomes"] == 3  # replayed from disk
        await _until_recovered(second)
        got = await second.read_outcomes("trainer", 10, 0)
        assert sorted(o.decision_id for _, o in got) == ["a-0", "a-1", "a-2"]
        assert await second.claim_outcome(outcome(ds[0])) is ClaimResult.DUPLICATE
        assert list(outbox.glob("outbox-*.jsonl")) == [second._journal.path]  # type: ignore[union-attr]
        assert second._journal.path.stat().st_size == 0  # type: ignore[union-attr]  # truncated once in Redis
    finally:
        await second.close()
        await first.close()


def test_live_journals_are_not_adopted(tmp_path: Path) -> None:
    a = DurableOutbox(tmp_path)
    a.append_outcome(outcome(decision("x")))
    b = DurableOutbox(tmp_path)
    try:
        assert b.adopt_orphans() == []  # a's process holds its flock
        assert a.path.exists()
    finally:
        a.close(remove=True)
        b.close(remove=True)


@pytest.mark.slow
# timeout: starts redis-server, two replicas in turn and a trainer as real processes (~20-40 s on 2 cores)
@pytest.mark.timeout(120)
def test_replica_killed_while_redis_is_down_loses_no_acknowledged_outcome(
    own_server: RedisServer, tmp_path: Path
) -> None:
    batch = 10
    cluster = Cluster(tmp_path, own_server, env={"EDGEPATH_BATCH_SIZE": str(batch)})
    outbox = {"EDGEPATH_OUTBOX_DIR": str(tmp_path / "outbox")}
    r = Redis.from_url(own_server.url)
    http = httpx.Client(timeout=5.0)
    try:
        replica = cluster.start_replica("replica-1", outbox)
        acknowledged: set[str] = set()

        def report(url: str, decision_id: str, i: int) -> dict:
            body = {"device_id": "phone-1", "decision_id": decision_id, "throughput_bps": 1e7 + i * 1e6}
            resp = http.post(f"{url}/v1/outcomes", json=body)
            assert resp.status_code == 200, resp.text
            return resp.json()

        for i in range(4):  # before the outage: straight into Redis
            rec = http.post(f"{replica.url}/v1/recommendations", json=CONTEXT).json()
            assert report(replica.url, rec["decision_id"], i)["accepted"]
            acknowledged.add(rec["decision_id"])
        own_server.stop()
        wait_until(lambda: http.get(f"{replica.url}/readyz").status_code == 503, 15, what="degraded mode")
        during = []
        for i in range(6):  # during: journaled (fsync'd) before the acknowledgement
            rec = http.post(f"{replica.url}/v1/recommendations", json=CONTEXT).json()
            assert report(replica.url, rec["decision_id"], 10 + i)["accepted"]
            acknowledged.add(rec["decision_id"])
            during.append(rec["decision_id"])
        assert report(replica.url, during[0], 99)["duplicate"]  # a device retry: same decision_id
        replica.stop(signal.SIGKILL)  # power cut of the replica while Redis is still down
        own_server.start()  # same port, same append-only file
        replica2 = cluster.start_replica("replica-2", outbox)  # same node, same outbox directory
        cluster.start_trainer()
        _version, meta = wait_until(
            lambda: (s := snapshot(r, cluster.namespace))[1].get("samples_seen") == batch and s,
            60,
            what=f"a model trained on the {batch} acknowledged outcomes",
        )
        assert meta["samples_seen"] == len(acknowledged) == batch
        # The retry after the restart is still a duplicate (exactly once by decision_id).
        assert report(replica2.url, during[-1], 100)["duplicate"]
        wait_until(lambda: r.xlen(f"{cluster.namespace}:outcomes") == 0, 30, what="the stream to be acknowledged")
        print(f"\nreplica SIGKILLed while Redis down: acknowledged={len(acknowledged)} trained={meta['samples_seen']}")
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        http.close()
        cluster.close()


async def test_flush_writes_the_decision_an_outcome_needs(own_server: RedisServer, tmp_path: Path) -> None:
    """A buffered outcome whose decision is missing from Redis at flush time (made while degraded and not yet
    written, or lost by a Redis restart without its data) is not dropped as unknown: the replica still knows
    the decision and writes it first. (The soak found outcomes dropped this way.)"""
    store = RedisStore(own_server.url, namespace="order", outbox_dir=str(tmp_path), socket_timeout_s=0.3)
    try:
        d = decision("late")
        own_server.stop()
        await store.put_decision(d, 60)
        assert await store.claim_outcome(outcome(d)) is ClaimResult.NEW
        store._unsynced.clear()  # as if its SET had been lost: only the replica's memory has it
        own_server.start()
        await _until_recovered(store)
        got = await store.read_outcomes("trainer", 10, 0)
        assert [o.decision_id for _, o in got] == ["late"]
    finally:
        await store.close()


async def test_a_replica_replaying_an_adopted_journal_logs_that_it_replays_not_that_redis_is_away(
    own_server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A replica that adopted a dead process's journal is not ready until the journal is flushed, with Redis up: the
    readiness watcher's line says it replays (and how much), then ready again. Before (an on-call drill): ``not
    ready: state store unreachable`` while Redis answered."""
    import asyncio
    import logging
    import os

    from edgepath.main import Service
    from edgepath.settings import Settings
    from grpc_health.v1 import health

    outbox = tmp_path / "outbox"
    dead = RedisStore(own_server.url, namespace="replay", outbox_dir=str(outbox), socket_timeout_s=0.3)
    own_server.stop()
    for d in [decision(f"r-{i}") for i in range(2)]:
        await dead.put_decision(d, 60)
        assert await dead.claim_outcome(outcome(d)) is ClaimResult.NEW
    assert dead._journal is not None
    os.close(dead._journal._fd)  # the process "dies": its lock goes with its descriptor, the file stays
    dead._journal._fd = -1
    dead._journal = None
    await dead.close()
    own_server.start()
    service = Service.build(Settings(store_url=own_server.url, outbox_dir=str(outbox)))
    caplog.set_level(logging.INFO, logger="edgepath")
    watcher = asyncio.create_task(service._watch_readiness(health.aio.HealthServicer(), period_s=0.05))
    try:
        async with asyncio.timeout(10):
            while "ready again" not in caplog.text:
                await asyncio.sleep(0.02)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await service.plane.store.close()
    said = [r.getMessage() for r in caplog.records if r.name == "edgepath" and "ready" in r.getMessage()]
    assert said[0].startswith(
        "not ready: replaying journaled records of a dead process into the state store: 2 outcomes and 2 decisions"
    ), said
    assert "unreachable" not in said[0] and said[1].startswith("ready again")
