"""Evaluation of SSMP server selection against the default server selection (DSS).

``edgepath eval ssmp [--paper] [--gophers DIR] --report R.json --plot P.png``

Two modes, both driving the real engine (:class:`edgepath.engines.ssmp.SsmpSelector`)
through a sequence of downloads, with the per-server state (Q, last update) carried
from download to download exactly as the service keeps it in its state store:

``--paper``
    The scenarios of Section V of Yang et al., "SSMP: Server Selection for
    Multipath TCP in CDN Environments", rebuilt in a transfer-time model
    (below): mice flows (Fig. 5 servers), elephant flows (Fig. 6 servers),
    the dynamic case where server 1 degrades (Fig. 7) and the case where one
    link of server 1 is measured with 1 % loss by mistake (Fig. 8), with
    α ∈ {0.2, 0.5, 0.8}. The paper's testbed returns the "single-port optimal
    server" by *random* selection among its three servers, each reachable over
    WiFi and cellular; DSS is therefore a uniformly random server per download,
    with the initial subflow on the default interface (WiFi). SSMP sees all
    three servers as candidates, as in the paper.
``--gophers DIR``
    Measured data from 5Gophers 1.0 (Narayanan et al., WWW 2020; CC BY 4.0):
    ``rtt.csv`` (ping RTTs) and ``throughput.csv`` (per-second throughput of
    single-connection TCP runs), for three carriers (paths) to two server
    locations (candidates). A device is a pair of carriers; each download
    draws, per path, a fresh RTT sample and the mean throughput of a random run
    as the path's rate, while the engine sees other samples (3 pings, and the
    rate of another random run as the B "from past transfers"). 5Gophers has no
    loss measurements, so the engine is given p = 0 (bandwidth-limited: Q = Σ β·B).
    The two carriers were measured separately, not simultaneously from one
    device: the pairing is emulated. DSS is the default (first) carrier's
    answer, drawn uniformly among the locations as in the paper's setup.
    Downloads are paired (DSS and SSMP see the same draw); 95 % confidence
    intervals: Student t for the mean times, paired bootstrap for the reduction.

Transfer-time model (:func:`transfer_time_s`)
---------------------------------------------
A fluid, round-based model of one MPTCP download over disjoint paths:

* The initial subflow opens with a three-way handshake; the request rides on
  the final ACK, so the first byte arrives two RTTs after the SYN.
* Every further subflow joins (MP_JOIN, RFC 8684 §3.2) once the initial
  subflow is established (one initial RTT), and its first byte arrives two of
  its own RTTs later.
* Each subflow starts with an initial window of 10 segments (RFC 6928) and
  doubles it every round trip — slow start, counted in rounds as in Cardwell,
  Savage, Anderson, "Modeling TCP latency" (INFOCOM 2000) — until a round's
  window reaches the path's bandwidth-delay product; from then on it delivers
  continuously at its rate.
* The rate of path i is ``min(B_i, T_i)``: the bottleneck bandwidth, or the
  Mathis et al. (CCR 1997) loss-limited throughput ``T_i = MSS·√(3/2)/(RTT_i·√p_i)``
  when that is lower (Eq. 1 of SSMP); p = 0 means bandwidth-limited.
* Within a round, a window's bytes arrive at the path's rate; the download
  ends when the bytes delivered by all subflows reach the file size.

Not modelled: DNS and probing time (the same for both; SSMP's parallel DNS
takes one resolution time per the paper), losses during slow start, receive
windows, coupled congestion control (the paths are disjoint), the MPTCP
scheduler's reordering, application and server overheads. Mice times are
therefore pure network round trips and reductions can differ from the paper's
measured ones, which include those overheads.

Sizes use binary units (1 KB = 1024 bytes, 1 MB = 2²⁰ bytes), so the paper's
1000 KB file stays below the 1 MiB mice threshold, as the paper treats it.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from edgepath.datasets import REPO_ROOT
from edgepath.engines.ssmp import (
    MATHIS_C,
    MSS_BYTES,
    Candidate,
    FlowClass,
    PathMeasurement,
    ServerState,
    SsmpConfig,
    SsmpSelector,
    server_q_bps,
)

KB = 1024
MB = 1024 * 1024
MBPS = 1e6
IW_SEGMENTS = 10
ALPHAS = (0.2, 0.5, 0.8)
MICE_SIZES = (1 * KB, 10 * KB, 100 * KB, 1000 * KB)
ELEPHANT_SIZES = (100 * MB, 300 * MB, 500 * MB, 1000 * MB)
DYNAMIC_SIZES = (300 * MB, 500 * MB)

#: Download-time reductions the paper reports (§V-B-1), percent, by size in bytes.
PAPER_MICE_REDUCTION_PCT = {1 * KB: 38.46, 10 * KB: 38.46, 100 * KB: 34.28, 1000 * KB: 33.11}
PAPER_ELEPHANT_REDUCTION_PCT = {100 * MB: 65.0, 300 * MB: 65.0, 500 * MB: 70.0, 1000 * MB: 66.0}

GOPHERS_LICENSE = "5Gophers 1.0, Narayanan et al., WWW 2020; CC BY 4.0"


# ---------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class PathSpec:
    """True conditions of one path to a server: RTT (ms), bottleneck bandwidth (bit/s), loss (fraction)."""

    interface: str
    rtt_ms: float
    bandwidth_bps: float
    loss: float = 0.0


@dataclass(frozen=True)
class ServerSpec:
    """A server and the device's paths to it (interface order = device order; index 0 = default interface)."""

    address: str
    paths: tuple[PathSpec, ...]


