//! One-hot rules beyond the sum (paper 000): an array plus a one-hot array
//! is one element updated, and a one-hot sum whose hot index belongs to
//! the inner loop is a scatter. (The gather dual, `for j. Σ_i select (i ==
//! e_j) x_i 0`, is `onehot_sum` inside a `for`.) A scatter whose indices
//! are the loop index shifted by a constant (reverse mode of a stencil
//! `x[i - 1]`) is a gather.

use super::{bind, in_range, local_def, one_hot_term};
use crate::ir::{Atom, Block, Expr, Lit, Loc, LoopKind, Prim, Scalar, Size, Stmt, Type, VarId, walk};
use crate::opt::rule::{Ctx, Rule};

pub const RULES: &[Rule] = &[
    Rule::on_stmt(
        "onehot_add",
        "`for i < n. a[i] + select (i == e) x 0` where the select is a structural zero cotangent (reverse mode of `maximum`) and x, e do not depend on i → a copy of `a` with element e updated to a[e] + x (no update when e is out of range); an element a[i] = -0.0 stays -0.0 where the loop gave 0.0",
        onehot_add,
    ),
    Rule::on_stmt(
        "onehot_scatter",
        "`for i < n. Σ_j<m select (e_j == i) x_j 0` (or `if e_j == i then x_j else 0`) where e_j and x_j do not depend on i → a counted loop over j adding x_j into element e_j of zeros (+0 into element 0 when e_j is out of range, which changes no bin): O(n + m) instead of O(n·m), bitwise the same sums; the inner body must not fail",
        onehot_scatter,
    ),
    Rule::on_stmt(
        "scatter_shift",
        "`scatter_add d is v` where `is = for i < n. g(i)` and g is the identity or a stencil's shift with its boundary (`if i == 0 then 0 else i - 1`, `if i == n - 1 then t else i + 1`, t = 0 or n - 1; reverse mode of `x[i - 1]`, `x[i + 1]`), d of size n → `for e < n. d[e] + v[g⁻¹(e)]`, adding the values that land on e in the scatter's order: bitwise the same, no index array, no pass over pairs; every index is provably in range (the scatter cannot fail); also a loop shorter than d (`for i < m`, v of size m) with g(i) = i + k, k >= 0, no boundary and size(d) - m - k a constant >= 0: `v[e - k]` where 0 <= e - k < m",
        scatter_shift,
    ),
    Rule::on_stmt(
        "scatter_stencil",
        "`scatter_add d (flatten* is) (flatten* vs)` where `is`, `vs` are stacked results of one nest `for i_1 … i_r` whose body gives `if guard then (Σ (i_k + s_k)·stride_k, v) else (0, ±0.0)` (reverse mode of a stencil's guarded shifted reads, any rank), the guard a conjunction of `lo_k <= i_k < n_k - hi_k` (comparisons, `&&`, stored conditions) keeping every i_k + s_k in range → `for e_1 … e_r. d[p] + vs[p - q]` where the source is in its band, plus ±0.0 on element 0 when a miss exists: bitwise the same, no index array, no pass over pairs",
        scatter_stencil,
    ),
    Rule::on_stmt(
        "guarded_index",
        "`if c then { … a[i + k!] … } else …` where c bounds the index i of an enclosing loop over the axis's size (`i > 0`, `i < n - 1`, `&&`, stored conditions) so that i + k is in range → the read unchecked (a dead read can then go)",
        guarded_index,
    ),
    Rule::on_stmt(
        "nonempty_if",
        "`if cells > 0 then A else B` where cells is the element count of the first axes of every result and A cannot fail (reverse mode's guard around a scatter into a flattened cotangent, once the scatter is a gather) → A: with no elements both branches give the same empty arrays",
        nonempty_if,
    ),
    Rule::on_stmt("unflatten_flatten", "`unflatten n m (flatten x)` where x has the result's type, n and m its first two axes → x", unflatten_flatten),
    Rule::on_stmt(
        "if_select",
        "`if c then x else 0.0` (either branch a float ±0.0 literal) whose branches are atoms with no statements → `select c x 0.0` (reverse mode's guarded cotangents; cheap to recompute, branch-free in C)",
        if_select,
    ),
    Rule::on_stmt(
        "scatter_one",
        "`scatter_add d [e] [x]` (one scalar, reverse mode of a read `v[e]` in a sequential loop) where e is provably in range → `update d[e] = d[e] + x`: bitwise the same sum, in place, with no index and value arrays allocated per iteration",
        scatter_one,
    ),
    Rule::on_stmt("index_unflatten_replicate", "`(unflatten n m (replicate k v))[i, j]` with unchecked indices → v", index_unflatten_replicate),
];

/// Where a rule's guarded update would report an error (never: the index
/// is checked first).
fn guarded_loc() -> Loc {
    Loc { file: "<optimiser>".into(), line: 0, col: 0 }
}

/// `a` is a variable of the body `body` whose statement binds `Expr::Prim(p, _)`.
fn prim_of<'b>(body: &'b Block, a: &Atom, p: Prim) -> Option<&'b [Atom]> {
    let Atom::Var(v) = a else { return None };
    match &local_def(body, *v)?.expr {
        Expr::Prim(q, xs) if *q == p => Some(xs),
        _ => None,
    }
}

fn onehot_add(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = super::single(s)?;
    let Expr::For { ivar, size, body } = &s.expr else { return None };
    if y.ty.rank() != 1 || !y.ty.elem.is_float() || ctx.can_fail(s) {
        return None;
    }
    let xs = prim_of(body, &body.result[0], Prim::Add)?;
    let local_vars = walk::bound_vars_block(body);
    // one operand reads a[i], the other is the marked one-hot term
    let (k, arr) = (0..2).find_map(|k| {
        let Atom::Var(r) = xs[k] else { return None };
        match &local_def(body, r)?.expr {
            Expr::Index { arr: a @ Atom::Var(av), idx, checks } if idx == &[Atom::Var(*ivar)] && checks[0].is_none() && !local_vars.contains(av) => {
                Some((k, *a))
            }
            _ => None,
        }
    })?;
    let Atom::Var(t) = xs[1 - k] else { return None };
    if !ctx.is_onehot(t) {
        return None;
    }
    let (x, e) = one_hot_term(body, &xs[1 - k], *ivar, &local_vars)?;
    if matches!(x, Atom::Var(v) if v == *ivar || local_vars.contains(&v)) || ctx.type_of(&arr).as_ref() != Some(&y.ty) || y.ty.shape[0] != *size {
        return None;
    }
    let elem = Type::scalar(y.ty.elem);
    let (old, new, out) = (ctx.fresh("at"), ctx.fresh("at"), ctx.fresh_like(y.var));
    let sum = if k == 0 { vec![Atom::Var(old), x] } else { vec![x, Atom::Var(old)] };
    let update = vec![
        bind(old, elem.clone(), Expr::Index { arr, idx: vec![e], checks: vec![None] }),
        bind(new, elem, Expr::Prim(Prim::Add, sum)),
        bind(out, y.ty.clone(), Expr::Update { arr, idx: e, val: Atom::Var(new), loc: guarded_loc() }),
    ];
    guarded(y.var, &y.ty, e, size, update, Atom::Var(out), arr, ctx)
}

