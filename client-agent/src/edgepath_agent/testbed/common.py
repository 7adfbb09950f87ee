"""Helpers shared by the issue-20 testbed scenarios (``mlpm``, ``cc``): servers, shaping, statistics."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from edgepath_agent.testbed.netns import Testbed, run_in_namespace, sh


def mean_ci95(values: Iterable[float | None]) -> dict[str, Any]:
    """``{"mean", "ci95": [low, high], "n"}``: Student-t 95 % interval ``mean ± t₀.₉₇₅,ₙ₋₁·s/√n``.

    Non-finite values are left out; with fewer than two values the interval is ``[mean, mean]``
    (``n`` says how many there were).
    """
    from scipy import stats

    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = int(arr.size)
    if n == 0:
        return {"mean": None, "ci95": [None, None], "n": 0}
    mean = float(arr.mean())
    half = float(stats.t.ppf(0.975, n - 1) * arr.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    return {"mean": mean, "ci95": [mean - half, mean + half], "n": n}


def shape_tbf(tb: Testbed, name: str, rate_mbit: float, limit_bytes: int) -> None:
    """Shape path ``name`` both ways with ``tbf`` at ``rate_mbit`` and a queue of ``limit_bytes``.

    A fixed byte queue makes the queueing delay of a saturated path ``limit/rate`` (a slow path
    queues longer), the only delay this kernel can emulate (no netem). ``burst`` =
    max(16 KB, rate·10 ms) covers one timer tick of tokens.
    """
    rate_bps = rate_mbit * 1e6
    burst = max(16 * 1024, int(rate_bps / 8 * 0.01))
    spec = ["root", "tbf", "rate", f"{int(rate_bps)}bit", "burst", str(burst), "limit", str(int(limit_bytes))]
    sh(["tc", "-n", tb.device_ns, "qdisc", "replace", "dev", name, *spec])
    sh(["tc", "-n", tb.server_ns, "qdisc", "replace", "dev", f"s-{name}", *spec])


def start_server(
    tb: Testbed, port: int, work: Path, congestion_control: str | None = None, sample_interval_s: float = 0.02
) -> subprocess.Popen[Any]:
    """A transfer server (``edgepath-testbed serve-transfers``) in the server namespace, ready when returned.

    Raises
    ------
    RuntimeError / TimeoutError
        When it exits or is not ready within 20 s.
    """
    from edgepath_agent.testbed.scenario import _wait_file

    ready = work / f"server-{port}.json"
    argv = ["ip", "netns", "exec", tb.server_ns, sys.executable, "-m", "edgepath_agent.testbed.cli",
            "serve-transfers", "--port", str(port), "--ready-file", str(ready),
            "--sample-interval-s", str(sample_interval_s)]  # fmt: skip
    if congestion_control:
        argv += ["--congestion-control", congestion_control]
    proc = subprocess.Popen(argv)
    _wait_file(ready, proc, 20.0)
    return proc


def run_outside(
    scenario: str,
    params: dict[str, Any],
    report: Path,
    plot: Path | None,
    inside: Callable[[Testbed], None] | None = None,
) -> dict[str, Any]:
    """Build a testbed, re-run this scenario inside its device namespace (``inside-scenario``), tear down.

    Raises
    ------
    RuntimeError
        When the scenario process fails.
    """
    tb = Testbed()
    params = {**params, "run_id": tb.run_id}
    try:
        tb.setup()
        if inside is not None:
            inside(tb)
        argv = ["-m", "edgepath_agent.testbed.cli", "inside-scenario", "--scenario", scenario]
        argv += ["--params", "{params}", "--report", str(report)]
        if plot is not None:
            argv += ["--plot", str(plot)]
        return run_in_namespace(tb.device_ns, argv, params, report, f"scenario {scenario}")
    finally:
        tb.teardown()


def kernel_release() -> str:
    """``uname -sr`` of this machine (the namespaces share the host kernel)."""
    import platform

    u = platform.uname()
    return f"{u.system} {u.release}"


def available_cc() -> list[str]:
    """``net.ipv4.tcp_available_congestion_control`` (loaded algorithms), in the kernel's order."""
    try:
        return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    except OSError:
        return []
