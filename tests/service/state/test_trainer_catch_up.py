"""The online trainer's catch-up (issue 16): a backlog is refitted batch by batch and published as one version."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import math
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from edgepath.engines.primary_path import PrimaryPathBandit, TrainingSample
from edgepath.state.base import OutcomeRecord, OutcomeRow
from edgepath.state.memory import MemoryStore
from edgepath.training import online
from edgepath.training.online import ModelRegistry, OnlineTrainer, ProcessRefitter
from edgepath.types import AccessType, InterfaceContext

from state.redis_helpers import decision, outcome


async def _backlog(store: MemoryStore, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        d = decision(f"c-{i}", device_id=f"dev-{i % 7}")
        d = dataclasses.replace(d, arm_index=i % 2, features=(float(i % 5), -1.0 + i % 3, *d.features[2:]))
        await store.put_decision(d, 600)
        await store.claim_outcome(outcome(d, throughput_bps=1e7 * (1 + i % 4)))


def _probe(model: PrimaryPathBandit) -> list[float]:
    wifi = InterfaceContext(name="wlan0", access_type=AccessType.WIFI, wifi_rssi_dbm=-60.0, link_speed_mbps=300.0)
    lte = InterfaceContext(name="wwan0", access_type=AccessType.LTE, rsrp_dbm=-95.0, rsrq_db=-10.0)
    return [float(p) for p in model.probabilities([wifi, lte])]


def test_a_backlog_is_one_publication_covering_each_batch_in_order() -> None:
    async def run() -> None:
        store = MemoryStore()
        await _backlog(store, 175)  # 3 full batches of 50 and 25 more
        registry = ModelRegistry(PrimaryPathBandit())
        trainer = OnlineTrainer(store, registry, batch_size=50, catch_up_batches=20)
        assert await trainer.step() is True
        # one version, numbered as three refits would have numbered it
        assert registry.current.version == 4
        assert (trainer.refits, trainer.publications, trainer.outcomes_used) == (3, 1, 150)
        assert registry.current.model.samples_seen == 150
        assert await trainer.step() is False  # 25 left: not a batch

        # the same outcomes one batch per publication: same model, three versions
        one_by_one = MemoryStore()
        await _backlog(one_by_one, 175)
        reference = ModelRegistry(PrimaryPathBandit())
        single = OnlineTrainer(one_by_one, reference, batch_size=50, catch_up_batches=1)
        for expected_version in (2, 3, 4):
            assert await single.step() is True
            assert reference.current.version == expected_version
        assert single.publications == 3
        assert _probe(reference.current.model) == pytest.approx(_probe(registry.current.model), abs=1e-12)

    asyncio.run(run())


def test_a_backlog_is_read_a_batch_per_loop_turn_and_converted_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Catch-up (issue 16) never holds the serving loop for a whole backlog: it reads one batch per call, other
    tasks (decisions) run between every two reads, and no outcome is turned into a sample on the loop's thread (the
    refitter does it). Reading 1,000 outcomes at once held the loop for several ms; converting them there cost the
    loop 15-25 µs per outcome under load."""
    reads: list[tuple[int, int]] = []  # (count asked, loop turns of the other task so far)
    turns = 0

    class RecordingStore(MemoryStore):
        async def read_outcome_rows(
            self, consumer: str, count: int, block_ms: int, min_count: int = 1
        ) -> list[tuple[str, OutcomeRow]]:
            reads.append((count, turns))
            return await super().read_outcome_rows(consumer, count, block_ms, min_count)

    async def other_task() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    converted_on: list[int] = []  # the thread of each outcome -> sample conversion
    original = online.to_sample

    def recording_to_sample(outcome: OutcomeRecord) -> TrainingSample:
        converted_on.append(threading.get_ident())
        return original(outcome)

    monkeypatch.setattr(online, "to_sample", recording_to_sample)

    async def run() -> None:
        store = RecordingStore()
        await _backlog(store, 500)
        registry = ModelRegistry(PrimaryPathBandit())
        ticker = asyncio.create_task(other_task())
        await asyncio.sleep(0)
        assert await OnlineTrainer(store, registry, batch_size=50, catch_up_batches=20).step() is True
        ticker.cancel()
        assert registry.current.version == 11  # ten batches, one publication
        assert [count for count, _ in reads] == [50] * 10 + [50]  # the last read finds the backlog empty
        seen = [t for _, t in reads]
        assert all(later > earlier for earlier, later in itertools.pairwise(seen))
        assert len(converted_on) == 500
        assert threading.get_ident() not in converted_on  # the worker thread converted them, not the loop

    asyncio.run(run())


