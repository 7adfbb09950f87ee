//! MLPM scheduler weights (Silva, Togou, Muntean, "An innovative machine learning approach to improve MPTCP
//! performance", HPCS 2020): Eq. 1 (least-squares trend), the forecast, the goodness features, Eq. 2 + Eq. 4
//! (sigmoid of a weighted sum plus a bias) and the weights.
//!
//! The reference is `edgepath.engines.mlpm` (service/src): this module computes the same numbers **bit for bit**
//! on CPython 3.11, for the cases it takes: every feature given as columns that are finite and in time order
//! (what an agent sends, and all the service's validation lets through besides order). It performs the same
//! floating-point operations in the same order (sums left to right from 0.0 as CPython 3.11's `sum`, `fsum` as
//! `math.fsum`, `exp` from the C library as `math.exp`, `max`/`min` with Python's argument order). Anything else
//! (columns out of time order, no feature known for every subflow, an `fsum` overflow) returns `None`, and the
//! Python engine decides. `tests/service/engines/test_mlpm_native.py` holds the two to the same bits.

use crate::pyfloat::{py_max, py_min};

/// Below this many samples the slope is not estimated (defined as 0): `MIN_SAMPLES_FOR_TREND`.
pub const MIN_SAMPLES_FOR_TREND: usize = 3;
/// RTT values and forecasts are floored here, ms: `RTT_FLOOR_MS`.
pub const RTT_FLOOR_MS: f64 = 0.1;

/// One feature's samples as columns: times in units of `1 / t_units_per_s` s, values in the feature's unit.
#[derive(Debug, Clone, Copy)]
pub struct Columns<'a> {
    pub t: &'a [f64],
    pub values: &'a [f64],
    pub t_units_per_s: f64,
}

/// Current value, Eq. 1 slope (value units per s), forecast and samples used (`FeatureForecast`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Forecast {
    pub current: f64,
    pub slope_per_s: f64,
    pub forecast: f64,
    pub samples: usize,
}

/// What is known about one subflow: its RTT (ms) and throughput (bit/s) columns, either possibly empty, and
/// the interface's current RTT (ms) for when it has no RTT samples.
#[derive(Debug, Clone)]
pub struct Subflow<'a> {
    pub interface: &'a str,
    pub rtt_ms: Columns<'a>,
    pub throughput_bps: Columns<'a>,
    pub current_rtt_ms: Option<f64>,
}

/// Classifier weights `w` and bias `b` (Eq. 2) for each feature set: both features (4 weights over
/// `[rtt_now, rtt_forecast, tput_now, tput_forecast]`), RTT only (2), throughput only (2).
#[derive(Debug, Clone)]
pub struct Classifiers {
    pub rtt_tput: (Vec<f64>, f64),
    pub rtt: (Vec<f64>, f64),
    pub tput: (Vec<f64>, f64),
}

/// One subflow's result: weight (the scores normalised to sum 1), score (Eq. 4), and its RTT and throughput
/// forecasts as reported (forecasts below the floors raised to them), `None` where unknown.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub weight: f64,
    pub score: f64,
    pub rtt_ms: Option<Forecast>,
    pub throughput_bps: Option<Forecast>,
}

/// A decision: per subflow in order, the prioritised subflow's index, which features were used, the classifier
/// weights and bias used, and the subflows with fewer than 3 samples of a known feature (for the reason text).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub subflows: Vec<Scored>,
    pub prioritised: usize,
    pub use_rtt: bool,
    pub use_tput: bool,
    pub classifier_weights: Vec<f64>,
    pub bias: f64,
    pub short: Vec<usize>,
}

/// CPython 3.11's `sum` of floats: from 0.0, left to right.
fn sum(xs: &[f64]) -> f64 {
    let mut total = 0.0;
    for &x in xs {
        total += x;
    }
    total
}

/// Python's `max(xs)` / `min(xs)` of a non-empty slice (the first kept unless a later one is strictly beyond it).
fn py_max_of(xs: &[f64]) -> f64 {
    xs[1..].iter().fold(xs[0], |m, &x| if x > m { x } else { m })
}

fn py_min_of(xs: &[f64]) -> f64 {
    xs[1..].iter().fold(xs[0], |m, &x| if x < m { x } else { m })
}

