"""EdgePath's utility learners, the paper's ActiveExplorer and exact propensities (tiny synthetic worlds)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from edgepath.engines.active_explorer import PaperActiveExplorer
from edgepath.engines.features import N_FEATURES, context_features
from edgepath.engines.linear_bandit import LinearBandit, LinearBanditConfig, floor_mix
from edgepath.engines.primary_path import (
    BERNOULLI_POLICIES,
    DEFAULT_POLICY,
    PAPER_POLICIES,
    POLICIES,
    UTILITY_POLICIES,
    BanditConfig,
    PrimaryPathBandit,
    TrainingSample,
    valid_sample,
)
from edgepath.engines.reward import utility
from edgepath.types import AccessType, InterfaceContext
from sklearn.linear_model import SGDClassifier

ARMS = (AccessType.WIFI, AccessType.LTE)


def _ifaces(rssi: float, rsrp: float) -> list[InterfaceContext]:
    return [
        InterfaceContext(name="wlan0", access_type=AccessType.WIFI, wifi_rssi_dbm=rssi),
        InterfaceContext(name="wwan0", access_type=AccessType.LTE, rsrp_dbm=rsrp),
    ]


def _throughput_mbps(rssi: float, rsrp: float) -> tuple[float, float]:
    """Known world: WiFi rate rises with RSSI, LTE rate with RSRP; the faster arm is the optimum."""
    return max(1.0, 4.0 * (rssi + 95.0)), max(1.0, 2.5 * (rsrp + 125.0))


def _contexts(n: int, seed: int) -> list[tuple[float, float]]:
    rng = np.random.default_rng(seed)
    return [(float(rng.uniform(-90, -45)), float(rng.uniform(-120, -75))) for _ in range(n)]


def _run(bandit: PrimaryPathBandit, contexts: list[tuple[float, float]], noise_seed: int = 0) -> np.ndarray:
    """Replay with batches of 50; returns the delivered throughput per round (Mbit/s)."""
    rng = np.random.default_rng(noise_seed)
    got, batch = [], []
    for rssi, rsrp in contexts:
        choice = bandit.decide(_ifaces(rssi, rsrp))
        t = _throughput_mbps(rssi, rsrp)[choice.arm_index] * float(rng.uniform(0.7, 1.3))
        got.append(t)
        batch.append(
            TrainingSample(choice.features, choice.arms, choice.arm_index, int(t >= 25), choice.propensity, t * 1e6)
        )
        if len(batch) == 50:
            bandit.update(batch)
            batch = []
    return np.asarray(got)


def _fitted(policy: str, rounds: int = 400, seed: int = 1) -> PrimaryPathBandit:
    bandit = PrimaryPathBandit(BanditConfig(policy=policy, seed=seed, explore_rounds=100, epsilon_decay=None))
    _run(bandit, _contexts(rounds, seed))
    return bandit


# --- reward ---------------------------------------------------------------------------------------------------------
def test_utility_is_bounded_monotone_and_linear_in_throughput() -> None:
    assert utility(0.0) == 0.0 and utility(5e8) == pytest.approx(0.5) and utility(3e9) == 1.0
    assert utility(-1.0) == 0.0 and utility(float("nan")) == 0.0
    assert utility(2e8) == pytest.approx(2 * utility(1e8))  # mean utility ∝ mean throughput below the cap
    assert utility(1e8, latency_ms=100.0) < utility(1e8) and utility(1e8, loss=0.1) < utility(1e8)
    assert utility(1e8, latency_ms=1e6, loss=1.0) == 0.0
    assert 0.0 <= utility(1e8, latency_ms=500.0, loss=0.2) <= 1.0
    with pytest.raises(ValueError):
        utility(1e8, latency_weight=2.0)


# --- registry -------------------------------------------------------------------------------------------------------
def test_registry_names_default_and_paper_policies() -> None:
    """The paper's six are a fixed list; any registered policy is a utility or a Bernoulli one (a seventh included)."""
    assert DEFAULT_POLICY in UTILITY_POLICIES and PrimaryPathBandit().reward_name == "utility"
    assert set(PAPER_POLICIES) <= set(BERNOULLI_POLICIES)
    assert sorted((*BERNOULLI_POLICIES, *UTILITY_POLICIES)) == sorted(POLICIES)
    assert set(PAPER_POLICIES) == {
        "active_explorer",
        "adaptive_greedy",
        "adaptive_active_greedy",
        "bootstrapped_ucb",
        "epsilon_greedy",
        "explore_first",
    }
    assert all(PrimaryPathBandit(BanditConfig(policy=p)).reward_name == "bernoulli" for p in BERNOULLI_POLICIES)
    assert all(PrimaryPathBandit(BanditConfig(policy=p)).reward_name == "utility" for p in UTILITY_POLICIES)