/// `y = if 0 <= e < n then { then_stmts; then_val } else { otherwise }`, or
/// only the then-branch when `0 <= e < n` is proven.
#[allow(clippy::too_many_arguments)]
fn guarded(y: VarId, ty: &Type, e: Atom, n: &Size, then_stmts: Vec<Stmt>, then_val: Atom, otherwise: Atom, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    if ctx.provably_below(&e, n) {
        let mut out = then_stmts;
        out.push(bind(y, ty.clone(), Expr::Atom(then_val)));
        return Some(out);
    }
    let (mut out, ok) = in_range(e, n, ctx)?;
    out.push(bind(
        y,
        ty.clone(),
        Expr::If { cond: ok, then_b: Block { stmts: then_stmts, result: vec![then_val] }, else_b: Block { stmts: vec![], result: vec![otherwise] } },
    ));
    Some(out)
}

fn onehot_scatter(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = super::single(s)?;
    let Expr::For { ivar: i, size: n, body } = &s.expr else { return None };
    if y.ty.rank() != 1 || !y.ty.elem.is_float() || ctx.can_fail(s) {
        return None;
    }
    // the body is one accumulating `for` over j
    let [inner] = body.stmts.as_slice() else { return None };
    let Expr::ForAcc { ivar: j, size: m, body: ib, acc } = &inner.expr else { return None };
    if inner.binds.len() != 1 || body.result[0] != Atom::Var(inner.binds[0].var) || acc != &[true] || m.vars().contains(i) {
        return None;
    }
    let (x, e, test, sel, then_stmts) = scatter_term(ib, *i)?;
    scatter_loop(y.var, &y.ty, n, *j, m, ib, (x, then_stmts), e, &[test, sel], ctx)
}

/// The inner body's term `select (e == i) x 0` or `if e == i then {…; x}
/// else 0` (or `i == e`), where the test is the only statement reading
/// `i`, read only by the select, and the select is the body's result, read
/// nowhere else: `(x, e)`, the binders of the test and the select, and the
/// statements of the `if`'s then-branch (run when the test holds, as
/// they will be in the scatter).
fn scatter_term(ib: &Block, i: VarId) -> Option<(Atom, Atom, VarId, VarId, Vec<Stmt>)> {
    let Atom::Var(sel) = ib.result[0] else { return None };
    let (c, x, then_stmts) = match &local_def(ib, sel)?.expr {
        Expr::If { cond, then_b, else_b } if else_b.stmts.is_empty() && super::is_lit(&else_b.result[0], 0.0) && then_b.result.len() == 1 => {
            (*cond, then_b.result[0], then_b.stmts.clone())
        }
        e => {
            let (c, x) = super::select_zero(e)?;
            (c, x, vec![])
        }
    };
    let Atom::Var(test) = c else { return None };
    let eq = prim_of(ib, &c, Prim::Eq)?;
    let e = match (eq[0], eq[1]) {
        (Atom::Var(a), e) if a == i => e,
        (e, Atom::Var(b)) if b == i => e,
        _ => return None,
    };
    let readers = |v: VarId| ib.stmts.iter().filter(|st| walk::free_vars_stmt(st).contains(&v)).count();
    if e == Atom::Var(i) || x == Atom::Var(i) || readers(i) != 1 || readers(test) != 1 || readers(sel) != 0 || ib.result.len() != 1 {
        return None;
    }
    Some((x, e, test, sel, then_stmts))
}

/// `y = loop (acc = replicate n 0.0) for j < (n > 0 ? m : 0) { inner
/// statements; ok = 0 <= e_j < n; acc[ok ? e_j : 0] += (ok ? x_j : 0) }`.
/// Branch-free, so both backends update `acc` in place (an update inside
/// an `if` branch would copy it at every item). Adding the +0 of a miss is
/// exact: a bin sums from +0 and is never -0.0.
#[allow(clippy::too_many_arguments)]
fn scatter_loop(
    y: VarId,
    ty: &Type,
    n: &Size,
    j: VarId,
    m: &Size,
    ib: &Block,
    (x, then_stmts): (Atom, Vec<Stmt>),
    e: Atom,
    drop: &[VarId],
    ctx: &mut Ctx,
) -> Option<Vec<Stmt>> {
    let (zeros, accv) = (ctx.fresh("zeros"), ctx.fresh("acc"));
    let elem = Type::scalar(ty.elem);
    let int = Type::scalar(crate::ir::Scalar::I64);
    let (n_atom, m_atom) = (n.as_atom()?, m.as_atom()?);
    // the inner statements except the hot test and the select, then the
    // term's own (they cannot fail); their results keep their names (the
    // loop body is their only copy)
    let mut stmts: Vec<Stmt> = ib.stmts.iter().filter(|st| st.binds.iter().all(|b| !drop.contains(&b.var))).cloned().collect();
    stmts.extend(then_stmts);
    let (at, val) = if ctx.provably_below(&e, n) {
        (e, x)
    } else {
        let (guard, ok) = in_range(e, n, ctx)?;
        stmts.extend(guard);
        let (at, val) = (ctx.fresh("at"), ctx.fresh("hit"));
        stmts.push(bind(at, int.clone(), Expr::Prim(Prim::Select, vec![ok, e, Atom::Lit(crate::ir::Lit::I64(0))])));
        stmts.push(bind(val, elem.clone(), Expr::Prim(Prim::Select, vec![ok, x, super::lit_f(ty.elem, 0.0)])));
        (Atom::Var(at), Atom::Var(val))
    };
    let (old, new, nextv) = (ctx.fresh("at"), ctx.fresh("at"), ctx.fresh("acc"));
    stmts.extend([
        bind(old, elem.clone(), Expr::Index { arr: Atom::Var(accv), idx: vec![at], checks: vec![None] }),
        bind(new, elem, Expr::Prim(Prim::Add, vec![Atom::Var(old), val])),
        bind(nextv, ty.clone(), Expr::Update { arr: Atom::Var(accv), idx: at, val: Atom::Var(new), loc: guarded_loc() }),
    ]);
    let body = Block { stmts, result: vec![Atom::Var(nextv)] };
    // no item when there is no bin (index 0 would not exist)
    let (some, count) = (ctx.fresh("some"), ctx.fresh("items"));
    let kind = LoopKind::Count { ivar: j, n: Atom::Var(count), down: false };
    Some(vec![
        bind(zeros, ty.clone(), Expr::Replicate { n: n_atom, val: super::lit_f(ty.elem, 0.0) }),
        bind(some, Type::scalar(crate::ir::Scalar::Bool), Expr::Prim(Prim::Gt, vec![n_atom, Atom::Lit(crate::ir::Lit::I64(0))])),
        bind(count, int, Expr::Prim(Prim::Select, vec![Atom::Var(some), m_atom, Atom::Lit(crate::ir::Lit::I64(0))])),
        Stmt {
            binds: vec![crate::ir::Binder { var: y, ty: ty.clone() }],
            expr: Expr::Loop { params: vec![crate::ir::Binder { var: accv, ty: ty.clone() }], init: vec![Atom::Var(zeros)], kind, body },
            loc: None,
        },
    ])
}

/// Where a boundary test `i == c` of a stencil puts `c`, and where a
/// boundary pair lands: the first or the last element.
#[derive(Clone, Copy, PartialEq, Debug)]
enum End {
    First,
    Last,
}

