"""Fixtures of every agent test.

``pending_file`` defaults to ``/var/lib/edgepath-agent/pending-outcomes.json``, a device's real state: a test's
agent (in this process or a ``run`` it starts, which inherits the environment) must neither read outcomes another
test, or the machine's own agent, left there nor write its own. Each test gets a file of its own, in a directory
of its own (not under its ``tmp_path``, which some tests list), through ``EDGEPATH_AGENT_PENDING_FILE``. Tests of
the file itself set ``pending_file`` explicitly (tests/agent/test_agent_pending_outcomes.py).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _pending_file_of_its_own(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("EDGEPATH_AGENT_PENDING_FILE", str(tmp_path_factory.mktemp("state") / "pending-outcomes.json"))


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[str]:
    """A private D-Bus session bus (``dbus-daemon``) for a stand-in NetworkManager: its address, once it listens;
    skipped without ``dbus-daemon``."""
    daemon = shutil.which("dbus-daemon")
    if daemon is None:
        pytest.skip("dbus-daemon is not installed")
    address = f"unix:path={tmp_path / 'bus'}"
    proc = subprocess.Popen(
        [daemon, "--session", "--nofork", "--nopidfile", f"--address={address}", "--print-address=1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        printed = proc.stdout.readline().strip()  # printed once the bus listens
        assert printed.startswith("unix:path="), printed
        yield address
    finally:
        proc.terminate()
        proc.wait(10)
