"""The REST API describes itself (issue 22, item 3): RFC 9457 problem details for every error status, each
declared in ``/openapi.json`` for the operation that answers it; ``/docs`` and ``/redoc`` need no CDN;
``x-request-id`` is accepted and echoed.

Every status is provoked on a real server (``running_service``: authentication with a tokens file, a
1 KiB body bound, a two-request burst per device). Load shedding (503) is provoked on the real app built
by ``create_app`` with an :class:`~edgepath.admission.Admission` whose in-flight bound is 0, served in
process through httpx's ASGI transport (a real overload cannot be produced reliably on a shared 2-core
machine).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from edgepath.admission import Admission
from edgepath.main import Service
from edgepath.rest.app import create_app
from edgepath.security.auth import TokenFile
from edgepath.settings import Settings
from service_harness import RunningService, running_service

PROBLEM = "application/problem+json"
WIFI = {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60, "link_speed_mbps": 100}


def context(device_id: str, **interface: Any) -> dict[str, Any]:
    return {"device_id": device_id, "interfaces": [{**WIFI, **interface}]}


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    tokens = TokenFile(tmp_path_factory.mktemp("problem") / "tokens.json")
    names = ("dev-ok", "dev-422", "dev-400", "dev-404", "dev-413", "dev-429", "dev-403")
    issued = {name: tokens.add(name) for name in names}
    issued["admin"] = tokens.add("ops", admin=True)
    issued["admin-415"] = tokens.add("ops-415", admin=True)  # its own two-request burst
    return tokens.path, issued


@pytest.fixture(scope="module")
def service(tokens: tuple[Path, dict[str, str]]) -> Iterator[RunningService]:
    with running_service(
        auth_tokens_file=tokens[0], rate_limit_per_s=0.001, rate_limit_burst=2, max_message_bytes=1024
    ) as svc:
        yield svc


@pytest.fixture(scope="module")
def openapi(service: RunningService) -> dict[str, Any]:
    doc: dict[str, Any] = httpx.get(f"{service.http_url}/openapi.json", timeout=5.0).json()
    return doc


def resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``#/components/...`` references resolvable (the document itself as the root)."""
    return {**schema, "components": doc["components"]}


def assert_declared_problem(doc: dict[str, Any], method: str, path: str, resp: httpx.Response) -> None:
    """``resp`` is a problem object valid against the schema ``doc`` declares for this operation and status."""
    assert resp.headers["content-type"].startswith(PROBLEM), (path, resp.status_code, resp.headers)
    operation = doc["paths"][path][method]
    declared = operation["responses"].get(str(resp.status_code))
    assert declared is not None, f"{method.upper()} {path} answers {resp.status_code}, not declared"
    schema = declared["content"][PROBLEM]["schema"]
    assert schema == {"$ref": "#/components/schemas/Problem"}
    body = resp.json()
    jsonschema.validate(body, resolve(doc, schema))
    assert body["status"] == resp.status_code and body["type"] == "about:blank" and body["title"]


