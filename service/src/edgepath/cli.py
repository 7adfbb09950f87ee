"""``edgepath`` command line (typer)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from edgepath.engines.primary_path import DEFAULT_POLICY, POLICIES
from edgepath.logs import configure_logging
from edgepath.settings import ConfigError, load_settings, port_conflict, setting_origin

#: Rich help and error boxes only on a terminal. Written to a pipe or a file (CI, systemd, scripts), a usage
#: error is one plain line ``Error: …`` on stderr, whatever the terminal width, and the exit code is 2
#: (click's usage-error code); other failures exit 1.
_ON_TERMINAL = sys.stderr.isatty()
_TYPER_OUTPUT: dict[str, Any] = {
    "rich_markup_mode": "rich" if _ON_TERMINAL else None,
    "pretty_exceptions_enable": _ON_TERMINAL,
}

app = typer.Typer(help="EdgePath: path recommendations for multipath devices.", no_args_is_help=True, **_TYPER_OUTPUT)

_POLICY_HELP = f"Bandit policy: {', '.join(POLICIES)}"


def known_policy(name: str, param_hint: str | None = "--policy") -> str:
    """``name`` when it is a primary-path policy (``POLICIES``); the one place the CLI checks policy names.

    Raises
    ------
    typer.BadParameter
        Naming the unknown policy and the choices (exit status 2).
    """
    if name not in POLICIES:
        raise typer.BadParameter(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}", param_hint=param_hint)
    return name


#: Help of the ``--wifi``/``--cellular`` options that default to the vendored data.
_WIFI_HELP = "WiFi CSV (mobilebandwidth format; default: the repository's service/data/mobilebandwidth/wifi4.csv)"
_CELLULAR_HELP = "4G CSV (mobilebandwidth format; default: the repository's service/data/mobilebandwidth/4G.csv)"


def vendored_csv(given: Optional[Path], name: str, option: str) -> Path:
    """``given``, else the vendored ``service/data/mobilebandwidth/NAME`` of the repository this package runs from,
    whatever the working directory.

    Raises
    ------
    typer.BadParameter
        The package runs without the repository's data (an installed package): naming ``option`` to pass.
    """
    if given is not None:
        return given
    from edgepath.datasets import MOBILEBANDWIDTH, repo_file

    found = repo_file(f"{MOBILEBANDWIDTH}/{name}")
    if found is None:
        raise typer.BadParameter(
            f"the default {MOBILEBANDWIDTH}/{name} is not in a repository beside this package (an installed "
            f"package ships no data); pass {option} FILE",
            param_hint=option,
        )
    return found


#: The lab's modules (evaluation, datasets, plots) need the ``lab`` extra; the serving runtime never does.
LAB_EXTRA = "pip install 'edgepath[lab]'"
LAB_MODULES = ("pandas", "matplotlib", "edgepath_agent", "contextualbandits")


def require_lab(command: str) -> None:
    """Exit 2 naming the extra when a module of the ``lab`` extra is missing (issue 14, item 5).

    The lab commands import their modules lazily, so ``edgepath serve``/``train`` work without them.
    """
    import importlib.util

    def absent(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is None
        except (ImportError, ValueError):  # a finder that refuses the name: absent too
            return True

    missing = [m for m in LAB_MODULES if absent(m)]
    if missing:
        typer.echo(f"{command} needs the lab extra ({', '.join(missing)} not installed): {LAB_EXTRA}", err=True)
        raise typer.Exit(2)


#: The options of ``serve`` whose setting has another name (the others are ``--SETTING-WITH-DASHES``), for messages.
SERVE_OPTIONS = {
    "store_url": "--store",
    "model_path": "--model",
    "apprentice_baseline": "--baseline",
    "apprentice_explore": "--explore",
    "apprentice_promote": "--promote/--no-promote",
    "apprentice_margin": "--promote-margin",
    "trainer": "--trainer/--no-trainer",
}


def setting_source(name: str, given: object, config: Optional[Path]) -> str:
    """Where the value of the setting ``name`` came from, as the operator gave it: its option when ``given`` (the
    option's value) is not None, else its ``EDGEPATH_*`` variable when set, else its key in the ``--config`` file."""
    if given is not None:
        return SERVE_OPTIONS.get(name, "--" + name.replace("_", "-"))
    var = f"EDGEPATH_{name.upper()}"
    if any(k.upper() == var for k in os.environ) or config is None:
        return var
    return f"{name} in {config}"


def known_policy_setting(policy: str, config: Optional[Path], given: Optional[str]) -> None:
    """Refuse an unknown ``policy`` setting (``serve``, ``train``) naming where it came from as invalid settings are
    named (:func:`edgepath.settings.describe_errors`): ``EDGEPATH_BANDIT__POLICY (bandit.policy): unknown policy
    'nope'; …``, or ``--policy``, ``EDGEPATH_POLICY``, ``bandit.policy in FILE``. ``given`` is the ``--policy`` value.

    Raises
    ------
    typer.BadParameter
        Naming the source, the unknown policy and the choices (exit status 2).
    """
    try:
        known_policy(policy, param_hint=None)
    except typer.BadParameter as exc:
        where = setting_origin(("bandit", "policy"), config, options=SERVE_OPTIONS, policy=given)
        raise typer.BadParameter(f"{where} (bandit.policy): {exc.message}") from None


def warn_unknown_env() -> None:
    """One WARNING per ``EDGEPATH_*`` variable that names no setting, with the closest known name
    (:func:`edgepath.settings.unknown_env_settings`); ``serve`` and ``train`` call it once, at start."""
    import logging

    from edgepath.settings import unknown_env_message, unknown_env_settings

    for var, close in unknown_env_settings():
        logging.getLogger("edgepath").warning("%s", unknown_env_message(var, close))


@app.callback()
def _root() -> None:
    """EdgePath service, trainer and evaluations."""


@app.command()
def serve(
    host: Annotated[Optional[str], typer.Option(help="Bind address for both servers")] = None,
    grpc_port: Annotated[Optional[int], typer.Option(help="gRPC port (0 = any free port)")] = None,
    http_port: Annotated[Optional[int], typer.Option(help="REST port (0 = any free port)")] = None,
    policy: Annotated[Optional[str], typer.Option(help=_POLICY_HELP)] = None,
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
            help="Train in this process. Default: yes with memory:// (--no-trainer serves a fixed model and keeps no "
            "outcomes for training); no with redis://, where `edgepath train` trains and --trainer makes this "
            "replica compete for the store's trainer lock",
        ),
    ] = None,
    profile: Annotated[
        Optional[str], typer.Option(help="dev (default: loopback, auth optional) or prod (auth + TLS required)")
    ] = None,
    auth_tokens_file: Annotated[
        Optional[Path], typer.Option(help="Hashed device tokens (written by `edgepath tokens add`)")
    ] = None,
    tls_cert_file: Annotated[Optional[Path], typer.Option(help="Server certificate (PEM), gRPC and HTTPS")] = None,
    tls_key_file: Annotated[Optional[Path], typer.Option(help="Server private key (PEM)")] = None,
    tls_client_ca_file: Annotated[
        Optional[Path], typer.Option(help="CA of device certificates: gRPC requires client certificates (mTLS)")
    ] = None,
    model: Annotated[
        Optional[Path], typer.Option(help="Start from this offline-trained artefact (e.g. models/primary-path-v2)")
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="Serving processes sharing both ports (SO_REUSEPORT); more than 1 needs a redis:// store",
        ),
    ] = 1,
    mode: Annotated[
        Optional[str], typer.Option(help="learner (default: the bandit serves) or apprentice (a baseline serves)")
    ] = None,
    baseline: Annotated[
        Optional[str], typer.Option(help="Apprentice mode: wifi_first, lte_first or kernel (first-listed interface)")
    ] = None,
    explore: Annotated[
        Optional[float], typer.Option(help="Apprentice mode: share of decisions drawn uniformly (default 0.05)")
    ] = None,
    promote: Annotated[
        Optional[bool],
        typer.Option("--promote/--no-promote", help="Apprentice mode: promote the learner when OPE says it is better"),
    ] = None,
    promote_margin: Annotated[
        Optional[float], typer.Option(help="Apprentice mode: utility margin the learner's lower 95% bound must clear")
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
            profile=profile,
            auth_tokens_file=auth_tokens_file,
            tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file,
            tls_client_ca_file=tls_client_ca_file,
            model_path=model,
            mode=mode,
            apprentice_baseline=baseline,
            apprentice_explore=explore,
            apprentice_promote=promote,
            apprentice_margin=promote_margin,
            options=SERVE_OPTIONS,
        )
        # as early as the settings say how: a line the checks below log (the model's warm-start check) is in the
        # service's log format too, not Python's last-resort plain text
        configure_logging(settings.log_level, settings.log_format)
        known_policy_setting(settings.policy, config, policy)  # --policy, EDGEPATH_BANDIT__POLICY or the file
        warm = None  # the warm start, loaded once: checked here, served by this process (not by --workers N's)
        if settings.model_path is not None:  # warm start (issue 8): refuse a bad artefact before serving
            from edgepath.main import build_model_and_card
            from edgepath.training.artefact import ArtefactError

            try:
                warm = build_model_and_card(settings)
            except ArtefactError as exc:  # named as given: --model, EDGEPATH_MODEL_PATH or the settings file's key
                raise typer.BadParameter(str(exc), param_hint=setting_source("model_path", model, config)) from exc
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if problem := port_conflict(settings):  # serve's ports only: train binds just metrics_port
        raise typer.BadParameter(problem)
    from edgepath.security import startup_problems  # security: missing/malformed key, cert or tokens files

    if problems := startup_problems(settings):
        raise typer.BadParameter("; ".join(problems))
    warn_unknown_env()
    from edgepath.security.tls import TlsKeyExposed, check_tls_key

    try:  # once for this process and its workers, before anything is built: prod refuses, dev warns
        check_tls_key(settings)
    except TlsKeyExposed as exc:
        raise typer.BadParameter(str(exc)) from exc
    if workers > 1:
        if not settings.store_is_shared:
            raise typer.BadParameter(
                "more than one worker needs a shared store (--store redis://...): each process keeps its own memory",
                param_hint="--workers",
            )
        serve_workers(settings, workers, ready_file)
        return

    async def run() -> None:
        service = Service.build(settings, model=warm)
        service.own_process = True  # this process is the service's own
        service.tls_key_checked = True  # above
        task = asyncio.create_task(service.run())
        started = asyncio.create_task(service.wait_started())
        done, _ = await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:  # did not start (PortUnavailable) or stopped at once
            started.cancel()
            await task
            return
        if ready_file is not None:
            tmp = ready_file.with_suffix(".tmp")
            tmp.write_text(
                json.dumps({"grpc_port": service.grpc_port, "http_port": service.http_port, "pid": os.getpid()})
            )
            tmp.replace(ready_file)
        await task
        # Drained (issue 17): the process ends now even if a task left behind would hold the loop's final
        # cleanup (asyncio.run awaits every remaining task); the journal and Redis hold all that was promised.
        import threading

        watchdog = threading.Timer(5.0, os._exit, args=(0,))
        watchdog.daemon = True  # a normal exit is not delayed by it
        watchdog.start()

    from edgepath.main import PortUnavailable, run_event_loop

    try:
        run_event_loop(run())
    except PortUnavailable as exc:  # a port in use (another `edgepath serve`?): one line, exit 2, nothing running
        raise typer.BadParameter(str(exc)) from exc


