"""One contract, two stores: the same cases run on MemoryStore and on RedisStore (real redis-server)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from edgepath.state.base import ClaimResult, StateStore
from edgepath.state.codec import decode_decision, encode_record, row_outcome
from edgepath.state.memory import MemoryStore
from edgepath.state.redis import RedisStore

from state.redis_helpers import decision, outcome, wait_for

KINDS = ["memory", pytest.param("redis", marks=pytest.mark.redis)]


class Harness:
    """Builds stores of one kind; ``restart`` gives what a restarted trainer process would see."""

    def __init__(self, kind: str, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.request = request
        self.stores: list[Any] = []

    def make(self, decision_ttl_s: float = 60.0) -> Any:
        if self.kind == "memory":
            store: Any = MemoryStore(max_decisions=1000, decision_ttl_s=decision_ttl_s)
        else:
            server = self.request.getfixturevalue("redis_server")
            namespace = self.request.getfixturevalue("namespace")
            store = RedisStore(server.url, namespace=namespace, decision_ttl_s=decision_ttl_s)
        self.stores.append(store)
        return store

    def restart(self, store: Any) -> Any:
        if self.kind == "memory":
            store.requeue_pending()  # the in-process log survives only within the process
            return store
        return self.make(store.decision_ttl_s)

    async def close(self) -> None:
        for store in self.stores:
            await store.close()


@pytest.fixture(params=KINDS)
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    h = Harness(request.param, request)
    yield h
    await h.close()


async def test_is_a_state_store(harness: Harness) -> None:
    assert isinstance(harness.make(), StateStore)


async def test_decision_round_trip(harness: Harness) -> None:
    store = harness.make()
    d = decision("d-1")
    await store.put_decision(d, 60.0)
    assert await store.get_decision("d-1") == d
    assert await store.get_decision("nope") is None


async def test_decisions_written_in_one_call_round_trip(harness: Harness) -> None:
    """RecommendBatch writes its records with one put_decisions call (Redis: one pipeline)."""
    store = harness.make()
    records = [decision(f"b-{i}") for i in range(64)]
    await store.put_decisions(records, 60.0)
    for d in records:
        assert await store.get_decision(d.decision_id) == d
    await store.put_decisions([], 60.0)


async def test_a_new_outcome_appends_its_decision_log_entry_with_the_claim_and_only_then(harness: Harness) -> None:
    """claim_outcome(..., log_entry): NEW appends the entry (Redis: inside the claim's script); DUPLICATE and UNKNOWN
    append nothing."""
    from edgepath.state.base import LoggedDecision

    store = harness.make()
    d = decision("log-1")
    await store.put_decision(d, 60.0)

    def entry(decision_id: str) -> LoggedDecision:
        return LoggedDecision(
            decision_id=decision_id,
            device_id=d.device_id,
            decided_at=d.decided_at,
            reported_at=d.decided_at + 1.0,
            model_version=d.model_version,
            policy=d.policy,
            arms=d.arms,
            arm_index=d.arm_index,
            interface=d.interface,
            propensity=d.propensity,
            features=tuple(d.features),
            context=({"name": "wlan0", "access_type": "WIFI"},),
            throughput_bps=3e7,
            latency_ms=40.0,
            loss=None,
            reward=1,
        )

    assert await store.claim_outcome(outcome(d), log_entry=entry("log-1")) is ClaimResult.NEW
    assert await store.claim_outcome(outcome(d), log_entry=entry("log-1")) is ClaimResult.DUPLICATE
    unknown = dataclasses.replace(outcome(d), decision_id="never-decided")
    assert await store.claim_outcome(unknown, log_entry=entry("never-decided")) is ClaimResult.UNKNOWN
    logged, _ = await store.read_decision_log(since_s=0.0)
    assert logged == [entry("log-1")]


def test_decision_records_of_older_and_newer_replicas_decode() -> None:
    # Rolling upgrade: a record without link_speed_mbps (older replica) reads as "none reported";
    # a field this version does not know (newer replica) is ignored rather than refused.
    d = decision("d-old")
    stored = json.loads(encode_record(d))
    assert stored["link_speed_mbps"] == [144.0, None]
    assert decode_decision(encode_record(d)) == d
    del stored["link_speed_mbps"]
    assert decode_decision(json.dumps(stored).encode()) == dataclasses.replace(d, link_speed_mbps=())
    stored["added_later"] = 1
    assert decode_decision(json.dumps(stored).encode()) == dataclasses.replace(d, link_speed_mbps=())


async def test_claim_new_then_duplicate_then_unknown(harness: Harness) -> None:
    store = harness.make()
    d = decision("d-2")
    await store.put_decision(d, 60.0)
    assert await store.claim_outcome(outcome(d)) is ClaimResult.NEW
    assert await store.claim_outcome(outcome(d, throughput_bps=1.0)) is ClaimResult.DUPLICATE
    assert await store.claim_outcome(outcome(decision("never-decided"))) is ClaimResult.UNKNOWN
    got = await store.read_outcomes("c1", 10, 0)
    assert len(got) == 1
    assert got[0][1].decision_id == "d-2"
    assert got[0][1].throughput_bps == 3e7  # the first report counts, not the duplicate
    assert got[0][1].extra == {"rtt_ms": 12.5}
    assert got[0][1].features == d.features and got[0][1].arms == d.arms


async def test_decision_expires(harness: Harness) -> None:
    # 1 s: the read below must come before the expiry, and a loaded host has stalled ~90 ms between two calls
    store = harness.make(decision_ttl_s=1.0)
    d = decision("d-ttl")
    await store.put_decision(d, 1.0)
    assert await store.get_decision("d-ttl") == d

    async def gone() -> bool:
        return await store.get_decision("d-ttl") is None

    await wait_for(gone, timeout_s=5.0)
    assert await store.claim_outcome(outcome(d)) is ClaimResult.UNKNOWN


async def test_read_in_order_then_ack(harness: Harness) -> None:
    store = harness.make()
    ds = [decision(f"d-{i}") for i in range(5)]
    for d in ds:
        await store.put_decision(d, 60.0)
        assert await store.claim_outcome(outcome(d)) is ClaimResult.NEW
    first = await store.read_outcomes("c1", 3, 0)
    second = await store.read_outcomes("c1", 3, 0)
    assert [o.decision_id for _, o in first] == ["d-0", "d-1", "d-2"]
    assert [o.decision_id for _, o in second] == ["d-3", "d-4"]
    await store.ack_outcomes([i for i, _ in first + second])
    assert await store.read_outcomes("c1", 10, 0) == []
    # acknowledged entries are not delivered again, even to a restarted reader
    again = harness.restart(store)
    assert await again.read_outcomes("c1", 10, 0) == []


async def test_outcome_rows_are_the_records_as_plain_values(harness: Harness) -> None:
    """What the trainer reads (``read_outcome_rows``): the same log, in order, each row turning back into the record
    ``read_outcomes`` would have given; acknowledged by entry id like the records."""
    store = harness.make()
    claimed = []
    for i in range(3):
        d = decision(f"row-{i}")
        await store.put_decision(d, 60.0)
        claimed.append(outcome(d))
        await store.claim_outcome(claimed[-1])
    rows = await store.read_outcome_rows("trainer", 2, 0, min_count=2)
    assert [row_outcome(row) for _, row in rows] == claimed[:2]
    assert all(type(v) in (str, int, float, bytes, tuple, type(None)) for _, row in rows for v in row)
    await store.ack_outcomes([i for i, _ in rows])
    assert [o.decision_id for _, o in await harness.restart(store).read_outcomes("trainer", 10, 0)] == ["row-2"]


async def test_unacknowledged_outcomes_are_delivered_again_after_restart(harness: Harness) -> None:
    store = harness.make()
    ds = [decision(f"r-{i}") for i in range(4)]
    for d in ds:
        await store.put_decision(d, 60.0)
        await store.claim_outcome(outcome(d))
    got = await store.read_outcomes("trainer", 4, 0)
    await store.ack_outcomes([got[0][0], got[1][0]])  # the trainer used two, then died
    restarted = harness.restart(store)
    redelivered = await restarted.read_outcomes("trainer", 10, 0)
    assert [o.decision_id for _, o in redelivered] == ["r-2", "r-3"]


async def test_blocking_read_wakes_on_new_outcome(harness: Harness) -> None:
    store = harness.make()
    d = decision("d-block")
    await store.put_decision(d, 60.0)
    # Block far longer than the bounded wait below (Redis caps a block at MAX_BLOCK_MS and then answers
    # empty): only a read woken by the arrival can return the outcome. No clock is compared.
    reader = asyncio.create_task(store.read_outcomes("c1", 10, 600_000))
    await store.claim_outcome(outcome(d))
    got = await asyncio.wait_for(reader, 60)
    assert [o.decision_id for _, o in got] == ["d-block"]


async def test_blocking_read_times_out_empty(harness: Harness) -> None:
    store = harness.make()
    assert await store.read_outcomes("c1", 10, 100) == []


async def test_ping(harness: Harness) -> None:
    assert await harness.make().ping() is True


# --- MEC 015 traffic steering sessions (issue 19) ---
async def test_mts_sessions_crud_and_per_device_lookup(harness: Harness) -> None:
    from edgepath.state.base import MtsSession

    store = harness.make()
    a = MtsSession("s-a", "dev-1", json.dumps({"mtsMode": 1}), 1.0)
    b = MtsSession("s-b", "dev-1", json.dumps({"mtsMode": 3}), 2.0)
    c = MtsSession("s-c", "dev-2", json.dumps({"mtsMode": 0}), 3.0)
    for s in (b, a, c):
        await store.put_mts_session(s)
    assert await store.get_mts_session("s-a") == a
    assert await store.get_mts_session("nope") is None
    assert [s.session_id for s in await store.list_mts_sessions()] == ["s-a", "s-b", "s-c"]  # oldest first
    assert [s.session_id for s in await store.device_mts_sessions("dev-1")] == ["s-a", "s-b"]
    # a replacement may move the session to another device
    moved = dataclasses.replace(a, device_id="dev-2", info=json.dumps({"mtsMode": 2}))
    await store.put_mts_session(moved)
    assert [s.session_id for s in await store.device_mts_sessions("dev-1")] == ["s-b"]
    assert await store.device_mts_sessions("dev-2") == [moved, c]
    assert await store.delete_mts_session("s-a") is True
    assert await store.delete_mts_session("s-a") is False
    assert await store.device_mts_sessions("dev-2") == [c]
    assert await store.device_mts_sessions("nobody") == []


async def test_an_mts_session_is_written_only_where_the_device_and_the_count_are_as_validated(
    harness: Harness,
) -> None:
    """The MEC 015 API's conditional write: nothing is written (False) when the device's other sessions are not the
    ones the caller validated against (one more, or one of them changed) or a new session would exceed
    ``max_sessions``; a replacement is not a new session. Two replicas of a Redis store see each other's writes."""
    from edgepath.state.base import MtsSession

    store = harness.make()
    replica = store if harness.kind == "memory" else harness.make()  # the in-process store is one replica's
    a = MtsSession("s-a", "dev-1", json.dumps({"mtsMode": 1}), 1.0)
    b = MtsSession("s-b", "dev-1", json.dumps({"mtsMode": 3}), 2.0)
    c = MtsSession("s-c", "dev-2", json.dumps({"mtsMode": 0}), 3.0)
    assert await store.put_mts_session(a, device_sessions=[], max_sessions=2) is True
    assert await replica.put_mts_session(b, device_sessions=[], max_sessions=2) is False  # a is there now
    assert await replica.put_mts_session(b, device_sessions=[a], max_sessions=2) is True
    assert await store.put_mts_session(c, device_sessions=[], max_sessions=2) is False  # a third session
    assert await store.list_mts_sessions() == [a, b]
    changed = dataclasses.replace(b, info=json.dumps({"mtsMode": 4}))
    assert await store.put_mts_session(changed, device_sessions=[a], max_sessions=2) is True  # a replacement
    assert await replica.put_mts_session(a, device_sessions=[b], max_sessions=2) is False  # b changed since
    moved = dataclasses.replace(a, device_id="dev-2")
    assert await replica.put_mts_session(moved, device_sessions=[], max_sessions=2) is True
    assert await store.device_mts_sessions("dev-1") == [changed]
    assert await store.device_mts_sessions("dev-2") == [moved]


async def test_many_devices_sessions_in_one_call_match_the_per_device_lookup(harness: Harness) -> None:
    """RecommendBatch reads every item's MEC 015 sessions with one devices_mts_sessions call (Redis: a pipeline)."""
    from edgepath.state.base import MtsSession

    store = harness.make()
    assert await store.devices_mts_sessions(["dev-1", "dev-2"]) == [[], []]
    for session in (
        MtsSession("s-b", "dev-1", json.dumps({"mtsMode": 3}), 2.0),
        MtsSession("s-a", "dev-1", json.dumps({"mtsMode": 1}), 1.0),
        MtsSession("s-c", "dev-2", json.dumps({"mtsMode": 0}), 3.0),
    ):
        await store.put_mts_session(session)
    devices = ["dev-2", "nobody", "dev-1", "dev-2"]
    assert await store.devices_mts_sessions(devices) == [await store.device_mts_sessions(d) for d in devices]
    assert [s.session_id for s in (await store.devices_mts_sessions(["dev-1"]))[0]] == ["s-a", "s-b"]
    assert await store.devices_mts_sessions([]) == []


async def test_mts_sessions_survive_a_restart(harness: Harness) -> None:
    from edgepath.state.base import MtsSession

    store = harness.make()
    s = MtsSession("s-keep", "dev-9", json.dumps({"mtsMode": 4}), 5.0)
    await store.put_mts_session(s)
    again = harness.restart(store)  # redis: a new store (another replica / a restarted one)
    assert await again.get_mts_session("s-keep") == s
    assert await again.device_mts_sessions("dev-9") == [s]


async def test_device_accesses(harness: Harness) -> None:
    store = harness.make()
    assert await store.device_accesses("dev-1") is None
    await store.record_device_accesses("dev-1", ("LTE", "WIFI"))
    await store.record_device_accesses("dev-2", ("NR",))
    assert await store.device_accesses("dev-1") == ("LTE", "WIFI")
    await store.record_device_accesses("dev-1", ("WIFI",))
    assert await store.device_accesses("dev-1") == ("WIFI",)
    assert await store.reported_access_types() == {"LTE", "WIFI", "NR"}


# --- congestion edge measurements (issue 20) ---
async def test_cc_measurements_keep_count_sum_and_sum_of_squares_per_profile_and_algorithm(harness: Harness) -> None:
    store = harness.make()
    assert await store.cc_measurement_stats("BULK") == {}
    await store.record_cc_measurement("BULK", "cubic", {"throughput_avg_mbps": 10.0, "drop_rate_fraction": 0.01})
    await store.record_cc_measurement("BULK", "cubic", {"throughput_avg_mbps": 14.0})
    await store.record_cc_measurement("BULK", "reno", {"throughput_avg_mbps": 1e-5})
    await store.record_cc_measurement("STREAMING", "cubic", {"hol_degree_avg_ms": -2.5})
    bulk = await store.cc_measurement_stats("BULK")
    assert set(bulk) == {"cubic", "reno"}
    t = bulk["cubic"]["throughput_avg_mbps"]
    assert (t.count, t.total, t.total_sq) == (2, pytest.approx(24.0), pytest.approx(296.0))
    d = bulk["cubic"]["drop_rate_fraction"]
    assert (d.count, d.total, d.total_sq) == (1, pytest.approx(0.01), pytest.approx(1e-4))
    assert bulk["reno"]["throughput_avg_mbps"].total == pytest.approx(1e-5)
    s = (await store.cc_measurement_stats("STREAMING"))["cubic"]["hol_degree_avg_ms"]
    assert (s.count, s.total, s.total_sq) == (1, pytest.approx(-2.5), pytest.approx(6.25))
    assert await store.cc_measurement_stats("INTERACTIVE") == {}


async def test_cc_measurements_are_bounded_in_algorithms_per_profile_evicting_the_least_recently_reported(
    harness: Harness,
) -> None:
    """Full, a profile's statistics make room for a further algorithm by evicting the one reported least recently,
    however often it was reported: before, the further one was dropped, and a profile whose places had filled (with
    names nobody reports any more) never learned again."""
    from edgepath.state.base import MAX_CC_ALGORITHMS

    store = harness.make()
    for i in range(MAX_CC_ALGORITHMS):
        for _ in range(5 if i else 1):  # algo0 the least often reported
            await store.record_cc_measurement("BULK", f"algo{i}", {"throughput_avg_mbps": 1.0})
    await store.record_cc_measurement("BULK", "algo0", {"throughput_avg_mbps": 3.0})  # now the most recent
    for i in range(MAX_CC_ALGORITHMS, MAX_CC_ALGORITHMS + 3):  # evict algo1, algo2, algo3 (5 transfers each)
        await store.record_cc_measurement("BULK", f"algo{i}", {"throughput_avg_mbps": 2.0})
    stats = await store.cc_measurement_stats("BULK")
    assert len(stats) == MAX_CC_ALGORITHMS
    assert {"algo1", "algo2", "algo3"}.isdisjoint(stats)
    t = stats["algo0"]["throughput_avg_mbps"]
    assert (t.count, t.total) == (2, pytest.approx(4.0))
    assert all(stats[f"algo{i}"]["throughput_avg_mbps"].count == 1 for i in range(MAX_CC_ALGORITHMS, 35))
    await store.record_cc_measurement("BULK", "algo1", {"throughput_avg_mbps": 7.0})  # back, from scratch
    stats = await store.cc_measurement_stats("BULK")
    assert len(stats) == MAX_CC_ALGORITHMS and "algo4" not in stats
    assert stats["algo1"]["throughput_avg_mbps"].total == pytest.approx(7.0)
    assert stats["algo1"]["throughput_avg_mbps"].count == 1


@pytest.mark.redis
async def test_a_full_redis_cc_hash_of_the_previous_release_makes_room(redis_server: Any, namespace: str) -> None:
    """A hash the release before eviction filled (no ``|seq`` fields: 32 made-up names, each reported many times)
    takes real algorithms again: each evicts one of the old names, every field of it, and the count stays 32."""
    from edgepath.state.base import MAX_CC_ALGORITHMS

    store = RedisStore(redis_server.url, namespace=namespace)
    key = store.cc_stats_key("INTERACTIVE")
    try:
        old: dict[str, Any] = {"#algorithms": MAX_CC_ALGORITHMS}
        for i in range(MAX_CC_ALGORITHMS):
            f = f"junk{i}|protocol_delay_avg_ms|"
            old |= {f"junk{i}|transfers": 1000, f + "n": 1000, f + "sum": 5000.0, f + "sumsq": 25000.0}
        await store.redis.hset(key, mapping=old)
        for algorithm in ("cubic", "bbr", "reno"):
            await store.record_cc_measurement("INTERACTIVE", algorithm, {"protocol_delay_avg_ms": 90.0})
        stats = await store.cc_measurement_stats("INTERACTIVE")
        assert len(stats) == MAX_CC_ALGORITHMS and {"cubic", "bbr", "reno"} <= set(stats)
        assert {"junk0", "junk1", "junk10"}.isdisjoint(stats)  # equally old: by name
        fields = {f.decode() for f in await store.redis.hkeys(key)}
        assert not any(f.startswith(("junk0|", "junk1|", "junk10|")) for f in fields)
        assert int(await store.redis.hget(key, "#algorithms")) == MAX_CC_ALGORITHMS
        assert stats["cubic"]["protocol_delay_avg_ms"].count == 1
    finally:
        await store.close()


async def test_cc_measurements_are_shared_by_every_replica_of_the_store(harness: Harness) -> None:
    first = harness.make()
    other = harness.restart(first) if harness.kind == "redis" else first
    await first.record_cc_measurement("LOSS_SENSITIVE", "bbr", {"drop_rate_fraction": 0.3})
    await other.record_cc_measurement("LOSS_SENSITIVE", "bbr", {"drop_rate_fraction": 0.1})
    for store in (first, other):
        got = (await store.cc_measurement_stats("LOSS_SENSITIVE"))["bbr"]["drop_rate_fraction"]
        assert (got.count, got.total) == (2, pytest.approx(0.4))


async def test_redis_cc_measurements_are_dropped_and_read_as_unknown_when_unreachable() -> None:
    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout_s=0.2)
    try:
        await store.record_cc_measurement("BULK", "cubic", {"throughput_avg_mbps": 1.0})  # never raises
        assert store.degraded
        assert await store.cc_measurement_stats("BULK") is None
    finally:
        await store.close()


