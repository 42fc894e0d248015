//! Let rules (paper 001 Fig. 8a): copy propagation, dead code, unused
//! results of loops and branches, common subexpressions.

use super::{copies, single};
use crate::ir::{Atom, Block, Expr, LoopKind, Stmt, VarId, walk};
use crate::opt::engine::cse_key;
use crate::opt::rule::{Ctx, Rule};
use rustc_hash::{FxHashMap, FxHashSet};

pub const RULES: &[Rule] = &[
    Rule {
        name: "inline_atom",
        doc: "`let x = a` (a variable or literal of the same type): reads of `x` become reads of `a`",
        stmt: Some(inline_atom),
        block: Some(inline_atom_result),
        stmts: None,
    },
    Rule::on_stmt("dce", "a statement whose results nobody reads and that cannot fail is removed", dce),
    Rule::on_stmt(
        "dead_results",
        "results of a `for`, `if` or `loop` nobody reads are dropped (a loop parameter only if nothing else depends on it)",
        dead_results,
    ),
    Rule::on_stmt(
        "same_results",
        "a `for` or `if` that returns one value twice (the same atom, stacked or summed alike; in both branches) → that result once, the second binder a copy of the first",
        same_results,
    ),
    Rule::on_stmt(
        "cse",
        "a statement computing what an earlier statement in scope computed becomes a copy of its results; scalars and array reads only (a new array may be a buffer written in place)",
        cse,
    ),
];

/// The copies (`let x = a`) in scope among the variables `s` reads, as a
/// substitution.
fn copy_subst(vars: impl IntoIterator<Item = VarId>, ctx: &Ctx) -> FxHashMap<VarId, Atom> {
    let mut map = FxHashMap::default();
    for v in vars {
        let Some(def) = ctx.def(v) else { continue };
        let (Expr::Atom(a), Some(b)) = (&def.expr, single(def)) else { continue };
        if ctx.type_of(a).as_ref() == Some(&b.ty) {
            map.insert(v, *a);
        }
    }
    map
}

fn inline_atom(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let map = copy_subst(walk::free_vars_stmt(s), ctx);
    if map.is_empty() {
        return None;
    }
    let mut c = walk::Copier { map, fresh: None };
    Some(vec![c.stmt(s)])
}

fn inline_atom_result(b: &Block, ctx: &mut Ctx) -> Option<Vec<Atom>> {
    let map = copy_subst(b.result.iter().filter_map(super::var), ctx);
    if map.is_empty() {
        return None;
    }
    Some(b.result.iter().map(|a| super::var(a).and_then(|v| map.get(&v).copied()).unwrap_or(*a)).collect())
}

fn dce(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    // a `while` loop might not stop: removing it would turn a hang into an answer
    let may_hang = matches!(&s.expr, Expr::Loop { kind: LoopKind::While { .. }, .. });
    if s.binds.iter().all(|b| ctx.uses(b.var) == 0) && !ctx.can_fail(s) && !may_hang { Some(vec![]) } else { None }
}

fn dead_results(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let keep: Vec<bool> = s.binds.iter().map(|b| ctx.uses(b.var) > 0).collect();
    if keep.iter().all(|k| *k) {
        return None;
    }
    let filter = |xs: &[Atom]| xs.iter().zip(&keep).filter(|(_, k)| **k).map(|(a, _)| *a).collect::<Vec<_>>();
    let mut out = s.clone();
    match &mut out.expr {
        Expr::For { body, .. } if keep.iter().any(|k| *k) => body.result = filter(&body.result),
        Expr::ForAcc { body, acc, .. } if keep.iter().any(|k| *k) => {
            body.result = filter(&body.result);
            *acc = acc.iter().zip(&keep).filter(|(_, k)| **k).map(|(a, _)| *a).collect();
        }
        Expr::If { then_b, else_b, .. } if keep.iter().any(|k| *k) => {
            then_b.result = filter(&then_b.result);
            else_b.result = filter(&else_b.result);
        }
        Expr::Loop { .. } => return drop_loop_param(s, &keep, ctx),
        _ => return None,
    }
    out.binds = s.binds.iter().zip(&keep).filter(|(_, k)| **k).map(|(b, _)| b.clone()).collect();
    // an accumulating `for` left with only stacked results is a `for`
    if let Expr::ForAcc { ivar, size, body, acc } = &mut out.expr
        && !acc.iter().any(|a| *a)
    {
        out.expr = Expr::For { ivar: *ivar, size: size.clone(), body: std::mem::take(body) };
    }
    Some(vec![out])
}

