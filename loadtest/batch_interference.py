#!/usr/bin/env python3
"""What a gateway's RecommendBatch calls cost the other calls on the serving loop (issue 16, items 5 and 6).

Usage::

    loadtest/batch_interference.py [--rate 200] [--batch-rate 15] [--batch-size 64] [--duration-s 5]
        [--rounds 3] [--history-samples 20] [--batch-path models|grpc] [--over process|grpc]
        [--store memory|redis] [--batch-replica same|separate] [--report out/batch-interference.json]

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

``--over grpc`` measures the same two loads against a real server instead: ``edgepath serve --store memory`` (rate
limits lifted) on loopback with ephemeral ports, pinned to core 0 when the host has more than one (its event loop
alone on a core); the unary calls come from this process (grpc.aio, ``--rate`` per second, 2,000 contexts of 1,000
devices in turn) and the batch calls (``RecommendBatch`` of ``--batch-size`` contexts, each item a device of its own,
``--batch-rate`` per second) from a second process of this script, started once and running the batch open loop of
each ``beside_batches`` phase; both generators on the other cores. A call's latency runs
from its scheduled start to its reply; calls that fail are counted per status code (``errors``), not timed. What
this adds to the in-process measurement: gRPC's own steps on the serving loop (grpc.aio takes one new call per
wake-up of the loop) and two processes' worth of contention on the generators' side. ``--store redis`` serves the
chart's shared store instead (a ``redis-server`` on loopback this script starts, on the generators' cores), and
``--batch-replica separate`` sends the batch calls to a second ``edgepath serve`` on that store, on the generators'
cores too: gateways on replicas of their own, the unary calls' replica never running a batch.

Per round, two phases of ``--duration-s`` each, in alternating order (a shared host's speed drifts): ``alone`` (the
unary calls only) and ``beside_batches`` (the same unary calls and the batch calls). The report gives each phase's
unary p50 / p99 / max (ms, over all rounds and per round), the p99 ratio of ``beside_batches`` to ``alone``, and
the batch calls' decisions/s, p50 and max (ms, from scheduled start to reply). Speed is printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

_VENV_PYTHON = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
if _VENV_PYTHON.exists() and Path(sys.prefix).resolve() != _VENV_PYTHON.parent.parent.resolve():
    os.execv(str(_VENV_PYTHON), [str(_VENV_PYTHON), *sys.argv])  # run inside the project's venv

import numpy as np  # noqa: E402  (after the re-exec into the venv above)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from breakdown import FakeContext  # noqa: E402  (loadtest/, on the path above)
from training_interference import open_loop, summary, write_report  # noqa: E402

DEVICE = "gateway-1"


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
        batch_wires = [m.SerializeToString() for m in batch_messages(pb, pool, size, hist, DEVICE)]
    tune_serving_process(settings)
    unary_calls, batch_calls_made = itertools.count(), itertools.count()  # each open loop walks its own contexts

    async def one(start: float, latencies: list[float]) -> None:
        await plane.recommend(principal, unary[next(unary_calls) % len(unary)])
        latencies.append(time.perf_counter() - start)

    async def one_batch(start: float, latencies: list[float]) -> None:
        k = next(batch_calls_made) % len(batch_bodies)
        if args.batch_path == "grpc":
            await servicer.RecommendBatch(pb.RecommendBatchRequest.FromString(batch_wires[k]), FakeContext())
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
    report = phase_report(args, phases, batch_calls)
    report["policy"] = plane.registry.current.model.policy_name
    return report


def phase_report(
    args: argparse.Namespace, phases: dict[str, list[np.ndarray]], batch_calls: list[np.ndarray]
) -> dict[str, Any]:
    """The report of both phases (unary latencies per round, ms) and the batch calls (latencies per phase, ms)."""
    report: dict[str, Any] = {name: summary(values) for name, values in phases.items()}
    report["beside_batches"]["p99_vs_alone"] = report["beside_batches"]["p99_ms"] / report["alone"]["p99_ms"]
    batches = np.concatenate(batch_calls)
    report["batches"] = {
        "rate_per_s": args.batch_rate,
        "batch_size": args.batch_size,
        "path": "grpc" if args.over == "grpc" else args.batch_path,
        "calls": int(batches.size),
        "decisions_per_s": batches.size * args.batch_size / (args.rounds * args.duration_s),
        "call_p50_ms": float(np.percentile(batches, 50)),
        "call_max_ms": float(batches.max()),
    }
    report.update(
        {
            "rate_per_s": args.rate,
            "duration_s": args.duration_s,
            "history_samples": args.history_samples,
            "event_loop": type(asyncio.get_running_loop()).__module__,
            "cores": os.cpu_count(),
            "load_average": os.getloadavg(),
        }
    )
    return report


async def grpc_open_loop(
    stub_call: Any, messages: list[Any], rate: float, duration_s: float, errors: Counter[str]
) -> np.ndarray:
    """An open loop of ``stub_call(message)`` (messages in turn) at ``rate`` per second for ``duration_s``: latencies
    (ms) of the answered calls; each failed call's status code counted in ``errors``."""
    import grpc

    sent = itertools.count()

    async def one(start: float, latencies: list[float]) -> None:
        try:
            await stub_call(messages[next(sent) % len(messages)])
        except grpc.aio.AioRpcError as exc:
            errors[exc.code().name] += 1
        else:
            latencies.append(time.perf_counter() - start)

    return await open_loop(one, rate, lambda t: t >= duration_s)


