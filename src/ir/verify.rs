//! The IR verifier: scoping, SSA-like uniqueness, types and symbolic shapes.
//!
//! Tests run it after every pass; an error names the function, prints the
//! offending (innermost) statement and says what is wrong. Sizes are compared
//! as normal forms (`Size` equality), never evaluated.

use super::prim::{Accepts, Typing};
use super::print::{print_atom, print_size, print_stmt, print_type};
use super::{Atom, Binder, Block, Expr, Function, Lambda, LoopKind, Module, Prim, ReduceOp, Scalar, Size, Stmt, Type, VarId};
use std::collections::{HashMap, HashSet};

/// Verify every function of a module; stops at the first error.
pub fn verify_module(m: &Module) -> Result<(), String> {
    let mut names = HashSet::new();
    for f in &m.functions {
        if !names.insert(f.name.as_str()) {
            return Err(format!("IR verification failed: two functions are named `{}`", f.name));
        }
        verify_function(f)?;
    }
    Ok(())
}

/// Verify one function.
pub fn verify_function(f: &Function) -> Result<(), String> {
    let mut v = Verifier { f, env: HashMap::new(), in_scope: HashSet::new(), frames: vec![vec![]], bound: HashSet::new() };
    v.function().map_err(|e| {
        let mut s = format!("IR verification failed in function `{}`: {}", f.name, e.msg);
        if let Some(stmt) = e.stmt {
            s.push_str("\n  in statement:");
            for line in stmt.lines().take(MAX_STMT_LINES) {
                s.push_str("\n    ");
                s.push_str(line);
            }
            if stmt.lines().count() > MAX_STMT_LINES {
                s.push_str("\n    ...");
            }
        }
        s
    })
}

/// Long compound statements are cut in error messages.
const MAX_STMT_LINES: usize = 16;

struct VErr {
    msg: String,
    /// The innermost statement being checked, printed.
    stmt: Option<String>,
}

type R<T> = Result<T, VErr>;

fn err<T>(msg: impl Into<String>) -> R<T> {
    Err(VErr { msg: msg.into(), stmt: None })
}

struct Verifier<'a> {
    f: &'a Function,
    /// Types of every variable bound so far (kept after its scope ends, for messages).
    env: HashMap<VarId, Type>,
    in_scope: HashSet<VarId>,
    /// Variables bound by each open block, innermost last.
    frames: Vec<Vec<VarId>>,
    /// Every variable bound anywhere so far (uniqueness).
    bound: HashSet<VarId>,
}

