"""The one place engine adapters are registered: :data:`ENGINES` (order = the order they run in).

Adding an engine: its pure module in ``edgepath/engines/``, its adapter (an
:class:`~edgepath.adapters.base.EngineAdapter`) in ``edgepath/adapters/``, and one line here.
"""

from __future__ import annotations

from collections.abc import Sequence

from edgepath.adapters.base import EngineAdapter, EngineFactory
from edgepath.adapters.congestion import CongestionAdapter
from edgepath.adapters.mlpm import MlpmAdapter
from edgepath.adapters.ssmp import SsmpAdapter
from edgepath.adapters.steering import SteeringAdapter
from edgepath.engines import features, linear_bandit, mlpm
from edgepath.settings import Settings

ENGINES: tuple[EngineFactory, ...] = (
    MlpmAdapter,  # scheduler: MLPM subflow weights
    CongestionAdapter,  # congestion: congestion-control pair
    SsmpAdapter,  # server_selection: SSMP CDN server
    SteeringAdapter,  # steering: ATSSS steering rules (after scheduler: reads its weights)
)


def build_engines(settings: Settings, factories: Sequence[EngineFactory] | None = None) -> tuple[EngineAdapter, ...]:
    """One adapter per registered factory (default :data:`ENGINES`, read at call time).

    Raises
    ------
    ValueError
        When two adapters fill the same section.
    """
    engines = tuple(make(settings) for make in (ENGINES if factories is None else factories))
    sections = [e.section for e in engines]
    if duplicated := sorted({s for s in sections if sections.count(s) > 1}):
        raise ValueError(f"two engine adapters fill the section(s) {', '.join(duplicated)}")
    return engines


#: The compiled twins (service/native, ``edgepath_native``) and whether each is installed: ``features``, the
#: primary-path bandit's context encoder; ``ridge``, the ridge SquareCB and ε-greedy rules' single decision;
#: ``mlpm``, the scheduler section's engine.
COMPILED: dict[str, bool] = {
    "features": features.NATIVE_AVAILABLE,
    "ridge": linear_bandit.NATIVE_AVAILABLE,
    "mlpm": mlpm.NATIVE_AVAILABLE,
}


def compiled_engines(settings: Settings) -> tuple[str, ...]:
    """The engines whose compiled twins (:data:`COMPILED`) decide in this process: installed and not switched off
    (``native_engines``). Empty: the Python engines decide alone (the same results)."""
    return tuple(name for name, installed in COMPILED.items() if installed) if settings.native_engines else ()
