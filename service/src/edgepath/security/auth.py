"""Authentication: who is calling, as a :class:`~edgepath.types.Principal`.

Three credentials are accepted (any subset may be configured; see SECURITY.md):

* **Device tokens** (REST ``Authorization: Bearer …``, gRPC ``authorization``
  metadata). A token is 256 random bits (``secrets.token_urlsafe(32)``) shown
  once by ``edgepath tokens add DEVICE``; the tokens file keeps only its
  SHA-256 digest, so a leaked file does not leak usable tokens. A plain hash
  (no salt, no slow KDF) is enough because the token is high-entropy: there is
  no dictionary to attack (the reasoning of GitHub's and Django REST
  framework's hashed API keys).
* **JWTs** signed with HS256 by a key from settings (``auth_jwt_key``):
  ``sub`` is the device id, ``exp`` is required, ``admin: true`` marks an
  admin. Verified with PyJWT (RFC 7519).
* **mTLS client certificates** (gRPC): the TLS layer verifies the chain
  against ``tls_client_ca_file``; the identity is the certificate's subject CN
  (or, without a CN, its first DNS/URI SAN) read from the call's auth context.
  The handshake checks the validity period once per connection, which may
  outlive it: every call checks the certificate's ``notAfter`` again, and a
  ``RecommendStream`` per message (:func:`certificate_not_after`,
  :class:`CallCredential`).

When no method is configured (``dev`` profile, loopback only) the caller's
self-declared ``device_id`` is trusted, as before authentication existed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import secrets
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509

from edgepath.errors import InvalidInput, Unauthenticated
from edgepath.types import Principal

log = logging.getLogger("edgepath.security")

TOKEN_PREFIX = "ept_"
_MAX_CREDENTIAL_LEN = 4096
_DEVICE_ID_MAX = 128
_PRINCIPALS_KEPT = 65_536


def hash_token(token: str) -> str:
    """Hex SHA-256 digest of a token (what the tokens file stores)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def declared_principal(device_id: str) -> Principal:
    """The self-declared caller ``device_id`` (its first 128 characters) when authentication is off, for both
    transports; one immutable object per device, kept for the 65,536 devices seen last (a gateway's
    ``RecommendBatch`` names up to 256 of them, each a pydantic model of ~1 µs to build; issue 16). Kept by the 128
    characters, so an id of any length the message bound allows holds at most those."""
    return _declared_principal(device_id[:_DEVICE_ID_MAX])


@functools.lru_cache(maxsize=65_536)
def _declared_principal(device_id: str) -> Principal:
    return Principal(device_id=device_id)


