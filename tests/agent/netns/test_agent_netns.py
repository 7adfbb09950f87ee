"""Applier against the real kernel, in throw-away network namespaces (marker ``netns``).

Each test builds the two-namespace testbed (device with wlan0/wwan0, server) and
checks what the kernel reports through independent commands (``ip mptcp endpoint
show``, ``ip mptcp limits show``, ``ip route``, ``sysctl``, ``ss``). Skipped (not
passed) without root/CAP_NET_ADMIN or kernel MPTCP. Namespaces are deleted in the
fixture's finalizer, also when a test fails.
"""

from __future__ import annotations

import re
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
from edgepath_agent.applier import Applier, ApplierConfig, ApplyError, CommandBackend, Journal
from edgepath_agent.applier.backend import run_checked
from edgepath_agent.collector import PathCollector, read_capabilities
from edgepath_agent.meter import TransferResult, TransferServer, mptcp_socket, transfer
from edgepath_agent.testbed.netns import Testbed, call_in_netns

pytestmark = pytest.mark.netns

CC = "net.ipv4.tcp_congestion_control"


def kernel_view(tb: Testbed) -> dict[str, str]:
    """What the kernel reports, as text, through commands the applier does not use for reading."""
    return {
        "endpoints": tb.dev("ip", "mptcp", "endpoint", "show").stdout,
        "limits": tb.dev("ip", "mptcp", "limits", "show").stdout,
        "routes": tb.dev(
            "ip", "-4", "route", "show", "table", "all"
        ).stdout,  # IPv6 link-local routes come and go (DAD)
        "rules": tb.dev("ip", "rule", "show").stdout,
        "cc": tb.dev("sysctl", "-n", CC).stdout.strip(),
    }


def allowed_cc(tb: Testbed) -> tuple[str, ...]:
    return tuple(tb.dev("sysctl", "-n", "net.ipv4.tcp_allowed_congestion_control").stdout.split())


BACKENDS = ["command", "netlink"]


def make_backend(kind: str, tb: Testbed, runner=run_checked):
    if kind == "netlink":
        from edgepath_agent.applier.netlink import NetlinkBackend, available

        if not available():
            pytest.skip("pyroute2 is not installed (netlink backend)")
        return NetlinkBackend(netns=tb.device_ns, runner=runner)
    return CommandBackend(netns=tb.device_ns, runner=runner)


def make_applier(tb: Testbed, journal: Journal, backend: str = "command", **cfg) -> Applier:
    config = ApplierConfig(limits={"subflows": 3, "add_addr_accepted": 1}, **cfg)
    return Applier(make_backend(backend, tb), journal, config, allowed_cc=allowed_cc(tb))


