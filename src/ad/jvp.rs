//! The forward-mode transform (dual numbers as a source transform, papers
//! 001/002): every float variable gets a tangent variable, computed right
//! after it. `for` stays a `for` returning values and tangents, `loop`
//! carries (value, tangent), `if` stays `if`, reductions reduce tangents
//! (or (value, tangent) pairs), and zero tangents are never materialised
//! unless a construct needs a uniform shape (loop states, `if` branches).

use super::AdError;
use super::build::{Builder, lit};
use super::rules::prim_jvp;
use crate::ir::{Atom, Binder, Block, Expr, Lambda, Loc, LoopKind, Prim, ReduceOp, Scalar, Size, Stmt, Type, VarId};
use rustc_hash::FxHashMap;

/// Expand `binds = jvp lam primals tangents` into statements of `b`.
pub(super) fn expand_jvp(b: &mut Builder, lam: &Lambda, primals: &[Atom], tangents: &[Atom], binds: &[Binder], loc: Option<&Loc>) -> Result<(), AdError> {
    let mut t = Jvp { tan: FxHashMap::default() };
    for ((p, x), dx) in lam.params.iter().zip(primals).zip(tangents) {
        b.push(copy(p.clone(), *x));
        if p.ty.elem.is_float() {
            let dp = Binder { var: b.fresh(&format!("d{}", b.name(p.var))), ty: p.ty.clone() };
            t.tan.insert(p.var, Atom::Var(dp.var));
            b.push(copy(dp, *dx));
        }
    }
    let (res, dres) = t.block(b, &lam.body).map_err(|mut e| {
        e.loc = e.loc.or_else(|| loc.cloned());
        e
    })?;
    let n = res.len();
    for (k, bind) in binds.iter().enumerate() {
        let atom = if k < n {
            res[k]
        } else {
            match dres[k - n] {
                Some(d) => d,
                None => b.zeros(&bind.ty),
            }
        };
        b.push(copy(bind.clone(), atom));
    }
    Ok(())
}

fn copy(bind: Binder, a: Atom) -> Stmt {
    Stmt { binds: vec![bind], expr: Expr::Atom(a), loc: None }
}

struct Jvp {
    /// Tangent of each variable that has a non-zero one.
    tan: FxHashMap<VarId, Atom>,
}

impl Jvp {
    fn tan(&self, a: &Atom) -> Option<Atom> {
        match a {
            Atom::Var(v) => self.tan.get(v).copied(),
            Atom::Lit(_) => None,
        }
    }

    fn tan_or_zero(&self, b: &mut Builder, a: &Atom, ty: &Type) -> Atom {
        match self.tan(a) {
            Some(t) => t,
            None => b.zeros(ty),
        }
    }

    /// Transform a block in place into `b`'s current statement list; returns
    /// the primal results and their tangents.
    fn block(&mut self, b: &mut Builder, blk: &Block) -> Result<(Vec<Atom>, Vec<Option<Atom>>), AdError> {
        for s in &blk.stmts {
            self.stmt(b, s)?;
        }
        Ok((blk.result.clone(), blk.result.iter().map(|a| self.tan(a)).collect()))
    }

    /// Transform a loop or operator body whose results `slots` carry
    /// tangents (of types `tys`): the body's statements and its results
    /// followed by those tangents, zeros where a tangent is absent.
    fn body_with_tangents(&mut self, b: &mut Builder, body: &Block, slots: &[usize], tys: &[Type]) -> Result<(Vec<Stmt>, Vec<Atom>), AdError> {
        b.begin();
        let (mut result, dres) = self.block(b, body)?;
        for (&k, ty) in slots.iter().zip(tys) {
            let d = match dres[k] {
                Some(d) => d,
                None => b.zeros(ty),
            };
            result.push(d);
        }
        Ok((b.end(), result))
    }

    /// A new tangent binder for `bind`.
    fn tangent_binder(&mut self, b: &mut Builder, bind: &Binder) -> Binder {
        let name = format!("d{}", b.name(bind.var));
        let tb = Binder { var: b.fresh(&name), ty: bind.ty.clone() };
        self.tan.insert(bind.var, Atom::Var(tb.var));
        tb
    }

