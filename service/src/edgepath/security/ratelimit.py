"""Per-device token buckets (GCRA), in process or shared in Redis, for the transports' request budgets.

The buckets and their arithmetic (ITU-T I.371 GCRA) live in :mod:`edgepath.state.limits` (the Redis one
needs the store's client); this module keeps the names the security layer has always exported and
:func:`enforce`.
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
