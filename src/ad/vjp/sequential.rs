//! Transposing sequential loops: the primal loop saves what the transposed
//! body reads at every iteration (a `while` loop first counts its
//! iterations), and the transposed loop runs the iterations backwards.
//! Reductions with operators that have no parallel transpose here run as
//! such loops.

use super::parallel::{Kind, Record, as_pairs, hoist, rematerializable};
use super::*;

impl Rev {
    /// Transposed sequential loop. The primal loop is replaced by a counted
    /// one (a `while` loop first counts its iterations) that also writes,
    /// at every iteration, what the transposed body will read: the
    /// residuals of its body (store policy, the default), or only its state
    /// when the body keeps arrays whose size changes between iterations
    /// (recompute policy: the transposed body recomputes from the state).
    /// The transposed loop runs the iterations backwards.
    pub(super) fn rev_loop(&mut self, b: &mut Builder, s: &mut Stmt) -> Result<Option<Vec<Stmt>>, AdError> {
        let cts: Vec<Option<Atom>> = s.binds.iter().map(|x| self.take(b, x.var)).collect();
        if cts.iter().all(Option::is_none) {
            return Ok(None);
        }
        let threaded = self.threaded(b, s);
        // Inside a parallel loop, arrays from outside it are not threaded
        // whole through the iterations (a copy per parallel iteration):
        // their cotangents leave each iteration as records, kept in [n]
        // buffers by the transposed loop, when all they get is records.
        if let Some(parallel) = self.parallel_bound() {
            let (inside, outside): (Vec<VarId>, Vec<VarId>) = threaded.iter().partition(|v| parallel.contains(v));
            if !outside.is_empty()
                && let Some(replacement) = self.rev_loop_stored(b, s, &cts, &inside, Some(&parallel))?
            {
                return Ok(Some(replacement));
            }
        }
        if let Some(replacement) = self.rev_loop_stored(b, s, &cts, &threaded, None)? {
            return Ok(Some(replacement));
        }
        self.rev_loop_recomputed(b, s, &cts, &threaded)
    }

    /// The variables bound inside the parallel loop (or branch in it) being
    /// transposed, if the current statement is directly in one.
    fn parallel_bound(&self) -> Option<FxHashSet<VarId>> {
        match self.frames.last() {
            Some(Frame::For { bound, .. }) => Some(bound.clone()),
            Some(Frame::Branch { outer_bound, .. }) => Some(outer_bound.clone()),
            _ => None,
        }
    }

    /// [`Rev::seq_scope`] for a loop body inside a parallel loop: arrays
    /// from outside that loop (not in `outer`) get records instead of
    /// threaded cotangents, returned as (position, value) pairs computed in
    /// the body. `None` when one of them gets a whole-array cotangent, or a
    /// record's size is bound in the iteration (`inner`).
    #[allow(clippy::too_many_arguments)]
    fn iteration_scope(
        &mut self,
        b: &mut Builder,
        copy: &mut Block,
        init: FxHashMap<VarId, Atom>,
        cts: &[Option<Atom>],
        threaded: &[VarId],
        outer: FxHashSet<VarId>,
        inner: &FxHashSet<VarId>,
    ) -> Result<Option<(Vec<Stmt>, Vec<Atom>, Vec<Record>)>, AdError> {
        let frame = Frame::Branch { outer_bound: outer.clone(), records: vec![] };
        let (outer_adj, swept, outs) = self.open_scope(b, copy, init, cts, threaded, frame);
        let Some(Frame::Branch { records, .. }) = self.frames.pop() else { unreachable!("pushed above") };
        let whole = self.adj.dense.keys().any(|v| !outer.contains(v));
        let pairs: Vec<Record> = records.into_iter().map(|r| as_pairs(b, r)).collect();
        let rev = b.end();
        self.adj = outer_adj;
        swept?;
        let sized_inside = pairs.iter().any(|r| {
            let Kind::Pairs { flat, .. } = r.kind else { return true };
            [flat, r.ct].iter().any(|a| b.type_of(a).shape.iter().flat_map(Size::vars).any(|v| inner.contains(&v)))
        });
        Ok((!whole && !sized_inside).then_some((rev, outs, pairs)))
    }

