"""``edgepath-agent`` command line (typer)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from tqdm import tqdm

from edgepath_agent import replay as rp
from edgepath_agent.client import ServiceError, connect

app = typer.Typer(help="EdgePath device agent.", no_args_is_help=True)


@app.callback()
def _root() -> None:
    """EdgePath device agent: replay, run, rollback."""


@app.command()
def replay(
    wifi: Annotated[Path, typer.Option(help="WiFi tests CSV (mobilebandwidth format)", exists=True, dir_okay=False)],
    cellular: Annotated[Path, typer.Option(help="Cellular tests CSV (mobilebandwidth format)", exists=True, dir_okay=False)],
    service: Annotated[str, typer.Option(help="grpc://HOST:PORT or http://HOST:PORT")],
    report: Annotated[Path, typer.Option(help="Where to write the JSON report")],
    plot: Annotated[Path, typer.Option(help="Where to write the PNG plot")],
    rounds: Annotated[int, typer.Option(min=1, help="Paired situations to replay")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed of the pairing")] = 7,
    device_id: Annotated[str, typer.Option(help="device_id sent with every request")] = "replay-device",
    cellular_access_type: Annotated[str, typer.Option(help="LTE or NR")] = "LTE",
    progress: Annotated[bool, typer.Option(help="Show a progress bar")] = True,
) -> None:
    """Replay paired WiFi/cellular situations through a running service and report throughput."""
    try:
        client = connect(service)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--service") from exc
    situations = rp.pair_situations(
        rp.load_tests(wifi), rp.load_tests(cellular), rounds, seed, cellular_access_type.upper()
    )
    bar = tqdm(total=len(situations), desc=f"replay via {service}", unit="round", disable=not progress)
    try:
        result = rp.run_replay(client, situations, device_id=device_id, on_round=lambda _: bar.update())
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
