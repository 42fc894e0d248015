//! Symbolic sizes in normal form: polynomials with integer coefficients over
//! the `i64` variables in scope (size parameters, loop bounds, ...). Two sizes
//! are equal exactly when their normal forms are equal. Integer division that
//! cannot be done exactly on the coefficients stays as an opaque atom
//! `(p)/(q)` whose operands are themselves normalised, so `d*(d-1)/2` and
//! `(d*d-d)/2` still compare equal.

use super::{Atom, Lit, Prim, VarId};
use std::collections::BTreeMap;
use std::fmt;

/// Most terms a size polynomial may have (counting the terms of divisions
/// nested inside it) before the compiler refuses it. Hand-written sizes have
/// a handful; this only stops blow-ups such as `(a0+...+a7)^8`.
pub const MAX_SIZE_TERMS: usize = 1000;

/// Most factors one term of a size polynomial may have (its degree).
pub const MAX_SIZE_DEGREE: usize = 64;

/// Why checked size arithmetic refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SizeError {
    /// A coefficient (or constant) does not fit in `i64`.
    Overflow,
    /// The polynomial is over [`MAX_SIZE_TERMS`] or [`MAX_SIZE_DEGREE`].
    TooLarge,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeError::Overflow => write!(f, "size arithmetic overflows i64"),
            SizeError::TooLarge => {
                write!(f, "size expression too large: more than {MAX_SIZE_TERMS} terms or a term of degree above {MAX_SIZE_DEGREE} once multiplied out")
            }
        }
    }
}

/// The run-time error of a size (or `size_mul`) outside `i64`.
pub fn overflow_message() -> &'static str {
    "size arithmetic overflows i64 (a dimension, or a product of dimensions, is above 9223372036854775807)"
}

fn overflow() -> String {
    overflow_message().to_string()
}

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum SizeAtom {
    Var(VarId),
    /// Truncating division that could not be simplified.
    Div(Box<Size>, Box<Size>),
}

/// A polynomial: monomial (sorted list of atoms, repeated for powers) to
/// coefficient. Zero coefficients are never stored; the constant term is
/// the empty monomial.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Size {
    terms: BTreeMap<Vec<SizeAtom>, i64>,
}

impl Size {
    pub fn constant(c: i64) -> Size {
        let mut terms = BTreeMap::new();
        if c != 0 {
            terms.insert(vec![], c);
        }
        Size { terms }
    }

    pub fn var(v: VarId) -> Size {
        Size::atom(SizeAtom::Var(v))
    }

    fn atom(a: SizeAtom) -> Size {
        let mut terms = BTreeMap::new();
        terms.insert(vec![a], 1);
        Size { terms }
    }

    /// The value if the size does not depend on any variable.
    pub fn as_const(&self) -> Option<i64> {
        match self.terms.len() {
            0 => Some(0),
            1 => self.terms.get(&vec![]).copied(),
            _ => None,
        }
    }

    /// The size an `i64` operand holds (a variable or an `i64` literal).
    pub fn of_atom(a: &Atom) -> Option<Size> {
        match a {
            Atom::Var(v) => Some(Size::var(*v)),
            Atom::Lit(Lit::I64(c)) => Some(Size::constant(*c)),
            Atom::Lit(_) => None,
        }
    }

    /// The operand holding this size, when it is a constant or one variable.
    pub fn as_atom(&self) -> Option<Atom> {
        self.as_const().map(|c| Atom::Lit(Lit::I64(c))).or_else(|| self.as_var().map(Atom::Var))
    }

    /// The variable if the size is exactly one variable.
    pub fn as_var(&self) -> Option<VarId> {
        if self.terms.len() != 1 {
            return None;
        }
        let (mono, c) = self.terms.iter().next()?;
        match (mono.as_slice(), c) {
            ([SizeAtom::Var(v)], 1) => Some(*v),
            _ => None,
        }
    }

