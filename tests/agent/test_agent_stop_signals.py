"""SIGTERM/SIGINT stop the agent, and only the agent: a process forked from it ends as it would have.

pyroute2 forks a child to open each netlink socket in a network namespace (``backend = "netlink"`` with
``netns``) and ends it with SIGTERM. The child inherited the agent's handler, which logged ``signal 15:
stopping`` (several lines a step, although the agent ran on) and kept the child alive. Here a real fork:
the child signals itself and must die of that signal, while the agent's own SIGTERM still only sets its
stop event. POSIX only; no sleeping (``waitpid`` blocks until the child is gone).

The stop event also ends the service client's retries (:class:`~edgepath_agent.client.FailoverClient`'s ``stop``):
scripted transports for the rule, and a real ``edgepath-agent run`` against loopback listeners that accept and never
answer for the whole path (SIGTERM at its first connection).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from edgepath_agent.client import FailoverClient, ServiceError
from edgepath_agent.daemon import install_stop_handlers

AGENT = Path(sys.executable).with_name("edgepath-agent")


@pytest.fixture
def stop_handlers():
    stop = threading.Event()
    previous = install_stop_handlers(stop)
    try:
        yield stop, previous
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_forked_child_dies_of_the_signal_instead_of_logging_a_stop(stop_handlers, sig: signal.Signals) -> None:
    stop, previous = stop_handlers
    if sig == signal.SIGINT and previous[sig] is signal.default_int_handler:
        previous[sig] = signal.SIG_DFL  # this test's child must die of SIGINT, not raise KeyboardInterrupt
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: as pyroute2's, it runs on until the signal ends it
        os.close(r)
        try:
            os.kill(os.getpid(), sig)
            os.write(w, b"survived" + (b", stop set" if stop.is_set() else b""))
        finally:
            os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as pipe:
        said = pipe.read().decode()
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == sig, f"the child {said or 'exited'} ({status:#x})"
    assert not stop.is_set()  # the agent itself was not asked to stop


def test_the_agent_itself_stops_on_sigterm_and_logs_it(stop_handlers, caplog: pytest.LogCaptureFixture) -> None:
    stop, _ = stop_handlers
    with caplog.at_level(logging.INFO, logger="edgepath_agent"):
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next bytecode of this thread
        assert stop.is_set()
    assert [r.getMessage() for r in caplog.records] == [f"signal {int(signal.SIGTERM)}: stopping"]


# SIGTERM ends the service retries in progress (FailoverClient's ``stop``)


class Unreachable:
    """A transport that never answers; ``on_call`` runs at each call (a SIGTERM arriving then)."""

    def __init__(self, url: str, on_call: Callable[[], None] = lambda: None) -> None:
        self.url = url
        self.calls = 0
        self.on_call = on_call

    def recommend(self, request: Any) -> Any:
        self.calls += 1
        self.on_call()
        raise ServiceError("UNAVAILABLE", "failed to connect to all addresses")

    def report_outcome(self, outcome: Any) -> Any:
        return self.recommend(outcome)

    def close(self) -> None:
        pass


def test_a_stop_during_a_call_ends_the_retries_each_transport_gets_one_attempt() -> None:
    """The retries went on after SIGTERM: ``attempts`` × transports calls (each up to ``timeout_s``) and their
    backoff waits, past systemd's ``TimeoutStopSec=`` (then SIGKILL: no restore)."""
    stop = threading.Event()
    grpc_, rest = Unreachable("grpc://edge:50051", on_call=stop.set), Unreachable("http://edge:8080")
    client = FailoverClient([grpc_, rest], attempts=3, backoff_initial_s=0.01, stop=stop)
    with pytest.raises(ServiceError, match="UNAVAILABLE"):
        client.recommend({})
    assert (grpc_.calls, rest.calls) == (1, 1)
    unstopped = [Unreachable("grpc://edge:50051"), Unreachable("http://edge:8080")]
    with pytest.raises(ServiceError):
        FailoverClient(unstopped, attempts=3, backoff_initial_s=0.01, stop=threading.Event()).recommend({})
    assert [c.calls for c in unstopped] == [3, 3]  # not stopping: the retries as before


class SignalDuringWait(threading.Event):
    """An event set (SIGTERM) while the client waits on it between attempts; records the waits asked for, s."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        self.set()
        return super().wait(timeout)


def test_a_stop_during_a_backoff_wait_ends_the_wait_at_once() -> None:
    stop = SignalDuringWait()
    grpc_, rest = Unreachable("grpc://edge:50051"), Unreachable("http://edge:8080")
    client = FailoverClient([grpc_, rest], attempts=5, backoff_initial_s=60.0, backoff_max_s=600.0, stop=stop)
    started = time.monotonic()
    with pytest.raises(ServiceError):
        client.report_outcome({})
    assert time.monotonic() - started < 30.0  # the wait asked for was at least 60 s
    assert len(stop.waits) == 1 and (stop.waits[0] or 0) >= 60.0
    assert (grpc_.calls, rest.calls) == (2, 1)  # the attempt after the wait, then one on the other transport


@pytest.mark.skipif(not Path("/proc/sys/net/mptcp").is_dir(), reason="the dry run reads `ip mptcp` state")
def test_sigterm_stops_run_promptly_against_a_service_that_never_answers(tmp_path: Path) -> None:
    """Against a listener that accepts and never answers, SIGTERM at the first connection ended the process
    after its retries (attempts × transports × (timeout_s + backoff)); now within about transports × timeout_s."""
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    grpc_port, http_port = (s.getsockname()[1] for s in listeners)
    env = {
        **os.environ,
        "EDGEPATH_AGENT_TIMEOUT_S": "1",
        "EDGEPATH_AGENT_ATTEMPTS": "5",
        "EDGEPATH_AGENT_UPSTREAM_CHECK": "false",
        "EDGEPATH_AGENT_STATUS_FILE": str(tmp_path / "status.json"),
    }
    argv = [str(AGENT), "run", "--dry-run", "--service", f"grpc://127.0.0.1:{grpc_port}", "--service",
            f"http://127.0.0.1:{http_port}", "--interface", "lo=ETHERNET", "--journal", str(tmp_path / "j.json"),
            "--log-format", "text"]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    held = []
    try:
        listeners[0].settimeout(60)
        held.append(listeners[0].accept()[0])  # the agent's gRPC call is under way
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - signalled
    finally:
        proc.kill()
        for s in held + listeners:
            s.close()
    assert proc.returncode == 0, err
    assert "stopped after 1 step(s)" in out, out + err
    # Before: up to 5 attempts × 2 transports × (1 s + backoff) ≈ 12 s; now the call under way and one attempt
    # of the other transport, about 2 s (a generous margin for a loaded machine).
    assert took < 6.0, f"SIGTERM took {took:.1f} s\n{err}"
