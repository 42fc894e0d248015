//! Reads of derived arrays, normalised before differentiation.
//!
//! A read of an array that a cheap construct derives from another one is a
//! read of the source at a transformed index:
//!
//! | read                                 | becomes                                        |
//! |--------------------------------------|------------------------------------------------|
//! | `(reverse a)[i]`                     | `a[n-1-i]`                                     |
//! | `a[lo:hi][i]`                        | `a[lo+i]`                                      |
//! | `(rotate k a)[i]`                    | `a[(i + k mod n) mod n]` (`k` taken modulo `n`, as `rotate` does) |
//! | `(concat a b)[i]`                    | `if i < na then a[i] else b[i-na]`             |
//! | `a[r][j]` (a row, then an element)   | `a[r, j]`                                      |
//! | `(transpose a)[i, j]`                | `a[j, i]`                                      |
//! | `(flatten a)[i]`, `(unflatten n m a)[i, j]` | `a[i / m, i mod m]`, `a[i*m + j]`       |
//! | `(replicate n x)[i]`, `(iota n)[i]`  | `x`, `i`                                       |
//! | `(for j < m. body)[i]`               | `body` with `j := i` (a `map`)                 |
//!
//! Why: reverse mode transposes a read `d[i]` of a derived array `d` into a
//! cotangent of the whole of `d` (a one-hot array of `d`'s size), which the
//! transposed construct then maps back to the source. Inside a loop that is
//! one array of size n per iteration: gradients quadratic where their
//! functions are linear (`for i. (reverse y)[i] * y[i]`, issue 24). A read of
//! the source is transposed into one (position, value) pair instead, all of
//! them added by one `scatter_add`. The primal gains too: `(map sin y)[i]` in
//! a loop no longer computes the whole map at every iteration.
//!
//! Where: only a derived array computed in the loop body that reads it (the
//! same loop nesting; `if` branches do not count). One computed outside the
//! loop that reads it is left alone: its reads leave that loop as
//! structured records (rows written at the loop's index, sums) and its
//! cotangent is transposed once; rewriting them would trade those records
//! for (position, value) pairs.
//!
//! Bounds: only positions whose index `lower` proved in range (no `Check`)
//! are transformed, and each transformed index is in range exactly when the
//! original one was, so the no-out-of-bounds guarantee carries over;
//! checked positions keep their check. A `for` is inlined only when its
//! body cannot fail, its size is not a constant (a `for` of a constant
//! size costs a constant), it is read at most `INLINE_READS` times, and its
//! body is small or read once (the read runs at most as often as the `for`
//! did: they are in the same loop). Derived arrays left unread are removed
//! when they cannot fail; a checked slice keeps its check, on an `[n][0]`
//! array.

use super::build::{Builder, lit};
use crate::ir::range;
use crate::ir::walk::{self, Binds, Copier};
use crate::ir::{Atom, Binder, Block, Expr, LoopKind, Prim, Scalar, Size, Stmt, Type, VarId};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;

/// A `for` body of at most this many statements (nested ones included) is
/// inlined at every read; a larger one only at its single read.
const INLINE_BODY: usize = 64;
/// A `for` read more often than this (in the code) is not inlined: each
/// read would compute its body once more.
const INLINE_READS: usize = 4;

/// Normalise the reads of derived arrays in `body` (a lambda about to be
/// differentiated).
pub(super) fn normalize(b: &mut Builder, body: Block, hoist: bool) -> Block {
    let mut uses = FxHashMap::default();
    count_uses(&body, &mut uses);
    let known = Known { nonneg: b.nonneg.clone(), ..Known::default() };
    let mut r = Reads {
        b,
        defs: FxHashMap::default(),
        known,
        depth: 0,
        redirected: FxHashSet::default(),
        uses,
        ints: FxHashMap::default(),
        bounds: FxHashMap::default(),
        around: vec![],
        hoist,
    };
    let mut out = r.block(body);
    if !r.redirected.is_empty() {
        let (nonneg, redirected) = (r.known.nonneg, r.redirected);
        remove_unread(&mut out, &redirected, &nonneg);
        let mut uses = FxHashMap::default();
        count_uses(&out, &mut uses);
        thin_checked_slices(b, &mut out, &redirected, &uses);
        // what only a thinned slice read
        remove_unread(&mut out, &redirected, &nonneg);
    }
    out
}

