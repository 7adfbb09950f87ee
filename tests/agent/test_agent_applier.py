"""Applier logic without privileges: argv builders, plans, dry run, journal and rollback.

The dry-run backend simulates the kernel state with the same pure simulator the
applier uses for its safety check; the real kernel is exercised in tests/agent/netns/.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from edgepath_agent.applier import (
    CC_SYSCTL,
    Applier,
    ApplierConfig,
    ApplyError,
    CommandBackend,
    DryRunBackend,
    Endpoint,
    Journal,
    NetState,
    RejectedRecommendation,
    Route,
    choose_cc,
    commands,
    diff,
    scheduler_weights,
    simulate,
)
from edgepath_agent.applier.state import SimulationError, parse_default_routes_json, parse_endpoints_json, parse_limits

WLAN = Route(dev="wlan0", gateway="10.1.1.1", metric=100)
WWAN = Route(dev="wwan0", gateway="10.1.2.1", metric=200, protocol="dhcp", prefsrc="10.1.2.2")
ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}


def initial() -> NetState:
    return NetState(
        endpoints=(Endpoint(7, "10.9.9.9", "eth0", ("signal",)),),
        limits=(("add_addr_accepted", 0), ("subflows", 0)),
        default_routes=(WLAN, WWAN),
        sysctls=((CC_SYSCTL, "reno"),),
    )


def rec(primary: str, **extra) -> dict:
    return {"decision_id": "d1", "primary_path": {"interface": primary, "access_type": "LTE"}, **extra}


def make(state: NetState | None = None, journal: Journal | None = None, **cfg) -> tuple[Applier, DryRunBackend]:
    backend = DryRunBackend(state or initial(), ADDRS, out=None)
    applier = Applier(backend, journal or Journal(), ApplierConfig(**cfg), allowed_cc=("reno", "bbr"))
    return applier, backend


# ---------------------------------------------------------------- argv builders


def test_argv_builders():
    assert commands.endpoint_add(Endpoint(3, "10.1.1.2", "wlan0", ("backup", "subflow"))) == [
        "ip", "mptcp", "endpoint", "add", "10.1.1.2", "id", "3", "dev", "wlan0", "subflow", "backup",
    ]  # fmt: skip
    assert commands.endpoint_delete(3) == ["ip", "mptcp", "endpoint", "delete", "id", "3"]
    assert commands.endpoint_set_backup(3, False) == ["ip", "mptcp", "endpoint", "change", "id", "3", "nobackup"]
    assert commands.limits_set({"subflows": 2, "add_addr_accepted": 1}) == [
        "ip", "mptcp", "limits", "set", "subflows", "2", "add_addr_accepted", "1",
    ]  # fmt: skip
    assert commands.route_add(WWAN) == [
        "ip", "-4", "route", "add", "default", "via", "10.1.2.1", "dev", "wwan0", "proto", "dhcp",
        "src", "10.1.2.2", "metric", "200",
    ]  # fmt: skip
    assert commands.route_delete(WWAN) == [
        "ip", "-4", "route", "del", "default", "via", "10.1.2.1", "dev", "wwan0", "metric", "200",
    ]  # fmt: skip
    assert commands.sysctl_set(CC_SYSCTL, "bbr") == ["sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=bbr"]
    assert commands.in_netns(["ip", "route"], "ns1") == ["ip", "netns", "exec", "ns1", "ip", "route"]
    with pytest.raises(ValueError, match="unknown MPTCP endpoint flag"):
        Endpoint(1, "10.0.0.1", None, ("implicit",))


def test_state_parsers_on_iproute2_output():
    eps = parse_endpoints_json('[{"address":"10.1.1.2","id":1,"subflow":true,"backup":true,"dev":"wlan0"}]')
    assert eps == (Endpoint(1, "10.1.1.2", "wlan0", ("subflow", "backup")),)
    assert parse_limits("add_addr_accepted 0 subflows 2 \n") == (("add_addr_accepted", 0), ("subflows", 2))
    routes = parse_default_routes_json(
        '[{"dst":"default","gateway":"10.9.1.1","dev":"vx1","protocol":"dhcp","prefsrc":"10.9.1.2","metric":300,'
        '"flags":[]},{"dst":"default","gateway":"10.9.1.1","dev":"vx1","flags":["onlink"]}]'
    )
    assert routes == (
        Route("vx1", "10.9.1.1", 300, "dhcp", "10.9.1.2"),
        Route("vx1", "10.9.1.1", 0, None, None, onlink=True),
    )


# ---------------------------------------------------------------- plans


def test_apply_makes_recommended_interface_primary_and_sets_everything():
    applier, backend = make()
    applied = applier.apply(rec("wwan0", congestion_control="bbr"))
    state = backend.state
    metrics = {r.dev: r.metric for r in state.default_routes}
    assert metrics == {"wwan0": 10, "wlan0": 20}
    wwan = next(r for r in state.default_routes if r.dev == "wwan0")
    assert (wwan.protocol, wwan.prefsrc) == ("dhcp", "10.1.2.2")  # attributes survive the re-metric
    assert {(e.address, e.dev, e.flags) for e in state.endpoints} == {
        ("10.9.9.9", "eth0", ("signal",)),
        ("10.1.1.2", "wlan0", ("subflow",)),
        ("10.1.2.2", "wwan0", ("subflow",)),
    }
    assert state.limits_dict == {"subflows": 2, "add_addr_accepted": 2}
    assert state.sysctls_dict[CC_SYSCTL] == "bbr" and applied.congestion_control == "bbr"
    assert applier.apply(rec("wwan0", congestion_control="bbr")).steps == 0  # idempotent


def test_routes_are_added_before_deleted():
    applier, backend = make()
    applier.apply(rec("wwan0"))
    route_ops = [argv[3] for argv in backend.printed if argv[:3] == ["ip", "-4", "route"]]
    assert route_ops == ["add", "add", "del", "del"]


def test_primary_swaps_metrics_through_a_temporary_metric():
    applier, backend = make()
    applier.apply(rec("wwan0"))
    applier.apply(rec("wlan0"))  # wlan0 wants metric 10, which wwan0 holds: IPv4 would say EEXIST
    assert {r.dev: r.metric for r in backend.state.default_routes} == {"wlan0": 10, "wwan0": 20}
    applier.apply(rec("wwan0"))
    assert {r.dev: r.metric for r in backend.state.default_routes} == {"wwan0": 10, "wlan0": 20}


def test_low_scheduler_weight_marks_backup_but_never_the_primary():
    applier, backend = make()
    applier.apply(rec("wlan0", scheduler_weights={"wlan0": 0.05, "wwan0": 0.1}))
    flags = {e.dev: e.flags for e in backend.state.endpoints}
    assert flags["wwan0"] == ("subflow", "backup") and flags["wlan0"] == ("subflow",)
    applier.apply(rec("wlan0", scheduler_weights={"wlan0": 0.5, "wwan0": 0.5}))
    assert {e.dev: e.flags for e in backend.state.endpoints}["wwan0"] == ("subflow",)
    assert backend.printed[-1] == ["ip", "mptcp", "endpoint", "change", "id", "9", "nobackup"]


def test_scheduler_weight_shapes():
    mlpm = {"scheduler": {"weights": [{"interface": "wlan0", "weight": 0.7, "score": 0.9}], "priority": "throughput"}}
    assert scheduler_weights(mlpm) == {"wlan0": 0.7}
    assert scheduler_weights({"scheduler_weights": [{"interface": "wlan0", "weight": 0.7}]}) == {"wlan0": 0.7}
    assert scheduler_weights({"scheduler_weights": {"wwan0": 0.3}}) == {"wwan0": 0.3}
    assert scheduler_weights({}) == {}


def test_congestion_advice_mptcp_level_first_then_subflow_level():
    applier, backend = make()
    advice = {"congestion": {"mptcp_level": "olia", "subflow_level": "bbr", "profile": "BULK"}}
    assert applier.apply(rec("wlan0", **advice)).congestion_control == "bbr"  # olia not allowed here
    assert backend.state.sysctls_dict[CC_SYSCTL] == "bbr"


def test_choose_cc_checks_allowed_list_and_falls_back_by_profile():
    assert choose_cc("bbr", "default", ["reno", "bbr"]) == "bbr"
    assert choose_cc(["olia", "reno"], "default", ["reno", "bbr"]) == "reno"
    assert choose_cc("olia", "coupled", ["reno", "cubic"]) == "cubic"  # coupled CCs absent upstream
    assert choose_cc("cubic", "throughput", ["reno", "bbr"]) == "bbr"
    assert choose_cc(None, "default", []) is None
    with pytest.raises(ValueError, match="unknown congestion-control profile"):
        choose_cc(None, "fast", ["reno"])


def test_unknown_or_routeless_primary_is_refused_before_any_change():
    applier, backend = make()
    with pytest.raises(ApplyError, match="not a managed interface"):
        applier.apply(rec("eth0"))
    no_wwan_route = NetState(default_routes=(WLAN,))
    applier, backend = make(no_wwan_route)
    with pytest.raises(ApplyError, match="no default route"):
        applier.apply(rec("wwan0"))
    assert backend.printed == [] and not applier.journal.active


def test_never_removes_the_last_default_route():
    applier, backend = make(NetState(default_routes=(WLAN,)), interfaces=("wlan0",))
    state = backend.state
    plan = diff(state, NetState(default_routes=()))
    with pytest.raises(ApplyError, match="last default route"):
        applier._execute(plan, state)
    assert backend.state.default_routes == (WLAN,)


def test_simulator_refuses_what_the_kernel_refuses():
    with pytest.raises(SimulationError):
        simulate(initial(), "route_add", {"route": WLAN})
    with pytest.raises(SimulationError):
        simulate(initial(), "endpoint_delete", {"id": 99})


# ---------------------------------------------------------------- journal + rollback


def test_rollback_restores_exact_prior_state():
    applier, backend = make()
    before = backend.state.canonical()
    applier.apply(rec("wwan0", congestion_control="bbr", scheduler_weights={"wlan0": 0.01}))
    applier.apply(rec("wlan0"))
    assert backend.state.canonical() != before
    applier.rollback()
    assert backend.state.canonical() == before
    assert not applier.journal.active


def test_rollback_after_failure_half_way(tmp_path: Path):
    journal_path = tmp_path / "journal.json"
    applier, backend = make(journal=Journal(journal_path))
    before = backend.state.canonical()
    # Fail the first route deletion: endpoints, limits and the new routes are already in.
    backend.fail_on = lambda op, args: op == "route_delete"
    with pytest.raises(ApplyError, match="route_delete failed"):
        applier.apply(rec("wwan0", congestion_control="bbr"))
    assert backend.state.canonical() != before
    entries = json.loads(journal_path.read_text())["entries"]
    assert entries[-1]["ok"] is False and "injected failure" in entries[-1]["error"]
    backend.fail_on = None
    # A new process (fresh Applier) reads the journal and restores the snapshot.
    fresh = Applier(backend, Journal(journal_path), ApplierConfig(), allowed_cc=("reno", "bbr"))
    fresh.rollback()
    assert backend.state.canonical() == before
    assert not journal_path.exists()


def test_snapshot_is_kept_from_the_first_change_only(tmp_path: Path):
    journal = Journal(tmp_path / "j.json")
    applier, _backend = make(journal=journal)
    applier.apply(rec("wwan0"))
    first = journal.snapshot
    applier.apply(rec("wlan0"))
    assert Journal(tmp_path / "j.json").snapshot == first
    assert NetState.from_dict(first.to_dict()) == first


def test_dry_run_prints_commands():
    out = io.StringIO()
    backend = DryRunBackend(initial(), ADDRS, out=out, netns="dev1")
    Applier(backend, Journal(), ApplierConfig(manage_cc=False)).apply(rec("wwan0"))
    text = out.getvalue()
    assert "would run: ip netns exec dev1 ip -4 route add default via 10.1.2.1 dev wwan0" in text
    assert "ip mptcp endpoint add 10.1.1.2 id 8 dev wlan0 subflow" in text


def test_a_dry_run_seeded_from_a_namespace_prints_commands_for_that_namespace():
    """``run``/``rollback --netns NAME --dry-run`` seed the dry run from a command backend in NAME: the printed
    commands must carry ``ip netns exec NAME`` too (rollback's printed none; copied, they ran in the wrong
    namespace). The real namespace: tests/agent/netns/test_agent_dry_run_netns.py."""
    read: list[list[str]] = []
    routes = [{"dst": "default", "gateway": "10.1.2.1", "dev": "wwan0", "metric": 10},
              {"dst": "default", "gateway": "10.1.1.1", "dev": "wlan0", "metric": 20}]  # fmt: skip

    def kernel(argv):  # what `ip`/`sysctl` print in the namespace
        read.append(list(argv))
        cmd = " ".join(argv[4:])
        if "route show default" in cmd:
            return json.dumps(routes)
        if "addr show" in cmd:
            return json.dumps([{"ifname": n, "addr_info": [{"local": a[0]}]} for n, a in ADDRS.items()])
        return {"ip mptcp limits show": "add_addr_accepted 0 subflows 0", "sysctl -n " + CC_SYSCTL: "reno"}.get(
            cmd, "[]"
        )

    out = io.StringIO()
    backend = DryRunBackend.from_backend(CommandBackend(netns="ep-dev-1", runner=kernel), [CC_SYSCTL], out=out)
    assert read and all(argv[:4] == ["ip", "netns", "exec", "ep-dev-1"] for argv in read)
    journal = Journal()
    journal.snapshot = NetState(default_routes=(WLAN, Route(dev="wwan0", gateway="10.1.2.1", metric=200)))
    Applier(backend, journal, ApplierConfig(manage_cc=False)).rollback()  # as `rollback --dry-run` does
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("would run: ip netns exec ep-dev-1 ip -4 route ") for line in lines), lines
    assert "would run: ip netns exec ep-dev-1 ip -4 route add default via 10.1.1.1 dev wlan0 metric 100" in lines


def test_a_dry_run_prints_to_the_stdout_of_the_moment_it_prints():
    """The default ``out`` was the ``sys.stdout`` object of import time: a caller that redirected ``sys.stdout`` later
    (``contextlib.redirect_stdout``, pytest's capsys, a wrapper) got none of the printed commands."""
    built = DryRunBackend(initial(), ADDRS)  # default out, before stdout is redirected
    seeded = DryRunBackend.from_backend(DryRunBackend(initial(), ADDRS, out=None), [CC_SYSCTL])
    silent = DryRunBackend(initial(), ADDRS, out=None, netns="quiet")
    for backend in (built, seeded, silent):
        with contextlib.redirect_stdout(io.StringIO()) as redirected:
            Applier(backend, Journal(), ApplierConfig(manage_cc=False)).apply(rec("wwan0"))
        lines = redirected.getvalue().splitlines()
        if backend is silent:
            assert lines == [] and silent.printed  # None: nothing printed, the commands still recorded
        else:
            assert any(line.startswith("would run: ip -4 route add default via 10.1.2.1 dev wwan0") for line in lines)
            assert lines == ["would run: " + " ".join(argv) for argv in backend.printed], lines
    explicit = io.StringIO()  # an explicit stream stays that stream, whatever sys.stdout is then
    with contextlib.redirect_stdout(io.StringIO()) as redirected:
        Applier(DryRunBackend(initial(), ADDRS, out=explicit), Journal(), ApplierConfig(manage_cc=False)).apply(
            rec("wwan0")
        )
    assert redirected.getvalue() == "" and "would run: ip -4 route add default" in explicit.getvalue()


# ---------------------------------------------------------------- ATSSS steering rule (issue 19)


def steering(mode: str, initial: str, other: str = "") -> dict:
    accesses = [{"interface": initial, "initial_subflow": True}]
    if other:
        accesses.append({"interface": other, "initial_subflow": False})
    return {"rules": [{"steering_mode": mode, "accesses": accesses, "traffic_descriptor": {"match_all": True}}]}


@pytest.mark.parametrize(
    ("mode", "backup"),
    [
        ("ACTIVE_STANDBY", ("wlan0",)),
        ("PRIORITY_BASED", ("wlan0",)),
        ("SMALLEST_DELAY", ()),
        ("LOAD_BALANCING", ()),
        ("REDUNDANT", ()),
    ],
)
def test_steering_rule_sets_initial_subflow_route_and_backup_flags(mode: str, backup: tuple[str, ...]):
    applier, backend = make()
    # the rule's initial subflow (wwan0) wins over primary_path (wlan0); weights would say nothing here
    applied = applier.apply(rec("wlan0", steering=steering(mode, "wwan0", "wlan0")))
    assert applied.primary == "wwan0"
    assert applied.backup == backup
    routes = {r.dev: r.metric for r in backend.state.default_routes}
    assert routes["wwan0"] < routes["wlan0"]
    flags = {e.dev: set(e.flags) for e in backend.state.endpoints if e.dev in ADDRS}
    assert ("backup" in flags["wlan0"]) is bool(backup)
    assert "backup" not in flags["wwan0"]


def test_unsafe_steering_rules_are_refused_before_any_change():
    for bad in (
        {"rules": []},
        steering("TELEPORT", "wwan0", "wlan0"),
        steering("ACTIVE_STANDBY", "eth9", "wlan0"),  # not the device's interface
        {"rules": [{"steering_mode": "REDUNDANT", "accesses": [{"interface": "wlan0"}]}]},  # no initial subflow
    ):
        applier, backend = make()
        before = backend.state
        with pytest.raises(RejectedRecommendation):
            applier.apply(rec("wlan0", steering=bad))
        assert backend.state == before


@pytest.mark.parametrize(
    ("mode", "wlan_flags"),
    [
        ("ACTIVE_STANDBY", "subflow backup"),
        ("PRIORITY_BASED", "subflow backup"),
        ("SMALLEST_DELAY", "subflow"),
        ("LOAD_BALANCING", "subflow"),
        ("REDUNDANT", "subflow"),
    ],
)
def test_dry_run_prints_the_ip_mptcp_commands_of_each_steering_mode(mode: str, wlan_flags: str):
    out = io.StringIO()
    backend = DryRunBackend(initial(), ADDRS, out=out, netns="dev1")
    Applier(backend, Journal(), ApplierConfig(manage_cc=False)).apply(
        rec("wlan0", steering=steering(mode, "wwan0", "wlan0"))
    )
    text = out.getvalue()
    assert "ip -4 route add default via 10.1.2.1 dev wwan0" in text and "metric 10" in text
    endpoint = next(line for line in text.splitlines() if "ip mptcp endpoint add 10.1.1.2" in line)
    assert endpoint.endswith(f"dev wlan0 {wlan_flags}"), endpoint


# ---------------------------------------------------------------- MLPM steering (issue 20)


def test_mlpm_subflow_set_prioritised_first_low_weights_backup():
    from edgepath_agent.applier.core import mlpm_subflow_set

    assert mlpm_subflow_set({"wlan0": 0.1, "wwan0": 0.9}, "wwan0", 0.2, "wlan0") == ("wwan0", ("wlan0",))
    assert mlpm_subflow_set({"wlan0": 0.3, "wwan0": 0.7}, "wwan0", 0.2, "wlan0") == ("wwan0", ())
    # The prioritised subflow is never backup, whatever its weight; without one the highest weight leads.
    assert mlpm_subflow_set({"wlan0": 0.1, "wwan0": 0.9}, "wlan0", 0.2, "wwan0") == ("wlan0", ())
    assert mlpm_subflow_set({"wlan0": 0.85, "wwan0": 0.15}, None, 0.2, "wwan0") == ("wlan0", ("wwan0",))
    assert mlpm_subflow_set({}, None, 0.2, "wwan0") == ("wwan0", ())


def test_follow_mlpm_moves_the_initial_subflow_and_re_evaluates_backup():
    applier, backend = make(follow_mlpm=True, manage_cc=False)
    sched = {"prioritised_subflow": "wwan0", "weights": [{"interface": "wlan0", "weight": 0.1},
                                                         {"interface": "wwan0", "weight": 0.9}]}  # fmt: skip
    a = applier.apply(rec("wlan0", scheduler=sched))  # the bandit said wlan0; MLPM's prioritised subflow leads
    assert a.primary == "wwan0" and a.backup == ("wlan0",)
    routes = sorted(backend.read_state(()).default_routes, key=lambda r: r.metric)
    assert routes[0].dev == "wwan0"
    # Histories changed: the weights are balanced now, so both endpoints are active again.
    sched = {"prioritised_subflow": "wlan0", "weights": [{"interface": "wlan0", "weight": 0.6},
                                                         {"interface": "wwan0", "weight": 0.4}]}  # fmt: skip
    a = applier.apply(rec("wlan0", scheduler=sched))
    assert a.primary == "wlan0" and a.backup == ()
    flags = {e.dev: e.flags for e in backend.read_state(()).endpoints}
    assert "backup" not in flags["wwan0"] and "subflow" in flags["wwan0"]


def test_without_follow_mlpm_the_prioritised_subflow_is_not_applied():
    applier, _ = make(manage_cc=False)
    sched = {"prioritised_subflow": "wwan0", "weights": [{"interface": "wlan0", "weight": 0.3},
                                                         {"interface": "wwan0", "weight": 0.7}]}  # fmt: skip
    assert applier.apply(rec("wlan0", scheduler=sched)).primary == "wlan0"


def test_prioritised_subflow_of_a_foreign_interface_is_ignored():
    applier, _ = make(follow_mlpm=True, manage_cc=False)
    a = applier.apply(rec("wlan0", scheduler={"prioritised_subflow": "eth9"}))
    assert a.primary == "wlan0"
