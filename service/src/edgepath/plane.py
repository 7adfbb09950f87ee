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

import asyncio
import base64
import dataclasses
import enum
import functools
import logging
import math
import secrets
import time
from collections.abc import Sequence
from typing import Any

import orjson

from edgepath.adapters.base import DecisionInput, EngineAdapter, OutcomeInput
from edgepath.adapters.registry import build_engines
from edgepath.engines.apprentice import Apprentice, ApprenticeConfig
from edgepath.engines.features import representative
from edgepath.engines.primary_path import ArmChoice
from edgepath.engines.reward import bernoulli_reward, utility
from edgepath.errors import InvalidInput, NotFound, PermissionDenied, Unavailable
from edgepath.metrics import Metrics
from edgepath.security.plausibility import OutcomeGuard, reported_link_speeds_mbps
from edgepath.settings import Settings
from edgepath.state.base import ClaimResult, DecisionRecord, LoggedDecision, OutcomeRecord, StateStore
from edgepath.training.online import ModelRegistry
from edgepath.types import (
    PRIMARY_PATH_SECTION,
    AccessType,
    ApplicationProfile,
    ContentRequest,
    OutcomeAck,
    OutcomeReport,
    Principal,
    Recommendation,
    RecommendRequest,
    service_output,
)

log = logging.getLogger(__name__)

#: Recommendation members the plane fills from the decision record; no engine section may take these names.
_RECORD_MEMBERS = frozenset({"decision_id", "model_version", "policy", "primary_path", "decided_at_unix_ms"})


def _raw_context(request: RecommendRequest) -> str:
    """The request's interfaces as received (only the fields the device sent), JSON (decision log, issue 18).

    orjson over the validated fields (``AccessType`` is a str enum: written as its value): ~13 µs for two
    interfaces against ~60 µs for pydantic's ``model_dump`` + ``json.dumps`` on the same loaded machine.
    """
    fields = [{k: v for k, v in i.__dict__.items() if v is not None} for i in request.interfaces]
    return orjson.dumps(fields).decode()


def _logged(decision: DecisionRecord, report: OutcomeReport, reward: int) -> LoggedDecision:
    """The decision-log entry of a decision joined with its first outcome (its context read back by orjson, which
    :func:`_raw_context` wrote it with: ~0.6 µs against ~3 for ``json.loads``, per outcome; issue 16)."""
    try:
        context = tuple(orjson.loads(decision.context)) if decision.context else ()
    except ValueError:  # orjson.JSONDecodeError is one
        context = ()
    return LoggedDecision(
        decision_id=decision.decision_id,
        device_id=decision.device_id,
        decided_at=decision.decided_at,
        reported_at=time.time(),
        model_version=decision.model_version,
        policy=decision.policy,
        arms=decision.arms,
        arm_index=decision.arm_index,
        interface=decision.interface,
        propensity=decision.propensity,
        features=decision.features,
        context=context,
        throughput_bps=report.throughput_bps,
        latency_ms=report.latency_ms,
        loss=report.loss,
        reward=reward,
        learner_arm_index=decision.learner_arm_index,
    )


def _recommendation(
    decision_id: str,
    model_version: int,
    policy: str,
    choice: ArmChoice,
    decided_at_unix_ms: int,
    sections: dict[str, Any],
    asked: frozenset[str] | None = None,
) -> Recommendation:
    """The reply of one decision: ``choice`` (the bandit's :class:`~edgepath.engines.primary_path.ArmChoice`) and
    the adapters' ``sections`` (typed models, passed through as they are), built by
    :func:`~edgepath.types.service_output` (raises ``RuntimeError`` if the service's own values are invalid).
    ``asked``: the sections the request named (None: all); a section computed only because a named one reads it
    (``EngineAdapter.reads``) stays out of the reply."""
    if asked is not None:
        sections = {k: v for k, v in sections.items() if k in asked}
    return service_output(
        Recommendation,
        {
            "decision_id": decision_id,
            "model_version": model_version,
            "policy": policy,
            "primary_path": {
                "interface": choice.interface,
                "access_type": choice.access_type,
                "propensity": choice.propensity,
                "arms": list(choice.arms),
            },
            "decided_at_unix_ms": decided_at_unix_ms,
            **sections,
        },
    )


