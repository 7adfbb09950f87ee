"""Default routes the agent does not manage, at a metric it uses (the dry-run backend's simulated state).

The start check itself, on a real routing table and through ``run``, is in
netns/test_agent_route_metric_netns.py. Here: which metrics collide, and that a collision the start could not see
(a route added while the agent runs) is the agent's :class:`~edgepath_agent.applier.ApplyError`, which the run
loop handles, not the simulator's internal ``SimulationError``, which ended ``run`` with a traceback. The
NetworkManager backend sets ``ipv6.route-metric`` too, so its check reads the IPv6 default routes as well (a
multipath one per next hop); the ``command``/``netlink`` applier changes IPv4 routes only.
"""

from __future__ import annotations

import pytest
from edgepath_agent.applier import (
    Applier,
    ApplierConfig,
    ApplyError,
    DryRunBackend,
    Journal,
    NetState,
    Route,
    RouteMetricConflict,
)
from edgepath_agent.applier.backend import CommandBackend
from edgepath_agent.applier.core import metric_conflicts
from edgepath_agent.applier.networkmanager import NetworkManagerApplier
from edgepath_agent.applier.state import parse_default_routes_json

ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}
CONFIG = ApplierConfig(interfaces=("wlan0", "wwan0", "eth0"), manage_cc=False)  # metrics 10, 20, 21


def state(*routes: Route) -> NetState:
    return NetState(default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200), *routes))


@pytest.mark.parametrize(("metric", "setting"), [(10, "primary_metric"), (20, "secondary_metric"),
                                                 (21, "secondary_metric"), (22, None), (100, None)])  # fmt: skip
def test_which_metrics_collide(metric: int, setting: str | None) -> None:
    found = metric_conflicts(state(Route("eth9", "10.9.9.1", metric)), CONFIG)
    assert found == ([] if setting is None else [(Route("eth9", "10.9.9.1", metric), setting)])
    assert metric_conflicts(state(Route("eth0", "10.0.0.1", metric)), CONFIG) == []  # a managed one: the agent's


def test_the_start_check_names_the_route_interface_and_setting() -> None:
    applier = Applier(DryRunBackend(state(Route("eth9", "10.9.9.1", 10)), ADDRS, out=None), Journal(), CONFIG)
    with pytest.raises(RouteMetricConflict, match=r"default route via 10\.9\.9\.1 dev eth9 metric 10 .*primary_metric"):
        applier.check_route_metrics()


def test_a_collision_while_running_is_an_apply_error_not_a_simulation_error() -> None:
    applier = Applier(DryRunBackend(state(Route("eth9", "10.9.9.1", 10)), ADDRS, out=None), Journal(), CONFIG)
    with pytest.raises(ApplyError, match="metric 10 exists"):
        applier.apply({"primary_path": {"interface": "wwan0"}})


#: ``ip -6 -j route show default`` once NetworkManager has put wwan0's default route at metric 10 beside eth9's (the
#: shape netns/test_agent_networkmanager_netns.py reads from the kernel): the two are one multipath route.
IPV6_MERGED = (
    '[{"dst":"default","metric":10,"flags":[],"pref":"medium","nexthops":[{"gateway":"2001:db8:3::1","dev":"eth9",'
    '"weight":1,"flags":[]},{"gateway":"2001:db8:2::1","dev":"wwan0","weight":1,"flags":[]}]},{"dst":"default",'
    '"gateway":"2001:db8:1::1","dev":"wlan0","protocol":"static","metric":20,"flags":[],"pref":"medium"}]'
)


def test_the_ipv6_routes_are_read_with_each_next_hop_of_a_multipath_route() -> None:
    seen: list[list[str]] = []
    backend = CommandBackend(runner=lambda argv: seen.append(list(argv)) or IPV6_MERGED)
    assert backend.read_ipv6_default_routes() == (
        Route("eth9", "2001:db8:3::1", 10),
        Route("wwan0", "2001:db8:2::1", 10),
        Route("wlan0", "2001:db8:1::1", 20, "static"),
    )
    assert seen == [["ip", "-6", "-j", "route", "show", "default"]]
    assert parse_default_routes_json(IPV6_MERGED) == (Route("wlan0", "2001:db8:1::1", 20, "static"),)  # the applier's


def test_the_networkmanager_start_check_refuses_a_foreign_ipv6_default_route_at_its_metric() -> None:
    applier = NetworkManagerApplier(CONFIG, "unix:path=/nonexistent")  # no D-Bus call: the check reads routes only
    applier.backend = DryRunBackend(state(), ADDRS, out=None)  # IPv4: no conflict
    applier.read_ipv6_routes = lambda: parse_default_routes_json(IPV6_MERGED, nexthops=True)
    with pytest.raises(RouteMetricConflict, match=r"IPv6 default route via 2001:db8:3::1 dev eth9 metric 10 .*primary"):
        applier.check_route_metrics()
    applier.read_ipv6_routes = lambda: (Route("eth9", "2001:db8:3::1", 22),)
    applier.check_route_metrics()  # a metric the agent does not use
