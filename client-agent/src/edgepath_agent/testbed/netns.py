"""Two-namespace MPTCP testbed: a device with ``wlan0`` and ``wwan0``, and a server.

Topology (names unique per run; addresses private to the namespaces)::

    device netns  ep-dev-RID                       server netns  ep-srv-RID
      wlan0 10.1.1.2/24  ── veth (tbf both ways) ──  s-wlan0 10.1.1.1/24
      wwan0 10.1.2.2/24  ── veth (tbf both ways) ──  s-wwan0 10.1.2.1/24
      lo 127.0.0.1                                   lo 127.0.0.1, 10.1.0.1/32 (the server address)

Device routing as the README's "The device agent and the MPTCP testbed" says: a default route per interface (the
metric picks the initial subflow), per-source ``ip rule`` tables (101, 102) so each
additional subflow leaves on its own interface, both addresses as MPTCP ``subflow``
endpoints, limits ``subflows 2 add_addr_accepted 2`` on both sides. Rates are shaped
with ``tbf`` (this kernel has no ``netem``); loss, if asked for, with iptables
``statistic`` in the device namespace (both directions of the interface).

Everything is removed by :meth:`Testbed.teardown` (also registered with ``atexit``),
which never raises and is safe to call twice. Requires root/CAP_NET_ADMIN.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)

SERVER_ADDR = "10.1.0.1"
T = TypeVar("T")


@dataclass(frozen=True)
class Link:
    """One device interface and its veth peer."""

    name: str
    device_addr: str
    server_addr: str
    table: int

    @property
    def peer(self) -> str:
        return f"s-{self.name}"


PATHS = (Link("wlan0", "10.1.1.2", "10.1.1.1", 101), Link("wwan0", "10.1.2.2", "10.1.2.1", 102))


def netns_supported() -> str | None:
    """``None`` when this process can build the testbed, else the reason it can't."""
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN) for network namespaces"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2 (ip, tc)"
    try:
        if Path("/proc/sys/net/mptcp/enabled").read_text().strip() != "1":
            return "kernel MPTCP is disabled (net.mptcp.enabled=0)"
    except OSError:
        return "kernel without MPTCP (/proc/sys/net/mptcp missing)"
    return None


