"""Agent-side hardening: what a recommendation may make this device do, and how the agent talks to the service.

The service is trusted to advise, not to command: a compromised or buggy
service (or a forged reply) must not make the agent touch interfaces,
addresses or kernel settings it does not own, nor run anything but the fixed
argv the applier builds. Everything here is pure and raises
:class:`UnsafeDecision` (a ``ValueError``) with the reason.

* :func:`validate_interface_name` — Linux ``dev_valid_name()`` rules
  (``net/core/dev.c``: 1..15 bytes, not ``.``/``..``, no ``/``, ``:`` or
  whitespace), and no leading ``-`` (never looks like an option to ``ip``).
* :func:`check_own_interface` / :func:`check_own_address` — the name or address
  must be one of this device's own (as the collectors read them).
* :data:`SYSCTL_ALLOWLIST` and :func:`check_sysctl` — only these keys, with
  values from the kernel's own list (``net.ipv4.tcp_allowed_congestion_control``)
  and of the kernel's shape (``TCP_CA_NAME_MAX`` = 16).
* :func:`check_argv` — a command is a list of plain strings starting with
  ``ip`` or ``sysctl``; never a shell string.
* :func:`safe_decision` — the validated subset of a typed recommendation
  (:class:`~edgepath_agent.messages.Recommendation`) the applier may act on.
* :func:`check_key_file`, :func:`check_tls_files` and :class:`ClientCredentials` — TLS to the service
  with certificate verification; a private key readable by group or others is
  refused (as OpenSSH does for identity files).
"""

from __future__ import annotations

import ipaddress
import math
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic

from edgepath_agent.messages import Recommendation, SubflowWeight

IFNAMSIZ = 16  # include/uapi/linux/if.h, including the terminating NUL
TCP_CA_NAME_MAX = 16  # include/net/tcp.h

#: Kernel settings the agent may change, and the shape of their values.
SYSCTL_ALLOWLIST: dict[str, re.Pattern[str]] = {
    "net.ipv4.tcp_congestion_control": re.compile(rf"^[a-z0-9_]{{1,{TCP_CA_NAME_MAX - 1}}}$"),
    "net.mptcp.scheduler": re.compile(r"^[a-z0-9_]{1,15}$"),
}
#: Programs the applier may run (argv[0]); ``ip netns exec NAME`` wraps these only.
ALLOWED_PROGRAMS = frozenset({"ip", "sysctl"})


class UnsafeDecision(ValueError):
    """A recommendation (or command) the agent refuses to apply."""


def validate_interface_name(name: object) -> str:
    """``name`` if it is a valid Linux interface name, else raise :class:`UnsafeDecision`."""
    if not isinstance(name, str):
        raise UnsafeDecision(f"interface name must be a string, got {type(name).__name__}")
    raw = name.encode("utf-8", "surrogatepass")
    if not 1 <= len(raw) < IFNAMSIZ:
        raise UnsafeDecision(f"interface name {name!r} must have 1..{IFNAMSIZ - 1} bytes")
    if name in (".", "..") or name.startswith("-"):
        raise UnsafeDecision(f"interface name {name!r} is not allowed")
    if any(c in "/:" or c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise UnsafeDecision(f"interface name {name!r} contains '/', ':', whitespace or control characters")
    return name


def check_own_interface(name: object, own_interfaces: Iterable[str]) -> str:
    """``name`` if it is a valid name of one of this device's interfaces."""
    valid = validate_interface_name(name)
    if valid not in set(own_interfaces):
        raise UnsafeDecision(f"interface {valid!r} is not one of this device's interfaces")
    return valid


def check_own_address(address: object, own_addresses: Mapping[str, Sequence[str]], interface: str | None = None) -> str:
    """``address`` (normalised) if it is an address this device has (on ``interface``, when given)."""
    if not isinstance(address, str):
        raise UnsafeDecision("address must be a string")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise UnsafeDecision(f"{address!r} is not an IP address") from None
    owned = {
        ipaddress.ip_address(a.split("/")[0])
        for name, addrs in own_addresses.items()
        if interface is None or name == interface
        for a in addrs
    }
    if ip not in owned:
        where = f" on {interface}" if interface else ""
        raise UnsafeDecision(f"{address} is not an address of this device{where}")
    return str(ip)


def check_sysctl(key: object, value: object, allowed_values: Iterable[str] | None = None) -> tuple[str, str]:
    """(key, value) if ``key`` is allowlisted, ``value`` has its shape and (when given) is kernel-allowed."""
    if not isinstance(key, str) or key not in SYSCTL_ALLOWLIST:
        raise UnsafeDecision(f"sysctl {key!r} is not in the agent's allowlist")
    if not isinstance(value, str) or not SYSCTL_ALLOWLIST[key].fullmatch(value):
        raise UnsafeDecision(f"value {value!r} is not a valid {key}")
    if allowed_values is not None and value not in set(allowed_values):
        raise UnsafeDecision(f"{key}={value} is not allowed by this kernel")
    return key, value


def check_argv(argv: object) -> list[str]:
    """``argv`` if it is a list of NUL-free strings for an allowed program; never a shell string."""
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)) or not argv:
        raise UnsafeDecision("a command must be a non-empty argv list, never a string")
    if not all(isinstance(a, str) and "\x00" not in a for a in argv):
        raise UnsafeDecision("argv elements must be strings without NUL")
    args = list(argv)
    program = args[0]
    if args[:3] == ["ip", "netns", "exec"] and len(args) > 4:
        program = args[4]
    if program not in ALLOWED_PROGRAMS:
        raise UnsafeDecision(f"program {program!r} is not one the applier runs")
    return args