def _wanted(request: RecommendRequest, known: frozenset[str], field_prefix: str = "") -> frozenset[str] | None:
    """The sections ``request`` asks for (``RecommendRequest.sections``, issue 16); None: all of them.

    Raises
    ------
    InvalidInput
        A name is none of ``known`` (field ``{field_prefix}sections[j]``).
    """
    if not request.sections:
        return None
    for j, name in enumerate(request.sections):
        if name not in known:
            raise InvalidInput(
                f"unknown section {name!r}; this service serves {', '.join(sorted(known))}",
                field=f"{field_prefix}sections[{j}]",
            )
    return frozenset(request.sections)


def new_decision_id() -> str:
    """128 random bits, URL-safe: unguessable, so a decision id cannot be forged."""
    return secrets.token_urlsafe(16)


def new_decision_ids(n: int) -> list[str]:
    """``n`` ids of :func:`new_decision_id`'s form (128 random bits each) from one read of the OS generator."""
    raw = secrets.token_bytes(16 * n)
    return [base64.urlsafe_b64encode(raw[i : i + 16]).rstrip(b"=").decode("ascii") for i in range(0, 16 * n, 16)]


#: Each access type's and application profile's name (an enum's ``.value`` is a descriptor call, ~0.4 µs in 3.11;
#: several per decision, issue 16).
_NAME: dict[enum.Enum, str] = {e: e.value for cls in (AccessType, ApplicationProfile) for e in cls}


@functools.cache
def _arm_names(arms: tuple[AccessType, ...]) -> tuple[str, ...]:
    """The names of an arm set (a decision record's ``arms``), one tuple per arm set."""
    return tuple(a.value for a in arms)


def _decision_record(
    decision_id: str, request: RecommendRequest, choice: Any, model_version: int, policy: str, now: float
) -> DecisionRecord:
    """The decision record of one primary-path ``choice`` (single and batch paths alike; ``now`` in Unix s)."""
    arms = _arm_names(choice.arms)
    return DecisionRecord(
        decision_id=decision_id,
        device_id=request.device_id,
        model_version=model_version,
        policy=policy,
        arms=arms,
        arm_index=choice.arm_index,
        interface=choice.interface,
        propensity=choice.propensity,
        features=tuple(choice.features.tolist()),  # (N_FEATURES,) ndarray → Python floats
        decided_at=now,
        link_speed_mbps=reported_link_speeds_mbps(arms, request.interfaces),
        context=_raw_context(request),
        application_profile=_NAME[request.application_profile],  # congestion edge measurements (issue 20)
        congestion_controls=_congestion_controls(request),
        server_candidates=() if request.content is None else _candidate_addresses(request.content),
    )


def _congestion_controls(request: RecommendRequest) -> tuple[str, ...]:
    """The request's ``kernel.available_congestion_controls`` as its decision records them
    (``DecisionRecord.congestion_controls``): lower-cased, in request order; () when it reported none."""
    kernel = request.kernel
    if kernel is None or not kernel.available_congestion_controls:
        return ()
    return _lower_names(tuple(kernel.available_congestion_controls))


