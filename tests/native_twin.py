"""Where the compiled twins' test modules run (service/native, the ``edgepath_native`` package; issue 16).

A module of this name, not a ``conftest.py`` helper: several directories have a ``conftest.py`` (see
``service_harness``).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import strategies as st


def require_compiled(installed: bool, what: str) -> Any:
    """Call at a test module's top, binding what it returns to a module name (``compiled_part =
    require_compiled(...)``: an autouse fixture, which pytest finds there). Nothing where ``installed``; else every
    test of the module fails where cargo is on this machine (``make setup`` builds the package, so its absence, or a
    build from another proto, is a broken setup), and the module is skipped, saying why, where there is no Rust
    toolchain to build it. Each test fails, not the module's import: a failure at import is a collection error,
    which interrupts the whole run. ``what``: the compiled part, for the message."""
    if not installed and shutil.which("cargo") is None:
        pytest.skip("edgepath_native is not built: no Rust toolchain (cargo) on this machine", allow_module_level=True)
    missing = (
        None
        if installed
        else f"{what} is not installed (or does not match this checkout) though cargo is: `make setup` builds it "
        "from service/native"
    )

    @pytest.fixture(autouse=True)
    def compiled_part() -> None:
        if missing is not None:
            pytest.fail(missing, pytrace=False)

    return compiled_part


def compiled_package() -> Any:
    """The ``edgepath_native`` module, or None where it is not importable (its tests then fail or are skipped by
    :func:`require_compiled`)."""
    try:
        import edgepath_native
    except ImportError:
        return None
    return edgepath_native


def messages(
    module: ModuleType, descriptor: Descriptor, scalars: Mapping[int, st.SearchStrategy[Any]]
) -> st.SearchStrategy[Any]:
    """Any message of ``descriptor`` (its class from the generated ``module``), drawn from the proto's own
    descriptors: each field absent, empty or set (repeated: up to 3 items, doubles up to 24), scalars from
    ``scalars[field type]``. A field added to the proto is drawn without a test changing."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in descriptor.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            value: st.SearchStrategy[Any] = st.deferred(lambda f=f: messages(module, f.message_type, scalars))
        else:
            value = scalars[f.type]
        if f.is_repeated:
            size = 24 if f.type == FieldDescriptor.TYPE_DOUBLE else 3
            fields[f.name] = st.lists(value, max_size=size)
        elif f.has_presence:
            fields[f.name] = st.none() | value
        else:
            fields[f.name] = value
    cls = getattr(module, descriptor.name)

    def build(values: dict[str, Any]) -> Any:
        msg = cls()
        for f in descriptor.fields:
            v = values[f.name]
            if f.is_repeated:
                getattr(msg, f.name).extend(v)
            elif f.type == FieldDescriptor.TYPE_MESSAGE:
                if v is not None:
                    getattr(msg, f.name).CopyFrom(v)
            elif v is not None:
                setattr(msg, f.name, v)
        return msg

    return st.fixed_dictionaries(fields).map(build)


#: A set value of each scalar type, for :func:`every_field_set` (an enum: its first value after the zero one).
_SET_VALUES: dict[int, Any] = {
    FieldDescriptor.TYPE_DOUBLE: 1.0,
    FieldDescriptor.TYPE_INT32: 1,
    FieldDescriptor.TYPE_INT64: 1,
    FieldDescriptor.TYPE_BOOL: True,
    FieldDescriptor.TYPE_STRING: "wlan0",
    FieldDescriptor.TYPE_ENUM: 1,
}


def every_field_set(module: ModuleType, descriptor: Descriptor, values: Mapping[str, Any] | None = None) -> Any:
    """A message of ``descriptor`` with every field set, drawn from the proto's own descriptors (a field added to
    the proto is set without a test changing): each scalar to :data:`_SET_VALUES`' value of its type, or to
    ``values["Message.field"]`` where given; each repeated field to one item; each message field to a message with
    every field set (repeated: one)."""
    values = values or {}
    msg = getattr(module, descriptor.name)()
    for f in descriptor.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            sub = every_field_set(module, f.message_type, values)
            (getattr(msg, f.name).append if f.is_repeated else getattr(msg, f.name).CopyFrom)(sub)
            continue
        value = values.get(f"{descriptor.name}.{f.name}", _SET_VALUES[f.type])
        if f.is_repeated:
            getattr(msg, f.name).append(value)
        else:
            setattr(msg, f.name, value)
    return msg


def decoded_fields(decoded: Any, descriptor: Descriptor, path: str = "") -> dict[str, Any]:
    """Every field of ``descriptor`` (nested messages' too, a repeated one's first item) as the decoded plain values
    ``decoded`` hold it, by its path (``interfaces[0].cqi``); None where they lack it. A model instance (what the
    compiled decoding builds where it can) counts with the fields it was given, as its plain values would."""
    out: dict[str, Any] = {}
    for f in descriptor.fields:
        if isinstance(decoded, dict):
            value = decoded.get(f.name)
        else:  # a model instance
            value = getattr(decoded, f.name) if f.name in decoded.model_fields_set else None
        where = f"{path}{f.name}"
        if f.type == FieldDescriptor.TYPE_MESSAGE and value is not None:
            if f.is_repeated:
                out[where] = len(value)
                if value:
                    out.update(decoded_fields(value[0], f.message_type, f"{where}[0]."))
            else:
                out[where] = True
                out.update(decoded_fields(value, f.message_type, f"{where}."))
        else:
            out[where] = value
    return out
