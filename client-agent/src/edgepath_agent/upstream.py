"""Upstream connectivity of each path, and the primary-path guard built on it.

Why (upstream Linux MPTCP facts the agent works around):

* New MPTCP connections fail when the path carrying the initial subflow has no
  connectivity even though its interface is up (multipath-tcp/mptcp_net-next
  issue #593): the kernel opens the initial subflow where routing sends it and
  adds the other subflows only after that handshake succeeds, so a WiFi access point
  whose uplink is dead blackholes every new connection.
* The in-kernel scheduler does not move traffic back to a path that recovers
  (mptcp_net-next issue #581).

So the agent (a) probes a path before making it primary, (b) keeps probing the
current primary and switches away after ``failures`` consecutive failed probes,
(c) switches back to the preferred path (the service's recommendation) after
``recoveries`` consecutive successful probes, and (d) keeps every path found without
upstream (``failures`` failed probes in a row) a ``backup`` endpoint, whichever path is
primary, re-probing one such path per periodic check until it answers.

A probe is a TCP handshake to ``target`` (HOST:PORT) from a socket bound to the
interface (``SO_BINDTODEVICE``, Linux ≥ 5.7 needs no CAP_NET_RAW for it) and to the
interface's address, so routing cannot send it elsewhere. A completed handshake or a
reset (connection refused) proves a round trip over the path; a timeout or an ICMP
error does not.
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpstreamProbe:
    """One probe of one interface. ``elapsed_ms``: time to the answer (or to the timeout), ms."""

    interface: str
    ok: bool
    detail: str
    elapsed_ms: float
    at_unix_ms: int


def probe_upstream(
    interface: str, target: tuple[str, int], source: str | None = None, timeout_s: float = 1.0
) -> UpstreamProbe:
    """TCP handshake to ``target`` leaving through ``interface`` (from ``source`` when given).

    Never raises: every failure is an unsuccessful :class:`UpstreamProbe` naming the error.
    """
    start = time.monotonic()
    at = int(time.time() * 1000)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, interface.encode())
            if source:
                sock.bind((source, 0))
            sock.settimeout(timeout_s)
            try:
                sock.connect(target)
                detail = "handshake completed"
            except ConnectionRefusedError:
                detail = "reset received (port closed, path answers)"
    except TimeoutError:
        return UpstreamProbe(interface, False, f"no answer within {timeout_s:g} s", _ms(start), at)
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "error")
        return UpstreamProbe(interface, False, f"{name}: {exc.strerror or exc}", _ms(start), at)
    return UpstreamProbe(interface, True, detail, _ms(start), at)


def _ms(start: float) -> float:
    return round((time.monotonic() - start) * 1000.0, 1)


def parse_target(value: str) -> tuple[str, int]:
    """``HOST:PORT`` → ``(host, port)``.

    Raises
    ------
    ValueError
        Without a port, with a port outside 1–65535, or an IPv6 address without its brackets
        (``2001:db8::1`` is refused, ``[2001:db8::1]:5201`` is one).
    """
    host, sep, port = value.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or (":" in host and not bracketed):
        raise ValueError(f"{value!r}: expected HOST:PORT (port 1–65535; [ADDR]:PORT for IPv6)")
    return host.strip("[]"), int(port)


Prober = Callable[[str], UpstreamProbe]


@dataclass
class PrimaryGuard:
    """Decides which interface may carry the initial subflow, from probe results.

    Parameters
    ----------
    interfaces
        Managed interfaces in order of fallback preference.
    prober
        ``interface → UpstreamProbe``.
    failures
        Consecutive failed probes after which the current primary is abandoned (≥ 1).
    recoveries
        Consecutive successful probes after which the preferred path is restored (≥ 1).
    """

    interfaces: tuple[str, ...]
    prober: Prober
    failures: int = 2
    recoveries: int = 2
    last: dict[str, UpstreamProbe] = field(default_factory=dict)
    _bad: dict[str, int] = field(default_factory=dict)
    _good: dict[str, int] = field(default_factory=dict)
    _rechecked: str | None = None

    def probe(self, interface: str) -> UpstreamProbe:
        """Probe once and update the consecutive-result counters."""
        result = self.prober(interface)
        self.last[interface] = result
        if result.ok:
            self._good[interface] = self._good.get(interface, 0) + 1
            self._bad[interface] = 0
        else:
            self._bad[interface] = self._bad.get(interface, 0) + 1
            self._good[interface] = 0
        return result

    def without_upstream(self) -> tuple[str, ...]:
        """The managed interfaces whose last ``failures`` probes in a row failed (none has answered since), in
        order of preference."""
        return tuple(n for n in self.interfaces if self._bad.get(n, 0) >= self.failures)

    def recheck(self, exclude: Iterable[str | None]) -> str | None:
        """Probe once the next interface without upstream (:meth:`without_upstream`) not in ``exclude`` (the paths
        :meth:`watch` probes itself: the primary and the preferred one), taking them in turn: one probe per call,
        so a periodic check costs at most one more probe timeout however many paths are dead. One answer takes
        the interface out of :meth:`without_upstream`. Returns the interface probed (None: none to probe)."""
        skip = set(exclude)
        dead = [n for n in self.without_upstream() if n not in skip]
        if not dead:
            return None
        order = self.interfaces
        start = order.index(self._rechecked) + 1 if self._rechecked in order else 0
        turn = next(n for n in (*order[start:], *order[:start]) if n in dead)
        self._rechecked = turn
        self.probe(turn)
        return turn

    def usable_now(self, interface: str) -> bool:
        """Probe ``interface`` up to ``failures`` times; True at the first success (for a path about to be primary)."""
        return any(self.probe(interface).ok for _ in range(max(1, self.failures)))

    def choose(self, preferred: str) -> tuple[str, str | None]:
        """Interface to make primary when ``preferred`` is recommended: ``(interface, reason or None)``.

        ``preferred`` when it answers; else the first other managed interface that does
        (reason says why); else ``preferred`` anyway (no path answers: nothing better).
        """
        if self.usable_now(preferred):
            return preferred, None
        why = self.last[preferred].detail
        for other in self.interfaces:
            if other != preferred and self.usable_now(other):
                return other, f"{preferred} has no upstream connectivity ({why}); {other} answers"
        return preferred, None

    def watch(self, current: str, preferred: str | None) -> tuple[str, str] | None:
        """One periodic check; ``(new primary, reason)`` when the primary should change, else ``None``.

        * The current primary failed ``failures`` probes in a row → the first other
          interface that answers.
        * The current primary is not the preferred one and the preferred one answered
          ``recoveries`` probes in a row → back to the preferred one.
        """
        if not self.probe(current).ok and self._bad.get(current, 0) >= self.failures:
            why = self.last[current].detail
            for other in self.interfaces:
                if other != current and self.usable_now(other):
                    return other, f"primary {current} lost upstream connectivity ({why}); {other} answers"
            return None
        if preferred and preferred != current and self.probe(preferred).ok:
            if self._good.get(preferred, 0) >= self.recoveries:
                return preferred, f"preferred path {preferred} answers again ({self._good[preferred]} probes)"
        return None
