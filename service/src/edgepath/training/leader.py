"""Trainer role on a shared store: one active trainer at a time, chosen by the backend's trainer lock.

Why a lock and not (only) a Deployment of one replica
-----------------------------------------------------
A Kubernetes Deployment with ``replicas: 1`` does not guarantee one *running* pod: during a rolling
update, or while a node is partitioned and its pod is not yet known dead, two trainer pods can run at
once. Two trainers refitting from the same serving version would fork the model. So the trainer holds
the state backend's trainer lock (:meth:`~edgepath.state.backend.StateBackend.trainer_lock`; on Redis
redis-py's ``SET NX PX`` lock with a random token, released and renewed by token-checking Lua scripts)
with expiry ``lock_ttl_s``, renewed every third of it.
The Helm chart may still run the trainer as a Deployment of one; ``edgepath serve --trainer`` lets
replicas compete for the same lock instead. Both are safe because the lock is not the only guard: the
snapshot publication script refuses a version that is not above the stored one (a fencing token),
so a trainer that lost its lock without noticing (paused process) cannot overwrite a newer model.

Lifecycle
---------
Wait for the lock → load the newest published snapshot (continue from it, never from scratch) →
consume the outcome stream (:class:`~edgepath.training.online.OnlineTrainer` with the atomic
publish-and-acknowledge publisher) → renew the lock. When the store is unreachable, renewal is retried
until the lock would have expired (then the role steps down); a lock lost to another holder steps down
at once. Stepping down drops the in-memory batch: its outcomes stay pending in the stream and are
delivered again (the next holder reclaims them with ``XAUTOCLAIM``).

The role never ends by itself
-----------------------------
:meth:`TrainerRole.run` is the body of a background task (``edgepath train``, ``edgepath serve --trainer``)
that nobody awaits before shutdown: had it ended on an error, training would stop with nothing in the log
and readiness still true (an audit saw exactly that after Redis restarted empty). So any error of a term
(other than a cancellation) is logged at once at ERROR, with its traceback the first time
(:class:`~edgepath.training.online.FailureLog`: repeats as one line every few seconds), the role steps down
and competes for the lock again after ``retry_s``.

A store that came back empty
----------------------------
A Redis restarted without its data has lost the lock (the next renewal finds it gone: the role steps down
and takes it again), the consumer group (the store recreates it, :mod:`edgepath.state.redis`) and the
model snapshot and its version counter. A trainer that still holds its model continues from its own
version, never from the store's lower one: at the start of each term, when the store holds an older
version than the trainer's model (or none), the trainer publishes its current model again under its
current version (:meth:`TrainerRole._sync_from_snapshot`), so the store has it again and the next
version is above every version the replicas have served.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

from edgepath.state.backend import LockLost, StateBackend, StoreUnreachable
from edgepath.tasks import wait_event
from edgepath.training.online import FailureLog, ModelRegistry, OnlineTrainer, PublishConflictError, Refitter
from edgepath.training.snapshots import SnapshotRejectedError, SnapshotStore

log = logging.getLogger(__name__)


def consumer_name() -> str:
    """A consumer name unique to this process (host and pid)."""
    return f"{socket.gethostname()}-{os.getpid()}"


class TrainerRole:
    """Runs an :class:`OnlineTrainer` while holding the trainer lock.

    Parameters
    ----------
    backend, snapshots, registry:
        Shared state backend (its store, lock and consumer bookkeeping), snapshot store and the local
        registry the trainer refits.
    batch_size:
        Outcomes per refit.
    lock_ttl_s:
        Lock expiry, s; renewed every ``lock_ttl_s / 3``.
    lock_poll_s:
        How often a follower retries ``SET NX`` while another trainer holds the lock, s.
    refitter:
        Where the refits run (:class:`~edgepath.training.online.ProcessRefitter`: a process below serving in
        the CPU scheduler); default: a worker thread of this process. The caller closes it.
    min_publish_interval_s:
        At least this long between two snapshots, s (:class:`~edgepath.training.online.OnlineTrainer`'s
        ``min_publish_interval_s``: batches ready sooner are refitted together and published as one).
    retry_s:
        After a term that failed on an unexpected error (see :meth:`run`), compete for the lock again after this
        long, s (> 0).

    Raises
    ------
    ValueError
        ``retry_s`` not positive.
    """

    def __init__(
        self,
        backend: StateBackend,
        snapshots: SnapshotStore,
        registry: ModelRegistry,
        batch_size: int = 50,
        lock_ttl_s: float = 10.0,
        consumer: str | None = None,
        lock_poll_s: float = 0.1,
        refitter: Refitter | None = None,
        min_publish_interval_s: float = 0.0,
        retry_s: float = 1.0,
    ) -> None:
        if not retry_s > 0.0:
            raise ValueError("retry_s must be > 0")
        self.backend = backend
        self.store = backend.store
        self.snapshots = snapshots
        self.registry = registry
        self.batch_size = batch_size
        self.lock_ttl_s = lock_ttl_s
        self.lock_poll_s = lock_poll_s
        self.refitter = refitter
        self.min_publish_interval_s = min_publish_interval_s
        self.consumer = consumer or consumer_name()
        self.retry_s = retry_s
        self.is_leader = False
        self.trainer: OnlineTrainer | None = None
        self.terms = 0
        self.failures = FailureLog(log, "trainer role")  # terms ended by an unexpected error
        self.republished = 0  # models published again into a store that had lost them

    async def _publish(self, model: object, version: int, entry_ids: list[str]) -> int:
        try:
            return await self.snapshots.publish(model, version, entry_ids)  # type: ignore[arg-type]
        except PublishConflictError:
            log.warning("model publication conflict; re-synchronising to the stored snapshot")
            await self._sync_from_snapshot()
            self.backend.forget_inflight()
            raise

    async def _sync_from_snapshot(self, republish: bool = True) -> None:
        """Bring this trainer's model and the stored snapshot to the same version, the higher of the two.

        A newer stored snapshot becomes the trainer's model. A stored version older than the trainer's model (a
        store that lost its data while this process kept the model: a Redis restarted without persistence), or no
        snapshot at all, is replaced (``republish``) by the trainer's current model under its current version, so
        the store has it again and the next publication continues the version line the replicas serve instead of
        starting a second one below it. The initial model (version 1, never trained) is not published.

        Raises
        ------
        edgepath.state.backend.StoreUnreachable
            The store cannot be reached (the term retries later).
        """
        try:
            loaded = await self.snapshots.load()
        except SnapshotRejectedError:
            # A refused snapshot (bad signature, ...) still holds the version counter: continue above it, or
            # every later publication would conflict with it and training would stop (issue 17 soak). The
            # next valid publication replaces it; replicas keep serving the last good model meanwhile.
            stored = await self.snapshots.latest_version()
            if stored >= self.registry.current.version:
                await self.registry.publish(self.registry.current.model, stored)
            log.error(
                "stored snapshot v%d refused; training on from the local model (next version %d)",
                stored,
                self.registry.current.version + 1,
            )
            return
        current = self.registry.current
        if loaded is not None and loaded.version > current.version:
            await self.registry.publish(loaded.model, loaded.version)
            log.info("trainer continues from published model version %d", loaded.version)
            return
        # Nothing published, or an older version than ours: make sure our next version is above any stored counter.
        stored = loaded.version if loaded is not None else await self.snapshots.latest_version()
        if stored >= current.version:
            if loaded is None:
                await self.registry.publish(current.model, stored)
            return
        if not republish or current.version <= 1:
            return
        try:
            await self.snapshots.publish(current.model, current.version, [])
        except PublishConflictError:  # someone stored a version at least ours meanwhile (a replica restoring it)
            await self._sync_from_snapshot(republish=False)
            return
        self.republished += 1
        log.warning(
            "the state store holds model version %d, below this trainer's version %d (it lost its data: a Redis "
            "restarted without persistence?); published version %d again and training on from it",
            stored,
            current.version,
            current.version,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Compete for the lock and train while holding it, until ``stop`` is set.

        Returns only once ``stop`` is set: a term that ends on an unexpected error (anything but a lost lock or an
        unreachable store, which step down as described in the module docstring) is logged at once at ERROR (the
        first of a run of them with its traceback, :attr:`failures`), steps down (trainer stopped, lock released)
        and is followed by a new attempt after ``retry_s``.

        Raises
        ------
        asyncio.CancelledError
            When the task running it is cancelled (propagated, never swallowed).
        """
        while not stop.is_set():
            try:
                await self._term(stop)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures.failed(exc, f"stepped down; competing for the trainer lock again in {self.retry_s} s")
                await _wait(stop, self.retry_s)

    async def _term(self, stop: asyncio.Event) -> None:
        """Take the lock (waiting at most a renewal period for it) and, if taken, train until ``stop`` is set or the
        lock is lost; the lock is released and the trainer stopped however the term ends. Raises what a term's
        unexpected errors raise (:meth:`run` logs them and retries)."""
        renew_every_s = self.lock_ttl_s / 3
        lock = self.backend.trainer_lock(self.lock_ttl_s, self.lock_poll_s)
        try:
            got = await lock.acquire(renew_every_s)
        except StoreUnreachable as exc:
            log.debug("trainer lock: state store unreachable (%s)", exc)
            await _wait(stop, renew_every_s)
            return
        if not got:
            return
        self.terms += 1
        self.is_leader = True
        trainer: OnlineTrainer | None = None
        log.info("trainer lock %s acquired by %s", lock.name, self.consumer)
        try:
            await self._sync_from_snapshot()
            self.backend.forget_inflight()
            await self.backend.prune_consumers(keep=self.consumer)
            trainer = OnlineTrainer(
                self.store,
                self.registry,
                self.batch_size,
                consumer=self.consumer,
                publisher=self._publish,
                refitter=self.refitter,
                min_publish_interval_s=self.min_publish_interval_s,
            )
            self.trainer = trainer
            trainer.start()
            self.failures.succeeded()
            renewed_at = time.monotonic()
            while not stop.is_set():
                await _wait(stop, renew_every_s)
                if stop.is_set():
                    break
                try:
                    await lock.renew()
                    renewed_at = time.monotonic()
                except StoreUnreachable as exc:
                    if time.monotonic() - renewed_at > self.lock_ttl_s * 0.8:
                        log.warning("trainer lock could not be renewed (%s); stepping down", exc)
                        break
        except LockLost as exc:
            log.warning("trainer lock lost (%s); stepping down", exc)
        except StoreUnreachable as exc:
            log.warning("state store unreachable while taking the trainer role (%s); retrying", exc)
        finally:
            try:
                if trainer is not None:
                    await trainer.stop()
            finally:
                self.is_leader = False
                self.backend.forget_inflight()
                await lock.release()


async def _wait(stop: asyncio.Event, timeout_s: float) -> None:
    await wait_event(stop, timeout_s)
