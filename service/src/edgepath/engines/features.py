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
rsrp_dbm (LTE/NR)          lin(-95, 15)  signal        common "fair" RSRP (not a 3GPP class)
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
import operator
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from edgepath.types import AccessType, InterfaceContext

try:  # the compiled encoder (service/native, the edgepath-native package): the same vector, bit for bit, faster
    from edgepath_native import ModelFeatures as _ModelFeatures
    from edgepath_native import feature_layout as _native_layout
except ImportError:  # not installed (no Rust toolchain where it was set up): the Python encoder alone
    _ModelFeatures = None  # type: ignore[assignment,misc]
    _native_layout = None  # type: ignore[assignment]

SLOTS: tuple[AccessType, ...] = (AccessType.WIFI, AccessType.LTE, AccessType.NR, AccessType.ETHERNET)

Extractor = Callable[[InterfaceContext], "float | None"]


def _attr(name: str) -> Extractor:
    return lambda i: getattr(i, name, None)


class Transform(Protocol):
    """A fixed feature transform: called on one float; ``kind``/``centre``/``scale`` describe it to the batch
    encoder (``lin``: ``(x − centre)/scale``; ``log``: ``(log10(1 + max(x, 0)) − centre)/scale``; ``band``: 5/6 GHz
    flag, centre 0, scale 1)."""

    kind: str
    centre: float
    scale: float

    def __call__(self, x: float, /) -> float: ...


def _described(f: Callable[[float], float], kind: str, centre: float, scale: float) -> Transform:
    f.kind, f.centre, f.scale = kind, centre, scale  # type: ignore[attr-defined]
    return f  # type: ignore[return-value]


def _lin(centre: float, scale: float) -> Transform:
    return _described(lambda x: (x - centre) / scale, "lin", centre, scale)


def _log(centre: float, scale: float) -> Transform:
    return _described(lambda x: (math.log10(1.0 + max(x, 0.0)) - centre) / scale, "log", centre, scale)


def _band_5ghz() -> Transform:
    return _described(lambda f: 1.0 if f >= 4900.0 else 0.0, "band", 0.0, 1.0)


def _shannon_capacity_mbps(i: InterfaceContext) -> float | None:
    """Shannon bound ``C = B · log2(1 + 10^(SINR/10))``, Mbit/s, with B in MHz (Shannon 1948, eq. 21)."""
    b, sinr = getattr(i, "channel_bandwidth_mhz", None), i.sinr_db
    if b is None or sinr is None:
        return None
    return b * math.log2(1.0 + 10.0 ** (sinr / 10.0))


def _carrier_ghz(i: InterfaceContext) -> float | None:
    return None if i.frequency_mhz is None else i.frequency_mhz / 1000.0


# (feature name, extractor, transform (scalar call and ``.array``), group)
Spec = tuple[str, Extractor, Transform, str]

