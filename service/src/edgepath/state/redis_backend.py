"""The Redis state backend: the store, model snapshots, the trainer lock, shared limits and quarantine.

Keys (``ns`` = ``settings.redis_namespace``), besides the store's (:mod:`edgepath.state.redis`)
---------------------------------------------------------------------------------------------
``{ns}:model:version``
    Counter of the published model version.
``{ns}:model:snapshot``
    Hash with fields ``version``, ``blob``, ``signature``, ``meta`` (:mod:`edgepath.training.snapshots`).
``{ns}:model:published``
    Pub/sub channel: the version, on each publication.
``{ns}:trainer:lock``
    The trainer lock (redis-py's :class:`redis.asyncio.lock.Lock`: ``SET NX PX`` with a random token,
    released and renewed by token-checking Lua scripts).
``{ns}:rl:req:{device}``, ``{ns}:rl:out:{device}``
    GCRA buckets of the request and outcome budgets (:mod:`edgepath.state.limits`).
``{ns}:quarantine``
    The quarantine set.

Publication is one Lua script, atomic in Redis: if the new version is greater than the stored one (a
fencing check: a trainer that lost its lock cannot overwrite a newer model), set the counter and the
hash, ``XACK`` + ``XDEL`` the outcome-log entries the model was trained on, and ``PUBLISH`` the version.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from redis.exceptions import LockError, ResponseError

from edgepath.state.backend import LockLost, SnapshotNotifications, SnapshotRecord, StoreMemory, StoreUnreachable
from edgepath.state.limits import (
    FallbackRateLimiter,
    MemoryRateLimiter,
    QuarantineSet,
    RateLimiter,
    RedisQuarantine,
    RedisRateLimiter,
)
from edgepath.state.redis import GROUP, UNREACHABLE, RedisStore

T = TypeVar("T")
log = logging.getLogger("edgepath.state")

#: The Redis commands ``edgepath serve`` and ``edgepath train`` run, directly or inside their Lua scripts (Redis
#: checks a script's commands against the caller's ACL too), each as Redis's ACL syntax names it (``cmd|subcommand``).
#: Collected with ``MONITOR`` over every feature and held by ``tests/service/state/test_redis_acl.py``, which runs a
#: replica and a trainer as a user granted exactly :func:`redis_acl_rule` and finds ``ACL LOG`` empty.
REDIS_ACL_COMMANDS = (
    # connection (redis-py's handshake: HELLO 3; readiness: PING); the store's memory gauges: INFO memory
    "hello",
    "ping",
    "info",
    # scripts (EVALSHA; SCRIPT LOAD after a NOSCRIPT: the server restarted or was flushed) and what they call
    "evalsha",
    "script|load",
    "time",
    # strings: decisions, claim markers, the model version, the trainer lock, server scores, GCRA buckets
    "get",
    "set",
    "del",
    "exists",
    "expire",
    "pexpire",
    "mget",
    # hashes: the model snapshot, MEC 015 sessions, congestion statistics, fleet exploration, SSMP views
    "hget",
    "hset",
    "hdel",
    "hexists",
    "hlen",
    "hgetall",
    "hvals",
    "hincrby",
    "hincrbyfloat",
    # sets: quarantine, MEC 015 access types
    "sadd",
    "srem",
    "smembers",
    # streams: the outcome log (consumer group), the decision log
    "xadd",
    "xtrim",
    "xdel",
    "xack",
    "xlen",
    "xrange",
    "xpending",
    "xreadgroup",
    "xautoclaim",
    "xgroup|create",
    "xgroup|delconsumer",
    "xinfo|consumers",
    # transactions (MEC 015 sessions, the outcome log's acknowledgement) and model publication
    "multi",
    "exec",
    "publish",
    "subscribe",
    "unsubscribe",
)


def redis_acl_rule(namespace: str = "edgepath") -> str:
    """The ACL rules of a Redis user the service and its trainer can run as, least privilege: the keys and the
    pub/sub channels of ``namespace`` (``settings.redis_namespace``) and :data:`REDIS_ACL_COMMANDS` only, for
    ``ACL SETUSER <user> on ><password> <these rules>`` (https://redis.io/docs/latest/operate/oss_and_stack/
    management/security/acl/). ``namespace`` is glob-escaped: ``*?[]\\`` in it match themselves.

    Raises
    ------
    ValueError
        ``namespace`` is empty or holds whitespace (the rule is one line of space-separated ACL rules).
    """
    if not namespace or any(c.isspace() for c in namespace):
        raise ValueError(f"namespace {namespace!r}: non-empty, without whitespace")
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in namespace)
    commands = " ".join("+" + c for c in REDIS_ACL_COMMANDS)
    return f"resetkeys ~{escaped}:* resetchannels &{escaped}:* -@all {commands}"


# KEYS: version counter, snapshot hash, outcome stream
# ARGV: version, blob, signature, meta, channel, group, entry ids...
_PUBLISH_LUA = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local version = tonumber(ARGV[1])
if version <= current then return -current end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'version', ARGV[1], 'blob', ARGV[2], 'signature', ARGV[3], 'meta', ARGV[4])
if #ARGV > 6 then
  redis.call('XACK', KEYS[3], ARGV[6], unpack(ARGV, 7))
  redis.call('XDEL', KEYS[3], unpack(ARGV, 7))
end
redis.call('PUBLISH', ARGV[5], ARGV[1])
return version
"""


