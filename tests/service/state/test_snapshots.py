"""Signed model snapshots on a real redis-server: tamper refusal, atomic publish + ack, hot swap, lock."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from edgepath.engines.primary_path import PrimaryPathBandit
from edgepath.metrics import Metrics
from edgepath.state.redis import RedisStore
from edgepath.state.redis_backend import RedisBackend
from edgepath.training.leader import TrainerRole
from edgepath.training.online import ModelRegistry, OnlineTrainer, PublishConflictError, to_sample
from edgepath.training.snapshots import SnapshotFollower, SnapshotRejectedError, SnapshotStore, dumps, sign
from edgepath.types import AccessType

from state.redis_helpers import RedisServer, decision, outcome, trained_bandit, wait_for

pytestmark = pytest.mark.redis
KEY = b"test-key-0123456789"


class Marker:
    """Unpickling this object creates a file: proof that a blob was (or was not) unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


@pytest.fixture
async def redis_store(redis_server: RedisServer, namespace: str) -> AsyncIterator[RedisStore]:
    store = RedisStore(redis_server.url, namespace=namespace)
    yield store
    await store.close()


async def test_publish_and_load_round_trip(redis_store: RedisStore) -> None:
    snaps = SnapshotStore(RedisBackend(redis_store).snapshots, KEY)
    assert await snaps.load() is None
    model = trained_bandit()
    assert await snaps.publish(model, 2, []) == 2
    loaded = await snaps.load()
    assert loaded is not None and loaded.version == 2
    assert loaded.model.samples_seen == model.samples_seen == 60
    assert loaded.meta["samples_seen"] == 60
    # the default policy (ridge_squarecb) keeps per-arm ridge coefficients instead of SGD oracles
    ours = model._policies[(AccessType.WIFI, AccessType.LTE)].model.coef[0]
    theirs = loaded.model._policies[(AccessType.WIFI, AccessType.LTE)].model.coef[0]
    assert (ours == theirs).all()


async def test_versions_only_go_up(redis_store: RedisStore) -> None:
    snaps = SnapshotStore(RedisBackend(redis_store).snapshots, KEY)
    await snaps.publish(trained_bandit(), 5, [])
    for stale in (5, 4):
        with pytest.raises(PublishConflictError):
            await snaps.publish(trained_bandit(), stale, [])
    assert await snaps.latest_version() == 5


