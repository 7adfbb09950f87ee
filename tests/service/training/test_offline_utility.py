"""Offline warm start of the default utility learner (ridge_squarecb) and the shipped models v2 and v1."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from edgepath.datasets.mobilebandwidth import pair_situations, read_measurements, split_by_user
from edgepath.engines.active_explorer import PaperActiveExplorer
from edgepath.engines.features import N_FEATURES
from edgepath.engines.primary_path import DEFAULT_POLICY, TrainingSample
from edgepath.engines.reward import utility
from edgepath.training.artefact import load_artefact, save_artefact
from edgepath.training.offline import ARMS, OfflineConfig, arm_rows, read_decision_log, situation_matrix, train_offline

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "service" / "data" / "mobilebandwidth"
V1, V2 = ROOT / "models" / "primary-path-v1", ROOT / "models" / "primary-path-v2"


@pytest.fixture(scope="module")
def situations() -> tuple[list, list]:
    wifi = read_measurements(DATA / "wifi4.csv")[:1600]
    cell = read_measurements(DATA / "4G.csv")[:3000]
    (trw, tew), (trc, tec) = split_by_user(wifi, 0.25), split_by_user(cell, 0.25)
    return pair_situations(trw, trc, 0), pair_situations(tew, tec, 1)


def test_full_information_rows_carry_each_arms_utility_and_log_rows_their_ips_weight() -> None:
    X = np.zeros((2, N_FEATURES))
    T = np.array([[50.0, 120.0], [300.0, 10.0]])  # Mbit/s, WIFI/LTE
    log = [TrainingSample([0.0] * N_FEATURES, ARMS, 1, 1, 0.25, throughput_bps=8e7)]
    rows, used = arm_rows(X, T, log, OfflineConfig())
    assert used == 1
    _, y_wifi, w_wifi = rows[0].arrays()
    _, y_lte, w_lte = rows[1].arrays()
    assert np.allclose(y_wifi, [utility(50e6), utility(300e6)]) and np.allclose(w_wifi, [1.0, 1.0])
    assert np.allclose(y_lte, [utility(120e6), utility(10e6), utility(8e7)]) and np.allclose(w_lte, [1, 1, 4.0])


def test_decision_log_reads_measured_outcomes_and_refuses_absurd_ones(tmp_path: Path) -> None:
    line = {"features": [0.0] * N_FEATURES, "arms": ["WIFI", "LTE"], "arm_index": 0, "reward": 1, "propensity": 0.5}
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text(json.dumps({**line, "throughput_bps": 4e7, "latency_ms": 30.0}) + "\n")
    bad.write_text(json.dumps({**line, "throughput_bps": -1.0}) + "\n")
    (sample,) = read_decision_log(good)
    assert sample.throughput_bps == 4e7 and sample.latency_ms == 30.0
    from edgepath.training.offline import DecisionLogError

    with pytest.raises(DecisionLogError, match="line 1"):
        read_decision_log(bad)


def test_utility_warm_start_save_load_identical_and_keeps_learning(situations, tmp_path: Path) -> None:
    model = train_offline(situations[0], (), OfflineConfig(epochs=3))
    assert model.bandit.policy_name == DEFAULT_POLICY and model.bandit.reward_name == "utility"
    X, T = situation_matrix(situations[1][:300])
    greedy = model.greedy_arms(X)
    assert len(set(greedy.tolist())) == 2, "the warm model uses both arms on real contexts"
    # the greedy arm's throughput beats WiFi-first on held-out contexts
    assert T[np.arange(len(greedy)), greedy].mean() > T[:, 0].mean()
    save_artefact(tmp_path / "m", model.bandit, model.classifier, {"name": "m"}, "# m\n")
    loaded = load_artefact(tmp_path / "m").bandit
    original = copy.deepcopy(model.bandit)
    test = situations[1][:150]
    a = [original.decide(s.interfaces) for s in test]
    b = [loaded.decide(s.interfaces) for s in test]
    assert [(c.arm_index, c.propensity) for c in a] == [(c.arm_index, c.propensity) for c in b]
    batch = [
        TrainingSample(c.features, c.arms, c.arm_index, 1, c.propensity, s.throughput_mbps(c.access_type) * 1e6)
        for c, s in zip(b, test, strict=True)
    ]
    before = loaded._policies[ARMS].model.coef.copy()
    assert original.update(batch) == loaded.update(batch) == 150
    assert not np.array_equal(loaded._policies[ARMS].model.coef, before), "online updates continue the warm model"
    assert np.array_equal(loaded._policies[ARMS].model.coef, original._policies[ARMS].model.coef)


def test_shipped_v2_is_the_default_policy_with_its_card(situations) -> None:
    art = load_artefact(V2)
    card = json.loads((V2 / "card.json").read_text())
    assert art.bandit.policy_name == DEFAULT_POLICY and card["reward"] == "utility"
    assert card["split"]["shared_users"] == 0
    assert "edgepath train-offline" in card["command"] and "--out models/primary-path-v2" in card["command"]
    online = card["online_evaluation"]
    assert online["default_policy"] == DEFAULT_POLICY and len(online["seeds"]) >= 5
    assert {f"cold_{DEFAULT_POLICY}", f"warm_{DEFAULT_POLICY}", "vw_squarecb_utility"} <= set(online["policies"])
    assert sum(f.stat().st_size for f in V2.iterdir()) < 2_000_000
    choice = art.bandit.decide(situations[1][0].interfaces)
    assert choice.access_type in ARMS and 0.0 < choice.propensity <= 1.0


def test_v1_still_loads_and_serves_the_papers_active_explorer(situations) -> None:
    bandit = load_artefact(V1).bandit
    assert bandit.policy_name == "active_explorer"
    policy = bandit._policies[ARMS]
    assert isinstance(policy, PaperActiveExplorer) and policy.is_fitted
    p = bandit.probabilities(situations[1][0].interfaces)
    assert p.sum() == pytest.approx(1.0)


def test_service_starts_from_v2() -> None:
    from edgepath.main import build_model
    from edgepath.settings import load_settings

    bandit = build_model(load_settings(model_path=V2, utility_latency_weight=0.2))
    assert bandit.policy_name == DEFAULT_POLICY and bandit._policies[ARMS].is_fitted
    assert bandit.config.utility.latency_weight == 0.2


def test_on_real_contexts_forced_exploration_leaves_greedy_and_policies_differ(situations) -> None:
    """The library bug of issue 15, on real data: explore branch = greedy arm, two policies identical."""
    train = situations[0]
    real = [s.interfaces for s in situations[1][:400]]
    paper = train_offline(train, (), OfflineConfig(policy="active_explorer", epochs=3)).bandit
    other = train_offline(train, (), OfflineConfig(policy="adaptive_active_greedy", epochs=3)).bandit
    policy = paper._policies[ARMS]
    X, _ = situation_matrix(situations[1][:400])
    greedy = np.argmax(X @ policy.coef.T + policy.intercept, axis=1)
    forced = copy.deepcopy(policy)
    forced.explore_prob, forced.decay = 1.0, None  # always the active-learning branch
    chosen = np.asarray([forced.decide(x)[0] for x in X])
    implied = np.asarray([int(np.argmax(policy.active_weights(x))) for x in X])
    assert np.array_equal(chosen, implied)
    assert (chosen != greedy).mean() > 0.05, "forced exploration must leave the greedy arm on real contexts"
    a = [paper.decide(c).arm_index for c in real]
    b = [other.decide(c).arm_index for c in real]
    assert np.mean(np.asarray(a) != np.asarray(b)) > 0.01
