"""Benchmark: in-process primary-path decision latency per policy (prints figures; not a test).

For each policy, a bandit is warm-started on real paired situations of the vendored data (training users,
pairing seed 0) and then asked to decide on real contexts of the held-out users, one call at a time, as
the service does. Two timings per call, ``time.perf_counter_ns`` around:

* ``policy``: the policy's decision on a precomputed feature vector (``PrimaryPathBandit.decide_features``:
  scores, exact propensity, the draw) — what issue 15's 50 µs target is about;
* ``decide``: the whole ``PrimaryPathBandit.decide(interfaces)`` (feature encoding included).

Prints p50 / p99 / mean in µs and the ratio of each p99 to the library baseline measured in the same
run: contextualbandits ``EpsilonGreedy.predict`` called directly (scikit-learn on the request path, what
every paper policy cost before the numpy fast path).

    .venv/bin/python scripts/bench_decide.py [--calls 20000] [--policies ridge_squarecb,active_explorer,...]
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

import numpy as np
from edgepath.datasets.mobilebandwidth import pair_situations, read_measurements, split_by_user
from edgepath.engines.features import context_features
from edgepath.engines.primary_path import arm_set
from edgepath.training.offline import OfflineConfig, train_offline

DATA = Path(__file__).resolve().parents[1] / "service" / "data" / "mobilebandwidth"
BASELINE = "epsilon_greedy"
LIBRARY = "epsilon_greedy (library predict)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--policies", default="ridge_squarecb,ridge_lints,ridge_linucb,active_explorer,epsilon_greedy")
    args = ap.parse_args()
    policies = args.policies.split(",")
    wifi, cell = read_measurements(DATA / "wifi4.csv"), read_measurements(DATA / "4G.csv")
    (trw, tew), (trc, tec) = split_by_user(wifi, 0.25), split_by_user(cell, 0.25)
    train, test = pair_situations(trw, trc, 0), pair_situations(tew, tec, 7)
    contexts = [test[i % len(test)].interfaces for i in range(args.calls)]
    prepared = [(c, arm_set(c), context_features(c)) for c in contexts]
    rows = {}
    # the library's own decision path (contextualbandits predict -> scikit-learn), for the ratio
    lib_bandit = train_offline(train, (), OfflineConfig(policy=BASELINE, epochs=3)).bandit
    lib = lib_bandit._policies[arm_set(contexts[0])].lib
    t_lib = np.empty(len(prepared))
    for i, (_c, _arms, x) in enumerate(prepared):
        t0 = time.perf_counter_ns()
        lib.predict(x.reshape(1, -1))
        t_lib[i] = time.perf_counter_ns() - t0
    rows[LIBRARY] = (t_lib / 1e3, t_lib / 1e3)
    for policy in policies:
        bandit = train_offline(train, (), OfflineConfig(policy=policy, epochs=3)).bandit
        for c, arms, x in prepared[:200]:  # warm the caches
            bandit.decide_features(c, arms, x)
        gc.collect()
        gc.disable()
        try:
            t_policy = np.empty(len(prepared))
            for i, (c, arms, x) in enumerate(prepared):
                t0 = time.perf_counter_ns()
                bandit.decide_features(c, arms, x)
                t_policy[i] = time.perf_counter_ns() - t0
            t_full = np.empty(len(contexts))
            for i, c in enumerate(contexts):
                t0 = time.perf_counter_ns()
                bandit.decide(c)
                t_full[i] = time.perf_counter_ns() - t0
        finally:
            gc.enable()
        rows[policy] = (t_policy / 1e3, t_full / 1e3)
    base_p99 = float(np.percentile(rows[LIBRARY][0], 99))
    print(f"{args.calls} decisions per policy on held-out users' real contexts (µs)")
    print(
        f"{'policy':34s} {'policy p50':>10s} {'p99':>8s} {'mean':>8s} {'x base p99':>10s}   "
        f"{'decide p50':>10s} {'p99':>8s}"
    )
    for policy, (tp, tf) in rows.items():
        p99 = float(np.percentile(tp, 99))
        print(
            f"{policy:34s} {np.percentile(tp, 50):10.1f} {p99:8.1f} {tp.mean():8.1f} {p99 / base_p99:10.3f}   "
            f"{np.percentile(tf, 50):10.1f} {np.percentile(tf, 99):8.1f}"
        )
    print(f"baseline: {LIBRARY}: contextualbandits + scikit-learn per call, p99 {base_p99:.1f} µs")


if __name__ == "__main__":
    main()
