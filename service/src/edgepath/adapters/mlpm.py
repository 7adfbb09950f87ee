"""Scheduler weights (``scheduler``): MLPM, Silva, Togou, Muntean, HPCS 2020 (:mod:`edgepath.engines.mlpm`).

Reads the request's interfaces, ``subflow_histories``, ``application_profile`` and
``kernel.mptcp_schedulers``; learns nothing from outcomes (the classifier weights come from
the profile and settings, Eq. 2–4).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, cast

from edgepath import types as ep_types
from edgepath.adapters.base import DecisionInput, EngineAdapter, cacheable_context
from edgepath.constructed import constructible, fields_schema
from edgepath.engines import mlpm
from edgepath.memo import bounded_put
from edgepath.settings import Settings

#: Requests with histories a batch decides together before the event loop's other calls get a turn
#: (:meth:`MlpmAdapter.recommend_batch`; issue 16). MLPM is a batch's largest stage (~5 ms for 64 agent contexts on
#: a 2-core host); slices of 32 cost ~4 % more CPU in this stage than one of 64 (~1 % of the batch) and took the
#: unary p99 beside 15 batches of 64 per second from 20.1 / 19.9 to 16.2 / 16.7 ms (``batch_interference.py``).
#: Measured with the Python engine; with the compiled one (Session 46) the stage is ~1.4 ms per 64 and the slices
#: matter less, but they are kept for where it is not installed.
BATCH_SLICE = 32


def section_model_checks(
    section: type[ep_types.SchedulerAdvice] = ep_types.SchedulerAdvice,
    weight: type[ep_types.SubflowWeight] = ep_types.SubflowWeight,
) -> mlpm.SectionModels | None:
    """What the compiled decision checks before it builds the ``section`` and ``weight`` models' instances
    (:func:`~edgepath.engines.mlpm.compiled_section_decider`), read from the models' own core schemas, so the checks
    have one source: the bounds of a weight's ``weight`` and ``score``. None where a model holds anything the build
    would not make (another field, order or type, a constraint on another field, a validator, private attributes,
    extras kept, NaN refused): then every section is validated by pydantic."""
    builder = mlpm.SECTION_BUILDER
    if builder is None or not all(
        constructible(m, set()) and m.model_config.get("allow_inf_nan") is not False for m in (section, weight)
    ):
        return None
    weight_fields, section_fields = (
        fields_schema(weight.__pydantic_core_schema__),
        fields_schema(section.__pydantic_core_schema__),
    )
    if weight_fields is None or list(weight_fields["fields"]) != list(builder.WEIGHT_FIELDS):
        return None
    if section_fields is None or list(section_fields["fields"]) != list(builder.SECTION_FIELDS):
        return None
    schemas = {name: f["schema"] for name, f in weight_fields["fields"].items()}
    if schemas.pop("interface") != {"type": "str"}:
        return None
    bounds = []
    for name in ("weight", "score"):
        schema = schemas.pop(name)
        if set(schema) != {"type", "ge", "le"} or schema["type"] != "float":
            return None
        bounds.append((float(schema["ge"]), float(schema["le"])))
    for name, schema in schemas.items():  # forecasts: an unconstrained float or None; samples: an int, 0 by default
        kind = "int" if name.endswith("_samples") else "nullable"
        default = 0 if kind == "int" else None
        inner = {"type": "int"} if kind == "int" else {"type": "nullable", "schema": {"type": "float"}}
        if schema != {"type": "default", "schema": inner, "default": default}:
            return None
    schemas = {name: f["schema"] for name, f in section_fields["fields"].items()}
    weights = schemas.pop("weights")
    if set(weights) != {"type", "items_schema"} or weights["type"] != "list":
        return None
    if weights["items_schema"].get("type") != "model" or weights["items_schema"].get("cls") is not weight:
        return None
    plain = {
        "prioritised_subflow": {"type": "str"},
        "priority": {"type": "str"},
        "features_used": {"type": "list", "items_schema": {"type": "str"}},
        "horizon_s": {"type": "float"},
        "bias": {"type": "float"},
        "reason": {"type": "str"},
    }
    if schemas != plain:
        return None
    return mlpm.SectionModels(section, weight, bounds[0], bounds[1])


#: The compiled decision's models of the section and its weights (:func:`section_model_checks`); None where the
#: compiled build lacks it or the models hold checks it would not make.
SECTION_MODELS: mlpm.SectionModels | None = section_model_checks()


def scheduler_advice(request: ep_types.RecommendRequest, settings: Settings) -> ep_types.SchedulerAdvice:
    """MLPM weights for every interface of ``request`` (Silva et al. 2020; see :mod:`edgepath.engines.mlpm`).

    Interfaces without a history fall back to their current ``rtt_ms`` (trend 0);
    with nothing known the weights are uniform and ``reason`` says so.

    Raises
    ------
    RuntimeError
        The engine produced a value the section's model refuses (:func:`~edgepath.types.service_output`: the
        service's bug, answered as an internal error, never as the caller's bad input).
    """
    priority = mlpm.PROFILE_PRIORITY[request.application_profile]
    if settings.native_engines:
        section = _compiled_section(request, priority, settings, *_deciders(priority, settings))
        if section is not None:
            return section
    # native=False: the compiled engine has had its turn (above) where it may decide
    d = mlpm.decide(subflow_histories(request), **_engine_args(priority, settings), native=False)
    return advice_section(request, d)


_ColumnDecider = Callable[[Sequence[mlpm.CompiledSubflow]], mlpm.CompiledDecision | None]


#: (priority, window, horizon_s, gain, bias, id(fitted)) → (fitted, :func:`_deciders`' pair): one per priority and
#: settings, not one per call (issue 16: making them was ~3 µs of a unary Recommend's MLPM section). The entry holds
#: ``fitted``, so its id is not reused while cached.
_DECIDERS: dict[tuple[object, ...], tuple[object, tuple[_ColumnDecider, mlpm.SectionDecider | None]]] = {}


def _deciders(priority: mlpm.Priority, settings: Settings) -> tuple[_ColumnDecider, mlpm.SectionDecider | None]:
    """The compiled engine's deciders for ``priority`` under ``settings``: on the plain values
    (:func:`~edgepath.engines.mlpm.compiled_decider`) and on the request's models with the section built
    (:func:`~edgepath.engines.mlpm.compiled_section_decider`; None where it is not installed or
    :data:`SECTION_MODELS` is None). Raises ``ValueError`` as they do, for settings they refuse."""
    m = settings.mlpm
    fitted = _fitted(priority, settings)
    key = (priority, m.window, m.horizon_s, m.gain, m.bias, id(fitted))
    hit = _DECIDERS.get(key)
    if hit is None:
        if len(_DECIDERS) >= 256:
            _DECIDERS.clear()
        args = _engine_args(priority, settings)
        section = None if SECTION_MODELS is None else mlpm.compiled_section_decider(SECTION_MODELS, **args)
        hit = _DECIDERS[key] = (fitted, (mlpm.compiled_decider(**args), section))
    return hit[1]


def _engine_args(priority: mlpm.Priority, settings: Settings) -> dict[str, Any]:
    """The engine's keyword arguments for one decision of ``priority`` (settings ``mlpm.*``)."""
    m = settings.mlpm
    return {
        "priority": priority,
        "window": m.window,
        "horizon_s": m.horizon_s,
        "gain": m.gain,
        "bias": m.bias,
        "fitted": _fitted(priority, settings),
    }