/// A checked slice that nothing reads any more stays for its check, which
/// may fail; it is made a slice of an `[n][0]` array with the same outer
/// axis (the same check and message, and nothing copied: the interpreter
/// copies a slice). So is a checked read of a row (`ad/guard.rs` keeps
/// one for its check), which reads an `[n][0]` array.
fn thin_checked_slices(b: &mut Builder, body: &mut Block, candidates: &FxHashSet<VarId>, uses: &FxHashMap<VarId, usize>) {
    let mut stmts = Vec::with_capacity(body.stmts.len());
    for mut s in std::mem::take(&mut body.stmts) {
        match &mut s.expr {
            Expr::Index { arr, idx, checks }
                if idx.len() == 1
                    && checks[0].is_some()
                    && s.binds.len() == 1
                    && candidates.contains(&s.binds[0].var)
                    && uses.get(&s.binds[0].var).copied().unwrap_or(0) == 0 =>
            {
                let t = b.type_of(arr);
                b.begin();
                let n = b.size(&t.shape[0]);
                stmts.extend(b.end());
                let zero = Size::constant(0);
                let e = Binder { var: b.fresh("empty"), ty: Type::array(Scalar::F64, vec![zero.clone()]) };
                let z = Binder { var: b.fresh("empty"), ty: Type::array(Scalar::F64, vec![t.shape[0].clone(), zero.clone()]) };
                let r = Binder { var: s.binds[0].var, ty: Type::array(Scalar::F64, vec![zero]) };
                let zero_i = lit(Scalar::I64, 0.0);
                let new = [
                    Stmt { binds: vec![e.clone()], expr: Expr::Replicate { n: zero_i, val: lit(Scalar::F64, 0.0) }, loc: None },
                    Stmt { binds: vec![z.clone()], expr: Expr::Unflatten { arr: Atom::Var(e.var), n, m: zero_i }, loc: None },
                    Stmt { binds: vec![r], expr: Expr::Index { arr: Atom::Var(z.var), idx: idx.clone(), checks: checks.clone() }, loc: s.loc.clone() },
                ];
                for st in new {
                    b.declare(&st);
                    stmts.push(st);
                }
                continue;
            }
            Expr::Slice { arr, lo, hi, check: Some(loc) }
                if s.binds.len() == 1 && candidates.contains(&s.binds[0].var) && uses.get(&s.binds[0].var).copied().unwrap_or(0) == 0 =>
            {
                let t = b.type_of(arr);
                if t.elem == Scalar::F64 && !t.shape.is_empty() {
                    b.begin();
                    let n = b.size(&t.shape[0]);
                    stmts.extend(b.end());
                    let zero = Size::constant(0);
                    let e = Binder { var: b.fresh("empty"), ty: Type::array(Scalar::F64, vec![zero.clone()]) };
                    let z = Binder { var: b.fresh("empty"), ty: Type::array(Scalar::F64, vec![t.shape[0].clone(), zero.clone()]) };
                    let r = Binder { var: s.binds[0].var, ty: Type::array(Scalar::F64, vec![s.binds[0].ty.shape[0].clone(), zero]) };
                    let zero_i = lit(Scalar::I64, 0.0);
                    let new = [
                        Stmt { binds: vec![e.clone()], expr: Expr::Replicate { n: zero_i, val: lit(Scalar::F64, 0.0) }, loc: None },
                        Stmt { binds: vec![z.clone()], expr: Expr::Unflatten { arr: Atom::Var(e.var), n, m: zero_i }, loc: None },
                        Stmt { binds: vec![r], expr: Expr::Slice { arr: Atom::Var(z.var), lo: *lo, hi: *hi, check: Some(loc.clone()) }, loc: s.loc.clone() },
                    ];
                    for st in new {
                        b.declare(&st);
                        stmts.push(st);
                    }
                    continue;
                }
            }
            e => {
                for blk in walk::sub_blocks_mut(e) {
                    thin_checked_slices(b, blk, candidates, uses);
                }
            }
        }
        stmts.push(s);
    }
    body.stmts = stmts;
}

struct Def {
    expr: std::rc::Rc<Expr>,
    /// which result of the statement (for a `for` with several)
    k: usize,
    /// loops around the definition
    depth: usize,
}

/// What is known about a body's integers, beyond what `walk::can_fail`
/// sees in one statement: which statements cannot fail.
#[derive(Default)]
pub(super) struct Known {
    /// `i64` variables known to be `>= 0` (size parameters, loop counters)
    pub nonneg: FxHashSet<VarId>,
    /// `i64` variables known to be `>= 1` (`max x 1`, which the rewritten
    /// reads of a `flatten` divide by)
    positive: FxHashSet<VarId>,
    /// results of statements of a kind that can fail but that cannot: an
    /// integer division by a positive divisor, an `unflatten` whose sizes
    /// the types prove, a statement guarded by the condition of its
    /// success (`ad/guard.rs`)
    safe: FxHashSet<VarId>,
}

impl Known {
    /// Whether the statement `s`, which `walk::can_fail` says can fail, cannot.
    fn proven_safe(&self, s: &Stmt) -> bool {
        matches!(s.expr, Expr::Prim(..) | Expr::Unflatten { .. } | Expr::ScatterAdd { .. } | Expr::ArgExt { .. })
            && !s.binds.is_empty()
            && s.binds.iter().all(|x| self.safe.contains(&x.var))
    }

    /// Learn from the statement `s` (`ty`: the types of its operands).
    fn learn(&mut self, s: &Stmt, ty: &dyn Fn(&Atom) -> Type) {
        let [x] = s.binds.as_slice() else { return };
        let i64_lit = |a: &Atom, at_least: i64| matches!(a, Atom::Lit(crate::ir::Lit::I64(c)) if *c >= at_least);
        match &s.expr {
            Expr::Prim(Prim::Max, xs) if x.ty == Type::scalar(Scalar::I64) && xs.iter().any(|a| i64_lit(a, 1)) => {
                self.positive.insert(x.var);
            }
            Expr::Prim(Prim::Div | Prim::Rem, xs) if matches!(xs.get(1), Some(Atom::Var(d)) if self.positive.contains(d)) => {
                self.safe.insert(x.var);
            }
            Expr::Unflatten { arr, n, m } => {
                let nonneg = |a: &Atom| i64_lit(a, 0) || matches!(a, Atom::Var(v) if self.nonneg.contains(v));
                let len = ty(arr).shape.first().cloned();
                if let (Some(len), Some(sn), Some(sm)) = (len, Size::of_atom(n), Size::of_atom(m))
                    && nonneg(n)
                    && nonneg(m)
                    && sn.try_mul(&sm).ok() == Some(len)
                {
                    self.safe.insert(x.var);
                }
            }
            _ => {}
        }
    }
}

