#!/usr/bin/env python3
"""What a gateway's RecommendBatch calls cost the other calls on the serving loop (issue 16, items 5 and 6).

Usage::

    loadtest/batch_interference.py [--rate 200] [--batch-rate 15] [--batch-size 64] [--duration-s 5]
        [--rounds 3] [--history-samples 20] [--batch-path models|grpc] [--report out/batch-interference.json]

A CPE router batching its clients' contexts and the agents calling one by one share one serving loop: while a batch
is decided nothing else on that loop runs, so a unary call that arrives meanwhile waits for it. ``loadtest/bench``
measures the batch's decisions/s and the unary p99 in separate phases; this script measures them together, without
transports or a load generator, as ``training_interference.py`` does for the trainer. What runs, in this process
on one event loop, as ``edgepath serve --store memory`` wires it: its event loop (uvloop unless
``EDGEPATH_EVENT_LOOP=asyncio``), ``Service.build`` (in-process store, serving model, decision plane with its engine
adapters; the trainer not started) and ``tune_serving_process``.

- **Unary calls**: an open loop starts ``--rate`` ``DecisionPlane.recommend`` calls per second on real paired
  contexts (``loadtest/workload.py``) with ``--history-samples`` emulated samples per interface (what the agent
  sends), validated beforehand. A call's latency runs from its scheduled start to its reply, so time the loop spends
  elsewhere counts, and so does the open loop's own lateness in starting it (uvloop's timers tick in whole ms: ~1.6
  ms at the median on the 2-core host of Session 37, most of the ``alone`` phase's p50).
- **Batch calls**: a second open loop starts ``--batch-rate`` batch calls per second of ``--batch-size`` such
  contexts each. ``--batch-path models`` (the default): each validates a ``RecommendBatchRequest`` from plain values
  (the models both transports validate after decoding) and calls ``DecisionPlane.recommend_batch`` on it, transport
  decode and encode not included. ``--batch-path grpc``: each is the gRPC servicer's ``RecommendBatch`` on the
  request's wire bytes (``FromString``, proto → models, the plane, the reply's proto; authentication off and a
  stand-in for the call's context, no socket), what a gRPC batch costs the serving loop. Both loads stay below the
  loop's capacity (a closed loop of batches would measure a backlog, which admission control sheds in the service).

Per round, two phases of ``--duration-s`` each, in alternating order (a shared host's speed drifts): ``alone`` (the
unary calls only) and ``beside_batches`` (the same unary calls and the batch calls). The report gives each phase's
unary p50 / p99 / max (ms, over all rounds and per round), the p99 ratio of ``beside_batches`` to ``alone``, and
the batch calls' decisions/s, p50 and max (ms, from scheduled start to reply). Speed is printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
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

from training_interference import open_loop, summary, write_report  # noqa: E402  (loadtest/, on the path above)

DEVICE = "gateway-1"


class StandInContext:
    """Stands in for ``grpc.aio.ServicerContext`` in a direct servicer call (no socket, no metadata)."""

    def invocation_metadata(self) -> tuple[()]:
        return ()

    async def abort(self, code: Any, details: str = "", trailing_metadata: Any = ()) -> None:
        raise RuntimeError(f"aborted: {code} {details}")

    async def abort_with_status(self, status: Any) -> None:
        raise RuntimeError(f"aborted: {status}")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import workload
    from edgepath import types as ep_types
    from edgepath.main import Service, tune_serving_process
    from edgepath.settings import Settings

    settings = Settings(
        host="127.0.0.1", rate_limit_per_s=1e9, rate_limit_burst=1_000_000_000, outcome_cap_per_window=1_000_000_000
    )
    service = Service.build(settings)
    plane = service.plane
    pool = workload.situations(1000)
    hist = args.history_samples
    # every call a context of its own (history variant v of its situation): no answer cached per context serves it
    unary = [
        ep_types.RecommendRequest.model_validate(workload.recommend_body(s, DEVICE, hist, v))
        for v in range(2)
        for s in pool
    ]
    size = args.batch_size
    batch_bodies = [
        {"requests": [workload.recommend_body(pool[(b * size + j) % len(pool)], DEVICE, hist, 2) for j in range(size)]}
        for b in range(16)
    ]
    principal = ep_types.Principal(device_id=DEVICE)
    if args.batch_path == "grpc":
        from edgepath.grpc.server import PathServicer
        from edgepath.wire import edgepath_pb2 as pb

        servicer = PathServicer(plane)  # authentication off, as the models path
        batch_wires = [
            pb.RecommendBatchRequest(
                requests=[
                    workload.recommend_proto(pb, pool[(b * size + j) % len(pool)], DEVICE, hist, 2, form="columns")
                    for j in range(size)
                ]
            ).SerializeToString()
            for b in range(16)
        ]
    tune_serving_process(settings)
    unary_calls, batch_calls_made = itertools.count(), itertools.count()  # each open loop walks its own contexts

    async def one(start: float, latencies: list[float]) -> None:
        await plane.recommend(principal, unary[next(unary_calls) % len(unary)])
        latencies.append(time.perf_counter() - start)

    async def one_batch(start: float, latencies: list[float]) -> None:
        k = next(batch_calls_made) % len(batch_bodies)
        if args.batch_path == "grpc":
            await servicer.RecommendBatch(pb.RecommendBatchRequest.FromString(batch_wires[k]), StandInContext())
        else:
            body = ep_types.RecommendBatchRequest.model_validate(batch_bodies[k])
            await plane.recommend_batch([(principal, r) for r in body.requests])
        latencies.append(time.perf_counter() - start)

    def until(t: float) -> bool:
        return t >= args.duration_s

    phases: dict[str, list[np.ndarray]] = {"alone": [], "beside_batches": []}
    batch_calls: list[np.ndarray] = []

    async def alone() -> np.ndarray:
        return await open_loop(one, args.rate, until)

    async def beside_batches() -> np.ndarray:
        latencies, batches = await asyncio.gather(
            open_loop(one, args.rate, until), open_loop(one_batch, args.batch_rate, until)
        )
        batch_calls.append(batches)
        return latencies

    await open_loop(one, args.rate, lambda t: t >= 1.0)  # warm-up: first calls, caches
    for r in range(args.rounds):
        order = ("alone", "beside_batches") if r % 2 == 0 else ("beside_batches", "alone")
        for name in order:
            phases[name].append(await (alone() if name == "alone" else beside_batches()))
        print(
            f"round {r + 1}: unary p99 alone {np.percentile(phases['alone'][-1], 99):.2f} ms, beside batches "
            f"{np.percentile(phases['beside_batches'][-1], 99):.2f} ms",
            flush=True,
        )
    await (service.backend or service.store).close()
    report: dict[str, Any] = {name: summary(values) for name, values in phases.items()}
    report["beside_batches"]["p99_vs_alone"] = report["beside_batches"]["p99_ms"] / report["alone"]["p99_ms"]
    batches = np.concatenate(batch_calls)
    report["batches"] = {
        "rate_per_s": args.batch_rate,
        "batch_size": size,
        "path": args.batch_path,
        "calls": int(batches.size),
        "decisions_per_s": batches.size * size / (args.rounds * args.duration_s),
        "call_p50_ms": float(np.percentile(batches, 50)),
        "call_max_ms": float(batches.max()),
    }
    report.update(
        {
            "rate_per_s": args.rate,
            "duration_s": args.duration_s,
            "history_samples": hist,
            "policy": plane.registry.current.model.policy_name,
            "event_loop": type(asyncio.get_running_loop()).__module__,
            "cores": os.cpu_count(),
            "load_average": os.getloadavg(),
        }
    )
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=200.0, help="Unary Recommend calls per second")
    p.add_argument("--batch-rate", type=float, default=15.0, help="RecommendBatch calls per second")
    p.add_argument("--batch-size", type=int, default=64, help="Contexts per RecommendBatch call")
    p.add_argument("--duration-s", type=float, default=5.0, help="Seconds of each phase")
    p.add_argument("--rounds", type=int, default=3, help="Rounds of (alone, beside_batches)")
    p.add_argument(
        "--history-samples", type=int, default=20, help="RTT and throughput samples per interface in each context"
    )
    p.add_argument(
        "--batch-path",
        choices=("models", "grpc"),
        default="models",
        help="A batch call: validation from plain values + the plane (models), or the gRPC servicer on wire bytes",
    )
    p.add_argument("--report", type=Path, help="Write the JSON report here")
    args = p.parse_args()
    from edgepath.main import run_event_loop

    report = run_event_loop(run(args))
    for name in ("alone", "beside_batches"):
        r = report[name]
        ratio = f" ({r['p99_vs_alone']:.2f}x alone)" if "p99_vs_alone" in r else ""
        print(f"{name:14s} p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms{ratio}  max {r['max_ms']:.1f} ms")
    b = report["batches"]
    print(
        f"batches: {b['rate_per_s']:g}/s of {b['batch_size']} contexts ({b['decisions_per_s']:.0f} decisions/s), "
        f"a call's p50 {b['call_p50_ms']:.1f} ms, max {b['call_max_ms']:.1f} ms"
    )
    write_report(report, args.report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
