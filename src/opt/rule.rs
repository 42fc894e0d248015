//! What a rule is and what it may ask about its surroundings.
//!
//! A rule looks at one statement (or at the result atoms of one block) and
//! either returns its replacement or fails (`None`). Contract, checked by
//! `tests/opt.rs` and the verifier after every rewrite in tests: the
//! replacement binds every variable of the original statement that is still
//! used, with the same types, and computes the same values (bit for bit,
//! unless the rule's doc says otherwise); it never turns a program that
//! fails into one that succeeds, or the reverse.

use crate::ir::{Atom, Binder, Block, Expr, Lit, Scalar, Size, Stmt, Type, VarId};
use rustc_hash::{FxHashMap, FxHashSet};

/// A rewrite of one statement: its replacement (empty to delete it).
pub type StmtFn = fn(&Stmt, &mut Ctx) -> Option<Vec<Stmt>>;
/// A rewrite of a block's result atoms, given the block.
pub type ResultFn = fn(&Block, &mut Ctx) -> Option<Vec<Atom>>;
/// A rewrite of a block's statement list, given the block: the new
/// statements (the results stay). For rewrites of several statements at
/// once (horizontal fusion, pushing a statement into an earlier `if`); the
/// scope holds every statement of the block.
pub type StmtsFn = fn(&Block, &mut Ctx) -> Option<Vec<Stmt>>;

/// A named rewrite rule.
#[derive(Clone, Copy)]
pub struct Rule {
    /// The name schedules use.
    pub name: &'static str,
    /// One line: what it rewrites into what, and when.
    pub doc: &'static str,
    /// The rewrite at a statement, if the rule applies to statements.
    pub stmt: Option<StmtFn>,
    /// The rewrite of a block's results, if the rule applies to blocks.
    pub block: Option<ResultFn>,
    /// The rewrite of a block's statements, if the rule applies to blocks.
    pub stmts: Option<StmtsFn>,
}

impl Rule {
    pub const fn on_stmt(name: &'static str, doc: &'static str, f: StmtFn) -> Rule {
        Rule { name, doc, stmt: Some(f), block: None, stmts: None }
    }

    pub const fn on_block_stmts(name: &'static str, doc: &'static str, f: StmtsFn) -> Rule {
        Rule { name, doc, stmt: None, block: None, stmts: Some(f) }
    }
}

/// What the block around a position binds besides its statements.
#[derive(Clone, Debug, Default)]
pub struct BlockInfo {
    /// Parameters: a function's parameters and sizes, loop parameters, a
    /// reduction lambda's parameters.
    pub params: Vec<Binder>,
    /// The index of a counted loop with its trip count: the index lies in
    /// `0 .. size`.
    pub index: Option<(VarId, Size)>,
    /// Whether the block runs more than once per run of its parent (loop
    /// bodies, `while` conditions, reduction lambdas).
    pub repeats: bool,
    /// Whether the block is the body of a parallel `for` (the C backend
    /// runs every loop nested in one sequentially).
    pub parallel: bool,
}

/// The statements before a position in one block, and the enclosing scopes.
pub struct Scope<'a> {
    pub stmts: &'a [Stmt],
    /// binder → index in `stmts`
    pub index: &'a FxHashMap<VarId, usize>,
    /// structural key of an expression → the binders of the first statement
    /// computing it (for `cse`)
    pub avail: &'a FxHashMap<String, usize>,
    pub info: &'a BlockInfo,
    pub parent: Option<&'a Scope<'a>>,
}

impl<'a> Scope<'a> {
    fn find(&self, v: VarId) -> Option<(&'a Stmt, usize)> {
        let mut s = Some(self);
        let mut depth = 0;
        while let Some(sc) = s {
            if let Some(&k) = sc.index.get(&v) {
                return Some((&sc.stmts[k], depth));
            }
            if sc.info.repeats {
                depth += 1;
            }
            s = sc.parent;
        }
        None
    }
}

