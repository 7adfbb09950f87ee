"""Interfaces that cannot carry a path (down, no address) are not reported to the service.

An LTE modem that is not connected or a WiFi that is not associated still exists: reported, the
service could make it the primary path and every such decision would fail when applied. The
filtering (:func:`unusable_reason` over rtnetlink's view) is checked on data here; the daemon's use of
it against a real service, with a stand-in link reader; tests/agent/netns/test_agent_links_netns.py
reads a real network namespace.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from edgepath_agent.applier import Applier, DryRunBackend, Journal, NetState, Route
from edgepath_agent.client import FailoverClient, connect
from edgepath_agent.collector import LinkState, StaticCollector, TraceCollector, unusable_reason
from edgepath_agent.collector.link import (
    IFA_F_DADFAILED,
    IFA_F_TENTATIVE,
    IFF_LOOPBACK,
    IFF_RUNNING,
    IFF_UP,
    RT_SCOPE_HOST,
    RT_SCOPE_LINK,
    RT_SCOPE_SITE,
    Address,
    LinkCounters,
    LinkReader,
    interface_counters,
    link_states_ip_json,
    link_states_netlink,
)
from edgepath_agent.daemon import Agent, AgentConfig
from edgepath_agent.status import format_status

UP = IFF_UP | IFF_RUNNING


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (LinkState("wlan0", UP, (Address("10.1.1.2"),)), None),
        (LinkState("wlan0", UP, (Address("2001:db8::2"),)), None),  # IPv6 alone is enough
        (LinkState("wlan0", UP, (Address("fd00::2", RT_SCOPE_SITE),)), None),
        (LinkState("wwan0", UP, ()), "has no address"),
        (LinkState("wwan0", UP, (Address("fe80::1", RT_SCOPE_LINK),)), "has no address"),
        (LinkState("wwan0", UP, (Address("169.254.7.1"),)), "has no address"),  # link-local, whatever its scope
        (LinkState("wwan0", UP, (Address("2001:db8::2", flags=IFA_F_TENTATIVE),)), "has no address"),
        (LinkState("wwan0", UP, (Address("2001:db8::2", flags=IFA_F_DADFAILED),)), "has no address"),
        (LinkState("wwan0", UP, (Address("127.0.0.2", RT_SCOPE_HOST),)), "has no address"),  # not a loopback device
        (LinkState("lo", UP | IFF_LOOPBACK, (Address("127.0.0.1", RT_SCOPE_HOST),)), None),
        (LinkState("wlan0", IFF_UP, (Address("10.1.1.2"),)), "is down"),  # no carrier (not associated)
        (LinkState("wlan0", 0, (Address("10.1.1.2"),)), "is down"),
        (None, "does not exist"),
    ],
    ids=lambda v: None if isinstance(v, LinkState | None) else str(v),
)
def test_unusable_reason(state: LinkState | None, reason: str | None) -> None:
    assert unusable_reason(state) == reason


# `ip -j addr show` in a device namespace: wlan0 up with carrier and an address, wwan0 up with carrier but
# only a tentative link-local address (its own address flushed), eth1 up without carrier (its peer down).
IP_JSON = json.dumps(
    [
        {"ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "addr_info": [
            {"family": "inet", "local": "127.0.0.1", "prefixlen": 8, "scope": "host"}]},
        {"ifname": "wlan0", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "addr_info": [
            {"family": "inet", "local": "10.1.1.2", "prefixlen": 24, "scope": "global"},
            {"family": "inet6", "local": "fe80::5cc1:86ff:fe13:8701", "prefixlen": 64, "scope": "link"}]},
        {"ifname": "wwan0", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "addr_info": [
            {"family": "inet6", "local": "fe80::1", "prefixlen": 64, "scope": "link", "tentative": True}]},
        {"ifname": "eth1", "flags": ["NO-CARRIER", "BROADCAST", "MULTICAST", "UP"], "addr_info": [
            {"family": "inet", "local": "10.1.3.2", "prefixlen": 24, "scope": "global"}]},
    ]
)  # fmt: skip


def test_ip_json_fallback_reads_flags_scopes_and_address_flags() -> None:
    states = link_states_ip_json(IP_JSON)
    assert {name: unusable_reason(s) for name, s in states.items()} == {
        "lo": None,
        "wlan0": None,
        "wwan0": "has no address",
        "eth1": "is down",
    }
    assert states["wwan0"].addresses == (Address("fe80::1", RT_SCOPE_LINK, IFA_F_TENTATIVE),)


class Msg(dict):  # type: ignore[type-arg]
    """A decoded netlink message as pyroute2 gives it: fields by key, attributes by get_attr."""

    def __init__(self, attrs: dict[str, Any], **fields: Any) -> None:
        super().__init__(fields)
        self.attrs = attrs

    def get_attr(self, name: str) -> Any:
        return self.attrs.get(name)


def test_netlink_messages_map_to_link_states() -> None:
    links = [
        Msg({"IFLA_IFNAME": "wlan0"}, index=2, flags=0x11043),
        Msg({"IFLA_IFNAME": "wwan0"}, index=3, flags=0x1003),
    ]
    addrs = [
        Msg({"IFA_LOCAL": "10.1.1.2", "IFA_FLAGS": 0x80}, index=2, scope=0, flags=0x80),
        Msg({"IFA_ADDRESS": "fe80::1", "IFA_FLAGS": 0xC0}, index=2, scope=RT_SCOPE_LINK, flags=0xC0),
        Msg({"IFA_ADDRESS": "2001:db8::3", "IFA_FLAGS": 0x80}, index=3, scope=0, flags=0x80),
        Msg({"IFA_LOCAL": "10.9.9.9"}, index=9, scope=0, flags=0),  # an interface not listed: ignored
    ]
    states = link_states_netlink(links, addrs)
    assert states["wlan0"].addresses == (Address("10.1.1.2", 0, 0x80), Address("fe80::1", RT_SCOPE_LINK, 0xC0))
    assert unusable_reason(states["wlan0"]) is None
    assert unusable_reason(states["wwan0"]) == "is down"  # 0x1003: UP without RUNNING (no carrier)


def test_the_reader_falls_back_to_ip_in_the_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_pyroute2(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("pyroute2"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyroute2)
    calls: list[list[str]] = []
    reader = LinkReader("ep-dev-x", runner=lambda argv: calls.append(list(argv)) or IP_JSON)
    assert unusable_reason(reader()["wwan0"]) == "has no address"
    assert calls == [["ip", "netns", "exec", "ep-dev-x", "ip", "-j", "addr", "show"]]
    with pytest.raises(OSError, match="ip -j addr show failed"):
        LinkReader(runner=lambda _argv: None)()


#: ``ip -j -s link show dev wlan0`` (iproute2 6.1's keys, trimmed to those read).
IP_STATS_JSON = json.dumps(
    [{"ifname": "wlan0", "stats64": {"rx": {"bytes": 123456, "packets": 90}, "tx": {"bytes": 7890, "packets": 45}}}]
)


def test_interface_counters_fall_back_to_ip_in_the_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyroute2", None)  # `import pyroute2` raises ImportError
    calls: list[list[str]] = []
    counters = interface_counters("wlan0", "ep-dev-x", runner=lambda argv: calls.append(list(argv)) or IP_STATS_JSON)
    assert counters == LinkCounters(rx_bytes=123456, tx_bytes=7890)
    assert calls == [["ip", "netns", "exec", "ep-dev-x", "ip", "-j", "-s", "link", "show", "dev", "wlan0"]]
    assert interface_counters("wlan9", runner=lambda _argv: None) is None  # ip fails: no such device


# The daemon against a real service (loopback), its link state from a stand-in reader.

ROUTES = NetState(
    limits=(("add_addr_accepted", 0), ("subflows", 0)),
    default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)),
    sysctls=(("net.ipv4.tcp_congestion_control", "reno"),),
)
RADIO = {
    "wlan0": {"wifi_rssi_dbm": -80.0, "link_speed_mbps": 6.0, "frequency_mhz": 2412.0},
    "wwan0": {"rsrp_dbm": -85.0, "rsrq_db": -9.0, "sinr_db": 18.0},  # a modem's last reading, still there
}


class Links:
    """Stand-in link reader: ``state[name]`` is what rtnetlink would say."""

    def __init__(self) -> None:
        self.state = {
            "wlan0": LinkState("wlan0", UP, (Address("10.1.1.2"),)),
            "wwan0": LinkState("wwan0", UP, (Address("fe80::1", RT_SCOPE_LINK),)),  # modem up, not connected
        }

    def __call__(self) -> dict[str, LinkState]:
        return dict(self.state)


class Recording(FailoverClient):
    """The real failover client, remembering every request it sends."""

    def __init__(self, url: str) -> None:
        super().__init__([connect(url, 2.0)], attempts=1, backoff_initial_s=0.01)
        self.sent: list[dict[str, Any]] = []

    def recommend(self, request: Any) -> Any:
        self.sent.append(request)
        return super().recommend(request)


def make_agent(url: str, links: Links, tmp_path: Path) -> tuple[Agent, Recording]:
    config = AgentConfig(
        device_id="dev-links", service=[url], interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, attempts=1,
        upstream_check=False, status_file=tmp_path / "status.json",
    )  # fmt: skip
    backend = DryRunBackend(ROUTES, {"wlan0": ["10.1.1.2"]}, out=None)
    applier = Applier(backend, Journal(), config.applier_config(), allowed_cc=("reno", "cubic"))
    trace = TraceCollector()
    trace.set(RADIO)
    client = Recording(url)
    agent = Agent(
        config, client, applier, [trace, StaticCollector(config.interfaces)], measure=lambda _: None, links=links
    )
    return agent, client


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


def test_an_interface_without_an_address_is_not_reported_and_is_logged_once(
    service: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    links = Links()
    agent, client = make_agent(service.grpc_url, links, tmp_path)
    agent.history["wwan0"][1].append({"t_ms": 1.0, "throughput_bps": 1e6})  # measured while it was connected
    caplog.set_level(logging.INFO, logger="edgepath_agent")
    try:
        for _ in range(3):
            result = agent.step()
            assert not result.kept_last and not result.skipped, result.error
            assert result.applied is not None and result.applied.primary == "wlan0"  # the only path offered
        assert [[i["name"] for i in r["interfaces"]] for r in client.sent] == [["wlan0"]] * 3
        assert all("subflow_histories" not in r for r in client.sent)  # wwan0's history would name no interface
        left = _logged(caplog, "wwan0 has no address; not reported to the service until it has one")
        assert len(left) == 1 and left[0].levelno == logging.WARNING  # once, not every step
        agent.write_status()
        record = json.loads((tmp_path / "status.json").read_text())
        assert record["unreported_interfaces"] == {"wwan0": "has no address"}
        assert "not reported:   wwan0 has no address" in format_status(record)

        links.state["wwan0"] = LinkState("wwan0", UP, (Address("10.1.2.2"),))  # the modem connected
        for _ in range(2):
            agent.step()
        assert [i["name"] for i in client.sent[-1]["interfaces"]] == ["wlan0", "wwan0"]
        back = _logged(caplog, "wwan0 is up with an address again; reported to the service")
        assert len(back) == 1 and back[0].levelno == logging.INFO
        assert agent.unreported == {}
    finally:
        agent.close(restore=False)


def test_no_interface_left_skips_the_step_without_asking_the_service(
    service: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    links = Links()
    links.state["wlan0"] = LinkState("wlan0", IFF_UP, (Address("10.1.1.2"),))  # not associated: no carrier
    agent, client = make_agent(service.http_url, links, tmp_path)
    caplog.set_level(logging.INFO, logger="edgepath_agent")
    try:
        first, second = agent.step(), agent.step()
        assert client.sent == []  # the service refuses a request without interfaces: none is sent
        for result in (first, second):
            assert result.skipped and result.kept_last and result.recommendation is None
            assert (
                result.error
                == "no managed interface can carry a path (wlan0 is down; wwan0 has no address): step skipped"
            )
        skips = _logged(caplog, "step skipped, keeping the last applied configuration")
        assert [r.levelno for r in skips] == [logging.WARNING, logging.INFO]
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

        links.state["wlan0"] = LinkState("wlan0", UP, (Address("10.1.1.2"),))
        result = agent.step()
        assert not result.skipped and result.applied is not None and result.applied.primary == "wlan0"
        assert [i["name"] for i in client.sent[0]["interfaces"]] == ["wlan0"]
    finally:
        agent.close(restore=False)


def test_an_unreadable_link_state_reports_every_interface_and_warns_once(
    service: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> dict[str, LinkState]:
        raise OSError("setns(ep-gone): No such file or directory")

    agent, client = make_agent(service.grpc_url, Links(), tmp_path)
    agent.links = broken
    caplog.set_level(logging.INFO, logger="edgepath_agent")
    try:
        agent.step()
        agent.step()
        assert [i["name"] for i in client.sent[-1]["interfaces"]] == ["wlan0", "wwan0"]  # as before the check
        assert len(_logged(caplog, "cannot read the interfaces' link state")) == 1
    finally:
        agent.close(restore=False)
