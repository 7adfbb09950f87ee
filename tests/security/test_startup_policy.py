"""Refusal to start insecurely: non-loopback without authentication (any profile), prod without auth + TLS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from edgepath.security.auth import TokenFile
from edgepath.settings import Settings, is_loopback
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
    with pytest.raises(ValidationError, match="prod requires"):
        Settings(profile="prod")
    with pytest.raises(ValidationError, match="prod requires"):
        Settings(profile="prod", auth_tokens_file=tokens)  # auth but no TLS
    ok = Settings(profile="prod", auth_tokens_file=tokens, tls_cert_file=tmp_path / "c", tls_key_file=tmp_path / "k")
    assert ok.tls_enabled and ok.auth_enabled


def test_tls_files_come_in_pairs(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="go together"):
        Settings(tls_cert_file=tmp_path / "c")
    with pytest.raises(ValidationError, match="mTLS"):
        Settings(tls_client_ca_file=tmp_path / "ca")


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "edgepath.cli", "serve", "--grpc-port", "0", "--http-port", "0", *args]
    # A wide terminal: rich boxes the error at COLUMNS, and a wrapped line (long tmp path) splits the message.
    env = {**os.environ, "COLUMNS": "1000"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)


def test_cli_refuses_public_address_without_auth() -> None:
    proc = _serve("--host", "0.0.0.0")
    assert proc.returncode == 2
    assert "refusing to listen on '0.0.0.0' without authentication" in " ".join(proc.stderr.split())


def test_cli_refuses_prod_without_tls(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    TokenFile(tokens).add("dev-a")
    proc = _serve("--profile", "prod", "--auth-tokens-file", str(tokens))
    assert proc.returncode == 2
    assert "prod requires authentication" in " ".join(proc.stderr.split())


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


def test_cli_refuses_missing_or_malformed_security_files(tmp_path: Path) -> None:
    proc = _serve("--auth-tokens-file", str(tmp_path / "absent.json"))
    assert proc.returncode == 2 and "is not a readable file" in " ".join(proc.stderr.split())
    bad = tmp_path / "tokens.json"
    bad.write_text('{"tokens": "nope"}')
    proc = _serve("--auth-tokens-file", str(bad))
    assert proc.returncode == 2 and "auth_tokens_file" in " ".join(proc.stderr.split())
