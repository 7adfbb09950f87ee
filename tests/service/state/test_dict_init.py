"""``edgepath.state.base.dict_init``: a frozen dataclass's ``__init__`` that sets the instance's ``__dict__`` at once
(issue 16) makes the instance the dataclass's own ``__init__`` makes, with the same signature, defaults and errors."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field

import pytest
from edgepath.state.base import DecisionRecord, dict_init


@dataclass(frozen=True)
class _Reference:
    a: int
    b: str
    c: tuple[float, ...] = ()
    d: int | None = None


@dict_init
@dataclass(frozen=True)
class _Fast:
    a: int
    b: str
    c: tuple[float, ...] = ()
    d: int | None = None


def test_the_instance_is_the_dataclasses_own() -> None:
    for args, kwargs in (((1, "x"), {}), ((1,), {"b": "y", "d": 4}), ((), {"a": 2, "b": "z", "c": (1.5,)})):
        ref, fast = _Reference(*args, **kwargs), _Fast(*args, **kwargs)
        assert list(fast.__dict__.items()) == list(ref.__dict__.items())  # every field, in field order
        assert repr(fast) == repr(ref).replace("_Reference", "_Fast")
        assert hash(fast) == hash(_Fast(*args, **kwargs)) and fast == _Fast(*args, **kwargs)
    assert inspect.signature(_Fast) == inspect.signature(_Reference)
    fast = _Fast(1, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.a = 2  # type: ignore[misc]
    assert dataclasses.replace(fast, d=7) == _Fast(1, "x", (), 7)
    for bad_args, bad_kwargs in (((1,), {}), ((1, "x"), {"e": 1}), ((1, "x", (), None, 5), {})):
        with pytest.raises(TypeError):
            _Reference(*bad_args, **bad_kwargs)
        with pytest.raises(TypeError):
            _Fast(*bad_args, **bad_kwargs)


def test_decision_records_keep_the_dataclass_signature() -> None:
    """``DecisionRecord``'s fields, defaults and order are those a plain frozen dataclass of its fields takes."""
    plain = dataclasses.make_dataclass(
        "DecisionRecord",
        [(f.name, f.type, field(default=f.default)) for f in dataclasses.fields(DecisionRecord)],
        frozen=True,
    )
    assert inspect.signature(DecisionRecord) == inspect.signature(plain)


def test_what_it_would_skip_is_refused() -> None:
    @dataclass
    class Mutable:
        a: int

    @dataclass(frozen=True)
    class Factory:
        a: list[int] = field(default_factory=list)

    @dataclass(frozen=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True)
    class Slotted:
        a: int

    @dataclass(frozen=True)
    class NotInit:
        a: int = field(default=0, init=False)

    for cls in (Mutable, Factory, PostInit, Slotted, NotInit):
        with pytest.raises(TypeError):
            dict_init(cls)
