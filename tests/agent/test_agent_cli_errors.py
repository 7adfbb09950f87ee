"""User-facing failures of `edgepath-agent run`, `status` and `rollback`: one plain ``Error:`` line and a documented
exit code instead of a traceback (a packager's audit).

Everything runs for real: the command line (typer's CliRunner or a subprocess of the installed script), a real
service on loopback (with bearer-token authentication where credentials are refused), the dry-run backend.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import without_access
from edgepath.security.auth import TokenFile
from edgepath_agent.applier import Applier, DryRunBackend, Journal, NetState, Route
from edgepath_agent.cli import EXIT_CONFIG, EXIT_UNAVAILABLE, PERMANENT_EXIT_CODES, app
from edgepath_agent.client import FailoverClient, connect
from edgepath_agent.collector import StaticCollector, TraceCollector
from edgepath_agent.daemon import Agent, AgentConfig, CredentialsRefused, unknown_env_settings
from edgepath_agent.safety import ClientCredentials
from pydantic import ValidationError
from service_harness import running_service
from typer.testing import CliRunner

AGENT = Path(sys.executable).with_name("edgepath-agent")
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
needs_mptcp = pytest.mark.skipif(
    not Path("/proc/sys/net/mptcp").is_dir(), reason="the dry run reads `ip mptcp` state: kernel without MPTCP"
)


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _errors(output: str) -> list[str]:
    return [line for line in _plain(output).splitlines() if line.startswith("Error: ")]


def _dry_run(tmp_path: Path, service: str, *extra: str) -> list[str]:
    return ["run", "--dry-run", "--steps", "1", "--service", service, "--interface", "lo=ETHERNET",
            "--journal", str(tmp_path / "j.json"), *extra]  # fmt: skip


# 1. service URLs are checked where the settings are read


@pytest.mark.parametrize("url", ["grcp://127.0.0.1:57051", "htp://127.0.0.1:8080", "127.0.0.1:57051", "grpc://host"])
def test_run_refuses_a_mistyped_service_url_with_one_error_line(tmp_path: Path, url: str) -> None:
    """It used to pass the settings and end in ``ValueError`` (traceback, exit 1) when the client was built."""
    result = CliRunner().invoke(app, _dry_run(tmp_path, url), env=ENV)
    assert result.exit_code == EXIT_CONFIG, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and "service" in errors[0] and "grpc://" in errors[0], result.output
    assert "Traceback" not in result.output and not (tmp_path / "j.json").exists()
    with pytest.raises(ValidationError, match=r"service\n"):
        AgentConfig(service=["grpc://127.0.0.1:50051", url])
    assert AgentConfig(service=["grpcs://h:1", "https://h", "http://127.0.0.1:8080"]).service[0] == "grpcs://h:1"


# 2. credentials the service refuses end `run` with exit 2; other refusals keep the last configuration


@pytest.fixture(scope="module")
def auth_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    tokens = TokenFile(tmp_path_factory.mktemp("tok") / "tokens.json")
    token = tokens.add("agent-1")
    with running_service(auth_tokens_file=tokens.path) as svc:
        yield svc, token


@needs_mptcp
@pytest.mark.parametrize("scheme", ["grpc", "http"])
@pytest.mark.parametrize(
    ("token", "device", "code"),
    [(None, "agent-1", "UNAUTHENTICATED"), ("wrong", "agent-1", "UNAUTHENTICATED"), ("good", "other", "PERMISSION")],
    ids=["no-token", "wrong-token", "other-device"],
)
def test_run_exits_78_when_the_service_refuses_the_credentials(
    auth_service: tuple[Any, str], tmp_path: Path, scheme: str, token: str | None, device: str, code: str
) -> None:
    svc, good = auth_service
    url = svc.grpc_url if scheme == "grpc" else svc.http_url
    extra = ["--device-id", device]
    if token is not None:
        token_file = tmp_path / "token"
        token_file.write_text((good if token == "good" else token) + "\n")
        os.chmod(token_file, 0o600)
        extra += ["--token-file", str(token_file)]
    status_file = tmp_path / "status.json"
    env = {**ENV, "EDGEPATH_AGENT_STATUS_FILE": str(status_file), "EDGEPATH_AGENT_ATTEMPTS": "1"}
    result = CliRunner().invoke(app, _dry_run(tmp_path, url, *extra), env=env)
    assert result.exit_code == EXIT_CONFIG, result.output  # permanent: systemd does not restart it
    errors = _errors(result.output)
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    assert errors[0].startswith("Error: the service refused this device's credentials (")
    assert "token_file" in errors[0] and f"device_id ('{device}'" in errors[0], errors[0]
    if scheme == "grpc":
        assert code in errors[0]
    record = json.loads(status_file.read_text())  # written before leaving: `status` shows why
    assert record["service"]["reachable"] is False and record["service"]["last_error"]


ROUTES = NetState(
    limits=(("add_addr_accepted", 0), ("subflows", 0)),
    default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)),
    sysctls=(("net.ipv4.tcp_congestion_control", "reno"),),
)
ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}
RADIO = {"wlan0": {"wifi_rssi_dbm": -80.0, "link_speed_mbps": 6.0}, "wwan0": {"rsrp_dbm": -85.0, "sinr_db": 18.0}}


def _agent(url: str, tmp_path: Path, token: str | None) -> tuple[Agent, DryRunBackend, TraceCollector]:
    config = AgentConfig(
        device_id="agent-1", service=[url], interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, attempts=1,
        interval_s=0.01, status_file=tmp_path / "status.json", upstream_check=False,
    )  # fmt: skip
    backend = DryRunBackend(ROUTES, ADDRS, out=None)
    applier = Applier(backend, Journal(tmp_path / "journal.json"), config.applier_config(), allowed_cc=("reno",))
    trace = TraceCollector()
    trace.set(RADIO)
    creds = ClientCredentials(token=token) if token else None
    client = FailoverClient([connect(url, 2.0, creds)], attempts=1, backoff_initial_s=0.01)
    agent = Agent(config, client, applier, [trace, StaticCollector(config.interfaces)], measure=lambda _: None)
    return agent, backend, trace


@pytest.mark.parametrize("scheme", ["grpc", "http"])
def test_refused_credentials_stop_the_loop_and_close_restores_the_state(
    auth_service: tuple[Any, str], tmp_path: Path, scheme: str
) -> None:
    """A step that changed the state, then the credentials are refused: `run` leaves its loop with
    :class:`CredentialsRefused` and ``close`` (run_daemon's restore path, as on SIGTERM) restores the state."""
    svc, good = auth_service
    url = svc.grpc_url if scheme == "grpc" else svc.http_url
    agent, backend, _ = _agent(url, tmp_path, good)
    assert not agent.step().kept_last and backend.state != ROUTES  # the agent changed the (simulated) state
    agent.client.close()
    agent.client = FailoverClient([connect(url, 2.0, ClientCredentials(token="revoked"))], attempts=1)
    try:
        with pytest.raises(CredentialsRefused, match="refused this device's credentials"):
            agent.run(threading.Event(), max_steps=5)
    finally:
        agent.close()
    assert backend.state == ROUTES and not (tmp_path / "journal.json").exists()


def test_an_invalid_argument_refusal_keeps_the_last_configuration_and_goes_on(
    service: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad radio reading refused by the service (``INVALID_ARGUMENT``) concerns one context: logged at ERROR,
    the step keeps the last configuration, and the next step (with a good reading) decides again."""
    agent, backend, trace = _agent(service.grpc_url, tmp_path, None)
    try:
        first = agent.step()
        assert not first.kept_last
        state = backend.state
        trace.set({**RADIO, "wlan0": {**RADIO["wlan0"], "loss": 7.0}})  # a loss ratio > 1: refused by the service
        with caplog.at_level(logging.ERROR, logger="edgepath_agent.daemon"):
            refused = agent.step()
        assert refused.kept_last and refused.error and "INVALID_ARGUMENT" in refused.error
        assert backend.state == state and refused.applied == first.applied
        assert any(r.levelno == logging.ERROR and "INVALID_ARGUMENT" in r.getMessage() for r in caplog.records)
        trace.set(RADIO)
        assert not agent.step().kept_last
    finally:
        agent.close()


# 3. no `ip` on PATH


def test_run_without_ip_exits_78_naming_iproute2(tmp_path: Path) -> None:
    """It used to end in ``FileNotFoundError: 'ip'`` (traceback, exit 1), even with ``--dry-run``; then it blamed
    ``backend = dry-run``, a setting the user never made (``--dry-run`` was what they passed)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    argv = _dry_run(tmp_path, "grpc://127.0.0.1:9", "--probe-tool", "builtin")
    result = CliRunner().invoke(app, argv, env={**ENV, "PATH": str(empty)})
    assert result.exit_code == EXIT_CONFIG, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and "iproute2" in errors[0] and "no ip binary is on PATH" in errors[0], result.output
    assert errors[0].startswith("Error: --dry-run reads ") and "backend = dry-run" not in errors[0], errors[0]
    assert not (tmp_path / "j.json").exists()


# 4. rollback without access to the journal


def test_rollback_without_access_to_the_journal_is_one_error_line(tmp_path: Path) -> None:
    importlib.import_module("edgepath_agent.applier.networkmanager")  # imported before the uid changes

    journal = tmp_path / "journal.json"
    journal.write_text(json.dumps({"snapshot": None}))
    os.chmod(journal, 0o600)
    with without_access(journal):
        result = CliRunner().invoke(app, ["rollback", "--journal", str(journal)], env=ENV)
    assert result.exit_code == 2, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and str(journal) in errors[0] and "agent's user" in errors[0], result.output
    assert "root" in errors[0] and "Traceback" not in result.output


# 5. --steps N exits right after the last step


@needs_mptcp
def test_run_steps_exits_after_the_last_step_without_waiting_an_interval(service: Any, tmp_path: Path) -> None:
    """With ``--interval-s 3600`` the old loop waited an hour after its one step; the timeout bounds that."""
    status_file = tmp_path / "status.json"
    argv = [str(AGENT), *_dry_run(tmp_path, service.http_url, "--interval-s", "3600", "--probe-tool", "builtin")]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "EDGEPATH_AGENT_STATUS_FILE": str(status_file), "EDGEPATH_AGENT_UPSTREAM_CHECK": "false"},
    )
    assert done.returncode == 0, done.stderr
    assert "stopped after 1 step(s); state restored: True" in done.stdout
    assert json.loads(status_file.read_text())["step"] == 1


