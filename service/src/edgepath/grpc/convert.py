"""Protobuf ⇄ domain-model converters for the gRPC transport.

Messages are turned into plain dicts and validated by the same pydantic models
the REST transport uses, so both reject the same inputs, naming the same field.
Optional proto3 fields are copied only when present (``HasField``).
"""

from __future__ import annotations

from typing import Any

from edgepath.types import AccessType, OutcomeAck, OutcomeReport, Recommendation, RecommendRequest
from edgepath.wire import edgepath_pb2 as pb

ACCESS_FROM_PROTO: dict[int, AccessType] = {
    pb.ACCESS_TYPE_WIFI: AccessType.WIFI,
    pb.ACCESS_TYPE_LTE: AccessType.LTE,
    pb.ACCESS_TYPE_NR: AccessType.NR,
    pb.ACCESS_TYPE_ETHERNET: AccessType.ETHERNET,
}
ACCESS_TO_PROTO: dict[AccessType, int] = {v: k for k, v in ACCESS_FROM_PROTO.items()}

_OPTIONAL_INTERFACE_FIELDS = (
    "wifi_rssi_dbm",
    "link_speed_mbps",
    "frequency_mhz",
    "rsrp_dbm",
    "rsrq_db",
    "sinr_db",
    "cqi",
    "cell_rssi_dbm",
    "rtt_ms",
    "loss",
)


def _interface_dict(msg: pb.InterfaceContext) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": msg.name,
        # Unknown/unspecified enum values stay raw ints so validation names the field.
        "access_type": ACCESS_FROM_PROTO.get(msg.access_type, msg.access_type),
    }
    for name in _OPTIONAL_INTERFACE_FIELDS:
        if msg.HasField(name):
            d[name] = getattr(msg, name)
    return d


def recommend_request(msg: pb.RecommendRequest) -> RecommendRequest:
    """Validate a ``RecommendRequest``; raises ``pydantic.ValidationError``."""
    return RecommendRequest.model_validate(
        {"device_id": msg.device_id, "interfaces": [_interface_dict(i) for i in msg.interfaces]}
    )


def outcome_report(msg: pb.OutcomeRequest) -> OutcomeReport:
    """Validate an ``OutcomeRequest``; raises ``pydantic.ValidationError``."""
    d: dict[str, Any] = {
        "device_id": msg.device_id,
        "decision_id": msg.decision_id,
        "throughput_bps": msg.throughput_bps,
    }
    for name in ("latency_ms", "loss"):
        if msg.HasField(name):
            d[name] = getattr(msg, name)
    return OutcomeReport.model_validate(d)


def recommendation_to_proto(rec: Recommendation) -> pb.Recommendation:
    p = rec.primary_path
    return pb.Recommendation(
        decision_id=rec.decision_id,
        model_version=rec.model_version,
        policy=rec.policy,
        primary_path=pb.PrimaryPath(
            interface=p.interface,
            access_type=ACCESS_TO_PROTO[p.access_type],
            propensity=p.propensity,
            arms=[ACCESS_TO_PROTO[a] for a in p.arms],
        ),
        decided_at_unix_ms=rec.decided_at_unix_ms,
    )


def ack_to_proto(ack: OutcomeAck) -> pb.OutcomeAck:
    return pb.OutcomeAck(
        decision_id=ack.decision_id, accepted=ack.accepted, duplicate=ack.duplicate, reward=ack.reward
    )
