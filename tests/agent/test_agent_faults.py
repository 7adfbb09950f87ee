"""Issue 17, item 5: the agent under a service that is down, slow, or answers garbage.

A real service on loopback gives the agent its first configuration (dry-run applier backend, as in
test_agent_daemon.py: its simulated state stands in for the kernel, exercised for real in tests/agent/netns/).
Then the agent's client is pointed at real local servers that misbehave: an HTTP server answering 200 with
a non-JSON body or with JSON of the wrong shape, one that holds every request past the client's timeout,
a TCP server that answers gRPC with garbage bytes, and a closed port. Each step must keep the last good
configuration (routes unchanged, both default routes present), never raise, and retry with tenacity's
jittered backoff (the misbehaving server sees every attempt).

The outcome probe failing is a fault of its own: the real iperf3 client (where installed) and the built-in
meter are pointed at a closed loopback port, so the step's probe raises for real (``IperfFailed``,
``ConnectionRefusedError``). The step must keep what it applied, report no outcome, and the daemon go on.
"""

from __future__ import annotations

import logging
import shutil
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from edgepath_agent.applier import Applier, DryRunBackend, Journal
from edgepath_agent.client import (
    FailoverClient,
    ServiceError,
    check_recommendation,
    connect,
    connect_failover,
    is_transient,
)
from edgepath_agent.collector import StaticCollector, TraceCollector
from edgepath_agent.daemon import Agent, AgentConfig
from edgepath_agent.meter import TransferServer
from edgepath_agent.status import format_status, read_status
from test_agent_daemon import ADDRS, RADIO, ROUTES, dead_url, make_agent

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


def probe_agent(url: str, tmp_path: Path, probe: str, probe_tool: str) -> tuple[Agent, DryRunBackend]:
    """An agent whose outcome probe is the real one (``probe``/``probe_tool``), not an injected ``measure``."""
    config = AgentConfig(
        device_id="dev-probe",
        service=[url],
        interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
        attempts=1,
        interval_s=0.01,
        probe=probe,
        probe_tool=probe_tool,  # type: ignore[arg-type]
        probe_bytes=64 * 1024,
        status_file=tmp_path / "status.json",
        journal=tmp_path / "journal.json",
    )
    backend = DryRunBackend(ROUTES, ADDRS, out=None)
    applier = Applier(backend, Journal(), config.applier_config(), allowed_cc=("reno", "cubic"))
    trace = TraceCollector()
    trace.set(RADIO)
    client = FailoverClient([connect(url, 2.0)], attempts=1)
    return Agent(config, client, applier, [trace, StaticCollector(config.interfaces)]), backend


PROBE_TOOLS = [
    "builtin",
    pytest.param("iperf3", marks=pytest.mark.skipif(shutil.which("iperf3") is None, reason="no iperf3 client on PATH")),
]


@pytest.mark.parametrize("probe_tool", PROBE_TOOLS)
def test_unreachable_probe_server_reports_no_outcome_and_the_daemon_goes_on(
    service, tmp_path: Path, caplog: pytest.LogCaptureFixture, probe_tool: str
) -> None:
    probe = dead_url("tcp").removeprefix("tcp://")  # nothing listens there: the probe's connect is refused
    agent, backend = probe_agent(service.grpc_url, tmp_path, probe, probe_tool)
    with caplog.at_level(logging.WARNING, logger="edgepath_agent.daemon"):
        result = agent.step()  # must not raise

    decision_id = result.recommendation.decision_id if result.recommendation else None
    assert decision_id and not result.kept_last and result.error is None
    assert result.measurement is None and result.outcome is None and result.ack is None
    assert result.probe_error and "Connection refused" in result.probe_error
    # The recommendation stays applied, exactly as after a step that measured.
    assert result.applied is not None and agent.applier.last == result.applied
    assert min(backend.state.default_routes, key=lambda r: r.metric).dev == result.applied.primary
    # No outcome was made up: nothing sent, nothing queued, and the service has none for that decision.
    assert agent.last_outcome is None and not agent.pending
    ack = agent.client.report_outcome({"device_id": "dev-probe", "decision_id": decision_id, "throughput_bps": 1e6})
    assert ack.accepted and not ack.duplicate
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"probe {probe} failed" in m and decision_id in m and "Connection refused" in m for m in warnings), (
        warnings
    )
    assert agent.status_record()["probe"]["failures"] == 1

    steps = agent.run(threading.Event(), max_steps=2)  # the daemon loop carries on past failed probes
    assert steps == 2
    record = read_status(tmp_path / "status.json")
    assert record is not None and record["step"] == 2
    assert record["probe"]["failures"] == 3 and "Connection refused" in record["probe"]["last_error"]
    assert record["last_outcome"] is None
    assert f"  last error:   {record['probe']['last_error']} (3 failed since start)" in format_status(record)
    agent.close(restore=True)
    assert backend.state.canonical() == ROUTES.canonical()


def test_probe_that_answers_again_clears_the_error_and_reports_outcomes(service, tmp_path: Path) -> None:
    agent, _ = probe_agent(service.grpc_url, tmp_path, dead_url("tcp").removeprefix("tcp://"), "builtin")
    failed = agent.step()
    assert failed.probe_error and failed.outcome is None and agent.probe_failures == 1
    with TransferServer("127.0.0.1", 0) as server:
        agent.config.probe = f"127.0.0.1:{server.port}"
        measured = agent.step()
    assert measured.probe_error is None and measured.measurement is not None
    assert measured.measurement.bytes == 64 * 1024
    assert measured.ack is not None and measured.ack.accepted
    assert measured.ack.decision_id == (measured.recommendation.decision_id if measured.recommendation else None)
    probe_status = agent.status_record()["probe"]
    assert probe_status["last_error"] is None and probe_status["failures"] == 1
    agent.close(restore=True)