@pytest.mark.parametrize(
    "attack", ["flip_blob_byte", "swap_in_malicious_blob", "drop_signature", "other_key", "bump_version"]
)
async def test_tampered_snapshot_is_refused_before_unpickling(
    redis_store: RedisStore, tmp_path: Path, attack: str
) -> None:
    metrics = Metrics.create()
    trainer_side = SnapshotStore(RedisBackend(redis_store).snapshots, KEY)
    replica_side = SnapshotStore(RedisBackend(redis_store).snapshots, KEY, metrics)
    await trainer_side.publish(trained_bandit(), 2, [])
    key = trainer_side.channel.snapshot_key
    canary = tmp_path / "unpickled"
    r = redis_store.redis
    if attack == "flip_blob_byte":
        blob = bytearray(await r.hget(key, "blob"))
        blob[len(blob) // 2] ^= 0x01
        await r.hset(key, "blob", bytes(blob))
    elif attack == "swap_in_malicious_blob":
        await r.hset(key, "blob", pickle.dumps(Marker(canary)))
    elif attack == "drop_signature":
        await r.hset(key, "blob", pickle.dumps(Marker(canary)))
        await r.hdel(key, "signature")
    elif attack == "other_key":
        evil = pickle.dumps(Marker(canary))
        meta = await r.hget(key, "meta")
        await r.hset(key, mapping={"blob": evil, "signature": sign(b"attacker-key", 2, meta, evil)})
    elif attack == "bump_version":  # replay the genuine blob under a higher version number
        await r.hset(key, "version", 9)
    with pytest.raises(SnapshotRejectedError) as info:
        await replica_side.load()
    reason = "unsigned" if attack == "drop_signature" else "bad_signature"
    assert info.value.reason == reason
    assert metrics.snapshots_rejected.labels(reason)._value.get() == 1
    assert not canary.exists()  # nothing was unpickled


async def test_publish_acknowledges_exactly_the_trained_outcomes(redis_store: RedisStore) -> None:
    for i in range(5):
        d = decision(f"p-{i}")
        await redis_store.put_decision(d, 60)
        await redis_store.claim_outcome(outcome(d))
    got = await redis_store.read_outcomes("trainer", 3, 0)
    snaps = SnapshotStore(RedisBackend(redis_store).snapshots, KEY)
    model = PrimaryPathBandit()
    model.update([to_sample(o) for _, o in got])
    await snaps.publish(model, 2, [i for i, _ in got])
    assert await redis_store.pending_count() == 0
    assert await redis_store.stream_length() == 2  # the two not yet read remain
    # a conflicting publication acknowledges nothing
    rest = await redis_store.read_outcomes("trainer", 3, 0)
    with pytest.raises(PublishConflictError):
        await snaps.publish(model, 2, [i for i, _ in rest])
    assert await redis_store.pending_count() == 2


async def test_follower_hot_swaps_on_the_published_notification(redis_server: RedisServer, namespace: str) -> None:
    trainer_store = RedisStore(redis_server.url, namespace=namespace)
    replica_store = RedisStore(redis_server.url, namespace=namespace)
    metrics = Metrics.create()
    registry = ModelRegistry(PrimaryPathBandit())
    # poll_s is an hour: within the bounded waits below only the pub/sub notification can explain a swap
    follower = SnapshotFollower(
        SnapshotStore(RedisBackend(replica_store).snapshots, KEY, metrics), registry, poll_s=3600.0
    )
    follower.start()
    publisher = SnapshotStore(RedisBackend(trainer_store).snapshots, KEY)
    try:

        async def subscribed() -> bool:
            return bool((await trainer_store.redis.pubsub_numsub(publisher.channel.name))[0][1])

        await wait_for(subscribed)
        for version in (2, 3, 4):
            await publisher.publish(trained_bandit(seed=version), version, [])
            await registry.wait_for_version(version, timeout_s=30.0)
        assert registry.current.version == 4
        # a tampered publication is refused: the replica keeps serving version 4
        await publisher.publish(trained_bandit(), 5, [])
        await trainer_store.redis.hset(publisher.channel.snapshot_key, "signature", "00" * 32)
        await trainer_store.redis.publish(publisher.channel.name, "5")

        async def rejected() -> bool:
            return metrics.snapshots_rejected.labels("bad_signature")._value.get() >= 1

        await wait_for(rejected)
        assert registry.current.version == 4
    finally:
        await follower.stop()
        await trainer_store.close()
        await replica_store.close()


async def test_follower_falls_back_to_polling(redis_server: RedisServer, namespace: str) -> None:
    store = RedisStore(redis_server.url, namespace=namespace)
    registry = ModelRegistry(PrimaryPathBandit())
    snaps = SnapshotStore(RedisBackend(store).snapshots, KEY)
    follower = SnapshotFollower(snaps, registry, poll_s=0.2)
    try:
        # published with the notification lost (written directly, no PUBLISH): the periodic check finds it
        model = trained_bandit()
        blob = dumps(model)  # cloudpickle: contextualbandits policies do not survive plain pickle
        meta = b'{"published_at": 0, "samples_seen": 60}'
        await store.redis.hset(
            snaps.channel.snapshot_key,
            mapping={"version": 7, "blob": blob, "meta": meta, "signature": sign(KEY, 7, meta, blob)},
        )
        await store.redis.set(snaps.channel.version_key, 7)
        follower.start()
        await registry.wait_for_version(7, timeout_s=5.0)
        assert registry.current.model.samples_seen == 60
    finally:
        await follower.stop()
        await store.close()


async def test_one_trainer_at_a_time_and_takeover(redis_server: RedisServer, namespace: str) -> None:
    stores = [RedisStore(redis_server.url, namespace=namespace, claim_idle_ms=200) for _ in range(2)]
    roles = [
        TrainerRole(
            RedisBackend(s),
            SnapshotStore(RedisBackend(s).snapshots, KEY),
            ModelRegistry(PrimaryPathBandit()),
            batch_size=5,
            lock_ttl_s=1.5,
            consumer=f"trainer-{i}",
        )
        for i, s in enumerate(stores)
    ]
    stops = [asyncio.Event(), asyncio.Event()]
    tasks = [asyncio.create_task(r.run(e)) for r, e in zip(roles, stops, strict=True)]
    try:

        async def one_leader() -> bool:
            return sum(r.is_leader for r in roles) == 1

        await wait_for(one_leader)
        leader = next(i for i, r in enumerate(roles) if r.is_leader)
        follower_idx = 1 - leader
        for i in range(10):
            d = decision(f"l-{i}")
            await stores[0].put_decision(d, 60)
            await stores[0].claim_outcome(outcome(d))

        async def trained_10() -> bool:
            return roles[leader].registry.current.model.samples_seen == 10

        await wait_for(trained_10)
        assert not roles[follower_idx].is_leader  # the lock keeps the second trainer idle
        stops[leader].set()  # leader steps down; the other takes over from the published model
        await tasks[leader]

        async def took_over() -> bool:
            return roles[follower_idx].is_leader

        await wait_for(took_over)
        for i in range(10, 15):
            d = decision(f"l-{i}")
            await stores[0].put_decision(d, 60)
            await stores[0].claim_outcome(outcome(d))

        async def trained_15() -> bool:
            return roles[follower_idx].registry.current.model.samples_seen == 15

        await wait_for(trained_15)
        snaps = SnapshotStore(RedisBackend(stores[0]).snapshots, KEY)
        loaded = await snaps.load()
        assert loaded is not None and loaded.model.samples_seen == 15
        assert await stores[0].pending_count() == 0 and await stores[0].stream_length() == 0
    finally:
        for e in stops:
            e.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for s in stores:
            await s.close()


async def test_in_process_trainer_still_acks_through_the_store(redis_store: RedisStore) -> None:
    """Without a publisher the trainer publishes locally and XACKs (the memory-store path) — on Redis too."""
    registry = ModelRegistry(PrimaryPathBandit())
    trainer = OnlineTrainer(redis_store, registry, batch_size=3)
    for i in range(3):
        d = decision(f"i-{i}")
        await redis_store.put_decision(d, 60)
        await redis_store.claim_outcome(outcome(d))
    assert await trainer.step() is True
    assert registry.current.version == 2
    assert await redis_store.pending_count() == 0


@pytest.mark.timeout(240)  # 200 rounds of real training + hand-over on redis-server; ~0.1 s each when idle
async def test_trainer_takeover_every_time(redis_server: RedisServer, namespace: str) -> None:
    """200 rounds: the leader trains a batch, steps down within a bound, and the follower takes over.

    Regression test of issue 13. The leader is stopped while its trainer is busy on Redis (reading the
    stream, publishing), which is when a cancellation could be lost and ``TrainerRole.run`` never
    returned; the follower then found the lock expired and two trainers consumed outcomes. Each round
    starts a fresh process-like trainer in the place of the one that stepped down.
    """
    stores: list[RedisStore] = []

    def new_role(i: int) -> TrainerRole:
        store = RedisStore(redis_server.url, namespace=namespace, claim_idle_ms=200)
        stores.append(store)
        registry = ModelRegistry(PrimaryPathBandit())
        return TrainerRole(
            RedisBackend(store),
            SnapshotStore(RedisBackend(store).snapshots, KEY),
            registry,
            batch_size=2,
            lock_ttl_s=3.0,
            lock_poll_s=0.02,
            consumer=f"trainer-{i}",
        )

    writer = RedisStore(redis_server.url, namespace=namespace)
    stores.append(writer)
    roles = [new_role(0), new_role(1)]
    stops = [asyncio.Event(), asyncio.Event()]
    tasks = [asyncio.create_task(r.run(e)) for r, e in zip(roles, stops, strict=True)]
    try:
        for round_ in range(200):

            async def one_leader() -> bool:
                return sum(r.is_leader for r in roles) == 1

            await wait_for(one_leader)
            leader = next(i for i, r in enumerate(roles) if r.is_leader)
            follower = 1 - leader
            for k in range(2):
                d = decision(f"r{round_}-{k}")
                await writer.put_decision(d, 60)
                await writer.claim_outcome(outcome(d))

            async def trained(i: int = leader, n: int = 2 * (round_ + 1)) -> bool:
                return roles[i].registry.current.model.samples_seen == n

            await wait_for(trained)  # the leader's trainer has consumed, refitted and published this round
            terms = roles[follower].terms
            stops[leader].set()
            async with asyncio.timeout(10):
                await tasks[leader]  # stepping down is bounded, whatever the trainer was doing
            assert not roles[leader].is_leader and roles[leader].trainer is not None
            assert roles[leader].trainer._task is None  # its trainer loop has ended, not left running

            async def took_over(f: int = follower, t: int = terms) -> bool:
                return roles[f].is_leader and roles[f].terms == t + 1

            await wait_for(took_over)
            roles[leader] = new_role(2 + round_)
            stops[leader] = asyncio.Event()
            tasks[leader] = asyncio.create_task(roles[leader].run(stops[leader]))
        assert sum(r.is_leader for r in roles) == 1
        assert await writer.pending_count() == 0 and await writer.stream_length() == 0  # each outcome used once
    finally:
        for e in stops:
            e.set()
        async with asyncio.timeout(30):
            await asyncio.gather(*tasks, return_exceptions=True)
        for s in stores:
            await s.close()


class _CancellationSwallowingStore:
    """A store whose first blocking read drops one cancellation and reads on, as redis-py's commands can.

    Python < 3.12's ``asyncio.wait_for`` (used by redis-py for every command with a socket timeout)
    returns the inner result instead of raising when a cancellation arrives in the same loop iteration
    as the inner result (CPython gh-86296). That race cannot be provoked on demand against a real
    server, so this stand-in reproduces its effect deterministically; the 200-round test above runs
    the real thing.
    """

    def __init__(self) -> None:
        self.swallowed = 0
        self.reading = asyncio.Event()

    async def read_outcome_rows(self, consumer: str, count: int, block_ms: int, min_count: int = 1) -> list[Any]:
        self.reading.set()
        try:
            await asyncio.sleep(block_ms / 1000.0)
        except asyncio.CancelledError:
            if self.swallowed:
                raise
            self.swallowed += 1  # lost, as in wait_for's race; the loop goes on reading
        return []

    async def ack_outcomes(self, entry_ids: list[str]) -> None:
        raise AssertionError("nothing to acknowledge")


async def test_trainer_stop_survives_a_lost_cancellation() -> None:
    """``OnlineTrainer.stop`` returns even when its loop loses the cancellation (the issue-13 hang)."""
    store = _CancellationSwallowingStore()
    trainer = OnlineTrainer(store, ModelRegistry(PrimaryPathBandit()), batch_size=5)  # type: ignore[arg-type]
    trainer.start()
    loop_task = trainer._task
    assert loop_task is not None
    async with asyncio.timeout(10):
        await store.reading.wait()  # the loop is in its blocking read
    # asyncio.wait does not cancel what it waits for: a stop() that relies on one cancellation hangs here
    stopping = asyncio.create_task(trainer.stop())
    done, _ = await asyncio.wait({stopping}, timeout=10)
    try:
        assert stopping in done, "stop() hung after its cancellation was lost"
        assert store.swallowed == 1 and loop_task.done()
    finally:
        stopping.cancel()
        loop_task.cancel()
