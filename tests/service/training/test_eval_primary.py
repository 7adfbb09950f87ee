"""`edgepath eval primary` end to end on a slice of the real data (small, so it stays quick)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from edgepath.cli import app
from typer.testing import CliRunner

DATA = Path(__file__).resolve().parents[3] / "service" / "data" / "mobilebandwidth"


def _head(src: Path, dst: Path, rows: int) -> Path:
    with src.open() as fh:
        dst.write_text("".join(line for _, line in zip(range(rows + 1), fh, strict=False)))
    return dst


@pytest.mark.slow
def test_eval_primary_writes_report_and_plot(tmp_path: Path) -> None:
    wifi = _head(DATA / "wifi4.csv", tmp_path / "wifi.csv", 900)
    cell = _head(DATA / "4G.csv", tmp_path / "4g.csv", 1500)
    report, plot = tmp_path / "r.json", tmp_path / "p.png"
    args = [
        "eval",
        "primary",
        "--train-wifi",
        str(wifi),
        "--train-cellular",
        str(cell),
        "--test-wifi",
        str(wifi),
        "--test-cellular",
        str(cell),
        "--seeds",
        "1,2",
        "--test-fraction",
        "0.3",
        "--report",
        str(report),
        "--plot",
        str(plot),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(report.read_text())
    policies = out["policies"]
    for part in ("cold", "warm", "wifi_first", "oracle", "vw"):
        assert any(part in name for name in policies), part
    assert policies["oracle"]["pct_of_oracle"] == pytest.approx(100.0)
    default = out["default_policy"]
    assert f"cold_{default}" in policies and f"warm_{default}" in policies
    assert {"vw_squarecb", "vw_squarecb_utility", "offline_classifier", "warm_active_explorer"} <= set(policies)
    assert all(p["mean_completion_time_s_10MB"] > 0 for p in policies.values())
    assert set(out["drift"]["policies"]) >= {f"warm_{default}", "warm_active_explorer", "oracle"}
    for name, p in policies.items():
        assert 0.0 < p["mean_throughput_mbps"] <= policies["oracle"]["mean_throughput_mbps"] + 1e-9, name
        assert p["mean_throughput_mbps_ci95"] is not None and len(p["per_seed_mean_throughput_mbps"]) == 2
    assert out["split"]["shared_users"] == 0
    assert "same user_city_id" in out["pairing"]
    assert plot.stat().st_size > 10_000


def test_eval_primary_rejects_bad_seeds(tmp_path: Path) -> None:
    wifi = _head(DATA / "wifi4.csv", tmp_path / "wifi.csv", 5)
    args = [
        "eval",
        "primary",
        "--train-wifi",
        str(wifi),
        "--train-cellular",
        str(wifi),
        "--test-wifi",
        str(wifi),
        "--test-cellular",
        str(wifi),
        "--seeds",
        "a,b",
        "--report",
        str(tmp_path / "r.json"),
        "--plot",
        str(tmp_path / "p.png"),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0 and "--seeds" in result.output


def test_train_offline_cli_with_a_decision_log_writes_a_loadable_artefact(tmp_path: Path) -> None:
    from edgepath.engines.features import N_FEATURES
    from edgepath.training.artefact import load_artefact

    wifi = _head(DATA / "wifi4.csv", tmp_path / "wifi.csv", 800)
    cell = _head(DATA / "4G.csv", tmp_path / "4g.csv", 1200)
    log = tmp_path / "log.jsonl"
    log.write_text(
        "".join(
            json.dumps(
                {
                    "features": [0.0] * N_FEATURES,
                    "arms": ["WIFI", "LTE"],
                    "arm_index": i % 2,
                    "reward": int(i % 3 == 0),
                    "propensity": 0.5,
                }
            )
            + "\n"
            for i in range(40)
        )
    )
    out = tmp_path / "model"
    args = [
        "train-offline",
        "--wifi",
        str(wifi),
        "--cellular",
        str(cell),
        "--decision-log",
        str(log),
        "--out",
        str(out),
        "--eval-seeds",
        "1,2",
        "--epochs",
        "3",
        "--no-ablation",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    card = json.loads((out / "card.json").read_text())
    assert card["training"]["logged_decisions"] == 40
    assert card["split"]["shared_users"] == 0
    assert "--decision-log" in card["command"]
    assert set(card["scores"]["offline"]) == {"offline_oracles_greedy", "offline_classifier"}
    assert (out / "card.md").read_text().startswith("# Model card: model")
    assert load_artefact(out).bandit.policy_name == "ridge_squarecb"  # the default policy (issue 15)
    assert card["reward"] == "utility"

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"features": [1.0]}\n')
    result = CliRunner().invoke(app, [*args[:5], "--decision-log", str(bad), "--out", str(tmp_path / "x")])
    assert result.exit_code != 0 and "line 1" in result.output
