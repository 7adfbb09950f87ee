from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AccessType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACCESS_TYPE_UNSPECIFIED: _ClassVar[AccessType]
    ACCESS_TYPE_WIFI: _ClassVar[AccessType]
    ACCESS_TYPE_LTE: _ClassVar[AccessType]
    ACCESS_TYPE_NR: _ClassVar[AccessType]
    ACCESS_TYPE_ETHERNET: _ClassVar[AccessType]

class ApplicationProfile(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPLICATION_PROFILE_UNSPECIFIED: _ClassVar[ApplicationProfile]
    APPLICATION_PROFILE_STREAMING: _ClassVar[ApplicationProfile]
    APPLICATION_PROFILE_BULK: _ClassVar[ApplicationProfile]
    APPLICATION_PROFILE_LOSS_SENSITIVE: _ClassVar[ApplicationProfile]
    APPLICATION_PROFILE_INTERACTIVE: _ClassVar[ApplicationProfile]
ACCESS_TYPE_UNSPECIFIED: AccessType
ACCESS_TYPE_WIFI: AccessType
ACCESS_TYPE_LTE: AccessType
ACCESS_TYPE_NR: AccessType
ACCESS_TYPE_ETHERNET: AccessType
APPLICATION_PROFILE_UNSPECIFIED: ApplicationProfile
APPLICATION_PROFILE_STREAMING: ApplicationProfile
APPLICATION_PROFILE_BULK: ApplicationProfile
APPLICATION_PROFILE_LOSS_SENSITIVE: ApplicationProfile
APPLICATION_PROFILE_INTERACTIVE: ApplicationProfile

class InterfaceContext(_message.Message):
    __slots__ = ("name", "access_type", "wifi_rssi_dbm", "link_speed_mbps", "frequency_mhz", "rsrp_dbm", "rsrq_db", "sinr_db", "cqi", "cell_rssi_dbm", "rtt_ms", "loss", "wifi_rssi_spread_db", "max_link_speed_mbps", "rsrp_spread_db", "channel_bandwidth_mhz")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACCESS_TYPE_FIELD_NUMBER: _ClassVar[int]
    WIFI_RSSI_DBM_FIELD_NUMBER: _ClassVar[int]
    LINK_SPEED_MBPS_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_MHZ_FIELD_NUMBER: _ClassVar[int]
    RSRP_DBM_FIELD_NUMBER: _ClassVar[int]
    RSRQ_DB_FIELD_NUMBER: _ClassVar[int]
    SINR_DB_FIELD_NUMBER: _ClassVar[int]
    CQI_FIELD_NUMBER: _ClassVar[int]
    CELL_RSSI_DBM_FIELD_NUMBER: _ClassVar[int]
    RTT_MS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    WIFI_RSSI_SPREAD_DB_FIELD_NUMBER: _ClassVar[int]
    MAX_LINK_SPEED_MBPS_FIELD_NUMBER: _ClassVar[int]
    RSRP_SPREAD_DB_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_BANDWIDTH_MHZ_FIELD_NUMBER: _ClassVar[int]
    name: str
    access_type: AccessType
    wifi_rssi_dbm: float
    link_speed_mbps: float
    frequency_mhz: float
    rsrp_dbm: float
    rsrq_db: float
    sinr_db: float
    cqi: int
    cell_rssi_dbm: float
    rtt_ms: float
    loss: float
    wifi_rssi_spread_db: float
    max_link_speed_mbps: float
    rsrp_spread_db: float
    channel_bandwidth_mhz: float
    def __init__(self, name: _Optional[str] = ..., access_type: _Optional[_Union[AccessType, str]] = ..., wifi_rssi_dbm: _Optional[float] = ..., link_speed_mbps: _Optional[float] = ..., frequency_mhz: _Optional[float] = ..., rsrp_dbm: _Optional[float] = ..., rsrq_db: _Optional[float] = ..., sinr_db: _Optional[float] = ..., cqi: _Optional[int] = ..., cell_rssi_dbm: _Optional[float] = ..., rtt_ms: _Optional[float] = ..., loss: _Optional[float] = ..., wifi_rssi_spread_db: _Optional[float] = ..., max_link_speed_mbps: _Optional[float] = ..., rsrp_spread_db: _Optional[float] = ..., channel_bandwidth_mhz: _Optional[float] = ...) -> None: ...

class RttSample(_message.Message):
    __slots__ = ("t_ms", "rtt_ms")
    T_MS_FIELD_NUMBER: _ClassVar[int]
    RTT_MS_FIELD_NUMBER: _ClassVar[int]
    t_ms: float
    rtt_ms: float
    def __init__(self, t_ms: _Optional[float] = ..., rtt_ms: _Optional[float] = ...) -> None: ...

class ThroughputSample(_message.Message):
    __slots__ = ("t_ms", "throughput_bps")
    T_MS_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_BPS_FIELD_NUMBER: _ClassVar[int]
    t_ms: float
    throughput_bps: float
    def __init__(self, t_ms: _Optional[float] = ..., throughput_bps: _Optional[float] = ...) -> None: ...

class SubflowHistory(_message.Message):
    __slots__ = ("interface", "rtt_samples", "throughput_samples", "rtt_t_ms", "rtt_ms", "throughput_t_ms", "throughput_bps")
    INTERFACE_FIELD_NUMBER: _ClassVar[int]
    RTT_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    RTT_T_MS_FIELD_NUMBER: _ClassVar[int]
    RTT_MS_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_T_MS_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_BPS_FIELD_NUMBER: _ClassVar[int]
    interface: str
    rtt_samples: _containers.RepeatedCompositeFieldContainer[RttSample]
    throughput_samples: _containers.RepeatedCompositeFieldContainer[ThroughputSample]
    rtt_t_ms: _containers.RepeatedScalarFieldContainer[float]
    rtt_ms: _containers.RepeatedScalarFieldContainer[float]
    throughput_t_ms: _containers.RepeatedScalarFieldContainer[float]
    throughput_bps: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, interface: _Optional[str] = ..., rtt_samples: _Optional[_Iterable[_Union[RttSample, _Mapping]]] = ..., throughput_samples: _Optional[_Iterable[_Union[ThroughputSample, _Mapping]]] = ..., rtt_t_ms: _Optional[_Iterable[float]] = ..., rtt_ms: _Optional[_Iterable[float]] = ..., throughput_t_ms: _Optional[_Iterable[float]] = ..., throughput_bps: _Optional[_Iterable[float]] = ...) -> None: ...

