//! Typed helpers over `ArrayData`: copying rows, building arrays, the
//! built-in reductions and scans. Everything here works on flat row-major
//! buffers; callers pass row lengths and check shapes.

use crate::backend::limits::{Oom, try_clone, try_vec};
use crate::ir::{ReduceOp, Scalar};
use crate::runtime::{ArrayData, Value};

/// An empty buffer of element type `elem` with room for exactly `cap`
/// elements, or an [`Oom`] (checked against the memory limit).
pub(super) fn with_capacity(elem: Scalar, cap: usize) -> Result<ArrayData, Oom> {
    let name = elem.name();
    Ok(match elem {
        Scalar::F64 => ArrayData::F64(try_vec(cap, name)?.into()),
        Scalar::F32 => ArrayData::F32(try_vec(cap, name)?.into()),
        Scalar::I64 => ArrayData::I64(try_vec(cap, name)?.into()),
        Scalar::I32 => ArrayData::I32(try_vec(cap, name)?.into()),
        Scalar::Bool => ArrayData::Bool(try_vec(cap, name)?.into()),
    })
}

/// A copy of a whole buffer, or an [`Oom`].
pub(super) fn copy(d: &ArrayData) -> Result<ArrayData, Oom> {
    range(d, 0, d.len())
}

/// Overwrite elements `off..off+len(x)` of `out` with the value `x` (a
/// scalar or all elements of an array); false when the types differ or it
/// does not fit.
pub(super) fn write_value(out: &mut ArrayData, off: usize, x: &Value) -> bool {
    fn put<T: Copy>(o: &mut [T], off: usize, src: &[T]) -> bool {
        match o.get_mut(off..off + src.len()) {
            Some(dst) => {
                dst.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
    match (out, x) {
        (ArrayData::F64(o), Value::F64(a)) => put(o, off, &[*a]),
        (ArrayData::F32(o), Value::F32(a)) => put(o, off, &[*a]),
        (ArrayData::I64(o), Value::I64(a)) => put(o, off, &[*a]),
        (ArrayData::I32(o), Value::I32(a)) => put(o, off, &[*a]),
        (ArrayData::Bool(o), Value::Bool(a)) => put(o, off, &[*a]),
        (o, Value::Array(a)) => match (o, &a.data) {
            (ArrayData::F64(o), ArrayData::F64(s)) => put(o, off, s),
            (ArrayData::F32(o), ArrayData::F32(s)) => put(o, off, s),
            (ArrayData::I64(o), ArrayData::I64(s)) => put(o, off, s),
            (ArrayData::I32(o), ArrayData::I32(s)) => put(o, off, s),
            (ArrayData::Bool(o), ArrayData::Bool(s)) => put(o, off, s),
            _ => false,
        },
        _ => false,
    }
}

/// Apply an expression generic in the element type to every variant,
/// producing a buffer of the same variant.
macro_rules! map_data {
    ($d:expr, $v:ident => $e:expr) => {
        match $d {
            ArrayData::F64($v) => ArrayData::F64($e),
            ArrayData::F32($v) => ArrayData::F32($e),
            ArrayData::I64($v) => ArrayData::I64($e),
            ArrayData::I32($v) => ArrayData::I32($e),
            ArrayData::Bool($v) => ArrayData::Bool($e),
        }
    };
}
pub(super) use map_data;

/// Shape as arden writes it: `[3][4]` (`[]` for a scalar).
pub(super) fn shape_str<T: std::fmt::Display>(shape: &[T]) -> String {
    if shape.is_empty() {
        return "[]".into();
    }
    shape.iter().map(|d| format!("[{d}]")).collect()
}

/// Elements `lo..hi` as a new buffer.
pub(super) fn range(d: &ArrayData, lo: usize, hi: usize) -> Result<ArrayData, Oom> {
    let name = d.scalar().name();
    Ok(map_data!(d, v => try_clone(&v[lo..hi], name)?.into()))
}

/// Append a scalar; false when its type differs from the buffer's.
pub(super) fn push_scalar(out: &mut ArrayData, x: &Value) -> bool {
    match (out, x) {
        (ArrayData::F64(o), Value::F64(a)) => o.push(*a),
        (ArrayData::F32(o), Value::F32(a)) => o.push(*a),
        (ArrayData::I64(o), Value::I64(a)) => o.push(*a),
        (ArrayData::I32(o), Value::I32(a)) => o.push(*a),
        (ArrayData::Bool(o), Value::Bool(a)) => o.push(*a),
        _ => return false,
    }
    true
}

/// Append elements `lo..hi` of `src`; false when the types differ.
pub(super) fn extend(out: &mut ArrayData, src: &ArrayData, lo: usize, hi: usize) -> bool {
    match (out, src) {
        (ArrayData::F64(o), ArrayData::F64(s)) => o.extend_from_slice(&s[lo..hi]),
        (ArrayData::F32(o), ArrayData::F32(s)) => o.extend_from_slice(&s[lo..hi]),
        (ArrayData::I64(o), ArrayData::I64(s)) => o.extend_from_slice(&s[lo..hi]),
        (ArrayData::I32(o), ArrayData::I32(s)) => o.extend_from_slice(&s[lo..hi]),
        (ArrayData::Bool(o), ArrayData::Bool(s)) => o.extend_from_slice(&s[lo..hi]),
        _ => return false,
    }
    true
}

/// Append a value (scalar, or all elements of an array).
pub(super) fn push_value(out: &mut ArrayData, x: &Value) -> bool {
    match x {
        Value::Array(a) => extend(out, &a.data, 0, a.data.len()),
        _ => push_scalar(out, x),
    }
}

/// `n` copies of a scalar (None for a non-scalar).
pub(super) fn fill(x: &Value, n: usize) -> Result<Option<ArrayData>, Oom> {
    fn rep<T: Copy>(a: T, n: usize, name: &'static str) -> Result<Vec<T>, Oom> {
        let mut v = try_vec(n, name)?;
        v.resize(n, a);
        Ok(v)
    }
    let name = match x.elem() {
        Some(e) => e.name(),
        None => return Ok(None),
    };
    Ok(Some(match *x {
        Value::F64(a) => ArrayData::F64(rep(a, n, name)?.into()),
        Value::F32(a) => ArrayData::F32(rep(a, n, name)?.into()),
        Value::I64(a) => ArrayData::I64(rep(a, n, name)?.into()),
        Value::I32(a) => ArrayData::I32(rep(a, n, name)?.into()),
        Value::Bool(a) => ArrayData::Bool(rep(a, n, name)?.into()),
        _ => return Ok(None),
    }))
}

/// Zero of a numeric element type (None for `bool`).
pub(super) fn zero(elem: Scalar) -> Option<Value> {
    Some(match elem {
        Scalar::F64 => Value::F64(0.0),
        Scalar::F32 => Value::F32(0.0),
        Scalar::I64 => Value::I64(0),
        Scalar::I32 => Value::I32(0),
        Scalar::Bool => return None,
    })
}

/// `n` copies of a whole buffer, one after the other.
pub(super) fn repeat<T: Copy>(v: &[T], n: usize, name: &'static str) -> Result<Vec<T>, Oom> {
    let mut out = try_vec(v.len().saturating_mul(n), name)?;
    for _ in 0..n {
        out.extend_from_slice(v);
    }
    Ok(out)
}

/// Swap the first two axes of a `[d0][d1]` array of rows of `r` elements.
pub(super) fn transpose<T: Copy>(v: &[T], d0: usize, d1: usize, r: usize, name: &'static str) -> Result<Vec<T>, Oom> {
    let mut out = try_vec(v.len(), name)?;
    for j in 0..d1 {
        for i in 0..d0 {
            let o = (i * d1 + j) * r;
            out.extend_from_slice(&v[o..o + r]);
        }
    }
    Ok(out)
}

/// Rows (of `r` elements) in reverse order.
pub(super) fn reverse<T: Copy>(v: &[T], n: usize, r: usize, name: &'static str) -> Result<Vec<T>, Oom> {
    let mut out = try_vec(v.len(), name)?;
    for i in (0..n).rev() {
        out.extend_from_slice(&v[i * r..(i + 1) * r]);
    }
    Ok(out)
}

/// Rows rotated left by `k` (`0 <= k <= n`).
pub(super) fn rotate<T: Copy>(v: &[T], k: usize, r: usize, name: &'static str) -> Result<Vec<T>, Oom> {
    let mut out = try_vec(v.len(), name)?;
    out.extend_from_slice(&v[k * r..]);
    out.extend_from_slice(&v[..k * r]);
    Ok(out)
}

/// Concatenate two buffers of one type.
pub(super) fn concat(a: &ArrayData, b: &ArrayData) -> Result<Option<ArrayData>, Oom> {
    let mut out = with_capacity(a.scalar(), a.len().saturating_add(b.len()))?;
    Ok((extend(&mut out, a, 0, a.len()) && extend(&mut out, b, 0, b.len())).then_some(out))
}

/// Index of the first maximum (minimum) of `v`; a NaN counts as the
/// extreme, so the first NaN wins (as with the NaN-propagating `max`/`min`).
pub(super) fn argext<T: PartialOrd + Copy>(v: &[T], max: bool) -> usize {
    #[allow(clippy::eq_op)]
    let nan = |x: T| x != x;
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if nan(x) {
            return i;
        }
        if i > 0 && (if max { x > v[best] } else { x < v[best] }) {
            best = i;
        }
    }
    best
}

/// Element types the built-in reductions work on.
pub(super) trait Num: Copy + PartialOrd {
    /// the identities of `add` (-0.0 for floats: `-0.0 + x` is `x` for
    /// every `x`, +0.0 included) and `mul`
    const ADD_ID: Self;
    const ONE: Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! num_float {
    ($t:ty) => {
        impl Num for $t {
            const ADD_ID: Self = -0.0;
            const ONE: Self = 1.0;
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
macro_rules! num_int {
    ($t:ty) => {
        impl Num for $t {
            const ADD_ID: Self = 0;
            const ONE: Self = 1;
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn is_nan(self) -> bool {
                false
            }
        }
    };
}
num_float!(f64);
num_float!(f32);
num_int!(i64);
num_int!(i32);

fn op_add<T: Num>(a: T, b: T) -> T {
    a.add(b)
}
fn op_mul<T: Num>(a: T, b: T) -> T {
    a.mul(b)
}
fn op_max<T: Num>(a: T, b: T) -> T {
    if a.is_nan() {
        a
    } else if b.is_nan() || b > a {
        b
    } else {
        a
    }
}
fn op_min<T: Num>(a: T, b: T) -> T {
    if a.is_nan() {
        a
    } else if b.is_nan() || b < a {
        b
    } else {
        a
    }
}

fn op_fn<T: Num>(op: &ReduceOp) -> Option<fn(T, T) -> T> {
    Some(match op {
        ReduceOp::Add => op_add::<T>,
        ReduceOp::Mul => op_mul::<T>,
        ReduceOp::Max => op_max::<T>,
        ReduceOp::Min => op_min::<T>,
        ReduceOp::Lambda(_) => return None,
    })
}

/// Fold the rows (of `m` elements) of `v` elementwise, from `ne`; with
/// `scan`, every intermediate accumulator is kept (inclusive scan).
fn fold_rows<T: Num>(v: &[T], m: usize, ne: T, f: fn(T, T) -> T, scan: bool, name: &'static str) -> Result<Vec<T>, Oom> {
    let mut acc = try_vec(m, name)?;
    acc.resize(m, ne);
    if m == 0 {
        return Ok(acc);
    }
    let mut out = if scan { try_vec(v.len(), name)? } else { Vec::new() };
    for row in v.chunks_exact(m) {
        for (a, &x) in acc.iter_mut().zip(row) {
            *a = f(*a, x);
        }
        if scan {
            out.extend_from_slice(&acc);
        }
    }
    Ok(if scan { out } else { acc })
}

/// A built-in reduction (`scan == false`: `m` elements) or scan (same
/// length as `d`) over rows of `m` elements, starting from the scalar `ne`.
/// Sums and products reduce in the fixed order of [`super::order`]; scans,
/// `max` and `min` left to right. Ok(None) when the types do not fit.
pub(super) fn builtin_fold(op: &ReduceOp, d: &ArrayData, m: usize, ne: &Value, scan: bool) -> Result<Option<ArrayData>, Oom> {
    let name = d.scalar().name();
    macro_rules! go {
        ($v:expr, $z:expr, $c:path) => {
            match (op_fn(op), op) {
                (Some(f), ReduceOp::Add) if !scan => $c(super::order::fold($v, m, *$z, Num::ADD_ID, f, name)?.into()),
                (Some(f), ReduceOp::Mul) if !scan => $c(super::order::fold($v, m, *$z, Num::ONE, f, name)?.into()),
                (Some(f), _) => $c(fold_rows($v, m, *$z, f, scan, name)?.into()),
                (None, _) => return Ok(None),
            }
        };
    }
    Ok(Some(match (d, ne) {
        (ArrayData::F64(v), Value::F64(z)) => go!(v, z, ArrayData::F64),
        (ArrayData::F32(v), Value::F32(z)) => go!(v, z, ArrayData::F32),
        (ArrayData::I64(v), Value::I64(z)) => go!(v, z, ArrayData::I64),
        (ArrayData::I32(v), Value::I32(z)) => go!(v, z, ArrayData::I32),
        _ => return Ok(None),
    }))
}

/// Add row `j` of `vals` into row `idxs[j]` of `dest` (rows of `m`
/// elements, `n` rows in `dest`). Err(bad index) when one is out of range.
fn scatter<T: Num>(dest: &mut [T], idxs: &[i64], vals: &[T], m: usize, n: usize) -> Result<(), i64> {
    for (j, &i) in idxs.iter().enumerate() {
        if i < 0 || i as u64 >= n as u64 {
            return Err(i);
        }
        let i = i as usize;
        for (d, &x) in dest[i * m..(i + 1) * m].iter_mut().zip(&vals[j * m..(j + 1) * m]) {
            *d = d.add(x);
        }
    }
    Ok(())
}

/// `scatter_add` into a buffer in place. Ok(false) when the types do not
/// fit, Err(i) for an index out of range (the buffer is then partly
/// updated: the caller discards it).
pub(super) fn scatter_add_into(dest: &mut ArrayData, idxs: &[i64], vals: &ArrayData, m: usize, n: usize) -> Result<bool, i64> {
    match (dest, vals) {
        (ArrayData::F64(d), ArrayData::F64(v)) => scatter(d, idxs, v, m, n)?,
        (ArrayData::F32(d), ArrayData::F32(v)) => scatter(d, idxs, v, m, n)?,
        (ArrayData::I64(d), ArrayData::I64(v)) => scatter(d, idxs, v, m, n)?,
        (ArrayData::I32(d), ArrayData::I32(v)) => scatter(d, idxs, v, m, n)?,
        _ => return Ok(false),
    }
    Ok(true)
}
