"""Monitoring metrics of a running service (issue 22, item 2): per-transport request count, status and
latency; the domain metrics an operator watches; and ``metrics_port`` moving ``/metrics`` off the API port."""

from __future__ import annotations

import ast
from pathlib import Path

import edgepath
import grpc
import httpx
from edgepath.state.base import ClaimResult
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from prometheus_client.parser import text_string_to_metric_families
from service_harness import running_service

CONTEXT = {
    "device_id": "dev-metrics",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "sinr_db": 8.0, "cqi": 9},
    ],
}


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in scraped.items() if n == name and set(labels.items()) <= ls)


def test_metrics_on_their_own_port_with_request_and_domain_metrics() -> None:
    with running_service(metrics_port=0) as svc:
        metrics_port = svc.service.metrics_port
        assert metrics_port and metrics_port not in (svc.http_port, svc.grpc_port)
        with httpx.Client(base_url=svc.http_url, timeout=10) as http:
            rec = http.post("/v1/recommendations", json=CONTEXT)
            assert rec.status_code == 200
            outcome = {"device_id": "dev-metrics", "decision_id": rec.json()["decision_id"], "throughput_bps": 4e7}
            assert http.post("/v1/outcomes", json=outcome).json()["accepted"]
            assert http.post("/v1/outcomes", json={**outcome, "decision_id": "0" * 32}).status_code == 404
            assert http.get("/metrics").status_code == 404  # not on the API port any more
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
            request = pb.RecommendRequest(
                device_id="dev-grpc", interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)]
            )
            pb_grpc.PathServiceStub(channel).Recommend(request, timeout=5)
        scrape = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
    assert scrape.status_code == 200
    got = samples(scrape.text)
    # per transport: count by status, latency
    rest = {"handler": "/v1/outcomes", "method": "POST"}
    assert value(got, "edgepath_http_requests_total", status="200", **rest) == 1
    assert value(got, "edgepath_http_requests_total", status="404", **rest) == 1
    assert value(got, "edgepath_http_request_duration_seconds_count", handler="/v1/recommendations") == 1
    assert value(got, "grpc_server_handled_total", grpc_method="Recommend", grpc_code="OK") == 1
    assert value(got, "grpc_server_handling_seconds_count", grpc_method="Recommend") == 1
    # domain: decisions, propensity, exploration, reward and utility of joined outcomes, delay, model age
    assert value(got, "edgepath_decisions_total") == 2
    assert value(got, "edgepath_decision_propensity_count") == 2
    assert 0 < value(got, "edgepath_decision_propensity_sum") <= 2
    families = {f.name for f in text_string_to_metric_families(scrape.text)}
    assert "edgepath_decisions_explored" in families  # exploration share = its rate / decisions' rate
    # the in-process store's trainer holds no lock and sees no outcome stream: no trainer gauge, not a lock held at 0
    # (a replica with the trainer role on Redis exports them: tests/service/state/test_trainer_metrics.py)
    assert not [f for f in families if f.startswith("edgepath_trainer_")], families
    assert value(got, "edgepath_outcome_reward_count") == 1
    assert value(got, "edgepath_outcome_reward_sum") == 1  # 40 Mbit/s ≥ the 25 Mbit/s reward threshold
    assert 0 < value(got, "edgepath_outcome_utility_sum") < 1
    assert value(got, "edgepath_outcome_delay_seconds_count") == 1
    assert value(got, "edgepath_model_published_timestamp_seconds") > 1.7e9


