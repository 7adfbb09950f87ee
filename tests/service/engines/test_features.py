"""The one feature function shared by training and serving, on real mobilebandwidth rows."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from edgepath.datasets.mobilebandwidth import (
    UNAVAILABLE,
    cellular_interface,
    earfcn_to_downlink_mhz,
    parse_series,
    read_measurements,
    series_median,
    series_spread,
    wifi_interface,
)
from edgepath.engines.features import (
    FEATURE_GROUPS,
    FEATURE_NAMES,
    N_FEATURES,
    context_features,
    feature_mask,
)
from edgepath.types import AccessType, InterfaceContext

DATA = Path(__file__).resolve().parents[3] / "service" / "data" / "mobilebandwidth"


def _rows(name: str, n: int) -> list[dict[str, str]]:
    with (DATA / name).open(newline="") as fh:
        return [row for _, row in zip(range(n), csv.DictReader(fh), strict=False)]


def col(name: str) -> int:
    return FEATURE_NAMES.index(name)


def test_series_parsing_drops_sentinels_blanks_and_text() -> None:
    assert parse_series(f"{UNAVAILABLE};;-50;Added in API level 30;-52") == [-50.0, -52.0]
    assert parse_series(f"{UNAVAILABLE};{UNAVAILABLE}") == []
    assert series_median("") is None
    assert series_median(f"{UNAVAILABLE}") is None
    assert series_median("-84;-84;-90") == -84.0
    assert series_spread("-84;-86") == pytest.approx(1.0)
    assert series_spread("-70") == 0.0


def test_earfcn_maps_to_downlink_frequency() -> None:
    # 3GPP TS 36.101 Table 5.7.3-1: band 3 EARFCN 1650 -> 1805 + 0.1 * (1650 - 1200) = 1850 MHz
    assert earfcn_to_downlink_mhz(1650) == pytest.approx(1850.0)
    assert earfcn_to_downlink_mhz(38400) == pytest.approx(1895.0)  # band 39 (TDD)
    assert earfcn_to_downlink_mhz(UNAVAILABLE) is None


def test_real_wifi_row_features() -> None:
    row = _rows("wifi4.csv", 1)[0]  # realme RMX3161: RSSI -55..-54, link speed 72, 2462 MHz, max Rx 150
    iface = wifi_interface(row)
    assert iface.wifi_rssi_dbm == -54.0
    assert iface.link_speed_mbps == 72.0
    assert iface.max_link_speed_mbps == 150.0
    assert iface.wifi_rssi_spread_db is not None and 0.0 < iface.wifi_rssi_spread_db < 1.0
    x = context_features([iface])
    assert x.shape == (N_FEATURES,)
    assert x[col("wifi.present")] == 1.0 and x[col("lte.present")] == 0.0
    assert x[col("wifi.wifi_rssi_dbm")] == pytest.approx((-54.0 + 65.0) / 10.0)
    assert x[col("wifi.wifi_rssi_dbm.missing")] == 0.0
    assert x[col("wifi.link_speed_mbps")] == pytest.approx((math.log10(73.0) - 2.0) / 0.5)
    assert x[col("wifi.band_5ghz")] == 0.0 and x[col("wifi.band_5ghz.missing")] == 0.0
    assert x[col("wifi.rtt_ms.missing")] == 1.0  # the data has no RTT


def test_real_cellular_row_with_sentinel_series() -> None:
    row = _rows("4G.csv", 3)[2]  # cell_rssi is 2147483647 in every reading; cell_bandwidth 20000 kHz
    assert str(UNAVAILABLE) in row["cell_rssi"]
    iface = cellular_interface(row)
    assert iface.cell_rssi_dbm is None
    assert iface.rsrp_dbm == -96.0 and iface.rsrq_db == -17.0
    assert iface.channel_bandwidth_mhz == 20.0
    assert iface.frequency_mhz == pytest.approx(1870.0)  # EARFCN 1850, band 3
    x = context_features([iface])
    assert x[col("lte.cell_rssi_dbm.missing")] == 1.0 and x[col("lte.cell_rssi_dbm")] == 0.0
    assert x[col("lte.rsrp_dbm")] == pytest.approx((-96.0 + 95.0) / 15.0)
    assert x[col("lte.shannon_capacity_mbps.missing")] == 0.0  # SINR 0 dB, 20 MHz -> 20 Mbit/s bound
    assert x[col("lte.shannon_capacity_mbps")] == pytest.approx((math.log10(21.0) - 1.8) / 0.5)


def test_bandwidth_sentinel_means_missing_channel_bandwidth() -> None:
    rows = [r for r in _rows("4G.csv", 50) if r["cell_bandwidth"] == str(UNAVAILABLE)]
    assert rows, "the first rows of 4G.csv include a 2147483647 cell_bandwidth"
    iface = cellular_interface(rows[0])
    assert iface.channel_bandwidth_mhz is None
    x = context_features([iface])
    assert x[col("lte.channel_bandwidth_mhz.missing")] == 1.0
    assert x[col("lte.shannon_capacity_mbps.missing")] == 1.0


def test_all_missing_context_is_finite_and_flags_every_measurement() -> None:
    bare = [
        InterfaceContext(name="wlan0", access_type=AccessType.WIFI),
        InterfaceContext(name="wwan0", access_type=AccessType.LTE),
    ]
    x = context_features(bare)
    assert np.all(np.isfinite(x))
    wifi_lte_missing = [i for i in FEATURE_GROUPS["missing"] if FEATURE_NAMES[i].startswith(("wifi.", "lte."))]
    assert np.all(x[wifi_lte_missing] == 1.0)
    values = [i for g, ix in FEATURE_GROUPS.items() if g not in ("missing", "presence") for i in ix]
    assert np.all(x[values] == 0.0)


def test_all_rows_of_both_files_encode_finitely() -> None:
    ms = read_measurements(DATA / "wifi4.csv")[:500] + read_measurements(DATA / "4G.csv")[:500]
    X = np.vstack([context_features([m.interface]) for m in ms])
    assert np.all(np.isfinite(X)) and np.all(np.abs(X) <= 5.0)
    # some real rows miss RSSNR/RSSI: the indicators vary, they are not constant
    assert 0 < X[500:, col("lte.cell_rssi_dbm.missing")].sum() < 500


def test_same_vector_after_the_wire_round_trip() -> None:
    """No train/serve skew: a context rebuilt from its JSON (REST body) encodes identically."""
    row_w, row_c = _rows("wifi4.csv", 1)[0], _rows("4G.csv", 2)[1]
    ifaces = [wifi_interface(row_w), cellular_interface(row_c)]
    again = [InterfaceContext.model_validate_json(i.model_dump_json(exclude_none=True)) for i in ifaces]
    assert np.array_equal(context_features(ifaces), context_features(again))


def test_groups_partition_the_columns() -> None:
    seen = sorted(i for ix in FEATURE_GROUPS.values() for i in ix)
    assert seen == list(range(N_FEATURES))
    mask = feature_mask(["spread"])
    assert not mask[col("wifi.wifi_rssi_spread_db")] and mask[col("wifi.wifi_rssi_dbm")]
    with pytest.raises(KeyError):
        feature_mask(["no-such-group"])
