//! Reverse mode by linearize + transpose (papers 003 and 004, DESIGN.md §4).
//!
//! The primal body runs first, unchanged (the forward sweep); then every
//! statement is visited backwards with the cotangents of its results:
//! - a scalar primitive is *linearized* by its JVP rule from `rules.rs`,
//!   applied to placeholder tangents; partial evaluation splits the rule's
//!   output into residual computations (emitted as they are) and linear
//!   statements, which the table of `transpose.rs` turns around;
//! - array constructs are linear already and go straight to that table;
//! - `for`, `loop`, `if` and non-additive reductions are transposed here.
//!
//! Cotangents accumulate by addition, one contribution per use, so a value
//! used k times costs k additions and no primal work is repeated (paper
//! 003's sharing problem). Residuals: a parallel `for` *stores* what its
//! transposed body reads (extra results of the primal `for`), a sequential
//! loop stores its body's residuals at every iteration, both *recompute*
//! what takes a step or two and fall back to recomputing when a residual's
//! size varies between iterations; an `if` recomputes the branch taken.
//! docs/ARCHITECTURE.md explains why.

use super::AdError;
use super::build::{Builder, lit, size_of_atom};
use super::jvp::elementwise;
use super::rules::prim_jvp;
use super::transpose::{Cotangents, transpose};
use crate::ir::walk::{self, Copier, bound_vars_block, dce, free_vars_block, free_vars_stmt};
use crate::ir::{Atom, Binder, Block, Expr, Lambda, Lit, Loc, LoopKind, Prim, ReduceOp, Scalar, Size, Stmt, Type, VarId};
use rustc_hash::{FxHashMap, FxHashSet};

mod parallel;
mod sequential;
use parallel::*;
use sequential::*;

/// Expand `binds = vjp lam primals cotangents` into statements of `b`.
pub(super) fn expand_vjp(b: &mut Builder, lam: &Lambda, primals: &[Atom], cotangents: &[Atom], binds: &[Binder], loc: Option<&Loc>) -> Result<(), AdError> {
    let mut r = Rev::default();
    let mut body = lam.body.clone();
    for p in &lam.params {
        if p.ty.elem.is_float() {
            r.active.insert(p.var);
        }
    }
    for s in &body.stmts {
        b.declare(s);
    }
    mark_active(&body.stmts, &mut r.active);
    b.begin();
    for (p, x) in lam.params.iter().zip(primals) {
        b.push(copy(p.clone(), *x));
    }
    let params = b.end();
    b.begin();
    for (res, ct) in body.result.iter().zip(cotangents) {
        r.add(b, res, *ct);
    }
    let swept = r.rev_stmts(b, &mut body.stmts);
    let rev = b.end();
    swept.map_err(|mut e| {
        e.loc = e.loc.or_else(|| loc.cloned());
        e
    })?;
    b.begin();
    let n = body.result.len();
    for (k, bind) in binds.iter().enumerate() {
        let atom = if k < n {
            body.result[k]
        } else {
            match r.take(b, lam.params[k - n].var) {
                Some(a) => a,
                None => b.zeros(&bind.ty),
            }
        };
        b.push(copy(bind.clone(), atom));
    }
    let tail = b.end();
    let result = binds.iter().map(|x| Atom::Var(x.var)).collect();
    let mut all = Block { stmts: [params, body.stmts, rev, tail].concat(), result };
    dce(&mut all);
    for s in all.stmts {
        b.push(s);
    }
    Ok(())
}

fn copy(bind: Binder, a: Atom) -> Stmt {
    Stmt { binds: vec![bind], expr: Expr::Atom(a), loc: None }
}

/// Mark the float variables that depend on active ones (the parameters
/// being differentiated): only those get cotangents.
fn mark_active(stmts: &[Stmt], active: &mut FxHashSet<VarId>) {
    let float = |bs: &[Binder], active: &mut FxHashSet<VarId>| {
        active.extend(bs.iter().filter(|x| x.ty.elem.is_float()).map(|x| x.var));
    };
    for s in stmts {
        if !free_vars_stmt(s).iter().any(|v| active.contains(v)) {
            continue;
        }
        float(&s.binds, active);
        for scope in walk::scopes(&s.expr) {
            // a `while` condition computes a bool: nothing in it gets a cotangent
            if matches!(scope.binds, walk::Binds::LoopCondition { .. }) {
                continue;
            }
            float(scope.binds.params(), active);
            mark_active(&scope.block.stmts, active);
        }
    }
}

