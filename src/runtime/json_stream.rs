//! JSON text straight to a [`Value`], without building a `serde_json::Value`
//! tree first.
//!
//! A tree costs 16–32 bytes per number (several GiB for a large argument
//! file, and an abort when the allocation fails); here the numbers go from
//! the parser into the typed buffer of the result, reserved fallibly, so
//! memory is the text plus the result. The conversion rules and the error
//! messages are those of [`super::data::value_from_json`] (the unit tests
//! of `data.rs` check that both agree on every case).

use super::data::{describe_json, json_depth, path_str, plural, push_scalar, row_name, shape_desc, type_desc};
use crate::ir::{Shape, Type};
use crate::runtime::{ArrayData, Value};
use serde::Deserialize;
use serde::de::{
    self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor,
    value::{MapAccessDeserializer, SeqAccessDeserializer},
};
use serde_json::Value as Json;
use std::cell::RefCell;
use std::fmt;

/// How a text failed: JSON syntax (serde's message, with a position) or a
/// value that does not fit the shape (our message).
pub enum TextError {
    Syntax(String),
    Value(String),
}

/// Parse JSON text (with the bare `NaN`, `Infinity`, `-Infinity` and `-0`
/// tokens of [`super::data::parse_json_text`]) as a value of `shape`.
pub fn value_from_json_text(text: &str, shape: &Shape) -> Result<Value, TextError> {
    let quoted = super::data::quote_non_finite(text);
    let mut de = serde_json::Deserializer::from_str(&quoted);
    let msg = RefCell::new(None);
    let result = ValueSeed { shape, msg: &msg }.deserialize(&mut de);
    match result {
        Ok(v) => {
            de.end().map_err(|e| TextError::Syntax(e.to_string()))?;
            Ok(v)
        }
        Err(e) => Err(match msg.into_inner() {
            Some(m) => TextError::Value(m),
            None => TextError::Syntax(e.to_string()),
        }),
    }
}

/// Record our message and stop the parser.
fn fail<E: de::Error>(msg: &RefCell<Option<String>>, text: String) -> E {
    *msg.borrow_mut() = Some(text);
    E::custom("value does not fit the parameter")
}

struct ValueSeed<'a> {
    shape: &'a Shape,
    msg: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self.shape {
            Shape::Leaf(ty) => {
                let mut st =
                    Leaf { ty, dims: vec![None; ty.rank()], data: ArrayData::with_capacity(ty.elem, 0), path: Vec::with_capacity(ty.rank()), msg: self.msg };
                Level { st: &mut st, d: 0 }.deserialize(d)?;
                if ty.rank() == 0 {
                    return Ok(st.data.get(0));
                }
                let dims: Vec<usize> = st.dims.iter().map(|d| d.unwrap_or(0)).collect();
                debug_assert_eq!(dims.iter().product::<usize>(), st.data.len());
                Ok(Value::array(dims, st.data))
            }
            Shape::Tuple(_) => d.deserialize_any(TupleVisitor { shape: self.shape, msg: self.msg }),
        }
    }
}

struct TupleVisitor<'a> {
    shape: &'a Shape,
    msg: &'a RefCell<Option<String>>,
}

impl TupleVisitor<'_> {
    fn want(&self) -> String {
        let Shape::Tuple(comps) = self.shape else { unreachable!("a tuple shape") };
        format!("expected a tuple of {} as a JSON array of {} element{}", shape_desc(self.shape), comps.len(), plural(comps.len()))
    }
    fn not_array<E: de::Error>(&self, got: &Json) -> E {
        fail(self.msg, format!("{}, got {}", self.want(), describe_json(got)))
    }
}

impl<'de> Visitor<'de> for TupleVisitor<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let Shape::Tuple(comps) = self.shape else { unreachable!("a tuple shape") };
        let mut vals = Vec::with_capacity(comps.len());
        for (k, comp) in comps.iter().enumerate() {
            let inner = RefCell::new(None);
            match seq.next_element_seed(ValueSeed { shape: comp, msg: &inner }) {
                Ok(Some(v)) => vals.push(v),
                Ok(None) => {
                    return Err(fail(self.msg, format!("{}, got an array of {k} element{}", self.want(), plural(k))));
                }
                Err(e) => {
                    if let Some(m) = inner.into_inner() {
                        *self.msg.borrow_mut() = Some(format!("tuple component {k}: {m}"));
                    }
                    return Err(e);
                }
            }
        }
        let mut n = comps.len();
        while seq.next_element::<IgnoredAny>()?.is_some() {
            n += 1;
        }
        if n != comps.len() {
            return Err(fail(self.msg, format!("{}, got an array of {n} element{}", self.want(), plural(n))));
        }
        Ok(Value::Tuple(vals))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        let j = Json::deserialize(MapAccessDeserializer::new(map))?;
        Err(self.not_array(&j))
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
        Err(self.not_array(&Json::Bool(b)))
    }
    fn visit_i64<E: de::Error>(self, x: i64) -> Result<Value, E> {
        Err(self.not_array(&Json::from(x)))
    }
    fn visit_u64<E: de::Error>(self, x: u64) -> Result<Value, E> {
        Err(self.not_array(&Json::from(x)))
    }
    fn visit_f64<E: de::Error>(self, x: f64) -> Result<Value, E> {
        Err(self.not_array(&Json::from(x)))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
        Err(self.not_array(&Json::from(s)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Err(self.not_array(&Json::Null))
    }
}

/// The state of one leaf (scalar or array) being read.
struct Leaf<'a> {
    ty: &'a Type,
    /// Axis lengths, each known once the first row at that depth is complete.
    dims: Vec<Option<usize>>,
    data: ArrayData,
    /// Indices of the row being read.
    path: Vec<usize>,
    msg: &'a RefCell<Option<String>>,
}

impl Leaf<'_> {
    /// On the first row at every depth so far (`[0][0]…`).
    fn on_first_chain(&self) -> bool {
        self.path.iter().all(|&i| i == 0)
    }

    /// An empty array at depth `d`: deeper axes take their constant size
    /// from the type, else 0 (as `value_from_json` does).
    fn set_empty(&mut self, d: usize) {
        self.dims[d] = Some(0);
        for k in d + 1..self.dims.len() {
            if self.dims[k].is_none() {
                self.dims[k] = Some(self.ty.shape[k].as_const().filter(|&c| c >= 0).map_or(0, |c| c as usize));
            }
        }
    }

    /// A scalar (or anything else) where the rank says an element goes.
    fn element<E: de::Error>(&mut self, j: &Json) -> Result<(), E> {
        let rank = self.ty.rank();
        if rank > 0 && j.is_array() && self.on_first_chain() {
            return Err(fail(self.msg, format!("expected {}, got a {}-d array", type_desc(self.ty), rank + json_depth(j))));
        }
        if self.data.len() == self.data_capacity() {
            let extra = self.data.len().max(16);
            if let Err(e) = try_reserve(&mut self.data, extra) {
                return Err(fail(self.msg, format!("not enough memory for {} elements: {e}", self.data.len() + extra)));
            }
        }
        push_scalar(j, self.ty.elem, &mut self.data).map_err(|e| {
            let text = if rank == 0 { e } else { format!("{e} (at {})", path_str(&self.path)) };
            fail(self.msg, text)
        })
    }

    fn data_capacity(&self) -> usize {
        match &self.data {
            ArrayData::F64(v) => v.capacity(),
            ArrayData::F32(v) => v.capacity(),
            ArrayData::I64(v) => v.capacity(),
            ArrayData::I32(v) => v.capacity(),
            ArrayData::Bool(v) => v.capacity(),
        }
    }

    /// Something other than an array at depth `d` < rank.
    fn not_row<E: de::Error>(&mut self, d: usize, j: &Json) -> E {
        let text = if d == 0 {
            format!("expected {}, got {}", type_desc(self.ty), describe_json(j))
        } else if let Some(n) = self.dims[d] {
            format!("ragged array: {} is {}, expected an array of length {n}", row_name(&self.path), describe_json(j))
        } else {
            format!("expected {}, got a {d}-d array", type_desc(self.ty))
        };
        fail(self.msg, text)
    }
}

fn try_reserve(data: &mut ArrayData, n: usize) -> Result<(), std::collections::TryReserveError> {
    match data {
        ArrayData::F64(v) => v.try_reserve(n),
        ArrayData::F32(v) => v.try_reserve(n),
        ArrayData::I64(v) => v.try_reserve(n),
        ArrayData::I32(v) => v.try_reserve(n),
        ArrayData::Bool(v) => v.try_reserve(n),
    }
}

/// Read the value at depth `d` of a leaf: a row if `d` < rank, else an element.
struct Level<'s, 'a> {
    st: &'s mut Leaf<'a>,
    d: usize,
}

impl<'de> DeserializeSeed<'de> for Level<'_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Level<'_, '_> {
    fn other<E: de::Error>(self, j: Json) -> Result<(), E> {
        if self.d == self.st.ty.rank() { self.st.element(&j) } else { Err(self.st.not_row(self.d, &j)) }
    }
}

impl<'de> Visitor<'de> for Level<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let d = self.d;
        let st = self.st;
        if d == st.ty.rank() {
            let j = Json::deserialize(SeqAccessDeserializer::new(seq))?;
            return st.element(&j);
        }
        let expected = st.dims[d];
        let mut i = 0;
        loop {
            if expected == Some(i) {
                let mut n = i;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                if n != i {
                    return Err(fail(st.msg, format!("ragged array: {} has length {n}, expected {i}", row_name(&st.path))));
                }
                break;
            }
            st.path.push(i);
            let got = seq.next_element_seed(Level { st: &mut *st, d: d + 1 })?;
            st.path.pop();
            if got.is_none() {
                break;
            }
            i += 1;
        }
        match expected {
            Some(n) if n != i => Err(fail(st.msg, format!("ragged array: {} has length {i}, expected {n}", row_name(&st.path)))),
            Some(_) => Ok(()),
            None if i == 0 => {
                st.set_empty(d);
                Ok(())
            }
            None => {
                st.dims[d] = Some(i);
                Ok(())
            }
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let j = Json::deserialize(MapAccessDeserializer::new(map))?;
        self.other(j)
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> Result<(), E> {
        self.other(Json::Bool(b))
    }
    fn visit_i64<E: de::Error>(self, x: i64) -> Result<(), E> {
        self.other(Json::from(x))
    }
    fn visit_u64<E: de::Error>(self, x: u64) -> Result<(), E> {
        self.other(Json::from(x))
    }
    fn visit_f64<E: de::Error>(self, x: f64) -> Result<(), E> {
        // serde_json never produces a non-finite number here.
        self.other(serde_json::Number::from_f64(x).map_or(Json::Null, Json::Number))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.other(Json::from(s))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.other(Json::Null)
    }
}
