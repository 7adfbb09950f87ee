"""The agent against a real NetworkManager in a network namespace (issue 21, item 3).

NetworkManager runs in a throw-away namespace holding veth interfaces named wlan0 and
wwan0, on a private ``dbus-daemon`` (as its system bus, ``DBUS_SYSTEM_BUS_ADDRESS``), in
a private mount namespace with a read-only ``/sys`` (so it does not wait for udev, which
does not run here) and tmpfs over ``/run`` and ``/var/lib`` (so it leaves nothing on the
host). Checked: the agent's D-Bus reading names the devices NetworkManager manages,
``edgepath-agent run`` refuses to start (exit 3, message naming NetworkManager and the
interface) before journalling anything, and once the devices are unmanaged over
NetworkManager's own D-Bus API (the way out the message gives) nothing conflicts; and the
``networkmanager`` applier backend changes the primary path (route metrics) and the MPTCP
endpoint flags through NetworkManager (its own ``proto static`` routes and endpoints), and
``edgepath-agent rollback`` / a clean stop restore the saved profiles; and ``run`` with that backend refuses, at
start, a default route of another interface at a metric it would give a managed connection (NetworkManager adds
its route beside that one, which keeps carrying the traffic), the same for IPv6 (where the two become one multipath
route); and a stop after a device was deleted restores the other devices and the congestion control, and skips the
deleted one's profile (its applied connection went with it; its saved profile, never changed, is what
NetworkManager activates when the device returns).

Needs root, ``unshare``, ``dbus-daemon`` and NetworkManager: ``/usr/sbin/NetworkManager``
or, without installing it system-wide, a prefix with the Debian packages extracted
(``EDGEPATH_TEST_NM_PREFIX``, default ``.tools/networkmanager``, which ``scripts/setup.sh``
fills as root; it holds ``usr/sbin/NetworkManager`` and its libraries in
``usr/lib/x86_64-linux-gnu``). Skipped otherwise, saying which is missing;
test_agent_netmanager.py covers the same logic against a stand-in for its D-Bus API.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import threading
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


#: Where scripts/setup.sh extracts NetworkManager's Debian packages (as root, when apt can download them).
SETUP_PREFIX = Path(__file__).resolve().parents[3] / ".tools" / "networkmanager"


def networkmanager_binary() -> tuple[Path, dict[str, str]] | None:
    prefix = os.environ.get("EDGEPATH_TEST_NM_PREFIX") or (str(SETUP_PREFIX) if SETUP_PREFIX.is_dir() else None)
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


def wait_until(read, ok, timeout_s: float):  # type: ignore[no-untyped-def]
    """The first value of ``read()`` for which ``ok(value)`` holds within ``timeout_s`` (polled), else None."""
    return wait_for(lambda: (lambda v: v if ok(v) else None)(read()), timeout_s)


@pytest.fixture
def real_networkmanager(tmp_path: Path) -> Iterator[tuple[str, str]]:
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
        yield address, ns
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
    address, _ = real_networkmanager
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


def activate_profile(
    address: str, interface: str, addr: str, gateway: str, ipv6: tuple[str, str] | None = None
) -> None:
    """A NetworkManager profile with a static address and default route, activated on ``interface`` (D-Bus);
    ``ipv6``: ``(address, gateway)`` of a static IPv6 address (/64) and default route (else IPv6 disabled)."""
    from jeepney import DBusAddress, MessageType, new_method_call
    from jeepney.io.blocking import open_dbus_connection

    nm = DBusAddress(
        "/org/freedesktop/NetworkManager", "org.freedesktop.NetworkManager", "org.freedesktop.NetworkManager"
    )
    settings = {
        "connection": {"id": ("s", f"ep-{interface}"), "type": ("s", "802-3-ethernet"),
                       "interface-name": ("s", interface)},
        "ipv4": {"method": ("s", "manual"), "gateway": ("s", gateway),
                 "address-data": ("aa{sv}", [{"address": ("s", addr), "prefix": ("u", 24)}])},
        "ipv6": {"method": ("s", "disabled")},
    }  # fmt: skip
    if ipv6 is not None:
        settings["ipv6"] = {"method": ("s", "manual"), "gateway": ("s", ipv6[1]),
                            "address-data": ("aa{sv}", [{"address": ("s", ipv6[0]), "prefix": ("u", 64)}])}  # fmt: skip
    with open_dbus_connection(address) as conn:
        (device,) = conn.send_and_get_reply(new_method_call(nm, "GetDeviceByIpIface", "s", (interface,))).body
        reply = conn.send_and_get_reply(
            new_method_call(nm, "AddAndActivateConnection", "a{sa{sv}}oo", (settings, device, "/"))
        )
        assert reply.header.message_type != MessageType.error, reply.body


def default_metrics(ns: str, family: str = "-4") -> dict[str, int]:
    """``{dev: metric}`` of the default routes (``family`` ``"-6"``: IPv6; a multipath route: each next hop's dev)."""
    out = subprocess.run(["ip", "-n", ns, "-j", family, "route", "show", "default"], capture_output=True, text=True)
    import json

    return {h["dev"]: int(r.get("metric", 0)) for r in json.loads(out.stdout or "[]") for h in r.get("nexthops", [r])}


def endpoint_flags(ns: str) -> dict[str, list[str]]:
    """``{dev: [flags]}`` from ``ip mptcp endpoint show`` (iproute2 prints flags as bare words)."""
    out = subprocess.run(["ip", "-n", ns, "mptcp", "endpoint", "show"], capture_output=True, text=True).stdout
    table = {}
    for line in out.splitlines():
        words = line.split()
        if "dev" in words:
            known = {"signal", "subflow", "backup", "fullmesh", "laminar", "implicit"}
            table[words[words.index("dev") + 1]] = sorted(w for w in words if w in known)
    return table


@pytest.mark.timeout(120)  # NetworkManager start-up and activation in the namespace take a few seconds
def test_networkmanager_backend_applies_through_networkmanager_and_restores(
    real_networkmanager: tuple[str, str], tmp_path: Path
) -> None:
    from edgepath_agent.applier.networkmanager import NetworkManagerApplier
    from edgepath_agent.daemon import AgentConfig, build_applier, ensure_sole_manager

    address, ns = real_networkmanager
    subprocess.run(["ip", "-n", ns, "addr", "add", "10.9.2.2/24", "dev", "wwan0"], check=True)
    activate_profile(address, "wlan0", "10.9.1.2", "10.9.1.1")
    activate_profile(address, "wwan0", "10.9.2.2", "10.9.2.1")
    before = wait_until(lambda: default_metrics(ns), lambda m: {"wlan0", "wwan0"} <= set(m), 20.0)
    assert before, f"NetworkManager did not add both default routes: {default_metrics(ns)}"
    endpoints_before = endpoint_flags(ns)

    config = AgentConfig(
        device_id="d", interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, backend="networkmanager", netns=ns,
        manage_cc=False, backup_weight_threshold=0.3, journal=tmp_path / "journal.json",
    )  # fmt: skip
    ensure_sole_manager(config, address)  # cooperating backend: NetworkManager present is no conflict
    applier = build_applier(config)
    assert isinstance(applier, NetworkManagerApplier)
    applier.bus_address = address
    weights = [{"interface": "wlan0", "weight": 0.1}, {"interface": "wwan0", "weight": 0.9}]
    rec = {"decision_id": "d-1", "primary_path": {"interface": "wwan0"}, "scheduler": {"weights": weights}}
    applied = applier.apply(rec)
    assert applied.primary == "wwan0" and applied.backup == ("wlan0",)
    after = wait_until(lambda: default_metrics(ns), lambda m: m.get("wwan0") == 10, 10.0)
    assert after == {"wwan0": 10, "wlan0": 20}, default_metrics(ns)
    routes = subprocess.run(["ip", "-n", ns, "-4", "route", "show", "default"], capture_output=True, text=True).stdout
    assert "proto static" in routes  # NetworkManager's own routes, rewritten by NetworkManager
    flags = wait_until(lambda: endpoint_flags(ns), lambda f: "backup" in f.get("wlan0", []), 10.0)
    print("NM_BACKEND " + str({"before": before, "after": after, "endpoints_before": endpoints_before,
                               "endpoints_after": flags}))  # fmt: skip
    raw = subprocess.run(["ip", "-n", ns, "mptcp", "endpoint", "show"], capture_output=True, text=True).stdout
    assert flags, f"NetworkManager did not mark wlan0's endpoint backup: {raw} {endpoint_flags(ns)}"
    assert applier.apply(rec).steps == 0  # idempotent: nothing to reapply
    assert (tmp_path / "journal.json").exists()

    # A crash: the process is gone, the journal names the changed interfaces; `rollback` reapplies the profiles.
    exe = Path(sys.executable).parent / "edgepath-agent"
    env = {**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": address, "COLUMNS": "200"}
    out = subprocess.run([str(exe), "rollback", "--journal", str(tmp_path / "journal.json")],
                         capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert out.returncode == 0 and "rollback: 2 step(s)" in out.stdout, out.stdout + out.stderr
    restored = wait_until(lambda: default_metrics(ns), lambda m: m == before, 10.0)
    assert restored == before, default_metrics(ns)
    assert not (tmp_path / "journal.json").exists()
    assert wait_until(lambda: endpoint_flags(ns), lambda f: f == endpoints_before, 10.0) == endpoints_before

    applier.apply(rec)  # and a clean stop restores the same way
    assert wait_until(lambda: default_metrics(ns), lambda m: m.get("wwan0") == 10, 10.0)
    applier.rollback()
    assert wait_until(lambda: default_metrics(ns), lambda m: m == before, 10.0) == before


def add_unmanaged_default_route(address: str, ns: str, metric: int) -> None:
    """``eth1`` (a veth end NetworkManager does not manage, 10.9.3.2/24) and ``default via 10.9.3.1 dev eth1 metric
    METRIC``: an operator's route, neither NetworkManager's nor the agent's."""
    subprocess.run(["ip", "-n", ns, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1p"], check=True)
    for dev in ("eth1", "eth1p"):
        subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
    seen = wait_for(lambda: any(d.interface == "eth1" for d in query_networkmanager(address, 1.0).devices), 10.0)
    assert seen, "NetworkManager did not see eth1"
    set_managed(address, "eth1", False)  # NetworkManager leaves its addresses and routes alone
    subprocess.run(["ip", "-n", ns, "addr", "add", "10.9.3.2/24", "dev", "eth1"], check=True)
    subprocess.run(
        ["ip", "-n", ns, "route", "add", "default", "via", "10.9.3.1", "dev", "eth1", "metric", str(metric)], check=True
    )


def route_dev(ns: str, destination: str = "192.0.2.1") -> str:
    """The interface the kernel sends ``destination`` out of (``ip route get``)."""
    out = subprocess.run(["ip", "-n", ns, "route", "get", destination], capture_output=True, text=True).stdout.split()
    return out[out.index("dev") + 1] if "dev" in out else ""


def refused_at_start(address: str, ns: str, journal: Path, status: Path) -> str:
    """The one ``Error:`` line of ``edgepath-agent run --backend networkmanager`` in ``ns`` (wlan0, wwan0), which must
    exit 78 at start, without a traceback."""
    exe = Path(sys.executable).parent / "edgepath-agent"
    env = {
        **os.environ,
        "DBUS_SYSTEM_BUS_ADDRESS": address,
        "COLUMNS": "200",
        "EDGEPATH_AGENT_ATTEMPTS": "1",
        "EDGEPATH_AGENT_UPSTREAM_CHECK": "false",
        "EDGEPATH_AGENT_STATUS_FILE": str(status),
    }
    argv = [str(exe), "run", "--backend", "networkmanager", "--netns", ns, "--interface", "wlan0=WIFI",
            "--interface", "wwan0=LTE", "--steps", "1", "--service", "grpc://127.0.0.1:9", "--journal", str(journal),
            "--log-format", "text"]  # fmt: skip
    ran = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert ran.returncode == 78, ran.stdout + ran.stderr
    errors = [line for line in ran.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in ran.stderr, ran.stderr
    return errors[0]


@pytest.mark.timeout(120)  # NetworkManager start-up and activation in the namespace take a few seconds
def test_networkmanager_backend_refuses_a_foreign_default_route_at_its_metric_at_start(
    real_networkmanager: tuple[str, str], tmp_path: Path
) -> None:
    """NetworkManager does not resolve the collision: given ``ipv4.route-metric`` 10 while another interface's
    default route has metric 10, it adds its route beside that one (IPv4 keeps both), and the one added first, the
    foreign one, keeps carrying the traffic: the agent's primary path would not be the primary. So ``run`` with
    ``backend = "networkmanager"`` refuses it at start as the ``command`` backend does (exit 78, one Error line),
    before any connection changes; the second half shows the collision the check prevents."""
    from edgepath_agent.daemon import AgentConfig, build_applier

    address, ns = real_networkmanager
    subprocess.run(["ip", "-n", ns, "addr", "add", "10.9.2.2/24", "dev", "wwan0"], check=True)
    add_unmanaged_default_route(address, ns, 10)
    activate_profile(address, "wlan0", "10.9.1.2", "10.9.1.1")
    activate_profile(address, "wwan0", "10.9.2.2", "10.9.2.1")
    before = wait_until(lambda: default_metrics(ns), lambda m: {"wlan0", "wwan0"} <= set(m), 20.0)
    assert before and before["eth1"] == 10, f"NetworkManager did not add both default routes: {default_metrics(ns)}"

    journal = tmp_path / "journal.json"
    error = refused_at_start(address, ns, journal, tmp_path / "status.json")
    assert "default route via 10.9.3.1 dev eth1 metric 10" in error and "primary_metric" in error, error
    assert default_metrics(ns) == before and not journal.exists()  # no connection was changed

    # What the check prevents: NetworkManager puts the primary's route at metric 10 beside eth1's, which stays first.
    config = AgentConfig(device_id="d", interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, backend="networkmanager",
                         netns=ns, manage_cc=False, journal=journal)  # fmt: skip
    applier = build_applier(config)
    applier.bus_address = address
    applier.apply({"decision_id": "d-1", "primary_path": {"interface": "wwan0"}})
    both = wait_until(lambda: default_metrics(ns), lambda m: m.get("wwan0") == 10, 10.0)
    assert both == {"eth1": 10, "wwan0": 10, "wlan0": 20}, default_metrics(ns)
    assert route_dev(ns) == "eth1"  # not wwan0, the primary the agent applied
    applier.rollback()


@pytest.mark.timeout(120)  # NetworkManager start-up and activation in the namespace take a few seconds
def test_networkmanager_backend_refuses_a_foreign_ipv6_default_route_at_its_metric_at_start(
    real_networkmanager: tuple[str, str], tmp_path: Path
) -> None:
    """The same for IPv6, whose ``ipv6.route-metric`` the backend sets too. The start check read IPv4 routes only,
    so an operator's IPv6 default route at metric 10 let ``run`` start; NetworkManager then puts the primary's IPv6
    default route at metric 10 beside it, the kernel merges the two into one multipath route, and new IPv6 flows
    are hashed to eth1 or wwan0. Now ``run`` refuses it at start (exit 78, naming the IPv6 route) before any
    connection changes; the second half shows the merge the check prevents."""
    from edgepath_agent.daemon import AgentConfig, build_applier

    address, ns = real_networkmanager
    subprocess.run(["ip", "-n", ns, "addr", "add", "10.9.2.2/24", "dev", "wwan0"], check=True)
    add_unmanaged_default_route(address, ns, 50)  # IPv4: a metric the agent does not use
    subprocess.run(["ip", "-n", ns, "addr", "add", "2001:db8:3::2/64", "dev", "eth1", "nodad"], check=True)
    foreign = ["ip", "-n", ns, "-6", "route", "add", "default", "via", "2001:db8:3::1", "dev", "eth1", "metric", "10"]
    subprocess.run(foreign, check=True)
    activate_profile(address, "wlan0", "10.9.1.2", "10.9.1.1", ("2001:db8:1::2", "2001:db8:1::1"))
    activate_profile(address, "wwan0", "10.9.2.2", "10.9.2.1", ("2001:db8:2::2", "2001:db8:2::1"))
    before = wait_until(lambda: default_metrics(ns, "-6"), lambda m: {"wlan0", "wwan0"} <= set(m), 20.0)
    assert before and before["eth1"] == 10, f"NetworkManager did not add both IPv6 routes: {default_metrics(ns, '-6')}"

    journal = tmp_path / "journal.json"
    error = refused_at_start(address, ns, journal, tmp_path / "status.json")
    assert "IPv6 default route via 2001:db8:3::1 dev eth1 metric 10" in error, error
    assert "primary_metric" in error, error
    assert default_metrics(ns, "-6") == before and not journal.exists()  # no connection was changed

    # What the check prevents: wwan0's IPv6 default route joins eth1's at metric 10, and flows leave on both.
    config = AgentConfig(device_id="d", interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, backend="networkmanager",
                         netns=ns, manage_cc=False, journal=journal)  # fmt: skip
    applier = build_applier(config)
    applier.bus_address = address
    applier.apply({"decision_id": "d-1", "primary_path": {"interface": "wwan0"}})
    both = wait_until(lambda: default_metrics(ns, "-6"), lambda m: m.get("wwan0") == 10, 10.0)
    assert both == {"eth1": 10, "wwan0": 10, "wlan0": 20}, default_metrics(ns, "-6")
    assert {route_dev(ns, f"2001:db8:ffff::{i}") for i in range(1, 33)} == {"eth1", "wwan0"}
    applier.rollback()


def ns_sysctl(ns: str, key: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", ns, "sysctl", "-n", key], capture_output=True, text=True
    ).stdout.strip()


class FixedService:
    """Stands in for the service: always recommends ``primary`` with congestion control ``cc``."""

    url = "fixed://"

    def __init__(self, primary: str, cc: str) -> None:
        self.body = {"decision_id": "nm-1", "primary_path": {"interface": primary}, "congestion_control": cc}

    def recommend(self, request: dict[str, object]) -> object:
        from edgepath_agent.messages import Recommendation

        return Recommendation.from_rest(self.body)

    def report_outcome(self, outcome: dict[str, object]) -> object:
        from edgepath_agent.messages import OutcomeAck

        return OutcomeAck(decision_id=str(outcome["decision_id"]), accepted=True)

    def close(self) -> None:
        pass


@pytest.mark.timeout(120)  # NetworkManager start-up and activation in the namespace take a few seconds
def test_networkmanager_stop_skips_a_deleted_device_and_restores_the_rest(
    real_networkmanager: tuple[str, str], tmp_path: Path
) -> None:
    """wwan0 is deleted between the apply and the stop (a USB modem unplugged): NetworkManager no longer knows the
    device, so its profile cannot be reapplied (``GetDeviceByIpIface`` fails). Nor does it need to be: the applied
    connection the agent changed went with the device, and the saved profile was never changed. The stop used to
    fail on it (``run`` exiting 75, the record kept, ``rollback`` exiting 1 until the device was back); now it is
    skipped and named, wlan0 and the congestion control are restored, the record is removed, ``status`` says
    restored, and once wwan0 is back NetworkManager activates its saved profile at the metric it had before the
    agent: nothing was left to restore. Nothing is mocked: the device is really deleted in NetworkManager's
    namespace."""
    from edgepath_agent.daemon import Agent, AgentConfig, build_applier
    from edgepath_agent.status import read_status

    address, ns = real_networkmanager
    cc_before = ns_sysctl(ns, "net.ipv4.tcp_congestion_control")
    allowed = ns_sysctl(ns, "net.ipv4.tcp_allowed_congestion_control").split()
    cc = next((name for name in allowed if name != cc_before), None)
    if cc is None:
        pytest.skip(f"the namespace allows no congestion control but {cc_before}: nothing to change and restore")
    subprocess.run(["ip", "-n", ns, "addr", "add", "10.9.2.2/24", "dev", "wwan0"], check=True)
    activate_profile(address, "wlan0", "10.9.1.2", "10.9.1.1")
    activate_profile(address, "wwan0", "10.9.2.2", "10.9.2.1")
    before = wait_until(lambda: default_metrics(ns), lambda m: {"wlan0", "wwan0"} <= set(m), 20.0)
    assert before, f"NetworkManager did not add both default routes: {default_metrics(ns)}"

    journal, status = tmp_path / "journal.json", tmp_path / "status.json"
    config = AgentConfig(device_id="dev-nm", service=["grpc://192.0.2.1:50051"], backend="networkmanager",
                         interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, netns=ns, upstream_check=False,
                         journal=journal, status_file=status)  # fmt: skip
    applier = build_applier(config, allowed)
    applier.bus_address = address
    runner = Agent(config, FixedService("wwan0", cc), applier, [], measure=lambda _p: None)
    assert runner.run(threading.Event(), max_steps=1) == 1
    assert wait_until(lambda: default_metrics(ns), lambda m: m.get("wwan0") == 10, 10.0), default_metrics(ns)
    assert ns_sysctl(ns, "net.ipv4.tcp_congestion_control") == cc

    subprocess.run(["ip", "-n", ns, "link", "del", "wwan0"], check=True)  # unplugged between the apply and the stop
    runner.close()  # no RestoreIncomplete: nothing of wwan0 is left to restore
    assert applier.skipped == ("reapplying wwan0's saved NetworkManager profile (device wwan0 no longer exists)",)
    assert wait_until(lambda: default_metrics(ns), lambda m: m == {"wlan0": before["wlan0"]}, 10.0), default_metrics(ns)
    assert ns_sysctl(ns, "net.ipv4.tcp_congestion_control") == cc_before
    assert not journal.exists()
    record = read_status(status)
    assert record is not None and record["configuration_state"] == "restored"
    assert record["configuration"] == f"restored at stop (skipped: {applier.skipped[0]})"

    exe = Path(sys.executable).parent / "edgepath-agent"
    env = {**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": address, "COLUMNS": "200"}
    again = subprocess.run([str(exe), "rollback", "--journal", str(journal)],
                           capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert again.returncode == 0 and "rollback: nothing to restore" in again.stdout, again.stdout + again.stderr

    # wwan0 is back: NetworkManager activates its saved profile, as it was before the agent
    subprocess.run(["ip", "-n", ns, "link", "add", "wwan0", "type", "veth", "peer", "name", "wwan0p"], check=True)
    for dev in ("wwan0", "wwan0p"):
        subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
    back = wait_until(lambda: default_metrics(ns), lambda m: "wwan0" in m, 20.0)
    assert back == before, f"NetworkManager did not activate wwan0's saved profile as it was: {default_metrics(ns)}"
