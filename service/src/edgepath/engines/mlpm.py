"""MLPM scheduler weights (pure engine: no I/O, no async, no globals).

Seed paper: F. Silva, M. A. Togou, G.-M. Muntean, "An innovative machine
learning approach to improve MPTCP performance", HPCS 2020 (MLPM, "Machine
Learning Performance Monitor"). MLPM keeps a short per-subflow history of each
feature (the paper uses the last 10–20 samples), takes the feature's trend as
the least-squares slope over that window (their Eq. 1), and scores every
subflow with a linear classifier — a weighted sum plus a bias (Eq. 2) passed
through a sigmoid (Eq. 4, the smooth form of the step in Eq. 3). The subflow
with the highest score carries the prioritised packets.

What this module computes, per subflow ``i`` and feature ``k`` (RTT, throughput)
------------------------------------------------------------------------------
1. Window: the last ``window`` finite samples by timestamp (default 20).
2. Trend (Eq. 1)::

       S = (n·Σxy − Σx·Σy) / (n·Σx² − (Σx)²)

   with ``x`` the timestamp in seconds and ``y`` the value. The timestamps are
   shifted by their mean before summing: the slope is invariant under that
   shift and it avoids the catastrophic cancellation ``n·Σx² − (Σx)²`` suffers
   with epoch timestamps (~1e12 ms). Units: ms/s for RTT, (bit/s)/s for
   throughput. With fewer than :data:`MIN_SAMPLES_FOR_TREND` (3) samples, or
   when all timestamps are equal (denominator 0), the slope is defined as 0.
3. Forecast: ``value + S × horizon_s`` where ``value`` is the newest sample;
   RTT forecasts are floored at :data:`RTT_FLOOR_MS`, throughput forecasts at 0.
4. Normalisation, so that one weight means the same across units and scales.
   Every feature becomes a *goodness* in [0, 1] (1 = best subflow), relative
   to the other subflows of the same request:

   * RTT: ``min_rtt / rtt`` where ``min_rtt`` is the smallest RTT (current or
     forecast) among all subflows (both floored at :data:`RTT_FLOOR_MS`):
     a subflow with twice the best RTT scores 0.5.
   * throughput: ``throughput / max_throughput`` with ``max_throughput`` the
     largest throughput (current or forecast) among all subflows; when every
     subflow reports 0 they all score 1 (nothing distinguishes them).

   The feature vector is ``f = [rtt_now, rtt_forecast, tput_now, tput_forecast]``.
5. Classifier (Eq. 2 and Eq. 4): ``score_i = σ(w·f_i + b)``, ``σ(v) = 1/(1+e^(−v))``.
   ``w = gain × (p_rtt/2, p_rtt/2, p_tput/2, p_tput/2)`` where ``(p_rtt, p_tput)``
   is the application's priority (:data:`PRIORITY_WEIGHTS`, sums to 1) split
   equally between the current value and its forecast, and ``gain`` spreads
   the sigmoid (with features in [0, 1] and ``gain = 1`` every score would lie
   in [σ(b), σ(1+b)], which makes weights nearly uniform). The default bias
   ``b = −gain/2`` centres the sigmoid on a subflow that is half as good as the
   best one. Note Eq. 3 in the paper prints the step reversed (1 for v ≤ 0);
   we use the sigmoid of Eq. 4, which fires for large ``v``.
6. Weights: ``weight_i = score_i / Σ_j score_j`` (sum to 1). The prioritised
   subflow is the argmax of the score (ties: lower current RTT, then name).

A feature is used only when *every* subflow has at least one value for it
(history sample or, for RTT, the interface's current ``rtt_ms``); otherwise it
is left out for all (comparing a known RTT with an unknown one is
meaningless) and its priority share goes to the remaining feature. With no
usable feature the weights are uniform; the ``reason`` says why.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import islice, repeat
from operator import itemgetter
from typing import Any, NamedTuple, cast

import numpy as np

from edgepath.types import ApplicationProfile, InterfaceContext
from edgepath.types import SubflowHistory as SubflowHistoryModel

try:  # the compiled engine (service/native, the edgepath-native package): the same results, bit for bit, faster
    from edgepath_native import mlpm_decide as _native_decide
except ImportError:  # not installed (no Rust toolchain where it was set up): the Python engine decides alone
    _native_decide = None  # type: ignore[assignment]
try:  # the compiled decision from a request's models, its section built (Session 52)
    from edgepath_native import MlpmSection as _NativeSection
except ImportError:  # not installed, or a build from before it: the plain values' path below decides
    _NativeSection = None  # type: ignore[assignment,misc]

#: The compiled section builder's class (``edgepath_native.MlpmSection``: its ``WEIGHT_FIELDS`` and
#: ``SECTION_FIELDS``, the models' fields it fills), or None where it is not installed.
SECTION_BUILDER: Any = _NativeSection

#: Whether the compiled MLPM engine (``edgepath_native``, built from service/native) is installed. Where it is,
#: :func:`decide` and :func:`decide_batch` hand it every decision whose features all come as :class:`Columns` of
#: floats, as the service's adapter builds them (``native=False``: never); this module is its reference
#: (``tests/service/engines/test_mlpm_native.py``).
NATIVE_AVAILABLE = _native_decide is not None

#: Below this many samples the slope is not estimated (defined as 0).
MIN_SAMPLES_FOR_TREND = 3
#: RTT values (and forecasts) are floored here, ms, so that min/rtt is defined.
RTT_FLOOR_MS = 0.1
#: Default window (samples) and horizon (s): the paper uses 10–20 samples.
DEFAULT_WINDOW = 20
DEFAULT_HORIZON_S = 1.0
DEFAULT_GAIN = 8.0


class Priority(StrEnum):
    """What the application optimises (selects the classifier weights ``w``)."""

    LATENCY = "latency"
    BALANCED = "balanced"
    THROUGHPUT = "throughput"


#: (p_rtt, p_throughput) per priority; each row sums to 1.
PRIORITY_WEIGHTS: dict[Priority, tuple[float, float]] = {
    Priority.LATENCY: (0.8, 0.2),
    Priority.BALANCED: (0.5, 0.5),
    Priority.THROUGHPUT: (0.2, 0.8),
}

#: Application profile → MLPM priority: interactive and loss-sensitive traffic wants latency,
#: bulk transfers want throughput, streaming (and unspecified) balances both.
PROFILE_PRIORITY: dict[ApplicationProfile, Priority] = {
    ApplicationProfile.UNSPECIFIED: Priority.BALANCED,
    ApplicationProfile.STREAMING: Priority.BALANCED,
    ApplicationProfile.BULK: Priority.THROUGHPUT,
    ApplicationProfile.LOSS_SENSITIVE: Priority.LATENCY,
    ApplicationProfile.INTERACTIVE: Priority.LATENCY,
}


@dataclass(frozen=True)
class FittedClassifier:
    """Classifier weights ``w`` and bias ``b`` of Eq. 2 fitted on traces (``scripts/fit_mlpm.py``).

    ``weights`` per feature set: ``"rtt+tput"`` → 4 weights over
    ``[rtt_now, rtt_forecast, tput_now, tput_forecast]``, ``"tput"`` → 2, ``"rtt"`` → 2;
    ``bias`` per feature set likewise. Features are the normalised goodness values of the
    module docstring (step 4), so ``σ(w·f + b)`` estimates the probability that the subflow
    is the best one at the next step.
    """

    weights: dict[str, tuple[float, ...]]
    bias: dict[str, float]
    source: str = ""


#: Classifiers fitted by ``scripts/fit_mlpm.py`` (edgepath.evaluation.mlpm_fit: logistic regression on the
#: training traces only: 5Gophers driving-trace-1 and three UCC driving pairs of 2019-12..2020-01; held-back
#: results in README "MLPM and CC measured"). Feature order: [rtt_now, rtt_forecast, tput_now, tput_forecast].
FITTED_SOURCE = "scripts/fit_mlpm.py on 5Gophers driving-trace-1 + UCC driving pairs 2019-12..2020-01 (issue 20)"
FITTED: dict[Priority, FittedClassifier] = {
    Priority.LATENCY: FittedClassifier(
        weights={"rtt+tput": (17.2143, 17.1627, 0.3803, -0.1466), "tput": (3.1475, 1.8671)},
        bias={"rtt+tput": -33.0824, "tput": -3.8491},
        source=FITTED_SOURCE,
    ),
    Priority.BALANCED: FittedClassifier(
        weights={"rtt+tput": (1.8843, 1.8963, 1.5098, 1.5215), "tput": (3.2775, 1.6903)},
        bias={"rtt+tput": -5.5939, "tput": -3.8143},
        source=FITTED_SOURCE,
    ),
    Priority.THROUGHPUT: FittedClassifier(
        weights={"rtt+tput": (0.9237, 0.9367, 1.605, 1.5857), "tput": (3.2775, 1.6903)},
        bias={"rtt+tput": -3.9292, "tput": -3.8143},
        source=FITTED_SOURCE,
    ),
}


class Sample(NamedTuple):
    """One timed measurement: ``t_s`` seconds (any origin), ``value`` in the feature's unit.

    A named tuple, not a dataclass (~0.15 against ~0.5 µs to build); the functions here read any ``(t_s, value)``
    pair (:data:`TimedValue`), and the service's adapter passes plain tuples.
    """

    t_s: float
    value: float


#: What the engine reads: ``(t_s, value)`` pairs, a :class:`Sample` or a plain tuple (the service's adapter builds
#: plain tuples: a named tuple's ``__new__`` is a Python call, ~0.2 µs per sample).
TimedValue = tuple[float, float]

_BY_TIME = itemgetter(0)  # Sample.t_s, as a C-level sort key


class Columns(NamedTuple):
    """One feature's samples as two columns of equal length, as a device sends them (no object per sample).

    ``t``: the time of each sample, in units of ``1 / t_units_per_s`` seconds (``t_units_per_s`` = 1000.0 for the
    ms timestamps of the API, 1.0 for seconds), any origin; ``values``: the samples, in the feature's unit. The
    engine reads columns without building a pair per sample when they are finite and in time order (what an agent
    sends); anything else takes the pairs' path (:func:`window_of`), with the same result up to rounding (the
    slope is taken in the columns' time unit and scaled after, which rounds less than epoch ms turned into seconds).
    """

    t: Sequence[float]
    values: Sequence[float]
    t_units_per_s: float = 1.0


#: A feature's samples: ``(t_s, value)`` pairs, or :class:`Columns`.
Samples = Sequence[TimedValue] | Columns


@dataclass(frozen=True)
class SubflowHistory:
    """What is known about one subflow (one interface).

    Attributes
    ----------
    interface:
        Interface name, e.g. ``wlan0``.
    rtt_ms:
        Timed RTT samples, ms (any order; non-finite values are ignored): ``(t_s, ms)`` pairs or :class:`Columns`.
    throughput_bps:
        Timed throughput samples, bit/s, likewise.
    current_rtt_ms:
        The interface's current RTT when no RTT history exists (e.g. the
        ``rtt_ms`` of the radio context), ms.
    """

    interface: str
    rtt_ms: Samples = ()
    throughput_bps: Samples = ()
    current_rtt_ms: float | None = None


class FeatureForecast(NamedTuple):
    """Current value, trend and forecast of one feature of one subflow (value units; ``slope_per_s`` per second).

    Immutable; a named tuple rather than a frozen dataclass: four per Recommend, built in ~0.8 against ~2 µs.
    """

    current: float
    slope_per_s: float
    forecast: float
    samples: int


class SubflowScore(NamedTuple):
    """Classifier output for one subflow (immutable, a named tuple like :class:`FeatureForecast`).

    ``rtt_ms`` / ``throughput_bps`` are None when that feature is unknown.
    """

    interface: str
    weight: float
    score: float
    rtt_ms: FeatureForecast | None
    throughput_bps: FeatureForecast | None


@dataclass(frozen=True)
class SchedulerWeights:
    """MLPM decision: weights per subflow (sum 1), the prioritised subflow, and why."""

    subflows: tuple[SubflowScore, ...]
    prioritised_subflow: str
    features_used: tuple[str, ...]
    priority: Priority
    horizon_s: float
    bias: float
    reason: str
    classifier_weights: tuple[float, ...] = field(default=())


def _finite(samples: Sequence[TimedValue]) -> list[TimedValue]:
    isfinite = math.isfinite
    return [s for s in samples if isfinite(s[0]) and isfinite(s[1])]


def window_of(samples: Sequence[TimedValue], window: int) -> list[TimedValue]:
    """The last ``window`` finite samples ordered by timestamp (stable for equal timestamps)."""
    ordered = sorted(_finite(samples), key=_BY_TIME)
    return ordered[-window:] if window > 0 else []


def slope(t_s: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` over ``t_s`` (MLPM Eq. 1, Silva et al. 2020).

    Parameters
    ----------
    t_s:
        Timestamps, shape (n,), seconds (any origin: the result does not depend on it).
    values:
        Feature values, shape (n,).

    Returns
    -------
    float
        ``S = (nΣxy − ΣxΣy) / (nΣx² − (Σx)²)`` in value-units per second; 0.0
        when ``n < 3`` (:data:`MIN_SAMPLES_FOR_TREND`), when the lengths differ,
        when any input is non-finite, or when all timestamps are equal.
    """
    n = len(t_s)
    if n < MIN_SAMPLES_FOR_TREND or n != len(values):
        return 0.0
    if not all(map(math.isfinite, t_s)) or not all(map(math.isfinite, values)):
        return 0.0
    if max(t_s) == min(t_s):
        return 0.0  # all timestamps equal: Eq. 1's denominator is 0
    return _slope(t_s, values, n)


