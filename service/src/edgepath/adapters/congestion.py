"""Congestion-control advice (``congestion``): Łuczak et al., Future Internet 2023, Table 3, and the edge's own
measurements (issue 20).

Reads the request's ``application_profile`` and ``kernel`` capabilities (none reported: a mainline kernel is
assumed; :mod:`edgepath.engines.congestion`) and, with ``settings.congestion.edge_measurements`` (default on),
the edge's statistics of the request's profile (``StateStore.cc_measurement_stats``): per algorithm, the mean,
95 % CI half-width 1.96·s/√n and count of the profile's edge metric
(:func:`~edgepath.engines.congestion.edge_metric`; :func:`~edgepath.engines.congestion.edge_stats`), handed to
:func:`~edgepath.engines.congestion.advise_with_edge`, which replaces the table's advice with the edge's best
algorithm only when ≥ 2 algorithms have ≥ ``MIN_EDGE_TRANSFERS`` transfers and the advised one's mean lies
outside the best one's 95 % CI (the explanation then says "edge measurements override").

Learns from an outcome's ``congestion_measurement`` (once per decision: the plane calls :meth:`learn` for the
first accepted outcome only): its metrics, converted to the engine's units (:data:`MEASURED`: throughput
bit/s → Mbit/s; HoL degree and protocol delay ms; drop rate a fraction), are added to the running sums of
(the *decision's* profile, the measured algorithm) (``StateStore.record_cc_measurement``). Decisions logged
before records carried their profile are not counted. Only a known algorithm
(:data:`~edgepath.engines.congestion.KNOWN_ALGORITHMS`) that the decision's kernel reported available
(``DecisionRecord.congestion_controls``, when it reported a list) is counted; any other measurement is ignored and
counted in ``edgepath_cc_measurements_ignored_total{reason}``, while the outcome itself counts (:meth:`learn`).

Hot path (what was chosen): no store round trip per request. Each adapter (one per serving process) keeps, per
profile, the last statistics it read and re-reads them only when they are older than
``settings.congestion.edge_refresh_s`` (default 5 s): at most one read per profile per interval per process,
whatever the request rate. A new outcome therefore acts on this replica's, and every other replica's, advice
within that interval. The advice itself stays cached per (profile, kernel capabilities, statistics version); the
version changes only when a re-read returns different statistics, so between changes a request costs what it
did before (a dict lookup, ~1 µs). A store that cannot answer (Redis degraded) keeps the statistics read before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from edgepath import types as ep_types
from edgepath.adapters.base import DecisionInput, EngineAdapter, OutcomeInput
from edgepath.engines import congestion
from edgepath.settings import Settings
from edgepath.state.base import MetricSums, StateStore

KernelKey = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None

#: Wire field of ``CongestionMeasurement`` → (the engine's edge metric, factor into its unit).
MEASURED: dict[str, tuple[str, float]] = {
    "hol_degree_ms": ("hol_degree_avg_ms", 1.0),
    "protocol_delay_ms": ("protocol_delay_avg_ms", 1.0),
    "drop_rate": ("drop_rate_fraction", 1.0),
    "throughput_bps": ("throughput_avg_mbps", 1e-6),
}
#: Advice objects cached per (profile, kernel, statistics version) before the cache is emptied.
ADVICE_CACHE_SIZE = 4096


def measured_metrics(m: ep_types.CongestionMeasurement) -> dict[str, float]:
    """The measurement's metrics present, as ``{edge metric: value}`` in the engine's units (:data:`MEASURED`).

    The values were validated finite and in range on the wire; a product that is not finite is left out all the
    same (a guard where values enter the running sums).
    """
    out: dict[str, float] = {}
    for name, (metric, scale) in MEASURED.items():
        value = getattr(m, name)
        if value is not None and math.isfinite(x := float(value) * scale):
            out[metric] = x
    return out


def kernel_key(k: ep_types.KernelCapabilities | None) -> KernelKey:
    """Hashable form of the request's kernel capabilities (None when it reported none)."""
    if k is None:
        return None
    return (
        tuple(k.available_congestion_controls),
        tuple(k.allowed_congestion_controls),
        tuple(k.mptcp_schedulers),
        tuple(k.path_managers),
    )


