//! A scatter of the (index, value) pairs that a loop nest stacks, inside a
//! parallel loop's body, becomes the nest itself run as counted loops that
//! add each pair into the destination in place.
//!
//! Reverse mode of a read `l[e(i, j)]` in a nest `for j. for i.` stacks one
//! `(e, cotangent)` pair per iteration, flattens the `[m][n]` pairs and
//! scatters them (GMM's triangular `l[i * (2d - i - 1) / 2 + j - i - 1]`
//! under `if i < j`). Nested in the loop over data points, that writes
//! and reads `2·m·n` pairs per point where `m·n/2` additions are needed.
//! The loops add the same terms in the same order (the scatter's order is
//! the nest's, row-major), so the result has the same bits.

use super::{bind, local_def, var};
use crate::ir::{Atom, Binder, Block, Expr, Lit, Loc, LoopKind, Prim, Scalar, Size, Stmt, Type, VarId, walk};
use crate::opt::rule::{Ctx, Rule};
use rustc_hash::FxHashSet;

pub const RULES: &[Rule] = &[Rule::on_stmt(
    "scatter_nest",
    "`scatter_add d (flatten* is) (flatten* vs)` inside a parallel loop's body, where `is`, `vs` are stacked results of one nest `for i_1 … i_r` read only by the scatter, and the pair is computed by statements that cannot fail (scalar arithmetic, reads of elements or rows, branches) → counted loops over the nest adding each pair into `d` in place (`d[e] += v`, checked as the scatter checks): no pair arrays, no pass over them, the same sums in the same order. In the guarded form `if S > 0 then scatter_add (replicate S 0.0) … else …` (reverse mode's), pairs `if i_r < e then (p, v) else (0, ±0.0)` also run only where the condition holds (`i_r` from a bound on the innermost index, as `sum_cond_range`): adding ±0.0 to element 0 of a sum from +0.0 changes no bit",
    scatter_nest,
)];

fn scatter_nest(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = super::single(s)?;
    if !ctx.in_parallel_loop() || y.ty.rank() != 1 || !y.ty.elem.is_float() {
        return None;
    }
    match &s.expr {
        Expr::ScatterAdd { dest, idxs, vals, loc } if loc.is_reverse_mode() => {
            let (mut out, r) = pairs_loop(y, *dest, idxs, vals, loc, false, ctx)?;
            out.push(bind(y.var, y.ty.clone(), Expr::Atom(r)));
            Some(out)
        }
        Expr::If { cond, then_b, else_b } => {
            // `if S > 0 then scatter_add (replicate S +0.0) is vs else …`
            let [sc] = then_b.stmts.as_slice() else { return None };
            let Expr::ScatterAdd { dest, idxs, vals, loc } = &sc.expr else { return None };
            if !loc.is_reverse_mode() || then_b.result != [Atom::Var(super::single(sc)?.var)] || !nonempty_zeros(ctx, cond, dest) {
                return None;
            }
            let (mut stmts, r) = pairs_loop(y, *dest, idxs, vals, loc, true, ctx)?;
            let then_b = Block { stmts: std::mem::take(&mut stmts), result: vec![r] };
            Some(vec![Stmt { binds: s.binds.clone(), expr: Expr::If { cond: *cond, then_b, else_b: else_b.clone() }, loc: s.loc.clone() }])
        }
        _ => None,
    }
}

/// Whether `dest` is `replicate S +0.0` and `cond` is `S > 0` (or `0 < S`):
/// under the condition, index 0 is in range and no element is ever -0.0
/// (a sum from +0.0 never is, under round-to-nearest).
fn nonempty_zeros(ctx: &Ctx, cond: &Atom, dest: &Atom) -> bool {
    let Some(Expr::Replicate { n, val }) = ctx.def_expr(dest) else { return false };
    if !super::is_lit(val, 0.0) {
        return false;
    }
    let zero = Atom::Lit(Lit::I64(0));
    match ctx.def_expr(cond) {
        Some(Expr::Prim(Prim::Gt, xs)) => xs[0] == *n && xs[1] == zero,
        Some(Expr::Prim(Prim::Lt, xs)) => xs[0] == zero && xs[1] == *n,
        _ => false,
    }
}

