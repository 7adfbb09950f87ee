"""DecisionPlane: the one transport-independent handler layer.

Both transports (``rest/``, ``grpc/``) convert their requests into the
validated models of :mod:`edgepath.types`, call the plane with the caller's
:class:`~edgepath.types.Principal`, and map :class:`~edgepath.errors.EdgePathError`
kinds to their status codes. The plane decides with the serving model, logs
the decision record in the state store, and turns outcomes into rewards for the
trainer.
"""

from __future__ import annotations

import math
import secrets
import time

import numpy as np

from edgepath import types as ep_types
from edgepath.engines import congestion, mlpm, ssmp
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


def new_decision_id() -> str:
    """128 random bits, URL-safe: unguessable, so a decision id cannot be forged."""
    return secrets.token_urlsafe(16)


# --- MLPM scheduler weights + congestion-control advice (issue 3) -------------------------------------------------
def scheduler_advice(request: RecommendRequest, settings: Settings) -> ep_types.SchedulerAdvice:
    """MLPM weights for every interface of ``request`` (Silva et al. 2020; see :mod:`edgepath.engines.mlpm`).

    Interfaces without a history fall back to their current ``rtt_ms`` (trend 0);
    with nothing known the weights are uniform and ``reason`` says so.
    """
    by_name = {h.interface: h for h in request.subflow_histories}
    histories = []
    for iface in request.interfaces:
        h = by_name.get(iface.name)
        histories.append(
            mlpm.SubflowHistory(
                interface=iface.name,
                rtt_ms=[mlpm.Sample(s.t_ms / 1000.0, s.rtt_ms) for s in h.rtt_samples] if h else (),
                throughput_bps=[mlpm.Sample(s.t_ms / 1000.0, s.throughput_bps) for s in h.throughput_samples]
                if h
                else (),
                current_rtt_ms=iface.rtt_ms,
            )
        )
    d = mlpm.decide(
        histories,
        priority=mlpm.PROFILE_PRIORITY[request.application_profile],
        window=settings.mlpm_window,
        horizon_s=settings.mlpm_horizon_s,
        gain=settings.mlpm_gain,
        bias=settings.mlpm_bias,
    )
    weights = []
    for s in d.subflows:
        r, t = s.rtt_ms, s.throughput_bps
        weights.append(
            ep_types.SubflowWeight(
                interface=s.interface,
                weight=min(max(s.weight, 0.0), 1.0),
                score=s.score,
                rtt_ms=r.current if r else None,
                rtt_slope_ms_per_s=r.slope_per_s if r else None,
                rtt_forecast_ms=r.forecast if r else None,
                rtt_samples=r.samples if r else 0,
                throughput_bps=t.current if t else None,
                throughput_slope_bps_per_s=t.slope_per_s if t else None,
                throughput_forecast_bps=t.forecast if t else None,
                throughput_samples=t.samples if t else 0,
            )
        )
    reason = d.reason
    k = request.kernel
    if k is not None and k.mptcp_schedulers and {x.lower() for x in k.mptcp_schedulers} <= {"default"}:
        reason += "; advisory: the kernel has only the default MPTCP scheduler (apply low weights as backup)"
    return ep_types.SchedulerAdvice(
        weights=weights,
        prioritised_subflow=d.prioritised_subflow,
        priority=d.priority.value,
        features_used=list(d.features_used),
        horizon_s=d.horizon_s,
        bias=d.bias,
        reason=reason,
    )


def congestion_advice(request: RecommendRequest) -> ep_types.CongestionAdvice:
    """Congestion-control pair for the request's profile and kernel (Łuczak et al. 2023, Table 3)."""
    k = request.kernel
    caps = (
        congestion.KernelCapabilities(
            available_congestion_controls=tuple(k.available_congestion_controls),
            allowed_congestion_controls=tuple(k.allowed_congestion_controls),
            mptcp_schedulers=tuple(k.mptcp_schedulers),
            path_managers=tuple(k.path_managers),
        )
        if k is not None
        else congestion.KernelCapabilities()
    )
    a = congestion.advise(request.application_profile, caps)
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


# --- end issue 3 ----------------------------------------------------------------------------------------------------


# --- SSMP CDN server selection (issue 4) ----------------------------------------------------------------------------
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


# --- end issue 4 ----------------------------------------------------------------------------------------------------


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
    ) -> None:
        self.registry = registry
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.guard = guard  # security: outcome plausibility, per-device cap, quarantine (None = admit all)
        self.ssmp = ssmp_selector(settings)  # issue 4

    async def recommend(self, principal: Principal, request: RecommendRequest) -> Recommendation:
        """Decide the primary path for ``request`` and log the decision.

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
        record = DecisionRecord(
            decision_id=new_decision_id(),
            device_id=request.device_id,
            model_version=serving.version,
            policy=serving.model.policy_name,
            arms=tuple(a.value for a in choice.arms),
            arm_index=choice.arm_index,
            interface=choice.interface,
            propensity=choice.propensity,
            features=tuple(float(v) for v in choice.features),
            decided_at=now,
            link_speed_mbps=reported_link_speeds_mbps([a.value for a in choice.arms], request.interfaces),
        )
        await self.store.put_decision(record, self.settings.decision_ttl_s)
        self.metrics.decisions.labels(record.policy, choice.access_type.value).inc()
        # issue 4: SSMP server selection when the device names a content request
        selection = await select_server(self.ssmp, self.store, request.content, now) if request.content else None
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
            scheduler=scheduler_advice(request, self.settings),  # issue 3
            congestion=congestion_advice(request),  # issue 3
            server_selection=selection,  # issue 4
        )

    async def report_outcome(self, principal: Principal, report: OutcomeReport) -> OutcomeAck:
        """Join an outcome with its decision, compute the reward and queue it for training.

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
        if result is ClaimResult.NEW and report.server_transfer is not None:  # issue 4: once per outcome
            await record_server_transfer(self.ssmp, self.store, report.server_transfer, time.time())
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
        """True when the plane can decide and record (state store reachable)."""
        return await self.store.ping()
