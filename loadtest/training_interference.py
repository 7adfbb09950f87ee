#!/usr/bin/env python3
"""What the online trainer costs the serving loop, without transports or a load generator (issue 16, item 3).

Usage::

    loadtest/training_interference.py [--rate 800] [--duration-s 5] [--rounds 4] [--report out/interference.json]

``loadtest/bench`` measures "p99 while training" end to end, with the generator on the same two cores; there the
idle p99 itself moves between 2 and 40 ms from run to run, which hides an effect of a few ms. This script isolates
the serving side. What runs, in this process on one event loop, as ``edgepath serve --store memory`` wires it:
``Service.build`` (in-process store, serving model, decision plane with its engine adapters, outcome guard,
online trainer whose refits run in the ``SCHED_IDLE`` refit process) and ``tune_serving_process`` (frozen
startup heap, the GIL switch interval of the settings). An open loop starts ``--rate`` Recommend calls per
second on real paired contexts (``loadtest/workload.py``), each followed by its outcome (the chosen arm's
measured bandwidth), through ``DecisionPlane.recommend`` / ``report_outcome``: what both transports call.
The latency of a call is from its scheduled start to its reply, so time the loop spends elsewhere counts.

Per round, three phases of the same load:

1. ``paused``: the trainer is stopped; outcomes queue in the store (``rate × duration`` of them);
2. ``catch_up``: the trainer starts and works through that backlog (at most ``catch_up_batches`` batches per
   publication) while decisions go on; the phase ends when the backlog is trained on and published;
3. ``training``: steady state, a refit and a publication every 50 outcomes as they arrive.

The report gives each condition's p50 / p99 / max over all rounds (and per round) and the ratios to ``paused``.
Speed is printed, never asserted; the load average is printed with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

_VENV_PYTHON = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
if _VENV_PYTHON.exists() and Path(sys.prefix).resolve() != _VENV_PYTHON.parent.parent.resolve():
    os.execv(str(_VENV_PYTHON), [str(_VENV_PYTHON), *sys.argv])  # run inside the project's venv

import numpy as np  # noqa: E402  (after the re-exec into the venv above)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def summary(latencies_ms: list[np.ndarray]) -> dict[str, Any]:
    """p50 / p99 / max (ms) over every round's calls, and each round's p99."""
    pooled = np.concatenate(latencies_ms) if latencies_ms else np.zeros(1)
    return {
        "calls": int(pooled.size),
        "p50_ms": float(np.percentile(pooled, 50)),
        "p99_ms": float(np.percentile(pooled, 99)),
        "max_ms": float(pooled.max()),
        "p99_ms_per_round": [float(np.percentile(r, 99)) for r in latencies_ms],
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import workload
    from edgepath import types as ep_types
    from edgepath.main import Service, tune_serving_process
    from edgepath.settings import Settings

    settings = Settings(
        host="127.0.0.1",
        rate_limit_per_s=1e9,
        rate_limit_burst=1_000_000_000,
        outcome_cap_per_window=1_000_000_000,
    )
    service = Service.build(settings)
    plane, trainer = service.plane, service.trainer
    assert trainer is not None  # the in-process store trains in this process
    pool = workload.situations(1000)
    requests = [ep_types.RecommendRequest.model_validate(workload.recommend_body(s, "bench-1")) for s in pool]
    principal = ep_types.Principal(device_id="bench-1")
    tune_serving_process(settings)
    counter = 0

    async def one(start: float, latencies: list[float]) -> None:
        nonlocal counter
        counter += 1
        i = counter % len(pool)
        rec = await plane.recommend(principal, requests[i])
        body = workload.outcome_body(pool[i], "bench-1", rec.model_dump(mode="json"))
        await plane.report_outcome(principal, ep_types.OutcomeReport.model_validate(body))
        latencies.append(time.perf_counter() - start)

    async def open_loop(until: Any) -> np.ndarray:
        """Calls at ``args.rate`` per second until ``until()`` is true; their latencies in ms."""
        latencies: list[float] = []
        tasks: list[asyncio.Task[None]] = []
        t0 = time.perf_counter()
        i = 0
        while not until(time.perf_counter() - t0):
            start = t0 + i / args.rate
            delay = start - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)  # the open loop's arrival schedule
            tasks.append(asyncio.create_task(one(start, latencies)))
            i += 1
        await asyncio.gather(*tasks)
        return np.asarray(latencies) * 1e3

    def backlog() -> int:
        return len(service.store._undelivered)  # type: ignore[attr-defined]  # MemoryStore's queue

    phases: dict[str, list[np.ndarray]] = {"paused": [], "catch_up": [], "training": []}
    rounds: list[dict[str, Any]] = []
    await open_loop(lambda t: t >= 1.0)  # warm-up: first calls, caches, the refit process
    trainer.start()
    for r in range(args.rounds):
        await trainer.stop()
        phases["paused"].append(await open_loop(lambda t: t >= args.duration_s))
        queued, v0, used = backlog(), plane.registry.current.version, trainer.outcomes_used
        trainer.start()
        c0 = time.perf_counter()
        # until the backlog is trained on and published (less than a batch of it may wait for the next outcomes)
        caught_up = used + queued - trainer.batch_size
        phases["catch_up"].append(
            await open_loop(lambda t, target=caught_up: t >= 0.05 and trainer.outcomes_used >= target)
        )
        catch_up_s = time.perf_counter() - c0
        v1 = plane.registry.current.version
        phases["training"].append(await open_loop(lambda t: t >= args.duration_s))
        rounds.append(
            {
                "backlog": queued,
                "catch_up_s": catch_up_s,
                "versions_in_catch_up": v1 - v0,
                "versions_while_training": plane.registry.current.version - v1,
            }
        )
        print(
            f"round {r + 1}: p99 paused {np.percentile(phases['paused'][-1], 99):.2f} ms, catch-up of {queued} "
            f"outcomes {catch_up_s:.2f} s p99 {np.percentile(phases['catch_up'][-1], 99):.2f} ms, training "
            f"{np.percentile(phases['training'][-1], 99):.2f} ms",
            flush=True,
        )
    await trainer.stop()
    if trainer.refitter is not None and hasattr(trainer.refitter, "close"):
        trainer.refitter.close()
    report: dict[str, Any] = {name: summary(values) for name, values in phases.items()}
    for name in ("catch_up", "training"):
        report[name]["p99_vs_paused"] = report[name]["p99_ms"] / report["paused"]["p99_ms"]
    report.update(
        {
            "rate_per_s": args.rate,
            "duration_s": args.duration_s,
            "rounds": rounds,
            "policy": plane.registry.current.model.policy_name,
            "cores": os.cpu_count(),
            "load_average": os.getloadavg(),
        }
    )
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=800.0, help="Recommend calls (each with its outcome) per second")
    p.add_argument("--duration-s", type=float, default=5.0, help="Seconds of the paused and training phases")
    p.add_argument("--rounds", type=int, default=4, help="Rounds of (paused, catch-up, training)")
    p.add_argument("--report", type=Path, help="Write the JSON report here")
    args = p.parse_args()
    report = asyncio.run(run(args))
    for name in ("paused", "catch_up", "training"):
        r = report[name]
        ratio = f" ({r['p99_vs_paused']:.2f}x paused)" if "p99_vs_paused" in r else ""
        print(f"{name:9s} p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms{ratio}  max {r['max_ms']:.1f} ms")
    print(f"load average {report['load_average']}, {report['cores']} cores")
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
