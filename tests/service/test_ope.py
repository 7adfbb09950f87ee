"""Off-policy evaluation (issue 18): estimators, refusal of unusable logs, ground truth on paired real data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from edgepath.engines.features import N_FEATURES
from edgepath.evaluation.ope import (
    BanditLog,
    BoostedDirectModel,
    DirectModel,
    LogRefused,
    adaptive_dr,
    bca_interval,
    bootstrap_indices,
    contextual_adaptive_dr,
    contextual_stablevar_weights,
    contextual_weighted_estimate,
    cross_fitted_q,
    dr_terms,
    effective_sample_size,
    estimate,
    evaluate_policy,
    fit_reward_model,
    jackknife,
    load_log,
    logging_probabilities,
    off_policy_evaluation,
    one_hot,
    predictable_reward_model,
    stablevar_weights,
    wald_interval,
    weighted_estimate,
)
from edgepath.evaluation.ope_truth import _log_service, _versions_at_contexts, ground_truth
from edgepath.evaluation.primary import load_split
from edgepath.evaluation.primary import test_stream as paired_stream
from edgepath.training.offline import situation_matrix

DATA = Path(__file__).resolve().parents[2] / "service" / "data" / "mobilebandwidth"


def line(arm: int, propensity: float | None, throughput_bps: float, i: int = 0) -> str:
    row = {
        "features": [float((i * 7 + k) % 5) / 5.0 for k in range(N_FEATURES)],
        "arms": ["WIFI", "LTE"],
        "arm_index": arm,
        "reward": int(throughput_bps >= 25e6),
        "throughput_bps": throughput_bps,
    }
    if propensity is not None:
        row["propensity"] = propensity
    return json.dumps(row)


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def synthetic(n: int, seed: int) -> tuple[BanditLog, np.ndarray]:
    """Uniform logging on two arms whose utilities are known per row; returns the log and the utilities."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    U = np.column_stack([0.3 + 0.1 * X[:, 0], 0.5 - 0.2 * X[:, 1]]).clip(0, 1)
    a = rng.integers(0, 2, n)
    p = np.full(n, 0.5)
    return BanditLog(X, a, p, U[np.arange(n), a] + rng.normal(0, 0.05, n), ()), U


def test_estimators_recover_a_known_value_and_dr_is_exact_with_a_perfect_model() -> None:
    log, U = synthetic(20_000, 1)
    pi = one_hot(np.ones(len(log), dtype=np.int64))  # always arm 1
    truth = U[:, 1].mean()
    q = DirectModel.fit(log).predict(log.X)  # the rewards are linear: the model is (nearly) perfect
    for est in ("ips", "snips", "dr"):
        assert float(estimate(est, pi, log, q)) == pytest.approx(truth, abs=0.01), est
    # DR with q = the true means has only the noise's variance: far closer than IPS
    dr_err = abs(float(estimate("dr", pi, log, U)) - truth)
    ips_err = abs(float(estimate("ips", pi, log, U)) - truth)
    assert dr_err < 0.002 and dr_err < ips_err
    w = pi[np.arange(len(log)), log.actions] / log.propensity
    assert effective_sample_size(w) == pytest.approx((log.actions == 1).sum(), rel=1e-9)


def test_missing_propensity_is_refused_naming_the_line(tmp_path: Path) -> None:
    log = write(tmp_path / "x.jsonl", [line(0, 0.5, 3e7), line(1, None, 1e7)])
    with pytest.raises(LogRefused, match="line 2: no propensity"):
        load_log(log)


def test_degenerate_propensities_are_refused(tmp_path: Path) -> None:
    log = write(tmp_path / "x.jsonl", [line(i % 2, 1.0, 3e7, i) for i in range(40)])
    with pytest.raises(LogRefused, match="degenerate"):
        load_log(log)
    bad = write(tmp_path / "y.jsonl", [line(0, 0.0, 3e7)])
    with pytest.raises(LogRefused, match="propensity"):
        load_log(bad)


