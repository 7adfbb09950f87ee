"""A memory store in a process that serves without a trainer (``edgepath serve --store memory:// --no-trainer``)
keeps no outcome queue: no other process can read an in-process store, so the queue would only grow, one outcome per
report for as long as the process runs (1,158 bytes per outcome by tracemalloc in Session 44)."""

from __future__ import annotations

from edgepath.main import build_backend
from edgepath.settings import Settings
from edgepath.state.base import ClaimResult
from edgepath.state.memory import MemoryStore

from state.redis_helpers import decision, outcome


async def claimed_and_read(store: MemoryStore) -> tuple[list[ClaimResult], int]:
    """Three decisions, their outcomes and one duplicate claimed; then how many outcomes a trainer could read."""
    records = [decision(f"d{i}") for i in range(3)]
    for record in records:
        await store.put_decision(record, 60.0)
    claims = [await store.claim_outcome(outcome(record)) for record in records]
    claims.append(await store.claim_outcome(outcome(records[0])))
    return claims, len(await store.read_outcome_rows("trainer", 10, 0))


async def test_without_a_trainer_outcomes_are_claimed_once_and_not_queued() -> None:
    new, dup = ClaimResult.NEW, ClaimResult.DUPLICATE
    assert await claimed_and_read(MemoryStore(queue_outcomes=False)) == ([new, new, new, dup], 0)
    assert await claimed_and_read(MemoryStore()) == ([new, new, new, dup], 3)


def test_serve_without_a_trainer_builds_a_memory_store_without_an_outcome_queue() -> None:
    assert build_backend(Settings(trainer=False)).store.queue_outcomes is False
    assert build_backend(Settings(trainer=True)).store.queue_outcomes is True
    assert build_backend(Settings()).store.queue_outcomes is True  # memory:// trains in process by default
