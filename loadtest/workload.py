"""Workload shared by the locust users and ``loadtest/bench``: real contexts, realistic outcomes.

Contexts are the paired situations of the device agent's replay
(:func:`edgepath_agent.replay.pair_situations` on the vendored
``service/data/mobilebandwidth`` WiFi 4 and 4G tests: a real WiFi test and a
real LTE test of the same city, and ISP where possible, form one two-interface
context; the pairing is emulated, not simultaneous measurements, see that
module). The outcome of a decision is the real measured downlink bandwidth
(``bandwidth_Mbps`` × 1e6 bit/s) of the chosen arm's test.

Outcome ratio: a device reports one outcome per decision, except that
:data:`OUTCOME_LOSS` (10 %) of decisions never get one (transfer aborted,
device gone, report lost), so the service sees ~0.9 outcomes per decision.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from edgepath.grpc.enums import proto_number, rest_name
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


def recommend_body(situation: Situation, device_id: str) -> dict[str, Any]:
    """REST body of ``POST /v1/recommendations`` for a situation."""
    return {"device_id": device_id, "interfaces": [dict(i) for i in situation.interfaces]}


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


def recommend_proto(pb: Any, situation: Situation, device_id: str) -> Any:
    """``edgepath.v1.RecommendRequest`` for a situation (``pb`` = a generated ``edgepath_pb2`` module)."""
    interfaces = []
    for iface in situation.interfaces:
        fields = dict(iface)
        fields["access_type"] = proto_number(pb.AccessType, fields["access_type"])
        interfaces.append(pb.InterfaceContext(**fields))
    return pb.RecommendRequest(device_id=device_id, interfaces=interfaces)


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
