//! Scalar rules (paper 001 Fig. 8b, 8d): constant folding, the identities
//! that are exact in IEEE arithmetic, branches on constants, and the one
//! rule that is exact only for structural zeros.

use super::{bind, copies, is_lit, lit_f, select_zero, single};
use crate::ir::{Atom, Block, Expr, Lit, Prim, Size, Stmt, VarId, walk};
use crate::opt::engine::cse_key;
use crate::opt::rule::{Ctx, Rule};

pub const RULES: &[Rule] = &[
    Rule::on_stmt(
        "fold_constant",
        "a primitive on literals becomes its value, computed as a run computes it (never an integer division by zero)",
        fold_constant,
    ),
    Rule::on_stmt(
        "simplify_arith",
        "exact identities: x*1, 1*x, x/1, x-0.0, x+(-0.0), -(-x) → x, and 0.0+x, x+0.0 → x where x is never -0.0 (a square a*a, abs, exp, a literal other than -0.0, a sum with such a term, or a select of two such); on integers also x+0, x*0 → 0, x-x → 0, and for the index i of a loop over n, min i n → i and max i 0 → i, and max n 0 → n for a size n; on booleans the and/or/not laws; select c x x → x",
        simplify_arith,
    ),
    Rule::on_stmt("if_constant", "`if true/false` becomes the statements of the branch taken", if_constant),
    Rule::on_stmt("select_arith", "(select c a 0) ± (select c b 0) → select c (a ± b) 0: exact, both sides are 0 ± 0 = 0 when c is false", select_arith),
    Rule::on_stmt(
        "mul_onehot",
        "x * (select c a 0) → select c (x * a) 0 when the 0 is structural (a one-hot seed of jacfwd/jacrev, or what fusion copied from one) made in the same loop body as the product; NOT exact when x is NaN or ±∞ (the literal program gives NaN) or negative (it gives -0.0): this gives the true derivative component +0.0",
        mul_onehot,
    ),
    Rule::on_stmt(
        "if_known_cond",
        "inside a branch of `if c`, a nested `if c` becomes the branch that one takes and `select c a b` becomes a (then) or b (else): c is known there",
        if_known_cond,
    ),
    Rule::on_block_stmts(
        "push_into_if",
        "`let r = if c then A else B; …; let y = p(r, z)` → `let (r, y) = if c then (A; p(rA, z)) else (B; p(rB, z))` when p is one primitive that cannot fail and it then simplifies in a branch (constants, an exact identity, a select on c)",
        push_into_if,
    ),
    Rule::on_stmt(
        "hoist_if_common",
        "`if c then (…; let x = e; …) else (…; let y = e; …)` → `let h = e; if c then (…; let x = h; …) else (…; let y = h; …)` when e is one statement in both branches that reads nothing they bind, cannot fail and follows nothing there that can",
        hoist_if_common,
    ),
];

fn lits(xs: &[Atom]) -> Option<Vec<Lit>> {
    xs.iter()
        .map(|a| match a {
            Atom::Lit(l) => Some(*l),
            Atom::Var(_) => None,
        })
        .collect()
}

fn fold_constant(s: &Stmt, _ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let b = single(s)?;
    let Expr::Prim(p, xs) = &s.expr else { return None };
    if *p == Prim::Select
        && let Atom::Lit(Lit::Bool(c)) = xs[0]
    {
        return Some(vec![bind(b.var, b.ty.clone(), Expr::Atom(if c { xs[1] } else { xs[2] }))]);
    }
    let v = p.eval(&lits(xs)?).ok()?;
    Some(vec![bind(b.var, b.ty.clone(), Expr::Atom(Atom::Lit(v)))])
}

/// The operand an exact identity reduces `p xs` to.
fn identity(p: Prim, xs: &[Atom], float: bool) -> Option<Atom> {
    let (a, b) = (xs.first()?, xs.get(1));
    let lit_b = |x: f64| b.is_some_and(|b| is_lit(b, x));
    Some(match p {
        Prim::Mul if lit_b(1.0) => *a,
        Prim::Mul if is_lit(a, 1.0) => *b?,
        Prim::Div if lit_b(1.0) => *a,
        Prim::Sub if lit_b(0.0) => *a,
        Prim::Add if float && lit_b(-0.0) => *a,
        Prim::Add if float && is_lit(a, -0.0) => *b?,
        Prim::Add if !float && lit_b(0.0) => *a,
        Prim::Add if !float && is_lit(a, 0.0) => *b?,
        Prim::Mul if !float && (lit_b(0.0) || is_lit(a, 0.0)) => lit_f(int_scalar(a, b)?, 0.0),
        Prim::Sub if !float && Some(a) == b && matches!(a, Atom::Var(_)) => lit_f(int_scalar(a, b)?, 0.0),
        Prim::And if matches!(b, Some(Atom::Lit(Lit::Bool(true)))) => *a,
        Prim::And if matches!(a, Atom::Lit(Lit::Bool(true))) => *b?,
        Prim::Or if matches!(b, Some(Atom::Lit(Lit::Bool(false)))) => *a,
        Prim::Or if matches!(a, Atom::Lit(Lit::Bool(false))) => *b?,
        Prim::And if matches!(b, Some(Atom::Lit(Lit::Bool(false)))) || matches!(a, Atom::Lit(Lit::Bool(false))) => Atom::Lit(Lit::Bool(false)),
        Prim::Or if matches!(b, Some(Atom::Lit(Lit::Bool(true)))) || matches!(a, Atom::Lit(Lit::Bool(true))) => Atom::Lit(Lit::Bool(true)),
        Prim::Select if xs.len() == 3 && xs[1] == xs[2] => xs[1],
        _ => return None,
    })
}

