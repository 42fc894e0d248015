//! Generic traversals of the IR shared by the transforms: which variables an
//! expression reads and binds, copying a block with its variables
//! substituted or renamed, and removing statements nobody reads.
//!
//! Every descent into nested blocks goes through [`scopes`] /
//! [`scopes_mut`] (and [`sub_blocks`], [`sub_blocks_mut`],
//! [`try_map_sub_blocks`], [`for_each_stmt`] built on them), and every read
//! of an expression's own operands through [`for_each_operand`]. Their
//! matches list every construct, with no fallback: a new construct with a
//! body must be added there (and to [`Copier`]) to compile, and then every
//! descent sees its blocks, instead of each one skipping it silently.

use super::prim::Traps;
use super::{Atom, Binder, Block, Expr, Lambda, Lit, LoopKind, Prim, ReduceOp, Size, Stmt, Type, VarId};
use rustc_hash::{FxHashMap, FxHashSet};

/// Call `f` on every variable `s` reads (nested blocks and sizes in types included).
pub fn stmt_uses(s: &Stmt, f: &mut dyn FnMut(VarId)) {
    for b in &s.binds {
        b.ty.shape.iter().flat_map(Size::vars).for_each(&mut *f);
    }
    visit_expr(&s.expr, f, &mut |_| {});
}

/// Call `uses` on every variable `e` reads (operands and size variables in
/// types, nested blocks included) and `binds` on every variable it binds
/// inside nested blocks.
pub fn visit_expr(e: &Expr, uses: &mut dyn FnMut(VarId), binds: &mut dyn FnMut(VarId)) {
    for_each_operand(e, &mut |a| {
        if let Atom::Var(v) = a {
            uses(*v)
        }
    });
    for scope in scopes(e) {
        if let Some(i) = scope.binds.index() {
            binds(i);
        }
        if let Binds::ForBody { size, .. } = scope.binds {
            size.vars().into_iter().for_each(&mut *uses);
        }
        visit_binders(scope.binds.params(), uses, binds);
        visit_block(scope.block, uses, binds);
    }
}

/// What a construct binds for one block nested in it (see [`scopes`]).
#[derive(Clone, Copy, Debug)]
pub enum Binds<'e> {
    /// The body of a parallel `for` (accumulating or not): `ivar` runs over `0..size`.
    ForBody { ivar: VarId, size: &'e Size },
    /// The condition of a `while` loop. It reads the loop's parameters but
    /// does not own them: the body after it consumes them, so they are
    /// listed here only for who needs to know what is in scope.
    LoopCondition { params: &'e [Binder] },
    /// The body of a sequential loop: its parameters, and a counted loop's
    /// counter with its trip count.
    LoopBody { params: &'e [Binder], counter: Option<(VarId, &'e Atom)> },
    /// A branch of an `if`; it binds nothing.
    Branch,
    /// The body of a reduction's or scan's operator, run once per element.
    Operator { params: &'e [Binder] },
    /// The function a `jvp` or `vjp` differentiates, run once.
    Derivative { params: &'e [Binder] },
}

impl<'e> Binds<'e> {
    /// The `i64` index the block gets afresh at each run: a `for` index
    /// or a loop counter.
    pub fn index(&self) -> Option<VarId> {
        match self {
            Binds::ForBody { ivar, .. } | Binds::LoopBody { counter: Some((ivar, _)), .. } => Some(*ivar),
            Binds::LoopBody { counter: None, .. } | Binds::LoopCondition { .. } | Binds::Branch | Binds::Operator { .. } | Binds::Derivative { .. } => None,
        }
    }

    /// The parameters the block owns: bound afresh each time it runs, dead
    /// when it ends. A `while` condition owns none (the body does).
    pub fn params(&self) -> &'e [Binder] {
        match self {
            Binds::LoopBody { params, .. } | Binds::Operator { params } | Binds::Derivative { params } => params,
            Binds::ForBody { .. } | Binds::LoopCondition { .. } | Binds::Branch => &[],
        }
    }

    /// Whether the block may run several times per run of its statement
    /// (a loop's blocks, an operator), not at most once (a branch, a
    /// derivative's function).
    pub fn repeats(&self) -> bool {
        match self {
            Binds::ForBody { .. } | Binds::LoopCondition { .. } | Binds::LoopBody { .. } | Binds::Operator { .. } => true,
            Binds::Branch | Binds::Derivative { .. } => false,
        }
    }
}

/// A block nested directly in an expression (`B` is `&Block` or `&mut Block`)
/// with what its construct binds for it.
#[derive(Debug)]
pub struct Scope<'e, B> {
    pub block: B,
    pub binds: Binds<'e>,
}

