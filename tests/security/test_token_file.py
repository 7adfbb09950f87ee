"""The tokens file's reload schedule and the authenticator's principals (issue 16: a lookup no longer stats the file).

A clock of the test's own stands in for :func:`time.monotonic`; the file is real and written by a second
:class:`TokenFile`, as ``edgepath tokens add`` / ``revoke`` write it from another process.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from edgepath.errors import Unauthenticated
from edgepath.security.auth import Authenticator, TokenFile


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _touch_later(path: Path) -> None:
    """Move the file's modification time on by 1 s, so a rewrite within the file system's time granularity is
    still a change."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_another_writers_revocation_is_seen_once_recheck_s_has_passed(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    writer = TokenFile(path)
    token = writer.add("dev-a")
    clock = Clock()
    served = TokenFile(path, recheck_s=1.0, clock=clock)
    assert served.lookup(token) is not None
    assert writer.revoke("dev-a") == 1
    _touch_later(path)
    clock.now += 0.5
    assert served.lookup(token) is not None  # within recheck_s the file is not looked at: the documented delay
    clock.now += 0.5
    assert served.lookup(token) is None  # recheck_s passed: the revocation holds


def test_another_writers_new_token_is_seen_once_recheck_s_has_passed(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    clock = Clock()
    served = TokenFile(path, recheck_s=2.0, clock=clock)
    assert served.lookup("ept_nothing-yet") is None  # no file: no tokens
    token = TokenFile(path).add("dev-b")
    clock.now += 1.9
    assert served.lookup(token) is None
    clock.now += 0.1
    entry = served.lookup(token)
    assert entry is not None and entry.device_id == "dev-b"


def test_own_writes_are_seen_at_once_and_recheck_zero_looks_every_time(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    clock = Clock()
    own = TokenFile(path, recheck_s=60.0, clock=clock)
    assert own.lookup("ept_x") is None
    token = own.add("dev-c")
    assert own.lookup(token) is not None  # the clock has not moved: its own write is seen anyway
    own.revoke("dev-c")
    assert own.lookup(token) is None
    every = TokenFile(path, recheck_s=0.0, clock=clock)
    token = TokenFile(path).add("dev-d")
    assert every.lookup(token) is not None
    TokenFile(path).revoke("dev-d")
    _touch_later(path)
    assert every.lookup(token) is None  # same clock reading, looked at again


def test_the_authenticator_keeps_one_principal_per_identity(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    files = TokenFile(path)
    user, admin = files.add("dev-a"), files.add("ops", admin=True)
    auth = Authenticator(tokens=TokenFile(path), admin_ids=["root-cn"])
    first = auth.authenticate(authorization=f"Bearer {user}")
    again = auth.authenticate(authorization=f"Bearer {user}")
    assert first is again and first is not None and first.device_id == "dev-a" and not first.is_admin
    ops = auth.authenticate(authorization=f"Bearer {admin}")
    assert ops is not None and ops.device_id == "ops" and ops.is_admin
    # the same identity with and without the admin flag are two principals
    assert auth.principal("dev-a", admin=True).is_admin and not auth.principal("dev-a").is_admin
    assert auth.principal("root-cn").is_admin  # admin_ids still apply
    with pytest.raises(Unauthenticated):
        auth.authenticate(authorization=f"Bearer {user}x")


def test_a_tampered_jwt_is_refused_in_words_a_caller_can_act_on() -> None:
    """A JWT whose signature was cut or altered was refused as "invalid JWT: Invalid crypto padding" (PyJWT's
    base64 error); now it says the token is malformed, or that its signature does not verify."""
    from edgepath.security.auth import issue_jwt

    key = "k" * 32
    auth = Authenticator(jwt_key=key)
    good = issue_jwt(key, "phone-1")
    assert auth.authenticate(authorization=f"Bearer {good}").device_id == "phone-1"
    header, claims, signature = good.split(".")
    for token, said in (
        # Two characters cut: 41 base64url characters can never decode (one cut decodes to 31 bytes about one
        # time in eighteen, and that token is refused as a failed signature instead).
        (f"{header}.{claims}.{signature[:-2]}", "invalid JWT: malformed (a JWT is three base64url parts"),
        (
            f"{header}.{claims}.{issue_jwt('o' * 32, 'phone-1').split('.')[2]}",
            "invalid JWT: Signature verification failed",
        ),
    ):
        with pytest.raises(Unauthenticated) as refused:
            auth.authenticate(authorization=f"Bearer {token}")
        assert str(refused.value).startswith(said) and "padding" not in str(refused.value)
