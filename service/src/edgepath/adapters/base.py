"""The engine-adapter protocol: how the decision plane runs one recommendation section.

An engine (:mod:`edgepath.engines`) is pure: numbers in, a decision out, no I/O. Its
*adapter* is the small piece between it and the plane, and every adapter has the same
shape, :class:`EngineAdapter`:

``section``
    The :class:`~edgepath.types.Recommendation` member it fills (``"scheduler"``,
    ``"congestion"``, ``"server_selection"``, …).
``recommend(decision)``
    What it reads — the validated request, the state store, the primary-path decision
    just logged (:class:`DecisionInput`) — and the section it returns: a pydantic model,
    or None to leave the section unset.
``recommend_batch(decisions)`` (optional)
    The sections of every item of a ``RecommendBatch``, in order — what ``recommend`` per item would
    return, computed without one await per item. Adapters without it are called per item.
``reads`` (optional)
    The sections of earlier adapters it builds on (the steering rule reads ``scheduler``): when a request names
    only some sections (``RecommendRequest.sections``, issue 16), the plane also runs these for it, and leaves them
    out of the reply unless named.
``learn(outcome)``
    What it learns from an outcome (:class:`OutcomeInput`). The plane calls it once per
    decision, for the first accepted outcome only (never for a duplicate, an unknown
    decision or a quarantined device). The default learns nothing.

Adapters are built from :class:`~edgepath.settings.Settings` and registered in one place,
:data:`edgepath.adapters.registry.ENGINES`; the plane runs them in that order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from edgepath.metrics import Metrics
from edgepath.settings import Settings
from edgepath.state.base import DecisionRecord, StateStore
from edgepath.types import OutcomeReport, RecommendRequest


def cacheable_context(request: RecommendRequest) -> bool:
    """Whether ``request``'s sections may be cached per context: True when it carries no ``subflow_histories``.

    Without histories MLPM, and so the steering rule, read only the request's interfaces, profile and kernel,
    which repeat across devices and calls: the adapters cache those sections per context (bounded LRU) and hand
    the same frozen object to every reply of that context, and the gRPC encoder converts such a shared object
    once (``edgepath.grpc.convert``). An agent's histories move with every request (issue 16): its MLPM section is
    computed, and encoded, for that request alone (the steering adapter still shares one section per distinct
    rule, whatever the context). The one place this rule is written.
    """
    return not request.subflow_histories


@dataclass(frozen=True)
class DecisionInput:
    """What an adapter may read to build its section.

    ``record`` is the primary-path decision the plane has just logged (its ``decision_id``
    is what outcomes join on); ``now_s`` is the decision time, Unix seconds. ``sections`` holds
    the sections of the adapters registered before this one (by section name), so an adapter
    may build on an earlier engine's output (the steering rule reads ``scheduler``).
    """

    request: RecommendRequest
    store: StateStore
    record: DecisionRecord
    now_s: float
    sections: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OutcomeInput:
    """What an adapter may learn from: the device's report, the decision it answers, the store.

    ``now_s`` is the time the outcome was accepted, Unix seconds. ``max_rate_bps`` is the largest rate, bit/s, the
    device can plausibly have measured on this decision (the outcome guard's bound:
    :meth:`~edgepath.security.plausibility.OutcomeGuard.max_throughput_bps`, ``plausibility_factor`` × the
    capacity the device reported in the decision's context); ``math.inf`` without a guard. An adapter bounds any
    rate it derives from the report (SSMP's Eq. 2 score) by it. ``metrics`` are the serving process's, for what an
    adapter counts while it learns (None: nothing is counted, e.g. an adapter driven alone by a test).
    """

    report: OutcomeReport
    decision: DecisionRecord
    store: StateStore
    now_s: float
    max_rate_bps: float = math.inf
    metrics: Metrics | None = None


class EngineAdapter(Protocol):
    """One recommendation section: what it reads, what it returns, what it learns (module docstring)."""

    #: The Recommendation member this adapter fills.
    section: str

    async def recommend(self, decision: DecisionInput) -> BaseModel | None:
        """The section for ``decision.request``, or None to leave it unset."""
        ...

    async def learn(self, outcome: OutcomeInput) -> None:
        """Fold an accepted outcome into the engine's state (default: nothing to learn)."""
        return None


#: How the registry builds an adapter: an adapter class taking the settings is one.
EngineFactory = Callable[[Settings], EngineAdapter]
