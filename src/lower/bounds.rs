//! Index safety (LANGUAGE.md §5): decide for each index whether it is in
//! bounds by construction. An index of type `idx n` into an axis of size `n`
//! is safe. Otherwise the index's symbolic value (a polynomial over
//! variables) is bounded using the ranges of `idx` variables (`0 .. n-1`) and
//! the non-negativity of sizes; affine indexes such as `a[n-1-i]` or
//! `a[i+1]` with `i: idx (n-1)` are proven this way. What cannot be proven
//! gets a run-time check.

use super::Lowerer;
use crate::ir::{Atom, Check, Size, SizeAtom};
use crate::syntax::ast::Span;
use crate::types::Ty;

impl Lowerer<'_> {
    /// The check for using `idx` (of type `idx_ty`) into an axis of size `axis`.
    pub(super) fn index_check(&mut self, idx: Atom, idx_ty: &Ty, axis: &Size, span: &Span) -> Check {
        if let Ty::Idx(n) = idx_ty
            && n == axis
        {
            return None;
        }
        if let Some(value) = self.size_of_atom(idx)
            && self.proven_in_range(&value, idx_ty, axis)
        {
            return None;
        }
        let loc = self.loc(span);
        let what = self.snippet(span);
        let desc = format!("index `{}` into an axis of size {} could not be proven in bounds", what, self.show_size(axis));
        if self.quiet == 0 && !self.unproven.iter().any(|(l, _)| *l == loc) {
            self.unproven.push((loc.clone(), desc));
        }
        Some(loc)
    }

    /// `0 <= value <= axis - 1`, using idx ranges.
    fn proven_in_range(&self, value: &Size, idx_ty: &Ty, axis: &Size) -> bool {
        // An idx n used where the axis is provably at least n.
        if let Ty::Idx(n) = idx_ty
            && axis.try_sub(n).is_ok_and(|d| d.provably_nonneg(&|v| self.is_nonneg(v)))
        {
            return true;
        }
        let Some((lo, hi)) = self.bounds(value) else { return false };
        let nonneg = |v| self.is_nonneg(v);
        let room = axis.try_sub(&Size::constant(1)).and_then(|a| a.try_sub(&hi));
        lo.provably_nonneg(&nonneg) && room.is_ok_and(|r| r.provably_nonneg(&nonneg))
    }

    fn is_nonneg(&self, v: crate::ir::VarId) -> bool {
        self.nonneg.contains(&v) || self.idx_range.contains_key(&v)
    }

    /// Symbolic lower and upper bounds of a polynomial whose idx variables
    /// appear linearly; `None` when an idx variable appears non-linearly
    /// or the arithmetic overflows (then nothing is proven).
    fn bounds(&self, value: &Size) -> Option<(Size, Size)> {
        let mut lo = Size::constant(0);
        let mut hi = Size::constant(0);
        for (mono, c) in value.terms() {
            let coeff = Size::constant(c);
            match mono {
                [SizeAtom::Var(v)] if self.idx_range.contains_key(v) => {
                    let top = self.idx_range[v].try_sub(&Size::constant(1)).and_then(|t| t.try_mul(&coeff)).ok()?;
                    if c > 0 {
                        hi = hi.try_add(&top).ok()?;
                    } else {
                        lo = lo.try_add(&top).ok()?;
                    }
                }
                _ => {
                    if mono.iter().any(|a| matches!(a, SizeAtom::Var(v) if self.idx_range.contains_key(v))) {
                        return None;
                    }
                    let mut term = coeff;
                    for a in mono {
                        term = term.try_mul(&atom_size(a)).ok()?;
                    }
                    lo = lo.try_add(&term).ok()?;
                    hi = hi.try_add(&term).ok()?;
                }
            }
        }
        Some((lo, hi))
    }
}

fn atom_size(a: &SizeAtom) -> Size {
    match a {
        SizeAtom::Var(v) => Size::var(*v),
        SizeAtom::Div(p, q) => p.div(q),
    }
}
