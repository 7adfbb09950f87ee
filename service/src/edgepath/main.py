"""Composition root: settings → state backend → model → plane → trainer → servers.

Only this module wires parts together; everything else receives its
dependencies. The ``serve``, ``train`` and ``eval`` commands of :mod:`edgepath.cli` build what they
run here: :class:`Service` (gRPC and REST servers in one asyncio loop, stopped cleanly on
SIGINT/SIGTERM), :func:`run_trainer` and the engines' configurations (:func:`ssmp_config`,
:func:`mlpm_parameters`).

State backends (:mod:`edgepath.state.backend`): ``memory://`` (default) keeps the built-in online
trainer; ``redis://HOST:PORT/DB`` (:class:`~edgepath.state.redis_backend.RedisBackend`) shares
decisions, the outcome stream, rate limits and the quarantine between replicas, follows published
model snapshots (:class:`~edgepath.training.snapshots.SnapshotFollower`) and trains only with
``--trainer`` (``settings.trainer``; otherwise a separate ``edgepath train`` process holds the
trainer lock).

Degraded state (Redis unreachable) is reported, while the replica keeps deciding with its last
model, as: ``GET /readyz`` → 503 ``{"ready": false, "degraded": true, ...}`` (``/healthz`` stays
200: do not restart the pod), and gRPC health ``edgepath.v1.PathService`` → NOT_SERVING while the
overall ``""`` service stays SERVING. Readiness 503 takes a cut-off replica out of a Kubernetes
Service while the others, which still reach Redis, carry the traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import gc
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import uvicorn

from edgepath.adapters.registry import compiled_engines
from edgepath.admission import Admission
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit, UtilityConfig
from edgepath.grpc.convert import COMPILED_WIRE, stale_compiled_wire
from edgepath.grpc.server import create_server, rest_only_notes, set_service_serving, set_serving
from edgepath.logs import configure_logging
from edgepath.metrics import Metrics
from edgepath.plane import DecisionPlane
from edgepath.rest.app import create_app
from edgepath.security import EdgeSecurity, build_outcome_guard, build_security
from edgepath.security.tls import check_tls_key, grpc_server_credentials, uvicorn_ssl_options
from edgepath.settings import Settings, dev_hmac_key_problem, host_port, port_conflict
from edgepath.state.backend import MemoryBackend, StateBackend
from edgepath.state.base import StateStore, display_url
from edgepath.state.memory import MemoryStore
from edgepath.training.online import ModelRegistry, OnlineTrainer, ProcessRefitter

log = logging.getLogger("edgepath")
T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on uvloop (libuv; faster socket handling for grpc.aio and uvicorn),
    or on the standard asyncio loop when ``EDGEPATH_EVENT_LOOP=asyncio`` or uvloop is not installed."""
    if os.environ.get("EDGEPATH_EVENT_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:  # optional speed-up: the service runs the same without it
            pass
        else:
            return uvloop.run(main)
    return asyncio.run(main)


def freeze_startup_heap() -> None:
    """Collect once, then move every object alive now (modules, the model, the servers) into the collector's
    permanent generation (:func:`gc.freeze`).

    A full (generation-2) collection walks every tracked object. With the startup heap (numpy, pydantic, grpc,
    FastAPI, the model) one took 95-131 ms in the serving process (a ``gc.callbacks`` probe under
    ``loadtest/bench``'s Redis topology, issue 16): a stall every call in flight waits out, which held the p99
    while training. Frozen objects are never scanned again; what serving allocates later is collected as before
    (https://docs.python.org/3/library/gc.html#gc.freeze). Call it once, when the process is ready to serve.
    """
    gc.collect()
    gc.freeze()


def tune_serving_process(settings: Settings) -> None:
    """What a process that only serves sets once it is ready (``edgepath serve``, each ``--workers`` process).

    * :func:`freeze_startup_heap`: no full collection walks the startup heap again;
    * the GIL switch interval (:func:`sys.setswitchinterval`) to ``settings.gil_switch_interval_ms``: a thread
      that holds the GIL keeps a waking event loop waiting until it blocks or the interval forces a switch
      (Python's default 5 ms). The serving process's background threads (the refit hand-off's pickling, the
      process pool's feeder and result threads, snapshot loads) did so while the trainer refitted: in
      ``loadtest/bench --store memory`` the p99 while training was 1.3-9.5× the idle p99 at 5 ms and 0.86-1.63×
      at 0.5 ms (``reports/issue-16/serving-benchmarks.md``, evening of 2026-11-25).
    """
    freeze_startup_heap()
    sys.setswitchinterval(settings.gil_switch_interval_ms / 1000.0)


class PortUnavailable(Exception):
    """A server's port could not be bound at start-up (in use by another process, or not allowed); nothing of
    the service was left running. ``edgepath serve`` reports it as a one-line usage error (exit status 2)."""

    def __init__(self, server: str, host: str, port: int, cause: OSError) -> None:
        self.server, self.host, self.port, self.cause = server, host, port, cause
        option = {"gRPC": "--grpc-port", "HTTP": "--http-port"}.get(server, "metrics_port (EDGEPATH_METRICS_PORT)")
        if cause.errno == errno.EADDRINUSE:
            reason = f"is in use (another process listens on it): stop that process or choose another {option}"
        else:
            reason = f"cannot be bound: {cause.strerror or cause}"
        super().__init__(f"{server} port {port} on {host} {reason}")


def bound_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port``, not yet listening.

    SO_REUSEADDR (connections of an earlier process left in TIME_WAIT do not block the port; a socket that
    listens on it still does); SO_REUSEPORT only with ``reuse_port``: several worker processes bind the same port
    and the kernel spreads new connections over them. Without it the port is this socket's alone.

    Raises
    ------
    OSError
        ``EADDRINUSE`` when another socket listens on the port (one with SO_REUSEPORT too, unless ``reuse_port``).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A non-blocking listening TCP socket on ``host:port`` (:func:`bound_socket`), for uvicorn's ``sockets``.

    Raises
    ------
    OSError
        From :func:`bound_socket`.
    """
    sock = bound_socket(host, port, reuse_port=reuse_port)
    try:
        sock.listen(2048)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def check_port_free(server: str, host: str, port: int) -> None:
    """Refuse a port another process listens on before anything binds it for serving (a bind without
    SO_REUSEPORT, closed at once). Port 0 (any free port) always passes.

    gRPC core says only "failed to bind" (and logs a line of its own) when its exclusive bind fails: this names
    the cause. It does not reserve the port: the bind that serves is the guarantee.

    Raises
    ------
    PortUnavailable
        Naming ``server`` ("gRPC", "HTTP" or "metrics"), the host and the port.
    """
    if not port:
        return
    try:
        bound_socket(host, port).close()
    except OSError as exc:
        raise PortUnavailable(server, host, port, exc) from exc


def serve_worker(settings: Settings, ready: Any, tls_key_checked: bool = False) -> None:
    """Body of one ``edgepath serve --workers N`` process: serve on the shared ports until SIGTERM.

    ``ready`` (a ``multiprocessing`` queue) receives ``(os.getpid(), metrics port or None)`` once its servers
    listen, or the error that stopped the start (a string). ``tls_key_checked``: the process that starts the
    workers (``edgepath serve``) checked the TLS key's permissions once for all
    (:func:`edgepath.security.tls.check_tls_key`), so the worker neither checks nor warns again.
    """
    configure_logging(settings.log_level, settings.log_format)

    async def main() -> None:
        service = Service.build(settings)
        service.reuse_port = True
        service.own_process = True
        service.tls_key_checked = tls_key_checked
        task = asyncio.create_task(service.run())
        started = asyncio.create_task(service.wait_started())
        done, _ = await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            await task
            return
        ready.put((os.getpid(), service.metrics_port or None))
        await task

    try:
        run_event_loop(main())
    except BaseException as exc:
        ready.put(repr(exc))
        raise


def seconds_to_ms(seconds: float | None) -> int | None:
    """A duration setting in s as the whole ms gRPC core options take (None stays None)."""
    return None if seconds is None else max(1, round(seconds * 1000))


def http_protocol() -> str:
    """uvicorn's HTTP parser: ``httptools`` (llhttp, C) when installed, else the pure-Python ``h11``."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    return "httptools"


def build_model(settings: Settings) -> PrimaryPathBandit:
    """A cold bandit, or the warm-started one of ``settings.model_path`` (verified before unpickling).

    Raises as :func:`build_model_and_card`.
    """
    return build_model_and_card(settings)[0]


def build_model_and_card(settings: Settings) -> tuple[PrimaryPathBandit, dict[str, Any] | None]:
    """:func:`build_model`'s bandit and the card of the artefact it was loaded from (None: a cold bandit).

    Raises
    ------
    edgepath.training.artefact.ArtefactError
        When the artefact is missing, corrupted, wrongly signed or of another feature layout, or when a bandit
        setting set explicitly disagrees with the artefact's configuration (:func:`model_setting_conflicts`,
        naming each). ``propensity_floor`` and the utility settings are applied to the loaded model.
    """
    if settings.model_path is not None:  # warm start (issue 8)
        from pathlib import Path

        from edgepath.training.artefact import HMAC_FILE, ArtefactError, load_artefact

        key = settings.hmac_key.get_secret_value().encode()
        directory = Path(settings.model_path)
        directory = directory.parent if directory.is_file() else directory
        signed = (directory / HMAC_FILE).is_file()
        if settings.profile == "prod" and not key:
            raise ArtefactError("profile prod loads only HMAC-signed model artefacts: set EDGEPATH_HMAC_KEY")
        if settings.profile == "prod" and not signed:
            raise ArtefactError(
                f"profile prod loads only HMAC-signed model artefacts and {directory} has no {HMAC_FILE}: sign a copy "
                f"with this release's key, EDGEPATH_HMAC_KEY=… edgepath sign-model {directory} --out SIGNED_DIR"
            )
        artefact = load_artefact(directory, key if (key and signed) else None, classifier=False)
        bandit = artefact.bandit
        if conflicts := model_setting_conflicts(settings, bandit.config):
            raise ArtefactError(
                f"model {directory} was trained with other bandit settings than the ones set here: "
                f"{'; '.join(conflicts)}. An artefact serves the configuration it was trained with (settings left "
                "at their defaults follow it): unset these to serve it, or serve without a model (cold start)"
            )
        if bandit.policy_name != settings.policy:
            log.warning("model %s was trained for policy %s; serving it as such", directory, bandit.policy_name)
        bandit.config = dataclasses.replace(
            bandit.config, propensity_floor=settings.propensity_floor, utility=utility_config(settings)
        )
        log.info("warm start from %s (policy %s)", settings.model_path, bandit.policy_name)
        return bandit, artefact.card
    return PrimaryPathBandit(bandit_config(settings)), None


def explicit_bandit_settings(settings: Settings) -> set[str]:
    """Names of the ``bandit.*`` settings set explicitly (``EDGEPATH_BANDIT__*``, a flat ``EDGEPATH_<NAME>``,
    ``--policy`` or the settings file) to a value other than their default.

    pydantic records what was given in ``model_fields_set`` (nested models too), but
    :func:`~edgepath.settings.load_settings` round-trips the values through ``model_dump`` and so marks every
    field as given; the value then tells: a setting equal to its default counts as left at the default.
    """
    given = settings.bandit
    defaults = type(given)()
    return {n for n in given.model_fields_set if getattr(given, n) != getattr(defaults, n)}


def _setting_names(name: str) -> str:
    """``bandit.forgetting (EDGEPATH_BANDIT__FORGETTING or EDGEPATH_FORGETTING)``: where ``name`` is set."""
    from edgepath.settings import ENV_PREFIX, FLAT_ALIASES, env_var

    where = [env_var(("bandit", name))]
    if name in FLAT_ALIASES:
        where.append(ENV_PREFIX + name.upper())
    if name == "policy":
        where.append("--policy")
    return f"bandit.{name} ({' or '.join(where)})"


def model_setting_conflicts(settings: Settings, config: BanditConfig) -> list[str]:
    """The explicitly set bandit settings (:func:`explicit_bandit_settings`) a loaded artefact would not honour.

    Compared: ``policy`` and the :class:`BanditConfig` parameters the artefact's policy reads
    (:attr:`~edgepath.engines.primary_path.PolicySpec.parameters`, e.g. ``forgetting`` and ``squarecb_gamma0``
    for ridge_squarecb), which the artefact keeps as trained. Not compared: ``propensity_floor`` and the utility
    settings (applied to the loaded model), parameters its policy does not read. Each conflict reads
    ``bandit.forgetting (EDGEPATH_BANDIT__FORGETTING or EDGEPATH_FORGETTING) = 0.9, the artefact's 0.999``.
    """
    from edgepath.engines.primary_path import policy_spec

    explicit = explicit_bandit_settings(settings)
    try:
        read = policy_spec(config.policy).parameters
    except ValueError:  # a policy this release does not know: its name still compares
        read = ()
    conflicts = []
    for name in ("policy", *(p for p in read if p != "utility")):
        if name not in explicit or not hasattr(config, name):
            continue
        mine, theirs = getattr(settings.bandit, name), getattr(config, name)
        if mine != theirs:
            conflicts.append(f"{_setting_names(name)} = {mine!r}, the artefact's {theirs!r}")
    return conflicts


def bandit_config(settings: Settings) -> BanditConfig:
    """The cold bandit's :class:`BanditConfig` from ``settings.bandit`` (``EDGEPATH_BANDIT__*``) and ``seed``."""
    b = settings.bandit
    return BanditConfig(
        policy=b.policy,
        seed=settings.seed,
        propensity_floor=b.propensity_floor,
        explore_prob=b.explore_prob,
        explore_decay=b.explore_decay,
        epsilon=b.epsilon,
        epsilon_decay=b.epsilon_decay,
        explore_rounds=b.explore_rounds,
        ucb_nsamples=b.ucb_nsamples,
        ucb_percentile=b.ucb_percentile,
        sgd_alpha=b.sgd_alpha,
        ridge_lambda=b.ridge_lambda,
        forgetting=b.forgetting,
        squarecb_gamma0=b.squarecb_gamma0,
        ts_scale=b.ts_scale,
        ucb_alpha=b.ucb_alpha,
        ridge_epsilon=b.ridge_epsilon,
        utility=utility_config(settings),
    )


def utility_config(settings: Settings) -> UtilityConfig:
    """The utility reward's parameters from settings (``bandit.utility_*``)."""
    b = settings.bandit
    return UtilityConfig(
        throughput_cap_bps=b.utility_throughput_cap_bps,
        latency_cap_ms=b.utility_latency_cap_ms,
        latency_weight=b.utility_latency_weight,
        loss_weight=b.utility_loss_weight,
    )


def build_backend(settings: Settings, metrics: Metrics | None = None) -> StateBackend:
    """The state backend named by ``settings.store_url`` (``memory://`` or ``redis://…``).

    Raises
    ------
    ValueError
        For an unknown URL scheme.
    """
    url = settings.store_url
    if url.startswith("memory:"):
        return MemoryBackend(
            MemoryStore(
                max_decisions=settings.max_decisions,
                decision_ttl_s=settings.decision_ttl_s,
                decision_log_max_entries=settings.decision_log_max_entries,
                decision_log_retention_s=settings.decision_log_retention_s,
                # no trainer in this process: no one could ever read a queue of outcomes (it would only grow)
                queue_outcomes=settings.trainer is not False,
            )
        )
    if settings.store_is_shared:
        from edgepath.state.redis import RedisStore
        from edgepath.state.redis_backend import RedisBackend

        store = RedisStore(
            url,
            namespace=settings.redis_namespace,
            decision_ttl_s=settings.decision_ttl_s,
            socket_timeout_s=settings.redis_socket_timeout_s,
            max_connections=settings.redis_max_connections,
            outbox_max_outcomes=settings.outbox_max_outcomes,
            outbox_max_decisions=settings.outbox_max_decisions,
            claim_idle_ms=settings.outcome_claim_idle_ms,
            metrics=metrics,
            decision_log_max_entries=settings.decision_log_max_entries,
            decision_log_retention_s=settings.decision_log_retention_s,
            outbox_dir=settings.outbox_dir,
            pipeline_hold_iterations=settings.redis_pipeline_hold_iterations,
            pipeline_idle_hold_iterations=settings.redis_pipeline_idle_hold_iterations,
        )
        return RedisBackend(store)
    raise ValueError(f"unknown store URL {display_url(url)!r}: use memory:// or redis://HOST:PORT/DB")


def build_store(settings: Settings, metrics: Metrics | None = None) -> StateStore:
    """The state store of :func:`build_backend` (the backend's other parts need no closing of their own)."""
    return build_backend(settings, metrics).store


def hmac_key_bytes(settings: Settings) -> bytes:
    """The snapshot signing key; the published dev key only in the ``dev`` profile with the bind address and the
    store on loopback (settings refuse it elsewhere: :func:`edgepath.settings.dev_hmac_key_problem`).

    Raises
    ------
    ValueError
        ``hmac_key`` is empty where the dev key may not be used: settings that skipped validation
        (``model_construct``, ``model_copy(update=...)``) would otherwise sign with it.
    """
    from edgepath.training.snapshots import DEV_HMAC_KEY

    key = settings.hmac_key.get_secret_value().encode()
    if not key:
        if settings.profile != "dev":
            raise ValueError("hmac_key (EDGEPATH_HMAC_KEY) must be set outside the dev profile with a shared store")
        if problem := dev_hmac_key_problem(settings.host, settings.store_url):
            raise ValueError(problem)
        log.warning("EDGEPATH_HMAC_KEY is empty: signing model snapshots with the insecure dev key (profile dev)")
        return DEV_HMAC_KEY
    return key


class QuietSignalsServer(uvicorn.Server):
    """uvicorn's server without its SIGINT/SIGTERM handlers: the service's own (:meth:`Service.run`) start the drain.

    uvicorn's ``serve()`` captures both signals for its whole run and puts the previous handlers back when it returns
    (uvicorn ≥ 0.29, ``Server.capture_signals``; the ``install_signal_handlers`` hook set before no longer exists):
    the HTTP server stops early in the drain, and a second SIGTERM during the rest of it (trainer, outbox flush,
    store close) then killed the process instead of reaching :meth:`Service.stop`.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def rest_without_credential(settings: Settings) -> str | None:
    """The start-up warning of a service whose authentication is client certificates alone (``tls_client_ca_file``
    without ``auth_tokens_file`` or ``auth_jwt_key``), None otherwise. Client certificates identify gRPC callers only
    (:mod:`edgepath.security.auth`; REST reads no peer certificate), so such a service answers every ``/v1`` and
    ``/mts/v1`` call over HTTP 401: a REST device needs a bearer credential the service can check."""
    if settings.tls_client_ca_file is None or settings.auth_tokens_file or settings.auth_jwt_key.get_secret_value():
        return None
    return (
        "client certificates (tls_client_ca_file) identify gRPC callers only: with no auth_tokens_file or "
        "auth_jwt_key, every /v1 and /mts/v1 call over HTTP is 401 (set EDGEPATH_AUTH_TOKENS_FILE or "
        "EDGEPATH_AUTH_JWT_KEY for REST devices)"
    )


@dataclass
class Service:
    """A running (or ready to run) EdgePath service process."""

    settings: Settings
    store: StateStore
    registry: ModelRegistry
    plane: DecisionPlane
    trainer: OnlineTrainer | None
    metrics: Metrics
    follower: Any = None  # SnapshotFollower with a shared backend
    trainer_role: Any = None  # TrainerRole when this replica may train on a shared backend
    backend: StateBackend | None = None  # owns ``store``; None only for a Service built by hand around a store
    exploration: Any = None  # FleetExploration with a shared backend: one exploration schedule for the fleet (issue 17)
    grpc_port: int = 0
    http_port: int = 0
    security: EdgeSecurity | None = None  # built by run(): auth, rate limits (SECURITY.md)
    reuse_port: bool = False  # one of several worker processes sharing the ports (SO_REUSEPORT)
    # the process is this service's own (`edgepath serve`): tune it once serving (tune_serving_process: frozen startup
    # heap, GIL switch interval); off for a service embedded in another process (tests), whose later garbage must
    # stay collectable and whose interpreter settings are not ours
    own_process: bool = False
    metrics_port: int = 0  # the bound metrics port when settings.metrics_port is set
    # the TLS key's permissions were checked before this service was built (`edgepath serve` checks them once for
    # the process and for its --workers): run() does not check, nor warn, again
    tls_key_checked: bool = False
    tracer_provider: Any = None  # OpenTelemetry TracerProvider when settings.otel_tracing (edgepath.tracing)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _started: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def build(
        cls,
        settings: Settings,
        backend: StateBackend | None = None,
        model: tuple[PrimaryPathBandit, dict[str, Any] | None] | None = None,
    ) -> Service:
        """Wire a service from ``settings`` (and the state backend of ``settings.store_url`` unless given; and
        the bandit with its artefact card that :func:`build_model_and_card` gave for these settings, unless given:
        ``edgepath serve`` loads a warm start once, to check it before serving, and passes it on).

        Raises as :func:`build_model_and_card` when ``model`` is not given."""
        metrics = Metrics.create()
        backend = backend or build_backend(settings, metrics)
        store = backend.store
        from edgepath.training.provenance import ModelProvenance, ObservedSnapshotStore, artefact_trained_at

        bandit, card = model if model is not None else build_model_and_card(settings)
        registry = ModelRegistry(bandit)
        # model age from the model's own publication (snapshot meta, artefact card), not this process's start
        provenance = ModelProvenance(metrics)
        if card is None:
            provenance.started(registry.current, "cold")
        else:  # an artefact without a readable trained_at counts from now
            provenance.started(registry.current, "artefact", artefact_trained_at(card))
        registry.on_publish(provenance.published)
        guard = build_outcome_guard(settings, backend)  # security: bounded learning
        plane = DecisionPlane(registry, store, settings, metrics, guard=guard)

        if not backend.shared:
            # Refits in their own lower-priority process: a refit never holds the serving loop's GIL.
            trainer = OnlineTrainer(
                store,
                registry,
                batch_size=settings.batch_size,
                refitter=ProcessRefitter(on_restart=metrics.refit_restarts.inc),
                min_publish_interval_s=settings.trainer_publish_interval_s,
            )
            return cls(settings, store, registry, plane, trainer, metrics, backend=backend)
        from edgepath.training.snapshots import SnapshotFollower

        on_published: Callable[[object, float], None] = provenance.snapshot
        if settings.trainer:  # this replica may publish: what it serves, and when it last published
            last_published = trainer_published(metrics)

            def served_and_published(model: object, at: float) -> None:
                provenance.snapshot(model, at)
                last_published(model, at)

            on_published = served_and_published

        snapshots = ObservedSnapshotStore(
            backend.snapshots,
            hmac_key_bytes(settings),
            metrics,
            on_loaded=provenance.snapshot,
            on_published=on_published,
        )
        log.info("model snapshots verified with EDGEPATH_HMAC_KEY key id %s", snapshots.key_id)
        follower = SnapshotFollower(snapshots, registry, poll_s=settings.snapshot_poll_s)
        role = None
        if settings.trainer:
            # a refit never holds the serving loop's GIL, nor its CPU
            role = build_trainer_role(
                settings, backend, snapshots, registry, ProcessRefitter(on_restart=metrics.refit_restarts.inc)
            )
            metrics.export_trainer_gauges()  # as edgepath train's: the trainer alerts cover this topology too
        from edgepath.training.exploration import FleetExploration

        exploration = FleetExploration(backend, registry, period_s=settings.exploration_sync_s)
        return cls(
            settings,
            store,
            registry,
            plane,
            None,
            metrics,
            follower=follower,
            trainer_role=role,
            backend=backend,
            exploration=exploration,
        )

    def stop(self) -> None:
        self._stop.set()

    async def wait_started(self) -> None:
        await self._started.wait()

    async def run(self) -> None:
        """Serve gRPC and REST until :meth:`stop` (or a signal); ports 0 pick free ones.

        Raises
        ------
        PortUnavailable
            When the gRPC or the HTTP port cannot be bound (in use by another process: a second ``edgepath serve``
            on the same ports); nothing is left running then.
        ValueError
            Two of the servers' ports are equal and not 0 (:func:`edgepath.settings.port_conflict`); nothing started.
        edgepath.security.tls.TlsKeyExposed
            In profile ``prod``, when ``tls_key_file`` is open to others than its owner (checked once, before
            anything is bound, for both servers; profile ``dev`` logs a warning); nothing was started.
        """
        s = self.settings
        if not self.tls_key_checked:  # one key for gRPC TLS and HTTPS: one check before either listens
            check_tls_key(s)
            self.tls_key_checked = True
        # Both ports before anything starts, each this process's alone unless worker processes share them
        # (SO_REUSEPORT, `serve --workers N`): gRPC core's default SO_REUSEPORT let a second `edgepath serve` on the
        # same gRPC port start, and the kernel then split the calls between two services, each with its own state.
        if problem := port_conflict(s):  # `edgepath serve` refuses it first, as a usage error
            raise ValueError(problem)
        # The TLS files before any port: an unreadable key is an OSError naming its file, not a port problem
        # (`edgepath serve` names them first, edgepath.security.startup_problems).
        credentials = grpc_server_credentials(s)
        if not self.reuse_port:
            check_port_free("gRPC", s.host, s.grpc_port)
        if s.metrics_port:
            check_port_free("metrics", s.host, s.metrics_port)
        try:  # bound here and handed to uvicorn: a port in use is an OSError now, not uvicorn's exit later
            http_socket = listening_socket(s.host, s.http_port, reuse_port=self.reuse_port)
        except OSError as exc:
            raise PortUnavailable("HTTP", s.host, s.http_port, exc) from exc
        metrics_server: Any = None
        grpc_server: Any = None
        try:
            if s.metrics_port is not None:  # GET /metrics on a port of its own (prometheus_client's threaded server)
                from prometheus_client import start_http_server

                try:  # bound before either server starts: a port taken is one line, nothing left running
                    metrics_server, _ = start_http_server(s.metrics_port, addr=s.host, registry=self.metrics.registry)
                except OSError as exc:
                    raise PortUnavailable("metrics", s.host, s.metrics_port, exc) from exc
                self.metrics_port = metrics_server.server_port
            if self.follower is not None:  # a (re)started replica serves the published model from its first decision
                try:
                    await asyncio.wait_for(self.follower.check(), timeout=10.0)
                except Exception as exc:  # Redis down at start: serve the initial model, the follower catches up
                    log.warning(
                        "could not load the published model at start (%r); serving v%d",
                        exc,
                        self.registry.current.version,
                    )
            self.security = build_security(s, self.backend, guard=self.plane.guard)
            # explicit overload: both transports shed past capacity (issue 16)
            admission = Admission(max_inflight=s.admission_max_inflight, max_lag_ms=s.admission_max_lag_ms)
            self.metrics.admission_busy.set_function(lambda: admission.busy)
            self.metrics.admission_loop_lag_seconds.set_function(lambda: admission.lag_s)
            if s.otel_tracing and self.tracer_provider is None:  # off by default (issue 22)
                from edgepath.tracing import build_tracer_provider

                self.tracer_provider = build_tracer_provider()
            try:
                grpc_server, health_servicer, self.grpc_port = create_server(
                    self.plane,
                    host_port(s.host, s.grpc_port),
                    self.security,
                    credentials,
                    admission,
                    max_connection_age_ms=seconds_to_ms(s.grpc_max_connection_age_s),
                    max_connection_age_grace_ms=seconds_to_ms(s.grpc_max_connection_age_grace_s),
                    tracer_provider=self.tracer_provider,
                    max_pending_calls=s.grpc_max_pending_calls,
                    reuse_port=self.reuse_port,
                )
            except OSError as exc:  # taken since check_port_free
                raise PortUnavailable("gRPC", s.host, s.grpc_port, exc) from exc
            await grpc_server.start()
            await set_serving(health_servicer, True)

            config = uvicorn.Config(
                create_app(
                    self.plane, self.security, admission, self.tracer_provider, serve_metrics=s.metrics_port is None
                ),
                host=s.host,
                port=s.http_port,
                log_level="warning",
                # uvicorn's own lines (a handler that raised, with its traceback) through the service's log handler:
                # its format (json or text) and the request id, not uvicorn's separate default format
                log_config=None,
                access_log=False,
                lifespan="off",
                http=http_protocol(),
                timeout_graceful_shutdown=max(1, int(s.drain_grace_s + 0.999)),
                **uvicorn_ssl_options(s),
            )
            http_server = QuietSignalsServer(config)
            http_task = asyncio.create_task(http_server.serve(sockets=[http_socket]), name="http")
            while not http_server.started:
                if http_task.done():
                    await http_task  # re-raise what stopped it
                    raise RuntimeError("HTTP server exited before starting")
                await asyncio.sleep(0.01)
        except BaseException:  # nothing left half-started: the process may go on (tests) or exit cleanly
            http_socket.close()
            if grpc_server is not None:
                await grpc_server.stop(None)
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()
            raise
        self.http_port = http_server.servers[0].sockets[0].getsockname()[1]
        background: list[asyncio.Task[None]] = []
        role_task: asyncio.Task[None] | None = None
        if self.trainer is not None and self.settings.trainer is not False:
            self.trainer.start()
        if self.follower is not None:
            self.follower.start()
        if self.trainer_role is not None:
            role_task = asyncio.create_task(self.trainer_role.run(self._stop), name="trainer-role")
            role_task.add_done_callback(self._role_ended)
            assert self.backend is not None  # a trainer role is built on a shared backend only
            background.append(
                start_trainer_gauges(
                    self.trainer_role, self.backend, self.metrics, self._stop, self.settings.store_memory_poll_s
                )
            )
        if self.exploration is not None:
            background.append(asyncio.create_task(self.exploration.run(), name="fleet-exploration"))
        background.append(asyncio.create_task(self._watch_readiness(health_servicer), name="readiness"))
        if self.backend is not None and self.backend.shared:
            background.append(asyncio.create_task(self._watch_store_memory(), name="store-memory"))
        background.append(asyncio.create_task(admission.monitor(), name="loop-lag"))
        for task in background:
            task.add_done_callback(self._background_ended)
        if self.own_process:
            tune_serving_process(self.settings)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.stop)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
        log.info("EdgePath serving: %s", self.describe())
        for note in (rest_without_credential(self.settings), stale_compiled_wire(), *rest_only_notes(self.plane)):
            if note is not None:
                log.warning("%s", note)
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            await self._drain(
                health_servicer, background, role_task, http_server, http_task, grpc_server, metrics_server
            )

    def _role_ended(self, task: asyncio.Task[None]) -> None:
        """The trainer role's task ended: expected only after :meth:`stop`; otherwise say so at once (this replica
        no longer trains), not at shutdown (``TrainerRole.run`` ends only when stopped, but nothing else would
        notice if it did)."""
        self._task_ended(task, "trainer role", "this replica no longer trains")

    #: What stops with a background task of ``serve`` that ends before :meth:`stop`, by task name (its ERROR line).
    BACKGROUND_TASKS: ClassVar[Mapping[str, str]] = {
        "fleet-exploration": "this replica no longer applies the other replicas' exploration decay",
        "readiness": "gRPC health no longer follows the state store",
        "loop-lag": "admission no longer measures the event loop's lag (no shedding on it)",
        "store-memory": "the state store's memory gauges no longer move (EdgePathStoreNearlyFull cannot fire)",
        "trainer-backlog": "edgepath_trainer_backlog_outcomes no longer moves (EdgePathTrainerBacklog cannot fire)",
    }

    def _background_ended(self, task: asyncio.Task[None]) -> None:
        """A background task of ``serve`` ended: expected only after :meth:`stop` (they loop until cancelled);
        otherwise say at once at ERROR what no longer happens (:attr:`BACKGROUND_TASKS`), with the exception's
        traceback, instead of asyncio's "exception was never retrieved" at garbage collection, if ever."""
        name = task.get_name()
        self._task_ended(task, f"background task {name}", self.BACKGROUND_TASKS.get(name, "it no longer runs"))

    def _task_ended(self, task: asyncio.Task[None], what: str, consequence: str) -> None:
        """``what ended while serving: consequence (exception)`` at ERROR with its traceback, unless the task ended
        because the service stops (or was cancelled)."""
        if self._stop.is_set() or task.cancelled():
            return
        exc = task.exception()
        log.error("%s ended while serving: %s (%r)", what, consequence, exc, exc_info=exc)

    def describe(self) -> str:
        """What this process serves, as its start-up line says it: the ports with their scheme (``https`` with TLS),
        whether TLS, client certificates and authentication are on, where ``/metrics`` is, the store (its password
        hidden, :func:`~edgepath.state.base.display_url`), where training runs, the model and the compiled parts."""
        s = self.settings
        scheme = "https" if s.tls_enabled else "http"
        tls = "TLS off"
        if s.tls_enabled:
            tls = "TLS, client certificates required on gRPC" if s.tls_client_ca_file is not None else "TLS"
        metrics = (
            f"metrics {scheme if s.metrics_port is None else 'http'}://"
            f"{host_port(s.host, self.http_port if s.metrics_port is None else self.metrics_port)}/metrics"
        )
        if self.trainer is not None and s.trainer is not False:
            training = "trainer in this process"
        elif self.trainer_role is not None:
            training = "trainer: competes for the store's trainer lock"
        else:
            training = "no trainer here (edgepath train trains)"
        serving = self.registry.current
        return "; ".join(
            [
                f"gRPC {host_port(s.host, self.grpc_port)}, HTTP {scheme}://{host_port(s.host, self.http_port)}, "
                f"{metrics}",
                f"{tls}, authentication {'on' if s.auth_enabled else 'off'} (profile {s.profile})",
                f"store {display_url(s.store_url)}, {training}",
                f"model v{serving.version} (policy {serving.model.policy_name})",
                f"tracing {'on' if s.otel_tracing else 'off'}",
                "compiled engines: " + (", ".join(compiled_engines(s)) or "none, the Python engines decide"),
                *(
                    f"compiled gRPC {part}: {'yes' if ok and s.native_engines else 'no'}"
                    for part, ok in COMPILED_WIRE.items()
                ),
            ]
        )

    async def _drain(
        self,
        health_servicer: Any,
        background: list[asyncio.Task[None]],
        role_task: asyncio.Task[None] | None,
        http_server: uvicorn.Server,
        http_task: asyncio.Task[None],
        grpc_server: Any,
        metrics_server: Any = None,
    ) -> None:
        """Graceful shutdown (issue 17), in this order:

        1. readiness false (``/readyz`` 503 ``draining``, gRPC health NOT_SERVING) for
           ``drain_readiness_delay_s`` while the listeners still accept (load balancers move away);
        2. both servers stop accepting and let in-flight calls finish, concurrently, for at most
           ``drain_grace_s`` (gRPC ``stop(grace)``, uvicorn's ``timeout_graceful_shutdown``);
        3. the trainer role stops its trainer and releases the trainer lock (awaited, not cancelled);
        4. the degraded-mode outbox is written to Redis if it is reachable within ``drain_flush_timeout_s``
           (what is left stays in the durable journal for the next process);
        5. the store closes.
        """
        s = self.settings
        started = asyncio.get_running_loop().time()
        self.plane.draining = True
        await set_serving(health_servicer, False)
        log.info("draining: readiness false; in-flight calls get %.1f s", s.drain_grace_s)
        if s.drain_readiness_delay_s > 0:
            # Pacing of the shutdown protocol (endpoint removal), not a test wait.
            await asyncio.sleep(s.drain_readiness_delay_s)
        for task in background:
            task.cancel()
        await asyncio.wait(background, timeout=2.0)
        http_server.should_exit = True
        # Bounded without awaiting a stuck step (asyncio.wait_for would wait for the cancelled task): the soak
        # saw one replica in six still draining 30 s after SIGTERM; the log names the step that did not finish.
        grpc_stop = asyncio.create_task(grpc_server.stop(grace=s.drain_grace_s), name="grpc-stop")
        _, stuck = await asyncio.wait({http_task, grpc_stop}, timeout=s.drain_grace_s + 2.0)
        for task in stuck:
            log.warning("draining: %s not finished after %.1f s; going on", task.get_name(), s.drain_grace_s + 2.0)
            task.cancel()
        log.info("draining: servers stopped after %.2f s", asyncio.get_running_loop().time() - started)
        if role_task is not None:  # _stop is set: the role stops its trainer and releases the lock
            try:
                await asyncio.wait_for(role_task, timeout=max(1.0, s.drain_flush_timeout_s))
            except (TimeoutError, Exception) as exc:
                log.warning("trainer role did not stop cleanly (%r); its lock expires by itself", exc)
        if self.trainer is not None:
            await self.trainer.stop()
        for owner in (self.trainer, self.trainer_role):
            if isinstance(refitter := getattr(owner, "refitter", None), ProcessRefitter):
                refitter.close()
        if self.follower is not None:
            try:
                await asyncio.wait_for(self.follower.stop(), timeout=5.0)
            except TimeoutError:
                log.warning("draining: snapshot follower did not stop within 5 s")
        if self.backend is not None:
            left = await self.backend.flush_outbox(s.drain_flush_timeout_s)
            if left:
                log.warning("draining: %d outbox records not yet in Redis (kept in the journal if configured)", left)
        try:
            await asyncio.wait_for((self.backend or self.store).close(), timeout=5.0)
        except TimeoutError:
            log.warning("draining: closing the store took more than 5 s")
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()  # flushes the spans still batched
        log.info("EdgePath stopped (drained in %.2f s)", asyncio.get_running_loop().time() - started)

    async def _watch_readiness(self, health_servicer: Any, period_s: float = 0.5) -> None:
        """Mirror the plane's readiness (state store reachable, not draining) on the gRPC service's health status;
        a change to not ready is logged by its cause (a WARNING for the store, an INFO line while draining), and the
        change back to ready as an INFO line. The process's one record of readiness changes: ``/readyz`` answers
        each probe but logs none (:data:`edgepath.rest.app._UNLOGGED_FAULT_ROUTES`)."""
        serving: bool | None = None
        while True:
            ready = await self.plane.ready()
            if ready != serving:
                was, serving = serving, ready
                await set_service_serving(health_servicer, ready)
                if ready and was is False:
                    log.info("ready again: state store reachable; serving model v%d", self.registry.current.version)
                elif not ready and self.plane.draining:  # shutting down: _drain said so ("draining: readiness false")
                    log.info("not ready: draining")
                elif not ready:
                    log.warning(
                        "not ready: %s; still deciding with model v%d",
                        self.plane.unready_reason(),
                        self.registry.current.version,
                    )
            # Period of the readiness probe (a service loop, not a test wait).
            await asyncio.sleep(period_s)

    async def _watch_store_memory(self) -> None:
        """Every ``settings.store_memory_poll_s`` s, the shared store's memory and its bound on the gauges
        ``edgepath_store_memory_used_bytes`` / ``edgepath_store_memory_limit_bytes``
        (:meth:`~edgepath.state.backend.StateBackend.memory_usage`; left as they were when it cannot say). The
        chart's EdgePathStoreNearlyFull alert reads them: a full ``noeviction`` Redis refuses every decision and
        outcome (503 "state store full"), so an operator learns of it before the devices do."""
        assert self.backend is not None
        while True:
            usage = await self.backend.memory_usage()
            if usage is not None:
                self.metrics.store_memory_used.set(usage.used_bytes)
                self.metrics.store_memory_limit.set(usage.limit_bytes)
            # Period of the gauges (a service loop, not a test wait).
            await asyncio.sleep(self.settings.store_memory_poll_s)


