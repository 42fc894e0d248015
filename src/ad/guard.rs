//! Checked reads a loop makes the same at every iteration, guarded so that
//! the scalars computed from them can move before the loop.
//!
//! `for i < n. if i == 0 then sum (a[0:n-1]) else ..`: the slice may fail,
//! so `reads::hoist_invariant` may not run it where it did not run before,
//! and the sum stayed in the branch. Reverse mode then gave `a` a whole
//! cotangent at every iteration (zeros in the other branch): quadratic where
//! the function is linear (issue 24; the complexity fuzzer's seed 337).
//! Here a scalar computed from such reads (a reduction, scan, loop, `for`
//! or `if` with scalar results, reading only what the loop does not change)
//! is rewritten in place as
//!
//! ```text
//! let ok = 0 <= 0 && 0 <= n-1 && n-1 <= n          -- the reads' checks, as values
//! let s = if ok then { <its computation, the reads unchecked> } else { 0.0 }
//! ```
//!
//! which cannot fail, so it moves before the loop like any invariant
//! reduction (its cotangent is then transposed once). The checked reads
//! stay where they were (`reads::normalize` thins a slice nothing reads any
//! more to an `[n][0]` array, keeping its check): the call fails in the
//! same cases, with the same message, at the same point. Where a read
//! fails, the statement computing `s` is never reached, so wherever `s` is
//! used it has its original value.
//!
//! Guarded reads: a checked slice (`0 <= lo <= hi <= n`) and a checked
//! index (`0 <= i < n` on each checked axis). Everything else the scalar
//! needs from the loop body must be unable to fail.

use super::build::{Builder, lit};
use crate::ir::walk::{self, Copier};
use crate::ir::{Atom, Binder, Block, Expr, Prim, Scalar, Size, Stmt, Type, VarId};
use rustc_hash::{FxHashMap, FxHashSet};

/// Rewrite the scalars of `body` computed from guardable checked reads
/// (see the module doc). `variant` holds what changes between the loop's
/// iterations; `safe` says whether a statement may run where it did not
/// (it cannot fail and holds no `while`). The originals the rewritten
/// statements read are added to `guarded` (candidates for removal once
/// nothing reads them).
pub(super) fn guard_checked_scalars(
    b: &mut Builder,
    body: &mut Block,
    variant: &FxHashSet<VarId>,
    safe: &dyn Fn(&Stmt) -> bool,
    guarded: &mut FxHashSet<VarId>,
) {
    let stmts = &body.stmts;
    // which statements are the same at every iteration, and where each variable is bound
    let mut variant = variant.clone();
    let mut invariant = vec![false; stmts.len()];
    let mut def: FxHashMap<VarId, usize> = FxHashMap::default();
    for (k, st) in stmts.iter().enumerate() {
        let mut reads_variant = false;
        walk::stmt_uses(st, &mut |v| reads_variant |= variant.contains(&v));
        invariant[k] = !reads_variant;
        if reads_variant {
            variant.extend(st.binds.iter().map(|x| x.var));
        }
        for x in &st.binds {
            def.insert(x.var, k);
        }
    }
    let mut plans: Vec<(usize, Vec<usize>)> = vec![];
    for (k, st) in stmts.iter().enumerate() {
        if !invariant[k] || !scalar_result(st) || !safe(st) {
            continue;
        }
        // the statements of this block it needs, transitively
        let mut deps: FxHashSet<usize> = FxHashSet::default();
        let mut work = vec![k];
        while let Some(j) = work.pop() {
            walk::stmt_uses(&stmts[j], &mut |v| {
                if let Some(&d) = def.get(&v)
                    && d < j
                    && deps.insert(d)
                {
                    work.push(d);
                }
            });
        }
        let ok = deps.iter().all(|&d| invariant[d] && (safe(&stmts[d]) || guardable(&stmts[d])));
        if ok && deps.iter().any(|&d| !safe(&stmts[d])) {
            let mut deps: Vec<usize> = deps.into_iter().collect();
            deps.sort_unstable();
            plans.push((k, deps));
        }
    }
    if plans.is_empty() {
        return;
    }
    let mut replaced: FxHashMap<usize, Vec<Stmt>> = FxHashMap::default();
    for (k, deps) in plans {
        let new = guarded_copy(b, &body.stmts, k, &deps, safe);
        for &d in &deps {
            guarded.extend(body.stmts[d].binds.iter().map(|x| x.var));
        }
        replaced.insert(k, new);
    }
    let old = std::mem::take(&mut body.stmts);
    for (k, st) in old.into_iter().enumerate() {
        match replaced.remove(&k) {
            Some(new) => body.stmts.extend(new),
            None => body.stmts.push(st),
        }
    }
}