impl Verifier<'_> {
    // ---- names and printing -------------------------------------------------

    fn vn(&self, v: VarId) -> String {
        print_atom(self.f, &Atom::Var(v))
    }
    fn tn(&self, t: &Type) -> String {
        print_type(self.f, t)
    }
    fn an(&self, a: &Atom) -> String {
        print_atom(self.f, a)
    }
    fn tys(&self, ts: &[Type]) -> String {
        format!("({})", ts.iter().map(|t| self.tn(t)).collect::<Vec<_>>().join(", "))
    }

    // ---- scopes -------------------------------------------------------------

    fn push(&mut self) {
        self.frames.push(vec![]);
    }

    fn pop(&mut self) {
        for v in self.frames.pop().unwrap_or_default() {
            self.in_scope.remove(&v);
        }
    }

    /// The sizes of `t` must only mention `i64` variables in scope.
    fn check_type_scope(&self, t: &Type, what: &str) -> R<()> {
        for d in &t.shape {
            self.check_size(d, &format!("the type {} of {what}", self.tn(t)))?;
        }
        Ok(())
    }

    fn check_size(&self, s: &Size, what: &str) -> R<()> {
        for v in s.vars() {
            if !self.in_scope.contains(&v) {
                return err(format!("{what} mentions {} in a size, which is not in scope there", self.vn(v)));
            }
            let t = &self.env[&v];
            if *t != Type::scalar(Scalar::I64) {
                return err(format!("{what} uses {} as a size, but it has type {}, not i64", self.vn(v), self.tn(t)));
            }
        }
        Ok(())
    }

    /// Bind a variable in the innermost block.
    fn bind_var(&mut self, v: VarId, ty: Type) -> R<()> {
        if !self.bound.insert(v) {
            return err(format!("{} is bound more than once in the function", self.vn(v)));
        }
        self.env.insert(v, ty);
        self.in_scope.insert(v);
        self.frames.last_mut().expect("a frame").push(v);
        Ok(())
    }

    fn bind(&mut self, b: &Binder) -> R<()> {
        self.check_type_scope(&b.ty, &format!("binder {}", self.vn(b.var)))?;
        self.bind_var(b.var, b.ty.clone())
    }

    // ---- operands -----------------------------------------------------------

    fn atom(&self, a: &Atom) -> R<Type> {
        match a {
            Atom::Lit(l) => Ok(Type::scalar(l.scalar())),
            Atom::Var(v) => {
                if self.in_scope.contains(v) {
                    Ok(self.env[v].clone())
                } else if self.env.contains_key(v) {
                    err(format!("{} is used outside the block that binds it", self.vn(*v)))
                } else {
                    err(format!("{} is used but not bound before this point", self.vn(*v)))
                }
            }
        }
    }

    /// An operand that must be a scalar of type `s`.
    fn scalar_of(&self, a: &Atom, s: Scalar, what: &str) -> R<()> {
        let t = self.atom(a)?;
        if t != Type::scalar(s) {
            return err(format!("{what} `{}` must be an {} scalar, but has type {}", self.an(a), s.name(), self.tn(&t)));
        }
        Ok(())
    }

    /// An operand that must be an array (rank >= `min_rank`).
    fn array(&self, a: &Atom, min_rank: usize, what: &str) -> R<Type> {
        let t = self.atom(a)?;
        if t.rank() < min_rank {
            return err(format!("{what} `{}` must be an array of rank at least {min_rank}, but has type {}", self.an(a), self.tn(&t)));
        }
        Ok(t)
    }

    // ---- function and blocks ------------------------------------------------

    fn function(&mut self) -> R<()> {
        let f = self.f;
        for (name, v) in &f.size_params {
            if f.size_params.iter().filter(|(n, _)| n == name).count() > 1 {
                return err(format!("size parameter `{name}` is declared twice"));
            }
            self.bind_var(*v, Type::scalar(Scalar::I64))?;
        }
        // Parameter types may only mention size parameters: check them all
        // before binding any parameter.
        for b in &f.params {
            self.check_type_scope(&b.ty, &format!("parameter {}", self.vn(b.var)))?;
        }
        for b in &f.params {
            self.bind(b)?;
        }
        let leaves: usize = f.param_shapes.iter().map(|(_, s)| s.leaves().len()).sum();
        if leaves != f.params.len() {
            return err(format!("`param_shapes` have {leaves} leaves but the function has {} flat parameters", f.params.len()));
        }
        let mut k = 0;
        for (name, shape) in &f.param_shapes {
            for t in shape.leaves() {
                let p = &f.params[k];
                if *t != p.ty {
                    return err(format!(
                        "parameter `{name}` declares a leaf of type {} but flat parameter {} has type {}",
                        self.tn(t),
                        self.vn(p.var),
                        self.tn(&p.ty)
                    ));
                }
                k += 1;
            }
        }
        let got = self.block(&f.body)?;
        let want: Vec<Type> = f.result_shape.leaves().into_iter().cloned().collect();
        if got != want {
            return err(format!("the body returns {} but `result_shape` says {}", self.tys(&got), self.tys(&want)));
        }
        Ok(())
    }

    /// Check a block's statements and return its result types. The caller
    /// opens and closes the scope (so it can bind parameters first).
    fn block(&mut self, b: &Block) -> R<Vec<Type>> {
        for s in &b.stmts {
            self.stmt(s).map_err(|mut e| {
                if e.stmt.is_none() {
                    e.stmt = Some(print_stmt(self.f, s));
                }
                e
            })?;
        }
        b.result.iter().map(|a| self.atom(a).map_err(|e| VErr { msg: format!("in a block result: {}", e.msg), stmt: None })).collect()
    }

    /// Open a scope, bind `pre`, check `b`, close the scope.
    fn scoped_block(&mut self, pre: &[Binder], b: &Block) -> R<Vec<Type>> {
        self.push();
        let r = (|| {
            for p in pre {
                self.bind(p)?;
            }
            self.block(b)
        })();
        self.pop();
        r
    }

    fn stmt(&mut self, s: &Stmt) -> R<()> {
        for b in &s.binds {
            self.check_type_scope(&b.ty, &format!("binder {}", self.vn(b.var)))?;
        }
        let want = self.expr(&s.expr, &s.binds)?;
        match want {
            Expected::Exactly(ts) => self.check_binders(&s.binds, &ts, &expr_name(&s.expr))?,
            Expected::Checked => {}
        }
        for b in &s.binds {
            self.bind(b)?;
        }
        Ok(())
    }

    fn check_binders(&self, binds: &[Binder], want: &[Type], what: &str) -> R<()> {
        if binds.len() != want.len() {
            return err(format!("`{what}` produces {} value(s) but the statement binds {}", want.len(), binds.len()));
        }
        for (b, t) in binds.iter().zip(want) {
            if b.ty != *t {
                return err(format!("binder {} has type {} but `{what}` produces {}", self.vn(b.var), self.tn(&b.ty), self.tn(t)));
            }
        }
        Ok(())
    }

    fn one<'b>(&self, binds: &'b [Binder], what: &str) -> R<&'b Type> {
        if binds.len() != 1 {
            return err(format!("`{what}` produces one value but the statement binds {}", binds.len()));
        }
        Ok(&binds[0].ty)
    }

    // ---- expressions --------------------------------------------------------

    fn expr(&mut self, e: &Expr, binds: &[Binder]) -> R<Expected> {
        use Expected::*;
        let name = &expr_name(e);
        let name = name.as_str();
        Ok(match e {
            Expr::Atom(a) => Exactly(vec![self.atom(a)?]),
            Expr::Prim(p, args) => Exactly(vec![Type::scalar(self.prim(*p, args)?)]),
            Expr::Index { arr, idx, checks } => {
                let t = self.atom(arr)?;
                if idx.len() > t.rank() {
                    return err(format!("{} indexes into `{}` of rank {} (type {})", idx.len(), self.an(arr), t.rank(), self.tn(&t)));
                }
                if checks.len() != idx.len() {
                    return err(format!("`index` has {} indexes but {} checks", idx.len(), checks.len()));
                }
                for i in idx {
                    let it = self.atom(i)?;
                    if !(it.rank() == 0 && it.elem.is_int()) {
                        return err(format!("index `{}` must be an i64 or i32 scalar, but has type {}", self.an(i), self.tn(&it)));
                    }
                }
                Exactly(vec![Type::array(t.elem, t.shape[idx.len()..].to_vec())])
            }
            Expr::Slice { arr, lo, hi, .. } => {
                let t = self.array(arr, 1, "the sliced array")?;
                self.scalar_of(lo, Scalar::I64, "the lower bound")?;
                self.scalar_of(hi, Scalar::I64, "the upper bound")?;
                let r = self.one(binds, name)?;
                if r.elem != t.elem || r.rank() != t.rank() || r.shape[1..] != t.shape[1..] {
                    return err(format!(
                        "binder {} has type {}, but a slice of {} must have type [_]{}",
                        self.vn(binds[0].var),
                        self.tn(r),
                        self.tn(&t),
                        self.tn(&t.row())
                    ));
                }
                Checked
            }
            Expr::For { ivar, size, body } => {
                self.check_size(size, "the size of `for`")?;
                self.push();
                let r = (|| {
                    self.bind_var(*ivar, Type::scalar(Scalar::I64))?;
                    self.block(body)
                })();
                self.pop();
                let res = r?;
                Exactly(res.into_iter().map(|t| Type::array(t.elem, [vec![size.clone()], t.shape].concat())).collect())
            }
            Expr::ForAcc { ivar, size, body, acc } => {
                self.check_size(size, "the size of `for`")?;
                if acc.len() != body.result.len() {
                    return err(format!("`for` with accumulators marks {} result(s) but its body returns {}", acc.len(), body.result.len()));
                }
                self.push();
                let r = (|| {
                    self.bind_var(*ivar, Type::scalar(Scalar::I64))?;
                    self.block(body)
                })();
                self.pop();
                let res = r?;
                let mut tys = Vec::with_capacity(res.len());
                for (k, t) in res.into_iter().enumerate() {
                    if !acc[k] {
                        tys.push(Type::array(t.elem, [vec![size.clone()], t.shape].concat()));
                    } else if !(t.elem.is_float() || t.elem.is_int()) {
                        return err(format!("`for` accumulates result {k} of type {}, which cannot be added", self.tn(&t)));
                    } else {
                        tys.push(t);
                    }
                }
                Exactly(tys)
            }
            Expr::Reduce { op, ne, arrs } | Expr::Scan { op, ne, arrs } => {
                let scan = matches!(e, Expr::Scan { .. });
                if arrs.is_empty() {
                    return err(format!("`{name}` has no arrays"));
                }
                if ne.len() != arrs.len() {
                    return err(format!("`{name}` has {} neutral elements for {} arrays", ne.len(), arrs.len()));
                }
                let mut ats = vec![];
                for a in arrs {
                    let t = self.array(a, 1, &format!("an operand of `{name}`"))?;
                    if let Some(t0) = ats.first() {
                        let t0: &Type = t0;
                        if t0.shape[0] != t.shape[0] {
                            return err(format!(
                                "the arrays of `{name}` have different outer sizes: {} and {}",
                                print_size(self.f, &t0.shape[0]),
                                print_size(self.f, &t.shape[0])
                            ));
                        }
                    }
                    ats.push(t);
                }
                let rows: Vec<Type> = ats.iter().map(|t| t.row()).collect();
                match op {
                    ReduceOp::Lambda(l) => {
                        for (n, r) in ne.iter().zip(&rows) {
                            let t = self.atom(n)?;
                            if t != *r {
                                return err(format!("neutral element `{}` has type {} but the elements have type {}", self.an(n), self.tn(&t), self.tn(r)));
                            }
                        }
                        self.lambda(l, &rows, name)?;
                    }
                    _ => {
                        for ((n, r), a) in ne.iter().zip(&rows).zip(arrs) {
                            if r.elem == Scalar::Bool {
                                return err(format!("a built-in `{name}` needs a numeric array, but `{}` has type {}", self.an(a), self.tn(&ats[0])));
                            }
                            self.scalar_of(n, r.elem, "the neutral element")?;
                        }
                    }
                }
                Exactly(if scan { ats } else { rows })
            }
            Expr::ArgExt { arr, .. } => {
                let t = self.atom(arr)?;
                if t.rank() != 1 || t.elem == Scalar::Bool {
                    return err(format!("`{name}` needs a 1-d numeric array, but `{}` has type {}", self.an(arr), self.tn(&t)));
                }
                Exactly(vec![Type::scalar(Scalar::I64)])
            }
            Expr::Loop { params, init, kind, body } => {
                if params.len() != init.len() {
                    return err(format!("`loop` has {} parameters but {} initial values", params.len(), init.len()));
                }
                for (p, i) in params.iter().zip(init) {
                    let t = self.atom(i)?;
                    if t != p.ty {
                        return err(format!(
                            "loop parameter {} has type {} but its initial value `{}` has type {}",
                            self.vn(p.var),
                            self.tn(&p.ty),
                            self.an(i),
                            self.tn(&t)
                        ));
                    }
                }
                if let LoopKind::Count { n, .. } = kind {
                    self.scalar_of(n, Scalar::I64, "the loop count")?;
                }
                let ptys: Vec<Type> = params.iter().map(|p| p.ty.clone()).collect();
                self.push();
                let r = (|| {
                    for p in params {
                        self.bind(p)?;
                    }
                    match kind {
                        LoopKind::Count { ivar, .. } => self.bind_var(*ivar, Type::scalar(Scalar::I64))?,
                        LoopKind::While { cond } => {
                            let c = self.scoped_block(&[], cond)?;
                            if c != [Type::scalar(Scalar::Bool)] {
                                return err(format!("the condition of a while loop must return one bool, but returns {}", self.tys(&c)));
                            }
                        }
                    }
                    let res = self.scoped_block(&[], body)?;
                    if res != ptys {
                        return err(format!("the loop body returns {} but the loop parameters have types {}", self.tys(&res), self.tys(&ptys)));
                    }
                    Ok(())
                })();
                self.pop();
                r?;
                Exactly(ptys)
            }
            Expr::If { cond, then_b, else_b } => {
                self.scalar_of(cond, Scalar::Bool, "the condition")?;
                let t = self.scoped_block(&[], then_b)?;
                let f = self.scoped_block(&[], else_b)?;
                let want: Vec<Type> = binds.iter().map(|b| b.ty.clone()).collect();
                if t != want {
                    return err(format!("the `then` branch returns {} but the statement binds {}", self.tys(&t), self.tys(&want)));
                }
                if f != want {
                    return err(format!("the `else` branch returns {} but the statement binds {}", self.tys(&f), self.tys(&want)));
                }
                Checked
            }
            Expr::Update { arr, idx, val, .. } => {
                let a = self.array(arr, 1, "the array")?;
                let it = self.atom(idx)?;
                if it != Type::scalar(Scalar::I64) {
                    return err(format!("the index `{}` of `update` must be an i64, but has type {}", self.an(idx), self.tn(&it)));
                }
                let vt = self.atom(val)?;
                if vt != a.row() {
                    return err(format!(
                        "the value `{}` of `update` has type {} but a row of {} has type {}",
                        self.an(val),
                        self.tn(&vt),
                        self.tn(&a),
                        self.tn(&a.row())
                    ));
                }
                Exactly(vec![a])
            }
            Expr::ScatterAdd { dest, idxs, vals, .. } => {
                let d = self.array(dest, 1, "the destination")?;
                if d.elem == Scalar::Bool {
                    return err(format!("the destination `{}` of `scatter_add` must be numeric, but has type {}", self.an(dest), self.tn(&d)));
                }
                let it = self.atom(idxs)?;
                if it.rank() != 1 || it.elem != Scalar::I64 {
                    return err(format!("the indexes `{}` of `scatter_add` must be a [k]i64 array, but have type {}", self.an(idxs), self.tn(&it)));
                }
                let vt = self.atom(vals)?;
                let want = Type::array(d.elem, [vec![it.shape[0].clone()], d.shape[1..].to_vec()].concat());
                if vt != want {
                    return err(format!("the values `{}` of `scatter_add` have type {} but must have type {}", self.an(vals), self.tn(&vt), self.tn(&want)));
                }
                Exactly(vec![d])
            }
            Expr::Iota { n } => {
                self.scalar_of(n, Scalar::I64, "the size")?;
                let r = self.one(binds, name)?;
                if r.rank() != 1 || r.elem != Scalar::I64 {
                    return err(format!("binder {} of `iota` must have type [_]i64, but has {}", self.vn(binds[0].var), self.tn(r)));
                }
                self.count_matches(n, &r.shape[0], "the size of `iota`")?;
                Checked
            }
            Expr::Replicate { n, val } => {
                self.scalar_of(n, Scalar::I64, "the count")?;
                let vt = self.atom(val)?;
                let r = self.one(binds, name)?;
                if r.rank() != vt.rank() + 1 || r.row() != vt {
                    return err(format!(
                        "binder {} has type {}, but `replicate` of {} must have type [_]{}",
                        self.vn(binds[0].var),
                        self.tn(r),
                        self.tn(&vt),
                        self.tn(&vt)
                    ));
                }
                self.count_matches(n, &r.shape[0], "the count of `replicate`")?;
                Checked
            }
            Expr::ArrayLit(xs) => {
                let r = self.one(binds, name)?;
                if r.rank() == 0 {
                    return err(format!("binder {} of an array literal must be an array, but has type {}", self.vn(binds[0].var), self.tn(r)));
                }
                let count = Size::constant(xs.len() as i64);
                if r.shape[0] != count {
                    return err(format!("an array literal of {} elements cannot have type {}", xs.len(), self.tn(r)));
                }
                let row = r.row();
                for x in xs {
                    let t = self.atom(x)?;
                    if t != row {
                        return err(format!("element `{}` has type {} but the literal's rows have type {}", self.an(x), self.tn(&t), self.tn(&row)));
                    }
                }
                Checked
            }
            Expr::Concat(a, b) => {
                let ta = self.array(a, 1, "the first operand")?;
                let tb = self.array(b, 1, "the second operand")?;
                if ta.row() != tb.row() {
                    return err(format!(
                        "`concat` needs equal row types, but `{}` has type {} and `{}` has type {}",
                        self.an(a),
                        self.tn(&ta),
                        self.an(b),
                        self.tn(&tb)
                    ));
                }
                Exactly(vec![Type::array(ta.elem, [vec![ta.shape[0].add(&tb.shape[0])], ta.shape[1..].to_vec()].concat())])
            }
            Expr::Transpose(a) => {
                let t = self.array(a, 2, "the operand")?;
                let mut s = t.shape.clone();
                s.swap(0, 1);
                Exactly(vec![Type::array(t.elem, s)])
            }
            Expr::Flatten(a) => {
                let t = self.array(a, 2, "the operand")?;
                Exactly(vec![Type::array(t.elem, [vec![t.shape[0].mul(&t.shape[1])], t.shape[2..].to_vec()].concat())])
            }
            Expr::Unflatten { arr, n, m } => {
                let t = self.array(arr, 1, "the operand")?;
                self.scalar_of(n, Scalar::I64, "the outer size")?;
                self.scalar_of(m, Scalar::I64, "the inner size")?;
                let r = self.one(binds, name)?;
                if r.elem != t.elem || r.rank() != t.rank() + 1 || r.shape[2..] != t.shape[1..] {
                    return err(format!(
                        "binder {} has type {}, but unflattening {} must give [_][_]{}",
                        self.vn(binds[0].var),
                        self.tn(r),
                        self.tn(&t),
                        self.tn(&t.row())
                    ));
                }
                self.count_matches(n, &r.shape[0], "the outer size of `unflatten`")?;
                self.count_matches(m, &r.shape[1], "the inner size of `unflatten`")?;
                Checked
            }
            Expr::Reverse(a) => Exactly(vec![self.array(a, 1, "the operand")?]),
            Expr::Rotate { k, arr } => {
                self.scalar_of(k, Scalar::I64, "the rotation amount")?;
                Exactly(vec![self.array(arr, 1, "the operand")?])
            }
            Expr::Coerce { arr, .. } => {
                let t = self.atom(arr)?;
                let r = self.one(binds, name)?;
                if r.elem != t.elem || r.rank() != t.rank() {
                    return err(format!(
                        "`coerce` may only change sizes, but {} has type {} and binder {} has type {}",
                        self.an(arr),
                        self.tn(&t),
                        self.vn(binds[0].var),
                        self.tn(r)
                    ));
                }
                Checked
            }
            Expr::Fail { .. } => Checked,
            Expr::StopGradient(a) => Exactly(vec![self.atom(a)?]),
            Expr::Trace { args, .. } => Exactly(args.iter().map(|a| self.atom(a)).collect::<R<Vec<_>>>()?),
            Expr::Jvp { lam, primals, tangents } => {
                if lam.params.len() != primals.len() || lam.params.len() != tangents.len() {
                    return err(format!("`jvp` has {} parameters, {} primals and {} tangents", lam.params.len(), primals.len(), tangents.len()));
                }
                for ((p, x), t) in lam.params.iter().zip(primals).zip(tangents) {
                    let (xt, tt) = (self.atom(x)?, self.atom(t)?);
                    if xt != p.ty || tt != p.ty {
                        return err(format!(
                            "`jvp` parameter {} has type {}, but its primal has {} and its tangent {}",
                            self.vn(p.var),
                            self.tn(&p.ty),
                            self.tn(&xt),
                            self.tn(&tt)
                        ));
                    }
                }
                let res = self.scoped_block(&lam.params, &lam.body)?;
                Exactly(res.iter().chain(res.iter()).cloned().collect())
            }
            Expr::CustomJvp { primal, rule, args } => {
                let k = primal.params.len();
                if args.len() != k || rule.params.len() != 2 * k + binds.len() {
                    return err(format!("`custom_jvp` has {k} parameters, {} arguments and a rule of {} parameters", args.len(), rule.params.len()));
                }
                for (j, a) in args.iter().enumerate() {
                    let at = self.atom(a)?;
                    let (p, q, t) = (&primal.params[j].ty, &rule.params[j].ty, &rule.params[k + j].ty);
                    if at != *p || at != *q || at != *t {
                        return err(format!(
                            "`custom_jvp` argument {j} has type {}, its parameters {}, {} and tangent {}",
                            self.tn(&at),
                            self.tn(p),
                            self.tn(q),
                            self.tn(t)
                        ));
                    }
                }
                let res = self.scoped_block(&primal.params, &primal.body)?;
                let dres = self.scoped_block(&rule.params, &rule.body)?;
                if res.len() != dres.len() || res.iter().zip(&dres).any(|(a, b)| a.elem != b.elem || a.rank() != b.rank()) {
                    return err("`custom_jvp`: the rule's results are not the tangents of the primal's".to_string());
                }
                Exactly(res)
            }
            Expr::Vjp { lam, primals, cotangents } => {
                if lam.params.len() != primals.len() {
                    return err(format!("`vjp` has {} parameters but {} primals", lam.params.len(), primals.len()));
                }
                for (p, x) in lam.params.iter().zip(primals) {
                    let xt = self.atom(x)?;
                    if xt != p.ty {
                        return err(format!("`vjp` parameter {} has type {}, but its primal has {}", self.vn(p.var), self.tn(&p.ty), self.tn(&xt)));
                    }
                }
                let res = self.scoped_block(&lam.params, &lam.body)?;
                if res.len() != cotangents.len() {
                    return err(format!("`vjp` has {} results but {} cotangents", res.len(), cotangents.len()));
                }
                for (r, c) in res.iter().zip(cotangents) {
                    let ct = self.atom(c)?;
                    if &ct != r {
                        return err(format!("`vjp` result of type {} has a cotangent of type {}", self.tn(r), self.tn(&ct)));
                    }
                }
                Exactly(res.iter().cloned().chain(lam.params.iter().map(|p| p.ty.clone())).collect())
            }
        })
    }

    /// A literal count must equal the size in the result type.
    fn count_matches(&self, n: &Atom, s: &Size, what: &str) -> R<()> {
        if let Atom::Lit(super::Lit::I64(c)) = n
            && *s != Size::constant(*c)
        {
            return err(format!("{what} is {c} but the result type says {}", print_size(self.f, s)));
        }
        Ok(())
    }

    /// Check a reduction operator over elements of types `rows`.
    fn lambda(&mut self, l: &Lambda, rows: &[Type], name: &str) -> R<()> {
        let k = rows.len();
        if l.params.len() != 2 * k {
            return err(format!("the operator of `{name}` over {k} array(s) must take {} parameters, but takes {}", 2 * k, l.params.len()));
        }
        for (j, p) in l.params.iter().enumerate() {
            let want = &rows[j % k];
            if p.ty != *want {
                return err(format!("operator parameter {} has type {} but the elements have type {}", self.vn(p.var), self.tn(&p.ty), self.tn(want)));
            }
        }
        let res = self.scoped_block(&l.params, &l.body)?;
        if res != rows {
            return err(format!("the operator of `{name}` returns {} but must return {}", self.tys(&res), self.tys(rows)));
        }
        Ok(())
    }

    /// Checks a primitive against its row of the primitive table.
    fn prim(&self, p: Prim, args: &[Atom]) -> R<Scalar> {
        let row = p.row();
        let pn = p.name();
        if args.len() != row.arity {
            return err(format!("`{pn}` takes {} operand(s) but has {}", row.arity, args.len()));
        }
        let mut ss = vec![];
        for (k, a) in args.iter().enumerate() {
            let t = self.atom(a)?;
            if t.rank() != 0 {
                return err(format!("operand {} `{}` of `{pn}` must be a scalar, but has type {}", k + 1, self.an(a), self.tn(&t)));
            }
            ss.push(t.elem);
        }
        // operands that must share one type: all but the condition of `select`
        let off = row.typing.typed_operand();
        let same = &ss[off..];
        if let Some(k) = same.iter().position(|s| *s != same[0]) {
            return err(format!(
                "operand {} `{}` of `{pn}` has type {} but operand {} has type {}",
                k + off + 1,
                self.an(&args[k + off]),
                same[k].name(),
                off + 1,
                same[0].name()
            ));
        }
        let s = ss[0];
        let need = |accepts: Accepts| -> R<()> {
            if accepts.accepts(s) { Ok(()) } else { err(format!("`{pn}` needs {} operands, but they are {}", accepts.describe(), s.name())) }
        };
        Ok(match row.typing {
            Typing::Same(accepts) => {
                need(accepts)?;
                s
            }
            Typing::Test(accepts) => {
                need(accepts)?;
                Scalar::Bool
            }
            Typing::To(to) => to,
            Typing::Select => {
                if s != Scalar::Bool {
                    return err(format!("the condition `{}` of `select` must be bool, but is {}", self.an(&args[0]), s.name()));
                }
                ss[1]
            }
        })
    }
}

