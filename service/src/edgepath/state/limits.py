"""Rate-limit and quarantine primitives, in process or shared in Redis (what a state backend hands out).

Per-device token buckets (GCRA)
-------------------------------
A bucket holds at most ``burst`` tokens and refills at ``rate_per_s`` tokens
per second; each call takes one (or ``cost``, below). It is implemented as the Generic Cell Rate
Algorithm (ITU-T I.371 / ATM Forum TM 4.0 "virtual scheduling"), which is
equivalent to that token bucket and stores one number per key: the
*theoretical arrival time* ``tat``. With emission interval ``T = 1/rate`` a
call at time ``now`` is allowed when::

    new_tat = max(tat, now) + T
    new_tat - burst·T <= now          (else retry after new_tat - burst·T - now seconds)

and then ``tat := new_tat``. The in-process limiter keeps ``tat`` in a
bounded TTL cache (an idle key expires once its bucket is full again); the
Redis limiter runs the same arithmetic in one Lua script on the Redis clock, so
every replica shares each device's budget.

The test is computed as ``max(tat, now) - (burst - 1)·T <= now``: the same inequality, without adding ``T``
and taking ``burst·T`` off again, which in floating point can leave ``now`` one ulp short and refuse a full
bucket's token (at ~0.8 % of ``time.monotonic`` readings for ``T`` = 3600 s).

A call may take ``cost`` tokens at once (a ``RecommendBatch`` pays one per decision, in one call): ``new_tat =
max(tat, now) + cost·T``, allowed when ``max(tat, now) - (burst - cost)·T <= now`` (``cost`` = 1 is the test
above, to the bit). All or nothing: a refused call takes none. A cost above ``burst`` never fits the bucket; the
limiters answer ``math.inf`` for it (no wait helps), and the callers refuse it as invalid input.

Quarantine sets
---------------
Devices whose outcomes are acknowledged but never trained on (:mod:`edgepath.security.plausibility`
reads them): a set per replica, or one Redis set shared by every replica.

Only :mod:`edgepath.state` builds these on a Redis client (:class:`~edgepath.state.backend.StateBackend`);
:mod:`edgepath.security` re-exports them for its callers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from edgepath.errors import Unavailable
from edgepath.state.codec import TtlIndex


class RateLimiter(Protocol):
    """Takes ``cost`` tokens (default one) from ``key``'s bucket, all or none."""

    async def acquire(self, key: str, cost: int = 1) -> float:
        """0.0 when allowed (the tokens were taken), else the seconds to wait before a retry can succeed
        (``math.inf`` when ``cost`` exceeds the bucket's capacity: no wait helps)."""


def gcra_step(tat: float, now: float, interval_s: float, burst: int, cost: int = 1) -> tuple[float, float]:
    """One GCRA decision for ``cost`` tokens: ``(new tat, retry_after_s)``; ``retry_after_s == 0`` means allowed.

    Parameters
    ----------
    tat:
        Theoretical arrival time of the key (0 for a new key), seconds.
    now:
        Current time, seconds (same clock as ``tat``).
    interval_s:
        ``1 / rate_per_s``.
    burst:
        Bucket capacity, ≥ 1.
    cost:
        Tokens taken, ≥ 1; above ``burst`` the call is never allowed (``retry_after_s`` is ``math.inf``).
    """
    if cost > burst:
        return tat, math.inf
    start = max(tat, now)
    allow_at = start - (burst - cost) * interval_s  # = new tat - burst·T, rounded once (module docstring)
    if allow_at > now:
        return tat, allow_at - now
    return start + cost * interval_s, 0.0


