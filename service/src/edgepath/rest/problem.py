"""RFC 9457 problem details (``application/problem+json``) for every error of the REST API.

Every non-2xx answer of the service — the ``/v1`` routes, ``/mts/v1`` (ETSI MEC 015 ``ProblemDetails``, the
same shape), ``/readyz`` while degraded, the body-size bound (413) and load shedding (503) — is one
:class:`Problem` object: the RFC 9457 §3.1 members ``type`` (``about:blank``: the status says it all),
``title`` (the HTTP reason phrase, RFC 9457 §4.2.1), ``status``, ``detail`` and ``instance`` (the request's absolute
URI without its query), plus EdgePath's extension members (RFC 9457 §3.2), kept from the envelope clients read before:

- ``error``: the :class:`~edgepath.errors.ErrorKind` value (``invalid_input``, ``rate_limited``, ...);
- ``field``: the offending request field (``interfaces[0].rsrp_dbm``; ``body`` for the body as a whole: not JSON,
  not sent as JSON (415, :class:`edgepath.rest.body.NotJson`), or a rule across its members), or null;
- ``message``: the explanation without the field prefix (``detail`` is ``"<field>: <message>"``);
- ``errors``: present whenever ``field`` is, whatever found the fault (pydantic, the decision plane, the security
  layer; any status): ``[{"field", "message"}]``, the first entry ``field`` and ``message`` themselves, then every
  other invalid field of a 422 or 400. A validator's own message reads as written, without pydantic's
  ``"Value error, "`` (:func:`edgepath.errors.error_message`, gRPC's field violations word them the same);
- ``request_id``: the request's ``x-request-id`` (also echoed as a header).

:func:`declare_problems` writes the statuses each operation can answer into the OpenAPI document, each
with this schema, so the document matches what the server does (``tests/service/test_problem_details.py``
provokes every one and checks it is declared).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import orjson
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from edgepath.errors import field_violations

PROBLEM_JSON = "application/problem+json"
#: The ``field`` of a problem with the request body as a whole: not JSON, or a rule across its members.
BODY = "body"
#: Characters a URI path may carry unescaped (RFC 3986 §3.3 pchar and "/"; "%" is escaped again).
URI_PATH_SAFE = "/:@!$&'()*+,;=-._~"
PROBLEM_SCHEMA = "Problem"


class FieldProblem(BaseModel):
    """One request field a problem names: its path and what is wrong with it."""

    field: str
    message: str


class Problem(BaseModel):
    """RFC 9457 problem details object with EdgePath's extension members (module docstring)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(default="about:blank", description="Problem type URI (RFC 9457 §3.1.1)")
    title: str = Field(description="HTTP reason phrase of ``status`` (RFC 9457 §3.1.3, §4.2.1)")
    status: int = Field(ge=400, le=599, description="HTTP status code of this answer")
    detail: str | None = Field(default=None, description="Explanation of this occurrence")
    instance: str | None = Field(default=None, description="The request path")
    error: str | None = Field(default=None, description="EdgePath error kind (``invalid_input``, ``rate_limited``, …)")
    field: str | None = Field(default=None, description="Offending request field, e.g. ``interfaces[0].rsrp_dbm``")
    message: str | None = Field(default=None, description="The explanation without the field prefix")
    errors: list[FieldProblem] | None = Field(
        default=None,
        description="Present with ``field``: that field and message first, then every other invalid field (400, 422)",
    )
    request_id: str | None = Field(default=None, description="The request's x-request-id")


#: RFC 9110 renamed these (§15.5.14, §15.5.21); Python's ``http.HTTPStatus`` keeps the RFC 7231 phrases.
_RFC9110_PHRASES = {413: "Content Too Large", 422: "Unprocessable Content"}


def reason(status: int) -> str:
    """The HTTP reason phrase of ``status`` (RFC 9110 §15), ``"Error"`` for an unregistered code."""
    if status in _RFC9110_PHRASES:
        return _RFC9110_PHRASES[status]
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem_body(
    status: int,
    message: str,
    *,
    kind: str | None = None,
    field: str | None = None,
    instance: str | None = None,
    title: str | None = None,
    **extensions: Any,
) -> dict[str, Any]:
    """The problem object of one error as a dict (``None`` extension members omitted except ``field``).

    A problem naming a ``field`` carries ``errors``: the caller's list (:func:`field_problems`, ``field`` and
    ``message`` its first entry), else that one field and message.
    """
    if field and extensions.get("errors") is None:
        extensions["errors"] = [{"field": field, "message": message}]
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title or reason(status),
        "status": status,
        "detail": f"{field}: {message}" if field else message,
        "error": kind,
        "field": field,
        "message": message,
    }
    if instance is not None:
        body["instance"] = instance
    body.update({k: v for k, v in extensions.items() if v is not None})
    return body


