"""Fitting MLPM's classifier (gain, bias, profile weights) on the developers' traces (issue 20).

Silva et al. (HPCS 2020) train MLPM's linear classifier (Eq. 2–4) on their own NS-3 runs and
publish no weights; EdgePath's ``gain = 8``, ``b = −gain/2`` and profile splits
(:data:`edgepath.engines.mlpm.PRIORITY_WEIGHTS`) were chosen by hand. Here they are fitted.

What is fitted
--------------
For every step ``t`` of a trace and every path, the engine's own features at ``t``
(:func:`edgepath.engines.mlpm.forecasts` + :func:`~edgepath.engines.mlpm.normalised_features`
on the history a causal scheduler has, :func:`edgepath.evaluation.mlpm_eval.histories_at`) and
a label: 1 when that path is the best one at ``t`` for the priority, else 0:

* throughput: the highest throughput at ``t``;
* latency: the lowest RTT at ``t`` (traces with RTT, steps where every path has one; other
  steps use the throughput label);
* balanced: the highest ``½·T/T_max + ½·RTT_min/RTT`` at ``t`` (throughput label without RTT).

A logistic regression (scikit-learn, L2, ``C`` = 1) per priority and feature set (``rtt+tput``,
``tput``, ``rtt``) gives ``w`` and ``b`` of Eq. 2: ``σ(w·f + b)`` is then the estimated
probability that a subflow is the best at the next step, which is what MLPM's weights mean.
In the engine's terms: ``gain = Σ w``, the profile split ``p_rtt = (w₁ + w₂)/Σ w``.

Split (by trace file, never by step: consecutive seconds are strongly correlated)
---------------------------------------------------------------------------------
:data:`TRAIN` — 5Gophers ``driving-trace-1`` and the UCC driving traces of 2019-12 and
2020-01 paired in time order; :data:`TEST` — 5Gophers ``driving-trace-2`` and the UCC traces
of 2020-02. Only :data:`TRAIN` is read by :func:`fit`; :func:`evaluate` reports on
:data:`TEST` (and on :data:`TRAIN` for comparison).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgepath.engines import mlpm
from edgepath.evaluation import mlpm_eval
from edgepath.types import ApplicationProfile

UCC_DIR = ("ucc-5g", "download", "driving")
#: Training traces: 5Gophers file names and UCC pairs (two single-path traces each, aligned by seconds).
TRAIN: dict[str, Any] = {
    "gophers": ["driving-trace-1.csv"],
    "ucc_pairs": [
        ("B_2019.12.14_10.16.30.csv", "B_2019.12.16_07.22.43.csv"),
        ("B_2019.12.16_11.49.59.csv", "B_2019.12.16_14.23.32.csv"),
        ("B_2019.12.17_07.32.39.csv", "B_2020.01.16_07.26.43.csv"),
    ],
}
#: Held-back traces (never read by :func:`fit`).
TEST: dict[str, Any] = {
    "gophers": ["driving-trace-2.csv"],
    "ucc_pairs": [
        ("B_2020.01.16_09.56.56.csv", "B_2020.02.13_13.03.24.csv"),
        ("B_2020.02.13_15.02.01.csv", "B_2020.02.14_07.29.00.csv"),
        ("B_2020.02.14_12.58.17.csv", "B_2020.02.27_17.30.15.csv"),
    ],
}
FEATURE_SETS = ("rtt+tput", "tput", "rtt")
#: Fewer rows than this (or a single class) for a feature set: not fitted (the engine falls back).
MIN_ROWS = 50


def load_split(data_dir: Path, split: dict[str, Any]) -> list[mlpm_eval.Trace]:
    """The traces of ``split`` under ``data_dir`` (../shared/data).

    Raises
    ------
    ValueError
        When a file is missing or malformed (naming it).
    """
    gophers = [data_dir / "5gophers" / g for g in split["gophers"]]
    ucc = [(data_dir.joinpath(*UCC_DIR, a), data_dir.joinpath(*UCC_DIR, b)) for a, b in split["ucc_pairs"]]
    return mlpm_eval.load_traces(gophers, ucc)


def _label(trace: mlpm_eval.Trace, t: int, priority: mlpm.Priority) -> int:
    tput = trace.throughput_bps[:, t]
    rtt = trace.rtt_ms[:, t] if trace.rtt_ms is not None else None
    if rtt is not None and not np.isnan(rtt).any() and (rtt > 0).all():  # RTTs usable
        if priority is mlpm.Priority.LATENCY:
            return int(np.argmin(rtt))
        if priority is mlpm.Priority.BALANCED:
            top = tput.max()
            score = 0.5 * (tput / top if top > 0 else np.ones_like(tput)) + 0.5 * (rtt.min() / rtt)
            return int(np.argmax(score))
    return int(np.argmax(tput))


def rows(
    traces: Sequence[mlpm_eval.Trace],
    priority: mlpm.Priority,
    window: int = mlpm.DEFAULT_WINDOW,
    horizon_s: float = 1.0,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per feature set, ``(X, y)``: X shape (rows, 2 or 4) engine features, y ∈ {0, 1} (best path at ``t``)."""
    out: dict[str, tuple[list[list[float]], list[int]]] = {}
    for trace in traces:
        for t in range(1, trace.steps):
            rtt, tput = mlpm.forecasts(mlpm_eval.histories_at(trace, t, window), window, horizon_s)
            used, feats = mlpm.normalised_features(rtt, tput)
            if not used:
                continue
            fs = "+".join(x for x, on in (("rtt", "rtt_ms" in used), ("tput", "throughput_bps" in used)) if on)
            best = _label(trace, t, priority)
            xs, ys = out.setdefault(fs, ([], []))
            for p, f in enumerate(feats):
                xs.append(f)
                ys.append(int(p == best))
    return {fs: (np.asarray(x, dtype=float), np.asarray(y, dtype=int)) for fs, (x, y) in out.items()}