def _caps(kernel: KernelKey) -> ep_types.KernelCapabilities:
    if kernel is None:
        return ep_types.KernelCapabilities()
    return ep_types.KernelCapabilities(
        available_congestion_controls=list(kernel[0]),
        allowed_congestion_controls=list(kernel[1]),
        mptcp_schedulers=list(kernel[2]),
        path_managers=list(kernel[3]),
    )


def _typed(a: congestion.CongestionAdvice) -> ep_types.CongestionAdvice:
    return ep_types.CongestionAdvice(
        profile=a.profile,
        mptcp_level=a.mptcp_level,
        subflow_level=a.subflow_level,
        deciding_metric=a.deciding_metric,
        deciding_value=a.deciding_value,
        mainline_fallback=a.mainline_fallback,
        assumed_capabilities=a.assumed_capabilities,
        explanation=a.explanation,
        source=a.source,
    )


def congestion_advice(request: ep_types.RecommendRequest) -> ep_types.CongestionAdvice:
    """Congestion-control pair for the request's profile and kernel (Łuczak et al. 2023, Table 3), without edge
    measurements.

    The advice depends on nothing else, so it is computed once per (profile, capabilities) and the
    immutable answer shared (issue 16: the ranking was ~10 % of a decision's CPU).
    """
    return _advice(request.application_profile, kernel_key(request.kernel))


@lru_cache(maxsize=4096)
def _advice(profile: ep_types.ApplicationProfile, kernel: KernelKey) -> ep_types.CongestionAdvice:
    return _typed(congestion.advise(profile, _caps(kernel)))


@dataclass
class EdgeView:
    """The edge statistics of one profile as this process last read them.

    ``read_at`` is the reader's clock (monotonic s) at the read; ``stats`` algorithm → :class:`EdgeStats` of the
    profile's edge metric; ``version`` increases whenever a read found different statistics.
    """

    read_at: float
    version: int = 0
    stats: dict[str, congestion.EdgeStats] = field(default_factory=dict)


def edge_view_stats(
    sums: Mapping[str, Mapping[str, MetricSums]], profile: ep_types.ApplicationProfile
) -> dict[str, congestion.EdgeStats]:
    """Algorithm → :class:`EdgeStats` of ``profile``'s edge metric from a store's running sums (``MetricSums``)."""
    metric, _ = congestion.edge_metric(profile)
    out: dict[str, congestion.EdgeStats] = {}
    for algorithm, per_metric in sums.items():
        s = per_metric.get(metric)
        if s is None:
            continue
        e = congestion.edge_stats(s.count, s.total, s.total_sq)
        if e is not None:
            out[algorithm] = e
    return out


