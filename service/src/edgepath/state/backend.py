"""State backends: one object per kind of store owning everything that store provides.

A backend bundles, for one store kind, what the service and the trainer need from shared state:

* ``store`` — the :class:`~edgepath.state.base.StateStore` (decisions, outcome log, ...);
* ``snapshots`` — the :class:`SnapshotChannel` model snapshots are published on and read from;
* :meth:`~StateBackend.trainer_lock` — the lock that keeps one trainer active at a time;
* :meth:`~StateBackend.rate_limiter` and :meth:`~StateBackend.quarantine` — the rate-limit and
  quarantine primitives of :mod:`edgepath.security` (shared between replicas when the store is).

Two backends exist: :class:`MemoryBackend` (in process, one replica) and
:class:`~edgepath.state.redis_backend.RedisBackend` (shared by every replica). Only ``edgepath.state``
touches a Redis client; the composition root (:mod:`edgepath.main`) picks the backend from the store
URL and hands it to the parts that need it. Errors of the store's client that mean "unreachable right
now" reach the callers as :class:`StoreUnreachable`, a lost trainer lock as :class:`LockLost`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from edgepath.errors import Unavailable
from edgepath.state.base import StateStore
from edgepath.state.limits import MemoryQuarantine, MemoryRateLimiter, QuarantineSet, RateLimiter
from edgepath.state.memory import MemoryStore
from edgepath.tasks import wait_event


class StoreUnreachable(Unavailable):
    """The shared store cannot be reached now (connection refused, timed out); the caller retries later."""


class LockLost(Exception):
    """The trainer lock is held by someone else now (it expired, or was never ours)."""


@dataclass(frozen=True)
class SnapshotRecord:
    """A stored model snapshot as the channel keeps it (signing and unpickling are the trainer's business).

    ``version`` is the model version (≥ 1), ``blob`` the serialized model, ``signature`` its hex HMAC or None
    when the stored record has none, ``meta`` a JSON object (bytes).
    """

    version: int
    blob: bytes
    signature: bytes | None
    meta: bytes


class SnapshotNotifications(Protocol):
    """Publication notifications of a :class:`SnapshotChannel` (see :meth:`SnapshotChannel.notifications`)."""

    async def wait(self, timeout_s: float) -> bool:
        """True when a snapshot was published since the last call, False after ``timeout_s`` without one.

        Raises
        ------
        StoreUnreachable
            The store went away (the caller resubscribes later).
        """


class SnapshotChannel(Protocol):
    """Where signed model snapshots are stored, versioned and announced."""

    async def latest_version(self) -> int:
        """Stored model version (0 when nothing was published). Raises :class:`StoreUnreachable`."""

    async def publish(self, record: SnapshotRecord, entry_ids: list[str]) -> tuple[bool, int]:
        """Store ``record`` and acknowledge the outcome-log ``entry_ids`` it was trained on, atomically.

        Only when ``record.version`` is above the stored version (a fencing check). Returns
        ``(published, stored version afterwards)``: ``(True, record.version)``, or ``(False, current)``
        with nothing changed. Raises :class:`StoreUnreachable`.
        """

    async def read(self) -> SnapshotRecord | None:
        """The stored snapshot, or None when nothing was published. Raises :class:`StoreUnreachable`."""

    def notifications(self) -> AbstractAsyncContextManager[SnapshotNotifications]:
        """Subscribe to publications for the duration of an ``async with``. Raises :class:`StoreUnreachable`."""


class TrainerLock(Protocol):
    """One trainer at a time: acquired with expiry ``ttl_s`` and renewed by its holder."""

    name: str

    async def acquire(self, blocking_timeout_s: float) -> bool:
        """Try for up to ``blocking_timeout_s`` s; True when this holder has the lock.

        Raises :class:`StoreUnreachable`.
        """

    async def renew(self) -> None:
        """Extend the expiry to ``ttl_s`` from now. Raises :class:`LockLost` or :class:`StoreUnreachable`."""

    async def release(self) -> None:
        """Give the lock up (never raises: a lock that cannot be released expires)."""


@dataclass(frozen=True)
class StoreMemory:
    """The shared store's memory: ``used_bytes`` (Redis ``INFO memory`` ``used_memory``: what its allocator holds for
    data, bytes) and ``limit_bytes`` (``maxmemory``, past which a ``noeviction`` Redis refuses writes: the service
    then answers 503 "state store full"; 0 = no bound set)."""

    used_bytes: int
    limit_bytes: int


@runtime_checkable
class StateBackend(Protocol):
    """A store with its snapshot channel, trainer lock, rate-limit and quarantine primitives.

    ``shared`` is True when several processes see the same state (replicas follow published snapshots and
    one trainer holds the lock); False for the in-process backend (the serving process trains itself).
    """

    shared: bool

    # Read-only members (properties): a backend's store and channel are its own concrete classes (``MemoryStore``,
    # ``RedisSnapshotChannel`` …), which a settable ``store: StateStore`` would refuse (mutable members are invariant).
    @property
    def store(self) -> StateStore:
        """The decision/outcome store (closed by :meth:`close`)."""

    @property
    def snapshots(self) -> SnapshotChannel:
        """The model snapshot channel, on the same store."""

    def trainer_lock(self, ttl_s: float, poll_s: float) -> TrainerLock:
        """A new lock handle (one per holder) with expiry ``ttl_s`` s, retried every ``poll_s`` s."""

    def rate_limiter(self, rate_per_s: float, burst: int, scope: str) -> RateLimiter:
        """Token buckets (GCRA) of ``burst`` tokens refilling at ``rate_per_s``; ``scope`` names the budget."""

    def quarantine(self, initial: Iterable[str]) -> QuarantineSet:
        """The quarantine set, seeded with ``initial`` device ids."""

    def forget_inflight(self) -> None:
        """A (new) trainer starts reading the outcome log from its unacknowledged entries again."""

    async def prune_consumers(self, keep: str) -> int:
        """Remove dead trainers' empty consumer names (all but ``keep``); how many. Raises :class:`StoreUnreachable`."""

    async def add_exploration_counts(self, increments: Mapping[str, int]) -> dict[str, int] | None:
        """Add this process's decisions per arm set (field ``"WIFI,LTE"`` → count) to the fleet's counts and
        return the fleet's totals (issue 17: one exploration schedule for the fleet); ``None`` while the store is
        unreachable (the increments may or may not have been applied)."""

    async def flush_outbox(self, timeout_s: float) -> int:
        """Write what the degraded-mode outbox holds to the shared store, for at most ``timeout_s`` s (issue 17,
        graceful shutdown); returns the records still not written (0 for the in-process backend)."""

    async def memory_usage(self) -> StoreMemory | None:
        """How much memory the shared store uses and may use (:class:`StoreMemory`); None when it cannot say (the
        in-process backend, whose memory is the serving process's; a store that is unreachable or refuses the
        query). Never raises."""

    async def close(self) -> None:
        """Release the store's connections."""


