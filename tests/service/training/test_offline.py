"""Offline training: IPS weighting, train → save → load → identical decisions, artefact integrity, shipped model."""

from __future__ import annotations

import copy
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from edgepath.datasets.mobilebandwidth import pair_situations, read_measurements, split_by_user
from edgepath.engines.features import N_FEATURES
from edgepath.engines.primary_path import TrainingSample
from edgepath.training import artefact as artefact_mod
from edgepath.training.artefact import ArtefactError, load_artefact, save_artefact, verify_artefact
from edgepath.training.offline import (
    ARMS,
    DecisionLogError,
    OfflineConfig,
    arm_rows,
    fit_oracle,
    ips_weights,
    read_decision_log,
    train_offline,
)
from edgepath.types import AccessType
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "service" / "data" / "mobilebandwidth"
SHIPPED = ROOT / "models" / "primary-path-v1"


@pytest.fixture(scope="module")
def situations() -> tuple[list, list]:
    wifi = read_measurements(DATA / "wifi4.csv")[:1600]
    cell = read_measurements(DATA / "4G.csv")[:3000]
    (trw, tew), (trc, tec) = split_by_user(wifi, 0.25), split_by_user(cell, 0.25)
    return pair_situations(trw, trc, 0), pair_situations(tew, tec, 1)


@pytest.fixture(scope="module")
def trained(situations: tuple[list, list]):
    # the paper's policy (SGD oracles); the default utility learner's warm start: test_offline_utility.py
    return train_offline(situations[0], (), OfflineConfig(policy="active_explorer", epochs=5))


# --- IPS weighting on a hand-made log ---------------------------------------------------------------------------


def _logged(arm: int, reward: int, p: float, x: float = 0.0) -> TrainingSample:
    features = [0.0] * N_FEATURES
    features[0] = x
    return TrainingSample(features, ARMS, arm, reward, p)


def test_ips_weights_are_inverse_propensities_capped() -> None:
    assert np.allclose(ips_weights([0.5, 0.1, 0.001], max_weight=100.0), [2.0, 10.0, 100.0])
    with pytest.raises(ValueError):
        ips_weights([0.0])
    with pytest.raises(ValueError):
        ips_weights([1.5])


def test_logged_rows_go_to_the_chosen_arm_with_weight_one_over_propensity() -> None:
    log = [_logged(1, 1, 0.25), _logged(0, 0, 0.8), _logged(1, 0, 0.5)]
    rows, used = arm_rows(np.zeros((0, N_FEATURES)), np.zeros((0, 2)), log, OfflineConfig())
    assert used == 3
    _, y_wifi, w_wifi = rows[0].arrays()
    _, y_lte, w_lte = rows[1].arrays()
    assert list(y_wifi) == [0.0] and np.allclose(w_wifi, [1.25])
    assert list(y_lte) == [1.0, 0.0] and np.allclose(w_lte, [4.0, 2.0])


def test_ips_weighting_corrects_the_logging_policy_bias() -> None:
    """LTE was logged mostly where it failed (p=0.9) and rarely where it succeeded (p=0.05).

    Unweighted, its success rate looks like 8/98; reweighted by 1/p both contexts count as often as
    they occur under uniform routing (IPS estimate 160/260 ≈ 0.62). The oracle (intercept only:
    all-zero features) must follow the weights.
    """
    log = [_logged(1, 0, 0.9) for _ in range(90)] + [_logged(1, 1, 0.05) for _ in range(8)]
    cfg = OfflineConfig(epochs=30)
    rows, _ = arm_rows(np.zeros((0, N_FEATURES)), np.zeros((0, 2)), log, cfg)
    X, y, w = rows[1].arrays()
    x0 = np.zeros((1, N_FEATURES))
    p_ips = fit_oracle(X, y, w, cfg, seed=1).predict_proba(x0)[0, 1]
    p_raw = fit_oracle(X, y, np.ones_like(w), cfg, seed=1).predict_proba(x0)[0, 1]
    assert p_ips > 0.5 > 0.2 > p_raw


def test_decision_log_is_read_and_bad_lines_are_named(tmp_path: Path) -> None:
    good = {
        "features": [0.0] * N_FEATURES,
        "arms": ["WIFI", "LTE"],
        "arm_index": 1,
        "reward": 1,
        "propensity": 0.2,
        "decision_id": "d1",
    }
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(good) + "\n\n")
    [sample] = read_decision_log(path)
    assert sample.arms == (AccessType.WIFI, AccessType.LTE) and sample.propensity == 0.2
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "propensity": 0}) + "\n")
    with pytest.raises(DecisionLogError, match=r"line 2: propensity"):
        read_decision_log(path)
    path.write_text(json.dumps({**good, "features": [0.0]}) + "\n")
    with pytest.raises(DecisionLogError, match=r"line 1: features"):
        read_decision_log(path)


def test_training_from_the_log_alone_works(situations: tuple[list, list]) -> None:
    log = [_logged(i % 2, i % 3 == 0, 0.5, x=float(i % 5)) for i in range(60)]
    model = train_offline([], log, OfflineConfig(epochs=3))
    assert model.n_situations == 0 and model.n_logged == 60
    choice = model.bandit.decide(situations[1][0].interfaces)
    assert choice.access_type in ARMS and 0.0 < choice.propensity <= 1.0


# --- train -> save -> load -> identical decisions ---------------------------------------------------------------


