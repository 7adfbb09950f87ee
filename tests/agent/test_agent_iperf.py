"""The iperf3 probe (edgepath_agent.iperf, issue 21 item 5): JSON parsing, argv, detection, start-up refusal.

The parsing tests read a real iperf3 3.12 client document (``-J -R --get-server-output`` under
mptcpize, through a 20 Mbit/s tbf, recorded on this machine; see fixtures/README.md). Detection uses
small stand-in ``iperf3``/``mptcpize`` scripts on a private ``PATH``: an iperf3 that lists ``--mptcp``
(≥ 3.16) is not packaged for Debian 12, so that branch cannot be exercised with the real binary here.
The real transfers are in tests/agent/netns/test_agent_iperf_netns.py.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from edgepath_agent.daemon import Agent, AgentConfig
from edgepath_agent.iperf import Iperf3, IperfFailed, IperfMissing, detect_iperf3, parse_iperf3_json
from typer.testing import CliRunner

FIXTURE = Path(__file__).parent / "fixtures" / "iperf3-3.12-reverse-mptcpize.json"


def load_fixture() -> dict:
    return json.loads(FIXTURE.read_text())


def test_reverse_mode_document_gives_downlink_rtt_and_loss():
    doc = load_fixture()
    result = parse_iperf3_json(doc, mptcp=True)
    received = doc["end"]["sum_received"]
    assert result.bytes == received["bytes"] == 1001644
    assert result.throughput_bps == pytest.approx(8 * 1001644 / 0.424049)
    assert 15e6 < result.throughput_bps < 20.5e6  # the tbf rate was 20 Mbit/s
    assert result.rtt_ms == pytest.approx(6.733)  # the server's (sender's) mean_rtt, µs → ms
    assert result.loss == pytest.approx(68 * 1448 / 1048576)  # retransmits × MSS / bytes sent
    assert result.mptcp is True and result.local_addr == "10.77.0.1"
    assert result.server_counters == {"tool": "iperf3", "version": doc["start"]["version"]}


def test_without_server_output_rtt_and_loss_are_unknown_not_zero():
    doc = load_fixture()
    del doc["server_output_json"]
    result = parse_iperf3_json(doc, mptcp=False, completion_s=0.5)
    assert result.rtt_ms is None and result.loss is None
    assert result.completion_s == 0.5 and result.mptcp is False


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(error="unable to connect to server: Connection refused"), "Connection refused"),
        (lambda d: d.pop("end"), "end.sum_received"),
        (lambda d: d["end"]["sum_received"].update(seconds=5e-324), "duration"),
        (lambda d: d["end"]["sum_received"].update(seconds=0), "duration"),
        (lambda d: d["end"]["sum_received"].update(seconds=float("nan")), "duration"),
    ],
)
def test_failed_or_degenerate_runs_raise_instead_of_reporting_a_rate(mutate, message):
    doc = load_fixture()
    mutate(doc)
    with pytest.raises(IperfFailed, match=message):
        parse_iperf3_json(doc, mptcp=True)


def test_argv_per_mptcp_mode():
    base = ["-c", "192.0.2.10", "-p", "5201", "-R", "-n", "262144", "-J", "--get-server-output",
            "--connect-timeout", "2000"]  # fmt: skip
    native = Iperf3("/usr/bin/iperf3", "native", "iperf 3.19")
    assert native.command("192.0.2.10", 5201, 262144, 2.0) == ["/usr/bin/iperf3", *base, "--mptcp"]
    wrapped = Iperf3("/usr/bin/iperf3", "mptcpize", "iperf 3.12", "/usr/bin/mptcpize")
    assert wrapped.command("192.0.2.10", 5201, 262144, 2.0) == ["/usr/bin/mptcpize", "run", "/usr/bin/iperf3", *base]
    tcp = Iperf3("/usr/bin/iperf3", "tcp", "iperf 3.12")
    assert tcp.command("192.0.2.10", 5201, 262144, 2.0) == ["/usr/bin/iperf3", *base]
    assert not tcp.mptcp and native.mptcp and wrapped.mptcp
    argv = wrapped.command("192.0.2.10", 5201, 262144, 2.0, bind_addr="10.0.0.2", netns="ep-dev-x")
    assert argv[:5] == ["ip", "netns", "exec", "ep-dev-x", "/usr/bin/mptcpize"] and argv[-2:] == ["-B", "10.0.0.2"]
    assert native.command("h", 1, 1, 2.0, use_mptcp=False)[-1] == "2000"  # no --mptcp when MPTCP is not wanted


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize(
    ("help_text", "with_mptcpize", "mode"),
    [
        ("  -m, --mptcp               use MPTCP rather than plain TCP", False, "native"),
        ("  -C, --congestion <algo>   set TCP congestion control algorithm", True, "mptcpize"),
        ("  -C, --congestion <algo>   set TCP congestion control algorithm", False, "tcp"),
    ],
)
def test_detection_prefers_native_mptcp_then_mptcpize_then_tcp(tmp_path, monkeypatch, help_text, with_mptcpize, mode):
    _fake(tmp_path, "iperf3", f'if [ "$1" = --version ]; then echo "iperf 3.x (test)"; else echo "{help_text}"; fi')
    if with_mptcpize:
        _fake(tmp_path, "mptcpize", "exit 0")
    monkeypatch.setenv("PATH", str(tmp_path))
    tool = detect_iperf3()
    assert tool is not None and tool.mode == mode and tool.version == "iperf 3.x (test)"
    assert (tool.mptcpize is not None) == (mode == "mptcpize")


def test_no_iperf3_is_detected_as_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_iperf3() is None


class _NoService:
    def recommend(self, request):  # pragma: no cover - never reached
        raise AssertionError


def test_agent_refuses_to_start_with_probe_tool_iperf3_and_no_iperf3(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    config = AgentConfig(probe="192.0.2.10:5201", journal=tmp_path / "j.json")
    assert config.probe_tool == "iperf3"  # the default
    with pytest.raises(IperfMissing, match="probe_tool = builtin"):
        Agent(config, _NoService(), applier=None, collectors=[])  # type: ignore[arg-type]
    builtin = AgentConfig(probe="192.0.2.10:5201", probe_tool="builtin", journal=tmp_path / "j.json")
    assert Agent(builtin, _NoService(), applier=None, collectors=[]).iperf3 is None  # type: ignore[arg-type]
    passive = AgentConfig(journal=tmp_path / "j.json")  # no probe: passive counters, iperf3 not needed
    assert Agent(passive, _NoService(), applier=None, collectors=[]).iperf3 is None  # type: ignore[arg-type]


def test_cli_names_the_missing_iperf3_and_exits_78(tmp_path, monkeypatch):
    """The dry run still reads state with ``ip``, so PATH stays; iperf3's absence is patched in (see above)."""
    from edgepath_agent import daemon
    from edgepath_agent.cli import EXIT_CONFIG, app

    monkeypatch.setattr(daemon, "detect_iperf3", lambda: None)
    monkeypatch.setattr(daemon, "interface_exists", lambda _name, _netns=None: True)  # wlan0: a device's name
    argv = ["run", "--dry-run", "--steps", "1", "--probe", "192.0.2.10:5201", "--journal", str(tmp_path / "j.json"),
            "--service", "grpc://127.0.0.1:9", "--interface", "wlan0=WIFI"]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == EXIT_CONFIG, result.output
    assert "Error: probe_tool = iperf3 but no iperf3 binary is on PATH" in result.output