/// An index array `for i < n. g(i)` that `scatter_shift` inverts:
/// `g(i) = i + shift`, except `g(c) = target` at the boundary `c` when
/// there is one.
#[derive(Clone, Copy, Debug)]
struct Shift {
    shift: i64,
    boundary: Option<(End, End)>,
}

impl Shift {
    /// Whether every `g(i)`, `0 <= i < n`, lies in `0 .. n`: the shift
    /// moves away from the boundary that the test excludes.
    fn in_range(&self) -> bool {
        matches!((self.boundary, self.shift), (_, 0) | (Some((End::First, _)), -1) | (Some((End::Last, _)), 1))
    }
}

/// `e + k` as an atom, with the statement computing it when `k != 0`.
fn offset(e: VarId, k: i64, stmts: &mut Vec<Stmt>, ctx: &mut Ctx) -> Atom {
    if k == 0 {
        return Atom::Var(e);
    }
    let t = ctx.fresh("src");
    stmts.push(bind(t, Type::scalar(Scalar::I64), Expr::Prim(Prim::Add, vec![Atom::Var(e), Atom::Lit(Lit::I64(k))])));
    Atom::Var(t)
}

fn scatter_shift(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = super::single(s)?;
    let Expr::ScatterAdd { dest, idxs, vals, .. } = &s.expr else { return None };
    if y.ty.rank() != 1 {
        return None;
    }
    let Atom::Var(iv) = idxs else { return None };
    let (n, g) = index_function(ctx, *iv)?;
    let v_len = ctx.type_of(vals)?.shape.first().cloned();
    if v_len.as_ref() != Some(&n) {
        return None;
    }
    let mut out = vec![];
    // a loop shorter than the target (`for (i < n - 1). … x[i + 1] …`):
    // a shift by k >= 0 with no boundary, n + k <= the target's size, so
    // every index is in range; the pair landing on e exists where
    // 0 <= e - k < n
    let target = y.ty.shape[0].clone();
    let shorter = if target == n {
        if !g.in_range() {
            return None;
        }
        None
    } else {
        let room = target.sub(&n).sub(&crate::ir::Size::constant(g.shift)).as_const();
        if g.boundary.is_some() || g.shift < 0 || room.is_none_or(|c| c < 0) {
            return None;
        }
        let mut emit = |p: Prim, xs: Vec<Atom>| {
            let t = ctx.fresh("len");
            out.push(bind(t, Type::scalar(Scalar::I64), Expr::Prim(p, xs)));
            Atom::Var(t)
        };
        Some(n.materialize(&mut emit))
    };
    let n_atom = match shorter {
        Some(m) => m,
        None => n.as_atom()?,
    };
    let elem = Type::scalar(y.ty.elem);
    let boolt = Type::scalar(Scalar::Bool);
    let e = ctx.fresh("e");
    // `n - 1`, computed once before the loop when a boundary is the last element
    let last = match g.boundary {
        Some((End::Last, _) | (_, End::Last)) => {
            let t = ctx.fresh("last");
            out.push(bind(t, Type::scalar(Scalar::I64), Expr::Prim(Prim::Sub, vec![n_atom, Atom::Lit(Lit::I64(1))])));
            Atom::Var(t)
        }
        _ => n_atom,
    };
    let at = |end: End| match end {
        End::First => Atom::Lit(Lit::I64(0)),
        End::Last => last,
    };
    let d0 = ctx.fresh("at");
    let mut stmts = vec![bind(d0, elem.clone(), Expr::Index { arr: *dest, idx: vec![Atom::Var(e)], checks: vec![None] })];
    let mut cur = Atom::Var(d0);
    // `cur + v[src]` when `cond` holds: both reads are in range there
    let add_if = |cond: Option<Atom>, src: Atom, stmts: &mut Vec<Stmt>, cur: &mut Atom, ctx: &mut Ctx| {
        let (x, sum) = (ctx.fresh("at"), ctx.fresh("at"));
        let add = vec![
            bind(x, elem.clone(), Expr::Index { arr: *vals, idx: vec![src], checks: vec![None] }),
            bind(sum, elem.clone(), Expr::Prim(Prim::Add, vec![*cur, Atom::Var(x)])),
        ];
        match cond {
            None => {
                stmts.extend(add);
                *cur = Atom::Var(sum);
            }
            Some(c) => {
                let r = ctx.fresh("at");
                let then_b = Block { stmts: add, result: vec![Atom::Var(sum)] };
                let else_b = Block { stmts: vec![], result: vec![*cur] };
                stmts.push(bind(r, elem.clone(), Expr::If { cond: c, then_b, else_b }));
                *cur = Atom::Var(r);
            }
        }
    };
    let prim = |p: Prim, a: Atom, b: Atom, stmts: &mut Vec<Stmt>, ctx: &mut Ctx| {
        let t = ctx.fresh("in");
        stmts.push(bind(t, boolt.clone(), Expr::Prim(p, vec![a, b])));
        Atom::Var(t)
    };
    // the pairs landing on e, in the scatter's order (increasing i): the
    // boundary's pair (i = c) and the shifted one (i = e - shift, when it
    // is in 0 .. n and not c). Where both land on one element, c = 0 is
    // the lower i and c = n - 1 the higher
    let boundary_first = matches!(g.boundary, Some((End::First, _)));
    let boundary = |stmts: &mut Vec<Stmt>, cur: &mut Atom, ctx: &mut Ctx| {
        if let Some((c, t)) = g.boundary {
            let hit = prim(Prim::Eq, Atom::Var(e), at(t), stmts, ctx);
            add_if(Some(hit), at(c), stmts, cur, ctx);
        }
    };
    if boundary_first {
        boundary(&mut stmts, &mut cur, ctx);
    }
    let src = offset(e, -g.shift, &mut stmts, ctx);
    // where the shifted pair exists: `src` in range, and (with no shift)
    // not the boundary's own i, whose pair is the boundary's
    let cond = match (g.shift, g.boundary) {
        (k, _) if shorter.is_some() => {
            let below = prim(Prim::Lt, src, n_atom, &mut stmts, ctx);
            if k > 0 {
                let above = prim(Prim::Ge, src, Atom::Lit(Lit::I64(0)), &mut stmts, ctx);
                Some(prim(Prim::And, above, below, &mut stmts, ctx))
            } else {
                Some(below)
            }
        }
        (k, _) if k > 0 => Some(prim(Prim::Ge, src, Atom::Lit(Lit::I64(0)), &mut stmts, ctx)),
        (k, _) if k < 0 => Some(prim(Prim::Lt, src, n_atom, &mut stmts, ctx)),
        (_, Some((c, _))) => Some(prim(Prim::Ne, src, at(c), &mut stmts, ctx)),
        _ => None,
    };
    add_if(cond, src, &mut stmts, &mut cur, ctx);
    if !boundary_first {
        boundary(&mut stmts, &mut cur, ctx);
    }
    let body = Block { stmts, result: vec![cur] };
    out.push(Stmt { binds: vec![y.clone()], expr: Expr::For { ivar: e, size: target, body }, loc: None });
    Some(out)
}

