"""Trace-driven evaluation of MLPM against LoRTT, round robin and an oracle (``edgepath eval mlpm``).

Seed paper: Silva, Togou, Muntean, "An innovative machine learning approach to improve MPTCP
performance", HPCS 2020. Their Table II compares, for *prioritised* packets (1 in 500), the
average RTT and throughput of MLPM with the NS-3 MPTCP default scheduler and LoRTT (lowest
RTT): MLPM −7.6 % / −3.0 % RTT and +5.8 % / +2.8 % throughput. This replay asks the same
question on measured paths instead of an NS-3 topology.

Data (real paths as subflows)
-----------------------------
* 5Gophers 1.0 driving traces (Narayanan et al., WWW 2020; CC BY 4.0): per-second throughput of
  three US carriers measured **at the same time** along one drive — genuinely simultaneous
  subflows. They carry no RTT.
* UCC 5G traces (Raca et al., MMSys 2020; GPL-3.0, read from where they are, never bundled):
  per-second ``DL_bitrate`` (kbit/s) and ``PINGAVG`` (ms, one ping burst every ~14 s) of one
  phone on one operator. A pair of traces is aligned by seconds since each trace's start: the
  two subflows were **not measured simultaneously** (the report says so). Per second, the
  bitrate is the mean of the rows of that second, leaving out the rows that carry a ping result
  (the download pauses for the ping) unless they are the only rows; seconds without a row take
  the previous second's value (counted in ``filled_seconds``). The RTT of a path at a second is
  its most recent ping (held between pings).

Replay
------
At every step ``t ≥ 1`` each scheduler puts the prioritised packet on one subflow using only
what was observed up to ``t − 1``; the packet then experiences that subflow's throughput (and
RTT) at ``t``:

* ``mlpm``: :func:`edgepath.engines.mlpm.decide` on the last ``window`` samples of every path
  (throughput: the per-second series; RTT: the ping samples), horizon 1 s; its prioritised subflow.
  The classifier is the one the service serves under its setting ``mlpm.classifier``
  (:func:`classifier_for`: the fitted ``engines.mlpm.FITTED`` of the profile's priority by default,
  or the hand-set gain/bias/profile split); the report's ``method.classifier`` names it.
* ``lortt``: lowest last-observed RTT (the paper's LoRTT; what the Linux default scheduler
  prefers). Where the trace has no RTT (5Gophers) or some path has no ping yet, it is the greedy
  pick on the last observed throughput — counted per dataset in ``lortt_fallback_steps``.
* ``round_robin``: subflows in turn (the paper's NS-3 default).
* ``oracle``: the best value at ``t`` of the optimised metric (throughput, or RTT for a latency
  profile when the trace has RTT) — an upper bound no causal scheduler reaches.

Statistics
----------
Means over steps; 95 % confidence intervals by a moving-block bootstrap (blocks of
``block_len`` steps, resampled within each dataset; per-second series are autocorrelated, so an
i.i.d. interval would be too narrow). Gains of MLPM over round robin and LoRTT are ratios of
means with paired block-bootstrap intervals (the same resampled steps for both schedulers).
RTT means use only the steps where every path of the dataset has an RTT, so each scheduler is
measured on the same steps.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from edgepath.datasets import REPO_ROOT
from edgepath.engines import mlpm
from edgepath.types import ApplicationProfile

SCHEDULERS = ("mlpm", "lortt", "round_robin", "oracle")

#: The values of the service's setting ``mlpm.classifier`` (``EDGEPATH_MLPM__CLASSIFIER``), which ``eval mlpm`` follows.
CLASSIFIERS = ("fitted", "hand_set")


def classifier_for(profile: ApplicationProfile, classifier: str) -> mlpm.FittedClassifier | None:
    """The fitted classifier the service decides ``profile`` with when its setting ``mlpm.classifier`` is
    ``classifier`` (as ``adapters.mlpm`` chooses: :data:`~edgepath.engines.mlpm.FITTED` of the profile's priority),
    or None for ``"hand_set"`` (gain, bias and the profile split).

    Raises
    ------
    ValueError
        For a name outside :data:`CLASSIFIERS`.
    """
    if classifier not in CLASSIFIERS:
        raise ValueError(f"unknown MLPM classifier {classifier!r} (one of {', '.join(CLASSIFIERS)})")
    return mlpm.FITTED.get(mlpm.PROFILE_PRIORITY[profile]) if classifier == "fitted" else None


def classifier_method(fitted: mlpm.FittedClassifier | None, gain: float, bias: float | None) -> dict[str, Any]:
    """The report's description of the classifier MLPM was scored with (``method``'s classifier keys)."""
    b = mlpm.default_bias(gain) if bias is None else bias
    if fitted is None:
        return {"classifier": "hand_set", "gain": gain, "bias": b}
    return {
        "classifier": "fitted",
        "classifier_source": fitted.source,
        "classifier_terms": {
            fs: {"weights": list(w), "bias": fitted.bias.get(fs, b)} for fs, w in sorted(fitted.weights.items())
        },
        "gain": gain,
        "bias": b,
        "gain_bias_note": "the hand-set gain and bias apply only to a feature set the fitted classifier lacks",
    }


#: Silva et al. (2020), Table II and Section IV: MLPM vs the NS-3 default and LoRTT (prioritised packets).
PAPER_TABLE_II: dict[str, Any] = {
    "source": "Silva, Togou, Muntean, HPCS 2020, Table II (NS-3, 8 subflows, 1 Mbit/s, 1/500 prioritised)",
    "rtt_pct_vs_default": -7.6,
    "rtt_pct_vs_lortt": -3.0,
    "throughput_pct_vs_default": 5.8,
    "throughput_pct_vs_lortt": 2.8,
    "default_here": "round_robin (the paper's NS-3 MPTCP default)",
    "averages": {
        "default": {"rtt_ms": 1110, "rtt_ms_sd": 68, "throughput_bytes": 1266, "throughput_bytes_sd": 82},
        "lortt": {"rtt_ms": 1063, "rtt_ms_sd": 101, "throughput_bytes": 1317, "throughput_bytes_sd": 146},
        "mlpm": {"rtt_ms": 1032, "rtt_ms_sd": 111, "throughput_bytes": 1356, "throughput_bytes_sd": 153},
    },
}

GOPHERS_COLUMNS = ("Sprint_throughput_mbps", "TMobile_throughput_mbps", "Verizon_throughput_mbps")
UCC_COLUMNS = ("Timestamp", "DL_bitrate", "PINGAVG")
DEFAULT_UCC_PAIR = ("B_2019.12.16_07.22.43.csv", "B_2019.12.16_14.23.32.csv")


@dataclass
class Trace:
    """Aligned per-second paths of one dataset.

    Attributes
    ----------
    throughput_bps:
        Shape (P, T), bit/s.
    rtt_ms:
        Shape (P, T), ms, the most recent ping held (NaN before the first); None without RTT.
    ping_t_s / ping_rtt_ms:
        Per path, the seconds and values of the actual RTT samples (MLPM's RTT history).
    """

    name: str
    source: str
    paths: list[str]
    throughput_bps: np.ndarray
    rtt_ms: np.ndarray | None = None
    ping_t_s: list[np.ndarray] = field(default_factory=list)
    ping_rtt_ms: list[np.ndarray] = field(default_factory=list)
    simultaneous: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return int(self.throughput_bps.shape[1])


def load_gophers_driving(path: Path) -> Trace:
    """A 5Gophers ``driving-trace-*.csv``: three carriers measured simultaneously, per second.

    Raises
    ------
    ValueError
        When the file lacks the carrier columns or has fewer than 3 rows.
    """
    df = pd.read_csv(path)
    missing = [c for c in GOPHERS_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: not a 5Gophers driving trace (missing {', '.join(missing)})")
    if "seq_num" in df.columns:
        df = df.sort_values("seq_num", kind="stable")
    values = df[list(GOPHERS_COLUMNS)].apply(pd.to_numeric, errors="coerce").ffill().fillna(0.0)
    if len(values) < 3:
        raise ValueError(f"{path}: fewer than 3 rows")
    return Trace(
        name=f"5gophers:{path.name}",
        source="5Gophers 1.0 (Narayanan et al., WWW 2020), CC BY 4.0",
        paths=[c.split("_")[0] for c in GOPHERS_COLUMNS],
        throughput_bps=values.to_numpy(dtype=float).T * 1e6,
        simultaneous=True,
        notes=["three carriers measured at the same time (simultaneous subflows); no RTT in the trace"],
    )


@dataclass
class _UccSeries:
    name: str
    throughput_bps: np.ndarray
    ping_t_s: np.ndarray
    ping_rtt_ms: np.ndarray
    filled_seconds: int


def load_ucc(path: Path) -> _UccSeries:
    """One UCC 5G trace as a per-second DL bitrate series (bit/s) and its ping samples.

    Raises
    ------
    ValueError
        When the file lacks ``Timestamp``, ``DL_bitrate`` or ``PINGAVG``, or has no valid row.
    """
    df = pd.read_csv(path, dtype=str)
    missing = [c for c in UCC_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: not a UCC 5G trace (missing {', '.join(missing)})")
    ts = pd.to_datetime(df["Timestamp"], format="%Y.%m.%d_%H.%M.%S", errors="coerce")
    dl = pd.to_numeric(df["DL_bitrate"], errors="coerce")
    ping = pd.to_numeric(df["PINGAVG"].replace("-", np.nan), errors="coerce")
    ok = ts.notna() & dl.notna()
    if not ok.any():
        raise ValueError(f"{path}: no row with a valid Timestamp and DL_bitrate")
    sec = ((ts - ts[ok].min()).dt.total_seconds()).round()
    frame = pd.DataFrame({"sec": sec, "dl_kbps": dl, "ping": ping})[ok]
    frame = frame[frame["sec"] >= 0]
    plain = frame[frame["ping"].isna()].groupby("sec")["dl_kbps"].mean()
    any_row = frame.groupby("sec")["dl_kbps"].mean()
    per_sec = plain.combine_first(any_row)
    grid = np.arange(0, int(per_sec.index.max()) + 1)
    filled = int(len(grid) - per_sec.index.isin(grid).sum())
    series = per_sec.reindex(grid).ffill().fillna(0.0)
    pings = frame[frame["ping"].notna() & (frame["ping"] >= 0)]
    return _UccSeries(
        name=path.name,
        throughput_bps=series.to_numpy(dtype=float) * 1e3,
        ping_t_s=pings["sec"].to_numpy(dtype=float),
        ping_rtt_ms=pings["ping"].to_numpy(dtype=float),
        filled_seconds=filled,
    )


def ucc_pair(path_a: Path, path_b: Path) -> Trace:
    """Two UCC traces as two subflows, aligned by seconds since start (not simultaneous)."""
    a, b = load_ucc(path_a), load_ucc(path_b)
    steps = min(len(a.throughput_bps), len(b.throughput_bps))
    if steps < 3:
        raise ValueError(f"{path_a.name} + {path_b.name}: fewer than 3 aligned seconds")
    series = [a, b]
    rtt = np.full((2, steps), np.nan)
    for p, s in enumerate(series):
        keep = s.ping_t_s < steps
        t_idx = s.ping_t_s[keep].astype(int)
        for t, v in zip(t_idx, s.ping_rtt_ms[keep], strict=True):
            rtt[p, t] = v  # last ping of a second wins
        rtt[p] = pd.Series(rtt[p]).ffill().to_numpy()
    return Trace(
        name=f"ucc:{a.name}+{b.name}",
        source="UCC 5G dataset (Raca et al., MMSys 2020), GPL-3.0, read in place",
        paths=[f"A:{a.name}", f"B:{b.name}"],
        throughput_bps=np.vstack([a.throughput_bps[:steps], b.throughput_bps[:steps]]),
        rtt_ms=rtt,
        ping_t_s=[s.ping_t_s[s.ping_t_s < steps] for s in series],
        ping_rtt_ms=[s.ping_rtt_ms[s.ping_t_s < steps] for s in series],
        simultaneous=False,
        notes=[
            "paired situation: two single-path UCC traces aligned by seconds since their start; the subflows "
            "were NOT measured simultaneously",
            f"per-second gaps filled with the previous second: {a.filled_seconds} s in A, {b.filled_seconds} s in B",
            "RTT of a step = the path's most recent ping (about one every 14 s), held between pings",
        ],
    )


@dataclass
class Replay:
    """Choices and experienced values per scheduler for one trace (steps 1..T−1)."""

    trace: Trace
    choices: dict[str, np.ndarray]
    throughput_mbps: dict[str, np.ndarray]
    rtt_ms: dict[str, np.ndarray]
    rtt_valid: np.ndarray
    lortt_fallback_steps: int
    optimised_metric: str


def histories_at(trace: Trace, t: int, window: int) -> list[mlpm.SubflowHistory]:
    """What a causal scheduler knows at step ``t``: the last ``window`` seconds of throughput and pings before ``t``.

    One history per path, named by the path's index.
    """
    lo = max(0, t - window)
    histories = []
    for p in range(trace.throughput_bps.shape[0]):
        tp = [mlpm.Sample(float(i), float(trace.throughput_bps[p, i])) for i in range(lo, t)]
        rt: list[mlpm.Sample] = []
        if trace.rtt_ms is not None:
            pt, pv = trace.ping_t_s[p], trace.ping_rtt_ms[p]
            seen = np.nonzero(pt <= t - 1)[0][-window:]
            rt = [mlpm.Sample(float(pt[i]), float(pv[i])) for i in seen]
        histories.append(mlpm.SubflowHistory(interface=str(p), rtt_ms=rt, throughput_bps=tp))
    return histories


def replay(
    trace: Trace,
    *,
    profile: ApplicationProfile = ApplicationProfile.UNSPECIFIED,
    window: int = mlpm.DEFAULT_WINDOW,
    horizon_s: float = 1.0,
    gain: float = mlpm.DEFAULT_GAIN,
    bias: float | None = None,
    fitted: mlpm.FittedClassifier | None = None,
) -> Replay:
    """Run the four schedulers over ``trace`` (see the module docstring)."""
    n_paths, n_steps = trace.throughput_bps.shape
    priority = mlpm.PROFILE_PRIORITY[profile]
    has_rtt = trace.rtt_ms is not None
    optimise_rtt = has_rtt and priority is mlpm.Priority.LATENCY
    choices = {s: np.zeros(n_steps - 1, dtype=int) for s in SCHEDULERS}
    fallback = 0
    tput = trace.throughput_bps
    for k, t in enumerate(range(1, n_steps)):
        histories = histories_at(trace, t, window)
        d = mlpm.decide(
            histories, priority=priority, window=window, horizon_s=horizon_s, gain=gain, bias=bias, fitted=fitted
        )
        choices["mlpm"][k] = int(d.prioritised_subflow)
        last_rtt = trace.rtt_ms[:, t - 1] if trace.rtt_ms is not None else None
        if last_rtt is not None and not np.isnan(last_rtt).any():
            choices["lortt"][k] = int(np.argmin(last_rtt))
        else:
            fallback += 1
            choices["lortt"][k] = int(np.argmax(tput[:, t - 1]))
        choices["round_robin"][k] = k % n_paths
        now_rtt = trace.rtt_ms[:, t] if trace.rtt_ms is not None else None
        if optimise_rtt and now_rtt is not None and not np.isnan(now_rtt).any():
            choices["oracle"][k] = int(np.argmin(now_rtt))
        else:
            choices["oracle"][k] = int(np.argmax(tput[:, t]))
    steps = np.arange(1, n_steps)
    thr = {s: tput[c, steps] / 1e6 for s, c in choices.items()}
    if trace.rtt_ms is not None:
        rtt = {s: trace.rtt_ms[c, steps] for s, c in choices.items()}
        valid = ~np.isnan(trace.rtt_ms[:, steps]).any(axis=0)
    else:
        rtt = {s: np.full(n_steps - 1, np.nan) for s in SCHEDULERS}
        valid = np.zeros(n_steps - 1, dtype=bool)
    return Replay(
        trace=trace,
        choices=choices,
        throughput_mbps=thr,
        rtt_ms=rtt,
        rtt_valid=valid,
        lortt_fallback_steps=fallback,
        optimised_metric="rtt_ms" if optimise_rtt else "throughput_mbps",
    )


def _block_indices(n: int, block_len: int, rng: np.random.Generator, reps: int) -> np.ndarray:
    """Moving-block bootstrap resamples of ``range(n)``: shape (reps, n)."""
    if n == 0:
        return np.zeros((reps, 0), dtype=int)
    length = max(1, min(block_len, n))
    n_blocks = math.ceil(n / length)
    starts = rng.integers(0, n - length + 1, size=(reps, n_blocks))
    idx = (starts[:, :, None] + np.arange(length)[None, None, :]).reshape(reps, -1)
    return idx[:, :n]


def _pooled(values: Sequence[np.ndarray], resamples: Sequence[np.ndarray]) -> tuple[float, np.ndarray]:
    """Pooled mean over datasets and its bootstrap distribution (same resamples for every caller)."""
    total = sum(len(v) for v in values)
    if total == 0:
        return math.nan, np.full(resamples[0].shape[0] if resamples else 1, np.nan)
    mean = float(np.concatenate(values).mean())
    boot = sum(v[r].sum(axis=1) for v, r in zip(values, resamples, strict=True) if len(v)) / total
    return mean, np.asarray(boot)


def _ci(boot: np.ndarray) -> list[float]:
    finite = boot[np.isfinite(boot)]
    if finite.size == 0:
        return [math.nan, math.nan]
    return [float(np.percentile(finite, 2.5)), float(np.percentile(finite, 97.5))]


def _r(x: float, nd: int = 3) -> float | None:
    return None if not math.isfinite(x) else round(x, nd)


def summarize(replays: Sequence[Replay], *, block_len: int = 10, reps: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Means, 95 % block-bootstrap CIs and MLPM gains, pooled over ``replays``."""
    rng = np.random.default_rng(seed)
    idx_all = [_block_indices(len(r.choices["mlpm"]), block_len, rng, reps) for r in replays]
    rtt_steps = [np.nonzero(r.rtt_valid)[0] for r in replays]
    idx_rtt = [_block_indices(len(s), block_len, rng, reps) for s in rtt_steps]
    out: dict[str, Any] = {}
    boots: dict[tuple[str, str], np.ndarray] = {}
    for s in SCHEDULERS:
        thr_mean, thr_boot = _pooled([r.throughput_mbps[s] for r in replays], idx_all)
        entry: dict[str, Any] = {
            "mean_throughput_mbps": _r(thr_mean),
            "mean_throughput_mbps_ci95": [_r(v) for v in _ci(thr_boot)],
            "steps": int(sum(len(r.choices[s]) for r in replays)),
        }
        boots[(s, "thr")] = thr_boot
        if any(len(x) for x in rtt_steps):
            vals = [r.rtt_ms[s][st] for r, st in zip(replays, rtt_steps, strict=True)]
            rtt_mean, rtt_boot = _pooled(vals, idx_rtt)
            entry["mean_rtt_ms"] = _r(rtt_mean)
            entry["mean_rtt_ms_ci95"] = [_r(v) for v in _ci(rtt_boot)]
            entry["rtt_steps"] = int(sum(len(x) for x in rtt_steps))
            boots[(s, "rtt")] = rtt_boot
            boots[(s, "rtt_mean")] = np.array(rtt_mean)
        boots[(s, "thr_mean")] = np.array(thr_mean)
        out[s] = entry
    gains: dict[str, Any] = {}
    for base in ("round_robin", "lortt"):
        g: dict[str, Any] = {}
        m, b = float(boots[("mlpm", "thr_mean")]), float(boots[(base, "thr_mean")])
        g["throughput_pct"] = _r(100.0 * (m / b - 1.0), 2) if b > 0 else None
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = 100.0 * (boots[("mlpm", "thr")] / boots[(base, "thr")] - 1.0)
        g["throughput_pct_ci95"] = [_r(v, 2) for v in _ci(ratio)]
        if ("mlpm", "rtt") in boots:
            m, b = float(boots[("mlpm", "rtt_mean")]), float(boots[(base, "rtt_mean")])
            g["rtt_pct"] = _r(100.0 * (m / b - 1.0), 2) if b > 0 else None
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = 100.0 * (boots[("mlpm", "rtt")] / boots[(base, "rtt")] - 1.0)
            g["rtt_pct_ci95"] = [_r(v, 2) for v in _ci(ratio)]
        gains[f"mlpm_vs_{base}"] = g
    return {"schedulers": out, "gains": gains}


def dataset_entry(r: Replay, *, block_len: int, reps: int, seed: int) -> dict[str, Any]:
    """Per-dataset section of the report."""
    t = r.trace
    s = summarize([r], block_len=block_len, reps=reps, seed=seed)
    for name in SCHEDULERS:
        counts = np.bincount(r.choices[name], minlength=len(t.paths))
        s["schedulers"][name]["choices"] = {p: int(c) for p, c in zip(t.paths, counts, strict=True)}
    notes = list(t.notes)
    if t.rtt_ms is None:
        notes.append("lortt: the trace has no RTT, so LoRTT is the greedy pick on the last observed throughput")
    elif r.lortt_fallback_steps:
        notes.append(
            f"lortt: {r.lortt_fallback_steps} steps before every path had a ping used the greedy pick on the last "
            "observed throughput"
        )
    return {
        "name": t.name,
        "source": t.source,
        "paths": t.paths,
        "steps": t.steps - 1,
        "simultaneous": t.simultaneous,
        "has_rtt": t.rtt_ms is not None,
        "lortt_fallback_steps": r.lortt_fallback_steps,
        "optimised_metric_of_oracle": r.optimised_metric,
        "notes": notes,
        **s,
    }


def build_report(
    traces: Sequence[Trace],
    *,
    profile: ApplicationProfile = ApplicationProfile.UNSPECIFIED,
    window: int = mlpm.DEFAULT_WINDOW,
    horizon_s: float = 1.0,
    gain: float = mlpm.DEFAULT_GAIN,
    bias: float | None = None,
    block_len: int = 10,
    reps: int = 2000,
    seed: int = 0,
    fitted: mlpm.FittedClassifier | None = None,
) -> dict[str, Any]:
    """Replay every trace and assemble the JSON report (pooled ``schedulers`` + per-dataset sections).

    Raises
    ------
    ValueError
        When ``traces`` is empty.
    """
    if not traces:
        raise ValueError("no traces to evaluate")
    replays = [
        replay(t, profile=profile, window=window, horizon_s=horizon_s, gain=gain, bias=bias, fitted=fitted)
        for t in traces
    ]
    pooled = summarize(replays, block_len=block_len, reps=reps, seed=seed)
    notes = [
        "schedulers.* pools every step of every dataset; per-dataset figures are under datasets[]",
        "mean_rtt_ms pools only the datasets with RTT (UCC pairs) and only steps where every path has a ping",
    ]
    if any(not t.simultaneous for t in traces):
        notes.append("UCC pairs are paired situations: two single-path traces aligned by seconds, not simultaneous")
    if any(t.rtt_ms is None for t in traces):
        notes.append("lortt falls back to the greedy pick on the last throughput on traces without RTT (5Gophers)")
    return {
        "evaluation": "mlpm",
        "question": "Which subflow should carry a prioritised packet? Value experienced at the next step.",
        "method": {
            "profile": profile.value,
            "mlpm_priority": mlpm.PROFILE_PRIORITY[profile].value,
            "window_samples": window,
            "horizon_s": horizon_s,
            **classifier_method(fitted, gain, bias),
            "ci": f"95% moving-block bootstrap, block {block_len} steps, {reps} resamples, seed {seed}",
            "gains": "100·(mean_mlpm / mean_baseline − 1), paired block bootstrap CI",
        },
        "schedulers": pooled["schedulers"],
        "gains": pooled["gains"],
        "paper_table_ii": PAPER_TABLE_II,
        "datasets": [dataset_entry(r, block_len=block_len, reps=reps, seed=seed) for r in replays],
        "notes": notes,
    }


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")


def plot_report(report: dict[str, Any], path: Path) -> None:
    """Bar charts (mean ± 95 % CI) of throughput and RTT per scheduler, per dataset and pooled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [("pooled", report["schedulers"])] + [(d["name"], d["schedulers"]) for d in report["datasets"]]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / len(SCHEDULERS)
    for ax, key, label in (
        (axes[0], "mean_throughput_mbps", "throughput of the chosen subflow, Mbit/s"),
        (axes[1], "mean_rtt_ms", "RTT of the chosen subflow, ms"),
    ):
        shown = [(n, g) for n, g in groups if g["mlpm"].get(key) is not None]
        for j, sched in enumerate(SCHEDULERS):
            means = [g[sched][key] for _, g in shown]
            cis = [g[sched][f"{key}_ci95"] for _, g in shown]
            err = np.array([[m - c[0], c[1] - m] for m, c in zip(means, cis, strict=True)]).T if means else None
            ax.bar(np.arange(len(shown)) + j * width, means, width, yerr=err, capsize=2, label=sched)
        ax.set_xticks(np.arange(len(shown)) + 0.4 - width / 2)
        ax.set_xticklabels([n.split(":", 1)[-1][:28] for n, _ in shown], rotation=20, ha="right", fontsize=7)
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    fig.suptitle("MLPM vs LoRTT / round robin / oracle on measured paths (95% block-bootstrap CIs)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def format_table(report: dict[str, Any]) -> str:
    """Plain-text table of the pooled results and the gains next to the paper's, under the classifier scored."""
    m = report["method"]
    named = m.get("classifier", "hand_set")
    if named == "fitted":
        named += f" ({m.get('classifier_source', '')})" if m.get("classifier_source") else ""
    else:
        named += f" (gain {m.get('gain')}, bias {m.get('bias')})"
    lines = [
        f"MLPM classifier: {named}; profile {m.get('profile')} (priority {m.get('mlpm_priority')})",
        f"{'scheduler':<12} {'throughput Mbit/s (95% CI)':<32} {'RTT ms (95% CI)':<28}",
    ]
    for s in SCHEDULERS:
        e = report["schedulers"][s]
        thr = f"{e['mean_throughput_mbps']} [{e['mean_throughput_mbps_ci95'][0]}, {e['mean_throughput_mbps_ci95'][1]}]"
        rtt = "n/a"
        if e.get("mean_rtt_ms") is not None:
            rtt = f"{e['mean_rtt_ms']} [{e['mean_rtt_ms_ci95'][0]}, {e['mean_rtt_ms_ci95'][1]}]"
        lines.append(f"{s:<12} {thr:<32} {rtt:<28}")
    p = report["paper_table_ii"]
    for base, paper_key in (("round_robin", "default"), ("lortt", "lortt")):
        g = report["gains"][f"mlpm_vs_{base}"]
        lines.append(
            f"mlpm vs {base}: throughput {g['throughput_pct']}% {g['throughput_pct_ci95']} "
            f"(paper {p[f'throughput_pct_vs_{paper_key}']:+}%), RTT {g.get('rtt_pct', 'n/a')}% "
            f"{g.get('rtt_pct_ci95', '')} (paper {p[f'rtt_pct_vs_{paper_key}']:+}%)"
        )
    return "\n".join(lines)


def shared_data_dir() -> Path | None:
    """``../shared/data`` beside the repository (CI, developers), else None."""
    for candidate in (REPO_ROOT.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"):
        if (candidate / "5gophers").is_dir() or (candidate / "ucc-5g").is_dir():
            return candidate
    return None


def default_inputs() -> tuple[list[Path], list[tuple[Path, Path]]]:
    """5Gophers driving traces 1 and 2 and one UCC driving pair from ../shared/data, if present."""
    base = shared_data_dir()
    if base is None:
        return [], []
    gophers = [base / "5gophers" / f"driving-trace-{i}.csv" for i in (1, 2)]
    ucc = [base / "ucc-5g" / "download" / "driving" / f for f in DEFAULT_UCC_PAIR]
    return [g for g in gophers if g.is_file()], ([(ucc[0], ucc[1])] if all(u.is_file() for u in ucc) else [])


def parse_input_args(args: Sequence[str]) -> tuple[list[Path], list[tuple[Path, Path]]]:
    """``--gophers-driving FILE ...`` (repeatable) and ``--ucc FILE FILE`` (repeatable).

    Raises
    ------
    SystemExit
        On unknown arguments or a ``--ucc`` without two files (argparse's usage error).
    """
    parser = argparse.ArgumentParser(prog="edgepath eval mlpm", add_help=False)
    parser.add_argument("--gophers-driving", nargs="+", action="extend", type=Path, default=[], metavar="FILE")
    parser.add_argument("--ucc", nargs=2, action="append", type=Path, default=[], metavar=("FILE", "FILE"))
    ns = parser.parse_args(list(args))
    return list(ns.gophers_driving), [(a, b) for a, b in ns.ucc]


def load_traces(gophers: Sequence[Path], ucc: Sequence[tuple[Path, Path]]) -> list[Trace]:
    """Load every input; raises ValueError naming the file when one is missing or malformed."""
    traces: list[Trace] = []
    for g in gophers:
        if not g.is_file():
            raise ValueError(f"--gophers-driving: no such file {g}")
        traces.append(load_gophers_driving(g))
    for a, b in ucc:
        for f in (a, b):
            if not f.is_file():
                raise ValueError(f"--ucc: no such file {f}")
        traces.append(ucc_pair(a, b))
    return traces
