"""Domain models shared by the transports, the decision plane and the engines.

These pydantic models carry the validation rules of the wire API: the REST
transport uses them as request/response bodies and the gRPC transport converts
protobuf messages into them, so both transports reject the same inputs with the
same field names.

Ranges (inclusive) accepted for each measurement, and their source:

===================  ==============  ======================================================
field                range           source
===================  ==============  ======================================================
wifi_rssi_dbm        [-127, 0] dBm   nl80211 ``NL80211_STA_INFO_SIGNAL`` is an s8 in dBm
link_speed_mbps      [0, 100000]     802.11be tops out near 46 Gbit/s; 100 GbE for Ethernet
frequency_mhz        [0, 100000]     802.11ad/ay use 58–70 GHz channels
rsrp_dbm             [-156, -31]     3GPP TS 36.133 §9.1.4 extended RSRP report range
rsrq_db              [-34, 2.5]      3GPP TS 36.133 §9.1.7 extended RSRQ report range
sinr_db              [-30, 50]       3GPP TS 36.133 §9.1.17 RS-SINR is -23..40; Android RSSNR
                                     readings down to -30 occur in real data (mobilebandwidth 4G)
cqi                  [0, 15]         3GPP TS 36.213 Table 7.2.3-1
cell_rssi_dbm        [-140, 0]       Android CellSignalStrengthLte#getRssi -113..-51; margin
rtt_ms / latency_ms  [0, 600000]     ten minutes: anything longer is a broken clock
duration_ms, RTT     [0.001, …] ms   ``MIN_MEASURED_MS``: below 1 µs is no measurement (loopback
  samples                            RTT is ~10 µs); a divisor this small once underflowed to 0
loss                 [0, 1]          fraction
throughput_bps       [0, 1e12]       one terabit/s
max_link_speed_mbps  [0, 100000]     as link_speed_mbps (the device's maximum)
wifi_rssi_spread_db  [0, 100]        std. deviation of dBm readings: > 100 dB is not a radio
rsrp_spread_db       [0, 100]        idem for RSRP
channel_bandwidth_mhz [0, 400]       3GPP TS 38.101-2: NR FR2 carriers up to 400 MHz (LTE ≤ 20)
hol_degree_ms        [-600000,       HoL blocking degree ζ_av (Łuczak et al. 2023, Eq. 8): derived as
                     600000] ms      v − max τ, so an estimate may be negative; ten minutes either way
protocol_delay_ms    [0, 600000] ms  protocol delay v_av (Eq. 3), as rtt_ms
drop_rate            [0, 1]          fraction of data segments retransmitted (Eq. 12 / 100)
===================  ==============  ======================================================

NaN and infinities are rejected everywhere. Identifiers (issue 9): ``device_id`` has no
whitespace or control characters (log/header injection), ``decision_id`` only the
``secrets.token_urlsafe`` alphabet, interface names follow the kernel's ``dev_valid_name``
(no ``/``, no whitespace); lengths are bounded (``MAX_NAME_LEN``, 128 for ids) and so are
lists (``MAX_INTERFACES``, ``MAX_HISTORY_SAMPLES``, ``MAX_CANDIDATES``) and whole messages
(``max_message_bytes`` setting, both transports).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from operator import itemgetter
from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing_extensions on Python < 3.12

from edgepath.errors import PATTERN_MEANINGS, FieldError


class AccessType(str, enum.Enum):
    """Radio access technology of an interface (an arm of the primary-path bandit)."""

    WIFI = "WIFI"
    LTE = "LTE"
    NR = "NR"
    ETHERNET = "ETHERNET"


CELLULAR = frozenset({AccessType.LTE, AccessType.NR})

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

#: What a device sends as a number: a JSON number (an integer too, for a float) and nothing else. pydantic's lax mode
#: would also take ``true`` as 1 and ``"12"`` as 12; a request carrying those is a client's bug, refused (422 naming
#: the field) rather than decided on. Server-made models keep plain types (numpy scalars are no ``int``).
Number = Annotated[float, Strict()]


def _json_integer(value: Any) -> Any:
    """Refuse, before pydantic's integer validation, the JSON values it would coerce that are not integers:
    ``true``/``false`` (taken as 1/0) and strings (``"1"``).

    Raises
    ------
    pydantic_core.PydanticCustomError
        ``int_type``, as pydantic's own message for a value that is no integer.
    """
    if isinstance(value, bool | str):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


#: Of an integer member (last in its ``Annotated``, after any bounds, so that the OpenAPI schema keeps them): a JSON
#: integer, or a number with a zero fraction (``9.0``: an integer to JSON Schema 2020-12, OpenAPI 3.1's), is taken; a
#: boolean, a string or ``9.5`` is invalid (422 / MEC 015's 400 naming the member).
JSON_INTEGER = BeforeValidator(_json_integer)
#: What a device sends as an integer (CQI, sizes in bytes): a JSON integer and nothing else (no ``true``, no ``"9"``,
#: no ``9.0``), checked in pydantic-core with its bounds (the MEC 015 API, whose spec is OpenAPI 3.1, takes ``9.0``
#: too: :data:`JSON_INTEGER`).
Integer = Annotated[int, Strict()]

MAX_INTERFACES = 16
#: Smallest duration or RTT sample accepted, ms (1 µs). Smaller values are no measurement, and as divisors
#: they underflowed: 5e-324 ms / 1000 is 0.0 (issue 17: a 500 from a server_transfer).
MIN_MEASURED_MS = 1e-3
MAX_NAME_LEN = 64
# Security (issue 9): identifiers carry no whitespace or control characters (no log/header injection);
# interface names follow the kernel's dev_valid_name() (no '/', no whitespace). Rust-regex syntax (pydantic-core),
# which Python's re and ECMAScript read alike (no \p{..} classes: schema-driven clients and fuzzers use them).
# A device id also carries no C1 control (U+0080-U+009F: U+009B is a terminal's CSI) and no invisible format
# character that reorders or hides text where it is shown (Unicode general category Cf as far as text direction
# and zero width go: soft hyphen, Arabic letter mark, Mongolian vowel separator, zero-width and direction marks,
# bidirectional embeddings/overrides/isolates, word joiner and invisible operators, BOM; "Trojan Source",
# CVE-2021-42574): "phone\u202e1-" reads as another device in a log or a dashboard.
DEVICE_ID_PATTERN = (
    r"^[^\s\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]+$"
)
DECISION_ID_PATTERN = r"^[A-Za-z0-9_-]+$"  # secrets.token_urlsafe alphabet
IFNAME_PATTERN = r"^[^/\s\x00-\x1f\x7f]+$"
PATTERN_MEANINGS.update(
    {
        DEVICE_ID_PATTERN: "must have no whitespace, control or invisible formatting characters",
        DECISION_ID_PATTERN: "must be a decision_id as Recommend answers it (letters, digits, '-' and '_')",
        IFNAME_PATTERN: "must be an interface name: no '/', whitespace or control characters",
    }
)


class InterfaceContext(BaseModel):
    """Radio context of one interface; every measurement is optional."""

    model_config = _STRICT

    name: str = Field(
        min_length=1, max_length=MAX_NAME_LEN, pattern=IFNAME_PATTERN, description="Kernel interface name, e.g. wlan0"
    )
    access_type: AccessType
    wifi_rssi_dbm: Number | None = Field(None, ge=-127.0, le=0.0, description="WiFi RSSI, dBm")
    link_speed_mbps: Number | None = Field(None, ge=0.0, le=100_000.0, description="Link speed, Mbit/s")
    frequency_mhz: Number | None = Field(None, ge=0.0, le=100_000.0, description="Centre frequency, MHz")
    rsrp_dbm: Number | None = Field(None, ge=-156.0, le=-31.0, description="RSRP, dBm")
    rsrq_db: Number | None = Field(None, ge=-34.0, le=2.5, description="RSRQ, dB")
    sinr_db: Number | None = Field(None, ge=-30.0, le=50.0, description="SINR / RSSNR, dB")
    cqi: Integer | None = Field(None, ge=0, le=15, description="Channel quality indicator")
    cell_rssi_dbm: Number | None = Field(None, ge=-140.0, le=0.0, description="Cellular RSSI, dBm")
    rtt_ms: Number | None = Field(None, ge=0.0, le=600_000.0, description="Path RTT, ms")
    loss: Number | None = Field(None, ge=0.0, le=1.0, description="Path loss, fraction")
    # --- warm-start features (issue 8): statistics of per-test reading series, capabilities ---
    wifi_rssi_spread_db: Number | None = Field(
        None, ge=0.0, le=100.0, description="Std. deviation of the WiFi RSSI readings of the last test, dB"
    )
    max_link_speed_mbps: Number | None = Field(
        None, ge=0.0, le=100_000.0, description="Maximum link speed the device supports (WiFi Rx), Mbit/s"
    )
    rsrp_spread_db: Number | None = Field(
        None, ge=0.0, le=100.0, description="Std. deviation of the RSRP readings of the last test, dB"
    )
    channel_bandwidth_mhz: Number | None = Field(
        None, ge=0.0, le=400.0, description="Cellular channel bandwidth, MHz (LTE ≤ 20, NR FR2 ≤ 400)"
    )
    # --- end warm-start features ---


# --- MLPM scheduler weights + congestion-control advice (issue 3) -----------------------------------------------
#: Samples per feature a request may carry (the engine uses the last ``mlpm_window`` of them, default 20).
MAX_HISTORY_SAMPLES = 64
#: Entries per kernel capability list, and characters per algorithm name.
MAX_CAPABILITIES = 32
_ALGO_NAME = r"^[A-Za-z0-9_.\-]{1,32}$"
#: Timestamps: milliseconds on the device's clock (any origin, e.g. Unix epoch or CLOCK_MONOTONIC).
TimestampMs = Annotated[float, Strict(), Field(ge=0.0, le=1e13, description="Sample time, ms on the device clock")]
#: A history sample's RTT, ms, and throughput, bit/s.
SampleRttMs = Annotated[float, Strict(), Field(ge=0.0, le=600_000.0, description="RTT, ms")]
SampleThroughputBps = Annotated[float, Strict(), Field(ge=0.0, le=1e12, description="Throughput, bit/s")]


class ApplicationProfile(enum.StrEnum):
    """What the application needs (selects MLPM's feature weights and the congestion-control metric)."""

    UNSPECIFIED = "UNSPECIFIED"
    STREAMING = "STREAMING"
    BULK = "BULK"
    LOSS_SENSITIVE = "LOSS_SENSITIVE"
    INTERACTIVE = "INTERACTIVE"


#: A sample's validation settings: what ``_STRICT`` says, without ``frozen`` (a TypedDict validates into a dict).
_SAMPLE = ConfigDict(extra="forbid", allow_inf_nan=False)


# The samples are TypedDicts, not models (read as ``sample["rtt_ms"]``): an agent's context carries up to 4 × 64 of
# them, and pydantic-core validates a typed dict in ~60 % of a model's time (issue 16: 18 against 29 µs for a history
# of 2 × 20 samples). The JSON schema and the validation errors (field names, bounds) are the same.
class RttSample(TypedDict):
    """One RTT measurement of a subflow."""

    __pydantic_config__ = _SAMPLE  # type: ignore[misc]

    t_ms: TimestampMs
    rtt_ms: SampleRttMs


class ThroughputSample(TypedDict):
    """One throughput measurement of a subflow."""

    __pydantic_config__ = _SAMPLE  # type: ignore[misc]

    t_ms: TimestampMs
    throughput_bps: SampleThroughputBps


#: A history's quantities in their two forms: (sample objects field, time column, value column).
_HISTORY_FORMS = (("rtt_samples", "rtt_t_ms", "rtt_ms"), ("throughput_samples", "throughput_t_ms", "throughput_bps"))


class SubflowHistory(BaseModel):
    """Recent RTT and throughput samples of the subflow on one interface (MLPM's time series).

    Each quantity comes as sample objects (`rtt_samples`) or as two columns of equal length (`rtt_t_ms`, `rtt_ms`:
    the time of each RTT and the RTT), not both; likewise throughput. The columns need no object per sample on
    either transport (what the agent sends)."""

    model_config = _STRICT

    interface: str = Field(min_length=1, max_length=MAX_NAME_LEN, description="Names one of `interfaces`")
    rtt_samples: list[RttSample] = Field(default_factory=list, max_length=MAX_HISTORY_SAMPLES)
    throughput_samples: list[ThroughputSample] = Field(default_factory=list, max_length=MAX_HISTORY_SAMPLES)
    rtt_t_ms: list[TimestampMs] = Field(
        default_factory=list, max_length=MAX_HISTORY_SAMPLES, description="Time of each of `rtt_ms`, ms"
    )
    rtt_ms: list[SampleRttMs] = Field(
        default_factory=list, max_length=MAX_HISTORY_SAMPLES, description="RTT samples, ms (a column)"
    )
    throughput_t_ms: list[TimestampMs] = Field(
        default_factory=list, max_length=MAX_HISTORY_SAMPLES, description="Time of each of `throughput_bps`, ms"
    )
    throughput_bps: list[SampleThroughputBps] = Field(
        default_factory=list, max_length=MAX_HISTORY_SAMPLES, description="Throughput samples, bit/s (a column)"
    )

    @model_validator(mode="after")
    def _one_form_per_quantity(self) -> SubflowHistory:
        """Columns of equal length, and not beside sample objects of the same quantity.

        Raises
        ------
        ValueError
            Naming the fields (the caller's 422 / ``INVALID_ARGUMENT``).
        """
        for objects, times, values in _HISTORY_FORMS:
            t, v = getattr(self, times), getattr(self, values)
            if len(t) != len(v):
                raise FieldError(values, f"{times} has {len(t)} entries but {values} has {len(v)}: one time per sample")
            if t and getattr(self, objects):
                raise FieldError(objects, f"give the samples either as {objects} or as {times}/{values}, not both")
        return self

    def rtt_columns(self) -> tuple[Sequence[float], Sequence[float]]:
        """The RTT samples as columns (times, ms; RTTs, ms), from whichever form the device sent."""
        if self.rtt_samples:
            return list(map(_T_MS, self.rtt_samples)), list(map(_RTT_MS, self.rtt_samples))
        return self.rtt_t_ms, self.rtt_ms

    def throughput_columns(self) -> tuple[Sequence[float], Sequence[float]]:
        """The throughput samples as columns (times, ms; throughputs, bit/s), from whichever form was sent."""
        if self.throughput_samples:
            return list(map(_T_MS, self.throughput_samples)), list(map(_THROUGHPUT_BPS, self.throughput_samples))
        return self.throughput_t_ms, self.throughput_bps


_T_MS, _RTT_MS, _THROUGHPUT_BPS = itemgetter("t_ms"), itemgetter("rtt_ms"), itemgetter("throughput_bps")


AlgorithmName = Annotated[str, Field(pattern=_ALGO_NAME)]


class KernelCapabilities(BaseModel):
    """What the device's kernel offers, as the agent read it from sysctl (the service's only class for it: the
    request field, the congestion engine's input and the gRPC conversion all use this one)."""

    model_config = _STRICT

    available_congestion_controls: list[AlgorithmName] = Field(
        default_factory=list, max_length=MAX_CAPABILITIES, description="net.ipv4.tcp_available_congestion_control"
    )
    allowed_congestion_controls: list[AlgorithmName] = Field(
        default_factory=list, max_length=MAX_CAPABILITIES, description="net.ipv4.tcp_allowed_congestion_control"
    )
    mptcp_schedulers: list[AlgorithmName] = Field(
        default_factory=list, max_length=MAX_CAPABILITIES, description="net.mptcp.available_schedulers"
    )
    path_managers: list[AlgorithmName] = Field(
        default_factory=list, max_length=MAX_CAPABILITIES, description="net.mptcp.available_path_managers"
    )

    @property
    def reported(self) -> bool:
        """True when the agent reported any congestion-control list (else a mainline kernel is assumed)."""
        return bool(self.available_congestion_controls or self.allowed_congestion_controls)


class SubflowWeight(BaseModel):
    """MLPM output for one subflow: its weight and the forecasts it was scored on (None = unknown)."""

    model_config = ConfigDict(frozen=True)

    interface: str
    weight: float = Field(ge=0.0, le=1.0, description="Share of traffic; weights of a response sum to 1")
    score: float = Field(ge=0.0, le=1.0, description="Classifier output σ(w·f + b)")
    rtt_ms: float | None = None
    rtt_slope_ms_per_s: float | None = None
    rtt_forecast_ms: float | None = None
    rtt_samples: int = 0
    throughput_bps: float | None = None
    throughput_slope_bps_per_s: float | None = None
    throughput_forecast_bps: float | None = None
    throughput_samples: int = 0


class SchedulerAdvice(BaseModel):
    """MLPM scheduler weights (Silva et al., HPCS 2020)."""

    model_config = ConfigDict(frozen=True)

    weights: list[SubflowWeight]
    prioritised_subflow: str = Field(description="Interface whose subflow should carry prioritised packets")
    priority: str = Field(description="latency, balanced or throughput")
    features_used: list[str]
    horizon_s: float
    bias: float
    reason: str


class CongestionAdvice(BaseModel):
    """Congestion-control pair from Łuczak et al. 2023, Table 3, filtered by the kernel's capabilities."""

    model_config = ConfigDict(frozen=True)

    profile: ApplicationProfile
    mptcp_level: str = Field(description="lia, olia, balia, wvegas; empty on the mainline fallback")
    subflow_level: str = Field(
        description="reno, cubic, bbr (or the edge's best measured algorithm the kernel offers, when edge "
        "measurements override); empty when none is usable (keep the default)"
    )
    deciding_metric: str
    deciding_value: float
    mainline_fallback: bool = Field(description="True when no coupled algorithm is available")
    assumed_capabilities: bool = Field(description="True when the request reported no capabilities")
    explanation: str
    source: str


class CongestionMeasurement(BaseModel):
    """Łuczak et al.'s metrics of one completed transfer and the algorithm that carried it (issue 20).

    Source: Ł. P. Łuczak, P. Ignaciuk, M. Morawski, Future Internet 15(10):328, 2023, Section 2.1, as the
    agent's meter computes them on the sending connection (``edgepath_agent.ccmetrics``): ``hol_degree_ms``
    ζ_av (Eq. 7–8; a derived estimate, ζ = v − max τ, which can be slightly negative, hence the symmetric
    range), ``protocol_delay_ms`` v_av (Eq. 2–3, ≥ 0), ``drop_rate`` δ (Eq. 12, as a fraction of data segments
    retransmitted, not a percentage) and ``throughput_bps``. Every metric is optional (a short transfer may give
    no delay sample); ``algorithm`` is the sender's subflow-level congestion control (``TCP_CONGESTION``, e.g.
    ``cubic``), lower-cased. NaN and infinities are rejected; out-of-range values are a 422 / INVALID_ARGUMENT
    naming ``congestion_measurement.<field>``.
    """

    model_config = _STRICT

    algorithm: AlgorithmName = Field(description="Sender's subflow-level congestion control, e.g. cubic")
    hol_degree_ms: Number | None = Field(
        None, ge=-600_000.0, le=600_000.0, description="HoL blocking degree ζ_av, ms (Eq. 8; may be < 0)"
    )
    protocol_delay_ms: Number | None = Field(None, ge=0.0, le=600_000.0, description="Protocol delay v_av, ms (Eq. 3)")
    drop_rate: Number | None = Field(None, ge=0.0, le=1.0, description="Drop rate δ, fraction (Eq. 12 / 100)")
    throughput_bps: Number | None = Field(None, ge=0.0, le=1e12, description="Throughput of the transfer, bit/s")

    @field_validator("algorithm")
    @classmethod
    def _lower(cls, algorithm: str) -> str:
        return algorithm.lower()


# --- end MLPM + congestion-control advice (issue 3) ---------------------------------------------------------------


# --- SSMP CDN server selection (issue 4): see edgepath.engines.ssmp --------------------------------------------
#: Candidate servers (DNS answers) per content request, and RTT samples per path.
MAX_CANDIDATES = 16
MAX_RTT_SAMPLES = 64
#: Largest content size accepted, bytes (1 PB).
MAX_CONTENT_BYTES = 10**15

RttSampleMs = Annotated[
    float, Strict(), Field(ge=MIN_MEASURED_MS, le=600_000.0, description="RTT sample, ms (≥ 0.001)")
]


class ServerPath(BaseModel):
    """One path (subflow) from the device to a candidate server, as the device measured it."""

    model_config = _STRICT

    interface: str = Field(min_length=1, max_length=MAX_NAME_LEN, description="Names one of `interfaces`")
    rtt_ms_samples: list[RttSampleMs] = Field(
        default_factory=list, max_length=MAX_RTT_SAMPLES, description="Recent RTTs to the server, ms; mean = path RTT"
    )
    loss: Number | None = Field(None, ge=0.0, le=1.0, description="Loss rate p on this path, fraction; None = unknown")
    bandwidth_bps: Number | None = Field(
        None, ge=0.0, le=1e12, description="Achievable bandwidth B from past transfers, bit/s; None = unknown"
    )


class CandidateServer(BaseModel):
    """One DNS answer: a candidate CDN server and the device's paths to it."""

    model_config = _STRICT

    address: str = Field(min_length=1, max_length=255, description="Server address (IP or host name)")
    dns_interface: str = Field(min_length=1, max_length=MAX_NAME_LEN, description="Interface whose DNS answered")
    paths: list[ServerPath] = Field(min_length=1, max_length=MAX_INTERFACES)


class ContentRequest(BaseModel):
    """What the device is about to download and from which candidate servers (SSMP input)."""

    model_config = _STRICT

    expected_size_bytes: Integer = Field(ge=0, le=MAX_CONTENT_BYTES, description="Expected content size, bytes")
    candidates: list[CandidateServer] = Field(min_length=1, max_length=MAX_CANDIDATES)
    default_interface: str | None = Field(
        None, min_length=1, max_length=MAX_NAME_LEN, description="Default DNS interface (DSS answer); None = first"
    )


class ServerSelection(BaseModel):
    """SSMP's choice among the candidate servers."""

    model_config = ConfigDict(frozen=True)

    address: str
    candidate_index: int = Field(ge=0, description="Index of the chosen answer in `content.candidates`")
    flow_class: str = Field(description="MICE or ELEPHANT")
    score: float | None = Field(description="Mean RTT, ms (mice) or Q, bit/s (elephant); None when no score decided")
    score_name: str = Field(description="mean_rtt_ms, q_bps or empty")
    initial_subflow_interface: str = Field(description="Interface for the initial subflow (smallest RTT)")
    rule: str = Field(description="Rule that decided, e.g. mice_mean_rtt, elephant_q, elephant_dss_unmeasured")
    stale_servers: list[str] = Field(description="Candidates not measured for longer than the stale age: probe them")


class ServerTransfer(BaseModel):
    """Measurement of a completed transfer from one server (updates its SSMP score).

    ``paths`` carry per-subflow RTT, loss and bandwidth measured during the transfer; with all three on
    every path the new score is Eq. 2, otherwise the transfer's goodput ``8·size_bytes/duration``.
    """

    model_config = _STRICT

    address: str = Field(min_length=1, max_length=255)
    size_bytes: Integer = Field(ge=0, le=MAX_CONTENT_BYTES, description="Bytes transferred")
    duration_ms: Number = Field(
        ge=MIN_MEASURED_MS, le=1e9, description="Transfer duration, ms (≥ 0.001: it divides the goodput)"
    )
    paths: list[ServerPath] = Field(default_factory=list, max_length=MAX_INTERFACES)


# --- end SSMP (issue 4) -----------------------------------------------------------------------------------------


# --- ATSSS steering rule (issue 19): see edgepath.engines.steering ------------------------------------------------
class TrafficDescriptor(BaseModel):
    """Which traffic an ATSSS rule matches (TS 24.193 §5.2.1: match-all, or IP 3-tuple from a MEC 015 flowFilter)."""

    model_config = ConfigDict(frozen=True)

    match_all: bool = Field(description="True for the device's default rule (lowest precedence)")
    source_ip: str | None = None
    destination_ip: str | None = None
    source_ports: list[int] = Field(default_factory=list)
    destination_ports: list[int] = Field(default_factory=list)
    protocol: int | None = Field(default=None, description="IP protocol number")
    dscp: int | None = None
    flow_label: int | None = None
    traffic_direction: str | None = Field(
        default=None, description="MEC 015 trafficDirection: 00 DL, 01 UL, 10 symmetrical"
    )


class SteeringAccess(BaseModel):
    """One access of a steering rule: its interface, PFCP Priority (TS 29.244 §8.2.127) and Weight (§8.2.126)."""

    model_config = ConfigDict(frozen=True)

    access: str = Field(description="3GPP or NON_3GPP (TS 23.501 §5.32.1)")
    interface: str
    access_type: AccessType
    priority: str | None = Field(description="ACTIVE, STANDBY, NO_STANDBY, HIGH, LOW; None where the mode has none")
    percentage: int | None = Field(description="Load-Balancing share of the traffic, percent (the two sum to 100)")
    metered: bool = Field(description="3GPP access is treated as metered (MEC 015 metered), non-3GPP as unmetered")
    initial_subflow: bool = Field(description="The initial MPTCP subflow leaves on this access")


class SteeringRule(BaseModel):
    """One ATSSS rule: precedence, traffic descriptor and access selection descriptor (TS 24.193 §5.2.1).

    ``active_access`` is Active-Standby's active access, or for Smallest Delay the access with the
    smaller RTT at decision time; ``high_priority_access``/``low_priority_access`` are Priority-based's;
    ``percentage_3gpp``/``percentage_non_3gpp`` Load-Balancing's fixed split (TS 23.501 §5.32.8).
    Thresholds are set for the threshold-based modes only (Active-Standby, Priority-based, Load-Balancing).
    """

    model_config = ConfigDict(frozen=True)

    rule_precedence: int = Field(ge=0, le=255, description="Lower value = evaluated first (TS 24.193 §5.2.1)")
    traffic_descriptor: TrafficDescriptor
    steering_functionality: str = Field(description="MPTCP (TS 29.244 §8.2.124)")
    steering_mode: str = Field(
        description="ACTIVE_STANDBY, SMALLEST_DELAY, LOAD_BALANCING, PRIORITY_BASED or REDUNDANT (TS 23.501 §5.32.8)"
    )
    active_access: str | None = None
    standby_access: str | None = None
    high_priority_access: str | None = None
    low_priority_access: str | None = None
    percentage_3gpp: int | None = None
    percentage_non_3gpp: int | None = None
    rtt_threshold_ms: float | None = Field(default=None, description="Maximum RTT threshold, ms")
    packet_loss_rate_threshold: float | None = Field(
        default=None, description="Maximum packet loss rate threshold, fraction"
    )
    accesses: list[SteeringAccess]
    intent: str = Field(description="DEFAULT, or the MEC 015 mtsMode's: LOW_COST, LOW_LATENCY, HIGH_THROUGHPUT, …")
    mts_mode: int | None = Field(default=None, description="MEC 015 mtsMode of the session that set the intent")
    mts_session_id: str | None = None
    unmet_qos: list[str] = Field(default_factory=list, description="qosD fields the predicted outcome does not meet")
    reason: str


class SteeringAdvice(BaseModel):
    """ATSSS steering rules for the device, in precedence order; the last one matches all traffic."""

    model_config = ConfigDict(frozen=True)

    rules: list[SteeringRule]
    source: str


# --- end ATSSS steering rule (issue 19) ---------------------------------------------------------------------------


#: The name of a Recommendation section a request may ask for (``RecommendRequest.sections``): ``primary_path``
#: or an engine adapter's section (``scheduler``, ``congestion``, ``server_selection``, ``steering``). The names a
#: service serves depend on its registered adapters; the decision plane checks them
#: (:meth:`edgepath.plane.DecisionPlane.recommend`).
SectionName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
MAX_SECTIONS = 16
#: The ``sections`` entry that asks for the primary path alone (it is decided for every request).
PRIMARY_PATH_SECTION = "primary_path"


#: A device's context as README "Using it" shows it: the OpenAPI document's example (``/docs``' "Try it out" starts
#: from it; it used to start from a generated body the service refuses, e.g. both forms of a history).
RECOMMEND_EXAMPLE: dict[str, Any] = {
    "device_id": "phone-1",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -71, "link_speed_mbps": 65, "frequency_mhz": 2437},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -95, "rsrq_db": -10, "sinr_db": 12, "cqi": 10},
    ],
}