    /// `self + other`. Coefficients wrap on overflow; the elaborator uses
    /// [`Size::try_add`], which refuses instead.
    pub fn add(&self, other: &Size) -> Size {
        let mut terms = self.terms.clone();
        for (m, c) in &other.terms {
            let e = terms.entry(m.clone()).or_insert(0);
            *e = e.wrapping_add(*c);
            if *e == 0 {
                terms.remove(m);
            }
        }
        Size { terms }
    }

    pub fn neg(&self) -> Size {
        Size { terms: self.terms.iter().map(|(m, c)| (m.clone(), c.wrapping_neg())).collect() }
    }

    pub fn sub(&self, other: &Size) -> Size {
        self.add(&other.neg())
    }

    /// `self * other` (coefficients wrap on overflow; see [`Size::try_mul`]).
    /// Terms are accumulated in one map: linear in the number of products.
    pub fn mul(&self, other: &Size) -> Size {
        let mut out: BTreeMap<Vec<SizeAtom>, i64> = BTreeMap::new();
        for (m1, c1) in &self.terms {
            for (m2, c2) in &other.terms {
                let mut m: Vec<SizeAtom> = m1.iter().chain(m2.iter()).cloned().collect();
                m.sort();
                let e = out.entry(m).or_insert(0);
                *e = e.wrapping_add(c1.wrapping_mul(*c2));
            }
        }
        out.retain(|_, c| *c != 0);
        Size { terms: out }
    }

    /// `self + sign*other`, refusing overflow and sizes over the budget.
    fn combine(&self, other: &Size, sign: i64) -> Result<Size, SizeError> {
        let mut terms = self.terms.clone();
        for (m, c) in &other.terms {
            let c = c.checked_mul(sign).ok_or(SizeError::Overflow)?;
            let e = terms.entry(m.clone()).or_insert(0);
            *e = e.checked_add(c).ok_or(SizeError::Overflow)?;
            if *e == 0 {
                terms.remove(m);
            }
        }
        let out = Size { terms };
        out.check_budget()?;
        Ok(out)
    }

    /// `self + other`, refusing coefficient overflow and polynomials over
    /// the budget ([`MAX_SIZE_TERMS`], [`MAX_SIZE_DEGREE`]).
    pub fn try_add(&self, other: &Size) -> Result<Size, SizeError> {
        self.combine(other, 1)
    }

    /// `self - other`, checked like [`Size::try_add`].
    pub fn try_sub(&self, other: &Size) -> Result<Size, SizeError> {
        self.combine(other, -1)
    }

    /// `self * other`, checked like [`Size::try_add`]; stops as soon as the
    /// product has too many terms, so a blow-up costs at most the budget.
    pub fn try_mul(&self, other: &Size) -> Result<Size, SizeError> {
        let mut out: BTreeMap<Vec<SizeAtom>, i64> = BTreeMap::new();
        for (m1, c1) in &self.terms {
            for (m2, c2) in &other.terms {
                if m1.len() + m2.len() > MAX_SIZE_DEGREE {
                    return Err(SizeError::TooLarge);
                }
                let mut m: Vec<SizeAtom> = m1.iter().chain(m2.iter()).cloned().collect();
                m.sort();
                let p = c1.checked_mul(*c2).ok_or(SizeError::Overflow)?;
                let e = out.entry(m).or_insert(0);
                *e = e.checked_add(p).ok_or(SizeError::Overflow)?;
                if out.len() > MAX_SIZE_TERMS {
                    return Err(SizeError::TooLarge);
                }
            }
        }
        out.retain(|_, c| *c != 0);
        let out = Size { terms: out };
        out.check_budget()?;
        Ok(out)
    }

    /// Truncating division, checked like [`Size::try_add`] (only
    /// `i64::MIN / -1` can overflow).
    pub fn try_div(&self, other: &Size) -> Result<Size, SizeError> {
        if other.as_const() == Some(-1) && self.terms.values().any(|c| *c == i64::MIN) {
            return Err(SizeError::Overflow);
        }
        let out = self.div(other);
        out.check_budget()?;
        Ok(out)
    }

