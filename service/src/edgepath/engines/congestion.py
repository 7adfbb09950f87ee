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
    best, deciding, value = _rank({sf: marg[sf] for sf in subflow}, criteria)
    notes.append(
        f"{best} has the best {deciding} = {value:g} among {_fmt(subflow)}, averaged over the four MPTCP-level "
        f"columns of Table 3 (it measured coupled pairs only; criteria for {effective.value.lower()}: {metric_list})"
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
    )
