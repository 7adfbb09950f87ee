"""A Redis user granted exactly the documented ACL rule (:func:`edgepath.state.redis_backend.redis_acl_rule`, README
"Many replicas") runs a replica and a trainer through every feature that touches Redis, and Redis refuses none of
their commands (``ACL LOG`` holds no entry of that user). Real ``edgepath serve`` / ``edgepath train`` processes on a
real redis-server (tests/service/state/cluster_helpers.py). A command the code starts to run and the rule does not
grant fails this test, naming it: the rule an operator of a shared Redis copies stays the one the code needs."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from edgepath.security.auth import TokenFile
from edgepath.state.redis_backend import REDIS_ACL_COMMANDS, redis_acl_rule
from redis import Redis

from state.cluster_helpers import Cluster
from state.redis_helpers import RedisServer, wait_until

README = Path(__file__).resolve().parents[3] / "README.md"
IFACES = [
    {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60, "link_speed_mbps": 100},
    {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -95, "rsrq_db": -10},
]
CONTENT = {
    "expected_size_bytes": 50_000_000,
    "candidates": [
        {
            "address": "198.51.100.7",
            "dns_interface": "wlan0",
            "paths": [{"interface": "wlan0", "rtt_ms_samples": [20, 22], "loss": 0.01, "bandwidth_bps": 5e7}],
        },
        {
            "address": "198.51.100.8",
            "dns_interface": "wwan0",
            "paths": [{"interface": "wwan0", "rtt_ms_samples": [40, 42], "loss": 0.01, "bandwidth_bps": 2e7}],
        },
    ],
}


def _decide_and_report(http: httpx.Client, token: str, device_id: str, i: int) -> None:
    headers = {"authorization": f"Bearer {token}"}
    request = {
        "device_id": device_id,
        "interfaces": IFACES,
        "application_profile": "STREAMING",
        "kernel": {"available_congestion_controls": ["reno", "cubic", "bbr"]},
        "content": CONTENT,
    }
    rec = http.post("/v1/recommendations", json=request, headers=headers)
    assert rec.status_code == 200, rec.text
    outcome = {
        "device_id": device_id,
        "decision_id": rec.json()["decision_id"],
        "throughput_bps": 1e7 * (1 + i % 3),
        "latency_ms": 30,
        "congestion_measurement": {"algorithm": "cubic", "protocol_delay_ms": 5},
        "server_transfer": {
            "address": "198.51.100.7",
            "size_bytes": 1_000_000,
            "duration_ms": 500,
            "paths": [{"interface": "wlan0", "rtt_ms_samples": [20], "loss": 0.0, "bandwidth_bps": 5e7}],
        },
    }
    ack = http.post("/v1/outcomes", json=outcome, headers=headers)
    assert ack.status_code == 200 and ack.json()["accepted"], ack.text


def _denials(admin: Redis, user: str) -> list[dict[str, Any]]:
    """``ACL LOG`` entries of ``user`` (the log is the server's; other tests' users are left out)."""
    entries: list[dict[str, Any]] = admin.acl_log(count=128)
    return [e for e in entries if e.get("username") in (user, user.encode())]


def test_the_readme_shows_the_rule_the_code_needs() -> None:
    assert redis_acl_rule() in README.read_text().replace("\\\n", "")


@pytest.mark.timeout(180)  # two processes started and stopped, two publications, an export: ~40 s on 2 cores
def test_a_user_granted_exactly_the_documented_rule_runs_every_feature(
    tmp_path: Path, redis_server: RedisServer, namespace: str
) -> None:
    admin = Redis.from_url(redis_server.url)
    user, password = f"edgepath-{namespace}", uuid.uuid4().hex
    admin.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", *redis_acl_rule(namespace).split())
    tokens = TokenFile(tmp_path / "tokens.json")
    device_tokens = {d: tokens.add(d) for d in ("dev-0", "dev-1")}
    ops = tokens.add("ops", admin=True)
    store_url = f"redis://{user}:{password}@127.0.0.1:{redis_server.port}/0"
    cluster = Cluster(
        tmp_path,
        redis_server,
        namespace=namespace,
        store_url=store_url,
        env={
            "EDGEPATH_AUTH_TOKENS_FILE": str(tokens.path),
            "EDGEPATH_BATCH_SIZE": "10",
            "EDGEPATH_EXPLORATION_SYNC_S": "0.5",
            "EDGEPATH_TRAINER_PUBLISH_INTERVAL_S": "0",
            "EDGEPATH_DRAIN_GRACE_S": "0",
            "EDGEPATH_STORE_MEMORY_POLL_S": "0.2",
        },
    )
    try:
        trainer = cluster.start_trainer()
        replica = cluster.start_replica("replica")
        with httpx.Client(base_url=replica.url, timeout=10) as http:
            for i in range(12):
                device = f"dev-{i % 2}"
                _decide_and_report(http, device_tokens[device], device, i)
            batch = {"requests": [{"device_id": "dev-0", "interfaces": IFACES}] * 3}
            headers = {"authorization": f"Bearer {device_tokens['dev-0']}"}
            assert http.post("/v1/recommendations/batch", json=batch, headers=headers).status_code == 200
            platform = {"authorization": f"Bearer {ops}"}
            session = {
                "appInsId": "app-1",
                "requestType": 0,
                "flowFilter": [{"dstIp": "198.51.100.7"}],
                "qosD": {},
                "mtsMode": 1,
                "trafficDirection": "00",
                "deviceId": "dev-1",
            }
            created = http.post("/mts/v1/mts_sessions", json=session, headers=platform)
            assert created.status_code == 201, created.text
            session_id = created.json()["sessionId"]
            assert http.get("/mts/v1/mts_sessions", headers=platform).status_code == 200
            updated = http.put(
                f"/mts/v1/mts_sessions/{session_id}", json={**session, "sessionId": session_id}, headers=platform
            )
            assert updated.status_code == 200, updated.text
            _decide_and_report(http, device_tokens["dev-1"], "dev-1", 12)  # steered by the session
            assert http.delete(f"/mts/v1/mts_sessions/{session_id}", headers=platform).status_code == 204
            assert http.put("/v1/admin/quarantine/dev-9", headers=platform).status_code == 200
            assert http.delete("/v1/admin/quarantine/dev-9", headers=platform).status_code == 200
            assert http.get("/v1/status", headers=platform).status_code == 200
            admin.script_flush()  # as after a Redis restart: the scripts load again (NOSCRIPT, SCRIPT LOAD)
            for i in range(13, 22):
                device = f"dev-{i % 2}"
                _decide_and_report(http, device_tokens[device], device, i)
            # two publications (20 outcomes, batches of 10), seen by the replica through the snapshot channel
            wait_until(
                lambda: http.get("/readyz").json().get("model_version", 0) >= 3 or trainer.popen.poll() is not None,
                60,
                what="the replica to serve the trainer's second model",
            )
            assert http.get("/readyz").status_code == 200
            # the store's memory gauges (INFO memory) measured as this user
            used = re.search(r"^edgepath_store_memory_used_bytes (\S+)$", http.get("/metrics").text, re.MULTILINE)
            assert used is not None and float(used.group(1)) > 0, cluster.logs()
        exported = tmp_path / "decisions.jsonl"
        done = subprocess.run(
            [sys.executable, "-m", "edgepath.cli", "log", "export", "--store", store_url, "--out", str(exported)],
            env=cluster.child_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert exported.read_text().count("\n") >= 20
        assert replica.stop(signal.SIGTERM) == 0 and trainer.stop(signal.SIGTERM) == 0, cluster.logs()
        assert _denials(admin, user) == [], (REDIS_ACL_COMMANDS, cluster.logs())
        assert "NOPERM" not in cluster.logs()
    finally:
        cluster.close()
        admin.execute_command("ACL", "DELUSER", user)
        admin.close()
