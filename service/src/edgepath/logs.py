"""Process logging: plain text (default) or one JSON object per line (``log_format = "json"``).

Each record carries ``request_id``: the ``x-request-id`` of the REST request or gRPC call being served (the
caller's, or one the service generated and echoed back; :mod:`edgepath.rest.app`, :mod:`edgepath.grpc.observe`),
``null`` outside a call, so a log line can be joined to the request a client or a proxy saw. JSON lines use
python-json-logger; the fields are ``time``, ``level``, ``logger``, ``message``, ``request_id`` and any
``extra`` passed to the logging call. ``time`` (and a text line's first word) is RFC 3339 in UTC with milliseconds,
``2026-12-02T11:23:38.123Z``: :func:`utc_rfc3339`.

A refused request (4xx, ``INVALID_ARGUMENT``...) is one INFO line of its transport's logger (``edgepath.rest``,
``edgepath.grpc``) through a :class:`RefusalLog`: a device hammering with bad input is bounded to a few lines per
second, the lines left out counted on the next one written with the callers of most of them. A call the server
failed (REST 5xx, gRPC ``UNAVAILABLE``...) is one WARNING line through a :class:`FaultLog`: a budget of its own,
the first line of each distinct fault written at once. A handler that raised (a bug, a dependency's error nobody
mapped) is also one ERROR line with its traceback through a :class:`CrashLog`: the first of each route or method and
exception type at once, its repeats bounded and counted (uvicorn's own "Exception in ASGI application" is not
written for a request the service answered).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
import sys
import time
from collections.abc import Callable, Hashable, Mapping
from operator import itemgetter
from typing import IO, Any, TypeVar

from asgi_correlation_id.log_filters import CorrelationIdFilter
from pythonjsonlogger.json import JsonFormatter

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(correlation_id)s]: %(message)s"
#: ``%(asctime)s`` of every line: RFC 3339 (§5.6 ``date-time``) in UTC, milliseconds, ``Z``: :func:`utc_rfc3339`.
RFC3339_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
RFC3339_MSEC_FORMAT = "%s.%03dZ"
_FormatterT = TypeVar("_FormatterT", bound=logging.Formatter)

# RFC 9562 §5.4 (RFC 4122 §4.4): a version-4 UUID is 122 random bits with the version nibble 0100 (bits 76-79 of the
# 128-bit number) and the variant bits 10 (bits 62-63).
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


def new_request_id() -> str:
    """A request id for a call that brought none: a random version-4 UUID as 32 lowercase hex digits, the form of
    ``uuid.uuid4().hex`` (same bits, same source, :func:`os.urandom`) at ~1.2 µs instead of ~2.9: every REST
    request and gRPC call without an ``x-request-id`` gets one (issue 16)."""
    return "%032x" % (int.from_bytes(os.urandom(16), "big") & _UUID4_CLEAR | _UUID4_SET)


def logged_text(text: str, max_chars: int) -> str:
    """A client's ``text`` (a device id it declared, ...) as a log line may carry it: at most ``max_chars``
    characters, a control or other unprintable character escaped (``\\n``), so that it cannot end a text line
    and start one of its own."""
    text = text[:max_chars]
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")[:max_chars]


def utc_rfc3339(formatter: _FormatterT) -> _FormatterT:
    """``formatter`` writing ``%(asctime)s`` as RFC 3339 in UTC with milliseconds (``2026-12-02T11:23:38.123Z``).

    The standard library's own knobs of :meth:`logging.Formatter.formatTime`, which python-json-logger's
    ``asctime`` goes through as well: ``converter`` (``time.gmtime``: UTC instead of local time),
    ``default_time_format`` and ``default_msec_format`` (``.`` and ``Z`` instead of ``,``). (python-json-logger's
    own ``timestamp`` option writes ``datetime.isoformat()``: microseconds and ``+00:00``, and JSON lines only.)
    """
    formatter.converter = time.gmtime
    formatter.default_time_format = RFC3339_TIME_FORMAT
    formatter.default_msec_format = RFC3339_MSEC_FORMAT
    return formatter


class RefusalLog:
    """One INFO line per refused request, at most ``burst`` at once and ``rate_per_s`` per second after that.

    A token bucket (capacity ``burst``, refilled at ``rate_per_s``) in front of ``logger``: a device sending bad
    input in a loop costs a few lines per second, never a line per request (the log would become the serving
    loop's bottleneck). Lines left out are counted and the next line written carries the count (``suppressed``,
    and ``(N more refusals not logged)`` in its message) and whose they were: the callers with the most lines left
    out (``suppressed_by``, up to ``top`` of them with their counts, and ``(most from dev-a 80, dev-b 10)`` in the
    message). The callers are counted by the ``key`` :meth:`admit` is given (the transports give the principal,
    else the declared device, else ``peer <address>``); at most ``max_keys`` of them between two lines written, the
    others counted together: bounded memory whatever the fleet. One bucket per transport of a process (the REST
    app's :class:`~edgepath.rest.app.RequestMetrics`, the gRPC server's :class:`~edgepath.grpc.observe.CallObserver`);
    setting the logger's level above ``level`` silences these lines. Not thread-safe: the serving event loop's
    thread writes them.

    Parameters
    ----------
    logger:
        Where the lines go (at ``level``, INFO by default).
    rate_per_s, burst:
        Lines per second once ``burst`` lines were written at once (> 0, ≥ 1).
    clock:
        Monotonic seconds (tests pass their own).
    level:
        The lines' level.
    what:
        What the lines are about, in the count of those left out (``refusals``).
    max_keys, top:
        Callers counted apart between two lines written (≥ 1), and how many of them a line names (≥ 1).
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        rate_per_s: float = 10.0,
        burst: int = 50,
        clock: Callable[[], float] = time.monotonic,
        level: int = logging.INFO,
        what: str = "refusals",
        max_keys: int = 64,
        top: int = 5,
    ) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        if max_keys < 1 or top < 1:
            raise ValueError("max_keys and top must be >= 1")
        self.logger = logger
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.clock = clock
        self.level = level
        self.what = what
        self.max_keys = max_keys
        self.top = top
        self.suppressed = 0  # lines left out since the last one written
        self.suppressed_by: dict[str, int] = {}  # of those, by caller (at most max_keys callers)
        self._tokens = float(burst)
        self._at = clock()

    def enabled(self) -> bool:
        """Whether ``logger`` writes lines of ``level`` (else nothing is written or counted)."""
        return self.logger.isEnabledFor(self.level)

    def admit(self, key: str | None = None) -> bool:
        """Whether a line may be written now (takes a token; when not, counts one line left out, under ``key``: the
        caller). False while ``logger`` does not write ``level`` lines (then nothing is counted)."""
        if not self.logger.isEnabledFor(self.level):
            return False
        if self._take(self.clock()):
            return True
        self._left_out(key)
        return False

    def _take(self, now: float) -> bool:
        """Refill the bucket up to ``now`` and take a token when there is one."""
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _left_out(self, key: str | None) -> None:
        self.suppressed += 1
        if key is None:
            return
        by = self.suppressed_by
        if key in by:
            by[key] += 1
        elif len(by) < self.max_keys:
            by[key] = 1

    def write(
        self,
        message: str,
        args: tuple[Any, ...],
        extra: Mapping[str, Any],
        exc_info: BaseException | None = None,
    ) -> None:
        """Write one line :meth:`admit` allowed: ``message % args`` with ``extra`` (None values left out), then the
        caller (``extra``'s ``principal`` and ``device_id``, when either is known) and the count of the lines left out
        before it, with the callers of most of them; ``exc_info``'s traceback after it, when given."""
        fields = {k: v for k, v in extra.items() if v is not None}
        if "principal" in fields or "device_id" in fields:  # the caller, when the transport knew it
            message += " (principal %s, device %s)"
            args = (*args, fields.get("principal"), fields.get("device_id"))
        if self.suppressed:
            fields["suppressed"] = self.suppressed
            message += " (%d more %s not logged)"
            args = (*args, self.suppressed, self.what)
            if self.suppressed_by:
                most = heapq.nlargest(self.top, self.suppressed_by.items(), key=itemgetter(1))
                fields["suppressed_by"] = dict(most)
                message += " (most from %s)"
                args = (*args, ", ".join(f"{key} {count}" for key, count in most))
                self.suppressed_by = {}
            self.suppressed = 0
        self.logger.log(self.level, message, *args, extra=fields, exc_info=exc_info)


