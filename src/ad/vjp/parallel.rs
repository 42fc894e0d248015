//! Transposing a parallel `for` (paper 004's central result): the
//! transpose is again a parallel `for` over the same index whose body only
//! produces cotangents. What the transposed body reads of the primal body is
//! stored by the primal `for` as extra results, except values a few scalar
//! steps recompute. Cotangents of arrays from outside the loop leave it as
//! records: whole rows when the index is the loop's own (plain writes),
//! sums over iterations when the index does not change, (index, value)
//! pairs for `scatter_add` otherwise.

use super::*;

impl Rev {
    /// (index, value) pairs for an array: handed on to the enclosing parallel
    /// loop when the array comes from outside it too, else accumulated here.
    pub(super) fn pairs(&mut self, b: &mut Builder, rec: Sparse) {
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

    /// Transposed `for`: again a parallel `for`, over the same index, whose
    /// body only produces cotangents; what it reads of the primal body is
    /// stored by the primal `for` as extra results.
    /// Returns the statements hoisted out of the primal body (sizes of
    /// stored arrays), to be placed before it.
    pub(super) fn rev_for(&mut self, b: &mut Builder, s: &mut Stmt) -> Result<Vec<Stmt>, AdError> {
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

    /// Transposed `if` inside a parallel `for` body: nothing is threaded (an
    /// accumulator would be a whole array per iteration); each branch
    /// returns the cotangents it produced, zeros for the other branch's,
    /// and reads of arrays from outside the `for` leave as (index, value)
    /// pairs, placeholders (0, zeros) from the branch that did not read.
    pub(super) fn rev_if_in_for(&mut self, b: &mut Builder, s: &Stmt, cts: Vec<Option<Atom>>, outer_bound: FxHashSet<VarId>) -> Result<(), AdError> {
        let Expr::If { cond, then_b, else_b } = &s.expr else { unreachable!("checked by the caller") };
        let mut parts = vec![];
        for blk in [then_b, else_b] {
            let mut copy = self.recompute(b, blk, FxHashMap::default());
            let outer = std::mem::take(&mut self.adj);
            // the recomputed branch's own variables are not from outside
            let mut local = outer_bound.clone();
            local.extend(bound_vars_block(&copy));
            self.frames.push(Frame::Branch { outer_bound: local, sparse: vec![] });
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

/// Merge the two outer axes of an array.
fn flatten_outer(b: &mut Builder, a: Atom) -> Atom {
    let t = b.type_of(&a);
    let shape = [vec![t.shape[0].mul(&t.shape[1])], t.shape[2..].to_vec()].concat();
    b.emit(Expr::Flatten(a), Type { elem: t.elem, shape }, "pairs")
}

/// The row-major position of the prefix index `idx` over the axes `shape`.
pub(super) fn flat_index(b: &mut Builder, idx: &[Atom], shape: &[Size]) -> Atom {
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
pub(super) fn scatter_flat(b: &mut Builder, target: Atom, ty: &Type, l: usize, idxs: Atom, vals: Atom) -> Atom {
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
