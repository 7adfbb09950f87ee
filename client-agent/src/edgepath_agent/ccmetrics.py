"""Łuczak et al.'s congestion-control metrics from the kernel's counters, per transfer (issue 20).

Source: Ł. P. Łuczak, P. Ignaciuk, M. Morawski, "Evaluating MPTCP Congestion Control
Algorithms: Implications for Streaming in Open Internet", Future Internet 15(10):328, 2023,
Section 2.1. Their metrics, and how each is derived here from what the sender's kernel
exposes (``getsockopt``), sampled every ``interval_s`` during one transfer:

* **Path delay** τ_i(k): the smoothed RTT of subflow *i* (``tcpi_rtt``, RFC 6298 SRTT, µs),
  read through ``MPTCP_TCPINFO`` (one ``struct tcp_info`` per subflow).
* **Protocol delay** T_over(k) (their Eq. 2: from the moment the MPTCP level hands data to a
  subflow until that data is acknowledged at the data level, i.e. after reassembly): by
  Little's law over the sampling interval, the data-level bytes in flight divided by the
  data-level acknowledgement rate::

      T_over(k) = (new_bytes_sent − bytes_acked)(k) / (Δbytes_acked(k) / Δt)

  from ``struct mptcp_info`` (``mptcpi_bytes_sent`` counts new data only, the data-level
  ``snd_nxt`` advance; ``mptcpi_bytes_acked``; Linux ≥ 6.5). A DATA_ACK is sent only for
  in-order data, so this delay includes the receiver's reassembly wait. For plain TCP
  new_bytes_sent = ``tcpi_bytes_sent − tcpi_bytes_retrans`` (``tcpi_bytes_sent`` counts
  retransmissions, RFC 4898 HCDataOctetsOut). Intervals without new
  acknowledged data give no sample.
* **HoL blocking degree** (Eq. 7–9): ζ(k) = T_over(k) − max_i τ_i(k), the max over the
  subflows that sent data in the interval; v_av/ζ_av are the means over samples (Eq. 3, 8),
  v_max/ζ_max the maxima (Eq. 4, 9; ζ_max floored at 0 as in Eq. 11). Derived, not
  observed: the kernel exposes no per-packet reassembly time, so ζ is only as good as the
  Little's-law estimate (it can be negative for one sample; the mean keeps the sign).
* **Drop rate** (Eq. 12): δ = D/S·100 % with D = Σ_i ``tcpi_total_retrans`` (segments
  retransmitted, an upper bound on drops: spurious retransmissions count) and
  S = Σ_i ``tcpi_data_segs_out``; also per second (``drop_rate_seg_s``), the unit of their
  Table 3 (d₁, d₂).
* **Throughput**: payload bytes / completion time, Mbit/s (measured by the receiver,
  :func:`edgepath_agent.meter.transfer`).

``struct tcp_info`` offsets follow include/uapi/linux/tcp.h (Linux 6.x); ``struct mptcp_info``
follows include/uapi/linux/mptcp.h.
"""

from __future__ import annotations

import contextlib
import math
import socket
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: ``struct tcp_info`` fields decoded here: name → (struct format, byte offset) (include/uapi/linux/tcp.h).
TCP_INFO_FIELDS: dict[str, tuple[str, int]] = {
    "state": ("B", 0),
    "ca_state": ("B", 1),
    "retransmits": ("B", 2),
    "rto_us": ("I", 8),
    "snd_mss": ("I", 16),
    "unacked": ("I", 24),
    "lost": ("I", 32),
    "retrans": ("I", 36),
    "rtt_us": ("I", 68),
    "rttvar_us": ("I", 72),
    "snd_ssthresh": ("I", 76),
    "snd_cwnd": ("I", 80),
    "total_retrans": ("I", 100),
    "pacing_rate_Bps": ("Q", 104),
    "bytes_acked": ("Q", 120),
    "bytes_received": ("Q", 128),
    "segs_out": ("I", 136),
    "segs_in": ("I", 140),
    "notsent_bytes": ("I", 144),
    "min_rtt_us": ("I", 148),
    "data_segs_in": ("I", 152),
    "data_segs_out": ("I", 156),
    "delivery_rate_Bps": ("Q", 160),
    "delivered": ("I", 192),
    "bytes_sent": ("Q", 200),
    "bytes_retrans": ("Q", 208),
    "dsack_dups": ("I", 216),
    "reord_seen": ("I", 220),
    "rcv_ooopack": ("I", 224),
    "snd_wnd": ("I", 228),
}
#: Bytes of ``struct tcp_info`` asked for (the kernel copies min(asked, its own size)).
TCP_INFO_SIZE = 248