/// One level of the nest: its index, trip count, body, and the positions
/// of the index and value results in that body.
struct Level {
    ivar: VarId,
    size: Size,
    body: Block,
    at: (usize, usize),
}

/// The nest stacking the pairs, outermost level first, when `idxs` and
/// `vals` are the flattened stacked results of one statement and nothing
/// else reads them.
fn pair_nest(idxs: &Atom, vals: &Atom, ctx: &Ctx) -> Option<Vec<Level>> {
    let read_once = |a: &Atom| -> Option<(VarId, usize)> {
        let mut v = var(a)?;
        let mut flat = 0;
        loop {
            if ctx.uses(v) != 1 {
                return None;
            }
            match ctx.def_expr(&Atom::Var(v))? {
                Expr::Flatten(Atom::Var(x)) => {
                    v = *x;
                    flat += 1;
                }
                _ => return Some((v, flat)),
            }
        }
    };
    let ((iroot, rank), (vroot, vrank)) = (read_once(idxs)?, read_once(vals)?);
    let root = ctx.def(iroot)?;
    if rank != vrank || !std::ptr::eq(root, ctx.def(vroot)?) {
        return None;
    }
    let pos = |st: &Stmt, v: VarId| st.binds.iter().position(|b| b.var == v);
    let mut at = (pos(root, iroot)?, pos(root, vroot)?);
    let mut st = root;
    let mut levels = vec![];
    loop {
        let (ivar, size, body) = match &st.expr {
            Expr::For { ivar, size, body } => (*ivar, size, body),
            Expr::ForAcc { ivar, size, body, acc } if !acc[at.0] && !acc[at.1] => (*ivar, size, body),
            _ => return None,
        };
        levels.push(Level { ivar, size: size.clone(), body: body.clone(), at });
        if levels.len() == rank + 1 {
            return Some(levels);
        }
        let (ri, rv) = (var(&body.result[at.0])?, var(&body.result[at.1])?);
        let inner = local_def(body, ri)?;
        if !std::ptr::eq(inner, local_def(body, rv)?) {
            return None;
        }
        at = (pos(inner, ri)?, pos(inner, rv)?);
        st = inner;
    }
}

/// The statements of `stmts` (in order) that `needed` depends on, skipping
/// `except`; `needed` grows by what they read. `None` when one of them is
/// more than scalar arithmetic, a read (of an element, or of a row: a view
/// into its array, as a nest level's `t[i]` of a saved table) or a branch
/// between such (the copy would repeat work the nest does anyway).
fn closure(stmts: &[Stmt], needed: &mut FxHashSet<VarId>, except: Option<&Stmt>) -> Option<Vec<Stmt>> {
    let mut keep = vec![false; stmts.len()];
    for (k, st) in stmts.iter().enumerate().rev() {
        if except.is_some_and(|e| std::ptr::eq(e, st)) || !st.binds.iter().any(|b| needed.contains(&b.var)) {
            continue;
        }
        let cheap = match &st.expr {
            Expr::Index { .. } => true,
            Expr::Atom(_) | Expr::Prim(..) => st.binds.iter().all(|b| b.ty.rank() == 0),
            Expr::If { then_b, else_b, .. } => {
                st.binds.iter().all(|b| b.ty.rank() == 0)
                    && [then_b, else_b].iter().all(|b| b.stmts.iter().all(|s| matches!(s.expr, Expr::Atom(_) | Expr::Prim(..) | Expr::Index { .. })))
            }
            _ => false,
        };
        if !cheap {
            return None;
        }
        keep[k] = true;
        needed.extend(walk::free_vars_stmt(st));
    }
    Some(stmts.iter().zip(keep).filter(|(_, k)| *k).map(|(s, _)| s.clone()).collect())
}

