"""Locust users of EdgePath: REST (:class:`RestDevice`) and gRPC (:class:`GrpcDevice`).

Each user is a stream of simulated devices: it sends a real two-interface
context (paired mobilebandwidth tests, see :mod:`workload`) with the agent's
subflow histories (emulated; ``--history-samples``, 0 for radio readings only), and for 90 % of
the decisions reports the chosen arm's measured bandwidth as the outcome (one
outcome per decision, 10 % lost). A user switches to a new ``device_id`` every
:data:`DECISIONS_PER_DEVICE` decisions and paces itself at
``--device-decisions-per-s`` (default 4), under the service's per-device rate
limit, like a fleet of devices rather than one hammering client.

gRPC follows locust's documented pattern for gRPC (examples/grpc in the locust
repository): gevent-patched grpcio (``grpc.experimental.gevent.init_gevent``)
and a client interceptor that fires ``events.request`` for every call.

Against a production deployment (issue 22): ``--jwt-key-file`` mints one HS256 JWT per simulated device
(``sub`` = its device id, signed with the chart's JWT key, the Secret's ``jwt-key``), so per-device rate limits
and outcome caps behave as in the field; ``--ca-file`` verifies the service's TLS certificate on both
transports (gRPC channels are then TLS; ``--grpc-tls`` uses TLS with the system roots) and
``--tls-server-name`` overrides the name checked. ``loadtest/locust.conf`` holds the production run's
settings (README, "Load-testing a deployment").

Run: ``loadtest/run.py`` (headless, CSV + HTML into out/loadtest), or
``locust -f loadtest/locustfile.py --host http://127.0.0.1:8080 --grpc-target 127.0.0.1:50051``, or
``locust --config loadtest/locust.conf --host https://… --grpc-target … --jwt-key-file … --ca-file …``.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import gevent.ssl
import grpc
import grpc.experimental.gevent as grpc_gevent
import jwt
from locust import FastHttpUser, User, constant_throughput, events, task
from locust.exception import LocustError

grpc_gevent.init_gevent()  # grpcio cooperates with gevent (locust's gRPC pattern)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from edgepath_agent.wire import edgepath_pb2 as pb  # noqa: E402
from edgepath_agent.wire import edgepath_pb2_grpc as pb_grpc  # noqa: E402
from tls_names import verified_context_factory  # noqa: E402
from workload import (  # noqa: E402
    AGENT_HISTORY_SAMPLES,
    HISTORY_FORMS,
    Device,
    add_history_arguments,
    outcome_body,
    outcome_proto,
    recommend_body,
    recommend_proto,
    situations,
)

DECISIONS_PER_DEVICE = 100
#: Different histories per situation when no ``--history-variants`` is given (its default too).
HISTORY_VARIANTS = 4
_user_ids = itertools.count()


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument(
        "--grpc-target",
        default=os.environ.get("EDGEPATH_GRPC_TARGET", "127.0.0.1:50051"),
        help="host:port of the EdgePath gRPC server (GrpcDevice users)",
    )
    parser.add_argument(
        "--device-decisions-per-s", type=float, default=4.0, help="Decisions per second of each simulated device"
    )
    parser.add_argument(
        "--edgepath-token",
        default=os.environ.get("EDGEPATH_TOKEN", ""),
        help="Bearer token sent by every device (when the service requires authentication)",
    )
    parser.add_argument(
        "--device-id",
        default=os.environ.get("EDGEPATH_DEVICE_ID", ""),
        help="Use this device_id for every request (the identity --edgepath-token authenticates); default: "
        "a fleet of generated ids (needs a service without authentication, e.g. on loopback)",
    )
    parser.add_argument(
        "--jwt-key-file",
        default=os.environ.get("EDGEPATH_JWT_KEY_FILE", ""),
        help="File holding the service's HS256 JWT key (the chart Secret's jwt-key): one JWT per simulated device",
    )
    parser.add_argument(
        "--ca-file",
        default=os.environ.get("EDGEPATH_CA_FILE", ""),
        help="CA (PEM) verifying the service's TLS certificate on both transports; gRPC channels use TLS",
    )
    parser.add_argument(
        "--grpc-tls",
        action="store_true",
        help="gRPC over TLS with the system roots (no --ca-file); implied by an https:// --host",
    )
    parser.add_argument(
        "--tls-server-name", default="", help="Name the service's certificate is checked against (default: the host)"
    )
    parser.add_argument("--situations", type=int, default=2000, help="Paired situations to load from the data")
    add_history_arguments(parser, variants=HISTORY_VARIANTS)
    parser.add_argument(
        "--final-stats-file",
        default="",
        help="Write the final per-request counts here as JSON (locust's CSV holds the last periodic snapshot)",
    )


@events.quitting.add_listener
def _write_final_stats(environment: Any, **_kwargs: Any) -> None:
    opts = _options_of(environment)
    if not opts or not opts.final_stats_file:
        return
    entries = [*environment.stats.entries.values(), environment.stats.total]
    final = {e.name: {"method": e.method, "requests": e.num_requests, "failures": e.num_failures} for e in entries}
    Path(opts.final_stats_file).write_text(json.dumps(final, indent=2) + "\n")


@events.init.add_listener
def _load_data(environment: Any, **_kwargs: Any) -> None:
    """Pair the situations once, before users spawn (it takes a moment); say once how the service's certificate
    is verified when the host is https:// without --ca-file."""
    opts = _options_of(environment)
    if (environment.host or "").startswith("https://") and not (opts and opts.ca_file):
        logging.getLogger("edgepath.loadtest").warning(
            "%s: verifying the service's certificate with the system roots (no --ca-file / EDGEPATH_CA_FILE): "
            "a self-signed one or the chart's generated CA fails every call with CERTIFICATE_VERIFY_FAILED; "
            "give its ca.crt with --ca-file",
            environment.host,
        )
    situations(opts.situations if opts else 2000)


