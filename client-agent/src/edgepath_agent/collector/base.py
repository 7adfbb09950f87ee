"""Collector interface: each radio/path/kernel source is one :class:`Collector`.

A collector returns *partial* interface contexts keyed by kernel interface name
(``{"wlan0": {"access_type": "WIFI", "wifi_rssi_dbm": -52.0, ...}}``) using the
field names and units of ``InterfaceContext`` in proto/edgepath/v1/edgepath.proto.
:func:`merge_contexts` combines several sources into the ``interfaces`` list of a
``RecommendRequest``. A source whose tool or kernel interface is absent on the
machine returns ``{}`` instead of raising (issue 5: "a source absent on the machine
reports nothing rather than failing").
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Partial contexts of one source: interface name → InterfaceContext fields.
Readings = dict[str, dict[str, Any]]


@runtime_checkable
class Collector(Protocol):
    """One source of interface context."""

    name: str

    def collect(self) -> Readings:
        """Current readings; ``{}`` when the source is absent. Never raises for a missing tool."""


@runtime_checkable
class LinkAwareCollector(Protocol):
    """A :class:`Collector` that needs the interfaces' addresses and can take them from the step's snapshot.

    ``links`` is a :data:`~edgepath_agent.collector.link.LinkSnapshot` (interface name → ``LinkState``) read once
    per agent step; :meth:`collect_with_links` returns what :meth:`Collector.collect` would, without reading links
    or addresses itself.
    """

    name: str

    def collect(self) -> Readings:
        """Current readings, reading the addresses itself."""

    def collect_with_links(self, links: Mapping[str, Any]) -> Readings:
        """Current readings, with the addresses of ``links`` (no link or address dump of its own)."""


def run_tool(argv: Sequence[str], timeout_s: float = 3.0) -> str | None:
    """Run a read-only tool and return its stdout, or ``None`` if absent/failing.

    Parameters
    ----------
    argv
        Command and arguments (no shell).
    timeout_s
        Seconds before the tool is abandoned.
    """
    if shutil.which(argv[0]) is None:
        return None
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("collector tool %s failed: %s", argv, exc)
        return None
    if proc.returncode != 0:
        log.debug("collector tool %s exited %s: %s", argv, proc.returncode, proc.stderr.strip())
        return None
    return proc.stdout


def netns_argv(argv: Sequence[str], netns: str | None) -> list[str]:
    """``argv`` run inside network namespace ``netns`` (``ip netns exec NAME …``), unchanged when ``None``."""
    return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)


def in_netns(netns: str | None, fn: Callable[[], T]) -> T:
    """``fn()`` in network namespace ``netns`` (here when ``None``).

    Netlink sockets ``fn`` opens and the ``/proc/sys/net`` files it reads are those of ``netns``:
    it runs in a thread that entered it (:func:`~edgepath_agent.testbed.netns.call_in_netns`).

    Raises
    ------
    OSError
        When ``netns`` cannot be entered (no such namespace, no ``CAP_SYS_ADMIN``); any exception of
        ``fn`` is re-raised.
    """
    if netns is None:
        return fn()
    from edgepath_agent.testbed.netns import call_in_netns

    return call_in_netns(netns, fn)


def merge_contexts(
    sources: Iterable[Mapping[str, Mapping[str, Any]]], only: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """Merge partial readings into ``RecommendRequest.interfaces`` entries.

    Later sources fill fields the earlier ones left empty (first non-``None`` wins).
    Interfaces without an ``access_type`` are dropped (the service rejects them).

    Parameters
    ----------
    sources
        Readings of each collector, in priority order.
    only
        If given, keep only these interface names (in this order).

    Returns
    -------
    list of dict
        One dict per interface: ``name``, ``access_type`` and the measured fields.
    """
    merged: dict[str, dict[str, Any]] = {}
    for readings in sources:
        for ifname, fields in readings.items():
            slot = merged.setdefault(ifname, {"name": ifname})
            for key, value in fields.items():
                if value is not None and slot.get(key) is None:
                    slot[key] = value
    names = list(only) if only is not None else sorted(merged)
    return [merged[n] for n in names if n in merged and merged[n].get("access_type")]
