"""Short end-to-end runs of ``edgepath-testbed run --scenario mlpm`` and ``--scenario cc`` (issue 20).

Real namespaces, real MPTCP downloads, a real ``edgepath serve`` in the device namespace and
transfer servers in the server namespace; skipped without root/CAP_NET_ADMIN or kernel MPTCP
(and, for ``mlpm``, without the developers' 5Gophers trace in ../shared/data). They check the
report keys and invariants, not the figures (those come from the full runs in the README).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.usefixtures("netns_ready")]  # conftest.py
ROOT = Path(__file__).resolve().parents[3]


def run_scenario(scenario: str, steps: int, tmp_path: Path) -> dict:
    report, plot = tmp_path / f"{scenario}.json", tmp_path / f"{scenario}.png"
    proc = subprocess.run(
        [sys.executable, "-m", "edgepath_agent.testbed.cli", "run", "--scenario", scenario, "--steps", str(steps),
         "--report", str(report), "--plot", str(plot)],
        cwd=ROOT, capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert plot.stat().st_size > 0
    r = json.loads(report.read_text())
    run_id = r["params"]["run_id"]
    left = [n for n in (f"ep-dev-{run_id}", f"ep-srv-{run_id}") if (Path("/run/netns") / n).exists()]
    assert not left, f"namespaces left behind: {left}"
    return r


# starts a service and runs 2 steps × (2 probes + 3 MPTCP downloads) on shaped paths
@pytest.mark.timeout(240)
def test_mlpm_scenario_end_to_end(tmp_path: Path) -> None:
    from edgepath_agent.testbed.mlpm import default_trace

    if default_trace() is None:
        pytest.skip("../shared/data/5gophers/driving-trace-2.csv (the held-back rate trace) not present")
    r = run_scenario("mlpm", 2, tmp_path)
    assert r["steps"] == 2 and r["kernel"].startswith("Linux")
    for s in ("mlpm", "default", "lortt"):
        for key in ("rtt_ms", "throughput_mbps"):
            assert set(r["steerings"][s][key]) >= {"mean", "ci95"}
        assert r["steerings"][s]["throughput_mbps"]["n"] == 2
    for step in r["per_step"]:
        assert step["default"]["backup"] == [] and step["default"]["primary"] == "wlan0"
        lortt = step["lortt"]
        assert lortt["backup"] == [n for n in ("wlan0", "wwan0") if n != lortt["primary"]]
        mlpm = step["mlpm"]
        assert mlpm["primary"] == mlpm["prioritised_subflow"], "the initial subflow follows MLPM's pick"
        low = [
            n for n, w in mlpm["weights"].items() if n != mlpm["primary"] and w < r["params"]["backup_weight_threshold"]
        ]
        assert sorted(mlpm["backup"]) == sorted(low)
    assert "netem" in r["not_emulated"]


# starts a service and 3 transfer servers, 1 round of 2 MiB downloads per algorithm
@pytest.mark.timeout(240)
def test_cc_scenario_end_to_end(tmp_path: Path) -> None:
    r = run_scenario("cc", 1, tmp_path)
    algos = r["algorithms_measured"]
    assert algos and set(algos) <= {"reno", "cubic", "bbr"}
    assert r["server_congestion_control_mismatches"] == [], "each server must send with its own algorithm"
    for profile in ("STREAMING", "INTERACTIVE", "LOSS_SENSITIVE", "BULK"):
        entry = r["profiles"][profile]
        assert entry["advised"] in algos
        for a in algos:
            assert set(entry[a]) >= {"mean", "ci95"}
    row = next(t for t in r["per_transfer"] if not t.get("failed"))
    for metric in ("protocol_delay_avg_ms", "hol_degree_avg_ms", "path_delay_avg_ms", "drop_rate_pct"):
        assert metric in row
    assert r["kernel"].startswith("Linux") and "iptables" in r["emulated"]
