"""Model registry and online trainer for the primary-path bandit.

Serving never waits for training: deciders read :attr:`ModelRegistry.current`
(an immutable ``(version, model)`` pair swapped atomically). The
:class:`OnlineTrainer` consumes the outcome log of the state store; every
``batch_size`` outcomes (default 50, as in Alzadjali et al.) it clones the
serving model, runs ``partial_fit`` on the clone in a worker thread, publishes
the clone as version ``v+1`` and only then acknowledges the outcomes it used. When outcomes are
already waiting beyond a full batch (a backlog after a pause, a restart or a burst), up to
``catch_up_batches`` batches are refitted in order — one ``partial_fit``/``update`` per batch of
``batch_size``, as one refit each would — and published as **one** version ``v+k`` (issue 16:
incremental updates instead of catch-up bursts: replicas load one snapshot, not ``k`` in a row).

With a shared store a ``publisher`` (``training.snapshots.SnapshotStore.publish``) stores the
signed model and acknowledges its outcomes in one atomic step; if another trainer got there first
it raises :class:`PublishConflictError` and this trainer drops its buffer (the outcomes are delivered
again, pending, to whoever reads next).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import logging
import math
import multiprocessing
import os
import pickle
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import cloudpickle

from edgepath.engines.primary_path import PrimaryPathBandit, TrainingSample
from edgepath.state.base import OutcomeRecord, OutcomeRow, StateStore
from edgepath.state.codec import row_outcome
from edgepath.tasks import stop_task
from edgepath.types import AccessType

log = logging.getLogger(__name__)


class PublishConflictError(Exception):
    """The shared model moved past this trainer's version; nothing was published or acknowledged."""


#: Seconds between two log lines of a :class:`FailureLog` while its operation keeps failing.
FAILURE_LOG_EVERY_S = 5.0


class FailureLog:
    """The log of an operation retried in a loop (a trainer step, a trainer term), without a flood while it fails.

    A store outage made the trainer log a ~57-line traceback per second. With this log the first failure of a run
    of failures is logged at ERROR with its traceback; each later one adds to a count, logged as one ERROR line
    without a traceback at most once every ``every_s`` (the failures so far, for how long, the last error); the
    first success after failures logs one INFO line and starts over. Only the :mod:`logging` module's own calls
    (``exc_info``): no handler or filter is installed, so what the process's logging configuration does with the
    records (JSON logs, levels) is unchanged.

    Parameters
    ----------
    logger:
        Where the lines go.
    what:
        The operation, as the lines name it (``"trainer step"``).
    every_s:
        At most one line per this many seconds while the failures go on (≥ 0, finite; 0: a line per failure,
        still without the traceback after the first).
    clock:
        Monotonic seconds (``time.monotonic``).

    Raises
    ------
    ValueError
        ``every_s`` negative or not finite.
    """

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        every_s: float = FAILURE_LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (math.isfinite(every_s) and every_s >= 0.0):
            raise ValueError("every_s must be finite and >= 0")
        self.logger = logger
        self.what = what
        self.every_s = every_s
        self.clock = clock
        self.failures = 0  # in the current run of failures (0: the last attempt succeeded)
        self.total_failures = 0  # over the log's life
        self._first_at = 0.0
        self._logged_at = 0.0

    @property
    def failing(self) -> bool:
        """True between a failure and the next success."""
        return self.failures > 0

    def failed(self, exc: BaseException, consequence: str) -> None:
        """Record a failure with ``exc``; ``consequence`` (what happens now, e.g. ``"keeping model version 3"``)
        ends its line. Logs the first of a run with its traceback, later ones as a throttled one-line count."""
        now = self.clock()
        self.failures += 1
        self.total_failures += 1
        if self.failures == 1:
            self._first_at = self._logged_at = now
            self.logger.error("%s failed; %s", self.what, consequence, exc_info=exc)
        elif now - self._logged_at >= self.every_s:
            self._logged_at = now
            self.logger.error(
                "%s still failing: %d failures in %.1f s (last: %r); %s",
                self.what,
                self.failures,
                now - self._first_at,
                exc,
                consequence,
            )

    def succeeded(self) -> None:
        """Record a success: after failures, one INFO line (how many, for how long); otherwise nothing."""
        if self.failures:
            self.logger.info(
                "%s works again after %d failures in %.1f s", self.what, self.failures, self.clock() - self._first_at
            )
            self.failures = 0


