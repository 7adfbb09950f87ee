"""An open RecommendStream holds its credential to the rules of every call: revoked or expired, the next message is
refused (UNAUTHENTICATED, trailing ``message-index``), the replies already sent stand. A real gRPC server on
loopback with a hashed-tokens file and a JWT key; the token is revoked the way an operator does it
(``edgepath tokens revoke`` writes the file through :class:`TokenFile`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest
from edge_security_helpers import issue_tokens, secured_service
from edgepath.security.auth import TokenFile, issue_jwt
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from service_harness import RunningService

JWT_KEY = "test-jwt-key-0123456789abcdef0123456789abcdef"


def message(device_id: str) -> pb.RecommendRequest:
    return pb.RecommendRequest(
        device_id=device_id,
        interfaces=[
            pb.InterfaceContext(
                name="wlan0", access_type=pb.ACCESS_TYPE_WIFI, wifi_rssi_dbm=-60.0, link_speed_mbps=100
            ),
            pb.InterfaceContext(name="wwan0", access_type=pb.ACCESS_TYPE_LTE, rsrp_dbm=-95.0),
        ],
    )


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return issue_tokens(tmp_path_factory.mktemp("stream-auth"), ["streamer-revoked", "streamer-kept"])


@pytest.fixture(scope="module")
def secured(tokens: dict[str, Any]) -> Iterator[RunningService]:
    with secured_service(tokens, auth_jwt_key=JWT_KEY) as svc:
        yield svc


class Stream:
    """One open RecommendStream (grpc.aio): send a message and read its reply, or the error that ended the call."""

    def __init__(self, channel: grpc.aio.Channel, token: str) -> None:
        stub = pb_grpc.PathServiceStub(channel)
        self.call = stub.RecommendStream(metadata=(("authorization", f"Bearer {token}"),), timeout=30.0)

    async def ask(self, device_id: str) -> pb.Recommendation | grpc.aio.AioRpcError:
        try:
            await self.call.write(message(device_id))
            return await self.call.read()
        except grpc.aio.AioRpcError as exc:
            return exc


def refused(answer: Any, index: str) -> bool:
    if not isinstance(answer, grpc.aio.AioRpcError):
        return False
    trailers = {str(k): str(v) for k, v in answer.trailing_metadata() or ()}
    return answer.code() is grpc.StatusCode.UNAUTHENTICATED and trailers.get("message-index") == index


def test_a_token_revoked_mid_stream_refuses_the_next_message(secured: RunningService, tokens: dict[str, Any]) -> None:
    async def run() -> tuple[list[Any], list[Any]]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{secured.grpc_port}") as channel:
            revoked, kept = Stream(channel, tokens["streamer-revoked"]), Stream(channel, tokens["streamer-kept"])
            first = [await revoked.ask("streamer-revoked"), await kept.ask("streamer-kept")]
            assert TokenFile(Path(tokens["path"])).revoke("streamer-revoked") == 1
            await asyncio.sleep(1.3)  # the service looks at the tokens file at most once a second
            then = [await revoked.ask("streamer-revoked"), await kept.ask("streamer-kept")]
            kept.call.cancel()
            return first, then

    first, then = asyncio.run(run())
    assert all(isinstance(r, pb.Recommendation) and r.decision_id for r in first)
    assert refused(then[0], "1"), then[0]
    assert "revoked" in (then[0].details() or "")
    assert isinstance(then[1], pb.Recommendation), then[1]  # the other device's stream goes on


def test_a_jwt_that_expires_mid_stream_refuses_the_next_message(secured: RunningService) -> None:
    """The stream re-checks ``exp`` on the authenticator's clock (scripted here: no waiting for a real expiry)."""
    token = issue_jwt(JWT_KEY, "streamer-jwt", ttl_s=600)
    expires = float(jwt.decode(token, options={"verify_signature": False})["exp"])
    auth = secured.service.security.auth  # type: ignore[union-attr]
    now = [time.time()]
    auth.clock = lambda: now[0]

    async def run() -> list[Any]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{secured.grpc_port}") as channel:
            stream = Stream(channel, token)
            answers = [await stream.ask("streamer-jwt")]
            now[0] = expires  # exp is the first second it no longer holds (RFC 7519 §4.1.4)
            answers.append(await stream.ask("streamer-jwt"))
            return answers

    try:
        answers = asyncio.run(run())
    finally:
        auth.clock = time.time
    assert isinstance(answers[0], pb.Recommendation), answers[0]
    assert refused(answers[1], "1"), answers[1]
    assert "expired" in (answers[1].details() or "")


def test_a_jwt_whose_exp_is_past_the_floats_opens_a_stream(secured: RunningService) -> None:
    """A JWT PyJWT accepts whose ``exp`` is an integer past float's range (``10**400``, from an issuer's bug): the
    stream opens and is answered, ``exp`` holding for the call. The stream's credential read it as a float and the
    OverflowError ended the call ``UNKNOWN``, a server fault with a traceback."""
    token = jwt.encode({"sub": "streamer-far", "exp": 10**400}, JWT_KEY, algorithm="HS256")

    async def run() -> list[Any]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{secured.grpc_port}") as channel:
            stream = Stream(channel, token)
            answers = [await stream.ask("streamer-far"), await stream.ask("streamer-far")]
            stream.call.cancel()
            return answers

    answers = asyncio.run(run())
    assert all(isinstance(a, pb.Recommendation) for a in answers), answers