# --- exact propensities -----------------------------------------------------------------------------------------------
def _reseed(policy: object, seed: int) -> None:
    """Give a per-arm-set policy a fresh generator for its own exploration draws (state otherwise unchanged)."""
    rng = np.random.default_rng(seed)
    if hasattr(policy, "model"):  # ridge_*
        policy.model.rng = rng  # type: ignore[attr-defined]
    elif hasattr(policy, "lib"):  # contextualbandits policies
        policy.lib.random_state = rng  # type: ignore[attr-defined]
    else:  # the paper's ActiveExplorer
        policy.random_state = rng  # type: ignore[attr-defined]


def _empirical(bandit: PrimaryPathBandit, ifaces: list[InterfaceContext], draws: int) -> tuple[np.ndarray, list]:
    """Frequencies of each arm over ``draws`` seeded repetitions from the same state, and the logged propensities."""
    counts = np.zeros(2)
    logged: dict[int, set[float]] = {0: set(), 1: set()}
    for r in range(draws):
        b = copy.deepcopy(bandit)
        for policy in b._policies.values():
            _reseed(policy, 10_000 + r)
        choice = b.decide(ifaces)
        counts[choice.arm_index] += 1
        logged[choice.arm_index].add(round(choice.probability, 9))
    return counts / draws, [logged[0], logged[1]]


@pytest.mark.parametrize("policy", POLICIES)
def test_logged_propensity_matches_empirical_frequency(policy: str) -> None:
    bandit = _fitted(policy, rounds=300)
    draws = 600
    for rssi, rsrp in [(-72.0, -95.0), (-60.0, -110.0)]:
        ifaces = _ifaces(rssi, rsrp)
        expected = bandit.probabilities(ifaces)
        assert expected.sum() == pytest.approx(1.0) and np.all(expected >= 0.0)
        freq, logged = _empirical(bandit, ifaces, draws)
        for arm in (0, 1):
            # the logged value is the probability the policy gave that arm, whenever it was chosen
            assert logged[arm] <= {round(float(expected[arm]), 9)}, (policy, arm, logged[arm], expected)
            sd = math.sqrt(max(expected[arm] * (1 - expected[arm]), 1e-12) / draws)
            assert abs(freq[arm] - expected[arm]) <= 4.5 * sd + 1e-9, (policy, arm, freq, expected)


# --- the exploration floor is in the draw, not only in the log --------------------------------------------------------
def _confident(policy: str, **cfg: float) -> tuple[PrimaryPathBandit, list[InterfaceContext]]:
    """A ridge learner fitted on the known world and a context where its rule gives the slower arm < 0.01."""
    bandit = PrimaryPathBandit(BanditConfig(policy=policy, seed=3, **cfg))  # type: ignore[arg-type]
    _run(bandit, _contexts(600, 3))
    return bandit, _ifaces(-50.0, -120.0)  # WiFi ~180 Mbit/s, LTE ~12 Mbit/s: a clear gap