#: ``publisher(model, version, entry_ids) -> version``: publish and acknowledge atomically.
Publisher = Callable[[PrimaryPathBandit, int, list[str]], Awaitable[int]]


@dataclass(frozen=True)
class ModelVersion:
    """A published model: monotonic ``version`` and the bandit it names (do not mutate)."""

    version: int
    model: PrimaryPathBandit


class ModelRegistry:
    """Holds the serving model; swaps are atomic reference assignments."""

    def __init__(self, model: PrimaryPathBandit, version: int = 1) -> None:
        self._current = ModelVersion(version, model)
        self._changed = asyncio.Condition()
        self._listeners: list[Callable[[ModelVersion], None]] = []

    @property
    def current(self) -> ModelVersion:
        return self._current

    async def publish(self, model: PrimaryPathBandit, version: int | None = None) -> ModelVersion:
        """Make ``model`` the serving model as ``version`` (default: current + 1)."""
        new = ModelVersion(self._current.version + 1 if version is None else version, model)
        self._current = new
        async with self._changed:
            self._changed.notify_all()
        for listener in self._listeners:
            listener(new)
        return new

    def on_publish(self, listener: Callable[[ModelVersion], None]) -> None:
        """Call ``listener`` after every publication (e.g. to update a metric)."""
        self._listeners.append(listener)

    async def wait_for_version(self, version: int, timeout_s: float) -> ModelVersion:
        """Wait until the serving version is ≥ ``version``; raises ``TimeoutError``."""
        async with asyncio.timeout(timeout_s):
            async with self._changed:
                await self._changed.wait_for(lambda: self._current.version >= version)
        return self._current


def to_sample(outcome: OutcomeRecord) -> TrainingSample:
    """Outcome-log entry → bandit training sample."""
    return TrainingSample(
        features=outcome.features,
        arms=tuple(AccessType(a) for a in outcome.arms),
        arm_index=outcome.arm_index,
        reward=outcome.reward,
        propensity=outcome.propensity,
        throughput_bps=outcome.throughput_bps,
        latency_ms=outcome.latency_ms,
        loss=outcome.loss,
    )


def update_in_order(model: PrimaryPathBandit, batches: Sequence[Sequence[OutcomeRow]]) -> PrimaryPathBandit:
    """``model`` (modified in place, and returned) after one ``update`` per batch of outcome rows
    (:data:`~edgepath.state.base.OutcomeRow`), in order: what one refit per batch would have given. The rows become
    samples here, in the refit worker, not in the serving loop (issue 16: ~6 µs per outcome, 15-25 µs under load)."""
    for rows in batches:
        model.update([to_sample(row_outcome(row)) for row in rows])
    return model


def _refit_blob(blob: bytes, batches: Sequence[Sequence[OutcomeRow]]) -> bytes:
    """In the refit process: unpickle the serving model (a private copy), :func:`update_in_order`, pickle it
    back."""
    model: PrimaryPathBandit = pickle.loads(blob)  # our own process's model, pickled by the parent
    return bytes(cloudpickle.dumps(update_in_order(model, batches)))


def yield_cpu_to_serving(niceness: int = 10) -> None:
    """Put this process, every thread of it, below every serving process in the CPU scheduler.

    Linux ``SCHED_IDLE`` (sched(7)): the process runs only on CPU time no normal task wants, and a normal task
    that wakes up preempts it at once (the fair scheduler's wake-up check preempts an idle-policy task
    unconditionally; a nice +10 task keeps the CPU until its slice ends, a few ms, which is what a decision
    waiting behind a refit saw). A process may always lower itself to it, without ``CAP_SYS_NICE``. Where
    ``SCHED_IDLE`` is unavailable (not Linux, or refused): ``nice(niceness)``. The cost: on a machine whose
    serving load takes every core, this process only falls behind (training waits, serving does not).

    Linux schedules threads, not processes: ``sched_setscheduler`` and ``setpriority`` with id 0 change the
    calling thread only (sched(7), "the threads of a process"). Threads that exist already (OpenBLAS starts its
    pool when numpy and scipy are imported, before this runs) are each moved by their id from
    ``/proc/self/task``; threads started later inherit the policy of the thread that starts them.
    """
    if hasattr(os, "SCHED_IDLE"):
        try:
            for tid in _threads():
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            return
        except OSError:
            pass
    renice(niceness)


