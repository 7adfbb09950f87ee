"""Every REST problem that names a field has one shape, whoever found the fault (README "Operating it: problem
details"): the top-level ``field`` and an ``errors`` list whose first entry is ``{"field", "message"}`` of that same
field and message, for pydantic's validation (422, a body that is not JSON 400), the decision plane's and the
security layer's :class:`~edgepath.errors.EdgePathError` (an unknown section 422, a decision id 404, another
device's id 403) and the MEC 015 API (400). A problem naming no field (401, an admin route refused 403) has no
``errors``. The messages of the service's own validators read as written, without pydantic's ``Value error, `` /
``Assertion failed, `` prefix (the same helper words gRPC's field violations: :func:`edgepath.errors.error_message`).

The real app (``create_app`` over a built :class:`~edgepath.main.Service`'s plane, authentication from a tokens
file) is served in process through httpx's ASGI transport; every body is checked against the ``Problem`` schema of
the app's own ``/openapi.json``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import yaml
from edgepath.errors import error_message, field_violations
from edgepath.main import Service
from edgepath.rest.app import create_app
from edgepath.security import build_security
from edgepath.security.auth import TokenFile
from edgepath.settings import Settings
from fastapi import FastAPI
from pydantic import BaseModel, ValidationError, field_validator

PROBLEM = "application/problem+json"
WIFI = {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60, "link_speed_mbps": 100}
SERVED = "congestion, primary_path, scheduler, server_selection, steering"


def context(device_id: str, **members: Any) -> dict[str, Any]:
    return {"device_id": device_id, "interfaces": [WIFI], **members}


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    tokens = TokenFile(tmp_path_factory.mktemp("problem-fields") / "tokens.json")
    issued = {name: tokens.add(name) for name in ("dev-a", "dev-b")}
    issued["admin"] = tokens.add("ops", admin=True)
    return tokens.path, issued


@pytest.fixture(scope="module")
def app(tokens: tuple[Path, dict[str, str]]) -> Iterator[FastAPI]:
    settings = Settings(auth_tokens_file=tokens[0], rate_limit_per_s=1e6, rate_limit_burst=1_000_000)
    service = Service.build(settings)
    yield create_app(service.plane, build_security(settings, service.backend, guard=service.plane.guard))


Call = tuple[str, str, dict[str, Any]]


def call_all(app: FastAPI, calls: list[Call]) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            return [await http.request(method, path, **kwargs) for method, path, kwargs in calls]

    return asyncio.run(run())


def problem(app: FastAPI, status: int, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    """The problem body ``method path`` answers, checked against the app's declared ``Problem`` schema."""
    (resp,) = call_all(app, [(method, path, kwargs)])
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == PROBLEM
    doc = app.openapi()
    body: dict[str, Any] = resp.json()
    jsonschema.validate(body, {"$ref": "#/components/schemas/Problem", "components": doc["components"]})
    return body


def assert_names(body: dict[str, Any], field: str, message: str, *more: dict[str, str]) -> None:
    """``body`` names ``field`` with ``message`` everywhere it says so (top level, detail, errors[0])."""
    assert body["field"] == field and body["message"] == message
    assert body["detail"] == f"{field}: {message}"
    assert body["errors"] == [{"field": field, "message": message}, *more]


