# ruff: noqa: N803  (X, T: design matrix and outcome matrix, scikit-learn convention)
"""Primary-path evaluation on paired real situations: cold vs warm start vs baselines vs Vowpal Wabbit.

Protocol (``edgepath eval primary``)
------------------------------------
1. Read the WiFi and cellular CSVs of the training and the test side. When a
   side's files are the same as the other's, users are split by
   :func:`~edgepath.datasets.mobilebandwidth.split_by_user`; otherwise the test
   side drops every measurement of a user who also appears in training. Either
   way the test users are unseen (disjoint ``user_uid``).
2. Train the warm-start model on the training side (:func:`train_offline`,
   pairing seed ``OfflineConfig.seed``).
3. For every evaluation seed ``s``: pair the test side with seed ``s`` and
   shuffle the situations with ``numpy.random.default_rng(s)``: one *stream*.
   Every policy runs on the same stream; its score is the mean downlink
   throughput (Mbit/s) of the arm it chose, measured by the real test of that
   arm in the pair.
4. Report, over the seeds, the mean and a 95% confidence interval
   (Student t, ``n_seeds − 1`` degrees of freedom) of the mean throughput, of
   the percentage of the oracle's throughput and of the gain over WiFi-first.

Policies
--------
* ``oracle`` (faster arm of each pair), ``wifi_first``, ``lte_first``, ``random`` (uniform, seeded);
* ``offline_classifier``: the cost-sensitive better-arm classifier, static;
* ``offline_oracles_greedy``: the first policy's warm-start model, greedy, never updated;
* ``cold_<policy>``: :class:`PrimaryPathBandit` from scratch, seed ``s``, for the service's default
  policy and every ``--compare`` policy (the report names the default under ``default_policy``);
* ``warm_<policy>``: the offline-trained bandit of that policy, keeps learning online;
* ``vw_squarecb``: Vowpal Wabbit ``--cb_explore_adf --squarecb`` (Foster &
  Rakhlin, "Beyond UCB", ICML 2020), shared features = the same feature vector,
  action features = the arm, ``-q SA`` (per-arm linear model), cost ``1 − reward`` (Bernoulli);
* ``vw_squarecb_utility``: the same with cost ``−utility`` (the reward EdgePath's learners maximise).

The bandits decide with the model of their last refit and refit every
``batch_size`` (50) rewarded decisions, as the service does; VW learns after
every decision (its native mode). Each outcome carries the Bernoulli reward
(throughput ≥ ``reward_threshold_mbps``) and the measured throughput; each
policy learns from the reward its registry spec names. Every policy is scored
the same way: mean throughput, mean utility, Bernoulli reward rate and mean
completion time of a 10 MB transfer (``8·size/T``).

:func:`drift_replay` replays the same streams with every WiFi outcome × 0.25
from half-way (contexts unchanged) and reports how many outcomes each warm
policy needs to move to LTE.

The situations are *paired*: two real single-arm tests of the same city, not
one device measuring both arms at once (see the data module).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgepath.datasets.mobilebandwidth import (
    Measurement,
    Situation,
    disjoint_users,
    pair_situations,
    read_measurements,
    split_by_user,
)
from edgepath.engines.features import FEATURE_GROUPS, context_features
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit, TrainingSample, UtilityConfig
from edgepath.training.offline import (
    ARMS,
    BetterArmPolicy,
    OfflineConfig,
    OfflineModel,
    situation_matrix,
    train_offline,
)

PAIRING_TEXT = (
    "paired situations: each WiFi test (wifi CSV) is paired with a cellular test (4G CSV) of the same "
    "user_city_id, same ISP preferred, drawn uniformly with numpy default_rng(seed); both outcomes are real "
    "single-arm measurements, not simultaneous ones"
)


@dataclass(frozen=True)
class Split:
    """Training and test measurements with disjoint users."""

    train_wifi: list[Measurement]
    train_cellular: list[Measurement]
    test_wifi: list[Measurement]
    test_cellular: list[Measurement]
    method: str

    def describe(self) -> dict[str, Any]:
        def users(ms: Sequence[Measurement]) -> int:
            return len({m.user_uid for m in ms})

        train_users = {m.user_uid for m in self.train_wifi} | {m.user_uid for m in self.train_cellular}
        test_users = {m.user_uid for m in self.test_wifi} | {m.user_uid for m in self.test_cellular}
        return {
            "method": self.method,
            "train": {
                "wifi_tests": len(self.train_wifi),
                "cellular_tests": len(self.train_cellular),
                "users": len(train_users),
            },
            "test": {
                "wifi_tests": len(self.test_wifi),
                "cellular_tests": len(self.test_cellular),
                "users": len(test_users),
            },
            "shared_users": len(train_users & test_users),
            "wifi_users": {"train": users(self.train_wifi), "test": users(self.test_wifi)},
        }


def load_split(
    train_wifi: Path,
    train_cellular: Path,
    test_wifi: Path,
    test_cellular: Path,
    test_fraction: float = 0.25,
    salt: str = "edgepath-split-v1",
) -> Split:
    """Read the four files and make the user-disjoint split (see module docstring)."""
    tw, tc = read_measurements(train_wifi, "wifi"), read_measurements(train_cellular, "cellular")
    same = Path(train_wifi).resolve() == Path(test_wifi).resolve() and (
        Path(train_cellular).resolve() == Path(test_cellular).resolve()
    )
    if same:
        trw, tew = split_by_user(tw, test_fraction, salt)
        trc, tec = split_by_user(tc, test_fraction, salt)
        method = f"same files: users split by SHA-256(salt={salt!r} + user_uid), test fraction {test_fraction}"
        return Split(trw, trc, tew, tec, method)
    ew, ec = read_measurements(test_wifi, "wifi"), read_measurements(test_cellular, "cellular")
    train_all = [*tw, *tc]
    method = "separate files: test measurements of users present in training dropped"
    return Split(tw, tc, disjoint_users(train_all, ew), disjoint_users(train_all, ec), method)


def test_stream(split: Split, seed: int) -> list[Situation]:
    """The test situations paired with ``seed`` and shuffled with the same seed."""
    situations = pair_situations(split.test_wifi, split.test_cellular, seed)
    order = np.random.default_rng(seed).permutation(len(situations))
    return [situations[i] for i in order]


def ci95(values: Sequence[float]) -> float | None:
    """Half-width of the 95% Student-t interval of the mean; None for fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1) * np.std(values, ddof=1) / math.sqrt(n))


