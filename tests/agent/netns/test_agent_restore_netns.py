"""The stop and ``rollback`` restore every step they can, skip those of a deleted device, and say how it went
(marker ``netns``).

A managed interface that disappears between the apply and the stop (a USB modem unplugged, a VPN or veth gone)
leaves restore steps that cannot run: its default route cannot be put back on a device that is gone, nor an MPTCP
endpoint bound to it (``ip mptcp endpoint add … dev NAME``). Nor is anything of it left to restore: what the kernel
keeps after ``ip link del`` (observed here on Linux 6.18, iproute2 6.1) is

* routes: none of the device's (the default route and the connected route went with it);
* MPTCP endpoints: *all* of them, created with ``dev NAME`` or with the device's address: ``ip mptcp endpoint show``
  lists them with ``dev ifN`` (the deleted device's index, which no longer has a name); ``delete id`` and ``change
  id … backup|nobackup`` still work on them, ``add … dev NAME`` is refused (``device does not exist``).

Those steps used to fail every time, so the stop exited 75 and ``rollback`` (the unit's ``ExecStopPost=``) exited 1
until the device came back. Now a failed step naming a device that no longer exists is skipped and named; the rest
is restored: the kernel-kept endpoint (deleted by id), the MPTCP limits, the congestion control, the other
interfaces' routes; the journal is removed and ``status`` says the configuration was restored. The failure is real
(the interface is deleted in the device's namespace); nothing is mocked. The steps that fail for another reason are
still failures (tests/agent/test_agent_stop_restore.py, with the dry-run backend's injected failures).

After a stop that restored the device, ``status`` says the configuration was restored instead of still showing
the decision as applied (a real ``run --steps 1`` against a real service).

Skipped (not passed) without root/CAP_NET_ADMIN or kernel MPTCP.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import kernel_view as view
from agent_fixtures import run_agent as agent
from edgepath_agent.applier import Journal
from edgepath_agent.daemon import Agent, AgentConfig, build_applier
from edgepath_agent.messages import OutcomeAck, Recommendation
from edgepath_agent.status import read_status
from edgepath_agent.testbed.netns import Testbed
from service_harness import running_service

pytestmark = pytest.mark.netns

WWAN0 = "10.1.2.2"
CC = "net.ipv4.tcp_congestion_control"


class Recommends:
    """Stands in for the service: always recommends ``primary`` (and congestion control ``cc`` when given)."""

    url = "fixed://"

    def __init__(self, primary: str, cc: str | None = None) -> None:
        self.body: dict[str, Any] = {"decision_id": "r-1", "primary_path": {"interface": primary}}
        if cc is not None:
            self.body["congestion_control"] = cc

    def recommend(self, request: dict[str, Any]) -> Recommendation:
        return Recommendation.from_rest(self.body)

    def report_outcome(self, outcome: dict[str, Any]) -> OutcomeAck:
        return OutcomeAck(decision_id=outcome["decision_id"], accepted=True)

    def close(self) -> None:
        pass


def default_routes(tb: Testbed) -> str:
    return tb.dev("ip", "-4", "route", "show", "default").stdout


def other_cc(tb: Testbed) -> str:
    """A congestion control the device's namespace allows other than the current one (skips when there is none)."""
    current = tb.dev("sysctl", "-n", CC).stdout.strip()
    allowed = tb.dev("sysctl", "-n", "net.ipv4.tcp_allowed_congestion_control").stdout.split()
    others = [name for name in allowed if name != current]
    if not others:
        pytest.skip(f"tcp_allowed_congestion_control lists only {current}: nothing to change and restore")
    return others[0]