    /// The trip count of the loop `s` (made to count its iterations if it
    /// is a `while` loop, emitted into `b`) and the binders for the saving
    /// loop's results.
    fn trip_count(&mut self, b: &mut Builder, s: &mut Stmt, nparams: usize) -> (Atom, Vec<Binder>) {
        match &s.expr {
            Expr::Loop { kind: LoopKind::Count { n, .. }, .. } => {
                let count = Expr::Prim(Prim::Max, vec![*n, lit(Scalar::I64, 0.0)]);
                let fixed = match (n, self.frames.last()) {
                    (Atom::Var(v), Some(Frame::For { bound, .. })) => !bound.contains(v),
                    (Atom::Lit(_), Some(Frame::For { .. })) => true,
                    _ => false,
                };
                let c = if fixed {
                    // computed before the parallel loop: what leaves its
                    // iterations then has a size it does not bind
                    let st = Stmt { binds: vec![Binder { var: b.fresh("trips"), ty: Type::scalar(Scalar::I64) }], expr: count, loc: None };
                    b.declare(&st);
                    let c = Atom::Var(st.binds[0].var);
                    self.hoist_out.push(st);
                    c
                } else {
                    b.emit(count, Type::scalar(Scalar::I64), "trips")
                };
                (c, s.binds.clone())
            }
            _ => {
                let c = counting_loop(b, s);
                b.push(s.clone());
                let dummies = s.binds[..nparams].iter().map(|x| Binder { var: b.fresh(&b.name(x.var)), ty: x.ty.clone() }).collect();
                (c, dummies)
            }
        }
    }

    /// The parameters and initial values of a transposed loop: the
    /// cotangents of the float state (`floats`), then the threaded ones.
    fn reverse_params(&mut self, b: &mut Builder, params: &[Binder], floats: &[usize], cts: &[Option<Atom>], threaded: &[VarId]) -> (Vec<Binder>, Vec<Atom>) {
        let mut init = vec![];
        for &j in floats {
            init.push(match cts[j] {
                Some(c) => c,
                None => b.zeros(&params[j].ty),
            });
        }
        init.extend(self.current(b, threaded));
        let tys: Vec<Type> = floats.iter().map(|&j| params[j].ty.clone()).chain(threaded.iter().map(|v| b.type_of(&Atom::Var(*v)))).collect();
        let rparams: Vec<Binder> = tys.into_iter().map(|ty| Binder { var: b.fresh("ct"), ty }).collect();
        for p in &rparams {
            b.set_type(p.var, p.ty.clone());
        }
        (rparams, init)
    }

    /// Emit the transposed loop and hand its results on: the initial
    /// state's cotangents, the threaded ones.
    #[allow(clippy::too_many_arguments)]
    fn emit_reverse_loop(
        &mut self,
        b: &mut Builder,
        kind: &LoopKind,
        rparams: Vec<Binder>,
        rinit: Vec<Atom>,
        riv: VarId,
        n: Atom,
        body: Block,
        init: &[Atom],
        floats: &[usize],
        threaded: &[VarId],
    ) -> Vec<Atom> {
        let tys: Vec<Type> = rparams.iter().map(|p| p.ty.clone()).collect();
        // backwards through the iterations, whichever way the primal ran
        let down = !matches!(kind, LoopKind::Count { down: true, .. });
        let expr = Expr::Loop { params: rparams, init: rinit, kind: LoopKind::Count { ivar: riv, n, down }, body };
        let outs = b.emit_many(expr, tys, "adj");
        // Both are added, never written: a variable read in the body can
        // also be (part of) the initial state, and then it gets both
        // contributions (`loop w = y … do w * y`).
        for (v, o) in threaded.iter().zip(&outs[floats.len()..]) {
            self.add(b, &Atom::Var(*v), *o);
        }
        for (k, &jf) in floats.iter().enumerate() {
            self.add(b, &init[jf], outs[k]);
        }
        outs[floats.len() + threaded.len()..].to_vec()
    }

