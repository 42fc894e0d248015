//! Elaboration of expressions: each surface expression becomes IR
//! statements in the current block and a compile-time value.

use super::Lowerer;
use super::emit::lit_of;
use super::value::{Env, FunKind, FunVal, Val};
use crate::diag::Diagnostic;
use crate::ir::{self, Atom, Expr as IExpr, Lit, LoopKind as ILoopKind, Prim, Scalar, Size};
use crate::syntax::ast::{BinOp, Expr, ExprKind, ForIndex, IndexArg, LoopKind, Pat, Span, UnOp};
use crate::types::Ty;
use std::rc::Rc;

impl Lowerer<'_> {
    pub(super) fn expr(&mut self, e: &Expr, env: &Env) -> Val {
        if self.over_budget {
            return Val::Error;
        }
        stacker::maybe_grow(256 * 1024, 4 * 1024 * 1024, || self.expr_inner(e, env))
    }

    fn expr_inner(&mut self, e: &Expr, env: &Env) -> Val {
        let span = &e.span;
        match &e.kind {
            ExprKind::Int(v, suffix) => {
                let lit = match suffix {
                    Some(crate::syntax::ast::IntSuffix::I32) => Lit::I32(*v as i32),
                    _ => Lit::I64(*v),
                };
                Val::data(Ty::Scalar(lit.scalar()), Atom::Lit(lit))
            }
            ExprKind::Float(v, suffix) => {
                let lit = match suffix {
                    Some(crate::syntax::ast::FloatSuffix::F32) => Lit::F32(*v as f32),
                    _ => Lit::F64(*v),
                };
                Val::data(Ty::Scalar(lit.scalar()), Atom::Lit(lit))
            }
            ExprKind::Bool(b) => Val::data(Ty::Scalar(Scalar::Bool), Atom::Lit(Lit::Bool(*b))),
            ExprKind::Var(name) => self.lookup(name, span, env),
            ExprKind::Trace(label, inner) => self.trace(label, inner, span, env),
            ExprKind::Assert(msg, cond, inner) => self.assert(msg, cond, inner, span, env),
            ExprKind::Tuple(es) => {
                let t = Val::Tuple(es.iter().map(|x| self.expr(x, env)).collect());
                self.within_tuple_budget(t, span)
            }
            ExprKind::Array(es) => self.array_literal(es, span, env),
            ExprKind::Index(a, args) => {
                let arr = self.expr(a, env);
                self.index(arr, &a.span, args, span, env)
            }
            ExprKind::Proj(t, k, kspan) => {
                let v = self.expr(t, env);
                self.project(v, *k, kspan, &t.span)
            }
            ExprKind::App(f, args) => {
                let fv = self.expr(f, env);
                let argv: Vec<(Val, Span)> = args.iter().map(|a| (self.expr(a, env), a.span.clone())).collect();
                self.apply(fv, &f.span, argv, span)
            }
            ExprKind::Bin(BinOp::And, a, b) => self.short_circuit(true, a, b, span, env),
            ExprKind::Bin(BinOp::Or, a, b) => self.short_circuit(false, a, b, span, env),
            ExprKind::Bin(op, a, b) => {
                let x = self.expr(a, env);
                let y = self.expr(b, env);
                self.binop(*op, x, &a.span, y, &b.span, span)
            }
            ExprKind::Un(op, a) => {
                let x = self.expr(a, env);
                self.unop(*op, x, span)
            }
            ExprKind::OpSection(op) => Val::Fun(Rc::new(FunVal { kind: FunKind::Op(*op), args: vec![] })),
            ExprKind::Let(pat, ty, e1, e2) => {
                let mut v = self.expr(e1, env);
                if let Some(te) = ty {
                    v = self.check_annotation(v, te, env, &e1.span, "the `let` annotation");
                }
                let env2 = self.bind_pat(pat, v, env);
                self.expr(e2, &env2)
            }
            ExprKind::If(c, t, f) => self.if_expr(c, t, f, span, env),
            ExprKind::Lambda(params, body) => Val::Fun(Rc::new(FunVal {
                kind: FunKind::Lambda { params: params.clone(), body: Rc::new((**body).clone()), env: env.clone(), prelude: self.in_prelude() },
                args: vec![],
            })),
            ExprKind::For(idxs, body) => self.for_expr(idxs, body, span, env),
            ExprKind::Loop { pat, init, kind, body } => self.loop_expr(pat, init, kind, body, span, env),
            ExprKind::Coerce(a, te) => {
                let v = self.expr(a, env);
                self.coerce(v, te, span, env)
            }
            ExprKind::With(target, v) => self.with_update(target, v, span, env),
        }
    }

    pub(super) fn in_prelude(&self) -> bool {
        matches!(self.span_override.last(), Some(Some(_)))
    }

    fn lookup(&mut self, name: &str, span: &Span, env: &Env) -> Val {
        if let Some(v) = env.lookup(name) {
            return v.clone();
        }
        let prelude = self.in_prelude();
        let table = if prelude { &self.prelude_decls } else { &self.decls };
        if let Some(&index) = table.get(name) {
            let d = self.decl(index, prelude);
            if d.params.is_empty() && d.size_params.is_empty() {
                // A constant: evaluate its body here.
                return self.call_decl(index, prelude, vec![], span);
            }
            return Val::Fun(Rc::new(FunVal { kind: FunKind::Decl { index, prelude }, args: vec![] }));
        }
        if let Some(b) = super::builtins::lookup(name) {
            return Val::Fun(Rc::new(FunVal { kind: FunKind::Builtin(b), args: vec![] }));
        }
        let mut d = Diagnostic::new(format!("unknown name `{name}`"), span.clone()).label("not defined here");
        // Suggestions cost at most SUGGEST_SCAN names read and
        // SUGGEST_COMPARISONS edit distances per unknown name, and stop
        // after SUGGEST_MAX_ERRORS diagnostics (a file of typos stays linear).
        let suggest = name.chars().count() <= SUGGEST_MAX_LEN && self.diags.len() < SUGGEST_MAX_ERRORS;
        let best = if suggest {
            let near = |c: &str| near_in_length(name, c);
            let mut candidates = super::builtins::names().iter().filter(|c| near(c)).map(|s| s.to_string()).collect::<Vec<_>>();
            candidates.extend(env.names_where(SUGGEST_SCAN, &near));
            candidates.extend(self.decls.keys().take(SUGGEST_SCAN).filter(|c| near(c)).map(|s| s.to_string()));
            crate::diag::closest_name(name, candidates.iter().map(String::as_str), SUGGEST_COMPARISONS).map(str::to_string)
        } else {
            None
        };
        if let Some(best) = best {
            d = d.hint(format!("did you mean `{best}`?"));
        } else {
            d = d.hint("names must be defined by `let`, a parameter, a declaration or the prelude");
        }
        self.error(d)
    }

    /// Bind a pattern to a value.
    pub(super) fn bind_pat(&mut self, pat: &Pat, v: Val, env: &Env) -> Env {
        match pat {
            Pat::Var(id) => env.bind(&id.name, v),
            Pat::Tuple(ps, span) => {
                let parts: Vec<Val> = match v {
                    Val::Tuple(vs) if vs.len() == ps.len() => vs,
                    Val::Error => vec![Val::Error; ps.len()],
                    other => {
                        let what = self.describe(&other);
                        self.error(
                            Diagnostic::new(format!("this pattern expects a tuple of {} values", ps.len()), span.clone())
                                .label(format!("but the value is {what}")),
                        );
                        vec![Val::Error; ps.len()]
                    }
                };
                let mut env = env.clone();
                for (p, v) in ps.iter().zip(parts) {
                    env = self.bind_pat(p, v, &env);
                }
                env
            }
        }
    }

    /// "a value of type [n]f64", "a function", "a tuple of 2 values".
    pub(super) fn describe(&self, v: &Val) -> String {
        match v {
            Val::Data { ty, .. } => format!("of type {}", self.show(ty)),
            Val::Tuple(vs) => match self.val_ty(v) {
                Some(t) => format!("of type {}", self.show(&t)),
                None => format!("a tuple of {} values", vs.len()),
            },
            Val::Fun(_) => "a function".into(),
            Val::Error => "erroneous".into(),
        }
    }

    /// The surface type of a value made only of data.
    pub(super) fn val_ty(&self, v: &Val) -> Option<Ty> {
        match v {
            Val::Data { ty, .. } => Some(ty.clone()),
            Val::Tuple(vs) => vs.iter().map(|x| self.val_ty(x)).collect::<Option<Vec<_>>>().map(Ty::Tuple),
            _ => None,
        }
    }

    /// Flatten a data value to its type and leaves (`None` for functions and errors).
    pub(super) fn to_data(&self, v: &Val) -> Option<(Ty, Vec<Atom>)> {
        match v {
            Val::Data { ty, leaves } => Some((ty.clone(), leaves.clone())),
            Val::Tuple(vs) => {
                let mut tys = vec![];
                let mut leaves = vec![];
                for x in vs {
                    let (t, l) = self.to_data(x)?;
                    tys.push(t);
                    leaves.extend(l);
                }
                Some((Ty::Tuple(tys), leaves))
            }
            _ => None,
        }
    }

    /// Rebuild a value from a type and its flat leaves.
    pub(super) fn from_data(ty: &Ty, leaves: &[Atom]) -> Val {
        match ty {
            Ty::Tuple(ts) => {
                let mut out = vec![];
                let mut at = 0;
                for t in ts {
                    let n = t.leaf_count();
                    out.push(Self::from_data(t, &leaves[at..at + n]));
                    at += n;
                }
                Val::Tuple(out)
            }
            _ => Val::Data { ty: ty.clone(), leaves: leaves.to_vec() },
        }
    }

    /// Convert literal leaves so that `v` gets type `target` where a literal
    /// allows it (an integer literal where a float or `i32` is expected, a
    /// float literal where `f32` is expected). Other values are unchanged.
    pub(super) fn coerce_literals(&self, v: Val, target: &Ty) -> Val {
        match (v, target) {
            (Val::Data { ty: Ty::Scalar(s), leaves }, Ty::Scalar(t)) if leaves.len() == 1 && s != *t => match convert_literal(leaves[0], *t) {
                Some(a) => Val::data(Ty::Scalar(*t), a),
                None => Val::Data { ty: Ty::Scalar(s), leaves },
            },
            (Val::Tuple(vs), Ty::Tuple(ts)) if vs.len() == ts.len() => Val::Tuple(vs.into_iter().zip(ts).map(|(v, t)| self.coerce_literals(v, t)).collect()),
            (v, _) => v,
        }
    }

    /// A scalar operand: its scalar type and atom, or an error.
    pub(super) fn scalar_operand(&mut self, v: &Val, span: &Span, what: &str) -> Option<(Scalar, Atom)> {
        match v {
            Val::Data { ty, leaves } if leaves.len() == 1 => match ty.as_scalar() {
                Some(s) => Some((s, leaves[0])),
                None => {
                    let t = self.show(ty);
                    self.error(
                        Diagnostic::new(format!("{what} needs a scalar, but this has type {t}"), span.clone())
                            .label(format!("type {t}"))
                            .hint("arithmetic works on scalars; write `for i. ...` to work elementwise on arrays"),
                    );
                    None
                }
            },
            Val::Error => None,
            other => {
                let d = self.describe(other);
                self.error(Diagnostic::new(format!("{what} needs a scalar, but this is {d}"), span.clone()).label("not a scalar"));
                None
            }
        }
    }

    /// `assert "message" cond e`: `e` where `cond` holds, else the call
    /// stops with the message (an `if` whose other branch fails).
    fn assert(&mut self, msg: &str, cond: &Expr, e: &Expr, span: &Span, env: &Env) -> Val {
        let c = self.expr(cond, env);
        let v = self.expr(e, env);
        if c.contains_error() || v.contains_error() {
            return Val::Error;
        }
        let Some((sc, catom)) = self.scalar_operand(&c, &cond.span, "the condition of `assert`") else { return Val::Error };
        if sc != Scalar::Bool {
            return self.error(
                Diagnostic::new(format!("the condition of `assert` must be a bool, found {}", sc.name()), cond.span.clone())
                    .label("not a bool")
                    .hint("compare: `assert \"…\" (x > 0.0) e`"),
            );
        }
        let Some((ty, leaves)) = self.to_data(&v) else {
            let d = self.describe(&v);
            return self.error(Diagnostic::new(format!("`assert` guards data, but this is {d}"), e.span.clone()).label("not data"));
        };
        let tys = ty.leaf_types();
        let loc = self.loc(span);
        self.begin_block();
        let failed = self.emit(IExpr::Fail { msg: format!("assertion failed: {msg}"), loc: loc.clone() }, tys.clone(), "failed", Some(loc.clone()));
        let else_b = ir::Block { stmts: self.blocks.pop().unwrap_or_default(), result: failed };
        let then_b = ir::Block { stmts: vec![], result: leaves };
        let out = self.emit(IExpr::If { cond: catom, then_b, else_b }, tys, "checked", Some(loc));
        Self::from_data(&ty, &out)
    }

    /// `trace "label" e`: `e`, its leaves passed through a statement that
    /// prints them when it runs.
    fn trace(&mut self, label: &str, e: &Expr, span: &Span, env: &Env) -> Val {
        let v = self.expr(e, env);
        if v.contains_error() {
            return Val::Error;
        }
        let Some((ty, leaves)) = self.to_data(&v) else {
            let d = self.describe(&v);
            return self.error(
                Diagnostic::new(format!("only data can be traced, but this is {d}"), e.span.clone())
                    .label("not data")
                    .hint("trace a value the function computes, e.g. `trace \"y\" (f x)`"),
            );
        };
        if leaves.is_empty() {
            return v;
        }
        let out = self.emit(IExpr::Trace { label: label.to_string(), args: leaves }, ty.leaf_types(), "traced", Some(self.loc(span)));
        Self::from_data(&ty, &out)
    }

    pub(super) fn unop(&mut self, op: UnOp, v: Val, span: &Span) -> Val {
        if Self::lifts(&v) {
            return self.lifted_unop(op, v, span);
        }
        let what = if op == UnOp::Neg { "negation `-`" } else { "`!`" };
        let Some((s, a)) = self.scalar_operand(&v, span, what) else { return Val::Error };
        match op {
            UnOp::Neg => {
                if s == Scalar::Bool {
                    return self.error(Diagnostic::new("cannot negate a bool", span.clone()).label("bool").hint("use `!b` for logical not"));
                }
                if let Atom::Lit(l) = a {
                    return Val::data(Ty::Scalar(s), Atom::Lit(negate_lit(l)));
                }
                // Integers as `0 - x` so the symbolic value is kept; floats
                // with `Neg`, which differs from `0 - x` in the sign of zero.
                let r = if s.is_float() { self.prim(Prim::Neg, vec![a], s, None) } else { self.prim(Prim::Sub, vec![lit_of(s, 0.0), a], s, None) };
                Val::data(Ty::Scalar(s), r)
            }
            UnOp::Not => {
                if s != Scalar::Bool {
                    return self.error(Diagnostic::new(format!("`!` needs a bool, found {}", s.name()), span.clone()).label("not a bool"));
                }
                Val::data(Ty::Scalar(Scalar::Bool), self.prim(Prim::Not, vec![a], Scalar::Bool, None))
            }
        }
    }

    /// Unify two scalar operands, converting a literal to the other side's type.
    pub(super) fn unify_scalars(&mut self, op: &str, x: &Val, xs: &Span, y: &Val, ys: &Span, span: &Span) -> Option<(Scalar, Atom, Atom)> {
        let (sa, mut a) = self.scalar_operand(x, xs, op)?;
        let (sb, mut b) = self.scalar_operand(y, ys, op)?;
        if sa == sb {
            return Some((sa, a, b));
        }
        if let Some(c) = convert_literal(a, sb) {
            a = c;
            return Some((sb, a, b));
        }
        if let Some(c) = convert_literal(b, sa) {
            b = c;
            return Some((sa, a, b));
        }
        self.error(
            Diagnostic::new(format!("{op} needs operands of the same type, found {} and {}", sa.name(), sb.name()), span.clone())
                .label(format!("{} {op} {}", sa.name(), sb.name()))
                .hint(format!("convert one side explicitly, e.g. `{} x`", if sa.is_float() { sa.name() } else { sb.name() })),
        );
        None
    }

    pub(super) fn binop(&mut self, op: BinOp, x: Val, xs: &Span, y: Val, ys: &Span, span: &Span) -> Val {
        if x.is_error() || y.is_error() {
            return Val::Error;
        }
        if Self::lifts(&x) || Self::lifts(&y) {
            return self.lifted_binop(op, x, xs, y, ys, span);
        }
        let sym = format!("`{}`", op.symbol());
        let Some((s, a, b)) = self.unify_scalars(&sym, &x, xs, &y, ys, span) else { return Val::Error };
        let loc = Some(self.loc(span));
        let (prim, out) = match op {
            BinOp::Add => (Prim::Add, s),
            BinOp::Sub => (Prim::Sub, s),
            BinOp::Mul => (Prim::Mul, s),
            BinOp::Div => (Prim::Div, s),
            BinOp::Rem => (Prim::Rem, s),
            BinOp::Pow => (Prim::Pow, s),
            BinOp::Eq => (Prim::Eq, Scalar::Bool),
            BinOp::Ne => (Prim::Ne, Scalar::Bool),
            BinOp::Lt => (Prim::Lt, Scalar::Bool),
            BinOp::Le => (Prim::Le, Scalar::Bool),
            BinOp::Gt => (Prim::Gt, Scalar::Bool),
            BinOp::Ge => (Prim::Ge, Scalar::Bool),
            BinOp::And => (Prim::And, Scalar::Bool),
            BinOp::Or => (Prim::Or, Scalar::Bool),
        };
        let numeric = !matches!(op, BinOp::Eq | BinOp::Ne | BinOp::And | BinOp::Or);
        if numeric && s == Scalar::Bool {
            return self.error(
                Diagnostic::new(format!("{sym} needs numbers, found bool"), span.clone()).label("bool operands").hint("use `&&`, `||` and `!` for logic"),
            );
        }
        if op == BinOp::Pow && !s.is_float() {
            return self.error(
                Diagnostic::new(format!("`**` needs f64 or f32 operands, found {}", s.name()), span.clone())
                    .label("integer power")
                    .hint("convert first, e.g. `f64 x ** 2.0`, or multiply repeatedly"),
            );
        }
        let r = self.prim(prim, vec![a, b], out, loc);
        Val::data(Ty::Scalar(out), r)
    }

    /// `a && b` and `a || b` evaluate `b` only when needed (so
    /// `i < n && a[i] > 0` is safe).
    fn short_circuit(&mut self, is_and: bool, a: &Expr, b: &Expr, span: &Span, env: &Env) -> Val {
        let op = if is_and { "`&&`" } else { "`||`" };
        let x = self.expr(a, env);
        let Some(ca) = self.bool_operand(&x, &a.span, op) else { return Val::Error };
        self.begin_block();
        let y = self.expr(b, env);
        let cb = self.bool_operand(&y, &b.span, op);
        let inner = self.end_block(vec![cb.unwrap_or(Atom::Lit(Lit::Bool(false)))]);
        let Some(_) = cb else { return Val::Error };
        let constant = ir::Block { stmts: vec![], result: vec![Atom::Lit(Lit::Bool(!is_and))] };
        let (then_b, else_b) = if is_and { (inner, constant) } else { (constant, inner) };
        let _ = span;
        let r = self.emit1(IExpr::If { cond: ca, then_b, else_b }, ir::Type::scalar(Scalar::Bool), "b", None);
        Val::data(Ty::Scalar(Scalar::Bool), r)
    }

    fn bool_operand(&mut self, v: &Val, span: &Span, what: &str) -> Option<Atom> {
        let (s, a) = self.scalar_operand(v, span, what)?;
        if s != Scalar::Bool {
            self.error(
                Diagnostic::new(format!("{what} needs a bool, found {}", s.name()), span.clone())
                    .label(format!("this is {}", s.name()))
                    .hint("compare explicitly, e.g. `x != 0`"),
            );
            return None;
        }
        Some(a)
    }

    fn project(&mut self, v: Val, k: usize, kspan: &Span, tspan: &Span) -> Val {
        match v {
            Val::Tuple(mut vs) if k < vs.len() => vs.swap_remove(k),
            Val::Tuple(vs) => self.error(
                Diagnostic::new(format!("tuple has {} components, so `.{k}` does not exist", vs.len()), kspan.clone())
                    .label(format!("valid components are .0 to .{}", vs.len().saturating_sub(1))),
            ),
            Val::Error => Val::Error,
            other => {
                let d = self.describe(&other);
                let mut diag = Diagnostic::new(format!("`.{k}` projects a tuple, but this value is {d}"), tspan.clone()).label("not a tuple");
                if matches!(&other, Val::Data { ty: Ty::Array(_, t), .. } if matches!(**t, Ty::Tuple(_))) {
                    diag = diag.hint("this is an array of tuples: index it first (`a[i].0`) or use `unzip`");
                }
                self.error(diag)
            }
        }
    }

    fn array_literal(&mut self, es: &[Expr], span: &Span, env: &Env) -> Val {
        let vals: Vec<Val> = es.iter().map(|e| self.expr(e, env)).collect();
        if vals.iter().any(Val::contains_error) {
            return Val::Error;
        }
        if let Some(i) = vals.iter().position(Val::contains_fun) {
            return self.error(
                Diagnostic::new("functions cannot be stored in arrays", es[i].span.clone())
                    .label("this element is a function")
                    .hint("functions exist only at compile time; pass them as arguments instead"),
            );
        }
        if vals.is_empty() {
            return self.error(Diagnostic::new("empty array literal", span.clone()).hint("write `replicate 0 x` for an empty array"));
        }
        // The element type: the first non-literal element decides, literals follow.
        let tys: Vec<Ty> = vals.iter().map(|v| self.val_ty(v).expect("data")).collect();
        let target = tys.iter().find(|t| !matches!(t, Ty::Scalar(Scalar::I64))).cloned().unwrap_or_else(|| tys[0].clone());
        let target = vals.iter().map(|v| self.val_ty(&self.coerce_literals(v.clone(), &target)).expect("data")).fold(None, |acc: Option<Ty>, t| match acc {
            None => Some(t),
            Some(a) if a.compatible(&t) => Some(a.join(&t)),
            Some(a) => Some(a),
        });
        let target = target.expect("non-empty");
        let mut leaves_per_elem = vec![];
        for (v, e) in vals.iter().zip(es) {
            let v = self.coerce_literals(v.clone(), &target);
            let (t, l) = self.to_data(&v).expect("data");
            if !t.compatible(&target) {
                let (a, b) = (self.show(&target), self.show(&t));
                return self.error(
                    Diagnostic::new("array elements must all have the same type and shape", e.span.clone())
                        .label(format!("this element has type {b}, the first has type {a}"))
                        .hint("arrays are regular: every row has the same length"),
                );
            }
            leaves_per_elem.push(l);
        }
        let n = Size::constant(es.len() as i64);
        let result_ty = Ty::array(n, target);
        let leaf_tys = result_ty.leaf_types();
        let mut leaves = vec![];
        for (k, lt) in leaf_tys.into_iter().enumerate() {
            let atoms: Vec<Atom> = leaves_per_elem.iter().map(|l| l[k]).collect();
            leaves.push(self.emit1(IExpr::ArrayLit(atoms), lt, "arr", None));
        }
        Self::from_data(&result_ty, &leaves)
    }

    fn if_expr(&mut self, c: &Expr, t: &Expr, f: &Expr, span: &Span, env: &Env) -> Val {
        let cv = self.expr(c, env);
        let cond = self.bool_operand(&cv, &c.span, "the condition of `if`");
        let mark = self.var_mark();
        self.begin_block();
        let tv = self.expr(t, env);
        let then_stmts = self.blocks.pop().unwrap_or_default();
        self.begin_block();
        let fv = self.expr(f, env);
        let else_stmts = self.blocks.pop().unwrap_or_default();
        let Some(cond) = cond else { return Val::Error };
        if tv.contains_error() || fv.contains_error() {
            return Val::Error;
        }
        for (v, e) in [(&tv, t), (&fv, f)] {
            if v.contains_fun() {
                return self.error(
                    Diagnostic::new("`if` cannot choose between functions", e.span.clone())
                        .label("this branch is a function")
                        .hint("every call must be known at compile time: apply the functions inside the branches instead"),
                );
            }
        }
        let tt = self.val_ty(&tv).expect("data");
        let ft = self.val_ty(&fv).expect("data");
        let tv = self.coerce_literals(tv, &ft);
        let fv = self.coerce_literals(fv, &tt);
        let (tt, tl) = self.to_data(&tv).expect("data");
        let (ft, fl) = self.to_data(&fv).expect("data");
        if !tt.compatible(&ft) {
            let (a, b) = (self.show(&tt), self.show(&ft));
            return self.error(
                Diagnostic::new("the branches of `if` have different types", span.clone())
                    .label(format!("`then` gives {a}, `else` gives {b}"))
                    .note(t.span.clone(), format!("type {a}"))
                    .note(f.span.clone(), format!("type {b}"))
                    .hint("make both branches the same type; for sizes the checker cannot relate, use `e :> [n]t`"),
            );
        }
        let ty = tt.join(&ft);
        if let Some(v) = ty.size_vars().into_iter().find(|v| v.0 >= mark) {
            let _ = v;
            let shown = self.show(&ty);
            return self.error(
                Diagnostic::new("the size of the result of `if` depends on values computed inside a branch", span.clone())
                    .label(format!("type {shown}"))
                    .hint("coerce each branch to a size known outside, e.g. `e :> [n]f64`"),
            );
        }
        let then_b = ir::Block { stmts: then_stmts, result: tl };
        let else_b = ir::Block { stmts: else_stmts, result: fl };
        let leaves = self.emit(IExpr::If { cond, then_b, else_b }, ty.leaf_types(), "r", None);
        Self::from_data(&ty, &leaves)
    }

    /// Evaluate an expression that must be an integer (size, count, index).
    pub(super) fn int_operand(&mut self, v: &Val, span: &Span, what: &str) -> Option<(Atom, Ty)> {
        let (s, a) = self.scalar_operand(v, span, what)?;
        if !s.is_int() {
            self.error(
                Diagnostic::new(format!("{what} must be an integer, found {}", s.name()), span.clone())
                    .label(format!("this is {}", s.name()))
                    .hint("convert with `i64 x`"),
            );
            return None;
        }
        let a = if s == Scalar::I32 { self.prim(Prim::Convert(Scalar::I64), vec![a], Scalar::I64, None) } else { a };
        let ty = match v {
            Val::Data { ty: Ty::Idx(n), .. } => Ty::Idx(n.clone()),
            _ => Ty::Scalar(Scalar::I64),
        };
        Some((a, ty))
    }

    fn index(&mut self, arr: Val, aspan: &Span, args: &[IndexArg], span: &Span, env: &Env) -> Val {
        // Evaluate the indexes first (left to right), then check.
        let mut idx_vals = vec![];
        let mut slice = None;
        for arg in args {
            match arg {
                IndexArg::Single(e) => idx_vals.push((self.expr(e, env), e.span.clone())),
                IndexArg::Slice(lo, hi) => {
                    let l = self.expr(lo, env);
                    let h = self.expr(hi, env);
                    slice = Some(((l, lo.span.clone()), (h, hi.span.clone())));
                }
            }
        }
        let (ty, leaves) = match &arr {
            Val::Error => return Val::Error,
            Val::Data { ty: ty @ Ty::Array(..), leaves } => (ty.clone(), leaves.clone()),
            other => {
                let d = self.describe(other);
                return self.error(Diagnostic::new(format!("only arrays can be indexed, but this is {d}"), aspan.clone()).label("not an array"));
            }
        };
        if let Some(((l, ls), (h, hs))) = slice {
            if !idx_vals.is_empty() {
                return self.error(
                    Diagnostic::new("a slice `a[lo:hi]` must be the only index", span.clone())
                        .label("slice mixed with indexes")
                        .hint("index first, then slice: `a[i][lo:hi]`"),
                );
            }
            return self.slice(ty, leaves, (l, ls), (h, hs), span);
        }
        let dims = ty.dims();
        if idx_vals.len() > dims.len() {
            let t = self.show(&ty);
            return self.error(
                Diagnostic::new(
                    format!("too many indexes: {} given, but the array has {} ax{}", idx_vals.len(), dims.len(), if dims.len() == 1 { "is" } else { "es" }),
                    span.clone(),
                )
                .label(format!("type {t}")),
            );
        }
        let mut atoms = vec![];
        let mut checks = vec![];
        for (k, (v, s)) in idx_vals.iter().enumerate() {
            let Some((a, ity)) = self.int_operand(v, s, "an index") else { return Val::Error };
            self.record_probe(&ity, a, &dims[k]);
            checks.push(self.index_check(a, &ity, &dims[k], s));
            atoms.push(a);
        }
        let rty = ty.strip(atoms.len()).expect("checked rank").clone();
        let mut out = vec![];
        let loc = Some(self.loc(span));
        for (leaf, lt) in leaves.iter().zip(ty.leaf_types()) {
            let t = ir::Type { elem: lt.elem, shape: lt.shape[atoms.len()..].to_vec() };
            out.push(self.emit1(IExpr::Index { arr: *leaf, idx: atoms.clone(), checks: checks.clone() }, t, "x", loc.clone()));
        }
        Self::from_data(&rty, &out)
    }

    /// While probing the size of a `for` index, the first array axis it
    /// indexes gives the size.
    /// An index of the form `i + c` (`c` not depending on loop indexes) is
    /// a weaker hint, used only when `i` is never an index by itself
    /// (`for i. if i == 0 then 0.0 else s[i - 1]`).
    /// Only axes whose size is known outside the loop count: an array built
    /// inside the body while probing (`(map sin y)[i]`, whose size there is
    /// a stand-in) says nothing, so a later `y[i]` still gives the size
    /// (placeholders are numbered after every variable bound outside).
    fn record_probe(&mut self, ity: &Ty, idx: Atom, axis: &Size) {
        let known_outside = |p: crate::ir::VarId| axis.vars().iter().all(|v| v.0 < p.0);
        if let Ty::Idx(n) = ity
            && let Some(p) = n.as_var()
            && let Some(slot @ None) = self.probes.get_mut(&p)
            && known_outside(p)
        {
            *slot = Some(axis.clone());
        }
        let Some(value) = self.size_of_atom(idx) else { return };
        let placeholders: Vec<crate::ir::VarId> = self.probes.keys().copied().collect();
        for p in placeholders {
            let rest = value.sub(&Size::var(p));
            let offset_only = value.vars().contains(&p) && rest.vars().iter().all(|v| !self.idx_range.contains_key(v) && !self.probes.contains_key(v));
            if offset_only && known_outside(p) {
                self.probe_offsets.entry(p).or_insert_with(|| axis.clone());
            }
        }
    }

    fn slice(&mut self, ty: Ty, leaves: Vec<Atom>, lo: (Val, Span), hi: (Val, Span), span: &Span) -> Val {
        let Some((la, _)) = self.int_operand(&lo.0, &lo.1, "a slice bound") else { return Val::Error };
        let Some((ha, _)) = self.int_operand(&hi.0, &hi.1, "a slice bound") else { return Val::Error };
        let n = ty.dims()[0].clone();
        let (ls, hs) = (self.size_of_atom(la).expect("i64"), self.size_of_atom(ha).expect("i64"));
        // Constant bounds outside a constant axis can only fail at run time.
        if let (Some(l), Some(h), Some(len)) = (ls.as_const(), hs.as_const(), n.as_const())
            && !(0 <= l && l <= h && h <= len)
        {
            let t = self.show(&ty);
            return self.error(
                Diagnostic::new(format!("the slice [{l}:{h}] is out of bounds for an array of {len} elements"), span.clone())
                    .label(format!("type {t}"))
                    .hint(format!("a slice `a[lo:hi]` needs 0 <= lo <= hi <= {len}")),
            );
        }
        let Some(len) = self.checked_size(hs.try_sub(&ls), span, "the length of this slice") else { return Val::Error };
        let nonneg = |v| self.nonneg.contains(&v) || self.idx_range.contains_key(&v);
        let fits = |s: Result<Size, crate::ir::SizeError>| s.is_ok_and(|s| s.provably_nonneg(&nonneg));
        let proven = ls.provably_nonneg(&nonneg) && fits(Ok(len.clone())) && fits(n.try_sub(&hs));
        let check = if proven {
            None
        } else {
            let loc = self.loc(span);
            if self.quiet == 0 {
                let desc = format!("slice `{}` of an axis of size {} could not be proven in bounds", self.snippet(span), self.show_size(&n));
                self.unproven.push((loc.clone(), desc));
            }
            Some(loc)
        };
        let Ty::Array(_, elem) = ty.clone() else { unreachable!("slice of an array") };
        let rty = Ty::Array(len.clone(), elem);
        let loc = Some(self.loc(span));
        let mut out = vec![];
        for (leaf, lt) in leaves.iter().zip(rty.leaf_types()) {
            out.push(self.emit1(IExpr::Slice { arr: *leaf, lo: la, hi: ha, check: check.clone() }, lt, "s", loc.clone()));
        }
        Self::from_data(&rty, &out)
    }

    fn for_expr(&mut self, idxs: &[ForIndex], body: &Expr, span: &Span, env: &Env) -> Val {
        let (first, rest) = idxs.split_first().expect("for has an index");
        let size = match &first.bound {
            Some(b) => {
                let v = self.expr(b, env);
                let Some((a, _)) = self.int_operand(&v, &b.span, "the bound of a `for` index") else { return Val::Error };
                let n = self.size_of_atom(a).expect("i64 atom");
                if !self.count_not_negative(&n, &b.span, "the bound of this `for` index") {
                    return Val::Error;
                }
                n
            }
            // Already probing an outer index: this index's size does not
            // matter for that probe, so do not probe again (which would make
            // nested `for`s exponential); an unknown size stands in.
            None if self.quiet > 0 => Size::var(self.fresh("?")),
            None => match self.infer_for_size(first, rest, body, env) {
                Some(s) => s,
                None => {
                    let n = &first.name.name;
                    return self.error(
                        Diagnostic::new(format!("cannot infer how many values `{n}` ranges over"), first.name.span.clone())
                            .label(format!("`{n}` is never used directly as an index into an array known outside the loop"))
                            .hint(format!("give the size explicitly: `for ({n} < n). ...`")),
                    );
                }
            },
        };
        let mark = self.var_mark();
        let ivar = self.fresh(&first.name.name);
        self.idx_range.insert(ivar, size.clone());
        let env2 = env.bind(&first.name.name, Val::data(Ty::Idx(size.clone()), Atom::Var(ivar)));
        self.begin_block();
        let bv = if rest.is_empty() { self.expr(body, &env2) } else { self.for_expr(rest, body, span, &env2) };
        let stmts = self.blocks.pop().unwrap_or_default();
        if bv.contains_error() {
            return Val::Error;
        }
        if bv.contains_fun() {
            // Inside a prelude function (`map f a`), the user wrote no
            // `for`: say what their function did.
            let label = if self.in_prelude() { "the function given here returns a function" } else { "this `for` body is a function" };
            return self.error(
                Diagnostic::new("the elements of an array cannot be functions", body.span.clone())
                    .label(label)
                    .hint("functions exist only at compile time; give the function all its arguments so it returns data"),
            );
        }
        let (bty, leaves) = self.to_data(&bv).expect("data");
        if bty.size_vars().iter().any(|v| v.0 >= mark) {
            let t = self.show(&bty);
            return self.error(
                Diagnostic::new("the size of each element depends on the loop index: irregular arrays are not allowed", body.span.clone())
                    .label(format!("element type {t}"))
                    .hint("every row of an array must have the same size; coerce with `:> [m]t` to a size known outside the loop"),
            );
        }
        let rty = Ty::array(size.clone(), bty);
        let body_b = ir::Block { stmts, result: leaves };
        let out = self.emit(IExpr::For { ivar, size, body: body_b }, rty.leaf_types(), "arr", Some(self.loc(span)));
        Self::from_data(&rty, &out)
    }

    /// Elaborate the body once with a placeholder size, silently, to find
    /// the first array axis the index is used on.
    fn infer_for_size(&mut self, first: &ForIndex, rest: &[ForIndex], body: &Expr, env: &Env) -> Option<Size> {
        let mark = self.var_mark();
        let placeholder = self.fresh(&format!("{}?", first.name.name));
        self.probes.insert(placeholder, None);
        self.quiet += 1;
        self.begin_block();
        let env2 = env.bind(&first.name.name, Val::data(Ty::Idx(Size::var(placeholder)), Atom::Var(placeholder)));
        if rest.is_empty() {
            self.expr(body, &env2);
        } else {
            self.for_expr(rest, body, &body.span, &env2);
        }
        self.blocks.pop();
        self.quiet -= 1;
        let offset = self.probe_offsets.remove(&placeholder);
        let found = self.probes.remove(&placeholder).flatten().or(offset)?;
        if found.vars().iter().any(|v| v.0 >= mark) {
            return None;
        }
        Some(found)
    }

    fn loop_expr(&mut self, pat: &Pat, init: &Expr, kind: &LoopKind, body: &Expr, span: &Span, env: &Env) -> Val {
        let iv = self.expr(init, env);
        if iv.contains_error() {
            return Val::Error;
        }
        if iv.contains_fun() {
            return self.error(
                Diagnostic::new("the state of a `loop` cannot be a function", init.span.clone())
                    .label("this initial value is a function")
                    .hint("loop over data and apply functions inside the body"),
            );
        }
        let count = match kind {
            LoopKind::For(_, n) => {
                let v = self.expr(n, env);
                match self.int_operand(&v, &n.span, "the count of a `loop`") {
                    Some((a, _)) => Some(a),
                    None => return Val::Error,
                }
            }
            LoopKind::While(_) => None,
        };
        let mut state = iv;
        // `loop s = 0 for ... do s + x` with a float `x`: an integer literal
        // in the initial state becomes an `f64` when the body needs it, and
        // `loop s = 0.0 ... do s + x` with an `f32` `x`: the literals become
        // `f32` (literals take their type from the body, so one program
        // serves both precisions).
        if (has_int_literal(&state) || has_float_literal(&state)) && !self.loop_body_fits(pat, &state, kind, count, body, env) {
            for retyped in [widen_int_literals(state.clone()), narrow_literals(state.clone())] {
                if self.loop_body_fits(pat, &retyped, kind, count, body, env) {
                    state = retyped;
                    break;
                }
            }
        }
        // A second attempt when the body's type widens a literal initial value
        // (`loop s = 0 for ...` accumulating floats) or an `idx` to `i64`.
        for attempt in 0..2 {
            let (ty, init_leaves) = self.to_data(&state).expect("data");
            let mark = self.var_mark();
            let params: Vec<ir::Binder> = ty.leaf_types().into_iter().map(|t| ir::Binder { var: self.fresh("acc"), ty: t }).collect();
            let patoms: Vec<Atom> = params.iter().map(|b| Atom::Var(b.var)).collect();
            let env2 = self.bind_pat(pat, Self::from_data(&ty, &patoms), env);
            let (ikind, env3) = match (kind, count) {
                (LoopKind::For(i, _), Some(n)) => {
                    let ivar = self.fresh(&i.name);
                    let size = self.size_of_atom(n).expect("i64");
                    self.idx_range.insert(ivar, size.clone());
                    (ILoopKind::Count { ivar, n, down: false }, env2.bind(&i.name, Val::data(Ty::Idx(size), Atom::Var(ivar))))
                }
                (LoopKind::While(c), _) => {
                    self.begin_block();
                    let cv = self.expr(c, &env2);
                    let ca = self.bool_operand(&cv, &c.span, "the condition of `while`");
                    let cond = self.end_block(vec![ca.unwrap_or(Atom::Lit(Lit::Bool(false)))]);
                    if ca.is_none() {
                        return Val::Error;
                    }
                    (ILoopKind::While { cond }, env2.clone())
                }
                _ => unreachable!("count present exactly for counted loops"),
            };
            self.begin_block();
            let bv = self.expr(body, &env3);
            let stmts = self.blocks.pop().unwrap_or_default();
            if bv.contains_error() {
                return Val::Error;
            }
            let bv = self.coerce_literals(bv, &ty);
            let Some((bty, bleaves)) = self.to_data(&bv) else {
                return self
                    .error(Diagnostic::new("the body of a `loop` must compute the next state, not a function", body.span.clone()).label("this is a function"));
            };
            if bty == ty {
                let body_b = ir::Block { stmts, result: bleaves };
                let out = self.emit(IExpr::Loop { params, init: init_leaves, kind: ikind, body: body_b }, ty.leaf_types(), "loop", Some(self.loc(span)));
                return Self::from_data(&ty, &out);
            }
            let widened = self.coerce_literals(state.clone(), &bty);
            let wty = self.val_ty(&widened).expect("data");
            if attempt == 0 && (wty == bty || (wty.compatible(&bty) && bty.size_vars().iter().all(|v| v.0 < mark))) {
                state = if wty == bty { widened } else { retag(widened, &wty.join(&bty)) };
                continue;
            }
            let (a, b) = (self.show(&ty), self.show(&bty));
            return self.error(
                Diagnostic::new("the body of a `loop` must return the same type as the initial state", body.span.clone())
                    .label(format!("the body gives {b}"))
                    .note(init.span.clone(), format!("the state starts as {a}"))
                    .hint("the state keeps one type and shape in every iteration (write `0.0`, not `0`, for a float accumulator)"),
            );
        }
        unreachable!("the loop returns within two attempts")
    }

    /// Elaborate a loop body silently and tell whether it type-checks and
    /// returns the state's type.
    fn loop_body_fits(&mut self, pat: &Pat, state: &Val, kind: &LoopKind, count: Option<Atom>, body: &Expr, env: &Env) -> bool {
        let (ty, _) = self.to_data(state).expect("data");
        self.quiet += 1;
        let errors_before = self.quiet_errors;
        let patoms: Vec<Atom> = ty.leaf_types().iter().map(|_| Atom::Var(self.fresh("acc"))).collect();
        let mut env2 = self.bind_pat(pat, Self::from_data(&ty, &patoms), env);
        if let (LoopKind::For(i, _), Some(n)) = (kind, count) {
            let ivar = self.fresh(&i.name);
            let size = self.size_of_atom(n).expect("i64");
            self.idx_range.insert(ivar, size.clone());
            env2 = env2.bind(&i.name, Val::data(Ty::Idx(size), Atom::Var(ivar)));
        }
        self.begin_block();
        let bv = self.expr(body, &env2);
        self.blocks.pop();
        self.quiet -= 1;

        self.quiet_errors == errors_before && self.val_ty(&self.coerce_literals(bv, &ty)).is_some_and(|t| t.compatible(&ty))
    }

    fn coerce(&mut self, v: Val, te: &crate::syntax::ast::TypeExpr, span: &Span, env: &Env) -> Val {
        if v.contains_error() {
            return Val::Error;
        }
        let Some(target) = self.type_expr(te, &|_| None, env) else { return Val::Error };
        let v = self.coerce_literals(v, &target);
        let Some((ty, leaves)) = self.to_data(&v) else {
            return self.error(Diagnostic::new("only data can be coerced with `:>`", span.clone()).label("this is a function"));
        };
        let same_structure =
            ty.leaf_types().iter().zip(target.leaf_types()).all(|(a, b)| a.elem == b.elem && a.rank() == b.rank()) && ty.leaf_count() == target.leaf_count();
        if !same_structure {
            let (a, b) = (self.show(&ty), self.show(&target));
            return self.error(
                Diagnostic::new(format!("`:>` can only change sizes, but {a} and {b} differ in more than sizes"), span.clone())
                    .label(format!("value of type {a}"))
                    .hint("the element type and the number of axes must match"),
            );
        }
        let loc = self.loc(span);
        let mut out = vec![];
        for ((leaf, have), want) in leaves.iter().zip(ty.leaf_types()).zip(target.leaf_types()) {
            if have == want {
                out.push(*leaf);
            } else {
                out.push(self.emit1(IExpr::Coerce { arr: *leaf, loc: loc.clone() }, want, "co", Some(loc.clone())));
            }
        }
        Self::from_data(&target, &out)
    }
}

