//! Kernel selection for contractions: a `for` (or two nested) whose body
//! starts with a sum over `p` of a product of two array reads, with every
//! index a loop index or a value fixed for the whole nest —
//!
//! ```text
//! for i < n { for j < m { s = for p < k (add) { x = A[.., i, .., p, ..]; y = B[.., p, .., j, ..]; x * y }; epilogue(s) } }
//! ```
//!
//! (matrix products, matrix-vector products, either operand transposed or
//! broadcast; a single loop may also sum its results again: `sum (for i.
//! f (sum (for p. A[i, p] * x[p])))`). The sums are computed first, all at
//! once, by the tiled kernel of `contract.h` into a dense `[n][m]` buffer;
//! the loop nest is then emitted as usual with the sum statement replaced
//! by an unchecked IR read of that buffer, so the epilogue (a bias, an
//! activation, anything) keeps the generic code, and a body left with no
//! loop is polled between chunks, not at every iteration (it vectorises).
//! An epilogue making one f64 per sum writes over the sums in the result
//! array itself (no second array). The kernel adds the terms of each
//! output in the generic loop's order, so the bits do not change — only
//! the time.

use super::{Em, R};
use crate::ir::{Atom, Expr, Lit, Prim, Scalar, Size, Stmt, Type, VarId};

/// A matched nest: loop indexes and sizes, the sum's binder, the operands.
pub(super) struct Contraction {
    /// the outer loop (absent for a single loop: a matrix-vector product)
    i: Option<(VarId, Size)>,
    j: (VarId, Size),
    /// the summed index and its size
    p: VarId,
    k: Size,
    /// the binder of the sum, read from the buffer instead
    pub(super) sum: VarId,
    /// the operand indexed by `i` (or by neither `i` nor `j`) and `p`
    a: Operand,
    /// the operand indexed by `p` and `j`
    b: Operand,
}

/// `arr[idx]`, one index per axis.
struct Operand {
    arr: VarId,
    idx: Vec<Atom>,
}

/// The nest of statement `s` when it is a contraction the kernel computes.
pub(super) fn contraction_in(s: &Stmt, ty: &impl Fn(VarId) -> Option<Type>) -> Option<Contraction> {
    let (Expr::For { ivar, size, body } | Expr::ForAcc { ivar, size, body, .. }) = &s.expr else { return None };
    let first = body.stmts.first()?;
    // two loops: the outer body is just the inner loop, stacked (a summing
    // outer loop takes a single one: a matrix-vector product reduced again)
    if let Expr::For { ivar: jv, size: jsize, body: jbody } = &first.expr
        && matches!(s.expr, Expr::For { .. })
        && body.stmts.len() == 1
        && first.binds.len() == 1
        && body.result == [Atom::Var(first.binds[0].var)]
    {
        let inner = jbody.stmts.first()?;
        return matched(Some((*ivar, size.clone())), (*jv, jsize.clone()), inner, ty);
    }
    matched(None, (*ivar, size.clone()), first, ty)
}

/// `sum` is `for p < k (add) { x = A[..]; y = B[..]; x * y }` over f64,
/// with the operands' indexes fitting the loops `i` and `j`.
fn matched(i: Option<(VarId, Size)>, j: (VarId, Size), sum: &Stmt, ty: &impl Fn(VarId) -> Option<Type>) -> Option<Contraction> {
    let Expr::ForAcc { ivar: p, size: k, body, acc } = &sum.expr else { return None };
    if acc != &[true] || sum.binds.len() != 1 || sum.binds[0].ty != Type::scalar(Scalar::F64) || body.stmts.len() != 3 {
        return None;
    }
    let [Atom::Var(t)] = body.result.as_slice() else { return None };
    let product = &body.stmts[2];
    let Expr::Prim(Prim::Mul, args) = &product.expr else { return None };
    let ([Atom::Var(x), Atom::Var(y)], [bound]) = (args.as_slice(), product.binds.as_slice()) else { return None };
    if bound.var != *t || x == y {
        return None;
    }
    let read = |v: VarId| body.stmts[..2].iter().find(|st| st.binds.len() == 1 && st.binds[0].var == v).and_then(|st| operand(st, ty));
    let (x, y) = (read(*x)?, read(*y)?);
    let iv = i.as_ref().map(|(v, _)| *v);
    let loops = [iv, Some(j.0), Some(*p)];
    let uses = |o: &Operand, v: Option<VarId>| v.map_or(0, |v| o.idx.iter().filter(|a| **a == Atom::Var(v)).count());
    // any other index must not change inside the nest: a literal or a
    // variable bound outside it (the loops bind nothing else before the sum)
    let fixed =
        |o: &Operand| o.idx.iter().all(|a| matches!(a, Atom::Lit(Lit::I64(_))) || loops.iter().any(|l| Some(*a) == l.map(Atom::Var)) || is_outer(a, ty));
    let fits = |a: &Operand, b: &Operand| {
        uses(a, Some(*p)) == 1 && uses(b, Some(*p)) == 1 && uses(a, Some(j.0)) == 0 && uses(b, Some(j.0)) == 1 && uses(a, iv) <= 1 && uses(b, iv) == 0
    };
    if !fixed(&x) || !fixed(&y) {
        return None;
    }
    let (a, b) = if fits(&x, &y) {
        (x, y)
    } else if fits(&y, &x) {
        (y, x)
    } else {
        return None;
    };
    Some(Contraction { i, j, p: *p, k: k.clone(), sum: sum.binds[0].var, a, b })
}

