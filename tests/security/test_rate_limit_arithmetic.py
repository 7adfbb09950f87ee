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


async def test_a_batch_takes_one_in_process_token_per_device_in_order() -> None:
    """RecommendBatch's callers on the in-process limiter (EdgeSecurity.admit_all, without a coroutine per device):
    each device pays one token, an empty bucket refuses with RateLimited naming requests, and the tokens the devices
    before it took stay taken, as the sequential loop of Recommend calls would leave them."""
    from edgepath.errors import RateLimited
    from edgepath.security import EdgeSecurity
    from edgepath.security.auth import Authenticator
    from edgepath.security.plausibility import MemoryQuarantine, OutcomeGuard
    from edgepath.types import Principal

    now = [50.0]
    limiter = MemoryRateLimiter(0.01, 2, clock=lambda: now[0])
    security = EdgeSecurity(
        auth=Authenticator(),
        request_limiter=limiter,
        guard=OutcomeGuard(10.0, MemoryRateLimiter(1.0, 1), MemoryQuarantine(())),
    )
    devices = [Principal(device_id=f"gw-{i}") for i in range(20)]
    await security.admit_all(devices)
    await security.admit_all(devices)  # burst 2: a second token each
    assert limiter.take("gw-0") > 0.0 and limiter.take("gw-19") > 0.0
    with pytest.raises(RateLimited, match="too many requests"):
        await security.admit_all([Principal(device_id="fresh"), devices[3], Principal(device_id="late")])
    assert limiter.take("fresh") == 0.0 and limiter.take("fresh") > 0.0  # the batch took one of its two
    assert limiter.take("late") == 0.0 and limiter.take("late") == 0.0  # after the refusal: untouched