/// The size and index function of `is` when it is a stacked result of a
/// `for i < n` whose body returns `i + k`, or `if i == c then t else i + k`
/// with the boundary c and the target t each 0 or n - 1.
fn index_function(ctx: &Ctx, is: VarId) -> Option<(Size, Shift)> {
    let st = ctx.def(is)?;
    let k = st.binds.iter().position(|b| b.var == is)?;
    let (i, n, body) = match &st.expr {
        Expr::For { ivar, size, body } => (*ivar, size, body),
        Expr::ForAcc { ivar, size, body, acc } if !acc[k] => (*ivar, size, body),
        _ => return None,
    };
    if st.binds[k].ty.rank() != 1 {
        return None;
    }
    let r = body.result[k];
    if let Some(shift) = shifted(body, &r, i) {
        return Some((n.clone(), Shift { shift, boundary: None }));
    }
    let n_atom = n.as_atom()?;
    // `if i == c then t else i + k`
    let Atom::Var(rv) = r else { return None };
    let def = local_def(body, rv)?;
    let Expr::If { cond, then_b, else_b } = &def.expr else { return None };
    let pos = def.binds.iter().position(|b| b.var == rv)?;
    let eq = prim_of(body, cond, Prim::Eq)?;
    let c = match (eq[0], eq[1]) {
        (Atom::Var(a), c) if a == i => c,
        (c, Atom::Var(b)) if b == i => c,
        _ => return None,
    };
    let end_of = |block: &Block, a: &Atom| -> Option<End> {
        match a {
            Atom::Lit(Lit::I64(0)) => Some(End::First),
            Atom::Var(v) if is_last(block, body, ctx, *v, &n_atom) => Some(End::Last),
            _ => None,
        }
    };
    let c_end = end_of(body, &c)?;
    let then_r = then_b.result[pos];
    // the boundary's own index: `t`, or `i` itself (t = c)
    let t_end = if then_r == Atom::Var(i) || then_r == c { c_end } else { end_of(then_b, &then_r)? };
    let shift = shifted(else_b, &else_b.result[pos], i)?;
    Some((n.clone(), Shift { shift, boundary: Some((c_end, t_end)) }))
}

/// Whether `v` is `n - 1`, bound in `block`, the body around it or in scope.
fn is_last(block: &Block, body: &Block, ctx: &Ctx, v: VarId, n: &Atom) -> bool {
    let def = local_def(block, v).or_else(|| local_def(body, v)).or_else(|| ctx.def(v));
    matches!(def.map(|d| &d.expr), Some(Expr::Prim(Prim::Sub, xs)) if xs[0] == *n && xs[1] == Atom::Lit(Lit::I64(1)))
}

/// `k` when `a` is `i + k` (`i`, `i + k`, `k + i` or `i - k`, bound in `block`).
fn shifted(block: &Block, a: &Atom, i: VarId) -> Option<i64> {
    if *a == Atom::Var(i) {
        return Some(0);
    }
    let Atom::Var(v) = a else { return None };
    let lit = |x: &Atom| match x {
        Atom::Lit(Lit::I64(k)) => Some(*k),
        _ => None,
    };
    match &local_def(block, *v)?.expr {
        Expr::Prim(Prim::Add, xs) if xs[0] == Atom::Var(i) => lit(&xs[1]),
        Expr::Prim(Prim::Add, xs) if xs[1] == Atom::Var(i) => lit(&xs[0]),
        Expr::Prim(Prim::Sub, xs) if xs[0] == Atom::Var(i) => lit(&xs[1])?.checked_neg(),
        _ => None,
    }
}

/// A loop nest whose stacked results `scatter_stencil` reads: for each
/// level (outermost first) its index, trip count and body.
struct Nest<'a> {
    levels: Vec<(VarId, Size, &'a Block)>,
}

/// Where a variable of a nest's bodies is bound, and which loop index is
/// which axis: the bodies to search (innermost first) and `(index, axis)`.
struct Frame<'a> {
    blocks: Vec<&'a Block>,
    axes: Vec<(VarId, usize)>,
}

impl<'a> Frame<'a> {
    fn axis(&self, v: VarId) -> Option<usize> {
        self.axes.iter().find(|(i, _)| *i == v).map(|(_, d)| *d)
    }

    /// The statement binding `v` in one of the frame's bodies.
    fn local(&self, v: VarId) -> Option<&'a Stmt> {
        self.blocks.iter().find_map(|b| local_def(b, v))
    }

    /// Whether `v` is bound in the frame (a body's statement or an index):
    /// it varies inside the nest.
    fn inside(&self, v: VarId) -> bool {
        self.axis(v).is_some() || self.local(v).is_some()
    }
}

/// An `i64` value over a nest's indices: `index_d + c`, or a size that
/// does not vary inside the nest.
enum Lin {
    Idx(usize, i64),
    Size(Size),
}

/// `a` as a polynomial over the nest's indices and the sizes and integers
/// bound outside it (`+`, `-`, `*`, literals); `None` for anything else
/// bound inside (a value read from an array).
fn poly(a: &Atom, frame: &Frame, ctx: &Ctx, depth: usize) -> Option<Size> {
    let v = match a {
        Atom::Lit(Lit::I64(c)) => return Some(Size::constant(*c)),
        Atom::Var(v) => *v,
        Atom::Lit(_) => return None,
    };
    if frame.axis(v).is_some() || depth == 0 {
        return frame.axis(v).map(|_| Size::var(v));
    }
    let def = frame.local(v).or_else(|| ctx.def(v));
    match def.map(|d| (&d.expr, d.binds.len())) {
        Some((Expr::Prim(p @ (Prim::Add | Prim::Sub | Prim::Mul | Prim::SizeMul), xs), 1)) if xs.len() == 2 => {
            let (x, y) = (poly(&xs[0], frame, ctx, depth - 1)?, poly(&xs[1], frame, ctx, depth - 1)?);
            Some(match p {
                Prim::Add => x.add(&y),
                Prim::Sub => x.sub(&y),
                _ => x.mul(&y),
            })
        }
        Some((Expr::Atom(x), 1)) => poly(x, frame, ctx, depth - 1),
        _ if frame.inside(v) => None,
        _ => Some(Size::var(v)),
    }
}

/// `a` as `index_d + c` or as a size bound outside the nest.
fn lin(a: &Atom, frame: &Frame, ctx: &Ctx) -> Option<Lin> {
    let p = poly(a, frame, ctx, 16)?;
    let axes: Vec<(VarId, usize)> = frame.axes.iter().filter(|(i, _)| p.vars().contains(i)).copied().collect();
    match axes.as_slice() {
        [] => Some(Lin::Size(p)),
        [(i, d)] => p.sub(&Size::var(*i)).as_const().map(|c| Lin::Idx(*d, c)),
        _ => None,
    }
}

/// The condition a guard puts on each axis of a nest: `lo <= index < n - hi`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Band {
    lo: i64,
    hi: i64,
}

