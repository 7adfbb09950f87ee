"""SSMP per-device scores and the fleet score (issue 4): one device may not tilt every device's server selection.

Each (server, device) keeps its own Eq. 3 state; a server's fleet state is the median over at most ``fleet_devices``
devices' fresh states (:func:`edgepath.state.base.fleet_score`). The same cases on MemoryStore and on RedisStore
(real redis-server; its aggregate is a Lua script, checked against the Python one), through the decision plane with
the outcome guard as the service builds it, and through the store alone.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from edgepath.adapters.ssmp import record_server_transfer, select_server, ssmp_config, ssmp_selector
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit
from edgepath.engines.ssmp import DEFAULT_FLEET_DEVICES, MAX_FLEET_DEVICES, SsmpConfig
from edgepath.metrics import Metrics
from edgepath.plane import DecisionPlane
from edgepath.security.plausibility import MemoryQuarantine, OutcomeGuard
from edgepath.settings import Settings
from edgepath.state.base import PathEstimate, ServerScore, ServerScoreView, StateStore, fleet_members, fleet_score
from edgepath.state.memory import MemoryStore
from edgepath.state.redis import RedisStore
from edgepath.training.online import ModelRegistry
from edgepath.types import ContentRequest, OutcomeReport, Principal, RecommendRequest, ServerTransfer
from pydantic import ValidationError

MBPS = 1e6
GOOD, WORSE = "192.0.2.20", "192.0.2.77"
#: A 10 Mbit/s Wi-Fi link: the outcome guard's bound is 1.5 × 10 = 15 Mbit/s.
INTERFACES = [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60.0, "link_speed_mbps": 10.0}]


def content(good_bps: float = 6 * MBPS, worse_bps: float = 6 * MBPS) -> dict[str, Any]:
    """An elephant between GOOD and WORSE, as the device measures them now (one path each, no loss)."""
    return {
        "expected_size_bytes": 300 * 2**20,
        "candidates": [
            {
                "address": address,
                "dns_interface": "wlan0",
                "paths": [{"interface": "wlan0", "rtt_ms_samples": [10.0], "loss": 0.0, "bandwidth_bps": b}],
            }
            for address, b in ((GOOD, good_bps), (WORSE, worse_bps))
        ],
    }


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "memory":
        s: Any = MemoryStore(max_decisions=1000)
    else:
        server = request.getfixturevalue("redis_server")
        s = RedisStore(server.url, namespace=request.getfixturevalue("namespace"))
    yield s
    await s.close()


def plane(store: StateStore, **ssmp: Any) -> DecisionPlane:
    settings = Settings(ssmp=ssmp)
    model = PrimaryPathBandit(BanditConfig(policy=settings.policy, seed=0))
    guard = OutcomeGuard(1.5, None, MemoryQuarantine())
    return DecisionPlane(ModelRegistry(model), store, settings, Metrics.create(), guard=guard)


async def select(p: DecisionPlane, device: str) -> dict[str, Any]:
    body = {"device_id": device, "interfaces": INTERFACES, "content": content()}
    rec = await p.recommend(Principal(device_id=device), RecommendRequest.model_validate(body))
    assert rec.server_selection is not None
    return rec.server_selection.model_dump()


async def transfer(p: DecisionPlane, device: str, address: str, goodput_bps: float) -> None:
    """``device`` decides, then reports a 1 s transfer from ``address`` at ``goodput_bps`` (no per-path figures)."""
    me = Principal(device_id=device)
    body = {"device_id": device, "interfaces": INTERFACES, "content": content()}
    rec = await p.recommend(me, RecommendRequest.model_validate(body))
    report = {
        "device_id": device,
        "decision_id": rec.decision_id,
        "throughput_bps": goodput_bps,
        "server_transfer": {"address": address, "size_bytes": int(goodput_bps / 8), "duration_ms": 1000.0},
    }
    assert (await p.report_outcome(me, OutcomeReport.model_validate(report))).accepted


async def test_one_device_reporting_bad_transfers_does_not_move_other_devices_selection(store: StateStore) -> None:
    """Four devices measured GOOD at 8 Mbit/s and WORSE at 4; a fifth reports GOOD at 0.1 Mbit/s and WORSE at its
    whole bound (15 Mbit/s), three times each, last: all plausible. A device without history of its own is still
    sent to GOOD with the same score (Eq. 3: 0.5 · 6 now + 0.5 · 8 stored = 7 Mbit/s, WORSE 5). With one shared
    EWMA per server (before), GOOD's score fell to ~1.1 Mbit/s and WORSE's rose to ~13.6, and it got WORSE."""
    p = plane(store)
    for device in ("h0", "h1", "h2", "h3"):
        await transfer(p, device, GOOD, 8 * MBPS)
        await transfer(p, device, WORSE, 4 * MBPS)
    before = await select(p, "victim")
    assert (before["address"], before["rule"]) == (GOOD, "elephant_q")
    assert before["score"] == pytest.approx(7 * MBPS)

    for _ in range(3):
        await transfer(p, "attacker", GOOD, 0.1 * MBPS)
        await transfer(p, "attacker", WORSE, 15 * MBPS)

    after = await select(p, "victim")
    assert after == before
    # an honest device's own history stays its own: h0 reads its 8 Mbit/s of GOOD, not the attacker's
    assert (await select(p, "h0"))["score"] == pytest.approx(7 * MBPS)
    fleet = await store.get_server_scores([GOOD, WORSE])
    assert (fleet[GOOD].q_bps, fleet[WORSE].q_bps) == (8 * MBPS, 4 * MBPS)  # medians of 5: the attacker is one rank


async def test_a_devices_own_history_takes_precedence_over_the_fleets(store: StateStore) -> None:
    """The attacker's own history says GOOD is bad (0.1 Mbit/s): its selection follows it (SSMP per client, as in
    the paper), to WORSE, whose score it has none of and so reads the fleet's (0.5 · 6 + 0.5 · 4 = 5 Mbit/s)."""
    p = plane(store)
    for device in ("h0", "h1", "h2"):
        await transfer(p, device, GOOD, 8 * MBPS)
        await transfer(p, device, WORSE, 4 * MBPS)
    await transfer(p, "attacker", GOOD, 0.1 * MBPS)
    own = await select(p, "attacker")
    assert (own["address"], own["rule"]) == (WORSE, "elephant_q")
    assert own["score"] == pytest.approx(5 * MBPS)
    assert (await select(p, "victim"))["address"] == GOOD


