"""Monitoring shipped by the chart: the PrometheusRule's alerts and the Grafana dashboard.

The rule groups are rendered from the chart (release ``ep`` in namespace ``edge``), checked with
``promtool check rules`` and unit-tested with ``promtool test rules`` (tests/deploy/promtool/). Every
metric named by the rules and the dashboard is checked against the ``GET /metrics`` of a real service
after one decision and one outcome report.

promtool comes from Debian's ``prometheus`` package. That package is a full Prometheus server (about
96 MB installed, a daemon and a web UI), so scripts/setup.sh (as root) extracts only ``promtool`` from
it into ``.tools/bin`` (``apt-get download`` + ``dpkg-deb -x``, no daemon, no install). The fixture uses
``promtool`` on PATH or ``.tools/bin/promtool``; without either the promtool tests skip with the reason
(tests never download anything).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from deploy_helpers import CHART, ROOT, by_kind, one
from prometheus_client.parser import text_string_to_metric_families
from service_harness import running_service

PROMTOOL_TESTS = Path(__file__).resolve().parent / "promtool" / "edgepath_alerts_test.yaml"
#: The same, of the trainer alerts where the replicas train (trainer.enabled=false: `serve --trainer`).
PROMTOOL_REPLICAS_TRAIN_TESTS = PROMTOOL_TESTS.with_name("edgepath_alerts_replicas_train_test.yaml")
MONITORING = "monitoring-networkpolicy-values.yaml"
#: PromQL words that look like identifiers followed by "(" or "{" but are not metrics.
_METRIC_TOKEN = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")


@pytest.fixture(scope="session")
def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    local = ROOT / ".tools" / "bin" / "promtool"
    if local.exists():
        return str(local)
    pytest.skip("promtool not found on PATH or in .tools/bin (scripts/setup.sh extracts it as root)")


CONTEXT = {
    "device_id": "dev-metrics",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "sinr_db": 8.0, "cqi": 9},
    ],
}


def _rule_groups(render: Any, *extra: str) -> dict[str, Any]:
    rule = one(render(MONITORING, *extra), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    return dict(rule["spec"])


def _dashboard(render: Any) -> dict[str, Any]:
    cm = one(render(MONITORING), "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1", "Grafana's sidecar finds dashboards by this label"
    return dict(json.loads(cm["data"]["edgepath.json"]))


def _rule_exprs(groups: dict[str, Any]) -> list[str]:
    return [r["expr"] for g in groups["groups"] for r in g["rules"]]


def _dashboard_exprs(dash: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_rules_and_dashboard_are_off_by_default(render: Any) -> None:
    objects = render("defaults")
    assert not by_kind(objects, "PrometheusRule")
    assert not [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]


def test_alerts_cover_what_an_operator_watches(render: Any) -> None:
    alerts = {r["alert"] for g in _rule_groups(render)["groups"] for r in g["rules"]}
    assert {"EdgePathTrainerDown", "EdgePathTrainerBacklog", "EdgePathDecidersDown"} <= alerts
    # the trainer's alerts where something in the release exports the trainer gauges: the trainer Deployment, else
    # the replicas with the trainer role (serve --trainer on the shared store); not in a release that only serves, nor
    # with the in-process store (one replica trains without a lock and without an outcome stream)
    trainer_alerts = {"EdgePathTrainerDown", "EdgePathTrainerBacklog"}
    replicas_train = {a["alert"] for a in _alerts(render(MONITORING, "--set", "trainer.enabled=false"))}
    assert trainer_alerts <= replicas_train
    for nobody_with_a_lock in (
        ("--set", "trainer.enabled=false", "--set", "trainer.inServiceReplicas=false"),
        ("--set", "trainer.enabled=false,redis.enabled=false,autoscaling.enabled=false,replicaCount=1"),
    ):
        without = {a["alert"] for a in _alerts(render(MONITORING, *nobody_with_a_lock))}
        assert not trainer_alerts & without, nobody_with_a_lock
        assert "EdgePathDecidersDown" in without
    assert {"EdgePathStoreDegraded", "EdgePathSnapshotsRejected", "EdgePathOutcomesDropped", "EdgePathModelStale"} <= (
        alerts
    )
    assert {"EdgePathServerErrors", "EdgePathRateLimited", "EdgePathRewardDrop", "EdgePathStoreNearlyFull"} <= alerts
    for expr in _rule_exprs(_rule_groups(render)):
        for sel in re.findall(r"\{([^}]*)\}", expr):
            assert 'namespace="edge"' in sel and 'job="ep-edgepath"' in sel, f"unscoped selector in {expr}"


def test_promtool_checks_and_unit_tests_the_rendered_rules(render: Any, promtool: str, tmp_path: Path) -> None:
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump(_rule_groups(render), sort_keys=False))
    shutil.copy2(PROMTOOL_TESTS, tmp_path / PROMTOOL_TESTS.name)
    check = subprocess.run(
        [promtool, "check", "rules", "alerts.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout + check.stderr
    unit = subprocess.run(
        [promtool, "test", "rules", PROMTOOL_TESTS.name], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr


def test_promtool_unit_tests_the_trainer_alerts_where_the_replicas_train(
    render: Any, promtool: str, tmp_path: Path
) -> None:
    """Without the trainer Deployment the `serve --trainer` replicas export the trainer gauges (the holder's lock 1,
    the others' 0): the lock moving between them is no outage, none holding it is, and the runbook names them."""
    groups = _rule_groups(render, "--set", "trainer.enabled=false")
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump(groups, sort_keys=False))
    shutil.copy2(PROMTOOL_REPLICAS_TRAIN_TESTS, tmp_path / PROMTOOL_REPLICAS_TRAIN_TESTS.name)
    unit = subprocess.run(
        [promtool, "test", "rules", PROMTOOL_REPLICAS_TRAIN_TESTS.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr


def test_dashboard_is_a_grafana_dashboard_with_queries(render: Any) -> None:
    dash = _dashboard(render)
    assert dash["uid"] and dash["title"] == "EdgePath"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) >= 6
    cells: dict[tuple[int, int], str] = {}
    for panel in dash["panels"]:
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]
        for t in panel["targets"]:  # every query of the release's pods only
            for sel in re.findall(r"\{([^}]*)\}", t["expr"].replace("{{pod}}", "")):
                assert 'namespace="$namespace"' in sel and 'job="$job"' in sel, (panel["title"], t["expr"])
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]
    # what on-call looks for: the model each pod serves and its age, the trainer's lock, backlog and last publication
    by_metric = {
        name: [p["title"] for p in dash["panels"] if any(name in t["expr"] for t in p["targets"])]
        for name in (
            "edgepath_model_info",
            "edgepath_model_published_timestamp_seconds",
            "edgepath_trainer_lock_held",
            "edgepath_trainer_backlog_outcomes",
            "edgepath_trainer_last_publish_timestamp_seconds",
        )
    }
    assert all(by_metric.values()), by_metric
    (model_info,) = [p for p in dash["panels"] if p["title"] in by_metric["edgepath_model_info"]]
    assert model_info["type"] == "table" and "version" in model_info["targets"][0]["expr"]
    assert "source" in model_info["targets"][0]["expr"] and "pod" in model_info["targets"][0]["expr"]


