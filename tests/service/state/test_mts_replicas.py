"""The MEC 015 API's per-device bounds hold for replicas sharing one Redis (a real ``redis-server``).

Two replicas, each its own :class:`~edgepath.state.redis.RedisStore` and ``/mts/v1`` routes, are asked at once for
the session that takes a device to its bound (:data:`~edgepath.rest.mts.MAX_DEVICE_SESSIONS` sessions,
:data:`~edgepath.rest.mts.MAX_DEVICE_FLOW_FILTERS` flow filters). The interleaving that broke the bound is forced,
not hoped for: each replica's first write waits until both requests have read and validated the device (an
``asyncio.Barrier`` in front of the store's write). When the check was one command and the write another, both
wrote (65 sessions, 246 filters); one request must be created and the other refused as a request that comes alone
after it is refused (400 naming the field). A request whose device another replica changes before each of its
writes gives up after ``WRITE_ATTEMPTS`` (503, retryable).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import httpx
import pytest
from edgepath.rest.mts import MAX_DEVICE_FLOW_FILTERS, MAX_DEVICE_SESSIONS, MAX_FILTERS, WRITE_ATTEMPTS, mts_router
from edgepath.state.base import MtsSession
from edgepath.state.redis import RedisStore
from fastapi import FastAPI

from state.redis_helpers import RedisServer

pytestmark = pytest.mark.redis

DEVICE = "phone-race"


def session(request_type: int = 0, ports: range = range(443, 444)) -> dict[str, Any]:
    """An ``MtsSessionInfo`` of ``DEVICE``: one flow filter per port of ``ports``."""
    return {
        "appInsId": "mec-app-1",
        "requestType": request_type,
        "flowFilter": [{"dstIp": "198.51.100.7", "dstPort": [port], "protocol": 6} for port in ports],
        "qosD": {},
        "mtsMode": 1,
        "trafficDirection": "00",
        "deviceId": DEVICE,
    }


def flow_sessions(filters: int) -> list[dict[str, Any]]:
    """Flow sessions of ``filters`` distinct filters in all (at most ``MAX_FILTERS`` each)."""
    starts = range(1, filters + 1, MAX_FILTERS)
    return [session(1, range(start, min(start + MAX_FILTERS, filters + 1))) for start in starts]


#: bound → (the sessions that take the device to one below it, the racing session of each replica, its field, its
#: count in the refusal's message).
CASES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]], str, str]] = {
    "sessions": (
        [session() for _ in range(MAX_DEVICE_SESSIONS - 1)],
        [session(), session()],
        "deviceId",
        f"{MAX_DEVICE_SESSIONS} at most per device",
    ),
    "flow filters": (
        flow_sessions(MAX_DEVICE_FLOW_FILTERS - 1),
        [session(1, range(1000, 1001)), session(1, range(1001, 1002))],
        "flowFilter",
        f"{MAX_DEVICE_FLOW_FILTERS + 1} filters in all",
    ),
}


class _Plane:
    """What ``mts_router`` reads of a decision plane: its store."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store


class Replica:
    """One replica: its own store and ``/mts/v1`` routes."""

    def __init__(self, url: str, namespace: str) -> None:
        self.store = RedisStore(url, namespace=namespace)
        app = FastAPI()
        app.include_router(mts_router(_Plane(self.store)), prefix="/mts/v1")  # type: ignore[arg-type]
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge/mts/v1")

    def hold_first_write(self, barrier: asyncio.Barrier) -> None:
        """Make the store's next session write wait at ``barrier`` (the other replica's, too) before it runs."""
        write = self.store.put_mts_session

        async def write_when_both_validated(*args: Any, **kwargs: Any) -> Any:
            self.store.put_mts_session = write  # type: ignore[method-assign]  # held once: a retry goes straight on
            await barrier.wait()  # the other request has read and validated the device too
            return await write(*args, **kwargs)

        self.store.put_mts_session = write_when_both_validated  # type: ignore[method-assign]

    async def close(self) -> None:
        await self.http.aclose()
        await self.store.close()


@pytest.fixture
async def replicas(redis_server: RedisServer, namespace: str) -> AsyncIterator[tuple[Replica, Replica]]:
    pair = Replica(redis_server.url, namespace), Replica(redis_server.url, namespace)
    yield pair
    for replica in pair:
        await replica.close()


def refusal(resp: httpx.Response) -> dict[str, Any]:
    """The problem of a refused request, without what differs from one request to the next."""
    assert resp.status_code == 400, resp.text
    body = dict(resp.json())
    for varying in ("instance", "request_id"):
        body.pop(varying, None)
    return body


