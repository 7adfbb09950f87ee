"""``edgepath-agent`` command line (typer).

The device runtime (``run``, ``status``, ``rollback``, ``--help``, ``--version``)
imports only the base dependencies; ``replay`` needs the ``replay`` extra
(numpy, pandas, matplotlib, tqdm), imported when that command runs.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, NoReturn, Optional

import typer
from typer.core import TyperCommand

if TYPE_CHECKING:
    # The context TyperCommand.parse_args takes: typer (0.29 here) ships its own copy of click.
    from typer._click import Context

app = typer.Typer(
    help="EdgePath device agent.",
    no_args_is_help=True,
    rich_markup_mode="rich" if sys.stderr.isatty() else None,  # to a pipe: one plain "Error: …" line, exit 2
    pretty_exceptions_enable=sys.stderr.isatty(),
)

#: edgepath-agent is installed from the EdgePath source tree (no package index publishes it): the extra likewise.
EXTRA_HINT = (
    "install the extra from the EdgePath source tree into the agent's environment: pip install './client-agent[replay]'"
)

#: ``run``'s exit codes (systemd's ``Restart=on-failure`` restarts on any but 0; the unit's
#: ``RestartPreventExitStatus=`` lists the permanent ones, :data:`PERMANENT_EXIT_CODES`).
EXIT_OK = 0
#: An unexpected error (a bug: the traceback is printed); restarted.
EXIT_UNEXPECTED = 1
#: A managed interface does not exist (yet: a USB modem appears later), or click's command-line usage errors;
#: restarted (``RestartSec=``), within the unit's start limit.
EXIT_RETRY = 2
#: Another manager (NetworkManager, mptcpd) owns the interfaces, or ``backend = "networkmanager"`` without
#: NetworkManager: not restarted until the operator changes one of them.
EXIT_CONFLICT = 3
#: sysexits.h ``EX_CONFIG``: something only the operator can fix, which no restart heals: invalid settings or
#: settings file, credentials the service refuses, an unusable journal, a kernel without MPTCP, no ``ip``/iperf3
#: where they are needed, ``laminar = "on"`` where it is unsupported. Not restarted.
EXIT_CONFIG = os.EX_CONFIG
#: sysexits.h ``EX_UNAVAILABLE``: ``run --steps N`` ran steps and none got a recommendation from the service
#: (down, a wrong URL or port, every request refused), or every step was skipped (no managed interface could carry
#: a path). The unit never passes ``--steps``: the daemon keeps the last configuration and asks again instead.
EXIT_UNAVAILABLE = os.EX_UNAVAILABLE
#: sysexits.h ``EX_TEMPFAIL``: the stop's restore left steps undone (a command the kernel or NetworkManager refused;
#: the steps of a device that no longer exists are skipped, not failed): every step was attempted, the journal is
#: kept, and ``edgepath-agent rollback`` (the unit's ``ExecStopPost=``) retries. Restarted: the next start keeps the
#: journal's snapshot.
EXIT_TEMPFAIL = os.EX_TEMPFAIL
#: What the unit's ``RestartPreventExitStatus=`` must list (a test checks it does).
PERMANENT_EXIT_CODES = (EXIT_CONFLICT, EXIT_CONFIG)


def fail(message: str, code: int) -> NoReturn:
    """Print ``Error: message`` (one line, stderr) and exit with ``code``.

    Raises
    ------
    typer.Exit
        Always, with ``code``.
    """
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(code)


def settings_file_problem(path: Path | None) -> str | None:
    """Why the settings file ``path`` cannot be read (it does not exist, is a directory or is unreadable: the file,
    or a directory on its way, with what to do about the permission), or ``None`` when it can (or none is given)."""
    if path is None:
        return None
    try:
        if path.is_dir():
            return f"settings file {path} is a directory, not a file"
        with path.open("rb"):
            pass
    except FileNotFoundError:
        return f"settings file {path} does not exist"
    except PermissionError as exc:
        return (
            f"settings file {path} cannot be read ({exc.strerror or exc}): make it (and its directories) readable by "
            f"the user the agent runs as (the unit's edgepath-agent: chgrp edgepath-agent {path}; chmod 640 {path})"
        )
    except OSError as exc:
        return f"settings file {path} cannot be read ({exc.strerror or exc})"
    return None


#: pydantic-settings' message for a variable its environment source cannot parse (a list or mapping not in JSON).
_ENV_PARSE_ERROR = re.compile(r'error parsing value for field "(?P<field>[^"]+)" from source "EnvSettingsSource"')


def load_settings_error(exc: Exception, path: Path | None) -> str:
    """One line for an error :func:`edgepath_agent.daemon.load_config` raised, naming the file when it is the
    file's: a TOML/JSON syntax error, an ``EDGEPATH_AGENT_*`` variable that is not the JSON its setting needs
    (pydantic-settings' ``SettingsError`` named neither the variable nor the form), or invalid settings (each named
    by :func:`settings_error`)."""
    env = _ENV_PARSE_ERROR.search(str(exc))
    if env is not None:
        field = env["field"]
        var = f"EDGEPATH_AGENT_{field.upper()}"
        example = {"service": "'[\"grpc://127.0.0.1:50051\"]'", "interfaces": '\'{"wlan0": "WIFI"}\''}.get(field)
        form = f", e.g. {var}={example}" if example else ""
        return (
            f"environment variable {var} (setting {field}) is not valid JSON: lists and mappings are given as "
            f"JSON{form}"
        )
    if path is not None and isinstance(exc, (tomllib.TOMLDecodeError, json.JSONDecodeError)):
        kind = "JSON" if isinstance(exc, json.JSONDecodeError) else "TOML"
        return f"settings file {path} is not valid {kind}: {exc}"
    sources = (
        f"{path}, EDGEPATH_AGENT_* or the command line" if path is not None else "EDGEPATH_AGENT_* or the command line"
    )
    if callable(getattr(exc, "errors", None)):
        return f"invalid settings ({sources}): {settings_error(exc)}"
    return settings_error(exc)


def require_extra(module: str, command: str) -> ModuleType:
    """Import ``module`` from the ``replay`` extra, or exit 2 with the install command.

    Raises
    ------
    typer.Exit
        (code 2) when the module or one of its dependencies is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        typer.echo(f"{command} needs the replay extra ({exc.name} is not installed): {EXTRA_HINT}", err=True)
        raise typer.Exit(2) from exc