def serve_workers(settings: Any, workers: int, ready_file: Optional[Path]) -> None:
    """``serve --workers N``: N ``spawn``-started processes serving the same ports (SO_REUSEPORT; the kernel
    spreads connections), sharing decisions, outcomes and models through the Redis store. This process only
    starts them, writes the ready file ({grpc_port, http_port, pid, workers: their pids, metrics_ports}) and passes
    SIGTERM/SIGINT on.

    Each worker counts its own calls and decisions (and, with ``--trainer``, its own trainer gauges). With
    ``metrics_port`` P set, worker k (0-based) serves them at ``GET /metrics`` on port P + k (P = 0: a free port
    each), one scrape target per worker, listed in the ready file's ``metrics_ports``; without it, ``/metrics`` on
    the shared HTTP port answers for whichever worker the connection reached (warned at start)."""
    import multiprocessing

    from edgepath.main import PortUnavailable, bound_socket, check_port_free, serve_worker

    def free(port: int) -> int:
        if port:
            return port
        with bound_socket(settings.host, 0) as sock:  # the host's family (IPv6 too)
            return int(sock.getsockname()[1])

    base = settings.metrics_port
    if base and base + workers - 1 > 65535:
        raise typer.BadParameter(
            f"the workers' metrics ports are metrics_port + worker index: {base}..{base + workers - 1} passes 65535"
        )
    metrics_ports = [None if base is None else (base + k if base else 0) for k in range(workers)]
    try:  # the workers share the ports (SO_REUSEPORT) with each other only, not with a process already on them
        check_port_free("gRPC", settings.host, settings.grpc_port)
        check_port_free("HTTP", settings.host, settings.http_port)
        for port in metrics_ports:  # one each: not shared
            check_port_free("metrics", settings.host, port or 0)
    except PortUnavailable as exc:
        raise typer.BadParameter(str(exc)) from exc
    if base and (clash := {settings.grpc_port, settings.http_port} & set(metrics_ports) - {0}):
        raise typer.BadParameter(
            f"the workers' metrics ports {base}..{base + workers - 1} (metrics_port + worker index) include the "
            f"gRPC or HTTP port {min(clash)}"
        )
    if base is None:
        logging.getLogger("edgepath").warning(
            "with --workers %d, GET /metrics on the HTTP port answers for whichever worker the connection reached "
            "(each counts its own): set metrics_port (EDGEPATH_METRICS_PORT) P to scrape worker k on port P + k",
            workers,
        )
    settings = settings.model_copy(
        update={"grpc_port": free(settings.grpc_port), "http_port": free(settings.http_port)}
    )
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Queue()
    procs = [
        ctx.Process(
            target=serve_worker,
            args=(settings.model_copy(update={"metrics_port": metrics_ports[k]}), ready, True),
            name=f"edgepath-worker-{k}",
        )
        for k in range(workers)
    ]
    for proc in procs:
        proc.start()

    def stop(*_: Any) -> None:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()  # SIGTERM: each worker stops its servers cleanly

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    started: dict[int, int | None] = {}  # worker pid -> its metrics port
    for _ in procs:
        got = ready.get(timeout=120)
        if not isinstance(got, tuple):
            stop()
            raise typer.BadParameter(f"a worker did not start: {got}")
        started[got[0]] = got[1]
    if ready_file is not None:
        pids = [int(proc.pid or 0) for proc in procs]  # in worker order (all started: each has a pid)
        tmp = ready_file.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "grpc_port": settings.grpc_port,
                    "http_port": settings.http_port,
                    "pid": os.getpid(),
                    "workers": pids,
                    "metrics_ports": [started.get(pid) for pid in pids] if base is not None else None,
                }
            )
        )
        tmp.replace(ready_file)
    for proc in procs:
        proc.join()


