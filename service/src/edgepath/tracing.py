"""OpenTelemetry tracing of both transports, behind ``otel_tracing`` (off by default: no SDK work per request).

On, every REST request (opentelemetry-instrumentation-fastapi; health, readiness and metrics excluded) and
every gRPC call (opentelemetry-instrumentation-grpc's ``grpc.aio`` server interceptor) is a server span,
exported in batches over OTLP/HTTP. The exporter takes its endpoint, headers and TLS options from the
standard ``OTEL_EXPORTER_OTLP_*`` environment variables, and the resource from ``OTEL_SERVICE_NAME`` /
``OTEL_RESOURCE_ATTRIBUTES`` (default service name ``edgepath``); an incoming W3C ``traceparent`` header
or metadata continues the caller's trace.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

#: Routes never traced (probes and scrapes would drown the requests).
UNTRACED_URLS = "healthz,readyz,metrics"
#: ``service.name`` of the spans when the environment names none.
DEFAULT_SERVICE_NAME = "edgepath"


def service_resource() -> Resource:
    """The SDK's resource from the environment (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``, which wins over
    a ``service.name`` there), with ``service.name`` :data:`DEFAULT_SERVICE_NAME` only when neither names one."""
    named = OTELResourceDetector().detect().attributes.get(SERVICE_NAME)
    return Resource.create() if named else Resource.create({SERVICE_NAME: DEFAULT_SERVICE_NAME})


def build_tracer_provider(exporter: SpanExporter | None = None) -> TracerProvider:
    """A tracer provider exporting in batches to ``exporter`` (default: OTLP/HTTP configured from the environment)."""
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    provider = TracerProvider(resource=service_resource())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def instrument_rest(app: Any, provider: TracerProvider) -> None:
    """Trace every request of the FastAPI ``app`` except :data:`UNTRACED_URLS`."""
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider, excluded_urls=UNTRACED_URLS)


def grpc_interceptor(provider: TracerProvider) -> Any:
    """A ``grpc.aio`` server interceptor tracing every call."""
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    return aio_server_interceptor(tracer_provider=provider)
