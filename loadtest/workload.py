"""Workload shared by the locust users and ``loadtest/bench``: real contexts, realistic outcomes.

Contexts are the paired situations of the device agent's replay
(:func:`edgepath_agent.replay.pair_situations` on the vendored
``service/data/mobilebandwidth`` WiFi 4 and 4G tests: a real WiFi test and a
real LTE test of the same city, and ISP where possible, form one two-interface
context; the pairing is emulated, not simultaneous measurements, see that
module). The outcome of a decision is the real measured downlink bandwidth
(``bandwidth_Mbps`` × 1e6 bit/s) of the chosen arm's test.

Subflow histories (``history_samples=N``): the agent sends, with each context, the last ``history_samples`` (20 by
default) RTT and throughput samples of each interface it has measured (``edgepath_agent.daemon``; MLPM's time series),
as columns (``rtt_t_ms``/``rtt_ms``, …; ``form="objects"`` gives the older one-object-per-sample form).
The data has no RTT and one bandwidth per test, so these are **emulated**: per interface a base RTT drawn once per
situation (WiFi 8-40 ms, LTE 30-90 ms, uniform) and the test's measured bandwidth, each sample scattered around them
(log-normal, σ 0.15 RTT / 0.2 throughput), 500 ms apart; deterministic per (situation, variant). They make every context
distinct and every section's work real: MLPM fits its regressions on them, and the steering rules depend on the MLPM
weights, so neither answer comes from a cache as it does for a context of radio readings alone.

Outcome ratio: a device reports one outcome per decision, except that
:data:`OUTCOME_LOSS` (10 %) of decisions never get one (transfer aborted,
device gone, report lost), so the service sees ~0.9 outcomes per decision.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from edgepath.grpc.enums import proto_number, rest_name
from edgepath_agent.daemon import history_columns
from edgepath_agent.replay import Situation, load_tests, pair_situations

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "service" / "data" / "mobilebandwidth"
WIFI_CSV = DATA_DIR / "wifi4.csv"
CELLULAR_CSV = DATA_DIR / "4G.csv"

#: Fraction of decisions whose outcome is never reported.
OUTCOME_LOSS = 0.10
#: Paired situations loaded for a run (they repeat when a run makes more decisions).
DEFAULT_SITUATIONS = 2000


@lru_cache(maxsize=4)
def situations(count: int = DEFAULT_SITUATIONS, seed: int = 7) -> tuple[Situation, ...]:
    """``count`` paired situations from the vendored data (deterministic for a seed)."""
    wifi = load_tests(WIFI_CSV)
    cellular = load_tests(CELLULAR_CSV)
    return tuple(pair_situations(wifi, cellular, rounds=count, seed=seed))


def _access_enum() -> Any:
    from edgepath.wire import edgepath_pb2

    return edgepath_pb2.AccessType


#: Samples per interface and series in an agent-shaped context (the agent's ``history_samples`` default).
AGENT_HISTORY_SAMPLES = 20
#: Base RTT range per access type for the emulated histories, ms (uniform; see the module docstring).
_BASE_RTT_MS = {"WIFI": (8.0, 40.0), "LTE": (30.0, 90.0)}


#: How a context carries its samples: ``columns`` (``rtt_t_ms``/``rtt_ms``…, what the agent sends since 2026-11-26:
#: ``edgepath_agent.daemon.history_columns``) or ``objects`` (``rtt_samples``: one object per sample, as before).
HISTORY_FORMS = ("columns", "objects")


def add_history_arguments(parser: Any, variants: int | None) -> None:
    """The contexts' options, one definition for the bench, ``breakdown.py``, ``cpu_per_call.py`` and the locust
    users: ``--history-samples`` (default :data:`AGENT_HISTORY_SAMPLES`), ``--history-form`` (:data:`HISTORY_FORMS`)
    and, unless ``variants`` is None, ``--history-variants`` with that default. ``parser``: an argparse parser or
    locust's (the same ``add_argument``)."""
    parser.add_argument(
        "--history-samples",
        type=int,
        default=AGENT_HISTORY_SAMPLES,
        help="RTT and throughput samples per interface in each context, as the agent sends them (emulated, see "
        "loadtest/workload.py; MLPM computes on them); 0 = radio readings only (every run before 2026-11-26)",
    )
    parser.add_argument(
        "--history-form",
        choices=HISTORY_FORMS,
        default=HISTORY_FORMS[0],
        help="How contexts carry their samples: columns (rtt_t_ms/rtt_ms…, what the agent sends since 2026-11-26) or "
        "objects (rtt_samples: one object per sample, every run before)",
    )
    if variants is not None:
        parser.add_argument(
            "--history-variants",
            type=int,
            default=variants,
            help="Different histories per situation, one picked at random per call: situations × variants contexts",
        )


