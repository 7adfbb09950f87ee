"""DecisionPlane: the one transport-independent handler layer.

Both transports (``rest/``, ``grpc/``) convert their requests into the
validated models of :mod:`edgepath.types`, call the plane with the caller's
:class:`~edgepath.types.Principal`, and map :class:`~edgepath.errors.EdgePathError`
kinds to their status codes. The plane decides the primary path with the serving model, logs the
decision record in the state store, runs every registered engine adapter
(:mod:`edgepath.adapters`: scheduler weights, congestion advice, server
selection, …) for the other sections, and turns outcomes into rewards for the
trainer and lessons for the adapters.

The primary path is not an adapter: its decision *is* the record every outcome
joins on (decision id, propensity, features), and it learns through the outcome
log and the trainer (:mod:`edgepath.training.online`), not in the request.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

from edgepath.adapters.base import DecisionInput, EngineAdapter, OutcomeInput
from edgepath.adapters.registry import build_engines
from edgepath.engines.reward import bernoulli_reward
from edgepath.errors import NotFound, PermissionDenied, Unavailable
from edgepath.metrics import Metrics
from edgepath.security.plausibility import OutcomeGuard, reported_link_speeds_mbps
from edgepath.settings import Settings
from edgepath.state.base import ClaimResult, DecisionRecord, OutcomeRecord, StateStore
from edgepath.training.online import ModelRegistry
from edgepath.types import (
    OutcomeAck,
    OutcomeReport,
    PrimaryPath,
    Principal,
    Recommendation,
    RecommendRequest,
)

#: Recommendation members the plane fills from the decision record; no engine section may take these names.
_RECORD_MEMBERS = frozenset({"decision_id", "model_version", "policy", "primary_path", "decided_at_unix_ms"})


def new_decision_id() -> str:
    """128 random bits, URL-safe: unguessable, so a decision id cannot be forged."""
    return secrets.token_urlsafe(16)


class DecisionPlane:
    """Handles ``Recommend`` and ``ReportOutcome`` for every transport."""

    def __init__(
        self,
        registry: ModelRegistry,
        store: StateStore,
        settings: Settings,
        metrics: Metrics,
        *,
        guard: OutcomeGuard | None = None,
        engines: Sequence[EngineAdapter] | None = None,
    ) -> None:
        """``engines``: the section adapters, in the order they run (default: the registry's, from ``settings``).

        Raises
        ------
        ValueError
            An adapter's section is a decision-record member, or a required section has no adapter.
        """
        self.registry = registry
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.guard = guard  # security: outcome plausibility, per-device cap, quarantine (None = admit all)
        self.draining = False  # set first on SIGTERM (issue 17): readiness false while in-flight calls finish
        self.engines = tuple(build_engines(settings) if engines is None else engines)
        sections = {e.section for e in self.engines}
        if clash := sorted(sections & _RECORD_MEMBERS):
            raise ValueError(f"engine sections {clash} would replace decision-record members")
        required = {n for n, f in Recommendation.model_fields.items() if f.is_required()} - _RECORD_MEMBERS
        if missing := sorted(required - sections):
            raise ValueError(f"no engine adapter fills the required section(s) {missing}")

    async def recommend(self, principal: Principal, request: RecommendRequest) -> Recommendation:
        """Decide the primary path for ``request``, log the decision, then add every engine's section.

        Raises
        ------
        PermissionDenied
            When the request names another device than the caller.
        """
        if principal.device_id != request.device_id and not principal.is_admin:
            raise PermissionDenied("device_id does not match the authenticated device", field="device_id")
        start = time.perf_counter()
        serving = self.registry.current
        choice = serving.model.decide(request.interfaces)
        now = time.time()
        arms = tuple(a.value for a in choice.arms)
        record = DecisionRecord(
            decision_id=new_decision_id(),
            device_id=request.device_id,
            model_version=serving.version,
            policy=serving.model.policy_name,
            arms=arms,
            arm_index=choice.arm_index,
            interface=choice.interface,
            propensity=choice.propensity,
            features=tuple(float(v) for v in choice.features),
            decided_at=now,
            link_speed_mbps=reported_link_speeds_mbps(arms, request.interfaces),
        )
        # Written before the reply, never behind it: an outcome may be reported to any replica at once
        # (tests/service/state/test_redis_replicas.py), so the record must be in the shared store first.
        await self.store.put_decision(record, self.settings.decision_ttl_s)
        self.metrics.decisions.labels(record.policy, choice.access_type.value).inc()
        sections: dict[str, Any] = {}  # filled in registry order; later adapters may read earlier sections
        decided = DecisionInput(request=request, store=self.store, record=record, now_s=now, sections=sections)
        for engine in self.engines:
            sections[engine.section] = await engine.recommend(decided)
        self.metrics.decision_seconds.observe(time.perf_counter() - start)
        return Recommendation(
            decision_id=record.decision_id,
            model_version=serving.version,
            policy=record.policy,
            primary_path=PrimaryPath(
                interface=choice.interface,
                access_type=choice.access_type,
                propensity=choice.propensity,
                arms=list(choice.arms),
            ),
            decided_at_unix_ms=int(now * 1000),
            **sections,
        )

    async def recommend_batch(self, items: Sequence[tuple[Principal, RecommendRequest]]) -> list[Recommendation]:
        """One :meth:`recommend` per ``(caller, request)``, in order (``RecommendBatch``).

        Every item's caller is checked before anything is decided, so a refused batch logs no decision.

        Raises
        ------
        PermissionDenied
            An item names another device than its caller (field ``requests[i].device_id``).
        """
        for i, (principal, request) in enumerate(items):
            if principal.device_id != request.device_id and not principal.is_admin:
                raise PermissionDenied(
                    "device_id does not match the authenticated device", field=f"requests[{i}].device_id"
                )
        return [await self.recommend(principal, request) for principal, request in items]

    async def report_outcome(self, principal: Principal, report: OutcomeReport) -> OutcomeAck:
        """Join an outcome with its decision, compute the reward, queue it for training, let the engines learn.

        Idempotent: a repeated outcome for the same decision is acknowledged
        with ``duplicate=True`` and not counted again.

        Raises
        ------
        NotFound
            Unknown or expired ``decision_id``.
        PermissionDenied
            The decision belongs to another device.
        """
        if principal.device_id != report.device_id and not principal.is_admin:
            raise PermissionDenied("device_id does not match the authenticated device", field="device_id")
        decision = await self.store.get_decision(report.decision_id)
        if decision is None:
            self.metrics.outcomes.labels("unknown").inc()
            raise NotFound("unknown or expired decision", field="decision_id")
        if decision.device_id != report.device_id:
            self.metrics.outcomes.labels("wrong_device").inc()
            raise PermissionDenied("decision belongs to another device", field="decision_id")
        reward = bernoulli_reward(
            report.throughput_bps,
            report.latency_ms,
            throughput_threshold_bps=self.settings.reward_throughput_bps,
            latency_threshold_ms=self.settings.reward_latency_ms,
        )
        # security: bounded learning (raises InvalidInput / RateLimited; False = quarantined, never trained on)
        if self.guard is not None and not await self.guard.admit(decision, report):
            self.metrics.outcomes.labels("quarantined").inc()
            return OutcomeAck(decision_id=report.decision_id, accepted=False, duplicate=False, reward=reward)
        result = await self.store.claim_outcome(
            OutcomeRecord(
                decision_id=decision.decision_id,
                device_id=decision.device_id,
                model_version=decision.model_version,
                arms=decision.arms,
                arm_index=decision.arm_index,
                propensity=decision.propensity,
                features=decision.features,
                throughput_bps=report.throughput_bps,
                latency_ms=report.latency_ms,
                loss=report.loss,
                reward=reward,
                reported_at=time.time(),
            )
        )
        self.metrics.outcomes.labels(result.value).inc()
        if result is ClaimResult.UNKNOWN:
            raise NotFound("unknown or expired decision", field="decision_id")
        if result is ClaimResult.NEW:  # the engines learn once per decision
            lesson = OutcomeInput(report=report, decision=decision, store=self.store, now_s=time.time())
            for engine in self.engines:
                await engine.learn(lesson)
        return OutcomeAck(
            decision_id=report.decision_id,
            accepted=result is ClaimResult.NEW,
            duplicate=result is ClaimResult.DUPLICATE,
            reward=reward,
        )

    # --- security: admin-only quarantine management -------------------------------------------------------------
    def _require_admin(self, principal: Principal) -> OutcomeGuard:
        if not principal.is_admin:
            raise PermissionDenied("admin identity required")
        if self.guard is None:
            raise Unavailable("outcome guard not configured")
        return self.guard

    async def set_quarantine(self, principal: Principal, device_id: str, quarantined: bool) -> list[str]:
        """Quarantine (or release) ``device_id``'s outcomes; returns the quarantined devices.

        Raises
        ------
        PermissionDenied
            The caller is not an admin.
        """
        guard = self._require_admin(principal)
        if quarantined:
            await guard.quarantine.add(device_id)
        else:
            await guard.quarantine.remove(device_id)
        return await guard.quarantine.members()

    async def quarantined_devices(self, principal: Principal) -> list[str]:
        """The quarantined devices (admin only; raises PermissionDenied otherwise)."""
        return await self._require_admin(principal).quarantine.members()

    async def ready(self) -> bool:
        """True when the plane can decide and record (state store reachable) and is not shutting down."""
        if self.draining:
            return False
        return await self.store.ping()
