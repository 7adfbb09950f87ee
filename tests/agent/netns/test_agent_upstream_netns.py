"""A primary path without upstream connectivity, interface up (issue 21, item 6), on real MPTCP.

The two-namespace testbed (device wlan0/wwan0, server) with a real MPTCP listener in the
server namespace. "Blackholing the WiFi path's upstream" is a blackhole route for the
device's wlan0 address in the server namespace: the device's SYNs leave on wlan0 and
arrive, the answers vanish; both ends of the veth stay up and ARP keeps working, as with an
access point whose uplink died. Then new MPTCP connections from the device are attempted
every 0.2 s (1 s connect timeout each) and the time until one succeeds is measured:

* without the agent (the kernel alone: routes by metric, wlan0 first), none succeeds
  within the observation window (mptcp_net-next #593: the initial subflow follows
  routing, and nothing moves it);
* with the agent (upstream probes every 0.5 s, 0.5 s timeout, 2 failures to leave),
  new connections succeed again on wwan0 within the bound below, and after the blackhole
  is lifted the preferred path (wlan0) carries new connections again (#581: the kernel
  does not fail back by itself).

The recommendation comes from a fixed client that always recommends wlan0 (standing in
for the service, whose bandit may pick either path; the behaviour under test is the
agent's, and the real service is exercised by test_agent_daemon.py). Figures are
printed as ``UPSTREAM {...}`` (``pytest -s``). Skipped without root/CAP_NET_ADMIN or MPTCP.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from edgepath_agent.applier import Applier, CommandBackend, Journal
from edgepath_agent.daemon import Agent, AgentConfig
from edgepath_agent.messages import OutcomeAck, Recommendation
from edgepath_agent.meter import TransferServer
from edgepath_agent.testbed.netns import SERVER_ADDR, Testbed
from netns_helpers import new_connection

pytestmark = pytest.mark.netns

#: Observation window without the agent, s, and the bounds asserted with it, s.
WINDOW_WITHOUT_AGENT_S = 8.0
FAILOVER_BOUND_S = 10.0
RESTORE_BOUND_S = 10.0
WLAN0, WWAN0 = "10.1.1.2", "10.1.2.2"


def blackhole_wifi_upstream(tb: Testbed, on: bool) -> None:
    """Answers to the device's wlan0 address vanish in the server namespace (interfaces stay up)."""
    tb.srv("ip", "route", "replace" if on else "del", "blackhole", f"{WLAN0}/32")


def time_until(predicate, budget_s: float, poll_s: float = 0.2) -> float | None:
    """Seconds until ``predicate()`` is true (polled), None if it never is within ``budget_s``."""
    start = time.monotonic()
    while time.monotonic() - start < budget_s:
        if predicate():
            return round(time.monotonic() - start, 2)
        time.sleep(poll_s)
    return None


class FixedRecommendation:
    """Stands in for the service: always recommends wlan0 (see module docstring)."""

    url = "fixed://wlan0"

    def __init__(self) -> None:
        self.n = 0
        self.outcomes: list[dict[str, Any]] = []

    def recommend(self, request: dict[str, Any]) -> Recommendation:
        self.n += 1
        return Recommendation.from_rest(
            {"decision_id": f"fixed-{self.n}", "primary_path": {"interface": "wlan0", "access_type": "WIFI"}}
        )

    def report_outcome(self, outcome: dict[str, Any]) -> OutcomeAck:
        self.outcomes.append(outcome)
        return OutcomeAck(decision_id=outcome["decision_id"], accepted=True, duplicate=False, reward=1)

    def close(self) -> None:
        pass


def test_without_the_agent_new_connections_fail_while_wifi_upstream_is_dead(
    testbed: Testbed, server: TransferServer
) -> None:
    assert new_connection(testbed, server.port) == WLAN0  # wlan0 (metric 100) carries the initial subflow
    blackhole_wifi_upstream(testbed, True)
    assert testbed.dev("ip", "link", "show", "wlan0").stdout.count("state UP") == 1  # the interface stays up
    waited = time_until(lambda: new_connection(testbed, server.port) is not None, WINDOW_WITHOUT_AGENT_S)
    print("UPSTREAM " + json.dumps({"agent": False, "until_new_connections_succeed_s": waited,
                                    "window_s": WINDOW_WITHOUT_AGENT_S}))  # fmt: skip
    assert waited is None, f"a new connection succeeded after {waited} s without the agent"
    blackhole_wifi_upstream(testbed, False)
    assert time_until(lambda: new_connection(testbed, server.port) == WLAN0, 5.0) is not None


@pytest.mark.timeout(120)  # two bounded waits of 10 s plus namespace setup; well below in practice
def test_agent_leaves_a_primary_without_upstream_and_restores_it(
    testbed: Testbed, server: TransferServer, tmp_path: Path
) -> None:
    config = AgentConfig(
        device_id="dev-upstream",
        service=["grpc://192.0.2.1:50051"],  # unused: FixedRecommendation answers
        interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
        netns=testbed.device_ns,
        interval_s=3600.0,  # one decision: everything after it is the upstream guard's doing
        manage_cc=False,
        upstream_target=f"{SERVER_ADDR}:{server.port}",
        upstream_timeout_s=0.5,
        upstream_check_interval_s=0.5,
        upstream_failures=2,
        upstream_recoveries=2,
        journal=tmp_path / "journal.json",
        status_file=tmp_path / "status.json",
    )
    applier = Applier(CommandBackend(netns=testbed.device_ns), Journal(config.journal), config.applier_config())
    client = FixedRecommendation()
    agent = Agent(config, client, applier, [], measure=lambda _p: None)
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    runner.start()
    try:
        assert time_until(lambda: agent.applier.last is not None, 10.0) is not None, "first decision not applied"
        assert agent.applier.last.primary == "wlan0" and new_connection(testbed, server.port) == WLAN0

        blackhole_wifi_upstream(testbed, True)
        failover_s = time_until(lambda: new_connection(testbed, server.port) == WWAN0, FAILOVER_BOUND_S)
        assert failover_s is not None, f"no new connection on wwan0 within {FAILOVER_BOUND_S} s"
        status = json.loads((tmp_path / "status.json").read_text())
        assert status["preferred_primary"] == "wlan0" and "wlan0" in status["override_reason"]
        assert status["connectivity"]["wlan0"]["ok"] is False

        blackhole_wifi_upstream(testbed, False)
        restore_s = time_until(lambda: new_connection(testbed, server.port) == WLAN0, RESTORE_BOUND_S)
        assert restore_s is not None, f"wlan0 not primary again within {RESTORE_BOUND_S} s of its recovery"
        routes = testbed.dev("ip", "-4", "route", "show", "default").stdout
        first = min((line for line in routes.splitlines() if "metric" in line), key=lambda line: int(line.split()[-1]))
        assert "dev wlan0" in first
        print("UPSTREAM " + json.dumps({"agent": True, "until_new_connections_succeed_s": failover_s,
                                        "until_preferred_path_restored_s": restore_s,
                                        "check_interval_s": 0.5, "probe_timeout_s": 0.5, "failures": 2,
                                        "recoveries": 2}))  # fmt: skip
    finally:
        stop.set()
        runner.join(15)
        agent.close()
    assert not client.outcomes  # nothing measured here, nothing reported
    assert "metric 100" in testbed.dev("ip", "-4", "route", "show", "default", "dev", "wlan0").stdout  # restored