class CongestionAdapter(EngineAdapter):
    """``congestion`` in every recommendation that asks for it (settings ``congestion.*``; the edge rule: module
    docstring).

    ``clock`` (monotonic seconds) times the refresh of the edge statistics; tests pass their own.
    """

    section = "congestion"

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        self.edge_measurements = settings.congestion.edge_measurements
        self.refresh_s = settings.congestion.edge_refresh_s
        self.clock = clock
        self.views: dict[ep_types.ApplicationProfile, EdgeView] = {}
        self._edge_advice: dict[tuple[ep_types.ApplicationProfile, KernelKey, int], ep_types.CongestionAdvice] = {}

    async def edge_view(self, store: StateStore, profile: ep_types.ApplicationProfile) -> EdgeView:
        """The profile's edge statistics, re-read from ``store`` when older than ``refresh_s`` (else as cached).

        The read time is set before the store is awaited, so concurrent requests of the same profile do not read
        it again meanwhile (they use the previous statistics).
        """
        now = self.clock()
        view = self.views.get(profile)
        if view is not None and now - view.read_at < self.refresh_s:
            return view
        if view is None:
            view = self.views[profile] = EdgeView(read_at=now)
        else:
            view.read_at = now
        sums = await store.cc_measurement_stats(profile.value)
        if sums is None:  # the store cannot answer now: keep what was read before
            return view
        stats = edge_view_stats(sums, profile)
        if stats != view.stats:
            view = self.views[profile] = EdgeView(read_at=now, version=view.version + 1, stats=stats)
            self._edge_advice.clear()  # advice of older statistics is never asked for again
        return view

    def advise(self, request: ep_types.RecommendRequest, view: EdgeView | None) -> ep_types.CongestionAdvice:
        """The section for ``request`` given the profile's edge statistics (None: the table's advice alone)."""
        if view is None or len(view.stats) < 2:  # fewer than two algorithms can never refute the advice
            return congestion_advice(request)
        kernel = kernel_key(request.kernel)
        key = (request.application_profile, kernel, view.version)
        hit = self._edge_advice.get(key)
        if hit is None:
            if len(self._edge_advice) >= ADVICE_CACHE_SIZE:
                self._edge_advice.clear()
            hit = self._edge_advice[key] = _typed(
                congestion.advise_with_edge(request.application_profile, _caps(kernel), view.stats)
            )
        return hit

    async def recommend(self, decision: DecisionInput) -> ep_types.CongestionAdvice:
        request = decision.request
        if not self.edge_measurements:
            return congestion_advice(request)
        return self.advise(request, await self.edge_view(decision.store, request.application_profile))

    async def recommend_batch(self, decisions: Sequence[DecisionInput]) -> list[ep_types.CongestionAdvice]:
        """:meth:`recommend` of every item of a ``RecommendBatch`` (one edge-statistics check per profile)."""
        if not self.edge_measurements or not decisions:
            return [congestion_advice(d.request) for d in decisions]
        store = decisions[0].store
        views = {p: await self.edge_view(store, p) for p in {d.request.application_profile for d in decisions}}
        return [self.advise(d.request, views[d.request.application_profile]) for d in decisions]

    async def learn(self, outcome: OutcomeInput) -> None:
        """Add the outcome's ``congestion_measurement`` to (decision's profile, algorithm)'s running statistics.

        Only an algorithm that may hold one of the profile's places in the store (at most ``MAX_CC_ALGORITHMS``)
        is added: one of :data:`~edgepath.engines.congestion.KNOWN_ALGORITHMS` (the mainline Linux modules and
        the multipath-tcp.org coupled ones; source there), and, when the decision recorded the kernel's available
        list (``DecisionRecord.congestion_controls``), one of those. Before, any name of the wire's pattern took a
        place, first come first served: 32 made-up names filled a profile's places for good and its advice never
        learned again. Any other measurement is ignored and counted (``edgepath_cc_measurements_ignored_total``,
        reason ``unknown_algorithm`` or ``not_offered``), never refused: the outcome's reward does not depend on
        the name and still reaches the bandit (a 422 / ``INVALID_ARGUMENT`` would lose it, for every outcome of a
        device whose sender runs an algorithm outside the list, e.g. a BPF one). A malformed name is still refused
        on the wire (``congestion_measurement.algorithm``, :class:`~edgepath.types.CongestionMeasurement`).
        Raises nothing: an ignored measurement is only counted, and the store drops what it cannot write.
        """
        m = outcome.report.congestion_measurement
        profile = outcome.decision.application_profile
        if not self.edge_measurements or m is None or not profile:
            return
        if m.algorithm not in congestion.KNOWN_ALGORITHMS:
            if outcome.metrics is not None:
                outcome.metrics.cc_measurements_ignored.labels("unknown_algorithm").inc()
            return
        offered = outcome.decision.congestion_controls
        if offered and m.algorithm not in offered:
            if outcome.metrics is not None:
                outcome.metrics.cc_measurements_ignored.labels("not_offered").inc()
            return
        metrics = measured_metrics(m)
        if metrics:
            await outcome.store.record_cc_measurement(profile, m.algorithm, metrics)
