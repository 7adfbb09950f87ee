"""The ``command``/``netlink`` journal and the ``networkmanager`` record share the ``journal`` path: neither may
replace the other while it holds changes an earlier run did not roll back.

Both kinds of applier write the same file (``journal``, default ``/var/lib/edgepath-agent/journal.json``): the
``command`` and ``netlink`` backends a snapshot of the prior state, the ``networkmanager`` backend
``{"backend": "networkmanager", "interfaces": [...]}``. A run that did not roll back (a crash, a failed
``rollback``) followed by one with the other kind of backend (a packager switching ``backend`` in agent.toml)
used to write its record over the first, leaving that run's changes on the device with nothing to roll them
back from. Such a start is now refused before anything changes (exit 78, naming the record and the
``rollback`` command), with a backstop where each applier writes. A ``networkmanager`` run also keeps the
interfaces an earlier ``networkmanager`` run's record named (it used to drop them). (The stand-in also serves
the check that the backend marks the upstream guard's demoted interface ``backup``.)

The ``networkmanager`` record also keeps the original ``net.ipv4.tcp_congestion_control`` (and the namespace it
was read in) before the backend first changes it: ``rollback`` after a crash used to reapply the profiles and leave
the congestion control changed. Checked in a throw-away network namespace (the sysctl is per namespace; marker
``netns``, skipped without root/CAP_NET_ADMIN); records written before (``{"backend", "interfaces"}``) still roll
back.

NetworkManager is a stand-in on a real private ``dbus-daemon`` answering the calls the applier makes
(``GetDeviceByIpIface``, ``GetAppliedConnection``, ``Reapply``, ``Version``) in the shapes of its D-Bus API (as in
tests/agent/test_agent_netmanager.py; skipped without ``dbus-daemon``). The command side runs on the dry-run
backend here; tests/agent/netns/test_agent_journal_backends_netns.py has it against a real kernel.
"""

from __future__ import annotations

import copy
import json
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from edgepath_agent.applier import CC_SYSCTL, Applier, ApplierConfig, DryRunBackend, Journal, JournalError, NetState
from edgepath_agent.applier.journal import check_for_run
from edgepath_agent.applier.networkmanager import MPTCP_FLAGS, NetworkManagerApplier
from edgepath_agent.applier.state import Route
from edgepath_agent.cli import app
from edgepath_agent.messages import Recommendation
from typer.testing import CliRunner

NM = "org.freedesktop.NetworkManager"
NM_DEVICE = "org.freedesktop.NetworkManager.Device"
ROUTES = NetState(default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)))
ADDRS = {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}
CONFIG = ApplierConfig(interfaces=("wlan0", "wwan0"), manage_cc=False)
ROLLBACK_HINT = "restore them first with `edgepath-agent rollback --journal {}`"


class FakeNetworkManager:
    """Owns ``org.freedesktop.NetworkManager`` on a bus: one device per interface, each with an applied connection
    (``ipv4``/``ipv6`` ``route-metric``, ``connection.mptcp-flags``) that ``Reapply`` replaces (an empty one puts the
    saved profile back). ``reapplied`` lists the interfaces reapplied, in order."""

    def __init__(self, address: str, interfaces: tuple[str, ...]) -> None:
        from jeepney.bus_messages import message_bus
        from jeepney.io.blocking import open_dbus_connection

        self.saved = {
            name: {"connection": {"id": ("s", name)}, "ipv4": {"route-metric": ("x", -1)}} for name in interfaces
        }
        self.applied = copy.deepcopy(self.saved)
        self.reapplied: list[str] = []
        self.conn = open_dbus_connection(address)
        reply = self.conn.send_and_get_reply(message_bus.RequestName(NM))
        assert reply.body == (1,), reply.body
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    @staticmethod
    def _variants(settings: dict[str, dict[str, Any]]) -> dict[str, dict[str, tuple[str, Any]]]:
        return {group: {key: (v[0], v[1]) for key, v in values.items()} for group, values in settings.items()}

    def answer(self, msg: Any) -> Any:
        from jeepney import new_error, new_method_return

        member, iface, path = msg.header.fields.get(3), msg.header.fields.get(2), str(msg.header.fields.get(1))
        names = list(self.saved)
        device = (
            names[int(path.rsplit("/", 1)[1]) - 1] if path.startswith(f"/{NM.replace('.', '/')}/Devices/") else None
        )
        if member == "GetDeviceByIpIface" and msg.body[0] in self.saved:
            return new_method_return(
                msg, "o", (f"/org/freedesktop/NetworkManager/Devices/{names.index(msg.body[0]) + 1}",)
            )
        if member == "Get" and msg.body == (NM, "Version"):
            return new_method_return(msg, "v", (("s", "1.42.4"),))
        if iface == NM_DEVICE and device is not None and member == "GetAppliedConnection":
            return new_method_return(msg, "a{sa{sv}}t", (self._variants(self.applied[device]), 1))
        if iface == NM_DEVICE and device is not None and member == "Reapply":
            settings = msg.body[0]
            self.applied[device] = self._variants(settings) if settings else copy.deepcopy(self.saved[device])
            self.reapplied.append(device)
            return new_method_return(msg)
        return new_error(msg, "org.freedesktop.DBus.Error.UnknownMethod", "s", (f"{iface}.{member}",))

    def serve(self) -> None:
        from jeepney import MessageType

        while not self.stop.is_set():
            try:
                msg = self.conn.receive(timeout=0.2)
            except TimeoutError:
                continue
            except OSError:
                return
            if msg.header.message_type == MessageType.method_call:
                self.conn.send(self.answer(msg))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.conn.close()