struct Reads<'x, 'a> {
    b: &'x mut Builder<'a>,
    defs: FxHashMap<VarId, Def>,
    known: Known,
    depth: usize,
    /// derived arrays some read no longer goes through
    redirected: FxHashSet<VarId>,
    /// reads of each variable in the original body
    uses: FxHashMap<VarId, usize>,
    /// definitions of `i64` scalars by `+`, `-`, `*`
    ints: FxHashMap<VarId, Expr>,
    /// loop counters and their trip counts
    bounds: FxHashMap<VarId, Size>,
    /// the counted loops around the block being rewritten, outermost first
    around: Vec<range::Bound>,
    /// whether loop-invariant statements move before their loop (reverse
    /// mode: forward mode's tangents cost what the primal costs anyway)
    hoist: bool,
}

fn count_uses(b: &Block, uses: &mut FxHashMap<VarId, usize>) {
    walk::visit_block(b, &mut |v| *uses.entry(v).or_default() += 1, &mut |_| {});
}

fn stmt_count(b: &Block) -> usize {
    let mut n = 0;
    walk::for_each_stmt(b, &mut |_| n += 1);
    n
}

fn var(a: &Atom) -> Option<VarId> {
    match a {
        Atom::Var(v) => Some(*v),
        Atom::Lit(_) => None,
    }
}

impl Reads<'_, '_> {
    fn block(&mut self, blk: Block) -> Block {
        let mut out = Vec::with_capacity(blk.stmts.len());
        let mut queue: VecDeque<Stmt> = blk.stmts.into();
        while let Some(mut s) = queue.pop_front() {
            if let Some(new) = self.rewrite(&s) {
                for n in new.into_iter().rev() {
                    queue.push_front(n);
                }
                continue;
            }
            self.nested(&mut s);
            // a loop whose body ignores its state runs its last iteration alone
            if self.hoist
                && let Some(new) = super::loops::last_iteration_only(self.b, &s, |st| cannot_fail(st, &self.known, true))
            {
                for n in new {
                    self.record(&n);
                    out.push(n);
                }
                continue;
            }
            // what the loop body computes the same at every iteration runs
            // once, before the loop
            let hoisted = if self.hoist { hoist_invariant(self.b, &mut s, &mut self.known, &mut self.redirected, &self.around) } else { vec![] };
            for h in hoisted {
                out.push(h);
            }
            self.record(&s);
            out.push(s);
        }
        Block { stmts: out, result: blk.result }
    }

    fn nested(&mut self, s: &mut Stmt) {
        for scope in walk::scopes_mut(&mut s.expr) {
            let mut counted = None;
            let repeats = match scope.binds {
                Binds::ForBody { ivar, size } => {
                    self.known.nonneg.insert(ivar);
                    self.bounds.insert(ivar, size.clone());
                    counted = Some(range::Bound { x: Size::var(ivar), upper: size.clone() });
                    true
                }
                Binds::LoopBody { counter, .. } => {
                    if let Some((ivar, n)) = counter {
                        self.known.nonneg.insert(ivar);
                        if let Some(n) = Size::of_atom(n) {
                            self.bounds.insert(ivar, n.clone());
                            counted = Some(range::Bound { x: Size::var(ivar), upper: n });
                        }
                    }
                    true
                }
                Binds::LoopCondition { .. } | Binds::Operator { .. } => true,
                Binds::Branch | Binds::Derivative { .. } => false,
            };
            if repeats {
                let entered = counted.is_some();
                self.around.extend(counted);
                self.inner(scope.block);
                if entered {
                    self.around.pop();
                }
            } else {
                *scope.block = self.block(std::mem::take(scope.block));
            }
        }
    }

    /// A block inside a loop (or an operator run once per element).
    fn inner(&mut self, body: &mut Block) {
        self.depth += 1;
        *body = self.block(std::mem::take(body));
        self.depth -= 1;
    }

    fn record(&mut self, s: &Stmt) {
        let b = &*self.b;
        self.known.learn(s, &|a| b.type_of(a));
        if let (Expr::Prim(Prim::Add | Prim::Sub | Prim::Mul | Prim::SizeMul, _), [x]) = (&s.expr, s.binds.as_slice())
            && x.ty == Type::scalar(Scalar::I64)
        {
            self.ints.insert(x.var, s.expr.clone());
        }
        let keep = matches!(
            s.expr,
            Expr::Atom(Atom::Var(_))
                | Expr::Reverse(_)
                | Expr::Slice { .. }
                | Expr::Rotate { .. }
                | Expr::Concat(..)
                | Expr::Index { .. }
                | Expr::Transpose(_)
                | Expr::Flatten(_)
                | Expr::Unflatten { .. }
                | Expr::Replicate { .. }
                | Expr::Iota { .. }
                | Expr::For { .. }
        );
        if !keep || s.binds.iter().all(|x| x.ty.rank() == 0) {
            return;
        }
        let expr = std::rc::Rc::new(s.expr.clone());
        for (k, x) in s.binds.iter().enumerate() {
            self.defs.insert(x.var, Def { expr: expr.clone(), k, depth: self.depth });
        }
    }

    /// The definition of array `a`, looking through copies: the variable
    /// that holds it and its definition.
    fn def_of(&self, a: &Atom) -> Option<(VarId, &Def)> {
        let mut v = var(a)?;
        for _ in 0..64 {
            let d = self.defs.get(&v)?;
            match &*d.expr {
                Expr::Atom(Atom::Var(w)) => v = *w,
                _ => return Some((v, d)),
            }
        }
        None
    }

    fn ty(&self, a: &Atom) -> Type {
        self.b.type_of(a)
    }

