"""One exploration schedule for the fleet (issue 17, item 4).

Some policies explore on a per-decision schedule: the paper's ActiveExplorer and epsilon_greedy decay
their exploration probability after every decision (p ← p·decay), explore_first counts its exploration
rounds. Each replica advances its own copy, so with N replicas sharing the traffic each copy decays N
times slower than one replica serving it all. SquareCB (``ridge_squarecb``, the default) is unaffected:
its γ_t = gamma0·(n_t + 1)^0.5 counts *trained* outcomes, which the trainer's published model carries.

:class:`FleetExploration` keeps the decision count per arm set in the store — one Redis hash,
``{ns}:exploration:decisions`` (field ``"WIFI,LTE"`` → decisions of that arm set fleet-wide) — and every
``period_s``:

1. adds this replica's decisions since the last round (``HINCRBY``) and reads the totals (``HGETALL``),
   in one pipeline;
2. advances the local schedule by the decisions the *other* replicas made meanwhile
   (total − previous total − own), :meth:`PrimaryPathBandit.advance_exploration`.

So every replica's schedule equals that of one replica which made all the fleet's decisions, up to the
decisions of the last ``period_s`` (at 1,000 decisions/s and decay 0.9997, p differs by at most a factor
0.9997^500 ≈ 0.86 between rounds, and converges at each one). A replica that starts late catches up with
the fleet's whole history at its first round. While Redis is unreachable the counts stay local and are
reported on the next successful round. The decision order across replicas does not matter: the decay is
a product, the round counter a sum.
"""

from __future__ import annotations

import asyncio
import logging

from edgepath.engines.primary_path import ArmSet
from edgepath.state.backend import StateBackend
from edgepath.training.online import ModelRegistry
from edgepath.types import AccessType

log = logging.getLogger(__name__)


def arms_field(arms: ArmSet) -> str:
    """The hash field of an arm set: access-type values joined by commas, e.g. ``"WIFI,LTE"``."""
    return ",".join(a.value if isinstance(a, AccessType) else str(a) for a in arms)


class FleetExploration:
    """Synchronises the per-decision exploration schedule of this replica with the fleet's count.

    Parameters
    ----------
    backend:
        The shared state backend (its :meth:`~edgepath.state.backend.StateBackend.add_exploration_counts` keeps
        the fleet's counts; on Redis the hash ``{ns}:exploration:decisions``).
    registry:
        This replica's model registry (the current model is advanced).
    period_s:
        Seconds between rounds.
    """

    def __init__(self, backend: StateBackend, registry: ModelRegistry, period_s: float = 0.5) -> None:
        self.backend = backend
        self.registry = registry
        self.period_s = period_s
        self._seen: dict[ArmSet, int] = {}  # fleet totals at the last round
        self.rounds = 0

    async def sync_once(self) -> dict[ArmSet, int]:
        """One round; returns the decisions of other replicas applied per arm set (empty when Redis is away)."""
        model = self.registry.current.model
        mine = model.take_unsynced_decisions()
        fleet = await self.backend.add_exploration_counts({arms_field(arms): n for arms, n in mine.items()})
        if fleet is None:  # store unreachable: the counts stay local and are reported on the next round
            self.registry.current.model.return_unsynced_decisions(mine)
            log.debug("exploration sync skipped: the state store is unreachable")
            return {}
        totals: dict[ArmSet, int] = {}
        for f, v in fleet.items():
            try:
                arms = tuple(AccessType(a) for a in f.split(","))
            except ValueError:
                continue  # an access type this version does not know (a newer replica): not ours to advance
            totals[arms] = int(v)
        applied: dict[ArmSet, int] = {}
        current = self.registry.current.model  # may have been swapped meanwhile: it carried the schedule
        for arms, total in totals.items():
            others = total - self._seen.get(arms, 0) - mine.get(arms, 0)
            if others > 0:
                current.advance_exploration(arms, others)
                applied[arms] = others
            self._seen[arms] = total
        self.rounds += 1
        return applied

    async def run(self) -> None:
        """Rounds every ``period_s`` until cancelled."""
        while True:
            try:
                await self.sync_once()
            except Exception:  # a bug must not stop serving; logged with its traceback
                log.exception("exploration sync failed")
            # Pacing of a background service loop, not a test wait.
            await asyncio.sleep(self.period_s)