def build_trainer_role(
    settings: Settings, backend: StateBackend, snapshots: Any, registry: ModelRegistry, refitter: ProcessRefitter
) -> Any:
    """The :class:`~edgepath.training.leader.TrainerRole` of ``settings`` (batch size, lock TTL, publish interval) on a
    shared ``backend``: ``edgepath train``'s and ``serve --trainer``'s, one construction."""
    from edgepath.training.leader import TrainerRole

    return TrainerRole(
        backend,
        snapshots,
        registry,
        settings.batch_size,
        settings.trainer_lock_ttl_s,
        refitter=refitter,
        min_publish_interval_s=settings.trainer_publish_interval_s,
    )


async def outcome_backlog(backend: StateBackend) -> int | None:
    """Outcomes in the shared outcome log not yet trained on (delivered and unacknowledged, or not delivered yet: a
    model's outcomes are deleted from the stream when it is published), None when the store does not tell (the
    in-process store) or cannot be reached within 2 s."""
    length = getattr(backend.store, "stream_length", None)
    if length is None:
        return None
    try:
        return int(await asyncio.wait_for(length(), timeout=2.0))
    except Exception:  # unreachable, or a reply this cannot read: unknown
        return None


async def poll_outcome_backlog(backend: StateBackend, metrics: Metrics, stop: asyncio.Event, period_s: float) -> None:
    """Every ``period_s`` (not per refit: one ``XLEN``), :func:`outcome_backlog` onto
    ``edgepath_trainer_backlog_outcomes``, until ``stop`` is set; an unknown backlog leaves the last value."""
    from edgepath.tasks import wait_event

    while not stop.is_set():
        pending = await outcome_backlog(backend)
        if pending is not None:
            metrics.trainer_backlog.set(pending)
        await wait_event(stop, period_s)  # the gauge's period (a service loop, not a test wait)


