"""``edgepath train`` serves its own counters at ``GET /metrics`` (``metrics_port``): the outcome-log entries only the
trainer drops (``edgepath_outcomes_dropped_total{reason="undecodable"}``) and the snapshots it refuses were counted in
a process nobody scraped. The refit processes it starts again after one died are counted there too. A real trainer
process on a real redis-server (tests/service/state/cluster_helpers.py)."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from edgepath.metrics import OUTCOME_DROP_REASONS, SNAPSHOT_REJECT_REASONS
from edgepath.state.codec import encode_record
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis

from state.cluster_helpers import Cluster
from state.redis_helpers import RedisServer, decision, outcome, wait_until

_SERVED = re.compile(r"trainer metrics: http://127\.0\.0\.1:(\d+)/metrics")


def _scrape(port: int) -> dict[tuple[str, str], float]:
    """(series name, reason label) → value of a ``GET /metrics``."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).raise_for_status().text
    return {
        (s.name, s.labels.get("reason", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _start_serving_trainer(cluster: Cluster, env: dict[str, str]) -> tuple[Any, int]:
    """A trainer of ``cluster`` started with ``env``, once it serves its metrics: (the trainer, its metrics port)."""
    trainer = cluster.start_trainer(extra_env=env)
    served = wait_until(
        lambda: _SERVED.search(trainer.log.read_text()) or trainer.popen.poll() is not None,
        60,
        what="the trainer to serve its metrics",
    )
    assert trainer.popen.poll() is None, cluster.logs()
    return trainer, int(served.group(1))


def test_the_trainer_serves_its_counters_on_its_metrics_port(
    tmp_path: Path, redis_server: RedisServer, namespace: str
) -> None:
    cluster = Cluster(tmp_path, redis_server, namespace=namespace)
    try:
        trainer, port = _start_serving_trainer(cluster, {"EDGEPATH_METRICS_PORT": "0", "EDGEPATH_HOST": "127.0.0.1"})
        first = _scrape(port)
        # every reason at 0 from the start (an alert's increase() sees the first one), and nothing else: the trainer
        # is scraped under the deciders' job, where serving gauges it never sets would read as a pod on model 0
        assert {("edgepath_outcomes_dropped_total", r): 0.0 for r in OUTCOME_DROP_REASONS}.items() <= first.items()
        assert {("edgepath_snapshots_rejected_total", r): 0.0 for r in SNAPSHOT_REJECT_REASONS}.items() <= first.items()
        assert first[("edgepath_refit_restarts_total", "")] == 0.0  # the refit process died and was started again
        assert {name for name, _ in first} <= {
            "edgepath_outcomes_dropped_total",
            "edgepath_outcomes_dropped_created",
            "edgepath_snapshots_rejected_total",
            "edgepath_snapshots_rejected_created",
            "edgepath_refit_restarts_total",
            "edgepath_refit_restarts_created",
            "edgepath_trainer_lock_held",
            "edgepath_trainer_backlog_outcomes",
            "edgepath_trainer_last_publish_timestamp_seconds",
        }, sorted(first)
        # an outcome-log entry no replica could have written: the trainer drops it and counts it
        with Redis.from_url(redis_server.url) as r:
            r.xadd(f"{namespace}:outcomes", {"o": b"not an outcome record"})
        wait_until(
            lambda: (
                _scrape(port).get(("edgepath_outcomes_dropped_total", "undecodable")) == 1.0
                or trainer.popen.poll() is not None
            ),
            30,
            what="the trainer to count the undecodable entry",
        )
        assert trainer.popen.poll() is None, cluster.logs()
        assert trainer.stop(signal.SIGTERM) == 0, cluster.logs()
        # a stopped trainer says so: which signal, the lock it gave up, what it left untrained
        assert re.search(
            r"trainer \S+ stopped on SIGTERM: trainer lock released; \d+ outcomes not yet trained",
            trainer.log.read_text(),
        ), cluster.logs()
    finally:
        cluster.close()


def test_the_trainer_exports_its_lock_its_backlog_and_its_last_publication(
    tmp_path: Path, redis_server: RedisServer, namespace: str
) -> None:
    """What on-call needs to see a dead or lagging trainer: whether it holds the lock, the outcomes it has not trained
    on (the outcome stream's length: trained entries are deleted), and when it last published."""
    cluster = Cluster(tmp_path, redis_server, namespace=namespace)
    env = {
        "EDGEPATH_METRICS_PORT": "0",
        "EDGEPATH_HOST": "127.0.0.1",
        "EDGEPATH_BATCH_SIZE": "3",
        "EDGEPATH_STORE_MEMORY_POLL_S": "0.1",
    }
    try:
        trainer, port = _start_serving_trainer(cluster, env)

        def gauges() -> tuple[float | None, float | None, float | None]:
            got = _scrape(port)
            return (
                got.get(("edgepath_trainer_lock_held", "")),
                got.get(("edgepath_trainer_backlog_outcomes", "")),
                got.get(("edgepath_trainer_last_publish_timestamp_seconds", "")),
            )

        wait_until(lambda: gauges()[0] == 1.0, 30, what="the trainer to take the lock")
        assert gauges()[2] == 0.0, "nothing published yet"
        with Redis.from_url(redis_server.url) as r:
            for i in range(2):  # below a batch: not trained, the backlog
                r.xadd(f"{namespace}:outcomes", {"o": encode_record(outcome(decision(f"d{i}")))})
            wait_until(lambda: gauges()[1] == 2.0, 30, what="the backlog of 2 outcomes")
            before = time.time()
            r.xadd(f"{namespace}:outcomes", {"o": encode_record(outcome(decision("d2")))})  # a batch: trained
        wait_until(lambda: gauges()[1] == 0.0 and gauges()[2], 60, what="the batch to be trained and published")
        assert gauges()[2] >= before  # type: ignore[operator]
        assert trainer.stop(signal.SIGTERM) == 0, cluster.logs()
    finally:
        cluster.close()


_TRAINER_GAUGES = (
    "edgepath_trainer_lock_held",
    "edgepath_trainer_backlog_outcomes",
    "edgepath_trainer_last_publish_timestamp_seconds",
)


def test_a_replica_with_the_trainer_role_exports_the_trainer_gauges_and_one_without_it_none(
    tmp_path: Path, redis_server: RedisServer, namespace: str
) -> None:
    """``serve --trainer`` competes for the trainer lock as ``edgepath train`` does, so it exports the same gauges on
    its ``GET /metrics`` (EdgePathTrainerDown and EdgePathTrainerBacklog cover the chart's replicas that train); a
    replica without the trainer role exports none of them: not a lock held at 0 beside the holder's 1."""
    cluster = Cluster(tmp_path, redis_server, namespace=namespace)
    env = {"EDGEPATH_BATCH_SIZE": "3", "EDGEPATH_STORE_MEMORY_POLL_S": "0.1"}
    try:
        trains = cluster.start_replica("trains", extra_env={**env, "EDGEPATH_TRAINER": "true"})
        serves = cluster.start_replica("serves", extra_env={**env, "EDGEPATH_TRAINER": "false"})

        def gauges(replica: Any) -> dict[str, float]:
            text = httpx.get(f"{replica.url}/metrics", timeout=5).raise_for_status().text
            return {
                s.name: s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
                if s.name.startswith("edgepath_trainer_")
            }

        wait_until(lambda: gauges(trains).get(_TRAINER_GAUGES[0]) == 1.0, 30, what="the replica to take the lock")
        assert set(gauges(trains)) == set(_TRAINER_GAUGES), gauges(trains)
        assert gauges(trains)[_TRAINER_GAUGES[2]] == 0.0, "nothing published yet"
        assert gauges(serves) == {}, "a replica without the trainer role exports no trainer gauge"
        with Redis.from_url(redis_server.url) as r:
            for i in range(2):  # below a batch: not trained, the backlog
                r.xadd(f"{namespace}:outcomes", {"o": encode_record(outcome(decision(f"d{i}")))})
            wait_until(lambda: gauges(trains).get(_TRAINER_GAUGES[1]) == 2.0, 30, what="the backlog of 2 outcomes")
            before = time.time()
            r.xadd(f"{namespace}:outcomes", {"o": encode_record(outcome(decision("d2")))})  # a batch: trained
        wait_until(
            lambda: gauges(trains)[_TRAINER_GAUGES[1]] == 0.0 and gauges(trains)[_TRAINER_GAUGES[2]] > 0,
            60,
            what="the batch to be trained and published",
        )
        assert gauges(trains)[_TRAINER_GAUGES[2]] >= before
        assert gauges(serves) == {}
        assert trains.popen.poll() is None and serves.popen.poll() is None, cluster.logs()
        assert trains.stop(signal.SIGTERM) == 0, cluster.logs()
        assert "trainer-backlog" not in trains.log.read_text(), "the backlog task ended only with the replica"
    finally:
        cluster.close()


def test_a_busy_trainer_metrics_port_is_one_line_and_exit_2(
    tmp_path: Path, redis_server: RedisServer, namespace: str
) -> None:
    cluster = Cluster(tmp_path, redis_server, namespace=namespace)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "edgepath.cli", "train", "--store", redis_server.url],
            env=cluster.child_env({"EDGEPATH_METRICS_PORT": str(port), "EDGEPATH_HOST": "127.0.0.1"}),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"metrics port {port} on 127.0.0.1 is in use" in proc.stderr
    assert "Traceback" not in proc.stderr