class RecommendRequest(BaseModel):
    """A device's radio context: what ``Recommend`` decides on."""

    model_config = ConfigDict(**_STRICT, json_schema_extra={"examples": [RECOMMEND_EXAMPLE]})

    device_id: str = Field(min_length=1, max_length=128, pattern=DEVICE_ID_PATTERN, description="No whitespace")
    interfaces: list[InterfaceContext] = Field(min_length=1, max_length=MAX_INTERFACES)
    # --- issue 3: MLPM histories, application profile, kernel capabilities ---
    subflow_histories: list[SubflowHistory] = Field(default_factory=list, max_length=MAX_INTERFACES)
    application_profile: ApplicationProfile = ApplicationProfile.UNSPECIFIED
    kernel: KernelCapabilities | None = None
    # --- end issue 3 ---
    # --- issue 4: SSMP content request (optional) ---
    content: ContentRequest | None = None
    # --- end issue 4 ---
    # --- issue 16: the sections the caller acts on ---
    sections: list[SectionName] = Field(
        default_factory=list,
        max_length=MAX_SECTIONS,
        description=(
            "The Recommendation's sections to compute (e.g. ['primary_path', 'steering']); empty: every section. "
            "The primary path is always decided; sections left out are absent (null) and their engines not run. "
            "A name the service does not serve is refused (422 / INVALID_ARGUMENT naming sections[i])."
        ),
    )
    # --- end issue 16 ---

    @field_validator("interfaces")
    @classmethod
    def _unique_names(cls, interfaces: list[InterfaceContext]) -> list[InterfaceContext]:
        seen: set[str] = set()
        for iface in interfaces:
            if iface.name in seen:
                raise ValueError(f"duplicate interface name {iface.name!r}")
            seen.add(iface.name)
        return interfaces

    # --- issue 3 ---
    @model_validator(mode="after")
    def _histories_name_interfaces(self) -> RecommendRequest:
        names = {iface.name for iface in self.interfaces}
        seen: set[str] = set()
        for i, hist in enumerate(self.subflow_histories):
            if hist.interface not in names:
                raise FieldError(
                    f"subflow_histories[{i}].interface",
                    f"subflow_histories[{i}].interface {hist.interface!r} names no interface",
                )
            if hist.interface in seen:
                raise FieldError(
                    f"subflow_histories[{i}].interface",
                    f"subflow_histories[{i}]: duplicate history for {hist.interface!r}",
                )
            seen.add(hist.interface)
        return self

    # --- end issue 3 ---

    # --- issue 4 ---
    @model_validator(mode="after")
    def _content_names_interfaces(self) -> RecommendRequest:
        if self.content is None:
            return self
        names = {iface.name for iface in self.interfaces}
        for i, cand in enumerate(self.content.candidates):
            if cand.dns_interface not in names:
                raise FieldError(
                    f"content.candidates[{i}].dns_interface",
                    f"content.candidates[{i}].dns_interface {cand.dns_interface!r} names no interface",
                )
            for j, path in enumerate(cand.paths):
                if path.interface not in names:
                    raise FieldError(
                        f"content.candidates[{i}].paths[{j}].interface",
                        f"content.candidates[{i}].paths[{j}].interface {path.interface!r} names no interface",
                    )
        default = self.content.default_interface
        if default is not None and default not in {c.dns_interface for c in self.content.candidates}:
            raise FieldError(
                "content.default_interface", f"content.default_interface {default!r} answered no candidate"
            )
        return self

    # --- end issue 4 ---