def start_trainer_gauges(
    role: Any, backend: StateBackend, metrics: Metrics, stop: asyncio.Event, period_s: float
) -> asyncio.Task[None]:
    """The gauges of a trainer ``role``, ``edgepath train``'s and ``serve --trainer``'s alike:
    ``edgepath_trainer_lock_held`` read from the role at each scrape, and the task (named ``trainer-backlog``, ended
    by ``stop`` or :func:`~edgepath.tasks.stop_task`) of :func:`poll_outcome_backlog` every ``period_s``. The
    caller exports the gauges (:meth:`~edgepath.metrics.Metrics.trainer_registry`,
    :meth:`~edgepath.metrics.Metrics.export_trainer_gauges`) and sets
    ``edgepath_trainer_last_publish_timestamp_seconds`` on each publication (:func:`trainer_published`)."""
    metrics.trainer_lock_held.set_function(lambda: float(role.is_leader))  # read at each scrape
    return asyncio.create_task(poll_outcome_backlog(backend, metrics, stop, period_s), name="trainer-backlog")


def trainer_published(metrics: Metrics) -> Callable[[object, float], None]:
    """The ``on_published`` hook of a trainer's snapshot store: ``edgepath_trainer_last_publish_timestamp_seconds``."""
    return lambda _model, at: metrics.trainer_last_publish.set(at)