def path_rate_bps(path: PathSpec, mss_bytes: int = MSS_BYTES) -> float:
    """``min(B, T)``: bandwidth-limited, or loss-limited (Mathis; SSMP Eq. 1) when lower; bit/s."""
    if path.loss <= 0.0:
        return path.bandwidth_bps
    mathis = mss_bytes * 8.0 * MATHIS_C / ((path.rtt_ms / 1000.0) * math.sqrt(path.loss))
    return min(path.bandwidth_bps, mathis)


def _subflow_segments(
    first_byte_s: float, rtt_s: float, rate_bytes_s: float, mss_bytes: int, iw_segments: int
) -> list[tuple[float, float, float]]:
    """Delivery intervals ``(start_s, end_s, bytes_per_s)`` of one subflow (last one open-ended)."""
    if rate_bytes_s <= 0.0:
        return []
    out: list[tuple[float, float, float]] = []
    window = float(iw_segments * mss_bytes)
    bdp = rate_bytes_s * rtt_s
    start = first_byte_s
    while window < bdp:
        out.append((start, start + window / rate_bytes_s, rate_bytes_s))
        window *= 2.0
        start += rtt_s
    out.append((start, math.inf, rate_bytes_s))
    return out


def transfer_time_s(
    size_bytes: int,
    paths: Sequence[PathSpec],
    initial_index: int = 0,
    *,
    mss_bytes: int = MSS_BYTES,
    iw_segments: int = IW_SEGMENTS,
) -> float:
    """Download time of ``size_bytes`` over ``paths`` with the initial subflow on ``paths[initial_index]``, s.

    See the module docstring for the model and its sources.

    Raises
    ------
    ValueError
        No path with a positive rate, or ``initial_index`` out of range.
    """
    if not 0 <= initial_index < len(paths):
        raise ValueError("initial_index out of range")
    if size_bytes <= 0:
        return 0.0
    rtt0 = paths[initial_index].rtt_ms / 1000.0
    segments: list[tuple[float, float, float]] = []
    for k, path in enumerate(paths):
        rtt = path.rtt_ms / 1000.0
        first = 2.0 * rtt0 if k == initial_index else rtt0 + 2.0 * rtt
        segments += _subflow_segments(first, rtt, path_rate_bps(path, mss_bytes) / 8.0, mss_bytes, iw_segments)
    if not segments:
        raise ValueError("no path with a positive rate")
    events = sorted({t for s, e, _ in segments for t in (s, e) if math.isfinite(t)})
    delivered = 0.0
    for t0, t1 in itertools.pairwise([*events, math.inf]):
        rate = sum(r for s, e, r in segments if s <= t0 and e > t0)
        if rate <= 0.0:
            continue
        if delivered + rate * (t1 - t0) >= size_bytes:
            return t0 + (size_bytes - delivered) / rate
        delivered += rate * (t1 - t0)
    raise AssertionError("unreachable: the last segment is open-ended")


