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
from edgepath.grpc.server import SERVICE_NAME
from edgepath.settings import Settings, env_names
from grpc_health.v1 import health_pb2, health_pb2_grpc

# Building helm on first use takes minutes: allow it within the first test's timeout.
pytestmark = pytest.mark.timeout(1800)

#: Kinds from CRDs (no schema in kubernetes-validate): checked structurally below instead.
CRD_KINDS = {"ServiceMonitor", "GRPCRoute", "PrometheusRule"}


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


def test_service_monitor_scrapes_the_metrics_endpoint(render: Any) -> None:
    objects = render("monitoring-networkpolicy-values.yaml")
    sm = one(objects, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    (endpoint,) = sm["spec"]["endpoints"]
    # metrics on their own plain-HTTP port by default (settings.metricsPort; issue 22)
    assert endpoint["path"] == "/metrics" and endpoint["port"] == "metrics" and endpoint["scheme"] == "http"
    svc = one(objects, "Service", "ep-edgepath")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["spec"]["selector"].items()
    assert not by_kind(render("defaults"), "ServiceMonitor"), "ServiceMonitor must be optional (off by default)"


def test_default_ports_match_the_service_settings(render: Any) -> None:
    objects = render("defaults")
    deploy = one(objects, "Deployment", "ep-edgepath")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    config = one(objects, "ConfigMap", "-settings")["data"]
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
    objects = render("external-redis-values.yaml")
    deploy = one(objects, "Deployment", "ep-edgepath")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    config = one(objects, "ConfigMap", "-settings")["data"]
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
    if "grpc" in live:
        assert live["grpc"]["service"] == SERVICE_NAME
    else:  # TLS: the image's health check asks the same health service over TLS (or /healthz with mTLS)
        cmd = live["exec"]["command"]
        assert cmd[:2] == ["/opt/edgepath/venv/bin/python", "/opt/edgepath/healthcheck.py"]
        assert any(a.startswith("--mode=") for a in cmd)


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
    assert {np["metadata"]["name"] for np in default_nps} == {"ep-edgepath", "ep-edgepath-redis"}, (
        "NetworkPolicies must be on by default (any pod could otherwise write the outcome stream)"
    )


def test_helm_test_hook_calls_the_service(render: Any) -> None:
    pod = one(render("defaults"), "Pod", "-test")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    cmd = pod["spec"]["containers"][0]["command"]
    assert "--host=ep-edgepath" in cmd and "--recommend" in cmd and "--mode=all" in cmd


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
    ],
)
def test_invalid_values_are_refused_with_a_reason(render: Any, args: list[str], message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render("defaults", *args)


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


@pytest.mark.parametrize("client_auth", [False, True], ids=["tls", "mtls"])
def test_tls_liveness_probe_and_helm_test_pass_against_a_real_tls_service(
    render: Any, tmp_path: Path, client_auth: bool
) -> None:
    """With the chart's generated certificate, a prod-profile service (TLS + JWT auth, or gRPC mTLS with
    ``tls.clientAuth``) passes the rendered liveness exec probe and the ``helm test`` command (run from the
    repository's docker/healthcheck.py)."""
    objects = render("defaults", "--set", "tls.clientAuth=true") if client_auth else render("defaults")
    tls = {k: base64.b64decode(v) for k, v in one(objects, "Secret", "-tls")["data"].items()}
    for name, data in tls.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "tls.key").chmod(0o600)
    env = {
        "EDGEPATH_PROFILE": "prod",
        "EDGEPATH_TLS_CERT_FILE": str(tmp_path / "tls.crt"),
        "EDGEPATH_TLS_KEY_FILE": str(tmp_path / "tls.key"),
    }
    if client_auth:  # the gRPC port requires a client certificate signed by ca.crt (the ConfigMap's setting)
        assert one(objects, "ConfigMap", "-settings")["data"]["EDGEPATH_TLS_CLIENT_CA_FILE"].endswith("/ca.crt")
        env["EDGEPATH_TLS_CLIENT_CA_FILE"] = str(tmp_path / "ca.crt")
    else:
        secret = one(objects, "Secret", "-secrets")["data"]
        env["EDGEPATH_AUTH_JWT_KEY"] = base64.b64decode(secret["jwt-key"]).decode()
    image_paths = {
        "/opt/edgepath/venv/bin/python": sys.executable,
        "/opt/edgepath/healthcheck.py": str(ROOT / "docker" / "healthcheck.py"),
        "/etc/edgepath/tls/ca.crt": str(tmp_path / "ca.crt"),
    }

    def local(cmd: list[str], ports: dict[str, int]) -> list[str]:
        out = []
        for arg in cmd:
            for image_path, here in image_paths.items():
                arg = arg.replace(image_path, here)
            arg = re.sub(r"^--host=.*", "--host=127.0.0.1", arg)
            arg = re.sub(r"^--grpc-port=.*", f"--grpc-port={ports['grpc_port']}", arg)
            arg = re.sub(r"^--http-port=.*", f"--http-port={ports['http_port']}", arg)
            out.append(arg)
        return out

    live = _probes(objects)["livenessProbe"]["exec"]["command"]
    helm_test = one(objects, "Pod", "-test")["spec"]["containers"][0]["command"]
    with served(tmp_path, env=env) as ports:
        # the pod's EDGEPATH_*_PORT come from the ConfigMap
        port_env = {
            **os.environ,
            "EDGEPATH_GRPC_PORT": str(ports["grpc_port"]),
            "EDGEPATH_HTTP_PORT": str(ports["http_port"]),
        }
        probe = subprocess.run(local(live, ports), env=port_env, capture_output=True, text=True, timeout=60)
        assert probe.returncode == 0, probe.stderr
        check = subprocess.run(local(helm_test, ports), capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stderr
        if client_auth:  # why the test pod leaves gRPC out under mTLS: without a client certificate it fails
            with_grpc = [re.sub(r"^--mode=.*", "--mode=all", a) for a in local(helm_test, ports)]
            grpc_check = subprocess.run(with_grpc, capture_output=True, text=True, timeout=60)
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


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["--set", "secrets.jwtKey=j", "--set", "tls.existingSecret=t", "--set", "redis.auth.password=p"], "HMAC"),
        (["--set", "secrets.hmacKey=h", "--set", "tls.existingSecret=t", "--set", "redis.auth.password=p"], "JWT"),
        (["--set", "secrets.hmacKey=h", "--set", "secrets.jwtKey=j", "--set", "tls.existingSecret=t"], "Redis"),
        (["--set", "secrets.hmacKey=h", "--set", "secrets.jwtKey=j", "--set", "redis.auth.password=p"], "TLS"),
    ],
)
def test_generated_keys_are_refused_without_a_cluster(helm_bin: str, args: list[str], what: str) -> None:
    """Under helm template (as Argo CD renders) a generated key would change on every sync: refused, named."""
    proc = subprocess.run(
        [helm_bin, "template", "ep", str(CHART), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode != 0
    assert "refusing to generate" in proc.stderr and what in proc.stderr and "existingSecret" in proc.stderr
    given = ["--set", "secrets.hmacKey=h", "--set", "secrets.jwtKey=j", "--set", "tls.existingSecret=t"]
    ok = subprocess.run(
        [helm_bin, "template", "ep", str(CHART), *given, "--set", "redis.auth.password=p"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    first = ok.stdout
    again = subprocess.run(
        [helm_bin, "template", "ep", str(CHART), *given, "--set", "redis.auth.password=p"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
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
        proc = subprocess.run(
            [helm_bin, "template", "ep", str(CHART), *args], capture_output=True, text=True, timeout=120, check=False
        )
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
    assert {"name": "OTEL_SERVICE_NAME", "value": "edgepath"} in main["env"]
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
