//! Proofs that an integer expression over a loop nest's indices keeps a
//! sign: `p >= 0` at every point of the nest, for a polynomial `p` with
//! exact divisions by constants (a packed triangle's position `i * (2d - i
//! - 1) / 2 + j - i - 1` under `i < j < d`). The optimiser uses them to drop
//! bounds checks that the nest can never fail (`opt::rules::bounds`), and
//! reverse mode to tell which unchecked reads stay in range where a
//! statement moves out of its loop or branch (`ad::reads`).
//!
//! The method: the nest's domain is reparametrised by non-negative slack
//! variables (the bound `j < d` becomes `d = j + 1 + s`, innermost bound
//! first, or `j = d - 1 - s`), and the polynomial, rewritten in them, is
//! non-negative when all its coefficients are (every variable left is a
//! slack, a loop index or a size, none negative). Sound, not complete: a
//! proof failing only keeps a check.

use super::size::{Size, SizeAtom};
use super::{Atom, Expr, Lit, Prim, Scalar, Stmt, Type, VarId};

/// `num / den`, exactly: a polynomial with integer coefficients over a
/// positive denominator, whose value is an integer at every integer point
/// (it is an `i64` of the program).
#[derive(Clone, Debug, PartialEq)]
pub struct Frac {
    pub num: Size,
    pub den: i64,
}

impl Frac {
    pub fn int(s: Size) -> Frac {
        Frac { num: s, den: 1 }
    }

    fn scaled(&self, by: i64) -> Option<Size> {
        self.num.try_mul(&Size::constant(by)).ok()
    }

    pub fn add(&self, o: &Frac) -> Option<Frac> {
        let num = self.scaled(o.den)?.try_add(&o.scaled(self.den)?).ok()?;
        Some(Frac { num, den: self.den.checked_mul(o.den)? })
    }

    pub fn sub(&self, o: &Frac) -> Option<Frac> {
        let num = self.scaled(o.den)?.try_sub(&o.scaled(self.den)?).ok()?;
        Some(Frac { num, den: self.den.checked_mul(o.den)? })
    }

    pub fn mul(&self, o: &Frac) -> Option<Frac> {
        Some(Frac { num: self.num.try_mul(&o.num).ok()?, den: self.den.checked_mul(o.den)? })
    }

    /// `self / c` (`c > 0`, truncating) when it is exact at every integer
    /// point: the numerator is a multiple of `den * c` at every residue of
    /// its variables modulo `den * c` (a polynomial with integer
    /// coefficients is periodic there). `None` otherwise, or when there are
    /// too many residues to try.
    pub fn div_exact(&self, c: i64) -> Option<Frac> {
        let m = self.den.checked_mul(c).filter(|_| c > 0)?;
        let vars = self.num.vars();
        let points = (m as u128).checked_pow(vars.len() as u32).filter(|p| *p <= 4096)?;
        for point in 0..points {
            let at = |v: VarId| {
                let k = vars.iter().position(|w| *w == v).unwrap_or(0) as u32;
                Ok(((point / (m as u128).pow(k)) % m as u128) as i64)
            };
            if self.num.eval(&at).ok()?.rem_euclid(m) != 0 {
                return None;
            }
        }
        Some(Frac { num: self.num.clone(), den: m })
    }
}

/// `s` as an exact fraction: its divisions by positive constants exact
/// (see [`Frac::div_exact`]); `None` for any other division.
pub fn frac_of_size(s: &Size) -> Option<Frac> {
    let mut out = Frac::int(Size::constant(0));
    for (mono, c) in s.terms() {
        let mut term = Frac::int(Size::constant(c));
        for a in mono {
            let f = match a {
                SizeAtom::Var(v) => Frac::int(Size::var(*v)),
                SizeAtom::Div(p, q) => frac_of_size(p)?.div_exact(q.as_const()?)?,
            };
            term = term.mul(&f)?;
        }
        out = out.add(&term)?;
    }
    Some(out)
}

/// One index of a nest: `0 <= x < upper` (`x` a loop index, or an
/// expression standing for one).
#[derive(Clone, Debug)]
pub struct Bound {
    pub x: Size,
    pub upper: Size,
}

