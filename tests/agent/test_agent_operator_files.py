"""Files an operator expects (issue 21, item 2), checked against the code and each other.

* ``agent.toml.example`` names every setting and loads to exactly the defaults;
* settings precedence: command line > ``EDGEPATH_AGENT_*`` environment > file > defaults;
* the unit's ``User=``, directories and ``ExecStart`` agree with sysusers.d, tmpfiles.d,
  the settings' default paths and the install path the README documents, and the unit
  passes ``systemd-analyze verify`` (skipped where systemd-analyze is missing) in a
  throw-away root holding the documented executable;
* JSON logs carry ``decision_id`` and ``interface``; journald gets the priority prefix;
  sd_notify messages (READY, STATUS, WATCHDOG, STOPPING) reach a real AF_UNIX socket;
  the status record written after a step is what ``edgepath-agent status`` prints.

The service is real (loopback); the applier runs its dry-run backend (no privileges needed).
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import tomllib
from pathlib import Path

import pytest
from edgepath_agent.applier import Applier, DryRunBackend, Journal, NetState, Route
from edgepath_agent.client import FailoverClient, connect
from edgepath_agent.collector import StaticCollector
from edgepath_agent.daemon import Agent, AgentConfig, load_config
from edgepath_agent.journal_log import (
    JsonFormatter,
    StderrHandler,
    sd_notify,
    setup_logging,
    watchdog_interval_s,
)
from pydantic import ValidationError

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "client-agent"
EXAMPLE = AGENT / "agent.toml.example"
UNIT = AGENT / "systemd" / "edgepath-agent.service"
SYSUSERS = AGENT / "systemd" / "edgepath-agent.sysusers.conf"
TMPFILES = AGENT / "systemd" / "edgepath-agent.tmpfiles.conf"


def unit_values(key: str) -> list[str]:
    return [line.split("=", 1)[1].strip() for line in UNIT.read_text().splitlines() if line.startswith(f"{key}=")]


def test_example_names_every_setting_and_loads_to_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("EDGEPATH_AGENT_"):
            monkeypatch.delenv(name)
    text = EXAMPLE.read_text()
    active = tomllib.loads(text)
    commented = set(re.findall(r"^# (\w+) = ", text, flags=re.MULTILINE))
    fields = set(AgentConfig.model_fields)
    missing = fields - set(active) - commented
    assert not missing, f"agent.toml.example lacks {sorted(missing)}"
    assert not (set(active) | commented) - fields, "agent.toml.example names settings that do not exist"
    cfg = load_config(EXAMPLE)  # any name but *.json is read as TOML
    defaults = AgentConfig()
    assert cfg.model_dump() == defaults.model_dump(), "a value in agent.toml.example differs from its default"
    for name in commented:  # commented settings are the ones without a concrete default
        default = AgentConfig.model_fields[name].default
        assert default is None or name == "device_id", f"{name} has a default ({default!r}): show it uncommented"


def test_precedence_cli_over_environment_over_file_over_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "agent.toml"
    f.write_text('interval_s = 5.0\nattempts = 4\nprobe = "10.0.0.1:5201"\n[interfaces]\nwlan0 = "WIFI"\n')
    monkeypatch.setenv("EDGEPATH_AGENT_INTERVAL_S", "7.5")
    monkeypatch.setenv("EDGEPATH_AGENT_INTERFACES", '{"eth0": "ETHERNET", "wwan0": "NR"}')
    cfg = load_config(f, attempts=None)
    assert cfg.interval_s == 7.5  # environment over file
    assert cfg.interfaces == {"eth0": "ETHERNET", "wwan0": "NR"}  # JSON in the environment
    assert cfg.attempts == 4 and cfg.probe == "10.0.0.1:5201"  # file over defaults (CLI None = not given)
    assert cfg.timeout_s == 2.0  # default
    assert load_config(f, interval_s=1.0).interval_s == 1.0  # command line over environment
    monkeypatch.setenv("EDGEPATH_AGENT_ATTEMPTS", "0")
    with pytest.raises(ValidationError, match="attempts"):
        load_config(f)
    (tmp_path / "bad.toml").write_text("intervall_s = 3\n")
    monkeypatch.delenv("EDGEPATH_AGENT_ATTEMPTS")
    with pytest.raises(ValidationError, match="intervall_s"):
        load_config(tmp_path / "bad.toml")
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path / "absent.toml")


def documented_install() -> tuple[str, str]:
    """(executable, config path) from the README's agent install section."""
    readme = (ROOT / "README.md").read_text()
    venv = re.search(r"python3 -m venv (/\S+)", readme)
    conf = re.search(r"agent\.toml\.example (/etc/\S+agent\.toml)", readme)
    assert venv and conf, "README lacks the agent install commands (venv path, agent.toml destination)"
    return f"{venv.group(1)}/bin/edgepath-agent", conf.group(1)


