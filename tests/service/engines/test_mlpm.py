"""MLPM engine: Eq. 1 slope, Eq. 2–4 classifier, weights, degenerate histories (Silva et al., HPCS 2020)."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from edgepath.engines import mlpm
from edgepath.engines.mlpm import Priority, Sample, SubflowHistory
from hypothesis import given, settings
from hypothesis import strategies as st


def samples(ts: list[float], ys: list[float]) -> list[Sample]:
    return [Sample(t, y) for t, y in zip(ts, ys, strict=True)]


def test_slope_hand_computed() -> None:
    # x = 0..3, y = 1,3,2,5: n=4, Σx=6, Σy=11, Σxy=22, Σx²=14 → (88−66)/(56−36) = 1.1
    assert mlpm.slope([0, 1, 2, 3], [1, 3, 2, 5]) == pytest.approx(1.1, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_slope_matches_numpy_polyfit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 21))
    # Epoch-like timestamps (seconds since 1970) with jitter: cancellation-prone for the raw formula.
    t = 1.7e9 + np.cumsum(rng.uniform(0.2, 2.0, n))
    y = rng.normal(50.0, 10.0, n) + 3.0 * (t - t[0])
    expected = np.polyfit(t - t[0], y, 1)[0]
    assert mlpm.slope(t.tolist(), y.tolist()) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_slope_degenerate_inputs_are_zero() -> None:
    assert mlpm.slope([], []) == 0.0
    assert mlpm.slope([0, 1], [5, 9]) == 0.0  # fewer than 3 samples
    assert mlpm.slope([4, 4, 4], [1, 2, 3]) == 0.0  # equal timestamps: denominator 0
    assert mlpm.slope([0, 1, 2], [1, math.nan, 3]) == 0.0
    assert mlpm.slope([0, 1, 2], [1, 2]) == 0.0  # length mismatch


def test_classifier_hand_computed() -> None:
    # w·f + b = 2·1 + (−1)·0.5 + 0.5 = 2 → σ(2) = 1/(1+e^−2)
    assert mlpm.classify([1.0, 0.5], [2.0, -1.0], 0.5) == pytest.approx(1 / (1 + math.exp(-2)), abs=1e-15)
    assert mlpm.sigmoid(-1000.0) == 0.0
    assert mlpm.sigmoid(1000.0) == 1.0
    with pytest.raises(ValueError):
        mlpm.classify([1.0], [1.0, 2.0], 0.0)


def test_decide_hand_computed_rtt_only() -> None:
    # Only current RTTs (50 ms, 100 ms), latency priority → RTT only: w = [4, 4], b = −4.
    # a: goodness (1, 1) → σ(4); b: (0.5, 0.5) → σ(0) = 0.5.
    d = mlpm.decide(
        [SubflowHistory("a", current_rtt_ms=50.0), SubflowHistory("b", current_rtt_ms=100.0)],
        priority=Priority.LATENCY,
    )
    sa = 1 / (1 + math.exp(-4))
    assert d.features_used == ("rtt_ms", "rtt_forecast_ms")
    assert d.classifier_weights == (4.0, 4.0)
    assert d.subflows[0].score == pytest.approx(sa)
    assert d.subflows[1].score == pytest.approx(0.5)
    assert d.subflows[0].weight == pytest.approx(sa / (sa + 0.5))
    assert d.prioritised_subflow == "a"
    assert "throughput unknown" in d.reason


def test_forecast_prefers_improving_subflow() -> None:
    # Same current RTT (60 ms); one rising, one falling (the paper's Fig. 3 situation).
    rising = SubflowHistory("s1", rtt_ms=samples([0, 1, 2, 3, 4], [52, 54, 56, 58, 60]))
    falling = SubflowHistory("sn", rtt_ms=samples([0, 1, 2, 3, 4], [68, 66, 64, 62, 60]))
    d = mlpm.decide([rising, falling], priority=Priority.LATENCY, horizon_s=2.0)
    by = {s.interface: s for s in d.subflows}
    assert by["s1"].rtt_ms is not None and by["s1"].rtt_ms.forecast == pytest.approx(64.0)
    assert by["sn"].rtt_ms is not None and by["sn"].rtt_ms.forecast == pytest.approx(56.0)
    assert d.prioritised_subflow == "sn"
    assert by["sn"].weight > by["s1"].weight
    assert sum(s.weight for s in d.subflows) == pytest.approx(1.0)


def test_priority_changes_the_pick() -> None:
    fast_low_rtt = SubflowHistory(
        "wlan0", rtt_ms=samples([0, 1, 2], [20, 20, 20]), throughput_bps=samples([0, 1, 2], [5e6, 5e6, 5e6])
    )
    big_pipe = SubflowHistory(
        "wwan0", rtt_ms=samples([0, 1, 2], [80, 80, 80]), throughput_bps=samples([0, 1, 2], [50e6, 50e6, 50e6])
    )
    assert mlpm.decide([fast_low_rtt, big_pipe], priority=Priority.LATENCY).prioritised_subflow == "wlan0"
    assert mlpm.decide([fast_low_rtt, big_pipe], priority=Priority.THROUGHPUT).prioritised_subflow == "wwan0"


def test_window_uses_latest_samples_in_time_order() -> None:
    # Out-of-order input; window 3 keeps t = 7, 8, 9 (values 9, 8, 7 → slope −1).
    hist = SubflowHistory("a", throughput_bps=[Sample(float(t), float(16 - t)) for t in (9, 0, 8, 1, 7, 2)])
    d = mlpm.decide([hist], window=3)
    f = d.subflows[0].throughput_bps
    assert f is not None
    assert (f.current, f.slope_per_s, f.samples) == (7.0, pytest.approx(-1.0), 3)


class TestDegenerate:
    def test_empty(self) -> None:
        d = mlpm.decide([])
        assert d.subflows == () and d.prioritised_subflow == ""

    def test_no_features_uniform_with_reason(self) -> None:
        d = mlpm.decide([SubflowHistory("a"), SubflowHistory("b"), SubflowHistory("c")])
        assert [s.weight for s in d.subflows] == pytest.approx([1 / 3] * 3)
        assert "uniform" in d.reason

    def test_fewer_than_three_samples_trend_zero(self) -> None:
        d = mlpm.decide([SubflowHistory("a", rtt_ms=samples([0, 1], [10, 30]))])
        f = d.subflows[0].rtt_ms
        assert f is not None and f.slope_per_s == 0.0 and f.forecast == 30.0
        assert "fewer than 3" in d.reason
        assert d.subflows[0].weight == 1.0

    def test_equal_scores_prioritise_the_lower_current_rtt_then_the_name(self) -> None:
        """Step 6's ties: the same throughput everywhere and RTT not known for every subflow (scored on throughput
        only) give equal scores; the subflow with a known current RTT wins over one without, then names decide."""
        tput = samples([0, 1, 2], [1e7, 1e7, 1e7])
        d = mlpm.decide(
            [SubflowHistory("b", throughput_bps=tput), SubflowHistory("z", rtt_ms=[(0.0, 40.0)], throughput_bps=tput)]
        )
        assert d.subflows[0].score == d.subflows[1].score
        assert d.prioritised_subflow == "z"
        assert "RTT unknown for some subflow: scored on throughput only" in d.reason
        d = mlpm.decide([SubflowHistory("b", throughput_bps=tput), SubflowHistory("a", throughput_bps=tput)])
        assert d.prioritised_subflow == "a"
        assert d.features_used == ("throughput_bps", "throughput_forecast_bps")

    def test_equal_timestamps(self) -> None:
        d = mlpm.decide([SubflowHistory("a", rtt_ms=samples([5, 5, 5, 5], [10, 20, 30, 40]))])
        f = d.subflows[0].rtt_ms
        assert f is not None and f.slope_per_s == 0.0

    def test_nan_and_inf_samples_ignored(self) -> None:
        a = SubflowHistory("a", rtt_ms=[Sample(0, math.nan), Sample(math.inf, 5), Sample(1, 10), Sample(2, 10)])
        b = SubflowHistory("b", rtt_ms=[Sample(0, math.nan)])  # nothing valid → RTT unknown for b
        d = mlpm.decide([a, b])
        assert d.features_used == ()
        assert all(math.isfinite(s.weight) for s in d.subflows)

    def test_zero_values(self) -> None:
        d = mlpm.decide(
            [
                SubflowHistory("a", rtt_ms=samples([0, 1, 2], [0, 0, 0]), throughput_bps=samples([0, 1, 2], [0, 0, 0])),
                SubflowHistory("b", rtt_ms=samples([0, 1, 2], [0, 0, 0]), throughput_bps=samples([0, 1, 2], [0, 0, 0])),
            ]
        )
        assert [s.weight for s in d.subflows] == pytest.approx([0.5, 0.5])

    def test_forecast_floored(self) -> None:
        # Steeply falling RTT would forecast below 0: floored at RTT_FLOOR_MS; throughput at 0.
        d = mlpm.decide(
            [
                SubflowHistory(
                    "a", rtt_ms=samples([0, 1, 2], [30, 15, 1]), throughput_bps=samples([0, 1, 2], [9, 5, 1])
                ),
                SubflowHistory("b", current_rtt_ms=10.0, throughput_bps=samples([0, 1, 2], [1, 1, 1])),
            ],
            horizon_s=10.0,
        )
        a = d.subflows[0]
        assert a.rtt_ms is not None and a.rtt_ms.forecast == mlpm.RTT_FLOOR_MS
        assert a.throughput_bps is not None and a.throughput_bps.forecast == 0.0
        assert sum(s.weight for s in d.subflows) == pytest.approx(1.0)

    @pytest.mark.parametrize("kwargs", [{"window": 0}, {"horizon_s": -1.0}, {"horizon_s": math.nan}, {"gain": 0.0}])
    def test_bad_parameters_raise(self, kwargs: dict[str, float]) -> None:
        with pytest.raises(ValueError):
            mlpm.decide([SubflowHistory("a")], **kwargs)  # type: ignore[arg-type]


_TIME_MS = st.one_of(
    # Epoch-like ms, what an agent sends, on a 125 ms grid: exact in seconds too, so both forms hold the same times
    # (an arbitrary epoch ms in seconds is rounded to ~0.2 µs, which moves a slope over 1 ms gaps by ~1e-4).
    st.integers(0, 10**6).map(lambda k: 1.7e12 + 125.0 * k),
    st.sampled_from([1.7e12, math.nan, math.inf, -math.inf]),  # repeats and non-finite times
)
_VALUE = st.one_of(st.floats(min_value=0.0, max_value=1e9), st.sampled_from([0.0, 5.0, math.nan, math.inf]))


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(_TIME_MS, _VALUE), max_size=30),
    in_time_order=st.booleans(),
    window=st.integers(1, 25),
    horizon_s=st.floats(0.0, 10.0),
)
def test_columns_forecast_as_the_pairs_do(
    rows: list[tuple[float, float]], in_time_order: bool, window: int, horizon_s: float
) -> None:
    """Columns (ms timestamps, the adapter's form) give the forecast of the same samples as (t_s, value) pairs, for
    columns in time order (sliced without pairs) and for shuffled or non-finite ones (the pairs' path)."""
    if in_time_order:
        rows = sorted(rows, key=lambda r: r[0] if math.isfinite(r[0]) else 0.0)
    t_ms, values = [r[0] for r in rows], [r[1] for r in rows]
    from_columns = mlpm.forecast_feature(mlpm.Columns(t_ms, values, 1000.0), window, horizon_s)
    from_pairs = mlpm.forecast_feature([Sample(t / 1000.0, v) for t, v in rows], window, horizon_s)
    if from_pairs is None:
        assert from_columns is None
        return
    assert from_columns is not None
    assert (from_columns.current, from_columns.samples) == (from_pairs.current, from_pairs.samples)
    for got, want in ((from_columns.slope_per_s, from_pairs.slope_per_s), (from_columns.forecast, from_pairs.forecast)):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-6) or (math.isnan(got) and math.isnan(want))


def test_columns_in_seconds_and_window_slice() -> None:
    # 25 samples rising 2 per second; window 20 keeps t = 5..24, the newest value is 48.
    cols = mlpm.Columns([float(t) for t in range(25)], [2.0 * t for t in range(25)])
    f = mlpm.forecast_feature(cols, 20, 1.5)
    assert f is not None
    assert (f.current, f.samples) == (48.0, 20)
    assert f.slope_per_s == pytest.approx(2.0) and f.forecast == pytest.approx(51.0)
    assert mlpm.forecast_feature(mlpm.Columns([], []), 20, 1.0) is None


@pytest.mark.parametrize(
    "columns",
    [mlpm.Columns([0.0, 1.0], [1.0]), mlpm.Columns([0.0], [1.0], 0.0), mlpm.Columns([0.0], [1.0], math.nan)],
)
def test_bad_columns_raise(columns: mlpm.Columns) -> None:
    with pytest.raises(ValueError, match="Columns"):
        mlpm.forecast_feature(columns, 20, 1.0)


def _same(got: mlpm.FeatureForecast | None, want: mlpm.FeatureForecast | None) -> bool:
    """Equal forecasts: bit for bit on CPython 3.11 (its ``sum`` adds left to right, as the batch path does); from
    3.12 ``sum`` compensates its rounding, so the two agree to rounding there."""
    if got is None or want is None:
        return got is want
    if sys.version_info < (3, 12):
        return got == want
    return got.samples == want.samples and all(
        g == pytest.approx(w, rel=1e-12, abs=1e-9) for g, w in zip(got[:3], want[:3], strict=True)
    )


_COLUMN_ROWS = st.lists(st.tuples(_TIME_MS, _VALUE), max_size=25)


@settings(max_examples=300, deadline=None)
@given(
    columns=st.lists(
        st.tuples(_COLUMN_ROWS, st.booleans(), st.booleans(), st.sampled_from([1.0, 1000.0])), max_size=12
    ),
    window=st.integers(1, 25),
    horizon_s=st.floats(0.0, 10.0),
)
def test_batch_forecasts_are_the_one_by_one_forecasts(
    columns: list[tuple[list[tuple[float, float]], bool, bool, float]], window: int, horizon_s: float
) -> None:
    """forecast_columns_batch (numpy, columns stacked by length) gives each column's forecast_feature: columns in
    time order or shuffled, finite (what the API lets through) or not, of mixed lengths, in ms or s."""
    cols = []
    for rows, finite, in_time_order, per_s in columns:
        if finite:
            rows = [r for r in rows if math.isfinite(r[0]) and math.isfinite(r[1])]
        if in_time_order:
            rows = sorted(rows, key=lambda r: r[0] if math.isfinite(r[0]) else 0.0)
        cols.append(mlpm.Columns([r[0] for r in rows], [r[1] for r in rows], per_s))
    batch = mlpm.forecast_columns_batch(cols, window, horizon_s)
    assert len(batch) == len(cols)
    for got, c in zip(batch, cols, strict=True):
        assert _same(got, mlpm.forecast_feature(c, window, horizon_s)), (got, c)


def test_batch_decisions_are_the_one_by_one_decisions() -> None:
    """decide_batch: per decision what decide answers, also for pairs, missing features and no subflow at all."""
    rng = np.random.default_rng(7)

    def history(name: str, k: int) -> SubflowHistory:
        t = list(1.7e12 + np.cumsum(rng.uniform(50, 150, k)))
        rtt = mlpm.Columns(t, list(rng.uniform(5, 80, k)), 1000.0)
        tput = mlpm.Columns(t, list(rng.uniform(1e6, 5e7, k)), 1000.0) if k % 3 else ()
        return SubflowHistory(name, rtt_ms=rtt, throughput_bps=tput, current_rtt_ms=float(rng.uniform(5, 80)))

    items: list[list[SubflowHistory]] = [[history("wlan0", 20), history("wwan0", 20)] for _ in range(20)]
    items += [[history("wlan0", 2), history("wwan0", 7)], [history("eth0", 25)], []]
    items.append([SubflowHistory("wlan0", rtt_ms=samples([0, 1, 2], [10, 20, 30])), SubflowHistory("wwan0")])
    priorities = [list(Priority)[i % len(Priority)] for i in range(len(items))]
    fitted = [mlpm.FITTED.get(p) if i % 2 else None for i, p in enumerate(priorities)]
    batch = mlpm.decide_batch(items, priorities, window=15, horizon_s=2.0, fitted=fitted)
    for got, item, priority, f in zip(batch, items, priorities, fitted, strict=True):
        want = mlpm.decide(item, priority=priority, window=15, horizon_s=2.0, fitted=f)
        if sys.version_info < (3, 12):
            assert got == want
        else:
            assert got.prioritised_subflow == want.prioritised_subflow
    with pytest.raises(ValueError, match="priorities"):
        mlpm.decide_batch(items, priorities[:-1])