async def test_a_stale_own_state_gives_way_to_the_fleets(store: StateStore) -> None:
    """A device's own state older than ``stale_age_s`` (600 s) is not used: its selection reads the fleet's, and a
    stale state is not counted in the fleet median either (dropped from the store)."""
    selector = ssmp_selector(Settings())
    request = ContentRequest.model_validate(content())

    async def report(device: str, address: str, goodput_bps: float, now_s: float) -> None:
        t = ServerTransfer.model_validate(
            {"address": address, "size_bytes": int(goodput_bps / 8), "duration_ms": 1000.0}
        )
        await record_server_transfer(selector, store, t, now_s, device_id=device)

    await report("x", GOOD, 1 * MBPS, now_s=0.0)
    sel = await select_server(selector, store, request, 10.0, "x")  # its own: GOOD 0.5 · 6 + 0.5 · 1 = 3.5 Mbit/s
    assert (sel.address, sel.score, sel.stale_servers) == (WORSE, pytest.approx(6 * MBPS), [WORSE])
    for device in ("h0", "h1"):
        await report(device, GOOD, 8 * MBPS, now_s=700.0)
        await report(device, WORSE, 4 * MBPS, now_s=700.0)
    assert (await store.get_server_scores([GOOD]))[GOOD] == ServerScore(8 * MBPS, 700.0)  # x's 1 Mbit/s dropped
    sel = await select_server(selector, store, request, 710.0, "x")
    assert (sel.address, sel.score, sel.stale_servers) == (GOOD, pytest.approx(7 * MBPS), [])
    assert (await store.get_server_views([GOOD], "x"))[GOOD].own is None