/// Whether the nest of `s` stacks the sums unchanged (no epilogue).
fn is_just_the_sums(s: &Stmt, sum: VarId) -> bool {
    let Expr::For { body, .. } = &s.expr else { return false };
    if s.binds.len() != 1 {
        return false;
    }
    let inner = match &body.stmts[0].expr {
        Expr::For { body: inner, .. } => inner,
        _ => body,
    };
    inner.stmts.len() == 1 && inner.result == [Atom::Var(sum)]
}

/// `x = arr[idx]` reading one f64 element with no run-time check.
fn operand(st: &Stmt, ty: &impl Fn(VarId) -> Option<Type>) -> Option<Operand> {
    let Expr::Index { arr: Atom::Var(arr), idx, checks } = &st.expr else { return None };
    let t = ty(*arr)?;
    (t.elem == Scalar::F64 && t.rank() == idx.len() && checks.iter().all(Option::is_none)).then(|| Operand { arr: *arr, idx: idx.clone() })
}

/// An integer variable of the function (its type is known): bound outside
/// the nest, since the nest binds nothing before the sum but its indexes.
fn is_outer(a: &Atom, ty: &impl Fn(VarId) -> Option<Type>) -> bool {
    matches!(a, Atom::Var(v) if ty(*v).is_some_and(|t| t == Type::scalar(Scalar::I64)))
}

impl Em {
    /// Emit the contraction `c` of statement `s` (a `for`): the sums into
    /// a fresh buffer by the kernel, then the nest reading them.
    pub(super) fn contraction(&mut self, s: &Stmt, c: Contraction) -> R<()> {
        let (n, m, k) = (c.i.as_ref().map_or("((int64_t)1)".into(), |(_, n)| self.size(n)), self.size(&c.j.1), self.size(&c.k));
        let dims: Vec<Size> = c.i.iter().map(|(_, n)| n.clone()).chain([c.j.1.clone()]).collect();
        let dim_exprs: Vec<String> = dims.iter().map(|d| self.size(d)).collect();
        let out = &s.binds[0];
        // the sums are the result: the kernel writes them there (a fresh
        // array, or the row of an enclosing `for` that it is built into)
        let direct = is_just_the_sums(s, c.sum) && !self.sum_rows.contains_key(&out.var);
        // an epilogue making one f64 of the result from each sum (a bias,
        // an activation) replaces the sums in place: no second array
        let in_place = !direct
            && matches!(s.expr, Expr::For { .. })
            && s.binds.len() == 1
            && out.ty.elem == Scalar::F64
            && out.ty.rank() == dims.len()
            && !self.sum_rows.contains_key(&out.var);
        let buf = if direct || in_place { out.var } else { self.scratch_var() };
        let name = self.v(buf);
        if direct || in_place {
            if !self.view_of_dest_row(out, &name, &dim_exprs[0]) {
                self.new_arr(&name, Scalar::F64, &dim_exprs);
            }
        } else {
            self.ty.insert(buf, Type::array(Scalar::F64, dims.clone()));
            self.line(&format!("ard_arr {name};"));
            self.new_arr(&name, Scalar::F64, &dim_exprs);
        }
        let (iv, jv, pv) = (c.i.as_ref().map(|(v, _)| *v), c.j.0, c.p);
        let (a, sai, sap) = self.strided(&c.a, iv, Some(pv))?;
        let (b, sbp, sbj) = self.strided(&c.b, Some(pv), Some(jv))?;
        let (par, fail, at) = (!(self.par || self.seq_only), self.fail.clone(), self.at.clone());
        self.line(&format!(
            "if (ard_contract(ctx, ard_it, {}, {n}, {m}, {k}, {a}, {sai}, {sap}, {b}, {sbp}, {sbj}, (double *){name}.p, {at})) goto {fail};",
            par as u8
        ));
        if direct {
            return Ok(());
        }
        // the nest, its sum replaced by a read of the buffer: the generic
        // code then sees a body with no loop (polled between chunks, not
        // at every iteration: the epilogue can vectorise)
        let read = Expr::Index { arr: Atom::Var(buf), idx: iv.into_iter().chain([jv]).map(Atom::Var).collect(), checks: vec![None; dims.len()] };
        let mut nest = s.clone();
        let body = match &mut nest.expr {
            Expr::For { body, .. } | Expr::ForAcc { body, .. } => body,
            _ => return Err("internal: a contraction that is not a `for`".into()),
        };
        let inner = match (&mut body.stmts[0].expr, iv) {
            (Expr::For { body: inner, .. }, Some(_)) => inner,
            _ => body,
        };
        inner.stmts[0].expr = read;
        if in_place {
            self.made_rows.insert(out.var);
        }
        let r = self.stmt_here(&nest, &[]);
        self.made_rows.remove(&out.var);
        if !in_place {
            self.line(&format!("ard_release(ctx, {name}.b);"));
        }
        r.map(|_| ())
    }