/// Whether `p >= 0` at every point of `domain` (its bounds innermost
/// first); `nonneg` says which other variables (sizes) are never negative.
pub fn nonneg_on(p: &Frac, domain: &[Bound], nonneg: &dyn Fn(VarId) -> bool) -> bool {
    let indices: Vec<VarId> = domain.iter().filter_map(|b| b.x.as_var()).collect();
    let known = |v: VarId| is_slack(v) || indices.contains(&v) || nonneg(v);
    let proves = |q: Option<Size>| q.is_some_and(|q| q.provably_nonneg(&known));
    proves(Some(p.num.clone())) || proves(reparametrised(&p.num, domain, true)) || proves(reparametrised(&p.num, domain, false))
}

/// Slack variables: ids no function uses.
fn slack(k: usize) -> VarId {
    VarId(u32::MAX - k as u32)
}

fn is_slack(v: VarId) -> bool {
    v.0 > u32::MAX - 64
}

/// `p` over slack variables: each bound `x < w` (innermost first) whose
/// upper end is a variable replaces it by `x + 1 + s` when `outward` (the
/// index stays, its bounds' variables go), any other bound on an index `v`
/// replaces `v` by `upper - 1 - s`.
fn reparametrised(p: &Size, domain: &[Bound], outward: bool) -> Option<Size> {
    let mut p = p.clone();
    let mut dom = domain.to_vec();
    for k in 0..dom.len().min(60) {
        let Bound { x, upper } = dom[k].clone();
        let s = Size::var(slack(k));
        let (v, by) = match (upper.as_var(), x.as_var()) {
            (Some(w), _) if outward && !is_slack(w) => (w, x.try_add(&Size::constant(1)).ok()?.try_add(&s).ok()?),
            (_, Some(v)) => (v, upper.try_sub(&Size::constant(1)).ok()?.try_sub(&s).ok()?),
            _ => continue,
        };
        p = substituted(&p, v, &by)?;
        for b in &mut dom[k + 1..] {
            b.x = substituted(&b.x, v, &by)?;
            b.upper = substituted(&b.upper, v, &by)?;
        }
    }
    Some(p)
}

/// `p` with `v` replaced by `by`, refusing overflow (no divisions in `p`).
fn substituted(p: &Size, v: VarId, by: &Size) -> Option<Size> {
    let mut out = Size::constant(0);
    for (mono, c) in p.terms() {
        let mut prod = Size::constant(c);
        for a in mono {
            let f = match a {
                SizeAtom::Var(w) if *w == v => by.clone(),
                SizeAtom::Var(w) => Size::var(*w),
                SizeAtom::Div(..) => return None,
            };
            prod = prod.try_mul(&f).ok()?;
        }
        out = out.try_add(&prod).ok()?;
    }
    Some(out)
}

/// The integer `a` as an exact fraction over the variables it is built
/// from (`+`, `-`, `*`, divisions by positive literals, copies; `lookup`
/// finds definitions), each division's numerator pushed to `numerators`;
/// a variable bound otherwise (a loop index, a size, a value read) is a
/// variable of the polynomial.
pub fn position<'s>(a: &Atom, lookup: &dyn Fn(VarId) -> Option<&'s Stmt>, numerators: &mut Vec<Frac>, depth: usize) -> Option<Frac> {
    let v = match a {
        Atom::Lit(Lit::I64(c)) => return Some(Frac::int(Size::constant(*c))),
        Atom::Var(v) => *v,
        Atom::Lit(_) => return None,
    };
    let expr = match lookup(v) {
        Some(d) if d.binds.len() == 1 && depth > 0 => &d.expr,
        _ => return Some(Frac::int(Size::var(v))),
    };
    let sub = |x: &Atom, numerators: &mut Vec<Frac>| position(x, lookup, numerators, depth - 1);
    match expr {
        Expr::Atom(x) => sub(x, numerators),
        Expr::Prim(Prim::Add, xs) => sub(&xs[0], numerators)?.add(&sub(&xs[1], numerators)?),
        Expr::Prim(Prim::Sub, xs) => sub(&xs[0], numerators)?.sub(&sub(&xs[1], numerators)?),
        Expr::Prim(Prim::Mul | Prim::SizeMul, xs) => sub(&xs[0], numerators)?.mul(&sub(&xs[1], numerators)?),
        Expr::Prim(Prim::Div, xs) => {
            let Atom::Lit(Lit::I64(c)) = xs[1] else { return Some(Frac::int(Size::var(v))) };
            let q = sub(&xs[0], numerators)?;
            let out = q.div_exact(c)?;
            numerators.push(q);
            Some(out)
        }
        _ => Some(Frac::int(Size::var(v))),
    }
}

