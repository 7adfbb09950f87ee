"""In-process state store (the default for one replica; no Redis needed).

Decisions live as rows of plain values (:func:`edgepath.state.codec.decision_row`) in a
:class:`~edgepath.state.codec.TtlIndex` bounded by ``max_decisions`` (the oldest are evicted first when full):
tuples the garbage collector untracks and never walks again — a million cached record objects would make
every full collection a stall of the serving loop (issue 16). The outcome log (kept only for a trainer in this
process: ``queue_outcomes``) is a list with a delivery
cursor: entries are delivered once to the reader and stay
*pending* until acknowledged; ``requeue_pending`` (what a restarted trainer
would do) delivers unacknowledged ones again. Everything is lost when the
process exits: use the Redis store when that matters. SSMP server scores (per server: the fleet score and the
devices' own states, at most ``fleet_devices`` of them, :func:`~edgepath.state.base.fleet_members`) live in a
``cachetools.LRUCache`` bounded by ``max_servers``. The decision log (issue 18) is a deque of at
most ``decision_log_max_entries`` joined decisions, none older than ``decision_log_retention_s``.
Congestion edge measurements (issue 20) are a dict profile → algorithm → metric → [count, Σx, Σx²]
(at most ``MAX_CC_ALGORITHMS`` algorithms per profile, in the order last reported: the first is evicted).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any

from cachetools import LRUCache

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
    fleet_members,
    fleet_score,
)
from edgepath.state.codec import (
    TtlIndex,
    decision_row,
    decode_logged_decision,
    encode_record,
    outcome_row,
    row_decision,
    row_outcome,
)
from edgepath.tasks import wait_event


class _ServerScores:
    """One server's SSMP state in the in-process store: its fleet score and its devices' own states."""

    __slots__ = ("devices", "fleet")

    def __init__(self) -> None:
        self.fleet: ServerScore | None = None
        self.devices: dict[str, ServerScore] = {}


class MemoryStore:
    """:class:`~edgepath.state.base.StateStore` in process memory (single event loop)."""

    overlaps_io = False  # no call waits on anything (StateStore.overlaps_io)

    def __init__(
        self,
        max_decisions: int = 1_000_000,
        decision_ttl_s: float = 3600.0,
        max_servers: int = 100_000,
        decision_log_max_entries: int = 100_000,
        decision_log_retention_s: float = 7 * 24 * 3600.0,
        queue_outcomes: bool = True,
    ) -> None:
        """``queue_outcomes``: keep each new outcome for the trainer (:meth:`read_outcome_rows`). False for a process
        that serves without training (``edgepath serve --store memory:// --no-trainer``): nothing else can read this
        store, so a queue would only grow (an outcome per report, for as long as the process runs); outcomes are
        still claimed once (duplicates refused) and joined into the decision log."""
        self.queue_outcomes = queue_outcomes
        self._decisions = TtlIndex(max_decisions, decision_ttl_s)  # decision id -> decision_row(record)
        self._outcome_seen = TtlIndex(max_decisions, decision_ttl_s * 2)  # decision id -> True
        self._log: dict[str, tuple[Any, ...]] = {}  # entry id -> outcome_row(outcome), untracked by the collector
        self._undelivered: list[str] = []
        self._pending: set[str] = set()
        self._ids = itertools.count(1)
        self._arrived = asyncio.Event()
        self._wanted = 1  # outcomes a blocked reader waits for (read_outcome_rows' min_count)
        # SSMP server scores (issue 4): per server, the fleet score and the devices' own states; least recently
        # used servers evicted beyond max_servers.
        self._server_scores: LRUCache[str, _ServerScores] = LRUCache(maxsize=max_servers)
        # MEC 015 sessions and the access types devices reported (issue 19).
        self._mts_sessions: dict[str, MtsSession] = {}
        self._device_accesses: LRUCache[str, tuple[str, ...]] = LRUCache(maxsize=max_decisions)
        self._access_types: set[str] = set()
        # Decision log (issue 18): (sequence number, reported_at, entry JSON), oldest first, bounded in size and age.
        self._decision_log: collections.deque[tuple[int, float, bytes]] = collections.deque(
            maxlen=max(1, decision_log_max_entries)
        )
        self._decision_log_seq = itertools.count(1)
        self.decision_log_retention_s = decision_log_retention_s
        # Congestion edge measurements (issue 20): profile → algorithm → metric → [count, Σx, Σx²].
        self._cc_stats: dict[str, dict[str, dict[str, list[float]]]] = {}

    async def put_decision(self, record: DecisionRecord, ttl_s: float) -> None:
        # The index has one TTL for all entries; ttl_s is honoured by the index's own setting.
        self._decisions[record.decision_id] = decision_row(record)

    async def put_decisions(self, records: Sequence[DecisionRecord], ttl_s: float) -> None:
        self._decisions.set_many([(record.decision_id, decision_row(record)) for record in records])

    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        row = self._decisions.get(decision_id)
        return None if row is None else row_decision(row)

    async def claim_outcome(self, outcome: OutcomeRecord, log_entry: LoggedDecision | None = None) -> ClaimResult:
        if outcome.decision_id in self._outcome_seen:
            return ClaimResult.DUPLICATE
        if outcome.decision_id not in self._decisions:
            return ClaimResult.UNKNOWN
        self._outcome_seen[outcome.decision_id] = True
        if self.queue_outcomes:
            entry_id = f"{next(self._ids)}-0"
            self._log[entry_id] = outcome_row(outcome)
            self._undelivered.append(entry_id)
            if len(self._undelivered) >= self._wanted:
                self._arrived.set()
        if log_entry is not None:
            await self.append_decision_log(log_entry)
        return ClaimResult.NEW

    async def read_outcomes(self, consumer: str, count: int, block_ms: int) -> list[tuple[str, OutcomeRecord]]:
        return [(i, row_outcome(row)) for i, row in await self.read_outcome_rows(consumer, count, block_ms)]

    async def read_outcome_rows(
        self, consumer: str, count: int, block_ms: int, min_count: int = 1
    ) -> list[tuple[str, OutcomeRow]]:
        """The stored rows themselves (no conversion); ``min_count`` is honoured: :meth:`claim_outcome` wakes the
        reader only once that many are waiting."""
        wanted = max(1, min(min_count, count))
        if len(self._undelivered) < wanted and block_ms > 0:
            self._wanted = wanted
            self._arrived.clear()
            try:
                await wait_event(self._arrived, block_ms / 1000.0)
            finally:
                self._wanted = 1
        batch, self._undelivered = self._undelivered[:count], self._undelivered[count:]
        self._pending.update(batch)
        return [(i, self._log[i]) for i in batch]

    async def ack_outcomes(self, entry_ids: list[str]) -> None:
        for entry_id in entry_ids:
            if entry_id in self._pending:
                self._pending.discard(entry_id)
                self._log.pop(entry_id, None)

    def requeue_pending(self) -> int:
        """Deliver unacknowledged outcomes again (as a restarted consumer would). Returns how many."""
        pending = sorted(self._pending, key=lambda i: int(i.split("-")[0]))
        self._undelivered = pending + self._undelivered
        self._pending.clear()
        return len(pending)

    # --- SSMP per-server state (issue 4) ---
    async def get_server_scores(self, keys: Sequence[str]) -> dict[str, ServerScore]:
        return {k: e.fleet for k in keys if (e := self._server_scores.get(k)) is not None and e.fleet is not None}

    async def get_server_views(self, keys: Sequence[str], device_id: str) -> dict[str, ServerScoreView]:
        out: dict[str, ServerScoreView] = {}
        for k in keys:
            entry = self._server_scores.get(k)
            if entry is not None:
                own = entry.devices.get(device_id)
                if own is not None or entry.fleet is not None:
                    out[k] = ServerScoreView(own=own, fleet=entry.fleet)
        return out

    async def record_device_server_score(
        self, key: str, device_id: str, score: ServerScore, stale_age_s: float, max_devices: int
    ) -> None:
        entry = self._server_scores.get(key)
        if entry is None:
            entry = self._server_scores[key] = _ServerScores()
        states = {**entry.devices, device_id: score}
        entry.devices = fleet_members(states, device_id, stale_age_s, max_devices)
        entry.fleet = fleet_score(list(entry.devices.values()))

    async def update_server_score(
        self, key: str, q_bps: float, updated_at: float, paths: Mapping[str, PathEstimate] | None = None
    ) -> None:
        entry = self._server_scores.get(key)
        if entry is None:
            entry = self._server_scores[key] = _ServerScores()
        entry.fleet = ServerScore(q_bps=q_bps, updated_at=updated_at, paths=dict(paths or {}))

    # --- end SSMP ---

    # --- congestion edge measurements (issue 20) ---
    async def record_cc_measurement(self, profile: str, algorithm: str, metrics: Mapping[str, float]) -> None:
        algos = self._cc_stats.setdefault(profile, {})
        per_metric = algos.pop(algorithm, None)
        if per_metric is None:
            per_metric = {}
            if len(algos) >= MAX_CC_ALGORITHMS:
                del algos[next(iter(algos))]  # the least recently reported (dicts keep insertion order)
        algos[algorithm] = per_metric  # (re)inserted last: the most recently reported
        for name, value in metrics.items():
            sums = per_metric.setdefault(name, [0.0, 0.0, 0.0])
            sums[0] += 1
            sums[1] += value
            sums[2] += value * value

    async def cc_measurement_stats(self, profile: str) -> dict[str, dict[str, MetricSums]] | None:
        return {
            algorithm: {name: MetricSums(int(n), total, total_sq) for name, (n, total, total_sq) in per_metric.items()}
            for algorithm, per_metric in self._cc_stats.get(profile, {}).items()
        }

    # --- end congestion edge measurements ---

    # --- MEC 015 traffic steering sessions (issue 19) ---
    async def put_mts_session(
        self,
        session: MtsSession,
        *,
        device_sessions: Sequence[MtsSession] | None = None,
        max_sessions: int | None = None,
    ) -> bool:
        sessions = self._mts_sessions
        if max_sessions is not None and session.session_id not in sessions and len(sessions) >= max_sessions:
            return False
        if device_sessions is not None:
            now = [
                (s.session_id, s.info)
                for s in sessions.values()
                if s.device_id == session.device_id and s.session_id != session.session_id
            ]
            if sorted(now) != sorted((s.session_id, s.info) for s in device_sessions):
                return False
        sessions[session.session_id] = session
        return True

    async def get_mts_session(self, session_id: str) -> MtsSession | None:
        return self._mts_sessions.get(session_id)

    async def list_mts_sessions(self) -> list[MtsSession]:
        return sorted(self._mts_sessions.values(), key=lambda s: (s.created_at, s.session_id))

    async def delete_mts_session(self, session_id: str) -> bool:
        return self._mts_sessions.pop(session_id, None) is not None

    async def device_mts_sessions(self, device_id: str) -> list[MtsSession]:
        if not self._mts_sessions:
            return []
        mine = (s for s in self._mts_sessions.values() if s.device_id == device_id)
        return sorted(mine, key=lambda s: (s.created_at, s.session_id))

    async def devices_mts_sessions(self, device_ids: Sequence[str]) -> list[list[MtsSession]]:
        if not self._mts_sessions:
            return [[] for _ in device_ids]
        return [await self.device_mts_sessions(d) for d in device_ids]

    async def record_device_accesses(self, device_id: str, access_types: Sequence[str]) -> None:
        self._device_accesses[device_id] = tuple(access_types)
        self._access_types.update(access_types)

    async def device_accesses(self, device_id: str) -> tuple[str, ...] | None:
        return self._device_accesses.get(device_id)

    async def reported_access_types(self) -> set[str]:
        return set(self._access_types)

    # --- end MEC 015 ---

    # --- decision log (issue 18) ---
    def _trim_decision_log(self) -> None:
        cutoff = time.time() - self.decision_log_retention_s
        while self._decision_log and self._decision_log[0][1] < cutoff:
            self._decision_log.popleft()

    async def append_decision_log(self, entry: LoggedDecision) -> None:
        self._decision_log.append((next(self._decision_log_seq), entry.reported_at, encode_record(entry)))
        self._trim_decision_log()

    async def read_decision_log(
        self, since_s: float = 0.0, after: str | None = None, count: int = 1000
    ) -> tuple[list[LoggedDecision], str | None]:
        self._trim_decision_log()
        start = int(after) if after else 0
        since_s = max(since_s, time.time() - self.decision_log_retention_s)
        page = [(n, raw) for n, at, raw in list(self._decision_log) if n > start and at >= since_s][:count]
        entries = [decode_logged_decision(raw) for _, raw in page]
        if len(page) < count:
            return entries, None
        return entries, str(page[-1][0])

    # --- end decision log ---

    async def ping(self) -> bool:
        return True

    def unready_reason(self) -> str:
        return "state store unreachable"  # never: always ready

    async def close(self) -> None:
        return None
