"""A handler whose compiled engine panicked is answered as any other fault: 500 or ``UNKNOWN`` with the request id.

A Rust panic of ``edgepath_native`` surfaces in Python as pyo3's ``PanicException``, a ``BaseException`` that is no
``Exception``, and every handler of unexpected errors took ``Exception`` s: over gRPC the observer let it pass and
grpc.aio sent no status at all (the call hung until its deadline, forever without one; the client saw
``DEADLINE_EXCEEDED``), the traceback written by grpc.aio, unbounded; over REST Starlette's error middleware let it
pass to uvicorn, which answered ``text/plain`` "Internal Server Error" without the request id and logged one
traceback per request. A stand-in of the same shape raises it here (no request is known to make the engines panic).
The REST app through httpx's ASGI transport (which raises what leaves the app), the gRPC server on loopback.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from edgepath.grpc.server import create_server
from edgepath.logs import handler_fault
from edgepath.main import Service
from edgepath.rest.app import create_app
from edgepath.settings import Settings
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from service_harness import captured_json_log

#: pyo3's exception of a Rust panic, as Python sees it: a BaseException of module ``pyo3_runtime``.
PanicException = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})
CONTEXT = {"device_id": "dev-p", "interfaces": [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0}]}


@pytest.fixture
def error_log() -> Iterator[io.StringIO]:
    with captured_json_log("ERROR") as stream:
        yield stream


def errors(stream: io.StringIO, logger: str) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    return [r for r in records if r["logger"] == logger and r["level"] == "ERROR"]


async def panics(*args: Any) -> Any:
    raise PanicException("called `Option::unwrap()` on a `None` value")


def test_a_rest_handler_that_panicked_is_answered_the_500_problem_and_logged(error_log: io.StringIO) -> None:
    """Two requests whose decision panicked: each the 500 problem with its request id and nothing of the panic, its
    traceback at ERROR naming the panic (through the crashes' bound); nothing leaves the app for the server."""
    service = Service.build(Settings())
    service.plane.recommend = panics  # type: ignore[method-assign]
    app = create_app(service.plane)

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            for i in range(2):
                resp = await http.post("/v1/recommendations", json=CONTEXT, headers={"x-request-id": f"p{i}"})
                assert resp.status_code == 500 and resp.headers["content-type"] == "application/problem+json"
                assert resp.json()["request_id"] == f"p{i}" and resp.json()["error"] == "internal"
                assert "unwrap" not in resp.text and "Panic" not in resp.text
            assert (await http.get("/healthz")).status_code == 200

    asyncio.run(run())
    logged = errors(error_log, "edgepath.rest")
    assert [(e["request_id"], e["exception"]) for e in logged] == [
        ("p0", "pyo3_runtime.PanicException"),
        ("p1", "pyo3_runtime.PanicException"),
    ]
    assert logged[0]["route"] == "/v1/recommendations" and "Option::unwrap()" in logged[0]["exc_info"]


def test_a_grpc_call_that_panicked_ends_unknown_at_once_unary_and_stream(error_log: io.StringIO) -> None:
    """A Recommend and a RecommendStream whose decision panicked: each ends ``UNKNOWN`` with its request id well
    before its deadline (it hung until then), the panic's traceback at ERROR under its request id."""
    service = Service.build(Settings())
    service.plane.recommend = panics  # type: ignore[method-assign]
    request = pb.RecommendRequest(
        device_id="dev-p", interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)]
    )

    async def run() -> None:
        server, _, port = create_server(service.plane, "127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.PathServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Recommend(request, timeout=20, metadata=(("x-request-id", "u1"),))
                assert err.value.code() == grpc.StatusCode.UNKNOWN and (err.value.details() or "").endswith("u1")
                call = stub.RecommendStream(timeout=20, metadata=(("x-request-id", "s1"),))
                await call.write(request)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await call.read()
                assert err.value.code() == grpc.StatusCode.UNKNOWN and (err.value.details() or "").endswith("s1")
        finally:
            await server.stop(5.0)

    asyncio.run(asyncio.wait_for(run(), 10.0))  # before: each call waited out its 20 s deadline
    logged = errors(error_log, "edgepath.grpc")
    assert [(e["request_id"], e["exception"]) for e in logged] == [
        ("u1", "pyo3_runtime.PanicException"),
        ("s1", "pyo3_runtime.PanicException"),
    ]
    assert all("Option::unwrap()" in e["exc_info"] for e in logged)


def test_a_fault_is_any_exception_but_cancellation_and_exit() -> None:
    """:func:`~edgepath.logs.handler_fault`: a panic is a fault, a cancel or a generator closed is not, and a group
    (a task group's) is one when one of its exceptions is."""
    assert handler_fault(ValueError()) and handler_fault(PanicException())
    assert not any(handler_fault(e) for e in (asyncio.CancelledError(), GeneratorExit(), SystemExit(0)))
    assert not handler_fault(BaseExceptionGroup("cancelled", [asyncio.CancelledError()]))
    assert handler_fault(BaseExceptionGroup("one panicked", [asyncio.CancelledError(), PanicException()]))
