"""REST transport: FastAPI app over the :class:`~edgepath.plane.DecisionPlane`.

Routes: ``POST /v1/recommendations``, ``POST /v1/recommendations/batch``, ``POST /v1/outcomes``, ``GET /healthz``
(liveness), ``GET /readyz`` (readiness: state store reachable), ``GET /metrics``
(Prometheus), the admin quarantine routes, and the OpenAPI docs at ``/docs`` and ``/openapi.json``.

Every error is RFC 9457 ``application/problem+json`` (:mod:`edgepath.rest.problem`) with the status from
:data:`HTTP_STATUS`: a body that is not JSON is 400, a value out of its rules 422 naming the field; the
members clients read before (``error``, ``field``, ``message``) are kept as extension members, and a problem
naming a field lists it in ``errors`` whoever raised it (pydantic or an :class:`~edgepath.errors.EdgePathError`). Each
operation's OpenAPI entry declares exactly the error statuses it can answer (:func:`error_statuses`).
Every request carries an ``x-request-id`` (the caller's, or a generated one), echoed in the answer, in
problem bodies and in the JSON logs (:mod:`edgepath.logs`). A refused request (4xx) is one INFO line of
``edgepath.rest`` (:class:`RequestMetrics`: route, status, the problem's field, the caller when known, bounded by
a :class:`~edgepath.logs.RefusalLog`); a 5xx problem a WARNING with the same fields, bounded by a
:class:`~edgepath.logs.FaultLog` of its own (``/readyz``'s 503 is not: readiness changes are logged by
:meth:`edgepath.main.Service._watch_readiness`). ``/docs`` and ``/redoc`` serve their
JavaScript from the package (fastapi-offline): they work on an air-gapped edge node.

The hot routes (decisions and outcomes) take the raw body and validate it once, with pydantic's own
JSON parser straight into the domain model (:func:`~edgepath.rest.body.parse_body`), and answer with the
model's JSON serialised by pydantic-core (:func:`json_response`): no second validation of the reply, no
``jsonable_encoder`` (``loadtest/breakdown.py`` measured these at 35–65 % of a REST decision). Their
OpenAPI description still names the request and response models (:func:`documented_body`).

Each group of routes is added by one ``add_*_routes(app, plane, gate)`` call in :func:`create_app`, from the
plane and a :class:`Gate` (authentication and per-device rate limit); another group (e.g. an engine's own
API) is one more such line (or ``app.include_router(...)`` of its own ``APIRouter``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from enum import Enum
from typing import Annotated, Any, cast

import orjson
from asgi_correlation_id import CorrelationIdMiddleware
from asgi_correlation_id.context import correlation_id
from asgi_correlation_id.middleware import FAILED_VALIDATION_MESSAGE
from fastapi import APIRouter, FastAPI, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import PlainTextResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from edgepath.admission import RETRY_AFTER_MS, Admission
from edgepath.collector import BATCH_COLLECTOR_PAUSE
from edgepath.errors import (
    EdgePathError,
    ErrorKind,
    PermissionDenied,
    RateLimited,
    Unauthenticated,
    Unavailable,
)
from edgepath.logs import (
    CrashLog,
    FaultLog,
    Panicked,
    RefusalLog,
    exception_name,
    handler_fault,
    logged_text,
    new_request_id,
)
from edgepath.memo import IdentityMemo
from edgepath.metrics import Metrics
from edgepath.plane import DecisionPlane
from edgepath.rest.body import JSON as _JSON
from edgepath.rest.body import json_request_body, parse_body, request_body
from edgepath.rest.mts import MTS_BODY_MODELS, mts_router
from edgepath.rest.problem import (
    BODY,
    declare_problems,
    field_problems,
    instance_uri,
    problem_body,
    problem_bytes,
    problem_response,
    reason,
    take_problem,
)
from edgepath.security import DEFAULT_MAX_MESSAGE_BYTES, EdgeSecurity, batch_callers
from edgepath.security.asgi import BodySizeLimit
from edgepath.security.auth import declared_principal
from edgepath.types import (
    DEVICE_ID_PATTERN,
    OutcomeAck,
    OutcomeReport,
    Principal,
    Recommendation,
    RecommendBatch,
    RecommendBatchRequest,
    RecommendRequest,
)

#: A device id in an admin route's path: the rules of a request's ``device_id`` (422 naming it otherwise; an id no
#: device can send, ``"phone-1 "`` or one with a control character, quarantined nothing and went into the list).
DeviceIdPath = Annotated[str, PathParam(min_length=1, max_length=128, pattern=DEVICE_ID_PATTERN)]

#: The one table from error kinds to HTTP statuses.
HTTP_STATUS: dict[ErrorKind, int] = {
    ErrorKind.INVALID_INPUT: 422,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.CONFLICT: 409,
    ErrorKind.PERMISSION_DENIED: 403,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.UNAUTHENTICATED: 401,
    ErrorKind.RATE_LIMITED: 429,
}

log = logging.getLogger("edgepath.rest")
REQUEST_ID_HEADER = "x-request-id"
#: Where the ETSI MEC 015 routes (:func:`edgepath.rest.mts.mts_router`) are served.
MTS_PREFIX = "/mts/v1"
_REQUEST_ID_OK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:/+=")


#: ASGI scope key of a request's caller as far as its route knew it when it refused the request:
#: ``(authenticated principal's device id or None, device id the request declared or None, the JSON body that did
#: not validate or None)``; read by :class:`RequestMetrics` for the refusal's log line. The hot routes set it on
#: their error path only.
CALLER_KEY = "edgepath.caller"
_NO_CALLER: tuple[None, None, None] = (None, None, None)
#: Longest ``detail`` and path a refusal's log line carries (characters); a client chooses both.
_LOGGED_CHARS = 256
#: Routes whose 5xx answers are not server faults of a request: ``/readyz``'s 503 answers the probe (not ready);
#: the changes of readiness are logged once each (:meth:`edgepath.main.Service._watch_readiness`), not per probe.
_UNLOGGED_FAULT_ROUTES = frozenset({"/readyz"})
#: What a 500 without a problem is (a handler raised; its 500 problem is answered further out, the traceback logged
#: by :meth:`RequestMetrics.crashed`): the error kind of the problem the client gets.
_RAISED: dict[str, Any] = {"error": "internal"}
#: ASGI scope key of the exception a request's handler raised once :meth:`RequestMetrics.crashed` logged it (or
#: left it out of the log, counted): :class:`AnsweredCrashes` keeps it from the server, which would log it again.
CRASH_KEY = "edgepath.crash"
#: The status a request whose client went away before its body was read counts as (:class:`RequestMetrics`;
#: nginx's "client closed request"): no answer was sent, none is logged.
CLIENT_CLOSED = 499


def note_caller(
    request: Request, caller: Principal | None, declared_device_id: str | None, raw_body: bytes | None = None
) -> None:
    """Remember the caller of a request being refused (:data:`CALLER_KEY`), for its log line; ``raw_body``: the
    JSON body that did not validate, whose ``device_id`` the line names (:func:`declared_device_id`, read only when
    the line is written, or when nothing else names the caller)."""
    request.scope[CALLER_KEY] = (caller.device_id if caller is not None else None, declared_device_id, raw_body)


def declared_device_id(raw_body: bytes | None) -> str | None:
    """The ``device_id`` string a JSON body that did not validate declares at its top level, cut to
    :data:`_LOGGED_CHARS` (:func:`~edgepath.logs.logged_text`); None when it is not a JSON object or declares none.
    Read on a refusal's path only (one more parse of a body the service refused)."""
    if not raw_body:
        return None
    try:
        document = orjson.loads(raw_body)
    except orjson.JSONDecodeError:
        return None
    value = document.get("device_id") if isinstance(document, dict) else None
    return logged_text(value, _LOGGED_CHARS) if isinstance(value, str) and value else None


