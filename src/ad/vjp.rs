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
//! loop stores its state at every iteration and *recomputes* the body from
//! it, an `if` recomputes the branch taken; docs/ARCHITECTURE.md explains why.

use super::build::{lit, size_of_atom, Builder};
use super::jvp::elementwise;
use super::rules::prim_jvp;
use super::transpose::{transpose, Cotangents};
use super::AdError;
use crate::ir::walk::{bound_vars_block, dce, free_vars_block, free_vars_stmt, Copier};
use crate::ir::{Atom, Binder, Block, Expr, Lambda, Loc, LoopKind, Prim, ReduceOp, Scalar, Size, Stmt, Type, VarId};
use rustc_hash::{FxHashMap, FxHashSet};

/// Expand `binds = vjp lam primals cotangents` into statements of `b`.
pub(super) fn expand_vjp(
    b: &mut Builder,
    lam: &Lambda,
    primals: &[Atom],
    cotangents: &[Atom],
    binds: &[Binder],
    loc: Option<&Loc>,
) -> Result<(), AdError> {
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
            match r.adj.remove(&lam.params[k - n].var) {
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
        match &s.expr {
            Expr::For { body, .. } => mark_active(&body.stmts, active),
            Expr::Loop { params, body, .. } => {
                float(params, active);
                mark_active(&body.stmts, active);
            }
            Expr::If { then_b, else_b, .. } => {
                mark_active(&then_b.stmts, active);
                mark_active(&else_b.stmts, active);
            }
            Expr::Reduce { op: ReduceOp::Lambda(l), .. } | Expr::Scan { op: ReduceOp::Lambda(l), .. } => {
                float(&l.params, active);
                mark_active(&l.body.stmts, active);
            }
            _ => {}
        }
    }
}

/// A read `arr[idx]` of an array bound outside the parallel `for` being
/// transposed: its cotangent leaves the loop as (index, value) pairs.
struct Sparse {
    arr: VarId,
    /// how many leading axes the index covers
    axes: usize,
    /// the row-major position over those axes
    flat: Atom,
    ct: Atom,
    /// the index itself (empty for pairs from a branch)
    idx: Vec<Atom>,
    /// from a branch: the pair is (0, zeros) when the other branch ran
    conditional: bool,
    /// leading axes of `flat` and `ct` holding many pairs (from inner loops)
    bulk: usize,
}

enum Frame {
    /// The body of a parallel `for`: iterations cannot share an accumulator.
    For { bound: FxHashSet<VarId>, sparse: Vec<Sparse> },
    /// A branch of an `if` inside such a body: reads of arrays from outside
    /// the `for` still leave as (index, value) pairs.
    Branch { outer_bound: FxHashSet<VarId>, sparse: Vec<Sparse> },
    /// A branch or a sequential loop body elsewhere: accumulators are
    /// threaded through.
    Seq,
}

/// How a result of a transposed `for` is added to the cotangents outside it.
enum Use {
    /// one cotangent per iteration, summed (`reduce (+)`)
    Dense(VarId),
    /// row i of `arr[prefix]` comes from iteration i: a plain write (then
    /// added at `prefix`, which the loop does not change)
    Plain(VarId, Vec<Atom>),
    /// (flat index, value) pairs per iteration (`bulk` axes of them) over so
    /// many axes of the array, accumulated by `scatter_add` (guarded against
    /// an empty array for branch pairs) or handed to an enclosing loop
    Sparse { arr: VarId, axes: usize, conditional: bool, bulk: usize },
}

#[derive(Default)]
struct Rev {
    /// Cotangent accumulated so far for each variable.
    adj: FxHashMap<VarId, Atom>,
    active: FxHashSet<VarId>,
    frames: Vec<Frame>,
}

impl Cotangents for Rev {
    fn linear(&self, a: &Atom) -> bool {
        matches!(a, Atom::Var(v) if self.active.contains(v))
    }

    fn add(&mut self, b: &mut Builder, a: &Atom, ct: Atom) {
        let Atom::Var(v) = a else { return };
        if !self.active.contains(v) {
            return;
        }
        let ty = b.type_of(a);
        let sum = match self.adj.get(v) {
            Some(cur) => b.add_values(&ty, *cur, ct),
            None => ct,
        };
        self.adj.insert(*v, sum);
    }

    fn add_at(&mut self, b: &mut Builder, arr: &Atom, idx: &[Atom], ct: Atom) {
        let Atom::Var(v) = arr else { return };
        if !self.active.contains(v) {
            return;
        }
        let ty = b.type_of(arr);
        let (outside, conditional) = match self.frames.last() {
            Some(Frame::For { bound, .. }) => (!bound.contains(v), false),
            Some(Frame::Branch { outer_bound, .. }) => (!outer_bound.contains(v), true),
            _ => (false, false),
        };
        let flat = flat_index(b, idx, &ty.shape);
        if outside {
            let rec = Sparse { arr: *v, axes: idx.len(), flat, ct, idx: idx.to_vec(), conditional, bulk: 0 };
            if let Some(Frame::For { sparse, .. } | Frame::Branch { sparse, .. }) = self.frames.last_mut() {
                sparse.push(rec);
            }
            return;
        }
        let is = b.emit(Expr::ArrayLit(vec![flat]), Type::array(Scalar::I64, vec![Size::constant(1)]), "at");
        let ct_ty = b.type_of(&ct);
        let vs = b.emit(Expr::ArrayLit(vec![ct]), Type { elem: ct_ty.elem, shape: [vec![Size::constant(1)], ct_ty.shape].concat() }, "ct");
        self.accumulate(b, *v, idx.len(), is, vs, false);
    }

