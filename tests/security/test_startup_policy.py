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
    assert _error_line(proc).endswith(f"auth_tokens_file {absent} is not a readable file")
    bad = tmp_path / "tokens.json"
    bad.write_text('{"tokens": "nope"}')
    proc = _serve("--auth-tokens-file", str(bad), columns=columns)
    assert proc.returncode == 2 and "auth_tokens_file" in _error_line(proc)