class KernelCapabilities(_message.Message):
    __slots__ = ("available_congestion_controls", "allowed_congestion_controls", "mptcp_schedulers", "path_managers")
    AVAILABLE_CONGESTION_CONTROLS_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_CONGESTION_CONTROLS_FIELD_NUMBER: _ClassVar[int]
    MPTCP_SCHEDULERS_FIELD_NUMBER: _ClassVar[int]
    PATH_MANAGERS_FIELD_NUMBER: _ClassVar[int]
    available_congestion_controls: _containers.RepeatedScalarFieldContainer[str]
    allowed_congestion_controls: _containers.RepeatedScalarFieldContainer[str]
    mptcp_schedulers: _containers.RepeatedScalarFieldContainer[str]
    path_managers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, available_congestion_controls: _Optional[_Iterable[str]] = ..., allowed_congestion_controls: _Optional[_Iterable[str]] = ..., mptcp_schedulers: _Optional[_Iterable[str]] = ..., path_managers: _Optional[_Iterable[str]] = ...) -> None: ...

class SubflowWeight(_message.Message):
    __slots__ = ("interface", "weight", "score", "rtt_ms", "rtt_slope_ms_per_s", "rtt_forecast_ms", "rtt_samples", "throughput_bps", "throughput_slope_bps_per_s", "throughput_forecast_bps", "throughput_samples")
    INTERFACE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    RTT_MS_FIELD_NUMBER: _ClassVar[int]
    RTT_SLOPE_MS_PER_S_FIELD_NUMBER: _ClassVar[int]
    RTT_FORECAST_MS_FIELD_NUMBER: _ClassVar[int]
    RTT_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_BPS_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_SLOPE_BPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FORECAST_BPS_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    interface: str
    weight: float
    score: float
    rtt_ms: float
    rtt_slope_ms_per_s: float
    rtt_forecast_ms: float
    rtt_samples: int
    throughput_bps: float
    throughput_slope_bps_per_s: float
    throughput_forecast_bps: float
    throughput_samples: int
    def __init__(self, interface: _Optional[str] = ..., weight: _Optional[float] = ..., score: _Optional[float] = ..., rtt_ms: _Optional[float] = ..., rtt_slope_ms_per_s: _Optional[float] = ..., rtt_forecast_ms: _Optional[float] = ..., rtt_samples: _Optional[int] = ..., throughput_bps: _Optional[float] = ..., throughput_slope_bps_per_s: _Optional[float] = ..., throughput_forecast_bps: _Optional[float] = ..., throughput_samples: _Optional[int] = ...) -> None: ...

