"""`edgepath serve` on a port another process listens on: one line, exit 2, nothing left running.

A second ``edgepath serve`` on the gRPC port of a first one started: gRPC core's default SO_REUSEPORT let it bind,
and the kernel split the calls between two services with their own state (an outcome reported to the other one got
404). A busy HTTP port printed ~70 lines of tracebacks (uvicorn's exit, the started gRPC server's ``__del__`` on a
closed loop) and exited 3. Real sockets and servers on loopback; ``--workers N`` keep sharing their ports.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from edgepath import main
from edgepath.grpc.server import create_server
from edgepath.main import Service
from edgepath.settings import Settings
from service_harness import EDGEPATH, edgepath_cli, running_service

#: Beyond :func:`serve`'s own timeout (60 s), so that a service which started instead of refusing is killed, with
#: its workers, by it, not left running by pytest-timeout's end of the test.
pytestmark = pytest.mark.timeout(150)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port a plain socket listens on (127.0.0.1, no SO_REUSEPORT)."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock.getsockname()[1]


@pytest.fixture
def shared_port() -> Iterator[int]:
    """A port a socket with SO_REUSEPORT listens on (127.0.0.1), as each worker of a ``serve --workers N`` does."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def serve(
    *args: str, timeout_s: float = 60.0, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``edgepath serve ARGS`` on 127.0.0.1 as a process of its own (stderr not a terminal: plain errors). One that
    is still running after ``timeout_s`` (it started instead of refusing) is killed with its process group (its
    ``--workers`` too) and fails the test."""
    return edgepath_cli("serve", "--host", "127.0.0.1", *args, env_extra=env_extra, timeout_s=timeout_s)


def refused(out: subprocess.CompletedProcess[str], server: str, port: int) -> None:
    """Exit 2 and click's usage error: one ``Error:`` line naming the server, host and port, no traceback."""
    assert out.returncode == 2, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("Error: ")]
    assert errors == [
        f"Error: Invalid value: {server} port {port} on 127.0.0.1 is in use (another process listens on it): "
        f"stop that process or choose another --{server.lower()}-port"
    ], out.stderr
    # nothing but click's usage lines around it (no log lines, tracebacks, "Task exception was never retrieved")
    others = [line for line in out.stderr.splitlines() if line and not line.startswith(("Error: ", "Usage: ", "Try "))]
    assert others == [], out.stderr
    assert out.stdout == ""


def test_a_second_serve_on_the_grpc_port_of_a_running_service_is_refused() -> None:
    with running_service() as first:  # the real composition root's gRPC server listens on its port
        out = serve("--grpc-port", str(first.grpc_port), "--http-port", "0")
    refused(out, "gRPC", first.grpc_port)


def test_serve_refuses_a_grpc_port_even_when_its_listener_allows_sharing() -> None:
    """The listener set SO_REUSEPORT (gRPC core's default, as every gRPC server before the fix; or a ``--workers``
    group): only the newcomer's exclusive bind can refuse it."""

    async def check() -> None:
        sharing = grpc.aio.server(options=[("grpc.so_reuseport", 1)])
        port = sharing.add_insecure_port("127.0.0.1:0")
        await sharing.start()
        try:
            out = await asyncio.to_thread(serve, "--grpc-port", str(port), "--http-port", "0")
        finally:
            await sharing.stop(None)
        refused(out, "gRPC", port)

    asyncio.run(check())


def test_serve_on_a_busy_http_port_is_one_line_and_exit_2(busy_port: int) -> None:
    refused(serve("--grpc-port", "0", "--http-port", str(busy_port)), "HTTP", busy_port)


def test_serve_on_a_busy_metrics_port_is_one_line_and_exit_2(busy_port: int) -> None:
    """``metrics_port`` starts after both servers: a port in use there gave ~75 lines of tracebacks and exit 1."""
    out = serve("--grpc-port", "0", "--http-port", "0", env_extra={"EDGEPATH_METRICS_PORT": str(busy_port)})
    assert out.returncode == 2, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("Error: ")]
    assert errors == [
        f"Error: Invalid value: metrics port {busy_port} on 127.0.0.1 is in use (another process listens on it): "
        "stop that process or choose another metrics_port (EDGEPATH_METRICS_PORT)"
    ], out.stderr
    assert "Traceback" not in out.stderr


