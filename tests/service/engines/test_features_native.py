"""The compiled context encoder (service/native, ``edgepath_native``) against its reference,
:func:`edgepath.engines.features.context_features`.

The Python encoder is the reference: the compiled one must lay the vector out alike (the same column names) and give
the same vector bit for bit (``tobytes`` equal: ``-0.0`` against ``0.0`` would show) and the same representative
interfaces, on everything the service's validation lets through.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from edgepath.engines import features
from edgepath.engines.primary_path import arm_set
from edgepath.types import AccessType, InterfaceContext
from hypothesis import given, settings
from hypothesis import strategies as st
from native_twin import require_compiled

compiled_part = require_compiled(features.NATIVE_AVAILABLE, "the compiled context encoder")


def _measurement(field: str) -> st.SearchStrategy[Any]:
    """Any value ``InterfaceContext`` accepts for ``field`` (its bounds, read from the model), often None."""
    info = InterfaceContext.model_fields[field]
    lo = next(m.ge for m in info.metadata if hasattr(m, "ge"))
    hi = next(m.le for m in info.metadata if hasattr(m, "le"))
    if field == "cqi":
        return st.one_of(st.none(), st.integers(int(lo), int(hi)))
    edges = st.sampled_from([lo, hi, 0.0 if lo <= 0.0 <= hi else lo, (lo + hi) / 2])
    return st.one_of(st.none(), st.floats(lo, hi), edges)


_MEASURED = {name: _measurement(name) for name in InterfaceContext.model_fields if name not in ("name", "access_type")}


@st.composite
def _interfaces(draw: Any) -> list[InterfaceContext]:
    n = draw(st.integers(1, 5))
    return [
        InterfaceContext(
            name=f"if{i}",
            access_type=draw(st.sampled_from(list(AccessType))),
            **{k: v for k, s in _MEASURED.items() if (v := draw(s)) is not None},
        )
        for i in range(n)
    ]


def test_the_layouts_agree() -> None:
    names, attrs = features._native_layout()
    assert tuple(names) == features.FEATURE_NAMES
    assert set(attrs) == set(InterfaceContext.model_fields) - {"name", "access_type"}  # every measurement, once


@settings(max_examples=500, deadline=None)
@given(interfaces=_interfaces())
def test_the_compiled_encoder_encodes_as_the_python_encoder(interfaces: list[InterfaceContext]) -> None:
    encoded = features.native_features(interfaces)
    assert encoded is not None  # validated contexts are never handed back
    got, reps, arms = encoded
    want = features.context_features(interfaces, native=False)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
    want_reps = [features.representative(interfaces, slot) for slot in features.SLOTS]
    assert all(a is b for a, b in zip(reps, want_reps, strict=True))  # the very interface objects
    assert arms == arm_set(interfaces) and all(a is b for a, b in zip(arms, arm_set(interfaces), strict=True))
    assert features.context_features(interfaces).tobytes() == want.tobytes()  # the default path


@settings(max_examples=100, deadline=None)
@given(contexts=st.lists(_interfaces(), min_size=1, max_size=8))
def test_a_batch_is_encoded_row_by_row_as_one_context(contexts: list[list[InterfaceContext]]) -> None:
    encoded = features.native_features_batch(contexts)
    assert encoded is not None
    X, reps, arms = encoded
    assert X.shape == (len(contexts), features.N_FEATURES) and X.dtype == np.float64 and X.flags.c_contiguous
    for i, interfaces in enumerate(contexts):
        one = features.native_features(interfaces)
        assert one is not None
        assert X[i].tobytes() == one[0].tobytes() == features.context_features(interfaces, native=False).tobytes()
        assert all(a is b for a, b in zip(reps[i], one[1], strict=True)) and arms[i] == one[2]


class _Interface:
    """An object with an interface's attributes, not the model (what the encoder must still read, or hand back)."""

    def __init__(self, **values: Any) -> None:
        self.name = "if0"
        for attr in features._native_layout()[1]:
            setattr(self, attr, None)
        self.__dict__.update(values)


def test_what_the_encoder_cannot_read_is_handed_back() -> None:
    """Any object with the attributes is read as the model is; an access type outside ``SLOTS``, a missing
    attribute or a value that is not a number hand the whole context (and a batch holding it) back, for the
    Python encoder to raise on or encode as before."""
    plain = _Interface(access_type=AccessType.WIFI, wifi_rssi_dbm=-61.5, cqi=None)
    model = InterfaceContext(name="if0", access_type=AccessType.WIFI, wifi_rssi_dbm=-61.5)
    encoded = features.native_features([plain])
    assert encoded is not None and encoded[0].tobytes() == features.context_features([model], native=False).tobytes()
    with_int = features.native_features([_Interface(access_type=AccessType.LTE, rsrp_dbm=-95, cqi=11)])
    as_float = features.native_features([_Interface(access_type=AccessType.LTE, rsrp_dbm=-95.0, cqi=11.0)])
    assert with_int is not None and as_float is not None and with_int[0].tobytes() == as_float[0].tobytes()
    missing = _Interface(access_type=AccessType.LTE)
    del missing.rsrq_db
    unknown = [
        [_Interface(access_type="WIFI", wifi_rssi_dbm=-50.0)],  # the value, not the member: no slot by identity
        [missing],
        [_Interface(access_type=AccessType.NR, sinr_db="12")],
        [_Interface(access_type=AccessType.WIFI), object()],
    ]
    for interfaces in unknown:
        assert features.native_features(interfaces) is None
        assert features.native_features_batch([[plain], interfaces]) is None
    # the default path then gives what the reference gives (its getters read a missing attribute as not reported)
    assert (
        features.context_features([missing]).tobytes() == features.context_features([missing], native=False).tobytes()
    )


def test_an_overflowing_power_is_handed_back_to_the_python_encoder() -> None:
    """Past validation (``model_construct``), an SINR whose 10^(SINR/10) overflows: Python raises OverflowError,
    the compiled encoder hands the context back rather than encoding an infinity."""
    hot = InterfaceContext.model_construct(
        name="wwan0", access_type=AccessType.LTE, sinr_db=4000.0, channel_bandwidth_mhz=20.0
    )
    assert features.native_features([hot]) is None
    with pytest.raises(OverflowError):
        features.context_features([hot])


def test_the_vector_is_a_writable_float64_array() -> None:
    x = features.context_features([InterfaceContext(name="wlan0", access_type=AccessType.WIFI, wifi_rssi_dbm=-50.0)])
    assert isinstance(x, np.ndarray) and x.flags.writeable and x.shape == (features.N_FEATURES,)
    x[0] = 2.0  # callers may own it (e.g. a training row)
