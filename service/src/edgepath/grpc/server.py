"""gRPC transport: ``edgepath.v1.PathService`` and ``grpc.health.v1.Health`` (grpc.aio).

Errors map through :data:`GRPC_STATUS`; validation errors are INVALID_ARGUMENT
with the offending field named in the details (``interfaces[0].rsrp_dbm: ...``) and, as rich error details
(grpcio-status), a ``google.rpc.BadRequest`` listing the invalid fields (the first ten and how many more:
:func:`~edgepath.grpc.observe.rich_status`, bounded to fit a client's metadata limit); shed and rate-limited calls carry
``google.rpc.RetryInfo`` besides the ``retry-after-ms`` trailer. The server offers reflection
(``grpc.reflection.v1alpha``: clients such as grpcurl call it without the proto file), echoes
``x-request-id`` metadata and counts calls per method and code (:mod:`edgepath.grpc.observe`), and can
close connections after ``max_connection_age_ms`` so long-lived device channels re-balance over replicas.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from pydantic import ValidationError

from edgepath.adapters.base import cacheable_context
from edgepath.admission import RETRY_AFTER_MS, Admission
from edgepath.collector import BATCH_COLLECTOR_PAUSE
from edgepath.errors import EdgePathError, ErrorKind, InvalidInput, RateLimited, field_violations
from edgepath.grpc import convert
from edgepath.grpc.observe import CALLER, CallObserver, rich_status, with_call_trailers
from edgepath.plane import DecisionPlane
from edgepath.security import DEFAULT_MAX_MESSAGE_BYTES, EdgeSecurity, batch_callers
from edgepath.security.auth import (
    CallCredential,
    call_credential,
    certificate_not_after,
    declared_principal,
    identity_from_auth_context,
)
from edgepath.types import Principal, RecommendBatch, RecommendRequest
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc

SERVICE_NAME = "edgepath.v1.PathService"
#: Trailing metadata of a ``RecommendStream`` ended by an error: 0-based index of the message that ended it.
MESSAGE_INDEX_KEY = "message-index"

#: The one table from error kinds to gRPC status codes.
GRPC_STATUS: dict[ErrorKind, grpc.StatusCode] = {
    ErrorKind.INVALID_INPUT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.CONFLICT: grpc.StatusCode.ALREADY_EXISTS,
    ErrorKind.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorKind.RATE_LIMITED: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def validation_message(exc: ValidationError) -> str:
    """``"<field>: <message>"`` of the first invalid field (the message alone for the request as a whole), worded
    as REST words it (:func:`edgepath.errors.field_violations`: a validator's own message without pydantic's
    ``"Value error, "``)."""
    field, message = field_violations(exc.errors())[0]
    return f"{field}: {message}" if field else message


def note_caller(caller: Principal | None) -> None:
    """Name the authenticated ``caller`` (None: not authenticated, or authentication off) in the refusal line of the
    call being refused (:data:`~edgepath.grpc.observe.CALLER`, read by
    :meth:`~edgepath.grpc.observe.CallObserver.refused`). Called on the error path only, as the REST routes note
    theirs: an answered call pays nothing for it (a context variable's set is ~0.1-0.2 µs)."""
    if caller is not None:
        CALLER.set(caller.device_id)


async def abort_invalid(
    context: grpc.aio.ServicerContext,
    exc: ValidationError,
    extra_trailing: tuple[tuple[str, str], ...] = (),
    caller: Principal | None = None,
) -> NoReturn:
    """Abort with INVALID_ARGUMENT naming the first invalid field, the first ones in a ``google.rpc.BadRequest``
    (:func:`~edgepath.grpc.observe.rich_status`; ``extra_trailing`` is added to the call's trailing metadata).
    ``caller``: the authenticated caller, named by the call's refusal line (:func:`note_caller`). Never returns:
    ``abort_with_status`` raises (grpc types it ``NoReturn``; grpc has no type information mypy reads)."""
    note_caller(caller)
    violations = field_violations(exc.errors())
    status = rich_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        validation_message(exc),
        violations=violations,
        trailing_metadata=with_call_trailers(context, extra_trailing),
    )
    await context.abort_with_status(status)
    raise AssertionError("unreachable: abort_with_status raises")  # pragma: no cover


