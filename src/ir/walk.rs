//! Generic traversals of the IR shared by the transforms: which variables an
//! expression reads and binds, copying a block with its variables
//! substituted or renamed, and removing statements nobody reads.

use super::prim::Traps;
use super::{Atom, Binder, Block, Expr, Lambda, Lit, LoopKind, Prim, ReduceOp, Size, Stmt, Type, VarId};
use rustc_hash::{FxHashMap, FxHashSet};

/// Call `uses` on every variable `e` reads (operands and size variables in
/// types, nested blocks included) and `binds` on every variable it binds
/// inside nested blocks.
pub fn visit_expr(e: &Expr, uses: &mut dyn FnMut(VarId), binds: &mut dyn FnMut(VarId)) {
    let atom = |a: &Atom, uses: &mut dyn FnMut(VarId)| {
        if let Atom::Var(v) = a {
            uses(*v)
        }
    };
    match e {
        Expr::Atom(a) | Expr::Transpose(a) | Expr::Flatten(a) | Expr::Reverse(a) | Expr::StopGradient(a) => atom(a, uses),
        Expr::Prim(_, args) | Expr::ArrayLit(args) => args.iter().for_each(|a| atom(a, uses)),
        Expr::Index { arr, idx, .. } => {
            atom(arr, uses);
            idx.iter().for_each(|a| atom(a, uses));
        }
        Expr::Slice { arr, lo, hi, .. } => [arr, lo, hi].into_iter().for_each(|a| atom(a, uses)),
        Expr::For { ivar, size, body } | Expr::ForAcc { ivar, size, body, .. } => {
            binds(*ivar);
            size.vars().into_iter().for_each(&mut *uses);
            visit_block(body, uses, binds);
        }
        Expr::Reduce { op, ne, arrs } | Expr::Scan { op, ne, arrs } => {
            if let ReduceOp::Lambda(l) = op {
                visit_lambda(l, uses, binds);
            }
            ne.iter().chain(arrs).for_each(|a| atom(a, uses));
        }
        Expr::ArgExt { arr, .. } => atom(arr, uses),
        Expr::Loop { params, init, kind, body } => {
            visit_binders(params, uses, binds);
            init.iter().for_each(|a| atom(a, uses));
            match kind {
                LoopKind::Count { ivar, n, .. } => {
                    binds(*ivar);
                    atom(n, uses);
                }
                LoopKind::While { cond } => visit_block(cond, uses, binds),
            }
            visit_block(body, uses, binds);
        }
        Expr::If { cond, then_b, else_b } => {
            atom(cond, uses);
            visit_block(then_b, uses, binds);
            visit_block(else_b, uses, binds);
        }
        Expr::ScatterAdd { dest, idxs, vals, .. } => [dest, idxs, vals].into_iter().for_each(|a| atom(a, uses)),
        Expr::Update { arr, idx, val, .. } => [arr, idx, val].into_iter().for_each(|a| atom(a, uses)),
        Expr::Iota { n } => atom(n, uses),
        Expr::Replicate { n, val } => [n, val].into_iter().for_each(|a| atom(a, uses)),
        Expr::Concat(a, b) => [a, b].into_iter().for_each(|a| atom(a, uses)),
        Expr::Unflatten { arr, n, m } => [arr, n, m].into_iter().for_each(|a| atom(a, uses)),
        Expr::Rotate { k, arr } => [k, arr].into_iter().for_each(|a| atom(a, uses)),
        Expr::Coerce { arr, .. } => atom(arr, uses),
        Expr::Fail { .. } => {}
        Expr::Jvp { lam, primals, tangents: others } | Expr::Vjp { lam, primals, cotangents: others } => {
            visit_lambda(lam, uses, binds);
            primals.iter().chain(others).for_each(|a| atom(a, uses));
        }
    }
}

/// Call `f` on each block nested directly in `e` (loop bodies, a `while`
/// condition, branches, reduction and derivative lambdas' bodies).
pub fn sub_blocks<'e>(e: &'e Expr, f: &mut dyn FnMut(&'e Block)) {
    match e {
        Expr::For { body, .. } | Expr::ForAcc { body, .. } => f(body),
        Expr::Reduce { op: ReduceOp::Lambda(l), .. } | Expr::Scan { op: ReduceOp::Lambda(l), .. } => f(&l.body),
        Expr::Jvp { lam, .. } | Expr::Vjp { lam, .. } => f(&lam.body),
        Expr::Loop { kind, body, .. } => {
            if let LoopKind::While { cond } = kind {
                f(cond);
            }
            f(body);
        }
        Expr::If { then_b, else_b, .. } => {
            f(then_b);
            f(else_b);
        }
        _ => {}
    }
}

