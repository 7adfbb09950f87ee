"""One step dumps the device's links and addresses once (marker ``netns``).

A step needs the interfaces' links and addresses in four places: the link check (which interfaces can
carry a path), the path collector (which interface a socket's local address is on), the upstream probe
(the source address of the path about to become primary) and the applier (the addresses that become
MPTCP endpoints, and what the safety checks hold the recommendation to). Each used to dump them itself:
pyroute2's ``get_links``/``get_addr`` for the link check and the inet_diag collector, ``ip -j addr show``
(which makes the same two rtnetlink dumps) for the probe and the command backend, so a step dumped the
same state four times. Now the step takes one snapshot (:meth:`Agent.read_links`) and hands it along.

Counted here against the real kernel of the testbed's device namespace, with the agent ``build_agent``
makes (the real collectors and link reader, the command backend) and a real service: every rtnetlink
link or address dump pyroute2 makes (``AsyncIPRoute.link("dump")``/``addr("dump")``, which ``get_links``
and ``get_addr`` call) and every ``ip … addr show`` run. Per step, not once: the next step dumps again
(no step decides on another step's snapshot). Skipped (not passed) without root/CAP_NET_ADMIN or kernel MPTCP.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from edgepath_agent.applier import CommandBackend
from edgepath_agent.collector import LinkReader, address_owners, ipv4_addresses
from edgepath_agent.collector.path import parse_ip_addr_json
from edgepath_agent.daemon import AgentConfig, build_agent
from edgepath_agent.meter import TransferServer
from edgepath_agent.testbed.netns import SERVER_ADDR, Testbed
from service_harness import running_service

pytestmark = pytest.mark.netns

pyroute2 = pytest.importorskip("pyroute2", reason="pyroute2 is a base dependency of the agent")


@pytest.fixture
def dumps(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts rtnetlink dumps of links and of addresses, through pyroute2 and through ``ip addr show``."""
    from pyroute2.iproute.linux import AsyncIPRoute

    counts: Counter[str] = Counter()
    link, addr, run = AsyncIPRoute.link, AsyncIPRoute.addr, subprocess.run

    async def counting_link(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        counts["links"] += command == "dump"
        return await link(self, command, *args, **kwargs)

    async def counting_addr(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        counts["addresses"] += command == "dump"
        return await addr(self, command, *args, **kwargs)

    def counting_run(argv: Any, *args: Any, **kwargs: Any) -> Any:
        words = list(argv) if isinstance(argv, (list, tuple)) else []
        if "ip" in words and "addr" in words and "show" in words:  # iproute2 dumps the links, then the addresses
            counts["links"] += 1
            counts["addresses"] += 1
        return run(argv, *args, **kwargs)

    monkeypatch.setattr(AsyncIPRoute, "link", counting_link)
    monkeypatch.setattr(AsyncIPRoute, "addr", counting_addr)
    monkeypatch.setattr(subprocess, "run", counting_run)
    yield counts


@pytest.mark.timeout(120)
def test_a_step_dumps_links_and_addresses_once(
    testbed: Testbed, server: TransferServer, tmp_path: Path, dumps: Counter[str]
) -> None:
    with running_service() as svc:
        config = AgentConfig(
            device_id="dev-snapshot", service=[svc.grpc_url], interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
            netns=testbed.device_ns, attempts=1, manage_cc=False, journal=tmp_path / "journal.json",
            status_file=None, pending_file=None, probe=None,
            upstream_target=f"{SERVER_ADDR}:{server.port}",  # the guard probes the primary from its address
        )  # fmt: skip
        agent = build_agent(config)
        per_step = []
        try:
            for _ in range(2):
                dumps.clear()
                result = agent.step()
                assert result.error is None and result.applied is not None, result.error
                per_step.append(dict(dumps))
            sent = [i["name"] for i in result.request["interfaces"]]
        finally:
            agent.close(restore=True)
    assert sent == ["wlan0", "wwan0"]  # both offered: the snapshot saw them up with their addresses
    assert per_step == [{"links": 1, "addresses": 1}] * 2, per_step
    assert not (tmp_path / "journal.json").exists()  # restored


def test_the_snapshot_gives_the_addresses_the_dumps_it_replaces_gave(testbed: Testbed) -> None:
    """What the applier (``read_addresses``) and the path collectors (``ip -j addr show``) read themselves before,
    from the snapshot now: the same, on the same namespace."""
    from edgepath_agent.applier.netlink import NetlinkBackend

    testbed.dev("ip", "addr", "add", "10.1.1.9/24", "dev", "wlan0")  # a second IPv4 address: the order is kept
    testbed.dev("ip", "addr", "add", "169.254.7.7/16", "dev", "wwan0", "scope", "link")  # link scope: no endpoint
    testbed.dev("ip", "-6", "addr", "add", "2001:db8:1::2/64", "dev", "wlan0", "nodad")  # IPv6: no IPv4 endpoint
    links = LinkReader(testbed.device_ns)()
    addresses = ipv4_addresses(links)
    assert addresses == {"wlan0": ["10.1.1.2", "10.1.1.9"], "wwan0": ["10.1.2.2"]}
    assert addresses == CommandBackend(netns=testbed.device_ns).read_addresses()
    assert addresses == NetlinkBackend(netns=testbed.device_ns).read_addresses()
    owners = address_owners(links)
    assert owners == parse_ip_addr_json(testbed.dev("ip", "-j", "addr", "show").stdout)
    assert owners["2001:db8:1::2"] == "wlan0" and owners["169.254.7.7"] == "wwan0"