    fn add_rows(&mut self, b: &mut Builder, arr: &Atom, idxs: Atom, vals: Atom) {
        if let Atom::Var(v) = arr {
            if self.active.contains(v) {
                self.accumulate(b, *v, 1, idxs, vals, false);
            }
        }
    }
}

impl Rev {
    fn take(&mut self, v: VarId) -> Option<Atom> {
        self.adj.remove(&v)
    }

    /// Add `vals` (rows) at the flat indices `idxs` over the first `l` axes
    /// of the cotangent of `v`; `guarded`: skip it when those axes are empty
    /// (then every pair is a placeholder from a branch not taken).
    fn accumulate(&mut self, b: &mut Builder, v: VarId, l: usize, idxs: Atom, vals: Atom, guarded: bool) {
        let ty = b.type_of(&Atom::Var(v));
        let cur = match self.adj.remove(&v) {
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
        self.adj.insert(v, new);
    }

    /// (index, value) pairs for an array: handed on to the enclosing parallel
    /// loop when the array comes from outside it too, else accumulated here.
    fn pairs(&mut self, b: &mut Builder, rec: Sparse) {
        let outside = match self.frames.last() {
            Some(Frame::For { bound, .. }) => !bound.contains(&rec.arr),
            Some(Frame::Branch { outer_bound, .. }) => !outer_bound.contains(&rec.arr),
            _ => false,
        };
        if outside {
            if let Some(Frame::For { sparse, .. } | Frame::Branch { sparse, .. }) = self.frames.last_mut() {
                sparse.push(rec);
            }
            return;
        }
        let (mut flat, mut ct) = (rec.flat, rec.ct);
        for _ in 1..rec.bulk {
            flat = flatten_outer(b, flat);
            ct = flatten_outer(b, ct);
        }
        self.accumulate(b, rec.arr, rec.axes, flat, ct, rec.conditional);
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
                stmts.splice(k..k + 1, rep);
            }
        }
        Ok(())
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
                    if let Some(ct) = self.take(s.binds[j].var) {
                        let e = if scan { Expr::Scan { op: ReduceOp::Add, ne: vec![], arrs: vec![arr] } } else { Expr::Reduce { op: ReduceOp::Add, ne: vec![], arrs: vec![arr] } };
                        let one = Stmt { binds: vec![s.binds[j].clone()], expr: e, loc: None };
                        transpose(b, self, &one, ct)?;
                    }
                }
            }
            Expr::Reduce { op: op @ (ReduceOp::Max | ReduceOp::Min), arrs, .. } if b.type_of(&arrs[0]).rank() == 1 => {
                let (max, arr) = (matches!(op, ReduceOp::Max), arrs[0]);
                self.rev_extremum(b, s.binds[0].var, max, arr)
            }
            Expr::Reduce { op: ReduceOp::Mul, arrs, .. } if arrs.len() == 1 => {
                let arr = arrs[0];
                self.rev_product(b, s.binds[0].var, arr)
            }
            Expr::Reduce { .. } | Expr::Scan { .. } => {
                if s.binds.iter().all(|x| !self.adj.contains_key(&x.var)) {
                    return Ok(None);
                }
                // A user operator (or a product/extremum scan) has no
                // parallel transpose here: it runs as a sequential fold.
                let (mut rep, mut lp) = fold_as_loop(b, s);
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
            _ => {
                if let Some(ct) = s.binds.first().and_then(|x| self.adj.remove(&x.var)) {
                    transpose(b, self, s, ct)?;
                }
            }
        }
        Ok(None)
    }

    /// Linearize `y = op(args)` with its JVP rule on placeholder tangents,
    /// split the rule's output into residual and linear statements, and
    /// transpose the linear ones.
    fn rev_prim(&mut self, b: &mut Builder, s: &Stmt, op: Prim, args: &[Atom]) -> Result<(), AdError> {
        let y = s.binds[0].var;
        let Some(ct) = self.take(y) else { return Ok(()) };
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
            if let Some(Atom::Var(t)) = t {
                if let Some(c) = local.adj.remove(t) {
                    self.add(b, a, c);
                }
            }
        }
        Ok(())
    }

    /// `maximum`/`minimum` of a vector: the cotangent goes to the first
    /// extremal element (LANGUAGE.md §7), found again with `argmax`.
    fn rev_extremum(&mut self, b: &mut Builder, y: VarId, max: bool, arr: Atom) {
        let Some(ct) = self.take(y) else { return };
        if !self.linear(&arr) {
            return;
        }
        let at = b.type_of(&arr);
        let n = b.size(&at.shape[0]);
        let nonempty = b.prim(Prim::Gt, vec![n, lit(Scalar::I64, 0.0)], Scalar::Bool);
        b.begin();
        let k = b.emit(Expr::ArgExt { max, arr }, Type::scalar(Scalar::I64), "arg");
        let then_b = Block { stmts: b.end(), result: vec![k] };
        let else_b = Block { stmts: vec![], result: vec![lit(Scalar::I64, 0.0)] };
        let k = b.emit(Expr::If { cond: nonempty, then_b, else_b }, Type::scalar(Scalar::I64), "arg");
        let ivar = b.fresh("i");
        b.begin();
        let hit = b.prim(Prim::Eq, vec![Atom::Var(ivar), k], Scalar::Bool);
        let v = b.prim(Prim::Select, vec![hit, ct, lit(at.elem, 0.0)], at.elem);
        let body = Block { stmts: b.end(), result: vec![v] };
        let xbar = b.emit(Expr::For { ivar, size: at.shape[0].clone(), body }, at, "ext");
        self.add(b, &arr, xbar);
    }

    /// `product`: element i gets `ct` times the product of all the others,
    /// from exclusive prefix and suffix products (exact with zeros).
    fn rev_product(&mut self, b: &mut Builder, y: VarId, arr: Atom) {
        let Some(ct) = self.take(y) else { return };
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
        copy
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
            .map(|v| match self.adj.remove(v) {
                Some(a) => a,
                None => b.zeros(&b.type_of(&Atom::Var(*v))),
            })
            .collect()
    }

    /// Transposed `for`: again a parallel `for`, over the same index, whose
    /// body only produces cotangents; what it reads of the primal body is
    /// stored by the primal `for` as extra results.
    /// Returns the statements hoisted out of the primal body (sizes of
    /// stored arrays), to be placed before it.
    fn rev_for(&mut self, b: &mut Builder, s: &mut Stmt) -> Result<Vec<Stmt>, AdError> {
        let cts: Vec<Option<Atom>> = s.binds.iter().map(|x| self.take(x.var)).collect();
        if cts.iter().all(Option::is_none) {
            return Ok(vec![]);
        }
        let Stmt { binds, expr, loc } = s;
        let Expr::For { ivar, size, body } = expr else { unreachable!("checked by the caller") };
        let (ivar, size) = (*ivar, size.clone());
        let mut bound = bound_vars_block(body);
        bound.insert(ivar);
        let outer = std::mem::take(&mut self.adj);
        self.frames.push(Frame::For { bound: bound.clone(), sparse: vec![] });
        b.begin();
        for (k, c) in cts.iter().enumerate() {
            if let Some(c) = c {
                let row = b.index(*c, vec![Atom::Var(ivar)]);
                self.add(b, &body.result[k], row);
            }
        }
        let swept = self.rev_stmts(b, &mut body.stmts);
        let Some(Frame::For { sparse, .. }) = self.frames.pop() else { unreachable!("pushed above") };
        let local = std::mem::replace(&mut self.adj, outer);
        if let Err(e) = swept {
            b.end();
            return Err(e);
        }
        let (results, uses) = self.for_results(b, local, sparse, &bound, ivar, &size);
        // the primal body may have grown (loops saving their states)
        let mut bound = bound_vars_block(body);
        bound.insert(ivar);
        let post = b.end();
        let rev_body = Block { stmts: post, result: results };

        // residuals: what the transposed body reads of the primal body
        let top: FxHashSet<VarId> = body.stmts.iter().flat_map(|s| s.binds.iter().map(|x| x.var)).collect();
        let mut residuals: Vec<VarId> = free_vars_block(&rev_body).into_iter().filter(|v| top.contains(v)).collect();
        residuals.sort();
        let new_ivar = b.fresh(&b.name(ivar));
        b.set_type(new_ivar, Type::scalar(Scalar::I64));
        let mut map = FxHashMap::default();
        map.insert(ivar, Atom::Var(new_ivar));
        let mut hoisted = vec![];
        for &r in &residuals {
            for v in b.type_of(&Atom::Var(r)).shape.iter().flat_map(Size::vars) {
                if bound.contains(&v) && !hoist(body, v, &mut bound, &mut hoisted) {
                    return Err(AdError {
                        message: "cannot differentiate this `for`: its body keeps arrays whose size changes from one iteration to the next".into(),
                        loc: loc.clone(),
                    });
                }
            }
        }
        residuals.retain(|v| bound.contains(v));
        let remat = rematerializable(body, &residuals, ivar, &bound);
        residuals.retain(|v| !remat.iter().any(|k| body.stmts[*k].binds[0].var == *v));
        let mut reads = vec![];
        for r in residuals {
            let ty = b.type_of(&Atom::Var(r));
            let store = Binder { var: b.fresh(&format!("{}_saved", b.name(r))), ty: Type { elem: ty.elem, shape: [vec![size.clone()], ty.shape.clone()].concat() } };
            b.set_type(store.var, store.ty.clone());
            binds.push(store.clone());
            body.result.push(Atom::Var(r));
            let rr = b.fresh(&b.name(r));
            reads.push((rr, store.var, ty));
            map.insert(r, Atom::Var(rr));
        }
        let mut prefix = vec![];
        for (rr, store, ty) in reads {
            let ty = Copier { map: map.clone(), fresh: None }.ty(&ty);
            b.set_type(rr, ty.clone());
            let read = Expr::Index { arr: Atom::Var(store), idx: vec![Atom::Var(new_ivar)], checks: vec![None] };
            prefix.push(Stmt { binds: vec![Binder { var: rr, ty }], expr: read, loc: None });
        }
        let map = {
            let mut fresh = |v: VarId| {
                let n = b.name(v);
                b.fresh(&n)
            };
            let mut cp = Copier { map, fresh: Some(&mut fresh) };
            for k in remat {
                prefix.push(cp.stmt(&body.stmts[k]));
            }
            cp.map
        };
        for st in &prefix {
            b.declare(st);
        }
        let rb = Copier { map, fresh: None }.block(&rev_body);
        let tys: Vec<Type> = rb
            .result
            .iter()
            .map(|a| {
                let t = b.type_of(a);
                Type { elem: t.elem, shape: [vec![size.clone()], t.shape].concat() }
            })
            .collect();
        let body = Block { stmts: [prefix, rb.stmts].concat(), result: rb.result };
        let outs = b.emit_many(Expr::For { ivar: new_ivar, size, body }, tys, "adj");
        let mut it = outs.into_iter();
        for u in uses {
            match u {
                Use::Dense(v) => {
                    let o = it.next().expect("one result per use");
                    let vt = b.type_of(&Atom::Var(v));
                    let total = b.emit(Expr::Reduce { op: ReduceOp::Add, ne: vec![lit(vt.elem, 0.0)], arrs: vec![o] }, vt, "sum");
                    self.add(b, &Atom::Var(v), total);
                }
                Use::Plain(v, prefix) if prefix.is_empty() => {
                    let o = it.next().expect("one result per use");
                    self.add(b, &Atom::Var(v), o);
                }
                Use::Plain(v, prefix) => {
                    let o = it.next().expect("one result per use");
                    self.add_at(b, &Atom::Var(v), &prefix, o);
                }
                Use::Sparse { arr, axes, conditional, bulk } => {
                    let (flat, ct) = (it.next().expect("index"), it.next().expect("value"));
                    self.pairs(b, Sparse { arr, axes, flat, ct, idx: vec![], conditional, bulk: bulk + 1 });
                }
            }
        }
        Ok(hoisted)
    }

    /// The results of a transposed `for` body: cotangents of variables from
    /// outside the loop, dense per iteration or as (index, value) pairs.
    fn for_results(
        &mut self,
        b: &mut Builder,
        local: FxHashMap<VarId, Atom>,
        sparse: Vec<Sparse>,
        bound: &FxHashSet<VarId>,
        ivar: VarId,
        size: &Size,
    ) -> (Vec<Atom>, Vec<Use>) {
        let (mut results, mut uses) = (vec![], vec![]);
        let mut dense: Vec<(VarId, Atom)> = local.into_iter().filter(|(v, _)| !bound.contains(v)).collect();
        dense.sort_by_key(|(v, _)| *v);
        for (v, a) in dense {
            results.push(a);
            uses.push(Use::Dense(v));
        }
        // reads `arr[p..., i]` with `p` fixed by the loop and `i` its index
        // cover a whole row of `arr[p...]`: one plain write per iteration
        let row_prefix = |b: &Builder, r: &Sparse| -> Option<Vec<Atom>> {
            let (last, prefix) = r.idx.split_last()?;
            let aty = b.type_of(&Atom::Var(r.arr));
            let invariant = prefix.iter().all(|a| !matches!(a, Atom::Var(v) if bound.contains(v)));
            (*last == Atom::Var(ivar) && invariant && aty.shape.get(prefix.len()) == Some(size)).then(|| prefix.to_vec())
        };
        let mut plain: Vec<(VarId, Vec<Atom>, Atom)> = vec![];
        for r in &sparse {
            match row_prefix(b, r) {
                Some(p) => match plain.iter_mut().find(|(v, q, _)| *v == r.arr && *q == p) {
                    Some(entry) => {
                        let rt = b.type_of(&r.ct);
                        entry.2 = b.add_values(&rt, entry.2, r.ct);
                    }
                    None => plain.push((r.arr, p, r.ct)),
                },
                None => {
                    results.push(r.flat);
                    results.push(r.ct);
                    uses.push(Use::Sparse { arr: r.arr, axes: r.axes, conditional: r.conditional, bulk: r.bulk });
                }
            }
        }
        for (v, p, ct) in plain {
            results.push(ct);
            uses.push(Use::Plain(v, p));
        }
        (results, uses)
    }

    /// Transposed `if`: an `if` on the same condition whose branches
    /// recompute the primal branch and transpose it, threading the
    /// cotangents of outside variables through.
    fn rev_if(&mut self, b: &mut Builder, s: &mut Stmt) -> Result<(), AdError> {
        let cts: Vec<Option<Atom>> = s.binds.iter().map(|x| self.take(x.var)).collect();
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
        let cur = self.current(b, &threaded);
        let Expr::If { cond, then_b, else_b } = &s.expr else { unreachable!("checked by the caller") };
        let mut branches = vec![];
        for blk in [then_b, else_b] {
            let copy = self.recompute(b, blk, FxHashMap::default());
            let init = threaded.iter().copied().zip(cur.iter().copied()).collect();
            let (stmts, outs) = self.seq_scope(b, copy, init, &cts, &threaded)?;
            branches.push(Block { stmts, result: outs });
        }
        let else_b = branches.pop().expect("two branches");
        let then_b = branches.pop().expect("two branches");
        let tys: Vec<Type> = threaded.iter().map(|v| b.type_of(&Atom::Var(*v))).collect();
        let outs = b.emit_many(Expr::If { cond: *cond, then_b, else_b }, tys, "adj");
        for (v, o) in threaded.iter().zip(outs) {
            self.adj.insert(*v, o);
        }
        Ok(())
    }

    /// Transposed `if` inside a parallel `for` body: nothing is threaded (an
    /// accumulator would be a whole array per iteration); each branch
    /// returns the cotangents it produced, zeros for the other branch's,
    /// and reads of arrays from outside the `for` leave as (index, value)
    /// pairs, placeholders (0, zeros) from the branch that did not read.
    fn rev_if_in_for(&mut self, b: &mut Builder, s: &Stmt, cts: Vec<Option<Atom>>, outer_bound: FxHashSet<VarId>) -> Result<(), AdError> {
        let Expr::If { cond, then_b, else_b } = &s.expr else { unreachable!("checked by the caller") };
        let mut parts = vec![];
        for blk in [then_b, else_b] {
            let mut copy = self.recompute(b, blk, FxHashMap::default());
            let outer = std::mem::take(&mut self.adj);
            self.frames.push(Frame::Branch { outer_bound: outer_bound.clone(), sparse: vec![] });
            b.begin();
            for (k, c) in cts.iter().enumerate() {
                if let Some(c) = c {
                    self.add(b, &copy.result[k], *c);
                }
            }
            let swept = self.rev_stmts(b, &mut copy.stmts);
            let rev = b.end();
            let Some(Frame::Branch { sparse, .. }) = self.frames.pop() else { unreachable!("pushed above") };
            let local = std::mem::replace(&mut self.adj, outer);
            swept?;
            let inside = bound_vars_block(&copy);
            let dense: FxHashMap<VarId, Atom> = local.into_iter().filter(|(v, _)| !inside.contains(v)).collect();
            // an index computed inside the branch means nothing outside it
            let sparse = sparse
                .into_iter()
                .map(|mut r| {
                    if r.idx.iter().any(|a| matches!(a, Atom::Var(v) if inside.contains(v))) {
                        r.idx.clear();
                    }
                    r
                })
                .collect::<Vec<_>>();
            parts.push((copy.stmts, rev, dense, sparse));
        }
        let mut dense_vars: Vec<VarId> = parts.iter().flat_map(|p| p.2.keys().copied()).collect();
        dense_vars.sort();
        dense_vars.dedup();
        let records: Vec<(usize, usize)> = (0..2).flat_map(|side| (0..parts[side].3.len()).map(move |k| (side, k))).collect();
        let mut blocks = vec![];
        for side in 0..2 {
            let (stmts, rev, dense, sparse) = &parts[side];
            b.begin();
            let mut result: Vec<Atom> = dense_vars.iter().map(|v| dense.get(v).copied().unwrap_or_else(|| b.zeros(&b.type_of(&Atom::Var(*v))))).collect();
            for &(from, k) in &records {
                let r = &parts[from].3[k];
                if from == side {
                    result.extend([sparse[k].flat, sparse[k].ct]);
                } else {
                    let (zi, zc) = (b.zeros(&b.type_of(&r.flat)), b.zeros(&b.type_of(&r.ct)));
                    result.extend([zi, zc]);
                }
            }
            let fill = b.end();
            blocks.push(Block { stmts: [stmts.clone(), rev.clone(), fill].concat(), result });
        }
        let mut tys: Vec<Type> = dense_vars.iter().map(|v| b.type_of(&Atom::Var(*v))).collect();
        for &(from, k) in &records {
            tys.extend([b.type_of(&parts[from].3[k].flat), b.type_of(&parts[from].3[k].ct)]);
        }
        let else_b = blocks.pop().expect("two branches");
        let then_b = blocks.pop().expect("two branches");
        let outs = b.emit_many(Expr::If { cond: *cond, then_b, else_b }, tys, "adj");
        for (v, o) in dense_vars.iter().zip(&outs) {
            self.add(b, &Atom::Var(*v), *o);
        }
        for (j, &(from, k)) in records.iter().enumerate() {
            let r = &parts[from].3[k];
            let base = dense_vars.len() + 2 * j;
            let rec = Sparse { arr: r.arr, axes: r.axes, flat: outs[base], ct: outs[base + 1], idx: r.idx.clone(), conditional: true, bulk: r.bulk };
            self.pairs(b, rec);
        }
        Ok(())
    }

    /// Transpose a recomputed block in a sequential scope whose accumulators
    /// start as `init`; the block's results get the cotangents `cts`.
    /// Returns the statements (primal copy, then transpose) and the final
    /// cotangents of `threaded`.
    fn seq_scope(
        &mut self,
        b: &mut Builder,
        mut copy: Block,
        init: FxHashMap<VarId, Atom>,
        cts: &[Option<Atom>],
        threaded: &[VarId],
    ) -> Result<(Vec<Stmt>, Vec<Atom>), AdError> {
        let outer = std::mem::replace(&mut self.adj, init);
        self.frames.push(Frame::Seq);
        b.begin();
        for (k, c) in cts.iter().enumerate() {
            if let Some(c) = c {
                self.add(b, &copy.result[k], *c);
            }
        }
        let swept = self.rev_stmts(b, &mut copy.stmts);
        let outs: Vec<Atom> = threaded.iter().map(|v| self.adj.get(v).copied().unwrap_or_else(|| b.zeros(&b.type_of(&Atom::Var(*v))))).collect();
        let rev = b.end();
        self.frames.pop();
        self.adj = outer;
        swept?;
        Ok(([copy.stmts, rev].concat(), outs))
    }

    /// Transposed sequential loop: the primal loop is replaced by one that
    /// also saves its state at every iteration (a `while` loop first counts
    /// its iterations); the transposed loop runs the iterations backwards,
    /// recomputing each body from its saved state.
    fn rev_loop(&mut self, b: &mut Builder, s: &mut Stmt) -> Result<Option<Vec<Stmt>>, AdError> {
        let cts: Vec<Option<Atom>> = s.binds.iter().map(|x| self.take(x.var)).collect();
        if cts.iter().all(Option::is_none) {
            return Ok(None);
        }
        let threaded = self.threaded(b, s);
        let Expr::Loop { params, init, kind, body } = &s.expr else { unreachable!("checked by the caller") };
        let (params, init, kind, body) = (params.clone(), init.clone(), kind.clone(), body.clone());

        // forward: the trip count, then the loop saving its states
        b.begin();
        let (n, binds) = match &kind {
            LoopKind::Count { n, .. } => (b.prim(Prim::Max, vec![*n, lit(Scalar::I64, 0.0)], Scalar::I64), s.binds.clone()),
            LoopKind::While { .. } => {
                let c = counting_loop(b, s);
                b.push(s.clone());
                let dummies = s.binds[..params.len()].iter().map(|x| Binder { var: b.fresh(&b.name(x.var)), ty: x.ty.clone() }).collect();
                (c, dummies)
            }
        };
        let saved = self.saving_loop(b, &params, &init, &kind, &body, n, binds);
        let replacement = b.end();

        // reverse: iterations backwards over the saved states
        let floats: Vec<usize> = (0..params.len()).filter(|&j| params[j].ty.elem.is_float() && self.active.contains(&params[j].var)).collect();
        let mut rinit = vec![];
        for &j in &floats {
            rinit.push(match cts[j] {
                Some(c) => c,
                None => b.zeros(&params[j].ty),
            });
        }
        rinit.extend(self.current(b, &threaded));
        let rtys: Vec<Type> = floats.iter().map(|&j| params[j].ty.clone()).chain(threaded.iter().map(|v| b.type_of(&Atom::Var(*v)))).collect();
        let rparams: Vec<Binder> = rtys.into_iter().map(|ty| Binder { var: b.fresh("ct"), ty }).collect();
        for p in &rparams {
            b.set_type(p.var, p.ty.clone());
        }
        let riv = b.fresh("i");
        b.set_type(riv, Type::scalar(Scalar::I64));
        b.begin();
        let last = b.prim(Prim::Sub, vec![n, lit(Scalar::I64, 1.0)], Scalar::I64);
        let j = b.prim(Prim::Sub, vec![last, Atom::Var(riv)], Scalar::I64);
        let mut map = FxHashMap::default();
        for (p, st) in params.iter().zip(&saved) {
            map.insert(p.var, b.index(*st, vec![j]));
        }
        if let LoopKind::Count { ivar, .. } = &kind {
            map.insert(*ivar, j);
        }
        let pre = b.end();
        let copy = self.recompute(b, &body, map.clone());
        let state: Vec<Atom> = params.iter().map(|p| map[&p.var]).collect();
        let mut cts_body = vec![None; params.len()];
        for (k, &jf) in floats.iter().enumerate() {
            cts_body[jf] = Some(Atom::Var(rparams[k].var));
        }
        let tinit = threaded.iter().copied().zip(rparams[floats.len()..].iter().map(|p| Atom::Var(p.var))).collect();
        // the state's cotangent at the start of the iteration is threaded too
        let state_vars: Vec<VarId> = floats.iter().filter_map(|&jf| if let Atom::Var(v) = state[jf] { Some(v) } else { None }).collect();
        for &jf in &floats {
            if let Atom::Var(v) = state[jf] {
                self.active.insert(v);
            }
        }
        let all: Vec<VarId> = state_vars.iter().copied().chain(threaded.iter().copied()).collect();
        let (stmts, outs) = self.seq_scope(b, copy, tinit, &cts_body, &all)?;
        let rbody = Block { stmts: [pre, stmts].concat(), result: outs };
        let tys: Vec<Type> = rparams.iter().map(|p| p.ty.clone()).collect();
        let expr = Expr::Loop { params: rparams, init: rinit, kind: LoopKind::Count { ivar: riv, n }, body: rbody };
        let outs = b.emit_many(expr, tys, "adj");
        for (k, &jf) in floats.iter().enumerate() {
            self.add(b, &init[jf], outs[k]);
        }
        for (v, o) in threaded.iter().zip(&outs[floats.len()..]) {
            self.adj.insert(*v, *o);
        }
        Ok(Some(replacement))
    }

    /// Emit a counted loop equivalent to the primal one that also writes
    /// its state before each iteration into `[n]` arrays; returns them.
    #[allow(clippy::too_many_arguments)]
    fn saving_loop(&mut self, b: &mut Builder, params: &[Binder], init: &[Atom], kind: &LoopKind, body: &Block, n: Atom, binds: Vec<Binder>) -> Vec<Atom> {
        let nsize = size_of_atom(&n);
        let mut map = FxHashMap::default();
        let new_params: Vec<Binder> = params
            .iter()
            .map(|p| {
                let w = b.fresh(&b.name(p.var));
                map.insert(p.var, Atom::Var(w));
                Binder { var: w, ty: p.ty.clone() }
            })
            .collect();
        let iv = b.fresh("i");
        if let LoopKind::Count { ivar, .. } = kind {
            map.insert(*ivar, Atom::Var(iv));
        }
        let saved_tys: Vec<Type> = params.iter().map(|p| Type { elem: p.ty.elem, shape: [vec![nsize.clone()], p.ty.shape.clone()].concat() }).collect();
        let zeros: Vec<Atom> = saved_tys.iter().map(|t| b.zeros(t)).collect();
        let saved_params: Vec<Binder> = saved_tys.iter().map(|t| Binder { var: b.fresh("saved"), ty: t.clone() }).collect();
        let copy = self.recompute(b, body, map);
        b.begin();
        let at = b.emit(Expr::ArrayLit(vec![Atom::Var(iv)]), Type::array(Scalar::I64, vec![Size::constant(1)]), "at");
        let mut saves = vec![];
        for ((p, sp), t) in new_params.iter().zip(&saved_params).zip(&saved_tys) {
            let one = Type { elem: t.elem, shape: [vec![Size::constant(1)], p.ty.shape.clone()].concat() };
            let row = b.emit(Expr::ArrayLit(vec![Atom::Var(p.var)]), one, "state");
            saves.push(b.emit(Expr::ScatterAdd { dest: Atom::Var(sp.var), idxs: at, vals: row, loc: internal_loc() }, t.clone(), "saved"));
        }
        let save_stmts = b.end();
        let lbody = Block { stmts: [copy.stmts, save_stmts].concat(), result: [copy.result, saves].concat() };
        let all_params = [new_params, saved_params].concat();
        let all_init = [init.to_vec(), zeros].concat();
        let out_binds: Vec<Binder> = binds.into_iter().chain(saved_tys.iter().map(|t| Binder { var: b.fresh("saved"), ty: t.clone() })).collect();
        let saved: Vec<Atom> = out_binds[params.len()..].iter().map(|x| Atom::Var(x.var)).collect();
        let expr = Expr::Loop { params: all_params, init: all_init, kind: LoopKind::Count { ivar: iv, n }, body: lbody };
        b.push(Stmt { binds: out_binds, expr, loc: None });
        saved
    }
}

