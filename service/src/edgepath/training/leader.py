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

A stored snapshot this trainer cannot verify
--------------------------------------------
A trainer never publishes over a stored snapshot whose signature its key does not verify (unsigned, or signed with
another key, or altered). An on-call drill showed why: a trainer started with the wrong ``EDGEPATH_HMAC_KEY`` refused
the fleet's snapshot v13, trained on from its artefact model and published v14 and v15, which every replica refused;
once its key was fixed it refused v15 in turn and published v16 from the artefact: everything the fleet had learned
up to v13 was gone. Now the term ends instead (:class:`UnverifiableSnapshotError`): an ERROR names
``EDGEPATH_HMAC_KEY``, the stored version and the key ids (:func:`~edgepath.training.snapshots.key_id`: "signed with
key id X, this process's key has key id Y" is a key mismatch; the same key id is a snapshot altered or forged after
signing), nothing is published, and the role **steps down**: it releases the lock and competes for it again after
``unverifiable_retry_s``, logging the refusal again at ERROR at most once every ``UNVERIFIABLE_LOG_EVERY_S`` (in
between at DEBUG) while nothing changes. Why step down rather than hold the lock and wait: while this process holds
it, no other trainer can train; released, a trainer with the right key (the other pod of a rolling update, a
``serve --trainer`` replica) takes it and the fleet keeps learning. The process stays alive (a trainer that exited
would be restarted with the same key, and a ``serve --trainer`` replica keeps serving), and once the stored snapshot
verifies (the operator fixed the key and restarted it, or reset the snapshot) the next term adopts it as usual and
publishes the next version from it. The same holds within a term: a publication that conflicts with a stored
snapshot the trainer cannot verify ends the term, and nothing more is published meanwhile.

There is no setting to publish over such a snapshot anyway: after an intended key change (a rotation), or to discard
a forged snapshot, the operator deletes the snapshot hash (``DEL {ns}:model:snapshot``; keep ``{ns}:model:version``).
The trainer then publishes its own model above the stored version counter, and the replicas (those with the trainer's
key) load it. What the deleted snapshot had learned is lost (without its key it could not be loaded anyway).

A snapshot that verifies but does not load here (``unreadable``: e.g. incompatible library versions; ``wrong_type``)
was signed with this trainer's key: the trainer continues from its own model above its version, as before.

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
from collections.abc import Callable

from edgepath.state.backend import LockLost, StateBackend, StoreUnreachable
from edgepath.tasks import wait_event
from edgepath.training.online import FailureLog, ModelRegistry, OnlineTrainer, PublishConflictError, Refitter
from edgepath.training.snapshots import SIGNATURE_REASONS, SnapshotRejectedError, SnapshotStore

log = logging.getLogger(__name__)

#: While the stored snapshot stays unverifiable, its refusal is logged at ERROR at most once per this many seconds.
UNVERIFIABLE_LOG_EVERY_S = 60.0


