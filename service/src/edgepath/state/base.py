"""State-store interface: what the decision plane and the trainer keep between requests.

Two implementations share this contract (and one contract test suite):
:class:`~edgepath.state.memory.MemoryStore` (default, one replica) and a Redis
store for many replicas.

Records
-------
* :class:`DecisionRecord` — the decision log entry, kept for ``decision_ttl_s``:
  what was decided, with which model version, propensity and features. It is
  what outcomes join on and what off-policy evaluation reads.
* :class:`OutcomeRecord` — an outcome joined with its decision, appended to the
  outcome log exactly once per decision (``claim_outcome`` is atomic). The
  trainer reads the log (``read_outcome_rows``) and acknowledges entries
  (``ack_outcomes``) only after the model has used them, so a trainer crash
  loses nothing: unacknowledged entries are delivered again.
"""

from __future__ import annotations

import dataclasses
import enum
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

_T = TypeVar("_T")


def dict_init(cls: type[_T]) -> type[_T]:
    """A frozen dataclass whose ``__init__`` sets the instance's ``__dict__`` in one step, with the signature and
    defaults of the one ``dataclasses`` generates, which sets each field by ``object.__setattr__``: a
    :class:`DecisionRecord` called with keywords, as the plane makes one, ~3.1 µs against ~1.2 (issue 16; one record
    per decision, and one per outcome read).
    The instance is the same (fields in order in ``__dict__``, which :mod:`edgepath.state.codec` relies on), and
    still frozen.

    Raises
    ------
    TypeError
        ``cls`` is not a frozen dataclass of plain defaults: a ``default_factory``, a field not in ``__init__``, a
        ``__post_init__`` or ``__slots__``, which this ``__init__`` would skip.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or hasattr(cls, "__post_init__") or "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: dict_init takes a frozen dataclass without __post_init__ or __slots__")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if any(f.default_factory is not dataclasses.MISSING or not f.init for f in fields):
        raise TypeError(f"{cls.__name__}: dict_init takes fields of plain defaults, all in __init__")
    namespace: dict[str, Any] = {"_set": object.__setattr__}
    args = []
    for f in fields:
        if f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = f.default
            args.append(f"{f.name}=_default_{f.name}")
    values = ", ".join(f"{f.name!r}: {f.name}" for f in fields)
    exec(f"def __init__(self, {', '.join(args)}):\n    _set(self, '__dict__', {{{values}}})\n", namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**{f.name: f.type for f in fields}, "return": None}  # as the dataclass's own
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


@dict_init
@dataclass(frozen=True)
class DecisionRecord:
    """A logged primary-path decision.

    ``features`` has the layout of ``engines.features.FEATURE_NAMES``;
    ``arms`` are access-type names in policy order; times are Unix seconds.
    ``link_speed_mbps`` is aligned with ``arms``: the link speed the device reported for
    that access type, Mbit/s, or None where it reported none (what the outcome guard
    bounds throughput with, :mod:`edgepath.security.plausibility`). Records written
    before the field existed decode with ``()``, read as "none reported".
    """

    decision_id: str
    device_id: str
    model_version: int
    policy: str
    arms: tuple[str, ...]
    arm_index: int
    interface: str
    propensity: float
    features: tuple[float, ...]
    decided_at: float
    link_speed_mbps: tuple[float | None, ...] = ()
    # --- decision log (issue 18) ---
    context: str = ""
    """The request's ``interfaces`` as received (JSON list of objects, fields the device sent), or ""."""
    learner_arm_index: int | None = None
    """Apprentice mode: the arm index the learner would have chosen (None otherwise)."""
    baseline_arm_index: int | None = None
    """Apprentice mode: the arm index the baseline chose (None otherwise)."""
    # --- congestion edge measurements (issue 20) ---
    application_profile: str = ""
    """The request's ``application_profile`` (``ApplicationProfile`` value), or "" in records written before
    the field existed (their congestion measurements are not counted)."""
    congestion_controls: tuple[str, ...] = ()
    """The request's ``kernel.available_congestion_controls`` (``net.ipv4.tcp_available_congestion_control``),
    lower-cased, in request order: the algorithms an outcome's ``congestion_measurement`` may name (the congestion
    adapter ignores any other, :meth:`edgepath.adapters.congestion.CongestionAdapter.learn`). () when the request
    reported none, and in records written before the field existed: then only the known names apply."""
    # --- SSMP: what an outcome's server_transfer may name ---
    server_candidates: tuple[str, ...] | None = None
    """The distinct ``address`` es of the request's ``content.candidates``, in request order; () when the request
    named no content; None when the record does not say: written by a release before the field existed (the codecs
    decode an absent field as None, :func:`edgepath.state.codec.decode_decision`; the plane always writes a tuple).
    The outcome guard refuses a ``server_transfer`` from any other server, and takes one on a record that does not
    say under its rate bounds only (:mod:`edgepath.security.plausibility`)."""


