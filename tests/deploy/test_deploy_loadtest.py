"""Load tests and benchmark: the locust users against a real service, and the bench's report.

Both run real servers on loopback for a few seconds; they check that the tools
work and what they report, never how fast anything is (speed is measured by
``loadtest/bench``, not asserted).
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from deploy_helpers import ROOT, VENV_BIN, served
from edgepath.state.codec import row_decision
from service_harness import running_service

sys.path.insert(0, str(ROOT / "loadtest"))
import workload

REQUIRED_BENCH_KEYS = {
    "service_rps",
    "echo_rps",
    "ratio",
    "p50_ms",
    "p99_ms",
    "p99_ms_while_training",
    "errors",
    "batch_decisions_per_s",
    "workers",
}


def test_agent_shaped_contexts_validate_and_never_repeat_across_variants() -> None:
    """The bench's and breakdown's contexts as the agent sends them: valid requests on both transports (REST body and
    proto), ``history_samples`` RTT and throughput samples per interface, deterministic per (situation, variant), a
    different draw for another variant, and the MLPM advice computed on them differs with it."""
    from edgepath import types as ep_types
    from edgepath.adapters.mlpm import scheduler_advice
    from edgepath.grpc import convert
    from edgepath.settings import Settings
    from edgepath.wire import edgepath_pb2 as pb

    situation = workload.situations(20)[3]
    bodies = [workload.recommend_body(situation, "dev-1", 20, v) for v in (0, 0, 1)]
    assert bodies[0] == bodies[1] and bodies[0] != bodies[2]
    requests = [ep_types.RecommendRequest.model_validate(b) for b in bodies]
    # the agent's columnar form (rtt_t_ms/rtt_ms, ...), one time per sample
    assert [len(h.rtt_ms) for h in requests[0].subflow_histories] == [20, 20]
    assert all(len(h.throughput_t_ms) == len(h.throughput_bps) == 20 for h in requests[0].subflow_histories)
    assert {h.interface for h in requests[0].subflow_histories} == {i.name for i in requests[0].interfaces}
    via_grpc = convert.recommend_request(workload.recommend_proto(pb, situation, "dev-1", 20, 0))
    assert via_grpc.subflow_histories == requests[0].subflow_histories
    weights = [scheduler_advice(r, Settings()).weights for r in (requests[0], requests[2])]
    assert all(w.rtt_samples == 20 for w in weights[0]) and weights[0] != weights[1]
    # the older one-object-per-sample form carries the same samples: the same advice
    objects = ep_types.RecommendRequest.model_validate(workload.recommend_body(situation, "dev-1", 20, 0, "objects"))
    assert [len(h.rtt_samples) for h in objects.subflow_histories] == [20, 20]
    via_grpc_objects = convert.recommend_request(workload.recommend_proto(pb, situation, "dev-1", 20, 0, "objects"))
    assert via_grpc_objects.subflow_histories == objects.subflow_histories
    assert scheduler_advice(objects, Settings()) == scheduler_advice(requests[0], Settings())
    assert "subflow_histories" not in workload.recommend_body(situation, "dev-1")  # 0 samples: radio readings only


def test_workload_uses_real_contexts_and_the_chosen_arms_bandwidth() -> None:
    pool = workload.situations(50)
    s = pool[0]
    body = workload.recommend_body(s, "dev-1")
    assert [i["access_type"] for i in body["interfaces"]] == ["WIFI", "LTE"]
    wifi = workload.outcome_body(s, "dev-1", {"decision_id": "d", "primary_path": {"access_type": "WIFI"}})
    lte = workload.outcome_body(s, "dev-1", {"decision_id": "d", "primary_path": {"access_type": "LTE"}})
    assert wifi["throughput_bps"] == pytest.approx(s.wifi_mbps * 1e6)
    assert lte["throughput_bps"] == pytest.approx(s.cellular_mbps * 1e6)
    assert len({(p.wifi_row, p.cellular_row) for p in pool}) > 40, "situations should vary"


def test_the_bench_names_the_errors_of_its_max_rate_phases() -> None:
    """closed_loop and batch_loop count each failed call under its kind, as the latency phases do. The target is a
    stand-in that refuses every other call (a real refusal needs a saturated server; the bench test above runs the
    real ones, which must not fail)."""
    import aiohttp

    bench = _bench_module()

    class Refusing:
        calls = 0

        def _maybe_refuse(self) -> None:
            self.calls += 1
            if self.calls % 2:
                raise aiohttp.ClientResponseError(None, (), status=503)  # type: ignore[arg-type]

        async def recommend(self, situation: object, device: str) -> dict[str, str]:
            self._maybe_refuse()
            return {}

        async def outcome(self, situation: object, device: str, reply: object) -> None:
            raise aiohttp.ServerDisconnectedError()

        def batch_payload(self, items: list[object]) -> list[object]:
            return items

        async def recommend_batch(self, payload: list[object]) -> int:
            self._maybe_refuse()
            return len(payload)

    load = bench.Load(["situation"], 1)
    mix = asyncio.run(bench.closed_loop(Refusing(), load, 2, 0.5, with_outcomes=True))
    assert set(mix["error_kinds"]) == {"recommend HTTP 503", "outcome ServerDisconnectedError"}
    assert mix["errors"] == sum(mix["error_kinds"].values()) > 0
    batch = asyncio.run(bench.batch_loop(Refusing(), load, 2, 0.5, 4))
    assert set(batch["error_kinds"]) == {"recommend_batch HTTP 503"}
    assert batch["errors"] == batch["error_kinds"]["recommend_batch HTTP 503"] > 0


def _bench_module() -> Any:
    """``loadtest/bench`` loaded as a module (it has no ``.py`` suffix), outside ``sys.modules``."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("bench_script", str(ROOT / "loadtest" / "bench"))
    spec = importlib.util.spec_from_loader("bench_script", loader)
    assert spec is not None
    bench = importlib.util.module_from_spec(spec)
    loader.exec_module(bench)
    return bench


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_locust_users_run_headless_against_a_real_service_without_failures(tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtest" / "run.py"), "--users", "6", "--duration", "8s", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    final = json.loads((out / "edgepath_final.json").read_text())
    for name in ("REST Recommend", "REST ReportOutcome", "gRPC Recommend", "gRPC ReportOutcome"):
        assert final[name]["requests"] > 0, name
        assert final[name]["failures"] == 0, name
    assert final["Aggregated"]["failures"] == 0
    decisions = final["REST Recommend"]["requests"] + final["gRPC Recommend"]["requests"]
    outcomes = final["REST ReportOutcome"]["requests"] + final["gRPC ReportOutcome"]["requests"]
    assert outcomes <= decisions, "at most one outcome per decision"
    with open(out / "edgepath_stats.csv") as f:
        assert {"Type", "Name", "Request Count", "Failure Count"} <= set(next(csv.reader(f)))
    assert (out / "report.html").stat().st_size > 1000


#: How the bench counts a call refused under load (``bench.error_kind``: a gRPC status, ``HTTP <status>``, or the
#: generator's own deadline), after the call's name: the service's admission (``RESOURCE_EXHAUSTED``, 503), gRPC core's
#: pending-call bound (``CANCELLED``), a call past its deadline. A server failure (``INTERNAL``, ``UNKNOWN``, 500) or
#: a broken connection is none of them.
LOAD_REFUSALS = (
    "StatusCode.CANCELLED",
    "StatusCode.RESOURCE_EXHAUSTED",
    "StatusCode.DEADLINE_EXCEEDED",
    "HTTP 503",
    "client_deadline",
)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_reports_every_key_for_both_transports(tmp_path: Path) -> None:
    report = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "loadtest" / "bench"),
            "--report",
            str(report),
            "--duration-s",
            "0.5",
            "--concurrency",
            "4",
            "--situations",
            "200",
            "--overload-s",
            "1",
            "--latency-rounds",
            "2",
            "--max-rounds",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(report.read_text())
    for transport in ("grpc", "rest"):
        assert REQUIRED_BENCH_KEYS <= set(data[transport]), transport
        assert data[transport]["service_rps"] > 0 and data[transport]["echo_rps"] > 0
        # the max rates in adjacent (echo, service) pairs: the ratio is the median of the pairs' ratios
        pairs = data[transport]["max_rate_rounds"]
        assert len(pairs) == 3
        assert all(p["ratio"] == pytest.approx(p["service_rps"] / p["echo_rps"]) for p in pairs)
        assert data[transport]["ratio"] == pytest.approx(sorted(p["ratio"] for p in pairs)[1])
        assert data[transport]["service_rps"] == pytest.approx(sorted(p["service_rps"] for p in pairs)[1])
        # "0 errors below capacity" is the bench's target (issue 16), not this test's: its phases last 0.5 s on a
        # machine the suite shares (CI and verification run two suites at once), so a latency phase's rate, 70 % of
        # a 0.5 s closed-loop maximum, can exceed what the host gives a moment later, and the service sheds (176 calls
        # in one run beside another suite). What holds on any host: every error is counted by its kind, and each is
        # a refusal under load (shed, cancelled by gRPC core's pending-call bound, past a deadline), never a failure.
        kinds = {
            kind: n
            for group in ("error_kinds_latency_phases", "error_kinds_max_rate_phases")
            for phase_kinds in data[transport][group].values()
            for kind, n in phase_kinds.items()
        }
        assert sum(kinds.values()) + data[transport]["errors_by_phase"]["stream"] == data[transport]["errors"]
        assert all(kind.endswith(LOAD_REFUSALS) for kind in kinds), kinds
        assert set(data[transport]["error_kinds_max_rate_phases"]) == {"echo_max", "service_max", "mix_max", "batch"}
        assert data[transport]["batch_decisions_per_s"] > 0 and data[transport]["workers"] == 1
        overload = data[transport]["overload"]
        assert {"shed_share", "p99_ms_admitted", "recovery_s"} <= set(overload)
        assert 0.0 <= overload["shed_share"] <= 1.0
        # idle and training alternate: each round is kept, the versions published add up
        rounds = data[transport]["latency_rounds"]
        assert len(rounds) == 2
        published = sum(r["model_versions_published_while_training"] for r in rounds)
        assert data[transport]["model_versions_published_while_training"] == published
        assert all(r["p99_ms"] > 0 and r["p99_ms_while_training"] > 0 for r in rounds)
        # how busy the serving process was in the latency phases: some CPU, at most every core
        cores = os.cpu_count() or 1
        for r in rounds:
            assert 0.0 < r["serving_cpu_cores"] <= cores and 0.0 < r["serving_cpu_cores_while_training"] <= cores
            assert 0.0 < r["machine_busy_cores"] <= cores and 0.0 < r["machine_busy_cores_while_training"] <= cores
        # the whole machine's busy cores hold at least the serving process's and the generator's (the two are
        # measured per process, the machine from /proc/stat: a tick's rounding apart)
        for when in ("idle", "while_training"):
            machine = data[transport][f"machine_busy_cores_{when}"]
            serving, generator = (
                data[transport][f"serving_cpu_cores_{when}"],
                data[transport][f"generator_cpu_cores_{when}"],
            )
            assert generator > 0.0 and 0.9 * (serving + generator) - 0.05 <= machine <= cores
        assert data[transport]["cpu_count"] == cores
        idle_cores = data[transport]["serving_cpu_cores_idle"]
        assert idle_cores == pytest.approx(sum(r["serving_cpu_cores"] for r in rounds) / len(rounds))
        assert data[transport]["serving_cpu_us_per_decision_idle"] == pytest.approx(
            1e6 * idle_cores / data[transport]["achieved_rps_idle"]
        )
        # one idle phase where the serving process is ~70 % busy: a lower rate than the latency phases' 70 % of the
        # closed loop's maximum whenever those kept it busier than that
        busy = data[transport]["at_70pct_busy"]
        assert 1 <= busy["attempts"] <= 3
        assert abs(busy["serving_cpu_cores"] - 0.7) <= 0.05 or busy["attempts"] == 3
        if busy["attempts"] == 1:  # scaled once, from the latency phases' utilisation
            assert busy["rate_per_s"] == pytest.approx(data[transport]["rate_for_latency_per_s"] * 0.7 / idle_cores)
        assert busy["p99_ms"] > 0 and 0.0 < busy["serving_cpu_cores"] <= cores
        assert busy["p99_ms_while_training"] > 0 and 0.0 < busy["serving_cpu_cores_while_training"] <= cores
        assert data[transport]["errors_by_phase"]["at_70pct_busy"] == busy["errors"]


