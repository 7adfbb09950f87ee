"""The laminar endpoint flag on real MPTCP connections (Linux ≥ 6.18; issue 21 item 6).

The testbed's server announces a second address (``10.1.0.2``, reached through the device's default
route, i.e. the primary path) with an ADD_ADDR. Without laminar, the in-kernel path manager opens the
subflow to it from the address routing picks (the primary path's again: both subflows on WiFi);
with the agent's ``laminar = "auto"`` on a 6.18 kernel the endpoints carry the flag and the subflow
leaves from the other interface (WiFi → server, LTE → announced address). Checked with ``ss`` in the
device namespace. Skipped (not passed) without root/CAP_NET_ADMIN, kernel MPTCP, or a kernel < 6.18.
"""

from __future__ import annotations

import time

import pytest
from edgepath_agent.collector.kernel import KernelCapabilities, kernel_version
from edgepath_agent.daemon import AgentConfig, build_applier, with_laminar
from edgepath_agent.meter import mptcp_socket
from edgepath_agent.testbed.netns import Testbed, call_in_netns

pytestmark = pytest.mark.netns

ANNOUNCED = "10.1.0.2"


@pytest.fixture
def testbed(testbed: Testbed) -> Testbed:
    """The shared testbed (conftest.py) on a kernel with laminar, its server announcing ``ANNOUNCED``."""
    release = testbed.dev("cat", "/proc/sys/kernel/osrelease").stdout.strip()
    if kernel_version(release) < (6, 18):
        pytest.skip(f"kernel {release} has no laminar endpoint flag (Linux >= 6.18)")
    testbed.srv("ip", "addr", "add", f"{ANNOUNCED}/32", "dev", "lo")
    testbed.srv("ip", "mptcp", "endpoint", "add", ANNOUNCED, "signal")
    testbed.dev("ip", "mptcp", "endpoint", "flush")  # the agent's applier sets the device's endpoints
    return testbed


def _subflows_once_announced_is_joined(tb: Testbed, port: int) -> set[tuple[str, str]]:
    """``(local, remote)`` addresses of the established subflows to ``port``, once one reaches ``ANNOUNCED``."""
    deadline = time.monotonic() + 10.0
    pairs: set[tuple[str, str]] = set()
    while time.monotonic() < deadline:
        pairs = set()
        for line in tb.dev("ss", "-tnH", "state", "established", f"dport = :{port}").stdout.splitlines():
            local, remote = line.split()[-2:]
            pairs.add((local.rsplit(":", 1)[0].split("%")[0], remote.rsplit(":", 1)[0]))
        if any(remote == ANNOUNCED for _, remote in pairs):
            return pairs
        time.sleep(0.05)  # polling a condition with a deadline
    return pairs


@pytest.mark.parametrize("laminar", ["auto", "off"])
def test_announced_address_is_reached_from_its_own_interface_with_laminar(testbed, server, tmp_path, laminar):
    config = AgentConfig(
        backend="netlink",
        netns=testbed.device_ns,
        laminar=laminar,
        journal=tmp_path / "j.json",
        interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
        manage_cc=False,
    )
    caps = KernelCapabilities(mptcp_enabled=True, kernel_release=testbed.dev("uname", "-r").stdout.strip())
    config = with_laminar(config, caps)
    assert ("laminar" in config.endpoint_flags) == (laminar == "auto")
    applier = build_applier(config)
    applier.apply({"primary_path": {"interface": "wlan0"}})
    flags = {e.dev: e.flags for e in applier.backend.read_state(()).endpoints}
    assert all(("laminar" in f) == (laminar == "auto") for f in flags.values()), flags

    try:
        sock = call_in_netns(testbed.device_ns, lambda: _connect(testbed.server_addr, server.port))
        try:
            pairs = _subflows_once_announced_is_joined(testbed, server.port)
        finally:
            sock.close()
    finally:
        applier.rollback()
    wlan0, wwan0 = "10.1.1.2", "10.1.2.2"
    assert (wlan0, testbed.server_addr) in pairs  # the initial subflow follows the primary path's route
    to_announced = {local for local, remote in pairs if remote == ANNOUNCED}
    if laminar == "auto":
        assert to_announced == {wwan0}, pairs
    else:
        assert to_announced == {wlan0}, pairs  # routing's choice: the primary path again


def _connect(host: str, port: int):  # type: ignore[no-untyped-def]
    sock = mptcp_socket()
    sock.settimeout(5.0)
    sock.connect((host, port))
    return sock