pub(super) fn has_int_literal(v: &Val) -> bool {
    match v {
        Val::Data { ty: Ty::Scalar(Scalar::I64), leaves } => matches!(leaves[0], Atom::Lit(Lit::I64(_))),
        Val::Tuple(vs) => vs.iter().any(has_int_literal),
        _ => false,
    }
}

pub(super) fn has_float_literal(v: &Val) -> bool {
    match v {
        Val::Data { ty: Ty::Scalar(Scalar::F64), leaves } => matches!(leaves[0], Atom::Lit(Lit::F64(_))),
        Val::Tuple(vs) => vs.iter().any(has_float_literal),
        _ => false,
    }
}

/// Integer and `f64` literals of a state become `f32` literals.
pub(super) fn narrow_literals(v: Val) -> Val {
    match v {
        Val::Data { ty: Ty::Scalar(Scalar::F64 | Scalar::I64), leaves } if matches!(leaves[0], Atom::Lit(Lit::F64(_) | Lit::I64(_))) => {
            Val::data(Ty::Scalar(Scalar::F32), convert_literal(leaves[0], Scalar::F32).expect("a number literal"))
        }
        Val::Tuple(vs) => Val::Tuple(vs.into_iter().map(narrow_literals).collect()),
        v => v,
    }
}