/// Whether the position `i` lies in axis `k` of an array of type `ty` at
/// every point of `domain` (`lookup` finds the definitions the position
/// is built from, `nonneg` the variables never negative), every division
/// in it exact (why that suffices: `opt::rules::bounds`).
pub fn axis_holds<'s>(ty: &Type, k: usize, i: &Atom, lookup: &dyn Fn(VarId) -> Option<&'s Stmt>, domain: &[Bound], nonneg: &dyn Fn(VarId) -> bool) -> bool {
    let Some(n) = ty.shape.get(k).and_then(frac_of_size) else { return false };
    let mut numerators = vec![];
    let Some(p) = position(i, lookup, &mut numerators, 16) else { return false };
    let one = Frac::int(Size::constant(1));
    let below = n.sub(&one).and_then(|last| last.sub(&p));
    let in_range = below.is_some_and(|b| nonneg_on(&b, domain, nonneg)) && nonneg_on(&p, domain, nonneg);
    in_range && exact_divisions(ty, &n, &numerators, domain, nonneg)
}

/// Whether `0 <= lo <= hi <= n` (the outer axis of `ty`) at every point of
/// `domain`, as [`axis_holds`] proves a position.
pub fn slice_holds<'s>(ty: &Type, lo: &Atom, hi: &Atom, lookup: &dyn Fn(VarId) -> Option<&'s Stmt>, domain: &[Bound], nonneg: &dyn Fn(VarId) -> bool) -> bool {
    let Some(n) = ty.shape.first().and_then(frac_of_size) else { return false };
    let mut numerators = vec![];
    let (Some(l), Some(h)) = (position(lo, lookup, &mut numerators, 16), position(hi, lookup, &mut numerators, 16)) else { return false };
    let holds = |d: Option<Frac>| d.is_some_and(|d| nonneg_on(&d, domain, nonneg));
    holds(Some(l.clone())) && holds(h.sub(&l)) && holds(n.sub(&h)) && exact_divisions(ty, &n, &numerators, domain, nonneg)
}

/// Every division's numerator in `[0, b·n]` (`b` the element's bytes), so
/// that no wrapping changed a position built with it.
fn exact_divisions(ty: &Type, n: &Frac, numerators: &[Frac], domain: &[Bound], nonneg: &dyn Fn(VarId) -> bool) -> bool {
    let bytes = match ty.elem {
        Scalar::F64 | Scalar::I64 => 8,
        Scalar::F32 | Scalar::I32 => 4,
        Scalar::Bool => 1,
    };
    let cap = n.mul(&Frac::int(Size::constant(bytes)));
    numerators.iter().all(|q| nonneg_on(q, domain, nonneg) && cap.as_ref().and_then(|c| c.sub(q)).is_some_and(|r| nonneg_on(&r, domain, nonneg)))
}

/// What proving a read in range needs: the types of arrays, the
/// definitions positions are built from, the variables never negative.
pub struct Facts<'f, 's> {
    pub type_of: &'f dyn Fn(&Atom) -> Option<Type>,
    pub lookup: &'f dyn Fn(VarId) -> Option<&'s Stmt>,
    pub nonneg: &'f dyn Fn(VarId) -> bool,
}