/// The statements of a `for` body (positions, in order) that the transposed
/// body recomputes instead of reading stored copies: those computing a
/// needed residual in a few scalar steps (an index, a primitive) from what
/// the loop does not bind, its index, or other such values. Recomputing
/// them costs an operation or a read; storing costs a write and a read.
fn rematerializable(body: &Block, residuals: &[VarId], ivar: VarId, bound: &FxHashSet<VarId>) -> Vec<usize> {
    const MAX_STEPS: usize = 4;
    let mut steps: FxHashMap<VarId, (usize, usize)> = FxHashMap::default();
    for (k, st) in body.stmts.iter().enumerate() {
        if st.binds.len() != 1 || !matches!(st.expr, Expr::Index { .. } | Expr::Prim(..) | Expr::Atom(_)) {
            continue;
        }
        let mut cost = 1;
        let ok = free_vars_stmt(st).into_iter().all(|v| {
            if v == ivar || !bound.contains(&v) {
                return true;
            }
            steps.get(&v).map(|(c, _)| cost += c).is_some()
        });
        if ok && cost <= MAX_STEPS {
            steps.insert(st.binds[0].var, (cost, k));
        }
    }
    let mut chosen: FxHashSet<usize> = FxHashSet::default();
    let mut work: Vec<VarId> = residuals.iter().copied().filter(|v| steps.contains_key(v)).collect();
    while let Some(v) = work.pop() {
        let k = steps[&v].1;
        if chosen.insert(k) {
            work.extend(free_vars_stmt(&body.stmts[k]).into_iter().filter(|w| steps.contains_key(w)));
        }
    }
    let mut out: Vec<usize> = chosen.into_iter().collect();
    out.sort();
    out
}

