"""The upstream guard's override is what the applier applies, whichever field carries the initial subflow.

A recommendation may put the initial subflow on another interface than ``primary_path``: its ATSSS steering
rule's ``initial_subflow`` access (issue 19), or, with ``follow_mlpm``, MLPM's ``prioritised_subflow`` (issue
20). The guard's override used to replace ``primary_path`` only, so the route stayed on the path without upstream
while the agent logged the switch. The applier is the dry-run backend here (its simulated state stands in for the
kernel; netns/test_agent_guard_steering_netns.py reads a real routing table); the guard's probes are scripted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from agent_fixtures import STEERED, steered
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


#: A recommendation with nothing but its primary path.
PLAIN: dict[str, Any] = {"decision_id": "d-plain", "primary_path": {"interface": "wlan0", "access_type": "WIFI"}}


#: id → (recommendation, follow_mlpm, interfaces it makes backup itself: what the end of the override restores).
#: Under the override (wlan0 without upstream) wlan0 alone is backup in every case.
CASES: dict[str, tuple[dict[str, Any], bool, set[str]]] = {
    "smallest-delay": (steered("SMALLEST_DELAY"), False, set()),
    "load-balancing": (steered("LOAD_BALANCING"), False, set()),
    "redundant": (steered("REDUNDANT"), False, set()),
    "active-standby": (steered("ACTIVE_STANDBY"), False, {"wwan0"}),
    "priority-based": (steered("PRIORITY_BASED"), False, {"wwan0"}),
    "mlpm": (MLPM, True, {"wwan0"}),  # wlan0's weight 0.9 would keep it active
    "weights": (MLPM, False, {"wwan0"}),  # the weights alone (no follow_mlpm): the same
    "plain": (PLAIN, False, set()),
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


class Upstreams:
    """Scripted probes: the interfaces in ``dead`` do not answer (the test changes it between steps)."""

    def __init__(self, *dead: str) -> None:
        self.dead = set(dead)

    def __call__(self, interface: str) -> UpstreamProbe:
        ok = interface not in self.dead
        return UpstreamProbe(interface, ok, "answers" if ok else "no answer within 1 s", 1.0, 0)


def agent_for(
    body: dict[str, Any], follow_mlpm: bool = False, prober: Callable[[str], UpstreamProbe] = wlan0_dead
) -> tuple[Agent, DryRunBackend]:
    config = AgentConfig(
        device_id="dev-guard",
        interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
        manage_cc=False,
        follow_mlpm=follow_mlpm,
        status_file=None,
    )
    backend = DryRunBackend(ROUTES, ADDRS, out=None)
    applier = Applier(backend, Journal(), config.applier_config())
    guard = PrimaryGuard(("wlan0", "wwan0"), prober, failures=1, recoveries=1)
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
    rec = Recommendation.from_rest(STEERED).with_primary("wwan0", "LTE", ("wlan0",))
    assert rec.primary_path.interface == "wwan0" and rec.initial_interface() == "wwan0"
    accesses = {a.interface: a.initial_subflow for a in rec.steering.rules[-1].accesses}
    assert accesses == {"wlan0": False, "wwan0": True}
    mlpm = Recommendation.from_rest(MLPM).with_primary("wwan0", "LTE", ("wlan0",))
    assert mlpm.initial_interface(follow_mlpm=True) == "wwan0"
    assert [(w.interface, w.weight) for w in mlpm.scheduler.weights] == [("wlan0", 0.9), ("wwan0", 0.1)]
    one_access = {
        **STEERED,
        "steering": {
            "rules": [{"steering_mode": "ACTIVE_STANDBY", "accesses": [STEERED["steering"]["rules"][0]["accesses"][0]]}]
        },
    }
    added = Recommendation.from_rest(one_access).with_primary("wwan0", "LTE", ("wlan0",))
    assert [(a.interface, a.initial_subflow) for a in added.steering.rules[-1].accesses] == [
        ("wlan0", False),
        ("wwan0", True),
    ]


@pytest.mark.parametrize(("body", "follow_mlpm", "restored"), CASES.values(), ids=list(CASES))
def test_the_path_without_upstream_is_backup_while_the_override_lasts(
    body: dict[str, Any], follow_mlpm: bool, restored: set[str]
) -> None:
    """Mainline's scheduler (net/mptcp/protocol.c mptcp_subflow_get_send) sends on any non-backup subflow: the dead
    path must be backup, whatever the mode or weights; it stays an endpoint, and the next decision applied
    without the override gives it the recommendation's flags again."""
    upstreams = Upstreams("wlan0")
    agent, backend = agent_for(body, follow_mlpm, upstreams)
    result = agent.step()
    assert result.applied is not None and result.applied.primary == "wwan0"
    assert backups(backend.state) == {"wlan0"} and result.applied.backup == ("wlan0",)
    assert {e.dev for e in backend.state.endpoints} == {"wlan0", "wwan0"}

    upstreams.dead.clear()
    result = agent.step()  # wlan0 answers: the decision is applied as it came
    assert result.applied is not None and result.applied.primary == "wlan0" and agent.override_reason is None
    assert backups(backend.state) == restored


