//! Python's `max` and `min` of two floats, as the Python references compute them (the engines' twins follow them to
//! the bit: which of two equal values, `-0.0` or `0.0`, comes out, and what a NaN does).

/// Python's `max(a, b)`: `a` unless `b > a` (so `max(-0.0, 0.0)` is `-0.0`, and a NaN `a` stays).
pub fn py_max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

/// Python's `min(a, b)`: `a` unless `b < a`.
pub fn py_min(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::{py_max, py_min};

    #[test]
    fn the_first_of_equals_and_a_nan_first_stay() {
        assert!(py_max(-0.0, 0.0).is_sign_negative() && py_min(0.0, -0.0).is_sign_positive());
        assert!(py_max(f64::NAN, 1.0).is_nan() && py_max(1.0, f64::NAN) == 1.0);
        assert_eq!((py_max(1.0, 2.0), py_min(1.0, 2.0)), (2.0, 1.0));
    }
}