def test_the_serving_cpu_counts_the_service_and_its_workers_but_not_its_refit_process() -> None:
    """serving_cpu_s: a stand-in service process with two children that have burnt CPU and wait, both with
    multiprocessing in their command line (as `serve --workers` processes and the refit process are spawned): a
    worker, and a refit process that has put itself below serving in the scheduler as ProcessRefitter's does
    (yield_cpu_to_serving). The service's and the worker's CPU seconds are counted, the refit process's are not."""
    bench = _bench_module()
    burn = "import sys; sum(range(20_000_000)); print('done', flush=True); sys.stdin.read()"
    refit = "from edgepath.training.online import yield_cpu_to_serving; yield_cpu_to_serving(); "
    service_code = (
        "import subprocess, sys\n"
        f"burn = {burn!r}\n"
        "kids = [subprocess.Popen([sys.executable, '-c', code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        f"        for code in ('import multiprocessing; ' + burn, 'import multiprocessing; ' + {refit!r} + burn)]\n"
        "for kid in kids:\n"
        "    kid.stdout.readline()\n"
        "print(kids[0].pid, kids[1].pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    service = subprocess.Popen([sys.executable, "-c", service_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert service.stdout is not None
        worker, refit = map(int, service.stdout.readline().split())

        def cpu(pid: int) -> float:
            times = psutil.Process(pid).cpu_times()
            return times.user + times.system

        assert bench.refit_processes(service.pid) == [refit]
        assert cpu(refit) > 0.05  # what would be counted by mistake
        assert bench.serving_cpu_s(service.pid) == pytest.approx(cpu(service.pid) + cpu(worker))
    finally:
        assert service.stdin is not None
        service.stdin.close()
        service.wait(timeout=30)