def auth(tokens: tuple[Path, dict[str, str]], name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {tokens[1][name]}"}


def test_an_unknown_section_is_a_422_with_errors(app: FastAPI, tokens: tuple[Path, dict[str, str]]) -> None:
    body = problem(
        app,
        422,
        "POST",
        "/v1/recommendations",
        json=context("dev-a", sections=["primary_path", "bogus"]),
        headers=auth(tokens, "dev-a"),
    )
    assert body["error"] == "invalid_input"
    assert_names(body, "sections[1]", f"unknown section 'bogus'; this service serves {SERVED}")


def test_an_unknown_section_in_a_batch_is_a_422_with_errors(app: FastAPI, tokens: tuple[Path, dict[str, str]]) -> None:
    items = [context("dev-a")] * 3 + [context("dev-a", sections=["bogus"])]
    body = problem(
        app, 422, "POST", "/v1/recommendations/batch", json={"requests": items}, headers=auth(tokens, "dev-a")
    )
    assert_names(body, "requests[3].sections[0]", f"unknown section 'bogus'; this service serves {SERVED}")


def test_403_and_404_naming_a_field_carry_it_in_errors(app: FastAPI, tokens: tuple[Path, dict[str, str]]) -> None:
    # another device's id (the plane's PermissionDenied, field device_id / requests[i].device_id)
    body = problem(app, 403, "POST", "/v1/recommendations", json=context("dev-b"), headers=auth(tokens, "dev-a"))
    assert body["error"] == "permission_denied"
    assert_names(body, "device_id", "device_id does not match the authenticated device")
    batch = {"requests": [context("dev-a"), context("dev-b")]}
    body = problem(app, 403, "POST", "/v1/recommendations/batch", json=batch, headers=auth(tokens, "dev-a"))
    assert_names(body, "requests[1].device_id", "device_id does not match the authenticated device")
    # an unknown decision (NotFound, field decision_id)
    outcome = {"device_id": "dev-a", "decision_id": "0" * 32, "throughput_bps": 1e6}
    body = problem(app, 404, "POST", "/v1/outcomes", json=outcome, headers=auth(tokens, "dev-a"))
    assert body["error"] == "not_found"
    assert_names(body, "decision_id", "unknown or expired decision")


def test_a_problem_naming_no_field_has_no_errors(app: FastAPI, tokens: tuple[Path, dict[str, str]]) -> None:
    body = problem(
        app, 401, "POST", "/v1/recommendations", json=context("dev-a"), headers={"authorization": "Bearer x"}
    )
    assert body["field"] is None and "errors" not in body
    body = problem(app, 403, "GET", "/v1/admin/quarantine", headers=auth(tokens, "dev-a"))
    assert body["field"] is None and "errors" not in body
    body = problem(app, 404, "GET", "/no/such/path")
    assert body["field"] is None and "errors" not in body


def test_a_body_that_is_not_json_is_named_body_in_errors_too(app: FastAPI, tokens: tuple[Path, dict[str, str]]) -> None:
    headers = {"content-type": "application/json", **auth(tokens, "dev-a")}
    for path in ("/v1/recommendations", "/v1/recommendations/batch", "/v1/outcomes"):
        body = problem(app, 400, "POST", path, content=b'{"device_id": ', headers=headers)
        assert body["error"] == "invalid_input"
        assert_names(body, "body", "Invalid JSON: EOF while parsing a value at line 1 column 14")


def test_validator_messages_read_without_pydantics_prefix(app: FastAPI, tokens: tuple[Path, dict[str, str]]) -> None:
    headers = auth(tokens, "dev-a")
    # a field validator of RecommendRequest (ValueError in _unique_names)
    duplicate = {"device_id": "dev-a", "interfaces": [WIFI, WIFI]}
    body = problem(app, 422, "POST", "/v1/recommendations", json=duplicate, headers=headers)
    assert_names(body, "interfaces", "duplicate interface name 'wlan0'")
    # in a batch item: the same message at the item's path
    body = problem(
        app, 422, "POST", "/v1/recommendations/batch", json={"requests": [context("dev-a"), duplicate]}, headers=headers
    )
    assert_names(body, "requests[1].interfaces", "duplicate interface name 'wlan0'")
    # a model validator of a nested model (SubflowHistory: columns of unequal length)
    history = {"interface": "wlan0", "rtt_t_ms": [1.7e12, 1.7e12 + 1000], "rtt_ms": [20.0]}
    body = problem(
        app, 422, "POST", "/v1/recommendations", json=context("dev-a", subflow_histories=[history]), headers=headers
    )
    assert_names(body, "subflow_histories[0].rtt_ms", "rtt_t_ms has 2 entries but rtt_ms has 1: one time per sample")
    # a model validator of the whole request: the member its rule is about, in both places
    orphan = {"interface": "wwan9", "rtt_t_ms": [1.7e12], "rtt_ms": [20.0]}
    body = problem(
        app, 422, "POST", "/v1/recommendations", json=context("dev-a", subflow_histories=[orphan]), headers=headers
    )
    assert_names(body, "subflow_histories[0].interface", "subflow_histories[0].interface 'wwan9' names no interface")
    # in a batch item: below the item's path
    body = problem(
        app,
        422,
        "POST",
        "/v1/recommendations/batch",
        json={"requests": [context("dev-a"), context("dev-a", subflow_histories=[orphan])]},
        headers=headers,
    )
    assert_names(
        body, "requests[1].subflow_histories[0].interface", "subflow_histories[0].interface 'wwan9' names no interface"
    )
    # pydantic's own messages are unchanged, and every invalid field is listed, the first at the top
    two = context("dev-a", interfaces=[{**WIFI, "wifi_rssi_dbm": 10, "link_speed_mbps": -1}])
    body = problem(app, 422, "POST", "/v1/recommendations", json=two, headers=headers)
    assert_names(
        body,
        "interfaces[0].wifi_rssi_dbm",
        "Input should be less than or equal to 0",
        {"field": "interfaces[0].link_speed_mbps", "message": "Input should be greater than or equal to 0"},
    )


def test_a_path_parameter_422_names_it_in_errors(app: FastAPI, tokens: tuple[Path, dict[str, str]]) -> None:
    body = problem(app, 422, "PUT", "/v1/admin/quarantine/" + "d" * 200, headers=auth(tokens, "admin"))
    assert_names(body, "device_id", "String should have at most 128 characters")


@pytest.mark.parametrize("device_id", ["a%0Ab", "%00", "phone-1%20", "ph%E2%80%AEone", "ph%C2%9Bone"])
def test_an_admin_route_refuses_a_device_id_no_device_can_send(
    app: FastAPI, tokens: tuple[Path, dict[str, str]], device_id: str
) -> None:
    """A quarantine path's device id follows a request's ``device_id`` rules (no whitespace, control, C1 or
    bidirectional-override character): an id no device can send quarantined nothing and went into the list."""
    listing = ("GET", "/v1/admin/quarantine", {"headers": auth(tokens, "admin")})
    (before,) = call_all(app, [listing])
    for method in ("PUT", "DELETE"):
        body = problem(app, 422, method, f"/v1/admin/quarantine/{device_id}", headers=auth(tokens, "admin"))
        assert body["field"] == "device_id", body
    (after,) = call_all(app, [listing])
    assert after.status_code == 200 and after.json() == before.json()


@pytest.mark.parametrize("device_id", ["ph\u202eone", "ph\u009bone", "a\u200bb", "\ufeffphone", "a\u2066b"])
def test_a_device_id_with_an_invisible_or_c1_character_is_refused(
    app: FastAPI, tokens: tuple[Path, dict[str, str]], device_id: str
) -> None:
    """A bidirectional override, a C1 control (U+009B: a terminal's CSI) or a zero-width character in a device id
    would make it read as another device in a log line or a dashboard ("Trojan Source", CVE-2021-42574)."""
    request = {"device_id": device_id, "interfaces": [WIFI]}
    body = problem(app, 422, "POST", "/v1/recommendations", json=request, headers=auth(tokens, "dev-a"))
    assert body["field"] == "device_id", body


def test_mts_400_lists_every_invalid_field(app: FastAPI, tokens: tuple[Path, dict[str, str]]) -> None:
    body = problem(app, 400, "POST", "/mts/v1/mts_sessions", json={"appInsId": "a"}, headers=auth(tokens, "admin"))
    assert body["field"] == body["errors"][0]["field"] and body["message"] == body["errors"][0]["message"]
    assert body["detail"] == f"{body['field']}: {body['message']}" and len(body["errors"]) > 1
    assert all(set(e) == {"field", "message"} and e["field"] and e["message"] for e in body["errors"])
    body = problem(
        app,
        400,
        "POST",
        "/mts/v1/mts_sessions",
        content=b"{",
        headers={"content-type": "application/json", **auth(tokens, "admin")},
    )
    assert body["field"] == "body" and body["errors"] == [{"field": "body", "message": body["message"]}]


class _Checked(BaseModel):
    x: int

    @field_validator("x")
    @classmethod
    def _small(cls, x: int) -> int:
        # raised, not asserted: pytest rewrites the assert statements of a test module (and their messages)
        if x == 1:
            raise ValueError("one is refused")
        if x == 2:
            raise AssertionError("two is refused")
        if x == 3:
            raise AssertionError
        return x


@pytest.mark.parametrize(
    ("x", "message"),
    [(1, "one is refused"), (2, "two is refused"), (3, "Assertion failed"), ("a", None)],
)
def test_error_message_is_the_validators_own(x: Any, message: str | None) -> None:
    with pytest.raises(ValidationError) as err:
        _Checked(x=x)
    (entry,) = err.value.errors()
    expected = message or entry["msg"]  # pydantic's own wording is kept
    assert error_message(entry) == expected
    assert field_violations(err.value.errors()) == [("x", expected)]


@pytest.mark.parametrize(
    ("where", "value", "field", "message"),
    [
        ({"wifi_rssi_dbm": True}, None, "interfaces[0].wifi_rssi_dbm", "Input should be a valid number"),
        ({"link_speed_mbps": "144"}, None, "interfaces[0].link_speed_mbps", "Input should be a valid number"),
        ({"cqi": True}, None, "interfaces[0].cqi", "Input should be a valid integer"),
        ({"cqi": 9.5}, None, "interfaces[0].cqi", "Input should be a valid integer"),
        ({"cqi": 9.0}, None, "interfaces[0].cqi", "Input should be a valid integer"),
        ({"cqi": "9"}, None, "interfaces[0].cqi", "Input should be a valid integer"),
        ({"loss": False}, None, "interfaces[0].loss", "Input should be a valid number"),
        (None, {"interface": "wlan0", "rtt_t_ms": [1.7e12], "rtt_ms": ["12"]}, "subflow_histories[0].rtt_ms[0]", ""),
    ],
)
def test_a_boolean_or_a_string_is_no_number(
    app: FastAPI,
    tokens: tuple[Path, dict[str, str]],
    where: dict[str, Any] | None,
    value: dict[str, Any] | None,
    field: str,
    message: str,
) -> None:
    """A JSON ``true`` or ``"144"`` where the schema says number is a client's bug, refused naming the field (pydantic's
    lax mode took them as 1 and 144, and the service decided on them); a JSON integer stays a number, and an integer
    member takes JSON integers only (``9.0`` is refused, as ``true`` and ``"9"``)."""
    body = context("dev-a", interfaces=[{**WIFI, **(where or {})}])
    if value is not None:
        body["subflow_histories"] = [value]
    got = problem(app, 422, "POST", "/v1/recommendations", json=body, headers=auth(tokens, "dev-a"))
    assert got["field"] == field
    assert got["message"].startswith(message)
    fine = context("dev-a", interfaces=[{**WIFI, "wifi_rssi_dbm": -60, "cqi": 9}])  # an integer where a float goes
    (resp,) = call_all(app, [("POST", "/v1/recommendations", {"json": fine, "headers": auth(tokens, "dev-a")})])
    assert resp.status_code == 200, resp.text


def test_an_outcomes_numbers_are_numbers(app: FastAPI, tokens: tuple[Path, dict[str, str]]) -> None:
    headers = auth(tokens, "dev-a")
    (rec,) = call_all(app, [("POST", "/v1/recommendations", {"json": context("dev-a"), "headers": headers})])
    report = {"device_id": "dev-a", "decision_id": rec.json()["decision_id"], "throughput_bps": "4e7"}
    got = problem(app, 422, "POST", "/v1/outcomes", json=report, headers=headers)
    assert got["field"] == "throughput_bps"
    report["throughput_bps"] = 40_000_000  # a JSON integer is a number
    (ack,) = call_all(app, [("POST", "/v1/outcomes", {"json": report, "headers": headers})])
    assert ack.status_code == 200 and ack.json()["accepted"], ack.text


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        (None, 200),  # curl --data-binary with no header, and many HTTP clients
        ("application/json; charset=utf-8", 200),
        ("application/vnd.edgepath+json", 200),
        ("application/x-www-form-urlencoded", 415),  # curl -d without -H
        ("text/plain", 415),
        ("multipart/form-data; boundary=x", 415),
    ],
)
def test_a_body_is_read_as_json_only_when_sent_as_json(
    app: FastAPI, tokens: tuple[Path, dict[str, str]], content_type: str | None, status: int
) -> None:
    headers = auth(tokens, "dev-a")
    if content_type is not None:
        headers["content-type"] = content_type
    raw = json.dumps(context("dev-a")).encode()
    for path in ("/v1/recommendations", "/v1/recommendations/batch", "/v1/outcomes"):
        content = json.dumps({"requests": [context("dev-a")]}).encode() if path.endswith("batch") else raw
        (resp,) = call_all(app, [("POST", path, {"content": content, "headers": headers})])
        if status == 415:
            assert resp.status_code == 415 and resp.headers["content-type"] == "application/problem+json", resp.text
            assert resp.json()["error"] == "invalid_input"
        else:  # an outcome's body here is a context: refused by validation, after the media type was taken
            assert resp.status_code == (422 if path == "/v1/outcomes" else 200), resp.text


