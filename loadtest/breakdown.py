#!/usr/bin/env python3
"""Where one Recommend and one ReportOutcome spend their time, stage by stage (issue 16, item 1).

Usage::

    loadtest/breakdown.py [--n 2000] [--store memory|redis] [--profile] [--report out/breakdown.json]

What runs: the real service parts, in this process, on one asyncio loop: ``Service.build`` (store,
serving model, plane with the registered engine adapters, outcome guard), the real security bundle
with a device token required (``edgepath tokens`` file: authentication and the per-device rate limit
run as in production), the real transports' request/response code. No socket is involved: the rows
are the CPU cost of each stage, the ``whole handler`` rows the same call through the real transport
entry point (the FastAPI ASGI app called directly, with its middlewares; the gRPC servicer method with a
stand-in context, wrapped by the call observer as the server registers it: :func:`observed_methods`),
so ``framework`` = whole handler − the sum of the timed stages is what routing, dependency
injection and response handling around them cost.

Stages (explicit ``perf_counter_ns`` timers around the very functions the transports and the plane
call, each iteration one real paired context of ``loadtest/workload.py``):

Recommend: transport decode, authentication, rate limit, validation, feature encoding, bandit (the
policy's decide minus the feature encoding), decision record (as the plane makes it: its id, the raw context, the
link speeds), decision record write, each engine adapter's section
(MLPM ``scheduler``, ``congestion``, SSMP ``server_selection``, ...), metrics, encode (REST: the route's writer,
``recommendation_response``, where the revision has it).
ReportOutcome: transport decode, authentication, rate limit, validation, decision read (+ outcome cap token), reward,
outcome guard, outcome claim (store write), engine learning, metrics, encode.

Per stage the report gives the mean and median in µs and the share of the whole handler's median.
``--profile`` adds a pyinstrument call-stack profile of the whole REST and gRPC handlers.
Speed is printed, never asserted; the machine may be shared (the load average is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

_VENV_PYTHON = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
if _VENV_PYTHON.exists() and Path(sys.prefix).resolve() != _VENV_PYTHON.parent.parent.resolve():
    os.execv(str(_VENV_PYTHON), [str(_VENV_PYTHON), *sys.argv])  # run inside the project's venv

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

DEVICE = "bench-1"


class Timers:
    """Nanosecond samples per stage, in the order stages were first seen."""

    def __init__(self) -> None:
        self.samples: dict[str, list[int]] = defaultdict(list)

    def add(self, stage: str, ns: int) -> None:
        self.samples[stage].append(ns)

    def time(self, stage: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter_ns()
        out = fn()
        self.add(stage, time.perf_counter_ns() - t0)
        return out

    async def atime(self, stage: str, coro: Awaitable[Any]) -> Any:
        t0 = time.perf_counter_ns()
        out = await coro
        self.add(stage, time.perf_counter_ns() - t0)
        return out

    def table(self, whole: str) -> list[dict[str, Any]]:
        """One row per stage: mean and median µs, share of the whole handler's median.

        ``framework`` is the whole handler's median minus the sum of the stages' medians (medians,
        because a shared machine's scheduling spikes land in the means).
        """
        whole_median = statistics.median(self.samples[whole]) / 1000.0
        rows = []
        staged = 0.0
        for stage, ns in self.samples.items():
            median = statistics.median(ns) / 1000.0
            if stage != whole:
                staged += median
            rows.append(
                {
                    "stage": stage,
                    "mean_us": round(statistics.fmean(ns) / 1000.0, 2),
                    "median_us": round(median, 2),
                    "share": round(median / whole_median, 3),
                }
            )
        framework = whole_median - staged
        rows.append(
            {
                "stage": "framework (whole handler − stages)",
                "mean_us": None,
                "median_us": round(framework, 2),
                "share": round(framework / whole_median, 3),
            }
        )
        return rows


class FakeMetadatum:
    def __init__(self, key: str, value: str) -> None:
        self.key, self.value = key, value


class FakeContext:
    """Stands in for ``grpc.aio.ServicerContext`` in the direct servicer call (no socket); ``token``: the bearer
    metadata it carries (None: no metadata, for a servicer without authentication)."""

    def __init__(self, token: str | None = None) -> None:
        self._md = (FakeMetadatum("authorization", f"Bearer {token}"),) if token is not None else ()
        self._trailing: Any = ()

    def invocation_metadata(self) -> Any:
        return self._md

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        self._trailing = tuple(trailing_metadata)

    def trailing_metadata(self) -> Any:
        return self._trailing

    def code(self) -> Any:
        return None  # not set: the call ends OK

    def time_remaining(self) -> float | None:
        return None  # no deadline

    def auth_context(self) -> Any:
        return {}

    async def abort(self, code: Any, details: str = "", trailing_metadata: Any = ()) -> None:
        raise RuntimeError(f"aborted: {code} {details}")

    async def abort_with_status(self, status: Any) -> None:
        raise RuntimeError(f"aborted: {status}")


async def asgi_post(app: Any, path: str, body: bytes, token: str) -> tuple[int, bytes]:
    """One HTTP POST through the ASGI app, in process (what uvicorn hands the app for a request)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", f"Bearer {token}".encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8080),
    }
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    status = 0
    chunks: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