class SchedulerAdvice(_message.Message):
    __slots__ = ("weights", "prioritised_subflow", "priority", "features_used", "horizon_s", "bias", "reason")
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    PRIORITISED_SUBFLOW_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    FEATURES_USED_FIELD_NUMBER: _ClassVar[int]
    HORIZON_S_FIELD_NUMBER: _ClassVar[int]
    BIAS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    weights: _containers.RepeatedCompositeFieldContainer[SubflowWeight]
    prioritised_subflow: str
    priority: str
    features_used: _containers.RepeatedScalarFieldContainer[str]
    horizon_s: float
    bias: float
    reason: str
    def __init__(self, weights: _Optional[_Iterable[_Union[SubflowWeight, _Mapping]]] = ..., prioritised_subflow: _Optional[str] = ..., priority: _Optional[str] = ..., features_used: _Optional[_Iterable[str]] = ..., horizon_s: _Optional[float] = ..., bias: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class CongestionAdvice(_message.Message):
    __slots__ = ("profile", "mptcp_level", "subflow_level", "deciding_metric", "deciding_value", "mainline_fallback", "assumed_capabilities", "explanation", "source")
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    MPTCP_LEVEL_FIELD_NUMBER: _ClassVar[int]
    SUBFLOW_LEVEL_FIELD_NUMBER: _ClassVar[int]
    DECIDING_METRIC_FIELD_NUMBER: _ClassVar[int]
    DECIDING_VALUE_FIELD_NUMBER: _ClassVar[int]
    MAINLINE_FALLBACK_FIELD_NUMBER: _ClassVar[int]
    ASSUMED_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    profile: ApplicationProfile
    mptcp_level: str
    subflow_level: str
    deciding_metric: str
    deciding_value: float
    mainline_fallback: bool
    assumed_capabilities: bool
    explanation: str
    source: str
    def __init__(self, profile: _Optional[_Union[ApplicationProfile, str]] = ..., mptcp_level: _Optional[str] = ..., subflow_level: _Optional[str] = ..., deciding_metric: _Optional[str] = ..., deciding_value: _Optional[float] = ..., mainline_fallback: _Optional[bool] = ..., assumed_capabilities: _Optional[bool] = ..., explanation: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class CongestionMeasurement(_message.Message):
    __slots__ = ("algorithm", "hol_degree_ms", "protocol_delay_ms", "drop_rate", "throughput_bps")
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    HOL_DEGREE_MS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    DROP_RATE_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_BPS_FIELD_NUMBER: _ClassVar[int]
    algorithm: str
    hol_degree_ms: float
    protocol_delay_ms: float
    drop_rate: float
    throughput_bps: float
    def __init__(self, algorithm: _Optional[str] = ..., hol_degree_ms: _Optional[float] = ..., protocol_delay_ms: _Optional[float] = ..., drop_rate: _Optional[float] = ..., throughput_bps: _Optional[float] = ...) -> None: ...

class ServerPath(_message.Message):
    __slots__ = ("interface", "rtt_ms_samples", "loss", "bandwidth_bps")
    INTERFACE_FIELD_NUMBER: _ClassVar[int]
    RTT_MS_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_BPS_FIELD_NUMBER: _ClassVar[int]
    interface: str
    rtt_ms_samples: _containers.RepeatedScalarFieldContainer[float]
    loss: float
    bandwidth_bps: float
    def __init__(self, interface: _Optional[str] = ..., rtt_ms_samples: _Optional[_Iterable[float]] = ..., loss: _Optional[float] = ..., bandwidth_bps: _Optional[float] = ...) -> None: ...

class CandidateServer(_message.Message):
    __slots__ = ("address", "dns_interface", "paths")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DNS_INTERFACE_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    address: str
    dns_interface: str
    paths: _containers.RepeatedCompositeFieldContainer[ServerPath]
    def __init__(self, address: _Optional[str] = ..., dns_interface: _Optional[str] = ..., paths: _Optional[_Iterable[_Union[ServerPath, _Mapping]]] = ...) -> None: ...

class ContentRequest(_message.Message):
    __slots__ = ("expected_size_bytes", "candidates", "default_interface")
    EXPECTED_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_INTERFACE_FIELD_NUMBER: _ClassVar[int]
    expected_size_bytes: int
    candidates: _containers.RepeatedCompositeFieldContainer[CandidateServer]
    default_interface: str
    def __init__(self, expected_size_bytes: _Optional[int] = ..., candidates: _Optional[_Iterable[_Union[CandidateServer, _Mapping]]] = ..., default_interface: _Optional[str] = ...) -> None: ...

class ServerSelection(_message.Message):
    __slots__ = ("address", "candidate_index", "flow_class", "score", "score_name", "initial_subflow_interface", "rule", "stale_servers")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_INDEX_FIELD_NUMBER: _ClassVar[int]
    FLOW_CLASS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SCORE_NAME_FIELD_NUMBER: _ClassVar[int]
    INITIAL_SUBFLOW_INTERFACE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    STALE_SERVERS_FIELD_NUMBER: _ClassVar[int]
    address: str
    candidate_index: int
    flow_class: str
    score: float
    score_name: str
    initial_subflow_interface: str
    rule: str
    stale_servers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, address: _Optional[str] = ..., candidate_index: _Optional[int] = ..., flow_class: _Optional[str] = ..., score: _Optional[float] = ..., score_name: _Optional[str] = ..., initial_subflow_interface: _Optional[str] = ..., rule: _Optional[str] = ..., stale_servers: _Optional[_Iterable[str]] = ...) -> None: ...

class ServerTransfer(_message.Message):
    __slots__ = ("address", "size_bytes", "duration_ms", "paths")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    address: str
    size_bytes: int
    duration_ms: float
    paths: _containers.RepeatedCompositeFieldContainer[ServerPath]
    def __init__(self, address: _Optional[str] = ..., size_bytes: _Optional[int] = ..., duration_ms: _Optional[float] = ..., paths: _Optional[_Iterable[_Union[ServerPath, _Mapping]]] = ...) -> None: ...

class RecommendRequest(_message.Message):
    __slots__ = ("device_id", "interfaces", "subflow_histories", "application_profile", "kernel", "content", "sections")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    INTERFACES_FIELD_NUMBER: _ClassVar[int]
    SUBFLOW_HISTORIES_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_PROFILE_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SECTIONS_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    interfaces: _containers.RepeatedCompositeFieldContainer[InterfaceContext]
    subflow_histories: _containers.RepeatedCompositeFieldContainer[SubflowHistory]
    application_profile: ApplicationProfile
    kernel: KernelCapabilities
    content: ContentRequest
    sections: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, device_id: _Optional[str] = ..., interfaces: _Optional[_Iterable[_Union[InterfaceContext, _Mapping]]] = ..., subflow_histories: _Optional[_Iterable[_Union[SubflowHistory, _Mapping]]] = ..., application_profile: _Optional[_Union[ApplicationProfile, str]] = ..., kernel: _Optional[_Union[KernelCapabilities, _Mapping]] = ..., content: _Optional[_Union[ContentRequest, _Mapping]] = ..., sections: _Optional[_Iterable[str]] = ...) -> None: ...

