"""SSMP on the device: DNS per interface, RTT per candidate per path, probes, MPTCP download, transfer report.

Source: J. Yang et al., "SSMP: Server Selection for Multipath TCP in CDN Environments", §IV-A/B
(the service runs the selection itself, ``edgepath.engines.ssmp``). The device's part, per content:

1. **Resolve per interface** (§IV-A): one DNS query for the content's host through each interface,
   to that interface's DNS server, from a UDP socket bound to the interface (``SO_BINDTODEVICE``,
   socket(7); where the process may not bind to a device, the interface's source address alone, which
   the device's per-source routing rules send out of that interface) — dnspython's ``dns.query.udp``
   with our socket. Every A record answered is a *candidate* tagged with the interface that asked.
2. **Measure every candidate over every path** (§IV-B-2, "the latest RTTs"): ``rtt_samples`` TCP
   connect times from a socket bound to each interface (connect() returns after SYN → SYN/ACK, one
   round trip). A refused or timed-out connect counts as a sample of ``timeout_s``.
3. **Ask the service** with ``content`` = ``{expected_size_bytes, candidates, default_interface}``; a
   candidate path carries the loss and bandwidth this device measured from that server over that
   interface (probes and past downloads, fresher than ``stale_age_s``), else none: the service then
   uses the server's stored B and p.
4. **Probe stale servers** the answer lists (§IV-B-1): per server and interface, one plain-TCP
   transfer of ``probe_bytes`` bound to the interface; B = its goodput (bit/s), p = the server's
   retransmitted/sent bytes (``tcpi_bytes_retrans``/``tcpi_bytes_sent``), RTT = the server's SRTT.
5. **Download from the pick** over MPTCP (``IPPROTO_MPTCP``) with the *initial subflow on the named
   interface*: the socket is bound to that interface's source address (the kernel's path manager adds
   the other subflows from its ``subflow`` endpoints). ``SO_BINDTODEVICE`` is deliberately not set on
   the MPTCP socket: the kernel copies the MPTCP socket's bound device to every subflow it creates
   (net/mptcp/sockopt.c, ``mptcp_sockopt_sync``), which would pin the additional subflows to the same
   interface.
6. **Report** ``server_transfer``: size, duration and per subflow (interface found from its local
   address, ``MPTCP_SUBFLOW_ADDRS``) the RTT, the loss (from the server's per-subflow counters when
   its trailer carries them, else the connection's), and — for transfers of at least
   ``bandwidth_min_bytes`` (a mice transfer ends in slow start and measures RTT, not bandwidth) —
   B = 8·bytes received on the subflow / duration.

With ``netns`` (the agent's ``--netns``: a device emulated in a network namespace) every socket of
these steps — the DNS queries, the RTT connects, the probes, the download — and the look-up of each
interface's address are made by a thread that entered that namespace
(:func:`~edgepath_agent.collector.base.in_netns`); a socket keeps the namespace it was created in, so
its routes, source addresses and the device ``SO_BINDTODEVICE`` names are the namespace's, while the
transfer itself runs in the caller's thread.

Units: ms, bit/s, bytes, loss as a fraction. The transfer protocol is the meter's
(:mod:`edgepath_agent.meter`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import ipaddress
import logging
import socket
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dns.exception
import dns.message
import dns.query
import dns.rdatatype

from edgepath_agent.collector.base import in_netns
from edgepath_agent.meter import (
    IPPROTO_MPTCP,
    SOL_MPTCP,
    TCP_INFO_LEN,
    _client_socket,
    _read_trailer,
    kernel_counters,
    request_payload,
)

if TYPE_CHECKING:
    from edgepath_agent.messages import Recommendation

log = logging.getLogger(__name__)

#: ``MPTCP_TCPINFO`` / ``MPTCP_SUBFLOW_ADDRS`` getsockopt names (include/uapi/linux/mptcp.h).
MPTCP_TCPINFO = 2
MPTCP_SUBFLOW_ADDRS = 3
#: ``sizeof(struct mptcp_subflow_addrs)``: two ``__kernel_sockaddr_storage`` unions.
SUBFLOW_ADDRS_LEN = 256
_MAX_SUBFLOWS = 8
#: Default mice/elephant threshold of the service (edgepath.settings ``ssmp_mice_threshold_bytes``), bytes.
DEFAULT_BANDWIDTH_MIN_BYTES = 1_048_576


@dataclass(frozen=True)
class PathSpec:
    """One device interface SSMP uses.

    Attributes
    ----------
    interface: the interface's name as the service knows it (``interfaces[].name``).
    source_addr: its IPv4 address (sockets bind to it; per-source routing sends them out of it).
    nameserver: the DNS server this interface's network hands out (IPv4).
    nameserver_port: its UDP port (53).
    device: the kernel device to ``SO_BINDTODEVICE`` to (default: ``interface``).
    """

    interface: str
    source_addr: str
    nameserver: str
    nameserver_port: int = 53
    device: str | None = None

    @property
    def bind_device(self) -> str:
        return self.device or self.interface


def bound_socket(kind: int, path: PathSpec, proto: int = 0, netns: str | None = None) -> socket.socket:
    """An IPv4 socket of ``kind`` bound to ``path``'s device (when permitted) and source address.

    ``SO_BINDTODEVICE`` needs CAP_NET_RAW (socket(7)); without it the source address alone steers the
    socket (the device's per-source ``ip rule``). With ``netns`` the socket is created in that network
    namespace and keeps it: ``path``'s device and source address are the namespace's. Raises ``OSError``
    when the device or the address can't be bound, or ``netns`` can't be entered.
    """
    return in_netns(netns, lambda: _bound_socket(kind, path, proto))


def _bound_socket(kind: int, path: PathSpec, proto: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, kind, proto)
    try:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, path.bind_device.encode())
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EACCES):
                raise
            log.debug("SO_BINDTODEVICE %s refused (%s): binding the source address only", path.bind_device, exc)
        sock.bind((path.source_addr, 0))
    except BaseException:
        sock.close()
        raise
    return sock


def resolve(host: str, path: PathSpec, timeout_s: float = 2.0, netns: str | None = None) -> list[str]:
    """IPv4 addresses (A records) for ``host`` from ``path``'s DNS server, asked through ``path``.

    ``timeout_s``: the query's deadline, s. With ``netns`` the query's socket is that network
    namespace's (:func:`bound_socket`). Returns the addresses in answer order (empty when the name has
    no A record). Raises ``dns.exception.Timeout`` or ``OSError`` when the server does not answer or
    the socket can't be bound.
    """
    with contextlib.suppress(ValueError):
        return [str(ipaddress.IPv4Address(host))]  # already an address: nothing to resolve
    query = dns.message.make_query(host, dns.rdatatype.A)
    sock = bound_socket(socket.SOCK_DGRAM, path, netns=netns)
    with sock:
        sock.setblocking(False)  # dnspython's contract for a caller's socket
        answer = dns.query.udp(query, path.nameserver, timeout=timeout_s, port=path.nameserver_port, sock=sock)
    out: list[str] = []
    for rrset in answer.answer:
        if rrset.rdtype == dns.rdatatype.A:
            out.extend(str(r.address) for r in rrset if str(r.address) not in out)
    return out


def connect_rtt_ms(address: str, port: int, path: PathSpec, timeout_s: float = 2.0, netns: str | None = None) -> float:
    """One RTT sample to ``address:port`` over ``path``: the time of a TCP connect() (SYN → SYN/ACK), ms.

    A refused, unreachable or timed-out connect returns ``timeout_s`` in ms (the server is as good as
    unreachable over this path). With ``netns`` the socket is that network namespace's (created before
    the clock starts). Raises ``OSError`` when the socket can't be bound to ``path`` (:func:`bound_socket`).
    """
    sock = bound_socket(socket.SOCK_STREAM, path, netns=netns)
    with sock:
        sock.settimeout(timeout_s)
        t0 = time.perf_counter()
        try:
            sock.connect((address, port))
        except OSError:
            return timeout_s * 1000.0
        return max((time.perf_counter() - t0) * 1000.0, 1e-3)


# ---------------------------------------------------------------------------------------------- kernel counters


def _getsockopt_buf(sock: socket.socket, optname: int, buf: bytearray) -> bytes:
    """``getsockopt(SOL_MPTCP, optname)`` with an input buffer (the kernel reads the header we fill)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    cbuf = (ctypes.c_char * len(buf)).from_buffer(buf)
    optlen = ctypes.c_uint32(len(buf))
    if libc.getsockopt(sock.fileno(), SOL_MPTCP, optname, cbuf, ctypes.byref(optlen)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"getsockopt(SOL_MPTCP, {optname}): {errno.errorcode.get(err, err)}")
    return bytes(buf[: optlen.value])


