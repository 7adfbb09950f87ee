"""The engine interface: every recommendation section is an adapter registered in one place.

The toy engine below is what adding an engine costs: its own code (section type, adapter; here
in this file) plus one registration line (``registry.ENGINES``). It is served by the plane and
by the REST transport; gRPC carries only the sections the proto names, so the toy's section is
absent there, a gRPC request naming it is refused, and the service says so when it starts (a real engine adds its
message to the proto and ``grpc/convert.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from edgepath.adapters import registry
from edgepath.adapters.base import DecisionInput, EngineAdapter, OutcomeInput
from edgepath.adapters.congestion import CongestionAdapter
from edgepath.adapters.mlpm import MlpmAdapter
from edgepath.adapters.ssmp import SsmpAdapter
from edgepath.adapters.steering import SteeringAdapter
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit
from edgepath.errors import InvalidInput
from edgepath.grpc.server import REPLY_FIELDS, rest_only_notes, rest_only_sections
from edgepath.metrics import Metrics
from edgepath.plane import DecisionPlane
from edgepath.security.plausibility import MemoryQuarantine, OutcomeGuard
from edgepath.settings import Settings
from edgepath.state.memory import MemoryStore
from edgepath.training.online import ModelRegistry
from edgepath.types import OutcomeReport, Principal, Recommendation, RecommendRequest
from edgepath.wire import edgepath_pb2 as pb
from edgepath.wire import edgepath_pb2_grpc as pb_grpc
from edgepath_agent.client import connect
from pydantic import BaseModel

CONTEXT: dict[str, Any] = {
    "device_id": "phone-1",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -95.0, "rsrq_db": -10.0, "cqi": 9},
    ],
}


# --- the toy engine: its own files (here: this test module) -------------------------------------------------------
class ToyAdvice(BaseModel):
    """The toy's section: how many interfaces it saw and how many outcomes it has learned from."""

    interfaces: int
    outcomes_learned: int
    last_throughput_bps: float | None


class ToyAdapter(EngineAdapter):
    section = "toy"

    def __init__(self, settings: Settings) -> None:
        self.throughputs_bps: list[float] = []

    async def recommend(self, decision: DecisionInput) -> ToyAdvice:
        return ToyAdvice(
            interfaces=len(decision.request.interfaces),
            outcomes_learned=len(self.throughputs_bps),
            last_throughput_bps=self.throughputs_bps[-1] if self.throughputs_bps else None,
        )

    async def learn(self, outcome: OutcomeInput) -> None:
        self.throughputs_bps.append(outcome.report.throughput_bps)


#: The engines registered before the toy (the registry's, whatever engines it holds): the tests below derive the
#: sections they expect from it, so that a new engine breaks only the deliberate pin of the built-in list.
BUILT_IN = registry.ENGINES


def _sections(factories: Any) -> list[str]:
    return [e.section for e in registry.build_engines(Settings(), factories)]


def _untyped_sections() -> set[str]:
    """The built-in sections no ``Recommendation`` member declares: served as extra members, as the toy's is."""
    return set(_sections(BUILT_IN)) - set(Recommendation.model_fields)


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "ENGINES", (*registry.ENGINES, ToyAdapter))  # the one registration line


# --- in-process plane ---------------------------------------------------------------------------------------------
def _plane(settings: Settings, **kwargs: Any) -> DecisionPlane:
    model = PrimaryPathBandit(BanditConfig(policy=settings.policy, seed=settings.seed))
    return DecisionPlane(ModelRegistry(model), MemoryStore(), settings, Metrics.create(), **kwargs)


async def test_a_registered_toy_engine_is_served_and_learns_once_per_decision(registered: None) -> None:
    plane = _plane(Settings(), guard=OutcomeGuard(1.5, None, MemoryQuarantine(["phone-q"])))
    assert [e.section for e in plane.engines] == [*_sections(BUILT_IN), "toy"]  # after every built-in engine
    me = Principal(device_id="phone-1")
    rec = await plane.recommend(me, RecommendRequest.model_validate(CONTEXT))
    assert rec.model_extra is not None
    assert rec.model_extra["toy"] == ToyAdvice(interfaces=2, outcomes_learned=0, last_throughput_bps=None)
    assert rec.scheduler.weights and rec.congestion.profile  # the registered sections are all still there
    assert rec.model_dump(mode="json")["toy"] == {"interfaces": 2, "outcomes_learned": 0, "last_throughput_bps": None}

    report = OutcomeReport(device_id="phone-1", decision_id=rec.decision_id, throughput_bps=3e7)
    assert (await plane.report_outcome(me, report)).accepted
    assert (await plane.report_outcome(me, report)).duplicate  # a repeat is not learned twice
    quarantined = Principal(device_id="phone-q")
    rec_q = await plane.recommend(quarantined, RecommendRequest.model_validate({**CONTEXT, "device_id": "phone-q"}))
    report_q = OutcomeReport(device_id="phone-q", decision_id=rec_q.decision_id, throughput_bps=1e6)
    assert not (await plane.report_outcome(quarantined, report_q)).accepted  # never trained on, never learned
    toy = plane.engines[-1]
    assert isinstance(toy, ToyAdapter) and toy.throughputs_bps == [3e7]
    again = await plane.recommend(me, RecommendRequest.model_validate(CONTEXT))
    assert again.model_extra is not None
    assert again.model_extra["toy"] == ToyAdvice(interfaces=2, outcomes_learned=1, last_throughput_bps=3e7)


