"""Active outcome probe through iperf3 (JSON output), over MPTCP where the device can.

The agent's active measurement of the primary path is an iperf3 download from the operator's
iperf3 server (``probe = "HOST:PORT"``, ``probe_tool = "iperf3"``, the default): the client runs
``iperf3 -c HOST -p PORT -R -n BYTES -J --get-server-output`` (``-R``: the server sends, so the
figure is the downlink the dataset and the bandit reason about) and this module reads the JSON.

How the probe gets MPTCP, in order of preference (:func:`detect_iperf3`):

1. ``native``: an iperf3 that lists ``--mptcp`` in its ``--help`` (iperf3 ≥ 3.16 built on Linux;
   the issue tracker's target is 3.19) runs with ``--mptcp``;
2. ``mptcpize``: an older iperf3 (Debian 12 ships 3.12) run under ``mptcpize run`` (mptcpd's
   ``LD_PRELOAD`` wrapper that turns ``socket(…, IPPROTO_TCP)`` into ``IPPROTO_MPTCP``; Debian
   package ``mptcpize``, without the mptcpd daemon);
3. ``tcp``: iperf3 alone — plain TCP, so the figure is the primary path's alone (no extra
   subflows); the agent logs this once and reports ``mptcp = false`` in the outcome.

Without an iperf3 binary, ``probe_tool = "iperf3"`` is refused at start-up (:class:`IperfMissing`);
``probe_tool = "builtin"`` keeps the agent's own meter (meter.py: its private request/response
protocol needs :class:`~edgepath_agent.meter.TransferServer` on the far side) — used by the testbed,
and the documented fallback for devices that cannot carry iperf3.

What the JSON gives (iperf3's ``end`` block; field names of iperf3 3.12–3.19):

* throughput, bit/s: ``end.sum_received.bits_per_second`` (bytes received by the client over the
  receiver's elapsed time);
* RTT, ms: the *sender's* (server's, under ``-R``) ``mean_rtt`` in µs from
  ``server_output_json.end.streams[0].sender`` — the kernel's smoothed RTT (RFC 6298 SRTT, TCP_INFO
  ``tcpi_rtt``) sampled each interval. The server sends JSON only when it runs with ``-J``
  (``iperf3 -s -J``, the documented server command); otherwise RTT and loss stay unknown (``None``,
  never 0) and the outcome carries throughput alone;
* loss, fraction: ``retransmits × MSS / bytes sent`` (``tcp_mss_default``, else 1448 bytes), an
  upper bound on the path's loss (spurious retransmissions count), the same definition as the
  built-in meter's (``tcpi_bytes_retrans / tcpi_bytes_sent``).
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Literal

from edgepath_agent.meter import TransferResult

log = logging.getLogger(__name__)

IperfMode = Literal["native", "mptcpize", "tcp"]
DEFAULT_MSS_BYTES = 1448


class IperfMissing(RuntimeError):
    """``probe_tool = "iperf3"`` on a device without an ``iperf3`` binary on ``PATH``."""


class IperfFailed(OSError):
    """iperf3 ran but produced no measurement (server unreachable, busy, bad output)."""


@dataclass(frozen=True)
class Iperf3:
    """An iperf3 client found on this device and how it reaches MPTCP.

    ``binary``: path of iperf3; ``mode``: ``native`` | ``mptcpize`` | ``tcp`` (module docstring);
    ``mptcpize``: path of mptcpize when ``mode == "mptcpize"``; ``version``: first line of
    ``iperf3 --version``.
    """

    binary: str
    mode: IperfMode
    version: str
    mptcpize: str | None = None

    def command(
        self,
        host: str,
        port: int,
        size_bytes: int,
        timeout_s: float,
        bind_addr: str | None = None,
        use_mptcp: bool = True,
        netns: str | None = None,
    ) -> list[str]:
        """argv of one reverse-mode (download) probe of ``size_bytes`` bytes; JSON on stdout.

        ``netns``: run the client inside that network namespace (``ip netns exec``; the testbed's device).
        """
        argv = [
            self.binary, "-c", host, "-p", str(port), "-R", "-n", str(size_bytes), "-J", "--get-server-output",
            "--connect-timeout", str(max(1, int(timeout_s * 1000))),
        ]  # fmt: skip
        if bind_addr:
            argv += ["-B", bind_addr]
        if use_mptcp and self.mode == "native":
            argv.append("--mptcp")
        if use_mptcp and self.mode == "mptcpize" and self.mptcpize:
            argv = [self.mptcpize, "run", *argv]
        if netns:
            argv = ["ip", "netns", "exec", netns, *argv]
        return argv

    @property
    def mptcp(self) -> bool:
        """Whether probes run over MPTCP (native flag or mptcpize)."""
        return self.mode != "tcp"


def detect_iperf3(binary: str = "iperf3") -> Iperf3 | None:
    """The iperf3 client on ``PATH`` (or at ``binary``) and its MPTCP mode; ``None`` if absent.

    Reads ``iperf3 --version`` and ``iperf3 --help`` (``--mptcp`` listed → native), then looks for
    ``mptcpize`` on ``PATH``. Never raises.
    """
    path = shutil.which(binary)
    if path is None:
        return None
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=5).stdout
        help_text = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("iperf3 at %s does not run: %s", path, exc)
        return None
    first = (version.splitlines() or [""])[0].strip()
    if "--mptcp" in help_text.stdout + help_text.stderr:
        return Iperf3(path, "native", first)
    wrapper = shutil.which("mptcpize")
    if wrapper:
        return Iperf3(path, "mptcpize", first, wrapper)
    return Iperf3(path, "tcp", first)


def parse_iperf3_json(doc: dict[str, Any], mptcp: bool, completion_s: float | None = None) -> TransferResult:
    """A :class:`TransferResult` from one reverse-mode iperf3 client JSON document.

    Parameters
    ----------
    doc
        ``iperf3 -J -R --get-server-output`` output, parsed.
    mptcp
        Whether the probe ran over MPTCP (known from how it was started, not from the JSON).
    completion_s
        Wall-clock time of the whole run, s (connection set-up included); default: the receiver's
        elapsed ``seconds``.

    Raises
    ------
    IperfFailed
        iperf3 reported an error (``error`` key) or the document lacks ``end.sum_received``, or the
        measured duration is not a positive finite number.
    """
    if doc.get("error"):
        raise IperfFailed(f"iperf3: {doc['error']}")
    try:
        received = doc["end"]["sum_received"]
        got = int(received["bytes"])
        seconds = float(received["seconds"])
    except (KeyError, TypeError, ValueError) as exc:
        raise IperfFailed(f"iperf3 JSON without end.sum_received ({exc})") from exc
    if not math.isfinite(seconds) or seconds <= 1e-6:  # guard the division below (a zero-length run)
        raise IperfFailed(f"iperf3 reported a duration of {seconds!r} s")
    sender = _server_sender(doc)
    rtt_ms = None
    loss = None
    if sender:
        mean_rtt_us = sender.get("mean_rtt")
        if isinstance(mean_rtt_us, int | float) and mean_rtt_us > 0:
            rtt_ms = float(mean_rtt_us) / 1000.0
        sent = sender.get("bytes")
        retrans = sender.get("retransmits")
        if isinstance(sent, int | float) and sent > 0 and isinstance(retrans, int | float) and retrans >= 0:
            mss = doc.get("start", {}).get("tcp_mss_default") or DEFAULT_MSS_BYTES
            loss = min(1.0, float(retrans) * float(mss) / float(sent))
    connected = doc.get("start", {}).get("connected") or [{}]
    return TransferResult(
        bytes=got,
        completion_s=completion_s if completion_s is not None else seconds,
        throughput_bps=8.0 * got / seconds,
        local_addr=str(connected[0].get("local_host", "")),
        mptcp=mptcp,
        rtt_ms=rtt_ms,
        loss=loss,
        subflows=None,
        server_counters={"tool": "iperf3", "version": doc.get("start", {}).get("version")},
    )


def _server_sender(doc: dict[str, Any]) -> dict[str, Any] | None:
    try:
        streams = doc["server_output_json"]["end"]["streams"]
        return streams[0]["sender"] if streams else None
    except (KeyError, TypeError, IndexError):
        return None


def iperf3_transfer(
    tool: Iperf3,
    host: str,
    port: int,
    size_bytes: int = 256 * 1024,
    timeout_s: float = 30.0,
    bind_addr: str | None = None,
    use_mptcp: bool = True,
    netns: str | None = None,
) -> TransferResult:
    """Download ``size_bytes`` from an iperf3 server and measure it (see the module docstring).

    ``bind_addr``: source address (else routing chooses: that is how the primary path acts);
    ``netns``: run the client in that network namespace.

    Raises
    ------
    IperfFailed
        iperf3 could not be run, timed out after ``timeout_s``, or reported an error (server down,
        busy with another test, refused).
    """
    argv = tool.command(host, port, size_bytes, timeout_s, bind_addr, use_mptcp, netns)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise IperfFailed(f"iperf3 to {host}:{port} did not finish within {timeout_s:g} s") from exc
    except OSError as exc:
        raise IperfFailed(f"iperf3 could not start: {exc}") from exc
    completion = time.perf_counter() - t0
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise IperfFailed(f"iperf3 exited {proc.returncode} without JSON: {detail[0]}") from exc
    return parse_iperf3_json(doc, mptcp=use_mptcp and tool.mptcp, completion_s=completion)
