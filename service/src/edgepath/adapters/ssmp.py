"""CDN server selection (``server_selection``): SSMP, Yang et al. (:mod:`edgepath.engines.ssmp`).

Reads the request's ``content`` block (none: the section stays unset) and, per candidate, the stored scores the
device sees (``StateStore.get_server_views``: Q, last update, per-path B and p); learns from an outcome's
``server_transfer``: Q_new of the completed transfer (Eq. 2) smoothed into the *device's own* score of that server
(Eq. 3, ``StateStore.record_device_server_score``), and each reported path's B and p folded into the device's own
per-path estimates with the same EWMA weight α.

Per-device scores and a fleet score (Yang et al. run SSMP on each client, on its own measurements). Each (server,
device) keeps its own Eq. 3 state; the store keeps beside them, per server, a *fleet* state: the median, over at
most ``fleet_devices`` devices with a fresh state (the most recently updated), of their Q, and per interface of their
B and p (:func:`edgepath.state.base.fleet_score`), computed when a device's state is written, so that a selection
reads one stored value per candidate and per source. A device's selection uses, per candidate server, its own state
when it is fresh (not older than ``stale_age_s``), else the fleet's. What one device reports thus moves its own
selection as the paper's SSMP would, and every other device's by at most one rank of the fleet median.

What one outcome may contribute is bounded as well: the outcome guard (:mod:`edgepath.security.plausibility`)
refuses a transfer from a server the decision was not choosing among, and one whose goodput or any path's B is
above the reporting device's plausibility bound (``plausibility_factor`` × the capacity it reported in the
decision's context); Q_new and each B are taken at most at that bound here (``OutcomeInput.max_rate_bps``).

Per-path B and p (§IV-B-1: B is "based on the previous transmission"): a candidate path the device
sends without ``loss`` or ``bandwidth_bps`` takes the device's own fresh estimate for that interface, else the fleet's
fresh one, so a device that only measures RTTs at decision time (its pings) still gets the elephant rule once the
server has carried one of its transfers (or a majority of the fleet's devices report that interface); values the
device sends win over stored ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edgepath import types as ep_types
from edgepath.adapters.base import DecisionInput, EngineAdapter, OutcomeInput
from edgepath.engines import ssmp
from edgepath.settings import Settings
from edgepath.state.base import PathEstimate, ServerScore, ServerScoreView, StateStore

#: Path estimates one device's state of one server keeps, the most recently reported first (bounded memory: a device
#: may name any interface the wire's pattern allows).
MAX_STORED_PATHS = ep_types.MAX_INTERFACES


def ssmp_config(settings: Settings) -> ssmp.SsmpConfig:
    """The SSMP engine's parameters from ``settings.ssmp`` (``EDGEPATH_SSMP__*``)."""
    return ssmp.SsmpConfig(
        mice_threshold_bytes=settings.ssmp.mice_threshold_bytes,
        alpha=settings.ssmp.alpha,
        stale_age_s=settings.ssmp.stale_age_s,
        fleet_devices=settings.ssmp.fleet_devices,
    )


def ssmp_selector(settings: Settings) -> ssmp.SsmpSelector:
    """The SSMP engine configured from settings (seeded RNG for its random picks)."""
    return ssmp.SsmpSelector(ssmp_config(settings), np.random.default_rng(settings.seed))


def _fresh(score: ServerScore | None, now_s: float, stale_age_s: float) -> ServerScore | None:
    """``score`` when it is not older than ``stale_age_s`` at ``now_s`` (Unix s; :func:`ssmp.is_stale`), else None."""
    if score is None or now_s - score.updated_at > stale_age_s:
        return None
    return score