@dataclass(frozen=True)
class SafeDecision:
    """The part of a recommendation the applier may act on, validated against this device.

    ``address`` is the primary path's source address when the recommendation names one
    (one of the device's own on ``primary``); ``None`` otherwise.
    """

    primary: str
    weights: dict[str, float] = field(default_factory=dict)
    congestion_control: str | None = None
    address: str | None = None
    steering: SteeringPlan | None = None
    #: MLPM's ``scheduler.prioritised_subflow`` (one of the device's interfaces), ``None`` when absent.
    prioritised: str | None = None
    #: The upstream guard's ``demoted`` interfaces (the device's own): ``backup`` endpoints unless primary.
    demoted: tuple[str, ...] = ()


#: ATSSS steering modes the service may send (3GPP TS 23.501 §5.32.8).
STEERING_MODES = frozenset({"ACTIVE_STANDBY", "SMALLEST_DELAY", "LOAD_BALANCING", "PRIORITY_BASED", "REDUNDANT"})
#: Modes whose non-initial access becomes an MPTCP ``backup`` endpoint on a mainline kernel (issue 19):
#: Active-Standby's standby, Priority-based's low priority (mainline has no overflow-on-congestion).
#: Smallest Delay, Load-Balancing and Redundant keep both endpoints active (the default scheduler already
#: prefers the lowest-RTT non-backup subflow; no weighted or duplicating scheduler exists in mainline).
STEERING_BACKUP_MODES = frozenset({"ACTIVE_STANDBY", "PRIORITY_BASED"})


@dataclass(frozen=True)
class SteeringPlan:
    """The device's match-all ATSSS rule as the applier uses it: mode, initial-subflow interface, backups."""

    mode: str
    initial: str
    backup: tuple[str, ...]


def typed_recommendation(recommendation: Recommendation | Mapping[str, Any]) -> Recommendation:
    """``recommendation`` as the typed reply: as it is when already parsed (the client's replies), parsed once
    when a mapping (fixed policies, hand-written recommendations); a wrong shape raises :class:`UnsafeDecision`
    naming the field."""
    if isinstance(recommendation, Recommendation):
        return recommendation
    if not isinstance(recommendation, Mapping):
        raise UnsafeDecision("recommendation must be a mapping")
    try:
        return Recommendation.model_validate(recommendation)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "recommendation"
        if field == "primary_path" and first["type"] == "missing":
            raise UnsafeDecision("recommendation has no primary_path") from None
        raise UnsafeDecision(f"{field}: {first['msg']}") from None


def decision_id_of(recommendation: object) -> str | None:
    """The ``decision_id`` of a typed or mapping recommendation, for logs (None when it has none)."""
    if isinstance(recommendation, Recommendation):
        return recommendation.decision_id
    value = recommendation.get("decision_id") if isinstance(recommendation, Mapping) else None
    return value if isinstance(value, str) else None