/// Adds to `bands` the conjunction of axis bounds that the boolean `a`
/// holds exactly: `index_d + c` compared with a constant (a lower bound)
/// or with `n_d - k` (an upper bound), `&&` as `and` or as `if a then b
/// else false`, and a read of a stored condition (reverse mode saves the
/// primal's `if` conditions) at the nest's own indices. `None` when `a` is
/// anything else.
fn guard_bands(a: &Atom, frame: &Frame, sizes: &[Size], bands: &mut [Band], ctx: &Ctx, depth: usize) -> Option<()> {
    let v = match a {
        Atom::Lit(Lit::Bool(true)) => return Some(()),
        Atom::Var(v) if depth > 0 => *v,
        _ => return None,
    };
    let def = frame.local(v).or_else(|| ctx.def(v))?;
    if def.binds.len() != 1 {
        return None;
    }
    match &def.expr {
        Expr::Prim(p @ (Prim::Lt | Prim::Le | Prim::Gt | Prim::Ge), xs) => compare_band(*p, xs, frame, sizes, bands, ctx),
        Expr::Prim(Prim::And, xs) => {
            guard_bands(&xs[0], frame, sizes, bands, ctx, depth - 1)?;
            guard_bands(&xs[1], frame, sizes, bands, ctx, depth - 1)
        }
        Expr::If { cond, then_b, else_b } if else_b.result[0] == Atom::Lit(Lit::Bool(false)) && else_b.stmts.is_empty() => {
            guard_bands(cond, frame, sizes, bands, ctx, depth - 1)?;
            let mut inner = Frame { blocks: frame.blocks.clone(), axes: frame.axes.clone() };
            inner.blocks.insert(0, then_b);
            guard_bands(&then_b.result[0], &inner, sizes, bands, ctx, depth - 1)
        }
        Expr::Index { .. } => {
            // rows of rows of a stored array, read at the nest's indices
            let mut idx = vec![];
            let mut cur = def;
            let root = loop {
                let Expr::Index { arr: Atom::Var(arr), idx: is, checks } = &cur.expr else { return None };
                if checks.iter().any(|c| c.is_some()) {
                    return None;
                }
                for i in is.iter().rev() {
                    idx.insert(0, frame.axis(super::var(i)?)?);
                }
                match frame.local(*arr).or_else(|| ctx.def(*arr)) {
                    Some(d) if matches!(d.expr, Expr::Index { .. }) => cur = d,
                    _ => break *arr,
                }
            };
            // the nest that stored it, its indices mapped to our axes
            let (nest, r) = nest_of(root, idx.len(), ctx, frame)?;
            let mut inner = Frame { blocks: vec![], axes: vec![] };
            for ((i, n, body), d) in nest.levels.iter().zip(&idx) {
                if *n != sizes[*d] {
                    return None;
                }
                inner.blocks.insert(0, *body);
                inner.axes.push((*i, *d));
            }
            guard_bands(&r, &inner, sizes, bands, ctx, depth - 1)
        }
        _ => None,
    }
}

/// The band `index_d + c <op> bound` gives (`bound` a constant or
/// `n_d - k`); `None` for other comparisons.
fn compare_band(op: Prim, xs: &[Atom], frame: &Frame, sizes: &[Size], bands: &mut [Band], ctx: &Ctx) -> Option<()> {
    let (x, y) = (lin(&xs[0], frame, ctx)?, lin(&xs[1], frame, ctx)?);
    let (d, c, bound, op) = match (x, y) {
        (Lin::Idx(d, c), Lin::Size(s)) => (d, c, s, op),
        (Lin::Size(s), Lin::Idx(d, c)) => {
            let flipped = match op {
                Prim::Lt => Prim::Gt,
                Prim::Le => Prim::Ge,
                Prim::Gt => Prim::Lt,
                _ => Prim::Le,
            };
            (d, c, s, flipped)
        }
        _ => return None,
    };
    let band = &mut bands[d];
    match op {
        // index < n - k - c (<= is one less)
        Prim::Lt | Prim::Le => {
            let k = sizes[d].sub(&bound).as_const()?;
            let hi = k.checked_add(c)?.checked_sub(i64::from(op == Prim::Le))?;
            band.hi = band.hi.max(hi);
        }
        // index >= K - c (> is one more)
        _ => {
            let lo = bound.as_const()?.checked_sub(c)?.checked_add(i64::from(op == Prim::Gt))?;
            band.lo = band.lo.max(lo);
        }
    }
    Some(())
}