    /// Refuse polynomials with more than [`MAX_SIZE_TERMS`] terms (counting
    /// the terms of divisions nested inside) or a term of more than
    /// [`MAX_SIZE_DEGREE`] factors.
    pub fn check_budget(&self) -> Result<(), SizeError> {
        if self.weight() > MAX_SIZE_TERMS || self.terms.keys().any(|m| m.len() > MAX_SIZE_DEGREE) {
            return Err(SizeError::TooLarge);
        }
        Ok(())
    }

    /// Number of terms, counting those of nested divisions.
    fn weight(&self) -> usize {
        self.terms
            .keys()
            .map(|m| {
                1 + m
                    .iter()
                    .map(|a| match a {
                        SizeAtom::Var(_) => 0,
                        SizeAtom::Div(p, q) => p.weight() + q.weight(),
                    })
                    .sum::<usize>()
            })
            .sum()
    }

    /// Truncating division. Exact when the divisor is a constant dividing
    /// every coefficient; otherwise an opaque atom.
    pub fn div(&self, other: &Size) -> Size {
        if let Some(d) = other.as_const() {
            if d == 1 {
                return self.clone();
            }
            if d != 0 {
                if let Some(n) = self.as_const() {
                    return Size::constant(n.wrapping_div(d));
                }
                if self.terms.values().all(|c| c.wrapping_rem(d) == 0) {
                    return Size { terms: self.terms.iter().map(|(m, c)| (m.clone(), c.wrapping_div(d))).collect() };
                }
            }
        }
        if self == other && self.as_const().is_none() {
            // p/p is 1 whenever p is non-zero; sizes used as divisors are
            // checked non-zero at run time by the code that computes them.
            return Size::constant(1);
        }
        Size::atom(SizeAtom::Div(Box::new(self.clone()), Box::new(other.clone())))
    }

    /// True when every coefficient is non-negative and every atom is known to
    /// be non-negative (`nonneg` decides variables), so the size is >= 0.
    pub fn provably_nonneg(&self, nonneg: &dyn Fn(VarId) -> bool) -> bool {
        self.terms.iter().all(|(m, c)| *c >= 0 && m.iter().all(|a| atom_nonneg(a, nonneg)))
    }

