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
loss                 [0, 1]          fraction
throughput_bps       [0, 1e12]       one terabit/s
===================  ==============  ======================================================

NaN and infinities are rejected everywhere.
"""

from __future__ import annotations

import enum
from pydantic import BaseModel, ConfigDict, Field, field_validator


class AccessType(str, enum.Enum):
    """Radio access technology of an interface (an arm of the primary-path bandit)."""

    WIFI = "WIFI"
    LTE = "LTE"
    NR = "NR"
    ETHERNET = "ETHERNET"


CELLULAR = frozenset({AccessType.LTE, AccessType.NR})

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

MAX_INTERFACES = 16
MAX_NAME_LEN = 64


class InterfaceContext(BaseModel):
    """Radio context of one interface; every measurement is optional."""

    model_config = _STRICT

    name: str = Field(min_length=1, max_length=MAX_NAME_LEN, description="Kernel interface name, e.g. wlan0")
    access_type: AccessType
    wifi_rssi_dbm: float | None = Field(None, ge=-127.0, le=0.0, description="WiFi RSSI, dBm")
    link_speed_mbps: float | None = Field(None, ge=0.0, le=100_000.0, description="Link speed, Mbit/s")
    frequency_mhz: float | None = Field(None, ge=0.0, le=100_000.0, description="Centre frequency, MHz")
    rsrp_dbm: float | None = Field(None, ge=-156.0, le=-31.0, description="RSRP, dBm")
    rsrq_db: float | None = Field(None, ge=-34.0, le=2.5, description="RSRQ, dB")
    sinr_db: float | None = Field(None, ge=-30.0, le=50.0, description="SINR / RSSNR, dB")
    cqi: int | None = Field(None, ge=0, le=15, description="Channel quality indicator")
    cell_rssi_dbm: float | None = Field(None, ge=-140.0, le=0.0, description="Cellular RSSI, dBm")
    rtt_ms: float | None = Field(None, ge=0.0, le=600_000.0, description="Path RTT, ms")
    loss: float | None = Field(None, ge=0.0, le=1.0, description="Path loss, fraction")


class RecommendRequest(BaseModel):
    """A device's radio context: what ``Recommend`` decides on."""

    model_config = _STRICT

    device_id: str = Field(min_length=1, max_length=128)
    interfaces: list[InterfaceContext] = Field(min_length=1, max_length=MAX_INTERFACES)

    @field_validator("interfaces")
    @classmethod
    def _unique_names(cls, interfaces: list[InterfaceContext]) -> list[InterfaceContext]:
        seen: set[str] = set()
        for iface in interfaces:
            if iface.name in seen:
                raise ValueError(f"duplicate interface name {iface.name!r}")
            seen.add(iface.name)
        return interfaces


class PrimaryPath(BaseModel):
    """The interface the initial MPTCP subflow should leave on."""

    model_config = ConfigDict(frozen=True)

    interface: str
    access_type: AccessType
    propensity: float = Field(gt=0.0, le=1.0, description="P(chosen arm | context) under the policy")
    arms: list[AccessType]


class Recommendation(BaseModel):
    """Answer to ``Recommend``: the decision record as the device sees it."""

    model_config = ConfigDict(frozen=True)

    decision_id: str
    model_version: int
    policy: str
    primary_path: PrimaryPath
    decided_at_unix_ms: int


class OutcomeReport(BaseModel):
    """Measured outcome of a decision (``ReportOutcome``)."""

    model_config = _STRICT

    device_id: str = Field(min_length=1, max_length=128)
    decision_id: str = Field(min_length=1, max_length=128)
    throughput_bps: float = Field(ge=0.0, le=1e12, description="Measured throughput, bit/s")
    latency_ms: float | None = Field(None, ge=0.0, le=600_000.0, description="Measured latency, ms")
    loss: float | None = Field(None, ge=0.0, le=1.0, description="Measured loss, fraction")


class OutcomeAck(BaseModel):
    """Acknowledgement of an outcome."""

    model_config = ConfigDict(frozen=True)

    decision_id: str
    accepted: bool
    duplicate: bool
    reward: int


class Principal(BaseModel):
    """The authenticated caller as the plane sees it (device or admin).

    The transports build it; until authentication lands (see SECURITY.md) it
    is the self-declared ``device_id``.
    """

    model_config = ConfigDict(frozen=True)

    device_id: str
    is_admin: bool = False