class NeedsReplayExtra(TyperCommand):
    """A command of the ``replay`` extra: without the extra, any call but ``--help`` exits 2 naming it before its
    options are read (a newcomer met each missing option in turn before learning the extra was missing)."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        if not {"--help", "-h"} & set(args):
            for module in ("edgepath_agent.replay", "tqdm"):
                require_extra(module, ctx.command_path)
        return super().parse_args(ctx, args)


def settings_error(exc: Exception) -> str:
    """One line for a settings error: each invalid setting of a pydantic ``ValidationError`` as ``name: reason``
    (a validator's own message without pydantic's ``"Value error, "``), joined by ``; ``; any other error as is."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    from edgepath_agent.daemon import closest_setting

    parts = []
    for e in errors():
        ctx = e.get("ctx") or {}
        reason = ctx["error"] if e.get("type") == "value_error" and "error" in ctx else e.get("msg", "invalid")
        loc = e.get("loc", ())
        name = ".".join(str(p) for p in loc) or "settings"
        if e.get("type") == "extra_forbidden" and len(loc) == 1:  # a misspelt setting, as for EDGEPATH_AGENT_*
            close = closest_setting(str(loc[0]))
            reason = f"no such setting (did you mean {close}?)" if close else "no such setting"
        parts.append(f"{name}: {reason}")
    return "; ".join(parts)


def _version(value: bool) -> None:
    if value:
        from edgepath_agent import __version__

        typer.echo(f"edgepath-agent {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit")
    ] = False,
) -> None:
    """EdgePath device agent: run, status, rollback (and replay with the replay extra)."""


