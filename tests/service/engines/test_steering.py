"""The ATSSS mapping table of :mod:`edgepath.engines.steering`, one case per row."""

from __future__ import annotations

import pytest
from edgepath.engines.steering import (
    MTS_MODE_INTENT,
    PFCP_STEERING_MODE,
    Access,
    Intent,
    PathState,
    Priority,
    QosRequirement,
    SteeringConfig,
    SteeringDecision,
    SteeringMode,
    _grouped_rule_key,
    decide,
    default_rule_key,
    unmet_requirements,
)
from edgepath.types import AccessType
from hypothesis import given, settings
from hypothesis import strategies as st

WIFI, LTE = Access.NON_THREE_GPP, Access.THREE_GPP
CONFIG = SteeringConfig(standby_weight=0.2, rtt_threshold_ms=100.0)


def paths(
    wifi_weight: float = 0.6,
    lte_weight: float = 0.4,
    wifi_rtt: float | None = 40.0,
    lte_rtt: float | None = 25.0,
    wifi_loss: float | None = 0.01,
    lte_loss: float | None = 0.001,
    wifi_bps: float | None = 50e6,
    lte_bps: float | None = 20e6,
) -> list[PathState]:
    return [
        PathState("wlan0", AccessType.WIFI, wifi_weight, wifi_rtt, wifi_loss, wifi_bps),
        PathState("wwan0", AccessType.LTE, lte_weight, lte_rtt, lte_loss, lte_bps),
    ]


def roles(d) -> dict[Access, Priority | None]:
    return {a.access: a.priority for a in d.accesses}


def initial(d) -> Access:
    return next(a.access for a in d.accesses if a.initial_subflow)


def test_default_low_other_weight_is_active_standby_on_the_primary_path() -> None:
    d = decide(paths(wifi_weight=0.9, lte_weight=0.1), "wlan0", config=CONFIG)
    assert d.steering_mode is SteeringMode.ACTIVE_STANDBY
    assert roles(d) == {WIFI: Priority.ACTIVE, LTE: Priority.STANDBY}
    assert initial(d) is WIFI
    assert d.rtt_threshold_ms == 100.0  # threshold-based mode: the configured RTT bound
    assert d.steering_functionality == "MPTCP"


def test_default_both_weighted_is_priority_based_high_on_the_primary_path() -> None:
    d = decide(paths(wifi_weight=0.5, lte_weight=0.5), "wwan0", config=CONFIG)
    assert d.steering_mode is SteeringMode.PRIORITY_BASED
    assert roles(d) == {LTE: Priority.HIGH, WIFI: Priority.LOW}
    assert initial(d) is LTE


def test_low_cost_keeps_unmetered_wifi_active_while_it_meets_qosd() -> None:
    qos = QosRequirement(max_latency_ms=50.0, max_loss=0.05)  # WiFi: RTT 40 → one-way 20 ms, loss 1 %
    d = decide(paths(), "wwan0", Intent.LOW_COST, qos, CONFIG)
    assert d.steering_mode is SteeringMode.ACTIVE_STANDBY
    assert roles(d) == {WIFI: Priority.ACTIVE, LTE: Priority.STANDBY}
    assert {a.access: a.metered for a in d.accesses} == {WIFI: False, LTE: True}
    assert d.rtt_threshold_ms == pytest.approx(100.0)  # 2 × maxLatency (one-way → RTT)
    assert d.packet_loss_rate_threshold == pytest.approx(0.05)


def test_low_cost_falls_back_to_3gpp_when_wifi_fails_qosd() -> None:
    qos = QosRequirement(max_loss=0.005)  # WiFi loses 1 %
    d = decide(paths(), "wlan0", Intent.LOW_COST, qos, CONFIG)
    assert roles(d) == {LTE: Priority.ACTIVE, WIFI: Priority.STANDBY}
    assert "maxLoss" in d.reason


