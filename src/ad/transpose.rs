//! The transpose rule of every linear construct, in one table beside the
//! JVP rules of `rules.rs`. A linear statement `y = L(x1, ..., xk)` with the
//! cotangent `ct` of `y` hands each linear operand its share of `ct`
//! through [`Cotangents`], which accumulates (a value used k times receives k
//! contributions, added up). Operands that are not linear (indices, sizes,
//! scale factors) are residuals read as they are.
//!
//! | linear construct            | transpose                                 |
//! |-----------------------------|-------------------------------------------|
//! | copy, `a + b`, `a - b`, `-a`| the cotangent to each operand (negated)   |
//! | `c * a`, `a / c`            | `c * ct`, `ct / c`                        |
//! | `select k a b`              | `select k ct 0`, `select k 0 ct`          |
//! | convert                     | convert back                              |
//! | `a[i]`                      | accumulate `ct` at `i` (scatter_add)      |
//! | `a[lo:hi]`                  | accumulate rows `lo..hi`                  |
//! | `scatter_add d is v`        | `ct` to `d`, gather `ct[is]` to `v`       |
//! | `update a[i] = v`           | `ct` with row i zeroed to `a`, `ct[i]` to `v` |
//! | `sum a` (reduce +)          | `replicate n ct`                          |
//! | `replicate n a`             | `sum ct`                                  |
//! | `scan (+) a`                | `reverse (scan (+) (reverse ct))`         |
//! | `concat a b`                | the two slices of `ct`                    |
//! | `[a, b, ...]`               | `ct[0]`, `ct[1]`, ...                     |
//! | `transpose`, `reverse`      | themselves                                |
//! | `flatten` / `unflatten`     | each other                                |
//! | `rotate k`                  | `rotate (-k)`                             |
//! | size coercion               | coercion back                             |
//!
//! `for`, `loop` and `if` are transposed structurally by `ad/vjp/` (their
//! bodies through this table); see docs/ARCHITECTURE.md.

use super::AdError;
use super::build::{Builder, lit};
use crate::ir::{Atom, Block, Expr, Prim, ReduceOp, Scalar, Stmt, Type};

/// Where transposed statements put their contributions.
pub(super) trait Cotangents {
    /// Whether `a` carries a derivative (a linear operand).
    fn linear(&self, a: &Atom) -> bool;
    /// Add `ct` to the cotangent of `a`.
    fn add(&mut self, b: &mut Builder, a: &Atom, ct: Atom);
    /// Add `ct` to the cotangent of `arr` at the (prefix) index `idx`.
    fn add_at(&mut self, b: &mut Builder, arr: &Atom, idx: &[Atom], ct: Atom);
    /// Add the rows of `vals` to the cotangent of `arr` at the indices `idxs` (a `[k]i64`).
    fn add_rows(&mut self, b: &mut Builder, arr: &Atom, idxs: Atom, vals: Atom);
}

fn internal(what: &str) -> AdError {
    AdError { message: format!("internal: `{what}` is not linear in its derivative operands"), loc: None }
}