def observed_methods(servicer: Any, plane: Any) -> dict[str, Any]:
    """The servicer's unary methods as the server serves them: each wrapped by the call observer (request id, call
    metrics; :class:`edgepath.grpc.observe.CallObserver`), so the gRPC *whole handler* holds what REST's holds
    through its middlewares. A revision whose observer was an interceptor (before Session 50) is wrapped by the
    same per-call code; grpc.aio's interceptor machinery around it cannot run without a server."""
    import grpc
    from edgepath.grpc.observe import CallObserver

    observer = CallObserver(plane.metrics.grpc_call)
    wrap = getattr(observer, "wrap", None) or observer._wrap
    return {
        name: wrap(
            f"/edgepath.v1.PathService/{name}", grpc.unary_unary_rpc_method_handler(getattr(servicer, name))
        ).unary_unary
        for name in ("Recommend", "ReportOutcome", "RecommendBatch")
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every stage table of the report (see :func:`markdown`); the token file lives in a removed temporary dir."""
    with tempfile.TemporaryDirectory(prefix="edgepath-breakdown-") as tmp_name:
        return await _run(args, Path(tmp_name))


async def _run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """:func:`run` with its token file's directory *tmp* (removed by the caller)."""
    import workload
    from edgepath import plane as plane_module
    from edgepath import types as ep_types
    from edgepath.adapters.base import cacheable_context
    from edgepath.adapters.registry import compiled_engines
    from edgepath.engines.features import context_features
    from edgepath.engines.reward import bernoulli_reward
    from edgepath.grpc import convert
    from edgepath.grpc.server import PathServicer
    from edgepath.main import Service
    from edgepath.plane import new_decision_id
    from edgepath.rest import app as rest_app
    from edgepath.rest.app import create_app, json_response, parse_body
    from edgepath.security import build_security
    from edgepath.security.auth import TokenFile
    from edgepath.security.plausibility import reported_link_speeds_mbps
    from edgepath.settings import Settings
    from edgepath.state.base import ClaimResult, DecisionRecord, OutcomeRecord
    from edgepath.wire import edgepath_pb2 as pb

    tokens = TokenFile(tmp / "tokens.json")
    token = tokens.add(DEVICE)
    settings = Settings(
        host="127.0.0.1",
        store_url=args.store_url,
        auth_tokens_file=tokens.path,
        rate_limit_per_s=1e9,
        rate_limit_burst=1_000_000_000,
        outcome_cap_per_window=1_000_000_000,
        hmac_key="breakdown-only-hmac-key-0123456789abcdef0123",
        model_path=args.model,
    )
    service = Service.build(settings)
    plane = service.plane
    security = build_security(settings, service.backend, guard=plane.guard)
    app = create_app(plane, security)
    servicer = PathServicer(plane, security)
    context = FakeContext(token)
    pool = workload.situations(min(args.n, 2000))
    # Every call a context of its own (variant v of its situation's history): an agent's history moves on with
    # each transfer, so no answer cached per context (MLPM, steering) serves a second call.
    hist, form, sections = args.history_samples, args.history_form, args.sections
    # Context j is situation j % len(pool) with history variant j // len(pool): REST's whole-handler calls take
    # variant 0 and its staged replays 1, gRPC's 2 and 3.
    bodies = [
        json.dumps(workload.recommend_body(s, DEVICE, hist, v, form, sections)).encode() for v in range(4) for s in pool
    ]
    protos = [
        workload.recommend_proto(pb, s, DEVICE, hist, v, form, sections).SerializeToString()
        for v in range(4)
        for s in pool
    ]
    authorization = f"Bearer {token}"

    # Since Session 49 Recommend and RecommendBatch are handed their requests' wire bytes
    # (grpc.server.takes_wire_bytes), ReportOutcome since Session 59 (it authenticates before it parses); a revision
    # from before on PYTHONPATH takes messages
    reads_bytes = getattr(servicer.Recommend, "takes_wire_bytes", False)
    outcome_reads_bytes = getattr(servicer.ReportOutcome, "takes_wire_bytes", False)
    served = observed_methods(servicer, plane)
    make_record = getattr(plane_module, "_decision_record", None)  # the plane's own record builder (Session 51 on)
    rec_t = {"rest": Timers(), "grpc": Timers()}
    out_t = {"rest": Timers(), "grpc": Timers()}

    async def recommend_stages(t: Timers, transport: str, i: int) -> tuple[ep_types.Recommendation, DecisionRecord]:
        """One Recommend, stage by stage, as the transport and ``DecisionPlane.recommend`` do it."""
        if transport == "rest":
            # One pass: pydantic's JSON parser validates straight into the model (rest.app.parse_body).
            request = t.time("transport decode + validation", lambda: parse_body(bodies[i], ep_types.RecommendRequest))
            principal = t.time("authentication", lambda: security.auth.authenticate(authorization=authorization))
            await t.atime("rate limit", security.admit(principal))
        elif reads_bytes:  # as served: the plain values from the wire bytes, then the caller, then validation
            values = t.time("transport decode", lambda: convert.recommend_request_values(protos[i]))
            principal = t.time("authentication", lambda: security.auth.authenticate(authorization=authorization))
            await t.atime("rate limit", security.admit(principal))
            request = t.time("validation", lambda: ep_types.RecommendRequest.model_validate(values))
        else:  # a revision from before Session 49: grpc parses the message, the servicer reads and validates it
            msg = t.time("transport decode", lambda: pb.RecommendRequest.FromString(protos[i]))
            principal = t.time("authentication", lambda: security.auth.authenticate(authorization=authorization))
            await t.atime("rate limit", security.admit(principal))
            request = t.time("validation", lambda: convert.recommend_request(msg))
        serving = plane.registry.current
        t.time("feature encoding", lambda: context_features(request.interfaces))
        t0 = time.perf_counter_ns()
        choice = serving.model.decide(request.interfaces)
        t.add("bandit", time.perf_counter_ns() - t0 - t.samples["feature encoding"][-1])
        now = time.time()
        if make_record is not None:  # as the plane makes it (its id, the raw context, the link speeds)
            policy = serving.model.policy_name
            record = t.time(
                "decision record", lambda: make_record(new_decision_id(), request, choice, serving.version, policy, now)
            )
        else:  # a revision without the plane's record function
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
        await t.atime("decision record write", plane.store.put_decision(record, settings.decision_ttl_s))
        from edgepath.adapters.base import DecisionInput

        sections: dict[str, Any] = {}  # as the plane: later adapters read earlier sections (steering reads MLPM's)
        decided = DecisionInput(request=request, store=plane.store, record=record, now_s=now, sections=sections)
        run = plane.sections_to_run(frozenset(request.sections)) if request.sections else None  # --sections
        for engine in plane.engines:
            if run is None or engine.section in run:  # as the plane: the asked sections and what they read
                sections[engine.section] = await t.atime(f"engine {engine.section}", engine.recommend(decided))
        t.time(
            "metrics",
            lambda: (
                plane.metrics.decisions.labels(record.policy, choice.access_type.value).inc(),
                plane.metrics.decision_seconds.observe(0.001),
            ),
        )
        rec = ep_types.Recommendation(
            decision_id=record.decision_id,
            model_version=serving.version,
            policy=record.policy,
            primary_path=ep_types.PrimaryPath(
                interface=choice.interface,
                access_type=choice.access_type,
                propensity=choice.propensity,
                arms=list(choice.arms),
            ),
            decided_at_unix_ms=int(now * 1000),
            **{k: v for k, v in sections.items() if not request.sections or k in request.sections},  # as shown
        )
        if transport == "rest":
            # as served: the route's writer with the shared sections' JSON kept (Session 53), where the revision has it
            t.time("encode", lambda: getattr(rest_app, "recommendation_response", json_response)(rec))
        else:
            shared = cacheable_context(request)
            if reads_bytes:  # the reply's wire bytes, by the compiled encoding where installed (as served)
                t.time("encode", lambda: convert.recommendation_wire(rec, shared, settings.native_engines))
            else:
                t.time("encode", lambda: convert.recommendation_to_proto(rec, shared).SerializeToString())
        return rec, record

    async def outcome_stages(t: Timers, transport: str, rec: ep_types.Recommendation, s: Any) -> None:
        """One ReportOutcome, stage by stage, as the transport and ``DecisionPlane.report_outcome`` do it."""
        body = workload.outcome_body(s, DEVICE, rec.model_dump(mode="json"))
        if transport == "rest":
            raw_bytes = json.dumps(body).encode()
            report = t.time("transport decode + validation", lambda: parse_body(raw_bytes, ep_types.OutcomeReport))
        else:
            wire = pb.OutcomeRequest(**body).SerializeToString()
            msg = t.time("transport decode", lambda: pb.OutcomeRequest.FromString(wire))
        principal = t.time("authentication", lambda: security.auth.authenticate(authorization=authorization))
        await t.atime("rate limit", security.admit(principal))
        if transport == "grpc":
            report = t.time("validation", lambda: convert.outcome_report(msg))
        assert plane.guard is not None

        async def read() -> tuple[Any, Any]:  # the cap's token under way beside the lookup, as the plane does it
            cap_token = await plane.guard.take_cap_token(report.device_id)
            return cap_token, await plane.store.get_decision(report.decision_id)

        cap_token, decision = await t.atime("decision read + outcome cap token", read())
        assert decision is not None
        reward = t.time(
            "reward",
            lambda: bernoulli_reward(
                report.throughput_bps,
                report.latency_ms,
                throughput_threshold_bps=settings.reward_throughput_bps,
                latency_threshold_ms=settings.reward_latency_ms,
            ),
        )
        await t.atime("outcome guard", plane.guard.admit(decision, report, cap_token))
        outcome = OutcomeRecord(
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
        result = await t.atime("outcome claim (store write)", plane.store.claim_outcome(outcome))
        assert result is ClaimResult.NEW
        from edgepath.adapters.base import OutcomeInput

        lesson = OutcomeInput(report=report, decision=decision, store=plane.store, now_s=time.time())
        t0 = time.perf_counter_ns()
        for engine in plane.engines:
            await engine.learn(lesson)
        t.add("engine learning", time.perf_counter_ns() - t0)
        t.time("metrics", lambda: plane.metrics.outcomes.labels(result.value).inc())
        ack = ep_types.OutcomeAck(decision_id=report.decision_id, accepted=True, duplicate=False, reward=reward)
        if transport == "rest":
            t.time("encode", lambda: json_response(ack))
        else:
            t.time("encode", lambda: convert.ack_to_proto(ack).SerializeToString())

    async def whole_rest(i: int) -> tuple[float, float]:
        t0 = time.perf_counter_ns()
        status, body = await asgi_post(app, "/v1/recommendations", bodies[i], token)
        t1 = time.perf_counter_ns()
        assert status == 200, body
        reply = json.loads(body)
        out = json.dumps(workload.outcome_body(pool[i % len(pool)], DEVICE, reply)).encode()
        t2 = time.perf_counter_ns()
        status, body = await asgi_post(app, "/v1/outcomes", out, token)
        t3 = time.perf_counter_ns()
        assert status == 200, body
        return t1 - t0, t3 - t2

    async def whole_grpc(i: int) -> tuple[float, float]:
        t0 = time.perf_counter_ns()
        reply = await served["Recommend"](
            protos[i] if reads_bytes else pb.RecommendRequest.FromString(protos[i]), context
        )
        if not isinstance(reply, bytes):  # a message where the compiled encoding is not used
            reply.SerializeToString()
        t1 = time.perf_counter_ns()
        if isinstance(reply, bytes):  # the caller's side, untimed
            reply = pb.Recommendation.FromString(reply)
        wire = workload.outcome_proto(pb, pool[i % len(pool)], DEVICE, reply).SerializeToString()
        t2 = time.perf_counter_ns()
        ack = await served["ReportOutcome"](
            wire if outcome_reads_bytes else pb.OutcomeRequest.FromString(wire), context
        )
        ack.SerializeToString()
        t3 = time.perf_counter_ns()
        return t1 - t0, t3 - t2

    wholes = {"rest": whole_rest, "grpc": whole_grpc}
    # Warm-up: first calls build the per-arm-set policy, import lazily, fill caches.
    for transport in ("rest", "grpc"):
        for i in range(50):
            await wholes[transport](i % len(pool))
    for base, transport in ((0, "rest"), (2, "grpc")):
        for k in range(args.n):
            i = k % len(pool)
            rt, ot = await wholes[transport](base * len(pool) + i)
            rec_t[transport].add("whole handler", int(rt))
            out_t[transport].add("whole handler", int(ot))
            rec, _ = await recommend_stages(rec_t[transport], transport, (base + 1) * len(pool) + i)
            await outcome_stages(out_t[transport], transport, rec, pool[i])

    batch_rows = await batch_stages(args, servicer, context, plane, pool, convert, pb) if args.batch else None

    profiles: dict[str, str] = {}
    if args.profile:
        from pyinstrument import Profiler

        for transport in ("rest", "grpc"):
            profiler = Profiler(interval=0.0002, async_mode="disabled")
            profiler.start()
            for k in range(args.n):
                await wholes[transport](k % len(pool))
            profiler.stop()
            profiles[transport] = profiler.output_text(unicode=False, color=False, show_all=False)
    await service.store.close()
    return {
        "recommend": {tr: rec_t[tr].table("whole handler") for tr in ("rest", "grpc")},
        "report_outcome": {tr: out_t[tr].table("whole handler") for tr in ("rest", "grpc")},
        "recommend_batch": batch_rows,
        "profiles": profiles,
        "setup": {
            "n": args.n,
            "store": args.store_url,
            "model": args.model,
            "batch_size": args.batch_size,
            "policy": plane.registry.current.model.policy_name,
            "engines": [e.section for e in plane.engines],
            "compiled_engines": list(compiled_engines(plane.settings)),
            "compiled_grpc_request_decoding": bool(getattr(convert, "NATIVE_DECODING", False))
            and plane.settings.native_engines,  # False for a service from before it (an older revision)
            "compiled_grpc_reply_encoding": bool(getattr(convert, "NATIVE_ENCODING", False))
            and plane.settings.native_engines,
            "cpu_count": os.cpu_count(),
            "load_average_1m": os.getloadavg()[0],
            "auth": "device token required (tokens file), per-device rate limit on",
            "contexts": "paired mobilebandwidth situations (emulated pairing), two interfaces, no content",
            "history_samples": args.history_samples,
            "history_form": args.history_form,
            "sections": list(args.sections) or "all (none named, as the agent asks)",
        },
    }


async def batch_stages(
    args: argparse.Namespace, servicer: Any, context: Any, plane: Any, pool: Any, convert: Any, pb: Any
) -> list[dict[str, Any]]:
    """``RecommendBatch`` of ``--batch-size`` contexts through the gRPC servicer, per stage, CPU µs per *decision*.

    Stages: decode + validation (proto → models), callers (authentication + one rate-limit token per batch
    with a device token), the plane's batch decide (``DecisionPlane.recommend_batch``) and within it the bandit
    (``decide_batch`` timed on its own on the same contexts) and each engine adapter (its CPU time inside that
    decide; its wall row is the same CPU time), encode (models → wire bytes, by the compiled encoding where installed);
    the whole handler is ``PathServicer.RecommendBatch`` handed the request's wire bytes, as served, plus
    serialisation where it answers with a message. The baseline row is the same items decided the way
    the batch was before issue 16's vectorisation: one ``DecisionPlane.recommend`` per item, in order.
    """
    import workload
    from edgepath.adapters.base import cacheable_context
    from edgepath.types import Principal, RecommendBatch

    size = args.batch_size
    requests = []
    for b in range(16):
        items = [
            workload.recommend_proto(
                pb,
                pool[(b * size + j) % len(pool)],
                DEVICE,
                args.history_samples,
                form=args.history_form,
                sections=args.sections,
            )
            for j in range(size)
        ]
        requests.append(pb.RecommendBatchRequest(requests=items).SerializeToString())
    model = plane.registry.current.model
    t, wall = Timers(), Timers()
    clock = time.thread_time_ns  # CPU time of this thread: a shared machine's preemptions are not counted
    # Each engine adapter's share of the plane's batch decide: its batch method (or its per-item method, as the
    # plane calls it) wrapped on this plane's adapters while the timed batch runs, CPU ns summed per call.
    within: dict[str, int] = {}
    timing = [False]

    def wrapped(section: str, fn: Any) -> Any:
        async def timed_engine(*a: Any) -> Any:
            t0 = clock()
            try:
                return await fn(*a)
            finally:
                if timing[0]:
                    within[section] = within.get(section, 0) + clock() - t0

        return timed_engine

    patched = []
    for engine in plane.engines:
        name = "recommend_batch" if getattr(engine, "recommend_batch", None) is not None else "recommend"
        setattr(engine, name, wrapped(engine.section, getattr(engine, name)))
        patched.append((engine, name))

    def encode_batch(batch: Any, shared: list[bool]) -> bytes:
        """The reply's wire bytes as served (a revision from before Session 49: the message, serialised)."""
        wire_of = getattr(convert, "recommendation_batch_wire", None)
        if wire_of is not None:
            return wire_of(batch, shared, plane.settings.native_engines)  # type: ignore[no-any-return]
        return convert.recommendation_batch_to_proto(batch, shared).SerializeToString()  # type: ignore[no-any-return]

    async def timed(stage: str, fn: Any) -> Any:
        t0, w0 = clock(), time.perf_counter_ns()
        out = fn()
        if asyncio.iscoroutine(out):
            out = await out
        t.add(stage, clock() - t0)
        wall.add(stage, time.perf_counter_ns() - w0)
        return out

    # as served (a revision from before Session 49: a message)
    reads_bytes = getattr(servicer.RecommendBatch, "takes_wire_bytes", False)
    recommend_batch = observed_methods(servicer, plane)["RecommendBatch"]
    for k in range(args.batch + 5):  # the first 5 warm up
        wire = requests[k % len(requests)]
        t0, w0 = clock(), time.perf_counter_ns()
        reply = await recommend_batch(wire if reads_bytes else pb.RecommendBatchRequest.FromString(wire), context)
        if not isinstance(reply, bytes):  # a message where the compiled encoding is not used
            reply.SerializeToString()
        whole, whole_wall = clock() - t0, time.perf_counter_ns() - w0
        msg = wire if reads_bytes else pb.RecommendBatchRequest.FromString(wire)
        batch = await timed("transport decode + validation", lambda msg=msg: convert.recommend_batch_request(msg))
        principals = await timed("authentication + rate limit", lambda: servicer.principals(context, [DEVICE] * size))
        items = list(zip(principals, batch.requests, strict=True))
        await timed(
            "bandit (decide_batch)", lambda batch=batch: model.decide_batch([r.interfaces for r in batch.requests])
        )
        within.clear()
        timing[0] = True
        recs = await timed("plane batch decide (incl. bandit)", lambda items=items: plane.recommend_batch(items))
        timing[0] = False
        for section, ns in within.items():
            t.add(f"  engine {section} (within the plane's decide)", ns)
            wall.add(f"  engine {section} (within the plane's decide)", ns)
        await timed(
            "encode",
            lambda recs=recs, batch=batch: encode_batch(
                RecommendBatch(recommendations=recs), [cacheable_context(r) for r in batch.requests]
            ),
        )
        caller = Principal(device_id=DEVICE)
        t0, w0 = clock(), time.perf_counter_ns()
        for r in batch.requests:
            await plane.recommend(caller, r)
        t.add("baseline: one plane.recommend per item", clock() - t0)
        wall.add("baseline: one plane.recommend per item", time.perf_counter_ns() - w0)
        t.add("whole handler", whole)
        wall.add("whole handler", whole_wall)
        if k < 5:
            for ns in (*t.samples.values(), *wall.samples.values()):
                ns.clear()
    for engine, name in patched:  # the class's methods again: the profiles after this see no wrapper
        delattr(engine, name)
    rows = []
    whole_median = statistics.median(t.samples["whole handler"])
    for stage, ns in t.samples.items():
        median = statistics.median(ns)
        rows.append(
            {
                "stage": stage,
                "median_us_per_decision": round(median / 1000.0 / size, 2),
                "share": round(median / whole_median, 3),
                "decisions_per_cpu_s": round(size / (median / 1e9), 0),
                # wall clock: includes waiting for the store (Redis round trips) and a shared machine's preemptions
                "wall_median_us_per_decision": round(statistics.median(wall.samples[stage]) / 1000.0 / size, 2),
            }
        )
    return rows


def markdown(report: dict[str, Any]) -> str:
    """The two tables (Recommend, ReportOutcome) as Markdown, REST and gRPC side by side."""
    lines = []
    for call in ("recommend", "report_outcome"):
        rest = {r["stage"]: r for r in report[call]["rest"]}
        grpc = {r["stage"]: r for r in report[call]["grpc"]}
        stages = list(dict.fromkeys([*rest, *grpc]))
        lines.append(f"\n{call}: median µs per call (share of the whole handler)\n")
        lines.append("| stage | REST µs | REST share | gRPC µs | gRPC share |")
        lines.append("|---|---:|---:|---:|---:|")
        for s in stages:
            r, g = rest.get(s), grpc.get(s)
            fmt = lambda x: ("—", "—") if x is None else (f"{x['median_us']:.1f}", f"{100 * x['share']:.0f}%")  # noqa: E731
            lines.append(f"| {s} | {fmt(r)[0]} | {fmt(r)[1]} | {fmt(g)[0]} | {fmt(g)[1]} |")
    if report.get("recommend_batch"):
        size = report["setup"]["batch_size"]
        lines.append(f"\nrecommend_batch (gRPC, {size} contexts per call): median CPU µs per decision\n")
        lines.append(
            "| stage | CPU µs per decision | share of the whole handler | decisions per CPU second | wall µs |"
        )
        lines.append("|---|---:|---:|---:|---:|")
        for r in report["recommend_batch"]:
            lines.append(
                f"| {r['stage']} | {r['median_us_per_decision']:.1f} | {100 * r['share']:.0f}% "
                f"| {r['decisions_per_cpu_s']:,.0f} | {r['wall_median_us_per_decision']:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import workload

    p = argparse.ArgumentParser(description="Per-stage time of one Recommend and one ReportOutcome")
    p.add_argument("--n", type=int, default=2000, help="Calls per transport (each: whole handler + staged replay)")
    p.add_argument("--store", dest="store_url", default="memory://", help="memory:// or redis://HOST:PORT/DB")
    p.add_argument("--model", default=None, help="Warm-start artefact directory (default: cold bandit)")
    p.add_argument("--profile", action="store_true", help="Also print pyinstrument profiles of the whole handlers")
    p.add_argument("--batch", type=int, default=0, help="Also time N RecommendBatch calls (gRPC servicer) per stage")
    p.add_argument("--batch-size", type=int, default=64, help="Contexts per RecommendBatch call (--batch)")
    workload.add_history_arguments(p, variants=None)  # each call a context of its own (module docstring)
    workload.add_sections_argument(p)
    p.add_argument("--report", type=Path, help="Write the JSON report here")
    args = p.parse_args(argv)
    report = asyncio.run(run(args))
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    for transport, text in report["profiles"].items():
        print(f"\n===== pyinstrument profile, {transport} whole handlers =====\n{text}")
    print(markdown(report))
    print(f"\nsetup: {json.dumps(report['setup'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