def test_workers_refuse_ports_another_worker_group_listens_on(shared_port: int) -> None:
    """The workers share the ports with each other (SO_REUSEPORT), not with another group's workers, which would
    accept the same sharing: the parent checks before it starts any (Redis is never reached: the check comes first).
    """
    store = ("--workers", "2", "--store", "redis://127.0.0.1:1/0")
    refused(serve(*store, "--grpc-port", str(shared_port), "--http-port", "0"), "gRPC", shared_port)
    refused(serve(*store, "--grpc-port", "0", "--http-port", str(shared_port)), "HTTP", shared_port)


def test_create_server_binds_its_port_exclusively_unless_workers_share_it() -> None:
    async def check() -> None:
        plane = Service.build(Settings()).plane
        first, _, port = create_server(plane, "127.0.0.1:0", reuse_port=True)
        await first.start()
        try:
            with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
                create_server(plane, f"127.0.0.1:{port}")
            sibling, _, same = create_server(plane, f"127.0.0.1:{port}", reuse_port=True)  # another worker
            assert same == port
            await sibling.stop(None)
        finally:
            await first.stop(None)

    asyncio.run(check())


def test_a_grpc_bind_that_fails_after_the_check_leaves_nothing_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """The port taken between the check and gRPC's bind: PortUnavailable, the HTTP socket already bound is closed,
    no task of the service is left on the loop."""
    sockets: list[socket.socket] = []
    original = main.listening_socket

    def recorded(*args: Any, **kwargs: Any) -> socket.socket:
        sockets.append(original(*args, **kwargs))
        return sockets[-1]

    monkeypatch.setattr(main, "check_port_free", lambda *args: None)
    monkeypatch.setattr(main, "listening_socket", recorded)

    async def check() -> None:
        with socket.create_server(("127.0.0.1", 0)) as busy:
            port = busy.getsockname()[1]
            service = Service.build(Settings(host="127.0.0.1", grpc_port=port, http_port=0))
            with pytest.raises(main.PortUnavailable, match=f"gRPC port {port} on 127.0.0.1"):
                await service.run()
        assert len(sockets) == 1 and sockets[0].fileno() == -1  # closed
        assert asyncio.all_tasks() == {asyncio.current_task()}
        await service.store.close()

    asyncio.run(check())


def test_a_metrics_bind_that_fails_after_the_check_leaves_nothing_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics port taken between the check and its bind (prometheus_client's server, which was started after
    both servers, unguarded: an OSError traceback, then "Event loop is closed"): PortUnavailable naming it, the HTTP
    socket closed, no server started, no task left."""
    sockets: list[socket.socket] = []
    original = main.listening_socket

    def recorded(*args: Any, **kwargs: Any) -> socket.socket:
        sockets.append(original(*args, **kwargs))
        return sockets[-1]

    monkeypatch.setattr(main, "check_port_free", lambda *args: None)
    monkeypatch.setattr(main, "listening_socket", recorded)

    async def check() -> None:
        with socket.create_server(("127.0.0.1", 0)) as busy:
            port = busy.getsockname()[1]
            service = Service.build(Settings(host="127.0.0.1", grpc_port=0, http_port=0, metrics_port=port))
            with pytest.raises(main.PortUnavailable, match=f"metrics port {port} on 127.0.0.1 is in use"):
                await service.run()
        assert len(sockets) == 1 and sockets[0].fileno() == -1  # closed
        assert asyncio.all_tasks() == {asyncio.current_task()}
        await service.store.close()

    asyncio.run(check())


def test_serve_help_names_the_shipped_model() -> None:
    out = subprocess.run([str(EDGEPATH), "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "(e.g. models/primary-path-v2)" in " ".join(out.stdout.split())  # as wrapped at any width
    assert (ROOT / "models" / "primary-path-v2").is_dir()