@pytest.mark.parametrize(
    ("policy", "cfg"),
    [("ridge_squarecb", {}), ("ridge_lints", {}), ("ridge_egreedy", {"ridge_epsilon": 0.004})],
)
def test_floored_region_logged_propensity_is_the_probability_of_the_draw(policy: str, cfg: dict) -> None:
    """Where the rule alone gives an arm less than ``propensity_floor``, the policy draws that arm with
    probability exactly the floor, and the logged propensity is that probability: the IPS identity
    E[1[a = arm] / propensity] = 1 holds for every arm. (Flooring only the logged value — the behaviour
    before — drew the slow arm with the rule's smaller probability and logged 0.01: the identity gave ≈ p/0.01.)"""
    bandit, ifaces = _confident(policy, **cfg)
    floor = bandit.config.propensity_floor
    rule = bandit._policies[ARMS].model.probabilities(context_features(ifaces))  # the published rule, no floor
    assert rule.min() < 0.5 * floor, ("the context must be in the floored region", rule)
    p = bandit.probabilities(ifaces)
    assert p.min() == floor and p.sum() == pytest.approx(1.0, abs=1e-15)
    draws = 20_000
    counts = np.zeros(2)
    ips = np.zeros(2)
    for _ in range(draws):
        choice = bandit.decide(ifaces)
        assert choice.propensity == choice.probability == p[choice.arm_index]
        counts[choice.arm_index] += 1
        ips[choice.arm_index] += 1.0 / choice.propensity
    slow = int(np.argmin(p))
    sd = math.sqrt(floor * (1 - floor) / draws)
    assert abs(counts[slow] / draws - floor) <= 4.5 * sd, (counts, p)
    # IPS identity per arm: mean of 1[a]/p is 1 (s.d. of the slow arm's mean ≈ √((1−f)/(f·draws)) ≈ 0.07)
    assert abs(ips[slow] / draws - 1.0) <= 4.5 * math.sqrt((1 - floor) / (floor * draws)), ips / draws
    assert abs(ips[1 - slow] / draws - 1.0) <= 0.01, ips / draws


def test_floor_leaves_the_rule_alone_where_it_does_not_bind() -> None:
    """ε-greedy's ε/K = 0.025 ≥ 0.01: same probabilities as the rule, bit for bit; LinUCB stays deterministic."""
    bandit, ifaces = _confident("ridge_egreedy")
    x = context_features(ifaces)
    np.testing.assert_array_equal(bandit.probabilities(ifaces), bandit._policies[ARMS].model.probabilities(x))
    ucb, ifaces = _confident("ridge_linucb")
    assert sorted(ucb.probabilities(ifaces).tolist()) == [0.0, 1.0]
    assert ucb.decide(ifaces).propensity == 1.0


def test_floor_mix_is_the_smallest_uniform_mixture_meeting_the_floor() -> None:
    for row in ([0.5, 0.5], [0.999, 0.001], [0.0, 1.0], [0.2, 0.79, 0.01], [0.995, 0.004, 0.001]):
        p = np.asarray(row, dtype=np.float64)
        q = floor_mix(p, 0.01)
        assert q.sum() == pytest.approx(1.0, abs=1e-15) and q.min() >= 0.01
        if p.min() >= 0.01:
            assert q is p  # untouched
        else:
            assert q.min() == 0.01  # the smallest mixture: the lowest arm sits exactly at the floor
            lam = (q - p) / (1.0 / len(p) - p)  # the same uniform weight λ for every arm
            np.testing.assert_allclose(lam, lam[0], rtol=1e-9)
    rows = np.array([[0.999, 0.001], [0.6, 0.4], [0.0, 1.0]])
    np.testing.assert_array_equal(floor_mix(rows, 0.01), np.vstack([floor_mix(r, 0.01) for r in rows]))
    assert floor_mix(np.array([0.9, 0.1]), 0.7) == pytest.approx([0.5, 0.5])  # a floor above 1/K: uniform
    assert floor_mix(np.array([1.0, 0.0]), 0.0).tolist() == [1.0, 0.0]


