# ruff: noqa: N803  (X, T, U: design, throughput and utility matrices, scikit-learn convention)
"""The OPE estimators against ground truth on paired real data (issue 18, ``edgepath eval ope-truth``).

A paired situation (:mod:`edgepath.datasets.mobilebandwidth`) knows both arms' measured throughput,
so the true value of any policy π on a stream is ``(1/n) Σ_i Σ_a π(a|x_i) U(x_i, a)`` with ``U`` the
utility of arm ``a``'s real measurement. Per repetition ``r`` (``n_reps``, default 50):

1. the test users' situations are paired and shuffled with seed ``first_seed + r`` (default 1000; one stream,
   :func:`edgepath.evaluation.primary.test_stream`; the test users are unseen by any trained model);
2. each logging policy runs on the stream, drawing arms with its exact propensities, and the log
   keeps (features, arm, propensity, the chosen arm's utility) — nothing else;
3. :func:`edgepath.evaluation.ope.off_policy_evaluation`'s protocol runs on that log (model part /
   evaluation part split, DR's reward model (gradient-boosted trees by default) and the learned candidates
   fitted on the model part, 95%
   percentile and BCa bootstrap intervals from the same resamples of the evaluation part, and the normal (Wald)
   interval, :func:`edgepath.evaluation.ope.wald_interval`), and the
   adaptively-weighted DR ``adr`` with its normal interval (:func:`edgepath.evaluation.ope.adaptive_dr`:
   reward model and weights from the log's earlier rows, in the logging order, over the same evaluation part),
   and ``cadr_exact`` (:func:`edgepath.evaluation.ope.contextual_adaptive_dr`: the same scores with the paper's
   contextual weights, which need the logging policy of every evaluated time at every evaluated context — known
   here because the harness runs the logging policy, keeping every model version of ``service``; a decision log
   does not hold it, so ``eval ope`` cannot report it);
4. truth = the candidate's true value on the evaluation part's situations (both arms known).

Reported per logging policy × candidate × estimator: bias (mean of estimate − truth), mean absolute
error, RMSE and the share of repetitions whose 95% interval covers the truth (``ci95_coverage``:
percentile; ``ci95_coverage_bca``: BCa, :func:`edgepath.evaluation.ope.bca_interval`; ``ci95_coverage_normal``:
Wald; for ``adr`` and ``cadr_exact`` their own normal interval, no BCa).

Logging policies: ``uniform`` (½, ½); ``epsilon_greedy`` (WiFi-first with ε = 0.2 uniform
exploration: WiFi 0.9, LTE 0.1 — what apprentice mode logs around a WiFi-first baseline); ``service``
(the default learner ``ridge_squarecb`` from a cold start, refit every 50 outcomes, with the
propensity the service logs — exact: the policy draws from a distribution whose every arm has
probability ≥ ``propensity_floor`` 0.01, :func:`edgepath.engines.linear_bandit.floor_mix`).
Candidates: ``wifi_first``, ``lte_first``, ``offline_classifier`` (the cost-sensitive better-arm
classifier trained on the training users, fixed) and ``ridge_squarecb`` (greedy, trained on the
log's model part).

The situations are paired (two real single-arm tests of one city), not simultaneous measurements.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edgepath.datasets.mobilebandwidth import pair_situations
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit, TrainingSample, UtilityConfig
from edgepath.evaluation.ope import (
    DR_FOLDS,
    ESTIMATORS,
    REPORTED_ESTIMATORS,
    BanditLog,
    adaptive_dr,
    bca_interval,
    bootstrap_indices,
    candidate,
    contextual_adaptive_dr,
    cross_fitted_q,
    estimate,
    jackknife,
    one_hot,
    predictable_reward_model,
    split,
    wald_interval,
)
from edgepath.evaluation.primary import PAIRING_TEXT, Split, test_stream
from edgepath.training.offline import ARMS, BetterArmPolicy, OfflineConfig, situation_matrix, train_offline

LOGGING_POLICIES: tuple[str, ...] = ("uniform", "epsilon_greedy", "service")
CANDIDATES: tuple[str, ...] = ("wifi_first", "lte_first", "offline_classifier", "ridge_squarecb")
EPSILON = 0.2
HARNESS_ONLY_ESTIMATORS: tuple[str, ...] = ("cadr_exact",)
"""Reported by ``eval ope-truth`` only: they need the logging policy at every context, not in a decision log."""
TRUTH_ESTIMATORS: tuple[str, ...] = (*REPORTED_ESTIMATORS, *HARNESS_ONLY_ESTIMATORS)


def _log_fixed(X: np.ndarray, U: np.ndarray, T: np.ndarray, probs: np.ndarray, rng: np.random.Generator) -> BanditLog:
    """Draw one arm per row from ``probs`` ``(n, K)``; log the chosen arm's utility and its propensity."""
    n = X.shape[0]
    a = (rng.random(n) >= probs[:, 0]).astype(np.int64)  # two arms
    p = probs[np.arange(n), a]
    return _as_log(X, a, p, U, T)