def test_a_blocked_read_wakes_once_a_batch_is_waiting() -> None:
    """The in-process store wakes a trainer blocked for ``min_count`` outcomes when the last of them arrives, not at
    the first (one wake-up of the serving loop per batch instead of one per outcome, issue 16), and a timed-out read
    returns what there is."""

    async def run() -> None:
        store = MemoryStore()
        reader = asyncio.create_task(store.read_outcome_rows("trainer", 50, 600_000, min_count=3))
        await asyncio.sleep(0)
        for i in range(3):
            d = decision(f"w-{i}")
            await store.put_decision(d, 600)
            await store.claim_outcome(outcome(d))
            for _ in range(5):  # let a woken reader run
                await asyncio.sleep(0)
            assert reader.done() is (i == 2), f"after outcome {i + 1}"
        assert [row[0] for _, row in reader.result()] == ["w-0", "w-1", "w-2"]
        d = decision("w-3")
        await store.put_decision(d, 600)
        await store.claim_outcome(outcome(d))
        assert [row[0] for _, row in await store.read_outcome_rows("trainer", 50, 1, min_count=50)] == ["w-3"]

    asyncio.run(run())


def test_catch_up_is_bounded() -> None:
    async def run() -> None:
        store = MemoryStore()
        await _backlog(store, 100)
        registry = ModelRegistry(PrimaryPathBandit())
        trainer = OnlineTrainer(store, registry, batch_size=10, catch_up_batches=4)
        assert await trainer.step() is True
        assert (registry.current.version, trainer.refits) == (5, 4)
        assert await trainer.step() is True
        assert (registry.current.version, trainer.refits, trainer.publications) == (9, 8, 2)

    asyncio.run(run())


def test_catch_up_batches_must_be_positive() -> None:
    with pytest.raises(ValueError, match="catch_up_batches"):
        OnlineTrainer(MemoryStore(), ModelRegistry(PrimaryPathBandit()), catch_up_batches=0)