@app.command(cls=NeedsReplayExtra)
def replay(
    wifi: Annotated[Path, typer.Option(help="WiFi tests CSV (mobilebandwidth format)", exists=True, dir_okay=False)],
    cellular: Annotated[
        Path, typer.Option(help="Cellular tests CSV (mobilebandwidth format)", exists=True, dir_okay=False)
    ],
    service: Annotated[str, typer.Option(help="grpc://HOST:PORT or http://HOST:PORT")],
    report: Annotated[Path, typer.Option(help="Where to write the JSON report")],
    plot: Annotated[Path, typer.Option(help="Where to write the PNG plot")],
    rounds: Annotated[int, typer.Option(min=1, help="Paired situations to replay")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed of the pairing")] = 7,
    device_prefix: Annotated[str, typer.Option(help="Prefix of the per-user device ids sent")] = "replay",
    cellular_access_type: Annotated[str, typer.Option(help="LTE or NR")] = "LTE",
    progress: Annotated[bool, typer.Option(help="Show a progress bar")] = True,
) -> None:
    """Replay paired WiFi/cellular situations through a running service and report throughput (replay extra)."""
    rp = require_extra("edgepath_agent.replay", "replay")
    tqdm = require_extra("tqdm", "replay").tqdm
    from edgepath_agent.client import ServiceError, connect

    try:
        client = connect(service)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--service") from exc
    situations = rp.pair_situations(
        rp.load_tests(wifi), rp.load_tests(cellular), rounds, seed, cellular_access_type.upper()
    )
    bar = tqdm(
        total=len(situations),
        desc=f"replay via {service}",
        unit="round",
        disable=not progress,
        mininterval=0.5 if sys.stderr.isatty() else 10.0,  # a few lines, not thousands, in CI logs
    )
    try:
        result = rp.run_replay(client, situations, device_prefix=device_prefix, on_round=lambda _: bar.update())
    except ServiceError as exc:
        typer.echo(f"service refused a call: {exc}", err=True)
        raise typer.Exit(2) from exc
    finally:
        bar.close()
        client.close()
    out = rp.build_report(result, seed=seed, data={"wifi": str(wifi), "cellular": str(cellular)}, service_url=service)
    rp.write_report(out, report)
    rp.plot_running_means(
        result,
        plot,
        f"EdgePath primary path on {out['rounds']} paired real situations ({wifi.stem} × {cellular.stem}, seed {seed})",
    )
    typer.echo(f"report: {report}\nplot:   {plot}")


@app.command()
def run(
    config: Annotated[Optional[Path], typer.Option(help="Agent settings file (TOML or JSON)", readable=False)] = None,
    service: Annotated[
        Optional[list[str]], typer.Option(help="Service URL, repeatable, in order of preference (grpc:// first)")
    ] = None,
    interface: Annotated[
        Optional[list[str]], typer.Option(help="Managed interface NAME=ACCESS (WIFI/LTE/NR/ETHERNET), repeatable")
    ] = None,
    device_id: Annotated[Optional[str], typer.Option(help="device_id (default: host name)")] = None,
    interval_s: Annotated[Optional[float], typer.Option(help="Seconds between decisions")] = None,
    probe: Annotated[Optional[str], typer.Option(help="HOST:PORT of a transfer server for active outcomes")] = None,
    probe_tool: Annotated[
        Optional[str], typer.Option(help="iperf3 (an iperf3 server at --probe; default) or builtin (edgepath meter)")
    ] = None,
    journal: Annotated[
        Optional[Path], typer.Option(help="Journal file (prior state + changes)", readable=False)
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the commands instead of running them")] = False,
    netns: Annotated[
        Optional[str], typer.Option(help="Manage the device in this network namespace: read and apply there")
    ] = None,
    backend: Annotated[
        Optional[str], typer.Option(help="command (ip/sysctl, default), netlink (pyroute2) or networkmanager (D-Bus)")
    ] = None,
    cc_profile: Annotated[Optional[str], typer.Option(help="throughput, latency, coupled or default")] = None,
    steps: Annotated[
        Optional[int],
        typer.Option(min=1, help="Stop after this many steps (default: until SIGTERM); exit 69 if none got an answer"),
    ] = None,
    ca_file: Annotated[
        Optional[Path],
        typer.Option(help="CA bundle that signed the service's certificate (grpcs:// / https://)", readable=False),
    ] = None,
    cert_file: Annotated[
        Optional[Path], typer.Option(help="Device certificate for mTLS (with --key-file)", readable=False)
    ] = None,
    key_file: Annotated[
        Optional[Path],
        typer.Option(help="Device private key for mTLS; refused if readable by group/others", readable=False),
    ] = None,
    token: Annotated[
        Optional[str], typer.Option(help="Bearer token for the service (visible in ps: prefer --token-file)")
    ] = None,
    token_file: Annotated[
        Optional[Path],
        typer.Option(help="File holding the bearer token; refused if readable by group/others", readable=False),
    ] = None,
    log_level: Annotated[Optional[str], typer.Option(help="DEBUG, INFO, WARNING or ERROR (default INFO)")] = None,
    log_format: Annotated[
        Optional[str], typer.Option(help="json, text or auto (JSON when stderr is the journal; default)")
    ] = None,
) -> None:
    """Run the agent: collect → decide → apply → measure → report until SIGTERM (then restore).

    Exit codes (each but 0 and 1 with one "Error: …" line on stderr):

    \b
    0   stopped (SIGTERM, or after --steps N, at least one of which got a
        recommendation from the service)
    1   an unexpected error (a bug; its traceback is printed)
    2   a managed interface this device (or --netns) does not have, in a dry
        run too; systemd retries it (a USB modem's interface may appear
        later); also click's usage errors (an unknown option, a bad value)
    3   another manager (NetworkManager, mptcpd) owns the interfaces, or
        backend = networkmanager without NetworkManager running
    69  (EX_UNAVAILABLE) with --steps: no step got a recommendation from
        the service (down, a wrong URL or port, every request refused; the
        URLs tried and the last error are named), or every step was skipped
        (no managed interface could carry a path); the state is restored
        first. Without --steps (the systemd unit) the agent keeps the last
        configuration and asks again at the next step instead
    75  (EX_TEMPFAIL) the stop could not restore every step of the state it
        found (a command the kernel or NetworkManager refused): the other
        steps ran, the failed ones are named, the journal is kept for
        `edgepath-agent rollback` (the unit's ExecStopPost=) to retry. The
        steps of an interface deleted meanwhile (its routes went with it)
        are skipped, not failed
    78  (EX_CONFIG) a configuration error no restart heals: invalid settings
        or settings file, --dry-run with backend = networkmanager, a kernel
        without MPTCP, an unusable journal (not writable, not a journal,
        another namespace's state, or a record the other kind of backend
        left there: roll it back first), no ip (iproute2) or iperf3 where
        needed, laminar = on where unsupported, a default route of an
        interface the agent does not manage at a metric the agent uses
        (primary_metric, secondary_metric), the service refusing this
        device's credentials (after restoring the state, as on SIGTERM)

    The systemd unit does not restart the agent after 3 or 78
    (RestartPreventExitStatus=). --dry-run checks the configured backend, then
    prints the ip/sysctl commands the command or netlink backend would run.
    """
    from pydantic import ValidationError

    from edgepath_agent.applier import JournalError, RestoreIncomplete, RouteMetricConflict
    from edgepath_agent.applier.journal import check_for_run
    from edgepath_agent.applier.preflight import MptcpUnavailable, check_mptcp
    from edgepath_agent.collector import parse_interface_map
    from edgepath_agent.daemon import (
        CredentialsRefused,
        InterfaceMissing,
        IpMissing,
        LaminarUnavailable,
        ServiceUnavailable,
        load_config,
        require_ip,
        run_daemon,
        warn_unknown_env,
    )
    from edgepath_agent.iperf import IperfMissing
    from edgepath_agent.journal_log import setup_logging
    from edgepath_agent.netmanager import NetworkConflict

    problem = settings_file_problem(config)
    if problem is not None:
        fail(problem, EXIT_CONFIG)
    try:
        interfaces = parse_interface_map(interface) if interface else None
    except ValueError as exc:
        fail(f"--interface: {exc}", EXIT_CONFIG)
    try:
        cfg = load_config(
            config,
            service=service or None,
            interfaces=interfaces,
            device_id=device_id,
            interval_s=interval_s,
            probe=probe,
            probe_tool=probe_tool,
            journal=journal,
            backend=backend,  # the configured one is validated (and checked against --dry-run) first
            netns=netns,
            cc_profile=cc_profile,
            ca_file=ca_file,
            cert_file=cert_file,
            key_file=key_file,
            token=token,
            token_file=token_file,
            log_level=log_level.upper() if log_level else None,
            log_format=log_format,
        )
    except (ValidationError, ValueError, OSError) as exc:
        fail(load_settings_error(exc, config), EXIT_CONFIG)
    try:
        setup_logging(cfg.log_level, cfg.log_format)
    except ValueError as exc:
        fail(settings_error(exc), EXIT_CONFIG)
    warn_unknown_env()  # a misspelt EDGEPATH_AGENT_* variable is otherwise ignored without a word
    try:
        cfg.credentials()  # refuse a missing file or a key/token readable by others before touching anything
    except (ValueError, PermissionError, FileNotFoundError) as exc:
        fail(settings_error(exc), EXIT_CONFIG)
    if dry_run:
        if cfg.backend == "networkmanager":
            fail(
                "--dry-run cannot show what backend = networkmanager would do (it changes NetworkManager's applied "
                "connections over D-Bus, not ip/sysctl commands): run without --dry-run, or with --backend command "
                "to see the commands the agent would run itself",
                EXIT_CONFIG,
            )
        cfg = cfg.model_copy(update={"backend": "dry-run"})  # command, netlink: the same operations, printed
    try:
        require_ip(cfg)
    except IpMissing as exc:  # with --dry-run, not "backend = dry-run runs ip(8)": the user set no such backend
        dry = (
            "--dry-run reads the current routes and MPTCP endpoints with ip(8), but no ip binary is on PATH: "
            "install iproute2 (apt install iproute2, dnf install iproute)"
        )
        fail(dry if dry_run else str(exc), EXIT_CONFIG)
    try:
        check_mptcp(cfg.backend, cfg.netns)
        if cfg.backend != "dry-run":  # a dry run neither reads nor writes the journal
            check_for_run(cfg.journal, cfg.netns, cfg.backend)  # also: no other backend's record left there
    except (MptcpUnavailable, JournalError) as exc:
        fail(str(exc), EXIT_CONFIG)
    try:
        done = run_daemon(cfg, max_steps=steps, require_service=steps is not None)
    except InterfaceMissing as exc:
        fail(str(exc), EXIT_RETRY)
    except RestoreIncomplete as exc:
        fail(f"the state was only partly restored at stop: {exc} (journal {cfg.journal})", EXIT_TEMPFAIL)
    except ServiceUnavailable as exc:  # a smoke test (--steps) must not pass against a service that never answered
        fail(str(exc), EXIT_UNAVAILABLE)
    except (IperfMissing, IpMissing, LaminarUnavailable, CredentialsRefused, JournalError, RouteMetricConflict) as exc:
        fail(str(exc), EXIT_CONFIG)
    except NetworkConflict as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_CONFLICT) from exc
    typer.echo(f"stopped after {done} step(s); state restored: {cfg.restore_on_exit}")


def _positive_seconds(value: float) -> float:
    """A duration option must be above 0 s (``--timeout-s 0`` ended in a gRPC thread's traceback; a negative one
    was taken): click's usage error (exit 2) otherwise."""
    if not value > 0:
        raise typer.BadParameter(f"{value:g} is not above 0 s")
    return value


@app.command()
def status(
    status_file: Annotated[Optional[Path], typer.Option(help="Status record written by `run`", readable=False)] = None,
    config: Annotated[
        Optional[Path], typer.Option(help="Agent settings file (for status_file and service)", readable=False)
    ] = None,
    check: Annotated[
        bool,
        typer.Option(help="Also probe the service URLs now: the running agent's, else the configured ones"),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the record as JSON")] = False,
    timeout_s: Annotated[
        float, typer.Option(help="Per-URL probe timeout, s (with --check), above 0", callback=_positive_seconds)
    ] = 2.0,
) -> None:
    """Current recommendation, applied state, service reachability and last outcome of the running agent.

    Exit code 0 when a record exists and the process that wrote it is still running (and, with
    --check, a service URL answers); 1 otherwise: no record (with --json, "running": false), the agent
    that wrote it has exited ("agent: not running (last record by pid N, …)"; with --json, "running":
    false), or no service URL answers; 2 ("Error: …") when the record or the settings cannot be read (not
    JSON, a record of the wrong shape, a directory, no permission, invalid settings, TLS files that do not load
    with --check), or for a usage error (--timeout-s not above 0). --check probes the URLs the running agent
    dials (its record's; a note on stderr when the settings now name others), else, with no agent running, the
    configured ones; with the settings' ca_file and cert_file/key_file, as run connects. An
    ``EDGEPATH_AGENT_*`` variable that names no setting is warned about on stderr, as ``run`` does (stdout, the
    record, is unchanged).
    """
    from pydantic import ValidationError

    from edgepath_agent.daemon import load_config, unknown_env_message, unknown_env_settings
    from edgepath_agent.safety import ClientCredentials, check_tls_files
    from edgepath_agent.status import format_status, pid_alive, probe_service, read_status

    for var, close in unknown_env_settings():  # as `run` warns; stderr: scripts read stdout (--json)
        typer.echo(f"warning: {unknown_env_message(var, close)}", err=True)
    problem = settings_file_problem(config)
    if problem is not None:
        fail(problem, 2)
    try:
        cfg = load_config(config, status_file=status_file)
    except (ValidationError, ValueError, OSError) as exc:
        fail(load_settings_error(exc, config), 2)
    path = cfg.status_file
    try:
        record = read_status(path) if path is not None else None
    except (ValueError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        fail(f"cannot read the status record {path}: {reason}", 2)
    ok = record is not None
    running = None
    if record is None:
        record = {"running": False, "service": {"urls": list(cfg.service)}}
    else:
        running = pid_alive(record.get("pid"))
        if running is not None:
            record["running"] = running
        ok = running is not False
    if check:
        urls = list(cfg.service)
        recorded = (record.get("service") or {}).get("urls") or []
        if running and recorded:  # what the running agent dials; the settings may name others until it restarts
            if recorded != urls:
                typer.echo(
                    f"note: the running agent (pid {record.get('pid')}) uses {', '.join(recorded)}; the settings now "
                    f"name {', '.join(urls)} (restart it to use them): checking the running agent's",
                    err=True,
                )
            urls = recorded
        try:  # the trust and client certificate `run` uses (no token: the probe makes no call)
            cfg.check_credential_files(("ca_file", "cert_file", "key_file"))
            check_tls_files(cfg.ca_file, cfg.cert_file, cfg.key_file)
            tls = ClientCredentials(ca_file=cfg.ca_file, cert_file=cfg.cert_file, key_file=cfg.key_file)
        except (ValueError, OSError) as exc:
            fail(
                f"--check cannot probe with the configured TLS settings (run it as the agent's user or root): {exc}", 2
            )
        probes = {url: probe_service(url, timeout_s, tls) for url in urls}
        record["service_check"] = {url: {"reachable": r, "detail": d} for url, (r, d) in probes.items()}
        ok = ok and any(r for r, _ in probes.values())
    if as_json:
        typer.echo(json.dumps(record, indent=2, sort_keys=True))
    else:
        if "updated_unix_ms" in record:
            typer.echo(format_status(record, running=running))
        else:
            typer.echo(f"agent:          no status record at {path} (is `edgepath-agent run` running?)")
        for url, probe in record.get("service_check", {}).items():
            typer.echo(f"check {url}: {'reachable' if probe['reachable'] else 'UNREACHABLE'} ({probe['detail']})")
    raise typer.Exit(0 if ok else 1)


@app.command()
def rollback(
    journal: Annotated[Path, typer.Option(help="Journal file written by `run`", readable=False)] = Path(
        "/var/lib/edgepath-agent/journal.json"
    ),
    netns: Annotated[
        Optional[str],
        typer.Option(help="Network namespace the agent worked in (default: the one the journal recorded)"),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the commands instead of running them")] = False,
    status_file: Annotated[
        Optional[Path],
        typer.Option(help="Status record to update (default: the settings' status_file)", readable=False),
    ] = None,
    config: Annotated[
        Optional[Path], typer.Option(help="Agent settings file (for status_file)", readable=False)
    ] = None,
) -> None:
    """Restore the network state the journal recorded before the agent's first change.

    The journal records the network namespace the state was taken in: the rollback acts there, whichever
    namespace it is started from; --netns is needed only for a journal that recorded none (written before
    it was recorded), and one naming another namespace than the journal's is refused.

    Exit code 0 when restored (or nothing to restore); 1 when a restore step failed (every step is attempted, the
    failed ones are listed on stderr; the journal is kept: retry); 2 ("Error: …") when the journal cannot be read
    (run as the agent's user or root), is not a journal (not JSON, a directory: restore by hand, then move it away),
    or --netns names another namespace than the journal recorded.

    A step naming an interface that no longer exists (a USB modem unplugged, a VPN or veth gone: its routes went with
    it, and its NetworkManager connection) is skipped, not failed: listed as "skipped: …" on stdout; with only such
    steps skipped the rollback exits 0 and removes the journal.

    When it restored something, or a restore step failed, the agent's status record (--status-file, else the
    settings' status_file: --config, EDGEPATH_AGENT_STATUS_FILE, the default) is rewritten, if there is one, to say
    so: `status` then shows "restored by edgepath-agent rollback" (or the steps still failing) instead of what the
    stop left. A record that cannot be updated is a warning on stderr; the exit code is the rollback's.
    """
    from edgepath_agent.applier import ApplyError, Journal, JournalError, RestoreIncomplete
    from edgepath_agent.applier.journal import rollback_netns
    from edgepath_agent.daemon import rollback as do_rollback
    from edgepath_agent.status import PARTLY_RESTORED, RESTORED

    try:
        where = rollback_netns(Journal(journal), netns)  # read (and checked) before anything is touched
        restored = do_rollback(journal, netns=where, dry_run=dry_run)
    except PermissionError as exc:
        fail(
            f"no access to the journal {journal} ({exc.strerror or exc}): run rollback as the agent's "
            "user (edgepath-agent) or as root",
            2,
        )
    except JournalError as exc:
        fail(str(exc), 2)
    except RestoreIncomplete as exc:
        typer.echo(
            f"rollback incomplete (journal {journal} kept, retry): {len(exc.failed)} of {exc.steps} step(s) failed, "
            "the others ran:",
            err=True,
        )
        for step in exc.failed:
            typer.echo(f"  failed: {step}", err=True)
        for step in exc.skipped:
            typer.echo(f"  skipped: {step}", err=True)
        _mark_status(status_file, config, f"partly restored by edgepath-agent rollback: {exc}", PARTLY_RESTORED)
        raise typer.Exit(1) from exc
    except ApplyError as exc:
        typer.echo(f"rollback failed (journal kept, retry): {exc}", err=True)
        raise typer.Exit(1) from exc
    steps, skipped = restored.steps, restored.skipped
    if steps and not dry_run:
        how = f" (skipped: {'; '.join(skipped)})" if skipped else ""
        _mark_status(status_file, config, f"restored by edgepath-agent rollback{how}", RESTORED)
    if dry_run:
        typer.echo(
            f"rollback (dry run): {steps} step(s) printed, none run" if steps else "rollback: nothing to restore"
        )
    elif skipped:
        typer.echo(f"rollback: {steps} step(s), {len(skipped)} skipped: their device no longer exists")
        for step in skipped:
            typer.echo(f"  skipped: {step}")
    else:
        typer.echo(f"rollback: {steps} step(s)" if steps else "rollback: nothing to restore")


def _mark_status(status_file: Path | None, config: Path | None, configuration: str, state: str) -> None:
    """``rollback``'s update of the status record (:func:`~edgepath_agent.status.mark_configuration`: the sentence
    ``configuration`` and the ``configuration_state`` ``state``): at ``status_file``, else the settings'
    ``status_file``. Never raises: a record that cannot be found (settings that do not load) or updated is a warning
    on stderr (the rollback's own result decides the exit code)."""
    from edgepath_agent.status import mark_configuration

    path = status_file
    if path is None:
        from pydantic import ValidationError

        from edgepath_agent.daemon import load_config

        try:
            path = load_config(config).status_file
        except (ValidationError, ValueError, OSError) as exc:
            typer.echo(f"warning: status record not updated: {load_settings_error(exc, config)}", err=True)
            return
    if path is None:
        return
    try:
        mark_configuration(path, configuration, state)
    except (ValueError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        typer.echo(f"warning: status record {path} not updated: {reason}", err=True)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
