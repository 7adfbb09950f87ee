# EdgePath service image: gRPC (50051) + REST (8080) in one process.
#
# Build:  docker build -t edgepath:0.1.0 .
# Run:    docker run --read-only --tmpfs /tmp -p 50051:50051 -p 8080:8080 -v /etc/edgepath:/etc/edgepath:ro \
#           -e EDGEPATH_AUTH_TOKENS_FILE=/etc/edgepath/tokens.json edgepath:0.1.0
#         It listens on 0.0.0.0 (EDGEPATH_HOST below), where the service refuses to start without authentication:
#         give it a tokens file (`edgepath tokens add DEVICE --file /etc/edgepath/tokens.json`, readable by uid
#         10001) or a JWT key (-e EDGEPATH_AUTH_JWT_KEY=...); README "Security" and "Deploy, load tests, benchmark".
# Push:   nobody publishes this image: tag it for your registry, push it, and set the Helm chart's
#         image.registry / image.repository (the chart's default, edgepath:0.1.0, names no registry).
#
# The build steps live in docker/build-steps.sh, which CI also runs outside Docker
# (tests/deploy/test_deploy_image.py), so they are proven without a Docker engine.
# The runtime stage runs as a non-root user and writes nothing outside /tmp
# (an emptyDir in the Helm chart), so it works with a read-only root filesystem.

# Base images: tags by default, which move (a rebuild weeks later gets other Debian packages and Python patch
# releases). For a reproducible build pin them by digest (README "Deploy, load tests, benchmark"), e.g.
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:<digest> \
#                --build-arg RUST_IMAGE=rust:1.95-slim-bookworm@sha256:<digest> -t edgepath:0.1.0 .
# (the digests: `docker buildx imagetools inspect python:3.11-slim`, or your registry's mirror of it).
ARG PYTHON_IMAGE=python:3.11-slim
ARG RUST_IMAGE=rust:1.95-slim-bookworm

# The Rust toolchain for the compiled decision engines (service/native), copied into the builder; not in the image.
FROM ${RUST_IMAGE} AS rust

FROM ${PYTHON_IMAGE} AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=rust /usr/local/cargo /usr/local/cargo
COPY --from=rust /usr/local/rustup /usr/local/rustup
# REQUIRE_NATIVE=1: the build fails rather than ship an image without the compiled engines.
ENV CARGO_HOME=/usr/local/cargo RUSTUP_HOME=/usr/local/rustup PATH=/usr/local/cargo/bin:$PATH REQUIRE_NATIVE=1
# contextualbandits ships only a source distribution: C/C++ compiler with OpenMP for its extension.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc g++ libgomp1 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY requirements.txt ./
COPY proto/ proto/
COPY service/ service/
COPY models/ models/
COPY docker/ docker/
ENV BUILD_NO_CACHE=1
RUN docker/build-steps.sh build /opt/edgepath \
    && docker/build-steps.sh verify /opt/edgepath

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="edgepath" \
      org.opencontainers.image.description="EdgePath: path recommendations for multipath (MPTCP) devices" \
      org.opencontainers.image.licenses="Apache-2.0"
# libgomp1: OpenMP runtime of contextualbandits' compiled extension.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 edgepath \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin edgepath
COPY --from=builder /opt/edgepath /opt/edgepath
# GRPC_VERBOSITY=ERROR: gRPC core writes its own plain-text lines to stderr, outside the service's log format (JSON
# with EDGEPATH_LOG_FORMAT json) and unthrottled; at its default every TLS handshake a client fails (a plaintext
# client, a port scanner, a load balancer's TCP check) printed an INFO line "ssl_transport_security.cc ... Handshake
# failed". ERROR keeps gRPC's errors; -e GRPC_VERBOSITY=INFO (or DEBUG) brings the rest back for a diagnosis.
ENV PATH=/opt/edgepath/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    EDGEPATH_HOST=0.0.0.0 \
    EDGEPATH_GRPC_PORT=50051 \
    EDGEPATH_HTTP_PORT=8080 \
    GRPC_VERBOSITY=ERROR
USER 10001:10001
WORKDIR /tmp
EXPOSE 50051 8080
# Liveness: gRPC health of the process (service ""), which stays SERVING while Redis is unreachable (the service
# decides with its last model; restarting it would not help); edgepath.v1.PathService is its readiness.
# With EDGEPATH_TLS_CERT_FILE it speaks TLS, trusting the server's own certificate (pinned), and under gRPC mTLS
# (EDGEPATH_TLS_CLIENT_CA_FILE) presents the server's certificate and key as its client certificate.
# EDGEPATH_HEALTHCHECK (http, rest or all) checks GET /healthz (rest, all: and /readyz) instead or too;
# EDGEPATH_HEALTHCHECK_CA_FILE / EDGEPATH_HEALTHCHECK_SERVER_NAME: the CA to trust and the name the certificate must
# carry, for a certificate without 127.0.0.1 (docker/healthcheck.py).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/opt/edgepath/venv/bin/python", "/opt/edgepath/healthcheck.py", "--service="]
ENTRYPOINT ["edgepath"]
CMD ["serve"]