@app.command()
def train(
    store: Annotated[Optional[str], typer.Option(help="Shared state store, redis://HOST:PORT/DB")] = None,
    policy: Annotated[Optional[str], typer.Option(help=_POLICY_HELP)] = None,
    seed: Annotated[Optional[int], typer.Option(help="Random seed of the policies")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Outcomes per online refit")] = None,
    config: Annotated[Optional[Path], typer.Option(help="Settings file (TOML or JSON)")] = None,
    log_level: Annotated[Optional[str], typer.Option(help="Log level")] = None,
) -> None:
    """Run the online trainer on a shared store: one active trainer at a time (Redis lock).

    Consumes the outcome stream, refits every ``batch_size`` outcomes and publishes signed,
    versioned model snapshots that the serving replicas hot-swap. Stops on SIGINT/SIGTERM.
    With metrics_port (EDGEPATH_METRICS_PORT) set, serves its counters at GET /metrics there.
    """
    try:
        settings = load_settings(
            config,
            store_url=store,
            policy=policy,
            seed=seed,
            batch_size=batch_size,
            log_level=log_level,
            options=SERVE_OPTIONS,
        )
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if not settings.store_is_shared:
        raise typer.BadParameter("train needs a shared store: --store redis://HOST:PORT/DB")
    known_policy_setting(settings.policy, config, policy)
    configure_logging(settings.log_level, settings.log_format)
    warn_unknown_env()
    from edgepath.main import PortUnavailable, run_trainer
    from edgepath.training.online import renice

    # Training never starves serving (issue 16): where the trainer shares cores with deciders, the
    # scheduler serves the deciders first; the trainer takes what is left (it only falls behind). Every
    # thread of it: os.nice would lower only this one.
    renice(10)
    from edgepath.training.artefact import ArtefactError

    try:
        asyncio.run(run_trainer(settings))
    except PortUnavailable as exc:  # the metrics port in use: one line, exit 2, nothing running
        raise typer.BadParameter(str(exc)) from exc
    except ArtefactError as exc:  # EDGEPATH_MODEL_PATH refused (corrupted, unsigned, settings conflict): as serve
        raise typer.BadParameter(str(exc), param_hint=setting_source("model_path", None, config)) from exc


# --- eval sub-app: `edgepath eval <name>` (shared by the evaluations; issue 4 created it) ---
eval_app = typer.Typer(help="Offline evaluations of the decision engines.", no_args_is_help=True, **_TYPER_OUTPUT)
app.add_typer(eval_app, name="eval")
# --- end eval sub-app ---


# --- decision log (issue 18): `edgepath log export` ---
log_app = typer.Typer(help="The decision log: joined decisions as a product.", no_args_is_help=True, **_TYPER_OUTPUT)
app.add_typer(log_app, name="log")


def _since_s(text: Optional[str]) -> float:
    """``--since``: Unix seconds or an ISO 8601 time (UTC when it names no zone)."""
    if text is None:
        return 0.0
    import datetime as dt

    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise typer.BadParameter("Unix seconds or ISO 8601, e.g. 2026-11-23T10:00:00Z", param_hint="--since") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


@log_app.command("export")
def log_export(
    store: Annotated[str, typer.Option(help="Shared state store the service writes, redis://HOST:PORT/DB")],
    out: Annotated[Path, typer.Option(help="JSON-lines file to write")],
    since: Annotated[Optional[str], typer.Option(help="Only decisions joined at/after this time")] = None,
    config: Annotated[Optional[Path], typer.Option(help="Settings file (TOML or JSON): Redis namespace")] = None,
) -> None:
    """Export the joined decisions (context, arms, choice, propensity, model, policy, outcome) as JSONL.

    The format is the one `edgepath train-offline --decision-log` and `edgepath eval ope --log` read.
    Reads the store in pages (Redis XRANGE), so it may run while replicas serve.
    """
    since_s = _since_s(since)
    if not store.startswith(("redis://", "rediss://", "unix://")):
        raise typer.BadParameter(
            "the decision log is exported from a shared store (redis://HOST:PORT/DB); the in-process "
            "store lives and dies with its service",
            param_hint="--store",
        )
    try:
        settings = load_settings(config, store_url=store, options=SERVE_OPTIONS)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc

    async def run() -> int:
        from edgepath.main import build_store
        from edgepath.state.export import export_decision_log

        shared = build_store(settings)
        try:
            return await export_decision_log(shared, out, since_s=since_s)
        finally:
            await shared.close()

    from edgepath.state.redis import UNREACHABLE

    try:
        n = asyncio.run(run())
    except UNREACHABLE as exc:
        typer.echo(f"Error: cannot read the decision log from {store}: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"{n} joined decisions written to {out}")


# --- end decision log ---


# --- off-policy evaluation (issue 18): `edgepath eval ope` ---
@eval_app.command("ope")
def eval_ope(
    log: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="Decision log (`edgepath log export`)")],
    policy: Annotated[
        str,
        typer.Option(
            help="Candidate policies, comma-separated: wifi_first, lte_first, uniform "
            "or a registry policy (trained on the model part of the log)"
        ),
    ],
    reward: Annotated[str, typer.Option(help="utility (default) or bernoulli")] = "utility",
    n_bootstrap: Annotated[
        int, typer.Option(min=50, help="Bootstrap resamples of IPS's and SNIPS's 95% intervals (DR's is normal)")
    ] = 500,
    model_fraction: Annotated[float, typer.Option(min=0.1, max=0.9, help="Share of the log fitting DR's model")] = 0.5,
    seed: Annotated[int, typer.Option(help="Seed of the split and the bootstrap")] = 0,
    reward_model: Annotated[
        str, typer.Option(help="DR's reward model: gbm (gradient-boosted trees, default) or ridge")
    ] = "gbm",
    dr_folds: Annotated[
        int, typer.Option(min=1, max=10, help="Cross-fitting folds of DR's reward model (1: fitted on the model part)")
    ] = 1,
    out: Annotated[Optional[Path], typer.Option(help="Write the JSON report here")] = None,
) -> None:
    """Estimate candidate policies' values on a decision log: IPS and SNIPS (percentile-bootstrap 95% CIs, ESS),
    doubly robust (normal 95% CI: it held the true value on ground truth where the bootstrap's did not) and
    adaptively-weighted DR (its normal 95% CI, valid for adaptively collected logs)."""
    from edgepath.evaluation.ope import (
        FIXED_POLICIES,
        REWARD_MODELS,
        LogRefused,
        format_table,
        load_log,
        off_policy_evaluation,
    )

    names = [p.strip() for p in policy.split(",") if p.strip()]
    for name in names:
        if name not in FIXED_POLICIES and name not in POLICIES:
            raise typer.BadParameter(
                f"unknown policy {name!r}; choose from {', '.join((*FIXED_POLICIES, *POLICIES))}", param_hint="--policy"
            )
    if reward not in ("utility", "bernoulli"):
        raise typer.BadParameter("utility or bernoulli", param_hint="--reward")
    if reward_model not in REWARD_MODELS:
        raise typer.BadParameter(f"one of {', '.join(REWARD_MODELS)}", param_hint="--reward-model")
    try:
        data = load_log(log, reward)
        report = off_policy_evaluation(
            data,
            names,
            model_fraction=model_fraction,
            n_bootstrap=n_bootstrap,
            seed=seed,
            reward_model=reward_model,
            dr_folds=dr_folds,
        )
    except LogRefused as exc:
        raise typer.BadParameter(f"log refused: {exc}", param_hint="--log") from exc
    report["log"] = str(log)
    report["reward"] = reward
    typer.echo(format_table(report))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        typer.echo(f"report: {out}")


