"""Outcomes the service has not received yet, kept across restarts (``pending_file``).

An outcome the agent could not deliver (the service unreachable, or the stop's last passive interval while it
is) waits in :attr:`~edgepath_agent.daemon.Agent.pending`, a queue bounded by ``max_pending_outcomes`` and
re-sent at later steps. So that a restart (SIGTERM for an upgrade or a reboot, a crash, the end of ``--steps``)
does not lose it, the queue is also kept in one small file, by default
``/var/lib/edgepath-agent/pending-outcomes.json``, next to the journal in the unit's ``StateDirectory=``:

* written whenever the queue changes (an outcome queued, queued ones delivered or dropped: once per flush, not
  once per outcome) and at the stop, atomically (a temporary file in the same directory, fsync, then
  :func:`os.replace`), mode 0600 (outcomes are the device's measurements); an empty queue removes the file;
* read when the agent starts (:func:`load_pending`): outcomes of another ``device_id`` (the setting changed) are
  dropped, and so are the oldest beyond the bound; a file that cannot be read or is not a pending-outcomes file
  is moved aside (``NAME.corrupt``, replacing an older one) and the agent starts with an empty queue: an agent
  that cannot start because of a bad cache is worse than a lost outcome.

File (JSON): ``{"version": 1, "outcomes": [OUTCOME, ...]}``, oldest first, each ``OUTCOME`` the ``OutcomeRequest``
as it is sent (REST JSON shape, with its ``device_id`` and ``decision_id``). Re-sending one is safe: the service
counts an outcome once per ``decision_id`` (a repeat is acknowledged as a duplicate), and answers ``NOT_FOUND``
(HTTP 404) once the decision's TTL has passed, which drops it (daemon.py).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Where the queue is kept by default: the unit's ``StateDirectory=`` (``/var/lib/edgepath-agent``, mode 0700).
DEFAULT_PENDING_FILE = Path("/var/lib/edgepath-agent/pending-outcomes.json")
#: Version of the file written now.
VERSION = 1
#: Suffix of the name a bad file is moved aside to.
CORRUPT_SUFFIX = ".corrupt"


class PendingFileError(ValueError):
    """The file is not a pending-outcomes file (the message says why, without the path)."""


@dataclass
class LoadedPending:
    """What :func:`load_pending` found.

    Attributes
    ----------
    outcomes
        The outcomes kept, oldest first: this device's, the newest ``bound`` of them.
    other_device
        Outcomes dropped because they carry another ``device_id``.
    over_bound
        The oldest outcomes dropped beyond the bound.
    problem
        Why the file could not be used (unreadable, not JSON, not a pending-outcomes file), ``None`` when it could
        (or there was none); ``outcomes`` is then empty.
    moved_to
        Where the bad file was moved (``None``: there was none, or it could not be moved: ``problem`` says so).
    """

    outcomes: list[dict[str, Any]] = field(default_factory=list)
    other_device: int = 0
    over_bound: int = 0
    problem: str | None = None
    moved_to: Path | None = None


def read_pending(path: Path) -> list[dict[str, Any]] | None:
    """The outcomes kept at ``path``, oldest first; ``None`` when there is no file.

    Raises
    ------
    PendingFileError
        When the file is not JSON or not a pending-outcomes file (an entry that is no outcome with a
        ``device_id`` and a ``decision_id`` included).
    OSError
        When it cannot be read (a directory, no permission, an I/O error).
    """
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        data = json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError included
        raise PendingFileError(f"not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise PendingFileError(f"a JSON {type(data).__name__}, not an object")
    if data.get("version") != VERSION:
        raise PendingFileError(f"version {data.get('version')!r}, not {VERSION}")
    outcomes = data.get("outcomes")
    if not isinstance(outcomes, list):
        raise PendingFileError("no list of outcomes")
    for i, outcome in enumerate(outcomes):
        if not isinstance(outcome, dict):
            raise PendingFileError(f"outcome {i} is a JSON {type(outcome).__name__}, not an object")
        for key in ("device_id", "decision_id"):
            if not isinstance(outcome.get(key), str) or not outcome[key]:
                raise PendingFileError(f"outcome {i} has no {key}")
    return outcomes


def load_pending(path: Path, device_id: str, bound: int) -> LoadedPending:
    """The outcomes kept at ``path`` for ``device_id``, at most the newest ``bound`` of them (oldest dropped first).

    Never raises for the file: one that cannot be read or is not a pending-outcomes file (:func:`read_pending`) is
    moved aside to ``NAME.corrupt`` and reported in ``problem`` (the caller logs it), with no outcome.
    """
    try:
        outcomes = read_pending(path)
    except (PendingFileError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        problem = (
            f"cannot be read ({reason})" if isinstance(exc, OSError) else f"is not a pending-outcomes file: {reason}"
        )
        aside = path.with_name(path.name + CORRUPT_SUFFIX)
        try:
            os.replace(path, aside)
        except OSError as move:
            return LoadedPending(problem=f"{problem}; moving it aside failed ({move.strerror or move})")
        return LoadedPending(problem=problem, moved_to=aside)
    if outcomes is None:
        return LoadedPending()
    mine = [o for o in outcomes if o["device_id"] == device_id]
    keep = mine[-bound:] if bound > 0 else []
    return LoadedPending(keep, other_device=len(outcomes) - len(mine), over_bound=len(mine) - len(keep))


def write_pending(path: Path, outcomes: Iterable[dict[str, Any]]) -> None:
    """Atomically replace ``path`` with ``outcomes`` (oldest first), mode 0600; remove it when there is none.

    The directory is not created (the unit's ``StateDirectory=`` or the tmpfiles.d entry does).

    Raises
    ------
    OSError
        When the directory is missing or not writable, or the disk is full (nothing is replaced then).
    TypeError, ValueError
        When an outcome is not JSON-serialisable.
    """
    items = list(outcomes)
    if not items:
        path.unlink(missing_ok=True)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fh.fileno(), 0o600)
            json.dump({"version": VERSION, "outcomes": items}, fh, separators=(",", ":"))
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    """fsync ``directory`` so the rename survives a power loss (best effort: not every file system allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
