"""ETSI MEC 015 Traffic Steering API (GS MEC 015 v2.1.1, ``/mts/v1``) on the REST transport.

Routes (ETSI's OpenAPI, vendored with its BSD-3-Clause licence in ``service/data/etsi-mec-015/``):
``GET /mts_capability_info``; ``GET``/``POST /mts_sessions``; ``GET``/``PUT``/``DELETE
/mts_sessions/{sessionId}``. A session binds a MEC application (``appInsId``), or one of its
flows (``requestType`` 1 with ``flowFilter``), on one device to an ``mtsMode`` (0 low cost,
1 low latency, 2 high throughput, 3 redundancy, 4 QoS with ``qosD``); the device's next
recommendation carries the ATSSS rule that mode maps to (:mod:`edgepath.engines.steering`,
:mod:`edgepath.adapters.steering`). Sessions live in the state store (memory, or Redis shared
by every replica and surviving restarts).

EdgePath extensions to ``MtsSessionInfo`` (the schema allows extra members): ``deviceId``
(required: the EdgePath device whose traffic the session steers; MEC 015 v2.1.1 has no UE
identifier) and ``sessionId`` (in every response; the resource's id, also in ``Location``).

Errors are RFC 9457 (formerly 7807) ``ProblemDetails`` (``application/problem+json``) with the status of
:data:`MTS_STATUS` and the extension members of every problem of the service (:mod:`edgepath.rest.problem`:
``error``, the :class:`~edgepath.errors.ErrorKind` value; ``field``, or null; ``message``; ``request_id``);
an invalid request is 400 and its ``detail`` starts with the field path (``qosD.maxLatency: …``), also given as
``field`` (and every invalid field in ``errors``, as on the ``/v1`` routes); a body whose ``Content-Type`` is not
JSON is 415 naming the type, as on the ``/v1`` routes (no header is taken as JSON). A device has at most
:data:`MAX_DEVICE_SESSIONS` sessions and :data:`MAX_DEVICE_FLOW_FILTERS` flow filters over its flow sessions (400
naming ``deviceId``, ``flowFilter``: its recommendation's size), the service :data:`MAX_SESSIONS` (403), also under
concurrent requests to several replicas (the store writes a session atomically with a check that what it was validated
against is unchanged: :data:`WRITE_ATTEMPTS`).
An integer member takes JSON integers only: ``true``/``false`` and numeric strings (``"1"``) are 400 naming the
member (a number with a zero fraction, ``1.0``, is an integer to the spec's JSON Schema 2020-12 and is taken).
With authentication configured only admin principals (the MEC platform) may call the API: 401 with
``WWW-Authenticate: Bearer`` without valid credentials, 403 for another principal, both before a body is read
(POST and PUT parse theirs in the handler, after the ``platform`` dependency: :mod:`edgepath.rest.body`). While
the state store is unreachable (Redis degraded mode) every operation, reads included, is 503 with
``Retry-After``: an outage is never reported as "no such session" or "unknown device".
Not implemented: ``app_name`` query filtering (EdgePath does not learn application names;
the parameter is accepted and ignored), ETag preconditions (412).
"""

from __future__ import annotations

import ipaddress
import json
import math
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Literal

from asgi_correlation_id.context import correlation_id
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from starlette.exceptions import HTTPException

from edgepath.adapters.steering import MAX_FLOW_RULES
from edgepath.engines.steering import MTS_MODE_INTENT
from edgepath.errors import (
    EdgePathError,
    ErrorKind,
    InvalidInput,
    NotFound,
    PermissionDenied,
    RateLimited,
    Unauthenticated,
    Unavailable,
)
from edgepath.plane import DecisionPlane
from edgepath.rest.body import json_request_body, parse_body, request_body
from edgepath.rest.problem import (
    BODY,
    PROBLEM_JSON,
    field_problems,
    instance_uri,
    problem_body,
    problem_response,
)
from edgepath.security import EdgeSecurity
from edgepath.state.base import MtsSession
from edgepath.types import CELLULAR, DEVICE_ID_PATTERN, JSON_INTEGER, AccessType, Principal

