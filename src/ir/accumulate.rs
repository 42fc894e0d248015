//! Accumulate instead of materialise: a parallel `for` result read only by
//! a `reduce add` from zero becomes an accumulator result of the `for`
//! ([`Expr::ForAcc`]): each iteration adds into it, so the `[n]`-stacked
//! array is never built.
//!
//! For scalar results this is map-reduce fusion: `sum (for i. …)` (a dot
//! product, a sum of squares, a log-likelihood) allocates nothing, which
//! made k-means' cost several times faster compiled (it allocated one
//! `[d]` array per point and centroid).
//!
//! For results of rank ≥ 1, reverse mode produces this shape wherever an array from outside a
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

use super::{Atom, Block, Expr, Function, Lit, ReduceOp, Stmt, VarId};
use rustc_hash::{FxHashMap, FxHashSet};

/// The pairs `(i, i + s)` in which the fixed order of sums and products
/// (LANGUAGE.md §10) combines `k` lanes or chunk results, in order: for
/// strides `s = 1, 2, 4, …`, every multiple `i` of `2s` with `i + s < k`
/// (element `i` becomes `x_i ⊕ x_{i+s}`; element 0 ends as the result).
/// The interpreter combines by it (`backend/interp/order.rs`) and
/// `unroll_for` writes it out.
pub fn tree_pairs(k: usize) -> impl Iterator<Item = (usize, usize)> {
    std::iter::successors(Some(1usize), |s| s.checked_mul(2))
        .take_while(move |s| *s < k)
        .flat_map(move |s| (0..k).step_by(2 * s).filter(move |i| i + s < k).map(move |i| (i, i + s)))
}

/// Rewrite every eligible `for` + `reduce add` pair of `f`.
pub fn function(f: &mut Function) {
    let mut uses: FxHashMap<VarId, usize> = FxHashMap::default();
    super::walk::visit_block(&f.body, &mut |v| *uses.entry(v).or_default() += 1, &mut |_| {});
    let pinned: FxHashSet<VarId> = f.stored.iter().copied().collect();
    block(&mut f.body, &uses, &pinned);
}

