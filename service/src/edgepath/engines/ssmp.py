"""SSMP: CDN server selection for multipath (MPTCP) clients (pure engine).

Source: J. Yang, J. Han, Y. Xing, Y. Zhang, W. Wei, K. Xue, "SSMP: Server
Selection for Multipath TCP in CDN Environments", Section IV-B.

A device resolves the content name over every interface; each DNS answer is a
*candidate* server, measured over every path (subflow) the device has to it.
The engine picks one candidate:

* **Flow class** — *mice* below ``mice_threshold_bytes`` (the paper streams
  video buffers "< 1 MB" as mice and downloads 1–1000 KB files with the mice
  strategy, so the default threshold is 1 MiB = 1 048 576 bytes), *elephant*
  otherwise.
* **Mice** — smallest mean RTT over the server's subflows,
  ``q = Σ RTT_i / n`` (§IV-B-2); a tie goes to the server with the shortest
  single-path RTT; the initial subflow leaves on the interface with the smallest
  RTT to the chosen server.
* **Elephants** — when every candidate is the same server, a random pick
  (injected RNG); otherwise the largest

  - Eq. 1 (Mathis et al. throughput bound, ref. [15] of the paper):
    ``T_i = MSS · C / (RTT_i · √p_i)``, MSS = 1460 bytes, C = √(3/2);
  - Eq. 2: ``Q = Σ_i β_i · min(T_i, B_i)``, ``β_i = min_j RTT_j / RTT_i``;
  - Eq. 3: ``Q_n = α · Q_new + (1 − α) · Q_{n−1}`` with the server's stored
    ``Q_{n−1}`` (see :func:`smooth_q`).

  Until B and p are known for every path of every candidate the engine keeps
  the default server selection (DSS: the default interface's DNS answer), as
  the paper does.

**p = 0.** Eq. 1 diverges when no loss was observed. We read it as the paper's
own premise (Eq. 1 is the throughput "under unlimited bandwidth"): with no loss
the path is bandwidth-limited, ``T_i = +∞`` and ``min(T_i, B_i) = B_i``. An
*unknown* loss (``None``) is not 0: it keeps the DSS default.

**Stale servers.** A server whose stored score is older than
``stale_age_s`` (or that has none) is listed in ``stale_servers`` so the agent
probes it (§IV-B-1: "we send probe packets ... when a server has not been used
for a long time"). A stale ``Q_{n−1}`` is not smoothed in: the score is then
``Q_new`` alone.

**Whose history.** The paper runs SSMP on each client, on that client's own
transfers. The service serves many devices, so its store keeps per (server,
device) the device's own Eq. 3 state, and per server a *fleet* state: the median
of the devices' Q (and, per interface, of their B and p) over at most
``fleet_devices`` devices with a fresh state, the most recently updated
(:func:`edgepath.state.base.fleet_score`). A device's selection reads its own
fresh state of a server, else the fleet's (:mod:`edgepath.adapters.ssmp`): what
one device reports moves other devices' scores by at most one rank of that
median. The engine sees one :class:`ServerState` per server either way.

Units: RTT in ms in the inputs (seconds inside Eq. 1), loss as a fraction in
[0, 1], bandwidth and Q in bit/s, sizes in bytes, times in Unix seconds.
The engine does no I/O: per-server state comes in and goes out as plain data.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

#: Maximum segment size of the paper's testbed, bytes (§IV-B-1).
MSS_BYTES = 1460
#: Constant of Eq. 1 for random loss, √(3/2) (Mathis et al., 1997).
MATHIS_C = math.sqrt(1.5)
#: Default mice/elephant threshold: 1 MiB (see the module docstring).
DEFAULT_MICE_THRESHOLD_BYTES = 1_048_576
#: Devices whose fresh states make up a server's fleet score, by default (``settings.ssmp.fleet_devices``).
DEFAULT_FLEET_DEVICES = 16
#: Largest ``fleet_devices``: what one outcome's store write reads, sorts and aggregates (on Redis inside a script,
#: which holds Redis meanwhile).
MAX_FLEET_DEVICES = 64

_REL_TOL = 1e-9


class FlowClass(enum.StrEnum):
    """Elephant or mice flow (§IV-B)."""

    MICE = "MICE"
    ELEPHANT = "ELEPHANT"


class Rule(enum.StrEnum):
    """Which rule decided the server."""

    SINGLE_CANDIDATE = "single_candidate"
    MICE_MEAN_RTT = "mice_mean_rtt"
    MICE_MIN_RTT_TIEBREAK = "mice_min_rtt_tiebreak"
    MICE_DSS_UNMEASURED = "mice_dss_unmeasured"
    ELEPHANT_IDENTICAL_RANDOM = "elephant_identical_random"
    ELEPHANT_Q = "elephant_q"
    ELEPHANT_Q_TIE_RANDOM = "elephant_q_tie_random"
    ELEPHANT_DSS_UNMEASURED = "elephant_dss_unmeasured"


class PathLike(Protocol):
    """One path (subflow) from the device to a candidate server."""

    @property
    def interface(self) -> str: ...
    @property
    def rtt_ms_samples(self) -> Sequence[float]: ...
    @property
    def loss(self) -> float | None: ...
    @property
    def bandwidth_bps(self) -> float | None: ...


class CandidateLike(Protocol):
    """A candidate server: one DNS answer and its paths."""

    @property
    def address(self) -> str: ...
    @property
    def dns_interface(self) -> str: ...
    @property
    def paths(self) -> Sequence[PathLike]: ...


@dataclass(frozen=True)
class PathMeasurement:
    """Plain-data :class:`PathLike` (used by the evaluation and tests).

    Attributes
    ----------
    interface: device interface the subflow leaves on.
    rtt_ms_samples: RTT samples of this path, ms (each > 0); their mean is the path RTT.
    loss: packet loss rate p, fraction in [0, 1], or None when unknown.
    bandwidth_bps: achievable bandwidth B from past transfers, bit/s, or None when unknown.
    """

    interface: str
    rtt_ms_samples: tuple[float, ...]
    loss: float | None = None
    bandwidth_bps: float | None = None


@dataclass(frozen=True)
class Candidate:
    """Plain-data :class:`CandidateLike`: ``address`` answered by the DNS of ``dns_interface``."""

    address: str
    dns_interface: str
    paths: tuple[PathMeasurement, ...]


@dataclass(frozen=True)
class ServerState:
    """Per-server SSMP state kept in the state store: smoothed ``q_bps`` (Eq. 3, bit/s) and when it was updated (Unix
    s) — the deciding device's own, or the fleet's (module docstring, "Whose history")."""

    q_bps: float
    updated_at: float


@dataclass(frozen=True)
class SsmpConfig:
    """Engine parameters.

    Attributes
    ----------
    mice_threshold_bytes: flows smaller than this are mice (default 1 MiB).
    alpha: EWMA weight of the new estimate in Eq. 3, in [0, 1] (paper tries 0.2, 0.5, 0.8).
    stale_age_s: a server's score older than this is stale (probe it; not smoothed in), s.
    mss_bytes: MSS of Eq. 1, bytes.
    fleet_devices: at most this many devices' fresh states (the most recently updated) make up a server's fleet
        score, in [1, :data:`MAX_FLEET_DEVICES`] (module docstring, "Whose history"); the engine itself does not
        use it, the adapter passes it to the store.

    Raises
    ------
    ValueError
        A value out of its range.
    """

    mice_threshold_bytes: int = DEFAULT_MICE_THRESHOLD_BYTES
    alpha: float = 0.5
    stale_age_s: float = 600.0
    mss_bytes: int = MSS_BYTES
    fleet_devices: int = DEFAULT_FLEET_DEVICES

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if self.mice_threshold_bytes < 0 or self.stale_age_s <= 0 or self.mss_bytes <= 0:
            raise ValueError("mice_threshold_bytes >= 0, stale_age_s > 0 and mss_bytes > 0 are required")
        if not 1 <= self.fleet_devices <= MAX_FLEET_DEVICES:
            raise ValueError(f"fleet_devices must be in [1, {MAX_FLEET_DEVICES}], got {self.fleet_devices}")


@dataclass(frozen=True)
class ServerSelection:
    """The engine's answer.

    Attributes
    ----------
    address: chosen server.
    candidate_index: index of the chosen candidate in the input sequence.
    flow_class: mice or elephant.
    score: mean RTT in ms (mice, smaller is better), Q in bit/s (elephant, larger is better),
        or NaN when no score decided (DSS, single or identical candidates).
    score_name: ``"mean_rtt_ms"``, ``"q_bps"`` or ``""``.
    initial_subflow_interface: interface with the smallest RTT to the chosen server
        (the DNS interface of the chosen answer when no RTT is known).
    rule: the :class:`Rule` that decided.
    stale_servers: candidate addresses to probe (no score, or older than ``stale_age_s``), input order.
    scores: every distinct candidate's score, same unit as ``score`` (empty when none was computed).
    q_new_bps: elephant only: the unsmoothed Eq. 2 estimate per address.
    """

    address: str
    candidate_index: int
    flow_class: FlowClass
    score: float
    score_name: str
    initial_subflow_interface: str
    rule: Rule
    stale_servers: tuple[str, ...]
    scores: dict[str, float] = field(default_factory=dict)
    q_new_bps: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- formulas


def path_rtt_ms(path: PathLike) -> float | None:
    """The path's RTT estimate: mean of its samples, ms; None when there is none.

    The paper uses "the latest RTTs" measured by a few pings (§IV-B-2); the mean
    of those few samples damps ping jitter.
    """
    samples = path.rtt_ms_samples
    if not samples:
        return None
    return float(sum(samples) / len(samples))


def mathis_throughput_bps(rtt_ms: float, loss: float, mss_bytes: int = MSS_BYTES) -> float:
    """Eq. 1 of SSMP (Mathis et al. 1997): ``T = MSS · C / (RTT · √p)`` in bit/s.

    Parameters
    ----------
    rtt_ms: round-trip time, ms (> 0).
    loss: loss rate p, fraction in [0, 1]. ``p = 0`` returns ``+inf`` (no loss: the
        path is bandwidth-limited, see the module docstring).
    mss_bytes: segment size, bytes.

    Raises
    ------
    ValueError
        ``rtt_ms <= 0`` or ``loss`` outside [0, 1].
    """
    if not rtt_ms > 0.0:
        raise ValueError(f"rtt_ms must be > 0, got {rtt_ms}")
    if not 0.0 <= loss <= 1.0:
        raise ValueError(f"loss must be in [0, 1], got {loss}")
    if loss == 0.0:
        return math.inf
    return mss_bytes * 8.0 * MATHIS_C / ((rtt_ms / 1000.0) * math.sqrt(loss))


def server_q_bps(
    rtts_ms: Sequence[float], losses: Sequence[float], bandwidths_bps: Sequence[float], mss_bytes: int = MSS_BYTES
) -> float:
    """Eq. 2 of SSMP: ``Q = Σ_i β_i · min(T_i, B_i)``, ``β_i = min_j RTT_j / RTT_i``, bit/s.

    Parameters
    ----------
    rtts_ms, losses, bandwidths_bps: per subflow i (same length n ≥ 1): RTT (ms, > 0),
        loss p (fraction), achievable bandwidth B (bit/s, ≥ 0).

    Raises
    ------
    ValueError
        Empty or unequal sequences, or a value out of range.
    """
    n = len(rtts_ms)
    if n == 0 or len(losses) != n or len(bandwidths_bps) != n:
        raise ValueError("need one RTT, loss and bandwidth per subflow (n >= 1)")
    if any(b < 0.0 for b in bandwidths_bps):
        raise ValueError("bandwidth_bps must be >= 0")
    rtt_min = min(rtts_ms)
    q = 0.0
    for rtt, p, b in zip(rtts_ms, losses, bandwidths_bps, strict=True):
        t = mathis_throughput_bps(rtt, p, mss_bytes)
        q += (rtt_min / rtt) * min(t, b)
    return q


def smooth_q(q_new_bps: float, previous: ServerState | None, alpha: float, now_s: float, stale_age_s: float) -> float:
    """Eq. 3 of SSMP: ``Q_n = α · Q_new + (1 − α) · Q_{n−1}``.

    Without a previous value, or when it is older than ``stale_age_s`` (the paper
    calls such history useless), ``Q_n = Q_new``.
    """
    if previous is None or is_stale(previous, now_s, stale_age_s):
        return q_new_bps
    return alpha * q_new_bps + (1.0 - alpha) * previous.q_bps


def is_stale(state: ServerState | None, now_s: float, stale_age_s: float) -> bool:
    """True when there is no state or it was updated more than ``stale_age_s`` before ``now_s``."""
    return state is None or now_s - state.updated_at > stale_age_s


def candidate_q_new_bps(candidate: CandidateLike, mss_bytes: int = MSS_BYTES) -> float | None:
    """Eq. 2 on a candidate's paths, or None when an RTT, p or B is unknown on some path."""
    rtts: list[float] = []
    losses: list[float] = []
    bandwidths: list[float] = []
    for path in candidate.paths:
        rtt = path_rtt_ms(path)
        if rtt is None or path.loss is None or path.bandwidth_bps is None:
            return None
        rtts.append(rtt)
        losses.append(path.loss)
        bandwidths.append(path.bandwidth_bps)
    if not rtts:
        return None
    return server_q_bps(rtts, losses, bandwidths, mss_bytes)


