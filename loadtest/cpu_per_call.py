#!/usr/bin/env python3
"""Server CPU per call: the service against the echo of ``loadtest/bench``, under the same closed-loop load.

Usage::

    .venv/bin/python loadtest/cpu_per_call.py [--store memory://|redis|redis://HOST:PORT/DB] [--transport grpc|rest]
        [--duration-s 4] [--rounds 2] [--history-samples 20] [--history-variants 16]
        [--history-form columns|objects] [--floor]

Starts ``edgepath serve`` (rate limits lifted, as the bench does) and the bench's echo server, drives each with 16
in-flight Recommend calls, and prints per round the calls/s, the **server process's CPU µs per call** (user +
system time from ``/proc/PID/stat``, all its threads) and the generator's, then the server's CPU per call by
thread (``/proc/PID/task/TID/stat``): its event-loop (main) thread, its other Python threads (over gRPC: grpc.aio's
completion-queue poller) and its native threads (gRPC core's ``event_engine`` and timer threads, libuv's workers).
Unlike decisions/s, the CPU per call does not depend on how the 2 cores are shared between the generator and the
server, so it says how much more a decision costs than a bare call of the same framework (issue 16: what holds the
ratio). Contexts carry the agent's subflow histories as in the bench (``--history-samples 0``: radio readings only,
every run before 2026-11-26). Linux only (``/proc``).

``--floor`` adds a third server to every round, ``edgepath serve`` with its decision plane canned
(``loadtest/canned_plane.py``: each device's later calls get its first reply back at once; the request's decoding and
validation, authentication, rate limit, call observer and the reply's encoding run as served): what the service's
call costs when its decisions cost nothing, the part of the gap to the echo that no work in the plane can remove.

``--store redis`` starts a throw-away ``redis-server`` on loopback (``loadtest/topology.py``) and serves as a
replica of the chart's topology without the trainer (``--no-trainer``: the trainer is another process there); a
``redis://`` URL uses a server of yours (add ``--serve-arg=--no-trainer`` for the same replica).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.machinery
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
_loader = importlib.machinery.SourceFileLoader("bench", str(HERE / "bench"))
_spec = importlib.util.spec_from_loader("bench", _loader)
assert _spec is not None
bench = importlib.util.module_from_spec(_spec)
_loader.exec_module(bench)
import topology  # noqa: E402  (on sys.path through the bench module)
import workload  # noqa: E402

#: The served process's environment: rate limits lifted, as the bench does (a closed loop from one host would
#: otherwise meet the per-device limit), and a throw-away HMAC key.
SERVE_ENV = {
    "EDGEPATH_RATE_LIMIT_PER_S": "1000000",
    "EDGEPATH_RATE_LIMIT_BURST": "1000000",
    "EDGEPATH_OUTCOME_CAP_PER_WINDOW": "100000000",
    "EDGEPATH_HMAC_KEY": "bench-only-hmac-key-0123456789abcdef0123456789",
}


#: ``edgepath serve`` as installed, and through :mod:`canned_plane` (``--floor``: the plane answers canned replies).
EDGEPATH = (str(bench.VENV_BIN / "edgepath"),)
CANNED_PLANE = (sys.executable, str(HERE / "canned_plane.py"))


def serve(
    tmp: Path,
    name: str,
    store_url: str,
    serve_args: list[str],
    env: dict[str, str],
    command: tuple[str, ...] = EDGEPATH,
) -> tuple[Any, dict[str, int]]:
    """``<command> serve`` on loopback with ephemeral ports (ready file ``tmp/<name>.json``, log ``tmp/<name>.log``,
    ``env`` on top of this process's): its process and ports (``bench.start``)."""
    return bench.start(
        [*command, "serve", "--host", "127.0.0.1", "--grpc-port", "0", "--http-port", "0",
         "--ready-file", str(tmp / f"{name}.json"), "--log-level", "WARNING", "--store", store_url, *serve_args],
        tmp / f"{name}.json", tmp / f"{name}.log", env,
    )  # fmt: skip


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all threads), from /proc/PID/stat fields 14 and 15."""
    return _ticks(Path(f"/proc/{pid}/stat")) / os.sysconf("SC_CLK_TCK")


def _ticks(stat: Path) -> int:
    """User + system clock ticks of a ``stat`` file of /proc (fields 14 and 15, after the parenthesised name)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


#: :func:`thread_cpu_s`'s groups, in the order printed.
THREAD_GROUPS = ("event loop", "python threads", "native threads")


def thread_cpu_s(pid: int) -> dict[int, tuple[str, float]]:
    """CPU seconds per thread of process ``pid``: thread id → (group, seconds), a group of :data:`THREAD_GROUPS`:
    the main thread (``edgepath serve`` runs its event loop there), the threads Python started (named as the
    process: over gRPC, grpc.aio's poller), the others (named by their native library, e.g. gRPC core's
    ``event_engine``). A thread that ended between listing and reading is left out."""
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name, ticks = (task / "comm").read_text().strip(), _ticks(task / "stat")
        except OSError:
            continue
        tid = int(task.name)
        group = THREAD_GROUPS[0] if tid == pid else THREAD_GROUPS[1] if name == comm else THREAD_GROUPS[2]
        out[tid] = (group, ticks / os.sysconf("SC_CLK_TCK"))
    return out


