"""SSMP testbed (``edgepath-testbed run --scenario ssmp``): SSMP vs DSS on real MPTCP downloads.

Topology (names unique per run; addresses private to the namespaces)::

    device ns ep-sd-RID         WiFi router ns ep-sw-RID          CDN server ns ep-sK-RID (K = 1..3)
      wlan0 10.1.1.2/24 ── veth ── acc 10.1.1.1 (DNS :53)  towK 10.2.K.1 ── veth ── tow 10.2.K.2 ┐
      wwan0 10.1.2.2/24 ── veth ── acc 10.1.2.1 (DNS :53)  tocK 10.3.K.1 ── veth ── toc 10.3.K.2 ┤ lo 10.9.0.K
                                cellular router ns ep-sc-RID                                 ┘

Each CDN server has one link to each access router, so each (server, path) pair has its own
``tbf`` rate (both ways) and ``iptables -m statistic`` loss (both ways, in the server's namespace):
the per-server, per-path bandwidth and loss of Yang et al. §V. Each router runs a real DNS server
(dnslib) for its access network; per trial each answers one of the servers at random, the
paper's "random server selection strategy to return the single-port optimal server". The device
routes per source address (``ip rule`` tables 101/102) and has both addresses as MPTCP ``subflow``
endpoints, so every download uses both paths.

**Not emulated: propagation delay.** This kernel has tbf/htb but no netem (nor fq/etf, which could
hold packets to a departure time a tc BPF program sets), so the paper's per-path
RTTs (5–30 ms) cannot be built; RTTs here are the veths' (≈0.05 ms) plus tbf queueing. The mice rule
(smallest mean RTT) therefore sees only queueing and loss-induced SYN retransmissions, and the
paper's mice scenario (servers differing *only* in delay) stays in the model
(``edgepath eval ssmp --paper``). Sizes are scaled down from the paper's (elephants 100–1000 MB) to
keep a run within minutes; rates are the paper's.

Per trial and size: both DNS answers are drawn; **DSS** downloads from the default interface's
(wlan0's) answer with routing's initial subflow; **SSMP** resolves over both interfaces, measures
connect RTTs per candidate per path, asks the service (``edgepath serve`` on the device's loopback)
with ``content.candidates``, probes the servers it lists as stale, downloads from the pick with the
initial subflow on the named interface and reports ``server_transfer``. The two run in random order
with the token buckets refilled in between. Every download is checked on the server side: the
server whose log holds the connection (peer address and size) must be the one the policy picked.

Report keys: ``reduction_pct.{mice,elephant}.{mean,ci95}`` — per size the reduction of the mean
download time, ``100·(1 − mean t_SSMP / mean t_DSS)`` (the paper's figure: averages of repeated
downloads), averaged over the class's sizes, with the half-width of a paired bootstrap 95 % interval;
also the per-trial paired reductions ``100·(t_DSS − t_SSMP)/t_DSS`` (Student-t CI), overall and on
the trials where the two policies picked different servers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import platform
import secrets
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgepath_agent.meter import TCP_INFO_LEN, TransferServer, _recv_exact, kernel_counters, parse_tcp_info
from edgepath_agent.ssmp import subflow_table
from edgepath_agent.testbed.netns import call_in_netns, netns_supported, run_in_namespace, sh

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

log = logging.getLogger(__name__)

CDN_PORT = 8080
DNS_PORT = 53
CONTENT_HOST = "video.cdn.example"
MBIT = 1e6


# ---------------------------------------------------------------------------------------------- servers


class AnswerResolver:
    """dnslib resolver answering every A query with :attr:`address` (changed per trial; thread-safe read)."""

    def __init__(self, address: str, ttl_s: int = 0) -> None:
        self.address = address
        self.ttl_s = ttl_s
        self.queries = 0

    def resolve(self, request: Any, handler: Any) -> Any:
        from dnslib import QTYPE, RR, A

        reply = request.reply()
        self.queries += 1
        if request.q.qtype in (QTYPE.A, QTYPE.ANY):
            reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(self.address), ttl=self.ttl_s))
        return reply


def start_dns(address: str, port: int, answer: str) -> tuple[Any, AnswerResolver]:
    """A real UDP DNS server (dnslib ``DNSServer``) on ``address:port`` answering ``answer``; started."""
    from dnslib.server import DNSLogger, DNSServer

    resolver = AnswerResolver(answer)
    server = DNSServer(resolver, address=address, port=port, logger=DNSLogger("-request,-reply,-truncated"))
    server.start_thread()
    return server, resolver


@dataclass(frozen=True)
class Served:
    """One connection a :class:`CdnServer` served: peer address, bytes, when (Unix s)."""

    peer: str
    size_bytes: int
    at_s: float


class CdnServer(TransferServer):
    """Meter-protocol transfer server that logs what it served and reports per-subflow counters.

    The trailer adds ``served_by`` (``name``) and ``subflow_table`` (per subflow: ``remote`` address,
    ``rtt_ms``, ``bytes_sent``, ``bytes_retrans``; :func:`edgepath_agent.ssmp.subflow_table`), so the
    device can tell each path's loss apart.
    """

    def __init__(self, name: str, host: str = "0.0.0.0", port: int = 0) -> None:
        super().__init__(host, port)
        self.name = name
        self.served: list[Served] = []
        self._lock = threading.Lock()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(60.0)
                peer = conn.getpeername()[0]
                (size,) = struct.unpack("!Q", _recv_exact(conn, 8))
                left = size
                while left > 0:
                    n = min(left, len(self._payload))
                    conn.sendall(self._payload[:n])
                    left -= n
                with self._lock:
                    self.served.append(Served(peer, size, time.time()))
                if conn.recv(1) != b"\x01":
                    return
                counters: dict[str, Any] = dict(kernel_counters(conn))
                if "loss" not in counters:  # a plain-TCP client (probe) on the MPTCP listener: fallback socket
                    with contextlib.suppress(OSError):
                        info = parse_tcp_info(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN))
                        counters.setdefault("rtt_ms", info.get("rtt_ms"))
                        if info.get("bytes_sent"):
                            counters["loss"] = min(1.0, info["bytes_retrans"] / info["bytes_sent"])
                counters["served_by"] = self.name
                counters["subflow_table"] = subflow_table(conn)
                body = json.dumps(counters).encode()
                conn.sendall(struct.pack("!I", len(body)) + body)
            except OSError as exc:
                log.debug("cdn connection failed: %s", exc)

    def served_since(self, t_s: float) -> list[Served]:
        with self._lock:
            return [s for s in self.served if s.at_s >= t_s]


# ---------------------------------------------------------------------------------------------- topology


@dataclass(frozen=True)
class ServerLinks:
    """One CDN server's emulated paths: rate (Mbit/s) and random loss (fraction) per device interface."""

    name: str
    rate_mbit: dict[str, float]
    loss: dict[str, float]