    fn is_i64(&self, a: &Atom) -> bool {
        self.ty(a).elem == Scalar::I64 && self.ty(a).rank() == 0
    }

    /// Emit `op(args)` (an `i64`) into `pre`.
    fn prim(&mut self, pre: &mut Vec<Stmt>, op: Prim, args: Vec<Atom>) -> Atom {
        let v = self.b.fresh("t");
        let s = Stmt { binds: vec![Binder { var: v, ty: Type::scalar(Scalar::I64) }], expr: Expr::Prim(op, args), loc: None };
        self.b.declare(&s);
        pre.push(s);
        Atom::Var(v)
    }

    fn size(&mut self, pre: &mut Vec<Stmt>, s: &Size) -> Atom {
        self.b.begin();
        let a = self.b.size(s);
        pre.extend(self.b.end());
        a
    }

    fn read(&mut self, s: &Stmt, arr: Atom, idx: Vec<Atom>, checks: Vec<crate::ir::Check>) -> Stmt {
        Stmt { binds: s.binds.clone(), expr: Expr::Index { arr, idx, checks }, loc: s.loc.clone() }
    }

    /// The statements that replace the read `s`, if its array is derived.
    fn rewrite(&mut self, s: &Stmt) -> Option<Vec<Stmt>> {
        let Expr::Index { arr, idx, checks } = &s.expr else { return None };
        if idx.is_empty() || s.binds.len() != 1 {
            return None;
        }
        let (src_var, def) = self.def_of(arr)?;
        let first_proven = checks[0].is_none() && self.is_i64(&idx[0]);
        let i = idx[0];
        let mut pre = vec![];
        let expr = (*def.expr).clone();
        let (k, depth) = (def.k, def.depth);
        // Only a derived array computed in the loop body that reads it (or
        // outside every loop, read outside every loop): its cotangent would
        // be as large as itself at every iteration. One computed outside
        // the loop that reads it is fine as it is: its reads leave the loop
        // as structured records (rows written at the loop's index, sums)
        // and its cotangent is transposed once per execution.
        if depth != self.depth {
            return None;
        }
        let done = |r: &mut Self, mut pre: Vec<Stmt>, last: Stmt| {
            r.redirected.insert(src_var);
            r.b.declare(&last);
            pre.push(last);
            Some(pre)
        };
        match expr {
            Expr::Reverse(a) if first_proven => {
                let n = self.ty(&a).shape[0].clone();
                let j = n.sub(&Size::constant(1)).sub(&self.value(&i));
                let j = self.size(&mut pre, &j);
                let last = self.read(s, a, [vec![j], idx[1..].to_vec()].concat(), checks.clone());
                done(self, pre, last)
            }
            Expr::Slice { arr: a, lo, .. } if first_proven && self.is_i64(&lo) => {
                let j = self.value(&lo).add(&self.value(&i));
                let j = self.size(&mut pre, &j);
                let last = self.read(s, a, [vec![j], idx[1..].to_vec()].concat(), checks.clone());
                done(self, pre, last)
            }
            Expr::Rotate { k: rk, arr: a } if first_proven => {
                // out[i] = a[(i + k') mod n], k' = k mod n in [0, n); n >= 1 here (i < n)
                let n = self.ty(&a).shape[0].clone();
                let n = self.size(&mut pre, &n);
                let n1 = self.prim(&mut pre, Prim::Max, vec![n, lit(Scalar::I64, 1.0)]);
                let r = self.prim(&mut pre, Prim::Rem, vec![rk, n1]);
                let neg = self.bool_prim(&mut pre, Prim::Lt, vec![r, lit(Scalar::I64, 0.0)]);
                let rn = self.prim(&mut pre, Prim::Add, vec![r, n1]);
                let kk = self.prim(&mut pre, Prim::Select, vec![neg, rn, r]);
                let j = self.prim(&mut pre, Prim::Add, vec![i, kk]);
                let over = self.bool_prim(&mut pre, Prim::Ge, vec![j, n1]);
                let jn = self.prim(&mut pre, Prim::Sub, vec![j, n1]);
                let j = self.prim(&mut pre, Prim::Select, vec![over, jn, j]);
                let last = self.read(s, a, [vec![j], idx[1..].to_vec()].concat(), checks.clone());
                done(self, pre, last)
            }
            Expr::Concat(x, y) if first_proven => {
                let nx_size = self.ty(&x).shape[0].clone();
                // which part the index falls in, when its value says so
                let at = self.value(&i);
                if at.sub(&nx_size).provably_nonneg(&|v| self.known.nonneg.contains(&v)) {
                    let j = self.size(&mut pre, &at.sub(&nx_size));
                    let last = self.read(s, y, [vec![j], idx[1..].to_vec()].concat(), checks.clone());
                    return done(self, pre, last);
                }
                if self.below(&at, &nx_size) {
                    let last = self.read(s, x, idx.clone(), checks.clone());
                    return done(self, pre, last);
                }
                let nx = self.size(&mut pre, &nx_size);
                let c = self.bool_prim(&mut pre, Prim::Lt, vec![i, nx]);
                let then_read = self.fresh_read(s, x, [vec![i], idx[1..].to_vec()].concat(), checks.clone(), vec![]);
                let mut else_pre = vec![];
                let j = self.prim(&mut else_pre, Prim::Sub, vec![i, nx]);
                let else_read = self.fresh_read(s, y, [vec![j], idx[1..].to_vec()].concat(), checks.clone(), else_pre);
                let last = Stmt { binds: s.binds.clone(), expr: Expr::If { cond: c, then_b: then_read, else_b: else_read }, loc: s.loc.clone() };
                done(self, pre, last)
            }
            Expr::Index { arr: a, idx: outer, checks: outer_checks } => {
                // a row, then an element of it: one read
                let last = self.read(s, a, [outer, idx.clone()].concat(), [outer_checks, checks.clone()].concat());
                done(self, pre, last)
            }
            Expr::Transpose(a) if idx.len() >= 2 && checks[0].is_none() && checks[1].is_none() => {
                let swapped = [vec![idx[1], idx[0]], idx[2..].to_vec()].concat();
                let last = self.read(s, a, swapped, checks.clone());
                done(self, pre, last)
            }
            Expr::Flatten(a) if first_proven => {
                let m = self.ty(&a).shape[1].clone();
                let m = self.size(&mut pre, &m);
                let m1 = self.prim(&mut pre, Prim::Max, vec![m, lit(Scalar::I64, 1.0)]);
                let q = self.prim(&mut pre, Prim::Div, vec![i, m1]);
                let r = self.prim(&mut pre, Prim::Rem, vec![i, m1]);
                let last = self.read(s, a, [vec![q, r], idx[1..].to_vec()].concat(), [vec![None], checks.clone()].concat());
                done(self, pre, last)
            }
            Expr::Unflatten { arr: a, m, .. } if idx.len() >= 2 && first_proven && checks[1].is_none() && self.is_i64(&idx[1]) => {
                let q = self.prim(&mut pre, Prim::Mul, vec![i, m]);
                let j = self.prim(&mut pre, Prim::Add, vec![q, idx[1]]);
                let last = self.read(s, a, [vec![j], idx[2..].to_vec()].concat(), checks[1..].to_vec());
                done(self, pre, last)
            }
            Expr::Replicate { val, .. } if first_proven => {
                let last = if idx.len() == 1 {
                    Stmt { binds: s.binds.clone(), expr: Expr::Atom(val), loc: s.loc.clone() }
                } else {
                    self.read(s, val, idx[1..].to_vec(), checks[1..].to_vec())
                };
                done(self, pre, last)
            }
            Expr::Iota { .. } if first_proven => {
                let last = Stmt { binds: s.binds.clone(), expr: Expr::Atom(i), loc: s.loc.clone() };
                done(self, pre, last)
            }
            Expr::For { ivar, body, size } if first_proven && size.as_const().is_none() => {
                // a `for` of a size known at compile time costs a constant:
                // it stays (its reads are one-hot cotangents of that size)
                let reads = self.uses.get(&src_var).copied().unwrap_or(0);
                if body.stmts.iter().any(walk::can_fail) || reads > INLINE_READS || (reads > 1 && stmt_count(&body) > INLINE_BODY) {
                    return None;
                }
                let mut map = FxHashMap::default();
                map.insert(ivar, i);
                let b = &mut *self.b;
                let mut fresh = |v: VarId| {
                    let n = b.name(v);
                    b.fresh(&n)
                };
                let copy = Copier { map, fresh: Some(&mut fresh) }.block(&body);
                for st in &copy.stmts {
                    self.b.declare(st);
                }
                pre.extend(copy.stmts);
                let r = copy.result[k];
                let last = if idx.len() == 1 {
                    Stmt { binds: s.binds.clone(), expr: Expr::Atom(r), loc: s.loc.clone() }
                } else {
                    self.read(s, r, idx[1..].to_vec(), checks[1..].to_vec())
                };
                done(self, pre, last)
            }
            _ => None,
        }
    }