enum Frame {
    /// The body of a parallel `for`: iterations cannot share an accumulator.
    For { bound: FxHashSet<VarId>, records: Vec<Record> },
    /// A branch of an `if` inside such a body: reads of arrays from outside
    /// the `for` still leave as (index, value) pairs.
    Branch { outer_bound: FxHashSet<VarId>, records: Vec<Record> },
    /// A branch or a sequential loop body elsewhere: accumulators are
    /// threaded through.
    Seq,
}

/// The cotangents accumulated so far in one scope.
#[derive(Default)]
struct Adjoints {
    /// whole values
    dense: FxHashMap<VarId, Atom>,
    /// elements (or rows) of arrays read at constant indices, kept as
    /// separate values until the array's cotangent is needed: sequential
    /// code reading `a[0]`, `a[1]` then costs one addition per read and one
    /// array literal, not a `scatter_add` per read
    cells: FxHashMap<VarId, Vec<(Vec<i64>, Atom)>>,
}

#[derive(Default)]
struct Rev {
    /// Cotangent accumulated so far for each variable.
    adj: Adjoints,
    active: FxHashSet<VarId>,
    frames: Vec<Frame>,
    /// Statements the innermost parallel `for` being transposed places
    /// before itself (trip counts of loops in its body that it does not
    /// change: sizes of what leaves its iterations).
    hoist_out: Vec<Stmt>,
}

impl Cotangents for Rev {
    fn linear(&self, a: &Atom) -> bool {
        matches!(a, Atom::Var(v) if self.active.contains(v))
    }

    fn add(&mut self, b: &mut Builder, a: &Atom, ct: Atom) {
        if let Atom::Var(v) = a
            && self.active.contains(v)
        {
            add_into(&mut self.adj.dense, b, *v, ct);
        }
    }

    fn add_at(&mut self, b: &mut Builder, arr: &Atom, idx: &[Atom], ct: Atom) {
        let Atom::Var(v) = arr else { return };
        if !self.active.contains(v) {
            return;
        }
        if let Some(conditional) = self.outside_loop(*v) {
            let parts = idx.iter().map(|a| Part::At(*a)).collect();
            self.frames.last_mut().expect("inside a loop").push(Record { arr: *v, kind: Kind::Structured(parts), ct, conditional, nested: false });
            return;
        }
        let ty = b.type_of(arr);
        let constant: Option<Vec<i64>> = idx.iter().map(|a| if let Atom::Lit(Lit::I64(k)) = a { (*k >= 0).then_some(*k) } else { None }).collect();
        if let Some(key) = constant {
            let cells = self.adj.cells.entry(*v).or_default();
            match cells.iter().position(|(k, _)| *k == key) {
                Some(j) => {
                    let cur = cells[j].1;
                    let sum = b.add_values(&b.type_of(&ct), cur, ct);
                    self.adj.cells.get_mut(v).expect("entry")[j].1 = sum;
                }
                None => cells.push((key, ct)),
            }
            return;
        }
        let flat = flat_index(b, idx, &ty.shape);
        let is = b.emit(Expr::ArrayLit(vec![flat]), Type::array(Scalar::I64, vec![Size::constant(1)]), "at");
        let ct_ty = b.type_of(&ct);
        let vs = b.emit(Expr::ArrayLit(vec![ct]), Type { elem: ct_ty.elem, shape: [vec![Size::constant(1)], ct_ty.shape].concat() }, "ct");
        self.accumulate(b, *v, idx.len(), is, vs, false);
    }

    fn add_rows(&mut self, b: &mut Builder, arr: &Atom, idxs: Atom, vals: Atom) {
        if let Atom::Var(v) = arr
            && self.active.contains(v)
        {
            // a record (pairs) when `arr` is from outside a parallel loop:
            // a window `x[i:i+3]` then costs its length, not `x`'s
            let conditional = self.outside_loop(*v).unwrap_or(false);
            self.record(b, Record { arr: *v, kind: Kind::Pairs { flat: idxs, axes: 1, bulk: 1 }, ct: vals, conditional, nested: false });
        }
    }
}

impl Rev {
    /// The whole cotangent of `v` (removed: every use has been seen).
    fn take(&mut self, b: &mut Builder, v: VarId) -> Option<Atom> {
        self.flush(b, v);
        self.adj.dense.remove(&v)
    }

    fn has_cotangent(&self, v: VarId) -> bool {
        self.adj.dense.contains_key(&v) || self.adj.cells.contains_key(&v)
    }

