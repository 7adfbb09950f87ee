"""Collectors through the kernel's netlink interfaces (issue 21, item 4): nl80211 and inet_diag.

* nl80211: this machine has no WiFi driver (no nl80211 family), so the extraction is
  tested on messages encoded and decoded by pyroute2's own nl80211 codec (the shapes the
  kernel sends), and the live collector must report nothing, not fail.
* inet_diag: live TCP connections on loopback, read through pyroute2 ``DiagSocket``,
  agree with what ``ss`` (the text fallback) prints for the same socket; in the netns
  testbed (root) the collector attributes a live MPTCP connection's RTT to ``wlan0``.
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
from collections.abc import Iterator

import pytest

pyroute2 = pytest.importorskip("pyroute2", reason="pyroute2 is a base dependency of the agent")

from edgepath_agent.collector import DiagPathCollector, Nl80211WifiCollector  # noqa: E402
from edgepath_agent.collector.path import _ESTABLISHED, _INET_DIAG_INFO_EXT, SocketInfo, diag_sockets, parse_ss_tin  # noqa: E402
from edgepath_agent.collector.wifi import nl80211_readings  # noqa: E402
from pyroute2.netlink.nl80211 import NL80211_NAMES, nl80211cmd  # noqa: E402


def decoded(cmd: str, attrs: list) -> nl80211cmd:
    msg = nl80211cmd()
    msg["cmd"] = NL80211_NAMES[cmd]
    msg["version"] = 1
    msg["attrs"] = attrs
    msg.encode()
    out = nl80211cmd(msg.data)
    out.decode()
    return out


def station(signal: int, tx32: int | None = None, tx16: int | None = None) -> nl80211cmd:
    rate = [["NL80211_RATE_INFO_BITRATE32", tx32]] if tx32 is not None else [["NL80211_RATE_INFO_BITRATE", tx16]]
    info = [["NL80211_STA_INFO_SIGNAL", signal], ["NL80211_STA_INFO_TX_BITRATE", {"attrs": rate}]]
    return decoded("NL80211_CMD_NEW_STATION", [["NL80211_ATTR_IFINDEX", 3], ["NL80211_ATTR_STA_INFO", {"attrs": info}]])


def interface(ifindex: int, name: str, iftype: int, freq: int | None) -> nl80211cmd:
    attrs = [["NL80211_ATTR_IFINDEX", ifindex], ["NL80211_ATTR_IFNAME", name], ["NL80211_ATTR_IFTYPE", iftype]]
    if freq is not None:
        attrs.append(["NL80211_ATTR_WIPHY_FREQ", freq])
    return decoded("NL80211_CMD_NEW_INTERFACE", attrs)


def test_nl80211_station_readings_in_physical_units() -> None:
    stations = {3: [station(-61, tx32=8667)], 4: [], 5: [station(-40, tx16=540)], 6: [station(-50, tx32=100)]}
    ifaces = [
        interface(3, "wlan0", 2, 5180),  # associated station, 5 GHz
        interface(4, "wlan1", 2, None),  # station, not associated: no peer
        interface(5, "wlan2", 2, 2437),  # station, legacy 16-bit rate field
        interface(6, "ap0", 3, 2412),  # access point mode: not a client path
    ]
    readings = nl80211_readings(ifaces, lambda i: stations[i])
    assert readings == {
        "wlan0": {"access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 866.7, "frequency_mhz": 5180.0},
        "wlan2": {"access_type": "WIFI", "wifi_rssi_dbm": -40.0, "link_speed_mbps": 54.0, "frequency_mhz": 2437.0},
    }


def test_nl80211_collector_reports_nothing_without_a_wifi_driver() -> None:
    assert isinstance(Nl80211WifiCollector().collect(), dict)


@pytest.fixture
def connection() -> Iterator[tuple[socket.socket, int]]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    for _ in range(20):  # some round trips, so the kernel has an RTT and segments out
        client.sendall(b"x" * 1000)
        peer.recv(4096)
        peer.sendall(b"y")
        client.recv(1)
    try:
        yield client, client.getsockname()[1]
    finally:
        for s in (client, peer, server):
            s.close()


def test_inet_diag_agrees_with_ss_for_the_same_socket(connection: tuple[socket.socket, int]) -> None:
    from pyroute2 import DiagSocket

    _, port = connection

    def read_diag() -> SocketInfo:
        with DiagSocket() as diag:
            diag.bind()
            msgs = diag.get_sock_stats(family=socket.AF_INET, states=_ESTABLISHED, extensions=_INET_DIAG_INFO_EXT)
        ours = [s for s, m in zip(diag_sockets(msgs), msgs, strict=True) if m["idiag_sport"] == port]
        assert len(ours) == 1
        return ours[0]

    info = read_diag()
    assert info.local_addr == "127.0.0.1" and info.rtt_ms is not None and info.rtt_ms > 0
    assert info.segs_out >= 20 and not info.mptcp_subflow
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) not installed: nothing to compare with")
    text = subprocess.run(
        ["ss", "-tinH", "state", "established", "sport", f"= :{port}"], capture_output=True, text=True, check=True
    ).stdout
    (from_ss,) = parse_ss_tin(text)
    later = read_diag()
    # The counters are monotonic and the kernel may send a (delayed) ACK between two reads: ss must see
    # what inet_diag saw before it and after it, not necessarily the same packet count.
    assert info.segs_out <= from_ss.segs_out <= later.segs_out
    assert info.total_retrans <= from_ss.total_retrans <= later.total_retrans
    assert from_ss.rtt_ms == pytest.approx(info.rtt_ms, abs=0.01)  # ss prints tcpi_rtt/1000 with 3 decimals


@pytest.mark.netns
def test_diag_collector_attributes_a_live_mptcp_connection_to_its_interface() -> None:
    from edgepath_agent.meter import TransferServer, mptcp_socket
    from edgepath_agent.testbed.netns import Testbed, call_in_netns, netns_supported

    reason = netns_supported()
    if reason:
        pytest.skip(reason)
    with Testbed() as tb:
        server = call_in_netns(tb.server_ns, lambda: TransferServer("0.0.0.0", 0).start())
        try:

            def connect_and_collect() -> dict:
                with mptcp_socket() as s:
                    s.settimeout(5.0)
                    s.connect((tb.server_addr, server.port))  # initial subflow on wlan0 (metric 100)
                    s.sendall(struct.pack("!Q", 65536))  # ask for 64 KiB (meter.py protocol) and read them
                    got = 0
                    while got < 65536:
                        chunk = s.recv(65536 - got)
                        assert chunk, "server closed early"
                        got += len(chunk)
                    return DiagPathCollector().collect()  # while the connection is still open

            readings = call_in_netns(tb.device_ns, connect_and_collect)
        finally:
            server.close()
    assert readings.get("wlan0", {}).get("rtt_ms", 0) > 0, readings
