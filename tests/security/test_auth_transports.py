"""Authentication, authorisation and rate limits over BOTH transports, against real servers on loopback.

Each case runs over REST (httpx) and gRPC (generated stubs, ``authorization``
metadata) against one real service per module with a hashed-tokens file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from edge_security_helpers import context_body, running_service
from edgepath.security.auth import TokenFile, issue_jwt
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc

JWT_KEY = "test-jwt-key-0123456789abcdef0123456789abcdef"


class Caller:
    """One transport with a uniform result: (status, body) where status is an HTTP code or a gRPC code name."""

    def __init__(self, transport: str, http_port: int, grpc_port: int) -> None:
        self.transport = transport
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=5.0)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        self.stub = pb_grpc.PathServiceStub(self.channel)
        self.last_headers: dict[str, str] = {}

    def close(self) -> None:
        self.http.close()
        self.channel.close()

    def _grpc(self, method: Any, msg: Any, token: str | None) -> tuple[str, Any]:
        md = (("authorization", f"Bearer {token}"),) if token else ()
        try:
            reply, call = method.with_call(msg, metadata=md, timeout=5.0)
            self.last_headers = {m.key: m.value for m in call.trailing_metadata() or ()}
            return "OK", reply
        except grpc.RpcError as exc:
            self.last_headers = {m.key: m.value for m in exc.trailing_metadata() or ()}
            return exc.code().name, exc.details()

    def _rest(self, path: str, body: dict[str, Any], token: str | None) -> tuple[str, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        resp = self.http.post(path, json=body, headers=headers)
        self.last_headers = dict(resp.headers)
        return ("OK" if resp.status_code == 200 else str(resp.status_code)), resp.json()

    def recommend(self, device_id: str, token: str | None) -> tuple[str, Any]:
        body = context_body(device_id)
        if self.transport == "rest":
            return self._rest("/v1/recommendations", body, token)
        msg = pb.RecommendRequest(
            device_id=device_id,
            interfaces=[
                pb.InterfaceContext(
                    name="wlan0", access_type=pb.ACCESS_TYPE_WIFI, wifi_rssi_dbm=-60.0, link_speed_mbps=100.0
                ),
                pb.InterfaceContext(name="wwan0", access_type=pb.ACCESS_TYPE_LTE, rsrp_dbm=-95.0),
            ],
        )
        return self._grpc(self.stub.Recommend, msg, token)

    def decision_id(self, reply: Any) -> str:
        return str(reply["decision_id"] if isinstance(reply, dict) else reply.decision_id)

    def outcome(self, device_id: str, decision_id: str, token: str | None, throughput_bps: float = 30e6) -> Any:
        body = {"device_id": device_id, "decision_id": decision_id, "throughput_bps": throughput_bps}
        if self.transport == "rest":
            return self._rest("/v1/outcomes", body, token)
        return self._grpc(self.stub.ReportOutcome, pb.OutcomeRequest(**body), token)


# HTTP status ↔ gRPC code of each expected refusal.
UNAUTHENTICATED = {"rest": "401", "grpc": "UNAUTHENTICATED"}
FORBIDDEN = {"rest": "403", "grpc": "PERMISSION_DENIED"}
LIMITED = {"rest": "429", "grpc": "RESOURCE_EXHAUSTED"}


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("auth") / "tokens.json"
    f = TokenFile(path)
    return {
        "path": path,
        "dev-a": f.add("dev-a"),
        "dev-b": f.add("dev-b"),
        "admin": f.add("ops", admin=True),
        "limited-rest": f.add("dev-limited-rest"),
        "limited-grpc": f.add("dev-limited-grpc"),
    }


@pytest.fixture(scope="module")
def secured(tokens: dict[str, Any]) -> Iterator[Any]:
    # Burst 30 at 0.05 token/s: 'dev-limited-*' run dry within a test, the other devices never do.
    with running_service(
        auth_tokens_file=tokens["path"], auth_jwt_key=JWT_KEY, rate_limit_burst=30, rate_limit_per_s=0.05
    ) as svc:
        yield svc


@pytest.fixture(params=["rest", "grpc"])
def caller(request: pytest.FixtureRequest, secured: Any) -> Iterator[Caller]:
    c = Caller(request.param, secured.http_port, secured.grpc_port)
    yield c
    c.close()


def test_no_credentials_is_unauthenticated(caller: Caller) -> None:
    status, _ = caller.recommend("dev-a", None)
    assert status == UNAUTHENTICATED[caller.transport]
    if caller.transport == "rest":
        assert caller.last_headers.get("www-authenticate") == "Bearer"


def test_unknown_token_is_unauthenticated(caller: Caller, tokens: dict[str, Any]) -> None:
    forged = tokens["dev-a"][:-4] + "AAAA"
    assert caller.recommend("dev-a", forged)[0] == UNAUTHENTICATED[caller.transport]
    assert caller.recommend("dev-a", "not-a-token")[0] == UNAUTHENTICATED[caller.transport]


def test_own_device_is_served(caller: Caller, tokens: dict[str, Any]) -> None:
    status, reply = caller.recommend("dev-a", tokens["dev-a"])
    assert status == "OK", reply
    ack_status, ack = caller.outcome("dev-a", caller.decision_id(reply), tokens["dev-a"])
    assert ack_status == "OK", ack


def test_token_of_another_device_is_forbidden(caller: Caller, tokens: dict[str, Any]) -> None:
    status, detail = caller.recommend("dev-b", tokens["dev-a"])
    assert status == FORBIDDEN[caller.transport]
    assert "device_id" in str(detail)


def test_outcome_for_another_devices_decision_is_forbidden(caller: Caller, tokens: dict[str, Any]) -> None:
    status, reply = caller.recommend("dev-a", tokens["dev-a"])
    assert status == "OK"
    decision_id = caller.decision_id(reply)
    # dev-b quotes dev-a's decision under its own name, and under dev-a's name: both refused.
    assert caller.outcome("dev-b", decision_id, tokens["dev-b"])[0] == FORBIDDEN[caller.transport]
    assert caller.outcome("dev-a", decision_id, tokens["dev-b"])[0] == FORBIDDEN[caller.transport]
    # The decision is still open for its own device (nothing was recorded by the refused calls).
    status, ack = caller.outcome("dev-a", decision_id, tokens["dev-a"])
    assert status == "OK"
    accepted = ack["accepted"] if isinstance(ack, dict) else ack.accepted
    assert accepted is True


def test_jwt_signed_with_the_key_is_accepted_and_expired_refused(caller: Caller) -> None:
    assert caller.recommend("dev-jwt", issue_jwt(JWT_KEY, "dev-jwt"))[0] == "OK"
    expired = issue_jwt(JWT_KEY, "dev-jwt", ttl_s=-60)
    assert caller.recommend("dev-jwt", expired)[0] == UNAUTHENTICATED[caller.transport]
    wrong_key = issue_jwt("another-key-0123456789abcdef0123456789abcdef", "dev-jwt")
    assert caller.recommend("dev-jwt", wrong_key)[0] == UNAUTHENTICATED[caller.transport]


def test_rate_limit_answers_with_retry_information(caller: Caller, tokens: dict[str, Any]) -> None:
    device, token = f"dev-limited-{caller.transport}", tokens[f"limited-{caller.transport}"]
    statuses = [caller.recommend(device, token)[0] for _ in range(32)]
    assert statuses[:30] == ["OK"] * 30  # the burst
    assert statuses[30:] == [LIMITED[caller.transport]] * 2
    if caller.transport == "rest":
        retry_after = int(caller.last_headers["retry-after"])
        assert 1 <= retry_after <= 21  # one token at 0.05/s: at most 20 s (rounded up)
    else:
        retry_ms = int(caller.last_headers["retry-after-ms"])
        assert 1 <= retry_ms <= 20_001
    # Budgets are per device: another device is still served.
    assert caller.recommend("dev-b", tokens["dev-b"])[0] == "OK"


def test_admin_endpoints_need_an_admin(secured: Any, tokens: dict[str, Any]) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{secured.http_port}", timeout=5.0) as http:
        assert http.get("/v1/admin/quarantine").status_code == 401
        device = {"Authorization": f"Bearer {tokens['dev-a']}"}
        assert http.put("/v1/admin/quarantine/dev-b", headers=device).status_code == 403
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        resp = http.put("/v1/admin/quarantine/dev-b", headers=admin)
        assert resp.status_code == 200 and resp.json()["devices"] == ["dev-b"]
        try:
            # A quarantined device's outcome is acknowledged but not accepted for training.
            dev_b = {"Authorization": f"Bearer {tokens['dev-b']}"}
            decision = http.post("/v1/recommendations", json=context_body("dev-b"), headers=dev_b).json()
            ack = http.post(
                "/v1/outcomes",
                json={"device_id": "dev-b", "decision_id": decision["decision_id"], "throughput_bps": 1e6},
                headers=dev_b,
            ).json()
            assert ack["accepted"] is False and ack["duplicate"] is False
        finally:
            assert http.delete("/v1/admin/quarantine/dev-b", headers=admin).json()["devices"] == []


def test_tokens_file_stores_only_hashes(tokens: dict[str, Any]) -> None:
    text = Path(tokens["path"]).read_text()
    for name in ("dev-a", "dev-b", "admin"):
        assert tokens[name] not in text
    assert Path(tokens["path"]).stat().st_mode & 0o077 == 0


def test_malformed_tokens_file_keeps_the_last_good_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    f = TokenFile(path)
    token = f.add("dev-a")
    assert f.lookup(token) is not None
    path.write_text("{not json")
    assert f.lookup(token) is not None  # last good entries, no exception
    fresh = TokenFile(path)
    assert fresh.lookup(token) is None  # nothing good ever read: every token refused
    with pytest.raises(ValueError):
        fresh.check()
    path.write_text('{"tokens": {}}')
    assert TokenFile(path).check() == 0


def test_authentication_off_ignores_credentials_and_on_requires_them(tmp_path: Path) -> None:
    from edgepath.errors import Unauthenticated
    from edgepath.security.auth import Authenticator

    assert Authenticator().authenticate(authorization="Bearer whatever") is None  # dev: self-declared device
    on = Authenticator(tokens=TokenFile(tmp_path / "t.json"))
    token = on.tokens.add("dev-a", admin=True)  # type: ignore[union-attr]
    principal = on.authenticate(authorization=f"Bearer {token}")
    assert principal is not None and principal.device_id == "dev-a" and principal.is_admin
    for bad in (None, "Basic dXNlcjpwYXNz", "Bearer ", f"Bearer {token}x"):
        with pytest.raises(Unauthenticated):
            on.authenticate(authorization=bad)
    mtls = Authenticator(mtls=True, admin_ids=["ops"])
    assert mtls.authenticate(peer_identity="ops") == mtls.principal("ops", admin=True)
