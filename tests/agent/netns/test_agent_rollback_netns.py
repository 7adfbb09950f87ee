"""The journal records the network namespace the agent changed; ``rollback`` restores it there (marker ``netns``).

An agent started with ``--netns`` (the testbed's device namespace) that dies without restoring (here:
``restore_on_exit = false`` after one real step against a real service, the state a SIGKILL leaves) leaves a
journal; the unit's ``ExecStopPost=`` runs ``rollback --journal …`` without ``--netns``. That rollback used to
act on the namespace it was started in (``ip mptcp endpoint delete id 1`` on the host). Here it is started from
a scratch namespace standing in for the host, so that a rollback in the wrong place changes nothing of this
machine: the device namespace must be restored and the scratch one left as it was. A ``--netns`` naming
another namespace than the journal recorded is refused (exit 2) without touching either.

Also: ``net.mptcp.enabled = 0`` in the managed namespace is warned about at start.

Skipped (not passed) without root/CAP_NET_ADMIN or kernel MPTCP.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_fixtures import kernel_view as view
from agent_fixtures import run_agent as agent
from edgepath_agent import daemon
from edgepath_agent.applier import Applier, ApplierConfig, CommandBackend, Journal, JournalError
from edgepath_agent.testbed.netns import Testbed, sh
from service_harness import running_service

pytestmark = pytest.mark.netns


@pytest.fixture
def scratch_ns(netns_ready: None) -> Iterator[str]:
    """A namespace standing in for the host: one MPTCP endpoint and a default route on a veth end."""
    name = f"ep-host-{secrets.token_hex(3)}"
    sh(["ip", "netns", "add", name])
    try:
        for argv in (
            ["ip", "link", "add", "hv0", "type", "veth", "peer", "name", "hv1"],
            ["ip", "addr", "add", "10.7.0.2/24", "dev", "hv0"],
            ["ip", "link", "set", "hv0", "up"],
            ["ip", "link", "set", "hv1", "up"],
            ["ip", "route", "add", "default", "via", "10.7.0.1", "dev", "hv0", "metric", "5"],
            ["ip", "mptcp", "endpoint", "add", "10.7.0.2", "id", "1", "dev", "hv0", "subflow"],
        ):
            sh(["ip", "netns", "exec", name, *argv])
        yield name
    finally:
        sh(["ip", "netns", "del", name], check=False)


@pytest.mark.timeout(120)
def test_rollback_without_netns_restores_the_namespace_the_journal_recorded(
    testbed: Testbed, scratch_ns: str, tmp_path: Path
) -> None:
    before, host_before = view(testbed.device_ns), view(scratch_ns)
    journal = tmp_path / "journal.json"
    env = {**os.environ, "EDGEPATH_AGENT_STATUS_FILE": str(tmp_path / "status.json"), "EDGEPATH_AGENT_ATTEMPTS": "1",
           "EDGEPATH_AGENT_RESTORE_ON_EXIT": "false", "EDGEPATH_AGENT_UPSTREAM_CHECK": "false"}  # fmt: skip
    with running_service() as svc:
        ran = agent("run", "--steps", "1", "--netns", testbed.device_ns, "--service", svc.grpc_url,
                    "--interface", "wlan0=WIFI", "--interface", "wwan0=LTE", "--journal", str(journal),
                    "--log-format", "text", env=env)  # fmt: skip
    assert ran.returncode == 0 and "state restored: False" in ran.stdout, ran.stdout + ran.stderr
    changed = view(testbed.device_ns)
    assert changed != before, "the run changed nothing: nothing to roll back"
    assert json.loads(journal.read_text())["netns"] == testbed.device_ns

    # --netns naming another namespace than the journal's: refused, nothing touched anywhere
    refused = agent("rollback", "--journal", str(journal), "--netns", scratch_ns)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and testbed.device_ns in errors[0] and scratch_ns in errors[0], refused.stderr
    assert view(testbed.device_ns) == changed and view(scratch_ns) == host_before and journal.exists()

    # ExecStopPost's command line (no --netns), started in another namespace than the agent's
    done = agent("rollback", "--journal", str(journal), ns=scratch_ns)
    assert done.returncode == 0 and "rollback: " in done.stdout, done.stdout + done.stderr
    assert view(testbed.device_ns) == before
    assert view(scratch_ns) == host_before
    assert not journal.exists()


def test_mptcp_disabled_in_the_namespace_is_warned_about(testbed: Testbed, tmp_path: Path) -> None:
    testbed.dev("sysctl", "-q", "-w", "net.mptcp.enabled=0")
    env = {**os.environ, "EDGEPATH_AGENT_STATUS_FILE": str(tmp_path / "status.json"), "EDGEPATH_AGENT_ATTEMPTS": "1"}
    ran = agent("run", "--dry-run", "--steps", "1", "--netns", testbed.device_ns, "--service", "grpc://127.0.0.1:9",
                "--interface", "wlan0=WIFI", "--journal", str(tmp_path / "j.json"), "--log-format", "text",
                env=env)  # fmt: skip
    assert ran.returncode == 69, ran.stdout + ran.stderr  # it ran its step; nothing answers there (EX_UNAVAILABLE)
    warned = [line for line in ran.stderr.splitlines() if "MPTCP is disabled" in line]
    assert len(warned) == 1 and " WARNING " in warned[0], ran.stderr
    assert f"in network namespace {testbed.device_ns} (net.mptcp.enabled = 0)" in warned[0]
    assert "sysctl -w net.mptcp.enabled=1" in warned[0]


def test_daemon_rollback_without_netns_acts_where_the_journal_recorded(
    testbed: Testbed, scratch_ns: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``daemon.rollback(path)`` (a direct caller, no namespace) built its backend in this process's namespace: the
    applier's backstop refused it (ApplyError "…taken in network namespace …, not in the host namespace"), and its
    dry run printed commands for the host. It now chooses the namespace as the ``rollback`` command does."""
    before = view(testbed.device_ns)
    journal = tmp_path / "journal.json"
    config = ApplierConfig(interfaces=("wlan0", "wwan0"), manage_cc=False)
    Applier(CommandBackend(netns=testbed.device_ns), Journal(journal), config).apply(
        {"primary_path": {"interface": "wwan0"}}
    )
    changed = view(testbed.device_ns)
    assert changed != before

    assert daemon.rollback(journal, dry_run=True).steps > 0
    printed = [line.removeprefix("would run: ") for line in capsys.readouterr().out.splitlines() if "would run" in line]
    assert printed and all(cmd.startswith(f"ip netns exec {testbed.device_ns} ip ") for cmd in printed), printed
    with pytest.raises(JournalError, match=scratch_ns):  # another namespace than the recorded one: refused
        daemon.rollback(journal, netns=scratch_ns)
    assert view(testbed.device_ns) == changed and journal.exists()

    assert daemon.rollback(journal).steps > 0
    assert view(testbed.device_ns) == before and not journal.exists()
