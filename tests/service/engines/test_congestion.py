"""Congestion-control advice: Table 3 lookups (Łuczak et al. 2023) and the mainline fallback."""

from __future__ import annotations

import math
import statistics

import pytest
from edgepath.engines import congestion as cc
from edgepath.engines.congestion import KernelCapabilities, Profile

OUT_OF_TREE = KernelCapabilities(
    available_congestion_controls=("reno", "cubic", "bbr", "lia", "olia", "balia", "wvegas"),
    allowed_congestion_controls=("reno", "cubic", "bbr", "lia", "olia", "balia", "wvegas"),
)


def test_table_has_twelve_pairs_and_spot_values() -> None:
    t = cc.table()
    assert len(t) == 12
    assert t[("balia", "reno")]["throughput_avg_mbps"] == 11.40
    assert t[("wvegas", "reno")]["protocol_delay_max_ms"] == 816
    assert t[("lia", "bbr")]["drop_rate_path1_seg_s"] == 0.1
    assert t[("lia", "bbr")]["drop_rate_mean_seg_s"] == pytest.approx(0.65)


@pytest.mark.parametrize(
    ("profile", "pair", "metric", "value"),
    [
        # Highest average throughput: BALIA + Reno, 11.40 Mbit/s (paper §3.1.5).
        (Profile.BULK, ("balia", "reno"), "throughput_avg_mbps", 11.40),
        # Lowest drop rate: LIA + BBR (paper §3.1.1): (0.1 + 1.2) / 2.
        (Profile.LOSS_SENSITIVE, ("lia", "bbr"), "drop_rate_mean_seg_s", 0.65),
        # Lowest HoL degree 15 ms for BALIA + Reno and BALIA + BBR (§3.1.4); v_av ties at 95; ζ_max 148 < 157.
        (Profile.STREAMING, ("balia", "reno"), "hol_degree_max_ms", 148),
        # Protocol delay v_av 95 for three pairs; v_max 231 decides.
        (Profile.INTERACTIVE, ("balia", "reno"), "protocol_delay_max_ms", 231),
    ],
)
def test_best_pair_per_profile(profile: Profile, pair: tuple[str, str], metric: str, value: float) -> None:
    a = cc.advise(profile, OUT_OF_TREE)
    assert (a.mptcp_level, a.subflow_level) == pair
    assert (a.deciding_metric, a.deciding_value) == (metric, pytest.approx(value))
    assert not a.mainline_fallback and not a.assumed_capabilities
    assert metric in a.explanation


def test_restricted_kernel_picks_best_available_pair() -> None:
    caps = KernelCapabilities(available_congestion_controls=("cubic", "olia", "wvegas", "vegas"))
    a = cc.advise(Profile.BULK, caps)
    assert (a.mptcp_level, a.subflow_level, a.deciding_value) == ("olia", "cubic", 10.58)


def test_allowed_list_intersects_available() -> None:
    caps = KernelCapabilities(
        available_congestion_controls=("reno", "cubic", "bbr", "lia", "balia"),
        allowed_congestion_controls=("cubic", "lia"),
    )
    a = cc.advise(Profile.BULK, caps)
    assert (a.mptcp_level, a.subflow_level) == ("lia", "cubic")


def test_mainline_fallback_subflow_level_only() -> None:
    caps = KernelCapabilities(available_congestion_controls=("reno", "cubic", "bbr"))
    a = cc.advise(Profile.BULK, caps)
    assert a.mainline_fallback and a.mptcp_level == ""
    # Table 3's column means would pick bbr (8.9375 Mbit/s); the testbed measured it worst on mainline (issue 20).
    assert a.subflow_level == "cubic"
    assert (a.deciding_metric, a.deciding_value) == ("throughput_avg_mbps", pytest.approx(15.98))
    assert "no coupled" in a.explanation and "measured" in a.explanation
    # the advice names what decided it: the testbed's mainline measurement, not Table 3 (it said Table 3)
    assert a.source == cc.MAINLINE_MEASURED_SOURCE
    assert cc.advise(Profile.BULK, OUT_OF_TREE).source == cc.SOURCE  # a coupled pair of Table 3 decides


def test_mainline_fallback_ranks_by_the_measured_metric_per_profile() -> None:
    caps = KernelCapabilities(available_congestion_controls=("reno", "cubic", "bbr", "vegas"))
    assert cc.advise(Profile.LOSS_SENSITIVE, caps).subflow_level == "cubic"  # measured drop rate
    two = KernelCapabilities(available_congestion_controls=("reno", "bbr"))
    assert cc.advise(Profile.BULK, two).subflow_level == "reno"  # without cubic: reno 15.49 beats bbr 11.63
    assert cc.advise(Profile.STREAMING, caps).subflow_level == "cubic"