/// Mutable state of one optimisation run shared by all rules.
#[derive(Default)]
pub struct State {
    /// variable names of the function (fresh variables are appended)
    pub names: Vec<String>,
    /// how many times each variable is read (operands, results, sizes)
    pub uses: FxHashMap<VarId, u32>,
    /// arrays and scalars whose zeros are structural: one-hot seeds of
    /// `jacfwd`/`jacrev` and what fusion copied out of them
    pub onehot: FxHashSet<VarId>,
    /// whether `cse` needs the table of available expressions
    pub want_cse: bool,
    /// variables known to be >= 0: the function's size parameters
    pub nonneg: FxHashSet<VarId>,
    /// sizes known to be >= 0: the axes of the function's array
    /// parameters (a call checks its arguments' shapes against them), such
    /// as GMM's `(d*d - d)/2`, which no sign rule proves
    pub nonneg_sizes: Vec<crate::ir::Size>,
    /// sizes a call evaluates (with overflow checks, `Size::eval`) before
    /// the body runs: the axes of the array parameters and the operands
    /// of the divisions in them. A product of sizes that is a leading part
    /// of one of their terms cannot overflow ([`Ctx::size_product_checked`]).
    pub entry_sizes: Vec<crate::ir::Size>,
}

/// What a rule sees: the scope at its position and the run's state.
pub struct Ctx<'a, 'b> {
    pub scope: &'a Scope<'a>,
    pub st: &'b mut State,
}

impl Ctx<'_, '_> {
    /// The statement in scope that binds `v` (not for parameters).
    pub fn def(&self, v: VarId) -> Option<&Stmt> {
        self.scope.find(v).map(|(s, _)| s)
    }

    /// The expression bound to atom `a` when `a` is a variable bound by a
    /// one-result statement in scope.
    pub fn def_expr(&self, a: &Atom) -> Option<&Expr> {
        match a {
            Atom::Var(v) => self.def(*v).map(|s| &s.expr),
            Atom::Lit(_) => None,
        }
    }

    /// How many loop bodies lie between the position and the definition of
    /// `v` (0: the position runs once per run of the definition).
    pub fn loop_depth_to(&self, v: VarId) -> Option<usize> {
        self.scope.find(v).map(|(_, d)| d)
    }

    /// Whether the position is inside the body of a `for` (at any depth),
    /// where the C backend runs every loop sequentially.
    pub fn in_parallel_loop(&self) -> bool {
        self.parallel_from(Some(self.scope))
    }

    /// Whether the statement binding `v` (in scope) is inside the body of
    /// a `for`.
    pub fn defined_in_parallel_loop(&self, v: VarId) -> bool {
        let mut s = Some(self.scope);
        while let Some(sc) = s {
            if sc.index.contains_key(&v) {
                return self.parallel_from(Some(sc));
            }
            s = sc.parent;
        }
        false
    }

    fn parallel_from(&self, mut s: Option<&Scope<'_>>) -> bool {
        while let Some(sc) = s {
            if sc.info.parallel {
                return true;
            }
            s = sc.parent;
        }
        false
    }

    /// Whether the position is inside some loop (its block repeats).
    pub fn scope_repeats(&self) -> bool {
        let mut s = Some(self.scope);
        while let Some(sc) = s {
            if sc.info.repeats {
                return true;
            }
            s = sc.parent;
        }
        false
    }

    /// The index and trip count of the innermost loop around the position.
    pub fn innermost_loop(&self) -> Option<(VarId, &Size)> {
        let mut s = Some(self.scope);
        while let Some(sc) = s {
            if sc.info.repeats {
                return sc.info.index.as_ref().map(|(i, n)| (*i, n));
            }
            s = sc.parent;
        }
        None
    }

    /// The indices and trip counts of the counted loops around the
    /// position, innermost first, up to `k` of them (a loop without an
    /// index, such as a reduction operator, ends the list).
    pub fn loops_around(&self, k: usize) -> Vec<(VarId, &Size)> {
        let mut out = vec![];
        let mut s = Some(self.scope);
        while let Some(sc) = s
            && out.len() < k
        {
            if sc.info.repeats {
                match &sc.info.index {
                    Some((i, n)) => out.push((*i, n)),
                    None => break,
                }
            }
            s = sc.parent;
        }
        out
    }

    /// Whether `v` is bound outside the innermost loop around the position
    /// (so it has one value for all of that loop's iterations).
    pub fn outside_innermost_loop(&self, v: VarId) -> bool {
        let mut s = Some(self.scope);
        let mut crossed = false;
        while let Some(sc) = s {
            let here = sc.index.contains_key(&v) || sc.info.params.iter().any(|b| b.var == v) || sc.info.index.as_ref().is_some_and(|(i, _)| *i == v);
            if here {
                return crossed;
            }
            crossed |= sc.info.repeats;
            s = sc.parent;
        }
        false
    }