#: ``struct mptcp_info`` fields: name → (format, offset) (include/uapi/linux/mptcp.h).
MPTCP_INFO_FIELDS: dict[str, tuple[str, int]] = {
    "subflows": ("B", 0),
    "write_seq": ("Q", 16),
    "snd_una": ("Q", 24),
    "rcv_nxt": ("Q", 32),
    "retransmits": ("I", 44),
    "bytes_retrans": ("Q", 48),
    "bytes_sent": ("Q", 56),
    "bytes_received": ("Q", 64),
    "bytes_acked": ("Q", 72),
}
MPTCP_INFO_SIZE = 96


def _decode(raw: bytes, fields: Mapping[str, tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, (fmt, off) in fields.items():
        size = struct.calcsize("=" + fmt)
        if len(raw) >= off + size:
            out[name] = int(struct.unpack_from("=" + fmt, raw, off)[0])
    return out


def decode_tcp_info(raw: bytes) -> dict[str, int]:
    """Decode the fields of :data:`TCP_INFO_FIELDS` present in ``raw`` (a short, older struct omits the tail).

    Units as in the kernel: ``*_us`` µs, ``*_Bps`` bytes/s, counters in segments or bytes.
    """
    return _decode(raw, TCP_INFO_FIELDS)


def decode_mptcp_info(raw: bytes) -> dict[str, int]:
    """Decode ``struct mptcp_info`` fields of :data:`MPTCP_INFO_FIELDS` present in ``raw``."""
    return _decode(raw, MPTCP_INFO_FIELDS)


@dataclass(frozen=True)
class CounterSample:
    """One read of a connection's counters at ``t_s`` (monotonic seconds).

    ``level`` holds the data-level (MPTCP) or, for plain TCP, the connection's own byte
    counters (``new_bytes_sent``, ``bytes_acked``); ``subflows`` one decoded
    ``tcp_info`` per subflow.
    """

    t_s: float
    level: Mapping[str, int]
    subflows: Sequence[Mapping[str, int]]


def read_counters(sock: socket.socket) -> CounterSample:
    """Read ``sock``'s counters now (MPTCP: ``MPTCP_INFO`` + ``MPTCP_TCPINFO``; TCP: ``TCP_INFO``).

    Raises
    ------
    OSError
        When the kernel refuses the ``getsockopt``.
    """
    from edgepath_agent.meter import IPPROTO_MPTCP

    t = time.monotonic()
    if sock.proto == IPPROTO_MPTCP:
        try:
            return _read_mptcp(sock, t)
        except OSError:  # fallen back to TCP (the peer did not speak MPTCP): the subflow's TCP_INFO answers
            pass
    info = decode_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_SIZE))
    level = {
        "new_bytes_sent": info.get("bytes_sent", 0) - info.get("bytes_retrans", 0),
        "bytes_acked": info.get("bytes_acked", 0),
    }
    return CounterSample(t, level, [info])


def _read_mptcp(sock: socket.socket, t: float) -> CounterSample:
    from edgepath_agent.meter import MPTCP_INFO, SOL_MPTCP, _getsockopt_in

    info = decode_mptcp_info(sock.getsockopt(SOL_MPTCP, MPTCP_INFO, MPTCP_INFO_SIZE))
    level = {"new_bytes_sent": info.get("bytes_sent", 0), "bytes_acked": info.get("bytes_acked", 0)}
    n_max = 8
    buf = bytearray(struct.pack("=IIII", 16, 0, 0, TCP_INFO_SIZE) + bytes(TCP_INFO_SIZE * n_max))
    raw = _getsockopt_in(sock, buf)
    _, num, _, size_user = struct.unpack_from("=IIII", raw, 0)
    subs = [decode_tcp_info(raw[16 + i * size_user : 16 + (i + 1) * size_user]) for i in range(min(num, n_max))]
    if not subs:
        raise OSError("no subflow counters")
    return CounterSample(t, level, subs)


