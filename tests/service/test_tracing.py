"""OpenTelemetry tracing (issue 22, item 3): off by default; on, both transports emit server spans that
continue the caller's W3C trace. The spans go to the SDK's in-memory exporter instead of an OTLP collector
(none runs here); the app and the gRPC server are the real ones, the REST app served in process."""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest
from edgepath.admission import Admission
from edgepath.grpc.server import create_server
from edgepath.main import Service
from edgepath.rest.app import create_app
from edgepath.settings import Settings
from edgepath.tracing import build_tracer_provider
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
BODY = {"device_id": "phone-trace", "interfaces": [{"name": "wlan0", "access_type": "WIFI"}]}


def test_tracing_is_off_by_default() -> None:
    assert Settings().otel_tracing is False
    assert Service.build(Settings()).tracer_provider is None


def test_both_transports_emit_server_spans_continuing_the_callers_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = build_tracer_provider(exporter)
    service = Service.build(Settings(host="127.0.0.1", grpc_port=0, http_port=0))

    async def main() -> None:
        app = create_app(service.plane, None, Admission(), provider)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            resp = await http.post("/v1/recommendations", json=BODY, headers={"traceparent": TRACEPARENT})
            assert resp.status_code == 200
            assert (await http.get("/healthz")).status_code == 200  # not traced
        server, _, port = create_server(service.plane, "127.0.0.1:0", tracer_provider=provider)
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                request = pb.RecommendRequest(
                    device_id="phone-trace",
                    interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)],
                )
                await pb_grpc.PathServiceStub(channel).Recommend(request, metadata=(("traceparent", TRACEPARENT),))
        finally:
            await server.stop(None)

    asyncio.run(main())
    provider.force_flush()
    spans = exporter.get_finished_spans()
    names = {span.name for span in spans}
    assert "POST /v1/recommendations" in names and "/edgepath.v1.PathService/Recommend" in names, names
    assert not any("healthz" in name for name in names)
    servers = [s for s in spans if s.kind.name == "SERVER"]
    assert servers and all(format(s.context.trace_id, "032x") == TRACE_ID for s in servers)
    provider.shutdown()


@pytest.mark.parametrize(
    ("env", "service_name"),
    [
        ({}, "edgepath"),
        ({"OTEL_SERVICE_NAME": "edgepath-audit"}, "edgepath-audit"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=edge-paths,deployment.environment=staging"}, "edge-paths"),
        (
            {"OTEL_SERVICE_NAME": "edgepath-audit", "OTEL_RESOURCE_ATTRIBUTES": "service.name=edge-paths"},
            "edgepath-audit",
        ),
    ],
)
def test_spans_carry_the_service_name_the_environment_sets(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], service_name: str
) -> None:
    """The resource comes from ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (OTEL_SERVICE_NAME first, as the
    SDK specifies); ``edgepath`` only when neither names the service. A hard-coded ``service.name`` had overridden
    the environment: OTEL_SERVICE_NAME=edgepath-audit still exported every span as ``edgepath``."""
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    exporter = InMemorySpanExporter()
    provider = build_tracer_provider(exporter)
    provider.get_tracer(__name__).start_span("probe").end()
    provider.force_flush()
    (span,) = exporter.get_finished_spans()
    assert span.resource.attributes["service.name"] == service_name
    if "deployment.environment" in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        assert span.resource.attributes["deployment.environment"] == "staging", "the other attributes are kept"
    provider.shutdown()
