"""The in-process stores and the serving process (issue 16): TTL, bound, and no objects for the garbage collector."""

from __future__ import annotations

import gc

from edgepath.main import freeze_startup_heap
from edgepath.state.codec import TtlIndex


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_entries_expire_after_the_ttl() -> None:
    clock = Clock()
    index = TtlIndex(10, ttl_s=5.0, timer=clock)
    index["a"] = b"A"
    clock.now += 4.9
    assert index.get("a") == b"A" and "a" in index
    clock.now += 0.2
    assert index.get("a") is None and "a" not in index
    index["b"] = True  # setting prunes the expired front
    assert len(index) == 1


def test_past_maxsize_the_oldest_go_first_and_a_reset_key_is_young_again() -> None:
    clock = Clock()
    index = TtlIndex(3, ttl_s=60.0, timer=clock)
    for key in "abc":
        index[key] = key.encode()
        clock.now += 1
    index["a"] = b"A2"  # refreshed: now the youngest
    index["d"] = b"D"
    assert "b" not in index
    assert [index.get(k) for k in "acd"] == [b"A2", b"c", b"D"]


def test_entries_are_not_tracked_by_the_collector() -> None:
    index = TtlIndex(1000, ttl_s=60.0)
    for i in range(500):
        index[f"id-{i}"] = b'{"decision_id": "x"}'
    gc.collect()  # tuples of untracked values are untracked by the first collection that sees them
    assert not any(gc.is_tracked(entry) for shard in index._shards for entry in shard.values())


