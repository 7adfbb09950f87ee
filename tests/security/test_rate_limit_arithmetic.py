"""The GCRA arithmetic of the rate limits (:mod:`edgepath.state.limits`), in process: no Redis needed."""

from __future__ import annotations

import math

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


async def test_a_batch_takes_one_in_process_token_per_decision_of_each_device_in_order() -> None:
    """RecommendBatch's callers on the in-process limiter (EdgeSecurity.admit_batch, without a coroutine per device):
    each device pays one token per item it names, an empty bucket refuses with RateLimited naming the batch, and
    the tokens the devices before it took stay taken, as the sequential loop of Recommend calls would leave them."""
    from edgepath.errors import RateLimited
    from edgepath.security import EdgeSecurity, batch_costs
    from edgepath.security.auth import Authenticator
    from edgepath.security.plausibility import MemoryQuarantine, OutcomeGuard

    now = [50.0]
    limiter = MemoryRateLimiter(0.01, 2, clock=lambda: now[0])
    security = EdgeSecurity(
        auth=Authenticator(),
        request_limiter=limiter,
        guard=OutcomeGuard(10.0, MemoryRateLimiter(1.0, 1), MemoryQuarantine(())),
    )
    devices = [f"gw-{i}" for i in range(20)]
    await security.admit_batch(batch_costs(None, devices), len(devices))
    await security.admit_batch(batch_costs(None, devices), len(devices))  # burst 2: a second token each
    assert limiter.take("gw-0") > 0.0 and limiter.take("gw-19") > 0.0
    with pytest.raises(RateLimited, match="batch of 3 decisions"):
        await security.admit_batch(batch_costs(None, ["fresh", devices[3], "late"]), 3)
    assert limiter.take("fresh") == 0.0 and limiter.take("fresh") > 0.0  # the batch took one of its two
    assert limiter.take("late") == 0.0 and limiter.take("late") == 0.0  # after the refusal: untouched
    # two items of one device cost it two tokens, in one call
    await security.admit_batch(batch_costs(None, ["twice", "twice"]), 2)
    assert limiter.take("twice") > 0.0


def test_a_cost_takes_that_many_tokens_all_or_none() -> None:
    """gcra_step with ``cost``: the bucket of ``burst`` tokens pays a cost up to ``burst`` at once, refuses (taking
    nothing) when fewer are left, tells when they are back, and never fits a cost above ``burst``."""
    # rate 1/s, burst 4, at t = 100
    tat, retry = gcra_step(0.0, 100.0, 1.0, 4, cost=3)
    assert retry == 0.0 and tat == 103.0  # three tokens taken: one left
    assert gcra_step(tat, 100.0, 1.0, 4, cost=2) == (tat, 1.0)  # two needed, one left: back in 1 s, none taken
    assert gcra_step(tat, 101.0, 1.0, 4, cost=2) == (105.0, 0.0)
    assert gcra_step(0.0, 100.0, 1.0, 4, cost=4)[1] == 0.0  # a whole bucket
    assert gcra_step(0.0, 100.0, 1.0, 4, cost=5) == (0.0, math.inf)  # more than it holds: never
    for now in _ROUNDING_CLOCKS[:50]:  # cost 1 is the one-token step, to the bit
        assert gcra_step(now - 7.0, now, 3600.0, 3, cost=1) == gcra_step(now - 7.0, now, 3600.0, 3), now


def test_batch_costs_charge_each_decision_to_its_principal() -> None:
    """A device pays for every item of its batch; authentication off, each declared device for its own items; an
    admin (a gateway) charges each item to the device it names and one token of its own for the call."""
    from edgepath.security import batch_costs
    from edgepath.types import Principal

    device = Principal(device_id="phone-1")
    assert batch_costs(device, ["phone-1"] * 64) == {"phone-1": 64}
    assert batch_costs(None, ["a", "b", "a"]) == {"a": 2, "b": 1}
    assert batch_costs(None, ["x" * 200, "x" * 128]) == {"x" * 128: 2}  # the declared principal's 128 characters
    gateway = Principal(device_id="gw", is_admin=True)
    assert batch_costs(gateway, ["a", "b", "a"]) == {"a": 2, "b": 1, "gw": 1}