def test_every_error_status_is_a_declared_problem(
    service: RunningService, tokens: tuple[Path, dict[str, str]], openapi: dict[str, Any]
) -> None:
    issued = tokens[1]

    def auth(name: str) -> dict[str, str]:
        return {"authorization": f"Bearer {issued[name]}"}

    seen: set[int] = set()
    with httpx.Client(base_url=service.http_url, timeout=5.0) as http:

        def check(method: str, path: str, status: int, doc_path: str | None = None, **kwargs: Any) -> dict[str, Any]:
            resp = http.request(method, path, **kwargs)
            assert resp.status_code == status, (method, path, resp.text)
            assert_declared_problem(openapi, method.lower(), doc_path or path, resp)
            seen.add(status)
            body: dict[str, Any] = resp.json()
            assert body["instance"] == f"{service.http_url}{path}"
            assert body["request_id"] == resp.headers["x-request-id"]
            return body

        # 400: a body that is not JSON (not FastAPI's 422)
        body = check(
            "POST", "/v1/recommendations", 400, content=b'{"device_id": ', headers={**auth("dev-400"), **_json()}
        )
        assert body["field"] == "body" and body["error"] == "invalid_input"
        # 422: a value out of range, named; the members clients read are kept (error, field, message)
        body = check(
            "POST",
            "/v1/recommendations",
            422,
            json=context("dev-422", wifi_rssi_dbm=10),
            headers=auth("dev-422"),
        )
        assert body["field"] == "interfaces[0].wifi_rssi_dbm" and body["error"] == "invalid_input"
        assert body["detail"] == f"{body['field']}: {body['message']}" and body["errors"][0]["field"] == body["field"]
        # 401 with WWW-Authenticate
        resp_body = check("POST", "/v1/recommendations", 401, json=context("dev-ok"), headers=_bearer("not-a-token"))
        assert resp_body["error"] == "unauthenticated"
        # 403: an admin route called by a device
        check("GET", "/v1/admin/quarantine", 403, headers=auth("dev-403"))
        # 404: an outcome for a decision that never existed
        outcome = {"device_id": "dev-404", "decision_id": "0" * 32, "throughput_bps": 1e6}
        check("POST", "/v1/outcomes", 404, json=outcome, headers=auth("dev-404"))
        # 413: a body beyond max_message_bytes
        big = context("dev-413") | {"padding": "x" * 2048}
        check("POST", "/v1/recommendations", 413, json=big, headers=auth("dev-413"))
        # 415: a body sent as a form (curl -d without a content type) or text, not parsed as JSON all the same
        for sent in ("application/x-www-form-urlencoded", "text/plain; charset=utf-8"):
            body = check(
                "POST",
                "/v1/recommendations",
                415,
                content=b'{"device_id": "dev-415", "interfaces": []}',
                headers={**auth("dev-422"), "content-type": sent},
            )
            assert (
                body["message"] == f"Content-Type {sent.split(';')[0]} is not JSON: send the body as application/json"
            )
        # 429 with Retry-After once the device's burst is spent
        for _ in range(2):
            assert http.post("/v1/recommendations", json=context("dev-429"), headers=auth("dev-429")).status_code == 200
        check("POST", "/v1/recommendations", 429, json=context("dev-429"), headers=auth("dev-429"))
        # the MEC 015 API answers the same problem object (400 naming the field, 404)
        check(
            "GET", "/mts/v1/mts_sessions/nope", 404, doc_path="/mts/v1/mts_sessions/{sessionId}", headers=auth("admin")
        )
        check("POST", "/mts/v1/mts_sessions", 400, json={"appInsId": "a"}, headers=auth("admin"))
        # 415 on MEC 015's POST and PUT too (a body sent as text)
        text = {**auth("admin-415"), "content-type": "text/plain"}
        check("POST", "/mts/v1/mts_sessions", 415, content=b"{}", headers=text)
        check(
            "PUT",
            "/mts/v1/mts_sessions/s",
            415,
            doc_path="/mts/v1/mts_sessions/{sessionId}",
            content=b"{}",
            headers=text,
        )
        # 422 on a path parameter of an admin route
        check(
            "PUT",
            "/v1/admin/quarantine/" + "d" * 200,
            422,
            doc_path="/v1/admin/quarantine/{device_id}",
            headers=auth("admin"),
        )
    assert seen == {400, 401, 403, 404, 413, 415, 422, 429}


def test_shed_request_is_a_declared_503_problem(openapi: dict[str, Any]) -> None:
    service = Service.build(Settings(host="127.0.0.1", grpc_port=0, http_port=0))
    app = create_app(service.plane, None, Admission(max_inflight=0))

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://edge") as http:
            return await http.post("/v1/recommendations", json=context("dev-shed"))

    resp = asyncio.run(call())
    assert resp.status_code == 503 and int(resp.headers["retry-after"]) >= 1
    assert_declared_problem(openapi, "post", "/v1/recommendations", resp)
    assert resp.json()["error"] == "unavailable" and "x-request-id" in resp.headers