@dataclass(frozen=True)
class OutcomeRecord:
    """An outcome joined with its decision: one training sample for the bandit."""

    decision_id: str
    device_id: str
    model_version: int
    arms: tuple[str, ...]
    arm_index: int
    propensity: float
    features: tuple[float, ...]
    throughput_bps: float
    latency_ms: float | None
    loss: float | None
    reward: int
    reported_at: float
    extra: dict[str, float] = field(default_factory=dict)


#: An :class:`OutcomeRecord` as plain values (``edgepath.state.codec.outcome_row``; back with ``row_outcome``): a
#: tuple of strings, numbers, bytes and tuples, which the garbage collector untracks and pickle writes in one pass.
OutcomeRow = tuple[Any, ...]


class ClaimResult(enum.Enum):
    """Result of :meth:`StateStore.claim_outcome`."""

    NEW = "new"
    DUPLICATE = "duplicate"
    UNKNOWN = "unknown"


# --- SSMP per-server state (issue 4) ---
@dataclass(frozen=True)
class PathEstimate:
    """SSMP per-path inputs of Eq. 1–2 learned from past transfers from one server over one interface.

    ``bandwidth_bps``: achievable bandwidth B (bit/s, EWMA of the measured per-subflow rates);
    ``loss``: loss rate p (fraction, EWMA of the measured retransmission ratios); None = never measured.
    """

    bandwidth_bps: float | None = None
    loss: float | None = None


@dataclass(frozen=True)
class ServerScore:
    """SSMP state of one CDN server: its smoothed score, per-path B and p, and when it was last updated.

    ``q_bps`` is Q of Yang et al., SSMP, Eq. 2 smoothed by Eq. 3 (bit/s); ``updated_at``
    is Unix seconds; ``paths`` maps a device interface name to the server's :class:`PathEstimate`
    over it (B and p of Eq. 1–2, "based on the previous transmission", §IV-B-1). A store keeps one per
    (server, device) — that device's own history, as each SSMP client keeps its own in the paper — and one *fleet*
    score per server (:func:`fleet_score` of the devices' states). The plane computes the devices' states; stores
    keep them and aggregate the fleet's.
    """

    q_bps: float
    updated_at: float
    paths: Mapping[str, PathEstimate] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerScoreView:
    """What one device's SSMP selection reads of one server: its own :class:`ServerScore` (None: it has none) and the
    fleet's (None: none stored). Which one counts, and when either is too old, is the adapter's business
    (:mod:`edgepath.adapters.ssmp`)."""

    own: ServerScore | None = None
    fleet: ServerScore | None = None


def fleet_members(
    states: Mapping[str, ServerScore], writer: str, stale_age_s: float, max_devices: int
) -> dict[str, ServerScore]:
    """The device states of one server that count for its fleet score, by device id, after ``writer`` stored its own.

    Dropped: a state older than ``stale_age_s`` at the writer's ``updated_at`` (SSMP §IV-B-1 calls such history
    useless), and beyond ``max_devices`` the least recently updated (``updated_at``, ties by device id): the
    writer's own state is always kept, whatever its clock says. What both stores keep (the Redis store's script
    does the same in Lua); ``states`` must hold ``writer``.

    Raises
    ------
    KeyError
        ``writer`` not in ``states``.
    """
    mine = states[writer]
    others = sorted(
        (
            (device, s)
            for device, s in states.items()
            if device != writer and not mine.updated_at - s.updated_at > stale_age_s
        ),
        key=lambda item: (-item[1].updated_at, item[0]),
    )
    return {writer: mine, **dict(others[: max(0, max_devices - 1)])}