def _as_log(X: np.ndarray, a: np.ndarray, p: np.ndarray, U: np.ndarray, T: np.ndarray) -> BanditLog:
    n = X.shape[0]
    r = U[np.arange(n), a]
    samples = tuple(
        TrainingSample(X[i].tolist(), ARMS, int(a[i]), int(T[i, a[i]] >= 25.0), float(p[i]), float(T[i, a[i]]) * 1e6)
        for i in range(n)
    )
    return BanditLog(X, a, p, r, samples)


def _log_service(
    stream: Sequence[Any], U: np.ndarray, T: np.ndarray, seed: int
) -> tuple[BanditLog, np.ndarray, list[PrimaryPathBandit]]:
    """The default learner from a cold start, refit every 50 outcomes, logging its propensity (the exact
    probability of the drawn arm; the floor is enforced in the policy's distribution).

    Also returns, for :func:`_versions_at_contexts`, the model version that decided each row ``(n,)`` and a copy
    of every version (version 0: the cold start; version v: after the v-th refit).
    """
    bandit = PrimaryPathBandit(BanditConfig(seed=seed))
    versions = [bandit.clone()]
    X, a, p, buffer, version = [], [], [], [], []
    for i, s in enumerate(stream):
        choice = bandit.decide(s.interfaces)
        version.append(len(versions) - 1)
        arm = ARMS.index(choice.access_type)
        X.append(choice.features)
        a.append(arm)
        p.append(choice.propensity)
        mbps = float(T[i, arm])
        buffer.append(
            TrainingSample(
                choice.features.tolist(),
                choice.arms,
                choice.arm_index,
                int(mbps >= 25.0),
                choice.propensity,
                mbps * 1e6,
            )
        )
        if len(buffer) >= 50:
            bandit.update(buffer)
            buffer = []
            versions.append(bandit.clone())
    return _as_log(np.vstack(X), np.asarray(a), np.asarray(p), U, T), np.asarray(version), versions


def _versions_at_contexts(
    log: BanditLog, version: np.ndarray, versions: Sequence[PrimaryPathBandit], rows: np.ndarray
) -> np.ndarray:
    """``probs_all[t, s] = e_{rows[t]}(·|x_{rows[s]})`` ``(T, T, K)``: the version that decided row ``rows[t]`` at
    row ``rows[s]``'s context (:func:`edgepath.evaluation.ope.contextual_adaptive_dr`'s input)."""
    used = np.unique(version[rows])
    at = np.zeros((len(versions), len(rows), len(ARMS)))
    for v in used:
        at[v] = versions[v].probabilities_features(ARMS, log.X[rows])
    return at[version[rows]]