/// What an expression's binders must be.
enum Expected {
    /// exactly these types
    Exactly(Vec<Type>),
    /// the expression checked its binders itself
    Checked,
}

fn expr_name(e: &Expr) -> String {
    let s = match e {
        Expr::Atom(_) => "copy",
        Expr::Prim(p, _) => p.name(),
        Expr::Index { .. } => "index",
        Expr::Slice { .. } => "slice",
        Expr::For { .. } => "for",
        Expr::ForAcc { .. } => "for with accumulators",
        Expr::Reduce { .. } => "reduce",
        Expr::Scan { .. } => "scan",
        Expr::ArgExt { max: true, .. } => "argmax",
        Expr::ArgExt { max: false, .. } => "argmin",
        Expr::Loop { .. } => "loop",
        Expr::If { .. } => "if",
        Expr::ScatterAdd { .. } => "scatter_add",
        Expr::Update { .. } => "update",
        Expr::Iota { .. } => "iota",
        Expr::Replicate { .. } => "replicate",
        Expr::ArrayLit(_) => "array literal",
        Expr::Concat(..) => "concat",
        Expr::Transpose(_) => "transpose",
        Expr::Flatten(_) => "flatten",
        Expr::Unflatten { .. } => "unflatten",
        Expr::Reverse(_) => "reverse",
        Expr::Rotate { .. } => "rotate",
        Expr::Coerce { .. } => "coerce",
        Expr::Fail { .. } => "fail",
        Expr::StopGradient(_) => "stop_gradient",
        Expr::Trace { .. } => "trace",
        Expr::CustomJvp { .. } => "custom_jvp",
        Expr::Jvp { .. } => "jvp",
        Expr::Vjp { .. } => "vjp",
    };
    s.to_string()
}