    /// The value of an `i64` atom as a polynomial of the variables it is
    /// computed from by `+`, `-` and `*` (looking through a few definitions).
    fn value(&self, a: &Atom) -> Size {
        self.value_at(a, 8)
    }

    fn value_at(&self, a: &Atom, depth: usize) -> Size {
        match a {
            Atom::Lit(crate::ir::Lit::I64(c)) => Size::constant(*c),
            Atom::Var(v) => match self.ints.get(v) {
                Some(Expr::Prim(p @ (Prim::Add | Prim::Sub | Prim::Mul | Prim::SizeMul), xs)) if depth > 0 && xs.len() == 2 => {
                    // coefficients wrap as `i64` arithmetic does; a product
                    // over the size budget stays the variable
                    let (x, y) = (self.value_at(&xs[0], depth - 1), self.value_at(&xs[1], depth - 1));
                    let r = match p {
                        Prim::Add => x.add(&y),
                        Prim::Sub => x.sub(&y),
                        _ => x.mul(&y),
                    };
                    if r.check_budget().is_ok() { r } else { Size::var(*v) }
                }
                _ => Size::var(*v),
            },
            Atom::Lit(_) => Size::var(VarId(u32::MAX)),
        }
    }

    /// Whether `at < n` is known: `at` is the counter of a loop of at most
    /// `n` iterations.
    fn below(&self, at: &Size, n: &Size) -> bool {
        at.as_var().and_then(|v| self.bounds.get(&v)).is_some_and(|m| n.sub(m).provably_nonneg(&|v| self.known.nonneg.contains(&v)))
    }

    fn bool_prim(&mut self, pre: &mut Vec<Stmt>, op: Prim, args: Vec<Atom>) -> Atom {
        let v = self.b.fresh("c");
        let s = Stmt { binds: vec![Binder { var: v, ty: Type::scalar(Scalar::Bool) }], expr: Expr::Prim(op, args), loc: None };
        self.b.declare(&s);
        pre.push(s);
        Atom::Var(v)
    }

