"""``OfflineConfig.bandit_config`` derives the bandit's configuration by field name, so a bandit parameter the offline
config gains reaches train-offline and the evaluations without a line of its own."""

from __future__ import annotations

import dataclasses

from edgepath.engines.primary_path import BanditConfig, UtilityConfig
from edgepath.training.offline import OfflineConfig


def test_every_shared_field_reaches_the_bandit() -> None:
    cfg = OfflineConfig(policy="ridge_lints", seed=4, sgd_alpha=0.3, ts_scale=0.07, utility_throughput_cap_bps=5e8)
    bandit = cfg.bandit_config()
    for f in dataclasses.fields(BanditConfig):
        if f.name in OfflineConfig.__dataclass_fields__:
            assert getattr(bandit, f.name) == getattr(cfg, f.name), f.name
    assert bandit.utility == UtilityConfig(throughput_cap_bps=5e8)
    assert bandit.explore_decay == BanditConfig().explore_decay  # not an offline parameter: the default


def test_a_new_bandit_parameter_needs_only_its_offline_field() -> None:
    @dataclasses.dataclass(frozen=True)
    class WithNewFields(OfflineConfig):  # as OfflineConfig would be with two more fields of the bandit's names
        epsilon: float = 0.33
        utility_latency_cap_ms: float = 250.0

    bandit = WithNewFields(policy="epsilon_greedy").bandit_config()
    assert bandit.epsilon == 0.33 and bandit.policy == "epsilon_greedy"
    assert bandit.utility.latency_cap_ms == 250.0 and bandit.utility.throughput_cap_bps == 1e9