    /// Fold the constant-index cells of `v` into its whole cotangent: an
    /// array literal when the indexed axes are small and fixed, else one
    /// `scatter_add` per cell.
    fn flush(&mut self, b: &mut Builder, v: VarId) {
        let Some(cells) = self.adj.cells.remove(&v) else { return };
        let ty = b.type_of(&Atom::Var(v));
        let l = cells[0].0.len();
        let dims: Option<Vec<i64>> = ty.shape[..l].iter().map(Size::as_const).collect();
        match dims {
            Some(dims) if cells.iter().all(|c| c.0.len() == l) && dims.iter().product::<i64>() <= 64 => {
                let dense = literal_of_cells(b, &ty, &dims, &cells, &mut vec![]);
                self.add(b, &Atom::Var(v), dense);
            }
            _ => {
                for (key, ct) in cells {
                    let idx: Vec<Atom> = key.iter().map(|k| lit(Scalar::I64, *k as f64)).collect();
                    let flat = flat_index(b, &idx, &ty.shape);
                    let is = b.emit(Expr::ArrayLit(vec![flat]), Type::array(Scalar::I64, vec![Size::constant(1)]), "at");
                    let ct_ty = b.type_of(&ct);
                    let vs = b.emit(Expr::ArrayLit(vec![ct]), Type { elem: ct_ty.elem, shape: [vec![Size::constant(1)], ct_ty.shape].concat() }, "ct");
                    self.accumulate(b, v, idx.len(), is, vs, false);
                }
            }
        }
    }

    /// Fold every cell into whole cotangents (before a scope hands its
    /// cotangents on).
    fn flush_all(&mut self, b: &mut Builder) {
        let mut vs: Vec<VarId> = self.adj.cells.keys().copied().collect();
        vs.sort();
        for v in vs {
            self.flush(b, v);
        }
    }

    /// Add `vals` (rows) at the flat indices `idxs` over the first `l` axes
    /// of the cotangent of `v`; `guarded`: skip it when those axes are empty
    /// (then every pair is a placeholder from a branch not taken).
    fn accumulate(&mut self, b: &mut Builder, v: VarId, l: usize, idxs: Atom, vals: Atom, guarded: bool) {
        let ty = b.type_of(&Atom::Var(v));
        let cur = match self.adj.dense.remove(&v) {
            Some(c) => c,
            None => b.zeros(&ty),
        };
        let new = if guarded {
            let cells = ty.shape[..l].iter().fold(Size::constant(1), |a, d| a.mul(d));
            let cells = b.size(&cells);
            let any = b.prim(Prim::Gt, vec![cells, lit(Scalar::I64, 0.0)], Scalar::Bool);
            b.begin();
            let r = scatter_flat(b, cur, &ty, l, idxs, vals);
            let then_b = Block { stmts: b.end(), result: vec![r] };
            let else_b = Block { stmts: vec![], result: vec![cur] };
            b.emit(Expr::If { cond: any, then_b, else_b }, ty, "acc")
        } else {
            scatter_flat(b, cur, &ty, l, idxs, vals)
        };
        self.adj.dense.insert(v, new);
    }

    /// Transpose a list of primal statements backwards, emitting into `b`.
    /// A statement may be replaced (a loop that must save its states).
    fn rev_stmts(&mut self, b: &mut Builder, stmts: &mut Vec<Stmt>) -> Result<(), AdError> {
        let mut k = stmts.len();
        while k > 0 {
            k -= 1;
            let replacement = self.rev_stmt(b, &mut stmts[k]).map_err(|mut e| {
                e.loc = e.loc.or_else(|| stmts[k].loc.clone());
                e
            })?;
            if let Some(rep) = replacement {
                self.note_bound(&rep);
                stmts.splice(k..k + 1, rep);
            }
        }
        Ok(())
    }

    /// What a replacement of a primal statement binds is bound inside the
    /// current parallel loop (or branch in it): records whose sizes mention
    /// it cannot leave the iteration.
    fn note_bound(&mut self, stmts: &[Stmt]) {
        if let Some(Frame::For { bound, .. } | Frame::Branch { outer_bound: bound, .. }) = self.frames.last_mut() {
            bound.extend(bound_vars_block(&Block { stmts: stmts.to_vec(), result: vec![] }));
        }
    }