def test_low_latency_is_smallest_delay_with_the_lower_rtt_access_first() -> None:
    d = decide(paths(wifi_rtt=40.0, lte_rtt=25.0), "wlan0", Intent.LOW_LATENCY, config=CONFIG)
    assert d.steering_mode is SteeringMode.SMALLEST_DELAY
    assert initial(d) is LTE
    assert d.rtt_threshold_ms is None and d.packet_loss_rate_threshold is None  # not threshold-based
    d = decide(paths(wifi_rtt=10.0, lte_rtt=25.0), "wwan0", Intent.LOW_LATENCY, config=CONFIG)
    assert initial(d) is WIFI


def test_low_latency_with_unknown_rtts_starts_on_the_primary_path() -> None:
    d = decide(paths(wifi_rtt=None, lte_rtt=None), "wwan0", Intent.LOW_LATENCY, config=CONFIG)
    assert initial(d) is LTE
    assert "unknown" in d.reason


def test_high_throughput_is_load_balancing_with_mlpm_percentages() -> None:
    d = decide(paths(wifi_weight=0.73, lte_weight=0.27), "wwan0", Intent.HIGH_THROUGHPUT, config=CONFIG)
    assert d.steering_mode is SteeringMode.LOAD_BALANCING
    assert d.percentages == {WIFI: 73, LTE: 27}
    assert initial(d) is LTE  # the bandit's primary path opens the initial subflow
    assert all(a.priority is None for a in d.accesses)


def test_load_balancing_percentages_sum_to_100_and_unknown_weights_split_evenly() -> None:
    d = decide(paths(wifi_weight=1 / 3, lte_weight=2 / 3), "wlan0", Intent.HIGH_THROUGHPUT, config=CONFIG)
    assert sum(d.percentages.values()) == 100
    ps = [PathState("wlan0", AccessType.WIFI), PathState("wwan0", AccessType.NR)]
    assert decide(ps, "wlan0", Intent.HIGH_THROUGHPUT).percentages == {WIFI: 50, LTE: 50}


def test_redundancy_is_redundant_on_both_accesses_without_standby() -> None:
    d = decide(paths(), "wlan0", Intent.REDUNDANCY, config=CONFIG)
    assert d.steering_mode is SteeringMode.REDUNDANT
    assert {a.access for a in d.accesses} == {WIFI, LTE}
    assert all(a.priority is None for a in d.accesses)
    assert d.prediction is not None and d.prediction.loss == pytest.approx(0.01 * 0.001)


def test_qos_picks_the_cheapest_mode_meeting_qosd() -> None:
    # WiFi alone meets 10 Mbit/s and 30 ms one-way: Active-Standby on the unmetered access
    d = decide(paths(), "wwan0", Intent.QOS, QosRequirement(min_throughput_bps=10e6, max_latency_ms=30.0), CONFIG)
    assert d.steering_mode is SteeringMode.ACTIVE_STANDBY and roles(d)[WIFI] is Priority.ACTIVE
    # 60 Mbit/s needs both accesses: Load-Balancing (50 + 20 Mbit/s)
    d = decide(paths(), "wlan0", Intent.QOS, QosRequirement(min_throughput_bps=60e6), CONFIG)
    assert d.steering_mode is SteeringMode.LOAD_BALANCING
    assert not d.unmet
    # loss below either access alone: only duplication meets it
    d = decide(paths(), "wlan0", Intent.QOS, QosRequirement(max_loss=1e-4), CONFIG)
    assert d.steering_mode is SteeringMode.REDUNDANT


def test_qos_no_mode_meets_gives_the_best_available_with_the_unmet_fields() -> None:
    d = decide(paths(), "wlan0", Intent.QOS, QosRequirement(min_throughput_bps=1e9, max_loss=1e-4), CONFIG)
    assert d.steering_mode is SteeringMode.REDUNDANT  # meets maxLoss; nothing meets 1 Gbit/s
    assert d.unmet == ("minTpt",)
    assert "minTpt" in d.reason


def test_single_access_class_is_active_with_no_standby() -> None:
    ps = [PathState("wwan0", AccessType.LTE, 0.5), PathState("wwan1", AccessType.NR, 0.5)]
    for intent in Intent:
        d = decide(ps, "wwan1", intent, config=CONFIG)
        assert d.steering_mode is SteeringMode.ACTIVE_STANDBY
        assert [(a.access, a.interface, a.priority) for a in d.accesses] == [(LTE, "wwan1", Priority.ACTIVE)]


