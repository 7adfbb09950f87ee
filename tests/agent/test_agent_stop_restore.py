"""The stop's restore: every step attempted, ``run``'s exit code when it is partial, and what ``status`` says after.

A step naming a device that no longer exists is skipped, not failed (the dry-run backend's ``interfaces`` stands for
the devices that exist; the real deletion is in netns/test_agent_restore_netns.py). The status record's
``configuration_state`` says how the configuration was left; records of older agents (the sentence only) are read
by the sentence.

The real failures (an interface deleted between the apply and the stop, in a network namespace) and a real
``run`` are in netns/test_agent_restore_netns.py. Here the dry-run backend's injected failure stands in for a
step the kernel refuses, and ``run``'s exit code 75 is checked with ``run_daemon`` replaced by one that raises
what a partial restore raises: a real ``run --steps 1`` stops right after its step, leaving no moment to delete
an interface before its restore, so that failure cannot be made real through the command line.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from typing import Any

import pytest
from edgepath_agent import cli, daemon
from edgepath_agent.applier import (
    Applier,
    ApplierConfig,
    DryRunBackend,
    Journal,
    NetState,
    Restored,
    RestoreIncomplete,
    Route,
)
from edgepath_agent.applier.core import step_device
from edgepath_agent.applier.state import Endpoint
from edgepath_agent.cli import app
from edgepath_agent.messages import Recommendation
from edgepath_agent.status import configuration_state, format_status, mark_configuration, read_status
from typer.testing import CliRunner

ROUTES = NetState(
    limits=(("add_addr_accepted", 0), ("subflows", 0)),
    default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)),
)
ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}


def test_rollback_attempts_every_step_after_a_failed_one() -> None:
    backend = DryRunBackend(ROUTES, ADDRS, out=None)
    applier = Applier(backend, Journal(), ApplierConfig(manage_cc=False))
    applier.apply({"primary_path": {"interface": "wwan0"}})
    backend.fail_on = lambda op, args: op == "endpoint_delete"  # the first kind of step in a rollback's plan
    with pytest.raises(RestoreIncomplete) as failed:
        applier.rollback()
    assert len(failed.value.failed) == 2 and all("endpoint delete" in f for f in failed.value.failed)
    assert failed.value.steps > 2 and "2 of" in str(failed.value)
    # limits and routes, after the failed steps, were restored; the journal is kept for a retry
    assert backend.state.limits == ROUTES.limits and backend.state.default_routes == ROUTES.default_routes
    assert applier.journal.active
    backend.fail_on = None
    applier.rollback()
    assert backend.state.canonical() == ROUTES.canonical() and not applier.journal.active


def test_run_exits_75_when_the_stop_restored_only_part(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    def partial(*_args: object, **_kwargs: object) -> int:
        raise RestoreIncomplete(["ip -4 route add default via 10.1.2.1 dev wwan0 metric 200 exited 1: gone"], 4)

    monkeypatch.setattr(daemon, "run_daemon", partial)
    journal = tmp_path / "j.json"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--steps",
            "1",
            "--service",
            "grpc://127.0.0.1:9",
            "--interface",
            "lo=ETHERNET",
            "--journal",
            str(journal),
            "--log-format",
            "text",
        ],
        env={"COLUMNS": "300", "NO_COLOR": "1", "EDGEPATH_AGENT_STATUS_FILE": str(tmp_path / "status.json")},
    )
    assert cli.EXIT_TEMPFAIL == os.EX_TEMPFAIL == 75
    assert result.exit_code == 75, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "partly restored" in errors[0] and "dev wwan0" in errors[0], result.output
    assert str(journal) in errors[0] and "Traceback" not in result.output


def test_status_after_a_restoring_stop_does_not_show_the_decision_as_applied() -> None:
    record = {
        "updated_unix_ms": 0,
        "pid": 1,
        "recommendation": {"decision_id": "d-1", "primary_path": {"interface": "wlan0"}},
        "applied": None,
        "configuration": "restored at stop",
    }
    text = format_status(record, now_unix_ms=0, running=False)
    assert "applied:        nothing: the configuration was restored at stop" in text
    partial = format_status({**record, "configuration": "partly restored at stop: 1 of 4 …"}, 0, running=False)
    assert "applied:        partly restored at stop: 1 of 4 … (retry: edgepath-agent rollback)" in partial


class Wwan0:
    """Stands in for the service: always recommends wwan0."""

    url = "fixed://wwan0"

    def recommend(self, request: dict[str, Any]) -> Recommendation:
        return Recommendation.from_rest({"decision_id": "w-1", "primary_path": {"interface": "wwan0"}})

    def close(self) -> None:
        pass


def test_a_failed_restore_after_a_failed_apply_leaves_the_restore_to_the_stop() -> None:
    """It used to end the run loop with the restore's exception; a restore that then succeeded at the stop still
    left that exception to end ``run`` (as a partial restore, exit 75, with everything restored)."""
    config = daemon.AgentConfig(
        device_id="d", interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, manage_cc=False, status_file=None
    )
    backend = DryRunBackend(ROUTES, ADDRS, out=None)
    backend.fail_on = lambda op, args: op in ("route_add", "endpoint_delete")  # the apply, then its restore, fail
    applier = Applier(backend, Journal(), config.applier_config())
    agent = daemon.Agent(config, Wwan0(), applier, [], measure=lambda _p: None)
    assert agent.guard is None  # the default service is on loopback: no upstream probes
    assert agent.run(threading.Event(), max_steps=1) == 1  # logged, not raised
    assert applier.journal.active and backend.state.canonical() != ROUTES.canonical()
    backend.fail_on = None
    agent.close()
    assert backend.state.canonical() == ROUTES.canonical() and agent.configuration == "restored at stop"


def test_rollback_updates_the_status_record_the_stop_left(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """``rollback`` did not touch the status record: after a partial restore at stop ``status`` went on showing
    "partly restored at stop" once a manual rollback had finished. The restore itself is replaced here (what
    ``daemon.rollback`` returns or raises); the real one, after a real partial stop, is in
    netns/test_agent_restore_netns.py. The record is the agent's own (``Agent.write_status``)."""
    status = tmp_path / "status.json"
    config = daemon.AgentConfig(device_id="d", interfaces={"wlan0": "WIFI"}, status_file=status)
    agent = daemon.Agent(config, Wwan0(), Applier(DryRunBackend(ROUTES, ADDRS, out=None), Journal()), [])
    agent.configuration = "partly restored at stop: 1 of 4 restore step(s) failed …: ip route add … dev wwan0"
    agent.write_status()
    env = {"COLUMNS": "300", "NO_COLOR": "1", "EDGEPATH_AGENT_STATUS_FILE": str(status)}

    def partial(*_args: object, **_kwargs: object) -> int:
        raise RestoreIncomplete(["ip -4 route add default via 10.1.2.1 dev wwan0 metric 200 exited 2: gone"], 4)

    monkeypatch.setattr(daemon, "rollback", partial)
    failed = CliRunner().invoke(app, ["rollback", "--journal", str(tmp_path / "j.json")], env=env)
    assert failed.exit_code == 1, failed.output
    shown = CliRunner().invoke(app, ["status"], env=env)
    assert "applied:        partly restored by edgepath-agent rollback: 1 of 4" in shown.output, shown.output
    assert "dev wwan0 metric 200 exited 2: gone" in shown.output

    monkeypatch.setattr(daemon, "rollback", lambda *_a, **_k: Restored(4))
    done = CliRunner().invoke(app, ["rollback", "--journal", str(tmp_path / "j.json")], env=env)
    assert done.exit_code == 0 and "rollback: 4 step(s)" in done.output, done.output
    shown = CliRunner().invoke(app, ["status"], env=env)
    assert "applied:        nothing: the configuration was restored by edgepath-agent rollback" in shown.output
    assert "partly restored" not in shown.output and "warning" not in shown.output, shown.output
    record = read_status(status)
    assert record is not None and record["configuration_state"] == "restored"