def per_group_us(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], calls: float
) -> list[float]:
    """CPU µs per call of each of :data:`THREAD_GROUPS` between two :func:`thread_cpu_s` readings (a thread
    started in between counts from 0)."""
    totals = dict.fromkeys(THREAD_GROUPS, 0.0)
    for tid, (group, seconds) in after.items():
        totals[group] += seconds - before.get(tid, (group, 0.0))[1]
    return [totals[g] / calls * 1e6 for g in THREAD_GROUPS]


async def measure(
    transport: str, ports: dict[str, int], pid: int, pool: list, duration_s: float, contexts: Any
) -> tuple[float, ...]:
    target = bench.Target(transport, ports, contexts)
    load = bench.Load(pool, 1)
    await bench.closed_loop(target, load, 16, 1.0)  # warm-up
    server0, threads0, gen0 = cpu_s(pid), thread_cpu_s(pid), time.process_time()
    result = await bench.closed_loop(target, load, 16, duration_s)
    server1, threads1, gen1 = cpu_s(pid), thread_cpu_s(pid), time.process_time()
    await target.close()
    calls = result["rps"] * duration_s
    by_thread = per_group_us(threads0, threads1, calls)
    return result["rps"], (server1 - server0) / calls * 1e6, (gen1 - gen0) / calls * 1e6, *by_thread


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default="memory://", help="memory:// (default), redis (a throw-away server) or a URL")
    p.add_argument("--transport", choices=("grpc", "rest"), default="grpc")
    p.add_argument("--duration-s", type=float, default=4.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--serve-arg", action="append", default=[], help="extra `edgepath serve` argument (repeatable)")
    p.add_argument(
        "--floor",
        action="store_true",
        help="also measure the service with its plane canned (loadtest/canned_plane.py): the transport's floor",
    )
    workload.add_history_arguments(p, variants=16)  # as the bench's
    workload.add_sections_argument(p)
    args = p.parse_args()
    contexts = bench.Contexts.from_args(args)
    pool = workload.situations(1000)
    env = dict(SERVE_ENV)
    with tempfile.TemporaryDirectory(prefix="edgepath-cpu-") as tmp_s:
        tmp = Path(tmp_s)
        redis, store_url, serve_args = None, args.store, list(args.serve_arg)
        if args.store == "redis":
            redis, store_url = topology.start_redis_server(tmp)
            serve_args.append("--no-trainer")
        try:
            return run(args, contexts, pool, env, tmp, store_url, serve_args)
        finally:
            if redis is not None:
                bench.stop(redis)


def run(
    args: argparse.Namespace,
    contexts: Any,
    pool: list,
    env: dict[str, str],
    tmp: Path,
    store_url: str,
    serve_args: list[str],
) -> int:
    """Start the service, the echo and (``--floor``) the service with its plane canned, print the rounds (module
    docstring), stop them all."""
    started: list[Any] = []  # the processes to stop, whatever happens
    try:
        service, service_ports = serve(tmp, "service", store_url, serve_args, env)
        started.append(service)
        (tmp / "canned.json").write_text(
            json.dumps(asyncio.run(bench.capture_canned(service_ports, pool[0], contexts.sections)))
        )
        echo, echo_ports = bench.start(
            [sys.executable, str(HERE / "bench"), "--echo-server", "--ready-file", str(tmp / "echo.json"),
             "--canned", str(tmp / "canned.json")],
            tmp / "echo.json", tmp / "echo.log", {},
        )  # fmt: skip
        started.append(echo)
        servers = [("echo", echo, echo_ports), ("service", service, service_ports)]
        if args.floor:  # on Redis the same throw-away server as the service's (measured one at a time)
            floor, floor_ports = serve(tmp, "floor", store_url, serve_args, env, CANNED_PLANE)
            started.append(floor)
            servers.append(("floor", floor, floor_ports))
        print(
            "server   calls/s  server CPU µs/call  generator CPU µs/call  of the server's: " + "  ".join(THREAD_GROUPS)
        )
        for _ in range(args.rounds):
            for name, proc, ports in servers:
                rps, server_us, gen_us, *by_thread = asyncio.run(
                    measure(args.transport, ports, proc.pid, pool, args.duration_s, contexts)
                )
                split = "  ".join(f"{us:{len(g)}.1f}" for us, g in zip(by_thread, THREAD_GROUPS, strict=True))
                print(f"{name:8s} {rps:8.0f}  {server_us:18.1f}  {gen_us:21.1f}  {' ' * 16}{split}", flush=True)
    finally:
        for proc in reversed(started):
            bench.stop(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
