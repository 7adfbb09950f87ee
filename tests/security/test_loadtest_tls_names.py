"""The load test's HTTPS users check the service's certificate name as its gRPC users do (``loadtest/tls_names.py``).

Reached through a load balancer or a port-forward, the name the certificate carries is not the address dialled, so
``--tls-server-name`` names it. The REST users once merely switched the name check off when a name was given: any
certificate the CA signed, for any name, was accepted. A real TLS server on loopback answers each handshake.
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from edge_security_helpers import make_pki

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))
from tls_names import verified_context_factory


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A TLS server on 127.0.0.1 whose certificate names ``localhost`` and ``127.0.0.1`` only; yields (port, CA)."""
    pki = make_pki(tmp_path / "pki")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            conn, _ = listener.accept()
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError):
                conn.close()  # the client refused the certificate

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], pki.ca_cert
    stop.set()
    socket.create_connection(listener.getsockname()).close()  # wake accept()
    thread.join(timeout=10)
    listener.close()


def _handshake(port: int, ca: Path, server_name: str) -> bytes:
    context = verified_context_factory(str(ca), server_name)()
    with socket.create_connection(("127.0.0.1", port)) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.recv(2)


def test_a_given_name_is_checked_against_the_certificate(tls_server: tuple[int, Path]) -> None:
    port, ca = tls_server
    assert _handshake(port, ca, "localhost") == b"ok"  # a name the certificate carries, not the address dialled
    with pytest.raises(ssl.SSLCertVerificationError, match="ep-edgepath"):
        _handshake(port, ca, "ep-edgepath")  # signed by the CA, but not for this name


def test_without_a_name_the_address_dialled_is_checked(tls_server: tuple[int, Path], tmp_path: Path) -> None:
    port, ca = tls_server
    assert _handshake(port, ca, "") == b"ok"  # 127.0.0.1 is in the certificate
    other_ca = make_pki(tmp_path / "other").ca_cert
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(port, other_ca, "")  # a chain the given CA did not sign
