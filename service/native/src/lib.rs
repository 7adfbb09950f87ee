//! `edgepath_native`: EdgePath's decision engines compiled (issue 16, "Serve at the speed of the framework").
//!
//! Each engine here has a Python reference in `edgepath.engines` (service/src) that it matches bit for bit on the
//! inputs it takes, and returns `None` on any other, for the Python engine to decide. The service uses these
//! when the package is installed and `EDGEPATH_NATIVE_ENGINES` is not `false`; without it the Python engines
//! decide alone, with the same results.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

pub mod encoder;
pub mod features;
pub mod mlpm;
pub mod pyfloat;
pub mod reply;
pub mod request;
pub mod ridge;
pub mod section;

/// A feature's columns from Python: `(t, values, t_units_per_s)`, or None for no samples.
type PyColumns = Option<(Vec<f64>, Vec<f64>, f64)>;
/// One subflow from Python: `(interface, rtt_ms columns, throughput_bps columns, current_rtt_ms)`.
type PySubflow = (String, PyColumns, PyColumns, Option<f64>);
use section::PyClassifier;
/// A forecast to Python: `(current, slope_per_s, forecast, samples)`.
type PyForecast = Option<(f64, f64, f64, usize)>;
/// A decision to Python: `([(weight, score, rtt forecast, throughput forecast)], prioritised index, use_rtt,
/// use_tput, classifier weights, bias, [indices of subflows with fewer than 3 samples of a known feature]`.
type PyDecision = (
    Vec<(f64, f64, PyForecast, PyForecast)>,
    usize,
    bool,
    bool,
    Vec<f64>,
    f64,
    Vec<usize>,
);

/// No samples: what Python's None columns give the engine (here and in `section`).
const EMPTY: mlpm::Columns<'static> = mlpm::Columns {
    t: &[],
    values: &[],
    t_units_per_s: 1.0,
};

fn columns(c: &PyColumns) -> mlpm::Columns<'_> {
    c.as_ref().map_or(EMPTY, |(t, values, per_s)| mlpm::Columns {
        t,
        values,
        t_units_per_s: *per_s,
    })
}

fn forecast(f: Option<mlpm::Forecast>) -> PyForecast {
    f.map(|f| (f.current, f.slope_per_s, f.forecast, f.samples))
}

/// MLPM's decision for one request (`edgepath.engines.mlpm.decide` after its argument checks; Silva et al.
/// 2020, Eq. 1–4).
///
/// `subflows`: shape (k,), each `(interface, rtt_ms, throughput_bps, current_rtt_ms)` with the two features
/// as `(t, values, t_units_per_s)` columns (ms or bit/s values) or None; `window` ≥ 1 samples; `horizon_s` in s;
/// `classifiers`: `(w, b)` for the feature sets both, RTT only, throughput only. Returns None where the Python
/// engine must decide (columns out of time order or not finite, no feature known for every subflow, no subflow,
/// an `fsum` overflow).
#[pyfunction]
#[pyo3(signature = (subflows, window, horizon_s, classifiers))]
fn mlpm_decide(
    subflows: Vec<PySubflow>,
    window: usize,
    horizon_s: f64,
    classifiers: (PyClassifier, PyClassifier, PyClassifier),
) -> Option<PyDecision> {
    let views: Vec<mlpm::Subflow<'_>> = subflows
        .iter()
        .map(|(interface, rtt, tput, current)| mlpm::Subflow {
            interface,
            rtt_ms: columns(rtt),
            throughput_bps: columns(tput),
            current_rtt_ms: *current,
        })
        .collect();
    let (rtt_tput, rtt, tput) = classifiers;
    let d = mlpm::decide(&views, window, horizon_s, &mlpm::Classifiers { rtt_tput, rtt, tput })?;
    let scored = d
        .subflows
        .into_iter()
        .map(|s| (s.weight, s.score, forecast(s.rtt_ms), forecast(s.throughput_bps)))
        .collect();
    Some((
        scored,
        d.prioritised,
        d.use_rtt,
        d.use_tput,
        d.classifier_weights,
        d.bias,
        d.short,
    ))
}

/// The column names of the context encoder's vector (`FEATURE_NAMES`, [`encoder::ModelFeatures`]), and the measurements it reads per interface
/// in the order it takes them (`ATTRS`).
#[pyfunction]
fn feature_layout() -> (Vec<String>, Vec<&'static str>) {
    (features::feature_names(), features::ATTRS.to_vec())
}

/// A `RecommendRequest`'s wire bytes as `edgepath.grpc.convert.recommend_request_fields` gives the parsed message:
/// plain values for validation. `access`, `profile`: wire enum value → the service's `AccessType` /
/// `ApplicationProfile` member (a value not in them stays an `int`); `histories`, `interfaces`: where given, each
/// history and interface they accept comes as the model instance ([`request::HistoryModel`],
/// [`request::InterfaceModel`]). Returns None where the bytes do not decode.
#[pyfunction]
#[pyo3(signature = (data, access, profile, histories=None, interfaces=None))]
fn recommend_fields<'py>(
    py: Python<'py>,
    data: &[u8],
    access: &Bound<'py, PyDict>,
    profile: &Bound<'py, PyDict>,
    histories: Option<PyRef<'py, request::HistoryModel>>,
    interfaces: Option<PyRef<'py, request::InterfaceModel>>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let models = (histories.as_deref(), interfaces.as_deref());
    match request::decode_request(data) {
        Some(r) => Ok(Some(request::request_fields(py, &r, access, profile, models)?)),
        None => Ok(None),
    }
}

/// A `RecommendBatchRequest`'s wire bytes as a list of :func:`recommend_fields`' dicts, one per request in order;
/// None where the bytes do not decode.
#[pyfunction]
#[pyo3(signature = (data, access, profile, histories=None, interfaces=None))]
fn recommend_batch_fields<'py>(
    py: Python<'py>,
    data: &[u8],
    access: &Bound<'py, PyDict>,
    profile: &Bound<'py, PyDict>,
    histories: Option<PyRef<'py, request::HistoryModel>>,
    interfaces: Option<PyRef<'py, request::InterfaceModel>>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    let Some(batch) = request::decode_batch(data) else {
        return Ok(None);
    };
    let out = PyList::empty(py);
    let models = (histories.as_deref(), interfaces.as_deref());
    for r in &batch.requests {
        out.append(request::request_fields(py, r, access, profile, models)?)?;
    }
    Ok(Some(out))
}

/// The schema the wire decoding was generated from: proto/edgepath/v1/edgepath.proto, an encoded
/// `FileDescriptorSet`.
#[pyfunction]
fn wire_schema(py: Python<'_>) -> Bound<'_, PyBytes> {
    PyBytes::new(py, request::SCHEMA)
}

/// Message `name` (its full name in the schema, e.g. `edgepath.v1.RecommendBatchResponse`) encoded from the Python
/// object `obj`, as `edgepath.grpc.convert`'s converters would build it and protobuf serialise it: each field read
/// from the attribute of its name (None leaves it unset; a list for a repeated field); an enum member through
/// `enums[<enum full name>]` (member → wire value). Raises `TypeError` (a value of the wrong type, a missing
/// attribute) or `KeyError` (an enum member missing from its table, a message the schema lacks), naming the field.
/// `memo`: where given, the bytes of the messages it names are kept and reused by object identity ([`reply::WireMemo`]).
#[pyfunction]
#[pyo3(signature = (name, obj, enums, memo=None))]
fn encode_message<'py>(
    py: Python<'py>,
    name: &str,
    obj: &Bound<'py, PyAny>,
    enums: &Bound<'py, PyDict>,
    memo: Option<PyRef<'py, reply::WireMemo>>,
) -> PyResult<Bound<'py, PyBytes>> {
    Ok(PyBytes::new(py, &reply::encode(name, obj, enums, memo.as_deref())?))
}

/// A float64 array's values in C order with its shape; `None` for anything else (another type or item size).
fn float_array(py: Python<'_>, obj: &Bound<'_, PyAny>) -> Option<(Vec<f64>, Vec<usize>)> {
    let buffer = PyBuffer::<f64>::get(obj).ok()?;
    let values = buffer.to_vec(py).ok()?;
    Some((values, buffer.shape().to_vec()))
}

/// The single decision of a fitted ridge policy (`edgepath.engines.linear_bandit.LinearBandit.decide`,
/// [`ridge::decide`]): SquareCB with `gamma` = γ_t, or ε-greedy (`egreedy`) with `epsilon`; `floor` the
/// propensity floor; `draw` the policy generator's uniform number in [0, 1). `coef` (K, d), `intercept` (K,) and
/// `x` (d,) are float64 arrays (numpy's or any buffer). Returns `(arm index, exact propensity)`, or None where the
/// Python engine decides with the same draw (an estimate not finite, an `fsum` overflow, shapes that disagree, an
/// argument that is not a float64 buffer).
#[pyfunction]
#[pyo3(signature = (coef, intercept, x, egreedy, epsilon, gamma, floor, draw))]
#[allow(clippy::too_many_arguments)]
fn ridge_decide(
    py: Python<'_>,
    coef: &Bound<'_, PyAny>,
    intercept: &Bound<'_, PyAny>,
    x: &Bound<'_, PyAny>,
    egreedy: bool,
    epsilon: f64,
    gamma: f64,
    floor: f64,
    draw: f64,
) -> Option<(usize, f64)> {
    let (coef, shape) = float_array(py, coef)?;
    let (intercept, _) = float_array(py, intercept)?;
    let (x, _) = float_array(py, x)?;
    if shape != [intercept.len(), x.len()] {
        return None;
    }
    let rule = if egreedy {
        ridge::Rule::EGreedy { epsilon }
    } else {
        ridge::Rule::SquareCb { gamma }
    };
    ridge::decide(&coef, &intercept, &x, rule, floor, draw)
}

#[pymodule]
fn edgepath_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(mlpm_decide, m)?)?;
    m.add_function(wrap_pyfunction!(feature_layout, m)?)?;
    m.add_function(wrap_pyfunction!(recommend_fields, m)?)?;
    m.add_function(wrap_pyfunction!(recommend_batch_fields, m)?)?;
    m.add_function(wrap_pyfunction!(wire_schema, m)?)?;
    m.add_function(wrap_pyfunction!(encode_message, m)?)?;
    m.add_function(wrap_pyfunction!(ridge_decide, m)?)?;
    m.add_class::<request::HistoryModel>()?;
    m.add_class::<request::InterfaceModel>()?;
    m.add_class::<section::MlpmSection>()?;
    m.add_class::<encoder::ModelFeatures>()?;
    m.add_class::<reply::WireMemo>()?;
    Ok(())
}