fn visit_binders(bs: &[Binder], uses: &mut dyn FnMut(VarId), binds: &mut dyn FnMut(VarId)) {
    for b in bs {
        binds(b.var);
        b.ty.shape.iter().flat_map(Size::vars).for_each(&mut *uses);
    }
}

fn visit_lambda(l: &Lambda, uses: &mut dyn FnMut(VarId), binds: &mut dyn FnMut(VarId)) {
    visit_binders(&l.params, uses, binds);
    visit_block(&l.body, uses, binds);
}

/// [`visit_expr`] over a block: its statements' binders count as bound.
pub fn visit_block(b: &Block, uses: &mut dyn FnMut(VarId), binds: &mut dyn FnMut(VarId)) {
    for s in &b.stmts {
        visit_binders(&s.binds, uses, binds);
        visit_expr(&s.expr, uses, binds);
    }
    for a in &b.result {
        if let Atom::Var(v) = a {
            uses(*v)
        }
    }
}

/// The variables a block reads that it does not bind itself.
pub fn free_vars_block(b: &Block) -> FxHashSet<VarId> {
    let (mut used, mut bound) = (FxHashSet::default(), FxHashSet::default());
    visit_block(
        b,
        &mut |v| {
            used.insert(v);
        },
        &mut |v| {
            bound.insert(v);
        },
    );
    used.retain(|v| !bound.contains(v));
    used
}

/// The variables a statement reads that are bound outside it.
pub fn free_vars_stmt(s: &Stmt) -> FxHashSet<VarId> {
    let (mut used, mut bound) = (FxHashSet::default(), FxHashSet::default());
    s.binds.iter().flat_map(|b| b.ty.shape.iter().flat_map(Size::vars)).for_each(|v| {
        used.insert(v);
    });
    visit_expr(
        &s.expr,
        &mut |v| {
            used.insert(v);
        },
        &mut |v| {
            bound.insert(v);
        },
    );
    used.retain(|v| !bound.contains(v));
    used
}

/// Every variable bound anywhere in a block (nested blocks included).
pub fn bound_vars_block(b: &Block) -> FxHashSet<VarId> {
    let mut bound = FxHashSet::default();
    visit_block(b, &mut |_| {}, &mut |v| {
        bound.insert(v);
    });
    bound
}

/// Copies IR with variables substituted by `map`; with `fresh`, every
/// variable the copied code binds gets a new id (recorded in `map`), so a
/// block can be emitted twice in one function (ids stay unique).
pub struct Copier<'f> {
    pub map: FxHashMap<VarId, Atom>,
    pub fresh: Option<&'f mut dyn FnMut(VarId) -> VarId>,
}