/// Call `unproven` on each unchecked read in `st` (nested blocks included)
/// that its array's type and the loops around it do not prove in range:
/// `domain` (the loops around `st`, innermost first) and the counted loops
/// inside `st` around the read. A read the optimiser left unchecked may
/// rest on more (the branch around it), which a statement moved out of
/// that branch or loop no longer has.
pub fn unproven_reads<'s>(st: &'s Stmt, domain: &mut Vec<Bound>, facts: &Facts<'_, 's>, unproven: &mut dyn FnMut(&'s Stmt)) {
    let holds = match &st.expr {
        Expr::Index { arr, idx, checks } => (facts.type_of)(arr)
            .is_some_and(|ty| idx.iter().zip(checks).enumerate().all(|(k, (i, c))| c.is_some() || axis_holds(&ty, k, i, facts.lookup, domain, facts.nonneg))),
        Expr::Slice { arr, lo, hi, check: None } => (facts.type_of)(arr).is_some_and(|ty| slice_holds(&ty, lo, hi, facts.lookup, domain, facts.nonneg)),
        e => {
            for scope in super::walk::scopes(e) {
                let bound = match scope.binds {
                    super::walk::Binds::ForBody { ivar, size } => Some(Bound { x: Size::var(ivar), upper: size.clone() }),
                    super::walk::Binds::LoopBody { counter: Some((ivar, n)), .. } => Size::of_atom(n).map(|upper| Bound { x: Size::var(ivar), upper }),
                    _ => None,
                };
                let inner = bound.is_some();
                if let Some(bound) = bound {
                    domain.insert(0, bound);
                }
                for t in &scope.block.stmts {
                    unproven_reads(t, domain, facts, unproven);
                }
                if inner {
                    domain.remove(0);
                }
            }
            true
        }
    };
    if !holds {
        unproven(st);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(k: u32) -> Size {
        Size::var(VarId(k))
    }

    /// GMM's column-major packed triangle under `i < j < d`: the position
    /// is in `[0, d(d-1)/2)`; one past either end is not.
    #[test]
    fn a_packed_triangle_stays_in_range() {
        let (i, j, d) = (v(1), v(2), v(3));
        let two = Size::constant(2);
        let one = Size::constant(1);
        // i * (2d - i - 1) / 2 + j - i - 1
        let a = Frac::int(i.mul(&two.mul(&d).sub(&i).sub(&one)));
        let pos = a.div_exact(2).unwrap().add(&Frac::int(j.sub(&i).sub(&one))).unwrap();
        let size = frac_of_size(&d.mul(&d).sub(&d).div(&two)).unwrap();
        let domain = [Bound { x: i.clone(), upper: j.clone() }, Bound { x: j.clone(), upper: d.clone() }];
        let sizes = |w: VarId| w == VarId(3);
        assert!(nonneg_on(&pos, &domain, &sizes));
        let last = size.sub(&Frac::int(one.clone())).unwrap().sub(&pos).unwrap();
        assert!(nonneg_on(&last, &domain, &sizes));
        // one further is out at the last element, one less at the first
        let past = size.sub(&pos).unwrap().sub(&Frac::int(two.clone())).unwrap();
        assert!(!nonneg_on(&past, &domain, &sizes));
        let before = pos.sub(&Frac::int(one.clone())).unwrap();
        assert!(!nonneg_on(&before, &domain, &sizes));
        // i <= j (a diagonal included) breaks the upper end
        let wide = [Bound { x: i.clone(), upper: j.add(&one) }, Bound { x: j, upper: d }];
        assert!(!nonneg_on(&last, &wide, &sizes));
    }

    #[test]
    fn divisions_are_exact_only_where_every_residue_divides() {
        let (i, d) = (v(1), v(3));
        let one = Size::constant(1);
        // i (i + 1) is always even, i (i + 2) is not
        assert!(Frac::int(i.mul(&i.add(&one))).div_exact(2).is_some());
        assert!(Frac::int(i.mul(&i.add(&Size::constant(2)))).div_exact(2).is_none());
        // (d^3 - d) / 6 is exact, (d^2 - d) / 3 is not
        assert!(Frac::int(d.mul(&d).mul(&d).sub(&d)).div_exact(6).is_some());
        assert!(Frac::int(d.mul(&d).sub(&d)).div_exact(3).is_none());
        assert!(Frac::int(d.clone()).div_exact(0).is_none());
    }
}
