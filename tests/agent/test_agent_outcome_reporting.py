"""Which steps report an outcome, and for which decision: an outcome describes the interval during which its
decision's configuration was in effect, on the path the decision chose, or it is not sent.

* a dry run (``backend = "dry-run"``, ``run --dry-run``) changes no route, so what it measures describes no
  decision: it reports no outcome (a real service never sees one) and keeps no history, says so once in the
  log, and its status record reads ``outcomes: "not reported: dry run"``;
* the passive meter (no ``probe``) measures a decision over its interval, from its apply to the next successful
  apply (or a clean stop), and the step that closes it reports it with that decision's id: a decision that
  switched the primary gets the bytes of the interface it switched to; a refused recommendation leaves the
  interval running; the upstream guard's override or switch during it means no outcome; a clean stop reports
  (or, while the service is unreachable, queues, and keeps in ``pending_file``) the last interval;
* on an idle link: fewer than ``PASSIVE_MIN_BYTES`` bytes (0 included) or an interval shorter than
  ``PASSIVE_MIN_S`` is no throughput: no outcome (the reason at DEBUG and in the status record's
  ``no_outcome_reason``), no history sample; a busy link still reports;
* active meters (an injected ``measure``, SSMP's transfer) stay attributed to the decision just applied.

The dry-run case runs against a real service on loopback; the others use a recording client and scripted byte
counters and clock (no sleeping, no network).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

import pytest
from agent_fixtures import Clock
from edgepath_agent import daemon
from edgepath_agent.applier import Applier, ApplyError, DryRunBackend, Journal, NetState, Route
from edgepath_agent.client import FailoverClient, ServiceError, connect
from edgepath_agent.collector import StaticCollector
from edgepath_agent.daemon import PASSIVE_MIN_BYTES, Agent, AgentConfig
from edgepath_agent.messages import OutcomeAck, PrimaryPath, Recommendation
from edgepath_agent.meter import TransferResult
from edgepath_agent.status import format_status, read_status
from edgepath_agent.upstream import PrimaryGuard, UpstreamProbe

ROUTES = NetState(
    limits=(("add_addr_accepted", 0), ("subflows", 0)),
    default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)),
)
ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}
INTERFACES: dict[str, Any] = {"wlan0": "WIFI", "wwan0": "LTE"}
#: A probe that moved 1 MiB in 0.5 s (16.8 Mbit/s).
BUSY = TransferResult(1 << 20, 0.5, 8.0 * (1 << 20) / 0.5, "10.1.1.2", True, rtt_ms=20.0)


def applier(config: AgentConfig) -> Applier:
    return Applier(DryRunBackend(ROUTES, ADDRS, out=None), Journal(), config.applier_config())


@pytest.mark.parametrize("backend", ["dry-run", "command"])
def test_a_dry_run_reports_no_outcome_to_the_service(service, backend: str, caplog: pytest.LogCaptureFixture) -> None:
    # "command" is the control: the same agent, its kernel simulated alike, reports (so the check below can fail).
    config = AgentConfig(
        device_id="dev-dry", service=[service.grpc_url], interfaces=INTERFACES, backend=backend, attempts=1,
        manage_cc=False, upstream_check=False, status_file=None,
    )  # fmt: skip
    client = FailoverClient([connect(service.grpc_url, 2.0)], attempts=1)
    with caplog.at_level(logging.DEBUG, logger="edgepath_agent"):
        agent = Agent(config, client, applier(config), [StaticCollector(INTERFACES)], measure=lambda _p: BUSY)
        try:
            first, second = agent.step(), agent.step()
            decision_id = second.recommendation.decision_id if second.recommendation else None
            assert decision_id
            # Reporting the step's outcome now: not a duplicate exactly when the step reported none.
            again = client.report_outcome({"device_id": "dev-dry", "decision_id": decision_id, "throughput_bps": 1.0})
            record = agent.status_record()
        finally:
            agent.close(restore=False)
    assert first.measurement == second.measurement == BUSY  # it still measures (the probe works)
    shown = format_status(record)
    if backend == "command":
        assert second.outcome is not None and second.ack is not None and again.duplicate
        assert record["outcomes"] == "reported" and record["no_outcome_reason"] is None
        assert "outcomes:" not in shown and "no outcome:" not in shown
        return
    assert first.outcome is None and second.outcome is None and second.ack is None and not agent.pending
    assert second.no_outcome == "dry run" and not again.duplicate  # the service had never seen one
    assert "subflow_histories" not in agent.context()  # what a dry run measures is no history of a path either
    assert record["outcomes"] == "not reported: dry run" and record["no_outcome_reason"] == "dry run"
    assert record["last_outcome"] is None
    # The plain `status` says so too (it was in --json only), once: not again as the step's "no outcome".
    assert "\nlast outcome:   none sent\noutcomes:       not reported: dry run\n" in shown
    assert "no outcome:" not in shown
    said = [r for r in caplog.records if r.levelno >= logging.INFO and "no outcome is reported" in r.getMessage()]
    assert len(said) == 1 and "dry run" in said[0].getMessage()  # once, not once per step


class RecordingClient:
    """A service that decides wlan0 every time and records the outcomes it gets."""

    url = "stub://"

    def __init__(self) -> None:
        self.outcomes: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []

    def recommend(self, request: Mapping[str, Any]) -> Recommendation:
        self.requests.append(dict(request))
        return Recommendation(
            decision_id=f"d{len(self.requests)}", primary_path=PrimaryPath(interface="wlan0", access_type="WIFI")
        )

    def report_outcome(self, outcome: Mapping[str, Any]) -> OutcomeAck:
        self.outcomes.append(dict(outcome))
        return OutcomeAck(decision_id=str(outcome["decision_id"]), accepted=True, reward=1)

    def close(self) -> None:
        pass


def test_the_passive_meter_reports_no_outcome_for_an_idle_link(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    counter = {"wlan0": 5_000}
    clock = Clock()
    monkeypatch.setattr(daemon, "rx_bytes", lambda name, netns=None: counter.get(name))
    monkeypatch.setattr(daemon, "time", clock)
    config = AgentConfig(
        device_id="dev-idle", interfaces=INTERFACES, manage_cc=False, upstream_check=False, status_file=None
    )
    client = RecordingClient()
    agent = Agent(config, client, applier(config), [StaticCollector(INTERFACES)])  # default meter: passive

    def step(received: int, seconds: float) -> daemon.StepResult:
        """The next step, after ``received`` bytes on wlan0 over ``seconds`` of the open interval."""
        counter["wlan0"] += received
        clock.now += seconds
        return agent.step()

    with caplog.at_level(logging.DEBUG, logger="edgepath_agent"):
        first = step(0, 0.0)  # d1 applied: its interval opens
        assert first.outcome is None and first.closed is None
        assert first.no_outcome and "no earlier decision's interval to close" in first.no_outcome
        idle = step(0, 30.0)  # d1's interval on an idle device: not a byte in 30 s
        assert idle.closed is not None and idle.closed.interval.decision_id == "d1"
        assert idle.measurement is not None and idle.measurement.bytes == 0
        assert idle.outcome is None and idle.ack is None and not client.outcomes
        assert idle.no_outcome and idle.no_outcome.startswith("decision d1's interval on wlan0: ")
        assert "0 bytes in 30.0 s" in idle.no_outcome
        assert agent.status_record()["no_outcome_reason"] == idle.no_outcome
        shown = format_status(agent.status_record())  # the plain `status`, under the last outcome
        assert f"\nlast outcome:   none sent\n  no outcome:   {idle.no_outcome}\n" in shown
        assert agent.status_record()["outcomes"] == "reported"  # reporting is on: this step had nothing to report
        chatter = step(PASSIVE_MIN_BYTES - 1, 30.0)  # d2's interval: ARP, ND, keepalives, under the threshold
        assert chatter.outcome is None and not client.outcomes and "decision d2's" in (chatter.no_outcome or "")
        short = step(10 * PASSIVE_MIN_BYTES, 0.2)  # d3's: plenty of bytes, but steps back to back
        assert short.outcome is None and not client.outcomes and "decision d3's" in (short.no_outcome or "")
    quiet = [r for r in caplog.records if "no outcome for decision" in r.getMessage()]
    assert len(quiet) == 3 and {r.levelno for r in quiet} == {logging.DEBUG}  # logged, but only at DEBUG
    assert "subflow_histories" not in agent.context()  # idle readings are no throughput history either

    busy = step(3_000_000, 30.0)  # d4's interval was busy: measured and reported, as d4's outcome
    assert busy.recommendation is not None and busy.recommendation.decision_id == "d5"
    assert busy.outcome is not None and busy.no_outcome is None and busy.outcome["decision_id"] == "d4"
    assert client.outcomes == [busy.outcome] and busy.outcome["throughput_bps"] == pytest.approx(8 * 3_000_000 / 30)
    assert agent.status_record()["no_outcome_reason"] is None
    (history,) = agent.context()["subflow_histories"]
    assert history["interface"] == "wlan0" and history["throughput_bps"] == [pytest.approx(800_000.0)]


class ScriptedClient(RecordingClient):
    """A service that decides the primaries it is given, in turn (``d1``, ``d2``, … as decision ids)."""

    def __init__(self, primaries: list[str]) -> None:
        super().__init__()
        self.primaries = primaries

    def recommend(self, request: Mapping[str, Any]) -> Recommendation:
        self.requests.append(dict(request))
        name = self.primaries[len(self.requests) - 1]
        return Recommendation(
            decision_id=f"d{len(self.requests)}",
            primary_path=PrimaryPath(interface=name, access_type=INTERFACES.get(name, "ETHERNET")),
        )


class Device:
    """Scripted byte counters of wlan0/wwan0 and a scripted clock (``daemon.rx_bytes``, ``daemon.time``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counter = {"wlan0": 10_000, "wwan0": 20_000}
        self.clock = Clock()
        monkeypatch.setattr(daemon, "rx_bytes", lambda name, netns=None: self.counter.get(name))
        monkeypatch.setattr(daemon, "time", self.clock)

    def carry(self, seconds: float, **received: int) -> None:
        """``seconds`` pass while each named interface receives its bytes."""
        self.clock.now += seconds
        for name, got in received.items():
            self.counter[name] += got


def passive_agent(client: RecordingClient, **settings: Any) -> Agent:
    config = AgentConfig(
        **{"device_id": "dev-switch", "interfaces": INTERFACES, "manage_cc": False, "upstream_check": False,
           "status_file": None, **settings}
    )  # fmt: skip
    return Agent(config, client, applier(config), [StaticCollector(INTERFACES)])


def test_a_decision_that_switched_the_primary_gets_its_own_interval_as_its_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The passive reading taken right after d2's apply covered d1's configuration (wlan0) and was reported as d2's,
    or, as the primary had changed, dropped: the bandit never heard how an exploratory switch went."""
    device = Device(monkeypatch)
    client = ScriptedClient(["wlan0", "wwan0", "wlan0"])
    agent = passive_agent(client)

    first = agent.step()  # d1: wlan0
    assert first.applied is not None and first.applied.primary == "wlan0" and first.outcome is None
    device.carry(30.0, wlan0=3_000_000, wwan0=500)
    switch = agent.step()  # d2 switches to wwan0; d1's interval (wlan0) closes
    assert switch.applied is not None and switch.applied.primary == "wwan0"
    assert switch.outcome is not None and switch.outcome["decision_id"] == "d1"
    assert switch.outcome["throughput_bps"] == pytest.approx(8 * 3_000_000 / 30)
    device.carry(20.0, wlan0=900, wwan0=6_000_000)  # d2's configuration in effect: wwan0 carries the traffic
    back = agent.step()  # d3 back to wlan0; d2's interval (wwan0) closes
    assert back.recommendation is not None and back.recommendation.decision_id == "d3"
    assert back.closed is not None and back.closed.interval.decision_id == "d2"
    assert back.closed.interval.interface == "wwan0"
    assert back.outcome is not None and back.no_outcome is None
    assert back.outcome["decision_id"] == "d2"  # the switch's own outcome, with its decision_id
    assert back.outcome["throughput_bps"] == pytest.approx(8 * 6_000_000 / 20)  # wwan0's bytes over d2's interval
    assert back.measurement is not None and back.measurement.bytes == 6_000_000
    assert back.measurement.completion_s == pytest.approx(20.0)
    assert [o["decision_id"] for o in client.outcomes] == ["d1", "d2"]
    histories = {h["interface"]: h["throughput_bps"] for h in agent.context()["subflow_histories"]}
    assert histories == {"wlan0": [pytest.approx(800_000.0)], "wwan0": [pytest.approx(2_400_000.0)]}
    assert agent.interval is not None and agent.interval.decision_id == "d3"  # open until the next apply


def test_a_refused_recommendation_leaves_the_interval_running(monkeypatch: pytest.MonkeyPatch) -> None:
    device = Device(monkeypatch)
    client = ScriptedClient(["wlan0", "eth9", "wwan0"])  # eth9 is no interface of this device: refused
    agent = passive_agent(client)
    agent.step()  # d1 on wlan0
    device.carry(30.0, wlan0=1_000_000)
    refused = agent.step()
    assert refused.kept_last and refused.error and "d2" in refused.error
    assert refused.outcome is None and not client.outcomes  # d1's configuration is still in effect
    device.carry(30.0, wlan0=2_000_000)
    switched = agent.step()  # d3 applied: d1's interval, both periods, closes
    assert switched.outcome is not None and switched.outcome["decision_id"] == "d1"
    assert switched.measurement is not None and switched.measurement.bytes == 3_000_000
    assert switched.measurement.completion_s == pytest.approx(60.0)


def test_a_failed_apply_ends_the_interval_with_the_reading_taken_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    device = Device(monkeypatch)
    client = ScriptedClient(["wlan0", "wwan0", "wlan0"])
    agent = passive_agent(client)
    agent.step()  # d1 on wlan0
    device.carry(30.0, wlan0=2_000_000)
    real_apply = agent.applier.apply

    def failing(rec: Any) -> Any:
        device.carry(5.0, wlan0=7_000_000)  # whatever happens during the attempt is no longer d1's
        raise ApplyError("route_add failed: RTNETLINK answers: Network is unreachable")

    monkeypatch.setattr(agent.applier, "apply", failing)
    with pytest.raises(ApplyError):
        agent.step()
    assert [o["decision_id"] for o in client.outcomes] == ["d1"]
    assert client.outcomes[0]["throughput_bps"] == pytest.approx(8 * 2_000_000 / 30)
    assert agent.interval is None  # the caller rolls back: no decision's configuration is in effect
    monkeypatch.setattr(agent.applier, "apply", real_apply)
    device.carry(30.0, wlan0=2_000_000)
    after = agent.step()  # d3: nothing was open, nothing is reported for the rolled-back state
    assert after.outcome is None and after.no_outcome and "no earlier decision's interval" in after.no_outcome


class Upstream:
    """A scripted upstream prober: ``down`` interfaces do not answer."""

    def __init__(self) -> None:
        self.down: set[str] = set()

    def __call__(self, interface: str) -> UpstreamProbe:
        ok = interface not in self.down
        return UpstreamProbe(interface, ok, "answers" if ok else "no answer", 1.0, 0)


def test_an_interval_the_upstream_guard_overrode_or_switched_reports_no_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    device = Device(monkeypatch)
    client = ScriptedClient(["wlan0", "wlan0", "wlan0", "wlan0"])
    upstream = Upstream()
    guard = PrimaryGuard(("wlan0", "wwan0"), upstream, failures=1, recoveries=1)
    config = AgentConfig(
        device_id="dev-guard", interfaces=INTERFACES, manage_cc=False, status_file=None, upstream_failures=1
    )
    agent = Agent(config, client, applier(config), [StaticCollector(INTERFACES)], guard=guard)

    agent.step()  # d1 on wlan0
    device.carry(10.0, wlan0=1_000_000)
    upstream.down.add("wlan0")
    assert agent.watch_upstream() == "wwan0"  # mid-interval: d1's configuration is no longer in effect
    device.carry(20.0, wwan0=4_000_000)
    upstream.down.clear()
    second = agent.step()  # d2 (wlan0 answers again); d1's interval closes
    assert second.outcome is None and not client.outcomes
    assert second.no_outcome and second.no_outcome.startswith("decision d1's interval on wlan0: ")
    assert "the upstream guard switched the primary from wlan0 to wwan0 during it" in second.no_outcome
    assert "subflow_histories" not in agent.context()  # 1 MB over 30 s is no throughput of wlan0

    device.carry(30.0, wlan0=3_000_000)
    upstream.down.add("wlan0")
    third = agent.step()  # d3 recommends wlan0, the guard applies wwan0; d2's interval closes: reported
    assert third.outcome is not None and third.outcome["decision_id"] == "d2"
    assert third.applied is not None and third.applied.primary == "wwan0"
    device.carry(30.0, wwan0=3_000_000)
    fourth = agent.step()  # d3's interval ran on the guard's wwan0: not d3's arm
    assert fourth.outcome is None and [o["decision_id"] for o in client.outcomes] == ["d2"]
    assert fourth.no_outcome and fourth.no_outcome.startswith("decision d3's interval on wwan0: the upstream guard")
    histories = {h["interface"]: h["throughput_bps"] for h in agent.context()["subflow_histories"]}
    assert histories["wwan0"] == [pytest.approx(800_000.0)]  # wwan0 carried it throughout: its history


def test_a_clean_stop_reports_the_last_interval(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    device = Device(monkeypatch)
    client = ScriptedClient(["wlan0", "wwan0"])
    agent = passive_agent(client, status_file=tmp_path / "status.json")
    agent.step()  # d1
    device.carry(30.0, wlan0=3_000_000)
    agent.step()  # d2 on wwan0: d1 reported
    device.carry(15.0, wwan0=1_500_000)
    stop = threading.Event()
    stop.set()  # SIGTERM: the loop runs no further step
    assert agent.run(stop) == 0
    assert [o["decision_id"] for o in client.outcomes] == ["d1", "d2"]
    assert client.outcomes[1]["throughput_bps"] == pytest.approx(8 * 1_500_000 / 15)
    record = read_status(tmp_path / "status.json")
    assert record is not None and record["last_outcome"]["decision_id"] == "d2" and record["last_outcome"]["delivered"]
    assert agent.interval is None and agent.close_at_stop() is None  # closed once


def test_a_stop_right_after_a_step_reports_no_idle_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run --steps 1`` stops right after its step: a 0 s interval is no outcome."""
    Device(monkeypatch)
    client = ScriptedClient(["wlan0"])
    agent = passive_agent(client)
    assert agent.run(threading.Event(), max_steps=1) == 1
    assert not client.outcomes and agent.pending == deque()
    assert agent.no_outcome_reason and agent.no_outcome_reason.startswith("decision d1's interval on wlan0: ")


class UnreachableReports(ScriptedClient):
    """Answers recommendations; outcome reports fail as a service that went away."""

    def report_outcome(self, outcome: Mapping[str, Any]) -> OutcomeAck:
        self.outcomes.append(dict(outcome))
        raise ServiceError("UNAVAILABLE", "connection refused")


@pytest.mark.parametrize("keeping", [True, False], ids=["pending_file", "in-memory"])
def test_a_stop_while_the_service_is_unreachable_queues_the_last_interval(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Any, keeping: bool
) -> None:
    device = Device(monkeypatch)
    client = UnreachableReports(["wlan0", "wwan0"])
    path = tmp_path / "pending-outcomes.json"
    agent = passive_agent(client, pending_file=path if keeping else None)
    agent.step()
    device.carry(30.0, wlan0=3_000_000)
    agent.step()  # d1's outcome: the report fails, queued
    assert [o["decision_id"] for o in agent.pending] == ["d1"]
    device.carry(30.0, wwan0=3_000_000)
    agent._service_answered(False, "UNAVAILABLE: connection refused")  # the last call got no answer
    calls = len(client.outcomes)
    with caplog.at_level(logging.INFO, logger="edgepath_agent"):
        closed = agent.close_at_stop()
    assert closed is not None and closed.outcome is not None and closed.ack is None
    assert len(client.outcomes) == calls  # queued without calling an unreachable service
    assert [o["decision_id"] for o in agent.pending] == ["d1", "d2"]
    assert agent.last_outcome is not None and agent.last_outcome["decision_id"] == "d2"
    assert not agent.last_outcome["delivered"]
    said = [r for r in caplog.records if "stopping with 2 outcome(s)" in r.getMessage()]
    assert len(said) == 1
    if keeping:  # kept for the next start (tests/agent/test_agent_pending_outcomes.py): no loss to warn about
        assert f"kept in {path}" in said[0].getMessage() and said[0].levelno == logging.INFO
        assert [o["decision_id"] for o in json.loads(path.read_text())["outcomes"]] == ["d1", "d2"]
    else:
        assert "lost when the agent exits (pending_file is unset)" in said[0].getMessage()
        assert said[0].levelno == logging.WARNING and not path.exists()


class Ssmp:
    """SSMP stand-in: its content transfer measures the steps in ``measured`` (by their number), fails at others."""

    def __init__(self, measured: set[int]) -> None:
        self.measured = measured
        self.calls = 0

    def with_content(self, request: dict[str, Any]) -> dict[str, Any]:
        return request

    def measure(self, rec: Any) -> tuple[TransferResult | None, dict[str, Any] | None]:
        self.calls += 1
        return (BUSY, {"address": "127.0.0.2"}) if self.calls in self.measured else (None, None)


def test_ssmp_transfers_stay_the_current_decisions_and_a_failed_one_falls_back_to_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    device = Device(monkeypatch)
    client = ScriptedClient(["wlan0", "wwan0", "wlan0"])
    config = AgentConfig(
        device_id="dev-ssmp", interfaces=INTERFACES, manage_cc=False, upstream_check=False, status_file=None
    )
    ssmp = Ssmp(measured={2, 3})
    agent = Agent(config, client, applier(config), [StaticCollector(INTERFACES)], ssmp=ssmp)  # type: ignore[arg-type]
    first = agent.step()  # d1: the download failed: d1 is measured passively, over its interval
    assert first.outcome is None and agent.interval is not None and agent.interval.decision_id == "d1"
    device.carry(30.0, wlan0=3_000_000)
    second = agent.step()  # d2: measured by its transfer right after its apply; d1's interval closes too
    assert second.outcome is not None and second.outcome["decision_id"] == "d2" and second.measurement == BUSY
    assert second.outcome["server_transfer"] == {"address": "127.0.0.2"}
    assert second.closed is not None and second.closed.outcome is not None
    assert second.closed.outcome["decision_id"] == "d1"
    assert agent.interval is None  # d2's outcome is in: no interval of its own
    device.carry(30.0, wwan0=3_000_000)
    third = agent.step()
    assert third.closed is None and third.outcome is not None and third.outcome["decision_id"] == "d3"
    assert [o["decision_id"] for o in client.outcomes] == ["d1", "d2", "d3"]  # each decision once


def test_an_injected_meter_still_reports_a_zero_byte_transfer() -> None:
    # The testbed's meter reports a failed transfer as 0 bytes on purpose (nothing arrived in time): that is an
    # outcome of the path the decision chose, unlike the passive meter's idle link.
    config = AgentConfig(device_id="dev-zero", interfaces=INTERFACES, upstream_check=False, status_file=None)
    client = RecordingClient()
    failed = TransferResult(0, 5.0, 0.0, "", True)
    agent = Agent(config, client, applier(config), [StaticCollector(INTERFACES)], measure=lambda _p: failed)
    result = agent.step()
    assert result.outcome is not None and client.outcomes == [result.outcome]
