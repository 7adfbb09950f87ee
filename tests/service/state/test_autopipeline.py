"""The Redis auto-pipeline (issue 16) on a real redis-server: coalescing, order, per-command errors, scripts,
unreachable Redis, and drain."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from edgepath.metrics import Metrics
from edgepath.state.autopipeline import AutoPipeline
from edgepath.state.redis import RedisStore
from prometheus_client import generate_latest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from state.redis_helpers import RedisServer, decision, free_port

pytestmark = pytest.mark.timeout(60)


def run_with_pipeline(
    make_client: Callable[[], Redis], body: Callable[[AutoPipeline], Awaitable[None]], max_commands: int = 512
) -> None:
    """``body(auto)`` on a new event loop, with an auto-pipeline over a new client (closed afterwards)."""

    async def run() -> None:
        client = make_client()
        try:
            await body(AutoPipeline(client, max_commands=max_commands))
        finally:
            await client.aclose()

    asyncio.run(run())


def test_one_iterations_commands_are_one_pipeline_with_each_reply_to_its_caller(
    redis_server: RedisServer, namespace: str
) -> None:
    async def body(auto: AutoPipeline) -> None:
        writes = [auto.execute("set", f"{namespace}:k{i}", f"v{i}") for i in range(20)]
        assert await asyncio.gather(*writes) == [True] * 20
        assert (auto.pipelines, auto.commands) == (1, 20)
        reads = await asyncio.gather(*(auto.execute("get", f"{namespace}:k{i}") for i in range(20)))
        assert reads == [f"v{i}".encode() for i in range(20)]
        assert (auto.pipelines, auto.commands) == (2, 40)

    run_with_pipeline(lambda: Redis.from_url(redis_server.url), body)


def test_order_of_one_callers_commands_is_kept(redis_server: RedisServer, namespace: str) -> None:
    async def body(auto: AutoPipeline) -> None:
        futures = [auto.execute("rpush", f"{namespace}:list", i) for i in range(50)]
        futures.append(auto.execute("lrange", f"{namespace}:list", 0, -1))
        replies = await asyncio.gather(*futures)
        assert replies[-1] == [str(i).encode() for i in range(50)]

    run_with_pipeline(lambda: Redis.from_url(redis_server.url), body)


def test_a_reply_error_goes_to_its_own_caller_only(redis_server: RedisServer, namespace: str) -> None:
    async def body(auto: AutoPipeline) -> None:
        await auto.execute("set", f"{namespace}:str", "x")
        ok = auto.execute("set", f"{namespace}:a", "1")
        wrong = auto.execute("hvals", f"{namespace}:str")  # WRONGTYPE
        ok2 = auto.execute("get", f"{namespace}:a")
        assert await ok is True
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await wrong
        assert await ok2 == b"1"

    run_with_pipeline(lambda: Redis.from_url(redis_server.url), body)


def test_replies_are_parsed_as_the_clients_own_commands_parse_them(redis_server: RedisServer, namespace: str) -> None:
    """Each reply goes through the client's reply callbacks, as ``client.<name>()`` would return it."""

    async def body(auto: AutoPipeline) -> None:
        key = f"{namespace}:h"
        futures = [
            auto.execute("hset", key, mapping={"a": "1", "b": "2"}),
            auto.execute("hgetall", key),
            auto.execute("exists", key),
            auto.execute("set", f"{namespace}:nx", "x", nx=True),
            auto.execute("set", f"{namespace}:nx", "y", nx=True),
            auto.execute("expire", key, 60),
        ]
        assert await asyncio.gather(*futures) == [2, {b"a": b"1", b"b": b"2"}, 1, True, None, True]
        assert (auto.pipelines, auto.commands) == (1, 6)
        assert await auto.execute("hgetall", key) == await auto.client.hgetall(key)  # a lone command alike

    run_with_pipeline(lambda: Redis.from_url(redis_server.url), body)