def transfer_q_new_bps(
    size_bytes: int, duration_ms: float, paths: Sequence[PathLike], mss_bytes: int = MSS_BYTES
) -> float:
    """``Q_new`` of a completed transfer, bit/s: Eq. 2 on the subflows it measured, else its goodput.

    With an RTT, p and B measured on every path the score is Eq. 2, as at decision time;
    without them it is the transfer's goodput ``8 · size_bytes / duration`` — the aggregate
    rate the server actually delivered, the quantity Q estimates (§IV-B-1 updates Q "whenever
    the transmission is completed").

    Raises
    ------
    ValueError
        ``duration_ms <= 0`` or ``size_bytes < 0``.
    """
    if not duration_ms > 0.0 or size_bytes < 0:
        raise ValueError("duration_ms must be > 0 and size_bytes >= 0")
    rtts: list[float] = []
    losses: list[float] = []
    bandwidths: list[float] = []
    for path in paths:
        rtt = path_rtt_ms(path)
        if rtt is None or path.loss is None or path.bandwidth_bps is None:
            break
        rtts.append(rtt)
        losses.append(path.loss)
        bandwidths.append(path.bandwidth_bps)
    else:
        if rtts:
            return server_q_bps(rtts, losses, bandwidths, mss_bytes)
    return 8.0 * size_bytes / (duration_ms / 1000.0)