async def _reach(pending: Awaitable[T]) -> T:
    """``await pending``, with the client's "unreachable" errors as :class:`StoreUnreachable`."""
    try:
        return await pending
    except UNREACHABLE as exc:
        raise StoreUnreachable(f"state store unreachable: {exc}") from exc


class _RedisNotifications:
    def __init__(self, pubsub: Any) -> None:
        self._pubsub = pubsub

    async def wait(self, timeout_s: float) -> bool:
        message = await _reach(self._pubsub.get_message(ignore_subscribe_messages=True, timeout=timeout_s))
        return message is not None


class RedisSnapshotChannel:
    """:class:`~edgepath.state.backend.SnapshotChannel` in Redis (keys above), next to the store's outcome stream."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._redis = store.redis
        ns = store.namespace
        self.version_key = f"{ns}:model:version"
        self.snapshot_key = f"{ns}:model:snapshot"
        self.name = f"{ns}:model:published"
        self._publish = self._redis.register_script(_PUBLISH_LUA)

    async def latest_version(self) -> int:
        raw = await _reach(self._redis.get(self.version_key))
        return int(raw) if raw is not None else 0

    async def publish(self, record: SnapshotRecord, entry_ids: list[str]) -> tuple[bool, int]:
        args: list[Any] = [record.version, record.blob, record.signature or b"", record.meta, self.name, GROUP]
        keys = [self.version_key, self.snapshot_key, self._store.stream]
        result = int(await _reach(self._publish(keys=keys, args=[*args, *entry_ids])))
        if result < 0 or result != record.version:  # the script returns -current when it refused
            return False, abs(result)
        self._store.acked(entry_ids)
        return True, result

    async def read(self) -> SnapshotRecord | None:
        fields: dict[bytes, Any] = await _reach(self._redis.hgetall(self.snapshot_key))  # type: ignore[arg-type]
        if not fields:
            return None
        return SnapshotRecord(
            version=int(fields.get(b"version", b"0")),
            blob=fields.get(b"blob", b""),
            signature=fields.get(b"signature") or None,
            meta=fields.get(b"meta", b"{}"),
        )

    @asynccontextmanager
    async def notifications(self) -> AsyncIterator[SnapshotNotifications]:
        async with self._redis.pubsub() as pubsub:
            await _reach(pubsub.subscribe(self.name))
            yield _RedisNotifications(pubsub)


class RedisTrainerLock:
    """:class:`~edgepath.state.backend.TrainerLock` on redis-py's lock (``{ns}:trainer:lock``)."""

    def __init__(self, store: RedisStore, ttl_s: float, poll_s: float) -> None:
        self.name = f"{store.namespace}:trainer:lock"
        self._lock = store.redis.lock(self.name, timeout=ttl_s, sleep=poll_s, thread_local=False)

    async def acquire(self, blocking_timeout_s: float) -> bool:
        return bool(await _reach(self._lock.acquire(blocking=True, blocking_timeout=blocking_timeout_s)))

    async def renew(self) -> None:
        try:
            await _reach(self._lock.reacquire())
        except LockError as exc:
            raise LockLost(str(exc)) from exc

    async def release(self) -> None:
        try:
            await self._lock.release()
        except (LockError, *UNREACHABLE):
            pass


