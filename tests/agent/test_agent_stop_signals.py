"""SIGTERM/SIGINT stop the agent, and only the agent: a process forked from it ends as it would have.

pyroute2 forks a child to open each netlink socket in a network namespace (``backend = "netlink"`` with
``netns``) and ends it with SIGTERM. The child inherited the agent's handler, which logged ``signal 15:
stopping`` (several lines a step, although the agent ran on) and kept the child alive. Here a real fork:
the child signals itself and must die of that signal, while the agent's own SIGTERM still only sets its
stop event. POSIX only; no sleeping (``waitpid`` blocks until the child is gone).
"""

from __future__ import annotations

import logging
import os
import signal
import threading

import pytest
from edgepath_agent.daemon import install_stop_handlers


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