def _options_of(environment: Any) -> Any:
    return environment.parsed_options


class _DeviceStream:
    """Mixin: the current simulated device of a user, renewed every DECISIONS_PER_DEVICE decisions."""

    def _init_devices(self, environment: Any, transport: str) -> None:
        opts = _options_of(environment)
        self._uid = next(_user_ids)
        self._transport = transport
        self._rng = random.Random(1000 + self._uid)
        self._pool = situations(opts.situations if opts else 2000)
        self._decisions = 0
        self._generation = 0
        self._device = self._new_device()

    def _new_device(self) -> Device:
        self._generation += 1
        opts = _options_of(self.environment)  # type: ignore[attr-defined]
        fixed = opts.device_id if opts else ""
        device_id = fixed or f"loadtest-{self._transport}-{os.getpid()}-{self._uid}-{self._generation}"
        self._token = device_token(opts, device_id)
        return Device(device_id, random.Random(self._rng.random()), self._pool)

    def _current_device(self) -> Device:
        if self._decisions and self._decisions % DECISIONS_PER_DEVICE == 0:
            self._device = self._new_device()
        self._decisions += 1
        return self._device

    def _history(self) -> tuple[int, int, str]:
        """``(history_samples, variant, form)`` of the next context (``--history-samples``, ``--history-variants``,
        ``--history-form``; without options, :func:`workload.add_history_arguments`' defaults)."""
        opts = _options_of(self.environment)  # type: ignore[attr-defined]
        if opts is None:
            return AGENT_HISTORY_SAMPLES, self._rng.randrange(HISTORY_VARIANTS), HISTORY_FORMS[0]
        return opts.history_samples, self._rng.randrange(max(1, opts.history_variants)), opts.history_form


def jwt_key(opts: Any) -> str:
    """The HS256 key of ``--jwt-key-file`` (surrounding whitespace stripped), or "" without one."""
    path = opts.jwt_key_file if opts else ""
    return Path(path).read_text().strip() if path else ""


def device_token(opts: Any, device_id: str, ttl_s: int = 24 * 3600) -> str:
    """The bearer token of ``device_id``: its own JWT (claims ``sub``, ``iat``, ``exp``, as
    ``edgepath.security.auth.issue_jwt`` makes them) with ``--jwt-key-file``, else ``--edgepath-token``, else ""."""
    key = jwt_key(opts)
    if key:
        now = int(time.time())
        return jwt.encode({"sub": device_id, "iat": now, "exp": now + ttl_s}, key, algorithm="HS256")
    return opts.edgepath_token if opts else ""


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _pace(user: Any) -> float:
    opts = _options_of(user.environment)
    rate = opts.device_decisions_per_s if opts else 4.0
    return constant_throughput(rate)(user)


