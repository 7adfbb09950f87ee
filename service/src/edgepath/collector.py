"""The cyclic garbage collector held off while a batch keeps its objects alive (issue 16).

CPython's collector starts a young-generation collection whenever tracked containers (lists, dicts, models)
allocated since the last one outnumber those freed by 700 (:func:`gc.get_threshold`). A ``RecommendBatch``
of 64 agent contexts allocates thousands (each context's sample columns, its validated model, its sections)
and keeps every one alive until it replies, so the collections it sets off find nothing to collect: they scan
the batch's live objects, and scan them again when they move to the older generation. A ``gc.callbacks``
probe counted 5 collections per batch, none collecting an object. Held off for the batch, a decision took 90.2
CPU µs instead of 94.7 with the startup heap frozen as ``edgepath serve`` freezes it, 88 instead of 111 without
(``reports/issue-16/serving-benchmarks.md``, Session 48).

:class:`CollectorPause` holds the collector off from a batch's decoding to its encoding and gives it back on
the event loop's next turn, once the handler's frame has let the batch's objects go: then the young
generation holds only what outlived the batch, and the next collection scans that alone. Garbage made
meanwhile (by anything the loop runs) is collected then; nothing is lost, it waits at most one batch, or
``max_hold_s`` while batches overlap without a gap.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from types import TracebackType

#: The longest the collector stays held off while batches overlap without a gap, s.
DEFAULT_MAX_HOLD_S = 0.25


class CollectorPause:
    """A re-entrant ``with`` block that holds the garbage collector off (:func:`gc.disable`) while any block is
    open, and re-enables it on the event loop's next turn after the last one closes (immediately outside a
    running loop).

    It never enables a collector it did not disable: where the collector was off already (``gc.disable()`` by
    the operator or a test) it leaves it off. While blocks keep overlapping, the collector is given back once
    it has been held ``max_hold_s`` (s, > 0, by ``clock``), for one turn of the loop, and the next block to
    open holds it off again.

    One instance per process serves every transport; the event loop's thread is the only one that opens it.

    Raises
    ------
    ValueError
        ``max_hold_s`` not a finite number > 0.
    """

    def __init__(self, max_hold_s: float = DEFAULT_MAX_HOLD_S, clock: Callable[[], float] = time.monotonic) -> None:
        if not 0.0 < max_hold_s < float("inf"):
            raise ValueError(f"max_hold_s must be a finite number > 0, got {max_hold_s!r}")
        self.max_hold_s, self.clock = max_hold_s, clock
        self.open_blocks = 0  # blocks open now
        self.holding = False  # this pause disabled the collector and has not given it back yet
        self.held_since = 0.0  # clock() when it did

    def __enter__(self) -> None:
        self.open_blocks += 1
        if not self.holding and gc.isenabled():
            gc.disable()
            self.holding, self.held_since = True, self.clock()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.open_blocks -= 1
        if self.holding and (self.open_blocks == 0 or self._held_too_long()):
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._give_back()
            else:
                loop.call_soon(self._give_back)

    def _held_too_long(self) -> bool:
        return self.clock() - self.held_since >= self.max_hold_s

    def _give_back(self) -> None:
        """Re-enable the collector, unless a block opened since and it has not been held too long."""
        if self.holding and (self.open_blocks == 0 or self._held_too_long()):
            self.holding = False
            gc.enable()


#: The pause the transports' batch handlers share (``RecommendBatch`` over gRPC and REST).
BATCH_COLLECTOR_PAUSE = CollectorPause()
