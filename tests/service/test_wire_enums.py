"""The service's one proto enum ⇄ REST spelling normaliser (issue 14, item 4).

Every proto enum value maps to the core enum member of the same REST spelling and back, and no
second, hand-written spelling table exists in the service, the load test or the agent: the proto
names (``ACCESS_TYPE_…``, ``APPLICATION_PROFILE_…``) appear only in the generated wire code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from edgepath.grpc import convert, enums
from edgepath.types import AccessType, ApplicationProfile
from edgepath.wire import edgepath_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("py_enum", "pb_enum"), [(AccessType, pb.AccessType), (ApplicationProfile, pb.ApplicationProfile)]
)
def test_every_core_member_round_trips_through_its_proto_value(py_enum, pb_enum) -> None:
    to_proto = enums.to_proto_map(py_enum, pb_enum)
    from_proto = enums.from_proto_map(py_enum, pb_enum)
    for member in py_enum:
        number = to_proto[member]
        assert pb_enum.Name(number) == enums.enum_prefix(pb_enum) + member.value
        assert from_proto[number] is member
        assert enums.proto_number(pb_enum, member.value) == number
    assert enums.rest_name(pb_enum, 999) is None
    with pytest.raises(ValueError, match="not a value"):
        enums.proto_number(pb_enum, "TELEPORT")


def test_the_grpc_converter_uses_the_derived_maps() -> None:
    assert convert.ACCESS_TO_PROTO == enums.to_proto_map(AccessType, pb.AccessType)
    assert convert.PROFILE_FROM_PROTO == enums.from_proto_map(ApplicationProfile, pb.ApplicationProfile)


def test_a_core_member_without_a_proto_value_is_refused() -> None:
    import enum

    class Extra(str, enum.Enum):
        WIFI = "WIFI"
        SATELLITE = "SATELLITE"

    with pytest.raises(ValueError, match="SATELLITE"):
        enums.to_proto_map(Extra, pb.AccessType)


PROTO_SPELLING = re.compile(r"\b(ACCESS_TYPE|APPLICATION_PROFILE)_[A-Z]")
#: The one normaliser per package (each derives the names from the descriptors; their docstrings spell examples).
ALLOWED = {ROOT / "service/src/edgepath/grpc/enums.py", ROOT / "client-agent/src/edgepath_agent/messages.py"}


def test_no_second_enum_spelling_table_in_runtime_code() -> None:
    offenders = []
    for base in ("service/src", "client-agent/src", "loadtest"):
        for path in (ROOT / base).rglob("*.py"):
            if "wire" in path.relative_to(ROOT / base).parts or path in ALLOWED:
                continue
            if PROTO_SPELLING.search(path.read_text()):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == [], f"proto enum names spelled outside the normalisers: {offenders}"
