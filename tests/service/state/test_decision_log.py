"""The decision log as a product (issue 18): both stores keep joined decisions, bounded; the export is paged.

Store tests run the in-process store and a real redis-server (fixture ``redis_server``). The
end-to-end test runs a real service on that redis-server, sends real paired situations over REST,
exports with the real ``edgepath log export`` command (a child process) while traffic continues, and
reads the file with the very reader ``edgepath train-offline --decision-log`` uses, then trains on it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from edgepath.datasets.mobilebandwidth import pair_situations, read_measurements
from edgepath.evaluation.ope import load_log, off_policy_evaluation
from edgepath.state.base import DECISION_LOG_FORMAT, LoggedDecision
from edgepath.state.export import export_decision_log
from edgepath.state.memory import MemoryStore
from edgepath.state.redis import RedisStore
from edgepath.training.offline import OfflineConfig, read_decision_log, train_offline
from service_harness import running_service

from state.redis_helpers import RedisServer

DATA = Path(__file__).resolve().parents[3] / "service" / "data" / "mobilebandwidth"


def entry(i: int, reported_at: float | None = None) -> LoggedDecision:
    return LoggedDecision(
        decision_id=f"d{i}",
        device_id="dev-1",
        decided_at=time.time(),
        reported_at=time.time() if reported_at is None else reported_at,
        model_version=1,
        policy="ridge_squarecb",
        arms=("WIFI", "LTE"),
        arm_index=i % 2,
        interface="wlan0" if i % 2 == 0 else "wwan0",
        propensity=0.5,
        features=(0.0,) * 4,
        context=({"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60.0},),
        throughput_bps=1e7 * (i + 1),
        latency_ms=None,
        loss=None,
        reward=0,
    )


async def read_all(store: Any, since_s: float = 0.0, count: int = 7) -> list[LoggedDecision]:
    out, cursor = [], None
    while True:
        page, cursor = await store.read_decision_log(since_s=since_s, after=cursor, count=count)
        assert len(page) <= count
        out.extend(page)
        if cursor is None:
            return out


def test_memory_log_pages_in_order_and_is_bounded_by_count_and_age() -> None:
    async def main() -> None:
        store = MemoryStore(decision_log_max_entries=20, decision_log_retention_s=3600.0)
        for i in range(30):
            await store.append_decision_log(entry(i))
        got = await read_all(store)
        assert [e.decision_id for e in got] == [f"d{i}" for i in range(10, 30)]  # the 10 oldest dropped
        await store.append_decision_log(entry(99, reported_at=time.time() - 7200.0))  # older than retention
        assert "d99" not in {e.decision_id for e in await read_all(store)}
        since = got[15].reported_at
        assert all(e.reported_at >= since for e in await read_all(store, since_s=since))

    asyncio.run(main())


@pytest.mark.redis
def test_redis_log_pages_with_xrange_and_trims(redis_server: RedisServer, namespace: str) -> None:
    async def main() -> None:
        store = RedisStore(redis_server.url, namespace=namespace, decision_log_max_entries=50)
        try:
            for i in range(40):
                await store.append_decision_log(entry(i))
            got = await read_all(store)
            assert [e.decision_id for e in got] == [f"d{i}" for i in range(40)]
            assert got[3].context == entry(3).context and got[3].throughput_bps == 4e7
            for i in range(40, 400):
                await store.append_decision_log(entry(i))
            # MAXLEN ~ trims whole radix-tree nodes: about 50 kept, never all 400
            assert 50 <= await store.decision_log_length() < 400
        finally:
            await store.close()

    asyncio.run(main())


def _contexts(n: int) -> list[tuple[dict[str, Any], float, float]]:
    """Real paired situations: (recommend body, WiFi Mbit/s, LTE Mbit/s)."""
    wifi = read_measurements(DATA / "wifi4.csv", "wifi")
    cellular = read_measurements(DATA / "4G.csv", "cellular")
    out = []
    for k, s in enumerate(pair_situations(wifi, cellular, 7)[:n]):
        body = {
            "device_id": f"dev-{k % 5}",
            "interfaces": [i.model_dump(mode="json", exclude_none=True) for i in s.interfaces],
        }
        out.append((body, s.wifi.throughput_mbps, s.cellular.throughput_mbps))
    return out


@pytest.mark.redis
# reason: a child `edgepath log export` process, 300 REST round trips, training and OPE on the export (65 s loaded)
@pytest.mark.timeout(180, method="thread")
def test_export_from_a_running_service_on_redis_feeds_training(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    situations = _contexts(300)
    with running_service(store_url=redis_server.url, redis_namespace=namespace) as svc:
        http = httpx.Client(base_url=svc.http_url, timeout=10.0)

        def play(items: list[tuple[dict[str, Any], float, float]]) -> list[dict[str, Any]]:
            recs = []
            for body, wifi_mbps, lte_mbps in items:
                rec = http.post("/v1/recommendations", json=body).json()
                mbps = wifi_mbps if rec["primary_path"]["access_type"] == "WIFI" else lte_mbps
                ack = http.post(
                    "/v1/outcomes",
                    json={
                        "device_id": body["device_id"],
                        "decision_id": rec["decision_id"],
                        "throughput_bps": mbps * 1e6,
                    },
                )
                assert ack.status_code == 200, ack.text
                recs.append(rec)
            return recs

        first = play(situations[:200])
        unreported = http.post("/v1/recommendations", json=situations[0][0]).json()  # never joined: not logged
        more: list[dict[str, Any]] = []
        traffic = threading.Thread(target=lambda: more.extend(play(situations[200:])))
        traffic.start()  # the export runs while the service keeps serving and logging
        out = tmp_path / "log.jsonl"
        cmd = [sys.executable, "-m", "edgepath.cli", "log", "export", "--store", redis_server.url, "--out", str(out)]
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=60, env={"EDGEPATH_REDIS_NAMESPACE": namespace, "PATH": ""}
        )
        traffic.join(30)
        assert done.returncode == 0, done.stderr

    lines = [json.loads(line) for line in out.read_text().splitlines()]
    ids = [d["decision_id"] for d in lines]
    assert len(ids) == len(set(ids)) and 200 <= len(ids) <= 300
    assert ids[:200] == [r["decision_id"] for r in first]  # in join order, every joined decision
    assert unreported["decision_id"] not in ids
    row, (body, wifi_mbps, lte_mbps) = lines[0], situations[0]
    assert row["format"] == DECISION_LOG_FORMAT
    assert row["context"] == body["interfaces"]  # the raw context as received, not only the features
    assert row["arms"] == ["WIFI", "LTE"] and row["policy"] == first[0]["policy"]
    assert row["propensity"] == first[0]["primary_path"]["propensity"]
    assert row["model_version"] == first[0]["model_version"]
    chosen_mbps = wifi_mbps if row["arm_index"] == 0 else lte_mbps
    assert row["throughput_bps"] == pytest.approx(chosen_mbps * 1e6)
    samples = read_decision_log(out)  # the train-offline reader: one format
    assert len(samples) == len(lines)
    model = train_offline([], samples, OfflineConfig())
    assert model.n_logged == len(lines)
    # ... and evaluate three policies on it off-policy (the `edgepath eval ope` code path)
    report = off_policy_evaluation(load_log(out), ["wifi_first", "lte_first", "ridge_squarecb"], n_bootstrap=100)
    for row in report["policies"].values():
        for est in ("ips", "snips", "dr", "adr"):
            assert row[est]["ci95"][0] <= row[est]["ci95"][1] and 0.0 <= row["matched_fraction"] <= 1.0


def test_export_writes_nothing_half_done_and_counts(tmp_path: Path) -> None:
    async def main() -> int:
        store = MemoryStore()
        for i in range(2500):
            await store.append_decision_log(entry(i))
        return await export_decision_log(store, tmp_path / "x.jsonl", page_size=1000)

    assert asyncio.run(main()) == 2500
    assert len((tmp_path / "x.jsonl").read_text().splitlines()) == 2500
    assert not (tmp_path / "x.jsonl.tmp").exists()


def test_export_refuses_the_in_process_store(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "edgepath.cli", "log", "export", "--store", "memory://", "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "shared store" in done.stderr
