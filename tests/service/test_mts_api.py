"""ETSI MEC 015 Traffic Steering API (``/mts/v1``, issue 19) against a real running service, on both stores.

Every response body is checked against the schemas of ETSI's OpenAPI file as vendored
(``service/data/etsi-mec-015/TrafficSteeringApi.yaml``, JSON Schema 2020-12 via ``jsonschema``).
The Redis cases run a real ``redis-server`` (skipped, saying why, when it is not installed).
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import jsonschema
import pytest
import yaml
from edgepath.rest.mts import MAX_DEVICE_FLOW_FILTERS, MAX_DEVICE_SESSIONS, MAX_FILTERS
from edgepath.security import DEFAULT_MAX_MESSAGE_BYTES
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from google.protobuf import json_format
from service_harness import RunningService, captured_json_log, running_service
from state.redis_helpers import REDIS_SERVER, RedisServer

SPEC_PATH = Path(__file__).resolve().parents[2] / "service" / "data" / "etsi-mec-015" / "TrafficSteeringApi.yaml"
SPEC = yaml.safe_load(SPEC_PATH.read_text())
DEVICE = "phone-mec"
#: The ``error`` kind of each status the API answers (edgepath.errors.ErrorKind; MEC 015: invalid is 400).
KINDS = {
    400: "invalid_input",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    415: "invalid_input",
    429: "rate_limited",
    503: "unavailable",
}
RECOMMEND = {
    "device_id": DEVICE,
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -62.0, "rtt_ms": 48.0, "loss": 0.01},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -92.0, "rtt_ms": 21.0, "loss": 0.001},
    ],
}


def conforms(body: Any, schema: str) -> None:
    """Validate ``body`` against ``#/components/schemas/<schema>`` of ETSI's file (or a list of them)."""
    ref = {"$ref": f"#/components/schemas/{schema}"}
    root = {**SPEC, **({"type": "array", "items": ref} if isinstance(body, list) else ref)}
    jsonschema.Draft202012Validator(root).validate(body)


def session_body(mts_mode: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "appInsId": "mec-app-1",
        "requestType": 0,
        "flowFilter": [{"dstIp": "198.51.100.7", "dstPort": [443], "protocol": 6}],
        "qosD": {},
        "mtsMode": mts_mode,
        "trafficDirection": "00",
        "deviceId": DEVICE,
        **extra,
    }


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it from apt)")
    server = RedisServer(tmp_path_factory.mktemp("mts-redis")).start()
    yield server.url
    server.stop()


