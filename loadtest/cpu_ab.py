#!/usr/bin/env python3
"""Server CPU per Recommend of two checkouts of the service, measured side by side under one load (issue 16).

Usage::

    git worktree add /tmp/base <revision>      # the checkout to compare against (its generated wire code too:
    cp -r service/src/edgepath/wire /tmp/base/service/src/edgepath/)
    .venv/bin/python loadtest/cpu_ab.py --base-src /tmp/base/service/src [--transport grpc|rest]
        [--store memory://|redis] [--duration-s 10] [--rounds 3] [--history-samples 20] [--with-outcomes]
        [--batch-size 64]

Starts ``edgepath serve`` twice, the base with ``PYTHONPATH=<base-src>`` (its ``edgepath`` package shadows this
checkout's) and this checkout's, each with rate limits lifted as in the bench, and drives **both at once**: two
closed loops of 8 in-flight Recommend calls each, on one event loop, for ``--duration-s`` per round. Each round
prints both servers' calls/s and CPU µs per call (user + system time from ``/proc/PID/stat``, all threads) and
their ratio. Running both at the same time puts them under the same host: on a shared 2-core machine whose speed
drifts by a third within a minute (Session 34), two runs one after the other (``cpu_per_call.py``) compare the
host's moments as much as the code. The two servers share the 2 cores with each other and the generator, so the
absolute figures are higher than ``cpu_per_call.py``'s; the ratio is what this script is for. ``--store redis``
starts one throw-away ``redis-server`` per service and serves as a replica without the trainer, as
``cpu_per_call.py --store redis`` does. ``--with-outcomes`` follows each decision with its ReportOutcome (the
bench's realistic mix): the CPU per call is then per decision and its outcome. ``--batch-size N`` sends
RecommendBatch calls of N contexts instead (2 in flight per server): the CPU per call is then per decision.
Speed is printed, never asserted. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cpu_per_call  # noqa: E402  (loads the bench script as the module ``bench``)

bench, topology, workload = cpu_per_call.bench, cpu_per_call.topology, cpu_per_call.workload


async def measure_both(
    transport: str,
    servers: list[tuple[dict[str, int], int]],
    pool: list,
    duration_s: float,
    contexts: Any,
    with_outcomes: bool = False,
    batch_size: int = 0,
) -> list[tuple[float, float]]:
    """Per server ``(calls/s, server CPU µs per call)`` of one round, both driven at the same time (a call: one
    Recommend, and with ``with_outcomes`` its ReportOutcome too; with ``batch_size`` > 0 a decision of
    RecommendBatch calls of that many contexts, 2 in flight per server, as the bench's batch phase sends them)."""
    targets = [bench.Target(transport, ports, contexts) for ports, _ in servers]
    loads = [bench.Load(pool, seed) for seed in range(len(servers))]

    def phase(target: Any, load: Any, seconds: float) -> Any:
        if batch_size > 0:
            return bench.batch_loop(target, load, 2, seconds, batch_size)
        return bench.closed_loop(target, load, 8, seconds, with_outcomes)

    await asyncio.gather(*(phase(t, ld, 1.0) for t, ld in zip(targets, loads, strict=True)))
    before = [cpu_per_call.cpu_s(pid) for _, pid in servers]
    results = await asyncio.gather(*(phase(t, ld, duration_s) for t, ld in zip(targets, loads, strict=True)))
    after = [cpu_per_call.cpu_s(pid) for _, pid in servers]
    for t in targets:
        await t.close()
    out = []
    for r, b, a in zip(results, before, after, strict=True):
        rate = r["decisions_per_s"] if batch_size > 0 else r["rps"]
        calls = max(rate * duration_s, 1.0)
        out.append((rate, (a - b) / calls * 1e6))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-src", type=Path, required=True, help="the base checkout's service/src directory")
    p.add_argument("--store", default="memory://", help="memory:// (default) or redis (throw-away servers)")
    p.add_argument("--transport", choices=("grpc", "rest"), default="grpc")
    p.add_argument("--duration-s", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--with-outcomes", action="store_true", help="each decision followed by its ReportOutcome")
    p.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help="RecommendBatch calls of this many contexts instead of Recommend (CPU per decision; 0: Recommend)",
    )
    workload.add_history_arguments(p, variants=16)  # as the bench's
    workload.add_sections_argument(p)
    args = p.parse_args()
    if not (args.base_src / "edgepath" / "__init__.py").exists():
        p.error(f"--base-src {args.base_src}: no edgepath package there")
    contexts = bench.Contexts.from_args(args)
    pool = workload.situations(1000)
    procs: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="edgepath-cpu-ab-") as tmp_s:
        tmp = Path(tmp_s)
        try:
            servers = []
            for name, extra_env in (("base", {"PYTHONPATH": str(args.base_src.resolve())}), ("this", {})):
                store_url, serve_args = args.store, []
                if args.store == "redis":
                    (tmp / name).mkdir()
                    redis, store_url = topology.start_redis_server(tmp / name)
                    procs.append(redis)
                    serve_args.append("--no-trainer")
                env = {**cpu_per_call.SERVE_ENV, **extra_env}
                proc, ports = cpu_per_call.serve(tmp, name, store_url, serve_args, env)
                procs.append(proc)
                servers.append((ports, proc.pid))
            mix = "Recommend + its ReportOutcome" if args.with_outcomes else "Recommend"
            if args.batch_size > 0:
                mix = f"one decision of RecommendBatch calls of {args.batch_size} contexts"
            print(f"transport {args.transport}, store {args.store}, a call = {mix}; base = {args.base_src}, "
                  f"this = {HERE.parent}")  # fmt: skip
            print("round  base calls/s  base CPU µs/call  this calls/s  this CPU µs/call  this/base CPU")
            ratios = []
            for i in range(args.rounds):
                (b_rps, b_us), (t_rps, t_us) = asyncio.run(
                    measure_both(
                        args.transport, servers, pool, args.duration_s, contexts, args.with_outcomes, args.batch_size
                    )
                )
                ratio = t_us / b_us if b_us > 0 else math.nan  # no CPU tick counted (10 ms granularity): no ratio
                if not math.isnan(ratio):
                    ratios.append(ratio)
                print(f"{i + 1:5d}  {b_rps:12.0f}  {b_us:16.1f}  {t_rps:12.0f}  {t_us:16.1f}  {ratio:13.3f}")
            median = f"{statistics.median(ratios):.3f}" if ratios else "n/a (no round counted CPU time for the base)"
            print(f"median this/base CPU per call: {median}")
        finally:
            for proc in reversed(procs):
                bench.stop(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