/// The blocks of one expression: at most two (an `if`'s branches, a
/// `while` loop's condition and body).
pub type Scopes<'e, B> = std::iter::Flatten<std::array::IntoIter<Option<Scope<'e, B>>, 2>>;

fn one<'e, B>(block: B, binds: Binds<'e>) -> Scopes<'e, B> {
    [Some(Scope { block, binds }), None].into_iter().flatten()
}

fn two<'e, B>(first: Scope<'e, B>, second: Scope<'e, B>) -> Scopes<'e, B> {
    [Some(first), Some(second)].into_iter().flatten()
}

fn no_blocks<'e, B>() -> Scopes<'e, B> {
    [None, None].into_iter().flatten()
}

/// Every block nested directly in `e`, in the order they run (a `while`
/// condition before the body, `then` before `else`), with what each binds.
///
/// This and [`scopes_mut`] are where the IR's constructs are told apart by
/// whether they hold blocks; the matches list every construct, so a new
/// one with a body is a compile error here, not a block that every
/// traversal silently skips. Build descents on these.
pub fn scopes(e: &Expr) -> Scopes<'_, &Block> {
    match e {
        Expr::For { ivar, size, body } | Expr::ForAcc { ivar, size, body, .. } => one(body, Binds::ForBody { ivar: *ivar, size }),
        Expr::Loop { params, kind: LoopKind::Count { ivar, n, .. }, body, .. } => one(body, Binds::LoopBody { params, counter: Some((*ivar, n)) }),
        Expr::Loop { params, kind: LoopKind::While { cond }, body, .. } => {
            two(Scope { block: cond, binds: Binds::LoopCondition { params } }, Scope { block: body, binds: Binds::LoopBody { params, counter: None } })
        }
        Expr::If { then_b, else_b, .. } => two(Scope { block: then_b, binds: Binds::Branch }, Scope { block: else_b, binds: Binds::Branch }),
        Expr::Reduce { op, .. } | Expr::Scan { op, .. } => match op {
            ReduceOp::Lambda(l) => one(&l.body, Binds::Operator { params: &l.params }),
            ReduceOp::Add | ReduceOp::Mul | ReduceOp::Max | ReduceOp::Min => no_blocks(),
        },
        Expr::Jvp { lam, .. } | Expr::Vjp { lam, .. } => one(&lam.body, Binds::Derivative { params: &lam.params }),
        Expr::CustomJvp { primal, rule, .. } => two(
            Scope { block: &primal.body, binds: Binds::Derivative { params: &primal.params } },
            Scope { block: &rule.body, binds: Binds::Derivative { params: &rule.params } },
        ),
        Expr::Atom(_)
        | Expr::Prim(..)
        | Expr::Index { .. }
        | Expr::Slice { .. }
        | Expr::ArgExt { .. }
        | Expr::ScatterAdd { .. }
        | Expr::Update { .. }
        | Expr::Iota { .. }
        | Expr::Replicate { .. }
        | Expr::ArrayLit(_)
        | Expr::Concat(..)
        | Expr::Transpose(_)
        | Expr::Flatten(_)
        | Expr::Unflatten { .. }
        | Expr::Reverse(_)
        | Expr::Rotate { .. }
        | Expr::Coerce { .. }
        | Expr::Fail { .. }
        | Expr::StopGradient(_)
        | Expr::Trace { .. } => no_blocks(),
    }
}

