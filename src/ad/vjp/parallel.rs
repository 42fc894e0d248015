//! Transposing a parallel `for` (paper 004's central result): the
//! transpose is again a parallel `for` over the same index whose body only
//! produces cotangents. What the transposed body reads of the primal body is
//! stored by the primal `for` as extra results, except values a few scalar
//! steps recompute. Cotangents of arrays from outside the loop leave it as
//! records: whole rows when the index is the loop's own (plain writes),
//! sums over iterations when the index does not change, (index, value)
//! pairs for `scatter_add` otherwise.

use super::*;

/// One position of a record's index.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Part {
    /// a fixed index
    At(Atom),
    /// the whole axis, along leading axis `k` of the record's cotangent
    /// (the index of an inner loop the record left)
    All(usize),
}

#[derive(Clone, Debug)]
pub(super) enum Kind {
    /// `ct[a0, a1, ...]` (one leading axis per `All`) goes to `arr` at `parts`
    Structured(Vec<Part>),
    /// `ct[p...]` goes to the row-major position `flat[p...]` over the first
    /// `axes` axes of `arr`; `bulk` leading axes hold the pairs
    Pairs { flat: Atom, axes: usize, bulk: usize },
}

/// Cotangent for part of an array bound outside the parallel `for` (or
/// branch in it) being transposed: it leaves the loop as a result.
#[derive(Clone, Debug)]
pub(super) struct Record {
    pub arr: VarId,
    pub kind: Kind,
    pub ct: Atom,
    /// from a branch: the cotangent is zero when the other branch ran (and a
    /// fixed index may then be out of range)
    pub conditional: bool,
    /// handed on by an `if` nested in the branch being transposed: an index
    /// computed in this branch may be out of range where the nested
    /// branch did not run
    pub nested: bool,
}

impl Frame {
    pub(super) fn push(&mut self, r: Record) {
        if let Frame::For { records, .. } | Frame::Branch { records, .. } = self {
            records.push(r);
        }
    }
}

/// How a result of a transposed `for` is added to the cotangents outside it.
enum Use {
    /// one cotangent per iteration, summed (`reduce (+)`)
    Dense(VarId),
    /// a record whose new leading axis is the loop's (a plain write per iteration)
    Axis(VarId, Vec<Part>, bool),
    /// a record the loop does not move: summed over iterations
    Summed(VarId, Vec<Part>, bool),
    /// (index, value) pairs, one more leading axis of them
    Pairs { arr: VarId, axes: usize, bulk: usize, conditional: bool },
}

impl Rev {
    /// Whether `v` is bound outside the parallel loop (or its branch) being
    /// transposed, and if so whether a record for it is conditional.
    pub(super) fn outside_loop(&self, v: VarId) -> Option<bool> {
        match self.frames.last() {
            Some(Frame::For { bound, .. }) if !bound.contains(&v) => Some(false),
            Some(Frame::Branch { outer_bound, .. }) if !outer_bound.contains(&v) => Some(true),
            _ => None,
        }
    }

    /// A record: handed on to the enclosing parallel loop when its array
    /// comes from outside that loop too, else added to the cotangent here.
    pub(super) fn record(&mut self, b: &mut Builder, rec: Record) {
        if self.outside_loop(rec.arr).is_some() && !self.sized_inside(b, &rec) {
            self.frames.last_mut().expect("inside a loop").push(rec);
            return;
        }
        let aty = b.type_of(&Atom::Var(rec.arr));
        let (flat, axes, bulk) = match &rec.kind {
            Kind::Structured(parts) => {
                if let Some((prefix, ct)) = self.in_order(b, parts, rec.ct, rec.conditional) {
                    match prefix.is_empty() {
                        true => self.add(b, &Atom::Var(rec.arr), ct),
                        false => self.add_at(b, &Atom::Var(rec.arr), &prefix, ct),
                    }
                    return;
                }
                let nb = parts.iter().filter(|p| matches!(p, Part::All(_))).count();
                (positions_guarded(b, &aty.shape, parts, rec.ct, rec.conditional), parts.len(), nb)
            }
            Kind::Pairs { flat, axes, bulk } => (*flat, *axes, *bulk),
        };
        let (mut flat, mut ct) = (flat, rec.ct);
        if bulk == 0 {
            let ct_ty = b.type_of(&ct);
            flat = b.emit(Expr::ArrayLit(vec![flat]), Type::array(Scalar::I64, vec![Size::constant(1)]), "at");
            ct = b.emit(Expr::ArrayLit(vec![ct]), Type { elem: ct_ty.elem, shape: [vec![Size::constant(1)], ct_ty.shape].concat() }, "ct");
        }
        for _ in 1..bulk {
            flat = flatten_outer(b, flat);
            ct = flatten_outer(b, ct);
        }
        self.accumulate(b, rec.arr, axes, flat, ct, rec.conditional);
    }

