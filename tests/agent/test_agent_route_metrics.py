"""Default routes the agent does not manage, at a metric it uses (the dry-run backend's simulated state).

The start check itself, on a real routing table and through ``run``, is in
netns/test_agent_route_metric_netns.py. Here: which metrics collide, and that a collision the start could not see
(a route added while the agent runs) is the agent's :class:`~edgepath_agent.applier.ApplyError`, which the run
loop handles, not the simulator's internal ``SimulationError``, which ended ``run`` with a traceback.
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
from edgepath_agent.applier.core import metric_conflicts

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
