"""Clients of the EdgePath service: gRPC (``grpc://HOST:PORT``) and REST (``http://HOST:PORT``).

Both take requests in the REST JSON shape of ``/v1/recommendations`` and ``/v1/outcomes``
(see proto/edgepath/v1/edgepath.proto for fields and units) and return typed replies
(:class:`~edgepath_agent.messages.Recommendation`, :class:`~edgepath_agent.messages.OutcomeAck`),
each parsed once from its transport's form, so callers don't care which transport carries them.

Errors: :class:`ServiceError` with ``code`` (gRPC status name or HTTP status; ``INVALID_ARGUMENT`` for a
request the client cannot encode, ``BAD_RESPONSE`` for a reply that is not JSON or of the wrong shape) and the message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import ParseResult, urlparse

import grpc
import httpx
import pydantic
from google.protobuf import json_format

from edgepath_agent.messages import OutcomeAck, Recommendation, outcome_to_proto, request_to_proto
from edgepath_agent.safety import ClientCredentials
from edgepath_agent.wire import edgepath_pb2_grpc as pb_grpc


class ServiceError(Exception):
    """The service refused or failed a call. ``code``: gRPC status name or HTTP status code."""

    def __init__(self, code: str | int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ServiceClient(Protocol):
    """What the agent needs from the service, whatever the transport."""

    url: str

    def recommend(self, request: Mapping[str, Any]) -> Recommendation:
        """RecommendRequest (REST JSON shape) → the typed reply."""

    def report_outcome(self, outcome: Mapping[str, Any]) -> OutcomeAck:
        """OutcomeRequest (REST JSON shape) → the typed acknowledgement."""

    def close(self) -> None: ...


class GrpcServiceClient:
    """gRPC client; ``timeout_s`` is the per-call deadline."""

    def __init__(
        self, target: str, timeout_s: float = 2.0, credentials: ClientCredentials | None = None, tls: bool = False
    ) -> None:
        self.url = f"{'grpcs' if tls else 'grpc'}://{target}"
        self.timeout_s = timeout_s
        # security: TLS with verification (grpcs://), client certificate / bearer token from ``credentials``
        creds = credentials or ClientCredentials()
        self._metadata = creds.metadata()
        if tls:
            self._channel = grpc.secure_channel(target, creds.grpc_channel_credentials())
        else:
            self._channel = grpc.insecure_channel(target)
        self._stub = pb_grpc.PathServiceStub(self._channel)

    def recommend(self, request: Mapping[str, Any]) -> Recommendation:
        msg = _encode(request_to_proto, request)
        try:
            reply = self._stub.Recommend(msg, timeout=self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise ServiceError(exc.code().name, exc.details() or "") from exc
        return _decode(Recommendation.from_proto, reply)

    def report_outcome(self, outcome: Mapping[str, Any]) -> OutcomeAck:
        msg = _encode(outcome_to_proto, outcome)
        try:
            reply = self._stub.ReportOutcome(msg, timeout=self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise ServiceError(exc.code().name, exc.details() or "") from exc
        return _decode(OutcomeAck.from_proto, reply)

    def close(self) -> None:
        self._channel.close()


class RestServiceClient:
    """REST client over httpx; ``timeout_s`` is the per-request timeout."""

    def __init__(self, base_url: str, timeout_s: float = 2.0, credentials: ClientCredentials | None = None) -> None:
        self.url = base_url.rstrip("/")
        # security: https:// verifies the server (CA from ``credentials`` or the system roots); bearer token header
        options = (credentials or ClientCredentials()).httpx_options()
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s, **options)

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            resp = self._http.post(path, json=dict(body))
        except httpx.HTTPError as exc:
            raise ServiceError("UNAVAILABLE", str(exc)) from exc
        if resp.status_code != 200:
            try:
                detail = resp.json()
                message = f"{detail.get('field') or ''} {detail.get('message') or detail}".strip()
            except ValueError:
                message = resp.text
            raise ServiceError(resp.status_code, message)
        try:
            result = resp.json()
        except ValueError as exc:  # a proxy's error page, a truncated body, another service on the port
            raise ServiceError(BAD_RESPONSE, f"reply of {path} is not JSON: {resp.text[:80]!r}") from exc
        if not isinstance(result, dict):
            raise ServiceError(BAD_RESPONSE, f"reply of {path} is not a JSON object")
        return result

    def recommend(self, request: Mapping[str, Any]) -> Recommendation:
        return _decode(Recommendation.from_rest, self._post("/v1/recommendations", request))

    def report_outcome(self, outcome: Mapping[str, Any]) -> OutcomeAck:
        return _decode(
            OutcomeAck.from_rest, self._post("/v1/outcomes", {k: v for k, v in outcome.items() if v is not None})
        )

    def close(self) -> None:
        self._http.close()


def _encode(to_proto: Any, body: Mapping[str, Any]) -> Any:
    """``body`` (REST JSON shape) as its proto message; a shape the proto cannot hold → ``INVALID_ARGUMENT``."""
    try:
        return to_proto(body)
    except (json_format.ParseError, KeyError, TypeError, ValueError) as exc:
        raise ServiceError("INVALID_ARGUMENT", f"request not encodable: {exc}") from exc


def _decode(parse: Any, reply: Any) -> Any:
    """The typed reply; a reply of the wrong shape → ``BAD_RESPONSE`` naming the field.

    Transient (:func:`is_transient`): a proxy's page or another service on the port is not the service, so
    the call is retried and the next transport tried, while the agent keeps its last configuration.
    """
    try:
        return parse(reply)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ServiceError(BAD_RESPONSE, f"{field}: {first['msg']}") from exc


def connect(url: str, timeout_s: float = 2.0, credentials: ClientCredentials | None = None) -> ServiceClient:
    """Client for ``grpc://HOST:PORT``, ``grpcs://HOST:PORT`` (TLS), ``http://`` or ``https://HOST:PORT``.

    ``credentials`` (:class:`~edgepath_agent.safety.ClientCredentials`) carries the CA that
    verifies the service, the device certificate/key (mTLS) and a bearer token.

    Raises
    ------
    ValueError
        For any other scheme or a URL without a port.
    PermissionError
        The private key file is readable by group/others.
    """
    parsed = check_service_url(url)
    if parsed.scheme in ("grpc", "grpcs"):
        target = f"{parsed.hostname}:{parsed.port}"
        return GrpcServiceClient(target, timeout_s, credentials, tls=parsed.scheme == "grpcs")
    return RestServiceClient(url, timeout_s, credentials)


def check_service_url(url: str) -> ParseResult:
    """``url`` parsed, when :func:`connect` can make a client of it (also the check of the ``service`` setting).

    Raises
    ------
    ValueError
        For any scheme but ``grpc``, ``grpcs``, ``http``, ``https``, or a gRPC URL without a port.
    """
    parsed = urlparse(url)
    if parsed.scheme in ("grpc", "grpcs"):
        try:
            port = parsed.port
        except ValueError:  # a port that is not a number or out of range
            port = None
        if not parsed.hostname or not port:
            raise ValueError(f"{url!r}: grpc URL needs HOST:PORT, e.g. grpc://127.0.0.1:50051")
        return parsed
    if parsed.scheme in ("http", "https"):
        if not parsed.hostname:
            raise ValueError(f"{url!r}: needs a host, e.g. http://127.0.0.1:8080")
        return parsed
    raise ValueError(f"{url!r}: use grpc://, grpcs://, http:// or https://HOST:PORT")


#: Failures worth another attempt (the service or the network may come back).
#: Server-side failures a retry (or the other transport) may fix. INTERNAL/UNKNOWN include replies the
#: client cannot parse (a server answering garbage): the agent keeps its last configuration (issue 17).
#: CANCELLED: this client never cancels its own calls, so it is the service's gRPC core refusing a call past its
#: pending-call bound (``grpc_max_pending_calls``) before any handler saw it.
TRANSIENT_GRPC = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "INTERNAL", "UNKNOWN", "CANCELLED"}
)
#: Code of a reply that is not what the API documents (not JSON, wrong shape): treated as transient.
BAD_RESPONSE = "BAD_RESPONSE"


def check_recommendation(rec: Any) -> Recommendation:
    """``rec`` parsed as a :class:`Recommendation` (the one parse of every transport's reply).

    Raises
    ------
    ServiceError
        ``BAD_RESPONSE`` (transient) naming the first field of the wrong shape.
    """
    return _decode(Recommendation.from_rest, rec)


def is_transient(exc: BaseException) -> bool:
    """True for errors a retry or another transport may fix (not for invalid input)."""
    if not isinstance(exc, ServiceError):
        return False
    if isinstance(exc.code, int):
        return exc.code >= 500 or exc.code == 429
    return exc.code in TRANSIENT_GRPC or exc.code == BAD_RESPONSE


class FailoverClient:
    """gRPC first, REST fallback, each with retries and exponential backoff (tenacity).

    Each client in ``clients`` (in order) gets ``attempts`` tries with jittered
    exponential waits from ``backoff_initial_s`` up to ``backoff_max_s``; only
    transient failures (:func:`is_transient`) move on. Retrying ``report_outcome``
    is safe: the service counts an outcome once per ``decision_id``.

    ``stop`` (the daemon's SIGTERM event): once it is set, a backoff wait in progress ends at once and no call is
    retried, so each remaining transport gets one attempt (at most ``timeout_s`` each) and a stop is not held up by
    ``attempts`` × transports × (``timeout_s`` + backoff), which could outlast systemd's ``TimeoutStopSec=``.

    Raises
    ------
    ServiceError
        The last transient error when every transport failed, or the first
        non-transient one (e.g. invalid input) at once.
    """

    def __init__(
        self,
        clients: list[ServiceClient],
        attempts: int = 3,
        backoff_initial_s: float = 0.1,
        backoff_max_s: float = 2.0,
        stop: threading.Event | None = None,
    ) -> None:
        if not clients:
            raise ValueError("FailoverClient needs at least one client")
        self.clients = clients
        self.attempts = attempts
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.url = " → ".join(c.url for c in clients)
        self.last_used: str | None = None
        self.stop = stop

    def _sleep(self, seconds: float) -> None:
        """tenacity's wait between attempts: ``seconds``, or until :attr:`stop` is set."""
        if self.stop is None:
            time.sleep(seconds)
        else:
            self.stop.wait(seconds)

    def _call(self, method: str, body: Mapping[str, Any]) -> Any:
        from tenacity import (
            Retrying,
            retry_if_exception,
            stop_after_attempt,
            stop_any,
            stop_when_event_set,
            wait_exponential_jitter,
        )

        stop = stop_any(stop_after_attempt(self.attempts))
        if self.stop is not None:
            stop = stop_any(stop_after_attempt(self.attempts), stop_when_event_set(self.stop))  # stopping: no retry
        last: ServiceError | None = None
        for client in self.clients:
            try:
                for attempt in Retrying(
                    sleep=self._sleep,
                    stop=stop,
                    wait=wait_exponential_jitter(
                        multiplier=self.backoff_initial_s, max=self.backoff_max_s, jitter=self.backoff_initial_s
                    ),
                    retry=retry_if_exception(is_transient),
                    reraise=True,
                ):
                    with attempt:
                        result = getattr(client, method)(body)
                        self.last_used = client.url
                        return result
            except ServiceError as exc:
                if not is_transient(exc):
                    raise
                last = exc
        assert last is not None
        raise last

    def recommend(self, request: Mapping[str, Any]) -> Recommendation:
        result: Recommendation = self._call("recommend", request)
        return result

    def report_outcome(self, outcome: Mapping[str, Any]) -> OutcomeAck:
        result: OutcomeAck = self._call("report_outcome", outcome)
        return result

    def close(self) -> None:
        for client in self.clients:
            client.close()


def connect_failover(
    urls: list[str], timeout_s: float = 2.0, attempts: int = 3, credentials: ClientCredentials | None = None
) -> FailoverClient:
    """:class:`FailoverClient` over ``urls`` (put ``grpc://`` first, ``http://`` as fallback).

    Raises
    ------
    ValueError
        For a URL :func:`connect` rejects.
    """
    return FailoverClient([connect(u, timeout_s, credentials) for u in urls], attempts=attempts)
