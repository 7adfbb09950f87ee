"""The SSMP step measures from the network namespace the agent manages (``--netns``), not the host's (marker ``netns``).

On the two-path testbed, the server namespace runs a real DNS server (dnslib, UDP port 53) on each
access router's address (wlan0's 10.1.1.1, wwan0's 10.1.2.1), both answering the server address, and
a CDN server (meter protocol, MPTCP) on that address: all of it reachable only from the device
namespace, whose ``wlan0``/``wwan0`` the host has not.

* :class:`~edgepath_agent.ssmp.SsmpClient` with ``netns``: each DNS query, RTT connect, probe and the
  MPTCP download leaves from the device's interfaces (the servers see the device's addresses);
* :func:`~edgepath_agent.daemon.build_agent` with ``netns`` and ``content``: one real step (a real
  service, the command applier changing the device namespace's routes: a dry run reports no outcome)
  sends the candidates, downloads the pick from the device and reports its ``server_transfer``;
* the same client without ``netns`` sees nothing (no ``wlan0`` to bind to here), and ``from_config``
  finds no interface.

Skipped (not passed) without root/CAP_NET_ADMIN or kernel MPTCP (the conftest's ``testbed``).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from edgepath_agent.ssmp import PathSpec, SsmpClient, SsmpStep
from edgepath_agent.testbed.netns import Testbed, call_in_netns
from edgepath_agent.testbed.ssmp import AnswerResolver, CdnServer, start_dns

pytestmark = pytest.mark.netns

HOST = "video.cdn.example"
DEVICE_ADDRS = {"wlan0": "10.1.1.2", "wwan0": "10.1.2.2"}
DNS = {"wlan0": "10.1.1.1", "wwan0": "10.1.2.1"}  # the access routers' addresses, in the server namespace


@dataclass
class Servers:
    """What the server namespace runs: a DNS server per access network and the CDN server."""

    testbed: Testbed
    dns: dict[str, AnswerResolver]
    cdn: CdnServer

    def specs(self) -> list[PathSpec]:
        return [PathSpec(name, DEVICE_ADDRS[name], DNS[name]) for name in DNS]


@pytest.fixture
def servers(testbed: Testbed) -> Iterator[Servers]:
    """The DNS servers (port 53, answering the server address) and the CDN server, in the server namespace."""
    dns_servers: list[Any] = []
    cdn: CdnServer | None = None
    try:
        resolvers = {}
        for name, addr in DNS.items():
            dns_server, resolvers[name] = call_in_netns(testbed.server_ns, start_dns, addr, 53, testbed.server_addr)
            dns_servers.append(dns_server)
        cdn = call_in_netns(testbed.server_ns, lambda: CdnServer("cdn").start())
        assert cdn.mptcp, "the server namespace refused an MPTCP listener"
        yield Servers(testbed, resolvers, cdn)
    finally:
        if cdn is not None:
            cdn.close()
        for dns_server in dns_servers:
            dns_server.stop()


def _host_has(*names: str) -> bool:
    return bool(set(names) & {have for _, have in socket.if_nameindex()})


def test_ssmp_client_with_netns_resolves_measures_probes_and_downloads_from_the_device(servers: Servers) -> None:
    tb, cdn = servers.testbed, servers.cdn
    client = SsmpClient(
        servers.specs(), cdn.port, rtt_samples=2, probe_bytes=100_000, timeout_s=2.0, netns=tb.device_ns
    )
    # DNS: each interface asked its own network's server, through that interface.
    assert client.resolve_all(HOST) == [(tb.server_addr, "wlan0"), (tb.server_addr, "wwan0")]
    assert {n: r.queries for n, r in servers.dns.items()} == {"wlan0": 1, "wwan0": 1}
    # RTTs: real connects over both paths (a failed one would count as the 2 s timeout).
    rtts = client.measure_rtts([tb.server_addr])
    assert set(rtts) == {(tb.server_addr, "wlan0"), (tb.server_addr, "wwan0")}
    assert all(len(v) == 2 and 0 < s < 1000.0 for v in rtts.values() for s in v), rtts
    # Probes: one per interface, each from that interface's address (bound to the namespace's device).
    probed = client.probe([tb.server_addr])
    assert set(probed) == {(tb.server_addr, "wlan0"), (tb.server_addr, "wwan0")}
    assert all(s.bandwidth_bps and s.bandwidth_bps > 0 for s in probed.values())
    assert sorted(s.peer for s in cdn.served if s.size_bytes == 100_000) == ["10.1.1.2", "10.1.2.2"]
    # Download: MPTCP, the initial subflow on wwan0 although the default route is wlan0's.
    dl = client.download(tb.server_addr, 300_000, "wwan0")
    assert dl.mptcp and dl.local_addr == "10.1.2.2" and dl.size_bytes == 300_000
    assert dl.server["served_by"] == "cdn" and "wwan0" in dl.paths
    assert cdn.served[-1].size_bytes == 300_000 and cdn.served[-1].peer == "10.1.2.2"


def test_ssmp_without_netns_sees_nothing_of_the_device(servers: Servers) -> None:
    if _host_has(*DNS):
        pytest.skip("the host has an interface named wlan0 or wwan0")
    client = SsmpClient(servers.specs(), servers.cdn.port, timeout_s=1.0)
    assert client.resolve_all(HOST) == []  # SO_BINDTODEVICE wlan0/wwan0: no such device in the host namespace
    assert {r.queries for r in servers.dns.values()} == {0}
    with pytest.raises(ValueError, match="at least one interface"):
        SsmpStep.from_config(list(DNS), f"{HOST}:{servers.cdn.port}", 10_000, DNS, 1.0)
    step = SsmpStep.from_config(
        list(DNS), f"{HOST}:{servers.cdn.port}", 10_000, DNS, 1.0, netns=servers.testbed.device_ns
    )
    assert [(s.interface, s.source_addr) for s in step.client.paths.values()] == list(DEVICE_ADDRS.items())


@pytest.mark.timeout(90)  # a service start and one step (DNS, RTTs, probes, a download)
def test_build_agent_with_netns_runs_the_ssmp_step_in_the_device_namespace(servers: Servers, tmp_path: Path) -> None:
    from edgepath_agent.daemon import AgentConfig, build_agent
    from service_harness import running_service

    tb, cdn = servers.testbed, servers.cdn
    with running_service() as svc:
        config = AgentConfig(
            device_id="dev-ssmp-netns", service=[svc.grpc_url], interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
            backend="command", netns=tb.device_ns, journal=tmp_path / "j.json", status_file=None,
            upstream_check=False, content=f"{HOST}:{cdn.port}", content_bytes=200_000, content_dns=DNS,
        )  # fmt: skip
        agent = build_agent(config)
        try:
            assert agent.ssmp is not None and agent.ssmp.client.netns == tb.device_ns
            result = agent.step()
        finally:
            agent.close(restore=True)  # the namespace's routes as they were
    candidates = result.request["content"]["candidates"]
    assert [(c["address"], c["dns_interface"]) for c in candidates] == [
        (tb.server_addr, "wlan0"),
        (tb.server_addr, "wwan0"),
    ]
    samples = [s for c in candidates for p in c["paths"] for s in p["rtt_ms_samples"]]
    assert samples and all(0 < s < 1000.0 for s in samples), candidates  # no timed-out connect
    sel = result.recommendation["server_selection"]
    assert sel["address"] == tb.server_addr
    measured = result.measurement
    assert measured is not None and measured.bytes == 200_000 and measured.mptcp
    assert measured.local_addr in DEVICE_ADDRS.values()
    assert measured.server_counters and measured.server_counters["served_by"] == "cdn"
    assert result.outcome is not None and result.outcome["server_transfer"]["address"] == tb.server_addr
    download = cdn.served[-1]
    assert download.size_bytes == 200_000 and download.peer in DEVICE_ADDRS.values()
