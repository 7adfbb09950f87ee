"""The compiled MLPM engine (service/native, ``edgepath_native``) against its reference, :mod:`edgepath.engines.mlpm`.

The Python engine is the reference: on the inputs the compiled one takes (every feature as columns, finite and in
time order) it must give the same :class:`~edgepath.engines.mlpm.SchedulerWeights` bit for bit (``repr`` equal:
``-0.0`` against ``0.0`` would show), and hand everything else back. CPython 3.11's ``sum`` adds left to right as
the compiled engine does; from 3.12 ``sum`` compensates its rounding and the two agree to rounding only.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import pytest
from edgepath.engines import mlpm
from edgepath.engines.mlpm import Priority, SubflowHistory
from hypothesis import given, settings
from hypothesis import strategies as st
from native_twin import require_compiled

compiled_part = require_compiled(mlpm.NATIVE_AVAILABLE, "the compiled MLPM")

BIT_FOR_BIT = sys.version_info < (3, 12)


def _same(got: mlpm.SchedulerWeights, want: mlpm.SchedulerWeights) -> None:
    if BIT_FOR_BIT:
        assert repr(got) == repr(want)
    else:
        assert got.prioritised_subflow == want.prioritised_subflow
        assert [s.weight for s in got.subflows] == pytest.approx([s.weight for s in want.subflows], rel=1e-12)


def _decide_both(histories: list[SubflowHistory], **kwargs: Any) -> tuple[mlpm.SchedulerWeights, ...]:
    return mlpm.decide(histories, native=True, **kwargs), mlpm.decide(histories, native=False, **kwargs)


def _native_decides(histories: list[SubflowHistory], **kwargs: Any) -> bool:
    """Whether the compiled engine decided (rather than handing the decision back)."""
    window = kwargs.get("window", mlpm.DEFAULT_WINDOW)
    horizon_s = kwargs.get("horizon_s", mlpm.DEFAULT_HORIZON_S)
    gain = kwargs.get("gain", mlpm.DEFAULT_GAIN)
    b = mlpm._checked(window, horizon_s, gain, kwargs.get("bias"))  # the bias decide uses
    priority = kwargs.get("priority", Priority.BALANCED)
    return mlpm._decide_native(histories, window, horizon_s, priority, gain, b, kwargs.get("fitted")) is not None


# What the service's validation lets through (types.py): times 0..1e13 ms, RTT 0..600,000 ms, throughput 0..1e12
# bit/s, up to 64 samples; times here on the agent's grid and also repeated (equal times, slope 0).
_T_MS = st.one_of(st.integers(0, 10**6).map(lambda k: 1.7e12 + 125.0 * k), st.just(1.7e12), st.floats(0.0, 1e13))
_RTT = st.one_of(st.floats(0.0, 600_000.0), st.sampled_from([0.0, 0.05, 0.1, 20.0]))
_TPUT = st.one_of(st.floats(0.0, 1e12), st.sampled_from([0.0, 1e6]))


def _columns(draw: Any, values: st.SearchStrategy[float]) -> mlpm.Columns | tuple[()]:
    rows = draw(st.lists(st.tuples(_T_MS, values), max_size=64))
    if draw(st.booleans()):
        return ()  # no history of this feature
    rows.sort(key=lambda r: r[0])  # what an agent sends; out of order is tested below
    return mlpm.Columns([r[0] for r in rows], [r[1] for r in rows], 1000.0)


@st.composite
def _subflows(draw: Any) -> list[SubflowHistory]:
    names = draw(st.lists(st.sampled_from(["wlan0", "wwan0", "eth0", "wlan1"]), min_size=1, max_size=4, unique=True))
    return [
        SubflowHistory(
            name,
            rtt_ms=_columns(draw, _RTT),
            throughput_bps=_columns(draw, _TPUT),
            current_rtt_ms=draw(st.one_of(st.none(), _RTT)),
        )
        for name in names
    ]


_KWARGS = st.fixed_dictionaries(
    {
        "priority": st.sampled_from(list(Priority)),
        "window": st.integers(1, 25),
        "horizon_s": st.floats(0.0, 10.0),
        "gain": st.floats(0.1, 50.0),
        "bias": st.one_of(st.none(), st.floats(-20.0, 20.0)),
    }
)


@settings(max_examples=500, deadline=None)
@given(histories=_subflows(), kwargs=_KWARGS, fitted=st.booleans())
def test_the_compiled_engine_decides_as_the_python_engine(
    histories: list[SubflowHistory], kwargs: dict[str, Any], fitted: bool
) -> None:
    if fitted:
        kwargs = {**kwargs, "fitted": mlpm.FITTED[kwargs["priority"]]}
    got, want = _decide_both(histories, **kwargs)
    _same(got, want)
    rtt_known = all((len(h.rtt_ms) and len(h.rtt_ms[0])) or h.current_rtt_ms is not None for h in histories)
    tput_known = all(len(h.throughput_bps) and len(h.throughput_bps[0]) for h in histories)
    assert _native_decides(histories, **kwargs) == (rtt_known or tput_known)  # it handed back only the uniform


def test_it_decides_the_agent_contexts_itself() -> None:
    """On agent-shaped histories (2 × 20 samples per subflow) the compiled engine decides (no hand-back), as the
    reference does, with and without a fitted classifier."""
    rng = np.random.default_rng(46)
    for i in range(300):
        t = (1.7e12 + np.cumsum(rng.uniform(50, 150, 20))).tolist()  # floats, as the service's columns
        histories = [
            SubflowHistory(
                name,
                rtt_ms=mlpm.Columns(t, rng.uniform(5, 80, 20).tolist(), 1000.0),
                throughput_bps=mlpm.Columns(t, rng.uniform(1e6, 5e7, 20).tolist(), 1000.0),
                current_rtt_ms=float(rng.uniform(5, 80)),
            )
            for name in ("wlan0", "wwan0")
        ]
        priority = list(Priority)[i % 3]
        kwargs: dict[str, Any] = {"priority": priority, "fitted": mlpm.FITTED[priority] if i % 2 else None}
        assert _native_decides(histories, **kwargs)
        _same(*_decide_both(histories, **kwargs))


def test_it_hands_back_what_it_does_not_take() -> None:
    """Columns out of time order, (t_s, value) pairs and no feature known for every subflow go to the Python engine:
    the same answer as ``native=False``, and ``_decide_native`` says it did not decide."""
    ordered = mlpm.Columns([0.0, 1000.0, 2000.0], [10.0, 20.0, 30.0], 1000.0)
    shuffled = mlpm.Columns([0.0, 2000.0, 1000.0], [10.0, 30.0, 20.0], 1000.0)
    cases = [
        [SubflowHistory("a", rtt_ms=shuffled), SubflowHistory("b", rtt_ms=ordered)],
        [SubflowHistory("a", rtt_ms=[(0.0, 10.0), (1.0, 20.0)]), SubflowHistory("b", rtt_ms=ordered)],
        [SubflowHistory("a", rtt_ms=ordered), SubflowHistory("b")],  # b: no RTT and no throughput
    ]
    for histories in cases:
        assert not _native_decides(histories)
        _same(*_decide_both(histories))
    assert mlpm.decide(cases[2]).reason.startswith("uniform")


def test_short_histories_and_floors_are_reported_alike() -> None:
    """Fewer than 3 samples (trend 0, named in the reason) and forecasts below the floors (raised to them)."""
    falling = mlpm.Columns([0.0, 1000.0, 2000.0], [30.0, 15.0, 1.0], 1000.0)
    histories = [
        SubflowHistory("a", rtt_ms=falling, throughput_bps=falling),
        SubflowHistory("b", current_rtt_ms=10.0, throughput_bps=mlpm.Columns([0.0], [5.0], 1000.0)),
    ]
    got, want = _decide_both(histories, horizon_s=10.0)
    _same(got, want)
    assert _native_decides(histories, horizon_s=10.0)
    assert got.subflows[0].rtt_ms is not None and got.subflows[0].rtt_ms.forecast == mlpm.RTT_FLOOR_MS
    assert "fewer than 3 samples (trend taken as 0) on b" in got.reason


@pytest.mark.parametrize("native", [True, False])
def test_the_batch_decides_as_one_by_one(native: bool) -> None:
    """decide_batch with the compiled engine: per item what decide answers, items it hands back included."""
    ordered = mlpm.Columns([0.0, 1000.0, 2000.0], [10.0, 20.0, 30.0], 1000.0)
    shuffled = mlpm.Columns([0.0, 2000.0, 1000.0], [10.0, 30.0, 20.0], 1000.0)
    items = [
        [SubflowHistory("a", rtt_ms=ordered), SubflowHistory("b", rtt_ms=shuffled)],
        [],
        [SubflowHistory("a", rtt_ms=ordered, current_rtt_ms=3.0), SubflowHistory("b", current_rtt_ms=math.inf)],
        [SubflowHistory("a", rtt_ms=ordered), SubflowHistory("b", current_rtt_ms=12.0)],
    ]
    priorities = [Priority.LATENCY, Priority.BALANCED, Priority.THROUGHPUT, Priority.BALANCED]
    batch = mlpm.decide_batch(items, priorities, native=native)
    for got, item, priority in zip(batch, items, priorities, strict=True):
        _same(got, mlpm.decide(item, priority=priority, native=False))
