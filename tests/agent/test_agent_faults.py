"""Issue 17, item 5: the agent under a service that is down, slow, or answers garbage.

A real service on loopback gives the agent its first configuration (dry-run applier backend, as in
test_agent_daemon.py: its simulated state stands in for the kernel, exercised for real in tests/agent/netns/).
Then the agent's client is pointed at real local servers that misbehave: an HTTP server answering 200 with
a non-JSON body or with JSON of the wrong shape, one that holds every request past the client's timeout,
a TCP server that answers gRPC with garbage bytes, and a closed port. Each step must keep the last good
configuration (routes unchanged, both default routes present), never raise, and retry with tenacity's
jittered backoff (the misbehaving server sees every attempt).
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from edgepath_agent.client import ServiceError, check_recommendation, connect, connect_failover, is_transient
from test_agent_daemon import dead_url, make_agent

RELEASE = threading.Event()


@contextmanager
def bad_http(mode: str) -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on loopback: ``garbage`` (200, not JSON), ``shape`` (200, wrong JSON), ``slow`` (holds)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.path)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if mode == "slow":
                RELEASE.wait(10)  # held until the test ends: the client's timeout fires first
            body = b"<html>502 upstream</html>" if mode == "garbage" else b'{"hello": 1}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        RELEASE.set()
        server.shutdown()
        server.server_close()
        RELEASE.clear()


@contextmanager
def garbage_tcp() -> Iterator[str]:
    """A TCP server answering anything (a gRPC client's HTTP/2 preface too) with garbage bytes."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            try:
                self.request.recv(1024)
                self.request.sendall(b"\x00\xffgarbage, not HTTP/2\r\n" * 8)
            except OSError:
                pass

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"grpc://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _first_configuration(service):
    agent, backend = make_agent([service.grpc_url], measure=lambda _p: None)
    first = agent.step()
    assert not first.kept_last and first.applied is not None
    return agent, backend, first


def _assert_kept(agent, backend, first, state) -> None:
    result = agent.step()  # must not raise
    assert result.kept_last and result.recommendation is None and result.error
    assert backend.state == state and result.applied == first.applied
    assert {r.dev for r in backend.state.default_routes} == {"wlan0", "wwan0"}  # no default route removed
    assert agent.service_reachable is False


@pytest.mark.parametrize("mode", ["garbage", "shape", "slow"])
def test_misbehaving_rest_service_keeps_the_last_configuration(service, mode: str) -> None:
    agent, backend, first = _first_configuration(service)
    state = backend.state
    with bad_http(mode) as (url, seen):
        agent.client = connect_failover([url], timeout_s=0.3, attempts=3)
        agent.client.backoff_initial_s = 0.01
        _assert_kept(agent, backend, first, state)
        assert seen.count("/v1/recommendations") == 3  # transient: retried by tenacity, with jittered waits


def test_garbage_grpc_and_dead_rest_keep_the_last_configuration(service) -> None:
    agent, backend, first = _first_configuration(service)
    state = backend.state
    with garbage_tcp() as grpc_url:
        agent.client = connect_failover([grpc_url, dead_url("http")], timeout_s=0.5, attempts=2)
        _assert_kept(agent, backend, first, state)
    agent.client = connect_failover([service.grpc_url], timeout_s=2.0, attempts=2)
    again = agent.step()  # the service is back: the agent follows it again
    assert not again.kept_last and again.recommendation is not None


def test_garbage_classification() -> None:
    with pytest.raises(ServiceError) as caught:
        check_recommendation({"decision_id": 7, "primary_path": {"interface": "wlan0"}})
    assert is_transient(caught.value)
    assert check_recommendation({"decision_id": "d", "primary_path": {"interface": "wlan0"}})
    with bad_http("garbage") as (url, _):
        with pytest.raises(ServiceError, match="not JSON") as caught:
            connect(url, 0.5).recommend({"device_id": "x", "interfaces": []})
    assert is_transient(caught.value)