@eval_app.command("ope-truth")
def eval_ope_truth(
    reps: Annotated[int, typer.Option(min=2, help="Repetitions (streams) per logging policy")] = 50,
    n_bootstrap: Annotated[int, typer.Option(min=50, help="Bootstrap resamples per interval")] = 200,
    first_seed: Annotated[int, typer.Option(min=0, help="Seed of the first repetition (then +1 each)")] = 1000,
    reward_model: Annotated[
        str, typer.Option(help="DR's reward model: gbm (gradient-boosted trees, default) or ridge")
    ] = "gbm",
    dr_folds: Annotated[
        int, typer.Option(min=1, max=10, help="Cross-fitting folds of DR's reward model (1: fitted on the model part)")
    ] = 1,
    out: Annotated[
        Path, typer.Option(help="JSON report (under the working directory when relative); table.md beside it")
    ] = Path("out/ope-truth/report.json"),
    wifi: Annotated[Optional[Path], typer.Option(exists=True, dir_okay=False, help=_WIFI_HELP)] = None,
    cellular: Annotated[Optional[Path], typer.Option(exists=True, dir_okay=False, help=_CELLULAR_HELP)] = None,
) -> None:
    """IPS, SNIPS, DR and adaptively-weighted DR against the true values of paired real data (bias, MAE, coverage);
    also cadr_exact, the contextually weighted ADR, which needs the logging policy at every context (harness only)."""
    from edgepath.evaluation.ope import REWARD_MODELS
    from edgepath.evaluation.ope_truth import format_truth_table, ground_truth
    from edgepath.evaluation.primary import load_split

    if reward_model not in REWARD_MODELS:
        raise typer.BadParameter(f"one of {', '.join(REWARD_MODELS)}", param_hint="--reward-model")
    wifi, cellular = vendored_csv(wifi, "wifi4.csv", "--wifi"), vendored_csv(cellular, "4G.csv", "--cellular")
    try:
        split = load_split(wifi, cellular, wifi, cellular)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--wifi/--cellular") from exc
    report = ground_truth(
        split,
        n_reps=reps,
        n_bootstrap=n_bootstrap,
        progress=typer.echo,
        first_seed=first_seed,
        reward_model=reward_model,
        dr_folds=dr_folds,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report) + "\n")
    (out.parent / "table.md").write_text(format_truth_table(report) + "\n")
    typer.echo(format_truth_table(report))
    typer.echo(f"report: {out}")


@eval_app.command("policies")
def eval_policies(
    seeds: Annotated[str, typer.Option(help="Pairing seeds (>= 5 for the CI bands)")] = "1,2,3,4,5",
    rounds: Annotated[int, typer.Option(min=100, help="Rounds (decisions) per stream")] = 3000,
    out: Annotated[
        Path, typer.Option(help="JSON report, every curve (under the working directory when relative)")
    ] = Path("out/policies/report.json"),
    plot_path: Annotated[
        Path, typer.Option("--plot", help="PNG plot (under the working directory when relative)")
    ] = Path("out/policies/policies.png"),
    wifi: Annotated[Optional[Path], typer.Option(exists=True, dir_okay=False, help=_WIFI_HELP)] = None,
    cellular: Annotated[Optional[Path], typer.Option(exists=True, dir_okay=False, help=_CELLULAR_HELP)] = None,
    policy: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Learning policy to replay (repeatable; default: the paper's six and the default learner). "
            f"{_POLICY_HELP}. The baselines wifi_first, lte_first and random always run (they cost nothing)"
        ),
    ] = None,
) -> None:
    """The paper's six policies, the default learner and baselines on the same real streams: reward and regret."""
    from edgepath.datasets.mobilebandwidth import read_measurements
    from edgepath.evaluation.policies import DEFAULT_LEARNER, PAPER_POLICIES, compare, plot

    seed_list = _seeds(seeds)
    if len(seed_list) < 2:
        raise typer.BadParameter("at least two seeds for the CI bands (five or more recommended)", param_hint="--seeds")
    policies = (
        tuple(dict.fromkeys(known_policy(name) for name in policy)) if policy else (*PAPER_POLICIES, DEFAULT_LEARNER)
    )
    wifi, cellular = vendored_csv(wifi, "wifi4.csv", "--wifi"), vendored_csv(cellular, "4G.csv", "--cellular")
    try:
        wifi_rows, cellular_rows = read_measurements(wifi, "wifi"), read_measurements(cellular, "cellular")
    except ValueError as exc:  # a cellular CSV given as --wifi, or no mobilebandwidth CSV at all
        raise typer.BadParameter(str(exc), param_hint="--wifi/--cellular") from exc
    report = compare(
        wifi_rows,
        cellular_rows,
        seed_list,
        rounds,
        policies=policies,
        progress=typer.echo,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report) + "\n")
    plot(report, plot_path)
    typer.echo(f"oracle mean reward {report['oracle_mean_reward']:.3f}")
    for name, c in sorted(report["curves"].items(), key=lambda kv: -kv[1]["final_mean_reward"]):
        typer.echo(
            f"{name:<24}{c['family']:<10} mean reward {c['final_mean_reward']:.3f} ± {c['final_mean_reward_ci95']:.3f}"
            f"   regret {c['final_regret']:.0f}"
        )
    typer.echo(f"report: {out}  plot: {plot_path}")


# --- end off-policy evaluation ---


# --- primary path warm start and evaluation (issue 8) ---
def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise typer.BadParameter("comma-separated integers, e.g. 7,8,9", param_hint="--seeds") from exc
    if not seeds:
        raise typer.BadParameter("at least one seed", param_hint="--seeds")
    return seeds


def _eval_summary(report: dict[str, Any], path: str) -> dict[str, Any]:
    """The parts of an ``eval primary`` report a model card cites (command, seeds, per-policy figures, drift)."""
    keys: tuple[str, ...] = ("mean_throughput_mbps", "mean_throughput_mbps_ci95", "pct_of_oracle", "pct_of_oracle_ci95")
    keys += ("gain_vs_wifi_first_pct", "gain_vs_wifi_first_pct_ci95", "mean_completion_time_s_10MB")
    drift = report.get("drift") or {}
    return {
        "report": path,
        "command": report.get("command"),
        "seeds": report.get("seeds"),
        "default_policy": report.get("default_policy"),
        "policies": {n: {k: p.get(k) for k in keys} for n, p in report.get("policies", {}).items()},
        "drift": {
            "wifi_factor": drift.get("wifi_factor"),
            "policies": {
                n: {k: d.get(k) for k in ("mean_throughput_after_mbps", "lte_share_after", "switch_outcomes_per_seed")}
                for n, d in drift.get("policies", {}).items()
            },
        }
        if drift
        else None,
    }


