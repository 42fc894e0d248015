//! Lowering of the forward-mode operators `jvp`, `jvp2` and `jacfwd`: the
//! function is elaborated once into a closed IR lambda over fresh
//! parameters, and an `Expr::Jvp` node records it with its primal and
//! tangent inputs; the `ad` stage expands the node. `jacfwd` runs one `jvp`
//! per basis direction inside a `for`.

use super::value::Val;
use super::Lowerer;
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
        let Some((xty, xl)) = self.primal_arg("jacfwd", &x, &xs) else { return Val::Error };
        let Some(s) = float_vector_or_scalar(&xty) else {
            let t = self.show(&xty);
            return self.error(
                Diagnostic::new(format!("`jacfwd` needs an f64/f32 scalar or vector point, but this has type {t}"), xs)
                    .label(format!("type {t}"))
                    .hint("flatten matrices first (`flatten m`), and pass one vector for several inputs"),
            );
        };
        let Some((lam, rty)) = self.function_lambda("jacfwd", &f, &fs, &xty, span) else { return Val::Error };
        if float_vector_or_scalar(&rty).is_none() {
            let t = self.show(&rty);
            return self.error(
                Diagnostic::new(format!("`jacfwd` needs a function returning an f64/f32 scalar or vector, but this one returns {t}"), fs)
                    .label(format!("returns {t}"))
                    .hint("return one vector, e.g. concatenate the outputs"),
            );
        }
        let ry = rty.leaf_types().remove(0);
        let Ty::Array(n, _) = &xty else {
            // scalar input: one direction, the derivative itself
            let out = self.emit_jvp(lam, xl, vec![super::emit::lit_of(s, 1.0)], &rty, span);
            return Val::data(rty, out[1]);
        };
        let n = n.clone();
        let ivar = self.fresh("dir");
        self.idx_range.insert(ivar, n.clone());
        self.begin_block();
        let jvar = self.fresh("k");
        self.begin_block();
        let c = self.prim(Prim::Eq, vec![Atom::Var(jvar), Atom::Var(ivar)], Scalar::Bool, None);
        let v = self.prim(Prim::Select, vec![c, super::emit::lit_of(s, 1.0), super::emit::lit_of(s, 0.0)], s, None);
        let hot_body = self.end_block(vec![v]);
        let onehot = self.emit1(IExpr::For { ivar: jvar, size: n.clone(), body: hot_body }, Type::array(s, vec![n.clone()]), "onehot", None);
        let out = self.emit_jvp(lam, xl, vec![onehot], &rty, span);
        let body = self.end_block(vec![out[1]]);
        let cols_ty = Type { elem: ry.elem, shape: [vec![n.clone()], ry.shape.clone()].concat() };
        let cols = self.emit1(IExpr::For { ivar, size: n.clone(), body }, cols_ty, "jac", Some(self.loc(span)));
        match &rty {
            Ty::Array(m, e) => {
                let t = Type { elem: ry.elem, shape: vec![m.clone(), n.clone()] };
                let j = self.emit1(IExpr::Transpose(cols), t, "jac", None);
                Val::data(Ty::array(m.clone(), Ty::array(n, (**e).clone())), j)
            }
            _ => Val::data(Ty::array(n, rty.clone()), cols),
        }
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
