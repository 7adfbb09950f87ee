"""Process logging: plain text (default) or one JSON object per line (``log_format = "json"``).

Each record carries ``request_id``: the ``x-request-id`` of the REST request or gRPC call being served (the
caller's, or one the service generated and echoed back; :mod:`edgepath.rest.app`, :mod:`edgepath.grpc.observe`),
``null`` outside a call, so a log line can be joined to the request a client or a proxy saw. JSON lines use
python-json-logger; the fields are ``time``, ``level``, ``logger``, ``message``, ``request_id`` and any
``extra`` passed to the logging call. ``time`` (and a text line's first word) is RFC 3339 in UTC with milliseconds,
``2026-12-02T11:23:38.123Z``: :func:`utc_rfc3339`.

A refused request (4xx, ``INVALID_ARGUMENT``...) is one INFO line of its transport's logger (``edgepath.rest``,
``edgepath.grpc``) through a :class:`RefusalLog`: a device hammering with bad input is bounded to a few lines per
second, the lines left out counted on the next one written.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
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
    and ``(N more refusals not logged)`` in its message). One bucket per transport of a process (the REST app's
    :class:`~edgepath.rest.app.RequestMetrics`, the gRPC server's :class:`~edgepath.grpc.observe.CallObserver`);
    setting the logger's level above INFO silences these lines. Not thread-safe: the serving event loop's thread
    writes them.

    Parameters
    ----------
    logger:
        Where the lines go (INFO).
    rate_per_s, burst:
        Lines per second once ``burst`` lines were written at once (> 0, ≥ 1).
    clock:
        Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        rate_per_s: float = 10.0,
        burst: int = 50,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        self.logger = logger
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.clock = clock
        self.suppressed = 0  # lines left out since the last one written
        self._tokens = float(burst)
        self._at = clock()

    def admit(self) -> bool:
        """Whether a refusal line may be written now (takes a token; when not, counts one line left out). False
        while ``logger`` does not write INFO lines (then nothing is counted)."""
        if not self.logger.isEnabledFor(logging.INFO):
            return False
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now
        if self._tokens < 1.0:
            self.suppressed += 1
            return False
        self._tokens -= 1.0
        return True

    def write(self, message: str, args: tuple[Any, ...], extra: Mapping[str, Any]) -> None:
        """Write one line :meth:`admit` allowed: ``message % args`` with ``extra`` (None values left out), then the
        caller (``extra``'s ``principal`` and ``device_id``, when either is known) and the count of the lines left out
        before it."""
        fields = {k: v for k, v in extra.items() if v is not None}
        if "principal" in fields or "device_id" in fields:  # the caller, when the transport knew it
            message += " (principal %s, device %s)"
            args = (*args, fields.get("principal"), fields.get("device_id"))
        if self.suppressed:
            fields["suppressed"] = self.suppressed
            message += " (%d more refusals not logged)"
            args = (*args, self.suppressed)
            self.suppressed = 0
        self.logger.info(message, *args, extra=fields)


def configure_logging(level: str = "INFO", log_format: str = "text", stream: IO[str] | None = None) -> logging.Handler:
    """Install one handler on the root logger (replacing any) writing ``log_format`` lines to ``stream``
    (stderr by default) at ``level``; returns the handler.

    Raises
    ------
    ValueError
        For a ``log_format`` other than ``text`` or ``json``, or an unknown level name.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
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
