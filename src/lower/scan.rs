//! `scan` with outputs (issue 28): `scan (\s x -> (s', y)) init xs` runs the
//! step over the elements of `xs` in order, threading the state, and returns
//! the final state with the stacked outputs `(s_n, [y_0, .., y_{n-1}])`, as
//! JAX's `lax.scan`; `scan (\s i -> (s', y)) init n` is the counted form, the
//! step getting the index `i < n` instead of an element. Which `scan` a call
//! is follows from the step's result: the element type (the prefix scan of
//! LANGUAGE.md) or a pair whose first component is the state's type (a type
//! cannot be both).
//!
//! It is lowered to a counted `loop` whose state is the user's state and one
//! array per output leaf, each written at row `i` by an `update` (in place:
//! the array is not used again), so the IR is what the hand-written loop
//! would give and both differentiation modes see nothing new: O(n) time and
//! memory, forward and reverse.

use super::Lowerer;
use super::emit::lit_of;
use super::expr::{has_float_literal, has_int_literal, narrow_literals, widen_int_literals};
use super::value::Val;
use crate::diag::{Diagnostic, Span};
use crate::ir::{self, Atom, Expr as IExpr, LoopKind as ILoopKind};
use crate::types::Ty;

/// What the step iterates over.
enum Over {
    /// the leaves of an array `[n]x`, and its element type `x`
    Elements(Vec<Atom>, Ty),
    /// the indexes `0 .. n-1`
    Count,
}

