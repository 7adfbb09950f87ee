"""The gRPC encoder's sections say what the REST body says: each checked against protobuf's own JSON mapping
(``json_format.ParseDict`` of the section's REST JSON, access types spelled as proto enum names). And every field of
a request the proto defines is the model's and reaches the Python reader (the compiled decoding's check:
``test_grpc_native_decoding.py``), named by the failure where a field added to the proto is not."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from edgepath import types
from edgepath.adapters.mlpm import scheduler_advice
from edgepath.grpc import convert
from edgepath.grpc.convert import scheduler_to_proto, steering_to_proto
from edgepath.settings import Settings
from edgepath.types import InterfaceContext, RecommendRequest, SteeringAdvice
from edgepath.wire import edgepath_pb2 as pb
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from native_twin import decoded_fields, every_field_set
from pydantic import BaseModel
from service_harness import running_service


def _proto_spelling(value: Any) -> Any:
    """REST JSON → proto JSON: every ``access_type`` as its enum name (``WIFI`` → ``ACCESS_TYPE_WIFI``)."""
    if isinstance(value, dict):
        return {k: f"ACCESS_TYPE_{v}" if k == "access_type" else _proto_spelling(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_proto_spelling(v) for v in value]
    return value


def test_scheduler_section_matches_its_rest_json() -> None:
    request = RecommendRequest.model_validate(
        {
            "device_id": "d-1",
            "interfaces": [
                {"name": "wlan0", "access_type": "WIFI"},
                {"name": "wwan0", "access_type": "LTE", "rtt_ms": 40.0},
            ],
            "subflow_histories": [
                {"interface": "wlan0", "rtt_t_ms": [0.0, 1000.0, 2000.0], "rtt_ms": [20.0, 22.0, 25.0]},
            ],
        }
    )
    advice = scheduler_advice(request, Settings())
    assert any(w.throughput_bps is None for w in advice.weights)  # unset optional fields are covered
    expected = json_format.ParseDict(advice.model_dump(mode="json", exclude_none=True), pb.SchedulerAdvice())
    assert scheduler_to_proto(advice) == expected
    assert scheduler_to_proto(None) is None


def test_steering_section_matches_its_rest_json() -> None:
    access = {
        "interface": "wlan0",
        "access_type": "WIFI",
        "priority": None,
        "percentage": None,
        "metered": False,
        "initial_subflow": True,
    }
    advice = SteeringAdvice.model_validate(
        {
            "source": "test",
            "rules": [
                {
                    "rule_precedence": 10,
                    "traffic_descriptor": {
                        "match_all": False,
                        "destination_ip": "192.0.2.10",
                        "destination_ports": [443, 8443],
                        "protocol": 6,
                        "traffic_direction": "DOWNLINK",
                    },
                    "steering_functionality": "MPTCP",
                    "steering_mode": "PRIORITY_BASED",
                    "high_priority_access": "NON_3GPP",
                    "accesses": [
                        access | {"access": "NON_3GPP", "priority": "HIGH"},
                        access
                        | {"access": "3GPP", "interface": "wwan0", "access_type": "LTE", "metered": True}
                        | {"initial_subflow": False, "percentage": 0},
                    ],
                    "intent": "DEFAULT",
                    "mts_mode": 2,
                    "mts_session_id": "s-1",
                    "unmet_qos": ["minTpt"],
                    "reason": "test",
                },
                {
                    "rule_precedence": 255,
                    "traffic_descriptor": {"match_all": True},
                    "steering_functionality": "MPTCP",
                    "steering_mode": "ACTIVE_STANDBY",
                    "active_access": "3GPP",
                    "accesses": [access | {"access": "NON_3GPP", "access_type": "NR"}],
                    "intent": "DEFAULT",
                    "reason": "default",
                },
            ],
        }
    )
    rest = _proto_spelling(advice.model_dump(mode="json", exclude_none=True))
    assert steering_to_proto(advice) == json_format.ParseDict(rest, pb.SteeringAdvice())
    assert steering_to_proto(None) is None


# --- every field of a request reaches the readers (a field added to the proto fails here, named) -----------------


def _request_messages(descriptor: Descriptor = pb.RecommendRequest.DESCRIPTOR) -> list[Descriptor]:
    """``RecommendRequest`` and every message it reaches, each once, in the order reached."""
    found = [descriptor]
    for f in descriptor.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type not in found:
            found += [m for m in _request_messages(f.message_type) if m not in found]
    return found


def _at_model_bounds() -> dict[str, Any]:
    """Each interface measurement at its model's lower bound (so the compiled decoding builds the model itself)."""
    properties = InterfaceContext.model_json_schema()["properties"]
    values: dict[str, Any] = {}
    for f in pb.InterfaceContext.DESCRIPTOR.fields:
        number = next((a for a in properties.get(f.name, {}).get("anyOf", []) if "minimum" in a), None)
        if number is not None:
            kind = int if f.type == FieldDescriptor.TYPE_INT32 else float
            values[f"InterfaceContext.{f.name}"] = kind(number["minimum"])
    return values