/// [`scopes`] with the blocks mutable (the binders stay read-only).
pub fn scopes_mut(e: &mut Expr) -> Scopes<'_, &mut Block> {
    match e {
        Expr::For { ivar, size, body } | Expr::ForAcc { ivar, size, body, .. } => one(body, Binds::ForBody { ivar: *ivar, size }),
        Expr::Loop { params, kind: LoopKind::Count { ivar, n, .. }, body, .. } => one(body, Binds::LoopBody { params, counter: Some((*ivar, n)) }),
        Expr::Loop { params, kind: LoopKind::While { cond }, body, .. } => {
            let params: &[Binder] = params;
            two(Scope { block: cond, binds: Binds::LoopCondition { params } }, Scope { block: body, binds: Binds::LoopBody { params, counter: None } })
        }
        Expr::If { then_b, else_b, .. } => two(Scope { block: then_b, binds: Binds::Branch }, Scope { block: else_b, binds: Binds::Branch }),
        Expr::Reduce { op, .. } | Expr::Scan { op, .. } => match op {
            ReduceOp::Lambda(l) => one(&mut l.body, Binds::Operator { params: &l.params }),
            ReduceOp::Add | ReduceOp::Mul | ReduceOp::Max | ReduceOp::Min => no_blocks(),
        },
        Expr::Jvp { lam, .. } | Expr::Vjp { lam, .. } => one(&mut lam.body, Binds::Derivative { params: &lam.params }),
        Expr::CustomJvp { primal, rule, .. } => two(
            Scope { block: &mut primal.body, binds: Binds::Derivative { params: &primal.params } },
            Scope { block: &mut rule.body, binds: Binds::Derivative { params: &rule.params } },
        ),
        Expr::Atom(_)
        | Expr::Prim(..)
        | Expr::Index { .. }
        | Expr::Slice { .. }
        | Expr::ArgExt { .. }
        | Expr::ScatterAdd { .. }
        | Expr::Update { .. }
        | Expr::Iota { .. }
        | Expr::Replicate { .. }
        | Expr::ArrayLit(_)
        | Expr::Concat(..)
        | Expr::Transpose(_)
        | Expr::Flatten(_)
        | Expr::Unflatten { .. }
        | Expr::Reverse(_)
        | Expr::Rotate { .. }
        | Expr::Coerce { .. }
        | Expr::Fail { .. }
        | Expr::StopGradient(_)
        | Expr::Trace { .. } => no_blocks(),
    }
}

/// The blocks nested directly in `e` (loop bodies, a `while` condition,
/// branches, operator and derivative bodies), in the order of [`scopes`].
pub fn sub_blocks(e: &Expr) -> impl Iterator<Item = &Block> {
    scopes(e).map(|s| s.block)
}

/// [`sub_blocks`], mutable.
pub fn sub_blocks_mut(e: &mut Expr) -> impl Iterator<Item = &mut Block> {
    scopes_mut(e).map(|s| s.block)
}

/// Replace each block nested directly in `e` by `f` of it, in the order of
/// [`scopes`]; the first error stops (the blocks not yet visited stay).
pub fn try_map_sub_blocks<E>(e: &mut Expr, mut f: impl FnMut(Block) -> Result<Block, E>) -> Result<(), E> {
    for b in sub_blocks_mut(e) {
        *b = f(std::mem::take(b))?;
    }
    Ok(())
}

/// Call `f` on every statement of `b` and of the blocks nested in it,
/// each statement before the blocks it holds.
pub fn for_each_stmt<'b>(b: &'b Block, f: &mut dyn FnMut(&'b Stmt)) {
    for s in &b.stmts {
        f(s);
        for sub in sub_blocks(&s.expr) {
            for_each_stmt(sub, f);
        }
    }
}

/// Call `f` on every atom `e` reads itself: its operands, not what its
/// nested blocks read, nor the sizes in its types (a `for`'s size is in
/// [`Binds::ForBody`]).
pub fn for_each_operand(e: &Expr, f: &mut dyn FnMut(&Atom)) {
    match e {
        Expr::Atom(a) | Expr::Transpose(a) | Expr::Flatten(a) | Expr::Reverse(a) | Expr::StopGradient(a) => f(a),
        Expr::Prim(_, args) | Expr::ArrayLit(args) | Expr::Trace { args, .. } | Expr::CustomJvp { args, .. } => args.iter().for_each(f),
        Expr::Index { arr, idx, .. } => std::iter::once(arr).chain(idx).for_each(f),
        Expr::Slice { arr, lo, hi, .. } => [arr, lo, hi].into_iter().for_each(f),
        Expr::For { .. } | Expr::ForAcc { .. } | Expr::Fail { .. } => {}
        Expr::Reduce { ne, arrs, .. } | Expr::Scan { ne, arrs, .. } => ne.iter().chain(arrs).for_each(f),
        Expr::ArgExt { arr, .. } | Expr::Coerce { arr, .. } | Expr::Iota { n: arr } => f(arr),
        Expr::Loop { init, kind, .. } => {
            init.iter().for_each(&mut *f);
            match kind {
                LoopKind::Count { n, .. } => f(n),
                LoopKind::While { .. } => {}
            }
        }
        Expr::If { cond, .. } => f(cond),
        Expr::ScatterAdd { dest, idxs, vals, .. } => [dest, idxs, vals].into_iter().for_each(f),
        Expr::Update { arr, idx, val, .. } => [arr, idx, val].into_iter().for_each(f),
        Expr::Replicate { n, val } => [n, val].into_iter().for_each(f),
        Expr::Concat(a, b) => [a, b].into_iter().for_each(f),
        Expr::Unflatten { arr, n, m } => [arr, n, m].into_iter().for_each(f),
        Expr::Rotate { k, arr } => [k, arr].into_iter().for_each(f),
        Expr::Jvp { primals, tangents: others, .. } | Expr::Vjp { primals, cotangents: others, .. } => primals.iter().chain(others).for_each(f),
    }
}