class FaultLog(RefusalLog):
    """The WARNING lines of calls the server failed (REST 5xx, gRPC ``UNAVAILABLE``, ``UNKNOWN``...): a
    :class:`RefusalLog` of its own (a budget refusals cannot take, and the reverse; by default 1 line/s, burst 5),
    but a fault not seen for ``fresh_s`` seconds is written at once, the bucket empty or not, so the first line of
    each distinct fault (a route or method with a status: :meth:`admit_fault`'s ``fault``) is never left out. An
    outage answering every call 503 is a few lines per second per process, not one per call, each counting (and
    naming the callers of) the ones left out. At most ``max_faults`` distinct faults remembered (the oldest
    forgotten first)."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        rate_per_s: float = 1.0,
        burst: int = 5,
        level: int = logging.WARNING,
        what: str = "server faults",
        fresh_s: float = 60.0,
        max_faults: int = 256,
        **options: Any,
    ) -> None:
        """``options``: :class:`RefusalLog`'s (``clock``, ``max_keys``, ``top``)."""
        super().__init__(logger, rate_per_s=rate_per_s, burst=burst, level=level, what=what, **options)
        self.fresh_s = fresh_s
        self.max_faults = max_faults
        self._seen: dict[Hashable, float] = {}  # fault -> when it was last seen, oldest first

    def admit_fault(self, fault: Hashable, key: str | None = None) -> bool:
        """Whether the line of ``fault`` may be written now: always when it was not seen for ``fresh_s`` (a token
        taken if there is one), else as :meth:`admit` (``key``: the caller)."""
        if not self.logger.isEnabledFor(self.level):
            return False
        now = self.clock()
        seen = self._seen
        last = seen.pop(fault, None)
        if last is None and len(seen) >= self.max_faults:
            del seen[next(iter(seen))]
        seen[fault] = now
        if self._take(now) or last is None or now - last >= self.fresh_s:
            return True
        self._left_out(key)
        return False


