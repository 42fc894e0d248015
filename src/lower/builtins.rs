//! The prelude's built-in functions (LANGUAGE.md §6): one table of names and
//! arities, and for each a lowering that checks its arguments and emits IR
//! (or, for the ones written in `prelude.ard`, inlines that body).

use super::Lowerer;
use super::emit::{highest, lit_of, lowest};
use super::value::{FunKind, Val};
use crate::diag::Diagnostic;
use crate::ir::prim::{Accepts, Typing};
use crate::ir::{self, Atom, Expr as IExpr, Prim, ReduceOp, Scalar, Size};
use crate::syntax::ast::{BinOp, Span};
use crate::types::Ty;

/// Every built-in that is not a scalar primitive, with its arity (the
/// scalar ones are the rows of `ir/prim.rs` with a `builtin` name).
const TABLE: &[(&str, usize)] = &[
    // arrays
    ("length", 1),
    ("iota", 1),
    ("replicate", 2),
    ("map", 2),
    ("map2", 3),
    ("map3", 4),
    ("zip", 2),
    ("unzip", 1),
    ("sum", 1),
    ("prod", 1),
    ("maximum", 1),
    ("minimum", 1),
    ("argmax", 1),
    ("argmin", 1),
    ("reduce", 3),
    ("scan", 3),
    ("transpose", 1),
    ("flatten", 1),
    ("unflatten", 3),
    ("concat", 2),
    ("reverse", 1),
    ("rotate", 2),
    ("scatter_add", 3),
    ("dot", 2),
    ("matmul", 2),
    ("matvec", 2),
    ("outer", 2),
    ("logsumexp", 1),
    ("softmax", 1),
    ("cholesky", 1),
    ("logdet", 1),
    ("inverse", 1),
    ("trisolve_lower", 2),
    ("trisolve_upper", 2),
    ("solve", 2),
    // random numbers (prelude.ard)
    ("key", 1),
    ("split", 2),
    ("fold_in", 2),
    ("uniform", 2),
    ("uniform_f32", 2),
    // differentiation (LANGUAGE.md §7), lowered in `lower/diff.rs`
    ("jvp", 3),
    ("jvp2", 3),
    ("jacfwd", 2),
    ("stop_gradient", 1),
    ("grad", 2),
    ("vjp", 3),
    ("vjp2", 3),
    ("jacrev", 2),
    ("hessian", 2),
];

pub fn lookup(name: &str) -> Option<&'static str> {
    Prim::from_builtin(name).and_then(|p| p.row().builtin).or_else(|| TABLE.iter().find(|(n, _)| *n == name).map(|(n, _)| *n))
}

/// Every built-in's name, the scalar primitives first.
pub fn names() -> Vec<&'static str> {
    Prim::ALL.iter().filter_map(|p| p.row().builtin).chain(TABLE.iter().map(|(n, _)| *n)).collect()
}

pub fn arity(name: &str) -> usize {
    match Prim::from_builtin(name) {
        Some(p) => p.arity(),
        None => TABLE.iter().find(|(n, _)| *n == name).map(|(_, a)| *a).unwrap_or(0),
    }
}

/// Lower a built-in that is a scalar primitive, checking its arguments as
/// its row's typing says (the surface language is stricter than the IR:
/// `min` and `max` take numbers only).
fn scalar_builtin(l: &mut Lowerer, name: &str, p: Prim, args: &[(Val, Span)], span: &Span) -> Val {
    let row = p.row();
    match (row.typing, args) {
        (Typing::To(to), [(v, s)]) => l.convert(name, to, v, s),
        (Typing::Same(Accepts::Float), [(v, s)]) => l.float_unary(name, p, v.clone(), s),
        (Typing::Same(Accepts::Numeric), [(v, s)]) => {
            let Some((sc, x)) = l.scalar_operand(v, s, &format!("`{name}`")) else { return Val::Error };
            if sc == Scalar::Bool {
                return l.error(Diagnostic::new(format!("`{name}` needs a number, found bool"), s.clone()).label("bool"));
            }
            Val::data(Ty::Scalar(sc), l.prim(p, vec![x], sc, None))
        }
        (Typing::Test(Accepts::Float), [(v, s)]) => {
            let Some((_, x)) = l.float_scalar(v, s, &format!("`{name}`")) else { return Val::Error };
            Val::data(Ty::Scalar(Scalar::Bool), l.prim(p, vec![x], Scalar::Bool, None))
        }
        (Typing::Same(accepts), [(x, xs), (y, ys)]) => {
            let what = format!("`{name}`");
            let Some((sc, a, b)) = l.unify_scalars(&what, x, xs, y, ys, span) else { return Val::Error };
            if !accepts.accepts(sc) || sc == Scalar::Bool {
                let (needs, hint) = match accepts {
                    Accepts::Float => ("f64 or f32", "convert with `f64 x`"),
                    Accepts::Int => ("i64 or i32", "convert with `i64 x` (it truncates)"),
                    _ => ("numbers", "convert with `f64 x`"),
                };
                return l.error(
                    Diagnostic::new(format!("`{name}` needs {needs}, found {}", sc.name()), span.clone()).label(format!("{} arguments", sc.name())).hint(hint),
                );
            }
            Val::data(Ty::Scalar(sc), l.prim(p, vec![a, b], sc, None))
        }
        (Typing::Same(_) | Typing::Test(_) | Typing::To(_) | Typing::Select, _) => {
            l.error(Diagnostic::new(format!("internal: the built-in `{name}` has no lowering for its typing"), span.clone()))
        }
    }
}

