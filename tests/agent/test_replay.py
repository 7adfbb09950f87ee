"""Replay: parsing real mobilebandwidth rows, the city/ISP pairing, and a short replay against a real service."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from edgepath_agent import replay as rp
from edgepath_agent.client import connect

DATA = Path(__file__).resolve().parents[2] / "service" / "data" / "mobilebandwidth"


@pytest.fixture(scope="module")
def wifi() -> pd.DataFrame:
    return rp.load_tests(DATA / "wifi4.csv")


@pytest.fixture(scope="module")
def cellular() -> pd.DataFrame:
    return rp.load_tests(DATA / "4G.csv")


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("-84;-84;-90", -84.0),
        ("2147483647", None),
        ("", None),
        (float("nan"), None),
        ("Added in API level 26;-7;-9", -8.0),  # text found in real 4G rows
        ("2147483647;-100", -100.0),
    ],
)
def test_series_median_ignores_sentinels_and_text(cell: object, expected: float | None) -> None:
    assert rp.series_median(cell) == expected


def test_series_median_drops_values_outside_the_range() -> None:
    assert rp.series_median("3;-60;-62", -127.0, 0.0) == -61.0  # +3 dBm WiFi RSSI is not physical


def test_real_rows_become_valid_contexts(wifi: pd.DataFrame, cellular: pd.DataFrame) -> None:
    from edgepath.types import RecommendRequest

    for i in range(0, 400, 7):
        ifaces = [rp.wifi_interface(wifi.loc[i]), rp.cellular_interface(cellular.loc[i])]
        RecommendRequest.model_validate({"device_id": "d", "interfaces": ifaces})  # raises if out of range
    first = rp.cellular_interface(cellular.loc[0])
    assert first == {
        "name": "wwan0",
        "access_type": "LTE",
        "rsrp_dbm": -84.0,
        "rsrq_db": -6.0,
        "sinr_db": 1.0,
        "cell_rssi_dbm": -83.0,
        # warm-start fields (issue 8): RSRP series -84;-84, EARFCN 1650 (band 3), bandwidth 2147483647 = missing
        "rsrp_spread_db": 0.0,
        "frequency_mhz": 1850.0,
    }


def test_pairs_share_the_city_and_the_isp_when_possible(wifi: pd.DataFrame, cellular: pd.DataFrame) -> None:
    situations = rp.pair_situations(wifi, cellular, rounds=500, seed=7)
    assert len(situations) == 500
    for s in situations:
        w, c = wifi.loc[s.wifi_row], cellular.loc[s.cellular_row]
        assert w["user_city_id"] == c["user_city_id"] == s.city
        same_isp_available = (
            (cellular["user_city_id"] == s.city) & (cellular["user_isp_id"] == w["user_isp_id"])
        ).any()
        assert s.same_isp == bool(same_isp_available and w["user_isp_id"])
        if s.same_isp:
            assert w["user_isp_id"] == c["user_isp_id"]
        assert s.wifi_mbps == w["bandwidth_Mbps"] and s.cellular_mbps == c["bandwidth_Mbps"]


def test_pairing_is_reproducible_by_seed(wifi: pd.DataFrame, cellular: pd.DataFrame) -> None:
    a = rp.pair_situations(wifi, cellular, rounds=100, seed=3)
    b = rp.pair_situations(wifi, cellular, rounds=100, seed=3)
    c = rp.pair_situations(wifi, cellular, rounds=100, seed=4)
    assert [(s.wifi_row, s.cellular_row) for s in a] == [(s.wifi_row, s.cellular_row) for s in b]
    assert [(s.wifi_row, s.cellular_row) for s in a] != [(s.wifi_row, s.cellular_row) for s in c]


def test_more_rounds_than_wifi_tests_starts_a_new_pass() -> None:
    wifi = pd.DataFrame(
        {"user_city_id": ["x", "x", "y"], "user_isp_id": ["a", "b", "a"], "bandwidth_Mbps": [10.0, 20.0, 30.0]}
    )
    cell = pd.DataFrame({"user_city_id": ["x"], "user_isp_id": ["a"], "bandwidth_Mbps": [5.0]})
    situations = rp.pair_situations(wifi, cell, rounds=5, seed=1)
    assert [s.wifi_row for s in situations[:2]] and all(s.city == "x" for s in situations)
    assert sorted(s.wifi_row for s in situations[:2]) == [0, 1]  # one pass covers each pairable row once
    assert [s.same_isp for s in situations].count(True) >= 1


def test_no_shared_city_is_a_clear_error() -> None:
    wifi = pd.DataFrame({"user_city_id": ["x"], "user_isp_id": ["a"], "bandwidth_Mbps": [1.0]})
    cell = pd.DataFrame({"user_city_id": ["y"], "user_isp_id": ["a"], "bandwidth_Mbps": [1.0]})
    with pytest.raises(ValueError, match="user_city_id"):
        rp.pair_situations(wifi, cell, rounds=1, seed=0)


@pytest.mark.parametrize("scheme", ["grpc", "http"])
def test_short_replay_against_a_real_service_writes_report_and_plot(
    service: object, scheme: str, wifi: pd.DataFrame, cellular: pd.DataFrame, tmp_path: Path
) -> None:
    url = service.grpc_url if scheme == "grpc" else service.http_url  # type: ignore[attr-defined]
    situations = rp.pair_situations(wifi, cellular, rounds=120, seed=7)
    client = connect(url)
    try:
        result = rp.run_replay(client, situations)
    finally:
        client.close()
    report = rp.build_report(result, seed=7, data={}, service_url=url)
    assert report["rounds"] == 120 and report["policy"] == "ridge_squarecb"  # the default policy (issue 15)
    assert set(report["mean_throughput_mbps"]) == {"policy", "wifi_first", "lte_first", "random", "oracle"}
    means = report["mean_throughput_mbps"]
    assert means["oracle"] >= max(means["policy"], means["wifi_first"], means["lte_first"])
    assert "same user_city_id" in report["pairing"]
    # batch size 10 in the fixture: the model is refit online (in a separate process, so the last decisions
    # of the replay may still be served by version 1; wait, bounded, for the refit to be published)
    assert report["final_model_version"] >= 1
    published = service.call(service.service.registry.wait_for_version(2, timeout_s=60), timeout=70)  # type: ignore[attr-defined]
    assert published.version >= 2
    rp.write_report(report, tmp_path / "r.json")
    rp.plot_running_means(result, tmp_path / "p.png", "test")
    assert json.loads((tmp_path / "r.json").read_text())["rounds"] == 120
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