    fn rev_stmt(&mut self, b: &mut Builder, s: &mut Stmt) -> Result<Option<Vec<Stmt>>, AdError> {
        match &s.expr {
            Expr::For { .. } => {
                let hoisted = self.rev_for(b, s)?;
                if !hoisted.is_empty() {
                    return Ok(Some([hoisted, vec![s.clone()]].concat()));
                }
            }
            Expr::If { .. } => self.rev_if(b, s)?,
            Expr::Loop { .. } => return self.rev_loop(b, s),
            Expr::Prim(op, args) => {
                let (op, args) = (*op, args.clone());
                self.rev_prim(b, s, op, &args)?
            }
            Expr::Reduce { op: ReduceOp::Add, arrs, .. } | Expr::Scan { op: ReduceOp::Add, arrs, .. } => {
                let scan = matches!(s.expr, Expr::Scan { .. });
                for (j, arr) in arrs.clone().into_iter().enumerate() {
                    if let Some(ct) = self.take(b, s.binds[j].var) {
                        let e = if scan {
                            Expr::Scan { op: ReduceOp::Add, ne: vec![], arrs: vec![arr] }
                        } else {
                            Expr::Reduce { op: ReduceOp::Add, ne: vec![], arrs: vec![arr] }
                        };
                        let one = Stmt { binds: vec![s.binds[j].clone()], expr: e, loc: None };
                        transpose(b, self, &one, ct)?;
                    }
                }
            }
            Expr::Reduce { op: op @ (ReduceOp::Max | ReduceOp::Min), arrs, ne } if b.type_of(&arrs[0]).rank() == 1 => {
                let (max, arr, y) = (matches!(op, ReduceOp::Max), arrs[0], s.binds[0].clone());
                if let [ne] = ne.as_slice()
                    && is_extremum_identity(max, ne)
                    && self.has_cotangent(y.var)
                    && self.linear(&arr)
                {
                    let (fwd, k) = extremum_by_position(b, &y, max, arr, *ne, s.loc.clone());
                    self.rev_extremum(b, y.var, max, arr, Some(k));
                    return Ok(Some(fwd));
                }
                self.rev_extremum(b, y.var, max, arr, None)
            }
            Expr::Reduce { op: ReduceOp::Mul, arrs, .. } if arrs.len() == 1 => {
                let arr = arrs[0];
                self.rev_product(b, s.binds[0].var, arr)
            }
            Expr::Reduce { .. } | Expr::Scan { .. } => {
                if s.binds.iter().all(|x| !self.has_cotangent(x.var)) {
                    return Ok(None);
                }
                // A user operator (or a product/extremum scan) has no
                // parallel transpose here: it runs as a sequential fold.
                let (mut rep, mut lp) = fold_as_loop(b, s);
                // its trip count is computed here, not before the loop
                self.note_bound(&rep);
                mark_active(std::slice::from_ref(&lp), &mut self.active);
                match self.rev_loop(b, &mut lp)? {
                    Some(r) => rep.extend(r),
                    None => rep.push(lp),
                }
                return Ok(Some(rep));
            }
            Expr::Jvp { .. } | Expr::Vjp { .. } => {
                return Err(AdError { message: "internal: a nested derivative was not expanded first".into(), loc: s.loc.clone() });
            }
            Expr::CustomJvp { rule, args, .. } => {
                let (rule, args) = (rule.clone(), args.clone());
                self.rev_custom(b, s, &rule, &args)?;
            }
            // printed in the forward sweep; cotangents pass through unprinted
            Expr::Trace { args, .. } => {
                for (x, a) in s.binds.clone().iter().zip(args.clone()) {
                    if let Some(ct) = self.take(b, x.var) {
                        Cotangents::add(self, b, &a, ct);
                    }
                }
            }
            _ => {
                if let Some(ct) = s.binds.first().and_then(|x| self.take(b, x.var)) {
                    transpose(b, self, s, ct)?;
                }
            }
        }
        Ok(None)
    }

    /// A user rule in reverse: the rule is linear in its tangents, so its
    /// transpose at the arguments is the reverse derivative, at any point,
    /// of the rule as a function of the tangents alone (the arguments
    /// constants to it); that derivative is expanded here, and its
    /// cotangents of the tangents are those of the arguments.
    fn rev_custom(&mut self, b: &mut Builder, s: &Stmt, rule: &Lambda, args: &[Atom]) -> Result<(), AdError> {
        let cts: Vec<Option<Atom>> = s.binds.iter().map(|x| if x.ty.elem.is_float() { self.take(b, x.var) } else { None }).collect();
        if cts.iter().all(Option::is_none) {
            return Ok(());
        }
        let cts: Vec<Atom> = s.binds.iter().zip(cts).map(|(x, c)| c.unwrap_or_else(|| b.zeros(&x.ty))).collect();
        let k = args.len();
        let mut map: FxHashMap<VarId, Atom> = rule.params[..k].iter().map(|p| p.var).zip(args.iter().copied()).collect();
        // the rule's parameters for the function's results: the primal's
        map.extend(rule.params[2 * k..].iter().map(|p| p.var).zip(s.binds.iter().map(|x| Atom::Var(x.var))));
        let mut tangents = vec![];
        for p in &rule.params[k..2 * k] {
            let n = b.name(p.var);
            let t = Binder { var: b.fresh(&n), ty: p.ty.clone() };
            map.insert(p.var, Atom::Var(t.var));
            tangents.push(t);
        }
        let mut fresh = |v: VarId| {
            let n = b.name(v);
            b.fresh(&n)
        };
        let body = Copier { map, fresh: Some(&mut fresh) }.block(&rule.body);
        let at: Vec<Atom> = tangents.iter().map(|t| b.zeros(&t.ty)).collect();
        let lam = Lambda { params: tangents, body };
        let mut binds: Vec<Binder> = s.binds.iter().map(|x| Binder { var: b.fresh("dres"), ty: x.ty.clone() }).collect();
        binds.extend(lam.params.iter().map(|t| Binder { var: b.fresh("tbar"), ty: t.ty.clone() }));
        expand_vjp(b, &lam, &at, &cts, &binds, s.loc.as_ref())?;
        for (a, x) in args.iter().zip(&binds[s.binds.len()..]) {
            if x.ty.elem.is_float() {
                Cotangents::add(self, b, a, Atom::Var(x.var));
            }
        }
        Ok(())
    }