#: Error kinds → HTTP status for this API (MEC 015: an invalid request is 400, not the /v1 routes' 422).
MTS_STATUS: dict[ErrorKind, int] = {
    ErrorKind.INVALID_INPUT: 400,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.CONFLICT: 400,
    ErrorKind.PERMISSION_DENIED: 403,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.UNAUTHENTICATED: 401,
    ErrorKind.RATE_LIMITED: 429,
}
UINT32 = 2**32 - 1
MAX_PORTS = 64
MAX_FILTERS = 16
#: Sessions the service keeps at most (all devices); a POST beyond is 403 (MEC 015: not allowed in this state).
MAX_SESSIONS = 10_000
#: Sessions one device may have (any ``requestType``; each is read for every recommendation of the device); a POST
#: beyond (or a PUT moving a session to such a device) is 400 naming ``deviceId``.
MAX_DEVICE_SESSIONS = 64
#: ``flowFilter`` entries over one device's flow sessions (``requestType`` 1) at most, 245: one ATSSS rule each, with
#: precedence 10..254 (TS 24.193 §5.2.1, :data:`edgepath.adapters.steering.MAX_FLOW_RULES`). A POST or PUT beyond is
#: 400 naming ``flowFilter``. It bounds the device's reply: with every filter maximal (64 + 64 ports, the longest
#: addresses) ~190 kB over gRPC, under a gRPC client's default 4 MiB receive bound, and ~0.5 MB of JSON; before,
#: 300 sessions of 16 filters made a 1.1 MB gRPC reply (the server then bounded replies by ``max_message_bytes``
#: and could not send it: RESOURCE_EXHAUSTED).
MAX_DEVICE_FLOW_FILTERS = MAX_FLOW_RULES
#: Reads, checks and conditional writes of one POST or PUT at most: the store writes a session only where the device's
#: other sessions are still those it was validated against (replicas sharing Redis: two creating a device's 64th
#: session each saw 63 and both wrote), else it is read and validated again; a write refused as often (as many
#: concurrent changes of the same device) is 503 with ``Retry-After``.
WRITE_ATTEMPTS = 8
_ID_PATTERN = r"^[A-Za-z0-9._~-]{1,128}$"

#: MEC 015 §7.2.4 ``accessType`` codes, EdgePath's stable ``accessId`` per access type, and ``metered``
#: (0 not metered, 1 metered: EdgePath treats 3GPP access as metered, :mod:`edgepath.engines.steering`).
MEC_ACCESS: dict[AccessType, tuple[int, int]] = {
    AccessType.WIFI: (1, 1),  # any IEEE 802.11 WLAN
    AccessType.LTE: (2, 32),  # 3GPP E-UTRA
    AccessType.NR: (3, 33),  # 3GPP NR
    AccessType.ETHERNET: (4, 3),  # any fixed access
}


Uint32 = Annotated[int, Field(ge=0, le=UINT32), JSON_INTEGER]
#: MEC 015 member names are camelCase on the wire (snake_case here).
_CAMEL = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)
Port = Annotated[int, Field(ge=0, le=65535), JSON_INTEGER]
SessionId = Annotated[str, PathParam(description="MTS session id (unknown ids are 404)")]


def problem(
    status: int,
    message: str,
    field: str | None = None,
    *,
    kind: ErrorKind,
    path: str | None = None,
    errors: list[dict[str, str]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """RFC 9457 body (MEC 015 ProblemDetails; the service's :class:`~edgepath.rest.problem.Problem`, the members of
    the ``/v1`` routes' problems) answered with ``status`` and ``headers``: ``detail`` is ``"<field>: <message>"``
    (``message`` without a field), ``error`` the ``kind``, ``field`` the offending field or null. ``errors``
    (:func:`~edgepath.rest.problem.field_problems`) defaults to ``field`` alone."""
    body = problem_body(
        status,
        message,
        kind=kind.value,
        field=field,
        instance=path,
        request_id=correlation_id.get(),
        errors=errors,
    )
    return problem_response(status, body, headers)


def error_headers(exc: EdgePathError) -> dict[str, str]:
    """The headers of the answer to ``exc``, as on the ``/v1`` routes: ``Retry-After`` (whole seconds, RFC 9110
    §10.2.3) on 429 and 503, ``WWW-Authenticate: Bearer`` on 401 (RFC 9110 §11.6.1)."""
    if isinstance(exc, RateLimited):
        return {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))}
    if isinstance(exc, Unauthenticated):
        return {"WWW-Authenticate": "Bearer"}
    if isinstance(exc, Unavailable):
        return {"Retry-After": "1"}
    return {}


