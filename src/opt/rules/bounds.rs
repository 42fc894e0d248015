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
use crate::ir::range::{Bound, Facts, axis_holds, position, unproven_reads};
use crate::ir::walk;
use crate::ir::{Atom, Block, Expr, Size, Stmt, Type, VarId};
use crate::opt::rule::{Ctx, Rule};
use rustc_hash::FxHashMap;

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

/// Whether the unchecked reads of `st` (nested blocks included) stay in
/// range where a rule moves it: before the statement the rule rewrites,
/// inside the loops around that (`ctx`) and `levels`, loops the rule builds
/// around `st` (outermost first). `local`: what the blocks `st` leaves
/// define. A read left unchecked because of the loop or branch `st` leaves
/// is not proven here: `v[0]` inside `for i < n`, where `n >= 1`, reads out
/// of range before the loop when `n = 0`.
pub(crate) fn reads_hold_moved(st: &Stmt, levels: &[Bound], local: &Local, ctx: &Ctx) -> bool {
    let type_of = |a: &Atom| match a {
        Atom::Var(v) if local.types.contains_key(v) => local.types.get(v).cloned(),
        _ => ctx.type_of(a),
    };
    let lookup = |v: VarId| local.defs.get(&v).copied().or_else(|| ctx.def(v));
    let nonneg = |v: VarId| ctx.is_nonneg(v);
    let facts = Facts { type_of: &type_of, lookup: &lookup, nonneg: &nonneg };
    let mut domain: Vec<Bound> = levels.iter().rev().cloned().chain(loop_domain(ctx, &[])).collect();
    let mut holds = true;
    unproven_reads(st, &mut domain, &facts, &mut |_| holds = false);
    holds
}

/// What the unchecked reads of a statement need once a rule moves it out
/// of a counted loop.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Moved {
    /// nothing: they stay in range where the statement lands
    Holds,
    /// that the loop it left would have run: `v[0]` inside `for i < n`
    /// (unchecked by `proven_index` because `n >= 1` there)
    WhereTheLoopRuns,
}

/// [`Moved`] for `st` leaving the loop whose index ranges over `left`
/// (`None`: a loop without an index, which no proof of a read uses) for a
/// place inside `levels` (loops the rule builds around it, outermost
/// first; see [`reads_hold_moved`]). A read this prover cannot place in
/// range even with `left`'s range was not unchecked by a proof over that
/// range (`proven_index`, `guarded_index` and `licm` see the same loops,
/// and a branch around the loop stays around it): a rule made it
/// unchecked by construction (`scatter_stencil`'s clamped `select`
/// positions, the lowering's `idx` types), valid wherever its operands are.
pub(crate) fn reads_when_moved(st: &Stmt, levels: &[Bound], left: Option<&Bound>, local: &Local, ctx: &Ctx) -> Moved {
    if reads_hold_moved(st, levels, local, ctx) {
        return Moved::Holds;
    }
    let Some(left) = left else { return Moved::Holds };
    let inside: Vec<Bound> = std::iter::once(left.clone()).chain(levels.iter().cloned()).collect();
    if reads_hold_moved(st, &inside, local, ctx) { Moved::WhereTheLoopRuns } else { Moved::Holds }
}

/// What blocks define (nested blocks included): their statements by the
/// variables they bind, and the types of all they bind (loop parameters
/// too), for [`reads_hold_moved`].
pub(crate) struct Local<'b> {
    defs: FxHashMap<VarId, &'b Stmt>,
    types: FxHashMap<VarId, Type>,
}

impl<'b> Local<'b> {
    pub(crate) fn of(blocks: &[&'b Block]) -> Local<'b> {
        let mut local = Local { defs: FxHashMap::default(), types: FxHashMap::default() };
        for b in blocks {
            walk::binder_types(b, &mut local.types);
            walk::for_each_stmt(b, &mut |st| {
                for x in &st.binds {
                    local.defs.insert(x.var, st);
                }
            });
        }
        local
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
    let nonneg = |v: VarId| ctx.is_nonneg(v);
    let lookup = |v: VarId| local.and_then(|b| local_def(b, v)).or_else(|| ctx.def(v));
    let mut new_checks = checks.clone();
    for (k, c) in checks.iter().enumerate() {
        if c.is_some() && axis_holds(&ty, k, &idx[k], &lookup, domain, &nonneg) {
            new_checks[k] = None;
        }
    }
    (new_checks != *checks).then(|| Stmt { binds: s.binds.clone(), expr: Expr::Index { arr: *arr, idx: idx.clone(), checks: new_checks }, loc: s.loc.clone() })
}

/// Whether the integer `a` is `j + c` with `c` not depending on `j` (a
/// position that walks memory one element per step of `j`), as far as
/// `lookup`'s definitions tell.
pub(crate) fn unit_stride<'s>(a: &Atom, j: VarId, lookup: &dyn Fn(VarId) -> Option<&'s Stmt>) -> bool {
    let Some(p) = position(a, lookup, &mut vec![], 16) else { return false };
    let with_j: Vec<(&[crate::ir::size::SizeAtom], i64)> = p.num.terms().filter(|(m, _)| m.iter().any(|x| x == &crate::ir::size::SizeAtom::Var(j))).collect();
    matches!(with_j.as_slice(), [(m, c)] if m.len() == 1 && *c == p.den)
}
