"""Prometheus metrics of one service process, on an explicitly passed registry.

The serving loop's own metrics (decisions, outcomes, decision time) are *hot*: a request updates
plain Python numbers (:class:`HotCounter`, :class:`HotHistogram`), without the lock every
``prometheus_client`` child takes per update, and the registry reads them only when scraped
(:class:`_HotCollector`). They are updated from the one event-loop thread that runs the plane; each
serving process (``--workers N``) has its own. The other metrics (store, snapshots) are updated off
the hot path and stay ``prometheus_client`` metrics.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

ChildT = TypeVar("ChildT")


class _Value:
    """A number with ``get()``, like ``prometheus_client``'s value holders (tests read ``child._value.get()``)."""

    __slots__ = ("v",)

    def __init__(self) -> None:
        self.v = 0.0

    def get(self) -> float:
        return self.v


class HotCounterChild:
    """One label set of a :class:`HotCounter`."""

    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = _Value()

    def inc(self, amount: float = 1.0) -> None:
        """Add ``amount`` (≥ 0) without a lock (single event-loop thread)."""
        self._value.v += amount


class _CountsTwice(HotCounterChild):
    """A counter child that also counts in another one (``also``): the REST / gRPC request counter of a refused
    outcome report also counts it in ``edgepath_outcomes_total`` (:meth:`Metrics.http_request`,
    :meth:`Metrics.grpc_call`), with no test on the calls that are not refused ones."""

    __slots__ = ("also",)

    def __init__(self, child: HotCounterChild, also: HotCounterChild) -> None:
        self._value = child._value  # the same number the family exports
        self.also = also

    def inc(self, amount: float = 1.0) -> None:
        self._value.v += amount
        self.also.inc(amount)


class _LabelledFamily(Generic[ChildT]):
    """Children of one metric per label set, created on first use (one event-loop thread updates them: no lock)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._children: dict[tuple[str, ...], ChildT] = {}

    def _new_child(self) -> ChildT:
        raise NotImplementedError

    def labels(self, *values: str) -> ChildT:
        """The child of ``values`` (one per label name, in order), created on first use.

        Raises
        ------
        ValueError
            Not one value per label name.
        """
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
            child = self._children[values] = self._new_child()
        return child


class HotCounter(_LabelledFamily[HotCounterChild]):
    """A labelled counter for the serving loop; exported as ``<name>_total`` like a Prometheus counter."""

    def _new_child(self) -> HotCounterChild:
        return HotCounterChild()

    def collect(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            family.add_metric(list(values), child._value.v)
        return family


class HotHistogram:
    """A histogram for the serving loop: bucket counts in a list, no lock; seconds, like Prometheus's."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        self.name, self.documentation = name, documentation
        self.bounds = tuple(sorted(buckets))
        self.counts = [0] * (len(self.bounds) + 1)  # last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count one observation of ``value`` (seconds)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative_buckets(self) -> list[tuple[str, float]]:
        """``(upper bound, observations ≤ it)`` per bucket, the last ``+Inf``: Prometheus's exposition."""
        cumulative, buckets = 0, []
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == math.inf else repr(float(bound)), float(cumulative)))
        return buckets

    def collect(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation)
        family.add_metric([], self.cumulative_buckets(), self.sum)
        return family


