"""Context → feature vector for the primary-path bandit (pure, shared by training and serving).

One function, :func:`context_features`, turns the validated interfaces of a
request into a fixed-length float vector. The online bandit (serving and
online refits), the offline trainer (``edgepath train-offline``) and the
evaluation (``edgepath eval primary``) all call it on
:class:`~edgepath.types.InterfaceContext` objects, so there is no train/serve
skew: a context seen at the edge and the same context rebuilt from a CSV row
give the same vector.

The context follows the bandit paper (Alzadjali et al., Table I: WiFi RSSI and
link speed, cell signal strength, RSRQ, CQI, RSSNR, RTT, loss), extended with
what the real data (mobilebandwidth, SIGCOMM 2022) carries: the spread of the
per-test reading series, the device's maximum link speed, the carrier
frequency (band) and the channel bandwidth.

Layout
------
One block per access-type slot, in the order of :data:`SLOTS` (WIFI, LTE, NR,
ETHERNET). A block starts with a *present* flag (1 when the device offers that
access type) followed, for each feature of the slot, by a pair
``(scaled value, missing indicator)``:

* missing (not reported, not finite, or the slot absent) → value 0.0 (the
  centre below) and indicator 1.0;
* present → transformed value clipped to [-5, 5], indicator 0.0.

Transforms are fixed physical constants (not fitted), so the encoding needs no
stored scaler. ``lin(c, s)`` is ``(x − c)/s``; ``log(c, s)`` is
``(log10(1 + x) − c)/s``.

=========================  ============  ============  ==============================================
feature (slot)             transform     group         note
=========================  ============  ============  ==============================================
wifi_rssi_dbm (WiFi)       lin(-65, 10)  signal        −65 dBm ≈ good WiFi; ±10 dB a unit
wifi_rssi_spread_db        lin(1, 2)     spread        std. dev. of the test's RSSI series
link_speed_mbps            log(2, 0.5)   link_speed    PHY rate; 100 Mbit/s at the centre
max_link_speed_mbps        log(2.2, 0.3) link_speed    device capability (1×1 vs 2×2 MIMO)
band_5ghz (frequency_mhz)  1[f ≥ 4900]   band          5/6 GHz band flag
rsrp_dbm (LTE/NR)          lin(-95, 15)  signal        3GPP "fair" RSRP at the centre
rsrq_db                    lin(-11, 4)   signal
sinr_db                    lin(10, 8)    signal
cqi                        lin(8, 4)     signal        CQI 0..15
cell_rssi_dbm              lin(-75, 15)  signal
rsrp_spread_db             lin(1, 2)     spread        std. dev. of the test's RSRP series
carrier_ghz (frequency)    lin(1.8, 0.6) band          downlink carrier, GHz (low band < 1 GHz)
channel_bandwidth_mhz      lin(15, 5)    band          5–20 MHz LTE carriers
shannon_capacity_mbps      log(1.8, 0.5) capacity      B·log2(1 + SINR) (Shannon), B in MHz
link_speed_mbps (Eth.)     log(2, 0.5)   link_speed
rtt_ms (every slot)        log(1.7, 0.5) path          ≈ 50 ms at the centre
loss (every slot)          lin(0.02, .05) path         fraction
=========================  ============  ============  ==============================================

:data:`FEATURE_GROUPS` maps each group (and ``presence``, ``missing`` for the
indicators) to its column indices; the offline trainer's ablation removes one
group at a time and reports the change of the offline score (model card).

When a device has several interfaces of one access type, the slot describes
the one :func:`representative` picks (the strongest signal).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from edgepath.types import AccessType, InterfaceContext

SLOTS: tuple[AccessType, ...] = (AccessType.WIFI, AccessType.LTE, AccessType.NR, AccessType.ETHERNET)

Extractor = Callable[[InterfaceContext], "float | None"]


def _attr(name: str) -> Extractor:
    return lambda i: getattr(i, name, None)


def _lin(centre: float, scale: float) -> Callable[[float], float]:
    return lambda x: (x - centre) / scale


def _log(centre: float, scale: float) -> Callable[[float], float]:
    return lambda x: (math.log10(1.0 + max(x, 0.0)) - centre) / scale


def _shannon_capacity_mbps(i: InterfaceContext) -> float | None:
    """Shannon bound ``C = B · log2(1 + 10^(SINR/10))``, Mbit/s, with B in MHz (Shannon 1948, eq. 21)."""
    b, sinr = getattr(i, "channel_bandwidth_mhz", None), i.sinr_db
    if b is None or sinr is None:
        return None
    return b * math.log2(1.0 + 10.0 ** (sinr / 10.0))


def _carrier_ghz(i: InterfaceContext) -> float | None:
    return None if i.frequency_mhz is None else i.frequency_mhz / 1000.0


# (feature name, extractor, transform, group)
Spec = tuple[str, Extractor, Callable[[float], float], str]

_PATH: tuple[Spec, ...] = (
    ("rtt_ms", _attr("rtt_ms"), _log(1.7, 0.5), "path"),
    ("loss", _attr("loss"), _lin(0.02, 0.05), "path"),
)
_WIFI: tuple[Spec, ...] = (
    ("wifi_rssi_dbm", _attr("wifi_rssi_dbm"), _lin(-65.0, 10.0), "signal"),
    ("wifi_rssi_spread_db", _attr("wifi_rssi_spread_db"), _lin(1.0, 2.0), "spread"),
    ("link_speed_mbps", _attr("link_speed_mbps"), _log(2.0, 0.5), "link_speed"),
    ("max_link_speed_mbps", _attr("max_link_speed_mbps"), _log(2.2, 0.3), "link_speed"),
    ("band_5ghz", _attr("frequency_mhz"), lambda f: 1.0 if f >= 4900.0 else 0.0, "band"),
    *_PATH,
)
_CELL: tuple[Spec, ...] = (
    ("rsrp_dbm", _attr("rsrp_dbm"), _lin(-95.0, 15.0), "signal"),
    ("rsrq_db", _attr("rsrq_db"), _lin(-11.0, 4.0), "signal"),
    ("sinr_db", _attr("sinr_db"), _lin(10.0, 8.0), "signal"),
    ("cqi", _attr("cqi"), _lin(8.0, 4.0), "signal"),
    ("cell_rssi_dbm", _attr("cell_rssi_dbm"), _lin(-75.0, 15.0), "signal"),
    ("rsrp_spread_db", _attr("rsrp_spread_db"), _lin(1.0, 2.0), "spread"),
    ("carrier_ghz", _carrier_ghz, _lin(1.8, 0.6), "band"),
    ("channel_bandwidth_mhz", _attr("channel_bandwidth_mhz"), _lin(15.0, 5.0), "band"),
    ("shannon_capacity_mbps", _shannon_capacity_mbps, _log(1.8, 0.5), "capacity"),
    *_PATH,
)
_ETH: tuple[Spec, ...] = (
    ("link_speed_mbps", _attr("link_speed_mbps"), _log(2.0, 0.5), "link_speed"),
    *_PATH,
)
_SLOT_FEATURES: dict[AccessType, tuple[Spec, ...]] = {
    AccessType.WIFI: _WIFI,
    AccessType.LTE: _CELL,
    AccessType.NR: _CELL,
    AccessType.ETHERNET: _ETH,
}


def _layout() -> tuple[tuple[str, ...], dict[str, tuple[int, ...]]]:
    names: list[str] = []
    groups: dict[str, list[int]] = {}
    for slot in SLOTS:
        prefix = slot.value.lower()
        groups.setdefault("presence", []).append(len(names))
        names.append(f"{prefix}.present")
        for fname, _, _, group in _SLOT_FEATURES[slot]:
            groups.setdefault(group, []).append(len(names))
            names.append(f"{prefix}.{fname}")
            groups.setdefault("missing", []).append(len(names))
            names.append(f"{prefix}.{fname}.missing")
    return tuple(names), {g: tuple(ix) for g, ix in groups.items()}


FEATURE_NAMES, FEATURE_GROUPS = _layout()
"""Column names of :func:`context_features`, and group name → column indices."""
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
        for _, extract, transform, _ in _SLOT_FEATURES[slot]:
            raw = None if iface is None else extract(iface)
            if raw is None or not math.isfinite(raw):
                out[k + 1] = 1.0
            else:
                value = transform(float(raw))
                out[k] = min(max(value, -_CLIP), _CLIP) if math.isfinite(value) else 0.0
            k += 2
    return out


def feature_mask(drop_groups: Sequence[str] = ()) -> np.ndarray:
    """Boolean mask over :data:`FEATURE_NAMES`, False for the columns of ``drop_groups``.

    Raises
    ------
    KeyError
        For an unknown group name.
    """
    mask = np.ones(N_FEATURES, dtype=bool)
    for group in drop_groups:
        mask[list(FEATURE_GROUPS[group])] = False
    return mask