def test_unfitted_learners_are_uniform() -> None:
    for policy in POLICIES:
        p = PrimaryPathBandit(BanditConfig(policy=policy)).probabilities(_ifaces(-60, -90))
        assert p == pytest.approx([0.5, 0.5]), policy


@pytest.mark.parametrize("mode", ["squarecb", "lints", "linucb", "egreedy"])
def test_linear_bandit_probabilities_sum_to_one_for_three_arms(mode: str) -> None:
    rng = np.random.default_rng(0)
    lb = LinearBandit(3, 4, LinearBanditConfig(mode=mode, ts_scale=0.3), seed=0)  # type: ignore[arg-type]
    X = rng.normal(size=(300, 4))
    a = rng.integers(0, 3, 300)
    r = X[np.arange(300), a % 4] * 0.3 + rng.normal(0, 0.1, 300)
    lb.update(X, a, r)
    x = rng.normal(size=4)
    p = lb.probabilities(x)
    assert p.sum() == pytest.approx(1.0, abs=1e-9) and np.all(p >= 0.0)
    counts = np.zeros(3)
    for _ in range(3000):
        counts[lb.decide(x)[0]] += 1
    assert np.allclose(counts / 3000, p, atol=0.035)


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("mode", ["squarecb", "egreedy", "lints", "linucb"])
def test_one_decisions_rule_in_floats_is_the_numpy_rule_bit_for_bit(mode: str, k: int) -> None:
    """The single decision's probabilities (``_rule_list``: Python floats for SquareCB and ε-greedy) are the numpy
    rule's to the last bit, fitted or not, also where the estimates tie or are not finite (numpy's argmax then)."""
    rng = np.random.default_rng(k)
    lb = LinearBandit(k, 5, LinearBanditConfig(mode=mode, epsilon=0.07), seed=1)  # type: ignore[arg-type]
    x = rng.normal(size=5)
    assert lb._rule_list(x) == lb._rule_probabilities(x).tolist() == [1.0 / k] * k  # unfitted: uniform
    X = rng.normal(size=(400, 5))
    lb.update(X, rng.integers(0, k, 400), X[:, 0] * rng.uniform(-1, 1, 400))
    rows = [*rng.normal(size=(300, 5)), *(1e3 * rng.normal(size=(50, 5))), np.zeros(5)]
    for x in rows:
        assert np.asarray(lb._rule_list(x)).tobytes() == lb._rule_probabilities(x).tobytes()
    tied = copy.deepcopy(lb)
    tied.coef[:] = tied.coef[0]
    tied.intercept[:] = tied.intercept[0]
    assert np.asarray(tied._rule_list(rows[0])).tobytes() == tied._rule_probabilities(rows[0]).tobytes()
    broken = copy.deepcopy(lb)
    broken.intercept[-1] = math.nan
    with np.errstate(invalid="ignore"):
        assert np.asarray(broken._rule_list(rows[0])).tobytes() == broken._rule_probabilities(rows[0]).tobytes()


# --- learning: warm start then online never worse on a known world ----------------------------------------------------
def test_warm_start_then_online_updates_never_make_the_model_worse() -> None:
    train = _contexts(1500, 3)
    rows_X, rows_a, rows_u = [], [], []
    for rssi, rsrp in train:
        x = context_features(_ifaces(rssi, rsrp))
        for arm, t in enumerate(_throughput_mbps(rssi, rsrp)):
            rows_X.append(x)
            rows_a.append(arm)
            rows_u.append(utility(t * 1e6))
    bandit = PrimaryPathBandit(BanditConfig(seed=4))
    bandit.warm_start_rows(ARMS, np.asarray(rows_X), np.asarray(rows_a), np.asarray(rows_u))
    probe = _contexts(400, 99)
    best = np.array([int(np.argmax(_throughput_mbps(*c))) for c in probe])

    def greedy_accuracy() -> float:
        model = bandit._policies[ARMS].model
        X = np.vstack([context_features(_ifaces(*c)) for c in probe])
        return float((np.argmax(X @ model.coef.T + model.intercept, axis=1) == best).mean())

    before = greedy_accuracy()
    assert before > 0.85
    stream = _contexts(1000, 5)
    for start in range(0, 1000, 200):
        _run(bandit, stream[start : start + 200], noise_seed=start)
        assert greedy_accuracy() >= before - 0.02, "an online batch made the warm model worse"