def fleet_score(states: Sequence[ServerScore]) -> ServerScore:
    """The fleet's SSMP state of one server: a robust aggregate of its devices' own states (:func:`fleet_members`).

    ``q_bps`` is the median of the devices' Q (SSMP Eq. 3 per device; Yang et al. run SSMP on each client's own
    measurements, so one shared EWMA fed by every device is not the paper's; the median is the aggregate one device
    moves by at most one rank, whatever it reports: with n devices it stays between the order statistics
    neighbouring the honest median). ``updated_at`` is the newest device state's. Per interface, B and p are each the
    median over the devices that have a value for it, kept only when more than half of the devices have one (an
    interface reported by a minority, e.g. one device's invented name, is left out: a device's own state still has
    it). The median of an even count is the mean of the middle two (:func:`statistics.median`).

    Raises
    ------
    ValueError
        ``states`` is empty.
    """
    if not states:
        raise ValueError("a fleet score needs at least one device state")
    majority = len(states) / 2.0
    bandwidths: dict[str, list[float]] = {}
    losses: dict[str, list[float]] = {}
    for s in states:
        for name, est in s.paths.items():
            if est.bandwidth_bps is not None:
                bandwidths.setdefault(name, []).append(est.bandwidth_bps)
            if est.loss is not None:
                losses.setdefault(name, []).append(est.loss)
    paths: dict[str, PathEstimate] = {}
    for name in sorted(bandwidths.keys() | losses.keys()):
        b = bandwidths.get(name, [])
        p = losses.get(name, [])
        estimate = PathEstimate(
            bandwidth_bps=statistics.median(b) if len(b) > majority else None,
            loss=statistics.median(p) if len(p) > majority else None,
        )
        if estimate != PathEstimate():
            paths[name] = estimate
    return ServerScore(
        q_bps=statistics.median(s.q_bps for s in states),
        updated_at=max(s.updated_at for s in states),
        paths=paths,
    )


# --- end SSMP ---


# --- congestion edge measurements (issue 20) ---
#: Algorithms a store keeps statistics for per profile (bounded memory); a further one takes the place of the least
#: recently reported (:meth:`StateStore.record_cc_measurement`). The congestion adapter counts only the 21 names of
#: ``edgepath.engines.congestion.KNOWN_ALGORITHMS``, so the bound is reached only by names a release before that
#: allow-list counted.
MAX_CC_ALGORITHMS = 32


@dataclass(frozen=True)
class MetricSums:
    """Running statistics of one congestion metric of one algorithm: ``count`` transfers, Σx (``total``), Σx²
    (``total_sq``), in the metric's unit. :func:`edgepath.engines.congestion.edge_stats` turns them into a mean
    and 95 % CI."""

    count: int
    total: float
    total_sq: float


# --- end congestion edge measurements ---


# --- MEC 015 traffic steering sessions (issue 19) ---
@dataclass(frozen=True)
class MtsSession:
    """A MEC 015 MTS session bound to a device (ETSI GS MEC 015 v2.1.1 §7.2.5).

    ``info`` is the ``MtsSessionInfo`` JSON object as the MEC application sent it (camelCase
    keys, validated by the REST transport) plus ``sessionId``; ``device_id`` is the EdgePath device it
    steers; ``created_at`` Unix seconds. Stores keep it opaque.
    """

    session_id: str
    device_id: str
    info: str
    created_at: float


# --- end MEC 015 ---


# --- decision log (issue 18) ---
#: Version of the exported decision-log line (``edgepath log export``); readers accept this one.
DECISION_LOG_FORMAT = "edgepath.decision-log/1"


