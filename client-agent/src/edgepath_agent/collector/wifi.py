"""WiFi collector: RSSI, link speed and frequency from nl80211.

:class:`Nl80211WifiCollector` (the default where pyroute2 is installed, which the
base install is) asks the kernel's nl80211 generic-netlink family directly through
pyroute2's ``IW``: ``NL80211_CMD_GET_INTERFACE`` (dump) gives each wireless
interface's name, type and ``NL80211_ATTR_WIPHY_FREQ`` (MHz), and
``NL80211_CMD_GET_STATION`` on a station-mode interface gives the access point's
``NL80211_STA_INFO_SIGNAL`` (dBm) and ``NL80211_STA_INFO_TX_BITRATE`` /
``RX_BITRATE`` → ``NL80211_RATE_INFO_BITRATE32`` (units of 100 kbit/s)
(include/uapi/linux/nl80211.h). No text is parsed; iw's own documentation asks
scripts not to parse its output.

:class:`WifiCollector` is the fallback over ``iw`` text. Sources: ``iw dev`` lists the
wireless interfaces; ``iw dev IFACE link`` reports
the association (nl80211 ``NL80211_STA_INFO_SIGNAL`` as ``signal: -52 dBm``,
``NL80211_STA_INFO_TX_BITRATE`` as ``tx bitrate: 780.0 MBit/s ...`` and the
channel as ``freq: 5180``). The parsers are pure functions over that text so they
are tested on sample outputs (tests/agent/fixtures/).

``link_speed_mbps`` is the TX bitrate (what Android's ``WifiInfo.getLinkSpeed``
reports, matching the mobilebandwidth data set), falling back to the RX bitrate.

nl80211 answers per network namespace: a wiphy and its interfaces live in one namespace
(``iw phy PHY set netns``; a wireless interface cannot leave its wiphy's), and a dump lists
the requesting socket's namespace only. With ``netns`` (the agent's ``--netns``) both
collectors ask from inside that namespace, so a WiFi interface of the host is never
reported under the name of an interface of the managed namespace.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from edgepath_agent.collector.base import Readings, in_netns, netns_argv, run_tool

_IFACE = re.compile(r"^\s*Interface\s+(\S+)\s*$", re.MULTILINE)
_SIGNAL = re.compile(r"^\s*signal:\s*(-?\d+(?:\.\d+)?)\s*dBm", re.MULTILINE)
_FREQ = re.compile(r"^\s*freq:\s*(\d+(?:\.\d+)?)", re.MULTILINE)
_TX = re.compile(r"^\s*tx bitrate:\s*(\d+(?:\.\d+)?)\s*MBit/s", re.MULTILINE)
_RX = re.compile(r"^\s*rx bitrate:\s*(\d+(?:\.\d+)?)\s*MBit/s", re.MULTILINE)


def parse_iw_dev(text: str) -> list[str]:
    """Wireless interface names from ``iw dev`` output (in the order listed)."""
    return _IFACE.findall(text)


def parse_iw_link(text: str) -> dict[str, Any]:
    """Fields of ``InterfaceContext`` from ``iw dev IFACE link`` output.

    Returns
    -------
    dict
        ``access_type`` = ``"WIFI"`` plus ``wifi_rssi_dbm`` (dBm), ``link_speed_mbps``
        (Mbit/s), ``frequency_mhz`` (MHz) when present; ``{}`` when not connected.
    """
    if not text.strip() or text.strip().startswith("Not connected"):
        return {}
    out: dict[str, Any] = {"access_type": "WIFI"}
    if m := _SIGNAL.search(text):
        out["wifi_rssi_dbm"] = float(m.group(1))
    if m := _TX.search(text) or _RX.search(text):
        out["link_speed_mbps"] = float(m.group(1))
    if m := _FREQ.search(text):
        out["frequency_mhz"] = float(m.group(1))
    return out


class WifiCollector:
    """nl80211 readings of every associated WiFi interface, via ``iw``.

    Parameters
    ----------
    runner
        ``argv → stdout or None``; defaults to running the real tool.
    netns
        Network namespace whose wireless interfaces are read (``ip netns exec NAME iw …``); the
        current one when ``None``.
    """

    name = "wifi"

    def __init__(self, runner: Callable[[Sequence[str]], str | None] = run_tool, *, netns: str | None = None) -> None:
        self._run = runner
        self.netns = netns

    def collect(self) -> Readings:
        """Readings of each associated interface (dBm, Mbit/s, MHz); ``{}`` when ``iw`` is missing or fails."""
        listing = self._run(netns_argv(["iw", "dev"], self.netns))
        if listing is None:
            return {}
        readings: Readings = {}
        for ifname in parse_iw_dev(listing):
            link = self._run(netns_argv(["iw", "dev", ifname, "link"], self.netns))
            fields = parse_iw_link(link or "")
            if fields:
                readings[ifname] = fields
        return readings


#: nl80211 interface type of a client (``NL80211_IFTYPE_STATION``).
NL80211_IFTYPE_STATION = 2


def nl80211_readings(interfaces: Iterable[Any], stations_of: Callable[[int], Iterable[Any]]) -> Readings:
    """``InterfaceContext`` fields per associated station-mode interface from decoded nl80211 messages.

    Parameters
    ----------
    interfaces
        ``NL80211_CMD_GET_INTERFACE`` replies (pyroute2 ``nl80211cmd``, decoded).
    stations_of
        ``ifindex → NL80211_CMD_GET_STATION`` replies (the associated access point).

    Returns
    -------
    Readings
        ``{ifname: {"access_type": "WIFI", "wifi_rssi_dbm", "link_speed_mbps", "frequency_mhz"}}``
        (dBm, Mbit/s, MHz); interfaces without an associated station are left out.
    """
    readings: Readings = {}
    for msg in interfaces:
        ifname = msg.get_attr("NL80211_ATTR_IFNAME")
        ifindex = msg.get_attr("NL80211_ATTR_IFINDEX")
        iftype = msg.get_attr("NL80211_ATTR_IFTYPE")
        if not ifname or ifindex is None or (iftype is not None and iftype != NL80211_IFTYPE_STATION):
            continue
        fields: dict[str, Any] = {}
        for station in stations_of(ifindex):
            info = station.get_attr("NL80211_ATTR_STA_INFO")
            if info is None:
                continue
            signal = info.get_attr("NL80211_STA_INFO_SIGNAL")
            if signal is not None:
                fields["wifi_rssi_dbm"] = float(signal)
            for key in ("NL80211_STA_INFO_TX_BITRATE", "NL80211_STA_INFO_RX_BITRATE"):
                rate = info.get_attr(key)
                value = rate.get_attr("NL80211_RATE_INFO_BITRATE32") if rate is not None else None
                if value is None and rate is not None:
                    value = rate.get_attr("NL80211_RATE_INFO_BITRATE")
                if value:
                    fields["link_speed_mbps"] = value / 10.0  # 100 kbit/s units
                    break
            break  # a station-mode interface has one peer: its access point
        if not fields:
            continue
        freq = msg.get_attr("NL80211_ATTR_WIPHY_FREQ")
        if freq:
            fields["frequency_mhz"] = float(freq)
        readings[str(ifname)] = {"access_type": "WIFI", **fields}
    return readings


class Nl80211WifiCollector:
    """WiFi readings from nl80211 through pyroute2 ``IW`` (see module docstring).

    A kernel without nl80211 (no WiFi driver loaded) or a missing pyroute2 reports
    nothing, like an absent tool.

    Parameters
    ----------
    netns
        Network namespace whose wireless interfaces are read (the nl80211 socket is opened from a
        thread that entered it); the current one when ``None``.
    """

    name = "wifi-nl80211"

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns

    def collect(self) -> Readings:
        """Readings of each associated station-mode interface (dBm, Mbit/s, MHz); ``{}`` without nl80211.

        Raises
        ------
        OSError
            When ``netns`` cannot be entered.
        """
        try:
            import pyroute2  # noqa: F401
        except ImportError:
            return {}
        return in_netns(self.netns, _read_nl80211)


def _read_nl80211() -> Readings:
    """:func:`nl80211_readings` of the current network namespace; ``{}`` when nl80211 is absent or fails."""
    from pyroute2 import IW
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        iw = IW()
    except (NetlinkError, OSError):  # no nl80211 family: no wireless device on this kernel
        return {}
    try:
        return nl80211_readings(list(iw.get_interfaces_dump()), lambda ifindex: list(iw.get_stations(ifindex)))
    except (NetlinkError, OSError):
        return {}
    finally:
        iw.close()
