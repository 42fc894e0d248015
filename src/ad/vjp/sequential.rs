//! Transposing sequential loops: the primal loop saves its state at every
//! iteration (a `while` loop first counts its iterations), and the
//! transposed loop runs the iterations backwards, recomputing each body from
//! its saved state. Reductions with operators that have no parallel
//! transpose here run as such loops.

use super::*;

impl Rev {
    /// Transposed sequential loop: the primal loop is replaced by one that
    /// also saves its state at every iteration (a `while` loop first counts
    /// its iterations); the transposed loop runs the iterations backwards,
    /// recomputing each body from its saved state.
    pub(super) fn rev_loop(&mut self, b: &mut Builder, s: &mut Stmt) -> Result<Option<Vec<Stmt>>, AdError> {
        let cts: Vec<Option<Atom>> = s.binds.iter().map(|x| self.take(b, x.var)).collect();
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
        let last = b.prim(Prim::Sub, vec![n, lit(Scalar::I64, 1.0)], Scalar::I64);
        b.begin();
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
            self.adj.dense.insert(*v, *o);
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
        let mut saves = vec![];
        for ((p, sp), t) in new_params.iter().zip(&saved_params).zip(&saved_tys) {
            let save = Expr::Update { arr: Atom::Var(sp.var), idx: Atom::Var(iv), val: Atom::Var(p.var), loc: internal_loc() };
            saves.push(b.emit(save, t.clone(), "saved"));
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
            let write = Expr::Update { arr: Atom::Var(o.var), idx: Atom::Var(ivar), val: *x, loc: internal_loc() };
            result.push(b.emit(write, o.ty.clone(), "out"));
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
