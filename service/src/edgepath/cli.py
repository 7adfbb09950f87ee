"""``edgepath`` command line (typer)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import ValidationError

from edgepath.engines.primary_path import POLICIES
from edgepath.settings import load_settings

app = typer.Typer(help="EdgePath: path recommendations for multipath devices.", no_args_is_help=True)


@app.callback()
def _root() -> None:
    """EdgePath service, trainer and evaluations."""


@app.command()
def serve(
    host: Annotated[Optional[str], typer.Option(help="Bind address for both servers")] = None,
    grpc_port: Annotated[Optional[int], typer.Option(help="gRPC port (0 = any free port)")] = None,
    http_port: Annotated[Optional[int], typer.Option(help="REST port (0 = any free port)")] = None,
    policy: Annotated[Optional[str], typer.Option(help=f"Bandit policy: {', '.join(POLICIES)}")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Random seed of the policies")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Outcomes per online refit")] = None,
    config: Annotated[Optional[Path], typer.Option(help="Settings file (TOML or JSON)")] = None,
    ready_file: Annotated[
        Optional[Path], typer.Option(help="Write {grpc_port, http_port, pid} as JSON here once serving")
    ] = None,
    log_level: Annotated[Optional[str], typer.Option(help="Log level")] = None,
    store: Annotated[
        Optional[str], typer.Option(help="State store: memory:// (default) or redis://HOST:PORT/DB (shared)")
    ] = None,
    trainer: Annotated[
        Optional[bool],
        typer.Option(
            "--trainer/--no-trainer",
            help="Train in this process (default: yes with memory://; with redis:// compete for the trainer lock)",
        ),
    ] = None,
) -> None:
    """Run the gRPC and REST servers (in-process state store by default)."""
    from edgepath.main import Service

    try:
        settings = load_settings(
            config,
            host=host,
            grpc_port=grpc_port,
            http_port=http_port,
            policy=policy,
            seed=seed,
            batch_size=batch_size,
            log_level=log_level,
            store_url=store,
            trainer=trainer,
        )
        if settings.policy not in POLICIES:
            raise typer.BadParameter(f"unknown policy {settings.policy!r}; choose one of {', '.join(POLICIES)}")
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def run() -> None:
        service = Service.build(settings)
        task = asyncio.create_task(service.run())
        started = asyncio.create_task(service.wait_started())
        done, _ = await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            await task
            return
        if ready_file is not None:
            tmp = ready_file.with_suffix(".tmp")
            tmp.write_text(
                json.dumps({"grpc_port": service.grpc_port, "http_port": service.http_port, "pid": os.getpid()})
            )
            tmp.replace(ready_file)
        await task

    asyncio.run(run())


@app.command()
def train(
    store: Annotated[Optional[str], typer.Option(help="Shared state store, redis://HOST:PORT/DB")] = None,
    policy: Annotated[Optional[str], typer.Option(help=f"Bandit policy: {', '.join(POLICIES)}")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Random seed of the policies")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Outcomes per online refit")] = None,
    config: Annotated[Optional[Path], typer.Option(help="Settings file (TOML or JSON)")] = None,
    log_level: Annotated[Optional[str], typer.Option(help="Log level")] = None,
) -> None:
    """Run the online trainer on a shared store: one active trainer at a time (Redis lock).

    Consumes the outcome stream, refits every ``batch_size`` outcomes and publishes signed,
    versioned model snapshots that the serving replicas hot-swap. Stops on SIGINT/SIGTERM.
    """
    import signal

    try:
        settings = load_settings(
            config, store_url=store, policy=policy, seed=seed, batch_size=batch_size, log_level=log_level
        )
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if not settings.store_url.startswith(("redis://", "rediss://", "unix://")):
        raise typer.BadParameter("train needs a shared store: --store redis://HOST:PORT/DB")
    if settings.policy not in POLICIES:
        raise typer.BadParameter(f"unknown policy {settings.policy!r}; choose one of {', '.join(POLICIES)}")
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def run() -> None:
        from edgepath.main import build_model, build_store, hmac_key_bytes
        from edgepath.metrics import Metrics
        from edgepath.state.redis import RedisStore
        from edgepath.training.leader import TrainerRole
        from edgepath.training.online import ModelRegistry
        from edgepath.training.snapshots import SnapshotStore

        metrics = Metrics.create()
        shared = build_store(settings, metrics)
        assert isinstance(shared, RedisStore)
        snapshots = SnapshotStore(shared, hmac_key_bytes(settings), metrics)
        registry = ModelRegistry(build_model(settings))
        role = TrainerRole(shared, snapshots, registry, settings.batch_size, settings.trainer_lock_ttl_s)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        logging.getLogger("edgepath").info("trainer %s waiting for the trainer lock", role.consumer)
        try:
            await role.run(stop)
        finally:
            await shared.close()

    asyncio.run(run())


def main() -> None:
    app()


if __name__ == "__main__":
    main()
