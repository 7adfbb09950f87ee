"""Journal of applied changes: the prior state (snapshot), where it was taken, and every operation run.

The journal file (JSON, replaced atomically after each entry) survives a crash, so
``edgepath-agent rollback`` in another process can restore the state that existed
before the agent's *first* change: the snapshot is written once and kept until a
rollback succeeds. Entries are an audit trail (op, arguments, argv, ok/error, time).

The file records the network namespace the snapshot was taken in (``netns``: a name, or
``null`` for the namespace the agent itself runs in), so a rollback restores it *there*
(:func:`rollback_netns`), whatever namespace ``rollback`` is started from. Journals written
before it was recorded (``"version": 1``) carry no ``netns``: their rollback goes where it is
told (``--netns``).

**One record per file, whichever backend wrote it.** The ``command`` and ``netlink`` backends write this
journal (the same snapshot format: either restores the other's); the ``networkmanager`` backend writes its
own record to the same ``journal`` path (``{"backend": "networkmanager", "netns", "interfaces": [...], "sysctls":
{name: original value}}``, :mod:`edgepath_agent.applier.networkmanager`; older ones without ``netns`` and
``sysctls``). A run with one kind of backend while the file still holds the
other kind's record (an earlier run that did not roll back: a crash, a failed rollback, then ``backend``
switched in agent.toml) would write its record over it and leave that run's changes on the device with no
record to roll them back from. So such a run is refused before it changes anything
(:func:`check_for_run`, and :meth:`Journal.begin` / the NetworkManager applier as a backstop), naming the
record and the command that restores it (``edgepath-agent rollback --journal PATH``, which restores either
kind); ``run`` exits 78. Two files, each rolled back in turn, would not give back the state before the agent
either: both backends change the same devices' routes and MPTCP endpoints, so the second backend's "prior
state" would already hold the first one's changes.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from edgepath_agent import safety
from edgepath_agent.applier.state import NetState

#: Version of the journal file written now (2: ``netns`` recorded with the snapshot).
VERSION = 2


class JournalError(ValueError):
    """The journal file cannot be used: unreadable (not a regular file, not JSON, not a journal), not writable,
    or holding another network namespace's state. The message names the file."""


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _where(netns: str | None) -> str:
    return f"network namespace {netns}" if netns else "the agent's own (host) network namespace"


#: The backends that write a :class:`Journal` (the other one, ``networkmanager``, writes its own record).
JOURNAL_BACKENDS = ("command", "netlink", "dry-run")


def other_backend_record(path: Path, recorded: str, changed: str, backend: str) -> str:
    """The refusal when ``path`` holds backend ``recorded``'s record of ``changed`` (not rolled back) and a run with
    ``backend``, which writes another kind of record there, would replace it: names both and the way out."""
    return (
        f"journal {path} holds the record of {changed} that an earlier run with backend = {recorded} made and did "
        f"not roll back; this run uses backend = {backend}, whose own record would replace it and leave those "
        f"changes on the device without a rollback: restore them first with `edgepath-agent rollback --journal "
        f"{path}`, then start the agent again"
    )


