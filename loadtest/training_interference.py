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

The report gives each condition's p50 / p99 / max over all rounds (and per round) and the ratios to ``paused``,
and the CPU time each call cost, in µs: this serving process (all its threads) and its child processes (psutil;
the refit process, and for ``--store redis`` the redis-server and trainer it started).
Speed is printed, never asserted; the load average is printed with it.

``--store redis`` measures the chart's topology the same way: a ``redis-server`` on loopback, this process as a
replica with ``--no-trainer`` (its decisions and outcomes go to Redis; its snapshot follower hot-swaps the
published models) and a separate ``edgepath train`` process. ``paused`` is that trainer stopped (SIGSTOP);
``catch_up`` ends when the backlog has been delivered to the trainer (the group's ``lag`` below a batch) and the
next version has reached this replica (at most 30 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_VENV_PYTHON = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
if _VENV_PYTHON.exists() and Path(sys.prefix).resolve() != _VENV_PYTHON.parent.parent.resolve():
    os.execv(str(_VENV_PYTHON), [str(_VENV_PYTHON), *sys.argv])  # run inside the project's venv

import numpy as np  # noqa: E402  (after the re-exec into the venv above)
import psutil  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from topology import start_redis_server, start_trainer  # noqa: E402  (loadtest/, on the path above)

HMAC_KEY = "interference-only-hmac-key-0123456789abcdef0123"
OUTCOME_STREAM = "edgepath:outcomes"  # the Redis store's outcome stream (default namespace)


class RedisTopology:
    """A ``redis-server`` on a free loopback port and an ``edgepath train`` process on it; ``start``/``stop`` resume
    and pause the trainer (SIGCONT/SIGSTOP), as the bench does."""

    def __init__(self) -> None:
        import redis
        from tenacity import Retrying, stop_after_delay, wait_fixed

        self.batch_size = 50
        self._tmp = tempfile.mkdtemp(prefix="edgepath-interference-")
        self._redis_proc, self.url = start_redis_server(Path(self._tmp))
        self.client = redis.Redis.from_url(self.url)
        self.trainer_log = Path(self._tmp) / "trainer.log"
        self._trainer = start_trainer(self.url, self.trainer_log, {"EDGEPATH_HMAC_KEY": HMAC_KEY})
        for attempt in Retrying(stop=stop_after_delay(120), wait=wait_fixed(0.1), reraise=True):
            with attempt:  # the trainer is up: its consumer group reads the outcome stream
                assert self._consumers() >= 1, f"edgepath train not reading yet (log: {self.trainer_log})"

    def _consumers(self) -> int:
        import redis

        try:
            return sum(int(g.get("consumers") or 0) for g in self.client.xinfo_groups(OUTCOME_STREAM))
        except redis.ResponseError:  # no stream yet
            return 0

    def start(self) -> None:
        self._trainer.send_signal(signal.SIGCONT)

    async def stop(self) -> None:
        self._trainer.send_signal(signal.SIGSTOP)

    def backlog(self) -> int:
        """Outcomes in the Redis streams not yet delivered to the trainer's group (XINFO GROUPS ``lag``)."""
        return sum(int(g.get("lag") or 0) for g in self.client.xinfo_groups(OUTCOME_STREAM))

    def close(self) -> None:
        self._trainer.send_signal(signal.SIGCONT)
        for proc in (self._trainer, self._redis_proc):
            proc.terminate()
            proc.wait(timeout=30)
        if self._trainer.returncode not in (0, -signal.SIGTERM):
            print(self.trainer_log.read_text()[-3000:], file=sys.stderr)
        shutil.rmtree(self._tmp, ignore_errors=True)


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


async def open_loop(call: Any, rate: float, until: Any) -> np.ndarray:
    """An open loop: ``call(start, latencies)`` started as a task ``rate`` times per second, each at its scheduled
    time ``start`` (``time.perf_counter()`` s), until ``until(t)`` is true for the next call's scheduled offset ``t``
    (s from the loop's start); then waits for every call. ``call`` appends its latency (s from ``start``: time the
    event loop spends elsewhere counts). Returns the latencies in ms, shape (calls,)."""
    latencies: list[float] = []
    tasks: list[asyncio.Task[None]] = []
    t0 = time.perf_counter()
    i = 0
    while not until(i / rate):
        start = t0 + i / rate
        delay = start - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)  # the open loop's arrival schedule
        tasks.append(asyncio.create_task(call(start, latencies)))
        i += 1
    await asyncio.gather(*tasks)
    return np.asarray(latencies) * 1e3


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import workload
    from edgepath import types as ep_types
    from edgepath.main import Service, tune_serving_process
    from edgepath.settings import Settings

    topology = RedisTopology() if args.store == "redis" else None
    settings = Settings(
        host="127.0.0.1",
        rate_limit_per_s=1e9,
        rate_limit_burst=1_000_000_000,
        outcome_cap_per_window=1_000_000_000,
        **({} if topology is None else {"store_url": topology.url, "trainer": False, "hmac_key": HMAC_KEY}),
    )
    service = Service.build(settings)
    plane = service.plane
    trainer: Any = service.trainer if topology is None else topology
    if service.follower is not None:
        service.follower.start()
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

    def backlog() -> int:
        if topology is not None:
            return topology.backlog()
        return len(service.store._undelivered)  # type: ignore[attr-defined]  # MemoryStore's queue

    def caught_up_when(used: int, queued: int) -> Any:
        """The end of the catch-up phase: the backlog trained on and published (memory: counted by the trainer;
        Redis: delivered to the trainer, then the next version loaded here; at most 30 s)."""
        if topology is None:
            target = used + queued - trainer.batch_size
            return lambda t: t >= 0.05 and trainer.outcomes_used >= target
        assert topology is not None
        state: dict[str, Any] = {"checked": -1.0, "delivered_at": None, "version": None}

        def done(t: float) -> bool:
            if t >= 30.0:
                return True
            if state["delivered_at"] is None:
                if t - state["checked"] < 0.05:  # a synchronous Redis call: at most 20 per second in the loop
                    return False
                state["checked"] = t
                if topology.backlog() < topology.batch_size:  # all delivered to the trainer
                    state["delivered_at"], state["version"] = t, plane.registry.current.version
                return False
            # ... and the refit of the last of it published and loaded here (or 2 s)
            return plane.registry.current.version != state["version"] or t - state["delivered_at"] >= 2.0

        return done

    me = psutil.Process()

    def cpu_s() -> np.ndarray:
        """CPU seconds (user + system) so far: ``[this serving process (all threads), its child processes]``
        (the refit process; for ``--store redis`` also redis-server and ``edgepath train``)."""
        own = me.cpu_times()
        children = 0.0
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                t = child.cpu_times()
                children += t.user + t.system
        return np.array([own.user + own.system, children])

    phases: dict[str, list[np.ndarray]] = {"paused": [], "catch_up": [], "training": []}
    cpu: dict[str, np.ndarray] = {name: np.zeros(2) for name in phases}
    rounds: list[dict[str, Any]] = []

    async def timed(name: str, until: Any) -> None:
        """One phase of the open loop: its latencies, and the CPU seconds spent meanwhile added to ``cpu``."""
        c0 = cpu_s()
        phases[name].append(await open_loop(one, args.rate, until))
        cpu[name] += cpu_s() - c0

    await open_loop(one, args.rate, lambda t: t >= 1.0)  # warm-up: first calls, caches, the refit process
    trainer.start()
    # ... until a refit is published, so that every phase serves a fitted model: a fresh model decides by a uniform
    # draw (~100 µs per call cheaper), and round 1's paused phase measured that, not the absence of training
    v_warm = plane.registry.current.version
    await open_loop(one, args.rate, lambda t: plane.registry.current.version > v_warm or t >= 30.0)
    for r in range(args.rounds):
        await trainer.stop()
        await timed("paused", lambda t: t >= args.duration_s)
        queued, v0 = backlog(), plane.registry.current.version
        until = caught_up_when(getattr(trainer, "outcomes_used", 0), queued)
        trainer.start()
        c0 = time.perf_counter()
        await timed("catch_up", until)
        catch_up_s = time.perf_counter() - c0
        v1 = plane.registry.current.version
        await timed("training", lambda t: t >= args.duration_s)
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
    if getattr(trainer, "refitter", None) is not None and hasattr(trainer.refitter, "close"):
        trainer.refitter.close()
    if service.follower is not None:
        await service.follower.stop()
    await (service.backend or service.store).close()
    if topology is not None:
        topology.close()
    report: dict[str, Any] = {name: summary(values) for name, values in phases.items()}
    for name, values in phases.items():
        calls = sum(len(v) for v in values)
        report[name]["serving_cpu_us_per_call"] = float(cpu[name][0] / calls * 1e6)
        report[name]["children_cpu_us_per_call"] = float(cpu[name][1] / calls * 1e6)
    for name in ("catch_up", "training"):
        report[name]["p99_vs_paused"] = report[name]["p99_ms"] / report["paused"]["p99_ms"]
    report.update(
        {
            "rate_per_s": args.rate,
            "duration_s": args.duration_s,
            "rounds": rounds,
            "store": args.store,
            "policy": plane.registry.current.model.policy_name,
            "cores": os.cpu_count(),
            "load_average": os.getloadavg(),
        }
    )
    return report


def write_report(report: dict[str, Any], path: Path | None) -> None:
    """Print the host's load average and core count from ``report``; write ``report`` as JSON to ``path`` if given."""
    print(f"load average {report['load_average']}, {report['cores']} cores")
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=800.0, help="Recommend calls (each with its outcome) per second")
    p.add_argument("--duration-s", type=float, default=5.0, help="Seconds of the paused and training phases")
    p.add_argument("--rounds", type=int, default=4, help="Rounds of (paused, catch-up, training)")
    p.add_argument("--store", choices=("memory", "redis"), default="memory", help="memory (default) or redis")
    p.add_argument("--report", type=Path, help="Write the JSON report here")
    args = p.parse_args()
    report = asyncio.run(run(args))
    for name in ("paused", "catch_up", "training"):
        r = report[name]
        ratio = f" ({r['p99_vs_paused']:.2f}x paused)" if "p99_vs_paused" in r else ""
        print(
            f"{name:9s} p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms{ratio}  max {r['max_ms']:.1f} ms  CPU per "
            f"call: serving {r['serving_cpu_us_per_call']:.0f} us, children {r['children_cpu_us_per_call']:.0f} us"
        )
    write_report(report, args.report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