def run_bandit(
    bandit: PrimaryPathBandit,
    stream: Sequence[Situation],
    threshold_mbps: float,
    batch_size: int = 50,
    T: np.ndarray | None = None,
) -> np.ndarray:
    """Replay ``stream`` through ``bandit`` as the service would; returns the chosen arm index per round.

    Each outcome carries the Bernoulli reward and the measured throughput (bit/s), as the service's
    outcome log does; the policy learns from whichever its spec names. ``T`` (``(n, 2)`` Mbit/s,
    :data:`ARMS` order) overrides the situations' throughputs (drift replay).
    """
    chosen = np.zeros(len(stream), dtype=np.int64)
    buffer: list[TrainingSample] = []
    for i, s in enumerate(stream):
        choice = bandit.decide(s.interfaces)
        arm = ARMS.index(choice.access_type)
        chosen[i] = arm
        mbps = s.throughput_mbps(choice.access_type) if T is None else float(T[i, arm])
        reward = int(mbps >= threshold_mbps)
        sample = TrainingSample(
            choice.features.tolist(), choice.arms, choice.arm_index, reward, choice.propensity, mbps * 1e6
        )
        buffer.append(sample)
        if len(buffer) >= batch_size:
            bandit.update(buffer)
            buffer = []
    return chosen