def add_sections_argument(parser: Any) -> None:
    """``--sections``: the Recommendation sections each context asks for (``RecommendRequest.sections``, issue 16),
    for the bench, ``breakdown.py``, ``cpu_per_call.py`` and ``cpu_ab.py``: a tuple of names once parsed
    (:func:`sections_of`), ``()`` by default."""
    parser.add_argument(
        "--sections",
        type=sections_of,
        default=(),
        help="Comma-separated sections each context asks for (e.g. primary_path, or primary_path,steering: a "
        "gateway's request); default: none named, so every section is computed (what the agent asks)",
    )


def sections_of(text: str) -> tuple[str, ...]:
    """``--sections`` as a tuple of names (``()`` for the default: every section)."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def histories(
    situation: Situation, samples: int = AGENT_HISTORY_SAMPLES, variant: int = 0, form: str = "columns"
) -> list[dict[str, Any]]:
    """Emulated ``subflow_histories`` of a situation (REST form; see the module docstring): ``samples`` RTT (ms) and
    throughput (bit/s) samples per interface, deterministic per (situation, ``variant``): another variant is the
    same situation's history drawn again (an agent's history moves on with every transfer, so its contexts never
    repeat). ``form``: one of :data:`HISTORY_FORMS`, the same samples either way. ``[]`` for ``samples`` 0. The
    entries are shared with a cache: serialise them, do not modify them."""
    key = (situation.wifi_row, situation.cellular_row, _measured(situation), samples, variant)
    return list(_column_histories(*key) if form == "columns" else _histories(*key))


def _measured(situation: Situation) -> tuple[tuple[str, str, float], ...]:
    mbps = {"WIFI": situation.wifi_mbps}
    return tuple(
        (i["name"], i["access_type"], mbps.get(i["access_type"], situation.cellular_mbps)) for i in situation.interfaces
    )


@cache  # a run's contexts: situations × variants, ~6 KB each
def _histories(
    wifi_row: int, cellular_row: int, measured: tuple[tuple[str, str, float], ...], samples: int, variant: int
) -> tuple[dict[str, Any], ...]:
    rng = random.Random((wifi_row * 1_000_003 + cellular_row) * 1_000_033 + variant)
    out = []
    for name, access, mbps in measured if samples > 0 else ():
        base_rtt = rng.uniform(*_BASE_RTT_MS.get(access, _BASE_RTT_MS["LTE"]))
        t0 = 1.7e12 + rng.uniform(0.0, 1e9)
        out.append(
            {
                "interface": name,
                "rtt_samples": [
                    {"t_ms": t0 + 500.0 * k, "rtt_ms": base_rtt * rng.lognormvariate(0.0, 0.15)} for k in range(samples)
                ],
                "throughput_samples": [
                    {"t_ms": t0 + 500.0 * k, "throughput_bps": max(mbps, 0.01) * 1e6 * rng.lognormvariate(0.0, 0.2)}
                    for k in range(samples)
                ],
            }
        )
    return tuple(out)


@cache  # as _histories
def _column_histories(
    wifi_row: int, cellular_row: int, measured: tuple[tuple[str, str, float], ...], samples: int, variant: int
) -> tuple[dict[str, Any], ...]:
    """:func:`_histories` in the agent's columnar form."""
    return tuple(
        history_columns(h["interface"], h["rtt_samples"], h["throughput_samples"])
        for h in _histories(wifi_row, cellular_row, measured, samples, variant)
    )