    /// The store policy; `None` when a residual's size changes between
    /// iterations (or, with `records_for`, the bound variables of the
    /// enclosing parallel loop, when records cannot be used).
    fn rev_loop_stored(
        &mut self,
        b: &mut Builder,
        s: &mut Stmt,
        cts: &[Option<Atom>],
        threaded: &[VarId],
        records_for: Option<&FxHashSet<VarId>>,
    ) -> Result<Option<Vec<Stmt>>, AdError> {
        let Expr::Loop { params, init, kind, body } = &s.expr else { unreachable!("checked by the caller") };
        let (params, init, kind, body) = (params.clone(), init.clone(), kind.clone(), body.clone());
        // the saving loop's body: a copy over fresh parameters
        let mut map = FxHashMap::default();
        let new_params: Vec<Binder> = params
            .iter()
            .map(|p| {
                let w = b.fresh(&b.name(p.var));
                b.set_type(w, p.ty.clone());
                map.insert(p.var, Atom::Var(w));
                Binder { var: w, ty: p.ty.clone() }
            })
            .collect();
        let iv = b.fresh("i");
        b.set_type(iv, Type::scalar(Scalar::I64));
        if let LoopKind::Count { ivar, .. } = &kind {
            map.insert(*ivar, Atom::Var(iv));
        }
        let mut copy = self.recompute(b, &body, map);
        let floats: Vec<usize> = (0..params.len()).filter(|&j| params[j].ty.elem.is_float() && self.active.contains(&params[j].var)).collect();

        // the transposed body, reading the copy's values
        let rtys: Vec<Type> = floats.iter().map(|&j| params[j].ty.clone()).chain(threaded.iter().map(|v| b.type_of(&Atom::Var(*v)))).collect();
        let rvars: Vec<VarId> = rtys
            .iter()
            .map(|t| {
                let v = b.fresh("ct");
                b.set_type(v, t.clone());
                v
            })
            .collect();
        let mut cts_body = vec![None; params.len()];
        for (k, &jf) in floats.iter().enumerate() {
            cts_body[jf] = Some(Atom::Var(rvars[k]));
        }
        let tinit = threaded.iter().copied().zip(rvars[floats.len()..].iter().map(|v| Atom::Var(*v))).collect();
        let all: Vec<VarId> = floats.iter().map(|&jf| new_params[jf].var).chain(threaded.iter().copied()).collect();
        let (rev, mut outs, records) = match records_for {
            None => {
                let (rev, outs) = self.seq_scope(b, &mut copy, tinit, &cts_body, &all)?;
                (rev, outs, vec![])
            }
            Some(parallel) => {
                let mut inner = bound_vars_block(&copy);
                inner.extend(new_params.iter().map(|p| p.var));
                inner.insert(iv);
                let mut outer = parallel.clone();
                outer.extend(inner.iter().copied());
                match self.iteration_scope(b, &mut copy, tinit, &cts_body, &all, outer, &inner)? {
                    Some(r) => r,
                    None => return Ok(None),
                }
            }
        };
        let nouts = outs.len();
        for r in &records {
            let Kind::Pairs { flat, .. } = r.kind else { unreachable!("made pairs") };
            outs.extend([flat, r.ct]);
        }
        let rev_block = Block { stmts: rev, result: outs };

        // residuals: what the transposed body reads of the iteration
        let mut bound = bound_vars_block(&copy);
        bound.extend(new_params.iter().map(|p| p.var));
        bound.insert(iv);
        let top: FxHashSet<VarId> = copy.stmts.iter().flat_map(|s| s.binds.iter().map(|x| x.var)).chain(new_params.iter().map(|p| p.var)).collect();
        let mut residuals: Vec<VarId> = free_vars_block(&rev_block).into_iter().filter(|v| top.contains(v)).collect();
        residuals.sort();
        let mut hoisted = vec![];
        for &r in &residuals {
            for v in b.type_of(&Atom::Var(r)).shape.iter().flat_map(Size::vars) {
                if bound.contains(&v) && !hoist(&mut copy, v, &mut bound, &mut hoisted) {
                    return Ok(None);
                }
            }
        }
        residuals.retain(|v| bound.contains(v));
        let remat = rematerializable(&copy, &residuals, iv, &bound, 2);
        residuals.retain(|v| !remat.iter().any(|k| copy.stmts[*k].binds[0].var == *v));

        // forward: the saving loop
        b.begin();
        let (n, binds) = self.trip_count(b, s, params.len());
        for h in hoisted {
            b.push(h);
        }
        let nsize = size_of_atom(&n);
        let saved_tys: Vec<Type> = residuals
            .iter()
            .map(|r| {
                let t = b.type_of(&Atom::Var(*r));
                Type { elem: t.elem, shape: [vec![nsize.clone()], t.shape].concat() }
            })
            .collect();
        let zeros: Vec<Atom> = saved_tys.iter().map(|t| b.zeros(t)).collect();
        let saved_params: Vec<Binder> = saved_tys.iter().map(|t| Binder { var: b.fresh("saved"), ty: t.clone() }).collect();
        b.begin();
        let mut saves = vec![];
        for ((r, sp), t) in residuals.iter().zip(&saved_params).zip(&saved_tys) {
            let save = Expr::Update { arr: Atom::Var(sp.var), idx: Atom::Var(iv), val: Atom::Var(*r), loc: Loc::reverse_mode() };
            saves.push(b.emit(save, t.clone(), "saved"));
        }
        let save_stmts = b.end();
        let out_binds: Vec<Binder> = binds.into_iter().chain(saved_tys.iter().map(|t| Binder { var: b.fresh("saved"), ty: t.clone() })).collect();
        let saved: Vec<Atom> = out_binds[params.len()..].iter().map(|x| Atom::Var(x.var)).collect();
        b.residuals.extend(out_binds[params.len()..].iter().map(|x| x.var));
        let lbody = Block { stmts: [copy.stmts.clone(), save_stmts].concat(), result: [copy.result.clone(), saves].concat() };
        let expr = Expr::Loop {
            params: [new_params, saved_params].concat(),
            init: [init.clone(), zeros].concat(),
            kind: LoopKind::Count { ivar: iv, n, down: matches!(kind, LoopKind::Count { down: true, .. }) },
            body: lbody,
        };
        b.push(Stmt { binds: out_binds, expr, loc: None });
        let replacement = b.end();

        // reverse: iterations backwards, reading what was saved; records
        // leaving an iteration are written into [n] buffers
        let (mut rparams, mut rinit) = self.reverse_params(b, &params, &floats, cts, threaded);
        let mut buffers = vec![];
        for a in &rev_block.result[nouts..] {
            let t = b.type_of(a);
            let ty = Type { elem: t.elem, shape: [vec![nsize.clone()], t.shape].concat() };
            rinit.push(b.zeros(&ty));
            let p = Binder { var: b.fresh("pairs"), ty };
            b.set_type(p.var, p.ty.clone());
            buffers.push(p.clone());
            rparams.push(p);
        }
        let riv = b.fresh("i");
        b.set_type(riv, Type::scalar(Scalar::I64));
        b.begin();
        let j = Atom::Var(riv);
        let mut map: FxHashMap<VarId, Atom> = rvars.iter().zip(&rparams).map(|(v, p)| (*v, Atom::Var(p.var))).collect();
        map.insert(iv, j);
        for (r, st) in residuals.iter().zip(&saved) {
            let read = b.index(*st, vec![j]);
            map.insert(*r, read);
        }
        let map = {
            let mut fresh = |v: VarId| {
                let n = b.name(v);
                b.fresh(&n)
            };
            let mut cp = Copier { map, fresh: Some(&mut fresh) };
            let copies: Vec<Stmt> = remat.iter().map(|k| cp.stmt(&copy.stmts[*k])).collect();
            let m = cp.map;
            for st in copies {
                b.push(st);
            }
            m
        };
        let pre = b.end();
        let mut rb = Copier { map, fresh: None }.block(&rev_block);
        let written: Vec<Atom> = rb.result.split_off(nouts);
        b.begin();
        for (p, a) in buffers.iter().zip(written) {
            let w = b.emit(Expr::Update { arr: Atom::Var(p.var), idx: j, val: a, loc: Loc::reverse_mode() }, p.ty.clone(), "pairs");
            rb.result.push(w);
        }
        let writes = b.end();
        let rbody = Block { stmts: [pre, rb.stmts, writes].concat(), result: rb.result };
        let filled = self.emit_reverse_loop(b, &kind, rparams, rinit, riv, n, rbody, &init, &floats, threaded);
        // a `while` loop's trip count is bound here: records sized by it
        // are added up inside the enclosing iteration
        self.note_bound(&replacement);
        for (r, pair) in records.into_iter().zip(filled.chunks(2)) {
            let Kind::Pairs { axes, bulk, .. } = r.kind else { unreachable!("made pairs") };
            self.record(
                b,
                Record { arr: r.arr, kind: Kind::Pairs { flat: pair[0], axes, bulk: bulk + 1 }, ct: pair[1], conditional: r.conditional, nested: r.nested },
            );
        }
        Ok(Some(replacement))
    }

