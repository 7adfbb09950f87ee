"""Rows of the "Mobile Access Bandwidth in Practice" data (SIGCOMM 2022) → radio contexts.

Source: Li et al., *Mobile Access Bandwidth in Practice: Measurement, Analysis,
and Implications*, ACM SIGCOMM 2022; data release (Apache-2.0) vendored in
``service/data/mobilebandwidth`` with its licence and attribution. One CSV row
is one crowd-sourced Android bandwidth test: the downlink result
``bandwidth_Mbps`` and the radio readings taken during the test.

Row → :class:`~edgepath.types.InterfaceContext`
------------------------------------------------
A cell holding ``a;b;c`` is the series of readings of one test. Each series is
summarised by its **median** (the context value) and, for the signal series,
its **spread** (population standard deviation, same unit). ``2147483647``
(Android's ``CellInfo.UNAVAILABLE``), empty cells, text such as
``Added in API level 30`` and readings outside the range
:class:`~edgepath.types.InterfaceContext` accepts for the field are dropped; a
series with no valid reading is missing. A derived value (carrier frequency,
channel bandwidth) outside its range is dropped (missing) rather than clipped.
The agent's replay (``edgepath_agent.replay``, shipped separately) repeats this
mapping; ``tests/agent/test_replay_parity.py`` checks both on the same real rows.

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

Pairing
-------
No public data set measures WiFi and LTE on the same device at the same
moment, so a *situation* pairs a real WiFi test with a real 4G test of the same
city (``user_city_id``), preferring the same ISP: for every WiFi test, in file
order, one cellular test of the same city and ISP is drawn uniformly at random
(``numpy.random.default_rng(seed)``); if the city has none of that ISP, one of
the same city; WiFi tests of a city without cellular tests are skipped. Both
arms' outcomes of a situation are therefore known (full information) but
come from two different tests; every report built on them says so.

Split by user
-------------
:func:`split_by_user` assigns each ``user_uid`` to the test side when the first
8 bytes of ``SHA-256(salt + user_uid)`` read as an integer fall below
``test_fraction · 2^64``; the split is deterministic and the same user lands
on the same side in both files, so test users are unseen in training.
"""

from __future__ import annotations

import csv
import hashlib
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import ValidationError

from edgepath.types import AccessType, InterfaceContext

UNAVAILABLE = 2147483647
"""Android ``CellInfo.UNAVAILABLE`` (Integer.MAX_VALUE): a missing reading."""

WIFI_INTERFACE = "wlan0"
CELLULAR_INTERFACE = "wwan0"

Kind = Literal["wifi", "cellular"]

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


def earfcn_to_downlink_mhz(earfcn: float | None) -> float | None:
    """Downlink carrier frequency of an E-UTRA ARFCN, MHz, or None when unknown.

    3GPP TS 36.101 §5.7.3: ``F_DL = F_DL_low + 0.1 (N_DL − N_Offs-DL)``, bands
    of Table 5.7.3-1 deployed in China and Europe (1–8, 12, 17, 20, 28, 34, 38–41).
    """
    if earfcn is None:
        return None
    n = int(earfcn)
    for _band, f_low, n_offs, n_last in _EUTRA_DL:
        if n_offs <= n <= n_last:
            return f_low + 0.1 * (n - n_offs)
    return None


def parse_series(cell: object, lo: float = -math.inf, hi: float = math.inf) -> list[float]:
    """Valid readings of one CSV cell (``'a;b;c'``): sentinels, blanks, text and readings outside [lo, hi] dropped."""
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
        if not math.isfinite(v) or v == UNAVAILABLE or not lo <= v <= hi:
            continue
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


def bounds(field_name: str) -> tuple[float, float]:
    """The inclusive range :class:`InterfaceContext` accepts for ``field_name`` (±inf when unbounded)."""
    lo, hi = -math.inf, math.inf
    info = InterfaceContext.model_fields.get(field_name)
    for meta in info.metadata if info is not None else ():
        lo = float(getattr(meta, "ge", lo))
        hi = float(getattr(meta, "le", hi))
    return lo, hi


def _valid_interface(fields: dict[str, Any]) -> InterfaceContext:
    """Build the context; a field the model rejects (out of range) is dropped, then retried."""
    fields = {k: v for k, v in fields.items() if v is not None}
    for _ in range(len(fields) + 1):
        try:
            return InterfaceContext.model_validate(fields)
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
            bad -= {"name", "access_type"}
            if not bad:
                raise
            for name in bad:
                fields.pop(name, None)
    raise AssertionError("unreachable")  # pragma: no cover


def _only_known(fields: dict[str, Any]) -> dict[str, Any]:
    """Keep fields the InterfaceContext model declares (older models lack the newer ones)."""
    return {k: v for k, v in fields.items() if k in InterfaceContext.model_fields}


def wifi_interface(row: Mapping[str, Any], name: str = WIFI_INTERFACE) -> InterfaceContext:
    """Context of the WiFi interface from one wifi4/5/6.csv row (see module table)."""
    rssi = bounds("wifi_rssi_dbm")
    return _valid_interface(
        _only_known(
            {
                "name": name,
                "access_type": AccessType.WIFI,
                "wifi_rssi_dbm": series_median(row.get("wifi_rssi"), *rssi),
                "wifi_rssi_spread_db": series_spread(row.get("wifi_rssi"), *rssi),
                "link_speed_mbps": series_median(row.get("wifi_linkSpeed"), *bounds("link_speed_mbps")),
                "max_link_speed_mbps": series_median(
                    row.get("wifi_maxSupportedRxLinkSpeedMbps"), *bounds("max_link_speed_mbps")
                ),
                "frequency_mhz": series_median(row.get("wifi_frequency"), *bounds("frequency_mhz")),
            }
        )
    )