def other_cc(tb: Testbed) -> str:
    current = tb.dev("sysctl", "-n", CC).stdout.strip()
    others = [c for c in allowed_cc(tb) if c != current]
    if not others:
        pytest.skip(f"tcp_allowed_congestion_control lists only {current}")
    return others[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_applied_state_is_what_the_kernel_reports(testbed: Testbed, tmp_path: Path, backend: str):
    cc = other_cc(testbed)
    applier = make_applier(testbed, Journal(tmp_path / "j.json"), backend)
    applier.apply(
        {
            "primary_path": {"interface": "wwan0"},
            "scheduler_weights": {"wlan0": 0.05, "wwan0": 0.95},
            "congestion_control": cc,
        }
    )
    view = kernel_view(testbed)
    assert re.search(r"^10\.1\.1\.2 id 1 subflow backup dev wlan0\s*$", view["endpoints"], re.M), view["endpoints"]
    assert re.search(r"^10\.1\.2\.2 id 2 subflow dev wwan0\s*$", view["endpoints"], re.M), view["endpoints"]
    assert view["limits"].split() == ["add_addr_accepted", "1", "subflows", "3"]
    main_defaults = [ln.split() for ln in testbed.dev("ip", "route", "show", "default").stdout.splitlines()]
    assert main_defaults == [
        ["default", "via", "10.1.2.1", "dev", "wwan0", "metric", "10"],
        ["default", "via", "10.1.1.1", "dev", "wlan0", "metric", "20"],
    ]
    assert view["cc"] == cc
    # The per-source tables that carry the other subflows are not the applier's business.
    assert "default via 10.1.1.1 dev wlan0 table 101" in view["routes"]


class FailAfter:
    """Wraps a real backend; its ``n``-th operation raises (the earlier ones really ran)."""

    name = "fail-after"

    def __init__(self, inner, n: int) -> None:
        self.inner, self.n, self.calls = inner, n, 0

    def read_state(self, keys):
        return self.inner.read_state(keys)

    def read_addresses(self):
        return self.inner.read_addresses()

    def read_interfaces(self):
        return self.inner.read_interfaces()

    @property
    def ops(self):
        def wrap(fn):
            def call(**args):
                self.calls += 1
                if self.calls == self.n:
                    raise RuntimeError(f"injected failure after {self.n - 1} real operations")
                return fn(**args)

            return call

        return {op: wrap(fn) for op, fn in self.inner.ops.items()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_rollback_restores_exact_state_after_failure_half_way(testbed: Testbed, tmp_path: Path, backend: str):
    before = kernel_view(testbed)
    cc = other_cc(testbed)
    journal_path = tmp_path / "journal.json"
    # Endpoint flag changed, limits set, first route added: then the 4th operation fails.
    applier = Applier(
        FailAfter(make_backend(backend, testbed), 4),
        Journal(journal_path),
        ApplierConfig(limits={"subflows": 3, "add_addr_accepted": 1}),
        allowed_cc=allowed_cc(testbed),
    )
    with pytest.raises(ApplyError, match="injected failure"):
        applier.apply({"primary_path": {"interface": "wwan0"}, "scheduler_weights": {"wlan0": 0.0},
                       "congestion_control": cc})  # fmt: skip
    assert kernel_view(testbed) != before  # half-way state really reached the kernel
    # As `edgepath-agent rollback` would: a new applier reading the journal file.
    fresh = make_applier(testbed, Journal(journal_path))
    fresh.rollback()
    assert kernel_view(testbed) == before
    assert not journal_path.exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_rollback_after_several_applies_restores_exact_state(testbed: Testbed, tmp_path: Path, backend: str):
    before = kernel_view(testbed)
    applier = make_applier(testbed, Journal(tmp_path / "j.json"), backend)
    applier.apply({"primary_path": {"interface": "wwan0"}, "congestion_control": other_cc(testbed)})
    applier.apply({"primary_path": {"interface": "wlan0"}, "scheduler_weights": {"wwan0": 0.01}})
    assert kernel_view(testbed) != before
    applier.rollback()
    assert kernel_view(testbed) == before


def _initial_subflow_local_addr(tb: Testbed, port: int) -> tuple[str, str]:
    """(getsockname of a new MPTCP socket, local address of its MP_CAPABLE subflow in ``ss -ti``)."""

    def connect_and_look() -> tuple[str, str]:
        with mptcp_socket() as s:
            s.settimeout(5.0)
            s.connect((tb.server_addr, port))
            ss = tb.dev("ss", "-tinH", "state", "established", "dport", f"= :{port}").stdout
            capable = [
                line_pair[0].split()[2].rsplit(":", 1)[0]
                for line_pair in zip(ss.splitlines()[::2], ss.splitlines()[1::2], strict=False)
                if re.search(r"tcp-ulp-mptcp flags:\S*M", line_pair[1])
            ]
            return s.getsockname()[0], capable[0] if capable else ""

    return call_in_netns(tb.device_ns, connect_and_look)


@pytest.mark.parametrize("backend", BACKENDS)
def test_first_subflow_leaves_on_recommended_interface(
    testbed: Testbed, server: TransferServer, tmp_path: Path, backend: str
):
    applier = make_applier(testbed, Journal(tmp_path / "j.json"), backend, manage_cc=False)
    for primary, addr in (("wwan0", "10.1.2.2"), ("wlan0", "10.1.1.2"), ("wwan0", "10.1.2.2")):
        applier.apply({"primary_path": {"interface": primary}})
        sockname, ss_local = _initial_subflow_local_addr(testbed, server.port)
        assert (sockname, ss_local) == (addr, addr), primary
        result = call_in_netns(testbed.device_ns, transfer, testbed.server_addr, server.port, 64 * 1024)
        assert result.mptcp and result.local_addr == addr and result.bytes == 64 * 1024
    applier.rollback()


def test_path_collector_and_kernel_caps_inside_the_namespace(testbed: Testbed, server: TransferServer):
    def look() -> tuple[dict, object]:
        with socket.create_connection((testbed.server_addr, server.port), timeout=5.0):
            readings = PathCollector(
                runner=lambda argv: run_checked(["ip", "netns", "exec", testbed.device_ns, *argv])
            ).collect()
        return readings, read_capabilities()

    readings, caps = call_in_netns(testbed.device_ns, look)
    assert "wlan0" in readings and readings["wlan0"]["rtt_ms"] >= 0.0
    assert caps.mptcp_enabled


def test_rollback_command_restores_from_the_journal_file(testbed: Testbed, tmp_path: Path):
    import subprocess
    import sys

    before = kernel_view(testbed)
    journal_path = tmp_path / "journal.json"
    applier = make_applier(testbed, Journal(journal_path))
    applier.apply({"primary_path": {"interface": "wwan0"}, "congestion_control": other_cc(testbed)})
    assert kernel_view(testbed) != before
    # The agent "crashed" here: the journal file is all that is left.
    argv = [sys.executable, "-m", "edgepath_agent.cli", "rollback", "--journal", str(journal_path),
            "--netns", testbed.device_ns]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "rollback:" in proc.stdout
    assert kernel_view(testbed) == before
    again = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert "nothing to restore" in again.stdout


STEERING_BACKUP = {  # issue 19: which access the kernel should report as backup, per ATSSS mode
    "ACTIVE_STANDBY": True,
    "PRIORITY_BASED": True,
    "SMALLEST_DELAY": False,
    "LOAD_BALANCING": False,
    "REDUNDANT": False,
}


@pytest.mark.parametrize("mode", sorted(STEERING_BACKUP))
def test_steering_mode_endpoint_flags_as_the_kernel_reports_them(testbed: Testbed, tmp_path: Path, mode: str):
    """The match-all ATSSS rule: initial subflow on wwan0 (route metric), wlan0 backup only where the mode says."""
    applier = make_applier(testbed, Journal(tmp_path / "j.json"), manage_cc=False)
    rule = {
        "steering_mode": mode,
        "traffic_descriptor": {"match_all": True},
        "accesses": [
            {"interface": "wwan0", "initial_subflow": True},
            {"interface": "wlan0", "initial_subflow": False},
        ],
    }
    applier.apply({"primary_path": {"interface": "wlan0"}, "steering": {"rules": [rule]}})
    view = kernel_view(testbed)
    wlan = (
        r"^10\.1\.1\.2 id \d+ subflow backup dev wlan0\s*$"
        if STEERING_BACKUP[mode]
        else (r"^10\.1\.1\.2 id \d+ subflow dev wlan0\s*$")
    )
    assert re.search(wlan, view["endpoints"], re.M), view["endpoints"]
    assert re.search(r"^10\.1\.2\.2 id \d+ subflow dev wwan0\s*$", view["endpoints"], re.M), view["endpoints"]
    first = testbed.dev("ip", "route", "show", "default").stdout.splitlines()[0].split()
    assert first[first.index("dev") + 1] == "wwan0"
    applier.rollback()


def _rx_bytes(tb: Testbed, ifname: str) -> int:
    return int(tb.dev("cat", f"/sys/class/net/{ifname}/statistics/rx_bytes").stdout)


def _active_wwan0_standby_wlan0(tb: Testbed, tmp_path: Path) -> Applier:
    """An applier that made wwan0 primary and the active access, wlan0 the standby (``ACTIVE_STANDBY``)."""
    applier = make_applier(tb, Journal(tmp_path / "j.json"), manage_cc=False)
    rule = {
        "steering_mode": "ACTIVE_STANDBY",
        "traffic_descriptor": {"match_all": True},
        "accesses": [
            {"interface": "wwan0", "initial_subflow": True},
            {"interface": "wlan0", "initial_subflow": False},
        ],
    }
    applier.apply({"primary_path": {"interface": "wwan0"}, "steering": {"rules": [rule]}})
    return applier


def test_active_standby_keeps_a_download_on_the_active_access(testbed: Testbed, server: TransferServer, tmp_path: Path):
    """Measured effect (issue 19): with wlan0 the standby (``backup``), a 4 MiB MPTCP download arrives on wwan0.

    The server's scheduler skips the backup subflow while the active one works (the device signals the
    backup bit in MP_JOIN, RFC 8684 §3.2); the interfaces' rx counters show where the bytes arrived. Under
    Load-Balancing (no backup) the same download is still MPTCP with both subflows up; the split between
    them is the default scheduler's and is not asserted.

    Both accesses are shaped (tbf, 40 Mbit/s: the download takes ~0.8 s): over bare veths 4 MiB arrived in ~5 ms,
    sometimes before the standby's MP_JOIN completed, and the test then saw one subflow.
    """
    for name in ("wlan0", "wwan0"):
        testbed.shape(name, 40.0)
    size = 4 * 1024 * 1024
    applier = _active_wwan0_standby_wlan0(testbed, tmp_path)
    before = {i: _rx_bytes(testbed, i) for i in ("wlan0", "wwan0")}
    result = call_in_netns(testbed.device_ns, transfer, testbed.server_addr, server.port, size)
    got = {i: _rx_bytes(testbed, i) - before[i] for i in ("wlan0", "wwan0")}
    assert result.mptcp and result.bytes == size
    assert result.subflows == 2  # the standby subflow exists: it is idle, not missing
    assert got["wwan0"] >= size  # payload plus headers on the active access
    assert got["wlan0"] < 16 * 1024, got  # the standby carries handshakes and signalling only (~0.5 kB seen)
    applier.rollback()


@pytest.mark.timeout(120)  # a tbf-shaped 24 MiB download plus RTO-driven failover, on a shared 2-core machine
def test_active_standby_fails_over_to_the_standby_and_new_connections_fail_back(
    testbed: Testbed, server: TransferServer, tmp_path: Path
):
    """Measured effect (issue 19): the active access fails mid-download (iptables DROP both ways on wwan0).

    The running MPTCP connection finishes on the standby (wlan0: the kernel marks the silent subflow stale
    and the scheduler falls back to the backup one); once wwan0 passes traffic again, a new connection's
    initial subflow and payload are back on wwan0. The running connection does not move back by itself
    (mptcp_net-next #581), which this test does not claim.
    """
    if shutil.which("iptables") is None:
        pytest.skip("iptables is not installed (scripts/setup.sh installs it)")
    for name in ("wlan0", "wwan0"):
        testbed.shape(name, 40.0)
    size = 24 * 1024 * 1024
    applier = _active_wwan0_standby_wlan0(testbed, tmp_path)
    before = {i: _rx_bytes(testbed, i) for i in ("wlan0", "wwan0")}
    box: dict[str, object] = {}

    def download() -> None:
        try:
            box["result"] = call_in_netns(testbed.device_ns, transfer, testbed.server_addr, server.port, size, 90.0)
        except BaseException as exc:  # surfaced below
            box["error"] = exc

    worker = threading.Thread(target=download, daemon=True)
    worker.start()
    deadline = time.monotonic() + 30.0
    while _rx_bytes(testbed, "wwan0") - before["wwan0"] < 4 * 1024 * 1024:  # bounded wait: 4 MiB on wwan0
        assert time.monotonic() < deadline and worker.is_alive(), "download did not start on wwan0"
        time.sleep(0.02)
    assert _rx_bytes(testbed, "wlan0") - before["wlan0"] < 16 * 1024  # standby idle until the failure
    testbed.dev("iptables", "-A", "INPUT", "-i", "wwan0", "-j", "DROP")
    testbed.dev("iptables", "-A", "OUTPUT", "-o", "wwan0", "-j", "DROP")
    worker.join(100.0)
    assert "error" not in box, box.get("error")
    result = box["result"]
    assert isinstance(result, TransferResult) and result.mptcp and result.bytes == size
    on_wlan = _rx_bytes(testbed, "wlan0") - before["wlan0"]
    assert on_wlan >= size // 2, on_wlan  # the rest of the download (~20 MiB) came over the standby
    testbed.dev("iptables", "-F")
    again = {i: _rx_bytes(testbed, i) for i in ("wlan0", "wwan0")}
    fresh = call_in_netns(testbed.device_ns, transfer, testbed.server_addr, server.port, 2 * 1024 * 1024, 60.0)
    assert fresh.local_addr == "10.1.2.2"
    assert _rx_bytes(testbed, "wwan0") - again["wwan0"] >= 2 * 1024 * 1024
    assert _rx_bytes(testbed, "wlan0") - again["wlan0"] < 16 * 1024
    applier.rollback()