def applied_once(testbed: Testbed, config: AgentConfig, primary: str, cc: str) -> Agent:
    """An agent of ``config`` in the testbed's device namespace that has run one step: ``primary`` made the primary
    path and ``cc`` the congestion control (:class:`Recommends`), with the namespace's allowed algorithms."""
    allowed = testbed.dev("sysctl", "-n", "net.ipv4.tcp_allowed_congestion_control").stdout.split()
    runner = Agent(config, Recommends(primary, cc), build_applier(config, allowed), [], measure=lambda _p: None)
    assert runner.run(threading.Event(), max_steps=1) == 1
    return runner


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["command", "netlink"])
def test_stop_skips_the_steps_of_an_interface_that_is_gone(testbed: Testbed, tmp_path: Path, backend: str) -> None:
    if backend == "netlink":
        from edgepath_agent.applier.netlink import available

        if not available():
            pytest.skip("pyroute2 is not installed (netlink backend)")
    # a state the agent changes in every part: wwan0's endpoint (signal, not subflow), the limits, the routes, the CC
    testbed.dev("ip", "mptcp", "endpoint", "delete", "id", "2")
    testbed.dev("ip", "mptcp", "endpoint", "add", WWAN0, "id", "2", "dev", "wwan0", "signal")
    testbed.dev("ip", "mptcp", "limits", "set", "subflows", "1", "add_addr_accepted", "1")
    cc_before, cc = testbed.dev("sysctl", "-n", CC).stdout.strip(), other_cc(testbed)
    before = view(testbed.device_ns)
    journal, status = tmp_path / "journal.json", tmp_path / "status.json"
    config = AgentConfig(
        device_id="dev-restore",
        service=["grpc://192.0.2.1:50051"],  # unused: Recommends answers
        interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
        netns=testbed.device_ns,
        backend=backend,
        upstream_check=False,
        journal=journal,
        status_file=status,
    )
    runner = applied_once(testbed, config, "wwan0", cc)
    changed = view(testbed.device_ns)
    assert changed["limits"] != before["limits"] and "dev wlan0 metric 20" in default_routes(testbed)
    assert testbed.dev("sysctl", "-n", CC).stdout.strip() == cc

    testbed.dev("ip", "link", "del", "wwan0")  # unplugged between the apply and the stop
    runner.close()  # no RestoreIncomplete: nothing is left to restore on wwan0
    # the rest is restored: wlan0's route at its metric, the limits, the CC; wwan0's endpoint (kept by the
    # kernel, with the agent's flags) is gone, the snapshot's one (signal, dev wwan0) cannot be added back
    assert "dev wlan0 metric 100" in default_routes(testbed) and "wwan0" not in default_routes(testbed)
    after = view(testbed.device_ns)
    assert after["limits"] == before["limits"] and testbed.dev("sysctl", "-n", CC).stdout.strip() == cc_before
    assert WWAN0 not in after["endpoints"], after["endpoints"]
    assert [line for line in after["endpoints"].splitlines() if WWAN0 not in line] == [
        line for line in before["endpoints"].splitlines() if WWAN0 not in line
    ]
    assert not journal.exists() and not Journal(journal).active
    record = read_status(status)
    assert record is not None and record["applied"] is None and record["configuration_state"] == "restored"
    assert record["configuration"].startswith("restored at stop (skipped: ")
    assert "(device wwan0 no longer exists)" in record["configuration"]
    shown = agent("status", "--status-file", str(status))
    assert "applied:        nothing: the configuration was restored at stop (skipped: " in shown.stdout, shown.stdout


