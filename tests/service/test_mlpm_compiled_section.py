"""The ``scheduler`` section the compiled MLPM engine's plain values go straight into (``edgepath.adapters.mlpm``,
``compiled_decider``), and the one it builds from the request's models with its weights as ``SubflowWeight``
instances (``compiled_model_decider``), against the section of the Python engine's decision: the same section, bit for
bit (``repr`` equal, the same fields set), for any request the service's validation lets through, one by one and in
a batch."""

from __future__ import annotations

from typing import Any

import pytest
from edgepath.adapters import mlpm as adapter
from edgepath.engines import mlpm
from edgepath.settings import Settings
from edgepath.types import ApplicationProfile, RecommendRequest, SubflowWeight
from hypothesis import given, settings
from hypothesis import strategies as st
from native_twin import require_compiled
from pydantic import ConfigDict, Field, field_validator

require_compiled(mlpm.NATIVE_AVAILABLE, "the compiled MLPM")

COMPILED, PYTHON = Settings(native_engines=True), Settings(native_engines=False)
_NAMES = ["wlan0", "wwan0", "eth0", "wlan1"]
_T = st.one_of(st.integers(0, 10**5).map(lambda k: 1.7e12 + 100.0 * k), st.floats(0.0, 1e13))


@st.composite
def _history(draw: Any, name: str) -> dict[str, Any]:
    """One subflow's history in any form the API takes: columns (in time order, as an agent sends, or not),
    sample objects, or nothing, per quantity."""
    h: dict[str, Any] = {"interface": name}
    for objects, times, values, value in (
        ("rtt_samples", "rtt_t_ms", "rtt_ms", st.floats(0.0, 600_000.0)),
        ("throughput_samples", "throughput_t_ms", "throughput_bps", st.floats(0.0, 1e12)),
    ):
        rows = draw(st.lists(st.tuples(_T, value), max_size=30))
        if draw(st.booleans()):
            rows.sort()
        form = draw(st.sampled_from(["columns", "objects", "none"]))
        if form == "columns":
            h[times], h[values] = [t for t, _ in rows], [v for _, v in rows]
        elif form == "objects":
            h[objects] = [{"t_ms": t, values: v} for t, v in rows]
    return h


@st.composite
def _requests(draw: Any) -> RecommendRequest:
    names = draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=4, unique=True))
    interfaces = [
        {"name": n, "access_type": "WIFI" if n.startswith("wlan") else "LTE"}
        | ({"rtt_ms": rtt} if (rtt := draw(st.one_of(st.none(), st.floats(0.0, 600_000.0)))) is not None else {})
        for n in names
    ]
    body: dict[str, Any] = {
        "device_id": "dev-1",
        "interfaces": interfaces,
        "subflow_histories": [draw(_history(n)) for n in names if draw(st.booleans())],
        "application_profile": draw(st.sampled_from(list(ApplicationProfile))),
    }
    if draw(st.booleans()):
        body["kernel"] = {"mptcp_schedulers": draw(st.sampled_from([["default"], ["default", "blest"]]))}
    return RecommendRequest.model_validate(body)


@settings(max_examples=300, deadline=None)
@given(
    request=_requests(),
    classifier=st.sampled_from(["fitted", "hand_set"]),
    window=st.integers(1, 25),
    horizon_s=st.floats(0.0, 10.0),
)
def test_the_compiled_section_is_the_python_engines_section(
    request: RecommendRequest, classifier: str, window: int, horizon_s: float
) -> None:
    mlpm_settings = {"classifier": classifier, "window": window, "horizon_s": horizon_s}
    compiled = Settings(native_engines=True, mlpm=mlpm_settings)
    python = Settings(native_engines=False, mlpm=mlpm_settings)
    want = adapter.scheduler_advice(request, python)
    assert repr(adapter.scheduler_advice(request, compiled)) == repr(want)