def refuse_artefact_overwrite(out: Path, overwrite: bool) -> None:
    """Refuse to train into ``out`` when it already holds a model artefact (``model.pkl`` or ``card.json``) and
    ``--overwrite`` was not given: the default ``--out`` is the shipped ``models/primary-path-v2``, which a run from
    the repository root would otherwise replace (a checked-in, checksummed model), after minutes of training.

    Raises
    ------
    typer.BadParameter
        Naming ``--out`` and the two ways on (exit status 2), before anything is trained.
    """
    from edgepath.training.artefact import CARD_JSON, MODEL_FILE

    if overwrite or not any((out / name).exists() for name in (MODEL_FILE, CARD_JSON)):
        return
    raise typer.BadParameter(
        f"{out} already holds a model artefact; write to another directory (e.g. --out out/primary-path) or pass "
        "--overwrite to replace it",
        param_hint="--out",
    )


def _invocation(ctx: typer.Context, name: str) -> str:
    """The current command with every option spelled out (defaults included), for reports and model cards.

    Re-running it gives the same options: a repeatable option (``--note``) appears once per value; an option left
    unset (None) is left out.
    """
    import shlex

    from typer.core import TyperOption

    parts = ["edgepath", *name.split()]
    for param in ctx.command.params:
        if not isinstance(param, TyperOption):  # the options (is_flag …); arguments are TyperArguments
            continue
        value = ctx.params.get(param.name or "")
        if param.is_flag and param.secondary_opts:
            parts.append(param.opts[0] if value else param.secondary_opts[0])
        elif param.is_flag:
            if value:
                parts.append(param.opts[0])
        elif param.multiple:  # a repeatable option (--note): once per value, as it was given
            for item in value or ():
                parts += [param.opts[0], shlex.quote(str(item))]
        elif value is not None:
            parts += [param.opts[0], shlex.quote(str(value))]
    return " ".join(parts)