def _steering_plan(recommendation: Recommendation, own: set[str]) -> SteeringPlan | None:
    """The last (match-all) rule of ``steering.rules``, validated; None when the recommendation has none."""
    steering = recommendation.steering
    if steering is None:
        return None
    if not steering.rules:
        raise UnsafeDecision("steering.rules must be a non-empty list of rules")
    rule = steering.rules[-1]
    mode = rule.steering_mode
    if mode not in STEERING_MODES:
        raise UnsafeDecision(f"unknown steering mode {mode!r}")
    if not rule.accesses:
        raise UnsafeDecision("steering rule has no accesses")
    names = [check_own_interface(a.interface, own) for a in rule.accesses]
    initial = [n for n, a in zip(names, rule.accesses, strict=True) if a.initial_subflow]
    if len(initial) != 1:
        raise UnsafeDecision("steering rule must name exactly one initial-subflow access")
    backup = tuple(n for n in names if n != initial[0]) if mode in STEERING_BACKUP_MODES else ()
    return SteeringPlan(str(mode), initial[0], backup)


def _weight_items(recommendation: Recommendation) -> list[SubflowWeight]:
    """The ``{interface, weight}`` items of every weight shape a recommendation may carry (unchecked)."""
    items: list[SubflowWeight] = []
    if recommendation.scheduler is not None:  # service's SchedulerAdvice.weights; older ``subflows``
        items += [*recommendation.scheduler.weights, *recommendation.scheduler.subflows]
    return items + list(recommendation.scheduler_weights)


def safe_decision(
    recommendation: Recommendation | Mapping[str, Any],
    own_interfaces: Iterable[str],
    allowed_cc: Iterable[str] | None = None,
    own_addresses: Mapping[str, Sequence[str]] | None = None,
) -> SafeDecision:
    """Validate a recommendation against this device; raises :class:`UnsafeDecision`.

    ``recommendation``: the typed reply (:class:`~edgepath_agent.messages.Recommendation`), or a
    mapping of its REST JSON shape, parsed once by :func:`typed_recommendation`.
    Reads ``primary_path.{interface, address}``, the scheduler weights
    (``scheduler.weights[]`` / ``scheduler.subflows[]`` of ``{interface, weight}``,
    or ``scheduler_weights`` as such a list or a mapping), ``scheduler.prioritised_subflow``
    (a valid interface name; ignored when it is not one of the device's), ``demoted`` (the upstream guard's,
    :meth:`~edgepath_agent.messages.Recommendation.with_primary`: valid names, those not the device's ignored),
    ``sysctls`` (a mapping), and ``congestion.{mptcp_level, subflow_level}`` / ``congestion_control``;
    ignores everything else. Interfaces must be the device's own, an address one
    of ``own_addresses`` on the primary interface, weights finite in [0, 1],
    sysctl keys allowlisted (:data:`SYSCTL_ALLOWLIST`), congestion-control names
    of the kernel's shape. A well-formed congestion control the kernel does not
    allow (``allowed_cc``) is skipped for the next advice, not refused (the
    applier then falls back by profile).
    """
    rec = typed_recommendation(recommendation)
    own = set(own_interfaces)
    primary = check_own_interface(rec.primary_path.interface, own)
    address = None
    if rec.primary_path.address is not None:
        address = check_own_address(rec.primary_path.address, own_addresses or {}, interface=primary)
    weights: dict[str, float] = {}
    for sub in _weight_items(rec):
        name = check_own_interface(sub.interface, own)
        if sub.address is not None:
            check_own_address(sub.address, own_addresses or {}, interface=name)
        w = sub.weight
        if not math.isfinite(w) or not 0 <= w <= 1:
            raise UnsafeDecision(f"weight of {name} must be a number in [0, 1], got {w!r}")
        weights[name] = float(w)
    candidates: list[object] = []
    for key, value in rec.sysctls.items():
        check_sysctl(key, value)  # allowlist and shape; only the congestion control is acted on
        if key == "net.ipv4.tcp_congestion_control":
            candidates.append(value)
    if rec.congestion is not None:
        candidates += [v for v in (rec.congestion.mptcp_level, rec.congestion.subflow_level) if v]
    if rec.congestion_control:
        candidates.append(rec.congestion_control)
    allowed = None if allowed_cc is None else set(allowed_cc)
    cc = None
    for candidate in candidates:
        value = check_sysctl("net.ipv4.tcp_congestion_control", candidate)[1]  # malformed: refuse
        if cc is None and (allowed is None or value in allowed):
            cc = value
    prioritised = None
    if rec.scheduler is not None and rec.scheduler.prioritised_subflow:
        name = validate_interface_name(rec.scheduler.prioritised_subflow)
        prioritised = name if name in own else None  # a subflow the device lacks: nothing to prioritise
    demoted = tuple(n for n in map(validate_interface_name, rec.demoted) if n in own)  # a path gone: nothing to demote
    return SafeDecision(primary, weights, cc, address, _steering_plan(rec, own), prioritised, demoted)


