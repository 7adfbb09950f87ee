"""The one reader of the "Mobile Access Bandwidth in Practice" rows (SIGCOMM 2022): CSV row → context fields.

Shared by the agent's replay (:mod:`edgepath_agent.replay`, ``edgepath-agent[replay]``) and the service's
lab (:mod:`edgepath.datasets.mobilebandwidth`: offline training and evaluation, ``edgepath[lab]``), so the
contexts a warm-started model is trained on are those the replay sends at serving time (no train/serve
skew). It lives in the agent package because that is the smaller of the two packages both sides can
install, and it is dependency-free (standard library only): the device runtime may carry it, but never
imports it (``.importlinter-agent``), and neither needs pandas for it.

Data: Li et al., *Mobile Access Bandwidth in Practice: Measurement, Analysis, and Implications*, ACM
SIGCOMM 2022; release (Apache-2.0) vendored in ``service/data/mobilebandwidth``. One row is one Android
bandwidth test; a cell holding ``a;b;c`` is the series of readings of that test.

Mapping
-------
Each series is summarised by its **median** (the context value) and, for the signal series, its
**spread** (population standard deviation, same unit). ``2147483647`` (Android's
``CellInfo.UNAVAILABLE``), empty cells, text such as ``Added in API level 30`` and readings outside
the field's range (:data:`RANGES`, the service's ``InterfaceContext`` validation) are dropped; a series
with no valid reading is missing. A derived value (carrier frequency, channel bandwidth) outside its
range is dropped rather than clipped.

=============================  ==========================  ===========================================
context field                  WiFi column (wifi4.csv)     cellular column (4G.csv)
=============================  ==========================  ===========================================
wifi_rssi_dbm / spread         wifi_rssi                   —
link_speed_mbps                wifi_linkSpeed              —
max_link_speed_mbps            wifi_maxSupportedRxLink…    —
frequency_mhz                  wifi_frequency              cell_earfcn → downlink MHz (3GPP TS 36.101
                                                           Table 5.7.3-1: F = F_low + 0.1 (N − N_offs))
rsrp_dbm / rsrp_spread_db      —                           cell_rsrp
rsrq_db                        —                           cell_rsrq
sinr_db                        —                           cell_rssnr
cell_rssi_dbm                  —                           cell_rssi
channel_bandwidth_mhz          —                           cell_bandwidth (kHz) / 1000
=============================  ==========================  ===========================================

No RTT, loss or CQI is in this data: those stay missing.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Protocol

UNAVAILABLE = 2147483647
"""Android ``CellInfo.UNAVAILABLE`` (Integer.MAX_VALUE): a missing reading."""

#: Inclusive range of each context field (the service's ``edgepath.types.InterfaceContext`` validation;
#: tests/agent/test_replay_parity.py checks they agree).
RANGES: dict[str, tuple[float, float]] = {
    "wifi_rssi_dbm": (-127.0, 0.0),
    "link_speed_mbps": (0.0, 100_000.0),
    "max_link_speed_mbps": (0.0, 100_000.0),
    "frequency_mhz": (0.0, 100_000.0),
    "wifi_rssi_spread_db": (0.0, 100.0),
    "rsrp_dbm": (-156.0, -31.0),
    "rsrp_spread_db": (0.0, 100.0),
    "rsrq_db": (-34.0, 2.5),
    "sinr_db": (-30.0, 50.0),
    "cell_rssi_dbm": (-140.0, 0.0),
    "channel_bandwidth_mhz": (0.0, 400.0),
}

# 3GPP TS 36.101 Table 5.7.3-1 (E-UTRA downlink): band → (F_DL_low MHz, N_offs_DL, last N_DL).
_EUTRA_DL: tuple[tuple[int, float, int, int], ...] = (
    (1, 2110.0, 0, 599),
    (2, 1930.0, 600, 1199),
    (3, 1805.0, 1200, 1949),
    (4, 2110.0, 1950, 2399),
    (5, 869.0, 2400, 2649),
    (7, 2620.0, 2750, 3449),
    (8, 925.0, 3450, 3799),
    (12, 729.0, 5010, 5179),
    (17, 734.0, 5730, 5849),
    (20, 791.0, 6150, 6449),
    (28, 758.0, 9210, 9659),
    (34, 2010.0, 36200, 36349),
    (38, 2570.0, 37750, 38249),
    (39, 1880.0, 38250, 38649),
    (40, 2300.0, 38650, 39649),
    (41, 2496.0, 39650, 41589),
)


class Row(Protocol):
    """A CSV row: a ``csv.DictReader`` dict or a pandas ``Series`` (anything with ``get(column)``)."""

    def get(self, key: str, default: Any = None, /) -> Any: ...


def parse_series(cell: object, lo: float = -math.inf, hi: float = math.inf) -> list[float]:
    """Valid readings of one cell (``'a;b;c'``): sentinels, blanks, text, NaN and readings outside [lo, hi] dropped."""
    if cell is None:
        return []
    out: list[float] = []
    for part in str(cell).split(";"):
        part = part.strip()
        if not part:
            continue
        try:
            v = float(part)
        except ValueError:
            continue
        if math.isfinite(v) and v != UNAVAILABLE and lo <= v <= hi:
            out.append(v)
    return out


def series_median(cell: object, lo: float = -math.inf, hi: float = math.inf) -> float | None:
    """Median of the valid readings, or None when there is none."""
    values = parse_series(cell, lo, hi)
    return float(statistics.median(values)) if values else None


def series_spread(cell: object, lo: float = -math.inf, hi: float = math.inf) -> float | None:
    """Population standard deviation of the valid readings (0 for one reading), or None."""
    values = parse_series(cell, lo, hi)
    return float(statistics.pstdev(values)) if values else None


def earfcn_to_downlink_mhz(earfcn: float | None) -> float | None:
    """Downlink carrier frequency of an E-UTRA ARFCN, MHz, or None when unknown.

    3GPP TS 36.101 §5.7.3: ``F_DL = F_DL_low + 0.1 (N_DL − N_Offs-DL)``, bands of Table 5.7.3-1 deployed in
    China and Europe (1–8, 12, 17, 20, 28, 34, 38–41).
    """
    if earfcn is None:
        return None
    n = int(earfcn)
    for _band, f_low, n_offs, n_last in _EUTRA_DL:
        if n_offs <= n <= n_last:
            return f_low + 0.1 * (n - n_offs)
    return None


def _in_range(field: str, value: float | None) -> float | None:
    lo, hi = RANGES[field]
    return value if value is not None and lo <= value <= hi else None


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def wifi_fields(row: Row, name: str = "wlan0") -> dict[str, Any]:
    """WiFi test row (wifi4/5/6.csv) → ``InterfaceContext`` fields in REST JSON shape (missing ones left out).

    Units: RSSI and its spread dBm/dB, link speeds Mbit/s, frequency MHz.
    """
    rssi = RANGES["wifi_rssi_dbm"]
    return _present(
        {
            "name": name,
            "access_type": "WIFI",
            "wifi_rssi_dbm": series_median(row.get("wifi_rssi"), *rssi),
            "link_speed_mbps": series_median(row.get("wifi_linkSpeed"), *RANGES["link_speed_mbps"]),
            "frequency_mhz": series_median(row.get("wifi_frequency"), *RANGES["frequency_mhz"]),
            "wifi_rssi_spread_db": _in_range("wifi_rssi_spread_db", series_spread(row.get("wifi_rssi"), *rssi)),
            "max_link_speed_mbps": series_median(
                row.get("wifi_maxSupportedRxLinkSpeedMbps"), *RANGES["max_link_speed_mbps"]
            ),
        }
    )


def cellular_fields(row: Row, name: str = "wwan0", access_type: str = "LTE") -> dict[str, Any]:
    """Cellular test row (4G.csv) → ``InterfaceContext`` fields in REST JSON shape (missing ones left out).

    Units: RSRP/RSSI dBm, RSRQ/SINR and the RSRP spread dB, carrier frequency and channel bandwidth MHz.
    """
    rsrp = RANGES["rsrp_dbm"]
    bandwidth_khz = series_median(row.get("cell_bandwidth"))
    return _present(
        {
            "name": name,
            "access_type": access_type,
            "rsrp_dbm": series_median(row.get("cell_rsrp"), *rsrp),
            "rsrq_db": series_median(row.get("cell_rsrq"), *RANGES["rsrq_db"]),
            "sinr_db": series_median(row.get("cell_rssnr"), *RANGES["sinr_db"]),
            "cell_rssi_dbm": series_median(row.get("cell_rssi"), *RANGES["cell_rssi_dbm"]),
            "rsrp_spread_db": _in_range("rsrp_spread_db", series_spread(row.get("cell_rsrp"), *rsrp)),
            "frequency_mhz": _in_range("frequency_mhz", earfcn_to_downlink_mhz(series_median(row.get("cell_earfcn")))),
            "channel_bandwidth_mhz": _in_range(
                "channel_bandwidth_mhz", bandwidth_khz / 1000.0 if bandwidth_khz else None
            ),
        }
    )
