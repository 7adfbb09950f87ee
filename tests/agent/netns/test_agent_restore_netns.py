"""The stop restores every step it can, and says how it went (marker ``netns``).

A managed interface that disappears between the apply and the stop (a USB modem unplugged) leaves restore steps
that cannot run: its default route and its MPTCP endpoint cannot be put back on a device that is gone. The stop
used to end at the first such step: the routes, endpoints and limits after it stayed as the agent had set them,
and the exception ended ``run`` with a traceback. Now every step is attempted, the failed ones are named
(:class:`~edgepath_agent.applier.RestoreIncomplete`), the journal is kept, and ``edgepath-agent rollback``
exits 1 listing them until it can finish. The failure is real (the interface is deleted in the device's
namespace); nothing is mocked here (``run``'s exit code 75 for it is in tests/agent/test_agent_stop_restore.py).

After a stop that restored the device, ``status`` says the configuration was restored instead of still showing
the decision as applied (a real ``run --steps 1`` against a real service); after a partial one, ``rollback``
updates the status record: the steps still failing, then, once it finishes, restored by ``edgepath-agent
rollback``.

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
from edgepath_agent.applier import Applier, CommandBackend, Journal, RestoreIncomplete
from edgepath_agent.daemon import Agent, AgentConfig
from edgepath_agent.messages import OutcomeAck, Recommendation
from edgepath_agent.status import read_status
from edgepath_agent.testbed.netns import Testbed
from service_harness import running_service

pytestmark = pytest.mark.netns

WWAN0 = "10.1.2.2"


class Wwan0:
    """Stands in for the service: always recommends wwan0 (the testbed's secondary path)."""

    url = "fixed://wwan0"

    def recommend(self, request: dict[str, Any]) -> Recommendation:
        return Recommendation.from_rest({"decision_id": "w-1", "primary_path": {"interface": "wwan0"}})

    def report_outcome(self, outcome: dict[str, Any]) -> OutcomeAck:
        return OutcomeAck(decision_id=outcome["decision_id"], accepted=True)

    def close(self) -> None:
        pass


def default_routes(tb: Testbed) -> str:
    return tb.dev("ip", "-4", "route", "show", "default").stdout


@pytest.mark.timeout(120)
def test_stop_restores_every_step_it_can_when_an_interface_is_gone(testbed: Testbed, tmp_path: Path) -> None:
    # a state the agent changes in every part: wwan0's endpoint (signal, not subflow), the limits, the routes
    testbed.dev("ip", "mptcp", "endpoint", "delete", "id", "2")
    testbed.dev("ip", "mptcp", "endpoint", "add", WWAN0, "id", "2", "dev", "wwan0", "signal")
    testbed.dev("ip", "mptcp", "limits", "set", "subflows", "1", "add_addr_accepted", "1")
    before, routes_before = view(testbed.device_ns), default_routes(testbed)
    journal, status = tmp_path / "journal.json", tmp_path / "status.json"
    config = AgentConfig(
        device_id="dev-restore",
        service=["grpc://192.0.2.1:50051"],  # unused: Wwan0 answers
        interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
        netns=testbed.device_ns,
        manage_cc=False,
        upstream_check=False,
        journal=journal,
        status_file=status,
    )
    applier = Applier(CommandBackend(netns=testbed.device_ns), Journal(journal), config.applier_config())
    runner = Agent(config, Wwan0(), applier, [], measure=lambda _p: None)
    assert runner.run(threading.Event(), max_steps=1) == 1
    changed = view(testbed.device_ns)
    assert changed["limits"] != before["limits"] and "dev wlan0 metric 20" in default_routes(testbed)

    testbed.dev("ip", "link", "del", "wwan0")  # unplugged between the apply and the stop
    with pytest.raises(RestoreIncomplete) as failed:
        runner.close()
    assert failed.value.failed and all("wwan0" in step for step in failed.value.failed), failed.value.failed
    # the steps after the failed ones ran: wlan0's route is back at its metric, the limits as they were
    assert "dev wlan0 metric 100" in default_routes(testbed)
    assert view(testbed.device_ns)["limits"] == before["limits"]
    assert Journal(journal).active, "the journal must be kept for a retry"
    record = read_status(status)
    assert record is not None and record["applied"] is None
    assert record["configuration"].startswith("partly restored at stop: ") and "wwan0" in record["configuration"]

    # the status record is found through the settings (EDGEPATH_AGENT_STATUS_FILE), as `status` finds it
    env = {**os.environ, "EDGEPATH_AGENT_STATUS_FILE": str(status)}
    retry = agent("rollback", "--journal", str(journal), env=env)
    assert retry.returncode == 1, retry.stdout + retry.stderr
    listed = [line for line in retry.stderr.splitlines() if line.strip().startswith("failed: ")]
    assert listed and all("wwan0" in line for line in listed), retry.stderr
    assert "Traceback" not in retry.stderr and journal.exists()
    record = read_status(status)
    assert record is not None and record["configuration"].startswith("partly restored by edgepath-agent rollback: ")
    assert "wwan0" in record["configuration"]

    # the interface is back (same name and address): the retry finishes and removes the journal
    for argv in (("link", "add", "wwan0", "type", "veth", "peer", "name", "wwan0p"),
                 ("addr", "add", f"{WWAN0}/24", "dev", "wwan0"), ("link", "set", "wwan0p", "up"),
                 ("link", "set", "wwan0", "up")):  # fmt: skip
        testbed.dev("ip", *argv)
    done = agent("rollback", "--journal", str(journal), "--status-file", str(status))
    assert done.returncode == 0, done.stdout + done.stderr
    shown = agent("status", "--status-file", str(status))  # no longer "partly restored at stop"
    assert "applied:        nothing: the configuration was restored by edgepath-agent rollback" in shown.stdout, (
        shown.stdout
    )
    assert "partly restored" not in shown.stdout
    # what the agent manages is as before (table 102, the testbed's own route on the old wwan0, went with it)
    after = view(testbed.device_ns)
    assert (after["endpoints"], after["limits"]) == (before["endpoints"], before["limits"])
    assert default_routes(testbed) == routes_before and not journal.exists()


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
