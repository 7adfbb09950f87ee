"""Clients of the EdgePath service: gRPC (``grpc://HOST:PORT``) and REST (``http://HOST:PORT``).

Both speak the same JSON-shaped dicts (the REST bodies of ``/v1/recommendations``
and ``/v1/outcomes``; see proto/edgepath/v1/edgepath.proto for fields and units),
so callers don't care which transport carries them.

Errors: :class:`ServiceError` with ``code`` (gRPC status name or HTTP status)
and the service's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlparse

import grpc
import httpx
from google.protobuf import json_format

from edgepath_agent.safety import ClientCredentials
from edgepath_agent.wire import edgepath_pb2 as pb
from edgepath_agent.wire import edgepath_pb2_grpc as pb_grpc

_ACCESS_TO_PROTO = {
    "WIFI": "ACCESS_TYPE_WIFI",
    "LTE": "ACCESS_TYPE_LTE",
    "NR": "ACCESS_TYPE_NR",
    "ETHERNET": "ACCESS_TYPE_ETHERNET",
}
_ACCESS_FROM_PROTO = {v: k for k, v in _ACCESS_TO_PROTO.items()}


class ServiceError(Exception):
    """The service refused or failed a call. ``code``: gRPC status name or HTTP status code."""

    def __init__(self, code: str | int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ServiceClient(Protocol):
    """What the agent needs from the service, whatever the transport."""

    url: str

    def recommend(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """RecommendRequest dict → Recommendation dict (REST JSON shape)."""

    def report_outcome(self, outcome: Mapping[str, Any]) -> dict[str, Any]:
        """OutcomeRequest dict → OutcomeAck dict."""

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

    def recommend(self, request: Mapping[str, Any]) -> dict[str, Any]:
        msg = pb.RecommendRequest(
            device_id=request["device_id"],
            interfaces=[_interface_to_proto(i) for i in request["interfaces"]],
        )
        # Optional blocks (MLPM histories, kernel capabilities, application profile, SSMP content): same JSON shape.
        extra = {k: v for k, v in request.items() if k not in ("device_id", "interfaces") and v is not None}
        if "application_profile" in extra:
            extra["application_profile"] = f"APPLICATION_PROFILE_{extra['application_profile']}"
        if extra:
            json_format.ParseDict(extra, msg)
        try:
            reply = self._stub.Recommend(msg, timeout=self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise ServiceError(exc.code().name, exc.details() or "") from exc
        out = json_format.MessageToDict(
            reply, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        pp = out["primary_path"]
        pp["access_type"] = _ACCESS_FROM_PROTO.get(pp["access_type"], pp["access_type"])
        pp["arms"] = [_ACCESS_FROM_PROTO.get(a, a) for a in pp.get("arms", [])]
        out["model_version"] = int(out["model_version"])
        out["decided_at_unix_ms"] = int(out["decided_at_unix_ms"])
        if "congestion" in out:  # enum names as REST spells them: "BULK", not "APPLICATION_PROFILE_BULK"
            out["congestion"]["profile"] = str(out["congestion"].get("profile", "")).removeprefix(
                "APPLICATION_PROFILE_"
            )
        return out

    def report_outcome(self, outcome: Mapping[str, Any]) -> dict[str, Any]:
        msg = pb.OutcomeRequest(**{k: v for k, v in outcome.items() if v is not None})
        try:
            reply = self._stub.ReportOutcome(msg, timeout=self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise ServiceError(exc.code().name, exc.details() or "") from exc
        return json_format.MessageToDict(
            reply, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )

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

    def recommend(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return check_recommendation(self._post("/v1/recommendations", request))

    def report_outcome(self, outcome: Mapping[str, Any]) -> dict[str, Any]:
        return self._post("/v1/outcomes", {k: v for k, v in outcome.items() if v is not None})

    def close(self) -> None:
        self._http.close()


def _interface_to_proto(iface: Mapping[str, Any]) -> pb.InterfaceContext:
    fields = {k: v for k, v in iface.items() if v is not None}
    fields["access_type"] = _ACCESS_TO_PROTO.get(fields.get("access_type", ""), 0)
    return pb.InterfaceContext(**fields)


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
    parsed = urlparse(url)
    if parsed.scheme in ("grpc", "grpcs"):
        if not parsed.port:
            raise ValueError(f"{url!r}: grpc URL needs a port, e.g. grpc://127.0.0.1:50051")
        target = f"{parsed.hostname}:{parsed.port}"
        return GrpcServiceClient(target, timeout_s, credentials, tls=parsed.scheme == "grpcs")
    if parsed.scheme in ("http", "https"):
        return RestServiceClient(url, timeout_s, credentials)
    raise ValueError(f"{url!r}: use grpc://, grpcs://, http:// or https://HOST:PORT")


#: Failures worth another attempt (the service or the network may come back).
#: Server-side failures a retry (or the other transport) may fix. INTERNAL/UNKNOWN include replies the
#: client cannot parse (a server answering garbage): the agent keeps its last configuration (issue 17).
TRANSIENT_GRPC = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "INTERNAL", "UNKNOWN"})
#: Code of a reply that is not what the API documents (not JSON, wrong shape): treated as transient.
BAD_RESPONSE = "BAD_RESPONSE"


def check_recommendation(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` if it has the documented shape the agent relies on, else :class:`ServiceError` ``BAD_RESPONSE``.

    Needed: ``decision_id`` (string) and ``primary_path.interface`` (string); the applier validates the rest.
    """
    pp = rec.get("primary_path")
    if (
        not isinstance(rec.get("decision_id"), str)
        or not isinstance(pp, dict)
        or not isinstance(pp.get("interface"), str)
    ):
        raise ServiceError(BAD_RESPONSE, "recommendation without decision_id / primary_path.interface")
    return rec


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
    ) -> None:
        if not clients:
            raise ValueError("FailoverClient needs at least one client")
        self.clients = clients
        self.attempts = attempts
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.url = " → ".join(c.url for c in clients)
        self.last_used: str | None = None

    def _call(self, method: str, body: Mapping[str, Any]) -> dict[str, Any]:
        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

        last: ServiceError | None = None
        for client in self.clients:
            try:
                for attempt in Retrying(
                    stop=stop_after_attempt(self.attempts),
                    wait=wait_exponential_jitter(
                        multiplier=self.backoff_initial_s, max=self.backoff_max_s, jitter=self.backoff_initial_s
                    ),
                    retry=retry_if_exception(is_transient),
                    reraise=True,
                ):
                    with attempt:
                        result: dict[str, Any] = getattr(client, method)(body)
                        self.last_used = client.url
                        return result
            except ServiceError as exc:
                if not is_transient(exc):
                    raise
                last = exc
        assert last is not None
        raise last

    def recommend(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return self._call("recommend", request)

    def report_outcome(self, outcome: Mapping[str, Any]) -> dict[str, Any]:
        return self._call("report_outcome", outcome)

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