def device_state(
    view: ServerScoreView, now_s: float, stale_age_s: float
) -> tuple[ServerScore | None, ServerScore | None, ServerScore | None]:
    """What a device's selection uses of one server: ``(state, own, fleet)``, ``own`` and ``fleet`` the view's fresh
    states (None: none, or stale) and ``state`` the one whose Q counts: its own when fresh, else the fleet's, fresh
    or not (a stale one is reported stale by the engine and not smoothed in); None when neither is stored."""
    own = _fresh(view.own, now_s, stale_age_s)
    fleet = _fresh(view.fleet, now_s, stale_age_s)
    return own or view.fleet or view.own, own, fleet


def with_stored_paths(paths: Sequence[ssmp.PathLike], *stored: ServerScore | None) -> tuple[ssmp.PathMeasurement, ...]:
    """``paths`` with a missing ``loss``/``bandwidth_bps`` taken from the first of ``stored`` that has it for the
    path's interface (the caller passes fresh states only, the device's own before the fleet's: the paper calls
    older history useless); a value the device measured is never replaced."""
    sources = [s.paths for s in stored if s is not None]
    out = []
    for p in paths:
        loss, bandwidth = p.loss, p.bandwidth_bps
        for known in sources:
            est = known.get(p.interface)
            if est is not None:
                loss = est.loss if loss is None else loss
                bandwidth = est.bandwidth_bps if bandwidth is None else bandwidth
        out.append(
            ssmp.PathMeasurement(
                interface=p.interface, rtt_ms_samples=tuple(p.rtt_ms_samples), loss=loss, bandwidth_bps=bandwidth
            )
        )
    return tuple(out)


def _ewma(new: float | None, old: float | None, alpha: float) -> float | None:
    if new is None:
        return old
    return new if old is None else alpha * new + (1.0 - alpha) * old


async def select_server(
    selector: ssmp.SsmpSelector,
    store: StateStore,
    content: ep_types.ContentRequest,
    now_s: float,
    device_id: str,
) -> ep_types.ServerSelection:
    """SSMP choice for ``content`` asked by ``device_id``: per candidate, the device's own fresh stored state, else
    the fleet's (Q, last update, per-path B and p; one store call, :meth:`StateStore.get_server_views`)."""
    keys = list(dict.fromkeys(c.address for c in content.candidates))
    views = await store.get_server_views(keys, device_id)
    stale_age_s = selector.config.stale_age_s
    states: dict[str, ssmp.ServerState] = {}
    fill: dict[str, tuple[ServerScore | None, ServerScore | None]] = {}
    for key, view in views.items():
        used, own, fleet = device_state(view, now_s, stale_age_s)
        if used is not None:
            states[key] = ssmp.ServerState(used.q_bps, used.updated_at)
        fill[key] = (own, fleet)
    candidates = [
        ssmp.Candidate(
            address=c.address,
            dns_interface=c.dns_interface,
            paths=with_stored_paths(c.paths, *fill.get(c.address, ())),
        )
        for c in content.candidates
    ]
    default_index = next(
        (i for i, c in enumerate(content.candidates) if c.dns_interface == content.default_interface), 0
    )
    sel = selector.decide(content.expected_size_bytes, candidates, states, now_s, default_index)
    return ep_types.ServerSelection(
        address=sel.address,
        candidate_index=sel.candidate_index,
        flow_class=sel.flow_class.value,
        score=None if math.isnan(sel.score) else sel.score,
        score_name=sel.score_name,
        initial_subflow_interface=sel.initial_subflow_interface,
        rule=sel.rule.value,
        stale_servers=list(sel.stale_servers),
    )