@settings(max_examples=30, deadline=None)
@given(requests=st.lists(_requests(), min_size=1, max_size=12))
def test_a_batch_gets_the_sections_of_its_requests(requests: list[RecommendRequest]) -> None:
    """Decided or handed back, each request of a batch gets its own section, in order."""
    want = [repr(adapter.scheduler_advice(r, PYTHON)) for r in requests]
    assert [repr(s) for s in adapter.scheduler_advice_batch(requests, COMPILED)] == want
    assert [repr(s) for s in adapter.scheduler_advice_batch(requests, PYTHON)] == want


def test_an_agents_request_is_decided_by_the_compiled_engine() -> None:
    """Columns in time order with both features: no hand-back (the section comes from ``compiled_decider``)."""
    t = [1.7e12 + 100.0 * i for i in range(20)]
    request = RecommendRequest.model_validate(
        {
            "device_id": "dev-1",
            "interfaces": [{"name": "wlan0", "access_type": "WIFI"}, {"name": "wwan0", "access_type": "LTE"}],
            "subflow_histories": [
                {
                    "interface": n,
                    "rtt_t_ms": t,
                    "rtt_ms": [20.0 + i] * 20,
                    "throughput_t_ms": t,
                    "throughput_bps": [1e7] * 20,
                }
                for i, n in enumerate(["wlan0", "wwan0"])
            ],
        }
    )
    priority = mlpm.PROFILE_PRIORITY[request.application_profile]
    columns, models = adapter._deciders(priority, COMPILED)
    assert models is not None and models(request.interfaces, request.subflow_histories) is not None
    for section in (
        adapter._compiled_section(request, priority, COMPILED, columns),
        adapter._compiled_section(request, priority, COMPILED, columns, models),
    ):
        assert section is not None
        assert repr(section) == repr(adapter.scheduler_advice(request, PYTHON))
        assert section.prioritised_subflow == "wlan0"  # the lower RTT, the same throughput


def _fields_set(section: Any) -> list[set[str]]:
    return [section.model_fields_set, *(w.model_fields_set for w in section.weights)]


@settings(max_examples=300, deadline=None)
@given(request=_requests(), window=st.integers(1, 25), horizon_s=st.floats(0.0, 10.0))
def test_the_section_built_from_the_models_is_the_plain_values_section(
    request: RecommendRequest, window: int, horizon_s: float
) -> None:
    """Where the model decider decides, its section is the one of the plain values' path (``repr``, the fields set,
    the JSON); it hands back every request with a history in the sample-object form."""
    compiled = Settings(native_engines=True, mlpm={"window": window, "horizon_s": horizon_s})
    priority = mlpm.PROFILE_PRIORITY[request.application_profile]
    columns, models = adapter._deciders(priority, compiled)
    assert models is not None
    decided = models(request.interfaces, request.subflow_histories)
    if any(h.rtt_samples or h.throughput_samples for h in request.subflow_histories):
        assert decided is None
    want = adapter._compiled_section(request, priority, compiled, columns)
    if decided is None:
        return
    assert want is not None  # the same engine decides both
    got = adapter._compiled_section(request, priority, compiled, columns, models)
    assert got is not None
    assert all(type(w) is SubflowWeight for w in decided.weights)
    assert repr(got) == repr(want)
    assert _fields_set(got) == _fields_set(want)
    assert got.model_dump_json() == want.model_dump_json()


def test_the_weight_models_checks_are_read_from_the_model() -> None:
    """``weight_model_checks`` reads the weight and score bounds from ``SubflowWeight``; a model with a check the
    build does not make, or another field, gets no builder (pydantic validates every weight)."""
    assert adapter.WEIGHT_MODEL == mlpm.WeightModel(SubflowWeight, (0.0, 1.0), (0.0, 1.0))

    class Narrower(SubflowWeight):
        weight: float = Field(ge=0.0, le=0.5)

    assert adapter.weight_model_checks(Narrower) == mlpm.WeightModel(Narrower, (0.0, 0.5), (0.0, 1.0))

    class Bounded(SubflowWeight):
        rtt_ms: float | None = Field(default=None, ge=0.0)

    class Validated(SubflowWeight):
        @field_validator("interface")
        @classmethod
        def _upper(cls, v: str) -> str:
            return v.upper()

    class NoNaN(SubflowWeight):
        model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    class Extra(SubflowWeight):
        note: str = ""

    class Kept(SubflowWeight):
        model_config = ConfigDict(frozen=True, extra="allow")

    for model in (Bounded, Validated, NoNaN, Extra, Kept):
        assert adapter.weight_model_checks(model) is None, model.__name__


