"""Issue 17, item 3: SIGTERM drains a real ``edgepath serve`` process.

Real processes on loopback: redis-server and one replica that also holds the trainer role
(``EDGEPATH_TRAINER=true``). On SIGTERM, readiness turns false first (``/readyz`` 503 ``draining``, gRPC
health NOT_SERVING) while the listeners still accept; a request already in flight (a slow client
sending its body in two parts, the second after SIGTERM) completes with 200; the process exits 0 within
the drain budget and has released the trainer lock (its TTL is far longer than the test, so expiry
cannot explain the release). With Redis down at SIGTERM, outcomes acknowledged from the durable outbox
stay in the journal for the next process.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from redis import Redis

from state.cluster_helpers import Cluster
from state.redis_helpers import REDIS_SERVER, RedisServer, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

CONTEXT = {
    "device_id": "phone-1",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "sinr_db": 8.0, "cqi": 9},
    ],
}
DRAIN = {
    "EDGEPATH_TRAINER": "true",
    "EDGEPATH_TRAINER_LOCK_TTL_S": "120",
    "EDGEPATH_DRAIN_READINESS_DELAY_S": "1.5",
    "EDGEPATH_DRAIN_GRACE_S": "5",
    "EDGEPATH_DRAIN_FLUSH_TIMEOUT_S": "1",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it from apt)")
    server = RedisServer(tmp_path, appendonly=True).start()
    c = Cluster(tmp_path, server, env={**DRAIN, "EDGEPATH_OUTBOX_DIR": str(tmp_path / "outbox")})
    try:
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.close()
        server.stop()


def _health(port: int) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service="edgepath.v1.PathService"), timeout=2).status


@pytest.mark.timeout(90)  # two process starts and a drain of a few seconds on a loaded 2-core machine
def test_sigterm_turns_readiness_false_drains_and_releases_the_trainer_lock(cluster: Cluster) -> None:
    r = Redis.from_url(cluster.redis.url)
    replica = cluster.start_replica("replica")
    lock = f"{cluster.namespace}:trainer:lock"
    wait_until(lambda: r.exists(lock), 30, what="the replica to take the trainer lock")
    http = httpx.Client(timeout=5.0)
    assert http.get(f"{replica.url}/readyz").status_code == 200
    assert _health(replica.grpc_port) == health_pb2.HealthCheckResponse.SERVING

    body = json.dumps(CONTEXT).encode()
    slow = socket.create_connection(("127.0.0.1", replica.http_port), timeout=10)
    head = "POST /v1/recommendations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    slow.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body[:20])  # in flight

    replica.send(signal.SIGTERM)
    sent_at = time.monotonic()

    def draining() -> bool:
        resp = http.get(f"{replica.url}/readyz")
        return resp.status_code == 503 and resp.json().get("draining") is True

    wait_until(draining, 5, what="/readyz to report draining")
    assert _health(replica.grpc_port) == health_pb2.HealthCheckResponse.NOT_SERVING
    readiness_false_after_s = time.monotonic() - sent_at

    slow.sendall(body[20:])  # the slow client finishes its request after SIGTERM
    reply = b""
    while b"\r\n\r\n" not in reply or not reply.split(b"\r\n\r\n", 1)[1]:
        chunk = slow.recv(65536)
        if not chunk:
            break
        reply += chunk
    slow.close()
    assert reply.startswith(b"HTTP/1.1 200"), reply[:300]
    assert b"decision_id" in reply

    replica.popen.wait(20)
    exit_s = time.monotonic() - sent_at
    assert replica.popen.returncode == 0, replica.log.read_text()[-2000:]
    assert not r.exists(lock)  # released at shutdown (TTL 120 s: not an expiry)
    assert "drained in" in replica.log.read_text()
    print(f"\nreadiness false after {readiness_false_after_s:.2f} s; exited 0 after {exit_s:.2f} s")


@pytest.mark.timeout(90)
def test_sigterm_with_redis_down_keeps_the_outbox_in_the_journal(cluster: Cluster, tmp_path: Path) -> None:
    replica = cluster.start_replica("replica", {"EDGEPATH_TRAINER": "false"})
    http = httpx.Client(timeout=5.0)
    rec = http.post(f"{replica.url}/v1/recommendations", json=CONTEXT).json()
    cluster.redis.stop()
    wait_until(lambda: http.get(f"{replica.url}/readyz").status_code == 503, 15, what="degraded mode")
    rec2 = http.post(f"{replica.url}/v1/recommendations", json=CONTEXT).json()
    for d in (rec, rec2):
        ack = http.post(
            f"{replica.url}/v1/outcomes",
            json={"device_id": "phone-1", "decision_id": d["decision_id"], "throughput_bps": 2e7},
        )
        assert ack.status_code == 200 and ack.json()["accepted"], ack.text
    assert replica.stop(signal.SIGTERM, timeout_s=20) == 0
    journals = list((tmp_path / "outbox").glob("outbox-*.jsonl"))
    assert len(journals) == 1
    kinds = [json.loads(line)["k"] for line in journals[0].read_text().splitlines()]
    assert kinds.count("o") == 2  # both acknowledged outcomes, for the next process to replay
