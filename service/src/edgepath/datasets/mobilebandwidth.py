"""Rows of the "Mobile Access Bandwidth in Practice" data (SIGCOMM 2022) → radio contexts.

Source: Li et al., *Mobile Access Bandwidth in Practice: Measurement, Analysis,
and Implications*, ACM SIGCOMM 2022; data release (Apache-2.0) vendored in
``service/data/mobilebandwidth`` with its licence and attribution. One CSV row
is one crowd-sourced Android bandwidth test: the downlink result
``bandwidth_Mbps`` and the radio readings taken during the test.

Row → :class:`~edgepath.types.InterfaceContext`
------------------------------------------------
The mapping (medians and spreads of the ``a;b;c`` reading series, sentinels and out-of-range
readings dropped, EARFCN → carrier MHz) is the one reader shared with the agent's replay,
:mod:`edgepath_agent.mobilebandwidth` (dependency-free, in the agent package; its docstring has the
column table). This module validates its output as :class:`~edgepath.types.InterfaceContext` (a field
the model rejects is dropped) and adds what only the lab needs: measurements, pairing, the user split.
It is part of the lab (``edgepath[lab]``, which installs the agent package): the serving runtime never
imports it (.importlinter, contract ``serving-without-lab``).

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from edgepath_agent.mobilebandwidth import (  # the one CSV → context reader (shared with the agent's replay)
    UNAVAILABLE,
    Row,
    cellular_fields,
    earfcn_to_downlink_mhz,
    parse_series,
    series_median,
    series_spread,
    wifi_fields,
)
from pydantic import ValidationError

from edgepath.types import AccessType, InterfaceContext

__all__ = [
    "CELLULAR_INTERFACE",
    "UNAVAILABLE",
    "WIFI_INTERFACE",
    "Measurement",
    "Situation",
    "bounds",
    "cellular_interface",
    "disjoint_users",
    "earfcn_to_downlink_mhz",
    "is_test_user",
    "pair_situations",
    "parse_series",
    "read_measurements",
    "series_median",
    "series_spread",
    "split_by_user",
    "wifi_interface",
]

WIFI_INTERFACE = "wlan0"
CELLULAR_INTERFACE = "wwan0"

Kind = Literal["wifi", "cellular"]


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


def wifi_interface(row: Row, name: str = WIFI_INTERFACE) -> InterfaceContext:
    """Context of the WiFi interface from one wifi4/5/6.csv row (a ``csv.DictReader`` dict or a pandas ``Series``;
    the shared reader, see module docstring)."""
    return _valid_interface(_only_known(wifi_fields(row, name)))


def cellular_interface(row: Row, name: str = CELLULAR_INTERFACE) -> InterfaceContext:
    """Context of the LTE interface from one 4G.csv row (as :func:`wifi_interface`'s; the shared reader, see module
    docstring)."""
    return _valid_interface(_only_known(cellular_fields(row, name)))


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
