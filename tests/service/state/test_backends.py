"""State backends: the in-process one and the Redis one offer the same snapshot channel, lock and primitives.

The trainer role, snapshot store and follower only see a backend; here they run on the in-process
backend (no Redis) and on a real redis-server, with the same assertions.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from edgepath.engines.primary_path import PrimaryPathBandit
from edgepath.main import Service, build_backend
from edgepath.security import build_outcome_guard, build_security
from edgepath.settings import Settings
from edgepath.state.backend import LockLost, MemoryBackend, StateBackend, StoreUnreachable
from edgepath.state.limits import FallbackRateLimiter, MemoryQuarantine, MemoryRateLimiter, RedisQuarantine
from edgepath.state.redis import RedisStore
from edgepath.state.redis_backend import RedisBackend
from edgepath.training.leader import TrainerRole
from edgepath.training.online import ModelRegistry, PublishConflictError
from edgepath.training.snapshots import SnapshotFollower, SnapshotStore

from state.redis_helpers import RedisServer, decision, outcome

KEY = b"backend-test-key-0123"


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def backends(request: pytest.FixtureRequest) -> AsyncIterator[tuple[StateBackend, StateBackend]]:
    """Two handles on one state, as two processes would hold them (one in-process backend shared for memory)."""
    if request.param == "memory":
        backend = MemoryBackend()
        yield backend, backend
        await backend.close()
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    namespace: str = request.getfixturevalue("namespace")
    pair = (
        RedisBackend(RedisStore(server.url, namespace=namespace, claim_idle_ms=200)),
        RedisBackend(RedisStore(server.url, namespace=namespace, claim_idle_ms=200)),
    )
    yield pair
    for b in pair:
        await b.close()


async def test_snapshot_channel_publishes_once_per_version_and_notifies(
    backends: tuple[StateBackend, StateBackend],
) -> None:
    trainer_side, replica_side = backends
    publisher = SnapshotStore(trainer_side.snapshots, KEY)
    registry = ModelRegistry(PrimaryPathBandit())
    follower = SnapshotFollower(SnapshotStore(replica_side.snapshots, KEY), registry, poll_s=3600.0)
    follower.start()
    try:
        assert await publisher.latest_version() == 0
        model = PrimaryPathBandit()
        model.samples_seen = 7
        # published before or after the follower subscribed: it catches up either way, not by polling (1 h)
        await publisher.publish(model, 3, [])
        await registry.wait_for_version(3, timeout_s=10.0)
        assert registry.current.model.samples_seen == 7
        with pytest.raises(PublishConflictError):
            await publisher.publish(model, 3, [])
        assert await replica_side.snapshots.latest_version() == 3
    finally:
        await follower.stop()


async def test_trainer_lock_one_holder_renewal_and_release(backends: tuple[StateBackend, StateBackend]) -> None:
    a = backends[0].trainer_lock(ttl_s=5.0, poll_s=0.02)
    b = backends[1].trainer_lock(ttl_s=5.0, poll_s=0.02)
    assert await a.acquire(1.0)
    assert not await b.acquire(0.1)  # held by a
    await a.renew()
    with pytest.raises(LockLost):
        await b.renew()  # never held
    await a.release()
    assert await b.acquire(1.0)
    with pytest.raises(LockLost):
        await a.renew()  # a released it; b holds it now
    await b.release()


async def test_trainer_role_trains_and_publishes_on_any_backend(backends: tuple[StateBackend, StateBackend]) -> None:
    backend = backends[0]
    registry = ModelRegistry(PrimaryPathBandit())
    role = TrainerRole(backend, SnapshotStore(backend.snapshots, KEY), registry, batch_size=3, lock_ttl_s=3.0)
    stop = asyncio.Event()
    task = asyncio.create_task(role.run(stop))
    try:
        for i in range(3):
            d = decision(f"b-{i}")
            await backend.store.put_decision(d, 60)
            await backend.store.claim_outcome(outcome(d))
        await registry.wait_for_version(2, timeout_s=15.0)
        assert role.is_leader and registry.current.model.samples_seen == 3
        assert await backends[1].snapshots.latest_version() == 2  # published where the replicas look
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
    assert not role.is_leader


async def test_guard_and_limits_come_from_the_backend(backends: tuple[StateBackend, StateBackend]) -> None:
    # A refill every 1,000 s: at the default 20/s a token came back 50 ms after the first acquire, and a stall that long
    # between the acquires (a loaded host) gave the third one a token (1 run in 500 under load).
    settings = Settings(quarantined_devices=["dev-q"], rate_limit_burst=2, rate_limit_per_s=0.001)
    first, second = backends
    guard_a = build_outcome_guard(settings, first)
    guard_b = build_outcome_guard(settings, second)
    assert await guard_a.quarantine.contains("dev-q")
    await guard_a.quarantine.add("dev-new")
    assert await guard_b.quarantine.contains("dev-new")  # one set for both handles (shared in Redis)
    sec_a, sec_b = build_security(settings, first, guard_a), build_security(settings, second, guard_b)
    assert sec_a.request_limiter is not None and sec_b.request_limiter is not None
    # a burst of 2 per device: one token each from two handles empties the shared bucket
    assert await sec_a.request_limiter.acquire("dev-1") == 0.0
    assert await sec_b.request_limiter.acquire("dev-1") == 0.0
    if first.shared:
        assert isinstance(guard_a.quarantine, RedisQuarantine)
        assert isinstance(sec_a.request_limiter, FallbackRateLimiter)
        assert await sec_a.request_limiter.acquire("dev-1") > 0.0  # budget shared by the replicas
    else:
        assert isinstance(guard_a.quarantine, MemoryQuarantine)
        assert isinstance(sec_a.request_limiter, MemoryRateLimiter)


async def test_unreachable_redis_is_a_store_error_not_a_client_error() -> None:
    backend = build_backend(Settings(store_url="redis://127.0.0.1:1/0", redis_socket_timeout_s=0.2))
    try:
        assert isinstance(backend, RedisBackend)
        with pytest.raises(StoreUnreachable):
            await backend.snapshots.latest_version()
        with pytest.raises(StoreUnreachable):
            await backend.trainer_lock(ttl_s=1.0, poll_s=0.05).acquire(0.1)
    finally:
        await backend.close()


def test_service_is_built_around_its_backend() -> None:
    memory = Service.build(Settings())
    assert isinstance(memory.backend, MemoryBackend) and memory.store is memory.backend.store
    assert memory.trainer is not None and memory.follower is None
    shared = Service.build(Settings(store_url="redis://127.0.0.1:1/0", redis_pipeline_hold_iterations=5))
    assert isinstance(shared.backend, RedisBackend) and shared.store is shared.backend.store
    assert shared.trainer is None and shared.follower is not None
    assert shared.backend.store._auto.hold_iterations == 5  # the setting reaches the auto-pipeline
    asyncio.run(shared.backend.close())