    /// Emit `op(t)` as the tangent of the single binder of `s`.
    fn unary(&mut self, b: &mut Builder, s: &Stmt, t: Option<Atom>, mk: impl FnOnce(Atom) -> Expr) {
        b.push(s.clone());
        if let Some(t) = t
            && s.binds[0].ty.elem.is_float()
        {
            let tb = self.tangent_binder(b, &s.binds[0]);
            b.push(Stmt { binds: vec![tb], expr: mk(t), loc: s.loc.clone() });
        }
    }

    /// Emit `s` and, when either of its two float operands has a tangent,
    /// the same construct over their tangents (zeros for a missing one).
    fn binary(&mut self, b: &mut Builder, s: &Stmt, x: Atom, y: Atom, mk: impl FnOnce(Atom, Atom) -> Expr) {
        b.push(s.clone());
        if s.binds[0].ty.elem.is_float() && (self.tan(&x).is_some() || self.tan(&y).is_some()) {
            let (tx, ty) = (b.type_of(&x), b.type_of(&y));
            let dx = self.tan_or_zero(b, &x, &tx);
            let dy = self.tan_or_zero(b, &y, &ty);
            let tb = self.tangent_binder(b, &s.binds[0]);
            b.push(Stmt { binds: vec![tb], expr: mk(dx, dy), loc: s.loc.clone() });
        }
    }

    fn stmt(&mut self, b: &mut Builder, s: &Stmt) -> Result<(), AdError> {
        let out_float = s.binds.first().is_some_and(|x| x.ty.elem.is_float());
        match &s.expr {
            Expr::Atom(a) => {
                b.push(s.clone());
                if let Some(t) = self.tan(a) {
                    self.tan.insert(s.binds[0].var, t);
                }
            }
            // a user rule: the tangents are the rule applied to the
            // arguments and their tangents (the node stays, as the primal)
            Expr::CustomJvp { rule, args, .. } => {
                b.push(s.clone());
                if args.iter().all(|a| self.tan(a).is_none()) {
                    return Ok(());
                }
                let tangents: Vec<Atom> = args.iter().map(|a| self.tan_or_zero(b, a, &b.type_of(a))).collect();
                let results = s.binds.iter().map(|x| Atom::Var(x.var));
                let inputs: Vec<Atom> = args.iter().copied().chain(tangents).chain(results).collect();
                let outs = super::inline_lambda(b, rule, &inputs);
                for (x, d) in s.binds.iter().zip(outs) {
                    if x.ty.elem.is_float() {
                        self.tan.insert(x.var, d);
                    }
                }
            }
            // the primal is printed; its tangents pass through unprinted
            Expr::Trace { args, .. } => {
                b.push(s.clone());
                for (x, a) in s.binds.iter().zip(args) {
                    if let Some(t) = self.tan(a) {
                        self.tan.insert(x.var, t);
                    }
                }
            }
            Expr::Prim(op, args) => {
                b.push(s.clone());
                let dargs: Vec<Option<Atom>> = args.iter().map(|a| self.tan(a)).collect();
                let y = Atom::Var(s.binds[0].var);
                let sc = s.binds[0].ty.elem;
                let d = prim_jvp(b, *op, args, y, &dargs, sc).map_err(|mut e| {
                    e.loc = s.loc.clone();
                    e
                })?;
                if let Some(d) = d {
                    self.tan.insert(s.binds[0].var, d);
                }
            }
            Expr::Index { arr, idx, checks } => {
                let (idx, checks) = (idx.clone(), checks.clone());
                self.unary(b, s, self.tan(arr), |t| Expr::Index { arr: t, idx, checks })
            }
            Expr::Slice { arr, lo, hi, check } => {
                let (lo, hi, check) = (*lo, *hi, check.clone());
                self.unary(b, s, self.tan(arr), |t| Expr::Slice { arr: t, lo, hi, check })
            }
            Expr::Replicate { n, val } => {
                let n = *n;
                self.unary(b, s, self.tan(val), |t| Expr::Replicate { n, val: t })
            }
            Expr::Transpose(a) => self.unary(b, s, self.tan(a), Expr::Transpose),
            Expr::Flatten(a) => self.unary(b, s, self.tan(a), Expr::Flatten),
            Expr::Reverse(a) => self.unary(b, s, self.tan(a), Expr::Reverse),
            Expr::Unflatten { arr, n, m } => {
                let (n, m) = (*n, *m);
                self.unary(b, s, self.tan(arr), |t| Expr::Unflatten { arr: t, n, m })
            }
            Expr::Rotate { k, arr } => {
                let k = *k;
                self.unary(b, s, self.tan(arr), |t| Expr::Rotate { k, arr: t })
            }
            Expr::Coerce { arr, loc } => {
                let loc = loc.clone();
                self.unary(b, s, self.tan(arr), |t| Expr::Coerce { arr: t, loc })
            }
            Expr::Concat(x, y) => self.binary(b, s, *x, *y, Expr::Concat),
            Expr::ArrayLit(xs) => {
                b.push(s.clone());
                if out_float && xs.iter().any(|x| self.tan(x).is_some()) {
                    let row = s.binds[0].ty.row();
                    let ds: Vec<Atom> = xs.iter().map(|x| self.tan_or_zero(b, x, &row)).collect();
                    let tb = self.tangent_binder(b, &s.binds[0]);
                    b.push(Stmt { binds: vec![tb], expr: Expr::ArrayLit(ds), loc: s.loc.clone() });
                }
            }
            Expr::Update { arr, idx, val, loc } => {
                let (idx, loc) = (*idx, loc.clone());
                self.binary(b, s, *arr, *val, |arr, val| Expr::Update { arr, idx, val, loc })
            }
            Expr::ScatterAdd { dest, idxs, vals, loc } => {
                let (idxs, loc) = (*idxs, loc.clone());
                self.binary(b, s, *dest, *vals, |dest, vals| Expr::ScatterAdd { dest, idxs, vals, loc })
            }
            Expr::Iota { .. } | Expr::ArgExt { .. } | Expr::Fail { .. } | Expr::StopGradient(_) => b.push(s.clone()),
            Expr::For { ivar, size, body } => self.for_loop(b, s, *ivar, size, body)?,
            Expr::ForAcc { .. } => {
                return Err(AdError { message: "internal: a `for` with accumulators is built after differentiation".into(), loc: s.loc.clone() });
            }
            Expr::Loop { params, init, kind, body } => self.seq_loop(b, s, params, init, kind, body)?,
            Expr::If { cond, then_b, else_b } => self.if_expr(b, s, *cond, then_b, else_b)?,
            Expr::Reduce { op, ne, arrs } => self.reduce(b, s, op, ne, arrs, false)?,
            Expr::Scan { op, ne, arrs } => self.reduce(b, s, op, ne, arrs, true)?,
            Expr::Jvp { .. } | Expr::Vjp { .. } => {
                return Err(AdError { message: "internal: a nested derivative was not expanded first".into(), loc: s.loc.clone() });
            }
        }
        Ok(())
    }

