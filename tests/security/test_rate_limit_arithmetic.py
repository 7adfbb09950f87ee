"""The GCRA arithmetic of the rate limits (:mod:`edgepath.state.limits`), in process: no Redis needed."""

from __future__ import annotations

import pytest
from edgepath.security.ratelimit import MemoryRateLimiter
from edgepath.state.limits import gcra_step

#: Clock readings at which ``(now + 3600) - 3600 > now`` in floating point: where the GCRA's "new tat - burst·T"
#: rounded up and refused a full bucket's first token (tests/security/test_plausibility.py failed on one). The
#: in-process limiter reads ``time.monotonic`` (seconds since boot, where such readings occur); the Redis script,
#: changed to the same arithmetic, reads the epoch clock, whose readings (~1.8e9 s) add a whole interval exactly.
_ROUNDING_CLOCKS = [now for now in (1.0 + 0.37 * i for i in range(20_000)) if (now + 3600.0) - 3600.0 > now]


async def test_a_full_bucket_gives_its_token_at_every_clock_reading() -> None:
    assert len(_ROUNDING_CLOCKS) > 20  # the readings that broke it exist
    for now in _ROUNDING_CLOCKS:
        assert gcra_step(0.0, now, 3600.0, 1) == (now + 3600.0, 0.0), now
        assert gcra_step(now - 1.0, now, 3600.0, 2)[1] == 0.0, now  # a bucket refilled past full

    clock = [0.0]
    limiter = MemoryRateLimiter(1 / 3600, 1, clock=lambda: clock[0])
    for i, now in enumerate(_ROUNDING_CLOCKS):
        clock[0] = now
        assert await limiter.acquire(f"dev-{i}") == 0.0, now
        assert await limiter.acquire(f"dev-{i}") == pytest.approx(3600.0)  # the next one an interval later
