//! Fusion (paper 001 Fig. 8c): reading an element of an array built by a
//! `for` (pull fusion, which also fuses a `for` consumed by a `for`),
//! of `iota`, `replicate` and `transpose`; transposes of transposes; a
//! `for` that copies an array; a `for` consumed by `reduce add`.

use super::{bind, copy_block, single};
use crate::ir::{Atom, Block, Check, Expr, Lit, ReduceOp, Stmt, Type, walk};
use crate::opt::rule::{Ctx, Rule};
use rustc_hash::FxHashMap;

pub const RULES: &[Rule] = &[
    Rule::on_stmt(
        "fuse_index_for",
        "`(for j < n. body)[i, …]` → the part of body the result needs, with j := i, then `[…]`; when i is proven in bounds and the copy costs no more than building the element: it only moves data, or costs a few additions per element (rematerialisation instead of a stored array), or the array is read once, where it is built or in a loop over its index",
        fuse_index_for,
    ),
    Rule::on_stmt("index_iota", "`(iota n)[i]` → `i` (i proven in bounds)", index_iota),
    Rule::on_stmt("index_replicate", "`(replicate n v)[i, …]` → `v[…]` (i proven in bounds)", index_replicate),
    Rule::on_stmt("transpose_transpose", "`transpose (transpose x)` → `x`", transpose_transpose),
    Rule::on_stmt("index_transpose", "`(transpose a)[i, j, …]` → `a[j, i, …]`", index_transpose),
    Rule::on_stmt("for_identity", "`for i < n. a[…, i]` (a's axis has size n, the other indices fixed and proven) → `a[…]`", for_identity),
    Rule::on_stmt(
        "fuse_reduce_for",
        "`reduce add (0) (for i. body)` → an accumulating `for` that adds each iteration's value instead of building the array (same additions, same order)",
        fuse_reduce_for,
    ),
];

/// Whether index `i` of an access is known in bounds of axis size `n`:
/// proven by `lower` (no check) or by the index being a loop counter over `n`.
fn in_bounds(check: &Check, i: &Atom, n: Option<&crate::ir::Size>, ctx: &Ctx) -> bool {
    check.is_none() || n.is_some_and(|n| ctx.provably_below(i, n))
}

/// A body that only moves data (copies and reads, and `for`s of those
/// returning the value read): reading through it never costs more than
/// building it and reading the result.
fn moves_data(b: &Block) -> bool {
    b.stmts.iter().all(|s| match &s.expr {
        Expr::Atom(_) | Expr::Index { .. } => true,
        Expr::For { body, .. } => moves_data(body),
        _ => false,
    })
}

/// How many statements a recomputed element may cost.
const RECOMPUTE_BUDGET: usize = 6;

/// A slice that costs a few additions, multiplications and reads per
/// element: recomputing it where it is read is about as cheap as storing
/// and reading it back, and stores nothing (reverse mode's residuals).
fn cheap_to_recompute(b: &Block, budget: &mut usize) -> bool {
    b.stmts.iter().all(|s| {
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        match &s.expr {
            Expr::Atom(_) | Expr::Index { .. } => true,
            Expr::Prim(p, _) => matches!(
                p,
                crate::ir::Prim::Add | crate::ir::Prim::Sub | crate::ir::Prim::Mul | crate::ir::Prim::Neg | crate::ir::Prim::Select | crate::ir::Prim::Eq | crate::ir::Prim::Lt | crate::ir::Prim::Le | crate::ir::Prim::Gt | crate::ir::Prim::Ge
            ),
            Expr::For { body, .. } => cheap_to_recompute(body, budget),
            _ => false,
        }
    })
}

