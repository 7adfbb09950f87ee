"""The HTTPS users' certificate check (``loadtest/locustfile.py --ca-file … --tls-server-name …``).

gRPC checks the service's certificate against ``--tls-server-name`` (``grpc.ssl_target_name_override``). The REST
users must do the same: dialling a load balancer's address or a port-forward, the name in the certificate is not the
address dialled, and a context that merely skipped the name check would accept any certificate the CA ever signed
(RFC 9110 §4.3.4: a client verifies the server's identity against the name it means to reach, RFC 6125).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

__all__ = ["verified_context_factory"]


def verified_context_factory(
    ca_file: str, server_name: str = "", context_class: type[ssl.SSLContext] = ssl.SSLContext
) -> Callable[..., ssl.SSLContext]:
    """A factory of client TLS contexts (as geventhttpclient's ``ssl_context_factory`` takes) that verify the server's
    certificate chain against ``ca_file`` (PEM) and its name against ``server_name``, or against the host dialled when
    ``server_name`` is empty. With a name given, it is also the SNI the client sends, as gRPC's name override does.

    ``context_class`` is ``gevent.ssl.SSLContext`` under locust (cooperative sockets), else :class:`ssl.SSLContext`.

    Raises
    ------
    ssl.SSLCertVerificationError
        At the handshake (from the returned contexts' ``wrap_socket``) when the chain or the name does not verify.
    """
    pinned = server_name

    class _Named(context_class):  # type: ignore[misc,valid-type]
        def wrap_socket(self, sock: Any, *args: Any, server_hostname: str | None = None, **kwargs: Any) -> Any:
            return super().wrap_socket(sock, *args, server_hostname=pinned or server_hostname, **kwargs)

    def factory(*_args: Any, **_kwargs: Any) -> ssl.SSLContext:
        context = _Named(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname and CERT_REQUIRED by default
        context.load_verify_locations(cafile=ca_file)
        return context

    return factory
