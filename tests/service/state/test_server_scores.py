"""SSMP per-server scores (issue 4): the same cases on MemoryStore and on RedisStore (real redis-server)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from edgepath.state.base import PathEstimate, ServerScore, StateStore
from edgepath.state.memory import MemoryStore
from edgepath.state.redis import RedisStore


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "memory":
        s: Any = MemoryStore(max_decisions=10, max_servers=2)
    else:
        server = request.getfixturevalue("redis_server")
        s = RedisStore(server.url, namespace=request.getfixturevalue("namespace"))
    yield s
    await s.close()


async def test_unknown_servers_are_absent(store: StateStore) -> None:
    assert await store.get_server_scores(["10.0.0.1", "10.0.0.2"]) == {}
    assert await store.get_server_scores([]) == {}


async def test_update_replaces_and_reads_back(store: StateStore) -> None:
    await store.update_server_score("10.0.0.1", 95e6, 1000.0)
    await store.update_server_score("10.0.0.1", 84e6, 1010.5)
    await store.update_server_score("10.0.0.2", 50e6, 1001.0)
    got = await store.get_server_scores(["10.0.0.1", "10.0.0.2", "10.0.0.9"])
    assert got == {"10.0.0.1": ServerScore(84e6, 1010.5), "10.0.0.2": ServerScore(50e6, 1001.0)}


async def test_per_path_bandwidth_and_loss_round_trip(store: StateStore) -> None:
    paths = {"wlan0": PathEstimate(bandwidth_bps=80e6, loss=0.01), "wwan0": PathEstimate(bandwidth_bps=None, loss=0.0)}
    await store.update_server_score("10.0.0.1", 95e6, 1000.0, paths)
    got = (await store.get_server_scores(["10.0.0.1"]))["10.0.0.1"]
    assert got == ServerScore(95e6, 1000.0, paths)
    await store.update_server_score("10.0.0.1", 90e6, 1001.0)  # Q alone replaces the estimates too
    assert (await store.get_server_scores(["10.0.0.1"]))["10.0.0.1"].paths == {}


async def test_memory_store_bounds_server_scores() -> None:
    s = MemoryStore(max_servers=2)
    for i in range(3):
        await s.update_server_score(f"s{i}", float(i), 0.0)
    assert set(await s.get_server_scores(["s0", "s1", "s2"])) == {"s1", "s2"}  # least recently used evicted
