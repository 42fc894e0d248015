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