class MemoryRateLimiter:
    """In-process GCRA buckets (one replica, or per-replica budgets).

    Parameters
    ----------
    rate_per_s, burst:
        Refill rate (tokens/s, > 0) and capacity (tokens, ≥ 1).
    max_keys:
        Bound on tracked keys; beyond it the least recently used are dropped
        (which only refills their bucket early).
    clock:
        Monotonic time source, seconds (tests inject one).
    """

    def __init__(
        self, rate_per_s: float, burst: int, *, max_keys: int = 100_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        self.interval_s = 1.0 / rate_per_s
        self.burst = burst
        self.clock = clock
        # one entry per device key; TtlIndex keeps no linked-list objects the garbage collector would walk
        self._tat = TtlIndex(max_keys, burst * self.interval_s + 1.0, timer=clock)

    async def acquire(self, key: str, cost: int = 1) -> float:
        return self.take(key, cost)

    def take(self, key: str, cost: int = 1) -> float:
        """:meth:`acquire` without a coroutine (the buckets are in process): 0.0 when ``cost`` tokens were taken,
        else the seconds until they are back (``math.inf`` for a cost above ``burst``). A ``RecommendBatch`` takes
        one call per device it decides for, costing that device's items (issue 16)."""
        now = self.clock()
        new_tat, retry = gcra_step(self._tat.get(key, 0.0), now, self.interval_s, self.burst, cost)
        if retry == 0.0:
            self._tat[key] = new_tat
        return retry


_GCRA_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3] or '1')
if cost > burst then return 'inf' end
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new_tat = tat + cost * interval
local allow_at = tat - (burst - cost) * interval
if allow_at > now then return tostring(allow_at - now) end
redis.call('SET', KEYS[1], tostring(new_tat), 'PX', math.ceil((new_tat - now) * 1000) + 1)
return '0'
"""


class RedisRateLimiter:
    """GCRA buckets in Redis, shared by every replica (atomic Lua script, Redis clock).

    Parameters
    ----------
    client:
        A ``redis.asyncio.Redis`` client.
    rate_per_s, burst:
        As for :class:`MemoryRateLimiter`.
    prefix:
        Key prefix, e.g. ``edgepath:rl:requests:``.
    """

    def __init__(self, client: Any, rate_per_s: float, burst: int, *, prefix: str = "edgepath:rl:") -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        self.interval_s = 1.0 / rate_per_s
        self.burst = burst
        self.prefix = prefix
        self._script = client.register_script(_GCRA_LUA)

    async def acquire(self, key: str, cost: int = 1) -> float:
        result = await self._script(keys=[self.prefix + key], args=[repr(self.interval_s), self.burst, cost])
        return float(result.decode() if isinstance(result, bytes) else result)  # 'inf': a cost above burst


class FallbackRateLimiter:
    """A shared (Redis) limiter that falls back to an in-process one while the shared store fails.

    Keeps limits in force (per replica) in the Redis store's degraded mode
    instead of turning a Redis outage into server errors. After a failure the
    shared limiter is skipped for ``retry_shared_after_s`` so that requests do
    not each wait for a Redis timeout.
    """

    def __init__(
        self,
        primary: RateLimiter,
        fallback: RateLimiter,
        *,
        retry_shared_after_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self.retry_shared_after_s = retry_shared_after_s
        self.clock = clock
        self._failed_at: float | None = None

    async def acquire(self, key: str, cost: int = 1) -> float:
        from redis.exceptions import RedisError

        if self._failed_at is not None and self.clock() - self._failed_at < self.retry_shared_after_s:
            return await self.fallback.acquire(key, cost)
        try:
            retry = await self.primary.acquire(key, cost)
        except (RedisError, OSError, TimeoutError):
            self._failed_at = self.clock()
            return await self.fallback.acquire(key, cost)
        self._failed_at = None
        return retry


class QuarantineSet(Protocol):
    """Devices whose outcomes are not trained on."""

    async def contains(self, device_id: str) -> bool: ...
    async def add(self, device_id: str) -> None: ...
    async def remove(self, device_id: str) -> None: ...
    async def members(self) -> list[str]: ...


class MemoryQuarantine:
    """In-process quarantine set (per replica)."""

    def __init__(self, initial: Iterable[str] = ()) -> None:
        self._devices = set(initial)

    async def contains(self, device_id: str) -> bool:
        return device_id in self._devices

    async def add(self, device_id: str) -> None:
        self._devices.add(device_id)

    async def remove(self, device_id: str) -> None:
        self._devices.discard(device_id)

    async def members(self) -> list[str]:
        return sorted(self._devices)


class RedisQuarantine:
    """Quarantine set shared by every replica (a Redis set).

    Reads the set at most every ``refresh_s`` seconds (an admin's change on one
    replica reaches the others within that). While Redis fails, answers from the
    last set it read (and remembers local changes) and retries after
    ``retry_after_failure_s``, so an outage neither lifts a quarantine nor
    becomes a server error or a per-request timeout.
    """

    def __init__(
        self,
        client: Any,
        key: str = "edgepath:quarantine",
        initial: Iterable[str] = (),
        *,
        refresh_s: float = 1.0,
        retry_after_failure_s: float = 5.0,
    ) -> None:
        self.client = client
        self.key = key
        self.refresh_s = refresh_s
        self.retry_after_failure_s = retry_after_failure_s
        self._pending = list(initial)
        self._cache: set[str] = set(self._pending)
        self._next_read = 0.0

    async def _refresh(self, force: bool = False) -> set[str]:
        from redis.exceptions import RedisError

        now = time.monotonic()
        if not force and now < self._next_read:
            return self._cache
        try:
            if self._pending:
                await self.client.sadd(self.key, *self._pending)
                self._pending = []
            members = await self.client.smembers(self.key)
            self._cache = {m.decode() if isinstance(m, bytes) else m for m in members}
            self._next_read = now + self.refresh_s
        except (RedisError, OSError, TimeoutError):
            self._next_read = now + self.retry_after_failure_s
        return self._cache

    async def contains(self, device_id: str) -> bool:
        return device_id in await self._refresh()

    async def add(self, device_id: str) -> None:
        self._pending.append(device_id)
        self._cache.add(device_id)
        await self._refresh(force=True)

    async def remove(self, device_id: str) -> None:
        self._cache.discard(device_id)
        self._pending = [d for d in self._pending if d != device_id]
        from redis.exceptions import RedisError

        try:
            await self.client.srem(self.key, device_id)
        except (RedisError, OSError, TimeoutError) as exc:
            raise Unavailable("quarantine store (Redis) unreachable: release not shared; retry") from exc
        await self._refresh(force=True)

    async def members(self) -> list[str]:
        return sorted(await self._refresh(force=True))
