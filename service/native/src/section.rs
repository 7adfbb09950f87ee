//! MLPM's per-subflow weights straight from a request's models (issue 16).
//!
//! The twin of `edgepath.adapters.mlpm`'s compiled path (`subflow_columns`, `mlpm_decide`, then one `_weight` dict per
//! subflow validated into `SubflowWeight` by pydantic): here the interfaces' and histories' columns are read from the
//! request's model instances (`edgepath.types.InterfaceContext`, `SubflowHistory`), decided by [`mlpm::decide`] and
//! each subflow's weight built as its `SubflowWeight` instance, the way `BaseModel.model_construct` builds one, after
//! the model's own checks (the weight and score bounds, read from the model by `edgepath.engines.mlpm`). Anything
//! else hands the decision back (None) to the path above, which decides it with the same numbers and lets pydantic
//! refuse what it must: a history in the sample-object form, a value that is not the model's type, a decision the
//! engine hands back, a weight or score outside its bounds (NaN included).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PySet, PyString, PyTuple};

use crate::mlpm;
use crate::request::{check_bounds, construct};

/// `SubflowWeight`'s fields in the model's order, as [`MlpmWeights`] fills an instance's values.
pub const WEIGHT_FIELDS: [&str; 11] = [
    "interface",
    "weight",
    "score",
    "rtt_ms",
    "rtt_slope_ms_per_s",
    "rtt_forecast_ms",
    "rtt_samples",
    "throughput_bps",
    "throughput_slope_bps_per_s",
    "throughput_forecast_bps",
    "throughput_samples",
];

/// A classifier from Python: `(w, b)` of Eq. 2.
pub type PyClassifier = (Vec<f64>, f64);

/// One history's columns as read from its model: RTT `(t_ms, rtt_ms)` and throughput `(t_ms, throughput_bps)`.
struct HistoryColumns {
    rtt: (Vec<f64>, Vec<f64>),
    tput: (Vec<f64>, Vec<f64>),
}

/// The compiled MLPM decision of one priority and its settings (`edgepath.engines.mlpm.compiled_weights_decider`),
/// taking a request's models and answering with its `SubflowWeight` instances.
#[pyclass(frozen, module = "edgepath_native")]
pub struct MlpmWeights {
    window: usize,
    horizon_s: f64,
    classifiers: mlpm::Classifiers,
    /// The weight model class (`edgepath.types.SubflowWeight`) and `object.__new__`.
    cls: Py<PyAny>,
    new: Py<PyAny>,
    /// Inclusive bounds of `weight` and `score`, as the model declares them.
    weight: (f64, f64),
    score: (f64, f64),
    /// [`WEIGHT_FIELDS`] as interned Python strings, made once.
    keys: Vec<Py<PyString>>,
}

#[pymethods]
impl MlpmWeights {
    /// The fields it fills, in order ([`WEIGHT_FIELDS`]): the Python side builds it only where they are the model's.
    #[classattr]
    #[allow(non_snake_case)]
    fn FIELDS() -> Vec<&'static str> {
        WEIGHT_FIELDS.to_vec()
    }

    /// `window` ≥ 1 samples and `horizon_s` (s) as `mlpm.decide` takes them (checked by the caller); `classifiers`:
    /// `(w, b)` for the feature sets both, RTT only, throughput only; `cls`: the weight model; `new`:
    /// `object.__new__`; `weight`, `score`: their bounds (finite, lo <= hi; `ValueError` otherwise).
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        window: usize,
        horizon_s: f64,
        classifiers: (PyClassifier, PyClassifier, PyClassifier),
        cls: Py<PyAny>,
        new: Py<PyAny>,
        weight: (f64, f64),
        score: (f64, f64),
    ) -> PyResult<Self> {
        check_bounds(&[weight, score])?;
        let (rtt_tput, rtt, tput) = classifiers;
        Ok(Self {
            window,
            horizon_s,
            classifiers: mlpm::Classifiers { rtt_tput, rtt, tput },
            cls,
            new,
            weight,
            score,
            keys: WEIGHT_FIELDS.iter().map(|k| PyString::intern(py, k).unbind()).collect(),
        })
    }

    /// MLPM's decision for a request (Silva et al. 2020, Eq. 1–4; [`mlpm::decide`]) from its `interfaces` (a list of
    /// `InterfaceContext`: `name`, `rtt_ms` in ms) and `histories` (a list of `SubflowHistory` in the column form: ms
    /// timestamps, RTTs in ms, throughputs in bit/s; the last history of an interface's name is its own, as the
    /// adapter's dict of them keeps it). Returns `(weights, prioritised index, use_rtt, use_tput, bias, short)`:
    /// one `SubflowWeight` per interface in order, the weight clamped to [0, 1] as `max` then `min` in Python, and
    /// the indices of subflows with fewer than 3 samples of a known feature; None to hand the decision back.
    fn decide<'py>(
        &self,
        py: Python<'py>,
        interfaces: &Bound<'py, PyAny>,
        histories: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let (Ok(interfaces), Ok(histories)) = (interfaces.cast::<PyList>(), histories.cast::<PyList>()) else {
            return Ok(None);
        };
        let Some(history_names) = names(histories, intern!(py, "interface")) else {
            return Ok(None);
        };
        let mut read: Vec<HistoryColumns> = Vec::with_capacity(history_names.len());
        for h in histories.iter() {
            match history_columns(&h)? {
                Some(c) => read.push(c),
                None => return Ok(None),
            }
        }
        let Some(interface_names) = names(interfaces, intern!(py, "name")) else {
            return Ok(None);
        };
        let mut current_rtt: Vec<Option<f64>> = Vec::with_capacity(interface_names.len());
        for i in interfaces.iter() {
            match i.getattr(intern!(py, "rtt_ms"))?.extract::<Option<f64>>() {
                Ok(v) => current_rtt.push(v),
                Err(_) => return Ok(None),
            }
        }
        let history_strs: Vec<&str> = match history_names.iter().map(|n| n.to_str()).collect() {
            Ok(v) => v,
            Err(_) => return Ok(None),
        };
        let mut views: Vec<mlpm::Subflow<'_>> = Vec::with_capacity(interface_names.len());
        for (name, current) in interface_names.iter().zip(&current_rtt) {
            let Ok(name) = name.to_str() else {
                return Ok(None);
            };
            let own = history_strs.iter().rposition(|h| *h == name).map(|k| &read[k]);
            views.push(mlpm::Subflow {
                interface: name,
                rtt_ms: own.map_or(NONE, |c| ms_columns(&c.rtt)),
                throughput_bps: own.map_or(NONE, |c| ms_columns(&c.tput)),
                current_rtt_ms: *current,
            });
        }
        let Some(d) = mlpm::decide(&views, self.window, self.horizon_s, &self.classifiers) else {
            return Ok(None);
        };
        let weights = PyList::empty(py);
        for (s, view) in d.subflows.iter().zip(&views) {
            // Python's min(max(weight, 0.0), 1.0) exactly: each bound replaces the value only past it (-0.0 and NaN
            // stay as they are)
            let weight = s.weight.clamp(0.0, 1.0);
            if !(within(weight, self.weight) && within(s.score, self.score)) {
                return Ok(None);
            }
            weights.append(self.build(py, view.interface, weight, s)?)?;
        }
        let out = (weights, d.prioritised, d.use_rtt, d.use_tput, d.bias, d.short);
        Ok(Some(out.into_pyobject(py)?))
    }
}

