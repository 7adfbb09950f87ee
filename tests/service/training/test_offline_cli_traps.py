"""Traps of the offline-training and evaluation commands a researcher reproducing the figures hits.

`eval primary --compare ""` (drift replay of untrained policies), `serve --model` over explicit bandit settings,
`train-offline --explore-prob` for a policy that ignores it, held-out users' decision-log rows in training, and
the card's command with repeated `--note`s.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import edgepath.datasets
import pytest
from edgepath.cli import app
from edgepath.datasets.mobilebandwidth import read_measurements, split_by_user
from edgepath.engines.features import N_FEATURES
from edgepath.engines.primary_path import DEFAULT_POLICY, TrainingSample
from edgepath.evaluation.primary import Split, drift_replay
from edgepath.main import build_model, explicit_bandit_settings
from edgepath.settings import load_settings
from edgepath.training.artefact import ArtefactError
from edgepath.training.offline import (
    ARMS,
    OfflineConfig,
    drop_held_out_devices,
    exploration_parameters,
    policy_config_dict,
    policy_reads,
)
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "service" / "data" / "mobilebandwidth"
V2 = ROOT / "models" / "primary-path-v2"


def _head(src: Path, dst: Path, rows: int) -> Path:
    with src.open() as fh:
        dst.write_text("".join(line for _, line in zip(range(rows + 1), fh, strict=False)))
    return dst


@pytest.fixture(scope="module")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("data")
    return _head(DATA / "wifi4.csv", d / "wifi.csv", 400), _head(DATA / "4G.csv", d / "4g.csv", 700)


# --- 1. eval primary: the drift replay covers the policies that were trained -------------------------------------


@pytest.mark.slow
def test_eval_primary_without_compared_policies_replays_the_drift_of_the_trained_one(
    small_data: tuple[Path, Path], tmp_path: Path
) -> None:
    wifi, cell = small_data
    report = tmp_path / "r.json"
    args = ["eval", "primary", "--train-wifi", str(wifi), "--train-cellular", str(cell)]
    args += ["--test-wifi", str(wifi), "--test-cellular", str(cell), "--seeds", "1,2", "--test-fraction", "0.3"]
    args += ["--compare", "", "--no-vw", "--report", str(report), "--plot", str(tmp_path / "p.png")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    drift = json.loads(report.read_text())["drift"]
    assert drift["warm_policies"] == [DEFAULT_POLICY]
    assert set(drift["policies"]) == {"oracle", "wifi_first", f"warm_{DEFAULT_POLICY}"}


def test_drift_replay_names_a_policy_without_a_model_before_replaying() -> None:
    empty = Split([], [], [], [], "none")
    with pytest.raises(ValueError, match="no trained model for active_explorer"):
        drift_replay(empty, [1], OfflineConfig(), {}, ["active_explorer"])


# --- 2. serve --model: explicit bandit settings are honoured or refused, defaults follow the artefact -------------


def test_explicit_bandit_settings_conflicting_with_the_artefact_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEPATH_BANDIT__POLICY", "ridge_lints")
    monkeypatch.setenv("EDGEPATH_BANDIT__SQUARECB_GAMMA0", "5")
    monkeypatch.setenv("EDGEPATH_FORGETTING", "0.9")  # a flat name of an earlier release counts too
    with pytest.raises(ArtefactError) as info:
        build_model(load_settings(model_path=V2))
    message = str(info.value)
    assert "bandit.policy" in message and "'ridge_lints', the artefact's 'ridge_squarecb'" in message
    assert "EDGEPATH_BANDIT__SQUARECB_GAMMA0" in message and "= 5.0, the artefact's 100.0" in message
    assert "EDGEPATH_FORGETTING" in message and "= 0.9, the artefact's 0.999" in message


def test_serve_refuses_the_conflict_with_the_configuration_exit_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import edgepath.main

    def never_serve(coro: Any) -> None:
        coro.close()
        pytest.fail("serve started despite the conflicting settings")

    monkeypatch.setattr(edgepath.main, "run_event_loop", never_serve)
    config = tmp_path / "edgepath.toml"
    config.write_text("[bandit]\nsquarecb_gamma0 = 7.0\n")  # the settings file is a source like the others
    result = CliRunner().invoke(
        app, ["serve", "--model", str(V2), "--config", str(config), "--grpc-port", "0", "--http-port", "0"]
    )
    assert result.exit_code == 2, result.output
    assert "--model" in result.output and "squarecb_gamma0" in result.output and "7.0" in result.output


def test_settings_left_at_their_defaults_follow_the_artefact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEPATH_BANDIT__EPSILON", "0.3")  # epsilon_greedy's: ridge_squarecb does not read it
    monkeypatch.setenv("EDGEPATH_BANDIT__SQUARECB_GAMMA0", "100")  # the artefact's own value
    settings = load_settings(model_path=V2, propensity_floor=0.02)
    assert explicit_bandit_settings(settings) == {"epsilon", "propensity_floor"}
    bandit = build_model(settings)
    assert bandit.policy_name == "ridge_squarecb"
    assert (bandit.config.forgetting, bandit.config.squarecb_gamma0) == (0.999, 100.0)
    assert bandit.config.propensity_floor == 0.02  # applied to the loaded model, as before


# --- 3. train-offline --explore-prob: refused where the policy does not read it ----------------------------------


def test_which_policy_reads_what() -> None:
    assert policy_reads("active_explorer", "explore_prob") and not policy_reads("ridge_squarecb", "explore_prob")
    assert not policy_reads("epsilon_greedy", "explore_prob") and policy_reads("epsilon_greedy", "epochs")
    assert exploration_parameters("epsilon_greedy") == ("epsilon", "epsilon_decay")
    assert exploration_parameters("ridge_squarecb") == ("squarecb_gamma0",)
    ridge = policy_config_dict(OfflineConfig(policy="ridge_squarecb"))
    assert "explore_prob" not in ridge and "ts_scale" not in ridge
    assert {"squarecb_gamma0", "forgetting", "seed", "sgd_alpha"} <= set(ridge)
    paper = policy_config_dict(OfflineConfig(policy="active_explorer", explore_prob=0.3))
    assert paper["explore_prob"] == 0.3 and "forgetting" not in paper and "warm_window" not in paper


@pytest.mark.parametrize(("policy", "own"), [("ridge_squarecb", "squarecb_gamma0"), ("epsilon_greedy", "epsilon")])
def test_explore_prob_is_refused_for_a_policy_that_does_not_read_it(
    small_data: tuple[Path, Path], tmp_path: Path, policy: str, own: str
) -> None:
    wifi, cell = small_data
    args = ["train-offline", "--wifi", str(wifi), "--cellular", str(cell), "--out", str(tmp_path / "m")]
    args += ["--policy", policy, "--explore-prob", "0.9", "--epochs", "1", "--eval-seeds", "1", "--no-ablation"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--explore-prob" in result.output and own in result.output
    assert not (tmp_path / "m").exists()


# --- 4 and 5. train-offline: held-out users' log rows dropped; the card's command re-runs ------------------------


def _log_line(device_id: str, arm: int) -> str:
    row = {"device_id": device_id, "features": [0.0] * N_FEATURES, "arms": ["WIFI", "LTE"], "arm_index": arm}
    return json.dumps({**row, "reward": 1, "propensity": 0.5, "throughput_bps": 2e7}) + "\n"


@pytest.fixture(scope="module")
def trained_from_a_replayed_log(small_data: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    wifi, cell = small_data
    measurements = [*read_measurements(wifi, "wifi"), *read_measurements(cell, "cellular")]
    train, test = split_by_user(measurements, 0.25)
    train_uids = sorted({m.user_uid for m in train})[:7]
    test_uids = sorted({m.user_uid for m in test})[:5]
    d = tmp_path_factory.mktemp("trained")
    log = d / "log.jsonl"
    lines = [_log_line(f"replay-{uid[:16]}", i % 2) for i, uid in enumerate(train_uids)]
    lines += [_log_line(f"replay-unseen-{uid[:16]}", i % 2) for i, uid in enumerate(test_uids)]
    lines += [_log_line("pixel-7-lab", 0), _log_line("pixel-8-lab", 1)]  # real devices: no user of the data
    log.write_text("".join(lines))
    out = d / "model"
    args = ["train-offline", "--wifi", str(wifi), "--cellular", str(cell), "--decision-log", str(log)]
    args += ["--out", str(out), "--eval-seeds", "1,2", "--epochs", "2", "--no-ablation"]
    args += ["--note", "measured on 2 cores, [not] simultaneous", "--note", "second note"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads((out / "card.json").read_text()), (out / "card.md").read_text(), len(test_uids)


def test_held_out_users_decision_log_rows_are_dropped_and_counted(trained_from_a_replayed_log: Any) -> None:
    card, markdown, n_test = trained_from_a_replayed_log
    training = card["training"]
    assert training["logged_decisions_read"] == 7 + n_test + 2
    assert training["logged_decisions_dropped_held_out"] == n_test
    assert training["logged_decisions"] == 7 + 2  # the training users' rows and the unmapped ones
    assert training["logged_decisions_unmapped"] == 2
    assert card["scores"]["held_out"] is False and "2 decision-log rows" in card["scores"]["held_out_note"]
    assert "NOT verified held out" in markdown and f"{n_test} of held-out users' devices dropped" in markdown


def test_a_log_of_training_users_only_keeps_the_scores_held_out() -> None:
    sample = TrainingSample([0.0] * N_FEATURES, ARMS, 0, 1, 0.5)
    rows = [("replay-0123456789abcdef", sample), ("replay-fedcba9876543210", sample), (None, sample)]
    kept = drop_held_out_devices(rows[:2], ["0123456789abcdef" + "0" * 16], ["fedcba9876543210" + "1" * 16])
    assert (len(kept.kept), kept.dropped_held_out, kept.training_users, kept.held_out_verified) == (1, 1, 1, True)
    assert not drop_held_out_devices(rows, ["0123456789abcdef" + "0" * 16], []).held_out_verified


def test_card_lists_only_what_the_policy_reads_and_its_command_reruns(trained_from_a_replayed_log: Any) -> None:
    card, _, _ = trained_from_a_replayed_log
    assert card["hyper_parameters"]["policy"] == DEFAULT_POLICY == "ridge_squarecb"
    assert "explore_prob" not in card["hyper_parameters"] and "ts_scale" not in card["hyper_parameters"]
    assert "squarecb_gamma0" in card["hyper_parameters"]
    argv = shlex.split(card["command"])
    assert "--explore-prob" not in argv
    notes = [argv[i + 1] for i, a in enumerate(argv) if a == "--note"]
    assert notes == ["measured on 2 cores, [not] simultaneous", "second note"]
    assert card["notes"][-2:] == notes


# --- 6. train-offline's default data: the repository's, whatever the working directory -----------------------------


def test_train_offline_defaults_to_the_repository_data_from_any_working_directory(
    small_data: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The --wifi/--cellular defaults were relative to the working directory (exit 2 outside the repository root);
    they are the repository's service/data/mobilebandwidth files, named as repository paths in the card, and the
    card's command leaves them out so that it re-runs from anywhere. --out stays relative to the working directory."""
    data = tmp_path / "repo" / "service" / "data" / "mobilebandwidth"
    data.mkdir(parents=True)
    shutil.copy(small_data[0], data / "wifi4.csv")
    shutil.copy(small_data[1], data / "4G.csv")
    monkeypatch.setattr(edgepath.datasets, "REPO_ROOT", tmp_path / "repo")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    args = ["train-offline", "--out", "m", "--eval-seeds", "1", "--epochs", "1", "--no-ablation"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    card = json.loads((tmp_path / "elsewhere" / "m" / "card.json").read_text())
    assert list(card["data"]["files"]) == [
        "service/data/mobilebandwidth/wifi4.csv",
        "service/data/mobilebandwidth/4G.csv",
    ]
    argv = shlex.split(card["command"])
    assert "--wifi" not in argv and "--cellular" not in argv


# --- 7. train-offline never replaces an artefact unasked (the default --out is the shipped model) -------------------


def test_train_offline_refuses_to_replace_an_artefact_without_overwrite(
    small_data: tuple[Path, Path], tmp_path: Path
) -> None:
    wifi, cell = small_data
    out = tmp_path / "m"
    out.mkdir()
    (out / "card.json").write_text('{"name": "kept"}')
    args = ["train-offline", "--wifi", str(wifi), "--cellular", str(cell), "--out", str(out)]
    args += ["--eval-seeds", "1", "--epochs", "1", "--no-ablation"]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2, refused.output
    assert "--out" in refused.output and "--overwrite" in refused.output and "already holds" in refused.output
    assert (out / "card.json").read_text() == '{"name": "kept"}' and not (out / "model.pkl").exists()
    replaced = CliRunner().invoke(app, [*args, "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    card = json.loads((out / "card.json").read_text())
    assert card["name"] == "m" and "--overwrite" in shlex.split(card["command"])