class _ReplacedRequestIdUnlogged(logging.Filter):
    """Drops asgi-correlation-id's WARNING for each request whose ``x-request-id`` failed :func:`valid_request_id`:
    anyone could write one log line per request with a bad header (no credentials needed), where refusals are
    bounded (:class:`~edgepath.logs.RefusalLog`) and the gRPC transport replaces a bad id silently. The id is still
    replaced, and the reply carries the new one."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != FAILED_VALIDATION_MESSAGE


_CORRELATION_LOG = logging.getLogger("asgi_correlation_id")
if not any(isinstance(f, _ReplacedRequestIdUnlogged) for f in _CORRELATION_LOG.filters):
    _CORRELATION_LOG.addFilter(_ReplacedRequestIdUnlogged())


def valid_request_id(value: str) -> bool:
    """A caller's ``x-request-id`` is kept when it is 1-128 characters of ``[A-Za-z0-9-_.:/+=]`` (UUIDs, W3C
    trace ids, ...); anything else is replaced by a generated one (never echoed into logs as is)."""
    return 0 < len(value) <= 128 and all(c in _REQUEST_ID_OK for c in value)


class QuarantineList(BaseModel):
    """Devices whose outcomes are acknowledged but not trained on (admin endpoints)."""

    devices: list[str]


_OUTCOME_LINK = {
    "operationId": "report_outcome",
    "requestBody": {"device_id": "$request.body#/device_id", "decision_id": "$response.body#/decision_id"},
    "description": "Report the measured outcome of this decision (same device, its decision_id).",
}
#: Documents the bearer scheme in OpenAPI (the hot routes authenticate in :class:`Gate`, not through FastAPI's DI).
_bearer = HTTPBearer(auto_error=False, description="Device token (`edgepath tokens add`) or HS256 JWT")
_BEARER_SCHEME = "HTTPBearer"
#: The routes served to anyone, authentication on or off (no security requirement in the OpenAPI document).
_OPEN_PATHS = ("/healthz", "/readyz", "/metrics")


# --- one validation per request, pydantic-core JSON both ways ---------------------------------------------------------
def json_response(model: BaseModel, status_code: int = 200) -> Response:
    """``model`` serialised by pydantic-core (``None`` members included, as the OpenAPI schema says)."""
    return Response(model.model_dump_json(), status_code=status_code, media_type=_JSON)


def _fragment(model: BaseModel) -> orjson.Fragment:
    return orjson.Fragment(model.model_dump_json())


#: The JSON of the sections the engine adapters share between replies (one frozen object per distinct steering rule
#: and per congestion context), made once per object (:class:`~edgepath.memo.IdentityMemo`): their serialisation was
#: ~60 % of a recommendation's (steering ~6.2 µs, congestion ~2.7 of ~14.9; issue 16).
_SHARED_SECTIONS: dict[str, IdentityMemo[orjson.Fragment]] = {
    "congestion": IdentityMemo(_fragment),
    "steering": IdentityMemo(_fragment),
}


def recommendation_json(rec: Recommendation) -> orjson.Fragment:
    """``rec.model_dump_json()``, byte for byte, with the shared sections' JSON kept per object
    (:data:`_SHARED_SECTIONS`): the members in the model's order, each other section and the primary path by
    pydantic-core, the plain members by orjson (strings and integers: the same bytes). A reply with a section the
    model does not declare (an extra member) is serialised by pydantic-core whole."""
    if rec.__pydantic_extra__:
        return orjson.Fragment(rec.model_dump_json())
    members: dict[str, Any] = {}
    for name, value in rec.__dict__.items():
        memo = _SHARED_SECTIONS.get(name)
        if memo is not None:
            members[name] = memo(value)
        elif isinstance(value, BaseModel):
            members[name] = _fragment(value)
        else:
            members[name] = value
    return orjson.Fragment(orjson.dumps(members))


def recommendation_response(recs: Recommendation | Sequence[Recommendation]) -> Response:
    """A ``Recommendation`` (``/v1/recommendations``) or a ``RecommendBatch`` of ``recs``
    (``/v1/recommendations/batch``) as :func:`json_response` writes it (:func:`recommendation_json`)."""
    if isinstance(recs, Recommendation):
        body = orjson.dumps(recommendation_json(recs))
    else:
        body = orjson.dumps({"recommendations": [recommendation_json(r) for r in recs]})
    return Response(body, media_type=_JSON)


def json_body(content: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A plain JSON reply (errors, health) encoded with orjson."""
    return Response(orjson.dumps(content), status_code=status_code, media_type=_JSON, headers=headers)


