"""Congestion-control advice (``congestion``): Łuczak et al., Future Internet 2023, Table 3.

Reads the request's ``application_profile`` and ``kernel`` capabilities (none reported: a
mainline kernel is assumed; :mod:`edgepath.engines.congestion`); learns nothing from outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from edgepath import types as ep_types
from edgepath.adapters.base import DecisionInput, EngineAdapter
from edgepath.engines import congestion
from edgepath.settings import Settings


def congestion_advice(request: ep_types.RecommendRequest) -> ep_types.CongestionAdvice:
    """Congestion-control pair for the request's profile and kernel (Łuczak et al. 2023, Table 3).

    The advice depends on nothing else, so it is computed once per (profile, capabilities) and the
    immutable answer shared (issue 16: the ranking was ~10 % of a decision's CPU).
    """
    k = request.kernel
    key = (
        None
        if k is None
        else (
            tuple(k.available_congestion_controls),
            tuple(k.allowed_congestion_controls),
            tuple(k.mptcp_schedulers),
            tuple(k.path_managers),
        )
    )
    return _advice(request.application_profile, key)


@lru_cache(maxsize=4096)
def _advice(
    profile: ep_types.ApplicationProfile,
    kernel: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None,
) -> ep_types.CongestionAdvice:
    caps = (
        ep_types.KernelCapabilities(
            available_congestion_controls=list(kernel[0]),
            allowed_congestion_controls=list(kernel[1]),
            mptcp_schedulers=list(kernel[2]),
            path_managers=list(kernel[3]),
        )
        if kernel is not None
        else ep_types.KernelCapabilities()
    )
    a = congestion.advise(profile, caps)
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


class CongestionAdapter(EngineAdapter):
    """``congestion`` in every recommendation (no settings)."""

    section = "congestion"

    def __init__(self, settings: Settings) -> None:
        del settings  # Table 3 is data; nothing to configure

    async def recommend(self, decision: DecisionInput) -> ep_types.CongestionAdvice:
        return congestion_advice(decision.request)

    async def recommend_batch(self, decisions: Sequence[DecisionInput]) -> list[ep_types.CongestionAdvice]:
        """:meth:`recommend` of every item of a ``RecommendBatch`` (no await per item)."""
        return [congestion_advice(d.request) for d in decisions]
