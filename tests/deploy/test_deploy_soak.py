"""Issue 17: the short soak — ``loadtest/soak`` for 50 s with at least 3 faults, same accounting as the long one.

Real processes on loopback (redis-server with AOF, two ``edgepath serve`` replicas, one ``edgepath train``),
simulated REST and gRPC devices, faults from a fixed seed; the harness reconciles devices against the
store. Asserted: nothing acknowledged is lost, nothing is counted twice, no server error, every fault
recovered, model versions monotonic. Latency figures are reported, never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_helpers import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.redis]

REQUIRED_KEYS = {
    "duration_s",
    "faults_injected",
    "decisions",
    "outcomes_acknowledged",
    "outcomes_trained",
    "outcomes_lost",
    "outcomes_double_counted",
    "server_errors",
    "recovery_s",
    "p99_ms",
}


# timeout: 50 s of load plus starting four processes, recoveries and the final reconciliation on a shared
# 2-core machine (observed 90-200 s)
@pytest.mark.timeout(420)
def test_short_soak_loses_nothing_and_counts_once(tmp_path: Path) -> None:
    report_path = tmp_path / "soak.json"
    # Kinds that recover within seconds even on a loaded machine (a process restart takes 15-20 s there): the
    # long soak covers every kind; tests/service/state/test_durable_outbox.py kills a replica while Redis is down.
    kinds = "redis_pause,redis_restart,bad_snapshot,outcome_retry"
    cmd = [sys.executable, str(ROOT / "loadtest" / "soak"), "--duration-s", "50", "--fault-interval-s", "6"]
    cmd += ["--fault-kinds", kinds, "--seed", "3", "--report", str(report_path), "--rate-per-s", "40"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(report_path.read_text())
    print(json.dumps({k: report[k] for k in sorted(REQUIRED_KEYS)}, indent=1))
    assert REQUIRED_KEYS <= set(report)
    assert report["faults_total"] >= 3
    assert report["decisions"] > 100
    assert report["outcomes_acknowledged"] > 50
    assert report["outcomes_lost"] == 0
    assert report["outcomes_double_counted"] == 0
    assert report["outcomes_trained"] == report["outcomes_in_log"] == report["outcomes_acknowledged"]
    assert report["server_errors"] == 0, report["server_error_samples"]
    assert report["client_errors"] == 0, report["client_error_samples"]
    assert report["model_version"]["final_signature_valid"]
    assert report["model_version"]["replica_regressions"] == 0
    assert report["model_version"]["store_regressions"] == 0
    assert all(r["unrecovered"] == 0 for r in report["recovery_s"].values()), report["faults"]
    assert Path(report["plot"]).is_file()
