//! The ridge policies' single decision: `edgepath.engines.linear_bandit.LinearBandit.decide` for the SquareCB and
//! ε-greedy rules, once every arm has an outcome (issue 16: ~12 µs of numpy and Python floats per Recommend).
//!
//! The Python reference (service/src/edgepath/engines/linear_bandit.py) is followed operation for operation:
//! each arm's estimate is the correctly rounded sum of its rounded products and its intercept (`math.fsum`, as
//! `LinearBandit.estimates`), the rule's probabilities are summed left to right, the exploration floor is mixed in
//! as `LinearBandit._floored` does, and the arm is picked from the caller's uniform draw by the cumulative rule.
//! Where the Python engine would take another branch (an estimate not finite, an `fsum` overflow) the functions
//! here give `None` and the caller decides in Python with the same draw.

use crate::mlpm::fsum;
use crate::pyfloat::{py_max, py_min};

/// An exploration rule with a single decision here.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    /// Inverse-gap weighting, `p_a = 1 / (K + γ_t (μ_b − μ_a))` (Foster & Rakhlin, ICML 2020, Algorithm 1).
    SquareCb { gamma: f64 },
    /// `p = ε/K + (1 − ε)·1[a = argmax μ]`.
    EGreedy { epsilon: f64 },
}

/// The arms' estimated rewards for features `x` (shape (d,)): `μ_a = fsum(coef[a,0]·x_0, …, coef[a,d−1]·x_{d−1},
/// intercept[a])` with `coef` row-major (K, d) and `intercept` (K,). `None` on a shape mismatch, an `fsum`
/// overflow, or when the estimates' sum is not finite (where the Python rule falls back to numpy's).
pub fn estimates(coef: &[f64], intercept: &[f64], x: &[f64]) -> Option<Vec<f64>> {
    let (k, d) = (intercept.len(), x.len());
    if d == 0 || coef.len() != k * d {
        return None;
    }
    let mut mu = Vec::with_capacity(k);
    for (row, &b) in coef.chunks_exact(d).zip(intercept) {
        mu.push(fsum(row.iter().zip(x).map(|(c, v)| c * v).chain(std::iter::once(b)))?);
    }
    let mut total = 0.0;
    for m in &mu {
        total += m;
    }
    total.is_finite().then_some(mu)
}

/// The rule's probabilities over the estimates `mu` (`LinearBandit._rule_list`), shape (K,).
pub fn rule_probabilities(mu: &[f64], rule: Rule) -> Vec<f64> {
    let k = mu.len();
    let kf = k as f64;
    let mut best = 0;
    for (a, &m) in mu.iter().enumerate() {
        if m > mu[best] {
            best = a; // the first of equals, as Python's mu.index(max(mu))
        }
    }
    match rule {
        Rule::EGreedy { epsilon } => {
            let mut p = vec![epsilon / kf; k];
            p[best] += 1.0 - epsilon;
            p
        }
        Rule::SquareCb { gamma } => {
            let mu_best = mu[best];
            let mut p: Vec<f64> = mu.iter().map(|m| 1.0 / (kf + gamma * (mu_best - m))).collect();
            p[best] = 0.0;
            let mut total = 0.0;
            for pa in &p {
                total += pa; // left to right, as the Python loop
            }
            p[best] = 1.0 - total;
            p
        }
    }
}

/// The smallest uniform mixture of `p` whose every arm has at least `min(floor, 1/K)` (`LinearBandit._floored`,
/// `floor_mix` for one vector; module docstring of linear_bandit.py, Exp3's uniform mixing).
pub fn floored(p: Vec<f64>, floor: f64) -> Vec<f64> {
    let kf = p.len() as f64;
    let f = py_min(floor, 1.0 / kf);
    let mut lo = p[0];
    for &pa in &p[1..] {
        lo = py_min(lo, pa);
    }
    if f <= 0.0 || lo >= f {
        return p;
    }
    let lam = py_min(py_max((f - lo) / py_max(1.0 / kf - lo, 1e-300), 0.0), 1.0);
    p.iter()
        .map(|&pa| {
            if pa == lo {
                f
            } else {
                py_max((1.0 - lam) * pa + lam / kf, f)
            }
        })
        .collect()
}

