//! Map-reduce and map-scan fusion: a `for` consumed by a reduction or a
//! scan whose operator is not `add` from zero (that one is
//! `fuse_reduce_for`, an accumulating `for`). The consumer becomes a
//! counted `loop` that computes one element of the `for` per step and
//! combines it at once, so the `for`'s array is never built.
//!
//! Exactness: the interpreter folds a reduction or scan left to right from
//! the neutral element, `acc = op(acc, x_i)` for i = 0, 1, … (a scan keeps
//! every `acc`: `out[0] = op(ne, x_0)`), with the same scalar operations
//! as the primitives `add`, `mul`, `max`, `min` (NaN handling included).
//! The loop does exactly that.
//!
//! Trade-off (C backend): an outermost `for` and a one-dimensional
//! built-in reduction are parallel (OpenMP) when several threads are asked
//! for; the loop is sequential. A scan is sequential in C anyway, so only
//! the `for`'s elements lose their parallelism there. The rules therefore
//! fire only where the loop pays (see `fused_for`); docs/OPTIMISER.md has
//! the measurements.

use super::{bind, copy_block, single};
use crate::ir::{Atom, Binder, Block, Expr, Loc, LoopKind, Prim, ReduceOp, Scalar, Size, Stmt, Type, VarId};
use crate::opt::rule::{Ctx, Rule};
use rustc_hash::FxHashMap;

pub const RULES: &[Rule] = &[
    Rule::on_stmt(
        "fuse_fold_for",
        "`reduce op ne (for i < n. body)` with op `mul`, a lambda, or `add` from anything but the literal 0 (`max`/`min`: `fuse_minmax_for`) → a counted loop carrying the accumulator: body; acc = op(acc, x_i), left to right from ne as the interpreter's reduce; the `for` is read only here, once, and cannot fail; inside a `for` (sequential in C), or for elements of a few additions, multiplications and reads (an outermost `for` of costly elements stays parallel)",
        fuse_fold_for,
    ),
    Rule::on_stmt(
        "fuse_minmax_for",
        "`reduce max/min ne (for i < n. body)` → a counted loop carrying the accumulator, under the conditions of `fuse_fold_for`; not in the default schedule: reverse mode of the loop (a derivative built on demand from an optimised entry) saves every step where that of `maximum` over an array routes the cotangent to its arg-extremum",
        fuse_minmax_for,
    ),
    Rule::on_stmt(
        "fuse_scan_for",
        "`scan op ne (for i < n. body)` (a built-in op on scalars, or a lambda) → a counted loop carrying the running value and the output, written in place with `update` at each step: out[i] = acc = op(acc, x_i) from ne; the `for` is read only here, once, and cannot fail; inside a `for`, or for elements of a few additions, multiplications and reads (as `fuse_fold_for`)",
        fuse_scan_for,
    ),
];

/// Where the loop's `update` would report an error (never: the index is
/// the loop's own counter, below the output's size).
fn counter_loc() -> Loc {
    Loc { file: "<optimiser>".into(), line: 0, col: 0 }
}

/// The one-result `for` read only by the consumer at `s` (once, outside
/// any loop around the consumer) that cannot fail, when the consumer's
/// operand is `x`: its index, size and body. Only where the sequential
/// loop pays: inside a `for` (whose body the C backend runs sequentially
/// anyway), or when the element costs a few additions, multiplications and
/// reads (the loop is then bound by memory, and it no longer writes and
/// reads back the array). An outermost `for` of costlier elements stays
/// parallel: with 2 threads, `prod (for i. exp (sin x_i · 0.001))` at
/// n = 10⁶ took 12.7 ms unfused and 17.8 ms fused.
fn fused_for(x: &Atom, ctx: &Ctx) -> Option<(VarId, Size, Block)> {
    let Atom::Var(x) = x else { return None };
    if ctx.uses(*x) != 1 || ctx.loop_depth_to(*x) != Some(0) {
        return None;
    }
    let def = ctx.def(*x)?;
    let Expr::For { ivar, size, body } = &def.expr else { return None };
    if def.binds.len() != 1 || ctx.can_fail(def) {
        return None;
    }
    if !ctx.in_parallel_loop() && !super::fusion::cheap_to_recompute(body, &mut super::fusion::RECOMPUTE_BUDGET.clone()) {
        return None;
    }
    Some((*ivar, size.clone(), body.clone()))
}

/// The loop's trip count as an atom: statements computing it and the atom.
fn count_atom(size: &Size, ctx: &mut Ctx) -> (Vec<Stmt>, Atom) {
    let mut stmts = vec![];
    let n = size.materialize(&mut |p, args| {
        let v = ctx.fresh("n");
        stmts.push(bind(v, Type::scalar(Scalar::I64), Expr::Prim(p, args)));
        Atom::Var(v)
    });
    (stmts, n)
}

