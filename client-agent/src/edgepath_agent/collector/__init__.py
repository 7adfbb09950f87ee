"""Collectors of radio, path and kernel context (one source each, behind :class:`Collector`)."""

from edgepath_agent.collector.base import Collector, LinkAwareCollector, Readings, merge_contexts
from edgepath_agent.collector.kernel import KernelCapabilities, KernelCollector, read_capabilities
from edgepath_agent.collector.link import (
    LinkCounters,
    LinkReader,
    LinkSnapshot,
    LinkState,
    address_owners,
    interface_counters,
    ipv4_addresses,
    unusable_reason,
)
from edgepath_agent.collector.modem import ModemCollector
from edgepath_agent.collector.path import DiagPathCollector, PathCollector
from edgepath_agent.collector.static import StaticCollector, TraceCollector, parse_interface_map
from edgepath_agent.collector.wifi import Nl80211WifiCollector, WifiCollector

__all__ = [
    "Collector",
    "DiagPathCollector",
    "KernelCapabilities",
    "KernelCollector",
    "LinkAwareCollector",
    "LinkCounters",
    "LinkReader",
    "LinkSnapshot",
    "LinkState",
    "ModemCollector",
    "Nl80211WifiCollector",
    "PathCollector",
    "Readings",
    "StaticCollector",
    "TraceCollector",
    "WifiCollector",
    "address_owners",
    "interface_counters",
    "ipv4_addresses",
    "merge_contexts",
    "parse_interface_map",
    "read_capabilities",
    "unusable_reason",
]