impl Copier<'_> {
    pub fn atom(&self, a: &Atom) -> Atom {
        match a {
            Atom::Var(v) => self.map.get(v).copied().unwrap_or(*a),
            Atom::Lit(_) => *a,
        }
    }

    fn atoms(&self, xs: &[Atom]) -> Vec<Atom> {
        xs.iter().map(|a| self.atom(a)).collect()
    }

    pub fn size(&self, s: &Size) -> Size {
        s.subst(&|v| match self.map.get(&v) {
            Some(Atom::Var(w)) => Size::var(*w),
            Some(Atom::Lit(Lit::I64(c))) => Size::constant(*c),
            _ => Size::var(v),
        })
    }

    pub fn ty(&self, t: &Type) -> Type {
        Type { elem: t.elem, shape: t.shape.iter().map(|s| self.size(s)).collect() }
    }

    fn var(&mut self, v: VarId) -> VarId {
        match self.fresh.as_mut() {
            Some(f) => {
                let w = f(v);
                self.map.insert(v, Atom::Var(w));
                w
            }
            None => v,
        }
    }

    fn binder(&mut self, b: &Binder) -> Binder {
        let ty = self.ty(&b.ty);
        Binder { var: self.var(b.var), ty }
    }

    fn binders(&mut self, bs: &[Binder]) -> Vec<Binder> {
        bs.iter().map(|b| self.binder(b)).collect()
    }

    fn lambda(&mut self, l: &Lambda) -> Lambda {
        let params = self.binders(&l.params);
        Lambda { params, body: self.block(&l.body) }
    }

    pub fn stmt(&mut self, s: &Stmt) -> Stmt {
        let expr = self.expr(&s.expr);
        let binds = self.binders(&s.binds);
        Stmt { binds, expr, loc: s.loc.clone() }
    }

    pub fn block(&mut self, b: &Block) -> Block {
        let stmts = b.stmts.iter().map(|s| self.stmt(s)).collect();
        Block { stmts, result: self.atoms(&b.result) }
    }

    pub fn expr(&mut self, e: &Expr) -> Expr {
        let a = |c: &Self, x: &Atom| c.atom(x);
        match e {
            Expr::Atom(x) => Expr::Atom(a(self, x)),
            Expr::Prim(p, xs) => Expr::Prim(*p, self.atoms(xs)),
            Expr::Index { arr, idx, checks } => Expr::Index { arr: a(self, arr), idx: self.atoms(idx), checks: checks.clone() },
            Expr::Slice { arr, lo, hi, check } => Expr::Slice { arr: a(self, arr), lo: a(self, lo), hi: a(self, hi), check: check.clone() },
            Expr::For { ivar, size, body } => {
                let size = self.size(size);
                let ivar = self.var(*ivar);
                Expr::For { ivar, size, body: self.block(body) }
            }
            Expr::ForAcc { ivar, size, body, acc } => {
                let size = self.size(size);
                let ivar = self.var(*ivar);
                Expr::ForAcc { ivar, size, body: self.block(body), acc: acc.clone() }
            }
            Expr::Reduce { op, ne, arrs } => Expr::Reduce { op: self.op(op), ne: self.atoms(ne), arrs: self.atoms(arrs) },
            Expr::Scan { op, ne, arrs } => Expr::Scan { op: self.op(op), ne: self.atoms(ne), arrs: self.atoms(arrs) },
            Expr::ArgExt { max, arr } => Expr::ArgExt { max: *max, arr: a(self, arr) },
            Expr::Loop { params, init, kind, body } => {
                let init = self.atoms(init);
                let params = self.binders(params);
                let kind = match kind {
                    LoopKind::Count { ivar, n, down } => {
                        let n = a(self, n);
                        LoopKind::Count { ivar: self.var(*ivar), n, down: *down }
                    }
                    LoopKind::While { cond } => LoopKind::While { cond: self.block(cond) },
                };
                Expr::Loop { params, init, kind, body: self.block(body) }
            }
            Expr::If { cond, then_b, else_b } => Expr::If { cond: a(self, cond), then_b: self.block(then_b), else_b: self.block(else_b) },
            Expr::Update { arr, idx, val, loc } => Expr::Update { arr: a(self, arr), idx: a(self, idx), val: a(self, val), loc: loc.clone() },
            Expr::ScatterAdd { dest, idxs, vals, loc } => Expr::ScatterAdd { dest: a(self, dest), idxs: a(self, idxs), vals: a(self, vals), loc: loc.clone() },
            Expr::Iota { n } => Expr::Iota { n: a(self, n) },
            Expr::Replicate { n, val } => Expr::Replicate { n: a(self, n), val: a(self, val) },
            Expr::ArrayLit(xs) => Expr::ArrayLit(self.atoms(xs)),
            Expr::Concat(x, y) => Expr::Concat(a(self, x), a(self, y)),
            Expr::Transpose(x) => Expr::Transpose(a(self, x)),
            Expr::Flatten(x) => Expr::Flatten(a(self, x)),
            Expr::Unflatten { arr, n, m } => Expr::Unflatten { arr: a(self, arr), n: a(self, n), m: a(self, m) },
            Expr::Reverse(x) => Expr::Reverse(a(self, x)),
            Expr::Rotate { k, arr } => Expr::Rotate { k: a(self, k), arr: a(self, arr) },
            Expr::Coerce { arr, loc } => Expr::Coerce { arr: a(self, arr), loc: loc.clone() },
            Expr::Fail { msg, loc } => Expr::Fail { msg: msg.clone(), loc: loc.clone() },
            Expr::StopGradient(x) => Expr::StopGradient(a(self, x)),
            Expr::Jvp { lam, primals, tangents } => {
                let (primals, tangents) = (self.atoms(primals), self.atoms(tangents));
                Expr::Jvp { lam: self.lambda(lam), primals, tangents }
            }
            Expr::Vjp { lam, primals, cotangents } => {
                let (primals, cotangents) = (self.atoms(primals), self.atoms(cotangents));
                Expr::Vjp { lam: self.lambda(lam), primals, cotangents }
            }
        }
    }

    fn op(&mut self, op: &ReduceOp) -> ReduceOp {
        match op {
            ReduceOp::Lambda(l) => ReduceOp::Lambda(self.lambda(l)),
            o => o.clone(),
        }
    }
}