def _subflow_array(sock: socket.socket, optname: int, item_len: int) -> list[bytes]:
    # struct mptcp_subflow_data {u32 size_subflow_data, num_subflows, size_kernel, size_user} + items
    buf = bytearray(struct.pack("=IIII", 16, 0, 0, item_len) + bytes(item_len * _MAX_SUBFLOWS))
    raw = _getsockopt_buf(sock, optname, buf)
    _, num, _, size_user = struct.unpack_from("=IIII", raw, 0)
    return [raw[16 + i * size_user : 16 + (i + 1) * size_user] for i in range(min(num, _MAX_SUBFLOWS))]


def _sockaddr_in(raw: bytes) -> tuple[str, int] | None:
    family = struct.unpack_from("=H", raw, 0)[0]
    if family != socket.AF_INET:
        return None
    port = struct.unpack_from("!H", raw, 2)[0]
    return socket.inet_ntoa(raw[4:8]), port


def subflow_table(sock: socket.socket) -> list[dict[str, Any]]:
    """Per subflow of an MPTCP socket: local/remote address, RTT, bytes sent/retransmitted/received.

    ``MPTCP_TCPINFO`` and ``MPTCP_SUBFLOW_ADDRS`` (include/uapi/linux/mptcp.h) list the subflows in
    the same order; offsets of ``struct tcp_info`` are include/uapi/linux/tcp.h (``tcpi_rtt`` µs at 68,
    ``tcpi_bytes_received`` at 128, ``tcpi_bytes_sent``/``tcpi_bytes_retrans`` at 200/208). Keys:
    ``local``, ``remote`` (IPv4 strings or None), ``rtt_ms``, ``bytes_sent``, ``bytes_retrans``,
    ``bytes_received``. Empty for a plain TCP socket or when the kernel refuses the options.
    """
    if sock.proto != IPPROTO_MPTCP:
        return []
    try:
        infos = _subflow_array(sock, MPTCP_TCPINFO, TCP_INFO_LEN)
        addrs = _subflow_array(sock, MPTCP_SUBFLOW_ADDRS, SUBFLOW_ADDRS_LEN)
    except OSError as exc:
        log.debug("subflow counters unavailable: %s", exc)
        return []
    out = []
    for i, info in enumerate(infos):
        row: dict[str, Any] = {"local": None, "remote": None}
        if i < len(addrs) and len(addrs[i]) >= SUBFLOW_ADDRS_LEN:
            local, remote = _sockaddr_in(addrs[i][:128]), _sockaddr_in(addrs[i][128:256])
            row["local"] = local[0] if local else None
            row["remote"] = remote[0] if remote else None
        if len(info) >= 216:
            row["rtt_ms"] = struct.unpack_from("=I", info, 68)[0] / 1000.0
            row["bytes_received"] = struct.unpack_from("=Q", info, 128)[0]
            row["bytes_sent"], row["bytes_retrans"] = struct.unpack_from("=QQ", info, 200)
        out.append(row)
    return out


