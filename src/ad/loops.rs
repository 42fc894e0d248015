//! Counted loops whose state the body never reads, before reverse mode.
//!
//! `loop u = init for i < n do body` where `body` reads no part of the
//! state `u` (parts it passes on unchanged excepted: they stay `init`)
//! ends with the value of its last iteration alone:
//!
//! ```text
//! if n > 0 then (let i = n - 1 in body) else init
//! ```
//!
//! Why: reverse mode transposes the loop into a backward loop whose state
//! is the cotangent of `u`, and at every iteration that cotangent is added
//! into the cotangents of whatever `body` returned (`loop u = v for i < n do
//! v` adds a whole `[n]` cotangent into `v`'s at each of n iterations) and
//! then replaced by zeros. The function itself costs O(1) per iteration (it
//! returns `v`, nothing copied): the gradient was quadratic where its
//! function is linear (issue 24). Once only the last iteration runs, the
//! cotangent is transposed once.
//!
//! When: the body cannot fail (an iteration it skips could have failed).
//! A `while` loop in it may stay: skipping iterations never makes a
//! program run longer.

use super::build::{Builder, lit};
use crate::ir::walk::{self, Copier};
use crate::ir::{Atom, Binder, Block, Expr, LoopKind, Prim, Scalar, Stmt, Type, VarId};
use rustc_hash::{FxHashMap, FxHashSet};

/// `s` as its last iteration, when `s` is a counted loop whose body reads
/// no state it changes and that `safe` (cannot fail) accepts.
pub(super) fn last_iteration_only(b: &mut Builder, s: &Stmt, safe: impl Fn(&Stmt) -> bool) -> Option<Vec<Stmt>> {
    let Expr::Loop { params, init, kind: LoopKind::Count { ivar, n, down }, body } = &s.expr else { return None };
    let unchanged = passed_on_unchanged(params, body);
    let body = without_unchanged_state(params, init, &unchanged, body);
    let changed: FxHashSet<VarId> = params.iter().enumerate().filter(|(k, _)| !unchanged[*k]).map(|(_, p)| p.var).collect();
    if walk::free_vars_block(&body).iter().any(|v| changed.contains(v)) || !safe(s) {
        return None;
    }
    let mut out = vec![];
    let (mut binds, mut last_results, mut inits) = (vec![], vec![], vec![]);
    for (k, bind) in s.binds.iter().enumerate() {
        if unchanged[k] {
            out.push(Stmt { binds: vec![bind.clone()], expr: Expr::Atom(init[k]), loc: s.loc.clone() });
        } else {
            binds.push(bind.clone());
            last_results.push(body.result[k]);
            inits.push(init[k]);
        }
    }
    if binds.is_empty() {
        return Some(out);
    }
    let any = b.fresh("ran");
    let ran = Stmt { binds: vec![Binder { var: any, ty: Type::scalar(Scalar::Bool) }], expr: Expr::Prim(Prim::Gt, vec![*n, lit(Scalar::I64, 0.0)]), loc: None };
    // the last iteration: `n - 1` counting up, `0` counting down
    let last = if *down { Expr::Atom(lit(Scalar::I64, 0.0)) } else { Expr::Prim(Prim::Sub, vec![*n, lit(Scalar::I64, 1.0)]) };
    let counter = Stmt { binds: vec![Binder { var: *ivar, ty: Type::scalar(Scalar::I64) }], expr: last, loc: None };
    let then_b = Block { stmts: std::iter::once(counter).chain(body.stmts).collect(), result: last_results };
    let else_b = Block { stmts: vec![], result: inits };
    let branch = Stmt { binds, expr: Expr::If { cond: Atom::Var(any), then_b, else_b }, loc: s.loc.clone() };
    b.declare(&ran);
    b.declare(&branch);
    Some([vec![ran, branch], out].concat())
}

/// Which parts of the state the body returns as they came in.
fn passed_on_unchanged(params: &[Binder], body: &Block) -> Vec<bool> {
    params.iter().zip(&body.result).map(|(p, r)| *r == Atom::Var(p.var)).collect()
}

/// `body` reading the initial value of every part of the state it passes on
/// unchanged (that part is its initial value at every iteration).
fn without_unchanged_state(params: &[Binder], init: &[Atom], unchanged: &[bool], body: &Block) -> Block {
    let map: FxHashMap<VarId, Atom> = params.iter().zip(init).zip(unchanged).filter(|(_, u)| **u).map(|((p, i), _)| (p.var, *i)).collect();
    if map.is_empty() {
        return body.clone();
    }
    Copier { map, fresh: None }.block(body)
}