class TrafficDescriptor(_message.Message):
    __slots__ = ("match_all", "source_ip", "destination_ip", "source_ports", "destination_ports", "protocol", "dscp", "flow_label", "traffic_direction")
    MATCH_ALL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IP_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_IP_FIELD_NUMBER: _ClassVar[int]
    SOURCE_PORTS_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_PORTS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    DSCP_FIELD_NUMBER: _ClassVar[int]
    FLOW_LABEL_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_DIRECTION_FIELD_NUMBER: _ClassVar[int]
    match_all: bool
    source_ip: str
    destination_ip: str
    source_ports: _containers.RepeatedScalarFieldContainer[int]
    destination_ports: _containers.RepeatedScalarFieldContainer[int]
    protocol: int
    dscp: int
    flow_label: int
    traffic_direction: str
    def __init__(self, match_all: _Optional[bool] = ..., source_ip: _Optional[str] = ..., destination_ip: _Optional[str] = ..., source_ports: _Optional[_Iterable[int]] = ..., destination_ports: _Optional[_Iterable[int]] = ..., protocol: _Optional[int] = ..., dscp: _Optional[int] = ..., flow_label: _Optional[int] = ..., traffic_direction: _Optional[str] = ...) -> None: ...

class SteeringAccess(_message.Message):
    __slots__ = ("access", "interface", "access_type", "priority", "percentage", "metered", "initial_subflow")
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    INTERFACE_FIELD_NUMBER: _ClassVar[int]
    ACCESS_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PERCENTAGE_FIELD_NUMBER: _ClassVar[int]
    METERED_FIELD_NUMBER: _ClassVar[int]
    INITIAL_SUBFLOW_FIELD_NUMBER: _ClassVar[int]
    access: str
    interface: str
    access_type: AccessType
    priority: str
    percentage: int
    metered: bool
    initial_subflow: bool
    def __init__(self, access: _Optional[str] = ..., interface: _Optional[str] = ..., access_type: _Optional[_Union[AccessType, str]] = ..., priority: _Optional[str] = ..., percentage: _Optional[int] = ..., metered: _Optional[bool] = ..., initial_subflow: _Optional[bool] = ...) -> None: ...

