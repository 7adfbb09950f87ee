"""The Helm chart: lint, render, offline schema validation, and checks of the rendered objects.

Rendered objects are compared with the code they deploy: ports and setting names
with :class:`edgepath.settings.Settings`, probe paths with the FastAPI routes, the
gRPC probe's service name with the gRPC server's, and probes are exercised against
a real service on loopback.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import httpx
import kubernetes_validate
import pytest
import yaml
from deploy_helpers import (
    CHART,
    DEFAULTS_ARGS,
    KUBE_VERSION,
    ROOT,
    VALUE_SETS,
    VENV_BIN,
    RenderError,
    by_kind,
    one,
    pod_specs,
    served,
    values_args,
)
from edgepath.engines.primary_path import POLICIES
from edgepath.grpc.server import SERVICE_NAME
from edgepath.settings import Settings, env_names
from grpc_health.v1 import health_pb2, health_pb2_grpc

# Building helm on first use takes minutes: allow it within the first test's timeout.
pytestmark = pytest.mark.timeout(1800)

#: Kinds from CRDs (no schema in kubernetes-validate): checked structurally below instead.
CRD_KINDS = {"ServiceMonitor", "GRPCRoute", "PrometheusRule", "BackendTLSPolicy"}
#: A device JWT key the service accepts (32 bytes or more, RFC 7518 §3.2).
JWT_KEY = "j" * 32


def _settings_env_names() -> set[str]:
    # top-level fields, per-engine groups (EDGEPATH_BANDIT__*) and the flat names of earlier releases
    return env_names()


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_helm_lint_strict(helm_bin: str, value_set: str) -> None:
    proc = subprocess.run(
        [helm_bin, "lint", "--strict", str(CHART), *values_args(value_set)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_rendered_manifests_validate_against_kubernetes_schemas(render: Any, value_set: str) -> None:
    objects = render(value_set)
    assert {"Deployment", "Service", "ConfigMap"} <= {o["kind"] for o in objects}
    for obj in objects:
        if obj["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} ({value_set}): {exc.message} at {list(exc.path)}")


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a LabelSelector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist) selects ``labels``."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def service_monitor_endpoints(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Port name → endpoint of the release's ServiceMonitor."""
    return {e["port"]: e for e in one(objects, "ServiceMonitor")["spec"]["endpoints"]}


def test_service_monitor_scrapes_the_metrics_endpoint(render: Any) -> None:
    objects = render("monitoring-networkpolicy-values.yaml")
    sm = one(objects, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    endpoint = service_monitor_endpoints(objects)["metrics"]
    # metrics on their own plain-HTTP port by default (settings.metricsPort; issue 22)
    assert endpoint["path"] == "/metrics" and endpoint["scheme"] == "http"
    svc = one(objects, "Service", "ep-edgepath")
    assert selects(sm["spec"]["selector"], svc["metadata"]["labels"])
    assert not selects(sm["spec"]["selector"], one(objects, "Service", "-redis")["metadata"]["labels"])
    assert not by_kind(render("defaults"), "ServiceMonitor"), "ServiceMonitor must be optional (off by default)"


def test_the_trainers_metrics_are_scraped_under_the_deciders_job_and_open_to_the_scrapers(render: Any) -> None:
    """``edgepath train`` counts what only it sees (``edgepath_outcomes_dropped_total{reason="undecodable"}``, the
    snapshots it refuses) but nothing scraped it: no port, and a ServiceMonitor selecting the deciders only. Its
    ``metrics`` port (trainer.metricsPort, EDGEPATH_METRICS_PORT of its container) is behind a headless Service the
    ServiceMonitor selects, relabelled to the deciders' job, which the alerts select; its NetworkPolicy admits the
    metrics scrapers to that port only, and nobody when none is named (as the deciders' metrics port)."""
    objects = render("monitoring-networkpolicy-values.yaml")
    pod = one(objects, "Deployment", "-trainer")["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 9090}
    served = [e["value"] for e in c["env"] if e["name"] == "EDGEPATH_METRICS_PORT"]
    assert served and served[-1] == "9090", "the last entry wins over the shared ConfigMap's (env over envFrom)"
    svc = one(objects, "Service", "-trainer")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["targetPort"] == "metrics"
    sm = one(objects, "ServiceMonitor")
    assert selects(sm["spec"]["selector"], svc["metadata"]["labels"])
    endpoints = service_monitor_endpoints(objects)
    endpoint = endpoints[svc_port["name"]]
    assert endpoint["path"] == "/metrics" and endpoint["scheme"] == "http"
    # each Service is scraped by one endpoint only
    deciders = one(objects, "Service", "ep-edgepath")
    assert {p["name"] for p in deciders["spec"]["ports"]} & set(endpoints) == {"metrics"}
    assert {p["name"] for p in svc["spec"]["ports"]} & set(endpoints) == {svc_port["name"]}
    # the job: the deciders' is their Service's name (Prometheus Operator's default); the alerts select it
    (relabel,) = endpoint["relabelings"]
    assert relabel["targetLabel"] == "job" and relabel.get("action", "replace") == "replace"
    assert "sourceLabels" not in relabel and relabel["replacement"] == deciders["metadata"]["name"]
    rules = one(objects, "PrometheusRule")["spec"]["groups"]
    assert {j for g in rules for r in g["rules"] for j in re.findall(r'job="([^"]+)"', r["expr"])} == {
        relabel["replacement"]
    }
    # NetworkPolicy: the scrapers reach the trainer's metrics port, nothing else reaches the trainer
    policies = [
        np for np in by_kind(objects, "NetworkPolicy") if selects(np["spec"]["podSelector"], pod["metadata"]["labels"])
    ]
    assert [np["metadata"]["name"] for np in policies] == ["ep-edgepath-trainer"]
    (rule,) = policies[0]["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert policies[0]["spec"]["policyTypes"] == ["Ingress"]
    (closed,) = [
        np for np in by_kind(render("defaults"), "NetworkPolicy") if np["metadata"]["name"].endswith("-trainer")
    ]
    assert closed["spec"]["ingress"] == [], "no scrapers named: the trainer's metrics port is closed, as the deciders'"
    # no trainer: nothing of it, and the ServiceMonitor selects the deciders as before
    without = render("monitoring-networkpolicy-values.yaml", "--set", "trainer.enabled=false")
    assert not [o for o in without if o["metadata"]["name"].endswith("-trainer")]
    assert set(service_monitor_endpoints(without)) == {"metrics"}


def _decider_ports(objects: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, str]]:
    """(the deciders' container ports by name, the settings ConfigMap's data) of a render."""
    (container,) = one(objects, "Deployment", "ep-edgepath")["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for p in container["ports"]}, one(objects, "ConfigMap", "-settings")["data"]


def test_default_ports_match_the_service_settings(render: Any) -> None:
    objects = render("defaults")
    ports, config = _decider_ports(objects)
    assert ports == {
        "grpc": Settings.model_fields["grpc_port"].default,
        "http": Settings.model_fields["http_port"].default,
        "metrics": int(config["EDGEPATH_METRICS_PORT"]),
    }
    assert int(config["EDGEPATH_GRPC_PORT"]) == ports["grpc"] and int(config["EDGEPATH_HTTP_PORT"]) == ports["http"]
    svc = one(objects, "Service", "ep-edgepath")
    targets = {p["name"]: p["targetPort"] for p in svc["spec"]["ports"]}
    assert targets == {"grpc": "grpc", "http": "http", "metrics": "metrics"}
    # long-lived device channels re-balance: max_connection_age reaches the server (issue 22)
    assert float(config["EDGEPATH_GRPC_MAX_CONNECTION_AGE_S"]) > 0
    assert float(config["EDGEPATH_GRPC_MAX_CONNECTION_AGE_GRACE_S"]) >= 0


def test_the_chart_deploys_the_service_default_learner(render: Any) -> None:
    """The chart's policy is the service's default primary-path learner (it once kept wave 1's cold
    ``active_explorer`` after the default moved on); a values file may still select any policy."""
    config = one(render("defaults"), "ConfigMap", "-settings")["data"]
    assert config["EDGEPATH_POLICY"] == Settings().bandit.policy


def test_the_chart_admits_a_full_rest_batch_of_agent_contexts(render: Any) -> None:
    """The chart's message bound lets a gateway send RecommendBatch's largest batch over REST: MAX_BATCH contexts
    with the fields an agent reports (WiFi and LTE, every radio reading; one real vendored situation's shape)."""
    from edgepath.types import MAX_BATCH, RecommendBatchRequest

    item = {
        "device_id": "cpe-client-0000",
        "interfaces": [
            {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -59.0, "link_speed_mbps": 144.0,
             "frequency_mhz": 2462.0, "wifi_rssi_spread_db": 0.0, "max_link_speed_mbps": 300.0},
            {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -115.0, "rsrq_db": -9.0, "sinr_db": 12.0,
             "cell_rssi_dbm": -65.0, "rsrp_spread_db": 0.5916079783099616, "frequency_mhz": 2017.5,
             "channel_bandwidth_mhz": 15.0},
        ],
    }  # fmt: skip
    body = json.dumps({"requests": [item] * MAX_BATCH}).encode()
    assert len(RecommendBatchRequest.model_validate_json(body).requests) == MAX_BATCH  # a valid batch
    config = one(render("defaults"), "ConfigMap", "-settings")["data"]
    assert len(body) <= int(config["EDGEPATH_MAX_MESSAGE_BYTES"])


def test_custom_ports_reach_container_config_and_probes(render: Any) -> None:
    ports, config = _decider_ports(render("external-redis-values.yaml"))
    ports.pop("metrics", None)
    assert ports == {"grpc": int(config["EDGEPATH_GRPC_PORT"]), "http": int(config["EDGEPATH_HTTP_PORT"])}
    assert ports == {"grpc": 50052, "http": 8443}


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_edgepath_variable_is_a_real_setting(render: Any, value_set: str) -> None:
    """A misspelt EDGEPATH_* variable would be silently ignored by pydantic-settings: catch it here."""
    known = _settings_env_names()
    objects = render(value_set)
    names = set(one(objects, "ConfigMap", "-settings")["data"])
    for _, spec in pod_specs(objects):
        for c in spec["containers"]:
            names |= {e["name"] for e in c.get("env", []) if e["name"].startswith("EDGEPATH_")}
    unknown = sorted(n for n in names if n not in known)
    assert not unknown, f"not settings of edgepath.settings.Settings: {unknown}"


def test_every_edgepath_variable_the_image_reads_is_known_to_serve() -> None:
    """``edgepath serve`` warns about an ``EDGEPATH_*`` variable that names no setting (a typo in extraSettings):
    the variables the image itself reads outside the settings (its health check's) must not be warned about in
    every container that sets them."""
    import re

    from edgepath.settings import OTHER_ENV_NAMES

    text = (ROOT / "docker" / "healthcheck.py").read_text() + (ROOT / "Dockerfile").read_text()
    names = set(re.findall(r"EDGEPATH_[A-Z0-9_]*[A-Z0-9]", text))
    unknown = sorted(n for n in names if n not in _settings_env_names() and n not in OTHER_ENV_NAMES)
    assert not unknown, f"serve would warn about: {unknown}"


def _probes(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    deploy = one(objects, "Deployment", "ep-edgepath")
    c = deploy["spec"]["template"]["spec"]["containers"][0]  # the service container (sidecars follow)
    return {k: c[k] for k in ("startupProbe", "livenessProbe", "readinessProbe")}


def _rest_paths() -> set[str]:
    from edgepath.main import Service
    from edgepath.rest.app import create_app

    app = create_app(Service.build(Settings()).plane)
    return {getattr(r, "path", "") for r in app.routes}


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_probes_target_real_endpoints(render: Any, value_set: str) -> None:
    probes = _probes(render(value_set))
    paths = _rest_paths()
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert probes["startupProbe"]["httpGet"]["path"] == "/healthz"
    for probe in probes.values():
        if "httpGet" in probe:
            assert probe["httpGet"]["path"] in paths
            assert probe["httpGet"]["port"] == "http"
    live = probes["livenessProbe"]
    # Liveness asks about the process (health service ""), which stays SERVING while Redis is down; readiness is
    # /readyz, like the gRPC health of edgepath.v1.PathService (NOT_SERVING then): an outage restarts nothing.
    if "grpc" in live:
        assert live["grpc"]["service"] == ""
    else:  # TLS: the image's health check asks the same health service over TLS (or /healthz with mTLS)
        cmd = live["exec"]["command"]
        assert cmd[:2] == ["/opt/edgepath/venv/bin/python", "/opt/edgepath/healthcheck.py"]
        assert _mode(cmd) in ("grpc", "http")
        if _mode(cmd) == "grpc":
            assert "--service=" in cmd, "the overall health service, not edgepath.v1.PathService"
    assert SERVICE_NAME not in json.dumps(live)


def test_probes_answer_on_a_real_service(render: Any, tmp_path: Path) -> None:
    """The rendered probes, pointed at a real ``edgepath serve`` on loopback, succeed."""
    probes = _probes(render("single-replica-dev-values.yaml"))
    assert {"httpGet", "grpc"} <= {kind for probe in probes.values() for kind in probe}
    with served(tmp_path) as ports:
        for probe in probes.values():
            if "httpGet" in probe:
                r = httpx.get(f"http://127.0.0.1:{ports['http_port']}{probe['httpGet']['path']}", timeout=5)
                assert r.status_code == 200, (probe, r.text)
            if "grpc" in probe:
                with grpc.insecure_channel(f"127.0.0.1:{ports['grpc_port']}") as channel:
                    reply = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service=probe["grpc"]["service"]), timeout=5
                    )
                assert reply.status == health_pb2.HealthCheckResponse.SERVING


_SECRET_NAME = re.compile(r"KEY|TOKEN|PASSWORD|SECRET|STORE_URL", re.IGNORECASE)


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_no_secret_in_a_configmap(render: Any, value_set: str) -> None:
    objects = render(value_set)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    if value_set != "defaults":
        values.update(yaml.safe_load((CHART / "ci" / value_set).read_text()))
    secret_values = [v for k, v in values.get("secrets", {}).items() if k in ("hmacKey", "jwtKey") and v]
    secret_values += [p for p in [values.get("redis", {}).get("auth", {}).get("password")] if p]
    for cm in by_kind(objects, "ConfigMap"):
        for key, value in cm["data"].items():
            if key.endswith("_FILE"):  # a path to a file mounted from a Secret, not the secret itself
                assert value.startswith("/etc/edgepath/"), (key, value)
                continue
            assert not _SECRET_NAME.search(key), f"{key} looks secret but is in ConfigMap {cm['metadata']['name']}"
            for secret in secret_values:
                assert secret not in value
    for secret in by_kind(objects, "Secret"):
        assert "stringData" not in secret


def test_secret_holds_generated_keys_and_the_store_url(render: Any) -> None:
    secret = one(render("defaults"), "Secret", "-secrets")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert len(data["hmac-key"]) >= 32 and len(data["jwt-key"]) >= 32
    assert re.fullmatch(r"[A-Za-z0-9]{32}", data["redis-password"]), "generated Redis password must be URL-safe"
    assert "store-url" not in data, "with the chart's Redis the pods compose the URL from the password"
    deploy = one(render("defaults"), "Deployment", "ep-edgepath")
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in c["env"] if "valueFrom" in e}
    assert refs["EDGEPATH_HMAC_KEY"] == "hmac-key" and refs["REDIS_PASSWORD"] == "redis-password"
    names = [e["name"] for e in c["env"]]
    store = next(e for e in c["env"] if e["name"] == "EDGEPATH_STORE_URL")
    assert store["value"] == "redis://:$(REDIS_PASSWORD)@ep-edgepath-redis:6379/0"
    assert names.index("REDIS_PASSWORD") < names.index("EDGEPATH_STORE_URL"), "kubelet expands only earlier vars"


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_security_context_is_hardened(render: Any, value_set: str) -> None:
    for name, spec in pod_specs(render(value_set)):
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0, name
        assert psc["seccompProfile"]["type"] == "RuntimeDefault", name
        assert spec.get("automountServiceAccountToken") is False, name
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"], name
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{name}: writable /tmp emptyDir missing"
            volumes = {v["name"]: v for v in spec["volumes"]}
            assert "emptyDir" in volumes[mounts["/tmp"]]


def test_redis_statefulset_switches_off_for_an_existing_redis(render: Any) -> None:
    default = render("defaults")
    assert one(default, "StatefulSet", "-redis")["spec"]["replicas"] == 1
    external = render("external-redis-values.yaml")
    assert not by_kind(external, "StatefulSet")
    assert not [o for o in external if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-secrets")], (
        "secrets.existingSecret given: the chart must not create its own"
    )
    deploy = one(external, "Deployment", "ep-edgepath")
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in c["env"] if "valueFrom" in e}
    assert refs["EDGEPATH_STORE_URL"] == "edgepath-credentials"