def test_a_large_index_is_sharded_so_no_table_holds_more_than_its_share() -> None:
    """A dict rebuilds its whole table as it grows: a big index is many small tables (issue 16)."""
    clock = Clock()
    index = TtlIndex(200_000, ttl_s=60.0, timer=clock)
    assert len(index._shards) == TtlIndex.MAX_SHARDS
    for i in range(250_000):  # past the bound: each shard drops its oldest
        index[f"id-{i}"] = i
    shard_max = -(-200_000 // TtlIndex.MAX_SHARDS)
    assert max(len(shard) for shard in index._shards) <= shard_max
    assert 199_000 <= len(index) <= 200_000
    assert index.get("id-249999") == 249_999 and "id-249999" in index
    assert index.get("id-0") is None  # the oldest went first
    clock.now += 60.1
    assert index.get("id-249999") is None and "id-249999" not in index


def test_values_are_oldest_first_across_shards() -> None:
    clock = Clock()
    index = TtlIndex(100_000, ttl_s=60.0, timer=clock)
    for i in range(500):
        index[f"k{i}"] = i
        clock.now += 0.01
    assert index.values() == list(range(500))


def test_freeze_startup_heap_moves_live_objects_out_of_collections() -> None:
    before = gc.get_freeze_count()
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()


def test_a_decision_row_round_trips_and_is_untracked_after_a_collection() -> None:
    from edgepath.state.codec import decision_row, row_decision

    from state.redis_helpers import decision

    record = decision("row-1")
    row = decision_row(record)
    assert row_decision(row) == record
    gc.collect()
    gc.collect()  # nested tuples first, then the row that holds them
    assert not gc.is_tracked(row)


def test_an_outcome_row_round_trips_with_its_extra_and_is_untracked_after_a_collection() -> None:
    import dataclasses

    from edgepath.state.codec import outcome_row, row_outcome

    from state.redis_helpers import decision, outcome

    record = dataclasses.replace(outcome(decision("row-2"), throughput_bps=2e7), extra={"rtt_ms": 31.0})
    row = outcome_row(record)
    assert row_outcome(row) == record
    for _ in range(3):  # one nesting level per collection: (name, value) pairs, their tuple, the row
        gc.collect()
    assert not gc.is_tracked(row)


def test_the_memory_stores_outcome_backlog_adds_no_tracked_objects() -> None:
    """A paused trainer's backlog is not walked by full collections (issue 16)."""
    import asyncio

    from edgepath.state.memory import MemoryStore

    from state.redis_helpers import decision, outcome

    async def run() -> None:
        store = MemoryStore()
        records = [decision(f"backlog-{i}") for i in range(300)]
        for d in records:
            await store.put_decision(d, 600)
        gc.collect()
        gc.collect()
        before = len(gc.get_objects())
        for i, d in enumerate(records):  # each outcome object is the store's alone once claimed
            await store.claim_outcome(outcome(d, throughput_bps=1e7 + i))
        for _ in range(3):  # one nesting level of the rows per collection
            gc.collect()
        assert len(gc.get_objects()) - before < 30  # 300 OutcomeRecord objects held would add >= 300
        read = await store.read_outcomes("trainer", 300, 0)
        assert [(o.decision_id, o.throughput_bps, o.extra) for _, o in read] == [
            (d.decision_id, 1e7 + i, {"rtt_ms": 12.5}) for i, d in enumerate(records)
        ]

    asyncio.run(run())


def test_the_in_process_rate_limiter_adds_no_tracked_object_per_device() -> None:
    import asyncio

    from edgepath.state.limits import MemoryRateLimiter

    async def run() -> None:
        limiter = MemoryRateLimiter(100.0, 10)
        gc.collect()
        before = len(gc.get_objects())
        for i in range(500):
            assert await limiter.acquire(f"device-{i}") == 0.0
        gc.collect()
        assert len(gc.get_objects()) - before < 30  # cachetools.TTLCache kept one link object per key

    asyncio.run(run())


def test_a_serving_process_shortens_the_gil_switch_interval_to_the_setting() -> None:
    import sys

    from edgepath.main import tune_serving_process
    from edgepath.settings import Settings

    before = sys.getswitchinterval()
    try:
        tune_serving_process(Settings(gil_switch_interval_ms=0.25))
        assert sys.getswitchinterval() == 0.00025
        assert Settings().gil_switch_interval_ms == 0.5  # Python's default is 5 ms
    finally:
        sys.setswitchinterval(before)
        gc.unfreeze()


def test_a_stored_decision_costs_well_under_a_kilobyte_and_a_half_in_the_memory_store() -> None:
    """The in-process store's footprint per decision (row, index entries, the outcome-seen entry), measured with
    tracemalloc on 2,000 decisions of the service's 68 features. A tuple of 68 float objects alone is 2.2 KB: the
    decisions of a busy node filled a 512 MiB pod in minutes before the features were packed (issue 16)."""
    import asyncio
    import dataclasses
    import tracemalloc

    from edgepath.engines.features import N_FEATURES
    from edgepath.state.memory import MemoryStore

    from state.redis_helpers import decision

    async def fill(store: MemoryStore, n: int) -> None:
        for i in range(n):
            features = tuple(0.001 * (i + k) for k in range(N_FEATURES))  # new float objects per decision
            await store.put_decision(dataclasses.replace(decision(f"d-{i:06d}"), features=features), 3600.0)
            store._outcome_seen[f"d-{i:06d}"] = True

    n = 2000
    store = MemoryStore()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        asyncio.run(fill(store, n))
        gc.collect()
        per_decision = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    assert len(store._decisions) == n
    assert per_decision < 1500, per_decision  # ~2.9 KB with the features as a tuple of floats


def test_an_encoded_record_holds_an_allocation_of_its_own_size() -> None:
    """The stores keep encoded records (the decision log, the Redis replicas' recent decisions): each must cost
    about its length, not orjson's over-allocated output buffer (16 KB for a 1 KB entry with orjson 3.13)."""
    import tracemalloc

    from edgepath.state.codec import encode_record

    from state.redis_helpers import decision

    record = decision("enc-1")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [encode_record(record) for _ in range(200)]
        per_entry = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert per_entry < 2 * len(kept[0]) + 100, (per_entry, len(kept[0]))


def test_set_many_leaves_what_setting_each_in_turn_leaves() -> None:
    """A batch's records set at once: the same entries, order, bound and expiry as one at a time (issue 16)."""
    clock = Clock()
    one, many = TtlIndex(70_000, ttl_s=5.0, timer=clock), TtlIndex(70_000, ttl_s=5.0, timer=clock)
    for index in (one, many):  # ~1,100 per shard: full after the first rounds
        for i in range(69_000):
            index[f"old-{i}"] = i
    clock.now += 3.0
    for round_ in range(3):
        pairs = [(f"r{round_}-{i}", i) for i in range(2_000)] + [("old-5", "again"), ("r0-1", "again")]
        for key, value in pairs:
            one[key] = value
        many.set_many(pairs)
        assert [list(s.items()) for s in many._shards] == [list(s.items()) for s in one._shards]
        clock.now += 1.5  # the old entries expire during round 2
    assert many.get("old-5") == "again" and many.get("old-6") is None and len(many) == len(one)
