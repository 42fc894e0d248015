//! Lowering of the derivative operators of LANGUAGE.md §7: the function is
//! elaborated once into a closed IR lambda over fresh parameters, and an
//! `Expr::Jvp` (forward: `jvp`, `jvp2`, `jacfwd`) or `Expr::Vjp` (reverse:
//! `grad`, `vjp`, `vjp2`, `jacrev`) node records it with its inputs; the
//! `ad` stage expands the nodes. `jacfwd` runs one `jvp` per basis
//! direction inside a `for`, `jacrev` one `vjp` per result component, and
//! `hessian` is `jacfwd` of a lambda whose body is a `vjp` (forward over
//! reverse).

use super::Lowerer;
use super::value::Val;
use crate::diag::Diagnostic;
use crate::ir::{self, Atom, Binder, Expr as IExpr, Prim, Scalar, Type};
use crate::syntax::ast::Span;
use crate::types::Ty;

impl Lowerer<'_> {
    /// `f` applied to fresh parameters of type `xty`, as a closed lambda,
    /// with the type of its result.
    fn function_lambda(&mut self, op: &str, f: &Val, fspan: &Span, xty: &Ty, span: &Span) -> Option<(ir::Lambda, Ty)> {
        if !matches!(f, Val::Fun(_)) {
            if !f.contains_error() {
                let d = self.describe(f);
                self.error(
                    Diagnostic::new(format!("the first argument of `{op}` must be a function, but this is {d}"), fspan.clone())
                        .label("not a function")
                        .hint(format!("write e.g. `{op} (\\x -> x * x) ...`")),
                );
            }
            return None;
        }
        let params: Vec<Binder> = xty.leaf_types().into_iter().map(|ty| Binder { var: self.fresh("x"), ty }).collect();
        let atoms: Vec<Atom> = params.iter().map(|p| Atom::Var(p.var)).collect();
        let arg = Self::from_data(xty, &atoms);
        self.begin_block();
        let r = self.apply(f.clone(), fspan, vec![(arg, fspan.clone())], span);
        let stmts = self.blocks.pop().unwrap_or_default();
        if r.contains_error() {
            return None;
        }
        let Some((rty, leaves)) = self.to_data(&r) else {
            self.error(
                Diagnostic::new(format!("`{op}` needs a function that returns data, but this one returns a function"), fspan.clone())
                    .label("returns a function")
                    .hint("apply the function to all its arguments inside a lambda: `\\x -> f x y`"),
            );
            return None;
        };
        Some((ir::Lambda { params, body: ir::Block { stmts, result: leaves } }, rty))
    }

    /// The primal argument of a derivative operator: data with at least one float.
    fn primal_arg(&mut self, op: &str, x: &Val, xs: &Span) -> Option<(Ty, Vec<Atom>)> {
        let (ty, leaves) = self.data_arg(x, xs, &format!("the point of `{op}`"))?;
        if !ty.leaf_types().iter().any(|t| t.elem.is_float()) {
            let t = self.show(&ty);
            self.error(
                Diagnostic::new(format!("`{op}` differentiates with respect to f64/f32 values, but the point has type {t}"), xs.clone())
                    .label(format!("type {t}: nothing to differentiate"))
                    .hint("integer and bool values are constants for differentiation; pass floats, e.g. `f64 n`"),
            );
            return None;
        }
        Some((ty, leaves))
    }

    /// `jvp f x xdot` (tangent) and `jvp2 f x xdot` (value and tangent).
    pub(super) fn jvp(&mut self, pair: bool, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let op = if pair { "jvp2" } else { "jvp" };
        let (f, fs) = args[0].clone();
        let (x, xs) = args[1].clone();
        let (dx, dxs) = args[2].clone();
        let Some((xty, xl)) = self.primal_arg(op, &x, &xs) else { return Val::Error };
        let dx = self.coerce_literals(dx, &xty);
        let Some((dty, dl)) = self.data_arg(&dx, &dxs, &format!("the tangent of `{op}`")) else { return Val::Error };
        if decay(&dty) != decay(&xty) {
            let (a, b) = (self.show(&xty), self.show(&dty));
            return self.error(
                Diagnostic::new(format!("the tangent of `{op}` must have the type of the point: the point has type {a}, the tangent {b}"), dxs)
                    .label(format!("tangent of type {b}"))
                    .note(xs, format!("point of type {a}"))
                    .hint("the tangent is a direction in the input space: same shape and element type as the point"),
            );
        }
        let Some((lam, rty)) = self.function_lambda(op, &f, &fs, &xty, span) else { return Val::Error };
        let out = self.emit_jvp(lam, xl, dl, &rty, span);
        let n = rty.leaf_count();
        let y = Self::from_data(&rty, &out[..n]);
        let ydot = Self::from_data(&decay(&rty), &out[n..]);
        if pair { Val::Tuple(vec![y, ydot]) } else { ydot }
    }

    fn emit_jvp(&mut self, lam: ir::Lambda, primals: Vec<Atom>, tangents: Vec<Atom>, rty: &Ty, span: &Span) -> Vec<Atom> {
        let tys: Vec<Type> = rty.leaf_types().into_iter().chain(rty.leaf_types()).collect();
        let loc = Some(self.loc(span));
        self.emit(IExpr::Jvp { lam, primals, tangents }, tys, "jvp", loc)
    }

    /// `jacfwd f x`: one `jvp` per basis direction of `x`.
    pub(super) fn jacfwd(&mut self, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let (f, fs) = args[0].clone();
        let (x, xs) = args[1].clone();
        let Some((xty, xl, s)) = self.jacobian_point("jacfwd", &x, &xs) else { return Val::Error };
        let Some((lam, rty)) = self.function_lambda("jacfwd", &f, &fs, &xty, span) else { return Val::Error };
        if self.jacobian_result("jacfwd", &rty, &fs).is_none() {
            return Val::Error;
        }
        self.jacobian_by_jvp(lam, xl, &xty, s, &rty, span)
    }

    /// The Jacobian of `lam` at `xl` (a float scalar or vector of type
    /// `xty`, scalar type `s`) by one `jvp` per basis direction.
    fn jacobian_by_jvp(&mut self, lam: ir::Lambda, xl: Vec<Atom>, xty: &Ty, s: Scalar, rty: &Ty, span: &Span) -> Val {
        let ry = rty.leaf_types().remove(0);
        let Ty::Array(n, _) = xty else {
            // scalar input: one direction, the derivative itself
            let out = self.emit_jvp(lam, xl, vec![super::emit::lit_of(s, 1.0)], rty, span);
            return Val::data(rty.clone(), out[1]);
        };
        let n = n.clone();
        let ivar = self.fresh("dir");
        self.idx_range.insert(ivar, n.clone());
        self.begin_block();
        let onehot = self.one_hot(&n, Atom::Var(ivar), s);
        let out = self.emit_jvp(lam, xl, vec![onehot], rty, span);
        let body = self.end_block(vec![out[1]]);
        let cols_ty = Type { elem: ry.elem, shape: [vec![n.clone()], ry.shape.clone()].concat() };
        let cols = self.emit1(IExpr::For { ivar, size: n.clone(), body }, cols_ty, "jac", Some(self.loc(span)));
        match rty {
            Ty::Array(m, e) => {
                let t = Type { elem: ry.elem, shape: vec![m.clone(), n.clone()] };
                let j = self.emit1(IExpr::Transpose(cols), t, "jac", None);
                Val::data(Ty::array(m.clone(), Ty::array(n, (**e).clone())), j)
            }
            _ => Val::data(Ty::array(n, rty.clone()), cols),
        }
    }
}

