"""Refusal to start insecurely: non-loopback without authentication (any profile), prod without auth + TLS."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from edgepath.security.auth import TokenFile
from edgepath.settings import Settings, describe_errors, is_loopback
from pydantic import ValidationError


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.4.5", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.0.0.1", "192.168.1.10", "edge.example", "2001:db8::1"])
@pytest.mark.parametrize("profile", ["dev", "prod"])
def test_public_address_without_auth_is_refused(host: str, profile: str) -> None:
    with pytest.raises(ValidationError, match="without authentication"):
        Settings(host=host, profile=profile)


def test_public_address_with_tokens_is_allowed_in_dev(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    TokenFile(tokens).add("dev-a")
    assert Settings(host="0.0.0.0", auth_tokens_file=tokens).auth_enabled


def test_prod_requires_auth_and_tls(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    TokenFile(tokens).add("dev-a")
    with pytest.raises(ValidationError, match=r"prod requires authentication \(.*\) and TLS \(.*\), which is not"):
        Settings(profile="prod")
    with pytest.raises(ValidationError, match=r"prod requires TLS \(tls_cert_file \+ tls_key_file\), which") as caught:
        Settings(profile="prod", auth_tokens_file=tokens)  # auth but no TLS: only what is missing is named
    assert "authentication" not in str(caught.value)
    ok = Settings(profile="prod", auth_tokens_file=tokens, tls_cert_file=tmp_path / "c", tls_key_file=tmp_path / "k")
    assert ok.tls_enabled and ok.auth_enabled


def test_tls_files_come_in_pairs(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="go together"):
        Settings(tls_cert_file=tmp_path / "c")
    with pytest.raises(ValidationError, match="mTLS"):
        Settings(tls_client_ca_file=tmp_path / "ca")


def _serve(*args: str, columns: str | None = None) -> subprocess.CompletedProcess[str]:
    """``edgepath serve`` with stderr to a pipe; ``columns`` sets ``COLUMNS`` (default: unset, as in CI)."""
    cmd = [sys.executable, "-m", "edgepath.cli", "serve", "--grpc-port", "0", "--http-port", "0", *args]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)


def _error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one plain ``Error: …`` line a CLI writes to a non-terminal (no rich box, no wrapping)."""
    lines = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, proc.stderr
    assert not any(ch in proc.stderr for ch in "│╭╰─"), proc.stderr
    return lines[0]


def test_cli_refuses_public_address_without_auth() -> None:
    proc = _serve("--host", "0.0.0.0")
    assert proc.returncode == 2
    assert "refusing to listen on '0.0.0.0' without authentication" in _error_line(proc)


