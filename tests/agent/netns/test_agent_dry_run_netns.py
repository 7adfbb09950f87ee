"""``--netns NAME --dry-run`` prints commands for that namespace (marker ``netns``).

An operator copies a dry run's commands to run them by hand; without ``ip netns exec NAME`` they
would act on the host's namespace. Here the installed ``edgepath-agent rollback --dry-run --netns``
prints the rollback of a real change in the testbed's device namespace, the printed commands are
run as printed from the host namespace, and the device's routes are back as they were.
(``run --dry-run --netns``: tests/agent/test_agent_package.py.) Skipped without root/CAP_NET_ADMIN
or kernel MPTCP.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from edgepath_agent.applier import Applier, ApplierConfig, CommandBackend, Journal
from edgepath_agent.testbed.netns import Testbed, sh

pytestmark = pytest.mark.netns

AGENT = Path(sys.executable).with_name("edgepath-agent")


def default_routes(tb: Testbed) -> list[str]:
    return sorted(tb.dev("ip", "-4", "route", "show", "default").stdout.splitlines())


def test_rollback_dry_run_prints_the_commands_that_restore_the_namespace(testbed: Testbed, tmp_path: Path) -> None:
    journal = tmp_path / "journal.json"
    before = default_routes(testbed)
    config = ApplierConfig(interfaces=("wlan0", "wwan0"), manage_cc=False)
    Applier(CommandBackend(netns=testbed.device_ns), Journal(journal), config).apply(
        {"primary_path": {"interface": "wwan0"}}
    )
    changed = default_routes(testbed)
    assert changed != before

    argv = [str(AGENT), "rollback", "--dry-run", "--netns", testbed.device_ns, "--journal", str(journal)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    printed = [line.removeprefix("would run: ") for line in proc.stdout.splitlines() if line.startswith("would run: ")]
    assert printed, proc.stdout
    assert all(cmd.startswith(f"ip netns exec {testbed.device_ns} ip ") for cmd in printed), printed
    assert default_routes(testbed) == changed  # a dry run changes nothing

    for cmd in printed:  # what an operator pasting them into a root shell on the host does
        sh(shlex.split(cmd))
    assert default_routes(testbed) == before
