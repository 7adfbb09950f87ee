"""Static and trace sources: access types from configuration, radio values from a trace.

* :class:`StaticCollector` names the access type of interfaces that no radio tool
  describes (e.g. ``wwan0=LTE`` on a modem not managed by ModemManager, or the
  testbed's veth interfaces).
* :class:`TraceCollector` replays recorded radio values (e.g. one paired row of the
  mobilebandwidth data set in the testbed): the emulated links carry no radio, so
  the context comes from the trace the links are shaped from. Reports say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgepath_agent.collector.base import Readings

ACCESS_TYPES = ("WIFI", "LTE", "NR", "ETHERNET")


def parse_interface_map(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["wlan0=WIFI", "wwan0=LTE"]`` → ``{"wlan0": "WIFI", "wwan0": "LTE"}``.

    Raises
    ------
    ValueError
        For an item without ``=``, an unknown access type, or an interface given twice (``wlan0=WIFI`` and
        ``wlan0=LTE``: the last one used to win without a word).
    """
    out: dict[str, str] = {}
    for item in items:
        name, sep, access = item.partition("=")
        access = access.strip().upper()
        if not sep or not name.strip() or access not in ACCESS_TYPES:
            raise ValueError(f"interface {item!r}: use NAME=ACCESS with ACCESS one of {', '.join(ACCESS_TYPES)}")
        if name.strip() in out:
            raise ValueError(
                f"interface {name.strip()} is given twice ({name.strip()}={out[name.strip()]}, {item}): give each "
                "interface once"
            )
        out[name.strip()] = access
    return out


class StaticCollector:
    """Fixed ``access_type`` per interface name."""

    name = "static"

    def __init__(self, access_types: Mapping[str, str]) -> None:
        self.access_types = dict(access_types)

    def collect(self) -> Readings:
        return {name: {"access_type": access} for name, access in self.access_types.items()}


class TraceCollector:
    """Readings set from outside (one trace step at a time)."""

    name = "trace"

    def __init__(self) -> None:
        self.current: Readings = {}

    def set(self, readings: Mapping[str, Mapping[str, Any]]) -> None:
        self.current = {k: dict(v) for k, v in readings.items()}

    def collect(self) -> Readings:
        return {k: dict(v) for k, v in self.current.items()}
