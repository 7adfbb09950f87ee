"""TLS material from settings: gRPC server credentials (TLS or mTLS) and uvicorn's HTTPS options."""

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


def grpc_server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials for the gRPC server, or None without ``tls_cert_file``.

    With ``tls_client_ca_file`` the server requires and verifies a client
    certificate (mTLS, ``require_client_auth=True``); its CN is the device id.

    Raises
    ------
    OSError
        A configured file cannot be read.
    """
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    if key_readable_by_others(settings.tls_key_file):
        log.warning(
            "TLS key %s is open to others than its owner: chmod 600 it (0640 if root owns it)", settings.tls_key_file
        )
    key = settings.tls_key_file.read_bytes()
    cert = settings.tls_cert_file.read_bytes()
    ca = settings.tls_client_ca_file.read_bytes() if settings.tls_client_ca_file else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


def uvicorn_ssl_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config`` serving HTTPS (empty without TLS).

    REST authenticates with bearer tokens; a client certificate is verified if
    offered (``CERT_OPTIONAL``) but not required.
    """
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": str(settings.tls_cert_file), "ssl_keyfile": str(settings.tls_key_file)}
    if settings.tls_client_ca_file is not None:
        options.update(ssl_ca_certs=str(settings.tls_client_ca_file), ssl_cert_reqs=ssl.CERT_OPTIONAL)
    return options