def test_cold_utility_learner_beats_wifi_first_and_the_bernoulli_paper_policy() -> None:
    # Both arms usually exceed the paper's 25 Mbit/s threshold here, so its Bernoulli reward cannot tell
    # them apart; the utility (linear in throughput) can.
    contexts = _contexts(1500, 7)
    wifi_first = np.mean([_throughput_mbps(*c)[0] for c in contexts[-500:]])
    best = np.mean([max(_throughput_mbps(*c)) for c in contexts[-500:]])
    ridge = _run(PrimaryPathBandit(BanditConfig(seed=2)), contexts)[-500:].mean()
    paper = _run(PrimaryPathBandit(BanditConfig(policy="active_explorer", seed=2)), contexts)[-500:].mean()
    assert ridge > 0.97 * best
    assert ridge > wifi_first + 0.5 * (best - wifi_first)
    assert ridge > paper


def test_forgetting_notices_a_degraded_path() -> None:
    """Contexts unchanged, WiFi collapses half-way: the forgetting learner moves to LTE, a γ=1 one later."""

    def lte_share_after(forgetting: float) -> float:
        bandit = PrimaryPathBandit(BanditConfig(seed=3, forgetting=forgetting))
        rng = np.random.default_rng(0)
        chosen, batch = [], []
        for i in range(3000):
            ifaces = _ifaces(-60.0, -100.0)  # WiFi 140 Mbit/s, LTE 62.5 Mbit/s ...
            choice = bandit.decide(ifaces)
            t = (140.0 if i < 1500 else 10.0, 62.5)[choice.arm_index] * float(rng.uniform(0.9, 1.1))  # ... until
            chosen.append(choice.arm_index)
            batch.append(TrainingSample(choice.features, choice.arms, choice.arm_index, 1, choice.propensity, t * 1e6))
            if len(batch) == 50:
                bandit.update(batch)
                batch = []
        return float(np.mean(np.asarray(chosen[1700:2200]) == 1))  # 200 outcomes after the drift onwards

    assert lte_share_after(0.99) > 0.8
    assert lte_share_after(0.99) > lte_share_after(1.0)


# --- bad outcomes never reach the model -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad",
    [
        {"throughput_bps": float("nan")},
        {"throughput_bps": -1.0},
        {"throughput_bps": 1e15},
        {"latency_ms": float("inf")},
        {"latency_ms": -5.0},
        {"loss": 2.0},
        {"propensity": 0.0},
        {"propensity": float("nan")},
        {"features": [float("nan")] * N_FEATURES},
        {"features": [0.0] * 3},
        {"arm_index": 5},
    ],
)
def test_bad_outcomes_never_reach_the_model(bad: dict) -> None:
    good = dict(features=[0.0] * N_FEATURES, arms=ARMS, arm_index=0, reward=1, propensity=0.5, throughput_bps=5e7)
    assert valid_sample(TrainingSample(**good))
    bandit = PrimaryPathBandit()
    bandit.update([TrainingSample(**good)] * 3)
    state = copy.deepcopy(bandit._policies[ARMS].model.S)
    sample = TrainingSample(**{**good, **bad})
    assert not valid_sample(sample)
    assert bandit.update([sample]) == 0
    assert bandit.samples_rejected == 1
    assert np.array_equal(bandit._policies[ARMS].model.S, state)


