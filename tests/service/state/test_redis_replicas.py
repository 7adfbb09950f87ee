"""Integration: two ``edgepath serve`` replicas and one ``edgepath train`` on one real redis-server.

Everything is a real process on loopback: the replicas (REST used here), the trainer (Redis lock,
consumer group, signed snapshots) and redis-server (append-only file, so a restart keeps its data).
Three phases, 200 outcomes in all (4 refits of 50):

1. outcomes sent to both replicas — decisions made on one replica are reported to the other — all
   reach the model: the published model's ``samples_seen`` equals the number of accepted outcomes;
2. one replica is SIGKILLed while a client streams to it, then restarted: the client retries on the
   other replica (a retry of an outcome the dead replica had already recorded comes back
   ``duplicate``) and the model counts every outcome exactly once;
3. redis-server is stopped while decisions and outcomes keep arriving, then restarted on the same
   port with its append-only file: decisions keep flowing, ``/readyz`` reports the degraded state,
   and the buffered outcomes reach the model after Redis returns (the outage lasts until the trainer
   has stepped down for want of lock renewals; it takes the lock again and trains on them). A *hung*
   Redis (SIGSTOP: every command waits for the socket timeout) is covered in ``test_redis_stream.py``
   and ``test_degraded_service.py``.

Measured figures (counts, versions, hot-swap delay) are printed (run with ``-s``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from edgepath.training.snapshots import loads_verified
from redis import Redis

from state.redis_helpers import REDIS_SERVER, RedisServer, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

HMAC_KEY = "integration-test-key"
NAMESPACE = "itest"
BATCH = 50
CONTEXT: dict[str, Any] = {
    "device_id": "phone-1",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "sinr_db": 8.0, "cqi": 9},
    ],
}


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.update(
        EDGEPATH_HMAC_KEY=HMAC_KEY,
        EDGEPATH_REDIS_NAMESPACE=NAMESPACE,
        EDGEPATH_TRAINER_LOCK_TTL_S="3",
        EDGEPATH_OUTCOME_CLAIM_IDLE_MS="2000",
        EDGEPATH_REDIS_SOCKET_TIMEOUT_S="0.5",
        EDGEPATH_SNAPSHOT_POLL_S="1",
        EDGEPATH_BATCH_SIZE=str(BATCH),
        # one test device sends hundreds of requests a second: lift the per-device limits (issue 9)
        EDGEPATH_RATE_LIMIT_PER_S="100000",
        EDGEPATH_RATE_LIMIT_BURST="100000",
    )
    return e


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    http_port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def kill(self, sig: int = signal.SIGTERM) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)


@dataclass
class Cluster:
    tmp: Path
    redis: RedisServer
    procs: list[Proc] = field(default_factory=list)

    def start_replica(self, name: str) -> Proc:
        ready = self.tmp / f"{name}.ready.json"
        ready.unlink(missing_ok=True)
        log = self.tmp / f"{name}.log"
        cmd = [
            sys.executable,
            "-m",
            "edgepath.cli",
            "serve",
            "--store",
            self.redis.url,
            "--grpc-port",
            "0",
            "--http-port",
            "0",
            "--ready-file",
            str(ready),
        ]
        # Durable degraded-mode outbox (phase 3 acknowledges outcomes while Redis is down): one per node.
        replica_env = {**env(), "EDGEPATH_OUTBOX_DIR": str(self.tmp / "outbox")}
        popen = subprocess.Popen(cmd, env=replica_env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        wait_until(lambda: ready.exists() or popen.poll() is not None, 60, what=f"{name} to serve")
        assert popen.poll() is None, log.read_text()[-3000:]
        proc.http_port = json.loads(ready.read_text())["http_port"]
        return proc

    def start_trainer(self) -> Proc:
        log = self.tmp / "trainer.log"
        cmd = [sys.executable, "-m", "edgepath.cli", "train", "--store", self.redis.url]
        popen = subprocess.Popen(cmd, env=env(), stdout=log.open("ab"), stderr=subprocess.STDOUT)
        proc = Proc("trainer", popen, log)
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log.read_text()[-2500:]}" for p in self.procs if p.log.exists())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it from apt)")
    server = RedisServer(tmp_path, appendonly=True).start()
    c = Cluster(tmp_path, server)
    try:
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        for p in c.procs:
            p.kill()
        server.stop()


class Client:
    """A device: decide on one replica, report on another, retry a failed report elsewhere."""

    def __init__(self) -> None:
        self.http = httpx.Client(timeout=5.0)
        self.counted: set[str] = set()  # decisions whose outcome some replica recorded (accepted or duplicate)
        self.versions: set[int] = set()
        self.duplicates_after_retry = 0

    def recommend(self, replica: Proc) -> dict[str, Any]:
        resp = self.http.post(f"{replica.url}/v1/recommendations", json=CONTEXT)
        assert resp.status_code == 200, resp.text
        rec = resp.json()
        self.versions.add(rec["model_version"])
        return rec

    def report(self, replicas: list[Proc], decision_id: str, i: int) -> None:
        body = {
            "device_id": "phone-1",
            "decision_id": decision_id,
            "throughput_bps": 20e6 + (i % 7) * 2e6,
            "latency_ms": 30.0 + (i % 5) * 20,
        }
        last: Any = None
        for attempt, replica in enumerate(replicas):
            try:
                resp = self.http.post(f"{replica.url}/v1/outcomes", json=body)
            except httpx.TransportError as exc:
                last = exc
                continue
            assert resp.status_code == 200, resp.text
            ack = resp.json()
            assert ack["accepted"] or ack["duplicate"]
            if ack["duplicate"]:
                assert attempt > 0  # only a retry after a failure may find its outcome already recorded
                self.duplicates_after_retry += 1
            self.counted.add(decision_id)
            return
        raise AssertionError(f"outcome {decision_id} reached no replica: {last}")


def snapshot(r: Redis) -> tuple[int, dict[str, Any]]:
    """(version, meta) of the published model — the signature is verified and the model unpickled."""
    fields = r.hgetall(f"{NAMESPACE}:model:snapshot")
    if not fields:
        return 0, {}
    version = int(fields[b"version"])
    model = loads_verified(HMAC_KEY.encode(), version, fields[b"meta"], fields[b"blob"], fields[b"signature"])
    meta = json.loads(fields[b"meta"])
    assert model.samples_seen == meta["samples_seen"]
    return version, meta


def wait_trained(r: Redis, samples: int, timeout_s: float = 30.0) -> tuple[int, dict[str, Any]]:
    return wait_until(
        lambda: (s := snapshot(r))[1].get("samples_seen") == samples and s,
        timeout_s,
        interval_s=0.05,
        what=f"a published model trained on {samples} outcomes",
    )


def replica_version(http: httpx.Client, replica: Proc) -> int:
    return int(http.get(f"{replica.url}/readyz").json()["model_version"])


def test_two_replicas_one_trainer_nothing_lost(cluster: Cluster) -> None:
    r = Redis.from_url(cluster.redis.url)
    trainer = cluster.start_trainer()
    a = cluster.start_replica("replica-a")
    b = cluster.start_replica("replica-b")
    wait_until(lambda: r.exists(f"{NAMESPACE}:trainer:lock"), 30, what="the trainer to take the lock")
    client = Client()
    figures: dict[str, Any] = {}

    # --- phase 1: both replicas, cross-replica joins -------------------------------------------------
    for i in range(100):
        decide_on, report_to = (a, b) if i % 2 == 0 else (b, a)
        rec = client.recommend(decide_on)
        client.report([report_to], rec["decision_id"], i)
    version, meta = wait_trained(r, 100)
    assert len(client.counted) == 100 and meta["samples_seen"] == 100
    swap_started = time.time()
    wait_until(
        lambda: replica_version(client.http, a) == version == replica_version(client.http, b),
        5,
        interval_s=0.01,
        what="both replicas to hot-swap",
    )
    figures["phase1"] = {
        "accepted": len(client.counted),
        "model_samples": meta["samples_seen"],
        "version": version,
        "hot_swap_upper_bound_s": round(time.time() - meta["published_at"], 3),
        "observed_after_training_s": round(time.time() - swap_started, 3),
    }

    # --- phase 2: SIGKILL a replica while a client streams to it, then restart it -------------------
    state = {"target": a, "done": 0}
    errors: list[BaseException] = []

    def stream() -> None:
        try:
            for i in range(100, 150):
                target = state["target"]
                try:
                    rec = client.recommend(target)
                except httpx.TransportError:
                    rec = client.recommend(b)
                client.report([target, b], rec["decision_id"], i)
                state["done"] += 1
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    worker = threading.Thread(target=stream)
    worker.start()
    wait_until(lambda: state["done"] >= 15 or not worker.is_alive(), 30, what="the stream to start")
    a.kill(signal.SIGKILL)
    a_restarted = cluster.start_replica("replica-a2")
    state["target"] = a_restarted
    worker.join(60)
    assert not worker.is_alive() and not errors, errors
    assert len(client.counted) == 150
    version, meta = wait_trained(r, 150)
    wait_until(
        lambda: all(replica_version(client.http, p) == version for p in (a_restarted, b)),
        10,
        what="both replicas on the current model",
    )
    figures["phase2"] = {
        "accepted": len(client.counted),
        "model_samples": meta["samples_seen"],
        "version": version,
        "duplicates_after_retry": client.duplicates_after_retry,
    }

    # --- phase 3: Redis down mid-stream ---------------------------------------------------------------
    replicas = [a_restarted, b]
    cluster.redis.stop()
    paused_at = time.monotonic()
    degraded_seen = set()
    try:
        for i in range(150, 200):
            replica = replicas[i % 2]
            rec = client.recommend(replica)  # decisions keep flowing with the last model
            assert rec["model_version"] == version
            client.report([replica], rec["decision_id"], i)  # joined locally, buffered
            if i >= 190:
                resp = client.http.get(f"{replica.url}/readyz")
                if resp.status_code == 503 and resp.json()["degraded"]:
                    degraded_seen.add(replica.name)
        # Keep Redis away until the trainer has noticed too (its lock renewal failed for 0.8 × TTL and it
        # stepped down): a few seconds, ended by an observable event; it must re-take the lock afterwards.
        wait_until(lambda: "stepping down" in trainer.log.read_text(), 20, what="the trainer to step down")
        paused_for_s = time.monotonic() - paused_at
    finally:
        cluster.redis.start()  # same port, same append-only file
    assert degraded_seen == {"replica-a2", "replica-b"}
    wait_until(
        lambda: all(client.http.get(f"{p.url}/readyz").status_code == 200 for p in replicas),
        15,
        what="replicas ready again",
    )
    version, meta = wait_trained(r, 200)
    assert len(client.counted) == 200 == meta["samples_seen"]
    assert r.xlen(f"{NAMESPACE}:outcomes") == 0  # every outcome used and acknowledged
    wait_until(
        lambda: all(replica_version(client.http, p) == version for p in replicas),
        5,
        what="replicas on the final version",
    )
    figures["phase3"] = {
        "accepted": len(client.counted),
        "model_samples": meta["samples_seen"],
        "version": version,
        "redis_down_s": round(paused_for_s, 2),
    }
    figures["versions_reported_by_decisions"] = sorted(client.versions)
    assert trainer.popen.poll() is None
    print("\nINTEGRATION", json.dumps(figures))