/// Move the top-level statement of `body` that binds the size `v` out of
/// the loop, if it reads nothing the loop binds (a trip count computed from
/// outer values); `bound` forgets it.
fn hoist(body: &mut Block, v: VarId, bound: &mut FxHashSet<VarId>, hoisted: &mut Vec<Stmt>) -> bool {
    let Some(k) = body.stmts.iter().position(|s| s.binds.len() == 1 && s.binds[0].var == v) else { return false };
    let s = &body.stmts[k];
    if !matches!(s.expr, Expr::Prim(..) | Expr::Atom(_)) || free_vars_stmt(s).iter().any(|w| bound.contains(w)) {
        return false;
    }
    hoisted.push(body.stmts.remove(k));
    bound.remove(&v);
    true
}

/// Make the `while` loop `s` also count its iterations; returns the count.
fn counting_loop(b: &mut Builder, s: &mut Stmt) -> Atom {
    let c = Binder { var: b.fresh("trips"), ty: Type::scalar(Scalar::I64) };
    let out = Binder { var: b.fresh("trips"), ty: Type::scalar(Scalar::I64) };
    let Expr::Loop { params, init, body, .. } = &mut s.expr else { unreachable!("a loop") };
    let next = Binder { var: b.fresh("trips"), ty: Type::scalar(Scalar::I64) };
    body.stmts.push(Stmt { binds: vec![next.clone()], expr: Expr::Prim(Prim::Add, vec![Atom::Var(c.var), lit(Scalar::I64, 1.0)]), loc: None });
    body.result.push(Atom::Var(next.var));
    params.push(c);
    init.push(lit(Scalar::I64, 0.0));
    s.binds.push(out.clone());
    b.declare(s);
    Atom::Var(out.var)
}