def test_every_grpc_service_is_observed_without_an_interceptor() -> None:
    """The call observer wraps each method where the server registers it (no grpc.aio interceptor, issue 16): the
    health and reflection services are counted and echo the request id, as ``PathService`` is, and a malformed
    ``Recommend`` is still INVALID_ARGUMENT, counted under its code."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with running_service(metrics_port=0) as svc:
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
            answer, call = health_pb2_grpc.HealthStub(channel).Check.with_call(
                health_pb2.HealthCheckRequest(service=""), timeout=5, metadata=(("x-request-id", "health-1"),)
            )
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
            assert ("x-request-id", "health-1") in tuple(call.trailing_metadata())
            # the whole stream read, so the call has ended (OK) before the channel closes: a stream left open is
            # cancelled by the closing channel, and the server would count it as that
            (listed,) = list(
                reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                    iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
                )
            )
            assert "edgepath.v1.PathService" in {s.name for s in listed.list_services_response.service}
            malformed = channel.unary_unary("/edgepath.v1.PathService/Recommend")
            try:
                malformed(b"\xff\xff\xff", timeout=5)
                raise AssertionError("malformed bytes were answered")
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert dict(err.trailing_metadata())["x-request-id"]  # one generated for the call
        scrape = httpx.get(f"http://127.0.0.1:{svc.service.metrics_port}/metrics", timeout=5)
    got = samples(scrape.text)
    assert value(got, "grpc_server_handled_total", grpc_service="grpc.health.v1.Health", grpc_method="Check") == 1
    reflection = {"grpc_service": "grpc.reflection.v1alpha.ServerReflection", "grpc_method": "ServerReflectionInfo"}
    assert value(got, "grpc_server_handled_total", grpc_code="OK", **reflection) == 1
    assert value(got, "grpc_server_handled_total", grpc_method="Recommend", grpc_code="INVALID_ARGUMENT") == 1


#: Counter attribute of ``Metrics`` → (exported series, label) of the counters counted by a fixed set of label values.
FIXED_LABEL_COUNTERS = {
    "outcomes": ("edgepath_outcomes_total", "result"),
    "outcomes_dropped": ("edgepath_outcomes_dropped_total", "reason"),
    "snapshots_rejected": ("edgepath_snapshots_rejected_total", "reason"),
    "decision_log_dropped": ("edgepath_decision_log_dropped_total", "reason"),
    "shed": ("edgepath_shed_total", "transport"),
    "cc_measurements_ignored": ("edgepath_cc_measurements_ignored_total", "reason"),
}
#: Helpers that pass their first argument on as a label value: (module, callable) → counter attribute.
LABEL_PASSING = {
    ("state/redis.py", "_drop"): "outcomes_dropped",
    ("state/redis.py", "_drop_log_entry"): "decision_log_dropped",
    ("training/snapshots.py", "_reject"): "snapshots_rejected",
    ("training/snapshots.py", "SnapshotRejectedError"): "snapshots_rejected",
}


def counted_label_values() -> dict[str, set[str]]:
    """The label values the service's code counts under, per counter of :data:`FIXED_LABEL_COUNTERS`: literal
    ``metrics.<counter>.labels("…")`` arguments anywhere in the package, literal first arguments of the helpers of
    :data:`LABEL_PASSING`, and (``edgepath_outcomes_total``, counted as ``result.value``) the ``ClaimResult``s."""
    package = Path(edgepath.__file__).parent
    found: dict[str, set[str]] = {attr: set() for attr in FIXED_LABEL_COUNTERS}
    found["outcomes"] |= {result.value for result in ClaimResult}
    for path in package.rglob("*.py"):
        module = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            func, label = node.func, node.args[0].value
            if not isinstance(label, str):
                continue
            if isinstance(func, ast.Attribute) and func.attr == "labels" and isinstance(func.value, ast.Attribute):
                if func.value.attr in FIXED_LABEL_COUNTERS:
                    found[func.value.attr].add(label)
                continue
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if (module, name) in LABEL_PASSING:
                found[LABEL_PASSING[(module, name)]].add(label)
    return found


def test_a_fresh_service_exports_every_counted_label_value_at_zero() -> None:
    """Alerts and panels take ``increase()``/``rate()`` of these counters (EdgePathSnapshotsRejected,
    EdgePathOutcomesDropped, EdgePathModelStale, EdgePathOutcomesQuarantined): a series the service created only
    when it first counted appeared at 1, and ``increase()`` over a window starting at its birth saw nothing, so one
    refused snapshot per pod and reason never fired. Every label value the code counts under is exported at 0
    before anything happened (the trainer's own: tests/service/state/test_trainer_metrics.py)."""
    counted = counted_label_values()
    assert {"undecodable", "outbox_full"} <= counted["outcomes_dropped"], "the source scan found the drop reasons"
    assert {"bad_signature", "unsigned"} <= counted["snapshots_rejected"], "the source scan found the refusals"
    assert {"new", "quarantined", "implausible"} <= counted["outcomes"]
    assert {"unknown_algorithm", "not_offered"} <= counted["cc_measurements_ignored"]
    with running_service() as svc:
        scrape = httpx.get(f"{svc.http_url}/metrics", timeout=5)
    assert scrape.status_code == 200
    got = samples(scrape.text)
    missing = [
        f"{series}{{{label}={value!r}}}"
        for attr, (series, label) in FIXED_LABEL_COUNTERS.items()
        for value in sorted(counted[attr])
        if got.get((series, frozenset({(label, value)}))) != 0
    ]
    assert not missing, f"not exported at 0 by a fresh service: {missing}"