    /// Operand `o` as a pointer to the element where the two loop indexes
    /// `r` and `c` are zero, and each one's stride (0 when it does not index).
    fn strided(&self, o: &Operand, r: Option<VarId>, c: Option<VarId>) -> R<(String, String, String)> {
        let x = self.v(o.arr);
        let rank = o.idx.len();
        let stride = |axis: usize| if axis + 1 == rank { "((int64_t)1)".to_string() } else { self.rowlen(&x, rank, axis + 1) };
        let (mut base, mut sr, mut sc) = (vec![], "((int64_t)0)".to_string(), "((int64_t)0)".to_string());
        for (axis, a) in o.idx.iter().enumerate() {
            match a {
                Atom::Var(v) if Some(*v) == r => sr = stride(axis),
                Atom::Var(v) if Some(*v) == c => sc = stride(axis),
                _ => base.push(format!("{} * {}", self.int(a), stride(axis))),
            }
        }
        let off = if base.is_empty() { String::new() } else { format!(" + {}", base.join(" + ")) };
        Ok((format!("((const double *){x}.p{off})"), sr, sc))
    }
}

/// A sum over `i` of outer products, the shape reverse mode gives the
/// cotangent of a matrix product's right operand (a dense layer's weights):
///
/// ```text
/// (.., W) = for i < n (.., add) { ..; (.., G) = for j < m { ..; g = for p < k { x = X[.., i, .., p, ..]; x * s }; in (.., g) }; in (.., G) }
/// ```
///
/// Each iteration builds an `[m][k]` array and adds it into `W`. Instead,
/// the scalars `s` are stacked into `D: [n][m]` by the same loop and
/// `W[j][p] = sum over i of D[i][j] * X[.., i, .., p, ..]` becomes a
/// contraction for the kernel. Each output adds the same products in the
/// same order (from zero, `i` ascending), so the bits do not change.
pub(super) struct OuterProducts {
    /// position of `W` among the results of the loop over `i`
    acc_result: usize,
    /// position of `G` among the results of the loop over `j`, and that loop's position in the body
    row_result: usize,
    j_stmt: usize,
    /// the loop over `p` in the body of the loop over `j`
    p_stmt: usize,
    /// the scalar multiplied into each row
    scale: Atom,
    /// `X[idx]`, with the loop indexes `i` and `p` in `idx`
    x: Operand,
    p: VarId,
    k: Size,
}

