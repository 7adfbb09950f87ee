"""Service settings (pydantic-settings), grouped per engine.

Precedence: command-line options > environment variables (``EDGEPATH_`` prefix,
e.g. ``EDGEPATH_GRPC_PORT``) > settings file (``--config FILE``, JSON, or TOML when the
name ends in ``.toml``) > the defaults below.

Each engine's parameters are one nested model: :class:`BanditSettings` (``settings.bandit``,
the primary-path learner and its reward), :class:`SsmpSettings` (``settings.ssmp``),
:class:`MlpmSettings` (``settings.mlpm``) and :class:`CongestionSettings` (``settings.congestion``).
Their environment variables join the group and the field with ``__``: ``EDGEPATH_BANDIT__EXPLORE_PROB``,
``EDGEPATH_BANDIT__FORGETTING``, ``EDGEPATH_SSMP__ALPHA``, ``EDGEPATH_CONGESTION__EDGE_REFRESH_S``; a
settings file nests them as tables (``[bandit]``).

Compatibility: the flat names of earlier releases (:data:`FLAT_ALIASES`: ``policy``,
``forgetting``, ``ssmp_alpha``, ``mlpm_window``, ...) still work as keyword arguments, settings-file
keys and environment variables (``EDGEPATH_POLICY``, ``EDGEPATH_FORGETTING``, ...), and read back as
attributes (``settings.policy`` is ``settings.bandit.policy``). Where both spellings are set, the
nested one wins within a source; sources keep their precedence. :func:`describe_errors` names the
environment variable of each invalid value.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import logging
import os
import tomllib
import typing
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings import SettingsError as EnvParseError

ENV_PREFIX = "EDGEPATH_"
#: Joins a group and its field in environment variable names (``EDGEPATH_BANDIT__EXPLORE_PROB``).
NESTED_DELIMITER = "__"
#: Shortest HS256 key (``auth_jwt_key``) accepted, bytes: RFC 7518 §3.2 asks for a key of at least the hash
#: output's size (256 bits). A shorter one can be found offline from one captured JWT, and with it admin tokens.
MIN_JWT_KEY_BYTES = 32


# --- per-engine groups (issue 14) -------------------------------------------------------------------------------
# Defaults by keyword (``Field(default=…)``): type checkers read a field's default only from the keyword (PEP 681,
# pydantic's dataclass_transform), and ``Settings`` needs each group constructible without arguments (default_factory).
class BanditSettings(BaseModel):
    """The primary-path bandit: policy, reward and hyper-parameters (``EDGEPATH_BANDIT__*``).

    Defaults spell out :class:`edgepath.engines.primary_path.BanditConfig`'s and the utility's
    (:mod:`edgepath.engines.reward`) so that loading settings imports no engine; a test checks they agree.
    Sources of the parameters: :mod:`edgepath.engines.primary_path` (module docstring).
    """

    model_config = ConfigDict(extra="forbid")

    policy: str = Field(default="ridge_squarecb", description="a name in edgepath.engines.primary_path.POLICIES")
    propensity_floor: float = Field(
        default=0.01,
        gt=0.0,
        le=1.0,
        description="Exploration floor: ridge_squarecb/lints/egreedy draw every arm with at least this probability "
        "(logged exactly); other policies log max(this, p), a bound when p is smaller",
    )
    reward_throughput_bps: float = Field(default=25e6, ge=0.0, description="Reward 1 needs throughput ≥ this, bit/s")
    reward_latency_ms: float = Field(default=100.0, ge=0.0, description="…and latency ≤ this, ms (if reported)")
    utility_throughput_cap_bps: float = Field(
        default=1e9, gt=0.0, description="Utility = throughput / this (clipped to 1) for ridge_* policies, bit/s"
    )
    utility_latency_cap_ms: float = Field(
        default=1000.0, gt=0.0, description="Latency at which the full penalty applies, ms"
    )
    utility_latency_weight: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Utility lost at latency_cap_ms (0..1)"
    )
    utility_loss_weight: float = Field(
        default=1.0, ge=0.0, le=1.0, description="Utility lost per unit loss fraction (0..1)"
    )
    forgetting: float = Field(
        default=0.999,
        gt=0.0,
        le=1.0,
        description="ridge_* forgetting factor per outcome of an arm (memory ≈ 1/(1−γ) outcomes); cold starts only, "
        "a model artefact keeps the factor it was trained with",
    )
    # EdgePath's ridge learners (edgepath.engines.linear_bandit)
    ridge_lambda: float = Field(
        default=1.0, gt=0.0, description="ridge_*: L2 regularisation λ of each arm's regression"
    )
    squarecb_gamma0: float = Field(
        default=100.0, gt=0.0, description="ridge_squarecb: γ_t = gamma0·(n+1)^0.5 (SquareCB)"
    )
    ts_scale: float = Field(default=0.02, gt=0.0, description="ridge_lints: scale of the posterior draw (LinTS)")
    ucb_alpha: float = Field(default=0.05, ge=0.0, description="ridge_linucb: width of the confidence bonus (LinUCB)")
    ridge_epsilon: float = Field(default=0.05, ge=0.0, le=1.0, description="ridge_egreedy: exploration probability ε")
    # the paper's policies (SGD oracles, Bernoulli reward)
    explore_prob: float = Field(
        default=0.15, ge=0.0, le=1.0, description="active_explorer: probability p of the active-learning branch"
    )
    explore_decay: float | None = Field(
        default=0.9997, gt=0.0, le=1.0, description="active_explorer: p decays by this per decision (none: no decay)"
    )
    epsilon: float = Field(default=0.2, ge=0.0, le=1.0, description="epsilon_greedy: exploration probability ε")
    epsilon_decay: float | None = Field(
        default=0.9999, gt=0.0, le=1.0, description="epsilon_greedy: ε decays by this per decision (none: no decay)"
    )
    explore_rounds: int = Field(
        default=500, ge=0, description="explore_first: uniformly random decisions before exploiting"
    )
    ucb_nsamples: int = Field(default=10, ge=2, description="bootstrapped_ucb: bootstrap resamples")
    ucb_percentile: int = Field(
        default=80, ge=1, le=100, description="bootstrapped_ucb: upper percentile of the scores"
    )
    sgd_alpha: float = Field(default=1e-4, gt=0.0, description="paper policies: L2 penalty of the SGD logistic oracles")


class SsmpSettings(BaseModel):
    """SSMP server selection (issue 4, :mod:`edgepath.engines.ssmp`; ``EDGEPATH_SSMP__*``)."""

    model_config = ConfigDict(extra="forbid")

    mice_threshold_bytes: int = Field(
        default=1_048_576, ge=0, description="Transfers smaller than this are mice flows, bytes (paper: < 1 MB)"
    )
    alpha: float = Field(default=0.5, ge=0.0, le=1.0, description="EWMA weight of a new server score Q (SSMP Eq. 3)")
    stale_age_s: float = Field(
        default=600.0, gt=0.0, description="A server not measured for longer than this is flagged for probing, s"
    )
    max_servers: int = Field(default=100_000, ge=1, description="In-process store capacity (server scores)")
    fleet_devices: int = Field(
        default=16,
        ge=1,
        le=64,
        description="A server's fleet score is the median over at most this many devices' own fresh scores, the "
        "most recently updated (SSMP per device; one device moves it by at most one rank)",
    )


class MlpmSettings(BaseModel):
    """MLPM scheduler weights (issue 3, :mod:`edgepath.engines.mlpm`; ``EDGEPATH_MLPM__*``)."""

    model_config = ConfigDict(extra="forbid")

    window: int = Field(default=20, ge=1, le=64, description="Samples per feature in MLPM's slope (paper: 10-20)")
    horizon_s: float = Field(default=1.0, ge=0.0, le=600.0, description="MLPM forecast horizon, s")
    classifier: Literal["fitted", "hand_set"] = Field(
        default="fitted",
        description="MLPM classifier: weights fitted on traces (engines.mlpm.FITTED, issue 20) or the hand-set "
        "gain/bias/profile split",
    )
    gain: float = Field(default=8.0, gt=0.0, le=1000.0, description="Scale of MLPM's classifier weights w")
    bias: float | None = Field(
        default=None, ge=-1000.0, le=1000.0, description="MLPM classifier bias b (default: -gain/2)"
    )


class CongestionSettings(BaseModel):
    """Congestion-control advice (issues 3 and 20, :mod:`edgepath.engines.congestion`; ``EDGEPATH_CONGESTION__*``)."""

    model_config = ConfigDict(extra="forbid")

    edge_measurements: bool = Field(
        default=True,
        description="Count outcomes' congestion_measurement per (profile, algorithm) and let them override the advice "
        "when they refute it (engines.congestion.advise_with_edge); off: neither counted nor used",
    )
    edge_refresh_s: float = Field(
        default=5.0,
        ge=0.0,
        le=3600.0,
        description="Each replica re-reads a profile's edge statistics from the store at most this often, s "
        "(0: on every request, for tests)",
    )


#: Flat names of earlier releases → (group, field). They still work as keyword arguments, settings-file keys,
#: ``EDGEPATH_<NAME>`` environment variables and read-only attributes (``settings.policy``).
FLAT_ALIASES: dict[str, tuple[str, str]] = {
    **{
        name: ("bandit", name)
        for name in (
            "policy",
            "propensity_floor",
            "reward_throughput_bps",
            "reward_latency_ms",
            "utility_throughput_cap_bps",
            "utility_latency_cap_ms",
            "utility_latency_weight",
            "utility_loss_weight",
            "forgetting",
        )
    },
    **{f"ssmp_{name}": ("ssmp", name) for name in ("mice_threshold_bytes", "alpha", "stale_age_s", "max_servers")},
    **{f"mlpm_{name}": ("mlpm", name) for name in ("window", "horizon_s", "classifier", "gain", "bias")},
}


def nest_flat_names(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with the flat names of :data:`FLAT_ALIASES` moved into their groups (nested values win)."""
    out: dict[str, Any] = {}
    flat: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        target = FLAT_ALIASES.get(key.lower()) if isinstance(key, str) else None
        if target is None:
            out[key] = value
        else:
            flat.setdefault(target[0], {})[target[1]] = value
    for group, fields in flat.items():
        given = out.get(group)
        out[group] = {**fields, **given} if isinstance(given, Mapping) else (given if given is not None else fields)
    return out