/// The integer scalar type of a binary operation whose operands may be literals.
fn int_scalar(a: &Atom, b: Option<&Atom>) -> Option<crate::ir::Scalar> {
    [Some(a), b].into_iter().flatten().find_map(|x| match x {
        Atom::Lit(l) => Some(l.scalar()),
        Atom::Var(_) => None,
    })
}

/// `min i n` → i and `max i 0` → i for the index i of a loop over n
/// (`sum_cond_range`'s clamps of a loop index); `max n 0` → n for an
/// integer n known not to be negative (a size: reverse mode's trip count
/// `max n 0` of a loop over n).
fn index_bound(p: Prim, xs: &[Atom], ctx: &Ctx) -> Option<Atom> {
    let (a, b) = (xs.first()?, xs.get(1)?);
    let pairs = [(a, b), (b, a)];
    match p {
        Prim::Min => pairs.into_iter().find(|(i, n)| Size::of_atom(n).is_some_and(|n| ctx.provably_below(i, &n))).map(|(i, _)| *i),
        Prim::Max => pairs
            .into_iter()
            .find(|(i, z)| {
                let int = ctx.type_of(i).is_some_and(|t| t.elem == crate::ir::Scalar::I64);
                is_lit(z, 0.0) && matches!(i, Atom::Var(v) if ctx.index_range(*v).is_some() || (int && ctx.size_nonneg(&Size::var(*v))))
            })
            .map(|(i, _)| *i),
        _ => None,
    }
}

fn simplify_arith(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let b = single(s)?;
    let Expr::Prim(p, xs) = &s.expr else { return None };
    let float = b.ty.elem.is_float() || (*p == Prim::Select && xs.get(1).and_then(|x| ctx.type_of(x)).is_some_and(|t| t.elem.is_float()));
    let to = match identity(*p, xs, float).or_else(|| index_bound(*p, xs, ctx)) {
        Some(a) => a,
        None if float && *p == Prim::Add && super::is_lit(&xs[0], 0.0) && never_negative_zero(&xs[1], ctx) => xs[1],
        None if float && *p == Prim::Add && super::is_lit(&xs[1], 0.0) && never_negative_zero(&xs[0], ctx) => xs[0],
        None => {
            // -(-x) and not(not x)
            let inner = ctx.def_expr(xs.first()?)?;
            match (p, inner) {
                (Prim::Neg, Expr::Prim(Prim::Neg, ys)) | (Prim::Not, Expr::Prim(Prim::Not, ys)) => ys[0],
                _ => return None,
            }
        }
    };
    // an integer literal stands for the binder's type only if the types agree
    if ctx.type_of(&to).as_ref() != Some(&b.ty) {
        return None;
    }
    Some(vec![bind(b.var, b.ty.clone(), Expr::Atom(to))])
}

/// Whether `a` can never be `-0.0`, so that `+0.0 + a` is `a` bit for bit
/// (`x + y` is `-0.0` only when both are; NaN and ±∞ come through as
/// they are): a literal other than `-0.0`, a square `x*x`, `abs`, `exp`, or
/// a sum with such a term (the lane tree of an unrolled sum of squares),
/// or a `select` of two such, looked for at most 8 definitions deep.
fn never_negative_zero(a: &Atom, ctx: &Ctx) -> bool {
    never_negative_zero_within(a, ctx, 8)
}

