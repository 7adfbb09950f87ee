"""Helpers of the agent tests: the hand-written tool-output fixtures (see fixtures/README.md), a scripted clock, and
the ``edgepath-agent`` command and a kernel view for the network-namespace tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edgepath_agent.testbed.netns import sh

FIXTURES = Path(__file__).parent / "fixtures"

#: A recommendation whose initial subflow the steering rule names: primary wlan0, an Active-Standby rule with wlan0
#: initial and wwan0 standby (the upstream guard's tests: test_agent_guard_override.py and its netns twin).
STEERED: dict[str, Any] = {
    "decision_id": "d-steer",
    "primary_path": {"interface": "wlan0", "access_type": "WIFI"},
    "steering": {
        "rules": [
            {
                "steering_mode": "ACTIVE_STANDBY",
                "accesses": [
                    {"interface": "wlan0", "access_type": "WIFI", "initial_subflow": True},
                    {"interface": "wwan0", "access_type": "LTE", "initial_subflow": False},
                ],
            }
        ]
    },
}


def steered(mode: str) -> dict[str, Any]:
    """:data:`STEERED` with its match-all rule in ``mode`` (wlan0 initial, wwan0 the other access)."""
    return {**STEERED, "steering": {"rules": [{**STEERED["steering"]["rules"][0], "steering_mode": mode}]}}


def fixture(name: str) -> str:
    """Fixture text without its provenance header (everything up to the ``---`` line)."""
    text = (FIXTURES / name).read_text()
    head, sep, body = text.partition("\n---\n")
    assert sep, f"{name} lacks its provenance header"
    assert "not captured" in head
    return body


class Clock:
    """``daemon.time`` stand-in: ``monotonic()`` and ``time()`` return what the test set."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


#: The agent's command in this environment (beside the interpreter).
AGENT = Path(sys.executable).with_name("edgepath-agent")


def run_agent(*argv: str, ns: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``edgepath-agent ARGV`` (inside network namespace ``ns`` when given), output captured, at most 90 s."""
    prefix = ["ip", "netns", "exec", ns] if ns else []
    return subprocess.run(
        [*prefix, str(AGENT), *argv], capture_output=True, text=True, timeout=90, env=env, check=False
    )


def kernel_view(ns: str) -> dict[str, str]:
    """What the kernel of ``ns`` reports through commands the agent does not use for reading: MPTCP endpoints and
    limits, IPv4 routes of every table."""
    run = lambda *argv: sh(["ip", "netns", "exec", ns, *argv]).stdout  # noqa: E731
    return {
        "endpoints": run("ip", "mptcp", "endpoint", "show"),
        "limits": run("ip", "mptcp", "limits", "show"),
        "routes": run("ip", "-4", "route", "show", "table", "all"),
    }


@contextmanager
def without_access(path: Path) -> Iterator[None]:
    """``path`` unreadable to this process: as root, drop the effective uid to nobody (the real uid stays root,
    so it comes back); otherwise mode 000 (its mode put back after)."""
    if os.geteuid() == 0:
        os.seteuid(65534)
        try:
            yield
        finally:
            os.seteuid(0)
    else:
        mode = path.stat().st_mode & 0o777
        os.chmod(path, 0)
        try:
            yield
        finally:
            os.chmod(path, mode)