    /// Whether a record's values have a size bound inside the current loop
    /// (pairs from a triangular inner loop): the loop's results must be
    /// regular, so such a record is added up inside the iteration instead.
    fn sized_inside(&self, b: &Builder, rec: &Record) -> bool {
        let bound = match self.frames.last() {
            Some(Frame::For { bound, .. }) => bound,
            Some(Frame::Branch { outer_bound, .. }) => outer_bound,
            _ => return false,
        };
        let mut atoms = vec![rec.ct];
        if let Kind::Pairs { flat, .. } = rec.kind {
            atoms.push(flat);
        }
        atoms.iter().any(|a| b.type_of(a).shape.iter().flat_map(Size::vars).any(|v| bound.contains(&v)))
    }

    /// A structured record whose parts are fixed indices followed by whole
    /// axes in order (or two swapped: a transposed block) is a block of the
    /// array at that prefix: the prefix and the block.
    fn in_order(&self, b: &mut Builder, parts: &[Part], ct: Atom, conditional: bool) -> Option<(Vec<Atom>, Atom)> {
        let k0 = parts.iter().take_while(|p| matches!(p, Part::At(_))).count();
        if conditional && k0 > 0 {
            return None;
        }
        let prefix: Vec<Atom> = parts[..k0].iter().map(|p| if let Part::At(a) = p { *a } else { unreachable!() }).collect();
        let order: Vec<usize> = parts[k0..].iter().map(|p| if let Part::All(k) = p { Some(*k) } else { None }).collect::<Option<_>>()?;
        if order.iter().enumerate().all(|(i, k)| i == *k) {
            return Some((prefix, ct));
        }
        if order == [1, 0] {
            let t = b.type_of(&ct);
            let mut shape = t.shape.clone();
            shape.swap(0, 1);
            return Some((prefix, b.emit(Expr::Transpose(ct), Type { elem: t.elem, shape }, "tr")));
        }
        None
    }