def test_cli_refuses_prod_without_tls(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    TokenFile(tokens).add("dev-a")
    proc = _serve("--profile", "prod", "--auth-tokens-file", str(tokens))
    assert proc.returncode == 2
    assert "prod requires TLS (tls_cert_file + tls_key_file), which is not configured" in _error_line(proc)


def test_cli_tokens_add_prints_once_and_stores_hash(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    proc = subprocess.run(
        [sys.executable, "-m", "edgepath.cli", "tokens", "add", "dev-cli", "--file", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    token = proc.stdout.strip()
    assert token.startswith("ept_") and len(token) > 40
    assert token not in path.read_text()
    entry = TokenFile(path).lookup(token)
    assert entry is not None and entry.device_id == "dev-cli"


@pytest.mark.parametrize("columns", [None, "20", "300"])
def test_cli_refuses_missing_or_malformed_security_files(tmp_path: Path, columns: str | None) -> None:
    """The error is one grep-able line whatever the terminal width (COLUMNS unset, narrow, wide)."""
    absent = tmp_path / "absent.json"
    proc = _serve("--auth-tokens-file", str(absent), columns=columns)
    assert proc.returncode == 2
    assert _error_line(proc).endswith(f"auth_tokens_file (EDGEPATH_AUTH_TOKENS_FILE) {absent} does not exist")
    bad = tmp_path / "tokens.json"
    bad.write_text('{"tokens": "nope"}')
    proc = _serve("--auth-tokens-file", str(bad), columns=columns)
    assert proc.returncode == 2 and "auth_tokens_file" in _error_line(proc)


# --- the HS256 JWT key is long enough (RFC 7518 §3.2), in every profile ------------------------------------------


@pytest.mark.parametrize("profile", ["dev", "prod"])
@pytest.mark.parametrize("key", ["k", "x" * 31, "é" * 15])  # "é" is 2 bytes: 30 bytes in 15 characters
def test_a_jwt_key_shorter_than_32_bytes_is_refused(tmp_path: Path, profile: str, key: str) -> None:
    tls = {"tls_cert_file": tmp_path / "c", "tls_key_file": tmp_path / "k"}
    with pytest.raises(ValidationError, match=r"auth_jwt_key \(EDGEPATH_AUTH_JWT_KEY\) is \d+ bytes long") as got:
        Settings(profile=profile, auth_jwt_key=key, **tls)
    assert f"is {len(key.encode())} bytes long" in str(got.value)


@pytest.mark.parametrize("key", ["x" * 32, "é" * 16, "a" * 44])
def test_a_jwt_key_of_32_bytes_or_more_is_accepted(tmp_path: Path, key: str) -> None:
    settings = Settings(profile="prod", auth_jwt_key=key, tls_cert_file=tmp_path / "c", tls_key_file=tmp_path / "k")
    assert settings.auth_enabled


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEPATH_") and k not in ("COLUMNS", "LINES")}
    return {**env, **extra}


def test_cli_refuses_a_short_jwt_key_and_mints_no_token_with_one(tmp_path: Path) -> None:
    serve = [sys.executable, "-m", "edgepath.cli", "serve", "--grpc-port", "0", "--http-port", "0"]
    serve += ["--profile", "prod", "--tls-cert-file", str(tmp_path / "c"), "--tls-key-file", str(tmp_path / "k")]
    proc = subprocess.run(
        serve,
        capture_output=True,
        text=True,
        timeout=60,
        env=_clean_env(EDGEPATH_AUTH_JWT_KEY="k"),
    )
    assert proc.returncode == 2
    assert "auth_jwt_key (EDGEPATH_AUTH_JWT_KEY) is 1 bytes long" in _error_line(proc)
    jwt = [sys.executable, "-m", "edgepath.cli", "tokens", "jwt", "dev-a"]
    short = subprocess.run(jwt, capture_output=True, text=True, timeout=60, env=_clean_env(EDGEPATH_AUTH_JWT_KEY="k"))
    assert short.returncode == 2 and not short.stdout
    assert "auth_jwt_key (EDGEPATH_AUTH_JWT_KEY) is 1 bytes long" in _error_line(short)
    ok = subprocess.run(jwt, capture_output=True, text=True, timeout=60, env=_clean_env(EDGEPATH_AUTH_JWT_KEY="k" * 32))
    assert ok.returncode == 0 and ok.stdout.count(".") == 2


# --- the published dev HMAC key signs snapshots only on this machine -----------------------------------------------


@pytest.mark.parametrize(
    ("host", "store", "named"),
    [
        ("0.0.0.0", "redis://127.0.0.1:6379/0", "serving on '0.0.0.0'"),
        ("10.0.0.1", "unix:///run/redis.sock", "serving on '10.0.0.1'"),
        ("127.0.0.1", "redis://redis:6379/0", "the store is on 'redis'"),
        ("127.0.0.1", "rediss://edge:s3cret@10.0.0.5:6380/2", "the store is on '10.0.0.5'"),
        ("::", "redis://:s3cret@redis.ns.svc:6379/0", "serving on '::' and the store is on 'redis.ns.svc'"),
    ],
)
def test_a_shared_store_without_hmac_key_is_refused_in_dev_beyond_loopback(
    tmp_path: Path, host: str, store: str, named: str
) -> None:
    """With no ``hmac_key`` snapshots are signed with the published dev key, and replicas unpickle what verifies:
    whoever can write to the store would run code in them. Only a loopback bind with a loopback store may."""
    tokens = tmp_path / "tokens.json"
    TokenFile(tokens).add("dev-a")
    with pytest.raises(ValidationError, match=r"hmac_key \(EDGEPATH_HMAC_KEY\) must be set with a shared store") as got:
        Settings(host=host, store_url=store, auth_tokens_file=tokens)
    message = describe_errors(got.value)  # what `edgepath serve` prints: the URL's password is not in it
    assert named in message and "s3cret" not in message
    assert Settings(host=host, store_url=store, auth_tokens_file=tokens, hmac_key="h" * 32).store_is_shared


@pytest.mark.parametrize(
    ("host", "store"),
    [
        ("127.0.0.1", "redis://127.0.0.1:6379/0"),  # README "Closing the learning loop": one machine, no key
        ("localhost", "redis://localhost/0"),
        ("::1", "redis://[::1]:6379/0"),
        ("127.0.0.1", "redis:///0"),  # no host: redis-py's localhost
        ("127.0.0.1", "unix:///run/redis.sock"),
        ("0.0.0.0", "memory://"),  # the in-process store publishes no snapshot
    ],
)
def test_the_dev_key_stays_usable_on_one_machine(tmp_path: Path, host: str, store: str) -> None:
    tokens = tmp_path / "tokens.json"
    TokenFile(tokens).add("dev-a")
    assert Settings(host=host, store_url=store, auth_tokens_file=tokens).profile == "dev"


def test_the_dev_key_is_not_used_by_settings_that_skipped_validation() -> None:
    from edgepath.main import hmac_key_bytes

    local = Settings(store_url="redis://127.0.0.1:6379/0")
    with pytest.raises(ValueError, match=r"EDGEPATH_HMAC_KEY.*serving on '0\.0\.0\.0'"):
        hmac_key_bytes(local.model_copy(update={"host": "0.0.0.0"}))
    with pytest.raises(ValueError, match=r"EDGEPATH_HMAC_KEY.*outside the dev profile"):
        hmac_key_bytes(local.model_copy(update={"profile": "prod"}))


def test_cli_refuses_a_public_replica_signing_with_the_dev_key(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    TokenFile(tokens).add("dev-a")
    serve = ["serve", "--grpc-port", "0", "--http-port", "0", "--host", "0.0.0.0", "--auth-tokens-file", str(tokens)]
    for command in ([*serve, "--store", "redis://127.0.0.1:1/0"], ["train", "--store", "redis://redis.invalid:6379/0"]):
        proc = subprocess.run(
            [sys.executable, "-m", "edgepath.cli", *command],
            capture_output=True,
            text=True,
            timeout=60,
            env=_clean_env(),
        )
        assert proc.returncode == 2, proc.stderr
        assert "hmac_key (EDGEPATH_HMAC_KEY) must be set with a shared store" in _error_line(proc)


def _readme_section(title: str) -> str:
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    return text.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("section", ["Many replicas: shared state in Redis", "Closing the learning loop"])
def test_the_readmes_multi_replica_commands_pass_the_start_up_policy(section: str) -> None:
    """Each documented ``edgepath serve`` / ``train`` on a Redis store, with the keys its block exports, is accepted
    (the multi-replica example on another host exports EDGEPATH_HMAC_KEY; the one-machine one binds loopback)."""
    import shlex

    blocks = re.findall(r"```sh\n(.*?)```", _readme_section(section), re.S)
    checked = 0
    for block in blocks:
        # what the block exports (a generated secret: 44 characters, as `head -c 32 /dev/urandom | base64` makes)
        exported = {name.lower(): "x" * 44 for name in re.findall(r"^export EDGEPATH_(\w+)=", block, re.M)}
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line.split("#", 1)[0])
            if len(words) < 2 or not words[0].endswith("edgepath") or words[1] not in ("serve", "train"):
                continue
            flags = {word: words[i + 1] for i, word in enumerate(words[:-1]) if word in ("--store", "--host")}
            if "--store" not in flags:
                continue
            Settings(store_url=flags["--store"], host=flags.get("--host", "127.0.0.1"), **exported)
            checked += 1
    assert checked, f"no edgepath serve/train --store command found in README {section!r}"