class CrashLog(FaultLog):
    """The ERROR lines, each with its traceback, of calls whose handler raised (a bug, a dependency's error nobody
    mapped): a :class:`FaultLog` of its own (by default one line per 10 s after a burst of 3), so the traceback of
    the first occurrence of each distinct crash (:meth:`admit_fault`'s ``fault``: the route or method and the
    exception's type) is written at once, and a bug every request hits is a line now and then counting (and naming
    the callers of) the ones left out, not one traceback per request. Before, each such request wrote its full
    traceback (REST: uvicorn's "Exception in ASGI application"; gRPC: :func:`edgepath.grpc.observe.unexpected`)."""

    def __init__(self, logger: logging.Logger, *, rate_per_s: float = 0.1, burst: int = 3, **options: Any) -> None:
        """``options``: :class:`FaultLog`'s (``clock``, ``fresh_s``, ``max_faults``, ``max_keys``, ``top``); the
        level is ERROR."""
        super().__init__(logger, rate_per_s=rate_per_s, burst=burst, level=logging.ERROR, what="crashes", **options)


def exception_name(exc: BaseException) -> str:
    """``exc``'s type as a crash's line names it: ``module.QualName`` (``builtins.`` left out)."""
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


#: The ``BaseException`` s that are not ``Exception`` s and are no fault of a handler: a task cancelled (a client gone,
#: a deadline passed), a generator closed, the process stopping. Any other (:func:`handler_fault`) is a fault.
CONTROL_FLOW: tuple[type[BaseException], ...] = (asyncio.CancelledError, GeneratorExit, KeyboardInterrupt, SystemExit)


def handler_fault(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a request's handler, is a fault to answer as one (500, ``UNKNOWN``): any
    ``Exception``, and any other ``BaseException`` but :data:`CONTROL_FLOW`. A Rust panic of ``edgepath_native``
    surfaces in Python as pyo3's ``PanicException``, a ``BaseException``: an ``except Exception`` let it past, and
    grpc.aio then sent no status at all (the call hung until its deadline, forever without one) and REST answered
    uvicorn's ``text/plain`` 500, its traceback logged unbounded. A group (a task group's) is a fault when one of
    its exceptions is."""
    if isinstance(exc, BaseExceptionGroup):
        return any(handler_fault(e) for e in exc.exceptions)
    return not isinstance(exc, CONTROL_FLOW)


class Panicked(Exception):
    """A handler's fault that is no ``Exception`` (:func:`handler_fault`; pyo3's ``PanicException``), raised from it
    as one, for the handlers of unexpected errors that take ``Exception`` s (Starlette's ``ServerErrorMiddleware``)."""


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler writing to whatever ``sys.stderr`` is when a record is emitted (as Python's last-resort
    handler does), not the stream it was when logging was configured: a command run in process with its stderr
    captured and then closed (typer's ``CliRunner``, an embedding program) leaves no handler on a closed file."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property  # type: ignore[override]
    def stream(self) -> IO[str]:
        return sys.stderr


def configure_logging(level: str = "INFO", log_format: str = "text", stream: IO[str] | None = None) -> logging.Handler:
    """Install one handler on the root logger (replacing any) writing ``log_format`` lines to ``stream``
    (by default ``sys.stderr``, looked up at each record: :class:`_StderrHandler`) at ``level``; returns the handler.

    Raises
    ------
    ValueError
        For a ``log_format`` other than ``text`` or ``json``, or an unknown level name.
    """
    handler: logging.StreamHandler = _StderrHandler() if stream is None else logging.StreamHandler(stream)  # type: ignore[type-arg]
    handler.addFilter(CorrelationIdFilter(default_value=None))
    if log_format == "json":
        handler.setFormatter(
            utc_rfc3339(
                JsonFormatter(
                    "%(asctime)s %(levelname)s %(name)s %(message)s %(correlation_id)s",
                    rename_fields={
                        "asctime": "time",
                        "levelname": "level",
                        "name": "logger",
                        "correlation_id": "request_id",
                    },
                )
            )
        )
    elif log_format == "text":
        handler.setFormatter(utc_rfc3339(logging.Formatter(TEXT_FORMAT)))
    else:
        raise ValueError(f"unknown log format {log_format!r}: text or json")
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