def test_a_timed_out_round_trip_fails_its_callers_and_leaves_no_late_reply(
    redis_server: RedisServer, namespace: str
) -> None:
    """A reply later than the client's socket time-out fails every caller of that round trip with redis'
    ``TimeoutError``, and its connection is not used again: the next round trip reads its own replies, not the
    late ones (the blocked ``BLPOP``'s, then this round trip's ``GET``)."""

    async def body(auto: AutoPipeline) -> None:
        await auto.execute("set", f"{namespace}:v", "before")
        blocked = auto.execute("blpop", [f"{namespace}:empty"], timeout=1)  # the server answers after 1 s
        read = auto.execute("get", f"{namespace}:v")
        results = await asyncio.gather(blocked, read, return_exceptions=True)
        assert all(isinstance(r, RedisTimeoutError) for r in results), results
        pushed = auto.execute("rpush", f"{namespace}:empty", "item")
        value = auto.execute("get", f"{namespace}:v")
        assert await asyncio.gather(pushed, value) == [1, b"before"]

    run_with_pipeline(lambda: Redis.from_url(redis_server.url, socket_timeout=0.2), body)


def test_round_trips_one_after_another_keep_one_connection(redis_server: RedisServer, namespace: str) -> None:
    """A round trip that read its replies keeps its connection for the next one (no checkout from the pool each
    time); one sent while another is in flight takes a second connection; drain gives the kept one back."""

    async def body(auto: AutoPipeline) -> None:
        pool = auto.client.connection_pool
        checkouts = 0
        get_connection = pool.get_connection

        async def counted() -> Any:
            nonlocal checkouts
            checkouts += 1
            return await get_connection()

        pool.get_connection = counted  # type: ignore[method-assign]
        ids = [await auto.execute("client_id") for _ in range(5)]
        assert len(set(ids)) == 1 and checkouts == 1
        # a blocking pop awaits its reply on the kept connection: a command sent meanwhile takes a second one
        blocked = auto.execute("blpop", [f"{namespace}:q"], timeout=5)
        while auto._kept is not None:  # until the pop's round trip has taken the kept connection (loop turns only)
            await asyncio.sleep(0)
        beside = await auto.execute("client_id")
        assert not blocked.done() and beside != ids[0] and checkouts == 2
        other = Redis.from_url(redis_server.url)
        try:
            await other.rpush(f"{namespace}:q", "x")
        finally:
            await other.aclose()
        assert await blocked == (f"{namespace}:q".encode(), b"x")
        await auto.drain()
        assert auto._kept is None

    run_with_pipeline(lambda: Redis.from_url(redis_server.url), body)


def test_a_kept_connection_closed_by_redis_is_replaced_by_the_retry(redis_server: RedisServer, namespace: str) -> None:
    """Redis closes the kept connection between two round trips: the next one meets the closed connection,
    disconnects it and is sent again on a new one (the client's retry policy, as the store configures it)."""

    async def body(auto: AutoPipeline) -> None:
        first = await auto.execute("client_id")
        assert await auto.client.client_kill_filter(_id=first) == 1  # another connection of the same client
        assert await auto.execute("set", f"{namespace}:after", "1") is True
        second = await auto.execute("client_id")
        assert second != first
        assert await auto.client.get(f"{namespace}:after") == b"1"

    retry = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
    run_with_pipeline(lambda: Redis.from_url(redis_server.url, retry=retry), body)


def test_scripts_run_as_evalsha_and_reload_after_a_script_flush(redis_server: RedisServer, namespace: str) -> None:
    async def body(auto: AutoPipeline) -> None:
        incr = auto.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        await auto.client.script_flush()
        # not loaded: NOSCRIPT in the pipeline, then loaded and retried call by call (in any order)
        replies = await asyncio.gather(*(incr(keys=[f"{namespace}:n"], args=[2]) for _ in range(3)))
        assert sorted(replies) == [2, 4, 6]
        assert await incr(keys=[f"{namespace}:n"], args=[1]) == 7

    run_with_pipeline(lambda: Redis.from_url(redis_server.url), body)


def test_unreachable_redis_fails_every_caller_of_the_pipeline() -> None:
    async def body(auto: AutoPipeline) -> None:
        futures = [auto.execute("get", f"k{i}") for i in range(3)]
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert all(isinstance(r, RedisConnectionError) for r in results), results

    run_with_pipeline(lambda: Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5), body)