async def abort_with(
    context: grpc.aio.ServicerContext,
    exc: EdgePathError,
    extra_trailing: tuple[tuple[str, str], ...] = (),
    caller: Principal | None = None,
) -> NoReturn:
    """Abort the call with the kind's status; an error naming a field carries a ``google.rpc.BadRequest``;
    RESOURCE_EXHAUSTED carries ``retry-after-ms`` trailing metadata and a ``google.rpc.RetryInfo``
    (``extra_trailing`` is added to any call's trailing metadata). ``caller``: as :func:`abort_invalid`'s. Never
    returns (as :func:`abort_invalid`)."""
    note_caller(caller)
    trailing: tuple[tuple[str, str], ...] = extra_trailing
    retry_after_ms = None
    if isinstance(exc, RateLimited):
        retry_after_ms = max(1, math.ceil(exc.retry_after_s * 1000))
        trailing = (("retry-after-ms", str(retry_after_ms)), *extra_trailing)
    violations = [(exc.field, exc.message)] if exc.field else []
    status = rich_status(
        GRPC_STATUS[exc.kind],
        str(exc),
        violations=violations,
        retry_after_ms=retry_after_ms,
        trailing_metadata=with_call_trailers(context, trailing),
    )
    await context.abort_with_status(status)
    raise AssertionError("unreachable: abort_with_status raises")  # pragma: no cover


#: The sections a gRPC reply can carry: the fields of the proto ``Recommendation`` (read from its descriptor). An
#: engine adapter's section that is none of them is served over REST only (:func:`rest_only_sections`).
REPLY_FIELDS: frozenset[str] = frozenset(pb.Recommendation.DESCRIPTOR.fields_by_name)


def rest_only_sections(section_names: frozenset[str]) -> frozenset[str]:
    """The sections of ``section_names`` (a plane's :attr:`~edgepath.plane.DecisionPlane.section_names`) that the
    gRPC reply has no field for: served over REST only; gRPC refuses a request naming one (:func:`refuse_rest_only`)."""
    return section_names - REPLY_FIELDS


def rest_only_notes(plane: DecisionPlane) -> list[str]:
    """The start-up warning of each engine adapter section gRPC cannot carry (:func:`rest_only_sections`)."""
    return [
        f"engine section {name!r} has no field in the proto Recommendation: served over REST only (gRPC refuses a "
        "request naming it with INVALID_ARGUMENT; a gRPC request naming no sections gets a reply without it); "
        "add its message to proto/edgepath/v1/edgepath.proto and grpc/convert.py to carry it"
        for name in sorted(rest_only_sections(plane.section_names))
    ]


def refuse_rest_only(request: RecommendRequest, rest_only: frozenset[str], field_prefix: str = "") -> None:
    """Refuse a request whose ``sections`` name one of ``rest_only`` (:func:`rest_only_sections`): the reply could
    not carry it. A name the service does not serve at all is left to the plane (``unknown section``).

    Raises
    ------
    InvalidInput
        Field ``{field_prefix}sections[j]``.
    """
    for j, name in enumerate(request.sections):
        if name in rest_only:
            raise InvalidInput(
                f"section {name!r} is served over REST only: the gRPC reply (proto Recommendation) has no field for it",
                field=f"{field_prefix}sections[{j}]",
            )


class _CaptureHandlers:
    """Stands in for a server to capture the method handlers generated ``add_*_to_server`` functions register."""

    def __init__(self) -> None:
        self.handlers: dict[str, dict[str, grpc.RpcMethodHandler]] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers[service] = handlers


_Method = TypeVar("_Method", bound=Callable[..., Any])


def takes_wire_bytes(method: _Method) -> _Method:
    """Mark a unary servicer method that is handed its request's wire bytes when served (:func:`add_servicer`),
    and reads them itself: after it has authenticated the caller (a caller without valid credentials costs no
    parse and learns nothing about its bytes: UNAUTHENTICATED, never INVALID_ARGUMENT), and with the compiled
    decoding (:data:`edgepath.grpc.convert.NATIVE_DECODING`) straight from the bytes where it has one, without the
    parse into a message and the serialisation back (issue 16). Such a method takes a message too (a direct
    caller's), and refuses bytes that do not parse with INVALID_ARGUMENT (:data:`~edgepath.grpc.convert.MALFORMED`),
    as the parse in the handler would. It may answer with wire bytes (:data:`~edgepath.grpc.convert.NATIVE_ENCODING`)
    or a message, which is serialised."""
    method.takes_wire_bytes = True  # type: ignore[attr-defined]
    return method