/// A literal whose bytes are all zero: `+0.0` (not `-0.0`), `0`, `false`
/// (the neutral element a sum may start from; what the C backend
/// allocates zeroed instead of filling).
pub(crate) fn is_zero(a: &Atom) -> bool {
    match a {
        Atom::Lit(Lit::F64(x)) => x.to_bits() == 0,
        Atom::Lit(Lit::F32(x)) => x.to_bits() == 0,
        Atom::Lit(Lit::I64(x)) => *x == 0,
        Atom::Lit(Lit::I32(x)) => *x == 0,
        Atom::Lit(Lit::Bool(b)) => !b,
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
            if !stacked || uses.get(&x.var) != Some(&1) || pinned.contains(&x.var) || r <= k || removed[r] {
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
    for b in super::walk::sub_blocks_mut(e) {
        block(b, uses, pinned);
    }
}

/// Undo [`function`]: every `ForAcc` of `f` (nested blocks and derivative
/// nodes included) becomes a `for` stacking all its results, followed by a
/// `reduce add` from zero per accumulator. The `ad` stage calls it first,
/// so derivatives of already expanded functions (`Entry::jvp`, `vjp`) only
/// ever differentiate `for` and `reduce`; [`function`] fuses them again.
pub fn unfuse(f: &mut Function) {
    let names = &mut f.names;
    unfuse_block(&mut f.body, names);
}

fn unfuse_block(b: &mut Block, names: &mut Vec<String>) {
    stacker::maybe_grow(64 * 1024, 2 * 1024 * 1024, || {
        if !b.stmts.iter().any(|s| matches!(s.expr, Expr::ForAcc { .. }) || super::walk::sub_blocks(&s.expr).next().is_some()) {
            return;
        }
        let mut out = Vec::with_capacity(b.stmts.len());
        for mut s in std::mem::take(&mut b.stmts) {
            unfuse_nested(&mut s.expr, names);
            if !matches!(s.expr, Expr::ForAcc { .. }) {
                out.push(s);
                continue;
            }
            let Expr::ForAcc { ivar, size, body, acc } = s.expr else { unreachable!("matched above") };
            let mut sums = vec![];
            for (k, x) in s.binds.iter_mut().enumerate() {
                if !acc[k] {
                    continue;
                }
                let name = names.get(x.var.0 as usize).cloned().unwrap_or_default();
                let rows = super::Binder {
                    var: VarId::fresh(names, &format!("{name}_rows")),
                    ty: super::Type { elem: x.ty.elem, shape: [vec![size.clone()], x.ty.shape.clone()].concat() },
                };
                let sum = std::mem::replace(x, rows.clone());
                let zero = Atom::Lit(Lit::of(sum.ty.elem, 0.0));
                sums.push(Stmt { binds: vec![sum], expr: Expr::Reduce { op: ReduceOp::Add, ne: vec![zero], arrs: vec![Atom::Var(rows.var)] }, loc: None });
            }
            out.push(Stmt { binds: s.binds, expr: Expr::For { ivar, size, body }, loc: s.loc });
            out.extend(sums);
        }
        b.stmts = out;
    })
}

fn unfuse_nested(e: &mut Expr, names: &mut Vec<String>) {
    for b in super::walk::sub_blocks_mut(e) {
        unfuse_block(b, names);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Binder, Scalar, Shape, Size, Type};

    fn var(names: &mut Vec<String>, n: &str) -> VarId {
        VarId::fresh(names, n)
    }

    /// `let x: [3][2] = for i < 3 { replicate 2 1.0 }; let s = reduce add (0.0) x`
    /// fuses into an accumulator, prints, verifies, and unfuses back.
    #[test]
    fn fuse_print_verify_unfuse() {
        let mut names = vec![];
        let (i, r, x, s) = (var(&mut names, "i"), var(&mut names, "r"), var(&mut names, "x"), var(&mut names, "s"));
        let row = Type::array(Scalar::F64, vec![Size::constant(2)]);
        let body = Block {
            stmts: vec![Stmt {
                binds: vec![Binder { var: r, ty: row.clone() }],
                expr: Expr::Replicate { n: Atom::Lit(Lit::I64(2)), val: Atom::Lit(Lit::F64(1.0)) },
                loc: None,
            }],
            result: vec![Atom::Var(r)],
        };
        let stacked = Type::array(Scalar::F64, vec![Size::constant(3), Size::constant(2)]);
        let f0 = Function {
            name: "f".into(),
            size_params: vec![],
            params: vec![],
            param_shapes: vec![],
            result_shape: Shape::Leaf(row.clone()),
            body: Block {
                stmts: vec![
                    Stmt { binds: vec![Binder { var: x, ty: stacked }], expr: Expr::For { ivar: i, size: Size::constant(3), body }, loc: None },
                    Stmt {
                        binds: vec![Binder { var: s, ty: row }],
                        expr: Expr::Reduce { op: ReduceOp::Add, ne: vec![Atom::Lit(Lit::F64(0.0))], arrs: vec![Atom::Var(x)] },
                        loc: None,
                    },
                ],
                result: vec![Atom::Var(s)],
            },
            names,
            stored: vec![],
            onehot: vec![],
        };
        let mut f = f0.clone();
        function(&mut f);
        assert_eq!(f.body.stmts.len(), 1);
        assert!(matches!(&f.body.stmts[0].expr, Expr::ForAcc { acc, .. } if acc == &vec![true]));
        crate::ir::verify::verify_function(&f).expect("the fused function verifies");
        let text = crate::ir::print::print_function(&f);
        assert!(text.contains("for i_0 < 3 (add)"), "{text}");
        let mut counts = crate::backend::interp::OpCounts::default();
        let out = crate::backend::interp::run(&f, &[], &[], &mut counts).expect("runs");
        assert_eq!(out[0].to_json(), "[3.0, 3.0]");
        unfuse(&mut f);
        crate::ir::verify::verify_function(&f).expect("the unfused function verifies");
        assert!(matches!(f.body.stmts[0].expr, Expr::For { .. }) && matches!(f.body.stmts[1].expr, Expr::Reduce { .. }));
        let out = crate::backend::interp::run(&f, &[], &[], &mut counts).expect("runs");
        assert_eq!(out[0].to_json(), "[3.0, 3.0]");
        // the verifier checks the accumulator marks and types
        let mut bad = f0.clone();
        function(&mut bad);
        if let Expr::ForAcc { acc, .. } = &mut bad.body.stmts[0].expr {
            acc.push(true);
        }
        let e = crate::ir::verify::verify_function(&bad).unwrap_err();
        assert!(e.contains("marks 2 result(s) but its body returns 1"), "{e}");
        let mut bad = f0.clone();
        function(&mut bad);
        bad.body.stmts[0].binds[0].ty = Type::array(Scalar::F64, vec![Size::constant(3), Size::constant(2)]);
        assert!(crate::ir::verify::verify_function(&bad).is_err(), "an accumulator has the row's type, not the stacked one");
        // a stacked array read elsewhere too is not fused
        let mut g = f0.clone();
        g.body.result.push(Atom::Var(x));
        function(&mut g);
        assert!(matches!(g.body.stmts[0].expr, Expr::For { .. }));
    }
}
