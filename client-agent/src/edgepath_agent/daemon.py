"""The agent daemon: collect → decide → apply → measure → report, until SIGTERM.

One :meth:`Agent.step`:

1. **collect** the radio/path context of the managed interfaces (collector/), leaving out
   those that are down or have no address other than a link-local one (collector/link.py;
   logged when one leaves or comes back); with none left the step is skipped (logged). The links and
   addresses are dumped once per step (:meth:`Agent.read_links`) and that snapshot serves the whole step:
   the link check, the path collectors, the upstream probe's source address, the applier's endpoints;
2. **decide**: ask the service (gRPC first, REST fallback, retries with backoff);
   when it is unreachable the agent *keeps the last applied configuration* and
   tries again next step;
3. **apply** the recommendation (applier/: routes for the initial subflow, MPTCP
   endpoints/limits, congestion control), journalled — after probing the path it is
   about to make primary (upstream.py); between steps the primary path's upstream is
   probed every ``upstream_check_interval_s``: a primary without connectivity is left
   for one that answers (and stays an MPTCP endpoint, as ``backup``, while that override
   lasts), and the recommended (preferred) path is restored once it answers again;
4. **measure** the outcome (meter.py): an active transfer to ``probe`` when one is
   configured (or SSMP's content download), right after the apply, attributed to the decision just applied;
   otherwise passively from the primary interface's byte counters (``/sys/class/net/IF/statistics/rx_bytes``;
   with ``netns``, rtnetlink's ``IFLA_STATS64`` read inside that namespace). The passive meter's rule: **the
   interval between two applies belongs to the decision applied at its start** (:class:`PassiveInterval`). A
   decision's interval opens when its configuration takes effect (after a successful apply) and closes right
   before the next decision is applied, if that apply succeeds (a refused recommendation leaves the
   configuration, and the interval, running), or at a clean stop; the bytes its primary interface received over
   it are that decision's outcome, reported with its ``decision_id`` by the step that closes it. So a step under
   the passive meter reports the *previous* decision's outcome, and a decision that switched the primary gets
   the throughput of the interface it switched to. With ``netns`` the probe runs in that namespace too (the
   built-in meter's socket is opened there, iperf3 under ``ip netns exec``). A probe that fails (iperf3 or the
   built-in meter cannot reach ``probe``, or it times out) is logged as a warning naming the probe target and the
   reason; that step then reports no outcome (none is made up), the failure is counted in the status record
   (``probe.failures``, ``probe.last_error``) and the next step runs as usual, the applied configuration staying
   in place;
5. **report** it; outcomes that can't be delivered are kept (bounded queue, ``max_pending_outcomes``) and
   re-sent later — the service ignores duplicates, so nothing is counted twice; one it answers ``NOT_FOUND`` (404:
   its decision is unknown, or expired with its TTL) or refuses otherwise is dropped, not retried. The queue is also
   kept in ``pending_file`` (pending.py: rewritten whenever it changes, read at start), so a restart loses none. An
   outcome must describe the interval during which its decision's configuration was in effect on the path the
   decision chose, or not be sent: none is reported by
   a dry run (``backend = "dry-run"``: its routes are unchanged; said once in the log, ``outcomes`` in the status
   record), when the upstream guard overrode the primary (at the apply, or, under the passive meter, during the
   decision's interval), for a fixed primary (no decision), or for an idle link under the passive meter (fewer
   than :data:`PASSIVE_MIN_BYTES` bytes or an interval shorter than :data:`PASSIVE_MIN_S`, :func:`idle_reading`);
   the reason is logged at DEBUG and kept as the status record's ``no_outcome_reason``. A transfer
   the built-in meter measured with Łuczak et al.'s metrics (its server's ``paper_metrics``
   trailer) carries them as the outcome's ``congestion_measurement``, with the algorithm in
   effect (:func:`congestion_measurement`), which the service counts towards its congestion advice.

On SIGTERM/SIGINT (or after ``--steps``) the loop ends, the passive meter's last interval is closed and
reported (queued, and kept in ``pending_file`` for the next start, while the service is unreachable; none when
idle) and, with ``restore_on_exit``, the journal's snapshot is restored. Configuration precedence
(pydantic-settings sources): command line > ``EDGEPATH_AGENT_*`` environment variables > file (TOML/JSON) > defaults;
client-agent/agent.toml.example lists every setting with its default. An ``EDGEPATH_AGENT_*``
variable that names no setting is warned about at start (:func:`warn_unknown_env`).
"""

from __future__ import annotations

import difflib
import importlib.util
import ipaddress
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from edgepath_agent.applier import (
    Applied,
    Applier,
    ApplierConfig,
    ApplyError,
    CommandBackend,
    DryRunBackend,
    Journal,
    RejectedRecommendation,
    Restored,
    RestoreIncomplete,
    RouteMetricConflict,
)
from edgepath_agent.client import (
    FailoverClient,
    ServiceClient,
    ServiceError,
    check_service_url,
    connect_failover,
    is_transient,
)
from edgepath_agent.collector import (
    Collector,
    DiagPathCollector,
    KernelCapabilities,
    KernelCollector,
    LinkAwareCollector,
    LinkReader,
    LinkSnapshot,
    ModemCollector,
    Nl80211WifiCollector,
    PathCollector,
    StaticCollector,
    WifiCollector,
    interface_counters,
    ipv4_addresses,
    merge_contexts,
    unusable_reason,
)
from edgepath_agent.collector.link import DOWN, GONE, NO_ADDRESS
from edgepath_agent.iperf import Iperf3, IperfMissing, detect_iperf3, iperf3_transfer
from edgepath_agent.journal_log import sd_notify, watchdog_interval_s
from edgepath_agent.messages import CongestionMeasurement, OutcomeAck, PrimaryPath, Recommendation
from edgepath_agent.meter import TransferResult, outcome_from, transfer
from edgepath_agent.netmanager import NetworkConflict, check_coexistence
from edgepath_agent.pending import DEFAULT_PENDING_FILE, load_pending, write_pending
from edgepath_agent.safety import ClientCredentials, check_key_file, check_tls_files
from edgepath_agent.ssmp import SsmpStep
from edgepath_agent.status import APPLIED, DEFAULT_STATUS_FILE, PARTLY_RESTORED, RESTORED, now_ms, write_status
from edgepath_agent.upstream import PrimaryGuard, UpstreamProbe, parse_target, probe_upstream

log = logging.getLogger(__name__)


#: The settings file :func:`load_config` reads (a context variable, so concurrent loads don't mix files).
_CONFIG_FILE: ContextVar[Path | None] = ContextVar("edgepath_agent_config_file", default=None)


class _Layered(PydanticBaseSettingsSource):
    """pydantic-settings sources, highest first, combined per setting (the higher one replaces a whole value).

    pydantic-settings deep-merges mappings across sources by default, which would add
    the file's ``interfaces`` to those given in the environment; a device's managed
    interfaces must come from one place.
    """

    def __init__(self, settings_cls: type[BaseSettings], sources: tuple[PydanticBaseSettingsSource, ...]) -> None:
        super().__init__(settings_cls)
        self.sources = sources

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover - unused
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for source in reversed(self.sources):
            values.update(source())
        return values


def history_columns(
    interface: str, rtt: Iterable[Mapping[str, float]], throughput: Iterable[Mapping[str, float]]
) -> dict[str, Any]:
    """One ``subflow_histories`` entry with its samples as columns (``rtt_t_ms``/``rtt_ms``,
    ``throughput_t_ms``/``throughput_bps``: times in ms on this device's clock, RTT in ms, throughput in bit/s): the
    service's columnar form, which needs no object per sample on either transport (issue 16). ``rtt`` and
    ``throughput`` hold ``{"t_ms", "rtt_ms"}`` / ``{"t_ms", "throughput_bps"}`` samples; an empty one is left out."""
    entry: dict[str, Any] = {"interface": interface}
    for samples, times, key in ((rtt, "rtt_t_ms", "rtt_ms"), (throughput, "throughput_t_ms", "throughput_bps")):
        rows = list(samples)
        if rows:
            entry[times] = [s["t_ms"] for s in rows]
            entry[key] = [s[key] for s in rows]
    return entry


#: ``InterfaceContext.access_type`` of a managed interface (REST spelling).
AccessType = Literal["WIFI", "LTE", "NR", "ETHERNET"]
#: MPTCP endpoint flags the agent may set (``ip mptcp endpoint add … FLAGS``).
EndpointFlag = Literal["signal", "subflow", "laminar", "backup", "fullmesh"]


def _default_interfaces() -> dict[str, AccessType]:
    return {"wlan0": "WIFI", "wwan0": "LTE"}


def _default_endpoint_flags() -> list[EndpointFlag]:
    return ["subflow"]


