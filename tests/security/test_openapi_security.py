"""``/openapi.json`` states the authentication the running service enforces, operation by operation.

With authentication on (a tokens file, a JWT key or client certificates), every ``/v1`` and ``/mts/v1`` route
requires the bearer scheme: a generated client then sends its credentials (the decision routes and
``GET /v1/status`` were declared ``[{"HTTPBearer": []}, {}]``, credentials optional, whatever the settings). With
authentication off they are optional (any credential is ignored; ``/mts/v1`` was declared required). The admin
routes require it either way (an admin identity; without authentication they are 403 whatever is sent), the
health routes never (``/healthz``, ``/readyz``, ``/metrics``). Each statement is checked against what the app
answers a call without credentials. The app is built in process as ``serve`` builds it (``Service.build``,
``build_security``) and called through httpx's ASGI transport.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from edgepath.main import Service
from edgepath.rest.app import create_app
from edgepath.security import build_security
from edgepath.security.auth import TokenFile
from edgepath.settings import Settings
from fastapi import FastAPI

BEARER = {"HTTPBearer": []}
#: Served to anyone, authentication on or off.
OPEN = ("/healthz", "/readyz", "/metrics")


def built(settings: Settings, *, with_security: bool = True) -> FastAPI:
    service = Service.build(settings)
    security = build_security(settings, service.backend, guard=service.plane.guard) if with_security else None
    return create_app(service.plane, security)


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in doc["paths"].items() for method, op in item.items()]


def without_credentials(app: FastAPI, calls: list[tuple[str, str]]) -> list[int]:
    """The status of each ``(method, path)`` called with no ``Authorization`` (a path parameter is ``x``)."""

    async def run() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            return [
                (await http.request(method, path.replace("{device_id}", "x").replace("{sessionId}", "x"))).status_code
                for method, path in calls
            ]

    return asyncio.run(run())


@pytest.fixture(params=["tokens file", "JWT key", "client certificates"])
def authenticated(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "tokens file":
        tokens = TokenFile(tmp_path / "tokens.json")
        tokens.add("dev-a")
        return Settings(auth_tokens_file=tokens.path)
    if request.param == "JWT key":
        return Settings(auth_jwt_key="k" * 32)
    pem = {name: tmp_path / f"{name}.pem" for name in ("cert", "key", "ca")}  # read by the TLS layer, not here
    return Settings(tls_cert_file=pem["cert"], tls_key_file=pem["key"], tls_client_ca_file=pem["ca"])


def test_with_authentication_on_the_routes_that_need_it_require_the_bearer_scheme(authenticated: Settings) -> None:
    app = built(authenticated)
    doc = app.openapi()
    assert doc["paths"]["/v1/recommendations"]["post"]["security"] == [BEARER]  # no {} alternative
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    secured = [(method.upper(), path) for path, method, _ in operations(doc) if path not in OPEN]
    assert {path for _, path in secured} >= {"/v1/recommendations/batch", "/v1/outcomes", "/v1/status"}
    for path, method, op in operations(doc):
        if path in OPEN:
            assert "security" not in op, (method, path)
        else:
            assert op["security"] == [BEARER], (method, path, op["security"])
    # what it says holds: a call without credentials is 401 (the body is not read before)
    assert without_credentials(app, secured) == [401] * len(secured), secured
    assert all(s < 400 or s == 503 for s in without_credentials(app, [("GET", p) for p in OPEN]))


@pytest.mark.parametrize("with_security", [True, False], ids=["nothing configured", "no security bundle"])
def test_with_authentication_off_credentials_are_optional_but_for_admin_routes(with_security: bool) -> None:
    app = built(Settings(), with_security=with_security)
    doc = app.openapi()
    assert doc["paths"]["/v1/recommendations"]["post"]["security"] == [BEARER, {}]
    optional, admin = [], []
    for path, method, op in operations(doc):
        if path in OPEN:
            assert "security" not in op, (method, path)
        elif path.startswith("/v1/admin/"):
            assert op["security"] == [BEARER], (method, path, op["security"])
            admin.append((method.upper(), path))
        else:
            assert op["security"] == [BEARER, {}], (method, path, op["security"])
            optional.append((method.upper(), path))
    assert {path for _, path in optional} >= {"/v1/recommendations", "/mts/v1/mts_sessions", "/v1/status"}
    # what it says holds: no route asks for credentials (no 401); an admin route refuses whatever is sent (403)
    assert 401 not in without_credentials(app, optional)
    assert without_credentials(app, admin) == [403] * len(admin)
