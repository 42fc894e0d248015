//! Calls: applying function values (declarations, lambdas, built-ins,
//! operator sections), matching arguments against annotated parameter types
//! (which infers size parameters), and lowering entry points.

use super::value::{Env, FunKind, FunVal, Val};
use super::{ChainLink, ChainName, Lowerer};
use crate::diag::Diagnostic;
use crate::ir::{self, Atom, Binder, Scalar, Shape, Size};
use crate::syntax::ast::{Decl, Param, Pat, SizeExpr, SizeOp, Span, TypeExpr};
use crate::types::Ty;
use rustc_hash::FxHashMap;
use std::rc::Rc;

/// Size binders of a declaration being called: name -> size once inferred.
type Binders = Vec<(String, Option<Size>)>;

impl Lowerer<'_> {
    /// `f a b ...`: collect arguments until the function has all it takes,
    /// then inline the call; extra arguments apply to the result.
    pub(super) fn apply(&mut self, f: Val, fspan: &Span, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let fun = match f {
            Val::Fun(fun) => fun,
            Val::Error => return Val::Error,
            other => {
                let d = self.describe(&other);
                let hint = if matches!(other, Val::Data { ty: crate::types::Ty::Array(..), .. }) {
                    "to index an array write `a[i]` with no space before `[`"
                } else {
                    "only functions can be applied to arguments"
                };
                return self.error(
                    Diagnostic::new(format!("this is not a function, so it cannot be applied to arguments (it is {d})"), fspan.clone())
                        .label("applied to arguments here")
                        .hint(hint),
                );
            }
        };
        let arity = self.arity_of(&fun.kind);
        let mut all: Vec<(Val, Span)> = fun.args.clone();
        all.extend(args);
        if all.len() < arity {
            let kind = clone_kind(&fun.kind);
            return Val::Fun(Rc::new(FunVal { kind, args: all }));
        }
        let rest = all.split_off(arity);
        let result = self.call(&fun.kind, all, span);
        if rest.is_empty() || result.contains_error() {
            return result;
        }
        if !matches!(result, Val::Fun(_)) {
            let name = match &fun.kind {
                FunKind::Decl { index, prelude } => format!("`{}`", self.decl(*index, *prelude).name.name),
                FunKind::Builtin(n) => format!("`{n}`"),
                FunKind::Op(op) => format!("`({})`", op.symbol()),
                FunKind::Lambda { .. } => "this function".to_string(),
            };
            let given = arity + rest.len();
            let plural = if arity == 1 { "" } else { "s" };
            return self.error(
                Diagnostic::new(format!("{name} takes {arity} argument{plural}, but {given} were given"), rest[0].1.start..rest[rest.len() - 1].1.end)
                    .label("extra arguments")
                    .note(fspan.clone(), format!("{name} returns data, which cannot be applied further"))
                    .hint("remove the extra arguments, or parenthesise to pass a computed value"),
            );
        }
        self.apply(result, span, rest, span)
    }

    pub(super) fn arity_of(&self, kind: &FunKind) -> usize {
        kind.arity(|index, prelude| self.decl(index, prelude).params.len())
    }

    fn call(&mut self, kind: &FunKind, args: Vec<(Val, Span)>, span: &Span) -> Val {
        if args.iter().any(|(v, _)| v.contains_error()) {
            return Val::Error;
        }
        if self.over_budget {
            return Val::Error;
        }
        let link = self.chain_link(kind, span);
        if self.emitted > self.opts.max_inline_statements {
            return self.statement_budget_exceeded(link);
        }
        if self.depth >= self.opts.max_inline_depth {
            return self.depth_exceeded(link);
        }
        self.depth += 1;
        self.chain.push(link);
        let out = match kind {
            FunKind::Decl { index, prelude } => self.call_decl(*index, *prelude, args, span),
            FunKind::Lambda { params, body, env, prelude } => {
                let origin = if *prelude { self.span_override.last().cloned().flatten() } else { None };
                self.span_override.push(origin);
                let out = self.call_lambda(params, body, env, args);
                self.span_override.pop();
                out
            }
            FunKind::Builtin(name) => super::builtins::call(self, name, args, span),
            FunKind::Op(op) => {
                let mut it = args.into_iter();
                let (x, xs) = it.next().expect("two args");
                let (y, ys) = it.next().expect("two args");
                self.binop(*op, x, &xs, y, &ys, span)
            }
        };
        self.depth -= 1;
        self.chain.pop();
        out
    }

    /// What a call is, for the call chain of budget messages.
    fn chain_link(&self, kind: &FunKind, span: &Span) -> ChainLink {
        let (name, key) = match kind {
            FunKind::Decl { index, prelude } => (ChainName::Decl(*index, *prelude), (u8::from(*prelude), *index, 0)),
            FunKind::Lambda { body, prelude, .. } => (ChainName::Lambda, (2 + u8::from(*prelude), body.span.start, body.span.end)),
            FunKind::Builtin(n) => (ChainName::Builtin(n), (4, n.as_ptr() as usize, n.len())),
            FunKind::Op(op) => (ChainName::Op(op.symbol()), (5, 0, 0)),
        };
        ChainLink { name, key, span: self.at(span) }
    }

    fn chain_name(&self, n: &ChainName) -> String {
        match n {
            ChainName::Decl(index, prelude) => format!("`{}`", self.decl(*index, *prelude).name.name),
            ChainName::Lambda => "a lambda".to_string(),
            ChainName::Builtin(b) => format!("`{b}`"),
            ChainName::Op(o) => format!("`({o})`"),
        }
    }

    /// "`main` → `g3` → `g2` → … → `f`" (long chains are shortened).
    fn chain_text(&self, last: &ChainLink) -> String {
        let mut names: Vec<String> = self.chain.iter().map(|l| self.chain_name(&l.name)).collect();
        names.push(self.chain_name(&last.name));
        if names.len() > 12 {
            let skipped = names.len() - 10;
            let tail = names.split_off(names.len() - 5);
            names.truncate(5);
            format!("{} → … ({skipped} more) … → {}", names.join(" → "), tail.join(" → "))
        } else {
            names.join(" → ")
        }
    }

    /// Report a budget error once, even while probing, and stop lowering.
    fn budget_error(&mut self, d: Diagnostic) -> Val {
        self.over_budget = true;
        let mut d = d;
        d.notes.retain(|(s, _)| s.end <= self.source.text.len());
        self.diags.push(d);
        Val::Error
    }

    fn statement_budget_exceeded(&mut self, link: ChainLink) -> Val {
        let max = self.opts.max_inline_statements;
        let chain = self.chain_text(&link);
        // The outermost call of the chain is where the growth starts.
        let at = self.chain.first().map(|l| l.span.clone()).unwrap_or_else(|| link.span.clone());
        let mut d = Diagnostic::new(format!("the program grows past {max} IR statements while inlining this call (call chain: {chain})"), at.clone())
            .label("every call is inlined, and this one grows without bound");
        if link.span != at {
            d = d.note(link.span.clone(), "the budget ran out while inlining this call");
        }
        d = d.hint(format!(
            "a function that calls another one twice doubles the code at every level: compute a shared result once \
             (`let y = f x in y + y`) or repeat work with `loop`/`for` instead of nested calls; \
             the budget is {max} statements (set ARDEN_MAX_INLINE_STATEMENTS to change it)"
        ));
        self.budget_error(d)
    }

    /// `t` if it has at most [`super::MAX_TUPLE_PARTS`] parts; otherwise a
    /// located budget error. Tuples are compile-time values copied where
    /// they are used, so a tuple built from two copies of the previous one,
    /// line after line (`let t2 = (t1, t1) in`), doubles per line; without
    /// this budget 24 such lines took 5.7 GB before any use of the value.
    pub(super) fn within_tuple_budget(&mut self, t: Val, span: &Span) -> Val {
        let max = super::MAX_TUPLE_PARTS;
        if t.fits_in(&mut max.clone()) {
            return t;
        }
        let d = Diagnostic::new(format!("this tuple has more than {max} parts counted with repetition"), self.at(span)).label("built here").hint(
            "tuples are copied at compile time, so a tuple made of copies of itself doubles at every step: \
                 keep many values of one type in an array (`replicate`, `for`) instead",
        );
        self.budget_error(d)
    }

    fn depth_exceeded(&mut self, link: ChainLink) -> Val {
        let max = self.opts.max_inline_depth;
        let repeats = self.chain.iter().filter(|l| l.key == link.key).count();
        if repeats >= 3 {
            // The same function keeps calling itself through a function value.
            let name = self.chain_name(&link.name);
            let d = Diagnostic::new(format!("calls nest too deeply while inlining: {name} keeps calling itself"), link.span.clone())
                .label("this call never finishes unfolding")
                .hint("a function value applied to itself is recursion, which arden does not allow; use `loop`");
            return self.budget_error(d);
        }
        let chain = self.chain_text(&link);
        let at = self.chain.first().map(|l| l.span.clone()).unwrap_or_else(|| link.span.clone());
        let mut d = Diagnostic::new(format!("the chain of nested calls is deeper than {max} (call chain: {chain})"), at.clone())
            .label(format!("more than {max} calls nest inside this one"));
        if link.span != at {
            d = d.note(link.span.clone(), format!("call number {} of the chain", max + 1));
        }
        d = d.hint(format!(
            "this is not recursion, but every call is inlined and at most {max} may nest: call the helpers one after \
             another (`let y = f1 x in f2 y`) instead of each from the previous one, or set ARDEN_MAX_INLINE_DEPTH"
        ));
        self.budget_error(d)
    }

    fn call_lambda(&mut self, params: &[Param], body: &crate::syntax::ast::Expr, env: &Env, args: Vec<(Val, Span)>) -> Val {
        let mut env = env.clone();
        for (p, (v, s)) in params.iter().zip(args) {
            let v = match &p.ty {
                Some(te) => self.check_annotation(v, te, &env, &s, "the lambda's parameter"),
                None => v,
            };
            env = self.bind_pat(&p.pat, v, &env);
        }
        self.expr(body, &env)
    }

    /// Inline a declaration: infer its size parameters from the argument
    /// types, check every annotated parameter, bind, elaborate the body and
    /// check the result annotation.
    pub(super) fn call_decl(&mut self, index: usize, prelude: bool, args: Vec<(Val, Span)>, span: &Span) -> Val {
        if !prelude && self.broken.contains(&index) {
            return Val::Error;
        }
        if let Some(&rule) = self.rules.get(&(index, prelude))
            && !self.plain.contains(&(index, prelude))
        {
            return self.call_with_rule(index, prelude, rule, args, span);
        }
        // a rule's own call of its function at the rule's values: the results
        if let Some((key, at, results, ty)) = self.rule_results.last()
            && *key == (index, prelude)
        {
            let leaves: Option<Vec<Atom>> = args.iter().map(|(v, _)| self.to_data(v).map(|(_, l)| l)).collect::<Option<Vec<_>>>().map(|ls| ls.concat());
            if leaves.as_ref() == Some(at) {
                let (results, ty) = (results.clone(), ty.clone());
                return Self::from_data(&ty, &results);
            }
        }
        let decl = self.decl(index, prelude);
        let over = if prelude { Some(self.at(span)) } else { None };
        self.span_override.push(over);
        let out = self.call_decl_inner(decl, args, span);
        self.span_override.pop();
        out
    }

    /// Check the `derivative f` declarations and record which `def` each
    /// is for: a `def` of that name, at most one rule each, two parameters
    /// (a value and its tangent) per parameter of `f`.
    pub(super) fn register_rules(&mut self, prelude: bool) {
        let (prog, decls) = if prelude { (self.prelude, self.prelude_decls.clone()) } else { (self.prog, self.decls.clone()) };
        for (r, rule) in prog.rules.iter().enumerate() {
            let name = &rule.name.name;
            let Some(&f) = decls.get(name.as_str()).filter(|&&f| !prog.decls[f].is_entry) else {
                self.error(
                    Diagnostic::new(format!("`derivative {name}` is a rule for a `def {name}`, but there is none"), rule.name.span.clone())
                        .label("no such `def`")
                        .hint("write the rule after `def NAME (x: t) … = …`, with the same name; entry points cannot have rules"),
                );
                continue;
            };
            let decl = &prog.decls[f];
            if let Some(&other) = self.rules.get(&(f, prelude)) {
                let first = prog.rules[other].name.span.clone();
                self.error(
                    Diagnostic::new(format!("`{name}` has two derivative rules"), rule.name.span.clone()).label("second rule").note(first, "first rule here"),
                );
                continue;
            }
            if rule.params.len() != 2 * decl.params.len() {
                let k = decl.params.len();
                self.error(
                    Diagnostic::new(
                        format!(
                            "`derivative {name}` takes {} parameter{}, but `{name}` takes {k}: it needs {}",
                            rule.params.len(),
                            if rule.params.len() == 1 { "" } else { "s" },
                            2 * k
                        ),
                        rule.name.span.clone(),
                    )
                    .label("wrong number of parameters")
                    .note(decl.name.span.clone(), format!("`{name}` is declared here"))
                    .hint(format!(
                        "a rule takes `{name}`'s parameters and then one tangent per parameter, of the same types, and returns the tangent of the result"
                    )),
                );
                continue;
            }
            self.rules.insert((f, prelude), r);
        }
    }

    /// A call of `def f` that has a rule: a `custom_jvp` node with `f`'s body
    /// and the rule's as lambdas of the arguments' leaves (and tangents).
    fn call_with_rule(&mut self, index: usize, prelude: bool, rule: usize, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let f = self.decl(index, prelude);
        let r = if prelude { &self.prelude.rules[rule] } else { &self.prog.rules[rule] };
        let mut datas = vec![];
        for (v, s) in &args {
            match self.to_data(v) {
                Some(d) => datas.push(d),
                None => {
                    let d = self.describe(v);
                    return self.error(
                        Diagnostic::new(format!("`{}` has a derivative rule, so its arguments must be data, but this is {d}", f.name.name), s.clone())
                            .label("not data")
                            .note(r.name.span.clone(), "the rule"),
                    );
                }
            }
        }
        let leaf_types: Vec<ir::Type> = datas.iter().flat_map(|(ty, _)| ty.leaf_types()).collect();
        let params = |l: &mut Self, hint: &str| -> (Vec<Binder>, Vec<(Val, Span)>) {
            let binders: Vec<Binder> = leaf_types.iter().map(|t| Binder { var: l.fresh(hint), ty: t.clone() }).collect();
            let mut at = 0;
            let vals = datas
                .iter()
                .zip(&args)
                .map(|((ty, leaves), (_, s))| {
                    let atoms: Vec<Atom> = binders[at..at + leaves.len()].iter().map(|b| Atom::Var(b.var)).collect();
                    at += leaves.len();
                    (Self::from_data(ty, &atoms), s.clone())
                })
                .collect();
            (binders, vals)
        };
        self.plain.push((index, prelude));
        let (pparams, pvals) = params(self, "x");
        self.begin_block();
        let out = self.call_decl(index, prelude, pvals, span);
        let pstmts = self.blocks.pop().unwrap_or_default();
        let (rparams, rvals) = params(self, "x");
        let (tparams, tvals) = params(self, "dx");
        // the function's results at the rule's values, given to the rule
        let Some((rty, _)) = self.to_data(&out) else {
            self.plain.pop();
            return self.error(Diagnostic::new(format!("`{}` has a derivative rule, so it must return data", f.name.name), span.clone()).label("in this call"));
        };
        let yparams: Vec<Binder> = rty.leaf_types().into_iter().map(|t| Binder { var: self.fresh("y"), ty: t }).collect();
        let at: Vec<Atom> = rparams.iter().map(|b| Atom::Var(b.var)).collect();
        self.rule_results.push(((index, prelude), at, yparams.iter().map(|b| Atom::Var(b.var)).collect(), rty));
        self.begin_block();
        // a prelude rule's messages point at the user's call, as its body's do
        self.span_override.push(if prelude { Some(self.at(span)) } else { None });
        let dout = self.call_decl_inner(r, rvals.into_iter().chain(tvals).collect(), span);
        self.span_override.pop();
        let rstmts = self.blocks.pop().unwrap_or_default();
        self.rule_results.pop();
        self.plain.pop();
        if out.contains_error() || dout.contains_error() {
            return Val::Error;
        }
        let (Some((rty, rleaves)), Some((dty, dleaves))) = (self.to_data(&out), self.to_data(&dout)) else {
            return self.error(Diagnostic::new(format!("`{}` has a derivative rule, so it must return data", f.name.name), span.clone()).label("in this call"));
        };
        if rty != dty {
            let (want, got) = (self.show(&rty), self.show(&dty));
            return self.error(
                Diagnostic::new(
                    format!("the derivative rule of `{}` must return the tangent of its result, of type {want}, but returns {got}", f.name.name),
                    r.body.span.clone(),
                )
                .label(format!("type {got}"))
                .note(span.clone(), "in this call"),
            );
        }
        let tangents: rustc_hash::FxHashSet<crate::ir::VarId> = tparams.iter().map(|b| b.var).collect();
        let rule_body = ir::Block { stmts: rstmts, result: dleaves };
        if let Some((what, loc)) = crate::ir::linear::nonlinear_use(&rule_body, &tangents) {
            let at = loc.map(|l| self.source.offset_of(l.line, l.col)).map_or(r.body.span.clone(), |o| o..o + 1);
            return self.error(
                Diagnostic::new(format!("the derivative rule of `{}` is not linear in its tangents: {what}", f.name.name), at)
                    .label("not linear in the tangents")
                    .note(r.name.span.clone(), "the rule")
                    .hint("a rule returns a linear function of the tangents: sums of tangents times values of the arguments, as `sigmoid x * dx`"),
            );
        }
        // results whose sizes name something of the lambda cannot leave it
        let inner: rustc_hash::FxHashSet<crate::ir::VarId> =
            pparams.iter().map(|b| b.var).chain(pstmts.iter().flat_map(|s| s.binds.iter().map(|b| b.var))).collect();
        let out_types = rty.leaf_types();
        if out_types.iter().any(|t| t.shape.iter().any(|d| d.vars().iter().any(|v| inner.contains(v)))) {
            return self.error(
                Diagnostic::new(
                    format!("`{}` has a derivative rule, so the sizes of its result must follow from the sizes of its arguments", f.name.name),
                    span.clone(),
                )
                .label("in this call"),
            );
        }
        let primal = ir::Lambda { params: pparams, body: ir::Block { stmts: pstmts, result: rleaves } };
        let rule = ir::Lambda { params: rparams.into_iter().chain(tparams).chain(yparams).collect(), body: rule_body };
        let all_args: Vec<Atom> = datas.into_iter().flat_map(|(_, leaves)| leaves).collect();
        let outs = self.emit(ir::Expr::CustomJvp { primal, rule, args: all_args }, out_types, "rule", Some(self.loc(span)));
        Self::from_data(&rty, &outs)
    }

    fn call_decl_inner(&mut self, decl: &Decl, args: Vec<(Val, Span)>, span: &Span) -> Val {
        let mut binders: Binders = decl.size_params.iter().map(|s| (s.name.clone(), None)).collect();
        // 1. sizes that appear alone as a dimension are read off the arguments
        for (p, (v, _)) in decl.params.iter().zip(&args) {
            if let (Some(te), Some(t)) = (&p.ty, self.val_ty(v)) {
                infer_binders(te, &t, &mut binders);
            }
        }
        if let Some(missing) = binders.iter().find(|(_, s)| s.is_none()) {
            let name = missing.0.clone();
            return self.error(
                Diagnostic::new(format!("cannot infer the size parameter `{name}` of `{}` from the arguments", decl.name.name), span.clone())
                    .label("in this call")
                    .note(decl.name.span.clone(), "declared here")
                    .hint(format!("`{name}` must appear alone as a dimension (like `[{name}]f64`) in some parameter's type")),
            );
        }
        let sizes: FxHashMap<String, Size> = binders.into_iter().map(|(n, s)| (n, s.expect("all inferred"))).collect();
        // 2. every parameter is checked against its annotation
        let mut env = Env::default();
        for (name, s) in &sizes {
            let v = self.size_value(s);
            env = env.bind(name, v);
        }
        let mut ok = true;
        let mut bound_args = vec![];
        for (k, (p, (v, s))) in decl.params.iter().zip(args).enumerate() {
            let v = match &p.ty {
                Some(te) => {
                    let what = || format!("argument {} of `{}` (parameter `{}`)", k + 1, decl.name.name, pat_name(&p.pat));
                    let checked = self.check_annotation_with(v, te, &sizes, &env, &s, &what, Some(&decl.name.span));
                    ok &= !checked.is_error();
                    checked
                }
                None => v,
            };
            bound_args.push((p, v));
        }
        if !ok {
            return Val::Error;
        }
        for (p, v) in bound_args {
            env = self.bind_pat(&p.pat, v, &env);
        }
        let result = self.expr(&decl.body, &env);
        match &decl.ret {
            Some(te) if !result.contains_error() => {
                let what = || format!("the result of `{}`", decl.name.name);
                self.check_annotation_with(result, te, &sizes, &env, &decl.body.span, &what, None)
            }
            _ => result,
        }
    }

    /// Check a value against a type annotation whose sizes are names in `env`.
    pub(super) fn check_annotation(&mut self, v: Val, te: &TypeExpr, env: &Env, span: &Span, what: &str) -> Val {
        self.check_annotation_with(v, te, &FxHashMap::default(), env, span, &|| what.to_string(), None)
    }

    #[allow(clippy::too_many_arguments)]
    fn check_annotation_with(
        &mut self,
        v: Val,
        te: &TypeExpr,
        sizes: &FxHashMap<String, Size>,
        env: &Env,
        span: &Span,
        what: &dyn Fn() -> String,
        decl_span: Option<&Span>,
    ) -> Val {
        if v.contains_error() {
            return Val::Error;
        }
        if let TypeExpr::Fun(..) = te {
            let what = what();
            if matches!(v, Val::Fun(_)) {
                return v;
            }
            let d = self.describe(&v);
            return self.error(Diagnostic::new(format!("{what} must be a function, but this is {d}"), span.clone()).label("not a function"));
        }
        let Some(want) = self.type_expr(te, &|n| sizes.get(n).cloned(), env) else { return Val::Error };
        let v = self.coerce_literals(v, &want);
        let Some(have) = self.val_ty(&v) else {
            let what = what();
            let shown = self.show(&want);
            return self.error(Diagnostic::new(format!("{what} must have type {shown}, but this is a function"), span.clone()).label("a function"));
        };
        if have.fits(&want) {
            return retype(v, &want);
        }
        let what = what();
        let (a, b) = (self.show(&want), self.show(&have));
        let mut d = Diagnostic::new(format!("{what} has the wrong type: expected {a}, found {b}"), span.clone()).label(format!("this has type {b}"));
        if let Some(ds) = decl_span {
            d = d.note(ds.clone(), "declared here");
        }
        // `n = n` says nothing: only bindings that relate names are shown.
        let bindings: Vec<String> = sizes.iter().map(|(n, s)| (n, self.show_size(s))).filter(|(n, s)| *n != s).map(|(n, s)| format!("{n} = {s}")).collect();
        if matches!(want, Ty::Idx(_)) {
            d = d.hint("an `idx n` is only made by a `for`/`loop` index over `n` or by `argmax`/`argmin` of an array of size n; it cannot come from an arbitrary integer");
        } else if let Some(h) = tuple_layout_hint(&have, &want) {
            d = d.hint(h);
        } else if have.leaf_types().iter().map(|t| (t.elem, t.rank())).eq(want.leaf_types().iter().map(|t| (t.elem, t.rank()))) {
            let mut bindings = bindings;
            bindings.sort();
            d = d.hint(if bindings.is_empty() {
                "the sizes differ; if they are equal at run time, coerce with `e :> [n]t`".to_string()
            } else {
                format!("the sizes differ (with {} from the other arguments); if they are equal at run time, coerce with `e :> [n]t`", bindings.join(", "))
            });
        }
        self.error(d)
    }

    /// Elaborate a type expression; size names are looked up first in
    /// `sizes`, then as `i64` values in `env`.
    pub(super) fn type_expr(&mut self, te: &TypeExpr, sizes: &dyn Fn(&str) -> Option<Size>, env: &Env) -> Option<Ty> {
        match te {
            TypeExpr::Scalar(k, _) => Some(Ty::Scalar(scalar_of(*k))),
            TypeExpr::Idx(n, _) => Some(Ty::Idx(self.size_expr(n, sizes, env)?)),
            TypeExpr::Array(n, t, _) => {
                let n = self.size_expr(n, sizes, env)?;
                let t = self.type_expr(t, sizes, env)?;
                Some(Ty::array(n, t))
            }
            TypeExpr::Tuple(ts, _) => ts.iter().map(|t| self.type_expr(t, sizes, env)).collect::<Option<Vec<_>>>().map(Ty::Tuple),
            TypeExpr::Fun(_, _, s) => {
                self.error(
                    Diagnostic::new("a function type cannot appear inside a data type", s.clone())
                        .label("function type here")
                        .hint("functions may be parameters, but not elements of tuples or arrays"),
                );
                None
            }
        }
    }

    fn size_expr(&mut self, s: &SizeExpr, sizes: &dyn Fn(&str) -> Option<Size>, env: &Env) -> Option<Size> {
        match s {
            SizeExpr::Lit(c, _) => Some(Size::constant(*c)),
            SizeExpr::Var(id) => {
                if let Some(sz) = sizes(&id.name) {
                    return Some(sz);
                }
                match env.lookup(&id.name) {
                    Some(Val::Data { ty, leaves }) if ty.as_scalar() == Some(Scalar::I64) => self.size_of_atom(leaves[0]),
                    Some(Val::Error) => None,
                    Some(_) => {
                        self.error(
                            Diagnostic::new(format!("`{}` is used as a size but is not an i64", id.name), id.span.clone()).label("sizes are i64 values"),
                        );
                        None
                    }
                    None => {
                        self.error(
                            Diagnostic::new(format!("unknown size `{}`", id.name), id.span.clone())
                                .label("not a size parameter or i64 value in scope")
                                .hint(format!("declare it as a size parameter: `def f [{}] ...`", id.name)),
                        );
                        None
                    }
                }
            }
            SizeExpr::Bin(op, a, b, span) => {
                let x = self.size_expr(a, sizes, env)?;
                let y = self.size_expr(b, sizes, env)?;
                let r = match op {
                    SizeOp::Add => x.try_add(&y),
                    SizeOp::Sub => x.try_sub(&y),
                    SizeOp::Mul => x.try_mul(&y),
                    SizeOp::Div => x.try_div(&y),
                };
                let out = self.checked_size(r, span, "this type annotation")?;
                self.remember_size_text(s, &out, sizes, env);
                Some(out)
            }
        }
    }

    /// Remember how the user wrote a compound size, for messages: the
    /// source text, when every name in it stands for the size variable of
    /// that name (so the text means the same where the message is shown).
    fn remember_size_text(&mut self, s: &SizeExpr, value: &Size, sizes: &dyn Fn(&str) -> Option<Size>, env: &Env) {
        if self.in_prelude() || value.as_const().is_some() || value.as_var().is_some() || self.size_text.contains_key(value) {
            return;
        }
        fn names(s: &SizeExpr, out: &mut Vec<String>) {
            match s {
                SizeExpr::Lit(..) => {}
                SizeExpr::Var(id) => out.push(id.name.clone()),
                SizeExpr::Bin(_, a, b, _) => {
                    names(a, out);
                    names(b, out);
                }
            }
        }
        let mut ns = vec![];
        names(s, &mut ns);
        let faithful = ns.iter().all(|n| {
            let v = sizes(n).or_else(|| match env.lookup(n) {
                Some(Val::Data { leaves, .. }) if leaves.len() == 1 => self.size_of_atom(leaves[0]),
                _ => None,
            });
            v.and_then(|v| v.as_var()).is_some_and(|v| self.size_var_name(v) == *n)
        });
        let span = match s {
            SizeExpr::Bin(_, _, _, span) => span,
            _ => return,
        };
        if !faithful {
            return;
        }
        let Some(text) = balanced_text(&self.source.text, span.start, span.end) else { return };
        let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if !text.is_empty() && text.len() <= 200 {
            self.size_text.insert(value.clone(), text);
        }
    }

    /// Type-check a `def` on its own when all its parameters are annotated
    /// with data types, so mistakes in functions nobody calls are reported
    /// too. (Unannotated or function-taking defs are checked at each use.)
    pub(super) fn check_def(&mut self, index: usize) {
        let decl = &self.prog.decls[index];
        let checkable = decl.params.iter().all(|p| p.ty.as_ref().is_some_and(|t| !contains_fun(t)));
        if !checkable {
            return;
        }
        self.reset_function_state();
        self.span_override = vec![None];
        let before = self.diags.len();
        self.check_size_params_used(decl);
        let _ = self.bind_signature(decl);
        if self.diags.len() > before {
            self.broken.insert(index);
        }
    }

    /// Lower an entry point to an IR function.
    pub(super) fn lower_entry(&mut self, index: usize) -> Option<ir::Function> {
        let decl = &self.prog.decls[index];
        self.reset_function_state();
        self.span_override = vec![None];
        let mut ok = self.check_size_params_used(decl);
        for p in &decl.params {
            match &p.ty {
                None => {
                    ok = false;
                    self.error(
                        Diagnostic::new(format!("parameter `{}` of entry point `{}` needs a type", pat_name(&p.pat), decl.name.name), p.span.clone())
                            .label("no type annotation")
                            .hint("entry points are called from outside, so every parameter is written `(x: [n]f64)`"),
                    );
                }
                Some(t) if !entry_data_type(t) => {
                    ok = false;
                    self.error(
                        Diagnostic::new("entry points take only scalars, arrays of scalars and tuples of those", t.span())
                            .label("not allowed in an entry point")
                            .hint("functions, `idx` and arrays of tuples can be used inside `def`s; entry points are the outside interface"),
                    );
                }
                _ => {}
            }
        }
        match &decl.ret {
            None => {
                ok = false;
                self.error(
                    Diagnostic::new(format!("entry point `{}` needs a result type", decl.name.name), decl.name.span.clone())
                        .label("no `: type` before `=`")
                        .hint("write e.g. `entry f (x: f64) : f64 = ...`"),
                );
            }
            Some(t) if !entry_data_type(t) => {
                ok = false;
                self.error(
                    Diagnostic::new("entry points return only scalars, arrays of scalars and tuples of those", t.span())
                        .label("not allowed as an entry result"),
                );
            }
            _ => {}
        }
        if !ok {
            return None;
        }
        let (size_params, params, param_shapes, body, result_shape) = self.bind_signature(decl)?;
        Some(ir::Function {
            name: decl.name.name.clone(),
            size_params,
            params,
            param_shapes,
            result_shape,
            body,
            names: std::mem::take(&mut self.names),
            stored: vec![],
            onehot: std::mem::take(&mut self.onehot),
        })
    }

    fn check_size_params_used(&mut self, decl: &Decl) -> bool {
        let mut ok = true;
        for sp in &decl.size_params {
            let used_alone = decl.params.iter().any(|p| p.ty.as_ref().is_some_and(|t| mentions_alone(t, &sp.name)));
            let unannotated = decl.params.iter().any(|p| p.ty.is_none());
            if !used_alone && !unannotated {
                ok = false;
                self.error(
                    Diagnostic::new(format!("the size parameter `{}` is not determined by any parameter", sp.name), sp.span.clone())
                        .label("never appears alone as a dimension")
                        .hint(format!("use it as a dimension of a parameter, like `(x: [{}]f64)`", sp.name)),
                );
            }
        }
        ok
    }

    /// Bind fresh variables for the size parameters and parameters of a
    /// declaration, elaborate its body and check its result.
    #[allow(clippy::type_complexity)]
    fn bind_signature(&mut self, decl: &Decl) -> Option<(Vec<(String, ir::VarId)>, Vec<Binder>, Vec<(String, Shape)>, ir::Block, Shape)> {
        let mut size_params = vec![];
        let mut env = Env::default();
        let mut sizes: FxHashMap<String, Size> = FxHashMap::default();
        for sp in &decl.size_params {
            let v = self.fresh(&sp.name);
            self.nonneg.insert(v);
            self.size_names.insert(v, sp.name.clone());
            size_params.push((sp.name.clone(), v));
            sizes.insert(sp.name.clone(), Size::var(v));
            env = env.bind(&sp.name, Val::data(Ty::Scalar(Scalar::I64), Atom::Var(v)));
        }
        let mut params = vec![];
        let mut param_shapes = vec![];
        let mut ok = true;
        for p in &decl.params {
            let te = p.ty.as_ref()?;
            let Some(ty) = self.type_expr(te, &|n| sizes.get(n).cloned(), &env) else {
                ok = false;
                continue;
            };
            let name = pat_name(&p.pat);
            let leaves: Vec<Atom> = ty
                .leaf_types()
                .into_iter()
                .map(|t| {
                    let v = self.fresh(&name);
                    params.push(Binder { var: v, ty: t });
                    Atom::Var(v)
                })
                .collect();
            param_shapes.push((name, shape_of(&ty)));
            let v = Self::from_data(&ty, &leaves);
            env = self.bind_pat(&p.pat, v, &env);
        }
        if !ok {
            return None;
        }
        self.begin_block();
        let mut result = self.expr(&decl.body, &env);
        if let Some(te) = &decl.ret
            && !result.contains_error()
        {
            let what = || format!("the result of `{}`", decl.name.name);
            result = self.check_annotation_with(result, te, &sizes, &env, &decl.body.span, &what, None);
        }
        let stmts = self.blocks.pop().unwrap_or_default();
        if result.contains_error() {
            return None;
        }
        let Some((rty, leaves)) = self.to_data(&result) else {
            if !decl.is_entry {
                // A `def` may return a function; it is checked where it is applied.
                return None;
            }
            self.error(Diagnostic::new(format!("`{}` returns a function", decl.name.name), decl.body.span.clone()).label("entry points return data"));
            return None;
        };
        let body = ir::Block { stmts, result: leaves };
        Some((size_params, params, param_shapes, body, shape_of(&rty)))
    }
}

