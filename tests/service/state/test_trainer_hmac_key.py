"""A trainer or a replica whose EDGEPATH_HMAC_KEY does not verify the stored model snapshot, on a real redis-server.

An on-call drill found: a trainer started with the wrong key refused the fleet's snapshot v13, trained on from its
local (cold) model and published v14, v15, which every replica refused; once its key was fixed it refused v15 the
same way and published v16 from scratch: what the fleet learned up to v13 was gone. A replica with the wrong key
served v1 without a word, and no message named EDGEPATH_HMAC_KEY. Each test drives the role's steps directly (no
background task, no waiting).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from edgepath.engines.primary_path import PrimaryPathBandit
from edgepath.state.redis import RedisStore
from edgepath.state.redis_backend import RedisBackend
from edgepath.training.leader import TrainerRole, UnverifiableSnapshotError
from edgepath.training.online import ModelRegistry, OnlineTrainer, PublishConflictError
from edgepath.training.snapshots import SnapshotFollower, SnapshotStore, dumps, key_id, sign

from state.redis_helpers import RedisServer, decision, outcome, trained_bandit

pytestmark = pytest.mark.redis
FLEET_KEY = b"fleet-key-0123456789abcdef"
WRONG_KEY = b"wrong-key-0123456789abcdef"
STORED = 13  # the fleet's model version when the wrong trainer starts
LEARNED = 60  # samples the fleet's model was trained on


@pytest.fixture
async def store(redis_server: RedisServer, namespace: str) -> AsyncIterator[RedisStore]:
    """The shared store, holding the fleet's snapshot v13 (60 samples) signed with the fleet's key."""
    s = RedisStore(redis_server.url, namespace=namespace)
    await SnapshotStore(RedisBackend(s).snapshots, FLEET_KEY).publish(trained_bandit(LEARNED), STORED, [])
    yield s
    await s.close()


def role_with(store: RedisStore, key: bytes, consumer: str, **kwargs: Any) -> TrainerRole:
    """A trainer process started with ``key`` and a cold model (version 1), as ``edgepath train`` builds it."""
    backend = RedisBackend(store)
    return TrainerRole(
        backend,
        SnapshotStore(backend.snapshots, key),
        ModelRegistry(PrimaryPathBandit()),
        5,
        consumer=consumer,
        **kwargs,
    )


def trainer_of(role: TrainerRole) -> OnlineTrainer:
    """The role's online trainer, as its term builds it (its publications go through the role)."""
    return OnlineTrainer(role.store, role.registry, role.batch_size, consumer=role.consumer, publisher=role._publish)


async def feed(store: RedisStore, prefix: str, n: int) -> None:
    for i in range(n):
        d = decision(f"{prefix}-{i}")
        await store.put_decision(d, 60)
        await store.claim_outcome(outcome(d))


async def stored_state(store: RedisStore) -> tuple[int, dict[bytes, Any], int]:
    """The version counter, the snapshot hash and the snapshot's ``samples_seen``."""
    channel = RedisBackend(store).snapshots
    fields = await store.redis.hgetall(channel.snapshot_key)
    return await channel.latest_version(), fields, json.loads(fields[b"meta"])["samples_seen"]


async def term_once(role: TrainerRole) -> None:
    """One term of the role with ``stop`` already set: take the lock, synchronise, stop, release."""
    stop = asyncio.Event()
    stop.set()
    await role._term(stop)


async def test_a_trainer_with_the_wrong_key_publishes_nothing_over_the_stored_snapshot(store: RedisStore) -> None:
    before = await stored_state(store)
    wrong = role_with(store, WRONG_KEY, "wrong-trainer")
    with pytest.raises(UnverifiableSnapshotError) as info:
        await term_once(wrong)
    assert info.value.version == STORED and info.value.reason == "bad_signature"
    assert await store.redis.exists(f"{store.namespace}:trainer:lock") == 0  # stepped down: the lock is free
    assert wrong.registry.current.version == 1  # it did not take the stored version as its own
    # outcomes arrive: it refits, but neither a next version nor a catch-up above the stored one is published
    await feed(store, "w", 15)
    with pytest.raises(PublishConflictError):  # three batches: version 4, conflicting; nothing is stored
        await trainer_of(wrong).step()
    assert await stored_state(store) == before  # same version counter, snapshot bytes and samples_seen (60)
    assert before[0] == STORED and before[2] == LEARNED
    assert await store.pending_count() == 15  # nothing acknowledged: the outcomes wait for a trainer with the key


