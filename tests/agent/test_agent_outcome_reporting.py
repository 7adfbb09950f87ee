"""Which steps report an outcome: only those whose measurement describes the path the decision chose.

* a dry run (``backend = "dry-run"``, ``run --dry-run``) changes no route, so what it measures describes no
  decision: it reports no outcome (a real service never sees one) and keeps no history, says so once in the
  log, and its status record reads ``outcomes: "not reported: dry run"``;
* the passive meter (no ``probe``) on an idle link: fewer than ``PASSIVE_MIN_BYTES`` bytes (0 included) or a
  step shorter than ``PASSIVE_MIN_S`` is no throughput: no outcome (the reason at DEBUG and in the status
  record's ``no_outcome_reason``), no history sample; a busy link still reports.

The dry-run case runs against a real service on loopback; the passive cases use a recording client and a
scripted byte counter and clock (no sleeping, no network).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest
from edgepath_agent import daemon
from edgepath_agent.applier import Applier, DryRunBackend, Journal, NetState, Route
from edgepath_agent.client import FailoverClient, connect
from edgepath_agent.collector import StaticCollector
from edgepath_agent.daemon import PASSIVE_MIN_BYTES, Agent, AgentConfig
from edgepath_agent.messages import OutcomeAck, PrimaryPath, Recommendation
from edgepath_agent.meter import TransferResult

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
    if backend == "command":
        assert second.outcome is not None and second.ack is not None and again.duplicate
        assert record["outcomes"] == "reported" and record["no_outcome_reason"] is None
        return
    assert first.outcome is None and second.outcome is None and second.ack is None and not agent.pending
    assert second.no_outcome == "dry run" and not again.duplicate  # the service had never seen one
    assert "subflow_histories" not in agent.context()  # what a dry run measures is no history of a path either
    assert record["outcomes"] == "not reported: dry run" and record["no_outcome_reason"] == "dry run"
    assert record["last_outcome"] is None
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


class Clock:
    """``daemon.time`` stand-in: ``monotonic()`` and ``time()`` return what the test set."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


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
        counter["wlan0"] += received
        clock.now += seconds
        return agent.step()

    with caplog.at_level(logging.DEBUG, logger="edgepath_agent"):
        first = step(0, 0.0)
        assert first.outcome is None and first.no_outcome and "first reading of wlan0" in first.no_outcome
        idle = step(0, 30.0)  # an idle device: not a byte in 30 s
        assert idle.measurement is not None and idle.measurement.bytes == 0
        assert idle.outcome is None and idle.ack is None and not client.outcomes
        assert idle.no_outcome and "0 bytes in 30.0 s" in idle.no_outcome
        assert agent.status_record()["no_outcome_reason"] == idle.no_outcome
        assert agent.status_record()["outcomes"] == "reported"  # reporting is on: this step had nothing to report
        chatter = step(PASSIVE_MIN_BYTES - 1, 30.0)  # ARP, ND, keepalives: under the threshold
        assert chatter.outcome is None and not client.outcomes
        short = step(10 * PASSIVE_MIN_BYTES, 0.2)  # plenty of bytes, but steps back to back
        assert short.outcome is None and not client.outcomes
    quiet = [r for r in caplog.records if "no outcome for decision" in r.getMessage()]
    assert len(quiet) == 4 and {r.levelno for r in quiet} == {logging.DEBUG}  # logged, but only at DEBUG
    assert "subflow_histories" not in agent.context()  # idle readings are no throughput history either

    busy = step(3_000_000, 30.0)  # a busy link is measured and reported as before
    assert busy.outcome is not None and busy.no_outcome is None
    assert client.outcomes == [busy.outcome] and busy.outcome["throughput_bps"] == pytest.approx(8 * 3_000_000 / 30)
    assert agent.status_record()["no_outcome_reason"] is None
    (history,) = agent.context()["subflow_histories"]
    assert history["interface"] == "wlan0" and history["throughput_bps"] == [pytest.approx(800_000.0)]


def test_an_injected_meter_still_reports_a_zero_byte_transfer() -> None:
    # The testbed's meter reports a failed transfer as 0 bytes on purpose (nothing arrived in time): that is an
    # outcome of the path the decision chose, unlike the passive meter's idle link.
    config = AgentConfig(device_id="dev-zero", interfaces=INTERFACES, upstream_check=False, status_file=None)
    client = RecordingClient()
    failed = TransferResult(0, 5.0, 0.0, "", True)
    agent = Agent(config, client, applier(config), [StaticCollector(INTERFACES)], measure=lambda _p: failed)
    result = agent.step()
    assert result.outcome is not None and client.outcomes == [result.outcome]