class RestDevice(_DeviceStream, FastHttpUser):
    """A device speaking REST: ``POST /v1/recommendations`` then ``POST /v1/outcomes``."""

    weight = 1
    wait_time = _pace

    def __init__(self, environment: Any) -> None:
        opts = _options_of(environment)
        # Always verify the service's certificate (locust's FastHttpUser skips it by default): against --ca-file,
        # else the system roots (an https:// host without --ca-file used to run unverified while gRPC failed)
        self.insecure = False
        if opts and opts.ca_file:
            # the chain against the CA, the name against --tls-server-name (else the host dialled), as gRPC does
            self.ssl_context_factory = verified_context_factory(
                opts.ca_file, opts.tls_server_name, gevent.ssl.SSLContext
            )
        super().__init__(environment)

    def on_start(self) -> None:
        self._init_devices(self.environment, "rest")

    @property
    def _headers(self) -> dict[str, str]:
        return _bearer(self._token)

    @task
    def decide_and_report(self) -> None:
        device = self._current_device()
        situation = device.next_situation()
        with self.client.post(
            "/v1/recommendations",
            json=recommend_body(situation, device.device_id, *self._history()),
            headers=self._headers,
            name="REST Recommend",
            catch_response=True,
        ) as resp:
            if resp.status_code != 200:
                resp.failure(f"{resp.status_code}: {(resp.text or '')[:200]}")
                return
            rec = resp.json()
            if not rec.get("decision_id"):
                resp.failure("no decision_id")
                return
        if not device.reports_outcome():
            return
        with self.client.post(
            "/v1/outcomes",
            json=outcome_body(situation, device.device_id, rec),
            headers=self._headers,
            name="REST ReportOutcome",
            catch_response=True,
        ) as resp:
            if resp.status_code != 200:
                resp.failure(f"{resp.status_code}: {(resp.text or '')[:200]}")


class LocustInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Reports every unary gRPC call to locust (``events.request``), as in locust's gRPC example."""

    def __init__(self, environment: Any) -> None:
        self.env = environment

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        start = time.perf_counter()
        exception: Exception | None = None
        length = 0
        response = continuation(client_call_details, request)
        try:
            length = response.result().ByteSize()
        except grpc.RpcError as exc:
            exception = exc
        self.env.events.request.fire(
            request_type="grpc",
            name="gRPC " + client_call_details.method.rsplit("/", 1)[-1],
            response_time=(time.perf_counter() - start) * 1000,
            response_length=length,
            response=response,
            context=None,
            exception=exception,
        )
        return response


def grpc_tls(opts: Any, host: str | None) -> bool:
    """Whether the gRPC channels use TLS: with ``--ca-file``, ``--grpc-tls``, or an ``https://`` ``--host`` (the
    service's TLS covers both of its ports: a plaintext channel to its gRPC port fails, "Socket closed")."""
    return bool(opts and (opts.ca_file or opts.grpc_tls)) or (host or "").startswith("https://")


def grpc_channel(opts: Any, target: str, host: str | None = None) -> grpc.Channel:
    """A TLS channel (:func:`grpc_tls`: trusting ``--ca-file``, else the system roots) or a plaintext one to
    ``target``; ``host``: the run's ``--host``."""
    if grpc_tls(opts, host):
        roots = Path(opts.ca_file).read_bytes() if opts and opts.ca_file else None
        name = opts.tls_server_name if opts else ""
        options = [("grpc.ssl_target_name_override", name)] if name else []
        return grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=roots), options=options)
    return grpc.insecure_channel(target)


class GrpcUser(User):
    """Abstract locust user with a gRPC stub (``stub_class``) on ``--grpc-target``."""

    abstract = True
    stub_class: Any = None

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        if self.stub_class is None:
            raise LocustError("You must specify the stub_class.")
        opts = _options_of(environment)
        target = opts.grpc_target if opts else "127.0.0.1:50051"
        channel = grpc_channel(opts, target, environment.host)
        self._channel = grpc.intercept_channel(channel, LocustInterceptor(environment))
        self.stub = self.stub_class(self._channel)

    def on_stop(self) -> None:
        self._channel.close()


class GrpcDevice(_DeviceStream, GrpcUser):
    """A device speaking gRPC: ``PathService/Recommend`` then ``PathService/ReportOutcome``."""

    weight = 1
    wait_time = _pace
    stub_class = pb_grpc.PathServiceStub

    def on_start(self) -> None:
        self._init_devices(self.environment, "grpc")

    @property
    def metadata(self) -> tuple[tuple[str, str], ...] | None:
        return (("authorization", f"Bearer {self._token}"),) if self._token else None

    @task
    def decide_and_report(self) -> None:
        device = self._current_device()
        situation = device.next_situation()
        try:
            reply = self.stub.Recommend(
                recommend_proto(pb, situation, device.device_id, *self._history()), timeout=5.0, metadata=self.metadata
            )
        except grpc.RpcError:
            return  # already reported as a failure by the interceptor
        if device.reports_outcome():
            try:
                self.stub.ReportOutcome(
                    outcome_proto(pb, situation, device.device_id, reply), timeout=5.0, metadata=self.metadata
                )
            except grpc.RpcError:
                pass