@dataclass(frozen=True)
class FitResult:
    """Fitted classifiers per priority and how much data each saw."""

    classifiers: dict[mlpm.Priority, mlpm.FittedClassifier]
    rows: dict[str, dict[str, int]]


def fit(traces: Sequence[mlpm_eval.Trace], c: float = 1.0, window: int = mlpm.DEFAULT_WINDOW) -> FitResult:
    """Logistic-regression fit of ``w``, ``b`` per priority and feature set (module docstring).

    Parameters
    ----------
    traces:
        Training traces only.
    c:
        Inverse L2 strength of scikit-learn's ``LogisticRegression``.

    Returns
    -------
    FitResult
        One :class:`~edgepath.engines.mlpm.FittedClassifier` per priority (feature sets with
        fewer than :data:`MIN_ROWS` rows or one class are left out).
    """
    from sklearn.linear_model import LogisticRegression

    classifiers: dict[mlpm.Priority, mlpm.FittedClassifier] = {}
    counts: dict[str, dict[str, int]] = {}
    names = ", ".join(t.name for t in traces)
    for priority in mlpm.Priority:
        weights: dict[str, tuple[float, ...]] = {}
        bias: dict[str, float] = {}
        for fs, (x, y) in rows(traces, priority, window).items():
            counts.setdefault(priority.value, {})[fs] = len(y)
            if len(y) < MIN_ROWS or len(set(y.tolist())) < 2:
                continue
            model = LogisticRegression(C=c, max_iter=2000).fit(x, y)
            weights[fs] = tuple(round(float(v), 4) for v in model.coef_[0])
            bias[fs] = round(float(model.intercept_[0]), 4)
        classifiers[priority] = mlpm.FittedClassifier(weights=weights, bias=bias, source=f"fitted on {names}")
    return FitResult(classifiers, counts)


def engine_terms(fc: mlpm.FittedClassifier) -> dict[str, Any]:
    """The fitted ``w``/``b`` in the engine's hand-set terms: gain = Σw, p_rtt share, bias."""
    out: dict[str, Any] = {}
    for fs, w in fc.weights.items():
        total = math.fsum(w)
        entry: dict[str, Any] = {"weights": list(w), "bias": fc.bias.get(fs), "gain": round(total, 4)}
        if fs == "rtt+tput" and total:
            entry["p_rtt"] = round((w[0] + w[1]) / total, 4)
        out[fs] = entry
    return out


def evaluate(
    traces: Sequence[mlpm_eval.Trace], fitted: FitResult, *, reps: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Replay ``traces`` with the hand-set and the fitted classifier, per profile (mlpm_eval's report each)."""
    out: dict[str, Any] = {}
    for profile in (ApplicationProfile.BULK, ApplicationProfile.UNSPECIFIED, ApplicationProfile.INTERACTIVE):
        priority = mlpm.PROFILE_PRIORITY[profile]
        entry: dict[str, Any] = {"priority": priority.value}
        for label, fc in (("hand_set", None), ("fitted", fitted.classifiers.get(priority))):
            rep = mlpm_eval.build_report(traces, profile=profile, fitted=fc, reps=reps, seed=seed)
            entry[label] = {
                "schedulers": {
                    s: {k: v for k, v in rep["schedulers"][s].items() if k.startswith("mean_")}
                    for s in mlpm_eval.SCHEDULERS
                },
                "gains": rep["gains"],
            }
        out[profile.value] = entry
    return out


def report(data_dir: Path, *, reps: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Fit on :data:`TRAIN`, evaluate on :data:`TEST` (and TRAIN), next to the paper's Table II."""
    train = load_split(data_dir, TRAIN)
    test = load_split(data_dir, TEST)
    result = fit(train)
    return {
        "evaluation": "mlpm-fit",
        "split": {
            "train": TRAIN,
            "test": TEST,
            "rule": "by trace file; 5Gophers trace 1 / 2; UCC driving traces paired in time order, 2019-12..2020-01 "
            "for training, 2020-01-16 (second) .. 2020-02 held back",
        },
        "method": "logistic regression per priority and feature set on the engine's own features (mlpm_fit docstring)",
        "rows": result.rows,
        "fitted": {p.value: engine_terms(fc) for p, fc in result.classifiers.items()},
        "hand_set": {
            "gain": mlpm.DEFAULT_GAIN,
            "bias": mlpm.default_bias(),
            "profile_weights": {p.value: list(w) for p, w in mlpm.PRIORITY_WEIGHTS.items()},
        },
        "test": evaluate(test, result, reps=reps, seed=seed),
        "train": evaluate(train, result, reps=reps, seed=seed),
        "paper_table_ii": mlpm_eval.PAPER_TABLE_II,
        "notes": [
            "UCC pairs are paired situations (two single-path traces aligned by seconds), not simultaneous paths",
            "5Gophers traces carry no RTT: there LoRTT is the greedy pick on the last throughput",
            "the prioritised subflow is the argmax of w·f, so gain and bias only shape the weights (and thus the "
            "backup decisions on the device), not the prioritised pick; the profile weights (direction of w) do",
        ],
    }
