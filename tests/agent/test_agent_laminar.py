"""The laminar endpoint flag (Linux 6.18, issue 21 item 6): when the agent adds it, and when it refuses.

The kernel and iproute2 facts are inputs here (a capabilities record and the text of ``ip mptcp
help``); the flag's effect on real subflows is in tests/agent/netns/test_agent_laminar_netns.py.
"""

from __future__ import annotations

import pytest
from edgepath_agent.applier.netlink import FLAG_BITS
from edgepath_agent.collector.kernel import KernelCapabilities, kernel_version, read_capabilities
from edgepath_agent.daemon import AgentConfig, LaminarUnavailable, laminar_support, with_laminar

IP_61 = "FLAG := [ signal | subflow | backup | fullmesh ]"
IP_618 = "FLAG := [ signal | subflow | laminar | backup | fullmesh ]"


def caps(release: str) -> KernelCapabilities:
    return KernelCapabilities(mptcp_enabled=True, kernel_release=release)


@pytest.mark.parametrize(
    ("release", "version"),
    [("6.18.44-fc-v669", (6, 18)), ("6.17.9-arch1", (6, 17)), ("7.0", (7, 0)), ("6", (6, 0)), ("", (0, 0)),
     (None, (0, 0)), ("garbage", (0, 0))],
)  # fmt: skip
def test_kernel_version(release, version):
    assert kernel_version(release) == version


def test_release_is_read_from_proc(tmp_path):
    (tmp_path / "kernel").mkdir()
    (tmp_path / "kernel" / "osrelease").write_text("6.18.2-1\n")
    got = read_capabilities(tmp_path)
    assert got.kernel_release == "6.18.2-1" and got.laminar_endpoints
    assert not caps("6.17.13").laminar_endpoints


def test_flag_bit_is_the_uapi_value():
    assert FLAG_BITS["laminar"] == 1 << 5  # MPTCP_PM_ADDR_FLAG_LAMINAR, include/uapi/linux/mptcp.h


@pytest.mark.parametrize(
    ("backend", "release", "ip_help", "why"),
    [
        ("netlink", "6.18.1", IP_61, None),
        ("command", "6.18.1", IP_618, None),
        ("command", "6.18.1", IP_61, "iproute2 does not know laminar"),
        ("dry-run", "6.18.1", IP_61, "iproute2 does not know laminar"),
        ("netlink", "6.17.0", IP_618, "has no laminar endpoint flag"),
        ("networkmanager", "6.18.1", IP_618, "NetworkManager"),
    ],
)
def test_support_needs_kernel_and_backend(tmp_path, backend, release, ip_help, why):
    config = AgentConfig(backend=backend, journal=tmp_path / "j.json")
    reason = laminar_support(config, caps(release), ip_help)
    assert (reason is None) == (why is None) and (why is None or why in reason)


def test_auto_adds_the_flag_where_supported_and_leaves_it_out_elsewhere(tmp_path):
    config = AgentConfig(backend="netlink", journal=tmp_path / "j.json")
    assert config.laminar == "auto"
    assert with_laminar(config, caps("6.18.3"), IP_61).endpoint_flags == ["subflow", "laminar"]
    assert with_laminar(config, caps("6.12.0"), IP_618).endpoint_flags == ["subflow"]
    off = config.model_copy(update={"laminar": "off"})
    assert with_laminar(off, caps("6.18.3"), IP_618).endpoint_flags == ["subflow"]


def test_on_where_unsupported_is_refused_naming_why(tmp_path):
    config = AgentConfig(backend="command", laminar="on", journal=tmp_path / "j.json")
    with pytest.raises(LaminarUnavailable, match="laminar = on, but the installed iproute2"):
        with_laminar(config, caps("6.18.3"), IP_61)