def documented_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` of a route that parses its body itself: the request body is ``model``.

    The model's schema (and its nested ones) are added to the document's components by
    :func:`install_openapi`.
    """
    return {"requestBody": request_body(model)}


def error_statuses(path: str, method: str) -> tuple[int, ...]:
    """The error statuses operation ``method path`` can answer (each declared with the problem schema).

    413 (:class:`~edgepath.security.asgi.BodySizeLimit`) applies to every request; 503 load shedding
    (:class:`ShedPastCapacity`), 401 and 429 (:class:`Gate`) to the ``/v1`` routes, 415 to those that take a JSON
    body (:func:`~edgepath.rest.body.json_request_body`, ``/mts/v1``'s POST and PUT too); ``/mts/v1`` answers 400
    for any invalid request (MEC 015) and 503 while the state store is unreachable.
    """
    if path.startswith("/mts/v1/"):
        takes_body = (path, method) in (("/mts/v1/mts_sessions", "post"), ("/mts/v1/mts_sessions/{sessionId}", "put"))
        return (400, 401, 403, 404, 413, 415, 429, 503) if takes_body else (400, 401, 403, 404, 413, 429, 503)
    if path.startswith("/v1/admin/"):
        return (401, 403, 413, 422, 429, 503)
    if path == "/v1/status":
        return (401, 403, 413, 429, 503)
    if path == "/v1/outcomes":
        return (400, 401, 403, 404, 413, 415, 422, 429, 503)
    if path in ("/v1/recommendations", "/v1/recommendations/batch"):
        return (400, 401, 403, 413, 415, 422, 429, 503)
    if path.startswith("/v1/"):
        return (400, 401, 403, 413, 422, 429, 503)
    if path == "/readyz":
        return (413, 503)
    return (413,)


def security_requirement(path: str, auth_required: bool) -> list[dict[str, list[str]]] | None:
    """The OpenAPI ``security`` of the operations of ``path`` (None: none), as the service enforces it.

    With authentication on (``auth_required``: a tokens file, a JWT key or client certificates) every ``/v1`` and
    ``/mts/v1`` route answers 401 without a valid bearer credential: the scheme is required, so a generated client
    sends it. With authentication off any credential is ignored: optional (the ``{}`` alternative), but for the
    admin routes, which need an admin identity either way (403 whatever is sent while no authentication is
    configured: :meth:`Gate.admin`). The health routes (:data:`_OPEN_PATHS`) are served to anyone.
    """
    if path in _OPEN_PATHS:
        return None
    if auth_required or path.startswith("/v1/admin/"):
        return [{_BEARER_SCHEME: []}]
    return [{_BEARER_SCHEME: []}, {}]


def known_answers(
    app: FastAPI, included: Sequence[tuple[APIRoute, str]] = (), excluded: Sequence[str] = ("/metrics",)
) -> list[tuple[str, str, tuple[int, ...]]]:
    """``(route template, HTTP method, statuses)`` of every operation of ``app``'s OpenAPI document but
    ``excluded`` (its own routes, and ``included``: the routes of its included routers with their full templates):
    its success status, the error statuses it declares (:func:`error_statuses`) and 500 (a handler that raised).
    The request counter's label sets known in advance (:meth:`~edgepath.metrics.Metrics.initialise_http_routes`);
    an unknown path (``handler="none"``) or method is not, its label values being the client's."""
    routes = [(r, r.path) for r in app.routes if isinstance(r, APIRoute)] + list(included)
    answers = []
    for route, template in routes:
        if route.include_in_schema and template not in excluded:
            for method in sorted(route.methods or ()):
                statuses = (route.status_code or 200, *error_statuses(template, method.lower()), 500)
                answers.append((template, method, tuple(dict.fromkeys(statuses))))
    return answers


def install_openapi(app: FastAPI, body_models: Sequence[type[BaseModel]], auth_required: bool = False) -> None:
    """Generate the OpenAPI document as FastAPI does, plus the schemas of the self-parsed request bodies, the
    problem responses of every operation (:func:`error_statuses`, :func:`.problem.declare_problems`) and its
    security requirement (:func:`security_requirement`: required when ``auth_required``, the service's
    authentication being on)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        components = doc.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        for model in body_models:
            schema = model.model_json_schema(ref_template="#/components/schemas/{model}", mode="validation")
            for name, sub in schema.pop("$defs", {}).items():
                schemas.setdefault(name, sub)
            schemas[model.__name__] = schema
        components.setdefault("securitySchemes", {})[_BEARER_SCHEME] = {
            "type": "http",
            "scheme": "bearer",
            "description": _bearer.model.description,
        }
        declare_problems(doc, error_statuses)
        for path, item in doc.get("paths", {}).items():
            for operation in item.values():
                if not isinstance(operation, dict):
                    continue
                requirement = security_requirement(path, auth_required)
                if requirement is None:
                    operation.pop("security", None)
                else:
                    operation["security"] = requirement
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


class ShedPastCapacity:
    """ASGI middleware: past capacity (:class:`~edgepath.admission.Admission`) a ``/v1`` request is answered
    503 with ``Retry-After`` at once, before its body is read (a bounded queue: admitted requests keep their
    latency, the excess is told when to come back). Health, readiness and metrics are never shed.

    A request is in flight while the service works on it, not while it waits for its client's body bytes: clients
    that sent the headers of 64 ``POST /v1/recommendations`` and then too few body bytes (or none; uvicorn bounds
    no body's time) held every slot for as long as they kept their connections, and every other ``/v1`` request
    was answered 503."""

    def __init__(self, app: Any, admission: Admission, on_shed: Any) -> None:
        self.app = app
        self.admission = admission
        self.on_shed = on_shed
        self.inflight = 0
        self._body = problem_bytes(503, "overloaded; retry after 1 s", kind=ErrorKind.UNAVAILABLE.value)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        if self.admission.shed(self.inflight):
            self.on_shed()
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/problem+json"),
                        (b"content-length", str(len(self._body)).encode()),
                        (b"retry-after", str(max(1, math.ceil(RETRY_AFTER_MS / 1000))).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": self._body})
            return
        self.inflight += 1

        async def receive_uncounted() -> Any:
            self.inflight -= 1  # waiting on the client, not working for it
            try:
                return await receive()
            finally:
                self.inflight += 1

        try:
            await self.app(scope, receive_uncounted, send)
        finally:
            self.inflight -= 1


class RequestMetrics:
    """ASGI middleware: each HTTP request counted by route template, method and status
    (``edgepath_http_requests_total{handler,method,status}``) and timed by route template and method
    (``edgepath_http_request_duration_seconds``, :data:`~edgepath.metrics.REQUEST_SECONDS_BUCKETS`, s); the
    names, labels and conventions of prometheus-fastapi-instrumentator, which did this before (``handler`` is the
    matched route's path template, ``none`` when no route matched; ``/metrics`` is not counted; an exception
    counts as 500). Routes are not matched again per request: the template comes from the route FastAPI's router
    left in the scope (``included``: the full template of a route of an included router, whose own path FastAPI
    leaves there without the router's prefix), or from the endpoint a plain Starlette route left there. An outcome
    report refused 429 or 503 is also counted in ``edgepath_outcomes_total``
    (:meth:`~edgepath.metrics.Metrics.http_request`).

    Every refused request (4xx, whoever answered it: an exception handler, ``/mts/v1``, the body-size bound) is one
    INFO line of ``edgepath.rest`` through ``refusals`` (:class:`~edgepath.logs.RefusalLog`: at most a few lines per
    second, the others counted): ``transport`` ``rest``, ``method``, ``route`` (the template), ``path``,
    ``status``, the problem's ``field``, ``error`` and ``detail`` (:func:`~edgepath.rest.problem.take_problem`),
    the ``principal`` (authenticated device or admin) and the ``device_id`` the request declared when its route
    knew them (:data:`CALLER_KEY`; for a body that did not validate, the ``device_id`` string it declares), the
    client's address (``peer``), and the request id of every line. Never a credential or the body. A successful
    request pays one comparison for it.

    Every 5xx problem (a ``/v1`` or ``/mts/v1`` route's, a handler that raised) is one WARNING line of the same
    fields through ``faults`` (:class:`~edgepath.logs.FaultLog`: its own budget, the first line of each route and
    status written at once); not the raw 503 of load shedding (counted in ``edgepath_shed_total``), nor
    ``/readyz``'s (:data:`_UNLOGGED_FAULT_ROUTES`). The lines left out are counted on the next one written with the
    callers of most of them (``suppressed_by``: principal, else declared device, else ``peer <address>``).

    A handler that raised is also one ERROR line with its traceback through ``crashes``
    (:class:`~edgepath.logs.CrashLog`, :meth:`crashed`): the first of each route, method and exception type at once,
    the repeats bounded and counted; :class:`AnsweredCrashes` keeps the exception from uvicorn, which logged one
    traceback per request ("Exception in ASGI application").

    The counts are the plane's hot metrics (:class:`~edgepath.metrics.HotCounter`, no lock per request) — issue
    16 asks for metrics without a lock on the hot path: the instrumentator cost 37–39 µs of a REST call
    (``loadtest/breakdown.py --n 3000 --model models/primary-path-v2``: whole Recommend handler 273.7 µs with it,
    234.9 µs without).
    """

    def __init__(
        self,
        app: Any,
        metrics: Metrics,
        excluded: Sequence[str] = ("/metrics",),
        refusals: RefusalLog | None = None,
        included: Sequence[tuple[Any, str]] = (),
        faults: FaultLog | None = None,
        crashes: CrashLog | None = None,
    ) -> None:
        self.app = app
        self.record = metrics.http_request
        self.excluded = frozenset(excluded)
        self.included = {id(route): template for route, template in included}  # routes compare by value: by id
        self.refusals = refusals or RefusalLog(log)
        self.faults = faults or FaultLog(log)
        self.crashes = crashes or CrashLog(log)
        self._templates: dict[Any, str] | None = None

    def _template_of(self, scope: dict[str, Any]) -> str:
        """The path template of the route whose endpoint served ``scope``; for a request answered before routing
        (shed 503, 413) the route its path matches; ``none`` when no route matches."""
        routes = getattr(scope.get("app"), "routes", ())
        endpoint = scope.get("endpoint")
        if endpoint is not None:
            if self._templates is None:  # the app's routes, once: endpoint -> path template
                self._templates = {r.endpoint: r.path for r in routes if hasattr(r, "endpoint") and hasattr(r, "path")}
            return self._templates.get(endpoint, "none")
        for route in routes:  # not routed: off the decision path's normal flow, so matching here costs little
            if route.matches(scope)[0] is Match.FULL:
                return getattr(route, "path", "none")
        return "none"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_and_see_status(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_see_status)
        except ClientDisconnect:
            # the client went away before its body was read (starlette's Request.body() raises it): nothing to
            # answer, nobody's fault of ours (it counted 500, with a traceback at ERROR and a WARNING line)
            status = CLIENT_CLOSED
        except Exception as exc:
            self.crashed(scope, self._handler_of(scope), exc)
            raise  # answered 500 by the app's outermost middleware, then kept from the server (AnsweredCrashes)
        except BaseException as exc:
            if not handler_fault(exc):
                raise
            # a panic of edgepath_native (pyo3's PanicException): Starlette's ServerErrorMiddleware answers only an
            # Exception, so it passed it to uvicorn (text/plain 500, one traceback per request); raised as one here
            self.crashed(scope, self._handler_of(scope), exc)
            fault = Panicked(exception_name(exc))
            scope[CRASH_KEY] = fault  # logged: kept from the server as an Exception logged is (AnsweredCrashes)
            raise fault from exc
        finally:
            handler = self._handler_of(scope)
            if handler not in self.excluded:
                self.record(handler, scope["method"], status, time.perf_counter() - start)
            if status >= 400 and status != CLIENT_CLOSED:
                self.refused(scope, handler, status)

    def _handler_of(self, scope: dict[str, Any]) -> str:
        """The path template of the route that served ``scope`` (:meth:`_template_of`)."""
        # FastAPI's router puts its own routes in the scope; a plain route (the hot ones) leaves its endpoint there
        route = scope.get("route")
        if route is None:
            return self._template_of(scope)
        return self.included.get(id(route)) or route.path

    def crashed(self, scope: dict[str, Any], handler: str, exc: BaseException) -> None:
        """The ERROR line, with its traceback, of a request whose handler raised ``exc``, through :attr:`crashes`
        (the first of each route, method and exception type at once, the others bounded and counted, by caller);
        ``exc`` is then marked logged (:data:`CRASH_KEY`), for :class:`AnsweredCrashes`."""
        scope[CRASH_KEY] = exc
        crashes = self.crashes
        if not crashes.enabled():
            return
        principal, device_id, _ = scope.get(CALLER_KEY) or _NO_CALLER
        client = scope.get("client")
        method = scope["method"]
        name = exception_name(exc)
        key = principal or device_id or (f"peer {client[0]}" if client else None)
        if not crashes.admit_fault((handler, method, name), key):
            return
        crashes.write(
            "%s %s failed: unexpected %s",
            (method, handler, name),
            {
                "transport": "rest",
                "method": method,
                "route": handler,
                "path": str(scope.get("path", ""))[:_LOGGED_CHARS],
                "status": 500,
                "error": _RAISED["error"],
                "exception": name,
                "principal": principal,
                "device_id": device_id,
                "peer": f"{client[0]}:{client[1]}" if client else None,
            },
            exc_info=exc,
        )

    def refused(self, scope: dict[str, Any], handler: str, status: int) -> None:
        """The log line of a request answered ``status`` (≥ 400): INFO for a 4xx, WARNING for a 5xx, each bounded
        by its own limiter (class docstring)."""
        problem = take_problem()  # taken whatever the status: never another request's
        if status >= 500:
            # no problem: a raw answer (load shedding), or a handler that raised (500, answered further out)
            if handler in _UNLOGGED_FAULT_ROUTES or (problem is None and status != 500):
                return
            limiter: RefusalLog = self.faults
        else:
            limiter = self.refusals
        if not limiter.enabled():
            return
        principal, device_id, raw_body = scope.get(CALLER_KEY) or _NO_CALLER
        client = scope.get("client")
        if principal is None and device_id is None:
            device_id = declared_device_id(raw_body)
            raw_body = None
        key = principal or device_id or (f"peer {client[0]}" if client else None)
        problem = problem or (_RAISED if status == 500 else {})
        if limiter is self.faults:
            fault = (handler, status, problem.get("error"))
            if not self.faults.admit_fault(fault, key):
                return
            message = "failed %s %s: %d %s"
        elif not limiter.admit(key):
            return
        else:
            message = "refused %s %s: %d %s"
        if device_id is None:
            device_id = declared_device_id(raw_body)
        method = scope["method"]
        detail = str(problem.get("detail") or reason(status))[:_LOGGED_CHARS]
        args: tuple[Any, ...] = (method, handler, status, detail)
        limiter.write(
            message,
            args,
            {
                "transport": "rest",
                "method": method,
                "route": handler,
                "path": str(scope.get("path", ""))[:_LOGGED_CHARS],
                "status": status,
                "field": problem.get("field"),
                "error": problem.get("error"),
                "principal": principal,
                "device_id": device_id,
                "peer": f"{client[0]}:{client[1]}" if client else None,
            },
        )


class AnsweredCrashes:
    """ASGI wrapper of the whole app (Starlette's ``ServerErrorMiddleware`` included): an exception a handler raised
    that :meth:`RequestMetrics.crashed` logged (:data:`CRASH_KEY`) ends here. ``ServerErrorMiddleware`` answers it
    500 (the app's ``Exception`` handler: a problem with the request id) and re-raises it "for the server to log":
    uvicorn wrote "Exception in ASGI application" and the traceback for every such request, unbounded. Any other
    exception goes on to the server. A request that raised nothing pays for a ``try`` only."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            if scope.get(CRASH_KEY) is not exc:
                raise


def answer_crashes(app: FastAPI) -> None:
    """Wrap ``app``'s middleware stack, once built, in :class:`AnsweredCrashes` (outside ``ServerErrorMiddleware``,
    which Starlette builds outermost)."""
    build = app.build_middleware_stack

    def build_middleware_stack() -> Any:
        return AnsweredCrashes(build())

    app.build_middleware_stack = build_middleware_stack  # type: ignore[method-assign]


# --- who is calling --------------------------------------------------------------------------------------------------
class Gate:
    """Authentication and the per-device request budget, shared by every router.

    With ``security`` every ``/v1`` route authenticates the bearer token (401 without a valid one
    when authentication is configured) and takes request tokens from the per-device buckets (429
    with ``Retry-After``). Without it (tests, library use) the self-declared ``device_id`` is trusted.

    The routes that take a body authenticate first (:meth:`authenticate`), before the body is read or parsed, so a
    caller without valid credentials learns nothing about its body (401, never a 422 naming a field) and costs no
    parse; the budget is taken after the parse (:meth:`device`, :meth:`devices`: a batch costs one token per
    decision, which the parsed body says), and the device-id match after that, in the plane.
    """

    def __init__(self, security: EdgeSecurity | None) -> None:
        self.security = security

    def authenticate(self, request: Request) -> Principal | None:
        """The verified caller of ``request`` (its ``Authorization: Bearer`` credential), or None when authentication
        is off. Takes no request token.

        Raises
        ------
        Unauthenticated
            Credentials required but missing or invalid.
        """
        if self.security is None:
            return None
        return self.security.auth.authenticate(authorization=request.headers.get("authorization"))

    async def caller(self, request: Request) -> Principal | None:
        """The authenticated caller (one request token taken here), or None when authentication is off.

        Raises
        ------
        Unauthenticated, RateLimited
        """
        principal = self.authenticate(request)
        if principal is not None and self.security is not None:
            note_caller(request, principal, None)  # admin and status routes only: not a hot path
            await self.security.admit(principal)
        return principal

    async def device(self, caller: Principal | None, declared_device_id: str) -> Principal:
        """The principal of a single request, one request token taken from its bucket: ``caller``
        (:meth:`authenticate`'s), or (authentication off: dev on loopback) the self-declared device.

        Raises
        ------
        RateLimited
        """
        principal = caller if caller is not None else declared_principal(declared_device_id)
        if self.security is not None:
            await self.security.admit(principal)
        return principal

    async def devices(self, caller: Principal | None, declared_device_ids: Sequence[str]) -> list[Principal]:
        """The caller of each item of a batch, its request tokens taken (:func:`~edgepath.security.batch_callers`).

        Raises
        ------
        RateLimited, InvalidInput
            A device's bucket cannot pay for its items.
        """
        return await batch_callers(self.security, caller, declared_device_ids)

    async def admin(self, request: Request) -> Principal:
        """The authenticated caller of an admin route (the plane checks the admin flag).

        Raises
        ------
        PermissionDenied
            Authentication is off (no tokens file, JWT key or client CA configured): no credential could ever be
            an admin's, so a 401 asking for one would mislead; the 403 says what to configure.
        Unauthenticated
            Authentication on, no credentials presented.
        """
        if self.security is None or not self.security.auth.required:
            raise PermissionDenied(
                "admin endpoints need an admin identity, and this service has no authentication configured: give "
                "it a tokens file with an admin token (edgepath tokens add ID --admin) or a JWT key (README "
                '"Security")'
            )
        principal = await self.caller(request)
        if principal is None:
            raise Unauthenticated("admin endpoints need credentials")
        return principal


# --- routers ---------------------------------------------------------------------------------------------------------
#: The decision path's routes (:func:`add_decisions_routes`), served by :func:`serve_hot_routes_plain`.
HOT_PATHS = ("/v1/recommendations", "/v1/recommendations/batch", "/v1/outcomes")


def serve_hot_routes_plain(app: FastAPI, paths: Sequence[str]) -> None:
    """Serve the FastAPI routes of ``paths`` through plain Starlette routes placed first in the router.

    Their endpoints take the raw ``Request`` and return a ``Response`` (one pydantic parse of the body, no
    dependencies), so FastAPI's per-call wrapper (dependency solving, its exit stacks) does nothing for them but
    costs: ``loadtest/breakdown.py --n 3000 --model models/primary-path-v2`` measured the whole REST Recommend
    handler at 338.5 µs median through the FastAPI route and 278.3 µs through the plain one (ReportOutcome 248.3
    → 190.0 µs). The same endpoint functions run; Starlette's route applies the app's exception handlers as
    FastAPI's does (problem details unchanged). The FastAPI routes stay registered behind them: the OpenAPI
    document is generated from them, and they never match first.
    """
    from starlette.routing import Route

    hot = [r for r in app.router.routes if isinstance(r, APIRoute) and r.path in paths]
    for route in reversed(hot):
        # an APIRoute always has its methods (["GET"] when none are given); the attribute's type is Starlette's
        # Route's, where None means any method
        methods = cast(set[str], route.methods)
        plain = Route(route.path, route.endpoint, methods=list(methods), name=route.name, include_in_schema=False)
        app.router.routes.insert(0, plain)


def add_decisions_routes(router: FastAPI | APIRouter, plane: DecisionPlane, gate: Gate) -> None:
    """``POST /v1/recommendations`` and ``POST /v1/outcomes``: the hot path."""
    tags: list[str | Enum] = ["decisions"]

    @router.post(
        "/v1/recommendations",
        tags=tags,
        response_model=Recommendation,
        # OpenAPI link decision → outcome (clients and schemathesis's stateful tests follow it).
        responses={200: {"links": {"ReportOutcome": _OUTCOME_LINK}}},
        openapi_extra=documented_body(RecommendRequest),
    )
    async def recommend(request: Request) -> Response:
        """Radio context in, recommendation (primary path, decision record) out."""
        caller = gate.authenticate(request)  # 401 before the body is read
        try:  # the excepts note the caller for a refusal's log line: nothing on the success path (Python ≥ 3.11)
            raw = await json_request_body(request)
        except Exception:
            note_caller(request, caller, None)
            raise
        try:
            body = parse_body(raw, RecommendRequest)
        except Exception:  # the body's device_id, if it has one, is read only for the log line
            note_caller(request, caller, None, raw)
            raise
        try:
            return recommendation_response(await plane.recommend(await gate.device(caller, body.device_id), body))
        except Exception:
            note_caller(request, caller, body.device_id)
            raise

    @router.post(
        "/v1/recommendations/batch",
        tags=tags,
        response_model=RecommendBatch,
        operation_id="recommend_batch",
        openapi_extra=documented_body(RecommendBatchRequest),
    )
    async def recommend_batch(request: Request) -> Response:
        """Many devices' contexts in (a gateway for its clients), one recommendation each out, in order.

        An invalid item refuses the whole batch (422 naming ``requests[i]....``); nothing is decided. Each decision
        costs one request token (:meth:`Gate.devices`): a batch over budget is 429 with ``Retry-After``.
        """
        caller = gate.authenticate(request)  # 401 before the body (up to 256 contexts) is read or parsed
        try:  # the except notes the caller (a gateway; its items name many devices) for a refusal's log line
            raw = await json_request_body(request)
            with BATCH_COLLECTOR_PAUSE:  # the batch's objects live until the reply: nothing to collect
                body = parse_body(raw, RecommendBatchRequest)
                principals = await gate.devices(caller, [r.device_id for r in body.requests])
                recs = await plane.recommend_batch(list(zip(principals, body.requests, strict=True)))
                return recommendation_response(recs)
        except Exception:
            note_caller(request, caller, None)
            raise

    @router.post(
        "/v1/outcomes",
        tags=tags,
        response_model=OutcomeAck,
        operation_id="report_outcome",
        openapi_extra=documented_body(OutcomeReport),
    )
    async def report_outcome(request: Request) -> Response:
        """Measured outcome of a decision in; acknowledgement out (idempotent)."""
        caller = gate.authenticate(request)  # 401 before the body is read
        try:  # as recommend: the caller noted for a refusal's log line, on the error path only
            raw = await json_request_body(request)
        except Exception:
            note_caller(request, caller, None)
            raise
        try:
            body = parse_body(raw, OutcomeReport)
        except Exception:
            note_caller(request, caller, None, raw)
            raise
        try:
            return json_response(await plane.report_outcome(await gate.device(caller, body.device_id), body))
        except Exception:
            note_caller(request, caller, body.device_id)
            raise


def add_admin_routes(router: FastAPI | APIRouter, plane: DecisionPlane, gate: Gate) -> None:
    """Quarantine management (admin identity required)."""
    tags: list[str | Enum] = ["admin"]

    @router.get("/v1/admin/quarantine", tags=tags, response_model=QuarantineList)
    async def list_quarantine(request: Request) -> QuarantineList:
        """Quarantined devices (admin identity required)."""
        return QuarantineList(devices=await plane.quarantined_devices(await gate.admin(request)))

    @router.put("/v1/admin/quarantine/{device_id}", tags=tags, response_model=QuarantineList)
    async def quarantine(request: Request, device_id: DeviceIdPath) -> QuarantineList:
        """Stop training on ``device_id``'s outcomes (admin identity required)."""
        return QuarantineList(devices=await plane.set_quarantine(await gate.admin(request), device_id, True))

    @router.delete("/v1/admin/quarantine/{device_id}", tags=tags, response_model=QuarantineList)
    async def release(request: Request, device_id: DeviceIdPath) -> QuarantineList:
        """Train on ``device_id``'s outcomes again (admin identity required)."""
        return QuarantineList(devices=await plane.set_quarantine(await gate.admin(request), device_id, False))


def add_health_routes(router: FastAPI | APIRouter, plane: DecisionPlane, metrics: bool = True) -> None:
    """Liveness, readiness and (``metrics``: unless they have a port of their own) Prometheus metrics."""
    tags: list[str | Enum] = ["health"]

    @router.get("/healthz", tags=tags)
    async def healthz() -> dict[str, str]:
        """Liveness: the process serves HTTP."""
        return {"status": "ok"}

    @router.get("/readyz", tags=tags)
    async def readyz(request: Request) -> Response:
        """Readiness: the state store is reachable (503 problem with ``degraded: true`` while it is not; decisions
        go on)."""
        ok = await plane.ready()
        draining = plane.draining  # shutting down (SIGTERM): out of the Service, not degraded
        body: dict[str, Any] = {"ready": ok, "degraded": not ok and not draining}
        body["model_version"] = plane.registry.current.version
        if draining:
            body["draining"] = True
        if ok:
            return json_body(body)
        message = (
            "draining: shutting down, calls in flight finish"
            if draining
            else "state store unreachable; deciding with the last model"
        )
        problem = problem_body(
            503,
            message,
            kind=ErrorKind.UNAVAILABLE.value,
            instance=instance_uri(request),
            request_id=correlation_id.get(),
            **body,
        )
        return problem_response(503, problem, {"Retry-After": "1"})

    if not metrics:
        return

    @router.get("/metrics", tags=tags, response_class=PlainTextResponse)
    async def prometheus_metrics() -> PlainTextResponse:
        """Prometheus exposition of this process's metrics."""
        return PlainTextResponse(generate_latest(plane.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def add_status_route(router: FastAPI | APIRouter, plane: DecisionPlane, gate: Gate) -> None:
    """``GET /v1/status``: serving mode, model and (apprentice mode) the learner's OPE estimate vs the baseline.

    An operator's view of the service-wide learning state, so with authentication configured it is an admin
    route: an admin identity (401 without credentials, 403 for a device), one request token of its bucket (429).
    Without authentication (``dev`` on loopback) it is as open as the rest of the service.
    """

    @router.get("/v1/status", tags=["health"])
    async def status(request: Request) -> Response:
        """Serving mode and model version; in apprentice mode the estimates, who serves, promotion events (admin
        identity required when authentication is configured)."""
        caller = await gate.caller(request)
        if caller is not None and not caller.is_admin:
            raise PermissionDenied("admin identity required")
        return json_body(plane.status())


def create_app(
    plane: DecisionPlane,
    security: EdgeSecurity | None = None,
    admission: Admission | None = None,
    tracer_provider: Any = None,
    serve_metrics: bool = True,
) -> FastAPI:
    """Build the FastAPI application bound to ``plane`` (``security``: see :class:`Gate`; past capacity,
    ``admission``, new ``/v1`` requests are shed: :class:`ShedPastCapacity`; ``tracer_provider``, an
    OpenTelemetry ``TracerProvider``, traces every request: :mod:`edgepath.tracing`; ``serve_metrics=False``
    leaves ``GET /metrics`` to the metrics port of its own, settings ``metrics_port``)."""
    app = FastAPIOffline(
        title="EdgePath",
        version="0.1.0",
        description="Path recommendations for multipath (MPTCP) devices: primary path per radio context.",
    )

    @app.exception_handler(EdgePathError)
    async def _edgepath_error(request: Request, exc: EdgePathError) -> Response:
        headers: dict[str, str] = {}
        if isinstance(exc, RateLimited):
            headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))  # RFC 9110 §10.2.3: whole seconds
        elif isinstance(exc, Unauthenticated):
            headers["WWW-Authenticate"] = "Bearer"
        elif isinstance(exc, Unavailable):
            headers["Retry-After"] = "1"  # issue 17: a documented retryable status (state store away, ...)
        status = HTTP_STATUS[exc.kind]
        body = problem_body(
            status,
            exc.message,
            kind=exc.kind.value,
            field=exc.field,
            instance=instance_uri(request),
            request_id=correlation_id.get(),
        )
        return problem_response(status, body, headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        """Starlette's own errors (unknown path 404, 405, a body FastAPI cannot read) and a body not sent as JSON
        (:class:`~edgepath.rest.body.NotJson`, 415 naming the ``field`` ``body``) as problem details."""
        kind = ErrorKind.NOT_FOUND if exc.status_code == 404 else ErrorKind.INVALID_INPUT
        body = problem_body(
            exc.status_code,
            str(exc.detail),
            kind=kind.value,
            field=getattr(exc, "field", None),
            instance=instance_uri(request),
            request_id=correlation_id.get(),
        )
        return problem_response(exc.status_code, body, dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def _unexpected_error(request: Request, exc: Exception) -> Response:
        """A handler that raised (a bug, a dependency's error nobody mapped): 500 as problem details carrying the
        request id, with nothing of the exception in it (its type and message may name internals: CWE-209). Called
        by Starlette's outermost middleware, which re-raises ``exc`` after sending this; :class:`RequestMetrics`
        logged it already, with its traceback under the same request id, bounded (:meth:`RequestMetrics.crashed`),
        and :class:`AnsweredCrashes` keeps it from uvicorn, which logged every one. Before, the client got a
        ``text/plain`` "Internal Server Error" without the request id, and the traceback was in uvicorn's own
        format."""
        request_id = correlation_id.get()
        body = problem_body(
            500,
            "internal error: the server's log names it by this request id",
            kind="internal",
            instance=instance_uri(request),
            request_id=request_id,
        )
        return problem_response(500, body, {REQUEST_ID_HEADER: request_id} if request_id else None)

    mts = mts_router(plane, security, note_caller)  # a refused request's line names its caller
    app.include_router(mts, prefix=MTS_PREFIX)  # ETSI MEC 015 Traffic Steering (issue 19)
    # their templates with the prefix (FastAPI leaves a route's own path, /mts_sessions, in the scope)
    included = [(route, MTS_PREFIX + route.path) for route in mts.routes if isinstance(route, APIRoute)]

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        """422 naming every invalid field; 400 when the body is not JSON at all (RFC 9110 §15.5.1). The first
        entry of ``errors`` is the problem's ``field`` and ``message`` (``body`` for the body as a whole)."""
        errors = exc.errors()
        problems = field_problems(errors) or [{"field": BODY, "message": "invalid request"}]
        malformed = any(e.get("type") == "json_invalid" for e in errors)
        status = 400 if malformed else 422
        body = problem_body(
            status,
            problems[0]["message"],
            kind=ErrorKind.INVALID_INPUT.value,
            field=problems[0]["field"],
            instance=instance_uri(request),
            request_id=correlation_id.get(),
            errors=problems,
        )
        return problem_response(status, body)

    # security: body size bound before anything reads the body
    app.add_middleware(BodySizeLimit, max_bytes=security.max_message_bytes if security else DEFAULT_MAX_MESSAGE_BYTES)
    # Outermost of ours (added last): a shed request costs no body read, no validation.
    app.add_middleware(
        ShedPastCapacity,
        admission=admission or Admission(),
        on_shed=lambda: plane.metrics.shed.labels("rest").inc(),
    )
    # Outermost: every answer (a shed one too) carries the request's x-request-id.
    app.add_middleware(
        CorrelationIdMiddleware,
        header_name=REQUEST_ID_HEADER,
        generator=new_request_id,
        validator=valid_request_id,
        transformer=None,
    )
    # Per-request count, status and latency, outermost: shed 503s and 413s count.
    app.add_middleware(RequestMetrics, metrics=plane.metrics, included=included)
    if tracer_provider is not None:
        from edgepath.tracing import instrument_rest

        instrument_rest(app, tracer_provider)
    answer_crashes(app)  # outside all (tracing's own ServerErrorMiddleware too): built around the stack they build
    gate = Gate(security)
    # One line per group of routes (registered on the app itself: no included-router indirection per request).
    add_decisions_routes(app, plane, gate)
    serve_hot_routes_plain(app, HOT_PATHS)
    add_admin_routes(app, plane, gate)
    add_health_routes(app, plane, metrics=serve_metrics)
    add_status_route(app, plane, gate)  # apprentice mode (issue 18)
    auth_required = security is not None and security.auth.required  # the document says what Gate enforces
    install_openapi(app, (RecommendRequest, RecommendBatchRequest, OutcomeReport, *MTS_BODY_MODELS), auth_required)
    # the request counter's series of every route and status it answers, at 0 from the first scrape (issue 22)
    plane.metrics.initialise_http_routes(known_answers(app, included))
    return app
