"""Prometheus metrics of one service process, on an explicitly passed registry."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class Metrics:
    """The service's metrics; build one per process (or per test) with its own registry."""

    registry: CollectorRegistry
    decisions: Counter
    outcomes: Counter
    decision_seconds: Histogram
    model_version: Gauge
    outcomes_dropped: Counter
    store_degraded: Gauge
    outbox_outcomes: Gauge
    snapshots_rejected: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> Metrics:
        reg = registry or CollectorRegistry()
        return cls(
            registry=reg,
            decisions=Counter("edgepath_decisions", "Primary-path decisions", ["policy", "access_type"], registry=reg),
            outcomes=Counter("edgepath_outcomes", "Outcome reports by result", ["result"], registry=reg),
            decision_seconds=Histogram(
                "edgepath_decision_seconds",
                "Time to decide one recommendation (plane only), s",
                buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1),
                registry=reg,
            ),
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
            snapshots_rejected=Counter(
                "edgepath_snapshots_rejected", "Model snapshots refused before unpickling", ["reason"], registry=reg
            ),
        )
