//! Whether a block is linear in some of its variables: the check of a user
//! derivative rule (`derivative f`), which reverse mode transposes and so
//! must be a linear function of its tangents. Linear here is structural:
//! every value computed from a tangent is a sum or difference of such
//! values, one of them times (or divided by) a value free of tangents,
//! a rearrangement (index, slice, transpose, …) or a sum over one, and
//! every branch or loop keeps to that.

use super::walk::{free_vars_stmt, scopes};
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
        let out = match &s.expr {
            // a derivative's primal results are not tangents; its lambda is
            // a function of values, not of the tangents
            Expr::Jvp { .. } => (0..s.binds.len()).map(|k| k >= s.binds.len() / 2).collect(),
            Expr::Vjp { cotangents, .. } => (0..s.binds.len()).map(|k| k >= cotangents.len()).collect(),
            Expr::CustomJvp { .. } => vec![true; s.binds.len()],
            Expr::For { .. } | Expr::ForAcc { .. } | Expr::If { .. } | Expr::Loop { .. } => match nested(s, lin, zeros) {
                Ok(out) => out,
                Err(why) => return Some(why),
            },
            _ => vec![true; s.binds.len()],
        };
        lin.extend(s.binds.iter().zip(out).filter(|(_, l)| *l).map(|(x, _)| x.var));
    }
    None
}

/// The blocks of a `for`, `if` or `loop` that reads tangents: each must be
/// linear, and each result a tangent (or zero) in every block or a value
/// in every block; a loop's state is a tangent where it starts as one (or
/// as zero) and must stay one. Which results are tangents.
fn nested(s: &crate::ir::Stmt, lin: &mut FxHashSet<VarId>, zeros: &mut FxHashSet<VarId>) -> Result<Vec<bool>, (String, Option<Loc>)> {
    let mixed = || ("a result that is a tangent in one branch or step and a value that is not one in another".to_string(), s.loc.clone());
    // per result: Some(true) a tangent, Some(false) a value, None zero so far
    let mut kinds: Vec<Option<bool>> = match &s.expr {
        Expr::Loop { init, .. } => init.iter().map(|a| Some(is_lin(a, lin) || is_zero(a, zeros))).collect(),
        _ => vec![None; s.binds.len()],
    };
    for scope in scopes(&s.expr) {
        if matches!(s.expr, Expr::Loop { .. }) {
            let params: Vec<VarId> = scope.binds.params().iter().zip(&kinds).filter(|(_, k)| **k == Some(true)).map(|(p, _)| p.var).collect();
            lin.extend(params);
        }
        if let Some(e) = block(scope.block, lin, zeros) {
            return Err(e);
        }
        if matches!(scope.binds, super::walk::Binds::LoopCondition { .. }) {
            continue;
        }
        for (k, a) in scope.block.result.iter().enumerate() {
            let here = if is_lin(a, lin) {
                Some(true)
            } else if is_zero(a, zeros) {
                None
            } else {
                Some(false)
            };
            match (here, kinds[k]) {
                (Some(h), Some(was)) if h != was => return Err(mixed()),
                (Some(h), None) => kinds[k] = Some(h),
                _ => {}
            }
        }
    }
    Ok(kinds.into_iter().map(|k| k == Some(true)).collect())
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
        Expr::For { .. } | Expr::ForAcc { .. } | Expr::Loop { .. } => None,
        Expr::ArgExt { .. } => Some("`argmax`/`argmin` of a tangent".into()),
        Expr::Iota { .. } | Expr::Fail { .. } => Some("a tangent used as a count".into()),
        // a derivative is linear in its tangents (cotangents) at a point
        // that is not one: `jvp g x dx` may state a rule
        Expr::Jvp { primals, .. } | Expr::Vjp { primals, .. } => ok(!primals.iter().any(l), "a derivative taken at a tangent"),
        // a function with its own rule, applied to tangents: linear when its
        // body is linear in those parameters
        Expr::CustomJvp { primal, args, .. } => {
            let params: FxHashSet<VarId> = primal.params.iter().zip(args).filter(|(_, a)| l(a)).map(|(p, _)| p.var).collect();
            nonlinear_use(&primal.body, &params).map(|(why, _)| format!("a call that is not linear in its tangent arguments ({why})"))
        }
    }
}
