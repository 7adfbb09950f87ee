"""The serving model's publication time and provenance (``edgepath_model_published_timestamp_seconds``,
``edgepath_model_info``): the model's own time, never the process's start. Replicas serving one snapshot export
its ``published_at``, however long ago each was restarted; a warm-start artefact exports its card's training day."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from edgepath.engines.primary_path import PrimaryPathBandit
from edgepath.main import Service
from edgepath.metrics import Metrics
from edgepath.settings import Settings, load_settings
from edgepath.state.backend import MemoryBackend
from edgepath.training.online import ModelRegistry
from edgepath.training.provenance import ModelProvenance, artefact_trained_at
from edgepath.training.snapshots import SnapshotStore

ROOT = Path(__file__).resolve().parents[2]
V2 = ROOT / "models" / "primary-path-v2"
KEY = b"provenance-test-key-0123"


class SharedMemoryBackend(MemoryBackend):
    """The in-process backend taken for a shared one: Service.build wires the snapshot follower on it."""

    shared = True


def info_series(metrics: Metrics) -> list[dict[str, str]]:
    return [
        s.labels
        for family in metrics.registry.collect()
        if family.name == "edgepath_model_info"
        for s in family.samples
    ]


def gauge(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name)


async def test_replica_exports_the_snapshots_published_at_not_its_start() -> None:
    backend = SharedMemoryBackend()
    svc = Service.build(Settings(hmac_key=KEY.decode(), trainer=False), backend=backend)
    assert info_series(svc.metrics) == [
        {"version": "1", "policy": svc.registry.current.model.policy_name, "source": "cold"}
    ]
    model = PrimaryPathBandit()
    await SnapshotStore(backend.snapshots, KEY).publish(model, 18, [])
    record = await backend.snapshots.read()
    assert record is not None
    published_at = json.loads(record.meta)["published_at"]
    # a replica restarted later adopts the same snapshot: a process's own clock would differ from it
    assert await svc.follower.check()
    assert svc.registry.current.version == 18
    assert gauge(svc.metrics, "edgepath_model_published_timestamp_seconds") == published_at
    assert gauge(svc.metrics, "edgepath_model_version") == 18
    # one series: the cold model's is gone
    assert info_series(svc.metrics) == [{"version": "18", "policy": model.policy_name, "source": "snapshot"}]


def test_artefact_counts_from_its_training_day() -> None:
    svc = Service.build(load_settings(model_path=V2))
    card = json.loads((V2 / "card.json").read_text())
    day = datetime.datetime.fromisoformat(card["trained_at"]).replace(tzinfo=datetime.UTC)
    assert gauge(svc.metrics, "edgepath_model_published_timestamp_seconds") == day.timestamp()
    (series,) = info_series(svc.metrics)
    assert series["source"] == "artefact"


def test_trained_at_forms() -> None:
    assert artefact_trained_at({"trained_at": "2026-11-24"}) == 1795478400.0
    assert artefact_trained_at({"trained_at": "2026-11-24T01:00:00+01:00"}) == 1795478400.0
    assert artefact_trained_at({"trained_at": "last week"}) is None
    assert artefact_trained_at({}) is None and artefact_trained_at(None) is None


async def test_local_refit_counts_from_now_and_a_renumbering_keeps_the_time() -> None:
    now = [1000.0]
    metrics = Metrics.create()
    registry = ModelRegistry(PrimaryPathBandit())
    provenance = ModelProvenance(metrics, clock=lambda: now[0])
    provenance.started(registry.current, "cold")
    registry.on_publish(provenance.published)
    now[0] = 2000.0
    refitted = PrimaryPathBandit()
    await registry.publish(refitted)
    assert gauge(metrics, "edgepath_model_published_timestamp_seconds") == 2000.0
    assert [s["source"] for s in info_series(metrics)] == ["refit"]
    now[0] = 3000.0
    await registry.publish(refitted, 7)  # the same model renumbered
    assert gauge(metrics, "edgepath_model_published_timestamp_seconds") == 2000.0
    assert info_series(metrics) == [{"version": "7", "policy": refitted.policy_name, "source": "refit"}]