def test_a_batch_ready_within_the_publish_interval_waits_and_takes_the_batches_behind_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``min_publish_interval_s`` (issue 16): a batch ready sooner than the interval after the last publication waits
    out the rest of it, and the batches that arrive meanwhile are refitted with it and published as one version, the
    model one publication per batch reaches; nothing is lost and nothing waits once the interval has passed."""
    real_sleep = asyncio.sleep
    waits: list[float] = []
    released: list[asyncio.Event] = []

    async def controlled_sleep(delay: float, result: object = None) -> object:
        if delay > 0:  # the trainer's wait: held until the test releases it (no real time passes)
            waits.append(delay)
            await released[0].wait()
            return result
        return await real_sleep(0, result)

    monkeypatch.setattr(asyncio, "sleep", controlled_sleep)

    async def run() -> None:
        released.append(asyncio.Event())
        store = MemoryStore()
        registry = ModelRegistry(PrimaryPathBandit())
        now = [1000.0]
        trainer = OnlineTrainer(store, registry, batch_size=50, min_publish_interval_s=30.0, clock=lambda: now[0])
        await _backlog(store, 50)
        assert await trainer.step() is True and waits == []  # nothing published before: at once
        assert registry.current.version == 2
        now[0] += 1.0
        await _backlog(store, 50, start=50)
        step = asyncio.create_task(trainer.step())
        for _ in range(5):
            await real_sleep(0)
        assert not step.done() and waits == [pytest.approx(29.0)]  # 29 s of the interval left
        await _backlog(store, 100, start=100)  # two more batches while it waits
        now[0] += 29.0
        released[0].set()
        assert await step is True
        assert registry.current.version == 5  # three batches, one version numbered as three refits
        assert (trainer.refits, trainer.publications, trainer.outcomes_used) == (4, 2, 200)
        now[0] += 31.0  # the interval has passed: the next batch goes at once
        await _backlog(store, 50, start=200)
        assert await trainer.step() is True and len(waits) == 1
        assert registry.current.version == 6

        reference_store = MemoryStore()
        await _backlog(reference_store, 250)
        reference = ModelRegistry(PrimaryPathBandit())
        single = OnlineTrainer(reference_store, reference, batch_size=50, catch_up_batches=1)
        for _ in range(5):
            assert await single.step() is True
        assert reference.current.version == 6
        assert _probe(reference.current.model) == pytest.approx(_probe(registry.current.model), abs=1e-12)

    asyncio.run(run())


@pytest.mark.parametrize("interval", [-1.0, math.nan, math.inf])
def test_the_publish_interval_must_be_finite_and_not_negative(interval: float) -> None:
    with pytest.raises(ValueError, match="min_publish_interval_s"):
        OnlineTrainer(MemoryStore(), ModelRegistry(PrimaryPathBandit()), min_publish_interval_s=interval)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux-only")
def test_the_refit_process_refits_as_the_thread_would_and_runs_under_sched_idle() -> None:
    """Training never starves serving: the refit process, with each of its threads, yields the CPU to any serving
    thread that wakes."""

    async def run() -> None:
        store, reference_store = MemoryStore(), MemoryStore()
        await _backlog(store, 100)
        await _backlog(reference_store, 100)
        others = {child.pid for child in multiprocessing.active_children()}
        refitter = ProcessRefitter()
        try:
            registry = ModelRegistry(PrimaryPathBandit())
            assert await OnlineTrainer(store, registry, batch_size=50, refitter=refitter).step() is True
            # the refit pool's worker: the one child process this test started
            workers = [child.pid for child in multiprocessing.active_children() if child.pid not in others]
            assert len(workers) == 1
            # every thread of it: Linux schedules threads, and numpy's and scipy's OpenBLAS pools start before
            # the process lowers itself
            threads = [int(tid) for tid in os.listdir(f"/proc/{workers[0]}/task")]
            assert len(threads) >= 2  # the pools' threads exist: the check below is not about one thread
            assert {os.sched_getscheduler(tid) for tid in threads} == {os.SCHED_IDLE}
            assert os.sched_getscheduler(0) != os.SCHED_IDLE  # the serving process keeps its policy
        finally:
            refitter.close()
        reference = ModelRegistry(PrimaryPathBandit())
        assert await OnlineTrainer(reference_store, reference, batch_size=50).step() is True
        assert registry.current.version == reference.current.version == 3
        assert _probe(registry.current.model) == pytest.approx(_probe(reference.current.model), abs=1e-12)

    asyncio.run(run())


_KILLED_PARENT = """
import asyncio, multiprocessing, sys
from edgepath.engines.primary_path import PrimaryPathBandit
from edgepath.training.online import ProcessRefitter

async def main():
    refitter = ProcessRefitter()
    await refitter(PrimaryPathBandit(), [])  # starts the refit process
    (worker,) = multiprocessing.active_children()
    print(worker.pid, flush=True)
    sys.stdin.read()  # until the test kills this process

asyncio.run(main())
"""


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs Linux pidfd_open to wait for a non-child process")
def test_the_refit_process_dies_with_a_killed_serving_process() -> None:
    """A replica SIGKILLed without a drain (power cut, OOM kill) leaves no refit process behind under PID 1."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _KILLED_PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        worker_pid = int(parent.stdout.readline())
        pidfd = os.pidfd_open(worker_pid)
    finally:
        parent.kill()
        parent.wait()
    try:
        # the worker's exit makes its pidfd readable; without PR_SET_PDEATHSIG it would run on under PID 1
        readable, _, _ = select.select([pidfd], [], [], 20.0)
        assert readable == [pidfd], f"refit process {worker_pid} still alive after its parent was killed"
    finally:
        os.close(pidfd)
        if not readable:
            os.kill(worker_pid, signal.SIGKILL)


