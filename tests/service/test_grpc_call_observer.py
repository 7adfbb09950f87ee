"""The gRPC call observer's status of calls that end without an answer (Session 51).

grpc.aio cancels a handler's task when its client cancels the call or its deadline passes; the observer counted
both as ``UNKNOWN`` and logged them at WARNING as a server fault, and a stream whose requests just ended with its
deadline as ``OK``. Real servers on loopback: a method that waits until it is cancelled, and the service's stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc
import pytest
from edgepath.grpc.observe import CallObserver
from edgepath.grpc.server import create_server
from edgepath.main import Service
from edgepath.settings import Settings
from edgepath_agent.wire import edgepath_pb2 as pb
from edgepath_agent.wire import edgepath_pb2_grpc as pb_grpc

STREAM = "/edgepath.v1.PathService/RecommendStream"


def context() -> pb.RecommendRequest:
    return pb.RecommendRequest(
        device_id="phone-1",
        interfaces=[
            pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI, wifi_rssi_dbm=-61.0, rtt_ms=30.0),
            pb.InterfaceContext(name="wwan0", access_type=pb.ACCESS_TYPE_LTE, rsrp_dbm=-97.0, rsrq_db=-11.0, cqi=9),
        ],
    )


async def _stream_ended(timeout_s: float) -> tuple[str, float]:
    """Open a RecommendStream, have one context answered, then let its deadline (``timeout_s``) pass while the
    server waits for the next context; the observer's (code, seconds) of it."""
    service = Service.build(Settings())
    counted: asyncio.Future[tuple[str, float]] = asyncio.get_running_loop().create_future()
    count = service.plane.metrics.grpc_call

    def on_call(method: str, code: str, seconds: float) -> None:
        count(method, code, seconds)
        if method == STREAM and not counted.done():
            counted.set_result((code, seconds))

    service.plane.metrics.grpc_call = on_call  # type: ignore[method-assign]
    server, _, port = create_server(service.plane, "127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = pb_grpc.PathServiceStub(channel).RecommendStream(timeout=timeout_s)
            await call.write(context())
            assert (await call.read()).primary_path.interface in {"wlan0", "wwan0"}
            return await asyncio.wait_for(counted, 10.0)
    finally:
        await server.stop(None)


@contextlib.asynccontextmanager
async def observed_channel(
    observer: CallObserver, service: str, method: str, handler: grpc.RpcMethodHandler
) -> AsyncIterator[grpc.aio.Channel]:
    """A channel to a gRPC server on loopback serving ``service``'s one ``method`` with ``handler`` wrapped by
    ``observer``; the server stops at once after it."""
    wrapped = observer.wrap(f"/{service}/{method}", handler)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {method: wrapped}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await server.stop(None)


async def _cancelled_while_waiting(timeout_s: float | None) -> tuple[str, float]:
    """A unary method wrapped by the observer whose handler waits until grpc.aio cancels it: the client cancels the
    call once the handler runs (``timeout_s`` None), or its deadline passes; the observer's (code, seconds)."""
    running, counted = asyncio.Event(), asyncio.get_running_loop().create_future()

    async def wait_forever(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        running.set()
        await asyncio.Event().wait()  # only a cancellation ends this
        raise AssertionError("not cancelled")

    observer = CallObserver(lambda method, code, seconds: counted.set_result((code, seconds)))
    async with observed_channel(
        observer, "test.Blocking", "Wait", grpc.unary_unary_rpc_method_handler(wait_forever)
    ) as channel:
        call = channel.unary_unary("/test.Blocking/Wait")(b"", timeout=timeout_s)
        if timeout_s is None:
            await running.wait()
            call.cancel()
        with pytest.raises((asyncio.CancelledError, grpc.aio.AioRpcError)):
            await call
        return await asyncio.wait_for(counted, 10.0)


def test_a_call_the_client_cancels_counts_as_cancelled_not_as_a_server_fault(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="edgepath.grpc"):
        code, _ = asyncio.run(_cancelled_while_waiting(None))
    assert code == "CANCELLED"
    assert not [r for r in caplog.records if r.name == "edgepath.grpc" and r.levelno >= logging.WARNING]
    assert [r for r in caplog.records if r.name == "edgepath.grpc" and "CANCELLED" in r.getMessage()]


def test_a_call_whose_deadline_passes_counts_as_deadline_exceeded(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="edgepath.grpc"):
        code, seconds = asyncio.run(_cancelled_while_waiting(0.3))
    assert code == "DEADLINE_EXCEEDED" and seconds >= 0.25
    assert [r for r in caplog.records if r.name == "edgepath.grpc" and r.levelno == logging.WARNING]


def test_a_stream_whose_deadline_passes_counts_as_deadline_exceeded(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="edgepath.grpc"):
        code, seconds = asyncio.run(_stream_ended(0.5))
    assert code == "DEADLINE_EXCEEDED"
    assert seconds >= 0.4  # counted when the deadline ended it, not before
    assert [r for r in caplog.records if r.name == "edgepath.grpc" and r.levelno == logging.WARNING]


async def _stream_dropped_while_replying() -> tuple[str, int]:
    """A bidirectional stream wrapped by the observer whose handler (an async generator, as RecommendStream's)
    replies without end; the client reads one reply and cancels the call. grpc.aio's task is then mostly inside
    its send, not in the generator: it leaves the generator suspended at its ``yield``, and the event loop closes
    it later (``GeneratorExit``), the call perhaps gone. The observer's code, and how often the handler's
    generator ran its ``finally``."""
    counted = asyncio.get_running_loop().create_future()
    closed = 0

    async def replies(requests: object, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        nonlocal closed
        try:
            while True:
                yield b"reply"
        finally:
            closed += 1

    observer = CallObserver(lambda method, code, seconds: counted.set_result(code))
    async with observed_channel(
        observer, "test.Flood", "Replies", grpc.stream_stream_rpc_method_handler(replies)
    ) as channel:
        call = channel.stream_stream("/test.Flood/Replies")()
        assert await call.read() == b"reply"
        call.cancel()
        code = await asyncio.wait_for(counted, 10.0)
    return code, closed


def test_a_stream_dropped_while_replying_counts_as_cancelled_and_reads_nothing_of_the_call_gone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It counted ``UNKNOWN`` (a server fault) and its WARNING line read the caller from the call grpc.aio had
    freed: the test process died of a segmentation fault about one run in four (a reflection client)."""
    for _ in range(5):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="edgepath.grpc"):
            code, closed = asyncio.run(_stream_dropped_while_replying())
        assert (code, closed) == ("CANCELLED", 1)
        assert not [r for r in caplog.records if r.name == "edgepath.grpc" and r.levelno >= logging.WARNING]