# 6. the token file's permission message names the token file


def test_a_token_file_readable_by_others_is_named_as_such(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok\n")
    os.chmod(token_file, 0o640)
    with pytest.raises(PermissionError) as refused:
        AgentConfig(token_file=token_file).credentials()
    message = str(refused.value)
    assert message.startswith(f"token_file {token_file}: the bearer token is accessible by group/others (mode 640)")
    assert "private key" not in message and message.endswith(f"chmod 600 {token_file}")
    result = CliRunner().invoke(app, _dry_run(tmp_path, "grpc://127.0.0.1:9", "--token-file", str(token_file)), env=ENV)
    assert result.exit_code == EXIT_CONFIG
    errors = _errors(result.output)
    assert len(errors) == 1 and "token_file" in errors[0] and "private key" not in errors[0], result.output
    key = tmp_path / "device.key"
    key.write_text("key")
    os.chmod(key, 0o644)
    cert = tmp_path / "device.crt"
    cert.write_text("cert")
    with pytest.raises(PermissionError, match=r"^key_file .*: the private key is accessible"):
        AgentConfig(cert_file=cert, key_file=key).credentials()


# 7. status of an agent that has exited


def _record(pid: int) -> dict[str, Any]:
    return {"updated_unix_ms": 1, "pid": pid, "device_id": "dev-1", "step": 3, "service": {"urls": ["grpc://h:1"]}}


def test_status_of_an_agent_that_has_exited_says_not_running_and_exits_1(tmp_path: Path) -> None:
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(exited.stdout)  # reaped: no process has this id (until the kernel reuses it)
    status_file = tmp_path / "status.json"
    status_file.write_text(json.dumps(_record(pid)))
    shown = CliRunner().invoke(app, ["status", "--status-file", str(status_file)], env=ENV)
    assert shown.exit_code == 1, shown.output
    first = shown.output.splitlines()[0]
    assert first.startswith(f"agent:          not running (last record by pid {pid}, device dev-1, updated "), first
    as_json = CliRunner().invoke(app, ["status", "--status-file", str(status_file), "--json"], env=ENV)
    assert as_json.exit_code == 1 and json.loads(as_json.output)["running"] is False
    # A live process (this one) is running: exit 0 as before.
    status_file.write_text(json.dumps(_record(os.getpid())))
    shown = CliRunner().invoke(app, ["status", "--status-file", str(status_file)], env=ENV)
    assert shown.exit_code == 0 and shown.output.startswith(f"agent:          pid {os.getpid()}, device dev-1")


def test_status_check_probes_the_configured_urls_unless_a_running_agent_dials_others(tmp_path: Path) -> None:
    """``--check`` probed the URLs of the last record even when its agent had exited: a user who fixed a wrong URL
    in the settings and checked before starting the agent was told about the old one. Now: no agent running, the
    configured URLs; a running agent, the URLs it dials, with a note naming the settings' others. Closed loopback
    ports: each probe fails at once, and the output names the URLs probed."""
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    status_file, conf = tmp_path / "status.json", tmp_path / "agent.json"
    conf.write_text(json.dumps({"service": ["grpc://127.0.0.1:9"], "status_file": str(status_file)}))
    status_file.write_text(json.dumps(_record(int(exited.stdout))))  # dialled grpc://h:1, has exited
    args = ["status", "--check", "--timeout-s", "1", "--config", str(conf)]
    checked = CliRunner().invoke(app, args, env=ENV)
    assert checked.exit_code == 1 and "check grpc://127.0.0.1:9: UNREACHABLE" in checked.output, checked.output
    assert "grpc://h:1:" not in checked.output and "note:" not in checked.output
    running = {**_record(os.getpid()), "service": {"urls": ["grpc://127.0.0.1:7"]}}
    status_file.write_text(json.dumps(running))
    checked = CliRunner().invoke(app, args, env=ENV)
    assert (
        "check grpc://127.0.0.1:7: UNREACHABLE" in checked.output and "check grpc://127.0.0.1:9" not in checked.output
    )
    note = (
        f"note: the running agent (pid {os.getpid()}) uses grpc://127.0.0.1:7; the settings now name grpc://127.0.0.1:9"
    )
    assert note in checked.stderr, checked.output


# 6. a misspelt EDGEPATH_AGENT_* variable is named at start, with the setting it probably meant


def test_unknown_env_settings_name_the_closest_setting() -> None:
    environ = {
        "EDGEPATH_AGENT_INTERFCES": '{"lo": "ETHERNET"}',
        "edgepath_agent_probe_tol": "builtin",  # the prefix is matched without regard to case, as settings are
        "EDGEPATH_AGENT_ZZZZQQQ": "1",
        "EDGEPATH_AGENT_INTERVAL_S": "5",  # valid
        "edgepath_agent_status_file": "/tmp/s.json",  # valid (case-insensitive)
        "EDGEPATH_SERVICE_PORT": "1",  # another prefix
    }
    assert unknown_env_settings(environ) == [
        ("EDGEPATH_AGENT_INTERFCES", "EDGEPATH_AGENT_INTERFACES"),
        ("EDGEPATH_AGENT_ZZZZQQQ", None),
        ("edgepath_agent_probe_tol", "EDGEPATH_AGENT_PROBE_TOOL"),
    ]
    assert unknown_env_settings({"EDGEPATH_AGENT_INTERFACES": "{}"}) == []


def test_run_warns_once_about_a_misspelt_environment_variable(tmp_path: Path) -> None:
    """The variable was ignored without a word: the agent then managed the default interfaces (wlan0, wwan0)."""
    argv = ["run", "--dry-run", "--steps", "1", "--service", "grpc://127.0.0.1:9", "--interface", "ep-nowifi0=WIFI",
            "--journal", str(tmp_path / "j.json"), "--log-format", "text"]  # fmt: skip
    env = {**ENV, "EDGEPATH_AGENT_INTERFCES": '{"lo": "ETHERNET"}', "EDGEPATH_AGENT_ATTEMPTS": "1"}
    result = CliRunner().invoke(app, argv, env=env)
    warned = [line for line in _plain(result.output).splitlines() if "EDGEPATH_AGENT_INTERFCES" in line]
    assert len(warned) == 1 and " WARNING " in warned[0], result.output
    assert warned[0].endswith(
        "environment variable EDGEPATH_AGENT_INTERFCES matches no setting and is ignored; "
        "did you mean EDGEPATH_AGENT_INTERFACES?"
    ), warned
    assert result.exit_code == 2  # then refused as before: ep-nowifi0 does not exist (nothing else changed)
    result = CliRunner().invoke(app, argv, env={**ENV, "EDGEPATH_AGENT_ATTEMPTS": "1"})
    assert "matches no setting" not in result.output


def test_status_warns_on_stderr_about_a_misspelt_environment_variable(tmp_path: Path) -> None:
    """Only `run` warned: `status` read its defaults (another status_file) without a word. The warning goes to
    stderr, so the JSON on stdout still parses for scripts."""
    status_file = tmp_path / "status.json"
    status_file.write_text(json.dumps(_record(os.getpid())))
    argv = ["status", "--status-file", str(status_file), "--json"]
    env = {**ENV, "EDGEPATH_AGENT_STATUS_FLE": str(tmp_path / "other.json")}
    result = CliRunner().invoke(app, argv, env=env)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "warning: environment variable EDGEPATH_AGENT_STATUS_FLE matches no setting and is ignored; "
        "did you mean EDGEPATH_AGENT_STATUS_FILE?"
    ], result.stderr
    assert json.loads(result.stdout)["pid"] == os.getpid()  # stdout: the record alone
    shown = CliRunner().invoke(app, argv[:-1], env=env)  # the text form warns the same way, on stderr
    assert shown.stdout.startswith(f"agent:          pid {os.getpid()}, device dev-1") and shown.stderr == result.stderr
    assert CliRunner().invoke(app, argv, env=ENV).stderr == ""  # no misspelt variable: no warning


