"""Fitting MLPM's classifier (edgepath.evaluation.mlpm_fit, issue 20): split hygiene and what the fit learns."""

from __future__ import annotations

import numpy as np
import pytest
from edgepath.engines import mlpm
from edgepath.evaluation import mlpm_eval, mlpm_fit


def synthetic(leader_changes: bool, steps: int = 120, seed: int = 0) -> mlpm_eval.Trace:
    """Two paths; throughput persistent over seconds (AR(1)), so the last value predicts the next best path."""
    rng = np.random.default_rng(seed)
    x = np.zeros((2, steps))
    x[:, 0] = [50.0, 40.0]
    for t in range(1, steps):
        x[:, t] = 0.9 * x[:, t - 1] + 0.1 * 45.0 + rng.normal(0, 4.0 if leader_changes else 1.0, size=2)
    return mlpm_eval.Trace(name=f"synthetic-{seed}", source="test", paths=["a", "b"], throughput_bps=np.abs(x) * 1e6)


def test_train_and_test_traces_are_disjoint_files() -> None:
    def files(split: dict) -> set[str]:
        return set(split["gophers"]) | {f for pair in split["ucc_pairs"] for f in pair}

    assert not files(mlpm_fit.TRAIN) & files(mlpm_fit.TEST)


def test_fit_learns_that_the_current_best_stays_best() -> None:
    result = mlpm_fit.fit([synthetic(True, seed=s) for s in range(4)])
    fc = result.classifiers[mlpm.Priority.THROUGHPUT]
    w = fc.weights["tput"]
    assert sum(w) > 0.5, "higher relative throughput now must raise the score"
    assert result.rows["throughput"]["tput"] == 2 * 4 * 119
    # Scored by the engine with the fitted classifier, the currently faster path is prioritised.
    hist = [
        mlpm.SubflowHistory("a", throughput_bps=[mlpm.Sample(t, 60e6) for t in range(5)]),
        mlpm.SubflowHistory("b", throughput_bps=[mlpm.Sample(t, 30e6) for t in range(5)]),
    ]
    d = mlpm.decide(hist, priority=mlpm.Priority.THROUGHPUT, fitted=fc)
    assert d.prioritised_subflow == "a" and d.bias == fc.bias["tput"]
    assert d.subflows[0].weight > d.subflows[1].weight


def test_too_little_data_leaves_a_feature_set_unfitted() -> None:
    result = mlpm_fit.fit([synthetic(True, steps=10)])
    assert "tput" not in result.classifiers[mlpm.Priority.THROUGHPUT].weights  # 18 rows < MIN_ROWS


def test_shipped_fitted_classifiers_come_from_the_training_split() -> None:
    """The constants in engines.mlpm.FITTED are what fit() gives on TRAIN (rounded to 4 places)."""
    data = mlpm_eval.shared_data_dir()
    if data is None:
        pytest.skip("../shared/data (developers' traces) not present")
    result = mlpm_fit.fit(mlpm_fit.load_split(data, mlpm_fit.TRAIN))
    for priority, shipped in mlpm.FITTED.items():
        got = result.classifiers[priority]
        for fs, w in shipped.weights.items():
            assert got.weights[fs] == pytest.approx(w, abs=2e-3)
            assert got.bias[fs] == pytest.approx(shipped.bias[fs], abs=2e-3)
