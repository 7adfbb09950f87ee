"""Agent-side hardening: typed, validated decisions only; TLS to the service with verification; key-file mode."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from edgepath.security.auth import TokenFile
from edgepath_agent.client import ServiceError, connect
from edgepath_agent.safety import (
    ClientCredentials,
    UnsafeDecision,
    check_argv,
    check_key_file,
    check_own_address,
    check_own_interface,
    check_sysctl,
    safe_decision,
    validate_interface_name,
)


def _helpers() -> Any:
    name = "edge_security_helpers"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "security" / "edge_security_helpers.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


OWN = ["wlan0", "wwan0"]


@pytest.mark.parametrize("name", ["wlan0", "wwan0", "eth0.100", "veth-dev1", "x" * 15])
def test_valid_interface_names(name: str) -> None:
    assert validate_interface_name(name) == name


@pytest.mark.parametrize(
    "name", ["", ".", "..", "x" * 16, "a/b", "eth0:1", "wlan0 up", "wlan0\t", "-j", "wl\nan0", 7, None]
)
def test_invalid_interface_names(name: Any) -> None:
    with pytest.raises(UnsafeDecision):
        validate_interface_name(name)


def test_interfaces_and_addresses_must_be_the_devices_own() -> None:
    assert check_own_interface("wlan0", OWN) == "wlan0"
    with pytest.raises(UnsafeDecision, match="not one of this device"):
        check_own_interface("eth9", OWN)
    with pytest.raises(UnsafeDecision):  # a valid kernel name (no shell ever sees it), but not ours
        check_own_interface("wlan0;reboot", OWN)
    addrs = {"wlan0": ["192.168.1.20/24"], "wwan0": ["10.64.0.7"]}
    assert check_own_address("192.168.1.20", addrs) == "192.168.1.20"
    assert check_own_address("10.64.0.7", addrs, interface="wwan0") == "10.64.0.7"
    with pytest.raises(UnsafeDecision):
        check_own_address("10.64.0.7", addrs, interface="wlan0")
    with pytest.raises(UnsafeDecision):
        check_own_address("8.8.8.8", addrs)
    with pytest.raises(UnsafeDecision):
        check_own_address("192.168.1.20; rm -rf /", addrs)


def test_sysctls_come_from_the_allowlist_and_the_kernel() -> None:
    assert check_sysctl("net.ipv4.tcp_congestion_control", "bbr", ["cubic", "bbr"]) == (
        "net.ipv4.tcp_congestion_control",
        "bbr",
    )
    with pytest.raises(UnsafeDecision, match="allowlist"):
        check_sysctl("kernel.core_pattern", "|/tmp/x")
    with pytest.raises(UnsafeDecision, match="not a valid"):
        check_sysctl("net.ipv4.tcp_congestion_control", "bbr; reboot")
    with pytest.raises(UnsafeDecision, match="not allowed by this kernel"):
        check_sysctl("net.ipv4.tcp_congestion_control", "lia", ["cubic", "reno"])


def test_commands_are_argv_lists_for_ip_or_sysctl_only() -> None:
    assert check_argv(["ip", "mptcp", "endpoint", "show"])[0] == "ip"
    assert check_argv(["ip", "netns", "exec", "dev", "sysctl", "-n", "x"])[4] == "sysctl"
    for bad in ("ip mptcp endpoint show", ["sh", "-c", "ip"], ["ip", "a\x00b"], [], ["ip", "netns", "exec", "n", "sh"]):
        with pytest.raises(UnsafeDecision):
            check_argv(bad)


def test_safe_decision_keeps_only_validated_typed_fields() -> None:
    rec = {
        "primary_path": {"interface": "wwan0"},
        "scheduler": {"subflows": [{"interface": "wlan0", "weight": 0.3}, {"interface": "wwan0", "weight": 0.7}]},
        "congestion": {"mptcp_level": "olia", "subflow_level": "cubic"},
        "command": "reboot",  # ignored: never run
    }
    d = safe_decision(rec, OWN, allowed_cc=["cubic", "reno"])
    assert d.primary == "wwan0" and d.weights == {"wlan0": 0.3, "wwan0": 0.7}
    assert d.congestion_control == "cubic"  # olia not allowed by this kernel: next advice
    with pytest.raises(UnsafeDecision):
        safe_decision({"primary_path": {"interface": "eth9"}}, OWN)
    with pytest.raises(UnsafeDecision):
        safe_decision(
            {"primary_path": {"interface": "wlan0"}, "scheduler": {"subflows": [{"interface": "wlan0", "weight": 2}]}},
            OWN,
        )


def test_key_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "device.key"
    key.write_text("not really a key")
    os.chmod(key, 0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        check_key_file(key)
    with pytest.raises(PermissionError):
        ClientCredentials(cert_file=tmp_path / "device.crt", key_file=key)
    os.chmod(key, 0o600)
    assert check_key_file(key) == key


@pytest.fixture(scope="module")
def tls_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, str]]:
    h = _helpers()
    pki = h.make_pki(tmp_path_factory.mktemp("pki"), clients=["agent-1"])
    tokens = TokenFile(tmp_path_factory.mktemp("tok") / "tokens.json")
    token = tokens.add("agent-1")
    with h.running_service(
        profile="prod",
        tls_cert_file=pki.server_cert,
        tls_key_file=pki.server_key,
        tls_client_ca_file=pki.ca_cert,
        auth_tokens_file=tokens.path,
    ) as svc:
        yield svc, pki, token


REQUEST = {"device_id": "agent-1", "interfaces": [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60.0}]}


@pytest.mark.parametrize("scheme", ["grpcs", "https"])
def test_agent_client_over_tls_with_verification(tls_service: tuple[Any, Any, str], scheme: str) -> None:
    svc, pki, token = tls_service
    cert, key = pki.client("agent-1")
    creds = ClientCredentials(ca_file=pki.ca_cert, cert_file=cert, key_file=key, token=token)
    port = svc.grpc_port if scheme == "grpcs" else svc.http_port
    client = connect(f"{scheme}://localhost:{port}", timeout_s=5.0, credentials=creds)
    try:
        rec = client.recommend(REQUEST)
        assert rec["primary_path"]["interface"] == "wlan0"
    finally:
        client.close()
    # Without the CA that signed the service's certificate, the agent refuses the server.
    untrusted = ClientCredentials(cert_file=cert, key_file=key, token=token)
    client = connect(f"{scheme}://localhost:{port}", timeout_s=5.0, credentials=untrusted)
    try:
        with pytest.raises(ServiceError) as err:
            client.recommend(REQUEST)
        assert err.value.code == "UNAVAILABLE"
    finally:
        client.close()