def run_vw(
    X: np.ndarray, T: np.ndarray, threshold_mbps: float, seed: int, utility: UtilityConfig | None = None
) -> np.ndarray:
    """Vowpal Wabbit ``--cb_explore_adf --squarecb`` on the same rows; returns the chosen arm per round.

    Cost ``1 − Bernoulli reward`` by default; with ``utility``, cost ``−utility(throughput)`` (the
    same continuous reward the ridge learners maximise).
    """
    import vowpalwabbit

    vw = vowpalwabbit.Workspace(f"--cb_explore_adf --squarecb -q SA --quiet --random_seed {seed}")
    rng = np.random.default_rng(seed)
    arm_names = [a.value.lower() for a in ARMS]
    chosen = np.zeros(X.shape[0], dtype=np.int64)
    try:
        for i, x in enumerate(X):
            shared = "shared |S " + " ".join(f"f{j}:{v:.6g}" for j, v in enumerate(x) if v != 0.0)
            actions = [f"|A {name}" for name in arm_names]
            pmf = np.asarray(vw.predict([shared, *actions]), dtype=np.float64)
            pmf = pmf / pmf.sum()
            arm = int(rng.choice(len(arm_names), p=pmf))
            chosen[i] = arm
            if utility is None:
                cost = 0.0 if T[i, arm] >= threshold_mbps else 1.0
            else:
                cost = -utility(float(T[i, arm]) * 1e6, None, None)
            labelled = [f"0:{cost}:{max(pmf[arm], 1e-6):.6g} {a}" if k == arm else a for k, a in enumerate(actions)]
            vw.learn([shared, *labelled])
    finally:
        vw.finish()
    return chosen


def _score(T: np.ndarray, chosen: np.ndarray) -> float:
    return float(T[np.arange(len(chosen)), chosen].mean())


def _summary(per_seed: dict[str, list[float]], per_seed_reward: dict[str, list[float]]) -> dict[str, Any]:
    oracle = per_seed["oracle"]
    wifi = per_seed["wifi_first"]
    out: dict[str, Any] = {}
    for name, values in per_seed.items():
        pct = [100.0 * v / o for v, o in zip(values, oracle, strict=True)]
        gain = [100.0 * (v / w - 1.0) for v, w in zip(values, wifi, strict=True)]
        out[name] = {
            "mean_throughput_mbps": float(np.mean(values)),
            "mean_throughput_mbps_ci95": ci95(values),
            "pct_of_oracle": float(np.mean(pct)),
            "pct_of_oracle_ci95": ci95(pct),
            "gain_vs_wifi_first_pct": float(np.mean(gain)),
            "gain_vs_wifi_first_pct_ci95": ci95(gain),
            "mean_reward": float(np.mean(per_seed_reward[name])),
            "per_seed_mean_throughput_mbps": [float(v) for v in values],
        }
    return out


#: Size of the transfer whose completion time the report gives for every policy, bytes (10 MB).
COMPLETION_BYTES = 10_000_000


def _cold_config(cfg: OfflineConfig, policy: str, seed: int) -> BanditConfig:
    """The service's cold start for ``policy``: default paper parameters, the run's ridge parameters."""
    base = OfflineConfig(**{**cfg.__dict__, "policy": policy}).bandit_config()
    default = BanditConfig()
    return dataclasses.replace(base, seed=seed, explore_prob=default.explore_prob, sgd_alpha=default.sgd_alpha)


def train_models(
    split: Split, cfg: OfflineConfig, policies: Sequence[str], say: Callable[[str], None]
) -> dict[str, OfflineModel]:
    """One warm-start model per policy, trained on the training users (pairing seed ``cfg.seed``)."""
    train = pair_situations(split.train_wifi, split.train_cellular, cfg.seed)
    models = {}
    for policy in policies:
        say(f"training the warm-start model of {policy} on the training users")
        models[policy] = train_offline(train, (), OfflineConfig(**{**cfg.__dict__, "policy": policy}))
    return models