def batch_messages(pb: Any, pool: Any, size: int, hist: int, device_id: str | None = None) -> list[Any]:
    """16 ``RecommendBatchRequest`` messages of ``size`` contexts each (situations of ``pool`` in turn, ``hist``
    samples per interface, history variant 2); every item from ``device_id``, or (None) a device of its own."""
    import workload

    return [
        pb.RecommendBatchRequest(
            requests=[
                workload.recommend_proto(pb, pool[(b * size + j) % len(pool)], device_id or f"client-{b}-{j}", hist, 2)
                for j in range(size)
            ]
        )
        for b in range(16)
    ]


async def batch_generator(args: argparse.Namespace) -> None:
    """The batch calls of ``--over grpc`` (this script's second process): one warm-up call and ``ready`` on stdout;
    then for each line from stdin (one ``beside_batches`` phase) the open loop, its latencies (ms) and errors as a
    JSON line; ends when stdin does."""
    import grpc
    import workload
    from edgepath.wire import edgepath_pb2 as pb
    from edgepath.wire import edgepath_pb2_grpc as pb_grpc

    messages = batch_messages(pb, workload.situations(1000), args.batch_size, args.history_samples)
    loop = asyncio.get_running_loop()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{args.batch_generator}") as channel:
        stub = pb_grpc.PathServiceStub(channel)
        await stub.RecommendBatch(messages[0])
        print("ready", flush=True)
        while await loop.run_in_executor(None, sys.stdin.readline):
            errors: Counter[str] = Counter()
            latencies = await grpc_open_loop(stub.RecommendBatch, messages, args.batch_rate, args.duration_s, errors)
            print(json.dumps({"latencies_ms": latencies.tolist(), "errors": dict(errors)}), flush=True)


