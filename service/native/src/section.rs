//! MLPM's `scheduler` section straight from a request's models (issue 16).
//!
//! The twin of `edgepath.adapters.mlpm`'s compiled path on plain values (`subflow_columns`, `mlpm_decide`, then a
//! dict per weight and the section validated into `SchedulerAdvice` by pydantic): here the interfaces' and histories'
//! columns are read from the request's model instances (`edgepath.types.InterfaceContext`, `SubflowHistory`), decided
//! by [`mlpm::decide`], and the section built as its `SchedulerAdvice` instance with a `SubflowWeight` per subflow,
//! each the way `BaseModel.model_construct` builds one, after the models' own checks (a weight's `weight` and `score`
//! bounds, read from the model by `edgepath.adapters.mlpm.section_model_checks`; the other fields are unconstrained).
//! The texts (reasons, feature names) come from the Python engine. Anything else hands the decision back (None) to
//! the plain values' path, which decides it with the same numbers and lets pydantic refuse what it must: a history in
//! the sample-object form, a value that is not the model's type, a decision the engine hands back, a weight or score
//! outside its bounds (NaN included).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySet, PyString};

use crate::mlpm;
use crate::request::{check_bounds, construct};

/// `SubflowWeight`'s fields in the model's order, as [`MlpmSection`] fills an instance's values.
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

/// One history as read from its model: its interface's name, RTT `(t_ms, rtt_ms)` and throughput
/// `(t_ms, throughput_bps)` columns.
struct HistoryColumns<'py> {
    name: Bound<'py, PyString>,
    rtt: (Vec<f64>, Vec<f64>),
    tput: (Vec<f64>, Vec<f64>),
}

/// `SchedulerAdvice`'s fields in the model's order, as [`MlpmSection`] fills an instance's values.
pub const SECTION_FIELDS: [&str; 7] = [
    "weights",
    "prioritised_subflow",
    "priority",
    "features_used",
    "horizon_s",
    "bias",
    "reason",
];

/// The texts of one priority's sections, from the Python engine (`edgepath.engines.mlpm`, their one source): the
/// priority's name; the reason and the features used for each feature set (both, RTT only, throughput only); and
/// the engine's reason function of `(use_rtt, use_tput, short interface names)`, called where some subflow has too
/// few samples for a trend.
type PyTexts = (Py<PyString>, [Py<PyString>; 3], [Vec<Py<PyString>>; 3], Py<PyAny>);

/// The compiled MLPM decision of one priority and its settings (`edgepath.engines.mlpm.compiled_section_decider`),
/// taking a request's models and answering with its `scheduler` section: a `SchedulerAdvice` whose weights are
/// `SubflowWeight` instances, each built as `model_construct` builds one.
#[pyclass(frozen, module = "edgepath_native")]
pub struct MlpmSection {
    window: usize,
    horizon_s: f64,
    classifiers: mlpm::Classifiers,
    priority: Py<PyString>,
    reasons: [Py<PyString>; 3],
    features: [Vec<Py<PyString>>; 3],
    short_reason: Py<PyAny>,
    /// The weight model (`edgepath.types.SubflowWeight`), the section model (`SchedulerAdvice`), `object.__new__`.
    weight_cls: Py<PyAny>,
    section_cls: Py<PyAny>,
    new: Py<PyAny>,
    /// Inclusive bounds of a weight's `weight` and `score`, as the model declares them.
    weight: (f64, f64),
    score: (f64, f64),
    /// [`WEIGHT_FIELDS`] and [`SECTION_FIELDS`] as interned Python strings, and each model's fields set (every
    /// field), copied per instance.
    weight_keys: Vec<Py<PyString>>,
    section_keys: Vec<Py<PyString>>,
    weight_set: Py<PySet>,
    section_set: Py<PySet>,
}

