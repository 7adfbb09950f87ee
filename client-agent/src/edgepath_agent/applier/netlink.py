"""Netlink backend (pyroute2): the same ops table over rtnetlink and the ``mptcp_pm`` generic family.

* MPTCP endpoints and limits through generic netlink ``mptcp_pm`` (kernel
  ``net/mptcp/pm_netlink.c``; commands ADD_ADDR, DEL_ADDR, GET_ADDR, SET_LIMITS,
  GET_LIMITS, SET_FLAGS). pyroute2 0.9.7 declares ``MPTCP_PM_ADDR_ATTR_IF_IDX`` as
  ``hex`` (it decodes ``'02:00:00:00'`` and cannot encode an index) and has no
  SET_FLAGS; :class:`_MptcpMsg` re-declares the attribute as the kernel's
  ``NLA_S32`` and :meth:`_AsyncMPTCP.set_flags` adds the command.
* Default routes through rtnetlink (``RTM_NEWROUTE``/``RTM_DELROUTE``, main table 254).
* sysctls by writing ``/proc/sys`` (in another namespace: ``ip netns exec … sysctl``,
  since ``/proc/sys/net`` shows the reader's namespace).

Requires the optional ``pyroute2`` package; :func:`available` says whether it imports.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from edgepath_agent import safety
from edgepath_agent.applier import commands
from edgepath_agent.applier.backend import Runner, run_checked
from edgepath_agent.applier.state import ENDPOINT_FLAGS, Endpoint, NetState, Route

#: MPTCP_PM_ADDR_FLAG_* bits (include/uapi/linux/mptcp.h).
FLAG_BITS = {"signal": 1 << 0, "subflow": 1 << 1, "backup": 1 << 2, "fullmesh": 1 << 3, "laminar": 1 << 5}
MPTCP_PM_CMD_ADD_ADDR = 1
MPTCP_PM_CMD_SET_FLAGS = 7
RT_TABLE_MAIN = 254
RTNH_F_ONLINK = 4
#: ``rtm_scope`` values (include/uapi/linux/rtnetlink.h ``enum rt_scope_t``): a route without a gateway (a device
#: route, as over ppp/tun) has link scope, as iproute2 gives it; a delete asks with "nowhere", which the kernel
#: takes as any scope (``fib_table_delete``), as ``ip route del`` does.
RT_SCOPE_LINK = 253
RT_SCOPE_NOWHERE = 255
#: rtnetlink route protocols (include/uapi/linux/rtnetlink.h); "boot" is what `ip route add` uses.
RTPROT = {"kernel": 2, "boot": 3, "static": 4, "ra": 9, "dhcp": 16}
RTPROT_NAME = {v: k for k, v in RTPROT.items()}


def available() -> bool:
    """True when pyroute2 can be imported."""
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        return False
    return True


def _mptcp_classes() -> tuple[type, type]:
    from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
    from pyroute2.netlink.generic import AsyncGenericNetlinkSocket
    from pyroute2.netlink.generic.mptcp import MPTCP, MPTCP_GENL_NAME, AsyncMPTCP, mptcp_msg

    class _MptcpMsg(mptcp_msg):  # type: ignore[misc,valid-type]
        # Re-declared and marked uncompiled so that pyroute2 compiles the map against this class's
        # pm_addr (it caches the compiled table in a class attribute that subclasses inherit).
        nla_map = tuple(mptcp_msg.nla_map)
        _nlmsg_base__compiled_nla = False

        class pm_addr(mptcp_msg.pm_addr):  # type: ignore[misc,name-defined]  # noqa: N801
            nla_map = (*mptcp_msg.pm_addr.nla_map[:-1], ("MPTCP_PM_ADDR_ATTR_IF_IDX", "int32"))
            _nlmsg_base__compiled_nla = False

    class _AsyncMPTCP(AsyncMPTCP):  # type: ignore[misc,valid-type]
        async def setup_endpoint(self) -> None:
            if getattr(self.local, "transport", None) is not None:
                return
            await AsyncGenericNetlinkSocket.setup_endpoint(self)
            await self.bind(MPTCP_GENL_NAME, _MptcpMsg)

        async def set_flags(self, endpoint_id: int, flags: int) -> Any:
            msg = _MptcpMsg()
            msg["cmd"] = MPTCP_PM_CMD_SET_FLAGS
            msg["version"] = 1
            addr = {"attrs": [("MPTCP_PM_ADDR_ATTR_ID", endpoint_id), ("MPTCP_PM_ADDR_ATTR_FLAGS", flags)]}
            msg["attrs"] = [("MPTCP_PM_ATTR_ADDR", addr, 0x8000)]
            return await self.nlm_request(msg, msg_type=self.prid, msg_flags=NLM_F_REQUEST | NLM_F_ACK)

        async def add_endpoint(self, attrs: list[tuple[str, Any]]) -> Any:
            # pyroute2's endpoint("add") builds its message from mptcp_msg, whose IF_IDX ("hex") cannot
            # encode an interface index: an endpoint bound to a device needs this class's int32.
            msg = _MptcpMsg()
            msg["cmd"] = MPTCP_PM_CMD_ADD_ADDR
            msg["version"] = 1
            msg["attrs"] = [("MPTCP_PM_ATTR_ADDR", {"attrs": attrs}, 0x8000)]
            return await self.nlm_request(msg, msg_type=self.prid, msg_flags=NLM_F_REQUEST | NLM_F_ACK)

    class _MPTCPSync(MPTCP):  # type: ignore[misc,valid-type]
        async_class = _AsyncMPTCP

        def set_flags(self, endpoint_id: int, flags: int) -> Any:
            return self._run_sync_cleanup(self.asyncore.set_flags, endpoint_id, flags)

        def add_endpoint(self, attrs: list[tuple[str, Any]]) -> Any:
            return self._run_sync_cleanup(self.asyncore.add_endpoint, attrs)

    return _MptcpMsg, _MPTCPSync


class NetlinkBackend:
    """Ops table over netlink (pyroute2), optionally in network namespace ``netns``.

    Raises
    ------
    ImportError
        When pyroute2 is not installed.
    """

    name = "netlink"

    def __init__(self, netns: str | None = None, runner: Runner = run_checked) -> None:
        from pyroute2 import IPRoute

        self.netns = netns
        self._run = runner
        kwargs = {"netns": netns} if netns else {}
        self._mptcp_cls = _mptcp_classes()[1]
        self._kwargs = kwargs
        self._ipr_cls = IPRoute

    def _ipr(self) -> Any:
        return self._ipr_cls(**self._kwargs)

    def _mptcp(self) -> Any:
        return self._mptcp_cls(**self._kwargs)

    def _ifindex(self, ipr: Any, name: str) -> int:
        found = ipr.link_lookup(ifname=name)
        if not found:
            raise ValueError(f"no interface {name!r}")
        return int(found[0])

    # ---------------------------------------------------------------- reads

    def read_state(self, sysctl_keys: Iterable[str]) -> NetState:
        with self._ipr() as ipr:
            names = {int(link["index"]): link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
            routes = []
            for r in ipr.route("dump", family=socket.AF_INET, table=RT_TABLE_MAIN):
                if r["dst_len"] != 0 or r.get_attr("RTA_TABLE") not in (None, RT_TABLE_MAIN) or r["type"] != 1:
                    continue
                proto = RTPROT_NAME.get(int(r["proto"]), str(r["proto"]))
                routes.append(
                    Route(
                        dev=names.get(r.get_attr("RTA_OIF"), ""),
                        gateway=r.get_attr("RTA_GATEWAY"),
                        metric=int(r.get_attr("RTA_PRIORITY") or 0),
                        protocol=None if proto == "boot" else proto,
                        prefsrc=r.get_attr("RTA_PREFSRC"),
                        onlink=bool(r["flags"] & RTNH_F_ONLINK),
                    )
                )
        with self._mptcp() as mptcp:
            endpoints = []
            for msg in mptcp.endpoint("show"):
                addr = msg.get_attr("MPTCP_PM_ATTR_ADDR")
                bits = int(addr.get_attr("MPTCP_PM_ADDR_ATTR_FLAGS") or 0)
                if_idx = addr.get_attr("MPTCP_PM_ADDR_ATTR_IF_IDX")
                endpoints.append(
                    Endpoint(
                        id=int(addr.get_attr("MPTCP_PM_ADDR_ATTR_ID")),
                        address=addr.get_attr("MPTCP_PM_ADDR_ATTR_ADDR4") or addr.get_attr("MPTCP_PM_ADDR_ATTR_ADDR6"),
                        dev=names.get(int(if_idx)) if if_idx else None,
                        flags=tuple(f for f in ENDPOINT_FLAGS if bits & FLAG_BITS[f]),
                    )
                )
            (lim,) = mptcp.limits("show")
            limits = (
                ("add_addr_accepted", int(lim.get_attr("MPTCP_PM_ATTR_RCV_ADD_ADDRS") or 0)),
                ("subflows", int(lim.get_attr("MPTCP_PM_ATTR_SUBFLOWS") or 0)),
            )
        sysctls = tuple(sorted((k, self._sysctl_get(k)) for k in sysctl_keys))
        return NetState(endpoints=tuple(endpoints), limits=limits, default_routes=tuple(routes), sysctls=sysctls)

    def read_addresses(self) -> dict[str, list[str]]:
        """``{ifname: [IPv4 addresses of universe scope]}``, in the kernel's order: this device's own addresses.

        The local address is ``IFA_LOCAL`` (rtnetlink(7)): on a point-to-point link (ppp, tun, some wwan set-ups;
        ``ip addr`` prints ``inet LOCAL peer PEER``) ``IFA_ADDRESS`` is the *peer's* address, and equals
        ``IFA_LOCAL`` elsewhere. ``IFA_ADDRESS`` is taken only where the kernel sent no ``IFA_LOCAL``. The same
        selection as ``ip -4 -j addr show`` (its ``local``) in the ``command`` backend.
        """
        out: dict[str, list[str]] = {}
        with self._ipr() as ipr:
            names = {int(link["index"]): link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
            for a in ipr.get_addr(family=socket.AF_INET):
                local = a.get_attr("IFA_LOCAL") or a.get_attr("IFA_ADDRESS")
                if a["scope"] == 0 and local:
                    out.setdefault(names[int(a["index"])], []).append(str(local))
        return out

    def read_interfaces(self) -> set[str]:
        """Names of the network interfaces in ``netns`` (``RTM_GETLINK`` dump)."""
        with self._ipr() as ipr:
            return {str(link.get_attr("IFLA_IFNAME")) for link in ipr.get_links() if link.get_attr("IFLA_IFNAME")}

    def _sysctl_get(self, key: str) -> str:
        if self.netns is None:
            return Path("/proc/sys", *key.split(".")).read_text().strip()
        return self._run(safety.check_argv(commands.in_netns(commands.sysctl_get(key), self.netns))).strip()

    # ---------------------------------------------------------------- ops

    @property
    def ops(self) -> dict[str, Callable[..., None]]:
        return {
            "endpoint_add": self.endpoint_add,
            "endpoint_delete": self.endpoint_delete,
            "endpoint_set_backup": self.endpoint_set_backup,
            "limits_set": self.limits_set,
            "route_add": self.route_add,
            "route_delete": self.route_delete,
            "sysctl_set": self.sysctl_set,
        }

    def endpoint_add(self, endpoint: Endpoint) -> None:
        flags = 0
        for f in endpoint.flags:
            flags |= FLAG_BITS[f]
        v6 = ":" in endpoint.address
        attrs: list[tuple[str, Any]] = [
            ("MPTCP_PM_ADDR_ATTR_FAMILY", socket.AF_INET6 if v6 else socket.AF_INET),
            ("MPTCP_PM_ADDR_ATTR_ADDR6" if v6 else "MPTCP_PM_ADDR_ATTR_ADDR4", endpoint.address),
            ("MPTCP_PM_ADDR_ATTR_ID", endpoint.id),
            ("MPTCP_PM_ADDR_ATTR_FLAGS", flags),
        ]
        if endpoint.dev:
            with self._ipr() as ipr:
                attrs.append(("MPTCP_PM_ADDR_ATTR_IF_IDX", self._ifindex(ipr, endpoint.dev)))
        with self._mptcp() as mptcp:
            mptcp.add_endpoint(attrs)

    def endpoint_delete(self, id: int) -> None:
        with self._mptcp() as mptcp:
            mptcp.endpoint("del", id=id)

    def endpoint_set_backup(self, id: int, backup: bool) -> None:
        current = {e.id: e for e in self.read_state(()).endpoints}
        if id not in current:
            raise ValueError(f"no MPTCP endpoint id {id}")
        flags = 0
        for f in current[id].flags:
            if f != "backup":
                flags |= FLAG_BITS[f]
        if backup:
            flags |= FLAG_BITS["backup"]
        with self._mptcp() as mptcp:
            mptcp.set_flags(id, flags)

    def limits_set(self, limits: dict[str, int]) -> None:
        with self._mptcp() as mptcp:
            mptcp.limits("set", **{k: int(v) for k, v in limits.items()})

    def _route_args(self, ipr: Any, route: Route) -> dict[str, Any]:
        args: dict[str, Any] = {
            "dst": "0.0.0.0/0",
            "oif": self._ifindex(ipr, route.dev),
            "priority": route.metric,
            "table": RT_TABLE_MAIN,
        }
        if route.gateway:
            args["gateway"] = route.gateway
        return args

    def route_add(self, route: Route) -> None:
        with self._ipr() as ipr:
            args = self._route_args(ipr, route)
            args["proto"] = RTPROT.get(route.protocol or "boot", RTPROT["boot"])
            if route.prefsrc:
                args["prefsrc"] = route.prefsrc
            if route.onlink:
                args["flags"] = RTNH_F_ONLINK
            if not route.gateway:
                args["scope"] = RT_SCOPE_LINK
            ipr.route("add", **args)

    def route_delete(self, route: Route) -> None:
        with self._ipr() as ipr:
            ipr.route("del", **self._route_args(ipr, route), scope=RT_SCOPE_NOWHERE)

    def sysctl_set(self, key: str, value: str) -> None:
        if self.netns is None:
            Path("/proc/sys", *key.split(".")).write_text(f"{value}\n")
        else:
            self._run(safety.check_argv(commands.in_netns(commands.sysctl_set(key, value), self.netns)))
