"""One device's outcome may not rig what other devices are served: SSMP server selection and the congestion edge.

The stored SSMP score of a server (Eq. 2 ``Q``, its per-path ``B`` and ``p``) and the congestion engine's edge
statistics are shared by every device. An outcome's ``server_transfer`` (each path's ``bandwidth_bps``) and
``congestion_measurement.throughput_bps`` are bounded by the outcome guard's plausibility limit (the reporting
device's reported capacity × ``plausibility_factor``), and a ``server_transfer`` must name one of the decision's
candidate servers; a refused outcome is 422 / INVALID_ARGUMENT naming the field and counted as
``edgepath_outcomes_total{result="implausible"}``. Real services on loopback, over both transports.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from edge_security_helpers import TransportClient, proto_from_rest
from edgepath.adapters.ssmp import record_server_transfer, ssmp_selector
from edgepath.engines.features import context_features
from edgepath.errors import InvalidInput
from edgepath.security.plausibility import MemoryQuarantine, OutcomeGuard, reported_link_speeds_mbps
from edgepath.settings import Settings
from edgepath.state.base import DecisionRecord
from edgepath.state.memory import MemoryStore
from edgepath.types import AccessType, InterfaceContext, OutcomeReport, ServerTransfer
from edgepath.wire import edgepath_pb2 as pb
from google.protobuf import json_format
from service_harness import RunningService, running_service

MBPS = 1e6
#: A 10 Mbit/s Wi-Fi link and nothing else: the guard's bound is 1.5 × 10 = 15 Mbit/s.
INTERFACES = [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60.0, "link_speed_mbps": 10.0}]
GOOD, WORSE = "192.0.2.20", "192.0.2.77"
#: Two candidate servers as the devices measure them: GOOD's path carries 8 Mbit/s, WORSE's 4 Mbit/s (no loss).
CONTENT = {
    "expected_size_bytes": 300 * 2**20,  # an elephant: decided by Q (Eq. 2, smoothed by Eq. 3)
    "candidates": [
        {
            "address": GOOD,
            "dns_interface": "wlan0",
            "paths": [{"interface": "wlan0", "rtt_ms_samples": [10.0], "loss": 0.0, "bandwidth_bps": 8 * MBPS}],
        },
        {
            "address": WORSE,
            "dns_interface": "wlan0",
            "paths": [{"interface": "wlan0", "rtt_ms_samples": [20.0], "loss": 0.0, "bandwidth_bps": 4 * MBPS}],
        },
    ],
}
#: The audit's forged report: 1 kB in 1 s from WORSE, over a path of 1 Tbit/s without loss.
FORGED = {
    "address": WORSE,
    "size_bytes": 1000,
    "duration_ms": 1000.0,
    "paths": [{"interface": "wlan0", "bandwidth_bps": 1e12, "loss": 0.0, "rtt_ms_samples": [1.0]}],
}


def request(device_id: str, content: dict[str, Any] | None = CONTENT) -> dict[str, Any]:
    body: dict[str, Any] = {"device_id": device_id, "interfaces": copy.deepcopy(INTERFACES)}
    if content is not None:
        body["content"] = copy.deepcopy(content)
    return body


class Caller(TransportClient):
    """REST-shaped bodies over one transport; answers as ("ok", reply) or (HTTP status / gRPC code name, field)."""

    def _rest(self, route: str, payload: dict[str, Any]) -> tuple[str, Any]:
        resp = self.http.post(route, json=payload)
        if resp.status_code != 200:
            return str(resp.status_code), resp.json().get("field")
        return "ok", resp.json()

    def _grpc(self, method: Any, message: Any) -> tuple[str, Any]:
        try:
            reply = method(message, timeout=5.0)
        except grpc.RpcError as exc:
            return exc.code().name, exc.details()
        return "ok", json_format.MessageToDict(reply, preserving_proto_field_name=True)

    def recommend(self, payload: dict[str, Any]) -> dict[str, Any]:
        if self.transport == "rest":
            status, rec = self._rest("/v1/recommendations", payload)
        else:
            status, rec = self._grpc(self.stub.Recommend, proto_from_rest(payload, pb.RecommendRequest()))
        assert status == "ok", rec
        return dict(rec)

    def report(self, payload: dict[str, Any]) -> tuple[str, Any]:
        if self.transport == "rest":
            return self._rest("/v1/outcomes", payload)
        return self._grpc(self.stub.ReportOutcome, json_format.ParseDict(payload, pb.OutcomeRequest()))


REFUSED = {"rest": "422", "grpc": "INVALID_ARGUMENT"}


@pytest.fixture
def caller(transport: str) -> Iterator[tuple[Caller, RunningService]]:
    with running_service(plausibility_factor=1.5) as svc, Caller(transport, svc) as c:
        yield c, svc


def named(status: str, detail: Any, field: str, transport: str) -> bool:
    """Whether an answer is the guard's refusal naming ``field`` (REST: the problem's field; gRPC: the details)."""
    return status == REFUSED[transport] and field in str(detail)


def implausible_count(svc: RunningService) -> float:
    text = httpx.get(svc.http_url + "/metrics", timeout=5.0).text
    line = next((x for x in text.splitlines() if x.startswith('edgepath_outcomes_total{result="implausible"}')), None)
    return 0.0 if line is None else float(line.split()[-1])


def test_one_forged_transfer_does_not_rig_another_devices_server_selection(
    caller: tuple[Caller, RunningService], transport: str
) -> None:
    """The audit's repro: victim and attacker decide between the same two servers on 10 Mbit/s links; the attacker
    reports one transfer from the worse server over a 1 Tbit/s path. Refused naming the path's ``bandwidth_bps``,
    counted, and the victim is still sent to the better server with the same score (before the fix: accepted,
    and the victim's selection switched to the worse server with q_bps 5.0e11)."""
    c, svc = caller
    before = c.recommend(request("victim"))["server_selection"]
    assert (before["address"], before["rule"]) == (GOOD, "elephant_q")
    assert before["score"] == pytest.approx(8 * MBPS)

    attack = c.recommend(request("attacker"))
    outcome = {"device_id": "attacker", "decision_id": attack["decision_id"], "throughput_bps": 1e6}
    status, detail = c.report({**outcome, "server_transfer": FORGED})
    assert named(status, detail, "server_transfer.paths[0].bandwidth_bps", transport), (status, detail)
    assert implausible_count(svc) == 1.0

    after = c.recommend(request("victim"))["server_selection"]
    assert (after["address"], after["rule"]) == (GOOD, "elephant_q")
    assert after["score"] == pytest.approx(8 * MBPS)
    # the refusal consumed nothing: the attacker's decision still takes a plausible report
    status, ack = c.report({**outcome, "server_transfer": {**FORGED, "paths": []}})
    assert status == "ok" and ack["accepted"] is True


def test_a_transfer_from_a_server_the_decision_did_not_offer_is_refused(
    caller: tuple[Caller, RunningService], transport: str
) -> None:
    """A device reports only on a server its decision was choosing among: another address, or any transfer on a
    decision whose request named no content, is refused naming ``server_transfer.address``; the score of that
    server stays unset (the victim's selection still lists it as never measured)."""
    c, svc = caller
    plausible = {"address": "192.0.2.99", "size_bytes": 1_000_000, "duration_ms": 1000.0}  # 8 Mbit/s
    attack = c.recommend(request("attacker"))
    outcome = {"device_id": "attacker", "decision_id": attack["decision_id"], "throughput_bps": 1e6}
    status, detail = c.report({**outcome, "server_transfer": plausible})
    assert named(status, detail, "server_transfer.address", transport), (status, detail)
    bare = c.recommend(request("attacker", content=None))
    outcome = {"device_id": "attacker", "decision_id": bare["decision_id"], "throughput_bps": 1e6}
    status, detail = c.report({**outcome, "server_transfer": {**plausible, "address": WORSE}})
    assert named(status, detail, "server_transfer.address", transport), (status, detail)
    assert implausible_count(svc) == 2.0
    victim = c.recommend(request("victim"))["server_selection"]
    assert victim["address"] == GOOD and victim["stale_servers"] == [GOOD, WORSE]  # neither was scored


def test_a_congestion_measurement_above_the_bound_is_refused(
    caller: tuple[Caller, RunningService], transport: str
) -> None:
    """``congestion_measurement.throughput_bps`` feeds the edge statistics BULK advice is decided on: bounded as
    ``throughput_bps`` is (10 Mbit/s link: 15 Mbit/s), refused naming it, and a plausible one is then accepted."""
    c, svc = caller
    rec = c.recommend({**request("attacker", content=None), "application_profile": "BULK"})
    outcome = {"device_id": "attacker", "decision_id": rec["decision_id"], "throughput_bps": 1e6}
    forged = {"algorithm": "bbr", "throughput_bps": 1e12}
    status, detail = c.report({**outcome, "congestion_measurement": forged})
    assert named(status, detail, "congestion_measurement.throughput_bps", transport), (status, detail)
    assert implausible_count(svc) == 1.0
    status, ack = c.report({**outcome, "congestion_measurement": {**forged, "throughput_bps": 9e6}})
    assert status == "ok" and ack["accepted"] is True


# --- the bounds themselves --------------------------------------------------------------------------------------
def _decision(candidates: tuple[str, ...] = (GOOD, WORSE)) -> DecisionRecord:
    wifi = InterfaceContext(name="wlan0", access_type=AccessType.WIFI, wifi_rssi_dbm=-60.0, link_speed_mbps=10.0)
    return DecisionRecord(
        decision_id="d1",
        device_id="dev-a",
        model_version=0,
        policy="p",
        arms=("WIFI",),
        arm_index=0,
        interface="wlan0",
        propensity=1.0,
        features=tuple(float(v) for v in context_features([wifi])),
        decided_at=0.0,
        link_speed_mbps=reported_link_speeds_mbps(("WIFI",), [wifi]),
        server_candidates=candidates,
    )


def _report(**members: Any) -> OutcomeReport:
    return OutcomeReport.model_validate({"device_id": "dev-a", "decision_id": "d1", "throughput_bps": 1e6, **members})


async def test_guard_bounds_each_transfer_path_and_the_congestion_throughput() -> None:
    guard = OutcomeGuard(1.5, None, MemoryQuarantine())
    d = _decision()
    assert guard.max_throughput_bps(d) == pytest.approx(15 * MBPS)
    path = {"interface": "wlan0", "rtt_ms_samples": [10.0], "loss": 0.0}
    ok = {"address": WORSE, "size_bytes": 1000, "duration_ms": 1000.0, "paths": [{**path, "bandwidth_bps": 15e6}]}
    assert await guard.admission(d, _report(server_transfer=ok)) == pytest.approx(15 * MBPS)
    high = {**ok, "paths": [{**path, "bandwidth_bps": 8e6}, {**path, "interface": "wlan1", "bandwidth_bps": 16e6}]}
    with pytest.raises(InvalidInput) as err:
        await guard.admit(d, _report(server_transfer=high))
    assert err.value.field == "server_transfer.paths[1].bandwidth_bps"
    assert await guard.admit(d, _report(congestion_measurement={"algorithm": "bbr", "throughput_bps": 15e6}))
    with pytest.raises(InvalidInput) as err:
        await guard.admit(d, _report(congestion_measurement={"algorithm": "bbr", "throughput_bps": 15.1e6}))
    assert err.value.field == "congestion_measurement.throughput_bps"


async def test_guard_takes_transfers_only_from_the_decisions_candidates() -> None:
    guard = OutcomeGuard(1.5, None, MemoryQuarantine())
    transfer = {"address": WORSE, "size_bytes": 1000, "duration_ms": 1000.0}
    assert await guard.admit(_decision(), _report(server_transfer=transfer))
    for decision in (_decision((GOOD,)), _decision(())):  # not offered; no content (or a record from before)
        with pytest.raises(InvalidInput) as err:
            await guard.admit(decision, _report(server_transfer=transfer))
        assert err.value.field == "server_transfer.address"


async def test_a_transfer_contributes_at_most_the_bound_to_the_stored_score() -> None:
    """Eq. 2 sums over paths, and a path's missing B comes from the store: each of two paths within the bound (14
    Mbit/s each on a 15 Mbit/s bound) makes Q_new 28 Mbit/s. The learner stores at most the bound, for Q and each
    path's B (a bound it applies itself: without the guard, B of 1 Tbit/s is stored at the bound)."""
    selector = ssmp_selector(Settings())
    store = MemoryStore()
    path = {"interface": "wlan0", "rtt_ms_samples": [10.0], "loss": 0.0, "bandwidth_bps": 14e6}
    two = ServerTransfer.model_validate(
        {"address": WORSE, "size_bytes": 1000, "duration_ms": 1000.0, "paths": [path, {**path, "interface": "wlan1"}]}
    )
    await record_server_transfer(selector, store, two, now_s=1000.0, max_rate_bps=15e6, device_id="dev-a")
    stored = (await store.get_server_scores([WORSE]))[WORSE]
    assert stored.q_bps == pytest.approx(15e6)
    # no bound given: Eq. 2 as the paper has it
    await record_server_transfer(selector, store, two, now_s=1000.0, device_id="dev-a")
    assert (await store.get_server_scores([WORSE]))[WORSE].q_bps == pytest.approx(0.5 * 28e6 + 0.5 * 15e6)
    forged = ServerTransfer.model_validate(FORGED)
    # stale: replaced
    await record_server_transfer(selector, store, forged, now_s=5000.0, max_rate_bps=15e6, device_id="dev-a")
    stored = (await store.get_server_scores([WORSE]))[WORSE]
    assert stored.q_bps == pytest.approx(15e6) and stored.paths["wlan0"].bandwidth_bps == pytest.approx(15e6)
