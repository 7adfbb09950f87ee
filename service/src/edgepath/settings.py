"""Service settings (pydantic-settings).

Precedence: command-line options > environment variables (``EDGEPATH_`` prefix,
e.g. ``EDGEPATH_GRPC_PORT``) > settings file (``--config FILE``, TOML/JSON/YAML
by extension is not needed: JSON or TOML) > the defaults below.
"""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """All service settings, with units in the names."""

    model_config = SettingsConfigDict(env_prefix="EDGEPATH_", extra="forbid")

    host: str = Field("127.0.0.1", description="Address both servers bind")
    grpc_port: int = Field(50051, ge=0, le=65535)
    http_port: int = Field(8080, ge=0, le=65535)
    profile: Literal["dev", "prod"] = "dev"
    log_level: str = "INFO"

    # The default is edgepath.engines.primary_path.DEFAULT_POLICY, spelled out so that loading settings
    # imports no engine (a test checks the two agree).
    policy: str = Field("ridge_squarecb", description="a name in edgepath.engines.primary_path.POLICIES")
    seed: int = Field(0, ge=0, description="Seed of the policies' random generators")
    batch_size: int = Field(50, ge=1, description="Outcomes per online refit (paper: 50)")
    propensity_floor: float = Field(0.01, gt=0.0, le=1.0)
    reward_throughput_bps: float = Field(25e6, ge=0.0, description="Reward 1 needs throughput ≥ this, bit/s")
    reward_latency_ms: float = Field(100.0, ge=0.0, description="…and latency ≤ this, ms (if reported)")
    # --- utility reward of EdgePath's learners (issue 15): edgepath.engines.reward.utility ---
    utility_throughput_cap_bps: float = Field(
        1e9, gt=0.0, description="Utility = throughput / this (clipped to 1) for ridge_* policies, bit/s"
    )
    utility_latency_cap_ms: float = Field(1000.0, gt=0.0, description="Latency at which the full penalty applies, ms")
    utility_latency_weight: float = Field(0.5, ge=0.0, le=1.0, description="Utility lost at latency_cap_ms (0..1)")
    utility_loss_weight: float = Field(1.0, ge=0.0, le=1.0, description="Utility lost per unit loss fraction (0..1)")
    forgetting: float = Field(
        0.999,
        gt=0.0,
        le=1.0,
        description="ridge_* forgetting factor per outcome of an arm (memory ≈ 1/(1−γ) outcomes); cold starts only, "
        "a model artefact keeps the factor it was trained with",
    )
    # --- end utility ---

    decision_ttl_s: float = Field(3600.0, gt=0.0, description="How long a decision accepts its outcome, s")
    max_decisions: int = Field(1_000_000, ge=1, description="In-process store capacity (decisions)")

    # --- SSMP server selection (issue 4): edgepath.engines.ssmp ---
    ssmp_mice_threshold_bytes: int = Field(
        1_048_576, ge=0, description="Transfers smaller than this are mice flows, bytes (paper: < 1 MB)"
    )
    ssmp_alpha: float = Field(0.5, ge=0.0, le=1.0, description="EWMA weight of a new server score Q (SSMP Eq. 3)")
    ssmp_stale_age_s: float = Field(
        600.0, gt=0.0, description="A server not measured for longer than this is flagged for probing, s"
    )
    ssmp_max_servers: int = Field(100_000, ge=1, description="In-process store capacity (server scores)")
    # --- end SSMP ---

    # --- MLPM scheduler weights (issue 3): see edgepath.engines.mlpm ---
    mlpm_window: int = Field(20, ge=1, le=64, description="Samples per feature in MLPM's slope (paper: 10-20)")
    mlpm_horizon_s: float = Field(1.0, ge=0.0, le=600.0, description="MLPM forecast horizon, s")
    mlpm_gain: float = Field(8.0, gt=0.0, le=1000.0, description="Scale of MLPM's classifier weights w")
    mlpm_bias: float | None = Field(
        None, ge=-1000.0, le=1000.0, description="MLPM classifier bias b (default: -mlpm_gain/2)"
    )
    # --- end MLPM ---

    # --- Security (issue 9): see SECURITY.md and edgepath.security -------------------------------------------
    auth_tokens_file: Path | None = Field(
        None, description="JSON file of SHA-256-hashed device tokens (`edgepath tokens add DEVICE` writes it)"
    )
    auth_jwt_key: SecretStr = Field(
        SecretStr(""), description="HS256 key for device JWTs (claims: sub = device_id, exp; admin: bool)"
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
        description="Largest request body / gRPC message, bytes (the largest valid JSON request is ~0.5 MB)",
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
        """Refuse to serve unauthenticated beyond loopback (any profile), and without auth + TLS in ``prod``."""
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file (EDGEPATH_TLS_CERT_FILE/_KEY_FILE) go together")
        if self.tls_client_ca_file is not None and not self.tls_enabled:
            raise ValueError("tls_client_ca_file (mTLS) needs tls_cert_file and tls_key_file")
        if not self.auth_enabled and not is_loopback(self.host):
            raise ValueError(
                f"refusing to listen on {self.host!r} without authentication: bind 127.0.0.1 (dev) or configure "
                "auth_tokens_file / auth_jwt_key / tls_client_ca_file (EDGEPATH_AUTH_TOKENS_FILE, "
                "EDGEPATH_AUTH_JWT_KEY, EDGEPATH_TLS_CLIENT_CA_FILE); see SECURITY.md"
            )
        if self.profile == "prod" and not (self.auth_enabled and self.tls_enabled):
            raise ValueError(
                "profile prod requires authentication (auth_tokens_file, auth_jwt_key or tls_client_ca_file) "
                "and TLS (tls_cert_file + tls_key_file); see SECURITY.md"
            )
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

    # --- warm start (issue 8): see edgepath.training.artefact ---
    model_path: Path | None = Field(
        None, description="Offline-trained primary-path artefact (models/primary-path-v1) to start from"
    )
    # --- end warm start ---

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Settings:
        """Refuse an empty HMAC key with a shared (Redis) store outside the ``dev`` profile."""
        if self.profile != "dev" and not self.store_url.startswith("memory") and not self.hmac_key.get_secret_value():
            raise ValueError("hmac_key (EDGEPATH_HMAC_KEY) must be set outside the dev profile with a shared store")
        return self


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); False for wildcards and other names."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build settings from a file, the environment and CLI overrides (None values are ignored).

    Raises
    ------
    pydantic.ValidationError
        When a value is out of range or unknown.
    """
    file_values: dict[str, Any] = {}
    if config_file is not None:
        text = config_file.read_text()
        file_values = tomllib.loads(text) if config_file.suffix == ".toml" else json.loads(text)

    class _FromFile(Settings):
        @classmethod
        def settings_customise_sources(  # type: ignore[no-untyped-def,override]
            cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
        ):
            return (init_settings, env_settings, lambda: file_values)

    cli = {k: v for k, v in overrides.items() if v is not None}
    return Settings.model_validate(_FromFile(**cli).model_dump())
