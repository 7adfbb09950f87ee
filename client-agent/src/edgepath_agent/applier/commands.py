"""Pure argv builders for iproute2 and sysctl (no I/O: tested as data).

References: ``ip-mptcp(8)`` (endpoint add/delete/change, limits set/show),
``ip-route(8)``, ``sysctl(8)``. Every builder returns a new list; :func:`in_netns`
prefixes one with ``ip netns exec NAME`` to run it in another network namespace.
"""

from __future__ import annotations

from typing import Literal

from edgepath_agent.applier.state import Endpoint, Route

IP = "ip"
SYSCTL = "sysctl"


def in_netns(argv: list[str], netns: str | None) -> list[str]:
    """``argv`` run inside network namespace ``netns`` (unchanged when ``None``)."""
    return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)


def endpoint_show() -> list[str]:
    return [IP, "-j", "mptcp", "endpoint", "show"]


def limits_show() -> list[str]:
    return [IP, "mptcp", "limits", "show"]


def routes_show_default(family: Literal["-4", "-6"] = "-4") -> list[str]:
    """``ip -4 -j route show default`` (``family`` ``"-6"``: the IPv6 default routes)."""
    return [IP, family, "-j", "route", "show", "default"]


def addresses_show() -> list[str]:
    return [IP, "-4", "-j", "addr", "show"]


def links_show() -> list[str]:
    return [IP, "-j", "link", "show"]


def sysctl_get(key: str) -> list[str]:
    return [SYSCTL, "-n", key]


def endpoint_add(ep: Endpoint) -> list[str]:
    """``ip mptcp endpoint add ADDR id ID [dev DEV] FLAGS...``."""
    argv = [IP, "mptcp", "endpoint", "add", ep.address, "id", str(ep.id)]
    if ep.dev:
        argv += ["dev", ep.dev]
    return argv + list(ep.flags)


def endpoint_delete(endpoint_id: int) -> list[str]:
    return [IP, "mptcp", "endpoint", "delete", "id", str(endpoint_id)]


def endpoint_set_backup(endpoint_id: int, backup: bool) -> list[str]:
    """``ip mptcp endpoint change id ID backup|nobackup`` (keeps the endpoint's subflows)."""
    return [IP, "mptcp", "endpoint", "change", "id", str(endpoint_id), "backup" if backup else "nobackup"]


def limits_set(limits: dict[str, int]) -> list[str]:
    """``ip mptcp limits set [subflows N] [add_addr_accepted M]``."""
    argv = [IP, "mptcp", "limits", "set"]
    for key in ("subflows", "add_addr_accepted"):
        if key in limits:
            argv += [key, str(int(limits[key]))]
    return argv


def _route_spec(route: Route) -> list[str]:
    spec = ["default"]
    if route.gateway:
        spec += ["via", route.gateway]
    spec += ["dev", route.dev]
    if route.protocol:
        spec += ["proto", route.protocol]
    if route.prefsrc:
        spec += ["src", route.prefsrc]
    spec += ["metric", str(route.metric)]
    if route.onlink:
        spec.append("onlink")
    return spec


def route_add(route: Route) -> list[str]:
    """``ip route add default via GW dev DEV [proto P] [src S] metric M [onlink]``."""
    return [IP, "-4", "route", "add", *_route_spec(route)]


def route_delete(route: Route) -> list[str]:
    """``ip route del default via GW dev DEV metric M`` (metric identifies the route)."""
    spec = ["default"]
    if route.gateway:
        spec += ["via", route.gateway]
    return [IP, "-4", "route", "del", *spec, "dev", route.dev, "metric", str(route.metric)]


def sysctl_set(key: str, value: str) -> list[str]:
    return [SYSCTL, "-q", "-w", f"{key}={value}"]


#: op name → argv builder (the ops table's command form).
BUILDERS = {
    "endpoint_add": lambda a: endpoint_add(a["endpoint"]),
    "endpoint_delete": lambda a: endpoint_delete(a["id"]),
    "endpoint_set_backup": lambda a: endpoint_set_backup(a["id"], a["backup"]),
    "limits_set": lambda a: limits_set(a["limits"]),
    "route_add": lambda a: route_add(a["route"]),
    "route_delete": lambda a: route_delete(a["route"]),
    "sysctl_set": lambda a: sysctl_set(a["key"], a["value"]),
}


def argv_for(op: str, args: dict) -> list[str]:  # type: ignore[type-arg]
    """argv that performs ``op`` with ``args``.

    Raises
    ------
    KeyError
        For an op not in the ops table.
    """
    return BUILDERS[op](args)