async def test_fleet_keeps_the_most_recently_updated_devices(store: StateStore) -> None:
    """Beyond ``max_devices`` the least recently updated device's state is evicted (from the store too); the writer's
    own is kept whatever its clock says."""
    for i, device in enumerate("abcd"):
        await store.record_device_server_score(GOOD, device, ServerScore(float(i + 1), 1.0 + i), 600.0, 3)
    assert (await store.get_server_scores([GOOD]))[GOOD] == ServerScore(3.0, 4.0)  # median of b, c, d: 2, 3, 4
    assert await store.get_server_views([GOOD], "a") == {GOOD: ServerScoreView(own=None, fleet=ServerScore(3.0, 4.0))}
    # a device whose clock is behind: kept (the writer), and the oldest other one (b) goes
    await store.record_device_server_score(GOOD, "e", ServerScore(100.0, 0.5), 600.0, 3)
    assert (await store.get_server_scores([GOOD]))[GOOD] == ServerScore(4.0, 4.0)  # median of c, d, e: 3, 4, 100
    views = await store.get_server_views([GOOD], "b")
    assert views[GOOD].own is None
    assert (await store.get_server_views([GOOD], "e"))[GOOD].own == ServerScore(100.0, 0.5)
    # max_devices 1: the fleet is the writer alone
    await store.record_device_server_score(GOOD, "c", ServerScore(7.0, 5.0), 600.0, 1)
    assert (await store.get_server_scores([GOOD]))[GOOD] == ServerScore(7.0, 5.0)


async def test_fleet_paths_are_medians_of_a_majority(store: StateStore) -> None:
    """Per interface, B and p are medians over the devices that have one, when more than half of them do: an
    interface only one of three devices names (or only one has B for) is not in the fleet's estimates."""
    paths = [
        {"wlan0": PathEstimate(80e6, 0.01), "evil0": PathEstimate(1.0, 0.9)},
        {"wlan0": PathEstimate(60e6, None)},
        {"wlan0": PathEstimate(None, 0.03), "wwan0": PathEstimate(None, 0.5)},
    ]
    for i, per_path in enumerate(paths):
        await store.record_device_server_score(GOOD, f"d{i}", ServerScore(float(i), 10.0 + i, per_path), 600.0, 16)
    fleet = (await store.get_server_scores([GOOD]))[GOOD]
    assert fleet == ServerScore(1.0, 12.0, {"wlan0": PathEstimate(70e6, 0.02)})
    # each device still reads its own estimates
    assert (await store.get_server_views([GOOD], "d0"))[GOOD].own == ServerScore(0.0, 10.0, paths[0])


async def test_store_aggregate_matches_the_python_reference(store: StateStore) -> None:
    """Random writes of 9 devices to 2 servers (clocks that sometimes run behind, missing B or p, up to 3
    interfaces): after each, the stored fleet state is exactly :func:`fleet_score` of :func:`fleet_members` (on
    Redis: the Lua script's arithmetic and its 17-digit numbers against Python's)."""
    rng = random.Random(7)
    mirror: dict[str, dict[str, ServerScore]] = {GOOD: {}, WORSE: {}}
    now = 1_700_000_000.0
    for _ in range(120):
        server = rng.choice((GOOD, WORSE))
        device = f"dev-{rng.randrange(9)}"
        now += rng.choice((0.001, 0.1, 7.3, 250.0, 400.0))
        at = now - rng.choice((0.0, 0.0, 0.0, 3.1))  # a replica whose clock is behind
        paths = {
            f"if{j}": PathEstimate(
                None if rng.random() < 0.2 else rng.uniform(1e5, 1e8),
                None if rng.random() < 0.2 else rng.random() / 10,
            )
            for j in rng.sample(range(3), rng.randrange(4))
        }
        score = ServerScore(rng.uniform(1e5, 1e8), at, paths)
        cap = rng.choice((1, 3, 5))
        await store.record_device_server_score(server, device, score, 600.0, cap)
        mirror[server] = fleet_members({**mirror[server], device: score}, device, 600.0, cap)
        stored = (await store.get_server_scores([server]))[server]
        assert stored == fleet_score(list(mirror[server].values()))
        for other in (f"dev-{i}" for i in range(9)):
            view = (await store.get_server_views([server], other))[server]
            assert view.own == mirror[server].get(other)