async def record_server_transfer(
    selector: ssmp.SsmpSelector,
    store: StateStore,
    transfer: ep_types.ServerTransfer,
    now_s: float,
    max_rate_bps: float = math.inf,
    *,
    device_id: str,
) -> None:
    """Fold a completed transfer reported by ``device_id`` into that device's own state of the server (its Q, per-path
    B and p), and so into the server's fleet state (:meth:`StateStore.record_device_server_score`).

    Q_new is Eq. 2 on the transfer's paths (a path's missing B or p taken from the device's own fresh estimate, else
    the fleet's), else the transfer's goodput (:func:`edgepath.engines.ssmp.transfer_q_new_bps`); it is smoothed by
    Eq. 3 with the device's own previous Q (none, or a stale one: Q_new alone, as the paper's client without
    history). Each path's reported B and p are smoothed into the device's own with the same α (a stale one is
    replaced); its other fresh estimates are kept, the most recently reported :data:`MAX_STORED_PATHS` in all.

    ``max_rate_bps`` bounds what one transfer contributes, bit/s: each path's B and Q_new are taken at most at
    it (``OutcomeInput.max_rate_bps``: the outcome guard's plausibility bound for the reporting device, which has
    already refused a report whose B or goodput exceeds it). Eq. 2 sums over paths, and a path's B missing from
    the report comes from the stored estimates, so Q_new could otherwise exceed the device's whole capacity.
    """
    stale_age_s = selector.config.stale_age_s
    view = (await store.get_server_views([transfer.address], device_id)).get(transfer.address)
    _, own, fleet = device_state(view or ServerScoreView(), now_s, stale_age_s)
    reported = transfer.paths
    if any(p.bandwidth_bps is not None and p.bandwidth_bps > max_rate_bps for p in reported):
        reported = [
            p.model_copy(update={"bandwidth_bps": max_rate_bps})
            if p.bandwidth_bps is not None and p.bandwidth_bps > max_rate_bps
            else p
            for p in reported
        ]
    paths = with_stored_paths(reported, own, fleet)
    q_new = min(ssmp.transfer_q_new_bps(transfer.size_bytes, transfer.duration_ms, paths), max_rate_bps)
    state = selector.update(q_new, None if own is None else ssmp.ServerState(own.q_bps, own.updated_at), now_s)
    alpha = selector.config.alpha
    estimates: dict[str, PathEstimate] = {}
    for p in reported:
        old = (own.paths.get(p.interface) if own is not None else None) or PathEstimate()
        estimates[p.interface] = PathEstimate(
            bandwidth_bps=_ewma(p.bandwidth_bps, old.bandwidth_bps, alpha), loss=_ewma(p.loss, old.loss, alpha)
        )
    if own is not None:
        for name, est in own.paths.items():
            if len(estimates) >= MAX_STORED_PATHS:
                break
            estimates.setdefault(name, est)
    score = ServerScore(q_bps=state.q_bps, updated_at=state.updated_at, paths=estimates)
    await store.record_device_server_score(
        transfer.address, device_id, score, stale_age_s, selector.config.fleet_devices
    )


class SsmpAdapter(EngineAdapter):
    """``server_selection`` when the request names content (settings ``ssmp_*``, ``seed``)."""

    section = "server_selection"

    def __init__(self, settings: Settings) -> None:
        self.selector = ssmp_selector(settings)

    async def recommend(self, decision: DecisionInput) -> ep_types.ServerSelection | None:
        content = decision.request.content
        if content is None:
            return None
        return await select_server(self.selector, decision.store, content, decision.now_s, decision.request.device_id)

    async def recommend_batch(self, decisions: Sequence[DecisionInput]) -> list[ep_types.ServerSelection | None]:
        """:meth:`recommend` of every item of a ``RecommendBatch``, in order (only items with content await)."""
        return [
            None
            if d.request.content is None
            else await select_server(self.selector, d.store, d.request.content, d.now_s, d.request.device_id)
            for d in decisions
        ]

    async def learn(self, outcome: OutcomeInput) -> None:
        """Fold the report's ``server_transfer`` into the deciding device's own score of that server
        (:func:`record_server_transfer`; the device is the decision's, which the plane has checked is the
        reporter's)."""
        if outcome.report.server_transfer is not None:
            await record_server_transfer(
                self.selector,
                outcome.store,
                outcome.report.server_transfer,
                outcome.now_s,
                outcome.max_rate_bps,
                device_id=outcome.decision.device_id,
            )
