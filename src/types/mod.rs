//! Surface types and declaration-level checks.
//!
//! Expressions are type- and size-checked by `lower` while it inlines and
//! specialises (every call is resolved at compile time, so checking each use
//! with the actual argument types is both simpler and more precise than
//! inference with type variables). This module holds what that needs: the
//! surface type `Ty` with symbolic sizes, how it maps to flat IR types, and
//! the checks made once per program (duplicate names, recursion).

pub mod decls;

use crate::ir::{Scalar, Size, Type, VarId};

/// A surface type. Sizes are normalised polynomials over `i64` variables.
#[derive(Clone, PartialEq, Debug)]
pub enum Ty {
    Scalar(Scalar),
    /// An `i64` known to lie in `0 .. n-1`.
    Idx(Size),
    /// `[n]t`; `t` is never `Idx` (indexes decay to `i64` inside arrays).
    Array(Size, Box<Ty>),
    Tuple(Vec<Ty>),
}

impl Ty {
    pub fn array(n: Size, elem: Ty) -> Ty {
        Ty::Array(n, Box::new(elem.decay_idx()))
    }

    /// Prefix `dims` as outer axes.
    pub fn array_of(dims: &[Size], elem: Ty) -> Ty {
        dims.iter().rev().fold(elem, |t, d| Ty::array(d.clone(), t))
    }

    /// `idx n` as a plain `i64`.
    pub fn decay_idx(self) -> Ty {
        match self {
            Ty::Idx(_) => Ty::Scalar(Scalar::I64),
            t => t,
        }
    }

    /// The scalar of a scalar/idx type.
    pub fn as_scalar(&self) -> Option<Scalar> {
        match self {
            Ty::Scalar(s) => Some(*s),
            Ty::Idx(_) => Some(Scalar::I64),
            _ => None,
        }
    }

    /// The flat IR types of the leaves, depth-first (arrays of tuples are
    /// tuples of arrays).
    pub fn leaf_types(&self) -> Vec<Type> {
        let mut out = vec![];
        self.collect_leaves(&mut vec![], &mut out);
        out
    }

    fn collect_leaves(&self, dims: &mut Vec<Size>, out: &mut Vec<Type>) {
        match self {
            Ty::Scalar(s) => out.push(Type::array(*s, dims.clone())),
            Ty::Idx(_) => out.push(Type::array(Scalar::I64, dims.clone())),
            Ty::Array(n, t) => {
                dims.push(n.clone());
                t.collect_leaves(dims, out);
                dims.pop();
            }
            Ty::Tuple(ts) => {
                for t in ts {
                    t.collect_leaves(dims, out);
                }
            }
        }
    }

    pub fn leaf_count(&self) -> usize {
        match self {
            Ty::Scalar(_) | Ty::Idx(_) => 1,
            Ty::Array(_, t) => t.leaf_count(),
            Ty::Tuple(ts) => ts.iter().map(Ty::leaf_count).sum(),
        }
    }

    /// Outer axis sizes down to the first non-array.
    pub fn dims(&self) -> Vec<Size> {
        let mut out = vec![];
        let mut t = self;
        while let Ty::Array(n, e) = t {
            out.push(n.clone());
            t = e;
        }
        out
    }

    /// The element type below `k` axes.
    pub fn strip(&self, k: usize) -> Option<&Ty> {
        let mut t = self;
        for _ in 0..k {
            match t {
                Ty::Array(_, e) => t = e,
                _ => return None,
            }
        }
        Some(t)
    }

    /// Every variable mentioned by a size inside the type.
    pub fn size_vars(&self) -> Vec<VarId> {
        match self {
            Ty::Scalar(_) => vec![],
            Ty::Idx(n) => n.vars(),
            Ty::Array(n, t) => {
                let mut v = n.vars();
                v.extend(t.size_vars());
                v
            }
            Ty::Tuple(ts) => ts.iter().flat_map(Ty::size_vars).collect(),
        }
    }

    /// Have a common type: equal once every `idx n` is read as `i64`
    /// (used to join the branches of `if`, array elements, loop states).
    pub fn compatible(&self, other: &Ty) -> bool {
        match (self, other) {
            (Ty::Idx(_) | Ty::Scalar(Scalar::I64), Ty::Idx(_) | Ty::Scalar(Scalar::I64)) => true,
            (Ty::Array(n, a), Ty::Array(m, b)) => n == m && a.compatible(b),
            (Ty::Tuple(a), Ty::Tuple(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.compatible(y)),
            (a, b) => a == b,
        }
    }

    /// A value of this type may be passed where `want` is expected: equal
    /// types, or an `idx n` where an `i64` is expected. (Never an `i64`
    /// where an `idx n` is expected: that would skip a bounds check.)
    pub fn fits(&self, want: &Ty) -> bool {
        match (self, want) {
            (Ty::Idx(_), Ty::Scalar(Scalar::I64)) => true,
            (Ty::Array(n, a), Ty::Array(m, b)) => n == m && a.fits(b),
            (Ty::Tuple(a), Ty::Tuple(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.fits(y)),
            (a, b) => a == b,
        }
    }

    /// The common type of two compatible types (`idx n` joined with anything
    /// else integer becomes `i64`).
    pub fn join(&self, other: &Ty) -> Ty {
        match (self, other) {
            (Ty::Idx(a), Ty::Idx(b)) if a == b => Ty::Idx(a.clone()),
            (Ty::Idx(_), _) | (_, Ty::Idx(_)) => Ty::Scalar(Scalar::I64),
            (Ty::Array(n, a), Ty::Array(_, b)) => Ty::Array(n.clone(), Box::new(a.join(b))),
            (Ty::Tuple(a), Ty::Tuple(b)) => Ty::Tuple(a.iter().zip(b).map(|(x, y)| x.join(y)).collect()),
            (a, _) => a.clone(),
        }
    }

    /// Render as in source, naming size variables with `name`.
    pub fn display(&self, name: &dyn Fn(VarId) -> String) -> String {
        self.display_sizes(&|n| n.display_with(name))
    }

    /// Render as in source, with `size` rendering every size (so a size
    /// can be shown as the user wrote it rather than in normal form).
    pub fn display_sizes(&self, size: &dyn Fn(&Size) -> String) -> String {
        match self {
            Ty::Scalar(s) => s.name().to_string(),
            Ty::Idx(n) => {
                let s = size(n);
                if n.as_const().is_some() || n.as_var().is_some() { format!("idx {s}") } else { format!("idx ({s})") }
            }
            Ty::Array(n, t) => format!("[{}]{}", size(n), t.display_sizes(size)),
            Ty::Tuple(ts) => format!("({})", ts.iter().map(|t| t.display_sizes(size)).collect::<Vec<_>>().join(", ")),
        }
    }
}
