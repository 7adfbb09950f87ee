"""``edgepath-testbed``: the MPTCP network-namespace testbed (needs root and kernel MPTCP).

``edgepath-testbed run --report R.json --plot P.png [--steps N --size-bytes B ...]``
builds the namespaces, runs the scenario (testbed/scenario.py) and tears down.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(
    help="EdgePath MPTCP testbed in network namespaces.",
    no_args_is_help=True,
    rich_markup_mode="rich" if sys.stderr.isatty() else None,  # to a pipe: one plain "Error: …" line, exit 2
    pretty_exceptions_enable=sys.stderr.isatty(),
)

_DATA = Path("service/data/mobilebandwidth")


@app.command()
def run(
    report: Annotated[Path, typer.Option(help="Where to write the JSON report")],
    plot: Annotated[Optional[Path], typer.Option(help="Where to write the PNG plot")] = None,
    steps: Annotated[int, typer.Option(min=1, help="Paired situations (each: 3 transfers)")] = 300,
    size_bytes: Annotated[int, typer.Option(min=1, help="Transfer size, bytes")] = 256 * 1024,
    seed: Annotated[int, typer.Option(help="Seed of the pairing, the policy order and the service")] = 7,
    scale: Annotated[float, typer.Option(min=0.0, help="Shaped rate = scale × measured bandwidth")] = 0.25,
    min_rate_mbit: Annotated[float, typer.Option(min=0.1, help="Lowest shaped rate, Mbit/s")] = 1.0,
    max_rate_mbit: Annotated[float, typer.Option(min=0.1, help="Highest shaped rate, Mbit/s")] = 40.0,
    wifi: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="WiFi tests CSV")] = _DATA / "wifi4.csv",
    cellular: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="Cellular tests CSV")] = _DATA / "4G.csv",
    policy: Annotated[Optional[str], typer.Option(help="Service bandit policy (default: the service's)")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Service outcomes per refit (default: its own)")] = None,
    loss_wlan0: Annotated[float, typer.Option(min=0.0, max=1.0, help="Random loss on wlan0, both ways")] = 0.0,
    loss_wwan0: Annotated[float, typer.Option(min=0.0, max=1.0, help="Random loss on wwan0, both ways")] = 0.0,
    scenario_name: Annotated[
        str,
        typer.Option(
            "--scenario",
            help="primary (default), ssmp (testbed/ssmp.py), mlpm or cc (issue 20: testbed/mlpm.py, testbed/cc.py)",
        ),
    ] = "primary",
    trials: Annotated[int, typer.Option(min=1, help="--scenario ssmp: trials per download size")] = 10,
) -> None:
    """Learned policy vs wifi_first vs lte_first on real MPTCP transfers; writes the report (and plot).

    ``--scenario ssmp``: SSMP vs DSS; ``mlpm`` / ``cc``: the issue-20 scenarios (``--steps`` = steps /
    repetitions, ``--seed``; their own defaults otherwise).
    """
    from edgepath_agent.cli import require_extra
    from edgepath_agent.testbed.netns import netns_supported

    if scenario_name in ("mlpm", "cc"):
        require_extra(f"edgepath_agent.testbed.{scenario_name}", f"edgepath-testbed run --scenario {scenario_name}")
        from edgepath_agent.testbed.extra import run_extra

        reason = netns_supported()
        if reason:
            typer.echo(f"testbed unavailable: {reason}", err=True)
            raise typer.Exit(2)
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        steps_given = steps if steps != 300 else None
        line = run_extra(scenario_name, report.resolve(), plot.resolve() if plot else None, steps_given, seed,
                         ["edgepath-testbed", *sys.argv[1:]])  # fmt: skip
        typer.echo(f"report: {report}  {line}")
        return
    scenario = require_extra("edgepath_agent.testbed.scenario", "edgepath-testbed run")
    ScenarioParams, run_scenario = scenario.ScenarioParams, scenario.run

    reason = netns_supported()
    if reason:
        typer.echo(f"testbed unavailable: {reason}", err=True)
        raise typer.Exit(2)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if scenario_name == "ssmp":
        from edgepath_agent.testbed import ssmp

        out = ssmp.run(ssmp.SsmpParams(trials=trials, seed=seed, command=["edgepath-testbed", *sys.argv[1:]]),
                       report.resolve(), plot.resolve() if plot else None)  # fmt: skip
        typer.echo(f"report: {report}  reduction_pct: {json.dumps(out['reduction_pct'])}")
        return
    if scenario_name != "primary":
        raise typer.BadParameter(
            f"unknown scenario {scenario_name!r}: primary, ssmp, mlpm or cc", param_hint="--scenario"
        )
    params = ScenarioParams(
        wifi=str(wifi.resolve()),
        cellular=str(cellular.resolve()),
        steps=steps,
        size_bytes=size_bytes,
        seed=seed,
        scale=scale,
        min_rate_mbit=min_rate_mbit,
        max_rate_mbit=max_rate_mbit,
        policy=policy,
        batch_size=batch_size,
        loss_wlan0=loss_wlan0,
        loss_wwan0=loss_wwan0,
        command=["edgepath-testbed", *sys.argv[1:]],
    )
    result = run_scenario(params, report.resolve(), plot.resolve() if plot else None)
    summary = {pol: v["throughput_mbps"]["mean"] for pol, v in result["policies"].items()}
    typer.echo(f"report: {report}  mean throughput Mbit/s: {json.dumps(summary)}")


@app.command(hidden=True)
def inside(
    params: Annotated[Path, typer.Option()],
    report: Annotated[Path, typer.Option()],
    plot: Annotated[Optional[Path], typer.Option()] = None,
) -> None:
    """(internal) The scenario, run inside the device namespace."""
    from edgepath_agent.testbed.scenario import ScenarioParams, run_inside

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_inside(ScenarioParams(**json.loads(params.read_text())), report, plot)


@app.command("inside-scenario", hidden=True)
def inside_scenario(
    scenario: Annotated[str, typer.Option()],
    params: Annotated[Path, typer.Option()],
    report: Annotated[Path, typer.Option()],
    plot: Annotated[Optional[Path], typer.Option()] = None,
) -> None:
    """(internal) An issue-20 scenario (mlpm, cc), run inside the device namespace."""
    from edgepath_agent.testbed.extra import run_extra_inside

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_extra_inside(scenario, json.loads(params.read_text()), report, plot)


@app.command("serve-transfers", hidden=True)
def serve_transfers(
    port: Annotated[int, typer.Option()] = 5201,
    host: Annotated[str, typer.Option()] = "0.0.0.0",
    ready_file: Annotated[Optional[Path], typer.Option()] = None,
    congestion_control: Annotated[Optional[str], typer.Option()] = None,
    sample_interval_s: Annotated[Optional[float], typer.Option()] = None,
) -> None:
    """(internal) Transfer server (meter protocol) until SIGTERM."""
    from edgepath_agent.meter import TransferServer

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with TransferServer(
        host, port, congestion_control=congestion_control, sample_interval_s=sample_interval_s
    ) as server:
        if ready_file is not None:
            ready_file.write_text(json.dumps({"port": server.port, "mptcp": server.mptcp}))
        stop.wait()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