class RedisBackend:
    """:class:`~edgepath.state.backend.StateBackend` on Redis, shared by every replica and the trainer.

    Rate limiters and the quarantine use the store's fail-fast client (:meth:`RedisStore.fail_fast_client`):
    while the store is degraded they answer from process memory at once instead of waiting for a timeout.
    """

    shared = True

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.snapshots = RedisSnapshotChannel(store)
        self.namespace = store.namespace
        self._memory_refused = False  # INFO memory refused once (logged once)

    def trainer_lock(self, ttl_s: float, poll_s: float) -> RedisTrainerLock:
        return RedisTrainerLock(self.store, ttl_s, poll_s)

    def rate_limiter(self, rate_per_s: float, burst: int, scope: str) -> RateLimiter:
        """Shared GCRA buckets under ``{ns}:rl:{scope}:``, per-replica buckets while Redis fails."""
        shared = RedisRateLimiter(
            self.store.fail_fast_client(), rate_per_s, burst, prefix=f"{self.namespace}:rl:{scope}:"
        )
        return FallbackRateLimiter(shared, MemoryRateLimiter(rate_per_s, burst))

    def quarantine(self, initial: Iterable[str]) -> QuarantineSet:
        return RedisQuarantine(self.store.fail_fast_client(), f"{self.namespace}:quarantine", initial)

    def forget_inflight(self) -> None:
        self.store.forget_inflight()

    async def prune_consumers(self, keep: str) -> int:
        return await _reach(self.store.prune_consumers(keep))

    async def flush_outbox(self, timeout_s: float) -> int:
        return await self.store.flush_outbox(timeout_s)

    async def add_exploration_counts(self, increments: Mapping[str, int]) -> dict[str, int] | None:
        """One pipeline on the hash ``{ns}:exploration:decisions``: ``HINCRBY`` per field, then ``HGETALL``.

        ``None`` while the store is degraded (no socket timeout per round) or the pipeline fails; a pipeline that
        timed out may have applied its increments (at most one round counted twice: a slightly faster decay)."""
        if self.store.degraded:
            return None
        key = f"{self.namespace}:exploration:decisions"
        pipe = self.store.redis.pipeline(transaction=False)
        for field, n in increments.items():
            pipe.hincrby(key, field, n)
        pipe.hgetall(key)
        try:
            results: list[Any] = await pipe.execute()
        except UNREACHABLE:
            return None
        return {(f.decode() if isinstance(f, bytes) else str(f)): int(v) for f, v in results[-1].items()}

    async def memory_usage(self) -> StoreMemory | None:
        """``INFO memory``'s ``used_memory`` and ``maxmemory`` (bytes; :class:`~edgepath.state.backend.StoreMemory`).

        None while the store is degraded (no socket timeout per poll), when the query fails (unreachable, or a
        Redis user without ``+info``: logged once at WARNING, the README's ACL rule grants it) or its reply lacks
        the fields (a Redis-compatible server that does not report them)."""
        if self.store.degraded:
            return None
        try:
            info: dict[str, Any] = await self.store.redis.info("memory")
        except UNREACHABLE:
            return None
        except ResponseError as exc:  # NOPERM: an ACL user without +info
            if not self._memory_refused:
                self._memory_refused = True
                log.warning("state store memory not measured: INFO memory refused (%s)", exc)
            return None
        used, limit = info.get("used_memory"), info.get("maxmemory")
        if not isinstance(used, int) or not isinstance(limit, int):
            return None
        return StoreMemory(used_bytes=used, limit_bytes=limit)

    async def close(self) -> None:
        await self.store.close()
