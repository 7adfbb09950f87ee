"""Upstream probes and the primary-path guard (issue 21, item 6) without namespaces.

``probe_upstream`` runs against real sockets on loopback (``lo``); the guard's decisions
are driven by scripted probe results (the real-kernel behaviour is in
netns/test_agent_upstream_netns.py). Also: the path-manager reading prefers
``path_manager`` over the deprecated ``pm_type``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from edgepath_agent.collector import read_capabilities
from edgepath_agent.daemon import AgentConfig
from edgepath_agent.upstream import PrimaryGuard, UpstreamProbe, parse_target, probe_upstream


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        yield s.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_probe_counts_a_handshake_or_a_reset_as_an_answer(listener: int) -> None:
    ok = probe_upstream("lo", ("127.0.0.1", listener), "127.0.0.1", timeout_s=1.0)
    assert ok.ok and ok.detail == "handshake completed" and ok.interface == "lo"
    refused = probe_upstream("lo", ("127.0.0.1", closed_port()), None, timeout_s=1.0)
    assert refused.ok and "reset" in refused.detail


def test_probe_of_a_missing_interface_fails_with_the_reason() -> None:
    result = probe_upstream("nosuchif0", ("127.0.0.1", 9), None, timeout_s=0.2)
    assert not result.ok and "ENODEV" in result.detail


def test_parse_target_and_default_target() -> None:
    assert parse_target("10.0.0.1:5201") == ("10.0.0.1", 5201)
    assert parse_target("[2001:db8::1]:443") == ("2001:db8::1", 443)
    for bad in ("10.0.0.1", "host:0", ":80", "host:http"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_target(bad)
    cfg = AgentConfig(device_id="d", service=["grpcs://edge.example:50051", "http://edge.example:8080"])
    assert cfg.upstream_target_addr() == ("edge.example", 50051)
    assert AgentConfig(device_id="d", upstream_target="192.0.2.7:80").upstream_target_addr() == ("192.0.2.7", 80)


class Script:
    """Scripted probe results per interface: ``up[name]`` says whether it answers now."""

    def __init__(self, **up: bool) -> None:
        self.up = up
        self.calls: list[str] = []

    def __call__(self, interface: str) -> UpstreamProbe:
        self.calls.append(interface)
        ok = self.up.get(interface, False)
        return UpstreamProbe(interface, ok, "answers" if ok else "no answer", 1.0, 0)


def test_choose_probes_the_path_about_to_become_primary() -> None:
    script = Script(wlan0=True, wwan0=True)
    guard = PrimaryGuard(("wlan0", "wwan0"), script, failures=2)
    assert guard.choose("wlan0") == ("wlan0", None) and script.calls == ["wlan0"]
    script.up["wlan0"] = False
    chosen, reason = guard.choose("wlan0")
    assert chosen == "wwan0" and reason and "wlan0 has no upstream connectivity" in reason
    assert script.calls[1:] == ["wlan0", "wlan0", "wwan0"]  # `failures` tries before giving up on it
    script.up["wwan0"] = False
    assert guard.choose("wlan0") == ("wlan0", None)  # nothing answers: nothing better to do


def test_watch_leaves_after_consecutive_failures_and_restores_after_recoveries() -> None:
    script = Script(wlan0=True, wwan0=True)
    guard = PrimaryGuard(("wlan0", "wwan0"), script, failures=2, recoveries=2)
    assert guard.watch("wlan0", "wlan0") is None
    script.up["wlan0"] = False
    assert guard.watch("wlan0", "wlan0") is None  # one failure: could be one lost SYN
    change = guard.watch("wlan0", "wlan0")
    assert change is not None and change[0] == "wwan0" and "lost upstream connectivity" in change[1]
    assert guard.watch("wwan0", "wlan0") is None  # the preferred path is still dead
    script.up["wlan0"] = True
    assert guard.watch("wwan0", "wlan0") is None  # one answer: not yet
    change = guard.watch("wwan0", "wlan0")
    assert change is not None and change[0] == "wlan0" and "answers again" in change[1]
    script.up["wwan0"] = False
    script.up["wlan0"] = False
    assert guard.watch("wlan0", "wlan0") is None
    assert guard.watch("wlan0", "wlan0") is None  # both dead: stay


def test_path_manager_prefers_path_manager_over_deprecated_pm_type(tmp_path: Path) -> None:
    mptcp = tmp_path / "net" / "mptcp"
    mptcp.mkdir(parents=True)
    (mptcp / "enabled").write_text("1\n")
    (mptcp / "pm_type").write_text("1\n")
    caps = read_capabilities(tmp_path)
    assert caps.path_manager == "userspace" and caps.path_managers == ("kernel", "userspace")  # before 6.15
    (mptcp / "path_manager").write_text("kernel\n")
    (mptcp / "available_path_managers").write_text("kernel userspace\n")
    caps = read_capabilities(tmp_path)
    assert caps.path_manager == "kernel" and caps.path_managers == ("kernel", "userspace")