def test_unit_matches_install_path_sysusers_tmpfiles_and_settings() -> None:
    exe, conf = documented_install()
    (start,) = unit_values("ExecStart")
    (stop_post,) = unit_values("ExecStopPost")
    assert start.split()[0] == exe and stop_post.split()[0] == exe
    assert f"--config {conf}" in start
    assert f"--config {conf}" in stop_post, "the rollback finds the status record at the settings' status_file"
    (user,) = unit_values("User")
    sysusers = [line.split() for line in SYSUSERS.read_text().splitlines() if line and not line.startswith("#")]
    assert ["u", user] == sysusers[0][:2]
    tmpfiles = {line.split()[1]: line.split() for line in TMPFILES.read_text().splitlines() if line[:2] == "d "}
    defaults = AgentConfig(device_id="x")
    assert str(defaults.journal.parent) in tmpfiles and tmpfiles[str(defaults.journal.parent)][3] == user
    assert defaults.status_file is not None and str(defaults.status_file.parent) in tmpfiles
    assert str(Path(conf).parent) in tmpfiles
    assert unit_values("RuntimeDirectory") == [defaults.status_file.parent.name]
    assert unit_values("RuntimeDirectoryPreserve") == ["yes"], "status after a stop reads the record the stop left"
    assert unit_values("StateDirectory") == [defaults.journal.parent.name]
    assert unit_values("Type") == ["notify"] and unit_values("WatchdogSec")


def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    units = Path("/usr/lib/systemd/system")
    if analyze is None or not (units / "sysinit.target").exists():
        pytest.skip("systemd-analyze or the system's unit files are not installed")
    exe, _ = documented_install()
    root = tmp_path / "root"
    shutil.copytree(units, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, root / "etc/systemd/system" / UNIT.name)
    binary = root / exe.lstrip("/")
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    out = subprocess.run([analyze, "verify", f"--root={root}", UNIT.name], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not out.stderr.strip(), out.stdout + out.stderr
    binary.unlink()  # and it does check the executable: without it, verify fails
    out = subprocess.run([analyze, "verify", f"--root={root}", UNIT.name], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "not executable" in out.stdout + out.stderr


# --- logs, notifications and the status record of a running agent -------------------------------------------

ROUTES = NetState(
    limits=(("add_addr_accepted", 0), ("subflows", 0)),
    default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)),
)
ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}


def make_agent(url: str, tmp_path: Path) -> Agent:
    config = AgentConfig(
        device_id="dev-ops",
        service=[url],
        interfaces={"wlan0": "WIFI", "wwan0": "LTE"},
        attempts=1,
        interval_s=0.01,
        manage_cc=False,
        status_file=tmp_path / "status.json",
    )
    applier = Applier(DryRunBackend(ROUTES, ADDRS, out=None), Journal(), config.applier_config())
    client = FailoverClient([connect(url, 2.0)], attempts=1)
    return Agent(config, client, applier, [StaticCollector(config.interfaces)], measure=lambda _p: None)


@pytest.fixture
def notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5.0)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    yield sock
    sock.close()