def _compiled_section(
    request: ep_types.RecommendRequest,
    priority: mlpm.Priority,
    settings: Settings,
    decide: _ColumnDecider,
    decide_section: mlpm.SectionDecider | None = None,
) -> ep_types.SchedulerAdvice | None:
    """:func:`scheduler_advice` by the compiled engine (:func:`_deciders` of ``priority`` and ``settings``; the same
    numbers bit for bit): the section built from the request's models where ``decide_section`` decides, else the
    plain values of ``decide`` put straight into the section without the engine's objects (~10 µs less per decision
    than the engine's objects, issue 16); None where it is not installed or hands the decision back."""
    if decide_section is not None:
        section = decide_section(request.interfaces, request.subflow_histories, _advisory(request))
        if section is not None:
            return section  # type: ignore[no-any-return]
    d = decide(subflow_columns(request))
    if d is None:
        return None
    weights = [
        _weight(iface.name, weight, score, r, t)
        for iface, (weight, score, r, t) in zip(request.interfaces, d.scored, strict=True)
    ]
    prioritised = request.interfaces[d.prioritised].name
    return _section(request, weights, prioritised, priority, d.features_used, settings.mlpm.horizon_s, d.bias, d.reason)


def scheduler_advice_batch(
    requests: Sequence[ep_types.RecommendRequest], settings: Settings
) -> list[ep_types.SchedulerAdvice]:
    """:func:`scheduler_advice` of every request, in order: the same sections, with Eq. 1 taken for all their
    windows at once (:func:`~edgepath.engines.mlpm.decide_batch`; issue 16). Raises as :func:`scheduler_advice`."""
    priorities = [mlpm.PROFILE_PRIORITY[r.application_profile] for r in requests]
    sections: list[ep_types.SchedulerAdvice | None] = [None] * len(requests)
    if settings.native_engines:  # one compiled decider per priority in the batch, its arguments checked once
        deciders = {p: _deciders(p, settings) for p in set(priorities)}
        sections = [_compiled_section(r, p, settings, *deciders[p]) for r, p in zip(requests, priorities, strict=True)]
    rest = [i for i, section in enumerate(sections) if section is None]
    if rest:  # the numpy batch, for what the compiled engine did not decide
        decided = mlpm.decide_batch(
            [subflow_histories(requests[i]) for i in rest],
            [priorities[i] for i in rest],
            window=settings.mlpm.window,
            horizon_s=settings.mlpm.horizon_s,
            gain=settings.mlpm.gain,
            bias=settings.mlpm.bias,
            fitted=[_fitted(priorities[i], settings) for i in rest],
            native=False,
        )
        for i, d in zip(rest, decided, strict=True):
            sections[i] = advice_section(requests[i], d)
    return cast(list[ep_types.SchedulerAdvice], sections)  # every entry decided by one of the two paths