def new_token() -> str:
    """A fresh device token: ``ept_`` + 256 random bits, URL-safe base64."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class TokenEntry:
    """One hashed token of the tokens file."""

    sha256: str
    device_id: str
    admin: bool = False
    created_unix: float = 0.0


def parse_tokens(text: str) -> list[TokenEntry]:
    """Entries of a tokens file; raises ``ValueError`` when it is not the documented format."""
    data = json.loads(text or "{}")
    if isinstance(data, dict) and data.get("tokens") == {}:  # an empty mapping is an empty file too
        data["tokens"] = []
    if not isinstance(data, dict) or not isinstance(data.get("tokens", []), list):
        raise ValueError('expected {"version": 1, "tokens": [{"sha256", "device_id", "admin", "created_unix"}]}')
    entries = []
    for e in data.get("tokens", []):
        if not isinstance(e, dict) or not isinstance(e.get("sha256"), str) or not isinstance(e.get("device_id"), str):
            raise ValueError("each token needs string sha256 and device_id")
        entries.append(
            TokenEntry(e["sha256"], e["device_id"], bool(e.get("admin", False)), float(e.get("created_unix", 0.0)))
        )
    return entries


class TokenFile:
    """The hashed-token file: ``{"version": 1, "tokens": [{"sha256", "device_id", "admin", "created_unix"}]}``.

    Written atomically with mode 0600. Reloaded when its modification time changes, so ``edgepath tokens add``
    and ``revoke`` take effect without a restart: a lookup looks at the modification time at most once per
    ``recheck_s`` seconds (1 s by default: a revoked token is refused at most that long after the file changed).
    Looking at it on every lookup, a ``stat`` of the file, was 2.3–2.6 µs of a call's ~7 µs authentication in a
    loop and ~18 µs of ~30 µs in the serving process (issue 16).

    Parameters
    ----------
    path:
        The tokens file (it may not exist yet: no tokens).
    recheck_s:
        Seconds between two looks at the file's modification time on lookup (0: every lookup); writes through
        this object (:meth:`add`, :meth:`revoke`) and :meth:`entries` are seen at once.
    clock:
        Monotonic seconds (:func:`time.monotonic`; tests pass their own).
    """

    def __init__(self, path: Path, recheck_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.recheck_s = recheck_s
        self._clock = clock
        self._next_check = -math.inf
        self._lock = threading.Lock()
        self._mtime_ns: int | None = None
        self._by_hash: dict[str, TokenEntry] = {}

    # -- reading ---------------------------------------------------------------------------------------------
    def entries(self) -> list[TokenEntry]:
        """All entries (reloading the file when it changed); an absent file has none."""
        self._maybe_reload()
        return list(self._by_hash.values())

    def lookup(self, token: str) -> TokenEntry | None:
        """The entry whose digest matches ``token``, or None (the file reloaded first when it changed and
        ``recheck_s`` has passed since the last look)."""
        now = self._clock()  # lookup_digest's body, inline: one call less on every authenticated request
        if now >= self._next_check:
            self._next_check = now + self.recheck_s
            self._maybe_reload()
        return self._by_hash.get(hash_token(token))

    def lookup_digest(self, sha256: str) -> TokenEntry | None:
        """:meth:`lookup` by the token's digest (:func:`hash_token`), as a long call re-checks the token it was
        opened with (a dictionary lookup; the file looked at as in :meth:`lookup`)."""
        now = self._clock()
        if now >= self._next_check:
            self._next_check = now + self.recheck_s
            self._maybe_reload()
        return self._by_hash.get(sha256)

    def _maybe_reload(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            with self._lock:
                self._by_hash, self._mtime_ns = {}, None
            return
        if mtime == self._mtime_ns:
            return
        with self._lock:
            try:
                entries = parse_tokens(self.path.read_text())
            except (OSError, ValueError, TypeError) as exc:
                # Keep the last good entries (none at first: every token is refused); never a server error.
                log.error("tokens file %s unreadable, keeping %d known tokens: %s", self.path, len(self._by_hash), exc)
                entries = list(self._by_hash.values())
            self._by_hash = {e.sha256: e for e in entries}
            self._mtime_ns = mtime

    def check(self) -> int:
        """Parse the file now; returns the number of tokens. Raises ``ValueError`` when it is malformed."""
        return len(parse_tokens(self.path.read_text()))

    # -- writing ---------------------------------------------------------------------------------------------
    def _write(self, entries: Iterable[TokenEntry]) -> None:
        payload = {"version": 1, "tokens": [e.__dict__ for e in entries]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=self.path.parent)
        try:
            os.fchmod(fd, stat.S_IRUSR | stat.S_IWUSR)
            with os.fdopen(fd, "w") as f:
                json.dump(payload, f, indent=1)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._mtime_ns = None
        self._next_check = -math.inf  # this object's own writes are seen by the next lookup

    def add(self, device_id: str, *, admin: bool = False) -> str:
        """Create a token for ``device_id``; returns the token (the only time it exists in clear).

        Raises
        ------
        InvalidInput
            ``device_id`` empty or longer than 128 characters.
        """
        if not device_id or len(device_id) > _DEVICE_ID_MAX:
            raise InvalidInput("device id must have 1..128 characters", field="device_id")
        token = new_token()
        entries = self.entries()
        entries.append(TokenEntry(hash_token(token), device_id, admin, time.time()))
        self._write(entries)
        return token

    def revoke(self, device_id: str) -> int:
        """Delete every token of ``device_id``; returns how many were deleted."""
        entries = self.entries()
        keep = [e for e in entries if e.device_id != device_id]
        self._write(keep)
        return len(entries) - len(keep)


def identity_from_auth_context(auth_context: Mapping[str, Sequence[bytes]]) -> str | None:
    """Device identity of a verified gRPC TLS peer: subject CN, else first DNS/URI SAN; None without a certificate.

    ``auth_context`` is ``ServicerContext.auth_context()``: gRPC fills
    ``x509_common_name`` and ``x509_subject_alternative_name`` only after the
    TLS layer verified the client chain against the configured CA.
    """
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        values = auth_context.get(key) or ()
        for value in values:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            if text:
                return text
    return None


def certificate_not_after(auth_context: Mapping[str, Sequence[bytes]]) -> float | None:
    """The ``notAfter`` of a verified gRPC TLS peer's certificate, Unix s (UTC); None without a certificate.

    ``auth_context`` is ``ServicerContext.auth_context()``: gRPC puts the peer's leaf certificate, PEM, under
    ``x509_pem_cert`` once the TLS layer verified it; it is parsed with ``cryptography`` (~11 µs for a P-256
    certificate) once per distinct certificate (a bounded cache: each unary call reads it again). RFC 5280
    §4.1.2.5: the certificate is valid through ``notAfter`` inclusive.

    Raises
    ------
    Unauthenticated
        A certificate is there but does not parse (the stream is refused rather than served without a bound).
    """
    pems = auth_context.get("x509_pem_cert") or ()
    if not pems:
        return None
    return _pem_not_after(pems[0] if isinstance(pems[0], bytes) else str(pems[0]).encode())


@functools.lru_cache(maxsize=4096)
def _pem_not_after(pem: bytes) -> float:
    """A PEM certificate's ``notAfter``, Unix s (cached: a device's connection presents the same bytes on every
    call; an unreadable one raises and is not cached)."""
    try:
        certificate = x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise Unauthenticated("client certificate unreadable: its validity period cannot be checked") from None
    return certificate.not_valid_after_utc.timestamp()


class Authenticator:
    """Turns credentials into a :class:`Principal`.

    Parameters
    ----------
    tokens:
        Hashed-token file, or None.
    jwt_key:
        HS256 key, or empty for no JWTs.
    admin_ids:
        Identities treated as admins (in addition to tokens/JWTs flagged admin).
    mtls:
        True when gRPC verifies client certificates (their CN is an identity).
    clock:
        Wall-clock Unix seconds (:func:`time.time`) against which a long call re-checks a JWT's ``exp`` and a
        client certificate's ``notAfter`` (:class:`CallCredential`); tests set their own. PyJWT checks ``exp``
        when a credential is first verified with its own clock.
    """

    def __init__(
        self,
        tokens: TokenFile | None = None,
        jwt_key: str = "",
        admin_ids: Iterable[str] = (),
        mtls: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tokens = tokens
        self.jwt_key = jwt_key
        self.admin_ids = frozenset(admin_ids)
        self.mtls = mtls
        self.clock = clock
        # One immutable Principal per identity and admin flag (a pydantic model, ~1.2 µs to build per call)
        self._principal = functools.lru_cache(maxsize=_PRINCIPALS_KEPT)(self._new_principal)

    @property
    def required(self) -> bool:
        """True when callers must present credentials (some method is configured)."""
        return self.tokens is not None or bool(self.jwt_key) or self.mtls

    def principal(self, identity: str, *, admin: bool = False) -> Principal:
        """The principal of a verified ``identity`` (an admin when ``admin`` or named in ``admin_ids``). Principals
        are immutable; one is kept per identity and flag, for the 65,536 used last (as :func:`declared_principal`)."""
        return self._principal(identity, admin)

    def _new_principal(self, identity: str, admin: bool) -> Principal:
        return Principal(device_id=identity, is_admin=admin or identity in self.admin_ids)

    def from_bearer(self, token: str) -> Principal:
        """Verify a bearer token (device token or JWT).

        Raises
        ------
        Unauthenticated
            Unknown token, bad signature, expired or malformed JWT.
        """
        if not token or len(token) > _MAX_CREDENTIAL_LEN:
            raise Unauthenticated("malformed bearer token")
        if self.tokens is not None and token.startswith(TOKEN_PREFIX):
            entry = self.tokens.lookup(token)
            if entry is None:
                raise Unauthenticated("unknown or revoked token")
            return self.principal(entry.device_id, admin=entry.admin)
        if self.jwt_key and token.count(".") == 2:
            try:
                claims: dict[str, Any] = jwt.decode(
                    token, self.jwt_key, algorithms=["HS256"], options={"require": ["sub", "exp"]}
                )
            except jwt.DecodeError as exc:  # not base64url / JSON, or a signature of the wrong shape ("padding")
                if isinstance(exc, jwt.InvalidSignatureError):
                    raise Unauthenticated("invalid JWT: Signature verification failed") from None
                raise Unauthenticated(
                    "invalid JWT: malformed (a JWT is three base64url parts: header.claims.signature)"
                ) from None
            except jwt.PyJWTError as exc:  # expired, missing claims, wrong algorithm: PyJWT's words say which
                raise Unauthenticated(f"invalid JWT: {exc}") from None
            sub = claims.get("sub")
            if not isinstance(sub, str) or not sub or len(sub) > _DEVICE_ID_MAX:
                raise Unauthenticated("JWT sub must be a device id of 1..128 characters")
            return self.principal(sub, admin=claims.get("admin") is True)
        raise Unauthenticated("unknown credential")

    def authenticate(
        self,
        *,
        authorization: str | None = None,
        peer_identity: str | None = None,
        peer_not_after: float | None = None,
    ) -> Principal | None:
        """The caller's principal, or None when authentication is off (any credential is then ignored).

        ``authorization`` is the raw ``Authorization`` header / metadata value
        (``Bearer <token>``); ``peer_identity`` the verified client-certificate
        identity, ``peer_not_after`` that certificate's ``notAfter``, Unix s (:func:`certificate_not_after`). A
        verified certificate wins over a bearer token. The TLS layer checked the certificate's validity period
        when the connection opened; a connection outlives it, so each call checks ``notAfter`` again on
        :attr:`clock` (valid through that second, RFC 5280 §4.1.2.5).

        Raises
        ------
        Unauthenticated
            Credentials required but missing, or present but invalid (also a client certificate past its
            ``notAfter``).
        """
        if not self.required:  # authentication off (dev on loopback): credentials are not checked
            return None
        if peer_identity:
            if peer_not_after is not None:
                check_certificate_validity(peer_not_after, self.clock())
            return self.principal(peer_identity)
        if authorization:
            scheme, _, token = authorization.strip().partition(" ")
            if scheme.lower() != "bearer":
                raise Unauthenticated("expected an 'Authorization: Bearer <token>' header")
            return self.from_bearer(token.strip())
        raise Unauthenticated("credentials required: bearer token or client certificate")


@dataclass(frozen=True)
class CallCredential:
    """The verified credential of a long call (a gRPC ``RecommendStream``), re-checked per message by :meth:`check`.

    ``token_sha256``: a device token's digest, looked up again in ``tokens`` (the tokens file is reloaded at most
    once per ``TokenFile.recheck_s``: a revoked token is refused within that); ``expires_at``: a JWT's ``exp``,
    Unix s. ``certificate_not_after``: a client certificate's ``notAfter``, Unix s (the TLS layer checked the
    validity period when the connection opened, not since; valid through that second, RFC 5280 §4.1.2.5).
    ``clock``: wall-clock Unix seconds (:attr:`Authenticator.clock`).
    """

    principal: Principal
    tokens: TokenFile | None = None
    token_sha256: str | None = None
    expires_at: float | None = None
    certificate_not_after: float | None = None
    clock: Callable[[], float] = time.time

    def check(self) -> None:
        """Nothing while the credential still holds (~0.2 µs: a dictionary lookup and a clock read).

        Raises
        ------
        Unauthenticated
            The device token was revoked (no longer in the tokens file), or the JWT or the client certificate has
            expired since the call opened.
        """
        if self.token_sha256 is not None and self.tokens is not None:
            if self.tokens.lookup_digest(self.token_sha256) is None:
                raise Unauthenticated("token revoked")
        if self.expires_at is not None and self.clock() >= self.expires_at:
            raise Unauthenticated("JWT expired")
        if self.certificate_not_after is not None:  # no clock read per message for the other credentials
            check_certificate_validity(self.certificate_not_after, self.clock())


def check_certificate_validity(not_after: float, now: float) -> None:
    """Nothing while a client certificate whose ``notAfter`` is ``not_after`` is valid at ``now`` (both Unix s):
    through that second inclusive (RFC 5280 §4.1.2.5).

    Raises
    ------
    Unauthenticated
        Past ``notAfter``, naming it.
    """
    if now > not_after:
        raise Unauthenticated(f"client certificate expired (notAfter {_utc(not_after)})")


def _utc(unix_s: float) -> str:
    """``unix_s`` as an ISO 8601 UTC time to the second (``2026-01-31T12:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))


