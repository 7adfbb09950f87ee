"""WiFi collector: RSSI, link speed and frequency from nl80211 through ``iw``.

Sources: ``iw dev`` lists the wireless interfaces; ``iw dev IFACE link`` reports
the association (nl80211 ``NL80211_STA_INFO_SIGNAL`` as ``signal: -52 dBm``,
``NL80211_STA_INFO_TX_BITRATE`` as ``tx bitrate: 780.0 MBit/s ...`` and the
channel as ``freq: 5180``). The parsers are pure functions over that text so they
are tested on sample outputs (tests/agent/fixtures/).

``link_speed_mbps`` is the TX bitrate (what Android's ``WifiInfo.getLinkSpeed``
reports, matching the mobilebandwidth data set), falling back to the RX bitrate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from edgepath_agent.collector.base import Readings, run_tool

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
    """

    name = "wifi"

    def __init__(self, runner: Callable[[Sequence[str]], str | None] = run_tool) -> None:
        self._run = runner

    def collect(self) -> Readings:
        listing = self._run(["iw", "dev"])
        if listing is None:
            return {}
        readings: Readings = {}
        for ifname in parse_iw_dev(listing):
            link = self._run(["iw", "dev", ifname, "link"])
            fields = parse_iw_link(link or "")
            if fields:
                readings[ifname] = fields
        return readings
