"""Automatic pipelining for redis-py asyncio: the commands issued within a few event-loop iterations reach Redis as
one pipeline (one write, one round trip, one pass over the replies).

Why (issue 16): under load the serving loop has many requests in flight, each issuing one or two commands per
step (the decision ``SET``, its ``GET`` at outcome time, the rate-limit script, the claim script, the MEC 015
session ``HVALS``...). Sent one by one, every command pays redis-py's per-call machinery (connection-pool
checkout, retry wrapper, time-out, a socket write and an event-loop wake-up for its reply): about 50 CPU µs a
command on this 2-core machine, against about 21 µs when the same commands from 16 concurrent callers go out
as pipelines (loopback redis-server, ``SET`` + ``HVALS`` pairs, uvloop; measured for this change). The
technique is ioredis's ``enableAutoPipelining`` (and the Lettuce/StackExchange.Redis default); redis-py has no
asyncio equivalent, so this module is the glue.

**Holding the queue for a few iterations** (``hold_iterations``). A serving loop takes one new gRPC call per
wake-up, so the commands of one iteration are mostly one request's: under a closed loop of 16 agent Recommends on
the Redis store a pipeline carried 1.8 commands, and each round trip costs the serving process ~30–55 CPU µs
whatever it carries (loopback socket write, wake-up, read; measured with redis-py's raw connection on this 2-core
machine: 55 µs for one command, 14 µs per command for eight). Held for 16 iterations, in which the loop runs its
other ready callbacks and polls for I/O, a pipeline carried 8.4–8.7 commands and the server's CPU per Recommend
fell from 1,044–1,064 to 775–818 µs (``loadtest/cpu_per_call.py --store redis``, issue 16). The price is latency
while the loop is idle: each held iteration is one pass of an otherwise empty loop (one sequential Recommend: p50
1.45 → 1.54–1.67 ms over two round trips). ``hold_iterations=0`` sends at the next iteration, as before.

**A shorter hold while nobody else waits** (``idle_hold_iterations``). Other callers' commands come from calls
that are in flight; a queue that starts while no command sent earlier is still awaiting its reply is most likely
one lone call's, and the full hold only delays it (and costs the loop's idle passes). Such a queue waits
``idle_hold_iterations`` instead (2 in the service's settings: still enough for a call's own commands issued an
iteration or two apart). At 150 Recommend + outcome pairs per second on the Redis store (``training_interference.py
--store redis``, two processes side by side, six pairs) the serving CPU per pair fell 2–13 % (median 7.5 %) and
the p50 by 0–13 % against a hold of 16 throughout; under two closed loops of 8 in-flight Recommend calls,
where a pipeline is nearly always in flight, the CPU per call was unchanged (``cpu_ab.py --store redis``, 5
rounds, median 0.995×; issue 16, Session 40).

Semantics, per command, as if it had been sent alone:

* **Order.** A non-transactional pipeline runs its commands in the order they were queued, and a caller that
  awaits a reply before issuing its next command keeps its own order.
* **Errors.** A reply error (:class:`redis.exceptions.ResponseError`) goes to its own caller only. A connection
  error or time-out (the client's ``socket_timeout``) goes to every caller of that pipeline, each of which would
  have met it alone; redis-py's ``Retry`` of the client applies to the pipeline as it does to one command.
* **Scripts** run as ``EVALSHA``; a ``NOSCRIPT`` reply (the server restarted or was flushed) makes that one call
  fall back to redis-py's :class:`~redis.commands.core.AsyncScript`, which loads the script and retries (calls
  retried this way are not ordered among themselves; none of EdgePath's scripts depends on that order).
* **Cancellation.** A caller cancelled while its command is queued or in flight does not unsend it (nor would a
  lone command be unsent); its reply is dropped.

Not for blocking commands (``XREADGROUP … BLOCK``): one blocked command would hold every caller of its
pipeline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import NoScriptError, ResponseError

_Queued = tuple[str, tuple[Any, ...], dict[str, Any], "asyncio.Future[Any]"]


class AutoPipeline:
    """Queues commands for ``client`` and sends each event-loop iteration's queue as one pipeline.

    Parameters
    ----------
    client:
        The ``redis.asyncio.Redis`` client (its pool, time-outs and retry policy are used as they are).
    max_commands:
        A queue this long is sent at once instead of at the end of its hold (bounds one pipeline's size).
    hold_iterations:
        Event-loop iterations a queue waits for more commands after its first (module docstring); 0 sends it at the
        next iteration.
    idle_hold_iterations:
        The hold of a queue that starts while no command sent earlier awaits its reply (no other caller is waiting
        on Redis; module docstring), at most ``hold_iterations``; None: ``hold_iterations`` in every case.
    on_send:
        Called with the number of commands of every pipeline sent (e.g. to count round trips in metrics).

    Raises
    ------
    ValueError
        ``max_commands`` < 1, ``hold_iterations`` < 0 or ``idle_hold_iterations`` < 0.

    Attributes
    ----------
    pipelines, commands:
        Pipelines sent and commands sent through them (commands / pipelines = the mean coalescing).
    """

    def __init__(
        self,
        client: Redis,
        max_commands: int = 512,
        hold_iterations: int = 0,
        on_send: Callable[[int], None] | None = None,
        idle_hold_iterations: int | None = None,
    ) -> None:
        if max_commands < 1:
            raise ValueError("max_commands must be >= 1")
        if hold_iterations < 0:
            raise ValueError("hold_iterations must be >= 0")
        if idle_hold_iterations is not None and idle_hold_iterations < 0:
            raise ValueError("idle_hold_iterations must be >= 0")
        self.client = client
        self.max_commands = max_commands
        self.hold_iterations = hold_iterations
        self.on_send = on_send
        self.idle_hold_iterations = (
            hold_iterations if idle_hold_iterations is None else min(idle_hold_iterations, hold_iterations)
        )
        self._awaiting = 0  # commands sent whose replies have not been handed out
        self.pipelines = 0
        self.commands = 0
        self._queue: list[_Queued] = []  # a non-empty queue has one hold pending (scheduled by its first command)
        self._sent_queues = 0  # queues sent so far: a hold scheduled for an earlier queue stops (_hold)
        self._sending: set[asyncio.Task[None]] = set()
        self._kept: Connection | None = None  # the connection of the last round trip, kept for the next one

    def execute(self, name: str, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """Queue the redis-py command ``name`` (e.g. ``"set"``, ``"hvals"``) with its arguments; the future holds
        its reply as ``client.<name>(*args, **kwargs)`` would return it, or the exception it would raise.

        Raises
        ------
        RuntimeError
            No running event loop.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append((name, args, kwargs, future))
        if len(self._queue) >= self.max_commands:
            self._send_queue()
        elif len(self._queue) == 1:  # a new queue: its hold starts (the short one when no other caller waits)
            hold = self.hold_iterations if self._awaiting else self.idle_hold_iterations
            loop.call_soon(self._hold, hold, self._sent_queues)
        return future

    def register_script(self, script: str | bytes) -> Callable[..., Awaitable[Any]]:
        """A Lua script callable like redis-py's ``Script`` (``await call(keys=[...], args=[...])``), sent as
        ``EVALSHA`` through the pipeline; ``client=`` is accepted and ignored (the pipeline is the client)."""
        fallback = self.client.register_script(script)
        sha = fallback.sha

        async def call(keys: Sequence[Any] | None = None, args: Sequence[Any] | None = None, client: Any = None) -> Any:
            keys = list(keys or ())
            args = list(args or ())
            try:
                return await self.execute("evalsha", sha, len(keys), *keys, *args)
            except NoScriptError:
                return await fallback(keys=keys, args=args)

        return call

    async def drain(self) -> None:
        """Wait until every queued and in-flight pipeline has finished (before closing the client)."""
        if self._queue:
            self._send_queue()
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        if self._kept is not None:
            kept, self._kept = self._kept, None
            await self.client.connection_pool.release(kept)

    async def _round_trip(self, batch: list[_Queued]) -> list[Any]:
        """Send ``batch`` in one write on a connection of the client's pool and read every reply, in order: a reply
        error is that command's reply (an exception object), a connection error or time-out is raised.

        redis-py's own parts, leaner than its ``Pipeline.execute`` (issue 16, Session 41): a pipeline object only
        turns each call into its wire arguments and reply options (the client's command methods); the connection's
        retry policy (the client's ``Retry``: a connection error disconnects and the round trip is sent once more,
        on a new connection, as ``Pipeline.execute`` does), its packing, its socket time-outs (which disconnect it:
        no late reply is read as another command's) and the client's ``parse_response`` (the reply callbacks
        ``client.<name>()`` applies) do the rest. Left out: ``execute``'s per-call observability records, script
        loading and ``WATCH`` handling, none of which this module uses.

        The connection of a round trip that read all its replies is kept for the next one instead of going back
        to the pool (a second round trip in flight meanwhile takes one from the pool): the pool's checkout and
        its check for unread data cost ~20 % of a lone command's round trip, and a kept connection holds no
        unread data (every round trip reads all its replies or disconnects). One that Redis closed meanwhile
        fails its next round trip with a connection error, which the retry policy answers as above.
        """
        builder = self.client.pipeline(transaction=False)
        for name, args, kwargs, _ in batch:
            getattr(builder, name)(*args, **kwargs)
        stack = builder.command_stack
        pool = self.client.connection_pool
        conn, self._kept = self._kept, None
        if conn is None:
            conn = cast(Connection, await pool.get_connection())  # as redis-py's own Pipeline.execute casts it

        async def exchange() -> list[Any]:
            await conn.send_packed_command(conn.pack_commands([args for args, _ in stack]))
            replies: list[Any] = []
            for args, options in stack:
                try:  # a copy: parse_response pops its options, and a retried round trip parses them again
                    replies.append(await self.client.parse_response(conn, args[0], **dict(options)))
                except ResponseError as exc:
                    replies.append(exc)
            return replies

        async def disconnect(_error: Exception) -> None:
            await conn.disconnect()

        replies = None
        try:
            replies = await conn.retry.call_with_retry(exchange, disconnect)
            return replies
        finally:
            if replies is not None and self._kept is None:
                self._kept = conn
            else:
                await pool.release(conn)

    def _hold(self, iterations: int, queue: int) -> None:
        """Send the queue once ``iterations`` more loop iterations have passed (one ``call_soon`` hop each: the loop
        runs its other ready callbacks and polls for I/O in between), unless queue number ``queue`` already went
        out (``max_commands`` reached, :meth:`drain`)."""
        if queue != self._sent_queues:
            return
        if iterations > 0:
            asyncio.get_running_loop().call_soon(self._hold, iterations - 1, queue)
        else:
            self._send_queue()

    def _send_queue(self) -> None:
        if not self._queue:
            return
        self._sent_queues += 1
        batch, self._queue = self._queue, []
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[_Queued]) -> None:
        self.pipelines += 1
        self.commands += len(batch)
        if self.on_send is not None:
            self.on_send(len(batch))
        self._awaiting += len(batch)
        try:
            replies = await self._round_trip(batch)
        except Exception as exc:  # unreachable or time-out: every caller of this round trip sees it
            for *_, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:  # cancelled (event loop closing): the callers must not wait forever
            for *_, future in batch:
                if not future.done():
                    future.cancel()
            raise
        finally:  # before any caller resumes (their wake-ups are only scheduled above and below)
            self._awaiting -= len(batch)
        for (*_, future), reply in zip(batch, replies, strict=True):
            if future.done():  # its caller was cancelled
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)