# ---------------------------------------------------------------------------------------------- transfers


@dataclass(frozen=True)
class PathSample:
    """What one server looked like over one interface: RTT (ms), loss p, bandwidth B (bit/s), when (Unix s)."""

    rtt_ms: float | None
    loss: float | None
    bandwidth_bps: float | None
    at_s: float


@dataclass(frozen=True)
class Download:
    """A completed download from one server.

    Attributes
    ----------
    address, size_bytes: server and bytes received.
    duration_ms: from before connect() to the last payload byte, ms.
    local_addr: source address of the initial subflow.
    mptcp: True when the connection was ``IPPROTO_MPTCP``.
    paths: per subflow, keyed by interface: the :class:`PathSample` measured during the transfer.
    server: the server's trailer (its kernel counters, and whatever it adds, e.g. ``served_by``).
    """

    address: str
    size_bytes: int
    duration_ms: float
    local_addr: str
    mptcp: bool
    paths: dict[str, PathSample]
    server: dict[str, Any] = field(default_factory=dict)

    @property
    def throughput_bps(self) -> float:
        return 8.0 * self.size_bytes / (self.duration_ms / 1000.0) if self.duration_ms > 0 else 0.0


def _trailer(sock: socket.socket) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        sock.sendall(b"\x01")
        return _read_trailer(sock)
    return {}


