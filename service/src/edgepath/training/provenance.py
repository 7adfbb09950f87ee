"""Where the serving model came from and when it was published, for ``edgepath_model_published_timestamp_seconds``
and ``edgepath_model_info`` (:meth:`edgepath.metrics.Metrics.model_served`).

The publication time is the model's, not the process's: every replica serving one snapshot shows the snapshot's own
``published_at`` (its signed meta), however long ago it was restarted, so ``time() - gauge`` is the model's age. A
warm-start artefact counts from its card's ``trained_at`` (an ISO date, midnight UTC, or an ISO time); a cold model,
an artefact whose card has no readable ``trained_at``, and a model the in-process trainer refitted (memory store)
count from when this process started serving them. A snapshot this process's trainer role publishes counts from the
moment the store accepted it (a few ms after the ``published_at`` it signed).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping
from typing import Any

from edgepath.metrics import Metrics
from edgepath.training.online import ModelVersion
from edgepath.training.snapshots import LoadedSnapshot, SnapshotStore


def artefact_trained_at(card: Mapping[str, Any] | None) -> float | None:
    """Unix time of a model card's ``trained_at`` (``2026-11-21``: midnight UTC that day; an ISO time without a zone
    is UTC), None when there is none or it is not ISO 8601."""
    value = card.get("trained_at") if card else None
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()


class ModelProvenance:
    """Keeps the serving-model gauges of one process: :meth:`started` for the model it starts with, :meth:`published`
    as the registry's listener, and :meth:`snapshot` for each snapshot it loads or publishes (which the registry
    then makes the serving model: recognised by identity).

    Parameters
    ----------
    metrics:
        Whose gauges are set.
    refit_source:
        ``source`` of a model published here that no snapshot brought (the in-process trainer's refits).
    clock:
        Unix time (tests).
    """

    def __init__(self, metrics: Metrics, refit_source: str = "refit", clock: Callable[[], float] = time.time) -> None:
        self.metrics = metrics
        self.refit_source = refit_source
        self.clock = clock
        self._snapshot: tuple[object, float] | None = None  # (model, published_at) of the last snapshot seen
        self._serving: tuple[object, str, float] | None = None  # (model, source, published_at) served

    def started(self, mv: ModelVersion, source: str, published_at: float | None = None) -> None:
        """The model the process starts with (``artefact`` or ``cold``); ``published_at`` None: now."""
        self._serve(mv, source, self.clock() if published_at is None else published_at)

    def snapshot(self, model: object, published_at: object) -> None:
        """``model`` came from (or went to) the store, published at ``published_at`` (Unix s; anything else: now)."""
        at = float(published_at) if isinstance(published_at, int | float) else self.clock()
        self._snapshot = (model, at)

    def published(self, mv: ModelVersion) -> None:
        """Registry listener: the serving model changed (or was renumbered)."""
        if self._snapshot is not None and self._snapshot[0] is mv.model:
            self._serve(mv, "snapshot", self._snapshot[1])
        elif self._serving is not None and self._serving[0] is mv.model:  # the same model under another version
            self._serve(mv, self._serving[1], self._serving[2])
        else:
            self._serve(mv, self.refit_source, self.clock())

    def _serve(self, mv: ModelVersion, source: str, published_at: float) -> None:
        self._serving = (mv.model, source, published_at)
        self.metrics.model_served(mv.version, mv.model.policy_name, source, published_at)


class ObservedSnapshotStore(SnapshotStore):
    """A :class:`SnapshotStore` that tells ``on_loaded(model, published_at)`` of each snapshot it loads (the
    ``published_at`` of its signed meta, as stored) and ``on_published(model, at)`` of each it publishes (``at``: when
    the store accepted it, Unix s)."""

    def __init__(
        self,
        *args: Any,
        on_loaded: Callable[[object, object], None] | None = None,
        on_published: Callable[[object, float], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.on_loaded = on_loaded
        self.on_published = on_published

    async def load(self) -> LoadedSnapshot | None:
        loaded = await super().load()
        if loaded is not None and self.on_loaded is not None:
            self.on_loaded(loaded.model, loaded.meta.get("published_at"))
        return loaded

    async def publish(self, model: Any, version: int, entry_ids: list[str]) -> int:
        published = await super().publish(model, version, entry_ids)
        if self.on_published is not None:
            self.on_published(model, time.time())
        return published