fn never_negative_zero_within(a: &Atom, ctx: &Ctx, depth: usize) -> bool {
    match a {
        Atom::Lit(Lit::F64(v)) => !(*v == 0.0 && v.is_sign_negative()),
        Atom::Lit(Lit::F32(v)) => !(*v == 0.0 && v.is_sign_negative()),
        Atom::Lit(_) => false,
        Atom::Var(_) => match ctx.def_expr(a) {
            Some(Expr::Prim(Prim::Mul, xs)) => xs[0] == xs[1],
            Some(Expr::Prim(Prim::Abs | Prim::Exp, _)) => true,
            Some(Expr::Prim(Prim::Add, xs)) => depth > 0 && xs.iter().any(|x| never_negative_zero_within(x, ctx, depth - 1)),
            // either branch (reverse mode's stencil gathers: `select hit
            // (0.0 + t) 0.0`, then `+ 0.0` at the first element)
            Some(Expr::Prim(Prim::Select, xs)) => depth > 0 && xs[1..].iter().all(|x| never_negative_zero_within(x, ctx, depth - 1)),
            _ => false,
        },
    }
}

fn if_constant(s: &Stmt, _ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::If { cond: Atom::Lit(Lit::Bool(c)), then_b, else_b } = &s.expr else { return None };
    let taken = if *c { then_b } else { else_b };
    let mut out = taken.stmts.clone();
    out.extend(copies(&s.binds, &taken.result));
    Some(out)
}

fn select_arith(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let b = single(s)?;
    let Expr::Prim(p @ (Prim::Add | Prim::Sub), xs) = &s.expr else { return None };
    let (c1, a1) = select_zero(ctx.def_expr(&xs[0])?)?;
    let (c2, a2) = select_zero(ctx.def_expr(&xs[1])?)?;
    if c1 != c2 || !b.ty.elem.is_float() {
        return None;
    }
    let m = ctx.fresh("t");
    let marked = [xs[0], xs[1]].iter().all(|x| super::var(x).is_some_and(|v| ctx.is_onehot(v)));
    if marked {
        ctx.mark_onehot(b.var);
    }
    Some(vec![
        bind(m, b.ty.clone(), Expr::Prim(*p, vec![a1, a2])),
        bind(b.var, b.ty.clone(), Expr::Prim(Prim::Select, vec![c1, Atom::Var(m), lit_f(b.ty.elem, 0.0)])),
    ])
}

fn mul_onehot(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let b = single(s)?;
    let Expr::Prim(p @ (Prim::Mul | Prim::Div), xs) = &s.expr else { return None };
    // the structural select is either operand of `*`, the numerator of `/`
    let slots: &[usize] = if *p == Prim::Mul { &[0, 1] } else { &[0] };
    for &k in slots {
        let Atom::Var(t) = xs[k] else { continue };
        // a select made outside the loop the product is in stays there:
        // pushing the product into it would add a select per iteration
        if !ctx.is_onehot(t) || ctx.loop_depth_to(t) != Some(0) {
            continue;
        }
        let Some((c, a)) = ctx.def_expr(&xs[k]).and_then(select_zero) else { continue };
        let other = xs[1 - k];
        let m = ctx.fresh("t");
        let args = if k == 0 { vec![a, other] } else { vec![other, a] };
        ctx.mark_onehot(b.var);
        return Some(vec![
            bind(m, b.ty.clone(), Expr::Prim(*p, args)),
            bind(b.var, b.ty.clone(), Expr::Prim(Prim::Select, vec![c, Atom::Var(m), lit_f(b.ty.elem, 0.0)])),
        ]);
    }
    None
}

/// Replace, in `b` and every block nested in it, `if c` by the branch that
/// `val` takes and `select c x y` by `x` or `y`. Whether anything changed.
fn known_cond(b: &mut Block, c: VarId, val: bool) -> bool {
    let mut changed = false;
    let mut out = Vec::with_capacity(b.stmts.len());
    for mut s in std::mem::take(&mut b.stmts) {
        match &mut s.expr {
            Expr::If { cond: Atom::Var(v), then_b, else_b } if *v == c => {
                let mut taken = std::mem::take(if val { then_b } else { else_b });
                known_cond(&mut taken, c, val);
                out.extend(taken.stmts);
                out.extend(copies(&s.binds, &taken.result));
                changed = true;
                continue;
            }
            Expr::Prim(Prim::Select, xs) if xs.len() == 3 && xs[0] == Atom::Var(c) => {
                s.expr = Expr::Atom(if val { xs[1] } else { xs[2] });
                changed = true;
            }
            e => {
                for (child, _) in crate::opt::engine::children_mut(e) {
                    changed |= known_cond(child, c, val);
                }
            }
        }
        out.push(s);
    }
    b.stmts = out;
    changed
}

fn if_known_cond(s: &Stmt, _ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::If { cond: Atom::Var(c), .. } = &s.expr else { return None };
    let c = *c;
    let mut new = s.clone();
    let Expr::If { then_b, else_b, .. } = &mut new.expr else { return None };
    let changed = known_cond(then_b, c, true) | known_cond(else_b, c, false);
    changed.then(|| vec![new])
}