class AgentConfig(BaseSettings):
    """Agent settings (units in the names).

    Precedence, highest first: values passed in (the command line), ``EDGEPATH_AGENT_<NAME>``
    environment variables (lists and mappings as JSON, e.g.
    ``EDGEPATH_AGENT_INTERFACES='{"wlan0": "WIFI"}'``), the settings file given to
    :func:`load_config` (TOML or JSON), these defaults. Unknown keys are refused.
    """

    model_config = SettingsConfigDict(env_prefix="EDGEPATH_AGENT_", extra="forbid")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = _CONFIG_FILE.get()
        if path is None:
            return (_Layered(settings_cls, (init_settings, env_settings)),)
        file_source: PydanticBaseSettingsSource = (
            JsonConfigSettingsSource(settings_cls, json_file=path)
            if path.suffix == ".json"
            else TomlConfigSettingsSource(settings_cls, toml_file=path)
        )
        return (_Layered(settings_cls, (init_settings, env_settings, file_source)),)

    device_id: str = Field(default_factory=socket.gethostname, min_length=1, max_length=128)
    service: list[str] = Field(
        default_factory=lambda: ["grpc://127.0.0.1:50051", "http://127.0.0.1:8080"],
        min_length=1,
        description="Service URLs in order of preference (gRPC first, REST fallback)",
    )
    interfaces: dict[str, AccessType] = Field(default_factory=_default_interfaces, min_length=1)
    interval_s: float = Field(default=30.0, gt=0)
    probe: str | None = Field(default=None, description="HOST:PORT of a transfer server for active measurements")
    probe_tool: Literal["iperf3", "builtin"] = Field(
        default="iperf3",
        description="iperf3: an iperf3 server at probe (iperf.py; MPTCP via --mptcp or mptcpize); builtin: the "
        "agent's own meter (meter.py TransferServer at probe; the testbed, or devices without iperf3)",
    )
    probe_bytes: int = Field(default=256 * 1024, ge=1)
    timeout_s: float = Field(default=2.0, gt=0, description="Per-call deadline, s")
    attempts: int = Field(default=3, ge=1, description="Tries per transport")
    backend: Literal["command", "netlink", "networkmanager", "dry-run"] = Field(
        default="command",
        description="ip/sysctl commands, netlink (pyroute2), networkmanager (D-Bus, where NetworkManager manages "
        "the interfaces), or a dry run that prints the commands",
    )
    netns: str | None = None
    journal: Path = Path("/var/lib/edgepath-agent/journal.json")
    pending_file: Path | None = Field(
        default=DEFAULT_PENDING_FILE,
        description="Outcomes the service has not received yet, kept across restarts (pending.py); "
        'None or "": in memory only',
    )
    restore_on_exit: bool = True
    cc_profile: Literal["throughput", "latency", "coupled", "default"] = "default"
    manage_cc: bool = True
    endpoint_flags: list[EndpointFlag] = Field(default_factory=_default_endpoint_flags)
    laminar: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Add the laminar endpoint flag (Linux >= 6.18): addresses the server announces are reached "
        "from an interface of their own, not from the primary path's; auto = where kernel and backend support it",
    )
    limits_subflows: int = Field(default=2, ge=0, le=8)
    limits_add_addr_accepted: int = Field(default=2, ge=0, le=8)
    primary_metric: int = Field(default=10, ge=0)
    secondary_metric: int = Field(default=20, ge=0)
    backup_weight_threshold: float = Field(default=0.2, ge=0.0, le=1.0)
    follow_mlpm: bool = Field(
        default=False,
        description="Apply MLPM's prioritised subflow (initial subflow) and its low weights as backup endpoints "
        "instead of the ATSSS steering rule (applier.core.mlpm_subflow_set)",
    )
    max_pending_outcomes: int = Field(
        default=1000, ge=0, description="Outcomes kept while the service is unreachable (0: none is kept)"
    )
    application_profile: Literal["UNSPECIFIED", "STREAMING", "BULK", "LOSS_SENSITIVE", "INTERACTIVE"] = Field(
        default="UNSPECIFIED", description="What the applications need (selects MLPM feature weights and the CC metric)"
    )
    history_samples: int = Field(default=20, ge=0, le=64, description="Measured samples per interface sent for MLPM")
    modem_signal_setup_s: int = Field(
        default=10,
        ge=0,
        le=3600,
        description="Enable ModemManager extended signal polling at this period, s (0: never)",
    )
    ca_file: Path | None = Field(
        default=None, description="CA bundle that signed the service's certificate (TLS verification)"
    )
    cert_file: Path | None = Field(default=None, description="Device certificate for mTLS (with key_file)")
    key_file: Path | None = Field(
        default=None, description="Device private key for mTLS; must not be readable by others"
    )
    token: str | None = Field(
        default=None, min_length=1, description="Bearer token for the service (prefer token_file)"
    )
    token_file: Path | None = Field(
        default=None, description="File holding the bearer token; must not be readable by others"
    )
    upstream_check: bool = Field(
        default=True, description="Probe a path before making it primary and keep probing it (upstream.py)"
    )
    upstream_target: str | None = Field(
        default=None, description="HOST:PORT the upstream probes connect to (default: the first service URL's)"
    )
    upstream_timeout_s: float = Field(default=1.0, gt=0, description="Per-probe timeout, s")
    upstream_check_interval_s: float = Field(
        default=2.0, gt=0, description="Seconds between probes of the primary path"
    )
    upstream_failures: int = Field(
        default=2, ge=1, description="Failed probes in a row before leaving the primary path"
    )
    upstream_recoveries: int = Field(
        default=2, ge=1, description="Answered probes in a row before restoring the preferred path"
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["auto", "json", "text"] = Field(
        default="auto", description="JSON lines (journald-friendly) or text; auto: JSON when stderr is the journal"
    )
    status_file: Path | None = Field(
        default=DEFAULT_STATUS_FILE, description="JSON status record rewritten after every step (read by `status`)"
    )
    # SSMP (issue 20, edgepath_agent.ssmp): the content fetched each step from the server the service picks.
    content: str | None = Field(
        default=None, description="HOST:PORT of the content to fetch with SSMP (meter protocol)"
    )
    content_bytes: int = Field(default=1_048_576, ge=1, description="Bytes fetched per step with SSMP")
    content_dns: dict[str, str] = Field(
        default_factory=dict,
        description="Managed interface → IPv4 address of its network's DNS server (SSMP); other keys are refused",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level_case(cls, value: Any) -> Any:
        """``log_level`` is read without regard to case or surrounding blanks (``"debug"``), as ``--log-level debug``
        is; anything else is left to the type check, which names the setting."""
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("endpoint_flags")
    @classmethod
    def _endpoint_flags(cls, value: list[EndpointFlag]) -> list[EndpointFlag]:
        """Flags the kernel refuses together are refused here, naming the setting: ``signal`` with ``fullmesh``
        (Linux net/mptcp/pm_netlink.c: "flags mustn't have both signal and fullmesh") used to pass, and then every
        step's endpoint change failed.

        Raises
        ------
        ValueError
            For ``signal`` together with ``fullmesh``.
        """
        if "signal" in value and "fullmesh" in value:
            raise ValueError(
                "signal and fullmesh cannot go together (the kernel refuses an endpoint with both): keep one, e.g. "
                '["subflow", "fullmesh"] or ["signal"]'
            )
        return value

    @model_validator(mode="after")
    def _metrics_order(self) -> AgentConfig:
        """``primary_metric`` must be below ``secondary_metric``: the primary path's default route is the one with
        the lowest metric (the others get ``secondary_metric``, +1 each), so a primary metric at or above it left
        the recommended path silently not the default route.

        Raises
        ------
        ValueError
            Naming both settings and their values.
        """
        if self.primary_metric >= self.secondary_metric:
            raise ValueError(
                f"primary_metric ({self.primary_metric}) must be below secondary_metric ({self.secondary_metric}): "
                "the lowest metric is the default route, so the recommended primary path would not be it"
            )
        return self

    @field_validator("pending_file", mode="before")
    @classmethod
    def _no_pending_file(cls, value: Any) -> Any:
        """An empty ``pending_file`` (``pending_file = ""``: TOML has no null; ``EDGEPATH_AGENT_PENDING_FILE=``)
        turns the file off, as ``None`` does (JSON ``null``)."""
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("interfaces", mode="before")
    @classmethod
    def _access_types(cls, value: Any) -> Any:
        """Access types are read without regard to case or surrounding blanks (``wlan0 = "WiFi"``), as
        ``--interface wlan0=wifi`` is (:func:`~edgepath_agent.collector.parse_interface_map`); anything else is
        left to the type check, which names the setting.

        Raises
        ------
        ValueError
            Naming ``interfaces.<key>`` when the key is another setting: in a TOML file a key written below an
            ``[interfaces]`` header belongs to that table (``interval_s = 5`` became an interface whose access
            type was 5); the message says to move it above the table, or to write the table inline.
        """
        if isinstance(value, Mapping):
            for key in value:
                if key in cls.model_fields:
                    raise ValueError(
                        f"interfaces.{key}: {key} is a setting, and in a TOML file a key written below the "
                        f"[interfaces] header belongs to that table: move it above the table, or write the table "
                        f'inline (interfaces = {{ wlan0 = "WIFI", wwan0 = "LTE" }})'
                    )
            return {k: v.strip().upper() if isinstance(v, str) else v for k, v in value.items()}
        return value

    @field_validator("content_dns", mode="before")
    @classmethod
    def _content_dns(cls, value: Any, info: ValidationInfo) -> Any:
        """``content_dns`` maps managed interfaces (``interfaces``) to IPv4 addresses, nothing else.

        A settings file ending with the ``[content_dns]`` table used to swallow every key appended after it: a
        ``probe = "…"`` added at the end became ``content_dns.probe`` and was ignored without a word. Each key
        must be a managed interface and each value the IPv4 address of its network's DNS server: SSMP asks it
        from a UDP socket of the interface's IPv4 address (:func:`~edgepath_agent.ssmp.resolve`), so an IPv6
        server could never answer. Values come back in their canonical form.

        Raises
        ------
        ValueError
            Naming ``content_dns.<key>``: a key that is no managed interface (it may be a setting written
            below the table, where it belongs above it), or a value that is no IPv4 address.
        """
        if not isinstance(value, Mapping):
            return value  # the type check names it
        managed = info.data.get("interfaces")  # absent when interfaces itself is invalid (reported on its own)
        out: dict[Any, Any] = {}
        for key, server in value.items():
            if managed is not None and key not in managed:
                why = (
                    f"{key} is a setting, and in a TOML file a key written below the [content_dns] header belongs "
                    "to that table: move it above the table"
                    if key in cls.model_fields
                    else "content_dns maps managed interfaces to their DNS servers (a setting written below the "
                    "[content_dns] header belongs to that table: move it above the table)"
                )
                raise ValueError(
                    f"content_dns.{key} is not a managed interface ({', '.join(managed) or 'none'}): {why}"
                )
            try:
                if not isinstance(server, str):  # ip_address(5) would be 0.0.0.5
                    raise ValueError(server)
                address = ipaddress.ip_address(server.strip())
            except ValueError:
                raise ValueError(
                    f"content_dns.{key} = {server!r} is not an IPv4 address: give the IPv4 address of the DNS server "
                    f'of {key}\'s network (e.g. "192.168.1.1")'
                ) from None
            if address.version != 4:
                raise ValueError(
                    f"content_dns.{key} = {server!r} is an IPv6 address: SSMP asks the DNS server from the "
                    f"interface's IPv4 address, give the network's IPv4 DNS server"
                )
            out[key] = str(address)
        return out

    @field_validator("probe", "upstream_target", "content")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        """``HOST:PORT`` settings are checked where they are given, naming the setting: a ``probe`` without its
        port used to end the daemon at its first measurement (:func:`~edgepath_agent.upstream.parse_target`)."""
        if value is not None:
            parse_target(value)
        return value

    @field_validator("service", mode="before")
    @classmethod
    def _one_service_url(cls, value: Any) -> Any:
        """One URL given as a string (``service = "grpc://edge:50051"``) is a list of one: it was refused as "Input
        should be a valid list", which did not say the form."""
        return [value] if isinstance(value, str) else value

    @field_validator("service")
    @classmethod
    def _service_urls(cls, value: list[str]) -> list[str]:
        """Service URLs are checked where they are given, naming the setting: a mistyped scheme (``grcp://``,
        ``htp://``, none) used to end the daemon with a traceback when it built its client
        (:func:`~edgepath_agent.client.check_service_url`, the check :func:`~edgepath_agent.client.connect` uses)."""
        for url in value:
            check_service_url(url)
        return value

    def credentials(self) -> ClientCredentials | None:
        """TLS/token settings for the service client, ``None`` when none are configured.

        The TLS files are loaded here (:func:`~edgepath_agent.safety.check_tls_files`), so ``run`` refuses bad ones at
        start (exit 78) instead of failing each call.

        Raises
        ------
        ValueError
            Naming the setting: when a file is missing or cannot be read, ``cert_file``/``key_file`` come alone, both
            ``token`` and ``token_file`` are set, a bearer token would go in cleartext
            (:meth:`cleartext_service_urls`), ``ca_file``/``cert_file`` hold no PEM certificate, or ``key_file`` no
            usable key or not the certificate's.
        PermissionError
            When ``key_file`` or ``token_file`` is readable by group/others.
        """
        if not any((self.ca_file, self.cert_file, self.key_file, self.token, self.token_file)):
            return None
        cleartext = self.cleartext_service_urls() if (self.token or self.token_file) else []
        if cleartext:
            setting = "token_file" if self.token_file else "token"
            raise ValueError(
                f"{setting}: the bearer token would be sent in cleartext to {', '.join(cleartext)}: use grpcs:// or "
                "https:// for a service on another host (plain grpc:// and http:// carry a token to a loopback "
                "address only)"
            )
        self.check_credential_files(("ca_file", "cert_file", "key_file", "token_file"))
        if self.token and self.token_file:
            raise ValueError("give token or token_file, not both")
        token = self.token
        if self.token_file is not None:
            secret = check_key_file(self.token_file, "token_file")  # accessible by group/others: PermissionError
            try:
                token = secret.read_text().strip()
            except (OSError, UnicodeDecodeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise ValueError(
                    f"token_file: {self.token_file} cannot be read ({why}): make it a text file owned by the user "
                    "the agent runs as (edgepath-agent), mode 600"
                ) from None
            if not token:
                raise ValueError(f"token_file: {self.token_file} is empty")
        credentials = ClientCredentials(
            ca_file=self.ca_file, cert_file=self.cert_file, key_file=self.key_file, token=token
        )
        check_tls_files(self.ca_file, self.cert_file, self.key_file)
        return credentials

    def check_credential_files(self, names: Iterable[str]) -> None:
        """Each of the settings ``names`` that is set names a regular file this process can reach.

        Raises
        ------
        ValueError
            Naming the setting and the file: it does not exist, is no regular file, or a directory on its way
            cannot be searched (``Permission denied``, with what to do).
        """
        for name in names:
            path = getattr(self, name)
            if path is None:
                continue
            try:
                regular = path.is_file()
            except OSError as exc:
                raise ValueError(
                    f"{name}: {path} cannot be reached ({exc.strerror or exc}): make it and its directories "
                    "accessible to the user the agent runs as (edgepath-agent)"
                ) from None
            if not regular:
                raise ValueError(f"{name}: {path} is not a readable file")

    def cleartext_service_urls(self) -> list[str]:
        """The ``service`` URLs without TLS (``grpc://``, ``http://``) whose host is not a loopback address: a bearer
        token sent there crosses the network in cleartext (the REST failover would send it as readily as gRPC's
        metadata), so :meth:`credentials` refuses a token with any of them."""
        out = []
        for url in self.service:
            parsed = urlparse(url)
            if parsed.scheme in ("grpc", "http") and not _is_loopback(parsed.hostname or ""):
                out.append(url)
        return out

    def upstream_target_addr(self) -> tuple[str, int] | None:
        """Where upstream probes go: ``upstream_target``, else the first service URL with a port; ``None`` if neither.

        Raises
        ------
        ValueError
            For a malformed ``upstream_target``.
        """
        if self.upstream_target:
            return parse_target(self.upstream_target)
        for url in self.service:
            parsed = urlparse(url)
            if parsed.hostname and parsed.port:
                return parsed.hostname, parsed.port
        return None

    def applier_config(self) -> ApplierConfig:
        return ApplierConfig(
            interfaces=tuple(self.interfaces),
            endpoint_flags=tuple(self.endpoint_flags),
            limits={"subflows": self.limits_subflows, "add_addr_accepted": self.limits_add_addr_accepted},
            primary_metric=self.primary_metric,
            secondary_metric=self.secondary_metric,
            backup_weight_threshold=self.backup_weight_threshold,
            cc_profile=self.cc_profile,
            manage_cc=self.manage_cc,
            follow_mlpm=self.follow_mlpm,
        )


def load_config(path: Path | None = None, **cli: Any) -> AgentConfig:
    """Settings from ``cli`` (non-``None`` values) > environment > the file at ``path`` > defaults.

    The file is JSON when its name ends in ``.json``, TOML otherwise (``agent.toml``,
    ``agent.toml.example``).

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    pydantic.ValidationError
        Naming the offending field (also for unknown keys in the file).
    json.JSONDecodeError, tomllib.TOMLDecodeError
        When the file is not valid JSON or TOML.
    ValueError
        When a JSON file holds something else than an object (``[1]``: it used to end in a ``TypeError``).
    """
    if path is not None and not path.is_file():
        raise FileNotFoundError(f"settings file {path} does not exist")
    if path is not None and path.suffix == ".json":
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(
                f"settings file {path} holds a JSON {type(data).__name__}, not an object of settings "
                '(e.g. {"service": ["grpc://127.0.0.1:50051"]})'
            )
    token = _CONFIG_FILE.set(path)
    try:
        return AgentConfig(**{k: v for k, v in cli.items() if v is not None})
    finally:
        _CONFIG_FILE.reset(token)


def unknown_env_settings(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """``EDGEPATH_AGENT_*`` variables in ``environ`` (default: ``os.environ``) that name no setting.

    pydantic-settings reads only the variables of known settings, so a misspelt one
    (``EDGEPATH_AGENT_INTERFCES``) was silently ignored and its default used. The prefix is matched
    without regard to case, as the settings are.

    Returns
    -------
    list of (str, str or None)
        Each such variable (sorted) and the valid name closest to it (:func:`difflib.get_close_matches`),
        or ``None`` when none is close.
    """
    environ = os.environ if environ is None else environ
    prefix = str(AgentConfig.model_config.get("env_prefix") or "").upper()
    out: list[tuple[str, str | None]] = []
    for var in sorted(environ):
        upper = var.upper()
        if upper.startswith(prefix) and upper[len(prefix) :].lower() not in AgentConfig.model_fields:
            close = closest_setting(upper[len(prefix) :])  # the name alone: not the prefix
            out.append((var, prefix + close.upper() if close else None))
    return out


def closest_setting(name: str) -> str | None:
    """The setting whose name is closest to ``name`` (any case; :func:`difflib.get_close_matches`), or None when
    none is close: the "did you mean" of a misspelt ``EDGEPATH_AGENT_*`` variable or settings-file key."""
    close = difflib.get_close_matches(name.lower(), sorted(AgentConfig.model_fields), n=1)
    return close[0] if close else None


def unknown_env_message(var: str, close: str | None) -> str:
    """The warning for ``var``, an ``EDGEPATH_AGENT_*`` variable that names no setting, with ``close``, the valid
    name closest to it or ``None`` (a pair of :func:`unknown_env_settings`)."""
    hint = f"; did you mean {close}?" if close else f" (settings: {AgentConfig.model_config.get('env_prefix')}<NAME>)"
    return f"environment variable {var} matches no setting and is ignored{hint}"


def warn_unknown_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """Log one warning per ``EDGEPATH_AGENT_*`` variable that names no setting (:func:`unknown_env_settings`),
    with the closest valid name; returns those variables. ``run`` calls it once, at start (``status`` prints
    the same :func:`unknown_env_message` lines to stderr)."""
    found = unknown_env_settings(environ)
    for var, close in found:
        log.warning("%s", unknown_env_message(var, close), extra={"variable": var})
    return [var for var, _ in found]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: The passive meter's smallest reading that is reported as an outcome, bytes received on the primary interface
#: over the step: below it the link was idle (ARP/ND, keepalives, NTP), and its bit rate says nothing of the path.
PASSIVE_MIN_BYTES = 64 * 1024
#: The passive meter's shortest reading that is reported as an outcome, s (steps back to back, e.g. ``--steps``).
PASSIVE_MIN_S = 1.0


def idle_reading(result: TransferResult) -> str | None:
    """Why a passive-meter reading (``result``: bytes received on the primary interface over ``completion_s``
    seconds) is no outcome, or ``None`` when it is one.

    The passive meter counts the traffic the device carried, not what the path could carry: fewer than
    :data:`PASSIVE_MIN_BYTES` bytes (an idle link; 0 bytes included) or fewer than :data:`PASSIVE_MIN_S` seconds
    measure no throughput, and reporting them as a 0 Mbit/s outcome would tell the service's bandit that the
    path the decision chose was bad. Such a reading is neither reported nor kept in the history sent for MLPM.
    """
    if result.bytes < PASSIVE_MIN_BYTES or result.completion_s < PASSIVE_MIN_S:
        return (
            f"passive meter: {result.bytes} bytes in {result.completion_s:.1f} s (an outcome needs at least "
            f"{PASSIVE_MIN_BYTES} bytes over at least {PASSIVE_MIN_S:g} s: the link was idle)"
        )
    return None


@dataclass(frozen=True)
class PassiveInterval:
    """Under the passive meter, the interval during which one decision's configuration is in effect: from the apply
    that put it in effect to the next successful apply (or a clean stop), which closes it (:meth:`Agent.step`,
    :meth:`Agent.close_at_stop`). Its reading (:meth:`Agent.interval_reading`: bytes its interface received over it)
    is that decision's outcome, and no other's.

    Attributes
    ----------
    decision_id
        The decision applied at its start; ``""`` for a fixed primary (``step(primary=…)``): nothing to report on.
    interface
        The primary interface that carried it (the one applied: the upstream guard's when it overrode the decision's).
    rx_bytes
        That interface's received-bytes counter at the start, bytes; ``None`` when it had none.
    started_s
        :func:`time.monotonic` at the start, s.
    override
        Why the upstream guard overrode the decision's primary when it was applied (``None``: it did not).
    interrupted
        Why it stopped being the decision's configuration before it was closed: the upstream guard switched the
        primary during it, or the configuration was rolled back (``None``: neither).
    dry_run
        The backend was a dry run (``backend = "dry-run"``): its routes were not changed.
    """

    decision_id: str
    interface: str
    rx_bytes: int | None
    started_s: float
    override: str | None = None
    interrupted: str | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class ClosedInterval:
    """A :class:`PassiveInterval` closed: its ``reading`` (``None`` when there is none: no byte counter, a failed
    read), the ``outcome`` reported (or queued: ``ack`` is then ``None``) with ``interval.decision_id``, and
    ``no_outcome``, why none was (``outcome`` is then ``None``)."""

    interval: PassiveInterval
    reading: TransferResult | None
    outcome: dict[str, Any] | None
    ack: OutcomeAck | None
    no_outcome: str | None
    #: Why its counter could not be read at the end (``netns`` could not be entered, rtnetlink failed), if so.
    probe_error: str | None = None


#: :meth:`Agent._end_reading`: (reading, why there is none, the ``OSError`` the read raised).
_EndReading = tuple[TransferResult | None, str | None, OSError | None]


def _log_no_outcome(decision_id: str | None, interface: str, reason: str | None) -> None:
    """Log, at DEBUG, why the decision ``decision_id`` (applied on ``interface``) gets no outcome."""
    log.debug(
        "no outcome for decision %s: %s",
        decision_id or "-",
        reason,
        extra={"decision_id": decision_id, "interface": interface, "reason": reason},
    )


@dataclass
class StepResult:
    """What one step did.

    ``error``: why the step kept the last applied configuration (service unreachable, recommendation
    refused); ``probe_error``: why the probe (or the passive meter's counter) measured nothing (``measurement``
    and ``outcome`` are then ``None``).

    ``outcome`` is the outcome this step reported (or queued: ``ack``, the service's answer, is then ``None``), and
    ``measurement`` what it was computed from (or would have been). With an active meter (``probe``, an injected
    ``measure``, SSMP's content transfer) both describe this step's decision, measured right after it was applied.
    Under the passive meter they describe the **previous** decision (``outcome["decision_id"]`` says which): right
    before applying its own decision the step closed the previous one's interval (``closed``,
    :class:`PassiveInterval`), and this step's decision is reported by the step that closes its interval (or by the
    stop). Where SSMP's transfer measured this step's decision while the passive meter closed the previous one's
    interval, ``outcome`` is the transfer's and ``closed.outcome`` the interval's.
    """

    request: dict[str, Any]
    recommendation: Recommendation | None
    applied: Applied | None
    measurement: TransferResult | None
    outcome: dict[str, Any] | None
    ack: OutcomeAck | None
    kept_last: bool
    error: str | None = None
    probe_error: str | None = None
    #: No managed interface could carry a path (all down or without an address): nothing was asked or applied.
    skipped: bool = False
    #: Why a step that applied a recommendation reported no outcome (``outcome`` is then ``None``): a dry run, an
    #: idle link under the passive meter, no earlier interval to close, a failed probe, the upstream guard's
    #: override, ... Under the passive meter it is about the decision whose interval the step closed (named).
    no_outcome: str | None = None
    #: Under the passive meter, the previous decision's interval this step closed (``None``: none was open, or an
    #: active meter).
    closed: ClosedInterval | None = None


#: When an interface left out of the request is reported again (log messages), by :func:`unusable_reason`.
_REPORTED_AGAIN_WHEN = {GONE: "it exists again", DOWN: "it is up with an address", NO_ADDRESS: "it has one"}


#: Refusals of who this device is (gRPC status names, HTTP statuses): configuration errors, not worth a retry.
CREDENTIAL_CODES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED", 401, 403})
#: The service's answer to an outcome whose decision it does not know, or no longer (its TTL passed): dropped.
EXPIRED_CODES = frozenset({"NOT_FOUND", 404})


class CredentialsRefused(RuntimeError):
    """The service refused this device's credentials (token, certificate or ``device_id``); the message names
    the refusal and the settings to check. :func:`run_daemon` restores the state as on a normal stop first."""


def rx_bytes(ifname: str, sys_class_net: Path = Path("/sys/class/net"), netns: str | None = None) -> int | None:
    """Received-bytes counter of ``ifname``, bytes; ``None`` if there is no such interface.

    Here: ``statistics/rx_bytes`` under ``sys_class_net``. In network namespace ``netns``: rtnetlink's
    ``IFLA_STATS64`` read from inside it (:func:`~edgepath_agent.collector.link.interface_counters`), since
    ``/sys/class/net`` lists the devices of the namespace sysfs was mounted in (the host's), not the reader's.

    Raises
    ------
    OSError
        When ``netns`` cannot be entered or rtnetlink fails there.
    """
    if netns is not None:
        counters = interface_counters(ifname, netns)
        return None if counters is None else counters.rx_bytes
    try:
        return int((sys_class_net / ifname / "statistics" / "rx_bytes").read_text())
    except (OSError, ValueError):
        return None


def flags_changed(applied: Sequence[str], wanted: Sequence[str]) -> str:
    """What changes between the paths demoted to ``backup`` for the upstream guard (``applied``) and those it now
    wants demoted (``wanted``), as a log line's reason; ``""`` when nothing does."""
    lost = [n for n in wanted if n not in applied]
    back = [n for n in applied if n not in wanted]
    parts = [f"{n} has no upstream connectivity: backup" for n in lost]
    parts += [f"{n} answers again: the recommendation's flags" for n in back]
    return "; ".join(parts)


class Agent:
    """collect → decide → apply → measure → report (see module docstring).

    Parameters
    ----------
    config
        Agent settings.
    client
        Service client (usually a :class:`~edgepath_agent.client.FailoverClient`).
    applier
        Applier with its backend and journal.
    collectors
        Context sources in priority order.
    measure
        ``primary interface → TransferResult or None``; defaults to the probe transfer
        (when ``config.probe``) or the passive counter meter. An ``OSError`` it raises
        (:class:`~edgepath_agent.iperf.IperfFailed`, a refused connection, a socket timeout)
        is a failed probe: :meth:`step` logs and counts it and reports no outcome.
    guard
        Upstream-connectivity guard of the primary path (:mod:`edgepath_agent.upstream`);
        by default built from ``upstream_*`` settings (none when ``upstream_check`` is off
        or there is no probe target).
    links
        Reads the interfaces' link state (a :class:`~edgepath_agent.collector.LinkReader`, which
        :func:`build_agent` passes): an interface that is down or has no address other than a
        link-local one is left out of the request (:meth:`reportable`). ``None``: every interface
        the collectors describe is reported. It is called once per step (:meth:`read_links`), and that
        snapshot serves the whole step: the link check, the path collectors' address map
        (:class:`~edgepath_agent.collector.LinkAwareCollector`), the upstream probe's source address and
        the applier's endpoint addresses, so a step dumps links and addresses once.
    """

    def __init__(
        self,
        config: AgentConfig,
        client: ServiceClient,
        applier: Applier,
        collectors: Sequence[Collector],
        measure: Callable[[str], TransferResult | None] | None = None,
        guard: PrimaryGuard | None = None,
        ssmp: SsmpStep | None = None,
        links: Callable[[], LinkSnapshot] | None = None,
    ) -> None:
        self.config = config
        self.links = links
        #: The link snapshot of the step running now (:meth:`step`; ``None`` between steps, or when it could not be
        #: read): every reader of links or addresses in the step uses it instead of dumping them again.
        self._step_links: LinkSnapshot | None = None
        #: Managed interfaces left out of the last request, with why (``"has no address"``, ``"is down"``, …).
        self.unreported: dict[str, str] = {}
        self._links_error: str | None = None
        self._skipping = False
        #: SSMP (issue 20): content block per request, download from the pick (``config.content``).
        self.ssmp = ssmp
        self.client = client
        self.applier = applier
        self.collectors = list(collectors)
        self.iperf3: Iperf3 | None = None
        if measure is None and config.probe and config.probe_tool == "iperf3":
            self.iperf3 = _require_iperf3()
        self.measure = measure or self._default_measure
        #: Outcomes come from the passive meter (no probe, no ``measure`` given): a decision's outcome is the reading
        #: of its interval (:class:`PassiveInterval`), reported when the next decision is applied; idle readings are
        #: not outcomes.
        self._passive = measure is None and not config.probe
        #: Under the passive meter, the interval of the configuration in effect now (``None``: none is measured).
        self.interval: PassiveInterval | None = None
        #: Why the default meter measured nothing (set when it returns ``None``).
        self._unmeasured: str | None = None
        #: Why this agent reports no outcome at all (``"dry run"``), ``None`` when it reports them.
        self.outcomes_off: str | None = "dry run" if config.backend == "dry-run" else None
        #: Why the last step that applied a recommendation reported no outcome; ``None`` when it reported one.
        self.no_outcome_reason: str | None = None
        if self.outcomes_off is not None:
            log.info(
                "dry run: no outcome is reported to the service (measured on routes the dry run did not change, "
                "an outcome would train the wrong arm)"
            )
        #: ``max_pending_outcomes = 0`` keeps none: an outcome the service did not receive is dropped (logged).
        self.pending: deque[dict[str, Any]] = deque(maxlen=config.max_pending_outcomes)
        #: Where :attr:`pending` is kept across restarts (``pending_file``; pending.py); ``None``: in memory only
        #: (unset, or a dry run, which reports no outcome and keeps no file).
        self.pending_file: Path | None = config.pending_file if self.outcomes_off is None else None
        #: :attr:`pending` changed since ``pending_file`` was last written.
        self._pending_dirty = False
        #: Why ``pending_file`` could not be written last (warned once), ``None`` once it could.
        self._pending_error: str | None = None
        if self.pending_file is not None:
            self._load_pending(self.pending_file)
        self.last_recommendation: Recommendation | None = None
        self.last_outcome: dict[str, Any] | None = None
        self.service_reachable: bool | None = None
        self.service_error: str | None = None
        #: The last recommendation request was refused (a non-transient answer: INVALID_ARGUMENT, a 4xx), not left
        #: unanswered: the service is up and the request (the settings) is what fails.
        self.service_refused = False
        self.service_ok_unix_ms: int | None = None
        #: Why the last probe failed (``None`` once one runs without error), and how many probes failed so far.
        self.probe_error: str | None = None
        self.probe_failures = 0
        self.steps_done = 0
        #: Steps skipped because no managed interface could carry a path (no service call was made).
        self.steps_skipped = 0
        self._status_warned = False
        #: The primary the service asked for last; the guard may hold another one while it has no upstream.
        self.preferred: str | None = None
        self.override_reason: str | None = None
        #: The paths the applied configuration demotes to ``backup`` for the upstream guard (:meth:`guarded`).
        self.demoted: tuple[str, ...] = ()
        #: How the stop left the device's configuration (``"restored at stop"``, ``"partly restored at stop: …"``);
        #: ``None`` while the agent runs (or when it had nothing to restore).
        self.configuration: str | None = None
        #: The same as the status record's ``configuration_state`` (``RESTORED``, ``PARTLY_RESTORED``), set with it.
        self.configuration_state: str | None = None
        self.guard = self._build_guard() if guard is None else guard
        n = max(1, config.history_samples)
        self.history: dict[str, tuple[deque[dict[str, float]], deque[dict[str, float]]]] = {
            name: (deque(maxlen=n), deque(maxlen=n)) for name in config.interfaces
        }

    def _load_pending(self, path: Path) -> None:
        """Queue the outcomes kept at ``path`` by an earlier run (:func:`~edgepath_agent.pending.load_pending`):
        this device's, the newest ``max_pending_outcomes``. What was dropped is logged at WARNING (another
        ``device_id``, over the bound), a bad file once at WARNING (moved aside; the queue starts empty)."""
        bound = self.config.max_pending_outcomes  # 0: none is kept, the file's are dropped (logged)
        loaded = load_pending(path, self.config.device_id, bound)
        if loaded.problem is not None:
            aside = f"moved to {loaded.moved_to}" if loaded.moved_to is not None else "left in place"
            log.warning(
                "pending outcomes file %s %s: %s, starting with no pending outcome",
                path,
                loaded.problem,
                aside,
                extra={"pending_file": str(path), "error": loaded.problem},
            )
            self._pending_dirty = loaded.moved_to is None  # a bad file left in place is replaced at the next write
            return
        self.pending.extend(loaded.outcomes)
        dropped = []
        if loaded.other_device:
            dropped.append(f"{loaded.other_device} of another device_id than {self.config.device_id!r}")
        if loaded.over_bound:
            dropped.append(f"the {loaded.over_bound} oldest over max_pending_outcomes = {bound}")
        extra = {
            "pending_file": str(path),
            "pending_outcomes": len(loaded.outcomes),
            "dropped": loaded.other_device + loaded.over_bound,
        }
        if dropped:
            log.warning(
                "loaded %d pending outcome(s) from %s; dropped %s",
                len(loaded.outcomes),
                path,
                " and ".join(dropped),
                extra=extra,
            )
            self._pending_dirty = True
        elif loaded.outcomes:
            log.info(
                "loaded %d pending outcome(s) from %s (re-sent at the next step)",
                len(loaded.outcomes),
                path,
                extra=extra,
            )

    def save_pending(self) -> bool:
        """Write :attr:`pending` to ``pending_file`` if it changed since the last write (atomically, 0600; an empty
        queue removes the file). A failure is logged once at WARNING, never fatal, and retried at the next change
        or stop. Returns whether the file holds the queue now (``False`` without a file)."""
        if self.pending_file is None:
            return False
        if not self._pending_dirty:
            return self._pending_error is None
        try:
            write_pending(self.pending_file, self.pending)
        except (OSError, TypeError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            if self._pending_error is None:
                log.warning(
                    "pending outcomes file %s not written (%s): outcomes queued now are lost if the agent exits "
                    "before the service receives them",
                    self.pending_file,
                    reason,
                    extra={"pending_file": str(self.pending_file), "error": reason},
                )
            self._pending_error = reason
            return False
        if self._pending_error is not None:
            log.info("pending outcomes file %s written again", self.pending_file)
        self._pending_error = None
        self._pending_dirty = False
        return True

    def _pending_changed(self) -> None:
        """:attr:`pending` changed: keep it (:meth:`save_pending`)."""
        self._pending_dirty = True
        self.save_pending()

    def _enqueue(self, outcome: dict[str, Any]) -> None:
        """Append ``outcome`` to :attr:`pending` (a full queue drops its oldest, logged) and keep the queue; with
        ``max_pending_outcomes = 0`` it is dropped at once (logged)."""
        if not self.pending.maxlen:
            log.warning(
                "outcome for %s not kept for re-sending (max_pending_outcomes = 0)",
                outcome.get("decision_id"),
                extra={"decision_id": outcome.get("decision_id")},
            )
            self.save_pending()  # the file's outcomes, dropped at load, leave it now
            return
        if len(self.pending) == self.pending.maxlen:
            oldest = self.pending[0].get("decision_id")
            log.warning(
                "pending outcome queue full (max_pending_outcomes = %d): the oldest, for %s, is dropped",
                self.pending.maxlen,
                oldest,
                extra={"decision_id": oldest},
            )
        self.pending.append(outcome)
        self._pending_changed()

    def _dropped(self, outcome: Mapping[str, Any], exc: ServiceError, queued: bool) -> None:
        """Log an outcome the service refused for good (not transient, not the credentials): it is not retried. The
        service answers ``NOT_FOUND`` (404) for a decision it does not know, or no longer: its TTL passed."""
        decision_id = outcome.get("decision_id")
        what = "queued outcome" if queued else "outcome"
        if exc.code in EXPIRED_CODES:
            log.warning(
                "%s for %s dropped: the service does not know its decision (unknown, or expired: its TTL passed): %s",
                what,
                decision_id,
                exc,
                extra={"decision_id": decision_id, "error": str(exc)},
            )
            return
        log.error("%s for %s refused, dropped: %s", what, decision_id, exc, extra={"decision_id": decision_id})

    def _build_guard(self) -> PrimaryGuard | None:
        target = self.config.upstream_target_addr() if self.config.upstream_check else None
        if target is None or _is_loopback(target[0]):
            return None  # nothing beyond the device to probe (a service on loopback says nothing about a path)
        netns = self.config.netns

        def prober(interface: str) -> UpstreamProbe:
            source: str | None = None  # no address known: the device binding alone still pins the path
            try:
                # In a step, the step's snapshot; between steps (watch_upstream), the backend's reading now.
                snapshot = self._step_links
                by_name = ipv4_addresses(snapshot) if snapshot is not None else self.applier.backend.read_addresses()
                addresses = by_name.get(interface)
            except Exception:
                addresses = None
            if addresses:
                source = addresses[0]
            if netns is None:
                return probe_upstream(interface, target, source, self.config.upstream_timeout_s)
            from edgepath_agent.testbed.netns import call_in_netns

            return call_in_netns(netns, probe_upstream, interface, target, source, self.config.upstream_timeout_s)

        return PrimaryGuard(
            tuple(self.config.interfaces),
            prober,
            failures=self.config.upstream_failures,
            recoveries=self.config.upstream_recoveries,
        )

    def managed_preferred(self) -> str | None:
        """The preferred path when the guard manages it, else None (an unmanaged name is the applier's safety
        checks' to refuse: the guard neither probes nor demotes it)."""
        assert self.guard is not None
        return self.preferred if self.preferred in self.guard.interfaces else None

    def demoted_with(self, primary: str) -> tuple[str, ...]:
        """The paths to demote to ``backup`` with ``primary`` carrying the initial subflow: every managed path the
        guard finds without upstream (:meth:`~edgepath_agent.upstream.PrimaryGuard.without_upstream`) and, while
        an override is in force (``primary`` is not the preferred path), the preferred path; ``primary`` never."""
        assert self.guard is not None
        preferred = self.managed_preferred()
        overridden = (preferred,) if preferred is not None and primary != preferred else ()
        return tuple(n for n in dict.fromkeys((*overridden, *self.guard.without_upstream())) if n != primary)

    def guarded(self, rec: Recommendation, primary: str) -> Recommendation:
        """``rec`` as the guard applies it with ``primary`` carrying the initial subflow: moved there
        (:meth:`~edgepath_agent.messages.Recommendation.with_primary`) when it is not the preferred path, and with
        :meth:`demoted_with`'s paths ``backup`` (``rec`` itself when the preferred path is primary and no path is
        without upstream)."""
        demoted = self.demoted_with(primary)
        if primary == self.preferred:
            return rec.with_demoted(demoted, primary)
        access_type = self.config.interfaces.get(primary, rec.primary_path.access_type)
        return rec.with_primary(primary, access_type, demoted)

    def guard_primary(self, rec: Recommendation) -> tuple[Recommendation, str | None]:
        """Probe the path ``rec`` makes primary; ``(recommendation to apply, override reason or None)``.

        The path probed is the one the applier would put the initial subflow on
        (:meth:`~edgepath_agent.messages.Recommendation.initial_interface`: the steering rule's initial access,
        or MLPM's prioritised subflow with ``follow_mlpm``, before ``primary_path``); an override moves every one
        of those fields to the chosen interface (:meth:`~edgepath_agent.messages.Recommendation.with_primary`),
        so the applied primary is the guard's choice, and demotes the probed path: its endpoint is ``backup``
        while the override is in force, whatever the steering mode or MLPM's weights. Any other path the guard
        finds without upstream is ``backup`` too, override or not (:meth:`guarded`).
        """
        self.preferred = rec.initial_interface(self.config.follow_mlpm)
        if self.guard is None or self.preferred not in self.config.interfaces:
            return rec, None  # unmanaged names are left to the applier's safety checks
        chosen, reason = self.guard.choose(self.preferred)
        if reason is None:
            return self.guarded(rec, chosen), None
        log.warning(
            "decision %s: %s",
            rec.decision_id,
            reason,
            extra={
                "decision_id": rec.decision_id,
                "interface": chosen,
                "previous_primary": self.preferred,
                "reason": reason,
            },
        )
        return self.guarded(rec, chosen), reason

    def watch_upstream(self) -> str | None:
        """One periodic upstream check; re-applies the last recommendation when the primary or a path's
        ``backup`` flag must change, and returns the primary it applied (None: nothing applied).

        Leaves a primary without connectivity for one that answers, and restores the
        preferred path once it answers again (see :class:`~edgepath_agent.upstream.PrimaryGuard`). Leaving
        overrides the last recommendation (:meth:`~edgepath_agent.messages.Recommendation.with_primary`), with the
        primary left and the preferred path (when not the new primary) demoted to ``backup``; a switch to the
        preferred path ends the override. Either way every other path the guard finds without upstream stays
        ``backup`` (:meth:`guarded`): with three paths, one that died while it carried the override keeps its
        ``backup`` flag when the preferred path returns. Without a primary change, one such path is re-probed
        (:meth:`~edgepath_agent.upstream.PrimaryGuard.recheck`); its first answer gives it the recommendation's
        flags back, the primary unchanged.
        """
        if self.guard is None or self.applier.last is None or self.last_recommendation is None:
            return None
        current = self.applier.last.primary
        preferred = self.managed_preferred()
        change = self.guard.watch(current, preferred)
        if change is not None:
            new, reason = change
        else:
            self.guard.recheck((current, preferred))
            new, reason = current, flags_changed(self.demoted, self.demoted_with(current))
            if not reason:
                return None
        extra = {
            "decision_id": self.last_recommendation.decision_id,
            "interface": new,
            "previous_primary": current,
            "reason": reason,
        }
        rec = self.guarded(self.last_recommendation, new)
        try:
            self.applier.apply(rec)
        except ApplyError as exc:
            log.error("switching primary to %s failed, restoring the previous state: %s", new, exc, extra=extra)
            self._interrupt(f"its configuration was rolled back (switching the primary to {new} failed)")
            self._rollback_after_failed_apply()
            return None
        self.demoted = rec.demoted
        if change is None:  # the decision's arm (its primary path) unchanged: its interval's outcome stands
            # a path answering again (recheck finds no new dead path: only watch's own probes could, and those
            # change the primary or the override instead)
            log.info("primary %s kept: %s", current, reason, extra=extra)
            return new
        self._interrupt(f"the upstream guard switched the primary from {current} to {new} during it ({reason})")
        self.override_reason = None if new == self.preferred else reason
        log.warning("primary %s → %s: %s", current, new, reason, extra=extra)
        return new

    def read_links(self) -> LinkSnapshot | None:
        """One snapshot of the interfaces' links and addresses (``links``: one rtnetlink dump of each), ``None``
        without a link reader or when it cannot be read (logged once at WARNING, its return once at INFO)."""
        if self.links is None:
            return None
        try:
            states = self.links()
        except Exception as exc:  # an unreadable link state must not stop the agent: report as before
            if self._links_error is None:
                log.warning("cannot read the interfaces' link state (%s): reporting every interface", exc)
            self._links_error = str(exc) or type(exc).__name__
            return None
        if self._links_error is not None:
            log.info("the interfaces' link state is readable again")
            self._links_error = None
        return states

    def context(self) -> dict[str, Any]:
        """The ``RecommendRequest`` for the current readings (links and addresses read now, :meth:`read_links`).

        Besides the interfaces' radio/path context it carries the kernel's
        capabilities (read by a :class:`KernelCollector`, if one is configured), the
        application profile, and each interface's recent measured RTT/throughput
        samples (``subflow_histories``, MLPM's time series) from this agent's meter.
        """
        return self._context(self.read_links())

    def _context(self, links: LinkSnapshot | None) -> dict[str, Any]:
        """:meth:`context` from the link snapshot ``links`` (``None``: none; collectors read addresses themselves)."""
        readings = []
        kernel = None
        for c in self.collectors:
            try:
                if links is not None and isinstance(c, LinkAwareCollector):
                    readings.append(c.collect_with_links(links))
                else:
                    readings.append(c.collect())
            except Exception as exc:  # a broken source must not stop the agent
                log.warning("collector %s failed: %s", getattr(c, "name", c), exc)
            if isinstance(c, KernelCollector):
                kernel = c.capabilities
        interfaces = self.reportable(merge_contexts(readings, only=self.config.interfaces), links)
        request: dict[str, Any] = {"device_id": self.config.device_id, "interfaces": interfaces}
        if self.config.application_profile != "UNSPECIFIED":
            request["application_profile"] = self.config.application_profile
        if kernel is not None and kernel.mptcp:
            request["kernel"] = {
                "available_congestion_controls": list(kernel.available_cc),
                "allowed_congestion_controls": list(kernel.allowed_cc),
                "mptcp_schedulers": list(kernel.schedulers),
                "path_managers": list(kernel.path_managers),
            }
        present = {i["name"] for i in interfaces}
        histories = [
            history_columns(name, rtt, thr)
            for name, (rtt, thr) in self.history.items()
            if name in present and (rtt or thr) and self.config.history_samples > 0
        ]
        if histories:
            request["subflow_histories"] = histories
        return request

    def reportable(self, interfaces: list[dict[str, Any]], links: LinkSnapshot | None) -> list[dict[str, Any]]:
        """``interfaces`` (request entries) without those that cannot carry a path according to the snapshot
        ``links`` (:meth:`read_links`).

        An interface is left out when it is gone, down (no ``IFF_UP`` or no carrier) or has no address
        other than a link-local one (:func:`~edgepath_agent.collector.link.unusable_reason`); the ones left
        out, with why, are in :attr:`unreported`. Leaving is logged once at WARNING ("wwan0 has no address;
        not reported to the service until it has one"), coming back once at INFO, not at every step.
        Without a snapshot (no link reader, or the link state could not be read), every interface is kept.
        """
        if links is None:
            return interfaces
        states = links
        now = {
            name: reason for name in self.config.interfaces if (reason := unusable_reason(states.get(name))) is not None
        }
        for name, reason in now.items():
            if self.unreported.get(name) != reason:
                log.warning(
                    "%s %s; not reported to the service until %s",
                    name,
                    reason,
                    _REPORTED_AGAIN_WHEN[reason],
                    extra={"interface": name, "reason": reason},
                )
        for name in self.unreported:
            if name not in now:
                log.info("%s is up with an address again; reported to the service", name, extra={"interface": name})
        self.unreported = now
        return [entry for entry in interfaces if entry["name"] not in now]

    def _skip_step(self, request: dict[str, Any]) -> StepResult:
        """The step when no managed interface can be reported (the service refuses a request without one)."""
        why = "; ".join(f"{name} {reason}" for name, reason in self.unreported.items())
        reason = f"no managed interface can carry a path ({why}): step skipped"
        (log.info if self._skipping else log.warning)(
            "%s, keeping the last applied configuration", reason, extra={"error": reason}
        )
        self._skipping = True
        self.steps_skipped += 1
        return StepResult(
            request, None, self.applier.last, None, None, None, kept_last=True, error=reason, skipped=True
        )

    def _remember(self, primary: str, measured: TransferResult) -> None:
        if primary not in self.history or measured.bytes == 0:
            return
        t_ms = time.time() * 1000.0
        rtt, thr = self.history[primary]
        thr.append({"t_ms": t_ms, "throughput_bps": measured.throughput_bps})
        if measured.rtt_ms is not None:
            rtt.append({"t_ms": t_ms, "rtt_ms": measured.rtt_ms})

    def _default_measure(self, primary: str) -> TransferResult | None:
        """The configured probe's transfer (``primary``: the interface it should leave from, unused: routing picks
        it); ``None`` without a probe: the passive meter measures intervals, not steps (:meth:`interval_reading`).

        Raises
        ------
        OSError
            When the probe fails (:class:`~edgepath_agent.iperf.IperfFailed`, a refused connection, a timeout).
        """
        if not self.config.probe:
            self._unmeasured = "no probe: the passive meter measures a decision's interval (PassiveInterval)"
            return None
        host, port = parse_target(self.config.probe)
        if self.iperf3 is not None:
            return iperf3_transfer(self.iperf3, host, port, self.config.probe_bytes, netns=self.config.netns)
        return transfer(host, port, self.config.probe_bytes, netns=self.config.netns)

    def open_interval(self, decision_id: str | None, interface: str, override: str | None = None) -> PassiveInterval:
        """Mark the start of the interval of a configuration that has just taken effect (the passive meter):
        ``interface``'s received-bytes counter (bytes) and :func:`time.monotonic` now.

        ``decision_id`` is the decision applied (``None``/``""``: a fixed primary), ``interface`` the primary
        applied, ``override`` why the upstream guard overrode the decision's primary (``None``: it did not). A
        counter that cannot be read (no such interface, ``netns`` cannot be entered) is recorded as ``None`` and the
        interval then yields no outcome; a read that raises ``OSError`` is logged and counted as a failed probe.
        """
        started = time.monotonic()
        try:
            count = rx_bytes(interface, netns=self.config.netns)
        except OSError as exc:
            self._probe_failed(exc, decision_id, interface)
            count = None
        return PassiveInterval(
            decision_id or "", interface, count, started, override=override, dry_run=self.outcomes_off is not None
        )

    def interval_reading(self, interval: PassiveInterval) -> tuple[TransferResult | None, str | None]:
        """The passive meter's reading of ``interval`` until now: ``(bytes its interface received since it started
        over the seconds since then, None)``, or ``(None, why there is none)``: no byte counter at either end, or a
        counter that went back (the interface was re-created). Throughput in bit/s (0 over no time).

        Raises
        ------
        OSError
            When ``netns`` cannot be entered or rtnetlink fails there (:func:`rx_bytes`).
        """
        now = time.monotonic()
        count = rx_bytes(interval.interface, netns=self.config.netns)
        if count is None or interval.rx_bytes is None:
            return None, f"passive meter: no byte counter for {interval.interface}"
        if count < interval.rx_bytes:
            return (
                None,
                f"passive meter: the byte counter of {interval.interface} went back (the interface was re-created?)",
            )
        got, elapsed = count - interval.rx_bytes, max(0.0, now - interval.started_s)
        return TransferResult(got, elapsed, 8.0 * got / elapsed if elapsed > 0 else 0.0, "", False), None

    def _end_reading(self, interval: PassiveInterval) -> _EndReading:
        """:meth:`interval_reading` of ``interval`` now, or the ``OSError`` it raised (handled by :meth:`_close`)."""
        try:
            reading, why = self.interval_reading(interval)
        except OSError as exc:
            return None, None, exc
        return reading, why, None

    def _interrupt(self, reason: str) -> None:
        """The configuration of the open interval stopped being its decision's (the first reason is kept)."""
        if self.interval is not None and self.interval.interrupted is None:
            self.interval = replace(self.interval, interrupted=reason)

    def _close(self, interval: PassiveInterval, end: _EndReading, deliver: bool = True) -> ClosedInterval:
        """Close ``interval`` with its reading ``end`` (:meth:`_end_reading`; a failed read is logged and counted as a
        failed probe): keep the reading as ``interval.interface``'s history sample and report it as
        ``interval.decision_id``'s outcome, unless a rule says no (:meth:`_interval_no_outcome`; logged at DEBUG).
        ``deliver=False``: queue the outcome without calling the service (it is unreachable).

        Raises
        ------
        CredentialsRefused
            When the service refuses this device's credentials while the outcome is reported.
        """
        reading, unread, failed = end
        if failed is not None:
            unread = f"probe failed: {self._probe_failed(failed, interval.decision_id, interval.interface)}"
        elif reading is not None:
            self.probe_error = None
        idle = idle_reading(reading) if reading is not None else None
        if reading is not None and idle is None and not interval.dry_run and interval.interrupted is None:
            self._remember(interval.interface, reading)  # the interface carried it over the whole interval
        no_outcome = self._interval_no_outcome(interval, unread, idle)
        outcome = ack = None
        if no_outcome is None and reading is not None:
            outcome = outcome_from(reading, self.config.device_id, interval.decision_id)
            if deliver:
                ack = self._report(outcome)
            else:
                self._queue(outcome, "the service is unreachable")
        else:
            _log_no_outcome(interval.decision_id, interval.interface, no_outcome)
        return ClosedInterval(
            interval, reading, outcome, ack, no_outcome, probe_error=self.probe_error if failed else None
        )

    def _interval_no_outcome(self, interval: PassiveInterval, unread: str | None, idle: str | None) -> str | None:
        """Why the closed ``interval`` reports no outcome (naming its decision), ``None`` when its reading is one."""
        if interval.dry_run:
            return self.outcomes_off or "dry run"
        if not interval.decision_id:
            return f"no decision to report on (fixed primary path {interval.interface})"
        why = (
            (f"the upstream guard overrode the primary path ({interval.override})" if interval.override else None)
            or interval.interrupted
            or unread
            or idle
        )
        return None if why is None else f"decision {interval.decision_id}'s interval on {interval.interface}: {why}"

    def step(self, primary: str | None = None) -> StepResult:
        """One round. ``primary`` forces a fixed policy (no service call, no outcome of its own to report).

        What the step measures and reports depends on the meter (:class:`StepResult`). An active one (``probe``,
        an injected ``measure``, SSMP's content transfer) measures right after the apply, and the step reports that
        as its own decision's outcome. The passive meter (no probe) measures a decision over the interval during
        which its configuration is in effect (:class:`PassiveInterval`): right before applying this step's
        decision the step reads the open interval's counter, and once the apply has succeeded it closes that
        interval and reports its reading as the *previous* decision's outcome (``outcome``, ``closed``), then opens
        the interval of its own decision, reported by the step that applies the next one (or at the stop,
        :meth:`close_at_stop`). A recommendation the applier refuses leaves the previous configuration, and its
        interval, running; a failed apply (``ApplyError``) ends it with the reading taken before the attempt.

        A probe that fails (``measure`` raises ``OSError``, e.g. :class:`~edgepath_agent.iperf.IperfFailed`
        when the iperf3 server is unreachable) does not end the step: it is logged as a warning naming
        the probe target and the reason, counted (``probe_failures``, ``probe_error``; the status
        record's ``probe`` block), and the step returns with ``probe_error`` set and no measurement
        or outcome; the configuration it applied stays, as after a step that measured.

        A step that applied a recommendation but reports no outcome says why in ``no_outcome`` (and
        :attr:`no_outcome_reason`, logged at DEBUG): a dry run, the upstream guard's override, a fixed ``primary``,
        a failed probe, nothing measured; under the passive meter, about the decision whose interval it closed
        (named): no interval open (the first decision), an idle link (:func:`idle_reading`), the guard's override
        when that decision was applied or a switch of the primary during its interval, no byte counter.

        When the link check left no managed interface to report (all gone, down or without an address,
        see :meth:`reportable`) and ``primary`` is ``None``, the step is skipped: logged (WARNING for the first
        of a row, INFO after), no service call, the last applied configuration kept (``skipped``, ``error``).

        Raises
        ------
        CredentialsRefused
            When the service refuses this device's credentials (``UNAUTHENTICATED``/``PERMISSION_DENIED``,
            HTTP 401/403): a configuration error no later step heals. Any other refusal (e.g. ``INVALID_ARGUMENT``
            for one bad reading) is logged at ERROR and, like a transient failure, keeps the last applied
            configuration (``kept_last``, ``error``).
        ApplyError
            When applying the recommendation fails (the caller restores the previous state).
        """
        # One snapshot of links and addresses per step (read_links), used by every part of it; none is kept for the
        # next step, nor for the upstream checks between steps.
        self._step_links = self.read_links()
        try:
            return self._step(primary, self._step_links)
        finally:
            self._step_links = None

    def _step(self, primary: str | None, links: LinkSnapshot | None) -> StepResult:
        """:meth:`step` with the step's link snapshot ``links`` (``None``: none; each reader reads its own)."""
        request = self._context(links)
        if primary is None and not request["interfaces"] and self.unreported:
            return self._skip_step(request)
        self._skipping = False
        if self.ssmp is not None and primary is None:
            request = self.ssmp.with_content(request)  # over the interfaces reported now only
        self.flush_outcomes()
        rec: Recommendation
        if primary is not None:
            rec = Recommendation(primary_path=PrimaryPath(interface=primary))
        else:
            try:
                rec = self.client.recommend(request)
            except ServiceError as exc:
                self._service_answered(False, str(exc))
                self.service_refused = not is_transient(exc)
                self._raise_if_credentials_refused(exc)
                if not is_transient(exc):
                    log.error(
                        "service refused the request (%s): keeping the last applied configuration",
                        exc,
                        extra={"error": str(exc)},
                    )
                    return StepResult(
                        request, None, self.applier.last, None, None, None, kept_last=True, error=str(exc)
                    )
                log.warning(
                    "service unreachable (%s): keeping the last applied configuration", exc, extra={"error": str(exc)}
                )
                return StepResult(request, None, self.applier.last, None, None, None, kept_last=True, error=str(exc))
            self._service_answered(True)
        preferred_before = self.preferred  # a refused recommendation leaves the guard's preferred path as it was
        to_apply, override = self.guard_primary(rec) if primary is None else (rec, None)
        # Passive meter: the open interval (the previous decision's) ends where the next configuration takes effect.
        ending = self.interval if self._passive else None
        end = self._end_reading(ending) if ending is not None else None
        try:
            if links is None:  # no snapshot: the applier reads the addresses itself
                applied = self.applier.apply(to_apply)
            else:
                applied = self.applier.apply(to_apply, addresses=ipv4_addresses(links))
        except RejectedRecommendation as exc:  # logged by the applier; nothing was changed: the interval runs on
            self.preferred = preferred_before
            log.error("keeping the last applied configuration: %s", exc, extra={"decision_id": rec.decision_id})
            return StepResult(request, rec, self.applier.last, None, None, None, kept_last=True, error=str(exc))
        except ApplyError:  # the caller rolls back: the previous configuration was in effect until this attempt
            self.interval = None
            if ending is not None and end is not None:
                self._close(ending, end)
            raise
        self.last_recommendation = rec
        self.override_reason = override
        self.demoted = to_apply.demoted
        self.interval = None
        closed = self._close(ending, end) if ending is not None and end is not None else None
        measured, server_transfer = self.ssmp.measure(rec) if self.ssmp is not None else (None, None)
        if measured is None and self._passive:  # this decision's outcome is its interval's, reported when it ends
            failures = self.probe_failures
            self.interval = self.open_interval(rec.decision_id, applied.primary, override)
            open_error = self.probe_error if self.probe_failures > failures else None
            return self._passive_result(request, rec, applied, closed, open_error)
        probe_error = None
        if measured is None:
            self._unmeasured = None
            try:
                measured = self.measure(applied.primary)
            except OSError as exc:  # IperfFailed, refused/unreachable, socket timeouts: no outcome this step
                probe_error = self._probe_failed(exc, rec.decision_id, applied.primary)
            else:
                self.probe_error = None
        # A dry run measures on routes it did not change: its readings describe no decision, not even as history.
        if measured is not None and self.outcomes_off is None:
            self._remember(applied.primary, measured)
        outcome = ack = None
        no_outcome = self._no_outcome(rec, override, measured, probe_error)
        if no_outcome is None and measured is not None and rec.decision_id:  # (_no_outcome checked both)
            outcome = outcome_from(measured, self.config.device_id, rec.decision_id)
            if server_transfer is not None:
                outcome["server_transfer"] = server_transfer
            cc = congestion_measurement(measured, self.cc_in_effect(applied.congestion_control))
            if cc is not None:  # issue 20: the transfer's congestion metrics and the algorithm that carried it
                outcome["congestion_measurement"] = cc.as_json()
            ack = self._report(outcome)
        else:
            _log_no_outcome(rec.decision_id, applied.primary, no_outcome)
        self.no_outcome_reason = no_outcome
        return StepResult(
            request,
            rec,
            applied,
            measured,
            outcome,
            ack,
            kept_last=False,
            probe_error=probe_error,
            no_outcome=no_outcome,
            closed=closed,
        )

    def _passive_result(
        self,
        request: dict[str, Any],
        rec: Recommendation,
        applied: Applied,
        closed: ClosedInterval | None,
        open_error: str | None,
    ) -> StepResult:
        """The result of a step under the passive meter: what it reported is the interval it ``closed`` (the
        previous decision's), if any; ``rec``'s own interval has just been opened (:attr:`interval`;
        ``open_error``: why its counter could not be read)."""
        if closed is not None:
            no_outcome = closed.no_outcome
        elif self.outcomes_off is not None:
            no_outcome = self.outcomes_off
        else:
            no_outcome = (
                "passive meter: no earlier decision's interval to close (this step's decision is measured over its "
                "own interval, reported when the next decision is applied or the agent stops)"
            )
        self.no_outcome_reason = no_outcome
        return StepResult(
            request,
            rec,
            applied,
            closed.reading if closed is not None else None,
            closed.outcome if closed is not None else None,
            closed.ack if closed is not None else None,
            kept_last=False,
            probe_error=(closed.probe_error if closed is not None else None) or open_error,
            no_outcome=no_outcome,
            closed=closed,
        )

    def close_at_stop(self) -> ClosedInterval | None:
        """At a clean stop (SIGTERM, after ``max_steps``), close the passive meter's open interval, which ends here
        (the state is restored after it), and report its reading as its decision's outcome under the rules of
        :meth:`step`: none for an idle reading, a dry run, a fixed primary or the upstream guard's override.

        While the service is unreachable (the last call got no answer, or queued outcomes still cannot be
        delivered) the outcome is queued without calling it. Outcomes still queued then are kept in ``pending_file``
        for the next start (:meth:`keep_pending_at_stop`: logged at INFO; at WARNING when they are lost, without a
        file or when it cannot be written). Returns the closed interval (``None`` when none was open: an active
        meter, or no decision applied).

        Raises
        ------
        CredentialsRefused
            When the service refuses this device's credentials.
        """
        interval, self.interval = self.interval, None
        closed = None
        if interval is not None:
            end = self._end_reading(interval)
            deliver = self.service_reachable is not False
            if deliver and self.pending:
                self.flush_outcomes()
                deliver = not self.pending
            closed = self._close(interval, end, deliver=deliver)
            self.no_outcome_reason = closed.no_outcome
        self.keep_pending_at_stop()
        return closed

    def keep_pending_at_stop(self) -> bool:
        """At the stop, write the queue to ``pending_file`` (:meth:`save_pending`) and log what happens to the
        outcomes still queued: kept for the next start (INFO), or lost (WARNING: no file, or it cannot be written).
        Returns whether they are kept (``True`` for none)."""
        kept = self.save_pending()
        if not self.pending:
            return True
        why = self.service_error or "service unreachable"
        extra = {"pending_outcomes": len(self.pending), "pending_file": str(self.pending_file or "")}
        if kept:
            log.info(
                "stopping with %d outcome(s) the service has not received (%s); kept in %s, re-sent after the next "
                "start",
                len(self.pending),
                why,
                self.pending_file,
                extra=extra,
            )
            return True
        lost = self._pending_error if self.pending_file is not None else "pending_file is unset"
        log.warning(
            "stopping with %d outcome(s) the service has not received (%s); they are lost when the agent exits (%s)",
            len(self.pending),
            why,
            lost,
            extra=extra,
        )
        return False

    def _no_outcome(
        self,
        rec: Recommendation,
        override: str | None,
        measured: TransferResult | None,
        probe_error: str | None,
    ) -> str | None:
        """Why the step that applied ``rec`` and measured it with an active meter reports no outcome, ``None`` when it
        reports ``measured``.

        An outcome must describe the path the decision chose, or not be sent: an outcome measured on another path
        (the upstream guard's override; a dry run, whose routes are unchanged) would train the bandit on the wrong
        arm. (Under the passive meter: :meth:`_interval_no_outcome`.)
        """
        if self.outcomes_off is not None:
            return self.outcomes_off
        if override is not None:
            return f"the upstream guard overrode the primary path ({override})"
        if not rec.decision_id:
            return "no decision to report on (fixed primary path)"
        if probe_error is not None:
            return f"probe failed: {probe_error}"
        if measured is None:
            return self._unmeasured or "nothing measured"
        return None

    def _probe_failed(self, exc: OSError, decision_id: str | None, primary: str) -> str:
        """Log and count a failed probe; returns the reason."""
        target = self.config.probe or f"passive meter on {primary}"
        reason = str(exc) or type(exc).__name__
        self.probe_error = reason
        self.probe_failures += 1
        log.warning(
            "probe %s failed, no outcome for decision %s: %s",
            target,
            decision_id or "-",
            reason,
            extra={"decision_id": decision_id, "interface": primary, "probe": target, "error": reason},
        )
        return reason

    def cc_in_effect(self, applied: str | None) -> str | None:
        """This device's congestion control now: what the applier set (``net.ipv4.tcp_congestion_control``), else
        the kernel's current value as the kernel collector last read it; None when neither is known."""
        if applied:
            return applied
        for c in self.collectors:
            if isinstance(c, KernelCollector) and c.capabilities.current_cc:
                return c.capabilities.current_cc
        return None

    def _raise_if_credentials_refused(self, exc: ServiceError) -> None:
        """Raise :class:`CredentialsRefused` when ``exc`` is the service refusing who this device is."""
        if exc.code in CREDENTIAL_CODES:
            raise CredentialsRefused(
                f"the service refused this device's credentials ({exc}): check token_file (or token, "
                f"cert_file/key_file) and device_id ({self.config.device_id!r}; default: the host name)"
            ) from exc

    def unanswered(self) -> str | None:
        """Why no step so far got a recommendation from the service (one line), or ``None`` when one did or no
        step ran: every step was skipped (no managed interface could carry a path, naming why), or the service
        gave no answer (naming the URLs tried and the last error), or refused the last request (an answer, not an
        outage: naming its reason, which names what in the request or the settings to change)."""
        if self.service_ok_unix_ms is not None or self.steps_done == 0:
            return None
        steps = f"{self.steps_done} step{'s' if self.steps_done != 1 else ''}"
        if self.steps_skipped >= self.steps_done:
            why = "; ".join(f"{name} {reason}" for name, reason in self.unreported.items()) or "none was usable"
            return (
                f"every step was skipped ({steps}): no managed interface could carry a path ({why}), so the service "
                f"was not asked; bring an interface up with an address, or check --interface"
            )
        last = " ".join((self.service_error or "no answer").split())
        if self.service_refused:
            return (
                f"no recommendation from the service in {steps}: it refused the request ({last}); it answered, so "
                f"this is no outage: fix what the refusal names (tried {', '.join(self.config.service)})"
            )
        return (
            f"no recommendation from the service in {steps}: tried {', '.join(self.config.service)}; last error: "
            f"{last} (is the service running, at that host and port? `edgepath-agent status --check` probes the URLs)"
        )

    def _service_answered(self, ok: bool, error: str | None = None) -> None:
        self.service_reachable = ok
        self.service_error = error
        if ok:
            self.service_ok_unix_ms = now_ms()

    def _report(self, outcome: dict[str, Any]) -> OutcomeAck | None:
        self.last_outcome = {**outcome, "sent_unix_ms": now_ms(), "delivered": False, "reward": None}
        try:
            ack = self.client.report_outcome(outcome)
        except ServiceError as exc:
            self._raise_if_credentials_refused(exc)
            if not is_transient(exc):
                self._dropped(outcome, exc, queued=False)
                return None
            log.warning(
                "outcome for %s queued (%s)",
                outcome.get("decision_id"),
                exc,
                extra={"decision_id": outcome.get("decision_id")},
            )
            self._enqueue(outcome)
            return None
        self.last_outcome.update(delivered=True, reward=ack.reward)
        return ack

    def _queue(self, outcome: dict[str, Any], why: str) -> None:
        """Queue ``outcome`` for re-sending without calling the service (``why``: logged)."""
        self.last_outcome = {**outcome, "sent_unix_ms": now_ms(), "delivered": False, "reward": None}
        log.warning(
            "outcome for %s queued (%s)",
            outcome.get("decision_id"),
            why,
            extra={"decision_id": outcome.get("decision_id")},
        )
        self._enqueue(outcome)

    def status_record(self) -> dict[str, Any]:
        """The status record (fields in :mod:`edgepath_agent.status`) for the current state.

        Besides those: ``outcomes``, ``"reported"`` or why this agent reports none (``"not reported: dry run"``),
        and ``no_outcome_reason``, why the last step that applied a recommendation (or the stop that closed the
        passive meter's last interval) reported no outcome (a dry run, an idle link under the passive meter, no
        interval to close yet, a failed probe, the upstream guard's override; ``null`` when it reported one or
        before the first such step).
        """
        rec = self.last_recommendation
        applied = self.applier.last if self.configuration is None else None  # restored (or partly): not applied
        state = self.configuration_state if self.configuration is not None else APPLIED if applied else None
        return {
            "updated_unix_ms": now_ms(),
            "pid": os.getpid(),
            "device_id": self.config.device_id,
            "step": self.steps_done,
            "service": {
                "urls": list(self.config.service),
                "last_used": getattr(self.client, "last_used", None),
                "reachable": self.service_reachable,
                "last_error": self.service_error,
                "last_ok_unix_ms": self.service_ok_unix_ms,
            },
            "probe": {
                "target": self.config.probe,
                "tool": "iperf3" if self.iperf3 is not None else ("builtin" if self.config.probe else "passive"),
                "mptcp_mode": self.iperf3.mode if self.iperf3 is not None else None,
                "version": self.iperf3.version if self.iperf3 is not None else None,
                "last_error": self.probe_error,
                "failures": self.probe_failures,
            },
            "recommendation": None if rec is None else rec.summary(),
            "applied": None
            if applied is None
            else {
                "primary": applied.primary,
                "backup": list(applied.backup),
                "congestion_control": applied.congestion_control,
                "steps": applied.steps,
            },
            "last_outcome": self.last_outcome,
            "outcomes": "reported" if self.outcomes_off is None else f"not reported: {self.outcomes_off}",
            "no_outcome_reason": self.no_outcome_reason,
            "pending_outcomes": len(self.pending),
            "preferred_primary": self.preferred,
            "unreported_interfaces": dict(self.unreported),
            "override_reason": self.override_reason,
            "demoted_paths": list(self.demoted),
            "configuration": self.configuration,
            "configuration_state": state,
            "connectivity": {
                name: {"ok": p.ok, "detail": p.detail, "elapsed_ms": p.elapsed_ms, "at_unix_ms": p.at_unix_ms}
                for name, p in (self.guard.last.items() if self.guard else [])
            },
        }

    def write_status(self) -> None:
        """Rewrite ``status_file`` (a failure is logged once, never fatal)."""
        if self.config.status_file is None:
            return
        try:
            write_status(self.config.status_file, self.status_record())
        except OSError as exc:
            if not self._status_warned:
                log.warning("status file %s not written: %s", self.config.status_file, exc)
                self._status_warned = True

    def flush_outcomes(self) -> int:
        """Re-send queued outcomes, oldest first, until one fails transiently; returns how many were delivered.

        One the service acknowledges as a duplicate (it had it already) counts as delivered; one it answers
        ``NOT_FOUND`` (404: its decision is unknown or expired) or refuses otherwise is dropped (logged,
        :meth:`_dropped`), not retried. The queue is written to ``pending_file`` once, after the flush.

        Raises
        ------
        CredentialsRefused
            When the service refuses this device's credentials (that outcome stays queued).
        """
        sent = 0
        changed = False
        try:
            while self.pending:
                outcome = self.pending[0]
                try:
                    ack = self.client.report_outcome(outcome)
                except ServiceError as exc:
                    self._raise_if_credentials_refused(exc)
                    if is_transient(exc):
                        break
                    self._dropped(outcome, exc, queued=True)
                else:
                    sent += 1
                    if ack.duplicate:
                        log.debug(
                            "queued outcome for %s: the service had it already (duplicate)",
                            outcome.get("decision_id"),
                            extra={"decision_id": outcome.get("decision_id")},
                        )
                self.pending.popleft()
                changed = True
        finally:
            if changed:
                self._pending_changed()
        return sent

    def run(self, stop: threading.Event, max_steps: int | None = None) -> int:
        """Step every ``interval_s`` until ``stop`` is set (or ``max_steps``); returns steps done.

        After the last of ``max_steps`` it returns at once (its status record written), without waiting
        another ``interval_s``. On either stop the passive meter's last interval is closed and reported
        (:meth:`close_at_stop`), the status record rewritten.

        Under systemd (Type=notify) it reports READY=1 before the first step, a STATUS=
        line after each, and pings the watchdog (WATCHDOG=1) at half of ``WatchdogSec=``
        while waiting, so a hung step (not a slow wait) gets the agent restarted.
        """
        steps = 0
        watchdog = watchdog_interval_s()
        sd_notify("READY=1\nSTATUS=starting")
        while not stop.is_set() and (max_steps is None or steps < max_steps):
            try:
                result = self.step()
                decision_id = result.recommendation.decision_id if result.recommendation else None
                if result.applied is not None and not result.kept_last:
                    log.info(
                        "decision %s: primary %s cc %s backup %s",
                        decision_id,
                        result.applied.primary,
                        result.applied.congestion_control,
                        ",".join(result.applied.backup) or "-",
                        extra={
                            "decision_id": decision_id,
                            "interface": result.applied.primary,
                            "congestion_control": result.applied.congestion_control,
                            "backup": list(result.applied.backup),
                            "model_version": result.recommendation.model_version if result.recommendation else None,
                            "step": steps,
                        },
                    )
            except ApplyError as exc:
                log.error(
                    "apply failed, restoring the previous state: %s", exc, extra={"error": str(exc), "step": steps}
                )
                self._rollback_after_failed_apply()
            except CredentialsRefused:
                self.write_status()  # `status` shows the refusal (service block) after the agent has exited
                self.keep_pending_at_stop()
                sd_notify("STOPPING=1")
                raise
            steps += 1
            self.steps_done = steps
            self.write_status()
            primary = self.applier.last.primary if self.applier.last else "-"
            sd_notify(f"STATUS=step {steps}: primary {primary}, service reachable: {self.service_reachable}")
            if max_steps is not None and steps >= max_steps:
                break  # the last step of max_steps: no interval to wait for before stopping
            self._wait(stop, watchdog)
        try:
            if self.close_at_stop() is not None:
                self.write_status()
        except CredentialsRefused:
            self.write_status()
            raise
        finally:
            sd_notify("STOPPING=1")
        return steps

    def _rollback_after_failed_apply(self) -> None:
        """Restore the journal's snapshot after a failed apply; a restore that fails too is logged, not raised (the
        journal keeps the snapshot: the next step's apply works from the state as it is, and the stop restores)."""
        try:
            self.applier.rollback()
        except ApplyError as exc:
            log.error(
                "restoring the previous state failed (the journal keeps it; the stop restores it): %s",
                exc,
                extra={"error": str(exc)},
            )

    def _wait(self, stop: threading.Event, watchdog: float | None) -> None:
        """Wait ``interval_s`` (or until ``stop``), checking the primary's upstream and pinging the watchdog."""
        check_every = self.config.upstream_check_interval_s
        deadline = time.monotonic() + self.config.interval_s
        next_check = time.monotonic() + check_every
        while not stop.is_set():
            now = time.monotonic()
            if now >= deadline:
                return
            if self.guard is not None and now >= next_check:
                if self.watch_upstream() is not None:
                    self.write_status()
                next_check = time.monotonic() + check_every
            if watchdog is not None:
                sd_notify("WATCHDOG=1")
            until = min(deadline, next_check) if self.guard is not None else deadline
            left = until - time.monotonic()
            if watchdog is not None:
                left = min(left, watchdog / 2)
            stop.wait(max(0.0, left))

    def close(self, restore: bool | None = None) -> None:
        """Write the queue to ``pending_file`` if it changed (:meth:`save_pending`: after a crash of the loop too),
        restore the journalled state (if ``restore``/``restore_on_exit``) and close the client.

        After a restore the status record is rewritten: ``applied`` is ``null`` and ``configuration`` says the
        configuration was restored (or partly restored, naming the steps that failed).

        Raises
        ------
        RestoreIncomplete
            When restore steps failed (every step was attempted; logged; the journal is kept for
            ``edgepath-agent rollback``; the status record says so).
        ApplyError
            When the current state cannot be read for the restore (the journal is kept).
        """
        try:
            self.save_pending()
            if self.config.restore_on_exit if restore is None else restore:
                self._restore_at_stop()
        finally:
            self.client.close()

    def _restore_at_stop(self) -> None:
        """:meth:`close`'s restore: roll back, say how it went in the log and the status record (restore steps
        skipped because their device no longer exists are named: ``"restored at stop (skipped: …)"``)."""
        changed = self.applier.changed_anything
        try:
            self.applier.rollback()
        except RestoreIncomplete as exc:
            self.configuration, self.configuration_state = f"partly restored at stop: {exc}", PARTLY_RESTORED
            log.error("restoring the state at stop: %s", exc, extra={"error": str(exc), "failed": list(exc.failed)})
            self.write_status()
            raise
        if changed:
            skipped = self.applier.skipped
            self.configuration = "restored at stop" + (f" (skipped: {'; '.join(skipped)})" if skipped else "")
            self.configuration_state = RESTORED
            self.write_status()


def congestion_measurement(result: TransferResult, device_algorithm: str | None) -> CongestionMeasurement | None:
    """The outcome's ``congestion_measurement`` for a transfer the built-in meter measured, or None.

    Metrics: the meter server's ``paper_metrics`` trailer (Łuczak et al., Future Internet 2023, Eq. 2–3, 7–8, 12;
    :mod:`edgepath_agent.ccmetrics`, sampled on the *sending* connection) and the receiver's throughput (bit/s).
    Algorithm: the one actually in effect on that sending connection, which the trailer reports per transfer
    (``congestion_control``, read with ``TCP_CONGESTION``); only when the trailer does not name it,
    ``device_algorithm`` (:meth:`Agent.cc_in_effect`: what this agent applied via sysctl, or the kernel's current
    ``net.ipv4.tcp_congestion_control``), which is the sender's only when the device sends. None without a trailer
    with metrics (iperf3 probe, passive meter, SSMP download) or without a valid algorithm name.
    """
    counters = result.server_counters or {}
    metrics = counters.get("paper_metrics")
    if not isinstance(metrics, Mapping):
        return None
    sender = counters.get("congestion_control")
    algorithm = sender if isinstance(sender, str) and sender.strip() else device_algorithm
    return CongestionMeasurement.from_meter(metrics, algorithm, result.throughput_bps)


def build_applier(config: AgentConfig, allowed_cc: Sequence[str] = ()) -> Any:
    """Applier with the configured backend and journal (NetworkManager's D-Bus API for ``networkmanager``)."""
    if config.backend == "networkmanager":
        from edgepath_agent.applier.networkmanager import NetworkManagerApplier

        return NetworkManagerApplier(
            config.applier_config(), journal_path=config.journal, netns=config.netns, allowed_cc=allowed_cc
        )
    backend: Any = CommandBackend(netns=config.netns)
    journal = Journal(config.journal)
    if config.backend == "netlink":
        from edgepath_agent.applier.netlink import NetlinkBackend

        backend = NetlinkBackend(netns=config.netns)
    if config.backend == "dry-run":
        backend = DryRunBackend.from_backend(backend, config.applier_config().sysctl_keys)
        journal = Journal(None)
    return Applier(backend, journal, config.applier_config(), allowed_cc=allowed_cc)


class LaminarUnavailable(ValueError):
    """``laminar = "on"`` where the kernel or the applier backend cannot set the flag."""


def laminar_support(config: AgentConfig, caps: KernelCapabilities, ip_help: str | None = None) -> str | None:
    """Why the ``laminar`` endpoint flag cannot be applied here, or ``None`` when it can.

    ``ip_help``: the output of ``ip mptcp help`` (read when ``None``), for the command and dry-run
    backends, which can set and read back only the flags the installed iproute2 knows (6.18+).
    """
    if not caps.laminar_endpoints:
        return f"kernel {caps.kernel_release or '?'} has no laminar endpoint flag (Linux >= 6.18)"
    if config.backend == "networkmanager":
        return "NetworkManager's connection.mptcp-flags has no laminar flag"
    if config.backend in ("command", "dry-run"):
        if ip_help is None:
            try:
                done = subprocess.run(["ip", "mptcp", "help"], capture_output=True, text=True, timeout=5)
                ip_help = done.stdout + done.stderr
            except (OSError, subprocess.SubprocessError) as exc:
                return f"ip mptcp help failed: {exc}"
        if "laminar" not in ip_help:
            return "the installed iproute2 does not know laminar (>= 6.18 does); backend = netlink sets it"
    return None


def with_laminar(config: AgentConfig, caps: KernelCapabilities, ip_help: str | None = None) -> AgentConfig:
    """``config`` with ``laminar`` added to ``endpoint_flags`` where ``config.laminar`` asks and it is supported.

    Raises
    ------
    LaminarUnavailable
        ``laminar = "on"`` where it cannot be applied (the message says why).
    """
    if config.laminar == "off" or "laminar" in config.endpoint_flags:
        return config
    reason = laminar_support(config, caps, ip_help)
    if reason is not None:
        if config.laminar == "on":
            raise LaminarUnavailable(f"laminar = on, but {reason}")
        log.info("laminar endpoint flag not used: %s", reason)
        return config
    log.info("MPTCP endpoints carry the laminar flag (kernel %s)", caps.kernel_release)
    return config.model_copy(update={"endpoint_flags": [*config.endpoint_flags, "laminar"]})


def build_agent(config: AgentConfig, extra_collectors: Sequence[Collector] = ()) -> Agent:
    """Agent with the real collectors (absent sources report nothing) and a failover client.

    With ``netns``, the collectors of per-namespace kernel state (WiFi over nl80211, connections and
    addresses, ``/proc/sys/net``) and the link check read that network namespace, and the SSMP step
    (``content``) resolves, measures and downloads from inside it.

    Raises
    ------
    LaminarUnavailable
        ``laminar = "on"`` where the kernel or the backend cannot apply it.
    OSError
        When ``netns`` cannot be entered to read the kernel's capabilities.
    """
    netns = config.netns
    kernel = KernelCollector(netns=netns)
    config = with_laminar(config, kernel.capabilities)
    applier = build_applier(config, kernel.capabilities.allowed_cc)
    netlink = importlib.util.find_spec("pyroute2") is not None  # a base dependency; text tools as fallback
    collectors: list[Collector] = [
        *extra_collectors,
        Nl80211WifiCollector(netns) if netlink else WifiCollector(netns=netns),
        # ModemManager answers over the system D-Bus (a filesystem socket): not per network namespace.
        ModemCollector(signal_setup_s=config.modem_signal_setup_s),
        DiagPathCollector(netns) if netlink else PathCollector(netns=netns),
        StaticCollector(config.interfaces),
        kernel,
    ]
    if kernel.capabilities.path_manager == "userspace":
        log.warning(
            "the MPTCP path manager is 'userspace' (a daemon such as mptcpd drives subflows): the endpoints "
            "this agent sets are not used by the kernel; routes (the initial subflow) still are"
        )
    client = connect_failover(config.service, config.timeout_s, config.attempts, credentials=config.credentials())
    ssmp = None
    if config.content:
        ssmp = SsmpStep.from_config(
            list(config.interfaces),
            config.content,
            config.content_bytes,
            config.content_dns,
            config.timeout_s,
            netns=netns,
        )
    return Agent(config, client, applier, collectors, ssmp=ssmp, links=LinkReader(netns))


def _require_iperf3() -> Iperf3:
    """The device's iperf3 client (logged once with its MPTCP mode).

    Raises
    ------
    IperfMissing
        No ``iperf3`` on ``PATH`` while ``probe_tool = "iperf3"``.
    """
    tool = detect_iperf3()
    if tool is None:
        raise IperfMissing(
            "probe_tool = iperf3 but no iperf3 binary is on PATH: install iperf3 (and mptcpize for MPTCP on "
            "iperf3 < 3.16), or set probe_tool = builtin with an edgepath meter server at probe"
        )
    if tool.mptcp:
        log.info("active probe: %s over MPTCP (%s)", tool.version, tool.mode)
    else:
        log.warning(
            "active probe: %s without MPTCP (no --mptcp and no mptcpize): outcomes measure the primary path alone",
            tool.version,
        )
    return tool


def ensure_sole_manager(config: AgentConfig, bus_address: str | None = None) -> None:
    """Refuse to manage interfaces that NetworkManager or mptcpd manage (see :mod:`edgepath_agent.netmanager`).

    Skipped with ``netns`` (the device's managers live in the host namespace, not in a
    test namespace); a dry run only warns (it changes nothing).

    Raises
    ------
    NetworkConflict
        Naming the manager, the interfaces and the way out.
    """
    found = check_coexistence(config.interfaces, bus_address)
    if config.backend == "networkmanager":  # cooperating: NetworkManager must be there; mptcpd still conflicts
        if not found.networkmanager.running:
            reason = found.networkmanager.error or "org.freedesktop.NetworkManager has no owner on the system bus"
            raise NetworkConflict(
                f"refusing to start: backend networkmanager, but NetworkManager is not running ({reason})"
            )
        found = replace(found, nm_managed=())
    elif config.netns is not None:
        return
    if found.networkmanager.error:
        log.info("NetworkManager check: %s", found.networkmanager.error)
    conflict = found.conflict
    if conflict is None:
        return
    if config.backend == "dry-run":
        log.warning("a real run would refuse to start: %s", conflict)
        return
    raise NetworkConflict(f"refusing to start: {conflict}")


class IpMissing(RuntimeError):
    """No ``ip`` (iproute2) binary on ``PATH`` where the configured backend or ``netns`` needs it."""


def require_ip(config: AgentConfig, which: Callable[[str], str | None] = shutil.which) -> None:
    """Refuse to start without ``ip`` where the agent runs it: the command and dry-run backends read and change
    routes and MPTCP endpoints with ``ip`` (a dry run reads the current state with it), and ``netns`` enters the
    namespace with ``ip netns exec``.

    Raises
    ------
    IpMissing
        Naming iproute2 and the alternative.
    """
    if config.backend not in ("command", "dry-run") and config.netns is None:
        return
    if which("ip") is not None:
        return
    why = f"backend = {config.backend}" if config.backend in ("command", "dry-run") else f"netns = {config.netns}"
    raise IpMissing(
        f"{why} runs ip(8) but no ip binary is on PATH: install iproute2 (apt install iproute2, dnf install "
        "iproute)" + (", or set backend = netlink" if config.backend == "command" and config.netns is None else "")
    )


class InterfaceMissing(ValueError):
    """Managed interfaces that this device (or the network namespace ``netns``) does not have."""


def interface_exists(name: str, netns: str | None = None) -> bool:
    """Whether network interface ``name`` exists here (in network namespace ``netns`` when given).

    Resolved with ``if_nametoindex(3)``, as ``ip link show dev NAME`` does (alternative names count);
    inside ``netns`` through :func:`~edgepath_agent.testbed.netns.call_in_netns`.

    Raises
    ------
    OSError
        When ``netns`` cannot be entered (no such namespace, no ``CAP_SYS_ADMIN``).
    """

    def lookup() -> bool:
        try:
            socket.if_nametoindex(name)
        except (OSError, ValueError):  # ENODEV; a name too long or with a NUL byte is no interface either
            return False
        return True

    if netns is None:
        return lookup()
    from edgepath_agent.testbed.netns import call_in_netns

    return call_in_netns(netns, lookup)


def _interface_names(netns: str | None) -> list[str]:
    """This device's interface names (for the hint of :class:`InterfaceMissing`); empty when unreadable."""
    try:
        if netns is None:
            return sorted(name for _, name in socket.if_nameindex())
        from edgepath_agent.testbed.netns import call_in_netns

        return sorted(name for _, name in call_in_netns(netns, socket.if_nameindex))
    except OSError:
        return []


def check_interfaces(config: AgentConfig, exists: Callable[[str, str | None], bool] | None = None) -> None:
    """Refuse to start with managed interfaces (``config.interfaces``) that this device does not have.

    Applies to a dry run too: it shows what the agent would do on this device, and an interface
    the device lacks can be neither probed, measured nor given routes. With ``netns`` the names
    are looked up in that network namespace.

    Parameters
    ----------
    config
        Agent settings (``interfaces``, ``netns``).
    exists
        ``(name, netns) → bool``; default :func:`interface_exists`, looked up at call time (a test
        seam: tests that run the agent with made-up names replace ``daemon.interface_exists``).

    Raises
    ------
    InterfaceMissing
        Naming every configured interface that does not exist (and the interfaces that do), or
        when ``netns`` cannot be entered to look.
    """
    exists = exists or interface_exists
    where = f"in network namespace {config.netns}" if config.netns else "on this device"
    try:
        missing = [name for name in config.interfaces if not exists(name, config.netns)]
    except OSError as exc:
        raise InterfaceMissing(f"cannot look up the interfaces {where}: {exc}") from exc
    if not missing:
        return
    names = ", ".join(missing)
    present = _interface_names(config.netns)
    raise InterfaceMissing(
        f"{'interface' if len(missing) == 1 else 'interfaces'} {names} "
        f"{'does' if len(missing) == 1 else 'do'} not exist {where}"
        + (f" (it has: {', '.join(present)})" if present else "")
        + "; give this device's interfaces with --interface NAME=ACCESS or [interfaces] in the settings file"
    )


class ServiceUnavailable(RuntimeError):
    """A run that had to hear from the service (``require_service``: ``run --steps N``) ran steps, and none of them
    got a recommendation: the service is down, the URLs name the wrong host or port, or it refused every request;
    or every step was skipped, no managed interface being able to carry a path. The message says which, naming
    the URLs tried and the last error. Raised after the state was restored, as on SIGTERM."""


def run_daemon(config: AgentConfig, max_steps: int | None = None, require_service: bool = False) -> int:
    """Run until SIGTERM/SIGINT (or ``max_steps`` steps); restore the state on a clean exit. Returns steps done.

    ``require_service``: a run whose steps all went without a recommendation from the service (none got an
    answer, or every one was skipped) is a failure (:class:`ServiceUnavailable`), not a clean stop. ``run
    --steps N`` asks for it (a smoke test must not pass against a service that is down); the daemon under
    systemd (no ``--steps``) does not: it keeps the last configuration and goes on asking.

    Raises
    ------
    NetworkConflict
        Before touching anything, when another manager owns the interfaces (:func:`ensure_sole_manager`).
    InterfaceMissing
        Before touching anything (a dry run too), when a managed interface does not exist on this
        device (:func:`check_interfaces`).
    IpMissing
        Before touching anything (a dry run too), when the backend needs ``ip`` and none is on ``PATH``.
    RouteMetricConflict
        Before touching anything (a dry run too), when a default route of an interface the agent does not manage
        has a metric the agent gives its own routes (``primary_metric``, ``secondary_metric`` …;
        :meth:`~edgepath_agent.applier.Applier.check_route_metrics`; with ``backend = "networkmanager"`` the metrics
        it gives the managed connections, ``ipv4.route-metric``:
        :meth:`~edgepath_agent.applier.networkmanager.NetworkManagerApplier.check_route_metrics`).
    CredentialsRefused
        When the service refuses this device's credentials; the state is restored first, as on SIGTERM.
    ServiceUnavailable
        With ``require_service``, when steps ran and none got a recommendation (:meth:`Agent.unanswered`); the
        state is restored first.
    RestoreIncomplete
        When the restore at stop left steps undone (every step was attempted; the journal is kept for
        ``edgepath-agent rollback``); it takes the place of any other error of the run.
    """
    require_ip(config)
    ensure_sole_manager(config)
    check_interfaces(config)  # after it: an interface another manager owns is refused as such (exit 3)
    agent = build_agent(config)
    try:  # every backend: NetworkManager, too, sets the route metrics the agent asks for (ipv4.route-metric)
        agent.applier.check_route_metrics()
    except RouteMetricConflict:
        agent.client.close()
        raise
    stop = threading.Event()
    if isinstance(agent.client, FailoverClient):
        agent.client.stop = stop  # SIGTERM ends the service retries in progress (no backoff wait, no retry)
    previous = install_stop_handlers(stop)
    try:
        done = agent.run(stop, max_steps)
    finally:
        try:
            agent.close()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    problem = agent.unanswered() if require_service else None
    if problem is not None:
        raise ServiceUnavailable(problem)
    return done


def install_stop_handlers(stop: threading.Event) -> dict[signal.Signals, Any]:
    """Make SIGTERM and SIGINT set ``stop`` (logged: ``signal 15: stopping``); returns the handlers they replaced.

    Only in this process: a child forked from it inherits the handler (pyroute2 forks one to open each netlink
    socket in a network namespace, ``backend = "netlink"`` with ``netns``, and ends it with SIGTERM). There the
    handler puts back the replaced one and delivers the signal again, so the child ends as it would have without
    the agent, instead of logging a stop the agent never made and running on.

    Raises
    ------
    ValueError
        When called from another thread than the main thread (:func:`signal.signal`).
    """
    owner = os.getpid()
    previous: dict[signal.Signals, Any] = {}

    def on_signal(signum: int, _frame: object) -> None:
        if os.getpid() != owner:  # a forked child: behave as before the agent installed this handler
            before = previous.get(signal.Signals(signum))
            signal.signal(signum, before if before is not None else signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        log.info("signal %s: stopping", signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, on_signal)
    return previous


def rollback(journal_path: Path, netns: str | None = None, dry_run: bool = False) -> Restored:
    """Restore the snapshot of the journal at ``journal_path``; returns the number of steps (run, or printed with
    ``dry_run``) and those skipped because the device they name no longer exists (its routes went with it:
    :meth:`~edgepath_agent.applier.core.Applier.rollback`; its NetworkManager connection too:
    :mod:`~edgepath_agent.applier.networkmanager`). With only such steps skipped, the journal is removed.

    The rollback acts in the network namespace the journal recorded (its snapshot was taken there), whichever
    namespace this process runs in (:func:`~edgepath_agent.applier.journal.rollback_netns`); ``netns`` is needed
    only for a journal that recorded none (version 1), and may name the recorded one. A journal written by the
    ``networkmanager`` backend names the interfaces whose applied connection changed: their saved profiles are
    reapplied (one step each), and the original values of the sysctls it changed (the congestion control): they
    are set back in the namespace it recorded (one step each; an older record names none).

    Raises
    ------
    JournalError
        When the file is not a journal, or ``netns`` names another namespace than the journal recorded (nothing
        is touched).
    PermissionError
        When this process may not read the journal.
    RestoreIncomplete
        When restore steps failed: every step was attempted (a NetworkManager record's sysctls also after a
        profile that could not be reapplied), ``failed`` names the failed ones; the journal is kept: retry.
    ApplyError
        When the current state cannot be read (the journal is kept: retry).
    """
    from edgepath_agent.applier import commands
    from edgepath_agent.applier.journal import rollback_netns
    from edgepath_agent.applier.networkmanager import journal_backend, record_sysctls, restore_record

    record = journal_backend(journal_path)
    if record is not None:
        names = [str(n) for n in record.get("interfaces", [])]
        sysctls = record_sysctls(record)
        where = rollback_netns(Journal(journal_path), netns)
        if dry_run:
            if names:
                print("would reapply the saved NetworkManager profiles of " + ", ".join(names))
            for key, value in sorted(sysctls.items()):
                print(f"would run: {' '.join(commands.in_netns(commands.sysctl_set(key, value), where))}")
            return Restored(len(names) + len(sysctls))
        done = restore_record(names, sysctls, where)  # every step attempted; RestoreIncomplete keeps the record
        journal_path.unlink(missing_ok=True)
        return done
    journal = Journal(journal_path)
    if journal.snapshot is None:
        return Restored(0)
    netns = rollback_netns(journal, netns)  # where the snapshot was taken, not where this process runs
    keys = tuple(k for k, _ in journal.snapshot.sysctls)
    backend: Any = CommandBackend(netns=netns)
    if dry_run:
        backend = DryRunBackend.from_backend(backend, keys)
        journal = Journal(None)
        journal.snapshot = Journal(journal_path).snapshot
    config = ApplierConfig(manage_cc=bool(keys))
    applier = Applier(backend, journal, config)
    return Restored(len(applier.rollback()), applier.skipped)


def describe(result: StepResult) -> Mapping[str, Any]:
    """JSON-friendly summary of a step (for logs and the testbed). ``throughput_bps``, ``completion_s`` and
    ``reward`` are those of ``outcome_decision_id``'s outcome: under the passive meter the previous decision's."""
    m = result.measurement
    return {
        "decision_id": result.recommendation.decision_id if result.recommendation else None,
        "outcome_decision_id": result.outcome.get("decision_id") if result.outcome else None,
        "primary": result.applied.primary if result.applied else None,
        "kept_last": result.kept_last,
        "throughput_bps": m.throughput_bps if m else None,
        "completion_s": m.completion_s if m else None,
        "reward": result.ack.reward if result.ack else None,
        "error": result.error,
        "probe_error": result.probe_error,
    }