#[pymethods]
impl MlpmSection {
    /// The fields it fills, in order ([`WEIGHT_FIELDS`], [`SECTION_FIELDS`]): the Python side builds it only where
    /// they are the models'.
    #[classattr]
    #[allow(non_snake_case)]
    fn WEIGHT_FIELDS() -> Vec<&'static str> {
        WEIGHT_FIELDS.to_vec()
    }

    #[classattr]
    #[allow(non_snake_case)]
    fn SECTION_FIELDS() -> Vec<&'static str> {
        SECTION_FIELDS.to_vec()
    }

    /// `window` ≥ 1 samples and `horizon_s` (s) as `mlpm.decide` takes them (checked by the caller); `classifiers`:
    /// `(w, b)` for the feature sets both, RTT only, throughput only; `texts`: see [`PyTexts`]; `models`: the weight
    /// model, the section model and `object.__new__`; `bounds`: a weight's `weight` and `score` bounds (finite,
    /// lo <= hi; `ValueError` otherwise).
    #[new]
    fn py_new(
        py: Python<'_>,
        window: usize,
        horizon_s: f64,
        classifiers: (PyClassifier, PyClassifier, PyClassifier),
        texts: PyTexts,
        models: (Py<PyAny>, Py<PyAny>, Py<PyAny>),
        bounds: ((f64, f64), (f64, f64)),
    ) -> PyResult<Self> {
        let (weight, score) = bounds;
        check_bounds(&[weight, score])?;
        let (rtt_tput, rtt, tput) = classifiers;
        let (priority, reasons, features, short_reason) = texts;
        let (weight_cls, section_cls, new) = models;
        let interned =
            |names: &[&str]| -> Vec<Py<PyString>> { names.iter().map(|k| PyString::intern(py, k).unbind()).collect() };
        let (weight_keys, section_keys) = (interned(&WEIGHT_FIELDS), interned(&SECTION_FIELDS));
        let weight_set = PySet::new(py, weight_keys.iter().map(|k| k.bind(py)))?.unbind();
        let section_set = PySet::new(py, section_keys.iter().map(|k| k.bind(py)))?.unbind();
        Ok(Self {
            window,
            horizon_s,
            classifiers: mlpm::Classifiers { rtt_tput, rtt, tput },
            priority,
            reasons,
            features,
            short_reason,
            weight_cls,
            section_cls,
            new,
            weight,
            score,
            weight_keys,
            section_keys,
            weight_set,
            section_set,
        })
    }

    /// MLPM's `scheduler` section for a request (Silva et al. 2020, Eq. 1–4; [`mlpm::decide`]) from its
    /// `interfaces` (a list of `InterfaceContext`: `name`, `rtt_ms` in ms) and `histories` (a list of
    /// `SubflowHistory` in the column form: ms timestamps, RTTs in ms, throughputs in bit/s; an interface's history
    /// is the last of its name), with `advisory` appended to its reason (the kernel's, or ""). One `SubflowWeight`
    /// per interface in order, its weight clamped to [0, 1] as `min(max(weight, 0.0), 1.0)` in Python. None to hand
    /// the decision back: a history in the sample-object form, a value not of the model's type, a decision the
    /// engine hands back, a weight or score outside its bounds (NaN included).
    ///
    /// Raises what the engine's reason function raises (called only where a subflow has too few samples).
    fn decide<'py>(
        &self,
        py: Python<'py>,
        interfaces: &Bound<'py, PyAny>,
        histories: &Bound<'py, PyAny>,
        advisory: &Bound<'py, PyString>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let (Ok(interfaces), Ok(histories)) = (interfaces.cast::<PyList>(), histories.cast::<PyList>()) else {
            return Ok(None);
        };
        let Some(read) = histories
            .iter()
            .map(|h| history_columns(&h))
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let Some(subflows) = interfaces.iter().map(|i| interface(&i)).collect::<Option<Vec<_>>>() else {
            return Ok(None);
        };
        let Ok(history_names) = read.iter().map(|h| h.name.to_str()).collect::<PyResult<Vec<&str>>>() else {
            return Ok(None);
        };
        let mut views: Vec<mlpm::Subflow<'_>> = Vec::with_capacity(subflows.len());
        for (name, current) in &subflows {
            let Ok(name) = name.to_str() else {
                return Ok(None);
            };
            let own = history_names.iter().rposition(|h| *h == name).map(|k| &read[k]);
            views.push(mlpm::Subflow {
                interface: name,
                rtt_ms: own.map_or(crate::EMPTY, |c| ms_columns(&c.rtt)),
                throughput_bps: own.map_or(crate::EMPTY, |c| ms_columns(&c.tput)),
                current_rtt_ms: *current,
            });
        }
        let Some(d) = mlpm::decide(&views, self.window, self.horizon_s, &self.classifiers) else {
            return Ok(None);
        };
        let weights = PyList::empty(py);
        for (s, (name, _)) in d.subflows.iter().zip(&subflows) {
            // Python's min(max(weight, 0.0), 1.0) exactly: each bound replaces the value only past it (-0.0 and NaN
            // stay as they are)
            let weight = s.weight.clamp(0.0, 1.0);
            if !(within(weight, self.weight) && within(s.score, self.score)) {
                return Ok(None);
            }
            weights.append(self.weight_model(py, name, weight, s)?)?;
        }
        let set = match (d.use_rtt, d.use_tput) {
            (true, true) => 0,
            (true, false) => 1,
            _ => 2, // (false, false) is handed back by the engine
        };
        let mut reason = if d.short.is_empty() {
            self.reasons[set].bind(py).clone()
        } else {
            let short = PyList::new(py, d.short.iter().map(|&k| &subflows[k].0))?;
            self.short_reason
                .bind(py)
                .call1((d.use_rtt, d.use_tput, short))?
                .cast_into::<PyString>()?
        };
        if advisory.len()? > 0 {
            reason = reason.add(advisory)?.cast_into::<PyString>()?;
        }
        let features = PyList::new(py, self.features[set].iter().map(|f| f.bind(py)))?;
        let values = PyDict::new(py);
        let k = &self.section_keys;
        values.set_item(k[0].bind(py), weights)?;
        values.set_item(k[1].bind(py), &subflows[d.prioritised].0)?;
        values.set_item(k[2].bind(py), self.priority.bind(py))?;
        values.set_item(k[3].bind(py), features)?;
        values.set_item(k[4].bind(py), self.horizon_s)?;
        values.set_item(k[5].bind(py), d.bias)?;
        values.set_item(k[6].bind(py), reason)?;
        construct(
            &self.new,
            &self.section_cls,
            &values,
            &copied(self.section_set.bind(py))?,
        )
        .map(Some)
    }
}

