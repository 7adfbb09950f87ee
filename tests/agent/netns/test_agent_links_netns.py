"""Interfaces without an address in a real network namespace are not reported (marker ``netns``).

* The link reader on a namespace holding a veth pair, one end with an address and one without:
  rtnetlink (pyroute2) and the ``ip -j addr show`` fallback agree, and taking one end down leaves
  the other without carrier.
* The installed ``edgepath-agent run --dry-run --netns`` on the two-path testbed against a real
  service, wwan0's address removed (a modem not connected): wwan0 is left out of every request,
  logged once, and every decision makes wlan0 primary; with wlan0 also down each step is a logged
  skipped step, and the run, which never asked the service, exits 69 (EX_UNAVAILABLE) saying why.

Skipped (not passed) without root/CAP_NET_ADMIN or kernel MPTCP.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from edgepath_agent.collector import LinkReader, unusable_reason
from edgepath_agent.collector.link import link_states_ip_json
from edgepath_agent.testbed.netns import Testbed, sh
from netns_helpers import VethNamespace
from service_harness import running_service

pytestmark = pytest.mark.netns

AGENT = Path(sys.executable).with_name("edgepath-agent")


def test_the_reader_sees_which_end_of_a_veth_pair_has_an_address(veth_ns: VethNamespace) -> None:
    ns, a, b = veth_ns.name, veth_ns.end, veth_ns.peer
    states = LinkReader(ns)()
    assert unusable_reason(states[a]) is None
    assert unusable_reason(states[b]) == "has no address"  # up, carrier, an IPv6 link-local address at most
    assert unusable_reason(states.get("ep-c")) == "does not exist"
    text = sh(["ip", "-n", ns, "-j", "addr", "show"]).stdout
    fallback = link_states_ip_json(text)
    assert {n: unusable_reason(fallback[n]) for n in (a, b)} == {a: None, b: "has no address"}

    sh(["ip", "-n", ns, "link", "set", b, "down"])  # the end keeps its address but loses its carrier
    states = LinkReader(ns)()
    assert unusable_reason(states[a]) == "is down" and unusable_reason(states[b]) == "is down"


def run_agent(tb: Testbed, url: str, tmp_path: Path, steps: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EDGEPATH_AGENT_STATUS_FILE": str(tmp_path / "status.json"), "EDGEPATH_AGENT_ATTEMPTS": "1"}
    argv = [str(AGENT), "run", "--dry-run", "--steps", str(steps), "--interval-s", "0.01", "--netns", tb.device_ns,
            "--service", url, "--interface", "wlan0=WIFI", "--interface", "wwan0=LTE",
            "--journal", str(tmp_path / "j.json"), "--log-format", "text", "--log-level", "INFO"]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)


@pytest.mark.timeout(120)
def test_run_leaves_out_an_interface_without_an_address(testbed: Testbed, tmp_path: Path) -> None:
    testbed.dev("ip", "addr", "flush", "dev", "wwan0")  # the modem is up but not connected: no address
    with running_service() as svc:
        proc = run_agent(testbed, svc.grpc_url, tmp_path, steps=4)
    log = proc.stderr
    assert proc.returncode == 0, proc.stdout + log
    assert log.count("wwan0 has no address; not reported to the service until it has one") == 1, log
    decisions = re.findall(r"decision \S+: primary (\S+)", log)
    assert decisions == ["wlan0"] * 4, log  # the service was offered wlan0 alone, four times
    assert " ERROR " not in log and "refused" not in log and "Traceback" not in log, log
    record = json.loads((tmp_path / "status.json").read_text())
    assert record["unreported_interfaces"] == {"wwan0": "has no address"}


@pytest.mark.timeout(120)
def test_run_skips_steps_when_no_interface_has_an_address(testbed: Testbed, tmp_path: Path) -> None:
    testbed.dev("ip", "addr", "flush", "dev", "wwan0")
    testbed.dev("ip", "link", "set", "wlan0", "down")
    with running_service() as svc:
        proc = run_agent(testbed, svc.http_url, tmp_path, steps=3)
    log = proc.stderr
    # --steps is a check: a run that never asked the service is no success (it exited 0: "stopped after 3 step(s)").
    assert proc.returncode == 69 and "stopped after" not in proc.stdout, proc.stdout + log
    errors = [line for line in log.splitlines() if line.startswith("Error: ")]
    assert errors == [
        "Error: every step was skipped (3 steps): no managed interface could carry a path (wlan0 is down; wwan0 has "
        "no address), so the service was not asked; bring an interface up with an address, or check --interface"
    ], log
    skipped = [line for line in log.splitlines() if "step skipped, keeping the last applied configuration" in line]
    assert len(skipped) == 3 and " WARNING " in skipped[0] and all(" INFO " in s for s in skipped[1:]), log
    assert "(wlan0 is down; wwan0 has no address)" in skipped[0]
    assert "decision" not in log and " ERROR " not in log and "Traceback" not in log, log
    assert "would run" not in proc.stdout  # nothing was applied
