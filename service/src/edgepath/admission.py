"""Explicit overload (issue 16): a bounded queue for the serving loop, shared by both transports.

Past capacity a request is refused at once with a retry hint (REST 503 + ``Retry-After``, gRPC
``RESOURCE_EXHAUSTED`` + ``retry-after-ms``) instead of waiting in a queue that grows without limit.
Two signals, either one sheds:

* **in flight**: more than ``max_inflight`` calls of one transport are inside the handlers;
* **event-loop lag**: the loop answered its last two timers more than ``max_lag_ms`` late
  (:meth:`Admission.monitor`).
  A server's backlog mostly waits *before* the handlers (grpc.aio's completion queue, uvicorn's parsed
  requests): the handlers' in-flight count stays small while every call waits its turn on the loop, so the
  lag of a 5 ms timer is the queueing delay every new call is about to see. Shedding while it exceeds
  ``max_lag_ms`` bounds the wait of the admitted calls near that figure.

Transports call :meth:`Admission.shed` before they read a request body; the loop-lag monitor runs as a
task of :class:`edgepath.main.Service` (without it only the in-flight bound applies).
"""

from __future__ import annotations

import asyncio

#: Calls in progress per transport beyond which new ones are shed.
DEFAULT_MAX_INFLIGHT = 64
#: Event-loop lag beyond which new calls are shed, ms (two measurements in a row: one GC pause or a
#: moment of CPU starvation on a shared machine does not shed).
DEFAULT_MAX_LAG_MS = 100.0
#: Retry hint of a shed call, ms (REST rounds it up to whole seconds, RFC 9110 §10.2.3).
RETRY_AFTER_MS = 100


class Admission:
    """Whether a new call may enter (see the module docstring); one per service process."""

    def __init__(
        self,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        max_lag_ms: float = DEFAULT_MAX_LAG_MS,
        period_s: float = 0.005,
    ) -> None:
        self.max_inflight = max_inflight
        self.max_lag_s = max_lag_ms / 1000.0
        self.period_s = period_s
        #: Smaller of the last two measured event-loop lags, s (0 until the monitor runs).
        self.lag_s = 0.0
        self._last_lag_s = 0.0

    def shed(self, inflight: int) -> bool:
        """True when a new call must be refused: ``inflight`` (the transport's calls in progress) is at the
        bound, or the loop lags past ``max_lag_ms``."""
        return inflight >= self.max_inflight or self.lag_s > self.max_lag_s

    async def monitor(self) -> None:
        """Measure the loop's lag every ``period_s`` until cancelled (a service task)."""
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            # The probe of the lag measurement: how late a period_s timer fires (a service loop, not a test wait).
            await asyncio.sleep(self.period_s)
            lag = max(0.0, loop.time() - start - self.period_s)
            self.lag_s, self._last_lag_s = min(lag, self._last_lag_s), lag