/// Whether stacked result `j` of a `for` with body `body` (binder type
/// `ty`) is a row that a `for` of the body builds, or an array literal of
/// scalars: compiled code builds it in place, in its row of the result,
/// instead of copying it there (destination passing). The C backend
/// relies on this to emit the row as a view, and the interpreter's
/// operation counts to count its elements written once.
pub fn row_built_in_place(body: &Block, j: usize, ty: &Type) -> bool {
    let Atom::Var(v) = &body.result[j] else { return false };
    let builds_row = |st: &Stmt| match &st.expr {
        Expr::For { .. } => true,
        // a stacked result of an accumulating `for` (not a summed one: that is an accumulator)
        Expr::ForAcc { acc, .. } => st.binds.iter().position(|b| b.var == *v).is_some_and(|k| !acc[k]),
        Expr::ArrayLit(xs) => ty.rank() == 2 && !xs.is_empty(),
        _ => false,
    };
    ty.rank() > 1
        && body.result.iter().filter(|a| *a == &body.result[j]).count() == 1
        && body.stmts.iter().any(|st| st.binds.iter().any(|b| b.var == *v) && builds_row(st))
}

/// Whether running `s` can stop the program with an error (a checked
/// index, a failed coercion, integer division, `iota`/`replicate` of a
/// count that is not a non-negative literal...): such statements are kept
/// even when nothing reads their results.
pub fn can_fail(s: &Stmt) -> bool {
    can_fail_with(s, &|_| false)
}

/// [`can_fail`] where `nonneg(v)` says which variables are known to be
/// `>= 0` (so `iota v` cannot fail). Sizes of `for` loops are not checked
/// here (the optimiser's `Ctx::can_fail` does).
pub fn can_fail_with(s: &Stmt, nonneg: &dyn Fn(VarId) -> bool) -> bool {
    // integer division fails by zero (and i64::MIN / -1 overflows): not by
    // any other literal divisor
    let safe_divisor = |xs: &[Atom]| {
        matches!(xs.get(1), Some(Atom::Lit(Lit::I64(c))) if *c != 0 && *c != -1) || matches!(xs.get(1), Some(Atom::Lit(Lit::I32(c))) if *c != 0 && *c != -1)
    };
    let int_div = |p: &Prim, xs: &[Atom]| p.row().traps == Traps::IntZeroDivisor && s.binds.first().is_some_and(|b| b.ty.elem.is_int()) && !safe_divisor(xs);
    let block_fails = |b: &Block| b.stmts.iter().any(|s| can_fail_with(s, nonneg));
    let count_fails = |n: &Atom| match n {
        Atom::Lit(Lit::I64(c)) => *c < 0,
        Atom::Var(v) => !nonneg(*v),
        Atom::Lit(_) => true,
    };
    match &s.expr {
        Expr::Iota { n } | Expr::Replicate { n, .. } => count_fails(n),
        Expr::Index { checks, .. } => checks.iter().any(Option::is_some),
        Expr::Slice { check, .. } => check.is_some(),
        Expr::Prim(p, xs) => int_div(p, xs),
        Expr::Coerce { .. } | Expr::Fail { .. } | Expr::ScatterAdd { .. } | Expr::Update { .. } | Expr::ArgExt { .. } | Expr::Unflatten { .. } => true,
        Expr::For { body, .. } | Expr::ForAcc { body, .. } => block_fails(body),
        Expr::Loop { body, kind, .. } => block_fails(body) || matches!(kind, LoopKind::While { cond } if block_fails(cond)),
        Expr::If { then_b, else_b, .. } => block_fails(then_b) || block_fails(else_b),
        Expr::Reduce { op: ReduceOp::Lambda(l), .. } | Expr::Scan { op: ReduceOp::Lambda(l), .. } => block_fails(&l.body),
        _ => false,
    }
}

