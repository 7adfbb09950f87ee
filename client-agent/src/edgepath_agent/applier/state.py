"""The slice of network state the applier manages, its parsers and a pure simulator.

Managed state (everything the agent may change, hence everything a rollback restores):

* MPTCP endpoints (``ip mptcp endpoint show``): id, address, device, flags among
  ``signal``, ``subflow``, ``laminar`` (Linux ≥ 6.18), ``backup``, ``fullmesh`` (kernel doc
  ``mptcp-sysctl``/``ip-mptcp(8)``);
* MPTCP limits (``ip mptcp limits show``): ``subflows``, ``add_addr_accepted``;
* IPv4 default routes of the main table (``ip -j route show default``);
* sysctls (``net.ipv4.tcp_congestion_control``).

:func:`simulate` applies one operation to a :class:`NetState` without touching the
kernel: the dry-run backend uses it, and the applier uses it to check, before each
step, that the step never leaves the device without a default route.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

ENDPOINT_FLAGS = ("signal", "subflow", "laminar", "backup", "fullmesh")


@dataclass(frozen=True)
class Endpoint:
    """One MPTCP endpoint (``ip mptcp endpoint``)."""

    id: int
    address: str
    dev: str | None = None
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = [f for f in self.flags if f not in ENDPOINT_FLAGS]
        if bad:
            raise ValueError(f"unknown MPTCP endpoint flag(s) {bad}; known: {ENDPOINT_FLAGS}")
        object.__setattr__(self, "flags", tuple(f for f in ENDPOINT_FLAGS if f in self.flags))


@dataclass(frozen=True)
class Route:
    """One IPv4 default route of the main table."""

    dev: str
    gateway: str | None = None
    metric: int = 0
    protocol: str | None = None
    prefsrc: str | None = None
    onlink: bool = False


@dataclass(frozen=True)
class NetState:
    """Everything the applier manages (see module docstring)."""

    endpoints: tuple[Endpoint, ...] = ()
    limits: tuple[tuple[str, int], ...] = ()
    default_routes: tuple[Route, ...] = ()
    sysctls: tuple[tuple[str, str], ...] = ()

    @property
    def limits_dict(self) -> dict[str, int]:
        return dict(self.limits)

    @property
    def sysctls_dict(self) -> dict[str, str]:
        return dict(self.sysctls)

    def canonical(self) -> NetState:
        """Order-independent form (for equality checks)."""
        return NetState(
            endpoints=tuple(sorted(self.endpoints, key=lambda e: e.id)),
            limits=tuple(sorted(self.limits)),
            default_routes=tuple(sorted(self.default_routes, key=lambda r: (r.metric, r.dev, r.gateway or ""))),
            sysctls=tuple(sorted(self.sysctls)),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoints": [asdict(e) | {"flags": list(e.flags)} for e in self.endpoints],
            "limits": dict(self.limits),
            "default_routes": [asdict(r) for r in self.default_routes],
            "sysctls": dict(self.sysctls),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NetState:
        return cls(
            endpoints=tuple(
                Endpoint(e["id"], e["address"], e.get("dev"), tuple(e.get("flags", ())))
                for e in data.get("endpoints", [])
            ),
            limits=tuple(sorted((k, int(v)) for k, v in data.get("limits", {}).items())),
            default_routes=tuple(Route(**r) for r in data.get("default_routes", [])),
            sysctls=tuple(sorted((k, str(v)) for k, v in data.get("sysctls", {}).items())),
        )


# ---------------------------------------------------------------- parsers (pure)


def parse_endpoints_json(text: str) -> tuple[Endpoint, ...]:
    """``ip -j mptcp endpoint show`` → endpoints (flags are JSON booleans there)."""
    out = []
    for item in json.loads(text or "[]"):
        flags = tuple(f for f in ENDPOINT_FLAGS if item.get(f))
        out.append(Endpoint(int(item["id"]), str(item["address"]), item.get("dev"), flags))
    return tuple(out)


_LIMIT = re.compile(r"(subflows|add_addr_accepted)\s+(\d+)")


def parse_limits(text: str) -> tuple[tuple[str, int], ...]:
    """``ip mptcp limits show`` (``add_addr_accepted 0 subflows 2``) → sorted pairs."""
    return tuple(sorted((k, int(v)) for k, v in _LIMIT.findall(text)))


def parse_default_routes_json(text: str, nexthops: bool = False) -> tuple[Route, ...]:
    """``ip -j route show default`` (main table) → default routes (the applier's: IPv4).

    A multipath route (``nexthops``, no ``dev`` of its own) is left out, or with ``nexthops`` read as one route per
    next hop at its metric (the IPv6 routes the start check reads: the kernel merges IPv6 default routes of one
    metric into such a route).
    """
    out = []
    for item in json.loads(text or "[]"):
        if item.get("dst") != "default":
            continue
        hops = item.get("nexthops", []) if nexthops and "dev" not in item else [item]
        out += [
            Route(
                dev=hop["dev"],
                gateway=hop.get("gateway"),
                metric=int(item.get("metric", 0)),
                protocol=item.get("protocol"),
                prefsrc=item.get("prefsrc"),
                onlink="onlink" in hop.get("flags", []),
            )
            for hop in hops
            if "dev" in hop
        ]
    return tuple(out)


def parse_addresses_json(text: str) -> dict[str, list[str]]:
    """``ip -j addr show`` → ``{ifname: [IPv4 addresses]}`` (global scope)."""
    out: dict[str, list[str]] = {}
    for link in json.loads(text or "[]"):
        for a in link.get("addr_info", []):
            if a.get("family") == "inet" and a.get("scope", "global") == "global":
                out.setdefault(link["ifname"], []).append(a["local"])
    return out


def parse_link_names_json(text: str) -> set[str]:
    """``ip -j link show`` → the names of the interfaces that exist."""
    return {str(link["ifname"]) for link in json.loads(text or "[]") if "ifname" in link}


# ---------------------------------------------------------------- simulator (pure)


class SimulationError(ValueError):
    """An operation the kernel would refuse (e.g. adding an existing route)."""


def simulate(state: NetState, op: str, args: Mapping[str, Any]) -> NetState:
    """State after one operation of the ops table (see :mod:`edgepath_agent.applier.backend`).

    Raises
    ------
    SimulationError
        Where the kernel would answer EEXIST/ENOENT.
    """
    if op == "endpoint_add":
        ep = args["endpoint"]
        if any(e.id == ep.id or e.address == ep.address for e in state.endpoints):
            raise SimulationError(f"endpoint {ep.id}/{ep.address} exists")
        return replace(state, endpoints=(*state.endpoints, ep))
    if op == "endpoint_delete":
        if not any(e.id == args["id"] for e in state.endpoints):
            raise SimulationError(f"no endpoint id {args['id']}")
        return replace(state, endpoints=tuple(e for e in state.endpoints if e.id != args["id"]))
    if op == "endpoint_set_backup":
        eps = []
        found = False
        for e in state.endpoints:
            if e.id == args["id"]:
                found = True
                flags = {*e.flags} - {"backup"} | ({"backup"} if args["backup"] else set())
                e = replace(e, flags=tuple(flags))
            eps.append(e)
        if not found:
            raise SimulationError(f"no endpoint id {args['id']}")
        return replace(state, endpoints=tuple(eps))
    if op == "limits_set":
        return replace(state, limits=tuple(sorted({**state.limits_dict, **args["limits"]}.items())))
    if op == "route_add":
        r = args["route"]
        taken = next((x for x in state.default_routes if x.metric == r.metric), None)
        if taken is not None:
            # IPv4 keys routes by (prefix, TOS, metric): the kernel answers EEXIST.
            raise SimulationError(f"a default route with metric {r.metric} exists (dev {taken.dev})")
        return replace(state, default_routes=(*state.default_routes, r))
    if op == "route_delete":
        r = args["route"]
        keep = tuple(x for x in state.default_routes if (x.dev, x.gateway, x.metric) != (r.dev, r.gateway, r.metric))
        if len(keep) == len(state.default_routes):
            raise SimulationError(f"no route {r}")
        return replace(state, default_routes=keep)
    if op == "sysctl_set":
        return replace(state, sysctls=tuple(sorted({**state.sysctls_dict, args["key"]: str(args["value"])}.items())))
    raise SimulationError(f"unknown op {op!r}")


@dataclass
class Plan:
    """Ordered operations ``(op, args)`` that take one state to another."""

    steps: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def add(self, op: str, **args: Any) -> None:
        self.steps.append((op, args))

    def __len__(self) -> int:
        return len(self.steps)


def _route_key(r: Route) -> tuple[str, str | None, int]:
    return (r.dev, r.gateway, r.metric)


def _plan_routes(plan: Plan, current: tuple[Route, ...], desired: tuple[Route, ...]) -> None:
    """Route steps: additions first, deletions last, so a default route exists at every step.

    IPv4 keys a route by (prefix, TOS, metric), so a second default route with a
    metric already in use is refused (EEXIST). A route in the way that is not wanted
    is first moved to a free temporary metric (added there, then deleted), which
    lets two interfaces swap metrics.
    """
    sim = list(current)
    want = {_route_key(r) for r in desired}
    for r in desired:
        if _route_key(r) in {_route_key(x) for x in sim}:
            continue
        blocker = next((x for x in sim if x.metric == r.metric and _route_key(x) not in want), None)
        if blocker is not None:
            free = max([x.metric for x in sim] + [x.metric for x in desired]) + 1
            temp = replace(blocker, metric=free)
            plan.add("route_add", route=temp)
            plan.add("route_delete", route=blocker)
            sim = [temp if x is blocker else x for x in sim]
        plan.add("route_add", route=r)
        sim.append(r)
    for x in sim:
        if _route_key(x) not in want:
            plan.add("route_delete", route=x)


def _no_backup(e: Endpoint) -> set[str]:
    return set(e.flags) - {"backup"}


def diff(current: NetState, desired: NetState) -> Plan:
    """Operations from ``current`` to ``desired`` on the managed slice.

    Order: endpoint deletions (frees ids and addresses), endpoint changes and
    additions, limits, route *additions before deletions* (so a default route
    exists at every step), sysctls. Only keys present in ``desired.limits`` and
    ``desired.sysctls`` are touched.
    """
    plan = Plan()
    cur_eps = {e.id: e for e in current.endpoints}
    want_eps = {e.id: e for e in desired.endpoints}
    for eid, e in cur_eps.items():
        w = want_eps.get(eid)
        if (
            w is None
            or (w.address, w.dev) != (e.address, e.dev)
            or set(w.flags) - {"backup"} != set(e.flags) - {"backup"}
        ):
            plan.add("endpoint_delete", id=eid)
    for eid, w in want_eps.items():
        have = cur_eps.get(eid)
        if (
            have is not None
            and (w.address, w.dev) == (have.address, have.dev)
            and set(w.flags) - {"backup"} == set(have.flags) - {"backup"}
        ):
            if ("backup" in w.flags) != ("backup" in have.flags):
                plan.add("endpoint_set_backup", id=eid, backup="backup" in w.flags)
        else:
            plan.add("endpoint_add", endpoint=w)
    cur_limits = current.limits_dict
    want_limits = desired.limits_dict
    if any(cur_limits.get(k) != v for k, v in want_limits.items()):
        plan.add("limits_set", limits=want_limits)
    _plan_routes(plan, current.default_routes, desired.default_routes)
    cur_sys = current.sysctls_dict
    for k, v in desired.sysctls_dict.items():
        if cur_sys.get(k) != v:
            plan.add("sysctl_set", key=k, value=v)
    return plan
