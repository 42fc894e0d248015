//! Run-time values. Arrays are regular, row-major and reference counted so
//! that passing them around is cheap.

use crate::ir::Scalar;
use std::rc::Rc;

#[derive(Clone, PartialEq, Debug)]
pub enum ArrayData {
    F64(Vec<f64>),
    F32(Vec<f32>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    Bool(Vec<bool>),
}

impl ArrayData {
    pub fn len(&self) -> usize {
        match self {
            ArrayData::F64(v) => v.len(),
            ArrayData::F32(v) => v.len(),
            ArrayData::I64(v) => v.len(),
            ArrayData::I32(v) => v.len(),
            ArrayData::Bool(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn scalar(&self) -> Scalar {
        match self {
            ArrayData::F64(_) => Scalar::F64,
            ArrayData::F32(_) => Scalar::F32,
            ArrayData::I64(_) => Scalar::I64,
            ArrayData::I32(_) => Scalar::I32,
            ArrayData::Bool(_) => Scalar::Bool,
        }
    }
    /// An empty buffer of the given element type with room for `cap` elements.
    pub fn with_capacity(elem: Scalar, cap: usize) -> ArrayData {
        match elem {
            Scalar::F64 => ArrayData::F64(Vec::with_capacity(cap)),
            Scalar::F32 => ArrayData::F32(Vec::with_capacity(cap)),
            Scalar::I64 => ArrayData::I64(Vec::with_capacity(cap)),
            Scalar::I32 => ArrayData::I32(Vec::with_capacity(cap)),
            Scalar::Bool => ArrayData::Bool(Vec::with_capacity(cap)),
        }
    }
    /// Element `i` as a scalar value.
    pub fn get(&self, i: usize) -> Value {
        match self {
            ArrayData::F64(v) => Value::F64(v[i]),
            ArrayData::F32(v) => Value::F32(v[i]),
            ArrayData::I64(v) => Value::I64(v[i]),
            ArrayData::I32(v) => Value::I32(v[i]),
            ArrayData::Bool(v) => Value::Bool(v[i]),
        }
    }
}

#[derive(Clone, PartialEq, Debug)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: ArrayData,
}

impl Array {
    pub fn new(shape: Vec<usize>, data: ArrayData) -> Array {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Array { shape, data }
    }
    pub fn elem(&self) -> Scalar {
        self.data.scalar()
    }
}

/// A value passed to or returned from an entry point, or held by a backend.
/// Backends never hold `Tuple`: the IR has no tuples.
#[derive(Clone, PartialEq, Debug)]
pub enum Value {
    F64(f64),
    F32(f32),
    I64(i64),
    I32(i32),
    Bool(bool),
    Array(Rc<Array>),
    Tuple(Vec<Value>),
}

impl Value {
    pub fn array(shape: Vec<usize>, data: ArrayData) -> Value {
        Value::Array(Rc::new(Array::new(shape, data)))
    }

    /// Scalar type of a scalar or array value (None for tuples).
    pub fn elem(&self) -> Option<Scalar> {
        Some(match self {
            Value::F64(_) => Scalar::F64,
            Value::F32(_) => Scalar::F32,
            Value::I64(_) => Scalar::I64,
            Value::I32(_) => Scalar::I32,
            Value::Bool(_) => Scalar::Bool,
            Value::Array(a) => a.elem(),
            Value::Tuple(_) => return None,
        })
    }

    /// Shape of a scalar (empty) or array value.
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Value::Array(a) => a.shape.clone(),
            _ => vec![],
        }
    }

    /// Render as JSON: nested lists for arrays and tuples, `NaN`,
    /// `Infinity` and `-Infinity` for non-finite floats (as Python's json does).
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        write_json(self, &mut out);
        out
    }
}

fn write_float(x: f64, out: &mut String) {
    if x.is_nan() {
        out.push_str("NaN");
    } else if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
    } else {
        // Debug prints the shortest representation that round-trips, with a `.0` on integers.
        out.push_str(&format!("{x:?}"));
    }
}

fn write_scalar(v: &Value, out: &mut String) {
    match v {
        Value::F64(x) => write_float(*x, out),
        // Print f32 through its shortest f32 form so 0.1f32 prints as 0.1.
        Value::F32(x) => {
            if x.is_finite() {
                out.push_str(&format!("{x:?}"))
            } else {
                write_float(*x as f64, out)
            }
        }
        Value::I64(x) => out.push_str(&x.to_string()),
        Value::I32(x) => out.push_str(&x.to_string()),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        _ => unreachable!("write_scalar on a non-scalar"),
    }
}

fn write_array(shape: &[usize], data: &ArrayData, offset: usize, out: &mut String) {
    out.push('[');
    let stride: usize = shape[1..].iter().product();
    for i in 0..shape[0] {
        if i > 0 {
            out.push_str(", ");
        }
        if shape.len() == 1 {
            write_scalar(&data.get(offset + i), out);
        } else {
            write_array(&shape[1..], data, offset + i * stride, out);
        }
    }
    out.push(']');
}

fn write_json(v: &Value, out: &mut String) {
    match v {
        Value::Array(a) if a.shape.is_empty() => write_scalar(&a.data.get(0), out),
        Value::Array(a) => write_array(&a.shape, &a.data, 0, out),
        Value::Tuple(vs) => {
            out.push('[');
            for (i, x) in vs.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_json(x, out);
            }
            out.push(']');
        }
        s => write_scalar(s, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_rendering() {
        let a = Value::array(vec![2, 2], ArrayData::F64(vec![1.0, 2.5, -0.0, f64::NAN]));
        assert_eq!(a.to_json(), "[[1.0, 2.5], [-0.0, NaN]]");
        let t = Value::Tuple(vec![Value::I64(3), Value::Bool(true), Value::F32(0.1)]);
        assert_eq!(t.to_json(), "[3, true, 0.1]");
        let e = Value::array(vec![0, 3], ArrayData::I64(vec![]));
        assert_eq!(e.to_json(), "[]");
    }
}
