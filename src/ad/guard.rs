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
//! Guarded statements: a checked slice (`0 <= lo <= hi <= n`) and a
//! checked index (`0 <= i < n` on each checked axis), whose copies run
//! unchecked; an integer division or remainder (`d != 0`), a `scatter_add`
//! (every position in range: one pass over the positions, once) and an
//! `argmax`/`argmin` (a non-empty array), whose copies the caller counts as
//! unable to fail. Everything else the scalar needs from the loop body
//! must be unable to fail.

use super::build::{Builder, lit};
use crate::ir::walk::{self, Copier};
use crate::ir::{Atom, Binder, Block, Expr, LoopKind, Prim, ReduceOp, Scalar, Size, Stmt, Type, VarId};
use rustc_hash::{FxHashMap, FxHashSet};

/// Rewrite the scalars of `body` computed from guardable checked reads
/// (see the module doc). `variant` holds what changes between the loop's
/// iterations; `safe` says whether a statement may run where it did not
/// (it cannot fail and holds no `while`). The originals the rewritten
/// statements read are added to `guarded` (candidates for removal once
/// nothing reads them); returned: the results of the copies that cannot
/// fail under their guard although their kind can.
pub(super) fn guard_checked_scalars(
    b: &mut Builder,
    body: &mut Block,
    variant: &FxHashSet<VarId>,
    safe: &dyn Fn(&Stmt) -> bool,
    guarded: &mut FxHashSet<VarId>,
) -> Vec<VarId> {
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
        if !invariant[k] || !scalar_result(st) || !(safe(st) || guardable(st, safe)) {
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
        let ok = deps.iter().all(|&d| invariant[d] && (safe(&stmts[d]) || guardable(&stmts[d], safe)));
        let costly =
            std::iter::once(&k).chain(&deps).any(|&d| !matches!(stmts[d].expr, Expr::Prim(..) | Expr::Atom(_) | Expr::Index { .. } | Expr::Slice { .. }));
        if ok && costly && std::iter::once(&k).chain(&deps).any(|&d| !safe(&stmts[d])) {
            let mut deps: Vec<usize> = deps.into_iter().collect();
            deps.sort_unstable();
            plans.push((k, deps));
        }
    }
    let mut proven = vec![];
    if plans.is_empty() {
        return proven;
    }
    let mut replaced: FxHashMap<usize, Vec<Stmt>> = FxHashMap::default();
    for (k, deps) in plans {
        let new = guarded_copy(b, &body.stmts, k, &deps, safe, &mut proven, guarded);
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
    proven
}

/// Whether every result of `s` is a scalar.
fn scalar_result(s: &Stmt) -> bool {
    !s.binds.is_empty() && s.binds.iter().all(|x| x.ty.rank() == 0)
}

/// A statement whose only way to fail is its own check, which
/// [`conditions`] can state; or a `for` whose body fails only by such
/// checks on operands from outside the body (`for j. (j + p) % n`).
fn guardable(s: &Stmt, safe: &dyn Fn(&Stmt) -> bool) -> bool {
    let nested = match &s.expr {
        Expr::For { ivar, body, .. } => Some((vec![*ivar], body)),
        Expr::Loop { params, kind: LoopKind::Count { ivar, .. }, body, .. } => {
            Some((params.iter().map(|p| p.var).chain(std::iter::once(*ivar)).collect(), body))
        }
        _ => None,
    };
    if let Some((bound, body)) = nested {
        let mut inner: FxHashSet<VarId> = body.stmts.iter().flat_map(|t| t.binds.iter().map(|x| x.var)).collect();
        inner.extend(bound);
        let outer = |a: &Atom| !matches!(a, Atom::Var(v) if inner.contains(v));
        return body.stmts.iter().all(|t| safe(t) || (leaf_guardable(t) && condition_operands(t).iter().all(outer))) && !body.stmts.iter().all(safe);
    }
    leaf_guardable(s)
}

/// What the condition of the guardable statement `s` reads.
fn condition_operands(s: &Stmt) -> Vec<Atom> {
    match &s.expr {
        Expr::Slice { arr, lo, hi, .. } => vec![*arr, *lo, *hi],
        Expr::Index { arr, idx, checks } => std::iter::once(*arr).chain(idx.iter().zip(checks).filter(|(_, c)| c.is_some()).map(|(i, _)| *i)).collect(),
        Expr::Prim(_, xs) => vec![xs[1]],
        Expr::ScatterAdd { dest, idxs, .. } => vec![*dest, *idxs],
        Expr::ArgExt { arr, .. } => vec![*arr],
        _ => vec![],
    }
}

/// [`guardable`] for a statement holding no block.
fn leaf_guardable(s: &Stmt) -> bool {
    match &s.expr {
        Expr::Slice { check: Some(_), .. } => true,
        Expr::Index { checks, .. } => checks.iter().any(Option::is_some),
        Expr::Prim(Prim::Div | Prim::Rem, xs) => s.binds.len() == 1 && s.binds[0].ty.elem.is_int() && xs.len() == 2,
        Expr::ScatterAdd { .. } | Expr::ArgExt { .. } => s.binds.len() == 1,
        _ => false,
    }
}

/// The statements replacing statement `k` of `stmts`: `k` itself when it
/// may fail (its results renamed: it stays for its check), the conditions
/// of the guarded statements among `deps` and `k`, then `k`'s results as an
/// `if` on them whose first branch computes `deps` and `k`, guarded.
fn guarded_copy(
    b: &mut Builder,
    stmts: &[Stmt],
    k: usize,
    deps: &[usize],
    safe: &dyn Fn(&Stmt) -> bool,
    proven: &mut Vec<VarId>,
    guarded: &mut FxHashSet<VarId>,
) -> Vec<Stmt> {
    let mut pre = vec![];
    let h = &stmts[k];
    if !safe(h) {
        let mut check = h.clone();
        for x in &mut check.binds {
            let n = b.name(x.var);
            x.var = b.fresh(&n);
            guarded.insert(x.var);
        }
        b.declare(&check);
        pre.push(check);
    }
    let members: Vec<usize> = deps.iter().copied().chain(std::iter::once(k)).collect();
    let block = Block { stmts: members.iter().map(|&j| stmts[j].clone()).collect(), result: h.binds.iter().map(|x| Atom::Var(x.var)).collect() };
    let mut fresh = |v: VarId| {
        let n = b.name(v);
        b.fresh(&n)
    };
    let copy = Copier { map: FxHashMap::default(), fresh: Some(&mut fresh) }.block(&block);
    let originals: Vec<&Stmt> = members.iter().map(|&j| &stmts[j]).collect();
    let guard: Vec<bool> = originals.iter().map(|o| !safe(o)).collect();
    let tys: Vec<Type> = h.binds.iter().map(|x| x.ty.clone()).collect();
    let (body, result) = nest(b, copy.stmts, &originals, &guard, copy.result, &tys, safe, proven);
    pre.extend(body);
    for (x, r) in h.binds.iter().zip(result) {
        let st = Stmt { binds: vec![x.clone()], expr: Expr::Atom(r), loc: h.loc.clone() };
        b.declare(&st);
        pre.push(st);
    }
    pre
}

/// `copies` of `originals` (with `guard[i]` for each one that may fail)
/// returning `result`: each that may fail runs, with what follows it, in an
/// `if` on its conditions (stated over the copies before it), zeros
/// otherwise. Whether a statement may fail is decided on its original: what
/// the caller knows (a divisor `max n 1` is positive) is about the
/// originals' variables, not the copies' fresh ones.
#[allow(clippy::too_many_arguments)]
fn nest(
    b: &mut Builder,
    copies: Vec<Stmt>,
    originals: &[&Stmt],
    guard: &[bool],
    result: Vec<Atom>,
    tys: &[Type],
    safe: &dyn Fn(&Stmt) -> bool,
    proven: &mut Vec<VarId>,
) -> (Vec<Stmt>, Vec<Atom>) {
    let mut out = vec![];
    let mut rest = copies.into_iter().enumerate();
    while let Some((i, mut st)) = rest.next() {
        if !guard[i] {
            carry_safety(&st, proven);
            b.declare(&st);
            out.push(st);
            continue;
        }
        let mut ok = lit(Scalar::Bool, 1.0);
        for c in conditions(b, &mut out, &st, originals[i], safe) {
            ok = boolean(b, &mut out, Prim::And, vec![ok, c]);
        }
        unguard(&mut st, originals[i], safe, proven);
        let mut inner = vec![st];
        let mut inner_originals = vec![originals[i]];
        let mut inner_guard = vec![false];
        for (j, t) in rest {
            inner.push(t);
            inner_originals.push(originals[j]);
            inner_guard.push(guard[j]);
        }
        let (stmts, res) = nest(b, inner, &inner_originals, &inner_guard, result, tys, safe, proven);
        let binds: Vec<Binder> = tys.iter().map(|t| Binder { var: b.fresh("guarded"), ty: t.clone() }).collect();
        let else_b = Block { stmts: vec![], result: tys.iter().map(|t| lit(t.elem, 0.0)).collect() };
        let atoms = binds.iter().map(|x| Atom::Var(x.var)).collect();
        let st = Stmt { binds, expr: Expr::If { cond: ok, then_b: Block { stmts, result: res }, else_b }, loc: None };
        b.declare(&st);
        out.push(st);
        return (out, atoms);
    }
    (out, result)
}

/// The guardable statement `st` (a copy of `orig` that runs where its
/// conditions hold) without its checks, or with its results in `proven`.
fn unguard(st: &mut Stmt, orig: &Stmt, safe: &dyn Fn(&Stmt) -> bool, proven: &mut Vec<VarId>) {
    match (&mut st.expr, &orig.expr) {
        (Expr::Slice { check, .. }, _) => *check = None,
        (Expr::Index { checks, .. }, _) => checks.iter_mut().for_each(|c| *c = None),
        (Expr::For { body, .. } | Expr::Loop { body, .. }, Expr::For { body: ob, .. } | Expr::Loop { body: ob, .. }) => {
            for (t, o) in body.stmts.iter_mut().zip(&ob.stmts) {
                if safe(o) {
                    carry_safety(t, proven);
                } else {
                    unguard(t, o, safe, proven);
                }
            }
        }
        _ => proven.extend(st.binds.iter().map(|x| x.var)),
    }
}

/// The copy `st` of a statement that cannot fail cannot either: its
/// results, and those of every statement nested in it, go into `proven`
/// (a copied `rem q d` by a positive `d` is as safe as the original).
fn carry_safety(st: &Stmt, proven: &mut Vec<VarId>) {
    proven.extend(st.binds.iter().map(|x| x.var));
    for blk in walk::sub_blocks(&st.expr) {
        for t in &blk.stmts {
            carry_safety(t, proven);
        }
    }
}

/// The conditions (`bool` atoms, emitted into `pre`) under which the
/// guardable statement `s` (a copy of `orig`) does not fail.
fn conditions(b: &mut Builder, pre: &mut Vec<Stmt>, s: &Stmt, orig: &Stmt, safe: &dyn Fn(&Stmt) -> bool) -> Vec<Atom> {
    let zero = lit(Scalar::I64, 0.0);
    let mut out = vec![];
    match &s.expr {
        Expr::For { .. } | Expr::Loop { .. } => {
            // no iteration, or every check of the body holds
            let (n, body) = match &s.expr {
                Expr::For { size, body, .. } => {
                    b.begin();
                    let n = b.size(size);
                    pre.extend(b.end());
                    (n, body)
                }
                Expr::Loop { kind: LoopKind::Count { n, .. }, body, .. } => (*n, body),
                _ => unreachable!("a counted loop"),
            };
            let none = boolean(b, pre, Prim::Le, vec![n, zero]);
            let mut all = lit(Scalar::Bool, 1.0);
            let (Expr::For { body: ob, .. } | Expr::Loop { body: ob, .. }) = &orig.expr else { unreachable!("a copy of a loop") };
            for (t, o) in body.stmts.iter().zip(&ob.stmts) {
                if !safe(o) {
                    for c in conditions(b, pre, t, o, safe) {
                        all = boolean(b, pre, Prim::And, vec![all, c]);
                    }
                }
            }
            out.push(boolean(b, pre, Prim::Or, vec![none, all]));
        }
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
        Expr::Prim(_, xs) => {
            let t = b.type_of(&xs[1]).elem;
            out.push(boolean(b, pre, Prim::Ne, vec![xs[1], lit(t, 0.0)]));
        }
        Expr::ArgExt { arr, .. } => {
            let n = axis(b, pre, arr, 0);
            out.push(boolean(b, pre, Prim::Gt, vec![n, zero]));
        }
        Expr::ScatterAdd { dest, idxs, .. } => {
            // no position out of range: count those that are
            let n = axis(b, pre, dest, 0);
            let k = b.type_of(idxs).shape[0].clone();
            let j = b.fresh("j");
            let i64t = Type::scalar(Scalar::I64);
            let mut body = vec![];
            let x = b.fresh("at");
            body.push(Stmt {
                binds: vec![Binder { var: x, ty: i64t.clone() }],
                expr: Expr::Index { arr: *idxs, idx: vec![Atom::Var(j)], checks: vec![None] },
                loc: None,
            });
            let below = boolean(b, &mut body, Prim::Lt, vec![Atom::Var(x), zero]);
            let above = boolean(b, &mut body, Prim::Ge, vec![Atom::Var(x), n]);
            let out_of_range = boolean(b, &mut body, Prim::Or, vec![below, above]);
            let c = b.fresh("bad");
            body.push(Stmt {
                binds: vec![Binder { var: c, ty: i64t.clone() }],
                expr: Expr::Prim(Prim::Select, vec![out_of_range, lit(Scalar::I64, 1.0), zero]),
                loc: None,
            });
            let bad = b.fresh("bad");
            let each = Stmt {
                binds: vec![Binder { var: bad, ty: Type::array(Scalar::I64, vec![k.clone()]) }],
                expr: Expr::For { ivar: j, size: k, body: Block { stmts: body, result: vec![Atom::Var(c)] } },
                loc: None,
            };
            b.declare(&each);
            pre.push(each);
            let count = b.fresh("bad");
            let total = Stmt {
                binds: vec![Binder { var: count, ty: i64t }],
                expr: Expr::Reduce { op: ReduceOp::Add, ne: vec![zero], arrs: vec![Atom::Var(bad)] },
                loc: None,
            };
            b.declare(&total);
            pre.push(total);
            out.push(boolean(b, pre, Prim::Eq, vec![Atom::Var(count), zero]));
        }
        _ => unreachable!("guardable statements only"),
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