/// The arm a uniform `draw` in [0, 1) picks from `p` (the first whose cumulative sum exceeds it, else the last;
/// never an arm of probability 0), with its probability. `None` where the Python loop would wrap below arm 0.
pub fn pick(p: &[f64], draw: f64) -> Option<(usize, f64)> {
    let mut arm = p.len().checked_sub(1)?;
    let mut acc = 0.0;
    for (a, pa) in p.iter().enumerate() {
        acc += pa;
        if draw < acc {
            arm = a;
            break;
        }
    }
    while p[arm] <= 0.0 {
        arm = arm.checked_sub(1)?;
    }
    Some((arm, p[arm]))
}

/// One decision: `(arm index, exact propensity)` for features `x`, or `None` where the Python engine decides.
pub fn decide(coef: &[f64], intercept: &[f64], x: &[f64], rule: Rule, floor: f64, draw: f64) -> Option<(usize, f64)> {
    if intercept.is_empty() {
        return None;
    }
    let mu = estimates(coef, intercept, x)?;
    pick(&floored(rule_probabilities(&mu, rule), floor), draw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_are_exactly_rounded() {
        // 0.1·1 + 0.2·1 + 0.3 summed left to right is 0.6000000000000001; exactly rounded, 0.6
        assert_eq!(estimates(&[0.1, 0.2], &[0.3], &[1.0, 1.0]), Some(vec![0.6]));
        assert_eq!(
            estimates(&[1.0, 2.0, 3.0, 4.0], &[0.5, -0.5], &[1.0, 1.0]),
            Some(vec![3.5, 6.5])
        );
        assert_eq!(estimates(&[1.0], &[0.0, 0.0], &[1.0]), None, "shape mismatch");
        assert_eq!(estimates(&[f64::MAX, f64::MAX], &[0.0], &[1.0, 1.0]), None, "overflow");
        assert_eq!(estimates(&[1.0, 1.0], &[f64::NAN, 0.0], &[1.0]), None, "not finite");
    }

    #[test]
    fn squarecb_gives_the_gap_weights() {
        let p = rule_probabilities(&[0.5, 0.3], Rule::SquareCb { gamma: 10.0 });
        assert_eq!(p[1], 1.0 / (2.0 + 10.0 * 0.2));
        assert_eq!(p[0], 1.0 - p[1]);
        // ties go to the first arm
        assert_eq!(
            rule_probabilities(&[0.2, 0.2], Rule::SquareCb { gamma: 10.0 }),
            vec![0.5, 0.5]
        );
        let e = rule_probabilities(&[0.1, 0.4, 0.4], Rule::EGreedy { epsilon: 0.06 });
        assert_eq!(e, vec![0.02, 0.02 + 0.94, 0.02]);
    }

    #[test]
    fn the_floor_mixes_in_the_uniform() {
        let p = floored(vec![0.999, 0.001], 0.01);
        assert_eq!(p[1], 0.01);
        assert!(p[0] > 0.98 && p[0] < 0.999);
        assert_eq!(
            floored(vec![0.6, 0.4], 0.01),
            vec![0.6, 0.4],
            "nothing below the floor: unchanged"
        );
        assert_eq!(floored(vec![0.999, 0.001], 0.0), vec![0.999, 0.001], "no floor");
    }

    #[test]
    fn the_draw_picks_by_the_cumulative_sum() {
        assert_eq!(pick(&[0.25, 0.75], 0.1), Some((0, 0.25)));
        assert_eq!(pick(&[0.25, 0.75], 0.25), Some((1, 0.75)));
        assert_eq!(pick(&[0.0, 1.0], 0.0), Some((1, 1.0)), "never an impossible arm");
        assert_eq!(
            pick(&[0.5, 0.0], 0.9999999999999999),
            Some((0, 0.5)),
            "past the sum: back to a possible arm"
        );
        assert_eq!(pick(&[], 0.5), None);
    }
}