    /// Linearize `y = op(args)` with its JVP rule on placeholder tangents,
    /// split the rule's output into residual and linear statements, and
    /// transpose the linear ones.
    fn rev_prim(&mut self, b: &mut Builder, s: &Stmt, op: Prim, args: &[Atom]) -> Result<(), AdError> {
        let y = s.binds[0].var;
        let Some(ct) = self.take(b, y) else { return Ok(()) };
        let mut holes: FxHashSet<VarId> = FxHashSet::default();
        let dargs: Vec<Option<Atom>> = args
            .iter()
            .map(|a| {
                let ty = b.type_of(a);
                (self.linear(a) && ty.elem.is_float()).then(|| {
                    let t = b.fresh("t");
                    b.set_type(t, ty);
                    holes.insert(t);
                    Atom::Var(t)
                })
            })
            .collect();
        b.begin();
        let dy = prim_jvp(b, op, args, Atom::Var(y), &dargs, s.binds[0].ty.elem);
        let lin = b.end();
        let Some(Atom::Var(dy)) = dy? else { return Ok(()) };
        let mut local = Linear { lin: holes, adj: FxHashMap::default() };
        let mut linear_stmts = vec![];
        for st in lin {
            if free_vars_stmt(&st).iter().any(|v| local.lin.contains(v)) {
                local.lin.extend(st.binds.iter().map(|x| x.var));
                linear_stmts.push(st);
            } else {
                b.push(st);
            }
        }
        local.adj.insert(dy, ct);
        for st in linear_stmts.iter().rev() {
            if let Some(c) = local.adj.remove(&st.binds[0].var) {
                transpose(b, &mut local, st, c)?;
            }
        }
        for (a, t) in args.iter().zip(&dargs) {
            if let Some(Atom::Var(t)) = t
                && let Some(c) = local.adj.remove(t)
            {
                self.add(b, a, c);
            }
        }
        Ok(())
    }

    /// `maximum`/`minimum` of a vector: the cotangent goes to the first
    /// extremal element (LANGUAGE.md §7), at position `at` (found by the
    /// forward sweep), or found again with `argmax`.
    fn rev_extremum(&mut self, b: &mut Builder, y: VarId, max: bool, arr: Atom, at: Option<Atom>) {
        let Some(ct) = self.take(b, y) else { return };
        if !self.linear(&arr) {
            return;
        }
        let k = at.unwrap_or_else(|| extremum_position(b, max, arr));
        let at = b.type_of(&arr);
        let ivar = b.fresh("i");
        b.begin();
        let hit = b.prim(Prim::Eq, vec![Atom::Var(ivar), k], Scalar::Bool);
        let v = b.prim(Prim::Select, vec![hit, ct, lit(at.elem, 0.0)], at.elem);
        let body = Block { stmts: b.end(), result: vec![v] };
        let xbar = b.emit(Expr::For { ivar, size: at.shape[0].clone(), body }, at, "ext");
        if let Atom::Var(v) = xbar {
            b.onehot.push(v);
        }
        self.add(b, &arr, xbar);
    }