def cellular_interface(row: Mapping[str, Any], name: str = CELLULAR_INTERFACE) -> InterfaceContext:
    """Context of the LTE interface from one 4G.csv row (see module table)."""
    bandwidth_khz = series_median(row.get("cell_bandwidth"))
    return _valid_interface(
        _only_known(
            {
                "name": name,
                "access_type": AccessType.LTE,
                "rsrp_dbm": series_median(row.get("cell_rsrp"), *bounds("rsrp_dbm")),
                "rsrp_spread_db": series_spread(row.get("cell_rsrp"), *bounds("rsrp_dbm")),
                "rsrq_db": series_median(row.get("cell_rsrq"), *bounds("rsrq_db")),
                "sinr_db": series_median(row.get("cell_rssnr"), *bounds("sinr_db")),
                "cell_rssi_dbm": series_median(row.get("cell_rssi"), *bounds("cell_rssi_dbm")),
                "frequency_mhz": earfcn_to_downlink_mhz(series_median(row.get("cell_earfcn"))),
                "channel_bandwidth_mhz": None if not bandwidth_khz else bandwidth_khz / 1000.0,
            }
        )
    )


@dataclass(frozen=True)
class Measurement:
    """One bandwidth test: who, where, the measured downlink and the interface context."""

    user_uid: str
    city: str
    isp: str
    throughput_mbps: float
    interface: InterfaceContext


def _kind_of(header: Sequence[str]) -> Kind:
    if "wifi_rssi" in header:
        return "wifi"
    if "cell_rsrp" in header:
        return "cellular"
    raise ValueError("not a mobilebandwidth WiFi or 4G CSV (no wifi_rssi / cell_rsrp column)")


def read_measurements(path: Path | str, kind: Kind | None = None) -> list[Measurement]:
    """Read a mobilebandwidth CSV (wifi4/5/6.csv or 4G.csv) into measurements.

    Rows without a valid ``bandwidth_Mbps`` or ``user_uid`` are skipped.

    Raises
    ------
    ValueError
        When the file's header matches neither format, or ``kind`` disagrees with it.
    FileNotFoundError
        When ``path`` does not exist.
    """
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        found = _kind_of(reader.fieldnames or [])
        if kind is not None and kind != found:
            raise ValueError(f"{path}: expected a {kind} CSV, found a {found} CSV")
        make = wifi_interface if found == "wifi" else cellular_interface
        out = []
        for row in reader:
            bw = series_median(row.get("bandwidth_Mbps"))
            uid = (row.get("user_uid") or "").strip()
            if bw is None or bw < 0 or not uid:
                continue
            out.append(
                Measurement(
                    user_uid=uid,
                    city=(row.get("user_city_id") or "").strip(),
                    isp=(row.get("user_isp_id") or "").strip(),
                    throughput_mbps=bw,
                    interface=make(row),
                )
            )
    return out


def is_test_user(user_uid: str, test_fraction: float, salt: str = "edgepath-split-v1") -> bool:
    """Deterministic user → side assignment (see module docstring)."""
    digest = hashlib.sha256((salt + user_uid).encode()).digest()
    return int.from_bytes(digest[:8], "big") < test_fraction * 2**64


def split_by_user(
    measurements: Iterable[Measurement], test_fraction: float, salt: str = "edgepath-split-v1"
) -> tuple[list[Measurement], list[Measurement]]:
    """(train, test) with disjoint users; raises ValueError unless 0 < test_fraction < 1."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError("test_fraction must be in (0, 1)")
    train: list[Measurement] = []
    test: list[Measurement] = []
    for m in measurements:
        (test if is_test_user(m.user_uid, test_fraction, salt) else train).append(m)
    return train, test


@dataclass(frozen=True)
class Situation:
    """A paired situation: a WiFi test and a cellular test of the same city (both outcomes known)."""

    wifi: Measurement
    cellular: Measurement

    @property
    def interfaces(self) -> tuple[InterfaceContext, InterfaceContext]:
        return (self.wifi.interface, self.cellular.interface)

    def throughput_mbps(self, access_type: AccessType) -> float:
        return self.wifi.throughput_mbps if access_type == AccessType.WIFI else self.cellular.throughput_mbps


def pair_situations(wifi: Sequence[Measurement], cellular: Sequence[Measurement], seed: int) -> list[Situation]:
    """Pair every WiFi test with a random cellular test of its city (same ISP preferred); see module docstring."""
    rng = np.random.default_rng(seed)
    by_city: dict[str, list[Measurement]] = {}
    by_city_isp: dict[tuple[str, str], list[Measurement]] = {}
    for m in cellular:
        by_city.setdefault(m.city, []).append(m)
        by_city_isp.setdefault((m.city, m.isp), []).append(m)
    out = []
    for w in wifi:
        pool = by_city_isp.get((w.city, w.isp)) or by_city.get(w.city)
        if not pool:
            continue
        out.append(Situation(w, pool[int(rng.integers(len(pool)))]))
    return out


def disjoint_users(train: Sequence[Measurement], test: Sequence[Measurement]) -> list[Measurement]:
    """``test`` without the measurements of users who also appear in ``train``."""
    seen = {m.user_uid for m in train}
    return [m for m in test if m.user_uid not in seen]