#: ETSI MEC 015's OpenAPI (vendored): the ``/mts/v1`` problems are its ``ProblemDetails`` too.
ETSI_SPEC = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "service" / "data" / "etsi-mec-015" / "TrafficSteeringApi.yaml").read_text()
)


@pytest.mark.parametrize("sent", ["text/plain", "application/x-www-form-urlencoded; charset=utf-8"])
def test_a_body_not_sent_as_json_is_named_body_on_v1_and_mts_alike(
    app: FastAPI, tokens: tuple[Path, dict[str, str]], sent: str
) -> None:
    """A 415 is a fault of the body as a whole, which every problem names ``body`` (a body that is not JSON, a rule
    across its members): ``/v1`` and ``/mts/v1`` answer the same members (``/v1`` said ``field: null`` and no
    ``errors``, ``/mts/v1`` ``body``)."""
    message = f"Content-Type {sent.split(';')[0]} is not JSON: send the body as application/json"
    raw = json.dumps(context("dev-a")).encode()
    answers = {}
    for method, path, who in (
        ("POST", "/v1/recommendations", "dev-a"),
        ("POST", "/v1/recommendations/batch", "dev-a"),
        ("POST", "/v1/outcomes", "dev-a"),
        ("POST", "/mts/v1/mts_sessions", "admin"),
        ("PUT", "/mts/v1/mts_sessions/any", "admin"),
    ):
        body = problem(app, 415, method, path, content=raw, headers={**auth(tokens, who), "content-type": sent})
        assert body["error"] == "invalid_input"
        assert_names(body, "body", message)
        answers[path] = {k: v for k, v in body.items() if k not in ("instance", "request_id")}
    assert len({json.dumps(a, sort_keys=True) for a in answers.values()}) == 1, answers
    mts = problem(
        app, 415, "POST", "/mts/v1/mts_sessions", content=raw, headers={**auth(tokens, "admin"), "content-type": sent}
    )
    etsi = {**ETSI_SPEC, "$ref": "#/components/schemas/ProblemDetails"}
    jsonschema.Draft202012Validator(etsi, format_checker=jsonschema.FormatChecker()).validate(mts)