class PrimaryPath(BaseModel):
    """The interface the initial MPTCP subflow should leave on."""

    model_config = ConfigDict(frozen=True)

    interface: str
    access_type: AccessType
    propensity: float = Field(gt=0.0, le=1.0, description="P(chosen arm | context) under the policy")
    arms: list[AccessType]


class Recommendation(BaseModel):
    """Answer to ``Recommend``: the decision record as the device sees it, and one section per engine.

    The sections come from the registered engine adapters (:mod:`edgepath.adapters.registry`), each present
    unless the request's ``sections`` leave it out (issue 16: then null, and its engine not run).
    The ones declared below are typed here, in the OpenAPI schema and in the protobuf wire; a
    registered engine whose section is not (yet) declared here is carried as an extra member
    (``model_extra``), served over REST but not over gRPC until the proto names it (a gRPC request naming it in
    ``sections`` is refused: :func:`edgepath.grpc.server.refuse_rest_only`).
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    decision_id: str
    model_version: int
    policy: str
    primary_path: PrimaryPath
    decided_at_unix_ms: int
    # --- issue 3: present in every response whose request did not leave them out (``sections``, issue 16) ---
    scheduler: SchedulerAdvice | None = None
    congestion: CongestionAdvice | None = None
    # --- end issue 3 ---
    # --- issue 4: present when the request carried a content request (and did not leave it out) ---
    server_selection: ServerSelection | None = None
    # --- end issue 4 ---
    # --- issue 19: ATSSS steering rules (present whenever the steering adapter is registered and asked for) ---
    steering: SteeringAdvice | None = None


# --- batch (issue 16): one call, many devices ------------------------------------------------------------------
#: Requests per RecommendBatch call.
MAX_BATCH = 256


class RecommendBatchRequest(BaseModel):
    """Many devices' contexts in one call (``RecommendBatch``): a gateway asking for its clients."""

    model_config = ConfigDict(
        **_STRICT,
        json_schema_extra={
            "examples": [{"requests": [RECOMMEND_EXAMPLE, {**RECOMMEND_EXAMPLE, "device_id": "phone-2"}]}]
        },
    )

    requests: list[RecommendRequest] = Field(min_length=1, max_length=MAX_BATCH)


