#!/usr/bin/env python3
"""What the online trainer costs the serving loop, without transports or a load generator (issue 16, item 3).

Usage::

    loadtest/training_interference.py [--rate 800] [--duration-s 5] [--rounds 4] [--catch-up-timeout-s 120]
        [--store memory|redis] [--report out/interference.json]

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

1. ``paused`` (``--duration-s``): the trainer is stopped; outcomes queue in the store (``rate × duration`` of them);
2. ``catch_up``: the trainer starts and works through that backlog (at most ``catch_up_batches`` batches per
   publication) while decisions go on. The phase is delimited by an event, not a duration: it ends at the first
   call scheduled once a model version trained on the whole backlog, up to its last outcome, serves these calls
   (:class:`CatchUpEnd`; at least 50 ms), or at ``--catch-up-timeout-s`` (the round's ``catch_up_timed_out``).
   Its latencies are those of the calls made while the trainer catches up, however long that takes on this host
   (``catch_up_s``: seconds from the trainer's start to the phase's last reply);
3. ``training`` (``--duration-s``): steady state, a refit and a publication every 50 outcomes as they arrive.

The report gives each condition's p50 / p99 / max over all rounds (and per round) and the ratios to ``paused``,
and the CPU time each call cost, in µs: this serving process (all its threads) and its child processes (psutil;
the refit process, and for ``--store redis`` the redis-server and trainer it started).
Speed is printed, never asserted; the load average is printed with it.

``--store redis`` measures the chart's topology the same way: a ``redis-server`` on loopback, this process as a
replica with ``--no-trainer`` (its decisions and outcomes go to Redis; its snapshot follower hot-swaps the
published models) and a separate ``edgepath train`` process. ``paused`` is that trainer stopped (SIGSTOP);
``catch_up`` ends when no outcome up to the backlog's last is left in the outcome stream (the publication that
trained on them acknowledged and deleted them in the step that stored its version) and this replica serves that
version or a later one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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
VERSION_KEY = "edgepath:model:version"  # the stored model version (edgepath.state.redis_backend, default namespace)
#: At most this many catch-up phases in the warm-up, until less than a batch is left (the trainer keeps up).
WARM_UP_CATCH_UPS = 10

#: A round's catch-up phase lasts at least this long, s (a phase with calls in it, even with no backlog to train on).
CATCH_UP_MIN_S = 0.05
#: Seconds between two synchronous Redis reads of the catch-up check (they block the serving loop).
REDIS_CHECK_EVERY_S = 0.05


class RedisTopology:
    """A ``redis-server`` on a free loopback port and an ``edgepath train`` process on it; ``start``/``stop`` resume
    and pause the trainer (SIGCONT/SIGSTOP), as the bench does."""

    #: Seconds :meth:`close` waits for each process after SIGTERM before SIGKILL.
    stop_timeout_s = 30.0

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

    def newest_outcome_id(self) -> bytes | None:
        """Id of the newest entry of the outcome stream (``XREVRANGE … COUNT 1``); None when the stream is empty."""
        return newest_entry_id(self.client, OUTCOME_STREAM)

    def close(self) -> None:
        """Stop ``edgepath train`` and the redis-server: SIGTERM, SIGKILL after :attr:`stop_timeout_s` (a trainer
        waiting on a refit that a saturated host starves ends no sooner); print the trainer's log tail unless it
        ended cleanly."""
        self._trainer.send_signal(signal.SIGCONT)
        for name, proc in (("edgepath train", self._trainer), ("redis-server", self._redis_proc)):
            proc.terminate()
            try:
                proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                print(f"{name} did not end within {self.stop_timeout_s:g} s of SIGTERM: killed", file=sys.stderr)
                proc.kill()
                proc.wait(timeout=30)
        if self._trainer.returncode not in (0, -signal.SIGTERM):
            print(self.trainer_log.read_text()[-3000:], file=sys.stderr)
        shutil.rmtree(self._tmp, ignore_errors=True)


def newest_entry_id(client: Any, stream: str) -> bytes | None:
    """Id of the newest entry of ``stream`` (``XREVRANGE + - COUNT 1``, a redis-py client); None when it is empty."""
    newest = client.xrevrange(stream, count=1)
    return newest[0][0] if newest else None


def covering_version(client: Any, stream: str, version_key: str, last_id: bytes) -> int | None:
    """The stored model version once every outcome of ``stream`` up to ``last_id`` has been trained on, else None.

    The trainer's publication is one Lua script (:mod:`edgepath.state.redis_backend`): it stores the version in
    ``version_key`` and ``XACK`` + ``XDEL``s the outcomes the model was trained on, in one step. So no entry left in
    ``XRANGE stream - last_id`` means a published version covers them all, and the version stored at that moment
    (read in the same ``MULTI``) is one that does (or a later one). ``client``: a synchronous redis-py client.
    """
    pipe = client.pipeline(transaction=True)
    pipe.xrange(stream, "-", last_id, count=1)
    pipe.get(version_key)
    left, version = pipe.execute()
    return None if left else int(version or 0)


class CatchUpEnd:
    """The end of a round's catch-up phase, as :func:`open_loop`'s ``until(t)`` (``t``: the next call's scheduled
    offset, s from the phase's start).

    True once ``t ≥ min_s`` and ``covered()`` (a model version trained on the whole backlog serves the calls), or
    once ``timeout_s`` of ``clock`` (s; wall time, which an overloaded loop's schedule lags) have passed since the
    first call: then :attr:`timed_out` is True. ``covered`` is not asked again once it said True.

    Raises
    ------
    ValueError
        ``timeout_s`` not positive and finite, or ``min_s`` negative.
    """

    def __init__(
        self,
        covered: Callable[[], bool],
        timeout_s: float,
        min_s: float = CATCH_UP_MIN_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not (math.isfinite(timeout_s) and timeout_s > 0.0):
            raise ValueError("timeout_s must be finite and > 0")
        if min_s < 0.0:
            raise ValueError("min_s must be >= 0")
        self.covered, self.timeout_s, self.min_s, self.clock = covered, timeout_s, min_s, clock
        self.done = False  # the backlog is covered
        self.timed_out = False
        self._started: float | None = None  # clock() at the first call

    def __call__(self, t: float) -> bool:
        now = self.clock()
        if self._started is None:
            self._started = now
        if not self.done:
            self.done = self.covered()
        if t < self.min_s:
            return False
        if not self.done and now - self._started >= self.timeout_s:
            self.timed_out = True
        return self.done or self.timed_out


def memory_backlog_trained(trainer: Any, store: Any) -> Callable[[], bool]:
    """For the in-process store (``MemoryStore``) and its ``OnlineTrainer``: a ``covered()`` for :class:`CatchUpEnd`,
    true once a published version was trained on every outcome not yet trained on when this is called.

    Those are the store's undelivered queue and the outcomes delivered to the trainer but not acknowledged (its
    buffer). The trainer takes them in arrival order and adds a batch to ``outcomes_used`` once the version trained
    on it is published in the registry these calls decide with, so the backlog is covered when ``outcomes_used``
    has grown by their number (the outcomes arriving meanwhile come after them)."""
    target = trainer.outcomes_used + len(store._undelivered) + len(store._pending)
    return lambda: trainer.outcomes_used >= target


class RedisBacklogTrained:
    """For ``--store redis``: a ``covered()`` for :class:`CatchUpEnd`, true once ``registry`` (this replica's, fed by
    its snapshot follower) serves a version covering every outcome in ``topology``'s stream when this is built
    (:func:`covering_version`, asked at most once per ``every_s`` s: a synchronous Redis call blocks the loop)."""

    def __init__(self, topology: RedisTopology, registry: Any, every_s: float = REDIS_CHECK_EVERY_S) -> None:
        self.topology, self.registry, self.every_s = topology, registry, every_s
        self.last_id = topology.newest_outcome_id()
        self.target: int | None = None if self.last_id is not None else 0  # the version to serve, once known
        self._asked = -math.inf  # time.perf_counter() of the last Redis read

    def __call__(self) -> bool:
        if self.target is None and self.last_id is not None:
            now = time.perf_counter()
            if now - self._asked < self.every_s:
                return False
            self._asked = now
            self.target = covering_version(self.topology.client, OUTCOME_STREAM, VERSION_KEY, self.last_id)
        return self.target is not None and bool(self.registry.current.version >= self.target)


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


async def run(args: argparse.Namespace, topology: RedisTopology | None) -> dict[str, Any]:
    """The rounds of ``args`` (see the module's docstring) on ``topology`` (None: the in-process store and
    trainer); the report."""
    import workload
    from edgepath import types as ep_types
    from edgepath.main import Service, tune_serving_process
    from edgepath.settings import Settings

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

    def caught_up_when() -> CatchUpEnd:
        """The end of the catch-up phase: a version trained on the whole backlog serves here, or the timeout."""
        if topology is None:
            return CatchUpEnd(memory_backlog_trained(trainer, service.store), args.catch_up_timeout_s)
        return CatchUpEnd(RedisBacklogTrained(topology, plane.registry), args.catch_up_timeout_s)

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
    # ... until a refit is published, so that every phase serves a fitted model (a fresh model decides by a uniform
    # draw, ~100 µs per call cheaper, and round 1's paused phase measured that, not the absence of training), and
    # until the trainer keeps up: catch-ups until less than a batch is left. Else round 1's backlog also held what
    # arrived while the first refit started its process (memory, 300 calls/s: 598 outcomes against 194 and 187 in
    # rounds 2 and 3), and its catch-up was not the others'.
    v_warm = plane.registry.current.version
    for _ in range(WARM_UP_CATCH_UPS):
        warm = caught_up_when()
        await open_loop(
            one,
            args.rate,
            lambda t, end=warm: end(t) and (end.timed_out or plane.registry.current.version > v_warm),
        )
        if warm.timed_out or backlog() < settings.batch_size:
            break
    if backlog() >= settings.batch_size:
        print(f"warm-up: the trainer did not keep up ({backlog()} outcomes queued); going on", flush=True)
    for r in range(args.rounds):
        await trainer.stop()
        await timed("paused", lambda t: t >= args.duration_s)
        queued, v0 = backlog(), plane.registry.current.version
        until = caught_up_when()
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
                "catch_up_timed_out": until.timed_out,
                "versions_in_catch_up": v1 - v0,
                "versions_while_training": plane.registry.current.version - v1,
            }
        )
        timed_out = (
            f" (timed out after {args.catch_up_timeout_s:g} s: backlog not trained on)" if until.timed_out else ""
        )
        print(
            f"round {r + 1}: p99 paused {np.percentile(phases['paused'][-1], 99):.2f} ms, catch-up of {queued} "
            f"outcomes {catch_up_s:.2f} s{timed_out} p99 {np.percentile(phases['catch_up'][-1], 99):.2f} ms, "
            f"training {np.percentile(phases['training'][-1], 99):.2f} ms",
            flush=True,
        )
    await trainer.stop()
    if getattr(trainer, "refitter", None) is not None and hasattr(trainer.refitter, "close"):
        trainer.refitter.close()  # ends a refit under way (a starved SCHED_IDLE one would hold the exit for minutes)
    if service.follower is not None:
        await service.follower.stop()
    await (service.backend or service.store).close()
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
            "catch_up_timeout_s": args.catch_up_timeout_s,
            "catch_up_timeouts": sum(r["catch_up_timed_out"] for r in rounds),
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


def _positive_s(text: str) -> float:
    """``--catch-up-timeout-s``: a positive, finite number of seconds, else argparse's usage error naming it."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and value > 0.0):
        raise argparse.ArgumentTypeError(f"must be positive and finite, got {text!r}")
    return value


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=800.0, help="Recommend calls (each with its outcome) per second")
    p.add_argument(
        "--duration-s",
        type=float,
        default=5.0,
        help="Seconds of the paused and training phases (the catch-up phase lasts until the backlog is trained on)",
    )
    p.add_argument("--rounds", type=int, default=4, help="Rounds of (paused, catch-up, training)")
    p.add_argument(
        "--catch-up-timeout-s",
        type=_positive_s,
        default=120.0,
        help="Bound on a round's catch-up phase, s. The phase ends at the first call once a model version trained on "
        "the whole backlog of the paused phase serves here (memory: the trainer has published past the backlog's "
        "last outcome; redis: none of it is left in the outcome stream and this replica loaded the version that "
        "took it), at least 50 ms in; or after this long, reported as the round's catch_up_timed_out",
    )
    p.add_argument("--store", choices=("memory", "redis"), default="memory", help="memory (default) or redis")
    p.add_argument("--report", type=Path, help="Write the JSON report here")
    args = p.parse_args()
    topology = RedisTopology() if args.store == "redis" else None
    try:
        report = asyncio.run(run(args, topology))
    finally:  # after the loop's own clean-up, which may still reach Redis; an exception included
        if topology is not None:
            topology.close()
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
