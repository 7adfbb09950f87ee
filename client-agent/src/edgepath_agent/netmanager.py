"""Who else manages this device's network: NetworkManager (D-Bus) and mptcpd.

The agent rewrites default-route metrics (the initial subflow) and MPTCP endpoints.
NetworkManager owns the routes of the devices it manages (``proto dhcp``/``proto static``
with its own metrics, rewritten at every DHCP renewal) and, since 1.40, their MPTCP
endpoints (``connection.mptcp-flags``); mptcpd manages endpoints or runs a userspace path
manager. Two owners of the same routes fight, so the agent checks before it starts and
**refuses to start** (:class:`NetworkConflict`, message naming the manager, the
interfaces and the way out) when one of them manages an interface the agent is asked to
manage, unless the agent applies through NetworkManager (``backend = "networkmanager"``,
applier/networkmanager.py). The other way out is to make NetworkManager leave those
devices alone, e.g. ``nmcli device set wlan0 managed no`` or
``unmanaged-devices=interface-name:wlan0`` in NetworkManager.conf ``[keyfile]``.

NetworkManager is asked over the system bus (``DBUS_SYSTEM_BUS_ADDRESS``, else
``/run/dbus/system_bus_socket``) with jeepney (pure-Python D-Bus): ``NameHasOwner``
of ``org.freedesktop.NetworkManager``, then ``GetDevices`` and each device's
``Interface``, ``Managed`` and ``State`` properties (NetworkManager D-Bus API,
``org.freedesktop.NetworkManager.Device``; ``NMDeviceState``: 10 = unmanaged,
100 = activated). mptcpd has no D-Bus name: a process whose ``comm`` is ``mptcpd``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

NM_BUS_NAME = "org.freedesktop.NetworkManager"
NM_PATH = "/org/freedesktop/NetworkManager"
NM_DEVICE_IFACE = "org.freedesktop.NetworkManager.Device"

#: NMDeviceState values (libnm-core nm-dbus-interface.h).
DEVICE_STATES = {
    0: "unknown",
    10: "unmanaged",
    20: "unavailable",
    30: "disconnected",
    40: "prepare",
    50: "config",
    60: "need-auth",
    70: "ip-config",
    80: "ip-check",
    90: "secondaries",
    100: "activated",
    110: "deactivating",
    120: "failed",
}


@dataclass(frozen=True)
class NMDevice:
    """One NetworkManager device: interface name, ``Managed`` property, ``State`` (NMDeviceState)."""

    interface: str
    managed: bool
    state: int

    @property
    def state_name(self) -> str:
        return DEVICE_STATES.get(self.state, str(self.state))


@dataclass(frozen=True)
class NMReport:
    """What the system bus said: ``running`` (the name has an owner), its devices, or why it could not be asked."""

    running: bool
    version: str | None = None
    devices: tuple[NMDevice, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Coexistence:
    """Result of :func:`check_coexistence`: the managers found and what they manage of ``interfaces``."""

    networkmanager: NMReport
    mptcpd_pids: tuple[int, ...] = ()
    nm_managed: tuple[NMDevice, ...] = field(default_factory=tuple)

    @property
    def conflict(self) -> str | None:
        """A message naming the conflict and the way out, ``None`` when there is none."""
        parts = []
        if self.nm_managed:
            names = ", ".join(f"{d.interface} ({d.state_name})" for d in self.nm_managed)
            version = f" {self.networkmanager.version}" if self.networkmanager.version else ""
            parts.append(
                f"NetworkManager{version} manages {names}: it owns their routes and (NetworkManager ≥ 1.40) "
                "their MPTCP endpoints, and would undo the agent's metrics and endpoints at every DHCP renewal. "
                'Apply through it (backend = "networkmanager"), or make NetworkManager leave these interfaces '
                f"alone (`nmcli device set {self.nm_managed[0].interface} managed no`, or "
                f"`unmanaged-devices=interface-name:{self.nm_managed[0].interface}` in NetworkManager.conf "
                "[keyfile]), or give the agent other interfaces"
            )
        if self.mptcpd_pids:
            pids = ", ".join(str(p) for p in self.mptcpd_pids)
            parts.append(
                f"mptcpd is running (pid {pids}): it manages MPTCP endpoints or a userspace path manager; "
                "stop it or give the agent a device where it does not run"
            )
        return "; ".join(parts) or None


class NetworkConflict(RuntimeError):
    """Another network manager manages interfaces the agent was asked to manage (message says which, and how out)."""


def system_bus_address() -> str:
    """The system bus address: ``DBUS_SYSTEM_BUS_ADDRESS``, else the standard socket."""
    return os.environ.get("DBUS_SYSTEM_BUS_ADDRESS") or "unix:path=/run/dbus/system_bus_socket"


def query_networkmanager(bus_address: str | None = None, timeout_s: float = 2.0) -> NMReport:
    """Ask the system bus whether NetworkManager runs and which devices it manages.

    Never raises: a missing bus or a failing call gives ``running=False`` (or the
    devices read so far) with ``error`` set.
    """
    from jeepney import DBusAddress, MessageType, Properties, new_method_call
    from jeepney.bus_messages import message_bus
    from jeepney.io.blocking import open_dbus_connection

    address = bus_address or system_bus_address()
    try:
        conn = open_dbus_connection(address, auth_timeout=timeout_s)
    except (OSError, ValueError) as exc:
        return NMReport(False, error=f"system bus {address}: {exc}")

    def call(msg):  # type: ignore[no-untyped-def]
        reply = conn.send_and_get_reply(msg, timeout=timeout_s)
        if reply.header.message_type == MessageType.error:
            raise RuntimeError(f"{reply.header.fields.get(4, 'D-Bus error')}: {reply.body}")
        return reply.body

    with conn:
        try:
            (owned,) = call(message_bus.NameHasOwner(NM_BUS_NAME))
            if not owned:
                return NMReport(False)
            nm = DBusAddress(NM_PATH, bus_name=NM_BUS_NAME, interface=NM_BUS_NAME)
            version = None
            try:
                version = str(call(Properties(nm).get("Version"))[0][1])
            except RuntimeError:
                pass
            (paths,) = call(new_method_call(nm, "GetDevices"))
            devices = []
            for path in paths:
                props = Properties(DBusAddress(path, bus_name=NM_BUS_NAME, interface=NM_DEVICE_IFACE))
                values = {name: call(props.get(name))[0][1] for name in ("Interface", "Managed", "State")}
                devices.append(NMDevice(str(values["Interface"]), bool(values["Managed"]), int(values["State"])))
        except (OSError, RuntimeError, TimeoutError) as exc:
            return NMReport(True, error=f"NetworkManager did not answer: {exc}")
    return NMReport(True, version, tuple(devices))


def mptcpd_pids(proc: Path = Path("/proc")) -> tuple[int, ...]:
    """Pids of running ``mptcpd`` processes (``/proc/PID/comm``)."""
    found = []
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == "mptcpd":
                found.append(int(entry.name))
        except OSError:
            continue
    return tuple(sorted(found))


def check_coexistence(
    interfaces: Iterable[str], bus_address: str | None = None, proc: Path = Path("/proc"), timeout_s: float = 2.0
) -> Coexistence:
    """Which of ``interfaces`` another manager manages (see :attr:`Coexistence.conflict`)."""
    wanted: Sequence[str] = tuple(interfaces)
    report = query_networkmanager(bus_address, timeout_s)
    managed = tuple(d for d in report.devices if d.interface in wanted and d.managed and d.state != 10)
    return Coexistence(report, mptcpd_pids(proc), managed)
