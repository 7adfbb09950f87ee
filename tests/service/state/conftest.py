"""Fixtures for the state-store tests: a real ``redis-server`` on a free loopback port.

The server runs without persistence (``--save '' --appendonly no``) unless a test asks for
``appendonly yes`` (``appendonly_redis``: a server of the test's own, which it may stop and start again); it is
stopped by pid. Tests that need it are skipped (with the reason) when the ``redis-server`` binary is missing —
``scripts/setup.sh`` installs it from apt.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from state.redis_helpers import REDIS_SERVER, RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the session (tests isolate themselves with a key namespace)."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it from apt)")
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def namespace() -> str:
    """A key prefix of this test alone."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def appendonly_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test alone, append-only (what it stored survives a stop and a start), in ``tmp_path``;
    stopped after the test (resumed first if the test left it paused)."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it from apt)")
    server = RedisServer(tmp_path, appendonly=True).start()
    yield server
    server.stop()


@pytest.fixture
def degrading_settings(appendonly_redis: RedisServer) -> dict[str, Any]:
    """``Settings`` fields of a service on loopback (ports 0) storing in ``appendonly_redis``, which reports the store
    degraded after 0.5 s without an answer from it."""
    return {
        "host": "127.0.0.1",
        "grpc_port": 0,
        "http_port": 0,
        "store_url": appendonly_redis.url,
        "hmac_key": "k" * 32,
        "redis_socket_timeout_s": 0.5,
    }