    /// How many times `v` is read in the whole function.
    pub fn uses(&self, v: VarId) -> u32 {
        self.st.uses.get(&v).copied().unwrap_or(0)
    }

    /// A new variable named after `hint`.
    pub fn fresh(&mut self, hint: &str) -> VarId {
        VarId::fresh(&mut self.st.names, hint)
    }

    /// A new variable named like `v`.
    pub fn fresh_like(&mut self, v: VarId) -> VarId {
        let hint = self.st.names.get(v.0 as usize).cloned().unwrap_or_default();
        self.fresh(&hint)
    }

    /// The type of an atom in scope.
    pub fn type_of(&self, a: &Atom) -> Option<Type> {
        match a {
            Atom::Lit(l) => Some(Type::scalar(l.scalar())),
            Atom::Var(v) => self.type_of_var(*v),
        }
    }

    fn type_of_var(&self, v: VarId) -> Option<Type> {
        let mut s = Some(self.scope);
        while let Some(sc) = s {
            if let Some(&k) = sc.index.get(&v) {
                return sc.stmts[k].binds.iter().find(|b| b.var == v).map(|b| b.ty.clone());
            }
            if let Some(b) = sc.info.params.iter().find(|b| b.var == v) {
                return Some(b.ty.clone());
            }
            if sc.info.index.as_ref().is_some_and(|(i, _)| *i == v) {
                return Some(Type::scalar(Scalar::I64));
            }
            s = sc.parent;
        }
        None
    }

    /// The trip count of the loop whose index is `v`.
    pub fn index_range(&self, v: VarId) -> Option<&Size> {
        let mut s = Some(self.scope);
        while let Some(sc) = s {
            if let Some((i, n)) = &sc.info.index
                && *i == v
            {
                return Some(n);
            }
            s = sc.parent;
        }
        None
    }

    /// Whether `0 <= a < n` holds for every run of the position.
    pub fn provably_below(&self, a: &Atom, n: &Size) -> bool {
        match a {
            Atom::Lit(Lit::I64(c)) => *c >= 0 && n.as_const().is_some_and(|m| *c < m),
            Atom::Var(v) => self.index_range(*v).is_some_and(|r| r == n),
            _ => false,
        }
    }

    /// Whether a `for` of this size ran before the position (an earlier
    /// statement of this block or of an enclosing one): the size is then
    /// not negative (reverse mode's loop over the same range as the primal
    /// loop before it).
    pub fn size_ran(&self, size: &crate::ir::Size) -> bool {
        self.available(&super::engine::ran_key(size)).is_some()
    }

    /// [`Ctx::can_fail`] of `def`, a statement before the position, for a
    /// rewrite that copies it and drops it: its own run does not count as
    /// the evidence that its size is non-negative (from a later position
    /// the `for` that ran over the size may be `def` itself; `dce` then keeps
    /// `def`, and the copy computes it twice).
    pub fn def_can_fail(&self, def: &Stmt) -> bool {
        if self.can_fail(def) {
            return true;
        }
        match &def.expr {
            Expr::For { size, .. } | Expr::ForAcc { size, .. } => {
                !self.size_nonneg(size) && self.available(&super::engine::ran_key(size)).is_some_and(|st| st.binds == def.binds)
            }
            _ => false,
        }
    }

    /// Whether `size` is provably `>= 0` from what is known of its
    /// variables (size parameters, loop indices, axes of parameters), not
    /// from a `for` of that size having run.
    pub fn size_nonneg(&self, size: &crate::ir::Size) -> bool {
        size.provably_nonneg(&|v| self.nonneg(v, &[])) || self.st.nonneg_sizes.contains(size)
    }

    /// The earlier statement in scope computing the same as `key`.
    pub fn available(&self, key: &str) -> Option<&Stmt> {
        let mut s = Some(self.scope);
        while let Some(sc) = s {
            if let Some(&k) = sc.avail.get(key) {
                return Some(&sc.stmts[k]);
            }
            s = sc.parent;
        }
        None
    }