async def run_over_grpc(args: argparse.Namespace) -> dict[str, Any]:
    """``--over grpc``: the two phases against ``edgepath serve`` (see the module docstring)."""
    import grpc
    import topology
    import workload
    from cpu_per_call import SERVE_ENV, bench, serve
    from edgepath.wire import edgepath_pb2 as pb
    from edgepath.wire import edgepath_pb2_grpc as pb_grpc

    cores = sorted(os.sched_getaffinity(0))
    server_cores, generator_cores = (cores[:1], cores[1:]) if len(cores) > 1 else (cores, cores)
    pool = workload.situations(1000)
    unary = [
        workload.recommend_proto(pb, pool[i % len(pool)], f"device-{i}", args.history_samples, v)
        for v in range(2)
        for i in range(len(pool))
    ]
    separate = args.batch_replica == "separate"
    store_name = "redis (a redis-server on loopback, on the generators' cores)" if args.store == "redis" else "memory"
    with tempfile.TemporaryDirectory() as tmp:
        started: list[Any] = []  # redis-server and the replicas, stopped last first
        generator: asyncio.subprocess.Process | None = None
        try:
            store_url = "memory://"
            if args.store == "redis":
                redis, store_url = topology.start_redis_server(Path(tmp))
                started.append(redis)
            proc, ports = serve(Path(tmp), "service", store_url, ["--no-trainer"], SERVE_ENV)
            started.append(proc)
            batch_ports = ports  # where the batch calls go: this replica, or (separate) a second one
            if separate:
                batch_proc, batch_ports = serve(Path(tmp), "batch-replica", store_url, ["--no-trainer"], SERVE_ENV)
                started.append(batch_proc)
            os.sched_setaffinity(proc.pid, server_cores)
            for other in started:  # redis-server and the gateways' replica: never on the unary replica's cores
                if other is not proc:
                    os.sched_setaffinity(other.pid, generator_cores)
            os.sched_setaffinity(0, generator_cores)
            errors: Counter[str] = Counter()
            batch_errors: Counter[str] = Counter()
            phases: dict[str, list[np.ndarray]] = {"alone": [], "beside_batches": []}
            batch_calls: list[np.ndarray] = []
            # started before this process opens a channel (no fork while gRPC's threads run), on the same cores
            generator = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--batch-generator", str(batch_ports["grpc_port"]),
                "--batch-rate", str(args.batch_rate), "--batch-size", str(args.batch_size),
                "--duration-s", str(args.duration_s), "--history-samples", str(args.history_samples),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert generator.stdin is not None and generator.stdout is not None
            if (await generator.stdout.readline()).strip() != b"ready":
                raise RuntimeError("the batch generator did not start")
            async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['grpc_port']}") as channel:
                stub = pb_grpc.PathServiceStub(channel)
                await grpc_open_loop(stub.Recommend, unary, args.rate, 1.0, Counter())  # warm-up

                async def beside_batches() -> np.ndarray:
                    assert generator is not None and generator.stdin is not None and generator.stdout is not None
                    generator.stdin.write(b"go\n")
                    await generator.stdin.drain()
                    latencies = await grpc_open_loop(stub.Recommend, unary, args.rate, args.duration_s, errors)
                    batches = json.loads(await generator.stdout.readline())
                    batch_calls.append(np.asarray(batches["latencies_ms"]))
                    batch_errors.update(batches["errors"])
                    return latencies

                for r in range(args.rounds):
                    order = ("alone", "beside_batches") if r % 2 == 0 else ("beside_batches", "alone")
                    for name in order:
                        phases[name].append(
                            await (
                                beside_batches()
                                if name == "beside_batches"
                                else grpc_open_loop(stub.Recommend, unary, args.rate, args.duration_s, errors)
                            )
                        )
                    print(
                        f"round {r + 1}: unary p99 alone {np.percentile(phases['alone'][-1], 99):.2f} ms, beside "
                        f"batches {np.percentile(phases['beside_batches'][-1], 99):.2f} ms",
                        flush=True,
                    )
            generator.stdin.close()
            await generator.wait()
        finally:
            if generator is not None and generator.returncode is None:
                generator.kill()
                await generator.wait()
            for started_proc in reversed(started):
                bench.stop(started_proc)
    report = phase_report(args, phases, batch_calls)
    report["over"] = {
        "server": f"edgepath serve --store {store_name} --no-trainer (gRPC on loopback)",
        "batch_replica": "a second edgepath serve on the same store, on the generators' cores"
        if separate
        else "the same server",
        "server_cores": server_cores,
        "generator_cores": generator_cores,
        "unary_errors": dict(errors),
        "batch_errors": dict(batch_errors),
    }
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
    p.add_argument(
        "--over",
        choices=("process", "grpc"),
        default="process",
        help="Where the calls go: the service in this process (process), or edgepath serve over gRPC (grpc)",
    )
    p.add_argument(
        "--store",
        choices=("memory", "redis"),
        default="memory",
        help="--over grpc: the served store, in-process (memory) or a redis-server on loopback this script starts",
    )
    p.add_argument(
        "--batch-replica",
        choices=("same", "separate"),
        default="same",
        help="--over grpc: the batch calls to the unary calls' server (same) or to a second replica on the same "
        "store (separate; needs --store redis)",
    )
    p.add_argument("--batch-generator", type=int, help=argparse.SUPPRESS)  # --over grpc's second process: the port
    p.add_argument("--report", type=Path, help="Write the JSON report here")
    args = p.parse_args()
    from edgepath.main import run_event_loop

    if args.batch_generator is not None:
        run_event_loop(batch_generator(args))
        return 0
    if args.batch_replica == "separate" and (args.over != "grpc" or args.store != "redis"):
        p.error("--batch-replica separate needs --over grpc --store redis (replicas share decisions through Redis)")
    if args.store == "redis" and args.over != "grpc":
        p.error("--store redis needs --over grpc")
    report = run_event_loop(run_over_grpc(args) if args.over == "grpc" else run(args))
    for name in ("alone", "beside_batches"):
        r = report[name]
        ratio = f" ({r['p99_vs_alone']:.2f}x alone)" if "p99_vs_alone" in r else ""
        print(f"{name:14s} p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms{ratio}  max {r['max_ms']:.1f} ms")
    b = report["batches"]
    print(
        f"batches: {b['rate_per_s']:g}/s of {b['batch_size']} contexts ({b['decisions_per_s']:.0f} decisions/s), "
        f"a call's p50 {b['call_p50_ms']:.1f} ms, max {b['call_max_ms']:.1f} ms"
    )
    if "over" in report:
        o = report["over"]
        print(f"errors: unary {o['unary_errors'] or 'none'}, batch {o['batch_errors'] or 'none'}")
    write_report(report, args.report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
