"""The one proto enum ⇄ REST spelling normaliser of the service.

A proto3 enum value is its REST spelling behind the enum's prefix (the protobuf style guide and
``buf lint`` rule ENUM_VALUE_PREFIX): ``ACCESS_TYPE_WIFI`` ⇄ ``"WIFI"``,
``APPLICATION_PROFILE_BULK`` ⇄ ``"BULK"``. Both directions are derived here from the generated
enum descriptor and the core's string enum, so no hand-written table can drift from the proto
(tests/service/test_wire_enums.py fails if a second table appears in the service).
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, TypeVar

E = TypeVar("E", bound=Enum)


def enum_prefix(pb_enum: Any) -> str:
    """``"ACCESS_TYPE_"`` for the proto enum ``AccessType`` (``pb_enum``: a generated enum wrapper)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", pb_enum.DESCRIPTOR.name).upper() + "_"


def rest_name(pb_enum: Any, number: int) -> str | None:
    """REST spelling of the proto enum value ``number`` (``None`` for a number the proto does not define)."""
    value = pb_enum.DESCRIPTOR.values_by_number.get(number)
    return None if value is None else value.name.removeprefix(enum_prefix(pb_enum))


def from_proto_map(py_enum: type[E], pb_enum: Any) -> dict[int, E]:
    """``{proto number: core enum member}`` for every value both define (``*_UNSPECIFIED`` included when the
    core enum has ``UNSPECIFIED``)."""
    members = {m.value: m for m in py_enum}
    out: dict[int, E] = {}
    for number in pb_enum.DESCRIPTOR.values_by_number:
        name = rest_name(pb_enum, number)
        if name in members:
            out[number] = members[name]
    return out


def to_proto_map(py_enum: type[E], pb_enum: Any) -> dict[E, int]:
    """``{core enum member: proto number}``.

    Raises
    ------
    ValueError
        When a member of ``py_enum`` has no proto value (the proto and the core types disagree).
    """
    out = {member: number for number, member in from_proto_map(py_enum, pb_enum).items()}
    missing = [m.value for m in py_enum if m not in out]
    if missing:
        raise ValueError(f"{py_enum.__name__} members {missing} have no value in proto enum {pb_enum.DESCRIPTOR.name}")
    return out


def proto_number(pb_enum: Any, name: str) -> int:
    """Proto number of the REST spelling ``name`` (``"WIFI"`` → ``ACCESS_TYPE_WIFI`` = 1).

    Raises
    ------
    ValueError
        When the proto enum has no such value.
    """
    try:
        return int(pb_enum.Value(enum_prefix(pb_enum) + name))
    except ValueError:
        raise ValueError(f"{name!r} is not a value of proto enum {pb_enum.DESCRIPTOR.name}") from None