/// Integer literals of a state become `f64` literals.
pub(super) fn widen_int_literals(v: Val) -> Val {
    match v {
        Val::Data { ty: Ty::Scalar(Scalar::I64), leaves } if matches!(leaves[0], Atom::Lit(Lit::I64(_))) => {
            Val::data(Ty::Scalar(Scalar::F64), convert_literal(leaves[0], Scalar::F64).expect("int literal"))
        }
        Val::Tuple(vs) => Val::Tuple(vs.into_iter().map(widen_int_literals).collect()),
        v => v,
    }
}

/// Replace the type of a data value (same leaves), used when widening `idx`.
fn retag(v: Val, ty: &Ty) -> Val {
    match (v, ty) {
        (Val::Tuple(vs), Ty::Tuple(ts)) => Val::Tuple(vs.into_iter().zip(ts).map(|(v, t)| retag(v, t)).collect()),
        (Val::Data { leaves, .. }, t) => Val::Data { ty: t.clone(), leaves },
        (v, _) => v,
    }
}

/// A literal converted to another scalar type where the language allows it.
pub(super) fn convert_literal(a: Atom, to: Scalar) -> Option<Atom> {
    let Atom::Lit(l) = a else { return None };
    let lit = match (l, to) {
        (Lit::I64(v), Scalar::F64) => Lit::F64(v as f64),
        (Lit::I64(v), Scalar::F32) => Lit::F32(v as f32),
        (Lit::I64(v), Scalar::I32) if i32::try_from(v).is_ok() => Lit::I32(v as i32),
        (Lit::F64(v), Scalar::F32) => Lit::F32(v as f32),
        _ => return None,
    };
    Some(Atom::Lit(lit))
}

fn negate_lit(l: Lit) -> Lit {
    match l {
        Lit::F64(x) => Lit::F64(-x),
        Lit::F32(x) => Lit::F32(-x),
        Lit::I64(x) => Lit::I64(x.wrapping_neg()),
        Lit::I32(x) => Lit::I32(x.wrapping_neg()),
        Lit::Bool(b) => Lit::Bool(b),
    }
}

/// Most names read from each scope when looking for a suggestion.
const SUGGEST_SCAN: usize = 4000;
/// Most edit distances computed for one unknown name.
const SUGGEST_COMPARISONS: usize = 1000;
/// Longer unknown names get no suggestion.
const SUGGEST_MAX_LEN: usize = 64;
/// No suggestions once this many diagnostics are recorded.
const SUGGEST_MAX_ERRORS: usize = 200;

/// Whether `c` is short or long enough to be within the suggestion distance.
fn near_in_length(name: &str, c: &str) -> bool {
    let max_d = (name.len() / 3).max(1);
    c.len().abs_diff(name.len()) <= max_d * 4 && c.chars().count().abs_diff(name.chars().count()) <= max_d
}
