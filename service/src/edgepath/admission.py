"""Explicit overload (issue 16): a bounded queue for the serving loop, shared by both transports.

Past capacity a request is refused at once with a retry hint (REST 503 + ``Retry-After``, gRPC
``RESOURCE_EXHAUSTED`` + ``retry-after-ms``) instead of waiting in a queue that grows without limit.
Two signals, either one sheds:

* **in flight**: more than ``max_inflight`` calls of one transport are inside the handlers;
* **event-loop lag**: the loop answered its last two timers more than ``max_lag_ms`` late
  (:meth:`Admission.monitor`).
  A server's backlog mostly waits *before* the handlers (grpc.aio's completion queue, uvicorn's parsed
  requests): the handlers' in-flight count stays small while every call waits its turn on the loop, so the
  lag of a short timer (:data:`DEFAULT_MONITOR_PERIOD_S`) is the queueing delay every new call is about to see.
  Shedding while it exceeds ``max_lag_ms`` bounds the wait of the admitted calls near that figure.

The monitor also measures the serving thread's **busy share**: the share of the last ~``busy_window_s`` it wanted
the CPU (running, or runnable and waiting for a core), from its scheduler statistics,
``/proc/thread-self/schedstat`` (time on the CPU + time waiting on a runqueue, ns; kernel
``Documentation/scheduler/sched-stats.rst``), or ``time.thread_time`` (on the CPU only) where the kernel has none.
It is exported (``edgepath_admission_busy_ratio``, the serving process's saturation for an operator's
dashboard) and does not shed. grpc.aio accepts one call per loop wake-up (``AioServer._server_main_loop`` keeps one
``grpc_server_request_call`` outstanding), so a backlog of gRPC calls waits in gRPC core, where neither the
handlers' in-flight count nor a timer's lag sees it. A busy share near 1 says the loop has no spare capacity, not
that a queue grows: shedding on it (at 0.97) also shed a closed loop of 16 calls in flight at the max rate, whose
queue is bounded by its 16 (gRPC, memory store: 871 decisions/s against 2,159 without it), so it is a gauge only.

Transports call :meth:`Admission.shed` before they read a request body; the loop-lag monitor runs as a
task of :class:`edgepath.main.Service` (without it only the in-flight bound applies).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator

#: Calls in progress per transport beyond which new ones are shed.
DEFAULT_MAX_INFLIGHT = 64
#: Event-loop lag beyond which new calls are shed, ms (two measurements in a row: one GC pause or a
#: moment of CPU starvation on a shared machine does not shed).
DEFAULT_MAX_LAG_MS = 100.0
#: Time constant of the busy share's exponential average, s.
DEFAULT_BUSY_WINDOW_S = 0.1
#: Period of the lag and busy-share monitor, s. Each period wakes the serving loop once: an idle ``edgepath serve``
#: cost 5.5 % of a core at 5 ms and 1.6-1.8 % at 25 ms (two 10 s measurements each). Under a closed loop of calls the
#: server CPU per Recommend against the 5 ms build's, both served at once (``loadtest/cpu_ab.py``, 8 rounds): REST a
#: median 0.975× and 0.974×, gRPC 0.93×, 0.96×, 0.995× and 1.02× (no gain shown; issue 16, Session 36). Against a lag
#: bound of 100 ms over two readings, 25 ms still takes a lagging loop's readings at once (each comes a lag late).
DEFAULT_MONITOR_PERIOD_S = 0.025
#: Period of the monitor while its last reading is past half the lag bound, s: a shed then ends within about this
#: long of the loop's recovery, as with the 5 ms period of earlier releases (a reading is the shedding signal until
#: the next one: at 25 ms throughout, the bench's REST batch phase at the max rate, memory store, shed 406 calls
#: where the 5 ms period had shed 38-59 in five runs; issue 16, Session 36).
LAGGING_MONITOR_PERIOD_S = 0.005
#: Retry hint of a shed call, ms (REST rounds it up to whole seconds, RFC 9110 §10.2.3).
RETRY_AFTER_MS = 100


@contextlib.contextmanager
def thread_busy_clock() -> Iterator[Callable[[], int]]:
    """A clock of the calling thread's demand for CPU, ns: time on the CPU plus time runnable on a runqueue
    (``/proc/thread-self/schedstat`` fields 1 and 2, read with ``pread`` on a descriptor open for the ``with``
    block), or the thread's CPU time (``time.thread_time_ns``) where the kernel has no scheduler statistics.
    Enter it on the thread it measures."""
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        yield time.thread_time_ns
        return

    def schedstat_ns() -> int:
        run, wait = os.pread(fd, 64, 0).split()[:2]
        return int(run) + int(wait)

    try:
        schedstat_ns()  # the documented format, or fall back
        clock: Callable[[], int] = schedstat_ns
    except ValueError:
        clock = time.thread_time_ns
    try:
        yield clock
    finally:
        os.close(fd)


class Admission:
    """Whether a new call may enter (see the module docstring); one per service process."""

    def __init__(
        self,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        max_lag_ms: float = DEFAULT_MAX_LAG_MS,
        period_s: float = DEFAULT_MONITOR_PERIOD_S,
        busy_window_s: float = DEFAULT_BUSY_WINDOW_S,
        lagging_period_s: float = LAGGING_MONITOR_PERIOD_S,
    ) -> None:
        """``period_s``: the monitor's period, s; ``lagging_period_s``: its period while the last lag measured is past
        half of ``max_lag_ms`` (:meth:`next_period_s`; at most ``period_s``), s; ``busy_window_s`` > 0: the busy
        share's time constant, s."""
        self.max_inflight = max_inflight
        self.max_lag_s = max_lag_ms / 1000.0
        self.period_s = period_s
        self.lagging_period_s = min(lagging_period_s, period_s)
        self.busy_window_s = busy_window_s
        #: Smaller of the last two measured event-loop lags, s (0 until the monitor runs).
        self.lag_s = 0.0
        self._last_lag_s = 0.0
        #: Exponential average (time constant ``busy_window_s``) of the serving thread's busy share, 0..1.
        self.busy = 0.0

    def shed(self, inflight: int) -> bool:
        """True when a new call must be refused: ``inflight`` (the transport's calls in progress) is at the
        bound, or the loop lags past ``max_lag_ms``."""
        return inflight >= self.max_inflight or self.lag_s > self.max_lag_s

    def observe(self, busy_share: float, interval_s: float) -> None:
        """Fold one measurement (``busy_share`` of the last ``interval_s`` seconds, clipped to 0..1) into
        :attr:`busy`: an exponential average with time constant ``busy_window_s``, weight 1 − exp(−Δt/τ)."""
        if not interval_s > 0.0:
            return
        share = min(1.0, max(0.0, busy_share))
        weight = -math.expm1(-interval_s / self.busy_window_s)
        self.busy += weight * (share - self.busy)

    def next_period_s(self) -> float:
        """The monitor's next period, s: ``lagging_period_s`` while the last lag measured is past half the bound (a
        shed is near or on, and ends at the first reading after the loop recovers), else ``period_s`` (each period
        wakes an idle loop once)."""
        return self.lagging_period_s if self._last_lag_s > self.max_lag_s / 2 else self.period_s

    async def monitor(self) -> None:
        """Measure the loop's lag and the serving thread's busy share every :meth:`next_period_s` until cancelled (a
        service task, on the serving loop's thread)."""
        loop = asyncio.get_running_loop()
        with thread_busy_clock() as busy_clock:
            busy_ns, wall_ns = busy_clock(), time.monotonic_ns()
            while True:
                start = loop.time()
                period = self.next_period_s()
                # The probe of the lag measurement: how late a period timer fires (a service loop, not a test wait).
                await asyncio.sleep(period)
                lag = max(0.0, loop.time() - start - period)
                self.lag_s, self._last_lag_s = min(lag, self._last_lag_s), lag
                now_busy, now_wall = busy_clock(), time.monotonic_ns()
                if now_wall > wall_ns:
                    self.observe((now_busy - busy_ns) / (now_wall - wall_ns), (now_wall - wall_ns) / 1e9)
                busy_ns, wall_ns = now_busy, now_wall
