#!/usr/bin/env python3
"""Redis memory per live decision, measured: a real ``redis-server`` and a real ``edgepath serve --store redis://``.

Sizes the Redis of a deployment (the chart's ``redis.maxmemory`` and ``redis.resources``; README "Deploy, load
tests, benchmark", "Sizing the chart's Redis"). On loopback only: it starts its own redis-server (no persistence) on a
free port and ``edgepath serve`` on free ports, sends ``--decisions`` REST decisions with the locust users' contexts
(:mod:`workload`: real paired situations with the agent's subflow histories, ``--history-samples``) from
``--devices`` device ids, then reports the outcomes of ``1 - OUTCOME_LOSS`` (90 %) of them, and reads Redis's
``INFO memory`` (``used_memory``) before and after each phase:

* ``per_decision_bytes``: growth per decision (its ``{ns}:decision:{id}`` key with its TTL, live for
  ``decision_ttl_s``), Redis's own dict, expiry and allocator overhead included;
* ``per_outcome_bytes``: growth per outcome: the claim marker (``{ns}:claimed:{id}``, live for twice the decision
  TTL), the outcome stream entry (until the trainer acknowledges it: the run has no trainer, so it stays) and the
  decision-log entry (at most ``decision_log_max_entries``);
* ``memory_usage``: ``MEMORY USAGE`` of sample keys and the streams' bytes per entry.

Prints one JSON object (and writes it to ``--out`` when given). Bounded: ``--decisions`` calls, each with a 10 s
timeout; the children are stopped by pid. Needs the ``redis-server`` binary.

    loadtest/redis_memory.py --decisions 20000 --out out/redis-memory.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_VENV_PYTHON = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
if _VENV_PYTHON.exists() and Path(sys.prefix).resolve() != _VENV_PYTHON.parent.parent.resolve():
    os.execv(str(_VENV_PYTHON), [str(_VENV_PYTHON), *sys.argv])  # run inside the project's venv

import httpx  # noqa: E402  (after the re-exec into the venv)
import redis  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from edgepath import launch  # noqa: E402
from workload import (  # noqa: E402
    AGENT_HISTORY_SAMPLES,
    OUTCOME_LOSS,
    outcome_body,
    recommend_body,
    situations,
)

NAMESPACE = "edgepath"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (scripts/setup.sh installs it from apt)")
    port = _free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory), "--save", ""]
    args += ["--appendonly", "no", "--protected-mode", "no"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return proc, port
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"redis-server did not answer on port {port}") from None
            time.sleep(0.02)


def _used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def _settled_used(client: redis.Redis) -> int:
    """used_memory once the service's writes have landed (two equal readings 50 ms apart, at most 5 s)."""
    last = _used(client)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = _used(client)
        if now == last:
            return now
        last = now
    return last


async def _drive(base: str, devices: int, decisions: int, history_samples: int, concurrency: int) -> list[Any]:
    """``decisions`` Recommend calls; returns [(situation, device id, reply)] of each."""
    pool = situations()
    rng = random.Random(11)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(decisions):
        queue.put_nowait(i)
    made: list[Any] = []

    async def worker(client: httpx.AsyncClient) -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            situation = pool[i % len(pool)]
            device = f"mem-{i % devices}"
            body = recommend_body(situation, device, history_samples, rng.randrange(4))
            reply = await client.post(f"{base}/v1/recommendations", json=body)
            reply.raise_for_status()
            made.append((situation, device, reply.json()))

    async with httpx.AsyncClient(timeout=10.0) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return made


async def _report(base: str, made: list[Any], concurrency: int) -> int:
    rng = random.Random(13)
    chosen = [m for m in made if rng.random() >= OUTCOME_LOSS]
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for m in chosen:
        queue.put_nowait(m)

    async def worker(client: httpx.AsyncClient) -> None:
        while True:
            try:
                situation, device, reply = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            answer = await client.post(f"{base}/v1/outcomes", json=outcome_body(situation, device, reply))
            answer.raise_for_status()

    async with httpx.AsyncClient(timeout=10.0) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return len(chosen)


def _sample_usage(client: redis.Redis, pattern: str, count: int = 50) -> float | None:
    sizes = []
    for key in client.scan_iter(match=pattern, count=1000):
        sizes.append(int(client.memory_usage(key, samples=0) or 0))
        if len(sizes) >= count:
            break
    return sum(sizes) / len(sizes) if sizes else None


def _stream_per_entry(client: redis.Redis, key: str) -> float | None:
    n = client.xlen(key)
    return int(client.memory_usage(key, samples=0) or 0) / n if n else None


def measure(decisions: int, devices: int, history_samples: int, concurrency: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="edgepath-redis-memory-") as tmp:
        work = Path(tmp)
        proc, port = _start_redis(work)
        client = redis.Redis(port=port)
        try:
            env = {
                # one client drives many device ids: no per-device limit or outcome cap in the way
                "EDGEPATH_RATE_LIMIT_PER_S": "1000000",
                "EDGEPATH_RATE_LIMIT_BURST": "1000000",
                "EDGEPATH_OUTCOME_CAP_PER_WINDOW": "1000000",
                "EDGEPATH_REDIS_NAMESPACE": NAMESPACE,
                "EDGEPATH_LOG_LEVEL": "WARNING",
            }
            url = f"redis://127.0.0.1:{port}/0"
            with launch.served(work / "ready.json", work / "service.log", "--store", url, env=env) as ports:
                base = f"http://127.0.0.1:{ports['http_port']}"
                # warm-up: the model snapshot, the devices' rate-limit buckets and access keys exist before counting
                asyncio.run(_drive(base, devices, devices, history_samples, concurrency))
                client.delete(*client.keys(f"{NAMESPACE}:decision:*") or [f"{NAMESPACE}:none"])
                before = _settled_used(client)
                made = asyncio.run(_drive(base, devices, decisions, history_samples, concurrency))
                after_decisions = _settled_used(client)
                outcomes = asyncio.run(_report(base, made, concurrency))
                after_outcomes = _settled_used(client)
                usage = {
                    "decision_key": _sample_usage(client, f"{NAMESPACE}:decision:*"),
                    "claimed_marker_key": _sample_usage(client, f"{NAMESPACE}:claimed:*"),
                    "outcome_stream_entry": _stream_per_entry(client, f"{NAMESPACE}:outcomes"),
                    "decision_log_entry": _stream_per_entry(client, f"{NAMESPACE}:decision_log"),
                }
                live_decision_keys = sum(1 for _ in client.scan_iter(match=f"{NAMESPACE}:decision:*", count=1000))
        finally:
            client.close()
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {
        "when": time.strftime("%Y-%m-%d"),
        "redis_server": subprocess.run(
            [shutil.which("redis-server") or "redis-server", "--version"], capture_output=True, text=True, check=False
        ).stdout.strip(),
        "decisions": decisions,
        "live_decision_keys": live_decision_keys,
        "outcomes": outcomes,
        "devices": devices,
        "history_samples": history_samples,
        "per_decision_bytes": round((after_decisions - before) / decisions, 1),
        "per_outcome_bytes": round((after_outcomes - after_decisions) / max(1, outcomes), 1),
        "memory_usage": {k: (round(v, 1) if v is not None else None) for k, v in usage.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--decisions", type=int, default=20000)
    p.add_argument("--devices", type=int, default=200, help="device ids (loadtest/locust.conf runs 200 users)")
    p.add_argument("--history-samples", type=int, default=AGENT_HISTORY_SAMPLES)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    result = measure(args.decisions, args.devices, args.history_samples, args.concurrency)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