impl MlpmWeights {
    /// One subflow's `SubflowWeight`: every field in [`WEIGHT_FIELDS`]' order, all of them set (as a dict of every
    /// field validated by pydantic leaves them), no extra or private values.
    fn build<'py>(
        &self,
        py: Python<'py>,
        interface: &str,
        weight: f64,
        s: &mlpm::Scored,
    ) -> PyResult<Bound<'py, PyAny>> {
        let values = pyo3::types::PyDict::new(py);
        let fields_set = PySet::empty(py)?;
        let forecast = |f: Option<mlpm::Forecast>| match f {
            Some(f) => (Some(f.current), Some(f.slope_per_s), Some(f.forecast), f.samples),
            None => (None, None, None, 0),
        };
        let (r, t) = (forecast(s.rtt_ms), forecast(s.throughput_bps));
        let k = &self.keys;
        values.set_item(k[0].bind(py), interface)?;
        values.set_item(k[1].bind(py), weight)?;
        values.set_item(k[2].bind(py), s.score)?;
        values.set_item(k[3].bind(py), r.0)?;
        values.set_item(k[4].bind(py), r.1)?;
        values.set_item(k[5].bind(py), r.2)?;
        values.set_item(k[6].bind(py), r.3)?;
        values.set_item(k[7].bind(py), t.0)?;
        values.set_item(k[8].bind(py), t.1)?;
        values.set_item(k[9].bind(py), t.2)?;
        values.set_item(k[10].bind(py), t.3)?;
        for key in k {
            fields_set.add(key.bind(py))?;
        }
        construct(&self.new, &self.cls, &values, &fields_set)
    }
}

/// No samples: what the adapter's `None` columns give the engine.
const NONE: mlpm::Columns<'static> = mlpm::Columns {
    t: &[],
    values: &[],
    t_units_per_s: 1.0,
};

/// A history's columns as the adapter hands them to the engine: times in ms (1000 per s), possibly empty.
fn ms_columns((t, values): &(Vec<f64>, Vec<f64>)) -> mlpm::Columns<'_> {
    mlpm::Columns {
        t,
        values,
        t_units_per_s: 1000.0,
    }
}

fn within(v: f64, (lo, hi): (f64, f64)) -> bool {
    v >= lo && v <= hi
}

/// Each item's `attr` as a Python string, or None where one is not a string.
fn names<'py>(items: &Bound<'py, PyList>, attr: &Bound<'py, PyString>) -> Option<Vec<Bound<'py, PyString>>> {
    items
        .iter()
        .map(|item| item.getattr(attr).ok()?.cast_into::<PyString>().ok())
        .collect()
}

/// A `SubflowHistory`'s columns, or None where it holds sample objects or a column that is not a list of floats.
fn history_columns(h: &Bound<'_, PyAny>) -> PyResult<Option<HistoryColumns>> {
    let py = h.py();
    for samples in [intern!(py, "rtt_samples"), intern!(py, "throughput_samples")] {
        if !h.getattr(samples)?.cast::<PyList>().is_ok_and(|l| l.is_empty()) {
            return Ok(None);
        }
    }
    let column = |name: &Bound<'_, PyString>| -> PyResult<Option<Vec<f64>>> {
        let value = h.getattr(name)?;
        Ok(value.cast::<PyList>().ok().and_then(|l| l.extract::<Vec<f64>>().ok()))
    };
    let (Some(rtt_t), Some(rtt), Some(tput_t), Some(tput)) = (
        column(intern!(py, "rtt_t_ms"))?,
        column(intern!(py, "rtt_ms"))?,
        column(intern!(py, "throughput_t_ms"))?,
        column(intern!(py, "throughput_bps"))?,
    ) else {
        return Ok(None);
    };
    Ok(Some(HistoryColumns {
        rtt: (rtt_t, rtt),
        tput: (tput_t, tput),
    }))
}