def check_key_file(path: Path | str, setting: str = "key_file") -> Path:
    """``path`` if it is a regular file readable by its owner only; else raise :class:`PermissionError`.

    ``setting``: the setting that names the file (``key_file``, the device's private key; ``token_file``, its
    bearer token), named in the message.
    """
    p = Path(path)
    what = {"key_file": "private key", "token_file": "bearer token"}.get(setting, "secret")
    st = p.stat()
    if not stat.S_ISREG(st.st_mode):
        raise PermissionError(f"{setting} {p}: the {what} must be a regular file")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PermissionError(
            f"{setting} {p}: the {what} is accessible by group/others (mode {st.st_mode & 0o777:o}); chmod 600 {p}"
        )
    return p


def check_tls_files(ca_file: Path | None, cert_file: Path | None, key_file: Path | None) -> None:
    """Load the TLS material as the clients will (OpenSSH-like: at start, not at the first call).

    ``ca_file`` must hold PEM certificates; ``cert_file`` a PEM certificate and ``key_file`` its unencrypted PEM
    private key. Python's :mod:`ssl` (OpenSSL, as gRPC's BoringSSL and httpx read the same files) does the
    parsing. Without this a non-PEM ``ca_file`` or a key of another certificate surfaced as a traceback
    (``[X509: KEY_VALUES_MISMATCH]``) or, over gRPC, as a service "not answering".

    Raises
    ------
    ValueError
        Naming the setting and the file, with OpenSSL's reason: a file that cannot be read, no PEM certificate,
        no usable private key, or a key that is not the certificate's.
    """
    import ssl

    def reason(exc: Exception) -> str:
        if isinstance(exc, ssl.SSLError):
            return str(exc.reason or exc)
        return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for setting, path, what in (
        ("ca_file", ca_file, "the CA certificate(s) that signed the service's certificate"),
        ("cert_file", cert_file, "this device's certificate"),
    ):
        if path is None:
            continue
        try:
            context.load_verify_locations(cafile=str(path))
        except ssl.SSLError as exc:
            raise ValueError(
                f"{setting}: {path} holds no PEM certificate ({reason(exc)}): give {what} in PEM form "
                "(-----BEGIN CERTIFICATE-----)"
            ) from None
        except OSError as exc:
            raise ValueError(f"{setting}: {path} cannot be read ({reason(exc)})") from None
    if cert_file is None or key_file is None:
        return
    try:
        context.load_cert_chain(str(cert_file), str(key_file), password=lambda: b"")
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ValueError(
                f"key_file: {key_file} is not the private key of cert_file {cert_file} (KEY_VALUES_MISMATCH): give "
                "the key the certificate was issued for"
            ) from None
        raise ValueError(
            f"key_file: {key_file} holds no usable private key ({reason(exc)}): give the certificate's private key "
            "in PEM form, unencrypted"
        ) from None
    except OSError as exc:
        raise ValueError(f"key_file: {key_file} cannot be read ({reason(exc)})") from None


@dataclass(frozen=True)
class ClientCredentials:
    """How the agent proves who it is and checks who the service is.

    Parameters
    ----------
    ca_file:
        CA bundle that signed the service's certificate (verification is always on with TLS).
    cert_file, key_file:
        Device certificate and key for mTLS (gRPC); the key must be mode 0600.
    token:
        Bearer token (``edgepath tokens add``) or JWT for REST (and gRPC metadata).
    """

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")
        if self.key_file is not None:
            check_key_file(self.key_file)

    def grpc_channel_credentials(self) -> Any:
        """``grpc.ssl_channel_credentials`` (server verified against ``ca_file``, or the system roots)."""
        import grpc

        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_file.read_bytes() if self.ca_file else None,
            private_key=check_key_file(self.key_file).read_bytes() if self.key_file else None,
            certificate_chain=self.cert_file.read_bytes() if self.cert_file else None,
        )

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def httpx_options(self) -> dict[str, Any]:
        """``httpx.Client`` keyword arguments: verification against ``ca_file``, client cert, bearer header."""
        import ssl

        options: dict[str, Any] = {}
        if self.ca_file is not None or self.cert_file is not None:
            context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
            if self.cert_file is not None and self.key_file is not None:
                context.load_cert_chain(str(self.cert_file), str(check_key_file(self.key_file)))
            options["verify"] = context
        if self.token:
            options["headers"] = {"Authorization": f"Bearer {self.token}"}
        return options