/// Whether every result of `s` is a scalar made by a reduction, scan, loop,
/// `for` or `if` (what is worth running once instead of at every iteration).
fn scalar_result(s: &Stmt) -> bool {
    !s.binds.is_empty()
        && s.binds.iter().all(|x| x.ty.rank() == 0)
        && matches!(s.expr, Expr::Reduce { .. } | Expr::Scan { .. } | Expr::Loop { .. } | Expr::For { .. } | Expr::If { .. })
}

/// A read whose only way to fail is its own check, which [`conditions`] can state.
fn guardable(s: &Stmt) -> bool {
    match &s.expr {
        Expr::Slice { check: Some(_), .. } => true,
        Expr::Index { checks, .. } => checks.iter().any(Option::is_some),
        _ => false,
    }
}

/// The statements replacing statement `k` of `stmts`: the conditions of
/// the checked reads among `deps`, then `k`'s results as an `if` on them
/// whose first branch computes `deps` and `k` with those reads unchecked.
fn guarded_copy(b: &mut Builder, stmts: &[Stmt], k: usize, deps: &[usize], safe: &dyn Fn(&Stmt) -> bool) -> Vec<Stmt> {
    let mut pre = vec![];
    let mut ok: Option<Atom> = None;
    for &d in deps {
        if safe(&stmts[d]) {
            continue;
        }
        for c in conditions(b, &mut pre, &stmts[d]) {
            ok = Some(match ok {
                None => c,
                Some(o) => boolean(b, &mut pre, Prim::And, vec![o, c]),
            });
        }
    }
    let ok = ok.unwrap_or(lit(Scalar::Bool, 1.0));
    let h = &stmts[k];
    let block = Block {
        stmts: deps.iter().chain(std::iter::once(&k)).map(|&j| stmts[j].clone()).collect(),
        result: h.binds.iter().map(|x| Atom::Var(x.var)).collect(),
    };
    let mut fresh = |v: VarId| {
        let n = b.name(v);
        b.fresh(&n)
    };
    let mut then_b = Copier { map: FxHashMap::default(), fresh: Some(&mut fresh) }.block(&block);
    for st in &mut then_b.stmts {
        match &mut st.expr {
            Expr::Slice { check, .. } => *check = None,
            Expr::Index { checks, .. } => checks.iter_mut().for_each(|c| *c = None),
            _ => {}
        }
    }
    for st in &then_b.stmts {
        b.declare(st);
    }
    let else_b = Block { stmts: vec![], result: h.binds.iter().map(|x| lit(x.ty.elem, 0.0)).collect() };
    let st = Stmt { binds: h.binds.clone(), expr: Expr::If { cond: ok, then_b, else_b }, loc: h.loc.clone() };
    b.declare(&st);
    pre.push(st);
    pre
}

/// The conditions (`bool` atoms, emitted into `pre`) under which the read
/// `s` does not fail.
fn conditions(b: &mut Builder, pre: &mut Vec<Stmt>, s: &Stmt) -> Vec<Atom> {
    let zero = lit(Scalar::I64, 0.0);
    let mut out = vec![];
    match &s.expr {
        Expr::Slice { arr, lo, hi, .. } => {
            let n = axis(b, pre, arr, 0);
            out.push(boolean(b, pre, Prim::Le, vec![zero, *lo]));
            out.push(boolean(b, pre, Prim::Le, vec![*lo, *hi]));
            out.push(boolean(b, pre, Prim::Le, vec![*hi, n]));
        }
        Expr::Index { arr, idx, checks } => {
            for (a, (i, c)) in idx.iter().zip(checks).enumerate() {
                if c.is_some() {
                    let n = axis(b, pre, arr, a);
                    out.push(boolean(b, pre, Prim::Le, vec![zero, *i]));
                    out.push(boolean(b, pre, Prim::Lt, vec![*i, n]));
                }
            }
        }
        _ => unreachable!("guardable reads only"),
    }
    out
}

/// The size of axis `a` of `arr`, as an atom (emitted into `pre`).
fn axis(b: &mut Builder, pre: &mut Vec<Stmt>, arr: &Atom, a: usize) -> Atom {
    let size: Size = b.type_of(arr).shape[a].clone();
    b.begin();
    let n = b.size(&size);
    pre.extend(b.end());
    n
}

fn boolean(b: &mut Builder, pre: &mut Vec<Stmt>, op: Prim, args: Vec<Atom>) -> Atom {
    let v = b.fresh("ok");
    let s = Stmt { binds: vec![Binder { var: v, ty: Type::scalar(Scalar::Bool) }], expr: Expr::Prim(op, args), loc: None };
    b.declare(&s);
    pre.push(s);
    Atom::Var(v)
}