def store_settings(kind: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if kind == "memory":
        return {}
    url = request.getfixturevalue("redis_url")
    return {"store_url": url, "redis_namespace": f"mts-{uuid.uuid4().hex[:10]}", "trainer": False}


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def svc(request: pytest.FixtureRequest) -> Iterator[RunningService]:
    with running_service(**store_settings(request.param, request)) as running:
        yield running


def http(service: RunningService) -> httpx.Client:
    return httpx.Client(base_url=f"{service.http_url}/mts/v1", timeout=5.0)


def recommend_rest(service: RunningService) -> dict[str, Any]:
    resp = httpx.post(f"{service.http_url}/v1/recommendations", json=RECOMMEND, timeout=5.0)
    assert resp.status_code == 200, resp.text
    return resp.json()["steering"]["rules"][-1]


def recommend_grpc_reply(service: RunningService) -> pb.Recommendation:
    """``RECOMMEND`` over gRPC on a channel with gRPC's default options (a client's 4 MiB receive bound)."""
    msg = copy.deepcopy(RECOMMEND)
    for iface in msg["interfaces"]:
        iface["access_type"] = f"ACCESS_TYPE_{iface['access_type']}"
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        reply: pb.Recommendation = pb_grpc.PathServiceStub(channel).Recommend(
            json_format.ParseDict(msg, pb.RecommendRequest()), timeout=10
        )
    return reply


def recommend_grpc(service: RunningService) -> dict[str, Any]:
    reply = recommend_grpc_reply(service)
    rules = json_format.MessageToDict(reply, preserving_proto_field_name=True)["steering"]["rules"]
    return dict(rules[-1])


def problem_field(resp: httpx.Response, status: int = 400) -> str | None:
    """The ``field`` of the problem ``resp`` must be (ETSI's ProblemDetails, the service's members, ``status``)."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    body = resp.json()
    conforms(body, "ProblemDetails")
    assert body["status"] == status
    # the members of every problem of the service (rest/problem.py), as on the /v1 routes
    assert {"error", "field", "message", "request_id", "instance"} <= set(body), body
    assert body["error"] == KINDS[status] and body["request_id"] == resp.headers["x-request-id"]
    assert body["detail"] == (f"{body['field']}: {body['message']}" if body["field"] else body["message"])
    field: str | None = body["field"]
    return field


def test_low_latency_session_steers_the_next_recommendation_and_delete_restores_it(svc: RunningService) -> None:
    """The issue's "done means": mtsMode 1 → Smallest Delay with the lower-RTT access active; DELETE → default."""
    assert recommend_rest(svc)["intent"] == "DEFAULT"  # the device reports its accesses
    with http(svc) as mts:
        created = mts.post("/mts_sessions", json=session_body(1))
        assert created.status_code == 201, created.text
        body = created.json()
        conforms(body, "MtsSessionInfo")
        sid = body["sessionId"]
        assert created.headers["location"] == f"/mts/v1/mts_sessions/{sid}"
        for rule in (recommend_rest(svc), recommend_grpc(svc)):
            assert rule["steering_mode"] == "SMALLEST_DELAY"
            assert rule["active_access"] == "3GPP"  # LTE 21 ms < WiFi 48 ms
            assert rule["mts_session_id"] == sid and rule["mts_mode"] == 1
        got = mts.get(f"/mts_sessions/{sid}")
        assert got.status_code == 200 and got.json() == body
        conforms(got.json(), "MtsSessionInfo")
        listed = mts.get("/mts_sessions", params={"app_instance_id": "mec-app-1"})
        assert listed.status_code == 200 and [s["sessionId"] for s in listed.json()] == [sid]
        conforms(listed.json(), "MtsSessionInfo")
        assert mts.get("/mts_sessions", params={"session_id": "other"}).json() == []
        # PUT replaces: redundancy
        put = mts.put(f"/mts_sessions/{sid}", json=session_body(3))
        assert put.status_code == 200, put.text
        conforms(put.json(), "MtsSessionInfo")
        assert recommend_rest(svc)["steering_mode"] == "REDUNDANT"
        assert mts.delete(f"/mts_sessions/{sid}").status_code == 204
        assert recommend_rest(svc)["intent"] == "DEFAULT"
        assert recommend_grpc(svc)["intent"] == "DEFAULT"
        assert problem_field(mts.get(f"/mts_sessions/{sid}"), 404) == "sessionId"
        assert problem_field(mts.delete(f"/mts_sessions/{sid}"), 404) == "sessionId"
        assert problem_field(mts.put(f"/mts_sessions/{sid}", json=session_body(1)), 404) == "sessionId"


def test_capability_info_is_built_from_what_devices_report(svc: RunningService) -> None:
    with http(svc) as mts:
        problem_field(mts.get("/mts_capability_info"), 404)  # nobody reported yet
        recommend_rest(svc)
        resp = mts.get("/mts_capability_info")
        assert resp.status_code == 200, resp.text
        info = resp.json()
        conforms(info, "MtsCapabilityInfo")
        assert {(a["accessType"], a["metered"]) for a in info["mtsAccessInfo"]} == {(1, 0), (32, 1)}
        assert info["mtsMode"] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"deviceId": "never-seen"}, "deviceId"),
        ({"mtsMode": 7}, "mtsMode"),
        ({"mtsMode": -1}, "mtsMode"),
        ({"requestType": 2}, "requestType"),
        ({"trafficDirection": "11"}, "trafficDirection"),
        ({"mtsMode": 4, "qosD": {"priority": 2}}, "qosD"),  # QoS mode with no requirement
        ({"mtsMode": 4, "qosD": {"maxLatency": 100, "maxJitter": 500}}, "qosD.maxJitter"),  # contradictory
        ({"mtsMode": 4, "qosD": {"maxLatency": 0}}, "qosD.maxLatency"),
        ({"qosD": {"minTpt": 2**32}}, "qosD.minTpt"),
        ({"flowFilter": []}, "flowFilter"),
        ({"flowFilter": [{}]}, "flowFilter[0]"),
        ({"flowFilter": [{"dstPort": [70000]}]}, "flowFilter[0].dstPort[0]"),
        # sourceIp/dstIp: an IP address or a CIDR network (ipaddress), not any string of hex digits, dots and colons
        ({"flowFilter": [{"dstIp": "::::::::::::/"}]}, "flowFilter[0].dstIp"),
        ({"flowFilter": [{"dstIp": "999.999.999.999/99"}]}, "flowFilter[0].dstIp"),
        ({"flowFilter": [{"dstIp": "198.51.100.0/33"}]}, "flowFilter[0].dstIp"),
        ({"flowFilter": [{"dstIp": "198.51.100.7/24"}]}, "flowFilter[0].dstIp"),  # host bits set
        ({"flowFilter": [{"dstIp": "10.0.0.0/255.0.0.0"}]}, "flowFilter[0].dstIp"),  # a netmask, not CIDR
        ({"flowFilter": [{"dstIp": "fe80::1%eth0"}]}, "flowFilter[0].dstIp"),
        ({"flowFilter": [{"dstPort": [443]}, {"sourceIp": "1.2.3.4.5"}]}, "flowFilter[1].sourceIp"),
        ({"appInsId": None}, "appInsId"),
        ({"sessionId": "not-this-one"}, "sessionId"),
        # JSON booleans and numeric strings are not integers (they were taken as 1 / 0 / the number)
        ({"requestType": True}, "requestType"),
        ({"requestType": False}, "requestType"),
        ({"requestType": "0"}, "requestType"),
        ({"mtsMode": True}, "mtsMode"),
        ({"mtsMode": "1"}, "mtsMode"),
        ({"mtsMode": 1.5}, "mtsMode"),
        ({"qosD": {"priority": True}}, "qosD.priority"),
        ({"mtsMode": 4, "qosD": {"maxLatency": "100"}}, "qosD.maxLatency"),
        ({"mtsMode": 4, "qosD": {"minTpt": False}}, "qosD.minTpt"),
        ({"mtsMode": 4, "qosD": {"maxLoss": True}}, "qosD.maxLoss"),
        ({"mtsMode": 4, "qosD": {"maxLatency": 100, "maxJitter": True}}, "qosD.maxJitter"),
        ({"flowFilter": [{"protocol": True}]}, "flowFilter[0].protocol"),
        ({"flowFilter": [{"dscp": "46"}]}, "flowFilter[0].dscp"),
        ({"flowFilter": [{"flowlabel": True}]}, "flowFilter[0].flowlabel"),
        ({"flowFilter": [{"dstPort": [True]}]}, "flowFilter[0].dstPort[0]"),
        ({"flowFilter": [{"sourcePort": ["443"]}]}, "flowFilter[0].sourcePort[0]"),
        ({"timeStamp": {"seconds": True, "nanoSeconds": 0}}, "timeStamp.seconds"),
        ({"timeStamp": {"seconds": 1, "nanoSeconds": "0"}}, "timeStamp.nanoSeconds"),
    ],
)
def test_invalid_sessions_are_400_problems_naming_the_field(
    svc: RunningService, change: dict[str, Any], field: str
) -> None:
    recommend_rest(svc)
    body = {k: v for k, v in {**session_body(), **change}.items() if v is not None}
    with http(svc) as mts:
        assert problem_field(mts.post("/mts_sessions", json=body)) == field
        assert mts.get("/mts_sessions").json() == []


def test_integer_members_take_json_integers(svc: RunningService) -> None:
    """What the spec's schema calls an integer (OpenAPI 3.1 / JSON Schema 2020-12: also ``1.0``) is taken."""
    recommend_rest(svc)
    body = session_body(
        4,
        requestType=1,
        qosD={"minTpt": 1000, "maxLatency": 2_000_000, "maxLoss": 3, "maxJitter": 0, "priority": 0},
        flowFilter=[{"sourcePort": [0], "dstPort": [65535], "protocol": 17, "dscp": 46, "flowlabel": 0}],
        timeStamp={"seconds": 1_700_000_000, "nanoSeconds": 0},
    )
    with http(svc) as mts:
        created = mts.post("/mts_sessions", json=body)
        assert created.status_code == 201, created.text
        conforms(created.json(), "MtsSessionInfo")
        assert {k: v for k, v in created.json().items() if k != "sessionId"} == body
        integral = mts.post("/mts_sessions", json=session_body(2.0, requestType=0.0))
        assert integral.status_code == 201, integral.text
        assert (integral.json()["mtsMode"], integral.json()["requestType"]) == (2, 0)
        assert type(integral.json()["mtsMode"]) is int


def test_flow_filter_addresses_are_ip_addresses_or_cidr_networks(svc: RunningService) -> None:
    """MEC 015 §7.2.5 ``sourceIp``/``dstIp``: "address identity of session (including range)"."""
    recommend_rest(svc)
    flows = [
        {"sourceIp": "198.51.100.7", "dstIp": "203.0.113.0/24"},
        {"sourceIp": "2001:db8::1", "dstIp": "2001:db8:1::/48"},
        {"dstIp": "::ffff:192.0.2.1"},
        {"sourceIp": "0.0.0.0/0"},
    ]
    with http(svc) as mts:
        created = mts.post("/mts_sessions", json=session_body(1, requestType=1, flowFilter=flows))
        assert created.status_code == 201, created.text
        assert created.json()["flowFilter"] == flows
        bad = mts.post("/mts_sessions", json=session_body(1, flowFilter=[{"dstIp": "999.999.999.999/99"}]))
        assert problem_field(bad) == "flowFilter[0].dstIp"
        assert "not an IP address or a network in CIDR notation" in bad.json()["message"]


def test_missing_members_and_bad_json_are_400(svc: RunningService) -> None:
    with http(svc) as mts:
        body = session_body()
        del body["qosD"]
        assert problem_field(mts.post("/mts_sessions", json=body)) == "qosD"
        resp = mts.post("/mts_sessions", content=b"{not json", headers={"content-type": "application/json"})
        assert problem_field(resp) == "body"
        resp = mts.post("/mts_sessions", content=b"l\xf0\xbf\xff", headers={"content-type": "application/json"})
        assert problem_field(resp) == "body"


def test_a_body_not_sent_as_json_is_415_naming_its_type_as_on_v1() -> None:
    """POST and PUT take ``application/json`` (or ``+json``, or no ``Content-Type``: curl and many clients send
    none), as the ``/v1`` routes; text or a form is 415 naming the type sent (it was 400 "Input should be a valid
    dictionary", or a body taken as JSON whatever its type)."""
    raw = json.dumps(session_body(1)).encode()
    with running_service() as svc, http(svc) as mts:
        recommend_rest(svc)
        for sent in ("text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded"):
            media = sent.split(";")[0]
            v1 = httpx.post(f"{svc.http_url}/v1/recommendations", content=raw, headers={"content-type": sent})
            assert v1.status_code == 415
            for method, path in (("POST", "/mts_sessions"), ("PUT", "/mts_sessions/any")):
                resp = mts.request(method, path, content=raw, headers={"content-type": sent})
                assert problem_field(resp, 415) == "body" == v1.json()["field"]
                assert resp.json()["message"] == v1.json()["message"]
                assert resp.json()["message"] == f"Content-Type {media} is not JSON: send the body as application/json"
        assert mts.get("/mts_sessions").json() == []
        for headers in ({}, {"content-type": "application/merge-patch+json"}):  # no type, or a +json suffix: JSON
            created = mts.post("/mts_sessions", content=raw, headers=headers)
            assert created.status_code == 201, created.text
            sid = created.json()["sessionId"]
            assert mts.put(f"/mts_sessions/{sid}", content=raw, headers=headers).status_code == 200
            assert mts.delete(f"/mts_sessions/{sid}").status_code == 204


def test_a_flow_filter_defines_one_session_only(svc: RunningService) -> None:
    recommend_rest(svc)
    flow = session_body(1, requestType=1)
    with http(svc) as mts:
        assert mts.post("/mts_sessions", json=flow).status_code == 201
        assert problem_field(mts.post("/mts_sessions", json=flow)) == "flowFilter"
        other = session_body(2, requestType=1, flowFilter=[{"dstIp": "203.0.113.9"}])
        assert mts.post("/mts_sessions", json=other).status_code == 201
    resp = httpx.post(f"{svc.http_url}/v1/recommendations", json=RECOMMEND, timeout=5.0).json()
    rules = resp["steering"]["rules"]
    assert [r["steering_mode"] for r in rules[:2]] == ["SMALLEST_DELAY", "LOAD_BALANCING"]
    assert rules[-1]["traffic_descriptor"]["match_all"] is True


@pytest.mark.redis
def test_sessions_survive_a_replica_restart_with_redis(redis_url: str) -> None:
    settings = {"store_url": redis_url, "redis_namespace": f"mts-{uuid.uuid4().hex[:10]}", "trainer": False}
    with running_service(**settings) as first:
        recommend_rest(first)
        with http(first) as mts:
            sid = mts.post("/mts_sessions", json=session_body(1)).json()["sessionId"]
    with running_service(**settings) as second:  # a new replica process state, same Redis
        with http(second) as mts:
            assert mts.get(f"/mts_sessions/{sid}").status_code == 200
        assert recommend_rest(second)["steering_mode"] == "SMALLEST_DELAY"


def test_with_authentication_only_the_platform_admin_steers(tmp_path: Path) -> None:
    from edgepath.security.auth import TokenFile

    tokens = TokenFile(tmp_path / "tokens.json")
    admin = tokens.add("mec-platform", admin=True)
    device = tokens.add(DEVICE)
    with running_service(auth_tokens_file=tokens.path) as svc:
        resp = httpx.post(
            f"{svc.http_url}/v1/recommendations",
            json=RECOMMEND,
            headers={"Authorization": f"Bearer {device}"},
            timeout=5.0,
        )
        assert resp.status_code == 200, resp.text
        with http(svc) as mts:
            unauthenticated = mts.get("/mts_sessions")
            assert problem_field(unauthenticated, 401) is None
            assert unauthenticated.headers["www-authenticate"] == "Bearer"
            assert problem_field(mts.get("/mts_sessions", headers={"Authorization": f"Bearer {device}"}), 403) is None
            created = mts.post("/mts_sessions", json=session_body(1), headers={"Authorization": f"Bearer {admin}"})
            assert created.status_code == 201, created.text


def test_with_authentication_credentials_are_checked_before_the_body_is_read(tmp_path: Path) -> None:
    """POST and PUT answer 401 without valid credentials and 403 for a device, whatever the body (not JSON, or
    invalid: never a 400 about it); an admin's body is then judged. The OpenAPI document still describes it."""
    from edgepath.security.auth import TokenFile

    tokens = TokenFile(tmp_path / "tokens.json")
    admin = {"Authorization": f"Bearer {tokens.add('mec-platform', admin=True)}"}
    device = {"Authorization": f"Bearer {tokens.add(DEVICE)}"}
    not_json = {"content": b"{", "headers": {"content-type": "application/json"}}
    invalid = {"json": {"appInsId": 1}}
    with running_service(auth_tokens_file=tokens.path) as svc, http(svc) as mts:
        for method, path in (("POST", "/mts_sessions"), ("PUT", "/mts_sessions/any")):
            for body in (not_json, invalid):
                for credentials, status in (({}, 401), ({"Authorization": "Bearer nope"}, 401), (device, 403)):
                    headers = {**body.get("headers", {}), **credentials}
                    resp = mts.request(method, path, **{**body, "headers": headers})
                    assert problem_field(resp, status) is None, (method, body, credentials)
                    assert (resp.headers.get("www-authenticate") == "Bearer") is (status == 401)
            resp = mts.request(method, path, content=b"{", headers={**admin, "content-type": "application/json"})
            assert problem_field(resp) == "body"
            assert problem_field(mts.request(method, path, json={"appInsId": 1}, headers=admin)) == "appInsId"
        doc = httpx.get(f"{svc.http_url}/openapi.json", timeout=5.0).json()
    for method, path in (("post", "/mts/v1/mts_sessions"), ("put", "/mts/v1/mts_sessions/{sessionId}")):
        assert doc["paths"][path][method]["requestBody"] == {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MtsSessionInfo"}}},
        }
    schema = doc["components"]["schemas"]["MtsSessionInfo"]
    assert {"appInsId", "requestType", "flowFilter", "qosD", "mtsMode", "trafficDirection", "deviceId"} == set(
        schema["required"]
    )
    assert schema["properties"]["flowFilter"]["items"] == {"$ref": "#/components/schemas/FlowFilter"}
    assert "FlowFilter" in doc["components"]["schemas"] and "QosD" in doc["components"]["schemas"]


def test_with_a_jwt_key_401_has_www_authenticate_and_the_service_problem_members() -> None:
    """``EDGEPATH_AUTH_JWT_KEY`` set: a call without credentials (or with a bad token) is 401 with
    ``WWW-Authenticate: Bearer`` and ``error``/``field`` as on ``/v1``; a device's token is 403, an admin's 200."""
    from edgepath.security.auth import issue_jwt

    key = "j" * 32
    with running_service(auth_jwt_key=key) as svc:
        v1 = httpx.get(f"{svc.http_url}/v1/admin/quarantine", timeout=5.0)
        with http(svc) as mts:
            for headers in ({}, {"Authorization": "Bearer not-a-jwt"}):
                resp = mts.get("/mts_sessions", headers=headers)
                assert problem_field(resp, 401) is None
                assert resp.headers["www-authenticate"] == v1.headers["www-authenticate"] == "Bearer"
                assert set(resp.json()) >= set(v1.json()) - {"errors"}
            device = {"Authorization": f"Bearer {issue_jwt(key, DEVICE)}"}
            assert problem_field(mts.get("/mts_capability_info", headers=device), 403) is None
            admin = {"Authorization": f"Bearer {issue_jwt(key, 'mec-platform', admin=True)}"}
            assert mts.get("/mts_sessions", headers=admin).json() == []


def test_problem_kinds_match_the_v1_routes(svc: RunningService) -> None:
    """404 is ``not_found`` (an unknown session, capability info before any report), as /v1's 404."""
    with http(svc) as mts:
        assert problem_field(mts.get("/mts_capability_info"), 404) is None
        assert problem_field(mts.get("/mts_sessions/nope"), 404) == "sessionId"
        assert problem_field(mts.delete("/mts_sessions/" + "x" * 200), 404) == "sessionId"
    v1 = httpx.post(
        f"{svc.http_url}/v1/outcomes", json={"device_id": "d", "decision_id": "0" * 32, "throughput_bps": 1}
    )
    assert v1.status_code == 404 and v1.json()["error"] == KINDS[404]


def test_an_unknown_session_id_is_quoted_in_the_404_and_its_log_line() -> None:
    """A session id with a line break or NUL (``%0A``, ``%00`` in the path) is written as its repr: it forges no
    line of a text log (the refusal's line carries the problem's detail)."""
    with captured_json_log("INFO") as log, running_service() as svc, http(svc) as mts:
        for method in ("GET", "PUT", "DELETE"):
            body = session_body() if method == "PUT" else None
            resp = mts.request(method, "/mts_sessions/a%0Aforged%00line", json=body, headers={"x-request-id": method})
            assert problem_field(resp, 404) == "sessionId"
            assert resp.json()["message"] == r"no session 'a\nforged\x00line'"
    lines = [json.loads(line) for line in log.getvalue().splitlines() if line.strip()]
    refused = {r["request_id"]: r["message"] for r in lines if r.get("transport") == "rest"}
    assert set(refused) == {"GET", "PUT", "DELETE"}
    for message in refused.values():
        assert r"no session 'a\nforged\x00line'" in message and "\n" not in message and "\x00" not in message


def maximal_filter(n: int) -> dict[str, Any]:
    """A ``flowFilter`` entry about as large as the schema lets one be (distinct for each ``n`` < 65,536): addresses
    of the longest textual form, 64 source and 64 destination ports of three bytes each as varints."""
    ports = list(range(65535 - 63, 65536))
    return {
        "sourceIp": f"ffff:ffff:ffff:ffff:ffff:ffff:255.255.{n // 256}.{n % 256}/128",
        "dstIp": "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255/128",
        "sourcePort": ports,
        "dstPort": ports,
        "protocol": 255,
        "dscp": 63,
        "flowlabel": 2**20 - 1,
    }


