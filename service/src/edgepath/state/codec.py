"""JSON codecs of the state records, and the GC-friendly TTL index both stores keep recent decisions in.

The codecs are the one wire form of :class:`~edgepath.state.base.DecisionRecord`,
:class:`~edgepath.state.base.LoggedDecision` and :class:`~edgepath.state.base.OutcomeRecord` inside the stores
(Redis values and streams, the in-process store's decision table): compact JSON of every field by name, never
pickle. Encoding is orjson straight from the dataclass (issue 16: no ``dataclasses.asdict`` deep copy, no
Python-level encoder); every float in a record is finite (validated where it enters), so orjson's ``null`` for
NaN never applies. Decoding ignores unknown (newer) fields and lets missing optional ones take their defaults.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import time
from array import array
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import orjson

from edgepath.state.base import DecisionRecord, LoggedDecision, OutcomeRecord

_R = TypeVar("_R", DecisionRecord, LoggedDecision, OutcomeRecord)
_FIELDS: dict[type, frozenset[str]] = {
    cls: frozenset(f.name for f in dataclasses.fields(cls)) for cls in (DecisionRecord, LoggedDecision, OutcomeRecord)
}


def encode_record(record: DecisionRecord | LoggedDecision | OutcomeRecord) -> bytes:
    """The record as compact JSON, every field by name (what ``dataclasses.asdict`` + ``json.dumps`` give), in a
    bytes object of its own length.

    orjson (3.12 and later) returns its output buffer without shrinking it: a 1 KB decision-log entry held a 16 KB
    allocation (measured with tracemalloc; ijl/orjson#483, and Home Assistant trims its cached fragments the same
    way). The stores *keep* these values: the in-process decision log (up to 100,000 entries) and each Redis
    replica's recent decisions (up to ``outbox_max_decisions``), so untrimmed they held ~16 KB per entry — 1.2 GB of
    growth in one 80 s ``loadtest/bench`` run (issue 16). The copy costs ~0.2 µs.
    """
    return bytes(memoryview(orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS)))


def _decode(cls: type[_R], raw: bytes | str, tuples: tuple[str, ...]) -> _R:
    """``cls`` from its JSON: unknown (newer) fields ignored, missing optional ones at their defaults, the fields
    ``tuples`` (JSON arrays) as tuples (a JSON null stays None)."""
    names = _FIELDS[cls]
    d = {k: v for k, v in orjson.loads(raw).items() if k in names}
    for name in tuples:
        if d.get(name) is not None:
            d[name] = tuple(d[name])
    return cls(**d)


def decode_decision(raw: bytes | str) -> DecisionRecord:
    """A stored decision record (:func:`_decode`).

    A field absent from ``raw`` was not written by the release that stored it, which is not the same as written
    empty: a record without ``server_candidates`` (a replica of a release before it, during a rolling upgrade)
    decodes with ``server_candidates=None`` ("not recorded"), one with ``[]`` (its request named no content) with
    ``()``; the outcome guard treats the two differently (:mod:`edgepath.security.plausibility`).
    """
    return _decode(
        DecisionRecord, raw, ("arms", "features", "link_speed_mbps", "congestion_controls", "server_candidates")
    )


def decode_logged_decision(raw: bytes | str) -> LoggedDecision:
    """A decision-log entry (:func:`_decode`)."""
    return _decode(LoggedDecision, raw, ("arms", "features", "context"))


def decode_outcome(raw: bytes | str) -> OutcomeRecord:
    """An outcome-log entry (:func:`_decode`)."""
    return _decode(OutcomeRecord, raw, ("arms", "features"))


_FEATURES_AT = [f.name for f in dataclasses.fields(DecisionRecord)].index("features")
_OUTCOME_FEATURES_AT = [f.name for f in dataclasses.fields(OutcomeRecord)].index("features")


def _packed(values: list[Any], at: int) -> list[Any]:
    """``values`` (a fresh list of the caller's, changed in place and returned) with the float sequence at index
    ``at`` packed as native doubles (``array('d')`` bytes)."""
    values[at] = array("d", values[at]).tobytes()
    return values


def _unpacked(values: list[Any], at: int) -> list[Any]:
    """The inverse of :func:`_packed` (in place): the doubles at index ``at`` back as a tuple of floats (exact)."""
    values[at] = tuple(array("d", values[at]))
    return values


def decision_row(record: DecisionRecord) -> tuple[Any, ...]:
    """The record's field values in field order, its ``features`` packed as native doubles (``array('d')`` bytes):
    a tuple of strings, numbers, bytes, None and tuples of those, which the garbage collector untracks (an in-process
    table of rows is never walked by a full collection, issue 16). Packing takes ~1.5 µs and :func:`row_decision`
    ~2.8 µs (the JSON round trip costs ~15 µs).

    Packed because a tuple of 68 float objects is 2.2 KB, three quarters of a stored decision (2.8 KB measured with
    tracemalloc): at the in-process store's ``max_decisions`` (1M) that is ~2.8 GB, and the chart's 512 MiB pod
    would fill after ~150k. Packed, the 68 features are 577 bytes and round-trip exactly."""
    return tuple(_packed(list(record.__dict__.values()), _FEATURES_AT))  # a dataclass's __dict__: fields in order


def row_decision(row: tuple[Any, ...]) -> DecisionRecord:
    """The record of a :func:`decision_row`."""
    return DecisionRecord(*_unpacked(list(row), _FEATURES_AT))


def outcome_row(outcome: OutcomeRecord) -> tuple[Any, ...]:
    """The outcome's field values in field order, its ``features`` packed as in :func:`decision_row` and its
    ``extra`` mapping (the last field) as a tuple of ``(name, value)`` pairs: like :func:`decision_row`, a tuple the
    garbage collector untracks. An in-process outcome log of dataclass objects is walked by every full collection,
    and a paused or lagging trainer's backlog (thousands of outcomes) made those collections several ms each
    (issue 16); packed, a backlogged outcome costs ~0.6 KB of features instead of 2.2 KB."""
    *fields, extra = outcome.__dict__.values()
    return (*_packed(fields, _OUTCOME_FEATURES_AT), tuple(extra.items()))


def row_outcome(row: tuple[Any, ...]) -> OutcomeRecord:
    """The record of an :func:`outcome_row`."""
    *fields, extra = row
    # the fields in order, extra last (one star: mypy's arity check)
    return OutcomeRecord(*(*_unpacked(fields, _OUTCOME_FEATURES_AT), dict(extra)))


class TtlIndex:
    """A bounded mapping whose entries expire ``ttl_s`` after they were set; past ``maxsize`` the oldest go first.

    What ``cachetools.TTLCache`` does, without its two linked-list objects per entry. The store keeps one entry per
    recent decision (tens of thousands on a busy replica), and a full garbage collection walks every tracked
    object: 17k cached ``DecisionRecord`` objects and their 34k TTLCache links made each full collection of the
    serving process 34-38 ms (a ``gc.callbacks`` probe under ``loadtest/bench``, issue 16). Here an entry is one
    ``(expiry, value)`` tuple of untracked values (the record's JSON bytes, or True), which the collector skips.

    Sharded: from ``maxsize`` ≥ 65,536 the entries are spread by the key's hash over up to ``MAX_SHARDS``
    ordered dicts (each ≥ 1,024 entries), and the bound holds per shard (``ceil(maxsize / shards)``; its oldest
    go first). A dict rebuilds its whole table when it grows or has filled with deleted slots: one insert into
    the serving process's decision index took ~26 ms of the event loop at a few hundred thousand entries (a
    ``py-spy --idle`` sample run under ``loadtest/bench``, issue 16). A shard rebuilds 1/shards of that.
    """

    MAX_SHARDS = 64
    MIN_SHARD_SIZE = 1024

    def __init__(self, maxsize: int, ttl_s: float, timer: Callable[[], float] = time.monotonic) -> None:
        self.maxsize = maxsize
        self.ttl_s = ttl_s
        self.timer = timer
        n = max(1, min(self.MAX_SHARDS, maxsize // self.MIN_SHARD_SIZE))
        self._shard_max = -(-maxsize // n)
        self._shards: list[collections.OrderedDict[str, tuple[float, Any]]] = [
            collections.OrderedDict() for _ in range(n)
        ]

    def _shard(self, key: object) -> collections.OrderedDict[str, tuple[float, Any]]:
        return self._shards[hash(key) % len(self._shards)]

    def __setitem__(self, key: str, value: Any) -> None:
        items = self._shard(key)
        now = self.timer()
        items[key] = (now + self.ttl_s, value)
        items.move_to_end(key)
        self._evict(items, now)

    def set_many(self, pairs: Iterable[tuple[str, Any]]) -> None:
        """``self[key] = value`` for each ``(key, value)``, in order, at one reading of the clock and with one
        eviction pass per shard touched: a ``RecommendBatch``'s records (~0.97 → ~0.80 µs each at 100,000 keys in
        a scratch timing; issue 16)."""
        now = self.timer()
        expiry = now + self.ttl_s
        touched: dict[int, collections.OrderedDict[str, tuple[float, Any]]] = {}
        for key, value in pairs:
            items = self._shard(key)
            items[key] = (expiry, value)
            items.move_to_end(key)
            touched[id(items)] = items
        for items in touched.values():
            self._evict(items, now)

    def _evict(self, items: collections.OrderedDict[str, tuple[float, Any]], now: float) -> None:
        """Drop a shard's oldest entries beyond its bound, then those expired at ``now``."""
        while len(items) > self._shard_max:
            items.popitem(last=False)
        while items:  # one TTL for all: the front holds the earliest expiry
            _, (expiry, _) = next(iter(items.items()))
            if expiry > now:
                break
            items.popitem(last=False)

    def get(self, key: str, default: Any = None) -> Any:
        item = self._shard(key).get(key)
        if item is None or item[0] <= self.timer():
            return default
        return item[1]

    def __contains__(self, key: object) -> bool:
        item = self._shard(key).get(key)  # type: ignore[call-overload]
        return item is not None and item[0] > self.timer()

    def __len__(self) -> int:
        return sum(len(items) for items in self._shards)

    def values(self) -> list[Any]:
        """The values not yet expired, oldest first."""
        now = self.timer()
        merged = heapq.merge(*(items.values() for items in self._shards), key=lambda item: item[0])
        return [value for expiry, value in merged if expiry > now]