def _slope(t_s: Sequence[float], values: Sequence[float], n: int) -> float:
    """:func:`slope` of ``n`` ≥ 3 finite samples whose timestamps are not all equal (the checks made)."""
    # Shift the times by their mean: the same slope, without the cancellation n·Σx² − (Σx)² suffers with epoch
    # timestamps. Any shift near the mean serves, so plain sums do: math.fsum's exact rounding cost ~2 µs per slope
    # and, over 1,000 agent contexts, moved slopes by at most 1.3e-11 and weights by 1e-15 relative (issue 16).
    # map: the per-element work stays in C.
    mean_t = sum(t_s) / n
    xs = list(map(operator.sub, t_s, repeat(mean_t)))
    sum_x = sum(xs)
    sum_y = sum(values)
    sum_xy = sum(map(operator.mul, xs, values))
    sum_x2 = sum(map(operator.mul, xs, xs))
    denominator = n * sum_x2 - sum_x * sum_x
    if not denominator > 0.0:
        return 0.0
    result = (n * sum_xy - sum_x * sum_y) / denominator
    return result if math.isfinite(result) else 0.0


def forecast_feature(samples: Samples, window: int, horizon_s: float) -> FeatureForecast | None:
    """Current value, Eq. 1 slope and linear forecast ``value + slope × horizon_s``; None without samples.

    ``samples``: ``(t_s, value)`` pairs or :class:`Columns` (the same result for the same samples, up to
    rounding). ``window`` ≥ 1.

    Raises
    ------
    ValueError
        When the two :class:`Columns` differ in length or ``t_units_per_s`` is not finite and > 0.
    """
    if isinstance(samples, Columns):
        return _forecast_columns(samples, window, horizon_s)
    win = window_of(samples, window)
    if not win:
        return None
    t_s, values = zip(*win, strict=True)  # the window's two columns
    current = values[-1]
    s = slope(t_s, values)
    return FeatureForecast(current=current, slope_per_s=s, forecast=current + s * horizon_s, samples=len(win))


