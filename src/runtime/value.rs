//! Run-time values. Arrays are regular, row-major and reference counted so
//! that passing them around is cheap.

use super::buf::Buf;
use crate::ir::Scalar;
use std::rc::Rc;

/// Row-major elements. Owned, except that the interpreter's entry
/// arguments may be views of a front end's memory ([`Buf`]'s contract).
#[derive(Clone, PartialEq, Debug)]
pub enum ArrayData {
    F64(Buf<f64>),
    F32(Buf<f32>),
    I64(Buf<i64>),
    I32(Buf<i32>),
    Bool(Buf<bool>),
}

impl ArrayData {
    /// The elements borrowed, as an entry point's argument reads them.
    pub fn as_array_ref(&self) -> ArrayRef<'_> {
        match self {
            ArrayData::F64(v) => ArrayRef::F64(v),
            ArrayData::F32(v) => ArrayRef::F32(v),
            ArrayData::I64(v) => ArrayRef::I64(v),
            ArrayData::I32(v) => ArrayRef::I32(v),
            // SAFETY: `bool` is one byte, 0 or 1.
            ArrayData::Bool(v) => ArrayRef::Bool(unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len()) }),
        }
    }

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
    /// The first element's address.
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            ArrayData::F64(v) => v.as_ptr() as *const u8,
            ArrayData::F32(v) => v.as_ptr() as *const u8,
            ArrayData::I64(v) => v.as_ptr() as *const u8,
            ArrayData::I32(v) => v.as_ptr() as *const u8,
            ArrayData::Bool(v) => v.as_ptr() as *const u8,
        }
    }
    /// Whether the elements are a view of memory the array does not own.
    pub fn is_borrowed(&self) -> bool {
        match self {
            ArrayData::F64(v) => v.is_borrowed(),
            ArrayData::F32(v) => v.is_borrowed(),
            ArrayData::I64(v) => v.is_borrowed(),
            ArrayData::I32(v) => v.is_borrowed(),
            ArrayData::Bool(v) => v.is_borrowed(),
        }
    }
    /// An empty buffer of the given element type with room for `cap` elements.
    pub fn with_capacity(elem: Scalar, cap: usize) -> ArrayData {
        match elem {
            Scalar::F64 => ArrayData::F64(Vec::with_capacity(cap).into()),
            Scalar::F32 => ArrayData::F32(Vec::with_capacity(cap).into()),
            Scalar::I64 => ArrayData::I64(Vec::with_capacity(cap).into()),
            Scalar::I32 => ArrayData::I32(Vec::with_capacity(cap).into()),
            Scalar::Bool => ArrayData::Bool(Vec::with_capacity(cap).into()),
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

    /// The same argument borrowed (no copy of array data).
    pub fn as_arg(&self) -> ArgRef<'_> {
        match self {
            Value::F64(x) => ArgRef::F64(*x),
            Value::F32(x) => ArgRef::F32(*x),
            Value::I64(x) => ArgRef::I64(*x),
            Value::I32(x) => ArgRef::I32(*x),
            Value::Bool(x) => ArgRef::Bool(*x),
            Value::Array(a) => ArgRef::Array { shape: a.shape.clone(), data: a.data.as_array_ref() },
            Value::Tuple(xs) => ArgRef::Tuple(xs.iter().map(Value::as_arg).collect()),
        }
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
        let mut out = Vec::new();
        self.write_json(&mut out).expect("writing to memory cannot fail");
        String::from_utf8(out).expect("the JSON writer writes ASCII")
    }

    /// [`Value::to_json`], streamed to `out` (give it a buffered writer):
    /// the text of a large result, such as 3·10^9 empty rows (12 GB of
    /// `[], `), is never held in memory.
    pub fn write_json(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        write_json(self, out)
    }
}

fn write_float(x: f64, out: &mut impl std::io::Write) -> std::io::Result<()> {
    if x.is_nan() {
        out.write_all(b"NaN")
    } else if x.is_infinite() {
        out.write_all(if x > 0.0 { b"Infinity" } else { b"-Infinity" })
    } else {
        // Debug prints the shortest representation that round-trips, with a `.0` on integers.
        write!(out, "{x:?}")
    }
}