class RecommendBatch(BaseModel):
    """One recommendation per request of a :class:`RecommendBatchRequest`, in the same order."""

    model_config = ConfigDict(frozen=True)

    recommendations: list[Recommendation]


# --- end batch ---------------------------------------------------------------------------------------------------


class OutcomeReport(BaseModel):
    """Measured outcome of a decision (``ReportOutcome``)."""

    model_config = ConfigDict(
        **_STRICT,
        # decision_id: the one Recommend answered (this one is a placeholder, answered 404 until replaced)
        json_schema_extra={
            "examples": [
                {
                    "device_id": "phone-1",
                    "decision_id": "DECISION_ID_FROM_RECOMMEND",
                    "throughput_bps": 42000000,
                    "latency_ms": 38.5,
                    "loss": 0.002,
                }
            ]
        },
    )

    device_id: str = Field(min_length=1, max_length=128, pattern=DEVICE_ID_PATTERN, description="No whitespace")
    decision_id: str = Field(min_length=1, max_length=128, pattern=DECISION_ID_PATTERN, description="From Recommend")
    throughput_bps: Number = Field(ge=0.0, le=1e12, description="Measured throughput, bit/s")
    latency_ms: Number | None = Field(None, ge=0.0, le=600_000.0, description="Measured latency, ms")
    loss: Number | None = Field(None, ge=0.0, le=1.0, description="Measured loss, fraction")
    # --- issue 4: SSMP measurement of the completed transfer (optional) ---
    server_transfer: ServerTransfer | None = None
    # --- end issue 4 ---
    # --- issue 20: congestion-control measurement of the transfer (optional; engines.congestion edge rule) ---
    congestion_measurement: CongestionMeasurement | None = None


