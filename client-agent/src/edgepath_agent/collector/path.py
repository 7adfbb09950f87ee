"""Per-path RTT and loss from the kernel's TCP_INFO of live connections.

:class:`DiagPathCollector` (the default where pyroute2 is installed, which the base
install is) reads them from the kernel's ``inet_diag`` netlink interface (pyroute2
``DiagSocket``, ``SOCK_DIAG_BY_FAMILY`` with the ``INET_DIAG_INFO`` extension: one
``struct tcp_info`` per established socket, ``tcpi_rtt`` in µs) and maps local
addresses to interfaces with rtnetlink (``IPRoute.get_addr``); no text is parsed.

:class:`PathCollector` is the fallback over ``ss`` text: ``ss -tinH state established``
prints, for every established TCP socket
(MPTCP subflows included), the kernel's ``struct tcp_info``: ``rtt:SRTT/RTTVAR``
in ms, ``segs_out``, ``retrans:CUR/TOTAL`` (``tcpi_total_retrans``). The local
address of each socket is mapped to its interface with ``ip -j addr``. Per
interface:

* ``rtt_ms`` = median of the smoothed RTTs (``tcpi_rtt``, RFC 6298 SRTT);
* ``loss`` = Σ total_retrans / Σ segs_out — retransmitted segments as an estimate
  of the segment loss rate (an upper bound: spurious retransmissions count too).

In an agent step both take the address → interface map from the step's link snapshot instead
(``collect_with_links``, :data:`~edgepath_agent.collector.link.LinkSnapshot`): the step has already
dumped links and addresses once, for the link check, and does not dump them again.

Interfaces with no live connection report nothing; the meter's active transfers
(meter.py) then provide the path metrics instead.

Sockets, addresses and interfaces belong to a network namespace: with ``netns`` (the agent's
``--netns``) both collectors read that namespace's (inet_diag and rtnetlink from a thread that
entered it, ``ss``/``ip`` under ``ip netns exec``), not the host's.
"""

from __future__ import annotations

import ipaddress
import json
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from edgepath_agent.collector.base import Readings, in_netns, netns_argv, run_tool
from edgepath_agent.collector.link import LinkSnapshot, address_owners

_RTT = re.compile(r"\brtt:(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)")
_SEGS_OUT = re.compile(r"\bsegs_out:(\d+)")
_RETRANS = re.compile(r"\bretrans:(\d+)/(\d+)")


@dataclass(frozen=True)
class SocketInfo:
    """The TCP_INFO fields of one socket that the path collector uses."""

    local_addr: str
    peer_addr: str
    rtt_ms: float | None
    segs_out: int
    total_retrans: int
    mptcp_subflow: bool


def _split_addr(endpoint: str) -> str:
    host = endpoint.rsplit(":", 1)[0]
    host = host.strip("[]")
    return host.split("%", 1)[0]


def parse_ss_tin(text: str) -> list[SocketInfo]:
    """Parse ``ss -tinH state established`` output (one header line, one info line per socket).

    With a ``state`` filter ``ss`` omits the state column, so a socket line is
    ``Recv-Q Send-Q Local:Port Peer:Port``; without it, ``State`` comes first.
    """
    out: list[SocketInfo] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        head = lines[i].split()
        i += 1
        if not head or lines[i - 1].startswith((" ", "\t")):
            continue
        cols = head[1:] if not head[0].isdigit() else head
        if len(cols) < 4:
            continue
        local, peer = cols[2], cols[3]
        info = ""
        while i < len(lines) and lines[i].startswith((" ", "\t")):
            info += " " + lines[i].strip()
            i += 1
        rtt = _RTT.search(info)
        segs = _SEGS_OUT.search(info)
        retr = _RETRANS.search(info)
        out.append(
            SocketInfo(
                local_addr=_split_addr(local),
                peer_addr=_split_addr(peer),
                rtt_ms=float(rtt.group(1)) if rtt else None,
                segs_out=int(segs.group(1)) if segs else 0,
                total_retrans=int(retr.group(2)) if retr else 0,
                mptcp_subflow="tcp-ulp-mptcp" in info,
            )
        )
    return out


def parse_ip_addr_json(text: str) -> dict[str, str]:
    """Address → interface name from ``ip -j addr show``."""
    table: dict[str, str] = {}
    for link in json.loads(text or "[]"):
        for addr in link.get("addr_info", []):
            if "local" in addr:
                table[str(ipaddress.ip_address(addr["local"]))] = link["ifname"]
    return table


def path_metrics(sockets: Sequence[SocketInfo], addr_to_if: dict[str, str]) -> Readings:
    """Per-interface ``rtt_ms`` and ``loss`` from socket infos (see module docstring)."""
    rtts: dict[str, list[float]] = {}
    segs: dict[str, int] = {}
    retrans: dict[str, int] = {}
    for s in sockets:
        try:
            ifname = addr_to_if.get(str(ipaddress.ip_address(s.local_addr)))
        except ValueError:
            continue
        if ifname is None or ifname == "lo":
            continue
        if s.rtt_ms is not None:
            rtts.setdefault(ifname, []).append(s.rtt_ms)
        segs[ifname] = segs.get(ifname, 0) + s.segs_out
        retrans[ifname] = retrans.get(ifname, 0) + s.total_retrans
    readings: Readings = {}
    for ifname in set(rtts) | set(segs):
        fields: dict[str, Any] = {}
        if rtts.get(ifname):
            fields["rtt_ms"] = float(statistics.median(rtts[ifname]))
        if segs.get(ifname):
            fields["loss"] = min(1.0, retrans[ifname] / segs[ifname])
        readings[ifname] = fields
    return readings