@pytest.mark.timeout(120, method="thread")  # reason: two child `edgepath` processes (imports take ~5-15 s each)
def test_cli_refuses_with_a_clear_message_and_evaluates_a_good_log(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.jsonl", [line(i % 2, 1.0, 3e7, i) for i in range(40)])
    cli = [sys.executable, "-m", "edgepath.cli", "eval", "ope", "--policy", "wifi_first,lte_first"]
    done = subprocess.run([*cli, "--log", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "degenerate propensities" in done.stderr
    done = subprocess.run([*cli, "--log", str(bad), "--reward-model", "forest"], capture_output=True, text=True)
    assert done.returncode == 2 and "--reward-model" in done.stderr and "gbm, ridge" in done.stderr
    done = subprocess.run([*cli, "--log", str(bad), "--dr-folds", "0"], capture_output=True, text=True)
    assert done.returncode == 2 and "--dr-folds" in done.stderr
    rng = np.random.default_rng(3)
    good = write(
        tmp_path / "good.jsonl",
        [line(int(a), 0.5, 3e7 if a == 0 else 1e7, i) for i, a in enumerate(rng.integers(0, 2, 400))],
    )
    out = tmp_path / "r.json"
    done = subprocess.run(
        [*cli, "--log", str(good), "--out", str(out), "--n-bootstrap", "100"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    wifi, lte = report["policies"]["wifi_first"], report["policies"]["lte_first"]
    assert wifi["dr"]["estimate"] == pytest.approx(0.03, abs=1e-9)  # WiFi always measured 30 Mbit/s
    assert lte["snips"]["estimate"] == pytest.approx(0.01, abs=1e-9)
    assert wifi["ips"]["ci95"][0] <= wifi["ips"]["estimate"] <= wifi["ips"]["ci95"][1]
    # each estimator names its reported interval; DR reports its Wald interval (chosen on ground truth)
    assert [lte[e]["interval"] for e in ("ips", "snips", "dr")] == ["percentile", "percentile", "normal"]
    assert lte["dr"]["ci95"] == lte["dr"]["ci95_normal"]
    assert lte["ips"]["ci95"] == lte["ips"]["ci95_percentile"]
    # adr: WiFi's reward is constant, so once two WiFi rows precede a row its predictable model is exact; only
    # the first rows' scores (model = the earlier rows' mean) differ from 0.03
    assert wifi["adr"]["estimate"] == pytest.approx(0.03, abs=1e-3)
    assert wifi["adr"]["ci95"][0] <= wifi["adr"]["estimate"] <= wifi["adr"]["ci95"][1]
    assert "adr" in done.stdout
    assert 0 < wifi["effective_sample_size"] <= report["n_evaluation_part"]


def test_jackknife_values_are_the_estimates_without_each_row() -> None:
    log, _ = synthetic(60, 3)
    pi = np.column_stack([np.full(60, 0.3), np.full(60, 0.7)])
    q = DirectModel.fit(log).predict(log.X)
    for est in ("ips", "snips", "dr"):
        keep = [np.delete(np.arange(60), i) for i in range(60)]
        direct = [float(estimate(est, pi[k], log.subset(k), q[k])) for k in keep]
        np.testing.assert_allclose(jackknife(est, pi, log, q), direct, rtol=1e-12, atol=1e-15)


def test_wald_interval_is_the_estimate_plus_minus_z_standard_errors() -> None:
    """IPS and DR: z·s/√n of their per-row terms; SNIPS: the delta-method SE, which must agree with the bootstrap's
    standard deviation of the ratio (a wrong formula, e.g. IPS's, would not)."""
    log, _ = synthetic(2000, 5)
    n = len(log)
    pi = np.column_stack([np.full(n, 0.2), np.full(n, 0.8)])
    q = DirectModel.fit(log).predict(log.X)
    w = pi[np.arange(n), log.actions] / log.propensity
    z = 1.959963984540054
    for est, terms in (("ips", w * log.reward), ("dr", dr_terms(pi, log, q))):
        value, lo, hi = wald_interval(est, pi, log, q)
        assert value == pytest.approx(terms.mean(), rel=1e-12)
        assert (hi - lo) / 2 == pytest.approx(z * terms.std(ddof=1) / np.sqrt(n), rel=1e-9)
        assert lo < value < hi
    value, lo, hi = wald_interval("snips", pi, log, q)
    idx = bootstrap_indices(n, 4000, np.random.default_rng(1))
    boot_sd = float(estimate("snips", pi, log, q, idx).std())
    assert value == pytest.approx(float(estimate("snips", pi, log, q)), rel=1e-12)
    assert (hi - lo) / 2 == pytest.approx(z * boot_sd, rel=0.1)
    ips_half = (wald_interval("ips", pi, log, q)[2] - wald_interval("ips", pi, log, q)[1]) / 2
    assert (hi - lo) / 2 < 0.8 * ips_half  # self-normalising removes the weights' own variance here
    report = evaluate_policy(pi, log, q, idx[:500])
    assert report["dr"]["interval"] == "normal" and report["dr"]["ci95"] == list(wald_interval("dr", pi, log, q)[1:])
    assert report["dr"]["ci95_percentile"] != report["dr"]["ci95"]
    assert report["snips"]["interval"] == "percentile" and report["snips"]["ci95"] == report["snips"]["ci95_percentile"]
    one = log.subset(np.array([0]))
    assert wald_interval("dr", pi[:1], one, q[:1])[1:] == (float(dr_terms(pi[:1], one, q[:1])[0]),) * 2


def test_bca_interval_is_the_percentile_interval_when_symmetric_and_moves_with_the_skew() -> None:
    """BCa (Efron & Tibshirani §14.3): ≈ the percentile interval for a symmetric statistic (z₀ ≈ 0, a ≈ 0);
    for the mean of right-skewed terms (a > 0) both ends move up, the upper end more."""
    rng = np.random.default_rng(0)
    idx = bootstrap_indices(400, 4000, rng)
    for terms, skewed in ((rng.normal(size=400), False), (rng.lognormal(0.0, 1.5, size=400), True)):
        boots = terms[idx].mean(axis=1)
        jack = (terms.sum() - terms) / 399
        lo, hi = bca_interval(boots, float(terms.mean()), jack)
        p_lo, p_hi = np.quantile(boots, [0.025, 0.975])
        if skewed:
            assert lo > p_lo and hi - p_hi > lo - p_lo > 0.0
        else:
            assert lo == pytest.approx(p_lo, abs=0.1 * (p_hi - p_lo)) and hi == pytest.approx(
                p_hi, abs=0.1 * (p_hi - p_lo)
            )
    assert bca_interval(np.full(10, 0.3), 0.3, np.full(5, 0.3)) == (0.3, 0.3)


def test_boosted_reward_model_fits_where_an_adaptive_logger_rarely_chose_the_arm() -> None:
    """A nonlinear reward logged adaptively (arm 1 chosen mostly where it is good): the linear model's direct
    estimate of "always arm 1" is biased where the arm was rarely chosen; the trees' is not. Deterministic."""
    rng = np.random.default_rng(5)
    n = 6000
    X = rng.uniform(-1, 1, size=(n, 2))
    U = np.column_stack([np.full(n, 0.3), np.where(X[:, 0] > 0, 0.6, 0.6 * X[:, 0] ** 2)])
    p1 = np.where(X[:, 0] > 0, 0.95, 0.05)
    a = (rng.random(n) < p1).astype(np.int64)
    log = BanditLog(X, a, np.where(a == 1, p1, 1 - p1), U[np.arange(n), a] + rng.normal(0, 0.02, n), ())
    truth = U[:, 1].mean()
    boosted = BoostedDirectModel.fit(log).predict(X)[:, 1].mean()
    ridge = DirectModel.fit(log).predict(X)[:, 1].mean()
    assert abs(boosted - truth) < 0.01 < abs(ridge - truth)
    np.testing.assert_array_equal(fit_reward_model(log).predict(X), BoostedDirectModel.fit(log).predict(X))
    with pytest.raises(ValueError, match="unknown reward model"):
        fit_reward_model(log, "forest")


def test_boosted_reward_model_predicts_the_mean_reward_for_an_arm_never_chosen() -> None:
    log, _ = synthetic(200, 4)
    only_wifi = log.subset(np.flatnonzero(log.actions == 0))
    q = BoostedDirectModel.fit(only_wifi).predict(log.X)
    np.testing.assert_allclose(q[:, 1], only_wifi.reward.mean())
    assert np.std(q[:, 0]) > 0.0  # arm 0's trees depend on the features


def test_cross_fitted_reward_model_never_predicts_a_row_it_was_fitted_on() -> None:
    """Cross-fitting: a row's q̂ comes from models that did not see it (changing its reward leaves its q̂ as it was),
    while the other fold's model did see it; one fold is the model part's model alone."""
    log, _ = synthetic(400, 6)
    model_idx, eval_idx = np.arange(0, 400, 2), np.arange(1, 400, 2)
    one = cross_fitted_q(log, model_idx, eval_idx, "gbm", folds=1)
    np.testing.assert_array_equal(one, fit_reward_model(log.subset(model_idx)).predict(log.X[eval_idx]))
    two = cross_fitted_q(log, model_idx, eval_idx, "gbm", folds=2)
    changed = BanditLog(log.X, log.actions, log.propensity, log.reward.copy(), ())
    changed.reward[eval_idx[0]] += 5.0  # evaluation row 0 is in fold 0
    two_changed = cross_fitted_q(changed, model_idx, eval_idx, "gbm", folds=2)
    fold0 = np.arange(len(eval_idx)) % 2 == 0
    np.testing.assert_array_equal(two_changed[fold0], two[fold0])  # fold 0's model never saw row 0
    assert np.abs(two_changed[~fold0] - two[~fold0]).max() > 0  # fold 1's model did
    with pytest.raises(ValueError, match="folds"):
        cross_fitted_q(log, model_idx, eval_idx, "gbm", folds=0)


def test_a_tiny_log_is_refused() -> None:
    log, _ = synthetic(400, 2)
    with pytest.raises(LogRefused, match="too few"):
        off_policy_evaluation(log.subset(np.arange(10)), ["wifi_first"])


@pytest.mark.timeout(120, method="thread")  # reason: 4 repetitions x 3 logging policies x 4 candidates on real data
def test_ground_truth_dr_is_close_to_the_true_value_on_paired_data() -> None:
    split = load_split(DATA / "wifi4.csv", DATA / "4G.csv", DATA / "wifi4.csv", DATA / "4G.csv")
    report = ground_truth(split, n_reps=4, n_bootstrap=100)
    for lp in ("uniform", "epsilon_greedy", "service"):
        for cand, row in report["summary"][lp].items():
            # DR's error is small against the value itself (~0.05-0.07 mean utility): not a tuned threshold,
            # a sanity bound that a wrong propensity or a leaked model part would break
            assert row["dr"]["mean_abs_error"] < 0.5 * row["true_value_mean"], (lp, cand)
            assert row["adr"]["mean_abs_error"] < 0.5 * row["true_value_mean"], (lp, cand)
            assert "ci95_coverage_bca" not in row["adr"] and row["adr"]["mean_ci95_width"] > 0.0
            assert row["cadr_exact"]["mean_abs_error"] < 0.5 * row["true_value_mean"], (lp, cand)
            assert "ci95_coverage_bca" not in row["cadr_exact"] and row["cadr_exact"]["mean_ci95_width"] > 0.0
            for est in ("ips", "snips", "dr"):
                assert 0.0 <= row[est]["ci95_coverage_bca"] <= 1.0 and row[est]["mean_ci95_width_bca"] >= 0.0
    # uniform logging: both weightings are constant (every candidate here is deterministic), so the two agree
    for cand, by_est in report["per_rep"]["uniform"].items():
        np.testing.assert_allclose(by_est["cadr_exact"], by_est["adr"], rtol=1e-9, err_msg=cand)


# ------------------------------------------------------------------ adaptively-weighted DR (adr)
def test_logging_probabilities_complete_the_two_arm_distribution() -> None:
    log = BanditLog(np.zeros((3, 1)), np.array([0, 1, 1]), np.array([0.9, 0.25, 1.0]), np.zeros(3), ())
    np.testing.assert_allclose(logging_probabilities(log), [[0.9, 0.1], [0.75, 0.25], [0.0, 1.0]])


def test_adr_weighted_estimate_and_variance_on_a_hand_computed_example() -> None:
    """Q = Σ h Γ / Σ h, V = Σ h² (Γ − Q)² / (Σ h)²: Γ = (1, 2, 4), h = (1, 1, 2) → Q = 11/4,
    V = (1.75² + 0.75² + 4 · 1.25²) / 16 = 9.875 / 16."""
    value, var = weighted_estimate(np.array([1.0, 2.0, 4.0]), np.array([1.0, 1.0, 2.0]))
    assert value == pytest.approx(2.75, abs=1e-15) and var == pytest.approx(9.875 / 16, abs=1e-15)
    # constant weights: the plain mean and the plug-in variance of a mean, Σ (Γ − Γ̄)² / n²
    value, var = weighted_estimate(np.array([1.0, 2.0, 4.0]), np.full(3, 0.3))
    assert value == pytest.approx(7 / 3) and var == pytest.approx(
        ((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 9
    )
    assert np.isnan(weighted_estimate(np.ones(2), np.zeros(2))[0])


def test_stablevar_weights_use_only_earlier_rows() -> None:
    """Always arm 0, logged e(arm 0) = 0.5, 0.25, 0.1: Σ π²/e = 2, 4, 10 per row. h_0 takes the uniform
    design's value (K · Σ π² = 2), h_1 = 2^-½, h_2 = ((2 + 4)/2)^-½; a constant design gives Hadad et al.'s √e."""
    pi = one_hot(np.zeros(3, dtype=np.int64))
    e = np.array([[0.5, 0.5], [0.25, 0.75], [0.1, 0.9]])
    np.testing.assert_allclose(stablevar_weights(pi, e), [2**-0.5, 2**-0.5, 3**-0.5])
    np.testing.assert_allclose(
        stablevar_weights(one_hot(np.zeros(5, dtype=np.int64)), np.tile([0.25, 0.75], (5, 1)))[1:], 0.5
    )
    # an arm the candidate plays with logging probability 0: no later row carries weight
    e0 = np.array([[0.5, 0.5], [0.0, 1.0], [0.5, 0.5]])
    np.testing.assert_allclose(stablevar_weights(pi, e0), [2**-0.5, 2**-0.5, 0.0])


def test_predictable_reward_model_is_the_direct_model_fitted_on_the_earlier_rows() -> None:
    log, _ = synthetic(40, 4)
    q = predictable_reward_model(log)
    assert np.all(q[0] == 0.0)
    for t in (12, 25, 39):
        np.testing.assert_allclose(q[t], DirectModel.fit(log.subset(np.arange(t))).predict(log.X[t : t + 1])[0])


def test_adr_is_dr_when_the_weights_are_constant_and_the_model_is_the_same() -> None:
    """Uniform logging: every StableVar weight is equal, so with DR's reward model adr is the DR estimate and the
    AIPW scores are DR's terms (adaptive_dr scores rows with dr_terms)."""
    log, _ = synthetic(200, 5)
    rows = np.arange(1, 200, 2)
    q = DirectModel.fit(log.subset(np.arange(0, 200, 2))).predict(log.X)
    for pi in (one_hot(np.zeros(200, dtype=np.int64)), np.column_stack([np.full(200, 0.3), np.full(200, 0.7)])):
        adr = adaptive_dr(pi, log, rows, q)
        ev = log.subset(rows)
        assert adr["estimate"] == pytest.approx(float(estimate("dr", pi[rows], ev, q[rows])), rel=1e-12)
        terms = dr_terms(pi[rows], ev, q[rows])
        assert adr["se"] == pytest.approx(float(terms.std()) / np.sqrt(len(rows)), rel=1e-9)


def test_adr_recovers_a_known_value_on_an_adaptively_logged_stream() -> None:
    """A logging policy that shifts toward arm 1 as it goes (e(arm 0) from 0.5 down to 0.05): adr's estimate of
    always-arm-0 is within its own 95% interval's reach of the truth (a fixed seed, not a coverage claim)."""
    rng = np.random.default_rng(6)
    n = 4000
    X = rng.normal(size=(n, 3))
    U = np.column_stack([0.3 + 0.1 * X[:, 0], 0.5 - 0.2 * X[:, 1]])
    e0 = np.linspace(0.5, 0.05, n)
    a = (rng.random(n) >= e0).astype(np.int64)
    p = np.where(a == 0, e0, 1 - e0)
    log = BanditLog(X, a, p, U[np.arange(n), a] + rng.normal(0, 0.05, n), ())
    rows = np.arange(1, n, 2)
    adr = adaptive_dr(one_hot(np.zeros(n, dtype=np.int64)), log, rows)
    assert adr["ci95"][0] <= U[rows, 0].mean() <= adr["ci95"][1]
    assert adr["se"] < 0.01


# ------------------------------------------------ adaptively-weighted DR with contextual weights (cadr_exact)
def two_arm(e0: np.ndarray) -> np.ndarray:
    """``(..., 2)`` distributions from the probability of arm 0."""
    return np.stack([e0, 1.0 - e0], axis=-1)


def test_cadr_exact_on_a_hand_computed_example() -> None:
    """Rows 0 and 2 of a 3-row log evaluated, π = always arm 0, so h_t(x_s) = √e_t(0|x_s): e_t(0|x_s) =
    [[0.25, 0.16], [0.49, 0.36]] → h = [[0.5, 0.4], [0.7, 0.6]], Z = (1.2, 1.0), h/Z = [[5/12, 0.4], [7/12, 0.6]].
    Arm 0 logged at 0.25 and 0.36 with rewards 0.25 and 0.72 and q̂ = 0: Γ = (1, 2). B = (5/12, 1.2), Q̂ = 97/60,
    V̂ = (5/12 − (25/144 + 0.48))² + (1.2 − (35/144 + 0.72))²."""
    log = BanditLog(np.zeros((3, 1)), np.array([0, 1, 0]), np.array([0.25, 0.5, 0.36]), np.array([0.25, 9.0, 0.72]), ())
    pi = one_hot(np.zeros(3, dtype=np.int64))
    probs_all = two_arm(np.array([[0.25, 0.16], [0.49, 0.36]]))
    np.testing.assert_allclose(contextual_stablevar_weights(pi[[0, 2]], probs_all), [[0.5, 0.4], [0.7, 0.6]])
    out = contextual_adaptive_dr(pi, log, np.array([0, 2]), probs_all, q=np.zeros((3, 2)))
    var = (5 / 12 - 25 / 144 - 0.48) ** 2 + (1.2 - 35 / 144 - 0.72) ** 2
    assert out["estimate"] == pytest.approx(97 / 60, rel=1e-12) and out["se"] == pytest.approx(np.sqrt(var), rel=1e-12)
    assert out["ci95"][1] - out["estimate"] == pytest.approx(1.959963984540054 * np.sqrt(var), rel=1e-9)
    # the same numbers from the building block
    value, v = contextual_weighted_estimate(np.array([1.0, 2.0]), np.array([[0.5, 0.4], [0.7, 0.6]]))
    assert value == pytest.approx(97 / 60, rel=1e-12) and v == pytest.approx(var, rel=1e-12)


def test_cadr_exact_with_a_stationary_logging_policy_is_the_plain_mean_of_the_scores() -> None:
    """e_t(·|x) = e(·|x) for every t (here depending on the context): h_t(x_s)/Z(x_s) = 1/T, so Q̂ is the mean of the
    AIPW scores (the predictable model's DR terms) and V̂ = Σ (Γ_t − Q̂)² / T²."""
    rng = np.random.default_rng(8)
    n = 300
    X = rng.normal(size=(n, 3))
    e0 = 1.0 / (1.0 + np.exp(-1.5 * X[:, 0]))  # context-dependent, time-invariant
    a = (rng.random(n) >= e0).astype(np.int64)
    p = np.where(a == 0, e0, 1.0 - e0)
    log = BanditLog(X, a, p, 0.4 + 0.1 * X[:, 1] + 0.2 * a + rng.normal(0, 0.05, n), ())
    rows = np.arange(0, n, 3)
    m = len(rows)
    probs_all = np.broadcast_to(two_arm(e0[rows])[None], (m, m, 2))
    q = predictable_reward_model(log)
    for pi in (one_hot(np.zeros(n, dtype=np.int64)), two_arm(np.full(n, 0.3)), two_arm(1.0 - e0)):
        scores = dr_terms(pi, log, q)[rows]
        out = contextual_adaptive_dr(pi, log, rows, probs_all, q)
        assert out["estimate"] == pytest.approx(float(scores.mean()), rel=1e-12)
        assert out["se"] == pytest.approx(float(scores.std()) / np.sqrt(m), rel=1e-9)
        assert contextual_adaptive_dr(pi, log, rows, probs_all)["estimate"] == out["estimate"]  # q computed inside


def test_cadr_exact_refuses_bad_probabilities_and_is_nan_without_rows_or_weight() -> None:
    log = BanditLog(np.zeros((2, 1)), np.array([0, 0]), np.array([0.5, 0.4]), np.array([1.0, 2.0]), ())
    pi = one_hot(np.zeros(2, dtype=np.int64))
    good = two_arm(np.array([[0.5, 0.3], [0.7, 0.4]]))
    assert np.isfinite(contextual_adaptive_dr(pi, log, np.arange(2), good)["estimate"])
    with pytest.raises(ValueError, match="shape"):
        contextual_adaptive_dr(pi, log, np.arange(2), good[:1])
    bad = good.copy()
    bad[0, 1, 0] = np.nan
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        contextual_adaptive_dr(pi, log, np.arange(2), bad)
    with pytest.raises(ValueError, match="logged distribution"):  # e_1(·|x_1) is not the logged 0.4
        contextual_adaptive_dr(pi, log, np.arange(2), two_arm(np.array([[0.5, 0.3], [0.7, 0.45]])))
    empty = contextual_adaptive_dr(pi, log, np.array([], dtype=np.int64), np.zeros((0, 0, 2)))
    assert np.isnan(empty["estimate"]) and np.isnan(empty["se"]) and all(np.isnan(empty["ci95"]))
    # π always plays an arm the logging policy never plays: every weight is 0, nothing is identified
    never = BanditLog(np.zeros((2, 1)), np.array([1, 1]), np.array([1.0, 1.0]), np.array([1.0, 2.0]), ())
    out = contextual_adaptive_dr(pi, never, np.arange(2), two_arm(np.zeros((2, 2))))
    assert np.isnan(out["estimate"]) and np.isnan(out["se"])
    # a NaN reward propagates
    nan_log = BanditLog(np.zeros((2, 1)), np.array([0, 0]), np.array([0.5, 0.4]), np.array([np.nan, 2.0]), ())
    assert np.isnan(contextual_adaptive_dr(pi, nan_log, np.arange(2), good, q=np.zeros((2, 2)))["estimate"])


def test_service_log_keeps_every_model_version_and_its_diagonal_is_the_logged_propensity() -> None:
    """The harness's service logging policy: one version per 50 outcomes; each row's own version at its own context
    gives exactly the logged distribution (the input check of contextual_adaptive_dr, here on every row)."""
    split = load_split(DATA / "wifi4.csv", DATA / "4G.csv", DATA / "wifi4.csv", DATA / "4G.csv")
    stream = paired_stream(split, 1000)[:400]
    _, T = situation_matrix(stream)
    log, version, versions = _log_service(stream, T / 1000.0, T, 1000)
    np.testing.assert_array_equal(version, np.arange(400) // 50)
    assert len(versions) == 9  # the cold start and one refit per 50 outcomes
    rows = np.arange(400)
    probs_all = _versions_at_contexts(log, version, versions, rows)
    diagonal = probs_all[rows, rows]
    assert np.array_equal(diagonal[rows, log.actions], log.propensity)
    np.testing.assert_allclose(diagonal, logging_probabilities(log), rtol=0.0, atol=1e-15)
    np.testing.assert_allclose(probs_all.sum(axis=-1), 1.0, rtol=0.0, atol=1e-12)
    assert np.all(probs_all[:50] == 0.5)  # the cold start is uniform at every context
    assert np.abs(probs_all[399] - probs_all[100]).max() > 0.05  # the learner's policy changes between versions