# 8. `run --steps N` (the documented smoke test) fails when no step got an answer from the service


def _closed_port_url(scheme: str) -> str:
    """A URL of a loopback port nobody listens on (bound, then released): connections are refused."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"{scheme}://127.0.0.1:{port}"


@needs_mptcp
def test_run_steps_exits_69_naming_the_urls_when_the_service_never_answered(tmp_path: Path) -> None:
    """``run --dry-run --steps 1`` exited 0 ("stopped after 1 step(s)") against a service that was down or a URL
    with the wrong port: the README's smoke test passed without a service."""
    grpc_url, http_url = _closed_port_url("grpc"), _closed_port_url("http")
    argv = [*_dry_run(tmp_path, grpc_url, "--service", http_url, "--log-format", "text")]
    env = {**ENV, "EDGEPATH_AGENT_ATTEMPTS": "1", "EDGEPATH_AGENT_STATUS_FILE": str(tmp_path / "status.json")}
    result = CliRunner().invoke(app, argv, env=env)
    assert result.exit_code == EXIT_UNAVAILABLE == os.EX_UNAVAILABLE == 69, result.output
    errors = _errors(result.output)
    assert len(errors) == 1, result.output
    assert errors[0].startswith(f"Error: no recommendation from the service in 1 step: tried {grpc_url}, {http_url}; ")
    assert "last error: " in errors[0] and "Connection refused" in errors[0], errors  # the REST fallback's
    assert "stopped after" not in result.output and "Traceback" not in result.output