def _fitted(priority: mlpm.Priority, settings: Settings) -> mlpm.FittedClassifier | None:
    return mlpm.FITTED.get(priority) if settings.mlpm.classifier == "fitted" else None


def subflow_histories(request: ep_types.RecommendRequest) -> list[mlpm.SubflowHistory]:
    """The engine's view of ``request``: one subflow per interface, its samples as :class:`~edgepath.engines.mlpm.
    Columns` of ms timestamps (as sent), its ``rtt_ms`` as the current RTT (:func:`subflow_columns` as objects)."""
    return [
        mlpm.SubflowHistory(name, mlpm.Columns(*r) if r else (), mlpm.Columns(*t) if t else (), current)
        for name, r, t, current in subflow_columns(request)
    ]


def subflow_columns(request: ep_types.RecommendRequest) -> list[mlpm.CompiledSubflow]:
    """One subflow per interface of ``request`` as the compiled engine takes it
    (:data:`~edgepath.engines.mlpm.CompiledSubflow`: plain tuples, no engine object per subflow): its samples as
    columns of ms timestamps (as sent), its ``rtt_ms`` as the current RTT."""
    by_name = {h.interface: h for h in request.subflow_histories}
    out: list[mlpm.CompiledSubflow] = []
    for iface in request.interfaces:
        h = by_name.get(iface.name)
        if h is None:
            out.append((iface.name, None, None, iface.rtt_ms))
        else:
            out.append((iface.name, (*h.rtt_columns(), 1000.0), (*h.throughput_columns(), 1000.0), iface.rtt_ms))
    return out


def advice_section(request: ep_types.RecommendRequest, d: mlpm.SchedulerWeights) -> ep_types.SchedulerAdvice:
    """The ``scheduler`` section of ``d``, MLPM's decision for ``request``. Raises as :func:`scheduler_advice`."""
    weights = [_weight(s.interface, s.weight, s.score, s.rtt_ms, s.throughput_bps) for s in d.subflows]
    return _section(request, weights, d.prioritised_subflow, d.priority, d.features_used, d.horizon_s, d.bias, d.reason)


def _weight(
    interface: str, weight: float, score: float, r: mlpm.PlainForecast | None, t: mlpm.PlainForecast | None
) -> dict[str, object]:
    """One subflow's entry of the section (``SubflowWeight``'s fields); ``r``, ``t``: its RTT and throughput
    forecasts ``(current, slope_per_s, forecast, samples)`` (a :class:`~edgepath.engines.mlpm.FeatureForecast` is
    one), None where unknown."""
    return {
        "interface": interface,
        "weight": min(max(weight, 0.0), 1.0),
        "score": score,
        "rtt_ms": r[0] if r is not None else None,
        "rtt_slope_ms_per_s": r[1] if r is not None else None,
        "rtt_forecast_ms": r[2] if r is not None else None,
        "rtt_samples": r[3] if r is not None else 0,
        "throughput_bps": t[0] if t is not None else None,
        "throughput_slope_bps_per_s": t[1] if t is not None else None,
        "throughput_forecast_bps": t[2] if t is not None else None,
        "throughput_samples": t[3] if t is not None else 0,
    }