class SteeringRule(_message.Message):
    __slots__ = ("rule_precedence", "traffic_descriptor", "steering_functionality", "steering_mode", "active_access", "standby_access", "high_priority_access", "low_priority_access", "percentage_3gpp", "percentage_non_3gpp", "rtt_threshold_ms", "packet_loss_rate_threshold", "accesses", "intent", "mts_mode", "mts_session_id", "unmet_qos", "reason")
    RULE_PRECEDENCE_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    STEERING_FUNCTIONALITY_FIELD_NUMBER: _ClassVar[int]
    STEERING_MODE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_ACCESS_FIELD_NUMBER: _ClassVar[int]
    STANDBY_ACCESS_FIELD_NUMBER: _ClassVar[int]
    HIGH_PRIORITY_ACCESS_FIELD_NUMBER: _ClassVar[int]
    LOW_PRIORITY_ACCESS_FIELD_NUMBER: _ClassVar[int]
    PERCENTAGE_3GPP_FIELD_NUMBER: _ClassVar[int]
    PERCENTAGE_NON_3GPP_FIELD_NUMBER: _ClassVar[int]
    RTT_THRESHOLD_MS_FIELD_NUMBER: _ClassVar[int]
    PACKET_LOSS_RATE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    ACCESSES_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    MTS_MODE_FIELD_NUMBER: _ClassVar[int]
    MTS_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    UNMET_QOS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    rule_precedence: int
    traffic_descriptor: TrafficDescriptor
    steering_functionality: str
    steering_mode: str
    active_access: str
    standby_access: str
    high_priority_access: str
    low_priority_access: str
    percentage_3gpp: int
    percentage_non_3gpp: int
    rtt_threshold_ms: float
    packet_loss_rate_threshold: float
    accesses: _containers.RepeatedCompositeFieldContainer[SteeringAccess]
    intent: str
    mts_mode: int
    mts_session_id: str
    unmet_qos: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    def __init__(self, rule_precedence: _Optional[int] = ..., traffic_descriptor: _Optional[_Union[TrafficDescriptor, _Mapping]] = ..., steering_functionality: _Optional[str] = ..., steering_mode: _Optional[str] = ..., active_access: _Optional[str] = ..., standby_access: _Optional[str] = ..., high_priority_access: _Optional[str] = ..., low_priority_access: _Optional[str] = ..., percentage_3gpp: _Optional[int] = ..., percentage_non_3gpp: _Optional[int] = ..., rtt_threshold_ms: _Optional[float] = ..., packet_loss_rate_threshold: _Optional[float] = ..., accesses: _Optional[_Iterable[_Union[SteeringAccess, _Mapping]]] = ..., intent: _Optional[str] = ..., mts_mode: _Optional[int] = ..., mts_session_id: _Optional[str] = ..., unmet_qos: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ...) -> None: ...

