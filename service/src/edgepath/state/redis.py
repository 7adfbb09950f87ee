"""Redis state store: shared decisions and outcome log for many replicas, with a degraded mode.

Selected with ``edgepath serve --store redis://HOST:PORT/DB`` (redis-py asyncio, hiredis parser).

Keys (``ns`` = ``settings.redis_namespace``)
--------------------------------------------
``{ns}:decision:{id}``
    The :class:`~edgepath.state.base.DecisionRecord` as JSON (never pickle), ``SET … PX ttl``.
``{ns}:claimed:{id}``
    Outcome marker, kept twice the decision TTL so a late repeat is still a duplicate.
``{ns}:outcomes``
    Redis Stream: one entry (field ``o``, JSON :class:`OutcomeRecord`) per first outcome of a decision,
    read by the consumer group ``trainers``.
``{ns}:cc:{profile}``
    Congestion edge measurements (issue 20): one hash per application profile, fields
    ``{algorithm}|{metric}|n`` (HINCRBY), ``…|sum`` and ``…|sumsq`` (HINCRBYFLOAT), ``{algorithm}|transfers``,
    ``{algorithm}|seq`` (the value of ``#seq``, a per-hash counter of measurements, at its last measurement) and
    ``#algorithms`` (how many algorithms it holds, at most ``MAX_CC_ALGORITHMS``; a further one evicts every field
    of the one with the smallest ``seq``, an algorithm without one first), all updated by one Lua script per
    measurement (atomic); read with one HGETALL. No expiry: the statistics are the edge's evidence, and the
    eviction already frees the places of algorithms nobody reports any more.
``{ns}:ssmp:{server}``
    SSMP fleet score of a server (issue 4): JSON ``[q_bps, updated_at, {interface: [bandwidth_bps, loss]}]``, TTL
    ``SERVER_SCORE_TTL_S``; :func:`~edgepath.state.base.fleet_score` of the devices' states below, rewritten by each
    device's update. A value a previous release wrote here (its one shared score, the same JSON) reads as the
    fleet score until the first update of that server by this release replaces it.
``{ns}:ssmpdev:{server}``
    The devices' own SSMP states of that server: a hash, field = device id, value = the same JSON; at most
    ``fleet_devices`` fields (:func:`~edgepath.state.base.fleet_members`), TTL ``SERVER_SCORE_TTL_S``. Written and
    aggregated into the fleet score by one Lua script (atomic under concurrent replicas); read with the fleet score
    by one script per Recommend.
``{ns}:decision_log``
    Redis Stream of joined decisions (issue 18; field ``d``, JSON
    :class:`~edgepath.state.base.LoggedDecision`), appended after each NEW claim, trimmed on every
    append to about ``decision_log_max_entries`` (``XADD MAXLEN ~``) and to entries younger than
    ``decision_log_retention_s`` (``XTRIM MINID ~``). ``edgepath log export`` reads it with paged
    ``XRANGE`` (never ``KEYS``), so an export never blocks serving and sees every replica's entries.

Exactly once into the log
    :meth:`RedisStore.claim_outcome` is one Lua script (atomic in Redis): marker exists → DUPLICATE;
    decision missing → UNKNOWN; else ``SET`` the marker and ``XADD`` the outcome → NEW.

At least once to the trainer, exactly once into the model
    :meth:`read_outcomes` uses ``XREADGROUP``: a consumer first re-reads its own pending entries
    (``XREADGROUP … 0``, after a restart), then claims entries that other (dead) consumers left pending
    longer than ``claim_idle_ms`` (``XAUTOCLAIM``), then reads new ones (``>``). Entries are
    acknowledged (``XACK`` + ``XDEL``) in the same Lua script that publishes the model trained on them
    (:mod:`edgepath.training.snapshots`), so a crash either loses the refit *and* keeps the entries
    pending, or keeps both: no outcome is lost and none is counted twice.

A Redis that comes back empty
    A Redis restarted without its data (``--save ''``, no append-only file) has neither the stream nor the
    group. The group is created once per store object, so every stream command of the trainer would then fail
    (``XREADGROUP``, ``XAUTOCLAIM``, ``XPENDING``: ``NOGROUP``; ``XINFO CONSUMERS``: ``no such key``). Each of
    them recreates the group (``XGROUP CREATE … 0 MKSTREAM``: what the replicas appended since is read too),
    logs one warning and is retried once (:meth:`RedisStore._with_group`).

Degraded mode (Redis unreachable)
---------------------------------
The first command that fails with a connection error or times out (``socket_timeout_s``) switches the
store to *degraded*: requests stop touching Redis and a background task pings it every
``reconnect_interval_s``. Meanwhile

* decisions are kept in memory (``outbox_max_decisions``, oldest dropped first) — so outcomes reported
  to this replica can still be joined — and written to Redis (with their remaining TTL) on reconnect;
* the decisions this replica made or read recently are kept in a local TTL cache for joins;
* outcomes are acknowledged only where that promise can be kept (issue 17): with ``outbox_dir`` set
  they are appended to a durable journal (:mod:`edgepath.state.outbox`, fsync'd before the
  acknowledgement, replayed by the next process after a crash) and buffered (``outbox_max_outcomes``);
  without it, or past the bound, or for a decision this replica does not know, the caller gets
  :class:`~edgepath.errors.Unavailable` (HTTP 503 / gRPC UNAVAILABLE, retryable) and nothing is
  acknowledged — an outcome in a process's memory alone would die with the process. Drops are counted in
  ``edgepath_outcomes_dropped{reason=...}`` and logged;
* on reconnect the buffered decisions, then the buffered outcomes go through the same claim script
  (so an outcome also reported to another replica is still counted once); the store leaves degraded
  mode only once the outbox is empty;
* MEC 015 traffic steering: the decision path reads no session (``device_mts_sessions``: the device gets the
  default rule) and drops the device's reported accesses, while the ``/mts/v1`` API's reads and writes raise
  :class:`~edgepath.errors.Unavailable` (HTTP 503): an outage is not "no such session" or "unknown device".

:meth:`ping` is False while degraded: the service reports it on ``/readyz`` and gRPC health
(see :mod:`edgepath.main`). The model keeps serving: the replica decides with its last model.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from edgepath.errors import Unavailable
from edgepath.metrics import Metrics
from edgepath.state.autopipeline import AutoPipeline
from edgepath.state.base import (
    MAX_CC_ALGORITHMS,
    ClaimResult,
    DecisionRecord,
    LoggedDecision,
    MetricSums,
    MtsSession,
    OutcomeRecord,
    OutcomeRow,
    PathEstimate,
    ServerScore,
    ServerScoreView,
    display_url,
)  # PathEstimate, ServerScore, ServerScoreView: issue 4
from edgepath.state.codec import (
    TtlIndex,
    decode_decision,
    decode_logged_decision,
    decode_outcome,
    encode_record,
    outcome_row,
)
from edgepath.state.outbox import DurableOutbox

log = logging.getLogger(__name__)

#: Errors that mean "Redis is unreachable right now" (→ degraded mode), as opposed to a bug.
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)

GROUP = "trainers"

T = TypeVar("T")


class StoreFull(Unavailable, OutOfMemoryError):
    """Redis refused a write for want of memory: ``OOM command not allowed when used memory > 'maxmemory'`` (the
    chart's Redis runs at a ``maxmemory`` with the policy ``noeviction``: README "Deploy"). Nothing was stored, so
    nothing is handed out or acknowledged that was not: the call is answered 503 / ``UNAVAILABLE`` with a retry
    hint (the agent keeps the outcome and reports it again), not a 500 as a fault of the service. Still a
    :class:`redis.exceptions.ResponseError` for the code that handles reply errors (the auto-pipeline hands it to
    its own caller only)."""

    def __init__(self, reply: str) -> None:
        super().__init__("state store full (its memory bound): nothing was stored; retry later")
        self.reply = reply


class _Pipeline(Pipeline):
    """redis-py's pipeline, its replies' out-of-memory errors raised as :class:`StoreFull` (see :class:`_Client`). In a
    ``MULTI``/``EXEC`` transaction (MEC 015 session deletes) a full Redis refuses the queued command and aborts the
    ``EXEC`` (``EXECABORT``); redis-py raises the queued command's error, so the transaction is answered 503 too."""

    async def parse_response(self, connection: Any, command_name: str | bytes, **options: Any) -> Any:
        try:
            return await super().parse_response(connection, command_name, **options)
        except OutOfMemoryError as exc:
            raise StoreFull(str(exc)) from exc


class _Client(Redis):
    """redis-py's client, its replies' out-of-memory errors raised as :class:`StoreFull`: every command of the
    store's clients, of the auto-pipeline (which parses its replies with this method) and of its pipelines
    (:class:`_Pipeline`: MEC 015 session deletes, decision flushes) is read here."""

    async def parse_response(self, connection: Any, command_name: str | bytes, **options: Any) -> Any:
        try:
            return await super().parse_response(connection, command_name, **options)
        except OutOfMemoryError as exc:
            raise StoreFull(str(exc)) from exc

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> _Pipeline:
        """A :class:`_Pipeline` on this client's pool (redis-py's ``Redis.pipeline``, the same arguments)."""
        return _Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


def group_missing(exc: ResponseError) -> bool:
    """True when ``exc`` says the outcome stream or its consumer group does not exist: ``NOGROUP …`` (``XREADGROUP``,
    ``XAUTOCLAIM``, ``XPENDING``, ``XINFO`` on a stream without the group) or ``no such key`` (``XINFO CONSUMERS`` on a
    missing stream), as a Redis that restarted without its data answers."""
    text = str(exc)
    return text.startswith("NOGROUP") or text.lower().startswith("no such key")


# KEYS: decision, marker, stream, decision log; ARGV: marker ttl (ms), outcome JSON, and optionally the decision-log
# entry's JSON, the log's approximate maximum length and its approximate minimum id (the retention cut-off): a NEW
# outcome's decision-log entry goes in the same round trip (append_decision_log's XADD MAXLEN ~ and XTRIM MINID ~).
_CLAIM_LUA = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 'duplicate' end
if redis.call('EXISTS', KEYS[1]) == 0 then return 'unknown' end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
redis.call('XADD', KEYS[3], '*', 'o', ARGV[2])
if #ARGV >= 5 then
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[4], '*', 'd', ARGV[3])
  redis.call('XTRIM', KEYS[4], 'MINID', '~', ARGV[5])