def _threads() -> list[int]:
    """Ids of this process's threads (``/proc/self/task``), or ``[0]`` (the calling thread) without ``/proc``."""
    task_dir = "/proc/self/task"
    return [int(t) for t in os.listdir(task_dir)] if os.path.isdir(task_dir) else [0]


def renice(niceness: int) -> None:
    """Raise the nice value of every thread of this process by ``niceness`` (capped at 19).

    ``os.nice`` changes the calling thread only (setpriority(2), BUGS: under Linux/NPTL the nice value is a
    per-thread attribute); the threads that exist already, such as the OpenBLAS pools started when numpy is
    imported, are reniced by their ids.
    """
    for tid in _threads():
        os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + niceness, 19))


def single_threaded_numerics() -> None:
    """Limit the BLAS and OpenMP thread pools of this process to one thread each (threadpoolctl).

    For the refit process: a refit's products (a batch of 50 × 68 features) are small, and a second BLAS thread
    could only take the core a serving thread wants. Measured with the default policy (``ridge_squarecb``): its
    OpenBLAS threads did no work (0.00 CPU s over 200 refits, ``/proc/<pid>/task/*/stat``), so this is a bound
    for the policies with larger products, not a measured speed-up.
    """
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)


#: prctl(2) option: the signal this process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """End this process when ``parent_pid``, its parent, dies, however it dies (SIGKILL and OOM kill included).

    Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (prctl(2)); the kernel sends the signal when the thread that
    started this process exits, which for a :class:`ProcessRefitter` is the serving loop's thread. If the parent
    already died before the call (this process was re-parented, ``getppid() != parent_pid``), it exits at once.
    Elsewhere than Linux the signal is not set. Without this, a ``SIGKILL``-ed replica left its refit worker and
    that worker's ``resource_tracker`` running under PID 1.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
    if os.getppid() != parent_pid:
        os._exit(0)


def _refit_worker_init(niceness: int, parent_pid: int) -> None:
    """Initializer of the refit process: it dies with the serving process, runs below it in the scheduler, and
    computes on one thread."""
    die_with_parent(parent_pid)
    single_threaded_numerics()
    yield_cpu_to_serving(niceness)


class ProcessRefitter:
    """Refits in one separate, lower-priority process (issue 16: training never starves serving).

    A refit in a thread of the serving process holds the GIL for the whole ``partial_fit``: decisions
    wait behind it (p99 while training several times the idle p99). Here the serving process only
    pickles the model (cloudpickle: contextualbandits policies hold closures) and unpickles the
    result, in a worker thread; the fit runs in a ``spawn``-started process (no fork of a process
    holding gRPC threads) under ``SCHED_IDLE`` (:func:`yield_cpu_to_serving`; nice ``niceness`` where that is
    unavailable), so the scheduler serves decisions first. One worker: refits are sequential anyway (one
    trainer). Measured (``loadtest/bench --store memory``, gRPC, three interleaved rounds, two runs each): p99
    while training 0.89-1.10× the idle p99 under ``SCHED_IDLE`` against 1.69-2.85× at nice +10. The process
    dies with the serving process (:func:`die_with_parent`), also when that one is killed without a drain.

    ``on_restart`` is called each time the process died and a new one replaces it (the service counts these:
    ``edgepath_refit_restarts_total``).
    """

    def __init__(self, niceness: int = 10, on_restart: Callable[[], object] | None = None) -> None:
        self.niceness = niceness
        self.restarts = 0  # refit processes started again after one died
        self._on_restart = on_restart
        self._pool = self._new_pool()

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_refit_worker_init,
            initargs=(self.niceness, os.getpid()),
        )

    async def __call__(self, model: PrimaryPathBandit, batches: list[list[OutcomeRow]]) -> PrimaryPathBandit:
        """``model`` refitted on each of ``batches`` of outcome rows in order (a new object; ``model`` is not
        modified). The rows are pickled by the pool's feeder thread: plain tuples, ~1 KB each.

        Raises
        ------
        concurrent.futures.process.BrokenProcessPool
            The refit process died (OOM kill, a signal, a crash in native code): this refit is lost, and the next
            call starts a new process. A broken pool stays broken, so without the new one every later refit
            failed too and the service served its last model until restarted (the trainer keeps the outcomes
            and tries again, :class:`OnlineTrainer`).
        """
        loop = asyncio.get_running_loop()
        blob = await asyncio.to_thread(cloudpickle.dumps, model)
        try:
            out = await loop.run_in_executor(self._pool, _refit_blob, blob, batches)
        except BrokenProcessPool:
            broken, self._pool = self._pool, self._new_pool()
            broken.shutdown(wait=False, cancel_futures=True)
            self.restarts += 1
            if self._on_restart is not None:
                self._on_restart()
            log.warning("the refit process died; the next refit starts a new one (restart %d)", self.restarts)
            raise
        refitted: PrimaryPathBandit = await asyncio.to_thread(pickle.loads, out)  # from our own refit process
        return refitted

    def close(self) -> None:
        """Stop the refit process at once: a refit under way is abandoned (its outcomes are not acknowledged; the
        awaiting call, if still awaited, fails with ``BrokenProcessPool``).

        The worker is terminated (SIGTERM), not waited for: ``shutdown(wait=False)`` alone left it running its
        refit, and the interpreter's exit joins the pool, so ``edgepath train`` took the rest of a refit, which
        under ``SCHED_IDLE`` on a busy node has no bound, to stop after SIGTERM.
        """
        terminate = getattr(self._pool, "terminate_workers", None)  # Python ≥ 3.14
        if terminate is not None:
            terminate()
        else:
            for process in list((self._pool._processes or {}).values()):  # no public way before Python 3.14
                process.terminate()
        self._pool.shutdown(wait=False, cancel_futures=True)


