"""Transport-neutral errors of EdgePath.

Every error the decision plane raises on purpose is an :class:`EdgePathError`
with an :class:`ErrorKind`. Each transport maps kinds to its own status codes in
exactly one table (``rest/app.py`` → HTTP, ``grpc/server.py`` → gRPC codes), so
adding an error never means touching handlers.

Exception tree::

    EdgePathError (kind)
    ├── InvalidInput      INVALID_INPUT    HTTP 422 / INVALID_ARGUMENT   (names the field)
    ├── NotFound          NOT_FOUND        HTTP 404 / NOT_FOUND
    ├── Conflict          CONFLICT         HTTP 409 / ALREADY_EXISTS
    ├── PermissionDenied  PERMISSION_DENIED HTTP 403 / PERMISSION_DENIED
    ├── Unavailable       UNAVAILABLE      HTTP 503 / UNAVAILABLE
    ├── Unauthenticated   UNAUTHENTICATED  HTTP 401 / UNAUTHENTICATED    (missing or bad credentials)
    └── RateLimited       RATE_LIMITED     HTTP 429 + Retry-After / RESOURCE_EXHAUSTED + retry-after-ms trailer
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any


class ErrorKind(enum.Enum):
    """What went wrong, independent of the transport."""

    INVALID_INPUT = "invalid_input"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    PERMISSION_DENIED = "permission_denied"
    UNAVAILABLE = "unavailable"
    UNAUTHENTICATED = "unauthenticated"
    RATE_LIMITED = "rate_limited"


class EdgePathError(Exception):
    """Base of all deliberate EdgePath errors.

    Parameters
    ----------
    message:
        Human-readable explanation, safe to return to the caller.
    field:
        Dotted path of the offending request field (``interfaces[0].rsrp_dbm``), if any.
    """

    kind: ErrorKind = ErrorKind.INVALID_INPUT

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class InvalidInput(EdgePathError):
    """The request is malformed or a value is outside its documented range."""

    kind = ErrorKind.INVALID_INPUT


class NotFound(EdgePathError):
    """The referenced object (e.g. a decision id) does not exist or has expired."""

    kind = ErrorKind.NOT_FOUND


class Conflict(EdgePathError):
    """The request conflicts with recorded state."""

    kind = ErrorKind.CONFLICT


class PermissionDenied(EdgePathError):
    """The caller may not act on this object (e.g. another device's decision)."""

    kind = ErrorKind.PERMISSION_DENIED


class Unavailable(EdgePathError):
    """A dependency (state store, model) cannot serve the request right now."""

    kind = ErrorKind.UNAVAILABLE


class Unauthenticated(EdgePathError):
    """No credentials, or credentials that do not verify (bad token, bad signature, no client certificate)."""

    kind = ErrorKind.UNAUTHENTICATED


class RateLimited(EdgePathError):
    """The caller exceeded its request or outcome budget; retry after ``retry_after_s`` seconds.

    Parameters
    ----------
    message:
        Human-readable explanation.
    retry_after_s:
        Seconds until the budget allows the next call (> 0).
    """

    kind = ErrorKind.RATE_LIMITED

    def __init__(self, message: str, *, retry_after_s: float, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.retry_after_s = retry_after_s


class FieldError(ValueError):
    """A validator's ``ValueError`` that names the member it is about, for a rule across members.

    pydantic locates a model validator's error at the model itself (``()`` for the whole request), so a rule such
    as "a subflow history names an interface of the request" would name no field. Raised from a validator, its
    ``field`` (relative to the model that raised it: ``subflow_histories[0].interface``) is appended to pydantic's
    location by :func:`field_violations`, on both transports.

    Parameters
    ----------
    field:
        The member's path within the validated model, as :func:`field_path` writes paths.
    message:
        What is wrong, as callers read it.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def field_path(loc: Sequence[Any]) -> str:
    """A pydantic/FastAPI error location as the field path errors name: ``interfaces[0].rsrp_dbm``.

    ``loc`` is the ``loc`` tuple of a :class:`pydantic.ValidationError` entry (strings and list
    indices); a leading ``body``, ``query`` or ``path`` (FastAPI's request part) is dropped. Both
    transports name invalid fields with it (HTTP 422 ``field``, gRPC INVALID_ARGUMENT details).
    """
    out = ""
    for part in loc:
        if part in ("body", "query", "path") and not out:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


#: pydantic-core error types whose ``msg`` is a prefix (``"Value error, "``, ``"Assertion failed, "``) before the text
#: of the exception a validator of the service raised, which pydantic keeps as ``ctx["error"]``.
_VALIDATOR_RAISED = frozenset({"value_error", "assertion_error"})


def error_message(error: Mapping[str, Any]) -> str:
    """The message of one pydantic error entry as callers are told it: a validator's own ``ValueError`` /
    ``AssertionError`` as the service wrote it (``duplicate interface name 'wlan0'``, from the entry's
    ``ctx["error"]``, without pydantic's ``"Value error, "`` / ``"Assertion failed, "``), pydantic's own message
    otherwise (``Input should be less than or equal to 0``). An entry without context
    (``errors(include_context=False)``) keeps pydantic's message as it is. Both transports word invalid fields with
    it (HTTP problem ``message`` and ``errors``, gRPC ``BadRequest`` field violations).
    """
    msg = str(error.get("msg", "invalid request"))
    ctx = error.get("ctx")
    if error.get("type") in _VALIDATOR_RAISED and isinstance(ctx, Mapping) and "error" in ctx:
        # an exception raised without a message leaves only pydantic's prefix: "Assertion failed"
        return str(ctx["error"]) or msg.rstrip(", ")
    if error.get("type") == "string_pattern_mismatch" and isinstance(ctx, Mapping):
        said = PATTERN_MEANINGS.get(str(ctx.get("pattern")))
        if said is not None:  # a pattern said in words, not as the regular expression (a caller reads this)
            return said
    return msg


#: What a field's pattern means, in words, by pattern (:func:`error_message`); filled where the patterns are
#: defined (:mod:`edgepath.types`), so this module, below it, names none itself.
PATTERN_MEANINGS: dict[str, str] = {}


def field_violations(errors: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(field, message)`` of each entry of a pydantic ``ValidationError.errors()``, in order: the field as
    :func:`field_path` names it, with the member a :class:`FieldError` names below it (``""`` for an error of the
    whole request), the message as :func:`error_message` words it."""
    return [(_error_field(e), error_message(e)) for e in errors]


def _error_field(error: Mapping[str, Any]) -> str:
    """The field path of one pydantic error entry: its location, and below it the member a :class:`FieldError`
    names."""
    path = field_path(error.get("loc", ()))
    ctx = error.get("ctx")
    raised = ctx.get("error") if isinstance(ctx, Mapping) else None
    if not isinstance(raised, FieldError) or not raised.field:
        return path
    if not path:
        return raised.field
    return f"{path}{raised.field}" if raised.field.startswith("[") else f"{path}.{raised.field}"