def initial_subflow_interface(candidate: CandidateLike) -> str:
    """Interface of the candidate's path with the smallest RTT (§IV-B-2); its DNS interface when none is known."""
    best: tuple[float, str] | None = None
    for path in candidate.paths:
        rtt = path_rtt_ms(path)
        if rtt is not None and (best is None or rtt < best[0]):
            best = (rtt, path.interface)
    return best[1] if best is not None else candidate.dns_interface


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL_TOL, abs_tol=1e-12)


# ---------------------------------------------------------------------------------------------- selector


class SsmpSelector:
    """SSMP server selection (estimator-like: :meth:`decide`, :meth:`update`; no I/O).

    Parameters
    ----------
    config: :class:`SsmpConfig`.
    rng: random generator for the random picks among identical candidates or tied Q.
    """

    def __init__(self, config: SsmpConfig | None = None, rng: np.random.Generator | None = None) -> None:
        self.config = config or SsmpConfig()
        self.rng = rng if rng is not None else np.random.default_rng(0)

    def flow_class(self, size_bytes: int) -> FlowClass:
        """Mice below ``mice_threshold_bytes``, elephant otherwise."""
        return FlowClass.MICE if size_bytes < self.config.mice_threshold_bytes else FlowClass.ELEPHANT

    def stale_servers(
        self, candidates: Sequence[CandidateLike], states: Mapping[str, ServerState], now_s: float
    ) -> tuple[str, ...]:
        """Distinct candidate addresses (input order) whose state is missing or older than ``stale_age_s``."""
        out: list[str] = []
        for c in candidates:
            if c.address not in out and is_stale(states.get(c.address), now_s, self.config.stale_age_s):
                out.append(c.address)
        return tuple(out)

    def decide(
        self,
        size_bytes: int,
        candidates: Sequence[CandidateLike],
        states: Mapping[str, ServerState],
        now_s: float,
        default_index: int = 0,
    ) -> ServerSelection:
        """Choose a server for a transfer of ``size_bytes``.

        Parameters
        ----------
        size_bytes: expected content size, bytes (≥ 0).
        candidates: DNS answers (≥ 1), each with its measured paths.
        states: stored per-server state by address (addresses without state may be absent).
        now_s: current time, Unix seconds (for staleness).
        default_index: index of the DSS answer (the default interface's DNS answer).

        Returns
        -------
        ServerSelection

        Raises
        ------
        ValueError
            No candidates, negative size, or ``default_index`` out of range.
        """
        if not candidates:
            raise ValueError("at least one candidate server is required")
        if size_bytes < 0:
            raise ValueError("size_bytes must be >= 0")
        if not 0 <= default_index < len(candidates):
            raise ValueError("default_index out of range")
        flow = self.flow_class(size_bytes)
        stale = self.stale_servers(candidates, states, now_s)
        if len(candidates) == 1:
            return self._pick(candidates, 0, flow, Rule.SINGLE_CANDIDATE, math.nan, "", stale)
        if flow is FlowClass.MICE:
            return self._decide_mice(candidates, default_index, stale)
        return self._decide_elephant(candidates, states, now_s, default_index, stale)

    def update(self, q_new_bps: float, previous: ServerState | None, now_s: float) -> ServerState:
        """New stored state after a completed transfer measured ``q_new_bps`` (Eq. 3)."""
        q = smooth_q(q_new_bps, previous, self.config.alpha, now_s, self.config.stale_age_s)
        return ServerState(q_bps=q, updated_at=now_s)

    # -- rules --------------------------------------------------------------------------------------

    def _pick(
        self,
        candidates: Sequence[CandidateLike],
        index: int,
        flow: FlowClass,
        rule: Rule,
        score: float,
        score_name: str,
        stale: tuple[str, ...],
        scores: dict[str, float] | None = None,
        q_new: dict[str, float] | None = None,
    ) -> ServerSelection:
        chosen = candidates[index]
        return ServerSelection(
            address=chosen.address,
            candidate_index=index,
            flow_class=flow,
            score=score,
            score_name=score_name,
            initial_subflow_interface=initial_subflow_interface(chosen),
            rule=rule,
            stale_servers=stale,
            scores=scores or {},
            q_new_bps=q_new or {},
        )

    def _decide_mice(
        self, candidates: Sequence[CandidateLike], default_index: int, stale: tuple[str, ...]
    ) -> ServerSelection:
        means: list[float] = []
        mins: list[float] = []
        for c in candidates:
            rtts = [r for r in (path_rtt_ms(p) for p in c.paths) if r is not None]
            if not rtts:
                return self._pick(
                    candidates, default_index, FlowClass.MICE, Rule.MICE_DSS_UNMEASURED, math.nan, "", stale
                )
            means.append(sum(rtts) / len(rtts))
            mins.append(min(rtts))
        best_mean = min(means)
        tied = [i for i, m in enumerate(means) if _close(m, best_mean)]
        scores = {c.address: m for c, m in zip(candidates, means, strict=True)}
        distinct = {candidates[i].address for i in tied}
        if len(distinct) == 1:
            return self._pick(
                candidates, tied[0], FlowClass.MICE, Rule.MICE_MEAN_RTT, best_mean, "mean_rtt_ms", stale, scores
            )
        best_min = min(mins[i] for i in tied)
        # Still tied on the shortest path: prefer the DSS answer, then input order (deterministic).
        finalists = [i for i in tied if _close(mins[i], best_min)]
        index = default_index if default_index in finalists else finalists[0]
        return self._pick(
            candidates, index, FlowClass.MICE, Rule.MICE_MIN_RTT_TIEBREAK, best_mean, "mean_rtt_ms", stale, scores
        )

    def _decide_elephant(
        self,
        candidates: Sequence[CandidateLike],
        states: Mapping[str, ServerState],
        now_s: float,
        default_index: int,
        stale: tuple[str, ...],
    ) -> ServerSelection:
        if len({c.address for c in candidates}) == 1:
            index = int(self.rng.integers(len(candidates)))
            return self._pick(
                candidates, index, FlowClass.ELEPHANT, Rule.ELEPHANT_IDENTICAL_RANDOM, math.nan, "", stale
            )
        q_new: dict[str, float] = {}
        for c in candidates:
            q = candidate_q_new_bps(c, self.config.mss_bytes)
            if q is None:  # B or p (or RTT) not known yet: keep DSS (§IV-B-1)
                return self._pick(
                    candidates, default_index, FlowClass.ELEPHANT, Rule.ELEPHANT_DSS_UNMEASURED, math.nan, "", stale
                )
            # A server answered on several interfaces with different measurements: keep its best estimate.
            q_new[c.address] = max(q, q_new.get(c.address, -math.inf))
        scores = {
            a: smooth_q(q, states.get(a), self.config.alpha, now_s, self.config.stale_age_s) for a, q in q_new.items()
        }
        per_index = [scores[c.address] for c in candidates]
        best = max(per_index)
        tied = [i for i, s in enumerate(per_index) if _close(s, best)]
        if len({candidates[i].address for i in tied}) > 1:
            index = tied[int(self.rng.integers(len(tied)))]
            rule = Rule.ELEPHANT_Q_TIE_RANDOM
        else:
            # Same server answered twice: take the answer whose own paths scored best.
            own = [candidate_q_new_bps(candidates[i], self.config.mss_bytes) or 0.0 for i in tied]
            index = tied[int(np.argmax(own))]
            rule = Rule.ELEPHANT_Q
        return self._pick(candidates, index, FlowClass.ELEPHANT, rule, best, "q_bps", stale, scores, q_new)