def test_json_logs_notifications_and_status_of_a_running_agent(service, tmp_path: Path, notify_socket) -> None:
    import threading

    agent = make_agent(service.grpc_url, tmp_path)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("edgepath_agent")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    messages: list[str] = []

    def receive() -> None:  # as systemd does: read while the agent runs
        while not messages or messages[-1] != "STOPPING=1":
            try:
                messages.append(notify_socket.recv(4096).decode())
            except TimeoutError:
                return

    reader = threading.Thread(target=receive)
    reader.start()
    try:
        assert watchdog_interval_s() == pytest.approx(0.2)
        agent.config.interval_s = 0.5  # > WATCHDOG_USEC/2: the wait must ping the watchdog
        agent.run(threading.Event(), max_steps=2)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        agent.client.close()
        reader.join(10)
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    decisions = [r for r in records if r.get("decision_id")]
    assert decisions, records
    assert decisions[0]["interface"] in ("wlan0", "wwan0") and decisions[0]["level"] == "INFO"
    assert decisions[0]["ts"].endswith("Z") and decisions[0]["logger"] == "edgepath_agent.daemon"
    assert messages[0].startswith("READY=1") and messages[-1] == "STOPPING=1"
    assert any(m.startswith("STATUS=step 1: primary ") for m in messages)
    assert "WATCHDOG=1" in messages

    record = json.loads((tmp_path / "status.json").read_text())
    assert record["step"] == 2 and record["service"]["reachable"] is True
    assert record["recommendation"]["decision_id"] == decisions[-1]["decision_id"]
    assert record["applied"]["primary"] == record["recommendation"]["primary_path"]["interface"]
    from edgepath_agent.cli import app
    from typer.testing import CliRunner

    shown = CliRunner().invoke(app, ["status", "--status-file", str(tmp_path / "status.json")])
    assert shown.exit_code == 0, shown.output
    assert f"primary {record['applied']['primary']}" in shown.output and "reachable via grpc://" in shown.output
    as_json = CliRunner().invoke(app, ["status", "--status-file", str(tmp_path / "status.json"), "--json", "--check"])
    checked = json.loads(as_json.stdout)  # stderr notes that the settings (the defaults here) name other URLs
    assert checked["service_check"][agent.config.service[0]]["reachable"] is True and as_json.exit_code == 0


def test_status_check_reports_a_dead_service(tmp_path: Path) -> None:
    from edgepath_agent.cli import app
    from typer.testing import CliRunner

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = tmp_path / "agent.toml"
    conf.write_text(f'service = ["http://127.0.0.1:{port}"]\nstatus_file = "{tmp_path / "none.json"}"\n')
    out = CliRunner().invoke(app, ["status", "--config", str(conf), "--check", "--timeout-s", "0.5"])
    assert out.exit_code == 1
    assert "no status record" in out.output and f"check http://127.0.0.1:{port}: UNREACHABLE" in out.output


def test_journald_priority_prefix_and_notify_outside_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    record = logging.LogRecord("edgepath_agent.daemon", logging.WARNING, __file__, 1, "x %s", ("y",), None)
    record.decision_id = "d-1"
    record.interface = "wwan0"
    line = JsonFormatter(journald=True).format(record)
    assert line.startswith("<4>")
    body = json.loads(line[3:])
    assert body["message"] == "x y" and body["decision_id"] == "d-1" and body["interface"] == "wwan0"
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sd_notify("READY=1") is False
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        assert setup_logging("INFO", "auto") == "text"
        assert setup_logging("INFO", "json") == "json"
        ours = [h for h in root.handlers if isinstance(h, StderrHandler)]
        assert len(ours) == 1 and isinstance(ours[0].formatter, JsonFormatter)  # replaced, not added twice
        # pytest's own handlers are left alone (an agent handler left by an earlier in-process CLI test may be
        # replaced: that is the point of the test, and the order tests run in must not matter)
        assert all(h in root.handlers for h in saved[0] if not isinstance(h, StderrHandler))
        with pytest.raises(ValueError, match="log format"):
            setup_logging("INFO", "xml")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