def test_the_bench_pools_latency_rounds_as_one_phase() -> None:
    """A condition's percentiles are over all its rounds' calls (not the mean of the rounds' p99s), errors add up."""
    bench = _bench_module()

    fast = [0.001] * 99
    slow = [0.001] * 90 + [0.050] * 10
    rounds = [
        {"latencies_s": fast, "errors": 0, "error_kinds": {}, "achieved_rps": 100.0},
        {"latencies_s": slow, "errors": 2, "error_kinds": {"recommend HTTP 503": 2}, "achieved_rps": 80.0},
    ]
    one = bench.pooled(rounds)
    assert one["p99_ms"] == pytest.approx(bench.percentiles(fast + slow)["p99_ms"])
    assert one["p99_ms"] == pytest.approx(50.0)  # 10 of 199 calls took 50 ms: the pooled p99 sees them
    assert one["n"] == 199
    assert (one["errors"], one["error_kinds"], one["achieved_rps"]) == (2, {"recommend HTTP 503": 2}, 90.0)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_locust_users_authenticate_with_a_device_token(tmp_path: Path) -> None:
    """Against a service that requires tokens: both users send the bearer token and pass."""
    tokens = tmp_path / "tokens.json"
    added = subprocess.run(
        [str(VENV_BIN / "edgepath"), "tokens", "add", "phone-7", "--file", str(tokens)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    token = added.stdout.strip().splitlines()[-1]
    out = tmp_path / "report"
    with served(tmp_path, env={"EDGEPATH_AUTH_TOKENS_FILE": str(tokens)}) as ports:
        base = [
            sys.executable,
            str(ROOT / "loadtest" / "run.py"),
            "--http",
            f"http://127.0.0.1:{ports['http_port']}",
            "--grpc",
            f"127.0.0.1:{ports['grpc_port']}",
            "--users",
            "2",
            "--duration",
            "6s",
            "--device-decisions-per-s",
            "2",
            "--out",
            str(out),
        ]
        refused = subprocess.run([*base, "--device-id", "phone-7"], capture_output=True, text=True, timeout=200)
        assert refused.returncode == 1, "without the token every call must fail"
        proc = subprocess.run(
            [*base, "--device-id", "phone-7", "--token", token], capture_output=True, text=True, timeout=200
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    final = json.loads((out / "edgepath_final.json").read_text())
    assert final["Aggregated"]["requests"] > 0 and final["Aggregated"]["failures"] == 0
    assert final["REST Recommend"]["requests"] > 0 and final["gRPC Recommend"]["requests"] > 0


def _tls_pki(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 (cryptography), as a deployment's ``<release>-tls`` Secret."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def cert(cn: str, key: Any, issuer: x509.Name, issuer_key: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "EdgePath loadtest CA")])
    ca_cert = cert("EdgePath loadtest CA", ca_key, ca_name, ca_key, ca=True)
    server_cert = cert("127.0.0.1", server_key, ca_name, ca_key, ca=False)
    pem = serialization.Encoding.PEM
    paths = (directory / "ca.crt", directory / "server.crt", directory / "server.key")
    paths[0].write_bytes(ca_cert.public_bytes(pem))
    paths[1].write_bytes(server_cert.public_bytes(pem))
    paths[2].write_bytes(server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    paths[2].chmod(0o600)
    return paths


def docs_locust_command() -> str:
    """The ``locust --config loadtest/locust.conf`` command of the README's "Load-testing a deployment"."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### Load-testing a deployment", 1)[1].split("\n### ", 1)[0]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    command = block[block.index(".venv/bin/locust --config loadtest/locust.conf") :].replace("\\\n", " ")
    return command.strip()


def run_docs_locust(
    tmp_path: Path, run_time_s: int, with_ca: bool
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The README's locust command for ``run_time_s`` against a local service with TLS on both transports (a CA of
    its own, as the chart generates) and JWT authentication, ``EDGEPATH_CA_FILE`` set when ``with_ca``: the locust
    process, and the device ids the service decided for."""
    ca, server_crt, server_key = _tls_pki(tmp_path)
    key = "loadtest-jwt-key-" + "x" * 32
    (tmp_path / "jwt.key").write_text(key + "\n")
    command = docs_locust_command()
    assert "--host" in command and "--grpc-target" in command
    with running_service(auth_jwt_key=key, tls_cert_file=server_crt, tls_key_file=server_key) as svc:
        env = {
            **os.environ,
            "EDGEPATH_HOST": "127.0.0.1",
            "EDGEPATH_HTTP_PORT": str(svc.http_port),
            "EDGEPATH_GRPC_PORT": str(svc.grpc_port),
            "EDGEPATH_JWT_KEY_FILE": str(tmp_path / "jwt.key"),
        }
        env.pop("EDGEPATH_CA_FILE", None)
        if with_ca:
            env["EDGEPATH_CA_FILE"] = str(ca)
        overrides = (
            f" --run-time {run_time_s}s --users 6 --spawn-rate 6 --device-decisions-per-s 4 --situations 300"
            f" --csv {tmp_path}/edgepath --html {tmp_path}/report.html --final-stats-file {tmp_path}/final.json"
        )
        proc = subprocess.run(
            ["bash", "-c", command + overrides], cwd=ROOT, env=env, capture_output=True, text=True, timeout=200
        )
        # which identities the service decided for (the in-process store's records; read after the run)
        devices = {row_decision(row).device_id for row in svc.service.store._decisions.values()}
    return proc, devices


@pytest.mark.slow
@pytest.mark.timeout(240)  # locust starts gevent and loads the paired situations (~20 s) before its 8 s run
def test_docs_production_locust_command_runs_over_tls_with_one_jwt_per_device(tmp_path: Path) -> None:
    """The README's command against a local service with TLS on both transports and JWT authentication:
    no failures, and the service saw each simulated device as its own authenticated identity."""
    proc, devices = run_docs_locust(tmp_path, 8, with_ca=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    final = json.loads((tmp_path / "final.json").read_text())
    assert final["Aggregated"]["failures"] == 0 and final["Aggregated"]["requests"] > 0
    assert final["gRPC Recommend"]["requests"] > 0 and final["REST Recommend"]["requests"] > 0
    assert len(devices) >= 6 and all(d.startswith("loadtest-") for d in devices), devices


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_without_the_ca_both_transports_verify_and_fail_alike(tmp_path: Path) -> None:
    """Without ``EDGEPATH_CA_FILE`` the REST users ran unverified (all green against a certificate nothing
    trusted) while the gRPC users dialled plaintext and failed "Socket closed". Now both verify with the system
    roots, which do not hold the service's CA: every call of both fails on the certificate, and a warning at start
    names --ca-file."""
    proc, devices = run_docs_locust(tmp_path, 4, with_ca=False)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "verifying the service's certificate with the system roots" in proc.stderr and "--ca-file" in proc.stderr
    final = json.loads((tmp_path / "final.json").read_text())
    for name in ("REST Recommend", "gRPC Recommend"):
        assert final[name]["requests"] > 0 and final[name]["failures"] == final[name]["requests"], final
    assert "CERTIFICATE_VERIFY_FAILED" in proc.stderr + proc.stdout, proc.stderr[-3000:]
    assert devices == set(), "no call reached the service past its TLS handshake"


@pytest.mark.timeout(240)  # on a busy host the trainer's refits (SCHED_IDLE) wait: catch-up took 20 s a round
@pytest.mark.parametrize("store", ["memory", "redis"])
def test_training_interference_runs_the_three_phases_and_the_trainer_catches_up(tmp_path: Path, store: str) -> None:
    """``loadtest/training_interference.py``: paused / catch-up / training phases over the real in-process service
    (Redis: a real redis-server and ``edgepath train`` process); the paused phase's outcomes are a backlog the
    trainer works through (published versions: each catch-up phase lasts until a version trained on all of it
    serves, never cut short by the timeout, however busy the host), then it trains on; round 1 starts as the others
    do (the warm-up's outcomes trained on)."""
    if store == "redis" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    report = tmp_path / "interference.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "loadtest" / "training_interference.py"),
            "--rate",
            "300",
            "--duration-s",
            "0.6",
            "--rounds",
            "2",
            "--catch-up-timeout-s",
            "60",
            "--store",
            store,
            "--report",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=220,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["catch_up_timeout_s"] == 60 and data["catch_up_timeouts"] == 0, data["rounds"]
    for phase in ("paused", "catch_up", "training"):
        assert data[phase]["calls"] > 0 and 0 < data[phase]["p50_ms"] <= data[phase]["p99_ms"] <= data[phase]["max_ms"]
        assert len(data[phase]["p99_ms_per_round"]) == 2
        assert data[phase]["serving_cpu_us_per_call"] > 0 and data[phase]["children_cpu_us_per_call"] >= 0
    assert data["training"]["p99_vs_paused"] == pytest.approx(data["training"]["p99_ms"] / data["paused"]["p99_ms"])
    # round 1: 300/s x 0.6 s of outcomes queued while paused, plus less than a batch (50) the warm-up left; it also
    # held what arrived while the first refit started its process (598 at 300/s) before the warm-up waited for the
    # trainer to keep up (later rounds' leftovers depend on how the host starved the refits in the training phase)
    assert data["rounds"][0]["backlog"] <= 300 * 0.6 + 50 + 60, data["rounds"]
    for r in data["rounds"]:
        assert r["backlog"] >= 150  # 300/s x 0.6 s of outcomes queued while paused
        assert r["catch_up_timed_out"] is False and r["catch_up_s"] > 0  # ... all trained on and published
        assert r["versions_in_catch_up"] >= 1  # ... by a version published during the catch-up phase


def test_the_catch_up_phase_ends_when_the_backlog_is_covered_or_at_its_timeout() -> None:
    """``training_interference.CatchUpEnd``: never before ``min_s`` of the schedule (the phase has calls), then as
    soon as the backlog is covered; uncovered, once ``timeout_s`` of its clock (wall time: an overloaded loop's
    schedule lags it) have passed, and flagged as timed out; a bad timeout is refused."""
    from training_interference import CatchUpEnd

    now = [100.0]
    covered = {"now": False}
    end = CatchUpEnd(lambda: covered["now"], timeout_s=5.0, min_s=0.05, clock=lambda: now[0])
    assert [end(t) for t in (0.0, 0.04, 1.0, 4.99)] == [False] * 4
    covered["now"] = True
    assert not end(0.01) and end(0.05) and not end.timed_out
    slow = CatchUpEnd(lambda: False, timeout_s=5.0, clock=lambda: now[0])
    assert not slow(0.0) and not slow(4.99)  # its clock has not moved
    now[0] += 4.99
    assert not slow(1.0)
    now[0] += 0.01
    assert not slow(0.04) and slow(1.0) and slow.timed_out  # 5 s of its clock, however far the schedule got
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="timeout_s"):
            CatchUpEnd(lambda: True, timeout_s=bad)


async def test_the_in_process_catch_up_waits_for_the_version_trained_on_the_backlog_s_last_outcome() -> None:
    """``training_interference.memory_backlog_trained`` over the real service (memory store, online trainer, its
    refits in a thread): 120 outcomes queued while the trainer was stopped are covered only once a published
    version was trained on the 120th, not when the two full batches before it are published (the remainder
    waits for the next outcomes to fill its batch); the outcomes the trainer had buffered before count too."""
    from edgepath import types as ep_types
    from edgepath.main import Service
    from edgepath.settings import Settings
    from edgepath.training.online import OnlineTrainer
    from training_interference import memory_backlog_trained

    service = Service.build(Settings(rate_limit_per_s=1e9, rate_limit_burst=1_000_000_000))
    plane, store = service.plane, service.store
    trainer = OnlineTrainer(store, plane.registry, batch_size=50, catch_up_batches=20)
    principal = ep_types.Principal(device_id="bench-1")
    pool = workload.situations(200)
    sent = iter(range(len(pool)))

    async def outcomes(n: int) -> None:
        for i in (next(sent) for _ in range(n)):
            rec = await plane.recommend(
                principal, ep_types.RecommendRequest.model_validate(workload.recommend_body(pool[i], "bench-1"))
            )
            body = workload.outcome_body(pool[i], "bench-1", rec.model_dump(mode="json"))
            await plane.report_outcome(principal, ep_types.OutcomeReport.model_validate(body))

    await outcomes(20)
    assert not await trainer.step()  # 20 buffered by the trainer (delivered, not acknowledged): below a batch
    await outcomes(100)  # the backlog: those 20 and 100 queued, 120 in all
    covered = memory_backlog_trained(trainer, store)
    v0 = plane.registry.current.version
    assert not covered()
    assert await trainer.step() and trainer.outcomes_used == 100  # two batches published, 20 left behind
    assert plane.registry.current.version == v0 + 2 and not covered()
    await outcomes(30)  # arrivals during catch-up fill the batch holding the backlog's last 20
    assert await trainer.step() and trainer.outcomes_used == 150
    assert covered() and plane.registry.current.version == v0 + 3


def test_the_redis_topology_kills_a_trainer_that_does_not_end_on_sigterm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``RedisTopology.close``: a process that ignores SIGTERM (as ``edgepath train`` waiting on a starved refit
    did, for minutes) is killed after ``stop_timeout_s``, named on stderr, instead of raising ``TimeoutExpired``
    with both processes left running; the one that ends on SIGTERM just ends."""
    from training_interference import RedisTopology

    topology = RedisTopology.__new__(RedisTopology)  # its processes only: no redis-server, no edgepath train
    topology.stop_timeout_s = 0.5
    topology._tmp = str(tmp_path / "topology")
    topology.trainer_log = tmp_path / "trainer.log"
    topology.trainer_log.write_text("the trainer's log\n")
    stubborn = ["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"]
    topology._trainer = subprocess.Popen(stubborn, stdout=subprocess.PIPE)
    assert topology._trainer.stdout is not None and topology._trainer.stdout.readline() == b"ready\n"  # trap set
    topology._redis_proc = subprocess.Popen(["sleep", "120"])
    topology.close()
    assert topology._trainer.returncode == -9 and topology._redis_proc.returncode == -15
    err = capsys.readouterr().err
    assert "edgepath train did not end within 0.5 s of SIGTERM: killed" in err and "the trainer's log" in err


def test_the_redis_catch_up_sees_the_backlog_covered_once_the_publication_script_took_it(tmp_path: Path) -> None:
    """``training_interference.covering_version`` against a real redis-server and the real publication
    (``SnapshotStore.publish``: store the version, ``XACK`` + ``XDEL`` the outcomes, one Lua script): None while an
    outcome up to the backlog's last is in the stream, then the version that took the last one; outcomes added
    later do not hold it back."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    import redis
    from edgepath.engines.primary_path import PrimaryPathBandit
    from edgepath.state.redis import GROUP, RedisStore
    from edgepath.state.redis_backend import RedisBackend
    from edgepath.training.snapshots import SnapshotStore
    from topology import start_redis_server
    from training_interference import OUTCOME_STREAM, VERSION_KEY, covering_version, newest_entry_id

    server, url = start_redis_server(tmp_path)
    try:
        client = redis.Redis.from_url(url)
        client.xgroup_create(OUTCOME_STREAM, GROUP, id="0", mkstream=True)
        assert newest_entry_id(client, OUTCOME_STREAM) is None
        ids = [client.xadd(OUTCOME_STREAM, {"o": b"x"}) for _ in range(5)]
        last = newest_entry_id(client, OUTCOME_STREAM)
        assert last == ids[-1]
        later = client.xadd(OUTCOME_STREAM, {"o": b"y"})  # arrived during catch-up: not part of the backlog

        async def publish(version: int, entry_ids: list[Any]) -> None:  # stream ids, as redis-py returns them
            backend = RedisBackend(RedisStore(url))
            try:
                snapshots = SnapshotStore(backend.snapshots, b"k" * 32)
                await snapshots.publish(PrimaryPathBandit(), version, [i.decode() for i in entry_ids])
            finally:
                await backend.close()

        assert covering_version(client, OUTCOME_STREAM, VERSION_KEY, last) is None
        asyncio.run(publish(3, ids[:3]))
        assert covering_version(client, OUTCOME_STREAM, VERSION_KEY, last) is None  # two still to train on
        asyncio.run(publish(5, ids[3:]))
        assert covering_version(client, OUTCOME_STREAM, VERSION_KEY, last) == 5
        assert client.xrange(OUTCOME_STREAM) == [(later, {b"o": b"y"})]
        client.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize("batch_path", ["models", "grpc"])
def test_batch_interference_measures_unary_calls_alone_and_beside_batches(batch_path: str, tmp_path: Path) -> None:
    """``loadtest/batch_interference.py``: both phases over the real in-process service on its event loop, the
    batch calls (validation + plane, or the gRPC servicer on wire bytes) all answered at their rate; figures
    printed, none asserted."""
    report = tmp_path / "batch-interference.json"
    args = ("--rate", "100", "--batch-rate", "5", "--batch-size", "16", "--duration-s", "0.6", "--rounds", "2")
    proc = _run_script("batch_interference.py", tmp_path, *args, "--batch-path", batch_path, "--report", str(report))
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(report.read_text())
    for phase in ("alone", "beside_batches"):
        assert data[phase]["calls"] == 2 * 60  # 100/s x 0.6 s, two rounds: every call answered
        assert 0 < data[phase]["p50_ms"] <= data[phase]["p99_ms"] <= data[phase]["max_ms"]
    assert data["beside_batches"]["p99_vs_alone"] == pytest.approx(
        data["beside_batches"]["p99_ms"] / data["alone"]["p99_ms"]
    )
    assert data["batches"]["calls"] == 2 * 3  # 5/s x 0.6 s, two rounds: every batch answered
    assert data["batches"]["decisions_per_s"] == pytest.approx(6 * 16 / 1.2) and 0 < data["batches"]["call_p50_ms"]
    assert data["batches"]["path"] == batch_path
    assert data["event_loop"] == "uvloop"  # the service's loop, as edgepath serve runs it


@pytest.mark.parametrize(("store", "batch_replica"), [("memory", "same"), ("redis", "separate")])
def test_batch_interference_over_grpc_counts_every_call_against_a_real_server(
    store: str, batch_replica: str, tmp_path: Path
) -> None:
    """``loadtest/batch_interference.py --over grpc``: ``edgepath serve`` on loopback, unary calls from the script and
    batch calls from its second process (``separate``: to a second replica on a redis-server the script starts);
    every call started is answered or counted as an error, the unary calls' server on a core of its own when the
    host has more than one. Figures printed, none asserted."""
    if store == "redis" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    report = tmp_path / "batch-interference-grpc.json"
    args = ("--rate", "100", "--batch-rate", "5", "--batch-size", "16", "--duration-s", "0.6", "--rounds", "2")
    where = ("--store", store, "--batch-replica", batch_replica)
    proc = _run_script("batch_interference.py", tmp_path, *args, "--over", "grpc", *where, "--report", str(report))
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(report.read_text())
    over = data["over"]
    assert ("second edgepath serve" in over["batch_replica"]) == (batch_replica == "separate")
    assert ("redis" in over["server"]) == (store == "redis")
    assert not _left_running(str(tmp_path))  # its redis-server (working directory in its temporary one) is gone
    unary_errors, batch_errors = sum(over["unary_errors"].values()), sum(over["batch_errors"].values())
    assert data["alone"]["calls"] + data["beside_batches"]["calls"] + unary_errors == 2 * 2 * 60
    assert data["batches"]["calls"] + batch_errors == 2 * 3 and data["batches"]["path"] == "grpc"
    if len(os.sched_getaffinity(0)) > 1:
        assert over["server_cores"] and not set(over["server_cores"]) & set(over["generator_cores"])


@pytest.mark.parametrize(("store", "floor"), [("memory://", ("--floor",)), ("redis", ())])
def test_cpu_per_call_prints_the_echo_and_the_service_per_round(
    store: str, floor: tuple[str, ...], tmp_path: Path
) -> None:
    """``loadtest/cpu_per_call.py``: one round against the echo and the service (``redis``: a throw-away
    redis-server it starts and stops itself), with ``--floor`` the service with its plane canned as well; every row
    is a positive rate and CPU time, never a speed target, and the server's CPU split by thread group, whose event
    loop (the main thread) has CPU time of its own and whose groups add up to the process's total (within the
    kernel's per-thread rounding: each thread's time is kept in clock ticks, 10 ms, against a half-second round)."""
    if store == "redis" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    one_round = ("--store", store, "--rounds", "1", "--duration-s", "0.5", "--history-variants", "2", *floor)
    proc = _run_script("cpu_per_call.py", tmp_path, *one_round)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith(("echo", "service", "floor"))]
    assert [r[0] for r in rows] == ["echo", "service", *(["floor"] if floor else [])], proc.stdout
    assert all(len(r) == 7 for r in rows), rows
    assert all(float(x) > 0 for r in rows for x in r[1:5]), rows
    for r in rows:
        server_us, by_thread = float(r[2]), [float(x) for x in r[4:]]
        assert all(us >= 0 for us in by_thread) and 0.75 * server_us <= sum(by_thread) <= 1.25 * server_us, r
    assert not _left_running(str(tmp_path))  # its redis-server (working directory in its temporary one) is gone


@pytest.mark.parametrize(("store", "mix"), [("memory://", ()), ("redis", ("--with-outcomes",))])
def test_cpu_ab_measures_two_checkouts_at_once(store: str, mix: tuple[str, ...], tmp_path: Path) -> None:
    """``loadtest/cpu_ab.py`` with this checkout as its own base: one round of both servers driven at once, a
    positive rate and CPU time for each and their ratio (a figure, never a target), nothing left running; on Redis
    with each decision's outcome (the realistic mix)."""
    if store == "redis" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    one_round = ("--store", store, "--rounds", "1", "--duration-s", "0.5", "--history-variants", "2", *mix)
    proc = _run_script("cpu_ab.py", tmp_path, "--base-src", str(ROOT / "service" / "src"), *one_round)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("a call = Recommend + its ReportOutcome" in proc.stdout) == bool(mix), proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] == ["1"]]
    assert len(rows) == 1 and len(rows[0]) == 6, proc.stdout
    assert all(float(x) > 0 for x in rows[0][1:]), rows
    assert "median this/base CPU per call" in proc.stdout
    assert not _left_running(str(tmp_path))


def test_the_canned_plane_decides_once_per_device_and_repeats_that_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    """``loadtest/canned_plane.py`` (``cpu_per_call.py --floor``): a device's first Recommend is decided by the plane
    and logged, its later ones get that reply back without a new decision; another device gets a decision of its
    own. The class's method is restored after the test (monkeypatch)."""
    import canned_plane
    from edgepath.main import Service
    from edgepath.plane import DecisionPlane
    from edgepath.settings import Settings
    from edgepath.types import Principal, RecommendRequest

    monkeypatch.setattr(DecisionPlane, "recommend", DecisionPlane.recommend)
    canned_plane.can_the_plane()
    plane = Service.build(Settings()).plane
    situations = workload.situations(3)

    async def decide(device: str, k: int) -> Any:
        request = RecommendRequest.model_validate(workload.recommend_body(situations[k], device, 20, k))
        return await plane.recommend(Principal(device_id=device), request)

    async def scenario() -> list[Any]:
        return [await decide("dev-a", 0), await decide("dev-a", 1), await decide("dev-b", 2), await decide("dev-a", 2)]

    a0, a1, b0, a2 = asyncio.run(scenario())
    assert a1 is a0 and a2 is a0 and b0 is not a0 and b0.decision_id != a0.decision_id
    logged = [asyncio.run(plane.store.get_decision(r.decision_id)) for r in (a0, b0)]
    assert [d.device_id for d in logged] == ["dev-a", "dev-b"]


def test_cpu_ab_refuses_a_base_without_the_package(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtest" / "cpu_ab.py"), "--base-src", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "no edgepath package there" in proc.stderr


def _run_script(name: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``loadtest/<name> *args``, with ``TMPDIR`` in this test's own directory: the script's temporary directory, and
    the working directory of what it starts, are then this test's alone (another test, or another checkout's suite
    on the same machine, may run the same script at the same time)."""
    return subprocess.run(
        [sys.executable, str(ROOT / "loadtest" / name), *args],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )


def _left_running(directory_prefix: str) -> list[str]:
    """Processes whose working directory lies in a directory named ``directory_prefix…`` (deleted or not)."""
    found = []
    for proc_dir in Path("/proc").iterdir():
        try:
            if proc_dir.name.isdigit() and directory_prefix in os.readlink(proc_dir / "cwd"):
                found.append(proc_dir.name)
        except OSError:
            continue
    return found


def test_breakdown_times_every_stage_and_every_engine_inside_a_batch(tmp_path: Path) -> None:
    """loadtest/breakdown.py, the stage table of the README: a row per stage for both transports, and within a
    RecommendBatch's plane decide one row per engine adapter, their CPU time inside it (never more than it)."""
    report = tmp_path / "breakdown.json"
    model = str(ROOT / "models" / "primary-path-v2")
    done = _run_script("breakdown.py", tmp_path, "--n", "20", "--model", model, "--batch", "3", "--report", str(report))
    assert done.returncode == 0, done.stderr[-2000:]
    r = json.loads(report.read_text())
    assert "engine scheduler" in done.stdout and "(within the plane's decide)" in done.stdout
    batch = {row["stage"].strip(): row["median_us_per_decision"] for row in r["recommend_batch"]}
    engines = {stage: us for stage, us in batch.items() if stage.endswith("(within the plane's decide)")}
    assert {s.split()[1] for s in engines} == {"scheduler", "congestion", "server_selection", "steering"}
    assert engines["engine scheduler (within the plane's decide)"] > 0
    assert sum(engines.values()) <= batch["plane batch decide (incl. bandit)"]


#: The loadtest commands a user runs as they are (``loadtest/soak --help``: README "Reliability"), each with a
#: ``#!/usr/bin/env python3`` line and the executable bit.
LOADTEST_COMMANDS = sorted(p.name for p in (ROOT / "loadtest").iterdir() if p.is_file() and os.access(p, os.X_OK))


def test_every_loadtest_command_is_executable_and_has_a_python_shebang() -> None:
    """A script a README command runs directly must be executable; a Python file with a ``#!`` line is one
    (``canned_plane.py`` is the exception: ``cpu_per_call.py`` runs it with its own interpreter, never directly)."""
    scripts = {
        p.name
        for p in (ROOT / "loadtest").iterdir()
        if p.is_file() and p.read_bytes().startswith(b"#!") and p.name != "canned_plane.py"
    }
    assert scripts <= set(LOADTEST_COMMANDS), f"not executable: {sorted(scripts - set(LOADTEST_COMMANDS))}"
    assert {"bench", "soak", "cpu_per_call.py", "breakdown.py"} <= set(LOADTEST_COMMANDS)


@pytest.mark.parametrize("command", LOADTEST_COMMANDS)
def test_each_loadtest_command_runs_in_the_project_venv_from_the_system_python(command: str) -> None:
    """``loadtest/<command> --help`` from a shell whose ``python3`` is the system's (no EdgePath, no numpy in it):
    each command re-executes itself in the project's ``.venv`` before its first import of a dependency, so its
    usage prints instead of a ``ModuleNotFoundError`` (a newcomer's ``loadtest/soak --help`` failed so)."""
    system_python = Path("/usr/bin/python3")
    if not system_python.exists():
        pytest.skip("no /usr/bin/python3 to stand for a shell's python3 outside the venv")
    done = subprocess.run(
        [str(ROOT / "loadtest" / command), "--help"],
        env={"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LC_ALL": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
