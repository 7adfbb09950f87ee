"""Logging for a device daemon: JSON lines (journald-friendly) or plain text, and systemd notifications.

**JSON lines.** One JSON object per record: ``ts`` (ISO 8601 UTC), ``level``,
``logger``, ``message``, and the context fields the agent attaches with
``extra=`` (:data:`CONTEXT_FIELDS`: ``decision_id``, ``interface``, ``primary``,
``backup``, ``congestion_control``, ``step``, ``error``, ...). Under systemd
(``JOURNAL_STREAM`` set: stderr is connected to journald) each line starts with
the syslog priority prefix ``<N>`` (sd-daemon(3)), which journald strips into
``PRIORITY``, so ``journalctl -p warning`` filters and ``MESSAGE`` stays pure JSON.

**Notifications** (sd_notify(3) protocol, Type=notify units): one datagram of
``KEY=VALUE`` lines to the AF_UNIX socket named by ``NOTIFY_SOCKET`` (a leading
``@`` is the abstract namespace). The protocol is small and stable and systemd
documents reimplementing it instead of linking libsystemd; outside systemd it is a no-op.
``WATCHDOG_USEC`` (set by ``WatchdogSec=``) is the interval within which
``WATCHDOG=1`` must be sent.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from typing import Any

#: ``extra=`` keys copied into the JSON object when a record carries them.
CONTEXT_FIELDS = (
    "decision_id",
    "interface",
    "primary",
    "previous_primary",
    "backup",
    "congestion_control",
    "model_version",
    "step",
    "reason",
    "error",
    "service",
    "probe",
    "throughput_bps",
)

#: syslog priorities (RFC 5424 §6.2.1) per logging level, for the journald prefix.
_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see module docstring); ``journald`` adds the ``<N>`` priority prefix."""

    def __init__(self, journald: bool = False) -> None:
        super().__init__()
        self.journald = journald

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_FIELDS:
            if key in record.__dict__:
                out[key] = record.__dict__[key]
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        line = json.dumps(out, default=str, ensure_ascii=False)
        if self.journald:
            return f"<{_PRIORITY.get(record.levelno, 6)}>{line}"
        return line


def under_journald() -> bool:
    """True when stderr is connected to journald (``JOURNAL_STREAM`` names its device:inode)."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    if not stream:
        return False
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return stream == f"{st.st_dev}:{st.st_ino}"


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted (as ``logging.lastResort`` does)."""

    edgepath_agent = True

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def setup_logging(level: str = "INFO", fmt: str = "auto") -> str:
    """Log to stderr from the root logger; ``fmt`` is ``json``, ``text`` or ``auto`` (JSON under journald).

    Replaces a handler an earlier call installed; other handlers are left alone. Returns the
    format chosen. Raises ``ValueError`` for an unknown level or format.
    """
    if fmt not in ("auto", "json", "text"):
        raise ValueError(f"log format {fmt!r}: use auto, json or text")
    journald = under_journald()
    chosen = ("json" if journald else "text") if fmt == "auto" else fmt
    handler = StderrHandler()
    if chosen == "json":
        handler.setFormatter(JsonFormatter(journald=journald))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, StderrHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return chosen


def sd_notify(state: str) -> bool:
    """Send ``state`` (e.g. ``"READY=1\\nSTATUS=..."``) to systemd; False when not under a notify unit."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.send(state.encode(), socket.MSG_DONTWAIT)  # never block the agent on a full queue
    except OSError:
        return False
    return True


def watchdog_interval_s() -> float | None:
    """Seconds within which ``WATCHDOG=1`` is due (``WATCHDOG_USEC`` for this pid), ``None`` without a watchdog."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 1e6 if value > 0 else None
