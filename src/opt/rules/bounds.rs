//! Bounds checks a loop nest can never fail: a read `a[p!]` whose position
//! is a polynomial in the enclosing loops' indices (with exact divisions by
//! constants: a packed triangle's `i * (2d - i - 1) / 2 + j - i - 1`) that
//! `ir::range` proves to lie in `[0, n)` over the nest's domain (the loops'
//! ranges, and a branch's `i < e` around the read) is unchecked. Such a
//! check kept a loop from being vectorised, fused or interchanged.
//!
//! Wrapping `i64` arithmetic keeps the proof valid: `+`, `-` and `*` give
//! the true value modulo 2^64, so a true value in `[0, n)` comes out
//! exactly, provided every division's numerator is itself exact; each one
//! is proven to lie in `[0, b·n]` for an element size `b` of the array
//! read, which exists, so that `b·n` is below 2^63.

use super::{local_def, loops::cond_bound};
use crate::ir::range::{Bound, Frac, frac_of_size, nonneg_on};
use crate::ir::{Atom, Block, Expr, Lit, Prim, Scalar, Size, Stmt, VarId};
use crate::opt::rule::{Ctx, Rule};

pub const RULES: &[Rule] = &[Rule::on_stmt(
    "proven_index",
    "`a[p!]` (or `if i < e then {… a[p!] …}`) where p is a polynomial in the enclosing loops' indices, sizes and integers bound outside (`+`, `-`, `*`, exact divisions by constants) and `0 <= p < n` holds at every point of the loops' ranges (and the branch's bound) → `a[p]`: proven by reparametrising the domain with non-negative slacks (`ir::range`); every division's numerator lies in `[0, b·n]` (`b` the element's bytes), so no wrapping changes the position",
    proven_index,
)];

fn proven_index(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    match &s.expr {
        Expr::Index { checks, .. } if checks.iter().any(Option::is_some) => {
            let domain = loop_domain(ctx, &[]);
            Some(vec![unchecked(s, &domain, None, ctx)?])
        }
        Expr::If { cond, then_b, else_b } => {
            let mut domain = branch_bounds(cond, ctx);
            if domain.is_empty() {
                return None;
            }
            let bounded: Vec<Size> = domain.iter().map(|b| b.x.clone()).collect();
            domain.extend(loop_domain(ctx, &bounded));
            let mut then_new = then_b.clone();
            let mut changed = false;
            for k in 0..then_new.stmts.len() {
                let st = &then_new.stmts[k];
                if matches!(&st.expr, Expr::Index { checks, .. } if checks.iter().any(Option::is_some))
                    && let Some(done) = unchecked(st, &domain, Some(then_b), ctx)
                {
                    then_new.stmts[k] = done;
                    changed = true;
                }
            }
            changed.then(|| vec![Stmt { binds: s.binds.clone(), expr: Expr::If { cond: *cond, then_b: then_new, else_b: else_b.clone() }, loc: s.loc.clone() }])
        }
        _ => None,
    }
}

/// `0 <= i < n` for each loop around the position (innermost first), but
/// for the indices `skip` already bounds more tightly.
fn loop_domain(ctx: &Ctx, skip: &[Size]) -> Vec<Bound> {
    ctx.loops_around(8).into_iter().map(|(i, n)| Bound { x: Size::var(i), upper: n.clone() }).filter(|b| !skip.contains(&b.x)).collect()
}

/// The upper bounds `cond` (`i < e`, `i <= e`, either operand order) puts
/// on an index of an enclosing loop.
fn branch_bounds(cond: &Atom, ctx: &Ctx) -> Vec<Bound> {
    let Some(Expr::Prim(p, xs)) = ctx.def_expr(cond) else { return vec![] };
    let mut out = vec![];
    for (i, _) in ctx.loops_around(8) {
        if let Some((e, k, true)) = cond_bound(*p, xs, i)
            && let Some(e) = Size::of_atom(&e)
        {
            out.push(Bound { x: Size::var(i), upper: e.add(&Size::constant(k)) });
        }
    }
    out
}

/// `s` (a read) with the checks dropped that the domain proves; `None`
/// when none is. `local`: a block whose statements bind some of the
/// position's parts (a branch around the read).
fn unchecked(s: &Stmt, domain: &[Bound], local: Option<&Block>, ctx: &Ctx) -> Option<Stmt> {
    let Expr::Index { arr, idx, checks } = &s.expr else { return None };
    let ty = ctx.type_of(arr)?;
    let bytes = match ty.elem {
        Scalar::F64 | Scalar::I64 => 8,
        Scalar::F32 | Scalar::I32 => 4,
        Scalar::Bool => 1,
    };
    let nonneg = |v: VarId| ctx.is_nonneg(v);
    let mut new_checks = checks.clone();
    for (k, c) in checks.iter().enumerate() {
        if c.is_none() {
            continue;
        }
        let Some(n) = ty.shape.get(k).and_then(frac_of_size) else { continue };
        let mut numerators = vec![];
        let lookup = |v: VarId| local.and_then(|b| local_def(b, v)).or_else(|| ctx.def(v));
        let Some(p) = position(&idx[k], &lookup, &mut numerators, 16) else { continue };
        let one = Frac::int(Size::constant(1));
        let below = n.sub(&one).and_then(|last| last.sub(&p));
        let in_range = below.is_some_and(|b| nonneg_on(&b, domain, &nonneg)) && nonneg_on(&p, domain, &nonneg);
        let cap = n.mul(&Frac::int(Size::constant(bytes)));
        let exact =
            numerators.iter().all(|q| nonneg_on(q, domain, &nonneg) && cap.as_ref().and_then(|c| c.sub(q)).is_some_and(|r| nonneg_on(&r, domain, &nonneg)));
        if in_range && exact {
            new_checks[k] = None;
        }
    }
    (new_checks != *checks).then(|| Stmt { binds: s.binds.clone(), expr: Expr::Index { arr: *arr, idx: idx.clone(), checks: new_checks }, loc: s.loc.clone() })
}

/// The integer `a` as an exact fraction over the variables it is built
/// from (`+`, `-`, `*`, divisions by positive literals, copies; `lookup`
/// finds definitions), each division's numerator pushed to `numerators`;
/// a variable bound otherwise (a loop index, a size, a value read) is a
/// variable of the polynomial.
pub(crate) fn position<'s>(a: &Atom, lookup: &dyn Fn(VarId) -> Option<&'s Stmt>, numerators: &mut Vec<Frac>, depth: usize) -> Option<Frac> {
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
        Expr::Prim(Prim::Mul, xs) => sub(&xs[0], numerators)?.mul(&sub(&xs[1], numerators)?),
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

/// Whether the integer `a` is `j + c` with `c` not depending on `j` (a
/// position that walks memory one element per step of `j`), as far as
/// `lookup`'s definitions tell.
pub(crate) fn unit_stride<'s>(a: &Atom, j: VarId, lookup: &dyn Fn(VarId) -> Option<&'s Stmt>) -> bool {
    let Some(p) = position(a, lookup, &mut vec![], 16) else { return false };
    let with_j: Vec<(&[crate::ir::size::SizeAtom], i64)> = p.num.terms().filter(|(m, _)| m.iter().any(|x| x == &crate::ir::size::SizeAtom::Var(j))).collect();
    matches!(with_j.as_slice(), [(m, c)] if m.len() == 1 && *c == p.den)
}
