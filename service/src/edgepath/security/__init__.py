"""Security at the edge: authentication, rate limits, bounded learning (see SECURITY.md).

:func:`build_security` turns :class:`~edgepath.settings.Settings` into one
:class:`EdgeSecurity` bundle that ``main.py`` hands to both transports (who is
calling, request budget) and to the decision plane (outcome guard).
"""

from __future__ import annotations

import asyncio
import math
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from edgepath.errors import InvalidInput, RateLimited
from edgepath.security.auth import Authenticator, TokenFile, declared_principal
from edgepath.security.plausibility import OutcomeGuard
from edgepath.security.ratelimit import RateLimiter, enforce, in_process
from edgepath.settings import Settings
from edgepath.state.backend import MemoryBackend, StateBackend
from edgepath.types import Principal

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "EdgeSecurity",
    "batch_callers",
    "batch_costs",
    "build_outcome_guard",
    "build_security",
]

#: Bound of a request body / gRPC message without settings (the largest valid JSON request is ~0.5 MB).
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024


@dataclass
class EdgeSecurity:
    """What the transports and the plane need to enforce the security settings."""

    auth: Authenticator
    request_limiter: RateLimiter | None
    guard: OutcomeGuard
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES

    async def admit(self, principal: Principal) -> None:
        """Take one request token for ``principal``; raises ``RateLimited`` when its bucket is empty."""
        await enforce(self.request_limiter, principal.device_id, "requests")

    async def admit_batch(self, costs: Mapping[str, int], decisions: int) -> None:
        """Take each device's tokens of a ``RecommendBatch`` of ``decisions`` items (:func:`batch_costs`): ``cost``
        tokens from the bucket of each ``device id → cost``, one limiter call per device (a device batching its own
        contexts: one call).

        With a shared (Redis) limiter the calls of several devices run concurrently, so their round trips overlap
        instead of queueing one after the other (issue 16: 64 sequential round trips were a third of a Redis batch);
        the in-process limiter takes them in order, without a coroutine per device (:meth:`MemoryRateLimiter.take`).
        A refusal leaves the tokens the other devices' calls took taken, as a sequential loop that stops at the
        first refusal would.

        Raises
        ------
        RateLimited
            A device's bucket holds fewer tokens than the batch needs of it; the message names the batch, the
            retry hint is when they are back.
        InvalidInput
            The batch needs more of one device's tokens than its bucket holds when full (``rate_limit_burst``): no
            wait helps (field ``requests``).
        """
        limiter = self.request_limiter
        if limiter is None or not costs:
            return
        if in_process(limiter):
            for key, cost in costs.items():
                _refuse_batch(limiter.take(key, cost), key, cost, decisions, limiter)
            return
        if len(costs) == 1:
            ((key, cost),) = costs.items()
            _refuse_batch(await limiter.acquire(key, cost), key, cost, decisions, limiter)
            return
        results = await asyncio.gather(*(limiter.acquire(k, c) for k, c in costs.items()), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        for (key, cost), retry in zip(costs.items(), results, strict=True):
            _refuse_batch(retry, key, cost, decisions, limiter)  # type: ignore[arg-type]  # exceptions raised above


def batch_costs(caller: Principal | None, device_ids: Sequence[str]) -> dict[str, int]:
    """The request tokens a ``RecommendBatch`` of items naming ``device_ids`` costs, by bucket (a device id).

    One token per decision, charged to the principal of that decision, so a batch costs what its items would as
    single requests (a device's budget holds the same whatever way it asks):

    * ``caller`` None (authentication off): each item's self-declared device (:func:`declared_principal`: its first
      128 characters) pays for its own items;
    * a device: every item is its own (the plane refuses any other), all ``len(device_ids)`` from its bucket;
    * an admin (a gateway asking for its clients): each item costs the device it names one token, as that device's
      own request would, so a gateway keeps working with per-device budgets and cannot spend more of a device's
      decisions than the device itself could; the call costs the admin one token of its own, as before.
    """
    if caller is not None and not caller.is_admin:
        return {caller.device_id: len(device_ids)}
    costs: dict[str, int] = {}
    for device_id in device_ids:
        key = device_id if caller is not None else declared_principal(device_id).device_id
        costs[key] = costs.get(key, 0) + 1
    if caller is not None:
        costs[caller.device_id] = costs.get(caller.device_id, 0) + 1
    return costs


def _burst_of(limiter: RateLimiter) -> int | None:
    """The bucket capacity of ``limiter`` (a shared one's in-process fallback has the same), when it says."""
    burst = getattr(limiter, "burst", None)
    if burst is None:
        burst = getattr(getattr(limiter, "fallback", None), "burst", None)
    return burst if isinstance(burst, int) else None


def _refuse_batch(retry_after_s: float, key: str, cost: int, items: int, limiter: RateLimiter) -> None:
    """Raise when the ``cost`` tokens of device ``key`` that a batch of ``items`` decisions needs were refused
    (``retry_after_s``: the limiter's answer, s; > 0 refused, ``math.inf`` never possible).

    Raises
    ------
    RateLimited
        ``retry_after_s`` finite and > 0 (its retry hint).
    InvalidInput
        ``retry_after_s`` infinite: ``cost`` is above the bucket's capacity (field ``requests``).
    """
    if retry_after_s <= 0.0:
        return
    if math.isinf(retry_after_s):
        burst = _burst_of(limiter)
        most = f" ({burst})" if burst is not None else ""
        raise InvalidInput(
            f"this batch of {items} decisions needs {cost} request tokens of device {key!r}, more than its "
            f"rate-limit burst{most} holds: send fewer of its decisions per batch",
            field="requests",
        )
    raise RateLimited(
        f"too many requests for device {key!r}: this batch of {items} decisions needs {cost} of its request "
        f"tokens; retry after {math.ceil(retry_after_s * 1000)} ms",
        retry_after_s=retry_after_s,
    )


async def batch_callers(
    security: EdgeSecurity | None, caller: Principal | None, device_ids: Sequence[str]
) -> list[Principal]:
    """The caller of each item of a batch naming ``device_ids`` (both transports): ``caller``, the call's verified
    principal, for every item, or (``caller`` None: authentication off) each item's self-declared device
    (:func:`~edgepath.security.auth.declared_principal`); one request token per decision, charged as
    :func:`batch_costs` says (a device pays for each of its decisions, a gateway's admin identity charges each item
    to the device it names and one token of its own for the call).

    Raises
    ------
    RateLimited
        A device's bucket holds fewer tokens than the batch needs of it (the message names the batch).
    InvalidInput
        The batch needs more of a device's tokens than its full bucket holds (field ``requests``).
    """
    if caller is None:
        declared = {d: declared_principal(d) for d in device_ids}
        principals = [declared[d] for d in device_ids]
    else:
        principals = [caller] * len(device_ids)
    if security is not None:
        await security.admit_batch(batch_costs(caller, device_ids), len(device_ids))
    return principals


def build_outcome_guard(settings: Settings, backend: StateBackend | None = None) -> OutcomeGuard:
    """The plane's outcome guard; its cap and quarantine come from ``backend`` (shared when its store is).

    Without a backend they are in process (:class:`~edgepath.state.backend.MemoryBackend`'s primitives).
    """
    primitives = backend if backend is not None else MemoryBackend()
    cap = settings.outcome_cap_per_window
    outcomes = primitives.rate_limiter(cap / settings.outcome_window_s, cap, "out")
    return OutcomeGuard(settings.plausibility_factor, outcomes, primitives.quarantine(settings.quarantined_devices))


def build_security(
    settings: Settings, backend: StateBackend | None = None, guard: OutcomeGuard | None = None
) -> EdgeSecurity:
    """Build the bundle (``guard``: the plane's, else a new one); budgets come from ``backend`` (as the guard's).

    Raises
    ------
    FileNotFoundError
        ``auth_tokens_file`` is set but does not exist.
    ValueError
        ``auth_tokens_file`` is not a tokens file.
    """
    tokens = None
    if settings.auth_tokens_file is not None:
        if not settings.auth_tokens_file.exists():
            raise FileNotFoundError(
                f"auth_tokens_file {settings.auth_tokens_file} does not exist (create it with `edgepath tokens add`)"
            )
        tokens = TokenFile(settings.auth_tokens_file)
        tokens.check()  # a malformed file stops the start with its reason
    auth = Authenticator(
        tokens=tokens,
        jwt_key=settings.auth_jwt_key.get_secret_value(),
        admin_ids=settings.auth_admin_ids,
        mtls=settings.tls_client_ca_file is not None,
    )
    primitives = backend if backend is not None else MemoryBackend()
    requests: RateLimiter = primitives.rate_limiter(settings.rate_limit_per_s, settings.rate_limit_burst, "req")
    return EdgeSecurity(auth, requests, guard or build_outcome_guard(settings, backend), settings.max_message_bytes)


#: The uid the container image runs as (Dockerfile ``USER 10001``): the files it is given must be readable by it.
IMAGE_UID = 10001


def unreadable_file(name: str, path: Path) -> str | None:
    """Why the file of setting ``name`` (``tls_key_file``, ...) at ``path`` cannot be read by this process, naming
    it, or None when it can. Permission denied names this process's uid, the file's owner and mode, and that the
    container image runs as uid :data:`IMAGE_UID` (a file written on the host by ``edgepath tokens add`` is mode
    0600 and the host user's)."""
    var = f"EDGEPATH_{name.upper()}"
    try:
        with path.open("rb"):
            pass
    except FileNotFoundError:
        return f"{name} ({var}) {path} does not exist"
    except IsADirectoryError:
        return f"{name} ({var}) {path} is a directory, not a file"
    except PermissionError:
        try:
            st = path.stat()
            owner = f" (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})"
        except OSError:
            owner = ""
        return (
            f"{name} ({var}) {path} is not readable by uid {os.geteuid()}, this process{owner}: make it readable "
            f"by the service's user (the container image runs as uid {IMAGE_UID}: e.g. chown {IMAGE_UID} {path})"
        )
    except OSError as exc:
        return f"{name} ({var}) {path} cannot be read: {exc.strerror or exc}"
    return None


def startup_problems(settings: Settings) -> list[str]:
    """What would stop the security setup from starting, one line each naming the setting and its file: a missing
    or unreadable (:func:`unreadable_file`) tokens, certificate, key or client CA file, or a malformed tokens file.
    ``edgepath serve`` checks them before anything is bound (a TLS file read later failed as a port problem)."""
    problems = []
    for name in ("auth_tokens_file", "tls_cert_file", "tls_key_file", "tls_client_ca_file"):
        path = getattr(settings, name)
        if path is not None and (problem := unreadable_file(name, path)):
            problems.append(problem)
    tokens = settings.auth_tokens_file
    if tokens is not None and not any(p.startswith("auth_tokens_file ") for p in problems):
        try:
            TokenFile(tokens).check()
        except ValueError as exc:
            problems.append(f"auth_tokens_file {tokens}: {exc}")
    return problems
