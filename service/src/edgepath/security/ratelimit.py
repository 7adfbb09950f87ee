"""Per-device token buckets (GCRA), in process or shared in Redis; the buckets live in :mod:`edgepath.state.limits`.

A bucket holds at most ``burst`` tokens and refills at ``rate_per_s`` tokens
per second; each call takes one. It is implemented as the Generic Cell Rate
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
"""

from __future__ import annotations

import math

from edgepath.errors import RateLimited
from edgepath.state.limits import FallbackRateLimiter, MemoryRateLimiter, RateLimiter, RedisRateLimiter, gcra_step

__all__ = ["FallbackRateLimiter", "MemoryRateLimiter", "RateLimiter", "RedisRateLimiter", "enforce", "gcra_step"]


async def enforce(limiter: RateLimiter | None, key: str, what: str = "requests") -> None:
    """Take a token for ``key`` or raise.

    Raises
    ------
    RateLimited
        The bucket is empty; ``retry_after_s`` says when one token is back.
    """
    if limiter is None:
        return
    retry_after_s = await limiter.acquire(key)
    if retry_after_s > 0.0:
        raise RateLimited(
            f"too many {what} for this device; retry after {math.ceil(retry_after_s * 1000)} ms",
            retry_after_s=retry_after_s,
        )
