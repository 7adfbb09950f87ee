"""``edgepath serve --workers N`` (issue 16): N processes on the same ports, sharing state through Redis.

A real ``edgepath serve --workers 2`` against a real redis-server: both workers listen on the one pair of
ports (SO_REUSEPORT), a decision taken through one connection is reported through another (whichever
worker takes it), both workers take connections, SIGTERM to the parent stops every worker; with the
in-process store more than one worker is refused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from state.redis_helpers import RedisServer

VENV_BIN = Path(sys.executable).parent
BODY: dict[str, Any] = {
    "device_id": "phone-1",
    "interfaces": [{"name": "wlan0", "access_type": "WIFI"}, {"name": "wwan0", "access_type": "LTE"}],
}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _poll(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout_s} s")
        time.sleep(0.05)  # polling period of a bounded wait


def _start_two_workers(
    redis_server: RedisServer, namespace: str, ready: Path, **env: str
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """``edgepath serve --workers 2`` on free ports and the Redis store (``env``: more settings), once both
    workers listen: the process and its ready file (stderr piped, WARNING and above)."""
    proc = subprocess.Popen(
        [str(VENV_BIN / "edgepath"), "serve", "--workers", "2", "--store", redis_server.url, "--grpc-port", "0",
         "--http-port", "0", "--ready-file", str(ready), "--log-level", "WARNING"],
        env={**os.environ, "EDGEPATH_REDIS_NAMESPACE": namespace, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _poll(lambda: ready.exists() or proc.poll() is not None, 90, "both workers listening")
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        return proc, json.loads(ready.read_text())
    except BaseException:
        proc.kill()
        proc.wait(30)
        raise


@pytest.mark.timeout(120)  # two worker processes start and import the service (~5-20 s each on a shared machine)
def test_two_workers_share_the_ports_and_the_decisions(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    ready = tmp_path / "ready.json"
    workers: list[int] = []
    proc, info = _start_two_workers(redis_server, namespace, ready)
    try:
        workers = info["workers"]
        assert len(set(workers)) == 2 and proc.pid not in workers and all(_alive(p) for p in workers)
        url = f"http://127.0.0.1:{info['http_port']}"
        for i in range(20):  # a fresh connection per call: the kernel picks a worker for each
            rec = httpx.post(f"{url}/v1/recommendations", json=BODY, timeout=10.0)
            assert rec.status_code == 200, rec.text
            outcome = {"device_id": "phone-1", "decision_id": rec.json()["decision_id"], "throughput_bps": 1e7 * i}
            ack = httpx.post(f"{url}/v1/outcomes", json=outcome, timeout=10.0)
            assert ack.status_code == 200 and ack.json()["accepted"] is True, ack.text
        counts = set()
        for _ in range(40):  # each worker counts its own decisions; together they made all 20
            text = httpx.get(f"{url}/metrics", timeout=10.0).text
            counts.add(
                sum(
                    float(line.split()[-1]) for line in text.splitlines() if line.startswith("edgepath_decisions_total")
                )
            )
        assert any(a + b == 20 and a > 0 and b > 0 for a in counts for b in counts), counts
        assert info["metrics_ports"] is None
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert all(not _alive(p) for p in workers)
    # the scrape above samples a worker per connection: said at start, with the way to scrape each
    assert "set metrics_port (EDGEPATH_METRICS_PORT) P to scrape worker k on port P + k" in " ".join(
        stderr.decode().split()
    )


def _decisions(text: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("edgepath_decisions_total"))


@pytest.mark.timeout(120)  # as above
def test_each_worker_serves_its_own_metrics_on_a_port_of_its_own(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """``metrics_port`` with ``--workers 2`` was refused ("serves one process's metrics"), and the HTTP port's
    ``/metrics`` answers for one worker per connection: a Prometheus scrape of it saw counters jump between
    processes. Now worker k serves its own on ``metrics_port`` + k (0: a free port each), named in the ready file;
    the two scrapes together count every decision once."""
    ready = tmp_path / "ready.json"
    workers: list[int] = []
    proc, info = _start_two_workers(redis_server, namespace, ready, EDGEPATH_METRICS_PORT="0")
    try:
        workers, ports = info["workers"], info["metrics_ports"]
        assert len(set(workers)) == 2 and len(set(ports)) == 2 and all(ports), info
        url = f"http://127.0.0.1:{info['http_port']}"
        for _ in range(12):  # a fresh connection per call
            assert httpx.post(f"{url}/v1/recommendations", json=BODY, timeout=10.0).status_code == 200
        counts = [_decisions(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10.0).text) for port in ports]
        assert sum(counts) == 12, counts
        assert httpx.get(f"{url}/metrics", timeout=10.0).status_code == 404  # moved to the workers' own ports
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert all(not _alive(p) for p in workers)
    assert "metrics_port" not in stderr.decode()  # no warning: each worker has its own


def test_more_than_one_worker_needs_a_shared_store(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(VENV_BIN / "edgepath"), "serve", "--workers", "2", "--store", "memory://"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "shared store" in proc.stderr + proc.stdout


def test_worker_metrics_ports_past_65535_are_refused() -> None:
    proc = subprocess.run(
        [str(VENV_BIN / "edgepath"), "serve", "--workers", "2", "--store", "redis://127.0.0.1:1/0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "EDGEPATH_METRICS_PORT": "65535"},
    )
    assert proc.returncode == 2
    assert "65535..65536 passes 65535" in " ".join((proc.stderr + proc.stdout).split())