def test_train_save_load_gives_identical_decisions_and_keeps_learning(
    trained, situations: tuple[list, list], tmp_path: Path
) -> None:
    save_artefact(tmp_path / "m", trained.bandit, trained.classifier, {"name": "m"}, "# m\n")
    loaded = load_artefact(tmp_path / "m")
    original = copy.deepcopy(trained.bandit)
    test = situations[1][:150]
    a = [original.decide(s.interfaces) for s in test]
    b = [loaded.bandit.decide(s.interfaces) for s in test]
    assert [c.arm_index for c in a] == [c.arm_index for c in b]
    assert [c.propensity for c in a] == [c.propensity for c in b]
    assert len({c.arm_index for c in a}) == 2, "the warm policy uses both arms on real contexts"
    assert np.array_equal(loaded.classifier.coef_, trained.classifier.coef_)

    # online learning continues from the offline oracles (partial_fit), identically on both copies
    batch = [
        TrainingSample(c.features, c.arms, c.arm_index, int(s.throughput_mbps(c.access_type) >= 25), c.propensity)
        for c, s in zip(b, test, strict=True)
    ]
    before = loaded.bandit._policies[ARMS]._oracles.algos[1].coef_.copy()
    assert loaded.bandit.update(batch) == len(batch)
    original.update(batch)
    after = loaded.bandit._policies[ARMS]._oracles.algos[1].coef_
    assert not np.array_equal(before, after)
    assert np.array_equal(after, original._policies[ARMS]._oracles.algos[1].coef_)


def test_warm_start_keeps_the_offline_coefficients(trained, situations: tuple[list, list]) -> None:
    from edgepath.training.offline import situation_matrix

    policy = trained.bandit._policies[ARMS]
    assert policy.is_fitted
    # greedy decisions of the served policy are the offline oracles' argmax, on real contexts
    X, _ = situation_matrix(situations[1][:300])
    exploit = np.asarray(policy.predict(X, exploit=True)).astype(int)
    assert np.array_equal(exploit, trained.greedy_arms(X))


# --- integrity --------------------------------------------------------------------------------------------------


def _save(trained, directory: Path, key: bytes | None = None) -> Path:
    return save_artefact(directory, trained.bandit, trained.classifier, {"name": "x"}, "# x\n", hmac_key=key)


def test_corrupted_model_is_refused_before_unpickling(trained, tmp_path: Path) -> None:
    d = _save(trained, tmp_path / "m")
    blob = bytearray((d / "model.pkl").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (d / "model.pkl").write_bytes(bytes(blob))
    with pytest.raises(ArtefactError, match=r"model\.pkl is corrupted"):
        load_artefact(d)


class _Boom:
    def __reduce__(self):  # runs at unpickling time
        return (os.mkdir, (str(_Boom.target),))


def test_a_replaced_pickle_never_runs(trained, tmp_path: Path) -> None:
    d = _save(trained, tmp_path / "m")
    _Boom.target = tmp_path / "pwned"
    (d / "model.pkl").write_bytes(pickle.dumps(_Boom()))
    with pytest.raises(ArtefactError, match="corrupted"):
        load_artefact(d)
    assert not (tmp_path / "pwned").exists()


def test_missing_checksums_and_missing_files_are_refused(trained, tmp_path: Path) -> None:
    d = _save(trained, tmp_path / "m")
    (d / "card.json").write_text("{}")
    with pytest.raises(ArtefactError, match=r"card\.json is corrupted"):
        verify_artefact(d)
    (d / "SHA256SUMS").unlink()
    with pytest.raises(ArtefactError, match="SHA256SUMS is missing"):
        load_artefact(d)
    with pytest.raises(ArtefactError, match="not a directory"):
        load_artefact(tmp_path / "nothing-here")


def test_hmac_signature_is_checked(trained, tmp_path: Path) -> None:
    d = _save(trained, tmp_path / "m", key=b"k1")
    assert load_artefact(d, hmac_key=b"k1").bandit.policy_name == "active_explorer"
    with pytest.raises(ArtefactError, match="HMAC"):
        load_artefact(d, hmac_key=b"other")
    unsigned = _save(trained, tmp_path / "u")
    with pytest.raises(ArtefactError, match="not signed"):
        load_artefact(unsigned, hmac_key=b"k1")


def test_other_feature_layout_is_refused(trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _save(trained, tmp_path / "m")
    monkeypatch.setattr(artefact_mod, "FEATURE_NAMES", ("only.one",))
    with pytest.raises(ArtefactError, match="another feature layout"):
        load_artefact(d)


def test_serve_refuses_a_corrupted_model_with_a_clear_error(trained, tmp_path: Path) -> None:
    from edgepath.cli import app

    d = _save(trained, tmp_path / "m")
    (d / "model.pkl").write_bytes(b"garbage")
    result = CliRunner().invoke(app, ["serve", "--model", str(d), "--grpc-port", "0", "--http-port", "0"])
    assert result.exit_code != 0
    assert "corrupted" in result.output and "--model" in result.output


# --- the shipped model ------------------------------------------------------------------------------------------


def test_shipped_model_loads_and_decides(situations: tuple[list, list]) -> None:
    art = load_artefact(SHIPPED)
    card = json.loads((SHIPPED / "card.json").read_text())
    assert card["split"]["shared_users"] == 0
    assert set(card["scores"]["offline"]) == {"offline_oracles_greedy", "offline_classifier"}
    assert "edgepath train-offline" in card["command"]
    assert sum(f.stat().st_size for f in SHIPPED.iterdir()) < 2_000_000
    choice = art.bandit.decide(situations[1][0].interfaces)
    assert choice.access_type in ARMS


def test_service_starts_from_the_shipped_model() -> None:
    from edgepath.main import build_model
    from edgepath.settings import load_settings

    bandit = build_model(load_settings(model_path=SHIPPED, propensity_floor=0.02))
    assert bandit._policies[ARMS].is_fitted
    assert bandit.config.propensity_floor == 0.02