impl MlpmSection {
    /// One subflow's `SubflowWeight`: every field in [`WEIGHT_FIELDS`]' order, all of them set (as a dict of every
    /// field validated by pydantic leaves them), no extra or private values.
    fn weight_model<'py>(
        &self,
        py: Python<'py>,
        interface: &Bound<'py, PyString>,
        weight: f64,
        s: &mlpm::Scored,
    ) -> PyResult<Bound<'py, PyAny>> {
        let values = PyDict::new(py);
        let forecast = |f: Option<mlpm::Forecast>| match f {
            Some(f) => (Some(f.current), Some(f.slope_per_s), Some(f.forecast), f.samples),
            None => (None, None, None, 0),
        };
        let (r, t) = (forecast(s.rtt_ms), forecast(s.throughput_bps));
        let k = &self.weight_keys;
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
        construct(&self.new, &self.weight_cls, &values, &copied(self.weight_set.bind(py))?)
    }
}

/// A new set with `template`'s members (each instance gets its own fields set, as pydantic gives it).
fn copied<'py>(template: &Bound<'py, PySet>) -> PyResult<Bound<'py, PySet>> {
    // SAFETY: `template` is a valid set under the GIL; PySet_New returns a new reference or NULL with an exception.
    unsafe {
        Bound::from_owned_ptr_or_err(template.py(), pyo3::ffi::PySet_New(template.as_ptr()))
            .map(|s| s.cast_into_unchecked::<PySet>())
    }
}

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

/// An `InterfaceContext`'s name and current RTT (ms), or None where it lacks either or they are not a string and a
/// float or None.
fn interface<'py>(i: &Bound<'py, PyAny>) -> Option<(Bound<'py, PyString>, Option<f64>)> {
    let py = i.py();
    let name = i.getattr(intern!(py, "name")).ok()?.cast_into::<PyString>().ok()?;
    let rtt_ms = i.getattr(intern!(py, "rtt_ms")).ok()?.extract::<Option<f64>>().ok()?;
    Some((name, rtt_ms))
}

/// A `SubflowHistory`'s interface name and columns, or None where it holds sample objects, lacks an attribute, or has
/// a name that is not a string or a column that is not a list of floats.
fn history_columns<'py>(h: &Bound<'py, PyAny>) -> Option<HistoryColumns<'py>> {
    let py = h.py();
    let name = h.getattr(intern!(py, "interface")).ok()?.cast_into::<PyString>().ok()?;
    for samples in [intern!(py, "rtt_samples"), intern!(py, "throughput_samples")] {
        if !h.getattr(samples).ok()?.cast::<PyList>().is_ok_and(|l| l.is_empty()) {
            return None;
        }
    }
    let column =
        |name: &Bound<'_, PyString>| -> Option<Vec<f64>> { floats(h.getattr(name).ok()?.cast::<PyList>().ok()?) };
    Some(HistoryColumns {
        name,
        rtt: (column(intern!(py, "rtt_t_ms"))?, column(intern!(py, "rtt_ms"))?),
        tput: (
            column(intern!(py, "throughput_t_ms"))?,
            column(intern!(py, "throughput_bps"))?,
        ),
    })
}

/// A list of Python floats as `f64`s, read in place (the pydantic model holds its columns as lists of `float`):
/// ~4× faster than pyo3's `Vec<f64>` extraction, which iterates the list and checks each item for an error. None
/// where an item is not exactly a `float`.
fn floats(list: &Bound<'_, PyList>) -> Option<Vec<f64>> {
    let n = list.len();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: the list is alive (borrowed by `list`) and the GIL held; `i` < its length, read just above, and no
        // Python code runs between (an exact float is read without calling any), so the borrowed item stays valid.
        let value = unsafe {
            let item = pyo3::ffi::PyList_GetItem(list.as_ptr(), i as pyo3::ffi::Py_ssize_t);
            if item.is_null() || pyo3::ffi::Py_TYPE(item) != std::ptr::addr_of_mut!(pyo3::ffi::PyFloat_Type) {
                pyo3::ffi::PyErr_Clear();
                return None;
            }
            pyo3::ffi::PyFloat_AsDouble(item)
        };
        out.push(value);
    }
    Some(out)
}