def _advisory(request: ep_types.RecommendRequest) -> str:
    """The kernel's advisory appended to the section's reason: where the device's kernel reports only the
    ``default`` MPTCP scheduler (a stock kernel), the weights can act only as backup flags; else ""."""
    k = request.kernel
    if k is not None and k.mptcp_schedulers and {x.lower() for x in k.mptcp_schedulers} <= {"default"}:
        return "; advisory: the kernel has only the default MPTCP scheduler (apply low weights as backup)"
    return ""


def _section(
    request: ep_types.RecommendRequest,
    weights: list[dict[str, object]],
    prioritised: str,
    priority: mlpm.Priority,
    features_used: Sequence[str],
    horizon_s: float,
    bias: float,
    reason: str,
) -> ep_types.SchedulerAdvice:
    """The section from a decision's values, with the kernel's advisory (:func:`_advisory`). Raises as
    :func:`scheduler_advice`."""
    reason += _advisory(request)
    # one validation of the nested values (service_output: ~3.5 µs less than a model per weight, issue 16)
    return ep_types.service_output(
        ep_types.SchedulerAdvice,
        {
            "weights": weights,
            "prioritised_subflow": prioritised,
            "priority": priority.value,
            "features_used": list(features_used),
            "horizon_s": horizon_s,
            "bias": bias,
            "reason": reason,
        },
    )


class MlpmAdapter(EngineAdapter):
    """``scheduler`` in every recommendation that asks for it (settings ``mlpm_*``; ``RecommendRequest.sections``).

    A request without ``subflow_histories`` is decided on its interfaces' names and ``rtt_ms``, its
    profile and its kernel's schedulers alone: those answers are cached per context (bounded;
    issue 16), requests with histories are always computed.
    """

    section = "scheduler"

    def __init__(self, settings: Settings, cache_size: int = 4096) -> None:
        self.settings = settings
        self._cache: dict[tuple[object, ...], ep_types.SchedulerAdvice] = {}  # bounded by memo.bounded_put
        self._cache_size = cache_size

    async def recommend(self, decision: DecisionInput) -> ep_types.SchedulerAdvice:
        return self.advice(decision.request)

    async def recommend_batch(self, decisions: Sequence[DecisionInput]) -> list[ep_types.SchedulerAdvice]:
        """:meth:`recommend` of every item of a ``RecommendBatch``, in order (no await per item): cached contexts
        as :meth:`advice`, the others (with histories) together (:func:`scheduler_advice_batch`), :data:`BATCH_SLICE`
        at a time with a pause for the loop's other calls between slices."""
        cached = [cacheable_context(d.request) for d in decisions]
        fresh = [d.request for d, c in zip(decisions, cached, strict=True) if not c]
        sections: list[ep_types.SchedulerAdvice] = []
        for i in range(0, len(fresh), BATCH_SLICE):
            if i:
                await asyncio.sleep(0)  # other calls' turn between slices
            sections += scheduler_advice_batch(fresh[i : i + BATCH_SLICE], self.settings)
        computed = iter(sections)
        return [self.advice(d.request) if c else next(computed) for d, c in zip(decisions, cached, strict=True)]

    def advice(self, request: ep_types.RecommendRequest) -> ep_types.SchedulerAdvice:
        """The section for ``request`` (cached per context: :func:`~edgepath.adapters.base.cacheable_context`)."""
        if not cacheable_context(request):
            return scheduler_advice(request, self.settings)
        k = request.kernel
        key = (
            request.application_profile,
            tuple((i.name, i.rtt_ms) for i in request.interfaces),
            tuple(k.mptcp_schedulers) if k is not None else None,
        )
        advice = self._cache.get(key)
        if advice is None:
            advice = scheduler_advice(request, self.settings)
            bounded_put(self._cache, key, advice, self._cache_size)
        return advice
