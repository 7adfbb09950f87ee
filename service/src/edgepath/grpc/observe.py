"""What the gRPC transport tells operators and callers besides the answer: request ids, call metrics, rich errors.

- :class:`CallObserver` takes the caller's ``x-request-id`` metadata (or makes one), puts it in the request's
  context (the JSON logs carry it, :mod:`edgepath.logs`) and sends it back as *trailing* metadata (on errors too,
  :func:`with_call_trailers`: the status and its details travel there). Not as initial metadata:
  ``send_initial_metadata`` is a batch of its own on the call, which cost more CPU than the whole Recommend handler
  in a profile of the serving process (py-spy under ``loadtest/bench``; issue 16), while the trailers go out with
  the status anyway. It also counts every call by method and status code, with its latency, under the names of the
  Go and Java gRPC Prometheus interceptors (``grpc_server_handled_total``, ``grpc_server_handling_seconds``), so
  existing gRPC dashboards work; a call the client cancels counts as ``CANCELLED`` (logged at DEBUG, not as a
  server fault), one whose deadline passed as ``DEADLINE_EXCEEDED``. A call refused with a client's error
  (``INVALID_ARGUMENT``, ``UNAUTHENTICATED``, ``RESOURCE_EXHAUSTED``...) is one INFO line, bounded
  (:meth:`CallObserver.refused`); a server fault a WARNING with the same fields, bounded by a
  :class:`~edgepath.logs.FaultLog` of its own. (py-grpc-prometheus only intercepts the
  synchronous server; this service runs ``grpc.aio``.) It wraps each method handler once, where the server registers it
  (:func:`edgepath.grpc.server.add_servicer`), and is no ``grpc.aio`` interceptor: grpc.aio runs interceptors as a
  chain of coroutines on every call, which cost 32–42 µs of the serving loop's CPU per call (issue 16, Session 50:
  148–152 → 108–116 µs per call of a Recommend answered at once, ``loadtest/cpu_per_call.py``'s measure).
- :func:`rich_status` builds the ``grpc.Status`` of an error with ``google.rpc`` details in the
  ``grpc-status-details-bin`` trailer (grpcio-status; https://cloud.google.com/apis/design/errors):
  ``BadRequest`` field violations naming the invalid fields (the first :data:`MAX_FIELD_VIOLATIONS`, then how many
  more: the trailers must fit the client's metadata limit), ``RetryInfo`` for a shed or rate-limited call.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from asgi_correlation_id.context import correlation_id
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from edgepath.logs import (
    CrashLog,
    FaultLog,
    RefusalLog,
    exception_name,
    handler_fault,
    logged_text,
    new_request_id,
)
from edgepath.security.auth import identity_from_auth_context
from edgepath.wire import edgepath_pb2 as pb

REQUEST_ID_KEY = "x-request-id"
log = logging.getLogger("edgepath.grpc")
_SERVER_FAULTS = frozenset({"UNKNOWN", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "DEADLINE_EXCEEDED"})
_REQUEST_ID_OK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:/+=")
_DETAILS_KEY = "grpc-status-details-bin"
#: Unary methods whose request declares its device (``device_id``), for a refusal's log line.
_DECLARING: dict[str, Any] = {
    "/edgepath.v1.PathService/Recommend": pb.RecommendRequest,
    "/edgepath.v1.PathService/ReportOutcome": pb.OutcomeRequest,
}
#: Longest device id and details a refusal's log line carries (characters); the client chooses both.
_LOGGED_CHARS = 256
#: Field violations an error's ``google.rpc.BadRequest`` lists at most (:func:`rich_status`); one more entry says how
#: many were left out.
MAX_FIELD_VIOLATIONS = 10
#: Longest field path, violation description and status message an error carries (UTF-8 bytes; :func:`rich_status`).
MAX_FIELD_BYTES = 128
MAX_DESCRIPTION_BYTES = 128
MAX_MESSAGE_BYTES = 256
#: The authenticated caller's device id of the call being refused, for its log line (:meth:`CallObserver.refused`):
#: set by the servicer as it refuses a call whose caller it had authenticated (:func:`edgepath.grpc.server.
#: note_caller`: on the error path, and once when a stream opens), None otherwise. grpc.aio serves each call in a
#: task of its own, whose context this lives in: one call's caller is never another's.
CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar("edgepath_grpc_caller", default=None)


class _RichStatus(collections.namedtuple("_RichStatus", ("code", "details", "trailing_metadata")), grpc.Status):
    """A ``grpc.Status`` for ``context.abort_with_status``."""


def rich_status(
    code: grpc.StatusCode,
    message: str,
    *,
    violations: Sequence[tuple[str, str]] = (),
    retry_after_ms: int | None = None,
    trailing_metadata: Sequence[tuple[str, str]] = (),
) -> grpc.Status:
    """The status of an error: ``code``, ``message``, and ``google.rpc`` details.

    ``violations`` are ``(field, description)`` pairs (``interfaces[0].rsrp_dbm``) packed as one
    ``google.rpc.BadRequest``; ``retry_after_ms`` (> 0) as ``google.rpc.RetryInfo``. ``trailing_metadata``
    is sent as well (e.g. EdgePath's ``retry-after-ms``, which existing clients read).

    Bounded, whatever the request: the details travel in trailing metadata (``grpc-status-details-bin``, the
    message in ``grpc-message`` too), and a client refuses trailers past its metadata limit (``grpc.max_metadata_size``:
    gRPC core's default is 8 KiB soft, at which it starts refusing at random, and 16 KiB hard, counted decoded):
    it then sees RESOURCE_EXHAUSTED "Stream removed" instead of the status (a RecommendBatch of 256 invalid items
    listed ~22 KB of violations). So the BadRequest lists the first :data:`MAX_FIELD_VIOLATIONS` violations, each
    field cut to :data:`MAX_FIELD_BYTES` and description to :data:`MAX_DESCRIPTION_BYTES` UTF-8 bytes, then, when
    there were more, one entry with field ``""`` (the request as a whole) and the description ``"N more invalid
    fields not listed"``; ``message`` (the status's ``details()``) is cut to :data:`MAX_MESSAGE_BYTES` bytes. At most
    ~3 KB of details and ~0.8 KB of percent-encoded message: under the soft limit with room for the other trailers.
    """
    status = status_pb2.Status(code=code.value[0], message=_clipped(message, MAX_MESSAGE_BYTES))
    if violations:
        listed = [
            error_details_pb2.BadRequest.FieldViolation(
                field=_clipped(field, MAX_FIELD_BYTES), description=_clipped(description, MAX_DESCRIPTION_BYTES)
            )
            for field, description in violations[:MAX_FIELD_VIOLATIONS]
        ]
        if len(violations) > MAX_FIELD_VIOLATIONS:
            more = len(violations) - MAX_FIELD_VIOLATIONS
            listed.append(
                error_details_pb2.BadRequest.FieldViolation(
                    field="", description=f"{more} more invalid field{'s' if more > 1 else ''} not listed"
                )
            )
        bad_request = error_details_pb2.BadRequest(field_violations=listed)
        packed = any_pb2.Any()
        packed.Pack(bad_request)
        status.details.append(packed)
    if retry_after_ms is not None:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(retry_after_ms)
        packed = any_pb2.Any()
        packed.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        status.details.append(packed)
    base = rpc_status.to_status(status)
    return _RichStatus(base.code, base.details, tuple(base.trailing_metadata) + tuple(trailing_metadata))


def _clipped(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` bytes of UTF-8, at a character boundary."""
    if len(text) * 4 <= max_bytes:  # no character takes more than 4 bytes
        return text
    return text.encode()[:max_bytes].decode(errors="ignore")


def with_call_trailers(context: grpc.aio.ServicerContext, trailing: Sequence[tuple[str, Any]]) -> tuple[Any, ...]:
    """``trailing`` after the trailing metadata already set on the call (the request id :class:`CallObserver` put
    there). An abort that names trailing metadata sends exactly those, so every abort that names some passes them
    through this."""
    return (*tuple(context.trailing_metadata() or ()), *trailing)


def request_id_of(metadata: Sequence[Any] | None) -> str:
    """The caller's ``x-request-id`` when it is 1-128 characters of ``[A-Za-z0-9-_.:/+=]``, else a new one
    (:func:`edgepath.logs.new_request_id`: a uuid4 as 32 hex digits)."""
    for item in metadata or ():
        key, value = (item.key, item.value) if hasattr(item, "key") else item
        if key == REQUEST_ID_KEY and isinstance(value, str) and 0 < len(value) <= 128:
            if all(c in _REQUEST_ID_OK for c in value):
                return value
    return new_request_id()


def declared_device_id(method: str, request: Any) -> str | None:
    """The ``device_id`` the request of a refused ``method`` call declares (:data:`_DECLARING`; its wire bytes parsed
    here, on the refusal's path), None for another method, a stream, or bytes that do not parse."""
    message_class = _DECLARING.get(method)
    if message_class is None or request is None:
        return None
    try:
        message = message_class.FromString(request) if isinstance(request, bytes) else request
    except Exception:  # protobuf DecodeError: the call was refused for it
        return None
    device_id = getattr(message, "device_id", None)
    return logged_text(device_id, _LOGGED_CHARS) if isinstance(device_id, str) and device_id else None


def violated_field(context: grpc.aio.ServicerContext) -> str | None:
    """The first field the ``google.rpc.BadRequest`` of an ended call's status details names (:func:`rich_status`),
    None without one."""
    for item in context.trailing_metadata() or ():
        key, value = (item.key, item.value) if hasattr(item, "key") else item
        if key != _DETAILS_KEY or not isinstance(value, bytes):
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except Exception:  # not ours
            return None
        for detail in status.details:
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                return bad.field_violations[0].field if bad.field_violations else None
    return None


#: The status details of a call whose handler raised (:func:`unexpected`); the request id follows.
UNEXPECTED_DETAILS = "internal error: the server's log names it by request id"


async def unexpected(
    method: str, exc: BaseException, context: grpc.aio.ServicerContext, crashes: CrashLog | None = None
) -> None:
    """End a call whose handler raised ``exc`` (a bug, a dependency's error nobody mapped, a panic of
    ``edgepath_native``: :func:`~edgepath.logs.handler_fault`): logged at ERROR with its
    traceback under the call's request id, through ``crashes`` when given (:class:`~edgepath.logs.CrashLog`: the
    first of each method and exception type at once, the repeats bounded and counted by caller; before, one
    traceback per call), answered ``UNKNOWN`` with :data:`UNEXPECTED_DETAILS` and that id. grpc.aio
    would answer ``Unexpected <class '…'>: <message>``, handing the client the exception's type and message, which
    may name internals (a Redis ACL user's denied command, a file path: CWE-209).

    Raises
    ------
    grpc.aio.AbortError
        Always (``context.abort``).
    """
    request_id = correlation_id.get()
    name = exception_name(exc)
    if crashes is None:
        log.error("%s failed: unexpected %s", method, name, exc_info=exc)
    elif crashes.enabled():
        principal = CALLER.get()
        peer = context.peer()
        key = principal or (f"peer {peer.rpartition(':')[0] or peer}" if peer else None)
        if crashes.admit_fault((method, name), key):
            extra = {"transport": "grpc", "method": method, "exception": name, "principal": principal, "peer": peer}
            crashes.write("%s failed: unexpected %s", (method, name), extra, exc_info=exc)
    await context.abort(grpc.StatusCode.UNKNOWN, f"{UNEXPECTED_DETAILS} {request_id}")


def caller_of(context: grpc.aio.ServicerContext) -> tuple[str | None, str]:
    """The caller of a running call as its log line names it: (the verified client certificate's identity, None
    without one; the client's address, ``ipv4:127.0.0.1:50312``). Read while the call runs: grpc.aio reads both from
    the call's C structure, which a call gone no longer has."""
    auth = context.auth_context()
    return (identity_from_auth_context(auth) if auth else None), context.peer()


def cancelled_as(context: grpc.aio.ServicerContext) -> str:
    """The status code of a call whose handler grpc.aio cancelled: ``DEADLINE_EXCEEDED`` when the caller's deadline
    had passed (the server was too slow: a fault of ours), else ``CANCELLED`` (the caller cancelled or went away, or
    the server is stopping: not a fault)."""
    remaining = context.time_remaining()
    return "DEADLINE_EXCEEDED" if remaining is not None and remaining <= 0.0 else "CANCELLED"


class CallObserver:
    """Request id in and out, and per-method call counts and latency (module docstring), for the method handlers
    :meth:`wrap` is given as the server registers them (:func:`edgepath.grpc.server.add_servicer`).

    Parameters
    ----------
    on_call:
        ``on_call(method, code_name, seconds)`` once per finished call, e.g. :meth:`edgepath.metrics.Metrics.grpc_call`;
        ``method`` is the full name ``/edgepath.v1.PathService/Recommend``, ``code_name`` ``OK``, ``NOT_FOUND``...
    refusals:
        Bound of the refused calls' log lines (:meth:`refused`); default: one of its own
        (:class:`~edgepath.logs.RefusalLog`'s default rate) for the server.
    faults:
        Bound of the server faults' log lines, apart from the refusals'; default: one of its own
        (:class:`~edgepath.logs.FaultLog`'s default rate).
    crashes:
        Bound of the ERROR lines with traceback of calls whose handler raised (:func:`unexpected`); default: one of
        its own (:class:`~edgepath.logs.CrashLog`'s default rate).
    """

    def __init__(
        self,
        on_call: Callable[[str, str, float], None] | None = None,
        refusals: RefusalLog | None = None,
        faults: FaultLog | None = None,
        crashes: CrashLog | None = None,
    ) -> None:
        self.on_call = on_call
        self.refusals = refusals or RefusalLog(log)
        self.faults = faults or FaultLog(log)
        self.crashes = crashes or CrashLog(log)

    def refused(
        self,
        method: str,
        code: str,
        elapsed_s: float,
        context: grpc.aio.ServicerContext,
        request: Any,
        caller: tuple[str | None, str] | None = None,
    ) -> None:
        """The log line of a call that did not end OK: a cancel DEBUG, a server fault (:data:`_SERVER_FAULTS`) one
        WARNING line through :attr:`faults`, any other code (the client's error) one INFO line through
        :attr:`refusals` (each bounded, with a budget of its own; the first line of each method and fault code is
        written at once): ``transport`` ``grpc``, ``method``, ``grpc_code``, the status details (``detail``), the
        ``field`` its ``google.rpc.BadRequest`` names, the ``device_id`` the request declared (unary Recommend and
        ReportOutcome), the ``principal``: the device id of the caller the servicer authenticated (client
        certificate, bearer token or JWT; :data:`CALLER`), else a verified client certificate's identity, the
        client's address (``peer``), and the request id of every line. Never a credential or the request itself.
        The lines left out are counted on the next one written, with the callers of most of them (principal, else
        declared device, else ``peer <address>``).

        ``caller``: the call's (certificate identity, peer) read while it ran (:func:`caller_of`; a stream's
        call may be gone by the time its handler's ``finally`` runs, and grpc.aio's ``auth_context()`` and
        ``peer()`` on a call gone read freed memory); None: read them from ``context`` now (a unary call, whose
        handler ends before its call)."""
        extra: dict[str, Any] = {"grpc_code": code, "elapsed_ms": elapsed_s * 1e3}
        if code == "CANCELLED":
            log.debug("%s -> %s", method, code, extra=extra)
            return
        fault = code in _SERVER_FAULTS
        limiter = self.faults if fault else self.refusals
        if not limiter.enabled():
            return
        principal = CALLER.get()
        certified, peer = caller if caller is not None else caller_of(context)
        if principal is None:
            principal = certified
        device_id = None
        if principal is None:
            device_id = declared_device_id(method, request)
        key = principal or device_id or (f"peer {peer.rpartition(':')[0] or peer}" if peer else None)
        if fault:
            if not self.faults.admit_fault((method, code), key):
                return
            message = "failed %s: %s %s"
        elif not limiter.admit(key):
            return
        else:
            message = "refused %s: %s %s"
        if principal is not None:
            device_id = declared_device_id(method, request)
        details = getattr(context, "details", None)
        detail = str((details() if details is not None else None) or "")[:_LOGGED_CHARS]
        args: tuple[Any, ...] = (method, code, detail)
        limiter.write(
            message,
            args,
            {
                **extra,
                "transport": "grpc",
                "method": method,
                "detail": detail or None,
                "field": violated_field(context),
                "principal": principal,
                "device_id": device_id,
                "peer": peer,
            },
        )

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """``handler`` of ``method`` (its full name, ``/edgepath.v1.PathService/Recommend``) with each call observed:
        the same kind of handler, the same (de)serializers."""
        on_call = self.on_call
        refused = self.refused

        def enter(context: grpc.aio.ServicerContext) -> float:
            request_id = request_id_of(context.invocation_metadata())
            correlation_id.set(request_id)
            context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
            return time.perf_counter()

        def leave(
            context: grpc.aio.ServicerContext,
            start: float,
            ended: str | None,
            request: Any,
            caller: tuple[str | None, str] | None = None,
        ) -> None:
            """Count the call; ``ended``: None when the handler returned, ``"UNKNOWN"`` when it raised, and
            :func:`cancelled_as` when grpc.aio cancelled it (a status the handler set wins over each). A call not OK
            is logged (:meth:`refused`; ``request``: the unary call's, None for a stream; ``caller``: a stream's,
            read when it started)."""
            code = context.code()
            if code is None or isinstance(code, int):  # not set: OK unless the handler raised or was cancelled
                name = ended or ("OK" if not code else grpc.StatusCode(code).name)
            else:
                name = code.name
            elapsed_s = time.perf_counter() - start
            if name != "OK":
                refused(method, name, elapsed_s, context, request, caller)
            if on_call is not None:
                on_call(method, name, elapsed_s)

        def wrap_unary(behavior: Any) -> Any:
            async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
                start = enter(context)
                ended: str | None = "UNKNOWN"
                try:
                    response = await behavior(request, context)
                    ended = None
                    return response
                except asyncio.CancelledError:
                    ended = cancelled_as(context)
                    raise
                except grpc.aio.AbortError:
                    raise
                except BaseException as exc:  # a panic of edgepath_native too (pyo3's PanicException)
                    if not handler_fault(exc):
                        raise
                    await unexpected(method, exc, context, self.crashes)
                    raise  # not reached: unexpected() aborts
                finally:
                    leave(context, start, ended, request)

            return call

        def wrap_streaming(behavior: Any) -> Any:
            if inspect.isasyncgenfunction(behavior):

                async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
                    start = enter(context)
                    caller = caller_of(context)  # now, while the call is certainly there
                    ended: str | None = "UNKNOWN"
                    try:
                        async for response in behavior(request, context):
                            yield response
                        # A stream's requests end with its deadline (or its client's cancel) and the handler returns
                        # as if they were done: grpc.aio tells it no more than the time left, so a cancel still
                        # counts OK. Unary handlers are cancelled instead, so their calls pay for no such check.
                        remaining = context.time_remaining()
                        ended = "DEADLINE_EXCEEDED" if remaining is not None and remaining <= 0.0 else None
                    except asyncio.CancelledError:
                        ended = cancelled_as(context)
                        raise
                    except GeneratorExit:
                        # grpc.aio stopped reading the stream at a yield (its client went away while a reply was
                        # being sent) and the event loop closed it later, the call perhaps gone: the client's
                        # cancel, not a fault of ours (it counted UNKNOWN, and its line read the freed call)
                        ended = "CANCELLED"
                        raise
                    except grpc.aio.AbortError:
                        raise
                    except BaseException as exc:  # a panic of edgepath_native too (pyo3's PanicException)
                        if not handler_fault(exc):
                            raise
                        await unexpected(method, exc, context, self.crashes)
                        raise  # not reached: unexpected() aborts
                    finally:
                        leave(context, start, ended, None, caller)

                return stream
            return wrap_unary(behavior)  # a coroutine writing with context.write()

        kinds = (
            ("unary_unary", wrap_unary, grpc.unary_unary_rpc_method_handler),
            ("unary_stream", wrap_streaming, grpc.unary_stream_rpc_method_handler),
            ("stream_unary", wrap_unary, grpc.stream_unary_rpc_method_handler),
            ("stream_stream", wrap_streaming, grpc.stream_stream_rpc_method_handler),
        )
        for attribute, wrap, build in kinds:
            behavior = getattr(handler, attribute)
            if behavior is not None:
                return build(
                    wrap(behavior),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler
