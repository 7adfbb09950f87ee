"""Service settings (pydantic-settings).

Precedence: command-line options > environment variables (``EDGEPATH_`` prefix,
e.g. ``EDGEPATH_GRPC_PORT``) > settings file (``--config FILE``, TOML/JSON/YAML
by extension is not needed: JSON or TOML) > the defaults below.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from edgepath.engines.primary_path import POLICIES


class Settings(BaseSettings):
    """All service settings, with units in the names."""

    model_config = SettingsConfigDict(env_prefix="EDGEPATH_", extra="forbid")

    host: str = Field("127.0.0.1", description="Address both servers bind")
    grpc_port: int = Field(50051, ge=0, le=65535)
    http_port: int = Field(8080, ge=0, le=65535)
    profile: Literal["dev", "prod"] = "dev"
    log_level: str = "INFO"

    policy: str = Field("active_explorer", description=f"one of {', '.join(POLICIES)}")
    seed: int = Field(0, ge=0, description="Seed of the policies' random generators")
    batch_size: int = Field(50, ge=1, description="Outcomes per online refit (paper: 50)")
    propensity_floor: float = Field(0.01, gt=0.0, le=1.0)
    reward_throughput_bps: float = Field(25e6, ge=0.0, description="Reward 1 needs throughput ≥ this, bit/s")
    reward_latency_ms: float = Field(100.0, ge=0.0, description="…and latency ≤ this, ms (if reported)")

    decision_ttl_s: float = Field(3600.0, gt=0.0, description="How long a decision accepts its outcome, s")
    max_decisions: int = Field(1_000_000, ge=1, description="In-process store capacity (decisions)")


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
        def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):  # type: ignore[no-untyped-def,override]
            return (init_settings, env_settings, lambda: file_values)

    cli = {k: v for k, v in overrides.items() if v is not None}
    return Settings.model_validate(_FromFile(**cli).model_dump())