def ground_truth(
    split_: Split,
    n_reps: int = 50,
    n_bootstrap: int = 200,
    logging: Sequence[str] = LOGGING_POLICIES,
    candidates: Sequence[str] = CANDIDATES,
    progress: Callable[[str], None] | None = None,
    first_seed: int = 1000,
    reward_model: str = "gbm",
    dr_folds: int = DR_FOLDS,
) -> dict[str, Any]:
    """Run the protocol of the module docstring; JSON-ready report with per-repetition rows and summaries.

    Repetition ``r`` pairs, shuffles and draws with seed ``first_seed + r``; ``reward_model`` is DR's
    (:func:`edgepath.evaluation.ope.fit_reward_model`), fitted with ``dr_folds``
    (:func:`edgepath.evaluation.ope.cross_fitted_q`).
    """
    say = progress or (lambda _m: None)
    utility = UtilityConfig()
    situations = pair_situations(split_.train_wifi, split_.train_cellular, 0)
    train = train_offline(situations, (), OfflineConfig(policy="active_explorer"))
    classifier = BetterArmPolicy(train.classifier)
    # per repetition: (estimate, truth, percentile lo, hi, BCa lo, hi, Wald lo, hi)
    rows: dict[str, dict[str, dict[str, list[tuple[float, ...]]]]] = {}
    truths: dict[str, dict[str, list[float]]] = {}
    for rep in range(n_reps):
        seed = first_seed + rep
        stream = test_stream(split_, seed)
        X, T = situation_matrix(stream)
        U = np.vectorize(lambda t: utility(t * 1e6, None, None))(T)
        rng = np.random.default_rng(seed)
        for lp in logging:
            if lp in ("uniform", "epsilon_greedy"):
                dist = [0.5, 0.5] if lp == "uniform" else [1 - EPSILON / 2, EPSILON / 2]
                probs = np.tile(dist, (len(stream), 1))
                log = _log_fixed(X, U, T, probs, rng)
            else:
                log, version, versions = _log_service(stream, U, T, seed)
            model_idx, eval_idx = split(len(log), 0.5, rng)
            m = len(eval_idx)
            if lp == "service":
                probs_all = _versions_at_contexts(log, version, versions, eval_idx)
            else:  # stationary: e_t(·|x_s) = e(·|x_s) for every t
                probs_all = np.broadcast_to(probs[eval_idx][None, :, :], (m, m, len(ARMS)))
            tr, ev = log.subset(model_idx), log.subset(eval_idx)
            q = cross_fitted_q(log, model_idx, eval_idx, reward_model, dr_folds)
            q_pred = predictable_reward_model(log)
            idx = bootstrap_indices(len(ev), n_bootstrap, rng)
            U_ev = U[eval_idx]
            for cand in candidates:
                if cand == "offline_classifier":
                    pi_all = one_hot(classifier.choose(log.X))
                else:
                    pi_all = candidate(cand, tr, seed)(log.X)
                pi = pi_all[eval_idx]  # every candidate decides row by row
                truth = float((pi * U_ev).sum(axis=1).mean())
                truths.setdefault(lp, {}).setdefault(cand, []).append(truth)
                for est in ESTIMATORS:
                    value, n_lo, n_hi = wald_interval(est, pi, ev, q)  # the estimate and its Wald interval
                    boots = estimate(est, pi, ev, q, idx)
                    lo, hi = np.quantile(boots, [0.025, 0.975])
                    b_lo, b_hi = bca_interval(boots, value, jackknife(est, pi, ev, q))
                    rows.setdefault(lp, {}).setdefault(cand, {}).setdefault(est, []).append(
                        (value, truth, float(lo), float(hi), b_lo, b_hi, n_lo, n_hi)
                    )
                adr = adaptive_dr(pi_all, log, eval_idx, q_pred)
                rows.setdefault(lp, {}).setdefault(cand, {}).setdefault("adr", []).append(
                    (adr["estimate"], truth, *adr["ci95"])
                )
                cadr = contextual_adaptive_dr(pi_all, log, eval_idx, probs_all, q_pred)
                rows[lp][cand].setdefault("cadr_exact", []).append((cadr["estimate"], truth, *cadr["ci95"]))
        say(f"repetition {rep + 1}/{n_reps} done")
    summary: dict[str, Any] = {}
    for lp, by_cand in rows.items():
        for cand, by_est in by_cand.items():
            for est, reps in by_est.items():
                arr = np.asarray(reps)
                err = arr[:, 0] - arr[:, 1]
                covered = (arr[:, 2] <= arr[:, 1]) & (arr[:, 1] <= arr[:, 3])
                entry = summary.setdefault(lp, {}).setdefault(cand, {})[est] = {
                    "bias": float(err.mean()),
                    "mean_abs_error": float(np.abs(err).mean()),
                    "rmse": float(np.sqrt((err**2).mean())),
                    "ci95_coverage": float(covered.mean()),
                    "mean_ci95_width": float((arr[:, 3] - arr[:, 2]).mean()),
                }
                if arr.shape[1] == 8:  # the bootstrap estimators' BCa interval and their Wald interval
                    for key, (lo_col, hi_col) in (("bca", (4, 5)), ("normal", (6, 7))):
                        covered_k = (arr[:, lo_col] <= arr[:, 1]) & (arr[:, 1] <= arr[:, hi_col])
                        entry[f"ci95_coverage_{key}"] = float(covered_k.mean())
                        entry[f"mean_ci95_width_{key}"] = float((arr[:, hi_col] - arr[:, lo_col]).mean())
            summary[lp][cand]["true_value_mean"] = float(np.mean(truths[lp][cand]))
    return {
        "what": "OPE estimates vs the true value on paired real situations (both arms measured)",
        "pairing": PAIRING_TEXT,
        "value": "mean utility per decision (utility of the chosen arm's measured downlink; no latency/loss data)",
        "n_reps": n_reps,
        "seeds": [first_seed, first_seed + n_reps - 1],
        "reward_model": reward_model,
        "dr_folds": dr_folds,
        "n_bootstrap": n_bootstrap,
        "situations_per_stream": len(X),
        "logging_policies": {
            "uniform": "WiFi 0.5 / LTE 0.5",
            "epsilon_greedy": f"WiFi-first with epsilon {EPSILON}: WiFi {1 - EPSILON / 2}, LTE {EPSILON / 2}",
            "service": "ridge_squarecb cold start, refit every 50, logged propensity (exact, >= 0.01 in the policy)",
        },
        "harness_only": {
            "cadr_exact": "adaptively-weighted DR with the contextual StableVar weights of Zhan et al. 2021: needs "
            "every model version's policy at every evaluated context (kept by this harness), not computable by "
            "'eval ope' on a decision log"
        },
        "summary": summary,
        "per_rep": {
            lp: {c: {e: [list(r) for r in v] for e, v in by.items()} for c, by in bc.items()} for lp, bc in rows.items()
        },
    }


