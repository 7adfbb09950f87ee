"""The decision path's REST routes are served by plain Starlette routes (issue 16), and nothing a client sees
changes: the OpenAPI document still describes them, their errors are still problem details, other methods
are still 405, and the request metrics still name the route."""

from __future__ import annotations

import asyncio

import httpx
from edgepath.main import Service
from edgepath.rest.app import HOT_PATHS, create_app
from edgepath.settings import Settings
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Match

BODY = {"device_id": "phone-1", "interfaces": [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60.0}]}


def first_match(app: FastAPI, path: str, method: str) -> BaseRoute:
    scope = {"type": "http", "path": path, "method": method, "root_path": ""}
    return next(r for r in app.router.routes if r.matches(scope)[0] == Match.FULL)


def test_hot_paths_match_a_plain_route_first_and_stay_documented() -> None:
    app = create_app(Service.build(Settings()).plane)
    for path in HOT_PATHS:
        route = first_match(app, path, "POST")
        assert not isinstance(route, APIRoute), path  # no FastAPI wrapper per call
        assert route.endpoint is next(r for r in app.routes if isinstance(r, APIRoute) and r.path == path).endpoint
    documented = app.openapi()["paths"]
    assert all("post" in documented[path] for path in HOT_PATHS)
    assert documented["/v1/recommendations"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]


def test_a_hot_route_answers_decisions_errors_and_wrong_methods_as_before() -> None:
    service = Service.build(Settings())
    app = create_app(service.plane)

    async def run() -> tuple[httpx.Response, httpx.Response, httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            ok = await http.post("/v1/recommendations", json=BODY)
            bad = await http.post("/v1/recommendations", json={**BODY, "interfaces": [{"name": "wlan0"}]})
            wrong = await http.get("/v1/outcomes")
            metrics = await http.get("/metrics")
            return ok, bad, wrong, metrics

    ok, bad, wrong, metrics = asyncio.run(run())
    assert ok.status_code == 200 and ok.json()["decision_id"]
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"
    assert bad.json()["field"].startswith("interfaces[0]")
    assert wrong.status_code == 405
    assert 'handler="/v1/recommendations"' in metrics.text


def test_request_metrics_label_route_templates_unknown_paths_and_skip_metrics() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    app = create_app(Service.build(Settings()).plane)

    async def run() -> str:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            admin = await http.put("/v1/admin/quarantine/dev-7")  # templated, refused
            # no authentication configured: no credential could be an admin's, and the 403 says what to configure
            assert admin.status_code == 403 and "no authentication configured" in admin.json()["detail"]
            assert (await http.get("/no/such/path")).status_code == 404
            assert (await http.get("/healthz")).status_code == 200
            await http.get("/metrics")
            return (await http.get("/metrics")).text

    counts = {
        (s.labels["handler"], s.labels["method"], s.labels["status"]): s.value
        for family in text_string_to_metric_families(asyncio.run(run()))
        if family.name == "edgepath_http_requests"
        for s in family.samples
        if s.name == "edgepath_http_requests_total"
    }
    assert {labels: n for labels, n in counts.items() if n} == {
        ("/v1/admin/quarantine/{device_id}", "PUT", "403"): 1.0,
        ("none", "GET", "404"): 1.0,
        ("/healthz", "GET", "200"): 1.0,
    }
    # the other answers a route can give exported at 0 (tests/service/test_observability_gaps.py), none for /metrics
    assert counts[("/v1/outcomes", "POST", "429")] == 0 and counts[("/healthz", "GET", "500")] == 0
    assert not [labels for labels in counts if labels[0] == "/metrics"]


def test_a_labelled_hot_histogram_exports_cumulative_buckets_per_label_set() -> None:
    from edgepath.metrics import HotHistogramFamily

    family = HotHistogramFamily("t_seconds", "test", ["handler"], (0.01, 0.1))
    for value in (0.005, 0.05, 0.5):
        family.labels("/a").observe(value)
    family.labels("/b").observe(0.01)  # on a bound: in that bucket (le)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.collect().samples}
    assert samples[("t_seconds_bucket", (("handler", "/a"), ("le", "0.01")))] == 1
    assert samples[("t_seconds_bucket", (("handler", "/a"), ("le", "0.1")))] == 2
    assert samples[("t_seconds_bucket", (("handler", "/a"), ("le", "+Inf")))] == 3
    assert samples[("t_seconds_count", (("handler", "/a"),))] == 3
    assert abs(samples[("t_seconds_sum", (("handler", "/a"),))] - 0.555) < 1e-12
    assert samples[("t_seconds_bucket", (("handler", "/b"), ("le", "0.01")))] == 1