/// Which reverse-mode operator is being lowered.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Reverse {
    Vjp,
    Vjp2,
}

impl Lowerer<'_> {
    /// `vjp f x ybar` (the pullback) and `vjp2 f x ybar` (value and pullback).
    pub(super) fn vjp(&mut self, which: Reverse, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let op = if which == Reverse::Vjp2 { "vjp2" } else { "vjp" };
        let (f, fs) = args[0].clone();
        let (x, xs) = args[1].clone();
        let (ybar, ys) = args[2].clone();
        let Some((xty, xl)) = self.primal_arg(op, &x, &xs) else { return Val::Error };
        let Some((lam, rty)) = self.function_lambda(op, &f, &fs, &xty, span) else { return Val::Error };
        let ybar = self.coerce_literals(ybar, &decay(&rty));
        let Some((yty, yl)) = self.data_arg(&ybar, &ys, &format!("the cotangent of `{op}`")) else { return Val::Error };
        if decay(&yty) != decay(&rty) {
            let (a, b) = (self.show(&rty), self.show(&yty));
            return self.error(
                Diagnostic::new(format!("the cotangent of `{op}` must have the type of the function's result: the result has type {a}, the cotangent {b}"), ys)
                    .label(format!("cotangent of type {b}"))
                    .note(fs, format!("this function returns {a}"))
                    .hint("`ybar` weights the outputs: same shape and element type as what the function returns"),
            );
        }
        let out = self.emit_vjp(lam, xl, yl, &rty, &xty, span);
        let n = rty.leaf_count();
        let xbar = Self::from_data(&decay(&xty), &out[n..]);
        if which == Reverse::Vjp2 { Val::Tuple(vec![Self::from_data(&rty, &out[..n]), xbar]) } else { xbar }
    }

    fn emit_vjp(&mut self, lam: ir::Lambda, primals: Vec<Atom>, cotangents: Vec<Atom>, rty: &Ty, xty: &Ty, span: &Span) -> Vec<Atom> {
        let tys: Vec<Type> = rty.leaf_types().into_iter().chain(xty.leaf_types()).collect();
        let loc = Some(self.loc(span));
        self.emit(IExpr::Vjp { lam, primals, cotangents }, tys, "vjp", loc)
    }

    /// The float scalar type a gradient needs the function to return, or a
    /// diagnostic naming `op`.
    fn scalar_result(&mut self, op: &str, rty: &Ty, fs: &Span) -> Option<Scalar> {
        match rty {
            Ty::Scalar(s) if s.is_float() => Some(*s),
            _ => {
                let t = self.show(rty);
                self.error(
                    Diagnostic::new(format!("`{op}` needs a function returning an f64/f32 scalar, but this one returns {t}"), fs.clone())
                        .label(format!("returns {t}"))
                        .hint("for other results use `vjp f x ybar` (a weighted gradient) or `jacrev f x`; for a loss, reduce to a scalar, e.g. with `sum`"),
                );
                None
            }
        }
    }

    /// `grad f x`: the pullback of 1.
    pub(super) fn grad(&mut self, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let (f, fs) = args[0].clone();
        let (x, xs) = args[1].clone();
        let Some((xty, xl)) = self.primal_arg("grad", &x, &xs) else { return Val::Error };
        let Some((lam, rty)) = self.function_lambda("grad", &f, &fs, &xty, span) else { return Val::Error };
        let Some(s) = self.scalar_result("grad", &rty, &fs) else { return Val::Error };
        let out = self.emit_vjp(lam, xl, vec![super::emit::lit_of(s, 1.0)], &rty, &xty, span);
        Self::from_data(&decay(&xty), &out[1..])
    }

    /// The float scalar type of a Jacobian operator's point, or a diagnostic.
    fn jacobian_point(&mut self, op: &str, x: &Val, xs: &Span) -> Option<(Ty, Vec<Atom>, Scalar)> {
        let (xty, xl) = self.primal_arg(op, x, xs)?;
        match float_vector_or_scalar(&xty) {
            Some(s) => Some((xty, xl, s)),
            None => {
                let t = self.show(&xty);
                self.error(
                    Diagnostic::new(format!("`{op}` needs an f64/f32 scalar or vector point, but this has type {t}"), xs.clone())
                        .label(format!("type {t}"))
                        .hint("flatten matrices first (`flatten m`), and pass one vector for several inputs"),
                );
                None
            }
        }
    }

    /// The float scalar type of a Jacobian operator's function result (a
    /// scalar or a vector), or a diagnostic.
    fn jacobian_result(&mut self, op: &str, rty: &Ty, fs: &Span) -> Option<Scalar> {
        let s = float_vector_or_scalar(rty);
        if s.is_none() {
            let t = self.show(rty);
            self.error(
                Diagnostic::new(format!("`{op}` needs a function returning an f64/f32 scalar or vector, but this one returns {t}"), fs.clone())
                    .label(format!("returns {t}"))
                    .hint("return one vector, e.g. concatenate the outputs"),
            );
        }
        s
    }

    /// The one-hot vector of size `n` and scalar type `s` that is 1 at `at`.
    fn one_hot(&mut self, n: &crate::ir::Size, at: Atom, s: Scalar) -> Atom {
        let jvar = self.fresh("k");
        self.begin_block();
        let c = self.prim(Prim::Eq, vec![Atom::Var(jvar), at], Scalar::Bool, None);
        let v = self.prim(Prim::Select, vec![c, super::emit::lit_of(s, 1.0), super::emit::lit_of(s, 0.0)], s, None);
        let hot_body = self.end_block(vec![v]);
        let hot = self.emit1(IExpr::For { ivar: jvar, size: n.clone(), body: hot_body }, Type::array(s, vec![n.clone()]), "onehot", None);
        if let Atom::Var(v) = hot {
            self.onehot.push(v);
        }
        hot
    }

    /// `jacrev f x`: one `vjp` per component of the result (its rows).
    pub(super) fn jacrev(&mut self, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let (f, fs) = args[0].clone();
        let (x, xs) = args[1].clone();
        let Some((xty, xl, _)) = self.jacobian_point("jacrev", &x, &xs) else { return Val::Error };
        let Some((lam, rty)) = self.function_lambda("jacrev", &f, &fs, &xty, span) else { return Val::Error };
        let Some(rs) = self.jacobian_result("jacrev", &rty, &fs) else { return Val::Error };
        let Ty::Array(m, _) = &rty else {
            let out = self.emit_vjp(lam, xl, vec![super::emit::lit_of(rs, 1.0)], &rty, &xty, span);
            return Val::data(xty, out[1]);
        };
        let m = m.clone();
        let ivar = self.fresh("row");
        self.idx_range.insert(ivar, m.clone());
        self.begin_block();
        let onehot = self.one_hot(&m, Atom::Var(ivar), rs);
        let out = self.emit_vjp(lam, xl, vec![onehot], &rty, &xty, span);
        let body = self.end_block(vec![out[1]]);
        let xt = xty.leaf_types().remove(0);
        let rows_ty = Type { elem: xt.elem, shape: [vec![m.clone()], xt.shape].concat() };
        let rows = self.emit1(IExpr::For { ivar, size: m.clone(), body }, rows_ty, "jac", Some(self.loc(span)));
        Val::data(Ty::array(m, xty), rows)
    }

    /// `hessian f x`: `jacfwd` of the gradient (forward over reverse).
    pub(super) fn hessian(&mut self, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let (f, fs) = args[0].clone();
        let (x, xs) = args[1].clone();
        let Some((xty, xl, s)) = self.jacobian_point("hessian", &x, &xs) else { return Val::Error };
        let Some((lam, rty)) = self.function_lambda("hessian", &f, &fs, &xty, span) else { return Val::Error };
        if self.scalar_result("hessian", &rty, &fs).is_none() {
            return Val::Error;
        }
        // \x' -> grad f x'
        let params: Vec<Binder> = xty.leaf_types().into_iter().map(|ty| Binder { var: self.fresh("x"), ty }).collect();
        let primals: Vec<Atom> = params.iter().map(|p| Atom::Var(p.var)).collect();
        self.begin_block();
        let out = self.emit_vjp(lam, primals, vec![super::emit::lit_of(s, 1.0)], &rty, &xty, span);
        let body = self.end_block(vec![out[1]]);
        let grad = ir::Lambda { params, body };
        self.jacobian_by_jvp(grad, xl, &xty, s, &xty, span)
    }
}

/// The float scalar type of an `f64`/`f32` scalar or vector type.
fn float_vector_or_scalar(t: &Ty) -> Option<Scalar> {
    match t {
        Ty::Scalar(s) if s.is_float() => Some(*s),
        Ty::Array(_, e) => match **e {
            Ty::Scalar(s) if s.is_float() => Some(s),
            _ => None,
        },
        _ => None,
    }
}

/// The type with every `idx n` read as `i64` (tangents carry no ranges).
fn decay(t: &Ty) -> Ty {
    match t {
        Ty::Idx(_) => Ty::Scalar(Scalar::I64),
        Ty::Array(n, e) => Ty::Array(n.clone(), Box::new(decay(e))),
        Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(decay).collect()),
        t => t.clone(),
    }
}