fn write_scalar(v: &Value, out: &mut impl std::io::Write) -> std::io::Result<()> {
    match v {
        Value::F64(x) => write_float(*x, out),
        // Print f32 through its shortest f32 form so 0.1f32 prints as 0.1.
        Value::F32(x) if x.is_finite() => write!(out, "{x:?}"),
        Value::F32(x) => write_float(*x as f64, out),
        Value::I64(x) => write!(out, "{x}"),
        Value::I32(x) => write!(out, "{x}"),
        Value::Bool(b) => out.write_all(if *b { b"true" } else { b"false" }),
        _ => unreachable!("write_scalar on a non-scalar"),
    }
}

fn write_array(shape: &[usize], data: &ArrayData, offset: usize, out: &mut impl std::io::Write) -> std::io::Result<()> {
    out.write_all(b"[")?;
    let stride: usize = shape[1..].iter().product();
    for i in 0..shape[0] {
        if i > 0 {
            out.write_all(b", ")?;
        }
        if shape.len() == 1 {
            write_scalar(&data.get(offset + i), out)?;
        } else {
            write_array(&shape[1..], data, offset + i * stride, out)?;
        }
    }
    out.write_all(b"]")
}

fn write_json(v: &Value, out: &mut impl std::io::Write) -> std::io::Result<()> {
    match v {
        Value::Array(a) if a.shape.is_empty() => write_scalar(&a.data.get(0), out),
        Value::Array(a) => write_array(&a.shape, &a.data, 0, out),
        Value::Tuple(vs) => {
            out.write_all(b"[")?;
            for (i, x) in vs.iter().enumerate() {
                if i > 0 {
                    out.write_all(b", ")?;
                }
                write_json(x, out)?;
            }
            out.write_all(b"]")
        }
        s => write_scalar(s, out),
    }
}

/// An entry-point argument whose array data is borrowed rather than owned:
/// front ends that hold their own arrays (the Python package's NumPy
/// arrays) pass them to either backend without a copy (the interpreter
/// copies bool arrays: [`ArrayRef::to_borrowed`]). `Send + Sync`, so a
/// call can run without holding the front end's lock.
#[derive(Clone, Debug)]
pub enum ArgRef<'a> {
    F64(f64),
    F32(f32),
    I64(i64),
    I32(i32),
    Bool(bool),
    /// A row-major array of `shape` (rank at least 1 for array parameters; a
    /// rank-0 array stands for a scalar).
    Array {
        shape: Vec<usize>,
        data: ArrayRef<'a>,
    },
    Tuple(Vec<ArgRef<'a>>),
}

