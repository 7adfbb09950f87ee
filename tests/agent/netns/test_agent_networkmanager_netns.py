"""The agent against a real NetworkManager in a network namespace (issue 21, item 3).

NetworkManager runs in a throw-away namespace holding veth interfaces named wlan0 and
wwan0, on a private ``dbus-daemon`` (as its system bus, ``DBUS_SYSTEM_BUS_ADDRESS``), in
a private mount namespace with a read-only ``/sys`` (so it does not wait for udev, which
does not run here) and tmpfs over ``/run`` and ``/var/lib`` (so it leaves nothing on the
host). Checked: the agent's D-Bus reading names the devices NetworkManager manages,
``edgepath-agent run`` refuses to start (exit 3, message naming NetworkManager and the
interface) before journalling anything, and once the devices are unmanaged over
NetworkManager's own D-Bus API (the way out the message gives) nothing conflicts.

Needs root, ``unshare``, ``dbus-daemon`` and NetworkManager: ``/usr/sbin/NetworkManager``
or, without installing it system-wide, a prefix with the Debian packages extracted
(``EDGEPATH_TEST_NM_PREFIX``, holding ``usr/sbin/NetworkManager`` and its libraries in
``usr/lib/x86_64-linux-gnu``). Skipped otherwise, saying which is missing; CI machines do
not have NetworkManager, where test_agent_netmanager.py covers the same logic against a
stand-in for its D-Bus API.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from edgepath_agent.netmanager import check_coexistence, query_networkmanager

pytestmark = pytest.mark.netns

NM_CONF = """[main]
plugins=keyfile
no-auto-default=*
[keyfile]
path={path}
"""


def networkmanager_binary() -> tuple[Path, dict[str, str]] | None:
    prefix = os.environ.get("EDGEPATH_TEST_NM_PREFIX")
    if prefix:
        exe = Path(prefix) / "usr/sbin/NetworkManager"
        libs = Path(prefix) / "usr/lib/x86_64-linux-gnu"
        return (exe, {"LD_LIBRARY_PATH": str(libs)}) if exe.is_file() else None
    found = shutil.which("NetworkManager") or (
        "/usr/sbin/NetworkManager" if Path("/usr/sbin/NetworkManager").is_file() else None
    )
    return (Path(found), {}) if found else None


def wait_for(predicate, timeout_s: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    return None


@pytest.fixture
def real_networkmanager(tmp_path: Path) -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root for network and mount namespaces")
    nm = networkmanager_binary()
    missing = [name for name in ("dbus-daemon", "unshare", "ip") if shutil.which(name) is None]
    if nm is None:
        missing.append("NetworkManager (or EDGEPATH_TEST_NM_PREFIX)")
    if missing:
        pytest.skip("not installed: " + ", ".join(missing))
    exe, extra_env = nm
    ns = f"ep-nm-{secrets.token_hex(3)}"
    address = f"unix:path={tmp_path / 'bus'}"
    (tmp_path / "conns").mkdir()
    (tmp_path / "nm.conf").write_text(NM_CONF.format(path=tmp_path / "conns"))
    procs: list[subprocess.Popen[str]] = []
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for name in ("wlan0", "wwan0"):
            subprocess.run(
                ["ip", "-n", ns, "link", "add", name, "type", "veth", "peer", "name", f"{name}p"], check=True
            )
            for dev in (name, f"{name}p"):
                subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
        subprocess.run(["ip", "-n", ns, "addr", "add", "10.9.1.2/24", "dev", "wlan0"], check=True)
        bus = subprocess.Popen(
            ["dbus-daemon", "--session", "--nofork", "--nopidfile", f"--address={address}", "--print-address=1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        procs.append(bus)
        assert bus.stdout is not None and bus.stdout.readline().startswith("unix:path=")
        script = (
            "mount -o remount,ro /sys && mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/lib && "
            f'exec "{exe}" --no-daemon --config={tmp_path / "nm.conf"} --state-file={tmp_path / "nm.state"}'
        )
        env = {**os.environ, **extra_env, "DBUS_SYSTEM_BUS_ADDRESS": address}
        log = (tmp_path / "nm.log").open("w")
        procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "-m", "sh", "-c", script],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
        managed = wait_for(
            lambda: (
                {d.interface for d in query_networkmanager(address, 1.0).devices if d.managed} >= {"wlan0", "wwan0"}
            ),
            20.0,
        )
        if not managed:
            pytest.skip(
                f"NetworkManager did not manage the veth devices here: {(tmp_path / 'nm.log').read_text()[-500:]}"
            )
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        subprocess.run(["ip", "netns", "del", ns], check=False)


def set_managed(address: str, interface: str, managed: bool) -> None:
    """What ``nmcli device set IFACE managed no`` does: the Device's ``Managed`` property over D-Bus."""
    from jeepney import DBusAddress, MessageType, Properties, new_method_call
    from jeepney.io.blocking import open_dbus_connection

    nm = DBusAddress(
        "/org/freedesktop/NetworkManager", "org.freedesktop.NetworkManager", "org.freedesktop.NetworkManager"
    )
    with open_dbus_connection(address) as conn:
        (path,) = conn.send_and_get_reply(new_method_call(nm, "GetDeviceByIpIface", "s", (interface,))).body
        device = DBusAddress(path, "org.freedesktop.NetworkManager", "org.freedesktop.NetworkManager.Device")
        reply = conn.send_and_get_reply(Properties(device).set("Managed", "b", managed))
        assert reply.header.message_type != MessageType.error, reply.body


@pytest.mark.timeout(120)  # NetworkManager start-up in the namespace takes a few seconds
def test_real_networkmanager_is_detected_and_the_agent_refuses_to_start(
    real_networkmanager: str, tmp_path: Path
) -> None:
    address = real_networkmanager
    found = check_coexistence(["wlan0", "wwan0"], address, proc=tmp_path)
    assert found.networkmanager.version and found.networkmanager.version[0] == "1"
    assert {d.interface for d in found.nm_managed} == {"wlan0", "wwan0"}
    assert found.conflict and f"NetworkManager {found.networkmanager.version} manages wlan0" in found.conflict

    exe = Path(sys.executable).parent / "edgepath-agent"
    journal = tmp_path / "journal.json"
    argv = [str(exe), "run", "--interface", "wlan0=WIFI", "--interface", "wwan0=LTE", "--steps", "1",
            "--service", "grpc://127.0.0.1:9", "--journal", str(journal)]  # fmt: skip
    env = {**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": address, "COLUMNS": "200"}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 3 and "refusing to start: NetworkManager" in out.stderr, out.stdout + out.stderr
    assert "wlan0" in out.stderr and not journal.exists()

    for name in ("wlan0", "wwan0"):  # the way out the message gives
        set_managed(address, name, False)
    assert wait_for(lambda: check_coexistence(["wlan0", "wwan0"], address, proc=tmp_path).conflict is None, 10.0)