    fn for_loop(&mut self, b: &mut Builder, s: &Stmt, ivar: VarId, size: &Size, body: &Block) -> Result<(), AdError> {
        b.begin();
        let (res, dres) = self.block(b, body)?;
        let stmts = b.end();
        let mut binds = s.binds.clone();
        let mut result = res;
        for (k, d) in dres.iter().enumerate() {
            if let (Some(d), true) = (d, s.binds[k].ty.elem.is_float()) {
                binds.push(self.tangent_binder(b, &s.binds[k]));
                result.push(*d);
            }
        }
        let expr = Expr::For { ivar, size: size.clone(), body: Block { stmts, result } };
        b.push(Stmt { binds, expr, loc: s.loc.clone() });
        Ok(())
    }

    fn seq_loop(&mut self, b: &mut Builder, s: &Stmt, params: &[Binder], init: &[Atom], kind: &LoopKind, body: &Block) -> Result<(), AdError> {
        let floats: Vec<usize> = (0..params.len()).filter(|&k| params[k].ty.elem.is_float()).collect();
        let mut new_params = params.to_vec();
        let mut new_init = init.to_vec();
        for &k in &floats {
            let d = self.tan_or_zero(b, &init[k], &params[k].ty);
            new_init.push(d);
            new_params.push(self.tangent_binder(b, &params[k]));
        }
        let tys: Vec<Type> = floats.iter().map(|&k| params[k].ty.clone()).collect();
        let (stmts, result) = self.body_with_tangents(b, body, &floats, &tys)?;
        let mut binds = s.binds.clone();
        for &k in &floats {
            binds.push(self.tangent_binder(b, &s.binds[k]));
        }
        let expr = Expr::Loop { params: new_params, init: new_init, kind: kind.clone(), body: Block { stmts, result } };
        b.push(Stmt { binds, expr, loc: s.loc.clone() });
        Ok(())
    }