    /// A branch block `pre; let r = arr[idx]` returning `r` (a fresh copy of
    /// the read `s`'s binder).
    fn fresh_read(&mut self, s: &Stmt, arr: Atom, idx: Vec<Atom>, checks: Vec<crate::ir::Check>, mut pre: Vec<Stmt>) -> Block {
        let x = &s.binds[0];
        let v = self.b.fresh(&self.b.name(x.var));
        let st = Stmt { binds: vec![Binder { var: v, ty: x.ty.clone() }], expr: Expr::Index { arr, idx, checks }, loc: s.loc.clone() };
        self.b.declare(&st);
        pre.push(st);
        Block { stmts: pre, result: vec![Atom::Var(v)] }
    }
}

/// Remove the statements binding only variables of `candidates` that
/// nothing reads any more and that cannot fail (a `for` also needs a size
/// that cannot be negative), until none is left.
fn remove_unread(body: &mut Block, candidates: &FxHashSet<VarId>, nonneg: &FxHashSet<VarId>) {
    loop {
        let mut uses = FxHashMap::default();
        count_uses(body, &mut uses);
        let mut removed = false;
        sweep(body, &mut |s: &Stmt| {
            let dead = !s.binds.is_empty()
                && s.binds.iter().all(|x| candidates.contains(&x.var) && uses.get(&x.var).copied().unwrap_or(0) == 0)
                && !walk::can_fail(s)
                && match &s.expr {
                    Expr::For { size, .. } => size.provably_nonneg(&|v| nonneg.contains(&v)),
                    _ => true,
                };
            removed |= dead;
            dead
        });
        if !removed {
            return;
        }
    }
}

fn sweep(b: &mut Block, dead: &mut dyn FnMut(&Stmt) -> bool) {
    b.stmts.retain(|s| !dead(s));
    for s in &mut b.stmts {
        for blk in walk::sub_blocks_mut(&mut s.expr) {
            sweep(blk, dead);
        }
    }
}

/// Take out of the body of the loop `s` the statements that compute an
/// array read element by element, or a scalar by a reduction or a loop,
/// the same at every iteration (they read neither the loop's index
/// nor its state nor anything else the body computes), with the invariant
/// scalars they need, when they cannot fail and contain no `while` loop:
/// they then run once, before the loop (at most once more than before,
/// when the loop runs no iteration). Reverse mode gives an array computed
/// in a loop body a cotangent as large as itself at every iteration; one
/// computed before the loop gets its cotangent transposed once (issue 24:
/// `(loop u = v for i < 2 do v)[i]` or `(scan (+) 0.0 v)[q]` in a `for`).
/// Statements inside the body's `if` branches move too: `for i. if i == 0
/// then prod v else ..` gave every iteration a whole cotangent of `v`,
/// zeros in the other branch. A scalar computed from checked reads the loop
/// makes the same at every iteration moves too, guarded by the checks'
/// conditions (`ad/guard.rs`); the originals it read go into `guarded`.
/// `around`: the counted loops that stay around the moved statements.
fn hoist_invariant(b: &mut Builder, s: &mut Stmt, known: &mut Known, guarded: &mut FxHashSet<VarId>, around: &[range::Bound]) -> Vec<Stmt> {
    let (body, variant, trips): (&mut Block, FxHashSet<VarId>, Option<Size>) = match &mut s.expr {
        Expr::For { ivar, body, size } => (body, std::iter::once(*ivar).collect(), Some(size.clone())),
        Expr::Loop { params, kind: LoopKind::Count { ivar, n, .. }, body, .. } => {
            (body, params.iter().map(|p| p.var).chain(std::iter::once(*ivar)).collect(), Size::of_atom(n))
        }
        Expr::Loop { params, kind: LoopKind::While { .. }, body, .. } => (body, params.iter().map(|p| p.var).collect(), None),
        _ => return vec![],
    };
    let mut indexed: FxHashSet<VarId> = FxHashSet::default();
    index_reads(body, &mut indexed);
    let mut needed: FxHashSet<VarId> = FxHashSet::default();
    Hoist { b, known, indexed: &indexed, guarded, trips, around }.movable(body, variant, &mut needed, false)
}

struct Hoist<'h, 'a> {
    b: &'h mut Builder<'a>,
    known: &'h mut Known,
    /// the arrays the loop body reads with `index`
    indexed: &'h FxHashSet<VarId>,
    /// statements whose results guarded copies replaced (`ad/guard.rs`)
    guarded: &'h mut FxHashSet<VarId>,
    /// the loop's trip count (`None` for a `while` loop)
    trips: Option<Size>,
    /// the counted loops around the loop, outermost first
    around: &'h [range::Bound],
}

