"""Composition root: settings → store → model → plane → trainer → servers.

Only this module wires parts together; everything else receives its
dependencies. :class:`Service` runs the gRPC and REST servers in one asyncio
loop and stops them cleanly on SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field

import uvicorn

from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit
from edgepath.grpc.server import create_server, set_serving
from edgepath.metrics import Metrics
from edgepath.plane import DecisionPlane
from edgepath.rest.app import create_app
from edgepath.settings import Settings
from edgepath.state.base import StateStore
from edgepath.state.memory import MemoryStore
from edgepath.training.online import ModelRegistry, OnlineTrainer

log = logging.getLogger("edgepath")


def build_model(settings: Settings) -> PrimaryPathBandit:
    return PrimaryPathBandit(
        BanditConfig(policy=settings.policy, seed=settings.seed, propensity_floor=settings.propensity_floor)
    )


def build_store(settings: Settings) -> StateStore:
    return MemoryStore(max_decisions=settings.max_decisions, decision_ttl_s=settings.decision_ttl_s)


@dataclass
class Service:
    """A running (or ready to run) EdgePath service process."""

    settings: Settings
    store: StateStore
    registry: ModelRegistry
    plane: DecisionPlane
    trainer: OnlineTrainer
    metrics: Metrics
    grpc_port: int = 0
    http_port: int = 0
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _started: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def build(cls, settings: Settings, store: StateStore | None = None) -> Service:
        metrics = Metrics.create()
        store = store or build_store(settings)
        registry = ModelRegistry(build_model(settings))
        metrics.model_version.set(registry.current.version)
        registry.on_publish(lambda mv: metrics.model_version.set(mv.version))
        plane = DecisionPlane(registry, store, settings, metrics)
        trainer = OnlineTrainer(store, registry, batch_size=settings.batch_size)
        return cls(settings, store, registry, plane, trainer, metrics)

    def stop(self) -> None:
        self._stop.set()

    async def wait_started(self) -> None:
        await self._started.wait()

    async def run(self) -> None:
        """Serve gRPC and REST until :meth:`stop` (or a signal); ports 0 pick free ones."""
        s = self.settings
        grpc_server, health_servicer, self.grpc_port = create_server(self.plane, f"{s.host}:{s.grpc_port}")
        await grpc_server.start()
        await set_serving(health_servicer, True)

        config = uvicorn.Config(
            create_app(self.plane), host=s.host, port=s.http_port, log_level="warning", access_log=False, lifespan="off"
        )
        http_server = uvicorn.Server(config)
        http_server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        http_task = asyncio.create_task(http_server.serve(), name="http")
        while not http_server.started:
            if http_task.done():
                await http_task  # re-raise the bind error
                raise RuntimeError("HTTP server exited before starting")
            await asyncio.sleep(0.01)
        self.http_port = http_server.servers[0].sockets[0].getsockname()[1]

        self.trainer.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.stop)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
        log.info(
            "EdgePath serving: gRPC %s:%d, HTTP http://%s:%d (policy %s)",
            s.host, self.grpc_port, s.host, self.http_port, s.policy,
        )
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            await set_serving(health_servicer, False)
            await self.trainer.stop()
            http_server.should_exit = True
            await http_task
            await grpc_server.stop(grace=2.0)
            await self.store.close()
            log.info("EdgePath stopped")