/// Transpose the linear statement `s` (one binder) whose result has cotangent `ct`.
pub(super) fn transpose(b: &mut Builder, c: &mut dyn Cotangents, s: &Stmt, ct: Atom) -> Result<(), AdError> {
    let ty = s.binds[0].ty.clone();
    match &s.expr {
        Expr::Atom(a) => c.add(b, a, ct),
        Expr::StopGradient(_) | Expr::Iota { .. } | Expr::ArgExt { .. } | Expr::Fail { .. } => {}
        // derivatives pass through a trace (reverse mode's sweep handles one
        // with several operands; forward mode never traces a tangent)
        Expr::Trace { args, .. } if args.len() == 1 => c.add(b, &args[0], ct),
        Expr::Trace { .. } => return Err(internal("trace")),
        Expr::Prim(op, args) => prim(b, c, *op, args, ct, ty.elem)?,
        Expr::Index { arr, idx, .. } => c.add_at(b, arr, idx, ct),
        Expr::Slice { arr, lo, .. } => {
            let len = ty.shape[0].clone();
            let ivar = b.fresh("k");
            b.begin();
            let r = b.prim(Prim::Add, vec![*lo, Atom::Var(ivar)], Scalar::I64);
            let stmts = b.end();
            let idxs = b.emit(Expr::For { ivar, size: len.clone(), body: Block { stmts, result: vec![r] } }, Type::array(Scalar::I64, vec![len]), "rows");
            c.add_rows(b, arr, idxs, ct);
        }
        Expr::Update { arr, idx, val, loc } => {
            // the row is read before it is zeroed: the zeroing is then the
            // last use of `ct` and writes in place (zeroing first made every
            // step of a transposed scan copy the whole cotangent)
            if c.linear(val) {
                let r = b.index(ct, vec![*idx]);
                c.add(b, val, r);
            }
            if c.linear(arr) {
                let row = b.zeros(&ty.row());
                let r = b.emit(Expr::Update { arr: ct, idx: *idx, val: row, loc: loc.clone() }, ty.clone(), "rest");
                c.add(b, arr, r);
            }
        }
        Expr::ScatterAdd { dest, idxs, vals, .. } => {
            c.add(b, dest, ct);
            if c.linear(vals) {
                let vt = b.type_of(vals);
                let ivar = b.fresh("k");
                b.begin();
                let j = b.index(*idxs, vec![Atom::Var(ivar)]);
                let r = b.index(ct, vec![j]);
                let stmts = b.end();
                let g = b.emit(Expr::For { ivar, size: vt.shape[0].clone(), body: Block { stmts, result: vec![r] } }, vt, "gather");
                c.add(b, vals, g);
            }
        }
        Expr::Reduce { op: ReduceOp::Add, arrs, .. } => {
            let at = b.type_of(&arrs[0]);
            let n = b.size(&at.shape[0]);
            let r = b.emit(Expr::Replicate { n, val: ct }, at, "bcast");
            c.add(b, &arrs[0], r);
        }
        Expr::Scan { op: ReduceOp::Add, arrs, .. } => {
            let rv = b.emit(Expr::Reverse(ct), ty.clone(), "rev");
            let sc = b.emit(Expr::Scan { op: ReduceOp::Add, ne: vec![lit(ty.elem, 0.0)], arrs: vec![rv] }, ty.clone(), "suffix");
            let r = b.emit(Expr::Reverse(sc), ty, "rev");
            c.add(b, &arrs[0], r);
        }
        Expr::Replicate { val, .. } => {
            let vt = b.type_of(val);
            let r = b.emit(Expr::Reduce { op: ReduceOp::Add, ne: vec![lit(ty.elem, 0.0)], arrs: vec![ct] }, vt, "sum");
            c.add(b, val, r);
        }
        Expr::Concat(x, y) => {
            let (xt, yt) = (b.type_of(x), b.type_of(y));
            let nx = b.size(&xt.shape[0]);
            let total = b.size(&ty.shape[0]);
            for (a, lo, hi, t) in [(x, lit(Scalar::I64, 0.0), nx, xt.clone()), (y, nx, total, yt)] {
                if c.linear(a) {
                    let part = b.emit(Expr::Slice { arr: ct, lo, hi, check: None }, t, "part");
                    c.add(b, a, part);
                }
            }
        }
        Expr::ArrayLit(xs) => {
            for (k, x) in xs.iter().enumerate() {
                if c.linear(x) {
                    let r = b.index(ct, vec![lit(Scalar::I64, k as f64)]);
                    c.add(b, x, r);
                }
            }
        }
        Expr::Transpose(a) => {
            let r = b.emit(Expr::Transpose(ct), b.type_of(a), "tr");
            c.add(b, a, r);
        }
        Expr::Reverse(a) => {
            let r = b.emit(Expr::Reverse(ct), b.type_of(a), "rev");
            c.add(b, a, r);
        }
        Expr::Flatten(a) => {
            let at = b.type_of(a);
            let (n, m) = (b.size(&at.shape[0]), b.size(&at.shape[1]));
            let r = b.emit(Expr::Unflatten { arr: ct, n, m }, at, "unflat");
            c.add(b, a, r);
        }
        Expr::Unflatten { arr, .. } => {
            let r = b.emit(Expr::Flatten(ct), b.type_of(arr), "flat");
            c.add(b, arr, r);
        }
        Expr::Rotate { k, arr } => {
            let mk = b.prim(Prim::Neg, vec![*k], Scalar::I64);
            let r = b.emit(Expr::Rotate { k: mk, arr: ct }, ty, "rot");
            c.add(b, arr, r);
        }
        Expr::Coerce { arr, loc } => {
            let r = b.emit(Expr::Coerce { arr: ct, loc: loc.clone() }, b.type_of(arr), "coerce");
            c.add(b, arr, r);
        }
        Expr::Reduce { .. } | Expr::Scan { .. } => return Err(internal("reduce")),
        Expr::For { .. } | Expr::ForAcc { .. } | Expr::Loop { .. } | Expr::If { .. } | Expr::Jvp { .. } | Expr::Vjp { .. } | Expr::CustomJvp { .. } => {
            return Err(internal("block"));
        }
    }
    Ok(())
}

/// The transpose of a linear scalar primitive (what the JVP rules emit).
fn prim(b: &mut Builder, c: &mut dyn Cotangents, op: Prim, args: &[Atom], ct: Atom, s: Scalar) -> Result<(), AdError> {
    let zero = lit(s, 0.0);
    match op {
        Prim::Add => {
            c.add(b, &args[0], ct);
            c.add(b, &args[1], ct);
        }
        Prim::Sub => {
            c.add(b, &args[0], ct);
            if c.linear(&args[1]) {
                let m = b.prim(Prim::Neg, vec![ct], s);
                c.add(b, &args[1], m);
            }
        }
        Prim::Neg => {
            let m = b.prim(Prim::Neg, vec![ct], s);
            c.add(b, &args[0], m);
        }
        Prim::Mul => {
            let (lin, factor) = if c.linear(&args[1]) { (args[1], args[0]) } else { (args[0], args[1]) };
            let r = b.prim(Prim::Mul, vec![factor, ct], s);
            c.add(b, &lin, r);
        }
        Prim::Div => {
            let r = b.prim(Prim::Div, vec![ct, args[1]], s);
            c.add(b, &args[0], r);
        }
        Prim::Select => {
            for (k, (t, e)) in [(1, (ct, zero)), (2, (zero, ct))] {
                if c.linear(&args[k]) {
                    let r = b.prim(Prim::Select, vec![args[0], t, e], s);
                    c.add(b, &args[k], r);
                }
            }
        }
        Prim::Convert(_) => {
            let to = b.type_of(&args[0]).elem;
            let r = b.prim(Prim::Convert(to), vec![ct], to);
            c.add(b, &args[0], r);
        }
        _ => return Err(internal(&format!("{op:?}"))),
    }
    Ok(())
}
