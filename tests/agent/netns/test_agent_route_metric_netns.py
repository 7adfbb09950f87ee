"""A default route the agent does not manage, at a metric the agent uses, is refused at start (marker ``netns``).

IPv4 keeps one default route per metric: with an operator's default route on another interface at
``primary_metric`` (or one of the ``secondary_metric`` + k metrics), the agent's ``route add`` there was refused
(``File exists``) at every step, or its simulation raised an internal error that ended ``run`` with a traceback.
Now ``run`` (a dry run too) exits 78 before touching anything, with one ``Error:`` line naming the route, its
interface and the setting to change. The conflicting route is real: a third interface in the testbed's device
namespace with its own default route. Skipped (not passed) without root/CAP_NET_ADMIN or kernel MPTCP.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agent_fixtures import kernel_view as view
from agent_fixtures import run_agent as agent
from edgepath_agent.testbed.netns import Testbed

pytestmark = pytest.mark.netns


def add_unmanaged_default_route(tb: Testbed, metric: int) -> None:
    """``eth9`` (a veth end with 10.9.9.2/24) and ``default via 10.9.9.1 dev eth9 metric METRIC``."""
    for argv in (("link", "add", "eth9", "type", "veth", "peer", "name", "eth9p"),
                 ("addr", "add", "10.9.9.2/24", "dev", "eth9"), ("link", "set", "eth9p", "up"),
                 ("link", "set", "eth9", "up"),
                 ("route", "add", "default", "via", "10.9.9.1", "dev", "eth9", "metric", str(metric))):  # fmt: skip
        tb.dev("ip", *argv)


@pytest.mark.parametrize(
    ("metric", "setting", "dry_run"),
    [(10, "primary_metric", False), (21, "secondary_metric", False), (10, "primary_metric", True)],
    ids=["primary", "secondary", "dry-run"],
)
def test_a_foreign_default_route_at_the_agents_metric_is_refused_at_start(
    testbed: Testbed, tmp_path: Path, metric: int, setting: str, dry_run: bool
) -> None:
    add_unmanaged_default_route(testbed, metric)
    before = view(testbed.device_ns)
    journal = tmp_path / "journal.json"
    env = {**os.environ, "EDGEPATH_AGENT_STATUS_FILE": str(tmp_path / "status.json"), "EDGEPATH_AGENT_ATTEMPTS": "1",
           "EDGEPATH_AGENT_UPSTREAM_CHECK": "false"}  # fmt: skip
    # three managed interfaces (eth9 is not one of them): secondary metrics 20 and 21
    ran = agent("run", *(["--dry-run"] if dry_run else []), "--steps", "1", "--netns", testbed.device_ns,
                "--service", "grpc://127.0.0.1:9", "--interface", "wlan0=WIFI", "--interface", "wwan0=LTE",
                "--interface", "lo=ETHERNET", "--journal", str(journal), "--log-format", "text",
                env=env)  # fmt: skip
    assert ran.returncode == 78, ran.stdout + ran.stderr
    errors = [line for line in ran.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert f"default route via 10.9.9.1 dev eth9 metric {metric}" in errors[0] and setting in errors[0], errors[0]
    assert testbed.device_ns in errors[0]
    assert view(testbed.device_ns) == before and not journal.exists()  # nothing touched