/// The source text of a size expression: a span of a parenthesised operand
/// stops inside the parentheses, so widen it over the unmatched ones.
fn balanced_text(src: &str, start: usize, end: usize) -> Option<&str> {
    let (mut start, mut end) = (start, end);
    let text = src.get(start..end)?;
    let (mut opens, mut closes) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '(' => opens += 1,
            ')' if opens > 0 => opens -= 1,
            ')' => closes += 1,
            _ => {}
        }
    }
    let bytes = src.as_bytes();
    while closes > 0 {
        let c = *bytes.get(start.checked_sub(1)?)?;
        match c {
            b'(' => closes -= 1,
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => return None,
        }
        start -= 1;
    }
    while opens > 0 {
        let c = *bytes.get(end)?;
        match c {
            b')' => opens -= 1,
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => return None,
        }
        end += 1;
    }
    src.get(start..end)
}

fn clone_kind(k: &FunKind) -> FunKind {
    match k {
        FunKind::Decl { index, prelude } => FunKind::Decl { index: *index, prelude: *prelude },
        FunKind::Lambda { params, body, env, prelude } => FunKind::Lambda { params: params.clone(), body: body.clone(), env: env.clone(), prelude: *prelude },
        FunKind::Builtin(n) => FunKind::Builtin(n),
        FunKind::Op(o) => FunKind::Op(*o),
    }
}