    /// `product`: element i gets `ct` times the product of all the others,
    /// from exclusive prefix and suffix products (exact with zeros).
    fn rev_product(&mut self, b: &mut Builder, y: VarId, arr: Atom) {
        let Some(ct) = self.take(b, y) else { return };
        if !self.linear(&arr) {
            return;
        }
        let at = b.type_of(&arr);
        let (row, e) = (at.row(), at.elem);
        let one = lit(e, 1.0);
        let pre = b.emit(Expr::Scan { op: ReduceOp::Mul, ne: vec![one], arrs: vec![arr] }, at.clone(), "pre");
        let rv = b.emit(Expr::Reverse(arr), at.clone(), "rev");
        let sr = b.emit(Expr::Scan { op: ReduceOp::Mul, ne: vec![one], arrs: vec![rv] }, at.clone(), "suf");
        let suf = b.emit(Expr::Reverse(sr), at.clone(), "suf");
        let n = b.size(&at.shape[0]);
        let last = b.prim(Prim::Sub, vec![n, lit(Scalar::I64, 1.0)], Scalar::I64);
        let ivar = b.fresh("i");
        let i = Atom::Var(ivar);
        b.begin();
        let il = b.prim(Prim::Sub, vec![i, lit(Scalar::I64, 1.0)], Scalar::I64);
        let il = b.prim(Prim::Max, vec![il, lit(Scalar::I64, 0.0)], Scalar::I64);
        let ir = b.prim(Prim::Add, vec![i, lit(Scalar::I64, 1.0)], Scalar::I64);
        let ir = b.prim(Prim::Min, vec![ir, last], Scalar::I64);
        let (l, r) = (b.index(pre, vec![il]), b.index(suf, vec![ir]));
        let first = b.prim(Prim::Eq, vec![i, lit(Scalar::I64, 0.0)], Scalar::Bool);
        let is_last = b.prim(Prim::Eq, vec![i, last], Scalar::Bool);
        let outs = elementwise(b, &row.shape, e, &[l, r, ct], &|b, v| {
            let l = b.prim(Prim::Select, vec![first, one, v[0]], e);
            let r = b.prim(Prim::Select, vec![is_last, one, v[1]], e);
            let lr = b.prim(Prim::Mul, vec![l, r], e);
            vec![b.prim(Prim::Mul, vec![v[2], lr], e)]
        });
        let body = Block { stmts: b.end(), result: outs };
        let xbar = b.emit(Expr::For { ivar, size: at.shape[0].clone(), body }, at, "prod");
        self.add(b, &arr, xbar);
    }

    /// A renamed copy of `blk` (with `map` applied) whose types are known to
    /// `b` and whose variables are active where the originals were.
    fn recompute(&mut self, b: &mut Builder, blk: &Block, map: FxHashMap<VarId, Atom>) -> Block {
        self.recompute_mapped(b, blk, map).0
    }

    /// [`Rev::recompute`], also returning the renaming (original variable
    /// to its copy).
    fn recompute_mapped(&mut self, b: &mut Builder, blk: &Block, map: FxHashMap<VarId, Atom>) -> (Block, FxHashMap<VarId, Atom>) {
        let (copy, map) = {
            let mut fresh = |v: VarId| {
                let n = b.name(v);
                b.fresh(&n)
            };
            let mut cp = Copier { map, fresh: Some(&mut fresh) };
            let blk = cp.block(blk);
            (blk, cp.map)
        };
        for s in &copy.stmts {
            b.declare(s);
        }
        for (orig, new) in &map {
            if let (Atom::Var(w), true) = (new, self.active.contains(orig)) {
                self.active.insert(*w);
            }
        }
        (copy, map)
    }

    /// The active float variables a statement reads from outside: their
    /// cotangents are threaded through a transposed branch or loop.
    fn threaded(&self, b: &Builder, s: &Stmt) -> Vec<VarId> {
        let free = match &s.expr {
            // the initial state is not read inside the loop
            Expr::Loop { params, kind, body, .. } => {
                let mut f = free_vars_block(body);
                if let LoopKind::While { cond } = kind {
                    f.extend(free_vars_block(cond));
                }
                for p in params {
                    f.remove(&p.var);
                }
                if let LoopKind::Count { ivar, .. } = kind {
                    f.remove(ivar);
                }
                f
            }
            _ => free_vars_stmt(s),
        };
        let mut t: Vec<VarId> = free.into_iter().filter(|v| self.active.contains(v) && b.type_of(&Atom::Var(*v)).elem.is_float()).collect();
        t.sort();
        t
    }

    /// The current cotangents of `vars` (zeros where there is none yet).
    fn current(&mut self, b: &mut Builder, vars: &[VarId]) -> Vec<Atom> {
        vars.iter()
            .map(|v| match self.take(b, *v) {
                Some(a) => a,
                None => b.zeros(&b.type_of(&Atom::Var(*v))),
            })
            .collect()
    }

