"""TLS material from settings: the server key's permission check (:func:`check_tls_key`, once at start, for both
servers), gRPC server credentials (TLS or mTLS) and uvicorn's HTTPS options."""

from __future__ import annotations

import logging
import ssl
import stat
from pathlib import Path
from typing import Any

import grpc

from edgepath.settings import Settings

log = logging.getLogger("edgepath.security")


def key_readable_by_others(path: Path) -> bool:
    """True when the private key's mode lets others than its owner (and, for a root-owned key, its group) at it.

    PostgreSQL's rule for its server key (``check_ssl_key_file_permissions``, src/backend/libpq/be-secure-common.c):
    a key owned by the serving user must be 0600 or less; a key owned by root may also be readable by its group,
    the way a secret volume hands it over (Kubernetes mounts a Secret root-owned with the pod's ``fsGroup`` as
    group, mode 0440 in the chart, and the service runs as a member of that group). Any permission for others, or
    a group permission beyond read on a root-owned key, is too much.

    Raises
    ------
    OSError
        When the file cannot be stat'ed.
    """
    st = path.stat()
    if st.st_mode & stat.S_IRWXO:
        return True
    if st.st_uid == 0:
        return bool(st.st_mode & (stat.S_IWGRP | stat.S_IXGRP))
    return bool(st.st_mode & stat.S_IRWXG)


class TlsKeyExposed(ValueError):
    """Profile ``prod`` and the server's private key (``tls_key_file``) is open to others than its owner."""


def check_tls_key(settings: Settings) -> None:
    """Check the server key's permissions (:func:`key_readable_by_others`) once, at start, for both servers: gRPC
    TLS and HTTPS serve the same ``tls_key_file``. Profile ``prod`` refuses a key open to others; ``dev`` logs a
    warning and goes on. Nothing to check without TLS.

    Raises
    ------
    TlsKeyExposed
        In profile ``prod``, when the key is open to others: one line naming ``tls_key_file``, the path and the mode.
    OSError
        When the key file cannot be stat'ed.
    """
    path = settings.tls_key_file
    if path is None or not key_readable_by_others(path):
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    what = (
        f"tls_key_file (EDGEPATH_TLS_KEY_FILE) {path} has mode {mode:04o}, open to others than its owner: chmod 600 "
        "it (0640 or 0440 if root owns it and its group is the service's)"
    )
    if settings.profile == "prod":
        raise TlsKeyExposed(f"profile prod refuses a TLS key others may use: {what}")
    log.warning("TLS key: %s; profile prod refuses to start with it", what)


def grpc_server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials for the gRPC server, or None without ``tls_cert_file``.

    With ``tls_client_ca_file`` the server requires and verifies a client
    certificate (mTLS, ``require_client_auth=True``); its CN is the device id. The key's permissions are checked
    by :func:`check_tls_key`, once at start (:meth:`edgepath.main.Service.run`), not here.

    Raises
    ------
    OSError
        A configured file cannot be read.
    """
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    key = settings.tls_key_file.read_bytes()
    cert = settings.tls_cert_file.read_bytes()
    ca = settings.tls_client_ca_file.read_bytes() if settings.tls_client_ca_file else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


def uvicorn_ssl_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config`` serving HTTPS (empty without TLS).

    REST authenticates with bearer tokens; a client certificate is verified if
    offered (``CERT_OPTIONAL``) but not required. The key's permissions are checked by :func:`check_tls_key`, once
    at start, as for gRPC. Raises nothing: uvicorn reads the files.
    """
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": str(settings.tls_cert_file), "ssl_keyfile": str(settings.tls_key_file)}
    if settings.tls_client_ca_file is not None:
        options.update(ssl_ca_certs=str(settings.tls_client_ca_file), ssl_cert_reqs=ssl.CERT_OPTIONAL)
    return options