def evaluate(
    split: Split,
    seeds: Sequence[int],
    cfg: OfflineConfig,
    model: OfflineModel | None = None,
    batch_size: int = 50,
    include_vw: bool = True,
    progress: Callable[[str], None] | None = None,
    policies: Sequence[str] | None = None,
    models: dict[str, OfflineModel] | None = None,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Run every policy on every seed's stream; returns the report's ``policies`` part and seed-0 traces.

    ``policies`` (default ``[cfg.policy]``) each get a ``cold_<name>`` and a ``warm_<name>`` row; the
    static rows (``offline_classifier``, ``offline_oracles_greedy``) come from the first policy's model.
    VW squarecb runs twice: Bernoulli cost (``vw_squarecb``) and cost = −utility (``vw_squarecb_utility``).
    The traces (``name → chosen throughput per round``) of the first seed feed the running-mean plot.
    """
    say = progress or (lambda _msg: None)
    names = list(policies or [cfg.policy])
    if models is None:
        models = {} if model is None else {names[0]: model}
        missing = [p for p in names if p not in models]
        models.update(train_models(split, cfg, missing, say))
    first = models[names[0]]
    utility = OfflineConfig(**{**cfg.__dict__, "policy": "ridge_squarecb"}).bandit_config().utility
    per_seed: dict[str, list[float]] = {}
    per_seed_reward: dict[str, list[float]] = {}
    per_seed_utility: dict[str, list[float]] = {}
    per_seed_completion: dict[str, list[float]] = {}
    traces: dict[str, np.ndarray] = {}
    n_rounds = []
    thr = cfg.reward_threshold_mbps
    for idx, seed in enumerate(seeds):
        stream = test_stream(split, seed)
        n_rounds.append(len(stream))
        X, T = situation_matrix(stream)
        rng = np.random.default_rng(seed + 10_000)
        decisions: dict[str, np.ndarray] = {
            "oracle": np.argmax(T, axis=1),
            "wifi_first": np.zeros(len(stream), dtype=np.int64),
            "lte_first": np.ones(len(stream), dtype=np.int64),
            "random": rng.integers(0, 2, len(stream)),
            "offline_classifier": BetterArmPolicy(first.classifier).choose(X),
            "offline_oracles_greedy": first.greedy_arms(X),
        }
        t0 = time.perf_counter()
        for policy in names:
            cold = PrimaryPathBandit(_cold_config(cfg, policy, seed))  # the service's cold start
            decisions[f"cold_{policy}"] = run_bandit(cold, stream, thr, batch_size)
            decisions[f"warm_{policy}"] = run_bandit(copy.deepcopy(models[policy].bandit), stream, thr, batch_size)
        if include_vw:
            decisions["vw_squarecb"] = run_vw(X, T, thr, seed)
            decisions["vw_squarecb_utility"] = run_vw(X, T, thr, seed, utility)
        say(f"seed {seed}: {len(stream)} situations, policies replayed in {time.perf_counter() - t0:.1f} s")
        for name, chosen in decisions.items():
            got = T[np.arange(len(chosen)), chosen]
            per_seed.setdefault(name, []).append(float(got.mean()))
            per_seed_reward.setdefault(name, []).append(float((got >= thr).mean()))
            per_seed_utility.setdefault(name, []).append(float(np.mean([utility(v * 1e6, None, None) for v in got])))
            seconds = 8.0 * COMPLETION_BYTES / (np.maximum(got, 0.01) * 1e6)
            per_seed_completion.setdefault(name, []).append(float(seconds.mean()))
            if idx == 0:
                traces[name] = got
    summary = _summary(per_seed, per_seed_reward)
    for name, row in summary.items():
        row["mean_utility"] = float(np.mean(per_seed_utility[name]))
        row["mean_completion_time_s_10MB"] = float(np.mean(per_seed_completion[name]))
        row["mean_completion_time_s_10MB_ci95"] = ci95(per_seed_completion[name])
    return {"rounds_per_seed": n_rounds, "policies": summary}, traces


def switch_outcomes(chosen: np.ndarray, start: int, target_share: float, window: int = 100) -> int | None:
    """Outcomes after ``start`` until the rolling (``window``) share of LTE choices reaches ``target_share``.

    None when it never does.
    """
    lte = (chosen[start:] == 1).astype(np.float64)
    if len(lte) < window:
        return None
    rolling = np.convolve(lte, np.ones(window) / window, mode="valid")  # rolling[i] covers [i, i+window)
    hit = np.nonzero(rolling >= target_share)[0]
    return None if hit.size == 0 else int(hit[0] + window)


def drift_replay(
    split: Split,
    seeds: Sequence[int],
    cfg: OfflineConfig,
    models: dict[str, OfflineModel],
    policies: Sequence[str],
    wifi_factor: float = 0.25,
    batch_size: int = 50,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Replay where WiFi degrades half-way: from the middle of each stream every WiFi outcome is × ``wifi_factor``.

    The radio context does not change (the degradation is behind the access point, e.g. a congested
    backhaul), so only outcomes reveal it. Per policy (warm start): mean throughput after the drift and
    ``switch_outcomes``: outcomes after the drift until the rolling-100 share of LTE choices reaches the
    midpoint between the policy's pre-drift share and the post-drift oracle's share (None = never).
    The report's ``warm_policies`` names the policies replayed (each needs its model in ``models``).

    Raises
    ------
    ValueError
        When a policy of ``policies`` has no model in ``models`` (naming it), before anything is replayed.
    """
    missing = [p for p in policies if p not in models]
    if missing:
        raise ValueError(f"drift replay: no trained model for {', '.join(missing)} (trained: {', '.join(models)})")
    say = progress or (lambda _msg: None)
    rows: dict[str, dict[str, list[Any]]] = {}
    for seed in seeds:
        stream = test_stream(split, seed)
        _, T = situation_matrix(stream)
        half = len(stream) // 2
        Td = T.copy()
        Td[half:, 0] *= wifi_factor
        oracle = np.argmax(Td, axis=1)
        decisions: dict[str, np.ndarray] = {"oracle": oracle, "wifi_first": np.zeros(len(stream), dtype=np.int64)}
        for policy in policies:
            bandit = copy.deepcopy(models[policy].bandit)
            decisions[f"warm_{policy}"] = run_bandit(bandit, stream, cfg.reward_threshold_mbps, batch_size, Td)
        say(f"drift seed {seed}: {len(stream)} situations, drift at {half}")
        post_oracle = float((oracle[half:] == 1).mean())
        for name, chosen in decisions.items():
            pre = float((chosen[:half] == 1).mean())
            target = pre + 0.5 * (post_oracle - pre)
            got = Td[np.arange(len(chosen)), chosen]
            r = rows.setdefault(name, {"after": [], "before": [], "switch": [], "share_after": []})
            r["before"].append(float(got[:half].mean()))
            r["after"].append(float(got[half:].mean()))
            r["share_after"].append(float((chosen[half:] == 1).mean()))
            r["switch"].append(switch_outcomes(chosen, half, target) if post_oracle > pre else None)
    return {
        "wifi_factor": wifi_factor,
        "what": "WiFi outcomes x wifi_factor from the middle of each stream; contexts unchanged; warm starts",
        "warm_policies": list(policies),
        "policies": {
            name: {
                "mean_throughput_before_mbps": float(np.mean(r["before"])),
                "mean_throughput_after_mbps": float(np.mean(r["after"])),
                "mean_throughput_after_mbps_ci95": ci95(r["after"]),
                "lte_share_after": float(np.mean(r["share_after"])),
                "switch_outcomes_per_seed": r["switch"],
            }
            for name, r in rows.items()
        },
    }


def offline_scores(model: OfflineModel, split: Split, seeds: Sequence[int]) -> dict[str, Any]:
    """Static scores of the offline model on the test streams: % of oracle and gain over WiFi-first, with CIs."""
    pct: dict[str, list[float]] = {"offline_oracles_greedy": [], "offline_classifier": []}
    gain: dict[str, list[float]] = {k: [] for k in pct}
    for seed in seeds:
        X, T = situation_matrix(test_stream(split, seed))
        oracle, wifi = T.max(axis=1).mean(), T[:, 0].mean()
        for name, chosen in (
            ("offline_oracles_greedy", model.greedy_arms(X)),
            ("offline_classifier", BetterArmPolicy(model.classifier, model.config.drop_groups).choose(X)),
        ):
            v = _score(T, chosen)
            pct[name].append(100.0 * v / oracle)
            gain[name].append(100.0 * (v / wifi - 1.0))
    return {
        name: {
            "pct_of_oracle": float(np.mean(pct[name])),
            "pct_of_oracle_ci95": ci95(pct[name]),
            "gain_vs_wifi_first_pct": float(np.mean(gain[name])),
            "gain_vs_wifi_first_pct_ci95": ci95(gain[name]),
        }
        for name in pct
    }


ABLATION_GROUPS: tuple[str, ...] = ("signal", "spread", "link_speed", "band", "capacity", "missing")


def ablation(split: Split, seeds: Sequence[int], cfg: OfflineConfig) -> list[dict[str, Any]]:
    """Offline score with all features, without each group, and with none (presence flags only)."""
    train = pair_situations(split.train_wifi, split.train_cellular, cfg.seed)
    variants: list[tuple[str, tuple[str, ...]]] = [("all features", ())]
    variants += [(f"without {g}", (g,)) for g in ABLATION_GROUPS]
    variants.append(("none (presence flags only)", tuple(g for g in FEATURE_GROUPS if g != "presence")))
    rows = []
    for label, drop in variants:
        vcfg = OfflineConfig(**{**cfg.__dict__, "drop_groups": drop})
        scores = offline_scores(train_offline(train, (), vcfg), split, seeds)
        rows.append({"variant": label, "dropped": list(drop), **scores})
    return rows


def plot(report: dict[str, Any], traces: dict[str, np.ndarray], path: Path) -> None:
    """Two panels: % of oracle (mean ± 95% CI over seeds) per policy; running mean throughput, first seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = report["policies"]
    names = sorted(policies, key=lambda n: policies[n]["pct_of_oracle"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5))
    pct = [policies[n]["pct_of_oracle"] for n in names]
    err = [policies[n]["pct_of_oracle_ci95"] or 0.0 for n in names]
    colors = [
        "tab:green"
        if "warm" in n
        else "tab:blue"
        if "cold" in n
        else "tab:purple"
        if "vw" in n
        else "tab:orange"
        if "offline" in n
        else "tab:gray"
        for n in names
    ]
    ax1.barh(names, pct, xerr=err, color=colors, capsize=3)
    ax1.set_xlabel("mean throughput, % of oracle (mean ± 95% CI over seeds)")
    ax1.set_xlim(min(pct) - 10, 101)
    ax1.set_title(f"Primary path on unseen users ({len(report['seeds'])} seeds)")
    for y, (v, e) in enumerate(zip(pct, err, strict=True)):
        ax1.text(v + e + 0.4, y + 0.3, f"{v:.1f}%", va="center", fontsize=8)
    for name in names:
        got = traces[name]
        running = np.cumsum(got) / np.arange(1, len(got) + 1)
        ax2.plot(running, label=name, linewidth=2.0 if ("warm" in name or "cold" in name) else 1.0)
    ax2.set_xlabel(f"round (seed {report['seeds'][0]})")
    ax2.set_ylabel("running mean throughput of the chosen path, Mbit/s")
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize=8, loc="lower right")
    ax2.set_title("Running mean throughput (paired WiFi 4 × 4G situations)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def features_of(situations: Sequence[Situation]) -> np.ndarray:
    """Feature matrix via the serving feature function (convenience for tests)."""
    return np.vstack([context_features(s.interfaces) for s in situations])
