"""gRPC transport: ``edgepath.v1.PathService`` and ``grpc.health.v1.Health`` (grpc.aio).

Errors map through :data:`GRPC_STATUS`; validation errors are INVALID_ARGUMENT
with the offending field named in the details (``interfaces[0].rsrp_dbm: ...``).
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from pydantic import ValidationError

from edgepath.errors import EdgePathError, ErrorKind
from edgepath.grpc import convert
from edgepath.plane import DecisionPlane
from edgepath.rest.app import field_path
from edgepath.types import Principal
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc

SERVICE_NAME = "edgepath.v1.PathService"

#: The one table from error kinds to gRPC status codes.
GRPC_STATUS: dict[ErrorKind, grpc.StatusCode] = {
    ErrorKind.INVALID_INPUT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.CONFLICT: grpc.StatusCode.ALREADY_EXISTS,
    ErrorKind.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorKind.RATE_LIMITED: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"{field_path(first['loc'])}: {first['msg']}"


class PathServicer(pb_grpc.PathServiceServicer):
    """Thin adapter: proto → domain → plane → proto."""

    def __init__(self, plane: DecisionPlane) -> None:
        self.plane = plane

    async def Recommend(self, request: pb.RecommendRequest, context: grpc.aio.ServicerContext) -> pb.Recommendation:  # noqa: N802
        try:
            req = convert.recommend_request(request)
            rec = await self.plane.recommend(Principal(device_id=req.device_id), req)
        except ValidationError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, validation_message(exc))
        except EdgePathError as exc:
            await context.abort(GRPC_STATUS[exc.kind], str(exc))
        return convert.recommendation_to_proto(rec)

    async def ReportOutcome(self, request: pb.OutcomeRequest, context: grpc.aio.ServicerContext) -> pb.OutcomeAck:  # noqa: N802
        try:
            report = convert.outcome_report(request)
            ack = await self.plane.report_outcome(Principal(device_id=report.device_id), report)
        except ValidationError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, validation_message(exc))
        except EdgePathError as exc:
            await context.abort(GRPC_STATUS[exc.kind], str(exc))
        return convert.ack_to_proto(ack)


def create_server(plane: DecisionPlane, address: str) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    """Build (not start) the gRPC server on ``address`` ("host:port"; port 0 = any free).

    Returns the server, its health servicer (to flip serving status) and the bound port.
    """
    server = grpc.aio.server()
    pb_grpc.add_PathServiceServicer_to_server(PathServicer(plane), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port(address)
    return server, health_servicer, port


async def set_serving(health_servicer: health.aio.HealthServicer, serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, status)


async def set_service_serving(health_servicer: health.aio.HealthServicer, serving: bool) -> None:
    """Readiness on gRPC: only ``edgepath.v1.PathService`` flips (NOT_SERVING while the state store is
    unreachable); ``""`` stays SERVING because the process still decides with its last model."""
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    await health_servicer.set(SERVICE_NAME, status)