def _forecast_columns(columns: Columns, window: int, horizon_s: float) -> FeatureForecast | None:
    """:func:`forecast_feature` of columns: finite columns in time order are windowed by slicing and their slope
    taken in the columns' time unit (scaled to seconds after); others become pairs (:func:`window_of`)."""
    t, values, per_s = columns
    n = _checked_length(columns)
    if n == 0 or window < 1:
        return None
    # A finite sum means finite terms (an inf or a nan would carry through); a finite column summing past the float
    # range merely takes the general path.
    if not (math.isfinite(sum(t)) and math.isfinite(sum(values)) and all(map(operator.le, t, islice(t, 1, None)))):
        seconds = t if per_s == 1.0 else list(map(operator.truediv, t, repeat(per_s)))
        return forecast_feature(list(zip(seconds, values, strict=True)), window, horizon_s)
    if n > window:
        t, values, n = t[n - window :], values[n - window :], window
    current = values[-1]
    s = _slope(t, values, n) * per_s if n >= MIN_SAMPLES_FOR_TREND and t[0] != t[-1] else 0.0
    if not math.isfinite(s):
        s = 0.0  # the scaling overflowed: as slope() does for a non-finite result
    return FeatureForecast(current=current, slope_per_s=s, forecast=current + s * horizon_s, samples=n)


def _checked_length(columns: Columns) -> int:
    """The number of samples in ``columns``; raises ValueError (as :func:`forecast_feature` documents) when its two
    halves differ in length or its ``t_units_per_s`` is not finite and > 0."""
    t, values, per_s = columns
    n = len(t)
    if n != len(values):
        raise ValueError(f"Columns: {n} times but {len(values)} values")
    if not (math.isfinite(per_s) and per_s > 0.0):
        raise ValueError(f"Columns: t_units_per_s must be finite and > 0, not {per_s!r}")
    return n


def _sums_in_order(a: np.ndarray) -> np.ndarray:
    """Column sums of ``a`` (shape (n, g), n ≥ 1), added row after row, as the built-in ``sum`` of CPython 3.11 adds
    a list of floats (``numpy.sum`` adds pairwise along the axis contiguous in memory, which rounds differently).
    ``tests/service/engines/test_mlpm.py`` holds the two paths to the same bits."""
    total = a[0].copy()
    for row in a[1:]:
        total += row
    return total