/// `math.fsum` (CPython's `msum`: Shewchuk's exact partials, then the correctly rounded total). `None` on an
/// intermediate overflow or `inf - inf`, where `math.fsum` raises (the caller leaves the decision to Python).
pub fn fsum(xs: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut partials: Vec<f64> = Vec::with_capacity(8);
    let mut special_sum = 0.0_f64;
    let mut inf_sum = 0.0_f64;
    for xsave in xs {
        let mut x = xsave;
        let mut i = 0;
        for j in 0..partials.len() {
            let mut y = partials[j];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let yr = hi - x;
            let lo = y - yr;
            if lo != 0.0 {
                partials[i] = lo;
                i += 1;
            }
            x = hi;
        }
        partials.truncate(i);
        if x != 0.0 {
            if !x.is_finite() {
                // a non-finite x: an intermediate overflow, or a nan or inf among the summands
                if xsave.is_finite() {
                    return None; // "intermediate overflow in fsum"
                }
                if xsave.is_infinite() {
                    inf_sum += xsave;
                }
                special_sum += xsave;
                partials.clear();
            } else {
                partials.push(x);
            }
        }
    }
    if special_sum != 0.0 {
        return if inf_sum.is_nan() { None } else { Some(special_sum) };
    }
    let mut n = partials.len();
    let mut hi = 0.0;
    if n > 0 {
        n -= 1;
        hi = partials[n];
        let mut lo = 0.0;
        while n > 0 {
            let x = hi;
            n -= 1;
            let y = partials[n];
            hi = x + y;
            let yr = hi - x;
            lo = y - yr;
            if lo != 0.0 {
                break;
            }
        }
        // Make half-even rounding work across multiple partials (CPython's comment): round up when the next
        // partial has the same sign as the error.
        if n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0)) {
            let y = lo * 2.0;
            let x = hi + y;
            let yr = x - hi;
            if y == yr {
                hi = x;
            }
        }
    }
    Some(hi)
}

/// Eq. 1 slope of `n` ≥ 3 finite samples whose times are not all equal, in value units per time unit
/// (`_slope`): the times shifted by their mean, `(n·Σxy − Σx·Σy) / (n·Σx² − (Σx)²)`; 0 when the denominator is
/// not > 0 or the result is not finite.
fn slope(t: &[f64], values: &[f64]) -> f64 {
    let n = t.len() as f64;
    let mean_t = sum(t) / n;
    let xs: Vec<f64> = t.iter().map(|&x| x - mean_t).collect();
    let sum_x = sum(&xs);
    let sum_y = sum(values);
    let mut sum_xy = 0.0;
    let mut sum_x2 = 0.0;
    for (&x, &y) in xs.iter().zip(values) {
        sum_xy += x * y;
    }
    for &x in &xs {
        sum_x2 += x * x;
    }
    let denominator = n * sum_x2 - sum_x * sum_x;
    if denominator.is_nan() || denominator <= 0.0 {
        return 0.0;
    }
    let result = (n * sum_xy - sum_x * sum_y) / denominator;
    if result.is_finite() {
        result
    } else {
        0.0
    }
}

/// Columns this module does not take (the Python engine does): not finite, out of time order, of unequal
/// lengths, or with a `t_units_per_s` that is not finite and > 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandBack;

/// The forecast of one feature's columns (`_forecast_columns` on its plain path): `Ok(None)` without samples.
pub fn forecast_columns(columns: Columns<'_>, window: usize, horizon_s: f64) -> Result<Option<Forecast>, HandBack> {
    let Columns {
        t,
        values,
        t_units_per_s: per_s,
    } = columns;
    let n = t.len();
    if n != values.len() || !(per_s.is_finite() && per_s > 0.0) {
        return Err(HandBack);
    }
    if n == 0 || window < 1 {
        return Ok(None);
    }
    if !(sum(t).is_finite() && sum(values).is_finite() && t.windows(2).all(|w| w[0] <= w[1])) {
        return Err(HandBack);
    }
    let (t, values) = if n > window {
        (&t[n - window..], &values[n - window..])
    } else {
        (t, values)
    };
    let m = t.len();
    let current = values[m - 1];
    let mut s = if m >= MIN_SAMPLES_FOR_TREND && t[0] != t[m - 1] {
        slope(t, values) * per_s
    } else {
        0.0
    };
    if !s.is_finite() {
        s = 0.0;
    }
    Ok(Some(Forecast {
        current,
        slope_per_s: s,
        forecast: current + s * horizon_s,
        samples: m,
    }))
}

/// `sigmoid` (Eq. 4), overflow-safe.
pub fn sigmoid(v: f64) -> f64 {
    if v >= 0.0 {
        1.0 / (1.0 + (-v).exp())
    } else {
        let e = v.exp();
        e / (1.0 + e)
    }
}