fn same_results(s: &Stmt, _ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    // what makes two results the same, per position
    let keys: Vec<(Atom, Atom, bool)> = match &s.expr {
        Expr::For { body, .. } => body.result.iter().map(|a| (*a, *a, false)).collect(),
        Expr::ForAcc { body, acc, .. } => body.result.iter().zip(acc).map(|(a, s)| (*a, *a, *s)).collect(),
        Expr::If { then_b, else_b, .. } => then_b.result.iter().zip(&else_b.result).map(|(a, b)| (*a, *b, false)).collect(),
        _ => return None,
    };
    if keys.len() != s.binds.len() {
        return None;
    }
    let first: Vec<usize> = (0..keys.len()).map(|b| (0..b).find(|a| keys[*a] == keys[b]).unwrap_or(b)).collect();
    if first.iter().enumerate().all(|(b, a)| *a == b) {
        return None;
    }
    let keep: Vec<bool> = first.iter().enumerate().map(|(b, a)| *a == b).collect();
    let filter = |xs: &[Atom]| xs.iter().zip(&keep).filter(|(_, k)| **k).map(|(a, _)| *a).collect::<Vec<_>>();
    let mut out = s.clone();
    match &mut out.expr {
        Expr::For { body, .. } => body.result = filter(&body.result),
        Expr::ForAcc { body, acc, .. } => {
            body.result = filter(&body.result);
            *acc = acc.iter().zip(&keep).filter(|(_, k)| **k).map(|(a, _)| *a).collect();
        }
        Expr::If { then_b, else_b, .. } => {
            then_b.result = filter(&then_b.result);
            else_b.result = filter(&else_b.result);
        }
        _ => unreachable!("matched above"),
    }
    out.binds = s.binds.iter().zip(&keep).filter(|(_, k)| **k).map(|(b, _)| b.clone()).collect();
    let mut stmts = vec![out];
    for b in (0..keys.len()).filter(|b| !keep[*b]) {
        stmts.extend(copies(&s.binds[b..=b], &[Atom::Var(s.binds[first[b]].var)]));
    }
    Some(stmts)
}

/// Drop the first loop parameter whose result nobody reads and which
/// influences nothing but its own next value: the parameter, its initial
/// value, its result and the body statements computing only it go.
fn drop_loop_param(s: &Stmt, keep: &[bool], ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::Loop { params, init, kind, body } = &s.expr else { return None };
    let cond_vars: FxHashSet<VarId> = match kind {
        LoopKind::While { cond } => walk::free_vars_block(cond),
        LoopKind::Count { .. } => FxHashSet::default(),
    };
    'params: for j in (0..params.len()).filter(|j| !keep[*j]) {
        // everything in the body that depends on the parameter
        let mut tainted: FxHashSet<VarId> = [params[j].var].into_iter().collect();
        let mut drop_stmt = vec![false; body.stmts.len()];
        for (k, st) in body.stmts.iter().enumerate() {
            if walk::free_vars_stmt(st).iter().any(|v| tainted.contains(v)) {
                if ctx.can_fail(st) && !update_at_count_index(st, kind) {
                    continue 'params;
                }
                drop_stmt[k] = true;
                tainted.extend(st.binds.iter().map(|b| b.var));
            }
        }
        if cond_vars.iter().any(|v| tainted.contains(v)) {
            continue;
        }
        let others_clean = body.result.iter().enumerate().all(|(i, a)| i == j || super::var(a).is_none_or(|v| !tainted.contains(&v)));
        if !others_clean {
            continue;
        }
        let mut new_body = Block { stmts: vec![], result: vec![] };
        for (k, st) in body.stmts.iter().enumerate() {
            if !drop_stmt[k] {
                new_body.stmts.push(st.clone());
            }
        }
        let without = |xs: &[Atom]| xs.iter().enumerate().filter(|(i, _)| *i != j).map(|(_, a)| *a).collect::<Vec<_>>();
        new_body.result = without(&body.result);
        let mut out = s.clone();
        out.binds.remove(j);
        out.expr = Expr::Loop {
            params: params.iter().enumerate().filter(|(i, _)| *i != j).map(|(_, p)| p.clone()).collect(),
            init: without(init),
            kind: kind.clone(),
            body: new_body,
        };
        return Some(vec![out]);
    }
    None
}

/// Whether `st` is `update a[i] = v` with `i` the index of the counted
/// loop `kind` and `a`'s outer axis as long as the loop: in range on every
/// trip (reverse mode's saved states, `saved with [i] = state`), so it
/// cannot fail.
fn update_at_count_index(st: &Stmt, kind: &LoopKind) -> bool {
    let (Expr::Update { idx: Atom::Var(i), .. }, LoopKind::Count { ivar, n, .. }, Some(b)) = (&st.expr, kind, st.binds.first()) else {
        return false;
    };
    i == ivar && crate::ir::Size::of_atom(n).is_some_and(|n| b.ty.shape.first() == Some(&n))
}

fn cse(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    // A new array (`replicate`, `iota`, a literal, …) may become the buffer
    // an `update` or `scatter_add` writes in place; two names for one buffer
    // would make every such write copy it (it made the ODE gradient's four
    // saved-state buffers one, and each step copied [steps][n]). Reads
    // (`index`, `slice`) and scalars are merged.
    let fresh_array = s.binds.iter().any(|b| b.ty.rank() > 0) && !matches!(s.expr, Expr::Index { .. } | Expr::Slice { .. });
    if fresh_array {
        return None;
    }
    let key = cse_key(s)?;
    let earlier = ctx.available(&key)?;
    if earlier.binds.len() != s.binds.len() || earlier.binds.iter().zip(&s.binds).any(|(a, b)| a.ty != b.ty) {
        return None;
    }
    let atoms: Vec<Atom> = earlier.binds.iter().map(|b| Atom::Var(b.var)).collect();
    Some(copies(&s.binds, &atoms))
}