def forecast_columns_batch(columns: Sequence[Columns], window: int, horizon_s: float) -> list[FeatureForecast | None]:
    """:func:`forecast_feature` of many :class:`Columns` at once (a ``RecommendBatch``'s windows; issue 16).

    Columns of equal length are stacked into one array per length and Eq. 1 is taken for all of them in a few
    numpy operations, the same operations in the same order as the one-by-one path (sums in sample order): on
    CPython 3.11 the forecasts are the one-by-one ones bit for bit (from 3.12 the built-in ``sum`` compensates its
    rounding, so the two agree to a few units in the last place). Columns the one-by-one path would not take as
    they are (not finite, not in time order) take it here too.

    Parameters
    ----------
    columns:
        Shape (c,); each as in :func:`forecast_feature`.
    window, horizon_s:
        As in :func:`forecast_feature` (``window`` ≥ 1 samples, ``horizon_s`` in s).

    Returns
    -------
    list[FeatureForecast | None]
        One per column, in order (None for an empty column).

    Raises
    ------
    ValueError
        When a column's two halves differ in length or its ``t_units_per_s`` is not finite and > 0.
    """
    out: list[FeatureForecast | None] = [None] * len(columns)
    by_length: dict[int, list[int]] = {}
    for i, c in enumerate(columns):
        n = _checked_length(c)
        if n and window >= 1:
            by_length.setdefault(n, []).append(i)
    for n, rows in by_length.items():
        # shape (n, g): one column per feature, samples down (the sums' order, see _sums_in_order)
        t_all = np.ascontiguousarray(np.array([columns[i].t for i in rows], dtype=np.float64).T)
        v_all = np.ascontiguousarray(np.array([columns[i].values for i in rows], dtype=np.float64).T)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            # the one-by-one path's test: finite sums (finite terms) and times in order
            plain = np.isfinite(_sums_in_order(t_all)) & np.isfinite(_sums_in_order(v_all))
            if n > 1:
                plain &= (t_all[1:] >= t_all[:-1]).all(axis=0)
            m = min(n, window)
            t_win, v_win = t_all[n - m :], v_all[n - m :]
            current = v_win[-1]
            slope_per_s = np.zeros(len(rows))
            if m >= MIN_SAMPLES_FOR_TREND:
                mean_t = _sums_in_order(t_win) / m
                xs = t_win - mean_t
                sum_x, sum_y = _sums_in_order(xs), _sums_in_order(v_win)
                denominator = m * _sums_in_order(xs * xs) - sum_x * sum_x
                result = (m * _sums_in_order(xs * v_win) - sum_x * sum_y) / denominator
                units_per_s = np.array([columns[i].t_units_per_s for i in rows])
                slope_per_s = result * units_per_s
                spread = t_win[0] != t_win[-1]  # all times equal: Eq. 1's denominator is 0
                keep = spread & (denominator > 0.0) & np.isfinite(result) & np.isfinite(slope_per_s)
                slope_per_s = np.where(keep, slope_per_s, 0.0)
            forecast = current + slope_per_s * horizon_s
        for i, ok, cur, sl, f in zip(
            rows, plain.tolist(), current.tolist(), slope_per_s.tolist(), forecast.tolist(), strict=True
        ):
            out[i] = (
                FeatureForecast(current=cur, slope_per_s=sl, forecast=f, samples=m)
                if ok
                else _forecast_columns(columns[i], window, horizon_s)
            )
    return out


def sigmoid(v: float) -> float:
    """Logistic function (MLPM Eq. 4), overflow-safe."""
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


def classify(features: Sequence[float], weights: Sequence[float], bias: float) -> float:
    """Linear classifier ``σ(w·f + b)`` (MLPM Eq. 2 weighted sum + bias, Eq. 4 sigmoid).

    Raises
    ------
    ValueError
        When ``features`` and ``weights`` differ in length.
    """
    if len(features) != len(weights):
        raise ValueError(f"{len(features)} features but {len(weights)} weights")
    return sigmoid(math.fsum(map(operator.mul, weights, features)) + bias)  # lengths checked above


def default_bias(gain: float = DEFAULT_GAIN) -> float:
    """Bias centring the sigmoid on a subflow half as good as the best: ``−gain/2``."""
    return -gain / 2.0


def forecasts(
    histories: Sequence[SubflowHistory], window: int, horizon_s: float
) -> tuple[list[FeatureForecast | None], list[FeatureForecast | None]]:
    """Per subflow, the RTT and throughput forecasts (step 1–3 of the module docstring); None where unknown.

    A subflow without RTT samples uses its ``current_rtt_ms`` (trend 0) when given.
    """
    rtt: list[FeatureForecast | None] = []
    tput: list[FeatureForecast | None] = []
    for h in histories:
        rtt.append(_rtt_or_current(forecast_feature(h.rtt_ms, window, horizon_s), h))
        tput.append(forecast_feature(h.throughput_bps, window, horizon_s))
    return rtt, tput


def _rtt_or_current(r: FeatureForecast | None, h: SubflowHistory) -> FeatureForecast | None:
    """``r``, or without RTT samples the subflow's ``current_rtt_ms`` with trend 0 (None when unknown too)."""
    if r is None and h.current_rtt_ms is not None and math.isfinite(h.current_rtt_ms):
        return FeatureForecast(current=h.current_rtt_ms, slope_per_s=0.0, forecast=h.current_rtt_ms, samples=0)
    return r