/// The innermost pair when it is `if c then {…; (p, v)} else (0, ±0.0)`
/// with `c` a bound on the innermost index: the then-branch, the
/// positions of p and v in it, and the comparison binding `c`.
fn guarded_pair(body: &Block, at: (usize, usize), ivar: VarId) -> Option<(&Stmt, &Block, &Stmt)> {
    let (ri, rv) = (var(&body.result[at.0])?, var(&body.result[at.1])?);
    let def = local_def(body, ri)?;
    let Expr::If { cond: Atom::Var(c), then_b, else_b } = &def.expr else { return None };
    let (pi, pv) = (def.binds.iter().position(|b| b.var == ri)?, def.binds.iter().position(|b| b.var == rv)?);
    let pad = (&else_b.result[pi], &else_b.result[pv]);
    if local_def(body, rv).map(|d| d as *const Stmt) != Some(def as *const Stmt)
        || *pad.0 != Atom::Lit(Lit::I64(0))
        || !(super::is_lit(pad.1, 0.0) || super::is_lit(pad.1, -0.0))
    {
        return None;
    }
    let cmp = local_def(body, *c)?;
    let Expr::Prim(p, xs) = &cmp.expr else { return None };
    let (e, _, _) = super::loops::cond_bound(*p, xs, ivar)?;
    // the bound must not vary with the innermost index
    if var(&e).is_some_and(|v| local_def(body, v).is_some()) {
        return None;
    }
    Some((def, then_b, cmp))
}