_RENICED = """
import json, os, threading
from edgepath.training.online import renice

started = threading.Event()
threading.Thread(target=lambda: (started.set(), threading.Event().wait()), daemon=True).start()
started.wait()
before = {int(t): os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task")}
renice(10)
after = {t: os.getpriority(os.PRIO_PROCESS, t) for t in before}
print(json.dumps([[before[t] for t in sorted(before)], [after[t] for t in sorted(before)]]))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc/<pid>/task")
def test_renice_lowers_every_thread_of_the_trainer_process() -> None:
    """``edgepath train`` is nice +10 in each of its threads, also those started before (os.nice: one thread)."""
    done = subprocess.run([sys.executable, "-c", _RENICED], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout)
    assert len(before) >= 2  # the test's thread, numpy's pools: more than the calling thread
    assert after == [min(b + 10, 19) for b in before]


_STOPPED_DURING_A_REFIT = """
import asyncio, sys, time
from pathlib import Path
from edgepath.engines.primary_path import PrimaryPathBandit
from edgepath.training.online import ProcessRefitter

class EndlessRefit(PrimaryPathBandit):  # pickled by value (defined in __main__): the refit process needs no import
    marker = ""

    def update(self, samples):
        Path(self.marker).touch()
        time.sleep(3600)  # a refit that outlasts any drain: what SCHED_IDLE on a busy node can make of one

async def main():
    model = EndlessRefit()
    model.marker = sys.argv[1]
    refitter = ProcessRefitter()
    refit = asyncio.create_task(refitter(model, [[]]))
    while not Path(sys.argv[1]).exists():  # the refit is under way
        await asyncio.wait([refit], timeout=0.05)
    refit.cancel()  # what OnlineTrainer.stop does
    refitter.close()
    print("closed", flush=True)

asyncio.run(main())
"""


def test_closing_the_refitter_abandons_a_refit_under_way(tmp_path: Path) -> None:
    """``edgepath train`` and a draining replica stop without waiting for the refit under way: the process
    exits although its refit would run for an hour (before, the interpreter's exit joined the refit pool)."""
    marker = tmp_path / "refitting"
    proc = subprocess.run(
        [sys.executable, "-c", _STOPPED_DURING_A_REFIT, str(marker)], capture_output=True, text=True, timeout=60
    )
    assert marker.exists()  # the refit had started
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "closed"


def test_training_resumes_with_a_new_refit_process_after_one_died() -> None:
    """A refit process killed (OOM killer, a signal) loses that refit only: the trainer keeps its outcomes, the next
    step starts a new process and publishes them, and the service counts the restart
    (``edgepath_refit_restarts_total``). Before, the broken pool failed every later refit and the service served its
    last model until restarted. The service's own trainer (memory store, in-process trainer) as ``edgepath serve``
    builds it."""
    from concurrent.futures.process import BrokenProcessPool

    from edgepath.main import Service
    from edgepath.settings import Settings

    async def run() -> None:
        service = Service.build(Settings(batch_size=50))
        trainer, registry, refitter, store = service.trainer, service.registry, service.trainer.refitter, service.store
        assert isinstance(store, MemoryStore) and isinstance(refitter, ProcessRefitter)

        def restarts() -> float | None:
            return service.metrics.registry.get_sample_value("edgepath_refit_restarts_total")

        await _backlog(store, 50)
        others = {child.pid for child in multiprocessing.active_children()}
        seen_at_start = registry.current.model.samples_seen
        try:
            assert restarts() == 0  # exported from the start: an alert's increase() sees the first restart
            assert await trainer.step() is True and registry.current.version == 2
            (worker,) = [c for c in multiprocessing.active_children() if c.pid not in others]
            os.kill(worker.pid, signal.SIGKILL)
            worker.join(10)
            await _backlog(store, 50, start=50)
            with pytest.raises(BrokenProcessPool):
                await trainer.step()
            assert registry.current.version == 2 and refitter.restarts == 1  # nothing published, nothing lost
            assert restarts() == 1
            assert await trainer.step() is True  # the same outcomes, on a new process
            assert registry.current.version == 3 and trainer.outcomes_used == 100
            assert registry.current.model.samples_seen - seen_at_start == 100
        finally:
            refitter.close()

    asyncio.run(run())
