"""The applier: turns a recommendation into kernel state, journalled and reversible.

What it sets (README "The device agent and the MPTCP testbed"; issue 5):

* **Initial subflow.** Upstream Linux MPTCP opens the first subflow where routing
  sends the connection, so the recommended interface's default route gets the
  lowest metric (``primary_metric``) and the others ``secondary_metric + k``.
  Routes are changed by *adding the new route before deleting the old one*, and a
  deletion that would leave no default route is refused (:class:`ApplyError`).
* **Endpoints and limits.** Each managed interface's IPv4 address becomes an MPTCP
  endpoint with ``endpoint_flags`` (``subflow`` by default; ``signal``/``fullmesh``
  on request), plus ``backup`` when its scheduler weight is below
  ``backup_weight_threshold`` (on kernels with only the ``default`` scheduler the
  weights are advisory; ``backup`` is how a low weight reaches the kernel,
  RFC 8684 §3.3.8 MP_PRIO). The primary interface is never marked backup.
* **MLPM steering** (issue 20, ``follow_mlpm``). The service's MLPM advice is applied the
  way a mainline kernel can (:func:`mlpm_subflow_set`): the ``prioritised_subflow`` carries
  the initial subflow (lowest route metric) and stays a non-backup endpoint; every other
  interface whose weight is below ``backup_weight_threshold`` becomes ``backup``, the rest
  stay active. Mainline's only scheduler (``net.mptcp.scheduler = default``,
  net/mptcp/protocol.c ``mptcp_subflow_get_send``) sends each packet on the non-backup
  subflow with the shortest estimated linger time and falls back to backup subflows only
  when no non-backup one is usable, so the subflow *set* (which are non-backup) is all a
  weight can change. Putting *one packet* (MLPM's prioritised packet) on a chosen subflow,
  or splitting by weight, needs a packet scheduler the kernel does not ship: the BPF
  ``struct_ops`` MPTCP schedulers exist only out of tree (mptcp_net-next ``export`` branch,
  e.g. ``bpf_burst``, ``bpf_red``), not in 6.18. The agent sends fresh ``subflow_histories``
  every step, so the set is re-evaluated as histories change (the apply is idempotent).
* **ATSSS steering rule** (issue 19). When the recommendation carries ``steering``, its
  match-all rule decides instead: the initial-subflow access gets the lowest route metric
  and Active-Standby's standby / Priority-based's low-priority access is ``backup``;
  Smallest Delay, Load-Balancing and Redundant keep both endpoints active
  (:data:`edgepath_agent.safety.STEERING_BACKUP_MODES` says why).
  ``ip mptcp limits`` are set to ``limits``.
* **Upstream guard's override.** The interfaces the guard moved the initial subflow off for
  lack of upstream connectivity (the recommendation's ``demoted``,
  :meth:`edgepath_agent.messages.Recommendation.with_primary`) are ``backup`` whatever the
  steering mode, MLPM weights or plain weights say: mainline's default scheduler
  (net/mptcp/protocol.c ``mptcp_subflow_get_send``) would otherwise keep sending on their
  non-backup subflows. They stay endpoints (the kernel can fail back to them), and the next
  recommendation applied without the override gives them its own flags again.
* **Congestion control** via ``net.ipv4.tcp_congestion_control`` of this network
  namespace, only with an algorithm in ``tcp_allowed_congestion_control`` (a
  namespace cannot select what the host has not allowed); the recommended one if
  allowed, else the first allowed of the profile's fallback list.

**Only typed, validated fields are applied.** Before anything is read into a plan,
:func:`edgepath_agent.safety.safe_decision` checks the recommendation against this
device (interfaces and addresses its own, sysctls allowlisted, congestion-control
names well formed); the resulting plan is checked again (endpoint addresses on
their interface, sysctl keys/values allowlisted). A refused recommendation raises
:class:`RejectedRecommendation` before any change: the journal is not begun and
the configuration stays as it is.

Every operation goes through the backend's ops table and into the :class:`Journal`;
:meth:`Applier.rollback` restores the journal's snapshot exactly (endpoint ids,
flags, limits, routes, sysctls).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from edgepath_agent import safety
from edgepath_agent.applier import commands
from edgepath_agent.applier.backend import Backend, BackendError
from edgepath_agent.applier.journal import Journal
from edgepath_agent.applier.state import Endpoint, NetState, Plan, Route, SimulationError, diff, simulate
from edgepath_agent.messages import Recommendation

log = logging.getLogger(__name__)

CC_SYSCTL = "net.ipv4.tcp_congestion_control"

#: Fallback order per profile. Coupled CCs (RFC 6356 LIA, OLIA, BALIA, wVegas) only
#: exist in out-of-tree MPTCP kernels; upstream uses uncoupled CCs per subflow.
CC_PROFILES: dict[str, tuple[str, ...]] = {
    "throughput": ("bbr", "cubic", "reno"),
    "latency": ("bbr", "vegas", "cubic", "reno"),
    "coupled": ("olia", "balia", "lia", "wvegas", "cubic", "reno"),
    "default": ("cubic", "reno"),
}


class ApplyError(RuntimeError):
    """A recommendation could not be applied (the state may be partly changed: roll back)."""


class RejectedRecommendation(ApplyError):
    """A recommendation refused by the safety checks; nothing was changed (keep the current configuration)."""


class RestoreIncomplete(ApplyError):
    """A rollback ran every restore step it could, and some failed: the state is partly restored.

    The journal (its snapshot) is kept, so ``edgepath-agent rollback`` can retry. ``failed`` holds one line per
    failed step (the command, or the step, and why); ``skipped`` one per step skipped because the device it names
    no longer exists (:func:`step_device`); ``steps`` is how many steps the rollback had.
    """

    def __init__(self, failed: Sequence[str], steps: int, skipped: Sequence[str] = ()) -> None:
        self.failed = tuple(failed)
        self.steps = steps
        self.skipped = tuple(skipped)
        message = (
            f"{len(self.failed)} of {steps} restore step(s) failed (the others ran; the journal is kept for "
            f"`edgepath-agent rollback`): " + "; ".join(self.failed)
        )
        if self.skipped:
            message += f" ({len(self.skipped)} skipped: " + "; ".join(self.skipped) + ")"
        super().__init__(message)


@dataclass(frozen=True)
class Restored:
    """What a completed restore did: ``steps`` restore steps, of which ``skipped`` (one line each,
    ``"<step> (device NAME no longer exists)"``) were skipped because the device they name was deleted."""

    steps: int
    skipped: tuple[str, ...] = ()


def step_device(op: str, args: Mapping[str, Any]) -> str | None:
    """The network device a step of the ops table names: a route's ``dev`` (``route_add``, ``route_delete``), an
    added endpoint's ``dev`` (``endpoint_add``); ``None`` for the steps that name none (``limits_set``,
    ``sysctl_set``, and ``endpoint_delete``/``endpoint_set_backup``, which name the endpoint by id) (pure).

    A restore step that failed and names a device that no longer exists is skipped, not failed
    (:meth:`Applier.rollback`): deleting a device deletes its routes and addresses with it, and neither an
    ``ip route`` nor an ``ip mptcp endpoint add … dev`` naming it can run. The MPTCP endpoints of a deleted device
    are kept by the kernel (Linux 6.18: ``ip mptcp endpoint show`` lists them with ``dev ifN``, the deleted
    device's index); they are deleted or changed by id, steps that name no device, so their restore runs and
    fails as any other.
    """
    if op in ("route_add", "route_delete"):
        return str(args["route"].dev)
    if op == "endpoint_add":
        dev = args["endpoint"].dev
        return str(dev) if dev else None
    return None


class RouteMetricConflict(ApplyError):
    """A default route of an interface the applier does not manage has a metric the applier gives a managed route:
    its route changes would collide with it (:meth:`Applier.check_route_metrics`). The message names the route,
    its interface and the setting to change."""


def metric_conflicts(state: NetState, config: ApplierConfig) -> list[tuple[Route, str]]:
    """``(route, setting)`` for each default route in ``state`` whose interface ``config`` does not manage and
    whose metric is one the applier gives a managed interface's default route: ``primary_metric``, or
    ``secondary_metric`` + 0 … n-2 for n managed interfaces (pure)."""
    managed = set(config.interfaces)
    ours = {config.secondary_metric + k: "secondary_metric" for k in range(max(0, len(managed) - 1))}
    ours[config.primary_metric] = "primary_metric"
    return [(r, ours[r.metric]) for r in state.default_routes if r.dev not in managed and r.metric in ours]


def check_metric_conflicts(
    read_state: Callable[[], NetState],
    config: ApplierConfig,
    netns: str | None,
    collision: str,
    read_ipv6_routes: Callable[[], Sequence[Route]] | None = None,
) -> None:
    """Refuse the state ``read_state()`` returns when :func:`metric_conflicts` finds a default route in the way (the
    start check of the ``command``/``netlink`` applier and of the NetworkManager backend); ``collision`` says what
    would happen. ``read_ipv6_routes``: the IPv6 default routes, checked the same way after the IPv4 ones, for a
    backend that sets the IPv6 metrics too (the NetworkManager backend's ``ipv6.route-metric``; ``None``: the
    applier manages IPv4 routes only). Routes that cannot be read are logged and not checked (the first apply
    reads them again and reports its error).

    Raises
    ------
    RouteMetricConflict
        For the first such route: the route (``IPv6`` named when it is one), its interface, the metric setting
        (``primary_metric`` or ``secondary_metric``) and its value, ``collision``, and what to change.
    """
    try:
        state = read_state()
        ipv6 = NetState(default_routes=tuple(read_ipv6_routes())) if read_ipv6_routes is not None else NetState()
    except Exception as exc:  # BackendError, a namespace gone, netlink errors
        log.warning("default routes not checked for the agent's metrics: reading them failed: %s", exc)
        return
    conflicts = [(r, s, "") for r, s in metric_conflicts(state, config)]
    conflicts += [(r, s, "IPv6 ") for r, s in metric_conflicts(ipv6, config)]
    if not conflicts:
        return
    route, setting, family = conflicts[0]
    where = f" in network namespace {netns}" if netns else ""
    via = f" via {route.gateway}" if route.gateway else ""
    used = (
        f"primary_metric = {config.primary_metric}, the primary path's"
        if setting == "primary_metric"
        else f"secondary_metric = {config.secondary_metric}, the other managed interfaces' "
        f"{config.secondary_metric}–{config.secondary_metric + len(config.interfaces) - 2}"
    )
    raise RouteMetricConflict(
        f"the {family}default route{via} dev {route.dev} metric {route.metric}{where} is not managed by the agent "
        f"(interfaces: {', '.join(config.interfaces)}) but has the metric the agent gives its own default "
        f"routes ({used}): {collision}; set {setting} in the settings to a metric no other default route uses, or "
        f"move {route.dev}'s route to another metric"
    )


def choose_cc(recommended: str | Sequence[str] | None, profile: str, allowed: Sequence[str]) -> str | None:
    """Congestion control to set, or ``None`` to leave it.

    The first recommended algorithm that ``allowed`` lists, else the first allowed
    one of ``CC_PROFILES[profile]``.

    Raises
    ------
    ValueError
        For an unknown profile.
    """
    if profile not in CC_PROFILES:
        raise ValueError(f"unknown congestion-control profile {profile!r}; choose one of {', '.join(CC_PROFILES)}")
    wanted = [recommended] if isinstance(recommended, str) else list(recommended or [])
    for cc in [*wanted, *CC_PROFILES[profile]]:
        if cc and cc in allowed:
            return cc
    return None


def scheduler_weights(recommendation: Mapping[str, Any]) -> dict[str, float]:
    """``{interface: weight}`` from a recommendation, ``{}`` when it carries none.

    Reads the service's MLPM advice (``scheduler.weights``: a list of
    ``{"interface", "weight", ...}``); also accepts ``scheduler_weights`` as such a
    list or as a mapping ``{"wlan0": 0.8, ...}``.
    """
    raw: Any = None
    scheduler = recommendation.get("scheduler")
    if isinstance(scheduler, Mapping):
        raw = scheduler.get("weights")
    if not raw:
        raw = recommendation.get("scheduler_weights")
    if isinstance(raw, Mapping):
        return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float))}
    out: dict[str, float] = {}
    for item in raw or []:
        name = item.get("interface")
        if name is not None and item.get("weight") is not None:
            out[str(name)] = float(item["weight"])
    return out


def subflow_roles(decision: safety.SafeDecision, config: ApplierConfig) -> tuple[str, tuple[str, ...] | None]:
    """``(initial-subflow interface, backup interfaces)`` of a checked recommendation, for every backend (pure).

    A steering rule (issue 19) puts the initial subflow on its initial-subflow access and makes its standby /
    low-priority access ``backup``; with ``config.follow_mlpm`` and MLPM advice, :func:`mlpm_subflow_set` decides
    instead; otherwise ``decision.primary``, and ``None`` for the backup set: the weights below
    ``backup_weight_threshold`` decide (:func:`desired_state`). The upstream guard's ``demoted`` interfaces are
    added by the caller (:func:`desired_state`'s ``demoted``).
    """
    steer = decision.steering
    primary = steer.initial if steer is not None else decision.primary
    backup = tuple(steer.backup) if steer is not None else None
    if config.follow_mlpm and (decision.weights or decision.prioritised):
        primary, backup = mlpm_subflow_set(
            decision.weights, decision.prioritised, config.backup_weight_threshold, decision.primary
        )
    return primary, backup


def mlpm_subflow_set(
    weights: Mapping[str, float], prioritised: str | None, threshold: float, fallback_primary: str
) -> tuple[str, tuple[str, ...]]:
    """``(initial-subflow interface, backup interfaces)`` for MLPM's advice on a mainline kernel (pure).

    The initial subflow goes on ``prioritised`` (else the highest weight, else
    ``fallback_primary``); every other interface with a weight below ``threshold`` is
    ``backup`` (RFC 8684 §3.3.8 MP_PRIO: used only when no non-backup subflow is); the
    prioritised one never is. Weights are MLPM's per-subflow shares in [0, 1]
    (Silva et al., HPCS 2020, Eq. 2–4 normalised).
    """
    initial = prioritised or (max(sorted(weights), key=lambda k: weights[k]) if weights else fallback_primary)
    backup = tuple(sorted(n for n, w in weights.items() if n != initial and w < threshold))
    return initial, backup


def recommended_cc(recommendation: Mapping[str, Any]) -> list[str]:
    """Congestion-control algorithms a recommendation advises, in order of preference.

    From the service's advice (``congestion``): the MPTCP-level coupled algorithm
    (only out-of-tree kernels have one), then the subflow-level one; a plain
    ``congestion_control`` string is accepted too.
    """
    advice = recommendation.get("congestion")
    out: list[str] = []
    if isinstance(advice, Mapping):
        out += [str(advice[k]) for k in ("mptcp_level", "subflow_level") if advice.get(k)]
    if recommendation.get("congestion_control"):
        out.append(str(recommendation["congestion_control"]))
    return out


def existing_devices(backend: Backend) -> set[str] | None:
    """The network devices that exist where ``backend`` works (its ``read_interfaces()``); ``None`` when reading them
    fails (logged): whether a device is gone cannot be told then."""
    try:
        return set(backend.read_interfaces())
    except Exception as exc:  # BackendError, a namespace gone, netlink errors
        log.warning("cannot tell whether the devices of failed restore steps still exist: %s", exc)
        return None


@dataclass
class ApplierConfig:
    """What the applier manages and how (see module docstring)."""

    interfaces: Sequence[str] = ("wlan0", "wwan0")
    endpoint_flags: tuple[str, ...] = ("subflow",)
    limits: dict[str, int] = field(default_factory=lambda: {"subflows": 2, "add_addr_accepted": 2})
    primary_metric: int = 10
    secondary_metric: int = 20
    backup_weight_threshold: float = 0.2
    cc_profile: str = "default"
    manage_cc: bool = True
    manage_endpoints: bool = True
    #: Apply MLPM's ``prioritised_subflow`` and weights (:func:`mlpm_subflow_set`) instead of the steering rule.
    follow_mlpm: bool = False

    @property
    def sysctl_keys(self) -> tuple[str, ...]:
        return (CC_SYSCTL,) if self.manage_cc else ()


def desired_state(
    current: NetState,
    addresses: Mapping[str, Sequence[str]],
    config: ApplierConfig,
    primary: str,
    weights: Mapping[str, float] | None = None,
    cc: str | None = None,
    backup: Sequence[str] | None = None,
    demoted: Sequence[str] = (),
) -> NetState:
    """The managed state a recommendation asks for (pure).

    ``backup``: the interfaces whose endpoints are ``backup`` (from the steering rule, issue 19);
    None = by ``weights`` below ``backup_weight_threshold``. ``demoted`` (the upstream guard's override) are
    ``backup`` in either case. ``primary`` is never ``backup``.

    Raises
    ------
    ApplyError
        When ``primary`` is not managed or has no default route to re-rank.
    """
    weights = weights or {}
    managed = list(config.interfaces)
    if primary not in managed:
        raise ApplyError(f"primary path {primary!r} is not a managed interface ({', '.join(managed)})")
    routes: list[Route] = []
    seen: set[str] = set()
    secondaries = [n for n in managed if n != primary]
    for r in sorted(current.default_routes, key=lambda r: r.metric):
        if r.dev in managed and r.dev not in seen:
            seen.add(r.dev)
            metric = config.primary_metric if r.dev == primary else config.secondary_metric + secondaries.index(r.dev)
            routes.append(replace(r, metric=metric))
        else:
            routes.append(r)
    if primary not in seen:
        raise ApplyError(f"primary path {primary!r} has no default route to prefer")

    endpoints = list(current.endpoints)
    if config.manage_endpoints:
        by_addr = {e.address: e for e in endpoints}
        next_id = max([e.id for e in endpoints], default=0) + 1
        for name in managed:
            for addr in addresses.get(name, [])[:1]:
                flags = set(config.endpoint_flags)
                w = weights.get(name)
                if backup is not None:
                    if name in backup and name != primary:
                        flags.add("backup")
                elif name != primary and w is not None and w < config.backup_weight_threshold:
                    flags.add("backup")
                if name in demoted and name != primary:
                    flags.add("backup")
                old = by_addr.get(addr)
                if old is None:
                    new = Endpoint(next_id, addr, name, tuple(flags))
                    next_id += 1
                else:
                    new = replace(old, dev=name, flags=tuple(flags))
                endpoints = [e for e in endpoints if e.address != addr] + [new]
    sysctls = current.sysctls_dict
    if cc is not None and config.manage_cc:
        sysctls[CC_SYSCTL] = cc
    return NetState(
        endpoints=tuple(endpoints),
        limits=tuple(sorted(config.limits.items())) if config.manage_endpoints else current.limits,
        default_routes=tuple(routes),
        sysctls=tuple(sorted(sysctls.items())),
    )


@dataclass(frozen=True)
class Applied:
    """What one :meth:`Applier.apply` did."""

    primary: str
    congestion_control: str | None
    backup: tuple[str, ...]
    steps: int
    state: NetState


class Applier:
    """Applies recommendations through a backend, journalling every step.

    Parameters
    ----------
    backend
        Ops-table backend (:class:`~edgepath_agent.applier.backend.CommandBackend`, dry run, ...).
    journal
        Where the prior state and the steps are kept.
    config
        Managed interfaces, flags, metrics, thresholds, CC profile.
    allowed_cc
        ``tcp_allowed_congestion_control`` of the namespace (read by the kernel collector).
    """

    def __init__(
        self,
        backend: Backend,
        journal: Journal | None = None,
        config: ApplierConfig | None = None,
        allowed_cc: Sequence[str] = (),
    ) -> None:
        self.backend = backend
        self.journal = journal or Journal()
        self.config = config or ApplierConfig()
        self.allowed_cc = tuple(allowed_cc)
        self.last: Applied | None = None
        #: The restore steps the last :meth:`rollback` skipped, their device being gone (one line each).
        self.skipped: tuple[str, ...] = ()

    @property
    def changed_anything(self) -> bool:
        """True when this run applied something or the journal holds an earlier run's snapshot: a rollback would
        restore something."""
        return self.last is not None or self.journal.active

    @property
    def netns(self) -> str | None:
        """Network namespace the backend reads and changes (``None``: this process's own, or a backend that does not
        say: one without a ``netns`` attribute)."""
        netns = getattr(self.backend, "netns", None)
        return netns if isinstance(netns, str) else None

    def read_state(self) -> NetState:
        return self.backend.read_state(self.config.sysctl_keys)

    @staticmethod
    def own_interfaces(state: NetState, addresses: Mapping[str, Sequence[str]]) -> set[str]:
        """This device's interfaces as the backend sees them (with an address, a default route or an endpoint)."""
        return set(addresses) | {r.dev for r in state.default_routes} | {e.dev for e in state.endpoints if e.dev}

    def apply(
        self,
        recommendation: Recommendation | Mapping[str, Any],
        addresses: Mapping[str, Sequence[str]] | None = None,
    ) -> Applied:
        """Make the kernel state match ``recommendation`` (idempotent: no-op when it already does).

        Only the fields :func:`edgepath_agent.safety.safe_decision` validates are used.

        ``addresses`` (``{ifname: [IPv4 addresses of global scope]}``, the shape of the backend's
        ``read_addresses()``): the device's addresses as the agent's step read them (its link snapshot, which the
        request to the service was built from), so that the step does not dump them again; ``None``: read from the
        backend now. They become the MPTCP endpoints and are what the safety checks hold the recommendation to.

        Raises
        ------
        RejectedRecommendation
            When the safety checks refuse the recommendation (logged; nothing changed).
        ApplyError
            When the recommendation can't be applied or a command fails (the journal
            keeps the snapshot: call :meth:`rollback`).
        """
        current = self.read_state()
        if addresses is None:
            addresses = self.backend.read_addresses()
        decision_id = safety.decision_id_of(recommendation)
        try:
            decision = safety.safe_decision(
                recommendation, self.own_interfaces(current, addresses), self.allowed_cc, own_addresses=addresses
            )
        except safety.UnsafeDecision as exc:
            log.error(
                "refused decision %s: %s; configuration left unchanged",
                decision_id,
                exc,
                extra={"decision_id": decision_id},
            )
            raise RejectedRecommendation(f"refused decision {decision_id}: {exc}") from exc
        cc = (
            choose_cc(decision.congestion_control, self.config.cc_profile, self.allowed_cc)
            if self.config.manage_cc
            else None
        )
        primary, steer_backup = subflow_roles(decision, self.config)
        desired = desired_state(
            current, addresses, self.config, primary, decision.weights, cc, steer_backup, decision.demoted
        )
        plan = diff(current, desired)
        try:
            self._check_plan(plan, addresses)
        except safety.UnsafeDecision as exc:
            log.error(
                "refused decision %s (plan check): %s; configuration left unchanged",
                decision_id,
                exc,
                extra={"decision_id": decision_id},
            )
            raise RejectedRecommendation(f"refused decision {decision_id}: {exc}") from exc
        if len(plan):
            self.journal.begin(current, netns=self.netns, netns_known=hasattr(self.backend, "netns"))
            self._execute(plan, current)
        backup = tuple(sorted(e.dev or e.address for e in desired.endpoints if "backup" in e.flags))
        self.last = Applied(primary, desired.sysctls_dict.get(CC_SYSCTL), backup, len(plan), desired)
        return self.last

    def check_route_metrics(self) -> None:
        """Refuse a device where a default route the applier does not manage has a metric it would use.

        IPv4 keys a default route by its metric: the applier's ``route add`` at that metric would be refused
        (``File exists``), or, where routes are replaced, take the place of the operator's route. Checked at the
        agent's start, before anything is changed. IPv6 default routes are not checked: this applier adds, deletes
        and re-ranks IPv4 default routes only (:func:`~edgepath_agent.applier.commands.routes_show_default`).

        Raises
        ------
        RouteMetricConflict
            For the first such route: the route, its interface, the metric setting (``primary_metric`` or
            ``secondary_metric``) and its value, and what to change. A state that cannot be read is logged and
            not checked (the first apply reads it again and reports its error).
        """
        check_metric_conflicts(
            self.read_state,
            self.config,
            self.netns,
            "their changes would collide (the kernel keeps one default route per metric)",
        )

    def _check_plan(self, plan: Plan, addresses: Mapping[str, Sequence[str]]) -> None:
        """Second line of defence: every step names the device's own addresses and allowlisted sysctls.

        Raises
        ------
        edgepath_agent.safety.UnsafeDecision
            For the first step that does not.
        """
        for op, args in plan.steps:
            if op == "endpoint_add":
                ep = args["endpoint"]
                if ep.dev is not None:
                    safety.validate_interface_name(ep.dev)
                safety.check_own_address(ep.address, addresses, interface=ep.dev)
            elif op in ("route_add", "route_delete"):
                safety.validate_interface_name(args["route"].dev)
            elif op == "sysctl_set":
                allowed = self.allowed_cc if args["key"] == CC_SYSCTL else None
                safety.check_sysctl(args["key"], args["value"], allowed)

    def rollback(self) -> Plan:
        """Restore the journal's snapshot exactly; a no-op without one.

        Every step is attempted, also after one failed (a route or an endpoint on an interface that is gone must
        not keep the rest of the state from being restored). A failed step that names a device
        (:func:`step_device`) the backend's ``read_interfaces()`` no longer lists is *skipped*: the device was
        deleted (a USB modem unplugged, a VPN or veth gone), and its routes and addresses with it, so nothing of
        it is left to restore. Such steps are logged and listed in :attr:`skipped`
        (``"<command> (device NAME no longer exists)"``); with only those, the rollback is done and the journal
        cleared. A backend that cannot read its interfaces counts every failed
        step as failed.

        Raises
        ------
        RestoreIncomplete
            When one or more steps failed (the others ran; the journal is kept so the rollback can be retried);
            its ``skipped`` lists the steps skipped.
        ApplyError
            When the journal recorded another network namespace than the backend works in (nothing is
            touched), or when the current state cannot be read.
        """
        if self.journal.snapshot is None:
            return Plan()
        if self.journal.netns_recorded and hasattr(self.backend, "netns") and self.journal.netns != self.netns:
            recorded, here = (
                f"network namespace {n}" if n else "the host namespace" for n in (self.journal.netns, self.netns)
            )
            raise ApplyError(
                f"the journal's snapshot was taken in {recorded}, not in {here}: refusing to restore it here"
            )
        target = self.journal.snapshot
        try:
            current = self.read_state()
        except Exception as exc:  # BackendError, a namespace gone, netlink errors: the rollback can be retried
            raise ApplyError(f"reading the current state failed: {exc}") from exc
        # Touch only what the snapshot describes: keys it did not record stay as they are.
        plan = diff(current, target)
        failed, skipped = self._restore(plan, current)
        self.skipped = tuple(skipped)
        for step in skipped:
            # INFO: expected (the device is gone, nothing of it left), and `rollback` prints each on stdout (a WARNING
            # reached its stderr too, through logging's last-resort handler); the stop's status names them.
            log.info("restore step skipped: %s", step)
        if failed:
            raise RestoreIncomplete(failed, len(plan), skipped)
        self.journal.clear()
        self.last = None
        return plan

    def _restore(self, plan: Plan, state: NetState) -> tuple[list[str], list[str]]:
        """Run every step of ``plan`` (journalled), going on after a failure; ``(failed, skipped)``, one line per
        step that failed, and per failed step whose device no longer exists (:meth:`rollback`)."""
        ops = self.backend.ops
        failed: list[str] = []
        skipped: list[str] = []
        interfaces: set[str] | None = None  # read after the first failure of a step naming a device
        for op, args in plan.steps:
            argv = commands.argv_for(op, args)
            try:
                after = simulate(state, op, args)
            except SimulationError:  # an earlier step failed, so the model is off here: the kernel will say
                after = state
            if op == "route_delete" and not after.default_routes:
                why = "refused: would remove the last default route"
                self.journal.record(op, args, None, False, why)
                failed.append(f"{' '.join(argv)}: {why}")
                continue
            try:
                ops[op](**args)
            except Exception as exc:  # BackendError, netlink errors, a device gone: the next steps still run
                device = step_device(op, args)
                if device is not None and interfaces is None:
                    interfaces = existing_devices(self.backend)
                if device is not None and interfaces is not None and device not in interfaces:
                    self.journal.record(op, args, argv, False, f"skipped: device {device} no longer exists ({exc})")
                    skipped.append(f"{' '.join(argv)} (device {device} no longer exists)")
                    continue
                self.journal.record(op, args, argv, False, str(exc))
                why = str(exc).strip() or type(exc).__name__
                failed.append(why if isinstance(exc, BackendError) else f"{' '.join(argv)}: {why}")  # names argv
                continue
            self.journal.record(op, args, argv, True)
            state = after
        return failed, skipped

    def _execute(self, plan: Plan, state: NetState) -> None:
        ops = self.backend.ops
        for op, args in plan.steps:
            try:
                after = simulate(state, op, args)
            except SimulationError as exc:  # the kernel would refuse it (EEXIST/ENOENT): nothing run
                self.journal.record(op, args, None, False, f"refused: {exc}")
                raise ApplyError(f"{op} refused before running it: {exc}") from exc
            if op == "route_delete" and not after.default_routes:
                self.journal.record(op, args, None, False, "refused: would remove the last default route")
                raise ApplyError(f"refusing to delete {args['route']}: it is the last default route")
            argv = commands.argv_for(op, args)
            try:
                ops[op](**args)
            except Exception as exc:
                self.journal.record(op, args, argv, False, str(exc))
                raise ApplyError(f"{op} failed: {exc}") from exc
            self.journal.record(op, args, argv, True)
            state = after