@dataclass(frozen=True)
class LoggedDecision:
    """One joined decision of the decision log: what was decided, with which propensity, and what came of it.

    Written once per decision, when its first outcome is claimed (so a decision never reported on is
    not in the log). One exported JSONL line is ``dataclasses.asdict`` of this record plus
    ``"format": DECISION_LOG_FORMAT``; ``edgepath train-offline --decision-log`` and ``edgepath eval
    ope`` read that format (:func:`edgepath.training.offline.read_decision_log`).

    ``context`` is the request's ``interfaces`` as received (list of objects; absent measurements
    absent), ``features`` the encoded vector of ``engines.features.FEATURE_NAMES`` the policy saw;
    ``arms`` access types in policy order, ``arm_index`` the chosen one, ``propensity`` its exact
    probability under ``policy`` (the ridge policies draw with ``propensity_floor`` already in the
    distribution, so theirs is exact; the paper's policies log ``max(propensity_floor, p)``, a bound
    when their ``p`` is below the floor; see ``engines.primary_path``). Reward inputs: ``throughput_bps``
    (bit/s), ``latency_ms`` (ms), ``loss`` (fraction) as reported, and ``reward`` (Bernoulli, the
    wire's). ``decided_at``/``reported_at`` are Unix seconds. ``learner_arm_index`` is the arm an
    apprentice learner would have chosen (None outside apprentice mode).
    """

    decision_id: str
    device_id: str
    decided_at: float
    reported_at: float
    model_version: int
    policy: str
    arms: tuple[str, ...]
    arm_index: int
    interface: str
    propensity: float
    features: tuple[float, ...]
    context: tuple[dict[str, object], ...]
    throughput_bps: float
    latency_ms: float | None
    loss: float | None
    reward: int
    learner_arm_index: int | None = None


# --- end decision log ---