/// Remove the statements of `b` (and of its nested blocks) whose results
/// nobody reads and that cannot fail; a `for` or `if` also loses the
/// results nobody reads.
pub fn dce(b: &mut Block) {
    let mut live: FxHashSet<VarId> = b.result.iter().filter_map(var_of).collect();
    let mut kept = Vec::with_capacity(b.stmts.len());
    for mut s in std::mem::take(&mut b.stmts).into_iter().rev() {
        let any_live = s.binds.iter().any(|x| live.contains(&x.var));
        if !any_live && !can_fail(&s) {
            continue;
        }
        prune_results(&mut s, &live);
        dce_nested(&mut s.expr);
        for v in free_vars_stmt(&s) {
            live.insert(v);
        }
        kept.push(s);
    }
    kept.reverse();
    b.stmts = kept;
}

fn var_of(a: &Atom) -> Option<VarId> {
    match a {
        Atom::Var(v) => Some(*v),
        Atom::Lit(_) => None,
    }
}

/// Drop the results of a `for` or `if` that nobody reads.
fn prune_results(s: &mut Stmt, live: &FxHashSet<VarId>) {
    let keep: Vec<bool> = s.binds.iter().map(|x| live.contains(&x.var)).collect();
    if keep.iter().all(|k| *k) || !keep.iter().any(|k| *k) {
        return;
    }
    let filter = |xs: &mut Vec<Atom>| {
        let mut k = keep.iter();
        xs.retain(|_| *k.next().unwrap_or(&true));
    };
    match &mut s.expr {
        Expr::For { body, .. } => filter(&mut body.result),
        Expr::ForAcc { body, acc, .. } => {
            filter(&mut body.result);
            let mut k = keep.iter();
            acc.retain(|_| *k.next().unwrap_or(&true));
        }
        Expr::If { then_b, else_b, .. } => {
            filter(&mut then_b.result);
            filter(&mut else_b.result);
        }
        _ => return,
    }
    let mut k = keep.iter();
    s.binds.retain(|_| *k.next().unwrap_or(&true));
}

fn dce_nested(e: &mut Expr) {
    match e {
        Expr::For { body, .. } | Expr::ForAcc { body, .. } => dce(body),
        Expr::If { then_b, else_b, .. } => {
            dce(then_b);
            dce(else_b);
        }
        Expr::Loop { body, kind, .. } => {
            dce(body);
            if let LoopKind::While { cond } = kind {
                dce(cond);
            }
        }
        Expr::Reduce { op: ReduceOp::Lambda(l), .. } | Expr::Scan { op: ReduceOp::Lambda(l), .. } => dce(&mut l.body),
        _ => {}
    }
}

/// Record the type of every variable bound in `b`, nested blocks included:
/// statement binders, `for` indexes, loop parameters and counters, lambda
/// parameters.
pub fn binder_types(b: &Block, types: &mut FxHashMap<VarId, Type>) {
    for s in &b.stmts {
        stmt_types(s, types);
    }
}

/// [`binder_types`] of one statement.
pub fn stmt_types(s: &Stmt, types: &mut FxHashMap<VarId, Type>) {
    for x in &s.binds {
        types.insert(x.var, x.ty.clone());
    }
    match &s.expr {
        Expr::For { ivar, body, .. } | Expr::ForAcc { ivar, body, .. } => {
            types.insert(*ivar, Type::scalar(super::Scalar::I64));
            binder_types(body, types);
        }
        Expr::Loop { params, kind, body, .. } => {
            for p in params {
                types.insert(p.var, p.ty.clone());
            }
            match kind {
                LoopKind::Count { ivar, .. } => {
                    types.insert(*ivar, Type::scalar(super::Scalar::I64));
                }
                LoopKind::While { cond } => binder_types(cond, types),
            }
            binder_types(body, types);
        }
        Expr::If { then_b, else_b, .. } => {
            binder_types(then_b, types);
            binder_types(else_b, types);
        }
        Expr::Reduce { op: ReduceOp::Lambda(l), .. } | Expr::Scan { op: ReduceOp::Lambda(l), .. } | Expr::Jvp { lam: l, .. } | Expr::Vjp { lam: l, .. } => {
            for p in &l.params {
                types.insert(p.var, p.ty.clone());
            }
            binder_types(&l.body, types);
        }
        _ => {}
    }
}