end
return 'new'
"""

# KEYS: the profile's statistics hash; ARGV: algorithm, max algorithms, then metric, value, value² triples.
# A new algorithm takes a place while the hash holds fewer than the maximum (counted in '#algorithms'); else it
# takes the place of the least recently reported one (smallest '|seq'; none, written by a release before seqs: 0,
# ties by name), whose fields are deleted. Algorithm names have no '|' (the wire's pattern).
_CC_RECORD_LUA = """
local algo = ARGV[1]
local seq = redis.call('HINCRBY', KEYS[1], '#seq', 1)
if redis.call('HEXISTS', KEYS[1], algo .. '|transfers') == 0 then
  if tonumber(redis.call('HGET', KEYS[1], '#algorithms') or '0') >= tonumber(ARGV[2]) then
    local all = redis.call('HGETALL', KEYS[1])
    local last = {}
    for i = 1, #all, 2 do
      local name, what = string.match(all[i], '^([^|]+)|([^|]+)$')
      if what == 'transfers' then
        last[name] = last[name] or 0
      elseif what == 'seq' then
        last[name] = tonumber(all[i + 1])
      end
    end
    local victim, oldest = nil, nil
    for name, at in pairs(last) do
      if oldest == nil or at < oldest or (at == oldest and name < victim) then victim, oldest = name, at end
    end
    if victim == nil then return 0 end
    local prefix, gone = victim .. '|', {}
    for i = 1, #all, 2 do
      if string.sub(all[i], 1, #prefix) == prefix then gone[#gone + 1] = all[i] end
    end
    redis.call('HDEL', KEYS[1], unpack(gone))
  else
    redis.call('HINCRBY', KEYS[1], '#algorithms', 1)
  end
end
redis.call('HSET', KEYS[1], algo .. '|seq', seq)
redis.call('HINCRBY', KEYS[1], algo .. '|transfers', 1)
for i = 3, #ARGV, 3 do
  local f = algo .. '|' .. ARGV[i] .. '|'
  redis.call('HINCRBY', KEYS[1], f .. 'n', 1)
  redis.call('HINCRBYFLOAT', KEYS[1], f .. 'sum', ARGV[i + 1])
  redis.call('HINCRBYFLOAT', KEYS[1], f .. 'sumsq', ARGV[i + 2])
end
return 1
"""

# A gateway's batch in one command each (issue 16, RecommendBatch): redis-py's per-command CPU (building and parsing
# one SET and one HVALS per item, ~35 µs each even pipelined) held the Redis batch figure.
# KEYS: the decisions' keys; ARGV: their records' JSON, in KEYS' order, then the TTL (ms).
_PUT_DECISIONS_LUA = """
local px = ARGV[#ARGV]
for i = 1, #KEYS do redis.call('SET', KEYS[i], ARGV[i], 'PX', px) end
return #KEYS
"""

# KEYS: the devices' MEC 015 session hashes; the reply holds each one's HVALS, in KEYS' order.
_HVALS_EACH_LUA = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HVALS', KEYS[i]) end
return out
"""

# MEC 015: write a session where the API validated it, atomically with that check (two replicas each checking a
# device's 63 sessions and each writing made 65 of MAX_DEVICE_SESSIONS). KEYS: the session hash, the device's hash,
# the hash of the device the session had (the same key when none or the same device); ARGV: session id, its JSON,
# max sessions ('' none), then the SHA-1 (hex) of the device's other sessions the caller validated against ('' no
# check): "<id>\n<info>\n" of each, by id (RedisStore._sessions_digest), then the device the caller read the session
# under ('' none: new). Nothing written and 0 when the session is new and the hash holds max sessions, when the
# device's other sessions differ, or when the session is under another device than the caller read (moved meanwhile:
# HDEL from the hash the caller named would leave it in the other device's); else 1.
_PUT_MTS_SESSION_LUA = """
local id = ARGV[1]
local old = redis.call('HGET', KEYS[1], id)
local was = ''
if old then was = cjson.decode(old).device_id end
if was ~= ARGV[5] then return 0 end
if ARGV[3] ~= '' and redis.call('HEXISTS', KEYS[1], id) == 0
    and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
if ARGV[4] ~= '' then
  local flat = redis.call('HGETALL', KEYS[2])
  local others = {}
  for i = 1, #flat, 2 do
    if flat[i] ~= id then others[#others + 1] = {flat[i], cjson.decode(flat[i + 1]).info} end
  end
  table.sort(others, function(a, b) return a[1] < b[1] end)
  local parts = {}
  for i, other in ipairs(others) do parts[i] = other[1] .. '\\n' .. other[2] .. '\\n' end
  if redis.sha1hex(table.concat(parts)) ~= ARGV[4] then return 0 end
end
if KEYS[3] ~= KEYS[2] then redis.call('HDEL', KEYS[3], id) end
redis.call('HSET', KEYS[1], id, ARGV[2])
redis.call('HSET', KEYS[2], id, ARGV[2])
return 1
"""

# MEC 015: delete a session from the session hash and its device's hash, if it is still under the device the caller
# read it under (another replica may have moved it meanwhile: the HDEL would miss the device hash it is in now).
# KEYS: the session hash, that device's hash; ARGV: session id, that device id. 1 deleted, 0 no such session,
# -1 under another device now (nothing deleted: read again).
_DELETE_MTS_SESSION_LUA = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then return 0 end
if cjson.decode(old).device_id ~= ARGV[2] then return -1 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""

# SSMP (issue 4): one device's view of its candidate servers. KEYS: the servers' fleet keys, then their device
# hashes (same order); ARGV: the device id. The reply holds, per server, the fleet value then the device's (nil
# replies as false: no holes in the array).
_SSMP_VIEWS_LUA = """
local n = #KEYS / 2
local out = {}
for i = 1, n do
  out[2 * i - 1] = redis.call('GET', KEYS[i])
  out[2 * i] = redis.call('HGET', KEYS[n + i], ARGV[1])
end
return out
"""

# SSMP (issue 4): store one device's own state of a server and recompute the server's fleet score, atomically.
# KEYS: fleet key, device hash; ARGV: device id, its state's JSON, its updated_at, stale_age_s, max devices, TTL (s).
# What edgepath.state.base.fleet_members and fleet_score do in Python (the in-process store), step for step: drop
# states older than stale_age_s at the writer's time and, beyond max devices, the least recently updated (ties by
# device id; the writer's own always kept); the fleet's Q is the median of the kept states' Q, its updated_at the
# newest, and per interface B and p the median over the states that have one, when more than half have one. Numbers
# are written with 17 significant digits (exact doubles; cjson.encode keeps 14).
_SSMP_RECORD_LUA = """
local writer = ARGV[1]
local now = tonumber(ARGV[3])
local stale = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
redis.call('HSET', KEYS[2], writer, ARGV[2])
local flat = redis.call('HGETALL', KEYS[2])
local mine = nil
local others = {}
local drop = {}
for i = 1, #flat, 2 do
  local ok, s = pcall(cjson.decode, flat[i + 1])
  if not ok or type(s) ~= 'table' or type(s[1]) ~= 'number' or type(s[2]) ~= 'number' then
    drop[#drop + 1] = flat[i]
  else
    local state = {id = flat[i], q = s[1], at = s[2], paths = s[3]}
    if flat[i] == writer then
      mine = state
    elseif now - state.at > stale then
      drop[#drop + 1] = flat[i]
    else
      others[#others + 1] = state
    end
  end
end
table.sort(others, function(a, b)
  if a.at ~= b.at then return a.at > b.at end
  return a.id < b.id
end)
local kept = {mine}
for i, state in ipairs(others) do
  if i <= cap - 1 then kept[#kept + 1] = state else drop[#drop + 1] = state.id end
end
if #drop > 0 then redis.call('HDEL', KEYS[2], unpack(drop)) end
local function median(t)
  table.sort(t)
  local n = #t
  if n % 2 == 1 then return t[(n + 1) / 2] end
  return (t[n / 2] + t[n / 2 + 1]) / 2
end
local function num(x) return string.format('%.17g', x) end
local qs = {}
local newest = mine.at
local bs, ps, names = {}, {}, {}
for _, state in ipairs(kept) do
  qs[#qs + 1] = state.q
  if state.at > newest then newest = state.at end
  if type(state.paths) == 'table' then
    for name, est in pairs(state.paths) do
      if type(est) == 'table' then
        if not bs[name] then bs[name] = {}; ps[name] = {}; names[#names + 1] = name end
        if type(est[1]) == 'number' then table.insert(bs[name], est[1]) end
        if type(est[2]) == 'number' then table.insert(ps[name], est[2]) end
      end
    end
  end
end
table.sort(names)
local half = #kept / 2
local parts = {}
for _, name in ipairs(names) do
  local b, p = 'null', 'null'
  if #bs[name] > half then b = num(median(bs[name])) end
  if #ps[name] > half then p = num(median(ps[name])) end
  if b ~= 'null' or p ~= 'null' then parts[#parts + 1] = cjson.encode(name) .. ':[' .. b .. ',' .. p .. ']' end
end
local fleet = '[' .. num(median(qs)) .. ',' .. num(newest) .. ',{' .. table.concat(parts, ',') .. '}]'
redis.call('SET', KEYS[1], fleet, 'EX', ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[6])
return #kept
"""

#: Longest XREADGROUP block (ms); the reader connection's timeout is this plus ``socket_timeout_s``.
MAX_BLOCK_MS = 5000


class RedisStore:
    """:class:`~edgepath.state.base.StateStore` on Redis, shared by every replica and the trainer.

    Parameters
    ----------
    url:
        ``redis://HOST:PORT/DB`` (also ``rediss://`` and ``unix://``).
    namespace:
        Prefix of every key.
    decision_ttl_s:
        Decision lifetime, s (markers live twice as long).
    socket_timeout_s:
        Command and connect timeout, s; a command slower than this switches to degraded mode.
    outbox_max_outcomes, outbox_max_decisions:
        Bounds of the in-memory buffers used while Redis is unreachable.
    claim_idle_ms:
        Pending outcomes idle longer than this are reclaimed from other consumers (``XAUTOCLAIM``).
    metrics:
        Where drops and the degraded state are counted (optional).
    reconnect_interval_s:
        Period of the reconnect probe while degraded, s.
    decision_log_max_entries, decision_log_retention_s:
        Retention of the decision log stream (approximate entry count; age, s).
    outbox_dir:
        Directory of the durable degraded-mode journal (:mod:`edgepath.state.outbox`); None: outcomes are
        refused (retryable) while Redis is unreachable instead of being acknowledged from memory.
    pipeline_hold_iterations:
        Event-loop iterations the auto-pipeline holds a queue for more commands
        (:class:`~edgepath.state.autopipeline.AutoPipeline`); 0 sends it at the next iteration.
    pipeline_idle_hold_iterations:
        The hold of a queue that starts while no other command awaits its reply (at most
        ``pipeline_hold_iterations``; None: the same hold).
    max_connections:
        Connections each of the store's two clients (commands; blocking stream reads) may open to Redis, ≥ 1. A
        command that finds them all busy waits for one up to ``socket_timeout_s`` (redis-py's
        ``BlockingConnectionPool``) instead of failing at once: redis-py's default pool raises "Too many
        connections" at its 101st concurrent command, which a burst of MEC 015 reads turned into degraded mode.

    Raises
    ------
    ValueError
        For ``max_connections`` < 1.
    """

    overlaps_io = True  # every call is a round trip (StateStore.overlaps_io)

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "edgepath",
        decision_ttl_s: float = 3600.0,
        socket_timeout_s: float = 1.0,
        outbox_max_outcomes: int = 10_000,
        outbox_max_decisions: int = 20_000,
        claim_idle_ms: int = 30_000,
        metrics: Metrics | None = None,
        reconnect_interval_s: float = 0.2,
        decision_log_max_entries: int = 100_000,
        decision_log_retention_s: float = 7 * 24 * 3600.0,
        outbox_dir: str | None = None,
        pipeline_hold_iterations: int = 0,
        pipeline_idle_hold_iterations: int | None = None,
        max_connections: int = 100,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be ≥ 1, got {max_connections}")
        retry = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
        common: dict[str, Any] = dict(
            socket_connect_timeout=socket_timeout_s,
            retry=retry,
            max_connections=max_connections,
            timeout=socket_timeout_s,  # the wait for a free connection, then ConnectionError (degraded mode)
        )
        self.url = display_url(url)  # for logs: a password in the URL (the chart composes one) never reaches them
        self.redis: Redis = _Client.from_pool(
            BlockingConnectionPool.from_url(url, socket_timeout=socket_timeout_s, **common)
        )
        # Blocking stream reads need a longer read timeout than ordinary commands.
        self._reader: Redis = _Client.from_pool(
            BlockingConnectionPool.from_url(url, socket_timeout=socket_timeout_s + MAX_BLOCK_MS / 1000, **common)
        )
        self.namespace = namespace
        self.decision_ttl_s = decision_ttl_s
        self.outbox_max_outcomes = outbox_max_outcomes
        self.outbox_max_decisions = outbox_max_decisions
        self.claim_idle_ms = claim_idle_ms
        self.metrics = metrics
        self.reconnect_interval_s = reconnect_interval_s
        self.stream = f"{namespace}:outcomes"
        self.decision_log_stream = f"{namespace}:decision_log"
        self.decision_log_max_entries = decision_log_max_entries
        self.decision_log_retention_s = decision_log_retention_s
        # The per-request commands go through one auto-pipeline: what the loop's concurrent requests issue within
        # ``pipeline_hold_iterations`` iterations is one round trip (issue 16; :mod:`edgepath.state.autopipeline`).
        self._auto = AutoPipeline(
            self.redis,
            hold_iterations=pipeline_hold_iterations,
            on_send=None if metrics is None else _count(metrics),
            idle_hold_iterations=pipeline_idle_hold_iterations,
        )
        self._claim = self._auto.register_script(_CLAIM_LUA)
        self._cc_record = self._auto.register_script(_CC_RECORD_LUA)  # issue 20
        self._put_decisions = self._auto.register_script(_PUT_DECISIONS_LUA)
        self._hvals_each = self._auto.register_script(_HVALS_EACH_LUA)
        self._put_mts = self._auto.register_script(_PUT_MTS_SESSION_LUA)
        self._delete_mts = self._auto.register_script(_DELETE_MTS_SESSION_LUA)
        self._ssmp_views = self._auto.register_script(_SSMP_VIEWS_LUA)  # issue 4
        self._ssmp_record = self._auto.register_script(_SSMP_RECORD_LUA)

        cache_size = max(1, outbox_max_decisions)
        self._recent = TtlIndex(cache_size, decision_ttl_s)  # decision id -> its record's JSON (encode_record)
        self._claimed_recent = TtlIndex(cache_size, decision_ttl_s * 2)  # decision id -> True
        self._unsynced: collections.OrderedDict[str, DecisionRecord] = collections.OrderedDict()
        self._outbox: collections.deque[OutcomeRecord] = collections.deque()
        self._outbox_ids: set[str] = set()
        self._degraded = False
        #: While degraded: Redis was not found unreachable, the buffers hold a dead process's journal replayed
        #: (:meth:`_replay`) until the reconnect task flushes them (:meth:`unready_reason`).
        self._replaying = False
        self._full = False  # while degraded: the last flush met a full Redis
        self._reconnect_task: asyncio.Task[None] | None = None
        self.flushed_outcomes = 0

        self._journal: DurableOutbox | None = None
        if outbox_dir:
            self._journal = DurableOutbox(outbox_dir)
            self._replay(self._journal.adopt_orphans())

        self._group_ready = False
        self.group_recreations = 0  # consumer groups recreated after Redis came back empty
        self._inflight: set[str] = set()
        self._pending_cursor: dict[str, str] = {}
        self._autoclaim_cursor = "0-0"

    # ----------------------------------------------------------------- keys
    def decision_key(self, decision_id: str) -> str:
        return f"{self.namespace}:decision:{decision_id}"

    def marker_key(self, decision_id: str) -> str:
        return f"{self.namespace}:claimed:{decision_id}"

    # ------------------------------------------------------------ degraded
    @property
    def degraded(self) -> bool:
        """True while Redis is unreachable and the store works from memory."""
        return self._degraded

    def status(self) -> dict[str, Any]:
        """Degraded flag and buffer sizes (for readiness bodies and logs)."""
        return {
            "degraded": self._degraded,
            "outbox_outcomes": len(self._outbox),
            "unsynced_decisions": len(self._unsynced),
        }

    def _replay(self, records: Sequence[DecisionRecord | OutcomeRecord]) -> None:
        """Journal records of a dead process: buffered as if made here while degraded, flushed on reconnect."""
        for record in records:
            if isinstance(record, DecisionRecord):
                self._recent[record.decision_id] = encode_record(record)
                self._keep_unsynced(record)
            elif record.decision_id not in self._outbox_ids:
                self._outbox.append(record)
                self._outbox_ids.add(record.decision_id)
                self._claimed_recent[record.decision_id] = True
        if records and not self._degraded:
            # Flushed by the reconnect task, started from the first call on the event loop (_ensure_reconnecting).
            self._degraded = True
            self._replaying = True
            if self.metrics is not None:
                self.metrics.store_degraded.set(1)
                self.metrics.outbox_outcomes.set(len(self._outbox))

    def _ensure_reconnecting(self) -> None:
        if self._degraded and (self._reconnect_task is None or self._reconnect_task.done()):
            self._reconnect_task = asyncio.create_task(self._reconnect(), name="redis-reconnect")

    def unready_reason(self) -> str:
        """Why :meth:`ping` said False: Redis unreachable, or (Redis not found unreachable since) a dead process's
        journal being replayed, or a flush that met a full Redis; with what is still buffered. Before, a replica
        replaying an adopted journal into a reachable Redis was logged ``state store unreachable``."""
        held = f"{len(self._outbox)} outcomes and {len(self._unsynced)} decisions buffered"
        if self._full:
            return f"state store full (its memory bound); {held}"
        if self._replaying:
            return f"replaying journaled records of a dead process into the state store: {held}"
        return "state store unreachable"

    def _enter_degraded(self, exc: BaseException) -> None:
        self._replaying = False  # Redis itself is away
        if self._degraded:
            self._ensure_reconnecting()
            return
        self._degraded = True
        log.warning("state store %s unreachable (%s): degraded mode, deciding with the last model", self.url, exc)
        if self.metrics is not None:
            self.metrics.store_degraded.set(1)
        self._ensure_reconnecting()

    async def _reconnect(self) -> None:
        """Probe Redis every ``reconnect_interval_s`` and flush the buffers into it; leave degraded mode once they
        are empty. A Redis back at its ``maxmemory`` (:class:`StoreFull`, expected in an outage's aftermath) is
        retried at the same pace with the buffers kept: one warning when the flush first meets it, no line per
        retry, and the INFO line of the flush that succeeds."""
        full = False  # the flush met a full Redis (warned once)
        while True:
            # Pacing of a reconnect probe (not a test wait): one PING per interval while Redis is away.
            await asyncio.sleep(self.reconnect_interval_s)
            try:
                await self.redis.ping()
                await self._flush()
            except UNREACHABLE:
                self._replaying = self._full = False
                continue
            except StoreFull:
                self._full = True
                if not full:
                    full = True
                    log.warning(
                        "state store %s full (its memory bound): %d outcomes and %d decisions stay buffered; "
                        "retrying every %g s",
                        self.url,
                        len(self._outbox),
                        len(self._unsynced),
                        self.reconnect_interval_s,
                    )
                continue
            except Exception:  # a bug must not leave the replica degraded forever without a trace
                log.exception("flushing the outbox failed; retrying")
                continue
            self._degraded = self._replaying = self._full = False
            if self._journal is not None:
                self._journal.truncate()  # everything it held is in Redis now (no await since _flush returned)
            if self.metrics is not None:
                self.metrics.store_degraded.set(0)
                self.metrics.outbox_outcomes.set(0)
            log.info(
                "state store %s reachable again; outbox flushed (%d outcomes so far)", self.url, self.flushed_outcomes
            )
            return

    async def _flush(self) -> None:
        """Write buffered decisions (remaining TTL), then claim buffered outcomes, oldest first.

        Repeats until both buffers are empty: decisions and outcomes that arrive (degraded) during the
        flush are flushed too before the store leaves degraded mode.
        """
        if self._journal is not None:
            self._replay(self._journal.adopt_orphans())  # journals of replicas that died on this node
        while self._unsynced or self._outbox:
            await self._flush_once()

    async def _flush_once(self) -> None:
        await self._flush_decisions()
        while self._outbox:
            if self._unsynced:
                # A decision made (degraded) while this loop awaited Redis, whose outcome may be queued
                # behind: its record must be in Redis before its outcome is claimed, or the claim says unknown.
                await self._flush_decisions()
            outcome = self._outbox[0]
            result = await self._claim_in_redis(outcome)
            if result is ClaimResult.UNKNOWN and (known := self._recent_decision(outcome.decision_id)) is not None:
                self._unsynced[known.decision_id] = known  # e.g. lost by a Redis restart without its data
                await self._flush_decisions()
                result = await self._claim_in_redis(outcome)
            self._outbox.popleft()
            self._outbox_ids.discard(outcome.decision_id)
            if self.metrics is not None:
                self.metrics.outbox_outcomes.set(len(self._outbox))
            if result is ClaimResult.NEW:
                self.flushed_outcomes += 1
            elif result is ClaimResult.UNKNOWN:
                self._drop("flush_unknown_decision", outcome.decision_id)
            # DUPLICATE: already in the log (reported to another replica, or our timed-out claim ran): fine.

    async def _flush_decisions(self) -> None:
        while self._unsynced:
            batch = list(self._unsynced.items())[:500]
            pipe = self.redis.pipeline(transaction=False)
            now = time.time()
            for decision_id, record in batch:
                remaining_ms = int((record.decided_at + self.decision_ttl_s - now) * 1000)
                if remaining_ms > 0:
                    pipe.set(self.decision_key(decision_id), encode_record(record), px=remaining_ms)
            await pipe.execute()
            for decision_id, _ in batch:
                self._unsynced.pop(decision_id, None)

    def _drop(self, reason: str, decision_id: str) -> None:
        log.warning("outcome of decision_id=%s dropped: %s", decision_id, reason)
        if self.metrics is not None:
            self.metrics.outcomes_dropped.labels(reason).inc()

    def _keep_unsynced(self, record: DecisionRecord) -> None:
        if self.outbox_max_decisions == 0:
            self._drop("decision_outbox_full", record.decision_id)
            return
        while len(self._unsynced) >= self.outbox_max_decisions:
            old_id, _ = self._unsynced.popitem(last=False)
            self._drop("decision_outbox_full", old_id)
        self._unsynced[record.decision_id] = record

    # ----------------------------------------------------------- decisions
    def _recent_decision(self, decision_id: str) -> DecisionRecord | None:
        """A decision this replica made or read within the decision TTL (degraded-mode joins), else None."""
        raw = self._recent.get(decision_id)
        return None if raw is None else decode_decision(raw)

    async def put_decision(self, record: DecisionRecord, ttl_s: float) -> None:
        raw = encode_record(record)
        self._recent[record.decision_id] = raw
        self._ensure_reconnecting()
        if not self._degraded:
            try:
                await self._auto.execute(
                    "set", self.decision_key(record.decision_id), raw, px=max(1, int(ttl_s * 1000))
                )
                return
            except UNREACHABLE as exc:
                self._enter_degraded(exc)
        if self._journal is not None:
            self._journal.append_decision(record)
        self._keep_unsynced(record)

    async def put_decisions(self, records: Sequence[DecisionRecord], ttl_s: float) -> None:
        """:meth:`put_decision` of every record in one script call (one command, one reply; through the auto-pipeline);
        unreachable: all kept unsynced."""
        raws = [encode_record(record) for record in records]
        for record, raw in zip(records, raws, strict=True):
            self._recent[record.decision_id] = raw
        self._ensure_reconnecting()
        if not records:
            return
        if not self._degraded:
            try:
                keys = [self.decision_key(record.decision_id) for record in records]
                await self._put_decisions(keys=keys, args=[*raws, max(1, int(ttl_s * 1000))])
                return
            except UNREACHABLE as exc:
                self._enter_degraded(exc)
        for record in records:
            if self._journal is not None:
                self._journal.append_decision(record)
            self._keep_unsynced(record)

    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        if not self._degraded:
            try:
                raw: Any = await self._auto.execute("get", self.decision_key(decision_id))
            except UNREACHABLE as exc:
                self._enter_degraded(exc)
            else:
                if raw is not None:
                    self._recent[decision_id] = raw  # joinable here even if Redis goes away next
                    return decode_decision(raw)
                return self._recent_decision(decision_id)
        cached = self._recent_decision(decision_id)
        if cached is None:
            # Degraded: maybe another replica's decision, only in Redis. "Unknown" would make the device drop
            # its outcome for good; this is retryable (HTTP 503 + Retry-After / gRPC UNAVAILABLE).
            raise Unavailable("state store unreachable and the decision is not known to this replica; retry later")
        return cached

    # ------------------------------------------------------------ outcomes
    async def _claim_in_redis(self, outcome: OutcomeRecord, log_entry: LoggedDecision | None = None) -> ClaimResult:
        marker_ttl_ms = int(self.decision_ttl_s * 2000)
        keys = [
            self.decision_key(outcome.decision_id),
            self.marker_key(outcome.decision_id),
            self.stream,
            self.decision_log_stream,
        ]
        args: list[Any] = [marker_ttl_ms, encode_record(outcome)]
        if log_entry is not None:
            cutoff_ms = max(0, int((time.time() - self.decision_log_retention_s) * 1000))
            args += [encode_record(log_entry), self.decision_log_max_entries, f"{cutoff_ms}-0"]
        raw = await self._claim(keys=keys, args=args)
        return ClaimResult(raw.decode() if isinstance(raw, bytes) else raw)

    async def claim_outcome(self, outcome: OutcomeRecord, log_entry: LoggedDecision | None = None) -> ClaimResult:
        decision_id = outcome.decision_id
        self._ensure_reconnecting()
        if not self._degraded:
            try:
                result = await self._claim_in_redis(outcome, log_entry)
            except UNREACHABLE as exc:
                self._enter_degraded(exc)
            else:
                if result is ClaimResult.NEW:
                    self._claimed_recent[decision_id] = True
                return result
        # Degraded: join locally and buffer until Redis returns.
        if decision_id in self._outbox_ids or decision_id in self._claimed_recent:
            return ClaimResult.DUPLICATE
        if decision_id not in self._recent:
            # Possibly made by another replica and only in Redis: not known to be unknown. Retryable.
            raise Unavailable("state store unreachable and the decision is not known to this replica; retry later")
        if self._journal is None:
            raise Unavailable("state store unreachable: outcomes are acknowledged once stored; retry later")
        if len(self._outbox) >= self.outbox_max_outcomes:
            self._drop("outbox_full", decision_id)
            raise Unavailable("state store unreachable and the outcome buffer is full; retry later")
        self._journal.append_outcome(outcome)  # fsync'd: survives a crash of this process and of the node
        self._outbox.append(outcome)
        self._outbox_ids.add(decision_id)
        self._claimed_recent[decision_id] = True
        if self.metrics is not None:
            self.metrics.outbox_outcomes.set(len(self._outbox))
        if log_entry is not None:
            self._drop_log_entry("degraded")  # as append_decision_log while degraded
        return ClaimResult.NEW

    async def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            await self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    def _group_lost(self, exc: ResponseError) -> None:
        """Redis has no outcome stream or no consumer group (it came back empty): forget what this process knew of
        them (the group, its pending cursors, the entries in flight: none of them exists any more)."""
        log.warning(
            "outcome stream %s has no consumer group %s (%s): the state store came back empty (restarted without "
            "its data?); recreating the group",
            self.stream,
            GROUP,
            exc,
        )
        self.group_recreations += 1
        self._group_ready = False
        self.forget_inflight()

    async def _with_group(self, command: Callable[[], Awaitable[T]]) -> T:
        """``await command()`` (stream commands on the group) with the group in place: created first if this store
        has not done so, and recreated, then ``command`` retried once, when Redis answers that the stream or the group
        does not exist (:func:`group_missing`).

        Raises
        ------
        redis.exceptions.ResponseError
            Another error of a command, or the group missing again on the retry.
        redis.exceptions.ConnectionError, redis.exceptions.TimeoutError
            When Redis is unreachable.
        """
        await self._ensure_group()
        try:
            return await command()
        except ResponseError as exc:
            if not group_missing(exc):
                raise
            self._group_lost(exc)
        await self._ensure_group()
        return await command()

    async def _decode_entries(self, entries: list[Any]) -> list[tuple[str, OutcomeRecord]]:
        out: list[tuple[str, OutcomeRecord]] = []
        poison: list[str] = []
        for entry_id_raw, fields in entries:
            entry_id = entry_id_raw.decode() if isinstance(entry_id_raw, bytes) else str(entry_id_raw)
            if entry_id in self._inflight or not fields:
                continue  # already held by this process, or deleted meanwhile
            try:
                record = decode_outcome(fields[b"o"])
            except (KeyError, ValueError, TypeError) as exc:
                log.error("undecodable outcome-log entry %s dropped: %s", entry_id, exc)
                if self.metrics is not None:
                    self.metrics.outcomes_dropped.labels("undecodable").inc()
                poison.append(entry_id)
                continue
            self._inflight.add(entry_id)
            out.append((entry_id, record))
        if poison:
            await self.ack_outcomes(poison)
        return out

    async def read_outcomes(self, consumer: str, count: int, block_ms: int) -> list[tuple[str, OutcomeRecord]]:
        """Own pending entries first (after a restart), then reclaimed ones (XAUTOCLAIM), then new ones.

        A Redis that came back empty gets its consumer group again (one warning) and is read from its first entry.

        Raises
        ------
        redis.exceptions.ConnectionError, redis.exceptions.TimeoutError
            When Redis is unreachable (the trainer retries; nothing is acknowledged).
        redis.exceptions.ResponseError
            Any other error reply (the group missing again right after it was recreated included).
        """
        return await self._with_group(lambda: self._read_outcomes(consumer, count, block_ms))

    async def _read_outcomes(self, consumer: str, count: int, block_ms: int) -> list[tuple[str, OutcomeRecord]]:
        cursor = self._pending_cursor.get(consumer, "0")
        if cursor != "done":
            resp: Any = await self._reader.xreadgroup(GROUP, consumer, {self.stream: cursor}, count=count)
            entries = resp[0][1] if resp else []
            if entries:
                last = entries[-1][0]
                self._pending_cursor[consumer] = last.decode() if isinstance(last, bytes) else str(last)
                got = await self._decode_entries(entries)
                if got:
                    return got
            else:
                self._pending_cursor[consumer] = "done"
        next_id, claimed, *_ = await self.redis.xautoclaim(
            self.stream,
            GROUP,
            consumer,
            min_idle_time=self.claim_idle_ms,
            start_id=self._autoclaim_cursor,
            count=count,
        )
        self._autoclaim_cursor = next_id.decode() if isinstance(next_id, bytes) else str(next_id)
        got = await self._decode_entries(claimed)
        if got:
            log.info("reclaimed %d pending outcomes from other consumers", len(got))
            return got
        block = min(block_ms, MAX_BLOCK_MS) if block_ms > 0 else None
        resp = await self._reader.xreadgroup(GROUP, consumer, {self.stream: ">"}, count=count, block=block)  # type: ignore[assignment]
        return await self._decode_entries(resp[0][1]) if resp else []

    async def read_outcome_rows(
        self, consumer: str, count: int, block_ms: int, min_count: int = 1
    ) -> list[tuple[str, OutcomeRow]]:
        """:meth:`read_outcomes` as rows (``StateStore.read_outcome_rows``). It returns on the first entry whatever
        ``min_count`` says: ``XREADGROUP BLOCK`` has no minimum, and this store's trainer runs in its own process,
        where a wake-up per outcome takes nothing from serving. Raises as :meth:`read_outcomes`."""
        return [(i, outcome_row(o)) for i, o in await self.read_outcomes(consumer, count, block_ms)]

    def forget_inflight(self) -> None:
        """Forget what this process holds unacknowledged: the next reads start from its pending list again."""
        self._inflight.clear()
        self._pending_cursor.clear()
        self._autoclaim_cursor = "0-0"

    def acked(self, entry_ids: list[str]) -> None:
        """Entries acknowledged elsewhere (the snapshot publication script) are no longer in flight."""
        self._inflight.difference_update(entry_ids)

    async def ack_outcomes(self, entry_ids: list[str]) -> None:
        """``XACK`` and ``XDEL`` the entries atomically (MULTI/EXEC)."""
        if not entry_ids:
            return
        pipe = self.redis.pipeline(transaction=True)
        pipe.xack(self.stream, GROUP, *entry_ids)
        pipe.xdel(self.stream, *entry_ids)
        await pipe.execute()
        self.acked(entry_ids)

    async def prune_consumers(self, keep: str) -> int:
        """Delete consumers (other than ``keep``) with nothing pending, idle longer than ``claim_idle_ms``.

        Dead trainers leave their names in the group; their pending entries are reclaimed first
        (``XAUTOCLAIM``), after which this removes the empty names. Returns how many were deleted. A Redis that
        came back empty gets its consumer group again (one warning; nothing to prune then).

        Raises
        ------
        redis.exceptions.ConnectionError, redis.exceptions.TimeoutError
            When Redis is unreachable.
        redis.exceptions.ResponseError
            Any other error reply.
        """
        return await self._with_group(lambda: self._prune_consumers(keep))

    async def _prune_consumers(self, keep: str) -> int:
        deleted = 0
        for info in await self.redis.xinfo_consumers(self.stream, GROUP):
            name = info["name"].decode() if isinstance(info["name"], bytes) else str(info["name"])
            if name != keep and int(info["pending"]) == 0 and int(info["idle"]) > self.claim_idle_ms:
                await self.redis.xgroup_delconsumer(self.stream, GROUP, name)
                deleted += 1
        return deleted

    async def pending_count(self) -> int:
        """Outcomes delivered to some consumer and not yet acknowledged (0 after Redis came back empty: the group is
        recreated). Raises as :meth:`prune_consumers`."""
        info: Any = await self._with_group(lambda: self.redis.xpending(self.stream, GROUP))
        return int(info["pending"])

    async def stream_length(self) -> int:
        return int(await self.redis.xlen(self.stream))

    # --- decision log (issue 18; semantics in StateStore) ---
    async def append_decision_log(self, entry: LoggedDecision) -> None:
        """``XADD MAXLEN ~`` plus ``XTRIM MINID ~`` in one pipeline; dropped (and counted) while degraded."""
        if self._degraded:
            self._drop_log_entry("degraded")
            return
        cutoff_ms = max(0, int((time.time() - self.decision_log_retention_s) * 1000))
        try:
            await asyncio.gather(
                self._auto.execute(
                    "xadd",
                    self.decision_log_stream,
                    {"d": encode_record(entry)},
                    maxlen=self.decision_log_max_entries,
                    approximate=True,
                ),
                self._auto.execute("xtrim", self.decision_log_stream, minid=f"{cutoff_ms}-0", approximate=True),
            )
        except UNREACHABLE as exc:
            self._enter_degraded(exc)
            self._drop_log_entry("unreachable")

    def _drop_log_entry(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.decision_log_dropped.labels(reason).inc()

    async def read_decision_log(
        self, since_s: float = 0.0, after: str | None = None, count: int = 1000
    ) -> tuple[list[LoggedDecision], str | None]:
        """One ``XRANGE`` page: from ``since_s`` (entry ids are append times, ms) or after the cursor.

        Raises
        ------
        redis.exceptions.ConnectionError, redis.exceptions.TimeoutError
            Redis unreachable (an export is an operator command: it fails loudly).
        """
        start = f"({after}" if after else f"{max(0, int(since_s * 1000))}-0"
        raw: Any = await self.redis.xrange(self.decision_log_stream, min=start, max="+", count=count)
        out: list[LoggedDecision] = []
        for _entry_id, fields in raw:
            try:
                entry = decode_logged_decision(fields[b"d"])
            except (KeyError, ValueError, TypeError) as exc:
                log.error("undecodable decision-log entry %r skipped: %s", _entry_id, exc)
                continue
            if entry.reported_at >= since_s:
                out.append(entry)
        if len(raw) < count:
            return out, None
        last = raw[-1][0]
        return out, last.decode() if isinstance(last, bytes) else str(last)

    async def decision_log_length(self) -> int:
        return int(await self.redis.xlen(self.decision_log_stream))

    # --- end decision log ---

    # ---------------------------------------------------------------- misc
    # --- SSMP per-server state (issue 4; semantics in StateStore) ---
    #: Scores not updated for this long expire (well above any sensible ssmp_stale_age_s), s.
    SERVER_SCORE_TTL_S = 7 * 24 * 3600

    def server_score_key(self, key: str) -> str:
        """The fleet score's key of server ``key``."""
        return f"{self.namespace}:ssmp:{key}"

    def device_scores_key(self, key: str) -> str:
        """The hash of the devices' own states of server ``key`` (a prefix of its own: no server address can make
        one key the other's)."""
        return f"{self.namespace}:ssmpdev:{key}"

    async def get_server_scores(self, keys: Sequence[str]) -> dict[str, ServerScore]:
        """Fleet scores by key (MGET of JSON ``[q_bps, updated_at, {interface: [bandwidth_bps, loss]}]``; the third
        item is absent in values written before per-path B and p were stored); while degraded, none (servers read as
        unmeasured)."""
        keys = list(keys)
        if self._degraded or not keys:
            return {}
        try:
            raws: list[Any] = await self.redis.mget([self.server_score_key(k) for k in keys])
        except UNREACHABLE as exc:
            self._enter_degraded(exc)
            return {}
        return {key: _decode_score(raw) for key, raw in zip(keys, raws, strict=True) if raw is not None}

    async def get_server_views(self, keys: Sequence[str], device_id: str) -> dict[str, ServerScoreView]:
        """One script through the auto-pipeline (:data:`_SSMP_VIEWS_LUA`: GET and HGET per key), so it shares the
        round trip of the decision's write; while degraded, none (servers read as unmeasured)."""
        keys = list(keys)
        if self._degraded or not keys:
            return {}
        redis_keys = [self.server_score_key(k) for k in keys] + [self.device_scores_key(k) for k in keys]
        try:
            raws: list[Any] = await self._ssmp_views(keys=redis_keys, args=[device_id])
        except UNREACHABLE as exc:
            self._enter_degraded(exc)
            return {}
        out: dict[str, ServerScoreView] = {}
        for i, key in enumerate(keys):
            fleet, own = raws[2 * i], raws[2 * i + 1]
            if fleet is not None or own is not None:
                out[key] = ServerScoreView(
                    own=None if own is None else _decode_score(own),
                    fleet=None if fleet is None else _decode_score(fleet),
                )
        return out

    async def record_device_server_score(
        self, key: str, device_id: str, score: ServerScore, stale_age_s: float, max_devices: int
    ) -> None:
        """One Lua script (:data:`_SSMP_RECORD_LUA`, atomic: the device's state, the eviction and the fleet score
        together); dropped while degraded (one lost EWMA step of that device)."""
        if self._degraded:
            return
        args: list[str | int] = [device_id, _encode_score(score), repr(float(score.updated_at))]
        args += [repr(float(stale_age_s)), int(max_devices), self.SERVER_SCORE_TTL_S]
        try:
            await self._ssmp_record(keys=[self.server_score_key(key), self.device_scores_key(key)], args=args)
        except UNREACHABLE as exc:
            self._enter_degraded(exc)

    async def update_server_score(
        self, key: str, q_bps: float, updated_at: float, paths: Mapping[str, PathEstimate] | None = None
    ) -> None:
        """SET of the fleet score with a TTL; dropped while degraded."""
        if self._degraded:
            return
        try:
            value = _encode_score(ServerScore(q_bps, updated_at, paths or {}))
            await self.redis.set(self.server_score_key(key), value, ex=self.SERVER_SCORE_TTL_S)
        except UNREACHABLE as exc:
            self._enter_degraded(exc)

    # --- end SSMP ---

    # --- congestion edge measurements (issue 20; semantics in StateStore) ---
    def cc_stats_key(self, profile: str) -> str:
        return f"{self.namespace}:cc:{profile}"

    async def record_cc_measurement(self, profile: str, algorithm: str, metrics: Mapping[str, float]) -> None:
        """One Lua script (atomic: count, Σx, Σx² of every metric together, and a full hash's eviction of the least
        recently reported algorithm); dropped while degraded."""
        if self._degraded:
            return
        args: list[str | int] = [algorithm, MAX_CC_ALGORITHMS]
        for name, value in metrics.items():
            args += [name, repr(float(value)), repr(float(value) * float(value))]
        try:
            await self._cc_record(keys=[self.cc_stats_key(profile)], args=args)
        except UNREACHABLE as exc:
            self._enter_degraded(exc)

    async def cc_measurement_stats(self, profile: str) -> dict[str, dict[str, MetricSums]] | None:
        """HGETALL of the profile's hash; None while degraded or unreachable."""
        if self._degraded:
            return None
        try:
            raw: Any = await self.redis.hgetall(self.cc_stats_key(profile))
        except UNREACHABLE as exc:
            self._enter_degraded(exc)
            return None
        fields: dict[tuple[str, str], dict[str, str]] = {}
        for key, value in raw.items():
            k = key.decode() if isinstance(key, bytes) else str(key)
            parts = k.split("|")
            if len(parts) == 3:
                fields.setdefault((parts[0], parts[1]), {})[parts[2]] = (
                    value.decode() if isinstance(value, bytes) else str(value)
                )
        out: dict[str, dict[str, MetricSums]] = {}
        for (algorithm, metric), f in fields.items():
            if {"n", "sum", "sumsq"} <= f.keys():
                out.setdefault(algorithm, {})[metric] = MetricSums(int(f["n"]), float(f["sum"]), float(f["sumsq"]))
        return out

    # --- end congestion edge measurements ---

    # --- MEC 015 traffic steering sessions (issue 19) ---
    #: Devices not seen for this long read as unknown (MEC 015 session validation), s.
    DEVICE_ACCESS_TTL_S = 30 * 24 * 3600

    def _mts_key(self, what: str) -> str:
        return f"{self.namespace}:mts:{what}"

    @staticmethod
    def _encode_session(session: MtsSession) -> str:
        return json.dumps(dataclasses.asdict(session), separators=(",", ":"))

    @staticmethod
    def _decode_session(raw: Any) -> MtsSession:
        return MtsSession(**json.loads(raw))

    def _write_failed(self, exc: BaseException) -> Unavailable:
        self._enter_degraded(exc)
        return Unavailable("state store unreachable: MTS sessions cannot be changed now")

    @staticmethod
    def _sessions_digest(sessions: Sequence[MtsSession]) -> str:
        """SHA-1 (hex) of ``"<id>\\n<info>\\n"`` of each of ``sessions``, by id: what :data:`_PUT_MTS_SESSION_LUA`
        computes of the sessions in a device's hash (ids are ASCII: the same order in Lua)."""
        text = "".join(f"{s.session_id}\n{s.info}\n" for s in sorted(sessions, key=lambda s: s.session_id))
        return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()

    async def put_mts_session(
        self,
        session: MtsSession,
        *,
        device_sessions: Sequence[MtsSession] | None = None,
        max_sessions: int | None = None,
    ) -> bool:
        """HSET in the session hash and the device's hash (and HDEL from a previous device's) by one script, which
        checks the conditions (:meth:`~edgepath.state.base.StateStore.put_mts_session`) before it writes: one
        atomic step for every replica; True when written. False too when another replica moved the session to
        another device between this one's read of it and the script (the HDEL would miss that device's hash).

        Raises
        ------
        edgepath.errors.Unavailable
            Redis is unreachable (degraded mode), or full (:class:`StoreFull`).
        """
        if self._degraded:
            raise Unavailable("state store unreachable: MTS sessions cannot be changed now")
        sessions = self._mts_key("sessions")
        device = self._mts_key(f"device:{session.device_id}")
        try:
            old = await self.redis.hget(sessions, session.session_id)
            was = "" if old is None else self._decode_session(old).device_id
            previous = self._mts_key(f"device:{was}") if was else device
            args = [
                session.session_id,
                self._encode_session(session),
                "" if max_sessions is None else max_sessions,
                "" if device_sessions is None else self._sessions_digest(device_sessions),
                was,  # the script writes only if the session is still under it
            ]
            return bool(await self._put_mts(keys=[sessions, device, previous], args=args))
        except UNREACHABLE as exc:
            raise self._write_failed(exc) from exc

    def _read_failed(self, exc: BaseException | None, what: str) -> Unavailable:
        """The error of an MEC 015 API read while Redis is unreachable (``exc``: what a command raised, None when
        the store was already degraded): the API must answer 503, not "no such session / device"."""
        if exc is not None:
            self._enter_degraded(exc)
        return Unavailable(f"state store unreachable: {what} cannot be read now")

    async def get_mts_session(self, session_id: str) -> MtsSession | None:
        """HGET from the session hash.

        Raises
        ------
        edgepath.errors.Unavailable
            Redis is unreachable (degraded mode).
        """
        if self._degraded:
            raise self._read_failed(None, "MTS sessions")
        try:
            raw = await self.redis.hget(self._mts_key("sessions"), session_id)
        except UNREACHABLE as exc:
            raise self._read_failed(exc, "MTS sessions") from exc
        return None if raw is None else self._decode_session(raw)

    async def list_mts_sessions(self) -> list[MtsSession]:
        """HVALS of the session hash, oldest first.

        Raises
        ------
        edgepath.errors.Unavailable
            Redis is unreachable (degraded mode).
        """
        if self._degraded:
            raise self._read_failed(None, "MTS sessions")
        try:
            raws = await self.redis.hvals(self._mts_key("sessions"))
        except UNREACHABLE as exc:
            raise self._read_failed(exc, "MTS sessions") from exc
        return sorted((self._decode_session(r) for r in raws), key=lambda s: (s.created_at, s.session_id))

    #: Reads of a session's device before :meth:`delete_mts_session` gives up (each one moved by another replica).
    DELETE_ATTEMPTS = 8

    async def delete_mts_session(self, session_id: str) -> bool:
        """HDEL from the session hash and the device's hash by one script, which checks that the session is still
        under the device read just before (another replica may have moved it: the HDEL would miss the device's hash
        it is in now, and the device would go on being steered by a deleted session); read again when not. False
        when there was no such session.

        Raises
        ------
        edgepath.errors.Unavailable
            Redis is unreachable (degraded mode), or the session moved under each of :attr:`DELETE_ATTEMPTS` reads.
        """
        if self._degraded:
            raise Unavailable("state store unreachable: MTS sessions cannot be changed now")
        sessions = self._mts_key("sessions")
        try:
            for _ in range(self.DELETE_ATTEMPTS):
                old = await self.redis.hget(sessions, session_id)
                if old is None:
                    return False
                device_id = self._decode_session(old).device_id
                keys = [sessions, self._mts_key(f"device:{device_id}")]
                done = int(await self._delete_mts(keys=keys, args=[session_id, device_id]))
                if done >= 0:
                    return done == 1
        except UNREACHABLE as exc:
            raise self._write_failed(exc) from exc
        raise Unavailable(f"MTS session {session_id} moved between devices under {self.DELETE_ATTEMPTS} attempts")

    async def device_mts_sessions(self, device_id: str) -> list[MtsSession]:
        """HVALS of the device's hash; while degraded none (the device gets the default rule): never raises for an
        unreachable Redis (the decision path; the API reads with :meth:`list_mts_sessions`, which does)."""
        if self._degraded:
            return []
        try:
            raws = await self._auto.execute("hvals", self._mts_key(f"device:{device_id}"))
        except UNREACHABLE as exc:
            self._enter_degraded(exc)
            return []
        return sorted((self._decode_session(r) for r in raws), key=lambda s: (s.created_at, s.session_id))

    async def devices_mts_sessions(self, device_ids: Sequence[str]) -> list[list[MtsSession]]:
        """HVALS of each device's hash in one script call (one command, one reply); while degraded none."""
        if self._degraded or not device_ids:
            return [[] for _ in device_ids]
        try:
            replies = await self._hvals_each(keys=[self._mts_key(f"device:{d}") for d in device_ids])
        except UNREACHABLE as exc:
            self._enter_degraded(exc)
            return [[] for _ in device_ids]
        return [
            sorted((self._decode_session(r) for r in raws), key=lambda s: (s.created_at, s.session_id))
            for raws in replies
        ]

    async def record_device_accesses(self, device_id: str, access_types: Sequence[str]) -> None:
        """SET with a TTL plus SADD to the reported types; dropped while degraded."""
        if self._degraded:
            return
        try:
            writes = [
                self._auto.execute(
                    "set",
                    self._mts_key(f"access:{device_id}"),
                    json.dumps(list(access_types)),
                    ex=self.DEVICE_ACCESS_TTL_S,
                )
            ]
            if access_types:
                writes.append(self._auto.execute("sadd", self._mts_key("access_types"), *access_types))
            await asyncio.gather(*writes)
        except UNREACHABLE as exc:
            self._enter_degraded(exc)

    async def device_accesses(self, device_id: str) -> tuple[str, ...] | None:
        """GET of the device's access types.

        Raises
        ------
        edgepath.errors.Unavailable
            Redis is unreachable (degraded mode).
        """
        if self._degraded:
            raise self._read_failed(None, "device accesses")
        try:
            raw = await self.redis.get(self._mts_key(f"access:{device_id}"))
        except UNREACHABLE as exc:
            raise self._read_failed(exc, "device accesses") from exc
        return None if raw is None else tuple(json.loads(raw))

    async def reported_access_types(self) -> set[str]:
        """SMEMBERS of the reported access types.

        Raises
        ------
        edgepath.errors.Unavailable
            Redis is unreachable (degraded mode).
        """
        if self._degraded:
            raise self._read_failed(None, "device accesses")
        try:
            members = await self.redis.smembers(self._mts_key("access_types"))
        except UNREACHABLE as exc:
            raise self._read_failed(exc, "device accesses") from exc
        return {m.decode() if isinstance(m, bytes) else str(m) for m in members}

    # --- end MEC 015 ---

    async def ping(self) -> bool:
        self._ensure_reconnecting()
        if self._degraded:
            return False
        try:
            return bool(await self.redis.ping())
        except UNREACHABLE as exc:
            self._enter_degraded(exc)
            return False

    async def flush_outbox(self, timeout_s: float) -> int:
        """Try, for at most ``timeout_s``, to write the degraded-mode buffers into Redis (graceful shutdown).

        Returns how many decisions and outcomes are still buffered (0 when everything is in Redis, not when Redis
        is unreachable or full); those stay in the durable journal when ``outbox_dir`` is set, for the next process
        to replay.
        """
        if not (self._outbox or self._unsynced):
            return 0
        try:
            async with asyncio.timeout(timeout_s):
                await self.redis.ping()
                await self._flush()
        except StoreFull:
            log.warning("outbox flush at shutdown incomplete: state store %s full (its memory bound)", self.url)
        except (TimeoutError, *UNREACHABLE) as exc:
            log.warning("outbox flush at shutdown incomplete (%r)", exc)
        else:
            self._degraded = self._replaying = self._full = False
            if self._journal is not None:
                self._journal.truncate()
        return len(self._outbox) + len(self._unsynced)

    def fail_fast_client(self) -> FailFastRedis:
        """This store's Redis client for other components (shared rate limits, quarantine, ...).

        While the store is degraded its commands fail at once with ``redis.exceptions.ConnectionError``
        instead of each waiting ``socket_timeout_s`` on a hung server; a command that finds Redis
        unreachable switches the store to degraded mode too.
        """
        return FailFastRedis(self)

    async def close(self) -> None:
        await self._auto.drain()  # commands already queued still reach Redis (or fail to their callers)
        if self._reconnect_task is not None:
            self._reconnect_task.cancel()
            try:
                await self._reconnect_task
            except (asyncio.CancelledError, Exception):
                pass
        if self._outbox or self._unsynced:
            if self._journal is not None:
                log.warning(
                    "closing with %d buffered outcomes and %d unsynced decisions: kept in %s for the next process",
                    len(self._outbox),
                    len(self._unsynced),
                    self._journal.path,
                )
            else:
                log.warning("closing with %d unsynced decisions (lost)", len(self._unsynced))
        if self._journal is not None:
            self._journal.close(remove=not (self._outbox or self._unsynced))
        await self.redis.aclose()
        await self._reader.aclose()


def _encode_score(score: ServerScore) -> str:
    """A stored SSMP score: JSON ``[q_bps, updated_at, {interface: [bandwidth_bps, loss]}]`` (null = unknown)."""
    per_path = {name: [e.bandwidth_bps, e.loss] for name, e in score.paths.items()}
    return json.dumps([score.q_bps, score.updated_at, per_path])


def _decode_score(raw: bytes | str) -> ServerScore:
    """The inverse of :func:`_encode_score`; a value without the third item (written before per-path B and p were
    stored) has no path estimates."""
    q_bps, updated_at, *rest = json.loads(raw)
    paths = {name: PathEstimate(bandwidth_bps=b, loss=p) for name, (b, p) in (rest[0] if rest else {}).items()}
    return ServerScore(q_bps=float(q_bps), updated_at=float(updated_at), paths=paths)


def _count(metrics: Metrics) -> Callable[[int], None]:
    """The auto-pipeline's ``on_send``: one round trip and its commands in ``metrics`` (no lock: the loop's thread)."""
    round_trips, commands = metrics.redis_round_trips.labels(), metrics.redis_commands.labels()

    def sent(n: int) -> None:
        round_trips.inc()
        commands.inc(n)

    return sent


class FailFastRedis:
    """A view of :attr:`RedisStore.redis` that honours the store's degraded mode (see ``fail_fast_client``)."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._client = store.redis

    async def _guard(self, pending: Awaitable[Any]) -> Any:
        try:
            return await pending
        except UNREACHABLE as exc:
            self._store._enter_degraded(exc)
            raise

    @staticmethod
    async def _unreachable() -> Any:
        raise RedisConnectionError("state store unreachable (degraded mode)")

    def _wrap(self, result: Any) -> Any:
        if not inspect.isawaitable(result):
            return result
        if self._store.degraded:
            if inspect.iscoroutine(result):
                result.close()
            return self._unreachable()
        return self._guard(result)

    def register_script(self, script: str | bytes) -> Callable[..., Awaitable[Any]]:
        """The script through the store's auto-pipeline (a rate-limit token is one ``EVALSHA`` in the pipeline of
        whatever else the loop sends in the same iteration; :mod:`edgepath.state.autopipeline`)."""
        real = self._store._auto.register_script(script)

        def call(keys: Any = None, args: Any = None, client: Any = None) -> Any:
            if self._store.degraded:
                return self._unreachable()
            return self._wrap(real(keys=keys, args=args, client=client))

        return call

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._wrap(attr(*args, **kwargs))

        return call
