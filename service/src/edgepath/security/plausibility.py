"""Bounded learning: what an outcome must pass before the model may learn from it.

A forged or broken outcome poisons the shared model for every device, so the
decision plane asks :class:`OutcomeGuard` before it queues an outcome:

1. **Quarantine.** Outcomes of a quarantined device are acknowledged
   (``accepted=False``) but never queued for training; the device is not told
   why. Admins add and remove devices (REST ``/v1/admin/quarantine``; initial
   set from the ``quarantined_devices`` setting).
2. **Plausibility.** The reported throughput may not exceed
   ``plausibility_factor`` × the capacity the device itself reported in the
   decision's context, as the decision record keeps it
   (``DecisionRecord.link_speed_mbps``, filled by :func:`reported_link_speeds_mbps`).
   MPTCP may aggregate every offered path, so the capacity is the *sum* over the
   offered access types of the reported link speed (``link_speed_mbps``, WiFi and
   Ethernet) or, where none was reported, the technology's peak rate
   (:data:`ACCESS_PEAK_BPS`). Decisions logged before the record carried the
   link speeds (at most ``decision_ttl_s`` after an upgrade) get the peak rates. The default factor 1.5
   leaves room for timing error on short transfers: goodput is below the PHY
   rate in practice. An implausible outcome is rejected as invalid input
   naming ``throughput_bps``, and counted (``edgepath_outcomes_total{result="implausible"}``); the same bound
   applies to every other rate the report carries that another device's answer is built from: the rate an SSMP
   ``server_transfer`` implies (``size_bytes`` × 8 / duration) and each of its paths' ``bandwidth_bps`` (the
   server's Eq. 2 score, which the SSMP learner also bounds by it), and ``congestion_measurement.throughput_bps``
   (the congestion engine's edge statistics). A ``server_transfer`` must name one of the decision's candidate
   servers (``DecisionRecord.server_candidates``), or it is refused naming ``server_transfer.address`` (a record
   written by a release before that field is held to the rate bounds only: :meth:`OutcomeGuard.admission`).
3. **Per-device cap.** At most ``outcome_cap_per_window`` outcome reports per
   device per ``outcome_window_s`` (a token bucket with that capacity refilling
   over the window); beyond it the outcome is refused as rate limited, so no
   single device can dominate a training batch for long. The token is taken as
   the report arrives (:meth:`OutcomeGuard.take_cap_token`), before its decision
   is looked up, so every report counts, including those then refused as
   unknown, another device's or implausible, and a quarantined device's; on
   Redis the token's script shares the decision lookup's round trip.

What remains possible (documented in SECURITY.md): a device may lie *within*
these bounds (e.g. report low throughput for a good path), up to its cap.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

from edgepath.errors import InvalidInput
from edgepath.security.ratelimit import RateLimiter, in_process, refuse_if_limited
from edgepath.state.base import DecisionRecord

# The quarantine sets live with the state backends (edgepath.state.limits); re-exported for callers of this module.
from edgepath.state.limits import MemoryQuarantine, QuarantineSet, RedisQuarantine
from edgepath.types import AccessType, InterfaceContext, OutcomeReport, ServerTransfer

__all__ = [
    "ACCESS_PEAK_BPS",
    "LINK_SPEED_ACCESS",
    "MemoryQuarantine",
    "OutcomeGuard",
    "QuarantineSet",
    "RedisQuarantine",
    "reported_capacity_bps",
    "reported_link_speeds_mbps",
]

#: Peak downlink rate per access technology, bit/s: the capacity assumed when a device reports no link speed.
ACCESS_PEAK_BPS: dict[AccessType, float] = {
    AccessType.WIFI: 46e9,  # IEEE 802.11be (Wi-Fi 7) maximum PHY rate ≈ 46 Gbit/s
    AccessType.LTE: 4e9,  # 3GPP TS 36.306 UE DL category 26 ≈ 3.9 Gbit/s
    AccessType.NR: 20e9,  # ITU-R M.2410 IMT-2020 peak downlink data rate
    AccessType.ETHERNET: 400e9,  # IEEE 802.3bs 400GbE
}

#: Access types whose ``link_speed_mbps`` is a PHY rate the guard trusts (cellular modems report none: peak rate).
LINK_SPEED_ACCESS: frozenset[AccessType] = frozenset({AccessType.WIFI, AccessType.ETHERNET})


def reported_link_speeds_mbps(arms: Sequence[str], interfaces: Sequence[InterfaceContext]) -> tuple[float | None, ...]:
    """Per arm, the link speed the device reported for that access type, Mbit/s (``DecisionRecord.link_speed_mbps``).

    ``arms`` are access-type names (the decision's arms); the result is aligned with them. An
    access type's value is the sum of its interfaces' ``link_speed_mbps`` (MPTCP may open a
    subflow on each), or None when one of them reported none (that path's capacity is
    unknown) or the access type is not in :data:`LINK_SPEED_ACCESS`.
    """
    out: list[float | None] = []
    for arm in arms:
        access = _access_of(arm)
        if access not in LINK_SPEED_ACCESS:
            out.append(None)
            continue
        speeds = [i.link_speed_mbps for i in interfaces if i.access_type is access]
        out.append(math.fsum(speeds) if speeds and None not in speeds else None)  # type: ignore[arg-type]
    return tuple(out)


#: Access type by name (``AccessType(name)`` costs ~1 µs, once per arm of every decision; issue 16).
_ACCESS_BY_NAME: dict[str, AccessType] = {a.value: a for a in AccessType}


def _access_of(name: str) -> AccessType:
    """The access type named ``name`` (a decision record's arm); ``ValueError`` for a name that is none."""
    return _ACCESS_BY_NAME.get(name) or AccessType(name)


def reported_capacity_bps(arms: Sequence[str], link_speed_mbps: Sequence[float | None]) -> float:
    """Sum over the offered access types of the reported link speed, else the technology's peak rate, bit/s.

    ``link_speed_mbps`` is aligned with ``arms`` (``DecisionRecord.link_speed_mbps``); a missing
    entry (records written before the field existed) counts as not reported. An access type
    never counts more than its peak rate (:data:`ACCESS_PEAK_BPS`), however much is reported.
    """
    total = 0.0
    for k, arm in enumerate(arms):
        access = _access_of(arm)
        mbps = link_speed_mbps[k] if k < len(link_speed_mbps) else None
        total += ACCESS_PEAK_BPS[access] if mbps is None else min(mbps * 1e6, ACCESS_PEAK_BPS[access])
    return total


class OutcomeGuard:
    """Decides whether an outcome may reach the trainer.

    Parameters
    ----------
    plausibility_factor:
        Throughput may reach this × :func:`reported_capacity_bps` (≥ 1).
    outcome_limiter:
        Per-device outcome budget (a token bucket), or None for no cap.
    quarantine:
        The quarantine set.
    """

    def __init__(
        self, plausibility_factor: float, outcome_limiter: RateLimiter | None, quarantine: QuarantineSet
    ) -> None:
        if not plausibility_factor >= 1.0:
            raise ValueError("plausibility_factor must be >= 1")
        self.plausibility_factor = plausibility_factor
        self.outcome_limiter = outcome_limiter
        self.quarantine = quarantine

    def max_throughput_bps(self, decision: DecisionRecord) -> float:
        """Largest plausible throughput for an outcome of ``decision``, bit/s."""
        return self.plausibility_factor * reported_capacity_bps(decision.arms, decision.link_speed_mbps)

    async def take_cap_token(self, device_id: str) -> asyncio.Future[float] | None:
        """Start taking one token of ``device_id``'s outcome cap (item 3) as its report arrives; :meth:`admit`
        refuses on it. None when there is no cap.

        The future's result is the limiter's retry-after, s (0.0: a token was taken). An in-process cap is taken
        here (the future is done); a shared (Redis) cap's script is started as a task and is not waited for, so
        that it goes out in the same auto-pipelined round trip as the ``GET`` of the report's decision that the
        caller issues next (issue 16: two round trips for an outcome's plane instead of three). The token is spent
        whatever follows; a caller that does not pass the future to :meth:`admit` may drop it (its exception, if
        any, is retrieved here).
        """
        limiter = self.outcome_limiter
        if limiter is None:
            return None
        if in_process(limiter):
            done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
            done.set_result(limiter.take(device_id))
            return done
        task = asyncio.ensure_future(limiter.acquire(device_id))
        _in_flight.add(task)  # a strong reference until it is done, whoever waits for it
        task.add_done_callback(_settled)
        return task

    async def admit(
        self, decision: DecisionRecord, report: OutcomeReport, cap_token: asyncio.Future[float] | None = None
    ) -> bool:
        """True when the outcome may be trained on; False when its device is quarantined (:meth:`admission`).

        Raises
        ------
        InvalidInput, RateLimited
            As :meth:`admission`.
        """
        return await self.admission(decision, report, cap_token) is not None

    async def admission(
        self, decision: DecisionRecord, report: OutcomeReport, cap_token: asyncio.Future[float] | None = None
    ) -> float | None:
        """The outcome's plausibility bound, bit/s (:meth:`max_throughput_bps`), when it may be trained on; None when
        its device is quarantined. The learners bound any rate they derive from the report by it
        (``OutcomeInput.max_rate_bps``).

        ``cap_token``: the report's :meth:`take_cap_token`, taken before the decision was looked up; without it one
        is taken here, before the checks, as every report's is.

        Every rate the report carries is bounded by the same limit, because each reaches a model other devices are
        served from: ``throughput_bps`` (the bandit's reward), the rate an SSMP ``server_transfer`` implies and
        each of its paths' ``bandwidth_bps`` (a server's Eq. 2 score ``Q`` and stored per-path ``B``, which every
        device's CDN server selection reads), and ``congestion_measurement.throughput_bps`` (the congestion
        engine's edge statistics, from which BULK advice is decided). A ``server_transfer`` must name one of the
        decision's candidate servers (``DecisionRecord.server_candidates``: the request's ``content.candidates``),
        so a device can report only on servers it was deciding between; a decision whose request named no content
        accepts no ``server_transfer``. A decision record that does not say (``server_candidates`` None: written by
        a replica of a release before the field, during a rolling upgrade, for at most ``decision_ttl_s``) takes one
        under the rate bounds alone: refusing it would drop every SSMP transfer of the upgrade's window, and what it
        can move is the reporting device's own score of that server and one rank of the server's fleet median
        (:mod:`edgepath.adapters.ssmp`). Only replicas write decision records, so no device can make one that does
        not say.

        Raises
        ------
        InvalidInput
            Implausible, naming the field: ``throughput_bps``, ``congestion_measurement.throughput_bps``,
            ``server_transfer.address`` (not a candidate of this decision), ``server_transfer.duration_ms``
            (``size_bytes`` × 8 / duration above the limit) or ``server_transfer.paths[i].bandwidth_bps`` above
            :meth:`max_throughput_bps`.
        RateLimited
            The device exceeded its outcome cap for the window.
        """
        if cap_token is None:
            cap_token = await self.take_cap_token(decision.device_id)
        if await self.quarantine.contains(decision.device_id):
            return None
        limit = self.max_throughput_bps(decision)
        if not math.isfinite(report.throughput_bps) or report.throughput_bps > limit:
            raise InvalidInput(
                f"implausible: above {self.plausibility_factor:g} x the capacity the device reported "
                f"({limit:.3g} bit/s)",
                field="throughput_bps",
            )
        measured = getattr(report, "congestion_measurement", None)  # issue 20: the edge's BULK advice reads it
        if measured is not None and measured.throughput_bps is not None and measured.throughput_bps > limit:
            raise InvalidInput(
                f"implausible: above {self.plausibility_factor:g} x the capacity the device reported "
                f"({limit:.3g} bit/s)",
                field="congestion_measurement.throughput_bps",
            )
        transfer = getattr(report, "server_transfer", None)  # SSMP (issue 4): what feeds every device's selection
        if transfer is not None:
            self._check_transfer(decision, transfer, limit)
        if cap_token is not None:
            refuse_if_limited(await cap_token, "outcomes")
        return limit

    def _check_transfer(self, decision: DecisionRecord, transfer: ServerTransfer, limit: float) -> None:
        """Refuse a ``server_transfer`` from a server the decision was not choosing among (when its record says:
        ``server_candidates`` not None), or whose implied rate or any path's ``bandwidth_bps`` is above ``limit``
        (bit/s); see :meth:`admission`."""
        if decision.server_candidates is not None and transfer.address not in decision.server_candidates:
            raise InvalidInput(
                f"{transfer.address!r} was not among this decision's candidate servers"
                if decision.server_candidates
                else "this decision named no candidate servers (content.candidates): no server transfer to learn",
                field="server_transfer.address",
            )
        if transfer.duration_ms > 0:
            implied_bps = transfer.size_bytes * 8.0 / (transfer.duration_ms / 1000.0)
            if implied_bps > limit:
                raise InvalidInput(
                    f"implausible: size_bytes/duration_ms implies {implied_bps:.3g} bit/s, above {limit:.3g} bit/s",
                    field="server_transfer.duration_ms",
                )
        for i, path in enumerate(transfer.paths):
            if path.bandwidth_bps is not None and path.bandwidth_bps > limit:
                raise InvalidInput(
                    f"implausible: above {self.plausibility_factor:g} x the capacity the device reported "
                    f"({limit:.3g} bit/s)",
                    field=f"server_transfer.paths[{i}].bandwidth_bps",
                )


#: Shared-cap tokens in flight (:meth:`OutcomeGuard.take_cap_token`): the event loop keeps only weak references.
_in_flight: set[asyncio.Future[float]] = set()


def _settled(task: asyncio.Future[float]) -> None:
    _in_flight.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a report refused before admit() leaves its token's error unlogged
