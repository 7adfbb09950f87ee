"""Fixtures for the state-store tests: a real ``redis-server`` on a free loopback port.

The server runs without persistence (``--save '' --appendonly no``) unless a test asks for
``appendonly yes``; it is stopped by pid. Tests that need it are skipped (with the reason) when the
``redis-server`` binary is missing — ``scripts/setup.sh`` installs it from apt.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

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