    /// Transposed `for`: again a parallel `for`, over the same index, whose
    /// body only produces cotangents; what it reads of the primal body is
    /// stored by the primal `for` as extra results.
    /// Returns the statements hoisted out of the primal body (sizes of
    /// stored arrays), to be placed before it.
    pub(super) fn rev_for(&mut self, b: &mut Builder, s: &mut Stmt) -> Result<Vec<Stmt>, AdError> {
        let cts: Vec<Option<Atom>> = s.binds.iter().map(|x| self.take(b, x.var)).collect();
        if cts.iter().all(Option::is_none) {
            return Ok(vec![]);
        }
        let Stmt { binds, expr, .. } = s;
        let Expr::For { ivar, size, body } = expr else { unreachable!("checked by the caller") };
        let (ivar, size) = (*ivar, size.clone());
        let mut bound = bound_vars_block(body);
        bound.insert(ivar);
        let outer = std::mem::take(&mut self.adj);
        self.frames.push(Frame::For { bound: bound.clone(), records: vec![] });
        b.begin();
        for (k, c) in cts.iter().enumerate() {
            if let Some(c) = c {
                let row = b.index(*c, vec![Atom::Var(ivar)]);
                self.add(b, &body.result[k], row);
            }
        }
        let outer_hoists = std::mem::take(&mut self.hoist_out);
        let swept = self.rev_stmts(b, &mut body.stmts);
        let mut hoisted = std::mem::replace(&mut self.hoist_out, outer_hoists);
        let Some(Frame::For { records, .. }) = self.frames.pop() else { unreachable!("pushed above") };
        self.flush_all(b);
        let local = std::mem::replace(&mut self.adj, outer).dense;
        if let Err(e) = swept {
            b.end();
            return Err(e);
        }
        let (results, uses) = self.for_results(b, local, records, &bound, ivar, &size);
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
        let mut irregular = false;
        for &r in &residuals {
            for v in b.type_of(&Atom::Var(r)).shape.iter().flat_map(Size::vars) {
                if bound.contains(&v) && !hoist(body, v, &mut bound, &mut hoisted) {
                    irregular = true;
                }
            }
        }
        let (prefix, map) = if irregular {
            // A value whose size changes between iterations cannot be
            // stored in a regular array: recompute the body instead.
            let whole = Block { stmts: body.stmts.clone(), result: vec![] };
            let (copy, map) = self.recompute_mapped(b, &whole, map);
            (copy.stmts, map)
        } else {
            self.store_residuals(b, binds, body, residuals, &bound, ivar, new_ivar, &size, map)
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
        // what is hoisted before this loop is bound in the enclosing one:
        // records sized by it stay there
        self.note_bound(&hoisted);
        let mut it = outs.into_iter();
        for u in uses {
            let o = it.next().expect("one result per use");
            match u {
                Use::Dense(v) => {
                    let vt = b.type_of(&Atom::Var(v));
                    let total = b.emit(Expr::Reduce { op: ReduceOp::Add, ne: vec![lit(vt.elem, 0.0)], arrs: vec![o] }, vt, "sum");
                    self.add(b, &Atom::Var(v), total);
                }
                Use::Axis(arr, parts, conditional) => self.record(b, Record { arr, kind: Kind::Structured(parts), ct: o, conditional, nested: false }),
                Use::Summed(arr, parts, conditional) => {
                    let ot = b.type_of(&o);
                    let total = b.emit(Expr::Reduce { op: ReduceOp::Add, ne: vec![lit(ot.elem, 0.0)], arrs: vec![o] }, ot.row(), "sum");
                    self.record(b, Record { arr, kind: Kind::Structured(parts), ct: total, conditional, nested: false });
                }
                Use::Pairs { arr, axes, bulk, conditional } => {
                    let ct = it.next().expect("values after indices");
                    self.record(b, Record { arr, kind: Kind::Pairs { flat: o, axes, bulk: bulk + 1 }, ct, conditional, nested: false });
                }
            }
        }
        Ok(hoisted)
    }

    /// Store policy for a parallel `for`: the primal `for` also returns the
    /// residuals the transposed body reads (except those recomputed in a
    /// few steps); returns the transposed body's prefix that reads or
    /// recomputes them, and the renaming of the body's variables.
    #[allow(clippy::too_many_arguments)]
    fn store_residuals(
        &mut self,
        b: &mut Builder,
        binds: &mut Vec<Binder>,
        body: &mut Block,
        mut residuals: Vec<VarId>,
        bound: &FxHashSet<VarId>,
        ivar: VarId,
        new_ivar: VarId,
        size: &Size,
        mut map: FxHashMap<VarId, Atom>,
    ) -> (Vec<Stmt>, FxHashMap<VarId, Atom>) {
        residuals.retain(|v| bound.contains(v));
        let remat = rematerializable(body, &residuals, ivar, bound, 4);
        residuals.retain(|v| !remat.iter().any(|k| body.stmts[*k].binds[0].var == *v));
        let mut reads = vec![];
        for r in residuals {
            let ty = b.type_of(&Atom::Var(r));
            let store =
                Binder { var: b.fresh(&format!("{}_saved", b.name(r))), ty: Type { elem: ty.elem, shape: [vec![size.clone()], ty.shape.clone()].concat() } };
            b.set_type(store.var, store.ty.clone());
            b.residuals.push(store.var);
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
        let mut fresh = |v: VarId| {
            let n = b.name(v);
            b.fresh(&n)
        };
        let mut cp = Copier { map, fresh: Some(&mut fresh) };
        for k in remat {
            prefix.push(cp.stmt(&body.stmts[k]));
        }
        (prefix, cp.map)
    }

    /// The results of a transposed `for` body: cotangents of variables from
    /// outside the loop, dense per iteration, or records: a record indexed
    /// by the loop's own index along an axis of that size becomes a whole
    /// axis (a plain write per iteration), one the loop does not move is
    /// summed, any other leaves as (index, value) pairs.
    fn for_results(
        &mut self,
        b: &mut Builder,
        local: FxHashMap<VarId, Atom>,
        records: Vec<Record>,
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
        let varies = |p: &Part| matches!(p, Part::At(Atom::Var(v)) if bound.contains(v));
        let mut axes: Vec<(VarId, Vec<Part>, bool, Atom)> = vec![];
        for r in records {
            match r.kind {
                Kind::Structured(parts) => {
                    let aty = b.type_of(&Atom::Var(r.arr));
                    let own = parts.iter().position(|p| *p == Part::At(Atom::Var(ivar)));
                    let rest_fixed = parts.iter().enumerate().all(|(k, p)| Some(k) == own || !varies(p));
                    match own {
                        Some(q) if rest_fixed && aty.shape.get(q) == Some(size) => {
                            let moved: Vec<Part> = parts
                                .iter()
                                .enumerate()
                                .map(|(k, p)| match p {
                                    _ if k == q => Part::All(0),
                                    Part::All(i) => Part::All(i + 1),
                                    at => *at,
                                })
                                .collect();
                            match axes.iter_mut().find(|e| e.0 == r.arr && e.1 == moved && e.2 == r.conditional) {
                                Some(e) => {
                                    let t = b.type_of(&r.ct);
                                    e.3 = b.add_values(&t, e.3, r.ct);
                                }
                                None => axes.push((r.arr, moved, r.conditional, r.ct)),
                            }
                        }
                        _ if !parts.iter().any(varies) => {
                            results.push(r.ct);
                            uses.push(Use::Summed(r.arr, parts, r.conditional));
                        }
                        _ => {
                            let nb = parts.iter().filter(|p| matches!(p, Part::All(_))).count();
                            results.push(positions_guarded(b, &aty.shape, &parts, r.ct, r.conditional));
                            results.push(r.ct);
                            uses.push(Use::Pairs { arr: r.arr, axes: parts.len(), bulk: nb, conditional: r.conditional });
                        }
                    }
                }
                Kind::Pairs { flat, axes, bulk } => {
                    results.extend([flat, r.ct]);
                    uses.push(Use::Pairs { arr: r.arr, axes, bulk, conditional: r.conditional });
                }
            }
        }
        for (arr, parts, conditional, ct) in axes {
            results.push(ct);
            uses.push(Use::Axis(arr, parts, conditional));
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
            self.frames.push(Frame::Branch { outer_bound: local, records: vec![] });
            b.begin();
            let swept = self.sweep(b, &mut copy, &cts);
            let Some(Frame::Branch { records, .. }) = self.frames.pop() else { unreachable!("pushed above") };
            let rev = b.end();
            let local = std::mem::replace(&mut self.adj, outer).dense;
            swept?;
            let inside = bound_vars_block(&copy);
            let dense: FxHashMap<VarId, Atom> = local.into_iter().filter(|(v, _)| !inside.contains(v)).collect();
            // an index computed inside the branch means nothing outside it:
            // such records become (position, value) pairs in the branch
            b.begin();
            let records: Vec<Record> = records
                .into_iter()
                .map(|r| match &r.kind {
                    Kind::Structured(parts) if parts.iter().any(|p| matches!(p, Part::At(Atom::Var(v)) if inside.contains(v))) => as_pairs(b, r),
                    _ => r,
                })
                .collect();
            let rev = [rev, b.end()].concat();
            parts.push((copy.stmts, rev, dense, records));
        }
        let mut dense_vars: Vec<VarId> = parts.iter().flat_map(|p| p.2.keys().copied()).collect();
        dense_vars.sort();
        dense_vars.dedup();
        let records: Vec<(usize, usize)> = (0..2).flat_map(|side| (0..parts[side].3.len()).map(move |k| (side, k))).collect();
        let mut blocks = vec![];
        for side in 0..2 {
            let (stmts, rev, dense, _) = &parts[side];
            b.begin();
            let mut result: Vec<Atom> = dense_vars.iter().map(|v| dense.get(v).copied().unwrap_or_else(|| b.zeros(&b.type_of(&Atom::Var(*v))))).collect();
            for &(from, k) in &records {
                let r = &parts[from].3[k];
                let mine = from == side;
                if let Kind::Pairs { flat, .. } = r.kind {
                    result.push(if mine { flat } else { b.zeros(&b.type_of(&flat)) });
                }
                result.push(if mine { r.ct } else { b.zeros(&b.type_of(&r.ct)) });
            }
            let fill = b.end();
            blocks.push(Block { stmts: [stmts.clone(), rev.clone(), fill].concat(), result });
        }
        let mut tys: Vec<Type> = dense_vars.iter().map(|v| b.type_of(&Atom::Var(*v))).collect();
        for &(from, k) in &records {
            let r = &parts[from].3[k];
            if let Kind::Pairs { flat, .. } = r.kind {
                tys.push(b.type_of(&flat));
            }
            tys.push(b.type_of(&r.ct));
        }
        let else_b = blocks.pop().expect("two branches");
        let then_b = blocks.pop().expect("two branches");
        let outs = b.emit_many(Expr::If { cond: *cond, then_b, else_b }, tys, "adj");
        for (v, o) in dense_vars.iter().zip(&outs) {
            self.add(b, &Atom::Var(*v), *o);
        }
        let mut it = outs[dense_vars.len()..].iter().copied();
        for &(from, k) in &records {
            let r = parts[from].3[k].clone();
            let kind = match r.kind {
                Kind::Pairs { axes, bulk, .. } => Kind::Pairs { flat: it.next().expect("positions"), axes, bulk },
                structured => structured,
            };
            let ct = it.next().expect("values");
            self.record(b, Record { arr: r.arr, kind, ct, conditional: true, nested: true });
        }
        Ok(())
    }
}

/// The statements of a loop body (positions, in order) that the transposed
/// body recomputes instead of reading stored copies. In the operation
/// counts a stored value costs a write and a read; recomputing an index or
/// a primitive costs one operation once its operands are at hand (values
/// from outside the loop, its index, stored values). So, in body order, a
/// needed value is recomputed when that takes at most `max_steps` such steps, and
/// stored otherwise. A parallel loop stores into its results, and every
/// enclosing parallel loop copies them again: there `max_steps` is larger.
pub(super) fn rematerializable(body: &Block, residuals: &[VarId], ivar: VarId, bound: &FxHashSet<VarId>, max_steps: usize) -> Vec<usize> {
    let needed: FxHashSet<VarId> = residuals.iter().copied().collect();
    let mut stored: FxHashSet<VarId> = FxHashSet::default();
    let mut steps: FxHashMap<VarId, (usize, usize)> = FxHashMap::default();
    let mut chosen: Vec<VarId> = vec![];
    for (k, st) in body.stmts.iter().enumerate() {
        let cheap = st.binds.len() == 1 && matches!(st.expr, Expr::Index { .. } | Expr::Prim(..) | Expr::Atom(_));
        let mut cost = 1;
        let ok = cheap
            && free_vars_stmt(st).into_iter().all(|v| {
                if v == ivar || !bound.contains(&v) || stored.contains(&v) {
                    return true;
                }
                steps.get(&v).map(|(c, _)| cost += c).is_some()
            });
        for x in &st.binds {
            if !needed.contains(&x.var) {
                if ok && cost <= max_steps {
                    steps.insert(x.var, (cost, k));
                }
            } else if ok && cost <= max_steps {
                // recomputed: later uses get it for one step
                steps.insert(x.var, (1, k));
                chosen.push(x.var);
            } else {
                stored.insert(x.var);
            }
        }
    }
    let mut picked: FxHashSet<usize> = FxHashSet::default();
    while let Some(v) = chosen.pop() {
        let k = steps[&v].1;
        if picked.insert(k) {
            chosen.extend(free_vars_stmt(&body.stmts[k]).into_iter().filter(|w| steps.contains_key(w) && !stored.contains(w)));
        }
    }
    let mut out: Vec<usize> = picked.into_iter().collect();
    out.sort();
    out
}

/// Move the top-level statement of `body` that binds the size `v` out of
/// the loop, if it reads nothing the loop binds (a trip count computed from
/// outer values); `bound` forgets it.
pub(super) fn hoist(body: &mut Block, v: VarId, bound: &mut FxHashSet<VarId>, hoisted: &mut Vec<Stmt>) -> bool {
    let Some(k) = body.stmts.iter().position(|s| s.binds.len() == 1 && s.binds[0].var == v) else { return false };
    if !matches!(body.stmts[k].expr, Expr::Prim(..) | Expr::Atom(_)) {
        return false;
    }
    // what it reads must be hoisted first
    for w in free_vars_stmt(&body.stmts[k]) {
        if bound.contains(&w) && !hoist(body, w, bound, hoisted) {
            return false;
        }
    }
    let k = body.stmts.iter().position(|s| s.binds.len() == 1 && s.binds[0].var == v).expect("still there");
    hoisted.push(body.stmts.remove(k));
    bound.remove(&v);
    true
}

/// A record as (position, value) pairs.
pub(super) fn as_pairs(b: &mut Builder, r: Record) -> Record {
    let Kind::Structured(parts) = &r.kind else { return r };
    let aty = b.type_of(&Atom::Var(r.arr));
    let nb = parts.iter().filter(|p| matches!(p, Part::All(_))).count();
    // from a branch nested in this one: its index may be out of range here
    let flat = positions_guarded(b, &aty.shape, parts, r.ct, r.nested);
    Record { kind: Kind::Pairs { flat, axes: parts.len(), bulk: nb }, ..r }
}

/// A conditional record's fixed indices, all replaced by 0 unless every one
/// is in range. Such a record comes from a branch that may not have run:
/// there its value is zero, and an index computed outside the branch (an
/// invariant `k` of `if c then x[k]`, the `j = i + 1` of `let j = i + 1 in
/// if j < n then x[j]`) may lie outside the array, where a `scatter_add`
/// would fail. Position 0 exists wherever the array has cells (where it
/// has none, `accumulate`'s guard skips the pairs), as for the (0, 0)
/// pairs of a branch not taken. A literal 0 stays as it is.
fn clamp_fixed(b: &mut Builder, shape: &[Size], parts: &[Part]) -> Vec<Part> {
    let zero = lit(Scalar::I64, 0.0);
    let mut ok: Option<Atom> = None;
    for (k, p) in parts.iter().enumerate() {
        let Part::At(a) = p else { continue };
        if *a == zero {
            continue;
        }
        let dim = b.size(&shape[k]);
        let lo = b.prim(Prim::Ge, vec![*a, zero], Scalar::Bool);
        let hi = b.prim(Prim::Lt, vec![*a, dim], Scalar::Bool);
        let both = b.prim(Prim::And, vec![lo, hi], Scalar::Bool);
        ok = Some(match ok {
            Some(o) => b.prim(Prim::And, vec![o, both], Scalar::Bool),
            None => both,
        });
    }
    let Some(ok) = ok else { return parts.to_vec() };
    parts
        .iter()
        .map(|p| match p {
            Part::At(a) if *a != zero => Part::At(b.prim(Prim::Select, vec![ok, *a, zero], Scalar::I64)),
            other => *other,
        })
        .collect()
}

/// `positions`, after `clamp_fixed` when the record's fixed indices may
/// be out of range (`clamp`).
fn positions_guarded(b: &mut Builder, shape: &[Size], parts: &[Part], ct: Atom, clamp: bool) -> Atom {
    match clamp {
        true => {
            let parts = clamp_fixed(b, shape, parts);
            positions(b, shape, &parts, ct)
        }
        false => positions(b, shape, parts, ct),
    }
}

/// The row-major positions over `shape` of a structured record's cells:
/// a scalar for fixed indices, else an array over its whole axes.
fn positions(b: &mut Builder, shape: &[Size], parts: &[Part], ct: Atom) -> Atom {
    let nb = parts.iter().filter(|p| matches!(p, Part::All(_))).count();
    let dims = b.type_of(&ct).shape[..nb].to_vec();
    positions_over(b, shape, parts, &dims, &mut vec![])
}

fn positions_over(b: &mut Builder, shape: &[Size], parts: &[Part], dims: &[Size], vars: &mut Vec<Atom>) -> Atom {
    if vars.len() == dims.len() {
        let idx: Vec<Atom> = parts
            .iter()
            .map(|p| match p {
                Part::At(a) => *a,
                Part::All(k) => vars[*k],
            })
            .collect();
        return flat_index(b, &idx, shape);
    }
    let ivar = b.fresh("cell");
    b.set_type(ivar, Type::scalar(Scalar::I64));
    vars.push(Atom::Var(ivar));
    b.begin();
    let r = positions_over(b, shape, parts, dims, vars);
    vars.pop();
    let body = Block { stmts: b.end(), result: vec![r] };
    let k = vars.len();
    b.emit(Expr::For { ivar, size: dims[k].clone(), body }, Type::array(Scalar::I64, dims[k..].to_vec()), "cells")
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
    let mut r = b.emit(Expr::ScatterAdd { dest: t, idxs, vals, loc: Loc::reverse_mode() }, cur_ty, "acc");
    // shape back from the inside out: [d0*..*dk] -> [d0*..*d(k-1)][dk]
    for k in (1..l).rev() {
        let outer = ty.shape[..k].iter().fold(Size::constant(1), |a, d| a.mul(d));
        let (n, m) = (b.size(&outer), b.size(&ty.shape[k]));
        let shape = [vec![outer], ty.shape[k..].to_vec()].concat();
        r = b.emit(Expr::Unflatten { arr: r, n, m }, Type { elem: ty.elem, shape }, "acc");
    }
    r
}
