"""REST clients that send a request's headers and then too little of its body, or go away before the rest.

1. The in-flight bound (:class:`edgepath.rest.app.ShedPastCapacity`) counted a request from its start until its
   answer, the wait for its body included, and uvicorn bounds no body's time: as many connections as there are
   slots, each with the headers of a ``POST /v1/recommendations`` and part of its body, held every slot for as long
   as they stayed open, and every other ``/v1`` request was answered 503 "overloaded".
2. A client that went away before its body was read made starlette raise ``ClientDisconnect`` out of the handler:
   counted 500, a traceback at ERROR and a WARNING line, as a bug of the service's would be.

The in-flight bound over ASGI (what is waiting when is the test's to say); the disconnects on a real service on
loopback, the clients raw sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
from edgepath.admission import Admission
from edgepath.rest.app import ShedPastCapacity
from service_harness import captured_json_log, running_service

CONTEXT = {"device_id": "dev-s", "interfaces": [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0}]}
#: A ``POST /v1/recommendations`` whose headers promise 100 body bytes, and the first of them.
PARTIAL = (
    b"POST /v1/recommendations HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
)


@contextlib.contextmanager
def partial_requests(port: int, n: int) -> Iterator[list[socket.socket]]:
    """``n`` connections each with :data:`PARTIAL` sent, closed on exit."""
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    try:
        for s in sockets:
            s.sendall(PARTIAL)
        yield sockets
    finally:
        for s in sockets:
            s.close()


def test_requests_waiting_for_their_body_hold_no_slot_of_the_in_flight_bound() -> None:
    """Four requests waiting for their bodies, two slots: a complete request is still let through (it was
    answered 503 while the four waited). The middleware itself, driven over ASGI: the wait for a body is a
    ``receive`` that returns when the test says, so no timing decides what is in flight when."""

    async def run() -> list[int]:
        body_read = asyncio.Event()  # the four clients never send the rest of their bodies

        async def reads_its_body(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await receive()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})

        shed = ShedPastCapacity(reads_its_body, Admission(max_inflight=2), on_shed=lambda: None)
        scope = {"type": "http", "path": "/v1/recommendations", "method": "POST"}
        statuses: list[int] = []
        waiting = asyncio.Semaphore(0)

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])
                waiting.release()  # answered (shed) at once: not waiting either

        async def slow_body() -> dict[str, Any]:
            waiting.release()
            await body_read.wait()
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def whole_body() -> dict[str, Any]:
            return {"type": "http.request", "body": b"{}", "more_body": False}

        slow = [asyncio.create_task(shed(dict(scope), slow_body, send)) for _ in range(4)]
        for _ in slow:  # each of the four waits for its body, or was answered at once
            await asyncio.wait_for(waiting.acquire(), 5.0)
        complete = list(statuses)
        await shed(dict(scope), whole_body, send)
        body_read.set()
        await asyncio.gather(*slow)
        return [*complete, statuses[len(complete)]]

    assert asyncio.run(run()) == [200]  # none of the four shed, the fifth request answered


def test_a_client_gone_before_its_body_counts_499_and_logs_no_crash() -> None:
    """A client that closes its connection mid-body: counted ``499`` (client closed request) on its route, never
    ``500``; no ERROR or WARNING line."""
    stream: io.StringIO
    with captured_json_log("INFO") as stream, running_service() as svc:
        with partial_requests(svc.http_port, 3):
            pass  # headers and a byte of each body, then the connections close: the server reads both, in order
        with httpx.Client(base_url=svc.http_url, timeout=10) as http:
            deadline = time.monotonic() + 10.0
            while True:  # the handlers see the disconnects once the sockets are closed
                scraped = http.get("/metrics").text
                if 'handler="/v1/recommendations",method="POST",status="499"} 3.0' in scraped:
                    break
                assert time.monotonic() < deadline, scraped
                time.sleep(0.05)
    assert 'handler="/v1/recommendations",method="POST",status="500"} 0.0' in scraped
    records = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip().startswith("{")]
    assert [r["message"] for r in records if r["level"] in ("ERROR", "WARNING")] == []