impl Hoist<'_, '_> {
    /// The statements of `body` (in the loop, or in one of its `if`
    /// branches) that move before the loop, in order; `variant` holds what
    /// changes between iterations, `needed` what later hoisted statements read.
    fn movable(&mut self, body: &mut Block, mut variant: FxHashSet<VarId>, needed: &mut FxHashSet<VarId>, in_branch: bool) -> Vec<Stmt> {
        let unsure = reads_resting_on_context(self.b, body, self.known, self.around);
        let sure = |st: &Stmt| !binds_any(st, &unsure);
        let known = &*self.known;
        let proven = super::guard::guard_checked_scalars(self.b, body, &variant, &|st| safe_to_hoist(st, known) && sure(st), self.guarded);
        self.known.safe.extend(proven);
        // invariant and safe statements, assuming every one of them leaves;
        // an `if` that stays keeps the variant set its branches start with
        let mut cand = vec![false; body.stmts.len()];
        // candidates that may fail or hold a `while` loop, which leave
        // guarded by the trip count
        let mut on_trips = vec![false; body.stmts.len()];
        // whether the statements so far cannot fail (and, `first_ends`,
        // hold no `while` loop): then the first iteration runs the next one
        let (mut first_runs, mut first_ends) = (true, true);
        let mut branch_variant: Vec<Option<FxHashSet<VarId>>> = vec![None; body.stmts.len()];
        for (k, st) in body.stmts.iter().enumerate() {
            let mut reads_variant = false;
            crate::ir::walk::stmt_uses(st, &mut |v| reads_variant |= variant.contains(&v));
            // an unchecked read the statement alone does not prove in range
            // counts as one that may fail
            let sure = sure(st);
            let (fails, has_while) = (!cannot_fail(st, self.known, true) || !sure, !cannot_fail(st, self.known, false));
            if !reads_variant && sure && safe_to_hoist(st, self.known) && (!in_branch || finite_partials(st)) {
                cand[k] = true;
                continue;
            }
            if !reads_variant && !in_branch && self.trips.is_some() && (if fails { first_ends } else { first_runs }) && self.zeros_exist(st) {
                // a `while` loop (which may not end) or a statement that may
                // fail (its failure then does not depend on the iteration)
                // runs before the loop exactly when the loop's first
                // iteration would have run it: it fails or does not end in
                // the same cases, with the same message
                cand[k] = true;
                on_trips[k] = true;
                continue;
            }
            first_runs &= !fails;
            first_ends &= !has_while;
            if matches!(st.expr, Expr::If { .. }) {
                branch_variant[k] = Some(variant.clone());
            }
            walk::visit_expr(&st.expr, &mut |_| {}, &mut |v| {
                variant.insert(v);
            });
            variant.extend(st.binds.iter().map(|b| b.var));
        }
        // the arrays, and the invariant statements they read, last first
        let mut hoist = vec![false; body.stmts.len()];
        let mut from_branches: Vec<Vec<Stmt>> = vec![vec![]; body.stmts.len()];
        for k in (0..body.stmts.len()).rev() {
            let st = &mut body.stmts[k];
            if cand[k] && (self.heavy(st) || st.binds.iter().any(|b| needed.contains(&b.var))) {
                hoist[k] = true;
                crate::ir::walk::stmt_uses(st, &mut |v| {
                    needed.insert(v);
                });
            } else if let (Some(v), Expr::If { then_b, else_b, .. }) = (branch_variant[k].take(), &mut st.expr) {
                let mut moved = self.movable(then_b, v.clone(), needed, true);
                moved.extend(self.movable(else_b, v, needed, true));
                from_branches[k] = moved;
            }
        }
        let mut out = vec![];
        let mut keep = vec![];
        let mut ran: Option<Atom> = None;
        for (((st, h), moved), trip) in std::mem::take(&mut body.stmts).into_iter().zip(hoist).zip(from_branches).zip(on_trips) {
            out.extend(moved);
            if h && trip {
                let ran = *ran.get_or_insert_with(|| self.any_trip(&mut out));
                out.extend(self.only_if(ran, st));
            } else if h {
                out.push(st)
            } else {
                keep.push(st)
            }
        }
        body.stmts = keep;
        out
    }

    /// Whether zeros of the types of `st`'s results can be made (their sizes cannot be negative).
    fn zeros_exist(&self, st: &Stmt) -> bool {
        st.binds.iter().all(|x| x.ty.shape.iter().all(|d| d.provably_nonneg(&|v| self.known.nonneg.contains(&v))))
    }

    /// `trips > 0`, emitted into `out`.
    fn any_trip(&mut self, out: &mut Vec<Stmt>) -> Atom {
        let trips = self.trips.clone().expect("a counted loop");
        self.b.begin();
        let n = self.b.size(&trips);
        out.extend(self.b.end());
        let v = self.b.fresh("ran");
        let s = Stmt { binds: vec![Binder { var: v, ty: Type::scalar(Scalar::Bool) }], expr: Expr::Prim(Prim::Gt, vec![n, lit(Scalar::I64, 0.0)]), loc: None };
        self.b.declare(&s);
        out.push(s);
        Atom::Var(v)
    }

    /// `st` as `if ran then st else zeros`, binding the same variables.
    fn only_if(&mut self, ran: Atom, mut st: Stmt) -> Vec<Stmt> {
        let binds = st.binds.clone();
        for x in &mut st.binds {
            let n = self.b.name(x.var);
            x.var = self.b.fresh(&n);
        }
        self.b.declare(&st);
        let then_b = Block { result: st.binds.iter().map(|x| Atom::Var(x.var)).collect(), stmts: vec![st] };
        self.b.begin();
        let zeros: Vec<Atom> = binds.iter().map(|x| self.b.zeros(&x.ty)).collect();
        let else_b = Block { stmts: self.b.end(), result: zeros };
        let loc = then_b.stmts[0].loc.clone();
        let s = Stmt { binds, expr: Expr::If { cond: ran, then_b, else_b }, loc };
        self.b.declare(&s);
        vec![s]
    }

    /// An array read element by element (its cotangent would be a one-hot
    /// array per read), or a scalar made by a loop or reduction.
    fn heavy(&self, st: &Stmt) -> bool {
        st.binds.iter().any(|b| self.indexed.contains(&b.var))
            || (st.binds.iter().all(|b| b.ty.rank() == 0)
                && matches!(st.expr, Expr::Reduce { .. } | Expr::Scan { .. } | Expr::ArgExt { .. } | Expr::Loop { .. } | Expr::For { .. } | Expr::If { .. }))
    }
}