def forecasts_batch(
    histories: Sequence[Sequence[SubflowHistory]], window: int, horizon_s: float
) -> list[tuple[list[FeatureForecast | None], list[FeatureForecast | None]]]:
    """:func:`forecasts` of many decisions at once: every feature given as :class:`Columns`, across all of them,
    through :func:`forecast_columns_batch` (the same forecasts); samples given as pairs one by one.

    ``histories``: shape (d, k_i), one sequence of subflows per decision. Raises as :func:`forecast_feature`.
    """
    flat = [(h.rtt_ms, h.throughput_bps) for item in histories for h in item]
    columns = [x for pair in flat for x in pair if isinstance(x, Columns)]
    batched = iter(forecast_columns_batch(columns, window, horizon_s))
    computed = [
        tuple(next(batched) if isinstance(x, Columns) else forecast_feature(x, window, horizon_s) for x in pair)
        for pair in flat
    ]
    out = []
    k = 0
    for item in histories:
        rtt: list[FeatureForecast | None] = []
        tput: list[FeatureForecast | None] = []
        for h in item:
            r, t = computed[k]
            k += 1
            rtt.append(_rtt_or_current(r, h))
            tput.append(t)
        out.append((rtt, tput))
    return out


def normalised_features(
    rtt: Sequence[FeatureForecast | None], tput: Sequence[FeatureForecast | None]
) -> tuple[list[str], list[list[float]]]:
    """Feature names used and the goodness features per subflow, shape (k, 2 or 4) (step 4 of the docstring).

    A feature enters only when every subflow has it; RTT as ``min_rtt / rtt``, throughput as
    ``throughput / max_throughput`` (all 1 when every subflow reports 0).
    """
    n = len(rtt)
    use_rtt = n > 0 and all(r is not None for r in rtt)
    use_tput = n > 0 and all(t is not None for t in tput)
    features: list[list[float]] = [[] for _ in range(n)]
    used: list[str] = []
    if use_rtt:
        rtt_known = [r for r in rtt if r is not None]
        cur = [max(r.current, RTT_FLOOR_MS) for r in rtt_known]
        fc = [max(r.forecast, RTT_FLOOR_MS) for r in rtt_known]
        best = min(min(cur), min(fc))
        for i in range(n):
            features[i] += [best / cur[i], best / fc[i]]
        used += ["rtt_ms", "rtt_forecast_ms"]
    if use_tput:
        tput_known = [t for t in tput if t is not None]
        cur = [max(t.current, 0.0) for t in tput_known]
        fc = [max(t.forecast, 0.0) for t in tput_known]
        top = max(max(cur), max(fc))
        for i in range(n):
            features[i] += [cur[i] / top, fc[i] / top] if top > 0 else [1.0, 1.0]
        used += ["throughput_bps", "throughput_forecast_bps"]
    return used, features


def _uniform(
    interfaces: Sequence[str], priority: Priority, horizon_s: float, bias: float, reason: str
) -> SchedulerWeights:
    k = len(interfaces)
    subflows = tuple(
        SubflowScore(interface=name, weight=1.0 / k, score=0.5, rtt_ms=None, throughput_bps=None) for name in interfaces
    )
    return SchedulerWeights(
        subflows=subflows,
        prioritised_subflow=interfaces[0] if interfaces else "",
        features_used=(),
        priority=priority,
        horizon_s=horizon_s,
        bias=bias,
        reason=reason,
    )


def decide(
    histories: Sequence[SubflowHistory],
    *,
    priority: Priority = Priority.BALANCED,
    window: int = DEFAULT_WINDOW,
    horizon_s: float = DEFAULT_HORIZON_S,
    gain: float = DEFAULT_GAIN,
    bias: float | None = None,
    fitted: FittedClassifier | None = None,
    native: bool = True,
) -> SchedulerWeights:
    """Scheduler weights per subflow from their histories (MLPM, Silva et al. 2020, Eq. 1–4).

    Parameters
    ----------
    histories:
        One entry per subflow, shape (k,). Empty → an empty decision (no subflow).
    priority:
        Application priority selecting ``w`` (:data:`PRIORITY_WEIGHTS`).
    window:
        Samples per feature used by the slope (newest first), ≥ 1.
    horizon_s:
        Forecast horizon, s (≥ 0).
    gain:
        Scale of ``w`` (see the module docstring), > 0.
    bias:
        Classifier bias ``b``; default :func:`default_bias` (``−gain/2``).
    fitted:
        Fitted ``w`` and ``b`` per feature set (:data:`FITTED`); when given, they replace
        ``gain``, ``bias`` and the profile split (a feature set it lacks falls back to them).
    native:
        Let the compiled engine decide where it is installed (:data:`NATIVE_AVAILABLE`) and every feature comes as
        :class:`Columns`: the same result, bit for bit (it hands anything else back to this module).

    Returns
    -------
    SchedulerWeights
        Weights summing to 1 (empty when ``histories`` is empty), the
        prioritised subflow, the forecasts, and a human-readable reason.

    Raises
    ------
    ValueError
        When ``window < 1``, ``horizon_s`` is negative or non-finite, or ``gain <= 0``.
    """
    b = _checked(window, horizon_s, gain, bias)
    if not histories:
        return _uniform([], priority, horizon_s, b, "no subflows")
    if native and NATIVE_AVAILABLE and (d := _decide_native(histories, window, horizon_s, priority, gain, b, fitted)):
        return d
    rtt, tput = forecasts(histories, window, horizon_s)
    return _decide(histories, rtt, tput, priority, horizon_s, gain, b, fitted)