/// Borrowed row-major elements; `Bool` is one byte per element, non-zero
/// meaning true (NumPy's and C's layout).
#[derive(Clone, Copy, Debug)]
pub enum ArrayRef<'a> {
    F64(&'a [f64]),
    F32(&'a [f32]),
    I64(&'a [i64]),
    I32(&'a [i32]),
    Bool(&'a [u8]),
}

impl ArrayRef<'_> {
    pub fn len(&self) -> usize {
        match self {
            ArrayRef::F64(v) => v.len(),
            ArrayRef::F32(v) => v.len(),
            ArrayRef::I64(v) => v.len(),
            ArrayRef::I32(v) => v.len(),
            ArrayRef::Bool(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn scalar(&self) -> Scalar {
        match self {
            ArrayRef::F64(_) => Scalar::F64,
            ArrayRef::F32(_) => Scalar::F32,
            ArrayRef::I64(_) => Scalar::I64,
            ArrayRef::I32(_) => Scalar::I32,
            ArrayRef::Bool(_) => Scalar::Bool,
        }
    }
    /// The first element's address.
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            ArrayRef::F64(v) => v.as_ptr() as *const u8,
            ArrayRef::F32(v) => v.as_ptr() as *const u8,
            ArrayRef::I64(v) => v.as_ptr() as *const u8,
            ArrayRef::I32(v) => v.as_ptr() as *const u8,
            ArrayRef::Bool(v) => v.as_ptr(),
        }
    }
    /// An owned copy.
    pub fn to_owned(&self) -> ArrayData {
        match self {
            ArrayRef::F64(v) => ArrayData::F64(v.to_vec().into()),
            ArrayRef::F32(v) => ArrayData::F32(v.to_vec().into()),
            ArrayRef::I64(v) => ArrayData::I64(v.to_vec().into()),
            ArrayRef::I32(v) => ArrayData::I32(v.to_vec().into()),
            ArrayRef::Bool(v) => ArrayData::Bool(v.iter().map(|b| *b != 0).collect()),
        }
    }
    /// A view of the same memory, without a copy — except for bools:
    /// a `bool` must be 0 or 1, which bytes from outside need not be, so
    /// they are converted (one copy).
    ///
    /// # Safety
    /// [`Buf::borrowed`]'s: the memory outlives the result and everything
    /// it is moved into, and is not written meanwhile.
    pub unsafe fn to_borrowed(&self) -> ArrayData {
        // SAFETY: by the caller's contract.
        unsafe {
            match self {
                ArrayRef::F64(v) => ArrayData::F64(Buf::borrowed(v)),
                ArrayRef::F32(v) => ArrayData::F32(Buf::borrowed(v)),
                ArrayRef::I64(v) => ArrayData::I64(Buf::borrowed(v)),
                ArrayRef::I32(v) => ArrayData::I32(Buf::borrowed(v)),
                ArrayRef::Bool(_) => self.to_owned(),
            }
        }
    }
}

impl ArgRef<'_> {
    /// Scalar type of a scalar or array (None for tuples).
    pub fn elem(&self) -> Option<Scalar> {
        Some(match self {
            ArgRef::F64(_) => Scalar::F64,
            ArgRef::F32(_) => Scalar::F32,
            ArgRef::I64(_) => Scalar::I64,
            ArgRef::I32(_) => Scalar::I32,
            ArgRef::Bool(_) => Scalar::Bool,
            ArgRef::Array { data, .. } => data.scalar(),
            ArgRef::Tuple(_) => return None,
        })
    }
    /// Shape of a scalar (empty) or array.
    pub fn shape(&self) -> Vec<usize> {
        match self {
            ArgRef::Array { shape, .. } => shape.clone(),
            _ => vec![],
        }
    }
    /// The same argument as an owned [`Value`] (copies array data; a rank-0
    /// array becomes a scalar).
    pub fn to_value(&self) -> Value {
        match self {
            ArgRef::F64(x) => Value::F64(*x),
            ArgRef::F32(x) => Value::F32(*x),
            ArgRef::I64(x) => Value::I64(*x),
            ArgRef::I32(x) => Value::I32(*x),
            ArgRef::Bool(x) => Value::Bool(*x),
            ArgRef::Array { shape, data } if shape.is_empty() && data.len() == 1 => data.first_as_scalar(),
            ArgRef::Array { shape, data } => Value::array(shape.clone(), data.to_owned()),
            ArgRef::Tuple(xs) => Value::Tuple(xs.iter().map(ArgRef::to_value).collect()),
        }
    }
    /// [`ArgRef::to_value`] whose arrays are views of the argument's memory
    /// ([`ArrayRef::to_borrowed`]: bools are copied).
    ///
    /// # Safety
    /// [`ArrayRef::to_borrowed`]'s, for the value and all its parts.
    pub unsafe fn to_value_borrowed(&self) -> Value {
        match self {
            ArgRef::Array { shape, data } if shape.is_empty() && data.len() == 1 => data.first_as_scalar(),
            // SAFETY: by the caller's contract.
            ArgRef::Array { shape, data } => Value::array(shape.clone(), unsafe { data.to_borrowed() }),
            // SAFETY: by the caller's contract.
            ArgRef::Tuple(xs) => Value::Tuple(xs.iter().map(|x| unsafe { x.to_value_borrowed() }).collect()),
            scalar => scalar.to_value(),
        }
    }
}

impl ArrayRef<'_> {
    fn first_as_scalar(&self) -> Value {
        match self {
            ArrayRef::F64(v) => Value::F64(v[0]),
            ArrayRef::F32(v) => Value::F32(v[0]),
            ArrayRef::I64(v) => Value::I64(v[0]),
            ArrayRef::I32(v) => Value::I32(v[0]),
            ArrayRef::Bool(v) => Value::Bool(v[0] != 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_rendering() {
        let a = Value::array(vec![2, 2], ArrayData::F64(vec![1.0, 2.5, -0.0, f64::NAN].into()));
        assert_eq!(a.to_json(), "[[1.0, 2.5], [-0.0, NaN]]");
        let t = Value::Tuple(vec![Value::I64(3), Value::Bool(true), Value::F32(0.1)]);
        assert_eq!(t.to_json(), "[3, true, 0.1]");
        let e = Value::array(vec![0, 3], ArrayData::I64(vec![].into()));
        assert_eq!(e.to_json(), "[]");
    }
}
