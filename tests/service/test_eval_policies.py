"""``edgepath eval policies`` (issue 18): every curve in the JSON, regret against an oracle that sees both arms."""

from __future__ import annotations

import json
from pathlib import Path

import edgepath.datasets
import numpy as np
import pytest
from edgepath.cli import app
from edgepath.datasets.mobilebandwidth import read_measurements
from edgepath.evaluation.policies import compare, plot
from typer.testing import CliRunner

DATA = Path(__file__).resolve().parents[2] / "service" / "data" / "mobilebandwidth"


def test_curves_bands_and_plot(tmp_path: Path) -> None:
    wifi = read_measurements(DATA / "wifi4.csv", "wifi")
    cellular = read_measurements(DATA / "4G.csv", "cellular")
    report = compare(wifi, cellular, [1, 2, 3], rounds=150, policies=("epsilon_greedy", "ridge_squarecb"))
    assert set(report["curves"]) == {"wifi_first", "lte_first", "random", "epsilon_greedy", "ridge_squarecb"}
    for name, c in report["curves"].items():
        regret = np.asarray(c["cumulative_regret"]["mean"])
        assert regret.shape == (150,) and np.all(np.diff(regret) >= -1e-9), name  # the oracle is never beaten
        low, high = (np.asarray(c["mean_cumulative_reward"][k]) for k in ("ci95_low", "ci95_high"))
        assert np.all(low <= np.asarray(c["mean_cumulative_reward"]["mean"]) + 1e-12) and np.all(high >= low)
        assert 0.0 <= c["final_mean_reward"] <= report["oracle_mean_reward"] + 1e-12
    # the curves end where the per-seed finals say
    c = report["curves"]["wifi_first"]["cumulative_regret"]
    assert c["mean"][-1] == np.round(np.mean(c["final_per_seed"]), 6)
    plot(report, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 10_000


def test_the_command_replays_only_the_policies_named(tmp_path: Path) -> None:
    """``--policy`` (repeatable) narrows the replay to those learners (a researcher re-running one policy need not
    wait for all seven); the baselines still run; an unknown name is a usage error naming the choices."""
    out = tmp_path / "r.json"
    args = [
        "eval",
        "policies",
        "--seeds",
        "1,2",
        "--rounds",
        "100",
        "--out",
        str(out),
        "--plot",
        str(tmp_path / "p.png"),
    ]
    result = CliRunner().invoke(app, [*args, "--policy", "epsilon_greedy", "--policy", "epsilon_greedy"])
    assert result.exit_code == 0, result.output
    assert set(json.loads(out.read_text())["curves"]) == {"wifi_first", "lte_first", "random", "epsilon_greedy"}
    refused = CliRunner().invoke(app, [*args, "--policy", "thompson"])
    assert refused.exit_code == 2
    assert "unknown policy 'thompson'" in refused.output and "ridge_squarecb" in refused.output


def test_swapped_or_foreign_csvs_are_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    """``--wifi 4G.csv --cellular wifi4.csv`` (or a file that is no mobilebandwidth CSV) ended in a ValueError
    traceback, the message good but buried; now exit 2 with that message, as a wrong policy name is."""
    data = Path(__file__).resolve().parents[2] / "service" / "data" / "mobilebandwidth"
    base = ["eval", "policies", "--seeds", "1,2", "--rounds", "100", "--out", str(tmp_path / "r.json")]
    swapped = CliRunner().invoke(app, [*base, "--wifi", str(data / "4G.csv"), "--cellular", str(data / "wifi4.csv")])
    assert swapped.exit_code == 2, swapped.output
    assert "expected a wifi CSV, found a cellular CSV" in swapped.output and "Traceback" not in swapped.output
    assert swapped.exception is None or isinstance(swapped.exception, SystemExit)


def test_the_default_data_is_the_repositorys_whatever_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The --wifi/--cellular defaults were paths relative to the working directory: run anywhere but the repository
    root, ``eval policies`` exited 2 (``file 'service/data/mobilebandwidth/wifi4.csv' does not exist``). They are
    the repository's vendored files now; the outputs stay relative to the working directory."""
    monkeypatch.chdir(tmp_path)
    args = ["eval", "policies", "--seeds", "1,2", "--rounds", "100", "--policy", "epsilon_greedy"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert set(json.loads((tmp_path / "out" / "policies" / "report.json").read_text())["curves"]) == {
        "wifi_first",
        "lte_first",
        "random",
        "epsilon_greedy",
    }
    assert (tmp_path / "out" / "policies" / "policies.png").is_file()


@pytest.mark.parametrize("command", [["eval", "policies"], ["eval", "ope-truth"], ["train-offline"]])
def test_without_the_repository_data_the_default_names_the_option_to_pass(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package without the repository around it (installed from a wheel) has no vendored data: a usage error
    naming the option, before any work or output."""
    monkeypatch.setattr(edgepath.datasets, "REPO_ROOT", tmp_path / "site-packages")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    assert "service/data/mobilebandwidth/wifi4.csv" in result.output and "pass --wifi FILE" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []
