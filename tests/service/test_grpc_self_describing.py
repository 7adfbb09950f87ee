"""The gRPC transport describes itself (issue 22, item 3): server reflection, rich error details, request ids,
per-method call metrics, and ``max_connection_age`` closing long-lived channels so they re-balance.

The reflection client runs in a subprocess that never imports EdgePath or its generated code: it learns
``edgepath.v1.PathService`` from the server alone, as grpcurl or Postman would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator

import grpc
import httpx
import pytest
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from prometheus_client.parser import text_string_to_metric_families
from service_harness import RunningService, running_service

REFLECTION_CLIENT = textwrap.dedent(
    """
    import json, sys
    import grpc
    from google.protobuf import descriptor_pool, json_format, message_factory
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    assert not any(m.startswith("edgepath") for m in sys.modules)
    channel = grpc.insecure_channel(sys.argv[1])
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    answer = next(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    services = [s.name for s in answer.list_services_response.service]
    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    method = pool.FindServiceByName("edgepath.v1.PathService").FindMethodByName("Recommend")
    request_class = message_factory.GetMessageClass(method.input_type)
    response_class = message_factory.GetMessageClass(method.output_type)
    request = json_format.ParseDict(json.loads(sys.argv[2]), request_class())
    call = channel.unary_unary(
        "/edgepath.v1.PathService/Recommend",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=response_class.FromString,
    )
    reply = call(request, timeout=10)
    print(json.dumps({"services": services, "reply": json_format.MessageToDict(reply)}))
    """
)


@pytest.fixture(scope="module")
def service() -> Iterator[RunningService]:
    with running_service() as svc:
        yield svc


def test_reflection_lists_the_service_and_a_client_without_the_proto_calls_recommend(service: RunningService) -> None:
    request = {
        "deviceId": "phone-reflect",
        "interfaces": [
            {"name": "wlan0", "accessType": "ACCESS_TYPE_WIFI"},
            {"name": "wwan0", "accessType": "ACCESS_TYPE_LTE"},
        ],
    }
    out = subprocess.run(
        [sys.executable, "-c", REFLECTION_CLIENT, f"127.0.0.1:{service.grpc_port}", json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    answer = json.loads(out.stdout)
    assert "edgepath.v1.PathService" in answer["services"] and "grpc.health.v1.Health" in answer["services"]
    assert answer["reply"]["primaryPath"]["interface"] in ("wlan0", "wwan0")
    assert answer["reply"]["decisionId"]


def test_malformed_health_and_reflection_requests_are_invalid_argument_not_a_server_fault(
    service: RunningService,
) -> None:
    """Bytes that are no protobuf message, sent to the health and reflection services (no credential needed): each
    method answers INVALID_ARGUMENT, as PathService's do, and the calls count as such. Before, grpc.aio answered
    ``UNKNOWN`` "Unexpected <class 'google.protobuf.message.DecodeError'>: …" and logged a traceback per call, and
    any client could push ``grpc_server_handled_total{grpc_code="UNKNOWN"}`` (EdgePathServerErrors) up at will."""
    identity = {"request_serializer": lambda b: b, "response_deserializer": lambda b: b}
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        calls = {
            "/grpc.health.v1.Health/Check": lambda: channel.unary_unary("/grpc.health.v1.Health/Check", **identity)(
                b"\xff\xff", timeout=5
            ),
            "/grpc.health.v1.Health/Watch": lambda: next(
                channel.unary_stream("/grpc.health.v1.Health/Watch", **identity)(b"\xff\xff", timeout=5)
            ),
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": lambda: next(
                channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", **identity)(
                    iter([b"\xff"]), timeout=5
                )
            ),
        }
        for method, call in calls.items():
            with pytest.raises(grpc.RpcError) as err:
                call()
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, err.value.details())  # type: ignore[attr-defined]
            assert "DecodeError" not in (err.value.details() or "")  # type: ignore[attr-defined]
    scrape = httpx.get(f"{service.http_url}/metrics", timeout=5.0).text
    handled = {
        (f"/{s.labels['grpc_service']}/{s.labels['grpc_method']}", s.labels["grpc_code"]): s.value
        for family in text_string_to_metric_families(scrape)
        for s in family.samples
        if s.name == "grpc_server_handled_total"
    }
    for method in calls:
        assert handled.get((method, "INVALID_ARGUMENT"), 0) >= 1 and handled.get((method, "UNKNOWN"), 0) == 0


def test_invalid_field_is_a_bad_request_detail_and_the_request_id_is_echoed(service: RunningService) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = pb_grpc.PathServiceStub(channel)
        bad = pb.RecommendRequest(
            device_id="phone-bad",
            interfaces=[pb.InterfaceContext(name="wwan0", access_type=pb.ACCESS_TYPE_LTE, rsrp_dbm=40.0)],
        )
        with pytest.raises(grpc.RpcError) as caught:
            stub.Recommend(bad, timeout=5, metadata=(("x-request-id", "req-grpc-1"),))
        err = caught.value
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "interfaces[0].rsrp_dbm" in err.details()
        status = rpc_status.from_call(err)
        assert status is not None and len(status.details) == 1
        bad_request = error_details_pb2.BadRequest()
        assert status.details[0].Unpack(bad_request)
        assert bad_request.field_violations[0].field == "interfaces[0].rsrp_dbm"
        assert ("x-request-id", "req-grpc-1") in tuple(err.trailing_metadata())

        good = pb.RecommendRequest(
            device_id="phone-ok", interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)]
        )
        _, call = stub.Recommend.with_call(good, timeout=5)
        generated = dict(call.trailing_metadata())["x-request-id"]
        assert uuid.UUID(hex=generated).version == 4 and uuid.UUID(hex=generated).hex == generated
    scrape = httpx.get(f"{service.http_url}/metrics", timeout=5.0).text
    assert (
        'grpc_server_handled_total{grpc_code="INVALID_ARGUMENT",grpc_method="Recommend",'
        'grpc_service="edgepath.v1.PathService"}' in scrape
    )
    assert (
        'grpc_server_handling_seconds_count{grpc_method="Recommend",grpc_service="edgepath.v1.PathService"}' in scrape
    )


def test_max_connection_age_closes_an_idle_device_channel() -> None:
    """With ``grpc_max_connection_age_s`` the server sends GOAWAY: the device's channel leaves READY by itself
    (and reconnects on its next call, possibly to another replica)."""
    with running_service(grpc_max_connection_age_s=0.3, grpc_max_connection_age_grace_s=0.1) as svc:
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
            states: list[grpc.ChannelConnectivity] = []
            left_ready = threading.Event()

            def watch(state: grpc.ChannelConnectivity) -> None:
                states.append(state)
                if grpc.ChannelConnectivity.READY in states and state != grpc.ChannelConnectivity.READY:
                    left_ready.set()

            channel.subscribe(watch, try_to_connect=False)
            stub = pb_grpc.PathServiceStub(channel)
            request = pb.RecommendRequest(
                device_id="phone-age", interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)]
            )
            stub.Recommend(request, timeout=5)
            assert left_ready.wait(10), states
            assert stub.Recommend(request, timeout=5).decision_id  # the channel reconnects
            channel.unsubscribe(watch)