def measured_q_bps(server: ServerSpec, mss_bytes: int = MSS_BYTES) -> float:
    """Eq. 2 on a server's true conditions (what a completed transfer measures)."""
    return server_q_bps(
        [p.rtt_ms for p in server.paths],
        [p.loss for p in server.paths],
        [p.bandwidth_bps for p in server.paths],
        mss_bytes,
    )


def as_candidate(
    server: ServerSpec,
    dns_interface: str,
    *,
    rtt_samples: dict[str, Sequence[float]] | None = None,
    loss: dict[str, float] | None = None,
    bandwidth: dict[str, float] | None = None,
) -> Candidate:
    """What the device tells the engine about ``server``: per path RTT samples, loss and B (defaults: the truth)."""
    return Candidate(
        address=server.address,
        dns_interface=dns_interface,
        paths=tuple(
            PathMeasurement(
                interface=p.interface,
                rtt_ms_samples=tuple(rtt_samples[p.interface]) if rtt_samples else (p.rtt_ms,),
                loss=loss[p.interface] if loss else p.loss,
                bandwidth_bps=bandwidth[p.interface] if bandwidth else p.bandwidth_bps,
            )
            for p in server.paths
        ),
    )


def _interface_index(server: ServerSpec, interface: str) -> int:
    for i, p in enumerate(server.paths):
        if p.interface == interface:
            return i
    return 0


# ---------------------------------------------------------------------------------------------- statistics


def _t_ci(values: np.ndarray) -> list[float]:
    from scipy import stats

    n = len(values)
    mean = float(values.mean())
    if n < 2 or float(values.std()) == 0.0:
        return [mean, mean]
    half = float(stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / math.sqrt(n))
    return [mean - half, mean + half]


