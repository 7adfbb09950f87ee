"""REST authenticates before it reads a body, and ``GET /v1/status`` is an admin route when authentication is on.

A caller without valid credentials learns nothing about its body and costs no parse: 401 with
``WWW-Authenticate: Bearer`` on the three POST routes whatever it sent (before, an invalid body answered 422
naming its fields, and a 256-item batch was parsed in full first). With valid credentials the body is judged as
before. Real services on loopback with a hashed-tokens file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from edge_security_helpers import context_body, issue_tokens, secured_service
from service_harness import running_service

POSTS = ("/v1/recommendations", "/v1/recommendations/batch", "/v1/outcomes")
#: Per route: a body that fails validation (a number as the device id; a full batch of such items).
INVALID: dict[str, dict[str, Any]] = {
    "/v1/recommendations": {"device_id": 5, "interfaces": []},
    "/v1/recommendations/batch": {"requests": [{"device_id": 5, "interfaces": []}] * 256},
    "/v1/outcomes": {"device_id": 5, "decision_id": "", "throughput_bps": "fast"},
}
BURST = 5


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return issue_tokens(tmp_path_factory.mktemp("auth-first"), ["dev-a"], admins=["ops"])


@pytest.fixture(scope="module")
def http(tokens: dict[str, Any]) -> Iterator[httpx.Client]:
    with (
        secured_service(tokens, rate_limit_burst=BURST, rate_limit_per_s=0.05) as svc,
        httpx.Client(base_url=svc.http_url, timeout=10.0) as client,
    ):
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("path", POSTS)
@pytest.mark.parametrize("credential", ["none", "unknown token", "not bearer"])
def test_no_valid_credentials_is_401_whatever_the_body(http: httpx.Client, path: str, credential: str) -> None:
    headers = {"none": {}, "unknown token": bearer("ept_" + "A" * 43), "not bearer": {"Authorization": "Basic eDp5"}}
    for kwargs in (
        {"json": INVALID[path]},  # invalid: would be 422 naming fields
        {"content": b'{"device_id": ', "headers": {"content-type": "application/json"}},  # not JSON: would be 400
        {"content": b"device_id=dev-a", "headers": {"content-type": "application/x-www-form-urlencoded"}},  # 415
    ):
        resp = http.post(path, **{**kwargs, "headers": {**kwargs.get("headers", {}), **headers[credential]}})
        assert resp.status_code == 401, (kwargs, resp.text)
        assert resp.headers["www-authenticate"] == "Bearer"
        problem = resp.json()
        assert problem["error"] == "unauthenticated" and problem["field"] is None and "errors" not in problem


@pytest.mark.parametrize("path", POSTS)
def test_with_valid_credentials_the_body_is_judged_as_before(
    http: httpx.Client, tokens: dict[str, Any], path: str
) -> None:
    resp = http.post(path, json=INVALID[path], headers=bearer(tokens["dev-a"]))
    assert resp.status_code == 422 and resp.json()["field"], resp.text


def test_status_needs_an_admin_when_authentication_is_on(http: httpx.Client, tokens: dict[str, Any]) -> None:
    """``GET /v1/status`` (the service-wide learning state) is an admin route: 401 without credentials, 403 for a
    device, served to an admin within its request budget (one token per call, 429 past the burst)."""
    resp = http.get("/v1/status")
    assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"
    assert http.get("/v1/status", headers=bearer(tokens["dev-a"])).status_code == 403
    admin = bearer(tokens["ops"])
    answers = [http.get("/v1/status", headers=admin) for _ in range(BURST + 1)]
    assert [r.status_code for r in answers] == [200] * BURST + [429]
    assert answers[0].json()["mode"] == "learner" and "model_version" in answers[0].json()
    assert int(answers[-1].headers["retry-after"]) >= 1


def test_status_is_open_without_authentication() -> None:
    """``dev`` on loopback without an authentication method: as open as the rest of the service."""
    with running_service() as svc:
        resp = httpx.get(svc.http_url + "/v1/status", timeout=10.0)
        assert resp.status_code == 200 and resp.json()["mode"] == "learner"
        assert httpx.post(svc.http_url + "/v1/recommendations", json=context_body("dev-a"), timeout=10.0).is_success


def test_the_status_route_declares_its_statuses(http: httpx.Client) -> None:
    doc = http.get("/openapi.json").json()
    op = doc["paths"]["/v1/status"]["get"]
    assert {"401", "403", "429"} <= set(op["responses"]) and "422" not in op["responses"]