    /// Whether running `s` can stop the program with an error: what
    /// `walk::can_fail` says, and also a size (`iota`, `replicate`, `for`)
    /// that might be negative. A rule must not remove, skip or newly run
    /// such a statement.
    pub fn can_fail(&self, s: &Stmt) -> bool {
        if let Expr::Unflatten { arr, n, m } = &s.expr {
            return !self.unflatten_exact(s, arr, n, m);
        }
        let mut inner = vec![];
        let walk_fails = crate::ir::walk::can_fail_with(s, &|v| self.nonneg(v, &[]));
        (walk_fails && self.fails_unguarded(s, &mut FxHashMap::default(), &mut vec![])) || self.negative_size_possible(s, &mut inner)
    }

    /// Whether any of `stmts` (a block's statements, in order) can fail,
    /// as [`Ctx::can_fail`] says, with the definitions of the earlier ones
    /// in view (a guard `n > 0` bound in the block).
    pub fn stmts_can_fail(&self, stmts: &[Stmt]) -> bool {
        self.failing_stmts(stmts).iter().any(|f| *f)
    }

    /// For each of `stmts` (a block's statements, in order), whether it
    /// can fail, as for [`Ctx::stmts_can_fail`].
    pub fn failing_stmts(&self, stmts: &[Stmt]) -> Vec<bool> {
        let mut local = FxHashMap::default();
        stmts
            .iter()
            .map(|s| {
                let mut inner = vec![];
                let walk_fails = crate::ir::walk::can_fail_with(s, &|v| self.nonneg(v, &[]));
                let bad = (walk_fails && self.fails_unguarded(s, &mut local, &mut vec![])) || self.negative_size_possible(s, &mut inner);
                let expr = (s.binds.len() == 1 && matches!(s.expr, Expr::Prim(..))).then(|| s.expr.clone());
                for x in &s.binds {
                    local.insert(x.var, (x.ty.clone(), expr.clone()));
                }
                bad
            })
            .collect()
    }

    /// `walk::can_fail` of `s`, except that `argmax a`/`argmin a` cannot
    /// fail inside the `then` branch of `if n > 0` (or `0 < n`) where `a`'s
    /// length is `n` (how reverse mode guards the derivative of `maximum`).
    /// `local` holds the definitions and types met in the enclosing
    /// blocks walked so far, `positive` the lengths known to be `> 0`.
    fn fails_unguarded(&self, s: &Stmt, local: &mut FxHashMap<VarId, (Type, Option<Expr>)>, positive: &mut Vec<Size>) -> bool {
        use crate::ir::{Prim, walk};
        let block = |b: &Block, local: &mut FxHashMap<VarId, (Type, Option<Expr>)>, positive: &mut Vec<Size>| {
            b.stmts.iter().enumerate().any(|(k, st)| {
                let bad = self.fails_unguarded(st, local, positive) && !walk::update_read_before(&b.stmts[..k], st);
                let expr = (st.binds.len() == 1 && matches!(st.expr, Expr::Prim(..))).then(|| st.expr.clone());
                for x in &st.binds {
                    local.insert(x.var, (x.ty.clone(), expr.clone()));
                }
                bad
            })
        };
        match &s.expr {
            Expr::Prim(Prim::SizeMul, xs) if xs.len() == 2 => !self.size_product_checked(&xs[0], &xs[1]),
            Expr::ArgExt { arr, .. } => {
                let ty = match arr {
                    Atom::Var(v) => local.get(v).map(|(t, _)| t.clone()).or_else(|| self.type_of(arr)),
                    Atom::Lit(_) => None,
                };
                !ty.is_some_and(|t| t.shape.first().is_some_and(|n| positive.contains(n)))
            }
            Expr::If { cond: Atom::Var(c), then_b, else_b } => {
                let def = local.get(c).and_then(|(_, e)| e.clone()).or_else(|| self.def(*c).map(|st| st.expr.clone()));
                let zero = |a: &Atom| matches!(a, Atom::Lit(Lit::I64(0)));
                let n = match def {
                    Some(Expr::Prim(Prim::Gt, xs)) if zero(&xs[1]) => Size::of_atom(&xs[0]),
                    Some(Expr::Prim(Prim::Lt, xs)) if zero(&xs[0]) => Size::of_atom(&xs[1]),
                    _ => None,
                };
                let pushed = n.map(|n| positive.push(n)).is_some();
                let then_fails = block(then_b, local, positive);
                if pushed {
                    positive.pop();
                }
                then_fails || block(else_b, local, positive)
            }
            Expr::Coerce { .. } | Expr::Fail { .. } | Expr::ScatterAdd { .. } | Expr::Update { .. } | Expr::Unflatten { .. } => true,
            e if walk::sub_blocks(e).next().is_some() => {
                let mut any = false;
                for b in walk::sub_blocks(e) {
                    any |= block(b, local, positive);
                }
                any
            }
            _ => walk::can_fail_with(s, &|v| self.nonneg(v, &[])),
        }
    }

