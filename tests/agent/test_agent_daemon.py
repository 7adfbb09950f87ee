"""Daemon, failover client and configuration against a real service on loopback.

The applier uses the dry-run backend here (no privileges needed: its simulated
state stands in for the kernel, which tests/agent/netns/ exercises for real); the
service, its gRPC/REST servers and the MPTCP/TCP transfer on loopback are real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from edgepath_agent.applier import Applier, DryRunBackend, Journal, NetState, Route
from edgepath_agent.client import FailoverClient, ServiceError, connect, connect_failover
from edgepath_agent.collector import StaticCollector, TraceCollector
from edgepath_agent.daemon import Agent, AgentConfig, load_config
from edgepath_agent.meter import TransferServer, transfer
from pydantic import ValidationError

ROUTES = NetState(
    limits=(("add_addr_accepted", 0), ("subflows", 0)),
    default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)),
    sysctls=(("net.ipv4.tcp_congestion_control", "reno"),),
)
ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}
RADIO = {
    "wlan0": {"wifi_rssi_dbm": -80.0, "link_speed_mbps": 6.0, "frequency_mhz": 2412.0},
    "wwan0": {"rsrp_dbm": -85.0, "rsrq_db": -9.0, "sinr_db": 18.0},
}


def dead_url(scheme: str) -> str:
    import socket

    with socket.socket() as s:  # a port nobody listens on (bound then released)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"{scheme}://127.0.0.1:{port}"


def make_agent(urls: list[str], measure=None, attempts: int = 2) -> tuple[Agent, DryRunBackend]:
    config = AgentConfig(device_id="dev-test", service=urls, interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, attempts=1)
    backend = DryRunBackend(ROUTES, ADDRS, out=None)
    applier = Applier(backend, Journal(), config.applier_config(), allowed_cc=("reno", "cubic"))
    trace = TraceCollector()
    trace.set(RADIO)
    client = FailoverClient([connect(u, 1.0) for u in urls], attempts=attempts, backoff_initial_s=0.01)
    return Agent(config, client, applier, [trace, StaticCollector(config.interfaces)], measure=measure), backend


@pytest.fixture
def transfer_server():
    with TransferServer("127.0.0.1", 0) as srv:
        yield srv


def test_step_collects_decides_applies_measures_and_reports(service, transfer_server):
    agent, backend = make_agent(
        [service.grpc_url, service.http_url], measure=lambda _p: transfer("127.0.0.1", transfer_server.port, 64 * 1024)
    )
    result = agent.step()
    iface_names = [i["name"] for i in result.request["interfaces"]]
    assert iface_names == ["wlan0", "wwan0"] and result.request["interfaces"][0]["wifi_rssi_dbm"] == -80.0
    primary = result.recommendation["primary_path"]["interface"]
    assert primary in ("wlan0", "wwan0")
    assert min(backend.state.default_routes, key=lambda r: r.metric).dev == primary
    assert result.measurement.bytes == 64 * 1024
    assert result.ack["decision_id"] == result.recommendation["decision_id"] and result.ack["accepted"]
    assert agent.client.last_used == service.grpc_url
    agent.close(restore=True)
    assert backend.state.canonical() == ROUTES.canonical()


def test_unreachable_service_keeps_last_applied_configuration(service):
    agent, backend = make_agent([service.grpc_url], measure=lambda _p: None)
    first = agent.step()
    applied_state = backend.state
    agent.client = connect_failover([dead_url("grpc"), dead_url("http")], timeout_s=0.5, attempts=1)
    second = agent.step()
    assert second.kept_last and second.recommendation is None and "UNAVAILABLE" in (second.error or "")
    assert backend.state == applied_state and second.applied == first.applied


def test_undelivered_outcomes_are_queued_and_flushed(service):
    agent, _ = make_agent([service.http_url], measure=lambda _p: None)
    rec = agent.client.recommend(agent.context())
    outcome = {"device_id": "dev-test", "decision_id": rec["decision_id"], "throughput_bps": 3e7}
    live = agent.client
    agent.client = connect_failover([dead_url("http")], timeout_s=0.5, attempts=1)
    assert agent._report(outcome) is None and list(agent.pending) == [outcome]
    assert agent.flush_outcomes() == 0 and len(agent.pending) == 1
    agent.client = live
    assert agent.flush_outcomes() == 1 and not agent.pending
    ack = live.report_outcome(outcome)  # the service saw it exactly once
    assert ack["duplicate"] is True


def test_failover_uses_rest_when_grpc_is_down_and_never_retries_invalid_input(service):
    client = connect_failover([dead_url("grpc"), service.http_url], timeout_s=0.5, attempts=2)
    rec = client.recommend({"device_id": "d", "interfaces": [{"name": "wlan0", "access_type": "WIFI"}]})
    assert rec["decision_id"] and client.last_used == service.http_url
    with pytest.raises(ServiceError) as err:
        client.recommend({"device_id": "d", "interfaces": [{"name": "wlan0", "access_type": "WIFI", "loss": 7.0}]})
    assert err.value.code == 422
    client.close()


def test_config_precedence_cli_over_file_over_defaults(tmp_path: Path):
    f = tmp_path / "agent.toml"
    f.write_text('device_id = "from-file"\ninterval_s = 5.0\n[interfaces]\nwlan0 = "WIFI"\n')
    cfg = load_config(f, interval_s=1.5, probe=None)
    assert (cfg.device_id, cfg.interval_s, cfg.interfaces) == ("from-file", 1.5, {"wlan0": "WIFI"})
    assert cfg.probe_bytes == 256 * 1024  # default
    j = tmp_path / "agent.json"
    j.write_text(json.dumps({"backup_weight_threshold": 0.3}))
    assert load_config(j).applier_config().backup_weight_threshold == 0.3
    with pytest.raises(ValidationError, match="interval_s"):
        load_config(f, interval_s=-1.0)


def test_run_stops_cleanly_on_sigterm(tmp_path: Path, service):
    if not Path("/proc/sys/net/mptcp").is_dir():
        pytest.skip("the dry run reads `ip mptcp` state: kernel without MPTCP")
    journal = tmp_path / "journal.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgepath_agent.cli",
            "run",
            "--dry-run",
            "--service",
            service.http_url,
            "--interface",
            "lo=ETHERNET",
            "--interval-s",
            "0.05",
            "--journal",
            str(journal),
            "--log-level",
            "INFO",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Bound the wait: a watchdog kills the agent after 60 s, which closes stderr and ends the loop below
    # (the test then fails on the return code instead of hanging).
    watchdog = threading.Timer(60.0, proc.kill)
    watchdog.start()
    try:
        # Wait until the loop has made at least one decision round, then stop it.
        for line in proc.stderr:
            if "apply failed" in line or "decision" in line:
                break
        watchdog.cancel()
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "stopped after" in out


@pytest.mark.parametrize("scheme", ["grpc", "http"])
def test_context_carries_kernel_caps_profile_and_histories_over_both_transports(service, transfer_server, scheme):
    from edgepath_agent.collector import KernelCollector

    url = service.grpc_url if scheme == "grpc" else service.http_url
    agent, _backend = make_agent([url], measure=lambda _p: transfer("127.0.0.1", transfer_server.port, 32 * 1024))
    agent.config.application_profile = "BULK"
    agent.collectors.append(KernelCollector())
    agent.step()
    agent.step()
    request = agent.context()
    if Path("/proc/sys/net/mptcp").is_dir():
        assert request["kernel"]["allowed_congestion_controls"]
    # the columnar form (one time per sample): one throughput sample per step, on its primary
    samples = [v for h in request["subflow_histories"] for v in h.get("throughput_bps", [])]
    times = [t for h in request["subflow_histories"] for t in h.get("throughput_t_ms", [])]
    assert len(samples) == len(times) == 2 and all(v > 0 for v in samples)
    assert not any("throughput_samples" in h or "rtt_samples" in h for h in request["subflow_histories"])
    rec = agent.client.recommend(request)  # the service accepts the full request on this transport
    assert {w["interface"] for w in rec["scheduler"]["weights"]} == {"wlan0", "wwan0"}
    assert rec["congestion"]["profile"] == "BULK"  # same spelling over both transports