/// Small helpers to build functions by hand in tests (shared with the printer's tests).
#[cfg(test)]
pub(crate) mod testkit {
    use crate::ir::*;

    pub fn sz(v: VarId) -> Size {
        Size::var(v)
    }
    pub fn c(k: i64) -> Size {
        Size::constant(k)
    }
    pub fn sc(s: Scalar) -> Type {
        Type::scalar(s)
    }
    pub fn f64t() -> Type {
        Type::scalar(Scalar::F64)
    }
    pub fn i64t() -> Type {
        Type::scalar(Scalar::I64)
    }
    pub fn boolt() -> Type {
        Type::scalar(Scalar::Bool)
    }
    pub fn arr(elem: Scalar, dims: &[Size]) -> Type {
        Type::array(elem, dims.to_vec())
    }
    pub fn v(x: VarId) -> Atom {
        Atom::Var(x)
    }
    pub fn f(x: f64) -> Atom {
        Atom::Lit(Lit::F64(x))
    }
    pub fn i(x: i64) -> Atom {
        Atom::Lit(Lit::I64(x))
    }
    pub fn bd(var: VarId, ty: Type) -> Binder {
        Binder { var, ty }
    }
    pub fn st(binds: Vec<Binder>, expr: Expr) -> Stmt {
        Stmt { binds, expr, loc: None }
    }
    pub fn let1(var: VarId, ty: Type, expr: Expr) -> Stmt {
        st(vec![bd(var, ty)], expr)
    }
    pub fn prim(p: Prim, args: Vec<Atom>) -> Expr {
        Expr::Prim(p, args)
    }
    pub fn block(stmts: Vec<Stmt>, result: Vec<Atom>) -> Block {
        Block { stmts, result }
    }
    pub fn loc() -> Loc {
        Loc { file: "t.ard".into(), line: 1, col: 1 }
    }

