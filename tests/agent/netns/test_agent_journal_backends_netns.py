"""A run with one kind of applier backend does not replace the other kind's journal record (marker ``netns``).

The ``command``/``netlink`` backends and the ``networkmanager`` backend write their records to the same ``journal``
path. Here against the real kernel of the testbed's device namespace and a real service: a record the
``networkmanager`` backend left (a run that died; the format its applier writes) used to be replaced by the
first change of a ``command`` run, which then, at its stop, restored its own snapshot and removed the file, so the
NetworkManager changes had nothing left to roll them back from. And the ``command`` backend's snapshot, left by a
run that did not restore it, would be replaced by the ``networkmanager`` backend's record, leaving the endpoints
and routes it changed in place. Both starts are now refused (exit 78) before anything changes, naming the record
and ``edgepath-agent rollback --journal …``, which restores it; after that rollback the start is accepted.
NetworkManager itself is not needed: the refusal comes first (tests/agent/test_agent_journal_backends.py has the
``networkmanager`` applier's side, on a stand-in). Skipped (not passed) without root/CAP_NET_ADMIN or kernel MPTCP.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from agent_fixtures import kernel_view as view
from agent_fixtures import run_agent as agent
from edgepath_agent.applier import Applier, ApplierConfig, CommandBackend, Journal
from edgepath_agent.applier.journal import check_for_run
from edgepath_agent.testbed.netns import Testbed
from service_harness import running_service

pytestmark = pytest.mark.netns


def run_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "EDGEPATH_AGENT_STATUS_FILE": str(tmp_path / "status.json"), "EDGEPATH_AGENT_ATTEMPTS": "1",
            "EDGEPATH_AGENT_UPSTREAM_CHECK": "false"}  # fmt: skip


def errors(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("Error: ")]


@pytest.mark.timeout(120)
def test_the_command_backend_does_not_replace_a_networkmanager_record(testbed: Testbed, tmp_path: Path) -> None:
    journal = tmp_path / "journal.json"
    record = {"backend": "networkmanager", "interfaces": ["wlan0", "wwan0"]}  # a networkmanager run that died
    journal.write_text(json.dumps(record))
    before = view(testbed.device_ns)
    with running_service() as svc:
        ran = agent("run", "--steps", "1", "--netns", testbed.device_ns, "--service", svc.grpc_url,
                    "--interface", "wlan0=WIFI", "--interface", "wwan0=LTE", "--journal", str(journal),
                    "--log-format", "text", env=run_env(tmp_path))  # fmt: skip
    assert ran.returncode == 78, ran.stdout + ran.stderr
    (error,) = errors(ran)
    assert "backend = networkmanager" in error and "wlan0, wwan0" in error and "backend = command" in error
    assert f"`edgepath-agent rollback --journal {journal}`" in error
    assert json.loads(journal.read_text()) == record  # still there for `rollback`
    assert view(testbed.device_ns) == before  # refused before any change


@pytest.mark.timeout(120)
def test_the_networkmanager_backend_does_not_replace_a_command_snapshot(testbed: Testbed, tmp_path: Path) -> None:
    journal = tmp_path / "journal.json"
    before = view(testbed.device_ns)
    config = ApplierConfig(interfaces=("wlan0", "wwan0"), manage_cc=False)
    Applier(CommandBackend(netns=testbed.device_ns), Journal(journal), config).apply(
        {"primary_path": {"interface": "wwan0"}}
    )  # and the agent dies: the snapshot stays
    changed, snapshot = view(testbed.device_ns), journal.read_text()
    assert changed != before

    ran = agent("run", "--steps", "1", "--backend", "networkmanager", "--netns", testbed.device_ns,
                "--service", "grpc://127.0.0.1:9", "--interface", "wlan0=WIFI", "--interface", "wwan0=LTE",
                "--journal", str(journal), "--log-format", "text", env=run_env(tmp_path))  # fmt: skip
    assert ran.returncode == 78, ran.stdout + ran.stderr
    (error,) = errors(ran)
    assert "backend = command or netlink" in error and "backend = networkmanager" in error
    assert f"`edgepath-agent rollback --journal {journal}`" in error
    assert journal.read_text() == snapshot and view(testbed.device_ns) == changed

    done = agent("rollback", "--journal", str(journal))  # the way out the error names
    assert done.returncode == 0, done.stdout + done.stderr
    assert view(testbed.device_ns) == before and not journal.exists()
    check_for_run(journal, testbed.device_ns, "networkmanager")  # now the start is accepted