def _sha256_file(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@app.command("sign-model")
def sign_model(
    model: Annotated[Path, typer.Argument(help="Model artefact directory (e.g. models/primary-path-v2)")],
    out: Annotated[Optional[Path], typer.Option(help="Sign a copy here (default: sign the artefact in place)")] = None,
) -> None:
    """Sign a model artefact with EDGEPATH_HMAC_KEY (writes model.hmac) so profile prod can warm-start from it.

    The artefact's SHA256SUMS is checked first; the signed artefact is verified with the key. Use the key the
    deciders and the trainer get (the chart's hmac-key Secret). Exits 2 naming the problem when the key is unset or
    the artefact is missing or corrupted.
    """
    from edgepath.training.artefact import ArtefactError, sign_artefact

    key = os.environ.get("EDGEPATH_HMAC_KEY", "").encode()
    if not key:
        raise typer.BadParameter("EDGEPATH_HMAC_KEY is not set: export the release's model-signing key first")
    try:
        signed = sign_artefact(model, key, out)
    except ArtefactError as exc:
        raise typer.BadParameter(str(exc), param_hint="MODEL") from exc
    typer.echo(f"signed {signed} (model.hmac)")


@app.command("train-offline")
def train_offline_cmd(
    ctx: typer.Context,
    wifi: Annotated[Optional[Path], typer.Option(exists=True, dir_okay=False, help=_WIFI_HELP)] = None,
    cellular: Annotated[Optional[Path], typer.Option(exists=True, dir_okay=False, help=_CELLULAR_HELP)] = None,
    out: Annotated[
        Path, typer.Option(help="Artefact directory to write (under the working directory when relative)")
    ] = Path("models/primary-path-v2"),
    decision_log: Annotated[
        Optional[Path],
        typer.Option(exists=True, dir_okay=False, help="JSON-lines decision log (IPS-weighted rows)"),
    ] = None,
    policy: Annotated[str, typer.Option(help=_POLICY_HELP)] = DEFAULT_POLICY,
    test_fraction: Annotated[float, typer.Option(min=0.0, max=0.9, help="Users held out for scoring")] = 0.25,
    seed: Annotated[int, typer.Option(help="Seed of the training pairing and the oracles")] = 0,
    eval_seeds: Annotated[str, typer.Option(help="Pairing seeds of the held-out scores")] = "7,8,9",
    epochs: Annotated[int, typer.Option(min=1, help="SGD passes over the training rows")] = 20,
    reward_threshold_mbps: Annotated[float, typer.Option(min=0.0, help="Reward 1 at/above this throughput")] = 25.0,
    explore_prob: Annotated[
        Optional[float],
        typer.Option(
            min=0.0,
            max=1.0,
            help="active_explorer only: initial probability p of the warm policy's active-learning branch (default "
            "0.05); refused for a policy that does not read it",
        ),
    ] = None,
    ablation: Annotated[bool, typer.Option("--ablation/--no-ablation", help="Score feature-group ablations")] = True,
    sign: Annotated[bool, typer.Option(help="Also write model.hmac with EDGEPATH_HMAC_KEY (must be set)")] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace the model artefact --out already holds (refused without)")
    ] = False,
    eval_report: Annotated[
        Optional[Path],
        typer.Option(exists=True, dir_okay=False, help="`edgepath eval primary` JSON report to cite in the card"),
    ] = None,
    note: Annotated[
        Optional[list[str]], typer.Option(help="Extra note for the model card (repeatable), e.g. other measurements")
    ] = None,
) -> None:
    """Train the primary-path policy offline (paired situations + IPS-weighted log) and write a versioned artefact.

    Users are split by SHA-256 of user_uid; the model is trained on the training users only and scored
    on the held-out users (their paired situations under each --eval-seeds pairing). Decision-log rows of
    held-out users' devices (the replay's ``<prefix>-<16 hex digits of user_uid>``) are dropped and counted
    in the card; rows whose device maps to no user of the data mark the card's scores as not verified held out.
    Writes model.pkl, card.json, card.md and SHA256SUMS to --out.
    """
    import dataclasses
    import datetime

    require_lab("edgepath train-offline")
    refuse_artefact_overwrite(out, overwrite)
    from edgepath.datasets import repo_relative
    from edgepath.datasets.mobilebandwidth import pair_situations
    from edgepath.engines.features import FEATURE_GROUPS, FEATURE_NAMES
    from edgepath.evaluation.primary import PAIRING_TEXT, load_split, offline_scores
    from edgepath.evaluation.primary import ablation as run_ablation
    from edgepath.training.artefact import save_artefact
    from edgepath.training.card import render_markdown
    from edgepath.training.offline import (
        ARMS,
        DecisionLogError,
        OfflineConfig,
        drop_held_out_devices,
        exploration_parameters,
        policy_config_dict,
        policy_reads,
        read_decision_log_rows,
        select_alpha,
        train_offline,
    )

    known_policy(policy)
    if explore_prob is not None and not policy_reads(policy, "explore_prob"):
        own = exploration_parameters(policy)
        raise typer.BadParameter(
            f"{policy} does not read explore_prob (active_explorer's p); "
            + (
                f"it explores by {', '.join(own)} (settings bandit.{own[0]}), which train-offline leaves at its default"
                if own
                else "it has no exploration parameter to set"
            ),
            param_hint="--explore-prob",
        )
    seeds = _seeds(eval_seeds)
    key = os.environ.get("EDGEPATH_HMAC_KEY", "").encode()
    if sign and not key:
        raise typer.BadParameter("--sign needs EDGEPATH_HMAC_KEY", param_hint="--sign")
    try:
        log_rows = read_decision_log_rows(decision_log) if decision_log else []
    except DecisionLogError as exc:
        raise typer.BadParameter(str(exc), param_hint="--decision-log") from exc
    cfg = OfflineConfig(policy=policy, reward_threshold_mbps=reward_threshold_mbps, epochs=epochs, seed=seed)
    if explore_prob is not None:  # active_explorer's p (checked above); otherwise OfflineConfig's default
        cfg = dataclasses.replace(cfg, explore_prob=explore_prob)
    wifi, cellular = vendored_csv(wifi, "wifi4.csv", "--wifi"), vendored_csv(cellular, "4G.csv", "--cellular")
    try:
        split = load_split(wifi, cellular, wifi, cellular, test_fraction=test_fraction)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--wifi/--cellular") from exc
    log_filter = drop_held_out_devices(
        log_rows,
        (m.user_uid for m in (*split.train_wifi, *split.train_cellular)),
        (m.user_uid for m in (*split.test_wifi, *split.test_cellular)),
    )
    logged = log_filter.kept
    if log_filter.dropped_held_out:
        typer.echo(f"decision log: {log_filter.dropped_held_out} rows of held-out users' devices dropped")
    if log_filter.unmapped:
        typer.echo(
            f"decision log: {log_filter.unmapped} rows of devices that map to no user of the data kept; "
            "the held-out scores are not verified held out"
        )
    alpha, alpha_scores = select_alpha(split.train_wifi, split.train_cellular, cfg)
    cfg = OfflineConfig(**{**cfg.__dict__, "sgd_alpha": alpha})
    typer.echo(f"sgd_alpha {alpha} (validation log-loss on training users: {alpha_scores})")
    train = pair_situations(split.train_wifi, split.train_cellular, seed)
    typer.echo(f"training on {len(train)} paired situations of the training users (+{len(logged)} logged decisions)")
    model = train_offline(train, logged, cfg)
    scores = offline_scores(model, split, seeds)
    rows = run_ablation(split, seeds, cfg) if ablation else []
    command = _invocation(ctx, "train-offline")
    card = {
        "name": out.name,
        "format": "edgepath.primary-path/1",
        "trained_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "command": command,
        "data": {
            "source": "Mobile Access Bandwidth in Practice (Li et al., ACM SIGCOMM 2022), public data release; "
            "crowd-sourced Android bandwidth tests, China 2021",
            "licence": "Apache-2.0 (service/data/mobilebandwidth/LICENSE.txt, ATTRIBUTION.md)",
            "files": {repo_relative(wifi): _sha256_file(wifi), repo_relative(cellular): _sha256_file(cellular)},
            "pairing": PAIRING_TEXT,
        },
        "split": split.describe(),
        "arms": [a.value for a in ARMS],
        "features": list(FEATURE_NAMES),
        "feature_groups": {g: [FEATURE_NAMES[i] for i in ix] for g, ix in FEATURE_GROUPS.items()},
        # only what cfg.policy reads: an explore_prob or ridge_* value a ridge_squarecb/epsilon_greedy model ignores
        # would read as one of its hyper-parameters
        "hyper_parameters": {**policy_config_dict(cfg), "sgd_learning_rate": "optimal (scikit-learn default)"},
        "reward": model.bandit.reward_name,
        "reward_definition": model.bandit.config.utility.describe()
        if model.bandit.reward_name == "utility"
        else f"Bernoulli: 1[throughput >= {cfg.reward_threshold_mbps} Mbit/s]",
        "model_selection": {
            "sgd_alpha": "lowest mean validation log-loss of the arms' reward oracles; validation = 25% of the "
            "training users (split salt 'validation'), never the test users",
            "validation_log_loss": alpha_scores,
        },
        "training": {
            "situations": model.n_situations,
            "logged_decisions": model.n_logged,
            "logged_decisions_read": len(log_rows),
            "logged_decisions_dropped_held_out": log_filter.dropped_held_out,
            "logged_decisions_unmapped": log_filter.unmapped,
            "reward_rate_per_arm": dict(zip([a.value for a in ARMS], model.positives, strict=True)),
            "mean_target_per_arm_means": "mean utility" if model.bandit.reward_name == "utility" else "reward rate",
        },
        "scores": {
            "seeds": seeds,
            "held_out": log_filter.held_out_verified,
            "held_out_note": "trained on the training users' situations and log rows only"
            if log_filter.held_out_verified
            else f"NOT verified held out: {log_filter.unmapped} decision-log rows came from devices that map to no "
            "user of the data (device ids other than the replay's <prefix>-<16 hex digits of user_uid>), so they "
            "may hold the held-out users' outcomes",
            "offline": scores,
        },
        "ablation": rows,
        "notes": [
            "Situations are paired from two real single-arm tests of the same city, not simultaneous measurements.",
            "Offline scores are static (greedy oracles / better-arm classifier); `edgepath eval primary` measures "
            "the warm-started bandit while it keeps learning online, next to cold start, VW and the baselines.",
            "Integrity only: SHA256SUMS detects corruption, not forgery; sign with --sign (HMAC) for authenticity.",
            "The ridge_* policies regress the utility (linear in throughput below 1 Gbit/s), so maximising it "
            "maximises mean throughput; the paper's policies' oracles estimate P(throughput >= reward threshold), "
            "the Bernoulli reward, which is not the same (WiFi clears 25 Mbit/s more often, LTE has the heavier "
            "upper tail).",
            "Feature groups whose removal changes the score by less than its CI (see the ablation table) show no "
            "measurable effect on this data set; all groups stay for devices that report other subsets (missing "
            "indicators) and for NR/5 GHz contexts absent here (band). A group whose removal raises the static "
            "score (e.g. the missing indicators for the ridge estimates) is kept because the online learner and "
            "other devices use it; the static score is one model on one data set.",
        ],
    }
    if eval_report is not None:
        card["online_evaluation"] = _eval_summary(json.loads(eval_report.read_text()), str(eval_report))
    card["notes"] = [*card["notes"], *(note or [])]
    save_artefact(out, model.bandit, model.classifier, card, render_markdown(card), hmac_key=key if sign else None)
    for name, sc in scores.items():
        typer.echo(
            f"{name:24s} {sc['pct_of_oracle']:5.1f}% of oracle, {sc['gain_vs_wifi_first_pct']:+5.1f}% vs wifi_first"
        )
    typer.echo(f"artefact: {out} ({sum(f.stat().st_size for f in out.iterdir()) / 1024:.0f} KiB)")


