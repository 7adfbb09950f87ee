"""Smoke run of ``edgepath-testbed run`` (a few real MPTCP transfers per policy).

Marked ``slow`` and ``netns``: it starts a real service in the device namespace
and a transfer server in the server namespace; skipped without root or MPTCP.
It checks the report's shape and invariants, not the numbers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.usefixtures("netns_ready")]  # conftest.py


def test_testbed_scenario_smoke(tmp_path: Path):
    report, plot = tmp_path / "r.json", tmp_path / "p.png"
    root = Path(__file__).resolve().parents[3]
    before = set(Path("/run/netns").iterdir()) if Path("/run/netns").exists() else set()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgepath_agent.testbed.cli",
            "run",
            "--report",
            str(report),
            "--plot",
            str(plot),
            "--steps",
            "3",
            "--size-bytes",
            "65536",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(report.read_text())
    assert r["steps"] == 3 and plot.stat().st_size > 0
    for pol in ("learned", "wifi_first", "lte_first"):
        assert r["policies"][pol]["throughput_mbps"]["n"] == 3
        assert r["policies"][pol]["initial_subflow_on_primary_share"] == 1.0
    assert r["policies"]["wifi_first"]["wifi_primary_share"] == 1.0
    assert r["policies"]["lte_first"]["wifi_primary_share"] == 0.0
    # Only this run's namespaces count: other test processes on the machine may hold testbeds of their own.
    run_id = r["params"]["run_id"]
    assert run_id
    after = set(Path("/run/netns").iterdir()) if Path("/run/netns").exists() else set()
    ours = {ns for ns in after - before if ns.name in (f"ep-dev-{run_id}", f"ep-srv-{run_id}")}
    assert not ours, f"namespaces left behind: {ours}"