@runtime_checkable
class StateStore(Protocol):
    """Async state store used by the plane (decisions, outcomes) and the trainer."""

    #: True when the store's calls wait on the network (Redis): the plane then overlaps a decision's write with
    #: the engine adapters' reads, so that both go out in one round trip (the reply still waits for the write).
    #: False for the in-process store, whose calls never wait (a task per write would only cost CPU).
    overlaps_io: bool

    async def put_decision(self, record: DecisionRecord, ttl_s: float) -> None:
        """Store a decision for ``ttl_s`` seconds."""

    async def put_decisions(self, records: Sequence[DecisionRecord], ttl_s: float) -> None:
        """Store many decisions for ``ttl_s`` seconds in one store call (``RecommendBatch``; Redis: one pipeline)."""

    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        """The decision, or None when unknown or expired."""

    async def claim_outcome(self, outcome: OutcomeRecord, log_entry: LoggedDecision | None = None) -> ClaimResult:
        """Atomically record the first outcome of a decision and append it to the outcome log.

        Returns NEW the first time, DUPLICATE afterwards (nothing appended),
        UNKNOWN when the decision does not exist or has expired.

        ``log_entry``: on NEW, also appended to the decision log as :meth:`append_decision_log` would (Redis: in the
        same script, one round trip instead of two; dropped and counted, never raising, where the store cannot
        take it). Never appended on DUPLICATE or UNKNOWN.
        """

    async def read_outcomes(self, consumer: str, count: int, block_ms: int) -> list[tuple[str, OutcomeRecord]]:
        """Up to ``count`` unacknowledged outcomes for ``consumer``, waiting up to ``block_ms``.

        Entries delivered but not acknowledged are delivered again to the next
        reader after a restart.
        """

    async def read_outcome_rows(
        self, consumer: str, count: int, block_ms: int, min_count: int = 1
    ) -> list[tuple[str, OutcomeRow]]:
        """What :meth:`read_outcomes` reads, each outcome as its :data:`OutcomeRow`: the trainer's form, which its refit
        worker turns into samples, so a trainer in the serving process builds no object per outcome (issue 16).

        ``min_count``: wait (up to ``block_ms``) until this many are waiting, not just one, so that a reader wakes
        once per batch instead of once per outcome (Kafka's ``fetch.min.bytes``). A store may return as soon as one
        is there: the Redis store does (``XREADGROUP BLOCK`` has no minimum; its trainer runs in its own process).
        """

    async def ack_outcomes(self, entry_ids: list[str]) -> None:
        """Acknowledge outcomes the model has used."""

    # --- SSMP per-server state (issue 4) ---
    async def get_server_scores(self, keys: Sequence[str]) -> dict[str, ServerScore]:
        """The stored *fleet* :class:`ServerScore` of each of ``keys`` that has one.

        ``keys`` are server keys (the plane uses the server address), at most a few dozen per
        call (the candidates of one request). Keys without a score are simply absent from the
        result; never raises for unknown keys.
        """

    async def get_server_views(self, keys: Sequence[str], device_id: str) -> dict[str, ServerScoreView]:
        """What ``device_id`` reads of each of ``keys``: its own state and the fleet's (:class:`ServerScoreView`).

        One store call for all keys (Redis: one script in the auto-pipeline, one round trip: what SSMP's selection
        reads per Recommend). Keys with neither are absent; never raises for unknown keys.
        """

    async def record_device_server_score(
        self, key: str, device_id: str, score: ServerScore, stale_age_s: float, max_devices: int
    ) -> None:
        """Store ``score`` as ``device_id``'s own state of server ``key`` (replacing its previous one), then the
        server's fleet score: :func:`fleet_score` of :func:`fleet_members` (``stale_age_s`` s, at most
        ``max_devices`` devices; the others' states dropped from the store). Atomic per server (Redis: one Lua
        script), so concurrent outcomes of different devices, on any replicas, never lose each other's states.

        A device's own Eq. 3 step is still read, smoothed and written by the plane: two concurrent outcomes of the
        same device for one server may lose one smoothing step (harmless for an EWMA). A store may evict servers
        not updated for a long time (bounded memory, or a TTL no shorter than ``ssmp_stale_age_s``): an evicted
        server just reads as never measured.
        """

    async def update_server_score(
        self, key: str, q_bps: float, updated_at: float, paths: Mapping[str, PathEstimate] | None = None
    ) -> None:
        """Store ``ServerScore(q_bps, updated_at, paths or {})`` as the *fleet* score of ``key``, replacing it (the
        devices' own states are kept; the next :meth:`record_device_server_score` for ``key`` recomputes the fleet
        score from them). For seeding and tests: the plane learns through :meth:`record_device_server_score`.
        """

    # --- end SSMP ---

    # --- congestion edge measurements (issue 20) ---
    async def record_cc_measurement(self, profile: str, algorithm: str, metrics: Mapping[str, float]) -> None:
        """Add one transfer's ``metrics`` (metric name → finite value) to the running statistics of
        (``profile``, ``algorithm``): per metric, count + 1, Σx + x, Σx² + x², all at once (Redis: one script).

        The plane calls it once per decision (its first accepted outcome). At most :data:`MAX_CC_ALGORITHMS`
        algorithms are kept per profile: a measurement of a further one evicts the statistics of the algorithm
        reported least recently (in a Redis hash written by a release before this rule: one of those it holds, by
        name), and its own start from it. Least *recently* rather than least often: a profile whose places names
        nobody reports any more had filled (before the adapter's allow-list, 32 made-up ones) learns again as soon
        as real algorithms are reported, whatever counts those names had run up; before, the further algorithm was
        dropped and the profile never learned again. Never raises for an unreachable store (the measurement is
        then dropped: one transfer less of evidence).
        """

    async def cc_measurement_stats(self, profile: str) -> dict[str, dict[str, MetricSums]] | None:
        """``{algorithm: {metric: MetricSums}}`` recorded for ``profile`` ({} when nothing was), or None when
        the store cannot answer now (Redis unreachable: the caller keeps what it read before)."""

    # --- end congestion edge measurements ---

    # --- MEC 015 traffic steering sessions (issue 19) ---
    async def put_mts_session(
        self,
        session: MtsSession,
        *,
        device_sessions: Sequence[MtsSession] | None = None,
        max_sessions: int | None = None,
    ) -> bool:
        """Create or replace ``session`` (by ``session_id``; a replacement may name another device); True when written.

        A conditional write, its conditions checked atomically with it (replicas sharing the store): with
        ``device_sessions`` (the sessions of ``session.device_id`` other than ``session`` that the caller validated
        it against: the MEC 015 API's per-device bounds) nothing is written and False returned when the device's
        other sessions (their ids and ``info``) are not those any more; with ``max_sessions``, when ``session`` is
        new and the store holds that many sessions. The caller then reads and validates again.

        Raises
        ------
        edgepath.errors.Unavailable
            The store cannot write now (Redis unreachable).
        """

    async def get_mts_session(self, session_id: str) -> MtsSession | None:
        """The session, or None when unknown.

        Raises
        ------
        edgepath.errors.Unavailable
            The store cannot answer now (Redis unreachable): not None, so that the API does not report an
            existing session as unknown.
        """

    async def list_mts_sessions(self) -> list[MtsSession]:
        """Every session, oldest first.

        Raises
        ------
        edgepath.errors.Unavailable
            The store cannot answer now (Redis unreachable): not ``[]``.
        """

    async def delete_mts_session(self, session_id: str) -> bool:
        """Remove the session; False when it did not exist.

        Raises
        ------
        edgepath.errors.Unavailable
            The store cannot write now (Redis unreachable).
        """

    async def device_mts_sessions(self, device_id: str) -> list[MtsSession]:
        """The device's sessions, oldest first (read on every recommendation: one round trip).

        The decision path's read: never raises for an unreachable store, which then reads as no session (the
        device gets the default rule). The MEC 015 API reads with :meth:`list_mts_sessions`, which raises.
        """

    async def devices_mts_sessions(self, device_ids: Sequence[str]) -> list[list[MtsSession]]:
        """:meth:`device_mts_sessions` of each of ``device_ids``, in order, in one store call (``RecommendBatch``;
        Redis: one pipeline). Never raises for an unreachable store (every device reads as having no session)."""

    async def record_device_accesses(self, device_id: str, access_types: Sequence[str]) -> None:
        """Remember the access types (``AccessType`` values) ``device_id`` reported last.

        What MEC 015 capability info and session validation read; a store may expire devices
        not seen for a long time (they then read as unknown). Never raises for an unreachable store (the
        report is then dropped; the device reports again with its next request).
        """

    async def device_accesses(self, device_id: str) -> tuple[str, ...] | None:
        """The access types ``device_id`` reported last, or None for a device never seen.

        Raises
        ------
        edgepath.errors.Unavailable
            The store cannot answer now (Redis unreachable): not None, so that the API does not call a known
            device unknown.
        """

    async def reported_access_types(self) -> set[str]:
        """Every access type any device has reported (MEC 015 ``mtsAccessInfo``).

        Raises
        ------
        edgepath.errors.Unavailable
            The store cannot answer now (Redis unreachable): not an empty set.
        """

    # --- end MEC 015 ---

    # --- decision log (issue 18) ---
    async def append_decision_log(self, entry: LoggedDecision) -> None:
        """Append a joined decision to the bounded decision log (oldest entries age out first).

        Never raises for an unreachable store: the entry is then dropped and counted (the log is a
        product for evaluation, not on the serving path's critical state).
        """

    async def read_decision_log(
        self, since_s: float = 0.0, after: str | None = None, count: int = 1000
    ) -> tuple[list[LoggedDecision], str | None]:
        """One page of the decision log, oldest first: entries joined at/after ``since_s`` (Unix s).

        ``after`` is the cursor returned by the previous page (None for the first); the second
        element of the result is the next cursor, None when the log is exhausted. Pages are
        bounded by ``count`` so that an export never holds the store for long.
        """

    # --- end decision log ---

    async def ping(self) -> bool:
        """True when the store is reachable."""

    def unready_reason(self) -> str:
        """Why :meth:`ping` said False, as the readiness watcher logs it (``state store unreachable``, or what else
        holds the store's readiness: a replay of journaled outcomes into a reachable store, ...)."""

    async def close(self) -> None:
        """Release connections."""


def display_url(url: str) -> str:
    """``url`` fit for logs and status: a password in it (``redis://:SECRET@redis:6379/0``, as the chart composes
    the store URL from its Secret) replaced by ``***``; anything else as given.

    >>> display_url("redis://:s3cret@redis:6379/0")
    'redis://:***@redis:6379/0'
    >>> display_url("redis://user:s3cret@redis/1")
    'redis://user:***@redis/1'
    >>> display_url("memory://")
    'memory://'
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