/// The statements of `b` that results `js` need, with `for`s that bind
/// other results too cut down to the needed ones; its results are `js`'s.
pub(crate) fn slice_block(b: &Block, js: &[usize]) -> Block {
    let mut live: rustc_hash::FxHashSet<crate::ir::VarId> = js.iter().filter_map(|j| super::var(&b.result[*j])).collect();
    let mut out = vec![];
    for s in b.stmts.iter().rev() {
        let keep: Vec<usize> = (0..s.binds.len()).filter(|k| live.contains(&s.binds[*k].var)).collect();
        if keep.is_empty() {
            continue;
        }
        let s = match &s.expr {
            Expr::For { ivar, size, body } if keep.len() < s.binds.len() => Stmt {
                binds: keep.iter().map(|k| s.binds[*k].clone()).collect(),
                expr: Expr::For { ivar: *ivar, size: size.clone(), body: slice_block(body, &keep) },
                loc: s.loc.clone(),
            },
            Expr::ForAcc { ivar, size, body, acc } if keep.len() < s.binds.len() => Stmt {
                binds: keep.iter().map(|k| s.binds[*k].clone()).collect(),
                expr: Expr::ForAcc { ivar: *ivar, size: size.clone(), body: slice_block(body, &keep), acc: keep.iter().map(|k| acc[*k]).collect() },
                loc: s.loc.clone(),
            },
            _ => s.clone(),
        };
        live.extend(walk::free_vars_stmt(&s));
        out.push(s);
    }
    out.reverse();
    Block { stmts: out, result: js.iter().map(|j| b.result[*j]).collect() }
}

fn rest_index(y: &crate::ir::Binder, arr: Atom, idx: &[Atom], checks: &[Check]) -> Stmt {
    if idx.is_empty() {
        bind(y.var, y.ty.clone(), Expr::Atom(arr))
    } else {
        bind(y.var, y.ty.clone(), Expr::Index { arr, idx: idx.to_vec(), checks: checks.to_vec() })
    }
}

fn fuse_index_for(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Index { arr: Atom::Var(a), idx, checks } = &s.expr else { return None };
    let def = ctx.def(*a)?;
    let j = def.binds.iter().position(|b| b.var == *a)?;
    let (ivar, size, body) = match &def.expr {
        Expr::For { ivar, size, body } => (ivar, size, body),
        // a stacked (not accumulated) result of an accumulating `for`
        Expr::ForAcc { ivar, size, body, acc } if !acc[j] => (ivar, size, body),
        _ => return None,
    };
    if !in_bounds(&checks[0], &idx[0], Some(size), ctx) {
        return None;
    }
    // only what result j needs (of a loop that also computes other results)
    let slice = slice_block(body, &[j]);
    // each element is computed at most once, as building the array would
    let once = ctx.uses(*a) == 1
        && def.binds.len() == 1
        && match ctx.loop_depth_to(*a) {
            Some(0) => true,
            Some(1) => ctx.innermost_loop().is_some_and(|(i, n)| idx[0] == Atom::Var(i) && n == size),
            _ => false,
        };
    let recompute = ctx.uses(*a) == 1 && cheap_to_recompute(&slice, &mut RECOMPUTE_BUDGET.clone());
    if !(moves_data(&slice) || recompute || once) || ctx.can_fail(def) && !moves_data(&slice) && !recompute {
        return None;
    }
    let ivar = *ivar;
    let onehot = ctx.is_onehot(*a);
    let copy = copy_block(&slice, FxHashMap::from_iter([(ivar, idx[0])]), ctx);
    let r = copy.result[0];
    if onehot {
        ctx.mark_onehot(y.var);
        if let Atom::Var(v) = r {
            ctx.mark_onehot(v);
        }
    }
    let mut out = copy.stmts;
    out.push(rest_index(y, r, &idx[1..], &checks[1..]));
    Some(out)
}