/// A scalar built-in, elementwise where an argument is an array or a tuple.
fn scalar_builtin_lifted(l: &mut Lowerer, name: &str, p: Prim, args: Vec<(Val, Span)>, span: &Span) -> Val {
    if args.iter().any(|(v, _)| Lowerer::lifts(v)) {
        return l.lifted(&format!("`{name}`"), args, span, &|l, a| scalar_builtin_lifted(l, name, p, a, span));
    }
    scalar_builtin(l, name, p, &args, span)
}

/// Lower a saturated call of a built-in.
pub(super) fn call(l: &mut Lowerer, name: &str, args: Vec<(Val, Span)>, span: &Span) -> Val {
    let a = |k: usize| args[k].clone();
    if let Some(p) = Prim::from_builtin(name) {
        return scalar_builtin_lifted(l, name, p, args, span);
    }
    match name {
        "length" => {
            let (v, s) = a(0);
            let Some(ty) = l.array_arg(&v, &s, "`length`") else { return Val::Error };
            let n = ty.dims()[0].clone();
            l.size_value(&n)
        }
        "iota" => {
            let (v, s) = a(0);
            let Some((n, _)) = l.int_operand(&v, &s, "the argument of `iota`") else { return Val::Error };
            let size = l.size_of_atom(n).expect("i64");
            if !l.count_not_negative(&size, &s, "the length given to `iota`") {
                return Val::Error;
            }
            let t = Ty::array(size, Ty::Scalar(Scalar::I64));
            let lt = t.leaf_types().remove(0);
            Val::data(t, l.emit1(IExpr::Iota { n }, lt, "iota", Some(l.loc(span))))
        }
        "replicate" => {
            let ((nv, ns), (x, xs)) = (a(0), a(1));
            let Some((n, _)) = l.int_operand(&nv, &ns, "the count of `replicate`") else { return Val::Error };
            let Some((ety, leaves)) = l.data_arg(&x, &xs, "`replicate`") else { return Val::Error };
            let size = l.size_of_atom(n).expect("i64");
            if !l.count_not_negative(&size, &ns, "the count of `replicate`") {
                return Val::Error;
            }
            let rty = Ty::array(size, ety);
            let loc = Some(l.loc(span));
            let out: Vec<Atom> = leaves.iter().zip(rty.leaf_types()).map(|(v, t)| l.emit1(IExpr::Replicate { n, val: *v }, t, "rep", loc.clone())).collect();
            Lowerer::from_data(&rty, &out)
        }
        "map" | "map2" | "map3" => {
            let (f, fs) = a(0);
            if !matches!(f, Val::Fun(_)) {
                let d = l.describe(&f);
                return l.error(Diagnostic::new(format!("the first argument of `{name}` must be a function, but this is {d}"), fs).label("not a function"));
            }
            let arrays: Vec<(Val, Span)> = args[1..].to_vec();
            if !l.same_length(name, &arrays) {
                return Val::Error;
            }
            // The function gets one element of each array: a function that
            // wants more arguments would leave functions in the result.
            if let Val::Fun(fun) = &f {
                let wants = l.arity_of(&fun.kind).saturating_sub(fun.args.len());
                let given = arrays.len();
                if wants > given {
                    let what = if given == 1 { "one element".to_string() } else { format!("{given} elements, one from each array") };
                    let plural = if wants == 1 { "" } else { "s" };
                    return l.error(
                        Diagnostic::new(format!("the function given to `{name}` takes {wants} argument{plural}, but `{name}` passes it {what}"), fs)
                            .label(format!("takes {wants} argument{plural}"))
                            .hint(match given {
                                1 => "use `map2 f a b` to combine two arrays elementwise, or apply the extra arguments first: `map (f y) a`",
                                _ => "apply the extra arguments first, or use the `map` variant that takes as many arrays as the function takes arguments",
                            }),
                    );
                }
            }
            l.call_prelude(name, args, span)
        }
        "zip" => {
            let arrays = args.clone();
            if !l.same_length(name, &arrays) {
                return Val::Error;
            }
            let (ta, la) = l.to_data(&arrays[0].0).expect("checked");
            let (tb, lb) = l.to_data(&arrays[1].0).expect("checked");
            let (Ty::Array(n, ea), Ty::Array(_, eb)) = (ta, tb) else { unreachable!("checked arrays") };
            let ty = Ty::Array(n, Box::new(Ty::Tuple(vec![*ea, *eb])));
            Val::Data { ty, leaves: la.into_iter().chain(lb).collect() }
        }
        "unzip" => {
            let (v, s) = a(0);
            match &v {
                Val::Data { ty: Ty::Array(n, e), leaves } if matches!(**e, Ty::Tuple(_)) => {
                    let Ty::Tuple(parts) = &**e else { unreachable!() };
                    let mut out = vec![];
                    let mut at = 0;
                    for p in parts {
                        let t = Ty::Array(n.clone(), Box::new(p.clone()));
                        let k = t.leaf_count();
                        out.push(Lowerer::from_data(&t, &leaves[at..at + k]));
                        at += k;
                    }
                    Val::Tuple(out)
                }
                Val::Error => Val::Error,
                other => {
                    let d = l.describe(other);
                    l.error(Diagnostic::new(format!("`unzip` needs an array of tuples, but this is {d}"), s).label("not an array of tuples"))
                }
            }
        }
        "sum" | "prod" | "maximum" | "minimum" => {
            let (v, s) = a(0);
            let Some((ty, arr, sc)) = l.numeric_array(&v, &s, name) else { return Val::Error };
            let (op, ne) = match name {
                "sum" => (ReduceOp::Add, lit_of(sc, 0.0)),
                "prod" => (ReduceOp::Mul, lit_of(sc, 1.0)),
                "maximum" => (ReduceOp::Max, lowest(sc)),
                _ => (ReduceOp::Min, highest(sc)),
            };
            let rty = ty.strip(1).expect("array").clone();
            let lt = rty.leaf_types().remove(0);
            Val::data(rty, l.emit1(IExpr::Reduce { op, ne: vec![ne], arrs: vec![arr] }, lt, name, Some(l.loc(span))))
        }
        "argmax" | "argmin" => {
            let (v, s) = a(0);
            let Some((ty, arr, _)) = l.numeric_array(&v, &s, name) else { return Val::Error };
            if ty.dims().len() != 1 {
                let t = l.show(&ty);
                return l.error(Diagnostic::new(format!("`{name}` needs a one-dimensional array, found {t}"), s).label(format!("type {t}")));
            }
            let n = ty.dims()[0].clone();
            let r = l.emit1(IExpr::ArgExt { max: name == "argmax", arr }, ir::Type::scalar(Scalar::I64), name, Some(l.loc(span)));
            Val::data(Ty::Idx(n), r)
        }
        "scan" if l.scan_has_outputs(&args[0].0, &args[0].1, &args[1].0, &args[2].0) => l.scan_outputs(args, span),
        "reduce" | "scan" => l.reduce_or_scan(name == "scan", args, span),
        "transpose" | "flatten" | "reverse" => {
            let (v, s) = a(0);
            let Some(ty) = l.array_arg(&v, &s, &format!("`{name}`")) else { return Val::Error };
            let dims = ty.dims();
            if name != "reverse" && dims.len() < 2 {
                let t = l.show(&ty);
                return l.error(Diagnostic::new(format!("`{name}` needs an array with at least two axes, found {t}"), s).label(format!("type {t}")));
            }
            let elem = ty.strip(dims.len()).expect("dims").clone();
            let new_dims: Vec<Size> = match name {
                "transpose" => [vec![dims[1].clone(), dims[0].clone()], dims[2..].to_vec()].concat(),
                "flatten" => {
                    let Some(n) = l.checked_size(dims[0].try_mul(&dims[1]), span, "the size of the result of `flatten`") else {
                        return Val::Error;
                    };
                    [vec![n], dims[2..].to_vec()].concat()
                }
                _ => dims.clone(),
            };
            let rty = Ty::array_of(&new_dims, elem);
            l.leafwise(&v, &rty, span, |leaf| match name {
                "transpose" => IExpr::Transpose(leaf),
                "flatten" => IExpr::Flatten(leaf),
                _ => IExpr::Reverse(leaf),
            })
        }
        "unflatten" => {
            let ((nv, ns), (mv, ms), (x, xs)) = (a(0), a(1), a(2));
            let Some((n, _)) = l.int_operand(&nv, &ns, "the first size of `unflatten`") else { return Val::Error };
            let Some((m, _)) = l.int_operand(&mv, &ms, "the second size of `unflatten`") else { return Val::Error };
            let Some(ty) = l.array_arg(&x, &xs, "`unflatten`") else { return Val::Error };
            let dims = ty.dims();
            let (ns_, ms_) = (l.size_of_atom(n).expect("i64"), l.size_of_atom(m).expect("i64"));
            if !l.count_not_negative(&ns_, &ns, "the first size of `unflatten`") || !l.count_not_negative(&ms_, &ms, "the second size of `unflatten`") {
                return Val::Error;
            }
            let Some(prod) = l.checked_size(ns_.try_mul(&ms_), span, "the sizes of `unflatten`") else { return Val::Error };
            // LANGUAGE.md §3: sizes the checker cannot show equal are an
            // error unless the programmer coerces with `:>`.
            if prod != dims[0] {
                let (p, d, t) = (l.show_size(&prod), l.show_size(&dims[0]), l.show(&ty));
                let (sn, sm) = (l.snippet(&ns), l.snippet(&ms));
                let elem = l.show(ty.strip(1).expect("array"));
                return l.error(
                    Diagnostic::new(format!("`unflatten {sn} {sm}` needs an outer axis of {p} elements, but the array has {d}"), xs.clone())
                        .label(format!("type {t}"))
                        .hint(format!(
                            "the sizes must multiply out to the outer axis; if they are equal at run time, coerce: `unflatten {sn} {sm} (a :> [{}]{elem})`",
                            paren_product(&sn, &sm)
                        )),
                );
            }
            let elem = ty.strip(1).expect("array").clone();
            let rty = Ty::array(ns_, Ty::array(ms_, elem));
            l.leafwise(&x, &rty, span, |leaf| IExpr::Unflatten { arr: leaf, n, m })
        }
        "concat" => {
            let ((x, xs), (y, ys)) = (a(0), a(1));
            let Some(tx) = l.array_arg(&x, &xs, "`concat`") else { return Val::Error };
            let Some(ty) = l.array_arg(&y, &ys, "`concat`") else { return Val::Error };
            let (ex, ey) = (tx.strip(1).expect("array").clone(), ty.strip(1).expect("array").clone());
            if !ex.compatible(&ey) {
                let (p, q) = (l.show(&tx), l.show(&ty));
                return l.error(
                    Diagnostic::new(format!("`concat` needs arrays whose rows have the same type, found {p} and {q}"), span.clone())
                        .label("rows differ")
                        .hint("only the outer axis may differ in size"),
                );
            }
            let Some(n) = l.checked_size(tx.dims()[0].try_add(&ty.dims()[0]), span, "the size of the result of `concat`") else {
                return Val::Error;
            };
            let rty = Ty::array(n, ex);
            let (_, lx) = l.to_data(&x).expect("data");
            let (_, ly) = l.to_data(&y).expect("data");
            let loc = Some(l.loc(span));
            let out: Vec<Atom> = lx.iter().zip(&ly).zip(rty.leaf_types()).map(|((p, q), t)| l.emit1(IExpr::Concat(*p, *q), t, "cat", loc.clone())).collect();
            Lowerer::from_data(&rty, &out)
        }
        "rotate" => {
            let ((kv, ks), (x, xs)) = (a(0), a(1));
            let Some((k, _)) = l.int_operand(&kv, &ks, "the amount of `rotate`") else { return Val::Error };
            let Some(ty) = l.array_arg(&x, &xs, "`rotate`") else { return Val::Error };
            l.leafwise(&x, &ty, span, |leaf| IExpr::Rotate { k, arr: leaf })
        }
        "scatter_add" => l.scatter_add(args, span),
        "dot" | "outer" => {
            let ((x, xs), (y, ys)) = (a(0), a(1));
            let Some((tx, sx)) = l.float_vector(&x, &xs, name) else { return Val::Error };
            let Some((ty, sy)) = l.float_vector(&y, &ys, name) else { return Val::Error };
            if sx != sy {
                return l.mismatch(name, &tx, &ty, span, "element types differ");
            }
            if name == "dot" && tx.dims()[0] != ty.dims()[0] {
                return l.mismatch(name, &tx, &ty, span, "`dot` needs two vectors of the same length");
            }
            l.call_prelude(name, args, span)
        }
        "matmul" | "matvec" => {
            let ((x, xs), (y, ys)) = (a(0), a(1));
            let Some((tx, sx)) = l.float_array_rank(&x, &xs, name, 2) else { return Val::Error };
            let Some((ty, sy)) = l.float_array_rank(&y, &ys, name, if name == "matmul" { 2 } else { 1 }) else { return Val::Error };
            if sx != sy {
                return l.mismatch(name, &tx, &ty, span, "element types differ");
            }
            if tx.dims()[1] != ty.dims()[0] {
                let why = format!("the inner sizes must agree: {} columns against {} rows", l.show_size(&tx.dims()[1]), l.show_size(&ty.dims()[0]));
                return l.mismatch(name, &tx, &ty, span, &why);
            }
            l.call_prelude(name, args, span)
        }
        "cholesky" | "logdet" | "inverse" => {
            let (x, xs) = a(0);
            if l.square_matrix(&x, &xs, name).is_none() {
                return Val::Error;
            }
            l.call_prelude(name, args, span)
        }
        "trisolve_lower" | "trisolve_upper" | "solve" => {
            let ((x, xs), (y, ys)) = (a(0), a(1));
            let Some((tx, sx)) = l.square_matrix(&x, &xs, name) else { return Val::Error };
            let Some((ty, _, sy)) = l.numeric_array(&y, &ys, name) else { return Val::Error };
            if sx != sy || ty.dims().len() > 2 {
                return l.mismatch(name, &tx, &ty, span, "the right-hand side is a vector or a matrix of the matrix's element type");
            }
            if tx.dims()[0] != ty.dims()[0] {
                let why = format!("the right-hand side needs {} rows, one per row of the matrix", l.show_size(&tx.dims()[0]));
                return l.mismatch(name, &tx, &ty, span, &why);
            }
            l.call_prelude(name, args, span)
        }
        "logsumexp" | "softmax" => {
            let (x, xs) = a(0);
            if l.float_vector(&x, &xs, name).is_none() {
                return Val::Error;
            }
            l.call_prelude(name, args, span)
        }
        // typed in the prelude: its checks name the argument
        "key" | "split" | "fold_in" | "uniform" | "uniform_f32" => l.call_prelude(name, args, span),
        "jvp" | "jvp2" => l.jvp(name == "jvp2", args, span),
        "jacfwd" => l.jacfwd(args, span),
        "grad" => l.grad(args, span),
        "vjp" => l.vjp(super::diff::Reverse::Vjp, args, span),
        "vjp2" => l.vjp(super::diff::Reverse::Vjp2, args, span),
        "jacrev" => l.jacrev(args, span),
        "hessian" => l.hessian(args, span),
        "stop_gradient" => {
            let (x, xs) = a(0);
            let Some((ty, _)) = l.data_arg(&x, &xs, "`stop_gradient`") else { return Val::Error };
            l.leafwise(&x, &ty, span, IExpr::StopGradient)
        }
        _ => unreachable!("every built-in in TABLE is handled: {name}"),
    }
}

