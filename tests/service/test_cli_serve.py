"""`edgepath serve` as a real process: ready file, gRPC health SERVING, REST health, clean SIGTERM exit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

EDGEPATH = Path(sys.executable).with_name("edgepath")


def test_serve_runs_both_servers_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(
        [str(EDGEPATH), "serve", "--grpc-port", "0", "--http-port", "0", "--ready-file", str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "EDGEPATH_POLICY": "epsilon_greedy"},
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():  # bounded wait for the process to publish its ports
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "service not ready in 60 s"
            time.sleep(0.05)
        ports = json.loads(ready.read_text())
        assert ports["pid"] == proc.pid
        with grpc.insecure_channel(f"127.0.0.1:{ports['grpc_port']}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for name in ("", "edgepath.v1.PathService"):
                reply = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
        base = f"http://127.0.0.1:{ports['http_port']}"
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        assert "/v1/recommendations" in httpx.get(f"{base}/openapi.json").json()["paths"]
        rec = httpx.post(
            f"{base}/v1/recommendations",
            json={
                "device_id": "d",
                "interfaces": [{"name": "wlan0", "access_type": "WIFI"}, {"name": "wwan0", "access_type": "LTE"}],
            },
        ).json()
        assert rec["policy"] == "epsilon_greedy"  # the environment variable reached the settings
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0


def test_serve_rejects_an_unknown_policy() -> None:
    out = subprocess.run(
        [str(EDGEPATH), "serve", "--policy", "no_such_policy", "--grpc-port", "0", "--http-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "no_such_policy" in out.stderr