def test_drain_sends_what_is_queued_and_waits_for_it(redis_server: RedisServer, namespace: str) -> None:
    async def body(auto: AutoPipeline) -> None:
        futures = [auto.execute("set", f"{namespace}:d{i}", i) for i in range(10)]  # 4 + 4 sent at once, 2 queued
        await auto.drain()
        assert all(f.done() for f in futures)
        assert auto.commands == 10 and auto.pipelines == 3
        assert await auto.client.get(f"{namespace}:d9") == b"9"

    run_with_pipeline(lambda: Redis.from_url(redis_server.url), body, max_commands=4)


def test_max_commands_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_commands"):
        AutoPipeline(Redis(), max_commands=0)
    with pytest.raises(ValueError, match="hold_iterations"):
        AutoPipeline(Redis(), hold_iterations=-1)
    with pytest.raises(ValueError, match="idle_hold_iterations"):
        AutoPipeline(Redis(), hold_iterations=4, idle_hold_iterations=-1)
    assert AutoPipeline(Redis(), hold_iterations=0, idle_hold_iterations=2).idle_hold_iterations == 0  # at most
    assert AutoPipeline(Redis(), hold_iterations=16).idle_hold_iterations == 16  # unset: the same hold


def test_a_queue_held_only_while_another_caller_awaits_redis(redis_server: RedisServer, namespace: str) -> None:
    """A lone caller's command waits the short idle hold (2 iterations here), not the full one (50); a command
    issued while another caller's command awaits its reply (a blocking pop, released by a push from another
    client) waits the full hold, for the commands of the calls in flight."""

    async def body(auto: AutoPipeline, pusher: Redis) -> None:
        lone = auto.execute("set", f"{namespace}:lone", 1)
        for _ in range(6):
            await asyncio.sleep(0)
        assert auto.pipelines == 1  # sent after the idle hold (the full one would hold it for 50 iterations)
        assert await lone is True
        slow = auto.execute("blpop", [f"{namespace}:empty"], 30)
        for _ in range(100):
            if auto.pipelines == 2:
                break
            await asyncio.sleep(0)
        assert auto.pipelines == 2 and not slow.done()
        other = auto.execute("set", f"{namespace}:other", 2)
        for _ in range(10):
            await asyncio.sleep(0)
        assert auto.pipelines == 2 and not other.done()  # held: another caller awaits Redis
        await pusher.rpush(f"{namespace}:empty", "x")  # the pop's reply
        await auto.drain()
        assert await other is True and tuple(await slow) == (f"{namespace}:empty".encode(), b"x")

    async def run() -> None:
        client, pusher = Redis.from_url(redis_server.url), Redis.from_url(redis_server.url)
        try:
            await body(AutoPipeline(client, hold_iterations=50, idle_hold_iterations=2), pusher)
        finally:
            await client.aclose()
            await pusher.aclose()

    asyncio.run(run())


@pytest.mark.parametrize(("hold_iterations", "pipelines"), [(0, 5), (8, 1)])
def test_a_held_queue_gathers_the_commands_of_the_next_iterations(
    redis_server: RedisServer, namespace: str, hold_iterations: int, pipelines: int
) -> None:
    """One command per loop iteration, as a serving loop that takes one call per wake-up issues them: sent at the
    next iteration, each is a pipeline of its own; held for 8 iterations, the five share one round trip."""

    async def body(auto: AutoPipeline) -> None:
        futures = []
        for i in range(5):
            futures.append(auto.execute("set", f"{namespace}:h{i}", i))
            await asyncio.sleep(0)  # one loop iteration
        assert await asyncio.gather(*futures) == [True] * 5
        assert (auto.pipelines, auto.commands) == (pipelines, 5)
        assert await auto.client.get(f"{namespace}:h4") == b"4"

    async def run() -> None:
        client = Redis.from_url(redis_server.url)
        try:
            await body(AutoPipeline(client, hold_iterations=hold_iterations))
        finally:
            await client.aclose()

    asyncio.run(run())