class SsmpClient:
    """The device's SSMP steps over the interfaces in ``paths`` (see the module docstring).

    Parameters
    ----------
    paths: the interfaces to resolve and measure over (≥ 1); the first is the default interface
        (its DNS answer is the default server selection, DSS) unless ``default_interface`` names another.
    port: the content servers' TCP port (the meter's transfer protocol).
    rtt_samples: connect-time samples per candidate per path.
    probe_bytes: size of one stale-server probe per interface, bytes.
    stale_age_s: measurements older than this are not sent (and the service's list decides probes).
    bandwidth_min_bytes: downloads smaller than this report no bandwidth (mice: slow start).
    timeout_s: DNS, connect and transfer socket timeout, s.
    netns: the network namespace whose interfaces ``paths`` are (the agent's ``--netns``): every socket
        of the steps is created there (see the module docstring); None: this process's namespace.
    """

    def __init__(
        self,
        paths: Sequence[PathSpec],
        port: int,
        *,
        default_interface: str | None = None,
        rtt_samples: int = 3,
        probe_bytes: int = 1_048_576,
        stale_age_s: float = 600.0,
        bandwidth_min_bytes: int = DEFAULT_BANDWIDTH_MIN_BYTES,
        timeout_s: float = 5.0,
        netns: str | None = None,
    ) -> None:
        if not paths:
            raise ValueError("at least one path is required")
        self.paths = {p.interface: p for p in paths}
        self.port = port
        self.default_interface = default_interface or paths[0].interface
        if self.default_interface not in self.paths:
            raise ValueError(f"default_interface {self.default_interface!r} is not one of the paths")
        self.rtt_samples = rtt_samples
        self.probe_bytes = probe_bytes
        self.stale_age_s = stale_age_s
        self.bandwidth_min_bytes = bandwidth_min_bytes
        self.timeout_s = timeout_s
        self.netns = netns
        #: (server address, interface) → the latest :class:`PathSample` (probes and downloads).
        self.measured: dict[tuple[str, str], PathSample] = {}

    # -- steps 1-3 ---------------------------------------------------------------------------------

    def paths_of(self, interfaces: Iterable[str] | None = None) -> dict[str, PathSpec]:
        """This client's paths over ``interfaces`` (names; None: every one), in this client's order."""
        if interfaces is None:
            return self.paths
        wanted = set(interfaces)
        return {name: spec for name, spec in self.paths.items() if name in wanted}

    def resolve_all(self, host: str, interfaces: Iterable[str] | None = None) -> list[tuple[str, str]]:
        """``(address, interface)`` per DNS answer of every interface (of ``interfaces`` only, when given),
        interface order; unanswered ones skipped."""
        out: list[tuple[str, str]] = []
        for name, path in self.paths_of(interfaces).items():
            try:
                out.extend((a, name) for a in resolve(host, path, self.timeout_s, self.netns))
            except (dns.exception.DNSException, OSError) as exc:
                log.warning("DNS over %s failed for %s: %s", name, host, exc)
        return out

    def measure_rtts(
        self, addresses: Sequence[str], interfaces: Iterable[str] | None = None
    ) -> dict[tuple[str, str], list[float]]:
        """``rtt_samples`` connect RTTs (ms) per (address, interface), taken in interleaved rounds, over every
        interface (``interfaces`` only, when given).

        Each round measures every address over every interface once, starting from the next interface
        in turn, after one unrecorded connect per interface: the first connection of a burst pays a
        cost of its own (measured in the SSMP testbed: ≈0.3 ms against ≈0.02 ms for the next ones, cold
        caches), which must not fall on one path or server.
        """
        paths = self.paths_of(interfaces)
        out: dict[tuple[str, str], list[float]] = {(a, n): [] for a in addresses for n in paths}
        specs = list(paths.values())
        if addresses and specs:
            for spec in specs:  # warm-up, not recorded
                connect_rtt_ms(addresses[0], self.port, spec, self.timeout_s, self.netns)
        for k in range(self.rtt_samples):
            for address in addresses:
                for spec in specs[k % len(specs) :] + specs[: k % len(specs)]:
                    rtt = connect_rtt_ms(address, self.port, spec, self.timeout_s, self.netns)
                    out[(address, spec.interface)].append(rtt)
        return out

    def content(self, host: str, expected_size_bytes: int, interfaces: Iterable[str] | None = None) -> dict[str, Any]:
        """The ``content`` block of a RecommendRequest (wire shape of ``ContentRequest``), measured over
        ``interfaces`` only when given (the ones the request reports: the service refuses a block naming
        another), else over every path. ``default_interface`` is left out when it is not among them.

        Raises ``LookupError`` when no interface's DNS answered (or none of ``interfaces`` is a path).
        """
        names = list(self.paths_of(interfaces))
        answers = self.resolve_all(host, names)
        if not answers:
            raise LookupError(f"no interface resolved {host}")
        now = time.time()
        rtts = self.measure_rtts(list(dict.fromkeys(a for a, _ in answers)), names)
        candidates = []
        for address, dns_interface in answers:
            paths = []
            for name in names:
                key = (address, name)
                entry: dict[str, Any] = {"interface": name, "rtt_ms_samples": rtts[key]}
                known = self.measured.get(key)
                if known is not None and now - known.at_s <= self.stale_age_s:
                    if known.loss is not None:
                        entry["loss"] = known.loss
                    if known.bandwidth_bps is not None:
                        entry["bandwidth_bps"] = known.bandwidth_bps
                paths.append(entry)
            candidates.append({"address": address, "dns_interface": dns_interface, "paths": paths})
        block: dict[str, Any] = {"expected_size_bytes": int(expected_size_bytes), "candidates": candidates}
        if self.default_interface in names:
            block["default_interface"] = self.default_interface
        return block

    # -- step 4 -----------------------------------------------------------------------------------

    def probe(self, addresses: Sequence[str], force: bool = False) -> dict[tuple[str, str], PathSample]:
        """Probe each of ``addresses`` over every interface (plain TCP, ``probe_bytes``); remembers the results.

        A path this device measured less than ``stale_age_s`` ago is not probed again unless ``force``
        (the service lists a server as stale until one of its transfers is reported; the device's own
        fresh probe already answers for it). A failed probe is logged and leaves no sample.
        """
        got: dict[tuple[str, str], PathSample] = {}
        now = time.time()
        for address in dict.fromkeys(addresses):
            for name, spec in self.paths.items():
                known = self.measured.get((address, name))
                if not force and known is not None and now - known.at_s <= self.stale_age_s:
                    continue
                try:
                    sample = self._probe_one(address, spec)
                except OSError as exc:
                    log.warning("probe of %s over %s failed: %s", address, name, exc)
                    continue
                got[(address, name)] = self.measured[(address, name)] = sample
        return got

    def _probe_one(self, address: str, spec: PathSpec) -> PathSample:
        sock = bound_socket(socket.SOCK_STREAM, spec, netns=self.netns)
        with sock:
            sock.settimeout(self.timeout_s)
            t0 = time.perf_counter()
            sock.connect((address, self.port))
            request_payload(sock, self.probe_bytes)
            duration_s = time.perf_counter() - t0
            mine = kernel_counters(sock)
            server = _trailer(sock)
        rtt = server.get("rtt_ms", mine.get("rtt_ms"))
        loss = server.get("loss")
        return PathSample(
            rtt_ms=float(rtt) if rtt else None,
            loss=float(loss) if loss is not None else None,
            bandwidth_bps=8.0 * self.probe_bytes / duration_s,
            at_s=time.time(),
        )

    # -- steps 5-6 --------------------------------------------------------------------------------

    def download(self, address: str, size_bytes: int, initial_interface: str | None = None) -> Download:
        """Download ``size_bytes`` from ``address`` over MPTCP, the initial subflow on ``initial_interface``.

        ``initial_interface`` None: routing picks (the default route). Falls back to TCP when the kernel
        refuses MPTCP. Remembers each subflow's sample. Raises ``OSError`` on failure (also when ``netns``
        can't be entered), ``ValueError`` for an ``initial_interface`` that is not one of the paths.
        """
        spec = self.paths.get(initial_interface) if initial_interface else None
        if initial_interface and spec is None:
            raise ValueError(f"unknown interface {initial_interface!r}")
        sock, _ = in_netns(self.netns, lambda: _client_socket(use_mptcp=True))  # created in netns, keeps it
        with sock:
            sock.settimeout(self.timeout_s)
            if spec is not None:
                sock.bind((spec.source_addr, 0))
            t0 = time.perf_counter()
            sock.connect((address, self.port))
            local = sock.getsockname()[0]
            request_payload(sock, size_bytes)
            duration_ms = max((time.perf_counter() - t0) * 1000.0, 1e-3)
            subflows = subflow_table(sock)
            mine = kernel_counters(sock) if not subflows else {}
            server = _trailer(sock)
        paths = self._subflow_samples(subflows, server, mine, local, size_bytes, duration_ms)
        for name, sample in paths.items():
            prev = self.measured.get((address, name))
            if sample.bandwidth_bps is None and prev is not None:  # a mice download keeps the known B
                sample = PathSample(sample.rtt_ms, sample.loss, prev.bandwidth_bps, sample.at_s)
            self.measured[(address, name)] = sample
        return Download(address, size_bytes, duration_ms, local, sock.proto == IPPROTO_MPTCP, paths, server)

    def _interface_of(self, local_addr: str | None) -> str | None:
        return next((n for n, s in self.paths.items() if s.source_addr == local_addr), None)

    def _subflow_samples(
        self,
        subflows: list[dict[str, Any]],
        server: Mapping[str, Any],
        mine: Mapping[str, Any],
        local: str,
        size_bytes: int,
        duration_ms: float,
    ) -> dict[str, PathSample]:
        now = time.time()
        with_b = size_bytes >= self.bandwidth_min_bytes
        server_rows = {r.get("remote"): r for r in server.get("subflow_table", []) if isinstance(r, dict)}
        out: dict[str, PathSample] = {}
        if not subflows:  # plain TCP (or counters refused): one path, the connection's own numbers
            name = self._interface_of(local)
            if name is not None:
                rtt = server.get("rtt_ms", mine.get("rtt_ms"))
                bw = 8.0 * size_bytes / (duration_ms / 1000.0) if with_b else None
                out[name] = PathSample(rtt, server.get("loss", mine.get("loss")), bw, now)
            return out
        for row in subflows:
            name = self._interface_of(row.get("local"))
            if name is None or name in out:
                continue
            theirs = server_rows.get(row.get("local"), {})
            sent = theirs.get("bytes_sent")
            loss = (
                min(1.0, theirs.get("bytes_retrans", 0) / sent) if sent else server.get("loss")
            )  # per subflow when the server says, else the connection's
            rtt = theirs.get("rtt_ms") or row.get("rtt_ms") or None
            bw = 8.0 * row.get("bytes_received", 0) / (duration_ms / 1000.0) if with_b else None
            out[name] = PathSample(rtt, loss, bw, now)
        return out

    @staticmethod
    def server_transfer(download: Download) -> dict[str, Any]:
        """The outcome's ``server_transfer`` (wire shape of ``ServerTransfer``) for ``download``."""
        paths = []
        for name, s in download.paths.items():
            entry: dict[str, Any] = {"interface": name, "rtt_ms_samples": [s.rtt_ms] if s.rtt_ms else []}
            if s.loss is not None:
                entry["loss"] = s.loss
            if s.bandwidth_bps is not None:
                entry["bandwidth_bps"] = s.bandwidth_bps
            paths.append(entry)
        return {
            "address": download.address,
            "size_bytes": download.size_bytes,
            "duration_ms": download.duration_ms,
            "paths": paths,
        }