def test_the_registry_lists_the_built_in_sections_in_order() -> None:
    assert registry.ENGINES == (MlpmAdapter, CongestionAdapter, SsmpAdapter, SteeringAdapter)
    assert [e.section for e in registry.build_engines(Settings())] == [
        "scheduler",
        "congestion",
        "server_selection",
        "steering",
    ]


def test_engine_sections_are_checked_when_the_plane_is_built() -> None:
    settings = Settings()
    with pytest.raises(ValueError, match="toy"):
        registry.build_engines(settings, (MlpmAdapter, ToyAdapter, ToyAdapter))

    class Impostor(ToyAdapter):
        section = "policy"

    with pytest.raises(ValueError, match="policy"):
        _plane(settings, engines=(*registry.build_engines(settings), Impostor(settings)))
    unset = _plane(settings, engines=registry.build_engines(settings, (MlpmAdapter, CongestionAdapter)))
    assert [e.section for e in unset.engines] == ["scheduler", "congestion"]  # server_selection is optional


async def test_a_plane_serves_only_the_sections_it_has_adapters_for_and_refuses_asking_for_others() -> None:
    settings = Settings()
    plane = _plane(settings, engines=registry.build_engines(settings, (CongestionAdapter,)))
    me = Principal(device_id="phone-1")
    rec = await plane.recommend(me, RecommendRequest.model_validate(CONTEXT))
    assert rec.scheduler is None and rec.steering is None and rec.congestion is not None
    assert plane.section_names == {"primary_path", "congestion"}
    with pytest.raises(InvalidInput, match="scheduler") as err:
        await plane.recommend(me, RecommendRequest.model_validate({**CONTEXT, "sections": ["scheduler"]}))
    assert err.value.field == "sections[0]"


