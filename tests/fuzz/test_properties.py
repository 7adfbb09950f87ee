"""Hypothesis properties of the converters and engines.

* Converters: any protobuf ``RecommendRequest`` / ``OutcomeRequest`` (random
  fields drawn from the message descriptors, so new proto fields are covered
  automatically; NaN, infinities, extreme integers, unknown enum values, long
  strings) either converts or raises ``pydantic.ValidationError`` — nothing else.
  The same holds for the domain models fed arbitrary JSON.
* Primary-path bandit: for any valid context the decision names one of the
  device's interfaces and its propensity is in (0, 1].
* MLPM scheduler weights: for any histories the weights are in [0, 1] and sum to 1.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit
from edgepath.engines.reward import bernoulli_reward
from edgepath.grpc import convert
from edgepath.types import AccessType, InterfaceContext, OutcomeReport, RecommendRequest
from edgepath.wire import edgepath_pb2 as pb
from fuzz_helpers import fuzz_settings
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

SETTINGS = fuzz_settings(200)  # EDGEPATH_FUZZ_EXAMPLES / EDGEPATH_FUZZ_SEED: nightly-sized runs

_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, -1.0, 1.0, -60.0, -200.0, 1e12, 1e308, 5e-324, math.nan, math.inf, -math.inf]),
)
_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    t = field.type
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _FLOATS
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return st.one_of(st.integers(lo, hi), st.integers(-3, 20).filter(lambda v: lo <= v <= hi))
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == FieldDescriptor.TYPE_STRING:
        return st.one_of(st.text(max_size=80), st.sampled_from(["", "wlan0", "wwan0", "dev-1", "x" * 200]))
    if t == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=32)
    if t == FieldDescriptor.TYPE_ENUM:
        return st.integers(-2, len(field.enum_type.values) + 2)
    raise AssertionError(f"unhandled field type {t}")


@st.composite
def proto_message(draw: st.DrawFn, descriptor: Descriptor, depth: int = 0) -> Any:
    """A message of ``descriptor`` with a random subset of its fields set to random values."""
    msg = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if not draw(st.booleans()):
            continue
        is_repeated = field.is_repeated
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth >= 3:
                continue
            if is_repeated:
                for sub in draw(st.lists(proto_message(field.message_type, depth + 1), max_size=3)):
                    getattr(msg, field.name).add().CopyFrom(sub)
            else:
                getattr(msg, field.name).CopyFrom(draw(proto_message(field.message_type, depth + 1)))
        elif is_repeated:
            getattr(msg, field.name).extend(draw(st.lists(_scalar(field), max_size=4)))
        else:
            setattr(msg, field.name, draw(_scalar(field)))
    return msg


@given(msg=proto_message(pb.RecommendRequest.DESCRIPTOR))
@SETTINGS
def test_recommend_converter_raises_only_validation_errors(msg: Any) -> None:
    try:
        req = convert.recommend_request(msg)
    except ValidationError as exc:
        assert exc.errors(), "a ValidationError names at least one field"
        return
    assert isinstance(req, RecommendRequest)
    assert 1 <= len(req.interfaces)


@given(msg=proto_message(pb.OutcomeRequest.DESCRIPTOR))
@SETTINGS
def test_outcome_converter_raises_only_validation_errors(msg: Any) -> None:
    try:
        report = convert.outcome_report(msg)
    except ValidationError:
        return
    assert isinstance(report, OutcomeReport)
    assert math.isfinite(report.throughput_bps) and report.throughput_bps >= 0


_JSON = st.recursive(
    st.none() | st.booleans() | _FLOATS | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


@st.composite
def request_like(draw: st.DrawFn) -> Any:
    """JSON shaped roughly like a RecommendRequest (so validation goes deep), or anything."""
    iface = st.fixed_dictionaries(
        {"name": st.text(max_size=70), "access_type": st.sampled_from(["WIFI", "LTE", "NR", "ETHERNET", "X", 1])},
        optional={
            k: _FLOATS for k in ("wifi_rssi_dbm", "link_speed_mbps", "rsrp_dbm", "rsrq_db", "sinr_db", "rtt_ms", "loss")
        },
    )
    shaped = st.fixed_dictionaries(
        {"device_id": st.text(max_size=140), "interfaces": st.lists(iface, max_size=18)},
        optional={"extra": _JSON},
    )
    return draw(st.one_of(shaped, _JSON))


@given(body=request_like())
@SETTINGS
def test_domain_model_raises_only_validation_errors(body: Any) -> None:
    try:
        RecommendRequest.model_validate(body)
    except ValidationError:
        pass


_INTERFACE = st.builds(
    InterfaceContext,
    name=st.sampled_from(["wlan0", "wlan1", "wwan0", "wwan1", "eth0", "usb0"]),
    access_type=st.sampled_from(list(AccessType)),
    wifi_rssi_dbm=st.none() | st.floats(-127, 0),
    link_speed_mbps=st.none() | st.floats(0, 100_000),
    rsrp_dbm=st.none() | st.floats(-156, -31),
    rsrq_db=st.none() | st.floats(-34, 2.5),
    cqi=st.none() | st.integers(0, 15),
    rtt_ms=st.none() | st.floats(0, 600_000),
    loss=st.none() | st.floats(0, 1),
)
_BANDIT = PrimaryPathBandit(BanditConfig(seed=0))


@given(interfaces=st.lists(_INTERFACE, min_size=1, max_size=6, unique_by=lambda i: i.name))
@SETTINGS
def test_bandit_propensity_in_unit_interval_and_interface_offered(interfaces: list[InterfaceContext]) -> None:
    choice = _BANDIT.decide(interfaces)
    assert 0.0 < choice.propensity <= 1.0
    assert choice.interface in {i.name for i in interfaces}
    assert choice.access_type in {i.access_type for i in interfaces}
    assert all(math.isfinite(v) for v in choice.features)


@given(
    throughput=st.floats(0, 1e12),
    latency=st.none() | st.floats(0, 600_000),
    thr=st.floats(0, 1e10),
    lat=st.floats(0, 1e4),
)
@SETTINGS
def test_reward_is_bernoulli(throughput: float, latency: float | None, thr: float, lat: float) -> None:
    r = bernoulli_reward(throughput, latency, throughput_threshold_bps=thr, latency_threshold_ms=lat)
    assert r in (0, 1)


mlpm = pytest.importorskip("edgepath.engines.mlpm", reason="MLPM engine (issue 3) not present")

# Within what the wire admits (types.py: timestamps, rtt_ms <= 600000, throughput_bps <= 1e12), plus
# non-finite values, which the engine documents as ignored.
_T_S = st.floats(0, 1e11)
_RTT = st.lists(st.tuples(_T_S, st.floats(0, 600_000) | st.sampled_from([math.nan, math.inf])), max_size=25)
_TPUT = st.lists(st.tuples(_T_S, st.floats(0, 1e12) | st.sampled_from([math.nan, math.inf])), max_size=25)


@given(
    histories=st.lists(
        st.tuples(st.sampled_from(["wlan0", "wwan0", "eth0", "usb0"]), _RTT, _TPUT, st.none() | st.floats(0, 600_000)),
        max_size=4,
        unique_by=lambda h: h[0],
    ),
    priority=st.sampled_from(list(mlpm.Priority)),
    horizon_s=st.floats(0, 600),
    gain=st.floats(1e-3, 1000),
)
@SETTINGS
def test_mlpm_weights_sum_to_one(histories: list[Any], priority: Any, horizon_s: float, gain: float) -> None:
    subflows = [
        mlpm.SubflowHistory(
            interface=name,
            rtt_ms=[mlpm.Sample(t, v) for t, v in rtt],
            throughput_bps=[mlpm.Sample(t, v) for t, v in tput],
            current_rtt_ms=current,
        )
        for name, rtt, tput, current in histories
    ]
    result = mlpm.decide(subflows, priority=priority, horizon_s=horizon_s, gain=gain)
    weights = [s.weight for s in result.subflows]
    if not subflows:
        assert weights == []
        return
    assert all(0.0 <= w <= 1.0 and math.isfinite(w) for w in weights)
    assert math.isclose(sum(weights), 1.0, abs_tol=1e-9)
    assert result.prioritised_subflow in {s.interface for s in subflows}