def sh(argv: Sequence[str], check: bool = True, timeout_s: float = 15.0) -> subprocess.CompletedProcess[str]:
    """Run a command; raise ``RuntimeError`` with its stderr when ``check`` and it fails."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


@dataclass
class Testbed:
    """Device and server namespaces joined by ``wlan0``/``wwan0`` veth paths.

    Parameters
    ----------
    run_id
        Suffix making the namespace names unique (random by default).
    wlan0_metric, wwan0_metric
        Initial default-route metrics (the lower one carries the initial subflow).
    """

    __test__ = False  # not a pytest test class

    run_id: str = field(default_factory=lambda: secrets.token_hex(3))
    wlan0_metric: int = 100
    wwan0_metric: int = 200
    paths: tuple[Link, ...] = PATHS
    _up: bool = False
    _loss: dict[str, float] = field(default_factory=dict)

    @property
    def device_ns(self) -> str:
        return f"ep-dev-{self.run_id}"

    @property
    def server_ns(self) -> str:
        return f"ep-srv-{self.run_id}"

    @property
    def server_addr(self) -> str:
        return SERVER_ADDR

    def dev(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the device namespace."""
        return sh(["ip", "netns", "exec", self.device_ns, *argv], check=check)

    def srv(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the server namespace."""
        return sh(["ip", "netns", "exec", self.server_ns, *argv], check=check)

    def setup(self) -> Testbed:
        """Build the topology (tears down what it built if a step fails)."""
        reason = netns_supported()
        if reason:
            raise RuntimeError(reason)
        atexit.register(self.teardown)
        try:
            self._setup()
        except BaseException:
            self.teardown()
            raise
        return self

    def _setup(self) -> None:
        d, s = self.device_ns, self.server_ns
        sh(["ip", "netns", "add", d])
        self._up = True
        sh(["ip", "netns", "add", s])
        for ns in (d, s):
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        sh(["ip", "-n", s, "addr", "add", f"{SERVER_ADDR}/32", "dev", "lo"])
        metrics = {"wlan0": self.wlan0_metric, "wwan0": self.wwan0_metric}
        for p in self.paths:
            sh(["ip", "link", "add", p.name, "netns", d, "type", "veth", "peer", "name", p.peer, "netns", s])
            sh(["ip", "-n", d, "addr", "add", f"{p.device_addr}/24", "dev", p.name])
            sh(["ip", "-n", s, "addr", "add", f"{p.server_addr}/24", "dev", p.peer])
            sh(["ip", "-n", d, "link", "set", p.name, "up"])
            sh(["ip", "-n", s, "link", "set", p.peer, "up"])
            sh(["ip", "-n", d, "route", "add", "default", "via", p.server_addr, "dev", p.name,
                "metric", str(metrics.get(p.name, 300))])  # fmt: skip
            sh(["ip", "-n", d, "route", "add", "default", "via", p.server_addr, "dev", p.name, "table", str(p.table)])
            sh(["ip", "-n", d, "rule", "add", "from", p.device_addr, "table", str(p.table)])
            sh(["ip", "-n", d, "mptcp", "endpoint", "add", p.device_addr, "dev", p.name, "subflow"])
        for ns in (d, s):
            sh(["ip", "-n", ns, "mptcp", "limits", "set", "subflows", "2", "add_addr_accepted", "2"])
            sh(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.mptcp.enabled=1"])

    def shape(self, name: str, rate_mbit: float, burst_bytes: int | None = None, latency_ms: float = 50.0) -> float:
        """Shape path ``name`` to ``rate_mbit`` Mbit/s in both directions with ``tbf``.

        ``burst`` defaults to max(16 KB, rate·10 ms) (it must cover one timer tick of
        tokens); ``latency`` bounds the tbf queue. Returns the time an empty bucket takes
        to refill, s (burst / rate).
        """
        rate_bps = rate_mbit * 1e6
        burst = burst_bytes or max(16 * 1024, int(rate_bps / 8 * 0.01))
        spec = ["root", "tbf", "rate", f"{int(rate_bps)}bit", "burst", str(burst), "latency", f"{latency_ms}ms"]
        sh(["tc", "-n", self.device_ns, "qdisc", "replace", "dev", name, *spec])
        sh(["tc", "-n", self.server_ns, "qdisc", "replace", "dev", f"s-{name}", *spec])
        return burst * 8 / rate_bps

    def set_loss(self, name: str, probability: float) -> None:
        """Drop packets of ``name`` at random with ``probability`` both ways (iptables ``statistic``).

        The rules live in a chain of their own (``EP_LOSS``), rebuilt on each call.

        Raises
        ------
        RuntimeError
            When iptables is missing (see scripts/setup.sh APT_PACKAGES).
        """
        if shutil.which("iptables") is None:
            raise RuntimeError("iptables is not installed (scripts/setup.sh installs it)")
        if not self._loss:
            self.dev("iptables", "-N", "EP_LOSS")
            self.dev("iptables", "-I", "INPUT", "-j", "EP_LOSS")
            self.dev("iptables", "-I", "OUTPUT", "-j", "EP_LOSS")
        self._loss[name] = probability
        self.dev("iptables", "-F", "EP_LOSS")
        for ifname, p in self._loss.items():
            if p <= 0:
                continue
            for flag in ("-i", "-o"):
                stat = ["-m", "statistic", "--mode", "random", "--probability", f"{p:.4f}"]
                self.dev("iptables", "-A", "EP_LOSS", flag, ifname, *stat, "-j", "DROP")

    def teardown(self) -> None:
        """Delete both namespaces (their veths, rules, qdiscs go with them). Never raises."""
        if not self._up:
            return
        for ns in (self.device_ns, self.server_ns):
            with contextlib.suppress(Exception):
                sh(["ip", "netns", "del", ns], check=False)
        self._up = False
        with contextlib.suppress(Exception):
            atexit.unregister(self.teardown)

    def __enter__(self) -> Testbed:
        return self.setup()

    def __exit__(self, *exc: object) -> None:
        self.teardown()


CLONE_NEWNET = 0x40000000


def call_in_netns(netns: str, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run ``fn(*args, **kwargs)`` in a fresh thread that has entered network namespace ``netns``.

    Network namespaces are per thread (``setns(2)``), so only that thread moves;
    sockets it creates stay in ``netns`` for their lifetime (a listening
    :class:`~edgepath_agent.meter.TransferServer` keeps serving there).

    Raises
    ------
    OSError
        When the namespace can't be entered; any exception of ``fn`` is re-raised.
    """
    import ctypes
    import ctypes.util

    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({netns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            result.append(fn(*args, **kwargs))
        except BaseException as exc:  # re-raised in the caller
            error.append(exc)

    thread = threading.Thread(target=target, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def run_in_namespace(
    netns: str, module_argv: Sequence[str], params: dict[str, Any], report: Path, what: str
) -> dict[str, Any]:
    """Run ``python -m …`` inside ``netns`` on ``params`` and return the report it wrote (the testbeds' scenarios).

    ``params`` is written to a temporary JSON file whose path replaces the ``{params}`` item of
    ``module_argv`` (``["-m", "module", …]``); the process must write the JSON report to ``report``.

    Raises
    ------
    RuntimeError
        When the process exits non-zero (``what`` names the scenario).
    """
    params_file = Path(tempfile.mkstemp(prefix="edgepath-testbed-", suffix=".json")[1])
    try:
        params_file.write_text(json.dumps(params))
        argv = ["ip", "netns", "exec", netns, sys.executable]
        argv += [str(params_file) if a == "{params}" else a for a in module_argv]
        proc = subprocess.run(argv, check=False, env=os.environ.copy())
        if proc.returncode != 0:
            raise RuntimeError(f"{what} exited {proc.returncode}")
        return dict(json.loads(report.read_text()))
    finally:
        params_file.unlink(missing_ok=True)