@needs_mptcp
def test_run_steps_exits_0_against_a_real_service(service: Any, tmp_path: Path) -> None:
    """The control: the same smoke test against a service that answers, on its gRPC and its REST URL."""
    env = {**ENV, "EDGEPATH_AGENT_STATUS_FILE": str(tmp_path / "status.json")}
    for url in (service.grpc_url, service.http_url):
        result = CliRunner().invoke(app, _dry_run(tmp_path, url), env=env)
        assert result.exit_code == 0, result.output
        assert "stopped after 1 step(s)" in result.output and not _errors(result.output)


@needs_mptcp
def test_the_daemon_without_steps_keeps_going_without_the_service(tmp_path: Path) -> None:
    """``require_service`` is what ``--steps`` asks for: the daemon (the unit passes no ``--steps``) ends a run
    without an answer as before, the restart policy untouched (69 is not in RestartPreventExitStatus=)."""
    from edgepath_agent.daemon import ServiceUnavailable, run_daemon

    config = AgentConfig(service=[_closed_port_url("grpc")], interfaces={"lo": "ETHERNET"}, backend="dry-run",
                         attempts=1, journal=tmp_path / "j.json", status_file=None)  # fmt: skip
    assert run_daemon(config, max_steps=1) == 1
    with pytest.raises(ServiceUnavailable, match=rf"tried {config.service[0]}; last error: UNAVAILABLE"):
        run_daemon(config, max_steps=1, require_service=True)
    assert EXIT_UNAVAILABLE not in PERMANENT_EXIT_CODES