    /// Hands out variables with names (`x_3`).
    #[derive(Default)]
    pub struct Names(pub Vec<String>);

    impl Names {
        pub fn var(&mut self, name: &str) -> VarId {
            VarId::fresh(&mut self.0, name)
        }
    }

    /// A function whose `param_shapes` are the flat parameters as leaves.
    pub fn func(name: &str, names: Names, size_params: Vec<(&str, VarId)>, params: Vec<Binder>, results: Vec<Type>, body: Block) -> Function {
        let param_shapes = params.iter().map(|b| (names.0[b.var.0 as usize].clone(), Shape::Leaf(b.ty.clone()))).collect();
        let result_shape = if results.len() == 1 { Shape::Leaf(results[0].clone()) } else { Shape::Tuple(results.into_iter().map(Shape::Leaf).collect()) };
        Function {
            name: name.into(),
            size_params: size_params.into_iter().map(|(n, v)| (n.to_string(), v)).collect(),
            params,
            param_shapes,
            result_shape,
            body,
            names: names.0,
            stored: vec![],
            onehot: vec![],
        }
    }

    /// `entry dot [n] (a: [n]f64) (b: [n]f64) : f64`, as in the printer docs.
    pub fn dot() -> Function {
        let mut nm = Names::default();
        let (n, a, b, i, t, x, y, z, s) = (nm.var("n"), nm.var("a"), nm.var("b"), nm.var("i"), nm.var("t"), nm.var("x"), nm.var("y"), nm.var("z"), nm.var("s"));
        let vn = arr(Scalar::F64, &[sz(n)]);
        let body = block(
            vec![
                let1(x, f64t(), Expr::Index { arr: v(a), idx: vec![v(i)], checks: vec![None] }),
                let1(y, f64t(), Expr::Index { arr: v(b), idx: vec![v(i)], checks: vec![None] }),
                let1(z, f64t(), prim(Prim::Mul, vec![v(x), v(y)])),
            ],
            vec![v(z)],
        );
        let top = block(
            vec![
                let1(t, vn.clone(), Expr::For { ivar: i, size: sz(n), body }),
                let1(s, f64t(), Expr::Reduce { op: ReduceOp::Add, ne: vec![f(0.0)], arrs: vec![v(t)] }),
            ],
            vec![v(s)],
        );
        func("dot", nm, vec![("n", n)], vec![bd(a, vn.clone()), bd(b, vn)], vec![f64t()], top)
    }

    /// Outer product with a nested `for` and a checked index:
    /// `entry outer [n][m] (x: [n]f64) (y: [m]f64) (k: i64) : [n][m]f64`.
    pub fn outer() -> Function {
        let mut nm = Names::default();
        let (n, m, x, y, k, i, j, xi, yj, p, r) =
            (nm.var("n"), nm.var("m"), nm.var("x"), nm.var("y"), nm.var("k"), nm.var("i"), nm.var("j"), nm.var("xi"), nm.var("yj"), nm.var("p"), nm.var("r"));
        let inner = block(
            vec![let1(yj, f64t(), Expr::Index { arr: v(y), idx: vec![v(j)], checks: vec![None] }), let1(p, f64t(), prim(Prim::Mul, vec![v(xi), v(yj)]))],
            vec![v(p)],
        );
        let outer = block(
            vec![
                let1(xi, f64t(), Expr::Index { arr: v(x), idx: vec![v(k)], checks: vec![Some(loc())] }),
                let1(r, arr(Scalar::F64, &[sz(m)]), Expr::For { ivar: j, size: sz(m), body: inner }),
            ],
            vec![v(r)],
        );
        let res = nm.var("res");
        let ty = arr(Scalar::F64, &[sz(n), sz(m)]);
        let top = block(vec![let1(res, ty.clone(), Expr::For { ivar: i, size: sz(n), body: outer })], vec![v(res)]);
        func("outer", nm, vec![("n", n), ("m", m)], vec![bd(x, arr(Scalar::F64, &[sz(n)])), bd(y, arr(Scalar::F64, &[sz(m)])), bd(k, i64t())], vec![ty], top)
    }