/// Whether `p xs` becomes simpler: all constants (`fold_constant`), an
/// exact identity (`simplify_arith`), or a select on `cond`, which is known
/// in a branch of `if cond` (`if_known_cond`).
fn simplifies(p: Prim, xs: &[Atom], float: bool, cond: &Atom) -> bool {
    if let Some(ls) = lits(xs) {
        return p == Prim::Select || p.eval(&ls).is_ok();
    }
    identity(p, xs, float).is_some() || p == Prim::Select && xs[0] == *cond
}

fn push_into_if(b: &Block, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    for (k, sk) in b.stmts.iter().enumerate() {
        let Expr::Prim(p, xs) = &sk.expr else { continue };
        let Some(y) = single(sk) else { continue };
        // the last statement of the block binding an operand: the others are
        // bound before it (or outside the block)
        let Some(j) = xs.iter().filter_map(super::var).filter_map(|v| ctx.scope.index.get(&v).copied()).max() else { continue };
        let sj = &b.stmts[j];
        let Expr::If { cond, then_b, else_b } = &sj.expr else { continue };
        // the code-size bound: what moves is one primitive (one IR node; its
        // copy in the other branch adds one node, and only one of them runs)
        if ctx.can_fail(sk) {
            continue;
        }
        let float = y.ty.elem.is_float() || (*p == Prim::Select && xs.get(1).and_then(|x| ctx.type_of(x)).is_some_and(|t| t.elem.is_float()));
        let in_branch = |br: &Block| -> Vec<Atom> {
            xs.iter()
                .map(|x| match x {
                    Atom::Var(v) => sj.binds.iter().position(|bd| bd.var == *v).map_or(*x, |i| br.result[i]),
                    Atom::Lit(_) => *x,
                })
                .collect()
        };
        let (xt, xe) = (in_branch(then_b), in_branch(else_b));
        if !simplifies(*p, &xt, float, cond) && !simplifies(*p, &xe, float, cond) {
            continue;
        }
        let mut new = sj.clone();
        new.binds.push(y.clone());
        let Expr::If { then_b, else_b, .. } = &mut new.expr else { continue };
        for (br, args) in [(then_b, xt), (else_b, xe)] {
            let t = ctx.fresh_like(y.var);
            br.stmts.push(bind(t, y.ty.clone(), Expr::Prim(*p, args)));
            br.result.push(Atom::Var(t));
        }
        let mut out = b.stmts.clone();
        out[j] = new;
        out.remove(k);
        return Some(out);
    }
    None
}

/// A statement both branches of an `if` compute (a read `x[i]` on either
/// side of `if i == 0 then x[i] else x[i] * y[i - 1]`) runs once before
/// it: it ran on either path anyway. It cannot fail, reads nothing the
/// branches bind, and follows nothing in them that can fail. (gcc vectorised no loop with the same read in both
/// arms of a branch: RK4's steps.)
fn hoist_if_common(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::If { cond, then_b, else_b } = &s.expr else { return None };
    let outside = |st: &Stmt, inside: &rustc_hash::FxHashSet<VarId>| walk::free_vars_stmt(st).iter().all(|v| !inside.contains(v));
    let (in_then, in_else) = (walk::bound_vars_block(then_b), walk::bound_vars_block(else_b));
    // no statement before it in its branch can fail: a read left unchecked
    // because a check before it passed must stay after that check
    let unguarded = |b: &Block, k: usize, ctx: &Ctx| b.stmts[..k].iter().all(|t| !ctx.can_fail(t));
    for (i, st) in then_b.stmts.iter().enumerate() {
        let (Some(key), Some(x)) = (cse_key(st), single(st)) else { continue };
        if !outside(st, &in_then) || ctx.can_fail(st) || !unguarded(then_b, i, ctx) {
            continue;
        }
        let Some(j) = else_b.stmts.iter().position(|e| cse_key(e).as_ref() == Some(&key) && outside(e, &in_else)) else { continue };
        if !unguarded(else_b, j, ctx) {
            continue;
        }
        let h = ctx.fresh_like(x.var);
        let (mut then_b, mut else_b) = (then_b.clone(), else_b.clone());
        then_b.stmts[i] = bind(x.var, x.ty.clone(), Expr::Atom(Atom::Var(h)));
        let y = else_b.stmts[j].binds[0].clone();
        else_b.stmts[j] = bind(y.var, y.ty, Expr::Atom(Atom::Var(h)));
        let hoisted = bind(h, x.ty.clone(), st.expr.clone());
        return Some(vec![hoisted, Stmt { binds: s.binds.clone(), expr: Expr::If { cond: *cond, then_b, else_b }, loc: s.loc.clone() }]);
    }
    None
}