    /// Whether `unflatten n m arr` (bound by `s`) cannot fail: `n` and `m`
    /// are provably non-negative and the operand's size is `n * m` as a
    /// polynomial, `n` and `m` read through their definitions (a stack's
    /// `size_mul n trips`). (Sizes are computed with overflow checks, so
    /// an operand of size `n * m` exists only where `n * m` fits, or `m`
    /// is 0 and the check passes anyway.)
    fn unflatten_exact(&self, s: &Stmt, arr: &Atom, n: &Atom, m: &Atom) -> bool {
        let nonneg = |a: &Atom| match a {
            Atom::Lit(Lit::I64(c)) => *c >= 0,
            Atom::Var(v) => self.nonneg(*v, &[]),
            _ => false,
        };
        let (Some(b), Some(t)) = (s.binds.first(), self.type_of(arr)) else { return false };
        if !(nonneg(n) && nonneg(m) && b.ty.shape.len() >= 2) {
            return false;
        }
        let same = |a: &Atom, axis: &Size| Size::of_atom(a).as_ref() == Some(axis) || self.int_polynomial(a, 8, true).as_ref() == Some(axis);
        let (ns, ms) = (&b.ty.shape[0], &b.ty.shape[1]);
        same(n, ns) && same(m, ms) && t.shape.first() == Some(&ns.mul(ms))
    }

    /// Whether integer `v` is never negative where it is in scope (a size,
    /// a loop index, a clamped count).
    pub fn is_nonneg(&self, v: VarId) -> bool {
        self.nonneg(v, &[])
    }

    fn nonneg(&self, v: VarId, inner: &[VarId]) -> bool {
        self.st.nonneg.contains(&v)
            || inner.contains(&v)
            || self.index_range(v).is_some()
            || self.clamped_at_zero(v)
            || self.size_product_of_nonneg(v, inner)
            || self.an_axis_of_a_parameter(v)
            || self.a_size_that_ran(v)
    }

    /// Whether integer `v` computes the size of a `for` that ran before
    /// the position ([`Ctx::size_ran`]).
    fn a_size_that_ran(&self, v: VarId) -> bool {
        self.int_as_size(&Atom::Var(v), 8).is_some_and(|s| self.size_ran(&s))
    }

    /// Whether integer `v` computes (as a polynomial of the size
    /// parameters) an axis of an array parameter: an axis is never negative.
    fn an_axis_of_a_parameter(&self, v: VarId) -> bool {
        !self.st.nonneg_sizes.is_empty() && self.int_as_size(&Atom::Var(v), 8).is_some_and(|s| self.st.nonneg_sizes.contains(&s))
    }

    /// The size an integer atom computes from the size parameters with
    /// `+`, `-`, `*` and `/` (truncating, as `Size::div`), looking through
    /// at most `depth` definitions.
    fn int_as_size(&self, a: &Atom, depth: usize) -> Option<crate::ir::Size> {
        self.int_polynomial(a, depth, false)
    }

    /// [`Ctx::int_as_size`], where `opaque` also lets any other integer
    /// variable be a variable of the polynomial (a trip count `max n 0`).
    fn int_polynomial(&self, a: &Atom, depth: usize, opaque: bool) -> Option<crate::ir::Size> {
        use crate::ir::{Prim, Size};
        match a {
            Atom::Lit(Lit::I64(c)) => Some(Size::constant(*c)),
            Atom::Var(v) if self.st.nonneg.contains(v) => Some(Size::var(*v)),
            Atom::Var(v) if depth > 0 => match self.def(*v).map(|s| &s.expr) {
                Some(Expr::Atom(x)) => self.int_polynomial(x, depth - 1, opaque),
                Some(Expr::Prim(p @ (Prim::Add | Prim::Sub | Prim::Mul | Prim::SizeMul | Prim::Div), xs)) if xs.len() == 2 => {
                    let (x, y) = (self.int_polynomial(&xs[0], depth - 1, opaque)?, self.int_polynomial(&xs[1], depth - 1, opaque)?);
                    Some(match p {
                        Prim::Add => x.add(&y),
                        Prim::Sub => x.sub(&y),
                        Prim::Mul | Prim::SizeMul => x.mul(&y),
                        _ => x.div(&y),
                    })
                }
                _ => opaque.then(|| Size::var(*v)),
            },
            _ => None,
        }
    }

