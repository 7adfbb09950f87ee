"""Shared limits in a real redis-server: per-device budgets and quarantine hold across replicas.

Uses the state tests' ``RedisServer`` helper (a real ``redis-server`` on a free
loopback port, stopped by pid); skipped when the binary is missing.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from edge_security_helpers import assert_outcome_cap_counts_every_report, context_body, running_service
from edgepath.security.plausibility import RedisQuarantine
from edgepath.security.ratelimit import FallbackRateLimiter, MemoryRateLimiter, RedisRateLimiter
from redis.asyncio import Redis

pytestmark = pytest.mark.redis


def _redis_helpers() -> Any:
    name = "redis_helpers"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "service" / "state" / "redis_helpers.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    helpers = _redis_helpers()
    if helpers.REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it from apt)")
    server = helpers.RedisServer(tmp_path_factory.mktemp("redis-sec")).start()
    yield server.url
    server.stop()


async def test_budget_is_shared_by_every_replica(redis_url: str) -> None:
    clients = [Redis.from_url(redis_url), Redis.from_url(redis_url)]  # two replicas, one Redis
    try:
        limiters = [RedisRateLimiter(c, rate_per_s=0.01, burst=3, prefix="t1:") for c in clients]
        results = [await limiters[i % 2].acquire("dev-a") for i in range(5)]
        assert results[:3] == [0.0, 0.0, 0.0]
        assert all(r > 0 for r in results[3:])
        assert results[3] <= 100.0 + 1e-6  # one token every 100 s
        assert await limiters[1].acquire("dev-b") == 0.0  # per device
    finally:
        for c in clients:
            await c.aclose()


async def test_quarantine_is_shared_and_survives_an_outage(redis_url: str) -> None:
    a, b = Redis.from_url(redis_url), Redis.from_url(redis_url)
    try:
        qa = RedisQuarantine(a, "t2:q", initial=["dev-x"], refresh_s=0.0)
        qb = RedisQuarantine(b, "t2:q", refresh_s=0.0)
        assert await qa.contains("dev-x")
        await qa.add("dev-y")
        assert await qb.members() == ["dev-x", "dev-y"]
        await qb.remove("dev-x")
        assert not await qa.contains("dev-x")
    finally:
        await a.aclose()
        await b.aclose()


async def test_fallback_limiter_when_redis_is_unreachable() -> None:
    dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2)
    try:
        limiter = FallbackRateLimiter(RedisRateLimiter(dead, 0.01, 2), MemoryRateLimiter(0.01, 2))
        results = [await limiter.acquire("dev-a") for _ in range(3)]
        assert results[:2] == [0.0, 0.0] and results[2] > 0  # limits still apply, in process
        quarantine = RedisQuarantine(dead, "q", initial=["dev-q"])
        assert await quarantine.contains("dev-q")  # the known set, not an error
    finally:
        await dead.aclose()


def test_two_service_replicas_share_a_devices_budget(redis_url: str) -> None:
    settings: dict[str, Any] = {"store_url": redis_url, "rate_limit_per_s": 0.01, "rate_limit_burst": 4}
    settings["redis_namespace"] = "t4"
    with running_service(**settings) as one, running_service(**settings) as two:
        statuses = []
        for i in range(6):
            svc = (one, two)[i % 2]
            with httpx.Client(base_url=f"http://127.0.0.1:{svc.http_port}", timeout=5.0) as http:
                statuses.append(http.post("/v1/recommendations", json=context_body("dev-shared")).status_code)
        assert statuses == [200, 200, 200, 200, 429, 429]


def test_the_shared_outcome_cap_counts_every_report_a_device_makes(redis_url: str) -> None:
    """As on the in-process store (test_plausibility.py): here the token's script runs beside the decision's GET."""
    with running_service(store_url=redis_url, redis_namespace="t-cap", outcome_cap_per_window=3) as svc:
        assert_outcome_cap_counts_every_report(svc.http_port, "dev-cap")


async def test_a_batch_takes_one_shared_token_per_decision(redis_url: str) -> None:
    """RecommendBatch's callers (EdgeSecurity.admit_batch): the Redis token calls of several devices run
    concurrently, each device pays one token per item it names (one script call with its cost), an empty bucket
    refuses with RateLimited naming the batch, and a cost above the burst is refused as invalid input."""
    from edgepath.errors import InvalidInput, RateLimited
    from edgepath.security import EdgeSecurity, batch_costs
    from edgepath.security.auth import Authenticator
    from edgepath.security.plausibility import MemoryQuarantine, OutcomeGuard

    client = Redis.from_url(redis_url)
    try:
        limiter = RedisRateLimiter(client, rate_per_s=0.01, burst=2, prefix="t-batch:")
        security = EdgeSecurity(
            auth=Authenticator(),
            request_limiter=FallbackRateLimiter(limiter, MemoryRateLimiter(0.01, 2)),
            guard=OutcomeGuard(10.0, MemoryRateLimiter(1.0, 1), MemoryQuarantine(())),
        )
        devices = [f"gw-{i}" for i in range(20)]
        await security.admit_batch(batch_costs(None, devices), len(devices))
        await security.admit_batch(batch_costs(None, devices), len(devices))  # burst 2: a second token each
        assert await limiter.acquire("gw-0") > 0.0 and await limiter.acquire("gw-19") > 0.0  # both buckets empty
        with pytest.raises(RateLimited, match="batch of 2 decisions"):
            await security.admit_batch(batch_costs(None, ["fresh", devices[3]]), 2)
        assert await limiter.acquire("fresh") == 0.0  # burst 2: one token left after the batch took one
        assert await limiter.acquire("fresh") > 0.0
        await security.admit_batch(batch_costs(None, ["pair", "pair"]), 2)  # one device's two items: one call
        assert await limiter.acquire("pair") > 0.0
        assert await limiter.acquire("whole", 2) == 0.0 and await limiter.acquire("whole-2", 3) == math.inf
        with pytest.raises(InvalidInput) as err:
            await security.admit_batch(batch_costs(None, ["many"] * 3), 3)  # more than the bucket holds
        assert err.value.field == "requests"
    finally:
        await client.aclose()
