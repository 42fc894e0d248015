//! Arithmetic lifted to arrays and tuples (issue 28): `+ - * / % **`,
//! comparisons and unary minus apply elementwise to arrays of one shape and
//! component by component to tuples of one structure, and a scalar (or any
//! operand that is not a tuple) is broadcast into the other side (an array
//! into each component of a tuple; a scalar into an array), so
//! `w - lr * g` updates an array or a whole tuple of parameter arrays. An
//! array operation is a `for` over the outer axis whose body applies the
//! operation to the rows: the IR is what the explicit `for` would give, so
//! differentiation and the optimiser see nothing new.
//!
//! The scalar built-ins (`tanh`, `logaddexp`, `f64`, …) lift the same way:
//! `tanh x` of an array is `for i. tanh x[i]`.
//!
//! Also the functional update `a with [i, j] = v`: `update` statements (one
//! per axis indexed, the inner rows read first), which write in place when
//! `a` is not used afterwards and which both differentiation modes know.

use super::Lowerer;
use super::value::Env;
use super::value::Val;
use crate::diag::{Diagnostic, Span};
use crate::ir::{self, Atom, Expr as IExpr, Size};
use crate::syntax::ast::{BinOp, Expr, ExprKind, IndexArg, UnOp};
use crate::types::Ty;