/// Read size binders off an argument type where the annotation has a plain
/// binder name as a dimension.
fn infer_binders(te: &TypeExpr, ty: &Ty, binders: &mut Binders) {
    match (te, ty) {
        (TypeExpr::Array(SizeExpr::Var(id), t, _), Ty::Array(n, e)) => {
            if let Some(slot) = binders.iter_mut().find(|(name, _)| *name == id.name)
                && slot.1.is_none()
            {
                slot.1 = Some(n.clone());
            }
            infer_binders(t, e, binders);
        }
        (TypeExpr::Array(_, t, _), Ty::Array(_, e)) => infer_binders(t, e, binders),
        (TypeExpr::Idx(SizeExpr::Var(id), _), Ty::Idx(n)) => {
            if let Some(slot) = binders.iter_mut().find(|(name, _)| *name == id.name)
                && slot.1.is_none()
            {
                slot.1 = Some(n.clone());
            }
        }
        (TypeExpr::Tuple(ts, _), Ty::Tuple(tys)) => {
            for (t, y) in ts.iter().zip(tys) {
                infer_binders(t, y, binders);
            }
        }
        _ => {}
    }
}

/// Give a value that fits an annotation the annotated type (an `idx n`
/// annotated `i64` becomes a plain `i64`).
fn retype(v: Val, want: &Ty) -> Val {
    match (v, want) {
        (Val::Tuple(vs), Ty::Tuple(ts)) => Val::Tuple(vs.into_iter().zip(ts).map(|(v, t)| retype(v, t)).collect()),
        (Val::Data { leaves, .. }, t) => Val::Data { ty: t.clone(), leaves },
        (v, _) => v,
    }
}