    fn if_expr(&mut self, b: &mut Builder, s: &Stmt, cond: Atom, then_b: &Block, else_b: &Block) -> Result<(), AdError> {
        b.begin();
        let (rt, dt) = self.block(b, then_b)?;
        let mut st = b.end();
        b.begin();
        let (re, de) = self.block(b, else_b)?;
        let mut se = b.end();
        let mut binds = s.binds.clone();
        let (mut res_t, mut res_e) = (rt, re);
        for k in 0..s.binds.len() {
            let ty = &s.binds[k].ty;
            if !ty.elem.is_float() || (dt[k].is_none() && de[k].is_none()) {
                continue;
            }
            for (d, stmts, res) in [(dt[k], &mut st, &mut res_t), (de[k], &mut se, &mut res_e)] {
                let atom = match d {
                    Some(d) => d,
                    None => {
                        b.begin();
                        let z = b.zeros(ty);
                        stmts.extend(b.end());
                        z
                    }
                };
                res.push(atom);
            }
            binds.push(self.tangent_binder(b, &s.binds[k]));
        }
        let expr = Expr::If { cond, then_b: Block { stmts: st, result: res_t }, else_b: Block { stmts: se, result: res_e } };
        b.push(Stmt { binds, expr, loc: s.loc.clone() });
        Ok(())
    }

    fn reduce(&mut self, b: &mut Builder, s: &Stmt, op: &ReduceOp, ne: &[Atom], arrs: &[Atom], scan: bool) -> Result<(), AdError> {
        let mk = |op: ReduceOp, ne: Vec<Atom>, arrs: Vec<Atom>| if scan { Expr::Scan { op, ne, arrs } } else { Expr::Reduce { op, ne, arrs } };
        match op {
            ReduceOp::Lambda(l) => return self.reduce_lambda(b, s, l, ne, arrs, scan),
            _ if !s.binds[0].ty.elem.is_float() || self.tan(&arrs[0]).is_none() => b.push(s.clone()),
            ReduceOp::Add => {
                let t = self.tan(&arrs[0]).expect("checked");
                b.push(s.clone());
                let tb = self.tangent_binder(b, &s.binds[0]);
                let zero = lit(tb.ty.elem, 0.0);
                b.push(Stmt { binds: vec![tb], expr: mk(ReduceOp::Add, vec![zero], vec![t]), loc: s.loc.clone() });
            }
            ReduceOp::Mul | ReduceOp::Max | ReduceOp::Min => {
                // The value keeps its exact built-in reduction; the tangent
                // comes from an associative operator on (value, tangent) pairs.
                b.push(s.clone());
                let t = self.tan(&arrs[0]).expect("checked");
                let arr_ty = b.type_of(&arrs[0]);
                let row = arr_ty.row();
                let elem = row.elem;
                let params: Vec<Binder> = ["p", "dp", "x", "dx"].iter().map(|n| Binder { var: b.fresh(n), ty: row.clone() }).collect();
                let pa: Vec<Atom> = params.iter().map(|p| Atom::Var(p.var)).collect();
                let which = op.clone();
                b.begin();
                let outs = elementwise(b, &row.shape, elem, &pa, &|b, v| pair_op(b, &which, elem, v[0], v[1], v[2], v[3]));
                let stmts = b.end();
                let lam = Lambda { params, body: Block { stmts, result: outs } };
                let ident = match op {
                    ReduceOp::Mul => lit(elem, 1.0),
                    ReduceOp::Max => lit(elem, f64::NEG_INFINITY),
                    _ => lit(elem, f64::INFINITY),
                };
                let ne_v = b.filled(&row, ident);
                let ne_d = b.zeros(&row);
                let out_ty = s.binds[0].ty.clone();
                let outs = b.emit_many(mk(ReduceOp::Lambda(lam), vec![ne_v, ne_d], vec![arrs[0], t]), vec![out_ty.clone(), out_ty], "pair");
                self.tan.insert(s.binds[0].var, outs[1]);
            }
        }
        Ok(())
    }

