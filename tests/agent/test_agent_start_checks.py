"""Start-up refusals of ``edgepath-agent run`` and the errors of ``rollback``/``status`` on bad files: one plain
``Error:`` line, a documented exit code that tells systemd whether a restart can help, no traceback (an audit).

* exit codes: 78 (EX_CONFIG) for what no restart heals, 2 for a managed interface that is not there yet, and
  the unit's ``RestartPreventExitStatus=`` lists the permanent ones;
* ``--dry-run`` checks the configured backend first (a misspelt one, ``networkmanager``);
* a kernel whose MPTCP cannot be used is refused before anything is touched; MPTCP disabled is warned about;
* a journal that cannot be written or read, and a status record that cannot be read.

The command line runs for real (typer's CliRunner in this process, or the installed script); a fake ``ip``
that fails as on a kernel without MPTCP stands first on ``PATH`` where that is the point. A real ``run``
(no ``--dry-run``) is only started where it is refused before it touches anything.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from edgepath_agent import cli
from edgepath_agent.applier import (
    Applier,
    ApplierConfig,
    ApplyError,
    DryRunBackend,
    Journal,
    JournalError,
    NetState,
    Route,
    preflight,
)
from edgepath_agent.applier.journal import check_for_run, rollback_netns
from edgepath_agent.applier.preflight import MptcpUnavailable, check_mptcp
from edgepath_agent.cli import app
from edgepath_agent.status import format_status
from typer.testing import CliRunner, Result

AGENT = Path(sys.executable).with_name("edgepath-agent")
ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "client-agent" / "systemd" / "edgepath-agent.service"
ENV = {"COLUMNS": "300", "NO_COLOR": "1", "EDGEPATH_AGENT_ATTEMPTS": "1"}
EX_CONFIG = 78  # sysexits.h EX_CONFIG: cli.EXIT_CONFIG
IP = shutil.which("ip")
needs_ip = pytest.mark.skipif(IP is None, reason="needs iproute2 (ip)")


def _errors(output: str) -> list[str]:
    return [line for line in re.sub(r"\x1b\[[0-9;]*m", "", output).splitlines() if line.startswith("Error: ")]


def _run(tmp_path: Path, *extra: str, dry_run: bool = True, service: str = "grpc://127.0.0.1:9") -> list[str]:
    return ["run", *(["--dry-run"] if dry_run else []), "--steps", "1", "--service", service,
            "--interface", "lo=ETHERNET", "--journal", str(tmp_path / "j.json"), "--log-format", "text",
            *extra]  # fmt: skip


def _invoke(argv: list[str], **env: str) -> Result:
    result = CliRunner().invoke(app, argv, env={**ENV, **env})
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.fixture(autouse=True)
def _status_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEPATH_AGENT_STATUS_FILE", str(tmp_path / "status.json"))


# 1. exit codes and the unit


def _unit_sections() -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    current = sections.setdefault("", {})
    for line in UNIT.read_text().splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
        elif "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            current[key.strip()] = value.strip()
    return sections


def test_the_unit_does_not_restart_permanent_refusals_and_bounds_the_retries() -> None:
    """It restarted every 5 s forever, also after a settings error, a refused token or a NetworkManager conflict."""
    assert cli.EXIT_CONFIG == os.EX_CONFIG == EX_CONFIG and cli.EXIT_RETRY == 2 and cli.EXIT_CONFLICT == 3
    unit = _unit_sections()
    service = unit["Service"]
    assert service["Restart"] == "on-failure"
    prevented = {int(code) for code in service["RestartPreventExitStatus"].split()}
    assert prevented == set(cli.PERMANENT_EXIT_CODES) == {3, 78}
    assert cli.EXIT_RETRY not in prevented and cli.EXIT_UNEXPECTED not in prevented  # a modem may still appear
    # 69 is `run --steps N`'s (no answer from the service); the unit passes no --steps and must not prevent it.
    assert cli.EXIT_UNAVAILABLE == os.EX_UNAVAILABLE == 69 and cli.EXIT_UNAVAILABLE not in prevented
    assert "--steps" not in service["ExecStart"]
    # start limits are [Unit] settings (in [Service] systemd ignores them, with a warning)
    assert unit["Unit"]["StartLimitIntervalSec"] == "10min" and int(unit["Unit"]["StartLimitBurst"]) == 50
    assert "StartLimitBurst" not in service and "StartLimitIntervalSec" not in service


def test_run_help_documents_the_exit_codes() -> None:
    shown = CliRunner().invoke(app, ["run", "--help"], env=ENV)
    text = " ".join(shown.output.split())
    assert "78 (EX_CONFIG)" in text and "RestartPreventExitStatus" in text and "2 a managed interface" in text
    assert "69 (EX_UNAVAILABLE) with --steps: no step got a recommendation from the service" in text


@pytest.mark.parametrize(
    ("toml", "named"),
    [('backend = "comand"\n', "backend"), ("interval_s = = 3\n", "is not valid TOML"), ("nonsense = 1\n", "nonsense")],
    ids=["bad-value", "bad-toml", "unknown-key"],
)
def test_settings_errors_are_permanent_and_name_the_file(tmp_path: Path, toml: str, named: str) -> None:
    conf = tmp_path / "agent.toml"
    conf.write_text(toml)
    for dry_run in (True, False):  # --dry-run used to skip the backend's check (exit 0)
        result = _invoke(_run(tmp_path, "--config", str(conf), dry_run=dry_run))
        assert result.exit_code == EX_CONFIG, result.output
        errors = _errors(result.output)
        assert len(errors) == 1 and named in errors[0] and str(conf) in errors[0], result.output
    assert not (tmp_path / "j.json").exists()


def test_a_settings_file_that_is_a_directory_is_named_as_such(tmp_path: Path) -> None:
    result = _invoke(_run(tmp_path, "--config", str(tmp_path)))
    assert result.exit_code == EX_CONFIG
    assert _errors(result.output) == [f"Error: settings file {tmp_path} is a directory, not a file"], result.output


@pytest.mark.parametrize("steps", ["-1", "0"])
def test_steps_below_one_are_refused(tmp_path: Path, steps: str) -> None:
    """``--steps -1`` used to run no step and exit 0."""
    argv = _run(tmp_path)
    argv[argv.index("--steps") + 1] = steps
    result = _invoke(argv)
    assert result.exit_code == 2 and "--steps" in result.output, result.output


# 2. --dry-run checks the configured backend


def test_dry_run_refuses_the_networkmanager_backend(tmp_path: Path) -> None:
    """It used to print ip/sysctl commands and exit 0, where the real run goes through NetworkManager (or exits 3)."""
    conf = tmp_path / "agent.toml"
    conf.write_text('backend = "networkmanager"\n')
    result = _invoke(_run(tmp_path, "--config", str(conf)))
    assert result.exit_code == EX_CONFIG, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and "--dry-run cannot show what backend = networkmanager would do" in errors[0]
    assert "would run: " not in result.output


@needs_ip
@pytest.mark.skipif(not Path("/proc/sys/net/mptcp").is_dir(), reason="kernel without MPTCP")
def test_dry_run_of_the_netlink_backend_is_still_a_dry_run(tmp_path: Path, service: Any) -> None:
    conf = tmp_path / "agent.toml"
    conf.write_text('backend = "netlink"\n')
    result = _invoke(_run(tmp_path, "--config", str(conf), service=service.grpc_url))  # a service that answers
    assert result.exit_code == 0 and "stopped after 1 step(s)" in result.output, result.output
    assert not (tmp_path / "j.json").exists()  # a dry run journals nothing


# 3. MPTCP in the kernel


@pytest.fixture
def ip_without_mptcp(tmp_path: Path) -> str:
    """A PATH whose ``ip`` fails for ``ip mptcp …`` as iproute2 does on a kernel without MPTCP."""
    if IP is None:
        pytest.skip("needs iproute2 (ip)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ip"
    fake.write_text(
        '#!/bin/sh\nfor a in "$@"; do\n  if [ "$a" = mptcp ]; then\n'
        "    echo 'Error: Generic Netlink family mptcp_pm not found' >&2; exit 1\n  fi\ndone\n"
        f'exec {IP} "$@"\n'
    )
    fake.chmod(0o755)
    return f"{bin_dir}:{os.environ.get('PATH', '')}"


def test_a_kernel_whose_mptcp_cannot_be_read_is_refused_before_anything(tmp_path: Path, ip_without_mptcp: str) -> None:
    """It ended in ``BackendError: … ip -j mptcp endpoint show exited 1`` (traceback, exit 1), after a log blaming
    iproute2 for not knowing ``laminar``."""
    result = _invoke(_run(tmp_path, "--steps", "2"), PATH=ip_without_mptcp)
    assert result.exit_code == EX_CONFIG, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and "MPTCP" in errors[0] and "mptcp_pm not found" in errors[0], result.output
    assert "laminar" not in result.output and "would run" not in result.output


def test_a_kernel_without_mptcp_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc_sys = tmp_path / "proc_sys"
    (proc_sys / "net" / "ipv4").mkdir(parents=True)  # no net/mptcp: CONFIG_MPTCP=n
    monkeypatch.setattr(preflight, "PROC_SYS", proc_sys)
    result = _invoke(_run(tmp_path))
    assert result.exit_code == EX_CONFIG, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and errors[0].startswith("Error: this kernel has no MPTCP ("), result.output
    assert "CONFIG_MPTCP=y" in errors[0]


def test_mptcp_disabled_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``net.mptcp.enabled = 0`` was read (``KernelCapabilities.mptcp_enabled``) and never used."""
    proc_sys = tmp_path / "proc_sys"
    (proc_sys / "net" / "mptcp").mkdir(parents=True)
    (proc_sys / "net" / "mptcp" / "enabled").write_text("0\n")
    with caplog.at_level(logging.WARNING, logger="edgepath_agent.applier.preflight"):
        caps = check_mptcp("networkmanager", proc_sys=proc_sys)
    assert caps is not None and not caps.mptcp_enabled
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        warning.startswith("MPTCP is disabled (net.mptcp.enabled = 0)") and "sysctl -w net.mptcp.enabled=1" in warning
    )
    caplog.clear()
    (proc_sys / "net" / "mptcp" / "enabled").write_text("1\n")
    check_mptcp("command", proc_sys=proc_sys, read=lambda: None)
    assert not caplog.records

    def broken() -> None:
        raise OSError("mptcp_pm not found")

    with pytest.raises(MptcpUnavailable, match=r"with ip mptcp \(mptcp_pm not found\)"):
        check_mptcp("dry-run", proc_sys=proc_sys, read=broken)
    assert check_mptcp("command", netns="ep-no-such-ns", proc_sys=proc_sys) is None  # left to the interface check