class FlakyService:
    """Refuses the first ``down`` recommendations as an unreachable service, then answers."""

    url = "stub://"

    def __init__(self, down: int) -> None:
        self.down = down

    def recommend(self, request: Any) -> Any:
        from edgepath_agent.client import ServiceError
        from edgepath_agent.messages import PrimaryPath, Recommendation

        if self.down > 0:
            self.down -= 1
            raise ServiceError("UNAVAILABLE", "failed to connect to all addresses")
        return Recommendation(decision_id="d1", primary_path=PrimaryPath(interface="wlan0", access_type="WIFI"))

    def report_outcome(self, outcome: Any) -> Any:
        raise AssertionError("no outcome expected")

    def close(self) -> None:
        pass


def test_one_answered_step_is_enough() -> None:
    config = AgentConfig(device_id="dev-flaky", service=["grpc://edge:50051", "http://edge:8080"],
                         interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, upstream_check=False,
                         status_file=None)  # fmt: skip
    applier = Applier(DryRunBackend(ROUTES, ADDRS, out=None), Journal(), config.applier_config())
    agent = Agent(config, FlakyService(down=1), applier, [StaticCollector(config.interfaces)])
    assert agent.unanswered() is None  # no step yet: nothing to say
    assert agent.run(threading.Event(), max_steps=1) == 1
    assert agent.unanswered() == (
        "no recommendation from the service in 1 step: tried grpc://edge:50051, http://edge:8080; last error: "
        "UNAVAILABLE: failed to connect to all addresses (is the service running, at that host and port? "
        "`edgepath-agent status --check` probes the URLs)"
    )
    assert agent.run(threading.Event(), max_steps=1) == 1 and agent.service_ok_unix_ms is not None
    assert agent.unanswered() is None


