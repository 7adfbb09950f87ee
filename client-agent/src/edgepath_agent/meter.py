"""Outcome meter: real (MPTCP) transfers and the kernel's counters of each.

A *transfer* is one request/response over a fresh connection (``IPPROTO_MPTCP`` =
262, falling back to TCP where the kernel lacks MPTCP): the client sends the size
it wants (8 bytes, big-endian), the server sends that many bytes, the client
confirms with one byte and the server answers with a JSON trailer of its sender-side
kernel counters. The completion time runs from before ``connect()`` to the last
payload byte; throughput = 8·bytes / completion time (bit/s).

Kernel counters (``include/uapi/linux/mptcp.h``, ``include/uapi/linux/tcp.h``):

* ``MPTCP_INFO`` (``SOL_MPTCP`` = 284, optname 1) → ``struct mptcp_info``:
  subflow count, ``mptcpi_bytes_retrans``/``mptcpi_bytes_sent`` (Linux ≥ 6.5);
* ``MPTCP_TCPINFO`` (optname 2) → one ``struct tcp_info`` per subflow (``tcpi_rtt`` µs);
* ``TCP_INFO`` for plain TCP.

Loss is estimated on the *sender* as Σ subflow retransmitted bytes / Σ subflow sent
bytes (``tcpi_bytes_retrans``/``tcpi_bytes_sent``; an upper bound on the path's loss:
spurious retransmissions count). RTT is the sender's smoothed RTT (RFC 6298 SRTT,
``tcpi_rtt``) of the first subflow the kernel lists (the initial one).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import struct
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from edgepath_agent.collector.base import in_netns

log = logging.getLogger(__name__)

IPPROTO_MPTCP = 262
SOL_MPTCP = 284
MPTCP_INFO = 1
MPTCP_TCPINFO = 2
TCP_INFO_LEN = 232
_CHUNK = 1 << 16


def mptcp_socket() -> socket.socket:
    """A new ``IPPROTO_MPTCP`` stream socket (IPv4).

    Raises
    ------
    OSError
        ``EPROTONOSUPPORT``/``ENOPROTOOPT`` when the kernel lacks or disables MPTCP.
    """
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)


def parse_tcp_info(raw: bytes) -> dict[str, float]:
    """Fields of ``struct tcp_info`` (offsets of include/uapi/linux/tcp.h) used here."""
    out: dict[str, float] = {}
    if len(raw) >= 104:
        rtt_us, rttvar_us = struct.unpack_from("=II", raw, 68)
        out["rtt_ms"] = rtt_us / 1000.0
        out["rttvar_ms"] = rttvar_us / 1000.0
        out["total_retrans"] = struct.unpack_from("=I", raw, 100)[0]
    if len(raw) >= 140:
        out["segs_out"] = struct.unpack_from("=I", raw, 136)[0]
    if len(raw) >= 216:
        out["bytes_sent"], out["bytes_retrans"] = struct.unpack_from("=QQ", raw, 200)
    return out


def parse_mptcp_info(raw: bytes) -> dict[str, float]:
    """Fields of ``struct mptcp_info`` (include/uapi/linux/mptcp.h) used here."""
    out: dict[str, float] = {}
    if len(raw) >= 6:
        out["subflows"] = raw[0]
    if len(raw) >= 64:
        out["retransmits"] = struct.unpack_from("=I", raw, 44)[0]
        out["bytes_retrans"], out["bytes_sent"] = struct.unpack_from("=QQ", raw, 48)
    return out


def kernel_counters(sock: socket.socket) -> dict[str, float]:
    """RTT and retransmission counters of ``sock`` (MPTCP or TCP); ``{}`` if unavailable."""
    out: dict[str, float] = {}
    if sock.proto == IPPROTO_MPTCP:
        with contextlib.suppress(OSError):
            info = parse_mptcp_info(sock.getsockopt(SOL_MPTCP, MPTCP_INFO, 128))
            out.update({f"mptcp_{k}": v for k, v in info.items()})
        with contextlib.suppress(OSError):
            # struct mptcp_subflow_data {u32 size_subflow_data, num_subflows, size_kernel, size_user} + tcp_info[]
            n_max = 8
            buf = bytearray(struct.pack("=IIII", 16, 0, 0, TCP_INFO_LEN) + bytes(TCP_INFO_LEN * n_max))
            raw = _getsockopt_in(sock, buf)
            _, num, _, size_user = struct.unpack_from("=IIII", raw, 0)
            infos = [parse_tcp_info(raw[16 + i * size_user : 16 + (i + 1) * size_user]) for i in range(min(num, n_max))]
            if infos:
                out["subflows"] = len(infos)
                out["subflow_rtt_ms"] = [i.get("rtt_ms", 0.0) for i in infos]  # type: ignore[assignment]
                out["rtt_ms"] = infos[0].get("rtt_ms", 0.0)
                sent = sum(i.get("bytes_sent", 0.0) for i in infos)
                if sent > 0:
                    # TCP-level retransmissions of the subflows (MPTCP-level reinjections are not path loss).
                    out["loss"] = min(1.0, sum(i.get("bytes_retrans", 0.0) for i in infos) / sent)
        return out
    with contextlib.suppress(OSError):
        info = parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN))
        out.update(info)
        if info.get("bytes_sent"):
            out["loss"] = min(1.0, info["bytes_retrans"] / info["bytes_sent"])
        elif info.get("segs_out"):
            out["loss"] = min(1.0, info["total_retrans"] / info["segs_out"])
    return out


def _getsockopt_in(sock: socket.socket, buf: bytearray) -> bytes:
    """getsockopt with an *input* buffer (MPTCP_TCPINFO reads the header the caller fills).

    Python's ``socket.getsockopt`` passes a zeroed buffer, so this goes through ctypes.
    """
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    cbuf = (ctypes.c_char * len(buf)).from_buffer(buf)
    optlen = ctypes.c_uint32(len(buf))
    rc = libc.getsockopt(sock.fileno(), SOL_MPTCP, MPTCP_TCPINFO, cbuf, ctypes.byref(optlen))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, "getsockopt(MPTCP_TCPINFO)")
    return bytes(buf[: optlen.value])


@dataclass(frozen=True)
class TransferResult:
    """Measured outcome of one transfer."""

    bytes: int
    completion_s: float
    throughput_bps: float
    local_addr: str
    mptcp: bool
    rtt_ms: float | None = None
    loss: float | None = None
    subflows: int | None = None
    server_counters: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def transfer(
    host: str,
    port: int,
    size_bytes: int = 256 * 1024,
    timeout_s: float = 30.0,
    use_mptcp: bool = True,
    bind_addr: str | None = None,
    netns: str | None = None,
) -> TransferResult:
    """Download ``size_bytes`` from a :class:`TransferServer` and measure it.

    Parameters
    ----------
    host, port
        Server address.
    size_bytes
        Payload size, bytes (default 256 KB, a short flow).
    timeout_s
        Socket timeout, s.
    use_mptcp
        Open an ``IPPROTO_MPTCP`` socket (TCP if the kernel refuses).
    bind_addr
        Source address (else routing chooses: that is how the primary path acts).
    netns
        Network namespace to measure from (the device the agent manages with ``--netns``): the socket is
        created by a thread that entered it (:func:`~edgepath_agent.collector.base.in_netns`) and keeps it, so
        routes, source addresses and interfaces are that namespace's; the transfer itself runs here.
        ``host`` is resolved here too (the testbed gives addresses).

    Raises
    ------
    OSError
        On connection failure or a short transfer (``ConnectionError``), or when ``netns`` cannot be entered.
    """
    sock, mptcp = in_netns(netns, lambda: _client_socket(use_mptcp))
    with sock:
        sock.settimeout(timeout_s)
        if bind_addr:
            sock.bind((bind_addr, 0))
        t0 = time.perf_counter()
        sock.connect((host, port))
        local = sock.getsockname()[0]
        got = request_payload(sock, size_bytes)
        completion = time.perf_counter() - t0
        mine = kernel_counters(sock)
        server: dict[str, Any] | None = None
        with contextlib.suppress(OSError, ValueError):
            sock.sendall(b"\x01")
            server = _read_trailer(sock)
    counters = server or {}
    rtt = counters.get("rtt_ms", mine.get("rtt_ms"))
    loss = counters.get("loss")
    subflows = counters.get("subflows", mine.get("subflows"))
    return TransferResult(
        bytes=got,
        completion_s=completion,
        throughput_bps=8.0 * got / completion if completion > 0 else 0.0,
        local_addr=local,
        mptcp=mptcp,
        rtt_ms=float(rtt) if rtt is not None else None,
        loss=float(loss) if loss is not None else None,
        subflows=int(subflows) if subflows is not None else None,
        server_counters=server,
    )


def _client_socket(use_mptcp: bool) -> tuple[socket.socket, bool]:
    """A new stream socket and whether it is MPTCP (TCP when not asked for or the kernel refuses MPTCP)."""
    if use_mptcp:
        try:
            return mptcp_socket(), True
        except OSError:
            pass
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM), False


def request_payload(sock: socket.socket, size_bytes: int) -> int:
    """Ask a :class:`TransferServer` for ``size_bytes`` (8 bytes, big-endian) and read them all; returns the count.

    Raises
    ------
    ConnectionError
        The server closed before sending ``size_bytes``.
    """
    sock.sendall(struct.pack("!Q", size_bytes))
    got = 0
    view = bytearray(_CHUNK)
    while got < size_bytes:
        n = sock.recv_into(view, min(_CHUNK, size_bytes - got))
        if n == 0:
            raise ConnectionError(f"server closed after {got} of {size_bytes} bytes")
        got += n
    return got


def _read_trailer(sock: socket.socket) -> dict[str, Any]:
    (length,) = struct.unpack("!I", _recv_exact(sock, 4))
    return dict(json.loads(_recv_exact(sock, length)))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("short read")
        buf += chunk
    return buf


class TransferServer:
    """Serves transfers (see module docstring) on ``host:port`` over MPTCP (TCP fallback).

    Runs a thread per connection; :meth:`close` stops accepting and joins.
    ``congestion_control`` sets ``TCP_CONGESTION`` on the listener (accepted connections and
    their MPTCP subflows inherit it); ``sample_interval_s`` samples each sending connection's
    counters and adds Łuczak et al.'s metrics (:mod:`edgepath_agent.ccmetrics`) to the trailer
    as ``paper_metrics`` (issue 20).

    Raises
    ------
    OSError
        When binding fails or the kernel refuses ``congestion_control``.
    """

    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 0,
        use_mptcp: bool = True,
        congestion_control: str | None = None,
        sample_interval_s: float | None = None,
    ) -> None:
        try:
            self._sock = mptcp_socket() if use_mptcp else socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if congestion_control:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion_control.encode())
        self.sample_interval_s = sample_interval_s
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(64)
        self.host, self.port = self._sock.getsockname()[:2]
        self.mptcp = self._sock.proto == IPPROTO_MPTCP
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="transfer-server", daemon=True)
        self._payload = bytes(_CHUNK)

    def start(self) -> TransferServer:
        self._thread.start()
        return self

    def _serve(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(60.0)
                (size,) = struct.unpack("!Q", _recv_exact(conn, 8))
                sampler = None
                if self.sample_interval_s:
                    from edgepath_agent.ccmetrics import CounterSampler

                    sampler = CounterSampler(conn, self.sample_interval_s).start()
                t0 = time.monotonic()
                left = size
                while left > 0:
                    n = min(left, len(self._payload))
                    conn.sendall(self._payload[:n])
                    left -= n
                if conn.recv(1) != b"\x01":
                    if sampler is not None:
                        sampler.stop()
                    return
                counters: dict[str, Any] = kernel_counters(conn)  # the trailer adds non-numeric entries
                if sampler is not None:  # the client's confirmation: every payload byte has arrived
                    from edgepath_agent.ccmetrics import metrics_trailer

                    sampler.stop()
                    counters["paper_metrics"] = metrics_trailer(sampler.samples, time.monotonic() - t0)
                with contextlib.suppress(OSError):
                    counters["congestion_control"] = (
                        conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()
                    )
                body = json.dumps(counters).encode()
                conn.sendall(struct.pack("!I", len(body)) + body)
            except OSError as exc:
                log.debug("transfer connection failed: %s", exc)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def __enter__(self) -> TransferServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def outcome_from(result: TransferResult, device_id: str, decision_id: str) -> dict[str, Any]:
    """``OutcomeRequest`` dict for a decision measured by ``result`` (RTT → ``latency_ms``)."""
    out: dict[str, Any] = {"device_id": device_id, "decision_id": decision_id, "throughput_bps": result.throughput_bps}
    if result.rtt_ms is not None:
        out["latency_ms"] = result.rtt_ms
    if result.loss is not None:
        out["loss"] = result.loss
    return out