class MtsRoute(APIRoute):
    """Every error of the MTS routes as ProblemDetails (validation → 400 naming the field; an
    :class:`~edgepath.errors.EdgePathError` → the status of :data:`MTS_STATUS`)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            path = instance_uri(request)
            try:
                return await handler(request)
            except RequestValidationError as exc:
                errors = field_problems(exc.errors()) or [{"field": BODY, "message": "invalid"}]
                field, message = errors[0]["field"], errors[0]["message"]
                return problem(400, message, field, kind=ErrorKind.INVALID_INPUT, path=path, errors=errors)
            except HTTPException as exc:  # a body not sent as JSON (field body, as on /v1), one past the size bound
                named: str | None = getattr(exc, "field", None)
                return problem(exc.status_code, str(exc.detail), named, kind=ErrorKind.INVALID_INPUT, path=path)
            except EdgePathError as exc:
                status = MTS_STATUS[exc.kind]
                return problem(status, exc.message, exc.field, kind=exc.kind, path=path, headers=error_headers(exc))

        return route


# --- MEC 015 §7.2.5 MtsSessionInfo ------------------------------------------------------------------------------
class TimeStamp(BaseModel):
    """Unix time: ``seconds`` and ``nanoSeconds`` (MEC 015 TimeStamp)."""

    model_config = _CAMEL

    seconds: Uint32
    nano_seconds: Annotated[int, Field(ge=0, le=999_999_999), JSON_INTEGER]


def ip_or_network(value: str) -> str:
    """``value`` when it is an IPv4 or IPv6 address (``198.51.100.7``) or a network in CIDR notation, an address
    and a decimal prefix length with no host bits set (``198.51.100.0/24``, ``2001:db8::/32``): MEC 015 §7.2.5
    ``flowFilter.sourceIp``/``dstIp``, "address identity of session (including range)", without an IPv6 zone
    index. Checked by :mod:`ipaddress` (a character set alone took ``999.999.999.999/99``).

    Raises
    ------
    ValueError
        Saying what is wrong (pydantic: 400 naming the member, ``flowFilter[0].dstIp``).
    """
    address, slash, prefix = value.partition("/")
    try:
        if "%" in address:  # RFC 4007 §11 zone index: an interface of one host, not a flow of the device's traffic
            raise ValueError("an IPv6 zone index (%...) names no flow")
        if not slash:
            ipaddress.ip_address(address)
        elif not (prefix.isascii() and prefix.isdigit()):
            raise ValueError(f"the prefix length {prefix!r} is not a decimal number")
        else:
            ipaddress.ip_network(value)  # strict: host bits set are refused, not silently cleared
    except ValueError as exc:
        raise ValueError(f"not an IP address or a network in CIDR notation (address/prefix length): {exc}") from None
    return value


#: MEC 015 ``sourceIp``/``dstIp`` (:func:`ip_or_network`).
IpOrNetwork = Annotated[
    str,
    Field(min_length=1, max_length=64, description="IPv4/IPv6 address, or a network in CIDR notation"),
    AfterValidator(ip_or_network),
]


class FlowFilter(BaseModel):
    """One traffic flow filter (at least one member; absent members are not filtered on)."""

    model_config = _CAMEL

    source_ip: IpOrNetwork | None = None
    source_port: list[Port] | None = Field(default=None, max_length=MAX_PORTS)
    dst_ip: IpOrNetwork | None = None
    dst_port: list[Port] | None = Field(default=None, max_length=MAX_PORTS)
    protocol: Annotated[int, Field(ge=0, le=255), JSON_INTEGER] | None = Field(
        default=None, description="IP protocol number"
    )
    dscp: Annotated[int, Field(ge=0, le=63), JSON_INTEGER] | None = None
    flowlabel: Annotated[int, Field(ge=0, le=2**20 - 1), JSON_INTEGER] | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> FlowFilter:
        if not self.model_dump(exclude_none=True):
            raise ValueError("a flowFilter entry needs at least one member")
        return self


class QosD(BaseModel):
    """QoS requirement (``mtsMode`` 4): ``minTpt`` kbit/s, ``maxLatency``/``maxJitter`` 10 ns, ``maxLoss`` 10^-x."""

    model_config = _CAMEL

    min_tpt: Uint32 | None = None
    max_latency: Uint32 | None = None
    max_loss: Annotated[int, Field(ge=0, le=30), JSON_INTEGER] | None = Field(
        default=None, description="loss rate 10^-maxLoss (≥ 1e-30)"
    )
    max_jitter: Uint32 | None = None
    priority: Annotated[int, Field(ge=0, le=3), JSON_INTEGER] | None = Field(
        default=None, description="0 low, 1 medium, 2 high, 3 critical"
    )


class MtsSessionInfo(BaseModel):
    """MEC 015 §7.2.5 ``MtsSessionInfo`` plus EdgePath's ``deviceId`` and ``sessionId`` (module docstring)."""

    model_config = _CAMEL

    app_ins_id: str = Field(min_length=1, max_length=128, pattern=DEVICE_ID_PATTERN)
    request_type: Annotated[Literal[0, 1], JSON_INTEGER] = Field(
        description="0 APPLICATION_SPECIFIC_MTS_SESSION, 1 FLOW_SPECIFIC_MTS_SESSION"
    )
    flow_filter: list[FlowFilter] = Field(min_length=1, max_length=MAX_FILTERS)
    qos_d: QosD
    mts_mode: Annotated[int, Field(ge=0, le=4), JSON_INTEGER] = Field(
        description="0 low cost, 1 low latency, 2 high throughput, 3 redundancy, 4 QoS"
    )
    traffic_direction: Literal["00", "01", "10"] = Field(description="00 downlink, 01 uplink, 10 symmetrical")
    time_stamp: TimeStamp | None = None
    device_id: str = Field(min_length=1, max_length=128, pattern=DEVICE_ID_PATTERN, description="EdgePath device")
    session_id: str | None = Field(default=None, pattern=_ID_PATTERN, description="Set by the service")

    @model_validator(mode="after")
    def _qos_consistent(self) -> MtsSessionInfo:
        q = self.qos_d
        if self.mts_mode == 4 and not any(v is not None for v in (q.min_tpt, q.max_latency, q.max_loss, q.max_jitter)):
            raise InvalidInput("mtsMode 4 (QoS) needs at least one requirement", field="qosD")
        if q.max_latency == 0:
            raise InvalidInput("a zero one-way delay cannot be met", field="qosD.maxLatency")
        if q.max_jitter is not None and q.max_latency is not None and q.max_jitter > q.max_latency:
            raise InvalidInput(
                "contradicts qosD.maxLatency (a delay within maxLatency varies by at most that)",
                field="qosD.maxJitter",
            )
        return self