@pytest.fixture
def networkmanager(bus: str) -> Iterator[FakeNetworkManager]:
    nm = FakeNetworkManager(bus, ("wlan0", "wwan0"))
    try:
        yield nm
    finally:
        nm.close()


def nm_applier(bus: str, journal: Path) -> NetworkManagerApplier:
    return NetworkManagerApplier(CONFIG, bus, journal_path=journal, allowed_cc=("reno", "cubic"))


def test_a_networkmanager_record_is_not_replaced_by_the_command_backend(
    bus: str, networkmanager: FakeNetworkManager, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.json"
    nm_applier(bus, journal).apply({"primary_path": {"interface": "wwan0"}})  # then the agent dies: no rollback
    record = journal.read_text()
    assert json.loads(record) == {"backend": "networkmanager", "netns": None, "interfaces": ["wlan0", "wwan0"],
                                  "sysctls": {}}  # fmt: skip

    # The packager switches to backend = "command": the start check refuses it, naming the record and the way out.
    for backend in ("command", "netlink"):
        with pytest.raises(JournalError) as refused:
            check_for_run(journal, None, backend)
        message = str(refused.value)
        assert "backend = networkmanager" in message and f"backend = {backend}" in message
        assert "wlan0, wwan0" in message and ROLLBACK_HINT.format(journal) in message
    # The applier's own backstop (a caller that skipped the start check): nothing changed, the record kept.
    device = DryRunBackend(ROUTES, ADDRS, out=None)
    with pytest.raises(JournalError, match="backend = networkmanager"):
        Applier(device, Journal(journal), CONFIG).apply({"primary_path": {"interface": "wwan0"}})
    assert device.printed == [] and device.state == ROUTES
    assert journal.read_text() == record
    check_for_run(journal, None, "networkmanager")  # the same backend again: it takes the record over


def test_a_command_snapshot_is_not_replaced_by_the_networkmanager_backend(
    bus: str, networkmanager: FakeNetworkManager, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.json"
    device = DryRunBackend(ROUTES, ADDRS, out=None)
    Applier(device, Journal(journal), CONFIG).apply({"primary_path": {"interface": "wwan0"}})  # no rollback after
    snapshot = journal.read_text()
    assert Journal(journal).snapshot == ROUTES

    with pytest.raises(JournalError) as refused:
        check_for_run(journal, None, "networkmanager")
    message = str(refused.value)
    assert "backend = command or netlink" in message and "backend = networkmanager" in message
    assert ROLLBACK_HINT.format(journal) in message
    with pytest.raises(JournalError, match="backend = command or netlink"):
        nm_applier(bus, journal).apply({"primary_path": {"interface": "wlan0"}})
    assert networkmanager.reapplied == [] and journal.read_text() == snapshot
    for backend in ("command", "netlink"):
        check_for_run(journal, None, backend)  # they share the snapshot format: either takes it over


def test_a_networkmanager_run_keeps_the_interfaces_an_earlier_run_changed(
    bus: str, networkmanager: FakeNetworkManager, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.json"
    nm_applier(bus, journal).apply({"primary_path": {"interface": "wwan0"}})  # wlan0 metric 20, wwan0 10; dies
    networkmanager.reapplied.clear()
    # The next run changes wlan0 only (a low weight makes it backup): wwan0 keeps the earlier run's metric.
    again = nm_applier(bus, journal)
    low_wlan0 = {"primary_path": {"interface": "wwan0"}, "scheduler_weights": {"wlan0": 0.05, "wwan0": 0.95}}
    applied = again.apply(low_wlan0)
    assert applied.backup == ("wlan0",) and networkmanager.reapplied == ["wlan0"]
    assert json.loads(journal.read_text())["interfaces"] == ["wlan0", "wwan0"]  # wwan0 is still to be restored
    assert networkmanager.applied["wwan0"]["ipv4"]["route-metric"] == ("x", 10)
    networkmanager.reapplied.clear()
    assert again.rollback() == ["wlan0", "wwan0"]  # the stop restores both saved profiles
    assert networkmanager.applied == networkmanager.saved and not journal.exists()


def test_the_networkmanager_backend_makes_the_upstream_guards_demoted_path_backup(
    bus: str, networkmanager: FakeNetworkManager, tmp_path: Path
) -> None:
    """The guard's override (wlan0 without upstream) on this backend too: wlan0's weight would keep it active."""
    rec = Recommendation.from_rest({"primary_path": {"interface": "wlan0"}, "scheduler_weights": {"wlan0": 0.9}})
    applier = nm_applier(bus, tmp_path / "journal.json")
    applied = applier.apply(rec.with_primary("wwan0", "LTE", ("wlan0",)))
    assert applied.primary == "wwan0" and applied.backup == ("wlan0",)
    flags = {name: networkmanager.applied[name]["connection"]["mptcp-flags"][1] for name in ("wlan0", "wwan0")}
    assert flags["wlan0"] & MPTCP_FLAGS["backup"] and not flags["wwan0"] & MPTCP_FLAGS["backup"], flags
    applier.rollback()


#: id → (recommendation, follow_mlpm): each puts the initial subflow on wwan0 and makes wlan0 backup, though
#: ``primary_path`` names wlan0 and no weight is below the threshold.
ROLES: dict[str, tuple[dict[str, Any], bool]] = {
    "active-standby rule": (
        {
            "primary_path": {"interface": "wlan0"},
            "steering": {
                "rules": [
                    {
                        "steering_mode": "ACTIVE_STANDBY",
                        "accesses": [
                            {"interface": "wwan0", "access_type": "LTE", "initial_subflow": True},
                            {"interface": "wlan0", "access_type": "WIFI"},
                        ],
                    }
                ]
            },
        },
        False,
    ),
    "mlpm prioritised subflow": (
        {
            "primary_path": {"interface": "wlan0"},
            "scheduler": {"prioritised_subflow": "wwan0", "weights": [{"interface": "wlan0", "weight": 0.1}]},
        },
        True,
    ),
}


@pytest.mark.parametrize("case", list(ROLES))
def test_the_networkmanager_backend_takes_the_initial_subflow_and_backups_as_the_command_backend_does(
    bus: str, networkmanager: FakeNetworkManager, tmp_path: Path, case: str
) -> None:
    """A steering rule's initial-subflow access (and its standby as backup), or MLPM's prioritised subflow under
    follow_mlpm: this backend put the lowest route metric on ``primary_path`` and read only the weights."""
    body, follow_mlpm = ROLES[case]
    config = ApplierConfig(interfaces=("wlan0", "wwan0"), manage_cc=False, follow_mlpm=follow_mlpm)
    applier = NetworkManagerApplier(config, bus, journal_path=tmp_path / "journal.json")
    applied = applier.apply(Recommendation.from_rest(body))
    assert applied.primary == "wwan0" and applied.backup == ("wlan0",)
    assert networkmanager.applied["wwan0"]["ipv4"]["route-metric"] == ("x", config.primary_metric)
    assert networkmanager.applied["wlan0"]["ipv4"]["route-metric"] == ("x", config.secondary_metric)
    assert networkmanager.applied["wlan0"]["connection"]["mptcp-flags"][1] & MPTCP_FLAGS["backup"]
    assert not networkmanager.applied["wwan0"]["connection"]["mptcp-flags"][1] & MPTCP_FLAGS["backup"]
    command = Applier(DryRunBackend(ROUTES, ADDRS, out=None), config=config)
    same = command.apply(Recommendation.from_rest(body))
    assert (same.primary, same.backup) == (applied.primary, applied.backup), "one rule for both backends"
    applier.rollback()


ENV = {"EDGEPATH_AGENT_ATTEMPTS": "1", "EDGEPATH_AGENT_TIMEOUT_S": "0.5", "EDGEPATH_AGENT_UPSTREAM_CHECK": "false"}


@pytest.mark.parametrize(
    ("record", "backend", "named"),
    [
        ({"backend": "networkmanager", "interfaces": ["lo"]}, "command", "backend = networkmanager"),
        ({"version": 2, "netns": None, "snapshot": ROUTES.to_dict(), "entries": []}, "networkmanager",
         "backend = command or netlink"),
    ],
)  # fmt: skip
def test_run_with_the_other_backend_exits_78_naming_the_record_and_the_rollback(
    tmp_path: Path, record: dict[str, Any], backend: str, named: str
) -> None:
    journal = tmp_path / "journal.json"
    journal.write_text(json.dumps(record))
    env = {**ENV, "EDGEPATH_AGENT_STATUS_FILE": str(tmp_path / "status.json")}
    argv = ["run", "--steps", "1", "--backend", backend, "--service", "grpc://127.0.0.1:9",
            "--interface", "lo=ETHERNET", "--journal", str(journal), "--log-format", "text"]  # fmt: skip
    result = CliRunner().invoke(app, argv, env=env)
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert result.exit_code == 78, result.output
    assert len(errors) == 1 and named in errors[0] and f"`edgepath-agent rollback --journal {journal}`" in errors[0]
    assert json.loads(journal.read_text()) == record


def netns_sysctl(ns: str, key: str) -> str:
    from edgepath_agent.testbed.netns import sh

    return sh(["ip", "netns", "exec", ns, "sysctl", "-n", key]).stdout.strip()


@pytest.fixture
def cc_netns() -> Iterator[str]:
    """A throw-away network namespace (its own ``net.ipv4.tcp_congestion_control``); skips without root/MPTCP."""
    from edgepath_agent.testbed.netns import netns_supported, sh

    reason = netns_supported()
    if reason:
        pytest.skip(reason)
    name = f"ep-nmcc-{secrets.token_hex(3)}"
    sh(["ip", "netns", "add", name])
    try:
        yield name
    finally:
        sh(["ip", "netns", "del", name], check=False)


@pytest.mark.netns
def test_rollback_after_a_crash_restores_the_congestion_control_the_networkmanager_backend_changed(
    bus: str, networkmanager: FakeNetworkManager, cc_netns: str, tmp_path: Path
) -> None:
    ns, journal = cc_netns, tmp_path / "journal.json"
    original = netns_sysctl(ns, CC_SYSCTL)
    allowed = netns_sysctl(ns, "net.ipv4.tcp_allowed_congestion_control").split()  # what a namespace may set
    others = [cc for cc in allowed if cc != original]
    if not others:
        pytest.skip(f"no allowed congestion control besides {original} ({allowed})")
    config = ApplierConfig(interfaces=("wlan0", "wwan0"), manage_cc=True)

    def run() -> NetworkManagerApplier:
        return NetworkManagerApplier(config, bus, journal_path=journal, netns=ns, allowed_cc=(original, *others))

    run().apply({"primary_path": {"interface": "wwan0"}, "congestion_control": others[0]}, addresses=ADDRS)
    assert netns_sysctl(ns, CC_SYSCTL) == others[0]
    record = json.loads(journal.read_text())

    # The agent dies (no clean stop); `edgepath-agent rollback` (another process, in the host namespace) restores
    # the profiles and, in the namespace recorded, the congestion control.
    result = CliRunner().invoke(app, ["rollback", "--journal", str(journal)], env={"DBUS_SYSTEM_BUS_ADDRESS": bus})
    assert result.exit_code == 0, result.output
    assert networkmanager.applied == networkmanager.saved and not journal.exists()
    assert netns_sysctl(ns, CC_SYSCTL) == original
    assert "rollback: 3 step(s)" in result.output  # two profiles, one sysctl
    assert record == {
        "backend": "networkmanager", "netns": ns, "interfaces": ["wlan0", "wwan0"], "sysctls": {CC_SYSCTL: original},
    }  # fmt: skip

    # A clean stop restores the same way.
    agent = run()
    agent.apply({"primary_path": {"interface": "wlan0"}, "congestion_control": others[0]}, addresses=ADDRS)
    assert netns_sysctl(ns, CC_SYSCTL) == others[0]
    agent.rollback()
    assert netns_sysctl(ns, CC_SYSCTL) == original and not journal.exists()

    # A record of another namespace's original value: this run may not change its own (the rollback would restore
    # the other namespace's and leave this one changed); the start check refuses it first.
    other = {"backend": "networkmanager", "netns": "ep-elsewhere", "interfaces": [], "sysctls": {CC_SYSCTL: "reno"}}
    journal.write_text(json.dumps(other))
    with pytest.raises(JournalError, match="network namespace ep-elsewhere"):
        check_for_run(journal, ns, "networkmanager")
    with pytest.raises(JournalError, match="network namespace ep-elsewhere"):
        run().apply({"primary_path": {"interface": "wwan0"}, "congestion_control": others[0]}, addresses=ADDRS)
    assert netns_sysctl(ns, CC_SYSCTL) == original and json.loads(journal.read_text()) == other
    assert networkmanager.applied == networkmanager.saved  # refused before any connection changed


def test_the_original_congestion_control_is_the_one_before_the_first_run_changed_it(
    bus: str, networkmanager: FakeNetworkManager, tmp_path: Path
) -> None:
    # The sysctl on a dry-run stand-in (tracked state, nothing set on this machine).
    journal, config = tmp_path / "journal.json", ApplierConfig(interfaces=("wlan0", "wwan0"), manage_cc=True)
    device = DryRunBackend(NetState(sysctls=((CC_SYSCTL, "cubic"),)), ADDRS, out=None)

    def run() -> NetworkManagerApplier:
        applier = NetworkManagerApplier(config, bus, journal_path=journal, allowed_cc=("reno", "cubic", "bbr"))
        applier.backend = device
        return applier

    run().apply({"primary_path": {"interface": "wwan0"}, "congestion_control": "reno"})
    assert device.state.sysctls_dict[CC_SYSCTL] == "reno"
    assert json.loads(journal.read_text())["sysctls"] == {CC_SYSCTL: "cubic"}
    # The agent dies; the next run finds the connections as it wants them (nothing to reapply) and changes the
    # congestion control only: the value recorded stays the one before the *first* change, not this run's start.
    networkmanager.reapplied.clear()
    again = run()
    applied = again.apply({"primary_path": {"interface": "wwan0"}, "congestion_control": "bbr"})
    assert applied.steps == 1 and networkmanager.reapplied == [] and device.state.sysctls_dict[CC_SYSCTL] == "bbr"
    assert json.loads(journal.read_text()) == {
        "backend": "networkmanager", "netns": None, "interfaces": ["wlan0", "wwan0"], "sysctls": {CC_SYSCTL: "cubic"},
    }  # fmt: skip
    assert again.rollback() == ["wlan0", "wwan0"]
    assert device.state.sysctls_dict[CC_SYSCTL] == "cubic" and not journal.exists()
    assert networkmanager.applied == networkmanager.saved


def test_an_older_networkmanager_record_still_rolls_back(
    bus: str, networkmanager: FakeNetworkManager, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.json"
    nm_applier(bus, journal).apply({"primary_path": {"interface": "wwan0"}})  # wlan0 and wwan0 changed; dies
    journal.write_text(json.dumps({"backend": "networkmanager", "interfaces": ["wlan0", "wwan0"]}))  # older shape
    networkmanager.reapplied.clear()
    env = {"DBUS_SYSTEM_BUS_ADDRESS": bus}
    dry = CliRunner().invoke(app, ["rollback", "--journal", str(journal), "--dry-run"], env=env)
    assert dry.exit_code == 0 and "profiles of wlan0, wwan0" in dry.output and "sysctl" not in dry.output
    assert "rollback (dry run): 2 step(s) printed, none run" in dry.output, dry.output  # said "rollback: 2 step(s)"
    result = CliRunner().invoke(app, ["rollback", "--journal", str(journal)], env=env)
    assert result.exit_code == 0 and "rollback: 2 step(s)" in result.output, result.output
    assert networkmanager.reapplied == ["wlan0", "wwan0"] and networkmanager.applied == networkmanager.saved
    assert not journal.exists()


@pytest.mark.parametrize(
    "sysctls", [{"kernel.core_pattern": "|/tmp/x"}, {CC_SYSCTL: "reno; reboot"}, ["reno"], {CC_SYSCTL: 1}]
)
def test_a_networkmanager_record_with_sysctls_the_agent_never_writes_is_refused(
    bus: str, networkmanager: FakeNetworkManager, tmp_path: Path, sysctls: Any
) -> None:
    journal = tmp_path / "journal.json"
    record = {"backend": "networkmanager", "netns": None, "interfaces": ["wlan0"], "sysctls": sysctls}
    journal.write_text(json.dumps(record))
    result = CliRunner().invoke(app, ["rollback", "--journal", str(journal)], env={"DBUS_SYSTEM_BUS_ADDRESS": bus})
    assert result.exit_code == 2 and "Error: " in result.output, result.output
    assert networkmanager.reapplied == [] and json.loads(journal.read_text()) == record  # nothing touched
    with pytest.raises(JournalError, match="not a journal written by edgepath-agent"):
        check_for_run(journal, None, "networkmanager")  # `run` refuses it before it starts, too (exit 78)


def test_a_deleted_devices_profile_is_skipped_and_the_others_still_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile that cannot be reapplied is skipped when its device no longer exists where the record was taken
    (its applied connection went with it; the saved profile was never changed), and still fails when the device
    exists (NetworkManager refused it); the congestion control is restored either way. ``Reapply`` is stubbed
    (both fail); the real deletion is in netns/test_agent_networkmanager_netns.py."""
    from edgepath_agent.applier import Restored, RestoreIncomplete
    from edgepath_agent.applier import networkmanager as nm

    def refused(interfaces: list[str], *_args: object) -> tuple[list[str], list[str]]:
        done = [name for name in interfaces if name == "wlan0"]
        failed = [f"reapplying {name}'s saved NetworkManager profile failed: refused" for name in interfaces]
        return done, [line for line in failed if "wlan0" not in line]

    monkeypatch.setattr(nm, "restore_profiles", refused)
    backend = DryRunBackend(NetState(sysctls=((CC_SYSCTL, "bbr"),)), ADDRS, out=None)
    backend.interfaces = {"eth1", "wlan0"}  # wwan0 was deleted
    with pytest.raises(RestoreIncomplete) as failed:
        nm.restore_record(["eth1", "wlan0", "wwan0"], {CC_SYSCTL: "cubic"}, None, backend=backend)
    assert failed.value.failed == ("reapplying eth1's saved NetworkManager profile failed: refused",)
    gone = "reapplying wwan0's saved NetworkManager profile (device wwan0 no longer exists)"
    assert failed.value.skipped == (gone,) and failed.value.steps == 4
    assert backend.state.sysctls_dict[CC_SYSCTL] == "cubic"

    restored = nm.restore_record(["wlan0", "wwan0"], {CC_SYSCTL: "cubic"}, None, backend=backend)
    assert restored == Restored(3, (gone,))


def test_an_earlier_runs_record_is_something_to_restore_for_both_backends(tmp_path: Path) -> None:
    """The stop's status says "restored at stop" when the rollback restored something: also an earlier run's
    changes found in the journal, with the NetworkManager backend too (it has no journal object to ask)."""
    nm_journal = tmp_path / "nm.json"
    assert not NetworkManagerApplier(CONFIG, "unix:path=/nonexistent", journal_path=nm_journal).changed_anything
    nm_journal.write_text(json.dumps({"backend": "networkmanager", "netns": None, "interfaces": ["wwan0"],
                                      "sysctls": {}}))  # fmt: skip
    assert NetworkManagerApplier(CONFIG, "unix:path=/nonexistent", journal_path=nm_journal).changed_anything
    journal = Journal()
    assert not Applier(DryRunBackend(ROUTES, ADDRS, out=None), journal, CONFIG).changed_anything
    journal.begin(ROUTES)
    assert Applier(DryRunBackend(ROUTES, ADDRS, out=None), journal, CONFIG).changed_anything
