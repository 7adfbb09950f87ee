"""Congestion-control advice from measured tables (pure engine: no I/O, no async).

Source: Ł. P. Łuczak, P. Ignaciuk, M. Morawski, "Evaluating MPTCP Congestion
Control Algorithms: Implications for Streaming in Open Internet", Future
Internet 15(10):328, 2023 — Table 3. Twelve pairs (MPTCP-level coupled
algorithm × subflow-level algorithm) measured over two LTE paths in the open
Internet (Linux 4.19 + MPTCP v0.95, 10 s runs × 30). The numbers are kept as
data in :data:`TABLE_3`; the advice ranks the pairs the kernel can run by the
metrics that matter for the application profile (:data:`PROFILE_METRICS`).

Profiles → metrics (lexicographic: the next metric breaks ties)
--------------------------------------------------------------
* streaming: HoL blocking degree ζ_av (the paper's Eq. 8), then protocol
  delay v_av (Eq. 3/5), then their maxima — the paper's criteria for stream
  reassembly.
* loss_sensitive: mean drop rate over both paths (d1+d2)/2, seg/s (Eq. 12's
  measure as reported per path), then protocol delay v_av.
* bulk: throughput average, then maximum, Mbit/s.
* interactive: protocol delay v_av (what the application waits for: the
  slowest path plus reassembly, Eq. 2), then v_max, then the mean SRTT of the
  two paths.
* unspecified: treated as streaming, the paper's use case (said in the advice).

Kernel capabilities
-------------------
The usable algorithms are the kernel's available ones
(``net.ipv4.tcp_available_congestion_control``) intersected with the allowed
ones (``net.ipv4.tcp_allowed_congestion_control``) when both are given.
Coupled algorithms (lia, olia, balia, wvegas) exist only in the out-of-tree
multipath-tcp.org kernel; the mainline (upstream, ≥ 5.6) MPTCP runs every
subflow with a regular, uncoupled TCP algorithm. When no coupled algorithm is
usable the advice says so (``mainline_fallback``) and recommends the
subflow-level algorithm alone. Table 3 has no uncoupled column, so subflow
algorithms are then ranked by their metric averaged over the four MPTCP-level
columns (stated in the explanation). With no capabilities at all the engine
assumes a stock mainline kernel offering :data:`MAINLINE_DEFAULT` and says so.

Mainline advice measured (issue 20)
-----------------------------------
Table 3 ranks *coupled* pairs; averaging its columns says little about uncoupled subflows on
a mainline kernel. ``edgepath-testbed run --scenario cc`` measured reno, cubic and bbr on
the same shaped, lossy MPTCP paths (Linux 6.18, :data:`MAINLINE_MEASURED`); on the mainline
fallback the ranking uses those measurements for the profile's deciding metric and Table 3's
averages only for algorithms not measured there. Measured: Table 3's averages advised bbr
for bulk (the testbed's worst: 11.2 vs 15.9 Mbit/s) and reno for loss-sensitive (drop rate
2.5 % vs cubic's 1.2 %, outside cubic's CI); streaming and interactive (cubic) held. On the
two runs pooled, cubic is best for all four profiles, so the mainline advice is now cubic
(bulk: cubic 15.98 vs reno 15.49 Mbit/s; reno won the first run by 0.03, cubic the second by 1.0).

Edge measurements (:func:`advise_with_edge`)
--------------------------------------------
A device (or the edge) that measured its own transfers per algorithm supplies, for the
profile's edge metric (:data:`EDGE_METRICS`), each algorithm's mean, 95 % CI half-width and count
(:func:`edge_stats` computes them from running sums). Rule: when at least two algorithms have ≥
:data:`MIN_EDGE_TRANSFERS` transfers each, and the advised algorithm's edge mean lies outside the 95 %
CI of the edge's best algorithm (worse side), the edge's best is advised instead and the explanation
says so; otherwise the advice stands. The same test the testbed applies to the table's advice, so local
evidence overrides the table exactly when it would have refuted it.

The edge metric is the first criterion of :data:`PROFILE_METRICS` as a device measures it per transfer
(``edgepath_agent.ccmetrics``): ζ_av and v_av in ms and throughput in Mbit/s as in the table, but the drop
rate as δ of Eq. 12 (a fraction of the data segments, ``drop_rate_fraction``) instead of Table 3's seg/s,
which depends on the transfer's rate; only the edge's own algorithms are compared with it, never the table.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from edgepath.types import ApplicationProfile, KernelCapabilities

SOURCE = "Łuczak, Ignaciuk, Morawski, Future Internet 2023, 15, 328, Table 3"

MPTCP_LEVEL = ("lia", "olia", "balia", "wvegas")
SUBFLOW_LEVEL = ("reno", "cubic", "bbr")
#: What a stock mainline kernel offers when the device reported nothing.
MAINLINE_DEFAULT = ("reno", "cubic")
#: Every congestion control mainline Linux builds (net/ipv4/Kconfig ``TCP_CONG_*``: the ``name`` of each
#: ``tcp_congestion_ops``, as ``net.ipv4.tcp_available_congestion_control`` lists it once loaded; reno is built in).
MAINLINE_MODULES = (
    *SUBFLOW_LEVEL,
    "bic",
    "cdg",
    "dctcp",
    "highspeed",
    "htcp",
    "hybla",
    "illinois",
    "lp",
    "nv",
    "scalable",
    "vegas",
    "veno",
    "westwood",
    "yeah",
)
#: The congestion-control names the service knows (the edge measurements' allow-list, issue 20): the mainline
#: modules and the out-of-tree multipath-tcp.org v0.95 coupled ones (:data:`MPTCP_LEVEL`). Any other name (a BPF
#: ``struct_ops`` algorithm, an out-of-tree module) is well formed but never counted, so the per-profile statistics
#: hold at most these 21 algorithms.
KNOWN_ALGORITHMS = frozenset((*MAINLINE_MODULES, *MPTCP_LEVEL))

#: Mainline (uncoupled) subflow algorithms measured by the testbed's ``cc`` scenario (issue 20): per metric,
#: the mean per algorithm over two runs (seeds 11 and 23: reports/issue-20/testbed-cc.json and
#: testbed-cc-confirm.json of `edgepath-testbed run --scenario cc --steps 15 --seed N`), Linux 6.18, two veths
#: tbf-shaped to 12 and 6 Mbit/s with 60 kB queues, 1 % random loss per direction on both paths, 30 × 2 MiB
#: MPTCP downloads per algorithm (per-run means with 95 % CIs in README "MLPM and CC measured").
MAINLINE_MEASURED: dict[str, dict[str, float]] = {
    "hol_degree_avg_ms": {"reno": 203.84, "cubic": 162.93, "bbr": 846.64},
    "protocol_delay_avg_ms": {"reno": 233.67, "cubic": 194.55, "bbr": 894.12},
    "drop_rate_mean_seg_s": {"reno": 34.31, "cubic": 20.32, "bbr": 2209.41},  # Eq. 12 %: 2.36, 1.38, 33.13
    "throughput_avg_mbps": {"reno": 15.49, "cubic": 15.98, "bbr": 11.63},
}
MAINLINE_MEASURED_SOURCE = "EdgePath testbed, scenario cc (issue 20), Linux 6.18, shaped lossy veths"
#: Transfers per algorithm an edge measurement needs before it can override the advice.
MIN_EDGE_TRANSFERS = 10

#: Column order of the rows of :data:`TABLE_3` after the two algorithm names.
COLUMNS = (
    "protocol_delay_avg_ms",  # v_av
    "protocol_delay_max_ms",  # v_max
    "hol_degree_avg_ms",  # ζ_av
    "hol_degree_max_ms",  # ζ_max
    "srtt_path1_avg_ms",  # τ_1,av
    "srtt_path1_max_ms",  # τ_1,max
    "srtt_path2_avg_ms",  # τ_2,av
    "srtt_path2_max_ms",  # τ_2,max
    "drop_rate_path1_seg_s",  # d_1
    "drop_rate_path2_seg_s",  # d_2
    "throughput_avg_mbps",  # av
    "throughput_max_mbps",  # max
)

#: Table 3 of Łuczak et al. (2023), one row per (MPTCP-level, subflow-level) pair, values in COLUMNS order.
TABLE_3: tuple[tuple[str, str, tuple[float, ...]], ...] = (
    ("lia", "reno", (96, 225, 17, 143, 79, 94, 57, 88, 0.5, 1.0, 7.51, 16.24)),
    ("lia", "cubic", (97, 224, 17, 143, 79, 97, 56, 86, 1.4, 0.8, 7.84, 17.01)),
    ("lia", "bbr", (231, 569, 151, 488, 79, 95, 56, 89, 0.1, 1.2, 7.67, 16.98)),
    ("olia", "reno", (98, 256, 19, 175, 78, 98, 56, 92, 0.2, 1.5, 9.65, 19.53)),
    ("olia", "cubic", (96, 235, 16, 150, 78, 98, 58, 97, 1.5, 1.0, 10.58, 21.28)),
    ("olia", "bbr", (95, 238, 16, 155, 77, 96, 57, 103, 2.7, 0.8, 11.08, 22.71)),
    ("balia", "reno", (95, 231, 15, 148, 79, 98, 59, 104, 1.3, 0.7, 11.40, 23.62)),
    ("balia", "cubic", (99, 295, 18, 211, 80, 102, 59, 102, 3.0, 1.3, 11.02, 23.09)),
    ("balia", "bbr", (95, 243, 15, 157, 79, 97, 58, 105, 0.5, 1.5, 11.23, 23.54)),
    ("wvegas", "reno", (271, 816, 191, 733, 77, 96, 56, 79, 3.4, 1.6, 5.60, 13.53)),
    ("wvegas", "cubic", (99, 259, 19, 178, 79, 95, 57, 83, 0.5, 1.6, 5.86, 12.97)),
    ("wvegas", "bbr", (99, 254, 19, 174, 78, 94, 57, 75, 2.1, 1.4, 5.77, 12.91)),
)


#: Application profile the advice optimises for (the wire enum).
Profile = ApplicationProfile


#: Metrics derived from the table's columns.
DERIVED = {
    "drop_rate_mean_seg_s": ("drop_rate_path1_seg_s", "drop_rate_path2_seg_s"),
    "srtt_mean_avg_ms": ("srtt_path1_avg_ms", "srtt_path2_avg_ms"),
}

#: Profile → ordered (metric, higher_is_better) criteria; later ones break ties.
PROFILE_METRICS: dict[Profile, tuple[tuple[str, bool], ...]] = {
    Profile.STREAMING: (
        ("hol_degree_avg_ms", False),
        ("protocol_delay_avg_ms", False),
        ("hol_degree_max_ms", False),
        ("protocol_delay_max_ms", False),
    ),
    Profile.LOSS_SENSITIVE: (("drop_rate_mean_seg_s", False), ("protocol_delay_avg_ms", False)),
    Profile.BULK: (("throughput_avg_mbps", True), ("throughput_max_mbps", True)),
    Profile.INTERACTIVE: (
        ("protocol_delay_avg_ms", False),
        ("protocol_delay_max_ms", False),
        ("srtt_mean_avg_ms", False),
    ),
}


#: Profile → (edge metric, higher_is_better): what :func:`advise_with_edge` compares the edge's algorithms on
#: (the first criterion of :data:`PROFILE_METRICS` in the unit a device measures per transfer; module docstring).
EDGE_METRICS: dict[Profile, tuple[str, bool]] = {
    Profile.STREAMING: ("hol_degree_avg_ms", False),
    Profile.LOSS_SENSITIVE: ("drop_rate_fraction", False),
    Profile.BULK: ("throughput_avg_mbps", True),
    Profile.INTERACTIVE: ("protocol_delay_avg_ms", False),
}


def edge_metric(profile: Profile) -> tuple[str, bool]:
    """(edge metric, higher_is_better) for ``profile`` (:data:`EDGE_METRICS`; unspecified → streaming's)."""
    return EDGE_METRICS[Profile.STREAMING if profile is Profile.UNSPECIFIED else profile]


@dataclass(frozen=True)
class CongestionAdvice:
    """Recommended pair and why.

    ``mptcp_level`` is "" on the mainline fallback; ``subflow_level`` is "" when
    no algorithm of Table 3 is usable (then keep the kernel default).
    """

    profile: Profile
    mptcp_level: str
    subflow_level: str
    deciding_metric: str
    deciding_value: float
    mainline_fallback: bool
    assumed_capabilities: bool
    explanation: str
    source: str = SOURCE


def metrics_of(row: Sequence[float]) -> dict[str, float]:
    """Named metrics of one Table 3 row, including the derived means."""
    m = dict(zip(COLUMNS, (float(v) for v in row), strict=True))
    for name, (a, b) in DERIVED.items():
        m[name] = (m[a] + m[b]) / 2.0
    return m


@functools.cache
def table() -> dict[tuple[str, str], dict[str, float]]:
    """Table 3 as ``{(mptcp_level, subflow_level): {metric: value}}`` (computed once; treat as read-only)."""
    return {(mp, sf): metrics_of(row) for mp, sf, row in TABLE_3}


@functools.cache
def subflow_marginals() -> dict[str, dict[str, float]]:
    """Per subflow-level algorithm, each metric averaged over the four MPTCP-level columns of Table 3.

    Computed once (the table is constant data); callers must treat the result as read-only.
    """
    t = table()
    out: dict[str, dict[str, float]] = {}
    for sf in SUBFLOW_LEVEL:
        rows = [t[(mp, sf)] for mp in MPTCP_LEVEL]
        out[sf] = {k: math.fsum(r[k] for r in rows) / len(rows) for k in rows[0]}
    return out


def usable(caps: KernelCapabilities) -> tuple[set[str], bool]:
    """Algorithms the kernel offers and allows (lower-cased), and whether that was assumed."""
    if not caps.reported:
        return set(MAINLINE_DEFAULT), True
    avail = {a.strip().lower() for a in caps.available_congestion_controls if a.strip()}
    allowed = {a.strip().lower() for a in caps.allowed_congestion_controls if a.strip()}
    if avail and allowed:
        return avail & allowed, False
    return (avail or allowed), False


def _rank(candidates: dict[str, dict[str, float]], criteria: Sequence[tuple[str, bool]]) -> tuple[str, str, float]:
    """Best candidate, the metric that separated it from the runner-up, and its value there."""

    def key(name: str) -> tuple[float | str, ...]:
        m = candidates[name]
        return (*(-m[c] if hi else m[c] for c, hi in criteria), name)

    order = sorted(candidates, key=key)
    best = order[0]
    deciding = criteria[0][0]
    if len(order) > 1:
        runner = order[1]
        for c, _ in criteria:
            if candidates[best][c] != candidates[runner][c]:
                deciding = c
                break
    return best, deciding, candidates[best][deciding]


def _fmt(names: Iterable[str]) -> str:
    items = sorted(names)
    return ", ".join(items) if items else "none"


def advise(profile: Profile, caps: KernelCapabilities) -> CongestionAdvice:
    """Best usable (MPTCP-level, subflow-level) pair from Table 3 for ``profile``.

    Parameters
    ----------
    profile:
        Application profile (selects the metrics, :data:`PROFILE_METRICS`).
    caps:
        The kernel's congestion controls; nothing reported → a stock mainline
        kernel (:data:`MAINLINE_DEFAULT`) is assumed.

    Returns
    -------
    CongestionAdvice
        The pair (or the subflow level alone on the mainline fallback), the
        deciding metric and value, and an explanation. Never raises for any
        capability list.
    """
    notes: list[str] = []

    def keep_kernel_default(mainline_fallback: bool) -> CongestionAdvice:
        """No usable subflow-level algorithm: advise nothing beyond the kernel's default."""
        return CongestionAdvice(
            profile=profile,
            mptcp_level="",
            subflow_level="",
            deciding_metric="",
            deciding_value=0.0,
            mainline_fallback=mainline_fallback,
            assumed_capabilities=assumed,
            explanation="; ".join(notes),
        )

    effective = profile
    if profile is Profile.UNSPECIFIED:
        effective = Profile.STREAMING
        notes.append("no application profile given: advising for streaming, the paper's use case")
    criteria = PROFILE_METRICS[effective]
    algos, assumed = usable(caps)
    if assumed:
        notes.append(f"no kernel capabilities reported: assuming a mainline kernel offering {_fmt(MAINLINE_DEFAULT)}")
    coupled = [a for a in MPTCP_LEVEL if a in algos]
    subflow = [a for a in SUBFLOW_LEVEL if a in algos]
    metric_list = ", ".join(c for c, _ in criteria)

    if coupled and subflow:
        t = table()
        pairs = {f"{mp}+{sf}": t[(mp, sf)] for mp in coupled for sf in subflow}
        best, deciding, value = _rank(pairs, criteria)
        mp, sf = best.split("+")
        notes.append(
            f"{best} has the best {deciding} = {value:g} among {len(pairs)} usable pairs of Table 3 "
            f"(criteria for {effective.value.lower()}: {metric_list})"
        )
        return CongestionAdvice(
            profile=profile,
            mptcp_level=mp,
            subflow_level=sf,
            deciding_metric=deciding,
            deciding_value=value,
            mainline_fallback=False,
            assumed_capabilities=assumed,
            explanation="; ".join(notes),
        )

    if coupled and not subflow:
        notes.append(f"coupled {_fmt(coupled)} usable but none of reno, cubic, bbr: keep the kernel default")
        return keep_kernel_default(mainline_fallback=False)

    notes.append(
        "no coupled MPTCP congestion control (lia, olia, balia, wvegas) is available: mainline MPTCP runs "
        "uncoupled subflows, so only the subflow-level algorithm is advised"
    )
    if not subflow:
        notes.append(f"none of reno, cubic, bbr is usable (kernel offers {_fmt(algos)}): keep the kernel default")
        return keep_kernel_default(mainline_fallback=True)
    marg = subflow_marginals()
    first = criteria[0][0]
    measured = MAINLINE_MEASURED.get(first, {})
    source = SOURCE
    if all(sf in measured for sf in subflow):
        source = MAINLINE_MEASURED_SOURCE  # the testbed's measurement decides, not Table 3
        hi = criteria[0][1]
        best = sorted(subflow, key=lambda sf: (-measured[sf] if hi else measured[sf], sf))[0]
        deciding, value = first, measured[best]
        notes.append(
            f"{best} has the best measured {deciding} = {value:g} among {_fmt(subflow)} on mainline MPTCP "
            f"({MAINLINE_MEASURED_SOURCE}; Table 3 measured coupled pairs only)"
        )
    else:
        best, deciding, value = _rank({sf: marg[sf] for sf in subflow}, criteria)
        notes.append(
            f"{best} has the best {deciding} = {value:g} among {_fmt(subflow)}, averaged over the four MPTCP-level "
            f"columns of Table 3 (it measured coupled pairs only; criteria for {effective.value.lower()}: "
            f"{metric_list})"
        )
    return CongestionAdvice(
        profile=profile,
        mptcp_level="",
        subflow_level=best,
        deciding_metric=deciding,
        deciding_value=value,
        mainline_fallback=True,
        assumed_capabilities=assumed,
        explanation="; ".join(notes),
        source=source,
    )


@dataclass(frozen=True)
class EdgeStats:
    """An edge's own measurements of one algorithm for one metric: mean, 95 % CI half-width, transfers."""

    mean: float
    ci95_half: float
    transfers: int


def edge_stats(count: int, total: float, total_sq: float) -> EdgeStats | None:
    """:class:`EdgeStats` of a metric from its running sums: ``count`` transfers, Σx and Σx².

    mean = Σx / n; sample variance s² = (Σx² − n·mean²) / (n − 1), floored at 0 (cancellation in the
    running sums can make it slightly negative); 95 % CI half-width = 1.96 · s / √n (normal approximation,
    which the rule only applies from :data:`MIN_EDGE_TRANSFERS` transfers on). One transfer has no spread: the
    half-width is then infinite (never refutes anything). Returns None for ``count`` < 1 or non-finite sums
    (e.g. Σx² overflowed): such stats are no evidence.
    """
    if count < 1 or not (math.isfinite(total) and math.isfinite(total_sq)):
        return None
    mean = total / count
    if count < 2:
        return EdgeStats(mean=mean, ci95_half=math.inf, transfers=count)
    var = max(0.0, (total_sq - count * mean * mean) / (count - 1))
    half = 1.96 * math.sqrt(var / count)
    if not (math.isfinite(mean) and math.isfinite(half)):
        return None
    return EdgeStats(mean=mean, ci95_half=half, transfers=count)


def advise_with_edge(profile: Profile, caps: KernelCapabilities, edge: dict[str, EdgeStats]) -> CongestionAdvice:
    """:func:`advise`, overridden by the edge's own measurements when they refute it (rule in the module docstring).

    Parameters
    ----------
    profile, caps:
        As :func:`advise`.
    edge:
        Algorithm → :class:`EdgeStats` of the profile's edge metric (:func:`edge_metric`: the first
        criterion of :data:`PROFILE_METRICS` as measured per transfer; unspecified → streaming's),
        measured by the device/edge. Algorithms the kernel does not offer, with fewer than
        :data:`MIN_EDGE_TRANSFERS` transfers or with non-finite stats are ignored.

    Returns
    -------
    CongestionAdvice
        The table's advice, or the edge's best algorithm at the subflow level with
        ``deciding_metric``/``deciding_value`` from the edge and the reason in ``explanation``.
    """
    base = advise(profile, caps)
    metric, hi = edge_metric(profile)
    algos, _ = usable(caps)
    ok = {
        a.lower(): e
        for a, e in edge.items()
        if a.lower() in algos
        and e.transfers >= MIN_EDGE_TRANSFERS
        and math.isfinite(e.mean)
        and math.isfinite(e.ci95_half)
    }
    if len(ok) < 2 or not base.subflow_level or base.subflow_level not in ok:
        return base
    best = sorted(ok, key=lambda a: (-ok[a].mean if hi else ok[a].mean, a))[0]
    adv = ok[base.subflow_level]
    b = ok[best]
    refuted = (adv.mean < b.mean - b.ci95_half) if hi else (adv.mean > b.mean + b.ci95_half)
    if best == base.subflow_level or not refuted:
        return base
    note = (
        f"edge measurements override: {best} {metric} = {b.mean:g} ± {b.ci95_half:g} over {b.transfers} transfers; "
        f"advised {base.subflow_level} measured {adv.mean:g} over {adv.transfers}, outside that 95 % CI"
    )
    return CongestionAdvice(
        profile=base.profile,
        mptcp_level=base.mptcp_level if base.mptcp_level else "",
        subflow_level=best,
        deciding_metric=metric,
        deciding_value=b.mean,
        mainline_fallback=base.mainline_fallback,
        assumed_capabilities=base.assumed_capabilities,
        explanation=f"{base.explanation}; {note}",
    )
