"""CDN server selection (``server_selection``): SSMP, Yang et al. (:mod:`edgepath.engines.ssmp`).

Reads the request's ``content`` block (none: the section stays unset) and the candidates'
stored scores (``StateStore.get_server_scores``: Q, last update); learns from an outcome's
``server_transfer``: Q_new of the completed transfer (Eq. 2) smoothed into the server's stored
score (Eq. 3, ``StateStore.update_server_score``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edgepath import types as ep_types
from edgepath.adapters.base import DecisionInput, EngineAdapter, OutcomeInput
from edgepath.engines import ssmp
from edgepath.settings import Settings
from edgepath.state.base import StateStore


def ssmp_selector(settings: Settings) -> ssmp.SsmpSelector:
    """The SSMP engine configured from settings (seeded RNG for its random picks)."""
    config = ssmp.SsmpConfig(
        mice_threshold_bytes=settings.ssmp_mice_threshold_bytes,
        alpha=settings.ssmp_alpha,
        stale_age_s=settings.ssmp_stale_age_s,
    )
    return ssmp.SsmpSelector(config, np.random.default_rng(settings.seed))


async def select_server(
    selector: ssmp.SsmpSelector, store: StateStore, content: ep_types.ContentRequest, now_s: float
) -> ep_types.ServerSelection:
    """SSMP choice for ``content``, reading the candidates' stored scores (Q, last update)."""
    keys = list(dict.fromkeys(c.address for c in content.candidates))
    stored = await store.get_server_scores(keys)
    states = {k: ssmp.ServerState(s.q_bps, s.updated_at) for k, s in stored.items()}
    default_index = next(
        (i for i, c in enumerate(content.candidates) if c.dns_interface == content.default_interface), 0
    )
    sel = selector.decide(content.expected_size_bytes, content.candidates, states, now_s, default_index)
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
    selector: ssmp.SsmpSelector, store: StateStore, transfer: ep_types.ServerTransfer, now_s: float
) -> None:
    """Fold a completed transfer into the server's stored score (Q_new, then EWMA Eq. 3)."""
    q_new = ssmp.transfer_q_new_bps(transfer.size_bytes, transfer.duration_ms, transfer.paths)
    prev = (await store.get_server_scores([transfer.address])).get(transfer.address)
    state = selector.update(q_new, ssmp.ServerState(prev.q_bps, prev.updated_at) if prev else None, now_s)
    await store.update_server_score(transfer.address, state.q_bps, state.updated_at)


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
            await record_server_transfer(self.selector, outcome.store, outcome.report.server_transfer, outcome.now_s)
