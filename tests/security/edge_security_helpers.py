"""Helpers for the security and fuzz tests: real servers, a test PKI, raw gRPC calls.

``running_service`` is the project's service harness (``tests/service_harness.py``); ``issue_tokens`` and
``secured_service`` start one with authentication on; ``TransportClient`` holds a REST client and a gRPC channel on
one, for the tests run over each transport.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import ipaddress
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TypeVar

import grpc
import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from edgepath.security.auth import TokenFile
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from service_harness import RunningService, running_service

__all__ = ["running_service"]

M = TypeVar("M", bound=Message)

RECOMMEND = "/edgepath.v1.PathService/Recommend"
REPORT_OUTCOME = "/edgepath.v1.PathService/ReportOutcome"


def context_body(device_id: str, link_speed_mbps: float = 100.0) -> dict[str, Any]:
    """A valid WiFi + LTE RecommendRequest body."""
    return {
        "device_id": device_id,
        "interfaces": [
            {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60.0, "link_speed_mbps": link_speed_mbps},
            {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -95.0, "rsrq_db": -10.0, "cqi": 9},
        ],
    }


def assert_outcome_cap_counts_every_report(http_port: int, device_id: str) -> None:
    """Against a service on ``http_port`` with ``outcome_cap_per_window=3`` (default window, one hour): a report of
    an unknown decision and an implausible one spend a token each, as an accepted one does; the fourth report
    (a duplicate of the accepted one) is refused 429 with a retry hint."""
    with httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=5.0) as http:
        rec = http.post("/v1/recommendations", json=context_body(device_id, link_speed_mbps=50.0)).json()
        unknown = {"device_id": device_id, "decision_id": "no-such-decision", "throughput_bps": 1e6}
        assert http.post("/v1/outcomes", json=unknown).status_code == 404
        body: dict[str, Any] = {"device_id": device_id, "decision_id": rec["decision_id"], "throughput_bps": 1e12}
        assert http.post("/v1/outcomes", json=body).status_code == 422  # implausible (50 Mbit/s WiFi + LTE)
        body["throughput_bps"] = 4e6
        assert http.post("/v1/outcomes", json=body).json()["accepted"] is True
        refused = http.post("/v1/outcomes", json=body)
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= 1100  # one token per 3600 / 3 s


# --- a service with authentication on, and clients over both transports ------------------------------------------
def issue_tokens(directory: Path, devices: Sequence[str] = (), admins: Sequence[str] = ()) -> dict[str, Any]:
    """A hashed-tokens file ``directory/tokens.json`` (as ``edgepath tokens add`` writes it) with a bearer token for
    each device id and each admin id: ``{"path": the file, id: its token, ...}``."""
    tokens = TokenFile(directory / "tokens.json")
    issued: dict[str, Any] = {"path": tokens.path}
    for principal in devices:
        issued[principal] = tokens.add(principal)
    for principal in admins:
        issued[principal] = tokens.add(principal, admin=True)
    return issued


@contextlib.contextmanager
def secured_service(tokens: Mapping[str, Any], **overrides: Any) -> Iterator[RunningService]:
    """``running_service`` authenticating with the tokens file of :func:`issue_tokens`' ``tokens``, and
    ``overrides`` (other settings)."""
    with running_service(auth_tokens_file=tokens["path"], **overrides) as svc:
        yield svc


class TransportClient:
    """A REST client (``http``, timeout :attr:`timeout_s` s) and a plaintext gRPC channel with its PathService stub
    (``stub``) on one running service, for a test run over ``transport`` (``"rest"`` or ``"grpc"``). ``close``
    closes both, as leaving a ``with`` block does."""

    timeout_s = 5.0

    def __init__(self, transport: str, service: RunningService) -> None:
        self.transport = transport
        self.http = httpx.Client(base_url=service.http_url, timeout=self.timeout_s)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}")
        self.stub = pb_grpc.PathServiceStub(self.channel)

    def close(self) -> None:
        self.http.close()
        self.channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def proto_from_rest(body: Mapping[str, Any], message: M) -> M:
    """A REST-shaped RecommendRequest ``body`` parsed into ``message`` (a protobuf of the same shape, which it
    returns): the enum names take their proto prefix (``WIFI`` → ``ACCESS_TYPE_WIFI``, ``BULK`` →
    ``APPLICATION_PROFILE_BULK``); ``body`` itself is left as it was."""
    item = copy.deepcopy(dict(body))
    for iface in item.get("interfaces", []):
        iface["access_type"] = f"ACCESS_TYPE_{iface['access_type']}"
    if "application_profile" in item:
        item["application_profile"] = f"APPLICATION_PROFILE_{item['application_profile']}"
    return json_format.ParseDict(item, message)


# --- raw gRPC --------------------------------------------------------------------------------------------------
def grpc_unary(
    channel: grpc.Channel, method: str, payload: bytes, metadata: Sequence[tuple[str, str]] = (), timeout: float = 5.0
) -> tuple[grpc.StatusCode, bytes | None, str, dict[str, str]]:
    """Call ``method`` with raw request bytes (identity serializers); returns (code, reply bytes, details, trailers)."""
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    try:
        reply, info = call.with_call(payload, metadata=tuple(metadata), timeout=timeout)
        return grpc.StatusCode.OK, reply, "", {m.key: m.value for m in info.trailing_metadata() or ()}
    except grpc.RpcError as exc:
        trailers = {m.key: m.value for m in exc.trailing_metadata() or ()}  # type: ignore[attr-defined]
        return exc.code(), None, exc.details() or "", trailers  # type: ignore[attr-defined]


# --- test PKI --------------------------------------------------------------------------------------------------
@dataclass
class Pki:
    """Files of a throw-away PKI: a CA, the server's certificate and device certificates."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    dir: Path

    def client(self, common_name: str, *, ca: str = "ca") -> tuple[Path, Path]:
        """(cert, key) of a client certificate for ``common_name`` signed by ``ca`` ("ca" or "rogue")."""
        return self.dir / f"{ca}-{common_name}.crt", self.dir / f"{ca}-{common_name}.key"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    os.chmod(path, 0o600)