class TestEdgeRule:
    """advise_with_edge: the edge's measurements override only when they refute the advice."""

    MAINLINE = KernelCapabilities(available_congestion_controls=("reno", "cubic", "bbr"))

    def test_refuted_advice_is_replaced_by_the_edges_best(self) -> None:
        edge = {"cubic": cc.EdgeStats(10.0, 0.5, 12), "bbr": cc.EdgeStats(14.0, 0.6, 12)}
        a = cc.advise_with_edge(Profile.BULK, self.MAINLINE, edge)
        assert a.subflow_level == "bbr" and a.deciding_value == 14.0
        assert "edge measurements override" in a.explanation

    def test_advice_within_the_best_ci_stands(self) -> None:
        edge = {"cubic": cc.EdgeStats(13.7, 0.5, 12), "bbr": cc.EdgeStats(14.0, 0.6, 12)}
        assert cc.advise_with_edge(Profile.BULK, self.MAINLINE, edge).subflow_level == "cubic"

    def test_too_few_transfers_or_unusable_algorithms_are_ignored(self) -> None:
        few = {"cubic": cc.EdgeStats(10.0, 0.5, 3), "bbr": cc.EdgeStats(14.0, 0.6, 3)}
        assert cc.advise_with_edge(Profile.BULK, self.MAINLINE, few).subflow_level == "cubic"
        foreign = {"cubic": cc.EdgeStats(10.0, 0.5, 12), "vegas": cc.EdgeStats(20.0, 0.1, 12)}
        assert cc.advise_with_edge(Profile.BULK, self.MAINLINE, foreign).subflow_level == "cubic"

    def test_lower_is_better_metrics(self) -> None:
        edge = {"cubic": cc.EdgeStats(300.0, 20.0, 10), "reno": cc.EdgeStats(150.0, 20.0, 10)}
        a = cc.advise_with_edge(Profile.STREAMING, self.MAINLINE, edge)
        assert a.subflow_level == "reno" and a.deciding_metric == "hol_degree_avg_ms"

    def test_loss_sensitive_compares_the_measured_drop_fraction(self) -> None:
        edge = {"cubic": cc.EdgeStats(0.05, 0.004, 10), "reno": cc.EdgeStats(0.02, 0.003, 10)}
        a = cc.advise_with_edge(Profile.LOSS_SENSITIVE, self.MAINLINE, edge)
        assert a.subflow_level == "reno" and a.deciding_metric == "drop_rate_fraction"
        assert a.deciding_value == 0.02


class TestEdgeStats:
    """edge_stats: mean and 95 % CI half-width (1.96·s/√n) from count, Σx, Σx²."""

    def test_mean_and_ci_match_the_sample_formulas(self) -> None:
        xs = [10.0, 12.0, 11.0, 13.0, 9.0]
        e = cc.edge_stats(len(xs), sum(xs), sum(x * x for x in xs))
        assert e is not None and e.transfers == 5
        assert e.mean == pytest.approx(statistics.fmean(xs))
        assert e.ci95_half == pytest.approx(1.96 * statistics.stdev(xs) / math.sqrt(5))

    def test_constant_values_have_no_spread_even_with_cancellation(self) -> None:
        x = 1e6 + 0.1
        e = cc.edge_stats(10, 10 * x, 10 * x * x * (1 - 1e-16))  # Σx² slightly below n·mean²
        assert e is not None and e.ci95_half == 0.0

    def test_one_transfer_never_refutes_and_no_or_broken_sums_are_no_evidence(self) -> None:
        one = cc.edge_stats(1, 5.0, 25.0)
        assert one is not None and one.ci95_half == math.inf
        assert cc.edge_stats(0, 0.0, 0.0) is None
        assert cc.edge_stats(3, 1.0, math.inf) is None
        assert cc.edge_stats(3, math.nan, 1.0) is None


def test_no_capabilities_assumes_mainline() -> None:
    a = cc.advise(Profile.LOSS_SENSITIVE, KernelCapabilities())
    assert a.mainline_fallback and a.assumed_capabilities
    assert a.subflow_level in cc.MAINLINE_DEFAULT
    assert "assuming a mainline kernel" in a.explanation


def test_unspecified_profile_is_streaming_and_said() -> None:
    a = cc.advise(Profile.UNSPECIFIED, OUT_OF_TREE)
    assert (a.mptcp_level, a.subflow_level) == ("balia", "reno")
    assert "streaming" in a.explanation


@pytest.mark.parametrize(
    "caps",
    [
        KernelCapabilities(available_congestion_controls=("vegas", "westwood")),
        KernelCapabilities(available_congestion_controls=("cubic",), allowed_congestion_controls=("reno",)),
    ],
)
def test_nothing_usable_keeps_kernel_default(caps: KernelCapabilities) -> None:
    a = cc.advise(Profile.STREAMING, caps)
    assert a.mptcp_level == "" and a.subflow_level == ""
    assert a.mainline_fallback
    assert "keep the kernel default" in a.explanation


def test_coupled_without_subflow_algorithms() -> None:
    a = cc.advise(Profile.BULK, KernelCapabilities(available_congestion_controls=("balia",)))
    assert a.subflow_level == "" and not a.mainline_fallback


def test_the_known_algorithms_hold_every_name_the_engine_advises_and_fewer_than_a_profiles_places() -> None:
    """The edge measurements' allow-list (issue 20): every algorithm Table 3, the mainline default and the testbed's
    measurements name, the 17 mainline modules and the 4 coupled ones, and fewer names than the store keeps
    per profile, so that known names alone can never fill a profile's places."""
    from edgepath.state.base import MAX_CC_ALGORITHMS

    named = {a for pair in cc.table() for a in pair} | set(cc.MAINLINE_DEFAULT)
    named |= {a for per_algo in cc.MAINLINE_MEASURED.values() for a in per_algo}
    assert named <= cc.KNOWN_ALGORITHMS
    assert len(cc.MAINLINE_MODULES) == 17 and set(cc.MPTCP_LEVEL) <= cc.KNOWN_ALGORITHMS
    assert len(cc.KNOWN_ALGORITHMS) == 21 < MAX_CC_ALGORITHMS
    assert all(a == a.lower() for a in cc.KNOWN_ALGORITHMS)  # measurements are lower-cased on the wire
