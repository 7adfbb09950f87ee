"""SSMP evaluation: the transfer-time model on hand-computed values, the paper scenarios, 5Gophers mode, the CLI.

5Gophers data: the subset vendored in tests/data/5gophers (CC BY 4.0, see its README).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from edgepath.cli import app
from edgepath.engines.ssmp import SsmpConfig
from edgepath.evaluation import ssmp_eval
from edgepath.evaluation.ssmp_eval import PathSpec, path_rate_bps, transfer_time_s
from typer.testing import CliRunner

GOPHERS = Path(__file__).resolve().parents[1] / "data" / "5gophers"
MBPS = 1e6


# ------------------------------------------------------------------------------------------ transfer model


def test_mice_within_initial_window_takes_two_rtts() -> None:
    # 1000 B < IW (14 600 B): handshake + request/response = 2 × 10 ms, then 1000 B at 1e6 B/s.
    assert transfer_time_s(1000, [PathSpec("wlan0", 10.0, 8 * MBPS)]) == pytest.approx(0.021)


def test_slow_start_rounds() -> None:
    # RTT 100 ms, 1e6 B/s (BDP 100 000 B): round 0 (14 600 B) at 0.2 s, round 1 (29 200 B) at 0.3 s ends 0.3292 s.
    assert transfer_time_s(43_800, [PathSpec("wlan0", 100.0, 8 * MBPS)]) == pytest.approx(0.3292)


def test_bandwidth_limited_transfer() -> None:
    # BDP 10 000 B < IW: continuous 1e6 B/s from 20 ms; 1e6 B → 1.02 s.
    assert transfer_time_s(1_000_000, [PathSpec("wlan0", 10.0, 8 * MBPS)]) == pytest.approx(1.02)


def test_second_subflow_joins_after_the_initial_handshake() -> None:
    # Path 0: 1e6 B/s from 0.02 s. Path 1 (20 ms): joins at 0.01 s, 14 600 B at 0.05 s, continuous from 0.07 s.
    # (t − 0.02) + 0.0146 + (t − 0.07) = 2 (MB) → t = 1.0377 s.
    paths = [PathSpec("wlan0", 10.0, 8 * MBPS), PathSpec("wwan0", 20.0, 8 * MBPS)]
    assert transfer_time_s(2_000_000, paths) == pytest.approx(1.0377)


def test_initial_subflow_on_the_short_path_is_faster_for_mice() -> None:
    paths = [PathSpec("wlan0", 30.0, 40 * MBPS), PathSpec("wwan0", 5.0, 20 * MBPS)]
    assert transfer_time_s(1024, paths, 1) < transfer_time_s(1024, paths, 0) / 3


def test_rate_is_mathis_limited_under_loss() -> None:
    assert path_rate_bps(PathSpec("wlan0", 10.0, 40 * MBPS, 0.01)) == pytest.approx(14_305_020.1, rel=1e-8)
    assert path_rate_bps(PathSpec("wlan0", 10.0, 40 * MBPS, 0.0)) == 40 * MBPS


def test_transfer_model_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        transfer_time_s(10, [PathSpec("wlan0", 10.0, 0.0)])
    with pytest.raises(ValueError):
        transfer_time_s(10, [PathSpec("wlan0", 10.0, 1.0)], initial_index=2)


# ------------------------------------------------------------------------------------------ paper mode


@pytest.fixture(scope="module")
def paper_report() -> dict:
    return ssmp_eval.evaluate_paper(seed=1, repetitions=3)


def test_paper_report_has_every_scenario_and_size(paper_report: dict) -> None:
    expected = {"mice_stable", "elephant_stable"} | {
        f"{kind}_alpha_{a}" for kind in ("dynamic_degrade", "measurement_error") for a in (0.2, 0.5, 0.8)
    }
    assert set(paper_report) == expected
    assert list(paper_report["mice_stable"]["sizes"]) == ["1KB", "10KB", "100KB", "1000KB"]
    assert list(paper_report["elephant_stable"]["sizes"]) == ["100MB", "300MB", "500MB", "1000MB"]
    row = paper_report["mice_stable"]["sizes"]["1KB"]
    assert {"dss_seconds", "ssmp_seconds", "reduction_pct", "paper_reduction_pct"} <= set(row)
    assert row["paper_reduction_pct"] == 38.46
    assert paper_report["elephant_stable"]["sizes"]["500MB"]["paper_reduction_pct"] == 70.0


def test_paper_stable_choices(paper_report: dict) -> None:
    # Mice: server 1 wins the mean-RTT tie with server 2 on its 5 ms path; elephants: server 1 has the largest Q.
    assert paper_report["mice_stable"]["sizes"]["1KB"]["ssmp_choices"] == {"server1": 30}
    assert paper_report["elephant_stable"]["sizes"]["100MB"]["ssmp_choices"] == {"server1": 30}
    assert paper_report["elephant_stable"]["sizes"]["100MB"]["reduction_pct"] > 30


def test_dynamic_larger_alpha_leaves_the_degraded_server_sooner(paper_report: dict) -> None:
    def server1(alpha: float) -> int:
        return paper_report[f"dynamic_degrade_alpha_{alpha}"]["sizes"]["300MB"]["ssmp_choices"].get("server1", 0)

    assert server1(0.8) < server1(0.2)


def test_measurement_error_misleads_large_alpha_only(paper_report: dict) -> None:
    choices = {a: paper_report[f"measurement_error_alpha_{a}"]["sizes"]["300MB"]["ssmp_choices"] for a in (0.2, 0.8)}
    assert "server2" not in choices[0.2]
    assert choices[0.8].get("server2", 0) >= 1


# ------------------------------------------------------------------------------------------ 5Gophers mode


def test_gophers_mode_on_vendored_subset() -> None:
    data = ssmp_eval.load_gophers(GOPHERS)
    assert data.carriers == ["SPRINT", "TMOBILE", "VERIZON"]
    assert data.locations == ["US-East", "US-West"]
    scenarios = ssmp_eval.evaluate_gophers(data, seed=0, downloads=40, sizes=(10 * 1024, 100 * 2**20))
    assert set(scenarios) == {"gophers_sprint+tmobile", "gophers_sprint+verizon", "gophers_tmobile+verizon"}
    for block in scenarios.values():
        mice, elephant = block["sizes"]["10KB"], block["sizes"]["100MB"]
        assert (mice["flow_class"], elephant["flow_class"]) == ("MICE", "ELEPHANT")
        for row in (mice, elephant):
            lo, hi = row["dss_seconds_ci95"]
            assert lo <= row["dss_seconds"] <= hi
            lo, hi = row["reduction_pct_ci95"]
            assert lo <= row["reduction_pct"] <= hi
            assert row["paper_reduction_pct"] is None
            assert row["downloads"] == 40


# ------------------------------------------------------------------------------------------ CLI


def test_cli_paper_writes_report_and_plot(tmp_path: Path) -> None:
    report, plot = tmp_path / "r.json", tmp_path / "p.png"
    result = CliRunner().invoke(
        app, ["eval", "ssmp", "--paper", "--repetitions", "1", "--report", str(report), "--plot", str(plot)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert data["scenarios"]["mice_stable"]["sizes"]["10KB"]["paper_reduction_pct"] == 38.46
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "elephant_stable" in result.output


def test_cli_gophers_dir_must_hold_the_csvs(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["eval", "ssmp", "--gophers", str(tmp_path), "--report", str(tmp_path / "r"), "--plot", str(tmp_path / "p")],
    )
    assert result.exit_code == 2
    assert "rtt.csv" in result.output


def test_cli_without_data_asks_for_gophers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssmp_eval, "default_gophers_dir", lambda: None)
    result = CliRunner().invoke(app, ["eval", "ssmp", "--report", str(tmp_path / "r"), "--plot", str(tmp_path / "p")])
    assert result.exit_code == 2
    assert "--gophers" in result.output


def test_cli_gophers_subset(tmp_path: Path) -> None:
    report = tmp_path / "g.json"
    args = ["eval", "ssmp", "--gophers", str(GOPHERS), "--downloads", "5", "--report", str(report)]
    result = CliRunner().invoke(app, [*args, "--plot", str(tmp_path / "g.png")])
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    rows = ssmp_eval.table_rows(data)
    assert len(rows) == 3 * 8
    # The printed table carries the report's 95 % CIs (it printed the means alone), as eval mlpm's does
    lines = result.output.splitlines()
    assert lines[0].count("(95% CI)") == 3
    for name, block in data["scenarios"].items():
        for label, row in block["sizes"].items():
            line = next(ln for ln in lines if ln.split()[:2] == [name, label])
            for key, digits in (("dss_seconds", 4), ("ssmp_seconds", 4), ("reduction_pct", 2)):
                lo, hi = row[f"{key}_ci95"]
                assert f"{row[key]:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]" in line, (key, line)


def test_config_alpha_validated() -> None:
    with pytest.raises(ValueError):
        SsmpConfig(alpha=-0.1)
