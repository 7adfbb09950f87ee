"""`edgepath eval mlpm`: replay of measured paths (5Gophers, UCC) with MLPM, LoRTT, round robin, oracle.

Synthetic traces in the 5Gophers and UCC formats (written here, in tmp_path) pin the replay's
behaviour; one case runs the documented command on the real shared data (../shared/data, skipped
when absent: the UCC traces are GPL-3.0 and are not vendored).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from edgepath.cli import app
from edgepath.evaluation import mlpm_eval
from typer.testing import CliRunner

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
GOPHERS_HEADER = (
    "protocol,num_tcp_conn,seq_num,Sprint_throughput_mbps,TMobile_throughput_mbps,Verizon_throughput_mbps\n"
)
UCC_HEADER = "Timestamp,DL_bitrate,State,PINGAVG\n"


def gophers_file(path: Path, rows: list[tuple[float, float, float]]) -> Path:
    path.write_text(GOPHERS_HEADER + "".join(f"TCP,8,{i},{a},{b},{c}\n" for i, (a, b, c) in enumerate(rows)))
    return path


def ucc_file(path: Path, seconds: int, dl_kbps: float, ping_ms: float, ping_every_s: int = 5) -> Path:
    lines = []
    for s in range(seconds):
        ts = f"2020.01.01_10.{s // 60:02d}.{s % 60:02d}"
        lines.append(f"{ts},{dl_kbps},D,-\n")
        if s % ping_every_s == 0:
            lines.append(f"{ts},0,D,{ping_ms}\n")  # ping rows pause the download: left out of the bitrate
    path.write_text(UCC_HEADER + "".join(lines))
    return path


def test_constant_paths_gophers(tmp_path: Path) -> None:
    trace = mlpm_eval.load_gophers_driving(gophers_file(tmp_path / "g.csv", [(10, 20, 5)] * 30))
    report = mlpm_eval.build_report([trace], reps=200)
    s = report["schedulers"]
    for name in ("mlpm", "lortt", "oracle"):
        assert s[name]["mean_throughput_mbps"] == pytest.approx(20.0)
    assert s["round_robin"]["mean_throughput_mbps"] == pytest.approx((10 + 20 + 5) / 3, abs=0.5)
    assert "mean_rtt_ms" not in s["mlpm"]
    ds = report["datasets"][0]
    assert ds["simultaneous"] is True and ds["has_rtt"] is False
    assert ds["lortt_fallback_steps"] == 29
    assert any("greedy pick on the last observed throughput" in n for n in ds["notes"])


def test_forecast_anticipates_a_crossing(tmp_path: Path) -> None:
    # Sprint falls 10 Mbit/s per second, T-Mobile rises as much: the trend sees the crossing coming,
    # the greedy pick on the last value (LoRTT without RTT) is one step late.
    rows = [(100.0 - 10 * t, 10.0 * t, 0.0) for t in range(11)]
    trace = mlpm_eval.load_gophers_driving(gophers_file(tmp_path / "x.csv", rows))
    r = mlpm_eval.replay(trace)
    assert r.throughput_mbps["mlpm"].mean() > r.throughput_mbps["lortt"].mean()
    assert r.throughput_mbps["oracle"].mean() >= r.throughput_mbps["mlpm"].mean()


def test_ucc_pair_rtt_and_pairing_note(tmp_path: Path) -> None:
    a = ucc_file(tmp_path / "a.csv", 60, dl_kbps=1000, ping_ms=50)
    b = ucc_file(tmp_path / "b.csv", 80, dl_kbps=1000, ping_ms=20)
    trace = mlpm_eval.ucc_pair(a, b)
    assert trace.steps == 60 and not trace.simultaneous
    assert trace.throughput_bps[0, 3] == pytest.approx(1e6)  # ping rows left out of the bitrate
    report = mlpm_eval.build_report([trace], profile=mlpm_eval.ApplicationProfile.INTERACTIVE, reps=200)
    s = report["schedulers"]
    assert s["lortt"]["mean_rtt_ms"] == pytest.approx(20.0)
    assert s["mlpm"]["mean_rtt_ms"] == pytest.approx(20.0)
    assert s["round_robin"]["mean_rtt_ms"] == pytest.approx(35.0, abs=1.0)
    assert report["gains"]["mlpm_vs_round_robin"]["rtt_pct"] < 0
    assert any("NOT measured simultaneously" in n for n in report["datasets"][0]["notes"])


def test_malformed_inputs_are_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a 5Gophers driving trace"):
        mlpm_eval.load_gophers_driving(bad)
    with pytest.raises(ValueError, match="not a UCC 5G trace"):
        mlpm_eval.load_ucc(bad)
    with pytest.raises(ValueError, match="no traces"):
        mlpm_eval.build_report([])


def test_cli_requires_inputs_without_shared_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mlpm_eval, "default_inputs", lambda: ([], []))
    result = CliRunner().invoke(
        app, ["eval", "mlpm", "--report", str(tmp_path / "r.json"), "--plot", str(tmp_path / "p.png")]
    )
    assert result.exit_code != 0
    assert "--gophers-driving" in result.output and not (tmp_path / "r.json").exists()


def test_cli_on_shared_data(tmp_path: Path) -> None:
    gophers = SHARED / "5gophers" / "driving-trace-1.csv"
    ucc_dir = SHARED / "ucc-5g" / "download" / "driving"
    ucc = [ucc_dir / "B_2019.12.16_11.49.59.csv", ucc_dir / "B_2020.02.27_20.35.57.csv"]
    if not (gophers.is_file() and all(u.is_file() for u in ucc)):
        pytest.skip(f"shared data not found under {SHARED} (the UCC traces are GPL-3.0 and not vendored)")
    report_path, plot_path = tmp_path / "r.json", tmp_path / "p.png"
    args = ["eval", "mlpm", "--gophers-driving", str(gophers), "--ucc", str(ucc[0]), str(ucc[1])]
    args += ["--report", str(report_path), "--plot", str(plot_path), "--bootstrap", "200"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert set(report["schedulers"]) == {"mlpm", "lortt", "round_robin", "oracle"}
    for entry in report["schedulers"].values():
        lo, hi = entry["mean_throughput_mbps_ci95"]
        assert lo <= entry["mean_throughput_mbps"] <= hi
        lo, hi = entry["mean_rtt_ms_ci95"]
        assert lo <= entry["mean_rtt_ms"] <= hi
    assert report["paper_table_ii"]["rtt_pct_vs_default"] == -7.6
    assert report["paper_table_ii"]["throughput_pct_vs_lortt"] == 2.8
    assert {"throughput_pct", "rtt_pct"} <= set(report["gains"]["mlpm_vs_lortt"])
    assert [d["simultaneous"] for d in report["datasets"]] == [True, False]
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "mlpm vs lortt" in result.output


def test_cli_scores_the_classifier_the_service_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`eval mlpm` decides with the settings' mlpm.classifier (default: the fitted one, as adapters.mlpm serves),
    names it in the report, and scores the hand-set one on request (--classifier or EDGEPATH_MLPM__CLASSIFIER)."""
    from edgepath.adapters import mlpm as mlpm_adapter
    from edgepath.engines import mlpm
    from edgepath.settings import load_settings

    # The service's choice of classifier, per priority and setting, is the one the evaluation resolves.
    for value in mlpm_eval.CLASSIFIERS:
        settings = load_settings(mlpm_classifier=value)
        for profile in mlpm_eval.ApplicationProfile:
            priority = mlpm.PROFILE_PRIORITY[profile]
            assert mlpm_eval.classifier_for(profile, value) is mlpm_adapter._fitted(priority, settings)
    # Path A: 10 Mbit/s at 50 ms; path B: 1 Mbit/s at 40 ms. For a latency profile the hand-set classifier
    # (gain 8, 0.8/0.2 split) still prioritises A, the fitted one (RTT weight ~17, throughput ~0.2) B.
    a = ucc_file(tmp_path / "a.csv", 60, dl_kbps=10_000, ping_ms=50)
    b = ucc_file(tmp_path / "b.csv", 60, dl_kbps=1_000, ping_ms=40)

    def run(*extra: str) -> dict:
        out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
        args = ["eval", "mlpm", "--ucc", str(a), str(b), "--profile", "INTERACTIVE", "--bootstrap", "100"]
        result = CliRunner().invoke(app, [*args, *extra, "--report", str(out), "--plot", str(tmp_path / "p.png")])
        assert result.exit_code == 0, result.output
        report = json.loads(out.read_text())
        assert f"MLPM classifier: {report['method']['classifier']}" in result.output
        return report

    monkeypatch.delenv("EDGEPATH_MLPM__CLASSIFIER", raising=False)
    monkeypatch.delenv("EDGEPATH_MLPM_CLASSIFIER", raising=False)
    served = run()
    assert served["method"]["classifier"] == "fitted"
    assert served["method"]["classifier_source"] == mlpm.FITTED_SOURCE
    trace = mlpm_eval.ucc_pair(a, b)
    profile = mlpm_eval.ApplicationProfile.INTERACTIVE
    fitted = mlpm_eval.build_report([trace], profile=profile, fitted=mlpm.FITTED[mlpm.Priority.LATENCY], reps=100)
    hand_set = mlpm_eval.build_report([trace], profile=profile, reps=100)
    choices = served["datasets"][0]["schedulers"]["mlpm"]["choices"]
    assert choices == fitted["datasets"][0]["schedulers"]["mlpm"]["choices"]
    assert choices != hand_set["datasets"][0]["schedulers"]["mlpm"]["choices"]

    on_request = run("--classifier", "hand_set")
    assert on_request["method"]["classifier"] == "hand_set"
    assert on_request["method"]["gain"] == 8.0 and on_request["method"]["bias"] == -4.0
    assert (
        on_request["datasets"][0]["schedulers"]["mlpm"]["choices"]
        == (hand_set["datasets"][0]["schedulers"]["mlpm"]["choices"])
    )
    monkeypatch.setenv("EDGEPATH_MLPM__CLASSIFIER", "hand_set")
    assert run()["method"]["classifier"] == "hand_set"

    bad = CliRunner().invoke(
        app, ["eval", "mlpm", "--ucc", str(a), str(b), "--classifier", "learned", "--report", "x", "--plot", "y"]
    )
    assert bad.exit_code == 2 and "mlpm.classifier" in bad.output
