//! The rule catalogue: one file per family, each ending in its `RULES`
//! table. `docs/OPTIMISER.md` shows every rule with a before and after.

pub mod algebra;
pub mod bounds;
pub mod fold;
pub mod fusion;
pub mod inline;
pub mod loops;
pub mod scatter_nest;
pub mod sparse;

use super::rule::{Ctx, Rule};
use crate::ir::{Atom, Binder, Block, Expr, Lit, Prim, Scalar, Size, Stmt, Type, VarId, walk};
use rustc_hash::{FxHashMap, FxHashSet};

/// Every built-in rule.
pub fn builtin() -> Vec<Rule> {
    [inline::RULES, algebra::RULES, fusion::RULES, fold::RULES, loops::RULES, sparse::RULES, scatter_nest::RULES, bounds::RULES].concat()
}

/// `let x: ty = expr` without a location.
pub(crate) fn bind(var: VarId, ty: Type, expr: Expr) -> Stmt {
    Stmt { binds: vec![Binder { var, ty }], expr, loc: None }
}

/// `x = a` for each binder of `s` and atom of `atoms`.
pub(crate) fn copies(binds: &[Binder], atoms: &[Atom]) -> Vec<Stmt> {
    binds.iter().zip(atoms).map(|(b, a)| bind(b.var, b.ty.clone(), Expr::Atom(*a))).collect()
}

pub(crate) fn lit_f(s: Scalar, x: f64) -> Atom {
    Atom::Lit(Lit::of(s, x))
}

/// Whether `a` is the literal `x` of a float or integer type (`-0.0` and
/// `0.0` differ).
pub(crate) fn is_lit(a: &Atom, x: f64) -> bool {
    match a {
        Atom::Lit(Lit::F64(v)) => v.to_bits() == x.to_bits(),
        Atom::Lit(Lit::F32(v)) => v.to_bits() == (x as f32).to_bits(),
        Atom::Lit(Lit::I64(v)) => x.fract() == 0.0 && *v == x as i64,
        Atom::Lit(Lit::I32(v)) => x.fract() == 0.0 && *v == x as i32,
        _ => false,
    }
}

pub(crate) fn var(a: &Atom) -> Option<VarId> {
    match a {
        Atom::Var(v) => Some(*v),
        Atom::Lit(_) => None,
    }
}

/// A copy of `b` with `subst` applied and every binder renamed fresh, so
/// the copy can live beside the original.
pub(crate) fn copy_block(b: &Block, subst: FxHashMap<VarId, Atom>, ctx: &mut Ctx) -> Block {
    let mut fresh = |v: VarId| ctx.fresh_like(v);
    let mut c = walk::Copier { map: subst, fresh: Some(&mut fresh) };
    c.block(b)
}

/// The statement of `body` binding `v`.
pub(crate) fn local_def(body: &Block, v: VarId) -> Option<&Stmt> {
    body.stmts.iter().find(|s| s.binds.iter().any(|b| b.var == v))
}

/// `select c a 0` (any zero of the type): the condition and the value.
pub(crate) fn select_zero(e: &Expr) -> Option<(Atom, Atom)> {
    match e {
        Expr::Prim(Prim::Select, xs) if xs.len() == 3 && is_lit(&xs[2], 0.0) => Some((xs[0], xs[1])),
        _ => None,
    }
}

/// The binders of a one-statement rule's result (its first binder).
pub(crate) fn single(s: &Stmt) -> Option<&Binder> {
    match s.binds.as_slice() {
        [b] => Some(b),
        _ => None,
    }
}

/// `select (i == e) x 0` in `body`: the value `x` and the index `e`, when
/// `r` is bound that way and `e` is not `i` nor bound in the body.
pub(crate) fn one_hot_term(body: &Block, r: &Atom, i: VarId, local: &FxHashSet<VarId>) -> Option<(Atom, Atom)> {
    let Atom::Var(r) = r else { return None };
    let (c, x) = select_zero(&local_def(body, *r)?.expr)?;
    let Atom::Var(c) = c else { return None };
    let Expr::Prim(Prim::Eq, xs) = &local_def(body, c)?.expr else { return None };
    let e = match (xs[0], xs[1]) {
        (Atom::Var(a), e) if a == i => e,
        (e, Atom::Var(b)) if b == i => e,
        _ => return None,
    };
    let varies = |a: &Atom| matches!(a, Atom::Var(v) if *v == i || local.contains(v));
    (!varies(&e)).then_some((x, e))
}

/// `0 <= e < n` as statements and the condition they bind: `ok`. `None`
/// when `n` is not an atom.
pub(crate) fn in_range(e: Atom, n: &Size, ctx: &mut Ctx) -> Option<(Vec<Stmt>, Atom)> {
    let n = n.as_atom()?;
    let (ge, lt, ok) = (ctx.fresh("in_lo"), ctx.fresh("in_hi"), ctx.fresh("in_range"));
    let boolt = Type::scalar(Scalar::Bool);
    let stmts = vec![
        bind(ge, boolt.clone(), Expr::Prim(Prim::Ge, vec![e, Atom::Lit(Lit::I64(0))])),
        bind(lt, boolt.clone(), Expr::Prim(Prim::Lt, vec![e, n])),
        bind(ok, boolt, Expr::Prim(Prim::And, vec![Atom::Var(ge), Atom::Var(lt)])),
    ];
    Some((stmts, Atom::Var(ok)))
}