@dataclass(frozen=True)
class FetchResult:
    """One SSMP fetch: the request's content block, the service's answer, probes done and the download."""

    content: dict[str, Any]
    recommendation: dict[str, Any]
    probed: dict[tuple[str, str], PathSample]
    download: Download
    ack: dict[str, Any] | None


def fetch(ssmp: SsmpClient, client: Any, request: Mapping[str, Any], host: str, size_bytes: int) -> FetchResult:
    """Steps 1–6 for one content: ``request`` is the device's RecommendRequest (without ``content``).

    ``client`` is a :class:`~edgepath_agent.client.ServiceClient`. The server picked by the service
    is downloaded from even when its answer has no ``server_selection`` (then: the DSS answer, routing's
    initial subflow). Raises ``LookupError`` (no DNS answer), ``ServiceError`` or ``OSError``.
    """
    content = ssmp.content(host, size_bytes)
    rec = client.recommend({**request, "content": content})
    sel = rec.get("server_selection") or {}
    probed = ssmp.probe(sel.get("stale_servers") or [])
    if sel:
        address, initial = sel["address"], sel.get("initial_subflow_interface") or None
    else:
        dss = next((c for c in content["candidates"] if c["dns_interface"] == ssmp.default_interface), None)
        address, initial = (dss or content["candidates"][0])["address"], None
    dl = ssmp.download(address, size_bytes, initial)
    ack = None
    if rec.get("decision_id"):
        outcome = {
            "device_id": request["device_id"],
            "decision_id": rec["decision_id"],
            "throughput_bps": dl.throughput_bps,
            "server_transfer": SsmpClient.server_transfer(dl),
        }
        ack = client.report_outcome(outcome)
    return FetchResult(content, rec, probed, dl, ack)