/// The outer-product sum of statement `s`, if it is one.
pub(super) fn outer_products_in(s: &Stmt, ty: &impl Fn(VarId) -> Option<Type>) -> Option<OuterProducts> {
    let Expr::ForAcc { ivar: i, body, acc, .. } = &s.expr else { return None };
    let bound = crate::ir::walk::bound_vars_block(body);
    for (acc_result, (a, summed)) in body.result.iter().zip(acc).enumerate() {
        let Atom::Var(g_rows) = a else { continue };
        if !summed || body.result.iter().filter(|r| *r == a).count() != 1 {
            continue;
        }
        let Some(j_stmt) = body.stmts.iter().position(|st| matches!(st.expr, Expr::For { .. }) && st.binds.iter().any(|b| b.var == *g_rows)) else { continue };
        if used_in_stmts(&body.stmts[j_stmt + 1..], *g_rows) {
            continue;
        }
        let Expr::For { body: jbody, .. } = &body.stmts[j_stmt].expr else { continue };
        let row_result = body.stmts[j_stmt].binds.iter().position(|b| b.var == *g_rows)?;
        let Atom::Var(g) = jbody.result[row_result] else { continue };
        if jbody.result.iter().filter(|r| **r == Atom::Var(g)).count() != 1 {
            continue;
        }
        let Some(p_stmt) = jbody.stmts.iter().position(|st| st.binds.len() == 1 && st.binds[0].var == g) else { continue };
        if used_in_stmts(&jbody.stmts[p_stmt + 1..], g) {
            continue;
        }
        let Some((scale, x, p, k)) = scaled_row(&jbody.stmts[p_stmt], *i, ty) else { continue };
        // `X` and its fixed indexes are read before the loop over `i` runs
        let outside = |a: &Atom| matches!(a, Atom::Lit(_)) || matches!(a, Atom::Var(v) if !bound.contains(v) && *v != *i);
        if !outside(&Atom::Var(x.arr)) || !x.idx.iter().all(|a| *a == Atom::Var(*i) || *a == Atom::Var(p) || outside(a)) {
            continue;
        }
        return Some(OuterProducts { acc_result, row_result, j_stmt, p_stmt, scale, x, p, k });
    }
    None
}

/// `g = for p < k { x = X[idx]; x * s }` (either operand order) with `i`
/// and `p` each once in `idx` and `s` not bound in the loop: `s`, the
/// read, `p` and `k`.
fn scaled_row(st: &Stmt, i: VarId, ty: &impl Fn(VarId) -> Option<Type>) -> Option<(Atom, Operand, VarId, Size)> {
    let Expr::For { ivar: p, size: k, body } = &st.expr else { return None };
    if st.binds[0].ty.elem != Scalar::F64 || body.stmts.len() != 2 {
        return None;
    }
    let (read, product) = (&body.stmts[0], &body.stmts[1]);
    let (Expr::Prim(Prim::Mul, args), [t]) = (&product.expr, product.binds.as_slice()) else { return None };
    if body.result != [Atom::Var(t.var)] || read.binds.len() != 1 {
        return None;
    }
    let xv = Atom::Var(read.binds[0].var);
    let scale = match args.as_slice() {
        [a, s] | [s, a] if *a == xv && *s != xv => *s,
        _ => return None,
    };
    if scale == Atom::Var(*p)
        || !matches!(scale, Atom::Lit(Lit::F64(_))) && !matches!(scale, Atom::Var(v) if ty(v).is_some_and(|t| t == Type::scalar(Scalar::F64)))
    {
        return None;
    }
    let x = operand(read, ty)?;
    let once = |v: VarId| x.idx.iter().filter(|a| **a == Atom::Var(v)).count() == 1;
    (once(i) && once(*p)).then(|| (scale, x, *p, k.clone()))
}

fn used_in_stmts(stmts: &[Stmt], v: VarId) -> bool {
    let mut used = false;
    for st in stmts {
        crate::ir::walk::visit_expr(&st.expr, &mut |u| used |= u == v, &mut |_| {});
    }
    used
}

