"""Fixtures of every agent test.

``pending_file`` defaults to ``/var/lib/edgepath-agent/pending-outcomes.json``, a device's real state: a test's
agent (in this process or a ``run`` it starts, which inherits the environment) must neither read outcomes another
test, or the machine's own agent, left there nor write its own. Each test gets a file of its own, in a directory
of its own (not under its ``tmp_path``, which some tests list), through ``EDGEPATH_AGENT_PENDING_FILE``. Tests of
the file itself set ``pending_file`` explicitly (tests/agent/test_agent_pending_outcomes.py).
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _pending_file_of_its_own(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("EDGEPATH_AGENT_PENDING_FILE", str(tmp_path_factory.mktemp("state") / "pending-outcomes.json"))