def decide_batch(
    histories: Sequence[Sequence[SubflowHistory]],
    priorities: Sequence[Priority],
    *,
    window: int = DEFAULT_WINDOW,
    horizon_s: float = DEFAULT_HORIZON_S,
    gain: float = DEFAULT_GAIN,
    bias: float | None = None,
    fitted: Sequence[FittedClassifier | None] | None = None,
    native: bool = True,
) -> list[SchedulerWeights]:
    """:func:`decide` for many decisions at once (a ``RecommendBatch``; issue 16): the same results, with every
    forecast taken by :func:`forecasts_batch` (Eq. 1 for all windows in a few numpy operations).

    Parameters
    ----------
    histories:
        Shape (d, k_i): the subflows of each decision.
    priorities:
        Shape (d,): each decision's priority.
    fitted:
        None, or shape (d,): each decision's fitted classifier (or None), as :func:`decide`'s ``fitted``.
    window, horizon_s, gain, bias, native:
        As in :func:`decide`, shared by all decisions. Where the compiled engine decides, it decides one by one
        (~3 µs each, against ~36 µs for the numpy batch); what it hands back takes the numpy batch.

    Raises
    ------
    ValueError
        As :func:`decide`, and when ``priorities`` or ``fitted`` differ in length from ``histories``.
    """
    b = _checked(window, horizon_s, gain, bias)
    if len(priorities) != len(histories) or (fitted is not None and len(fitted) != len(histories)):
        raise ValueError(f"{len(histories)} decisions but {len(priorities)} priorities or fitted classifiers")
    per_item = fitted if fitted is not None else [None] * len(histories)
    compiled = native and NATIVE_AVAILABLE
    out: list[SchedulerWeights | None] = [
        _decide_native(h, window, horizon_s, priority, gain, b, f) if compiled and h else None
        for h, priority, f in zip(histories, priorities, per_item, strict=True)
    ]
    rest = [i for i, d in enumerate(out) if d is None]
    if rest:
        rest_forecasts = forecasts_batch([histories[i] for i in rest], window, horizon_s)
        for i, (rtt, tput) in zip(rest, rest_forecasts, strict=True):
            h, priority = histories[i], priorities[i]
            out[i] = (
                _decide(h, rtt, tput, priority, horizon_s, gain, b, per_item[i])
                if h
                else _uniform([], priority, horizon_s, b, "no subflows")
            )
    return cast(list[SchedulerWeights], out)  # every entry decided by one of the two paths


def _checked(window: int, horizon_s: float, gain: float, bias: float | None) -> float:
    """:func:`decide`'s argument checks; the bias in use."""
    if window < 1:
        raise ValueError("window must be >= 1")
    if not math.isfinite(horizon_s) or horizon_s < 0:
        raise ValueError("horizon_s must be finite and >= 0")
    if not math.isfinite(gain) or gain <= 0:
        raise ValueError("gain must be finite and > 0")
    return default_bias(gain) if bias is None or not math.isfinite(bias) else bias


#: The features a decision uses, by which of (RTT, throughput) every subflow has: the names in the order of the
#: feature vector (module docstring, step 4) and the :class:`FittedClassifier` feature set they select.
_FEATURE_SETS: dict[tuple[bool, bool], tuple[tuple[str, ...], str]] = {
    (True, True): (("rtt_ms", "rtt_forecast_ms", "throughput_bps", "throughput_forecast_bps"), "rtt+tput"),
    (True, False): (("rtt_ms", "rtt_forecast_ms"), "rtt"),
    (False, True): (("throughput_bps", "throughput_forecast_bps"), "tput"),
}


def _reason_text(priority: Priority, use_rtt: bool, use_tput: bool) -> str:
    """The ``reason`` of a decision over the features (``use_rtt``, ``use_tput``), before any short-window note."""
    notes = [f"MLPM {priority.value} priority over {', '.join(_FEATURE_SETS[use_rtt, use_tput][0])}"]
    if not use_rtt:
        notes.append("RTT unknown for some subflow: scored on throughput only")
    if not use_tput:
        notes.append("throughput unknown for some subflow: scored on RTT only")
    return "; ".join(notes)


#: (priority, use_rtt, use_tput) → :func:`_reason_text`, for every priority and feature set (built once).
_REASONS: dict[tuple[Priority, bool, bool], str] = {
    (p, rtt, tput): _reason_text(p, rtt, tput) for p in Priority for rtt, tput in _FEATURE_SETS
}


def _decide(
    histories: Sequence[SubflowHistory],
    rtt: list[FeatureForecast | None],
    tput: list[FeatureForecast | None],
    priority: Priority,
    horizon_s: float,
    gain: float,
    b: float,
    fitted: FittedClassifier | None,
) -> SchedulerWeights:
    """Steps 4–6 of the module docstring for one decision, its forecasts taken (``histories`` not empty)."""
    use_rtt = None not in rtt
    use_tput = None not in tput
    if not use_rtt and not use_tput:
        return _uniform(
            [h.interface for h in histories],
            priority,
            horizon_s,
            b,
            "uniform: no feature (RTT or throughput) is known for every subflow",
        )
    w, b = _classifier(priority, use_rtt, use_tput, gain, b, fitted)
    scores = [classify(f, w, b) for f in normalised_features(rtt, tput)[1]]
    total = math.fsum(scores)
    k = len(scores)
    weights = [s / total for s in scores] if total > 0 else [1.0 / k] * k
    # the prioritised subflow: the highest score; ties to the lower current RTT, then the name
    best_i, best = 0, None
    for i, (h, r, score) in enumerate(zip(histories, rtt, scores, strict=True)):
        key = (-score, r.current if r is not None else math.inf, h.interface)
        if best is None or key < best:
            best_i, best = i, key
    # Clamp forecasts reported to the floors used for scoring.
    subflows = tuple(
        SubflowScore(h.interface, weight, score, _floored(r, RTT_FLOOR_MS), _floored(t, 0.0))
        for h, weight, score, r, t in zip(histories, weights, scores, rtt, tput, strict=True)
    )
    short = [h.interface for h, r, t in zip(histories, rtt, tput, strict=True) if _short(r) or _short(t)]
    return _weights(subflows, histories[best_i].interface, short, priority, use_rtt, use_tput, horizon_s, w, b)


def _weights(
    subflows: tuple[SubflowScore, ...],
    prioritised: str,
    short: Sequence[str],
    priority: Priority,
    use_rtt: bool,
    use_tput: bool,
    horizon_s: float,
    w: tuple[float, ...],
    b: float,
) -> SchedulerWeights:
    """The decision of steps 4–6 of :func:`_decide`: its features and reason (:func:`_reason`)."""
    return SchedulerWeights(
        subflows=subflows,
        prioritised_subflow=prioritised,
        features_used=_FEATURE_SETS[use_rtt, use_tput][0],
        priority=priority,
        horizon_s=horizon_s,
        bias=b,
        reason=_reason(priority, use_rtt, use_tput, short),
        classifier_weights=w,
    )