    /// The variables the size mentions.
    pub fn vars(&self) -> Vec<VarId> {
        let mut out = vec![];
        for m in self.terms.keys() {
            for a in m {
                collect_atom_vars(a, &mut out);
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// Replace every variable by a size.
    pub fn subst(&self, f: &dyn Fn(VarId) -> Size) -> Size {
        let mut out = Size::default();
        for (m, c) in &self.terms {
            let mut prod = Size::constant(*c);
            for a in m {
                let s = match a {
                    SizeAtom::Var(v) => f(*v),
                    SizeAtom::Div(p, q) => p.subst(f).div(&q.subst(f)),
                };
                prod = prod.mul(&s);
            }
            out = out.add(&prod);
        }
        out
    }

    /// Evaluate with concrete values for the variables; an intermediate
    /// result outside `i64` is an error, never a wrapped value.
    pub fn eval(&self, f: &dyn Fn(VarId) -> Result<i64, String>) -> Result<i64, String> {
        let mut total: i64 = 0;
        for (m, c) in &self.terms {
            let mut prod = *c;
            for a in m {
                let v = match a {
                    SizeAtom::Var(v) => f(*v)?,
                    SizeAtom::Div(p, q) => {
                        let d = q.eval(f)?;
                        if d == 0 {
                            return Err("division by zero in a size".into());
                        }
                        p.eval(f)?.checked_div(d).ok_or_else(overflow)?
                    }
                };
                prod = prod.checked_mul(v).ok_or_else(overflow)?;
            }
            total = total.checked_add(prod).ok_or_else(overflow)?;
        }
        Ok(total)
    }

    /// Compute the size as an `i64` atom, emitting arithmetic with `emit`:
    /// products as `size_mul`, checked as `Size::eval` is, so a product of
    /// non-negative sizes is known to be non-negative.
    pub fn materialize(&self, emit: &mut dyn FnMut(Prim, Vec<Atom>) -> Atom) -> Atom {
        if let Some(c) = self.as_const() {
            return Atom::Lit(Lit::I64(c));
        }
        if let Some(v) = self.as_var() {
            return Atom::Var(v);
        }
        let mut total: Option<Atom> = None;
        for (mono, c) in &self.terms {
            let mut prod: Option<Atom> = None;
            for a in mono {
                let x = match a {
                    SizeAtom::Var(v) => Atom::Var(*v),
                    SizeAtom::Div(p, q) => {
                        let pa = p.materialize(emit);
                        let qa = q.materialize(emit);
                        emit(Prim::Div, vec![pa, qa])
                    }
                };
                prod = Some(match prod {
                    None => x,
                    Some(p) => emit(Prim::SizeMul, vec![p, x]),
                });
            }
            let term = match prod {
                None => Atom::Lit(Lit::I64(*c)),
                Some(p) if *c == 1 => p,
                Some(p) => emit(Prim::SizeMul, vec![Atom::Lit(Lit::I64(*c)), p]),
            };
            total = Some(match total {
                None => term,
                Some(t) => emit(Prim::Add, vec![t, term]),
            });
        }
        total.unwrap_or(Atom::Lit(Lit::I64(0)))
    }

    /// Monomials with their coefficients, constant term first.
    pub fn terms(&self) -> impl Iterator<Item = (&[SizeAtom], i64)> {
        self.terms.iter().map(|(m, c)| (m.as_slice(), *c))
    }

    /// Print with the given names for variables, e.g. `n*m + 2*n - 1`.
    pub fn display_with(&self, name: &dyn Fn(VarId) -> String) -> String {
        if self.terms.is_empty() {
            return "0".into();
        }
        // Highest degree first, constant last: reads like hand-written sizes.
        let mut monos: Vec<(&Vec<SizeAtom>, &i64)> = self.terms.iter().collect();
        monos.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
        let mut out = String::new();
        for (i, (m, c)) in monos.iter().enumerate() {
            let c = **c;
            let mag = c.unsigned_abs();
            if i == 0 {
                if c < 0 {
                    out.push('-');
                }
            } else {
                out.push_str(if c < 0 { " - " } else { " + " });
            }
            let atoms: Vec<String> = m.iter().map(|a| display_atom(a, name)).collect();
            if m.is_empty() {
                out.push_str(&mag.to_string());
            } else if mag == 1 {
                out.push_str(&atoms.join("*"));
            } else {
                out.push_str(&format!("{}*{}", mag, atoms.join("*")));
            }
        }
        out
    }
}

fn atom_nonneg(a: &SizeAtom, nonneg: &dyn Fn(VarId) -> bool) -> bool {
    match a {
        SizeAtom::Var(v) => nonneg(*v),
        SizeAtom::Div(p, q) => p.provably_nonneg(nonneg) && q.provably_nonneg(nonneg),
    }
}

fn collect_atom_vars(a: &SizeAtom, out: &mut Vec<VarId>) {
    match a {
        SizeAtom::Var(v) => out.push(*v),
        SizeAtom::Div(p, q) => {
            out.extend(p.vars());
            out.extend(q.vars());
        }
    }
}

fn display_atom(a: &SizeAtom, name: &dyn Fn(VarId) -> String) -> String {
    match a {
        SizeAtom::Var(v) => name(*v),
        SizeAtom::Div(p, q) => {
            let wrap = |s: &Size| {
                let t = s.display_with(name);
                if s.terms.len() > 1 || s.terms.keys().any(|m| m.len() > 1) { format!("({t})") } else { t }
            };
            format!("{}/{}", wrap(p), wrap(q))
        }
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.display_with(&|v| format!("%{}", v.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(i: u32) -> Size {
        Size::var(VarId(i))
    }

    #[test]
    fn normal_forms_compare_equal() {
        let d = v(0);
        let a = d.mul(&d.sub(&Size::constant(1))).div(&Size::constant(2));
        let b = d.mul(&d).sub(&d).div(&Size::constant(2));
        assert_eq!(a, b);
        assert_ne!(a, d);
        let n = v(1);
        assert_eq!(n.add(&n), n.mul(&Size::constant(2)));
        assert_eq!(n.mul(&Size::constant(4)).div(&Size::constant(2)), n.add(&n));
        assert_eq!(n.sub(&n), Size::constant(0));
    }

    #[test]
    fn eval_and_display() {
        let d = v(0);
        let s = d.mul(&d.sub(&Size::constant(1))).div(&Size::constant(2));
        assert_eq!(s.eval(&|_| Ok(10)).unwrap(), 45);
        assert_eq!(s.display_with(&|_| "d".into()), "(d*d - d)/2");
        let t = d.mul(&v(1)).add(&d.mul(&Size::constant(2))).sub(&Size::constant(1));
        assert_eq!(t.display_with(&|x| if x.0 == 0 { "n".into() } else { "m".into() }), "n*m + 2*n - 1");
    }

    #[test]
    fn subst_composes() {
        let n = v(0);
        let s = n.add(&Size::constant(1));
        let r = s.subst(&|_| v(5).mul(&Size::constant(2)));
        assert_eq!(r, v(5).mul(&Size::constant(2)).add(&Size::constant(1)));
    }

    #[test]
    fn checked_arithmetic_refuses_overflow() {
        let big = Size::constant(i64::MAX);
        assert_eq!(big.try_add(&Size::constant(1)), Err(SizeError::Overflow));
        assert_eq!(Size::constant(i64::MIN).try_sub(&Size::constant(1)), Err(SizeError::Overflow));
        assert_eq!(v(0).mul(&Size::constant(1 << 62)).try_mul(&Size::constant(4)), Err(SizeError::Overflow));
        assert_eq!(Size::constant(i64::MIN).try_div(&Size::constant(-1)), Err(SizeError::Overflow));
        assert_eq!(v(0).try_add(&v(1)).unwrap(), v(0).add(&v(1)));
        let s = v(0).mul(&Size::constant(1 << 62));
        assert!(s.mul(&Size::constant(4)).eval(&|_| Ok(1)).is_ok(), "wrapping mul keeps a value");
        assert!(s.eval(&|_| Ok(4)).unwrap_err().contains("overflows"));
        assert!(v(0).mul(&v(0)).eval(&|_| Ok(i64::MAX)).is_err());
        // no panic for i64::MIN divided by -1
        let _ = Size::constant(i64::MIN).mul(&v(0)).div(&Size::constant(-1));
    }

    #[test]
    fn polynomials_over_the_budget_are_refused_quickly() {
        let sum = (0..8).fold(Size::constant(0), |acc, i| acc.add(&v(i)));
        let mut p = sum.clone();
        let mut refused = false;
        for _ in 0..7 {
            match p.try_mul(&sum) {
                Ok(q) => p = q,
                Err(e) => {
                    assert_eq!(e, SizeError::TooLarge);
                    refused = true;
                    break;
                }
            }
        }
        assert!(refused, "(a0+...+a7)^8 has 6435 terms");
        // high degree with one term
        let mut q = v(0);
        let mut refused = false;
        for _ in 0..10 {
            match q.try_mul(&q) {
                Ok(r) => q = r,
                Err(_) => {
                    refused = true;
                    break;
                }
            }
        }
        assert!(refused);
    }
}