def test_a_queue_sent_early_ends_its_hold(redis_server: RedisServer, namespace: str) -> None:
    """A held queue that reaches ``max_commands`` goes at once; the commands after it start a hold of their own
    (the first hold does not send them early), and :meth:`drain` sends what is held."""

    async def body(auto: AutoPipeline) -> None:
        first = [auto.execute("set", f"{namespace}:e0", 0)]  # its hold ends 50 iterations from here
        for _ in range(45):
            await asyncio.sleep(0)
        first += [auto.execute("set", f"{namespace}:e{i}", i) for i in (1, 2)]  # max_commands 3: sent at once
        assert (auto.pipelines, len(auto._queue)) == (0, 0)  # the send is a task of this iteration
        second = auto.execute("set", f"{namespace}:e3", 3)
        for _ in range(10):  # past the end of the first hold
            await asyncio.sleep(0)
        assert auto.pipelines == 1 and not second.done()  # still held: its own 50 iterations, not the first's
        await auto.drain()
        assert second.done() and (auto.pipelines, auto.commands) == (2, 4)
        assert await asyncio.gather(*first) == [True] * 3

    async def run() -> None:
        client = Redis.from_url(redis_server.url)
        try:
            await body(AutoPipeline(client, max_commands=3, hold_iterations=50))
        finally:
            await client.aclose()

    asyncio.run(run())


async def test_a_batch_writes_its_decisions_and_reads_its_sessions_in_one_command_each(
    redis_server: RedisServer, namespace: str
) -> None:
    """RecommendBatch's two store calls reach Redis as one command each (counted by the server), not one per item."""
    from edgepath.state.redis import RedisStore

    from state.redis_helpers import decision

    store = RedisStore(redis_server.url, namespace=namespace)
    admin = Redis.from_url(redis_server.url)
    records = [decision(f"b-{i}", device_id=f"dev-{i}") for i in range(64)]

    async def calls() -> dict[str, int]:
        stats = await admin.info("commandstats")
        return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}

    try:
        await store.put_decisions([decision("warm-up")], 60.0)  # connect and load both scripts before counting
        await store.devices_mts_sessions(["warm-up"])
        before = await calls()
        await store.put_decisions(records, 60.0)
        sessions = await store.devices_mts_sessions([r.device_id for r in records])
        after = await calls()
        assert sessions == [[] for _ in records]
        assert all([await store.get_decision(r.decision_id) == r for r in records])
        sent = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        # the server counts the commands a script runs too: 64 of each, all inside the two scripts' calls
        assert sent.get("set", 0) == 64 and sent.get("hvals", 0) == 64
        assert sent.get("evalsha", 0) == 2 and sent.get("eval", 0) == 0
    finally:
        await store.close()
        await admin.aclose()


def test_each_round_trip_and_its_commands_are_reported(redis_server: RedisServer, namespace: str) -> None:
    """``on_send`` hears every pipeline's size; a store with metrics exports them as round trips and commands, whose
    ratio is the coalescing an operator tunes ``redis_pipeline_hold_iterations`` by."""
    sizes: list[int] = []

    async def run() -> None:
        client = Redis.from_url(redis_server.url)
        try:
            auto = AutoPipeline(client, on_send=sizes.append)
            await asyncio.gather(*(auto.execute("set", f"{namespace}:m{i}", i) for i in range(3)))
            await auto.execute("get", f"{namespace}:m0")
        finally:
            await client.aclose()

    asyncio.run(run())
    assert sizes == [3, 1]

    async def store_body() -> bytes:
        metrics = Metrics.create()
        store = RedisStore(redis_server.url, namespace=namespace, metrics=metrics, pipeline_hold_iterations=4)
        try:
            await asyncio.gather(*(store.put_decision(decision(f"d-{i}"), 60.0) for i in range(5)))
        finally:
            await store.close()
        return generate_latest(metrics.registry)

    exposition = asyncio.run(store_body()).decode()
    assert "edgepath_redis_round_trips_total 1.0" in exposition
    assert "edgepath_redis_pipelined_commands_total 5.0" in exposition
