#!/usr/bin/env python3
"""Health check of an EdgePath service: Docker ``HEALTHCHECK``, liveness exec probe and ``helm test``.

Default (no arguments): asks the gRPC health service (``grpc.health.v1.Health/Check``)
of the local process for the overall ``""`` service on ``EDGEPATH_GRPC_PORT``
(default 50051), over TLS when ``EDGEPATH_TLS_CERT_FILE`` is set: a liveness check (the
Docker ``HEALTHCHECK``, the chart's liveness probe). ``""`` stays SERVING while the state
store is unreachable (the process still decides with its last model: do not restart it);
``edgepath.v1.PathService`` turns NOT_SERVING then (readiness).

Options: ``--host`` (default 127.0.0.1), ``--grpc-port``, ``--http-port``,
``--mode grpc|http|rest|all`` (``http`` = ``GET /healthz``; ``rest`` = ``/healthz``
and ``/readyz``; ``all`` = gRPC health, ``/healthz`` and ``/readyz``; with gRPC mTLS
the chart's ``helm test`` uses ``rest``: its pod holds no client certificate, and the
liveness probe ``http``), ``--service`` (the gRPC health service asked: default ``""`` with ``--mode grpc``, a liveness
check, and ``edgepath.v1.PathService`` with ``--mode all``, which checks readiness as ``/readyz``
does), ``--recommend`` (one ``POST /v1/recommendations``
with a two-interface context; 200, or 401/403 when authentication is required),
``--ca-file`` (trust this CA, or the system's roots when the file is absent;
enables TLS) and ``--server-name`` (name the certificate must carry, on gRPC and HTTPS
alike, whatever address is dialled). Exit status
0 = healthy, 1 = unhealthy (reasons on stderr). Standard library + grpcio only;
every call times out after 3 s.

Environment (the image's ``HEALTHCHECK`` passes no options, so a container is configured here):

``EDGEPATH_HEALTHCHECK``
    Default of ``--mode``: ``grpc`` (the default), ``http``, ``rest`` or ``all``.
``EDGEPATH_TLS_CERT_FILE``, ``EDGEPATH_TLS_KEY_FILE``, ``EDGEPATH_TLS_CLIENT_CA_FILE``
    The service's own TLS settings. With a certificate the checks speak TLS and, unless ``--ca-file`` or
    ``EDGEPATH_HEALTHCHECK_CA_FILE`` names a CA, trust exactly the certificates of that file (the server's own,
    pinned: a certificate a CA signed is a trust anchor too, not only a self-signed one). With a client CA (the
    service requires gRPC client certificates: mTLS) the checks present the server's own certificate and key as
    their client certificate, which the service accepts when its client CA signed the server certificate too (the
    README's Security setup; the chart's generated CA) and the certificate allows client use (no extended key usage,
    or ``clientAuth`` among them).
``EDGEPATH_HEALTHCHECK_CA_FILE``
    Default of ``--ca-file``.
``EDGEPATH_HEALTHCHECK_SERVER_NAME``
    Default of ``--server-name``: for a certificate that does not carry 127.0.0.1 (the address dialled).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import sys

SERVICE_NAME = "edgepath.v1.PathService"
TIMEOUT_S = 3.0
SAMPLE_CONTEXT = {
    "device_id": "helm-test",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -95.0, "rsrq_db": -11.0, "sinr_db": 8.0},
    ],
}


def client_identity() -> tuple[str, str] | None:
    """(certificate file, key file) the checks present as their client certificate: the server's own, when the
    service requires client certificates (``EDGEPATH_TLS_CLIENT_CA_FILE``, gRPC mTLS); else None."""
    cert, key = os.environ.get("EDGEPATH_TLS_CERT_FILE"), os.environ.get("EDGEPATH_TLS_KEY_FILE")
    if os.environ.get("EDGEPATH_TLS_CLIENT_CA_FILE") and cert and key:
        return cert, key
    return None


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def check_grpc(
    host: str,
    port: int,
    ca_file: str | None,
    server_name: str | None,
    service: str = SERVICE_NAME,
    identity: tuple[str, str] | None = None,
) -> str | None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    target = f"{host}:{port}"
    try:
        if ca_file:
            roots = None  # the system's trusted roots when the secret carries no ca.crt
            if os.path.exists(ca_file):
                roots = _read(ca_file)  # gRPC takes any certificate of it as a trust anchor (a pinned leaf too)
            chain = key = None
            if identity is not None:
                chain, key = _read(identity[0]), _read(identity[1])
            creds = grpc.ssl_channel_credentials(root_certificates=roots, private_key=key, certificate_chain=chain)
            options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
            channel = grpc.secure_channel(target, creds, options=options)
        else:
            channel = grpc.insecure_channel(target)
        with channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT_S
            )
    except grpc.RpcError as exc:
        return f"gRPC health check of {target} ({service!r}) failed: {exc.code().name} {exc.details()}"
    except OSError as exc:  # an unreadable CA file, certificate or key
        return f"gRPC health check of {target} ({service!r}): {exc}"
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return f"gRPC health of {target} ({service!r}): {status}"
    return None


def _ssl_context(ca_file: str | None, identity: tuple[str, str] | None = None) -> ssl.SSLContext | None:
    if not ca_file:
        return None
    # check_hostname stays on: the name checked is --server-name when given, else the host dialled
    ctx = ssl.create_default_context(cafile=ca_file if os.path.exists(ca_file) else None)
    # Any certificate of ca_file is a trust anchor, not only a self-signed root: the server's own certificate
    # (EDGEPATH_TLS_CERT_FILE, pinned) verifies when a CA signed it, as gRPC's checks do.
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    if identity is not None:  # REST asks for no client certificate; presented only where a server asks for one
        ctx.load_cert_chain(identity[0], identity[1])
    return ctx


class _NamedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to one address, checking the certificate against ``server_name`` (SNI and hostname check), as
    ``grpc.ssl_target_name_override`` does for gRPC: the certificate names the service, not the address dialled."""

    def __init__(self, host: str, port: int, ctx: ssl.SSLContext, server_name: str) -> None:
        super().__init__(host, port, timeout=TIMEOUT_S, context=ctx)
        self._ctx, self._server_name = ctx, server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._ctx.wrap_socket(self.sock, server_hostname=self._server_name)


