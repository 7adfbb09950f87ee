"""Testbed scenario: learned primary path vs ``wifi_first`` vs ``lte_first`` on real MPTCP transfers.

Runs *inside the device namespace* (``edgepath-testbed run`` re-executes itself
there with ``ip netns exec``), so every socket of the agent — its gRPC/REST client
and its MPTCP transfers — belongs to the device. The service (``edgepath serve``)
runs as a subprocess in the same namespace, on the device namespace's loopback:
the root namespace's loopback is not reachable from a namespace, and a
loopback-local service keeps the edge's own network out of the measured paths.
The transfer server runs in the server namespace.

Each step ``k``:

1. takes paired situation ``k`` (the replay's pairing, edgepath_agent.replay:
   one real WiFi test and one real cellular test of the same city/ISP);
2. shapes ``wlan0``/``wwan0`` both ways with ``tbf`` to ``clip(scale·bandwidth_Mbps,
   min, max)`` of each test — a linear scale keeps the ratio between the two paths
   within the range this machine can shape;
3. gives the agent the situation's radio readings (a trace source: veths carry no
   radio);
4. runs the three policies, in a per-step random order, each as one real
   IPPROTO_MPTCP download of ``size_bytes`` through the applier (routes/endpoints
   set in the kernel): ``learned`` asks the service and reports the measured outcome
   (the service learns online), the fixed baselines force the primary path.

Statistics: means with 95% confidence intervals from Student's t
(``mean ± t₀.₉₇₅,ₙ₋₁·s/√n``), and paired differences per step.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgepath_agent.applier import ApplyError
from edgepath_agent.client import connect_failover
from edgepath_agent.collector import StaticCollector, TraceCollector
from edgepath_agent.daemon import Agent, AgentConfig, build_applier
from edgepath_agent.meter import TransferResult, transfer
from edgepath_agent.replay import PAIRING_TEXT, load_tests, pair_situations
from edgepath_agent.testbed.netns import SERVER_ADDR, Testbed, run_in_namespace, sh

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

log = logging.getLogger(__name__)

POLICIES = ("learned", "wifi_first", "lte_first")
TRANSFER_PORT = 5201
#: The service's default reward threshold (edgepath.settings: 25 Mbit/s), scaled like the rates.
SERVICE_REWARD_THROUGHPUT_BPS = 25e6


@dataclass
class ScenarioParams:
    """Everything that defines a run (written into the report)."""

    wifi: str
    cellular: str
    steps: int = 300
    size_bytes: int = 256 * 1024
    seed: int = 7
    scale: float = 0.25
    min_rate_mbit: float = 1.0
    max_rate_mbit: float = 40.0
    policy: str | None = None
    batch_size: int | None = None
    loss_wlan0: float = 0.0
    loss_wwan0: float = 0.0
    timeout_s: float = 20.0
    run_id: str = ""
    command: list[str] = field(default_factory=list)


def mean_ci(values: ArrayLike) -> dict[str, float]:
    """Mean and Student-t 95% confidence interval."""
    from scipy import stats

    arr = np.asarray(values, dtype=float)
    n = arr.size
    mean = float(arr.mean()) if n else math.nan
    half = float(stats.t.ppf(0.975, n - 1) * arr.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return {"mean": mean, "ci95_low": mean - half, "ci95_high": mean + half, "n": int(n)}


def rate_mbit(bandwidth_mbps: float, p: ScenarioParams) -> float:
    """Shaped rate for a measured bandwidth: ``clip(scale·bw, min, max)`` Mbit/s."""
    return float(min(p.max_rate_mbit, max(p.min_rate_mbit, bandwidth_mbps * p.scale)))


def _wait_file(path: Path, proc: subprocess.Popen[Any], timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return dict(json.loads(path.read_text()))
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode} before it was ready")
        time.sleep(0.05)
    raise TimeoutError(f"{proc.args!r} not ready after {timeout_s} s")


def _stop(proc: subprocess.Popen[Any] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def run_inside(p: ScenarioParams, report: Path, plot: Path | None) -> dict[str, Any]:
    """The scenario proper; must run in the device namespace of testbed ``p.run_id``."""
    tb = Testbed(run_id=p.run_id)
    situations = pair_situations(load_tests(p.wifi), load_tests(p.cellular), p.steps, p.seed)
    rng = np.random.default_rng(p.seed)
    for ns in (tb.device_ns, tb.server_ns):  # no carry-over of cwnd/RTT between transfers
        sh(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.tcp_no_metrics_save=1"])
    for name, loss in (("wlan0", p.loss_wlan0), ("wwan0", p.loss_wwan0)):
        if loss > 0:
            tb.set_loss(name, loss)
    work = Path(tempfile.mkdtemp(prefix=f"edgepath-testbed-{p.run_id}-"))
    server = service = None
    agent: Agent | None = None
    started = time.time()
    try:
        server = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                tb.server_ns,
                sys.executable,
                "-m",
                "edgepath_agent.testbed.cli",
                "serve-transfers",
                "--port",
                str(TRANSFER_PORT),
                "--ready-file",
                str(work / "server.json"),
            ],
        )
        _wait_file(work / "server.json", server, 20.0)
        reward_bps = SERVICE_REWARD_THROUGHPUT_BPS * p.scale
        (work / "service.json").write_text(json.dumps({"reward_throughput_bps": reward_bps}))
        cmd = [sys.executable, "-m", "edgepath.cli", "serve", "--host", "127.0.0.1", "--grpc-port", "0",
               "--http-port", "0", "--ready-file", str(work / "ready.json"), "--config", str(work / "service.json"),
               "--seed", str(p.seed), "--log-level", "WARNING"]  # fmt: skip
        if p.policy:
            cmd += ["--policy", p.policy]
        if p.batch_size:
            cmd += ["--batch-size", str(p.batch_size)]
        service = subprocess.Popen(cmd)
        ports = _wait_file(work / "ready.json", service, 60.0)
        config = AgentConfig(
            device_id=f"testbed-{p.run_id}",
            service=[f"grpc://127.0.0.1:{ports['grpc_port']}", f"http://127.0.0.1:{ports['http_port']}"],
            interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
            probe=f"{SERVER_ADDR}:{TRANSFER_PORT}",
            probe_tool="builtin",  # the testbed's own TransferServer (server-side kernel counters in the trailer)
            probe_bytes=p.size_bytes,
            journal=work / "journal.json",
            pending_file=None,  # a throw-away service: nothing to re-send to it after the run
            # Isolate the primary path: the three policies differ only in the initial subflow's interface
            # (no backup flags from MLPM weights, the namespace's default congestion control for all).
            backup_weight_threshold=0.0,
            manage_cc=False,
            timeout_s=5.0,
            # Both paths always have upstream connectivity here and each policy must be applied exactly as
            # chosen: no upstream guard (the service is on the device's loopback anyway).
            upstream_check=False,
        )
        from edgepath_agent.collector import read_capabilities

        applier = build_applier(config, read_capabilities().allowed_cc)
        trace = TraceCollector()

        def measure(_primary: str) -> TransferResult:
            try:
                return transfer(SERVER_ADDR, TRANSFER_PORT, p.size_bytes, timeout_s=p.timeout_s)
            except OSError as exc:  # a failed transfer is an outcome too: nothing arrived in time
                log.warning("transfer failed: %s", exc)
                return TransferResult(0, p.timeout_s, 0.0, "", True)

        agent = Agent(
            config,
            connect_failover(config.service, config.timeout_s, config.attempts),
            applier,
            [trace, StaticCollector(config.interfaces)],
            measure=measure,
        )
        rows = []
        for k, s in enumerate(situations):
            w_rate, c_rate = rate_mbit(s.wifi_mbps, p), rate_mbit(s.cellular_mbps, p)
            # Each transfer starts with full token buckets: wait the refill time after each one, so that
            # the order of the three policies within a step does not favour the first.
            settle_s = max(tb.shape("wlan0", w_rate), tb.shape("wwan0", c_rate)) + 0.02
            trace.set({i["name"]: {f: v for f, v in i.items() if f != "name"} for i in s.interfaces})
            row: dict[str, Any] = {"step": k, "wifi_rate_mbit": w_rate, "lte_rate_mbit": c_rate}
            for pol in rng.permutation(POLICIES):
                forced = {"wifi_first": "wlan0", "lte_first": "wwan0"}.get(str(pol))
                try:
                    r = agent.step(primary=forced)
                except ApplyError as exc:
                    log.error("apply failed at step %d (%s): %s", k, pol, exc)
                    agent.applier.rollback()
                    raise
                m = r.measurement
                time.sleep(settle_s)
                row[str(pol)] = {
                    "primary": r.applied.primary if r.applied else None,
                    "local_addr": m.local_addr if m else None,
                    "throughput_mbps": m.throughput_bps / 1e6 if m else None,
                    "completion_s": m.completion_s if m else None,
                    "failed": bool(m is None or m.bytes == 0),
                    "subflows": m.subflows if m else None,
                    "reward": r.ack.reward if r.ack else None,
                    "propensity": r.recommendation.primary_path.propensity if r.recommendation else None,
                    "model_version": r.recommendation.model_version if r.recommendation else None,
                    "kept_last": r.kept_last,
                    "bandit_policy": r.recommendation.policy if r.recommendation else None,
                }
            rows.append(row)
            if (k + 1) % 25 == 0:
                done = rows[-25:]
                log.warning(
                    "step %d/%d: learned %.2f Mbit/s, wifi_first %.2f, lte_first %.2f (last 25)",
                    k + 1,
                    len(situations),
                    *(float(np.mean([d[x]["throughput_mbps"] or 0.0 for d in done])) for x in POLICIES),
                )
        result = build_report(p, rows, agent, time.time() - started)
    finally:
        if agent is not None:
            with contextlib.suppress(Exception):
                agent.close(restore=True)
        _stop(service)
        _stop(server)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(result, indent=2))
    if plot is not None:
        plot_report(rows, plot, result)
    return result


def _col(rows: list[dict[str, Any]], pol: str, key: str, default: float) -> np.ndarray:
    """Per-step values of ``key`` for policy ``pol`` (``default`` where missing)."""
    return np.array([r[pol][key] if r[pol][key] is not None else default for r in rows], dtype=float)


def build_report(p: ScenarioParams, rows: list[dict[str, Any]], agent: Agent, duration_s: float) -> dict[str, Any]:
    """The JSON report (see module docstring for what the numbers mean).

    A failed transfer counts as throughput 0 and completion time ``timeout_s``.
    """
    addr_of = {"wlan0": "10.1.1.2", "wwan0": "10.1.2.2"}
    thr = {pol: _col(rows, pol, "throughput_mbps", 0.0) for pol in POLICIES}
    ct = {pol: _col(rows, pol, "completion_s", p.timeout_s) for pol in POLICIES}
    per: dict[str, Any] = {}
    for pol in POLICIES:
        on_primary = [r[pol]["local_addr"] == addr_of.get(r[pol]["primary"]) for r in rows]
        per[pol] = {
            "throughput_mbps": mean_ci(thr[pol]),
            "completion_s": mean_ci(ct[pol]),
            "completion_s_median": float(np.median(ct[pol])),
            "failed_transfers": int(sum(r[pol]["failed"] for r in rows)),
            "wifi_primary_share": float(np.mean([r[pol]["primary"] == "wlan0" for r in rows])),
            "initial_subflow_on_primary_share": float(np.mean(on_primary)),
        }
    diffs = {
        f"learned_minus_{base}": {
            "throughput_mbps": mean_ci(thr["learned"] - thr[base]),
            "completion_s": mean_ci(ct["learned"] - ct[base]),
        }
        for base in ("wifi_first", "lte_first")
    }
    best_arm = np.where(thr["wifi_first"] >= thr["lte_first"], "wlan0", "wwan0")
    learned = [r["learned"] for r in rows]
    agree = np.array([x["primary"] == b for x, b in zip(learned, best_arm, strict=True)], dtype=float)
    half = len(rows) // 2
    rewards = [x["reward"] for x in learned if x["reward"] is not None]
    wifi_faster = np.array([r["wifi_rate_mbit"] > r["lte_rate_mbit"] for r in rows])
    w_minus_l = thr["wifi_first"] - thr["lte_first"]
    primary_effect = {
        # Does the primary path matter here? wifi_first − lte_first, split by which path was shaped faster.
        "wifi_first_minus_lte_first_mbps_when_wifi_faster": mean_ci(w_minus_l[wifi_faster]),
        "wifi_first_minus_lte_first_mbps_when_lte_faster": mean_ci(w_minus_l[~wifi_faster]),
        "faster_path_primary_wins_share": float(np.mean((w_minus_l > 0) == wifi_faster)) if rows else None,
    }
    uname = platform.uname()
    return {
        "scenario": "learned primary path vs wifi_first vs lte_first, real IPPROTO_MPTCP transfers, network namespaces",
        "command": " ".join(p.command),
        "params": asdict(p) | {"command": None},
        "kernel": f"{uname.system} {uname.release}",
        "steps": len(rows),
        "transfer_size_bytes": p.size_bytes,
        "duration_s": round(duration_s, 1),
        "emulation": (
            "Both paths are veth pairs between two network namespaces, rate-shaped both ways with tbf to "
            f"clip({p.scale}·bandwidth_Mbps, {p.min_rate_mbit}, {p.max_rate_mbit}) Mbit/s of each paired real test "
            "(no netem on this kernel: no added propagation delay; queueing delay only). Radio context given to the "
            "service comes from the same real tests (trace source). The service's reward threshold is its default "
            f"25 Mbit/s scaled the same way ({SERVICE_REWARD_THROUGHPUT_BPS * p.scale / 1e6:.2f} Mbit/s). "
            "Three transfers per step (one per policy, random order) under the same shaping; the policies share the "
            "paths but never run at the same time. The policies differ only in the primary path (initial subflow): "
            "both addresses are 'subflow' endpoints for all, no backup flags, the namespace's default congestion "
            "control for all."
        ),
        "pairing": PAIRING_TEXT,
        "rates_mbit": {
            "wifi_mean": float(np.mean([r["wifi_rate_mbit"] for r in rows])),
            "lte_mean": float(np.mean([r["lte_rate_mbit"] for r in rows])),
            "wifi_faster_share": float(np.mean([r["wifi_rate_mbit"] > r["lte_rate_mbit"] for r in rows])),
        },
        "policies": per,
        "oracle_per_step_best_fixed": {
            "throughput_mbps": mean_ci(np.maximum(thr["wifi_first"], thr["lte_first"])),
            "completion_s": mean_ci(np.minimum(ct["wifi_first"], ct["lte_first"])),
        },
        "paired_differences": diffs,
        "primary_path_effect": primary_effect,
        "learned": {
            "bandit_policy": learned[-1]["bandit_policy"] if learned else None,
            "mean_reward": float(np.mean(rewards)) if rewards else None,
            "agrees_with_measured_best_share": float(agree.mean()) if agree.size else None,
            "agrees_first_half": float(agree[:half].mean()) if half else None,
            "agrees_second_half": float(agree[half:].mean()) if agree.size else None,
            "final_model_version": learned[-1]["model_version"] if learned else None,
            "service_unreachable_steps": sum(bool(x["kept_last"]) for x in learned),
            "transport": getattr(agent.client, "last_used", None),
        },
        "per_step": rows,
    }


def plot_report(rows: list[dict[str, Any]], path: Path, report: dict[str, Any]) -> None:
    """Running mean throughput per policy and completion-time distributions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    steps = np.arange(1, len(rows) + 1)
    for pol in POLICIES:
        thr = np.array([r[pol]["throughput_mbps"] or 0.0 for r in rows])
        ax1.plot(steps, np.cumsum(thr) / steps, label=pol)
    ax1.set_xlabel("step (paired situation)")
    ax1.set_ylabel("running mean throughput, Mbit/s")
    ax1.legend()
    ax1.grid(alpha=0.3)
    data = [[r[pol]["completion_s"] or 0.0 for r in rows] for pol in POLICIES]
    ax2.boxplot(data, tick_labels=list(POLICIES), showfliers=False)
    ax2.set_ylabel(f"completion time of {report['transfer_size_bytes'] // 1024} KB, s")
    ax2.grid(alpha=0.3)
    fig.suptitle(f"EdgePath testbed: {report['steps']} steps, real MPTCP over tbf-shaped veths ({report['kernel']})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(p: ScenarioParams, report: Path, plot: Path | None) -> dict[str, Any]:
    """Build the testbed, run the scenario inside its device namespace, tear down (always)."""
    tb = Testbed()
    p.run_id = tb.run_id
    try:
        tb.setup()
        argv = ["-m", "edgepath_agent.testbed.cli", "inside", "--params", "{params}", "--report", str(report)]
        if plot is not None:
            argv += ["--plot", str(plot)]
        return run_in_namespace(tb.device_ns, argv, asdict(p), report, "scenario")
    finally:
        tb.teardown()
