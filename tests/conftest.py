"""Shared fixtures: real EdgePath services on free loopback ports (see ``service_harness``).

``service`` is a default instance per test; ``client`` is parametrized over both transports
(agent clients), so the same contract cases run over REST and over gRPC.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from edgepath_agent.client import ServiceClient, connect
from service_harness import RunningService, root_logging_kept, running_service

__all__ = ["RunningService", "running_service"]


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Each test leaves the root logger's handlers and level as it found them (``root_logging_kept``): a command run
    in process (typer's CliRunner running ``serve`` or ``train``, which configure logging for the whole process)
    would otherwise leave its handler and level to every test after it, whose captured stderr or log records would
    then depend on the order the tests ran in."""
    with root_logging_kept():
        yield


@pytest.fixture
def service() -> Iterator[RunningService]:
    with running_service(batch_size=10) as running:
        yield running


@pytest.fixture(params=["rest", "grpc"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(service: RunningService, transport: str) -> Iterator[ServiceClient]:
    c = connect(service.http_url if transport == "rest" else service.grpc_url)
    yield c
    c.close()