#: A request with every field of every message it reaches set (:func:`native_twin.every_field_set`).
FULL_REQUEST: pb.RecommendRequest = every_field_set(pb, pb.RecommendRequest.DESCRIPTOR, _at_model_bounds())
#: Every field of it by path (``interfaces[0].cqi``), as protobuf's own JSON mapping reads them: all set.
REQUEST_FIELDS = decoded_fields(
    json_format.MessageToDict(FULL_REQUEST, preserving_proto_field_name=True), pb.RecommendRequest.DESCRIPTOR
)


def test_a_request_with_every_field_set_has_them_all() -> None:
    assert len(REQUEST_FIELDS) > 40 and all(v is not None for v in REQUEST_FIELDS.values()), REQUEST_FIELDS


@pytest.mark.parametrize("path", list(REQUEST_FIELDS))
def test_every_field_of_a_request_reaches_the_python_reader(path: str) -> None:
    """The reader names each field it copies by hand (``grpc/convert.py``): a field it misses is named here."""
    read = decoded_fields(convert.recommend_request_fields(FULL_REQUEST), pb.RecommendRequest.DESCRIPTOR)
    assert read[path] is not None, f"{path} is set on the wire but grpc/convert.py's reader drops it"


@pytest.mark.parametrize(
    ("message", "field"), [(m.name, f.name) for m in _request_messages() for f in m.fields], ids=lambda v: str(v)
)
def test_every_field_of_a_request_message_is_a_field_of_its_model(message: str, field: str) -> None:
    model = getattr(types, message, None)
    assert model is not None, f"edgepath.types has no model {message} for the proto message"
    fields = model.model_fields if issubclass(model, BaseModel) else model.__annotations__  # a TypedDict
    assert field in fields, f"the proto's {message}.{field} is no field of edgepath.types.{message}"


@pytest.mark.parametrize("field", [f.name for f in pb.InterfaceContext.DESCRIPTOR.fields if f.has_presence])
def test_every_optional_interface_field_is_read_by_the_python_reader(field: str) -> None:
    """``_OPTIONAL_INTERFACE_FIELDS`` lists them by hand, in the proto's order (the model's and the compiled
    decoding's, :func:`convert.interface_model_checks`)."""
    assert field in convert._OPTIONAL_INTERFACE_FIELDS, f"InterfaceContext.{field} is not in _OPTIONAL_INTERFACE_FIELDS"


def test_the_python_readers_interface_fields_are_in_the_protos_order() -> None:
    proto_order = [f.name for f in pb.InterfaceContext.DESCRIPTOR.fields if f.has_presence]
    assert [f for f in convert._OPTIONAL_INTERFACE_FIELDS if f in proto_order] == proto_order


#: An outcome with every field of every message it reaches set, each where the model accepts it.
FULL_OUTCOME: pb.OutcomeRequest = every_field_set(
    pb,
    pb.OutcomeRequest.DESCRIPTOR,
    {
        "OutcomeRequest.device_id": "dev-1",
        "OutcomeRequest.decision_id": "d" * 22,
        "OutcomeRequest.loss": 0.01,
        "ServerTransfer.address": "203.0.113.9",
        "ServerPath.loss": 0.01,
        "CongestionMeasurement.algorithm": "cubic",
        "CongestionMeasurement.drop_rate": 0.01,
    },
)
OUTCOME_FIELDS = decoded_fields(
    json_format.MessageToDict(FULL_OUTCOME, preserving_proto_field_name=True), pb.OutcomeRequest.DESCRIPTOR
)


@pytest.mark.parametrize("path", list(OUTCOME_FIELDS))
def test_every_field_of_an_outcome_reaches_the_model(path: str) -> None:
    """``outcome_report`` copies the outcome's fields by hand (``grpc/convert.py``): a field of the proto it misses
    (or the model lacks) is named here, as for the request above."""
    assert OUTCOME_FIELDS[path] is not None, f"{path} was not set: every_field_set"
    read = decoded_fields(convert.outcome_report(FULL_OUTCOME), pb.OutcomeRequest.DESCRIPTOR)
    assert read[path] is not None, f"{path} is set on the wire but grpc/convert.py's outcome_report drops it"


def test_a_compiled_package_of_another_proto_is_a_warning_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed edgepath_native built from another proto (proto edited, wire code regenerated, no rebuild) turns
    the compiled gRPC parts off; the service says so at start at WARNING, naming ``make setup``, not only as the
    start-up line's "no"."""
    assert convert.stale_compiled_wire(installed=True, same_schema=True) is None
    assert convert.stale_compiled_wire(installed=False, same_schema=False) is None  # not installed: the line says so
    note = convert.stale_compiled_wire(installed=True, same_schema=False)
    assert note is not None and "request decoding and reply encoding are off" in note and "`make setup`" in note
    monkeypatch.setattr(convert, "_native_schema", lambda: b"")  # installed, of another schema
    monkeypatch.setattr(convert, "NATIVE_DECODING", False)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("edgepath").addHandler(handler)
    try:
        with running_service():
            pass
    finally:
        logging.getLogger("edgepath").removeHandler(handler)
    assert [r.getMessage() for r in records if "make setup" in r.getMessage()] == [note]
