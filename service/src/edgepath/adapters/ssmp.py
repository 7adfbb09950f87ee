"""CDN server selection (``server_selection``): SSMP, Yang et al. (:mod:`edgepath.engines.ssmp`).

Reads the request's ``content`` block (none: the section stays unset) and the candidates'
stored scores (``StateStore.get_server_scores``: Q, last update, per-path B and p); learns from an
outcome's ``server_transfer``: Q_new of the completed transfer (Eq. 2) smoothed into the server's
stored score (Eq. 3, ``StateStore.update_server_score``), and each reported path's B and p folded
into the server's stored per-path estimates with the same EWMA weight α.

Every device's selection reads those stored scores, so what one outcome may contribute is bounded: the outcome
guard (:mod:`edgepath.security.plausibility`) refuses a transfer from a server the decision was not choosing
among, and one whose goodput or any path's B is above the reporting device's plausibility bound
(``plausibility_factor`` × the capacity it reported in the decision's context); Q_new and each B are taken at
most at that bound here (``OutcomeInput.max_rate_bps``).

Per-path B and p (§IV-B-1: B is "based on the previous transmission"): a candidate path the device
sends without ``loss`` or ``bandwidth_bps`` takes the server's stored estimate for that interface, so
a device that only measures RTTs at decision time (its pings) still gets the elephant rule once the
server has carried one of its transfers; values the device sends win over stored ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edgepath import types as ep_types
from edgepath.adapters.base import DecisionInput, EngineAdapter, OutcomeInput
from edgepath.engines import ssmp
from edgepath.settings import Settings
from edgepath.state.base import PathEstimate, ServerScore, StateStore


def ssmp_config(settings: Settings) -> ssmp.SsmpConfig:
    """The SSMP engine's parameters from ``settings.ssmp`` (``EDGEPATH_SSMP__*``)."""
    return ssmp.SsmpConfig(
        mice_threshold_bytes=settings.ssmp.mice_threshold_bytes,
        alpha=settings.ssmp.alpha,
        stale_age_s=settings.ssmp.stale_age_s,
    )


def ssmp_selector(settings: Settings) -> ssmp.SsmpSelector:
    """The SSMP engine configured from settings (seeded RNG for its random picks)."""
    return ssmp.SsmpSelector(ssmp_config(settings), np.random.default_rng(settings.seed))


def with_stored_paths(
    paths: Sequence[ssmp.PathLike], stored: ServerScore | None, fresh: bool
) -> tuple[ssmp.PathMeasurement, ...]:
    """``paths`` with a missing ``loss``/``bandwidth_bps`` taken from the server's stored per-interface estimate.

    Stored estimates are used only when ``fresh`` (not older than ``ssmp_stale_age_s``: the paper calls
    older history useless); a value the device measured is never replaced.
    """
    known = stored.paths if stored is not None and fresh else {}
    out = []
    for p in paths:
        est = known.get(p.interface) or PathEstimate()
        out.append(
            ssmp.PathMeasurement(
                interface=p.interface,
                rtt_ms_samples=tuple(p.rtt_ms_samples),
                loss=p.loss if p.loss is not None else est.loss,
                bandwidth_bps=p.bandwidth_bps if p.bandwidth_bps is not None else est.bandwidth_bps,
            )
        )
    return tuple(out)


def _ewma(new: float | None, old: float | None, alpha: float) -> float | None:
    if new is None:
        return old
    return new if old is None else alpha * new + (1.0 - alpha) * old


async def select_server(
    selector: ssmp.SsmpSelector, store: StateStore, content: ep_types.ContentRequest, now_s: float
) -> ep_types.ServerSelection:
    """SSMP choice for ``content``, reading the candidates' stored scores (Q, last update, per-path B and p)."""
    keys = list(dict.fromkeys(c.address for c in content.candidates))
    stored = await store.get_server_scores(keys)
    states = {k: ssmp.ServerState(s.q_bps, s.updated_at) for k, s in stored.items()}
    stale_age_s = selector.config.stale_age_s
    candidates = [
        ssmp.Candidate(
            address=c.address,
            dns_interface=c.dns_interface,
            paths=with_stored_paths(
                c.paths,
                stored.get(c.address),
                not ssmp.is_stale(states.get(c.address), now_s, stale_age_s),
            ),
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
) -> None:
    """Fold a completed transfer into the server's stored score and per-path B and p.

    Q_new is Eq. 2 on the transfer's paths (a path's missing B or p taken from the stored, fresh
    estimate), else the transfer's goodput (:func:`edgepath.engines.ssmp.transfer_q_new_bps`); it is
    smoothed by Eq. 3. Each path's reported B and p are smoothed into the stored ones with the same
    α (a stale stored estimate is replaced, as Eq. 3 does with a stale Q).

    ``max_rate_bps`` bounds what one transfer contributes, bit/s: each path's B and Q_new are taken at most at
    it (``OutcomeInput.max_rate_bps``: the outcome guard's plausibility bound for the reporting device, which has
    already refused a report whose B or goodput exceeds it). Eq. 2 sums over paths, and a path's B missing from
    the report comes from the stored estimates, so Q_new could otherwise exceed the device's whole capacity;
    the stored score is read by every device's selection.
    """
    prev = (await store.get_server_scores([transfer.address])).get(transfer.address)
    prev_state = ssmp.ServerState(prev.q_bps, prev.updated_at) if prev else None
    fresh = not ssmp.is_stale(prev_state, now_s, selector.config.stale_age_s)
    reported = transfer.paths
    if any(p.bandwidth_bps is not None and p.bandwidth_bps > max_rate_bps for p in reported):
        reported = [
            p.model_copy(update={"bandwidth_bps": max_rate_bps})
            if p.bandwidth_bps is not None and p.bandwidth_bps > max_rate_bps
            else p
            for p in reported
        ]
    paths = with_stored_paths(reported, prev, fresh)
    q_new = min(ssmp.transfer_q_new_bps(transfer.size_bytes, transfer.duration_ms, paths), max_rate_bps)
    state = selector.update(q_new, prev_state, now_s)
    alpha = selector.config.alpha
    estimates: dict[str, PathEstimate] = dict(prev.paths) if prev is not None and fresh else {}
    for p in reported:
        old = estimates.get(p.interface) or PathEstimate()
        estimates[p.interface] = PathEstimate(
            bandwidth_bps=_ewma(p.bandwidth_bps, old.bandwidth_bps, alpha), loss=_ewma(p.loss, old.loss, alpha)
        )
    await store.update_server_score(transfer.address, state.q_bps, state.updated_at, estimates)


class SsmpAdapter(EngineAdapter):
    """``server_selection`` when the request names content (settings ``ssmp_*``, ``seed``)."""

    section = "server_selection"

    def __init__(self, settings: Settings) -> None:
        self.selector = ssmp_selector(settings)

    async def recommend(self, decision: DecisionInput) -> ep_types.ServerSelection | None:
        content = decision.request.content
        if content is None:
            return None
        return await select_server(self.selector, decision.store, content, decision.now_s)

    async def recommend_batch(self, decisions: Sequence[DecisionInput]) -> list[ep_types.ServerSelection | None]:
        """:meth:`recommend` of every item of a ``RecommendBatch``, in order (only items with content await)."""
        return [
            None
            if d.request.content is None
            else await select_server(self.selector, d.store, d.request.content, d.now_s)
            for d in decisions
        ]

    async def learn(self, outcome: OutcomeInput) -> None:
        if outcome.report.server_transfer is not None:
            await record_server_transfer(
                self.selector, outcome.store, outcome.report.server_transfer, outcome.now_s, outcome.max_rate_bps
            )