def test_two_interfaces_on_one_access_pool_their_weight_behind_the_strongest() -> None:
    # WiFi 0.10 and Ethernet 0.15 are one non-3GPP access: together 0.25, above the standby weight (0.2), so the
    # rule is priority-based, not active-standby as either weight alone would make it; Ethernet, the higher
    # weight, represents the access. With the primary path on it, WiFi represents it instead.
    ps = [
        PathState("wlan0", AccessType.WIFI, 0.10, 30.0),
        PathState("eth0", AccessType.ETHERNET, 0.15, 5.0),
        PathState("wwan0", AccessType.LTE, 0.75, 40.0),
    ]
    d = decide(ps, "wwan0", config=CONFIG)
    assert d.steering_mode is SteeringMode.PRIORITY_BASED
    assert [(a.access, a.interface, a.priority) for a in d.accesses] == [
        (LTE, "wwan0", Priority.HIGH),
        (WIFI, "eth0", Priority.LOW),
    ]
    d = decide(ps, "wlan0", config=CONFIG)
    assert [(a.access, a.interface) for a in d.accesses] == [(WIFI, "wlan0"), (LTE, "wwan0")]


def test_mec_units_and_unknowns() -> None:
    q = QosRequirement.from_mec(min_tpt=5000, max_latency=2_000_000, max_loss=3, max_jitter=100)
    assert q.min_throughput_bps == 5e6  # kbit/s
    assert q.max_latency_ms == pytest.approx(20.0)  # 10 ns units
    assert q.max_loss == pytest.approx(1e-3)  # 10^-x
    from edgepath.engines.steering import Prediction

    assert unmet_requirements(q, Prediction(None, None, None)) == ("minTpt", "maxLatency", "maxLoss", "maxJitter")


def test_value_sets_follow_the_specs() -> None:
    assert {m: PFCP_STEERING_MODE[m] for m in SteeringMode if PFCP_STEERING_MODE[m] is not None} == {
        SteeringMode.ACTIVE_STANDBY: 0,
        SteeringMode.SMALLEST_DELAY: 1,
        SteeringMode.LOAD_BALANCING: 2,
        SteeringMode.PRIORITY_BASED: 3,
    }
    assert [MTS_MODE_INTENT[m] for m in range(5)] == [
        Intent.LOW_COST,
        Intent.LOW_LATENCY,
        Intent.HIGH_THROUGHPUT,
        Intent.REDUNDANCY,
        Intent.QOS,
    ]


def test_bad_input_raises() -> None:
    with pytest.raises(ValueError, match="empty"):
        decide([], "wlan0")
    with pytest.raises(ValueError, match="primary_interface"):
        decide(paths(), "eth9")


# --- the DEFAULT rule's key (issue 16: the adapter keeps rules by it instead of deciding per request) -------------
# a small space, so that cases collide: each name mostly has its access type
_KEY_TYPES = {"wlan0": AccessType.WIFI, "wlan1": AccessType.WIFI, "eth0": AccessType.ETHERNET}
_KEY_TYPES |= {"wwan0": AccessType.LTE, "wwan1": AccessType.NR}
# weights that collide on purpose: equal after the reason's rounding (0.101, 0.104), either side of the standby
# bound (0.19999, 0.2), an exact rounding tie (0.125), sums of two interfaces
_KEY_WEIGHTS = st.sampled_from([None, 0.0, 0.1, 0.101, 0.104, 0.125, 0.15, 0.19999, 0.2, 0.5, 0.9, 1.0])


@st.composite
def _weighted_paths(draw: st.DrawFn) -> tuple[list[tuple[str, AccessType, float | None]], str]:
    names = draw(st.lists(st.sampled_from(sorted(_KEY_TYPES)), min_size=1, max_size=3, unique=True))
    paths = [(n, draw(st.sampled_from([_KEY_TYPES[n]] * 3 + list(AccessType))), draw(_KEY_WEIGHTS)) for n in names]
    return paths, draw(st.sampled_from(names))