@pytest.mark.redis
async def test_a_recommend_reads_every_candidate_in_the_decisions_round_trip(redis_server: Any, namespace: str) -> None:
    """On Redis a Recommend with content takes two round trips and no command outside the auto-pipeline (the SSMP
    read is one script beside the decision's SET; before, it was a direct MGET: three round trips), and an outcome
    with a ``server_transfer`` four (the SSMP read and the atomic write: as many as the MGET and SET before)."""
    store = RedisStore(redis_server.url, namespace=namespace)
    p = plane(store)
    direct = [0]
    execute = store.redis.execute_command

    async def counting(*args: Any, **kwargs: Any) -> Any:
        direct[0] += 1
        return await execute(*args, **kwargs)

    try:
        await transfer(p, "dev-1", GOOD, 8 * MBPS)  # scripts loaded, the device's access types written
        store.redis.execute_command = counting  # type: ignore[method-assign]
        before = store._auto.pipelines
        await select(p, "dev-1")
        assert (store._auto.pipelines - before, direct[0]) == (2, 0)
        before = store._auto.pipelines
        await transfer(p, "dev-1", GOOD, 8 * MBPS)
        assert (store._auto.pipelines - before - 2, direct[0]) == (4, 0)  # minus the Recommend of transfer()
    finally:
        await store.close()


@pytest.mark.redis
async def test_a_score_a_previous_release_wrote_reads_as_the_fleets(redis_server: Any, namespace: str) -> None:
    """The previous release kept one shared score per server at ``{ns}:ssmp:{server}`` (``[q, at]`` or ``[q, at,
    paths]``). It reads as the fleet score for every device, and the first update of that server by this release
    replaces it with the devices' median."""
    store = RedisStore(redis_server.url, namespace=namespace)
    try:
        await store.redis.set(store.server_score_key(GOOD), '[9000000.0, 1000.5, {"wlan0": [8000000.0, 0.0]}]')
        await store.redis.set(store.server_score_key(WORSE), "[3000000.0, 1000.0]")
        views = await store.get_server_views([GOOD, WORSE], "anyone")
        assert views == {
            GOOD: ServerScoreView(own=None, fleet=ServerScore(9e6, 1000.5, {"wlan0": PathEstimate(8e6, 0.0)})),
            WORSE: ServerScoreView(own=None, fleet=ServerScore(3e6, 1000.0)),
        }
        await store.record_device_server_score(GOOD, "dev-1", ServerScore(5e6, 1001.0), 600.0, 16)
        assert (await store.get_server_scores([GOOD]))[GOOD] == ServerScore(5e6, 1001.0)
    finally:
        await store.close()


@pytest.mark.redis
async def test_concurrent_replicas_lose_no_devices_state(redis_server: Any, namespace: str) -> None:
    """Two replicas write 16 devices' states of one server at once: every state is kept and the fleet score is the
    median of all of them (one script per write: no read-modify-write between replicas)."""
    replicas = [RedisStore(redis_server.url, namespace=namespace) for _ in range(2)]
    scores = {f"dev-{i}": ServerScore(float(i), 100.0 + i / 100) for i in range(16)}
    try:
        await asyncio.gather(
            *(
                replicas[i % 2].record_device_server_score(GOOD, device, score, 600.0, 16)
                for i, (device, score) in enumerate(scores.items())
            )
        )
        for device, score in scores.items():
            assert (await replicas[0].get_server_views([GOOD], device))[GOOD].own == score
        assert (await replicas[1].get_server_scores([GOOD]))[GOOD] == ServerScore(7.5, 100.15)
    finally:
        for r in replicas:
            await r.close()


async def test_fleet_devices_comes_from_the_settings_within_its_bounds(store: StateStore) -> None:
    """``ssmp.fleet_devices`` (``EDGEPATH_SSMP__FLEET_DEVICES``, 1–64, default 16) is the K the plane's writes use:
    with 1, the fleet score is the last writer's."""
    assert Settings().ssmp.fleet_devices == DEFAULT_FLEET_DEVICES
    for bad in (0, MAX_FLEET_DEVICES + 1):
        with pytest.raises(ValidationError, match="fleet_devices"):
            Settings(ssmp={"fleet_devices": bad})
        with pytest.raises(ValueError, match="fleet_devices"):
            SsmpConfig(fleet_devices=bad)
    assert ssmp_config(Settings(ssmp={"fleet_devices": MAX_FLEET_DEVICES})).fleet_devices == MAX_FLEET_DEVICES
    p = plane(store, fleet_devices=1)
    await transfer(p, "h0", GOOD, 8 * MBPS)
    await transfer(p, "h1", GOOD, 2 * MBPS)
    assert (await store.get_server_scores([GOOD]))[GOOD].q_bps == 2 * MBPS