def test_a_weight_outside_the_models_bounds_is_handed_back() -> None:
    """The build makes the model's checks: with a narrower weight bound, a decision with a weight above it is handed
    back (None), for the plain values' path to decide and pydantic to refuse."""

    class Narrower(SubflowWeight):
        weight: float = Field(ge=0.0, le=0.5)

    t = [1.7e12 + 100.0 * i for i in range(20)]
    request = RecommendRequest.model_validate(
        {
            "device_id": "dev-1",
            "interfaces": [{"name": "wlan0", "access_type": "WIFI"}, {"name": "wwan0", "access_type": "LTE"}],
            "subflow_histories": [
                {
                    "interface": n,
                    "rtt_t_ms": t,
                    "rtt_ms": [rtt] * 20,
                    "throughput_t_ms": t,
                    "throughput_bps": [1e7] * 20,
                }
                for n, rtt in (("wlan0", 10.0), ("wwan0", 90.0))
            ],
        }
    )
    args = {"priority": mlpm.Priority.BALANCED}
    wide = mlpm.compiled_model_decider(adapter.WEIGHT_MODEL, **args)  # type: ignore[arg-type]
    narrow = mlpm.compiled_model_decider(adapter.weight_model_checks(Narrower), **args)  # type: ignore[arg-type]
    assert wide is not None and narrow is not None
    decided = wide(request.interfaces, request.subflow_histories)
    assert decided is not None and max(w.weight for w in decided.weights) > 0.5
    assert narrow(request.interfaces, request.subflow_histories) is None
    with pytest.raises(ValueError):
        mlpm.compiled_model_decider(mlpm.WeightModel(SubflowWeight, (0.0, float("nan")), (0.0, 1.0)), **args)


def test_a_compiled_decider_checks_its_arguments_once_and_decides_as_the_python_engine() -> None:
    """``compiled_decider`` (a batch's items of one priority share it): bad arguments are refused when it is made,
    and its decision's numbers are the Python engine's (``decide(native=False)``), bit for bit."""
    for bad in ({"window": 0}, {"horizon_s": float("nan")}, {"gain": 0.0}):
        with pytest.raises(ValueError):
            mlpm.compiled_decider(**bad)
    t = (1.0e12, 1.0e12 + 500.0, 1.0e12 + 1000.0, 1.0e12 + 1500.0)
    subflows = [
        ("wlan0", (t, (20.0, 22.0, 21.0, 25.0), 1000.0), (t, (2e7, 2.1e7, 1.9e7, 2e7), 1000.0), 20.0),
        ("wwan0", (t, (48.0, 45.0, 50.0, 47.0), 1000.0), (t, (5e6, 6e6, 5.5e6, 5e6), 1000.0), None),
    ]
    args = {"priority": mlpm.Priority.LATENCY, "window": 3, "horizon_s": 2.0, "gain": 4.0}
    decided = mlpm.compiled_decider(**args)(subflows)
    histories = [
        mlpm.SubflowHistory(name, mlpm.Columns(*r), mlpm.Columns(*tp), current) for name, r, tp, current in subflows
    ]
    want = mlpm.decide(histories, **args, native=False)
    assert decided is not None
    assert repr([(w, s) for w, s, _, _ in decided.scored]) == repr([(s.weight, s.score) for s in want.subflows])
    assert (subflows[decided.prioritised][0], decided.reason) == (want.prioritised_subflow, want.reason)
