"""Fixtures of the netns tests: the two-namespace testbed, a transfer server in it, a namespace with a veth pair.

Each skips (not passes) the test that asks for it without root/CAP_NET_ADMIN, iproute2 or kernel
MPTCP (:func:`~edgepath_agent.testbed.netns.netns_supported` names what is missing); ``netns_ready``
is that check alone, for tests that build their namespaces themselves. Namespaces are deleted when
the test ends, also when it fails.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from edgepath_agent.meter import TransferServer
from edgepath_agent.testbed.netns import Testbed, call_in_netns, netns_supported, sh
from netns_helpers import VethNamespace


@pytest.fixture
def netns_ready() -> None:
    """Skips the test where this process cannot build network namespaces with MPTCP (the reason is given)."""
    reason = netns_supported()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def testbed(netns_ready: None) -> Iterator[Testbed]:
    """The device (wlan0 metric 100, wwan0 metric 200) and server namespaces; both are gone afterwards."""
    tb = Testbed()
    try:
        tb.setup()
        yield tb
    finally:
        tb.teardown()
    assert not (Path("/run/netns") / tb.device_ns).exists()


@pytest.fixture
def server(testbed: Testbed) -> Iterator[TransferServer]:
    """An MPTCP :class:`~edgepath_agent.meter.TransferServer` listening in the testbed's server namespace."""
    srv = call_in_netns(testbed.server_ns, lambda: TransferServer("0.0.0.0", 0).start())
    try:
        assert srv.mptcp, "the server namespace refused an MPTCP listener"
        yield srv
    finally:
        srv.close()


@pytest.fixture
def veth_ns(netns_ready: None) -> Iterator[VethNamespace]:
    """A namespace holding a veth pair whose end (a name the host has not) has 10.9.0.1/24, the peer none."""
    end = f"ep{secrets.token_hex(4)}"
    veth = VethNamespace(name=f"ep-veth-{secrets.token_hex(3)}", end=end, peer=f"{end}p", addr="10.9.0.1")
    sh(["ip", "netns", "add", veth.name])
    try:
        sh(["ip", "-n", veth.name, "link", "add", veth.end, "type", "veth", "peer", "name", veth.peer])
        sh(["ip", "-n", veth.name, "addr", "add", f"{veth.addr}/24", "dev", veth.end])
        for link in ("lo", veth.end, veth.peer):
            sh(["ip", "-n", veth.name, "link", "set", link, "up"])
        yield veth
    finally:
        sh(["ip", "netns", "del", veth.name], check=False)
