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