fn contains_fun(t: &TypeExpr) -> bool {
    match t {
        TypeExpr::Fun(..) => true,
        TypeExpr::Array(_, e, _) => contains_fun(e),
        TypeExpr::Tuple(ts, _) => ts.iter().any(contains_fun),
        _ => false,
    }
}

/// Scalars, arrays of scalars and tuples of those.
fn entry_data_type(t: &TypeExpr) -> bool {
    fn array_of_scalars(t: &TypeExpr) -> bool {
        match t {
            TypeExpr::Scalar(..) => true,
            TypeExpr::Array(_, e, _) => array_of_scalars(e),
            _ => false,
        }
    }
    match t {
        TypeExpr::Tuple(ts, _) => ts.iter().all(entry_data_type),
        t => array_of_scalars(t),
    }
}

fn mentions_alone(t: &TypeExpr, name: &str) -> bool {
    match t {
        TypeExpr::Array(SizeExpr::Var(id), e, _) => id.name == name || mentions_alone(e, name),
        TypeExpr::Array(_, e, _) => mentions_alone(e, name),
        TypeExpr::Idx(SizeExpr::Var(id), _) => id.name == name,
        TypeExpr::Tuple(ts, _) => ts.iter().any(|t| mentions_alone(t, name)),
        TypeExpr::Fun(a, b, _) => mentions_alone(a, name) || mentions_alone(b, name),
        _ => false,
    }
}