# ---------------------------------------------------------------------------------------------------------------------
class _MemoryNotifications:
    def __init__(self, channel: MemorySnapshotChannel) -> None:
        self._channel = channel
        self._seen = channel.published_count

    async def wait(self, timeout_s: float) -> bool:
        if self._channel.published_count == self._seen:
            await wait_event(self._channel._published, timeout_s)
        fresh = self._channel.published_count != self._seen
        self._seen = self._channel.published_count
        return fresh


class MemorySnapshotChannel:
    """:class:`SnapshotChannel` in process memory (one event loop): the latest record and a publication event."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._record: SnapshotRecord | None = None
        self._version = 0
        self.published_count = 0
        self._published = asyncio.Event()

    async def latest_version(self) -> int:
        return self._version

    async def publish(self, record: SnapshotRecord, entry_ids: list[str]) -> tuple[bool, int]:
        if record.version <= self._version:
            return False, self._version
        self._record, self._version = record, record.version
        await self._store.ack_outcomes(entry_ids)
        self.published_count += 1
        self._published.set()
        self._published = asyncio.Event()  # waiters woken; the next publication sets a new one
        return True, record.version

    async def read(self) -> SnapshotRecord | None:
        return self._record

    @asynccontextmanager
    async def notifications(self) -> AsyncIterator[SnapshotNotifications]:
        yield _MemoryNotifications(self)


class _MemoryLockState:
    def __init__(self) -> None:
        self.holder: object | None = None
        self.expires_at = 0.0
        self.released = asyncio.Event()


class MemoryTrainerLock:
    """:class:`TrainerLock` among the trainers of one process (same semantics as the Redis lock: expiry, renewal)."""

    def __init__(self, state: _MemoryLockState, ttl_s: float, poll_s: float, name: str = "trainer") -> None:
        self._state = state
        self.ttl_s = ttl_s
        self.poll_s = poll_s
        self.name = name
        self._token = object()

    def _free(self) -> bool:
        return self._state.holder is None or time.monotonic() >= self._state.expires_at

    async def acquire(self, blocking_timeout_s: float) -> bool:
        deadline = time.monotonic() + blocking_timeout_s
        while not self._free():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await wait_event(self._state.released, min(remaining, self.poll_s))
        self._state.holder, self._state.expires_at = self._token, time.monotonic() + self.ttl_s
        self._state.released.clear()
        return True

    async def renew(self) -> None:
        if self._state.holder is not self._token or time.monotonic() >= self._state.expires_at:
            raise LockLost(f"trainer lock {self.name} is not held by this trainer")
        self._state.expires_at = time.monotonic() + self.ttl_s

    async def release(self) -> None:
        if self._state.holder is self._token:
            self._state.holder = None
            self._state.released.set()


class MemoryBackend:
    """:class:`StateBackend` in process memory: a :class:`MemoryStore`, per-replica limits and quarantine."""

    shared = False

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store: MemoryStore = store or MemoryStore()
        self.snapshots = MemorySnapshotChannel(self.store)
        self._lock = _MemoryLockState()
        self._limiters: dict[tuple[str, float, int], MemoryRateLimiter] = {}
        self._quarantine = MemoryQuarantine()
        self._exploration: dict[str, int] = {}

    def trainer_lock(self, ttl_s: float, poll_s: float) -> MemoryTrainerLock:
        return MemoryTrainerLock(self._lock, ttl_s, poll_s)

    def rate_limiter(self, rate_per_s: float, burst: int, scope: str) -> RateLimiter:
        """The process's buckets of ``scope`` (one limiter per scope and budget, as Redis keeps one per key prefix)."""
        key = (scope, rate_per_s, burst)
        if key not in self._limiters:
            self._limiters[key] = MemoryRateLimiter(rate_per_s, burst)
        return self._limiters[key]

    def quarantine(self, initial: Iterable[str]) -> QuarantineSet:
        """The process's quarantine set (one per backend, as in Redis), with ``initial`` added."""
        for device_id in initial:
            self._quarantine._devices.add(device_id)
        return self._quarantine

    async def add_exploration_counts(self, increments: Mapping[str, int]) -> dict[str, int] | None:
        for arms, n in increments.items():
            self._exploration[arms] = self._exploration.get(arms, 0) + n
        return dict(self._exploration)

    async def flush_outbox(self, timeout_s: float) -> int:
        return 0  # nothing is held back: the store is this process's memory

    async def memory_usage(self) -> StoreMemory | None:
        return None  # the serving process's own memory (its container's metrics say it)

    def forget_inflight(self) -> None:
        self.store.requeue_pending()

    async def prune_consumers(self, keep: str) -> int:
        return 0

    async def close(self) -> None:
        await self.store.close()