def test_the_largest_device_allowed_is_answered_and_one_filter_more_is_refused(svc: RunningService) -> None:
    """MAX_DEVICE_FLOW_FILTERS (245) flow filters over one device's sessions, every one maximal, with a QoS none can
    meet (the longest reasons): Recommend answers over gRPC (the server's 1 MiB send bound, a client's 4 MiB receive
    bound) and REST, one rule per filter at precedence 10..254 then the match-all; one filter more is 400 naming
    ``flowFilter``, on POST and on a PUT that grows a session. (300 sessions × 16 filters for one device made a
    1.1 MB reply the server could not send: RESOURCE_EXHAUSTED, the decision stored and never delivered.)"""
    recommend_rest(svc)
    qos = {"minTpt": 2**32 - 1, "maxLatency": 1, "maxLoss": 30, "maxJitter": 1, "priority": 3}
    full, last = divmod(MAX_DEVICE_FLOW_FILTERS, MAX_FILTERS)
    sizes = [MAX_FILTERS] * full + ([last] if last else [])
    sids, n = [], 0
    with http(svc) as mts:
        for size in sizes:
            flows = [maximal_filter(n + i) for i in range(size)]
            body = session_body(4, requestType=1, qosD=qos, trafficDirection="10", flowFilter=flows)
            created = mts.post("/mts_sessions", json=body)
            assert created.status_code == 201, created.text
            sids.append(created.json()["sessionId"])
            n += size
        assert n == MAX_DEVICE_FLOW_FILTERS
        one_more = session_body(1, requestType=1, flowFilter=[maximal_filter(n)])
        refused = mts.post("/mts_sessions", json=one_more)
        assert problem_field(refused) == "flowFilter"
        assert f"{MAX_DEVICE_FLOW_FILTERS + 1} filters in all" in refused.json()["message"]
        grown = [maximal_filter(n - sizes[-1] + i) for i in range(sizes[-1] + 1)]
        put = mts.put(f"/mts_sessions/{sids[-1]}", json=session_body(4, requestType=1, qosD=qos, flowFilter=grown))
        assert problem_field(put) == "flowFilter"
        assert mts.post("/mts_sessions", json=session_body(0)).status_code == 201  # application-wide: no rule
    reply = recommend_grpc_reply(svc)
    precedences = [rule.rule_precedence for rule in reply.steering.rules]
    assert precedences == [*range(10, 255), 255]
    assert reply.ByteSize() < DEFAULT_MAX_MESSAGE_BYTES // 2  # comfortably within the server's send bound
    rest = httpx.post(f"{svc.http_url}/v1/recommendations", json=RECOMMEND, timeout=10.0)
    assert rest.status_code == 200
    assert [rule["rule_precedence"] for rule in rest.json()["steering"]["rules"]] == precedences


def test_a_device_has_a_bounded_number_of_sessions() -> None:
    """MAX_DEVICE_SESSIONS per device (each is read for every recommendation of the device): one more is 400 naming
    ``deviceId``; replacing one of them is not one more, and another device is not concerned."""
    with running_service() as svc, http(svc) as mts:
        recommend_rest(svc)
        sids = []
        for _ in range(MAX_DEVICE_SESSIONS):
            created = mts.post("/mts_sessions", json=session_body(0))
            assert created.status_code == 201, created.text
            sids.append(created.json()["sessionId"])
        refused = mts.post("/mts_sessions", json=session_body(1))
        assert problem_field(refused) == "deviceId"
        assert f"{MAX_DEVICE_SESSIONS} at most per device" in refused.json()["message"]
        assert mts.put(f"/mts_sessions/{sids[0]}", json=session_body(2)).status_code == 200
        other = {**RECOMMEND, "device_id": "phone-other"}
        assert httpx.post(f"{svc.http_url}/v1/recommendations", json=other, timeout=5.0).status_code == 200
        assert mts.post("/mts_sessions", json=session_body(1, deviceId="phone-other")).status_code == 201
        assert len(mts.get("/mts_sessions").json()) == MAX_DEVICE_SESSIONS + 1


def test_the_number_of_sessions_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import edgepath.rest.mts as mts_module

    monkeypatch.setattr(mts_module, "MAX_SESSIONS", 2)
    with running_service() as svc:
        recommend_rest(svc)
        with http(svc) as mts:
            for mode in (0, 1):
                assert mts.post("/mts_sessions", json=session_body(mode)).status_code == 201
            problem_field(mts.post("/mts_sessions", json=session_body(2)), 403)
            assert len(mts.get("/mts_sessions").json()) == 2