def _default_decision(paths: list[tuple[str, AccessType, float | None]], primary: str) -> SteeringDecision:
    states = [PathState(n, t, weight=w, rtt_ms=float(i), loss=0.01 * i) for i, (n, t, w) in enumerate(paths)]
    return decide(states, primary, Intent.DEFAULT, None, SteeringConfig(rtt_threshold_ms=150.0))


@settings(max_examples=300, deadline=None)
@given(cases=st.lists(_weighted_paths(), min_size=2, max_size=60))
def test_equal_rule_keys_are_equal_decisions_and_unequal_keys_unequal_ones(
    cases: list[tuple[list[tuple[str, AccessType, float | None]], str]],
) -> None:
    config = SteeringConfig(rtt_threshold_ms=150.0)
    keys = [default_rule_key(p, primary, config) for p, primary in cases]
    decisions = [_default_decision(p, primary) for p, primary in cases]
    assert None not in keys
    for i in range(len(cases)):
        for j in range(i + 1, len(cases)):
            assert (keys[i] == keys[j]) == (decisions[i] == decisions[j]), (cases[i], cases[j])


@settings(max_examples=300, deadline=None)
@given(case=_weighted_paths())
def test_the_two_path_key_is_the_grouped_key(case: tuple[list[tuple[str, AccessType, float | None]], str]) -> None:
    """A device of two interfaces on two accesses (WiFi and cellular, the common one) gets its key without the
    grouping (issue 16: ~2 µs less per decision), the key the grouping gives."""
    paths, primary = case
    config = SteeringConfig(rtt_threshold_ms=150.0)
    assert default_rule_key(paths, primary, config) == _grouped_rule_key(paths, primary, config)
    assert default_rule_key(paths, "eth9", config) is None


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # the reason prints the standby weight to 2 places: 0.10 and 0.12 are two rules
        (
            [("wlan0", AccessType.WIFI, 0.9), ("wwan0", AccessType.LTE, 0.1)],
            [("wlan0", AccessType.WIFI, 0.9), ("wwan0", AccessType.LTE, 0.125)],
        ),
        # one name, two access types (two devices): two rules, alone or beside another access
        ([("wlan0", AccessType.WIFI, 0.5)], [("wlan0", AccessType.ETHERNET, 0.5)]),
        (
            [("wlan0", AccessType.WIFI, 0.5), ("wwan0", AccessType.LTE, 0.5)],
            [("wlan0", AccessType.ETHERNET, 0.5), ("wwan0", AccessType.LTE, 0.5)],
        ),
        (
            [("wlan0", AccessType.WIFI, 0.5), ("wwan0", AccessType.LTE, 0.5)],
            [("wlan0", AccessType.WIFI, 0.5), ("wwan0", AccessType.NR, 0.5)],
        ),
        # the other access's representative: the higher weight of two
        (
            [("wlan0", AccessType.WIFI, 0.5), ("wwan0", AccessType.LTE, 0.3), ("wwan1", AccessType.NR, 0.2)],
            [("wlan0", AccessType.WIFI, 0.5), ("wwan0", AccessType.LTE, 0.2), ("wwan1", AccessType.NR, 0.3)],
        ),
    ],
)
def test_rule_keys_tell_apart_what_the_rules_do(
    a: list[tuple[str, AccessType, float | None]], b: list[tuple[str, AccessType, float | None]]
) -> None:
    config = SteeringConfig(rtt_threshold_ms=150.0)
    assert _default_decision(a, "wlan0") != _default_decision(b, "wlan0")
    assert default_rule_key(a, "wlan0", config) != default_rule_key(b, "wlan0", config)


def test_no_rule_key_where_decide_raises() -> None:
    config = SteeringConfig()
    assert default_rule_key([], "wlan0", config) is None
    assert default_rule_key([("wlan0", AccessType.WIFI, 0.5)], "wwan0", config) is None
    with pytest.raises(ValueError, match="names no path"):
        _default_decision([("wlan0", AccessType.WIFI, 0.5)], "wwan0")