@functools.lru_cache(maxsize=1024)
def _lower_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` lower-cased: one tuple per distinct list, shared by every record of it (the in-process store's
    million decisions hold references, not copies)."""
    return tuple(n.lower() for n in names)


def _candidate_addresses(content: ContentRequest) -> tuple[str, ...]:
    """The distinct candidate server addresses of ``content``, in request order (``DecisionRecord.server_candidates``:
    the servers an outcome's ``server_transfer`` may name)."""
    return tuple(dict.fromkeys(c.address for c in content.candidates))


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
            An adapter's section is a decision-record member.
        """
        self.registry = registry
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.guard = guard  # security: outcome plausibility, per-device cap, quarantine (None = admit all)
        self.draining = False  # set first on SIGTERM (issue 17): readiness false while in-flight calls finish
        self._ready_failing = False  # the store's readiness check raised last time (logged once per run)
        self.engines = tuple(build_engines(settings) if engines is None else engines)
        sections = {e.section for e in self.engines}
        if clash := sorted(sections & _RECORD_MEMBERS):
            raise ValueError(f"engine sections {clash} would replace decision-record members")
        #: What a request's ``sections`` may name (issue 16): the primary path and every adapter's section.
        self.section_names = frozenset({PRIMARY_PATH_SECTION, *sections})
        self._runs: dict[frozenset[str], frozenset[str]] = {}  # asked sections → the sections to compute
        # apprentice mode (issue 18): a baseline serves, the bandit learns and is promoted on evidence
        self.apprentice: Apprentice | None = None
        if settings.mode == "apprentice":
            self.apprentice = Apprentice(
                ApprenticeConfig(
                    baseline=settings.apprentice_baseline,
                    explore=settings.apprentice_explore,
                    promote=settings.apprentice_promote,
                    margin=settings.apprentice_margin,
                    min_outcomes=settings.apprentice_min_outcomes,
                    window=settings.apprentice_window,
                    check_every=settings.apprentice_check_every,
                    seed=settings.seed,
                )
            )
        # every decision series of the policies it serves under exported at 0 from the start (issue 22)
        self._count_policies_of(registry.current)
        registry.on_publish(self._count_policies_of)

    async def recommend(self, principal: Principal, request: RecommendRequest) -> Recommendation:
        """Decide the primary path for ``request``, log the decision, then add the engines' sections.

        Only the engines of the sections ``request.sections`` names run (all when it names none), and those of the
        sections they read (:attr:`~edgepath.adapters.base.EngineAdapter.reads`); the reply carries the named ones,
        the others stay None.

        Raises
        ------
        PermissionDenied
            When the request names another device than the caller.
        InvalidInput
            ``request.sections`` names a section this service does not serve (field ``sections[j]``); nothing is
            decided.
        """
        if principal.device_id != request.device_id and not principal.is_admin:
            raise PermissionDenied("device_id does not match the authenticated device", field="device_id")
        asked = _wanted(request, self.section_names)
        run = None if asked is None else self.sections_to_run(asked)
        start = time.perf_counter()
        serving = self.registry.current
        choice = serving.model.decide(request.interfaces, native=self.settings.native_engines)
        policy = serving.model.policy_name
        learner_arm: int | None = None
        baseline_arm: int | None = None
        if self.apprentice is not None and len(choice.arms) > 1:
            served = self.apprentice.serve(choice.arms, request.interfaces, choice.arm_index, choice.probability)
            learner_arm, baseline_arm = choice.arm_index, served.baseline_arm_index
            if not served.by_learner:
                access = choice.arms[served.arm_index]
                iface = representative(request.interfaces, access)
                assert iface is not None  # arms come from the interfaces themselves
                choice = dataclasses.replace(
                    choice,
                    arm_index=served.arm_index,
                    access_type=access,
                    interface=iface.name,
                    # exact while ε/K ≥ the floor (default ε 0.05, K ≤ 4: ε/K ≥ 0.0125); a bound for a smaller ε
                    propensity=max(self.settings.propensity_floor, served.propensity),
                    probability=served.propensity,
                )
                policy = f"apprentice:{self.apprentice.config.baseline}"
        now = time.time()
        record = _decision_record(new_decision_id(), request, choice, serving.version, policy, now)
        if learner_arm is not None:
            record = dataclasses.replace(record, learner_arm_index=learner_arm, baseline_arm_index=baseline_arm)
        # Written before the reply, never behind it: an outcome may be reported to any replica at once
        # (tests/service/state/test_redis_replicas.py), so the record must be in the shared store first. On a
        # network store the write runs beside the adapters (their reads, e.g. the MEC 015 sessions' HVALS, join it
        # in one auto-pipelined round trip) and the reply waits for both.
        write: asyncio.Future[None] | None = None
        if self.store.overlaps_io:
            write = asyncio.ensure_future(self.store.put_decision(record, self.settings.decision_ttl_s))
        else:
            await self.store.put_decision(record, self.settings.decision_ttl_s)
        sections: dict[str, Any] = {}  # filled in registry order; later adapters may read earlier sections
        decided = DecisionInput(request=request, store=self.store, record=record, now_s=now, sections=sections)
        try:
            for engine in self.engines:
                if run is None or engine.section in run:
                    sections[engine.section] = await engine.recommend(decided)
        finally:
            if write is not None:
                await write  # stored before any reply, also when an adapter failed
        self._count_decision(record.policy, choice)
        self.metrics.decision_seconds.observe(time.perf_counter() - start)
        return _recommendation(
            record.decision_id, serving.version, record.policy, choice, int(now * 1000), sections, asked
        )

    def sections_to_run(self, asked: frozenset[str]) -> frozenset[str]:
        """The sections whose adapters run for a request asking for ``asked``: those, and the earlier sections
        their adapters read (``EngineAdapter.reads``: steering reads the scheduler's weights), which the reply
        leaves out unless asked. One entry per distinct ``asked`` (at most 2^k of k section names)."""
        run = self._runs.get(asked)
        if run is None:
            needed = set(asked)
            for engine in reversed(self.engines):  # an adapter reads only earlier ones: one pass closes the set
                if engine.section in needed:
                    needed.update(getattr(engine, "reads", ()))
            run = self._runs[asked] = frozenset(needed)
        return run

    async def recommend_batch(self, items: Sequence[tuple[Principal, RecommendRequest]]) -> list[Recommendation]:
        """Decide every ``(caller, request)`` of a ``RecommendBatch``, in order, as :meth:`recommend` would.

        Vectorised (issue 16): the serving model decides all contexts at once when it can
        (:meth:`~edgepath.engines.primary_path.PrimaryPathBandit.decide_batch`: one feature matrix, one matrix
        product per arm set, the exact propensities of the single path), else one by one; the decision records
        are written in one store call (:meth:`~edgepath.state.base.StateStore.put_decisions`) before any reply;
        each engine adapter then fills its section for every item (its ``recommend_batch`` when it has one,
        else its ``recommend`` per item, items in order, adapters in registry order).
        Every item's caller and ``sections`` are checked before anything is decided, so a refused batch logs no
        decision; an adapter sees only the items whose ``sections`` ask for its section or for one that reads it
        (all items when they name none).

        The batch gives the event loop to the other calls between its stages (before deciding, after the records,
        after each adapter): a batch of 64 agent contexts is 15–30 ms of CPU on a 2-core host, and in one piece every
        call that arrived meanwhile waited for all of it. ``loadtest/batch_interference.py`` (uvloop, memory store,
        200 unary calls/s beside 15 batches of 64 per second): unary p99 33.4 ms in one piece, 18.4 ms with these
        pauses (4.1–4.6 ms without batches); each pause costs ~3 µs.

        Raises
        ------
        PermissionDenied
            An item names another device than its caller (field ``requests[i].device_id``).
        InvalidInput
            An item's ``sections`` names a section this service does not serve (field ``requests[i].sections[j]``).
        """
        asked: list[frozenset[str] | None] = []
        for i, (principal, request) in enumerate(items):
            if principal.device_id != request.device_id and not principal.is_admin:
                raise PermissionDenied(
                    "device_id does not match the authenticated device", field=f"requests[{i}].device_id"
                )
            asked.append(_wanted(request, self.section_names, f"requests[{i}]."))
        if not items:
            return []
        if self.apprentice is not None:  # apprentice mode (issue 18): the per-decision serving rule, one by one
            return [await self.recommend(principal, request) for principal, request in items]
        await asyncio.sleep(0)  # other calls' turn: the transport's decode and validation were one stage
        start = time.perf_counter()
        serving = self.registry.current
        model = serving.model
        requests = [request for _, request in items]
        decide_batch = getattr(model, "decide_batch", None)
        if decide_batch is not None:
            choices = decide_batch([r.interfaces for r in requests], native=self.settings.native_engines)
        else:
            choices = [model.decide(r.interfaces, native=self.settings.native_engines) for r in requests]
        now = time.time()
        policy = model.policy_name
        records = [
            _decision_record(decision_id, request, choice, serving.version, policy, now)
            for request, choice, decision_id in zip(requests, choices, new_decision_ids(len(requests)), strict=True)
        ]
        write: asyncio.Future[None] | None = None  # as in recommend: beside the adapters on a network store
        if self.store.overlaps_io:
            write = asyncio.ensure_future(self.store.put_decisions(records, self.settings.decision_ttl_s))
        else:
            await self.store.put_decisions(records, self.settings.decision_ttl_s)
        await asyncio.sleep(0)  # other calls' turn
        sections: list[dict[str, Any]] = [{} for _ in items]
        runs = [None if a is None else self.sections_to_run(a) for a in asked]
        inputs = [
            DecisionInput(request=request, store=self.store, record=record, now_s=now, sections=item_sections)
            for request, record, item_sections in zip(requests, records, sections, strict=True)
        ]
        try:
            for engine in self.engines:
                chosen = [k for k, r in enumerate(runs) if r is None or engine.section in r]
                if not chosen:
                    continue
                its_inputs = inputs if len(chosen) == len(inputs) else [inputs[k] for k in chosen]
                batch = getattr(engine, "recommend_batch", None)
                if batch is not None:
                    results = await batch(its_inputs)
                else:
                    results = [await engine.recommend(decided) for decided in its_inputs]
                for k, result in zip(chosen, results, strict=True):
                    sections[k][engine.section] = result
                await asyncio.sleep(0)  # other calls' turn
        finally:
            if write is not None:
                await write  # every record stored before any reply
        decided_at_unix_ms = int(now * 1000)
        out = []
        for record, choice, item_sections, item_asked in zip(records, choices, sections, asked, strict=True):
            self._count_decision(policy, choice)
            out.append(
                _recommendation(
                    record.decision_id, serving.version, policy, choice, decided_at_unix_ms, item_sections, item_asked
                )
            )
        elapsed = time.perf_counter() - start
        # the decision-time histogram counts decisions: each gets its share of the batch (wall time, the other
        # calls' turns between its stages included)
        for _ in out:
            self.metrics.decision_seconds.observe(elapsed / len(out))
        return out

    def _count_policies_of(self, serving: Any) -> None:
        """Create at 0 the decision series of the policies ``serving`` (a published model version) is served under:
        its model's policy, and in apprentice mode ``apprentice:<baseline>`` (:meth:`recommend`), × every access
        type, so that ``increase()``/``rate()`` and the dashboard see a pod before its first decision."""
        policy = getattr(serving.model, "policy_name", None)
        policies = [policy] if isinstance(policy, str) else []
        if self.apprentice is not None:
            policies.append(f"apprentice:{self.apprentice.config.baseline}")
        for name in policies:
            self.metrics.initialise_policy(name, [_NAME[a] for a in AccessType])

    def _count_decision(self, policy: str, choice: Any) -> None:
        """Domain metrics of one decision: by policy and arm, its propensity, whether it explored (p < 0.5)."""
        self.metrics.decisions.labels(policy, _NAME[choice.access_type]).inc()
        self.metrics.propensity.observe(choice.propensity)
        if choice.propensity < 0.5:
            self.metrics.explored.labels(policy).inc()

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
        InvalidInput
            The outcome guard found it implausible (:meth:`~edgepath.security.plausibility.OutcomeGuard.admit`: the
            field named, counted as ``edgepath_outcomes_total{result="implausible"}``); nothing is recorded.
        RateLimited
            The device's outcome cap is spent.
        """
        if principal.device_id != report.device_id and not principal.is_admin:
            raise PermissionDenied("device_id does not match the authenticated device", field="device_id")
        # the device's outcome-cap token, under way beside the decision's lookup (Redis: one round trip for both)
        cap_token = await self.guard.take_cap_token(report.device_id) if self.guard is not None else None
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
            throughput_threshold_bps=self.settings.bandit.reward_throughput_bps,
            latency_threshold_ms=self.settings.bandit.reward_latency_ms,
        )
        # security: bounded learning (raises InvalidInput / RateLimited; False = quarantined, never trained on)
        max_rate_bps = math.inf
        if self.guard is not None:
            try:
                bound = await self.guard.admission(decision, report, cap_token)
            except InvalidInput:  # implausible: refused naming the field, nothing recorded
                self.metrics.outcomes.labels("implausible").inc()
                raise
            if bound is None:
                self.metrics.outcomes.labels("quarantined").inc()
                return OutcomeAck(decision_id=report.decision_id, accepted=False, duplicate=False, reward=reward)
            max_rate_bps = bound
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
            ),
            # appended with the claim when it is NEW (Redis: in the claim's script, one round trip)
            log_entry=_logged(decision, report, reward),
        )
        self.metrics.outcomes.labels(result.value).inc()
        if result is ClaimResult.UNKNOWN:
            raise NotFound("unknown or expired decision", field="decision_id")
        if result is ClaimResult.NEW:  # the engines learn once per decision
            self._apprentice_observe(decision, report)
            self.observe_joined(decision, report, reward)
            lesson = OutcomeInput(
                report=report,
                decision=decision,
                store=self.store,
                now_s=time.time(),
                max_rate_bps=max_rate_bps,
                metrics=self.metrics,
            )
            for engine in self.engines:
                await engine.learn(lesson)
        return OutcomeAck(
            decision_id=report.decision_id,
            accepted=result is ClaimResult.NEW,
            duplicate=result is ClaimResult.DUPLICATE,
            reward=reward,
        )

    # --- apprentice mode (issue 18) ---
    def _utility(self, report: OutcomeReport) -> float:
        """EdgePath's utility of an outcome in [0, 1] under the settings' caps and weights (engines/reward.py)."""
        s = self.settings
        return utility(
            report.throughput_bps,
            report.latency_ms,
            report.loss,
            throughput_cap_bps=s.utility_throughput_cap_bps,
            latency_cap_ms=s.utility_latency_cap_ms,
            latency_weight=s.utility_latency_weight,
            loss_weight=s.utility_loss_weight,
        )

    def _apprentice_observe(self, decision: DecisionRecord, report: OutcomeReport) -> None:
        app = self.apprentice
        if app is None or decision.learner_arm_index is None or decision.baseline_arm_index is None:
            return
        u = self._utility(report)
        was = app.promoted
        events = len(app.events)
        app.observe(
            decision.arm_index,
            decision.propensity,
            decision.learner_arm_index,
            decision.baseline_arm_index,
            u,
            time.time(),
        )
        est = app.estimates
        gauge = self.metrics.apprentice_value
        for label, value in (
            ("learner_ips", est.get("learner")),
            ("baseline", est.get("baseline")),
            ("learner_ci95_low", (est.get("learner_ci95") or [None, None])[0]),
            ("learner_ci95_high", (est.get("learner_ci95") or [None, None])[1]),
        ):
            if value is not None:
                gauge.labels(label).set(value)
        self.metrics.apprentice_serving_learner.set(1 if app.promoted else 0)
        if len(app.events) != events or app.promoted != was:
            event = app.events[-1]
            log.warning(
                "apprentice: learner %s (learner %.4f, 95%% CI %s, baseline %s %.4f, %d outcomes)",
                event["event"],
                event["learner"],
                event["learner_ci95"],
                app.config.baseline,
                event["baseline"],
                event["after_outcomes_in_window"],
            )

    def status(self) -> dict[str, Any]:
        """``GET /v1/status``: the serving mode, model version and (apprentice mode) the OPE estimates."""
        out: dict[str, Any] = {
            "model_version": self.registry.current.version,
            "policy": self.registry.current.model.policy_name,
        }
        out.update(self.apprentice.status() if self.apprentice is not None else {"mode": "learner"})
        return out

    def observe_joined(self, decision: DecisionRecord, report: OutcomeReport, reward: float) -> None:
        """Domain metrics of an outcome joined for training: its reward, utility and delay since the decision."""
        self.metrics.reward.observe(reward)
        self.metrics.utility.observe(self._utility(report))
        self.metrics.outcome_delay_seconds.observe(max(0.0, time.time() - decision.decided_at))

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
        """True when the plane can decide and record (state store reachable) and is not shutting down.

        A store whose check raises (not one it reports unreachable: e.g. a Redis ACL user without ``PING``,
        ``NOPERM``) reads as not ready, logged with its traceback once per run of such failures: ``/readyz``
        answered 500 and the gRPC health watcher's task died, its status stuck where it was."""
        if self.draining:
            return False
        try:
            ok = await self.store.ping()
        except Exception:
            if not self._ready_failing:
                log.exception("readiness: the state store's check failed; not ready until it succeeds")
            self._ready_failing = True
            return False
        self._ready_failing = False
        return ok

    def unready_reason(self) -> str:
        """Why :meth:`ready` said False, as the readiness watcher logs it: ``draining``, the store's check failing,
        or the store's own reason (:meth:`~edgepath.state.base.StateStore.unready_reason`: ``state store
        unreachable``, a journal being replayed, ...)."""
        if self.draining:
            return "draining"
        if self._ready_failing:
            return "the state store's check failed"
        return self.store.unready_reason()