/// `a*b` for a coercion hint, parenthesising compound operands.
fn paren_product(a: &str, b: &str) -> String {
    let wrap = |s: &str| if s.chars().all(|c| c.is_alphanumeric() || c == '_') { s.to_string() } else { format!("({s})") };
    format!("{}*{}", wrap(a), wrap(b))
}

impl Lowerer<'_> {
    /// A count or length that is a negative constant is a compile-time
    /// error (it would fail at run time); other counts are checked at run
    /// time.
    pub(super) fn count_not_negative(&mut self, n: &Size, span: &Span, what: &str) -> bool {
        match n.as_const() {
            Some(c) if c < 0 => {
                self.error(
                    Diagnostic::new(format!("{what} is negative ({c})"), span.clone())
                        .label("a size must be 0 or more")
                        .hint("array sizes and counts cannot be negative"),
                );
                false
            }
            _ => true,
        }
    }

    fn call_prelude(&mut self, name: &str, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let index = self.prelude_decls[name];
        self.call_decl(index, true, args, span)
    }

    fn float_scalar(&mut self, v: &Val, s: &Span, what: &str) -> Option<(Scalar, Atom)> {
        let v = self.coerce_literals(v.clone(), &Ty::Scalar(Scalar::F64));
        let (sc, x) = self.scalar_operand(&v, s, what)?;
        if !sc.is_float() {
            self.error(
                Diagnostic::new(format!("{what} needs f64 or f32, found {}", sc.name()), s.clone())
                    .label(format!("this is {}", sc.name()))
                    .hint("convert with `f64 x`"),
            );
            return None;
        }
        Some((sc, x))
    }

    /// The conversion `name` (`f64 x`) of a scalar to `to`.
    fn convert(&mut self, name: &str, to: Scalar, v: &Val, s: &Span) -> Val {
        let Some((sc, x)) = self.scalar_operand(v, s, &format!("the conversion `{name}`")) else { return Val::Error };
        if sc == to {
            // `i64 i` of an `idx n` forgets the range; otherwise a no-op,
            // except that `i64 1` is no longer a literal that could
            // stand for a float (`x + i64 1` is a type error)
            if let Atom::Lit(_) = x {
                return Val::data(Ty::Scalar(to), self.emit1(IExpr::Atom(x), ir::Type::scalar(to), "conv", None));
            }
            return Val::data(Ty::Scalar(to), x);
        }
        Val::data(Ty::Scalar(to), self.prim(Prim::Convert(to), vec![x], to, None))
    }

    fn float_unary(&mut self, name: &str, p: Prim, v: Val, s: &Span) -> Val {
        let Some((sc, x)) = self.float_scalar(&v, s, &format!("`{name}`")) else { return Val::Error };
        Val::data(Ty::Scalar(sc), self.prim(p, vec![x], sc, None))
    }

    /// An array argument (of scalars or tuples): its type.
    fn array_arg(&mut self, v: &Val, s: &Span, what: &str) -> Option<Ty> {
        match v {
            Val::Data { ty: ty @ Ty::Array(..), .. } => Some(ty.clone()),
            Val::Error => None,
            other => {
                let d = self.describe(other);
                self.error(Diagnostic::new(format!("{what} needs an array, but this is {d}"), s.clone()).label("not an array"));
                None
            }
        }
    }

    pub(super) fn data_arg(&mut self, v: &Val, s: &Span, what: &str) -> Option<(Ty, Vec<Atom>)> {
        match self.to_data(v) {
            Some(d) => Some(d),
            None if v.contains_error() => None,
            None => {
                self.error(
                    Diagnostic::new(format!("{what} needs data, but this is a function"), s.clone()).label("a function").hint("arrays cannot hold functions"),
                );
                None
            }
        }
    }

    /// An array of numbers (any rank): its type, atom and scalar.
    fn numeric_array(&mut self, v: &Val, s: &Span, name: &str) -> Option<(Ty, Atom, Scalar)> {
        let ty = self.array_arg(v, s, &format!("`{name}`"))?;
        let lt = ty.leaf_types();
        if lt.len() != 1 || lt[0].elem == Scalar::Bool {
            let t = self.show(&ty);
            self.error(
                Diagnostic::new(format!("`{name}` needs an array of numbers, found {t}"), s.clone())
                    .label(format!("type {t}"))
                    .hint("for arrays of tuples use `reduce` with your own operator"),
            );
            return None;
        }
        Some((ty, v.atom().expect("one leaf"), lt[0].elem))
    }

    fn float_array_rank(&mut self, v: &Val, s: &Span, name: &str, rank: usize) -> Option<(Ty, Scalar)> {
        let (ty, _, sc) = self.numeric_array(v, s, name)?;
        if !sc.is_float() || ty.dims().len() != rank {
            let t = self.show(&ty);
            let want = if rank == 1 { "a vector" } else { "a matrix" };
            self.error(Diagnostic::new(format!("`{name}` needs {want} of f64 or f32, found {t}"), s.clone()).label(format!("type {t}")));
            return None;
        }
        Some((ty, sc))
    }

    /// A square matrix of floats (the sizes equal at compile time).
    fn square_matrix(&mut self, v: &Val, s: &Span, name: &str) -> Option<(Ty, Scalar)> {
        let (ty, sc) = self.float_array_rank(v, s, name, 2)?;
        if ty.dims()[0] != ty.dims()[1] {
            let t = self.show(&ty);
            self.error(
                Diagnostic::new(format!("`{name}` needs a square matrix, found {t}"), s.clone())
                    .label(format!("type {t}"))
                    .hint("if the sizes are equal at run time, coerce with `:> [n][n]f64`"),
            );
            return None;
        }
        Some((ty, sc))
    }

    fn float_vector(&mut self, v: &Val, s: &Span, name: &str) -> Option<(Ty, Scalar)> {
        self.float_array_rank(v, s, name, 1)
    }

    fn mismatch(&mut self, name: &str, a: &Ty, b: &Ty, span: &Span, why: &str) -> Val {
        let (p, q) = (self.show(a), self.show(b));
        // `:>` changes sizes, never element types: a conversion is the fix there
        let elems = (a.leaf_types(), b.leaf_types());
        let hint = match (elems.0.first().map(|t| t.elem), elems.1.first().map(|t| t.elem)) {
            (Some(x), Some(y)) if x != y => {
                let (x, y) = (x.name(), y.name());
                format!("the element types differ ({x} and {y}): convert one array, e.g. `{y} a` for an array `a` of {x}")
            }
            _ => "check the shapes of the arguments; if the sizes are equal at run time, coerce with `:>`".to_string(),
        };
        self.error(Diagnostic::new(format!("`{name}` cannot combine {p} and {q}"), span.clone()).label(why.to_string()).hint(hint))
    }

    /// All arguments are arrays with equal outer size.
    fn same_length(&mut self, name: &str, arrays: &[(Val, Span)]) -> bool {
        let mut first: Option<(Ty, Span)> = None;
        for (v, s) in arrays {
            let Some(ty) = self.array_arg(v, s, &format!("`{name}`")) else { return false };
            match &first {
                None => first = Some((ty, s.clone())),
                Some((t0, s0)) if t0.dims()[0] != ty.dims()[0] => {
                    let (p, q) = (self.show(t0), self.show(&ty));
                    self.error(
                        Diagnostic::new(format!("`{name}` needs arrays of the same length, found {p} and {q}"), s.clone())
                            .label(format!("length {}", self.show_size(&ty.dims()[0])))
                            .note(s0.clone(), format!("length {}", self.show_size(&t0.dims()[0])))
                            .hint("if the lengths are equal at run time, coerce with `:> [n]t`"),
                    );
                    return false;
                }
                _ => {}
            }
        }
        true
    }

    /// Apply a one-operand array operation to every leaf of `v`.
    pub(super) fn leafwise(&mut self, v: &Val, rty: &Ty, span: &Span, mk: impl Fn(Atom) -> IExpr) -> Val {
        let (_, leaves) = self.to_data(v).expect("data");
        let loc = Some(self.loc(span));
        let out: Vec<Atom> = leaves.iter().zip(rty.leaf_types()).map(|(a, t)| self.emit1(mk(*a), t, "arr", loc.clone())).collect();
        Lowerer::from_data(rty, &out)
    }

    fn reduce_or_scan(&mut self, is_scan: bool, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let name = if is_scan { "scan" } else { "reduce" };
        let (op, ops) = args[0].clone();
        let (ne, nes) = args[1].clone();
        let (arr, arrs) = args[2].clone();
        let Some(aty) = self.array_arg(&arr, &arrs, &format!("`{name}`")) else { return Val::Error };
        let ety = aty.strip(1).expect("array").clone();
        let ne = self.coerce_literals(ne, &ety);
        let Some((nty, ne_leaves)) = self.data_arg(&ne, &nes, &format!("the neutral element of `{name}`")) else { return Val::Error };
        if !nty.compatible(&ety) {
            let (p, q) = (self.show(&nty), self.show(&ety));
            return self.error(
                Diagnostic::new(format!("the neutral element of `{name}` has type {p}, but the elements have type {q}"), nes.clone())
                    .label(format!("type {p}")),
            );
        }
        let Val::Fun(f) = &op else {
            if op.is_error() {
                return Val::Error;
            }
            let d = self.describe(&op);
            return self.error(Diagnostic::new(format!("the operator of `{name}` must be a function, but this is {d}"), ops).label("not a function"));
        };
        let elem_leaves = ety.leaf_types();
        let builtin = match (&f.kind, f.args.is_empty(), elem_leaves.len() == 1 && elem_leaves[0].elem != Scalar::Bool) {
            (FunKind::Op(BinOp::Add), true, true) => Some(ReduceOp::Add),
            (FunKind::Op(BinOp::Mul), true, true) => Some(ReduceOp::Mul),
            (FunKind::Builtin("max"), true, true) => Some(ReduceOp::Max),
            (FunKind::Builtin("min"), true, true) => Some(ReduceOp::Min),
            _ => None,
        };
        let rop = match builtin {
            Some(r) => r,
            None => {
                // A user operator becomes a lambda over (accumulator, element).
                let params: Vec<ir::Binder> =
                    elem_leaves.iter().chain(elem_leaves.iter()).map(|t| ir::Binder { var: self.fresh("r"), ty: t.clone() }).collect();
                let k = elem_leaves.len();
                let atoms: Vec<Atom> = params.iter().map(|b| Atom::Var(b.var)).collect();
                let x = Lowerer::from_data(&ety, &atoms[..k]);
                let y = Lowerer::from_data(&ety, &atoms[k..]);
                self.begin_block();
                let r = self.apply(op.clone(), &ops, vec![(x, ops.clone()), (y, ops.clone())], span);
                let r = self.coerce_literals(r, &ety);
                let stmts = self.blocks.pop().unwrap_or_default();
                let Some((rty, rl)) = self.to_data(&r) else {
                    if r.contains_error() {
                        return Val::Error;
                    }
                    return self.error(Diagnostic::new(format!("the operator of `{name}` must return data"), ops).label("returns a function"));
                };
                if rty != ety && !rty.compatible(&ety) {
                    let (p, q) = (self.show(&rty), self.show(&ety));
                    return self.error(
                        Diagnostic::new(format!("the operator of `{name}` returns {p}, but it must return the element type {q}"), ops)
                            .label("wrong result type")
                            .hint(if is_scan && matches!(rty, Ty::Tuple(ref ts) if ts.len() == 2) {
                                "a scan with outputs takes a step `\\s x -> (next_state, output)` whose next state has the initial state's type"
                            } else {
                                "the operator combines two elements into one"
                            }),
                    );
                }
                ReduceOp::Lambda(ir::Lambda { params, body: ir::Block { stmts, result: rl } })
            }
        };
        let (_, arr_leaves) = self.to_data(&arr).expect("data");
        let rty = if is_scan { aty.clone() } else { ety.clone() };
        let expr = if is_scan { IExpr::Scan { op: rop, ne: ne_leaves, arrs: arr_leaves } } else { IExpr::Reduce { op: rop, ne: ne_leaves, arrs: arr_leaves } };
        let out = self.emit(expr, rty.leaf_types(), name, Some(self.loc(span)));
        Lowerer::from_data(&rty, &out)
    }

    fn scatter_add(&mut self, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let (dest, ds) = args[0].clone();
        let (idxs, is) = args[1].clone();
        let (vals, vs) = args[2].clone();
        let Some((dty, d, dsc)) = self.numeric_array(&dest, &ds, "scatter_add") else { return Val::Error };
        let Some(ity) = self.array_arg(&idxs, &is, "the indexes of `scatter_add`") else { return Val::Error };
        if ity.dims().len() != 1 || !matches!(ity.strip(1), Some(Ty::Scalar(Scalar::I64))) {
            let t = self.show(&ity);
            return self.error(Diagnostic::new(format!("the indexes of `scatter_add` must be a [k]i64 array, found {t}"), is).label(format!("type {t}")));
        }
        let Some((vty, v, vsc)) = self.numeric_array(&vals, &vs, "scatter_add") else { return Val::Error };
        let want = Ty::array(ity.dims()[0].clone(), dty.strip(1).expect("array").clone());
        if vsc != dsc || !vty.compatible(&want) {
            let (p, q) = (self.show(&want), self.show(&vty));
            return self.error(
                Diagnostic::new(format!("the values of `scatter_add` must have type {p} (one row of the destination per index), found {q}"), vs)
                    .label(format!("type {q}")),
            );
        }
        let i = idxs.atom().expect("one leaf");
        let lt = dty.leaf_types().remove(0);
        let loc = self.loc(span);
        let r = self.emit1(IExpr::ScatterAdd { dest: d, idxs: i, vals: v, loc: loc.clone() }, lt, "sc", Some(loc));
        Val::data(dty, r)
    }
}