    /// Transposed `if`: an `if` on the same condition whose branches
    /// recompute the primal branch and transpose it, threading the
    /// cotangents of outside variables through.
    fn rev_if(&mut self, b: &mut Builder, s: &mut Stmt) -> Result<(), AdError> {
        let cts: Vec<Option<Atom>> = s.binds.iter().map(|x| self.take(b, x.var)).collect();
        if cts.iter().all(Option::is_none) {
            return Ok(());
        }
        let outer_bound = match self.frames.last() {
            Some(Frame::For { bound, .. }) => Some(bound.clone()),
            Some(Frame::Branch { outer_bound, .. }) => Some(outer_bound.clone()),
            _ => None,
        };
        if let Some(outer_bound) = outer_bound {
            return self.rev_if_in_for(b, s, cts, outer_bound);
        }
        let threaded = self.threaded(b, s);
        // A variable with no cotangent yet starts with none in each branch
        // (zeros only where a branch gives it nothing): starting both from
        // zeros made a branch that passes a cotangent on (`if c then u
        // else v` in a loop) add it to zeros, a whole copy per iteration
        // where the function copies nothing (issue 24, complexity seed 707).
        let cur: Vec<Option<Atom>> = threaded.iter().map(|v| self.take(b, *v)).collect();
        let Expr::If { cond, then_b, else_b } = &s.expr else { unreachable!("checked by the caller") };
        let mut branches = vec![];
        for blk in [then_b, else_b] {
            let mut copy = self.recompute(b, blk, FxHashMap::default());
            let init = threaded.iter().zip(&cur).filter_map(|(v, c)| c.map(|c| (*v, c))).collect();
            let (rev, outs) = self.seq_scope(b, &mut copy, init, &cts, &threaded)?;
            branches.push(Block { stmts: [copy.stmts, rev].concat(), result: outs });
        }
        let else_b = branches.pop().expect("two branches");
        let then_b = branches.pop().expect("two branches");
        let tys: Vec<Type> = threaded.iter().map(|v| b.type_of(&Atom::Var(*v))).collect();
        let outs = b.emit_many(Expr::If { cond: *cond, then_b, else_b }, tys, "adj");
        for (v, o) in threaded.iter().zip(outs) {
            self.add(b, &Atom::Var(*v), o);
        }
        Ok(())
    }

    /// Transpose `blk` (its results have the cotangents `cts`) into `b`'s
    /// current statements, then fold pending cells into whole cotangents.
    fn sweep(&mut self, b: &mut Builder, blk: &mut Block, cts: &[Option<Atom>]) -> Result<(), AdError> {
        for (k, c) in cts.iter().enumerate() {
            if let Some(c) = c {
                self.add(b, &blk.result[k], *c);
            }
        }
        let swept = self.rev_stmts(b, &mut blk.stmts);
        self.flush_all(b);
        swept
    }

    /// Enter a scope (`frame`) whose cotangents start as `init`, begin a
    /// statement list and transpose `copy` into it; returns the enclosing
    /// scope's cotangents (to restore), the outcome, and the final
    /// cotangents of `threaded` (zeros where none).
    fn open_scope(
        &mut self,
        b: &mut Builder,
        copy: &mut Block,
        init: FxHashMap<VarId, Atom>,
        cts: &[Option<Atom>],
        threaded: &[VarId],
        frame: Frame,
    ) -> (Adjoints, Result<(), AdError>, Vec<Atom>) {
        let outer = std::mem::replace(&mut self.adj, Adjoints { dense: init, cells: FxHashMap::default() });
        self.frames.push(frame);
        b.begin();
        let swept = self.sweep(b, copy, cts);
        let outs = threaded.iter().map(|v| self.adj.dense.get(v).copied().unwrap_or_else(|| b.zeros(&b.type_of(&Atom::Var(*v))))).collect();
        (outer, swept, outs)
    }

    /// Transpose a recomputed block in a sequential scope whose accumulators
    /// start as `init`; the block's results get the cotangents `cts`.
    /// Returns the transpose (the copy's statements may have been changed
    /// to store what it needs) and the final cotangents of `threaded`.
    fn seq_scope(
        &mut self,
        b: &mut Builder,
        copy: &mut Block,
        init: FxHashMap<VarId, Atom>,
        cts: &[Option<Atom>],
        threaded: &[VarId],
    ) -> Result<(Vec<Stmt>, Vec<Atom>), AdError> {
        let (outer, swept, outs) = self.open_scope(b, copy, init, cts, threaded, Frame::Seq);
        let rev = b.end();
        self.frames.pop();
        self.adj = outer;
        swept?;
        Ok((rev, outs))
    }
}

/// The position of the first extremal element of `arr` (`argmax`), 0 when
/// it is empty.
fn extremum_position(b: &mut Builder, max: bool, arr: Atom) -> Atom {
    let at = b.type_of(&arr);
    let n = b.size(&at.shape[0]);
    let nonempty = b.prim(Prim::Gt, vec![n, lit(Scalar::I64, 0.0)], Scalar::Bool);
    b.begin();
    let k = b.emit(Expr::ArgExt { max, arr }, Type::scalar(Scalar::I64), "arg");
    let then_b = Block { stmts: b.end(), result: vec![k] };
    let else_b = Block { stmts: vec![], result: vec![lit(Scalar::I64, 0.0)] };
    b.emit(Expr::If { cond: nonempty, then_b, else_b }, Type::scalar(Scalar::I64), "arg")
}