def _reason(priority: Priority, use_rtt: bool, use_tput: bool, short: Sequence[str]) -> str:
    """A decision's ``reason`` (Python and compiled engine alike), with ``short`` the subflows with fewer than
    :data:`MIN_SAMPLES_FOR_TREND` samples of a known feature."""
    reason = _REASONS[priority, use_rtt, use_tput]
    if short:
        reason += f"; fewer than {MIN_SAMPLES_FOR_TREND} samples (trend taken as 0) on {', '.join(short)}"
    return reason


def _classifier(
    priority: Priority, use_rtt: bool, use_tput: bool, gain: float, b: float, fitted: FittedClassifier | None
) -> tuple[tuple[float, ...], float]:
    """The classifier ``(w, b)`` of Eq. 2 for a decision over the features (``use_rtt``, ``use_tput``; one at
    least): the priority's split between the features in use (all of it to the one known), halved between the
    current value and its forecast, times ``gain``, with the bias ``b``; or ``fitted``'s for that feature set."""
    if use_rtt and use_tput:
        p_rtt, p_tput = PRIORITY_WEIGHTS[priority]
        w: tuple[float, ...] = (gain * p_rtt / 2.0,) * 2 + (gain * p_tput / 2.0,) * 2
    else:
        w = (gain / 2.0,) * 2
    if fitted is not None:
        feature_set = _FEATURE_SETS[use_rtt, use_tput][1]
        fitted_w = fitted.weights.get(feature_set)
        if fitted_w is not None and len(fitted_w) == len(w):
            return tuple(fitted_w), fitted.bias.get(feature_set, b)
    return w, b


_Classifier = tuple[tuple[float, ...], float]
#: (priority, gain, b, id(fitted)) → (fitted, the three ``(w, b)`` of :func:`_classifier`: both features, RTT
#: only, throughput only), for the compiled engine. The entry holds ``fitted``, so its id is not reused while cached.
_NATIVE_CLASSIFIERS: dict[
    tuple[Priority, float, float, int], tuple[object, tuple[_Classifier, _Classifier, _Classifier]]
] = {}


def _native_classifiers(
    priority: Priority, gain: float, b: float, fitted: FittedClassifier | None
) -> tuple[_Classifier, _Classifier, _Classifier]:
    key = (priority, gain, b, id(fitted))
    hit = _NATIVE_CLASSIFIERS.get(key)
    if hit is None:
        if len(_NATIVE_CLASSIFIERS) >= 256:
            _NATIVE_CLASSIFIERS.clear()
        sets = (
            _classifier(priority, True, True, gain, b, fitted),
            _classifier(priority, True, False, gain, b, fitted),
            _classifier(priority, False, True, gain, b, fitted),
        )
        hit = _NATIVE_CLASSIFIERS[key] = (fitted, sets)
    return hit[1]


#: One subflow as the compiled engine takes it: ``(interface, rtt_ms, throughput_bps, current_rtt_ms)``, each feature
#: as ``(t, values, t_units_per_s)`` columns (:class:`Columns` or a plain tuple) or None (no samples).
PlainColumns = tuple[Sequence[float], Sequence[float], float]
CompiledSubflow = tuple[str, PlainColumns | None, PlainColumns | None, float | None]
#: A forecast in plain values: ``(current, slope_per_s, forecast, samples)``, as :class:`FeatureForecast`'s fields.
PlainForecast = tuple[float, float, float, int]


class CompiledDecision(NamedTuple):
    """A :func:`compiled_decider`'s decision in plain values (what :class:`SchedulerWeights` holds, without an object
    per subflow and forecast).

    ``scored``: per subflow in order ``(weight, score, rtt forecast, throughput forecast)``, forecasts as
    :data:`PlainForecast` (floored as :class:`SubflowScore`'s) or None; ``prioritised``: the prioritised subflow's
    index; the rest as :class:`SchedulerWeights`.
    """

    scored: list[tuple[float, float, PlainForecast | None, PlainForecast | None]]
    prioritised: int
    features_used: tuple[str, ...]
    bias: float
    reason: str
    classifier_weights: tuple[float, ...]


def compiled_decider(
    *,
    priority: Priority = Priority.BALANCED,
    window: int = DEFAULT_WINDOW,
    horizon_s: float = DEFAULT_HORIZON_S,
    gain: float = DEFAULT_GAIN,
    bias: float | None = None,
    fitted: FittedClassifier | None = None,
) -> Callable[[Sequence[CompiledSubflow]], CompiledDecision | None]:
    """:func:`decide` by the compiled engine (``edgepath_native.mlpm_decide``; service/native/src/mlpm.rs), in plain
    values: the same numbers bit for bit, for a caller that builds its own form of them (the service's section).

    The arguments are :func:`decide`'s and are checked once, here: the result is a function of the subflows alone
    (``subflows``: shape (k,), :data:`CompiledSubflow`), shared by the items of a ``RecommendBatch`` of one priority
    (issue 16: the checks and the keyword call per item were ~0.6 µs of a batch decision's ~12 in MLPM's stage). It
    returns None where the compiled engine is not installed or does not decide (no subflow, columns out of time order
    or not finite, no feature known for every subflow): :func:`decide` with ``native=False`` then gives the decision.

    Raises
    ------
    ValueError
        As :func:`decide`, when the arguments are checked.
    """
    b = _checked(window, horizon_s, gain, bias)

    def decide(subflows: Sequence[CompiledSubflow]) -> CompiledDecision | None:
        return _compiled(subflows, window, horizon_s, priority, gain, b, fitted)

    return decide