class Counting(ToyAdapter):
    """The toy, counting the items it is asked for (one by one, or as a batch)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.single: list[str] = []
        self.batches: list[list[str]] = []

    async def recommend(self, decision: DecisionInput) -> ToyAdvice:
        self.single.append(decision.request.device_id)
        return await super().recommend(decision)

    async def recommend_batch(self, decisions: list[DecisionInput]) -> list[ToyAdvice]:
        self.batches.append([d.request.device_id for d in decisions])
        return [await ToyAdapter.recommend(self, d) for d in decisions]


async def test_an_adapter_runs_only_for_the_requests_that_ask_for_its_section() -> None:
    settings = Settings()
    toy = Counting(settings)
    plane = _plane(settings, engines=(*registry.build_engines(settings), toy))
    me = Principal(device_id="phone-1", is_admin=True)

    def request(device_id: str, sections: list[str]) -> RecommendRequest:
        return RecommendRequest.model_validate({**CONTEXT, "device_id": device_id, "sections": sections})

    rec = await plane.recommend(me, request("a", ["primary_path"]))
    assert rec.model_extra == {} and toy.single == []
    rec = await plane.recommend(me, request("b", ["toy"]))
    assert rec.model_extra is not None and rec.model_extra["toy"].interfaces == 2 and toy.single == ["b"]
    recs = await plane.recommend_batch(
        [(me, request("c", ["primary_path"])), (me, request("d", [])), (me, request("e", ["toy", "congestion"]))]
    )
    assert toy.batches == [["d", "e"]]  # the batch method sees only the items that asked
    assert [r.model_extra is not None and "toy" in r.model_extra for r in recs] == [False, True, True]
    assert [r.congestion is not None for r in recs] == [False, True, True]
    assert [r.scheduler is not None for r in recs] == [False, True, False]
    recs = await plane.recommend_batch([(me, request("f", ["primary_path"]))])
    assert toy.batches == [["d", "e"]] and recs[0].model_extra == {}  # nobody asked: not called at all


class Reader(ToyAdapter):
    """Builds on the toy's section (``reads``), as the steering rule builds on MLPM's weights."""

    section = "reader"
    reads = ("toy",)

    async def recommend(self, decision: DecisionInput) -> ToyAdvice:
        seen = decision.sections.get("toy")
        assert isinstance(seen, ToyAdvice), "the plane runs what a section reads before it"
        return seen


async def test_a_section_asked_for_alone_gets_the_sections_it_reads_computed_but_not_shown() -> None:
    settings = Settings()
    toy, reader = Counting(settings), Reader(settings)
    plane = _plane(settings, engines=(*registry.build_engines(settings), toy, reader))
    me = Principal(device_id="phone-1", is_admin=True)
    asking = RecommendRequest.model_validate({**CONTEXT, "sections": ["reader"]})
    rec = await plane.recommend(me, asking)
    assert rec.model_extra is not None and set(rec.model_extra) == {"reader"} and toy.single == ["phone-1"]
    recs = await plane.recommend_batch([(me, asking), (me, RecommendRequest.model_validate(CONTEXT))])
    assert toy.batches == [["phone-1", "phone-1"]]
    assert [set(r.model_extra or {}) for r in recs] == [{"reader"}, {"toy", "reader"} | _untyped_sections()]
    # the built-in case: steering reads MLPM's weights, computed by MLPM's adapter (and its cache), not shown
    steering = await plane.recommend(me, RecommendRequest.model_validate({**CONTEXT, "sections": ["steering"]}))
    assert steering.steering is not None and steering.scheduler is None


# --- over the wire ------------------------------------------------------------------------------------------------
@pytest.fixture
def toy_service(registered: None, request: pytest.FixtureRequest) -> Iterator[Any]:
    yield request.getfixturevalue("service")  # the real composition root, built after the registration


def test_a_registered_toy_engine_is_served_over_rest_but_not_grpc(toy_service: Any) -> None:
    with httpx.Client(base_url=toy_service.http_url, timeout=10.0) as http:
        rec = http.post("/v1/recommendations", json=CONTEXT)
        assert rec.status_code == 200, rec.text
        body = rec.json()
        assert body["toy"] == {"interfaces": 2, "outcomes_learned": 0, "last_throughput_bps": None}
        assert {"scheduler", "congestion"} <= body.keys()
        ack = http.post("/v1/outcomes", json={**_outcome(body), "throughput_bps": 2e7})
        assert ack.status_code == 200 and ack.json()["accepted"], ack.text
        assert http.post("/v1/recommendations", json=CONTEXT).json()["toy"]["outcomes_learned"] == 1
    grpc_client = connect(toy_service.grpc_url)
    try:
        over_grpc = grpc_client.recommend(CONTEXT)
    finally:
        grpc_client.close()
    assert "toy" not in over_grpc  # the limit: the proto names no toy section
    assert over_grpc["scheduler"]["weights"] and over_grpc["congestion"]["profile"]


def test_the_sections_grpc_cannot_carry_are_the_adapters_the_proto_does_not_name(registered: None) -> None:
    assert {"primary_path", "scheduler", "congestion", "server_selection", "steering"} <= REPLY_FIELDS
    plane = _plane(Settings())
    assert rest_only_sections(plane.section_names) == {"toy"}
    (note,) = rest_only_notes(plane)
    assert "'toy'" in note and "REST only" in note and "naming no sections" in note
    assert rest_only_notes(_plane(Settings(), engines=registry.build_engines(Settings(), registry.ENGINES[:-1]))) == []


def _grpc_request(sections: list[str]) -> pb.RecommendRequest:
    return pb.RecommendRequest(
        device_id="phone-1",
        interfaces=[pb.InterfaceContext(name="wlan0", access_type=pb.ACCESS_TYPE_WIFI, wifi_rssi_dbm=-61.0)],
        sections=sections,
    )


def test_grpc_refuses_a_section_its_reply_cannot_carry_and_says_so_at_start(
    toy_service: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Recommend, RecommendBatch and RecommendStream refuse a request naming the toy's section with INVALID_ARGUMENT
    naming ``sections[j]`` (as an unknown section), where the reply would silently lack it; the start-up warning
    names it; requests naming carried sections (or none) are answered."""
    warnings = [r.getMessage() for r in caplog.get_records("setup") if r.levelname == "WARNING"]
    assert any("'toy'" in w and "REST only" in w for w in warnings), warnings
    with grpc.insecure_channel(f"127.0.0.1:{toy_service.grpc_port}") as channel:
        stub = pb_grpc.PathServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.Recommend(_grpc_request(["primary_path", "toy"]), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("sections[1]: ") and "REST only" in err.value.details()
        batch = pb.RecommendBatchRequest(requests=[_grpc_request([]), _grpc_request(["toy"])])
        with pytest.raises(grpc.RpcError) as err:
            stub.RecommendBatch(batch, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("requests[1].sections[0]: ")
        replies = stub.RecommendStream(iter([_grpc_request(["congestion"]), _grpc_request(["toy"])]), timeout=10)
        assert next(replies).HasField("congestion")
        with pytest.raises(grpc.RpcError) as err:
            next(replies)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("sections[0]: ")
        assert dict(err.value.trailing_metadata())["message-index"] == "1"
        with pytest.raises(grpc.RpcError) as err:  # a name nobody serves: the plane's refusal, as before
            stub.Recommend(_grpc_request(["nope"]), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "unknown section" in err.value.details()
        assert stub.Recommend(_grpc_request([]), timeout=10).HasField("scheduler")  # the default: all it carries
    with httpx.Client(base_url=toy_service.http_url, timeout=10.0) as http:  # REST serves it when named
        rec = http.post("/v1/recommendations", json={**CONTEXT, "sections": ["toy"]})
        assert rec.status_code == 200 and rec.json()["toy"]["interfaces"] == 2, rec.text


def _outcome(rec: dict[str, Any]) -> dict[str, Any]:
    return {"device_id": "phone-1", "decision_id": rec["decision_id"]}