    /// Whether `size_mul x y` cannot overflow: its product is (as a
    /// polynomial) a leading part of a term of a size the call evaluated
    /// before the body ran, times 1 or times the whole term's coefficient:
    /// `Size::materialize` multiplies a term's variables in the order
    /// `Size::eval` does, the coefficient last, and a leading part of a
    /// product that fit fits (the sizes are never negative; a zero factor
    /// makes every later part zero). GMM's `d*d` of `(d*d - d)/2`.
    fn size_product_checked(&self, x: &Atom, y: &Atom) -> bool {
        let (Some(a), Some(b)) = (self.int_as_size(x, 8), self.int_as_size(y, 8)) else { return false };
        let p = a.mul(&b);
        let mut terms = p.terms();
        let (Some((mono, c)), None) = (terms.next(), terms.next()) else { return false };
        self.st.entry_sizes.iter().flat_map(|s| s.terms()).any(|(t, ct)| t.starts_with(mono) && (c == 1 || (c == ct && t.len() == mono.len())))
    }

    /// Whether `v` is bound to `size_mul a b` with `a` and `b` never
    /// negative: a checked product, so never negative either (a stack of
    /// saved states, `n * m * trips`).
    fn size_product_of_nonneg(&self, v: VarId, inner: &[VarId]) -> bool {
        let nonneg = |a: &Atom| match a {
            Atom::Lit(Lit::I64(c)) => *c >= 0,
            Atom::Var(x) => self.nonneg(*x, inner),
            _ => false,
        };
        matches!(self.def(v).map(|s| &s.expr), Some(Expr::Prim(crate::ir::Prim::SizeMul, xs)) if xs.iter().all(nonneg))
    }

    /// Whether `v` is bound to `max a c` (or `max c a`) with a literal
    /// `c >= 0`: reverse mode's trip count of a counted loop, `max n 0`.
    fn clamped_at_zero(&self, v: VarId) -> bool {
        let nonneg_lit = |a: &Atom| matches!(a, Atom::Lit(Lit::I64(c)) if *c >= 0);
        matches!(self.def(v).map(|s| &s.expr), Some(Expr::Prim(crate::ir::Prim::Max, args)) if args.iter().any(nonneg_lit))
    }

    fn negative_size_possible(&self, s: &Stmt, inner: &mut Vec<VarId>) -> bool {
        let atom_ok = |a: &Atom, inner: &[VarId]| match a {
            Atom::Lit(Lit::I64(c)) => *c >= 0,
            Atom::Var(v) => self.nonneg(*v, inner),
            _ => false,
        };
        let block_bad = |b: &Block, inner: &mut Vec<VarId>| b.stmts.iter().any(|s| self.negative_size_possible(s, inner));
        match &s.expr {
            Expr::Iota { n } | Expr::Replicate { n, .. } => !atom_ok(n, inner),
            Expr::For { size, .. } | Expr::ForAcc { size, .. }
                if !size.provably_nonneg(&|v| self.nonneg(v, inner)) && !self.st.nonneg_sizes.contains(size) && !self.size_ran(size) =>
            {
                true
            }
            // a `for` index or loop counter is non-negative inside its block
            e => crate::ir::walk::scopes(e).any(|scope| {
                let index = scope.binds.index();
                inner.extend(index);
                let bad = block_bad(scope.block, inner);
                if index.is_some() {
                    inner.pop();
                }
                bad
            }),
        }
    }

    pub fn is_onehot(&self, v: VarId) -> bool {
        self.st.onehot.contains(&v)
    }

    pub fn mark_onehot(&mut self, v: VarId) {
        self.st.onehot.insert(v);
    }
}
