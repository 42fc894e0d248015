//! Array element storage: an owned `Vec`, or a read-only view of memory a
//! front end owns (a NumPy array passed to the interpreter), copied on the
//! first write.
//!
//! # Safety contract of borrowed storage
//! [`Buf::borrowed`] is `unsafe`: its caller promises that the memory stays
//! alive and unwritten for as long as the `Buf`, or anything its view was
//! moved into, exists. The one caller, `interp::run_borrowed`, keeps that
//! promise by construction: the arguments outlive the call, every value of
//! the run is dropped when it returns, and the results that leave it are
//! made owned first ([`Buf::make_owned`]), so that an entry `f x = x` never
//! returns a view of its argument. Writes never reach borrowed memory:
//! every mutable access (`DerefMut`, [`Buf::make_owned`], `push`...) copies
//! the view into an owned `Vec` first, and `Clone` always makes an owned
//! copy, so views are never duplicated.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// Elements of an array: owned, or borrowed until first written.
pub struct Buf<T: Copy> {
    repr: Repr<T>,
}

enum Repr<T> {
    Owned(Vec<T>),
    /// `len` elements at `ptr`, alive and unwritten by the contract above.
    Borrowed {
        ptr: *const T,
        len: usize,
    },
}

// SAFETY: an owned Buf is a Vec; a borrowed one is a `&[T]` (shared,
// never written through), which is Send and Sync when `T: Sync`.
unsafe impl<T: Copy + Send + Sync> Send for Buf<T> {}
// SAFETY: as above.
unsafe impl<T: Copy + Sync> Sync for Buf<T> {}

impl<T: Copy> Buf<T> {
    pub fn new() -> Buf<T> {
        Buf { repr: Repr::Owned(Vec::new()) }
    }

    /// A view of `xs`, without a copy.
    ///
    /// # Safety
    /// `xs` must stay alive and unwritten for as long as the returned `Buf`
    /// (or a value it is moved into) exists; see the module's contract.
    pub unsafe fn borrowed(xs: &[T]) -> Buf<T> {
        Buf { repr: Repr::Borrowed { ptr: xs.as_ptr(), len: xs.len() } }
    }

    /// Whether this is a view of memory it does not own.
    pub fn is_borrowed(&self) -> bool {
        matches!(self.repr, Repr::Borrowed { .. })
    }

    pub fn as_slice(&self) -> &[T] {
        match &self.repr {
            Repr::Owned(v) => v,
            // SAFETY: alive and unwritten by the contract of `borrowed`
            // (from a slice: non-null and aligned even when empty).
            Repr::Borrowed { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }

    /// The owned elements: a borrowed view is copied first (infallibly;
    /// the interpreter copies with [`Buf::make_owned_with`] to check the
    /// memory limit, so this copy is a safety net).
    pub fn make_owned(&mut self) -> &mut Vec<T> {
        if self.is_borrowed() {
            self.repr = Repr::Owned(self.as_slice().to_vec());
        }
        match &mut self.repr {
            Repr::Owned(v) => v,
            Repr::Borrowed { .. } => unreachable!("made owned above"),
        }
    }

    /// [`Buf::make_owned`] with a fallible copy.
    pub fn make_owned_with<E>(&mut self, copy: impl FnOnce(&[T]) -> Result<Vec<T>, E>) -> Result<&mut Vec<T>, E> {
        if self.is_borrowed() {
            self.repr = Repr::Owned(copy(self.as_slice())?);
        }
        Ok(self.make_owned())
    }

    /// The elements as a `Vec`: the owned one itself, or a copy of a view.
    pub fn into_vec(self) -> Vec<T> {
        match self.repr {
            Repr::Owned(v) => v,
            Repr::Borrowed { .. } => self.as_slice().to_vec(),
        }
    }

    pub fn push(&mut self, x: T) {
        self.make_owned().push(x)
    }

    pub fn extend_from_slice(&mut self, xs: &[T]) {
        self.make_owned().extend_from_slice(xs)
    }

    pub fn truncate(&mut self, n: usize) {
        self.make_owned().truncate(n)
    }

    pub fn try_reserve(&mut self, n: usize) -> Result<(), std::collections::TryReserveError> {
        self.make_owned().try_reserve(n)
    }

    /// Room for elements without reallocating (a view's length).
    pub fn capacity(&self) -> usize {
        match &self.repr {
            Repr::Owned(v) => v.capacity(),
            Repr::Borrowed { len, .. } => *len,
        }
    }
}

impl<T: Copy> Default for Buf<T> {
    fn default() -> Self {
        Buf::new()
    }
}

impl<T: Copy> Deref for Buf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

/// Copy-on-write: a borrowed view is copied before it is written.
impl<T: Copy> DerefMut for Buf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.make_owned()
    }
}