SIOCGIFADDR = 0x8915


def interface_ipv4(name: str, netns: str | None = None) -> str:
    """The IPv4 address of interface ``name`` (``SIOCGIFADDR``, netdevice(7)), of network namespace ``netns`` if given.

    Raises ``OSError`` when there is no such interface or it has no IPv4 address, or ``netns`` can't be entered.
    """
    import fcntl

    # The ioctl names a device of the socket's namespace: the socket is created in netns.
    with in_netns(netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as s:
        raw = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
    return socket.inet_ntoa(raw[20:24])


class SsmpStep:
    """The daemon's SSMP hook: adds ``content`` to a step's request and measures the step on the pick.

    Parameters
    ----------
    client: the :class:`SsmpClient` (interfaces, DNS servers, content port).
    host: the content's host name (or address).
    size_bytes: how much to download per step, bytes.
    """

    def __init__(self, client: SsmpClient, host: str, size_bytes: int) -> None:
        self.client = client
        self.host = host
        self.size_bytes = size_bytes

    @classmethod
    def from_config(
        cls,
        interfaces: Sequence[str],
        content: str,
        size_bytes: int,
        dns: Mapping[str, str],
        timeout_s: float,
        netns: str | None = None,
    ) -> SsmpStep:
        """From the agent's settings: ``content`` = ``HOST:PORT``, ``dns`` = interface → its DNS server.

        ``size_bytes``: bytes downloaded per step; ``timeout_s``: socket timeout, s; ``netns``: the network
        namespace the interfaces are in (the agent's ``--netns``): their addresses are looked up there and
        every socket of the SSMP steps is created there. Interfaces without a DNS server or an IPv4 address
        are left out (logged).

        Raises
        ------
        ValueError
            When no interface is left or ``content`` has no port.
        OSError
            When ``netns`` cannot be entered (no such namespace, no ``CAP_SYS_ADMIN``): no interface can be
            used then; the message names the namespace (its ``errno`` is the cause's).
        """
        host, sep, port = content.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"content must be HOST:PORT, got {content!r}")
        if netns is not None:  # else each interface was logged as having "no IPv4 address"
            try:
                in_netns(netns, lambda: None)
            except OSError as exc:
                raise OSError(
                    exc.errno,
                    f"SSMP: cannot enter network namespace {netns!r} to find the interfaces' addresses: {exc}",
                ) from exc
        specs = []
        for name in interfaces:
            if name not in dns:
                log.warning("SSMP: no DNS server configured for %s: left out", name)
                continue
            try:
                specs.append(PathSpec(name, interface_ipv4(name, netns), dns[name]))
            except OSError as exc:
                log.warning("SSMP: %s has no IPv4 address (%s): left out", name, exc)
        if not specs:
            raise ValueError("SSMP needs at least one interface with an IPv4 address and a DNS server")
        return cls(SsmpClient(specs, int(port), timeout_s=timeout_s, netns=netns), host, size_bytes)

    def with_content(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """``request`` plus the ``content`` block, measured over the interfaces ``request`` reports only (an
        interface left out of it, down or without an address, is neither asked nor named); unchanged (logged)
        when none of them resolved the host."""
        reported = [entry["name"] for entry in request.get("interfaces", ())]
        try:
            return {**request, "content": self.client.content(self.host, self.size_bytes, reported)}
        except (LookupError, OSError) as exc:
            log.warning("SSMP: no candidates for %s (%s): asking without content", self.host, exc)
            return dict(request)

    def measure(self, rec: Recommendation | Mapping[str, Any]) -> tuple[Any, dict[str, Any] | None]:
        """Probe the answer's stale servers, download from its pick: (``TransferResult`` or None, ``server_transfer``).

        Returns ``(None, None)`` when the answer has no ``server_selection`` or the download failed (logged).
        """
        from edgepath_agent.meter import TransferResult

        sel = rec.get("server_selection")
        if not sel:
            return None, None
        self.client.probe(sel.get("stale_servers") or [])
        try:
            dl = self.client.download(sel["address"], self.size_bytes, sel.get("initial_subflow_interface") or None)
        except (OSError, ValueError) as exc:
            log.warning("SSMP download from %s failed: %s", sel.get("address"), exc)
            return None, None
        first = dl.paths.get(self.client._interface_of(dl.local_addr) or "")
        losses = [p.loss for p in dl.paths.values() if p.loss is not None]
        result = TransferResult(
            bytes=dl.size_bytes,
            completion_s=dl.duration_ms / 1000.0,
            throughput_bps=dl.throughput_bps,
            local_addr=dl.local_addr,
            mptcp=dl.mptcp,
            rtt_ms=first.rtt_ms if first is not None else None,
            loss=max(losses) if losses else None,
            subflows=len(dl.paths) or None,
            server_counters=dl.server,
        )
        return result, SsmpClient.server_transfer(dl)
