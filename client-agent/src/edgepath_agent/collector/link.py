"""Which managed interfaces can carry a path: up, with an address other than a link-local one; their byte counters.

An interface that exists but cannot carry traffic (an LTE modem not connected, a WiFi not
associated: no carrier, no address) must not be reported to the service: it would pick it as the
primary path or give it scheduler weight, and every such decision would fail when applied.
:func:`unusable_reason` says why an interface is left out, ``None`` when it can be reported.

Sources: rtnetlink through pyroute2 (``RTM_GETLINK``: ``ifi_flags``; ``RTM_GETADDR``: ``ifa_scope``
and ``IFA_FLAGS``), or ``ip -j addr show`` where pyroute2 is missing. An interface is

* **down** without ``IFF_UP``, or without ``IFF_RUNNING`` (no carrier / operationally down or
  dormant: ``ip link`` prints ``NO-CARRIER``);
* **without an address** when none of its addresses has universe (global) or site scope, IPv4 or
  IPv6: link-local ones (``fe80::/10``, ``169.254.0.0/16``, scope link) don't count, nor do
  addresses that are still tentative (IPv6 duplicate address detection running) or whose DAD
  failed. A loopback interface's host-scope addresses count (``--interface lo=ETHERNET`` in dry
  runs: its traffic never leaves the device anyway).

:func:`interface_counters` reads an interface's received/sent byte counters the same way (rtnetlink
``IFLA_STATS64``, or ``ip -j -s link show``), in a network namespace when given: unlike
``/sys/class/net``, which lists the devices of the namespace sysfs was mounted in whatever the
reading thread's namespace, a netlink socket opened inside the namespace sees its devices.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edgepath_agent.collector.base import in_netns, netns_argv, run_tool

#: ``ifi_flags`` bits (linux/if.h).
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
IFF_RUNNING = 0x40
#: ``ifa_scope`` values (linux/rtnetlink.h ``enum rt_scope_t``).
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_SITE = 200
RT_SCOPE_LINK = 253
RT_SCOPE_HOST = 254
#: ``IFA_FLAGS`` bits (linux/if_addr.h) of addresses that cannot be used yet or at all.
IFA_F_DADFAILED = 0x08
IFA_F_TENTATIVE = 0x40

_IP_SCOPES = {"global": RT_SCOPE_UNIVERSE, "site": RT_SCOPE_SITE, "link": RT_SCOPE_LINK, "host": RT_SCOPE_HOST}


@dataclass(frozen=True)
class Address:
    """One interface address: ``address`` (IPv4 or IPv6 text), rtnetlink ``scope`` and ``IFA_F_*`` ``flags``."""

    address: str
    scope: int = RT_SCOPE_UNIVERSE
    flags: int = 0

    @property
    def usable(self) -> bool:
        """Global or site scope, not link-local, not tentative or DAD-failed (see module docstring)."""
        if self.flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED):
            return False
        try:
            if ipaddress.ip_address(self.address.split("%", 1)[0]).is_link_local:
                return False
        except ValueError:
            return False
        return self.scope <= RT_SCOPE_SITE


@dataclass(frozen=True)
class LinkState:
    """An interface as rtnetlink describes it: ``flags`` (``IFF_*`` bits of ``ifi_flags``) and its addresses."""

    name: str
    flags: int
    addresses: tuple[Address, ...] = ()

    @property
    def up(self) -> bool:
        """Administratively up with carrier (``IFF_UP`` and ``IFF_RUNNING``)."""
        return self.flags & (IFF_UP | IFF_RUNNING) == IFF_UP | IFF_RUNNING


#: Why an interface is not reported (what :func:`unusable_reason` returns).
GONE, DOWN, NO_ADDRESS = "does not exist", "is down", "has no address"


def unusable_reason(state: LinkState | None) -> str | None:
    """Why the interface ``state`` describes cannot carry a path, ``None`` when it can.

    Returns
    -------
    str or None
        ``"does not exist"`` (``state`` is ``None``), ``"is down"`` (no ``IFF_UP`` or no carrier),
        ``"has no address"`` (none with global/site scope; see :class:`Address`), or ``None``.
    """
    if state is None:
        return GONE
    if not state.up:
        return DOWN
    loopback = bool(state.flags & IFF_LOOPBACK)
    if any(a.usable or (loopback and a.scope == RT_SCOPE_HOST) for a in state.addresses):
        return None
    return NO_ADDRESS


def link_states_netlink(links: Iterable[Any], addrs: Iterable[Any]) -> dict[str, LinkState]:
    """:class:`LinkState` per interface name from decoded ``RTM_NEWLINK``/``RTM_NEWADDR`` messages (pyroute2
    ``IPRoute.get_links()`` / ``get_addr()``)."""
    names: dict[int, tuple[str, int]] = {}
    for link in links:
        name = link.get_attr("IFLA_IFNAME")
        if name:
            names[int(link["index"])] = (str(name), int(link["flags"]))
    found: dict[int, list[Address]] = {index: [] for index in names}
    for addr in addrs:
        local = addr.get_attr("IFA_LOCAL") or addr.get_attr("IFA_ADDRESS")
        if local and int(addr["index"]) in found:
            flags = addr.get_attr("IFA_FLAGS")
            found[int(addr["index"])].append(
                Address(str(local), int(addr["scope"]), int(flags if flags is not None else addr["flags"]))
            )
    return {name: LinkState(name, flags, tuple(found[index])) for index, (name, flags) in names.items()}


def link_states_ip_json(text: str) -> dict[str, LinkState]:
    """:class:`LinkState` per interface name from ``ip -j addr show`` (the fallback without pyroute2).

    ``ip`` prints ``NO-CARRIER`` for an interface that is up without ``IFF_RUNNING``, and the
    address flags ``tentative``/``dadfailed`` as booleans.
    """
    out: dict[str, LinkState] = {}
    for link in json.loads(text or "[]"):
        words = set(link.get("flags", []))
        flags = (IFF_UP if "UP" in words else 0) | (IFF_LOOPBACK if "LOOPBACK" in words else 0)
        if "UP" in words and "NO-CARRIER" not in words:
            flags |= IFF_RUNNING
        addresses = tuple(
            Address(
                str(a["local"]),
                _IP_SCOPES.get(str(a.get("scope", "global")), RT_SCOPE_HOST),
                (IFA_F_TENTATIVE if a.get("tentative") else 0) | (IFA_F_DADFAILED if a.get("dadfailed") else 0),
            )
            for a in link.get("addr_info", [])
            if "local" in a
        )
        out[str(link["ifname"])] = LinkState(str(link["ifname"]), flags, addresses)
    return out


#: One reading of every interface's :class:`LinkState` (one ``RTM_GETLINK`` and one ``RTM_GETADDR`` dump), by name:
#: what :class:`LinkReader` returns. An agent step takes one and hands it to everything in the step that needs
#: links or addresses (the link check, the path collectors' address map, the upstream probe's source address, the
#: applier's endpoint addresses) instead of each dumping them again; the next step takes a new one.
LinkSnapshot = Mapping[str, LinkState]


def address_owners(links: LinkSnapshot) -> dict[str, str]:
    """Interface name of every address of ``links`` (any family, any scope), keyed by the address in
    :mod:`ipaddress`'s canonical text: what the path collectors map a socket's local address with (the table
    ``ip -j addr show`` gives :func:`~edgepath_agent.collector.path.parse_ip_addr_json`). Unparsable addresses
    are left out."""
    owners: dict[str, str] = {}
    for name, state in links.items():
        for address in state.addresses:
            try:
                owners[str(ipaddress.ip_address(address.address.split("%", 1)[0]))] = name
            except ValueError:
                continue
    return owners


def ipv4_addresses(links: LinkSnapshot) -> dict[str, list[str]]:
    """``{ifname: [IPv4 addresses of global (universe) scope]}``, in the kernel's order, of ``links``: the shape and
    the selection of the applier backends' ``read_addresses()`` (``ip -j addr show``: family ``inet``, scope
    ``global``). Interfaces without one are left out."""
    out: dict[str, list[str]] = {}
    for name, state in links.items():
        for address in state.addresses:
            if ":" not in address.address and address.scope == RT_SCOPE_UNIVERSE:
                out.setdefault(name, []).append(address.address)
    return out


class LinkReader:
    """Reads the :class:`LinkState` of this device's interfaces (in network namespace ``netns`` when given).

    Parameters
    ----------
    netns
        Network namespace to read (entered with :func:`~edgepath_agent.collector.base.in_netns`,
        or ``ip netns exec`` for the fallback).
    runner
        ``argv → stdout or None`` for the ``ip -j addr show`` fallback (used where pyroute2 is missing).
    """

    def __init__(self, netns: str | None = None, runner: Callable[[Sequence[str]], str | None] = run_tool) -> None:
        self.netns = netns
        self._run = runner

    def __call__(self) -> LinkSnapshot:
        """Every interface's state, by name: one rtnetlink dump of the links and one of the addresses (pyroute2),
        or one ``ip -j addr show`` (which makes the same two).

        Raises
        ------
        OSError
            When the interfaces cannot be read (netlink error, ``netns`` cannot be entered, no ``ip``).
        """
        try:
            import pyroute2  # noqa: F401
        except ImportError:
            return self._read_ip()
        return in_netns(self.netns, _read_netlink)

    def _read_ip(self) -> dict[str, LinkState]:
        argv = ["ip", "-j", "addr", "show"]
        text = self._run(netns_argv(argv, self.netns))
        if text is None:
            raise OSError(f"{' '.join(argv)} failed")
        return link_states_ip_json(text)


def _read_netlink() -> dict[str, LinkState]:
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        with IPRoute() as ipr:
            return link_states_netlink(list(ipr.get_links()), list(ipr.get_addr()))
    except NetlinkError as exc:
        raise OSError(exc.code, f"rtnetlink: {exc}") from exc


@dataclass(frozen=True)
class LinkCounters:
    """Byte counters of one interface since it was created: ``rx_bytes`` received, ``tx_bytes`` sent (bytes)."""

    rx_bytes: int
    tx_bytes: int


def interface_counters(
    ifname: str, netns: str | None = None, runner: Callable[[Sequence[str]], str | None] = run_tool
) -> LinkCounters | None:
    """:class:`LinkCounters` (bytes) of interface ``ifname`` in network namespace ``netns`` (here when ``None``).

    Read over rtnetlink (``RTM_GETLINK``, ``IFLA_STATS64``) from a thread that entered ``netns``
    (:func:`~edgepath_agent.collector.base.in_netns`), or with ``ip -j -s link show dev IFNAME``
    (run through ``ip netns exec``; ``runner``) where pyroute2 is missing.

    Returns
    -------
    LinkCounters or None
        ``None`` when ``netns`` has no interface ``ifname`` (or, for the ``ip`` fallback, when ``ip`` fails).

    Raises
    ------
    OSError
        When ``netns`` cannot be entered or rtnetlink refuses the request for another reason than a missing
        interface.
    """
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        return _counters_ip(runner(netns_argv(["ip", "-j", "-s", "link", "show", "dev", ifname], netns)))
    return in_netns(netns, lambda: _counters_netlink(ifname))


def _counters_ip(text: str | None) -> LinkCounters | None:
    """:class:`LinkCounters` from ``ip -j -s link show dev IFNAME`` (``stats64``), ``None`` without output."""
    for link in json.loads(text or "[]"):
        stats = link.get("stats64") or link.get("stats") or {}
        return LinkCounters(int(stats["rx"]["bytes"]), int(stats["tx"]["bytes"]))
    return None


def _counters_netlink(ifname: str) -> LinkCounters | None:
    import errno

    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        with IPRoute() as ipr:
            links = list(ipr.link("get", ifname=ifname))
    except NetlinkError as exc:
        if exc.code == errno.ENODEV:
            return None
        raise OSError(exc.code, f"rtnetlink: {exc}") from exc
    for link in links:
        stats = link.get_attr("IFLA_STATS64") or link.get_attr("IFLA_STATS")
        if stats is not None:
            return LinkCounters(int(stats["rx_bytes"]), int(stats["tx_bytes"]))
    return None