def test_a_run_whose_every_step_was_skipped_says_so() -> None:
    config = AgentConfig(device_id="dev-gone", interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, upstream_check=False,
                         status_file=None)  # fmt: skip
    applier = Applier(DryRunBackend(ROUTES, ADDRS, out=None), Journal(), config.applier_config())
    agent = Agent(config, FlakyService(down=0), applier, [StaticCollector(config.interfaces)], links=lambda: {})
    assert agent.run(threading.Event(), max_steps=1) == 1  # one step: run() waits interval_s between steps
    assert agent.unanswered() == (
        "every step was skipped (1 step): no managed interface could carry a path (wlan0 does not exist; wwan0 does "
        "not exist), so the service was not asked; bring an interface up with an address, or check --interface"
    )


# 7. a bearer token never goes in cleartext to another host


@pytest.mark.parametrize(
    ("urls", "refused"),
    [
        (["grpc://192.0.2.2:50051"], ["grpc://192.0.2.2:50051"]),
        (["grpcs://edge.example:50051", "http://edge.example:8080"], ["http://edge.example:8080"]),
        (["grpcs://edge.example:50051", "https://edge.example:8443"], []),
        (["grpc://127.0.0.1:50051", "http://localhost:8080", "http://[::1]:8080"], []),
    ],
)
def test_a_token_for_a_plaintext_service_on_another_host_is_refused(
    tmp_path: Path, urls: list[str], refused: list[str]
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("ept_secret\n")
    os.chmod(token_file, 0o600)
    config = AgentConfig(token_file=token_file, service=urls)
    if not refused:
        creds = config.credentials()
        assert creds is not None and creds.token == "ept_secret"
        return
    with pytest.raises(ValueError, match=r"^token_file: the bearer token would be sent in cleartext to ") as err:
        config.credentials()
    assert all(url in str(err.value) for url in refused)
    assert AgentConfig(service=urls).credentials() is None  # without a token there is nothing to leak
    args = ["--token-file", str(token_file)]
    for url in urls[1:]:
        args += ["--service", url]
    result = CliRunner().invoke(app, _dry_run(tmp_path, urls[0], *args), env=ENV)
    assert result.exit_code == EXIT_CONFIG, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and "cleartext" in errors[0] and refused[0] in errors[0], result.output
