"""REST transport: FastAPI app over the :class:`~edgepath.plane.DecisionPlane`.

Routes: ``POST /v1/recommendations``, ``POST /v1/outcomes``, ``GET /healthz``
(liveness), ``GET /readyz`` (readiness: state store reachable), ``GET /metrics``
(Prometheus), and the OpenAPI docs at ``/docs`` and ``/openapi.json``.

Errors are JSON ``{"error": kind, "field": "interfaces[0].rsrp_dbm", "message": ...}``
with the status from :data:`HTTP_STATUS`; invalid bodies are 422.
"""

from __future__ import annotations

import math

from fastapi import Depends, FastAPI, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from edgepath.errors import EdgePathError, ErrorKind, RateLimited, Unauthenticated, field_path
from edgepath.plane import DecisionPlane
from edgepath.rest.mts import mts_router
from edgepath.security import DEFAULT_MAX_MESSAGE_BYTES, EdgeSecurity
from edgepath.security.asgi import BodySizeLimit
from edgepath.types import OutcomeAck, OutcomeReport, Principal, Recommendation, RecommendRequest

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


class QuarantineList(BaseModel):
    """Devices whose outcomes are acknowledged but not trained on (admin endpoints)."""

    devices: list[str]


_OUTCOME_LINK = {
    "operationId": "report_outcome",
    "requestBody": {"device_id": "$request.body#/device_id", "decision_id": "$response.body#/decision_id"},
    "description": "Report the measured outcome of this decision (same device, its decision_id).",
}
_bearer = HTTPBearer(auto_error=False, description="Device token (`edgepath tokens add`) or HS256 JWT")


def create_app(plane: DecisionPlane, security: EdgeSecurity | None = None) -> FastAPI:
    """Build the FastAPI application bound to ``plane``.

    With ``security`` every route under ``/v1`` authenticates the bearer token
    (401 without a valid one when authentication is configured) and takes a
    token from the caller's per-device bucket (429 with ``Retry-After``).
    Without it (tests, library use) the self-declared ``device_id`` is trusted.
    """
    app = FastAPI(
        title="EdgePath",
        version="0.1.0",
        description="Path recommendations for multipath (MPTCP) devices: primary path per radio context.",
    )

    @app.exception_handler(EdgePathError)
    async def _edgepath_error(_: Request, exc: EdgePathError) -> JSONResponse:
        headers: dict[str, str] = {}
        if isinstance(exc, RateLimited):
            headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))  # RFC 9110 §10.2.3: whole seconds
        elif isinstance(exc, Unauthenticated):
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse(
            status_code=HTTP_STATUS[exc.kind],
            content={"error": exc.kind.value, "field": exc.field, "message": exc.message},
            headers=headers,
        )

    # --- security: body size, authentication, per-device rate limit ---------------------------------------------
    app.add_middleware(BodySizeLimit, max_bytes=security.max_message_bytes if security else DEFAULT_MAX_MESSAGE_BYTES)

    async def caller(request: Request, _: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Principal | None:
        """The authenticated caller (rate-limited here), or None when authentication is off."""
        if security is None:
            return None
        principal = security.auth.authenticate(authorization=request.headers.get("authorization"))
        if principal is not None:
            await security.admit(principal)
        return principal

    async def device(principal: Principal | None, declared_device_id: str) -> Principal:
        """Authenticated principal, or (authentication off: dev on loopback) the self-declared device."""
        if principal is not None:
            return principal
        declared = Principal(device_id=declared_device_id)
        if security is not None:
            await security.admit(declared)
        return declared

    def admin(principal: Principal | None) -> Principal:
        if principal is None:
            raise Unauthenticated("admin endpoints need credentials")
        return principal

    @app.get("/v1/admin/quarantine", response_model=QuarantineList, tags=["admin"])
    async def list_quarantine(principal: Principal | None = Depends(caller)) -> QuarantineList:
        """Quarantined devices (admin identity required)."""
        return QuarantineList(devices=await plane.quarantined_devices(admin(principal)))

    @app.put("/v1/admin/quarantine/{device_id}", response_model=QuarantineList, tags=["admin"])
    async def quarantine(
        device_id: str = PathParam(min_length=1, max_length=128), principal: Principal | None = Depends(caller)
    ) -> QuarantineList:
        """Stop training on ``device_id``'s outcomes (admin identity required)."""
        return QuarantineList(devices=await plane.set_quarantine(admin(principal), device_id, True))

    @app.delete("/v1/admin/quarantine/{device_id}", response_model=QuarantineList, tags=["admin"])
    async def release(
        device_id: str = PathParam(min_length=1, max_length=128), principal: Principal | None = Depends(caller)
    ) -> QuarantineList:
        """Train on ``device_id``'s outcomes again (admin identity required)."""
        return QuarantineList(devices=await plane.set_quarantine(admin(principal), device_id, False))

    # --- end security ---------------------------------------------------------------------------------------------

    app.include_router(mts_router(plane, security), prefix="/mts/v1")  # ETSI MEC 015 Traffic Steering (issue 19)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        return JSONResponse(
            status_code=422,
            content={
                "error": ErrorKind.INVALID_INPUT.value,
                "field": field_path(first.get("loc", ())),
                "message": str(first.get("msg", "invalid request")),
                "detail": [{"field": field_path(e.get("loc", ())), "message": e.get("msg")} for e in errors],
            },
        )

    @app.post(
        "/v1/recommendations",
        response_model=Recommendation,
        tags=["decisions"],
        # OpenAPI link decision → outcome (clients and schemathesis's stateful tests follow it).
        responses={200: {"links": {"ReportOutcome": _OUTCOME_LINK}}},
    )
    async def recommend(body: RecommendRequest, principal: Principal | None = Depends(caller)) -> Recommendation:
        """Radio context in, recommendation (primary path, decision record) out."""
        return await plane.recommend(await device(principal, body.device_id), body)

    @app.post("/v1/outcomes", response_model=OutcomeAck, tags=["decisions"], operation_id="report_outcome")
    async def report_outcome(body: OutcomeReport, principal: Principal | None = Depends(caller)) -> OutcomeAck:
        """Measured outcome of a decision in; acknowledgement out (idempotent)."""
        return await plane.report_outcome(await device(principal, body.device_id), body)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process serves HTTP."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    async def readyz() -> JSONResponse:
        """Readiness: the state store is reachable (503 with ``degraded: true`` while it is not; decisions go on)."""
        ok = await plane.ready()
        body = {"ready": ok, "degraded": not ok, "model_version": plane.registry.current.version}
        return JSONResponse(status_code=200 if ok else 503, content=body)

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        """Prometheus exposition of this process's metrics."""
        return PlainTextResponse(generate_latest(plane.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