fn index_iota(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Index { arr, idx, checks } = &s.expr else { return None };
    let Expr::Iota { n } = ctx.def_expr(arr)? else { return None };
    let n = match n {
        Atom::Var(v) => crate::ir::Size::var(*v),
        Atom::Lit(Lit::I64(c)) => crate::ir::Size::constant(*c),
        _ => return None,
    };
    if idx.len() != 1 || !in_bounds(&checks[0], &idx[0], Some(&n), ctx) || ctx.type_of(&idx[0]).as_ref() != Some(&y.ty) {
        return None;
    }
    Some(vec![bind(y.var, y.ty.clone(), Expr::Atom(idx[0]))])
}

fn index_replicate(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Index { arr, idx, checks } = &s.expr else { return None };
    let arr_ty = ctx.type_of(arr)?;
    let Expr::Replicate { val, .. } = ctx.def_expr(arr)? else { return None };
    let val = *val;
    if !in_bounds(&checks[0], &idx[0], arr_ty.shape.first(), ctx) {
        return None;
    }
    Some(vec![rest_index(y, val, &idx[1..], &checks[1..])])
}

fn transpose_transpose(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Transpose(t) = &s.expr else { return None };
    let Expr::Transpose(x) = ctx.def_expr(t)? else { return None };
    let x = *x;
    (ctx.type_of(&x).as_ref() == Some(&y.ty)).then(|| vec![bind(y.var, y.ty.clone(), Expr::Atom(x))])
}

fn index_transpose(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Index { arr, idx, checks } = &s.expr else { return None };
    if idx.len() < 2 {
        return None;
    }
    let Expr::Transpose(a) = ctx.def_expr(arr)? else { return None };
    let mut idx = idx.clone();
    let mut checks = checks.clone();
    idx.swap(0, 1);
    checks.swap(0, 1);
    Some(vec![bind(y.var, y.ty.clone(), Expr::Index { arr: *a, idx, checks })])
}

fn for_identity(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::For { ivar, size, body } = &s.expr else { return None };
    let ([read], [Atom::Var(r)]) = (body.stmts.as_slice(), body.result.as_slice()) else { return None };
    let Expr::Index { arr, idx, checks } = &read.expr else { return None };
    let last = idx.len() - 1;
    if single(read)?.var != *r || idx[last] != Atom::Var(*ivar) || checks[..last].iter().any(Option::is_some) {
        return None;
    }
    if idx[..last].iter().any(|a| *a == Atom::Var(*ivar)) {
        return None;
    }
    let arr_ty: Type = ctx.type_of(arr)?;
    if arr_ty.shape.get(last) != Some(size) {
        return None;
    }
    let out = if last == 0 {
        bind(y.var, y.ty.clone(), Expr::Atom(*arr))
    } else {
        bind(y.var, y.ty.clone(), Expr::Index { arr: *arr, idx: idx[..last].to_vec(), checks: checks[..last].to_vec() })
    };
    (ctx.type_of(arr).is_some() && (last > 0 || arr_ty == y.ty)).then(|| vec![out])
}

fn fuse_reduce_for(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let sum = single(s)?;
    let Expr::Reduce { op: ReduceOp::Add, ne, arrs } = &s.expr else { return None };
    let ([zero], [Atom::Var(x)]) = (ne.as_slice(), arrs.as_slice()) else { return None };
    if !super::is_lit(zero, 0.0) || ctx.uses(*x) != 1 || ctx.loop_depth_to(*x) != Some(0) {
        return None;
    }
    let def = ctx.def(*x)?;
    let Expr::For { ivar, size, body } = &def.expr else { return None };
    if def.binds.len() != 1 || ctx.can_fail(def) {
        return None;
    }
    let (ivar, size, body) = (*ivar, size.clone(), body.clone());
    let fresh_i = ctx.fresh_like(ivar);
    let body = copy_block(&body, FxHashMap::from_iter([(ivar, Atom::Var(fresh_i))]), ctx);
    Some(vec![Stmt { binds: vec![sum.clone()], expr: Expr::ForAcc { ivar: fresh_i, size, body, acc: vec![true] }, loc: s.loc.clone() }])
}