# 4. a journal that cannot be written


@pytest.mark.parametrize("where", ["parent-is-a-file", "grandparent-is-a-file", "a-directory"])
def test_an_unwritable_journal_path_is_refused_before_anything(tmp_path: Path, where: str) -> None:
    """``--journal`` under a file ended in ``FileExistsError``, then ``NotADirectoryError`` (traceback, exit 1)."""
    afile = tmp_path / "afile"
    afile.write_text("")
    journal = {
        "parent-is-a-file": afile / "journal.json",
        "grandparent-is-a-file": afile / "sub" / "journal.json",
        "a-directory": tmp_path,
    }[where]
    argv = _run(tmp_path, dry_run=False)
    argv[argv.index("--journal") + 1] = str(journal)
    result = _invoke(argv)  # a real run, refused before it reads or changes anything
    assert result.exit_code == EX_CONFIG, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and errors[0].startswith(f"Error: journal {journal} "), result.output
    assert ("is a directory" if where == "a-directory" else "is not a directory") in errors[0]


def test_a_journal_on_a_read_only_file_system_is_refused(tmp_path: Path) -> None:
    """``--journal`` on a read-only mount ended in ``OSError: [Errno 30]`` (traceback, exit 1). The mount is made in
    a mount namespace of the command's own (``unshare --mount``): nobody else sees it."""
    ro = tmp_path / "ro"
    ro.mkdir()
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare --mount (root/CAP_SYS_ADMIN)")
    argv = [str(AGENT), *_run(tmp_path, dry_run=False)]
    argv[argv.index("--journal") + 1] = str(ro / "journal.json")
    script = f"mount -t tmpfs -o ro tmpfs {ro} && exec " + " ".join(argv)
    env = {**os.environ, **ENV, "EDGEPATH_AGENT_STATUS_FILE": str(tmp_path / "s.json")}
    done = subprocess.run([unshare, "--mount", "sh", "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == EX_CONFIG, done.stdout + done.stderr
    errors = _errors(done.stderr)
    assert len(errors) == 1 and "Read-only file system" in errors[0] and str(ro / "journal.json") in errors[0]
    assert "Traceback" not in done.stderr


# 5. a journal that is not one


@pytest.mark.parametrize("content", ["{bad", "[]", '{"snapshot": {"default_routes": [{"via": 1}]}}', "\xff\xfe"])
def test_a_corrupt_journal_is_one_error_line_for_rollback_and_run(tmp_path: Path, content: str) -> None:
    """``rollback`` ended in ``JSONDecodeError`` (traceback, exit 1, which --help says means "retry"); so did
    ``run``."""
    journal = tmp_path / "j.json"
    journal.write_bytes(content.encode("latin-1"))
    result = _invoke(["rollback", "--journal", str(journal)])
    assert result.exit_code == 2, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and errors[0].startswith(f"Error: journal {journal} "), result.output
    assert journal.read_bytes() == content.encode("latin-1")  # kept: it is evidence
    result = _invoke(_run(tmp_path, dry_run=False))
    assert result.exit_code == EX_CONFIG, result.output
    assert len(_errors(result.output)) == 1 and str(journal) in _errors(result.output)[0]


def test_rollback_of_a_directory_is_one_error_line(tmp_path: Path) -> None:
    result = _invoke(["rollback", "--journal", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert _errors(result.output) == [f"Error: journal {tmp_path} is a directory; give the journal file's path"]


# 6. (the namespace in the journal, without a kernel: tests/agent/netns/test_agent_rollback_netns.py has the real one)

ROUTES = NetState(default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)))
ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}


def test_the_journal_records_the_namespace_and_rollback_acts_only_there(tmp_path: Path) -> None:
    path = tmp_path / "j.json"
    config = ApplierConfig(interfaces=("wlan0", "wwan0"), manage_cc=False, manage_endpoints=False)
    Applier(DryRunBackend(ROUTES, ADDRS, out=None, netns="ep-dev"), Journal(path), config).apply(
        {"primary_path": {"interface": "wwan0"}}
    )
    data = json.loads(path.read_text())
    assert data["version"] == 2 and data["netns"] == "ep-dev"
    journal = Journal(path)
    assert rollback_netns(journal, None) == rollback_netns(journal, "ep-dev") == "ep-dev"
    with pytest.raises(JournalError, match=r"not of network namespace ep-other: .* leave out --netns"):
        rollback_netns(journal, "ep-other")
    host = DryRunBackend(ROUTES, ADDRS, out=None)  # another namespace's backend (the host's): refused, untouched
    with pytest.raises(ApplyError, match=r"taken in network namespace ep-dev, not in the host namespace"):
        Applier(host, Journal(path), config).rollback()
    assert host.printed == [] and path.exists()
    # `run` in another namespace would keep (and later restore) that snapshot: refused at start
    with pytest.raises(JournalError, match=r"holds the state of network namespace ep-dev.*edgepath-agent rollback"):
        check_for_run(path, None)
    check_for_run(path, "ep-dev")
    # A version-1 journal (no netns recorded) goes where it is told, as before.
    path.write_text(json.dumps({"version": 1, "snapshot": data["snapshot"], "entries": []}))
    assert rollback_netns(Journal(path), "ep-x") == "ep-x" and rollback_netns(Journal(path), None) is None


# 10. status on a record it cannot read; the minor ones


@pytest.mark.parametrize("what", ["not-json", "a-list", "a-directory"])
def test_status_of_an_unreadable_record_is_one_error_line(tmp_path: Path, what: str) -> None:
    record = tmp_path if what == "a-directory" else tmp_path / "status.json"
    if what != "a-directory":
        record.write_text("{bad" if what == "not-json" else "[]")
    for extra in ([], ["--json"]):
        result = _invoke(["status", "--status-file", str(record), *extra])
        assert result.exit_code == 2, result.output
        errors = _errors(result.output)
        assert len(errors) == 1 and errors[0].startswith(f"Error: cannot read the status record {record}: ")


def test_status_without_a_record_says_not_running_in_json(tmp_path: Path) -> None:
    result = _invoke(["status", "--status-file", str(tmp_path / "none.json"), "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["running"] is False


def test_status_of_a_service_never_contacted_does_not_say_unreachable() -> None:
    """After a run whose every step was skipped (all interfaces down) it printed ``service: UNREACHABLE via -``."""
    record = {"updated_unix_ms": 1, "pid": 1, "service": {"urls": ["grpc://h:1"], "reachable": None}}
    text = format_status(record, now_unix_ms=1)
    assert "service:        not contacted yet (configured: grpc://h:1)" in text and "UNREACHABLE" not in text
    record["service"]["reachable"] = False
    assert "service:        UNREACHABLE via - (configured: grpc://h:1)" in format_status(record, now_unix_ms=1)