/// The counted loops adding every pair into `dest` (see the module doc),
/// and the atom of the result. `pads_free`: adding a pad (0, ±0.0) changes
/// nothing, so a guarded pair may skip it.
fn pairs_loop(y: &Binder, dest: Atom, idxs: &Atom, vals: &Atom, loc: &Loc, pads_free: bool, ctx: &mut Ctx) -> Option<(Vec<Stmt>, Atom)> {
    // scalar values of the destination's type
    if ctx.type_of(vals).is_none_or(|t| t.rank() != 1 || t.elem != y.ty.elem) {
        return None;
    }
    let levels = pair_nest(idxs, vals, ctx)?;
    let ty = y.ty.clone();
    let int = Type::scalar(Scalar::I64);
    let inner = levels.last()?;
    // the innermost body: the pair's statements, then `acc[p] += v`
    let acc_in = ctx.fresh("acc");
    let mut count_stmts = vec![];
    let mut ivar = inner.ivar;
    // a level's trip count as an atom, computed where its loop will be
    let mut count = super::loops::materialized(&inner.size, &mut count_stmts, ctx);
    let mut needed: FxHashSet<VarId> = FxHashSet::default();
    let mut stmts;
    let (p, v);
    match guarded_pair(&inner.body, inner.at, inner.ivar).filter(|_| pads_free) {
        Some((def, then_b, cmp)) => {
            let k = (
                def.binds.iter().position(|b| Atom::Var(b.var) == inner.body.result[inner.at.0])?,
                def.binds.iter().position(|b| Atom::Var(b.var) == inner.body.result[inner.at.1])?,
            );
            (p, v) = (then_b.result[k.0], then_b.result[k.1]);
            needed.extend([p, v].iter().filter_map(var));
            let branch = closure(&then_b.stmts, &mut needed, None)?;
            stmts = closure(&inner.body.stmts, &mut needed, Some(def))?;
            stmts.extend(branch);
            let Expr::Prim(op, xs) = &cmp.expr else { return None };
            let (e, k, below) = super::loops::cond_bound(*op, xs, inner.ivar)?;
            let (c, offset) = super::loops::cond_range(e, k, below, count, &mut count_stmts, ctx);
            count = c;
            if let Some(lo) = offset {
                let j = ctx.fresh_like(inner.ivar);
                stmts.insert(0, bind(inner.ivar, int.clone(), Expr::Prim(Prim::Add, vec![Atom::Var(j), lo])));
                ivar = j;
            }
        }
        // a guarded pair outside the guarded form: its pads (0, ±0.0) would
        // each be an addition to element 0, a chain of dependent stores
        None if guarded_pair(&inner.body, inner.at, inner.ivar).is_some() => return None,
        None => {
            (p, v) = (inner.body.result[inner.at.0], inner.body.result[inner.at.1]);
            needed.extend([p, v].iter().filter_map(var));
            stmts = closure(&inner.body.stmts, &mut needed, None)?;
        }
    }
    if ctx.stmts_can_fail(&stmts) {
        return None;
    }
    let (old, new, next) = (ctx.fresh("old"), ctx.fresh("new"), ctx.fresh("acc"));
    stmts.extend([
        bind(old, Type::scalar(ty.elem), Expr::Index { arr: Atom::Var(acc_in), idx: vec![p], checks: vec![Some(loc.clone())] }),
        bind(new, Type::scalar(ty.elem), Expr::Prim(Prim::Add, vec![Atom::Var(old), v])),
        bind(next, ty.clone(), Expr::Update { arr: Atom::Var(acc_in), idx: p, val: Atom::Var(new), loc: loc.clone() }),
    ]);
    let mut nest = counted(ivar, count, acc_in, Block { stmts, result: vec![Atom::Var(next)] }, &ty, ctx);
    nest.splice(0..0, count_stmts);
    // the outer levels, innermost first: each body's statements the level
    // inside it reads, then that level
    for level in levels.iter().rev().skip(1) {
        let mut needed: FxHashSet<VarId> = nest.iter().flat_map(walk::free_vars_stmt).collect();
        let inner_def = local_def(&level.body, var(&level.body.result[level.at.0])?)?;
        let mut stmts = closure(&level.body.stmts, &mut needed, Some(inner_def))?;
        if ctx.stmts_can_fail(&stmts) {
            return None;
        }
        let acc = nest_init(&nest)?;
        let result = Atom::Var(nest.last()?.binds[0].var);
        stmts.append(&mut nest);
        let mut trips = vec![];
        let n = super::loops::materialized(&level.size, &mut trips, ctx);
        trips.extend(counted(level.ivar, n, acc, Block { stmts, result: vec![result] }, &ty, ctx));
        nest = trips;
    }
    // the outermost loop starts from `dest`; every binder is renamed so the
    // copies live beside the nest they came from
    let top = nest_init(&nest)?;
    let result = Atom::Var(nest.last()?.binds[0].var);
    let mut subst = rustc_hash::FxHashMap::default();
    subst.insert(top, dest);
    let copy = super::copy_block(&Block { stmts: nest, result: vec![result] }, subst, ctx);
    Some((copy.stmts, copy.result[0]))
}

/// `loop acc = ? for i < n { body }` as a statement list; the initial value
/// is a placeholder variable that [`nest_init`] finds and replaces.
fn counted(ivar: VarId, n: Atom, acc: VarId, body: Block, ty: &Type, ctx: &mut Ctx) -> Vec<Stmt> {
    let (out, init) = (ctx.fresh("acc"), ctx.fresh("acc"));
    vec![Stmt {
        binds: vec![Binder { var: out, ty: ty.clone() }],
        expr: Expr::Loop {
            params: vec![Binder { var: acc, ty: ty.clone() }],
            init: vec![Atom::Var(init)],
            kind: LoopKind::Count { ivar, n, down: false },
            body,
        },
        loc: None,
    }]
}

/// The placeholder initial value of the nest's last statement (a loop).
fn nest_init(nest: &[Stmt]) -> Option<VarId> {
    match &nest.last()?.expr {
        Expr::Loop { init, .. } => var(&init[0]),
        _ => None,
    }
}
