"""The upstream guard's override reaches the kernel when the decision carries an ATSSS steering rule (issue 19).

The applier takes the initial subflow from the steering rule's ``initial_subflow`` access, not from
``primary_path``; the guard's override used to replace ``primary_path`` only, so with WiFi's upstream dead the
default route stayed on wlan0 while the agent logged that it had switched to wwan0. Here, on the two-namespace
testbed with a real MPTCP listener, the device's wlan0 upstream is blackholed (answers to its address vanish in
the server namespace, both interfaces stay up) before one step whose decision's Active-Standby rule makes wlan0
initial. After the step the device namespace's routing table has wwan0's default route first, wlan0's endpoint
is the standby (``backup``), and a new MPTCP connection leaves on wwan0. One step, no waiting: the guard probes
the path once (``upstream_failures = 1``).

The same with a Load-Balancing rule, which keeps both endpoints active: wlan0's endpoint used to stay non-backup
under the override, so mainline's default scheduler (net/mptcp/protocol.c ``mptcp_subflow_get_send``) kept
sending on the subflow without upstream. Now it is ``backup`` in ``ip mptcp endpoint show`` while the override
lasts, and once the blackhole is lifted the next step applies the rule as it came (both endpoints active again).
Skipped without root/CAP_NET_ADMIN or MPTCP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import steered
from edgepath_agent.applier import Applier, CommandBackend, Journal
from edgepath_agent.daemon import Agent, AgentConfig
from edgepath_agent.messages import OutcomeAck, Recommendation
from edgepath_agent.meter import TransferServer
from edgepath_agent.testbed.netns import SERVER_ADDR, Testbed
from netns_helpers import new_connection

pytestmark = pytest.mark.netns

WLAN0, WWAN0 = "10.1.1.2", "10.1.2.2"


class SteeringDecision:
    """Stands in for the service: primary wlan0, a ``mode`` rule with wlan0 initial and wwan0 the other access."""

    url = "fixed://steering"

    def __init__(self, mode: str) -> None:
        self.body = steered(mode)

    def recommend(self, request: dict[str, Any]) -> Recommendation:
        return Recommendation.from_rest(self.body)

    def report_outcome(self, outcome: dict[str, Any]) -> OutcomeAck:
        return OutcomeAck(decision_id=outcome["decision_id"], accepted=True)

    def close(self) -> None:
        pass


def first_default_route(tb: Testbed) -> str:
    routes = [line for line in tb.dev("ip", "-4", "route", "show", "default").stdout.splitlines() if "metric" in line]
    return min(routes, key=lambda line: int(line.split("metric")[1].split()[0]))


def endpoint_lines(tb: Testbed) -> dict[str, str]:
    """``ip mptcp endpoint show`` of the device namespace, one line per address."""
    return {line.split()[0]: line for line in tb.dev("ip", "mptcp", "endpoint", "show").stdout.splitlines()}


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("mode", "standby"), [("ACTIVE_STANDBY", True), ("LOAD_BALANCING", False)])
def test_guard_moves_the_steering_rules_initial_subflow_off_a_path_without_upstream(
    testbed: Testbed, server: TransferServer, tmp_path: Path, mode: str, standby: bool
) -> None:
    testbed.srv("ip", "route", "replace", "blackhole", f"{WLAN0}/32")  # wlan0 up, its upstream dead
    config = AgentConfig(
        device_id="dev-steer",
        service=["grpc://192.0.2.1:50051"],  # unused: SteeringDecision answers
        interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
        netns=testbed.device_ns,
        manage_cc=False,
        upstream_target=f"{SERVER_ADDR}:{server.port}",
        upstream_timeout_s=0.5,
        upstream_failures=1,
        journal=tmp_path / "journal.json",
        status_file=None,
    )
    applier = Applier(CommandBackend(netns=testbed.device_ns), Journal(config.journal), config.applier_config())
    agent = Agent(config, SteeringDecision(mode), applier, [], measure=lambda _p: None)
    try:
        result = agent.step()
        assert result.applied is not None and result.applied.primary == "wwan0", result
        assert "dev wwan0" in first_default_route(testbed)
        endpoints = endpoint_lines(testbed)
        assert "backup" in endpoints[WLAN0] and "backup" not in endpoints[WWAN0], endpoints
        assert new_connection(testbed, server.port) == WWAN0
        record = agent.status_record()
        assert record["applied"]["primary"] == "wwan0" and record["preferred_primary"] == "wlan0"

        testbed.srv("ip", "route", "del", "blackhole", f"{WLAN0}/32")  # wlan0's upstream is back
        result = agent.step()  # the guard finds wlan0 answering: the rule is applied as it came
        assert result.applied is not None and result.applied.primary == "wlan0", result
        endpoints = endpoint_lines(testbed)
        assert "backup" not in endpoints[WLAN0] and ("backup" in endpoints[WWAN0]) == standby, endpoints
        assert new_connection(testbed, server.port) == WLAN0
    finally:
        agent.close(restore=True)
    assert "metric 100" in testbed.dev("ip", "-4", "route", "show", "default", "dev", "wlan0").stdout