class OutcomeAck(BaseModel):
    """Acknowledgement of an outcome."""

    model_config = ConfigDict(frozen=True)

    decision_id: str
    accepted: bool = Field(description="This report was recorded for training (the decision's first outcome)")
    duplicate: bool = Field(description="The decision already had an outcome: this report was not recorded")
    reward: int = Field(
        description=(
            "The Bernoulli reward (0 or 1) this report's values earn (Alzadjali et al.: throughput and latency "
            "against the service's thresholds). On a duplicate it is this report's, not the recorded first "
            "report's, which stands"
        )
    )


class Principal(BaseModel):
    """The authenticated caller as the plane sees it (device or admin).

    The transports build it; until authentication lands (see SECURITY.md) it
    is the self-declared ``device_id``.
    """

    model_config = ConfigDict(frozen=True)

    device_id: str
    is_admin: bool = False


_Model = TypeVar("_Model", bound=BaseModel)


def service_output(cls: type[_Model], values: dict[str, Any]) -> _Model:
    """``cls`` built from the service's own ``values`` (a reply or one of its sections), validated by pydantic-core.

    Faster than ``model_construct``, whose loop over the fields is Python (a ``Recommendation`` 2.5 against 5.4 µs,
    a steering rule 9 against 15 µs; issue 16), and the service's output is checked on the way. Model instances among
    ``values`` are taken as they are (pydantic does not revalidate them).

    Raises
    ------
    RuntimeError
        When ``values`` do not make a valid ``cls``: the service's bug, never the caller's. A ``ValidationError``
        would reach the transports, which answer it as the caller's bad input (HTTP 422 / ``INVALID_ARGUMENT``);
        this is an internal error on both.
    """
    try:
        return cls.model_validate(values)
    except ValidationError as exc:
        raise RuntimeError(f"the service built an invalid {cls.__name__}: {exc}") from None