/// Whether `s` uses only operations whose partial derivatives are finite
/// where their operands are: one moved out of a branch also runs where the
/// branch guarded it (`if s != 0 then r / s`), and its transpose multiplies
/// the zero cotangent of the branch not taken by its partials (0 / 0).
/// Nested blocks count, user operators of reductions and scans included.
fn finite_partials(s: &Stmt) -> bool {
    // an allow-list: a primitive added later counts as unbounded until
    // someone says otherwise
    let bounded = |t: &Stmt| match &t.expr {
        // no cotangent flows through an integer or a truth value
        Expr::Prim(..) if t.binds.iter().all(|x| x.ty.elem.is_int() || x.ty.elem == Scalar::Bool) => true,
        Expr::Prim(p, _) => matches!(
            p,
            Prim::Add
                | Prim::Sub
                | Prim::Mul
                | Prim::Neg
                | Prim::Abs
                | Prim::Min
                | Prim::Max
                | Prim::Eq
                | Prim::Ne
                | Prim::Lt
                | Prim::Le
                | Prim::Gt
                | Prim::Ge
                | Prim::And
                | Prim::Or
                | Prim::Not
                | Prim::Convert(_)
                | Prim::Select
        ),
        // a reduction or scan with a user operator is transposed as the
        // loop that folds it: its partials are the operator body's, whose
        // statements the walk below checks like any other
        _ => true,
    };
    let mut ok = bounded(s);
    for b in walk::sub_blocks(&s.expr) {
        walk::for_each_stmt(b, &mut |t| ok &= bounded(t));
    }
    ok
}

/// The results of the unchecked reads in `body` (nested blocks included)
/// that the arrays' types and the ranges of the loops around them (inside
/// their statement, and `around`: the loops outside the loop whose body
/// this is) do not prove in range. The optimiser drops a check using what
/// holds where the read is (`i >= 1` in the `else` of `if i == 0`, `n >= 1`
/// inside `for i < n`); moved out of that branch or loop, the read could
/// run where it is out of range (AD fuzz seed 36883: `v[i - 1]` at `i = 0`,
/// dead in its branch, read before the loop).
fn reads_resting_on_context(b: &Builder, body: &Block, known: &Known, around: &[range::Bound]) -> FxHashSet<VarId> {
    let mut defs: FxHashMap<VarId, &Stmt> = FxHashMap::default();
    walk::for_each_stmt(body, &mut |st| {
        for x in &st.binds {
            defs.insert(x.var, st);
        }
    });
    let type_of = |a: &Atom| Some(b.type_of(a));
    let lookup = |v: VarId| defs.get(&v).copied();
    let nonneg = |v: VarId| known.nonneg.contains(&v);
    let facts = range::Facts { type_of: &type_of, lookup: &lookup, nonneg: &nonneg };
    let mut domain: Vec<range::Bound> = around.iter().rev().cloned().collect();
    let mut out = FxHashSet::default();
    for st in &body.stmts {
        range::unproven_reads(st, &mut domain, &facts, &mut |r| out.extend(r.binds.iter().map(|x| x.var)));
    }
    out
}

/// Whether `s` or a statement nested in it binds one of `vars`.
fn binds_any(s: &Stmt, vars: &FxHashSet<VarId>) -> bool {
    if vars.is_empty() {
        return false;
    }
    let mut any = s.binds.iter().any(|x| vars.contains(&x.var));
    for blk in walk::sub_blocks(&s.expr) {
        walk::for_each_stmt(blk, &mut |t| any |= t.binds.iter().any(|x| vars.contains(&x.var)));
    }
    any
}

/// Whether running `s` where it did not run before is harmless: it cannot
/// fail (sizes included) and contains no `while` loop.
fn safe_to_hoist(s: &Stmt, known: &Known) -> bool {
    cannot_fail(s, known, false)
}

/// Whether `s` cannot fail (sizes included), and, unless `while_ok`,
/// contains no `while` loop (one may run forever).
pub(super) fn cannot_fail(s: &Stmt, known: &Known, while_ok: bool) -> bool {
    let mut inner: FxHashSet<VarId> = known.nonneg.clone();
    fn ok(s: &Stmt, inner: &mut FxHashSet<VarId>, known: &Known, while_ok: bool) -> bool {
        // a statement holding blocks fails where one of their statements
        // does (checked one by one below, with what `known` proves)
        let compound = walk::sub_blocks(&s.expr).next().is_some();
        if !compound && walk::can_fail_with(s, &|v| inner.contains(&v)) && !known.proven_safe(s) {
            return false;
        }
        match &s.expr {
            Expr::For { size, .. } | Expr::ForAcc { size, .. } if !size.provably_nonneg(&|v| inner.contains(&v)) => false,
            Expr::Loop { kind: LoopKind::While { .. }, .. } if !while_ok => false,
            Expr::Jvp { .. } | Expr::Vjp { .. } => false,
            // a `for` index or loop counter is non-negative
            e => walk::scopes(e).all(|scope| {
                inner.extend(scope.binds.index());
                scope.block.stmts.iter().all(|t| ok(t, inner, known, while_ok))
            }),
        }
    }
    ok(s, &mut inner, known, while_ok)
}

/// The arrays `b` reads with `index` (nested blocks included).
fn index_reads(b: &Block, out: &mut FxHashSet<VarId>) {
    walk::for_each_stmt(b, &mut |st| {
        if let Expr::Index { arr: Atom::Var(a), .. } = &st.expr {
            out.insert(*a);
        }
    });
}
