"""mTLS on gRPC (client certificate = device identity) and HTTPS on REST, with certificates made in the test."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from cryptography import x509
from edge_security_helpers import context_body, make_pki, running_service
from edgepath.errors import Unauthenticated
from edgepath.security.auth import TokenFile, certificate_not_after
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_pki(
        tmp_path_factory.mktemp("pki"),
        clients=["dev-a", "dev-short"],
        rogue_clients=["dev-a"],
        valid_for={"dev-short": dt.timedelta(minutes=10)},
    )


@pytest.fixture(scope="module")
def tls_service(pki: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tokens = TokenFile(tmp_path_factory.mktemp("tok") / "tokens.json")
    token = tokens.add("dev-rest")
    with running_service(
        profile="prod",
        tls_cert_file=pki.server_cert,
        tls_key_file=pki.server_key,
        tls_client_ca_file=pki.ca_cert,
        auth_tokens_file=tokens.path,
    ) as svc:
        svc.rest_token = token
        yield svc


def _channel(svc: Any, pki: Any, client: tuple[Path, Path] | None) -> grpc.Channel:
    key, chain = (client[1].read_bytes(), client[0].read_bytes()) if client else (None, None)
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki.ca_cert.read_bytes(), private_key=key, certificate_chain=chain
    )
    return grpc.secure_channel(f"localhost:{svc.grpc_port}", creds)


def _request(device_id: str) -> pb.RecommendRequest:
    return pb.RecommendRequest(
        device_id=device_id,
        interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI, wifi_rssi_dbm=-60.0)],
    )


def test_client_certificate_identifies_the_device(tls_service: Any, pki: Any) -> None:
    with _channel(tls_service, pki, pki.client("dev-a")) as channel:
        stub = pb_grpc.PathServiceStub(channel)
        rec = stub.Recommend(_request("dev-a"), timeout=5.0)
        assert rec.decision_id
        ack = stub.ReportOutcome(
            pb.OutcomeRequest(device_id="dev-a", decision_id=rec.decision_id, throughput_bps=1e6), timeout=5.0
        )
        assert ack.accepted
        # The certificate says dev-a: asking as dev-b is refused.
        with pytest.raises(grpc.RpcError) as err:
            stub.Recommend(_request("dev-b"), timeout=5.0)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_no_client_certificate_fails_the_handshake(tls_service: Any, pki: Any) -> None:
    with _channel(tls_service, pki, None) as channel:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.PathServiceStub(channel).Recommend(_request("dev-a"), timeout=5.0)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_certificate_from_another_ca_is_refused(tls_service: Any, pki: Any) -> None:
    with _channel(tls_service, pki, pki.client("dev-a", ca="rogue")) as channel:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.PathServiceStub(channel).Recommend(_request("dev-a"), timeout=5.0)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_plaintext_grpc_is_refused(tls_service: Any) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{tls_service.grpc_port}") as channel:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.PathServiceStub(channel).Recommend(_request("dev-a"), timeout=5.0)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_rest_over_https_with_bearer_token(tls_service: Any, pki: Any) -> None:
    url = f"https://localhost:{tls_service.http_port}"
    with httpx.Client(base_url=url, verify=ssl.create_default_context(cafile=str(pki.ca_cert)), timeout=5.0) as http:
        headers = {"Authorization": f"Bearer {tls_service.rest_token}"}
        assert http.post("/v1/recommendations", json=context_body("dev-rest"), headers=headers).status_code == 200
        assert http.post("/v1/recommendations", json=context_body("dev-rest")).status_code == 401
    with pytest.raises(httpx.TransportError):  # plain HTTP on the TLS port: no HTTP answer
        httpx.get(f"http://127.0.0.1:{tls_service.http_port}/healthz", timeout=5.0).raise_for_status()


def test_the_start_up_line_says_what_a_caller_must_present(tls_service: Any) -> None:
    """The serving line an operator reads first: HTTPS (it said ``http://`` under TLS), client certificates on
    gRPC, authentication and the profile, where ``/metrics`` is, and where training runs."""
    line = tls_service.service.describe()
    assert f"HTTP https://127.0.0.1:{tls_service.http_port}" in line
    assert f"metrics https://127.0.0.1:{tls_service.http_port}/metrics" in line
    assert "TLS, client certificates required on gRPC, authentication on (profile prod)" in line
    assert "store memory://, trainer in this process" in line
    assert "http://" not in line


class ScriptedClock:
    """Wall-clock Unix seconds that move only when the test says (the authenticator's ``clock``)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(tls_service: Any) -> Iterator[ScriptedClock]:
    """The running service's authenticator on a scripted clock for one test."""
    auth = tls_service.service.security.auth
    scripted = ScriptedClock()
    auth.clock = scripted
    yield scripted
    auth.clock = time.time


def _not_after(cert: Path) -> float:
    return x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc.timestamp()


async def _ask(call: Any, device_id: str) -> Any:
    """Send one message on an open RecommendStream; its reply, or the error that ended the stream."""
    try:
        await call.write(_request(device_id))
        return await call.read()
    except grpc.aio.AioRpcError as exc:
        return exc


def test_a_client_certificate_that_expires_mid_stream_refuses_the_next_message(
    tls_service: Any, pki: Any, clock: ScriptedClock
) -> None:
    """The handshake checked the certificate once; the stream checks its notAfter (valid through that second) at
    every message: past it, UNAUTHENTICATED saying so, trailing ``message-index``; the replies sent stand, and a
    stream of a certificate still valid goes on."""
    short_cert, short_key = pki.client("dev-short")
    not_after = _not_after(short_cert)

    def credentials(cert: Path, key: Path) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(pki.ca_cert.read_bytes(), key.read_bytes(), cert.read_bytes())

    async def run() -> tuple[list[Any], list[Any]]:
        address = f"localhost:{tls_service.grpc_port}"
        async with (
            grpc.aio.secure_channel(address, credentials(short_cert, short_key)) as short_channel,
            grpc.aio.secure_channel(address, credentials(*pki.client("dev-a"))) as long_channel,
        ):
            short = pb_grpc.PathServiceStub(short_channel).RecommendStream(timeout=30.0)
            other = pb_grpc.PathServiceStub(long_channel).RecommendStream(timeout=30.0)
            answers = [await _ask(short, "dev-short")]
            clock.now = not_after  # the last second it is valid
            answers.append(await _ask(short, "dev-short"))
            clock.now = not_after + 1.0
            answers.append(await _ask(short, "dev-short"))
            others = [await _ask(other, "dev-a")]
            other.cancel()
            return answers, others

    answers, others = asyncio.run(run())
    assert all(isinstance(a, pb.Recommendation) and a.decision_id for a in answers[:2]), answers[:2]
    refused = answers[2]
    assert isinstance(refused, grpc.aio.AioRpcError), refused
    assert refused.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "certificate expired" in (refused.details() or "")
    assert {str(k): str(v) for k, v in refused.trailing_metadata() or ()}["message-index"] == "2"
    assert isinstance(others[0], pb.Recommendation), others[0]  # dev-a's certificate is valid for a day


def test_a_connection_that_outlives_its_client_certificate_is_refused_per_call(
    tls_service: Any, pki: Any, clock: ScriptedClock
) -> None:
    """A unary call on a connection opened while the certificate was valid: served through its notAfter second,
    UNAUTHENTICATED saying so past it (the handshake is not repeated, so the call checks); a valid one goes on.
    Before, only RecommendStream checked, and an agent's kept channel was served past its certificate."""
    short = pki.client("dev-short")
    not_after = _not_after(short[0])
    with _channel(tls_service, pki, short) as channel, _channel(tls_service, pki, pki.client("dev-a")) as other:
        stub = pb_grpc.PathServiceStub(channel)
        assert stub.Recommend(_request("dev-short"), timeout=5.0).decision_id  # the connection is open
        clock.now = not_after  # the last second it is valid
        rec = stub.Recommend(_request("dev-short"), timeout=5.0)
        clock.now = not_after + 1.0
        with pytest.raises(grpc.RpcError) as refused:
            stub.Recommend(_request("dev-short"), timeout=5.0)
        with pytest.raises(grpc.RpcError) as refused_outcome:
            stub.ReportOutcome(
                pb.OutcomeRequest(device_id="dev-short", decision_id=rec.decision_id, throughput_bps=1e6), timeout=5.0
            )
        assert pb_grpc.PathServiceStub(other).Recommend(_request("dev-a"), timeout=5.0).decision_id
    for err in (refused.value, refused_outcome.value):
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "certificate expired" in (err.details() or "")


def test_certificate_not_after_reads_the_peers_pem(pki: Any) -> None:
    cert = pki.client("dev-short")[0]
    assert certificate_not_after({"x509_pem_cert": [cert.read_bytes()]}) == _not_after(cert)
    assert certificate_not_after({"x509_common_name": [b"dev-a"]}) is None  # no certificate: nothing to bound
    with pytest.raises(Unauthenticated, match="unreadable"):
        certificate_not_after({"x509_pem_cert": [b"-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----"]})


def test_client_certificates_alone_warn_that_rest_has_no_credential(pki: Any, tmp_path: Path) -> None:
    """Client certificates identify gRPC callers only: a service with no bearer method answers every REST call 401,
    and its start-up says so (None once a tokens file or a JWT key gives REST devices a credential)."""
    from edgepath.main import rest_without_credential
    from edgepath.settings import Settings

    tls = {"tls_cert_file": pki.server_cert, "tls_key_file": pki.server_key, "tls_client_ca_file": pki.ca_cert}
    note = rest_without_credential(Settings(**tls))
    assert note is not None and "401" in note and "EDGEPATH_AUTH_TOKENS_FILE" in note
    tokens = TokenFile(tmp_path / "tokens.json")
    tokens.add("dev-rest")
    assert rest_without_credential(Settings(**tls, auth_tokens_file=tokens.path)) is None
    assert rest_without_credential(Settings(**tls, auth_jwt_key="k" * 32)) is None
    assert rest_without_credential(Settings(tls_cert_file=pki.server_cert, tls_key_file=pki.server_key)) is None
