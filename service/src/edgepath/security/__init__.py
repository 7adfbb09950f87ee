"""Security at the edge: authentication, rate limits, bounded learning (see SECURITY.md).

:func:`build_security` turns :class:`~edgepath.settings.Settings` into one
:class:`EdgeSecurity` bundle that ``main.py`` hands to both transports (who is
calling, request budget) and to the decision plane (outcome guard).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from edgepath.security.auth import Authenticator, TokenFile, declared_principal
from edgepath.security.plausibility import OutcomeGuard
from edgepath.security.ratelimit import RateLimiter, enforce, in_process, refuse_if_limited
from edgepath.settings import Settings
from edgepath.state.backend import MemoryBackend, StateBackend
from edgepath.types import Principal

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "EdgeSecurity", "build_outcome_guard", "build_security"]

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

    async def admit_all(self, principals: Sequence[Principal]) -> None:
        """One request token for each of ``principals`` (the distinct devices of a ``RecommendBatch``).

        With a shared (Redis) limiter the token calls run concurrently, so their round trips overlap instead of
        queueing one after the other (issue 16: 64 sequential round trips were a third of a Redis batch); the
        in-process limiter takes them in order, without a coroutine per device (:meth:`MemoryRateLimiter.take`).
        Raises ``RateLimited`` when any bucket is empty (tokens taken by the others stay taken, as in a sequential
        loop that stops at the first refusal).
        """
        limiter = self.request_limiter
        if limiter is None:
            return
        if in_process(limiter):
            for principal in principals:
                refuse_if_limited(limiter.take(principal.device_id))
            return
        outcomes = await asyncio.gather(*(self.admit(p) for p in principals), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome


async def declared_callers(security: EdgeSecurity | None, device_ids: Sequence[str]) -> list[Principal]:
    """The caller of each item of a batch when authentication is off (both transports): its self-declared device
    (:func:`~edgepath.security.auth.declared_principal`), one request token per distinct device.

    Raises
    ------
    RateLimited
        A device's bucket is empty (:meth:`EdgeSecurity.admit_all`).
    """
    declared = {d: declared_principal(d) for d in device_ids}
    if security is not None:
        await security.admit_all(list(declared.values()))
    return [declared[d] for d in device_ids]


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


def startup_problems(settings: Settings) -> list[str]:
    """What would stop the security setup from starting (missing files, a malformed tokens file, a bad key mode)."""
    problems = []
    for name in ("auth_tokens_file", "tls_cert_file", "tls_key_file", "tls_client_ca_file"):
        path = getattr(settings, name)
        if path is not None and not path.is_file():
            problems.append(f"{name} {path} is not a readable file")
    if settings.auth_tokens_file is not None and settings.auth_tokens_file.is_file():
        try:
            TokenFile(settings.auth_tokens_file).check()
        except ValueError as exc:
            problems.append(f"auth_tokens_file {settings.auth_tokens_file}: {exc}")
    return problems