fn visit_binders(bs: &[Binder], uses: &mut dyn FnMut(VarId), binds: &mut dyn FnMut(VarId)) {
    for b in bs {
        binds(b.var);
        b.ty.shape.iter().flat_map(Size::vars).for_each(&mut *uses);
    }
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
            Expr::Trace { label, args } => Expr::Trace { label: label.clone(), args: self.atoms(args) },
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
            Expr::CustomJvp { primal, rule, args } => {
                let args = self.atoms(args);
                Expr::CustomJvp { primal: self.lambda(primal), rule: self.lambda(rule), args }
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
/// count that is not a non-negative literal...) or has another effect
/// (`trace` prints): such statements are kept even when nothing reads
/// their results, and the optimiser neither duplicates nor hoists them.
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
    let block_fails = |b: &Block| b.stmts.iter().enumerate().any(|(k, s)| can_fail_with(s, nonneg) && !update_read_before(&b.stmts[..k], s));
    let count_fails = |n: &Atom| match n {
        Atom::Lit(Lit::I64(c)) => *c < 0,
        Atom::Var(v) => !nonneg(*v),
        Atom::Lit(_) => true,
    };
    match &s.expr {
        Expr::Iota { n } | Expr::Replicate { n, .. } => count_fails(n),
        Expr::Index { checks, .. } => checks.iter().any(Option::is_some),
        Expr::Slice { check, .. } => check.is_some(),
        Expr::Prim(p, xs) => int_div(p, xs) || p.row().traps == Traps::SizeOverflow,
        Expr::Coerce { .. } | Expr::Fail { .. } | Expr::ScatterAdd { .. } | Expr::Update { .. } | Expr::ArgExt { .. } | Expr::Unflatten { .. } => true,
        // printing is an effect: kept, never duplicated or hoisted, like a check
        Expr::Trace { .. } => true,
        // the rest fails only where a statement nested in it does
        e => sub_blocks(e).any(block_fails),
    }
}

/// Whether `s` is an `update a[p] = v` that one of the statements `before`
/// (earlier in its block) proved in range by reading `a[p]` unchecked:
/// reverse mode's in-place addition `let o = a[p]; a with [p] = o + v`.
pub fn update_read_before(before: &[Stmt], s: &Stmt) -> bool {
    let Expr::Update { arr: Atom::Var(a), idx, .. } = &s.expr else { return false };
    before.iter().any(|st| {
        matches!(&st.expr, Expr::Index { arr: Atom::Var(x), idx: i, checks } if x == a && i.first() == Some(idx) && checks.first().is_some_and(Option::is_none))
    })
}

/// Replace every `trace` in `b` (nested blocks too) by copies of its
/// operands: the program computes the same and prints nothing.
pub fn remove_traces(b: &mut Block) {
    let mut out = Vec::with_capacity(b.stmts.len());
    for mut s in std::mem::take(&mut b.stmts) {
        sub_blocks_mut(&mut s.expr).for_each(remove_traces);
        match s.expr {
            Expr::Trace { args, .. } => {
                for (x, a) in s.binds.into_iter().zip(args) {
                    out.push(Stmt { binds: vec![x], expr: Expr::Atom(a), loc: s.loc.clone() });
                }
            }
            _ => out.push(s),
        }
    }
    b.stmts = out;
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
    for b in sub_blocks_mut(e) {
        dce(b);
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
    for scope in scopes(&s.expr) {
        if let Some(i) = scope.binds.index() {
            types.insert(i, Type::scalar(super::Scalar::I64));
        }
        for p in scope.binds.params() {
            types.insert(p.var, p.ty.clone());
        }
        binder_types(scope.block, types);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Loc, Scalar};

    fn v(k: u32) -> VarId {
        VarId(k)
    }

    fn f64_binder(k: u32) -> Binder {
        Binder { var: v(k), ty: Type::scalar(Scalar::F64) }
    }

    /// A block told apart from the others by its result, the literal `k`.
    fn marked(k: i64) -> Block {
        Block { stmts: vec![], result: vec![Atom::Lit(Lit::I64(k))] }
    }

    fn marker(b: &Block) -> i64 {
        match b.result.as_slice() {
            [Atom::Lit(Lit::I64(k))] => *k,
            r => panic!("not a marked block: {r:?}"),
        }
    }

    fn lambda(params: &[u32], body: Block) -> Lambda {
        Lambda { params: params.iter().map(|k| f64_binder(*k)).collect(), body }
    }

    fn loc() -> Loc {
        Loc { file: "t.ard".into(), line: 1, col: 1 }
    }

    /// One expression of every construct that holds blocks, the blocks
    /// marked 1 to 11 in the order they run.
    fn with_blocks() -> Vec<Expr> {
        let x = Atom::Var(v(0));
        let one = Atom::Lit(Lit::F64(1.0));
        vec![
            Expr::For { ivar: v(1), size: Size::constant(3), body: marked(1) },
            Expr::ForAcc { ivar: v(2), size: Size::var(v(0)), body: marked(2), acc: vec![true] },
            Expr::Reduce { op: ReduceOp::Lambda(lambda(&[3, 4], marked(3))), ne: vec![one], arrs: vec![x] },
            Expr::Scan { op: ReduceOp::Lambda(lambda(&[3, 4], marked(4))), ne: vec![one], arrs: vec![x] },
            Expr::Loop { params: vec![f64_binder(5)], init: vec![one], kind: LoopKind::Count { ivar: v(6), n: x, down: false }, body: marked(5) },
            Expr::Loop { params: vec![f64_binder(7)], init: vec![one], kind: LoopKind::While { cond: marked(6) }, body: marked(7) },
            Expr::If { cond: x, then_b: marked(8), else_b: marked(9) },
            Expr::Jvp { lam: lambda(&[8], marked(10)), primals: vec![x], tangents: vec![one] },
            Expr::Vjp { lam: lambda(&[9], marked(11)), primals: vec![x], cotangents: vec![one] },
        ]
    }

    /// One expression of every construct without blocks.
    fn without_blocks() -> Vec<Expr> {
        let (x, i) = (Atom::Var(v(0)), Atom::Lit(Lit::I64(0)));
        vec![
            Expr::Atom(x),
            Expr::Prim(Prim::Neg, vec![x]),
            Expr::Index { arr: x, idx: vec![i], checks: vec![None] },
            Expr::Slice { arr: x, lo: i, hi: i, check: None },
            Expr::Reduce { op: ReduceOp::Add, ne: vec![i], arrs: vec![x] },
            Expr::Scan { op: ReduceOp::Max, ne: vec![i], arrs: vec![x] },
            Expr::ArgExt { max: true, arr: x },
            Expr::ScatterAdd { dest: x, idxs: x, vals: x, loc: loc() },
            Expr::Update { arr: x, idx: i, val: x, loc: loc() },
            Expr::Iota { n: x },
            Expr::Replicate { n: i, val: x },
            Expr::ArrayLit(vec![x, x]),
            Expr::Concat(x, x),
            Expr::Transpose(x),
            Expr::Flatten(x),
            Expr::Unflatten { arr: x, n: i, m: i },
            Expr::Reverse(x),
            Expr::Rotate { k: i, arr: x },
            Expr::Coerce { arr: x, loc: loc() },
            Expr::Fail { msg: "no".into(), loc: loc() },
            Expr::StopGradient(x),
        ]
    }

    fn stmt(expr: Expr) -> Stmt {
        Stmt { binds: vec![], expr, loc: None }
    }

    #[test]
    fn sub_blocks_finds_every_nested_block_in_order() {
        let found: Vec<i64> = with_blocks().iter().flat_map(|e| sub_blocks(e).map(marker).collect::<Vec<_>>()).collect();
        assert_eq!(found, (1..=11).collect::<Vec<_>>());
        for e in without_blocks() {
            assert_eq!(sub_blocks(&e).count(), 0, "{e:?}");
        }
    }

    #[test]
    fn mutable_and_immutable_traversals_agree() {
        for mut e in with_blocks().into_iter().chain(without_blocks()) {
            let read: Vec<(*const Block, Option<VarId>, Vec<Binder>, bool)> =
                scopes(&e).map(|s| (s.block as *const Block, s.binds.index(), s.binds.params().to_vec(), s.binds.repeats())).collect();
            let written: Vec<(*const Block, Option<VarId>, Vec<Binder>, bool)> =
                scopes_mut(&mut e).map(|s| (s.block as *const Block, s.binds.index(), s.binds.params().to_vec(), s.binds.repeats())).collect();
            assert_eq!(read, written, "{e:?}");
            let mut seen = vec![];
            try_map_sub_blocks(&mut e, |b| {
                seen.push(marker(&b));
                Ok::<_, ()>(marked(-marker(&b)))
            })
            .expect("no error");
            assert_eq!(sub_blocks(&e).map(|b| -marker(b)).collect::<Vec<_>>(), seen);
        }
    }

    #[test]
    fn scopes_say_what_each_block_binds() {
        let binds: Vec<(Option<VarId>, Vec<VarId>, bool)> = with_blocks()
            .iter()
            .flat_map(|e| scopes(e).map(|s| (s.binds.index(), s.binds.params().iter().map(|p| p.var).collect(), s.binds.repeats())).collect::<Vec<_>>())
            .collect();
        let expected = vec![
            (Some(v(1)), vec![], true),
            (Some(v(2)), vec![], true),
            (None, vec![v(3), v(4)], true),
            (None, vec![v(3), v(4)], true),
            (Some(v(6)), vec![v(5)], true),
            // the condition reads the parameters the body owns
            (None, vec![], true),
            (None, vec![v(7)], true),
            (None, vec![], false),
            (None, vec![], false),
            (None, vec![v(8)], false),
            (None, vec![v(9)], false),
        ];
        assert_eq!(binds, expected);
        let cond = &with_blocks()[5];
        assert!(matches!(scopes(cond).next().map(|s| s.binds), Some(Binds::LoopCondition { params }) if params == [f64_binder(7)]));
    }

    #[test]
    fn try_map_sub_blocks_stops_at_the_first_error() {
        let mut e = with_blocks().remove(5);
        let r = try_map_sub_blocks(&mut e, |b| if marker(&b) == 6 { Err("condition") } else { Ok(b) });
        assert_eq!(r, Err("condition"));
        assert_eq!(sub_blocks(&e).map(|b| b.result.len()).collect::<Vec<_>>(), vec![0, 1], "the failed block was taken, the body left as it was");
    }

    /// Every construct, each block holding the next construct: every
    /// statement is visited once, and every binder is seen.
    #[test]
    fn recursive_visitors_reach_every_nested_statement() {
        let mut inner = Block { stmts: without_blocks().into_iter().map(stmt).collect(), result: vec![] };
        for mut e in with_blocks().into_iter().rev() {
            for b in sub_blocks_mut(&mut e) {
                *b = inner.clone();
            }
            inner = Block { stmts: vec![stmt(e)], result: vec![] };
        }
        let count = |b: &Block| {
            let mut n = 0;
            for_each_stmt(b, &mut |_| n += 1);
            n
        };
        // six constructs once, the `if` in both blocks of the `while`, and
        // what is under it in both branches of each `if`
        assert_eq!(count(&inner), 6 + 2 + 4 * (2 + without_blocks().len()));
        assert_eq!(bound_vars_block(&inner), (1..=9).map(v).collect(), "every index and parameter is bound");
        assert_eq!(free_vars_block(&inner), [v(0)].into_iter().collect(), "only the operand `x` is read from outside");
        // a copy with fresh variables renames every binder
        let mut fresh = |w: VarId| VarId(w.0 + 100);
        let copy = Copier { map: FxHashMap::default(), fresh: Some(&mut fresh) }.block(&inner);
        assert_eq!(count(&copy), count(&inner));
        assert_eq!(bound_vars_block(&copy), (101..=109).map(v).collect());
        assert_eq!(free_vars_block(&copy), [v(0)].into_iter().collect());
    }

    #[test]
    fn dce_reaches_every_nested_block() {
        let dead = Stmt { binds: vec![f64_binder(50)], expr: Expr::Atom(Atom::Var(v(0))), loc: None };
        for mut e in with_blocks() {
            for b in sub_blocks_mut(&mut e) {
                b.stmts.push(dead.clone());
            }
            dce_nested(&mut e);
            assert!(sub_blocks(&e).all(|b| b.stmts.is_empty()), "{e:?}");
        }
    }
}