class UnverifiableSnapshotError(Exception):
    """The stored snapshot's signature does not verify with this trainer's key (see the module docstring): the trainer
    publishes nothing and steps down. ``version`` is the stored version, ``reason`` the refusal's."""

    def __init__(self, version: int, rejected: SnapshotRejectedError, snapshot_key: str) -> None:
        super().__init__(
            f"stored model snapshot v{version} cannot be verified with this trainer's EDGEPATH_HMAC_KEY "
            f"({rejected}); publishing nothing over it and stepping down (the lock is free for a trainer with the "
            f"right key). Fix EDGEPATH_HMAC_KEY (the replicas' and the trainer's must be the same) and restart this "
            f"trainer; to discard that snapshot instead (a key rotation, a forgery), delete the snapshot "
            f"({snapshot_key}) and keep the version counter"
        )
        self.version = version
        self.reason = rejected.reason


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
    unverifiable_retry_s:
        After a term that found a stored snapshot this trainer cannot verify (:class:`UnverifiableSnapshotError`),
        compete for the lock again after this long, s (> 0).
    clock:
        Monotonic seconds (``time.monotonic``), for the rate of the refusal's log lines.

    Raises
    ------
    ValueError
        ``retry_s`` or ``unverifiable_retry_s`` not positive.
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
        unverifiable_retry_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not retry_s > 0.0:
            raise ValueError("retry_s must be > 0")
        if not unverifiable_retry_s > 0.0:
            raise ValueError("unverifiable_retry_s must be > 0")
        self.unverifiable_retry_s = unverifiable_retry_s
        self.clock = clock
        #: The stored snapshot this trainer last found unverifiable, until one verifies (or none is stored).
        self.refusing: UnverifiableSnapshotError | None = None
        self.refusals = 0  # terms (or publications) ended by an unverifiable stored snapshot
        self._refusal_logged: tuple[float, str] | None = None  # when and what was last logged at ERROR
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
        if self.refusing is not None:  # an unverifiable snapshot is stored: nothing goes over it (the term ends)
            raise PublishConflictError(f"not publishing version {version}: {self.refusing}")
        try:
            return await self.snapshots.publish(model, version, entry_ids)  # type: ignore[arg-type]
        except PublishConflictError:
            log.warning("model publication conflict; re-synchronising to the stored snapshot")
            try:
                await self._sync_from_snapshot()
            except UnverifiableSnapshotError:  # self.refusing is set: the term loop steps down and logs it
                pass
            self.backend.forget_inflight()
            raise

    async def _sync_from_snapshot(self, republish: bool = True) -> None:
        """Bring this trainer's model and the stored snapshot to the same version, the higher of the two.

        A newer stored snapshot becomes the trainer's model. A stored version older than the trainer's model (a
        store that lost its data while this process kept the model: a Redis restarted without persistence), or no
        snapshot at all, is replaced (``republish``) by the trainer's current model under its current version, so
        the store has it again and the next publication continues the version line the replicas serve instead of
        starting a second one below it. The initial model (version 1, never trained) is not published.

        A stored snapshot whose signature this trainer's key does not verify is neither adopted nor replaced: see
        the module docstring (:attr:`refusing` is set until a stored snapshot verifies, or none is stored).

        Raises
        ------
        UnverifiableSnapshotError
            The stored snapshot is unsigned or its signature does not verify with this trainer's key (nothing was
            published, the local model is unchanged).
        edgepath.state.backend.StoreUnreachable
            The store cannot be reached (the term retries later).
        """
        try:
            loaded = await self.snapshots.load()
        except SnapshotRejectedError as exc:
            stored = await self.snapshots.latest_version()
            if exc.reason in SIGNATURE_REASONS:
                # Publishing above it would replace what the fleet learned with this trainer's local model, and the
                # replicas (whose key signed it, if this trainer's key is the wrong one) would refuse ours anyway.
                where = getattr(self.snapshots.channel, "snapshot_key", "{namespace}:model:snapshot")
                self.refusing = UnverifiableSnapshotError(stored, exc, where)
                raise self.refusing from exc
            # Signed with our key but not loadable here (unreadable, wrong type): it still holds the version
            # counter, so continue above it, or every later publication would conflict with it and training would
            # stop (issue 17 soak). Replicas keep serving the last good model meanwhile.
            self._verifies_again()
            if stored >= self.registry.current.version:
                await self.registry.publish(self.registry.current.model, stored)
            log.error(
                "stored snapshot v%d refused; training on from the local model (next version %d)",
                stored,
                self.registry.current.version + 1,
            )
            return
        self._verifies_again()
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

    def _verifies_again(self) -> None:
        if self.refusing is not None:
            log.info(
                "the stored model snapshot is no longer one this trainer cannot verify (it refused v%d); training",
                self.refusing.version,
            )
            self.refusing = None
            self._refusal_logged = None

    def _log_refusal(self, exc: UnverifiableSnapshotError) -> None:
        """Log ``exc`` at ERROR: at once when it is new (another version or reason), else at most once every
        :data:`UNVERIFIABLE_LOG_EVERY_S` (DEBUG in between)."""
        self.refusals += 1
        now, text = self.clock(), str(exc)
        last = self._refusal_logged
        if last is None or last[1] != text or now - last[0] >= UNVERIFIABLE_LOG_EVERY_S:
            self._refusal_logged = (now, text)
            log.error("%s; competing for the trainer lock again every %g s", text, self.unverifiable_retry_s)
        else:
            log.debug("%s", text)

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
            except UnverifiableSnapshotError:  # logged by the term; stepped down without publishing (module docstring)
                await _wait(stop, self.unverifiable_retry_s)
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
        # (DEBUG while refusing an unverifiable snapshot: the role takes the lock every unverifiable_retry_s)
        log.log(
            logging.DEBUG if self.refusing is not None else logging.INFO,
            "trainer lock %s acquired by %s",
            lock.name,
            self.consumer,
        )
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
                if self.refusing is not None:  # a publication met a snapshot this trainer cannot verify
                    raise self.refusing
                try:
                    await lock.renew()
                    renewed_at = time.monotonic()
                except StoreUnreachable as exc:
                    if time.monotonic() - renewed_at > self.lock_ttl_s * 0.8:
                        log.warning("trainer lock could not be renewed (%s); stepping down", exc)
                        break
        except UnverifiableSnapshotError as exc:
            self._log_refusal(exc)
            raise
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