#: ``refitter(model, batches) -> refitted copy`` (one ``update`` per batch of outcome rows, in order, as
#: :func:`update_in_order`): where a refit runs (default: a worker thread).
Refitter = Callable[[PrimaryPathBandit, list[list[OutcomeRow]]], Awaitable[PrimaryPathBandit]]


class OnlineTrainer:
    """Consumes outcomes from ``store`` and refits the registry's model every ``batch_size``.

    Parameters
    ----------
    store, registry:
        Where outcomes come from and where models go.
    batch_size:
        Outcomes per refit (``partial_fit`` call), ≥ 1.
    consumer:
        Consumer name in the outcome log.
    publisher:
        Publishes a refitted model and acknowledges its outcomes atomically (shared store);
        default: publish in ``registry``, then ``store.ack_outcomes``.
    refitter:
        Where the refit runs (e.g. :class:`ProcessRefitter`); default: a clone refitted in a worker thread.
    catch_up_batches:
        With more than a batch waiting, at most this many full batches are refitted (one ``update`` each, in
        order) and published as one version, numbered ``v + k`` for ``k`` batches (so ``version − 1`` still
        counts batches); 1 = one publication per batch. ≥ 1.
    min_publish_interval_s:
        At least this long between two publications, s (≥ 0, finite). A full batch that is ready sooner waits
        out the rest of the interval, and the batches that arrive meanwhile are refitted with it as a catch-up
        (one ``update`` per batch, in order: the model one publication per batch would reach) and published as
        one version. 0: each batch is published as soon as it is refitted. A publication costs the serving
        process CPU of its own (the model pickled to the refit process and back, the pool's threads woken:
        ~2.5–4 ms on a 2-core host at 16 publications/s, issue 16) and costs every replica following the
        snapshots one load; the model lags its outcomes by up to the interval more.
    clock:
        Monotonic seconds (``time.monotonic``), for the interval.
    retry_s:
        After a failed step (store unreachable, ...) the loop started by :meth:`start` waits this long, s, and
        steps again, with the last model serving meanwhile (> 0, finite). The failures are logged by
        :attr:`failures` (a :class:`FailureLog`: the first with its traceback, then a count every few seconds,
        one line when a step succeeds again).

    Raises
    ------
    ValueError
        ``batch_size`` or ``catch_up_batches`` below 1, ``min_publish_interval_s`` negative or not finite, or
        ``retry_s`` not positive and finite.
    """

    def __init__(
        self,
        store: StateStore,
        registry: ModelRegistry,
        batch_size: int = 50,
        consumer: str = "trainer",
        publisher: Publisher | None = None,
        refitter: Refitter | None = None,
        catch_up_batches: int = 20,
        min_publish_interval_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        retry_s: float = 1.0,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if catch_up_batches < 1:
            raise ValueError("catch_up_batches must be >= 1")
        if not (math.isfinite(min_publish_interval_s) and min_publish_interval_s >= 0.0):
            raise ValueError("min_publish_interval_s must be finite and >= 0")
        if not (math.isfinite(retry_s) and retry_s > 0.0):
            raise ValueError("retry_s must be finite and > 0")
        self.retry_s = retry_s
        self.failures = FailureLog(log, "trainer step")
        self.catch_up_batches = catch_up_batches
        self.min_publish_interval_s = min_publish_interval_s
        self.clock = clock
        self._published_at: float | None = None  # clock() of the last publication
        self.store = store
        self.registry = registry
        self.batch_size = batch_size
        self.consumer = consumer
        self.publisher = publisher
        self.refitter = refitter
        self.outcomes_used = 0
        self.refits = 0  # batches refitted on
        self.publications = 0  # versions published (one per step, covering 1..catch_up_batches batches)
        self._buffer: list[tuple[str, OutcomeRow]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="online-trainer")

    async def stop(self) -> None:
        """Stop the loop and wait until it has ended (bounded: a lost cancellation is re-sent, see
        :mod:`edgepath.tasks`). The batch buffered so far is not acknowledged; it is delivered again."""
        if self._task is not None:
            task, self._task = self._task, None
            await stop_task(task)

    async def _run(self) -> None:
        while True:
            try:
                await self.step(block_ms=1000)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep serving with the last model; retry next round
                self.failures.failed(exc, f"keeping model version {self.registry.current.version}")
                # Pacing of the retry while the store fails (a service loop, not a test wait).
                await asyncio.sleep(self.retry_s)
            else:
                self.failures.succeeded()

    async def step(self, block_ms: int = 0) -> bool:
        """Read outcomes and refit if a full batch is buffered (with the batches already waiting behind it, up to
        ``catch_up_batches``; one publication). Returns True when it refitted."""
        want = self.batch_size - len(self._buffer)
        if want > 0:  # one wake-up per batch where the store can (the in-process one), not one per outcome
            self._buffer.extend(await self.store.read_outcome_rows(self.consumer, want, block_ms, min_count=want))
        if len(self._buffer) < self.batch_size:
            return False
        if self._published_at is not None:
            wait_s = self._published_at + self.min_publish_interval_s - self.clock()
            if wait_s > 0.0:  # too soon after the last publication: what arrives meanwhile joins this one
                await asyncio.sleep(wait_s)
        room = self.batch_size * self.catch_up_batches - len(self._buffer)
        while room > 0:  # a backlog: whatever is already waiting, without blocking, a batch per loop turn
            await asyncio.sleep(0)  # decisions go between the reads
            more = await self.store.read_outcome_rows(self.consumer, min(room, self.batch_size), 0)
            if not more:
                break
            self._buffer.extend(more)
            room -= len(more)
        n = min(len(self._buffer) // self.batch_size, self.catch_up_batches) * self.batch_size
        batch, self._buffer = self._buffer[:n], self._buffer[n:]
        try:
            await self._refit(batch)
        except PublishConflictError:
            self._buffer = []  # another trainer's model already covers or supersedes these
            raise
        except BaseException:
            self._buffer = batch + self._buffer  # not published, not acknowledged: still ours to train on
            raise
        return True

    async def _refit(self, batch: list[tuple[str, OutcomeRow]]) -> None:
        """Refit on ``batch`` (a multiple of ``batch_size`` outcomes, one ``update`` per ``batch_size``), publish
        as ``v + k`` for ``k`` batches, then acknowledge. The rows go to the refitter as they are: it makes the
        samples (:func:`update_in_order`)."""
        live = self.registry.current.model
        batches = [[row for _, row in batch[i : i + self.batch_size]] for i in range(0, len(batch), self.batch_size)]

        refitted = await (
            self.refitter(live, batches)
            if self.refitter is not None
            else asyncio.to_thread(lambda: update_in_order(live.clone(), batches))
        )
        refitted.carry_exploration_from(self.registry.current.model)
        entry_ids = [entry_id for entry_id, _ in batch]
        version = self.registry.current.version + len(batches)
        if self.publisher is not None:  # stores and acknowledges in one step; its version wins
            version = await self.publisher(refitted, version, entry_ids)
        published = await self.registry.publish(refitted, version)
        if self.publisher is None:
            await self.store.ack_outcomes(entry_ids)
        self.outcomes_used += len(batch)
        self.refits += len(batches)
        self.publications += 1
        self._published_at = self.clock()
        log.info("refit on %d outcomes (%d batches) -> model version %d", len(batch), len(batches), published.version)