def field_problems(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The ``errors`` member of a validation problem: ``{"field", "message"}`` of each pydantic error entry
    (:func:`edgepath.errors.field_violations`: the validator's own message), the body as a whole named ``body``
    (a body that is not JSON, a model validator of the request itself)."""
    return [
        {"field": BODY if e.get("type") == "json_invalid" else field or BODY, "message": message}
        for e, (field, message) in zip(errors, field_violations(errors), strict=True)
    ]


def instance_uri(request: Any) -> str:
    """The absolute URI of the request without its query (RFC 9457 ``instance``; MEC 015 declares it
    ``format: uri``, which a bare path does not satisfy): the path as received, percent-encoded again so
    that any byte sequence yields a valid URI (RFC 3986 §2.1): a percent-encoded octet the client sent stays as
    it was (``/v1/nothing%20here``: it became ``%2520``), a ``%`` that starts none is encoded itself."""
    raw = request.scope.get("raw_path") or request.url.path.encode("utf-8", "surrogateescape")
    path = _LONE_PERCENT.sub("%25", quote(raw, safe=URI_PATH_SAFE + "%"))
    return f"{request.url.scheme}://{request.url.netloc}{path}"


#: A ``%`` that does not start a percent-encoded octet (RFC 3986 §2.1: ``%`` HEXDIG HEXDIG).
_LONE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


#: The problem :func:`problem_response` answered last in this request's context, until :func:`take_problem` takes it:
#: how the REST transport's refusal log line (edgepath.rest.app.RequestMetrics) learns the field a refusal names,
#: whichever router answered it (the ``/v1`` routes' exception handlers, ``/mts/v1``'s own). Set on errors only.
_ANSWERED: ContextVar[dict[str, Any] | None] = ContextVar("edgepath_problem_answered", default=None)


def problem_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    """``body`` (:func:`problem_body`) as an ``application/problem+json`` answer with ``status`` (remembered for
    :func:`take_problem`)."""
    _ANSWERED.set(body)
    return Response(orjson.dumps(body), status_code=status, media_type=PROBLEM_JSON, headers=headers)


def take_problem() -> dict[str, Any] | None:
    """The problem body :func:`problem_response` answered in this context since the last call (None: none; the
    raw answers of the body-size bound and load shedding are not remembered), and forget it."""
    body = _ANSWERED.get()
    if body is not None:
        _ANSWERED.set(None)
    return body


def problem_bytes(status: int, message: str, *, kind: str) -> bytes:
    """A problem body pre-encoded for raw ASGI answers (body-size bound, load shedding)."""
    return orjson.dumps(problem_body(status, message, kind=kind))


#: Descriptions of each error status in the OpenAPI document.
STATUS_DOC: dict[int, str] = {
    400: "Malformed request (the body is not JSON, or MEC 015 validation): problem details naming the field",
    401: "Missing or invalid credentials (with WWW-Authenticate: Bearer)",
    403: "The caller may not act on this object (another device's decision, not an admin)",
    404: "Unknown or expired object (decision id, MTS session)",
    409: "Conflicts with recorded state",
    413: "Request body larger than the configured bound",
    422: "A value outside its documented range or of the wrong type: problem details naming the field",
    429: "Per-device budget exhausted (with Retry-After in seconds)",
    503: "Overloaded (shed, with Retry-After) or a dependency is unavailable",
}


def problem_responses(statuses: list[int] | tuple[int, ...]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for ``statuses``, each an ``application/problem+json`` :class:`Problem`."""
    return {
        code: {
            "description": STATUS_DOC.get(code, reason(code)),
            "content": {PROBLEM_JSON: {"schema": {"$ref": f"#/components/schemas/{PROBLEM_SCHEMA}"}}},
        }
        for code in statuses
    }


def declare_problems(doc: dict[str, Any], statuses_of: Any) -> None:
    """Rewrite every operation's error responses in the OpenAPI ``doc``: exactly the statuses
    ``statuses_of(path, method)`` returns, each with the :class:`Problem` schema (FastAPI's default 422 with
    its ``HTTPValidationError`` schema is replaced; that schema is dropped when nothing refers to it)."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    problem_schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in problem_schema.pop("$defs", {}).items():
        schemas[name] = sub
    schemas[PROBLEM_SCHEMA] = problem_schema
    for path, item in doc.get("paths", {}).items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            for code in [c for c in responses if not str(c).startswith("2")]:
                del responses[code]
            for code, entry in problem_responses(statuses_of(path, method)).items():
                responses[str(code)] = entry
    for unused in ("HTTPValidationError", "ValidationError"):  # in this order: the first refers to the second
        if unused in schemas and f'"#/components/schemas/{unused}"'.encode() not in orjson.dumps(doc):
            del schemas[unused]
