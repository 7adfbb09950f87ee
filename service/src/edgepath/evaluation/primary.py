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
* ``offline_oracles_greedy``: the warm-start oracles, greedy, never updated;
* ``cold_<policy>``: :class:`PrimaryPathBandit` from scratch, seed ``s``;
* ``warm_<policy>``: the offline-trained bandit, keeps learning online;
* ``vw_squarecb``: Vowpal Wabbit ``--cb_explore_adf --squarecb`` (Foster &
  Rakhlin, "Beyond UCB", ICML 2020), shared features = the same feature vector,
  action features = the arm, ``-q SA`` (per-arm linear model), cost ``1 − reward``.

The bandits decide with the model of their last refit and refit every
``batch_size`` (50) rewarded decisions, as the service does; VW learns after
every decision (its native mode). Rewards are the service's Bernoulli reward
(throughput ≥ ``reward_threshold_mbps``); scores are throughput.

The situations are *paired*: two real single-arm tests of the same city, not
one device measuring both arms at once (see the data module).
"""

from __future__ import annotations

import copy
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
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit, TrainingSample
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
    bandit: PrimaryPathBandit, stream: Sequence[Situation], threshold_mbps: float, batch_size: int = 50
) -> np.ndarray:
    """Replay ``stream`` through ``bandit`` as the service would; returns the chosen arm index per round."""
    chosen = np.zeros(len(stream), dtype=np.int64)
    buffer: list[TrainingSample] = []
    for i, s in enumerate(stream):
        choice = bandit.decide(s.interfaces)
        arm = ARMS.index(choice.access_type)
        chosen[i] = arm
        reward = int(s.throughput_mbps(choice.access_type) >= threshold_mbps)
        sample = TrainingSample(choice.features.tolist(), choice.arms, choice.arm_index, reward, choice.propensity)
        buffer.append(sample)
        if len(buffer) >= batch_size:
            bandit.update(buffer)
            buffer = []
    return chosen


def run_vw(X: np.ndarray, T: np.ndarray, threshold_mbps: float, seed: int) -> np.ndarray:
    """Vowpal Wabbit ``--cb_explore_adf --squarecb`` on the same rows; returns the chosen arm per round."""
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
            cost = 0.0 if T[i, arm] >= threshold_mbps else 1.0
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


def evaluate(
    split: Split,
    seeds: Sequence[int],
    cfg: OfflineConfig,
    model: OfflineModel | None = None,
    batch_size: int = 50,
    include_vw: bool = True,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Run every policy on every seed's stream; returns the report's ``policies`` part and seed-0 traces.

    The traces (``name → chosen throughput per round``) of the first seed feed the running-mean plot.
    """
    say = progress or (lambda _msg: None)
    if model is None:
        say("training the warm-start model on the training users")
        model = train_offline(pair_situations(split.train_wifi, split.train_cellular, cfg.seed), (), cfg)
    per_seed: dict[str, list[float]] = {}
    per_seed_reward: dict[str, list[float]] = {}
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
            "offline_classifier": BetterArmPolicy(model.classifier).choose(X),
            "offline_oracles_greedy": model.greedy_arms(X),
        }
        t0 = time.perf_counter()
        cold = PrimaryPathBandit(BanditConfig(policy=cfg.policy, seed=seed))  # the service's cold start
        decisions[f"cold_{cfg.policy}"] = run_bandit(cold, stream, thr, batch_size)
        decisions[f"warm_{cfg.policy}"] = run_bandit(copy.deepcopy(model.bandit), stream, thr, batch_size)
        if include_vw:
            decisions["vw_squarecb"] = run_vw(X, T, thr, seed)
        say(f"seed {seed}: {len(stream)} situations, policies replayed in {time.perf_counter() - t0:.1f} s")
        for name, chosen in decisions.items():
            got = T[np.arange(len(chosen)), chosen]
            per_seed.setdefault(name, []).append(float(got.mean()))
            per_seed_reward.setdefault(name, []).append(float((got >= thr).mean()))
            if idx == 0:
                traces[name] = got
    policies = _summary(per_seed, per_seed_reward)
    return {"rounds_per_seed": n_rounds, "policies": policies}, traces


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