class SteeringAdvice(_message.Message):
    __slots__ = ("rules", "source")
    RULES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedCompositeFieldContainer[SteeringRule]
    source: str
    def __init__(self, rules: _Optional[_Iterable[_Union[SteeringRule, _Mapping]]] = ..., source: _Optional[str] = ...) -> None: ...

class PrimaryPath(_message.Message):
    __slots__ = ("interface", "access_type", "propensity", "arms")
    INTERFACE_FIELD_NUMBER: _ClassVar[int]
    ACCESS_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROPENSITY_FIELD_NUMBER: _ClassVar[int]
    ARMS_FIELD_NUMBER: _ClassVar[int]
    interface: str
    access_type: AccessType
    propensity: float
    arms: _containers.RepeatedScalarFieldContainer[AccessType]
    def __init__(self, interface: _Optional[str] = ..., access_type: _Optional[_Union[AccessType, str]] = ..., propensity: _Optional[float] = ..., arms: _Optional[_Iterable[_Union[AccessType, str]]] = ...) -> None: ...

class Recommendation(_message.Message):
    __slots__ = ("decision_id", "model_version", "policy", "primary_path", "decided_at_unix_ms", "scheduler", "congestion", "server_selection", "steering")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_PATH_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    CONGESTION_FIELD_NUMBER: _ClassVar[int]
    SERVER_SELECTION_FIELD_NUMBER: _ClassVar[int]
    STEERING_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    model_version: int
    policy: str
    primary_path: PrimaryPath
    decided_at_unix_ms: int
    scheduler: SchedulerAdvice
    congestion: CongestionAdvice
    server_selection: ServerSelection
    steering: SteeringAdvice
    def __init__(self, decision_id: _Optional[str] = ..., model_version: _Optional[int] = ..., policy: _Optional[str] = ..., primary_path: _Optional[_Union[PrimaryPath, _Mapping]] = ..., decided_at_unix_ms: _Optional[int] = ..., scheduler: _Optional[_Union[SchedulerAdvice, _Mapping]] = ..., congestion: _Optional[_Union[CongestionAdvice, _Mapping]] = ..., server_selection: _Optional[_Union[ServerSelection, _Mapping]] = ..., steering: _Optional[_Union[SteeringAdvice, _Mapping]] = ...) -> None: ...

class OutcomeRequest(_message.Message):
    __slots__ = ("device_id", "decision_id", "throughput_bps", "latency_ms", "loss", "server_transfer", "congestion_measurement")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_BPS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    SERVER_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    CONGESTION_MEASUREMENT_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    decision_id: str
    throughput_bps: float
    latency_ms: float
    loss: float
    server_transfer: ServerTransfer
    congestion_measurement: CongestionMeasurement
    def __init__(self, device_id: _Optional[str] = ..., decision_id: _Optional[str] = ..., throughput_bps: _Optional[float] = ..., latency_ms: _Optional[float] = ..., loss: _Optional[float] = ..., server_transfer: _Optional[_Union[ServerTransfer, _Mapping]] = ..., congestion_measurement: _Optional[_Union[CongestionMeasurement, _Mapping]] = ...) -> None: ...

class OutcomeAck(_message.Message):
    __slots__ = ("decision_id", "accepted", "duplicate", "reward")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    accepted: bool
    duplicate: bool
    reward: int
    def __init__(self, decision_id: _Optional[str] = ..., accepted: _Optional[bool] = ..., duplicate: _Optional[bool] = ..., reward: _Optional[int] = ...) -> None: ...

class RecommendBatchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[RecommendRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[RecommendRequest, _Mapping]]] = ...) -> None: ...

class RecommendBatchResponse(_message.Message):
    __slots__ = ("recommendations",)
    RECOMMENDATIONS_FIELD_NUMBER: _ClassVar[int]
    recommendations: _containers.RepeatedCompositeFieldContainer[Recommendation]
    def __init__(self, recommendations: _Optional[_Iterable[_Union[Recommendation, _Mapping]]] = ...) -> None: ...