/// The band where the boolean `a` is false (an `if`'s else branch): the
/// opposite comparison, or, for `index_d + c == e`, the axis without its
/// first (`e` the constant `c`) or last (`e = n_d - 1 + c`) element
/// (`if i == 0 then … else … x[i - 1]`, a chain or a scan).
fn else_bands(a: &Atom, frame: &Frame, sizes: &[Size], bands: &mut [Band], ctx: &Ctx) -> Option<()> {
    let def = frame.local(super::var(a)?).or_else(|| ctx.def(super::var(a)?))?;
    if def.binds.len() != 1 {
        return None;
    }
    match &def.expr {
        Expr::Prim(p @ (Prim::Lt | Prim::Le | Prim::Gt | Prim::Ge), xs) => {
            let not = match p {
                Prim::Lt => Prim::Ge,
                Prim::Le => Prim::Gt,
                Prim::Gt => Prim::Le,
                _ => Prim::Lt,
            };
            compare_band(not, xs, frame, sizes, bands, ctx)
        }
        Expr::Prim(Prim::Eq, xs) => {
            let (d, c, bound) = match (lin(&xs[0], frame, ctx)?, lin(&xs[1], frame, ctx)?) {
                (Lin::Idx(d, c), Lin::Size(s)) | (Lin::Size(s), Lin::Idx(d, c)) => (d, c, s),
                _ => return None,
            };
            // index == bound - c
            if bound.as_const() == Some(c) {
                bands[d].lo = bands[d].lo.max(1);
                Some(())
            } else if sizes[d].sub(&bound).as_const().and_then(|k| k.checked_add(c)) == Some(1) {
                bands[d].hi = bands[d].hi.max(1);
                Some(())
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The nest of `for`s of depth `rank` whose stacked result is `root`, and
/// the scalar its innermost body returns for it.
fn nest_of<'c>(root: VarId, rank: usize, ctx: &'c Ctx, frame: &Frame<'c>) -> Option<(Nest<'c>, Atom)> {
    let st = frame.local(root).or_else(|| ctx.def(root))?;
    let mut k = st.binds.iter().position(|b| b.var == root)?;
    let mut expr = &st.expr;
    let mut levels = vec![];
    loop {
        let (i, n, body) = match expr {
            Expr::For { ivar, size, body } => (*ivar, size, body),
            Expr::ForAcc { ivar, size, body, acc } if !acc[k] => (*ivar, size, body),
            _ => return None,
        };
        levels.push((i, n.clone(), body));
        let r = body.result[k];
        if levels.len() == rank {
            return Some((Nest { levels }, r));
        }
        let inner = local_def(body, super::var(&r)?)?;
        k = inner.binds.iter().position(|b| Atom::Var(b.var) == r)?;
        expr = &inner.expr;
    }
}

/// `a` with its `flatten`s looked through: the array and how many.
fn unflattened(a: &Atom, ctx: &Ctx) -> Option<(VarId, usize)> {
    let mut v = super::var(a)?;
    let mut count = 0;
    while let Some(Expr::Flatten(Atom::Var(x))) = ctx.def(v).map(|d| &d.expr) {
        v = *x;
        count += 1;
    }
    Some((v, count))
}

/// The shift `s_d` on each axis when `q = Σ s_d · stride_d` (the strides
/// of a row-major array of these sizes), found by evaluating at large sizes
/// and checked as polynomials.
fn shifts_of(q: &Size, sizes: &[Size], strides: &[Size]) -> Option<Vec<i64>> {
    let at = |s: &Size| s.eval(&|_| Ok(1 << 10)).ok();
    let mut val = at(q)?;
    let mut shifts = vec![0; sizes.len()];
    for d in (1..sizes.len()).rev() {
        let n = at(&sizes[d])?;
        if n <= 0 {
            return None;
        }
        let mut s = val.rem_euclid(n);
        if s > n / 2 {
            s -= n;
        }
        shifts[d] = s;
        val = (val - s) / n;
    }
    shifts[0] = val;
    let back = shifts.iter().zip(strides).fold(Size::constant(0), |acc, (s, st)| acc.add(&st.mul(&Size::constant(*s))));
    (back == *q).then_some(shifts)
}

fn scatter_stencil(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = super::single(s)?;
    let Expr::ScatterAdd { dest, idxs, vals, .. } = &s.expr else { return None };
    if y.ty.rank() != 1 || !y.ty.elem.is_float() {
        return None;
    }
    // the index and value arrays: flattened results of one nest of `for`s
    let (iroot, flat) = unflattened(idxs, ctx)?;
    let (vroot, vflat) = unflattened(vals, ctx)?;
    let rank = flat + 1;
    let empty = Frame { blocks: vec![], axes: vec![] };
    let (nest, idx_r) = nest_of(iroot, rank, ctx, &empty)?;
    let (vnest, val_r) = nest_of(vroot, rank, ctx, &empty)?;
    if vflat != flat || !std::ptr::eq(ctx.def(iroot)?, ctx.def(vroot)?) || vnest.levels.len() != rank {
        return None;
    }
    let sizes: Vec<Size> = nest.levels.iter().map(|(_, n, _)| n.clone()).collect();
    let mut strides = vec![Size::constant(1); rank];
    for d in (0..rank - 1).rev() {
        strides[d] = strides[d + 1].mul(&sizes[d + 1]);
    }
    let total = strides[0].mul(&sizes[0]);
    if y.ty.shape[0] != total {
        return None;
    }
    let mut frame = Frame { blocks: nest.levels.iter().rev().map(|(_, _, b)| *b).collect(), axes: vec![] };
    frame.axes = nest.levels.iter().enumerate().map(|(d, (i, _, _))| (*i, d)).collect();
    let inner = frame.blocks[0];
    // the pair: `if guard then (flat position, v) else (0, ±0.0)`, or an
    // unguarded position
    let mut bands = vec![Band::default(); rank];
    let mut miss = None;
    let at = match (idx_r, val_r) {
        (Atom::Var(iv), Atom::Var(vv)) if local_def(inner, iv).is_some_and(|d| matches!(d.expr, Expr::If { .. })) => {
            let def = local_def(inner, iv)?;
            let Expr::If { cond, then_b, else_b } = &def.expr else { return None };
            let (pi, pv) = (def.binds.iter().position(|b| b.var == iv)?, def.binds.iter().position(|b| b.var == vv)?);
            let z = else_b.result[pv];
            if else_b.result[pi] != Atom::Lit(Lit::I64(0)) || !(super::is_lit(&z, 0.0) || super::is_lit(&z, -0.0)) {
                return None;
            }
            guard_bands(cond, &frame, &sizes, &mut bands, ctx, 12)?;
            miss = Some(z);
            let mut inner_frame = Frame { blocks: frame.blocks.clone(), axes: frame.axes.clone() };
            inner_frame.blocks.insert(0, then_b);
            poly(&then_b.result[pi], &inner_frame, ctx, 16)?
        }
        (r, _) => poly(&r, &frame, ctx, 16)?,
    };
    // the position is the flat index of (i_d + s_d), each in range
    let q = nest.levels.iter().zip(&strides).fold(at, |p, ((i, _, _), st)| p.sub(&Size::var(*i).mul(st)));
    if q.vars().iter().any(|v| frame.axis(*v).is_some()) {
        return None;
    }
    let shifts = shifts_of(&q, &sizes, &strides)?;
    if bands.iter().zip(&shifts).any(|(b, s)| b.lo.checked_add(*s).is_none_or(|x| x < 0) || b.hi < *s) {
        return None;
    }
    // a miss adds ±0.0 to element 0; it happens when a band is narrower
    // than its axis (and the nest is not empty, as element 0 exists)
    let miss = miss.filter(|_| bands.iter().any(|b| b.lo > 0 || b.hi > 0));
    // the destination unflattened, when it is a flattened array of the nest's shape
    let dest_root = unflattened(dest, ctx).and_then(|(d, k)| (k == flat && ctx.type_of(&Atom::Var(d))?.shape == sizes).then_some(d));
    Some(emit_gather(y, (*dest, dest_root), vroot, &sizes, &strides, &bands, &shifts, miss, ctx))
}

/// `for e_1 … e_r. d[p] (+ vs[e - s] where every e_d - s_d lies in its
/// band) (+ miss at p = 0)`, p the flat position of e, flattened into `y`
/// (`vs` the unflattened values, `d` read unflattened when it can be).
#[allow(clippy::too_many_arguments)]
fn emit_gather(
    y: &crate::ir::Binder,
    (dest, dest_root): (Atom, Option<VarId>),
    vals: VarId,
    sizes: &[Size],
    strides: &[Size],
    bands: &[Band],
    shifts: &[i64],
    miss: Option<Atom>,
    ctx: &mut Ctx,
) -> Vec<Stmt> {
    let (int, boolt, elem) = (Type::scalar(Scalar::I64), Type::scalar(Scalar::Bool), Type::scalar(y.ty.elem));
    let rank = sizes.len();
    let mut out = vec![];
    let materialize = |s: &Size, out: &mut Vec<Stmt>, ctx: &mut Ctx| {
        let mut emit = |p: Prim, xs: Vec<Atom>| {
            let t = ctx.fresh("len");
            out.push(bind(t, Type::scalar(Scalar::I64), Expr::Prim(p, xs)));
            Atom::Var(t)
        };
        s.materialize(&mut emit)
    };
    let stride_atoms: Vec<Atom> = strides.iter().map(|s| materialize(s, &mut out, ctx)).collect();
    // the upper end of each axis's hits: n_d - (hi_d - s_d), when below n_d
    let upper: Vec<Option<Atom>> =
        (0..rank).map(|d| (bands[d].hi > shifts[d]).then(|| materialize(&sizes[d].sub(&Size::constant(bands[d].hi - shifts[d])), &mut out, ctx))).collect();
    let es: Vec<VarId> = (0..rank).map(|_| ctx.fresh("e")).collect();
    // per level: the flat position so far (read when `d` has no
    // unflattened form), whether the hit exists so far, and whether e is
    // element 0 so far (when a miss adds to it)
    let mut levels: Vec<Vec<Stmt>> = vec![];
    let (mut pos, mut ok, mut first): (Option<Atom>, Option<Atom>, Option<Atom>) = (None, None, None);
    for d in 0..rank {
        let mut stmts = vec![];
        let mut prim = |p: Prim, ty: &Type, xs: Vec<Atom>, stmts: &mut Vec<Stmt>, hint: &str| {
            let t = ctx.fresh(hint);
            stmts.push(bind(t, ty.clone(), Expr::Prim(p, xs)));
            Atom::Var(t)
        };
        let e = Atom::Var(es[d]);
        if dest_root.is_none() {
            let part = if d + 1 == rank { e } else { prim(Prim::Mul, &int, vec![e, stride_atoms[d]], &mut stmts, "pos") };
            pos = Some(match pos {
                None => part,
                Some(p) => prim(Prim::Add, &int, vec![p, part], &mut stmts, "pos"),
            });
        }
        let lo = bands[d].lo + shifts[d];
        let mut conds = vec![];
        if lo > 0 {
            conds.push(prim(Prim::Ge, &boolt, vec![e, Atom::Lit(Lit::I64(lo))], &mut stmts, "hit"));
        }
        if let Some(u) = upper[d] {
            conds.push(prim(Prim::Lt, &boolt, vec![e, u], &mut stmts, "hit"));
        }
        for c in conds {
            ok = Some(match ok {
                None => c,
                Some(o) => prim(Prim::And, &boolt, vec![o, c], &mut stmts, "hit"),
            });
        }
        if miss.is_some() {
            let at0 = prim(Prim::Eq, &boolt, vec![e, Atom::Lit(Lit::I64(0))], &mut stmts, "first");
            first = Some(match first {
                None => at0,
                Some(f) => prim(Prim::And, &boolt, vec![f, at0], &mut stmts, "first"),
            });
        }
        levels.push(stmts);
    }
    // the innermost body: the destination's element plus the hit
    let inner = levels.last_mut().expect("rank >= 1");
    let mut fresh = |hint: &str| ctx.fresh(hint);
    // the destination's element, by the indices of its unflattened form
    // when it has one
    let d0 = fresh("at");
    let (darr, didx) = match (dest_root, pos) {
        (Some(d), _) => (Atom::Var(d), es.iter().map(|e| Atom::Var(*e)).collect::<Vec<_>>()),
        (None, p) => (dest, vec![p.expect("rank >= 1")]),
    };
    inner.push(bind(d0, elem.clone(), Expr::Index { arr: darr, checks: vec![None; didx.len()], idx: didx }));
    // the hit: the value at the source e_d - s_d, branch-free (where
    // there is no hit, read element 0 and keep d[p]: selects vectorise,
    // and C ran the gathers of the diffusion gradient twice as fast so)
    let mut src = vec![];
    for d in 0..rank {
        let mut a = Atom::Var(es[d]);
        if shifts[d] != 0 {
            let t = fresh("src");
            inner.push(bind(t, int.clone(), Expr::Prim(Prim::Sub, vec![a, Atom::Lit(Lit::I64(shifts[d]))])));
            a = Atom::Var(t);
            if let Some(c) = ok {
                let t = fresh("src");
                inner.push(bind(t, int.clone(), Expr::Prim(Prim::Select, vec![c, a, Atom::Lit(Lit::I64(0))])));
                a = Atom::Var(t);
            }
        }
        src.push(a);
    }
    let (x, sum) = (fresh("at"), fresh("at"));
    inner.push(bind(x, elem.clone(), Expr::Index { arr: Atom::Var(vals), checks: vec![None; rank], idx: src }));
    inner.push(bind(sum, elem.clone(), Expr::Prim(Prim::Add, vec![Atom::Var(d0), Atom::Var(x)])));
    let mut cur = match ok {
        Some(c) => {
            let t = fresh("at");
            inner.push(bind(t, elem.clone(), Expr::Prim(Prim::Select, vec![c, Atom::Var(sum), Atom::Var(d0)])));
            Atom::Var(t)
        }
        None => Atom::Var(sum),
    };
    // the misses' ±0.0 on element 0, after its hit (the same bits as
    // interleaved: adding ±0.0 changes only the sign of a zero)
    // (branch-free too: an `if` there made C twice as slow again)
    if let Some(z) = miss {
        let (t, r) = (fresh("at"), fresh("at"));
        inner.push(bind(t, elem.clone(), Expr::Prim(Prim::Add, vec![cur, z])));
        inner.push(bind(r, elem.clone(), Expr::Prim(Prim::Select, vec![first.expect("a miss sets `first`"), Atom::Var(t), cur])));
        cur = Atom::Var(r);
    }
    // the nest, innermost out
    let mut result = cur;
    let mut ty = elem;
    let mut built = None;
    for d in (0..rank).rev() {
        let mut stmts = std::mem::take(&mut levels[d]);
        if let Some(st) = built.take() {
            stmts.push(st);
        }
        ty = Type::array(ty.elem, std::iter::once(sizes[d].clone()).chain(ty.shape.iter().cloned()).collect());
        let v = if d == 0 && rank == 1 { y.var } else { ctx.fresh("gather") };
        built = Some(bind(v, ty.clone(), Expr::For { ivar: es[d], size: sizes[d].clone(), body: Block { stmts, result: vec![result] } }));
        result = Atom::Var(v);
    }
    out.push(built.expect("rank >= 1"));
    // flattened to the scatter's shape
    for k in 1..rank {
        let merged = ty.shape[0].mul(&ty.shape[1]);
        ty = Type::array(ty.elem, std::iter::once(merged).chain(ty.shape[2..].iter().cloned()).collect());
        let v = if k + 1 == rank { y.var } else { ctx.fresh("flat") };
        out.push(bind(v, ty.clone(), Expr::Flatten(result)));
        result = Atom::Var(v);
    }
    out
}

/// `if c then { … a[i + k!] … } else …` where `c` bounds the loop index
/// `i` (as `scatter_stencil`'s guards do) so that `i + k` lies in the
/// axis, the axis as long as `i`'s loop → the read unchecked; the same in
/// the else branch where `not c` bounds `i` (`if i == 0 then x[0] else
/// x[i] * y[i - 1]`). (`lower`
/// proves indices without looking at conditions: `if i > 0 then x[i - 1]`
/// keeps its check, and a dead checked read stays because it could fail.)
fn guarded_index(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::If { cond, then_b, else_b } = &s.expr else { return None };
    let loops: Vec<(VarId, Size)> = ctx.loops_around(8).into_iter().map(|(i, n)| (i, n.clone())).collect();
    let checked = |b: &Block| b.stmts.iter().any(|st| matches!(&st.expr, Expr::Index { checks, .. } if checks.iter().any(|c| c.is_some())));
    if loops.is_empty() || !checked(then_b) && !checked(else_b) {
        return None;
    }
    let sizes: Vec<Size> = loops.iter().map(|(_, n)| n.clone()).collect();
    let frame = Frame { blocks: vec![], axes: loops.iter().enumerate().map(|(d, (i, _))| (*i, d)).collect() };
    let mut then_bands = vec![Band::default(); loops.len()];
    let mut not_bands = vec![Band::default(); loops.len()];
    let then_known = guard_bands(cond, &frame, &sizes, &mut then_bands, ctx, 12).is_some();
    let else_known = else_bands(cond, &frame, &sizes, &mut not_bands, ctx).is_some();
    let then_new = if then_known { unchecked_in_band(then_b, &frame, &sizes, &then_bands, ctx) } else { None };
    let else_new = if else_known { unchecked_in_band(else_b, &frame, &sizes, &not_bands, ctx) } else { None };
    if then_new.is_none() && else_new.is_none() {
        return None;
    }
    let then_b = then_new.unwrap_or_else(|| then_b.clone());
    let else_b = else_new.unwrap_or_else(|| else_b.clone());
    Some(vec![Stmt { binds: s.binds.clone(), expr: Expr::If { cond: *cond, then_b, else_b }, loc: s.loc.clone() }])
}

/// `b` with the checks dropped from its reads `a[… i_d + off …]` that the
/// bands keep inside an axis as long as loop `d`; `None` when none is.
fn unchecked_in_band(b: &Block, frame: &Frame, sizes: &[Size], bands: &[Band], ctx: &Ctx) -> Option<Block> {
    let inner = Frame { blocks: vec![b], axes: frame.axes.clone() };
    let mut changed = false;
    let mut stmts = b.stmts.clone();
    for st in &mut stmts {
        let Expr::Index { arr, idx, checks } = &mut st.expr else { continue };
        let Some(ty) = ctx.type_of(arr) else { continue };
        for (k, (i, c)) in idx.iter().zip(checks.iter_mut()).enumerate() {
            let Some(Lin::Idx(d, off)) = c.as_ref().and_then(|_| lin(i, &inner, ctx)) else { continue };
            let band = bands[d];
            if ty.shape.get(k) == Some(&sizes[d]) && band.lo.checked_add(off).is_some_and(|x| x >= 0) && off <= band.hi {
                *c = None;
                changed = true;
            }
        }
    }
    changed.then(|| Block { stmts, result: b.result.clone() })
}

/// `if cells > 0 then A else B` where `cells` is the number of elements of
/// the first axes of the results (reverse mode's guard around a scatter
/// into the flattened cotangent) and `A` cannot fail → `A`: with no
/// elements both branches give the same empty arrays.
fn nonempty_if(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::If { cond, then_b, .. } = &s.expr else { return None };
    let Expr::Prim(Prim::Gt, xs) = ctx.def_expr(cond)? else { return None };
    if xs[1] != Atom::Lit(Lit::I64(0)) || !then_b.stmts.iter().all(|st| cannot_fail_in(st, then_b, ctx)) {
        return None;
    }
    let empty = Frame { blocks: vec![], axes: vec![] };
    let cells = poly(&xs[0], &empty, ctx, 16)?;
    let prefix_of = |ty: &Type| (1..=ty.rank()).any(|l| ty.shape[..l].iter().fold(Size::constant(1), |a, d| a.mul(d)) == cells);
    if !s.binds.iter().all(|b| prefix_of(&b.ty)) {
        return None;
    }
    let mut out = then_b.stmts.clone();
    out.extend(super::copies(&s.binds, &then_b.result));
    Some(out)
}

/// Whether statement `st` of `block` cannot fail: `Ctx::can_fail`, except
/// that an `unflatten n m` of an operand of size `n * m` (bound in `block`
/// too), `n` and `m` size parameters or literals, is exact.
fn cannot_fail_in(st: &Stmt, block: &Block, ctx: &Ctx) -> bool {
    let Expr::Unflatten { arr: Atom::Var(a), n, m } = &st.expr else { return !ctx.can_fail(st) };
    let nonneg = |x: &Atom| match x {
        Atom::Lit(Lit::I64(c)) => *c >= 0,
        Atom::Var(v) => ctx.st.nonneg.contains(v),
        _ => false,
    };
    let operand = local_def(block, *a).and_then(|d| d.binds.iter().find(|b| b.var == *a)).map(|b| b.ty.clone()).or_else(|| ctx.type_of(&Atom::Var(*a)));
    let (Some(b), Some(t), Some(ns), Some(ms)) = (super::single(st), operand, Size::of_atom(n), Size::of_atom(m)) else { return false };
    nonneg(n) && nonneg(m) && b.ty.shape.len() >= 2 && b.ty.shape[0] == ns && b.ty.shape[1] == ms && t.shape.first() == Some(&ns.mul(&ms))
}

/// `unflatten n m (flatten x)` where `x` already has the result's type
/// and `n`, `m` are its first two axes → `x` (cannot fail: the operand
/// has exactly `n * m` rows).
fn unflatten_flatten(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = super::single(s)?;
    let Expr::Unflatten { arr, n, m } = &s.expr else { return None };
    let Some(Expr::Flatten(x)) = ctx.def_expr(arr) else { return None };
    let x = *x;
    if ctx.type_of(&x)? != y.ty || Size::of_atom(n)? != y.ty.shape[0] || Size::of_atom(m)? != y.ty.shape[1] {
        return None;
    }
    Some(vec![bind(y.var, y.ty.clone(), Expr::Atom(x))])
}

/// `if c then x else 0.0` (or `if c then 0.0 else x`, either zero) with no
/// statements in either branch (reverse mode's guarded cotangent) →
/// `select c x 0.0`, which fusion may recompute and C vectorises. (Other
/// `if`s stay: rules read their branches, `push_into_if` moves work in.)
fn if_select(s: &Stmt, _ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::If { cond, then_b, else_b } = &s.expr else { return None };
    let [b] = s.binds.as_slice() else { return None };
    let zero = |a: &Atom| super::is_lit(a, 0.0) || super::is_lit(a, -0.0);
    if !then_b.stmts.is_empty()
        || !else_b.stmts.is_empty()
        || b.ty.rank() != 0
        || !b.ty.elem.is_float()
        || !(zero(&then_b.result[0]) || zero(&else_b.result[0]))
    {
        return None;
    }
    Some(
        s.binds.iter().enumerate().map(|(k, b)| bind(b.var, b.ty.clone(), Expr::Prim(Prim::Select, vec![*cond, then_b.result[k], else_b.result[k]]))).collect(),
    )
}

/// `(unflatten n m (replicate k v))[i, j]` → `v` (unchecked reads).
fn index_unflatten_replicate(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = super::single(s)?;
    let Expr::Index { arr, idx, checks } = &s.expr else { return None };
    let Some(Expr::Unflatten { arr: flat, .. }) = ctx.def_expr(arr) else { return None };
    let Some(Expr::Replicate { val, .. }) = ctx.def_expr(flat) else { return None };
    if idx.len() != 2 || checks.iter().any(|c| c.is_some()) || y.ty.rank() != 0 {
        return None;
    }
    Some(vec![bind(y.var, y.ty.clone(), Expr::Atom(*val))])
}

fn scatter_one(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let y = super::single(s)?;
    let Expr::ScatterAdd { dest, idxs, vals, .. } = &s.expr else { return None };
    if y.ty.rank() != 1 {
        return None;
    }
    let (Some(Expr::ArrayLit(is)), Some(Expr::ArrayLit(xs))) = (ctx.def_expr(idxs), ctx.def_expr(vals)) else { return None };
    let ([e], [x]) = (is.as_slice(), xs.as_slice()) else { return None };
    let (e, x) = (*e, *x);
    if !ctx.provably_below(&e, &y.ty.shape[0]) {
        return None;
    }
    let elem = Type::scalar(y.ty.elem);
    let (old, new) = (ctx.fresh("at"), ctx.fresh("at"));
    Some(vec![
        bind(old, elem.clone(), Expr::Index { arr: *dest, idx: vec![e], checks: vec![None] }),
        bind(new, elem, Expr::Prim(Prim::Add, vec![Atom::Var(old), x])),
        bind(y.var, y.ty.clone(), Expr::Update { arr: *dest, idx: e, val: Atom::Var(new), loc: guarded_loc() }),
    ])
}