async def log_trainer_stop(consumer: str, signal_name: str, held_lock: bool, backend: StateBackend) -> None:
    """The one INFO line of a trainer stopped by a signal (the role has released the lock it held by then)."""
    pending = await outcome_backlog(backend)
    log.info(
        "trainer %s stopped on %s: %s; %s",
        consumer,
        signal_name,
        "trainer lock released" if held_lock else "it held no trainer lock",
        "outcomes not yet trained unknown" if pending is None else f"{pending} outcomes not yet trained",
    )


async def run_trainer(settings: Settings) -> None:
    """Body of ``edgepath train``: compete for the trainer lock of the shared backend and train while holding it.

    Consumes the outcome stream, refits every ``settings.batch_size`` outcomes and publishes signed,
    versioned model snapshots that the serving replicas hot-swap; returns on SIGINT/SIGTERM, after one INFO line
    naming the signal, whether it released the trainer lock and the outcomes left untrained (:func:`log_trainer_stop`).
    With
    ``settings.metrics_port`` set, serves ``GET /metrics`` there (plain HTTP, prometheus_client's threaded server,
    as ``edgepath serve`` serves its metrics port): the counters the trainer updates
    (:meth:`~edgepath.metrics.Metrics.trainer_registry`: outcome-log entries it drops as undecodable, snapshots
    it refuses, refit processes it started again after one died), each known reason at 0 from the start, and its
    gauges: whether it holds the trainer lock (read at each scrape), the outcomes not yet trained on
    (:func:`poll_outcome_backlog`, every ``settings.store_memory_poll_s``) and when it last published a snapshot.

    Raises
    ------
    ValueError
        ``settings.store_url`` names no shared store (``memory://``: nothing to share a model with).
    PortUnavailable
        ``settings.metrics_port`` cannot be bound (nothing was started).
    """
    from edgepath.tasks import stop_task
    from edgepath.training.provenance import ObservedSnapshotStore

    if not settings.store_is_shared:
        raise ValueError("train needs a shared store: --store redis://HOST:PORT/DB")
    metrics = Metrics.create()
    metrics_server: Any = None
    if settings.metrics_port is not None:  # before anything else starts: a port in use stops nothing half-built
        from prometheus_client import start_http_server

        try:
            metrics_server, _ = start_http_server(
                settings.metrics_port, addr=settings.host, registry=metrics.trainer_registry()
            )
        except OSError as exc:
            raise PortUnavailable("metrics", settings.host, settings.metrics_port, exc) from exc
        log.info("trainer metrics: http://%s/metrics", host_port(settings.host, metrics_server.server_port))
    try:
        if settings.outbox_dir is not None:
            # The outbox journals what a replica acknowledged while Redis was away; a trainer acknowledges nothing to
            # a device, so it keeps none (the chart's trainer shares the deciders' settings but not their outbox
            # volume).
            log.info("train keeps no degraded-mode outbox: outbox_dir %s is for serving replicas", settings.outbox_dir)
            settings = settings.model_copy(update={"outbox_dir": None})
        backend = build_backend(settings, metrics)
        snapshots = ObservedSnapshotStore(
            backend.snapshots,
            hmac_key_bytes(settings),
            metrics,
            on_published=trainer_published(metrics),
        )
        registry = ModelRegistry(build_model(settings))
        # the refits in a process below this one in the CPU scheduler (SCHED_IDLE; this process is nice +10): where
        # the trainer shares cores with deciders, it takes only the CPU they leave, and its lock renewals still run
        refitter = ProcessRefitter(on_restart=metrics.refit_restarts.inc)
        role = build_trainer_role(settings, backend, snapshots, registry, refitter)
        stop = asyncio.Event()
        stopped_by: list[tuple[str, bool]] = []  # (signal name, lock held when it came)

        def on_signal(sig: signal.Signals) -> None:
            if not stopped_by:
                stopped_by.append((sig.name, role.is_leader))
            stop.set()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
        backlog = start_trainer_gauges(role, backend, metrics, stop, settings.store_memory_poll_s)
        log.info(
            "trainer %s (EDGEPATH_HMAC_KEY key id %s) waiting for the trainer lock", role.consumer, snapshots.key_id
        )
        try:
            await role.run(stop)
            if stopped_by:
                await log_trainer_stop(role.consumer, *stopped_by[0], backend)
        finally:
            await stop_task(backlog)
            refitter.close()
            await backend.close()
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()


def ssmp_config(settings: Settings, alpha: float | None = None) -> Any:
    """The SSMP selector's :class:`~edgepath.engines.ssmp.SsmpConfig` from ``settings.ssmp`` (``alpha`` overrides).

    Raises
    ------
    ValueError
        From ``SsmpConfig`` for an out-of-range value.
    """
    from edgepath.adapters.ssmp import ssmp_config as from_settings

    config = from_settings(settings)
    return config if alpha is None else dataclasses.replace(config, alpha=alpha)


def mlpm_parameters(settings: Settings) -> dict[str, Any]:
    """MLPM's ``window``, ``horizon_s``, ``gain`` and ``bias`` from ``settings.mlpm`` (what ``eval mlpm`` runs with)."""
    m = settings.mlpm
    return {"window": m.window, "horizon_s": m.horizon_s, "gain": m.gain, "bias": m.bias}