def test_trainer_deployment_runs_edgepath_train(render: Any) -> None:
    objects = render("defaults")
    trainer = one(objects, "Deployment", "-trainer")
    assert trainer["spec"]["replicas"] == 1 and trainer["spec"]["strategy"]["type"] == "Recreate"
    (c,) = trainer["spec"]["template"]["spec"]["containers"]
    assert c["args"] == ["train"]
    deploy = one(objects, "Deployment", "ep-edgepath")
    (svc_c,) = deploy["spec"]["template"]["spec"]["containers"]
    assert {"name": "EDGEPATH_TRAINER", "value": "false"} in svc_c["env"], "deciders must not refit beside the trainer"
    assert not by_kind(render("single-replica-dev-values.yaml"), "StatefulSet")
    assert [d["metadata"]["name"] for d in by_kind(render("single-replica-dev-values.yaml"), "Deployment")] == [
        "ep-edgepath"
    ]


def test_a_gateway_release_only_serves_on_the_training_releases_store_and_keys(render: Any) -> None:
    """``ci/gateway-replicas-values.yaml`` (README "Gateways on replicas of their own"): no trainer, no Redis and no
    refits in its replicas, but the store URL, the HMAC key and the device keys from the same Secret, and the same
    Redis key namespace, as the release that trains (``ci/external-redis-values.yaml``); an external-Redis release
    without a trainer Deployment still lets its replicas refit unless ``trainer.inServiceReplicas`` is false."""

    def service_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
        (c,) = one(objects, "Deployment", "ep-edgepath")["spec"]["template"]["spec"]["containers"]
        return c

    def secret_refs(c: dict[str, Any]) -> dict[str, tuple[str, str]]:
        return {
            e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for e in c["env"]
            if "secretKeyRef" in e.get("valueFrom", {})
        }

    gateways, trains = render("gateway-replicas-values.yaml"), render("external-redis-values.yaml")
    assert [d["metadata"]["name"] for d in by_kind(gateways, "Deployment")] == ["ep-edgepath"]
    assert not by_kind(gateways, "StatefulSet")
    c = service_container(gateways)
    assert {"name": "EDGEPATH_TRAINER", "value": "false"} in c["env"]
    refs = secret_refs(c)
    assert {"EDGEPATH_STORE_URL", "EDGEPATH_HMAC_KEY"} <= set(refs)
    training_refs = secret_refs(service_container(trains))
    assert refs == {name: training_refs[name] for name in refs}
    namespace = "EDGEPATH_REDIS_NAMESPACE"
    assert (
        one(gateways, "ConfigMap", "-settings")["data"][namespace]
        == one(trains, "ConfigMap", "-settings")["data"][namespace]
    )
    no_trainer = render("external-redis-values.yaml", "--set", "trainer.enabled=false")
    assert {"name": "EDGEPATH_TRAINER", "value": "true"} in service_container(no_trainer)["env"]


def test_hpa_and_pdb(render: Any) -> None:
    objects = render("defaults")
    hpa = one(objects, "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert hpa["spec"]["scaleTargetRef"]["name"] == "ep-edgepath"
    assert "replicas" not in one(objects, "Deployment", "ep-edgepath")["spec"], "the HPA owns the replica count"
    assert one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert not by_kind(render("single-replica-dev-values.yaml"), "PodDisruptionBudget"), "no PDB for one replica"


def test_network_policies_limit_redis_to_the_release(render: Any) -> None:
    objects = render("monitoring-networkpolicy-values.yaml")
    redis_np = one(objects, "NetworkPolicy", "-redis")
    peers = redis_np["spec"]["ingress"][0]["from"]
    assert {p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in peers} == {"service", "trainer"}
    service_np = one(objects, "NetworkPolicy", "ep-edgepath")
    clients = service_np["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"edgepath.io/devices": "true"}}} in clients
    test_pod = one(objects, "Pod", "-test")["metadata"]["labels"]
    assert any("podSelector" in p and p["podSelector"]["matchLabels"].items() <= test_pod.items() for p in clients), (
        "the helm test pod must still reach the service"
    )
    default_nps = by_kind(render("defaults"), "NetworkPolicy")
    assert {np["metadata"]["name"] for np in default_nps} == {
        "ep-edgepath",
        "ep-edgepath-trainer",
        "ep-edgepath-redis",
    }, "NetworkPolicies must be on by default (any pod could otherwise write the outcome stream)"


def test_helm_test_hook_calls_the_service(render: Any) -> None:
    pod = one(render("defaults"), "Pod", "-test")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    cmd = pod["spec"]["containers"][0]["command"]
    assert "--host=ep-edgepath" in cmd and "--recommend" in cmd and "--mode=all" in cmd
    assert f"--service={SERVICE_NAME}" in cmd, "the helm test asks for readiness, as /readyz"


def _mode(cmd: list[str]) -> str:
    (mode,) = [a.removeprefix("--mode=") for a in cmd if a.startswith("--mode=")]
    return mode


def test_helm_test_skips_the_grpc_check_under_mtls_as_the_liveness_probe_does(render: Any) -> None:
    """With ``tls.clientAuth`` the gRPC port wants a client certificate the chart does not have for its probes or its
    test pod (the handshake fails: UNAVAILABLE "Socket closed"): the liveness probe asks /healthz, and the test pod
    asks /healthz and /readyz over HTTPS (as the startup and readiness probes do) and still makes one Recommend."""
    objects = render("external-redis-values.yaml")  # tls.clientAuth: true
    assert one(objects, "ConfigMap", "-settings")["data"]["EDGEPATH_TLS_CLIENT_CA_FILE"]
    assert _mode(_probes(objects)["livenessProbe"]["exec"]["command"]) == "http"
    cmd = one(objects, "Pod", "-test")["spec"]["containers"][0]["command"]
    assert _mode(cmd) == "rest", "no gRPC call without a client certificate"
    assert "--recommend" in cmd and "--ca-file=/etc/edgepath/tls/ca.crt" in cmd


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_pod_of_the_image_pulls_it_as_the_deciders_do(render: Any, value_set: str) -> None:
    """The trainer and the ``helm test`` pod pull the same image as the deciders, with the same pull secrets and
    service account (a registry's pull secret may be linked to it), so a private registry serves them all."""
    objects = render(value_set)
    deciders = one(objects, "Deployment", "ep-edgepath")["spec"]["template"]["spec"]
    image = deciders["containers"][0]["image"]
    pods = [(name, spec) for name, spec in pod_specs(objects) if spec["containers"][0]["image"] == image]
    assert "Pod/ep-edgepath-test" in {name for name, _ in pods}, "the helm test pod runs the service image"
    for name, spec in pods:
        assert spec.get("imagePullSecrets") == deciders.get("imagePullSecrets"), name
        assert spec.get("serviceAccountName") == deciders["serviceAccountName"], name
        assert spec["containers"][0]["imagePullPolicy"] == deciders["containers"][0]["imagePullPolicy"], name
    redis = by_kind(objects, "StatefulSet")
    for sts in redis:
        assert sts["spec"]["template"]["spec"].get("imagePullSecrets") == deciders.get("imagePullSecrets")


def test_the_helm_test_pod_goes_where_the_deciders_may(render: Any) -> None:
    """On a cluster whose nodes are all tainted (or labelled for the edge) the test pod needs the deciders' node
    selector and tolerations, or it is never scheduled; not their affinity (its anti-affinity to the deciders would
    keep it off a one-node cluster)."""
    objects = render(
        "defaults",
        "--set", "nodeSelector.edge=mec",
        "--set", "tolerations[0].key=edge", "--set", "tolerations[0].operator=Exists",
        "--set", "tolerations[0].effect=NoSchedule",
    )  # fmt: skip
    deciders = one(objects, "Deployment", "ep-edgepath")["spec"]["template"]["spec"]
    test_pod = one(objects, "Pod", "-test")["spec"]
    assert test_pod["nodeSelector"] == deciders["nodeSelector"] == {"edge": "mec"}
    assert test_pod["tolerations"] == deciders["tolerations"]
    assert "affinity" not in test_pod


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "redis.enabled=false"], "shared store"),
        (["--set", "redis.url=redis://elsewhere:6379/0"], "not both"),
        (["--set", "tls.enabled=false"], "requires tls.enabled"),
        (["--set", "settings.grpcPortt=1"], "grpcPortt"),
        (["--set", "settings.grpcPort=70000"], "grpcPort"),
        (["--set", "redis.url=http://x"], "url"),
        (["--set", "tls.renewBeforeDays=365"], "renewBeforeDays"),
        (["--set", "secrets.jwtKey=too-short"], "jwtKey"),  # the pods would refuse it at start: refused here
        # a port twice: two containerPorts of one number rendered, and the service died at start binding the second
        (["--set", "settings.metricsPort=8080"], "settings.httpPort and settings.metricsPort are both 8080"),
        (["--set", "settings.metricsPort=50051"], "settings.grpcPort and settings.metricsPort are both 50051"),
        (["--set", "settings.httpPort=50051"], "settings.grpcPort and settings.httpPort are both 50051"),
        (["--set", "service.httpPort=50051"], "service.grpcPort and service.httpPort are both 50051"),
        (["--set", "service.grpcPort=9090"], r"service.grpcPort and settings.metricsPort \(the Service's"),
        # Redis bounded at or above its container limit would be OOM-killed rather than refuse writes
        (["--set", "redis.maxmemory=512Mi"], "redis.maxmemory .* must be below redis.resources.limits.memory"),
        (["--set", "redis.resources.limits.memory=12X"], "'12X' does not match pattern"),  # the schema, first
        # each of these rendered and failed only on the cluster or at the pods' start, or never said anything
        (["--set", "extraSettings.EDGEPATH_GRPC_PORT=9999"], "extraSettings.EDGEPATH_GRPC_PORT: set settings.grpcPort"),
        (["--set", "extraSettings.EDGEPATH_HMAC_KEY=k"], "extraSettings.EDGEPATH_HMAC_KEY: set secrets.hmacKey"),
        (["--set", "settings.policy=ridge-squarecb"], "/settings/policy': value must be one of 'ridge_squarecb'"),
        (["--set", "autoscaling.minReplicas=5", "--set", "autoscaling.maxReplicas=2"], r"minReplicas \(5\) is above"),
        (["--set", "podDisruptionBudget.minAvailable=2"], r"minAvailable \(2\) must be below the replicas \(2"),
        (["--set", "ingress.enabled=true"], "ingress.enabled needs ingress.hosts"),
        (["--set", "grpcRoute.enabled=true"], "grpcRoute.enabled needs grpcRoute.parentRefs"),
        (["--set", "secrets.tokensFromExistingSecret=true"], "secrets.existingSecret, which is not set"),
        (["--set", "secrets.tokensJson=notjson"], "secrets.tokensJson is not JSON"),
        (["--set-json", 'secrets.tokensJson="{\\"tokens\\": 5}"'], r"tokensJson: expected \{"),
        (["--set", "resources.limits.memory=512MB"], "'512MB' does not match pattern"),
        (["--set", "trainer.resources.requests.cpu=-1"], "/trainer/resources/requests/cpu"),
    ],
)
def test_invalid_values_are_refused_with_a_reason(render: Any, args: list[str], message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render("defaults", *args)


@pytest.mark.parametrize(
    "args",
    [
        ["--set", "extraSettings.EDGEPATH_HOST=::"],  # a setting the chart renders but uses nowhere else
        ["--set", "podDisruptionBudget.minAvailable=50%"],
        [
            "--set",
            "autoscaling.enabled=false",
            "--set",
            "replicaCount=1",
            "--set",
            "podDisruptionBudget.minAvailable=1",
        ],
        ["--set-json", 'secrets.tokensJson="{\\"version\\": 1, \\"tokens\\": []}"'],
        ["--set", "resources.limits.cpu=1.5", "--set", "resources.limits.memory=1Gi"],
    ],
)
def test_values_next_to_a_refusal_still_render(render: Any, args: list[str]) -> None:
    """The checks above refuse what would break, not their neighbours: a percentage budget, one replica (no budget
    rendered), an empty token file, decimal quantities."""
    assert one(render("defaults", *args), "ConfigMap", "-settings")


def test_the_schema_offers_every_policy_the_service_serves() -> None:
    """``settings.policy`` is an enum (a misspelt policy rendered and the pods crash-looped on it): the service's
    own list, no more, no less."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["settings"]["properties"]["policy"]["enum"] == list(POLICIES)


def _leaves(tree: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(tree, dict) and tree:
        return [leaf for k, v in tree.items() for leaf in _leaves(v, (*prefix, k))]
    return [prefix]


def test_schema_describes_every_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = []
    for path in _leaves(values):
        node = schema
        for key in path:
            props = node.get("properties", {})
            if key in props:
                node = props[key]
            elif isinstance(node.get("additionalProperties"), dict) or node.get("type") == "object":
                node = None
                break
            else:
                node = None
                missing.append(".".join(path))
                break
        if node is not None and not node.get("description"):
            missing.append(".".join(path) + " (no description)")
    assert not missing, f"values without a described schema entry: {missing}"
    for key, node in schema["properties"].items():
        assert node.get("description"), key


def _tls_service_env(objects: list[dict[str, Any]], tmp_path: Path) -> dict[str, str]:
    """Environment of a prod-profile ``edgepath serve`` with the rendered TLS Secret's files (written to
    ``tmp_path``) and the rendered JWT key, as the chart's pods get them."""
    tls = {k: base64.b64decode(v) for k, v in one(objects, "Secret", "-tls")["data"].items()}
    for name, data in tls.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "tls.key").chmod(0o600)
    env = {
        "EDGEPATH_PROFILE": "prod",
        "EDGEPATH_TLS_CERT_FILE": str(tmp_path / "tls.crt"),
        "EDGEPATH_TLS_KEY_FILE": str(tmp_path / "tls.key"),
    }
    secret = one(objects, "Secret", "-secrets")["data"]
    if "jwt-key" in secret:  # none under tls.clientAuth (mTLS authenticates)
        env["EDGEPATH_AUTH_JWT_KEY"] = base64.b64decode(secret["jwt-key"]).decode()
    return env


