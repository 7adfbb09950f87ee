"""``edgepath-agent`` command line (typer).

The device runtime (``run``, ``status``, ``rollback``, ``--help``, ``--version``)
imports only the base dependencies; ``replay`` needs the ``replay`` extra
(numpy, pandas, matplotlib, tqdm), imported when that command runs.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Optional

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

EXTRA_HINT = "pip install 'edgepath-agent[replay]'"


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
    parts = []
    for e in errors():
        ctx = e.get("ctx") or {}
        reason = ctx["error"] if e.get("type") == "value_error" and "error" in ctx else e.get("msg", "invalid")
        name = ".".join(str(p) for p in e.get("loc", ())) or "settings"
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
    config: Annotated[Optional[Path], typer.Option(help="Agent settings file (TOML or JSON)")] = None,
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
    journal: Annotated[Optional[Path], typer.Option(help="Journal file (prior state + changes)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the commands instead of running them")] = False,
    netns: Annotated[
        Optional[str], typer.Option(help="Manage the device in this network namespace: read and apply there")
    ] = None,
    backend: Annotated[
        Optional[str], typer.Option(help="command (ip/sysctl, default), netlink (pyroute2) or networkmanager (D-Bus)")
    ] = None,
    cc_profile: Annotated[Optional[str], typer.Option(help="throughput, latency, coupled or default")] = None,
    steps: Annotated[Optional[int], typer.Option(help="Stop after this many steps (default: until SIGTERM)")] = None,
    ca_file: Annotated[
        Optional[Path], typer.Option(help="CA bundle that signed the service's certificate (grpcs:// / https://)")
    ] = None,
    cert_file: Annotated[Optional[Path], typer.Option(help="Device certificate for mTLS (with --key-file)")] = None,
    key_file: Annotated[
        Optional[Path], typer.Option(help="Device private key for mTLS; refused if readable by group/others")
    ] = None,
    token: Annotated[
        Optional[str], typer.Option(help="Bearer token for the service (visible in ps: prefer --token-file)")
    ] = None,
    token_file: Annotated[
        Optional[Path], typer.Option(help="File holding the bearer token; refused if readable by group/others")
    ] = None,
    log_level: Annotated[Optional[str], typer.Option(help="DEBUG, INFO, WARNING or ERROR (default INFO)")] = None,
    log_format: Annotated[
        Optional[str], typer.Option(help="json, text or auto (JSON when stderr is the journal; default)")
    ] = None,
) -> None:
    """Run the agent: collect → decide → apply → measure → report until SIGTERM (then restore).

    Exits 2 ("Error: …") on bad settings, a managed interface this device does not have (dry runs
    too), a missing iperf3 or ip (iproute2), an unavailable laminar flag, or when the service refuses
    this device's credentials (after restoring the state, as on SIGTERM); 3 when another manager owns
    the interfaces.
    """
    from pydantic import ValidationError

    from edgepath_agent.collector import parse_interface_map
    from edgepath_agent.daemon import (
        CredentialsRefused,
        InterfaceMissing,
        IpMissing,
        LaminarUnavailable,
        load_config,
        run_daemon,
        warn_unknown_env,
    )
    from edgepath_agent.iperf import IperfMissing
    from edgepath_agent.journal_log import setup_logging
    from edgepath_agent.netmanager import NetworkConflict

    try:
        cfg = load_config(
            config,
            service=service or None,
            interfaces=parse_interface_map(interface) if interface else None,
            device_id=device_id,
            interval_s=interval_s,
            probe=probe,
            probe_tool=probe_tool,
            journal=journal,
            backend="dry-run" if dry_run else backend,
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
        setup_logging(cfg.log_level, cfg.log_format)
        warn_unknown_env()  # a misspelt EDGEPATH_AGENT_* variable is otherwise ignored without a word
        cfg.credentials()  # refuse a missing file or a key/token readable by others before touching anything
    except (ValidationError, ValueError, PermissionError, FileNotFoundError) as exc:
        raise typer.BadParameter(settings_error(exc)) from exc
    try:
        done = run_daemon(cfg, max_steps=steps)
    except (IperfMissing, IpMissing, LaminarUnavailable, InterfaceMissing, CredentialsRefused) as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except NetworkConflict as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(3) from exc
    typer.echo(f"stopped after {done} step(s); state restored: {cfg.restore_on_exit}")


@app.command()
def status(
    status_file: Annotated[Optional[Path], typer.Option(help="Status record written by `run`")] = None,
    config: Annotated[Optional[Path], typer.Option(help="Agent settings file (for status_file and service)")] = None,
    check: Annotated[bool, typer.Option(help="Also probe the configured service URLs now")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the record as JSON")] = False,
    timeout_s: Annotated[float, typer.Option(help="Per-URL probe timeout, s (with --check)")] = 2.0,
) -> None:
    """Current recommendation, applied state, service reachability and last outcome of the running agent.

    Exit code 0 when a record exists and the process that wrote it is still running (and, with
    --check, a service URL answers); 1 otherwise: no record, the agent that wrote it has exited
    ("agent: not running (last record by pid N, …)"; with --json, "running": false), or no service
    URL answers. An ``EDGEPATH_AGENT_*`` variable that names no setting is warned about on stderr, as
    ``run`` does (stdout, the record, is unchanged).
    """
    from pydantic import ValidationError

    from edgepath_agent.daemon import load_config, unknown_env_message, unknown_env_settings
    from edgepath_agent.status import format_status, pid_alive, probe_service, read_status

    for var, close in unknown_env_settings():  # as `run` warns; stderr: scripts read stdout (--json)
        typer.echo(f"warning: {unknown_env_message(var, close)}", err=True)
    try:
        cfg = load_config(config, status_file=status_file)
    except (ValidationError, ValueError, OSError) as exc:
        raise typer.BadParameter(settings_error(exc)) from exc
    path = cfg.status_file
    record = read_status(path) if path is not None else None
    ok = record is not None
    running = None
    if record is None:
        record = {"service": {"urls": list(cfg.service)}}
    else:
        running = pid_alive(record.get("pid"))
        if running is not None:
            record["running"] = running
        ok = running is not False
    if check:  # the running agent's URLs when it wrote a record, else the configured ones
        urls = (record.get("service") or {}).get("urls") or list(cfg.service)
        probes = {url: probe_service(url, timeout_s) for url in urls}
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
    journal: Annotated[Path, typer.Option(help="Journal file written by `run`")] = Path(
        "/var/lib/edgepath-agent/journal.json"
    ),
    netns: Annotated[Optional[str], typer.Option(help="Network namespace the agent worked in")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the commands instead of running them")] = False,
) -> None:
    """Restore the network state the journal recorded before the agent's first change.

    Exit code 0 when restored (or nothing to restore); 1 when a restore step failed (the journal is
    kept: retry); 2 ("Error: …") when the journal cannot be read (run as the agent's user or root).
    """
    from edgepath_agent.applier import ApplyError
    from edgepath_agent.daemon import rollback as do_rollback

    try:
        steps = do_rollback(journal, netns=netns, dry_run=dry_run)
    except PermissionError as exc:
        typer.echo(
            f"Error: no access to the journal {journal} ({exc.strerror or exc}): run rollback as the agent's "
            "user (edgepath-agent) or as root",
            err=True,
        )
        raise typer.Exit(2) from exc
    except ApplyError as exc:
        typer.echo(f"rollback failed (journal kept, retry): {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"rollback: {steps} step(s)" if steps else "rollback: nothing to restore")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