/// Steps 1–6 of `edgepath.engines.mlpm` for one decision (`decide` after its argument checks, for non-empty
/// `subflows`). `None` where the Python engine must decide (see the module documentation).
pub fn decide(subflows: &[Subflow<'_>], window: usize, horizon_s: f64, classifiers: &Classifiers) -> Option<Decision> {
    if subflows.is_empty() {
        return None;
    }
    let mut rtt: Vec<Option<Forecast>> = Vec::with_capacity(subflows.len());
    let mut tput: Vec<Option<Forecast>> = Vec::with_capacity(subflows.len());
    for h in subflows {
        let mut r = forecast_columns(h.rtt_ms, window, horizon_s).ok()?;
        if r.is_none() {
            if let Some(c) = h.current_rtt_ms.filter(|c| c.is_finite()) {
                r = Some(Forecast {
                    current: c,
                    slope_per_s: 0.0,
                    forecast: c,
                    samples: 0,
                });
            }
        }
        rtt.push(r);
        tput.push(forecast_columns(h.throughput_bps, window, horizon_s).ok()?);
    }
    let use_rtt = rtt.iter().all(Option::is_some);
    let use_tput = tput.iter().all(Option::is_some);
    let (w, b) = match (use_rtt, use_tput) {
        (true, true) => &classifiers.rtt_tput,
        (true, false) => &classifiers.rtt,
        (false, true) => &classifiers.tput,
        (false, false) => return None, // uniform: the Python engine's reason text
    };
    let k = subflows.len();
    // step 4: the goodness features, shape (k, 2 or 4)
    let mut features: Vec<Vec<f64>> = vec![Vec::with_capacity(4); k];
    if use_rtt {
        let cur: Vec<f64> = rtt.iter().map(|r| py_max(r.unwrap().current, RTT_FLOOR_MS)).collect();
        let fc: Vec<f64> = rtt.iter().map(|r| py_max(r.unwrap().forecast, RTT_FLOOR_MS)).collect();
        let best = py_min(py_min_of(&cur), py_min_of(&fc));
        for i in 0..k {
            features[i].push(best / cur[i]);
            features[i].push(best / fc[i]);
        }
    }
    if use_tput {
        let cur: Vec<f64> = tput.iter().map(|t| py_max(t.unwrap().current, 0.0)).collect();
        let fc: Vec<f64> = tput.iter().map(|t| py_max(t.unwrap().forecast, 0.0)).collect();
        let top = py_max(py_max_of(&cur), py_max_of(&fc));
        for i in 0..k {
            if top > 0.0 {
                features[i].push(cur[i] / top);
                features[i].push(fc[i] / top);
            } else {
                features[i].push(1.0);
                features[i].push(1.0);
            }
        }
    }
    if features[0].len() != w.len() {
        return None;
    }
    // step 5: σ(w·f + b), the weighted sum exactly rounded (math.fsum)
    let mut scores = Vec::with_capacity(k);
    for f in &features {
        scores.push(sigmoid(fsum(w.iter().zip(f).map(|(wi, fi)| wi * fi))? + b));
    }
    // step 6: weights, and the prioritised subflow (the highest score; ties: lower current RTT, then name)
    let total = fsum(scores.iter().copied())?;
    let mut best_i = 0;
    for i in 1..k {
        if key_less(&scores, &rtt, subflows, i, best_i) {
            best_i = i;
        }
    }
    let scored = (0..k)
        .map(|i| Scored {
            weight: if total > 0.0 { scores[i] / total } else { 1.0 / k as f64 },
            score: scores[i],
            rtt_ms: rtt[i].map(|f| floored(f, RTT_FLOOR_MS)),
            throughput_bps: tput[i].map(|f| floored(f, 0.0)),
        })
        .collect();
    let short = (0..k).filter(|&i| is_short(rtt[i]) || is_short(tput[i])).collect();
    Some(Decision {
        subflows: scored,
        prioritised: best_i,
        use_rtt,
        use_tput,
        classifier_weights: w.clone(),
        bias: *b,
        short,
    })
}

/// Python's `(-score_i, rtt_i.current or inf, name_i) < (-score_j, ...)`: the first members that differ
/// (`!=`) decide by `<`.
fn key_less(scores: &[f64], rtt: &[Option<Forecast>], subflows: &[Subflow<'_>], i: usize, j: usize) -> bool {
    let (a, b) = (-scores[i], -scores[j]);
    if a != b {
        return a < b;
    }
    let current = |x: usize| rtt[x].map_or(f64::INFINITY, |f| f.current);
    let (a, b) = (current(i), current(j));
    if a != b {
        return a < b;
    }
    subflows[i].interface < subflows[j].interface
}

fn is_short(f: Option<Forecast>) -> bool {
    f.is_some_and(|f| f.samples < MIN_SAMPLES_FOR_TREND)
}

fn floored(f: Forecast, floor: f64) -> Forecast {
    if f.forecast >= floor {
        f
    } else {
        Forecast { forecast: floor, ..f }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsum_rounds_exactly() {
        assert_eq!(fsum([0.1; 10]), Some(1.0));
        assert_eq!(fsum([1e100, 1.0, -1e100, 1e-100, 1e50, -1.0, -1e50]), Some(1e-100));
        assert_eq!(fsum([f64::MAX, f64::MAX]), None);
        assert!(fsum([f64::INFINITY, f64::NEG_INFINITY]).is_none());
        assert_eq!(fsum([]), Some(0.0));
    }

    #[test]
    fn slope_of_a_line() {
        let t = [0.0, 1000.0, 2000.0, 3000.0];
        let v = [10.0, 12.0, 14.0, 16.0];
        let f = forecast_columns(
            Columns {
                t: &t,
                values: &v,
                t_units_per_s: 1000.0,
            },
            20,
            1.0,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            f,
            Forecast {
                current: 16.0,
                slope_per_s: 2.0,
                forecast: 18.0,
                samples: 4
            }
        );
        let out_of_order = [0.0, 2000.0, 1000.0, 3000.0];
        assert!(forecast_columns(
            Columns {
                t: &out_of_order,
                values: &v,
                t_units_per_s: 1000.0
            },
            20,
            1.0
        )
        .is_err());
    }
}
