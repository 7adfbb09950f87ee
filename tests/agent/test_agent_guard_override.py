"""The upstream guard's override is what the applier applies, whichever field carries the initial subflow.

A recommendation may put the initial subflow on another interface than ``primary_path``: its ATSSS steering
rule's ``initial_subflow`` access (issue 19), or, with ``follow_mlpm``, MLPM's ``prioritised_subflow`` (issue
20). The guard's override used to replace ``primary_path`` only, so the route stayed on the path without upstream
while the agent logged the switch. The applier is the dry-run backend here (its simulated state stands in for the
kernel; netns/test_agent_guard_steering_netns.py reads a real routing table); the guard's probes are scripted.
"""

from __future__ import annotations

from typing import Any

import pytest
from agent_fixtures import STEERED
from edgepath_agent.applier import Applier, DryRunBackend, Journal, NetState, Route
from edgepath_agent.daemon import Agent, AgentConfig
from edgepath_agent.messages import OutcomeAck, Recommendation
from edgepath_agent.upstream import PrimaryGuard, UpstreamProbe

ROUTES = NetState(default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)))
ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}

#: MLPM prioritises wlan0 and gives wwan0 a weight below the backup threshold (0.2).
MLPM: dict[str, Any] = {
    "decision_id": "d-mlpm",
    "primary_path": {"interface": "wlan0", "access_type": "WIFI"},
    "scheduler": {
        "weights": [{"interface": "wlan0", "weight": 0.9}, {"interface": "wwan0", "weight": 0.1}],
        "prioritised_subflow": "wlan0",
    },
}


class Fixed:
    """Stands in for the service: answers ``body`` to every request."""

    url = "fixed://"

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def recommend(self, request: dict[str, Any]) -> Recommendation:
        return Recommendation.from_rest(self.body)

    def report_outcome(self, outcome: dict[str, Any]) -> OutcomeAck:
        return OutcomeAck(decision_id=outcome["decision_id"], accepted=True)

    def close(self) -> None:
        pass


def wlan0_dead(interface: str) -> UpstreamProbe:
    ok = interface != "wlan0"
    return UpstreamProbe(interface, ok, "answers" if ok else "no answer within 1 s", 1.0, 0)


def agent_for(body: dict[str, Any], follow_mlpm: bool = False) -> tuple[Agent, DryRunBackend]:
    config = AgentConfig(
        device_id="dev-guard",
        interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
        manage_cc=False,
        follow_mlpm=follow_mlpm,
        status_file=None,
    )
    backend = DryRunBackend(ROUTES, ADDRS, out=None)
    applier = Applier(backend, Journal(), config.applier_config())
    guard = PrimaryGuard(("wlan0", "wwan0"), wlan0_dead, failures=1)
    return Agent(config, Fixed(body), applier, [], measure=lambda _p: None, guard=guard), backend


def backups(state: NetState) -> set[str | None]:
    return {e.dev for e in state.endpoints if "backup" in e.flags}


@pytest.mark.parametrize(("body", "follow_mlpm"), [(STEERED, False), (MLPM, True)], ids=["steering", "mlpm"])
def test_the_guard_override_is_the_applied_primary(body: dict[str, Any], follow_mlpm: bool) -> None:
    agent, backend = agent_for(body, follow_mlpm)
    result = agent.step()
    assert result.applied is not None and result.applied.primary == "wwan0"
    assert min(backend.state.default_routes, key=lambda r: r.metric).dev == "wwan0"
    assert "wwan0" not in backups(backend.state)  # the path carrying the initial subflow is never backup
    record = agent.status_record()
    assert record["applied"]["primary"] == "wwan0" and record["preferred_primary"] == "wlan0"
    assert "wlan0 has no upstream connectivity" in record["override_reason"]


def test_the_previous_initial_access_becomes_the_standby() -> None:
    agent, backend = agent_for(STEERED)
    agent.step()
    assert backups(backend.state) == {"wlan0"}  # Active-Standby: the dead path is the standby, not gone


def test_the_guard_probes_the_path_the_steering_rule_makes_initial() -> None:
    """primary_path says wwan0 but the steering rule puts the initial subflow on wlan0: wlan0 is probed."""
    body = {**STEERED, "primary_path": {"interface": "wwan0", "access_type": "LTE"}}
    agent, backend = agent_for(body)
    result = agent.step()
    assert agent.preferred == "wlan0" and result.applied is not None and result.applied.primary == "wwan0"
    assert min(backend.state.default_routes, key=lambda r: r.metric).dev == "wwan0"


def test_with_primary_moves_every_initial_subflow_field() -> None:
    rec = Recommendation.from_rest(STEERED).with_primary("wwan0", "LTE")
    assert rec.primary_path.interface == "wwan0" and rec.initial_interface() == "wwan0"
    accesses = {a.interface: a.initial_subflow for a in rec.steering.rules[-1].accesses}
    assert accesses == {"wlan0": False, "wwan0": True}
    mlpm = Recommendation.from_rest(MLPM).with_primary("wwan0", "LTE")
    assert mlpm.initial_interface(follow_mlpm=True) == "wwan0"
    assert [(w.interface, w.weight) for w in mlpm.scheduler.weights] == [("wlan0", 0.9), ("wwan0", 0.1)]
    one_access = {
        **STEERED,
        "steering": {
            "rules": [{"steering_mode": "ACTIVE_STANDBY", "accesses": [STEERED["steering"]["rules"][0]["accesses"][0]]}]
        },
    }
    added = Recommendation.from_rest(one_access).with_primary("wwan0", "LTE")
    assert [(a.interface, a.initial_subflow) for a in added.steering.rules[-1].accesses] == [
        ("wlan0", False),
        ("wwan0", True),
    ]
