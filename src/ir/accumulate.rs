//! Accumulate instead of materialise: a parallel `for` result of rank ≥ 2
//! (one whole array per iteration) read only by a `reduce add` from zero
//! becomes an accumulator result of the `for` ([`Expr::ForAcc`]): each
//! iteration adds into it, so the `[n]`-stacked array is never built.
//!
//! Reverse mode produces this shape wherever an array from outside a
//! parallel `for` gets a whole-array cotangent in every iteration (`sum a`
//! in the body, or a block the loop does not move: `matmul`'s `b` under
//! the loop over rows of `a`): without this pass the gradient of a
//! matrix-product loss held an `[n][k][m]` array. The sum is the same
//! (zero plus each iteration's value in index order, as `reduce add` does);
//! the interpreter adds in place, the C backend uses per-thread
//! accumulators combined at the end.
//!
//! It runs last in the `ad` stage, after every derivative is expanded, so
//! no transform has to differentiate an accumulator.

use super::{Atom, Block, Expr, Function, Lit, LoopKind, ReduceOp, Stmt, VarId};
use rustc_hash::{FxHashMap, FxHashSet};

/// Rewrite every eligible `for` + `reduce add` pair of `f`.
pub fn function(f: &mut Function) {
    let mut uses: FxHashMap<VarId, usize> = FxHashMap::default();
    super::walk::visit_block(&f.body, &mut |v| *uses.entry(v).or_default() += 1, &mut |_| {});
    let pinned: FxHashSet<VarId> = f.stored.iter().copied().collect();
    block(&mut f.body, &uses, &pinned);
}

fn is_zero(a: &Atom) -> bool {
    match a {
        Atom::Lit(Lit::F64(x)) => x.to_bits() == 0,
        Atom::Lit(Lit::F32(x)) => x.to_bits() == 0,
        Atom::Lit(Lit::I64(x)) => *x == 0,
        Atom::Lit(Lit::I32(x)) => *x == 0,
        _ => false,
    }
}

/// The array `s` sums when it is `reduce add (0) x` of one array.
fn summed(s: &Stmt) -> Option<VarId> {
    match &s.expr {
        Expr::Reduce { op: ReduceOp::Add, ne, arrs } if s.binds.len() == 1 && ne.len() == 1 && is_zero(&ne[0]) => match arrs.as_slice() {
            [Atom::Var(x)] => Some(*x),
            _ => None,
        },
        _ => None,
    }
}

fn block(b: &mut Block, uses: &FxHashMap<VarId, usize>, pinned: &FxHashSet<VarId>) {
    stacker::maybe_grow(64 * 1024, 2 * 1024 * 1024, || block_inner(b, uses, pinned))
}

fn block_inner(b: &mut Block, uses: &FxHashMap<VarId, usize>, pinned: &FxHashSet<VarId>) {
    for s in &mut b.stmts {
        nested(&mut s.expr, uses, pinned);
    }
    // reduce statements by the array they sum
    let mut reducers: FxHashMap<VarId, usize> = FxHashMap::default();
    for (k, s) in b.stmts.iter().enumerate() {
        if let Some(x) = summed(s) {
            reducers.insert(x, k);
        }
    }
    if reducers.is_empty() {
        return;
    }
    let mut removed = vec![false; b.stmts.len()];
    for k in 0..b.stmts.len() {
        let n_results = match &b.stmts[k].expr {
            Expr::For { body, .. } | Expr::ForAcc { body, .. } => body.result.len(),
            _ => continue,
        };
        for j in 0..n_results {
            let x = &b.stmts[k].binds[j];
            let stacked = match &b.stmts[k].expr {
                Expr::ForAcc { acc, .. } => !acc[j],
                _ => true,
            };
            let Some(&r) = reducers.get(&x.var) else { continue };
            if !stacked || x.ty.rank() < 2 || uses.get(&x.var) != Some(&1) || pinned.contains(&x.var) || r <= k || removed[r] {
                continue;
            }
            let sum = b.stmts[r].binds[0].clone();
            if sum.ty.elem != x.ty.elem || sum.ty.shape[..] != x.ty.shape[1..] {
                continue;
            }
            let s = &mut b.stmts[k];
            if matches!(s.expr, Expr::For { .. }) {
                let Expr::For { ivar, size, body } = std::mem::replace(&mut s.expr, Expr::Atom(Atom::Lit(Lit::Bool(false)))) else {
                    unreachable!("matched just above")
                };
                let acc = vec![false; body.result.len()];
                s.expr = Expr::ForAcc { ivar, size, body, acc };
            }
            if let Expr::ForAcc { acc, .. } = &mut s.expr {
                acc[j] = true;
            }
            s.binds[j] = sum;
            removed[r] = true;
        }
    }
    let mut k = 0;
    b.stmts.retain(|_| {
        k += 1;
        !removed[k - 1]
    });
}

fn nested(e: &mut Expr, uses: &FxHashMap<VarId, usize>, pinned: &FxHashSet<VarId>) {
    match e {
        Expr::For { body, .. } | Expr::ForAcc { body, .. } => block(body, uses, pinned),
        Expr::Loop { body, kind, .. } => {
            block(body, uses, pinned);
            if let LoopKind::While { cond } = kind {
                block(cond, uses, pinned);
            }
        }
        Expr::If { then_b, else_b, .. } => {
            block(then_b, uses, pinned);
            block(else_b, uses, pinned);
        }
        Expr::Reduce { op: ReduceOp::Lambda(l), .. } | Expr::Scan { op: ReduceOp::Lambda(l), .. } => block(&mut l.body, uses, pinned),
        Expr::Jvp { lam, .. } | Expr::Vjp { lam, .. } => block(&mut lam.body, uses, pinned),
        _ => {}
    }
}
