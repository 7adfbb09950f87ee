"""The installed ``edgepath-agent run`` on the two-path testbed against a real service (marker ``netns``).

* ``--dry-run`` with an active probe that works (the built-in meter's server in the server namespace): the
  steps measure, but no outcome reaches the service: the status record says ``outcomes: "not reported: dry
  run"`` and has no last outcome, the log says so once, and the service counted none;
* ``--backend netlink --netns``: pyroute2 forks a child per netlink socket it opens in the namespace and
  ends it with SIGTERM; the run logs no ``signal 15: stopping`` of those children (it did several a step).

Skipped (not passed) without root/CAP_NET_ADMIN or kernel MPTCP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from edgepath_agent.client import connect
from edgepath_agent.meter import TransferServer
from edgepath_agent.testbed.netns import Testbed
from service_harness import running_service

pytestmark = pytest.mark.netns

AGENT = Path(sys.executable).with_name("edgepath-agent")


def run_agent(tb: Testbed, url: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EDGEPATH_AGENT_STATUS_FILE": str(tmp_path / "status.json"), "EDGEPATH_AGENT_ATTEMPTS": "1"}
    argv = [str(AGENT), "run", "--steps", "2", "--interval-s", "0.01", "--netns", tb.device_ns, "--service", url,
            "--interface", "wlan0=WIFI", "--interface", "wwan0=LTE", "--journal", str(tmp_path / "j.json"),
            "--log-format", "text", "--log-level", "INFO", *extra]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, env=env, check=False)


def outcomes_counted(svc) -> float:
    """``edgepath_outcomes_total`` of the service, summed over its labels."""
    import httpx

    text = httpx.get(f"{svc.http_url}/metrics", timeout=5.0).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("edgepath_outcomes_total")
    )


@pytest.mark.timeout(120)
def test_a_dry_run_with_a_working_probe_reports_no_outcome(
    testbed: Testbed, server: TransferServer, tmp_path: Path
) -> None:
    probe = f"{testbed.server_addr}:{server.port}"
    with running_service() as svc:
        before = outcomes_counted(svc)
        proc = run_agent(testbed, svc.grpc_url, tmp_path, "--dry-run", "--probe", probe, "--probe-tool", "builtin")
        counted = outcomes_counted(svc) - before
        log = proc.stderr
        assert proc.returncode == 0, proc.stdout + log
        record = json.loads((tmp_path / "status.json").read_text())
        client = connect(svc.grpc_url)
        try:  # the counter does count: an outcome for the run's last decision, sent now, is its first
            ack = client.report_outcome(
                {"device_id": record["device_id"], "decision_id": record["recommendation"]["decision_id"],
                 "throughput_bps": 1e6}
            )  # fmt: skip
        finally:
            client.close()
        assert ack.accepted and not ack.duplicate and outcomes_counted(svc) - before == 1
    assert log.count("dry run: no outcome is reported to the service") == 1, log
    assert record["step"] == 2 and record["service"]["reachable"] is True
    assert record["outcomes"] == "not reported: dry run" and record["no_outcome_reason"] == "dry run"
    assert record["last_outcome"] is None and record["probe"]["last_error"] is None  # the probe did run
    assert counted == 0


@pytest.mark.timeout(120)
def test_a_netlink_run_in_a_namespace_logs_no_stop_of_pyroute2_children(testbed: Testbed, tmp_path: Path) -> None:
    with running_service() as svc:
        proc = run_agent(testbed, svc.grpc_url, tmp_path, "--backend", "netlink")
    log = proc.stderr
    assert proc.returncode == 0 and "stopped after 2 step(s)" in proc.stdout, proc.stdout + log
    assert log.count("decision ") >= 2, log
    assert "signal 15" not in log and "stopping" not in log, log
