//! Whether a block is linear in some of its variables: the check of a user
//! derivative rule (`derivative f`), which reverse mode transposes and so
//! must be a linear function of its tangents. Linear here is structural:
//! every value computed from a tangent is a sum or difference of such
//! values, one of them times (or divided by) a value free of tangents,
//! a rearrangement (index, slice, transpose, …) or a sum over one, and
//! every branch or loop keeps to that.

use super::walk::{for_each_operand, free_vars_stmt, scopes};
use super::{Atom, Block, Expr, Lit, Loc, Prim, ReduceOp, VarId};
use rustc_hash::FxHashSet;

/// The first use of a variable of `lin` (or of a value computed from one)
/// that is not linear: what it is and where, or `None` when `b` is linear.
pub fn nonlinear_use(b: &Block, lin: &FxHashSet<VarId>) -> Option<(String, Option<Loc>)> {
    let mut lin = lin.clone();
    let mut zeros = FxHashSet::default();
    block(b, &mut lin, &mut zeros)
}

fn block(b: &Block, lin: &mut FxHashSet<VarId>, zeros: &mut FxHashSet<VarId>) -> Option<(String, Option<Loc>)> {
    for s in &b.stmts {
        if !free_vars_stmt(s).iter().any(|v| lin.contains(v)) {
            if matches!(&s.expr, Expr::Replicate { val, .. } | Expr::Atom(val) if is_zero(val, zeros)) {
                zeros.extend(s.binds.iter().map(|x| x.var));
            }
            continue;
        }
        if let Some(what) = stmt(&s.expr, lin, zeros) {
            return Some((what, s.loc.clone()));
        }
        // nested blocks: their results must be linear too (a derivative's
        // lambda is a function of values, not of the tangents)
        let derivative = matches!(s.expr, Expr::Jvp { .. } | Expr::Vjp { .. } | Expr::CustomJvp { .. });
        for scope in scopes(&s.expr).filter(|_| !derivative) {
            // a loop's state is a tangent where it starts as one
            if let Expr::Loop { init, .. } = &s.expr {
                let starts: Vec<VarId> =
                    scope.binds.params().iter().zip(init).filter(|(_, a)| is_lin(a, lin) || is_zero(a, zeros)).map(|(p, _)| p.var).collect();
                lin.extend(starts);
            }
            if let Some(e) = block(scope.block, lin, zeros) {
                return Some(e);
            }
            if matches!(scope.binds, super::walk::Binds::LoopCondition { .. }) {
                continue;
            }
            if scope.block.result.iter().any(|a| !is_lin(a, lin) && !is_zero(a, zeros)) {
                return Some(("a branch or loop whose result is not a linear function of the tangents".into(), s.loc.clone()));
            }
        }
        // a derivative's primal results are not tangents
        let primal_results = match &s.expr {
            Expr::Jvp { .. } => s.binds.len() / 2,
            Expr::Vjp { cotangents, .. } => cotangents.len(),
            _ => 0,
        };
        lin.extend(s.binds[primal_results..].iter().map(|x| x.var));
    }
    None
}

fn is_lin(a: &Atom, lin: &FxHashSet<VarId>) -> bool {
    matches!(a, Atom::Var(v) if lin.contains(v))
}

fn is_zero(a: &Atom, zeros: &FxHashSet<VarId>) -> bool {
    match a {
        Atom::Lit(Lit::F64(x)) => *x == 0.0,
        Atom::Lit(Lit::F32(x)) => *x == 0.0,
        Atom::Lit(_) => false,
        Atom::Var(v) => zeros.contains(v),
    }
}

/// Why `e`, which reads a linear value, is not linear (`None`: it is).
fn stmt(e: &Expr, lin: &FxHashSet<VarId>, zeros: &FxHashSet<VarId>) -> Option<String> {
    let l = |a: &Atom| is_lin(a, lin);
    let lz = |a: &Atom| is_lin(a, lin) || is_zero(a, zeros);
    let ok = |c: bool, why: &str| if c { None } else { Some(why.to_string()) };
    match e {
        Expr::Atom(_) | Expr::StopGradient(_) | Expr::Trace { .. } => None,
        Expr::Prim(p, xs) => match p {
            Prim::Add | Prim::Sub => ok(xs.iter().all(lz), "a tangent plus or minus a value that is not a tangent"),
            Prim::Neg | Prim::Convert(_) => None,
            Prim::Mul => ok(xs.iter().filter(|a| l(a)).count() == 1, "a product of two tangents"),
            Prim::Div => ok(l(&xs[0]) && !l(&xs[1]), "a division by a tangent"),
            Prim::Select => ok(!l(&xs[0]) && lz(&xs[1]) && lz(&xs[2]), "a choice between a tangent and a value that is not one"),
            other => Some(format!("`{}` of a tangent", other.name())),
        },
        Expr::Index { arr, .. } | Expr::Slice { arr, .. } | Expr::Coerce { arr, .. } | Expr::Rotate { arr, .. } | Expr::Unflatten { arr, .. } => {
            ok(l(arr), "a tangent used as an index or a size")
        }
        Expr::Transpose(a) | Expr::Flatten(a) | Expr::Reverse(a) => ok(l(a), "a tangent used as an index"),
        Expr::Concat(a, b) => ok(lz(a) && lz(b), "a tangent joined to a value that is not one"),
        Expr::ArrayLit(xs) => ok(xs.iter().all(lz), "an array of tangents and values that are not"),
        Expr::Replicate { val, .. } => ok(l(val), "a tangent used as a size"),
        Expr::Reduce { op: ReduceOp::Add, ne, arrs } | Expr::Scan { op: ReduceOp::Add, ne, arrs } => {
            ok(arrs.iter().all(lz) && ne.iter().all(lz), "a sum that starts from a value that is not a tangent")
        }
        Expr::Reduce { .. } | Expr::Scan { .. } => Some("a product, maximum or minimum of tangents".into()),
        Expr::ScatterAdd { dest, vals, .. } => ok(lz(dest) && l(vals), "tangents added into a value that is not one"),
        Expr::Update { arr, val, .. } => ok(lz(arr) && lz(val), "a tangent written into a value that is not one, or the reverse"),
        Expr::If { cond, .. } => ok(!l(cond), "a condition on a tangent"),
        Expr::For { .. } | Expr::ForAcc { .. } => None,
        Expr::Loop { init, .. } => ok(init.iter().all(lz), "a loop whose state starts from a value that is not a tangent"),
        Expr::ArgExt { .. } => Some("`argmax`/`argmin` of a tangent".into()),
        Expr::Iota { .. } | Expr::Fail { .. } => Some("a tangent used as a count".into()),
        // a derivative is linear in its tangents (cotangents) at a point
        // that is not one: `jvp g x dx` may state a rule
        Expr::Jvp { primals, .. } | Expr::Vjp { primals, .. } => ok(!primals.iter().any(l), "a derivative taken at a tangent"),
        Expr::CustomJvp { .. } => {
            let mut reads = false;
            for_each_operand(e, &mut |a| reads |= l(a));
            ok(!reads, "a function with its own rule applied to a tangent")
        }
    }
}
