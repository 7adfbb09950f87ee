"""mTLS on gRPC (client certificate = device identity) and HTTPS on REST, with certificates made in the test."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from edge_security_helpers import context_body, make_pki, running_service
from edgepath.security.auth import TokenFile
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_pki(tmp_path_factory.mktemp("pki"), clients=["dev-a"], rogue_clients=["dev-a"])


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