impl Em {
    /// Emit the outer-product sum `o` of statement `s` as the loop stacking
    /// the scales, then the contraction (see [`OuterProducts`]).
    pub(super) fn outer_products(&mut self, s: &Stmt, o: OuterProducts) -> R<()> {
        let Expr::ForAcc { ivar: i, size: n, body, acc } = &s.expr else { unreachable!("an outer-product sum is a `for` with accumulation") };
        let Expr::For { ivar: j, size: m, body: jbody } = &body.stmts[o.j_stmt].expr else { unreachable!("checked by outer_products_in") };
        let f64_of = |shape: Vec<Size>| Type::array(Scalar::F64, shape);
        // the loop over `i`, stacking `D` where it summed `W`
        let (d, dj) = (self.scratch_var(), self.scratch_var());
        let mut jbody2 = jbody.clone();
        jbody2.stmts.remove(o.p_stmt);
        jbody2.result[o.row_result] = o.scale;
        let mut jstmt = body.stmts[o.j_stmt].clone();
        jstmt.binds[o.row_result] = crate::ir::Binder { var: dj, ty: f64_of(vec![m.clone()]) };
        jstmt.expr = Expr::For { ivar: *j, size: m.clone(), body: jbody2 };
        let mut body2 = body.clone();
        body2.stmts[o.j_stmt] = jstmt;
        body2.result[o.acc_result] = Atom::Var(dj);
        let mut acc2 = acc.clone();
        acc2[o.acc_result] = false;
        let mut binds = s.binds.clone();
        let w = std::mem::replace(&mut binds[o.acc_result], crate::ir::Binder { var: d, ty: f64_of(vec![n.clone(), m.clone()]) });
        for (v, t) in [(d, binds[o.acc_result].ty.clone()), (dj, f64_of(vec![m.clone()]))] {
            self.ty.insert(v, t);
        }
        let stack = Stmt { binds, expr: Expr::ForAcc { ivar: *i, size: n.clone(), body: body2, acc: acc2 }, loc: s.loc.clone() };
        // W[j][p] = sum over i of D[i][j] * X[.., i, .., p, ..]
        let (j2, p2, i2, dv, xv, tv, row) =
            (self.scratch_var(), self.scratch_var(), self.scratch_var(), self.scratch_var(), self.scratch_var(), self.scratch_var(), self.scratch_var());
        let scalar = Type::scalar(Scalar::F64);
        for (v, t) in [
            (j2, Type::scalar(Scalar::I64)),
            (p2, Type::scalar(Scalar::I64)),
            (i2, Type::scalar(Scalar::I64)),
            (dv, scalar.clone()),
            (xv, scalar.clone()),
            (tv, scalar.clone()),
        ] {
            self.ty.insert(v, t);
        }
        self.ty.insert(row, f64_of(vec![o.k.clone()]));
        let rename = |a: &Atom| match a {
            Atom::Var(v) if *v == *i => Atom::Var(i2),
            Atom::Var(v) if *v == o.p => Atom::Var(p2),
            _ => *a,
        };
        let bind = |var: VarId, ty: Type, expr: Expr| Stmt { binds: vec![crate::ir::Binder { var, ty }], expr, loc: None };
        let read_d = Expr::Index { arr: Atom::Var(d), idx: vec![Atom::Var(i2), Atom::Var(j2)], checks: vec![None, None] };
        let read_x = Expr::Index { arr: Atom::Var(o.x.arr), idx: o.x.idx.iter().map(rename).collect(), checks: vec![None; o.x.idx.len()] };
        let terms = crate::ir::Block {
            stmts: vec![
                bind(dv, scalar.clone(), read_d),
                bind(xv, scalar.clone(), read_x),
                bind(tv, scalar.clone(), Expr::Prim(Prim::Mul, vec![Atom::Var(dv), Atom::Var(xv)])),
            ],
            result: vec![Atom::Var(tv)],
        };
        let sum = self.scratch_var();
        self.ty.insert(sum, scalar.clone());
        let sum_stmt = Stmt {
            binds: vec![crate::ir::Binder { var: sum, ty: scalar }],
            expr: Expr::ForAcc { ivar: i2, size: n.clone(), body: terms, acc: vec![true] },
            loc: None,
        };
        let rows = crate::ir::Block {
            stmts: vec![Stmt {
                binds: vec![crate::ir::Binder { var: row, ty: f64_of(vec![o.k.clone()]) }],
                expr: Expr::For { ivar: p2, size: o.k.clone(), body: crate::ir::Block { stmts: vec![sum_stmt], result: vec![Atom::Var(sum)] } },
                loc: None,
            }],
            result: vec![Atom::Var(row)],
        };
        let contraction = Stmt { binds: vec![w], expr: Expr::For { ivar: j2, size: m.clone(), body: rows }, loc: s.loc.clone() };
        let dn = self.v(d);
        self.line(&format!("ard_arr {dn};"));
        self.stmt(&stack, &[])?;
        let c = contraction_in(&contraction, &|v| self.ty.get(&v).cloned()).ok_or("internal: an outer-product sum that is not a contraction")?;
        self.contraction(&contraction, c)?;
        self.line(&format!("ard_release(ctx, {dn}.b);"));
        Ok(())
    }
}
