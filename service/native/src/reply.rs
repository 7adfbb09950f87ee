//! Reply messages' wire bytes straight from the service's reply models (issue 16).
//!
//! The twin of `edgepath.grpc.convert.recommendation_batch_to_proto` (service/src), which dumps each pydantic model
//! to dicts and builds protobuf messages from them for the gRPC runtime to serialise. Here each message is walked by
//! its descriptor in the compiled schema (`request::SCHEMA`, read by prost-reflect) and written with prost's
//! encoding functions: each field is read from the model's attribute of the same name, so a field added to the proto
//! and to the model is encoded without a change here. As the Python converters and upb's serialiser: fields in
//! number order; a `None` leaves a field unset; a field without presence is left out at its default (zero bits,
//! false, empty); repeated numbers and enums packed; an enum member goes through the caller's table of its enum; a
//! value of the wrong type is an error naming the field. Fields the proto has no place for (a `Recommendation`'s
//! extra sections) are not read.
//!
//! A [`WireMemo`] keeps the bytes of the messages of the types it names by object identity: the engine adapters hand
//! the same frozen section object to many replies (a steering rule per distinct rule, a congestion advice per
//! context), whose encoding was ~65 % of a Recommend's (steering ~6.8 µs, congestion ~3.9 of ~10.4; issue 16).

use prost::bytes::BufMut;
use prost::encoding::{self, encode_key, encode_varint, WireType};
use prost_reflect::{Cardinality, DescriptorPool, Kind, MessageDescriptor};
use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple, PyWeakrefReference};
use std::collections::HashMap;

use crate::request::SCHEMA;

/// How one field is written.
enum Write {
    Double,
    Float,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Fixed64,
    Sfixed32,
    Sfixed64,
    Bool,
    String,
    Bytes,
    /// An enum: the caller's table named by the enum's full name (member → wire value).
    Enum(Py<PyString>),
    /// A message: its plan's index in [`Plans::messages`].
    Message(usize),
}

struct Field {
    /// The attribute read, interned once.
    name: Py<PyString>,
    /// Its full name, for errors.
    full_name: String,
    number: u32,
    write: Write,
    repeated: bool,
    /// Has presence (a message, a proto3 `optional`): written whenever it is not None, default or not.
    presence: bool,
}

struct Plans {
    messages: Vec<Vec<Field>>,
    by_name: HashMap<String, usize>,
}

