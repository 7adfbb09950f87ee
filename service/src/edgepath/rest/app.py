"""REST transport: FastAPI app over the :class:`~edgepath.plane.DecisionPlane`.

Routes: ``POST /v1/recommendations``, ``POST /v1/outcomes``, ``GET /healthz``
(liveness), ``GET /readyz`` (readiness: state store reachable), ``GET /metrics``
(Prometheus), and the OpenAPI docs at ``/docs`` and ``/openapi.json``.

Errors are JSON ``{"error": kind, "field": "interfaces[0].rsrp_dbm", "message": ...}``
with the status from :data:`HTTP_STATUS`; invalid bodies are 422.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from edgepath.errors import EdgePathError, ErrorKind
from edgepath.plane import DecisionPlane
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


def field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """pydantic/FastAPI error location → ``interfaces[0].rsrp_dbm`` (drops the ``body`` prefix)."""
    out = ""
    for part in loc:
        if part in ("body", "query", "path") and not out:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def create_app(plane: DecisionPlane) -> FastAPI:
    """Build the FastAPI application bound to ``plane``."""
    app = FastAPI(
        title="EdgePath",
        version="0.1.0",
        description="Path recommendations for multipath (MPTCP) devices: primary path per radio context.",
    )

    @app.exception_handler(EdgePathError)
    async def _edgepath_error(_: Request, exc: EdgePathError) -> JSONResponse:
        return JSONResponse(
            status_code=HTTP_STATUS[exc.kind],
            content={"error": exc.kind.value, "field": exc.field, "message": exc.message},
        )

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

    @app.post("/v1/recommendations", response_model=Recommendation, tags=["decisions"])
    async def recommend(body: RecommendRequest) -> Recommendation:
        """Radio context in, recommendation (primary path, decision record) out."""
        return await plane.recommend(Principal(device_id=body.device_id), body)

    @app.post("/v1/outcomes", response_model=OutcomeAck, tags=["decisions"])
    async def report_outcome(body: OutcomeReport) -> OutcomeAck:
        """Measured outcome of a decision in; acknowledgement out (idempotent)."""
        return await plane.report_outcome(Principal(device_id=body.device_id), body)

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