def _cert(
    subject_cn: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    san: list[x509.GeneralName] | None = None,
    client: bool = False,
    valid_for: dt.timedelta = dt.timedelta(days=1),
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(
    directory: Path,
    clients: Sequence[str] = ("dev-a",),
    rogue_clients: Sequence[str] = (),
    valid_for: Mapping[str, dt.timedelta] | None = None,
) -> Pki:
    """Generate a CA, a server certificate for localhost/127.0.0.1 and client certificates (CN = device id).

    ``rogue_clients`` get certificates from a second, untrusted CA. Every certificate is valid from 5 minutes ago
    for a day, a client named in ``valid_for`` for that long from now (its ``notAfter``, to the second).
    """
    directory.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    cas: dict[str, tuple[x509.Certificate, ec.EllipticCurvePrivateKey]] = {}
    for ca_name in ("ca", "rogue"):
        ca_key = _key()
        cas[ca_name] = (_cert(f"EdgePath test {ca_name}", ca_key, None, ca_key, ca=True), ca_key)
    ca_cert, ca_key = cas["ca"]
    (directory / "ca.crt").write_bytes(ca_cert.public_bytes(pem))
    server_key = _key()
    san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server_cert = _cert("localhost", server_key, ca_cert.subject, ca_key, san=san)
    (directory / "server.crt").write_bytes(server_cert.public_bytes(pem))
    _write_key(directory / "server.key", server_key)
    for ca_name, names in (("ca", clients), ("rogue", rogue_clients)):
        issuer_cert, issuer_key = cas[ca_name]
        for cn in names:
            key = _key()
            lifetime = (valid_for or {}).get(cn, dt.timedelta(days=1))
            cert = _cert(cn, key, issuer_cert.subject, issuer_key, client=True, valid_for=lifetime)
            (directory / f"{ca_name}-{cn}.crt").write_bytes(cert.public_bytes(pem))
            _write_key(directory / f"{ca_name}-{cn}.key", key)
    return Pki(directory / "ca.crt", directory / "server.crt", directory / "server.key", directory)
