"""On a point-to-point link every reader takes the device's own (local) address, not the peer's (marker ``netns``).

rtnetlink(7): an address message carries ``IFA_LOCAL`` (the interface's address) and ``IFA_ADDRESS`` (on a
point-to-point link, ppp, tun, some wwan/QMI set-ups, the *peer's* address; elsewhere the same as ``IFA_LOCAL``).
``ip addr`` prints ``inet LOCAL peer PEER``, ``ip -j addr`` gives ``local`` and ``address``. The ``netlink``
applier backend took ``IFA_ADDRESS``, so it registered an MPTCP endpoint for the peer's address. Here a real
point-to-point device (a tun, ``POINTOPOINT``) in a namespace has ``10.9.3.1 peer 10.9.3.2/32``: both applier
backends, the link snapshot (rtnetlink and the ``ip -j addr show`` fallback) and the applier's endpoint report
10.9.3.1. The link's default route has no gateway (``default dev tun``, link scope): the ``netlink`` backend
re-ranks and restores it (its delete asked for universe scope and found no such route).

Skipped (not passed) without root/CAP_NET_ADMIN or kernel MPTCP (the ``veth_ns`` fixture).
"""

from __future__ import annotations

import json

import pytest
from edgepath_agent.applier import Applier, ApplierConfig, CommandBackend, Journal
from edgepath_agent.collector import LinkReader, address_owners, ipv4_addresses
from edgepath_agent.collector.link import link_states_ip_json
from edgepath_agent.testbed.netns import sh
from netns_helpers import VethNamespace

pytestmark = pytest.mark.netns

LOCAL, PEER = "10.9.3.1", "10.9.3.2"


@pytest.fixture
def ptp(veth_ns: VethNamespace) -> tuple[str, str]:
    """(namespace, tun device) where the tun has ``LOCAL peer PEER/32`` and the namespace's default route."""
    ns, dev = veth_ns.name, "eptun0"
    sh(["ip", "-n", ns, "tuntap", "add", "dev", dev, "mode", "tun"])
    sh(["ip", "-n", ns, "addr", "add", LOCAL, "peer", f"{PEER}/32", "dev", dev])
    sh(["ip", "-n", ns, "link", "set", dev, "up"])
    sh(["ip", "-n", ns, "route", "add", "default", "dev", dev, "metric", "100"])
    shown = json.loads(sh(["ip", "-n", ns, "-j", "addr", "show", "dev", dev]).stdout)
    (info,) = [a for a in shown[0]["addr_info"] if a["family"] == "inet"]
    assert "POINTOPOINT" in shown[0]["flags"] and (info["local"], info["address"]) == (LOCAL, PEER)
    return ns, dev


def test_every_reader_takes_the_local_address_of_a_point_to_point_link(ptp: tuple[str, str]) -> None:
    from edgepath_agent.applier.netlink import NetlinkBackend, available

    if not available():
        pytest.skip("pyroute2 is not installed")
    ns, dev = ptp
    assert NetlinkBackend(netns=ns).read_addresses()[dev] == [LOCAL]
    assert CommandBackend(netns=ns).read_addresses()[dev] == [LOCAL]

    links = LinkReader(ns)()  # the step's link snapshot (rtnetlink)
    assert ipv4_addresses(links)[dev] == [LOCAL]
    owners = address_owners(links)
    assert owners[LOCAL] == dev and PEER not in owners
    fallback = link_states_ip_json(sh(["ip", "-n", ns, "-j", "addr", "show"]).stdout)  # without pyroute2
    assert ipv4_addresses(fallback)[dev] == [LOCAL] and PEER not in address_owners(fallback)


def test_the_netlink_backend_registers_the_endpoint_for_the_local_address(ptp: tuple[str, str]) -> None:
    from edgepath_agent.applier.netlink import NetlinkBackend, available

    if not available():
        pytest.skip("pyroute2 is not installed")
    ns, dev = ptp
    config = ApplierConfig(interfaces=(dev,), manage_cc=False)
    applier = Applier(NetlinkBackend(netns=ns), Journal(None), config)
    applier.apply({"primary_path": {"interface": dev}})  # addresses read by the backend itself
    shown = json.loads(sh(["ip", "-n", ns, "-j", "mptcp", "endpoint", "show"]).stdout or "[]")
    assert [(e["address"], e.get("dev")) for e in shown] == [(LOCAL, dev)]
    # The default route has no gateway (a device route, link scope, as `ip route add default dev` makes it): the
    # backend re-ranks it and the rollback puts it back, scope included.
    assert default_routes(ns) == [(dev, 10, "link")]
    applier.rollback()
    assert default_routes(ns) == [(dev, 100, "link")]
    assert json.loads(sh(["ip", "-n", ns, "-j", "mptcp", "endpoint", "show"]).stdout or "[]") == []


def default_routes(ns: str) -> list[tuple[str, int, str]]:
    """``[(dev, metric, scope)]`` of the namespace's IPv4 default routes (``ip -d -j route show default``)."""
    shown = json.loads(sh(["ip", "-n", ns, "-d", "-j", "-4", "route", "show", "default"]).stdout or "[]")
    return [(r["dev"], int(r.get("metric", 0)), str(r.get("scope", "global"))) for r in shown]
