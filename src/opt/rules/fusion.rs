//! Fusion (paper 001 Fig. 8c): reading an element of an array built by a
//! `for` (pull fusion, which also fuses a `for` consumed by a `for`),
//! of `iota`, `replicate` and `transpose`; transposes of transposes; a
//! `for` that copies an array; a `for` consumed by `reduce add`.

use super::{bind, copy_block, single};
use crate::ir::{Atom, Binder, Block, Check, Expr, ReduceOp, Size, Stmt, Type, VarId, walk};
use crate::opt::rule::{Ctx, Rule};
use rustc_hash::{FxHashMap, FxHashSet};

pub const RULES: &[Rule] = &[
    Rule::on_stmt(
        "fuse_index_for",
        "`(for j < n. body)[i, …]` → the part of body the result needs, with j := i, then `[…]`; when i is proven in bounds and the copy costs no more than building the element: it only moves data, or costs a few additions per element (rematerialisation instead of a stored array), or the array is read once, where it is built or in a loop over its index",
        fuse_index_for,
    ),
    Rule::on_stmt(
        "fuse_index_unflatten",
        "`(unflatten n m F)[i, j, …]` → F's element `i*m + j`, then `[…]`, where F is a `for` read only by the reshape, which cannot fail (sizes agree), i < n and j < m are proven, and the read is worth fusing as for `fuse_index_for`: the array and its reshape then go",
        fuse_index_unflatten,
    ),
    Rule::on_stmt(
        "fuse_index_flatten",
        "`(flatten F)[k, …]` outside loops, with `F = for i < n. (S; for j < m. B)` → `S; B` with i := k / m, j := k % m, then `[…]`, where F is read only by the reshape and cannot fail, S only reads, k < n*m is proven, and the read is worth fusing as for `fuse_index_for` (in a loop over k the division and remainder per element cost more than the array)",
        fuse_index_flatten,
    ),
    Rule::on_stmt("index_iota", "`(iota n)[i]` → `i` (i proven in bounds)", index_iota),
    Rule::on_stmt("index_replicate", "`(replicate n v)[i, …]` → `v[…]` (i proven in bounds)", index_replicate),
    Rule::on_stmt("index_array_lit", "`[a0, a1, …][k, …]` with k a literal in range → `ak[…]` (the check, if any, would pass)", index_array_lit),
    Rule::on_stmt("transpose_transpose", "`transpose (transpose x)` → `x`", transpose_transpose),
    Rule::on_stmt(
        "index_transpose",
        "`(transpose a)[i, j, …]` → `a[j, i, …]`; not where the innermost loop runs over j (the copy made those reads contiguous) nor inside a loop whose index is not i",
        index_transpose,
    ),
    Rule::on_stmt(
        "slice_for",
        "`(for i < n. body)[lo:hi]` (checked or proven) → `for i' < hi - lo. body[i := i' + lo]`, for a `for` that only moves data or is read only here",
        slice_for,
    ),
    Rule::on_stmt(
        "transpose_for",
        "`transpose (for i < n. for j < m. e)` → `for j < m. for i < n. e` (loop interchange instead of a copy), for a `for` that only moves data or is read only here",
        transpose_for,
    ),
    Rule::on_stmt("for_identity", "`for i < n. a[…, i]` (a's axis has size n, the other indices fixed and proven) → `a[…]`", for_identity),
    Rule::on_stmt(
        "fuse_reduce_for",
        "`reduce add (0) (for i. body)` → an accumulating `for` that adds each iteration's value instead of building the array (same additions, same order)",
        fuse_reduce_for,
    ),
    Rule::on_block_stmts(
        "fuse_consumer_for",
        "vertical fusion: `let a = for i < n. A; …; for i' < n. (… a[i', r…] …)` → the row of `a` computed in the second loop, where it reads `a` (and any other stacked result of the first) only at its index and is its only reader, and neither loop is a contraction: either all of the first loop moves in (nothing between reads it, neither can fail), or only the part the second reads (it cannot fail and shares with what stays at most a few scalar operations)",
        fuse_consumer_for,
    ),
    Rule::on_block_stmts(
        "store_recomputed",
        "`let s = for i < n. (…; let t = f(…); …); …; let r = for j < n. (…; let u = f(…)[i := j]; …)` with `f` a maths function (`exp`, `log`, `tanh`, …) of the index and of values from outside the loops, computed alike at the top of both bodies → the first loop also stacks `t` into a table and the second reads `u = table[j]`, in a block that runs once and where the first loop is no contraction: reverse mode's second sweep recomputes the forward sweep's `exp (x[i] - m)`",
        store_recomputed,
    ),
    Rule::on_block_stmts(
        "fuse_sibling_for",
        "horizontal fusion: two `for`s over the same size in one block that read a common array at their index (`x[i, …]`), the later one not depending on the earlier, neither able to fail → one `for` binding both results (placed at the later one); `cse` then reads `x[i]` once",
        fuse_sibling_for,
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
pub(crate) const RECOMPUTE_BUDGET: usize = 6;

/// A slice that costs a few additions, multiplications and reads per
/// element: recomputing it where it is read is about as cheap as storing
/// and reading it back, and stores nothing (reverse mode's residuals).
pub(crate) fn cheap_to_recompute(b: &Block, budget: &mut usize) -> bool {
    // integer arithmetic on values from outside this block (`m - 1`) is
    // free: `licm` moves it out of the loop it is copied into
    let local: rustc_hash::FxHashSet<VarId> = b.stmts.iter().flat_map(|s| s.binds.iter().map(|x| x.var)).collect();
    let invariant_int = |s: &Stmt| {
        matches!(&s.expr, Expr::Prim(_, xs) if xs.iter().all(|x| !matches!(x, Atom::Var(v) if local.contains(v))))
            && s.binds.iter().all(|x| x.ty == Type::scalar(crate::ir::Scalar::I64))
    };
    b.stmts.iter().all(|s| {
        if invariant_int(s) {
            return true;
        }
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        match &s.expr {
            Expr::Atom(_) | Expr::Index { .. } => true,
            Expr::Prim(p, _) => matches!(
                p,
                crate::ir::Prim::Add
                    | crate::ir::Prim::Sub
                    | crate::ir::Prim::Mul
                    | crate::ir::Prim::Neg
                    | crate::ir::Prim::Select
                    | crate::ir::Prim::Eq
                    | crate::ir::Prim::Lt
                    | crate::ir::Prim::Le
                    | crate::ir::Prim::Gt
                    | crate::ir::Prim::Ge
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

/// `fuse_index_for`'s cost test: whether a read of the `for` `def`
/// should copy `slice` (the part of its body that computes the element
/// read). `reader` is the array read (the `for`'s result, or a reshape of
/// it): how often it is read, how many loops lie between its definition
/// and the read, and whether the read runs at most once per element of
/// the array (outside loops, or in loops over the read's indices: `for i
/// < n. a[i]`).
fn worth_fusing(def: &Stmt, slice: &Block, (uses, depth, per_element): (u32, Option<usize>, bool), ctx: &Ctx) -> bool {
    // each element is computed at most once, as building the array would;
    // but a short row in a parallel loop's body whose elements run loops of
    // their own stays: fused, each element's loop would run inside the
    // reader's, which saves one store and load per element and costs the C
    // backend its row form (GMM's `Q·x`, each element a triangle's sum,
    // read once by a sum of squares: 73 → 83 ms fused)
    let runs_loop = slice.stmts.iter().any(|st| matches!(st.expr, Expr::For { .. } | Expr::ForAcc { .. } | Expr::Loop { .. }));
    let once = uses == 1 && def.binds.len() == 1 && per_element && !(runs_loop && def.binds.first().is_some_and(|b| ctx.defined_in_parallel_loop(b.var)));
    let recompute = uses == 1 && cheap_to_recompute(slice, &mut RECOMPUTE_BUDGET.clone());
    // a copy read many times inside loops may be there for locality (a
    // transpose): reading through it would make those reads strided
    let moves = moves_data(slice) && (uses == 1 || depth == Some(0));
    // a `for` that can fail stays (dce keeps it), so fusing is only worth a cheap copy
    moves || recompute || (once && !ctx.def_can_fail(def))
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
    let depth = ctx.loop_depth_to(*a);
    let per_element = depth == Some(0) || depth == Some(1) && ctx.innermost_loop().is_some_and(|(i, n)| idx[0] == Atom::Var(i) && n == size);
    // or in a nest `for i_1 … i_k` reading `a[i_1, …, i_k]`, each loop over its axis
    // (not a contraction's nest: fused into its reader, the kernel's product
    // would become scalar loops again)
    let per_element = per_element || depth.is_some_and(|k| k >= 2 && over_own_axes(k, *a, idx, ctx)) && !contraction_shaped(def);
    if !worth_fusing(def, &slice, (ctx.uses(*a), depth, per_element), ctx) {
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

/// Whether the `k` loops around the position (outermost first) are over
/// the first `k` axes of `a`, and `idx` reads `a` at their indices.
fn over_own_axes(k: usize, a: VarId, idx: &[Atom], ctx: &Ctx) -> bool {
    let loops = ctx.loops_around(k);
    let Some(ty) = ctx.type_of(&Atom::Var(a)) else { return false };
    loops.len() == k && idx.len() >= k && (0..k).all(|l| idx[l] == Atom::Var(loops[k - 1 - l].0) && ty.shape.get(l) == Some(loops[k - 1 - l].1))
}

/// The `for` binding `a` as result `j` (a stacked result, of a `for` or of
/// an accumulating `for`): its index, size, the body's slice for `a`, and
/// the statement.
fn stacked_for<'c>(a: VarId, ctx: &'c Ctx) -> Option<(VarId, &'c Size, Block, &'c Stmt)> {
    let def = ctx.def(a)?;
    let j = def.binds.iter().position(|b| b.var == a)?;
    match &def.expr {
        Expr::For { ivar, size, body } => Some((*ivar, size, slice_block(body, &[j]), def)),
        Expr::ForAcc { ivar, size, body, acc } if !acc[j] => Some((*ivar, size, slice_block(body, &[j]), def)),
        _ => None,
    }
}

/// The onehot marks `fuse_index_for` carries from a fused array to what
/// reads it.
fn carry_onehot(a: VarId, y: VarId, r: Atom, ctx: &mut Ctx) {
    if ctx.is_onehot(a) {
        ctx.mark_onehot(y);
        if let Atom::Var(v) = r {
            ctx.mark_onehot(v);
        }
    }
}

/// `(unflatten n m F)[i, j, r…]` where `F` is a local `for` read only by
/// the reshape → F's element `i*m + j`, then `[r…]`.
fn fuse_index_unflatten(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Index { arr: Atom::Var(u), idx, checks } = &s.expr else { return None };
    if idx.len() < 2 {
        return None;
    }
    let udef = ctx.def(*u)?;
    let Expr::Unflatten { arr: Atom::Var(a), m, .. } = &udef.expr else { return None };
    let (a, m) = (*a, *m);
    let ushape = single(udef)?.ty.shape.clone();
    // the reshape must be able to go once nothing reads it, and the read
    // must not be able to fail (a failing read stays as it was)
    if ctx.can_fail(udef) || !in_bounds(&checks[0], &idx[0], ushape.first(), ctx) || !in_bounds(&checks[1], &idx[1], ushape.get(1), ctx) {
        return None;
    }
    let (ivar, _, slice, def) = stacked_for(a, ctx)?;
    // once per element: outside loops, in a loop over i < n, or in `for i < n. for j < m`
    let depth = ctx.loop_depth_to(*u);
    let over = |k: usize, l: Option<&(VarId, &Size)>| l.is_some_and(|(v, n)| idx[k] == Atom::Var(*v) && Some(*n) == ushape.get(k));
    let loops = ctx.loops_around(2);
    let per_element = match depth {
        Some(0) => true,
        Some(1) => over(0, loops.first()),
        Some(2) => over(0, loops.get(1)) && over(1, loops.first()),
        _ => false,
    };
    if ctx.uses(a) != 1 || ctx.def_can_fail(def) || !worth_fusing(def, &slice, (ctx.uses(*u), depth, per_element), ctx) {
        return None;
    }
    let int = Type::scalar(crate::ir::Scalar::I64);
    let (row, k) = (ctx.fresh("row"), ctx.fresh("k"));
    let mut out = vec![
        bind(row, int.clone(), Expr::Prim(crate::ir::Prim::Mul, vec![idx[0], m])),
        bind(k, int, Expr::Prim(crate::ir::Prim::Add, vec![Atom::Var(row), idx[1]])),
    ];
    let copy = copy_block(&slice, FxHashMap::from_iter([(ivar, Atom::Var(k))]), ctx);
    let r = copy.result[0];
    carry_onehot(a, y.var, r, ctx);
    out.extend(copy.stmts);
    out.push(rest_index(y, r, &idx[2..], &checks[2..]));
    Some(out)
}

/// `(flatten F)[k, r…]` where `F = for i < n. (S; for j < m. B)` is a
/// local `for` read only by the reshape and `S` only reads → `S; B` with
/// `i := k / m`, `j := k % m`, then `[r…]`.
fn fuse_index_flatten(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Index { arr: Atom::Var(v), idx, checks } = &s.expr else { return None };
    let vdef = ctx.def(*v)?;
    let Expr::Flatten(Atom::Var(a)) = &vdef.expr else { return None };
    let a = *a;
    let vshape = single(vdef)?.ty.shape.clone();
    if !in_bounds(&checks[0], &idx[0], vshape.first(), ctx) {
        return None;
    }
    let (ivar, _, slice, def) = stacked_for(a, ctx)?;
    let m_size = ctx.type_of(&Atom::Var(a))?.shape.get(1)?.clone();
    let m = m_size.as_atom()?;
    // the element's slice: S (reads and copies), then the row's `for`
    let [pre @ .., inner] = slice.stmts.as_slice() else { return None };
    let (Expr::For { ivar: jvar, size: inner_m, body: b }, [Atom::Var(r)]) = (&inner.expr, slice.result.as_slice()) else { return None };
    if inner.binds.len() != 1 || inner.binds[0].var != *r || *inner_m != m_size || !pre.iter().all(|st| matches!(st.expr, Expr::Atom(_) | Expr::Index { .. })) {
        return None;
    }
    let jvar = *jvar;
    let elem = Block { stmts: pre.iter().chain(&b.stmts).cloned().collect(), result: b.result.clone() };
    // only reads outside loops (over the reshape's definition): a loop over
    // every k would pay a division and a remainder per element to save a
    // store and a load, which made the C code twice as slow (n = m = 1000);
    // a read outside loops computes one element instead of n*m
    if ctx.loop_depth_to(*v) != Some(0) || ctx.uses(a) != 1 || ctx.def_can_fail(def) || !worth_fusing(def, &elem, (ctx.uses(*v), Some(0), true), ctx) {
        return None;
    }
    // k < n*m, so m > 0: neither the division nor the remainder fails
    let int = Type::scalar(crate::ir::Scalar::I64);
    let (q, rem) = (ctx.fresh("row"), ctx.fresh("col"));
    let mut out =
        vec![bind(q, int.clone(), Expr::Prim(crate::ir::Prim::Div, vec![idx[0], m])), bind(rem, int, Expr::Prim(crate::ir::Prim::Rem, vec![idx[0], m]))];
    let copy = copy_block(&elem, FxHashMap::from_iter([(ivar, Atom::Var(q)), (jvar, Atom::Var(rem))]), ctx);
    let x = copy.result[0];
    carry_onehot(a, y.var, x, ctx);
    out.extend(copy.stmts);
    out.push(rest_index(y, x, &idx[1..], &checks[1..]));
    Some(out)
}

fn index_iota(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Index { arr, idx, checks } = &s.expr else { return None };
    let Expr::Iota { n } = ctx.def_expr(arr)? else { return None };
    let n = crate::ir::Size::of_atom(n)?;
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

fn index_array_lit(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Index { arr, idx, checks } = &s.expr else { return None };
    let Expr::ArrayLit(elems) = ctx.def_expr(arr)? else { return None };
    let Some(Atom::Lit(crate::ir::Lit::I64(k))) = idx.first() else { return None };
    let elem = *elems.get(usize::try_from(*k).ok()?)?;
    Some(vec![rest_index(y, elem, &idx[1..], &checks[1..])])
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
    // a transpose copied once and read along its rows in an inner loop is
    // faster than strided reads of the original: keep it then
    let innermost = ctx.innermost_loop().map(|(i, _)| Atom::Var(i));
    let reads_rows = innermost.is_some() && innermost == idx.get(1).copied() && idx[0] != idx[1];
    let in_loop = super::var(arr).and_then(|v| ctx.loop_depth_to(v)).is_none_or(|d| d > 0);
    if reads_rows || in_loop && innermost != Some(idx[0]) {
        return None;
    }
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
    if idx[..last].contains(&Atom::Var(*ivar)) {
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
    if def.binds.len() != 1 || ctx.def_can_fail(def) {
        return None;
    }
    let (ivar, size, body) = (*ivar, size.clone(), body.clone());
    let fresh_i = ctx.fresh_like(ivar);
    let body = copy_block(&body, FxHashMap::from_iter([(ivar, Atom::Var(fresh_i))]), ctx);
    Some(vec![Stmt { binds: vec![sum.clone()], expr: Expr::ForAcc { ivar: fresh_i, size, body, acc: vec![true] }, loc: s.loc.clone() }])
}

/// Whether the `for` defining `a` may be copied into a reader that needs
/// every element once: it only moves data, or it is read once where it is
/// built and computes nothing else.
fn copyable_whole(def: &Stmt, a: crate::ir::VarId, ctx: &Ctx) -> bool {
    let Expr::For { body, .. } = &def.expr else { return false };
    moves_data(body) || (ctx.uses(a) == 1 && def.binds.len() == 1 && ctx.loop_depth_to(a) == Some(0) && !ctx.def_can_fail(def))
}

fn slice_for(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Slice { arr: Atom::Var(a), lo, check: None, .. } = &s.expr else { return None };
    let def = ctx.def(*a)?;
    if !copyable_whole(def, *a, ctx) {
        return None;
    }
    let Expr::For { ivar, body, .. } = &def.expr else { return None };
    let j = def.binds.iter().position(|b| b.var == *a)?;
    let (ivar, lo) = (*ivar, *lo);
    let slice = slice_block(body, &[j]);
    let i2 = ctx.fresh_like(ivar);
    let shifted = ctx.fresh("t");
    let mut copy = copy_block(&slice, FxHashMap::from_iter([(ivar, Atom::Var(shifted))]), ctx);
    copy.stmts.insert(0, bind(shifted, Type::scalar(crate::ir::Scalar::I64), Expr::Prim(crate::ir::Prim::Add, vec![Atom::Var(i2), lo])));
    let size = y.ty.shape.first()?.clone();
    Some(vec![Stmt { binds: vec![y.clone()], expr: Expr::For { ivar: i2, size, body: copy }, loc: s.loc.clone() }])
}

fn transpose_for(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Transpose(Atom::Var(a)) = &s.expr else { return None };
    let def = ctx.def(*a)?;
    if !copyable_whole(def, *a, ctx) || def.binds.len() != 1 {
        return None;
    }
    // for i < n. (S; for j < m. B) with S not reading j → for j < m. for i < n. (S; B)
    let Expr::For { ivar: i, size: n, body } = &def.expr else { return None };
    let [.., inner] = body.stmts.as_slice() else { return None };
    let (Expr::For { ivar: j, size: m, body: b }, [Atom::Var(r)]) = (&inner.expr, body.result.as_slice()) else { return None };
    if inner.binds.len() != 1 || inner.binds[0].var != *r || m.vars().contains(i) {
        return None;
    }
    // what comes before the inner loop will run m times: only reads and copies
    if !body.stmts[..body.stmts.len() - 1].iter().all(|st| matches!(st.expr, Expr::Atom(_) | Expr::Index { .. })) {
        return None;
    }
    let (i, j, n, m) = (*i, *j, n.clone(), m.clone());
    let mut outer_body = Block { stmts: body.stmts[..body.stmts.len() - 1].to_vec(), result: vec![] };
    outer_body.stmts.extend(b.stmts.iter().cloned());
    outer_body.result = b.result.clone();
    let row = Type { elem: y.ty.elem, shape: y.ty.shape[1..].to_vec() };
    let inner_var = ctx.fresh("row");
    let nest = Block {
        stmts: vec![Stmt { binds: vec![crate::ir::Binder { var: inner_var, ty: row }], expr: Expr::For { ivar: i, size: n, body: outer_body }, loc: None }],
        result: vec![Atom::Var(inner_var)],
    };
    let copy = copy_block(&nest, FxHashMap::default(), ctx);
    let j2 = ctx.fresh_like(j);
    let copy = copy_block(&copy, FxHashMap::from_iter([(j, Atom::Var(j2))]), ctx);
    Some(vec![Stmt { binds: vec![y.clone()], expr: Expr::For { ivar: j2, size: m, body: copy }, loc: s.loc.clone() }])
}

/// The reads `a[i, r…]` at the top level of a loop body over `i`, of an
/// array `a` and indices `r…` from outside the body: (a, r…, checks).
fn row_reads(body: &Block, i: VarId) -> Vec<(VarId, Vec<Atom>, Vec<Check>)> {
    let local = walk::bound_vars_block(body);
    let outer = |x: &Atom| !matches!(x, Atom::Var(v) if *v == i || local.contains(v));
    body.stmts
        .iter()
        .filter_map(|s| match &s.expr {
            Expr::Index { arr: Atom::Var(a), idx, checks } if idx.first() == Some(&Atom::Var(i)) && !local.contains(a) && idx[1..].iter().all(outer) => {
                Some((*a, idx[1..].to_vec(), checks.clone()))
            }
            _ => None,
        })
        .collect()
}

type LoopParts<'s> = (VarId, &'s Size, &'s Block, Option<&'s Vec<bool>>);

fn loop_parts(s: &Stmt) -> Option<LoopParts<'_>> {
    match &s.expr {
        Expr::For { ivar, size, body } => Some((*ivar, size, body, None)),
        Expr::ForAcc { ivar, size, body, acc } => Some((*ivar, size, body, Some(acc))),
        _ => None,
    }
}

/// Horizontal fusion of statement `j` into the later statement `k`.
fn fuse_sibling_for(b: &Block, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    // inside a loop, fuse only loops that are both invariant or both not:
    // `fission_invariant` would split the others again
    let invariant = |s: &Stmt, ctx: &Ctx| walk::free_vars_stmt(s).iter().all(|v| ctx.outside_innermost_loop(*v));
    let in_loop = ctx.scope_repeats();
    for k in 0..b.stmts.len() {
        let sk = &b.stmts[k];
        let Some((ik, nk, bk, ak)) = loop_parts(sk) else { continue };
        let reads_k = row_reads(bk, ik);
        if reads_k.is_empty() || ctx.can_fail(sk) {
            continue;
        }
        // what the statements after j up to k read
        let mut readers: FxHashSet<VarId> = walk::free_vars_stmt(sk);
        for j in (0..k).rev() {
            let sj = &b.stmts[j];
            if let Some((ij, nj, bj, aj)) = loop_parts(sj)
                && nj == nk
                && !sj.binds.iter().any(|x| readers.contains(&x.var))
                && row_reads(bj, ij).iter().any(|r| reads_k.contains(r))
                && !ctx.can_fail(sj)
                && (!in_loop || invariant(sj, ctx) == invariant(sk, ctx))
            {
                let copy = copy_block(bk, FxHashMap::from_iter([(ik, Atom::Var(ij))]), ctx);
                let mut body = bj.clone();
                body.stmts.extend(copy.stmts);
                body.result.extend(copy.result);
                let binds: Vec<Binder> = sj.binds.iter().chain(&sk.binds).cloned().collect();
                let expr = match (aj, ak) {
                    (None, None) => Expr::For { ivar: ij, size: nj.clone(), body },
                    _ => {
                        let flags = |a: Option<&Vec<bool>>, n: usize| a.cloned().unwrap_or_else(|| vec![false; n]);
                        let acc = [flags(aj, sj.binds.len()), flags(ak, sk.binds.len())].concat();
                        Expr::ForAcc { ivar: ij, size: nj.clone(), body, acc }
                    }
                };
                let fused = Stmt { binds, expr, loc: sj.loc.clone() };
                let mut out = b.stmts.clone();
                out[k] = fused;
                out.remove(j);
                return Some(out);
            }
            readers.extend(walk::free_vars_stmt(sj));
        }
    }
    None
}

/// A statement worth storing rather than computing twice: one scalar
/// from a maths library function (not a division or square root, which
/// cost about what storing and reloading the value costs).
fn expensive_scalar(s: &Stmt) -> bool {
    use crate::ir::Prim;
    matches!((&s.expr, s.binds.as_slice()), (Expr::Prim(p, _), [x]) if x.ty.rank() == 0 && p.row().cost == crate::ir::prim::Cost::Expensive && !matches!(p, Prim::Div | Prim::Sqrt))
}

/// What `a` computes in a loop body over `i`, as a key two bodies share
/// exactly when they compute it alike: `#` for the index, the body's own
/// primitives, reads and copies expanded, anything from outside by its
/// variable (a value the body binds any other way: `None`). At most
/// `budget` nodes.
fn value_key(body: &Block, i: VarId, a: &Atom, budget: &mut u32, out: &mut String) -> Option<()> {
    use std::fmt::Write;
    *budget = budget.checked_sub(1)?;
    let v = match a {
        Atom::Lit(l) => return write!(out, "{l:?}").ok(),
        Atom::Var(v) if *v == i => {
            out.push('#');
            return Some(());
        }
        Atom::Var(v) => *v,
    };
    let Some(def) = super::local_def(body, v) else { return write!(out, "v{}", v.0).ok() };
    if def.binds.len() != 1 {
        return None;
    }
    match &def.expr {
        Expr::Atom(x) => value_key(body, i, x, budget, out),
        Expr::Prim(p, xs) => {
            write!(out, "({}", p.name()).ok()?;
            for x in xs {
                out.push(' ');
                value_key(body, i, x, budget, out)?;
            }
            out.push(')');
            Some(())
        }
        // a checked read in the later loop passed in the earlier one
        Expr::Index { arr, idx, .. } => {
            out.push('[');
            for x in std::iter::once(arr).chain(idx) {
                value_key(body, i, x, budget, out)?;
                out.push(' ');
            }
            out.push(']');
            Some(())
        }
        _ => None,
    }
}

/// The key of what statement `s` of `body` (a loop over `i`) binds, when
/// it depends on the index (an invariant is `licm`'s to hoist, not a table's).
fn stmt_key(body: &Block, i: VarId, s: &Stmt) -> Option<String> {
    let mut key = String::new();
    value_key(body, i, &Atom::Var(s.binds.first()?.var), &mut 64, &mut key)?;
    key.contains('#').then_some(key)
}

/// `store_recomputed`: the earlier of two loops over one size stacks a
/// maths function's value both compute alike at the top of their bodies,
/// and the later one reads it. One pass over the block, the values of the
/// loops met so far kept by size and key (a block of many loops is not
/// compared pair by pair).
fn store_recomputed(b: &Block, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    // a table per run of an enclosing loop would cost an allocation each
    if ctx.scope_repeats() {
        return None;
    }
    let mut earlier: FxHashMap<(Size, String), (usize, Binder)> = FxHashMap::default();
    for k in 0..b.stmts.len() {
        let sk = &b.stmts[k];
        let Some((ik, nk, bk, _)) = loop_parts(sk) else { continue };
        let keys: Vec<(usize, String)> =
            bk.stmts.iter().enumerate().filter(|(_, s)| expensive_scalar(s)).filter_map(|(p, s)| Some((p, stmt_key(bk, ik, s)?))).collect();
        if let Some((p, (j, t))) = keys.iter().find_map(|(p, key)| Some((*p, earlier.get(&(nk.clone(), key.clone()))?.clone()))) {
            return Some(stack_and_read(b, j, t, k, p, ctx));
        }
        if !contraction_shaped(sk) {
            for (p, key) in keys {
                earlier.entry((nk.clone(), key)).or_insert_with(|| (k, bk.stmts[p].binds[0].clone()));
            }
        }
    }
    None
}

/// `b`'s statements with loop `j` also stacking its body's `t` into a new
/// table, and statement `p` of loop `k`'s body reading the table instead.
fn stack_and_read(b: &Block, j: usize, t: Binder, k: usize, p: usize, ctx: &mut Ctx) -> Vec<Stmt> {
    let mut out = b.stmts.clone();
    let sj = &mut out[j];
    let n = loop_parts(sj).map(|(_, n, _, _)| n.clone()).unwrap_or_default();
    let tab = Binder { var: ctx.fresh("tab"), ty: Type { elem: t.ty.elem, shape: vec![n] } };
    sj.binds.push(tab.clone());
    if let Expr::ForAcc { acc, .. } = &mut sj.expr {
        acc.push(false);
    }
    if let Some(body) = walk::sub_blocks_mut(&mut sj.expr).next() {
        body.result.push(Atom::Var(t.var));
    }
    let ik = loop_parts(&out[k]).map(|(i, _, _, _)| i);
    if let (Some(ik), Some(later)) = (ik, walk::sub_blocks_mut(&mut out[k].expr).next()) {
        later.stmts[p].expr = Expr::Index { arr: Atom::Var(tab.var), idx: vec![Atom::Var(ik)], checks: vec![None] };
    }
    out
}

/// A `for` the C backend computes with a contraction kernel (the shape of
/// `backend/c/contract.rs`: its body, or the body of the one loop in it,
/// starts with `for p (add) { x = A[..]; y = B[..]; x * y }`). Fusing such
/// a loop with another would turn the kernel back into scalar loops.
fn contraction_shaped(s: &Stmt) -> bool {
    let dot = |s: Option<&Stmt>| {
        matches!(s.map(|s| &s.expr), Some(Expr::ForAcc { body, acc, .. })
            if acc == &[true] && body.stmts.len() == 3 && matches!(body.stmts[2].expr, Expr::Prim(crate::ir::Prim::Mul, _))
                && body.stmts[..2].iter().all(|st| matches!(st.expr, Expr::Index { .. })))
    };
    let Expr::For { body, .. } = &s.expr else { return false };
    dot(body.stmts.first()) || matches!(body.stmts.as_slice(), [inner] if matches!(&inner.expr, Expr::For { body: b, .. } if dot(b.stmts.first())))
}

/// How `body` (of a loop over `i`) reads each of `arrs`: the reads
/// `a[i, r…]` (at any depth) and all reads.
fn row_read_counts(body: &Block, i: VarId, arrs: &[VarId]) -> (Vec<u32>, Vec<u32>) {
    let (mut rows, mut all) = (vec![0; arrs.len()], vec![0; arrs.len()]);
    walk::for_each_stmt(body, &mut |s| {
        if let Expr::Index { arr: Atom::Var(a), idx, .. } = &s.expr
            && idx[0] == Atom::Var(i)
            && let Some(k) = arrs.iter().position(|x| x == a)
        {
            rows[k] += 1;
        }
    });
    walk::visit_block(
        body,
        &mut |v| {
            if let Some(k) = arrs.iter().position(|x| *x == v) {
                all[k] += 1;
            }
        },
        &mut |_| {},
    );
    (rows, all)
}

/// Replace the reads `a[i, r…]` in `b` (at any depth) of each array `a`
/// of `rows` by reads `row[r…]` of its row (or the row itself).
fn read_rows(b: &mut Block, i: VarId, rows: &FxHashMap<VarId, Atom>) {
    for s in &mut b.stmts {
        if let Expr::Index { arr: Atom::Var(a), idx, checks } = &s.expr
            && idx[0] == Atom::Var(i)
            && let Some(row) = rows.get(a)
        {
            s.expr = if idx.len() == 1 { Expr::Atom(*row) } else { Expr::Index { arr: *row, idx: idx[1..].to_vec(), checks: checks[1..].to_vec() } };
        }
        for sub in walk::sub_blocks_mut(&mut s.expr) {
            read_rows(sub, i, rows);
        }
    }
}

/// Whether statement `p` of `b` cannot fail; for a `for`, its size
/// included: a size not known to be `>= 0` must have been the size of a
/// `for` that ran before it (`Ctx::can_fail` in a block rule also counts
/// the loops after it).
fn cannot_fail_at(b: &Block, p: usize, ctx: &Ctx) -> bool {
    // a `while` loop might not stop: a failure moved after it would become a hang
    let may_hang = matches!(&b.stmts[p].expr, Expr::Loop { kind: crate::ir::LoopKind::While { .. }, .. });
    let Some((_, size, _, _)) = loop_parts(&b.stmts[p]) else { return !ctx.can_fail(&b.stmts[p]) && !may_hang };
    let ran_before = b.stmts[..p].iter().any(|s| loop_parts(s).is_some_and(|(_, n, _, _)| n == size)) || {
        let key = crate::opt::engine::ran_key(size);
        let mut sc = ctx.scope.parent;
        let mut found = false;
        while let Some(s) = sc {
            found |= s.avail.contains_key(&key);
            sc = s.parent;
        }
        found
    };
    !ctx.can_fail(&b.stmts[p]) && (ran_before || ctx.size_nonneg(size))
}

/// Vertical fusion: a `for` `P` whose stacked results a later `for` `C`
/// over the same size reads only at its own index (`a[i, r…]`) is computed
/// inside `C`, one row per iteration, so those results are never stored.
fn fuse_consumer_for(b: &Block, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    // only where the block runs once: arrays built inside a loop are
    // rows, small and in cache, and fusing their loops there would keep
    // `interchange_sum` from reordering the reverse program's nests
    if ctx.scope_repeats() {
        return None;
    }
    // the statements reading each variable bound in the block (one pass:
    // the block may be a whole function of many statements)
    let mut readers: FxHashMap<VarId, Vec<usize>> = FxHashMap::default();
    for (k, s) in b.stmts.iter().enumerate() {
        for v in walk::free_vars_stmt(s) {
            readers.entry(v).or_default().push(k);
        }
    }
    for p in 0..b.stmts.len() {
        let sp = &b.stmts[p];
        let Some((ip, np, bp, ap)) = loop_parts(sp) else { continue };
        if contraction_shaped(sp) {
            continue;
        }
        let pvars: Vec<VarId> = sp.binds.iter().map(|x| x.var).collect();
        let mut later: Vec<usize> = pvars.iter().filter_map(|v| readers.get(v)).flatten().copied().collect();
        later.sort_unstable();
        later.dedup();
        for (nth, &c) in later.iter().enumerate() {
            let sc = &b.stmts[c];
            // whether a statement between P and C reads P
            let between_reads = nth > 0;
            let Some((ic, nc, bc, ac)) = loop_parts(sc) else { continue };
            if nc != np || contraction_shaped(sc) {
                continue;
            }
            let (rows, all) = row_read_counts(bc, ic, &pvars);
            let read: Vec<usize> = (0..pvars.len()).filter(|j| all[*j] > 0).collect();
            // C reads some stacked results of P, each only at its index,
            // and is the only reader of at least one of them
            let stacked = |j: usize| ap.is_none_or(|a| !a[j]);
            if read.is_empty() || read.iter().any(|j| rows[*j] != all[*j] || !stacked(*j)) || !read.iter().any(|j| ctx.uses(pvars[*j]) == all[*j]) {
                continue;
            }
            let only_c = read.iter().all(|j| ctx.uses(pvars[*j]) == all[*j]);
            // (a) all of P moves into C: nothing between reads P, and P
            // cannot fail, or neither C nor what lies between can (P now
            // runs after what lies between, and its iterations interleave
            // with C's: a failure of C would come first)
            let whole = !between_reads && (cannot_fail_at(b, p, ctx) || (p + 1..=c).all(|k| cannot_fail_at(b, k, ctx)));
            // (b) only what C reads moves: P keeps the rest, which must
            // share with it no more than a few scalar operations; the part
            // that moves cannot fail
            let part = !whole && only_c && {
                let slice = slice_block(bp, &read);
                let rest: Vec<usize> = (0..pvars.len()).filter(|j| !read.contains(j) && ctx.uses(pvars[*j]) > 0).collect();
                // a loop that can fail keeps all its results while none is
                // read (`dead_results` leaves it whole): it then shrinks not at all
                let rest = if rest.is_empty() && ctx.def_can_fail(sp) { (0..pvars.len()).collect() } else { rest };
                let shared = kept_by(bp, &rest, ctx);
                let both = Block { stmts: slice.stmts.iter().filter(|s| s.binds.iter().any(|x| shared.contains(&x.var))).cloned().collect(), result: vec![] };
                !ctx.stmts_can_fail(&slice.stmts) && cheap_to_recompute(&both, &mut RECOMPUTE_BUDGET.clone())
            };
            if !whole && !part {
                continue;
            }
            let i = ctx.fresh_like(ic);
            let moved = if whole { bp.clone() } else { slice_block(bp, &read) };
            let pcopy = copy_block(&moved, FxHashMap::from_iter([(ip, Atom::Var(i))]), ctx);
            let mut ccopy = copy_block(bc, FxHashMap::from_iter([(ic, Atom::Var(i))]), ctx);
            let slot = |j: usize| if whole { j } else { read.iter().position(|k| *k == j).unwrap_or(0) };
            let rows: FxHashMap<VarId, Atom> = read.iter().map(|j| (pvars[*j], pcopy.result[slot(*j)])).collect();
            read_rows(&mut ccopy, i, &rows);
            let mut out = b.stmts.clone();
            let flags = |a: Option<&Vec<bool>>, n: usize| a.cloned().unwrap_or_else(|| vec![false; n]);
            let (binds, stmts, result, acc) = if whole {
                let binds: Vec<Binder> = sp.binds.iter().chain(&sc.binds).cloned().collect();
                (
                    binds,
                    [pcopy.stmts, ccopy.stmts].concat(),
                    [pcopy.result, ccopy.result].concat(),
                    [flags(ap, sp.binds.len()), flags(ac, sc.binds.len())].concat(),
                )
            } else {
                (sc.binds.clone(), [pcopy.stmts, ccopy.stmts].concat(), ccopy.result, flags(ac, sc.binds.len()))
            };
            let body = Block { stmts, result };
            let expr =
                if acc.iter().any(|a| *a) { Expr::ForAcc { ivar: i, size: nc.clone(), body, acc } } else { Expr::For { ivar: i, size: nc.clone(), body } };
            out[c] = Stmt { binds, expr, loc: if whole { sp.loc.clone() } else { sc.loc.clone() } };
            if whole {
                out.remove(p);
            }
            return Some(out);
        }
    }
    None
}

/// The binders of the statements of `b` that its results `js` need or that
/// stay because they can fail (`dce` keeps those).
fn kept_by(b: &Block, js: &[usize], ctx: &Ctx) -> FxHashSet<VarId> {
    let mut live: FxHashSet<VarId> = js.iter().filter_map(|j| super::var(&b.result[*j])).collect();
    let mut kept = FxHashSet::default();
    let fails = ctx.failing_stmts(&b.stmts);
    for (s, fails) in b.stmts.iter().zip(fails).rev() {
        if s.binds.iter().any(|x| live.contains(&x.var)) || fails {
            kept.extend(s.binds.iter().map(|x| x.var));
            live.extend(walk::free_vars_stmt(s));
        }
    }
    kept
}
