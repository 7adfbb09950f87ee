"""The paper's policy comparison on real data (issue 18, ``edgepath eval policies``).

Alzadjali et al. compare six contextualbandits policies by their mean cumulative reward over rounds
(their Fig. 4: "mean cumulative reward (and its error up to 95% confidence level) … over 50 batch
online simulations"), Bernoulli reward, SGD oracles refit every 50 outcomes, and report that the
Active Explorer is best overall and converges fastest (after about 1,000 rounds).

Protocol: for each pairing seed ``s`` (≥ 5), every WiFi test of the vendored data is paired with a
4G test of the same city (:func:`~edgepath.datasets.mobilebandwidth.pair_situations`, seed ``s``),
shuffled with ``default_rng(s)`` and cut to ``rounds``: one stream, the same for every policy. Each
policy starts cold (the service's cold start, :func:`edgepath.evaluation.primary._cold_config`,
seed ``s``) and is replayed as the service runs it (:func:`edgepath.evaluation.primary.run_bandit`:
decide with the last refit, refit every ``batch_size`` = 50 outcomes). The Bernoulli reward is the
paper's: 1 when the chosen arm's measured downlink ≥ 25 Mbit/s (the data has no latency). Per
round ``t``: the mean cumulative reward ``(1/t) Σ_{u≤t} r_u`` and the cumulative regret against
the oracle that knows both arms' outcomes, ``Σ_{u≤t} (max_a r_u(a) − r_u)``. Bands: 95% Student-t
intervals across seeds, per round.

Policies: the six of the paper, the service's default learner (``ridge_squarecb``, which learns the
utility, scored here on the same Bernoulli reward) and the baselines ``wifi_first`` (the upstream
full-mesh path manager's choice), ``lte_first`` and ``random``.

The situations are paired (two real single-arm tests of one city), not simultaneous measurements,
and the paper ran NS-3 on the MIT CSAIL traces: numbers are not comparable, orderings are.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgepath.datasets.mobilebandwidth import Measurement, pair_situations
from edgepath.engines.primary_path import DEFAULT_POLICY, PAPER_POLICIES, PrimaryPathBandit
from edgepath.evaluation.primary import PAIRING_TEXT, _cold_config, run_bandit
from edgepath.training.offline import OfflineConfig, situation_matrix

DEFAULT_LEARNER = DEFAULT_POLICY  # the service's default learner (ridge_squarecb)
BASELINES: tuple[str, ...] = ("wifi_first", "lte_first", "random")


def _t95(n: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1)) if n > 1 else float("nan")


def compare(
    wifi: Sequence[Measurement],
    cellular: Sequence[Measurement],
    seeds: Sequence[int],
    rounds: int = 3000,
    threshold_mbps: float = 25.0,
    batch_size: int = 50,
    policies: Sequence[str] = (*PAPER_POLICIES, DEFAULT_LEARNER),
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Replay every policy on every seed's stream; JSON-ready report with every curve (see module docstring).

    Curves are ``mean_cumulative_reward`` and ``cumulative_regret``, each with ``mean``, ``ci95_low`` and
    ``ci95_high`` per round (length ``rounds``), plus ``per_seed`` final values.
    """
    say = progress or (lambda _m: None)
    cfg = OfflineConfig(reward_threshold_mbps=threshold_mbps)
    rewards: dict[str, list[np.ndarray]] = {}
    oracle_rewards: list[np.ndarray] = []
    seconds: dict[str, float] = {}
    n_rounds = rounds
    for seed in seeds:
        situations = pair_situations(wifi, cellular, seed)
        order = np.random.default_rng(seed).permutation(len(situations))
        stream = [situations[i] for i in order[:rounds]]
        n_rounds = min(n_rounds, len(stream))
        _, T = situation_matrix(stream)
        R = (T >= threshold_mbps).astype(np.float64)  # Bernoulli reward of each arm, (n, 2)
        oracle_rewards.append(R.max(axis=1))
        chosen: dict[str, np.ndarray] = {
            "wifi_first": np.zeros(len(stream), dtype=np.int64),
            "lte_first": np.ones(len(stream), dtype=np.int64),
            "random": np.random.default_rng(seed + 10_000).integers(0, 2, len(stream)),
        }
        for policy in policies:
            t0 = time.perf_counter()
            bandit = PrimaryPathBandit(_cold_config(cfg, policy, seed))
            chosen[policy] = run_bandit(bandit, stream, threshold_mbps, batch_size)
            seconds[policy] = seconds.get(policy, 0.0) + time.perf_counter() - t0
        for name, arms in chosen.items():
            rewards.setdefault(name, []).append(R[np.arange(len(arms)), arms])
        say(f"seed {seed}: {len(stream)} rounds replayed")
    rounds_axis = np.arange(1, n_rounds + 1)
    oracle = np.vstack([o[:n_rounds] for o in oracle_rewards])
    t95 = _t95(len(seeds))
    curves: dict[str, Any] = {}
    for name, per_seed in rewards.items():
        r = np.vstack([x[:n_rounds] for x in per_seed])
        mean_cum = np.cumsum(r, axis=1) / rounds_axis
        regret = np.cumsum(oracle - r, axis=1)
        entry: dict[str, Any] = {"family": _family(name)}
        for key, m in (("mean_cumulative_reward", mean_cum), ("cumulative_regret", regret)):
            mu = m.mean(axis=0)
            half = t95 * m.std(axis=0, ddof=1) / np.sqrt(len(seeds))
            entry[key] = {
                "mean": _round(mu),
                "ci95_low": _round(mu - half),
                "ci95_high": _round(mu + half),
                "final_per_seed": [float(v) for v in m[:, -1]],
            }
        entry["final_mean_reward"] = float(mean_cum[:, -1].mean())
        entry["final_mean_reward_ci95"] = float(t95 * mean_cum[:, -1].std(ddof=1) / np.sqrt(len(seeds)))
        entry["final_regret"] = float(regret[:, -1].mean())
        if name in seconds:
            entry["replay_seconds_total"] = round(seconds[name], 2)
        curves[name] = entry
    oracle_mean = float(oracle.mean())
    ranking = sorted(
        (n for n in curves if curves[n]["family"] != "baseline"), key=lambda n: -curves[n]["final_mean_reward"]
    )
    return {
        "what": "cumulative Bernoulli reward and regret vs the oracle, cold starts, same real streams per seed",
        "pairing": PAIRING_TEXT,
        "reward": f"1[chosen arm's measured downlink >= {threshold_mbps} Mbit/s] (no latency in the data)",
        "seeds": list(seeds),
        "rounds": n_rounds,
        "batch_size": batch_size,
        "oracle_mean_reward": oracle_mean,
        "ranking_by_final_mean_reward": ranking,
        "paper_fig4": (
            "active_explorer best overall and fastest to converge (about 1,000 rounds); the text ranks no other"
        ),
        "curves": curves,
    }