async def test_the_trainer_started_with_the_right_key_continues_from_the_fleets_model(store: RedisStore) -> None:
    wrong = role_with(store, WRONG_KEY, "wrong-trainer")
    await feed(store, "w", 5)
    with contextlib.suppress(UnverifiableSnapshotError, PublishConflictError):  # what the wrong trainer does
        await term_once(wrong)
        await trainer_of(wrong).step()
    # the operator fixes EDGEPATH_HMAC_KEY: the trainer starts again (cold model) with the fleet's key
    right = role_with(store, FLEET_KEY, "right-trainer")
    await term_once(right)
    assert right.registry.current.version == STORED
    assert right.registry.current.model.samples_seen == LEARNED
    assert await trainer_of(right).step()
    loaded = await SnapshotStore(RedisBackend(store).snapshots, FLEET_KEY).load()
    assert loaded is not None and loaded.version == STORED + 1
    assert loaded.model.samples_seen == LEARNED + 5  # the fleet's learning kept, and the new outcomes on top
    assert loaded.meta["key_id"] == key_id(FLEET_KEY)


async def test_the_messages_name_the_key_setting_and_both_key_ids(
    store: RedisStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="edgepath")
    fleet_id, wrong_id = key_id(FLEET_KEY), key_id(WRONG_KEY)
    assert fleet_id != wrong_id and len(fleet_id) == 8
    now = [0.0]
    wrong = role_with(store, WRONG_KEY, "wrong-trainer", clock=lambda: now[0])
    for _ in range(3):  # the role retries; the refusal is logged at ERROR once, not once per attempt
        with pytest.raises(UnverifiableSnapshotError):
            await term_once(wrong)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name.endswith("leader")]
    assert len(errors) == 1, errors
    for text in (f"v{STORED}", "EDGEPATH_HMAC_KEY", f"signed with key id {fleet_id}", f"has key id {wrong_id}"):
        assert text in errors[0], (text, errors[0])
    refusals = [r for r in caplog.records if r.levelno >= logging.ERROR and "refusing model snapshot" in r.getMessage()]
    assert len(refusals) == 1 and "EDGEPATH_HMAC_KEY" in refusals[0].getMessage()

    # a replica started with the wrong key warns that it keeps serving its model, naming the key and both ids
    caplog.clear()
    replica = SnapshotFollower(
        SnapshotStore(RedisBackend(store).snapshots, WRONG_KEY), ModelRegistry(trained_bandit(5))
    )
    assert not await replica.check()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    for text in ("keeps serving model v1", f"model v{STORED}", "EDGEPATH_HMAC_KEY", fleet_id, wrong_id):
        assert text in warnings[0], (text, warnings[0])
    for record in caplog.records:
        assert FLEET_KEY.decode() not in record.getMessage() and WRONG_KEY.decode() not in record.getMessage()


async def test_a_snapshot_forged_during_a_term_is_not_published_over(
    store: RedisStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The trainer has the fleet's key; a snapshot it cannot verify appears above its version while it trains (written
    into Redis by someone without the key). Its publications stop: not even a catch-up numbered above it goes over it;
    the term ends at its next renewal."""
    role = role_with(store, FLEET_KEY, "trainer")
    await term_once(role)
    assert role.registry.current.version == STORED
    channel = RedisBackend(store).snapshots
    blob = dumps(PrimaryPathBandit())
    meta = json.dumps({"published_at": 0, "samples_seen": 0, "policy": "forged", "key_id": key_id(FLEET_KEY)}).encode()
    forged = {"version": STORED + 1, "blob": blob, "meta": meta, "signature": sign(b"attacker", STORED + 1, meta, blob)}
    await store.redis.hset(channel.snapshot_key, mapping=forged)
    await store.redis.set(channel.version_key, STORED + 1)
    await feed(store, "f", 5)
    trainer = trainer_of(role)
    with pytest.raises(PublishConflictError):  # v14 conflicts; the stored v14 does not verify
        await trainer.step()
    assert any("altered or forged after signing" in r.getMessage() for r in caplog.records)
    await feed(store, "g", 10)
    with pytest.raises(PublishConflictError):  # two batches would be v15, above the forgery: not published either
        await trainer.step()
    assert await channel.latest_version() == STORED + 1
    assert (await store.redis.hget(channel.snapshot_key, "blob")) == blob
    # the documented reset: the operator deletes the snapshot (keeping the counter); the trainer goes on above it
    await store.redis.delete(channel.snapshot_key)
    await term_once(role)
    assert role.registry.current.version == STORED + 1
    await feed(store, "h", 5)
    trainer = trainer_of(role)
    assert await trainer.step()
    loaded = await SnapshotStore(channel, FLEET_KEY).load()
    assert loaded is not None and loaded.version > STORED + 1 and loaded.model.samples_seen > LEARNED