/// A reduction or scan as the equivalent sequential loop (for operators
/// whose transpose needs the running accumulator). Returns the statements
/// that prepare it and the loop.
fn fold_as_loop(b: &mut Builder, s: &Stmt) -> (Vec<Stmt>, Stmt) {
    let (op, ne, arrs, scan) = match &s.expr {
        Expr::Reduce { op, ne, arrs } => (op, ne, arrs, false),
        Expr::Scan { op, ne, arrs } => (op, ne, arrs, true),
        _ => unreachable!("a reduction"),
    };
    let rows: Vec<Type> = arrs.iter().map(|a| b.type_of(a).row()).collect();
    let at0 = b.type_of(&arrs[0]);
    b.begin();
    let n = b.size(&at0.shape[0]);
    let acc: Vec<Binder> = rows.iter().map(|t| Binder { var: b.fresh("acc"), ty: t.clone() }).collect();
    let mut init: Vec<Atom> = rows.iter().zip(ne).map(|(t, x)| if b.type_of(x).rank() == t.rank() { *x } else { b.filled(t, *x) }).collect();
    let outs: Vec<Binder> = if scan { s.binds.iter().map(|x| Binder { var: b.fresh("out"), ty: x.ty.clone() }).collect() } else { vec![] };
    for o in &outs {
        init.push(b.zeros(&o.ty));
    }
    let pre = b.end();
    let ivar = b.fresh("i");
    b.begin();
    let xs: Vec<Atom> = arrs.iter().map(|a| b.index(*a, vec![Atom::Var(ivar)])).collect();
    let accs: Vec<Atom> = acc.iter().map(|p| Atom::Var(p.var)).collect();
    let next = match op {
        ReduceOp::Lambda(l) => {
            let map = l.params.iter().map(|p| p.var).zip(accs.iter().chain(&xs).copied()).collect();
            let mut fresh = |v: VarId| {
                let n = b.name(v);
                b.fresh(&n)
            };
            let copy = Copier { map, fresh: Some(&mut fresh) }.block(&l.body);
            for st in copy.stmts {
                b.push(st);
            }
            copy.result
        }
        builtin => {
            let p = match builtin {
                ReduceOp::Add => Prim::Add,
                ReduceOp::Mul => Prim::Mul,
                ReduceOp::Max => Prim::Max,
                _ => Prim::Min,
            };
            let e = rows[0].elem;
            elementwise(b, &rows[0].shape, e, &[accs[0], xs[0]], &|b, v| vec![b.prim(p, vec![v[0], v[1]], e)])
        }
    };
    let mut result = next.clone();
    if scan {
        let at = b.emit(Expr::ArrayLit(vec![Atom::Var(ivar)]), Type::array(Scalar::I64, vec![Size::constant(1)]), "at");
        for (o, x) in outs.iter().zip(&next) {
            let xt = b.type_of(x);
            let row = b.emit(Expr::ArrayLit(vec![*x]), Type { elem: xt.elem, shape: [vec![Size::constant(1)], xt.shape].concat() }, "row");
            result.push(b.emit(Expr::ScatterAdd { dest: Atom::Var(o.var), idxs: at, vals: row, loc: internal_loc() }, o.ty.clone(), "out"));
        }
    }
    let stmts = b.end();
    let binds = if scan {
        acc.iter().map(|p| Binder { var: b.fresh("acc"), ty: p.ty.clone() }).chain(s.binds.iter().cloned()).collect()
    } else {
        s.binds.clone()
    };
    let params = [acc, outs].concat();
    let lp = Stmt { binds, expr: Expr::Loop { params, init, kind: LoopKind::Count { ivar, n }, body: Block { stmts, result } }, loc: s.loc.clone() };
    b.declare(&lp);
    (pre, lp)
}

