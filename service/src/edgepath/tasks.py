"""Stopping background loops reliably, whatever the Python version does with a cancellation.

Why one ``task.cancel()`` is not enough here
--------------------------------------------
On Python < 3.12, :func:`asyncio.wait_for` returns the inner result and *drops* a cancellation that
arrives in the same loop iteration in which the inner awaitable completes (CPython gh-86296, fixed in
3.12 by rebuilding ``wait_for`` on :func:`asyncio.timeout`). redis-py sends every command through
``asyncio.wait_for(…, socket_timeout)``, so a loop that talks to Redis occasionally loses the one
``cancel()`` meant to stop it and runs on, its task stuck in the *cancelling* state. Issue 13 saw the
consequence: :meth:`edgepath.training.online.OnlineTrainer.stop` awaited the trainer task forever,
so the trainer holding the lock could never step down (``TrainerRole.run`` never returned), and
a second trainer took over the expired lock while the first one kept consuming outcomes.

:func:`stop_task` therefore re-delivers the cancellation until the task has ended, and
:func:`wait_event` waits for an event with :func:`asyncio.timeout` (which counts cancellations and
never swallows one) instead of ``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: How long :func:`stop_task` waits for a cancelled task before cancelling it again, s.
RECANCEL_AFTER_S = 0.05


async def stop_task(task: asyncio.Task[Any], recancel_after_s: float = RECANCEL_AFTER_S) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling again if a cancellation was lost.

    Parameters
    ----------
    task:
        The background task to stop (done tasks are fine).
    recancel_after_s:
        Wait this long (s, > 0) for the task to end before cancelling it once more.

    Raises
    ------
    Exception
        Whatever the task itself raised, other than :class:`asyncio.CancelledError`.
    asyncio.CancelledError
        When the *caller* is cancelled while waiting (propagated, never swallowed).
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=recancel_after_s)
    if not task.cancelled():
        exc = task.exception()
        if exc is not None:
            raise exc


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` (s) has passed; True when it was set.

    Built on :func:`asyncio.timeout`, so a cancellation of the caller always propagates.
    """
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