# --- the paper's ActiveExplorer ---------------------------------------------------------------------------------------
def _fitted_oracles(seed: int = 0) -> tuple[list[SGDClassifier], np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(800, 5))
    oracles = []
    for q in range(2):
        y = (X[:, q] + 0.5 * rng.normal(size=800) > 0).astype(int)
        oracles.append(SGDClassifier(loss="log_loss", alpha=1e-3, random_state=q).fit(X, y))
    return oracles, rng.normal(size=(600, 5))


def test_paper_active_explorer_w_q_is_the_gradient_norm_criterion() -> None:
    oracles, Xs = _fitted_oracles()
    policy = PaperActiveExplorer(oracles, explore_prob=0.3, decay=None, seed=0)
    x = Xs[0]
    f = np.array([o.predict_proba(x.reshape(1, -1))[0, 1] for o in oracles])
    xt = np.append(x, 1.0)
    # gradient of the logistic loss at label r: (f - r) * [x, 1]
    w = [(1 - fq) * np.linalg.norm(fq * xt) + fq * np.linalg.norm((fq - 1) * xt) for fq in f]
    assert policy.active_weights(x) == pytest.approx(w)
    assert policy.scores(x) == pytest.approx(f)


def test_forced_exploration_on_a_fitted_policy_picks_non_greedy_at_the_criterion_rate() -> None:
    oracles, Xs = _fitted_oracles()
    policy = PaperActiveExplorer(oracles, explore_prob=1.0, decay=None, seed=0)  # always the active branch
    greedy = np.argmax(np.column_stack([o.decision_function(Xs) for o in oracles]), axis=1)
    implied = []
    chosen = []
    for x in Xs:
        f = policy.scores(x)
        implied.append(int(np.argmax(f * (1 - f))))  # w_q ∝ f(1-f) with a shared context
        chosen.append(policy.decide(x)[0])
    chosen_a, implied_a = np.asarray(chosen), np.asarray(implied)
    assert np.array_equal(chosen_a, implied_a)
    rate = float((chosen_a != greedy).mean())
    assert rate == pytest.approx(float((implied_a != greedy).mean()))
    assert rate > 0.2, "forced exploration must leave the greedy arm where the criterion says so"


def test_two_policies_do_not_make_identical_choices_on_a_stream() -> None:
    contexts = _contexts(800, 11)
    a = _fitted("active_explorer", rounds=400, seed=2)
    b = _fitted("adaptive_active_greedy", rounds=400, seed=2)
    ca = [a.decide(_ifaces(*c)).arm_index for c in contexts]
    cb = [b.decide(_ifaces(*c)).arm_index for c in contexts]
    assert np.mean(np.asarray(ca) != np.asarray(cb)) > 0.01


# --- numpy fast path of the paper's library policies ------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["epsilon_greedy", "explore_first"])
def test_fast_path_decisions_match_the_library_on_the_same_state(policy: str) -> None:
    bandit = PrimaryPathBandit(BanditConfig(policy=policy, seed=3, explore_rounds=120, epsilon=0.3))
    _run(bandit, _contexts(100, 4))  # explore_first still exploring after this
    fast = copy.deepcopy(bandit._policies[ARMS])
    lib = copy.deepcopy(bandit._policies[ARMS].lib)
    assert fast._snapshot() is not None, "eligible for the numpy path"
    contexts = _contexts(300, 8)
    ours = [fast.decide(context_features(_ifaces(*c)))[0] for c in contexts]
    theirs = [int(lib.predict(context_features(_ifaces(*c)).reshape(1, -1))[0]) for c in contexts]
    assert ours == theirs
    assert fast.lib.random_state.random() == lib.random_state.random()  # same draws consumed
    assert getattr(fast.lib, "explore_prob", 0) == pytest.approx(getattr(lib, "explore_prob", 0))