_PATH: tuple[Spec, ...] = (
    ("rtt_ms", _attr("rtt_ms"), _log(1.7, 0.5), "path"),
    ("loss", _attr("loss"), _lin(0.02, 0.05), "path"),
)
_WIFI: tuple[Spec, ...] = (
    ("wifi_rssi_dbm", _attr("wifi_rssi_dbm"), _lin(-65.0, 10.0), "signal"),
    ("wifi_rssi_spread_db", _attr("wifi_rssi_spread_db"), _lin(1.0, 2.0), "spread"),
    ("link_speed_mbps", _attr("link_speed_mbps"), _log(2.0, 0.5), "link_speed"),
    ("max_link_speed_mbps", _attr("max_link_speed_mbps"), _log(2.2, 0.3), "link_speed"),
    ("band_5ghz", _attr("frequency_mhz"), _band_5ghz(), "band"),
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

#: The compiled encoder's column names and the measurements it reads of an interface, in its order.
_NATIVE_LAYOUT = _native_layout() if _native_layout is not None else None
#: Whether the compiled encoder (``edgepath_native``, built from service/native) is installed and lays the vector
#: out as :data:`FEATURE_NAMES` does. Where it is, :func:`context_features` hands it every context (``native=False``:
#: never); this module is its reference (``tests/service/engines/test_features_native.py``).
NATIVE_AVAILABLE = _NATIVE_LAYOUT is not None and tuple(_NATIVE_LAYOUT[0]) == FEATURE_NAMES
#: Position of each access type in :data:`SLOTS`.
SLOT_INDEX: dict[AccessType, int] = {slot: i for i, slot in enumerate(SLOTS)}
#: The compiled encoder over interface objects (None: it is not installed or lays out otherwise). It reads each
#: interface's access type (by identity with :data:`SLOTS`' members) and measurements itself (issue 16: building
#: their tuples in Python cost ~2 µs of a context's ~5).
_ENCODER = _ModelFeatures(SLOTS) if NATIVE_AVAILABLE and _ModelFeatures is not None else None


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


def context_features(interfaces: Sequence[InterfaceContext], native: bool = True) -> np.ndarray:
    """Encode a device's interfaces into the fixed feature vector.

    Parameters
    ----------
    interfaces:
        The validated interfaces of one request (any subset of measurements).
    native:
        Let the compiled encoder compute it where it is installed (:data:`NATIVE_AVAILABLE`): the same vector, bit
        for bit. False: this module's code.

    Returns
    -------
    numpy.ndarray
        Shape ``(N_FEATURES,)``, float64, finite, named by :data:`FEATURE_NAMES`.
    """
    if native and NATIVE_AVAILABLE:
        encoded = native_features(interfaces)
        if encoded is not None:
            return encoded[0]
    # Written into a list and converted once: a numpy element assignment costs ~5× a list's (issue 16). The
    # representatives come from one pass (:func:`_representatives`, the batch encoder's: the same pick).
    out = [0.0] * N_FEATURES
    reps = _representatives(interfaces)
    k = 0
    for slot in SLOTS:
        iface = reps.get(slot)
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
    return np.array(out, dtype=np.float64)


def native_features(
    interfaces: Sequence[InterfaceContext],
) -> tuple[np.ndarray, list[InterfaceContext | None], tuple[AccessType, ...]] | None:
    """:func:`context_features` by the compiled encoder, with the representative interface of each slot of :data:`SLOTS`
    (:func:`representative`; None: the device has none) and the arm set, the access types of :data:`SLOTS` the
    device offers in order (``edgepath.engines.primary_path.arm_set``). None where it is not available
    (:data:`NATIVE_AVAILABLE`) or hands the context back (a ``10 ** (SINR / 10)`` overflow, which validation rules
    out; an access type outside :data:`SLOTS`, an interface without a measurement's attribute or with a value that
    is not a number, which the model rules out), for this module to encode or raise on."""
    if _ENCODER is None:
        return None
    encoded = _ENCODER.encode(interfaces)
    if encoded is None:
        return None
    buffer, reps, arms = encoded
    return np.frombuffer(buffer, dtype=np.float64), reps, arms


def native_features_batch(
    contexts: Sequence[Sequence[InterfaceContext]],
) -> tuple[np.ndarray, list[list[InterfaceContext | None]], list[tuple[AccessType, ...]]] | None:
    """:func:`native_features` of every context at once: the ``(n, N_FEATURES)`` matrix (row i the vector of
    context i, bit for bit), each context's representatives per slot and its arm set. None where the compiled
    encoder is not available or hands any context back (the caller encodes them all)."""
    if _ENCODER is None:
        return None
    encoded = _ENCODER.encode_batch(contexts if isinstance(contexts, list) else list(contexts))
    if encoded is None:
        return None
    buffer, reps, arms = encoded
    return np.frombuffer(buffer, dtype=np.float64).reshape(len(contexts), N_FEATURES), reps, arms


def _representatives(interfaces: Sequence[InterfaceContext]) -> dict[AccessType, InterfaceContext]:
    """:func:`representative` of every access type the device offers, in one pass (first of equals kept)."""
    best: dict[AccessType, tuple[float, InterfaceContext]] = {}
    for i in interfaces:
        t = i.access_type
        value = i.wifi_rssi_dbm if t == AccessType.WIFI else i.rsrp_dbm if t in _CELLULAR else i.link_speed_mbps
        strength = -math.inf if value is None else value
        held = best.get(t)
        if held is None or strength > held[0]:
            best[t] = (strength, i)
    return {t: i for t, (_, i) in best.items()}


_CELLULAR = (AccessType.LTE, AccessType.NR)
_RAW_SPECS: tuple[Spec, ...] = tuple(spec for slot in SLOTS for spec in _SLOT_FEATURES[slot])
_PRESENT_COLUMNS = np.asarray(FEATURE_GROUPS["presence"])
_VALUE_COLUMNS = np.asarray(
    [FEATURE_NAMES.index(n[: -len(".missing")]) for n in FEATURE_NAMES if n.endswith(".missing")]
)


def _carrier_ghz_array(raw: dict[str, np.ndarray]) -> np.ndarray:
    return raw["frequency_mhz"] / 1000.0


def _shannon_capacity_mbps_array(raw: dict[str, np.ndarray]) -> np.ndarray:
    """:func:`_shannon_capacity_mbps` on arrays (nan where B or SINR is missing)."""
    return raw["channel_bandwidth_mhz"] * np.log2(1.0 + 10.0 ** (raw["sinr_db"] / 10.0))


#: The batch encoder's view of each derived extractor: the raw attributes it reads, its array form.
_DERIVED: dict[object, tuple[tuple[str, ...], Callable[[dict[str, np.ndarray]], np.ndarray]]] = {
    _carrier_ghz: (("frequency_mhz",), _carrier_ghz_array),
    _shannon_capacity_mbps: (("channel_bandwidth_mhz", "sinr_db"), _shannon_capacity_mbps_array),
}


def _raw_column(attr: str) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    def column(raw: dict[str, np.ndarray]) -> np.ndarray:
        return raw[attr]

    return column


def _slot_plan(slot: AccessType) -> tuple[tuple[str, ...], tuple[Callable[[dict[str, np.ndarray]], np.ndarray], ...]]:
    """The attributes the batch encoder reads of a slot's interface, and per feature its raw column's array form."""
    names: list[str] = []
    columns: list[Callable[[dict[str, np.ndarray]], np.ndarray]] = []
    for fname, extract, _, _ in _SLOT_FEATURES[slot]:
        if extract in _DERIVED:
            needs, column = _DERIVED[extract]
        else:
            attr = "frequency_mhz" if fname == "band_5ghz" else fname
            needs, column = (attr,), _raw_column(attr)
        names.extend(n for n in needs if n not in names)
        columns.append(column)
    return tuple(names), tuple(columns)


_SLOT_PLANS = {slot: _slot_plan(slot) for slot in SLOTS}
_SLOT_GETTERS = {slot: operator.attrgetter(*names) for slot, (names, _) in _SLOT_PLANS.items()}
#: The transforms of every raw column as arrays: log columns, band-flag columns, then (x − centre)/scale.
_LOG = np.asarray([spec[2].kind == "log" for spec in _RAW_SPECS])
_BAND = np.asarray([spec[2].kind == "band" for spec in _RAW_SPECS])
_CENTRE = np.asarray([spec[2].centre for spec in _RAW_SPECS])
_SCALE = np.asarray([spec[2].scale for spec in _RAW_SPECS])


def context_features_batch(
    contexts: Sequence[Sequence[InterfaceContext]],
) -> tuple[np.ndarray, list[dict[AccessType, InterfaceContext]]]:
    """:func:`context_features` of many contexts at once: raw attributes gathered per slot, transforms per column.

    Parameters
    ----------
    contexts:
        ``n`` contexts, each the validated interfaces of one request.

    Returns
    -------
    (numpy.ndarray, list)
        Features of shape ``(n, N_FEATURES)``, float64 (row ``i`` equals ``context_features(contexts[i])``
        up to the last bits of numpy's ``log10``/``log2``), and each context's representative interface per
        offered access type (:func:`representative`).
    """
    reps = [_representatives(c) for c in contexts]
    n = len(contexts)
    out = np.zeros((n, N_FEATURES), dtype=np.float64)
    if n == 0:
        return out, reps
    blocks: list[np.ndarray] = []
    for slot in SLOTS:
        names, columns = _SLOT_PLANS[slot]
        rows = [i for i, r in enumerate(reps) if slot in r]
        raw_block = np.full((n, len(names)), np.nan)
        if rows:
            getter = _SLOT_GETTERS[slot]
            raw_block[rows] = np.asarray([getter(reps[i][slot]) for i in rows], dtype=np.float64)  # None → nan
        raw = {a: raw_block[:, j] for j, a in enumerate(names)}
        with np.errstate(invalid="ignore", over="ignore"):
            blocks.extend(column(raw) for column in columns)
    raw_values = np.column_stack(blocks)  # (n, features per slot summed): the raw value of each feature
    out[:, _PRESENT_COLUMNS] = np.asarray([[slot in r for slot in SLOTS] for r in reps], dtype=np.float64)
    missing = ~np.isfinite(raw_values)
    values = raw_values.copy()
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        values[:, _LOG] = np.log10(1.0 + np.maximum(values[:, _LOG], 0.0))
        values[:, _BAND] = np.where(values[:, _BAND] >= 4900.0, 1.0, 0.0)
        values = (values - _CENTRE) / _SCALE
    out[:, _VALUE_COLUMNS] = np.where(missing | ~np.isfinite(values), 0.0, np.clip(values, -_CLIP, _CLIP))
    out[:, _VALUE_COLUMNS + 1] = missing
    return out, reps


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
