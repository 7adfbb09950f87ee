//! The context encoder ([`features::context_features`]) reading a request's interface models itself (issue 16).
//!
//! `edgepath.engines.features.native_features` built, per interface, a tuple of its slot and its 14 measurements in
//! Python (`operator.attrgetter`) for the encoder to read again: ~2 µs of a context's ~5. Here the encoder reads
//! each interface object's `access_type` (its slot: the identical member of the `SLOTS` it was made with) and its
//! measurements ([`features::ATTRS`]) by attribute, converting each as pyo3 converts an `Option<f64>` (None, or a
//! float / int by `float()`), so the values, and the vector, are those the tuple path gave. An object it cannot read
//! so (an access type outside `SLOTS`, a missing attribute, a value that is not a number) is handed back (None), for
//! the Python encoder, the reference, to encode or to raise on, as it would have.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyList, PyString, PyTuple};

use crate::features::{self, Interface, ATTRS, N_FEATURES, SLOTS};

/// One context's representative interface per slot, as the objects the caller passed (None: no interface there).
type Reps<'py> = Vec<Option<Bound<'py, PyAny>>>;
/// One context's encoding: the vector's bytes, the representatives, the arm set.
type Encoded<'py> = (Bound<'py, PyByteArray>, Reps<'py>, Bound<'py, PyTuple>);
/// A batch's encoding: the matrix's bytes, the representatives and the arm set of each context.
type EncodedBatch<'py> = (Bound<'py, PyByteArray>, Bound<'py, PyList>, Bound<'py, PyList>);

/// The context encoder over interface objects (`edgepath.types.InterfaceContext` or any object with the same
/// attributes); `slots`: the access types of `SLOTS` in order (`edgepath.engines.features.SLOTS`), matched by
/// identity.
#[pyclass(frozen, module = "edgepath_native")]
pub struct ModelFeatures {
    slots: Vec<Py<PyAny>>,
    attrs: Vec<Py<PyString>>,
}

#[pymethods]
impl ModelFeatures {
    /// Raises `ValueError` unless `slots` names one access type per slot of the encoder's layout.
    #[new]
    fn py_new(py: Python<'_>, slots: Vec<Bound<'_, PyAny>>) -> PyResult<Self> {
        if slots.len() != SLOTS.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "the encoder lays out {} slots, not {}",
                SLOTS.len(),
                slots.len()
            )));
        }
        Ok(Self {
            slots: slots.into_iter().map(Bound::unbind).collect(),
            attrs: ATTRS.iter().map(|a| PyString::intern(py, a).unbind()).collect(),
        })
    }

    /// One context's features: the vector's native-endian float64 bytes (a `bytearray` of `N_FEATURES` values, for
    /// `numpy.frombuffer`), the representative interface per slot (the objects given; None: none of that slot) and
    /// the arm set (the `slots` members with a representative, in order: `edgepath.engines.primary_path.arm_set`).
    /// None to hand the context back (see the module).
    fn encode<'py>(&self, py: Python<'py>, interfaces: &Bound<'py, PyAny>) -> PyResult<Option<Encoded<'py>>> {
        let Some((objects, views)) = self.read(interfaces) else {
            return Ok(None);
        };
        let Some((x, reps)) = features::context_features(&views) else {
            return Ok(None);
        };
        Ok(Some((
            floats(py, &x)?,
            representatives(&objects, reps),
            self.arms(py, reps)?,
        )))
    }

    /// `encode` of each context of `contexts` (a list of interface sequences), as one `bytearray` of the
    /// `(n, N_FEATURES)` row-major float64 matrix, a list of the n representative lists and a list of the n arm
    /// sets. None where any context is handed back (the caller encodes them all).
    fn encode_batch<'py>(&self, py: Python<'py>, contexts: &Bound<'py, PyList>) -> PyResult<Option<EncodedBatch<'py>>> {
        let mut matrix = Vec::with_capacity(contexts.len() * N_FEATURES);
        let all_reps = PyList::empty(py);
        let all_arms = PyList::empty(py);
        for interfaces in contexts.iter() {
            let Some((objects, views)) = self.read(&interfaces) else {
                return Ok(None);
            };
            let Some((x, reps)) = features::context_features(&views) else {
                return Ok(None);
            };
            matrix.extend_from_slice(&x);
            all_reps.append(representatives(&objects, reps))?;
            all_arms.append(self.arms(py, reps)?)?;
        }
        Ok(Some((floats(py, &matrix)?, all_reps, all_arms)))
    }
}

impl ModelFeatures {
    /// The slots with a representative, as the `slots` members, in order.
    fn arms<'py>(&self, py: Python<'py>, reps: [Option<usize>; 4]) -> PyResult<Bound<'py, PyTuple>> {
        let offered: Vec<&Bound<'py, PyAny>> = self
            .slots
            .iter()
            .zip(reps)
            .filter(|(_, r)| r.is_some())
            .map(|(s, _)| s.bind(py))
            .collect();
        PyTuple::new(py, offered)
    }

    /// The interface objects of one context and what the encoder reads of each; None to hand the context back.
    #[allow(clippy::type_complexity)]
    fn read<'py>(&self, interfaces: &Bound<'py, PyAny>) -> Option<(Vec<Bound<'py, PyAny>>, Vec<Interface>)> {
        let py = interfaces.py();
        let mut objects = Vec::new();
        let mut views = Vec::new();
        for item in interfaces.try_iter().ok()? {
            let iface = item.ok()?;
            let access = iface.getattr(intern!(py, "access_type")).ok()?;
            let slot = self.slots.iter().position(|s| s.bind(py).is(&access))?;
            let mut measured = [None; ATTRS.len()];
            for (value, name) in measured.iter_mut().zip(&self.attrs) {
                *value = iface.getattr(name.bind(py)).ok()?.extract::<Option<f64>>().ok()?;
            }
            views.push(Interface { slot, measured });
            objects.push(iface);
        }
        Some((objects, views))
    }
}

fn representatives<'py>(objects: &[Bound<'py, PyAny>], reps: [Option<usize>; 4]) -> Reps<'py> {
    reps.iter().map(|r| r.map(|i| objects[i].clone())).collect()
}

/// `values` as their native-endian bytes in a `bytearray`.
fn floats<'py>(py: Python<'py>, values: &[f64]) -> PyResult<Bound<'py, PyByteArray>> {
    PyByteArray::new_with(py, values.len() * 8, |buf: &mut [u8]| {
        for (chunk, v) in buf.chunks_exact_mut(8).zip(values) {
            chunk.copy_from_slice(&v.to_ne_bytes());
        }
        Ok(())
    })
}
