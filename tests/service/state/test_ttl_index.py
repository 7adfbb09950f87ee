"""The Redis store's recent-decision index (issue 16): TTL, bound, and no objects for the garbage collector."""

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
    assert not any(gc.is_tracked(entry) for entry in index._items.values())


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