def check_http(
    host: str,
    port: int,
    path: str,
    ctx: ssl.SSLContext | None,
    body: dict | None = None,
    server_name: str | None = None,
) -> tuple[int, str]:
    """(status, start of the body) of GET ``path`` (POST ``body`` as JSON); status 0 when no answer came."""
    if ctx is None:
        conn: http.client.HTTPConnection = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
    else:
        conn = _NamedHTTPSConnection(host, port, ctx, server_name or host)
    try:
        if body is None:
            conn.request("GET", path)
        else:
            conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, reply.read(4096).decode(errors="replace")
    except (OSError, http.client.HTTPException) as exc:  # refused, timed out, TLS verification failed, ...
        return 0, str(exc)
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="EdgePath health check")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--grpc-port", type=int, default=int(os.environ.get("EDGEPATH_GRPC_PORT", "50051")))
    p.add_argument("--http-port", type=int, default=int(os.environ.get("EDGEPATH_HTTP_PORT", "8080")))
    p.add_argument(
        "--mode", choices=("grpc", "http", "rest", "all"), default=os.environ.get("EDGEPATH_HEALTHCHECK", "grpc")
    )
    p.add_argument(
        "--service",
        default=None,
        help='gRPC health service to ask: "" (the process; default with --mode grpc: liveness) or '
        "edgepath.v1.PathService (NOT_SERVING while the state store is unreachable; default with --mode all)",
    )
    p.add_argument("--recommend", action="store_true")
    p.add_argument("--ca-file", default=os.environ.get("EDGEPATH_HEALTHCHECK_CA_FILE") or None)
    p.add_argument("--server-name", default=os.environ.get("EDGEPATH_HEALTHCHECK_SERVER_NAME") or None)
    args = p.parse_args(argv)
    ca_file = args.ca_file
    if ca_file is None and os.environ.get("EDGEPATH_TLS_CERT_FILE"):
        ca_file = os.environ["EDGEPATH_TLS_CERT_FILE"]  # the server's own certificate, pinned (self- or CA-signed)
    identity = client_identity() if ca_file else None
    try:
        ctx = _ssl_context(ca_file, identity)
    except (OSError, ssl.SSLError) as exc:  # an unreadable CA file, certificate or key
        print(f"TLS setup of the health check failed: {exc}", file=sys.stderr)
        return 1
    service = args.service if args.service is not None else (SERVICE_NAME if args.mode == "all" else "")

    problems: list[str] = []
    if args.mode in ("grpc", "all"):
        problem = check_grpc(args.host, args.grpc_port, ca_file, args.server_name, service, identity)
        if problem:
            problems.append(problem)
    if args.mode in ("http", "rest", "all"):
        for path in ("/healthz",) if args.mode == "http" else ("/healthz", "/readyz"):
            status, text = check_http(args.host, args.http_port, path, ctx, server_name=args.server_name)
            if status != 200:
                problems.append(f"GET {path}: {status} {text[:200]}")
    if args.recommend:
        status, text = check_http(
            args.host, args.http_port, "/v1/recommendations", ctx, SAMPLE_CONTEXT, args.server_name
        )
        if status == 200:
            if "decision_id" not in json.loads(text):
                problems.append(f"POST /v1/recommendations: no decision_id in {text[:200]}")
        elif status not in (401, 403):
            problems.append(f"POST /v1/recommendations: {status} {text[:200]}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
