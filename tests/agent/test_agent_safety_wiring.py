"""The safety checks wired into the agent: the applier, the command backend, the daemon and `edgepath-agent run`.

Everything runs for real: the dry-run backend (the applier's own simulator, no
mocks), real ``ip``/``sh`` executables for the argv check, a real mTLS service for
the credentials. Kernel state itself is exercised in tests/agent/netns/.
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import math
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from edgepath.security.auth import TokenFile
from edgepath_agent.applier import (
    CC_SYSCTL,
    Applier,
    ApplierConfig,
    ApplyError,
    CommandBackend,
    DryRunBackend,
    Journal,
    NetState,
    RejectedRecommendation,
    Route,
)
from edgepath_agent.applier.backend import run_checked
from edgepath_agent.cli import EXIT_CONFIG, app
from edgepath_agent.client import connect, connect_failover
from edgepath_agent.daemon import Agent, AgentConfig, InterfaceMissing, check_interfaces, load_config
from edgepath_agent.safety import UnsafeDecision
from pydantic import ValidationError
from typer.testing import CliRunner

WLAN = Route(dev="wlan0", gateway="10.1.1.1", metric=100)
WWAN = Route(dev="wwan0", gateway="10.1.2.1", metric=200)
ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}
START = NetState(default_routes=(WLAN, WWAN), sysctls=((CC_SYSCTL, "reno"),))


def make(tmp_path: Path) -> tuple[Applier, DryRunBackend, io.StringIO, Path]:
    out = io.StringIO()
    backend = DryRunBackend(START, ADDRS, out=out)
    journal_path = tmp_path / "journal.json"
    applier = Applier(backend, Journal(journal_path), ApplierConfig(), allowed_cc=("reno", "cubic", "bbr"))
    return applier, backend, out, journal_path


def rec(primary: Any = "wwan0", **extra: Any) -> dict[str, Any]:
    return {"decision_id": "d-1", "primary_path": {"interface": primary, "access_type": "LTE"}, **extra}


REFUSED = {
    "interface the device does not have": rec("eth9"),
    "interface with shell metacharacters": rec("wlan0;reboot"),
    "interface as a command substitution": rec("$(reboot)"),
    "interface of the wrong type": rec(["wlan0"]),
    "address not on the device": {"primary_path": {"interface": "wlan0", "address": "8.8.8.8"}},
    "address of another interface": {"primary_path": {"interface": "wlan0", "address": "10.1.2.2"}},
    "address with shell metacharacters": {"primary_path": {"interface": "wlan0", "address": "10.1.1.2; reboot"}},
    "weight for a foreign interface": rec(scheduler={"weights": [{"interface": "eth9", "weight": 0.5}]}),
    "weight not finite": rec(scheduler={"weights": [{"interface": "wlan0", "weight": math.nan}]}),
    "weight out of range": rec(scheduler_weights={"wlan0": 1.5}),
    "non-allowlisted sysctl": rec(sysctls={"kernel.core_pattern": "|/tmp/x"}),
    "allowlisted sysctl, shell value": rec(sysctls={CC_SYSCTL: "bbr;reboot"}),
    "congestion control with shell metacharacters": rec(congestion_control="bbr; reboot"),
    "congestion control as a command substitution": rec(congestion={"subflow_level": "`reboot`"}),
    "congestion control longer than TCP_CA_NAME_MAX": rec(congestion_control="c" * 16),
    "no primary path": {"decision_id": "d-1", "command": "reboot"},
}


@pytest.mark.parametrize("recommendation", REFUSED.values(), ids=REFUSED.keys())
def test_unsafe_recommendation_is_refused_and_nothing_is_applied(
    tmp_path: Path, recommendation: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    applier, backend, out, journal_path = make(tmp_path)
    with caplog.at_level(logging.ERROR, logger="edgepath_agent.applier.core"):
        with pytest.raises(RejectedRecommendation, match="refused decision") as err:
            applier.apply(recommendation)
    assert isinstance(err.value, ApplyError) and isinstance(err.value.__cause__, UnsafeDecision)
    assert out.getvalue() == "" and backend.printed == []  # the dry run would have run nothing
    assert backend.state == START
    assert applier.journal.snapshot is None and applier.journal.entries == [] and not journal_path.exists()
    assert applier.last is None
    assert any("refused decision" in r.getMessage() for r in caplog.records)


def test_valid_recommendation_is_applied(tmp_path: Path) -> None:
    applier, backend, out, journal_path = make(tmp_path)
    applied = applier.apply(
        {
            "decision_id": "d-2",
            "primary_path": {"interface": "wwan0", "address": "10.1.2.2"},
            "scheduler": {"weights": [{"interface": "wlan0", "weight": 0.1}, {"interface": "wwan0", "weight": 0.9}]},
            "congestion": {"mptcp_level": "olia", "subflow_level": "bbr"},  # olia: not allowed here
            "sysctls": {CC_SYSCTL: "cubic"},  # the first advice the kernel allows wins
            "command": "reboot",  # not a typed field: ignored, never run
        }
    )
    assert applied.primary == "wwan0" and applied.congestion_control == "cubic" and applied.backup == ("wlan0",)
    printed = out.getvalue()
    assert "would run: sysctl -q -w net.ipv4.tcp_congestion_control=cubic" in printed
    assert "ip mptcp endpoint add 10.1.1.2" in printed and "reboot" not in printed
    assert min(backend.state.default_routes, key=lambda r: r.metric).dev == "wwan0"
    assert applier.journal.snapshot == START and journal_path.exists()


def test_well_formed_congestion_control_the_kernel_lacks_is_never_set(tmp_path: Path) -> None:
    # Not refused (the service may advise what this kernel lacks, e.g. coupled CCs): the profile fallback applies.
    applier, _, out, _ = make(tmp_path)
    applied = applier.apply(rec(congestion_control="evilcc"))
    assert applied.congestion_control == "cubic" and "evilcc" not in out.getvalue()


def test_daemon_keeps_the_last_applied_configuration_on_a_refused_decision(tmp_path: Path) -> None:
    applier, backend, out, _ = make(tmp_path)
    config = AgentConfig(device_id="dev-1", service=["http://127.0.0.1:9"], journal=tmp_path / "j.json")
    agent = Agent(config, connect("http://127.0.0.1:9"), applier, collectors=[], measure=lambda _primary: None)
    try:
        first = agent.step(primary="wwan0")
        assert not first.kept_last and first.applied is not None and first.applied.primary == "wwan0"
        state, printed = backend.state, out.getvalue()
        refused = agent.step(primary="wlan0;reboot")
        assert (
            refused.kept_last
            and refused.applied is first.applied
            and "not one of this device's" in (refused.error or "")
        )
        assert backend.state == state and out.getvalue() == printed
        assert applier.journal.snapshot == START  # rollback still restores what was there before the agent
    finally:
        agent.close(restore=False)


# ---------------------------------------------------------------- argv check in the backends


def test_command_backend_refuses_a_shell_string_before_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    backend = CommandBackend(runner=run_checked)  # the real runner: subprocess, no shell
    for argv in (f"touch {marker}", ["sh", "-c", f"touch {marker}"], ["touch", str(marker)], []):
        with pytest.raises(UnsafeDecision):
            backend._exec(argv)  # type: ignore[arg-type]
    assert not marker.exists()
    assert backend._exec(["ip", "-V"]).startswith("ip ")  # an allowed argv does run


def test_command_backend_checks_every_op_argv(tmp_path: Path) -> None:
    ran: list[list[str]] = []
    backend = CommandBackend(netns="ns-x", runner=lambda argv: ran.append(list(argv)) or "")
    backend.ops["sysctl_set"](key=CC_SYSCTL, value="bbr")
    assert ran == [["ip", "netns", "exec", "ns-x", "sysctl", "-q", "-w", f"{CC_SYSCTL}=bbr"]]
    with pytest.raises(UnsafeDecision):
        backend._exec(("ip", "netns", "exec", "ns-x", "sh", "-c", "reboot"))  # type: ignore[arg-type]
    assert len(ran) == 1


# ---------------------------------------------------------------- TLS options


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_run_help_lists_the_tls_options() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    for option in ("--ca-file", "--cert-file", "--key-file", "--token", "--token-file"):
        assert option in _plain(result.output), option


def test_run_refuses_a_key_file_readable_by_others(tmp_path: Path) -> None:
    cert, key = tmp_path / "device.crt", tmp_path / "device.key"
    cert.write_text("certificate")
    key.write_text("key")
    os.chmod(key, 0o644)
    result = CliRunner().invoke(
        app,
        ["run", "--dry-run", "--journal", str(tmp_path / "j.json"), "--cert-file", str(cert), "--key-file", str(key)],
        env={"COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert result.exit_code == EXIT_CONFIG and "chmod 600" in _plain(result.output)
    assert not (tmp_path / "j.json").exists()


def test_check_interfaces_names_the_ones_this_device_lacks() -> None:
    """Real look-ups (``if_nametoindex``): ``lo`` exists on every Linux machine, the ``ep-no*`` names nowhere."""
    check_interfaces(AgentConfig(interfaces={"lo": "ETHERNET"}))  # present: no error
    with pytest.raises(InterfaceMissing) as missing:
        check_interfaces(AgentConfig(interfaces={"lo": "ETHERNET", "ep-nowifi0": "WIFI", "ep-nolte0": "LTE"}))
    message = str(missing.value)
    assert message.startswith("interfaces ep-nowifi0, ep-nolte0 do not exist on this device (it has: ")
    assert "lo" in message.split("it has: ")[1] and "--interface NAME=ACCESS" in message
    with pytest.raises(InterfaceMissing, match=r"^interface ep-nolte0 does not exist on this device"):
        check_interfaces(AgentConfig(interfaces={"ep-nolte0": "LTE"}))
    # With netns the names are looked up in that namespace; one that can't be entered is refused as well.
    with pytest.raises(InterfaceMissing, match="cannot look up the interfaces in network namespace ep-no-such-ns"):
        check_interfaces(AgentConfig(interfaces={"lo": "ETHERNET"}, netns="ep-no-such-ns"))


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "real"])
def test_run_refuses_interfaces_this_device_lacks(tmp_path: Path, dry_run: bool) -> None:
    journal = tmp_path / "j.json"
    argv = ["run", "--steps", "1", "--service", "grpc://127.0.0.1:9", "--journal", str(journal),
            "--interface", "ep-nowifi0=WIFI", "--interface", "ep-nolte0=LTE", "--interface", "lo=ETHERNET"]  # fmt: skip
    result = CliRunner().invoke(app, argv + (["--dry-run"] if dry_run else []), env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    errors = [line for line in _plain(result.output).splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output  # one plain "Error: …" line; only the missing interfaces are named
    assert errors[0].startswith("Error: interfaces ep-nowifi0, ep-nolte0 do not exist on this device (it has: ")
    assert not journal.exists()  # refused before anything was journalled or changed


@pytest.mark.parametrize("setting", ["probe", "upstream_target", "content"])
@pytest.mark.parametrize("value", ["10.0.0.1", "probe.example:0", ":5201", "host:iperf", "2001:db8::1"])
def test_host_port_settings_are_refused_where_given_naming_the_setting(setting: str, value: str) -> None:
    """A ``probe`` without its port used to pass the settings and end the daemon with a ``ValueError`` at its first
    measurement (``int("")``); every ``HOST:PORT`` setting is now checked when the settings are read."""
    with pytest.raises(ValidationError, match=rf"{setting}\n.*expected HOST:PORT"):
        AgentConfig(**{setting: value})
    assert getattr(AgentConfig(**{setting: "[2001:db8::1]:5201"}), setting) == "[2001:db8::1]:5201"


def test_run_refuses_a_probe_without_its_port(tmp_path: Path) -> None:
    """Through the command line: one plain ``Error:`` line naming ``probe``, exit 78 (a configuration error),
    before anything starts."""
    journal = tmp_path / "j.json"
    argv = ["run", "--dry-run", "--steps", "1", "--service", "grpc://127.0.0.1:9", "--journal", str(journal),
            "--interface", "lo=ETHERNET", "--probe", "127.0.0.1"]  # fmt: skip
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    assert result.exit_code == EXIT_CONFIG, result.output
    errors = [line for line in _plain(result.output).splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "probe" in errors[0] and "HOST:PORT" in errors[0], result.output
    assert not journal.exists()


def test_credentials_precedence_cli_over_file_over_defaults(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-from-file\n")
    os.chmod(token_file, 0o600)
    pki = _helpers().make_pki(tmp_path / "pki", clients=[])
    ca_file, other_ca = pki.ca_cert, pki.server_cert  # PEM certificates: the files are loaded (check_tls_files)
    conf = tmp_path / "agent.toml"
    conf.write_text(f'ca_file = "{ca_file}"\ntoken_file = "{token_file}"\n')
    assert AgentConfig().credentials() is None  # default: no TLS settings
    creds = load_config(conf).credentials()
    assert creds is not None and creds.ca_file == ca_file and creds.token == "tok-from-file"
    creds = load_config(conf, ca_file=other_ca).credentials()
    assert creds is not None and creds.ca_file == other_ca
    os.chmod(token_file, 0o640)
    with pytest.raises(PermissionError, match="chmod 600"):
        load_config(conf).credentials()
    with pytest.raises(ValueError, match="not both"):
        load_config(conf, token="x").credentials()
    with pytest.raises(ValueError, match="ca_file"):
        load_config(conf, ca_file=tmp_path / "missing.pem").credentials()


def _helpers() -> Any:
    name = "edge_security_helpers"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "security" / "edge_security_helpers.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


@pytest.fixture(scope="module")
def tls_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Path]]:
    h = _helpers()
    pki = h.make_pki(tmp_path_factory.mktemp("pki"), clients=["agent-1"])
    tokens = TokenFile(tmp_path_factory.mktemp("tok") / "tokens.json")
    token_file = tmp_path_factory.mktemp("agent") / "token"
    token_file.write_text(tokens.add("agent-1") + "\n")
    os.chmod(token_file, 0o600)
    with h.running_service(
        profile="prod",
        tls_cert_file=pki.server_cert,
        tls_key_file=pki.server_key,
        tls_client_ca_file=pki.ca_cert,
        auth_tokens_file=tokens.path,
    ) as svc:
        yield svc, pki, token_file


def test_configured_credentials_reach_the_service_over_mtls(tls_service: tuple[Any, Any, Path], tmp_path: Path) -> None:
    svc, pki, token_file = tls_service
    cert, key = pki.client("agent-1")
    conf = tmp_path / "agent.json"
    settings = {
        "device_id": "agent-1",
        "service": [f"grpcs://localhost:{svc.grpc_port}", f"https://localhost:{svc.http_port}"],
        **{k: str(v) for k, v in {"ca_file": pki.ca_cert, "cert_file": cert, "key_file": key}.items()},
        "token_file": str(token_file),
    }
    conf.write_text(json.dumps(settings))
    cfg = load_config(conf)
    request = {"device_id": "agent-1", "interfaces": [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60.0}]}
    for urls in (cfg.service[:1], cfg.service[1:]):  # each transport on its own
        client = connect_failover(urls, cfg.timeout_s, 1, credentials=cfg.credentials())
        try:
            assert client.recommend(request)["primary_path"]["interface"] == "wlan0"
        finally:
            client.close()


def _status_record(urls: list[str]) -> dict[str, Any]:
    """A record of a running agent (this process) that used ``urls``."""
    return {"updated_unix_ms": 1, "pid": os.getpid(), "device_id": "agent-1", "service": {"urls": urls}}


def test_status_check_probes_with_the_configured_trust_and_client_certificate(
    tls_service: tuple[Any, Any, Path], tmp_path: Path
) -> None:
    """``status --check`` verified the service against the system's roots only and sent no client certificate: with
    ``ca_file`` set, ``run`` got decisions while ``status --check`` said UNREACHABLE (CERTIFICATE_VERIFY_FAILED) for
    both URLs and exited 1."""
    svc, pki, _ = tls_service
    cert, key = pki.client("agent-1")
    urls = [f"grpcs://localhost:{svc.grpc_port}", f"https://localhost:{svc.http_port}"]
    record = tmp_path / "status.json"
    record.write_text(json.dumps(_status_record(urls)))
    conf = tmp_path / "agent.json"
    conf.write_text(json.dumps({"service": urls, "ca_file": str(pki.ca_cert), "cert_file": str(cert),
                                "key_file": str(key), "status_file": str(record)}))  # fmt: skip
    result = CliRunner().invoke(app, ["status", "--check", "--config", str(conf)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for url in urls:
        assert f"check {url}: reachable" in result.output, result.output
    # Without the CA the service's certificate is not trusted: the probe says so (the check can fail).
    conf.write_text(json.dumps({"service": urls, "status_file": str(record)}))
    untrusted = CliRunner().invoke(app, ["status", "--check", "--config", str(conf)], env={"COLUMNS": "200"})
    assert untrusted.exit_code == 1 and untrusted.output.count("UNREACHABLE") == 2, untrusted.output


def _bad_tls(pki: Any, tmp_path: Path, case: str) -> tuple[list[str], str]:
    """Command-line options with bad TLS material, and what the error must say."""
    cert, key = pki.client("agent-1")
    not_pem = tmp_path / "ca.der"
    not_pem.write_bytes(b"\x30\x82\x01\x0a not a PEM certificate")
    if case == "mismatched key":
        return ["--cert-file", str(cert), "--key-file", str(pki.server_key)], (
            f"key_file: {pki.server_key} is not the private key of cert_file {cert} (KEY_VALUES_MISMATCH)"
        )
    if case == "key that is no key":
        junk = tmp_path / "junk.key"
        junk.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
        junk.chmod(0o600)
        return ["--cert-file", str(cert), "--key-file", str(junk)], f"key_file: {junk} holds no usable private key"
    if case == "certificate that is no certificate":
        return ["--cert-file", str(not_pem), "--key-file", str(key)], f"cert_file: {not_pem} holds no PEM certificate"
    return ["--ca-file", str(not_pem)], f"ca_file: {not_pem} holds no PEM certificate"


@pytest.mark.parametrize(
    "case",
    ["mismatched key", "key that is no key", "certificate that is no certificate", "ca_file not PEM"],
)
@pytest.mark.parametrize("scheme", ["grpcs", "https"])
def test_bad_tls_material_is_refused_at_start_naming_the_setting_and_file(
    tls_service: tuple[Any, Any, Path], tmp_path: Path, case: str, scheme: str
) -> None:
    """A key of another certificate was a ``ssl.SSLError: [X509: KEY_VALUES_MISMATCH]`` traceback (exit 1); a
    ``ca_file`` that is not PEM one of ``[X509: NO_CERTIFICATE_OR_CRL_FOUND]`` with https://, and with grpcs:// exit
    69 "no recommendation … is the service running". Now the files are loaded at start: exit 78, one line."""
    svc, pki, _ = tls_service
    options, said = _bad_tls(pki, tmp_path, case)
    port = svc.grpc_port if scheme == "grpcs" else svc.http_port
    argv = ["run", "--dry-run", "--steps", "1", "--service", f"{scheme}://localhost:{port}", "--interface",
            "lo=ETHERNET", "--journal", str(tmp_path / "j.json"), *options]  # fmt: skip
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "300", "NO_COLOR": "1", "EDGEPATH_AGENT_ATTEMPTS": "1"})
    assert result.exit_code == EXIT_CONFIG, result.output
    errors = [line for line in _plain(result.output).splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: {said}"), result.output
    assert "Traceback" not in result.output and not (tmp_path / "j.json").exists()
