"""Input validation: physical ranges (read from the models, so a changed range is still tested), sizes, message size.

Every ranged measurement must be documented in the ``types`` module docstring,
reject values just outside its range, NaN and infinities, and name itself in the
error. Sizes are bounded (interfaces, names, identifiers) and so are whole
messages on both transports.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterator
from typing import Any

import edgepath.types as types
import grpc
import httpx
import pytest
from annotated_types import Ge, Gt, Le, Lt
from edge_security_helpers import RECOMMEND, context_body, grpc_unary, running_service
from edgepath.types import InterfaceContext, OutcomeReport, RecommendRequest
from edgepath.wire import edgepath_pb2 as pb
from pydantic import ValidationError


def _ranged_fields(model: type[Any]) -> list[tuple[str, float | None, float | None]]:
    out = []
    for name, info in model.model_fields.items():
        lo = hi = None
        for m in info.metadata:
            if isinstance(m, (Ge, Gt)):
                lo = float(m.ge if isinstance(m, Ge) else m.gt)
            if isinstance(m, (Le, Lt)):
                hi = float(m.le if isinstance(m, Le) else m.lt)
        if lo is not None or hi is not None:
            out.append((name, lo, hi))
    return out


INTERFACE_RANGES = _ranged_fields(InterfaceContext)
OUTCOME_RANGES = [r for r in _ranged_fields(OutcomeReport)]


def test_every_ranged_measurement_is_documented() -> None:
    doc = types.__doc__ or ""
    for name, _, _ in INTERFACE_RANGES + OUTCOME_RANGES:
        assert name in doc, f"{name}: range not documented in the types module docstring"


def _bad_values(lo: float | None, hi: float | None, integer: bool) -> list[Any]:
    step = 1 if integer else 1e-6
    bad: list[Any] = []
    if lo is not None:
        bad.append(lo - step if integer else lo - max(step, abs(lo) * 1e-9))
    if hi is not None:
        bad.append(hi + step if integer else hi + max(step, abs(hi) * 1e-9))
    if not integer:
        bad += [math.nan, math.inf, -math.inf]
    return bad


def _is_integer(annotation: Any) -> bool:
    """``int``, ``int | None`` or either with metadata (``Annotated[int, JSON_INTEGER] | None``: types.Integer)."""
    for arg in typing.get_args(annotation) or (annotation,):
        if typing.get_origin(arg) is typing.Annotated:
            arg = typing.get_args(arg)[0]
        if arg is int:
            return True
    return False


@pytest.mark.parametrize(("field", "lo", "hi"), INTERFACE_RANGES, ids=[r[0] for r in INTERFACE_RANGES])
def test_interface_measurement_out_of_range_names_the_field(field: str, lo: float | None, hi: float | None) -> None:
    integer = _is_integer(InterfaceContext.model_fields[field].annotation)
    for value in _bad_values(lo, hi, integer):
        body = context_body("dev-a")
        body["interfaces"][0][field] = value
        with pytest.raises(ValidationError) as err:
            RecommendRequest.model_validate(body)
        locs = [".".join(str(p) for p in e["loc"]) for e in err.value.errors()]
        assert f"interfaces.0.{field}" in locs, (value, locs)
    if lo is not None and hi is not None:  # both ends are inclusive or exclusive as declared; the middle is valid
        body = context_body("dev-a")
        mid = (lo + hi) / 2
        body["interfaces"][0][field] = round(mid) if integer else mid
        RecommendRequest.model_validate(body)


@pytest.mark.parametrize(("field", "lo", "hi"), OUTCOME_RANGES, ids=[r[0] for r in OUTCOME_RANGES])
def test_outcome_value_out_of_range_names_the_field(field: str, lo: float | None, hi: float | None) -> None:
    for value in _bad_values(lo, hi, integer=False):
        body: dict[str, Any] = {"device_id": "dev-a", "decision_id": "abc", "throughput_bps": 1.0, field: value}
        with pytest.raises(ValidationError) as err:
            OutcomeReport.model_validate(body)
        assert (field,) in [tuple(e["loc"]) for e in err.value.errors()]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b.update(interfaces=b["interfaces"] * 9), "interfaces"),  # 18 > MAX_INTERFACES
        (lambda b: b["interfaces"][0].update(name="w" * (types.MAX_NAME_LEN + 1)), "interfaces.0.name"),
        (lambda b: b["interfaces"][0].update(name="../../etc"), "interfaces.0.name"),
        (lambda b: b["interfaces"][0].update(name="wlan0 up"), "interfaces.0.name"),
        (lambda b: b.update(device_id="d" * 129), "device_id"),
        (lambda b: b.update(device_id="dev\nINFO forged log line"), "device_id"),
        (lambda b: b.update(interfaces=[]), "interfaces"),
        (lambda b: b.update(unexpected=1), "unexpected"),
    ],
    ids=["too-many-interfaces", "long-name", "path-name", "space-name", "long-id", "newline-id", "none", "extra"],
)
def test_sizes_and_identifiers_are_bounded(mutate: Any, field: str) -> None:
    body = context_body("dev-a")
    mutate(body)
    with pytest.raises(ValidationError) as err:
        RecommendRequest.model_validate(body)
    assert field in [".".join(str(p) for p in e["loc"]) for e in err.value.errors()]


def test_decision_ids_are_url_safe_tokens_only() -> None:
    with pytest.raises(ValidationError):
        OutcomeReport.model_validate({"device_id": "d", "decision_id": "x' OR 1=1", "throughput_bps": 1.0})


@pytest.fixture(scope="module")
def small_messages() -> Iterator[Any]:
    with running_service(max_message_bytes=4096) as svc:
        yield svc


def test_rest_body_larger_than_the_limit_is_413(small_messages: Any) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{small_messages.http_port}", timeout=5.0) as http:
        big = context_body("dev-a")
        big["interfaces"][0]["name"] = "w" * 8000
        assert http.post("/v1/recommendations", json=big).status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: the streamed bytes are counted
            yield b'{"device_id": "dev-a", "interfaces": ['
            for _ in range(400):
                yield b'{"name": "wlan0", "access_type": "WIFI"},'
            yield b"]}"

        resp = http.post("/v1/recommendations", content=chunks(), headers={"Content-Type": "application/json"})
        assert resp.status_code in (400, 413)
        assert http.post("/v1/recommendations", json=context_body("dev-a")).status_code == 200


def test_grpc_message_larger_than_the_limit_is_refused(small_messages: Any) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{small_messages.grpc_port}") as channel:
        big = pb.RecommendRequest(
            device_id="dev-a", interfaces=[pb.InterfaceContext(name="w" * 8000, access_type=pb.ACCESS_TYPE_WIFI)]
        )
        code, _, _, _ = grpc_unary(channel, RECOMMEND, big.SerializeToString())
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        ok = pb.RecommendRequest(
            device_id="dev-a", interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI)]
        )
        assert grpc_unary(channel, RECOMMEND, ok.SerializeToString())[0] == grpc.StatusCode.OK


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_both_transports_name_the_field(small_messages: Any, transport: str) -> None:
    body = context_body("dev-a")
    body["interfaces"][1]["rsrp_dbm"] = -20.0
    if transport == "rest":
        with httpx.Client(base_url=f"http://127.0.0.1:{small_messages.http_port}", timeout=5.0) as http:
            resp = http.post("/v1/recommendations", json=body)
        assert resp.status_code == 422 and resp.json()["field"] == "interfaces[1].rsrp_dbm"
    else:
        msg = pb.RecommendRequest(
            device_id="dev-a",
            interfaces=[
                pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI),
                pb.InterfaceContext(name="wwan0", access_type=pb.ACCESS_TYPE_LTE, rsrp_dbm=-20.0),
            ],
        )
        with grpc.insecure_channel(f"127.0.0.1:{small_messages.grpc_port}") as channel:
            code, _, details, _ = grpc_unary(channel, RECOMMEND, msg.SerializeToString())
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("interfaces[1].rsrp_dbm")
