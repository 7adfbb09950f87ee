"""Real ``edgepath serve`` / ``edgepath train`` child processes on one redis-server, for the reliability tests.

Each process is started with ``python -m edgepath.cli`` and its own log file; a replica is ready once it
has written its ``--ready-file`` (ports). Processes are stopped by pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgepath.training.snapshots import loads_verified
from redis import Redis

from state.redis_helpers import RedisServer, wait_until

HMAC_KEY = "reliability-test-key"


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    http_port: int = 0
    grpc_port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def send(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> int:
        """Send ``sig`` and wait for the exit (SIGKILL after ``timeout_s``); the exit code."""
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        return int(self.popen.returncode)


@dataclass
class Cluster:
    """Replicas and trainers on ``redis``; ``env`` is added to every child's environment."""

    tmp: Path
    redis: RedisServer
    env: dict[str, str] = field(default_factory=dict)
    namespace: str = "rtest"
    procs: list[Proc] = field(default_factory=list)
    #: The store URL the children connect with (e.g. as a Redis ACL user); default: ``redis``'s own.
    store_url: str | None = None

    @property
    def url(self) -> str:
        return self.store_url or self.redis.url

    def child_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        e = dict(os.environ)
        e.update(
            EDGEPATH_HMAC_KEY=HMAC_KEY,
            EDGEPATH_REDIS_NAMESPACE=self.namespace,
            EDGEPATH_TRAINER_LOCK_TTL_S="3",
            EDGEPATH_OUTCOME_CLAIM_IDLE_MS="2000",
            EDGEPATH_REDIS_SOCKET_TIMEOUT_S="0.5",
            EDGEPATH_SNAPSHOT_POLL_S="0.5",
            EDGEPATH_RATE_LIMIT_PER_S="100000",
            EDGEPATH_RATE_LIMIT_BURST="100000",
        )
        e.update(self.env)
        e.update(extra or {})
        return e

    def start_replica(self, name: str, extra_env: dict[str, str] | None = None) -> Proc:
        ready = self.tmp / f"{name}.ready.json"
        ready.unlink(missing_ok=True)
        log = self.tmp / f"{name}.log"
        cmd = [sys.executable, "-m", "edgepath.cli", "serve", "--store", self.url]
        cmd += ["--grpc-port", "0", "--http-port", "0", "--ready-file", str(ready)]
        popen = subprocess.Popen(cmd, env=self.child_env(extra_env), stdout=log.open("ab"), stderr=subprocess.STDOUT)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        wait_until(lambda: ready.exists() or popen.poll() is not None, 60, what=f"{name} to serve")
        assert popen.poll() is None, log.read_text()[-3000:]
        ports = json.loads(ready.read_text())
        proc.http_port, proc.grpc_port = int(ports["http_port"]), int(ports["grpc_port"])
        return proc

    def start_trainer(self, name: str = "trainer", extra_env: dict[str, str] | None = None) -> Proc:
        log = self.tmp / f"{name}.log"
        cmd = [sys.executable, "-m", "edgepath.cli", "train", "--store", self.url]
        popen = subprocess.Popen(cmd, env=self.child_env(extra_env), stdout=log.open("ab"), stderr=subprocess.STDOUT)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log.read_text()[-2500:]}" for p in self.procs if p.log.exists())

    def close(self) -> None:
        for p in self.procs:
            p.stop(signal.SIGKILL)


def snapshot(r: Redis, namespace: str) -> tuple[int, dict[str, Any]]:
    """(version, meta) of the published model — the signature is verified and the model unpickled."""
    fields = r.hgetall(f"{namespace}:model:snapshot")
    if not fields:
        return 0, {}
    version = int(fields[b"version"])
    loads_verified(HMAC_KEY.encode(), version, fields[b"meta"], fields[b"blob"], fields[b"signature"])
    return version, json.loads(fields[b"meta"])
