"""The collectors read the network namespace the agent manages (``--netns``), not the host's (marker ``netns``).

* path: a TCP connection that exists only inside a namespace is seen, with its RTT, by the inet_diag
  collector and by the ``ss`` fallback given that namespace, and by neither without it;
* kernel capabilities: in a namespace with ``net.mptcp.enabled = 0`` (1 on the host) the collector
  given that namespace reads 0, and 1 without it;
* WiFi: the nl80211 socket is opened from inside the namespace (this machine has no WiFi driver, so
  pyroute2's ``IW`` is replaced by one that records the namespace it was created in);
* :func:`~edgepath_agent.daemon.build_agent` with ``netns`` on the two-path testbed: the request carries
  the RTT of a connection on the device's ``wlan0``.

Skipped (not passed) without root/CAP_NET_ADMIN or kernel MPTCP.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from edgepath_agent.collector import DiagPathCollector, KernelCollector, Nl80211WifiCollector, PathCollector
from edgepath_agent.daemon import AgentConfig, build_agent
from edgepath_agent.testbed.netns import Testbed, call_in_netns, sh
from netns_helpers import VethNamespace

pytestmark = pytest.mark.netns


def _round_trips(client: socket.socket, peer: socket.socket) -> None:
    for _ in range(20):  # the kernel then has an RTT and segments out for both ends
        client.sendall(b"x" * 1000)
        peer.recv(4096)
        peer.sendall(b"y")
        client.recv(1)


@pytest.fixture
def connection_in_ns(veth_ns: VethNamespace) -> Iterator[VethNamespace]:
    """An established TCP connection to and from the veth end's address that exists in ``veth_ns`` only."""

    def connect() -> tuple[socket.socket, socket.socket, socket.socket]:
        server = socket.create_server((veth_ns.addr, 0))
        client = socket.create_connection(server.getsockname(), timeout=5.0)
        peer, _ = server.accept()
        return server, client, peer

    server, client, peer = call_in_netns(veth_ns.name, connect)  # the sockets stay in the namespace
    try:
        _round_trips(client, peer)
        yield veth_ns
    finally:
        for s in (client, peer, server):
            s.close()


@pytest.mark.parametrize("kind", ["inet_diag", "ss"])
def test_the_path_collector_sees_a_connection_only_inside_its_namespace(
    connection_in_ns: VethNamespace, kind: str
) -> None:
    if kind == "ss" and shutil.which("ss") is None:
        pytest.skip("ss (iproute2) not installed")
    ns, ifname = connection_in_ns.name, connection_in_ns.end
    in_ns = DiagPathCollector(ns) if kind == "inet_diag" else PathCollector(netns=ns)
    host = DiagPathCollector() if kind == "inet_diag" else PathCollector()
    readings = in_ns.collect()
    assert readings.get(ifname, {}).get("rtt_ms", 0) > 0, readings
    assert readings[ifname]["loss"] == 0.0
    assert ifname not in host.collect()  # the host namespace has neither the connection nor the interface


def test_kernel_capabilities_are_those_of_the_namespace(veth_ns: VethNamespace) -> None:
    ns = veth_ns.name
    sh(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.mptcp.enabled=0"])
    assert Path("/proc/sys/net/mptcp/enabled").read_text().strip() == "1"  # netns_supported() checked the host
    collector = KernelCollector(netns=ns)
    assert not collector.capabilities.mptcp_enabled and collector.capabilities.mptcp["enabled"] == "0"
    assert KernelCollector().capabilities.mptcp_enabled

    sh(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.mptcp.enabled=1"])
    collector.collect()  # re-read, in the namespace again
    assert collector.capabilities.mptcp_enabled


def _netns_inode() -> int:
    return os.stat("/proc/thread-self/ns/net").st_ino


def test_the_nl80211_socket_is_opened_inside_the_namespace(
    veth_ns: VethNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = veth_ns.name
    import pyroute2

    opened_in: list[int] = []

    class RecordingIW:
        """Stands in for pyroute2's ``IW`` (no wireless interface) and records the namespace it is created in."""

        def __init__(self) -> None:
            opened_in.append(_netns_inode())

        def get_interfaces_dump(self) -> list[Any]:
            return []

        def get_stations(self, ifindex: int) -> list[Any]:
            return []

        def close(self) -> None:
            pass

    monkeypatch.setattr(pyroute2, "IW", RecordingIW)
    assert Nl80211WifiCollector(ns).collect() == {}
    assert Nl80211WifiCollector().collect() == {}
    assert opened_in == [os.stat(f"/run/netns/{ns}").st_ino, _netns_inode()]
    assert opened_in[0] != opened_in[1]


def test_build_agent_with_netns_reports_the_rtt_of_the_managed_namespace(testbed: Testbed, tmp_path: Path) -> None:
    listener = call_in_netns(testbed.server_ns, lambda: socket.create_server(("0.0.0.0", 0)))
    port = listener.getsockname()[1]
    # The default route with the lower metric is wlan0's: the connection leaves from 10.1.1.2.
    client = call_in_netns(
        testbed.device_ns, lambda: socket.create_connection((testbed.server_addr, port), timeout=5.0)
    )
    peer, _ = listener.accept()
    config = AgentConfig(
        service=["http://127.0.0.1:9"], interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, backend="dry-run",
        netns=testbed.device_ns, journal=tmp_path / "j.json", status_file=None, upstream_check=False,
    )  # fmt: skip
    agent = build_agent(config)
    try:
        _round_trips(client, peer)
        request = agent.context()
    finally:
        agent.close(restore=False)
        for s in (client, peer, listener):
            s.close()
    reported = {i["name"]: i for i in request["interfaces"]}
    assert reported.get("wlan0", {}).get("rtt_ms", 0) > 0, request
    assert request["kernel"]["available_congestion_controls"], request  # the kernel collector read the namespace