@eval_app.command("primary")
def eval_primary(
    ctx: typer.Context,
    train_wifi: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="WiFi CSV of the training side")],
    train_cellular: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="4G CSV of the training side")],
    test_wifi: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="WiFi CSV of the test side")],
    test_cellular: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="4G CSV of the test side")],
    report: Annotated[Path, typer.Option(help="Write the JSON report here")],
    plot: Annotated[Path, typer.Option(help="Write the PNG plot here")],
    seeds: Annotated[str, typer.Option(help="Comma-separated seeds (pairing, order, policies)")] = "7,8,9,10,11",
    policy: Annotated[str, typer.Option(help=_POLICY_HELP)] = DEFAULT_POLICY,
    compare: Annotated[
        str, typer.Option(help="Other policies with cold_/warm_ rows (comma-separated; empty for none)")
    ] = "ridge_lints,ridge_linucb,ridge_egreedy,active_explorer",
    drift: Annotated[
        bool,
        typer.Option(
            "--drift/--no-drift", help="Also replay with WiFi degrading half-way (warm --policy and --compare policies)"
        ),
    ] = True,
    test_fraction: Annotated[float, typer.Option(min=0.01, max=0.9, help="Held-out users when files coincide")] = 0.25,
    batch_size: Annotated[int, typer.Option(min=1, help="Rewarded decisions per online refit")] = 50,
    vw: Annotated[bool, typer.Option("--vw/--no-vw", help="Include Vowpal Wabbit squarecb")] = True,
    reward_threshold_mbps: Annotated[
        float, typer.Option(min=0.0, help="Bernoulli reward threshold of the bandits (service default 25)")
    ] = 25.0,
) -> None:
    """Primary path on unseen users: cold vs warm start vs offline classifier vs baselines vs VW (mean ± 95% CI).

    When the training and test files are the same, users are split by SHA-256 of user_uid (--test-fraction);
    otherwise test measurements of training users are dropped. Writes --report (JSON) and --plot (PNG).
    """
    require_lab("edgepath eval primary")
    from edgepath.evaluation.primary import PAIRING_TEXT, drift_replay, evaluate, load_split, train_models
    from edgepath.evaluation.primary import plot as draw
    from edgepath.training.offline import OfflineConfig, config_dict, select_alpha

    known_policy(policy)
    seed_list = _seeds(seeds)
    try:
        split = load_split(train_wifi, train_cellular, test_wifi, test_cellular, test_fraction=test_fraction)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    cfg = OfflineConfig(policy=policy, reward_threshold_mbps=reward_threshold_mbps)
    alpha, alpha_scores = select_alpha(split.train_wifi, split.train_cellular, cfg)
    cfg = OfflineConfig(**{**cfg.__dict__, "sgd_alpha": alpha})
    typer.echo(f"warm-start sgd_alpha {alpha} (validation log-loss on training users: {alpha_scores})")
    others = list(dict.fromkeys(p.strip() for p in compare.split(",") if p.strip() and p.strip() != policy))
    for name in others:
        known_policy(name, param_hint="--compare")
    names = [policy, *others]
    models = train_models(split, cfg, names, typer.echo)
    result, traces = evaluate(
        split, seed_list, cfg, batch_size=batch_size, include_vw=vw, progress=typer.echo, policies=names, models=models
    )
    # every trained warm start (--policy and --compare), never a policy without a model (its drift row would be
    # a KeyError after the whole run); the report's drift.warm_policies names them
    drift_report = (
        drift_replay(split, seed_list, cfg, models, names, batch_size=batch_size, progress=typer.echo)
        if drift
        else None
    )
    out = {
        "default_policy": DEFAULT_POLICY,
        "policy": policy,
        "benchmark": "primary-path: cold vs warm start on unseen users",
        "command": _invocation(ctx, "eval primary"),
        "seeds": seed_list,
        "pairing": PAIRING_TEXT,
        "split": split.describe(),
        "metric": "mean downlink throughput (Mbit/s) of the chosen path; ± = 95% Student-t half-width over seeds",
        "reward": {
            "utility_policies": models[policy].bandit.config.utility.describe()
            + " (ridge_*, vw_squarecb_utility: cost = -utility)",
            "paper_policies": f"Bernoulli: throughput >= {cfg.reward_threshold_mbps} Mbit/s (paper's policies, "
            "vw_squarecb: cost = 1 - reward)",
        },
        "batch_size": batch_size,
        "offline_config": config_dict(cfg),
        **result,
        "drift": drift_report,
    }
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(out, indent=2) + "\n")
    draw(out, traces, plot)
    typer.echo(f"{'policy':26s} {'Mbit/s':>16s} {'% of oracle':>16s} {'vs wifi_first':>14s}")
    for name, p in sorted(out["policies"].items(), key=lambda kv: kv[1]["pct_of_oracle"]):
        ci = p["mean_throughput_mbps_ci95"]
        pci = p["pct_of_oracle_ci95"]
        typer.echo(
            f"{name:26s} {p['mean_throughput_mbps']:8.1f} ± {ci or 0:5.1f} {p['pct_of_oracle']:8.1f} ± {pci or 0:5.1f}"
            f" {p['gain_vs_wifi_first_pct']:+13.1f}%"
        )
    if drift_report is not None:
        typer.echo(f"drift (WiFi x {drift_report['wifi_factor']} half-way): outcomes to switch per seed")
        for name, d in drift_report["policies"].items():
            typer.echo(
                f"  {name:26s} after {d['mean_throughput_after_mbps']:6.1f} Mbit/s, "
                f"LTE share {d['lte_share_after']:.2f},"
                f" switch {d['switch_outcomes_per_seed']}"
            )
    typer.echo(f"report: {report}\nplot: {plot}")


# --- end primary path warm start and evaluation ---


