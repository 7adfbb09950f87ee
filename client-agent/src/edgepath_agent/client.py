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

from edgepath_agent.wire import edgepath_pb2 as pb
from edgepath_agent.wire import edgepath_pb2_grpc as pb_grpc

_ACCESS_TO_PROTO = {"WIFI": "ACCESS_TYPE_WIFI", "LTE": "ACCESS_TYPE_LTE", "NR": "ACCESS_TYPE_NR", "ETHERNET": "ACCESS_TYPE_ETHERNET"}
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

    def __init__(self, target: str, timeout_s: float = 2.0) -> None:
        self.url = f"grpc://{target}"
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(target)
        self._stub = pb_grpc.PathServiceStub(self._channel)

    def recommend(self, request: Mapping[str, Any]) -> dict[str, Any]:
        msg = pb.RecommendRequest(
            device_id=request["device_id"],
            interfaces=[_interface_to_proto(i) for i in request["interfaces"]],
        )
        try:
            reply = self._stub.Recommend(msg, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise ServiceError(exc.code().name, exc.details() or "") from exc
        out = json_format.MessageToDict(reply, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
        pp = out["primary_path"]
        pp["access_type"] = _ACCESS_FROM_PROTO.get(pp["access_type"], pp["access_type"])
        pp["arms"] = [_ACCESS_FROM_PROTO.get(a, a) for a in pp.get("arms", [])]
        out["model_version"] = int(out["model_version"])
        out["decided_at_unix_ms"] = int(out["decided_at_unix_ms"])
        return out

    def report_outcome(self, outcome: Mapping[str, Any]) -> dict[str, Any]:
        msg = pb.OutcomeRequest(**{k: v for k, v in outcome.items() if v is not None})
        try:
            reply = self._stub.ReportOutcome(msg, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise ServiceError(exc.code().name, exc.details() or "") from exc
        return json_format.MessageToDict(reply, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)

    def close(self) -> None:
        self._channel.close()


class RestServiceClient:
    """REST client over httpx; ``timeout_s`` is the per-request timeout."""

    def __init__(self, base_url: str, timeout_s: float = 2.0) -> None:
        self.url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s)

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
        result: dict[str, Any] = resp.json()
        return result

    def recommend(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return self._post("/v1/recommendations", request)

    def report_outcome(self, outcome: Mapping[str, Any]) -> dict[str, Any]:
        return self._post("/v1/outcomes", {k: v for k, v in outcome.items() if v is not None})

    def close(self) -> None:
        self._http.close()


def _interface_to_proto(iface: Mapping[str, Any]) -> pb.InterfaceContext:
    fields = {k: v for k, v in iface.items() if v is not None}
    fields["access_type"] = _ACCESS_TO_PROTO.get(fields.get("access_type", ""), 0)
    return pb.InterfaceContext(**fields)


def connect(url: str, timeout_s: float = 2.0) -> ServiceClient:
    """Client for ``grpc://HOST:PORT`` or ``http://HOST:PORT``.

    Raises
    ------
    ValueError
        For any other scheme or a URL without a port.
    """
    parsed = urlparse(url)
    if parsed.scheme == "grpc":
        if not parsed.port:
            raise ValueError(f"{url!r}: grpc URL needs a port, e.g. grpc://127.0.0.1:50051")
        return GrpcServiceClient(f"{parsed.hostname}:{parsed.port}", timeout_s)
    if parsed.scheme in ("http", "https"):
        return RestServiceClient(url, timeout_s)
    raise ValueError(f"{url!r}: use grpc://HOST:PORT or http://HOST:PORT")
