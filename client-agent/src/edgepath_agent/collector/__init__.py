"""Collectors of radio, path and kernel context (one source each, behind :class:`Collector`)."""

from edgepath_agent.collector.base import Collector, Readings, merge_contexts
from edgepath_agent.collector.kernel import KernelCapabilities, KernelCollector, read_capabilities
from edgepath_agent.collector.link import LinkCounters, LinkReader, LinkState, interface_counters, unusable_reason
from edgepath_agent.collector.modem import ModemCollector
from edgepath_agent.collector.path import DiagPathCollector, PathCollector
from edgepath_agent.collector.static import StaticCollector, TraceCollector, parse_interface_map
from edgepath_agent.collector.wifi import Nl80211WifiCollector, WifiCollector

__all__ = [
    "Collector",
    "DiagPathCollector",
    "KernelCapabilities",
    "KernelCollector",
    "LinkCounters",
    "LinkReader",
    "LinkState",
    "ModemCollector",
    "Nl80211WifiCollector",
    "PathCollector",
    "Readings",
    "StaticCollector",
    "TraceCollector",
    "WifiCollector",
    "interface_counters",
    "merge_contexts",
    "parse_interface_map",
    "read_capabilities",
    "unusable_reason",
]