# --- end congestion edge measurements ---


#: The MEC 015 API's reads of the store: each raises Unavailable when Redis is unreachable (the API answers 503).
MTS_API_READS: dict[str, Any] = {
    "get_mts_session": lambda store: store.get_mts_session("s"),
    "list_mts_sessions": lambda store: store.list_mts_sessions(),
    "device_accesses": lambda store: store.device_accesses("d"),
    "reported_access_types": lambda store: store.reported_access_types(),
}


@pytest.mark.parametrize("first", list(MTS_API_READS))
async def test_redis_mts_api_reads_and_writes_fail_as_unavailable_and_decision_reads_as_none_when_unreachable(
    first: str,
) -> None:
    """No server on the port. The API's reads and writes raise Unavailable (the API answers 503, not "no such
    session" / "unknown device"): the first call that finds Redis unreachable (``first``) and every one after it
    (degraded mode). The decision path's reads give the default (no session) and its writes are dropped."""
    from edgepath.errors import Unavailable
    from edgepath.state.base import MtsSession

    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout_s=0.2, reconnect_interval_s=60.0)
    try:
        with pytest.raises(Unavailable, match="state store unreachable"):
            await MTS_API_READS[first](store)
        assert store.degraded
        for read in MTS_API_READS.values():
            with pytest.raises(Unavailable, match="state store unreachable"):
                await read(store)
        with pytest.raises(Unavailable):
            await store.put_mts_session(MtsSession("s", "d", "{}", 1.0))
        with pytest.raises(Unavailable):
            await store.delete_mts_session("s")
        assert await store.device_mts_sessions("d") == []
        assert await store.devices_mts_sessions(["d", "e"]) == [[], []]
        await store.record_device_accesses("d", ("WIFI",))  # dropped, never raises
    finally:
        await store.close()


async def test_redis_mts_decision_reads_when_unreachable_give_no_session() -> None:
    """The decision path's read as the first call that finds Redis unreachable: no session, no error."""
    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout_s=0.2, reconnect_interval_s=60.0)
    try:
        assert await store.device_mts_sessions("d") == []
        assert store.degraded
    finally:
        await store.close()


async def test_redis_batch_calls_when_unreachable_keep_the_decisions_and_read_no_sessions() -> None:
    """RecommendBatch's store calls with no server on the port: the records stay readable on this replica (kept
    unsynced for the reconnect), every device reads as having no session, and nothing raises."""
    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout_s=0.2, reconnect_interval_s=60.0)
    records = [decision(f"u-{i}", device_id=f"dev-{i}") for i in range(3)]
    try:
        assert await store.devices_mts_sessions(["dev-0", "dev-1"]) == [[], []]
        await store.put_decisions(records, 60.0)
        assert store.degraded
        assert [await store.get_decision(r.decision_id) for r in records] == records
        assert await store.devices_mts_sessions(["dev-0", "dev-1"]) == [[], []]
    finally:
        await store.close()
