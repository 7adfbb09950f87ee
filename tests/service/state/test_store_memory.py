"""The shared store's memory on the service's gauges, for the chart's EdgePathStoreNearlyFull alert.

A full ``noeviction`` Redis refuses every decision and outcome (503 "state store full"); the gauges
``edgepath_store_memory_used_bytes`` / ``edgepath_store_memory_limit_bytes`` (Redis ``INFO memory``) let an operator
see it coming. A real service on a real redis-server of the test's own (its ``maxmemory`` set by the test).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from edgepath.settings import Settings
from edgepath.state.backend import MemoryBackend, StoreMemory
from edgepath.state.redis import RedisStore
from edgepath.state.redis_backend import RedisBackend
from redis import Redis
from service_harness import service_in_this_loop

from state.redis_helpers import RedisServer, wait_for

pytestmark = pytest.mark.redis

BOUND = 64 * 1024 * 1024


def gauge(metrics_text: str, name: str) -> float | None:
    """The value of the unlabelled series ``name`` in a Prometheus text exposition, None without it."""
    found = re.search(rf"^{name} (\S+)$", metrics_text, re.MULTILINE)
    return float(found.group(1)) if found else None


async def test_a_replica_exports_its_redis_memory_and_bound(
    appendonly_redis: RedisServer, degrading_settings: dict[str, Any], tmp_path: Path
) -> None:
    admin = Redis.from_url(appendonly_redis.url)
    admin.config_set("maxmemory", BOUND)
    settings = Settings(**degrading_settings, store_memory_poll_s=0.05)
    async with service_in_this_loop(settings) as svc:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{svc.http_port}", timeout=5.0) as http:

            async def measured() -> str | None:
                text = (await http.get("/metrics")).text
                return text if gauge(text, "edgepath_store_memory_limit_bytes") == BOUND else None

            text = await wait_for(measured)
            used = gauge(text, "edgepath_store_memory_used_bytes")
            assert used is not None and 0 < used < BOUND
            admin.config_set("maxmemory", 0)  # the bound removed: the gauge follows (0 = none)

            async def unbounded() -> bool:
                return gauge((await http.get("/metrics")).text, "edgepath_store_memory_limit_bytes") == 0

            await wait_for(unbounded)
    admin.close()


async def test_the_backend_reads_info_memory_and_says_none_when_refused(
    appendonly_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``INFO memory``'s fields; a Redis user without ``+info`` gets None and one WARNING, not one per poll."""
    admin = Redis.from_url(appendonly_redis.url)
    admin.config_set("maxmemory", BOUND)
    backend = RedisBackend(RedisStore(appendonly_redis.url))
    try:
        usage = await backend.memory_usage()
        assert isinstance(usage, StoreMemory) and usage.limit_bytes == BOUND and 0 < usage.used_bytes < BOUND
    finally:
        await backend.close()
    admin.execute_command("ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info")
    port = appendonly_redis.url.rsplit(":", 1)[1]
    refused = RedisBackend(RedisStore(f"redis://noinfo:pw@127.0.0.1:{port}"))
    try:
        with caplog.at_level(logging.WARNING, logger="edgepath.state"):
            assert await refused.memory_usage() is None
            assert await refused.memory_usage() is None
        warnings = [r for r in caplog.records if "INFO memory refused" in r.getMessage()]
        assert len(warnings) == 1
    finally:
        await refused.close()
        admin.execute_command("ACL", "DELUSER", "noinfo")
        admin.close()


async def test_the_in_process_store_reports_no_store_memory() -> None:
    """Its memory is the serving process's (the container's own metrics say it): no gauge of a bound it has not."""
    assert await MemoryBackend().memory_usage() is None