def _serialized_unless_bytes(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A response serializer that passes a reply already in wire bytes through (see :func:`takes_wire_bytes`)."""

    def serialized(reply: Any) -> bytes:
        return reply if isinstance(reply, bytes) else serialize(reply)

    return serialized


def _parse_in_handler(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """Same unary-unary handler, but the request bytes are parsed inside the call (or, for a method marked
    :func:`takes_wire_bytes`, handed to it as they are: every ``PathService`` method is, so that it authenticates
    before it parses).

    grpc answers a request its deserializer rejects with INTERNAL; parsing in
    the handler turns malformed protobuf bytes into INVALID_ARGUMENT instead.
    """
    if handler.stream_stream is not None and handler.request_deserializer is not None:
        return _parse_stream_in_handler(handler)
    if handler.unary_stream is not None and handler.request_deserializer is not None:
        return _parse_unary_stream_in_handler(handler)
    if handler.unary_unary is None or handler.request_deserializer is None:
        return handler
    parse, behavior = handler.request_deserializer, handler.unary_unary
    if getattr(behavior, "takes_wire_bytes", False):
        return grpc.unary_unary_rpc_method_handler(
            behavior, response_serializer=_serialized_unless_bytes(handler.response_serializer)
        )

    async def call(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            request = parse(raw)
        except Exception:  # protobuf DecodeError, or anything a corrupt buffer provokes in the parser
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, convert.MALFORMED)
        return await behavior(request, context)

    return grpc.unary_unary_rpc_method_handler(call, response_serializer=handler.response_serializer)


def _parse_unary_stream_in_handler(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """Same unary-stream handler (``grpc.health.v1.Health/Watch``), its request parsed inside the call, as
    :func:`_parse_in_handler`: malformed bytes are INVALID_ARGUMENT, not grpc.aio's ``UNKNOWN`` "Unexpected <class
    'DecodeError'>" (which the EdgePathServerErrors alert counts as a server fault). The handler is an async
    generator or a coroutine writing with ``context.write()``; the wrapper is the same kind."""
    parse, behavior = handler.request_deserializer, handler.unary_stream

    async def parsed(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            return parse(raw)
        except Exception:  # protobuf DecodeError, or anything a corrupt buffer provokes in the parser
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, convert.MALFORMED)

    if inspect.isasyncgenfunction(behavior):

        async def stream(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            async for reply in behavior(await parsed(raw, context), context):
                yield reply

        call: Any = stream
    else:

        async def write(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            return await behavior(await parsed(raw, context), context)

        call = write
    return grpc.unary_stream_rpc_method_handler(call, response_serializer=handler.response_serializer)


def _parse_stream_in_handler(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """Same stream-stream handler, each request message parsed inside the call (malformed bytes end the stream
    with INVALID_ARGUMENT and trailing metadata ``message-index``, as :func:`_parse_in_handler` for unary calls);
    a reply already in wire bytes (:data:`~edgepath.grpc.convert.NATIVE_ENCODING`) passes the serializer through.

    A message is parsed only when the servicer asks for it: ``RecommendStream`` verifies the call's credential
    first, so a caller without valid credentials gets UNAUTHENTICATED whatever its first message holds."""
    parse, behavior = handler.request_deserializer, handler.stream_stream

    async def call(raw_messages: Any, context: grpc.aio.ServicerContext) -> Any:
        async def parsed() -> Any:
            index = 0
            async for raw in raw_messages:
                try:
                    message = parse(raw)
                except Exception:  # protobuf DecodeError, or anything a corrupt buffer provokes in the parser
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        convert.MALFORMED,
                        trailing_metadata=with_call_trailers(context, ((MESSAGE_INDEX_KEY, str(index)),)),
                    )
                index += 1
                yield message

        async for reply in behavior(parsed(), context):
            yield reply

    return grpc.stream_stream_rpc_method_handler(
        call, response_serializer=_serialized_unless_bytes(handler.response_serializer)
    )


def add_servicer(
    add_to_server: Any,
    servicer: object,
    server: grpc.aio.Server,
    observer: CallObserver | None = None,
) -> None:
    """Register ``servicer`` like ``add_to_server`` (a generated ``add_*Servicer_to_server``) would, each method
    handler wrapped once, here: its requests parsed in the handler (:func:`_parse_in_handler`: malformed bytes are
    INVALID_ARGUMENT, for every service this server registers) and its calls observed by ``observer``
    (:meth:`CallObserver.wrap`: request id, call metrics)."""
    capture = _CaptureHandlers()
    add_to_server(servicer, capture)
    for service, handlers in capture.handlers.items():
        wrapped = {}
        for name, handler in handlers.items():
            handler = _parse_in_handler(handler)
            wrapped[name] = observer.wrap(f"/{service}/{name}", handler) if observer is not None else handler
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, wrapped),))
        server.add_registered_method_handlers(service, wrapped)


class PathServicer(pb_grpc.PathServiceServicer):
    """Thin adapter: proto → domain → plane → proto."""

    def __init__(
        self, plane: DecisionPlane, security: EdgeSecurity | None = None, admission: Admission | None = None
    ) -> None:
        self.plane = plane
        self.security = security
        self.admission = admission or Admission()
        self.inflight = 0
        #: The plane's sections a reply cannot carry (usually none): a request naming one is refused.
        self.rest_only = rest_only_sections(plane.section_names)

    async def admit_call(self, context: grpc.aio.ServicerContext, trailing: tuple[tuple[str, str], ...] = ()) -> None:
        """Take a slot of the bounded in-flight window, or shed the call: RESOURCE_EXHAUSTED with
        ``retry-after-ms`` trailing metadata (past capacity the queue stays bounded instead of latency growing).
        The caller releases the slot with ``self.inflight -= 1``. ``trailing``: more trailing metadata on shedding."""
        if self.admission.shed(self.inflight):
            self.plane.metrics.shed.labels("grpc").inc()
            status = rich_status(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"overloaded: past capacity; retry after {RETRY_AFTER_MS} ms",
                retry_after_ms=RETRY_AFTER_MS,
                trailing_metadata=with_call_trailers(context, (("retry-after-ms", str(RETRY_AFTER_MS)), *trailing)),
            )
            await context.abort_with_status(status)
        self.inflight += 1

    async def principal(self, context: grpc.aio.ServicerContext, declared_device_id: str) -> Principal:
        """The caller: verified client certificate (mTLS), else ``authorization: Bearer`` metadata, else (auth off)
        the self-declared device; then one token from its per-device bucket (:meth:`caller`, then :meth:`device`).

        Raises
        ------
        Unauthenticated, RateLimited
        """
        return await self.device(self.caller(context), declared_device_id)

    def caller(self, context: grpc.aio.ServicerContext) -> Principal | None:
        """The call's verified caller (:meth:`authenticated`), or None when authentication is off or there is no
        security at all; takes no request token. The methods call it before they read their request's bytes.

        Raises
        ------
        Unauthenticated
            Credentials required but missing or invalid.
        """
        return self.authenticated(context) if self.security is not None else None

    async def device(self, caller: Principal | None, declared_device_id: str) -> Principal:
        """The principal of a single request, one request token taken from its bucket: ``caller`` (:meth:`caller`'s,
        once per call), or (authentication off) the self-declared device of the parsed request.

        Raises
        ------
        RateLimited
        """
        principal = caller if caller is not None else declared_principal(declared_device_id)
        if self.security is not None:
            await self.security.admit(principal)
        return principal

    def _credentials(self, context: grpc.aio.ServicerContext) -> tuple[str | None, str | None, float | None]:
        """The call's ``authorization`` metadata, verified client-certificate identity and that certificate's
        ``notAfter``, Unix s (None: absent).

        Raises
        ------
        Unauthenticated
            A client certificate whose validity period cannot be read.
        """
        assert self.security is not None
        metadata = {m.key: m.value for m in context.invocation_metadata() or () if isinstance(m.value, str)}
        peer = not_after = None
        if self.security.auth.mtls:
            auth_context = context.auth_context()
            peer = identity_from_auth_context(auth_context)
            not_after = certificate_not_after(auth_context) if peer else None
        return metadata.get("authorization"), peer, not_after

    def authenticated(self, context: grpc.aio.ServicerContext) -> Principal | None:
        """The verified caller (client certificate, else bearer metadata), or None when authentication is off.

        Raises
        ------
        Unauthenticated
        """
        assert self.security is not None
        authorization, peer, not_after = self._credentials(context)
        return self.security.auth.authenticate(
            authorization=authorization, peer_identity=peer, peer_not_after=not_after
        )

    async def principals(self, context: grpc.aio.ServicerContext, declared_device_ids: list[str]) -> list[Principal]:
        """The caller of each batch item (:meth:`authenticated`, then :meth:`batch_principals`).

        Raises
        ------
        Unauthenticated, RateLimited, InvalidInput
        """
        return await self.batch_principals(self.caller(context), declared_device_ids)

    async def batch_principals(self, caller: Principal | None, declared_device_ids: list[str]) -> list[Principal]:
        """The caller of each item of a batch, its request tokens taken (:func:`~edgepath.security.batch_callers`).

        Raises
        ------
        RateLimited, InvalidInput
            A device's bucket cannot pay for its items.
        """
        return await batch_callers(self.security, caller, declared_device_ids)

    @takes_wire_bytes
    async def Recommend(
        self, request: pb.RecommendRequest | bytes, context: grpc.aio.ServicerContext
    ) -> pb.Recommendation | bytes:
        await self.admit_call(context)
        native = self.plane.settings.native_engines
        caller: Principal | None = None  # for a refusal's log line (note_caller)
        try:
            try:
                caller = self.caller(context)  # a bad credential is refused before the bytes are read
                values = convert.recommend_request_values(request, native)  # read, not yet validated
                req = RecommendRequest.model_validate(values)  # before the token: an invalid request costs none
                if req.sections and self.rest_only:
                    refuse_rest_only(req, self.rest_only)
                rec = await self.plane.recommend(await self.device(caller, req.device_id), req)
            except ValidationError as exc:
                await abort_invalid(context, exc, caller=caller)
            except EdgePathError as exc:
                await abort_with(context, exc, caller=caller)
            return convert.recommendation_wire(rec, cacheable_context(req), native)
        finally:
            self.inflight -= 1

    @takes_wire_bytes
    async def RecommendBatch(
        self, request: pb.RecommendBatchRequest | bytes, context: grpc.aio.ServicerContext
    ) -> pb.RecommendBatchResponse | bytes:
        await self.admit_call(context)
        caller: Principal | None = None  # for a refusal's log line (note_caller)
        try:
            try:
                caller = self.caller(context)  # a bad credential is refused before anything is said about the body
                with BATCH_COLLECTOR_PAUSE:  # the batch's objects live until the reply: nothing to collect
                    batch = convert.recommend_batch_request(request, self.plane.settings.native_engines)
                    if self.rest_only:
                        for i, r in enumerate(batch.requests):
                            if r.sections:
                                refuse_rest_only(r, self.rest_only, f"requests[{i}].")
                    principals = await self.batch_principals(caller, [r.device_id for r in batch.requests])
                    recs = await self.plane.recommend_batch(list(zip(principals, batch.requests, strict=True)))
                    return convert.recommendation_batch_wire(
                        RecommendBatch(recommendations=recs),
                        [cacheable_context(r) for r in batch.requests],
                        self.plane.settings.native_engines,
                    )
            except ValidationError as exc:
                await abort_invalid(context, exc, caller=caller)
            except EdgePathError as exc:
                await abort_with(context, exc, caller=caller)
        finally:
            self.inflight -= 1

    async def RecommendStream(
        self, requests: AsyncIterator[pb.RecommendRequest], context: grpc.aio.ServicerContext
    ) -> Any:
        """One Recommend per message of the stream, replies in order (proto: ``RecommendStream``).

        The credential is the call's: verified when the stream opens, before any message is parsed (a caller
        without valid credentials gets UNAUTHENTICATED, ``message-index`` 0, whatever its first message holds),
        and re-checked for every message (:class:`~edgepath.security.auth.CallCredential`: a device token revoked
        since, within the tokens file's ``recheck_s``, a JWT past its ``exp`` or a client certificate past its
        ``notAfter``, read once when the stream opens, ends the stream with UNAUTHENTICATED at that message; a
        dictionary lookup and a clock read per message, on the authenticator's clock). Each message takes one
        admission slot, is validated, then takes one rate-limit token of its caller (an invalid message costs
        none, as over REST) and is decided, exactly as :meth:`Recommend`. Any error ends the stream with
        Recommend's status and details plus trailing metadata ``message-index`` (0-based); the replies already
        sent stand.
        """
        credential: CallCredential | None = None
        if self.security is not None:
            try:
                authorization, peer, not_after = self._credentials(context)
                credential = call_credential(
                    self.security.auth, authorization=authorization, peer_identity=peer, peer_not_after=not_after
                )
                if credential is not None:  # once per stream: named by the line of any message's refusal
                    note_caller(credential.principal)
            except EdgePathError as exc:
                await abort_with(context, exc, ((MESSAGE_INDEX_KEY, "0"),))
        index = 0
        async for request in requests:
            where = ((MESSAGE_INDEX_KEY, str(index)),)
            await self.admit_call(context, where)
            try:
                try:
                    if credential is not None:
                        credential.check()  # revoked, or JWT/certificate expired since the stream opened
                    req = convert.recommend_request(request, self.plane.settings.native_engines)
                    if req.sections and self.rest_only:
                        refuse_rest_only(req, self.rest_only)
                    # as principal(), after validation (an invalid message costs no token): the call's credential,
                    # else (auth off) the self-declared device
                    principal = credential.principal if credential is not None else declared_principal(req.device_id)
                    if self.security is not None:
                        await self.security.admit(principal)
                    rec = await self.plane.recommend(principal, req)
                except ValidationError as exc:  # Recommend's status and BadRequest details, and the message index
                    await abort_invalid(context, exc, where)
                except EdgePathError as exc:
                    await abort_with(context, exc, where)
                reply = convert.recommendation_wire(rec, cacheable_context(req), self.plane.settings.native_engines)
            finally:
                self.inflight -= 1
            index += 1
            yield reply

    @takes_wire_bytes
    async def ReportOutcome(
        self, request: pb.OutcomeRequest | bytes, context: grpc.aio.ServicerContext
    ) -> pb.OutcomeAck:
        await self.admit_call(context)
        caller: Principal | None = None  # for a refusal's log line (note_caller)
        try:
            try:
                caller = self.caller(context)  # a bad credential is refused before the bytes are parsed
                message = convert.parse_wire(pb.OutcomeRequest, request) if isinstance(request, bytes) else request
                report = convert.outcome_report(message)  # before the token, as REST: an invalid report costs none
                ack = await self.plane.report_outcome(await self.device(caller, report.device_id), report)
            except ValidationError as exc:
                await abort_invalid(context, exc, caller=caller)
            except EdgePathError as exc:
                await abort_with(context, exc, caller=caller)
            return convert.ack_to_proto(ack)
        finally:
            self.inflight -= 1


#: gRPC core's hard limit of pending calls as a multiple of ``max_pending_calls`` (its soft limit).
PENDING_HARD_LIMIT_FACTOR = 2


def create_server(
    plane: DecisionPlane,
    address: str,
    security: EdgeSecurity | None = None,
    credentials: grpc.ServerCredentials | None = None,
    admission: Admission | None = None,
    max_connection_age_ms: int | None = None,
    max_connection_age_grace_ms: int | None = None,
    tracer_provider: Any = None,
    max_pending_calls: int | None = None,
    reuse_port: bool = False,
) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    """Build (not start) the gRPC server on ``address`` ("host:port"; port 0 = any free).

    ``security`` enables authentication and rate limits; ``credentials`` (see
    :func:`edgepath.security.tls.grpc_server_credentials`) serves TLS/mTLS
    instead of plaintext. Received messages are bounded by ``security.max_message_bytes``
    (``DEFAULT_MAX_MESSAGE_BYTES`` without security); replies are not (gRPC's default for a sender): a valid
    ``RecommendBatch`` of 256 decisions replies ~1.1 MB with 16 interfaces of 64-character names, and up to ~190 kB
    per decision for a device with 245 MEC 015 flow filters, so bounding replies by the request bound refused valid
    batches with RESOURCE_EXHAUSTED ("Sent message larger than max") after deciding them. What a reply may weigh is
    the client's choice (``grpc.max_receive_message_length``, 4 MiB by default).

    Past capacity (``admission``, :mod:`edgepath.admission`) new ``PathService`` calls are shed
    (RESOURCE_EXHAUSTED with ``retry-after-ms``); health checks are never shed.

    ``max_connection_age_ms`` (gRPC core's ``grpc.max_connection_age_ms``: a GOAWAY after that age, ±10 %
    jitter) makes long-lived device channels reconnect, so replicas an autoscaler adds get their share;
    calls in flight then have ``max_connection_age_grace_ms`` to finish. None leaves connections open.
    ``tracer_provider`` (OpenTelemetry) traces every call (:mod:`edgepath.tracing`).

    ``max_pending_calls`` bounds the calls gRPC core holds before the serving loop takes them (None: gRPC's
    defaults, 1,000 soft / 3,000 hard). grpc.aio takes one call per loop wake-up, so past capacity the backlog
    waits there, where the in-flight count and the loop lag of ``admission`` cannot see it. Between the bound and
    :data:`PENDING_HARD_LIMIT_FACTOR` times it gRPC core refuses new calls with a probability rising to 1
    (random early detection), beyond it always. Its refusal is ``CANCELLED`` with no retry hint (gRPC core's own
    answer, before any EdgePath code runs), not the ``RESOURCE_EXHAUSTED`` of ``admission``.

    The port is bound here, this server's alone: gRPC core's default (``grpc.so_reuseport`` 1, SO_REUSEPORT) would
    let a second server bind a port one already listens on, and the kernel would split the connections between
    them. ``reuse_port`` keeps SO_REUSEPORT for worker processes that share the port on purpose.

    Returns the server, its health servicer (to flip serving status) and the bound port.

    Raises
    ------
    OSError
        When the address cannot be bound (gRPC core does not say why: in use, not allowed, not an address here).
    """
    max_bytes = security.max_message_bytes if security is not None else DEFAULT_MAX_MESSAGE_BYTES
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", max_bytes),
        ("grpc.so_reuseport", 1 if reuse_port else 0),  # GRPC_ARG_ALLOW_REUSEPORT (gRPC core's default: 1)
    ]
    if max_connection_age_ms is not None:
        options.append(("grpc.max_connection_age_ms", max_connection_age_ms))
    if max_connection_age_grace_ms is not None:
        options.append(("grpc.max_connection_age_grace_ms", max_connection_age_grace_ms))
    if max_pending_calls is not None:
        # gRPC core's bound on calls received but not yet taken by the serving loop (grpc.aio takes one per loop
        # wake-up, so an overload queues there, unseen by Admission): random early detection between the soft and
        # the hard limit (grpc_core::Server's pending_backlog_protector_; defaults 1,000 / 3,000)
        options.append(("grpc.server.max_pending_requests", max_pending_calls))
        options.append(("grpc.server.max_pending_requests_hard_limit", PENDING_HARD_LIMIT_FACTOR * max_pending_calls))
    interceptors: list[Any] = []
    if tracer_provider is not None:
        from edgepath.tracing import grpc_interceptor

        interceptors.append(grpc_interceptor(tracer_provider))
    server = grpc.aio.server(options=options, interceptors=interceptors)
    # Every method observed where it is registered, not by an interceptor (see edgepath.grpc.observe)
    observer = CallObserver(plane.metrics.grpc_call)
    add_servicer(pb_grpc.add_PathServiceServicer_to_server, PathServicer(plane, security, admission), server, observer)
    health_servicer = health.aio.HealthServicer()
    # their requests parsed in the handler too: a malformed one is INVALID_ARGUMENT, not a server fault (UNKNOWN)
    add_servicer(health_pb2_grpc.add_HealthServicer_to_server, health_servicer, server, observer)
    names = (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME)
    add_servicer(  # what reflection.enable_server_reflection registers on a grpc.aio server
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server,
        reflection.aio.ReflectionServicer(names),
        server,
        observer,
    )
    try:
        if credentials is not None:
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpcio's "Failed to bind to address ..." (older versions returned port 0)
        raise OSError(f"gRPC server could not bind {address}: {exc}") from exc
    if not port:
        raise OSError(f"gRPC server could not bind {address}")
    return server, health_servicer, port


async def set_serving(health_servicer: health.aio.HealthServicer, serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, status)


async def set_service_serving(health_servicer: health.aio.HealthServicer, serving: bool) -> None:
    """Readiness on gRPC: only ``edgepath.v1.PathService`` flips (NOT_SERVING while the state store is
    unreachable); ``""`` stays SERVING because the process still decides with its last model."""
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    await health_servicer.set(SERVICE_NAME, status)