/// Every message's plan, built once from the compiled schema.
fn plans(py: Python<'_>) -> &'static Plans {
    static PLANS: PyOnceLock<Plans> = PyOnceLock::new();
    PLANS.get_or_init(py, || {
        let pool = DescriptorPool::decode(SCHEMA).expect("the compiled schema is a valid FileDescriptorSet");
        let all: Vec<MessageDescriptor> = pool.all_messages().collect();
        let by_name: HashMap<String, usize> = all
            .iter()
            .enumerate()
            .map(|(i, m)| (m.full_name().to_string(), i))
            .collect();
        let messages = all
            .iter()
            .map(|m| {
                let mut fields: Vec<Field> = m
                    .fields()
                    .map(|f| Field {
                        name: PyString::intern(py, f.name()).unbind(),
                        full_name: f.full_name().to_string(),
                        number: f.number(),
                        write: match f.kind() {
                            Kind::Double => Write::Double,
                            Kind::Float => Write::Float,
                            Kind::Int32 => Write::Int32,
                            Kind::Int64 => Write::Int64,
                            Kind::Uint32 => Write::Uint32,
                            Kind::Uint64 => Write::Uint64,
                            Kind::Sint32 => Write::Sint32,
                            Kind::Sint64 => Write::Sint64,
                            Kind::Fixed32 => Write::Fixed32,
                            Kind::Fixed64 => Write::Fixed64,
                            Kind::Sfixed32 => Write::Sfixed32,
                            Kind::Sfixed64 => Write::Sfixed64,
                            Kind::Bool => Write::Bool,
                            Kind::String => Write::String,
                            Kind::Bytes => Write::Bytes,
                            Kind::Enum(e) => Write::Enum(PyString::intern(py, e.full_name()).unbind()),
                            Kind::Message(d) => Write::Message(by_name[d.full_name()]),
                        },
                        repeated: f.cardinality() == Cardinality::Repeated,
                        presence: f.supports_presence(),
                    })
                    .collect();
                fields.sort_by_key(|f| f.number); // written in number order, as upb does
                fields
            })
            .collect();
        Plans { messages, by_name }
    })
}

/// `err` with the field it was met at in front of its message (`edgepath.v1.PrimaryPath.propensity: ...`).
fn at_field(py: Python<'_>, field: &Field, err: PyErr) -> PyErr {
    let message = format!("{}: {}", field.full_name, err.value(py));
    if err.is_instance_of::<PyKeyError>(py) {
        PyKeyError::new_err(message)
    } else {
        PyTypeError::new_err(message)
    }
}

/// Whether a field without presence is at its default, so left out (upb's rule: a number's bits all zero, so -0.0 is
/// written; false; empty). An enum's number decides in [`write_one`].
fn is_default(write: &Write, value: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(match write {
        Write::Double | Write::Float => value.extract::<f64>()?.to_bits() == 0,
        Write::Message(_) | Write::Enum(_) => false,
        _ => !value.is_truthy()?,
    })
}

/// An enum member's wire value through `enums[<enum name>]`.
fn enum_number(table: &Py<PyString>, value: &Bound<'_, PyAny>, enums: &Bound<'_, PyDict>) -> PyResult<i32> {
    let py = value.py();
    let name = table.bind(py);
    let table = enums
        .get_item(name)?
        .ok_or_else(|| PyKeyError::new_err(format!("no table for enum {name}")))?;
    table
        .get_item(value)
        .map_err(|_| PyKeyError::new_err(format!("{name} has no wire value for {value}")))?
        .extract()
}

/// One non-repeated value of `field` (or one element of a repeated string, bytes or message field).
fn write_one(
    plans: &Plans,
    field: &Field,
    value: &Bound<'_, PyAny>,
    enums: &Bound<'_, PyDict>,
    memo: Option<&WireMemo>,
    buf: &mut Vec<u8>,
) -> PyResult<()> {
    let tag = field.number;
    match &field.write {
        Write::Double => encoding::double::encode(tag, &value.extract()?, buf),
        Write::Float => encoding::float::encode(tag, &value.extract()?, buf),
        Write::Int32 => encoding::int32::encode(tag, &value.extract()?, buf),
        Write::Int64 => encoding::int64::encode(tag, &value.extract()?, buf),
        Write::Uint32 => encoding::uint32::encode(tag, &value.extract()?, buf),
        Write::Uint64 => encoding::uint64::encode(tag, &value.extract()?, buf),
        Write::Sint32 => encoding::sint32::encode(tag, &value.extract()?, buf),
        Write::Sint64 => encoding::sint64::encode(tag, &value.extract()?, buf),
        Write::Fixed32 => encoding::fixed32::encode(tag, &value.extract()?, buf),
        Write::Fixed64 => encoding::fixed64::encode(tag, &value.extract()?, buf),
        Write::Sfixed32 => encoding::sfixed32::encode(tag, &value.extract()?, buf),
        Write::Sfixed64 => encoding::sfixed64::encode(tag, &value.extract()?, buf),
        Write::Bool => encoding::bool::encode(tag, &value.extract()?, buf),
        Write::String => {
            let s = value.cast::<PyString>()?.to_str()?;
            encode_key(tag, WireType::LengthDelimited, buf);
            encode_varint(s.len() as u64, buf);
            buf.put_slice(s.as_bytes());
        }
        Write::Bytes => encoding::bytes::encode(tag, &value.extract::<Vec<u8>>()?, buf),
        Write::Enum(table) => {
            let number = enum_number(table, value, enums)?;
            if field.presence || field.repeated || number != 0 {
                encoding::int32::encode(tag, &number, buf);
            }
        }
        Write::Message(index) => {
            let kept = match memo {
                Some(m) if m.names(*index) => m.bytes_of(value)?,
                _ => None,
            };
            encode_key(tag, WireType::LengthDelimited, buf);
            if let Some(bytes) = kept {
                let bytes = bytes.as_bytes();
                encode_varint(bytes.len() as u64, buf);
                buf.put_slice(bytes);
            } else {
                let mut inner = Vec::new();
                write_message(plans, *index, value, enums, memo, &mut inner)?;
                encode_varint(inner.len() as u64, buf);
                buf.put_slice(&inner);
                if let Some(m) = memo.filter(|m| m.names(*index)) {
                    m.keep(value, &inner)?;
                }
            }
        }
    }
    Ok(())
}

/// A repeated field of numbers or enums, packed (proto3's default); empty: nothing.
fn write_packed(field: &Field, value: &Bound<'_, PyAny>, enums: &Bound<'_, PyDict>, buf: &mut Vec<u8>) -> PyResult<()> {
    let mut body = Vec::new();
    for item in value.try_iter()? {
        let item = item?;
        match &field.write {
            Write::Double => body.put_f64_le(item.extract()?),
            Write::Float => body.put_f32_le(item.extract()?),
            Write::Int32 => encode_varint(item.extract::<i32>()? as i64 as u64, &mut body),
            Write::Int64 => encode_varint(item.extract::<i64>()? as u64, &mut body),
            Write::Uint32 => encode_varint(u64::from(item.extract::<u32>()?), &mut body),
            Write::Uint64 => encode_varint(item.extract()?, &mut body),
            Write::Sint32 => {
                let v: i32 = item.extract()?;
                encode_varint(u64::from(((v << 1) ^ (v >> 31)) as u32), &mut body);
            }
            Write::Sint64 => {
                let v: i64 = item.extract()?;
                encode_varint(((v << 1) ^ (v >> 63)) as u64, &mut body);
            }
            Write::Fixed32 => body.put_u32_le(item.extract()?),
            Write::Fixed64 => body.put_u64_le(item.extract()?),
            Write::Sfixed32 => body.put_i32_le(item.extract()?),
            Write::Sfixed64 => body.put_i64_le(item.extract()?),
            Write::Bool => encode_varint(u64::from(item.extract::<bool>()?), &mut body),
            Write::Enum(table) => encode_varint(enum_number(table, &item, enums)? as i64 as u64, &mut body),
            Write::String | Write::Bytes | Write::Message(_) => unreachable!("not packed"),
        }
    }
    if !body.is_empty() {
        encode_key(field.number, WireType::LengthDelimited, buf);
        encode_varint(body.len() as u64, buf);
        buf.put_slice(&body);
    }
    Ok(())
}

fn write_message(
    plans: &Plans,
    index: usize,
    obj: &Bound<'_, PyAny>,
    enums: &Bound<'_, PyDict>,
    memo: Option<&WireMemo>,
    buf: &mut Vec<u8>,
) -> PyResult<()> {
    let py = obj.py();
    // A model's fields are in its instance dict: read there (no lookup through the class first); else getattr
    let members = obj
        .getattr(intern!(py, "__dict__"))
        .ok()
        .and_then(|d| d.cast_into::<PyDict>().ok());
    for field in &plans.messages[index] {
        let name = field.name.bind(py);
        let found = match &members {
            Some(d) => d.get_item(name)?,
            None => None,
        };
        let value = match found {
            Some(v) => v,
            None => obj.getattr(name).map_err(|e| at_field(py, field, e))?,
        };
        if value.is_none() {
            continue;
        }
        let written = if field.repeated {
            match field.write {
                Write::String | Write::Bytes | Write::Message(_) => (|| {
                    for item in value.try_iter()? {
                        write_one(plans, field, &item?, enums, memo, buf)?;
                    }
                    Ok(())
                })(),
                _ => write_packed(field, &value, enums, buf),
            }
        } else if !field.presence && is_default(&field.write, &value).map_err(|e| at_field(py, field, e))? {
            Ok(())
        } else {
            write_one(plans, field, &value, enums, memo, buf)
        };
        written.map_err(|e| at_field(py, field, e))?;
    }
    Ok(())
}

/// Message `name` (full name) from `obj`, encoded.
///
/// Errors: `AttributeError`-derived `TypeError` (the object has no attribute for a field), `TypeError` (a value of
/// the wrong type) or `KeyError` (an enum member missing from its table, a message the schema lacks), each naming
/// the field.
pub fn encode(
    name: &str,
    obj: &Bound<'_, PyAny>,
    enums: &Bound<'_, PyDict>,
    memo: Option<&WireMemo>,
) -> PyResult<Vec<u8>> {
    let plans = plans(obj.py());
    let index = message_index(plans, name)?;
    let mut buf = Vec::with_capacity(1024);
    write_message(plans, index, obj, enums, memo, &mut buf)?;
    Ok(buf)
}

fn message_index(plans: &Plans, name: &str) -> PyResult<usize> {
    plans
        .by_name
        .get(name)
        .copied()
        .ok_or_else(|| PyKeyError::new_err(format!("no message {name} in the compiled schema")))
}

/// The encoded bytes of the objects of some message types, kept by identity for the next replies that carry the same
/// object (at most `maxsize`, the oldest dropped first).
///
/// An entry holds its object by weak reference, and answers only while that reference still gives the very object:
/// an object that died (its id free for another) is encoded afresh, and an entry does not keep a section made for
/// one reply alive (strong references to such sections once kept ~110,000 objects for the collector to walk, issue
/// 16). The objects must be immutable, as the adapters' frozen sections are: a kept object changed afterwards would be
/// answered with its old bytes. An object without weak references is encoded every time.
#[pyclass(frozen, module = "edgepath_native")]
pub struct WireMemo {
    /// Per message plan: whether its objects are kept.
    kept: Vec<bool>,
    /// id → (weak reference, bytes), in insertion order.
    entries: Py<PyDict>,
    maxsize: usize,
}

#[pymethods]
impl WireMemo {
    /// `messages`: the full names of the message types whose objects are kept. Raises `KeyError` for a name the
    /// compiled schema lacks.
    #[new]
    fn py_new(py: Python<'_>, messages: Vec<String>, maxsize: usize) -> PyResult<Self> {
        let plans = plans(py);
        let mut kept = vec![false; plans.messages.len()];
        for name in &messages {
            kept[message_index(plans, name)?] = true;
        }
        Ok(Self {
            kept,
            entries: PyDict::new(py).unbind(),
            maxsize,
        })
    }

    /// How many entries are kept (dead objects' entries included, until they are replaced or dropped).
    fn __len__(&self, py: Python<'_>) -> usize {
        self.entries.bind(py).len()
    }
}

impl WireMemo {
    fn names(&self, index: usize) -> bool {
        self.kept[index]
    }

    /// The kept bytes of `obj`, if it has an entry whose weak reference still gives it.
    fn bytes_of<'py>(&self, obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let py = obj.py();
        let Some(entry) = self.entries.bind(py).get_item(obj.as_ptr() as usize)? else {
            return Ok(None);
        };
        let entry = entry.cast_into::<PyTuple>()?;
        let alive = entry.get_item(0)?.cast_into::<PyWeakrefReference>()?.upgrade();
        if alive.is_some_and(|o| o.is(obj)) {
            Ok(Some(entry.get_item(1)?.cast_into::<PyBytes>()?))
        } else {
            Ok(None)
        }
    }

    /// Keep `bytes` for `obj` (nothing where `obj` has no weak references), dropping the oldest entry when full.
    fn keep(&self, obj: &Bound<'_, PyAny>, bytes: &[u8]) -> PyResult<()> {
        let py = obj.py();
        let Ok(weak) = PyWeakrefReference::new(obj) else {
            return Ok(());
        };
        let entries = self.entries.bind(py);
        let key = obj.as_ptr() as usize;
        if entries.len() >= self.maxsize && !entries.contains(key)? {
            let oldest = entries.iter().next().map(|(k, _)| k);
            if let Some(oldest) = oldest {
                entries.del_item(oldest)?;
            }
        }
        entries.set_item(key, (weak, PyBytes::new(py, bytes)))
    }
}