def _exported_series_names(text: str) -> set[str]:
    """Series names a scrape can return: declared families with their type's suffixes."""
    suffixes = {"counter": ["_total", "_created"], "histogram": ["_bucket", "_sum", "_count", "_created"]}
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + s for s in suffixes.get(family.type, []))
        names.update(s.name for s in family.samples)
    return names


def _metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (a selector's name, or any edgepath_* word)."""
    return set(_METRIC_TOKEN.findall(expr)) | set(re.findall(r"\bedgepath_[a-z0-9_]+", expr))


def test_every_metric_in_rules_and_dashboard_is_exported_by_a_running_service(render: Any) -> None:
    with running_service() as svc, httpx.Client(base_url=f"http://127.0.0.1:{svc.http_port}", timeout=10) as http:
        rec = http.post("/v1/recommendations", json=CONTEXT)
        assert rec.status_code == 200, rec.text
        ack = http.post(
            "/v1/outcomes",
            json={"device_id": "dev-metrics", "decision_id": rec.json()["decision_id"], "throughput_bps": 4e7},
        )
        assert ack.status_code == 200 and ack.json()["accepted"], ack.text
        scrape = http.get("/metrics")
        assert scrape.status_code == 200
    exported = _exported_series_names(scrape.text)
    assert {"edgepath_decisions_total", "edgepath_outcomes_total"} <= exported
    # `edgepath train`'s own (scraped under the same job) and Prometheus's per-target up
    from edgepath.metrics import Metrics
    from prometheus_client import generate_latest

    exported |= _exported_series_names(generate_latest(Metrics.create().trainer_registry()).decode())
    # a replica with the trainer role (serve --trainer) exports the trainer gauges from its own registry too
    replica_trains = Metrics.create()
    replica_trains.export_trainer_gauges()
    exported |= _exported_series_names(generate_latest(replica_trains.registry).decode())
    exported.add("up")
    used: dict[str, set[str]] = {}
    for source, exprs in (
        ("PrometheusRule", _rule_exprs(_rule_groups(render))),
        ("dashboard", _dashboard_exprs(_dashboard(render))),
    ):
        for expr in exprs:
            for name in _metric_names(expr):
                used.setdefault(name, set()).add(source)
    assert used, "no metric found in the rules and the dashboard"
    for panel in _dashboard(render)["panels"]:  # each panel names at least one metric (all checked below)
        assert [n for t in panel["targets"] for n in _metric_names(t["expr"])], panel["title"]
    assert {"edgepath_model_info", "edgepath_trainer_lock_held", "edgepath_trainer_backlog_outcomes"} <= set(used)
    assert "edgepath_trainer_last_publish_timestamp_seconds" in used
    missing = {name: sorted(src) for name, src in used.items() if name not in exported}
    assert not missing, f"metrics used but not exported by the service: {missing}"


def _values_adapter_rule() -> list[dict[str, Any]]:
    """The prometheus-adapter rule values.yaml documents beside autoscaling.extraMetrics (a commented YAML list)."""
    block = (CHART / "values.yaml").read_text().split("\nautoscaling:\n", 1)[1].split("\n  extraMetrics:", 1)[0]
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  #   - seriesQuery:"))
    rule = []
    for line in lines[start:]:
        if not line.startswith("  #   "):
            break
        rule.append(line[len("  #   ") :])
    return list(yaml.safe_load("\n".join(rule)))


def _readme_adapter_rule() -> list[dict[str, Any]]:
    """The rule README "Operating it" gives (the YAML block of its "Autoscaling on decisions/s" item)."""
    item = (ROOT / "README.md").read_text().split("**Autoscaling on decisions/s**", 1)[1]
    block = item.split("```yaml\n", 1)[1].split("```", 1)[0]
    return list(yaml.safe_load("\n".join(line.removeprefix("  ") for line in block.splitlines())))


def test_the_hpa_metric_example_is_what_the_documented_adapter_rule_serves(
    render: Any, promtool: str, tmp_path: Path
) -> None:
    """The HPA examples (values.yaml's comment, ci/platform-gitops-values.yaml) name ``edgepath_decisions_per_second``,
    which the service does not export: the prometheus-adapter rule that derives it from ``edgepath_decisions_total``
    is documented in values.yaml and the README (the same rule), names that metric, and its query, expanded as the
    adapter expands it for pods, is decisions per second per pod over every policy and access type (promtool)."""
    (rule,) = _values_adapter_rule()
    assert [rule] == _readme_adapter_rule(), "values.yaml and README document the same rule"
    served = rule["name"]["as"]
    assert served == "edgepath_decisions_per_second"
    gitops = one(render("platform-gitops-values.yaml"), "HorizontalPodAutoscaler")["spec"]["metrics"]
    assert [m["pods"]["metric"]["name"] for m in gitops if m["type"] == "Pods"] == [served]
    example = re.findall(r"metric: \{name: ([a-z_]+)\}", (CHART / "values.yaml").read_text())
    assert example == [served]
    # the series it reads: a counter the service exports, with the pod and namespace labels the adapter maps
    source = "edgepath_decisions_total"
    assert re.fullmatch(rule["name"]["matches"], source) and rule["seriesQuery"].startswith(source + "{")
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    from edgepath.metrics import Metrics
    from prometheus_client import generate_latest

    assert f"# TYPE {source} counter" in generate_latest(Metrics.create().registry).decode()
    query = (
        rule["metricsQuery"]
        .replace("<<.Series>>", source)
        .replace("<<.LabelMatchers>>", 'namespace="edge",pod=~"p1|p2"')
        .replace("<<.GroupBy>>", "pod")
    )
    assert "<<" not in query, query
    (tmp_path / "adapter.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "adapter", "rules": [{"record": served, "expr": query}]}]})
    )
    series = f'{source}{{namespace="edge",job="ep-edgepath",pod="%s",policy="ridge_squarecb",access_type="%s"}}'
    (tmp_path / "adapter_test.yaml").write_text(
        yaml.safe_dump(
            {
                "rule_files": ["adapter.yaml"],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": [
                            {"series": series % ("p1", "WIFI"), "values": "0+30x10"},  # 0.5/s
                            {"series": series % ("p1", "LTE"), "values": "0+30x10"},  # 0.5/s
                            {"series": series % ("p2", "WIFI"), "values": "0+120x10"},  # 2/s
                            {"series": series.replace('"edge"', '"other"', 1) % ("p1", "WIFI"), "values": "0+600x10"},
                        ],
                        "promql_expr_test": [
                            {
                                "expr": served,
                                "eval_time": "10m",
                                "exp_samples": [
                                    {"labels": f'{served}{{pod="p1"}}', "value": 1},
                                    {"labels": f'{served}{{pod="p2"}}', "value": 2},
                                ],
                            }
                        ],
                    }
                ],
            },
            sort_keys=False,
        )
    )
    unit = subprocess.run(
        [promtool, "test", "rules", "adapter_test.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr


def _alerts(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for g in one(objects, "PrometheusRule")["spec"]["groups"] for r in g["rules"] if "alert" in r]


def test_every_alert_has_a_runbook_in_the_readme_and_a_runbook_url_when_its_base_is_set(render: Any) -> None:
    readme = (ROOT / "README.md").read_text()
    runbooks = readme.split("\n### Runbooks\n", 1)[1].split("\n### ", 1)[0]
    entries = set(re.findall(r"^#### (\S+)$", runbooks, flags=re.MULTILINE))
    default = _alerts(render(MONITORING))
    assert {a["alert"] for a in default} <= entries, "an alert without its README runbook"
    assert not [a["alert"] for a in default if "runbook_url" in a["annotations"]], "no base URL: no runbook_url"
    base = "https://git.example.internal/edgepath/blob/main/README.md"
    linked = _alerts(render(MONITORING, "--set", f"prometheusRule.runbookBaseUrl={base}"))
    assert {a["alert"]: a["annotations"]["runbook_url"] for a in linked} == {
        a["alert"]: f"{base}#{a['alert'].lower()}" for a in default
    }
    # the annotations are added, nothing else changes
    assert [
        {**a, "annotations": {k: v for k, v in a["annotations"].items() if k != "runbook_url"}} for a in linked
    ] == (default)


def test_store_degraded_says_where_outcomes_go_by_the_outbox_setting(render: Any) -> None:
    def description(*args: str) -> str:
        (alert,) = [a for a in _alerts(render(MONITORING, *args)) if a["alert"] == "EdgePathStoreDegraded"]
        return str(alert["annotations"]["description"])

    journal = description()
    assert "journaled on disk (/var/lib/edgepath/outbox" in journal and "edgepath_outbox_outcomes" in journal
    assert "dropped when it fills" not in journal
    refused = description("--set", "drain.outboxDir=")
    assert "every outcome report is refused with 503" in refused and "journaled" not in refused
