"""Testbed scenario ``mlpm``: MLPM-steered vs default vs LoRTT-steered MPTCP downloads (issue 20).

Both paths are rate-shaped with ``tbf`` (a fixed byte queue, so a saturated slow path queues
longer: delay = queue/rate) and their rates follow a *held-back* real trace: two carriers of
5Gophers ``driving-trace-2.csv`` measured at the same time (Narayanan et al., WWW 2020,
CC BY 4.0), scaled to ``clip(Mbit/s / rate_divisor, min, max)``. That trace was not used to fit
MLPM (``scripts/fit_mlpm.py`` trains on ``driving-trace-1`` and the early UCC traces).

Step ``k``:

1. rates of trace second ``k``; each path is probed with a plain-TCP download of
   ``probe_bytes`` bound to its address (throughput, and the sender's SRTT from the server's
   counters): these samples are the ``subflow_histories`` both steered policies see;
2. rates change to trace second ``k + 1`` (what a causal scheduler cannot know yet);
3. the three steerings run in a per-step random order, each one real ``IPPROTO_MPTCP``
   download of ``size_bytes`` through the agent's applier:

   * ``default``: what a device without EdgePath does: both endpoints ``subflow`` (no backup),
     the initial subflow on ``wlan0``; the kernel's default scheduler spreads the data;
   * ``lortt``: the path with the lowest last probed RTT carries the initial subflow, the
     other endpoint is ``backup`` (the paper's LoRTT baseline made a steering);
   * ``mlpm``: the agent asks the service (``edgepath serve`` on the device's loopback) with the
     histories; the applier (``follow_mlpm``) puts the initial subflow on MLPM's
     ``prioritised_subflow`` and makes the other endpoint ``backup`` only when its MLPM weight is
     below ``backup_weight_threshold`` (applier.core.mlpm_subflow_set).

Per download: throughput (receiver: bytes/completion) and RTT = the mean SRTT of the sending
subflows over the transfer (server counters sampled every 20 ms, :mod:`edgepath_agent.ccmetrics`).
Statistics: mean and Student-t 95 % CI over steps; paired differences per step.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgepath_agent.testbed.common import kernel_release, mean_ci95, run_outside, shape_tbf, start_server
from edgepath_agent.testbed.netns import PATHS, SERVER_ADDR, Testbed, sh

if TYPE_CHECKING:
    from edgepath_agent.messages import Recommendation

log = logging.getLogger(__name__)

STEERINGS = ("mlpm", "default", "lortt")
PORT = 5301


@dataclass
class MlpmParams:
    """Everything that defines a run (written into the report)."""

    trace: str
    wlan0_column: str = "Sprint_throughput_mbps"
    wwan0_column: str = "Verizon_throughput_mbps"
    steps: int = 40
    start_second: int = 0
    size_bytes: int = 1024 * 1024
    probe_bytes: int = 96 * 1024
    rate_divisor: float = 25.0
    min_rate_mbit: float = 2.0
    max_rate_mbit: float = 20.0
    queue_bytes: int = 60_000
    backup_weight_threshold: float = 0.2
    seed: int = 7
    timeout_s: float = 20.0
    run_id: str = ""
    command: list[str] = field(default_factory=list)


def default_trace() -> Path | None:
    """``../shared/data/5gophers/driving-trace-2.csv`` beside the repository or the working directory."""
    here = Path(__file__).resolve()
    for base in (here.parents[4].parent, Path.cwd().parent, Path.cwd()):
        p = base / "shared" / "data" / "5gophers" / "driving-trace-2.csv"
        if p.is_file():
            return p
    return None


def rates_from_trace(p: MlpmParams) -> list[tuple[float, float]]:
    """Per trace second, the shaped ``(wlan0, wwan0)`` rates, Mbit/s."""
    import pandas as pd

    df = pd.read_csv(p.trace)
    if "seq_num" in df.columns:
        df = df.sort_values("seq_num", kind="stable")
    cols = df[[p.wlan0_column, p.wwan0_column]].apply(pd.to_numeric, errors="coerce").ffill().fillna(0.0)
    raw = cols.to_numpy(dtype=float)[p.start_second :]
    clipped = np.clip(raw / p.rate_divisor, p.min_rate_mbit, p.max_rate_mbit)
    return [(float(a), float(b)) for a, b in clipped]


def _transfer_row(result: Any) -> dict[str, Any]:
    counters = result.server_counters or {}
    pm = counters.get("paper_metrics") or {}
    return {
        "throughput_mbps": result.throughput_bps / 1e6,
        "rtt_ms": pm.get("path_delay_avg_ms") or result.rtt_ms,
        "protocol_delay_ms": pm.get("protocol_delay_avg_ms"),
        "local_addr": result.local_addr,
        "subflow_rtt_ms": counters.get("subflow_rtt_ms"),
    }


def run_inside(p: MlpmParams, report: Path, plot: Path | None) -> dict[str, Any]:
    """The scenario proper; must run in the device namespace of testbed ``p.run_id``."""
    from edgepath_agent.client import connect_failover
    from edgepath_agent.collector import StaticCollector, TraceCollector, read_capabilities
    from edgepath_agent.daemon import Agent, AgentConfig, build_applier
    from edgepath_agent.meter import transfer
    from edgepath_agent.testbed.scenario import _stop, _wait_file

    tb = Testbed(run_id=p.run_id)
    rates = rates_from_trace(p)
    steps = min(p.steps, len(rates) - 1)
    rng = np.random.default_rng(p.seed)
    for ns in (tb.device_ns, tb.server_ns):
        sh(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.tcp_no_metrics_save=1"])
    work = Path(tempfile.mkdtemp(prefix=f"edgepath-mlpm-{p.run_id}-"))
    server = service = None
    agent: Agent | None = None
    started = time.time()
    rows: list[dict[str, Any]] = []
    addr = {link.name: link.device_addr for link in PATHS}
    try:
        server = start_server(tb, PORT, work)
        cmd = [sys.executable, "-m", "edgepath.cli", "serve", "--host", "127.0.0.1", "--grpc-port", "0",
               "--http-port", "0", "--ready-file", str(work / "ready.json"), "--seed", str(p.seed),
               "--log-level", "WARNING"]  # fmt: skip
        service = subprocess.Popen(cmd)
        ports = _wait_file(work / "ready.json", service, 60.0)
        config = AgentConfig(
            device_id=f"testbed-mlpm-{p.run_id}",
            service=[f"grpc://127.0.0.1:{ports['grpc_port']}", f"http://127.0.0.1:{ports['http_port']}"],
            interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
            journal=work / "journal.json",
            pending_file=None,  # a throw-away service: nothing to re-send to it after the run
            backup_weight_threshold=p.backup_weight_threshold,
            follow_mlpm=True,
            manage_cc=False,
            timeout_s=5.0,
            upstream_check=False,
        )
        applier = build_applier(config, read_capabilities().allowed_cc)
        trace = TraceCollector()
        agent = Agent(config, connect_failover(config.service, config.timeout_s, config.attempts), applier,
                      [trace, StaticCollector(config.interfaces)], measure=lambda _p: None)  # fmt: skip
        last_rtt: dict[str, float] = {}
        for k in range(steps):
            for name, rate in zip(("wlan0", "wwan0"), rates[k], strict=True):
                shape_tbf(tb, name, rate, p.queue_bytes)
            time.sleep(0.05)
            probes: dict[str, Any] = {}
            for name in ("wlan0", "wwan0"):
                try:
                    r = transfer(SERVER_ADDR, PORT, p.probe_bytes, p.timeout_s, use_mptcp=False, bind_addr=addr[name])
                except OSError as exc:
                    log.warning("probe on %s failed: %s", name, exc)
                    continue
                row = _transfer_row(r)
                probes[name] = row
                t_ms = time.time() * 1000.0
                rtt_hist, thr_hist = agent.history[name]
                thr_hist.append({"t_ms": t_ms, "throughput_bps": r.throughput_bps})
                if row["rtt_ms"]:
                    rtt_hist.append({"t_ms": t_ms, "rtt_ms": float(row["rtt_ms"])})
                    last_rtt[name] = float(row["rtt_ms"])
            for name, rate in zip(("wlan0", "wwan0"), rates[k + 1], strict=True):
                shape_tbf(tb, name, rate, p.queue_bytes)
            settle_s = 0.1
            time.sleep(settle_s)
            step: dict[str, Any] = {"step": k, "rates_mbit": list(rates[k + 1]), "probe_rates_mbit": list(rates[k]),
                                    "probes": probes}  # fmt: skip
            for steering in rng.permutation(STEERINGS):
                s = str(steering)
                rec: Recommendation | dict[str, Any]
                if s == "mlpm":
                    rec = agent.client.recommend(agent.context())
                elif s == "lortt":
                    best = min(last_rtt, key=lambda n: last_rtt[n]) if last_rtt else "wlan0"
                    weights = {n: (1.0 if n == best else 0.0) for n in ("wlan0", "wwan0")}
                    rec = {"primary_path": {"interface": best}, "scheduler_weights": weights}
                else:
                    rec = {"primary_path": {"interface": "wlan0"}, "scheduler_weights": {"wlan0": 0.5, "wwan0": 0.5}}
                applied = agent.applier.apply(rec)
                try:
                    r = transfer(SERVER_ADDR, PORT, p.size_bytes, p.timeout_s)
                    out = _transfer_row(r)
                except OSError as exc:
                    log.warning("%s transfer failed: %s", s, exc)
                    out = {"throughput_mbps": 0.0, "rtt_ms": None, "failed": True}
                sched = rec.get("scheduler") or {}
                out.update(
                    primary=applied.primary,
                    backup=list(applied.backup),
                    weights={w["interface"]: w["weight"] for w in sched.get("weights", [])} or None,
                    prioritised_subflow=sched.get("prioritised_subflow"),
                )
                step[s] = out
                time.sleep(settle_s)
            rows.append(step)
            if (k + 1) % 10 == 0:
                log.warning("mlpm step %d/%d", k + 1, steps)
        result = build_report(p, rows, time.time() - started)
    finally:
        if agent is not None:
            with contextlib.suppress(Exception):
                agent.close(restore=True)
        _stop(service)
        _stop(server)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(result, indent=2))
    if plot is not None:
        plot_report(rows, plot)
    return result


def build_report(p: MlpmParams, rows: list[dict[str, Any]], duration_s: float) -> dict[str, Any]:
    """The JSON report: per steering ``rtt_ms`` and ``throughput_mbps`` (mean, ci95), paired differences."""

    def col(s: str, key: str) -> np.ndarray:
        return np.array([r[s].get(key) if r[s].get(key) is not None else np.nan for r in rows], dtype=float)

    per: dict[str, Any] = {}
    for s in STEERINGS:
        per[s] = {
            "rtt_ms": mean_ci95(col(s, "rtt_ms")),
            "throughput_mbps": mean_ci95(col(s, "throughput_mbps")),
            "protocol_delay_ms": mean_ci95(col(s, "protocol_delay_ms")),
            "wlan0_initial_share": float(np.mean([r[s].get("primary") == "wlan0" for r in rows])) if rows else None,
            "steps_with_backup": int(sum(bool(r[s].get("backup")) for r in rows)),
        }
    diffs = {}
    for base in ("default", "lortt"):
        diffs[f"mlpm_minus_{base}"] = {
            "rtt_ms": mean_ci95(col("mlpm", "rtt_ms") - col(base, "rtt_ms")),
            "throughput_mbps": mean_ci95(col("mlpm", "throughput_mbps") - col(base, "throughput_mbps")),
        }
    mlpm_rows = [r["mlpm"] for r in rows]
    agree = [r["mlpm"].get("primary") == r["lortt"].get("primary") for r in rows]
    return {
        "scenario": "mlpm",
        "question": "MLPM-steered vs default vs LoRTT-steered MPTCP downloads on the same shaped, time-varying paths",
        "command": " ".join(p.command),
        "params": asdict(p) | {"command": None},
        "kernel": kernel_release(),
        "steps": len(rows),
        "duration_s": round(duration_s, 1),
        "emulated": (
            "two veth paths between network namespaces, tbf-shaped both ways; rates follow the held-back 5Gophers "
            f"driving-trace-2 ({p.wlan0_column} on wlan0, {p.wwan0_column} on wwan0, simultaneous carriers) as "
            f"clip(Mbit/s / {p.rate_divisor:g}, {p.min_rate_mbit:g}, {p.max_rate_mbit:g}), changing every step; a "
            f"fixed tbf queue of {p.queue_bytes} bytes per direction gives each saturated path a queueing delay of "
            "queue/rate"
        ),
        "not_emulated": (
            "no netem on this kernel: no propagation delay, jitter or radio loss; RTT differences come only from "
            "queueing behind the rate limit, so the lower-RTT path is also the faster one whenever both are "
            "saturated (in the real traces RTT and throughput are not tied like that); per-packet prioritisation "
            "(MLPM's prioritised packet) needs an out-of-tree BPF scheduler, so MLPM steers the initial subflow and "
            "backup flags only; time compressed: one trace second per step, steps last as long as their transfers"
        ),
        "steerings": per,
        "paired_differences": diffs,
        "mlpm_agrees_with_lortt_share": float(np.mean(agree)) if agree else None,
        "mlpm_steps_with_weights": int(sum(bool(r.get("weights")) for r in mlpm_rows)),
        "per_step": rows,
    }


def plot_report(rows: list[dict[str, Any]], path: Path) -> None:
    """Per-step throughput and RTT per steering, with the shaped rates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    steps = np.arange(len(rows))
    for s in STEERINGS:
        ax1.plot(steps, [r[s].get("throughput_mbps") or 0.0 for r in rows], label=s, marker=".")
        ax2.plot(steps, [r[s].get("rtt_ms") or np.nan for r in rows], label=s, marker=".")
    ax1.plot(steps, [r["rates_mbit"][0] for r in rows], "k:", label="wlan0 rate")
    ax1.plot(steps, [r["rates_mbit"][1] for r in rows], "k--", label="wwan0 rate")
    ax1.set_ylabel("throughput, Mbit/s")
    ax2.set_ylabel("RTT (mean SRTT of sending subflows), ms")
    ax2.set_xlabel("step (trace second)")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.suptitle("MLPM vs default vs LoRTT steering, real MPTCP over tbf-shaped veths")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(p: MlpmParams, report: Path, plot: Path | None) -> dict[str, Any]:
    """Build the testbed, run the scenario inside its device namespace, tear down (always)."""
    return run_outside("mlpm", asdict(p), report, plot)