@pytest.mark.parametrize(("body", "follow_mlpm", "restored"), CASES.values(), ids=list(CASES))
def test_the_periodic_check_demotes_the_primary_it_leaves_and_restores_it(
    body: dict[str, Any], follow_mlpm: bool, restored: set[str]
) -> None:
    upstreams = Upstreams()
    agent, backend = agent_for(body, follow_mlpm, upstreams)
    agent.step()
    assert backups(backend.state) == restored

    upstreams.dead.add("wlan0")
    assert agent.watch_upstream() == "wwan0"
    assert backups(backend.state) == {"wlan0"}

    upstreams.dead.clear()
    assert agent.watch_upstream() == "wlan0" and agent.override_reason is None
    assert backups(backend.state) == restored


def test_with_primary_demotes_the_paths_it_leaves_never_the_new_primary() -> None:
    rec = Recommendation.from_rest(PLAIN)
    assert rec.demoted == () and "demoted" not in rec
    once = rec.with_primary("wwan0", "LTE", ("wlan0", "wwan0"))
    assert once.demoted == ("wlan0",)
    assert once.with_primary("eth0", "ETHERNET", ("wwan0",)).demoted == ("wlan0", "wwan0")


def test_a_demoted_interface_the_device_lacks_is_ignored() -> None:
    """An interface gone from the device (its upstream then fails too) must not make the override a refusal."""
    agent, _backend = agent_for(PLAIN)
    applied = agent.applier.apply(Recommendation.from_rest(PLAIN).with_primary("wwan0", "LTE", ("eth7", "wlan0")))
    assert applied.primary == "wwan0" and applied.backup == ("wlan0",)


def test_an_override_drops_the_source_address_of_the_path_it_leaves() -> None:
    """A hand-written recommendation may name the primary path's source address; the override moves the primary to
    another interface, whose addresses do not include it: kept, the safety check refused the override's apply."""
    body = {**PLAIN, "primary_path": {**PLAIN["primary_path"], "address": ADDRS["wlan0"][0]}}
    agent, _backend = agent_for(body)
    applied = agent.applier.apply(agent.guard_primary(Recommendation.from_rest(body))[0])
    assert applied.primary == "wwan0" and applied.backup == ("wlan0",)
    same = Recommendation.from_rest(body).with_primary("wlan0", "WIFI", ())
    assert same.primary_path.address == body["primary_path"]["address"], "no move: the address stays"


#: Three paths in order of fallback: the recommendation prefers wlan0; wwan0 takes over first, then wwan1.
ROUTES3 = NetState(
    default_routes=(
        Route("wlan0", "10.1.1.1", 100),
        Route("wwan0", "10.1.2.1", 200),
        Route("wwan1", "10.1.3.1", 300),
    )
)
ADDRS3 = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"], "wwan1": ["10.1.3.2"]}


def three_path_agent(upstreams: Upstreams) -> tuple[Agent, DryRunBackend]:
    """A plain recommendation (wlan0 primary, no path backup by itself) over three paths, probes scripted."""
    config = AgentConfig(
        device_id="dev-guard",
        interfaces={"wlan0": "WIFI", "wwan0": "LTE", "wwan1": "NR"},
        manage_cc=False,
        status_file=None,
    )
    backend = DryRunBackend(ROUTES3, ADDRS3, out=None)
    applier = Applier(backend, Journal(), config.applier_config())
    guard = PrimaryGuard(("wlan0", "wwan0", "wwan1"), upstreams, failures=1, recoveries=1)
    return Agent(config, Fixed(PLAIN), applier, [], measure=lambda _p: None, guard=guard), backend


