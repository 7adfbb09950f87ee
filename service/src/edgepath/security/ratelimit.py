"""Per-device token buckets (GCRA), in process or shared in Redis, for the transports' request budgets.

The buckets and their arithmetic (ITU-T I.371 GCRA) live in :mod:`edgepath.state.limits` (the Redis one
needs the store's client); this module keeps the names the security layer has always exported and
:func:`enforce`.
"""

from __future__ import annotations

import math
from typing import TypeGuard

from edgepath.errors import RateLimited
from edgepath.state.limits import FallbackRateLimiter, MemoryRateLimiter, RateLimiter, RedisRateLimiter, gcra_step

__all__ = [
    "FallbackRateLimiter",
    "MemoryRateLimiter",
    "RateLimiter",
    "RedisRateLimiter",
    "enforce",
    "gcra_step",
    "in_process",
    "refuse_if_limited",
]


async def enforce(limiter: RateLimiter | None, key: str, what: str = "requests") -> None:
    """Take a token for ``key`` or raise.

    Raises
    ------
    RateLimited
        The bucket is empty; ``retry_after_s`` says when one token is back.
    """
    if limiter is None:
        return
    refuse_if_limited(limiter.take(key) if in_process(limiter) else await limiter.acquire(key), what)


def refuse_if_limited(retry_after_s: float, what: str = "requests") -> None:
    """Raise when ``retry_after_s`` (a limiter's :meth:`~edgepath.state.limits.RateLimiter.acquire`, s) refused.

    Raises
    ------
    RateLimited
        ``retry_after_s`` > 0: the bucket was empty; the error carries it as its retry hint.
    """
    if retry_after_s > 0.0:
        raise RateLimited(
            f"too many {what} for this device; retry after {math.ceil(retry_after_s * 1000)} ms",
            retry_after_s=retry_after_s,
        )


def in_process(limiter: RateLimiter) -> TypeGuard[MemoryRateLimiter]:
    """Whether ``limiter`` keeps its buckets in this process: a token is taken at once, without a coroutine
    (:meth:`MemoryRateLimiter.take`; issue 16). Else a token is a round trip (Redis), worth overlapping with the
    caller's other round trips."""
    return isinstance(limiter, MemoryRateLimiter)