def _run_here(cmd: list[str], ports: dict[str, int], tls_dir: Path) -> list[str]:
    """A rendered health-check command with the image's paths mapped to this checkout and ``tls_dir``, and the
    Service address to the loopback service's ``ports``."""
    image_paths = {
        "/opt/edgepath/venv/bin/python": sys.executable,
        "/opt/edgepath/healthcheck.py": str(ROOT / "docker" / "healthcheck.py"),
        "/etc/edgepath/tls/ca.crt": str(tls_dir / "ca.crt"),
    }
    out = []
    for arg in cmd:
        for image_path, here in image_paths.items():
            arg = arg.replace(image_path, here)
        arg = re.sub(r"^--host=.*", "--host=127.0.0.1", arg)
        arg = re.sub(r"^--grpc-port=.*", f"--grpc-port={ports['grpc_port']}", arg)
        arg = re.sub(r"^--http-port=.*", f"--http-port={ports['http_port']}", arg)
        out.append(arg)
    return out


def _run_check(
    cmd: list[str], ports: dict[str, int], tls_dir: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a rendered health-check command here (:func:`_run_here`) with ``env`` (default: this process's): its
    exit status and output (text) for the caller to check, within 60 s (``subprocess.TimeoutExpired`` after)."""
    return subprocess.run(
        _run_here(cmd, ports, tls_dir), env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("client_auth", [False, True], ids=["tls", "mtls"])
def test_tls_liveness_probe_and_helm_test_pass_against_a_real_tls_service(
    render: Any, tmp_path: Path, client_auth: bool
) -> None:
    """With the chart's generated certificate, a prod-profile service (TLS + JWT auth, or gRPC mTLS with
    ``tls.clientAuth``) passes the rendered liveness exec probe and the ``helm test`` command (run from the
    repository's docker/healthcheck.py)."""
    objects = render("defaults", "--set", "tls.clientAuth=true") if client_auth else render("defaults")
    env = _tls_service_env(objects, tmp_path)
    if client_auth:  # the gRPC port requires a client certificate signed by ca.crt (the ConfigMap's setting)
        assert one(objects, "ConfigMap", "-settings")["data"]["EDGEPATH_TLS_CLIENT_CA_FILE"].endswith("/ca.crt")
        env["EDGEPATH_TLS_CLIENT_CA_FILE"] = str(tmp_path / "ca.crt")

    live = _probes(objects)["livenessProbe"]["exec"]["command"]
    helm_test = one(objects, "Pod", "-test")["spec"]["containers"][0]["command"]
    with served(tmp_path, env=env) as ports:
        # the pod's EDGEPATH_*_PORT come from the ConfigMap
        port_env = {
            **os.environ,
            "EDGEPATH_GRPC_PORT": str(ports["grpc_port"]),
            "EDGEPATH_HTTP_PORT": str(ports["http_port"]),
        }
        probe = _run_check(live, ports, tmp_path, port_env)
        assert probe.returncode == 0, probe.stderr
        check = _run_check(helm_test, ports, tmp_path)
        assert check.returncode == 0, check.stderr
        if client_auth:  # why the test pod leaves gRPC out under mTLS: without a client certificate it fails
            with_grpc = [re.sub(r"^--mode=.*", "--mode=all", a) for a in helm_test]
            grpc_check = _run_check(with_grpc, ports, tmp_path)
            assert grpc_check.returncode == 1 and "UNAVAILABLE" in grpc_check.stderr, grpc_check.stderr
        # Plaintext is refused: the probe really went through TLS.
        plain = subprocess.run(
            [sys.executable, str(ROOT / "docker" / "healthcheck.py"), f"--grpc-port={ports['grpc_port']}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert plain.returncode == 1


def test_trainer_and_service_commands_exist_in_the_cli(render: Any) -> None:
    objects = render("defaults")
    for deploy in by_kind(objects, "Deployment"):
        (c,) = deploy["spec"]["template"]["spec"]["containers"]
        proc = subprocess.run(
            [str(VENV_BIN / "edgepath"), *c["args"], "--help"], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr


def test_chart_renders_as_a_dependency_of_a_parent_chart(helm_bin: str, tmp_path: Path) -> None:
    """A parent chart with ``global`` values and a file:// dependency on this chart: `helm template` of the parent."""
    parent = tmp_path / "platform"
    (parent / "charts").mkdir(parents=True)
    (parent / "Chart.yaml").write_text(
        "apiVersion: v2\nname: platform\nversion: 1.0.0\n"
        f"dependencies:\n  - name: edgepath\n    version: 0.1.0\n    repository: file://{CHART}\n"
    )
    (parent / "values.yaml").write_text(
        "global:\n  imageRegistry: registry.example.invalid\n  storageClass: fast\n  anyParentKey: {a: 1}\n"
        "edgepath:\n  image:\n    digest: sha256:" + "ab" * 32 + "\n"
        "  secrets:\n    renderWithoutCluster: generate\n"
    )
    dep = subprocess.run(
        [helm_bin, "dependency", "update", str(parent)], capture_output=True, text=True, timeout=120, check=False
    )
    assert dep.returncode == 0, dep.stderr
    # No --kube-version: the repo-built helm must report a Kubernetes version within Chart.yaml's kubeVersion.
    proc = subprocess.run(
        [helm_bin, "template", "ep", str(parent), "--namespace", "edge"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    objects = [d for d in yaml.safe_load_all(proc.stdout) if d]
    deploy = one(objects, "Deployment", "ep-edgepath")
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "registry.example.invalid/edgepath@sha256:" + "ab" * 32, "digest wins over the tag"
    refused = subprocess.run(
        [helm_bin, "template", "ep", str(parent), "--namespace", "edge", "--set", "edgepath.ingress.enabled=true"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "execution error at (platform/charts/edgepath/templates/validate.yaml:" in refused.stderr, refused.stderr


def test_repo_built_helm_reports_a_current_kubernetes_version(helm_bin: str, tmp_path: Path) -> None:
    chart = tmp_path / "kv"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: kv\nversion: 0.1.0\n")
    (chart / "templates" / "v.yaml").write_text("kube: {{ .Capabilities.KubeVersion.Version | quote }}\n")
    proc = subprocess.run([helm_bin, "template", str(chart)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    version = yaml.safe_load(proc.stdout)["kube"]
    major, minor = (int(x) for x in version.lstrip("v").split(".")[:2])
    assert (major, minor) >= (1, 27), f"helm reports Kubernetes {version}, below Chart.yaml's kubeVersion"


def _template(helm_bin: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``helm template ep <chart> *args``, uncached (a render that may fail: the caller checks its exit status and
    output, text), within 120 s (``subprocess.TimeoutExpired`` after)."""
    return subprocess.run(
        [helm_bin, "template", "ep", str(CHART), *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (
            ["--set", "secrets.jwtKey=" + JWT_KEY, "--set", "tls.existingSecret=t", "--set", "redis.auth.password=p"],
            "HMAC",
        ),
        (["--set", "secrets.hmacKey=h", "--set", "tls.existingSecret=t", "--set", "redis.auth.password=p"], "JWT"),
        (
            ["--set", "secrets.hmacKey=h", "--set", "secrets.jwtKey=" + JWT_KEY, "--set", "tls.existingSecret=t"],
            "Redis",
        ),
        (["--set", "secrets.hmacKey=h", "--set", "secrets.jwtKey=" + JWT_KEY, "--set", "redis.auth.password=p"], "TLS"),
    ],
)
def test_generated_keys_are_refused_without_a_cluster(helm_bin: str, args: list[str], what: str) -> None:
    """Under helm template (as Argo CD renders) a generated key would change on every sync: refused, named."""
    proc = _template(helm_bin, *args)
    assert proc.returncode != 0
    assert "refusing to generate" in proc.stderr and what in proc.stderr and "existingSecret" in proc.stderr
    given = ["--set", "secrets.hmacKey=h", "--set", "secrets.jwtKey=" + JWT_KEY, "--set", "tls.existingSecret=t"]
    ok = _template(helm_bin, *given, "--set", "redis.auth.password=p")
    assert ok.returncode == 0, ok.stderr
    first = ok.stdout
    again = _template(helm_bin, *given, "--set", "redis.auth.password=p")
    assert again.stdout == first, "with every key given, renders are identical (stable for GitOps)"


#: What the chart's defaults generate, as the refusal names each.
_GENERATED = {
    "secrets.hmacKey": "the model-snapshot HMAC key (secrets.hmacKey)",
    "secrets.jwtKey": "the device JWT key (secrets.jwtKey)",
    "redis.auth.password": "the Redis password (redis.auth.password)",
    "tls.existingSecret": "the TLS CA and server certificate (tls.existingSecret)",
}


def test_one_refusal_names_every_missing_value(helm_bin: str) -> None:
    """`helm template` of the defaults misses four values: one render names them all (it took four renders, one
    per value), and value combinations the chart refuses are named in the same message, each in its own words."""

    def refusal(*args: str) -> str:
        proc = _template(helm_bin, *args)
        assert proc.returncode != 0, proc.stdout[:500]
        assert proc.stderr.count("Error:") == 1, proc.stderr
        return proc.stderr

    err = refusal()
    assert err.count("refusing to generate") == 1, err
    for what in _GENERATED.values():
        assert what in err, f"{what} not named in: {err}"
    assert "secrets.renderWithoutCluster=generate" in err and "existingSecret" in err

    err = refusal("--set", "tls.enabled=false", "--set", "redis.enabled=false")
    for message in (
        "trainer.enabled needs a shared store",
        "more than one replica needs a shared store",
        "settings.profile=prod requires tls.enabled=true",
        "refusing to generate " + _GENERATED["secrets.hmacKey"] + " and " + _GENERATED["secrets.jwtKey"],
    ):
        assert message in err, f"{message!r} not in: {err}"
    assert _GENERATED["redis.auth.password"] not in err and _GENERATED["tls.existingSecret"] not in err, (
        "only what would really be generated is named"
    )


@pytest.mark.parametrize(
    "args",
    [
        [*DEFAULTS_ARGS, "--set", "ingress.enabled=true"],  # was trainer-deployment.yaml:21 (its ConfigMap checksum)
        [*DEFAULTS_ARGS, "--set", "trainer.enabled=false", "--set", "tls.enabled=false"],  # was tls-secret.yaml:1
        [*DEFAULTS_ARGS, "--set", "redis.enabled=false"],  # two problems
        [*DEFAULTS_ARGS, "--set", "ingress.enabled=true", "--show-only", "templates/ingress.yaml"],
        [],  # the keys the defaults would generate
    ],
)
def test_a_refusal_is_reported_at_the_values_check_not_a_workload(helm_bin: str, args: list[str]) -> None:
    """helm prefixes a refusal with the template that was rendering when it failed: that was whichever template
    first ran the validation (trainer-deployment.yaml, through its checksum of the ConfigMap, or tls-secret.yaml
    without a trainer), so wrong ingress values sent the operator to the trainer's Deployment. templates/validate.yaml
    runs it before any other template, and the message says the values are at fault."""
    proc = _template(helm_bin, *args)
    assert proc.returncode != 0, proc.stdout[:500]
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert error.startswith("Error: execution error at (edgepath/templates/validate.yaml:"), proc.stderr
    assert "trainer-deployment.yaml" not in proc.stderr, proc.stderr
    assert re.search(r"\): (\d+ problems|problem) with the values:", error), proc.stderr


def _notes(helm_bin: str, tmp_path: Path, *args: str) -> str:
    """The chart's NOTES.txt as `helm install` prints it (rendered offline: `helm template` leaves NOTES out, so a
    copy of the chart renders the same text through `tpl` into a ConfigMap)."""
    import shutil

    chart = tmp_path / "edgepath"
    shutil.copytree(CHART, chart)
    (chart / "notes-under-test.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (chart / "templates" / "zz-notes-under-test.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes-under-test\ndata:\n"
        '  notes: {{ tpl (.Files.Get "notes-under-test.txt") . | quote }}\n'
    )
    proc = subprocess.run(
        [
            helm_bin,
            "template",
            "ep",
            str(chart),
            "--namespace",
            "edge",
            f"--kube-version={KUBE_VERSION}",
            "--show-only",
            "templates/zz-notes-under-test.yaml",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return str(yaml.safe_load(proc.stdout)["data"]["notes"])


def test_notes_tell_the_operator_what_the_defaults_leave_to_them(helm_bin: str, tmp_path: Path) -> None:
    """NOTES.txt says that nobody publishes the default image, that /metrics stays closed to Prometheus until
    networkPolicy.metricsScrapers names it, and that a warm-start model under prod must be HMAC-signed."""
    notes = _notes(helm_bin, tmp_path / "defaults", *values_args("defaults"))
    assert "edgepath:0.1.0" in notes and "image.registry" in notes and "docker build" in notes
    assert "networkPolicy.metricsScrapers" in notes and "GET /metrics (port 9090) is closed" in notes
    assert "the trainer's (port 9090) too" in notes and "ep-edgepath-trainer.edge.svc:9090/metrics" in notes
    assert "ep-edgepath.edge.svc:9090/metrics" in notes, "metrics are on a port of their own, not the REST port"
    assert "/metrics" not in next(line for line in notes.splitlines() if line.strip().startswith("REST"))
    assert "model.hmac" not in notes, "no model configured: nothing to sign"
    monitoring = _notes(helm_bin, tmp_path / "monitoring", *values_args("monitoring-networkpolicy-values.yaml"))
    assert "networkPolicy.metricsScrapers" not in monitoring, "scrapers named: nothing to say"
    gitops = _notes(helm_bin, tmp_path / "gitops", *values_args("platform-gitops-values.yaml"))
    assert "image.registry" not in gitops, "global.imageRegistry set: nothing to say"
    warm = _notes(
        helm_bin, tmp_path / "warm", *values_args("defaults"), "--set", "settings.modelPath=/opt/edgepath/models/x"
    )
    assert "model.hmac" in warm and "edgepath sign-model models/primary-path-v2 --out" in warm
    dev = _notes(helm_bin, tmp_path / "dev", *values_args("single-replica-dev-values.yaml"))
    assert "model.hmac" not in dev, "the dev profile loads unsigned artefacts"


def test_notes_tell_devices_how_to_authenticate_and_what_an_ingress_or_the_alerts_need(
    helm_bin: str, tmp_path: Path
) -> None:
    """Past the default JWT line: how to make a device's token (``edgepath tokens jwt``), how to sign a device's
    client certificate with the CA the chart generated (mTLS), that an Ingress must originate TLS to a TLS-only
    port (an annotation that says so silences it), and that the alerts need the ServiceMonitor's job label."""
    notes = _notes(helm_bin, tmp_path / "defaults", *values_args("defaults"))
    assert "edgepath tokens jwt DEVICE_ID" in notes and "export EDGEPATH_AUTH_JWT_KEY=$(kubectl -n edge" in notes
    assert "client certificates" not in notes and "Ingress:" not in notes and "Alerts:" not in notes
    mtls = _notes(helm_bin, tmp_path / "mtls", *values_args("defaults"), "--set", "tls.clientAuth=true")
    assert "client certificates (mTLS; CN = device_id)" in mtls and "Secret ep-edgepath-tls-ca" in mtls
    assert "-CA ca.crt -CAkey ca.key" in mtls and "{.data.ca\\.key}" in mtls
    theirs = _notes(helm_bin, tmp_path / "theirs", *values_args("external-redis-values.yaml"))
    assert "client certificates (mTLS" in theirs and "-tls-ca" not in theirs, "their CA: the chart has no key"
    ingress = ["--set", "ingress.enabled=true", "--set", "ingress.hosts[0].host=edge.example.org"]
    plain = _notes(helm_bin, tmp_path / "ingress", *values_args("defaults"), *ingress)
    assert "backend-protocol: HTTPS" in plain and "every request fails (502)" in plain
    grpc_port = _notes(
        helm_bin, tmp_path / "grpc", *values_args("defaults"), *ingress, "--set", "ingress.servicePort=grpc"
    )
    assert "backend-protocol: GRPCS" in grpc_port
    annotated = _notes(
        helm_bin,
        tmp_path / "annotated",
        *values_args("defaults"),
        *ingress,
        "--set-string",
        "ingress.annotations.nginx\\.ingress\\.kubernetes\\.io/backend-protocol=HTTPS",
    )
    assert "Ingress:" not in annotated
    named = ["--set", "tls.existingSecret=their-tls"]
    theirs_tls = _notes(helm_bin, tmp_path / "their-tls", *values_args("defaults"), *named)
    assert "check Secret their-tls's certificate against the name\nep-edgepath" in theirs_tls
    assert "set tls.serverName" in theirs_tls and "set tls.serverName" not in notes
    named_too = [*named, "--set", "tls.serverName=edge.example.org"]
    assert "TLS: the liveness" not in _notes(helm_bin, tmp_path / "named", *values_args("defaults"), *named_too)
    alerts = _notes(helm_bin, tmp_path / "alerts", *values_args("defaults"), "--set", "prometheusRule.enabled=true")
    assert 'selects job="ep-edgepath"' in alerts
    assert "WARNING: Alerts: prometheusRule.enabled=true but serviceMonitor.enabled=false" in alerts
    assert "alerts cannot fire" in alerts
    both = ["--set", "prometheusRule.enabled=true", "--set", "serviceMonitor.enabled=true"]
    assert "Alerts:" not in _notes(helm_bin, tmp_path / "both", *values_args("defaults"), *both)


def test_metrics_stay_closed_by_default_and_open_to_the_named_scrapers(render: Any) -> None:
    def metrics_rules(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rules = one(objects, "NetworkPolicy", "ep-edgepath")["spec"]["ingress"]
        return [r for r in rules if any(p["port"] == "metrics" for p in r["ports"])]

    assert not metrics_rules(render("defaults")), "a secure default: /metrics is not open to every pod"
    (rule,) = metrics_rules(render("monitoring-networkpolicy-values.yaml"))
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


def test_warm_start_examples_name_a_shipped_model_of_the_chart_policy(render: Any) -> None:
    """The modelPath of the dev value set and the examples in values.yaml and the schema name an artefact the image
    ships (docker/build-steps.sh copies models/ to /opt/edgepath/models) trained for the chart's policy."""
    from edgepath.training.artefact import load_artefact

    config = one(render("single-replica-dev-values.yaml"), "ConfigMap", "-settings")["data"]
    policy = config["EDGEPATH_POLICY"]
    named = [config["EDGEPATH_MODEL_PATH"]]
    for text in ((CHART / "values.yaml").read_text(), (CHART / "values.schema.json").read_text()):
        named += re.findall(r"/opt/edgepath/models/[A-Za-z0-9_-]+", text)
    assert len(named) >= 3
    for path in named:
        assert path.startswith("/opt/edgepath/models/"), path
        artefact = load_artefact(ROOT / "models" / Path(path).name)  # checks SHA256SUMS; unsigned
        assert artefact.bandit.policy_name == policy, f"{path} is a {artefact.bandit.policy_name} model"


def test_platform_values_reach_the_pods(render: Any) -> None:
    objects = render("platform-gitops-values.yaml")
    for o in objects:
        assert o["metadata"]["labels"]["team"] == "edge-platform", f"commonLabels missing on {o['kind']}"
    deploy = one(objects, "Deployment", "ep-edgepath")
    spec = deploy["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "edge-critical"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    test_pod = one(objects, "Pod", "-test")["spec"]
    assert test_pod["imagePullSecrets"] == [{"name": "regcred"}], "the helm test pod pulls from the same registry"
    assert test_pod["containers"][0]["image"] == spec["containers"][0]["image"]
    names = [c["name"] for c in spec["containers"]]
    assert names == ["edgepath", "log-shipper"], "sidecars run beside the service"
    main = spec["containers"][0]
    assert main["image"].startswith("registry.example.invalid/platform/edgepath@sha256:")
    assert {"name": "OTEL_SERVICE_NAME", "value": "edgepath-edge-platform"} in main["env"]
    assert {"name": "ca-bundle", "mountPath": "/etc/ssl/corporate", "readOnly": True} in main["volumeMounts"]
    assert "ca-bundle" in {v["name"] for v in spec["volumes"]}
    assert main["securityContext"]["runAsUser"] == 10001
    redis_ref = next(e for e in main["env"] if e["name"] == "REDIS_PASSWORD")["valueFrom"]["secretKeyRef"]
    assert redis_ref == {"name": "edgepath-redis-auth", "key": "password"}
    assert not [o for o in objects if o["kind"] == "Secret"], "every key comes from an existing Secret"
    hpa = one(objects, "HorizontalPodAutoscaler")
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert [m["type"] for m in hpa["spec"]["metrics"]] == ["Resource", "Pods"], "custom metric beside CPU"
    (redis_c,) = one(objects, "StatefulSet", "-redis")["spec"]["template"]["spec"]["containers"]
    assert redis_c["image"] == "registry.example.invalid/redis@sha256:" + "fedcba9876543210" * 4
    trainer = one(objects, "Deployment", "-trainer")["spec"]["template"]["spec"]["containers"][0]
    assert trainer["livenessProbe"]["periodSeconds"] == 30
    route = one(objects, "GRPCRoute")
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    (rule,) = route["spec"]["rules"]
    assert rule["matches"][0]["method"]["service"] == SERVICE_NAME
    assert rule["backendRefs"] == [{"name": "ep-edgepath", "port": 50051}]
    ingress = one(objects, "Ingress")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "ep-edgepath", "port": {"number": 8080}}
    assert not by_kind(render("defaults"), "GRPCRoute") and not by_kind(render("defaults"), "Ingress")


def test_redis_requires_the_password_the_store_url_carries(render: Any) -> None:
    objects = render("monitoring-networkpolicy-values.yaml")
    sts = one(objects, "StatefulSet", "-redis")
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    assert c["args"][c["args"].index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert "--protected-mode" not in c["args"]
    env = {e["name"]: e for e in c["env"]}
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "redis-password"
    assert env["REDISCLI_AUTH"]["value"] == "$(REDIS_PASSWORD)", "the readiness probe's redis-cli authenticates"
    secret = one(objects, "Secret", "-secrets")
    assert base64.b64decode(secret["data"]["redis-password"]).decode() == "ci-only-redis-password"
    for kind_name in ("ep-edgepath", "-trainer"):
        (app,) = one(objects, "Deployment", kind_name)["spec"]["template"]["spec"]["containers"]
        store = next(e for e in app["env"] if e["name"] == "EDGEPATH_STORE_URL")
        assert store["value"].startswith("redis://:$(REDIS_PASSWORD)@ep-edgepath-redis:")


def _kubelet_expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion of args and env values (variables defined earlier in the container)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), value)


@pytest.mark.redis
def test_rendered_redis_refuses_anonymous_clients_and_accepts_the_store_url(render: Any, tmp_path: Path) -> None:
    """Run redis-server with the StatefulSet's args and the service's store URL, as the kubelet expands them."""
    import shutil

    import redis

    redis_server = shutil.which("redis-server")
    if redis_server is None:
        pytest.skip("redis-server not installed (scripts/setup.sh installs it)")
    sys.path.insert(0, str(ROOT / "tests" / "service"))
    from state.redis_helpers import free_port, wait_until

    objects = render("monitoring-networkpolicy-values.yaml")
    secret = one(objects, "Secret", "-secrets")
    env = {"REDIS_PASSWORD": base64.b64decode(secret["data"]["redis-password"]).decode()}
    (rc,) = one(objects, "StatefulSet", "-redis")["spec"]["template"]["spec"]["containers"]
    args = [_kubelet_expand(a, env) for a in rc["args"]]
    port = free_port()
    args[args.index("--port") + 1] = str(port)
    args[args.index("--dir") + 1] = str(tmp_path)
    assert args[0] == "redis-server"
    proc = subprocess.Popen([redis_server, *args[1:], "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL)
    try:
        anonymous = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)

        def _answers() -> bool:
            try:
                anonymous.ping()
            except redis.AuthenticationError:
                return True
            except redis.ConnectionError:
                return False
            return True

        wait_until(_answers, 30, what="redis-server to answer")
        with pytest.raises(redis.AuthenticationError):
            anonymous.set("edgepath:outcomes", "forged")
        (app,) = one(objects, "Deployment", "-trainer")["spec"]["template"]["spec"]["containers"]
        store_url = _kubelet_expand(next(e for e in app["env"] if e["name"] == "EDGEPATH_STORE_URL")["value"], env)
        store_url = store_url.replace("ep-edgepath-redis:6379", f"127.0.0.1:{port}")
        client = redis.Redis.from_url(store_url, socket_timeout=2)  # as edgepath.state.redis connects
        assert client.ping() is True
        # The readiness probe's redis-cli authenticates through REDISCLI_AUTH.
        probe_env = {e["name"]: _kubelet_expand(e.get("value", ""), env) for e in rc["env"] if "value" in e}
        cmd = rc["readinessProbe"]["exec"]["command"]
        cmd[cmd.index("-p") + 1] = str(port)
        ping = subprocess.run(
            cmd, env={**os.environ, **probe_env}, capture_output=True, text=True, timeout=10, check=False
        )
        assert ping.stdout.strip() == "PONG", ping.stdout + ping.stderr
    finally:
        proc.terminate()
        proc.wait(10)


# --- Liveness vs readiness while Redis is down, and the health checks' TLS name ---------------------------------


def _redis_helpers() -> Any:
    """tests/service/state/redis_helpers (a real redis-server child process); skips without the binary."""
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not installed (scripts/setup.sh installs it)")
    sys.path.insert(0, str(ROOT / "tests" / "service"))
    from state import redis_helpers

    return redis_helpers


def _dockerfile_healthcheck() -> list[str]:
    """The Dockerfile's HEALTHCHECK command (exec form)."""
    text = (ROOT / "Dockerfile").read_text()
    (cmd,) = re.findall(r"^HEALTHCHECK [^\n]*\\\n\s*CMD (\[[^\n]*\])", text, re.MULTILINE)
    return list(json.loads(cmd))


@pytest.mark.redis
@pytest.mark.parametrize("transport", ["tls", "plaintext"])
def test_liveness_passes_and_readiness_fails_while_redis_is_down(render: Any, tmp_path: Path, transport: str) -> None:
    """With its Redis stopped a replica keeps deciding with its last model: readiness fails (GET /readyz 503, gRPC
    health of edgepath.v1.PathService NOT_SERVING: out of the Service) but liveness passes (no restart of every
    decider during a Redis outage): the rendered liveness probe (TLS: the image's health check; plaintext: the
    kubelet's gRPC probe) and the Dockerfile's HEALTHCHECK, against a real service on a real redis-server."""
    helpers = _redis_helpers()
    if transport == "tls":
        objects = render("defaults")
        env = _tls_service_env(objects, tmp_path)
        ctx: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        scheme = "https"
    else:
        objects = render("defaults", "--set", "tls.enabled=false", "--set", "settings.profile=dev")
        env, ctx, scheme = {"EDGEPATH_PROFILE": "dev"}, False, "http"
    probes = _probes(objects)
    live, ready = probes["livenessProbe"], probes["readinessProbe"]
    assert ready["httpGet"]["scheme"].lower() == scheme
    (tmp_path / "redis").mkdir()
    redis_server = helpers.RedisServer(tmp_path / "redis").start()
    env |= {
        "EDGEPATH_STORE_URL": redis_server.url,
        "EDGEPATH_HMAC_KEY": "k" * 32,
        "EDGEPATH_REDIS_SOCKET_TIMEOUT_S": "0.5",
    }
    try:
        with served(tmp_path, env=env) as ports:
            base = f"{scheme}://127.0.0.1:{ports['http_port']}"

            def status(path: str) -> int:
                return httpx.get(base + path, verify=ctx, timeout=5).status_code

            # readiness over gRPC, as the helm test asks it: the health of edgepath.v1.PathService
            def grpc_ready() -> bool:
                target = f"127.0.0.1:{ports['grpc_port']}"
                if transport == "tls":
                    creds = grpc.ssl_channel_credentials((tmp_path / "ca.crt").read_bytes())
                    options = [("grpc.ssl_target_name_override", "ep-edgepath")]
                    channel = grpc.secure_channel(target, creds, options=options)
                else:
                    channel = grpc.insecure_channel(target)
                with channel:
                    reply = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5
                    )
                return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

            helpers.wait_until(lambda: status(ready["httpGet"]["path"]) == 200, 60, what="the replica to be ready")
            assert grpc_ready()
            redis_server.stop()
            helpers.wait_until(lambda: status(ready["httpGet"]["path"]) == 503, 60, what="/readyz to answer 503")
            helpers.wait_until(lambda: not grpc_ready(), 60, what="PathService to turn NOT_SERVING")

            if "exec" in live:
                port_env = {**os.environ, "EDGEPATH_GRPC_PORT": str(ports["grpc_port"])}
                probe = _run_check(live["exec"]["command"], ports, tmp_path, port_env)
                assert probe.returncode == 0, "liveness failed while Redis is down: " + probe.stderr
            else:  # the kubelet's gRPC probe: Check(service) on the container port, plaintext
                with grpc.insecure_channel(f"127.0.0.1:{ports['grpc_port']}") as channel:
                    reply = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service=live["grpc"]["service"]), timeout=5
                    )
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
                # The image's HEALTHCHECK (Docker, Swarm restart an unhealthy container) is a liveness check too.
                docker_env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEPATH_")}
                docker_env["EDGEPATH_GRPC_PORT"] = str(ports["grpc_port"])
                healthcheck = _run_check(_dockerfile_healthcheck(), ports, tmp_path, docker_env)
                assert healthcheck.returncode == 0, "HEALTHCHECK failed while Redis is down: " + healthcheck.stderr
            assert status(ready["httpGet"]["path"]) == 503, "still degraded: the liveness check saw the outage"
    finally:
        redis_server.stop()


def test_https_health_checks_verify_the_server_name(render: Any, tmp_path: Path) -> None:
    """``--server-name`` is checked on HTTPS as on gRPC (it was ignored for HTTPS: any certificate of the CA
    passed): the name the chart's certificate carries passes, another fails, whatever address is dialled."""
    objects = render("defaults")
    env = _tls_service_env(objects, tmp_path)
    with served(tmp_path, env=env) as ports:

        def check(mode: str, server_name: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "docker" / "healthcheck.py"),
                    "--host=127.0.0.1",
                    f"--grpc-port={ports['grpc_port']}",
                    f"--http-port={ports['http_port']}",
                    f"--mode={mode}",
                    f"--ca-file={tmp_path / 'ca.crt'}",
                    f"--server-name={server_name}",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

        for mode in ("http", "rest", "grpc"):
            right = check(mode, "ep-edgepath")
            assert right.returncode == 0, (mode, right.stderr)
            wrong = check(mode, "not-the-cert-name.example")
            assert wrong.returncode == 1, f"--mode={mode}: a certificate without that name passed"
        assert "not-the-cert-name.example" in check("http", "not-the-cert-name.example").stderr


# --- Checksums: no restart on a no-op upgrade, a restart when a given secret changes -----------------------------


def _helm_template(helm_bin: str, chart: Path, *args: str) -> list[dict[str, Any]]:
    """One uncached ``helm template`` (generated keys differ between two calls)."""
    proc = subprocess.run(
        [helm_bin, "template", "ep", str(chart), "--namespace", "edge", f"--kube-version={KUBE_VERSION}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _annotations(objects: list[dict[str, Any]], kind: str, name_suffix: str) -> dict[str, str]:
    return dict(one(objects, kind, name_suffix)["spec"]["template"]["metadata"].get("annotations", {}))


def test_pod_checksums_hash_the_given_values_not_the_generated_keys(helm_bin: str) -> None:
    """At `helm install` the chart generates the keys; the first `helm upgrade` reads them back with lookup. The
    pods' checksum hashed the rendered Secret, so it changed between the two (every pod restarted on a no-op
    upgrade). Two renders with different generated keys stand for the two: the checksum must not change; a given
    key that changes must change it."""
    first, second = (_helm_template(helm_bin, CHART, *values_args("defaults")) for _ in range(2))
    keys = [one(objects, "Secret", "-secrets")["data"]["hmac-key"] for objects in (first, second)]
    assert keys[0] != keys[1], "two renders generate two keys (as install and a lookup-less render do)"
    for kind, name in (("Deployment", "ep-edgepath"), ("Deployment", "-trainer")):
        before, after = _annotations(first, kind, name), _annotations(second, kind, name)
        assert before["checksum/secrets"] == after["checksum/secrets"], name
        assert before["checksum/settings"] == after["checksum/settings"], name
    given = _helm_template(helm_bin, CHART, *values_args("defaults"), "--set", "secrets.hmacKey=" + "h" * 40)
    rotated = _helm_template(helm_bin, CHART, *values_args("defaults"), "--set", "secrets.hmacKey=" + "r" * 40)
    for kind, name in (("Deployment", "ep-edgepath"), ("Deployment", "-trainer")):
        assert (
            _annotations(given, kind, name)["checksum/secrets"] != _annotations(first, kind, name)["checksum/secrets"]
        )
        assert (
            _annotations(given, kind, name)["checksum/secrets"] != _annotations(rotated, kind, name)["checksum/secrets"]
        )


def test_a_changed_redis_password_restarts_redis_and_the_pods(render: Any) -> None:
    """Redis reads requirepass at start: its pod template carries a checksum of the password's inputs, so a new
    redis.auth.password (or another Secret / key) rolls it, as the deciders and trainer roll; an unrelated key
    does not restart Redis, and a generated password (kept by lookup) does not change it between renders."""
    base = render("monitoring-networkpolicy-values.yaml")
    rotated = render("monitoring-networkpolicy-values.yaml", "--set", "redis.auth.password=rotated-redis-password")
    other_key = render("monitoring-networkpolicy-values.yaml", "--set", "secrets.hmacKey=" + "o" * 40)
    moved = render(
        "monitoring-networkpolicy-values.yaml",
        "--set", "redis.auth.existingSecret=redis-auth", "--set", "redis.auth.existingSecretPasswordKey=pw",
    )  # fmt: skip

    def redis_sum(objects: list[dict[str, Any]]) -> str:
        return _annotations(objects, "StatefulSet", "-redis")["checksum/redis-password"]

    assert redis_sum(rotated) != redis_sum(base) and redis_sum(moved) != redis_sum(base)
    assert redis_sum(other_key) == redis_sum(base), "an HMAC key change must not restart Redis"
    for name in ("ep-edgepath", "-trainer"):
        assert (
            _annotations(rotated, "Deployment", name)["checksum/secrets"]
            != _annotations(base, "Deployment", name)["checksum/secrets"]
        ), "the store URL carries the password: the pods restart too"
    assert redis_sum(render("defaults")) == redis_sum(render("defaults", "--set", "podAnnotations.x=y"))


# --- The generated certificate: kept, renewed near its expiry, restarting the deciders ---------------------------

#: The chart's one read of Secrets back from the cluster (edgepath.lookupSecret), and its stand-in reading a file
#: of the chart copy, so a render sees "the cluster" a test puts there.
_LOOKUP = '{{- (lookup "v1" "Secret" $ctx.Release.Namespace (index . 1)) | default dict | toJson }}'
_FAKE_LOOKUP = '{{- $ctx.Files.Get (printf "fake-cluster/%s.json" (index . 1)) | default "{}" }}'
_DAY = 86400


def _render_against(helm_bin: str, tmp_path: Path, cluster: list[dict[str, Any]], *args: str) -> list[dict[str, Any]]:
    """``helm template`` of a copy of the chart whose lookup of a Secret finds ``cluster``'s (as `helm upgrade`
    does on a cluster holding them)."""
    return _helm_template(helm_bin, _chart_against(tmp_path, cluster), *values_args("defaults"), *args)


def _chart_against(tmp_path: Path, cluster: list[dict[str, Any]]) -> Path:
    """A copy of the chart whose lookup of a Secret finds ``cluster``'s (see :func:`_render_against`)."""
    import shutil

    chart = tmp_path / f"chart-{len(list(tmp_path.glob('chart-*')))}" / "edgepath"
    shutil.copytree(CHART, chart)
    helpers = chart / "templates" / "_helpers.tpl"
    text = helpers.read_text()
    assert text.count(_LOOKUP) == 1, "the chart reads Secrets back in edgepath.lookupSecret"
    helpers.write_text(text.replace(_LOOKUP, _FAKE_LOOKUP))
    (chart / "fake-cluster").mkdir()
    for obj in cluster:
        (chart / "fake-cluster" / f"{obj['metadata']['name']}.json").write_text(json.dumps(obj))
    return chart


def _stored(obj: dict[str, Any], created: float) -> dict[str, Any]:
    """``obj`` as the API server returns it: with a creationTimestamp."""
    import copy
    import datetime

    stored = copy.deepcopy(obj)
    stamp = datetime.datetime.fromtimestamp(created, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    stored["metadata"]["creationTimestamp"] = stamp
    return stored


def _certs(objects: list[dict[str, Any]]) -> tuple[Any, Any, dict[str, str]]:
    """(server certificate, CA certificate, annotations) of the rendered TLS Secret."""
    from cryptography import x509

    secret = one(objects, "Secret", "-tls")
    data = secret["data"]
    crt = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
    ca = x509.load_pem_x509_certificate(base64.b64decode(data["ca.crt"]))
    return crt, ca, secret["metadata"].get("annotations", {})


def test_the_generated_certificate_is_kept_renewed_and_restarts_the_deciders(helm_bin: str, tmp_path: Path) -> None:
    """Install generates a CA (its key kept in Secret <fullname>-tls-ca) and a server certificate, recording both
    expiry times (unix seconds) on the TLS Secret. An upgrade keeps them (same checksum: no restart) until one is
    within tls.renewBeforeDays of its expiry: the server certificate is then re-issued by the same CA (clients
    trusting ca.crt keep working) and the deciders' checksum/tls changes (they read the files at start); a CA that
    close to expiry is replaced. A Secret of an earlier chart (no annotations, no CA key) counts from its creation."""
    import time

    from cryptography import x509

    def checksum(objects: list[dict[str, Any]]) -> str:
        return _annotations(objects, "Deployment", "ep-edgepath")["checksum/tls"]

    now = time.time()
    install = _render_against(helm_bin, tmp_path, [])
    crt0, ca0, ann0 = _certs(install)
    validity = 365 * _DAY
    for key in ("edgepath.io/cert-not-after", "edgepath.io/ca-not-after"):
        assert abs(int(ann0[key]) - (now + validity)) < _DAY, ann0
    assert abs(crt0.not_valid_after_utc.timestamp() - int(ann0["edgepath.io/cert-not-after"])) < 120
    crt0.verify_directly_issued_by(ca0)
    names = crt0.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "ep-edgepath" in names
    tls0, ca_secret0 = one(install, "Secret", "-tls"), one(install, "Secret", "-tls-ca")
    assert {"ca.crt", "ca.key"} == set(ca_secret0["data"]) and ca_secret0["data"]["ca.crt"] == tls0["data"]["ca.crt"]
    deciders = one(install, "Deployment", "ep-edgepath")["spec"]["template"]["spec"]
    assert "tls-ca" not in json.dumps(deciders), "no pod mounts the CA key"
    assert "checksum/tls" not in _annotations(install, "Deployment", "-trainer")

    # A no-op upgrade: everything kept, no restart (the install's checksum hashed the Secret it created).
    upgrade = _render_against(helm_bin, tmp_path, [_stored(tls0, now), _stored(ca_secret0, now)])
    assert one(upgrade, "Secret", "-tls") == tls0 and one(upgrade, "Secret", "-tls-ca") == ca_secret0
    assert checksum(upgrade) == checksum(install)

    # The server certificate within 30 days of its expiry: re-issued by the same CA.
    expiring = _stored(tls0, now)
    expiring["metadata"]["annotations"]["edgepath.io/cert-not-after"] = str(int(now + 10 * _DAY))
    renewed = _render_against(helm_bin, tmp_path, [expiring, _stored(ca_secret0, now)])
    crt1, ca1, ann1 = _certs(renewed)
    assert ca1 == ca0 and crt1 != crt0
    crt1.verify_directly_issued_by(ca0)
    assert abs(int(ann1["edgepath.io/cert-not-after"]) - (now + validity)) < _DAY
    assert ann1["edgepath.io/ca-not-after"] == ann0["edgepath.io/ca-not-after"]
    assert one(renewed, "Secret", "-tls-ca") == ca_secret0
    assert checksum(renewed) != checksum(install), "the deciders restart on the renewed certificate"
    # ... and outside the window (tls.renewBeforeDays) it is kept
    kept = _render_against(helm_bin, tmp_path, [expiring, _stored(ca_secret0, now)], "--set", "tls.renewBeforeDays=5")
    assert one(kept, "Secret", "-tls")["data"] == tls0["data"]

    # The CA within the window: a new CA and a certificate it issued.
    old_ca = _stored(tls0, now)
    old_ca["metadata"]["annotations"]["edgepath.io/ca-not-after"] = str(int(now + 10 * _DAY))
    crt2, ca2, ann2 = _certs(_render_against(helm_bin, tmp_path, [old_ca, _stored(ca_secret0, now)]))
    assert ca2 != ca0 and crt2 != crt0
    crt2.verify_directly_issued_by(ca2)
    assert abs(int(ann2["edgepath.io/ca-not-after"]) - (now + validity)) < _DAY

    # A Secret of an earlier chart version: no annotations, no CA key.
    legacy = _stored(tls0, now - 400 * _DAY)
    del legacy["metadata"]["annotations"]
    crt3, ca3, _ = _certs(_render_against(helm_bin, tmp_path, [legacy]))
    assert ca3 != ca0, "expired by its age, and its CA key is lost: a new CA"
    crt3.verify_directly_issued_by(ca3)
    young = _stored(tls0, now - 10 * _DAY)
    del young["metadata"]["annotations"]
    kept_legacy = _render_against(helm_bin, tmp_path, [young])
    assert one(kept_legacy, "Secret", "-tls")["data"] == tls0["data"]
    assert abs(int(_certs(kept_legacy)[2]["edgepath.io/cert-not-after"]) - (now - 10 * _DAY + validity)) < _DAY
    assert not [o for o in by_kind(kept_legacy, "Secret") if o["metadata"]["name"].endswith("-tls-ca")], (
        "no CA key to keep"
    )


def test_the_helm_test_pod_starts_without_ca_crt_in_an_existing_tls_secret(render: Any) -> None:
    """ca.crt is optional in tls.existingSecret (a certificate from a public CA): the test pod's projection of it is
    optional, or the kubelet never starts the pod (the check then trusts the system's roots)."""
    test_pod = one(render("external-redis-values.yaml"), "Pod", "-test")["spec"]
    (tls,) = [v for v in test_pod["volumes"] if v["name"] == "tls"]
    assert tls["secret"]["secretName"] == "edgepath-tls-from-cert-manager"
    assert tls["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    assert tls["secret"]["optional"] is True
    cmd = test_pod["containers"][0]["command"]
    assert "--ca-file=/etc/edgepath/tls/ca.crt" in cmd


def test_existing_tls_secret_rotation_is_left_to_a_restart_and_said_so() -> None:
    """The chart cannot see tls.existingSecret's content (no checksum): values.yaml says that a rotation needs a
    restart of the deciders (they read the files at start)."""
    values = (CHART / "values.yaml").read_text()
    block = values.split("\ntls:\n", 1)[1].split("\n# --", 1)[0]
    assert "restart" in block and "reload" in block.lower()


# --- ServiceMonitor, Service appProtocol, GRPCRoute + BackendTLSPolicy ---------------------------------------------


def test_the_service_monitor_checks_the_configured_server_name(render: Any) -> None:
    objects = render(
        "defaults",
        "--set", "serviceMonitor.enabled=true", "--set", "settings.metricsPort=0",
        "--set", "tls.serverName=edge.example.org",
    )  # fmt: skip
    endpoint = service_monitor_endpoints(objects)["http"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["serverName"] == "edge.example.org"
    live = _probes(objects)["livenessProbe"]["exec"]["command"]
    assert "--server-name=edge.example.org" in live, "the same name as the probes check"


def test_the_grpc_port_declares_tls_when_it_speaks_tls(render: Any) -> None:
    """The grpc Service port declared appProtocol grpc (cleartext HTTP/2 gRPC to meshes and gateways) while it
    speaks TLS: https (HTTP over TLS; gRPC is HTTP/2 over TLS) then, grpc in cleartext."""

    def app_protocols(objects: list[dict[str, Any]]) -> dict[str, str]:
        return {p["name"]: p["appProtocol"] for p in one(objects, "Service", "ep-edgepath")["spec"]["ports"]}

    assert app_protocols(render("defaults"))["grpc"] == "https"
    assert app_protocols(render("defaults"))["http"] == "https"
    plain = app_protocols(render("single-replica-dev-values.yaml"))
    assert plain["grpc"] == "grpc" and plain["http"] == "http"


def test_a_grpc_route_to_the_tls_backend_gets_a_backend_tls_policy(render: Any, helm_bin: str, tmp_path: Path) -> None:
    """A GRPCRoute to the TLS-only gRPC port needs the gateway to originate TLS (a BackendTLSPolicy): rendered
    behind grpcRoute.backendTLSPolicy, trusting the release's CA (the generated one copied into a ConfigMap, or
    the one given with tls.existingSecret) and checking the name the certificate carries; NOTES say so otherwise."""
    route = ["--set", "grpcRoute.enabled=true", "--set", "grpcRoute.parentRefs[0].name=gw"]
    objects = render("defaults", *route, "--set", "grpcRoute.backendTLSPolicy.enabled=true")
    policy = one(objects, "BackendTLSPolicy")
    assert policy["apiVersion"] == "gateway.networking.k8s.io/v1"
    svc = one(objects, "Service", "ep-edgepath")
    (target,) = policy["spec"]["targetRefs"]
    assert target == {"group": "", "kind": "Service", "name": svc["metadata"]["name"], "sectionName": "grpc"}
    assert "grpc" in {p["name"] for p in svc["spec"]["ports"]}
    (backend,) = one(objects, "GRPCRoute")["spec"]["rules"][0]["backendRefs"]
    assert backend["name"] == svc["metadata"]["name"]
    assert policy["spec"]["validation"]["hostname"] == "ep-edgepath"
    (ca_ref,) = policy["spec"]["validation"]["caCertificateRefs"]
    ca_map = one(objects, "ConfigMap", ca_ref["name"])
    tls_ca = base64.b64decode(one(objects, "Secret", "-tls")["data"]["ca.crt"]).decode()
    assert ca_map["data"]["ca.crt"].strip() == tls_ca.strip(), "the CA that signed the served certificate"
    kubernetes_validate.validate(ca_map, KUBE_VERSION, strict=True)

    gitops = render("platform-gitops-values.yaml")
    assert one(gitops, "BackendTLSPolicy")["spec"]["validation"]["caCertificateRefs"][0]["name"] == "edgepath-ca-bundle"
    with pytest.raises(RenderError, match="caConfigMap"):
        render("platform-gitops-values.yaml", "--set", "grpcRoute.backendTLSPolicy.caConfigMap=")
    assert not by_kind(render("defaults", *route), "BackendTLSPolicy"), "off by default"
    notes = _notes(helm_bin, tmp_path / "route", *values_args("defaults"), *route)
    assert "BackendTLSPolicy" in notes and "grpcRoute.backendTLSPolicy.enabled" in notes
    with_policy = _notes(
        helm_bin,
        tmp_path / "policy",
        *values_args("defaults"),
        *route,
        "--set",
        "grpcRoute.backendTLSPolicy.enabled=true",
    )
    assert "BackendTLSPolicy" not in with_policy


# --- NOTES, Redis durability, documented commands ------------------------------------------------------------------


def test_notes_say_a_serve_only_release_runs_no_trainer(helm_bin: str, tmp_path: Path) -> None:
    """ci/gateway-replicas-values.yaml (trainer.enabled=false, inServiceReplicas=false: EDGEPATH_TRAINER=false) runs
    no trainer; NOTES said "inside the service process"."""
    gateways = _notes(helm_bin, tmp_path / "gw", *values_args("gateway-replicas-values.yaml"))
    (line,) = [ln for ln in gateways.splitlines() if ln.startswith("Trainer:")]
    assert "none in this release" in line and "inside the service process" not in line
    dev = _notes(helm_bin, tmp_path / "dev", *values_args("single-replica-dev-values.yaml"))
    assert "Trainer: inside the service process" in dev
    replicas = _notes(
        helm_bin, tmp_path / "ext", *values_args("external-redis-values.yaml"), "--set", "trainer.enabled=false"
    )
    assert "Trainer: in the service replicas (a Redis lock elects one)" in replicas


def test_notes_say_how_many_decisions_per_second_the_charts_redis_holds(helm_bin: str, tmp_path: Path) -> None:
    """README "Sizing the chart's Redis": ~1.6 KB per live decision beside a full decision log (100,000 × 1.36 KB).
    The default 512Mi limit (maxmemory 70 %: 375,809,638 bytes) holds (375,809,638 − 136,000,000) / 1,600 = 149,881
    live decisions, 41 per second at the default decisionTtlS of 3600 s: said at install, before the 503s say it."""

    def capacity(notes: str) -> str:
        lines = notes.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("Redis capacity:"))
        return " ".join(lines[start : start + 3])

    default = capacity(_notes(helm_bin, tmp_path / "defaults", *values_args("defaults")))
    assert "maxmemory 358 MiB holds ~149881 live decisions" in default
    assert "~41 decisions/s at settings.decisionTtlS 3600" in default and "503" in default
    sized = capacity(
        _notes(
            helm_bin,
            tmp_path / "sized",
            *values_args("defaults"),
            "--set",
            "redis.resources.limits.memory=2Gi",
            "--set",
            "settings.decisionTtlS=600",
            "--set",
            "prometheusRule.enabled=true",
        )
    )
    assert (
        "~1424 decisions/s at settings.decisionTtlS 600" in sized and "EdgePathStoreNearlyFull warns at 90 %" in sized
    )
    small = capacity(
        _notes(helm_bin, tmp_path / "small", *values_args("defaults"), "--set", "redis.resources.limits.memory=128Mi")
    )
    assert "leaves no room for live decisions" in small
    external = _notes(helm_bin, tmp_path / "ext", *values_args("external-redis-values.yaml"))
    assert "Redis capacity" not in external, "an existing Redis is sized by its operator"


def test_the_charts_redis_fsyncs_its_append_only_file_as_configured(render: Any) -> None:
    """README's "an acknowledged outcome survives a Redis restart (in the AOF)" needs appendfsync always; the
    StatefulSet passed only --appendonly yes (Redis's default everysec)."""

    def args(objects: list[dict[str, Any]]) -> list[str]:
        (c,) = one(objects, "StatefulSet", "-redis")["spec"]["template"]["spec"]["containers"]
        return list(c["args"])

    default = args(render("defaults"))
    assert default[default.index("--appendonly") + 1] == "yes"
    assert default[default.index("--appendfsync") + 1] == "always"
    everysec = args(render("defaults", "--set", "redis.appendfsync=everysec"))
    assert everysec[everysec.index("--appendfsync") + 1] == "everysec"
    with pytest.raises(RenderError, match="appendfsync"):
        render("defaults", "--set", "redis.appendfsync=sometimes")
    readme = (ROOT / "README.md").read_text()
    reliability = readme.split("## Reliability", 1)[1].split("\n## ", 1)[0]
    assert "redis.appendfsync" in reliability and "everysec" in reliability


def test_redis_url_with_an_existing_secret_is_described_as_rendered_nowhere(render: Any) -> None:
    """With secrets.existingSecret the store URL comes from that Secret's store-url key, and redis.url is rendered
    nowhere: its description said "kept in the Secret"."""
    objects = render("external-redis-values.yaml")
    url = yaml.safe_load((CHART / "ci" / "external-redis-values.yaml").read_text())["redis"]["url"]
    rendered = json.dumps(objects)
    assert url not in rendered and base64.b64encode(url.encode()).decode() not in rendered
    values = (CHART / "values.yaml").read_text()
    comment = values.split("\nredis:\n", 1)[1].split("  url:", 1)[0]
    assert "existingSecret" in comment and "store-url" in comment and "nowhere" in comment
    schema = json.loads((CHART / "values.schema.json").read_text())
    description = schema["properties"]["redis"]["properties"]["url"]["description"]
    assert "existingSecret" in description and "store-url" in description


def _docker_run_command(text: str) -> str:
    """The ``docker run ... edgepath:0.1.0`` command of ``text`` (comment marks, backticks and line breaks out)."""
    start = text.index("docker run --read-only")
    end = text.index("edgepath:0.1.0", start) + len("edgepath:0.1.0")
    command = re.sub(r"\\?\n#?", " ", text[start:end]).replace("`", "")
    return " ".join(command.split())


def test_the_dockerfiles_run_command_starts_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """The image sets EDGEPATH_HOST=0.0.0.0, where the service refuses to start without authentication: the
    Dockerfile's documented `docker run` (the README's) gives it a tokens file from a mounted directory."""
    import shlex

    dockerfile = (ROOT / "Dockerfile").read_text()
    command = _docker_run_command(dockerfile.split("# Run:", 1)[1])
    readme = (ROOT / "README.md").read_text()
    assert command == _docker_run_command(readme.split("## Deploy, load tests, benchmark", 1)[1])
    words = shlex.split(command)
    run_env = dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "-e")
    mounts = [words[i + 1].split(":")[1] for i, w in enumerate(words) if w == "-v"]
    image_env = dict(re.findall(r"(EDGEPATH_[A-Z_]+)=(\S+)", dockerfile.split(" AS runtime")[1]))
    assert image_env["EDGEPATH_HOST"] == "0.0.0.0"
    for name, value in run_env.items():
        if name.endswith("_FILE"):
            assert any(value.startswith(m.rstrip("/") + "/") for m in mounts), f"{value} is not in a mounted dir"
    for name in [n for n in os.environ if n.startswith("EDGEPATH_")]:
        monkeypatch.delenv(name)
    for name, value in image_env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match="without authentication"):
        Settings()  # the image alone, as the old documented command ran it
    for name, value in run_env.items():
        monkeypatch.setenv(name, value)
    assert Settings().host == "0.0.0.0" and Settings().auth_enabled


def test_the_load_test_recipe_names_a_name_the_generated_certificate_carries(render: Any) -> None:
    """The README's load test against a deployment trusts the chart's ca.crt and dials EDGEPATH_HOST (an external
    name), which the generated certificate does not carry: both transports check the certificate's name, so the
    recipe passes --tls-server-name with a name it carries (loadtest/locustfile.py's option)."""
    from cryptography import x509

    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Load-testing a deployment", 1)[1].split("\n### ", 1)[0]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    exports = dict(re.findall(r"(EDGEPATH_[A-Z_]+)=(\S+)", block))
    assert '--tls-server-name "$EDGEPATH_TLS_SERVER_NAME"' in block
    assert '"--tls-server-name"' in (ROOT / "loadtest" / "locustfile.py").read_text()
    crt = base64.b64decode(one(render("defaults"), "Secret", "-tls")["data"]["tls.crt"])
    san = x509.load_pem_x509_certificate(crt).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = san.get_values_for_type(x509.DNSName)
    assert exports["EDGEPATH_TLS_SERVER_NAME"] in names
    assert exports["EDGEPATH_HOST"] not in names, "the recipe's point: the external name is not in the certificate"


# --- A GitOps Secret's tokens.json, ports, Redis's memory bound, gRPC core's log lines, extraSettings ------------

#: An install whose keys all come from Secrets managed outside the chart (the GitOps path; README "Deploy").
_EXISTING_SECRETS = [
    "--set", "secrets.existingSecret=keys",
    "--set", "tls.existingSecret=tlss",
    "--set", "redis.auth.existingSecret=rp",
]  # fmt: skip
_TOKENS_PATH = "/etc/edgepath/auth/tokens.json"


def _settings_of_pod(data: dict[str, str], monkeypatch: pytest.MonkeyPatch, tokens_file: Path) -> Any:
    """:class:`Settings` as a decider built from the rendered ConfigMap ``data`` (its only EDGEPATH_* variables;
    the Secret holds hmac-key and no jwt-key), the mounted tokens file at ``tokens_file``."""
    for name in [n for n in os.environ if n.startswith("EDGEPATH_")]:
        monkeypatch.delenv(name)
    for name, value in data.items():
        monkeypatch.setenv(name, value.replace(_TOKENS_PATH, str(tokens_file)))
    return Settings()


def test_tokens_json_of_an_existing_secret_is_mounted_and_authenticates(
    render: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Secret (secrets.existingSecret) holding hmac-key and tokens.json, no jwt-key: with
    secrets.tokensFromExistingSecret the deciders and the trainer mount its tokens.json and read it
    (EDGEPATH_AUTH_TOKENS_FILE), so the service starts with token authentication. Before, the chart mounted the file
    only for secrets.tokensJson: these pods refused to start ("refusing to listen on '0.0.0.0' without
    authentication"), and beside a jwt-key the tokens were silently ignored."""
    from edgepath.security.auth import TokenFile

    tokens = tmp_path / "tokens.json"
    TokenFile(tokens).add("phone-1")
    objects = render("defaults", *_EXISTING_SECRETS, "--set", "secrets.tokensFromExistingSecret=true")
    data = one(objects, "ConfigMap", "-settings")["data"]
    assert data["EDGEPATH_AUTH_TOKENS_FILE"] == _TOKENS_PATH
    assert not [s for s in by_kind(objects, "Secret") if s["metadata"]["name"] == "keys"], "the chart renders none"
    for suffix in ("ep-edgepath", "-trainer"):
        spec = one(objects, "Deployment", suffix)["spec"]["template"]["spec"]
        (auth,) = [v for v in spec["volumes"] if v["name"] == "auth"]
        assert auth["secret"]["secretName"] == "keys"
        assert auth["secret"]["items"] == [{"key": "tokens.json", "path": "tokens.json"}]
        (app,) = [c for c in spec["containers"] if c["name"] in ("edgepath", "trainer")]
        (mount,) = [m for m in app["volumeMounts"] if m["name"] == "auth"]
        assert f"{mount['mountPath']}/tokens.json" == _TOKENS_PATH and mount["readOnly"] is True
    settings = _settings_of_pod(data, monkeypatch, tokens)
    assert settings.host == "0.0.0.0" and settings.auth_enabled and settings.auth_tokens_file == tokens

    # Without the switch (the default: a Secret of jwt-key alone keeps working) nothing reads tokens.json, and
    # such a Secret without jwt-key leaves the service without authentication: what the values describe.
    plain = render("defaults", *_EXISTING_SECRETS)
    data = one(plain, "ConfigMap", "-settings")["data"]
    assert "EDGEPATH_AUTH_TOKENS_FILE" not in data
    for suffix in ("ep-edgepath", "-trainer"):
        spec = one(plain, "Deployment", suffix)["spec"]["template"]["spec"]
        assert "auth" not in [v["name"] for v in spec["volumes"]]
    with pytest.raises(ValueError, match="without authentication"):
        _settings_of_pod(data, monkeypatch, tokens)


@pytest.mark.parametrize(
    ("keys", "switch", "refusal"),
    [
        (["hmac-key", "tokens.json"], "false", "holds tokens.json but secrets.tokensFromExistingSecret is false"),
        (["hmac-key", "jwt-key"], "true", "secrets.tokensFromExistingSecret is true but Secret keys"),
        (["hmac-key", "tokens.json"], "true", None),
        (["hmac-key", "jwt-key"], "false", None),
    ],
)
def test_helm_upgrade_checks_the_existing_secret_against_the_tokens_switch(
    helm_bin: str, tmp_path: Path, keys: list[str], switch: str, refusal: str | None
) -> None:
    """Where the chart can read the existing Secret (helm install/upgrade: lookup), a switch that disagrees with its
    keys is refused before any pod is made: its tokens would be ignored, or the pods could not mount them."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "keys", "namespace": "edge"},
        "data": {k: base64.b64encode(b"x").decode() for k in keys},
    }
    chart = _chart_against(tmp_path, [secret])
    args = ["--namespace", "edge", *_EXISTING_SECRETS, "--set", f"secrets.tokensFromExistingSecret={switch}"]
    proc = subprocess.run(
        [helm_bin, "template", "ep", str(chart), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if refusal is None:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode != 0 and refusal in proc.stderr, proc.stderr


def _container_ports(objects: list[dict[str, Any]]) -> list[int]:
    (app,) = [
        c
        for c in one(objects, "Deployment", "ep-edgepath")["spec"]["template"]["spec"]["containers"]
        if c["name"] == "edgepath"
    ]
    return [p["containerPort"] for p in app["ports"]]


def test_ports_of_their_own_render(render: Any) -> None:
    """The collisions test_invalid_values_are_refused_with_a_reason refuses aside, distinct ports render: metrics
    on the API port (0) and each listener moved."""
    assert _container_ports(render("defaults", "--set", "settings.metricsPort=0")) == [50051, 8080]
    moved = render("defaults", "--set", "settings.metricsPort=8081", "--set", "settings.httpPort=9090")
    assert _container_ports(moved) == [50051, 9090, 8081]


def _redis_args(objects: list[dict[str, Any]]) -> list[str]:
    (c,) = one(objects, "StatefulSet", "-redis")["spec"]["template"]["spec"]["containers"]
    return list(c["args"])


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@pytest.mark.parametrize(
    ("args", "limit", "expected"),
    [
        ([], 512 * 2**20, int(512 * 2**20 * 0.7)),
        (["--set", "redis.resources.limits.memory=2Gi"], 2 * 2**30, int(2 * 2**30 * 0.7)),
        (["--set", "redis.resources.limits.memory=1.5G"], 1_500_000_000, 1_050_000_000),
        (["--set", "redis.resources.limits.memory=2Gi", "--set", "redis.maxmemory=1400Mi"], 2 * 2**30, 1400 * 2**20),
        (["--set", "redis.maxmemoryPercent=50"], 512 * 2**20, 256 * 2**20),
        # bytes as a number (a values file's YAML number, a float to the templates)
        (["--set-json", "redis.resources.limits.memory=536870912"], 512 * 2**20, int(512 * 2**20 * 0.7)),
    ],
)
def test_the_charts_redis_refuses_writes_below_its_memory_limit(
    render: Any, args: list[str], limit: int, expected: int
) -> None:
    """Redis had a 512Mi limit and no --maxmemory: the README's load profile (~720k live decisions of ~1.4 KB)
    outgrew it and the kernel killed Redis. It now stops taking writes (noeviction) at redis.maxmemory, by default 70 %
    of its container limit, which the chart refuses to reach."""
    redis_args = _redis_args(render("defaults", *args))
    maxmemory = int(_arg(redis_args, "--maxmemory"))
    assert maxmemory == expected and maxmemory < limit
    assert _arg(redis_args, "--maxmemory-policy") == "noeviction"


def test_a_redis_without_a_memory_limit_gets_no_bound(render: Any) -> None:
    """No container limit, no redis.maxmemory: nothing to stay below (as before)."""
    args = _redis_args(render("defaults", "--set", "redis.resources.limits=null"))
    assert "--maxmemory" not in args and "--maxmemory-policy" not in args


@pytest.mark.redis
def test_a_full_redis_fails_the_call_rather_than_dropping_decisions(render: Any, tmp_path: Path) -> None:
    """What the chart's maxmemory policy (noeviction) means for the service, on a real redis-server with the rendered
    policy at its bound: a decision or an outcome whose write Redis refuses is answered 503 with a retry hint
    (nothing is handed out that could not be joined, no outcome acknowledged that was not stored; the agent reports
    it again) and counted, and so is an MEC 015 session write (a Lua script); readiness stays (reads,
    expiry and PING go on), and the calls succeed again once memory is freed. Before, all were answered 500 as
    faults of the service."""
    import httpx
    import redis

    helpers = _redis_helpers()
    policy = _arg(_redis_args(render("defaults")), "--maxmemory-policy")
    server = helpers.RedisServer(tmp_path).start()
    sys.path.insert(0, str(ROOT / "loadtest"))
    from workload import outcome_body, recommend_body, situations

    try:
        client = redis.Redis(port=server.port)
        client.config_set("maxmemory-policy", policy)
        with served(tmp_path, "--store", server.url) as ports:
            base = f"http://127.0.0.1:{ports['http_port']}"
            situation = situations()[0]
            context = recommend_body(situation, "phone-1", 20)
            first = httpx.post(f"{base}/v1/recommendations", json=context, timeout=10)
            assert first.status_code == 200, first.text
            report = outcome_body(situation, "phone-1", first.json())
            client.config_set("maxmemory", int(client.info("memory")["used_memory"]) - 1024)
            full = httpx.post(f"{base}/v1/recommendations", json=context, timeout=10)
            assert full.status_code == 503 and full.headers["retry-after"] == "1", full.text
            assert full.json()["detail"].startswith("state store full"), full.text
            session = {  # an MEC 015 session write: a script, whose HSET is refused (was 500)
                "appInsId": "mec-app-1",
                "requestType": 0,
                "flowFilter": [{"dstIp": "198.51.100.7", "dstPort": [443], "protocol": 6}],
                "qosD": {},
                "mtsMode": 1,
                "trafficDirection": "00",
                "deviceId": "phone-1",
            }
            mts = httpx.post(f"{base}/mts/v1/mts_sessions", json=session, timeout=10)
            assert mts.status_code == 503 and mts.headers["retry-after"] == "1", mts.text
            assert mts.json()["detail"].startswith("state store full"), mts.text
            outcome = httpx.post(f"{base}/v1/outcomes", json=report, timeout=10)
            assert outcome.status_code == 503, outcome.text
            assert httpx.get(f"{base}/readyz", timeout=10).status_code == 200
            metrics = httpx.get(f"{base}/metrics", timeout=10).text
            assert 'edgepath_http_requests_total{handler="/v1/recommendations",method="POST",status="503"} 1.0' in (
                metrics
            )
            assert 'edgepath_outcomes_total{result="unavailable"} 1.0' in metrics
            client.config_set("maxmemory", 0)
            again = httpx.post(f"{base}/v1/outcomes", json=report, timeout=10)
            assert again.status_code == 200, again.text
    finally:
        server.stop()


def test_grpc_core_logs_errors_only_in_the_image_and_the_pods(render: Any) -> None:
    """GRPC_VERBOSITY=ERROR in the Dockerfile's runtime ENV and both Deployments' env; extraEnv may override it
    (rendered once, with its value)."""
    text = (ROOT / "Dockerfile").read_text()
    runtime = text[text.index(" AS runtime") :]
    assert re.search(r"^\s+GRPC_VERBOSITY=ERROR\b", runtime, re.MULTILINE), "ENV GRPC_VERBOSITY=ERROR (runtime)"
    for objects, expected in (
        (render("defaults"), "ERROR"),
        (render("defaults", "--set", "extraEnv[0].name=GRPC_VERBOSITY", "--set", "extraEnv[0].value=DEBUG"), "DEBUG"),
    ):
        for suffix in ("ep-edgepath", "-trainer"):
            (app,) = [
                c
                for c in one(objects, "Deployment", suffix)["spec"]["template"]["spec"]["containers"]
                if c["name"] in ("edgepath", "trainer")
            ]
            values = [e.get("value") for e in app["env"] if e["name"] == "GRPC_VERBOSITY"]
            assert values == [expected], (suffix, values)


def _plaintext_to_tls(port: int) -> None:
    """A cleartext HTTP/2 client on the TLS gRPC port: the server fails the handshake and closes (read to EOF)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(64))
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass


def test_a_plaintext_client_on_the_tls_port_leaves_no_grpc_core_line(render: Any, tmp_path: Path) -> None:
    """A served process under the image's GRPC_VERBOSITY: a plaintext connection to the TLS gRPC port writes no
    plain-text "Handshake failed" line of gRPC core into the service's (JSON) log. At INFO, the level that printed
    it, the same connection does (bounded poll for the line; the ERROR run's log is read after the process ended)."""
    (verbosity,) = re.findall(r"^\s+GRPC_VERBOSITY=(\w+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    objects = render("defaults")
    env = {**_tls_service_env(objects, tmp_path), "EDGEPATH_LOG_FORMAT": "json"}
    sys.path.insert(0, str(ROOT / "tests" / "service"))
    from state.redis_helpers import wait_until

    runs = {}
    for level in ("INFO", verbosity):
        run_dir = tmp_path / level
        run_dir.mkdir()
        with served(run_dir, env={**env, "GRPC_VERBOSITY": level}) as ports:
            _plaintext_to_tls(ports["grpc_port"])
            if level == "INFO":
                wait_until(
                    lambda d=run_dir: "Handshake failed" in (d / "service.log").read_text(),
                    30,
                    what="gRPC core's handshake line at INFO",
                )
        runs[level] = (run_dir / "service.log").read_text()
    assert "Handshake failed" not in runs[verbosity], runs[verbosity][-2000:]
    for line in runs[verbosity].splitlines():
        json.loads(line)  # every line the service's JSON format


def _raw_configmap(helm_bin: str, *args: str) -> str:
    proc = _template(helm_bin, *DEFAULTS_ARGS, "--show-only", "templates/configmap.yaml", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_extra_settings_override_the_charts_own_keys(helm_bin: str) -> None:
    """extraSettings naming a key the chart sets (EDGEPATH_HOST=:: for an IPv6 cluster) rendered the key twice (YAML
    parsers keep one, silently, whichever they like): it is rendered once, with the extraSettings value."""
    text = _raw_configmap(helm_bin, "--set-string", "extraSettings.EDGEPATH_HOST=::")
    assert re.findall(r"^\s+EDGEPATH_HOST:.*$", text, re.MULTILINE) == ['  EDGEPATH_HOST: "::"']
    names = re.findall(r"^  (EDGEPATH_\w+):", text, re.MULTILINE)
    assert len(names) == len(set(names)), names
    # a key of its own is added; the chart's keys stay
    text = _raw_configmap(helm_bin, "--set-string", "extraSettings.EDGEPATH_OUTBOX_MAX_OUTCOMES=10000")
    data = yaml.safe_load(text)["data"]
    assert data["EDGEPATH_OUTBOX_MAX_OUTCOMES"] == "10000" and data["EDGEPATH_HOST"] == "0.0.0.0"


def _other_ca(tmp_path: Path) -> Path:
    """A self-signed CA certificate that signed nothing of the service's (PEM file)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Another CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "other-ca.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def test_the_image_healthcheck_is_healthy_against_a_real_mtls_service(render: Any, tmp_path: Path) -> None:
    """The Dockerfile's HEALTHCHECK in a container run as README "Security" sets the service up: gRPC mTLS, a server
    certificate a CA signed (the chart's generated one), the container's environment only. It failed in every mode:
    gRPC (the default) held no client certificate (UNAVAILABLE) and HTTPS trusted the server's leaf as if it were
    self-signed (CERTIFICATE_VERIFY_FAILED). Now it pins the server's own certificate and presents it, with its key,
    as its client certificate; a wrong trust anchor still fails, and so does gRPC without the client certificate."""
    objects = render("defaults", "--set", "tls.clientAuth=true")
    env = {**_tls_service_env(objects, tmp_path), "EDGEPATH_TLS_CLIENT_CA_FILE": str(tmp_path / "ca.crt")}
    healthcheck = _dockerfile_healthcheck()
    with served(tmp_path, env=env) as ports:
        container = {
            **os.environ,
            **env,
            "EDGEPATH_GRPC_PORT": str(ports["grpc_port"]),
            "EDGEPATH_HTTP_PORT": str(ports["http_port"]),
        }
        for mode in ("grpc", "http", "rest", "all"):
            check = _run_check(healthcheck, ports, tmp_path, {**container, "EDGEPATH_HEALTHCHECK": mode})
            assert check.returncode == 0, (mode, check.stderr)
        default = _run_check(healthcheck, ports, tmp_path, container)  # no EDGEPATH_HEALTHCHECK: gRPC
        assert default.returncode == 0, default.stderr
        wrong = {**container, "EDGEPATH_HEALTHCHECK": "all", "EDGEPATH_HEALTHCHECK_CA_FILE": str(_other_ca(tmp_path))}
        refused = _run_check(healthcheck, ports, tmp_path, wrong)
        assert refused.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr, refused.stderr
        anonymous = {k: v for k, v in container.items() if k != "EDGEPATH_TLS_CLIENT_CA_FILE"}
        no_client_cert = _run_check(healthcheck, ports, tmp_path, anonymous)
        assert no_client_cert.returncode == 1 and "UNAVAILABLE" in no_client_cert.stderr, no_client_cert.stderr
