"""Settings that can never work are refused when the agent starts (exit 78, one ``Error:`` line naming the setting),
and the CLI's other inputs get one ``Error:`` line and a documented exit code instead of a traceback (an audit).

* files the agent cannot read (``--config``, ``token_file``) are named with the permission problem, exit 78 (click's
  own "path is not readable" check exited 2, which systemd restarts for ever);
* settings the kernel or the service always refuse (``signal`` with ``fullmesh``, no interface, a primary metric at
  or above the secondary one) are refused at start; a service refusal is reported as a refusal, not an outage;
* ``EDGEPATH_AGENT_*`` variables that are not the JSON their setting needs are named; a JSON settings file that is
  no object is refused; ``log_level`` is read without regard to case everywhere;
* ``status``: a record of the wrong shape, a timeout that is not above 0; ``run --interface`` given twice for one
  interface.

The command line runs for real (typer's CliRunner); the agent's loop runs on a scripted service (no network).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import without_access
from edgepath_agent.applier import Applier, DryRunBackend, Journal, NetState, Route
from edgepath_agent.cli import EXIT_CONFIG, app
from edgepath_agent.client import ServiceError
from edgepath_agent.collector import StaticCollector
from edgepath_agent.daemon import Agent, AgentConfig, load_config
from pydantic import ValidationError
from typer.testing import CliRunner, Result

ENV = {"COLUMNS": "300", "NO_COLOR": "1", "EDGEPATH_AGENT_ATTEMPTS": "1"}
ROUTES = NetState(default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)))
ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}


def _errors(output: str) -> list[str]:
    return [line for line in re.sub(r"\x1b\[[0-9;]*m", "", output).splitlines() if line.startswith("Error: ")]


def _invoke(argv: list[str], **env: str) -> Result:
    result = CliRunner().invoke(app, argv, env={**ENV, **env})
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def _run(tmp_path: Path, *extra: str) -> list[str]:
    return ["run", "--dry-run", "--steps", "1", "--service", "grpc://127.0.0.1:9", "--journal",
            str(tmp_path / "j.json"), "--log-format", "text", *extra]  # fmt: skip


@pytest.fixture(autouse=True)
def _status_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEPATH_AGENT_STATUS_FILE", str(tmp_path / "status.json"))
    for var in [v for v in os.environ if v.upper().startswith("EDGEPATH_AGENT_") and v != "EDGEPATH_AGENT_STATUS_FILE"]:
        monkeypatch.delenv(var)


# 1. files the agent cannot read


def test_an_unreadable_settings_file_is_78_naming_the_file_and_the_permission(tmp_path: Path) -> None:
    """click's ``Path(readable=True)`` answered first: "Invalid value for '--config': path … is not readable", exit 2
    (restarted by systemd every 5 s, for ever)."""
    importlib.import_module("edgepath_agent.applier.networkmanager")  # imported before the uid changes
    tmp_path.chmod(0o755)
    conf = tmp_path / "agent.toml"
    conf.write_text("interval_s = 1\n")
    conf.chmod(0o600)
    with without_access(conf):
        run = _invoke([*_run(tmp_path, "--interface", "lo=ETHERNET"), "--config", str(conf)])
        status = _invoke(["status", "--config", str(conf)])
    assert run.exit_code == EXIT_CONFIG, run.output
    errors = _errors(run.output)
    assert len(errors) == 1 and str(conf) in errors[0] and "Permission denied" in errors[0], run.output
    assert "chmod 640" in errors[0] and "Invalid value" not in run.output
    assert status.exit_code == 2 and _errors(status.output) == errors, status.output  # status: its documented 2


@pytest.mark.parametrize("where", ["the file", "its directory"])
def test_an_unreadable_token_file_names_the_setting(tmp_path: Path, where: str) -> None:
    """It was ``Error: [Errno 13] Permission denied: '…'``, naming neither the setting nor what to do (a directory
    that cannot be searched: a ``PermissionError`` traceback from ``is_file``)."""
    with tempfile.TemporaryDirectory() as directory:  # under /tmp: searchable by others unless made otherwise
        home = Path(directory)
        home.chmod(0o755 if where == "the file" else 0o700)
        token = home / "token"
        token.write_text("secret\n")
        token.chmod(0o600)
        config = load_config(service=["grpc://127.0.0.1:50051"], token_file=token)
        with without_access(token if where == "the file" else home), pytest.raises(ValueError) as refused:
            config.credentials()
    message = str(refused.value)
    said = "cannot be read (Permission denied)" if where == "the file" else "cannot be reached (Permission denied)"
    assert message.startswith(f"token_file: {token} {said}: "), message
    assert "edgepath-agent" in message


# 2. settings the kernel or the service always refuse


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ('endpoint_flags = ["signal", "fullmesh"]\n', "endpoint_flags: signal and fullmesh cannot go together"),
        ('endpoint_flags = ["fullmesh", "backup", "signal"]\n', "endpoint_flags: signal and fullmesh"),
        ("interfaces = {}\n", "interfaces: Dictionary should have at least 1 item"),
        ("primary_metric = 30\nsecondary_metric = 20\n", "primary_metric (30) must be below secondary_metric (20)"),
        ("primary_metric = 20\n", "primary_metric (20) must be below secondary_metric (20)"),
    ],
)
def test_settings_that_can_never_work_are_refused_at_start(tmp_path: Path, toml: str, named: str) -> None:
    """``signal`` with ``fullmesh`` failed every step (the kernel: "flags mustn't have both signal and fullmesh") and
    ``run --steps 2`` exited 0; ``interfaces = {}`` was refused by the service at every step (exit 69, "is the
    service running?"); a primary metric at or above the secondary one left the recommended path not the default
    route, without a word."""
    conf = tmp_path / "agent.toml"
    conf.write_text(toml)
    result = _invoke([*_run(tmp_path), "--config", str(conf)])
    assert result.exit_code == EXIT_CONFIG, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and named in errors[0] and str(conf) in errors[0], result.output
    assert not (tmp_path / "j.json").exists()


def test_the_settings_that_do_work_still_pass() -> None:
    config = AgentConfig(endpoint_flags=["subflow", "fullmesh"], primary_metric=0, secondary_metric=1)
    assert config.endpoint_flags == ["subflow", "fullmesh"] and config.primary_metric == 0
    assert AgentConfig(endpoint_flags=["signal", "backup"]).endpoint_flags == ["signal", "backup"]
    with pytest.raises(ValidationError, match="signal and fullmesh"):
        AgentConfig(endpoint_flags=["signal", "fullmesh"])


class RefusingService:
    """Answers every recommendation request with a refusal (the service is up: the request is what fails)."""

    url = "stub://"

    def recommend(self, request: Any) -> Any:
        raise ServiceError("INVALID_ARGUMENT", "interfaces: List should have at least 1 item")

    def report_outcome(self, outcome: Any) -> Any:
        raise AssertionError("no outcome expected")

    def close(self) -> None:
        pass


def test_a_service_refusal_is_reported_as_a_refusal_not_an_outage() -> None:
    """``run --steps N`` said "is the service running, at that host and port?" for a service that answered."""
    config = AgentConfig(device_id="dev-refused", service=["grpc://edge:50051", "http://edge:8080"],
                         interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, upstream_check=False,
                         status_file=None)  # fmt: skip
    applier = Applier(DryRunBackend(ROUTES, ADDRS, out=None), Journal(), config.applier_config())
    agent = Agent(config, RefusingService(), applier, [StaticCollector(config.interfaces)])
    assert agent.run(threading.Event(), max_steps=1) == 1
    said = agent.unanswered()
    assert said == (
        "no recommendation from the service in 1 step: it refused the request (INVALID_ARGUMENT: interfaces: List "
        "should have at least 1 item); it answered, so this is no outage: fix what the refusal names (tried "
        "grpc://edge:50051, http://edge:8080)"
    )


# 3. how settings are written


@pytest.mark.parametrize(
    ("var", "value"),
    [("EDGEPATH_AGENT_SERVICE", "grpc://127.0.0.1:50051"), ("EDGEPATH_AGENT_INTERFACES", "wlan0=WIFI")],
)
def test_an_environment_variable_that_is_not_json_is_named(tmp_path: Path, var: str, value: str) -> None:
    """It was ``error parsing value for field "service" from source "EnvSettingsSource"``."""
    result = _invoke(["run", "--dry-run", "--steps", "1", "--journal", str(tmp_path / "j.json")], **{var: value})
    assert result.exit_code == EXIT_CONFIG, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and errors[0].startswith(f"Error: environment variable {var} (setting "), result.output
    assert "is not valid JSON" in errors[0] and f"e.g. {var}='" in errors[0] and "EnvSettingsSource" not in errors[0]


@pytest.mark.parametrize("content", ["[1]", '"agent"', "3"])
def test_a_json_settings_file_that_is_no_object_is_refused(tmp_path: Path, content: str) -> None:
    """``[1]`` ended ``run`` in a ``TypeError`` traceback."""
    conf = tmp_path / "agent.json"
    conf.write_text(content)
    result = _invoke([*_run(tmp_path, "--interface", "lo=ETHERNET"), "--config", str(conf)])
    assert result.exit_code == EXIT_CONFIG, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and f"settings file {conf} holds a JSON " in errors[0] and "not an object" in errors[0]


def test_log_level_is_read_without_regard_to_case_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--log-level debug`` was taken, ``log_level = "debug"`` in the file or the environment refused."""
    conf = tmp_path / "agent.toml"
    conf.write_text('log_level = "debug"\n')
    assert load_config(conf).log_level == "DEBUG"
    monkeypatch.setenv("EDGEPATH_AGENT_LOG_LEVEL", " Warning ")
    assert load_config(conf).log_level == "WARNING"  # the environment over the file
    monkeypatch.setenv("EDGEPATH_AGENT_LOG_LEVEL", "verbose")
    with pytest.raises(ValidationError, match="log_level"):
        load_config(conf)


def test_an_interface_given_twice_is_refused_naming_it(tmp_path: Path) -> None:
    """``--interface wlan0=WIFI --interface wlan0=LTE`` kept the last one without a word."""
    result = _invoke(_run(tmp_path, "--interface", "wlan0=WIFI", "--interface", "wlan0=LTE"))
    assert result.exit_code == EXIT_CONFIG, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and "interface wlan0 is given twice (wlan0=WIFI, wlan0=LTE)" in errors[0], result.output


# 4. status


@pytest.mark.parametrize(
    ("record", "named"),
    [
        ({"updated_unix_ms": "x"}, 'updated_unix_ms is "x", not a number'),
        ({"updated_unix_ms": 1, "service": "oops"}, 'service is "oops", not an object'),
        ({"updated_unix_ms": 1, "service": {"urls": "grpc://h:1"}}, "service.urls is"),
        ({"updated_unix_ms": 1, "recommendation": {"primary_path": "wlan0"}}, "recommendation.primary_path is"),
        ({"updated_unix_ms": 1, "last_outcome": {"throughput_bps": "fast"}}, "last_outcome.throughput_bps is"),
        ({"updated_unix_ms": 1, "connectivity": {"wlan0": True}}, "connectivity.wlan0 is true, not an object"),
        ({"updated_unix_ms": 1, "applied": {"backup": [1]}}, "applied.backup is [1], not a list of strings"),
        ({}, "no updated_unix_ms"),  # another program's JSON object: was "no status record", exit 0
        ({"x": 1}, "no updated_unix_ms"),
        ({"pid": 1}, "no updated_unix_ms"),  # was shown as a running agent (pid 1 is alive)
        ({"updated_unix_ms": 1}, "no pid"),
        ({"updated_unix_ms": 1, "pid": "1"}, 'pid is "1", not an integer'),
    ],
)
def test_status_of_a_record_of_the_wrong_shape_is_one_error_line(
    tmp_path: Path, record: dict[str, Any], named: str
) -> None:
    """``{"updated_unix_ms": "x"}`` ended ``status`` in a ``ValueError`` traceback, ``{"service": "oops"}`` in an
    ``AttributeError`` one."""
    path = tmp_path / "status.json"
    path.write_text(json.dumps(record))
    for extra in ([], ["--json"]):
        result = _invoke(["status", "--status-file", str(path), *extra])
        assert result.exit_code == 2, result.output
        errors = _errors(result.output)
        assert len(errors) == 1, result.output
        assert errors[0].startswith(f"Error: cannot read the status record {path}: not a status record: ")
        assert named in errors[0], errors[0]


@pytest.mark.parametrize("timeout", ["0", "-1", "nan"])
def test_status_check_refuses_a_timeout_not_above_zero(tmp_path: Path, timeout: str) -> None:
    """``--timeout-s 0`` ended in a gRPC thread's traceback; a negative one was taken."""
    result = _invoke(["status", "--check", "--timeout-s", timeout, "--status-file", str(tmp_path / "none.json")])
    assert result.exit_code == 2, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and "--timeout-s" in errors[0] and "is not above 0 s" in errors[0], result.output