def call_credential(
    auth: Authenticator,
    *,
    authorization: str | None = None,
    peer_identity: str | None = None,
    peer_not_after: float | None = None,
) -> CallCredential | None:
    """:meth:`Authenticator.authenticate`, and what keeps the credential checkable for the rest of a long call
    (:class:`CallCredential`, on ``auth``'s clock); None when authentication is off. ``peer_not_after``: the
    verified client certificate's ``notAfter``, Unix s (:func:`certificate_not_after`), which bounds the call when
    the certificate is the credential.

    Raises
    ------
    Unauthenticated
        Credentials required but missing, or present but invalid.
    """
    principal = auth.authenticate(
        authorization=authorization, peer_identity=peer_identity, peer_not_after=peer_not_after
    )
    if principal is None:
        return None
    if peer_identity or not authorization:
        return CallCredential(principal, certificate_not_after=peer_not_after, clock=auth.clock)
    token = authorization.strip().partition(" ")[2].strip()
    if auth.tokens is not None and token.startswith(TOKEN_PREFIX):
        return CallCredential(principal, tokens=auth.tokens, token_sha256=hash_token(token), clock=auth.clock)
    # a JWT authenticate() verified: its exp (required) bounds the call
    claims = jwt.decode(token, options={"verify_signature": False})
    try:
        expires_at = float(claims["exp"])
    except OverflowError:  # an integer PyJWT took, past float's range (10**400): a time no call outlives
        expires_at = math.inf
    return CallCredential(principal, expires_at=expires_at, clock=auth.clock)


def issue_jwt(key: str, device_id: str, *, ttl_s: float = 3600.0, admin: bool = False) -> str:
    """An HS256 JWT for ``device_id`` valid ``ttl_s`` seconds (for operators and tests)."""
    now = int(time.time())
    claims: dict[str, Any] = {"sub": device_id, "iat": now, "exp": now + int(ttl_s)}
    if admin:
        claims["admin"] = True
    return jwt.encode(claims, key, algorithm="HS256")