def test_rollback_without_a_status_record_writes_none(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """No record (the agent never ran with this status_file): nothing is created, no warning."""
    monkeypatch.setattr(daemon, "rollback", lambda *_a, **_k: Restored(2))
    status = tmp_path / "status.json"
    done = CliRunner().invoke(
        app, ["rollback", "--journal", str(tmp_path / "j.json"), "--status-file", str(status)], env={"COLUMNS": "300"}
    )
    assert done.exit_code == 0 and "warning" not in done.output, done.output
    assert not status.exists()


def unplug(backend: DryRunBackend, device: str) -> None:
    """What deleting ``device`` does, in the dry run: the kernel removes its routes; every step naming it fails (as
    ``ip route … dev`` and ``ip mptcp endpoint add … dev`` do); its MPTCP endpoints stay (the kernel keeps them)."""
    backend.interfaces.discard(device)
    routes = tuple(r for r in backend.state.default_routes if r.dev != device)
    backend.state = replace(backend.state, default_routes=routes)
    backend.fail_on = lambda op, args: step_device(op, args) == device


@pytest.mark.parametrize(
    ("op", "args", "device"),
    [
        ("route_add", {"route": Route("wwan0", "10.1.2.1", 200)}, "wwan0"),
        ("route_delete", {"route": Route("wlan0", "10.1.1.1", 20)}, "wlan0"),
        ("endpoint_add", {"endpoint": Endpoint(2, "10.1.2.2", "wwan0", ("subflow",))}, "wwan0"),
        ("endpoint_add", {"endpoint": Endpoint(2, "10.1.2.2", None, ("subflow",))}, None),  # bound to no device
        ("endpoint_delete", {"id": 2}, None),  # by id: the kernel keeps a deleted device's endpoints
        ("endpoint_set_backup", {"id": 2, "backup": False}, None),
        ("limits_set", {"limits": {"subflows": 2}}, None),
        ("sysctl_set", {"key": "net.ipv4.tcp_congestion_control", "value": "cubic"}, None),
    ],
)
def test_step_device_names_the_device_a_step_needs(op: str, args: dict[str, Any], device: str | None) -> None:
    assert step_device(op, args) == device


def test_rollback_skips_the_steps_of_a_device_that_no_longer_exists() -> None:
    """wwan0 deleted after the apply: its route and endpoint cannot be put back, and there is nothing of it left to
    restore. The rollback used to fail on them every time (the journal kept, ``rollback`` exiting 1 until the
    device came back); now they are skipped, the rest restored (the endpoint the kernel kept removed: it is deleted
    by id) and the journal cleared."""
    backend = DryRunBackend(ROUTES, ADDRS, out=None)
    applier = Applier(backend, Journal(), ApplierConfig(manage_cc=False))
    applier.apply({"primary_path": {"interface": "wwan0"}})
    assert any(e.dev == "wwan0" for e in backend.state.endpoints)
    unplug(backend, "wwan0")
    plan = applier.rollback()
    assert len(plan) > len(applier.skipped) > 0
    assert all("dev wwan0" in step and step.endswith("(device wwan0 no longer exists)") for step in applier.skipped)
    assert backend.state.endpoints == () and backend.state.limits == ROUTES.limits
    assert backend.state.default_routes == (Route("wlan0", "10.1.1.1", 100),)
    assert not applier.journal.active


def test_rollback_still_fails_on_the_other_steps_when_a_device_is_gone() -> None:
    """Only a failed step whose device is gone is skipped: a global step (the limits) or a step of a device that
    exists still fails, and keeps the journal."""
    backend = DryRunBackend(ROUTES, ADDRS, out=None)
    applier = Applier(backend, Journal(), ApplierConfig(manage_cc=False))
    applier.apply({"primary_path": {"interface": "wwan0"}})
    unplug(backend, "wwan0")
    backend.fail_on = lambda op, args: op == "limits_set" or step_device(op, args) in ("wwan0", "wlan0")
    with pytest.raises(RestoreIncomplete) as failed:
        applier.rollback()
    assert failed.value.failed and failed.value.skipped == applier.skipped
    assert any("limits set" in f for f in failed.value.failed) and any("dev wlan0" in f for f in failed.value.failed)
    assert not any("wwan0" in f for f in failed.value.failed)
    assert all("wwan0" in step for step in failed.value.skipped) and "skipped" in str(failed.value)
    assert applier.journal.active


def test_rollback_fails_without_a_way_to_tell_a_device_is_gone() -> None:
    """A backend that cannot list the devices (reading them fails): no step is taken
    for gone, every failed one is failed."""
    backend = DryRunBackend(ROUTES, ADDRS, out=None)
    applier = Applier(backend, Journal(), ApplierConfig(manage_cc=False))
    applier.apply({"primary_path": {"interface": "wwan0"}})
    unplug(backend, "wwan0")

    def unreadable() -> set[str]:
        raise RuntimeError("ip -j link show exited 1")

    backend.read_interfaces = unreadable  # type: ignore[method-assign]
    with pytest.raises(RestoreIncomplete) as failed:
        applier.rollback()
    assert failed.value.failed and not failed.value.skipped and applier.journal.active


def test_stop_names_the_skipped_steps_and_says_restored() -> None:
    config = daemon.AgentConfig(
        device_id="d", interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, manage_cc=False, status_file=None
    )
    backend = DryRunBackend(ROUTES, ADDRS, out=None)
    applier = Applier(backend, Journal(), config.applier_config())
    agent = daemon.Agent(config, Wwan0(), applier, [], measure=lambda _p: None)
    assert agent.run(threading.Event(), max_steps=1) == 1
    assert agent.status_record()["configuration_state"] == "applied"
    unplug(backend, "wwan0")
    agent.close()  # no RestoreIncomplete: nothing is left to restore on wwan0
    assert agent.configuration is not None and agent.configuration.startswith("restored at stop (skipped: ")
    assert "device wwan0 no longer exists" in agent.configuration
    record = agent.status_record()
    assert record["configuration_state"] == "restored" and record["applied"] is None


def test_rollback_exits_0_naming_the_skipped_steps(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    status = tmp_path / "status.json"
    config = daemon.AgentConfig(device_id="d", interfaces={"wlan0": "WIFI"}, status_file=status)
    agent = daemon.Agent(config, Wwan0(), Applier(DryRunBackend(ROUTES, ADDRS, out=None), Journal()), [])
    agent.write_status()
    skipped = "ip -4 route add default via 10.1.2.1 dev wwan0 metric 200 (device wwan0 no longer exists)"
    monkeypatch.setattr(daemon, "rollback", lambda *_a, **_k: Restored(5, (skipped,)))
    env = {"COLUMNS": "300", "NO_COLOR": "1", "EDGEPATH_AGENT_STATUS_FILE": str(status)}
    done = CliRunner().invoke(app, ["rollback", "--journal", str(tmp_path / "j.json")], env=env)
    assert done.exit_code == 0, done.output
    assert "rollback: 5 step(s), 1 skipped: their device no longer exists" in done.output
    assert f"  skipped: {skipped}" in done.output
    record = read_status(status)
    assert record is not None and record["configuration_state"] == "restored"
    assert record["configuration"] == f"restored by edgepath-agent rollback (skipped: {skipped})"
    shown = CliRunner().invoke(app, ["status"], env=env)
    assert "applied:        nothing: the configuration was restored by edgepath-agent rollback (skipped: " in (
        shown.output
    )


def test_status_reads_the_configuration_state() -> None:
    """``status`` decides by ``configuration_state``, not by how the sentence begins."""
    record = {"updated_unix_ms": 0, "pid": 1, "applied": None, "configuration": "restored, at stop"}
    restored = format_status({**record, "configuration_state": "restored"}, now_unix_ms=0, running=False)
    assert "applied:        nothing: the configuration was restored, at stop" in restored
    partly = format_status({**record, "configuration_state": "partly_restored"}, now_unix_ms=0, running=False)
    assert "applied:        restored, at stop (retry: edgepath-agent rollback)" in partly
    applied = {"primary": "wlan0", "backup": [], "congestion_control": "cubic", "steps": 2}
    running = {**record, "configuration": None, "configuration_state": "applied", "applied": applied}
    assert "applied:        primary wlan0, backup -, cc cubic" in format_status(running, now_unix_ms=0)
    assert configuration_state({"configuration_state": "applied"}) == "applied"


def test_the_agent_writes_the_configuration_state() -> None:
    config = daemon.AgentConfig(
        device_id="d", interfaces={"wlan0": "WIFI", "wwan0": "LTE"}, manage_cc=False, status_file=None
    )
    applier = Applier(DryRunBackend(ROUTES, ADDRS, out=None), Journal(), config.applier_config())
    agent = daemon.Agent(config, Wwan0(), applier, [], measure=lambda _p: None)
    assert agent.status_record()["configuration_state"] is None  # nothing applied yet
    assert agent.run(threading.Event(), max_steps=1) == 1
    assert agent.status_record()["configuration_state"] == "applied"
    agent.close()
    record = agent.status_record()
    assert record["configuration_state"] == "restored" and record["configuration"] == "restored at stop"


def test_status_reads_an_older_agents_record_by_its_sentence(tmp_path) -> None:
    """A record an older agent wrote has the sentence and no ``configuration_state``: read as before."""
    for sentence, state in (
        ("restored at stop", "restored"),
        ("restored by edgepath-agent rollback", "restored"),
        ("partly restored at stop: 1 of 4 …", "partly_restored"),
        ("partly restored by edgepath-agent rollback: 1 of 4 …", "partly_restored"),
    ):
        assert configuration_state({"configuration": sentence, "applied": None}) == state
    assert configuration_state({"configuration": None, "applied": {"primary": "wlan0"}}) == "applied"
    assert configuration_state({"configuration": None, "applied": None}) is None
    old = tmp_path / "status.json"
    old.write_text(json.dumps({"updated_unix_ms": 0, "pid": 1, "applied": None, "configuration": "restored at stop"}))
    record = read_status(old)
    assert record is not None and "configuration_state" not in record
    assert "applied:        nothing: the configuration was restored at stop" in format_status(record, 0, False)
    # rollback's rewrite of such a record adds the state
    assert mark_configuration(old, "partly restored by edgepath-agent rollback: …", "partly_restored")
    record = read_status(old)
    assert record is not None and record["configuration_state"] == "partly_restored"
    with pytest.raises(ValueError, match="configuration state"):
        mark_configuration(old, "restored", "done")
