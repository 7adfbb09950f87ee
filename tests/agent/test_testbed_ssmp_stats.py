"""Pure parts of the SSMP testbed report (testbed/ssmp.py): the playout model and the reduction statistic."""

from __future__ import annotations

import pytest
from edgepath_agent.testbed.ssmp import playout, reduction_of_means


def test_playout_startup_and_stall() -> None:
    # 1 s segments, start after 2: start-up = 2nd completion; segment 2 due at 0.5 + 2 = 2.5 s, arrives at 3.0;
    # segment 3 is then due at 0.5 + 3 + 0.5 = 4.0 s and is in time.
    startup, stall = playout([0.2, 0.5, 3.0, 3.9], segment_s=1.0, startup_segments=2)
    assert startup == pytest.approx(0.5)
    assert stall == pytest.approx(0.5)
    assert playout([0.1, 0.2, 0.3], 1.0, 2) == (pytest.approx(0.2), 0.0)  # always ahead: no stall
    assert playout([0.4], 1.0, 2)[0] == pytest.approx(0.4)  # fewer segments than the start-up needs


def row(size: int, dss_ms: float, ssmp_ms: float) -> dict:
    return {"size_bytes": size, "dss": {"download_ms": dss_ms}, "ssmp": {"download_ms": ssmp_ms}}


def test_reduction_of_means_averages_sizes_and_brackets_the_estimate() -> None:
    rows = [row(1, 100.0, 50.0), row(1, 300.0, 150.0), row(2, 10.0, 9.0), row(2, 30.0, 27.0)]
    r = reduction_of_means(rows, seed=1, resamples=500)
    assert r["mean"] == pytest.approx((50.0 + 10.0) / 2)  # size 1: −50 %, size 2: −10 %
    assert r["n"] == 4
    assert r["ci95_low"] <= r["mean"] <= r["ci95_high"]
    assert r["ci95"] == pytest.approx((r["ci95_high"] - r["ci95_low"]) / 2)
    assert reduction_of_means([], seed=1)["mean"] is None
