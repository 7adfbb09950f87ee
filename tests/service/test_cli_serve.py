"""`edgepath serve` as a real process: ready file, gRPC health SERVING, REST health, clean SIGTERM exit."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest
from edgepath.adapters.registry import COMPILED
from edgepath.grpc.convert import COMPILED_WIRE
from edgepath.launch import ServeError, start_serve, stop_serve
from grpc_health.v1 import health_pb2, health_pb2_grpc

EDGEPATH = Path(sys.executable).with_name("edgepath")


def test_serve_runs_both_servers_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    proc, ports = start_serve(
        tmp_path / "ready.json", tmp_path / "serve.log", env={"EDGEPATH_POLICY": "epsilon_greedy"}
    )
    try:
        assert ports["pid"] == proc.pid
        with grpc.insecure_channel(f"127.0.0.1:{ports['grpc_port']}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for name in ("", "edgepath.v1.PathService"):
                reply = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
        base = f"http://127.0.0.1:{ports['http_port']}"
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        assert "/v1/recommendations" in httpx.get(f"{base}/openapi.json").json()["paths"]
        rec = httpx.post(
            f"{base}/v1/recommendations",
            json={
                "device_id": "d",
                "interfaces": [{"name": "wlan0", "access_type": "WIFI"}, {"name": "wwan0", "access_type": "LTE"}],
            },
        ).json()
        assert rec["policy"] == "epsilon_greedy"  # the environment variable reached the settings
    finally:
        code = stop_serve(proc)
    assert code == 0


@pytest.mark.parametrize("native", ["true", "false"])
def test_serve_says_which_engines_are_compiled(tmp_path: Path, native: str) -> None:
    """The start-up line names the engines whose compiled twins decide (service/native), or says none do, and
    whether gRPC requests are read by the compiled decoding and replies written by the compiled encoding."""
    proc, _ = start_serve(tmp_path / "ready.json", tmp_path / "serve.log", env={"EDGEPATH_NATIVE_ENGINES": native})
    assert stop_serve(proc) == 0
    installed = [name for name, ok in COMPILED.items() if ok]
    named = ", ".join(installed) if native == "true" else ""
    wire = {part: "yes" if ok and native == "true" else "no" for part, ok in COMPILED_WIRE.items()}
    engines = named or "none, the Python engines decide"
    want = (
        f"compiled engines: {engines}; compiled gRPC request decoding: {wire['request decoding']}; "
        f"compiled gRPC reply encoding: {wire['reply encoding']}\n"
    )
    assert want in (tmp_path / "serve.log").read_text()


def test_a_warm_start_is_loaded_once_checked_and_served_by_the_same_load(tmp_path: Path) -> None:
    """``serve --model`` loaded the artefact twice: once to refuse a bad one before serving, then again to serve
    it (its lines, a policy warning among them, written twice, and the unpickling paid twice)."""
    model = Path(__file__).resolve().parents[2] / "models" / "primary-path-v2"
    proc, ports = start_serve(tmp_path / "ready.json", tmp_path / "serve.log", "--model", str(model))
    try:
        rec = httpx.post(
            f"http://127.0.0.1:{ports['http_port']}/v1/recommendations",
            json={
                "device_id": "d",
                "interfaces": [{"name": "wlan0", "access_type": "WIFI"}, {"name": "wwan0", "access_type": "LTE"}],
            },
        )
    finally:
        assert stop_serve(proc) == 0
    assert rec.status_code == 200
    assert (tmp_path / "serve.log").read_text().count(f"warm start from {model}") == 1


def test_a_service_that_cannot_start_is_a_clear_error_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match="no_such_policy"):
        start_serve(tmp_path / "ready.json", tmp_path / "serve.log", "--policy", "no_such_policy", timeout_s=60)


def test_serve_rejects_an_unknown_policy() -> None:
    out = subprocess.run(
        [str(EDGEPATH), "serve", "--policy", "no_such_policy", "--grpc-port", "0", "--http-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "no_such_policy" in out.stderr


def _ipv6_loopback() -> bool:
    """True when this machine can bind ::1 (socket.has_ipv6 and a loopback with an IPv6 address)."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback (::1) to bind")
@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_serve_binds_ipv6(tmp_path: Path, host: str) -> None:
    """IPv6-only clusters (5G MEC): ``--host ::1`` gave "gRPC server could not bind ::1:50071" (the address not in
    brackets), ``--host '[::1]'`` "cannot be bound: Name or service not known". Both now serve gRPC and REST, and
    the start-up line writes the addresses in brackets."""
    proc, ports = start_serve(tmp_path / "ready.json", tmp_path / "serve.log", "--host", host)
    try:
        with grpc.insecure_channel(f"[::1]:{ports['grpc_port']}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        assert httpx.get(f"http://[::1]:{ports['http_port']}/healthz").json() == {"status": "ok"}
    finally:
        code = stop_serve(proc)
    assert code == 0
    http = f"http://[::1]:{ports['http_port']}"
    assert (
        f"gRPC [::1]:{ports['grpc_port']}, HTTP {http}, metrics {http}/metrics;" in (tmp_path / "serve.log").read_text()
    )


def test_a_graceful_shutdown_is_not_reported_as_a_store_outage(tmp_path: Path) -> None:
    """While draining the plane is not ready; the readiness watcher logged that as "not ready: state store
    unreachable" at WARNING on every SIGTERM. The readiness delay (1 s, beyond the watcher's 0.5 s period) lets it
    see the drain before it stops."""
    log = tmp_path / "serve.log"
    proc, _ = start_serve(tmp_path / "ready.json", log, env={"EDGEPATH_DRAIN_READINESS_DELAY_S": "1.0"})
    assert stop_serve(proc) == 0
    text = log.read_text()
    assert "draining: readiness false" in text and "not ready: draining" in text, text
    assert "state store unreachable" not in text, text


def test_serve_warns_about_an_environment_variable_that_names_no_setting(tmp_path: Path) -> None:
    """A typo in the chart's extraSettings (``EDGEPATH_GRPC_PROT``) was ignored without a word, while the same typo
    in a settings file is refused. Kubernetes' service-link variables of a Service named edgepath are no typo."""
    log = tmp_path / "serve.log"
    links = {"EDGEPATH_SERVICE_HOST": "10.0.0.1", "EDGEPATH_PORT": "tcp://10.0.0.1:50051"}
    proc, _ = start_serve(tmp_path / "ready.json", log, env={"EDGEPATH_GRPC_PROT": "5", **links})
    assert stop_serve(proc) == 0
    warnings = [line for line in log.read_text().splitlines() if "matches no setting" in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].endswith(
        "WARNING edgepath [None]: environment variable EDGEPATH_GRPC_PROT matches no setting and is ignored; "
        "did you mean EDGEPATH_GRPC_PORT?"
    ), warnings