#: Yang et al. §V-B-1 (elephants): server 1 80/30 Mbit/s, server 2 40/20, server 3 as server 2 with
#: 1 % and 2 % loss (wlan0/wwan0); their 10/20 ms RTTs cannot be emulated here (no netem).
PAPER_SERVERS = (
    ServerLinks("server1", {"wlan0": 80.0, "wwan0": 30.0}, {"wlan0": 0.0, "wwan0": 0.0}),
    ServerLinks("server2", {"wlan0": 40.0, "wwan0": 20.0}, {"wlan0": 0.0, "wwan0": 0.0}),
    ServerLinks("server3", {"wlan0": 40.0, "wwan0": 20.0}, {"wlan0": 0.01, "wwan0": 0.02}),
)
ACCESS = {"wlan0": ("10.1.1", "tow", 2, 101, 100), "wwan0": ("10.1.2", "toc", 3, 102, 200)}


def server_addr(k: int) -> str:
    """Address of CDN server ``k`` (1-based)."""
    return f"10.9.0.{k}"


@dataclass
class SsmpTestbed:
    """Device, two access routers (each with its DNS server) and ``len(servers)`` CDN server namespaces."""

    __test__ = False

    servers: tuple[ServerLinks, ...] = PAPER_SERVERS
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))
    _made: list[str] = field(default_factory=list)

    def ns(self, role: str) -> str:
        """Namespace name: ``dev``, ``wlan0``/``wwan0`` (routers) or ``1``..``n`` (servers)."""
        short = {"dev": "d", "wlan0": "w", "wwan0": "c"}.get(role, role)
        return f"ep-s{short}-{self.run_id}"

    def setup(self) -> SsmpTestbed:
        reason = netns_supported()
        if reason:
            raise RuntimeError(reason)
        try:
            self._setup()
        except BaseException:
            self.teardown()
            raise
        return self

    def _add_ns(self, name: str) -> None:
        sh(["ip", "netns", "add", name])
        self._made.append(name)
        sh(["ip", "-n", name, "link", "set", "lo", "up"])

    def _setup(self) -> None:
        dev = self.ns("dev")
        self._add_ns(dev)
        for iface, (net, _short, _third, table, metric) in ACCESS.items():
            r = self.ns(iface)
            self._add_ns(r)
            sh(["ip", "netns", "exec", r, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
            sh(["ip", "link", "add", iface, "netns", dev, "type", "veth", "peer", "name", "acc", "netns", r])
            sh(["ip", "-n", dev, "addr", "add", f"{net}.2/24", "dev", iface])
            sh(["ip", "-n", r, "addr", "add", f"{net}.1/24", "dev", "acc"])
            sh(["ip", "-n", dev, "link", "set", "dev", iface, "up"])
            sh(["ip", "-n", r, "link", "set", "dev", "acc", "up"])
            sh(["ip", "-n", dev, "route", "add", "default", "via", f"{net}.1", "dev", iface, "metric", str(metric)])
            sh(["ip", "-n", dev, "route", "add", "default", "via", f"{net}.1", "dev", iface, "table", str(table)])
            sh(["ip", "-n", dev, "rule", "add", "from", f"{net}.2", "table", str(table)])
            sh(["ip", "-n", dev, "mptcp", "endpoint", "add", f"{net}.2", "dev", iface, "subflow"])
        for k, srv in enumerate(self.servers, start=1):
            s = self.ns(str(k))
            self._add_ns(s)
            sh(["ip", "-n", s, "addr", "add", f"{server_addr(k)}/32", "dev", "lo"])
            for iface, (net, short, third, _table, _metric) in ACCESS.items():
                r = self.ns(iface)
                link = f"{short}{k}"
                sh(["ip", "link", "add", short, "netns", s, "type", "veth", "peer", "name", link, "netns", r])
                sh(["ip", "-n", s, "addr", "add", f"10.{third}.{k}.2/24", "dev", short])
                sh(["ip", "-n", r, "addr", "add", f"10.{third}.{k}.1/24", "dev", link])
                sh(["ip", "-n", s, "link", "set", "dev", short, "up"])
                sh(["ip", "-n", r, "link", "set", "dev", link, "up"])
                sh(["ip", "-n", s, "route", "add", f"{net}.0/24", "via", f"10.{third}.{k}.1", "dev", short])
                sh(["ip", "-n", r, "route", "add", f"{server_addr(k)}/32", "via", f"10.{third}.{k}.2", "dev", link])
                self._shape(s, short, r, link, srv.rate_mbit[iface])
                self._loss(s, short, srv.loss.get(iface, 0.0))
            sh(["ip", "-n", s, "mptcp", "limits", "set", "subflows", "2", "add_addr_accepted", "2"])
        sh(["ip", "-n", dev, "mptcp", "limits", "set", "subflows", "2", "add_addr_accepted", "2"])
        for name in self._made:
            sh(["ip", "netns", "exec", name, "sysctl", "-q", "-w", "net.mptcp.enabled=1"])
            sh(["ip", "netns", "exec", name, "sysctl", "-q", "-w", "net.ipv4.tcp_no_metrics_save=1"])

    @staticmethod
    def _shape(ns_a: str, dev_a: str, ns_b: str, dev_b: str, rate_mbit: float) -> None:
        rate_bps = rate_mbit * MBIT
        burst = max(16 * 1024, int(rate_bps / 8 * 0.01))
        spec = ["root", "tbf", "rate", f"{int(rate_bps)}bit", "burst", str(burst), "latency", "50ms"]
        sh(["tc", "-n", ns_a, "qdisc", "replace", "dev", dev_a, *spec])
        sh(["tc", "-n", ns_b, "qdisc", "replace", "dev", dev_b, *spec])

    @staticmethod
    def _loss(ns: str, dev: str, p: float) -> None:
        if p <= 0:
            return
        stat = ["-m", "statistic", "--mode", "random", "--probability", f"{p:.4f}", "-j", "DROP"]
        sh(["ip", "netns", "exec", ns, "iptables", "-A", "INPUT", "-i", dev, *stat])
        sh(["ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-o", dev, *stat])

    def teardown(self) -> None:
        """Delete every namespace this testbed made (never raises)."""
        while self._made:
            name = self._made.pop()
            with contextlib.suppress(Exception):
                sh(["ip", "netns", "del", name], check=False)


# ---------------------------------------------------------------------------------------------- scenario


@dataclass
class SsmpParams:
    """Everything that defines a run (written into the report)."""

    trials: int = 10
    mice_sizes: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
    elephant_sizes: tuple[int, ...] = (8_000_000, 32_000_000)
    seed: int = 7
    probe_bytes: int = 1_048_576
    timeout_s: float = 30.0
    video_trials: int = 10
    video_segments: int = 10
    video_segment_bytes: int = 750_000
    video_segment_s: float = 1.0
    video_startup_segments: int = 2
    run_id: str = ""
    command: list[str] = field(default_factory=list)


def mean_ci(values: ArrayLike) -> dict[str, float | int | None]:
    """Mean and Student-t 95 % half-width (``ci95``) of ``values``."""
    import numpy as np
    from scipy import stats

    x = np.asarray(values, dtype=float)
    n = int(x.size)
    if n == 0:
        return {"mean": None, "ci95": None, "n": 0}
    mean = float(x.mean())
    half = float(stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    return {"mean": mean, "ci95": half, "n": n}


def _wait_file(path: Path, proc: subprocess.Popen[Any], timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return dict(json.loads(path.read_text()))
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode} before it was ready")
        time.sleep(0.05)
    raise TimeoutError(f"{proc.args!r} not ready after {timeout_s} s")


def run_inside(p: SsmpParams, report: Path, plot: Path | None) -> dict[str, Any]:
    """The scenario proper; runs in the device namespace of testbed ``p.run_id``."""
    import numpy as np

    from edgepath_agent.client import connect_failover
    from edgepath_agent.ssmp import PathSpec, SsmpClient, fetch, resolve

    tb = SsmpTestbed(run_id=p.run_id)
    rng = np.random.default_rng(p.seed)
    n = len(tb.servers)
    cdn = [
        call_in_netns(tb.ns(str(k)), CdnServer, srv.name, "0.0.0.0", CDN_PORT)
        for k, srv in enumerate(tb.servers, start=1)
    ]
    for c in cdn:
        c.start()
    dns_servers = {
        iface: call_in_netns(tb.ns(iface), start_dns, f"{net}.1", DNS_PORT, server_addr(1))
        for iface, (net, *_rest) in ACCESS.items()
    }
    specs = [PathSpec(iface, f"{net}.2", f"{net}.1", DNS_PORT) for iface, (net, *_r) in ACCESS.items()]
    work = Path(tempfile.mkdtemp(prefix=f"edgepath-ssmp-{p.run_id}-"))
    service = None
    started = time.time()
    rows: list[dict[str, Any]] = []
    try:
        cmd = [sys.executable, "-m", "edgepath.cli", "serve", "--host", "127.0.0.1", "--grpc-port", "0",
               "--http-port", "0", "--ready-file", str(work / "ready.json"), "--seed", str(p.seed),
               "--log-level", "WARNING"]  # fmt: skip
        service = subprocess.Popen(cmd)
        ports = _wait_file(work / "ready.json", service, 60.0)
        client = connect_failover([f"grpc://127.0.0.1:{ports['grpc_port']}"], 10.0, 2)
        agent = SsmpClient(specs, CDN_PORT, default_interface="wlan0", probe_bytes=p.probe_bytes, timeout_s=p.timeout_s)
        request = {
            "device_id": f"testbed-ssmp-{p.run_id}",
            "interfaces": [{"name": "wlan0", "access_type": "WIFI"}, {"name": "wwan0", "access_type": "LTE"}],
        }
        addr_to_name = {server_addr(k): s.name for k, s in enumerate(tb.servers, start=1)}
        device_addrs = {f"{net}.2" for net, *_r in ACCESS.values()}

        def served_by(t0: float, size: int) -> list[str]:
            return sorted(
                c.name for c in cdn for s in c.served_since(t0) if s.size_bytes == size and s.peer in device_addrs
            )

        def set_answers(wlan_k: int, wwan_k: int) -> None:
            dns_servers["wlan0"][1].address = server_addr(wlan_k)
            dns_servers["wwan0"][1].address = server_addr(wwan_k)

        # Warm-up (not counted): one mice fetch per pair of answers, so SSMP's stale list makes the
        # agent probe every server once (§IV-B-1: DSS until B and p are known).
        warmup_rules = []
        for k in range(1, n + 1):
            set_answers(k, k % n + 1)
            r = fetch(agent, client, request, CONTENT_HOST, 1000)
            warmup_rules.append((r.recommendation.get("server_selection") or {}).get("rule"))
        sizes = [("mice", s) for s in p.mice_sizes] + [("elephant", s) for s in p.elephant_sizes]
        for trial in range(p.trials):
            for flow, size in sizes:
                wk, ck = (int(x) for x in rng.integers(1, n + 1, size=2))
                set_answers(wk, ck)
                row: dict[str, Any] = {"trial": trial, "flow": flow, "size_bytes": size,
                                       "dns_answers": {"wlan0": addr_to_name[server_addr(wk)],
                                                       "wwan0": addr_to_name[server_addr(ck)]}}  # fmt: skip
                for policy in rng.permutation(["dss", "ssmp"]):
                    time.sleep(0.05)  # token buckets refill (burst/rate ≤ 10 ms)
                    t0 = time.time()
                    rule: str | None
                    if policy == "dss":
                        dss_addr = resolve(CONTENT_HOST, specs[0], p.timeout_s)[0]
                        t_dl = time.time()
                        dl = agent.download(dss_addr, size, None)
                        picked, rule, overhead_ms = dss_addr, "dss", 0.0
                    else:
                        res = fetch(agent, client, request, CONTENT_HOST, size)
                        dl = res.download
                        sel = res.recommendation.get("server_selection") or {}
                        picked, rule = dl.address, sel.get("rule")
                        named = sel.get("initial_subflow_interface")
                        row["ssmp_initial_subflow_interface"] = named
                        row["initial_subflow_check"] = named is None or dl.local_addr == f"{ACCESS[named][0]}.2"
                        t_dl = t0  # the fetch's own steps precede the download
                        overhead_ms = (time.time() - t0) * 1000.0 - dl.duration_ms
                    servers = served_by(t_dl, size)
                    row[str(policy)] = {
                        "server": addr_to_name[picked],
                        "served_by": servers,
                        "server_check": servers == [addr_to_name[picked]],
                        "download_ms": dl.duration_ms,
                        "initial_subflow_addr": dl.local_addr,
                        "subflows": sorted(dl.paths),
                        "rule": rule,
                        "decision_overhead_ms": overhead_ms,
                    }
                rows.append(row)
            log.warning("trial %d/%d done", trial + 1, p.trials)
        videos = []
        for trial in range(p.video_trials):
            wk, ck = (int(x) for x in rng.integers(1, n + 1, size=2))
            set_answers(wk, ck)
            answers = {"wlan0": addr_to_name[server_addr(wk)], "wwan0": addr_to_name[server_addr(ck)]}
            video: dict[str, Any] = {"trial": trial, "dns_answers": answers}
            for policy in rng.permutation(["dss", "ssmp"]):
                time.sleep(0.05)
                t0 = time.time()
                t0_perf = time.perf_counter()
                done_s: list[float] = []
                if policy == "dss":
                    addr, initial = resolve(CONTENT_HOST, specs[0], p.timeout_s)[0], None
                else:
                    res = fetch(agent, client, request, CONTENT_HOST, p.video_segment_bytes)
                    done_s.append(time.perf_counter() - t0_perf)
                    sel = res.recommendation.get("server_selection") or {}
                    addr, initial = res.download.address, sel.get("initial_subflow_interface") or None
                while len(done_s) < p.video_segments:
                    agent.download(addr, p.video_segment_bytes, initial)
                    done_s.append(time.perf_counter() - t0_perf)
                startup_s, stall_s = playout(done_s, p.video_segment_s, p.video_startup_segments)
                segs = [srv.name for srv in cdn for x in srv.served_since(t0) if x.size_bytes == p.video_segment_bytes]
                video[str(policy)] = {
                    "server": addr_to_name[addr],
                    "startup_s": startup_s,
                    "stall_s": stall_s,
                    "segment_done_s": done_s,
                    "server_check": segs == [addr_to_name[addr]] * p.video_segments,
                }
            videos.append(video)
        result = build_report(p, rows, warmup_rules, time.time() - started, tb)
        result["video"] = video_report(p, videos)
    finally:
        if service is not None and service.poll() is None:
            service.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                service.wait(timeout=10)
        for c in cdn:
            c.close()
        for d, _r in dns_servers.values() if "dns_servers" in locals() else ():
            with contextlib.suppress(Exception):
                d.stop()
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(result, indent=2))
    if plot is not None:
        plot_report(result, plot)
    return result


def reduction_of_means(rows: Sequence[dict[str, Any]], seed: int, resamples: int = 2000) -> dict[str, Any]:
    """Mean over sizes of ``100·(1 − mean t_SSMP / mean t_DSS)``, with a paired bootstrap 95 % interval.

    ``rows`` are trials of one flow class (keys ``size_bytes``, ``dss``/``ssmp`` → ``download_ms``).
    Returns ``mean``, ``ci95`` (half-width), ``ci95_low``, ``ci95_high``, ``n`` (trials); None values
    without rows.
    """
    import numpy as np

    by_size: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for size in sorted({r["size_bytes"] for r in rows}):
        rs = [r for r in rows if r["size_bytes"] == size]
        by_size[size] = (
            np.array([r["dss"]["download_ms"] for r in rs]),
            np.array([r["ssmp"]["download_ms"] for r in rs]),
        )
    if not by_size:
        return {"mean": None, "ci95": None, "ci95_low": None, "ci95_high": None, "n": 0}

    def stat(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> float:
        return float(np.mean([100.0 * (1.0 - s.mean() / d.mean()) for d, s in pairs]))

    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(resamples):
        pairs = []
        for d, s in by_size.values():
            idx = rng.integers(0, len(d), len(d))
            pairs.append((d[idx], s[idx]))
        boot.append(stat(pairs))
    lo, hi = (float(v) for v in np.percentile(boot, [2.5, 97.5]))
    return {"mean": stat(list(by_size.values())), "ci95": (hi - lo) / 2, "ci95_low": lo, "ci95_high": hi,
            "n": len(rows)}  # fmt: skip


def playout(done_s: Sequence[float], segment_s: float, startup_segments: int) -> tuple[float, float]:
    """Start-up and stall time, s, of a player fed segments completing at ``done_s`` (s from the request).

    Playback starts when ``startup_segments`` segments are in (start-up time); segment k then plays
    from ``start + k·segment_s`` plus the stalls so far, and stalls while it has not arrived.
    """
    start = done_s[min(startup_segments, len(done_s)) - 1]
    stall = 0.0
    for k, t in enumerate(done_s):
        due = start + k * segment_s + stall
        if t > due:
            stall += t - due
    return start, stall


def video_report(p: SsmpParams, videos: list[dict[str, Any]]) -> dict[str, Any]:
    """Start-up and stall times per policy (mean, ci95) and the paired start-up reduction."""
    out: dict[str, Any] = {
        "segments": p.video_segments,
        "segment_bytes": p.video_segment_bytes,
        "segment_s": p.video_segment_s,
        "bitrate_mbps": 8e-6 * p.video_segment_bytes / p.video_segment_s,
        "startup_segments": p.video_startup_segments,
        "model": "segments fetched back to back over fresh MPTCP connections to one server per video (SSMP: one "
        "mice decision on the segment size, its first segment is the fetch's download; DSS: wlan0's DNS "
        "answer); start-up = time to the startup_segments-th segment, stall from the playout model "
        "(testbed/ssmp.py playout); the time includes SSMP's decision steps and DSS's DNS query",
    }
    for pol in ("dss", "ssmp"):
        out[pol] = {
            "startup_s": mean_ci([v[pol]["startup_s"] for v in videos]),
            "stall_s": mean_ci([v[pol]["stall_s"] for v in videos]),
        }
    out["startup_reduction_pct"] = mean_ci(
        [100.0 * (v["dss"]["startup_s"] - v["ssmp"]["startup_s"]) / v["dss"]["startup_s"] for v in videos]
    )
    out["server_side_check"] = {
        "videos": 2 * len(videos),
        "matching": sum(v[pol]["server_check"] for v in videos for pol in ("dss", "ssmp")),
    }
    out["per_video"] = videos
    return out


#: Yang et al. §V-B-1, Figs. 5–6: download-time reductions of SSMP vs DSS, %.
PAPER_REDUCTION_PCT = {
    "mice": {"1KB": 38.46, "10KB": 38.46, "100KB": 34.28, "1000KB": 33.11},
    "elephant": {"100MB": 65.0, "300MB": 65.0, "500MB": 70.0, "1000MB": 66.0},
}


def build_report(
    p: SsmpParams, rows: list[dict[str, Any]], warmup_rules: list[Any], duration_s: float, tb: SsmpTestbed
) -> dict[str, Any]:
    """The JSON report (keys in the module docstring)."""
    import numpy as np

    def red(r: dict[str, Any]) -> float:
        return 100.0 * (r["dss"]["download_ms"] - r["ssmp"]["download_ms"]) / r["dss"]["download_ms"]

    reduction: dict[str, Any] = {}
    per_size: dict[str, Any] = {}
    paired_trial: dict[str, Any] = {}
    when_picks_differ: dict[str, Any] = {}
    for flow in ("mice", "elephant"):
        sel = [r for r in rows if r["flow"] == flow]
        reduction[flow] = reduction_of_means(sel, p.seed)
        paired_trial[flow] = mean_ci([red(r) for r in sel])
        when_picks_differ[flow] = mean_ci([red(r) for r in sel if r["dss"]["server"] != r["ssmp"]["server"]])
        for size in sorted({r["size_bytes"] for r in sel}):
            rs = [r for r in sel if r["size_bytes"] == size]
            dss = np.array([r["dss"]["download_ms"] for r in rs])
            ssmp = np.array([r["ssmp"]["download_ms"] for r in rs])
            per_size[str(size)] = {
                "flow": flow,
                "dss_ms": mean_ci(dss),
                "ssmp_ms": mean_ci(ssmp),
                "reduction_of_means_pct": reduction_of_means(rs, p.seed),
                "paired_reduction_pct": mean_ci([red(r) for r in rs]),
                "same_server_share": float(np.mean([r["dss"]["server"] == r["ssmp"]["server"] for r in rs])),
            }
    checks = [r[pol]["server_check"] for r in rows for pol in ("dss", "ssmp")]
    rules: dict[str, int] = {}
    for r in rows:
        rules[str(r["ssmp"]["rule"])] = rules.get(str(r["ssmp"]["rule"]), 0) + 1
    uname = platform.uname()
    return {
        "scenario": "ssmp: SSMP vs DSS server selection, real IPPROTO_MPTCP downloads, network namespaces",
        "command": " ".join(p.command),
        "params": asdict(p) | {"command": None},
        "kernel": f"{uname.system} {uname.release}",
        "duration_s": round(duration_s, 1),
        "servers": [asdict(s) for s in tb.servers],
        "reduction_pct": reduction,
        "reduction_pct_method": (
            "per size, 100·(1 − mean t_SSMP / mean t_DSS) over the trials (the paper's figure: averages of repeated "
            "downloads); mean = average over the class's sizes; ci95 = half-width of the 95 % paired bootstrap "
            "interval (trials resampled within each size, 2000 resamples), ci95_low/ci95_high its bounds"
        ),
        "paired_trial_reduction_pct": paired_trial,
        "paired_trial_reduction_pct_when_picks_differ": when_picks_differ,
        "per_size": per_size,
        "paper_reduction_pct": PAPER_REDUCTION_PCT,
        "server_side_check": {"downloads": len(checks), "matching": int(sum(checks))},
        "ssmp_rules": rules,
        "initial_subflow_on_named_interface_share": float(
            np.mean([r.get("initial_subflow_check", False) for r in rows])
        ),
        "warmup_rules": warmup_rules,
        "ssmp_decision_overhead_ms": mean_ci([r["ssmp"]["decision_overhead_ms"] for r in rows]),
        "two_subflows_share": float(np.mean([len(r[pol]["subflows"]) == 2 for r in rows for pol in ("dss", "ssmp")])),
        "two_subflows_share_elephant": float(
            np.mean([len(r[pol]["subflows"]) == 2 for r in rows if r["flow"] == "elephant" for pol in ("dss", "ssmp")])
        ),
        "emulated": (
            "Per (server, path): tbf rate both ways (the paper's §V-B-1 bandwidths) and iptables statistic random "
            "loss both ways (server 3: 1 % on wlan0, 2 % on wwan0); a real DNS server (dnslib, UDP) per access "
            "network answering a random server per trial; real MPTCP downloads with two subflows; the service "
            "(edgepath serve) deciding on the device's loopback."
        ),
        "not_emulated": (
            "Propagation delay (no netem on this kernel, nor fq/etf for BPF-set departure times; only tbf and htb): "
            "the paper's 5–30 ms per-path RTTs are absent, RTTs are "
            "veth + tbf queueing only, so the mice rule has no delay differences to exploit and the paper's "
            "delay-only mice scenario stays in the model (edgepath eval ssmp --paper). Sizes scaled down "
            "(elephants 8 and 32 MB instead of 100–1000 MB). Download time excludes "
            "SSMP's decision steps (DNS over both interfaces, RTT pings, service call, probes): reported apart "
            "as ssmp_decision_overhead_ms. Video: no real player (MP4Client in the paper): segment downloads and "
            "a playout model give start-up and stall times."
        ),
        "per_trial": rows,
    }


def plot_report(result: dict[str, Any], path: Path) -> None:
    """Mean download time per size (DSS vs SSMP, 95 % CI) and the reduction of the means per size (bootstrap CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sizes = list(result["per_size"])
    x = np.arange(len(sizes))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for off, pol in ((-0.2, "dss"), (0.2, "ssmp")):
        m = [result["per_size"][s][f"{pol}_ms"]["mean"] for s in sizes]
        e = [result["per_size"][s][f"{pol}_ms"]["ci95"] or 0.0 for s in sizes]
        ax1.bar(x + off, m, 0.4, yerr=e, label=pol.upper(), capsize=3)
    ax1.set_yscale("log")
    ax1.set_xticks(x, [f"{int(s) // 1000} KB" for s in sizes], rotation=30)
    ax1.set_ylabel("download time, ms (log)")
    ax1.legend()
    ax1.grid(alpha=0.3)
    red = [result["per_size"][s]["reduction_of_means_pct"] for s in sizes]
    low = [r["mean"] - r["ci95_low"] for r in red]
    high = [r["ci95_high"] - r["mean"] for r in red]
    ax2.bar(x, [r["mean"] for r in red], 0.6, yerr=[low, high], capsize=3)
    ax2.axhline(0, color="k", lw=0.8)
    ax2.set_xticks(x, [f"{int(s) // 1000} KB" for s in sizes], rotation=30)
    ax2.set_ylabel("SSMP reduction of mean download time vs DSS, % (bootstrap 95 % CI)")
    ax2.grid(alpha=0.3)
    fig.suptitle(f"SSMP vs DSS, real MPTCP in namespaces ({result['kernel']}); no delay emulation")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(p: SsmpParams, report: Path, plot: Path | None) -> dict[str, Any]:
    """Build the testbed, run the scenario inside its device namespace, tear down (always)."""
    tb = SsmpTestbed()
    p.run_id = tb.run_id
    try:
        tb.setup()
        argv = ["-m", "edgepath_agent.testbed.ssmp", "{params}", str(report)]
        if plot is not None:
            argv.append(str(plot))
        return run_in_namespace(tb.ns("dev"), argv, asdict(p), report, "ssmp scenario")
    finally:
        tb.teardown()


def _inside_main(argv: Sequence[str]) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    raw = json.loads(Path(argv[0]).read_text())
    raw["mice_sizes"], raw["elephant_sizes"] = tuple(raw["mice_sizes"]), tuple(raw["elephant_sizes"])
    run_inside(SsmpParams(**raw), Path(argv[1]), Path(argv[2]) if len(argv) > 2 else None)


if __name__ == "__main__":
    _inside_main(sys.argv[1:])