def test_every_declared_error_uses_the_problem_schema_and_no_default_422_is_left(openapi: dict[str, Any]) -> None:
    errors = 0
    for path, item in openapi["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if status.startswith("2"):
                    continue
                errors += 1
                assert list(response["content"]) == [PROBLEM], (method, path, status)
                assert response["content"][PROBLEM]["schema"] == {"$ref": "#/components/schemas/Problem"}
            if path.startswith("/mts/v1/"):
                assert "422" not in operation["responses"] and "400" in operation["responses"], path
            if path in ("/v1/recommendations", "/v1/recommendations/batch", "/v1/outcomes"):
                assert {"400", "401", "413", "422", "429", "503"} <= set(operation["responses"]), path
    assert errors > 30
    assert "HTTPValidationError" not in openapi["components"]["schemas"]


def test_request_id_is_echoed_or_generated(service: RunningService) -> None:
    with httpx.Client(base_url=service.http_url, timeout=5.0) as http:
        assert http.get("/healthz", headers={"x-request-id": "req-42.a"}).headers["x-request-id"] == "req-42.a"
        generated = http.get("/healthz").headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", generated)
        # a value that could forge log lines is replaced, not echoed
        replaced = http.get("/healthz", headers={"x-request-id": "a b\tc"}).headers["x-request-id"]
        assert replaced != "a b\tc" and re.fullmatch(r"[0-9a-f]{32}", replaced)


def test_the_openapi_examples_are_bodies_the_service_accepts() -> None:
    """/docs' "Try it out" starts from each operation's example: without one it generated a body the service
    refused (both forms of a history: 422). Each example is served in the OpenAPI document and is answered 200
    (the outcome's once its placeholder decision_id is one Recommend answered). Authentication off, as in the
    dev profile's /docs."""
    with running_service() as svc, httpx.Client(base_url=svc.http_url, timeout=5.0) as http:
        schemas = http.get("/openapi.json").json()["components"]["schemas"]
        examples = {name: schemas[name]["examples"][0] for name in ("RecommendRequest", "RecommendBatchRequest")}
        outcome = schemas["OutcomeReport"]["examples"][0]
        decided = http.post("/v1/recommendations", json=examples["RecommendRequest"])
        assert decided.status_code == 200, decided.text
        assert http.post("/v1/recommendations/batch", json=examples["RecommendBatchRequest"]).status_code == 200
        assert http.post("/v1/outcomes", json=outcome).status_code == 404  # the placeholder names no decision
        reported = http.post("/v1/outcomes", json={**outcome, "decision_id": decided.json()["decision_id"]})
        assert reported.status_code == 200 and reported.json()["accepted"] is True, reported.text


@pytest.mark.parametrize(
    ("sent", "instance"),
    [
        ("/v1/nothing%20here", "/v1/nothing%20here"),  # was /v1/nothing%2520here: encoded twice
        ("/v1/a%zz", "/v1/a%25zz"),  # a % that starts no octet is encoded, so the URI stays valid
        ("/v1/caf%C3%A9", "/v1/caf%C3%A9"),
    ],
)
def test_a_problems_instance_is_the_path_as_sent(sent: str, instance: str) -> None:
    """RFC 9457 ``instance``: the request's URI; the octets a client percent-encoded stay as sent."""
    with running_service() as svc:
        resp = httpx.get(svc.http_url + sent, timeout=5.0)
    assert resp.status_code == 404 and resp.json()["instance"] == svc.http_url + instance


def test_a_pattern_refusal_says_what_the_pattern_means_over_both_transports() -> None:
    """A device_id with a space was refused with the raw regular expression (``String should match pattern
    '^[^\\s\\x00-…]+$'``); now in words, the same over REST and gRPC."""
    import grpc
    from edgepath.wire import edgepath_pb2 as pb
    from edgepath.wire import edgepath_pb2_grpc as pb_grpc
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    said = "must have no whitespace, control or invisible formatting characters"
    with running_service() as svc:
        rest = httpx.post(f"{svc.http_url}/v1/recommendations", json=context("phone 1"), timeout=5.0)
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
            request = pb.RecommendRequest(device_id="phone 1", interfaces=[pb.InterfaceContext(name="wlan0")])
            with pytest.raises(grpc.RpcError) as refused:
                pb_grpc.PathServiceStub(channel).Recommend(request, timeout=5.0)
    assert rest.status_code == 422 and rest.json()["field"] == "device_id" and said in rest.json()["detail"]
    assert "pattern" not in rest.json()["detail"]
    bad = error_details_pb2.BadRequest()
    assert rpc_status.from_call(refused.value).details[0].Unpack(bad)  # type: ignore[arg-type]
    assert [(v.field, v.description) for v in bad.field_violations][:1] == [("device_id", said)]


def test_bad_request_ids_log_nothing(service: RunningService, caplog: pytest.LogCaptureFixture) -> None:
    """asgi-correlation-id logged one WARNING per request whose x-request-id failed validation: anyone, without
    credentials, could write a line per request (gRPC replaces a bad id silently; refusals are bounded at 10
    lines/s). The id is still replaced, and nothing is logged for it."""
    caplog.set_level(logging.DEBUG, logger="asgi_correlation_id")
    with httpx.Client(base_url=service.http_url, timeout=5.0) as http:
        for i in range(20):
            replaced = http.get("/healthz", headers={"x-request-id": f"bad id {i}!"}).headers["x-request-id"]
            assert re.fullmatch(r"[0-9a-f]{32}", replaced)
    assert [r for r in caplog.records if r.name == "asgi_correlation_id" and r.levelno >= logging.INFO] == []


def test_docs_load_without_a_cdn(service: RunningService) -> None:
    """Air-gapped edge node: every script and stylesheet of /docs and /redoc is served by the service itself."""
    with httpx.Client(base_url=service.http_url, timeout=5.0) as http:
        for page in ("/docs", "/redoc"):
            html = http.get(page).text
            assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
            assert assets, page
            for asset in assets:
                assert asset.startswith("/"), f"{page} loads {asset} from elsewhere"
                resp = http.get(asset)
                assert resp.status_code == 200 and len(resp.content) > 0, asset
            assert "openapi.json" in html


def _json() -> dict[str, str]:
    return {"content-type": "application/json"}


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}