@pytest.mark.timeout(120)
def test_rollback_skips_a_deleted_device_and_restores_the_rest(testbed: Testbed, tmp_path: Path) -> None:
    """A USB modem (here a veth pair made for the test, with an address and a default route) is managed, the agent
    applies (it as the primary, its own endpoint for it, the limits, the CC) and ends without restoring (a
    SIGKILL: the journal stays), then the modem is unplugged (``ip link del``). ``edgepath-agent rollback`` (the
    unit's ``ExecStopPost=``) used to exit 1 on its route until it came back. It exits 0 now, naming the skipped
    step and the device, removes the endpoint the kernel kept for it (``10.3.0.2 id 3 subflow dev ifN``), restores
    the global state and the other interface, removes the journal; ``status`` says restored; a second rollback
    has nothing to do."""
    for argv in (("link", "add", "usb0", "type", "veth", "peer", "name", "usb0p"),
                 ("addr", "add", "10.3.0.2/24", "dev", "usb0"), ("link", "set", "usb0p", "up"),
                 ("link", "set", "usb0", "up"),
                 ("route", "add", "default", "via", "10.3.0.1", "dev", "usb0", "metric", "300")):  # fmt: skip
        testbed.dev("ip", *argv)
    testbed.dev("ip", "mptcp", "limits", "set", "subflows", "1", "add_addr_accepted", "1")
    cc_before, cc = testbed.dev("sysctl", "-n", CC).stdout.strip(), other_cc(testbed)
    before, routes_before = view(testbed.device_ns), default_routes(testbed)
    journal, status = tmp_path / "journal.json", tmp_path / "status.json"
    config = AgentConfig(
        device_id="dev-usb",
        service=["grpc://192.0.2.1:50051"],  # unused: Recommends answers
        interfaces={"wlan0": "WIFI", "usb0": "LTE"},
        netns=testbed.device_ns,
        upstream_check=False,
        restore_on_exit=False,
        journal=journal,
        status_file=status,
    )
    runner = applied_once(testbed, config, "usb0", cc)
    runner.close()  # restore_on_exit = false: what a SIGKILL leaves, the journal kept
    assert "dev usb0 metric 10" in default_routes(testbed) and "10.3.0.2" in view(testbed.device_ns)["endpoints"]
    assert testbed.dev("sysctl", "-n", CC).stdout.strip() == cc and journal.exists()

    testbed.dev("ip", "link", "del", "usb0")  # unplugged; its routes go with it, its MPTCP endpoint stays (6.18)
    kept = view(testbed.device_ns)["endpoints"]
    done = agent("rollback", "--journal", str(journal), "--status-file", str(status))
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = [line for line in done.stdout.splitlines() if line.strip().startswith("skipped: ")]
    assert skipped and all("dev usb0" in line and "(device usb0 no longer exists)" in line for line in skipped), (
        done.stdout
    )
    assert "skipped: their device no longer exists" in done.stdout and "failed" not in done.stdout + done.stderr
    assert "skipped" not in done.stderr, "said once, on stdout (not again on stderr by the applier's log line)"
    assert not journal.exists()
    after = view(testbed.device_ns)
    # the endpoint the kernel kept for the deleted device (where it keeps it: "10.3.0.2 … dev ifN") is removed
    assert "10.3.0.2" in kept or "10.3.0.2" not in before["endpoints"]
    assert (after["endpoints"], after["limits"]) == (before["endpoints"], before["limits"])
    assert testbed.dev("sysctl", "-n", CC).stdout.strip() == cc_before
    assert default_routes(testbed) == "".join(line + "\n" for line in routes_before.splitlines() if "usb0" not in line)
    shown = agent("status", "--status-file", str(status))
    assert "applied:        nothing: the configuration was restored by edgepath-agent rollback (skipped: " in (
        shown.stdout
    ), shown.stdout
    record = read_status(status)
    assert record is not None and record["configuration_state"] == "restored" and "usb0" in record["configuration"]
    again = agent("rollback", "--journal", str(journal), "--status-file", str(status))
    assert again.returncode == 0 and "rollback: nothing to restore" in again.stdout, again.stdout + again.stderr


@pytest.mark.timeout(120)
def test_status_after_a_restoring_stop_says_restored(testbed: Testbed, tmp_path: Path) -> None:
    before = view(testbed.device_ns)
    status = tmp_path / "status.json"
    env = {**os.environ, "EDGEPATH_AGENT_STATUS_FILE": str(status), "EDGEPATH_AGENT_ATTEMPTS": "1",
           "EDGEPATH_AGENT_UPSTREAM_CHECK": "false"}  # fmt: skip
    with running_service() as svc:
        ran = agent("run", "--steps", "1", "--netns", testbed.device_ns, "--service", svc.grpc_url,
                    "--interface", "wlan0=WIFI", "--interface", "wwan0=LTE",
                    "--journal", str(tmp_path / "journal.json"), "--log-format", "text", env=env)  # fmt: skip
    assert ran.returncode == 0 and "state restored: True" in ran.stdout, ran.stdout + ran.stderr
    assert view(testbed.device_ns) == before
    shown = agent("status", "--status-file", str(status), env=env)
    assert "applied:        nothing: the configuration was restored at stop" in shown.stdout, shown.stdout
    assert "applied:        primary" not in shown.stdout
    record = read_status(status)
    assert record is not None and record["applied"] is None and record["configuration"] == "restored at stop"
    assert record["configuration_state"] == "restored"
    assert record["recommendation"] is not None  # what the service last said is still shown, as such