@pytest.mark.parametrize("bound", list(CASES))
async def test_replicas_creating_the_session_past_a_device_bound_at_once_create_one(
    replicas: tuple[Replica, Replica], bound: str
) -> None:
    before, racing, field, count = CASES[bound]
    a, b = replicas
    await a.store.record_device_accesses(DEVICE, ("WIFI", "LTE"))
    for body in before:
        assert (await a.http.post("/mts_sessions", json=body)).status_code == 201
    barrier = asyncio.Barrier(2)
    a.hold_first_write(barrier)
    b.hold_first_write(barrier)
    async with asyncio.timeout(30):  # a bound on a request that never reaches its write, not a wait for timing
        answers = await asyncio.gather(
            a.http.post("/mts_sessions", json=racing[0]), b.http.post("/mts_sessions", json=racing[1])
        )
    stored = [json.loads(s.info) for s in await b.store.device_mts_sessions(DEVICE)]
    assert len(stored) == len(before) + 1  # 65 sessions (or 18 flow sessions of 246 filters) when both wrote
    assert sum(len(s["flowFilter"]) for s in stored if s["requestType"] == 1) <= MAX_DEVICE_FLOW_FILTERS
    assert sorted(r.status_code for r in answers) == [201, 400], [r.text for r in answers]
    refused = next(r for r in answers if r.status_code == 400)
    assert refused.json()["field"] == field and count in refused.json()["message"]
    alone = await b.http.post("/mts_sessions", json=racing[0] if refused is answers[0] else racing[1])
    assert refusal(refused) == refusal(alone)  # the error a request meeting the bound alone gets, word for word


async def test_a_session_whose_device_changes_before_each_write_is_503_after_the_attempts(
    replicas: tuple[Replica, Replica],
) -> None:
    """Another replica creates a session of the device between each of this request's validations and its write:
    every write is refused, and after :data:`~edgepath.rest.mts.WRITE_ATTEMPTS` the request is 503 with
    ``Retry-After`` (retryable), its session not stored."""
    a, b = replicas
    await a.store.record_device_accesses(DEVICE, ("WIFI", "LTE"))
    write = a.store.put_mts_session
    attempts = []

    async def write_after_another_replica_did(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args[0].session_id)
        assert (await b.http.post("/mts_sessions", json=session())).status_code == 201
        return await write(*args, **kwargs)

    a.store.put_mts_session = write_after_another_replica_did  # type: ignore[method-assign]
    resp = await a.http.post("/mts_sessions", json=session())
    assert resp.status_code == 503 and resp.headers["retry-after"] == "1", resp.text
    assert resp.json()["error"] == "unavailable"
    assert len(attempts) == WRITE_ATTEMPTS and len(set(attempts)) == 1
    assert attempts[0] not in {s.session_id for s in await a.store.list_mts_sessions()}
    assert len(await a.store.device_mts_sessions(DEVICE)) == WRITE_ATTEMPTS  # the other replica's


def session_under(session_id: str, device: str) -> MtsSession:
    """A stored session ``session_id`` of ``device`` (what the store keeps; its ``info`` is opaque to it)."""
    return MtsSession(session_id=session_id, device_id=device, info=json.dumps({"deviceId": device}), created_at=1.0)


async def test_a_session_moved_by_another_replica_meanwhile_is_not_left_under_two_devices(
    redis_server: RedisServer, namespace: str
) -> None:
    """Replica 1 reads session S under device A, then replica 2 moves S to device C, then replica 1 writes S under
    device B: its write named A's hash to remove S from, so C's hash kept S (two devices steered by one session)
    until the script also checked that S is still where the writer read it. Forced by running replica 2's move
    inside replica 1's read of the session (no sleep)."""
    under = partial(session_under, "s-1")
    one, two = RedisStore(redis_server.url, namespace=namespace), RedisStore(redis_server.url, namespace=namespace)
    try:
        assert await one.put_mts_session(under("dev-a"))
        read = one.redis.hget

        async def read_then_moved(*args: Any) -> Any:
            value = await read(*args)
            assert await two.put_mts_session(under("dev-c"))  # the other replica, between the read and the write
            return value

        one.redis.hget = read_then_moved  # type: ignore[method-assign]
        assert not await one.put_mts_session(under("dev-b")), "written as if S were still under dev-a"
        one.redis.hget = read  # type: ignore[method-assign]
        assert await one.put_mts_session(under("dev-b"))  # the API's next attempt, which reads S under dev-c
        assert [s.session_id for s in await one.device_mts_sessions("dev-c")] == []
        assert [s.session_id for s in await one.device_mts_sessions("dev-b")] == ["s-1"]
    finally:
        await one.close()
        await two.close()


async def test_a_session_moved_by_another_replica_meanwhile_is_deleted_from_where_it_is(
    redis_server: RedisServer, namespace: str
) -> None:
    """The same interleaving for a delete: replica 1 reads S under A, replica 2 moves S to C, replica 1 deletes S.
    The delete removed S from A's hash only, so C went on being steered by a deleted session."""
    under = partial(session_under, "s-2")
    one, two = RedisStore(redis_server.url, namespace=namespace), RedisStore(redis_server.url, namespace=namespace)
    try:
        assert await one.put_mts_session(under("dev-a"))
        read = one.redis.hget
        moved = False

        async def read_then_moved(*args: Any) -> Any:
            nonlocal moved
            value = await read(*args)
            if not moved:  # once: the delete's next read sees where S is now
                moved = True
                assert await two.put_mts_session(under("dev-c"))
            return value

        one.redis.hget = read_then_moved  # type: ignore[method-assign]
        assert await one.delete_mts_session("s-2")
        assert moved and await two.get_mts_session("s-2") is None
        assert await one.device_mts_sessions("dev-c") == [] and await one.device_mts_sessions("dev-a") == []
    finally:
        await one.close()
        await two.close()