    /// A counted loop carrying two values, a while loop, an if, a reduce with
    /// a lambda and a scatter_add:
    /// `entry misc [n] (xs: [n]f64) (is: [n]i64) : (f64, i64, [n]f64)`.
    pub fn misc() -> Function {
        let mut nm = Names::default();
        let (n, xs, is) = (nm.var("n"), nm.var("xs"), nm.var("is"));
        // counted loop: (acc, cnt) = loop (acc = 0.0, cnt = 0) for i < n { acc + xs[i], cnt + 1 }
        let (acc, cnt, li, e, acc2, cnt2, acc_o, cnt_o) =
            (nm.var("acc"), nm.var("cnt"), nm.var("i"), nm.var("e"), nm.var("acc"), nm.var("cnt"), nm.var("acc"), nm.var("cnt"));
        let lbody = block(
            vec![
                let1(e, f64t(), Expr::Index { arr: v(xs), idx: vec![v(li)], checks: vec![None] }),
                let1(acc2, f64t(), prim(Prim::Add, vec![v(acc), v(e)])),
                let1(cnt2, i64t(), prim(Prim::Add, vec![v(cnt), i(1)])),
            ],
            vec![v(acc2), v(cnt2)],
        );
        let s_loop = st(
            vec![bd(acc_o, f64t()), bd(cnt_o, i64t())],
            Expr::Loop {
                params: vec![bd(acc, f64t()), bd(cnt, i64t())],
                init: vec![f(0.0), i(0)],
                kind: LoopKind::Count { ivar: li, n: v(n), down: false },
                body: lbody,
            },
        );
        // while loop: w = loop (w = acc_o) while w > 1.0 do w / 2.0
        let (w, wc, w2, w_o) = (nm.var("w"), nm.var("c"), nm.var("w"), nm.var("w"));
        let s_while = let1(
            w_o,
            f64t(),
            Expr::Loop {
                params: vec![bd(w, f64t())],
                init: vec![v(acc_o)],
                kind: LoopKind::While { cond: block(vec![let1(wc, boolt(), prim(Prim::Gt, vec![v(w), f(1.0)]))], vec![v(wc)]) },
                body: block(vec![let1(w2, f64t(), prim(Prim::Div, vec![v(w), f(2.0)]))], vec![v(w2)]),
            },
        );
        // if: r = if cnt_o > 0 then w_o else neg w_o
        let (b, ng, r) = (nm.var("b"), nm.var("ng"), nm.var("r"));
        let s_b = let1(b, boolt(), prim(Prim::Gt, vec![v(cnt_o), i(0)]));
        let s_if = let1(
            r,
            f64t(),
            Expr::If { cond: v(b), then_b: block(vec![], vec![v(w_o)]), else_b: block(vec![let1(ng, f64t(), prim(Prim::Neg, vec![v(w_o)]))], vec![v(ng)]) },
        );
        // reduce with a lambda over (xs, is): pairs (max value, its index)
        let (p1, p2, q1, q2, gt, m1, m2, red1, red2) =
            (nm.var("p"), nm.var("p"), nm.var("q"), nm.var("q"), nm.var("gt"), nm.var("m"), nm.var("m"), nm.var("best"), nm.var("at"));
        let lam = Lambda {
            params: vec![bd(p1, f64t()), bd(p2, i64t()), bd(q1, f64t()), bd(q2, i64t())],
            body: block(
                vec![
                    let1(gt, boolt(), prim(Prim::Gt, vec![v(q1), v(p1)])),
                    let1(m1, f64t(), prim(Prim::Select, vec![v(gt), v(q1), v(p1)])),
                    let1(m2, i64t(), prim(Prim::Select, vec![v(gt), v(q2), v(p2)])),
                ],
                vec![v(m1), v(m2)],
            ),
        };
        let s_red = st(
            vec![bd(red1, f64t()), bd(red2, i64t())],
            Expr::Reduce { op: ReduceOp::Lambda(lam), ne: vec![f(f64::NEG_INFINITY), i(-1)], arrs: vec![v(xs), v(is)] },
        );
        // scatter_add of xs into zeros at is
        let (z, sa) = (nm.var("z"), nm.var("sa"));
        let vn = arr(Scalar::F64, &[sz(n)]);
        let s_z = let1(z, vn.clone(), Expr::Replicate { n: v(n), val: f(0.0) });
        let s_sa = let1(sa, vn.clone(), Expr::ScatterAdd { dest: v(z), idxs: v(is), vals: v(xs), loc: loc() });
        let (tot,) = (nm.var("tot"),);
        let s_tot = let1(tot, f64t(), prim(Prim::Add, vec![v(r), v(red1)]));
        let top = block(vec![s_loop, s_while, s_b, s_if, s_red, s_z, s_sa, s_tot], vec![v(tot), v(red2), v(sa)]);
        func("misc", nm, vec![("n", n)], vec![bd(xs, vn.clone()), bd(is, arr(Scalar::I64, &[sz(n)]))], vec![f64t(), i64t(), vn], top)
    }
    /// The array operations: `entry shapes [n] (a: [n][3]f64) (k: i64) : ([n][3]f64, f32, i32, bool)`.
    pub fn shapes() -> Function {
        let mut nm = Names::default();
        let (n, a, k) = (nm.var("n"), nm.var("a"), nm.var("k"));
        let mut vs = |s: &str| nm.var(s);
        let (t, fl, u, cc, r, ro, l, io, am, sl, co, scn, fa, cv, q, bb) = (
            vs("t"),
            vs("fl"),
            vs("u"),
            vs("cc"),
            vs("r"),
            vs("ro"),
            vs("l"),
            vs("io"),
            vs("am"),
            vs("sl"),
            vs("co"),
            vs("scn"),
            vs("fa"),
            vs("cv"),
            vs("q"),
            vs("bb"),
        );
        let a_ty = arr(Scalar::F64, &[sz(n), c(3)]);
        let stmts = vec![
            let1(t, arr(Scalar::F64, &[c(3), sz(n)]), Expr::Transpose(v(a))),
            let1(fl, arr(Scalar::F64, &[sz(n).mul(&c(3))]), Expr::Flatten(v(t))),
            let1(u, arr(Scalar::F64, &[c(3), sz(n)]), Expr::Unflatten { arr: v(fl), n: i(3), m: v(n) }),
            let1(cc, arr(Scalar::F64, &[sz(n).mul(&c(2)), c(3)]), Expr::Concat(v(a), v(a))),
            let1(r, a_ty.clone(), Expr::Reverse(v(a))),
            let1(ro, a_ty.clone(), Expr::Rotate { k: v(k), arr: v(r) }),
            let1(l, arr(Scalar::F64, &[c(2)]), Expr::ArrayLit(vec![f(1.0), f(-2.5)])),
            let1(io, arr(Scalar::I64, &[sz(n)]), Expr::Iota { n: v(n) }),
            let1(am, i64t(), Expr::ArgExt { max: true, arr: v(l) }),
            let1(sl, arr(Scalar::F64, &[sz(k), c(3)]), Expr::Slice { arr: v(ro), lo: i(0), hi: v(k), check: Some(loc()) }),
            let1(co, a_ty.clone(), Expr::Coerce { arr: v(sl), loc: loc() }),
            let1(scn, a_ty.clone(), Expr::Scan { op: ReduceOp::Max, ne: vec![f(f64::NEG_INFINITY)], arrs: vec![v(co)] }),
            let1(fa, f64t(), Expr::Fail { msg: "a \"bad\" size".into(), loc: loc() }),
            let1(cv, sc(Scalar::F32), prim(Prim::Convert(Scalar::F32), vec![v(fa)])),
            let1(q, sc(Scalar::I32), prim(Prim::Add, vec![Atom::Lit(Lit::I32(3)), Atom::Lit(Lit::I32(-4))])),
            let1(bb, boolt(), prim(Prim::And, vec![Atom::Lit(Lit::Bool(true)), Atom::Lit(Lit::Bool(false))])),
        ];
        let top = block(stmts, vec![v(scn), v(cv), v(q), v(bb)]);
        let _ = (u, cc, io, am);
        func("shapes", nm, vec![("n", n)], vec![bd(a, a_ty.clone()), bd(k, i64t())], vec![a_ty, sc(Scalar::F32), sc(Scalar::I32), boolt()], top)
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::*;
    use super::*;
    use crate::ir::{Lit, Shape};

    fn rejects(f: &Function, needle: &str) -> String {
        match verify_function(f) {
            Ok(()) => panic!("expected a verifier error containing {needle:?}, but the function verified:\n{}", crate::ir::print::print_function(f)),
            Err(e) => {
                assert!(e.contains(needle), "error does not mention {needle:?}:\n{e}");
                assert!(e.contains(&format!("function `{}`", f.name)), "error does not name the function:\n{e}");
                e
            }
        }
    }

    fn body_of(s: &mut Stmt) -> &mut Block {
        match &mut s.expr {
            Expr::For { body, .. } | Expr::ForAcc { body, .. } | Expr::Loop { body, .. } => body,
            Expr::Reduce { op: ReduceOp::Lambda(l), .. } | Expr::Scan { op: ReduceOp::Lambda(l), .. } => &mut l.body,
            e => panic!("no body: {e:?}"),
        }
    }

    /// The statement of `f` that binds a variable named `name` (top level only).
    fn stmt_named<'a>(f: &'a mut Function, name: &str) -> &'a mut Stmt {
        let names = f.names.clone();
        f.body.stmts.iter_mut().find(|s| s.binds.iter().any(|b| names[b.var.0 as usize] == name)).expect("statement")
    }

    fn var_named(f: &Function, name: &str) -> VarId {
        VarId(f.names.iter().position(|n| n == name).expect("name") as u32)
    }

    #[test]
    fn good_functions_verify() {
        for f in [dot(), outer(), misc(), shapes()] {
            if let Err(e) = verify_function(&f) {
                panic!("{e}\n{}", crate::ir::print::print_function(&f));
            }
        }
        let m = Module { functions: vec![dot(), outer(), misc(), shapes()] };
        verify_module(&m).unwrap();
    }

    #[test]
    fn module_rejects_duplicate_names() {
        let m = Module { functions: vec![dot(), dot()] };
        assert!(verify_module(&m).unwrap_err().contains("two functions are named `dot`"));
    }

    #[test]
    fn unbound_variable() {
        let mut f = dot();
        let s = var_named(&f, "s");
        // use `s` (bound later) inside the for body
        let t = stmt_named(&mut f, "t");
        body_of(t).stmts[2].expr = prim(Prim::Mul, vec![v(s), f64lit()]);
        let e = rejects(&f, "s_8 is used but not bound before this point");
        // the innermost statement is shown
        assert!(e.contains("in statement:\n    let z_7: f64 = mul s_8 1.0"), "{e}");
    }

    fn f64lit() -> Atom {
        Atom::Lit(Lit::F64(1.0))
    }

    #[test]
    fn variable_used_out_of_scope() {
        let mut f = outer();
        let p = var_named(&f, "p");
        f.body.result = vec![v(p)];
        f.result_shape = Shape::Leaf(f64t());
        rejects(&f, "p_9 is used outside the block that binds it");
    }

    #[test]
    fn duplicate_binding() {
        let mut f = dot();
        let x = var_named(&f, "x");
        let t = stmt_named(&mut f, "t");
        body_of(t).stmts[1].binds[0].var = x;
        rejects(&f, "x_5 is bound more than once");
        // rebinding a parameter in a nested block
        let mut f = misc();
        let xs = var_named(&f, "xs");
        let l = stmt_named(&mut f, "acc");
        if let Expr::Loop { kind: LoopKind::Count { ivar, .. }, .. } = &mut l.expr {
            *ivar = xs;
        }
        rejects(&f, "xs_1 is bound more than once");
    }

    #[test]
    fn size_out_of_scope() {
        // a parameter type may only mention size parameters
        let mut f = outer();
        let k = var_named(&f, "k");
        f.params[0].ty = arr(Scalar::F64, &[sz(k)]);
        rejects(&f, "mentions k_4 in a size, which is not in scope");
        // a `for` result type cannot mention a variable of its body
        let mut f = dot();
        let x = var_named(&f, "x");
        f.body.stmts[0].binds[0].ty = arr(Scalar::F64, &[sz(x)]);
        rejects(&f, "mentions x_5 in a size");
        // a size variable must be an i64
        let mut f = dot();
        let a = var_named(&f, "a");
        let y = var_named(&f, "y");
        let t = stmt_named(&mut f, "t");
        body_of(t).stmts[1].binds[0].ty = arr(Scalar::F64, &[sz(a)]);
        let _ = y;
        rejects(&f, "uses a_1 as a size, but it has type [n]f64");
    }

    #[test]
    fn wrong_prim_operand_types() {
        let mut f = dot();
        let x = var_named(&f, "x");
        let t = stmt_named(&mut f, "t");
        body_of(t).stmts[2].expr = prim(Prim::Mul, vec![v(x), i(2)]);
        rejects(&f, "operand 2 `2` of `mul` has type i64 but operand 1 has type f64");

        let mut f = dot();
        let t = stmt_named(&mut f, "t");
        body_of(t).stmts[2].expr = prim(Prim::Exp, vec![i(2)]);
        rejects(&f, "`exp` needs float operands, but they are i64");

        let mut f = dot();
        let t = stmt_named(&mut f, "t");
        body_of(t).stmts[2].expr = prim(Prim::Lt, vec![f64lit(), f64lit()]);
        rejects(&f, "binder z_7 has type f64 but `lt` produces bool");

        let mut f = dot();
        let t = stmt_named(&mut f, "t");
        body_of(t).stmts[2].expr = prim(Prim::And, vec![f64lit(), f64lit()]);
        rejects(&f, "`and` needs bool operands");

        let mut f = dot();
        let a = var_named(&f, "a");
        let t = stmt_named(&mut f, "t");
        body_of(t).stmts[2].expr = prim(Prim::Neg, vec![v(a)]);
        rejects(&f, "must be a scalar, but has type [n]f64");

        let mut f = dot();
        let t = stmt_named(&mut f, "t");
        body_of(t).stmts[2].expr = prim(Prim::Add, vec![f64lit()]);
        rejects(&f, "`add` takes 2 operand(s) but has 1");

        let mut f = misc();
        let lam = stmt_named(&mut f, "best");
        body_of(lam).stmts[1].expr = prim(Prim::Select, vec![f64lit(), f64lit(), f64lit()]);
        rejects(&f, "the condition `1.0` of `select` must be bool");
    }

    #[test]
    fn wrong_for_result_type() {
        let mut f = dot();
        f.body.stmts[0].binds[0].ty = arr(Scalar::F32, &[sz(var_named(&f, "n"))]);
        rejects(&f, "binder t_4 has type [n]f32 but `for` produces [n]f64");
        let mut f = outer();
        let (n, m) = (var_named(&f, "n"), var_named(&f, "m"));
        f.body.stmts[0].binds[0].ty = arr(Scalar::F64, &[sz(m), sz(n)]);
        f.result_shape = Shape::Leaf(arr(Scalar::F64, &[sz(m), sz(n)]));
        rejects(&f, "binder res_11 has type [m][n]f64 but `for` produces [n][m]f64");
        // two binders for one body result
        let mut f = dot();
        let s = var_named(&f, "s");
        f.body.stmts[0].binds.push(bd(s, f64t()));
        rejects(&f, "`for` produces 1 value(s) but the statement binds 2");
    }

    #[test]
    fn wrong_loop_types() {
        // body results swapped
        let mut f = misc();
        let l = stmt_named(&mut f, "acc");
        body_of(l).result.reverse();
        rejects(&f, "the loop body returns (i64, f64) but the loop parameters have types (f64, i64)");
        // init of the wrong type
        let mut f = misc();
        let l = stmt_named(&mut f, "acc");
        if let Expr::Loop { init, .. } = &mut l.expr {
            init[1] = f64lit();
        }
        rejects(&f, "loop parameter cnt_4 has type i64 but its initial value `1.0` has type f64");
        // count not an i64
        let mut f = misc();
        let l = stmt_named(&mut f, "acc");
        if let Expr::Loop { kind: LoopKind::Count { n, .. }, .. } = &mut l.expr {
            *n = f64lit();
        }
        rejects(&f, "the loop count `1.0` must be an i64 scalar");
        // while condition not a bool
        let mut f = misc();
        let w = stmt_named(&mut f, "w");
        if let Expr::Loop { kind: LoopKind::While { cond }, params, .. } = &mut w.expr {
            cond.result = vec![v(params[0].var)];
        }
        rejects(&f, "the condition of a while loop must return one bool, but returns (f64)");
        // result binders differ from the parameters
        let mut f = misc();
        let l = stmt_named(&mut f, "acc");
        l.binds[1].ty = f64t();
        rejects(&f, "binder cnt_10 has type f64 but `loop` produces i64");
    }

    #[test]
    fn if_branch_mismatch() {
        let mut f = misc();
        let s = stmt_named(&mut f, "r");
        if let Expr::If { else_b, .. } = &mut s.expr {
            else_b.result = vec![i(0)];
        }
        rejects(&f, "the `else` branch returns (i64) but the statement binds (f64)");
        let mut f = misc();
        let s = stmt_named(&mut f, "r");
        if let Expr::If { cond, .. } = &mut s.expr {
            *cond = i(1);
        }
        rejects(&f, "the condition `1` must be an bool scalar");
    }

    #[test]
    fn index_errors() {
        let mut f = dot();
        let (a, i_) = (var_named(&f, "a"), var_named(&f, "i"));
        let t = stmt_named(&mut f, "t");
        body_of(t).stmts[0].expr = Expr::Index { arr: v(a), idx: vec![v(i_), v(i_)], checks: vec![None, None] };
        rejects(&f, "2 indexes into `a_1` of rank 1");
        let mut f = dot();
        let t = stmt_named(&mut f, "t");
        body_of(t).stmts[0].expr = Expr::Index { arr: v(a), idx: vec![f64lit()], checks: vec![None] };
        rejects(&f, "index `1.0` must be an i64 or i32 scalar");
        let mut f = dot();
        let t = stmt_named(&mut f, "t");
        body_of(t).stmts[0].expr = Expr::Index { arr: v(a), idx: vec![v(i_)], checks: vec![] };
        rejects(&f, "`index` has 1 indexes but 0 checks");
        // partial index gives a row
        let mut f = outer();
        let x = var_named(&f, "x");
        let s = stmt_named(&mut f, "res");
        body_of(s).stmts[0].expr = Expr::Index { arr: v(x), idx: vec![], checks: vec![] };
        rejects(&f, "binder xi_7 has type f64 but `index` produces [n]f64");
    }

    #[test]
    fn reduce_errors() {
        // built-in with a neutral element of the wrong type
        let mut f = dot();
        if let Expr::Reduce { ne, .. } = &mut f.body.stmts[1].expr {
            ne[0] = i(0);
        }
        rejects(&f, "the neutral element `0` must be an f64 scalar");
        // reduce result is the row type
        let mut f = dot();
        f.body.stmts[1].binds[0].ty = arr(Scalar::F64, &[sz(var_named(&f, "n"))]);
        f.result_shape = Shape::Leaf(f.body.stmts[1].binds[0].ty.clone());
        rejects(&f, "binder s_8 has type [n]f64 but `reduce` produces f64");
        // lambda returning the wrong types
        let mut f = misc();
        let s = stmt_named(&mut f, "best");
        body_of(s).result.reverse();
        rejects(&f, "the operator of `reduce` returns (i64, f64) but must return (f64, i64)");
        // lambda with a wrong parameter count
        let mut f = misc();
        let s = stmt_named(&mut f, "best");
        if let Expr::Reduce { op: ReduceOp::Lambda(l), .. } = &mut s.expr {
            l.params.pop();
        }
        rejects(&f, "must take 4 parameters, but takes 3");
        // one neutral element missing
        let mut f = misc();
        let s = stmt_named(&mut f, "best");
        if let Expr::Reduce { ne, .. } = &mut s.expr {
            ne.pop();
        }
        rejects(&f, "`reduce` has 1 neutral elements for 2 arrays");
        // scan keeps the array type
        let mut f = shapes();
        let s = stmt_named(&mut f, "scn");
        s.binds[0].ty = arr(Scalar::F64, &[c(3)]);
        rejects(&f, "binder scn_14 has type [3]f64 but `scan` produces [n][3]f64");
    }

    #[test]
    fn scatter_add_errors() {
        let mut f = misc();
        let (z, n) = (var_named(&f, "z"), var_named(&f, "n"));
        let s = stmt_named(&mut f, "sa");
        s.expr = Expr::ScatterAdd { dest: v(z), idxs: v(z), vals: v(z), loc: loc() };
        rejects(&f, "the indexes `z_27` of `scatter_add` must be a [k]i64 array");
        let mut f = misc();
        let is = var_named(&f, "is");
        let s = stmt_named(&mut f, "sa");
        s.expr = Expr::ScatterAdd { dest: v(z), idxs: v(is), vals: v(is), loc: loc() };
        rejects(&f, "have type [n]i64 but must have type [n]f64");
        let _ = n;
    }

    #[test]
    fn array_op_errors() {
        let mut f = shapes();
        let n = var_named(&f, "n");
        // concat: outer size is the sum
        let s = stmt_named(&mut f, "cc");
        s.binds[0].ty = arr(Scalar::F64, &[sz(n), c(3)]);
        rejects(&f, "binder cc_6 has type [n][3]f64 but `concat` produces [2*n][3]f64");
        // concat: rows must agree
        let mut f = shapes();
        let (a, t) = (var_named(&f, "a"), var_named(&f, "t"));
        let s = stmt_named(&mut f, "cc");
        s.expr = Expr::Concat(v(a), v(t));
        rejects(&f, "`concat` needs equal row types");
        // transpose swaps
        let mut f = shapes();
        let s = stmt_named(&mut f, "t");
        s.binds[0].ty = arr(Scalar::F64, &[sz(n), c(3)]);
        rejects(&f, "but `transpose` produces [3][n]f64");
        // flatten multiplies
        let mut f = shapes();
        let s = stmt_named(&mut f, "fl");
        s.binds[0].ty = arr(Scalar::F64, &[sz(n).add(&c(3))]);
        rejects(&f, "binder fl_4 has type [n + 3]f64 but `flatten` produces [3*n]f64");
        // unflatten adds one axis, literal sizes must agree
        let mut f = shapes();
        let s = stmt_named(&mut f, "u");
        s.binds[0].ty = arr(Scalar::F64, &[c(4), sz(n)]);
        rejects(&f, "the outer size of `unflatten` is 3 but the result type says 4");
        let mut f = shapes();
        let s = stmt_named(&mut f, "u");
        s.binds[0].ty = arr(Scalar::F64, &[c(3)]);
        rejects(&f, "unflattening [3*n]f64 must give [_][_]f64");
        // array literal: outer size is the count
        let mut f = shapes();
        let s = stmt_named(&mut f, "l");
        s.binds[0].ty = arr(Scalar::F64, &[c(3)]);
        rejects(&f, "an array literal of 2 elements cannot have type [3]f64");
        let mut f = shapes();
        let s = stmt_named(&mut f, "l");
        s.expr = Expr::ArrayLit(vec![f64lit(), i(2)]);
        rejects(&f, "element `2` has type i64 but the literal's rows have type f64");
        // iota
        let mut f = shapes();
        let s = stmt_named(&mut f, "io");
        s.expr = Expr::Iota { n: i(5) };
        rejects(&f, "the size of `iota` is 5 but the result type says n");
        // argmax on a 2-d array
        let mut f = shapes();
        let s = stmt_named(&mut f, "am");
        s.expr = Expr::ArgExt { max: true, arr: v(a) };
        rejects(&f, "`argmax` needs a 1-d numeric array");
        // slice keeps the inner dimensions
        let mut f = shapes();
        let s = stmt_named(&mut f, "sl");
        s.binds[0].ty = arr(Scalar::F64, &[sz(n), c(4)]);
        rejects(&f, "a slice of [n][3]f64 must have type [_][3]f64");
        // coerce keeps rank and element type
        let mut f = shapes();
        let s = stmt_named(&mut f, "co");
        s.binds[0].ty = arr(Scalar::F64, &[sz(n)]);
        f.result_shape = Shape::Leaf(f64t());
        rejects(&f, "`coerce` may only change sizes");
        // rotate and reverse keep the type
        let mut f = shapes();
        let s = stmt_named(&mut f, "ro");
        s.binds[0].ty = arr(Scalar::F64, &[c(3), sz(n)]);
        rejects(&f, "but `rotate` produces [n][3]f64");
    }

    #[test]
    fn function_signature_errors() {
        let mut f = dot();
        f.result_shape = Shape::Leaf(i64t());
        rejects(&f, "the body returns (f64) but `result_shape` says (i64)");
        let mut f = misc();
        f.result_shape = Shape::Tuple(vec![Shape::Leaf(f64t()), Shape::Leaf(i64t())]);
        rejects(&f, "the body returns (f64, i64, [n]f64) but `result_shape` says (f64, i64)");
        let mut f = dot();
        f.param_shapes.pop();
        rejects(&f, "`param_shapes` have 1 leaves but the function has 2 flat parameters");
        let mut f = dot();
        f.param_shapes[0].1 = Shape::Leaf(f64t());
        rejects(&f, "parameter `a` declares a leaf of type f64 but flat parameter a_1 has type [n]f64");
    }

    #[test]
    fn long_statements_are_cut() {
        let mut f = misc();
        let s = stmt_named(&mut f, "best");
        body_of(s).result.reverse();
        let e = verify_function(&f).unwrap_err();
        assert!(e.lines().count() < MAX_STMT_LINES + 4, "{e}");
    }
}