/// The body of one step: the `for`'s body at index `i` (renamed fresh),
/// then `acc' = op(acc, x_i)`. Returns the statements and `acc'`.
fn step(op: &ReduceOp, acc: Atom, elem: &Type, (ivar, body): (VarId, &Block), i: VarId, ctx: &mut Ctx) -> Option<(Vec<Stmt>, Atom)> {
    let copy = copy_block(body, FxHashMap::from_iter([(ivar, Atom::Var(i))]), ctx);
    let x = copy.result[0];
    let mut stmts = copy.stmts;
    let prim = match op {
        ReduceOp::Add => Prim::Add,
        ReduceOp::Mul => Prim::Mul,
        ReduceOp::Max => Prim::Max,
        ReduceOp::Min => Prim::Min,
        ReduceOp::Lambda(l) => {
            let [pa, px] = l.params.as_slice() else { return None };
            let [_] = l.body.result.as_slice() else { return None };
            let op = copy_block(&l.body, FxHashMap::from_iter([(pa.var, acc), (px.var, x)]), ctx);
            stmts.extend(op.stmts);
            return Some((stmts, op.result[0]));
        }
    };
    // the built-in operators combine scalars (elementwise on arrays, which
    // this rule leaves alone)
    if elem.rank() != 0 || elem.elem == Scalar::Bool {
        return None;
    }
    let next = ctx.fresh("acc");
    stmts.push(bind(next, elem.clone(), Expr::Prim(prim, vec![acc, x])));
    Some((stmts, Atom::Var(next)))
}

fn fuse_fold_for(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    match &s.expr {
        Expr::Reduce { op: ReduceOp::Max | ReduceOp::Min, .. } => None,
        _ => fold_loop(s, ctx),
    }
}

fn fuse_minmax_for(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    match &s.expr {
        Expr::Reduce { op: ReduceOp::Max | ReduceOp::Min, .. } => fold_loop(s, ctx),
        _ => None,
    }
}

/// A reduction of a `for` as a counted loop carrying the accumulator.
fn fold_loop(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Reduce { op, ne, arrs } = &s.expr else { return None };
    let ([ne], [x]) = (ne.as_slice(), arrs.as_slice()) else { return None };
    // `reduce add (0)` is `fuse_reduce_for`'s (an accumulating `for`, parallel in C);
    // other float sums and products keep their fixed order (LANGUAGE.md §10),
    // which a left-to-right loop would change
    if *op == ReduceOp::Add && super::is_lit(ne, 0.0) || matches!(op, ReduceOp::Add | ReduceOp::Mul) && y.ty.elem.is_float() {
        return None;
    }
    let (ivar, size, body) = fused_for(x, ctx)?;
    let (op, ne) = (op.clone(), *ne);
    let acc = ctx.fresh("acc");
    let i = ctx.fresh_like(ivar);
    let (stmts, next) = step(&op, Atom::Var(acc), &y.ty, (ivar, &body), i, ctx)?;
    let (mut out, n) = count_atom(&size, ctx);
    let kind = LoopKind::Count { ivar: i, n, down: false };
    out.push(Stmt {
        binds: vec![y.clone()],
        expr: Expr::Loop { params: vec![Binder { var: acc, ty: y.ty.clone() }], init: vec![ne], kind, body: Block { stmts, result: vec![next] } },
        loc: s.loc.clone(),
    });
    Some(out)
}

fn fuse_scan_for(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = single(s)?;
    let Expr::Scan { op, ne, arrs } = &s.expr else { return None };
    let ([ne], [x]) = (ne.as_slice(), arrs.as_slice()) else { return None };
    let (ivar, size, body) = fused_for(x, ctx)?;
    let (op, ne) = (op.clone(), *ne);
    let elem = y.ty.row();
    let (acc, buf) = (ctx.fresh("acc"), ctx.fresh("scan"));
    let i = ctx.fresh_like(ivar);
    let (mut stmts, next) = step(&op, Atom::Var(acc), &elem, (ivar, &body), i, ctx)?;
    let written = ctx.fresh("scan");
    stmts.push(bind(written, y.ty.clone(), Expr::Update { arr: Atom::Var(buf), idx: Atom::Var(i), val: next, loc: counter_loc() }));
    let (mut out, n) = count_atom(&size, ctx);
    // the output starts as n copies of ne (each element is written once);
    // `replicate` of a row needs the row as a variable, which `ne` is
    let init = ctx.fresh("scan");
    let last = ctx.fresh("acc");
    out.push(bind(init, y.ty.clone(), Expr::Replicate { n, val: ne }));
    let kind = LoopKind::Count { ivar: i, n, down: false };
    out.push(Stmt {
        binds: vec![y.clone(), Binder { var: last, ty: elem.clone() }],
        expr: Expr::Loop {
            params: vec![Binder { var: buf, ty: y.ty.clone() }, Binder { var: acc, ty: elem }],
            init: vec![Atom::Var(init), ne],
            kind,
            body: Block { stmts, result: vec![Atom::Var(written), next] },
        },
        loc: s.loc.clone(),
    });
    Some(out)
}