class _Nested(PydanticBaseSettingsSource):
    """A settings source whose flat (old) names are moved into their groups before sources are merged."""

    def __init__(self, settings_cls: type[BaseSettings], inner: Callable[[], dict[str, Any]]) -> None:
        super().__init__(settings_cls)
        self.inner = inner
        self.__name__ = f"nested_{getattr(inner, '__name__', type(inner).__name__)}"

    def _set_current_state(self, state: dict[str, Any]) -> None:
        super()._set_current_state(state)
        if isinstance(self.inner, PydanticBaseSettingsSource):
            self.inner._set_current_state(state)

    def _set_settings_sources_data(self, states: dict[str, dict[str, Any]]) -> None:
        super()._set_settings_sources_data(states)
        if isinstance(self.inner, PydanticBaseSettingsSource):
            self.inner._set_settings_sources_data(states)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return nest_flat_names(self.inner())


class _FlatEnv(PydanticBaseSettingsSource):
    """The flat environment variables of earlier releases (``EDGEPATH_POLICY``, ``EDGEPATH_SSMP_ALPHA``, ...)."""

    __name__ = "flat_env"

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        env = {k.upper(): v for k, v in os.environ.items()}
        found: dict[str, Any] = {
            name: env[ENV_PREFIX + name.upper()] for name in FLAT_ALIASES if ENV_PREFIX + name.upper() in env
        }
        found = {name: None if value == "null" else value for name, value in found.items()}
        return nest_flat_names(found)


