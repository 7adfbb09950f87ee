"""The real service on a Redis store reports the degraded state and keeps deciding while Redis is down.

REST ``/readyz`` → 503 ``{"degraded": true}``; gRPC health ``edgepath.v1.PathService`` → NOT_SERVING
while ``""`` stays SERVING; recommendations (gRPC and REST) keep coming with the last model; an outcome
reported meanwhile is buffered and reaches the outcome stream once Redis is back.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from edgepath.main import Service
from edgepath.settings import Settings
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from redis import Redis
from service_harness import is_degraded, is_ready, service_in_this_loop

from state.redis_helpers import RedisServer, wait_for

pytestmark = pytest.mark.redis

CONTEXT: dict[str, Any] = {
    "device_id": "phone-1",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "sinr_db": 8.0, "cqi": 9},
    ],
}


def service_settings(degrading_settings: dict[str, Any], tmp_path: Path) -> Settings:
    """A service that reports degraded after 0.5 s without an answer from its Redis, with a durable outbox."""
    return Settings(**degrading_settings, outbox_dir=str(tmp_path / "outbox"))


@pytest.fixture
async def service(
    appendonly_redis: RedisServer, degrading_settings: dict[str, Any], tmp_path: Path
) -> AsyncIterator[tuple[Service, RedisServer]]:
    async with service_in_this_loop(service_settings(degrading_settings, tmp_path)) as svc:
        yield svc, appendonly_redis


@pytest.mark.parametrize("outage", ["stopped", "hung"])
async def test_degraded_state_is_reported_and_decisions_go_on(
    service: tuple[Service, RedisServer], outage: str
) -> None:
    """``stopped``: connections refused; ``hung`` (SIGSTOP): every command would wait for the timeout."""
    svc, server = service
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{svc.grpc_port}")
    health = health_pb2_grpc.HealthStub(channel)
    paths = pb_grpc.PathServiceStub(channel)
    http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{svc.http_port}", timeout=5.0)

    async def status(name: str) -> int:
        return (await health.Check(health_pb2.HealthCheckRequest(service=name))).status

    try:
        # The service may start degraded if its first Redis connect misses the 0.5 s timeout on a busy
        # machine (seen once in a fresh clone's full run); the outage below is what this test is about.
        await wait_for(lambda: is_ready(http))
        assert (await http.get("/readyz")).json() == {"ready": True, "degraded": False, "model_version": 1}
        assert await status("edgepath.v1.PathService") == health_pb2.HealthCheckResponse.SERVING
        before = (await http.post("/v1/recommendations", json=CONTEXT)).json()

        server.stop() if outage == "stopped" else server.pause()
        await wait_for(lambda: is_degraded(http))
        problem = await http.get("/readyz", headers={"x-request-id": "probe-1"})
        assert problem.headers["content-type"] == "application/problem+json"
        assert problem.json()["request_id"] == "probe-1"  # as in every other problem body

        async def not_serving() -> bool:
            return await status("edgepath.v1.PathService") == health_pb2.HealthCheckResponse.NOT_SERVING

        await wait_for(not_serving)
        assert await status("") == health_pb2.HealthCheckResponse.SERVING  # alive: do not restart it
        assert svc.metrics.store_degraded._value.get() == 1

        rec = await paths.Recommend(
            pb.RecommendRequest(
                device_id="phone-1",
                interfaces=[
                    pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI, wifi_rssi_dbm=-61.0),
                    pb.InterfaceContext(name="wwan0", access_type=pb.ACCESS_TYPE_LTE, rsrp_dbm=-97.0),
                ],
            ),
            timeout=5,
        )
        assert rec.decision_id and rec.model_version == 1
        during = (await http.post("/v1/recommendations", json=CONTEXT)).json()
        for d in (before, during):  # one decided before the outage (cached here), one during it
            ack = await http.post(
                "/v1/outcomes",
                json={"device_id": "phone-1", "decision_id": d["decision_id"], "throughput_bps": 4e7},
            )
            assert ack.status_code == 200 and ack.json()["accepted"], ack.text

        server.start() if outage == "stopped" else server.resume()
        await wait_for(lambda: is_ready(http))
        await wait_for(lambda: _serving(health))
        got = await svc.store.read_outcomes("test", 10, 0)  # type: ignore[attr-defined]
        assert sorted(o.decision_id for _, o in got) == sorted([before["decision_id"], during["decision_id"]])
    finally:
        await http.aclose()
        await channel.close()


async def _serving(health: Any) -> bool:
    resp = await health.Check(health_pb2.HealthCheckRequest(service="edgepath.v1.PathService"))
    return resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_service_started_while_redis_hangs_comes_up_degraded_and_recovers(
    appendonly_redis: RedisServer, degrading_settings: dict[str, Any], tmp_path: Path
) -> None:
    """The path the fixture above relies on: a first connect that times out leaves the service serving,
    reported degraded, and it turns ready on its own once Redis answers (no request needed)."""
    appendonly_redis.pause()
    async with (
        service_in_this_loop(service_settings(degrading_settings, tmp_path)) as svc,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{svc.http_port}", timeout=5.0) as http,
    ):
        resp = await http.get("/readyz")
        assert resp.status_code == 503 and resp.json()["degraded"] is True
        rec = await http.post("/v1/recommendations", json=CONTEXT)
        assert rec.status_code == 200 and rec.json()["decision_id"]
        appendonly_redis.resume()
        await wait_for(lambda: is_ready(http))
        assert (await http.get("/readyz")).json()["degraded"] is False


async def test_a_store_check_that_raises_reads_as_not_ready_not_as_a_server_error(
    appendonly_redis: RedisServer, degrading_settings: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis ACL user without ``PING`` (``NOPERM``: Redis answers, but the readiness check is refused): ``/readyz``
    is a 503 problem and gRPC health NOT_SERVING, the cause logged once with its traceback. Before, ``/readyz``
    answered 500 and the gRPC health watcher's task died, its status stuck at what it was."""
    admin = Redis.from_url(appendonly_redis.url)
    admin.execute_command("ACL", "SETUSER", "noping", "on", ">pw", "~*", "&*", "+@all", "-ping")
    admin.close()
    settings = dict(degrading_settings, store_url=f"redis://noping:pw@127.0.0.1:{appendonly_redis.port}/0")
    async with service_in_this_loop(service_settings(settings, tmp_path)) as svc:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{svc.grpc_port}")
        health = health_pb2_grpc.HealthStub(channel)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{svc.http_port}", timeout=5.0) as http:
            try:
                with caplog.at_level(logging.ERROR, logger="edgepath.plane"):
                    for _ in range(3):
                        ready = await http.get("/readyz")
                        assert ready.status_code == 503, ready.text
                        assert ready.headers["content-type"] == "application/problem+json"

                    async def not_serving() -> bool:
                        resp = await health.Check(health_pb2.HealthCheckRequest(service="edgepath.v1.PathService"))
                        return resp.status == health_pb2.HealthCheckResponse.NOT_SERVING

                    await wait_for(not_serving)
                failures = [r for r in caplog.records if "readiness" in r.getMessage()]
                assert len(failures) == 1 and failures[0].exc_info is not None  # once per run of failures
                assert "NoPermissionError" in repr(failures[0].exc_info[1].__class__)
                rec = await http.post("/v1/recommendations", json=CONTEXT)
                assert rec.status_code == 200  # decisions go on: only the check is refused
            finally:
                await channel.close()
