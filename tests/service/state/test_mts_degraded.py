"""The MEC 015 API (``/mts/v1``) while Redis is down: 503 problems, never "no such session / device".

A real service on a real ``redis-server`` (append-only, so the session survives the restart) that is stopped in
the middle of the test. While the store is degraded every MTS operation, reads included, answers 503
``application/problem+json`` with ``Retry-After`` (as ``/v1`` does); a read must not tell the MEC platform that
an existing session or a known device does not exist (200 ``[]``, 404, 400 "unknown device"). The decision path
keeps degrading silently: recommendations go on with the default steering rule. Once Redis is back the
session is there again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from edgepath.main import Service
from edgepath.settings import Settings
from service_harness import is_degraded, is_ready, service_in_this_loop

from state.redis_helpers import RedisServer, wait_for

pytestmark = pytest.mark.redis

DEVICE = "phone-mts"
RECOMMEND: dict[str, Any] = {
    "device_id": DEVICE,
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -62.0, "rtt_ms": 48.0, "loss": 0.01},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -92.0, "rtt_ms": 21.0, "loss": 0.001},
    ],
}
SESSION: dict[str, Any] = {
    "appInsId": "mec-app-1",
    "requestType": 0,
    "flowFilter": [{"dstIp": "198.51.100.7", "dstPort": [443], "protocol": 6}],
    "qosD": {},
    "mtsMode": 1,
    "trafficDirection": "00",
    "deviceId": DEVICE,
}


@pytest.fixture
async def service(
    appendonly_redis: RedisServer, degrading_settings: dict[str, Any]
) -> AsyncIterator[tuple[Service, RedisServer]]:
    async with service_in_this_loop(Settings(**degrading_settings, trainer=False)) as svc:
        yield svc, appendonly_redis


def assert_unavailable(resp: httpx.Response, path: str) -> None:
    """A 503 problem with Retry-After and the members every problem of the service carries."""
    assert resp.status_code == 503, (path, resp.status_code, resp.text)
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert int(resp.headers["retry-after"]) >= 1
    body = resp.json()
    assert body["status"] == 503 and body["title"] == "Service Unavailable"
    assert body["error"] == "unavailable" and "field" in body and body["field"] is None
    assert body["message"] == body["detail"] and "state store unreachable" in body["message"]
    assert body["request_id"] == resp.headers["x-request-id"]
    assert body["instance"].endswith(f"/mts/v1{path}")


@pytest.mark.parametrize("outage", ["stopped", "hung"])
async def test_mts_reads_and_writes_are_503_while_redis_is_down_and_decisions_go_on(
    service: tuple[Service, RedisServer], outage: str
) -> None:
    """``stopped``: connections refused; ``hung`` (SIGSTOP): every command would wait for the 0.5 s timeout."""
    svc, server = service
    base = f"http://127.0.0.1:{svc.http_port}"
    async with httpx.AsyncClient(base_url=base, timeout=5.0) as http:
        await wait_for(lambda: is_ready(http))
        assert (await http.post("/v1/recommendations", json=RECOMMEND)).status_code == 200  # device reports
        created = await http.post("/mts/v1/mts_sessions", json=SESSION)
        assert created.status_code == 201, created.text
        sid = created.json()["sessionId"]
        assert (await http.get("/mts/v1/mts_capability_info")).status_code == 200

        server.stop() if outage == "stopped" else server.pause()
        await wait_for(lambda: is_degraded(http))

        calls = [
            ("GET", "/mts_sessions", None),
            ("GET", f"/mts_sessions/{sid}", None),
            ("PUT", f"/mts_sessions/{sid}", {**SESSION, "mtsMode": 3}),
            ("POST", "/mts_sessions", {**SESSION, "appInsId": "mec-app-2"}),
            ("GET", "/mts_capability_info", None),
            ("DELETE", f"/mts_sessions/{sid}", None),
        ]
        for method, path, body in calls:
            assert_unavailable(await http.request(method, f"/mts/v1{path}", json=body), path)

        # the decision path degrades silently: a recommendation, with the default rule (no session read)
        rec = await http.post("/v1/recommendations", json=RECOMMEND)
        assert rec.status_code == 200, rec.text
        assert rec.json()["steering"]["rules"][-1]["intent"] == "DEFAULT"

        server.start() if outage == "stopped" else server.resume()
        await wait_for(lambda: is_ready(http))
        got = await http.get(f"/mts/v1/mts_sessions/{sid}")
        assert got.status_code == 200 and got.json()["mtsMode"] == 1  # the refused PUT changed nothing
        assert [s["sessionId"] for s in (await http.get("/mts/v1/mts_sessions")).json()] == [sid]
        rec = await http.post("/v1/recommendations", json=RECOMMEND)
        assert rec.json()["steering"]["rules"][-1]["mts_session_id"] == sid
