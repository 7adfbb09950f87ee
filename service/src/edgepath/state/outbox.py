"""Durable degraded-mode outbox: an append-only journal on local disk, replayed on restart (issue 17).

While Redis is unreachable a :class:`~edgepath.state.redis.RedisStore` keeps the decisions it makes and
the outcomes it acknowledges in memory until Redis returns. With ``outbox_dir`` set, each of them is
also appended to this journal, so a replica killed (SIGKILL, OOM, node reboot) while Redis is down
loses nothing it acknowledged: the next process that starts with the same directory replays the
journal into Redis through the same claim script (exactly-once counting by ``decision_id``).

File layout
-----------
One JSON-lines file per process, ``outbox-<pid>-<random>.jsonl`` in ``outbox_dir``, held with an
exclusive ``flock`` for the life of the process. A line is ``{"k": "d", "r": DecisionRecord}`` or
``{"k": "o", "r": OutcomeRecord}``. A file nobody holds the lock of belongs to a dead process: a
starting (or reconnecting) store adopts it — copies its lines into its own journal, fsyncs, deletes it
— and flushes them to Redis. Replaying is idempotent: a decision is re-SET with its remaining TTL, an
outcome already claimed comes back DUPLICATE. A torn last line (crash mid-write) is skipped.

fsync policy
------------
* outcome lines: ``fsync`` **before** the outcome is acknowledged to the device — an acknowledged
  outcome survives a process crash and a power loss of the node;
* decision lines: written (``os.write``, into the page cache) but not fsync'd — they survive a crash
  of the process, not a power loss (a device whose decision is lost that way gets ``unknown`` for its
  outcome, which it is not told was recorded);
* the journal is truncated once the store leaves degraded mode with an empty outbox (everything in it
  is then in Redis).

Durability beyond the node needs ``outbox_dir`` on storage that outlives the pod (the chart mounts an
``emptyDir``, which survives container restarts, not pod deletion; see the README "Reliability").
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edgepath.state.base import DecisionRecord, OutcomeRecord

log = logging.getLogger(__name__)

PREFIX = "outbox-"
SUFFIX = ".jsonl"


def _decision(d: dict[str, Any]) -> DecisionRecord:
    fields = {f.name for f in dataclasses.fields(DecisionRecord)}
    d = {k: v for k, v in d.items() if k in fields}
    d["arms"] = tuple(d["arms"])
    d["features"] = tuple(d["features"])
    d["link_speed_mbps"] = tuple(d.get("link_speed_mbps", ()))
    d["congestion_controls"] = tuple(d.get("congestion_controls", ()))
    if d.get("server_candidates") is not None:  # absent (a journal of an older release): None, "not recorded"
        d["server_candidates"] = tuple(d["server_candidates"])
    return DecisionRecord(**d)


def _outcome(d: dict[str, Any]) -> OutcomeRecord:
    d = dict(d)
    d["arms"] = tuple(d["arms"])
    d["features"] = tuple(d["features"])
    return OutcomeRecord(**d)


def read_journal(path: Path) -> Iterator[DecisionRecord | OutcomeRecord]:
    """The records of a journal file in order; undecodable lines (a torn last write) are skipped and logged."""
    with path.open("rb") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                yield _decision(entry["r"]) if entry["k"] == "d" else _outcome(entry["r"])
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("outbox journal %s line %d skipped (%s)", path, n, exc)


class DurableOutbox:
    """This process's journal in ``directory`` (created if missing).

    Raises
    ------
    OSError
        When the directory cannot be created or the journal opened.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}{SUFFIX}"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.fsyncs = 0

    def _append(self, kind: str, record: DecisionRecord | OutcomeRecord) -> None:
        line = json.dumps({"k": kind, "r": dataclasses.asdict(record)}, separators=(",", ":")).encode() + b"\n"
        os.write(self._fd, line)  # one write(2) on an O_APPEND file: lines of one process never interleave

    def append_decision(self, record: DecisionRecord) -> None:
        """Journal a decision (page cache only: survives a process crash, not a power loss)."""
        self._append("d", record)

    def append_outcome(self, record: OutcomeRecord) -> None:
        """Journal an outcome and ``fsync`` it; returns once it is on disk (then it may be acknowledged)."""
        self._append("o", record)
        os.fsync(self._fd)
        self.fsyncs += 1

    def truncate(self) -> None:
        """Empty the journal (everything in it reached Redis)."""
        os.ftruncate(self._fd, 0)

    def adopt_orphans(self) -> list[DecisionRecord | OutcomeRecord]:
        """Records of journals left by dead processes, moved into this one (fsync'd) and their files deleted.

        A journal is an orphan when its ``flock`` can be taken: the process that held it is gone.
        """
        records: list[DecisionRecord | OutcomeRecord] = []
        for path in sorted(self.directory.glob(f"{PREFIX}*{SUFFIX}")):
            if path == self.path:
                continue
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue  # adopted by another process meanwhile
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live process holds it
                if not path.exists():
                    continue
                found = list(read_journal(path))
                for record in found:
                    self._append("d" if isinstance(record, DecisionRecord) else "o", record)
                os.fsync(self._fd)
                path.unlink()
                records.extend(found)
                log.warning("adopted outbox journal %s of a dead process: %d records to replay", path, len(found))
            finally:
                os.close(fd)
        return records

    def close(self, *, remove: bool) -> None:
        """Release the journal; ``remove`` deletes it (only when empty of anything not yet in Redis)."""
        if self._fd < 0:
            return
        if remove:
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = -1