def test_a_path_that_died_during_the_override_stays_backup_when_the_preferred_path_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """wlan0 dies (→ wwan0), then wwan0 dies (→ wwan1), then wlan0 answers again: wlan0 is primary once more and
    wwan0, still without upstream, stays backup (it used to get the recommendation's flags back: active, so
    mainline's scheduler sent on its dead subflow). Its first answer gives its flags back, the primary kept."""
    upstreams = Upstreams()
    agent, backend = three_path_agent(upstreams)
    agent.step()
    assert backups(backend.state) == set()

    upstreams.dead.add("wlan0")
    assert agent.watch_upstream() == "wwan0" and backups(backend.state) == {"wlan0"}
    upstreams.dead.add("wwan0")
    assert agent.watch_upstream() == "wwan1" and backups(backend.state) == {"wlan0", "wwan0"}

    upstreams.dead.discard("wlan0")
    assert agent.watch_upstream() == "wlan0" and agent.override_reason is None
    assert backups(backend.state) == {"wwan0"}
    assert agent.status_record()["demoted_paths"] == ["wwan0"]
    assert agent.watch_upstream() is None  # wwan0 re-probed, still dead: nothing to apply

    upstreams.dead.clear()
    caplog.set_level(logging.INFO, logger="edgepath_agent.daemon")
    assert agent.watch_upstream() == "wlan0"  # the primary kept, wwan0's flags back
    assert backups(backend.state) == set() and agent.demoted == ()
    assert agent.watch_upstream() is None
    kept = [(r.levelname, r.getMessage()) for r in caplog.records if "kept" in r.getMessage()]
    assert kept == [("INFO", "primary wlan0 kept: wwan0 answers again: the recommendation's flags")]


def test_a_new_recommendation_keeps_a_path_without_upstream_backup() -> None:
    """The next decision is applied with the guard's knowledge: the preferred path answers, so no override, but
    wwan0 (found dead) is backup, not what the recommendation says."""
    upstreams = Upstreams("wlan0", "wwan0")
    agent, backend = three_path_agent(upstreams)
    result = agent.step()  # wlan0 and wwan0 dead: wwan1 primary
    assert result.applied is not None and result.applied.primary == "wwan1"
    assert backups(backend.state) == {"wlan0", "wwan0"}

    upstreams.dead.discard("wlan0")
    result = agent.step()
    assert result.applied is not None and result.applied.primary == "wlan0" and agent.override_reason is None
    assert backups(backend.state) == {"wwan0"}


def test_the_paths_without_upstream_are_re_probed_one_per_check_in_turn() -> None:
    """Two dead paths besides the primary: each periodic check probes the primary and one of them, alternating,
    so a check costs at most one more probe timeout however many paths are dead."""
    upstreams = Upstreams("wwan0", "wwan1")
    guard = PrimaryGuard(("wlan0", "wwan0", "wwan1"), upstreams, failures=1, recoveries=1)
    assert guard.choose("wwan0") == (
        "wlan0",
        "wwan0 has no upstream connectivity (no answer within 1 s); wlan0 answers",
    )
    guard.probe("wwan1")
    assert guard.without_upstream() == ("wwan0", "wwan1")
    assert [guard.recheck(("wlan0",)) for _ in range(3)] == ["wwan0", "wwan1", "wwan0"]
    assert guard.recheck(("wlan0", "wwan0")) == "wwan1"  # the primary and preferred paths are watch()'s own
    upstreams.dead.discard("wwan1")
    assert guard.recheck(("wlan0",)) == "wwan0" and guard.recheck(("wlan0",)) == "wwan1"
    assert guard.without_upstream() == ("wwan0",)  # one answer is enough to leave the set
    assert guard.recheck(("wlan0", "wwan0")) is None


def test_a_refused_recommendation_of_an_unmanaged_path_changes_no_flag() -> None:
    """A recommendation naming an interface the agent does not manage is refused by the safety checks (the last
    configuration stays). The guard's preferred path used to become that name all the same: the next periodic
    check probed it and logged "primary wlan0 → eth9: preferred path eth9 answers again" (re-applying the old
    decision, marking its interval interrupted: its outcome lost). Now the preferred path stays the applied
    recommendation's: nothing to apply."""
    agent, backend = agent_for(PLAIN, prober=Upstreams())
    assert agent.step().applied is not None
    assert isinstance(agent.client, Fixed)
    agent.client.body = {
        **PLAIN,
        "decision_id": "d-eth9",
        "primary_path": {"interface": "eth9", "access_type": "ETHERNET"},
    }
    result = agent.step()
    assert result.kept_last and agent.preferred == "wlan0"
    assert agent.watch_upstream() is None and agent.demoted == () and backups(backend.state) == set()
    assert min(backend.state.default_routes, key=lambda r: r.metric).dev == "wlan0", "nothing rolled back"