/// Merge the two outer axes of an array.
fn flatten_outer(b: &mut Builder, a: Atom) -> Atom {
    let t = b.type_of(&a);
    let shape = [vec![t.shape[0].mul(&t.shape[1])], t.shape[2..].to_vec()].concat();
    b.emit(Expr::Flatten(a), Type { elem: t.elem, shape }, "pairs")
}

/// The row-major position of the prefix index `idx` over the axes `shape`.
fn flat_index(b: &mut Builder, idx: &[Atom], shape: &[Size]) -> Atom {
    let mut acc = idx[0];
    for (k, i) in idx.iter().enumerate().skip(1) {
        let d = b.size(&shape[k]);
        let m = b.prim(Prim::Mul, vec![acc, d], Scalar::I64);
        acc = b.prim(Prim::Add, vec![m, *i], Scalar::I64);
    }
    acc
}

/// `scatter_add target idxs vals` over the first `l` axes of `target`
/// taken as one (flattened for the update, then shaped back).
fn scatter_flat(b: &mut Builder, target: Atom, ty: &Type, l: usize, idxs: Atom, vals: Atom) -> Atom {
    let mut t = target;
    let mut shape = ty.shape.clone();
    for _ in 1..l {
        let merged = shape[0].mul(&shape[1]);
        shape.splice(0..2, [merged]);
        t = b.emit(Expr::Flatten(t), Type { elem: ty.elem, shape: shape.clone() }, "flat");
    }
    let cur_ty = Type { elem: ty.elem, shape: shape.clone() };
    let mut r = b.emit(Expr::ScatterAdd { dest: t, idxs, vals, loc: internal_loc() }, cur_ty, "acc");
    // shape back from the inside out: [d0*..*dk] -> [d0*..*d(k-1)][dk]
    for k in (1..l).rev() {
        let outer = ty.shape[..k].iter().fold(Size::constant(1), |a, d| a.mul(d));
        let (n, m) = (b.size(&outer), b.size(&ty.shape[k]));
        let shape = [vec![outer], ty.shape[k..].to_vec()].concat();
        r = b.emit(Expr::Unflatten { arr: r, n, m }, Type { elem: ty.elem, shape }, "acc");
    }
    r
}

/// The location reported if an accumulation generated by reverse mode ever
/// goes out of range (it cannot: its indices were checked by the primal).
fn internal_loc() -> Loc {
    Loc { file: "<reverse mode>".into(), line: 0, col: 0 }
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
        let Atom::Var(v) = a else { return };
        if !self.lin.contains(v) {
            return;
        }
        let sum = match self.adj.get(v) {
            Some(cur) => b.prim(Prim::Add, vec![*cur, ct], b.type_of(&ct).elem),
            None => ct,
        };
        self.adj.insert(*v, sum);
    }

    fn add_at(&mut self, _: &mut Builder, _: &Atom, _: &[Atom], _: Atom) {}

    fn add_rows(&mut self, _: &mut Builder, _: &Atom, _: Atom, _: Atom) {}
}
