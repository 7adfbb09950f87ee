"""``edgepath eval policies`` (issue 18): every curve in the JSON, regret against an oracle that sees both arms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from edgepath.datasets.mobilebandwidth import read_measurements
from edgepath.evaluation.policies import compare, plot

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
