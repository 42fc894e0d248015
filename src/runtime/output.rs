//! Results handed to a front end without a copy ([`Output`]): array
//! buffers owned by a Rust `Vec` (the interpreter's) or by compiled code
//! ([`ForeignBuf`], the C backend's), which a front end wraps in place (the
//! Python package gives NumPy an array over them).

use super::{ArrayData, ArrayRef, Value};
use crate::ir::Scalar;
use std::ffi::c_void;

/// An array buffer allocated outside Rust (by the C backend's runtime) and
/// owned exclusively by this value: no other result, argument or context
/// refers to it. Dropping it calls the runtime's deallocator once.
pub struct ForeignBuf {
    data: *mut u8,
    len: usize,
    elem: Scalar,
    /// the runtime's handle for the allocation (`data` lies inside it)
    handle: *mut c_void,
    release: unsafe extern "C" fn(*mut c_void),
}

// SAFETY: exclusive ownership of plain memory; the deallocator may run on
// any thread (it is `free` behind an atomic reference count).
unsafe impl Send for ForeignBuf {}
// SAFETY: `&ForeignBuf` only reads.
unsafe impl Sync for ForeignBuf {}

impl ForeignBuf {
    /// Take ownership of `len` elements of type `elem` at `data`.
    ///
    /// # Safety
    /// `data` is non-null, aligned for `elem` and points to `len`
    /// initialised elements (bools as bytes 0 or 1) that stay valid and
    /// that nothing else reads or writes until `release(handle)`, which
    /// this value calls exactly once, on drop; `release` stays callable
    /// (its library loaded) until then.
    pub unsafe fn new(data: *mut u8, len: usize, elem: Scalar, handle: *mut c_void, release: unsafe extern "C" fn(*mut c_void)) -> ForeignBuf {
        ForeignBuf { data, len, elem, handle, release }
    }

    /// The first element's address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.data
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn elem(&self) -> Scalar {
        self.elem
    }

    /// The elements, borrowed.
    pub fn view(&self) -> ArrayRef<'_> {
        // SAFETY: `len` valid, aligned elements of `elem` (see `new`).
        unsafe {
            match self.elem {
                Scalar::F64 => ArrayRef::F64(std::slice::from_raw_parts(self.data as *const f64, self.len)),
                Scalar::F32 => ArrayRef::F32(std::slice::from_raw_parts(self.data as *const f32, self.len)),
                Scalar::I64 => ArrayRef::I64(std::slice::from_raw_parts(self.data as *const i64, self.len)),
                Scalar::I32 => ArrayRef::I32(std::slice::from_raw_parts(self.data as *const i32, self.len)),
                Scalar::Bool => ArrayRef::Bool(std::slice::from_raw_parts(self.data as *const u8, self.len)),
            }
        }
    }
}

impl Drop for ForeignBuf {
    fn drop(&mut self) {
        // SAFETY: the handle is ours (see `new`) and released only here.
        unsafe { (self.release)(self.handle) }
    }
}

impl std::fmt::Debug for ForeignBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ForeignBuf({} {} at {:p})", self.len, self.elem.name(), self.data)
    }
}

/// The elements of an output array.
#[derive(Debug)]
pub enum OutArray {
    Owned(ArrayData),
    Foreign(ForeignBuf),
}

impl OutArray {
    /// The first element's address.
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            OutArray::Owned(d) => d.as_ptr(),
            OutArray::Foreign(f) => f.as_ptr(),
        }
    }
}

/// A result as a front end receives it: scalars, arrays that own their
/// buffer, tuples. `Send` (unlike [`Value`], whose arrays are `Rc`s).
#[derive(Debug)]
pub enum Output {
    F64(f64),
    F32(f32),
    I64(i64),
    I32(i32),
    Bool(bool),
    Array { shape: Vec<usize>, data: OutArray },
    Tuple(Vec<Output>),
}

impl Output {
    /// Arrays keep their buffer when nothing else holds it (a copy only
    /// when the array is shared, e.g. with another result).
    pub fn from_value(v: Value) -> Output {
        match v {
            Value::F64(x) => Output::F64(x),
            Value::F32(x) => Output::F32(x),
            Value::I64(x) => Output::I64(x),
            Value::I32(x) => Output::I32(x),
            Value::Bool(x) => Output::Bool(x),
            Value::Array(a) => {
                let (shape, data) = match std::rc::Rc::try_unwrap(a) {
                    Ok(a) => (a.shape, a.data),
                    Err(a) => (a.shape.clone(), a.data.clone()),
                };
                Output::Array { shape, data: OutArray::Owned(data) }
            }
            Value::Tuple(vs) => Output::Tuple(vs.into_iter().map(Output::from_value).collect()),
        }
    }

    /// As a [`Value`]: foreign buffers are copied.
    pub fn into_value(self) -> Value {
        match self {
            Output::F64(x) => Value::F64(x),
            Output::F32(x) => Value::F32(x),
            Output::I64(x) => Value::I64(x),
            Output::I32(x) => Value::I32(x),
            Output::Bool(x) => Value::Bool(x),
            Output::Array { shape, data: OutArray::Owned(d) } => Value::array(shape, d),
            Output::Array { shape, data: OutArray::Foreign(f) } => Value::array(shape, f.view().to_owned()),
            Output::Tuple(xs) => Value::Tuple(xs.into_iter().map(Output::into_value).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static RELEASED: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn release_box(h: *mut c_void) {
        RELEASED.fetch_add(1, Ordering::SeqCst);
        // SAFETY: made by Box::into_raw below, released once.
        drop(unsafe { Box::from_raw(h as *mut Vec<f64>) });
    }

    #[test]
    fn a_foreign_buffer_is_released_exactly_once() {
        let before = RELEASED.load(Ordering::SeqCst);
        let v = Box::new(vec![1.0f64, 2.0, 3.0]);
        let data = v.as_ptr() as *mut u8;
        let h = Box::into_raw(v) as *mut c_void;
        // SAFETY: the box owns 3 f64 at `data` until release_box(h).
        let f = unsafe { ForeignBuf::new(data, 3, Scalar::F64, h, release_box) };
        let out = Output::Array { shape: vec![3], data: OutArray::Foreign(f) };
        let moved = Output::Tuple(vec![out]);
        assert_eq!(RELEASED.load(Ordering::SeqCst), before, "moving is not releasing");
        let value = moved.into_value();
        assert_eq!(RELEASED.load(Ordering::SeqCst), before + 1);
        assert_eq!(value.to_json(), "[[1.0, 2.0, 3.0]]");
    }

    #[test]
    fn owned_arrays_are_moved_not_copied() {
        let v = Value::array(vec![2], ArrayData::F64(vec![1.0, 2.0].into()));
        let p = match &v {
            Value::Array(a) => a.data.as_ptr(),
            _ => unreachable!(),
        };
        match Output::from_value(v) {
            Output::Array { data, .. } => assert_eq!(data.as_ptr(), p),
            o => panic!("{o:?}"),
        }
    }
}
