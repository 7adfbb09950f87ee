"""The TLS private key's permission check (:func:`edgepath.security.tls.key_readable_by_others`,
:func:`~edgepath.security.tls.check_tls_key`).

The chart mounts the key from a Secret root-owned, with the pod's ``fsGroup`` as group and mode 0440: the service
(uid 10001, in that group) must read it without a warning at every start, while a key readable by anyone else still
gets one (PostgreSQL's rule for its server key). The check runs once at start, for both servers (gRPC TLS and
HTTPS serve the same key): profile prod refuses such a key, dev warns.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from edgepath.main import Service
from edgepath.security.auth import TokenFile
from edgepath.security.tls import TlsKeyExposed, check_tls_key, grpc_server_credentials, key_readable_by_others
from edgepath.settings import Settings
from security.edge_security_helpers import Pki, make_pki


def _key(tmp_path: Path, mode: int, uid: int) -> Path:
    path = tmp_path / "tls.key"
    path.write_text("not parsed by the check")
    os.chmod(path, mode)
    os.chown(path, uid, os.getgid())
    return path


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another owner needs root")


@needs_root
@pytest.mark.parametrize(
    ("mode", "uid", "too_open"),
    [
        (0o600, 10001, False),
        (0o400, 10001, False),
        (0o640, 10001, True),  # the serving user's own key needs no group
        (0o440, 0, False),  # the chart's secret volume: root-owned, fsGroup may read
        (0o640, 0, False),
        (0o660, 0, True),  # a group that may write it
        (0o444, 0, True),  # others
        (0o604, 10001, True),
    ],
)
def test_a_root_owned_key_may_be_read_by_its_group_and_nothing_else(
    tmp_path: Path, mode: int, uid: int, too_open: bool
) -> None:
    assert key_readable_by_others(_key(tmp_path, mode, uid)) is too_open


@needs_root
def test_the_charts_secret_volume_key_starts_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pki = make_pki(tmp_path)
    os.chown(pki.server_key, 0, os.getgid())
    os.chmod(pki.server_key, 0o440)
    settings = Settings(tls_cert_file=pki.server_cert, tls_key_file=pki.server_key)
    with caplog.at_level(logging.WARNING, logger="edgepath.security"):
        check_tls_key(settings)
        check_tls_key(settings.model_copy(update={"profile": "prod"}))  # nor refused in prod
        assert grpc_server_credentials(settings) is not None
    assert "TLS key" not in caplog.text
    os.chmod(pki.server_key, 0o444)
    with caplog.at_level(logging.WARNING, logger="edgepath.security"):
        check_tls_key(settings)
    assert "open to others than its owner" in caplog.text


# --- refused in prod, warned about in dev, once at start for both servers ---------------------------------------


def _exposed_pki(tmp_path: Path) -> Pki:
    """Certificates whose server key anyone may read (0644: others, whoever owns it)."""
    pki = make_pki(tmp_path)
    os.chmod(pki.server_key, 0o644)
    return pki


def _settings(pki: Pki, tmp_path: Path, profile: str) -> Settings:
    tokens = TokenFile(tmp_path / "tokens.json")
    tokens.add("dev-a")
    return Settings(
        profile=profile,
        grpc_port=0,
        http_port=0,
        auth_tokens_file=tokens.path,
        tls_cert_file=pki.server_cert,
        tls_key_file=pki.server_key,
    )


def test_prod_refuses_a_key_others_may_read_naming_the_setting_and_the_mode(tmp_path: Path) -> None:
    pki = _exposed_pki(tmp_path)
    named = r"tls_key_file \(EDGEPATH_TLS_KEY_FILE\) .*server\.key has mode 0644"
    with pytest.raises(TlsKeyExposed, match=named) as got:
        check_tls_key(_settings(pki, tmp_path, "prod"))
    assert "\n" not in str(got.value)
    os.chmod(pki.server_key, 0o600)
    check_tls_key(_settings(pki, tmp_path, "prod"))


def test_dev_warns_about_a_key_others_may_read_and_starts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pki = _exposed_pki(tmp_path)
    with caplog.at_level(logging.WARNING, logger="edgepath.security"):
        check_tls_key(_settings(pki, tmp_path, "dev"))
    (record,) = [r for r in caplog.records if r.name == "edgepath.security"]
    assert "tls_key_file" in record.getMessage() and "mode 0644" in record.getMessage()


async def _start(service: Service) -> asyncio.Task[None]:
    """``service.run()`` as a task, returned once it has served or ended (at most 60 s)."""
    task = asyncio.create_task(service.run())
    started = asyncio.create_task(service.wait_started())
    await asyncio.wait({task, started}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    started.cancel()
    return task


async def _stop(service: Service, task: asyncio.Task[None]) -> None:
    service.stop()
    await asyncio.wait_for(task, 30)


async def test_a_prod_service_refuses_the_key_before_either_server_listens(tmp_path: Path) -> None:
    """Both servers (gRPC TLS and HTTPS) serve the key: the refusal comes before either listens."""
    service = Service.build(_settings(_exposed_pki(tmp_path), tmp_path, "prod"))
    task = await _start(service)
    if not task.done():  # it served: the key was not refused
        await _stop(service, task)
        pytest.fail("profile prod served with a TLS key others may read")
    with pytest.raises(TlsKeyExposed, match="tls_key_file"):
        task.result()
    assert service.grpc_port == 0 and service.http_port == 0, "nothing was bound"


async def test_a_dev_service_warns_once_for_both_servers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    service = Service.build(_settings(_exposed_pki(tmp_path), tmp_path, "dev"))
    with caplog.at_level(logging.WARNING, logger="edgepath.security"):
        task = await _start(service)
        assert not task.done(), task.exception() if task.done() else None
        await _stop(service, task)
    warnings = [r for r in caplog.records if r.name == "edgepath.security" and "TLS key" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


def test_serve_refuses_the_key_in_prod_with_one_error_line(tmp_path: Path) -> None:
    pki = _exposed_pki(tmp_path)
    tokens = TokenFile(tmp_path / "tokens.json")
    tokens.add("dev-a")
    cmd = [sys.executable, "-m", "edgepath.cli", "serve", "--grpc-port", "0", "--http-port", "0", "--profile", "prod"]
    cmd += ["--auth-tokens-file", str(tokens.path), "--tls-cert-file", str(pki.server_cert)]
    cmd += ["--tls-key-file", str(pki.server_key)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEPATH_") and k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert "tls_key_file (EDGEPATH_TLS_KEY_FILE)" in line and "mode 0644" in line, line