impl Lowerer<'_> {
    /// Whether an operand makes an operator elementwise: an array or a tuple.
    pub(super) fn lifts(v: &Val) -> bool {
        matches!(v, Val::Tuple(_) | Val::Data { ty: Ty::Array(..), .. })
    }

    /// `x op y` with an array or a tuple among the operands.
    pub(super) fn lifted_binop(&mut self, op: BinOp, x: Val, xs: &Span, y: Val, ys: &Span, span: &Span) -> Val {
        let what = format!("`{}`", op.symbol());
        self.lifted(&what, vec![(x, xs.clone()), (y, ys.clone())], span, &|l, a| l.binop(op, a[0].0.clone(), &a[0].1, a[1].0.clone(), &a[1].1, span))
    }

    /// `-v` (or `!v`) with `v` an array or a tuple.
    pub(super) fn lifted_unop(&mut self, op: UnOp, v: Val, span: &Span) -> Val {
        let what = if op == UnOp::Neg { "`-`" } else { "`!`" };
        self.lifted(what, vec![(v, span.clone())], span, &|l, a| l.unop(op, a[0].0.clone(), span))
    }

    /// `what args` with an array or a tuple among the arguments: `scalar`
    /// applied component by component to tuples (any other argument is
    /// broadcast into each component), else elementwise over the arrays'
    /// outer axis (a scalar broadcast into each row). `scalar` lifts again
    /// on what is still an array or a tuple, down to the scalars.
    pub(super) fn lifted(&mut self, what: &str, args: Vec<(Val, Span)>, span: &Span, scalar: &dyn Fn(&mut Self, Vec<(Val, Span)>) -> Val) -> Val {
        let lengths: Vec<usize> = args.iter().filter_map(|(v, _)| if let Val::Tuple(c) = v { Some(c.len()) } else { None }).collect();
        if let Some(&len) = lengths.first() {
            if let Some(&other) = lengths.iter().find(|&&k| k != len) {
                return self.error(
                    Diagnostic::new(format!("{what} needs tuples of the same length, found {len} and {other} components"), span.clone())
                        .label("tuples of different lengths")
                        .hint("elementwise arithmetic pairs the components of two tuples one to one"),
                );
            }
            let component = |k: usize| -> Vec<(Val, Span)> {
                args.iter().map(|(v, s)| (if let Val::Tuple(c) = v { c[k].clone() } else { v.clone() }, s.clone())).collect()
            };
            return Val::Tuple((0..len).map(|k| scalar(self, component(k))).collect());
        }
        let arrays: Vec<&Val> = args.iter().map(|(v, _)| v).filter(|v| Self::outer(v).is_some()).collect();
        let first = arrays.first().copied().cloned().expect("a lifted argument is an array or a tuple");
        if let Some(odd) = arrays.iter().find(|v| Self::dims(v) != Self::dims(&first)) {
            // every axis alike (a lower-rank array is not broadcast along
            // axes: NumPy would align the last axes instead)
            let shapes: Vec<String> = [&first, *odd].iter().map(|v| self.show_val(v)).collect();
            let (tx, ty) = (&shapes[0], &shapes[1]);
            let label = match what.strip_prefix('`').and_then(|w| w.strip_suffix('`')) {
                Some(op) if args.len() == 2 && !op.chars().next().is_some_and(char::is_alphabetic) => format!("{tx} `{op}` {ty}"),
                _ => format!("{tx} and {ty}"),
            };
            return self.error(
                Diagnostic::new(format!("{what} needs arrays of one shape, found {tx} and {ty}"), span.clone())
                    .label(label)
                    .hint("the sizes must be equal at compile time; coerce one side with `:> [n]t` if they are equal at run time"),
            );
        }
        let n = Self::outer(&first).expect("an array");
        self.elementwise(n, span, |l, i, n| {
            let rows = args.iter().map(|(v, s)| (l.row(v.clone(), i, n, s), s.clone())).collect();
            scalar(l, rows)
        })
    }

    /// The outer size of an array operand.
    fn outer(v: &Val) -> Option<Size> {
        match v {
            Val::Data { ty: Ty::Array(n, _), .. } => Some(n.clone()),
            _ => None,
        }
    }

    /// The axes of an array operand (of its tuple elements' common shape).
    fn dims(v: &Val) -> Vec<Size> {
        match v {
            Val::Data { ty, .. } => ty.dims(),
            _ => vec![],
        }
    }

    fn show_val(&self, v: &Val) -> String {
        match v {
            Val::Data { ty, .. } => self.show(ty),
            other => self.describe(other),
        }
    }

    /// `for (i < n). body i`, where `body` builds the element from the rows.
    fn elementwise(&mut self, n: Size, span: &Span, body: impl FnOnce(&mut Self, Atom, &Size) -> Val) -> Val {
        let ivar = self.fresh("i");
        self.idx_range.insert(ivar, n.clone());
        self.begin_block();
        let bv = body(self, Atom::Var(ivar), &n);
        let stmts = self.blocks.pop().unwrap_or_default();
        if bv.contains_error() {
            return Val::Error;
        }
        let Some((bty, leaves)) = self.to_data(&bv) else { return Val::Error };
        let rty = Ty::array(n.clone(), bty);
        let out = self.emit(IExpr::For { ivar, size: n, body: ir::Block { stmts, result: leaves } }, rty.leaf_types(), "arr", Some(self.loc(span)));
        Self::from_data(&rty, &out)
    }

    /// Row `i` (an index of the outer axis `n`, in range) of an array
    /// operand; any other operand is broadcast unchanged.
    fn row(&mut self, v: Val, i: Atom, n: &Size, span: &Span) -> Val {
        let Val::Data { ty: ty @ Ty::Array(..), leaves } = v else { return v };
        let check = self.index_check(i, &Ty::Idx(n.clone()), n, span);
        let rty = ty.strip(1).expect("an array has an axis").clone();
        let loc = Some(self.loc(span));
        let mut out = vec![];
        for (leaf, lt) in leaves.iter().zip(ty.leaf_types()) {
            let t = ir::Type { elem: lt.elem, shape: lt.shape[1..].to_vec() };
            out.push(self.emit1(IExpr::Index { arr: *leaf, idx: vec![i], checks: vec![check.clone()] }, t, "x", loc.clone()));
        }
        Self::from_data(&rty, &out)
    }

    /// `a with [i, …] = v`; `target` is the parsed `a[i, …]`.
    pub(super) fn with_update(&mut self, target: &Expr, v: &Expr, span: &Span, env: &Env) -> Val {
        let ExprKind::Index(a, args) = &target.kind else { unreachable!("the parser makes the target an index") };
        let arr = self.expr(a, env);
        let mut idxs = vec![];
        for arg in args {
            match arg {
                IndexArg::Single(e) => idxs.push((self.expr(e, env), e.span.clone())),
                IndexArg::Slice(lo, hi) => {
                    let s = lo.span.start..hi.span.end;
                    return self.error(
                        Diagnostic::new("a slice cannot be replaced with `with`", s)
                            .label("a slice")
                            .hint("replace elements one at a time, or build the array with `for k. if lo <= k && k < hi then v[k - lo] else a[k]`"),
                    );
                }
            }
        }
        let val = self.expr(v, env);
        if arr.is_error() || val.contains_error() || idxs.iter().any(|(x, _)| x.is_error()) {
            return Val::Error;
        }
        let Val::Data { ty: ty @ Ty::Array(..), leaves } = &arr else {
            let d = self.describe(&arr);
            return self.error(Diagnostic::new(format!("only arrays can be updated with `with`, but this is {d}"), a.span.clone()).label("not an array"));
        };
        let dims = ty.dims();
        if idxs.len() > dims.len() {
            let t = self.show(ty);
            return self.error(
                Diagnostic::new(format!("too many indexes: {} given, but the array has {} axes", idxs.len(), dims.len()), target.span.clone())
                    .label(format!("type {t}")),
            );
        }
        let mut atoms = vec![];
        for (x, s) in &idxs {
            let Some((at, ity)) = self.int_operand(x, s, "an index") else { return Val::Error };
            atoms.push((at, ity, s.clone()));
        }
        let elem = ty.strip(atoms.len()).expect("checked rank").clone();
        let val = self.coerce_literals(val, &elem);
        let Some((vty, vleaves)) = self.to_data(&val) else {
            let d = self.describe(&val);
            return self.error(Diagnostic::new(format!("the new value must be data, but this is {d}"), v.span.clone()).label("not data"));
        };
        if vty != elem {
            let (want, got) = (self.show(&elem), self.show(&vty));
            return self.error(
                Diagnostic::new(format!("`with` replaces a {want}, but the new value has type {got}"), v.span.clone())
                    .label(format!("type {got}"))
                    .hint(format!("the value must have the type of `{}` at these indexes", self.show(ty))),
            );
        }
        let ty = ty.clone();
        let leaf_tys = ty.leaf_types();
        let out: Vec<Atom> = leaves.iter().zip(&leaf_tys).zip(&vleaves).map(|((leaf, lt), v)| self.update_leaf(*leaf, lt, &atoms, &dims, *v, span)).collect();
        Self::from_data(&ty, &out)
    }

    /// One leaf array with the element at `idxs` replaced by `v`: the rows
    /// down to the last index read (checked), the innermost replaced, each
    /// row put back into the one above.
    fn update_leaf(&mut self, arr: Atom, lt: &ir::Type, idxs: &[(Atom, Ty, Span)], dims: &[Size], v: Atom, span: &Span) -> Atom {
        let ((i, ity, ispan), rest) = idxs.split_first().expect("at least one index");
        let loc = self.loc(ispan);
        let new = if rest.is_empty() {
            v
        } else {
            let check = self.index_check(*i, ity, &dims[0], ispan);
            let rt = ir::Type { elem: lt.elem, shape: lt.shape[1..].to_vec() };
            let row = self.emit1(IExpr::Index { arr, idx: vec![*i], checks: vec![check] }, rt.clone(), "row", Some(loc.clone()));
            self.update_leaf(row, &rt, rest, &dims[1..], v, span)
        };
        self.emit1(IExpr::Update { arr, idx: *i, val: new, loc: loc.clone() }, lt.clone(), "upd", Some(self.loc(span)))
    }
}