class HotHistogramFamily(_LabelledFamily[HotHistogram]):
    """A labelled :class:`HotHistogram` (one per label set, created on first use), seconds; no lock."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]) -> None:
        super().__init__(name, documentation, labelnames)
        self.buckets = tuple(buckets)

    def _new_child(self) -> HotHistogram:
        return HotHistogram(self.name, self.documentation, self.buckets)

    def collect(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            family.add_metric(list(values), child.cumulative_buckets(), child.sum)
        return family


class _HotCollector(Collector):
    """Exports the hot metrics when the registry is scraped."""

    def __init__(self, *metrics: HotCounter | HotHistogram | HotHistogramFamily) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        for metric in self.metrics:
            yield metric.collect()


#: Every label value the service counts under, per counter (Prometheus's instrumentation practice: a labelled
#: series exported at 0 from the first scrape, so ``increase()``/``rate()`` see its first event; a series born at 1
#: is never seen to increase). tests/service/test_service_metrics.py checks these against the label values the code
#: passes. ``edgepath_outcomes_total{result}``: the outcome report's result (``ClaimResult`` values and the refusals
#: before the claim, edgepath.plane), and the reports a transport refused before any was judged
#: (:data:`OUTCOME_REFUSALS`).
OUTCOME_RESULTS = (
    "new",
    "duplicate",
    "unknown",
    "wrong_device",
    "implausible",
    "quarantined",
    "rate_limited",
    "unavailable",
)
#: The REST route and the gRPC method of outcome reports, and the ``edgepath_outcomes_total`` result each refusal
#: status of theirs counts as: 429 / RESOURCE_EXHAUSTED (the device's request budget or outcome cap; a gRPC call
#: shed past capacity answers RESOURCE_EXHAUSTED too) as ``rate_limited``, 503 / UNAVAILABLE (shed past capacity on
#: REST, the state store unreachable) as ``unavailable``. The learning data of those reports is lost unless the
#: device reports again (the agent does: it keeps undelivered outcomes, edgepath_agent.pending).
OUTCOME_ROUTE = ("/v1/outcomes", "POST")
OUTCOME_METHOD = "/edgepath.v1.PathService/ReportOutcome"
OUTCOME_REFUSALS: dict[int | str, str] = {
    429: "rate_limited",
    503: "unavailable",
    "RESOURCE_EXHAUSTED": "rate_limited",
    "UNAVAILABLE": "unavailable",
}
#: ``edgepath_outcomes_dropped_total{reason}`` (edgepath.state.redis).
OUTCOME_DROP_REASONS = ("outbox_full", "decision_outbox_full", "flush_unknown_decision", "undecodable")
#: ``edgepath_snapshots_rejected_total{reason}`` (edgepath.training.snapshots).
SNAPSHOT_REJECT_REASONS = ("unsigned", "bad_signature", "wrong_type", "unreadable")
#: ``edgepath_decision_log_dropped_total{reason}`` (edgepath.state.redis).
DECISION_LOG_DROP_REASONS = ("degraded", "unreachable")
#: ``edgepath_shed_total{transport}`` (edgepath.rest.app, edgepath.grpc.server).
SHED_TRANSPORTS = ("rest", "grpc")
#: ``edgepath_cc_measurements_ignored_total{reason}`` (edgepath.adapters.congestion): an accepted outcome's
#: ``congestion_measurement`` whose algorithm is no known congestion control (``unknown_algorithm``) or not one the
#: decision's kernel reported available (``not_offered``); the outcome itself counts.
CC_MEASUREMENT_IGNORE_REASONS = ("unknown_algorithm", "not_offered")
#: ``grpc_server_handled_total{grpc_service,grpc_method,grpc_code}`` created at 0 for every method of the service
#: (edgepath.v1.PathService; tests/service/test_observability_gaps.py checks them against the proto) and every code
#: its calls end with: OK, the codes of :data:`edgepath.grpc.server.GRPC_STATUS` the plane and the security layer
#: raise, UNKNOWN (a handler raised), CANCELLED / DEADLINE_EXCEEDED (edgepath.grpc.observe.cancelled_as), as the
#: alerts' ratios (EdgePathServerErrors, EdgePathRateLimited) need them.
PATH_SERVICE = "edgepath.v1.PathService"
PATH_SERVICE_METHODS = ("Recommend", "ReportOutcome", "RecommendBatch", "RecommendStream")
GRPC_CODES = (
    "OK",
    "INVALID_ARGUMENT",
    "NOT_FOUND",
    "PERMISSION_DENIED",
    "UNAUTHENTICATED",
    "RESOURCE_EXHAUSTED",
    "UNAVAILABLE",
    "UNKNOWN",
    "CANCELLED",
    "DEADLINE_EXCEEDED",
)
#: ``source`` of ``edgepath_model_info``: a warm-start artefact, a snapshot of the shared store (adopted, or
#: published by this process's trainer role), the cold model, or a model the in-process trainer refitted (memory
#: store, no snapshots).
MODEL_SOURCES = ("artefact", "snapshot", "cold", "refit")
#: Families ``edgepath train`` serves (:meth:`Metrics.trainer_registry`).
TRAINER_METRICS = (
    "edgepath_outcomes_dropped",
    "edgepath_snapshots_rejected",
    "edgepath_refit_restarts",
    "edgepath_trainer_lock_held",
    "edgepath_trainer_backlog_outcomes",
    "edgepath_trainer_last_publish_timestamp_seconds",
)

#: Latency buckets of the per-transport request metrics, s (the decision itself takes ~0.1-1 ms; the p99 targets
#: of issue 16 are tens of ms).
REQUEST_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass
class Metrics:
    """The service's metrics; build one per process (or per test) with its own registry."""

    registry: CollectorRegistry
    decisions: HotCounter
    outcomes: HotCounter
    decision_seconds: HotHistogram
    model_version: Gauge
    outcomes_dropped: Counter
    store_degraded: Gauge
    outbox_outcomes: Gauge
    #: The shared store's memory and its bound (Redis ``used_memory`` / ``maxmemory``, bytes; 0 until measured, and
    #: the in-process store's stay 0): past the bound a ``noeviction`` Redis refuses writes (503 "state store full").
    store_memory_used: Gauge
    store_memory_limit: Gauge
    snapshots_rejected: Counter
    #: Refit processes started again after one died (edgepath.training.online.ProcessRefitter): each lost the refit
    #: under way (its outcomes are kept and refitted on the new process).
    refit_restarts: Counter
    shed: HotCounter
    # decision log and apprentice mode (issue 18)
    decision_log_dropped: Counter
    apprentice_value: Gauge
    apprentice_serving_learner: Gauge
    #: Per-call count and latency of each transport (go-grpc-prometheus's and prometheus-fastapi-instrumentator's
    #: names and labels): hot, updated by the serving loop's own thread, no lock per call (issue 16).
    grpc_handled: HotCounter
    grpc_handling_seconds: HotHistogramFamily
    http_requests: HotCounter
    http_request_seconds: HotHistogramFamily
    #: Propensity of each chosen primary path under the serving policy (0-1].
    propensity: HotHistogram
    #: Decisions that did not take the policy's most likely arm (propensity < 0.5; with 2 arms exactly the
    #: exploratory ones), by policy: exploration share = rate(this) / rate(edgepath_decisions_total).
    explored: HotCounter
    #: Reward (the paper's Bernoulli reward, 0 or 1) and EdgePath's utility [0, 1] of every outcome joined for
    #: training: mean over a window = rate(_sum) / rate(_count).
    reward: HotHistogram
    utility: HotHistogram
    #: Seconds from a decision to its joined outcome (late outcomes are the tail).
    outcome_delay_seconds: HotHistogram
    #: Unix time the serving model was published (:meth:`model_served`): a snapshot's own ``published_at``, an
    #: artefact's training time, or (cold start, a model this process trained) the time it started serving it.
    model_published: Gauge
    #: ``edgepath_model_info{version,policy,source}`` = 1: one series per process, the serving model's
    #: (:meth:`model_served` removes the previous one).
    model_info: Gauge
    #: A trainer role's gauges: in :meth:`trainer_registry` (``edgepath train``) and, registered by
    #: :meth:`export_trainer_gauges`, in :attr:`registry` of a replica with the trainer role (``serve --trainer`` on a
    #: shared store); absent elsewhere (a decider without the role exports no lock at 0): 1 while it holds the trainer
    #: lock; outcomes in the shared outcome log not trained on yet (polled every ``store_memory_poll_s``); when it last
    #: published a snapshot (0: not yet).
    trainer_lock_held: Gauge
    trainer_backlog: Gauge
    trainer_last_publish: Gauge
    #: Admission signals (issue 16, :mod:`edgepath.admission`), read at scrape time from the process's
    #: ``Admission``: the serving thread's busy share (0-1) and the event loop's lag, s.
    admission_busy: Gauge
    admission_loop_lag_seconds: Gauge
    #: The Redis auto-pipeline (issue 16, :mod:`edgepath.state.autopipeline`): round trips it sent and the commands
    #: they carried; rate(commands) / rate(round trips) is the coalescing ``redis_pipeline_hold_iterations`` buys.
    redis_round_trips: HotCounter
    redis_commands: HotCounter
    #: Congestion measurements of accepted outcomes left out of the edge statistics, by reason
    #: (:data:`CC_MEASUREMENT_IGNORE_REASONS`; issue 20).
    cc_measurements_ignored: HotCounter
    #: (method, code) → the counter and histogram children of :meth:`grpc_call` (a method's name split and two
    #: label lookups per call were ~0.9 µs of its ~1.2; issue 16). Bounded by the methods and status codes.
    _model_info_labels: tuple[str, str, str] | None = field(default=None, init=False, repr=False)
    _grpc_children: dict[tuple[str, str], tuple[HotCounterChild, HotHistogram]] = field(
        default_factory=dict, init=False, repr=False
    )
    #: (route template, method, status) → the children of :meth:`http_request`, as :attr:`_grpc_children`.
    _http_children: dict[tuple[str, str, int], tuple[HotCounterChild, HotHistogram]] = field(
        default_factory=dict, init=False, repr=False
    )

    def model_served(self, version: int, policy: str, source: str, published_at: float) -> None:
        """The process serves model ``version`` of ``policy`` from ``source`` (:data:`MODEL_SOURCES`), published at
        ``published_at`` (Unix s): sets ``edgepath_model_version``, ``edgepath_model_published_timestamp_seconds``
        and the one ``edgepath_model_info`` series, whose previous label set is removed."""
        self.model_version.set(version)
        self.model_published.set(published_at)
        labels = (str(version), policy, source)
        if self._model_info_labels is not None and self._model_info_labels != labels:
            self.model_info.remove(*self._model_info_labels)
        self.model_info.labels(*labels).set(1)
        self._model_info_labels = labels

    def grpc_call(self, method: str, code: str, seconds: float) -> None:
        """Count one finished gRPC call (``/edgepath.v1.PathService/Recommend``, status code name, latency in s)
        as ``grpc_server_handled_total`` / ``grpc_server_handling_seconds`` (go-grpc-prometheus's names); a
        ReportOutcome refused as :data:`OUTCOME_REFUSALS` says also in ``edgepath_outcomes_total``."""
        children = self._grpc_children.get((method, code))
        if children is None:
            children = self._grpc_children_of(method, code)
        children[0].inc()
        children[1].observe(seconds)

    def _grpc_children_of(self, method: str, code: str) -> tuple[HotCounterChild, HotHistogram]:
        service, _, name = method.lstrip("/").rpartition("/")
        counter = self.grpc_handled.labels(service, name, code)
        if method == OUTCOME_METHOD and code in OUTCOME_REFUSALS:
            counter = _CountsTwice(counter, self.outcomes.labels(OUTCOME_REFUSALS[code]))
        children = self._grpc_children[(method, code)] = (counter, self.grpc_handling_seconds.labels(service, name))
        return children

    def http_request(self, handler: str, method: str, status: int, seconds: float) -> None:
        """Count one REST request (route template, HTTP method, status, latency in s) as
        ``edgepath_http_requests_total`` / ``edgepath_http_request_duration_seconds``
        (:class:`~edgepath.rest.app.RequestMetrics`); an outcome report refused as :data:`OUTCOME_REFUSALS` says
        also in ``edgepath_outcomes_total``. One dictionary lookup per request, as :meth:`grpc_call`."""
        children = self._http_children.get((handler, method, status))
        if children is None:
            children = self._http_children_of(handler, method, status)
        children[0].inc()
        children[1].observe(seconds)

    def _http_children_of(self, handler: str, method: str, status: int) -> tuple[HotCounterChild, HotHistogram]:
        counter = self.http_requests.labels(handler, method, str(status))
        if (handler, method) == OUTCOME_ROUTE and status in OUTCOME_REFUSALS:
            counter = _CountsTwice(counter, self.outcomes.labels(OUTCOME_REFUSALS[status]))
        children = self._http_children[(handler, method, status)] = (
            counter,
            self.http_request_seconds.labels(handler, method),
        )
        return children

    def initialise_http_routes(self, answers: Iterable[tuple[str, str, Iterable[int]]]) -> None:
        """Create at 0 the ``edgepath_http_requests_total`` series of ``(route template, HTTP method, statuses)``:
        each status a route answers with (:func:`edgepath.rest.app.known_answers`), so that an alert's ratio sees
        a route's first 429 or 5xx (a series born at 1 shows no increase). Counters only: the latency histograms
        (14 series each) appear with a route's first request, as before."""
        for handler, method, statuses in answers:
            for status in statuses:
                self.http_requests.labels(handler, method, str(status))

    def initialise_policy(self, policy: str, access_types: Iterable[str]) -> None:
        """Create at 0 the ``edgepath_decisions_total`` series of ``policy`` × ``access_types`` and its
        ``edgepath_decisions_explored_total`` (the plane, for each policy it serves under)."""
        for access_type in access_types:
            self.decisions.labels(policy, access_type)
        self.explored.labels(policy)

    def trainer_registry(self) -> CollectorRegistry:
        """A registry of the counters and gauges ``edgepath train`` updates (:data:`TRAINER_METRICS`), for its
        ``GET /metrics``:
        the trainer is scraped under the deciders' job, where the serving gauges it never sets (model version,
        publication time, admission) would read as a pod serving model 0 since 1970."""
        reg = CollectorRegistry()
        reg.register(self.outcomes_dropped)
        reg.register(self.snapshots_rejected)
        reg.register(self.refit_restarts)
        reg.register(self.trainer_lock_held)
        reg.register(self.trainer_backlog)
        reg.register(self.trainer_last_publish)
        return reg

    def export_trainer_gauges(self) -> None:
        """Export the trainer gauges (``edgepath_trainer_lock_held``, ``edgepath_trainer_backlog_outcomes``,
        ``edgepath_trainer_last_publish_timestamp_seconds``) from :attr:`registry` too: a serving replica with the
        trainer role (``serve --trainer``), which competes for the trainer lock as ``edgepath train`` does. Only
        there: a replica that never trains exports none, not a lock held at 0 (EdgePathTrainerDown reads their max)."""
        for gauge in (self.trainer_lock_held, self.trainer_backlog, self.trainer_last_publish):
            self.registry.register(gauge)

    def _initialise_label_sets(self) -> None:
        """Create every known label set at 0 (:data:`OUTCOME_RESULTS` and the others above, the gRPC calls of
        :data:`PATH_SERVICE_METHODS` × :data:`GRPC_CODES`), and the unlabelled hot counters, so that each series is
        exported from the first scrape. The REST routes' and the policy's series are created by the app and the plane
        (:meth:`initialise_http_routes`, :meth:`initialise_policy`), which know them."""
        for family, values in (
            (self.outcomes, OUTCOME_RESULTS),
            (self.outcomes_dropped, OUTCOME_DROP_REASONS),
            (self.snapshots_rejected, SNAPSHOT_REJECT_REASONS),
            (self.decision_log_dropped, DECISION_LOG_DROP_REASONS),
            (self.shed, SHED_TRANSPORTS),
            (self.cc_measurements_ignored, CC_MEASUREMENT_IGNORE_REASONS),
        ):
            for value in values:
                family.labels(value)
        self.redis_round_trips.labels()
        self.redis_commands.labels()
        for name in PATH_SERVICE_METHODS:
            for code in GRPC_CODES:
                self.grpc_handled.labels(PATH_SERVICE, name, code)

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> Metrics:
        reg = registry or CollectorRegistry()
        decisions = HotCounter("edgepath_decisions", "Primary-path decisions", ["policy", "access_type"])
        outcomes = HotCounter("edgepath_outcomes", "Outcome reports by result", ["result"])
        decision_seconds = HotHistogram(
            "edgepath_decision_seconds",
            "Time to decide one recommendation (plane only), s",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1),
        )
        shed = HotCounter("edgepath_shed", "Requests refused because the server was past capacity", ["transport"])
        propensity = HotHistogram(
            "edgepath_decision_propensity",
            "Propensity of the chosen primary path under the serving policy",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0),
        )
        explored = HotCounter(
            "edgepath_decisions_explored",
            "Decisions that did not take the policy's most likely arm (propensity < 0.5)",
            ["policy"],
        )
        reward = HotHistogram(
            "edgepath_outcome_reward", "Bernoulli reward (0/1) of each outcome joined for training", buckets=(0.5,)
        )
        utility = HotHistogram(
            "edgepath_outcome_utility",
            "Utility [0, 1] of each outcome joined for training (edgepath.engines.reward.utility)",
            buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
        )
        outcome_delay = HotHistogram(
            "edgepath_outcome_delay_seconds",
            "Time from a decision to its joined outcome, s",
            buckets=(1, 5, 15, 60, 300, 900, 3600),
        )
        grpc_handled = HotCounter(
            "grpc_server_handled",
            "gRPC calls completed on the server, by service, method and status code",
            ["grpc_service", "grpc_method", "grpc_code"],
        )
        grpc_handling_seconds = HotHistogramFamily(
            "grpc_server_handling_seconds",
            "gRPC call latency on the server (request received to status sent), s",
            ["grpc_service", "grpc_method"],
            REQUEST_SECONDS_BUCKETS,
        )
        http_requests = HotCounter(
            "edgepath_http_requests",
            "REST requests by route template, method and status",
            ["handler", "method", "status"],
        )
        http_request_seconds = HotHistogramFamily(
            "edgepath_http_request_duration_seconds",
            "REST request latency by route template and method, s",
            ["handler", "method"],
            REQUEST_SECONDS_BUCKETS,
        )
        redis_round_trips = HotCounter(
            "edgepath_redis_round_trips", "Pipelines the Redis auto-pipeline sent (one round trip each)", []
        )
        redis_commands = HotCounter(
            "edgepath_redis_pipelined_commands",
            "Commands sent through the Redis auto-pipeline (per round trip: rate of this / rate of "
            "edgepath_redis_round_trips_total)",
            [],
        )
        cc_measurements_ignored = HotCounter(
            "edgepath_cc_measurements_ignored",
            "Congestion measurements of accepted outcomes not counted in the edge statistics (the outcome counts)",
            ["reason"],
        )
        reg.register(
            _HotCollector(
                decisions,
                outcomes,
                decision_seconds,
                shed,
                propensity,
                explored,
                reward,
                utility,
                outcome_delay,
                grpc_handled,
                grpc_handling_seconds,
                http_requests,
                http_request_seconds,
                redis_round_trips,
                redis_commands,
                cc_measurements_ignored,
            )
        )
        metrics = cls(
            registry=reg,
            decisions=decisions,
            outcomes=outcomes,
            decision_seconds=decision_seconds,
            model_version=Gauge("edgepath_model_version", "Serving primary-path model version", registry=reg),
            outcomes_dropped=Counter(
                "edgepath_outcomes_dropped",
                "Outcomes dropped instead of reaching the trainer",
                ["reason"],
                registry=reg,
            ),
            store_degraded=Gauge(
                "edgepath_store_degraded", "1 while the shared state store is unreachable (degraded mode)", registry=reg
            ),
            outbox_outcomes=Gauge(
                "edgepath_outbox_outcomes", "Outcomes buffered in memory until the state store returns", registry=reg
            ),
            store_memory_used=Gauge(
                "edgepath_store_memory_used_bytes",
                "Memory the shared state store uses (Redis used_memory; 0: not measured)",
                registry=reg,
            ),
            store_memory_limit=Gauge(
                "edgepath_store_memory_limit_bytes",
                "Memory bound of the shared state store past which it refuses writes (Redis maxmemory; 0: none or "
                "not measured)",
                registry=reg,
            ),
            snapshots_rejected=Counter(
                "edgepath_snapshots_rejected", "Model snapshots refused before unpickling", ["reason"], registry=reg
            ),
            refit_restarts=Counter(
                "edgepath_refit_restarts",
                "Refit processes started again after one died (OOM kill, a signal, a crash): the refit under way was "
                "lost, its outcomes kept",
                registry=reg,
            ),
            shed=shed,
            decision_log_dropped=Counter(
                "edgepath_decision_log_dropped",
                "Joined decisions not written to the decision log",
                ["reason"],
                registry=reg,
            ),
            apprentice_value=Gauge(
                "edgepath_apprentice_value",
                "Apprentice mode: estimated mean utility per decision (estimate: learner IPS, its ci95 bounds, "
                "or the measured baseline)",
                ["estimate"],
                registry=reg,
            ),
            apprentice_serving_learner=Gauge(
                "edgepath_apprentice_serving_learner",
                "Apprentice mode: 1 while the learner is promoted and serves, 0 while the baseline serves",
                registry=reg,
            ),
            grpc_handled=grpc_handled,
            http_requests=http_requests,
            http_request_seconds=http_request_seconds,
            propensity=propensity,
            explored=explored,
            reward=reward,
            utility=utility,
            outcome_delay_seconds=outcome_delay,
            model_published=Gauge(
                "edgepath_model_published_timestamp_seconds",
                "Unix time the serving model was published (age = time() - this): a snapshot's own published_at, a "
                "warm-start artefact's training time (its card's trained_at), else when this process started serving "
                "it",
                registry=reg,
            ),
            trainer_lock_held=Gauge(
                "edgepath_trainer_lock_held",
                "1 while this trainer holds the trainer lock (the one that trains)",
                registry=None,  # trainer_registry(), export_trainer_gauges()
            ),
            trainer_backlog=Gauge(
                "edgepath_trainer_backlog_outcomes",
                "Outcomes in the shared outcome log not trained on yet (delivered and unacknowledged, or not read)",
                registry=None,  # trainer_registry(), export_trainer_gauges()
            ),
            trainer_last_publish=Gauge(
                "edgepath_trainer_last_publish_timestamp_seconds",
                "Unix time this trainer last published a model snapshot (0: not since it started)",
                registry=None,  # trainer_registry(), export_trainer_gauges()
            ),
            model_info=Gauge(
                "edgepath_model_info",
                "1 for the model this process serves: version, policy, source (artefact, snapshot, cold, refit)",
                ["version", "policy", "source"],
                registry=reg,
            ),
            admission_busy=Gauge(
                "edgepath_admission_busy_ratio",
                "Share of the last ~0.1 s the serving thread was running or waiting for a core (saturation: near 1, "
                "no spare capacity; it does not shed)",
                registry=reg,
            ),
            admission_loop_lag_seconds=Gauge(
                "edgepath_admission_loop_lag_seconds",
                "How late the serving event loop ran its monitor timer (25 ms; 5 ms past half the lag bound), smaller "
                "of the last two, s",
                registry=reg,
            ),
            grpc_handling_seconds=grpc_handling_seconds,
            redis_round_trips=redis_round_trips,
            redis_commands=redis_commands,
            cc_measurements_ignored=cc_measurements_ignored,
        )
        metrics._initialise_label_sets()
        return metrics
