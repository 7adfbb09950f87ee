"""The agent's meters measure the network namespace it manages (``--netns``), not the host's (marker ``netns``).

* passive meter (no ``probe``): the received-bytes counter of an interface that exists only inside a
  namespace (a veth end, frames sent to it from its peer) is read there, over rtnetlink and through
  the ``ip -j -s link`` fallback, and is absent without the namespace (the host's ``/sys/class/net``);
* built-in probe (``probe_tool = "builtin"``): on the two-path testbed the probe's MPTCP connection
  reaches the server namespace's address, which only the device namespace has a route to, and
  leaves from the device's wlan0 address.

Skipped (not passed) without root/CAP_NET_ADMIN or kernel MPTCP.
"""

from __future__ import annotations

import socket
import struct
import sys
from pathlib import Path

import pytest
from edgepath_agent.daemon import Agent, AgentConfig, rx_bytes
from edgepath_agent.meter import TransferServer
from edgepath_agent.testbed.netns import Testbed, call_in_netns
from netns_helpers import VethNamespace

pytestmark = pytest.mark.netns

#: Ethernet frames sent per check and their size, bytes (EtherType 0x88B5: local experimental, nobody answers).
FRAMES, FRAME_BYTES = 20, 1000


def send_frames(veth: VethNamespace) -> int:
    """Sends ``FRAMES`` broadcast frames on the veth peer (they arrive on ``veth.end``); returns their bytes."""

    def send() -> None:
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:  # created here: the namespace's interfaces
            s.bind((veth.peer, 0))
            header = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + struct.pack("!H", 0x88B5)
            for _ in range(FRAMES):
                s.send(header + bytes(FRAME_BYTES - len(header)))

    call_in_netns(veth.name, send)
    return FRAMES * FRAME_BYTES


@pytest.fixture(params=["rtnetlink", "ip"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``rtnetlink`` (pyroute2, the default), or ``ip``: pyroute2 made unimportable, the ``ip -j -s link`` fallback."""
    if request.param == "ip":
        monkeypatch.setitem(sys.modules, "pyroute2", None)  # `import pyroute2` raises ImportError
    return str(request.param)


def test_rx_bytes_reads_the_counter_of_the_namespace(veth_ns: VethNamespace, reader: str) -> None:
    assert rx_bytes(veth_ns.end) is None  # the host's /sys/class/net has no such interface
    # ... nor has it for a thread inside the namespace: sysfs shows the namespace it was mounted in.
    assert not call_in_netns(veth_ns.name, (Path("/sys/class/net") / veth_ns.end).exists)
    before = rx_bytes(veth_ns.end, netns=veth_ns.name)
    assert before is not None
    sent = send_frames(veth_ns)
    after = rx_bytes(veth_ns.end, netns=veth_ns.name)
    assert after is not None and sent <= after - before < sent + 4096  # IPv6 autoconfiguration may add a little
    assert rx_bytes("ep-nonesuch", netns=veth_ns.name) is None


def test_passive_meter_measures_the_primary_interface_of_the_namespace(veth_ns: VethNamespace, tmp_path: Path) -> None:
    interfaces = {veth_ns.end: "ETHERNET"}
    managed = Agent(
        AgentConfig(netns=veth_ns.name, interfaces=interfaces, journal=tmp_path / "j.json"),
        client=None, applier=None, collectors=[],  # type: ignore[arg-type]
    )  # fmt: skip
    host = Agent(
        AgentConfig(interfaces=interfaces, journal=tmp_path / "h.json"),
        client=None, applier=None, collectors=[],  # type: ignore[arg-type]
    )  # fmt: skip
    # A decision's interval starts where its configuration takes effect (after its apply).
    interval = managed.open_interval("d1", veth_ns.end)
    assert interval.rx_bytes is not None and interval.decision_id == "d1"
    sent = send_frames(veth_ns)
    measured, why = managed.interval_reading(interval)  # as the next apply (or the stop) closes it
    assert why is None and measured is not None and sent <= measured.bytes < sent + 4096
    assert measured.throughput_bps == pytest.approx(8.0 * measured.bytes / measured.completion_s)
    # Without the namespace there is no such interface to count.
    outside = host.open_interval("d1", veth_ns.end)
    assert outside.rx_bytes is None
    assert host.interval_reading(outside) == (None, f"passive meter: no byte counter for {veth_ns.end}")


@pytest.mark.timeout(90)  # without the namespace the connection attempt may wait for the probe's 30 s timeout
def test_builtin_probe_connects_from_the_managed_namespace(
    testbed: Testbed, server: TransferServer, tmp_path: Path
) -> None:
    config = AgentConfig(
        probe=f"{testbed.server_addr}:{server.port}", probe_tool="builtin", probe_bytes=256 * 1024,
        netns=testbed.device_ns, interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, journal=tmp_path / "j.json",
    )  # fmt: skip
    agent = Agent(config, client=None, applier=None, collectors=[])  # type: ignore[arg-type]
    assert agent.iperf3 is None
    measured = agent.measure("wlan0")
    assert measured is not None and measured.bytes == 256 * 1024
    assert measured.mptcp and measured.local_addr == "10.1.1.2"  # the device's wlan0 (default route, metric 100)
    assert measured.throughput_bps > 0 and measured.server_counters  # the server's trailer came back
