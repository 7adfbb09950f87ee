"""Decision-log export (issue 18): the store's joined decisions as JSON lines, page by page.

``edgepath log export --store URL [--since T] --out FILE`` calls :func:`export_decision_log`. Each
line is one :class:`~edgepath.state.base.LoggedDecision` (``dataclasses.asdict``) plus
``"format": "edgepath.decision-log/1"``: the format ``edgepath train-offline --decision-log``
(:func:`edgepath.training.offline.read_decision_log`) and ``edgepath eval ope`` read.

The export reads pages of ``page_size`` entries (Redis: ``XRANGE … COUNT``, never ``KEYS`` or a
whole-stream read), yielding to the event loop between pages, so serving replicas writing the same
store are never blocked; entries appended while the export runs are included up to the last page.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

from edgepath.state.base import DECISION_LOG_FORMAT, LoggedDecision, StateStore


def logged_line(entry: LoggedDecision) -> str:
    """One JSONL line (no newline) of ``entry`` in the exported format."""
    d: dict[str, Any] = {"format": DECISION_LOG_FORMAT, **dataclasses.asdict(entry)}
    d["arms"] = list(entry.arms)
    d["features"] = list(entry.features)
    d["context"] = list(entry.context)
    return json.dumps(d, separators=(",", ":"))


async def export_decision_log(store: StateStore, out: Path, since_s: float = 0.0, page_size: int = 1000) -> int:
    """Write every decision-log entry joined at/after ``since_s`` (Unix s) to ``out``; returns the count.

    The file is written to ``out.tmp`` and renamed, so a reader never sees half an export.

    Raises
    ------
    redis.exceptions.ConnectionError
        The store is unreachable (nothing is written).
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    n = 0
    cursor: str | None = None
    with tmp.open("w") as f:
        while True:
            page, cursor = await store.read_decision_log(since_s=since_s, after=cursor, count=page_size)
            for entry in page:
                f.write(logged_line(entry) + "\n")
            n += len(page)
            if cursor is None:
                break
            await asyncio.sleep(0)  # let a co-hosted loop serve between pages
    tmp.replace(out)
    return n