def env_names() -> set[str]:
    """Every environment variable the settings read: top-level fields, group fields (``EDGEPATH_BANDIT__EPSILON``)
    and the flat names of earlier releases (``EDGEPATH_POLICY``). What a deployment may set; nothing else is read."""
    names = set()
    for name, field in Settings.model_fields.items():
        names.add(ENV_PREFIX + name.upper())
        group = field.annotation
        if isinstance(group, type) and issubclass(group, BaseModel):
            names |= {ENV_PREFIX + f"{name}{NESTED_DELIMITER}{sub}".upper() for sub in group.model_fields}
    return names | {ENV_PREFIX + flat.upper() for flat in FLAT_ALIASES}


#: ``EDGEPATH_*`` variables read elsewhere than the settings: the event loop (:func:`edgepath.main.run_event_loop`)
#: and the image's health check (``docker/healthcheck.py``). ``EDGEPATH_AGENT_*`` are the device agent's.
OTHER_ENV_NAMES = frozenset(
    {"EDGEPATH_EVENT_LOOP", "EDGEPATH_HEALTHCHECK", "EDGEPATH_HEALTHCHECK_CA_FILE", "EDGEPATH_HEALTHCHECK_SERVER_NAME"}
)


def unknown_env_settings(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """``EDGEPATH_*`` variables in ``environ`` (default: ``os.environ``) that name no setting (:func:`env_names`),
    each with the known name closest to it (:func:`difflib.get_close_matches`) or None; sorted.

    pydantic-settings reads only the variables of known settings, so a misspelt one (a typo in the chart's
    ``extraSettings``) was ignored without a word, while the same typo in a settings file is refused. Not reported:
    :data:`OTHER_ENV_NAMES`, the agent's ``EDGEPATH_AGENT_*`` and the variables Kubernetes sets for a Service
    named ``edgepath…`` (``NAME_SERVICE_HOST``, ``NAME_SERVICE_PORT…``, ``NAME_PORT…``, where ``NAME_SERVICE_HOST``
    is set). The agent warns the same way (``edgepath_agent.daemon.unknown_env_settings``)."""
    environ = os.environ if environ is None else environ
    known = sorted(env_names())
    upper = {var.upper() for var in environ}
    services = [var.removesuffix("_SERVICE_HOST") for var in upper if var.endswith("_SERVICE_HOST")]
    out: list[tuple[str, str | None]] = []
    for var in sorted(environ):
        name = var.upper()
        if not name.startswith(ENV_PREFIX) or name in known or name in OTHER_ENV_NAMES:
            continue
        if name.startswith(ENV_PREFIX + "AGENT_"):
            continue
        if any(name.startswith((f"{svc}_SERVICE_", f"{svc}_PORT_")) or name == f"{svc}_PORT" for svc in services):
            continue
        close = difflib.get_close_matches(name, known, n=1)
        out.append((var, close[0] if close else None))
    return out


def unknown_env_message(var: str, close: str | None) -> str:
    """The warning for ``var``, an ``EDGEPATH_*`` variable that names no setting, with the closest known name."""
    hint = f"; did you mean {close}?" if close else " (settings: EDGEPATH_<NAME>, groups EDGEPATH_<GROUP>__<NAME>)"
    return f"environment variable {var} matches no setting and is ignored{hint}"


def env_var(loc: tuple[int | str, ...]) -> str:
    """The environment variable of a settings field, from a validation error's ``loc``: ``EDGEPATH_BANDIT__EPSILON``."""
    return ENV_PREFIX + NESTED_DELIMITER.join(str(part).upper() for part in loc if isinstance(part, str))


#: Settings whose value an error message never repeats (keys, and a store URL that may hold a password).
_UNSHOWN_VALUES = frozenset({"hmac_key", "auth_jwt_key", "store_url"})


def describe_errors(exc: ValidationError, source: Callable[[tuple[str, ...]], str | None] | None = None) -> str:
    """One line per invalid value naming where it came from, the setting and the value given, e.g.
    ``EDGEPATH_BANDIT__EXPLORE_PROB (bandit.explore_prob): Input should be less than or equal to 1 (given: 1.5)``.

    ``source`` names the origin of a setting's value from its path (``("bandit", "explore_prob")``): an option,
    a settings-file key or an environment variable (:func:`load_settings` passes the one the operator used);
    without it, or when it returns None, the environment variable. Errors of the whole model (``loc`` empty) keep
    their message alone; the values of keys and of the store URL (:data:`_UNSHOWN_VALUES`) are never repeated."""
    parts = []
    for err in exc.errors():
        msg = str(err["msg"]).removeprefix("Value error, ")
        loc = tuple(p for p in err.get("loc", ()) if isinstance(p, str))
        if not loc:
            parts.append(msg)
            continue
        given = err.get("input")
        if err["type"] != "value_error" and isinstance(given, (str, int, float)) and not _UNSHOWN_VALUES & set(loc):
            msg = f"{msg} (given: {given!r})"
        parts.append(f"{(source and source(loc)) or env_var(loc)} ({'.'.join(loc)}): {msg}")
    return "; ".join(parts)


class ConfigError(ValueError):
    """Settings that cannot be used, as one line naming the source the operator used (an option, an
    ``EDGEPATH_*`` variable or a settings-file key) and the value: raised by :func:`load_settings` for a settings
    file that cannot be read or parsed, an environment variable that cannot be parsed (a list not in JSON) and
    invalid values (:func:`describe_errors`). ``edgepath serve``/``train`` print it as a usage error (exit 2)."""


# --- end per-engine groups ---


class Settings(BaseSettings):
    """All service settings, with units in the names."""

    # env_parse_none_str: ``EDGEPATH_BANDIT__EPSILON_DECAY=null`` sets None (no decay).
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter=NESTED_DELIMITER, env_parse_none_str="null", extra="forbid"
    )

    host: str = Field("127.0.0.1", description="Address both servers bind")
    grpc_port: int = Field(50051, ge=0, le=65535)
    http_port: int = Field(8080, ge=0, le=65535)
    profile: Literal["dev", "prod"] = "dev"
    log_level: str = "INFO"
    # --- operations (issue 22): edgepath.logs, edgepath.grpc.observe, edgepath.tracing ---
    log_format: Literal["text", "json"] = Field(
        "text", description="json: one JSON object per line with the request id (x-request-id) of the call"
    )
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Serve /metrics on this port of its own (None: on the HTTP API port too; serve --workers N: "
        "worker k on this port + k)",
    )
    grpc_max_connection_age_s: float | None = Field(
        None, gt=0.0, description="Close gRPC connections after this age (GOAWAY) so channels re-balance, s"
    )
    grpc_max_connection_age_grace_s: float | None = Field(
        None, ge=0.0, description="Time calls in flight get to finish after a max-age GOAWAY, s"
    )
    admission_max_inflight: int = Field(
        64,
        ge=0,
        description="Calls of one transport in the handlers beyond which new ones are shed (503 / RESOURCE_EXHAUSTED)",
    )
    admission_max_lag_ms: float = Field(
        100.0,
        gt=0.0,
        description="Event-loop lag (two readings in a row) beyond which new calls are shed, ms: about the longest "
        "wait an admitted call sees in front of the loop",
    )
    gil_switch_interval_ms: float = Field(
        0.5,
        gt=0.0,
        le=100.0,
        description="The serving process's GIL switch interval (sys.setswitchinterval), ms: about the longest a "
        "background thread (the refit hand-off, snapshot loads) keeps the event loop waiting for the GIL; "
        "Python's default is 5",
    )
    grpc_max_pending_calls: int = Field(
        32,
        ge=1,
        description="Calls gRPC core may hold before the serving loop takes them; beyond it new calls are refused "
        "(CANCELLED; random early detection up to 2x this, then all), so the queue in front of the loop stays bounded",
    )
    otel_tracing: bool = Field(
        False, description="OpenTelemetry traces of both transports (OTLP exporter from the OTEL_* environment)"
    )
    # --- end operations ---

    seed: int = Field(0, ge=0, description="Seed of the policies' and the SSMP selector's random generators")
    batch_size: int = Field(50, ge=1, description="Outcomes per online refit (paper: 50)")
    trainer_publish_interval_s: float = Field(
        0.25,
        ge=0.0,
        le=60.0,
        description=(
            "At least this long between two model publications, s: batches ready sooner are refitted together (one "
            "update per batch, in order) and published as one version. 0: a publication per batch"
        ),
    )
    native_engines: bool = Field(
        True,
        description="Decide with the compiled engines (the edgepath-native package, service/native) where installed, "
        "and read gRPC requests with its compiled decoding; false: the Python engines and readers alone (the same "
        "results, bit for bit; issue 16)",
    )
    # --- engines (issue 14): EDGEPATH_BANDIT__*, EDGEPATH_SSMP__*, EDGEPATH_MLPM__*, EDGEPATH_CONGESTION__* ---
    bandit: BanditSettings = Field(default_factory=BanditSettings, description="Primary-path bandit")
    ssmp: SsmpSettings = Field(default_factory=SsmpSettings, description="SSMP server selection")
    mlpm: MlpmSettings = Field(default_factory=MlpmSettings, description="MLPM scheduler weights")
    congestion: CongestionSettings = Field(
        default_factory=CongestionSettings, description="Congestion-control advice and edge measurements"
    )

    if TYPE_CHECKING:  # the flat names of FLAT_ALIASES, read-only properties set below the class
        policy: str
        propensity_floor: float
        reward_throughput_bps: float
        reward_latency_ms: float
        utility_throughput_cap_bps: float
        utility_latency_cap_ms: float
        utility_latency_weight: float
        utility_loss_weight: float
        forgetting: float
        ssmp_mice_threshold_bytes: int
        ssmp_alpha: float
        ssmp_stale_age_s: float
        ssmp_max_servers: int
        mlpm_window: int
        mlpm_horizon_s: float
        mlpm_classifier: Literal["fitted", "hand_set"]
        mlpm_gain: float
        mlpm_bias: float | None

    decision_ttl_s: float = Field(3600.0, gt=0.0, description="How long a decision accepts its outcome, s")
    max_decisions: int = Field(
        1_000_000, ge=1, description="In-process store capacity (decisions, ~1.9 KB each: 1M is ~1.9 GB)"
    )
    # --- decision log (issue 18) ---
    decision_log_max_entries: int = Field(
        100_000, ge=1, description="Joined decisions the decision log keeps (oldest dropped first; Redis: approximate)"
    )
    decision_log_retention_s: float = Field(
        7 * 24 * 3600.0, gt=0.0, description="Joined decisions older than this leave the decision log, s"
    )
    # --- end decision log ---
    # --- apprentice mode (issue 18): edgepath.engines.apprentice ---
    mode: Literal["learner", "apprentice"] = Field(
        "learner", description="learner: the bandit serves; apprentice: a baseline serves while the bandit learns"
    )
    apprentice_baseline: Literal["wifi_first", "lte_first", "kernel"] = Field(
        "wifi_first", description="What apprentice mode serves (kernel: the device's first-listed interface)"
    )
    apprentice_explore: float = Field(
        0.05, gt=0.0, le=1.0, description="Share of apprentice decisions drawn uniformly (keeps the log evaluable)"
    )
    apprentice_promote: bool = Field(False, description="Switch to the learner when OPE says it beats the baseline")
    apprentice_margin: float = Field(
        0.0, ge=0.0, le=1.0, description="Learner's lower 95% bound must beat the baseline by this (utility units)"
    )
    apprentice_min_outcomes: int = Field(200, ge=1, description="Outcomes before promotion is considered")
    apprentice_window: int = Field(5000, ge=10, description="Outcomes the online OPE estimate covers")
    apprentice_check_every: int = Field(50, ge=1, description="Outcomes between re-estimates")
    # --- end apprentice mode ---

    # --- Security (issue 9): see SECURITY.md and edgepath.security -------------------------------------------
    auth_tokens_file: Path | None = Field(
        None, description="JSON file of SHA-256-hashed device tokens (`edgepath tokens add DEVICE` writes it)"
    )
    auth_jwt_key: SecretStr = Field(
        SecretStr(""),
        description=f"HS256 key for device JWTs (claims: sub = device_id, exp; admin: bool), at least "
        f"{MIN_JWT_KEY_BYTES} bytes (RFC 7518 §3.2)",
    )
    auth_admin_ids: list[str] = Field(
        default_factory=list, description="Identities (token device ids, certificate CNs, JWT subs) that are admins"
    )
    tls_cert_file: Path | None = Field(None, description="Server certificate (PEM) for gRPC and HTTPS")
    tls_key_file: Path | None = Field(None, description="Server private key (PEM); must not be readable by others")
    tls_client_ca_file: Path | None = Field(
        None, description="CA bundle (PEM) for gRPC client certificates: enables mTLS (CN = device_id)"
    )
    rate_limit_per_s: float = Field(20.0, gt=0.0, description="Requests per second per device (token refill rate)")
    rate_limit_burst: int = Field(40, ge=1, description="Token-bucket capacity per device (requests)")
    outcome_cap_per_window: int = Field(600, ge=1, description="Outcomes one device may report per window")
    outcome_window_s: float = Field(3600.0, gt=0.0, description="Window of outcome_cap_per_window, s")
    plausibility_factor: float = Field(
        1.5, ge=1.0, description="Outcome throughput may reach this × the capacity the device reported"
    )
    quarantined_devices: list[str] = Field(
        default_factory=list, description="Devices whose outcomes are acknowledged but never trained on"
    )
    max_message_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        le=16 * 1024 * 1024,
        description="Largest request body / received gRPC message, bytes (the largest valid JSON request is ~0.5 MB)",
    )

    @property
    def auth_enabled(self) -> bool:
        """True when some authentication method is configured (tokens, JWT key or mTLS)."""
        return bool(
            self.auth_tokens_file or self.auth_jwt_key.get_secret_value() or self.tls_client_ca_file is not None
        )

    @property
    def tls_enabled(self) -> bool:
        """True when a server certificate and key are configured."""
        return self.tls_cert_file is not None and self.tls_key_file is not None

    @model_validator(mode="after")
    def _refuse_insecure(self) -> Settings:
        """Refuse to serve unauthenticated beyond loopback (any profile), without auth + TLS in ``prod``, and with
        an HS256 JWT key shorter than :data:`MIN_JWT_KEY_BYTES` (any profile, :func:`jwt_key_problem`)."""
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file (EDGEPATH_TLS_CERT_FILE/_KEY_FILE) go together")
        if problem := jwt_key_problem(self.auth_jwt_key.get_secret_value()):
            raise ValueError(problem)
        if self.tls_client_ca_file is not None and not self.tls_enabled:
            raise ValueError("tls_client_ca_file (mTLS) needs tls_cert_file and tls_key_file")
        if not self.auth_enabled and not is_loopback(self.host):
            raise ValueError(
                f"refusing to listen on {self.host!r} without authentication: bind 127.0.0.1 (dev) or configure "
                "auth_tokens_file / auth_jwt_key / tls_client_ca_file (EDGEPATH_AUTH_TOKENS_FILE, "
                "EDGEPATH_AUTH_JWT_KEY, EDGEPATH_TLS_CLIENT_CA_FILE); see SECURITY.md"
            )
        if self.profile == "prod" and not (self.auth_enabled and self.tls_enabled):
            missing = [
                *(
                    []
                    if self.auth_enabled
                    else ["authentication (auth_tokens_file, auth_jwt_key or tls_client_ca_file)"]
                ),
                *([] if self.tls_enabled else ["TLS (tls_cert_file + tls_key_file)"]),
            ]
            raise ValueError(f"profile prod requires {' and '.join(missing)}, which is not configured; see SECURITY.md")
        return self

    # --- end security -----------------------------------------------------------------------------------------

    # Shared state (issue 6): see edgepath.state.redis and edgepath.training.snapshots.
    store_url: str = Field(
        "memory://", description="State store: memory:// (one replica) or redis://HOST:PORT/DB (many replicas)"
    )
    trainer: bool | None = Field(
        None, description="Run the online trainer in `serve` (default: yes with memory://, no with redis://)"
    )
    hmac_key: SecretStr = Field(
        SecretStr(""), description="HMAC-SHA256 key signing model snapshots (e.g. from a Kubernetes Secret)"
    )
    redis_namespace: str = Field("edgepath", min_length=1, description="Prefix of every Redis key")
    redis_socket_timeout_s: float = Field(1.0, gt=0.0, description="Redis command timeout before degraded mode, s")
    redis_max_connections: int = Field(
        100,
        ge=1,
        le=10_000,
        description="Connections per Redis client of a process; past them a command waits up to "
        "redis_socket_timeout_s for a free one (then degraded mode) instead of failing at once",
    )
    redis_pipeline_hold_iterations: int = Field(
        16,
        ge=0,
        le=1000,
        description="Event-loop iterations a Redis auto-pipeline waits for more commands before sending: fewer, "
        "fuller round trips under load (issue 16: 21-24 % less server CPU per gRPC Recommend at 16), a few µs per "
        "iteration while idle; 0 sends at the next iteration",
    )
    redis_pipeline_idle_hold_iterations: int = Field(
        2,
        ge=0,
        le=1000,
        description="The hold of a Redis auto-pipeline queue that starts while no other command awaits its reply "
        "(no other caller waiting on Redis), at most redis_pipeline_hold_iterations: a lone call's commands are not "
        "delayed for others that are not coming (issue 16: 2-13 % less server CPU per call at 150 calls/s than 16)",
    )
    outbox_max_outcomes: int = Field(
        10_000, ge=0, description="Outcomes buffered in memory while Redis is unreachable (more are dropped)"
    )
    outbox_max_decisions: int = Field(
        20_000, ge=0, description="Recent decisions each replica keeps in memory (joins and flush while Redis is away)"
    )
    outbox_dir: str | None = Field(
        None,
        description=(
            "Directory of the durable degraded-mode outbox journal (fsync'd, replayed on restart; issue 17). "
            "Unset: outcomes are refused with a retryable 503/UNAVAILABLE while Redis is unreachable"
        ),
    )
    outcome_claim_idle_ms: int = Field(
        30_000, ge=1, description="Pending outcomes idle this long are reclaimed from dead consumers (XAUTOCLAIM)"
    )
    trainer_lock_ttl_s: float = Field(10.0, gt=0.0, description="Expiry of the trainer's Redis lock, s")
    # Graceful shutdown (issue 17): SIGTERM → readiness false → drain → flush the outbox → release the lock.
    drain_readiness_delay_s: float = Field(
        0.0, ge=0.0, description="After SIGTERM, readiness reads false this long before the listeners close, s"
    )
    drain_grace_s: float = Field(10.0, ge=0.0, description="In-flight calls get this long to finish on SIGTERM, s")
    drain_flush_timeout_s: float = Field(
        5.0, ge=0.0, description="On SIGTERM, how long to try writing the degraded-mode outbox into Redis, s"
    )
    snapshot_poll_s: float = Field(1.0, gt=0.0, description="Fallback model-version check period, s")
    exploration_sync_s: float = Field(
        0.5, gt=0.0, description="Period of the fleet-wide exploration-schedule sync through Redis (issue 17), s"
    )
    store_memory_poll_s: float = Field(
        15.0,
        gt=0.0,
        description="Period of the shared state store's memory gauges (Redis INFO memory: "
        "edgepath_store_memory_used_bytes, edgepath_store_memory_limit_bytes) and of the trainer's "
        "edgepath_trainer_backlog_outcomes (the outcome stream's length), s",
    )

    # --- warm start (issue 8): see edgepath.training.artefact ---
    model_path: Path | None = Field(
        None, description="Offline-trained primary-path artefact (models/primary-path-v2) to start from"
    )
    # --- end warm start ---

    @property
    def store_is_shared(self) -> bool:
        """True when ``store_url`` names a store several processes share (``redis://``, ``rediss://``, ``unix://``)."""
        return self.store_url.startswith(("redis://", "rediss://", "unix://"))

    @classmethod
    def settings_customise_sources(  # type: ignore[override]
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments > nested environment variables > flat (old) ones > .env > secrets files."""
        return (
            _Nested(settings_cls, init_settings),
            _Nested(settings_cls, env_settings),
            _FlatEnv(settings_cls),
            dotenv_settings,
            file_secret_settings,
        )

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_names(cls, data: Any) -> Any:
        """Flat (old) names given to ``model_validate`` go to their groups too."""
        return nest_flat_names(data) if isinstance(data, Mapping) else data

    @field_validator("host")
    @classmethod
    def _unbracketed_host(cls, host: str) -> str:
        """``[::1]`` (an IPv6 address as URLs write it) is ``::1``: sockets and gRPC take the bare address
        (:func:`host_port` brackets it again where a port follows)."""
        return host[1:-1] if host.startswith("[") and host.endswith("]") else host

    @field_validator("log_level")
    @classmethod
    def _known_log_level(cls, level: str) -> str:
        """A level name of :mod:`logging` (DEBUG, INFO, WARNING, ERROR, CRITICAL; any case), upper-cased."""
        names = logging.getLevelNamesMapping()
        if level.upper() not in names:
            choices = ", ".join(n for n in names if n not in {"NOTSET", "WARN", "FATAL"})
            raise ValueError(f"unknown log level {level!r}: one of {choices}")
        return level.upper()

    @field_validator("store_url")
    @classmethod
    def _known_store_url(cls, url: str) -> str:
        """``memory://`` or a URL redis-py connects to (``redis://``, ``rediss://``, ``unix://``), its port a number
        in 0-65535 and its database a number, as redis-py's ``parse_url`` reads them (both with
        :func:`urllib.parse.urlsplit`): refused here, not at the first connection. Messages show the URL with its
        password hidden."""
        shown = _display_url(url)
        if url.startswith("memory:"):
            return url
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"unknown store URL {shown!r}: use memory:// or redis://HOST:PORT/DB")
        try:
            parts = urllib.parse.urlsplit(url)
            _ = parts.port  # ValueError: not a number, or out of range
            db = parts.path.strip("/") if not url.startswith("unix://") else ""
        except ValueError as exc:
            raise ValueError(f"store URL {shown!r} cannot be used: {exc}; use redis://HOST:PORT/DB") from exc
        if db and not db.isdigit():
            raise ValueError(f"store URL {shown!r} names database {db!r}: a number is needed, redis://HOST:PORT/DB")
        return url

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Settings:
        """Refuse an empty HMAC key with a shared (Redis) store outside the ``dev`` profile, and in ``dev`` too
        unless both the bind address and the store are on this machine (:func:`dev_hmac_key_problem`)."""
        if self.hmac_key.get_secret_value():
            return self
        if self.profile != "dev" and not self.store_url.startswith("memory"):
            raise ValueError("hmac_key (EDGEPATH_HMAC_KEY) must be set outside the dev profile with a shared store")
        if problem := dev_hmac_key_problem(self.host, self.store_url):
            raise ValueError(problem)
        return self


def _flat_property(name: str, group: str, field: str) -> property:
    def read(self: Settings) -> Any:
        return getattr(getattr(self, group), field)

    read.__doc__ = f"``{group}.{field}`` under its flat name of earlier releases (read only)."
    read.__name__ = name
    return property(read)


for _name, (_group, _field) in FLAT_ALIASES.items():
    setattr(Settings, _name, _flat_property(_name, _group, _field))


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); False for wildcards and other names."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def port_conflict(settings: Settings) -> str | None:
    """Why ``edgepath serve`` cannot bind its servers' ports, naming both settings: two of ``grpc_port``,
    ``http_port`` and ``metrics_port`` equal and not 0 (any free port); None when they differ. The second bind would
    fail only after the first server started. ``edgepath train`` binds only ``metrics_port`` and is not asked (the
    chart gives the trainer the deciders' settings and a metrics port of its own, which may be their HTTP port)."""
    ports = {"grpc_port": settings.grpc_port, "http_port": settings.http_port, "metrics_port": settings.metrics_port}
    taken: dict[int, str] = {}
    for name, port in ports.items():
        if not port:
            continue
        if port in taken:
            first = taken[port]
            return (
                f"{first} ({env_var((first,))}) and {name} ({env_var((name,))}) are both {port}: each server needs "
                "a port of its own"
            )
        taken[port] = name
    return None


def host_port(host: str, port: int) -> str:
    """``host:port`` as gRPC targets and URLs write it: an IPv6 address in brackets (``[::1]:50051``, RFC 3986
    §3.2.2), any other host as is (``127.0.0.1:50051``)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _display_url(url: str) -> str:
    """``url`` with its password hidden (:func:`edgepath.state.base.display_url`)."""
    from edgepath.state.base import display_url

    return display_url(url)


def jwt_key_problem(key: str) -> str | None:
    """Why ``key`` may not be the HS256 JWT key (``auth_jwt_key``), or None when it may (or is empty: no JWTs).

    A key shorter than :data:`MIN_JWT_KEY_BYTES` bytes (UTF-8) is refused in every profile: one captured device
    JWT is enough to search for it offline, and whoever finds it mints admin tokens. PyJWT only warns.
    """
    size = len(key.encode())
    if not key or size >= MIN_JWT_KEY_BYTES:
        return None
    return (
        f"auth_jwt_key (EDGEPATH_AUTH_JWT_KEY) is {size} bytes long: an HS256 key needs at least "
        f"{MIN_JWT_KEY_BYTES} bytes (256 bits, RFC 7518 §3.2), or one captured JWT lets it be guessed offline; "
        "generate one with: head -c 32 /dev/urandom | base64"
    )


def store_is_local(store_url: str) -> bool:
    """True when a shared store's URL names this machine: ``unix://`` (a local socket), or a ``redis://`` /
    ``rediss://`` host that :func:`is_loopback` accepts (no host: redis-py's default, ``localhost``)."""
    if store_url.startswith("unix://"):
        return True
    try:
        host = urllib.parse.urlsplit(store_url).hostname
    except ValueError:  # a malformed URL: nothing says it is local
        return False
    return host is None or is_loopback(host)


def _url_host(url: str) -> str:
    """The host part of a URL alone (never its password), for messages."""
    try:
        return urllib.parse.urlsplit(url).hostname or "localhost"
    except ValueError:
        return "an unparsable URL"


def dev_hmac_key_problem(host: str, store_url: str) -> str | None:
    """Why model snapshots on ``store_url`` may not be signed with the published dev key
    (:data:`edgepath.training.snapshots.DEV_HMAC_KEY`, used when ``hmac_key`` is empty), or None when they may.

    Replicas unpickle what verifies under the key, so with the dev key whoever can write to the store runs code in
    every replica. Allowed only where that is this machine alone: a store that is not shared, or a shared one on
    loopback (or a Unix socket) served on a loopback address. A non-loopback bind address or store host is refused.
    """
    if not store_url.startswith(("redis://", "rediss://", "unix://")):
        return None
    exposed = [
        *([] if is_loopback(host) else [f"serving on {host!r}"]),
        *([] if store_is_local(store_url) else [f"the store is on {_url_host(store_url)!r}"]),
    ]
    if not exposed:
        return None
    return (
        f"hmac_key (EDGEPATH_HMAC_KEY) must be set with a shared store when {' and '.join(exposed)}: without it "
        "model snapshots are signed with the published dev key, and whoever can write to the store has every "
        "replica unpickle (run) what it wrote; set EDGEPATH_HMAC_KEY=$(head -c 32 /dev/urandom | base64)"
    )


def read_settings_file(path: Path) -> dict[str, Any]:
    """The settings in ``path``: TOML when its name ends in ``.toml``, JSON otherwise, a table/object at the top.

    Raises
    ------
    ConfigError
        Naming the file: it cannot be read (missing, not permitted), is not valid TOML/JSON, or holds no table.
    """
    kind = "TOML" if path.suffix == ".toml" else "JSON"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"settings file {path} (--config) cannot be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"settings file {path} (--config) is not UTF-8 text: {exc}") from exc
    try:
        values = tomllib.loads(text) if kind == "TOML" else json.loads(text)
    except ValueError as exc:  # TOMLDecodeError, JSONDecodeError
        raise ConfigError(f"settings file {path} (--config) is not valid {kind}: {exc}") from exc
    if not isinstance(values, dict):
        table = "table" if kind == "TOML" else "object"
        raise ConfigError(f"settings file {path} (--config) holds a {type(values).__name__}, not a {kind} {table}")
    return values


def _env_parse_problem(exc: EnvParseError) -> ConfigError:
    """The environment variable behind pydantic-settings' "error parsing value for field": a list or group
    (``EDGEPATH_AUTH_ADMIN_IDS``, ``EDGEPATH_BANDIT``) whose value is not JSON."""
    env = {k.upper(): (k, v) for k, v in os.environ.items()}
    for name, field in Settings.model_fields.items():
        var = ENV_PREFIX + name.upper()
        if var not in env:
            continue
        given, value = env[var]
        is_list = typing.get_origin(field.annotation) in (list, set, tuple)
        is_group = isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        if not (is_list or is_group):
            continue
        try:
            json.loads(value)
        except ValueError:
            example = json.dumps([value] if is_list else {"NAME": value})
            kind = "a JSON list" if is_list else "a JSON object"
            return ConfigError(f"{given} ({name}) is not {kind}: {value!r}; write it as JSON, e.g. {example}")
    return ConfigError(str(exc))


def load_settings(
    config_file: Path | None = None, *, options: Mapping[str, str] | None = None, **overrides: Any
) -> Settings:
    """Build settings from a file, the environment and CLI overrides (None values are ignored).

    Flat (old) and nested names are accepted everywhere (see the module docstring). ``options`` names the
    command-line option of an override (``{"store_url": "--store"}``; default ``--NAME-WITH-DASHES``), for messages.

    Raises
    ------
    ConfigError
        The settings file cannot be read or parsed (:func:`read_settings_file`), an environment variable cannot be
        parsed, or a value is out of range or unknown: each named by the source the operator used (option,
        variable or settings-file key, :func:`describe_errors`); ``__cause__`` is the
        :class:`pydantic.ValidationError` of invalid values.
    """
    file_values = read_settings_file(config_file) if config_file is not None else {}

    class _FromFile(Settings):
        @classmethod
        def settings_customise_sources(  # type: ignore[no-untyped-def,override]
            cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
        ):
            return (
                _Nested(settings_cls, init_settings),
                _Nested(settings_cls, env_settings),
                _FlatEnv(settings_cls),
                _Nested(settings_cls, lambda: file_values),
            )

    cli = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings.model_validate(_FromFile(**cli).model_dump())
    except EnvParseError as exc:
        raise _env_parse_problem(exc) from exc
    except ValidationError as exc:
        source = _source_namer(config_file, file_values, cli, options or {})
        raise ConfigError(describe_errors(exc, source)) from exc


def setting_origin(
    loc: tuple[str, ...],
    config_file: Path | None = None,
    *,
    options: Mapping[str, str] | None = None,
    **overrides: Any,
) -> str:
    """Where :func:`load_settings` called with these arguments took the setting at ``loc`` (``("bandit", "policy")``)
    from, named as :func:`describe_errors` names it: its option, its environment variable as set (nested or flat
    name), its key in the settings file; else (the default) its environment variable. For a value the settings
    accept but the command refuses later (an unknown policy: settings import no engine)."""
    file_values = read_settings_file(config_file) if config_file is not None else {}
    cli = {k: v for k, v in overrides.items() if v is not None}
    return _source_namer(config_file, file_values, cli, options or {})(loc) or env_var(loc)


def _source_namer(
    config_file: Path | None, file_values: Mapping[str, Any], cli: Mapping[str, Any], options: Mapping[str, str]
) -> Callable[[tuple[str, ...]], str | None]:
    """Where a setting's value came from, by the precedence of :func:`load_settings`: its option, its
    environment variable as set (nested or flat name), or its key in the settings file."""
    env = {k.upper(): k for k in os.environ}
    flat_of = {target: flat for flat, target in FLAT_ALIASES.items()}

    def spellings(loc: tuple[str, ...]) -> list[tuple[str, ...]]:
        flat = flat_of.get((loc[0], loc[1])) if len(loc) >= 2 else None
        return [loc, *([(flat, *loc[2:])] if flat else [])]

    def find(values: Mapping[str, Any], path: tuple[str, ...]) -> bool:
        for part in path:
            if not isinstance(values, Mapping) or part not in values:
                return False
            values = values[part]
        return True

    def name(loc: tuple[str, ...]) -> str | None:
        for path in spellings(loc):
            if path[0] in cli:
                return options.get(path[0], "--" + path[0].replace("_", "-"))
        for path in spellings(loc):
            for length in range(len(path), 0, -1):  # EDGEPATH_BANDIT__EPSILON, or EDGEPATH_BANDIT as JSON
                var = env_var(path[:length])
                if var in env:
                    return env[var]
        for path in spellings(loc):
            if find(file_values, path):
                return f"{'.'.join(path)} in {config_file}"
        return None

    return name
