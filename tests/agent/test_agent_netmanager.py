"""Coexistence with NetworkManager and mptcpd (issue 21, item 3): detect, and refuse to start.

A real ``dbus-daemon`` runs a private bus; on it a stand-in for NetworkManager owns
``org.freedesktop.NetworkManager`` and answers the calls the agent makes (``GetDevices``;
``Properties.Get`` of ``Version`` and of each device's ``Interface``, ``Managed``,
``State``) in the shapes of NetworkManager's D-Bus API. Limits: this is NetworkManager's
API as documented, not NetworkManager itself (it needs udev and a system bus of its own,
which this machine does not run); only the calls above are served. Skipped without
``dbus-daemon``. mptcpd is detected from ``/proc/PID/comm``, here a fake ``/proc`` tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from edgepath_agent.daemon import AgentConfig, ensure_sole_manager
from edgepath_agent.netmanager import NetworkConflict, check_coexistence, mptcpd_pids, query_networkmanager

NM = "org.freedesktop.NetworkManager"


class FakeNetworkManager:
    """Owns ``org.freedesktop.NetworkManager`` on ``address`` and serves the agent's calls (module docstring)."""

    def __init__(self, address: str, devices: dict[str, tuple[bool, int]], version: str = "1.42.4") -> None:
        from jeepney.bus_messages import message_bus
        from jeepney.io.blocking import open_dbus_connection

        self.devices = devices
        self.version = version
        self.conn = open_dbus_connection(address)
        reply = self.conn.send_and_get_reply(message_bus.RequestName(NM))
        assert reply.body == (1,), reply.body  # primary owner
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def paths(self) -> list[str]:
        return [f"/org/freedesktop/NetworkManager/Devices/{i}" for i in range(1, len(self.devices) + 1)]

    def answer(self, msg):  # type: ignore[no-untyped-def]
        from jeepney import new_error, new_method_return

        member, iface = msg.header.fields.get(3), msg.header.fields.get(2)
        path = str(msg.header.fields.get(1))
        if member == "GetDevices" and iface == NM:
            return new_method_return(msg, "ao", (self.paths(),))
        if member == "Get" and iface == "org.freedesktop.DBus.Properties":
            owner, prop = msg.body
            if owner == NM and prop == "Version":
                return new_method_return(msg, "v", (("s", self.version),))
            if path in self.paths():
                name = list(self.devices)[self.paths().index(path)]
                managed, state = self.devices[name]
                values = {"Interface": ("s", name), "Managed": ("b", managed), "State": ("u", state)}
                if prop in values:
                    return new_method_return(msg, "v", (values[prop],))
        return new_error(msg, "org.freedesktop.DBus.Error.UnknownMethod", "s", (f"{iface}.{member}",))

    def serve(self) -> None:
        from jeepney import MessageType

        while not self.stop.is_set():
            try:
                msg = self.conn.receive(timeout=0.2)
            except TimeoutError:
                continue
            except OSError:
                return
            if msg.header.message_type == MessageType.method_call:
                self.conn.send(self.answer(msg))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.conn.close()


@pytest.fixture
def networkmanager(bus: str) -> Iterator[FakeNetworkManager]:
    nm = FakeNetworkManager(bus, {"wlan0": (True, 100), "wwan0": (False, 10), "eth0": (True, 30)})
    try:
        yield nm
    finally:
        nm.close()


def test_reads_networkmanager_devices_over_dbus(bus: str, networkmanager: FakeNetworkManager) -> None:
    report = query_networkmanager(bus)
    assert report.running and report.version == "1.42.4" and report.error is None
    by_name = {d.interface: d for d in report.devices}
    assert by_name["wlan0"].managed and by_name["wlan0"].state_name == "activated"
    assert not by_name["wwan0"].managed and by_name["wwan0"].state_name == "unmanaged"


def test_conflict_names_networkmanager_the_interfaces_and_the_way_out(
    bus: str, networkmanager: FakeNetworkManager, tmp_path: Path
) -> None:
    found = check_coexistence(["wlan0", "wwan0"], bus, proc=tmp_path)
    assert [d.interface for d in found.nm_managed] == ["wlan0"]  # wwan0 is unmanaged, eth0 not ours
    message = found.conflict or ""
    assert "NetworkManager 1.42.4 manages wlan0 (activated)" in message
    assert "nmcli device set wlan0 managed no" in message and "wwan0" not in message
    assert check_coexistence(["wwan0"], bus, proc=tmp_path).conflict is None

    config = AgentConfig(device_id="d", interfaces={"wlan0": "WIFI", "wwan0": "LTE"})
    with pytest.raises(NetworkConflict, match="refusing to start: NetworkManager"):
        ensure_sole_manager(config, bus)
    ensure_sole_manager(config.model_copy(update={"backend": "dry-run"}), bus)  # a dry run only warns
    ensure_sole_manager(config.model_copy(update={"netns": "ep-test"}), bus)  # another namespace's devices


def test_run_refuses_to_start_before_touching_anything(
    bus: str, networkmanager: FakeNetworkManager, tmp_path: Path
) -> None:
    exe = Path(sys.executable).parent / "edgepath-agent"
    env = {**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": bus, "COLUMNS": "200"}
    journal = tmp_path / "journal.json"
    argv = [str(exe), "run", "--interface", "wlan0=WIFI", "--interface", "wwan0=LTE", "--steps", "1",
            "--service", "grpc://127.0.0.1:9", "--journal", str(journal)]  # fmt: skip
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 3, out.stdout + out.stderr
    assert "refusing to start: NetworkManager 1.42.4 manages wlan0" in out.stderr
    assert not journal.exists()  # nothing was journalled, so nothing was changed


def test_without_networkmanager_on_the_bus_there_is_no_conflict(bus: str, tmp_path: Path) -> None:
    report = query_networkmanager(bus)
    assert not report.running and report.error is None
    assert check_coexistence(["wlan0"], bus, proc=tmp_path).conflict is None
    missing = query_networkmanager(f"unix:path={tmp_path / 'no-bus'}", timeout_s=0.5)
    assert not missing.running and "no-bus" in (missing.error or "")


def test_mptcpd_is_a_conflict_too(tmp_path: Path) -> None:
    for pid, comm in ((101, "bash"), (202, "mptcpd"), (303, "NetworkManager")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
    (tmp_path / "self").mkdir()
    assert mptcpd_pids(tmp_path) == (202,)
    found = check_coexistence(["wlan0"], f"unix:path={tmp_path / 'no-bus'}", proc=tmp_path, timeout_s=0.5)
    assert found.conflict is not None and "mptcpd is running (pid 202)" in found.conflict


def test_networkmanager_backend_needs_networkmanager_running(bus: str) -> None:
    config = AgentConfig(device_id="d", interfaces={"wlan0": "WIFI"}, backend="networkmanager")
    with pytest.raises(NetworkConflict, match="backend networkmanager, but NetworkManager is not running"):
        ensure_sole_manager(config, bus)


def test_networkmanager_backend_cooperates(bus: str, networkmanager: FakeNetworkManager) -> None:
    config = AgentConfig(device_id="d", interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, backend="networkmanager")
    ensure_sole_manager(config, bus)  # no conflict: the agent applies through NetworkManager
    found = check_coexistence(["wlan0"], bus)
    assert 'backend = "networkmanager"' in (found.conflict or "")
