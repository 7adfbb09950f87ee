"""Settings grouped per engine (``EDGEPATH_BANDIT__*``, ``EDGEPATH_SSMP__*``, ...), old flat names kept."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from edgepath.engines.primary_path import BanditConfig
from edgepath.main import bandit_config, build_model, mlpm_parameters, ssmp_config
from edgepath.settings import FLAT_ALIASES, BanditSettings, ConfigError, Settings, describe_errors, load_settings
from pydantic import ValidationError


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("EDGEPATH_"):
            monkeypatch.delenv(name)


def test_bandit_defaults_are_the_engines_defaults() -> None:
    # settings spell BanditConfig's defaults out (they may not import the engine); the two must not drift apart.
    engine = BanditConfig()
    fields = {f.name for f in dataclasses.fields(BanditConfig)} - {"seed", "utility"}
    given = BanditSettings()
    for name in fields:
        assert getattr(given, name) == getattr(engine, name), name
    assert bandit_config(Settings()) == BanditConfig()


def test_nested_environment_variables_set_the_bandit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEPATH_BANDIT__EXPLORE_PROB", "0.3")
    monkeypatch.setenv("EDGEPATH_BANDIT__FORGETTING", "0.99")
    monkeypatch.setenv("EDGEPATH_BANDIT__POLICY", "epsilon_greedy")
    monkeypatch.setenv("EDGEPATH_BANDIT__EPSILON_DECAY", "null")
    monkeypatch.setenv("EDGEPATH_SSMP__ALPHA", "0.25")
    monkeypatch.setenv("EDGEPATH_MLPM__WINDOW", "12")
    monkeypatch.setenv("EDGEPATH_MLPM__CLASSIFIER", "hand_set")
    settings = load_settings()
    assert settings.bandit.explore_prob == 0.3 and settings.forgetting == 0.99
    assert settings.bandit.epsilon_decay is None
    config = build_model(settings).config
    assert (config.policy, config.explore_prob, config.forgetting, config.epsilon_decay) == (
        "epsilon_greedy",
        0.3,
        0.99,
        None,
    )
    assert ssmp_config(settings).alpha == 0.25 and mlpm_parameters(settings)["window"] == 12
    assert settings.mlpm.classifier == "hand_set" == settings.mlpm_classifier


def test_flat_names_of_earlier_releases_still_work(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EDGEPATH_FORGETTING", "0.95")
    monkeypatch.setenv("EDGEPATH_POLICY", "ridge_lints")
    monkeypatch.setenv("EDGEPATH_SSMP_ALPHA", "0.75")
    monkeypatch.setenv("EDGEPATH_MLPM_GAIN", "4")
    settings = load_settings()
    assert (settings.bandit.forgetting, settings.bandit.policy) == (0.95, "ridge_lints")
    assert (settings.ssmp.alpha, settings.mlpm.gain) == (0.75, 4.0)
    # every flat name reads back as the attribute it always was
    for name, (group, field) in FLAT_ALIASES.items():
        assert getattr(settings, name) == getattr(getattr(settings, group), field), name
    # keyword arguments (CLI options) and settings-file keys, flat or nested
    assert Settings(policy="active_explorer", ssmp_alpha=0.1).bandit.policy == "active_explorer"
    assert Settings(mlpm_window=9).mlpm.window == 9
    flat_file = tmp_path / "flat.json"
    flat_file.write_text(json.dumps({"utility_latency_weight": 0.2, "mlpm_horizon_s": 2.0}))
    monkeypatch.delenv("EDGEPATH_MLPM_GAIN")
    s = load_settings(flat_file)
    assert (s.bandit.utility_latency_weight, s.mlpm.horizon_s) == (0.2, 2.0)
    nested_file = tmp_path / "nested.toml"
    nested_file.write_text("[bandit]\nridge_lambda = 3.0\n[ssmp]\nstale_age_s = 60.0\n")
    s = load_settings(nested_file)
    assert (s.bandit.ridge_lambda, s.ssmp.stale_age_s) == (3.0, 60.0)


def test_precedence_cli_over_nested_env_over_flat_env_over_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "s.json"
    config.write_text(json.dumps({"bandit": {"forgetting": 0.5, "ts_scale": 0.5}}))
    assert load_settings(config).bandit.forgetting == 0.5
    monkeypatch.setenv("EDGEPATH_FORGETTING", "0.6")
    assert load_settings(config).forgetting == 0.6
    monkeypatch.setenv("EDGEPATH_BANDIT__FORGETTING", "0.7")
    assert load_settings(config).forgetting == 0.7
    s = load_settings(config, forgetting=0.8)
    assert s.forgetting == 0.8 and s.bandit.ts_scale == 0.5  # groups merge; each value from its best source


def test_validation_errors_name_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEPATH_BANDIT__EXPLORE_PROB", "1.5")
    with pytest.raises(ConfigError) as info:  # the ValidationError's errors, each named by its source
        load_settings()
    assert isinstance(info.value.__cause__, ValidationError)
    text = str(info.value)
    assert text.startswith("EDGEPATH_BANDIT__EXPLORE_PROB (bandit.explore_prob):"), text
    monkeypatch.delenv("EDGEPATH_BANDIT__EXPLORE_PROB")
    with pytest.raises(ValidationError) as info:
        Settings(ssmp_alpha=2.0)  # the flat spelling is reported under its group
    assert "EDGEPATH_SSMP__ALPHA (ssmp.alpha)" in describe_errors(info.value)
    with pytest.raises(ValidationError, match="extra"):
        Settings(bandit={"explore_probability": 0.1})  # a misspelt parameter is refused, not ignored


def test_serve_refuses_a_bad_nested_variable_naming_it() -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("EDGEPATH_")}
    env["EDGEPATH_BANDIT__FORGETTING"] = "0"
    proc = subprocess.run(
        [sys.executable, "-m", "edgepath.cli", "serve", "--grpc-port", "0", "--http-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 2
    assert "EDGEPATH_BANDIT__FORGETTING" in proc.stderr


def test_env_names_list_every_spelling_a_deployment_may_use() -> None:
    from edgepath.settings import env_names

    names = env_names()
    assert {"EDGEPATH_HOST", "EDGEPATH_BANDIT__EXPLORE_PROB", "EDGEPATH_SSMP__ALPHA", "EDGEPATH_POLICY"} <= names
    assert {"EDGEPATH_MLPM_WINDOW", "EDGEPATH_MLPM__WINDOW", "EDGEPATH_FORGETTING"} <= names
    assert "EDGEPATH_BANDIT__EXPLORE_PROBABILITY" not in names and "EDGEPATH_EXPLORE_PROB" not in names