#: The request bodies the routes parse themselves (after authentication); their schemas are added to the OpenAPI
#: document's components by the app (:func:`edgepath.rest.app.install_openapi`).
MTS_BODY_MODELS: tuple[type[BaseModel], ...] = (MtsSessionInfo,)


class AccessInfo(BaseModel):
    """One entry of ``mtsAccessInfo`` (MEC 015 §7.2.4)."""

    model_config = _CAMEL

    access_id: int
    access_type: int
    metered: int


class MtsCapabilityInfo(BaseModel):
    """MEC 015 §7.2.4 ``MtsCapabilityInfo``: the accesses devices reported and the modes supported."""

    model_config = _CAMEL

    mts_access_info: list[AccessInfo]
    mts_mode: list[int]
    time_stamp: TimeStamp | None = None


#: The bearer credential of the OpenAPI document (each operation's requirement, required or optional as the service
#: enforces it: :func:`edgepath.rest.app.security_requirement`); ``platform`` checks it itself.
_bearer = HTTPBearer(auto_error=False, description="Admin token or JWT (the MEC platform)")


def mts_router(
    plane: DecisionPlane,
    security: EdgeSecurity | None = None,
    note_caller: Callable[[Request, Principal | None, str | None], None] | None = None,
) -> APIRouter:
    """The ``/mts/v1`` routes over ``plane.store`` (include with ``prefix="/mts/v1"``).

    ``note_caller(request, principal, None)`` is told each request's authenticated caller, admin or not, before it
    is admitted (:func:`edgepath.rest.app.note_caller`: the line of a refused request names it; not a hot path).
    """
    router = APIRouter(route_class=MtsRoute, tags=["mts"])
    store = plane.store
    problems: dict[int | str, dict[str, Any]] = {
        code: {"description": text, "content": {PROBLEM_JSON: {"schema": {"type": "object"}}}}
        for code, text in ((400, "Bad Request"), (403, "Forbidden"), (404, "Not Found"))
    }

    async def platform(request: Request, _: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
        """With authentication configured: an admin principal (the MEC platform), rate-limited.

        Raises ``Unauthenticated`` (401) without valid credentials, ``PermissionDenied`` (403) for a principal that
        is not an admin, ``RateLimited`` (429) past its request budget.
        """
        if security is None:
            return
        principal = security.auth.authenticate(authorization=request.headers.get("authorization"))
        if principal is None:
            return
        if note_caller is not None:
            note_caller(request, principal, None)
        if not principal.is_admin:
            raise PermissionDenied("the traffic steering API needs an admin identity (MEC platform)")
        await security.admit(principal)

    async def validated(
        info: MtsSessionInfo, session_id: str, sessions: list[MtsSession]
    ) -> tuple[MtsSession, list[MtsSession]]:
        """``info`` as session ``session_id``, and the device's other sessions it was checked against (``sessions``:
        every stored one, as the caller read them).

        Raises ``InvalidInput`` (400) naming the field: another ``sessionId``; a device that never reported its
        accesses, or that has :data:`MAX_DEVICE_SESSIONS` other sessions (``deviceId``); a flow filter of another
        flow session of the device (MEC 015 §7.2.5: a filter defines a single session), or more than
        :data:`MAX_DEVICE_FLOW_FILTERS` over the device's flow sessions with this one (``flowFilter``);
        ``Unavailable`` (503) when the store cannot answer (an outage is not an unknown device: the reads here are
        the API's, which raise).
        """
        if info.session_id is not None and info.session_id != session_id:
            raise InvalidInput("does not match the resource", field="sessionId")
        if await store.device_accesses(info.device_id) is None:
            raise InvalidInput("unknown device (it has not asked for a recommendation)", field="deviceId")
        # not device_mts_sessions: the decision path's read, which gives none while the store is unreachable
        others = [s for s in sessions if s.device_id == info.device_id and s.session_id != session_id]
        if len(others) >= MAX_DEVICE_SESSIONS:
            raise InvalidInput(
                f"the device has {len(others)} other MTS sessions: {MAX_DEVICE_SESSIONS} at most per device",
                field="deviceId",
            )
        if info.request_type == 1:
            mine = [f.model_dump(exclude_none=True, by_alias=True) for f in info.flow_filter]
            filters = len(mine)
            for other in others:
                theirs = json.loads(other.info)
                if theirs.get("requestType") != 1:
                    continue
                their_filters = theirs.get("flowFilter", [])
                if any(f in their_filters for f in mine):
                    raise InvalidInput(
                        f"a filter of this session already defines session {other.session_id}", field="flowFilter"
                    )
                filters += len(their_filters)
            if filters > MAX_DEVICE_FLOW_FILTERS:
                raise InvalidInput(
                    f"the device's flow sessions would have {filters} filters in all: {MAX_DEVICE_FLOW_FILTERS} at "
                    "most per device (one ATSSS rule each, precedence 10..254: TS 24.193 §5.2.1)",
                    field="flowFilter",
                )
        now = time.time()
        stamp = info.time_stamp or TimeStamp(seconds=min(int(now), UINT32), nano_seconds=int((now % 1) * 1e9))
        body = info.model_copy(update={"session_id": session_id, "time_stamp": stamp}).model_dump(
            exclude_none=True, by_alias=True
        )
        session = MtsSession(session_id=session_id, device_id=info.device_id, info=json.dumps(body), created_at=now)
        return session, others

    async def stored(session: MtsSession, others: list[MtsSession]) -> bool:
        """Write ``session`` unless the device's other sessions are not ``others`` any more or the service keeps
        :data:`MAX_SESSIONS` sessions and it is new (checked by the store with the write); True when written."""
        return await store.put_mts_session(session, device_sessions=others, max_sessions=MAX_SESSIONS)

    def contended() -> Unavailable:
        return Unavailable(f"the device's MTS sessions changed under {WRITE_ATTEMPTS} attempts to write this one")

    async def session_info(request: Request) -> MtsSessionInfo:
        """The request's body as ``MtsSessionInfo``, read and parsed only here: in the handler, after the
        ``platform`` dependency checked the credentials (a route with a body parameter has FastAPI read and parse
        the body before any dependency runs: ``{`` without a token was 400 "JSON decode error", not 401).

        Raises ``NotJson`` (415 naming the ``field`` ``body``) naming the ``Content-Type`` sent when it is not JSON
        (an absent one is taken as JSON, as on the ``/v1`` routes: :func:`~edgepath.rest.body.json_request_body`;
        text was parsed as a string and answered 400 "Input should be a valid dictionary"),
        ``RequestValidationError`` (400 naming the field; ``body`` when it is not JSON).
        """
        return parse_body(await json_request_body(request), MtsSessionInfo)

    def body_of(session: MtsSession) -> dict[str, Any]:
        return dict(json.loads(session.info))

    @router.get(
        "/mts_capability_info",
        response_model=MtsCapabilityInfo,
        responses=problems,
        operation_id="mtsCapabilityInfoGET",
        dependencies=[Depends(platform)],
    )
    async def capability_info() -> MtsCapabilityInfo:
        """Accesses any device has reported (404 before the first report) and the supported mtsModes; 503 while
        the state store is unreachable."""
        reported = await store.reported_access_types()
        accesses = [AccessType(a) for a in sorted(reported) if a in AccessType.__members__]
        if not accesses:
            raise NotFound("no device has reported its accesses yet")
        now = time.time()
        return MtsCapabilityInfo(
            mts_access_info=[
                AccessInfo(access_id=MEC_ACCESS[a][0], access_type=MEC_ACCESS[a][1], metered=int(a in CELLULAR))
                for a in accesses
            ],
            mts_mode=sorted(MTS_MODE_INTENT),
            time_stamp=TimeStamp(seconds=min(int(now), UINT32), nano_seconds=int((now % 1) * 1e9)),
        )

    @router.get(
        "/mts_sessions", responses=problems, operation_id="mtsSessionsListGET", dependencies=[Depends(platform)]
    )
    async def list_sessions(
        app_instance_id: Annotated[list[str] | None, Query(max_length=64)] = None,
        app_name: Annotated[list[str] | None, Query(max_length=64)] = None,
        session_id: Annotated[list[str] | None, Query(max_length=64)] = None,
    ) -> list[dict[str, Any]]:
        """Every session, filtered by ``app_instance_id`` and ``session_id`` (``app_name`` is ignored); 503 while
        the state store is unreachable."""
        del app_name  # EdgePath does not learn application names (module docstring)
        out = []
        for s in await store.list_mts_sessions():
            body = body_of(s)
            if app_instance_id and body.get("appInsId") not in app_instance_id:
                continue
            if session_id and s.session_id not in session_id:
                continue
            out.append(body)
        return out

    @router.post(
        "/mts_sessions",
        status_code=201,
        responses=problems,
        operation_id="mtsSessionPOST",
        dependencies=[Depends(platform)],
        openapi_extra={"requestBody": request_body(MtsSessionInfo)},
    )
    async def create_session(request: Request, response: Response) -> dict[str, Any]:
        """Create a session (201 with ``Location``); 400 naming the field when it is invalid or the device has as
        many sessions (``deviceId``) or flow filters (``flowFilter``) as it may, 403 when the service keeps as many
        sessions as it may, 503 while the state store is unreachable or the device's sessions keep changing
        (:data:`WRITE_ATTEMPTS`). With authentication configured the credentials are checked before the body is read
        (401 or 403 whatever the body)."""
        info = await session_info(request)
        session_id = uuid.uuid4().hex
        for _ in range(WRITE_ATTEMPTS):
            sessions = await store.list_mts_sessions()
            session, others = await validated(info, session_id, sessions)
            if len(sessions) >= MAX_SESSIONS:
                raise PermissionDenied(f"the service keeps at most {MAX_SESSIONS} MTS sessions")
            if await stored(session, others):
                response.headers["Location"] = f"/mts/v1/mts_sessions/{session.session_id}"
                return body_of(session)
        raise contended()

    async def existing(session_id: str) -> MtsSession:
        session = await store.get_mts_session(session_id) if len(session_id) <= 128 else None
        if session is None:
            raise NotFound(f"no session {session_id!r}", field="sessionId")  # repr: a path's %0A forges no log line
        return session

    @router.get(
        "/mts_sessions/{sessionId}",
        responses=problems,
        operation_id="mtsSessionGET",
        dependencies=[Depends(platform)],
    )
    async def get_session(sessionId: SessionId) -> dict[str, Any]:  # noqa: N803 - the spec's parameter name
        """One session (404 when unknown; 503 while the state store is unreachable)."""
        return body_of(await existing(sessionId))

    @router.put(
        "/mts_sessions/{sessionId}",
        responses=problems,
        operation_id="mtsSessionPUT",
        dependencies=[Depends(platform)],
        openapi_extra={"requestBody": request_body(MtsSessionInfo)},
    )
    async def replace_session(sessionId: SessionId, request: Request) -> dict[str, Any]:  # noqa: N803
        """Replace a session (MEC 009 PUT semantics; 400 naming the field when the body is invalid, then 404 when
        the session is unknown, then 400 naming the field as on POST, the device's bounds included; 503 while the
        state store is unreachable or the device's sessions keep changing, :data:`WRITE_ATTEMPTS`). With
        authentication configured the credentials are checked before the body is read (401 or 403 whatever the
        body)."""
        info = await session_info(request)
        for _ in range(WRITE_ATTEMPTS):
            previous = await existing(sessionId)
            session, others = await validated(info, sessionId, await store.list_mts_sessions())
            session = MtsSession(session.session_id, session.device_id, session.info, previous.created_at)
            if await stored(session, others):
                return body_of(session)
        raise contended()

    @router.delete(
        "/mts_sessions/{sessionId}",
        status_code=204,
        response_class=Response,
        responses={403: problems[403], 404: problems[404]},
        operation_id="mtsSessionDELETE",
        dependencies=[Depends(platform)],
    )
    async def delete_session(sessionId: SessionId) -> Response:  # noqa: N803
        """Remove a session (204; 404 when unknown, 503 while the state store is unreachable): the device's next
        recommendation drops its rule."""
        if len(sessionId) > 128 or not await store.delete_mts_session(sessionId):
            raise NotFound(f"no session {sessionId!r}", field="sessionId")
        return Response(status_code=204)

    return router
