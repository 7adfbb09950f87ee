"""The trainer, its role and the replicas' follower when Redis restarts without its data, or is down for a while.

An operator's audit (two ``edgepath serve --store redis://… --trainer``-style replicas, one ``edgepath train``,
Redis run with ``--save ''``) found: the trainer exited on ``ResponseError: no such key`` (``XINFO CONSUMERS``)
once Redis came back empty; the ``serve --trainer`` role task died on the same error without a word; a fresh
trainer then published version 2 under replicas serving v3, which they ignored in silence; and while Redis was
down the trainer logged a ~57-line traceback every second. Each test here runs against a redis-server of its
own without persistence, restarted on the same port (it comes back empty, as in the audit).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from edgepath.engines.primary_path import PrimaryPathBandit
from edgepath.state.base import ClaimResult
from edgepath.state.redis import GROUP, RedisStore
from edgepath.state.redis_backend import RedisBackend
from edgepath.training.leader import TrainerRole
from edgepath.training.online import FAILURE_LOG_EVERY_S, FailureLog, ModelRegistry, OnlineTrainer, PublishConflictError
from edgepath.training.snapshots import SnapshotFollower, SnapshotStore

from state.redis_helpers import REDIS_SERVER, RedisServer, decision, outcome, trained_bandit, wait_for

pytestmark = pytest.mark.redis
KEY = b"test-key-0123456789"
EMPTY_STORE = "came back empty"  # the store's one line when it recreates the consumer group


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test alone, without persistence (``--save '' --appendonly no``)."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it from apt)")
    s = RedisServer(tmp_path).start()
    yield s
    s.stop()


def restart_empty(server: RedisServer) -> None:
    """Stop redis-server and start it again on the same port: without persistence it comes back empty."""
    server.stop()
    server.start()
    with redis.Redis.from_url(server.url) as r:
        assert r.dbsize() == 0  # the premise: nothing survived the restart


async def feed(server: RedisServer, namespace: str, prefix: str, n: int) -> None:
    """``n`` decisions and their outcomes, written by a replica-like store of their own."""
    writer = RedisStore(server.url, namespace=namespace)
    try:
        for i in range(n):
            d = decision(f"{prefix}-{i}")
            await writer.put_decision(d, 60)
            assert await writer.claim_outcome(outcome(d)) is ClaimResult.NEW
    finally:
        await writer.close()


def messages(caplog: pytest.LogCaptureFixture, text: str, level: int | None = None) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage() and (level is None or r.levelno == level)]


# --------------------------------------------------------------------------------------------------------------------
# bug 1, store side: every stream command of the trainer recreates the consumer group


@pytest.mark.parametrize("outcomes_before_the_trainer", [False, True], ids=["stream-missing", "stream-without-group"])
@pytest.mark.parametrize("command", ["xreadgroup", "xautoclaim", "xinfo-consumers", "xpending"])
async def test_each_stream_command_recreates_the_group_after_an_empty_restart(
    server: RedisServer,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
    command: str,
    outcomes_before_the_trainer: bool,
) -> None:
    """Before the fix the group was created once per store object: after the restart ``XREADGROUP``, ``XAUTOCLAIM``
    and ``XPENDING`` answered ``NOGROUP`` and ``XINFO CONSUMERS`` ``no such key`` (with no stream) for ever. Now the
    first of them recreates the group (one warning), and outcomes the replicas appended after the restart, before the
    group existed again, are read too."""
    caplog.set_level(logging.INFO, logger="edgepath")
    store = RedisStore(server.url, namespace=namespace, claim_idle_ms=200)
    try:
        await feed(server, namespace, "before", 1)
        assert len(await store.read_outcomes("trainer", 10, 0)) == 1  # the group exists; pending list read: "done"
        if command == "xreadgroup":
            store.forget_inflight()  # as a new trainer term does: the next read starts with XREADGROUP … 0
        restart_empty(server)
        if outcomes_before_the_trainer:
            await feed(server, namespace, "after", 3)  # the stream exists again, without the group
        if command in ("xreadgroup", "xautoclaim"):
            got = await store.read_outcomes("trainer", 10, 0)
        elif command == "xinfo-consumers":
            assert await store.prune_consumers(keep="trainer") == 0
            got = await store.read_outcomes("trainer", 10, 0)
        else:
            assert await store.pending_count() == 0
            got = await store.read_outcomes("trainer", 10, 0)
        expected = ["after-0", "after-1", "after-2"] if outcomes_before_the_trainer else []
        assert [record.decision_id for _, record in got] == expected
        assert await store.pending_count() == len(expected)
        assert store.group_recreations == 1
        assert len(messages(caplog, EMPTY_STORE, logging.WARNING)) == 1
        await feed(server, namespace, "later", 2)
        assert [r.decision_id for _, r in await store.read_outcomes("trainer", 10, 0)] == ["later-0", "later-1"]
        assert store.group_recreations == 1  # once per restart, not per command
    finally:
        await store.close()


# --------------------------------------------------------------------------------------------------------------------
# bug 1 and 3a: `edgepath train` carries on, continuing its own version line


async def test_the_trainer_carries_on_when_redis_restarts_empty(
    server: RedisServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The body of ``edgepath train`` (``TrainerRole.run``) trained to version 3, then Redis restarted empty. Before
    the fix the role ended on ``ResponseError: no such key`` (the process exited). Now it takes the lock again,
    stores its model again under its own version (3: the store had lost it), recreates the group (one line) and
    trains on: the next version is 4, built on the 10 outcomes learned before the restart."""
    caplog.set_level(logging.INFO, logger="edgepath")
    store = RedisStore(server.url, namespace=namespace, claim_idle_ms=200)
    backend = RedisBackend(store)
    snapshots = SnapshotStore(backend.snapshots, KEY)
    role = TrainerRole(
        backend,
        snapshots,
        ModelRegistry(PrimaryPathBandit()),
        batch_size=5,
        lock_ttl_s=1.5,
        lock_poll_s=0.02,
        consumer="trainer-0",
        retry_s=0.05,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(role.run(stop))
    reader = RedisStore(server.url, namespace=namespace)
    reader_snapshots = SnapshotStore(RedisBackend(reader).snapshots, KEY)
    try:
        await feed(server, namespace, "before", 10)

        async def stored(version: int) -> bool:
            return await reader_snapshots.latest_version() == version

        await wait_for(lambda: stored(3))
        restart_empty(server)
        await wait_for(lambda: stored(3))  # put back by the trainer, before any new outcome
        loaded = await reader_snapshots.load()
        assert loaded is not None and loaded.model.samples_seen == 10
        assert role.republished == 1
        await feed(server, namespace, "after", 5)

        async def trained_15() -> bool:
            return role.registry.current.model.samples_seen == 15

        await wait_for(trained_15)
        assert role.registry.current.version == 4 and await reader_snapshots.latest_version() == 4
        assert not task.done() and role.is_leader
        assert await reader.redis.exists(f"{namespace}:trainer:lock") == 1
        groups = await reader.redis.xinfo_groups(reader.stream)
        assert [g["name"] for g in groups] == [GROUP.encode()]
        assert await reader.pending_count() == 0 and await reader.stream_length() == 0  # all used and acknowledged
        assert store.group_recreations == 1 and len(messages(caplog, EMPTY_STORE, logging.WARNING)) == 1
        assert not messages(caplog, "trainer role failed")  # nothing unexpected on the way
    finally:
        stop.set()
        async with asyncio.timeout(15):
            await task
        await reader.close()
        await store.close()


# --------------------------------------------------------------------------------------------------------------------
# bug 2 and 3: two `serve --trainer` replicas (trainer role + snapshot follower each) through an empty restart


async def test_competing_trainer_roles_keep_training_after_redis_restarts_empty(
    server: RedisServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The audit's deployment: two replicas, each with a snapshot follower and a trainer role competing for the lock
    (as ``Service.build`` wires them for ``serve --trainer``). Before the fix both role tasks died on the restart
    (``ResponseError``, seen only at shutdown) and outcomes accepted afterwards were never trained. Now training goes
    on, and on from the model learned before the restart (version 4 holds all 15 outcomes)."""
    caplog.set_level(logging.INFO, logger="edgepath")
    stores = [RedisStore(server.url, namespace=namespace, claim_idle_ms=200) for _ in range(2)]
    registries = [ModelRegistry(PrimaryPathBandit()) for _ in range(2)]
    roles, followers = [], []
    for i, (s, registry) in enumerate(zip(stores, registries, strict=True)):
        snaps = SnapshotStore(RedisBackend(s).snapshots, KEY)
        followers.append(SnapshotFollower(snaps, registry, poll_s=0.1))
        roles.append(
            TrainerRole(
                RedisBackend(s),
                snaps,
                registry,
                batch_size=5,
                lock_ttl_s=1.5,
                lock_poll_s=0.02,
                consumer=f"replica-{i}",
                retry_s=0.05,
            )
        )
    stop = asyncio.Event()
    for f in followers:
        f.start()
    tasks = [asyncio.create_task(r.run(stop)) for r in roles]
    reader = RedisStore(server.url, namespace=namespace)
    reader_snapshots = SnapshotStore(RedisBackend(reader).snapshots, KEY)
    try:
        await feed(server, namespace, "before", 10)

        async def everyone_on(version: int) -> bool:
            return all(r.current.version == version for r in registries)

        await wait_for(lambda: everyone_on(3))
        restart_empty(server)

        async def store_has_3() -> bool:
            return await reader_snapshots.latest_version() == 3

        await wait_for(store_has_3)
        await feed(server, namespace, "after", 5)

        async def trained_15() -> bool:
            loaded = await reader_snapshots.load()
            return loaded is not None and loaded.model.samples_seen == 15

        await wait_for(trained_15)
        assert await reader_snapshots.latest_version() == 4
        await wait_for(lambda: everyone_on(4))

        async def one_leader() -> bool:
            return sum(r.is_leader for r in roles) == 1

        await wait_for(one_leader)
        assert not any(t.done() for t in tasks)
        assert await reader.pending_count() == 0 and await reader.stream_length() == 0
        assert not messages(caplog, "trainer role failed")
    finally:
        stop.set()
        async with asyncio.timeout(15):
            await asyncio.gather(*tasks)
        for f in followers:
            await f.stop()
        await reader.close()
        for s in stores:
            await s.close()


class _FlakyBackend(RedisBackend):
    """Fails the first ``fail`` term set-ups with an error no handler expects (a stand-in for any bug or reply)."""

    def __init__(self, store: RedisStore, fail: int) -> None:
        super().__init__(store)
        self.fail = fail

    async def prune_consumers(self, keep: str) -> int:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("injected failure of a trainer term")
        return await super().prune_consumers(keep)


async def test_a_failed_term_is_logged_at_once_and_the_role_competes_again(
    server: RedisServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Bug 2's general case: a term that fails on an unexpected error. Before the fix it ended ``TrainerRole.run``
    (the task died; main.py noticed only at shutdown). Now the role logs it at once at ERROR with the traceback,
    while it runs on, releases the lock, competes again after ``retry_s`` and trains."""
    caplog.set_level(logging.INFO, logger="edgepath")
    store = RedisStore(server.url, namespace=namespace, claim_idle_ms=200)
    backend = _FlakyBackend(store, fail=2)
    role = TrainerRole(
        backend,
        SnapshotStore(backend.snapshots, KEY),
        ModelRegistry(PrimaryPathBandit()),
        batch_size=5,
        lock_ttl_s=1.5,
        lock_poll_s=0.02,
        consumer="trainer-0",
        retry_s=0.05,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(role.run(stop))
    try:

        async def logged() -> bool:
            return bool(messages(caplog, "trainer role failed", logging.ERROR))

        await wait_for(logged)
        assert not task.done()  # logged while the role lives on, not when someone awaits a dead task
        first = messages(caplog, "trainer role failed", logging.ERROR)
        assert len(first) == 1 and first[0].exc_info is not None and "injected" in str(first[0].exc_info[1])

        async def leading() -> bool:
            return role.is_leader and role.trainer is not None

        await wait_for(leading)
        assert role.terms == 3 and backend.fail == 0
        assert len(messages(caplog, "trainer role works again after 2 failures", logging.INFO)) == 1
        await feed(server, namespace, "x", 5)

        async def trained() -> bool:
            return role.registry.current.model.samples_seen == 5

        await wait_for(trained)
        assert len(messages(caplog, "trainer role failed", logging.ERROR)) == 1  # the second: counted, one-line later
    finally:
        stop.set()
        async with asyncio.timeout(15):
            await task
        await store.close()


# --------------------------------------------------------------------------------------------------------------------
# bug 3b: a replica that sees the store's version go below its own


async def test_a_replica_warns_once_and_stores_its_model_again_when_the_store_goes_back(
    server: RedisServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A replica serves v3; Redis restarts empty and a trainer started afresh publishes its first model as v2. Before
    the fix the replica ignored v2 (and v3) without a word. Now it warns once, naming both versions, keeps serving v3
    and stores v3's snapshot again, as the trainer signed it; the fresh trainer's v3 then conflicts, and a trainer
    role started now continues from v3 (its v4 holds the 60 samples of v3 and 5 new ones)."""
    caplog.set_level(logging.INFO, logger="edgepath")
    store = RedisStore(server.url, namespace=namespace, claim_idle_ms=200)
    snaps = SnapshotStore(RedisBackend(store).snapshots, KEY)
    registry = ModelRegistry(PrimaryPathBandit())
    follower = SnapshotFollower(snaps, registry)
    stop = asyncio.Event()
    task: asyncio.Task[None] | None = None
    try:
        assert await follower.check() is False  # a new deployment: nothing stored, the initial model; no warning
        await snaps.publish(trained_bandit(60), 3, [])
        assert await follower.check() is True and registry.current.version == 3
        restart_empty(server)
        await snaps.publish(trained_bandit(5, seed=1), 2, [])  # a fresh trainer's first model in the empty store
        for _ in range(3):
            assert await follower.check() is False
        warned = messages(caplog, "went back", logging.WARNING)
        assert len(warned) == 1, [r.getMessage() for r in warned]
        assert "went back to 2, below version 3 served here" in warned[0].getMessage()
        assert registry.current.version == 3 and registry.current.model.samples_seen == 60
        assert await snaps.latest_version() == 3 and follower.restores == 1
        loaded = await snaps.load()
        assert loaded is not None and loaded.model.samples_seen == 60
        with pytest.raises(PublishConflictError):
            await snaps.publish(trained_bandit(10, seed=1), 3, [])  # the fresh line cannot go on below v3

        role = TrainerRole(
            RedisBackend(store),
            snaps,
            ModelRegistry(PrimaryPathBandit()),  # a trainer process started after the restart: no model in memory
            batch_size=5,
            lock_ttl_s=1.5,
            lock_poll_s=0.02,
            consumer="fresh",
        )
        task = asyncio.create_task(role.run(stop))
        await feed(server, namespace, "y", 5)

        async def v4() -> bool:
            return await snaps.latest_version() == 4

        await wait_for(v4)
        loaded = await snaps.load()
        assert loaded is not None and loaded.model.samples_seen == 65
        assert await follower.check() is True and registry.current.version == 4
        assert len(messages(caplog, "went back", logging.WARNING)) == 1
    finally:
        stop.set()
        if task is not None:
            async with asyncio.timeout(15):
                await task
        await store.close()


# --------------------------------------------------------------------------------------------------------------------
# bug 4: one traceback per outage, not one per second


async def test_an_outage_logs_one_traceback_then_counts_then_one_line_when_back(
    server: RedisServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis down while the trainer steps: before the fix every failed step logged its traceback (the audit: 529
    lines in 8 s). Now the first failure has its traceback, later ones at most one line every
    ``FAILURE_LOG_EVERY_S``, and one line says when a step works again."""
    caplog.set_level(logging.INFO, logger="edgepath")
    failed_reads = 0

    class CountingStore(RedisStore):
        async def read_outcome_rows(self, *args: Any, **kwargs: Any) -> Any:
            nonlocal failed_reads
            try:
                return await super().read_outcome_rows(*args, **kwargs)
            except Exception:
                failed_reads += 1
                raise

    store = CountingStore(server.url, namespace=namespace)
    trainer = OnlineTrainer(store, ModelRegistry(PrimaryPathBandit()), batch_size=5, retry_s=0.02)
    trainer.start()
    try:
        server.stop()
        down_at = time.monotonic()

        async def many_failures() -> bool:
            return failed_reads >= 20

        await wait_for(many_failures)
        server.start()

        async def works_again() -> bool:
            return bool(messages(caplog, "trainer step works again", logging.INFO))

        await wait_for(works_again)
        outage_s = time.monotonic() - down_at
        step_lines = [r for r in caplog.records if r.getMessage().startswith("trainer step")]
        with_traceback = [r for r in step_lines if r.exc_info]
        assert len(with_traceback) == 1 and with_traceback[0].levelno == logging.ERROR
        assert "trainer step failed; keeping model version 1" in with_traceback[0].getMessage()
        still = [r for r in step_lines if "still failing" in r.getMessage()]
        assert len(still) <= 1 + outage_s / FAILURE_LOG_EVERY_S
        assert len(step_lines) == 1 + len(still) + 1, [r.getMessage() for r in step_lines]
        assert failed_reads >= 20
    finally:
        await trainer.stop()
        await store.close()


def test_failure_log_throttles_a_run_of_failures_and_starts_over_after_a_success() -> None:
    """The throttle itself, on a fake clock: traceback first, then a line at most every ``every_s``, one line back."""
    now = [100.0]
    logger = logging.getLogger("test.failure_log")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        failures = FailureLog(logger, "thing", every_s=5.0, clock=lambda: now[0])
        for t in range(11):  # a failure every second for 10 s
            now[0] = 100.0 + t
            failures.failed(ConnectionError(f"refused {t}"), "retrying")
        assert failures.failing and failures.failures == 11
        lines = [r.getMessage() for r in records]
        assert lines == [
            "thing failed; retrying",
            "thing still failing: 6 failures in 5.0 s (last: ConnectionError('refused 5')); retrying",
            "thing still failing: 11 failures in 10.0 s (last: ConnectionError('refused 10')); retrying",
        ]
        assert records[0].exc_info is not None and records[1].exc_info is None and records[2].exc_info is None
        now[0] = 112.5
        failures.succeeded()
        failures.succeeded()  # a second success says nothing
        assert [r.getMessage() for r in records[3:]] == ["thing works again after 11 failures in 12.5 s"]
        assert records[3].levelno == logging.INFO and not failures.failing and failures.total_failures == 11
        failures.failed(ConnectionError("again"), "retrying")  # a new run: its first failure has its traceback
        assert records[4].getMessage() == "thing failed; retrying" and records[4].exc_info is not None
    finally:
        logger.removeHandler(handler)
    with pytest.raises(ValueError):
        FailureLog(logger, "thing", every_s=-1.0)
