"""Applier through NetworkManager's D-Bus API, for devices where NetworkManager manages the interfaces.

Instead of rewriting routes and MPTCP endpoints behind NetworkManager's back (it would
undo them at the next DHCP renewal), the agent changes the *applied* connection of each
managed device and asks NetworkManager to reapply it:

* ``org.freedesktop.NetworkManager.Device.GetAppliedConnection(0)`` → settings + version id;
* set ``ipv4.route-metric`` and ``ipv6.route-metric`` (the initial subflow's interface:
  ``primary_metric``, the others ``secondary_metric + k``: the initial subflow follows the lowest metric)
  and, on NetworkManager ≥ 1.40, ``connection.mptcp-flags`` (``enabled`` + the
  configured endpoint flags, plus ``backup`` for the interfaces the ``command`` applier makes backup); both
  chosen as that applier chooses them (:func:`~edgepath_agent.applier.core.subflow_roles`): a steering rule's
  initial-subflow access and its standby / low-priority access as ``backup``, or with ``follow_mlpm`` MLPM's
  prioritised subflow and the weights below ``backup_weight_threshold``, else ``primary_path`` and those weights;
  and the paths the upstream guard demoted (the recommendation's ``demoted``) ``backup`` in every case;
  ``NMMptcpFlags`` values from libnm's nm-dbus-interface.h);
* ``Device.Reapply(settings, version_id, 0)``: NetworkManager rewrites the device's
  routes and MPTCP endpoints itself.

Only the applied connection changes, never the saved profile, so the restore is
``Reapply`` with an empty connection (NetworkManager re-applies the profile as saved) for
each device changed: on SIGTERM, or after a crash through ``edgepath-agent rollback``; every restore step is
attempted, also after one failed, and the failed ones are raised together
(:class:`~edgepath_agent.applier.core.RestoreIncomplete`, the record kept for a retry). A device deleted meanwhile
(a USB modem unplugged) is *skipped*, not failed: its applied connection went with it, and its saved profile, which
the agent never changes, is what NetworkManager activates when the device comes back, so there is nothing left to
restore (``Reapply`` cannot run on a device NetworkManager no longer has; retrying it would fail until the device
returns, and then only redo what NetworkManager already did). A device that exists and whose profile cannot be
reapplied still fails. The namespace's
``net.ipv4.tcp_congestion_control`` is not NetworkManager's: it is set (and restored) with sysctl as by the command
backend. ``ip mptcp limits`` are left to NetworkManager and the kernel.

The record (JSON, replaced atomically, written *before* each change it describes) is::

    {"backend": "networkmanager", "netns": NAME or null, "interfaces": [IFNAME, ...],
     "sysctls": {"net.ipv4.tcp_congestion_control": ORIGINAL}}

``interfaces``: the devices whose applied connection changed; ``sysctls``: the value each sysctl had before the
agent's first change of it (as the command backend's snapshot keeps it); ``netns``: where those were read and are
restored. Records written before ``netns``/``sysctls`` were kept (``{"backend", "interfaces"}``) still roll back:
their profiles are reapplied, no sysctl is touched (none was recorded), in the namespace ``rollback --netns``
names. It is the ``journal`` file the ``command`` backend would use: a start with this backend while it holds that
backend's snapshot is refused (:func:`~edgepath_agent.applier.journal.check_for_run`; here before writing, as a
backstop), and an earlier run's record that was not rolled back is kept: its interfaces are restored with this
run's, and its original sysctl values stay the ones restored (this run's starting values are already changed ones).

Limits (stated): IPv4/IPv6 route metrics and MPTCP flags only; a device must have an
active NetworkManager connection (an externally configured device is refused, naming it);
the agent's user needs polkit's ``org.freedesktop.NetworkManager.network-control`` for
``Reapply`` (root has it);
tested against NetworkManager 1.42.4 in a network namespace (see
tests/agent/netns/test_agent_networkmanager_netns.py), which skips where NetworkManager is
not installed.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgepath_agent import safety
from edgepath_agent.applier.backend import Backend, CommandBackend
from edgepath_agent.applier.core import (
    CC_SYSCTL,
    Applied,
    ApplierConfig,
    ApplyError,
    RejectedRecommendation,
    Restored,
    RestoreIncomplete,
    check_metric_conflicts,
    choose_cc,
    existing_devices,
    subflow_roles,
)
from edgepath_agent.applier.journal import Journal, JournalError, other_backend_record
from edgepath_agent.applier.state import NetState, Route
from edgepath_agent.messages import Recommendation

log = logging.getLogger(__name__)

NM = "org.freedesktop.NetworkManager"
NM_PATH = "/org/freedesktop/NetworkManager"
NM_DEVICE = "org.freedesktop.NetworkManager.Device"

#: NMMptcpFlags (libnm-core-public/nm-dbus-interface.h, NetworkManager ≥ 1.40).
MPTCP_FLAGS = {"enabled": 0x2, "signal": 0x10, "subflow": 0x20, "backup": 0x40, "fullmesh": 0x80}


def _version_tuple(version: str | None) -> tuple[int, ...]:
    parts = []
    for piece in (version or "0").split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def mptcp_flags_value(flags: Sequence[str]) -> int:
    """``connection.mptcp-flags`` for endpoint ``flags`` (always with ``enabled``).

    Raises
    ------
    ValueError
        For a flag NetworkManager has no bit for.
    """
    value = MPTCP_FLAGS["enabled"]
    for flag in flags:
        if flag not in MPTCP_FLAGS:
            raise ValueError(f"MPTCP endpoint flag {flag!r} has no NetworkManager equivalent")
        value |= MPTCP_FLAGS[flag]
    return value


@dataclass(frozen=True)
class _Device:
    interface: str
    path: str


class NetworkManagerApplier:
    """Same interface as :class:`~edgepath_agent.applier.core.Applier` (``apply``, ``rollback``, ``last``).

    Parameters
    ----------
    config
        Managed interfaces, metrics, endpoint flags, backup threshold, CC profile.
    bus_address
        The system bus (default: ``DBUS_SYSTEM_BUS_ADDRESS`` or the standard socket).
    journal_path
        Where the backend, the changed interfaces and the original sysctl values are recorded for a crash restore
        (``None``: not kept; the module docstring gives the record). An earlier run's record there (not rolled
        back) is taken over: its interfaces count as changed, its original sysctl values are kept.
    netns
        Network namespace of the interfaces (addresses and the CC sysctl are read/set there).
    allowed_cc
        ``tcp_allowed_congestion_control`` of the namespace.
    timeout_s
        Per D-Bus call, s.
    """

    def __init__(
        self,
        config: ApplierConfig,
        bus_address: str | None = None,
        journal_path: Path | None = None,
        netns: str | None = None,
        allowed_cc: Sequence[str] = (),
        timeout_s: float = 5.0,
    ) -> None:
        from edgepath_agent.netmanager import system_bus_address

        self.config = config
        self.bus_address = bus_address or system_bus_address()
        self.journal_path = journal_path
        self.allowed_cc = tuple(allowed_cc)
        self.timeout_s = timeout_s
        self.netns = netns
        backend = CommandBackend(netns=netns)
        self.backend: Backend = backend  # read-only addresses, and the CC sysctl
        #: The IPv6 default routes of ``netns``, for :meth:`check_route_metrics` (``ipv6.route-metric`` is set too).
        self.read_ipv6_routes: Callable[[], Sequence[Route]] = backend.read_ipv6_default_routes
        self.last: Applied | None = None
        #: The restore steps the last :meth:`rollback` skipped, their device being gone (one line each).
        self.skipped: tuple[str, ...] = ()
        earlier = journal_backend(journal_path) if journal_path is not None else None
        #: Interfaces whose applied connection this agent changed (and an earlier run's, from its record).
        self.changed: set[str] = {str(n) for n in (earlier or {}).get("interfaces", [])}
        #: ``{sysctl: value before the agent's first change}`` (an earlier run's, from its record, included).
        self.original_sysctls: dict[str, str] = record_sysctls(earlier) if earlier is not None else {}
        #: Where :attr:`original_sysctls` were read, and are restored (an earlier run's may differ from ``netns``).
        self._sysctls_netns: str | None = (earlier or {}).get("netns") if self.original_sysctls else self.netns

    # --- D-Bus -----------------------------------------------------------------------------------------------
    def _call(self, conn: Any, msg: Any) -> Any:
        from jeepney import MessageType

        reply = conn.send_and_get_reply(msg, timeout=self.timeout_s)
        if reply.header.message_type == MessageType.error:
            raise ApplyError(f"NetworkManager refused {msg.header.fields.get(3)}: {reply.body}")
        return reply.body

    def _connect(self) -> Any:
        from jeepney.io.blocking import open_dbus_connection

        try:
            return open_dbus_connection(self.bus_address, auth_timeout=self.timeout_s)
        except (OSError, ValueError) as exc:
            raise ApplyError(f"system bus {self.bus_address}: {exc}") from exc

    def _device(self, conn: Any, interface: str) -> _Device:
        from jeepney import DBusAddress, new_method_call

        nm = DBusAddress(NM_PATH, bus_name=NM, interface=NM)
        (path,) = self._call(conn, new_method_call(nm, "GetDeviceByIpIface", "s", (interface,)))
        return _Device(interface, str(path))

    def _version(self, conn: Any) -> str | None:
        from jeepney import DBusAddress, Properties

        try:
            return str(
                self._call(conn, Properties(DBusAddress(NM_PATH, bus_name=NM, interface=NM)).get("Version"))[0][1]
            )
        except ApplyError:
            return None

    def _applied(self, conn: Any, device: _Device) -> tuple[dict[str, dict[str, Any]], int]:
        from jeepney import DBusAddress, new_method_call

        addr = DBusAddress(device.path, bus_name=NM, interface=NM_DEVICE)
        try:
            settings, version_id = self._call(conn, new_method_call(addr, "GetAppliedConnection", "u", (0,)))
        except ApplyError as exc:
            raise ApplyError(
                f"{device.interface} has no active NetworkManager connection to change ({exc}); "
                "activate a profile on it or use another backend"
            ) from exc
        return settings, int(version_id)

    def _reapply(self, conn: Any, device: _Device, settings: Mapping[str, Any], version_id: int) -> None:
        from jeepney import DBusAddress, new_method_call

        addr = DBusAddress(device.path, bus_name=NM, interface=NM_DEVICE)
        self._call(conn, new_method_call(addr, "Reapply", "a{sa{sv}}tu", (dict(settings), version_id, 0)))

    # --- applier interface ----------------------------------------------------------------------------------
    def read_state(self) -> NetState:
        return self.backend.read_state(self.config.sysctl_keys)

    @property
    def changed_anything(self) -> bool:
        """True when this run applied something or the record names devices or sysctls changed (by this run or an
        earlier one): a rollback would restore something."""
        return self.last is not None or bool(self.changed) or bool(self.original_sysctls)

    def check_route_metrics(self) -> None:
        """Refuse a device where a default route of an interface the agent does not manage has a metric this backend
        gives a managed connection (``ipv4.route-metric`` and ``ipv6.route-metric``: ``primary_metric``,
        ``secondary_metric`` + k), IPv4 or IPv6.

        NetworkManager does not resolve that collision: it adds the connection's default route beside the other one.
        IPv4 keeps both at one metric, and the route added first, the other interface's, keeps carrying the
        traffic; IPv6 merges them into one multipath route (net/ipv6/ip6_fib.c ``fib6_add_rt2node``: an appended
        route with a gateway, not one learnt from a router advertisement, joins the same-metric route as a
        sibling), and each new flow is hashed to one of its next hops (net/ipv6/route.c ``fib6_select_path``), so
        part of them leave on the other interface. Either way the primary path the agent applies would not be the
        primary. Checked at the agent's start, before any connection changes (as
        :meth:`~edgepath_agent.applier.core.Applier.check_route_metrics`, which checks IPv4 only: that backend
        changes no IPv6 route).

        Raises
        ------
        RouteMetricConflict
            For the first such route (IPv4 first): the route, its interface, the metric setting and its value, and
            what to change. Routes that cannot be read are logged and not checked (the first apply reports its
            error).
        """
        check_metric_conflicts(
            lambda: self.backend.read_state(()),
            self.config,
            self.netns,
            "NetworkManager would add the connection's default route beside it, and that one would keep carrying "
            "traffic (IPv4: all of it, being added first; IPv6: the flows hashed to it, both being merged into one "
            "multipath route)",
            self.read_ipv6_routes,
        )

    def apply(
        self,
        recommendation: Recommendation | Mapping[str, Any],
        addresses: Mapping[str, Sequence[str]] | None = None,
    ) -> Applied:
        """Apply the primary path (route metrics), MPTCP flags and congestion control through NetworkManager.

        ``addresses``: as for :meth:`~edgepath_agent.applier.core.Applier.apply` (the step's snapshot; ``None``:
        read now).

        Raises
        ------
        RejectedRecommendation
            When the safety checks refuse the recommendation (nothing changed).
        ApplyError
            When NetworkManager refuses a change or a device has no active connection.
        JournalError
            When the journal cannot be written, holds the ``command``/``netlink`` backend's snapshot, or (with
            ``manage_cc``) an earlier run's original sysctl values of another network namespace (nothing changed).
        """
        if addresses is None:
            addresses = self.backend.read_addresses()
        decision_id = safety.decision_id_of(recommendation)
        try:
            decision = safety.safe_decision(
                recommendation, set(self.config.interfaces), self.allowed_cc, own_addresses=addresses
            )
        except safety.UnsafeDecision as exc:
            log.error("refused decision %s: %s", decision_id, exc, extra={"decision_id": decision_id})
            raise RejectedRecommendation(f"refused decision {decision_id}: {exc}") from exc
        if self.config.manage_cc and self._sysctls_netns != self.netns:  # before anything changes
            raise JournalError(
                f"journal {self.journal_path} holds sysctl values an earlier run changed in "
                f"{_where(self._sysctls_netns)}, not in {_where(self.netns)}, where this run sets them (the rollback "
                f"would restore those and leave these changed): restore them first with `edgepath-agent rollback "
                f"--journal {self.journal_path}`, then start the agent again"
            )
        managed = list(self.config.interfaces)
        # the initial subflow and the backup set as the command/netlink applier takes them (steering rule, MLPM)
        primary, chosen_backup = subflow_roles(decision, self.config)
        secondaries = [n for n in managed if n != primary]
        backup: list[str] = []
        steps = 0
        with self._connect() as conn:
            manage_flags = self.config.manage_endpoints and _version_tuple(self._version(conn)) >= (1, 40)
            for name in managed:
                metric = (
                    self.config.primary_metric
                    if name == primary
                    else self.config.secondary_metric + secondaries.index(name)
                )
                flags = list(self.config.endpoint_flags)
                weight = decision.weights.get(name)
                low = weight is not None and weight < self.config.backup_weight_threshold
                chosen = name in chosen_backup if chosen_backup is not None else low
                if name != primary and (chosen or name in decision.demoted):
                    flags.append("backup")
                    backup.append(name)
                device = self._device(conn, name)
                settings, version_id = self._applied(conn, device)
                wanted = {("ipv4", "route-metric"): ("x", metric), ("ipv6", "route-metric"): ("x", metric)}
                if manage_flags:
                    wanted[("connection", "mptcp-flags")] = ("u", mptcp_flags_value(flags))
                new = {group: dict(values) for group, values in settings.items()}
                for (group, key), value in wanted.items():
                    if group in new or group == "connection":
                        new.setdefault(group, {})[key] = value
                if new == settings:
                    continue
                self._journal(name)
                self._reapply(conn, device, new, version_id)
                self.changed.add(name)
                steps += 1
        cc = None
        if self.config.manage_cc:
            cc = choose_cc(decision.congestion_control, self.config.cc_profile, self.allowed_cc)
            current = self.read_state().sysctls_dict.get(CC_SYSCTL)
            if cc is not None and cc != current:
                safety.check_sysctl(CC_SYSCTL, cc, self.allowed_cc)
                if current is not None:
                    self._journal_sysctl(CC_SYSCTL, current)  # recorded before it changes
                self.backend.ops["sysctl_set"](key=CC_SYSCTL, value=cc)
                steps += 1
        self.last = Applied(primary, cc, tuple(sorted(backup)), steps, NetState())
        return self.last

    def _journal(self, interface: str) -> None:
        """Record ``interface`` as changed, before it is.

        Raises
        ------
        JournalError
            When the journal file holds the ``command``/``netlink`` backend's snapshot (an earlier run did not roll
            it back: replacing it would leave those changes without a rollback), or is no journal.
        """
        if self.journal_path is None or interface in self.changed:
            return
        self._write_record(sorted(self.changed | {interface}), self.original_sysctls)

    def _journal_sysctl(self, key: str, current: str) -> None:
        """Before ``key`` changes: record ``current`` as its original value unless one is recorded already (the
        value before the agent's *first* change of it, maybe an earlier run's).

        Raises
        ------
        JournalError
            As :meth:`_journal`.
        """
        if key in self.original_sysctls:
            return
        if self.journal_path is not None:
            self._write_record(sorted(self.changed), {**self.original_sysctls, key: current})
        self.original_sysctls[key] = current

    def _write_record(self, interfaces: list[str], sysctls: Mapping[str, str]) -> None:
        """Replace the record at ``journal_path`` (atomically) with these interfaces and original sysctl values.

        Raises
        ------
        JournalError
            When the file holds the ``command``/``netlink`` backend's snapshot (see :meth:`_journal`), is no
            journal, or cannot be written.
        """
        path = self.journal_path
        if path is None:
            return
        if Journal(path).active:
            raise JournalError(
                other_backend_record(
                    path,
                    "command or netlink",
                    "changes to the MPTCP endpoints, routes and sysctls",
                    "networkmanager",
                )
            )
        record = {
            "backend": "networkmanager",
            "netns": self._sysctls_netns,
            "interfaces": interfaces,
            "sysctls": dict(sysctls),
        }
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(record))
            os.replace(tmp, path)
        except OSError as exc:
            raise JournalError(f"journal {path} cannot be written: {exc.strerror or exc}") from exc

    def rollback(self) -> list[str]:
        """Reapply every changed device's saved profile and restore the original sysctl values (the CC); returns
        the interfaces restored.

        Every step is attempted, also after one failed (a device deleted meanwhile, NetworkManager not answering
        must not keep the congestion control or the other devices from being restored). A device that no longer
        exists is skipped (module docstring), listed in :attr:`skipped`.

        Raises
        ------
        RestoreIncomplete
            When one or more steps failed (the others ran): the record (journal) and what it names are kept, so
            a retry (``edgepath-agent rollback``, or the next rollback) restores them again.
        """
        names = sorted(self.changed)
        here = self._sysctls_netns == self.netns
        self.skipped = ()
        restored = restore_record(
            names,
            self.original_sysctls,
            self._sysctls_netns,
            self.bus_address,
            self.timeout_s,
            self.backend if here else None,
        )
        self.skipped = restored.skipped
        self.original_sysctls.clear()
        self._sysctls_netns = self.netns
        self.changed.clear()
        if self.journal_path is not None:
            self.journal_path.unlink(missing_ok=True)
        self.last = None
        return names


def restore_record(
    interfaces: Sequence[str],
    sysctls: Mapping[str, str],
    netns: str | None,
    bus_address: str | None = None,
    timeout_s: float = 5.0,
    backend: Backend | None = None,
) -> Restored:
    """Restore what a NetworkManager record names: reapply each of ``interfaces``' saved profile
    (:func:`restore_profiles`), then set each of ``sysctls`` back in ``netns`` (:func:`restore_sysctls`); every
    step is attempted, also after one failed. A profile that could not be reapplied because its device no longer
    exists in ``netns`` (``backend``'s ``read_interfaces()``, else ``ip link`` there) is skipped (module
    docstring). Returns the number of steps (one per interface and per sysctl) and the skipped ones.

    Raises
    ------
    RestoreIncomplete
        When one or more steps failed (the others ran); ``failed`` names each, ``skipped`` the skipped ones,
        ``steps`` counts them all.
    """
    done, failed_profiles = restore_profiles(interfaces, bus_address, timeout_s) if interfaces else ([], [])
    failed: list[str] = []
    skipped: list[str] = []
    if failed_profiles:
        present = existing_devices(backend if backend is not None else CommandBackend(netns=netns))
        not_done = [name for name in interfaces if name not in done]  # in the order of failed_profiles
        for name, line in zip(not_done, failed_profiles, strict=True):
            if present is not None and name not in present:
                skipped.append(f"reapplying {name}'s saved NetworkManager profile (device {name} no longer exists)")
            else:
                failed.append(line)
    for step in skipped:
        # INFO: expected (the device is gone, nothing of it left), and `rollback` prints each on stdout (a WARNING
        # reached its stderr too, through logging's last-resort handler); the stop's status names them.
        log.info("restore step skipped: %s", step)
    _, failed_sysctls = restore_sysctls(sysctls, netns, backend)
    failed += failed_sysctls
    steps = len(interfaces) + len(sysctls)
    if failed:
        raise RestoreIncomplete(failed, steps, skipped)
    return Restored(steps, tuple(skipped))


def restore_profiles(
    interfaces: Sequence[str], bus_address: str | None = None, timeout_s: float = 5.0
) -> tuple[list[str], list[str]]:
    """``Device.Reapply`` with an empty connection (the saved profile) for each of ``interfaces``, each attempted
    also after one failed; returns the interfaces restored and one line per interface that was not (why: the
    bus, NetworkManager's refusal, a device it does not know).

    Raises nothing: every failure comes back as a line.
    """
    applier = NetworkManagerApplier(ApplierConfig(interfaces=tuple(interfaces)), bus_address, timeout_s=timeout_s)
    done: list[str] = []
    failed: list[str] = []
    try:
        conn = applier._connect()
    except ApplyError as exc:
        return [], [f"reapplying {name}'s saved NetworkManager profile failed: {exc}" for name in interfaces]
    with conn:
        for name in interfaces:
            try:
                device = applier._device(conn, name)
                applier._reapply(conn, device, {}, 0)
            except Exception as exc:  # ApplyError (NetworkManager refused), a timeout, the bus gone: the next one
                failed.append(f"reapplying {name}'s saved NetworkManager profile failed: {exc}")
                continue
            done.append(name)
    return done, failed


def _where(netns: str | None) -> str:
    return f"network namespace {netns}" if netns else "the agent's own (host) network namespace"


def record_sysctls(record: Mapping[str, Any]) -> dict[str, str]:
    """``{sysctl: original value}`` of a NetworkManager record (``{}`` for one written before they were kept).

    Raises
    ------
    JournalError
        When ``sysctls`` is not an object of strings, or names a sysctl outside the agent's allowlist
        (:data:`edgepath_agent.safety.SYSCTL_ALLOWLIST`) or a value not of its shape: not a record this agent wrote.
    """
    raw = record.get("sysctls") or {}
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise JournalError(f"the NetworkManager record's sysctls are {raw!r}, not {{name: value}} strings")
    try:
        for key, value in raw.items():
            safety.check_sysctl(key, value)
    except safety.UnsafeDecision as exc:
        raise JournalError(f"the NetworkManager record's sysctls cannot be restored: {exc}") from exc
    return dict(raw)


def restore_sysctls(
    sysctls: Mapping[str, str], netns: str | None, backend: Backend | None = None
) -> tuple[list[str], list[str]]:
    """Set each of ``sysctls`` (``{name: original value}``) back in network namespace ``netns`` (``sysctl -w``, as
    the command backend; through ``backend``'s ``sysctl_set`` when given, which must work in ``netns``), each
    attempted also after one failed; returns the names set and one line per value that could not be set (its
    name, value and the command's error).

    Raises nothing: every failure comes back as a line.
    """
    if backend is None:
        backend = CommandBackend(netns=netns)
    done: list[str] = []
    failed: list[str] = []
    for key, value in sorted(sysctls.items()):
        try:
            backend.ops["sysctl_set"](key=key, value=value)
        except Exception as exc:  # BackendError, a namespace gone, the safety check
            failed.append(f"restoring {key}={value} in {_where(netns)} failed: {exc}")
            continue
        done.append(key)
    return done, failed


def journal_backend(path: Path) -> dict[str, Any] | None:
    """The journal record at ``path`` when it is NetworkManager's (module docstring: ``{"backend":
    "networkmanager", "netns", "interfaces", "sysctls"}``; older ones have ``backend`` and ``interfaces`` only)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and data.get("backend") == "networkmanager":
        return data
    return None
