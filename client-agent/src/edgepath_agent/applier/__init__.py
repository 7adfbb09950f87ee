"""Applier: recommendation → MPTCP endpoints/limits, routes, congestion control (journalled, reversible)."""

from edgepath_agent.applier.backend import Backend, BackendError, CommandBackend, DryRunBackend
from edgepath_agent.applier.core import (
    CC_PROFILES,
    CC_SYSCTL,
    Applied,
    Applier,
    ApplierConfig,
    ApplyError,
    RejectedRecommendation,
    Restored,
    RestoreIncomplete,
    RouteMetricConflict,
    choose_cc,
    desired_state,
    scheduler_weights,
)
from edgepath_agent.applier.journal import Journal, JournalError
from edgepath_agent.applier.state import Endpoint, NetState, Route, diff, simulate

__all__ = [
    "CC_PROFILES",
    "CC_SYSCTL",
    "Applied",
    "Applier",
    "ApplierConfig",
    "ApplyError",
    "Backend",
    "BackendError",
    "CommandBackend",
    "DryRunBackend",
    "Endpoint",
    "Journal",
    "JournalError",
    "NetState",
    "RejectedRecommendation",
    "RestoreIncomplete",
    "Restored",
    "Route",
    "RouteMetricConflict",
    "choose_cc",
    "desired_state",
    "diff",
    "scheduler_weights",
    "simulate",
]
