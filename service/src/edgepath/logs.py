"""Process logging: plain text (default) or one JSON object per line (``log_format = "json"``).

Each record carries ``request_id``: the ``x-request-id`` of the REST request or gRPC call being served (the
caller's, or one the service generated and echoed back; :mod:`edgepath.rest.app`, :mod:`edgepath.grpc.observe`),
``null`` outside a call, so a log line can be joined to the request a client or a proxy saw. JSON lines use
python-json-logger; the fields are ``time``, ``level``, ``logger``, ``message``, ``request_id`` and any
``extra`` passed to the logging call.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import IO

from asgi_correlation_id.log_filters import CorrelationIdFilter
from pythonjsonlogger.json import JsonFormatter

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(correlation_id)s]: %(message)s"

# RFC 9562 §5.4 (RFC 4122 §4.4): a version-4 UUID is 122 random bits with the version nibble 0100 (bits 76-79 of the
# 128-bit number) and the variant bits 10 (bits 62-63).
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


def new_request_id() -> str:
    """A request id for a call that brought none: a random version-4 UUID as 32 lowercase hex digits, the form of
    ``uuid.uuid4().hex`` (same bits, same source, :func:`os.urandom`) at ~1.2 µs instead of ~2.9: every REST
    request and gRPC call without an ``x-request-id`` gets one (issue 16)."""
    return "%032x" % (int.from_bytes(os.urandom(16), "big") & _UUID4_CLEAR | _UUID4_SET)


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
    elif log_format == "text":
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    else:
        raise ValueError(f"unknown log format {log_format!r}: text or json")
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