def _compiled(
    subflows: Sequence[CompiledSubflow],
    window: int,
    horizon_s: float,
    priority: Priority,
    gain: float,
    b: float,
    fitted: FittedClassifier | None,
) -> CompiledDecision | None:
    """A :func:`compiled_decider`'s decision (its arguments checked, ``b`` the bias in use)."""
    if _native_decide is None or not subflows:
        return None
    decided = _native_decide(subflows, window, horizon_s, _native_classifiers(priority, gain, b, fitted))
    if decided is None:
        return None
    scored, best, use_rtt, use_tput, w, bias_used, short = decided
    return CompiledDecision(
        scored,
        best,
        _FEATURE_SETS[use_rtt, use_tput][0],
        bias_used,
        _reason(priority, use_rtt, use_tput, [subflows[i][0] for i in short]),
        tuple(w),
    )


class SectionModels(NamedTuple):
    """A caller's models of a decision, as :func:`compiled_section_decider` builds them: ``section`` (a pydantic model
    with ``SECTION_BUILDER.SECTION_FIELDS`` as its fields, in that order: ``edgepath.types.SchedulerAdvice``'s),
    ``weight`` (one subflow's, with ``SECTION_BUILDER.WEIGHT_FIELDS``: ``SubflowWeight``'s) and the inclusive bounds
    a weight's ``weight`` and ``score`` declare (finite)."""

    section: type
    weight: type
    weight_bounds: tuple[float, float]
    score_bounds: tuple[float, float]


#: A :func:`compiled_section_decider`'s decider: ``(interfaces, histories, advisory)`` → the section, or None.
SectionDecider = Callable[[Sequence[InterfaceContext], Sequence[SubflowHistoryModel], str], Any]


def compiled_section_decider(
    models: SectionModels,
    *,
    priority: Priority = Priority.BALANCED,
    window: int = DEFAULT_WINDOW,
    horizon_s: float = DEFAULT_HORIZON_S,
    gain: float = DEFAULT_GAIN,
    bias: float | None = None,
    fitted: FittedClassifier | None = None,
) -> SectionDecider | None:
    """:func:`decide` by the compiled engine straight from a request's models, its decision built as the caller's
    ``models`` (``edgepath_native.MlpmSection``; service/native/src/section.rs): the numbers of
    :func:`compiled_decider` bit for bit and this module's reason text, without the plain values in between (issue 16:
    the columns' tuples, a dict per weight and pydantic's check of the section were ~9 µs of a decision's ~19 in the
    service's MLPM section).

    The decider takes ``interfaces`` (shape (k,), each ``name`` and ``rtt_ms`` in ms), ``histories`` (the request's
    ``SubflowHistory`` models; an interface's is the last of its name) and an ``advisory`` appended to the reason
    ("" for none); the subflows are the interfaces, in order, each with its own history's columns (ms timestamps,
    1000 per s) or none. Its section holds one weight per interface (clamped to [0, 1]), the prioritised subflow's
    name, the priority, the features used, ``horizon_s``, the bias and the reason, as :class:`SchedulerWeights`. It
    returns None where the compiled build is absent from the decision: a history in the sample-object form, anything
    :func:`compiled_decider` would hand back, a weight or score outside the models' bounds (NaN included); the caller
    then decides by :func:`compiled_decider` or :func:`decide`, which give the same numbers and let the model refuse a
    bad one. This function returns None where the compiled build is not installed. Making the decider costs a few µs:
    make it once per priority and settings (the service's adapter caches it).

    Raises
    ------
    ValueError
        As :func:`decide`, when the arguments are checked; bounds in ``models`` not finite or not ordered.
    """
    if _NativeSection is None:
        return None
    b = _checked(window, horizon_s, gain, bias)
    both, rtt, tput = (True, True), (True, False), (False, True)  # the builder's order
    texts = (
        priority.value,
        (_REASONS[priority, *both], _REASONS[priority, *rtt], _REASONS[priority, *tput]),
        (list(_FEATURE_SETS[both][0]), list(_FEATURE_SETS[rtt][0]), list(_FEATURE_SETS[tput][0])),
        functools.partial(_reason, priority),
    )
    native = _NativeSection(
        window,
        horizon_s,
        _native_classifiers(priority, gain, b, fitted),
        texts,
        (models.weight, models.section, object.__new__),
        (models.weight_bounds, models.score_bounds),
    )
    return native.decide  # type: ignore[no-any-return]


def _decide_native(
    histories: Sequence[SubflowHistory],
    window: int,
    horizon_s: float,
    priority: Priority,
    gain: float,
    b: float,
    fitted: FittedClassifier | None,
) -> SchedulerWeights | None:
    """:func:`decide` (its arguments checked, ``histories`` not empty) by the compiled engine
    (:func:`compiled_decider`'s), or None where it does not decide, also for a feature given as pairs."""
    subflows: list[CompiledSubflow] = []
    for h in histories:
        r, t = h.rtt_ms, h.throughput_bps
        if (r and not isinstance(r, Columns)) or (t and not isinstance(t, Columns)):
            return None  # (t_s, value) pairs: this module's path
        subflows.append(
            (
                h.interface,
                r if isinstance(r, Columns) else None,
                t if isinstance(t, Columns) else None,
                h.current_rtt_ms,
            )
        )
    d = _compiled(subflows, window, horizon_s, priority, gain, b, fitted)
    if d is None:
        return None
    return SchedulerWeights(
        subflows=tuple(
            SubflowScore(h.interface, weight, score, r and FeatureForecast(*r), t and FeatureForecast(*t))
            for h, (weight, score, r, t) in zip(histories, d.scored, strict=True)
        ),
        prioritised_subflow=histories[d.prioritised].interface,
        features_used=d.features_used,
        priority=priority,
        horizon_s=horizon_s,
        bias=d.bias,
        reason=d.reason,
        classifier_weights=d.classifier_weights,
    )


def _short(f: FeatureForecast | None) -> bool:
    return f is not None and f.samples < MIN_SAMPLES_FOR_TREND


def _floored(f: FeatureForecast | None, floor: float) -> FeatureForecast | None:
    if f is None or f.forecast >= floor:
        return f
    return FeatureForecast(current=f.current, slope_per_s=f.slope_per_s, forecast=floor, samples=f.samples)
