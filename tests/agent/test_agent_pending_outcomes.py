"""Outcomes the service has not received survive a restart (``pending_file``, edgepath_agent/pending.py).

* outcomes queued while the service is unreachable (a step's report, the stop's last passive interval) are in the
  file after the stop, and the next agent started on it delivers them, oldest first, before its own;
* a file that cannot be used (not JSON, not a pending-outcomes file, a directory) is moved aside with one WARNING
  and the agent starts with an empty queue;
* the bound (``max_pending_outcomes``) holds at load (the oldest dropped first, logged) and while running;
  outcomes of another ``device_id`` are dropped at load;
* an outcome the service answers ``NOT_FOUND``/404 (its decision expired) is dropped, not retried; a duplicate
  acknowledgement counts as delivered;
* the file is mode 0600, written atomically (no temporary file left), removed once the queue is empty;
* a dry run neither reads nor writes it; ``pending_file = ""`` turns it off.

Scripted clients, byte counters and clock (as tests/agent/test_agent_outcome_reporting.py): no network, no sleep.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import Clock
from edgepath_agent import daemon
from edgepath_agent.applier import Applier, DryRunBackend, Journal, NetState, Route
from edgepath_agent.client import ServiceError
from edgepath_agent.collector import StaticCollector
from edgepath_agent.daemon import Agent, AgentConfig, load_config
from edgepath_agent.messages import OutcomeAck, PrimaryPath, Recommendation
from edgepath_agent.meter import TransferResult
from edgepath_agent.pending import DEFAULT_PENDING_FILE

ROUTES = NetState(
    limits=(("add_addr_accepted", 0), ("subflows", 0)),
    default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)),
)
ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}
INTERFACES: dict[str, Any] = {"wlan0": "WIFI", "wwan0": "LTE"}
DEVICE = "dev-pending"
BUSY = TransferResult(1 << 20, 0.5, 8.0 * (1 << 20) / 0.5, "10.1.1.2", True, rtt_ms=20.0)


class Service:
    """Decides ``d1``, ``d2``, … (the primaries in turn); outcome reports fail while ``down``, and those for the
    decisions in ``expired`` are answered ``expired_code`` (the decision's TTL passed). Records every report."""

    url = "stub://"

    def __init__(self, *, down: bool = False, first: int = 1, expired_code: str | int = 404) -> None:
        self.down = down
        self.next = first
        self.expired: set[str] = set()
        self.expired_code = expired_code
        self.duplicates: set[str] = set()
        self.reports: list[str] = []

    def recommend(self, request: Mapping[str, Any]) -> Recommendation:
        decision_id, self.next = f"d{self.next}", self.next + 1
        return Recommendation(decision_id=decision_id, primary_path=PrimaryPath(interface="wlan0", access_type="WIFI"))

    def report_outcome(self, outcome: Mapping[str, Any]) -> OutcomeAck:
        decision_id = str(outcome["decision_id"])
        self.reports.append(decision_id)
        if self.down:
            raise ServiceError("UNAVAILABLE", "connection refused")
        if decision_id in self.expired:
            raise ServiceError(self.expired_code, "decision_id unknown or expired decision")
        duplicate = decision_id in self.duplicates
        return OutcomeAck(decision_id=decision_id, accepted=not duplicate, duplicate=duplicate, reward=1)

    def close(self) -> None:
        pass


class Device:
    """Scripted byte counter of wlan0 and clock (``daemon.rx_bytes``, ``daemon.time``): the passive meter."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rx = 10_000
        self.clock = Clock()
        monkeypatch.setattr(daemon, "rx_bytes", lambda name, netns=None: self.rx)
        monkeypatch.setattr(daemon, "time", self.clock)

    def carry(self, seconds: float = 30.0, received: int = 3_000_000) -> None:
        self.clock.now += seconds
        self.rx += received


def agent(client: Service, pending_file: Path | None, measure: Any = None, **settings: Any) -> Agent:
    """An agent on ``client`` keeping its queue in ``pending_file``; the passive meter unless ``measure``."""
    config = AgentConfig(
        **{"device_id": DEVICE, "interfaces": INTERFACES, "manage_cc": False, "upstream_check": False,
           "status_file": None, "pending_file": pending_file, **settings}
    )  # fmt: skip
    applier = Applier(DryRunBackend(ROUTES, ADDRS, out=None), Journal(), config.applier_config())
    return Agent(config, client, applier, [StaticCollector(INTERFACES)], measure=measure)


def outcome(decision_id: str, device_id: str = DEVICE) -> dict[str, Any]:
    return {"device_id": device_id, "decision_id": decision_id, "throughput_bps": 1e6}


def kept(path: Path) -> list[str]:
    """The decision ids of the outcomes kept in ``path``, oldest first."""
    data = json.loads(path.read_text())
    assert data["version"] == 1
    return [o["decision_id"] for o in data["outcomes"]]


def keep(path: Path, *outcomes: dict[str, Any]) -> None:
    """``path`` as an earlier run left it."""
    path.write_text(json.dumps({"version": 1, "outcomes": list(outcomes)}))


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """The agent's state directory (StateDirectory=); its pending file is ``state / "pending-outcomes.json"``."""
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    yield directory


def test_outcomes_queued_while_the_service_is_unreachable_are_delivered_after_a_restart(
    monkeypatch: pytest.MonkeyPatch, state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    device = Device(monkeypatch)
    path = state / "pending-outcomes.json"
    down = Service(down=True)
    first = agent(down, path)  # passive meter
    first.step()  # d1 applied
    device.carry()
    first.step()  # d2 applied; d1's outcome: the report fails, queued
    assert [o["decision_id"] for o in first.pending] == ["d1"]
    assert kept(path) == ["d1"]  # kept as soon as it is queued (a crash now would not lose it)
    device.carry()
    stop = threading.Event()
    stop.set()  # SIGTERM: the loop runs no further step, the stop closes d2's interval
    with caplog.at_level(logging.INFO, logger="edgepath_agent"):
        assert first.run(stop) == 0
    first.close(restore=False)
    assert kept(path) == ["d1", "d2"]  # the stop's last interval too (queued: the service is unreachable)
    said = [r for r in caplog.records if "stopping with 2 outcome(s)" in r.getMessage()]
    assert len(said) == 1 and f"kept in {path}" in said[0].getMessage() and said[0].levelno == logging.INFO

    caplog.clear()
    up = Service(first=3)  # the service is back; the next agent starts on the same file
    with caplog.at_level(logging.INFO, logger="edgepath_agent"):
        second = agent(up, path)
    assert [o["decision_id"] for o in second.pending] == ["d1", "d2"]
    assert [o["throughput_bps"] for o in second.pending] == [pytest.approx(8 * 3_000_000 / 30)] * 2
    assert any(f"loaded 2 pending outcome(s) from {path}" in r.getMessage() for r in caplog.records)
    second.step()  # d3 applied; the queue goes first
    assert up.reports == ["d1", "d2"] and not second.pending
    assert not path.exists()  # nothing left to keep
    device.carry()
    second.step()
    assert up.reports == ["d1", "d2", "d3"]  # delivered once each


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\x80\x81 not UTF-8", b"[]", b'{"version": 99, "outcomes": []}',
     b'{"version": 1, "outcomes": [{}]}', b'{"version": 1, "outcomes": [{"device_id": "dev-pending"}]}',
     b"directory"],
    ids=["not-json", "not-utf8", "a-list", "other-version", "no-ids", "no-decision-id", "a-directory"],
)  # fmt: skip
def test_a_bad_file_is_moved_aside_with_one_warning_and_the_agent_starts(
    monkeypatch: pytest.MonkeyPatch, state: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    Device(monkeypatch)
    path = state / "pending-outcomes.json"
    if content == b"directory":
        path.mkdir()
    else:
        path.write_bytes(content)
    with caplog.at_level(logging.DEBUG, logger="edgepath_agent"):
        started = agent(Service(down=True), path, interval_s=0.01)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert str(path) in warnings[0].getMessage() and "starting with no pending outcome" in warnings[0].getMessage()
    aside = state / "pending-outcomes.json.corrupt"
    assert f"moved to {aside}" in warnings[0].getMessage()
    assert not started.pending and not path.exists()
    assert aside.is_dir() if content == b"directory" else aside.read_bytes() == content  # kept for a look
    started._queue(outcome("d7"), "the service is unreachable")  # and it runs: the file is written anew
    assert kept(path) == ["d7"]


def test_the_bound_holds_at_load_and_while_running(state: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = state / "pending-outcomes.json"
    keep(path, *(outcome(f"d{i}") for i in range(1, 6)))
    with caplog.at_level(logging.INFO, logger="edgepath_agent"):
        loaded = agent(Service(down=True), path, max_pending_outcomes=3)
    assert [o["decision_id"] for o in loaded.pending] == ["d3", "d4", "d5"]  # the oldest dropped first
    said = [r for r in caplog.records if "loaded 3 pending outcome(s)" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "the 2 oldest over max_pending_outcomes = 3" in said[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="edgepath_agent"):
        loaded._queue(outcome("d6"), "the service is unreachable")
    assert [o["decision_id"] for o in loaded.pending] == ["d4", "d5", "d6"]
    assert kept(path) == ["d4", "d5", "d6"]  # the file is bounded too
    assert any("queue full" in r.getMessage() and "d3" in r.getMessage() for r in caplog.records)


def test_a_bound_of_zero_keeps_none(state: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``max_pending_outcomes = 0`` used to keep one outcome (the queue's bound was at least 1)."""
    path = state / "pending-outcomes.json"
    keep(path, outcome("d1"), outcome("d2"))
    loaded = agent(Service(down=True), path, max_pending_outcomes=0)
    assert list(loaded.pending) == []  # the file's are dropped too
    with caplog.at_level(logging.WARNING, logger="edgepath_agent"):
        loaded._queue(outcome("d3"), "the service is unreachable")
    assert list(loaded.pending) == [] and not path.exists()
    assert any("d3 not kept" in r.getMessage() and "max_pending_outcomes = 0" in r.getMessage() for r in caplog.records)


def test_outcomes_of_another_device_id_are_dropped_at_load(state: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = state / "pending-outcomes.json"
    keep(path, outcome("d1", "old-name"), outcome("d2"), outcome("d3", "old-name"))
    with caplog.at_level(logging.WARNING, logger="edgepath_agent"):
        renamed = agent(Service(down=True), path)
    assert [o["decision_id"] for o in renamed.pending] == ["d2"]
    assert any(f"2 of another device_id than {DEVICE!r}" in r.getMessage() for r in caplog.records)
    assert renamed.keep_pending_at_stop() and kept(path) == ["d2"]


@pytest.mark.parametrize("code", [404, "NOT_FOUND"], ids=["rest", "grpc"])
def test_an_outcome_whose_decision_expired_is_dropped_not_retried(
    state: Path, caplog: pytest.LogCaptureFixture, code: str | int
) -> None:
    path = state / "pending-outcomes.json"
    keep(path, outcome("d-old"), outcome("d-dup"), outcome("d-new"))
    service = Service(first=10, expired_code=code)
    service.expired = {"d-old", "d11"}
    service.duplicates = {"d-dup"}  # delivered before the restart, but not acknowledged
    restarted = agent(service, path, measure=lambda _p: BUSY)  # an active meter: a step reports its own decision
    with caplog.at_level(logging.WARNING, logger="edgepath_agent"):
        assert restarted.flush_outcomes() == 2  # d-dup (a duplicate is delivered) and d-new
    assert service.reports == ["d-old", "d-dup", "d-new"] and not restarted.pending
    assert not path.exists()
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 1 and "d-old" in dropped[0] and "expired" in dropped[0]
    restarted.step()  # d10: delivered
    restarted.step()  # d11: answered 404 right away: not queued either
    restarted.step()  # d12
    assert service.reports == ["d-old", "d-dup", "d-new", "d10", "d11", "d12"]  # none retried
    assert not restarted.pending and not path.exists()


def test_the_file_is_0600_and_written_atomically(state: Path) -> None:
    path = state / "pending-outcomes.json"
    keep(path, outcome("d0"))
    os.chmod(path, 0o644)  # a file others could read (copied in by hand)
    previous = os.umask(0o022)
    try:
        running = agent(Service(down=True), path)
        running._queue(outcome("d1"), "the service is unreachable")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        running._queue(outcome("d2"), "the service is unreachable")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert kept(path) == ["d0", "d1", "d2"]
    assert [p.name for p in state.iterdir()] == ["pending-outcomes.json"]  # no temporary file left


def test_a_dry_run_keeps_no_pending_file(state: Path) -> None:
    path = state / "pending-outcomes.json"
    keep(path, outcome("d1"))  # the installed agent's queue
    before = path.read_bytes()
    service = Service()
    dry = agent(service, path, backend="dry-run")
    assert dry.pending_file is None and not dry.pending  # not read
    dry.step()
    assert dry.run(threading.Event(), max_steps=1) == 1
    dry.close(restore=False)
    assert service.reports == [] and path.read_bytes() == before  # not delivered, not rewritten
    assert sorted(p.name for p in state.iterdir()) == ["pending-outcomes.json"]


def test_the_setting_defaults_to_the_state_directory_and_can_be_turned_off(
    state: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("EDGEPATH_AGENT_PENDING_FILE")  # the suite's own (tests/agent/conftest.py)
    assert AgentConfig().pending_file == DEFAULT_PENDING_FILE
    assert DEFAULT_PENDING_FILE.parent == AgentConfig().journal.parent  # StateDirectory=edgepath-agent
    settings = state / "agent.toml"
    settings.write_text('pending_file = ""\n')  # TOML has no null
    assert load_config(settings).pending_file is None
    monkeypatch.setenv("EDGEPATH_AGENT_PENDING_FILE", "")
    assert AgentConfig().pending_file is None
    memory = agent(Service(down=True), None)
    memory._queue(outcome("d1"), "the service is unreachable")
    with caplog.at_level(logging.WARNING, logger="edgepath_agent"):
        assert not memory.keep_pending_at_stop()
    lost = [r.getMessage() for r in caplog.records if "stopping with 1 outcome(s)" in r.getMessage()]
    assert lost and "lost when the agent exits (pending_file is unset)" in lost[0]
    assert list(state.iterdir()) == [settings]


def test_an_unwritable_directory_is_warned_about_once_and_the_agent_runs_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "missing" / "pending-outcomes.json"  # no StateDirectory= (a run outside the unit)
    with caplog.at_level(logging.WARNING, logger="edgepath_agent"):
        running = agent(Service(down=True), path)
        for n in range(3):
            running._queue(outcome(f"d{n}"), "the service is unreachable")
        assert not running.keep_pending_at_stop()
    unwritten = [r for r in caplog.records if "not written" in r.getMessage()]
    assert len(unwritten) == 1 and str(path) in unwritten[0].getMessage()
    assert len(running.pending) == 3 and not path.parent.exists()
    assert any("lost when the agent exits" in r.getMessage() for r in caplog.records)