fn pat_name(p: &Pat) -> String {
    match p {
        Pat::Var(id) => id.name.clone(),
        Pat::Tuple(ps, _) => format!("({})", ps.iter().map(pat_name).collect::<Vec<_>>().join(", ")),
    }
}

fn scalar_of(k: crate::syntax::ast::ScalarKind) -> Scalar {
    use crate::syntax::ast::ScalarKind as K;
    match k {
        K::F64 => Scalar::F64,
        K::F32 => Scalar::F32,
        K::I64 => Scalar::I64,
        K::I32 => Scalar::I32,
        K::Bool => Scalar::Bool,
    }
}

/// The entry-level shape of a surface type (no arrays of tuples here).
fn shape_of(ty: &Ty) -> Shape {
    match ty {
        Ty::Tuple(ts) => Shape::Tuple(ts.iter().map(shape_of).collect()),
        t => Shape::Leaf(t.leaf_types().remove(0)),
    }
}

/// The hint for an array of tuples where a tuple of arrays is expected, or
/// the reverse: the same leaves laid out the other way round (their sizes
/// may well agree, so "the sizes differ" would mislead).
fn tuple_layout_hint(have: &Ty, want: &Ty) -> Option<&'static str> {
    fn array_of_tuples(t: &Ty) -> bool {
        match t {
            Ty::Array(_, e) => matches!(**e, Ty::Tuple(_)) || array_of_tuples(e),
            _ => false,
        }
    }
    let tuple = |t: &Ty| matches!(t, Ty::Tuple(_));
    if array_of_tuples(have) && tuple(want) {
        Some("this is an array of tuples and a tuple of arrays is expected: `unzip e` turns the one into the other")
    } else if tuple(have) && array_of_tuples(want) {
        Some("this is a tuple of arrays and an array of tuples is expected: `zip a b` turns the one into the other")
    } else {
        None
    }
}