impl Lowerer<'_> {
    /// Whether `scan op ne arr` is the form with outputs: `arr` is a count,
    /// or applying `op` to the state and an element gives a pair whose first
    /// component has the state's type (tried silently).
    pub(super) fn scan_has_outputs(&mut self, op: &Val, ops: &Span, ne: &Val, arr: &Val) -> bool {
        self.retyped_state(op, ops, ne, arr).is_some()
    }

    /// The initial state with which the step gives a pair: `ne` itself, or
    /// with its literals retyped as `loop` does (`scan (\s x -> (s + x, s))
    /// 0 xs` over floats: the literal widens to `f64`, or becomes `f32` over
    /// `f32` elements).
    fn retyped_state(&mut self, op: &Val, ops: &Span, ne: &Val, arr: &Val) -> Option<Val> {
        if self.step_gives_pair(op, ops, ne, arr) {
            return Some(ne.clone());
        }
        if !has_int_literal(ne) && !has_float_literal(ne) {
            return None;
        }
        [widen_int_literals(ne.clone()), narrow_literals(ne.clone())].into_iter().find(|v| self.step_gives_pair(op, ops, v, arr))
    }

    fn step_gives_pair(&mut self, op: &Val, ops: &Span, ne: &Val, arr: &Val) -> bool {
        let Some(nty) = self.val_ty(ne) else { return false };
        let elem = match arr {
            Val::Data { ty: Ty::Array(_, e), .. } => (**e).clone(),
            Val::Data { ty: Ty::Scalar(s), .. } => return s.is_int(),
            Val::Data { ty: Ty::Idx(_), .. } => return true,
            _ => return false,
        };
        if !matches!(op, Val::Fun(_)) {
            return false;
        }
        self.quiet += 1;
        let errors_before = self.quiet_errors;
        let fresh = |l: &mut Self, t: &Ty| {
            let atoms: Vec<Atom> = t.leaf_types().iter().map(|_| Atom::Var(l.fresh("probe"))).collect();
            Self::from_data(t, &atoms)
        };
        let (s, x) = (fresh(self, &nty), fresh(self, &elem));
        self.begin_block();
        let r = self.apply(op.clone(), ops, vec![(s, ops.clone()), (x, ops.clone())], ops);
        self.blocks.pop();
        self.quiet -= 1;
        let ok = self.quiet_errors == errors_before;
        match (ok, r) {
            (true, Val::Tuple(parts)) if parts.len() == 2 => {
                let first = self.coerce_literals(parts[0].clone(), &nty);
                self.val_ty(&first).is_some_and(|t| t.compatible(&nty))
            }
            _ => false,
        }
    }

    /// `scan step init xs` or `scan step init n` returning `(state, ys)`.
    pub(super) fn scan_outputs(&mut self, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let (op, ops) = args[0].clone();
        let (init, inits) = args[1].clone();
        let (arr, arrs) = args[2].clone();
        let (n, over) = match &arr {
            Val::Data { ty: Ty::Array(size, e), leaves } => (self.materialize(size), Over::Elements(leaves.clone(), (**e).clone())),
            _ => match self.int_operand(&arr, &arrs, "the count of `scan`") {
                Some((a, _)) => (a, Over::Count),
                None => return Val::Error,
            },
        };
        let Some(size) = self.size_of_atom(n) else { return Val::Error };
        let Some((mut sty, _)) = self.data_arg(&init, &inits, "the initial state of `scan`") else { return Val::Error };
        let mut init = init;
        if let Some(retyped) = self.retyped_state(&op, &ops, &init, &arr) {
            init = retyped;
            sty = self.val_ty(&init).expect("data");
        }
        // a second attempt when the step widens a literal initial state
        // (`scan (\s x -> (s + x, s)) 0 xs` over floats), as `loop` does
        for attempt in 0..2 {
            let (_, init_leaves) = self.to_data(&init).expect("data");
            let mark = self.var_mark();
            let params: Vec<ir::Binder> = sty.leaf_types().into_iter().map(|t| ir::Binder { var: self.fresh("acc"), ty: t }).collect();
            let state = Self::from_data(&sty, &params.iter().map(|b| Atom::Var(b.var)).collect::<Vec<_>>());
            let ivar = self.fresh("i");
            self.idx_range.insert(ivar, size.clone());
            self.begin_block();
            let x = match &over {
                Over::Elements(leaves, ety) => {
                    let rows: Vec<Atom> = leaves
                        .iter()
                        .zip(ety.leaf_types())
                        .map(|(a, t)| self.emit1(IExpr::Index { arr: *a, idx: vec![Atom::Var(ivar)], checks: vec![None] }, t, "x", None))
                        .collect();
                    Self::from_data(ety, &rows)
                }
                Over::Count => Val::data(Ty::Idx(size.clone()), Atom::Var(ivar)),
            };
            let r = self.apply(op.clone(), &ops, vec![(state, ops.clone()), (x, ops.clone())], span);
            if r.contains_error() {
                self.blocks.pop();
                return Val::Error;
            }
            let Val::Tuple(parts) = r else {
                self.blocks.pop();
                let d = self.describe(&r);
                return self.error(
                    Diagnostic::new(format!("the step of `scan` must return a pair (next state, output), but it returns a value {d}"), ops)
                        .label("the step function")
                        .hint("write the step as `\\s x -> (next_state, output)`"),
                );
            };
            let [next, out] = <[Val; 2]>::try_from(parts).unwrap_or_else(|p| unreachable!("checked by scan_has_outputs: {} parts", p.len()));
            let next = self.coerce_literals(next, &sty);
            let (Some((nty, next_leaves)), Some((yty, y_leaves))) = (self.to_data(&next), self.to_data(&out)) else {
                self.blocks.pop();
                return self.error(
                    Diagnostic::new("the step of `scan` must return data, not functions", ops).label("returns a function").hint("arrays cannot hold functions"),
                );
            };
            if nty != sty {
                self.blocks.pop();
                let widened = self.coerce_literals(init.clone(), &nty);
                let wty = self.val_ty(&widened).expect("data");
                if attempt == 0 && wty == nty {
                    (init, sty) = (widened, wty);
                    continue;
                }
                let (a, b) = (self.show(&sty), self.show(&nty));
                return self.error(
                    Diagnostic::new("the step of `scan` must return the next state with the type of the initial state", ops)
                        .label(format!("the next state has type {b}"))
                        .note(inits, format!("the state starts as {a}"))
                        .hint("the state keeps one type and shape in every step (write `0.0`, not `0`, for a float accumulator)"),
                );
            }
            let yty = decay_indexes(yty);
            if yty.size_vars().iter().any(|v| v.0 >= mark) {
                self.blocks.pop();
                let t = self.show(&yty);
                return self.error(
                    Diagnostic::new(format!("the outputs of `scan` must have one shape known before the scan, but this one has type {t}"), ops)
                        .label("the step function")
                        .hint("every step's output is a row of one array, so its size cannot depend on the step"),
                );
            }
            // the stacked outputs: one `[n]` array per leaf of the output
            let ys_ty = Ty::array(size.clone(), yty.clone());
            let loc = self.loc(span);
            let ys_params: Vec<ir::Binder> = ys_ty.leaf_types().into_iter().map(|t| ir::Binder { var: self.fresh("ys"), ty: t }).collect();
            let written: Vec<Atom> = ys_params
                .iter()
                .zip(&y_leaves)
                .map(|(p, y)| {
                    let upd = IExpr::Update { arr: Atom::Var(p.var), idx: Atom::Var(ivar), val: *y, loc: loc.clone() };
                    self.emit1(upd, p.ty.clone(), "ys", Some(loc.clone()))
                })
                .collect();
            let stmts = self.blocks.pop().unwrap_or_default();
            let body = ir::Block { stmts, result: next_leaves.into_iter().chain(written).collect() };
            let zeros: Vec<Atom> = ys_params.iter().map(|p| self.zeros_of(&p.ty)).collect();
            let all_params: Vec<ir::Binder> = params.into_iter().chain(ys_params).collect();
            let tys: Vec<ir::Type> = all_params.iter().map(|p| p.ty.clone()).collect();
            let kind = ILoopKind::Count { ivar, n, down: false };
            let out = self.emit(IExpr::Loop { params: all_params, init: init_leaves.into_iter().chain(zeros).collect(), kind, body }, tys, "scan", Some(loc));
            let k = sty.leaf_count();
            return Val::Tuple(vec![Self::from_data(&sty, &out[..k]), Self::from_data(&ys_ty, &out[k..])]);
        }
        unreachable!("the scan returns within two attempts")
    }

    /// An array of zeros (`false` for booleans) of type `t`.
    fn zeros_of(&mut self, t: &ir::Type) -> Atom {
        let mut val = lit_of(t.elem, 0.0);
        for k in (0..t.shape.len()).rev() {
            let n = self.materialize(&t.shape[k]);
            let ty = ir::Type { elem: t.elem, shape: t.shape[k..].to_vec() };
            val = self.emit1(IExpr::Replicate { n, val }, ty, "zeros", None);
        }
        val
    }
}

/// `t` with every `idx n` component a plain `i64` (an output is stored in an
/// array, where indexes decay).
fn decay_indexes(t: Ty) -> Ty {
    match t {
        Ty::Tuple(ts) => Ty::Tuple(ts.into_iter().map(decay_indexes).collect()),
        t => t.decay_idx(),
    }
}
