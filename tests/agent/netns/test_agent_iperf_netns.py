"""The iperf3 probe on real MPTCP transfers in the testbed's namespaces (issue 21 item 5).

A real iperf3 server (Debian 12's 3.12, under mptcpize so it listens with IPPROTO_MPTCP) runs in the
server namespace; the agent's probe runs the real iperf3 client in the device namespace through a
tbf-shaped path. Skipped (not passed) without root/CAP_NET_ADMIN, kernel MPTCP, iperf3 or mptcpize
(scripts/setup.sh installs both as root).
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from edgepath_agent.daemon import Agent, AgentConfig
from edgepath_agent.iperf import detect_iperf3, iperf3_transfer
from edgepath_agent.meter import transfer
from edgepath_agent.testbed.netns import Testbed, call_in_netns

MISSING = [b for b in ("iperf3", "mptcpize") if shutil.which(b) is None]
pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(bool(MISSING), reason=f"not installed: {', '.join(MISSING)} (scripts/setup.sh installs them)"),
]

PORT = 5301
RATE_MBIT = 20.0


def _mp_capable_syn_rx(tb: Testbed) -> int:
    """Server-side count of MP_CAPABLE SYNs received (``MPTcpExtMPCapableSYNRX``, /proc/net/netstat)."""
    out = tb.srv("nstat", "-az", "MPTcpExtMPCapableSYNRX").stdout
    for line in out.splitlines():
        if line.startswith("MPTcpExtMPCapableSYNRX"):
            return int(line.split()[1])
    raise AssertionError(f"no MPTcpExtMPCapableSYNRX in {out!r}")


def _iperf3_server(tb: Testbed) -> subprocess.Popen[str]:
    """A one-off (``-1``) MPTCP iperf3 server in the server namespace, listening when returned.

    ``-J`` on the server: only then does the client's ``--get-server-output`` carry the server's
    (sender's) JSON with RTT and retransmissions.
    """
    proc = subprocess.Popen(
        ["ip", "netns", "exec", tb.server_ns, "mptcpize", "run", "iperf3", "-s", "-1", "-J", "-p", str(PORT)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:  # wait for the listening socket (a condition, not a fixed sleep)
        if f":{PORT} " in tb.srv("ss", "-Hltn", f"sport = :{PORT}").stdout:
            return proc
        if proc.poll() is not None:
            raise AssertionError(f"iperf3 server exited: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("iperf3 server did not listen within 10 s")


@pytest.mark.timeout(90)  # two 2 MB transfers at 20 Mbit/s plus iperf3 start-up, on a shared 2-core machine
def test_iperf3_probe_measures_the_shaped_primary_path_over_mptcp_and_agrees_with_the_builtin_meter(testbed, server):
    tool = detect_iperf3()
    assert tool is not None and tool.mode in ("native", "mptcpize")
    testbed.shape("wlan0", RATE_MBIT)
    testbed.shape("wwan0", RATE_MBIT)
    size = 2 * 1024 * 1024
    iperf3_server = _iperf3_server(testbed)
    syn_before = _mp_capable_syn_rx(testbed)
    try:
        result = iperf3_transfer(tool, testbed.server_addr, PORT, size, timeout_s=30.0, netns=testbed.device_ns)
        assert iperf3_server.wait(timeout=15) == 0  # the one-off server finished its test cleanly
    finally:
        if iperf3_server.poll() is None:
            iperf3_server.kill()
    assert _mp_capable_syn_rx(testbed) >= syn_before + 1  # the probe's connections were MPTCP on the wire
    assert result.mptcp and result.bytes >= 0.9 * size
    # The subflows share two 20 Mbit/s paths: above one path's rate is possible, above both is not.
    assert 2e6 < result.throughput_bps <= 2 * RATE_MBIT * 1e6 * 1.05, result
    assert result.rtt_ms is not None and 0 < result.rtt_ms < 1000
    assert result.loss is not None and 0 <= result.loss <= 1

    # The same path measured by the built-in meter (edgepath's TransferServer): same order of magnitude.
    builtin = call_in_netns(testbed.device_ns, transfer, testbed.server_addr, server.port, size)
    ratio = result.throughput_bps / builtin.throughput_bps
    assert 0.5 < ratio < 2.0, (result.throughput_bps, builtin.throughput_bps)


@pytest.mark.timeout(60)
def test_agent_default_measure_uses_iperf3_and_reports_its_outcome(testbed, tmp_path):
    """The daemon's default measurement with ``probe_tool = iperf3`` (the default) runs the real iperf3."""
    server = _iperf3_server(testbed)
    config = AgentConfig(
        probe=f"{testbed.server_addr}:{PORT}",
        probe_bytes=512 * 1024,
        netns=testbed.device_ns,
        journal=tmp_path / "j.json",
        interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
    )
    try:
        agent = Agent(config, client=None, applier=None, collectors=[])  # type: ignore[arg-type]
        assert agent.iperf3 is not None and agent.iperf3.mptcp
        measured = agent.measure("wlan0")
    finally:
        if server.poll() is None:
            server.kill()
    assert measured is not None and measured.mptcp and measured.throughput_bps > 0
    assert measured.server_counters and measured.server_counters["tool"] == "iperf3"