    /// A user operator over k values becomes one over k values and the
    /// tangents of the float ones: its JVP is again associative.
    fn reduce_lambda(&mut self, b: &mut Builder, s: &Stmt, l: &Lambda, ne: &[Atom], arrs: &[Atom], scan: bool) -> Result<(), AdError> {
        let k = arrs.len();
        let (acc, elem) = l.params.split_at(k);
        let floats: Vec<usize> = (0..k).filter(|&j| acc[j].ty.elem.is_float()).collect();
        if floats.is_empty() {
            b.push(s.clone());
            return Ok(());
        }
        // Transformed even when no input has a tangent: the operator may read
        // outer variables that do.
        let mut params: Vec<Binder> = acc.to_vec();
        for &j in &floats {
            params.push(self.tangent_binder(b, &acc[j]));
        }
        params.extend(elem.iter().cloned());
        for &j in &floats {
            params.push(self.tangent_binder(b, &elem[j]));
        }
        let tys: Vec<Type> = floats.iter().map(|&j| acc[j].ty.clone()).collect();
        let (stmts, result) = self.body_with_tangents(b, &l.body, &floats, &tys)?;
        let mut new_ne = ne.to_vec();
        let mut new_arrs = arrs.to_vec();
        for &j in &floats {
            let d = self.tan_or_zero(b, &ne[j], &acc[j].ty);
            new_ne.push(d);
            let at = b.type_of(&arrs[j]);
            let d = self.tan_or_zero(b, &arrs[j], &at);
            new_arrs.push(d);
        }
        let mut binds = s.binds.clone();
        for &j in &floats {
            binds.push(self.tangent_binder(b, &s.binds[j]));
        }
        let op = ReduceOp::Lambda(Lambda { params, body: Block { stmts, result } });
        let expr = if scan { Expr::Scan { op, ne: new_ne, arrs: new_arrs } } else { Expr::Reduce { op, ne: new_ne, arrs: new_arrs } };
        b.push(Stmt { binds, expr, loc: s.loc.clone() });
        Ok(())
    }
}

/// (value, tangent) pairs combined by a built-in operator.
fn pair_op(b: &mut Builder, op: &ReduceOp, s: Scalar, p: Atom, dp: Atom, x: Atom, dx: Atom) -> Vec<Atom> {
    match op {
        ReduceOp::Mul => {
            let v = b.prim(Prim::Mul, vec![p, x], s);
            let a = b.prim(Prim::Mul, vec![p, dx], s);
            let c = b.prim(Prim::Mul, vec![dp, x], s);
            let d = b.prim(Prim::Add, vec![a, c], s);
            vec![v, d]
        }
        // first extremal element wins, as for `max`/`min` (LANGUAGE.md §7)
        _ => {
            let cmp = if matches!(op, ReduceOp::Max) { Prim::Ge } else { Prim::Le };
            let c = b.prim(cmp, vec![p, x], Scalar::Bool);
            let v = b.prim(Prim::Select, vec![c, p, x], s);
            let d = b.prim(Prim::Select, vec![c, dp, dx], s);
            vec![v, d]
        }
    }
}

/// Apply a scalar function elementwise over arrays of `shape` (nested
/// `for`s); on scalars it is just the function.
pub(super) fn elementwise(b: &mut Builder, shape: &[Size], elem: Scalar, inputs: &[Atom], f: &dyn Fn(&mut Builder, &[Atom]) -> Vec<Atom>) -> Vec<Atom> {
    if shape.is_empty() {
        return f(b, inputs);
    }
    let ivar = b.fresh("e");
    let row = Type { elem, shape: shape[1..].to_vec() };
    b.begin();
    let rows: Vec<Atom> = inputs.iter().map(|a| b.emit(Expr::Index { arr: *a, idx: vec![Atom::Var(ivar)], checks: vec![None] }, row.clone(), "r")).collect();
    let outs = elementwise(b, &shape[1..], elem, &rows, f);
    let stmts = b.end();
    let ty = Type { elem, shape: shape.to_vec() };
    let tys = vec![ty; outs.len()];
    b.emit_many(Expr::For { ivar, size: shape[0].clone(), body: Block { stmts, result: outs } }, tys, "ew")
}
