"""The plane's vectorised RecommendBatch returns what one Recommend per item returns (issue 16).

Two planes built from the same settings and the same shipped model (same seeds: the bandit's and SSMP's
generators start alike): one decides a batch, the other the same requests one by one, in order. Every
member except the decision id and time is equal — primary path and propensity, MLPM, congestion, SSMP
server selection (requests with content) and steering — and every batch decision is logged in the store.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
from edgepath.adapters.mlpm import BATCH_SLICE
from edgepath.main import Service
from edgepath.settings import Settings
from edgepath.types import Principal, RecommendRequest

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "primary-path-v2"


def request(i: int) -> RecommendRequest:
    body: dict[str, Any] = {
        "device_id": f"cpe-{i % 7}",
        "interfaces": [
            {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -40.0 - 3 * i, "link_speed_mbps": 20.0 + 9 * i},
            {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -120.0 + 2 * i, "sinr_db": float(i % 20)},
        ],
    }
    if i % 3 == 0:  # SSMP: two candidate servers
        body["content"] = {
            "expected_size_bytes": 10_000_000 if i % 2 else 1000,
            "candidates": [
                {
                    "address": f"10.0.0.{k}",
                    "dns_interface": name,
                    "paths": [{"interface": name, "rtt_ms_samples": [20.0 + k * i]}],
                }
                for k, name in ((1, "wlan0"), (2, "wwan0"))
            ],
        }
    if i % 4 == 1:  # MLPM with a subflow history (not cached)
        body["subflow_histories"] = [
            {"interface": "wlan0", "rtt_samples": [{"t_ms": 100.0 * k, "rtt_ms": 30.0 + k * i} for k in range(6)]}
        ]
    if i == 5:  # a single-arm device
        body["interfaces"] = body["interfaces"][:1]
    return RecommendRequest.model_validate(body)


def test_a_batch_decides_what_single_recommends_decide() -> None:
    settings = Settings(model_path=SHIPPED, hmac_key="plane-batch-test-hmac-key-0123456789abcdef")
    batch_plane, single_plane = Service.build(settings).plane, Service.build(settings).plane
    requests = [request(i) for i in range(24)]
    items = [(Principal(device_id=r.device_id), r) for r in requests]

    async def run() -> tuple[list[Any], list[Any], list[Any]]:
        batch = await batch_plane.recommend_batch(copy.deepcopy(items))
        single = [await single_plane.recommend(p, r) for p, r in items]
        logged = [await batch_plane.store.get_decision(rec.decision_id) for rec in batch]
        return batch, single, logged

    batch, single, logged = asyncio.run(run())
    propensities = set()
    for b, s, record, req in zip(batch, single, logged, requests, strict=True):
        bd, sd = b.model_dump(), s.model_dump()
        for member in ("decision_id", "decided_at_unix_ms"):
            bd.pop(member), sd.pop(member)
        batch_propensity, single_propensity = bd["primary_path"].pop("propensity"), sd["primary_path"].pop("propensity")
        assert batch_propensity == pytest.approx(single_propensity, rel=1e-12)
        assert bd == sd
        assert (req.content is None) == (b.server_selection is None)
        propensities.add(round(b.primary_path.propensity, 6))
        assert record is not None and record.device_id == req.device_id
        assert record.interface == b.primary_path.interface and record.propensity == b.primary_path.propensity
    # a fitted model, not a cold one's uniform 0.5 (on these contexts the shipped model is confident: its SquareCB
    # draws the slower arm at the 0.01 exploration floor, so the WiFi × LTE decisions log 0.99, or 0.01)
    assert propensities - {0.5, 1.0}, propensities
    assert len({r.decision_id for r in batch}) == len(batch)


def test_a_call_that_arrives_during_a_batch_is_answered_between_its_stages() -> None:
    """The batch gives the loop to other calls between its stages: a Recommend started after the batch (on the
    in-process store, whose calls never suspend) finishes first, where in one piece the batch would end first."""
    plane = Service.build(Settings(model_path=SHIPPED, hmac_key="plane-batch-test-hmac-key-0123456789abcdef")).plane
    items = [(Principal(device_id=r.device_id), r) for r in (request(i) for i in range(24))]
    lone = request(7)
    finished: list[str] = []

    async def batch() -> None:
        await plane.recommend_batch(items)
        finished.append("batch")

    async def single() -> None:
        await plane.recommend(Principal(device_id=lone.device_id), lone)
        finished.append("single")

    async def run() -> None:
        first = asyncio.create_task(batch())
        await asyncio.sleep(0)  # the batch starts: its first step runs up to its first pause
        await asyncio.gather(first, asyncio.create_task(single()))

    asyncio.run(run())
    assert finished == ["single", "batch"]


def test_mlpm_decides_a_batch_in_slices_with_the_single_sections() -> None:
    """MLPM takes a batch's requests with histories ``BATCH_SLICE`` at a time (a pause between slices): across the
    slices' seams every scheduler section is still the one-by-one section, in order."""
    settings = Settings(model_path=SHIPPED, hmac_key="plane-batch-test-hmac-key-0123456789abcdef")
    batch_plane, single_plane = Service.build(settings).plane, Service.build(settings).plane
    requests = []
    for i in range(2 * BATCH_SLICE + 5):
        body = request(i % 16).model_dump(mode="json", exclude_none=True)
        body["subflow_histories"] = [
            {
                "interface": iface["name"],
                "rtt_t_ms": [100.0 * k for k in range(8)],
                "rtt_ms": [20.0 + k * (1.0 + i / 10.0) for k in range(8)],
            }
            for iface in body["interfaces"]
        ]
        requests.append(RecommendRequest.model_validate(body))
    items = [(Principal(device_id=r.device_id), r) for r in requests]

    async def run() -> tuple[list[Any], list[Any]]:
        return await batch_plane.recommend_batch(items), [await single_plane.recommend(p, r) for p, r in items]

    batch, single = asyncio.run(run())
    assert [b.scheduler for b in batch] == [s.scheduler for s in single]
    slopes = {w.rtt_slope_ms_per_s for b in batch for w in b.scheduler.weights if w.interface == "wlan0"}
    assert len(slopes) == len(batch)  # every request's own history
