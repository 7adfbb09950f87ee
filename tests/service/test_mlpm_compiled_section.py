"""The ``scheduler`` section the compiled MLPM engine's plain values go straight into (``edgepath.adapters.mlpm``,
``compiled_decider``), and the one it builds from the request's models (a ``SchedulerAdvice`` with its weights as
``SubflowWeight`` instances, ``compiled_section_decider``), against the section of the Python engine's decision: the
same section, bit for bit (``repr`` equal, the same fields set), for any request the service's validation lets
through, one by one and in a batch."""

from __future__ import annotations

import math
from typing import Any

import pytest
from edgepath.adapters import mlpm as adapter
from edgepath.engines import mlpm
from edgepath.settings import Settings
from edgepath.types import ApplicationProfile, RecommendRequest, SchedulerAdvice, SubflowWeight
from hypothesis import given, settings
from hypothesis import strategies as st
from native_twin import require_compiled
from pydantic import ConfigDict, Field, field_validator

compiled_part = require_compiled(mlpm.NATIVE_AVAILABLE, "the compiled MLPM")

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
    assert models is not None and models(request.interfaces, request.subflow_histories, "") is not None
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
    """Where the section decider decides, its section is the one of the plain values' path (``repr``, the fields
    set, the JSON), the kernel's advisory and the short-window note included; it hands back every request with a
    history in the sample-object form."""
    compiled = Settings(native_engines=True, mlpm={"window": window, "horizon_s": horizon_s})
    priority = mlpm.PROFILE_PRIORITY[request.application_profile]
    columns, models = adapter._deciders(priority, compiled)
    assert models is not None
    got = models(request.interfaces, request.subflow_histories, adapter._advisory(request))
    if any(h.rtt_samples or h.throughput_samples for h in request.subflow_histories):
        assert got is None
    want = adapter._compiled_section(request, priority, compiled, columns)
    if got is None:
        return
    assert want is not None  # the same engine decides both
    assert type(got) is SchedulerAdvice and all(type(w) is SubflowWeight for w in got.weights)
    assert repr(got) == repr(want)
    assert _fields_set(got) == _fields_set(want)
    assert got.model_dump_json() == want.model_dump_json()
    assert adapter._compiled_section(request, priority, compiled, columns, models) == got


def test_the_section_models_checks_are_read_from_the_models() -> None:
    """``section_model_checks`` reads a weight's bounds from ``SubflowWeight``; a model with a check the build does
    not make, or another field, gets no builder (pydantic validates every section)."""
    assert adapter.SECTION_MODELS == mlpm.SectionModels(SchedulerAdvice, SubflowWeight, (0.0, 1.0), (0.0, 1.0))

    class Narrower(SubflowWeight):
        weight: float = Field(ge=0.0, le=0.5)

    assert adapter.section_model_checks(weight=Narrower) is None  # SchedulerAdvice's weights are SubflowWeight

    class NarrowerAdvice(SchedulerAdvice):
        weights: list[Narrower]  # type: ignore[assignment]

    got = adapter.section_model_checks(NarrowerAdvice, Narrower)
    assert got == mlpm.SectionModels(NarrowerAdvice, Narrower, (0.0, 0.5), (0.0, 1.0))

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

        class Advice(SchedulerAdvice):
            weights: list[model]  # type: ignore[valid-type]

        assert adapter.section_model_checks(Advice, model) is None, model.__name__

    class Capped(SchedulerAdvice):
        weights: list[SubflowWeight] = Field(max_length=4)

    class Named(SchedulerAdvice):
        prioritised_subflow: str = Field(min_length=1)

    class Noted(SchedulerAdvice):
        note: str = ""

    for section in (Capped, Named, Noted):
        assert adapter.section_model_checks(section) is None, section.__name__


def _agent_request(rtts: tuple[float, float], samples: int = 20, kernel: dict[str, Any] | None = None) -> Any:
    t = [1.7e12 + 100.0 * i for i in range(samples)]
    return RecommendRequest.model_validate(
        {
            "device_id": "dev-1",
            "interfaces": [{"name": "wlan0", "access_type": "WIFI"}, {"name": "wwan0", "access_type": "LTE"}],
            "subflow_histories": [
                {
                    "interface": n,
                    "rtt_t_ms": t,
                    "rtt_ms": [rtt] * samples,
                    "throughput_t_ms": t,
                    "throughput_bps": [1e7] * samples,
                }
                for n, rtt in zip(("wlan0", "wwan0"), rtts, strict=True)
            ],
        }
        | ({"kernel": kernel} if kernel else {})
    )


def test_a_weight_outside_the_models_bounds_is_handed_back() -> None:
    """The build makes the model's checks: with a narrower weight bound, a decision with a weight above it is handed
    back (None), for the plain values' path to decide and pydantic to refuse."""

    class Narrower(SubflowWeight):
        weight: float = Field(ge=0.0, le=0.5)

    class NarrowerAdvice(SchedulerAdvice):
        weights: list[Narrower]  # type: ignore[assignment]

    request = _agent_request((10.0, 90.0))
    wide = mlpm.compiled_section_decider(adapter.SECTION_MODELS)  # type: ignore[arg-type]
    narrow = mlpm.compiled_section_decider(adapter.section_model_checks(NarrowerAdvice, Narrower))  # type: ignore[arg-type]
    assert wide is not None and narrow is not None
    decided = wide(request.interfaces, request.subflow_histories, "")
    assert decided is not None and max(w.weight for w in decided.weights) > 0.5
    assert narrow(request.interfaces, request.subflow_histories, "") is None
    with pytest.raises(ValueError):
        mlpm.compiled_section_decider(mlpm.SectionModels(SchedulerAdvice, SubflowWeight, (0.0, math.nan), (0.0, 1.0)))


def test_the_reason_carries_the_short_window_note_and_the_kernels_advisory() -> None:
    """Two samples per feature (fewer than a trend needs) on a stock kernel: the built section's reason is the Python
    engine's, with the short-window note and the advisory."""
    request = _agent_request((10.0, 90.0), samples=2, kernel={"mptcp_schedulers": ["default"]})
    priority = mlpm.PROFILE_PRIORITY[request.application_profile]
    _, models = adapter._deciders(priority, COMPILED)
    assert models is not None
    got = models(request.interfaces, request.subflow_histories, adapter._advisory(request))
    assert got is not None
    assert "fewer than 3 samples" in got.reason and got.reason.endswith("(apply low weights as backup)")
    assert repr(got) == repr(adapter.scheduler_advice(request, PYTHON))


def test_what_is_not_a_requests_models_is_handed_back_not_raised() -> None:
    """The decider reads attributes of the request's models; anything else (a tuple for a list, an object without an
    attribute it reads, a column of ints) is handed back (None) for the plain values' path, never an exception."""
    from types import SimpleNamespace

    request = _agent_request((10.0, 90.0))
    _, models = adapter._deciders(mlpm.PROFILE_PRIORITY[request.application_profile], COMPILED)
    assert models is not None
    interfaces, histories = list(request.interfaces), list(request.subflow_histories)
    assert models(interfaces, histories, "") is not None
    no_rtt = [SimpleNamespace(name=i.name) for i in interfaces]
    partial = [SimpleNamespace(interface=h.interface, rtt_samples=[], throughput_samples=[]) for h in histories]
    ints = [h.model_copy(update={"rtt_ms": [int(v) for v in h.rtt_ms]}) for h in histories]
    for args in ((tuple(interfaces), histories), (no_rtt, histories), (interfaces, partial), (interfaces, ints)):
        assert models(*args, "") is None