# --- eval ssmp (issue 4) ---
@eval_app.command("ssmp")
def eval_ssmp(
    report: Annotated[Path, typer.Option(help="Write the JSON report here")],
    plot: Annotated[Path, typer.Option(help="Write the PNG plot here")],
    paper: Annotated[bool, typer.Option("--paper", help="The paper's Section V scenarios, transfer model")] = False,
    gophers: Annotated[
        Optional[Path],
        typer.Option(help="5Gophers directory (rtt.csv, throughput.csv); default ../shared/data/5gophers if present"),
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed")] = 0,
    alpha: Annotated[Optional[float], typer.Option(help="EWMA α of Eq. 3 for the stable scenarios")] = None,
    repetitions: Annotated[int, typer.Option(min=1, help="--paper: sequences of 10 downloads per size")] = 100,
    downloads: Annotated[int, typer.Option(min=2, help="5Gophers: paired downloads per size and carrier pair")] = 300,
) -> None:
    """SSMP vs DSS download times (Yang et al., SSMP): --paper scenarios and/or 5Gophers data, with a report and plot.

    Without --paper, 5Gophers mode runs on --gophers DIR (or ../shared/data/5gophers when present).
    """
    require_lab("edgepath eval ssmp")
    from edgepath.evaluation import ssmp_eval
    from edgepath.main import ssmp_config

    if gophers is None and not paper:
        gophers = ssmp_eval.default_gophers_dir()
        if gophers is None:
            raise typer.BadParameter(
                "5Gophers data not found at ../shared/data/5gophers; pass --gophers DIR (with rtt.csv and "
                "throughput.csv of 5Gophers 1.0, CC BY 4.0) or use --paper",
                param_hint="--gophers",
            )
    if gophers is not None and not all((gophers / f).is_file() for f in ("rtt.csv", "throughput.csv")):
        raise typer.BadParameter(f"{gophers} lacks rtt.csv or throughput.csv", param_hint="--gophers")
    try:
        config = ssmp_config(load_settings(), alpha=alpha)
    except ValueError as exc:  # a pydantic ValidationError or ConfigError is one too
        raise typer.BadParameter(str(exc), param_hint="--alpha") from exc
    result = ssmp_eval.build_report(
        paper=paper, gophers_dir=gophers, seed=seed, config=config, repetitions=repetitions, downloads=downloads
    )
    ssmp_eval.write_report(result, report)
    ssmp_eval.plot_report(result, plot)
    typer.echo(ssmp_eval.format_table(result))
    typer.echo(f"report: {report}\nplot: {plot}")


# --- end eval ssmp ---


# --- eval mlpm (issue 3) ---
@eval_app.command("mlpm", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def eval_mlpm(
    ctx: typer.Context,
    report: Annotated[Path, typer.Option(help="Write the JSON report here")],
    plot: Annotated[Path, typer.Option(help="Write the PNG plot here")],
    profile: Annotated[
        str, typer.Option(help="Application profile: UNSPECIFIED, STREAMING, BULK, LOSS_SENSITIVE, INTERACTIVE")
    ] = "UNSPECIFIED",
    window: Annotated[Optional[int], typer.Option(min=1, max=64, help="MLPM window, samples (default 20)")] = None,
    classifier: Annotated[
        Optional[str],
        typer.Option(
            help="MLPM classifier to score: fitted or hand_set (default: the service's setting mlpm.classifier, "
            "EDGEPATH_MLPM__CLASSIFIER, itself 'fitted' by default)"
        ),
    ] = None,
    block_len: Annotated[int, typer.Option(min=1, help="Bootstrap block length, steps")] = 10,
    bootstrap: Annotated[int, typer.Option(min=100, help="Bootstrap resamples")] = 2000,
    seed: Annotated[int, typer.Option(help="Random seed of the bootstrap")] = 0,
) -> None:
    """MLPM vs LoRTT / round robin / oracle on measured paths (Silva et al., HPCS 2020, Table II).

    Inputs (repeatable): --gophers-driving FILE ... (5Gophers driving-trace-*.csv, simultaneous
    carriers) and --ucc FILE FILE (two UCC 5G traces paired by seconds since start; not
    simultaneous). Without inputs: 5Gophers driving traces 1 and 2 and one UCC driving pair
    from ../shared/data when present.

    MLPM decides with the classifier the service serves (setting mlpm.classifier: the fitted one by
    default; --classifier hand_set scores the hand-set gain/bias/profile split); the report names it.
    """
    require_lab("edgepath eval mlpm")
    from edgepath.evaluation import mlpm_eval
    from edgepath.main import mlpm_parameters
    from edgepath.types import ApplicationProfile

    gophers, ucc = mlpm_eval.parse_input_args(ctx.args)
    if not gophers and not ucc:
        gophers, ucc = mlpm_eval.default_inputs()
        if not gophers and not ucc:
            raise typer.BadParameter(
                "no input traces: ../shared/data not found; pass --gophers-driving FILE ... and/or --ucc FILE FILE",
                param_hint="--gophers-driving/--ucc",
            )
    try:
        app_profile = ApplicationProfile(profile.upper())
    except ValueError as exc:
        raise typer.BadParameter(f"unknown profile {profile!r}", param_hint="--profile") from exc
    try:
        settings = load_settings(mlpm_classifier=classifier, options={"mlpm_classifier": "--classifier"})
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc  # names --classifier and its setting, mlpm.classifier
    try:
        params = mlpm_parameters(settings)
        if window:
            params["window"] = window
        traces = mlpm_eval.load_traces(gophers, ucc)
        result = mlpm_eval.build_report(
            traces,
            profile=app_profile,
            **params,
            fitted=mlpm_eval.classifier_for(app_profile, settings.mlpm.classifier),
            block_len=block_len,
            reps=bootstrap,
            seed=seed,
        )
    except ValueError as exc:  # a pydantic ValidationError or ConfigError is one too
        raise typer.BadParameter(str(exc), param_hint="--gophers-driving/--ucc") from exc
    mlpm_eval.write_report(result, report)
    mlpm_eval.plot_report(result, plot)
    typer.echo(mlpm_eval.format_table(result))
    typer.echo(f"report: {report}\nplot: {plot}")


# --- end eval mlpm ---


# --- tokens sub-app (issue 9, security): device tokens stored hashed; see SECURITY.md ---
tokens_app = typer.Typer(
    help="Device tokens for REST/gRPC bearer authentication.", no_args_is_help=True, **_TYPER_OUTPUT
)
app.add_typer(tokens_app, name="tokens")
TokensFileOption = Annotated[
    Optional[Path], typer.Option("--file", help="Tokens file (default: EDGEPATH_AUTH_TOKENS_FILE)")
]


def _tokens_file(path: Optional[Path]) -> Path:
    if path is None:
        env = os.environ.get("EDGEPATH_AUTH_TOKENS_FILE")
        if not env:
            raise typer.BadParameter("pass --file or set EDGEPATH_AUTH_TOKENS_FILE", param_hint="--file")
        path = Path(env)
    return path


@tokens_app.command("add")
def tokens_add(
    device_id: Annotated[str, typer.Argument(help="Device id the token authenticates")],
    file: TokensFileOption = None,
    admin: Annotated[bool, typer.Option("--admin", help="Token of an admin identity")] = False,
) -> None:
    """Create a token for DEVICE_ID and print it once; only its SHA-256 is stored (file mode 0600)."""
    from edgepath.errors import InvalidInput
    from edgepath.security.auth import TokenFile

    try:
        token = TokenFile(_tokens_file(file)).add(device_id, admin=admin)
    except InvalidInput as exc:
        raise typer.BadParameter(str(exc), param_hint="DEVICE_ID") from exc
    typer.echo(token)


@tokens_app.command("revoke")
def tokens_revoke(device_id: Annotated[str, typer.Argument()], file: TokensFileOption = None) -> None:
    """Delete every token of DEVICE_ID."""
    from edgepath.security.auth import TokenFile

    typer.echo(f"revoked {TokenFile(_tokens_file(file)).revoke(device_id)} token(s) of {device_id}")


@tokens_app.command("list")
def tokens_list(file: TokensFileOption = None) -> None:
    """Device ids with tokens (hash prefixes only; tokens cannot be recovered)."""
    from edgepath.security.auth import TokenFile

    for e in TokenFile(_tokens_file(file)).entries():
        typer.echo(f"{e.device_id}\t{'admin' if e.admin else 'device'}\tsha256:{e.sha256[:12]}…")


@tokens_app.command("jwt")
def tokens_jwt(
    device_id: Annotated[str, typer.Argument()],
    ttl_s: Annotated[float, typer.Option(min=1.0, help="Lifetime, s")] = 86400.0,
    admin: Annotated[bool, typer.Option("--admin")] = False,
) -> None:
    """Print an HS256 JWT for DEVICE_ID signed with EDGEPATH_AUTH_JWT_KEY (at least 32 bytes, as the service
    requires; a shorter key is a usage error)."""
    from edgepath.security.auth import issue_jwt
    from edgepath.settings import jwt_key_problem

    key = os.environ.get("EDGEPATH_AUTH_JWT_KEY", "")
    if not key:
        raise typer.BadParameter("set EDGEPATH_AUTH_JWT_KEY")
    if problem := jwt_key_problem(key):
        raise typer.BadParameter(problem)
    typer.echo(issue_jwt(key, device_id, ttl_s=ttl_s, admin=admin))


# --- end tokens sub-app ---


def main() -> None:
    app()


if __name__ == "__main__":
    main()
