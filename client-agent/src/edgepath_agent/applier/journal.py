"""Journal of applied changes: the prior state (snapshot) and every operation run.

The journal file (JSON, replaced atomically after each entry) survives a crash, so
``edgepath-agent rollback`` in another process can restore the state that existed
before the agent's *first* change: the snapshot is written once and kept until a
rollback succeeds. Entries are an audit trail (op, arguments, argv, ok/error, time).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from edgepath_agent.applier.state import NetState


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


class Journal:
    """Snapshot + entries, persisted at ``path`` (in memory only when ``path`` is ``None``)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.snapshot: NetState | None = None
        self.entries: list[dict[str, Any]] = []
        if path is not None and path.exists():
            data = json.loads(path.read_text())
            self.snapshot = NetState.from_dict(data["snapshot"]) if data.get("snapshot") else None
            self.entries = list(data.get("entries", []))

    @property
    def active(self) -> bool:
        """True when changes may be outstanding (a snapshot exists)."""
        return self.snapshot is not None

    def begin(self, state: NetState) -> None:
        """Keep ``state`` as the snapshot unless one is already kept (earlier run or crash)."""
        if self.snapshot is None:
            self.snapshot = state
            self._save()

    def record(self, op: str, args: dict[str, Any], argv: list[str] | None, ok: bool, error: str | None = None) -> None:
        self.entries.append(
            {"ts": time.time(), "op": op, "args": _jsonable(args), "argv": argv, "ok": ok, "error": error}
        )
        self._save()

    def clear(self) -> None:
        """Forget the snapshot and entries (after a successful rollback) and remove the file."""
        self.snapshot = None
        self.entries = []
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        data = {"version": 1, "snapshot": self.snapshot.to_dict() if self.snapshot else None, "entries": self.entries}
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.path)