class Journal:
    """Snapshot + entries, persisted at ``path`` (in memory only when ``path`` is ``None``).

    Attributes
    ----------
    netns
        Network namespace the snapshot was taken in (``None``: the agent's own).
    netns_recorded
        Whether the file said so (``False`` for a version-1 journal, or before :meth:`begin`).
    other_backend
        ``"networkmanager"`` when the file holds that backend's record instead (no snapshot: see the module
        docstring), ``None`` otherwise; :attr:`other_interfaces` are the interfaces it changed,
        :attr:`other_sysctls` the original values (``{name: value}``) of the sysctls it changed (in :attr:`netns`).

    Raises
    ------
    JournalError
        When ``path`` exists but is not a journal: a directory, unreadable (other than for permission), not
        JSON, or JSON that is not a journal's (a ``networkmanager`` record's ``sysctls`` included: names outside
        :data:`edgepath_agent.safety.SYSCTL_ALLOWLIST` or values not of their shape).
    PermissionError
        When ``path`` exists and this process may not read it.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.snapshot: NetState | None = None
        self.entries: list[dict[str, Any]] = []
        self.netns: str | None = None
        self.netns_recorded = False
        self.other_backend: str | None = None
        self.other_interfaces: list[str] = []
        self.other_sysctls: dict[str, str] = {}
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            text = path.read_text()
        except (FileNotFoundError, NotADirectoryError):  # no journal there (a parent that is a file: none can be)
            return
        except PermissionError:
            raise
        except IsADirectoryError as exc:
            raise JournalError(f"journal {path} is a directory; give the journal file's path") from exc
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise JournalError(f"journal {path} cannot be read: {reason}") from exc
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise TypeError(f"a JSON {type(data).__name__}, not an object")
            netns = data.get("netns")
            if netns is not None and not isinstance(netns, str):
                raise TypeError(f"netns is {netns!r}")
            snapshot = NetState.from_dict(data["snapshot"]) if data.get("snapshot") else None
            entries = list(data.get("entries") or [])
            other = data.get("backend")
            if other is not None and not isinstance(other, str):
                raise TypeError(f"backend is {other!r}")
            if other in JOURNAL_BACKENDS:
                other = None
            interfaces = [str(name) for name in data.get("interfaces") or []] if other is not None else []
            sysctls = dict(data.get("sysctls") or {}) if other is not None else {}
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in sysctls.items()):
                raise TypeError(f"sysctls is {data.get('sysctls')!r}")
            for key, value in sysctls.items():
                safety.check_sysctl(key, value)  # UnsafeDecision (a ValueError): no value this agent records
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise JournalError(
                f"journal {path} is not a journal written by edgepath-agent ({exc}); the state it recorded "
                "cannot be restored from it: check the network state by hand, then move the file away"
            ) from exc
        self.snapshot = snapshot
        self.entries = entries
        self.netns = netns
        self.netns_recorded = "netns" in data
        self.other_backend = other
        self.other_interfaces = interfaces
        self.other_sysctls = sysctls

    @property
    def active(self) -> bool:
        """True when changes may be outstanding (a snapshot exists)."""
        return self.snapshot is not None

    def begin(self, state: NetState, netns: str | None = None, netns_known: bool = True) -> None:
        """Keep ``state``, taken in network namespace ``netns`` (``None``: the agent's own), as the snapshot unless
        one is already kept (earlier run or crash; its namespace is kept with it). ``netns_known=False``: where it
        was taken is not known (a backend that does not say), and not recorded.

        Raises
        ------
        JournalError
            When the journal file cannot be written, or holds another backend's record (:attr:`other_backend`:
            nothing is written, the caller changes nothing).
        """
        if self.other_backend is not None:
            raise JournalError(self._other_record("command or netlink"))
        if self.snapshot is None:
            self.snapshot = state
            self.netns = netns if netns_known else None
            self.netns_recorded = netns_known
            self._save()

    def _other_record(self, backend: str) -> str:
        """:func:`other_backend_record` for the record this file holds (:attr:`other_backend`)."""
        changed = ", ".join(self.other_interfaces) or "no interface"
        what = f"changes to the NetworkManager connections of {changed}"
        if self.other_sysctls:
            what += f" and to {', '.join(sorted(self.other_sysctls))} in {_where(self.netns)}"
        return other_backend_record(self.path or Path(), str(self.other_backend), what, backend)

    def record(self, op: str, args: dict[str, Any], argv: list[str] | None, ok: bool, error: str | None = None) -> None:
        """Append one operation to the audit trail.

        Raises
        ------
        JournalError
            When the journal file cannot be written.
        """
        self.entries.append(
            {"ts": time.time(), "op": op, "args": _jsonable(args), "argv": argv, "ok": ok, "error": error}
        )
        self._save()

    def clear(self) -> None:
        """Forget the snapshot and entries (after a successful rollback) and remove the file."""
        self.snapshot = None
        self.entries = []
        self.netns = None
        self.netns_recorded = False
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    def _save(self) -> None:
        if self.path is None:
            return
        data: dict[str, Any] = {"version": VERSION}
        if self.netns_recorded:
            data["netns"] = self.netns
        data |= {"snapshot": self.snapshot.to_dict() if self.snapshot else None, "entries": self.entries}
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data, indent=1))
            os.replace(tmp, self.path)
        except OSError as exc:
            raise JournalError(f"journal {self.path} cannot be written: {exc.strerror or exc}") from exc

    def check_writable(self) -> None:
        """Make sure the journal file can be written, as the first change will write it (its directory is created
        if missing, as then): a file is created next to it and removed.

        Raises
        ------
        JournalError
            When ``path`` is a directory, or its directory cannot be created or written (a read-only file system,
            a parent that is a file, no permission).
        """
        if self.path is None:
            return
        if self.path.is_dir():
            raise JournalError(f"journal {self.path} is a directory; give the journal file's path")
        directory = self.path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=directory)
        except OSError as exc:
            if isinstance(exc, (FileExistsError, NotADirectoryError)):  # a file where a directory should be
                reason = f"{exc.filename or directory} is not a directory"
            else:
                reason = f"{directory}: {exc.strerror or exc}"
            hint = " (or run as the agent's user or root)" if exc.errno == errno.EACCES else ""
            raise JournalError(
                f"journal {self.path} cannot be written ({reason}): give a writable path with --journal or "
                f"journal in the settings{hint}"
            ) from exc
        os.close(fd)
        os.unlink(probe)


def check_for_run(path: Path, netns: str | None, backend: str = "command") -> Journal:
    """The journal ``run`` will use with applier ``backend`` (``command``, ``netlink`` or ``networkmanager``),
    checked before anything is touched: readable when it exists, writable, holding no record of the other kind of
    backend that an earlier run did not roll back (see the module docstring), and when it still holds a snapshot
    (a run that did not restore it) or a ``networkmanager`` record of original sysctl values, one taken in ``netns``.

    Raises
    ------
    JournalError
        When the file is not a journal, cannot be written, holds the other kind of backend's record (the
        ``networkmanager`` one for ``command``/``netlink``, a snapshot for ``networkmanager``), or the state of
        another network namespace (the message says to roll that back first, naming the command).
    """
    try:
        journal = Journal(path)
    except PermissionError as exc:
        raise JournalError(f"journal {path} cannot be read ({exc.strerror}): run as the agent's user or root") from exc
    if backend in JOURNAL_BACKENDS and journal.other_backend is not None:
        raise JournalError(journal._other_record(backend))
    if backend not in JOURNAL_BACKENDS and journal.active:
        raise JournalError(
            other_backend_record(
                path,
                "command or netlink",
                f"changes to the MPTCP endpoints, routes and sysctls of {_where(journal.netns)}",
                backend,
            )
        )
    if (journal.active or journal.other_sysctls) and journal.netns_recorded and journal.netns != netns:
        raise JournalError(
            f"journal {path} holds the state of {_where(journal.netns)}, which an earlier run did not restore, "
            f"but this run manages {_where(netns)}: restore it first with `edgepath-agent rollback --journal {path}`"
        )
    journal.check_writable()
    return journal


def rollback_netns(journal: Journal, requested: str | None) -> str | None:
    """Network namespace a rollback of ``journal`` must act in: the one the journal recorded; ``requested``
    (``--netns``) when the journal recorded none (version 1).

    Raises
    ------
    JournalError
        When ``requested`` names another namespace than the journal recorded (restoring one namespace's
        state in another would change the wrong routes and endpoints).
    """
    if not journal.netns_recorded:
        return requested
    if requested is not None and requested != journal.netns:
        raise JournalError(
            f"journal {journal.path} recorded the state of {_where(journal.netns)}, not of network namespace "
            f"{requested}: its rollback acts where the state was taken; leave out --netns"
        )
    return journal.netns
