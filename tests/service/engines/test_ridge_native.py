"""The compiled single decision of the ridge policies (service/native ``ridge.rs``, ``edgepath_native.ridge_decide``)
against its reference, :meth:`edgepath.engines.linear_bandit.LinearBandit.decide` with ``native=False``.

On the rules it serves (SquareCB, ε-greedy, fitted) it must draw the same arm with the same propensity, bit for bit,
from the same uniform number, and hand everything else back to the Python rule without losing the draw.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from edgepath.engines import linear_bandit
from edgepath.engines.linear_bandit import LinearBandit, LinearBanditConfig
from native_twin import require_compiled

compiled_part = require_compiled(linear_bandit.NATIVE_AVAILABLE, "the compiled ridge decision")

D = 6


def fitted(k: int, mode: str, seed: int = 0, n: int = 400) -> LinearBandit:
    rng = np.random.default_rng(seed)
    bandit = LinearBandit(k, D, LinearBanditConfig(mode=mode, epsilon=0.07), seed=seed)  # type: ignore[arg-type]
    X = rng.normal(size=(n, D))
    bandit.update(X, rng.integers(0, k, n), X[:, 0] * rng.uniform(-1, 1, n) + rng.uniform(0, 1, n))
    return bandit


def contexts(seed: int) -> list[np.ndarray]:
    """Plain contexts, large ones (where SquareCB's gaps are wide and the floor binds) and the zero vector."""
    rng = np.random.default_rng(seed)
    return [*rng.normal(size=(300, D)), *(30.0 * rng.normal(size=(100, D))), np.zeros(D)]


def _bits(decisions: list[tuple[int, float]]) -> list[tuple[int, bytes]]:
    return [(int(a), np.float64(p).tobytes()) for a, p in decisions]


@pytest.mark.parametrize("floor", [0.0, 0.01, 0.05])
@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("mode", linear_bandit.NATIVE_MODES)
def test_the_compiled_decision_is_the_python_rule_bit_for_bit(mode: str, k: int, floor: float) -> None:
    bandit = fitted(k, mode, seed=k)
    twin = copy.deepcopy(bandit)
    xs = contexts(seed=10 + k)
    native = [bandit.decide(x, floor, native=True) for x in xs]
    python = [twin.decide(x, floor, native=False) for x in xs]
    assert _bits(native) == _bits(python)
    assert len({a for a, _ in native}) > 1, "more than one arm drawn: the draws were compared, not one constant"
    if floor and mode == "squarecb":
        assert any(p == min(floor, 1.0 / k) for _, p in native), "the floor bound in some decisions"
    assert bandit.rng.random() == twin.rng.random(), "one draw per decision on both paths"


def test_estimates_are_the_exactly_rounded_sums() -> None:
    """The reference's estimates are ``math.fsum`` of the rounded products and the intercept (what the compiled
    decision computes), and agree with BLAS's matrix product to rounding."""
    bandit = fitted(3, "squarecb")
    for x in contexts(seed=3)[:50]:
        want = [
            math.fsum([*(row * x).tolist(), b]) for row, b in zip(bandit.coef, bandit.intercept.tolist(), strict=True)
        ]
        assert bandit.estimates(x).tolist() == want
        np.testing.assert_allclose(bandit.estimates(x), bandit.coef @ x + bandit.intercept, rtol=1e-12, atol=1e-14)


def test_ties_go_to_the_first_arm_on_both_paths() -> None:
    bandit = fitted(3, "squarecb")
    bandit.coef[:] = bandit.coef[0]
    bandit.intercept[:] = bandit.intercept[0]
    twin = copy.deepcopy(bandit)
    xs = contexts(seed=4)[:100]
    assert _bits([bandit.decide(x, 0.01, native=True) for x in xs]) == _bits([twin.decide(x, 0.01) for x in xs])


def test_an_estimate_not_finite_is_handed_back_with_its_draw() -> None:
    bandit = fitted(2, "squarecb")
    bandit.intercept[1] = math.nan
    x = contexts(seed=5)[0]
    args = (bandit.coef, bandit.intercept, x, False, 0.0, bandit.gamma_t(), 0.01, 0.5)
    assert linear_bandit._native_decide(*args) is None
    twin = copy.deepcopy(bandit)
    with np.errstate(invalid="ignore"):
        assert _bits([bandit.decide(x, 0.01, native=True)]) == _bits([twin.decide(x, 0.01, native=False)])
    assert bandit.rng.random() == twin.rng.random(), "the handed-back decision used the draw already taken"


def test_what_it_cannot_read_is_handed_back() -> None:
    bandit = fitted(2, "egreedy")
    coef, intercept, x = bandit.coef, bandit.intercept, contexts(seed=6)[0]
    decide = linear_bandit._native_decide
    assert decide(coef, intercept, x, True, 0.07, 0.0, 0.01, 0.5) is not None
    assert decide(coef, intercept, x.astype(np.float32), True, 0.07, 0.0, 0.01, 0.5) is None  # not float64
    assert decide(coef, intercept, list(x), True, 0.07, 0.0, 0.01, 0.5) is None  # not a buffer
    assert decide(coef, intercept, x[:-1], True, 0.07, 0.0, 0.01, 0.5) is None  # d disagrees
    assert decide(coef.T.copy(), intercept, x, True, 0.07, 0.0, 0.01, 0.5) is None  # (d, K), not (K, d)
    assert decide(coef, intercept[:1], x, True, 0.07, 0.0, 0.01, 0.5) is None  # K disagrees


@pytest.mark.parametrize("mode", ["squarecb", "egreedy", "lints", "linucb"])
def test_unfitted_bandits_and_rules_without_a_compiled_form_decide_in_python(mode: str) -> None:
    fresh = LinearBandit(2, D, LinearBanditConfig(mode=mode), seed=1)  # type: ignore[arg-type]
    twin = copy.deepcopy(fresh)
    xs = contexts(seed=7)[:30]
    assert [fresh.decide(x, 0.01, native=True) for x in xs] == [twin.decide(x, 0.01) for x in xs]
    assert all(p == 0.5 for _, p in (fresh.decide(x, 0.01, native=True) for x in xs)), "uniform until fitted"
    bandit = fitted(2, mode)
    twin = copy.deepcopy(bandit)
    assert _bits([bandit.decide(x, 0.01, native=True) for x in xs]) == _bits([twin.decide(x, 0.01) for x in xs])