@dataclass
class CounterSampler:
    """Reads a connection's counters every ``interval_s`` in a thread until :meth:`stop`.

    Use as ``with CounterSampler(sock) as s: ...send...``; ``s.samples`` then holds the
    series (one last sample is taken on stop).
    """

    sock: socket.socket
    interval_s: float = 0.02
    samples: list[CounterSample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def _take(self) -> None:
        with contextlib.suppress(OSError):
            self.samples.append(read_counters(self.sock))

    def start(self) -> CounterSampler:
        self._take()
        self._thread = threading.Thread(target=self._run, name="cc-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._take()

    def __enter__(self) -> CounterSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _in_flight(level: Mapping[str, int]) -> float:
    return float(level.get("new_bytes_sent", 0) - level.get("bytes_acked", 0))


def paper_metrics(
    samples: Sequence[CounterSample], duration_s: float | None = None, rate_window: int = 5
) -> dict[str, float | None]:
    """Łuczak et al.'s per-run metrics from a counter series (see the module docstring for each formula).

    Parameters
    ----------
    samples
        Counter reads of one connection, in time order, shape (K+1,).
    duration_s
        Transfer duration, s, for ``drop_rate_seg_s`` (default: the sampled span).
    rate_window
        Intervals over which the acknowledgement rate (and the mean in-flight bytes) of one
        protocol-delay sample is taken (5 × 20 ms = 100 ms by default: a single 20 ms interval
        with one ACK makes the estimate explode).

    Returns
    -------
    dict
        ``path_delay_avg_ms`` (mean over samples of the mean SRTT of the sending subflows),
        ``path_delay_max_ms``, ``protocol_delay_avg_ms`` (v_av, Eq. 3), ``protocol_delay_max_ms``
        (v_max, Eq. 4), ``hol_degree_avg_ms`` (ζ_av, Eq. 8), ``hol_degree_max_ms`` (ζ_max, Eq. 9/11),
        ``drop_rate_pct`` (δ, Eq. 12), ``drop_rate_seg_s``, ``delay_samples``; a metric without
        any sample is ``None``.
    """
    t_over: list[float] = []
    hol: list[float] = []
    path: list[float] = []
    path_max: list[float] = []
    w = max(1, rate_window)
    for k in range(1, len(samples)):
        prev, cur = samples[k - 1], samples[k]
        sending = [
            s
            for i, s in enumerate(cur.subflows)
            if i < len(prev.subflows) and s.get("bytes_sent", 0) > prev.subflows[i].get("bytes_sent", 0)
        ] or [s for s in cur.subflows if s.get("bytes_sent", 0) > 0]
        taus = [s["rtt_us"] / 1000.0 for s in sending if s.get("rtt_us")]
        if taus:
            path.append(math.fsum(taus) / len(taus))
            path_max.append(max(taus))
        # Little's law over the last ``w`` intervals: mean in-flight bytes / acknowledgement rate.
        first = samples[max(0, k - w)]
        dt = cur.t_s - first.t_s
        acked = cur.level.get("bytes_acked", 0) - first.level.get("bytes_acked", 0)
        if dt <= 0 or acked <= 0:
            continue
        window = samples[max(0, k - w) : k + 1]
        inflight = math.fsum(_in_flight(s.level) for s in window) / len(window)
        d_ms = 1000.0 * max(inflight, 0.0) / (acked / dt)
        t_over.append(d_ms)
        if taus:
            hol.append(d_ms - max(taus))
    last = samples[-1] if samples else None
    drops = sum(s.get("total_retrans", 0) for s in last.subflows) if last else 0
    sent = sum(s.get("data_segs_out", 0) for s in last.subflows) if last else 0
    span = duration_s if duration_s else (samples[-1].t_s - samples[0].t_s if len(samples) > 1 else 0.0)

    def avg(xs: list[float]) -> float | None:
        return math.fsum(xs) / len(xs) if xs else None

    return {
        "path_delay_avg_ms": avg(path),
        "path_delay_max_ms": max(path_max) if path_max else None,
        "protocol_delay_avg_ms": avg(t_over),
        "protocol_delay_max_ms": max(t_over) if t_over else None,
        "hol_degree_avg_ms": avg(hol),
        "hol_degree_max_ms": max(max(hol), 0.0) if hol else None,
        "drop_rate_pct": 100.0 * drops / sent if sent else None,
        "drop_rate_seg_s": drops / span if span > 0 else None,
        "delay_samples": float(len(t_over)),
    }


def metrics_trailer(samples: Sequence[CounterSample], duration_s: float | None = None) -> dict[str, Any]:
    """:func:`paper_metrics` plus the sample count, JSON-ready (``None`` for missing metrics)."""
    return {**paper_metrics(samples, duration_s), "samples": len(samples)}
