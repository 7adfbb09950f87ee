"""Issue 17, item 4: N replicas explore like one.

Two replicas (two models, two :class:`FleetExploration` syncs) share a real redis-server and split a
stream of decisions between them; one replica alone makes the same number of decisions. After the
replicas' sync rounds, each replica's exploration schedule — the paper's ActiveExplorer's decayed p,
epsilon_greedy's ε, explore_first's round counter — equals the single replica's. Without the sync each
replica would have decayed only by its own half of the decisions (asserted as the control). A replica
started late catches up with the fleet's history at its first round. SquareCB's γ_t counts trained
outcomes (carried by the trainer's model) and is unaffected by deciding.
"""

from __future__ import annotations

import pytest
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit, TrainingSample
from edgepath.state.redis import RedisStore
from edgepath.state.redis_backend import RedisBackend
from edgepath.training.exploration import FleetExploration
from edgepath.training.online import ModelRegistry
from edgepath.types import AccessType, InterfaceContext

from state.redis_helpers import RedisServer

pytestmark = pytest.mark.redis

ARMS = ("WIFI", "LTE")


def interfaces(i: int) -> list[InterfaceContext]:
    return [
        InterfaceContext(name="wlan0", access_type=AccessType.WIFI, wifi_rssi_dbm=-50.0 - (i % 30)),
        InterfaceContext(name="wwan0", access_type=AccessType.LTE, rsrp_dbm=-80.0 - (i % 40)),
    ]


def fitted(policy: str) -> PrimaryPathBandit:
    """A model trained on the same 40 samples (so every copy is fitted, as after the trainer's first refit)."""
    model = PrimaryPathBandit(BanditConfig(policy=policy, seed=3))
    probe = PrimaryPathBandit(BanditConfig(policy=policy, seed=3))
    samples = []
    for i in range(40):
        x = probe.decide(interfaces(i)).features
        samples.append(TrainingSample(tuple(x), ARMS, i % 2, int(i % 3 == 0), 0.5))
    model.update(samples)
    return model


def schedule(model: PrimaryPathBandit) -> float:
    policy = model._policies[ARMS]
    lib = getattr(policy, "lib", policy)
    return float(lib.explore_cnt) if model.policy_name == "explore_first" else float(lib.explore_prob)


@pytest.mark.parametrize("policy", ["active_explorer", "epsilon_greedy", "explore_first"])
async def test_two_replicas_follow_the_schedule_of_one(redis_server: RedisServer, namespace: str, policy: str) -> None:
    single = fitted(policy)
    a, b = ModelRegistry(fitted(policy)), ModelRegistry(fitted(policy))
    store_a = RedisStore(redis_server.url, namespace=namespace)
    store_b = RedisStore(redis_server.url, namespace=namespace)
    sync_a, sync_b = FleetExploration(RedisBackend(store_a), a), FleetExploration(RedisBackend(store_b), b)
    try:
        n = 300
        for i in range(n):
            single.decide(interfaces(i))
            (a if i % 3 else b).current.model.decide(interfaces(i))  # uneven split: 200 / 100
            if i % 25 == 24:
                await (sync_a if i % 2 else sync_b).sync_once()
        own_b = schedule(b.current.model)
        await sync_a.sync_once()
        await sync_b.sync_once()
        await sync_a.sync_once()  # b's last decisions reach a
        one = schedule(single)
        assert schedule(a.current.model) == pytest.approx(one, rel=1e-9)
        assert schedule(b.current.model) == pytest.approx(one, rel=1e-9)
        if policy != "explore_first":
            assert one < own_b  # control: a replica alone would have explored more (schedule N times slower)
        else:
            assert one == n and own_b < n

        late = ModelRegistry(fitted(policy))  # a replica that starts after the fleet's 300 decisions
        store_c = RedisStore(redis_server.url, namespace=namespace)
        try:
            await FleetExploration(RedisBackend(store_c), late).sync_once()
            assert schedule(late.current.model) == pytest.approx(one, rel=1e-9)
        finally:
            await store_c.close()
    finally:
        await store_a.close()
        await store_b.close()


async def test_counts_survive_a_model_swap(redis_server: RedisServer, namespace: str) -> None:
    """Decisions made before a hot swap are still reported: the new version carries the unsynced count."""
    registry = ModelRegistry(fitted("active_explorer"))
    store = RedisStore(redis_server.url, namespace=namespace)
    try:
        for i in range(7):
            registry.current.model.decide(interfaces(i))
        new = registry.current.model.clone()
        new.decisions_unsynced = {}
        new.carry_exploration_from(registry.current.model)
        await registry.publish(new)
        await FleetExploration(RedisBackend(store), registry).sync_once()
        assert int(await store.redis.hget(f"{namespace}:exploration:decisions", "WIFI,LTE")) == 7
    finally:
        await store.close()


def test_squarecb_schedule_counts_trained_outcomes_not_decisions() -> None:
    model = fitted("ridge_squarecb")
    gamma = model._policies[ARMS].model.gamma_t()
    for i in range(50):
        model.decide(interfaces(i))
    model.advance_exploration(ARMS, 1000)
    assert model._policies[ARMS].model.gamma_t() == gamma
