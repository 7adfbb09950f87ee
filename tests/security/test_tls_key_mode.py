"""The TLS private key's permission check (:func:`edgepath.security.tls.key_readable_by_others`).

The chart mounts the key from a Secret root-owned, with the pod's ``fsGroup`` as group and mode 0440: the service
(uid 10001, in that group) must read it without a warning at every start, while a key readable by anyone else still
gets one (PostgreSQL's rule for its server key).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from edgepath.security.tls import grpc_server_credentials, key_readable_by_others
from edgepath.settings import Settings
from security.edge_security_helpers import make_pki


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
        assert grpc_server_credentials(settings) is not None
    assert "TLS key" not in caplog.text
    os.chmod(pki.server_key, 0o444)
    with caplog.at_level(logging.WARNING, logger="edgepath.security"):
        grpc_server_credentials(settings)
    assert "open to others than its owner" in caplog.text