class PathCollector:
    """RTT and loss per interface from the TCP_INFO of established connections (``ss``, ``ip``).

    Parameters
    ----------
    runner
        ``argv → stdout or None``; defaults to running the real tool.
    netns
        Network namespace whose connections and addresses are read (``ip netns exec NAME``); the
        current one when ``None``.
    """

    name = "path"

    def __init__(self, runner: Callable[[Sequence[str]], str | None] = run_tool, *, netns: str | None = None) -> None:
        self._run = runner
        self.netns = netns

    def collect(self) -> Readings:
        """``rtt_ms`` (ms) and ``loss`` (fraction) per interface; ``{}`` when ``ss`` or ``ip`` is missing or fails."""
        ss = self._run(netns_argv(["ss", "-tinH", "state", "established"], self.netns))
        addrs = self._run(netns_argv(["ip", "-j", "addr", "show"], self.netns))
        if ss is None or addrs is None:
            return {}
        return path_metrics(parse_ss_tin(ss), parse_ip_addr_json(addrs))

    def collect_with_links(self, links: LinkSnapshot) -> Readings:
        """:meth:`collect` with the addresses of ``links`` (the step's snapshot) instead of ``ip -j addr show``;
        ``{}`` when ``ss`` is missing or fails."""
        ss = self._run(netns_argv(["ss", "-tinH", "state", "established"], self.netns))
        if ss is None:
            return {}
        return path_metrics(parse_ss_tin(ss), address_owners(links))


#: ``inet_diag_req.idiag_ext`` bit asking for ``INET_DIAG_INFO`` (struct tcp_info), linux/inet_diag.h.
_INET_DIAG_INFO_EXT = 1 << (2 - 1)
#: ``1 << TCP_ESTABLISHED`` for ``idiag_states``.
_ESTABLISHED = 1 << 1


def diag_sockets(messages: Sequence[Any]) -> list[SocketInfo]:
    """:class:`SocketInfo` from decoded ``inet_diag_msg`` replies (pyroute2 ``DiagSocket.get_sock_stats``).

    ``tcpi_rtt`` (µs) becomes ``rtt_ms``; ``mptcp_subflow`` is true when the socket
    carries upper-layer-protocol info (``INET_DIAG_ULP_INFO``, which MPTCP subflows report).
    """
    out: list[SocketInfo] = []
    for msg in messages:
        info = msg.get_attr("INET_DIAG_INFO")
        rtt_us = info.get("tcpi_rtt") if info is not None else None
        out.append(
            SocketInfo(
                local_addr=str(msg["idiag_src"]),
                peer_addr=str(msg["idiag_dst"]),
                rtt_ms=rtt_us / 1000.0 if rtt_us else None,
                segs_out=int(info.get("tcpi_segs_out") or 0) if info is not None else 0,
                total_retrans=int(info.get("tcpi_total_retrans") or 0) if info is not None else 0,
                mptcp_subflow=msg.get_attr("INET_DIAG_ULP_INFO") is not None,
            )
        )
    return out


class DiagPathCollector:
    """RTT and loss per interface from ``inet_diag`` and rtnetlink (pyroute2); nothing when pyroute2 is missing.

    Parameters
    ----------
    netns
        Network namespace whose connections and addresses are read (its netlink sockets are opened
        from a thread that entered it); the current one when ``None``.
    """

    name = "path-inet-diag"

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns

    def collect(self) -> Readings:
        """``rtt_ms`` (ms) and ``loss`` (fraction) per interface; ``{}`` without pyroute2.

        Raises
        ------
        OSError
            When ``netns`` cannot be entered or a netlink socket cannot be opened; pyroute2's
            ``NetlinkError`` when the kernel refuses a dump.
        """
        try:
            import pyroute2  # noqa: F401
        except ImportError:
            return {}
        return in_netns(self.netns, _read_diag)

    def collect_with_links(self, links: LinkSnapshot) -> Readings:
        """:meth:`collect` with the addresses of ``links`` (the step's snapshot): inet_diag only, no rtnetlink dump
        of its own; ``{}`` without pyroute2.

        Raises
        ------
        OSError
            As :meth:`collect`.
        """
        try:
            import pyroute2  # noqa: F401
        except ImportError:
            return {}
        return path_metrics(in_netns(self.netns, _diag_socket_infos), address_owners(links))


def _diag_socket_infos() -> list[SocketInfo]:
    """The established TCP sockets (IPv4 and IPv6) of the current network namespace, through inet_diag."""
    import socket

    from pyroute2 import DiagSocket

    sockets: list[SocketInfo] = []
    with DiagSocket() as diag:
        diag.bind()
        for family in (socket.AF_INET, socket.AF_INET6):
            sockets += diag_sockets(
                diag.get_sock_stats(family=family, states=_ESTABLISHED, extensions=_INET_DIAG_INFO_EXT)
            )
    return sockets


def _read_diag() -> Readings:
    """:func:`path_metrics` of the current network namespace's sockets, through inet_diag and rtnetlink."""
    from pyroute2 import IPRoute

    sockets = _diag_socket_infos()
    addr_to_if: dict[str, str] = {}
    with IPRoute() as ipr:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
        for addr in ipr.get_addr():
            local = addr.get_attr("IFA_LOCAL") or addr.get_attr("IFA_ADDRESS")
            if local and addr["index"] in names:
                addr_to_if[str(ipaddress.ip_address(local))] = str(names[addr["index"]])
    return path_metrics(sockets, addr_to_if)