def recommend_body(
    situation: Situation,
    device_id: str,
    history_samples: int = 0,
    variant: int = 0,
    form: str = "columns",
    sections: Sequence[str] = (),
) -> dict[str, Any]:
    """REST body of ``POST /v1/recommendations`` for a situation; with ``history_samples`` > 0 also the agent's
    ``subflow_histories`` (:func:`histories` of ``variant`` in ``form``, emulated); ``sections``: the sections it
    asks for (none named: all)."""
    body: dict[str, Any] = {"device_id": device_id, "interfaces": [dict(i) for i in situation.interfaces]}
    if history_samples > 0:
        body["subflow_histories"] = histories(situation, history_samples, variant, form)
    if sections:
        body["sections"] = list(sections)
    return body


def outcome_body(situation: Situation, device_id: str, recommendation: Mapping[str, Any]) -> dict[str, Any]:
    """REST body of ``POST /v1/outcomes``: the chosen arm's measured bandwidth, bit/s."""
    access = recommendation["primary_path"]["access_type"]
    if isinstance(access, int):  # a proto number: its REST spelling (the service's one enum normaliser)
        access = rest_name(_access_enum(), access) or "LTE"
    mbps = situation.wifi_mbps if access == "WIFI" else situation.cellular_mbps
    return {
        "device_id": device_id,
        "decision_id": recommendation["decision_id"],
        "throughput_bps": mbps * 1e6,
    }


def recommend_proto(
    pb: Any,
    situation: Situation,
    device_id: str,
    history_samples: int = 0,
    variant: int = 0,
    form: str = "columns",
    sections: Sequence[str] = (),
) -> Any:
    """``edgepath.v1.RecommendRequest`` for a situation (``pb`` = a generated ``edgepath_pb2`` module); with
    ``history_samples`` > 0 also the agent's ``subflow_histories`` (:func:`histories` of ``variant`` in ``form``,
    emulated); ``sections``: the sections it asks for (none named: all)."""
    interfaces = []
    for iface in situation.interfaces:
        fields = dict(iface)
        fields["access_type"] = proto_number(pb.AccessType, fields["access_type"])
        interfaces.append(pb.InterfaceContext(**fields))
    subflow_histories = (
        _proto_histories(
            pb, situation.wifi_row, situation.cellular_row, _measured(situation), history_samples, variant, form
        )
        if history_samples > 0
        else ()
    )
    return pb.RecommendRequest(
        device_id=device_id, interfaces=interfaces, subflow_histories=subflow_histories, sections=sections
    )


@cache  # as _histories: one entry per context a run sends
def _proto_histories(
    pb: Any,
    wifi_row: int,
    cellular_row: int,
    measured: tuple[tuple[str, str, float], ...],
    samples: int,
    variant: int,
    form: str,
) -> tuple[Any, ...]:
    """:func:`_histories` as ``SubflowHistory`` messages in ``form``, built once per context: a load generator would
    otherwise spend ~80 µs per call building 80 sample messages (the request copies them)."""
    if form == "columns":  # the REST entries' keys are the message's fields
        return tuple(
            pb.SubflowHistory(**h) for h in _column_histories(wifi_row, cellular_row, measured, samples, variant)
        )
    return tuple(
        pb.SubflowHistory(
            interface=h["interface"],
            rtt_samples=[pb.RttSample(**x) for x in h["rtt_samples"]],
            throughput_samples=[pb.ThroughputSample(**x) for x in h["throughput_samples"]],
        )
        for h in _histories(wifi_row, cellular_row, measured, samples, variant)
    )


def outcome_proto(pb: Any, situation: Situation, device_id: str, reply: Any) -> Any:
    """``edgepath.v1.OutcomeRequest`` for a ``Recommendation`` reply."""
    access = rest_name(pb.AccessType, reply.primary_path.access_type) or "LTE"
    mbps = situation.wifi_mbps if access == "WIFI" else situation.cellular_mbps
    return pb.OutcomeRequest(device_id=device_id, decision_id=reply.decision_id, throughput_bps=mbps * 1e6)


@dataclass
class Device:
    """One simulated device: its id and its walk through the situations."""

    device_id: str
    rng: random.Random
    pool: Sequence[Situation]

    def next_situation(self) -> Situation:
        return self.pool[self.rng.randrange(len(self.pool))]

    def reports_outcome(self) -> bool:
        return self.rng.random() >= OUTCOME_LOSS