def _reduction_ci(dss: np.ndarray, ssmp: np.ndarray, seed: int) -> list[float]:
    from scipy import stats

    def stat(d: np.ndarray, s: np.ndarray, axis: int = -1) -> np.ndarray:
        return 100.0 * (1.0 - s.mean(axis=axis) / d.mean(axis=axis))

    if len(dss) < 2 or np.allclose(dss, ssmp):
        value = float(stat(dss, ssmp))
        return [value, value]
    res = stats.bootstrap(
        (dss, ssmp),
        stat,
        paired=True,
        vectorized=True,
        n_resamples=2000,
        confidence_level=0.95,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return [float(res.confidence_interval.low), float(res.confidence_interval.high)]


def size_label(size_bytes: int) -> str:
    return f"{size_bytes // MB}MB" if size_bytes >= MB else f"{size_bytes // KB}KB"


def summarize(
    dss: Sequence[float],
    ssmp: Sequence[float],
    paper_pct: float | None,
    *,
    seed: int,
    with_ci: bool,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Per scenario and size: ``dss_seconds``, ``ssmp_seconds``, ``reduction_pct``, ``paper_reduction_pct``."""
    d, s = np.asarray(dss, dtype=float), np.asarray(ssmp, dtype=float)
    out: dict[str, Any] = {
        "dss_seconds": float(d.mean()),
        "ssmp_seconds": float(s.mean()),
        "reduction_pct": float(100.0 * (1.0 - s.mean() / d.mean())),
        "paper_reduction_pct": paper_pct,
        "downloads": len(d),
    }
    if with_ci:
        out["dss_seconds_ci95"] = _t_ci(d)
        out["ssmp_seconds_ci95"] = _t_ci(s)
        out["reduction_pct_ci95"] = _reduction_ci(d, s, seed)
    if extra:
        out.update(extra)
    return out


# ---------------------------------------------------------------------------------------------- paper mode


def _paths(*specs: tuple[float, float, float]) -> tuple[PathSpec, ...]:
    names = ("wlan0", "wwan0")
    return tuple(PathSpec(names[i], rtt, bw * MBPS, loss) for i, (bw, rtt, loss) in enumerate(specs))


def paper_mice_servers() -> list[ServerSpec]:
    """§V-A / Fig. 5: (Mbit/s, ms) on WiFi, cellular; aggregate 60/70/60 Mbit/s, mean RTT 10/10/30 ms."""
    return [
        ServerSpec("server1", _paths((40, 5, 0.0), (20, 15, 0.0))),
        ServerSpec("server2", _paths((40, 10, 0.0), (30, 10, 0.0))),
        ServerSpec("server3", _paths((40, 30, 0.0), (20, 30, 0.0))),
    ]


def paper_elephant_servers() -> list[ServerSpec]:
    """§V-B / Fig. 6: RTT 10 / 20 ms on every server; 80/30, 40/20, 40/20 Mbit/s; server 3 loses 1 % / 2 %."""
    return [
        ServerSpec("server1", _paths((80, 10, 0.0), (30, 20, 0.0))),
        ServerSpec("server2", _paths((40, 10, 0.0), (20, 20, 0.0))),
        ServerSpec("server3", _paths((40, 10, 0.01), (20, 20, 0.02))),
    ]


def paper_degraded_server1() -> ServerSpec:
    """§V-B-2 / Fig. 7: server 1 overloaded — RTT +10 ms on each path, bandwidth 20 / 30 Mbit/s, loss unchanged."""
    return ServerSpec("server1", _paths((20, 20, 0.0), (30, 30, 0.0)))


@dataclass
class _Device:
    """What the device knows about each server's paths (B and p from past transfers), and the stored states."""

    loss: dict[str, dict[str, float]]
    bandwidth: dict[str, dict[str, float]]
    states: dict[str, ServerState]

    @classmethod
    def warm(cls, servers: Sequence[ServerSpec], now_s: float, mss_bytes: int) -> _Device:
        """After "the previous test": histories and Q of every server measured in stable conditions."""
        return cls(
            loss={s.address: {p.interface: p.loss for p in s.paths} for s in servers},
            bandwidth={s.address: {p.interface: p.bandwidth_bps for p in s.paths} for s in servers},
            states={s.address: ServerState(measured_q_bps(s, mss_bytes), now_s) for s in servers},
        )

    def learn(self, server: ServerSpec, selector: SsmpSelector, now_s: float) -> None:
        """A completed transfer (or a probe) measured ``server``'s true conditions: update B, p and Q (Eq. 3)."""
        self.loss[server.address] = {p.interface: p.loss for p in server.paths}
        self.bandwidth[server.address] = {p.interface: p.bandwidth_bps for p in server.paths}
        q_new = measured_q_bps(server, selector.config.mss_bytes)
        self.states[server.address] = selector.update(q_new, self.states.get(server.address), now_s)


def run_paper_sequence(
    baseline: Sequence[ServerSpec],
    current: Sequence[ServerSpec],
    size_bytes: int,
    *,
    alpha: float,
    downloads: int,
    rng: np.random.Generator,
    config: SsmpConfig,
    loss_errors: dict[int, tuple[str, str, float]] | None = None,
    gap_s: float = 1.0,
) -> tuple[list[float], list[float], list[str]]:
    """One sequence of downloads: SSMP (stateful) and DSS (uniformly random server) on the same conditions.

    ``baseline`` is what the device learnt before the run (the paper's "previous test");
    ``current`` the true conditions during it. ``loss_errors[k] = (server, interface, p)``
    makes download k's request carry a wrong loss measurement.

    Returns DSS times, SSMP times (s) and SSMP's chosen servers.
    """
    selector = SsmpSelector(replace(config, alpha=alpha), np.random.default_rng(rng.integers(2**32)))
    now = 0.0
    device = _Device.warm(baseline, now, config.mss_bytes)
    truth = {s.address: s for s in current}
    dss_t: list[float] = []
    ssmp_t: list[float] = []
    chosen: list[str] = []
    for k in range(downloads):
        dss_server = current[int(rng.integers(len(current)))]
        dss_t.append(transfer_time_s(size_bytes, dss_server.paths, 0, mss_bytes=config.mss_bytes))
        loss = {a: dict(v) for a, v in device.loss.items()}
        if loss_errors and k in loss_errors:
            addr, iface, p = loss_errors[k]
            loss[addr][iface] = p
        candidates = [
            as_candidate(s, "wlan0", loss=loss[s.address], bandwidth=device.bandwidth[s.address]) for s in current
        ]
        sel = selector.decide(size_bytes, candidates, device.states, now, default_index=0)
        server = truth[sel.address]
        t = transfer_time_s(
            size_bytes,
            server.paths,
            _interface_index(server, sel.initial_subflow_interface),
            mss_bytes=config.mss_bytes,
        )
        ssmp_t.append(t)
        chosen.append(sel.address)
        now += t
        if sel.flow_class is FlowClass.ELEPHANT:
            device.learn(server, selector, now)
            for addr in sel.stale_servers:  # probe servers not measured for too long (§IV-B-1)
                if addr != server.address:
                    device.learn(truth[addr], selector, now)
        now += gap_s
    return dss_t, ssmp_t, chosen


def _choice_counts(chosen: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in chosen:
        counts[c] = counts.get(c, 0) + 1
    return dict(sorted(counts.items()))


def evaluate_paper(
    *, seed: int = 0, repetitions: int = 100, downloads: int = 10, config: SsmpConfig | None = None
) -> dict[str, Any]:
    """All §V scenarios: ``{scenario: {description, alpha, sizes: {label: summary}}}``."""
    config = config or SsmpConfig()
    scenarios: dict[str, Any] = {}

    def run(
        name: str,
        description: str,
        baseline: Sequence[ServerSpec],
        current: Sequence[ServerSpec],
        sizes: Sequence[int],
        paper: dict[int, float],
        alpha: float,
        loss_errors: dict[int, tuple[str, str, float]] | None = None,
        paper_note: str | None = None,
    ) -> None:
        block: dict[str, Any] = {"description": description, "alpha": alpha, "sizes": {}}
        if paper_note:
            block["paper_note"] = paper_note
        for j, size in enumerate(sizes):
            rng = np.random.default_rng([seed, j])  # same DSS draws for every α (common random numbers)
            dss: list[float] = []
            ssmp: list[float] = []
            chosen: list[str] = []
            for _ in range(repetitions):
                d, s, c = run_paper_sequence(
                    baseline,
                    current,
                    size,
                    alpha=alpha,
                    downloads=downloads,
                    rng=rng,
                    config=config,
                    loss_errors=loss_errors,
                )
                dss += d
                ssmp += s
                chosen += c
            block["sizes"][size_label(size)] = summarize(
                dss,
                ssmp,
                paper.get(size),
                seed=seed,
                with_ci=True,
                extra={"size_bytes": size, "ssmp_choices": _choice_counts(chosen)},
            )
        scenarios[name] = block

    mice, elephants = paper_mice_servers(), paper_elephant_servers()
    run(
        "mice_stable",
        "Fig. 5: mice flows, servers of §V-A (same aggregate bandwidth, different RTTs)",
        mice,
        mice,
        MICE_SIZES,
        PAPER_MICE_REDUCTION_PCT,
        config.alpha,
    )
    run(
        "elephant_stable",
        "Fig. 6: elephant flows, servers of §V-B (bandwidth gap; server 3 lossy)",
        elephants,
        elephants,
        ELEPHANT_SIZES,
        PAPER_ELEPHANT_REDUCTION_PCT,
        config.alpha,
    )
    degraded = [paper_degraded_server1(), *elephants[1:]]
    for alpha in ALPHAS:
        run(
            f"dynamic_degrade_alpha_{alpha}",
            "Fig. 7: server 1 degrades (RTT +10 ms, 20/30 Mbit/s) after the "
            "stable run; SSMP starts from the stable Q and learns from each completed transfer",
            elephants,
            degraded,
            DYNAMIC_SIZES,
            {},
            alpha,
            paper_note="Fig. 7 (no numbers in the text): α = 0.8 best, then 0.5, 0.2 worst",
        )
    for alpha in ALPHAS:
        run(
            f"measurement_error_alpha_{alpha}",
            "Fig. 8: stable conditions, but the first download's request "
            "carries a wrong 1 % loss on server 1's WiFi path (one wrong test; assumption: the paper does not say "
            "how long the error lasts)",
            elephants,
            elephants,
            DYNAMIC_SIZES,
            {},
            alpha,
            loss_errors={0: ("server1", "wlan0", 0.01)},
            paper_note="Fig. 8 (no numbers in the text): α = 0.2 best, 0.8 worst",
        )
    return scenarios


# ---------------------------------------------------------------------------------------------- 5Gophers mode


@dataclass(frozen=True)
class GophersData:
    """Per (carrier, server location): RTT samples (ms) and per-run mean throughputs (bit/s, single TCP connection)."""

    rtt_ms: dict[tuple[str, str], np.ndarray]
    run_rate_bps: dict[tuple[str, str], np.ndarray]

    @property
    def carriers(self) -> list[str]:
        return sorted({c for c, _ in self.rtt_ms})

    @property
    def locations(self) -> list[str]:
        return sorted({loc for _, loc in self.rtt_ms})


def load_gophers(directory: Path) -> GophersData:
    """Read ``rtt.csv`` and ``throughput.csv`` of 5Gophers 1.0 (CC BY 4.0).

    Throughput: rows with ``num_tcp_conn == 1``; a run's rate is the mean of its
    per-second samples (the slow-start ramp is part of the transfer model, so
    the run mean slightly underestimates the steady rate); runs averaging 0 are dropped.

    Raises
    ------
    FileNotFoundError
        A file is missing.
    ValueError
        A path has RTT samples but no throughput run (or the reverse).
    """
    import pandas as pd

    rtt = pd.read_csv(directory / "rtt.csv")
    tput = pd.read_csv(directory / "throughput.csv")
    tput = tput[tput["num_tcp_conn"] == 1]
    rtt_ms = {
        (str(c), str(loc)): g["rtt_ms"].to_numpy(float) for (c, loc), g in rtt.groupby(["carrier", "server_location"])
    }
    runs = tput.groupby(["carrier", "server_location", "run_num"])["throughput_mbps"].mean().reset_index()
    rates = {
        (str(c), str(loc)): g["throughput_mbps"].to_numpy(float) * MBPS
        for (c, loc), g in runs.groupby(["carrier", "server_location"])
    }
    rates = {k: v[v > 0] for k, v in rates.items()}
    if set(rtt_ms) != set(rates) or any(len(v) == 0 for v in [*rtt_ms.values(), *rates.values()]):
        raise ValueError("rtt.csv and throughput.csv must cover the same (carrier, server_location) paths")
    return GophersData(rtt_ms, rates)


def default_gophers_dir() -> Path | None:
    """``../shared/data/5gophers`` beside the repository (CI, developers), else None."""
    for candidate in (REPO_ROOT.parent / "shared" / "data" / "5gophers", Path.cwd().parent / "shared/data/5gophers"):
        if (candidate / "rtt.csv").is_file() and (candidate / "throughput.csv").is_file():
            return candidate
    return None


def evaluate_gophers(
    data: GophersData,
    *,
    seed: int = 0,
    downloads: int = 300,
    pings: int = 3,
    config: SsmpConfig | None = None,
    sizes: Sequence[int] = (*MICE_SIZES, *ELEPHANT_SIZES),
) -> dict[str, Any]:
    """SSMP vs DSS on 5Gophers paths: one scenario per pair of carriers, every size, 95 % CIs."""
    config = config or SsmpConfig()
    scenarios: dict[str, Any] = {}
    locations = data.locations
    for pair_index, pair in enumerate(itertools.combinations(data.carriers, 2)):
        ifaces = [c.lower() for c in pair]
        block: dict[str, Any] = {
            "description": f"5Gophers: paths {' + '.join(pair)} (default interface {ifaces[0]}), "
            f"candidates {', '.join(locations)}; p = 0 (no loss data)",
            "alpha": config.alpha,
            "sizes": {},
        }
        for j, size in enumerate(sizes):
            rng = np.random.default_rng([seed, pair_index, j])
            selector = SsmpSelector(config, rng)
            states: dict[str, ServerState] = {}
            now = 0.0
            dss: list[float] = []
            ssmp: list[float] = []
            chosen: list[str] = []
            for _ in range(downloads):
                truth: dict[str, ServerSpec] = {}
                candidates: list[Candidate] = []
                for loc in locations:
                    paths, samples, bandwidth = [], {}, {}
                    for carrier, iface in zip(pair, ifaces, strict=True):
                        rtts, rates = data.rtt_ms[(carrier, loc)], data.run_rate_bps[(carrier, loc)]
                        run = int(rng.integers(len(rates)))
                        paths.append(PathSpec(iface, float(rng.choice(rtts)), float(rates[run])))
                        samples[iface] = rng.choice(rtts, size=pings).tolist()
                        past = int(rng.integers(len(rates) - 1)) if len(rates) > 1 else 0
                        bandwidth[iface] = float(rates[past + (past >= run and len(rates) > 1)])
                    truth[loc] = ServerSpec(loc, tuple(paths))
                    candidates.append(
                        as_candidate(
                            truth[loc],
                            ifaces[0],
                            rtt_samples=samples,
                            loss=dict.fromkeys(ifaces, 0.0),
                            bandwidth=bandwidth,
                        )
                    )
                dss_loc = locations[int(rng.integers(len(locations)))]
                dss.append(transfer_time_s(size, truth[dss_loc].paths, 0, mss_bytes=config.mss_bytes))
                sel = selector.decide(size, candidates, states, now, default_index=locations.index(dss_loc))
                server = truth[sel.address]
                t = transfer_time_s(
                    size,
                    server.paths,
                    _interface_index(server, sel.initial_subflow_interface),
                    mss_bytes=config.mss_bytes,
                )
                ssmp.append(t)
                chosen.append(sel.address)
                now += t
                states[sel.address] = selector.update(
                    measured_q_bps(server, config.mss_bytes), states.get(sel.address), now
                )
                now += 1.0
            block["sizes"][size_label(size)] = summarize(
                dss,
                ssmp,
                None,
                seed=seed,
                with_ci=True,
                extra={
                    "size_bytes": size,
                    "flow_class": selector.flow_class(size).value,
                    "ssmp_choices": _choice_counts(chosen),
                },
            )
        scenarios["gophers_" + "+".join(ifaces)] = block
    return scenarios


# ---------------------------------------------------------------------------------------------- report


def model_description() -> dict[str, Any]:
    return {
        "transfer_time_model": (
            "fluid round-based MPTCP download: initial subflow 2 RTTs to first byte, joins after the initial "
            "handshake (RFC 8684), IW 10 segments (RFC 6928) doubling per RTT until the BDP (slow-start rounds, "
            "Cardwell et al. INFOCOM 2000), then rate min(B, Mathis T) (Mathis et al. CCR 1997; SSMP Eq. 1); "
            "no DNS/probe/application overheads"
        ),
        "dss": "uniformly random server per download (the paper's random single-port server selection), "
        "initial subflow on the default interface",
        "units": "sizes binary (1 KB = 1024 B, 1 MB = 2^20 B); times seconds",
    }


def build_report(
    *,
    paper: bool,
    gophers_dir: Path | None,
    seed: int,
    config: SsmpConfig,
    repetitions: int = 100,
    downloads: int = 300,
) -> dict[str, Any]:
    report: dict[str, Any] = {
        "evaluation": "ssmp",
        "paper": "Yang et al., SSMP: Server Selection for Multipath TCP in CDN Environments",
        "seed": seed,
        "config": {
            "mice_threshold_bytes": config.mice_threshold_bytes,
            "alpha": config.alpha,
            "stale_age_s": config.stale_age_s,
            "mss_bytes": config.mss_bytes,
        },
        "model": model_description(),
        "scenarios": {},
    }
    if paper:
        report["paper_mode"] = {"repetitions": repetitions, "downloads_per_sequence": 10, "emulated": True}
        report["scenarios"].update(evaluate_paper(seed=seed, repetitions=repetitions, config=config))
    if gophers_dir is not None:
        report["gophers_mode"] = {
            "directory": str(gophers_dir),
            "dataset": GOPHERS_LICENSE,
            "downloads_per_size": downloads,
            "paired": True,
            "emulated_pairing": "carriers measured separately, combined as paths of one device",
        }
        report["scenarios"].update(
            evaluate_gophers(load_gophers(gophers_dir), seed=seed, downloads=downloads, config=config)
        )
    return report


def table_rows(report: dict[str, Any]) -> list[tuple[str, str, float, float, float, float | None]]:
    """``(scenario, size, dss_seconds, ssmp_seconds, reduction_pct, paper_reduction_pct)`` per row."""
    rows = []
    for name, block in report["scenarios"].items():
        for label, s in block["sizes"].items():
            rows.append(
                (name, label, s["dss_seconds"], s["ssmp_seconds"], s["reduction_pct"], s["paper_reduction_pct"])
            )
    return rows


def _with_ci(row: dict[str, Any], key: str, digits: int) -> str:
    """``mean [low, high]`` as ``eval mlpm`` prints it (the report's 95 % CI), else the mean alone (a row without)."""
    ci = row.get(f"{key}_ci95")
    value = f"{row[key]:.{digits}f}"
    return value if ci is None else f"{value} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def format_table(report: dict[str, Any]) -> str:
    """One line per scenario and size: DSS and SSMP mean download times and SSMP's reduction, each with its 95 % CI
    (Student-t for the times, paired percentile bootstrap for the reduction), and the paper's reduction."""
    ci = "(95% CI)"
    lines = [
        f"{'scenario':<32} {'size':>7} {'dss s ' + ci:>30} {'ssmp s ' + ci:>30} {'reduction % ' + ci:>26} {'paper%':>7}"
    ]
    for name, block in report["scenarios"].items():
        for label, row in block["sizes"].items():
            d, s, r = (
                _with_ci(row, "dss_seconds", 4),
                _with_ci(row, "ssmp_seconds", 4),
                _with_ci(row, "reduction_pct", 2),
            )
            p = row["paper_reduction_pct"]
            lines.append(f"{name:<32} {label:>7} {d:>30} {s:>30} {r:>26} {'' if p is None else f'{p:.2f}':>7}")
    return "\n".join(lines)


def plot_report(report: dict[str, Any], path: Path) -> None:
    """One panel per scenario: DSS vs SSMP mean download time per size (log scale), 95 % CI bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["scenarios"])
    ncols = 2 if len(names) > 1 else 1
    nrows = math.ceil(len(names) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.0 * ncols, 3.2 * nrows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        sizes = report["scenarios"][name]["sizes"]
        labels = list(sizes)
        x = np.arange(len(labels))
        for offset, key, color in ((-0.2, "dss", "tab:gray"), (0.2, "ssmp", "tab:blue")):
            means = np.array([sizes[lb][f"{key}_seconds"] for lb in labels])
            err = None
            if all(f"{key}_seconds_ci95" in sizes[lb] for lb in labels):
                ci = np.array([sizes[lb][f"{key}_seconds_ci95"] for lb in labels])
                err = np.vstack([means - ci[:, 0], ci[:, 1] - means]).clip(min=0)
            ax.bar(x + offset, means, 0.4, yerr=err, label=key.upper(), color=color, capsize=2)
        for i, lb in enumerate(labels):
            ax.annotate(
                f"-{sizes[lb]['reduction_pct']:.0f}%",
                (x[i], sizes[lb]["dss_seconds"]),
                ha="center",
                va="bottom",
                fontsize=7,
            )
        ax.set_xticks(x, labels)
        ax.set_yscale("log")
        ax.set_ylabel("download time (s)")
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.suptitle("SSMP vs DSS (Yang et al.); model: see report", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