    /// The recompute policy.
    fn rev_loop_recomputed(&mut self, b: &mut Builder, s: &mut Stmt, cts: &[Option<Atom>], threaded: &[VarId]) -> Result<Option<Vec<Stmt>>, AdError> {
        let Expr::Loop { params, init, kind, body } = &s.expr else { unreachable!("checked by the caller") };
        let (params, init, kind, body) = (params.clone(), init.clone(), kind.clone(), body.clone());
        b.begin();
        let (n, binds) = self.trip_count(b, s, params.len());
        let saved = self.saving_loop(b, &params, &init, &kind, &body, n, binds);
        let replacement = b.end();

        let floats: Vec<usize> = (0..params.len()).filter(|&j| params[j].ty.elem.is_float() && self.active.contains(&params[j].var)).collect();
        let (rparams, rinit) = self.reverse_params(b, &params, &floats, cts, threaded);
        let riv = b.fresh("i");
        b.set_type(riv, Type::scalar(Scalar::I64));
        b.begin();
        let j = Atom::Var(riv);
        let mut map = FxHashMap::default();
        for (p, st) in params.iter().zip(&saved) {
            map.insert(p.var, b.index(*st, vec![j]));
        }
        if let LoopKind::Count { ivar, .. } = &kind {
            map.insert(*ivar, j);
        }
        let pre = b.end();
        let mut copy = self.recompute(b, &body, map.clone());
        let state: Vec<Atom> = params.iter().map(|p| map[&p.var]).collect();
        let mut cts_body = vec![None; params.len()];
        for (k, &jf) in floats.iter().enumerate() {
            cts_body[jf] = Some(Atom::Var(rparams[k].var));
        }
        let tinit = threaded.iter().copied().zip(rparams[floats.len()..].iter().map(|p| Atom::Var(p.var))).collect();
        // the state's cotangent at the start of the iteration is threaded too
        let state_vars: Vec<VarId> = floats.iter().filter_map(|&jf| if let Atom::Var(v) = state[jf] { Some(v) } else { None }).collect();
        for &v in &state_vars {
            self.active.insert(v);
        }
        let all: Vec<VarId> = state_vars.iter().copied().chain(threaded.iter().copied()).collect();
        let (rev, outs) = self.seq_scope(b, &mut copy, tinit, &cts_body, &all)?;
        let rbody = Block { stmts: [pre, copy.stmts, rev].concat(), result: outs };
        self.emit_reverse_loop(b, &kind, rparams, rinit, riv, n, rbody, &init, &floats, threaded);
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
        let mut saves = vec![];
        for ((p, sp), t) in new_params.iter().zip(&saved_params).zip(&saved_tys) {
            let save = Expr::Update { arr: Atom::Var(sp.var), idx: Atom::Var(iv), val: Atom::Var(p.var), loc: Loc::reverse_mode() };
            saves.push(b.emit(save, t.clone(), "saved"));
        }
        let save_stmts = b.end();
        let lbody = Block { stmts: [copy.stmts, save_stmts].concat(), result: [copy.result, saves].concat() };
        let all_params = [new_params, saved_params].concat();
        let all_init = [init.to_vec(), zeros].concat();
        let out_binds: Vec<Binder> = binds.into_iter().chain(saved_tys.iter().map(|t| Binder { var: b.fresh("saved"), ty: t.clone() })).collect();
        let saved: Vec<Atom> = out_binds[params.len()..].iter().map(|x| Atom::Var(x.var)).collect();
        b.residuals.extend(out_binds[params.len()..].iter().map(|x| x.var));
        let expr = Expr::Loop {
            params: all_params,
            init: all_init,
            kind: LoopKind::Count { ivar: iv, n, down: matches!(kind, LoopKind::Count { down: true, .. }) },
            body: lbody,
        };
        b.push(Stmt { binds: out_binds, expr, loc: None });
        saved
    }
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
pub(super) fn fold_as_loop(b: &mut Builder, s: &Stmt) -> (Vec<Stmt>, Stmt) {
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
        for (o, x) in outs.iter().zip(&next) {
            let write = Expr::Update { arr: Atom::Var(o.var), idx: Atom::Var(ivar), val: *x, loc: Loc::reverse_mode() };
            result.push(b.emit(write, o.ty.clone(), "out"));
        }
    }
    let stmts = b.end();
    let binds =
        if scan { acc.iter().map(|p| Binder { var: b.fresh("acc"), ty: p.ty.clone() }).chain(s.binds.iter().cloned()).collect() } else { s.binds.clone() };
    let params = [acc, outs].concat();
    let lp =
        Stmt { binds, expr: Expr::Loop { params, init, kind: LoopKind::Count { ivar, n, down: false }, body: Block { stmts, result } }, loc: s.loc.clone() };
    b.declare(&lp);
    (pre, lp)
}
