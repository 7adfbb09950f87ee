"""SSMP engine: each equation pinned on hand-computed values, and every decision rule.

Hand computations (Yang et al., SSMP, Eq. 1–3; MSS = 1460 B, C = √1.5 ≈ 1.2247449):
  T(10 ms, 1 %) = 11680 bit · 1.2247449 / (0.010 s · 0.1)        = 14 305 020.1 bit/s
  T(20 ms, 2 %) = 11680 bit · 1.2247449 / (0.020 s · 0.1414214)  =  5 057 588.4 bit/s
  Q(paths 10/20 ms, p 0, B 80/30 Mbit/s) = 1·80 + (10/20)·30      = 95 Mbit/s
  Q(paths 10/20 ms, p 1 %/2 %, B 40/20)  = 14.305020 + 0.5·5.057588 = 16.833814 Mbit/s
  Eq. 3, α = 0.2, Q_new = 40, Q_prev = 95: 0.2·40 + 0.8·95 = 84
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from edgepath.engines.ssmp import (
    Candidate,
    FlowClass,
    PathMeasurement,
    Rule,
    ServerState,
    SsmpConfig,
    SsmpSelector,
    candidate_q_new_bps,
    initial_subflow_interface,
    mathis_throughput_bps,
    path_rtt_ms,
    server_q_bps,
    smooth_q,
    transfer_q_new_bps,
)

MBPS = 1e6
NOW = 1_000_000.0


def cand(address: str, *paths: tuple[str, float, float | None, float | None], dns: str = "wlan0") -> Candidate:
    return Candidate(
        address=address,
        dns_interface=dns,
        paths=tuple(PathMeasurement(i, (rtt,), loss, bw) for i, rtt, loss, bw in paths),
    )


def selector(**kw: float) -> SsmpSelector:
    return SsmpSelector(SsmpConfig(**kw), np.random.default_rng(7))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ Eq. 1


def test_eq1_mathis_on_hand_values() -> None:
    assert mathis_throughput_bps(10.0, 0.01) == pytest.approx(14_305_020.1, rel=1e-8)
    assert mathis_throughput_bps(20.0, 0.02) == pytest.approx(5_057_588.36, rel=1e-8)


def test_eq1_p_zero_is_unbounded_and_min_takes_bandwidth() -> None:
    assert mathis_throughput_bps(10.0, 0.0) == math.inf
    assert server_q_bps([10.0], [0.0], [40 * MBPS]) == 40 * MBPS


@pytest.mark.parametrize(("rtt", "loss"), [(0.0, 0.1), (-1.0, 0.1), (10.0, 1.5), (10.0, -0.1)])
def test_eq1_rejects_out_of_range(rtt: float, loss: float) -> None:
    with pytest.raises(ValueError):
        mathis_throughput_bps(rtt, loss)


# ------------------------------------------------------------------------------------------ Eq. 2


def test_eq2_bandwidth_limited_with_beta() -> None:
    assert server_q_bps([10.0, 20.0], [0.0, 0.0], [80 * MBPS, 30 * MBPS]) == pytest.approx(95 * MBPS)


def test_eq2_loss_limited() -> None:
    q = server_q_bps([10.0, 20.0], [0.01, 0.02], [40 * MBPS, 20 * MBPS])
    assert q == pytest.approx(16_833_814.28, rel=1e-8)


def test_eq2_beta_uses_the_fastest_subflow_of_the_server() -> None:
    # β = (5/5, 5/20): 10 + 0.25·40 = 20 Mbit/s
    assert server_q_bps([5.0, 20.0], [0.0, 0.0], [10 * MBPS, 40 * MBPS]) == pytest.approx(20 * MBPS)


def test_eq2_rejects_mismatched_inputs() -> None:
    with pytest.raises(ValueError):
        server_q_bps([10.0, 20.0], [0.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        server_q_bps([], [], [])


def test_path_rtt_is_the_mean_of_samples() -> None:
    assert path_rtt_ms(PathMeasurement("wlan0", (10.0, 20.0, 30.0))) == pytest.approx(20.0)
    assert path_rtt_ms(PathMeasurement("wlan0", ())) is None


# ------------------------------------------------------------------------------------------ Eq. 3


def test_eq3_alpha_smoothing() -> None:
    prev = ServerState(q_bps=95.0, updated_at=NOW - 10)
    assert smooth_q(40.0, prev, 0.2, NOW, 600.0) == pytest.approx(84.0)
    assert smooth_q(40.0, prev, 0.5, NOW, 600.0) == pytest.approx(67.5)
    assert smooth_q(40.0, prev, 0.8, NOW, 600.0) == pytest.approx(51.0)


def test_eq3_without_history_or_with_stale_history_is_q_new() -> None:
    assert smooth_q(40.0, None, 0.2, NOW, 600.0) == 40.0
    old = ServerState(q_bps=95.0, updated_at=NOW - 601)
    assert smooth_q(40.0, old, 0.2, NOW, 600.0) == 40.0


def test_update_returns_new_state() -> None:
    s = selector(alpha=0.2)
    new = s.update(40.0, ServerState(95.0, NOW - 1), NOW)
    assert new == ServerState(q_bps=pytest.approx(84.0), updated_at=NOW)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ flow class


def test_flow_class_threshold_is_configurable() -> None:
    s = selector()
    assert s.flow_class(1_024_000) is FlowClass.MICE  # the paper's 1000 KB file is a mice flow
    assert s.flow_class(1_048_576) is FlowClass.ELEPHANT
    assert selector(mice_threshold_bytes=100).flow_class(100) is FlowClass.ELEPHANT


# ------------------------------------------------------------------------------------------ mice


def paper_mice_servers() -> list[Candidate]:
    """Section V-A servers: 1 (5/15 ms), 2 (10/10 ms), 3 (30/30 ms)."""
    return [
        cand("s3", ("wlan0", 30.0, None, 40 * MBPS), ("wwan0", 30.0, None, 20 * MBPS)),
        cand("s2", ("wlan0", 10.0, None, 40 * MBPS), ("wwan0", 10.0, None, 30 * MBPS)),
        cand("s1", ("wlan0", 15.0, None, 40 * MBPS), ("wwan0", 5.0, None, 20 * MBPS), dns="wwan0"),
    ]


def test_mice_smallest_mean_rtt() -> None:
    cands = [
        cand("a", ("wlan0", 20.0, None, None), ("wwan0", 40.0, None, None)),
        cand("b", ("wlan0", 25.0, None, None), ("wwan0", 25.0, None, None)),
    ]
    sel = selector().decide(10_000, cands, {}, NOW)
    assert (sel.address, sel.rule, sel.flow_class) == ("b", Rule.MICE_MEAN_RTT, FlowClass.MICE)
    assert sel.score == pytest.approx(25.0)
    assert sel.score_name == "mean_rtt_ms"
    assert sel.scores == {"a": pytest.approx(30.0), "b": pytest.approx(25.0)}


def test_mice_tie_goes_to_shortest_single_path_and_initial_subflow_is_that_path() -> None:
    sel = selector().decide(1000, paper_mice_servers(), {}, NOW)
    assert sel.address == "s1"  # mean 10 ms like s2, but has the 5 ms path
    assert sel.rule is Rule.MICE_MIN_RTT_TIEBREAK
    assert sel.initial_subflow_interface == "wwan0"
    assert sel.candidate_index == 2


def test_mice_full_tie_prefers_dss_answer() -> None:
    cands = [
        cand("a", ("wlan0", 10.0, None, None), ("wwan0", 20.0, None, None)),
        cand("b", ("wlan0", 20.0, None, None), ("wwan0", 10.0, None, None)),
    ]
    assert selector().decide(10, cands, {}, NOW, default_index=1).address == "b"
    assert selector().decide(10, cands, {}, NOW, default_index=0).address == "a"


def test_mice_unmeasured_keeps_dss() -> None:
    cands = [cand("a", ("wlan0", 10.0, None, None)), Candidate("b", "wwan0", (PathMeasurement("wwan0", ()),))]
    sel = selector().decide(10, cands, {}, NOW, default_index=1)
    assert (sel.address, sel.rule) == ("b", Rule.MICE_DSS_UNMEASURED)
    assert math.isnan(sel.score)


# ------------------------------------------------------------------------------------------ elephants


def paper_elephant_servers() -> list[Candidate]:
    """Section V-B servers: 1 (80/30 Mbit/s), 2 (40/20), 3 (= 2 with 1 %/2 % loss); RTTs 10/20 ms."""
    return [
        cand("s2", ("wlan0", 10.0, 0.0, 40 * MBPS), ("wwan0", 20.0, 0.0, 20 * MBPS)),
        cand("s1", ("wlan0", 10.0, 0.0, 80 * MBPS), ("wwan0", 20.0, 0.0, 30 * MBPS)),
        cand("s3", ("wlan0", 10.0, 0.01, 40 * MBPS), ("wwan0", 20.0, 0.02, 20 * MBPS)),
    ]


def test_elephant_largest_q() -> None:
    sel = selector().decide(100 * 2**20, paper_elephant_servers(), {}, NOW)
    assert (sel.address, sel.rule, sel.flow_class) == ("s1", Rule.ELEPHANT_Q, FlowClass.ELEPHANT)
    assert sel.score == pytest.approx(95 * MBPS)
    assert sel.q_new_bps["s3"] == pytest.approx(16_833_814.28, rel=1e-8)
    assert sel.q_new_bps["s2"] == pytest.approx(50 * MBPS)
    assert sel.initial_subflow_interface == "wlan0"


def test_elephant_smoothing_with_stored_q_changes_the_choice() -> None:
    # s1 measures Q_new = 40 Mbit/s, stored 95: α = 0.2 → 84 > 50 stay; α = 0.8 → 51 > 50 stay; α = 1 → 40 switch.
    cands = [
        cand("s1", ("wlan0", 10.0, 0.0, 30 * MBPS), ("wwan0", 20.0, 0.0, 20 * MBPS)),
        cand("s2", ("wlan0", 10.0, 0.0, 40 * MBPS), ("wwan0", 20.0, 0.0, 20 * MBPS)),
    ]
    states = {"s1": ServerState(95 * MBPS, NOW - 5), "s2": ServerState(50 * MBPS, NOW - 5)}
    low = selector(alpha=0.2).decide(10**9, cands, states, NOW)
    assert (low.address, low.score) == ("s1", pytest.approx(84 * MBPS))
    assert selector(alpha=0.8).decide(10**9, cands, states, NOW).address == "s1"
    assert selector(alpha=1.0).decide(10**9, cands, states, NOW).address == "s2"


def test_elephant_dss_until_b_and_p_known() -> None:
    cands = paper_elephant_servers()
    cands[2] = cand("s3", ("wlan0", 10.0, None, 40 * MBPS), ("wwan0", 20.0, 0.02, 20 * MBPS))  # p unknown
    sel = selector().decide(10**9, cands, {}, NOW, default_index=2)
    assert (sel.address, sel.rule) == ("s3", Rule.ELEPHANT_DSS_UNMEASURED)
    cands[2] = cand("s3", ("wlan0", 10.0, 0.0, None), ("wwan0", 20.0, 0.02, 20 * MBPS))  # B unknown
    assert selector().decide(10**9, cands, {}, NOW, default_index=0).address == "s2"


def test_elephant_identical_candidates_random_with_injected_rng() -> None:
    cands = [
        cand("same", ("wlan0", 10.0, 0.0, 10 * MBPS), dns="wlan0"),
        cand("same", ("wwan0", 30.0, 0.0, 10 * MBPS), dns="wwan0"),
    ]
    picks = {
        SsmpSelector(SsmpConfig(), np.random.default_rng(seed)).decide(10**9, cands, {}, NOW).candidate_index
        for seed in range(20)
    }
    assert picks == {0, 1}
    a = [SsmpSelector(rng=np.random.default_rng(3)).decide(10**9, cands, {}, NOW).candidate_index for _ in range(5)]
    b = [SsmpSelector(rng=np.random.default_rng(3)).decide(10**9, cands, {}, NOW).candidate_index for _ in range(5)]
    assert a == b
    assert (
        SsmpSelector(rng=np.random.default_rng(3)).decide(10**9, cands, {}, NOW).rule is Rule.ELEPHANT_IDENTICAL_RANDOM
    )


def test_elephant_q_tie_is_random_among_tied() -> None:
    cands = [
        cand("a", ("wlan0", 10.0, 0.0, 10 * MBPS)),
        cand("b", ("wlan0", 10.0, 0.0, 10 * MBPS)),
        cand("c", ("wlan0", 10.0, 0.0, 5 * MBPS)),
    ]
    seen = {SsmpSelector(rng=np.random.default_rng(s)).decide(10**9, cands, {}, NOW).address for s in range(30)}
    assert seen == {"a", "b"}
    assert SsmpSelector(rng=np.random.default_rng(0)).decide(10**9, cands, {}, NOW).rule is Rule.ELEPHANT_Q_TIE_RANDOM


def test_candidate_q_new_none_when_unknown() -> None:
    assert candidate_q_new_bps(cand("a", ("wlan0", 10.0, 0.0, None))) is None
    assert candidate_q_new_bps(Candidate("a", "wlan0", (PathMeasurement("wlan0", (), 0.0, 1.0),))) is None


# ------------------------------------------------------------------------------------------ single, stale, errors


@pytest.mark.parametrize("size", [10, 10**9])
def test_single_candidate(size: int) -> None:
    sel = selector().decide(size, [cand("only", ("wlan0", 30.0, None, None), ("wwan0", 8.0, None, None))], {}, NOW)
    assert (sel.address, sel.rule, sel.initial_subflow_interface) == ("only", Rule.SINGLE_CANDIDATE, "wwan0")


def test_initial_subflow_falls_back_to_dns_interface_without_rtt() -> None:
    assert initial_subflow_interface(Candidate("a", "wwan0", (PathMeasurement("wlan0", ()),))) == "wwan0"


def test_stale_flags() -> None:
    cands = paper_elephant_servers()
    states = {
        "s1": ServerState(1.0, NOW - 30),  # fresh
        "s2": ServerState(1.0, NOW - 601),  # older than 600 s
    }  # s3 never measured
    sel = selector(stale_age_s=600).decide(10**9, cands, states, NOW)
    assert sel.stale_servers == ("s2", "s3")
    assert selector(stale_age_s=700).decide(10, cands, states, NOW).stale_servers == ("s3",)


def test_decide_rejects_bad_calls() -> None:
    with pytest.raises(ValueError):
        selector().decide(10, [], {}, NOW)
    with pytest.raises(ValueError):
        selector().decide(-1, paper_elephant_servers(), {}, NOW)
    with pytest.raises(ValueError):
        selector().decide(10, paper_elephant_servers(), {}, NOW, default_index=3)
    with pytest.raises(ValueError):
        SsmpConfig(alpha=1.5)


def test_transfer_q_new_eq2_when_paths_measured_else_goodput() -> None:
    paths = [PathMeasurement("wlan0", (10.0,), 0.0, 80 * MBPS), PathMeasurement("wwan0", (20.0,), 0.0, 30 * MBPS)]
    assert transfer_q_new_bps(10**6, 1000.0, paths) == pytest.approx(95 * MBPS)
    # 1 MB in 0.5 s = 16 Mbit/s goodput when a path lacks B, or when no path is reported.
    partial = [PathMeasurement("wlan0", (10.0,), 0.0, None)]
    assert transfer_q_new_bps(1_000_000, 500.0, partial) == pytest.approx(16 * MBPS)
    assert transfer_q_new_bps(1_000_000, 500.0, []) == pytest.approx(16 * MBPS)
    with pytest.raises(ValueError):
        transfer_q_new_bps(10, 0.0, [])
