"""Context → feature vector for the primary-path bandit (pure, shared by training and serving).

The bandit's context (Alzadjali et al., Table I: WiFi RSSI and link speed,
cell signal strength, RSRQ, CQI, RSSNR, RTT and loss rate) is encoded as a
fixed-length float vector so that every model sees the same layout whatever
subset of measurements a device reports.

Layout
------
One block per access-type slot, in the order of :data:`SLOTS`
(WIFI, LTE, NR, ETHERNET). A block starts with a *present* flag (1 when the
device offers that access type) followed by, for each measurement of the
slot, a pair ``(scaled value, missing indicator)``:

* missing or absent → scaled value 0.0 (the documented centre below) and indicator 1.0;
* present → ``(x - centre) / scale`` clipped to [-5, 5], indicator 0.0.

Centres and scales are fixed physical constants (not fitted), so the encoding
is identical at training and serving time and needs no stored scaler:

==================  ======  ======  ===========================================
measurement         centre  scale   note
==================  ======  ======  ===========================================
wifi_rssi_dbm       -65     10      -65 dBm ≈ "good" WiFi; ±10 dB per unit
link_speed_mbps     log10   0.5     log10(1 + Mbit/s) centred at 2 (≈100 Mbit/s)
band_5ghz           —       —       1 if frequency ≥ 4900 MHz (5/6 GHz bands)
rsrp_dbm            -95     15      3GPP "fair" RSRP
rsrq_db             -11     4
sinr_db             10      8
cqi                 8       4       CQI 0..15
cell_rssi_dbm       -75     15
rtt_ms              log10   0.5     log10(1 + ms) centred at 1.7 (≈50 ms)
loss                0.02    0.05
==================  ======  ======  ===========================================

When a device has several interfaces of one access type, the slot describes
the one :func:`representative` picks (the strongest signal).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from edgepath.types import AccessType, InterfaceContext

SLOTS: tuple[AccessType, ...] = (AccessType.WIFI, AccessType.LTE, AccessType.NR, AccessType.ETHERNET)


def _lin(centre: float, scale: float) -> Callable[[float], float]:
    return lambda x: (x - centre) / scale


def _log(centre: float, scale: float) -> Callable[[float], float]:
    return lambda x: (math.log10(1.0 + max(x, 0.0)) - centre) / scale


# (attribute, transform) per measurement; frequency becomes a 5 GHz flag.
_WIFI = (
    ("wifi_rssi_dbm", _lin(-65.0, 10.0)),
    ("link_speed_mbps", _log(2.0, 0.5)),
    ("frequency_mhz", lambda f: 1.0 if f >= 4900.0 else 0.0),
    ("rtt_ms", _log(1.7, 0.5)),
    ("loss", _lin(0.02, 0.05)),
)
_CELL = (
    ("rsrp_dbm", _lin(-95.0, 15.0)),
    ("rsrq_db", _lin(-11.0, 4.0)),
    ("sinr_db", _lin(10.0, 8.0)),
    ("cqi", _lin(8.0, 4.0)),
    ("cell_rssi_dbm", _lin(-75.0, 15.0)),
    ("rtt_ms", _log(1.7, 0.5)),
    ("loss", _lin(0.02, 0.05)),
)
_ETH = (
    ("link_speed_mbps", _log(2.0, 0.5)),
    ("rtt_ms", _log(1.7, 0.5)),
    ("loss", _lin(0.02, 0.05)),
)
_SLOT_FIELDS = {
    AccessType.WIFI: _WIFI,
    AccessType.LTE: _CELL,
    AccessType.NR: _CELL,
    AccessType.ETHERNET: _ETH,
}

FEATURE_NAMES: tuple[str, ...] = tuple(
    name
    for slot in SLOTS
    for name in (
        f"{slot.value.lower()}.present",
        *(n for attr, _ in _SLOT_FIELDS[slot] for n in (f"{slot.value.lower()}.{attr}", f"{slot.value.lower()}.{attr}.missing")),
    )
)
N_FEATURES = len(FEATURE_NAMES)
_CLIP = 5.0


def representative(interfaces: Sequence[InterfaceContext], access_type: AccessType) -> InterfaceContext | None:
    """The interface that stands for ``access_type``: strongest signal, then first listed.

    Signal strength is WiFi RSSI for WiFi, RSRP for cellular, link speed for
    Ethernet; an interface that reports none ranks last. Returns None when the
    device has no interface of that type.
    """
    candidates = [i for i in interfaces if i.access_type == access_type]
    if not candidates:
        return None

    def strength(i: InterfaceContext) -> float:
        value = i.wifi_rssi_dbm if access_type == AccessType.WIFI else i.link_speed_mbps
        if access_type in (AccessType.LTE, AccessType.NR):
            value = i.rsrp_dbm
        return -math.inf if value is None else value

    return max(candidates, key=strength)  # max() keeps the first of equals


def context_features(interfaces: Sequence[InterfaceContext]) -> np.ndarray:
    """Encode a device's interfaces into the fixed feature vector.

    Parameters
    ----------
    interfaces:
        The validated interfaces of one request (any subset of measurements).

    Returns
    -------
    numpy.ndarray
        Shape ``(N_FEATURES,)``, float64, finite, named by :data:`FEATURE_NAMES`.
    """
    out = np.zeros(N_FEATURES, dtype=np.float64)
    k = 0
    for slot in SLOTS:
        iface = representative(interfaces, slot)
        out[k] = 0.0 if iface is None else 1.0
        k += 1
        for attr, transform in _SLOT_FIELDS[slot]:
            raw = None if iface is None else getattr(iface, attr)
            if raw is None or not math.isfinite(raw):
                out[k + 1] = 1.0
            else:
                out[k] = min(max(transform(float(raw)), -_CLIP), _CLIP)
            k += 2
    return out