/// Whether `ne` is the identity of `max` (`min`): `-inf` (`inf`) or the
/// integer type's least (greatest) value, so that a reduction from it is
/// its array's first extremal element, or `ne` when the array is empty.
fn is_extremum_identity(max: bool, ne: &Atom) -> bool {
    match (ne, max) {
        (Atom::Lit(Lit::F64(x)), _) => *x == if max { f64::NEG_INFINITY } else { f64::INFINITY },
        (Atom::Lit(Lit::F32(x)), _) => *x == if max { f32::NEG_INFINITY } else { f32::INFINITY },
        (Atom::Lit(Lit::I64(x)), true) => *x == i64::MIN,
        (Atom::Lit(Lit::I64(x)), false) => *x == i64::MAX,
        (Atom::Lit(Lit::I32(x)), true) => *x == i32::MIN,
        (Atom::Lit(Lit::I32(x)), false) => *x == i32::MAX,
        _ => false,
    }
}

/// The forward sweep's `y = reduce max ne arr` (`ne` its identity) when the
/// cotangent needs the extremum's position: the position once, then `y`
/// read there (or `ne` for an empty array). The same bits: the reduction
/// and `argmax` both take the first NaN, else the first extremal element
/// (ties of ±0 included); one pass over `arr` instead of two (reverse
/// mode's logsumexp read its input once for `maximum`, once for `argmax`).
fn extremum_by_position(b: &mut Builder, y: &Binder, max: bool, arr: Atom, ne: Atom, loc: Option<Loc>) -> (Vec<Stmt>, Atom) {
    b.begin();
    let k = extremum_position(b, max, arr);
    let at = b.type_of(&arr);
    let n = b.size(&at.shape[0]);
    let nonempty = b.prim(Prim::Gt, vec![n, lit(Scalar::I64, 0.0)], Scalar::Bool);
    b.begin();
    let v = b.emit(Expr::Index { arr, idx: vec![k], checks: vec![None] }, Type::scalar(at.elem), "ext");
    let then_b = Block { stmts: b.end(), result: vec![v] };
    let else_b = Block { stmts: vec![], result: vec![ne] };
    b.push(Stmt { binds: vec![y.clone()], expr: Expr::If { cond: nonempty, then_b, else_b }, loc });
    (b.end(), k)
}

/// Add `ct` to the cotangent of `v` kept in `map` (the first one is just
/// recorded: no addition with zero).
fn add_into(map: &mut FxHashMap<VarId, Atom>, b: &mut Builder, v: VarId, ct: Atom) {
    let sum = match map.get(&v) {
        Some(cur) => b.add_values(&b.type_of(&Atom::Var(v)), *cur, ct),
        None => ct,
    };
    map.insert(v, sum);
}

/// An array literal of the cells (zeros elsewhere) over the axes `dims`.
fn literal_of_cells(b: &mut Builder, ty: &Type, dims: &[i64], cells: &[(Vec<i64>, Atom)], at: &mut Vec<i64>) -> Atom {
    let k = at.len();
    if k == dims.len() {
        return match cells.iter().find(|c| c.0 == *at) {
            Some(c) => c.1,
            None => b.zeros(&Type { elem: ty.elem, shape: ty.shape[k..].to_vec() }),
        };
    }
    let mut rows = vec![];
    for i in 0..dims[k] {
        at.push(i);
        rows.push(literal_of_cells(b, ty, dims, cells, at));
        at.pop();
    }
    b.emit(Expr::ArrayLit(rows), Type { elem: ty.elem, shape: ty.shape[k..].to_vec() }, "cells")
}

/// Cotangents of the placeholder tangents while transposing one linearized
/// primitive.
struct Linear {
    lin: FxHashSet<VarId>,
    adj: FxHashMap<VarId, Atom>,
}

impl Cotangents for Linear {
    fn linear(&self, a: &Atom) -> bool {
        matches!(a, Atom::Var(v) if self.lin.contains(v))
    }

    fn add(&mut self, b: &mut Builder, a: &Atom, ct: Atom) {
        if let Atom::Var(v) = a
            && self.lin.contains(v)
        {
            add_into(&mut self.adj, b, *v, ct);
        }
    }

    fn add_at(&mut self, _: &mut Builder, _: &Atom, _: &[Atom], _: Atom) {}

    fn add_rows(&mut self, _: &mut Builder, _: &Atom, _: Atom, _: Atom) {}
}