def _family(name: str) -> str:
    if name in BASELINES:
        return "baseline"
    return "paper" if name in PAPER_POLICIES else "edgepath"


def _round(a: np.ndarray) -> list[float]:
    return [round(float(v), 6) for v in a]


def plot(report: dict[str, Any], path: Path) -> None:
    """Two panels: mean cumulative reward and cumulative regret vs round, mean ± 95% CI band across seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 6))
    x = np.arange(1, report["rounds"] + 1)
    styles = {"paper": "-", "edgepath": "-", "baseline": ":"}
    for name, c in sorted(report["curves"].items(), key=lambda kv: -kv[1]["final_mean_reward"]):
        lw = 2.4 if c["family"] == "edgepath" or name == "active_explorer" else 1.3
        for ax, key in ((ax1, "mean_cumulative_reward"), (ax2, "cumulative_regret")):
            (line,) = ax.plot(x, c[key]["mean"], styles[c["family"]], linewidth=lw, label=f"{name} ({c['family']})")
            ax.fill_between(x, c[key]["ci95_low"], c[key]["ci95_high"], color=line.get_color(), alpha=0.15)
    ax1.axhline(report["oracle_mean_reward"], color="black", linewidth=0.8, linestyle="--", label="oracle")
    ax1.set_xlabel("round (decisions; refit every 50 outcomes)")
    ax1.set_ylabel("mean cumulative Bernoulli reward (1 = downlink ≥ 25 Mbit/s)")
    ax1.set_title(f"Mean cumulative reward, mean ± 95% CI over {len(report['seeds'])} pairing seeds")
    ax1.set_ylim(0, 1)
    ax1.legend(fontsize=8, loc="lower right")
    ax2.set_xlabel("round (decisions; refit every 50 outcomes)")
    ax2.set_ylabel("cumulative regret vs oracle (rewards lost)")
    ax2.set_title("Cumulative regret against the oracle that sees both arms")
    fig.suptitle("Primary path on paired real WiFi × 4G situations (mobilebandwidth), cold starts", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