def format_truth_table(report: dict[str, Any]) -> str:
    """Markdown table: logging policy, candidate, estimator, bias, MAE, coverage (percentile, BCa and Wald; ``adr`` and
    ``cadr_exact``: their normal interval in the coverage columns, no BCa; ``cadr_exact`` is harness-only, it needs
    the logging policy at every context)."""
    lines = [
        "| logging policy | candidate | true value | estimator | bias | MAE | 95% CI coverage | mean CI width "
        "| BCa coverage | BCa mean width | Wald coverage | Wald mean width |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lp, by_cand in report["summary"].items():
        for cand, by_est in by_cand.items():
            for est in (e for e in TRUTH_ESTIMATORS if e in by_est):
                r = by_est[est]
                bca = (
                    f"{100 * r['ci95_coverage_bca']:.0f}% | {r['mean_ci95_width_bca']:.4f}"
                    if "ci95_coverage_bca" in r
                    else "– | –"
                )
                wald = (
                    f"{100 * r['ci95_coverage_normal']:.0f}% | {r['mean_ci95_width_normal']:.4f}"
                    if "ci95_coverage_normal" in r
                    else "– | –"
                )
                lines.append(
                    f"| {lp} | {cand} | {by_est['true_value_mean']:.4f} | {est} | {r['bias']:+.4f} | "
                    f"{r['mean_abs_error']:.4f} | {100 * r['ci95_coverage']:.0f}% | {r['mean_ci95_width']:.4f} | "
                    f"{bca} | {wald} |"
                )
    return "\n".join(lines)