/// Always an owned copy (a view is never duplicated).
impl<T: Copy> Clone for Buf<T> {
    fn clone(&self) -> Self {
        Buf::from(self.as_slice().to_vec())
    }
}

impl<T: Copy + PartialEq> PartialEq for Buf<T> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Copy + fmt::Debug> fmt::Debug for Buf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl<T: Copy> From<Vec<T>> for Buf<T> {
    fn from(v: Vec<T>) -> Self {
        Buf { repr: Repr::Owned(v) }
    }
}

impl<T: Copy> FromIterator<T> for Buf<T> {
    fn from_iter<I: IntoIterator<Item = T>>(it: I) -> Self {
        Buf::from(it.into_iter().collect::<Vec<T>>())
    }
}

impl<T: Copy> Extend<T> for Buf<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, it: I) {
        self.make_owned().extend(it)
    }
}

impl<T: Copy> IntoIterator for Buf<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

impl<'a, T: Copy> IntoIterator for &'a Buf<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_borrowed_memory_in_place() {
        let xs = vec![1.0, 2.0, 3.0];
        // SAFETY: `xs` outlives `b` and is not written while it lives.
        let b = unsafe { Buf::borrowed(&xs) };
        assert!(b.is_borrowed());
        assert_eq!(b.as_ptr(), xs.as_ptr());
        assert_eq!(&*b, &[1.0, 2.0, 3.0]);
    }

    #[test]
    fn writes_copy_and_leave_the_borrowed_memory_untouched() {
        let xs = vec![1i64, 2, 3];
        // SAFETY: as above.
        let mut b = unsafe { Buf::borrowed(&xs) };
        b[0] = 10;
        assert!(!b.is_borrowed());
        assert_ne!(b.as_ptr(), xs.as_ptr());
        assert_eq!(&*b, &[10, 2, 3]);
        assert_eq!(xs, [1, 2, 3]);
        let mut c = unsafe { Buf::borrowed(&xs) };
        c.push(4);
        assert_eq!(&*c, &[1, 2, 3, 4]);
        assert_eq!(xs, [1, 2, 3]);
    }

    #[test]
    fn clones_and_into_vec_are_owned_copies() {
        let xs = vec![1.0f32, 2.0];
        // SAFETY: as above.
        let b = unsafe { Buf::borrowed(&xs) };
        let c = b.clone();
        assert!(!c.is_borrowed() && c.as_ptr() != xs.as_ptr() && c == b);
        let v = b.into_vec();
        assert_ne!(v.as_ptr(), xs.as_ptr());
        let owned = Buf::from(vec![5i32, 6]);
        let p = owned.as_ptr();
        let v = owned.into_vec();
        assert_eq!(v.as_ptr(), p, "an owned Vec is moved, not copied");
    }

    #[test]
    fn fallible_copy_reports_its_error() {
        let xs = vec![1u8];
        // SAFETY: as above.
        let mut b = unsafe { Buf::borrowed(&xs) };
        assert!(matches!(b.make_owned_with(|_| Err::<Vec<u8>, _>("no")), Err("no")));
        assert!(b.is_borrowed());
        assert!(b.make_owned_with(|s| Ok::<_, ()>(s.to_vec())).is_ok());
        assert!(!b.is_borrowed());
    }
}
