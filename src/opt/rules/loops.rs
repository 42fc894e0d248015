//! Loop rules (paper 001 Fig. 8f, paper 000): invariant code motion, loops
//! of zero or one iteration, and the single-active-iteration collapse that
//! makes one-hot sums free.

use super::bounds::Moved;
use super::{bind, copies, copy_block, in_range, local_def, one_hot_term, var};
use crate::ir::prim::Cost;
use crate::ir::range::Bound;
use crate::ir::{Atom, Binder, Block, Expr, Lit, LoopKind, Prim, Scalar, Size, Stmt, Type, VarId, walk};
use crate::opt::rule::{Ctx, Rule};
use rustc_hash::{FxHashMap, FxHashSet};

pub const RULES: &[Rule] = &[
    Rule::on_stmt(
        "licm",
        "statements of a loop body (or `while` condition, or reduction operator) that depend on nothing the loop binds move before the loop; only statements that cannot fail, since the loop may run zero times, and whose unchecked reads stay in range there (one in range only while the loop runs moves as `if n > 0 then e else zeros`)",
        licm,
    ),
    Rule::on_stmt(
        "fission_invariant",
        "inside a loop, a `for` whose results split into ones that depend only on what lies outside that loop and the others → two `for`s (shared statements copied), so `licm` can hoist the first (loop fission + tuple partial evaluation, Fig. 8g)",
        fission_invariant,
    ),
    Rule::on_stmt(
        "hoist_invariant_nest",
        "an expensive statement (exp, log, division…) nested in `for`s inside a loop, depending on those `for`s' indices but not on the loop → a table over the `for`s' indices built once before the loop, read where the statement was (GMM's exp q_k per point)",
        hoist_invariant_nest,
    ),
    Rule::on_stmt(
        "for_ignores_index",
        "`for i < n. e` where e does not read i → e once, then `replicate n e`; e must not fail (it now runs even when n is 0)",
        for_ignores_index,
    ),
    Rule::on_stmt("for_one", "`for i < 1. e` → `[e[i := 0]]`", for_one),
    Rule::on_stmt(
        "unroll_for",
        "`for i < k. e` with k a constant from 2 to 4 (or an accumulating `for` from 1 to 8), scalar results and a body of reads and arithmetic only, at most 96 statements in all → the k copies e[i := 0] … e[i := k-1] in order, then an array literal of each stacked result and, of each summed one, the additions the loop made in the fixed order (lanes r0 … rk-1 combined pairwise, `((r0 + r1) + (r2 + r3)) + …`, then `0 + T`): a small state (2-d, 3-d, a quaternion) becomes scalars, and a window's short sum straight-line code",
        unroll_for,
    ),
    Rule::on_stmt(
        "for_zero",
        "`for i < 0. e` → empty arrays of the binders' types (an accumulated result: zeros); the body never ran, so it could not fail",
        for_zero,
    ),
    Rule::on_stmt(
        "sum_cond_range",
        "Σ_{i<n} (if i < e then x else 0) (an accumulating `for` whose body is that comparison and `if`, with literal zeros in the `else`) → the sum of x over i < clamp(e, 0, n) only; also `i <= e` and, as a range starting at e or e+1, `i >= e` and `i > e` (either operand order). The iterations dropped added a zero to a sum that starts at +0, which changes no bit, and those left run in the same order (GMM's triangular `if i < j`: half the iterations)",
        sum_cond_range,
    ),
    Rule::on_stmt(
        "interchange_sum",
        "`for j < m (sums, stacks) { P; for p < k. B }` (the outer results the inner rows, at least one summed) → P's scalars tabled over j, then `for p < k. for j < m (sums, stacks). B`: a row summed over j becomes a scalar sum (stacked ones come out transposed). Only where B reads along j contiguously and nothing along p that varies with j; P and B cannot fail (the matrix-multiply gradient's dA)",
        interchange_sum,
    ),
    Rule::on_stmt(
        "transpose_out_of_sum",
        "an accumulating `for` summing `transpose x` (its only use) → the sum of x, transposed once after the loop (same additions, one copy instead of one per iteration)",
        transpose_out_of_sum,
    ),
    Rule::on_stmt("loop_zero", "a counted `loop` of 0 iterations → its initial values", loop_zero),
    Rule::on_stmt("loop_one", "a counted `loop` of 1 iteration → its body with the counter 0 and the parameters their initial values", loop_one),
    Rule::on_stmt(
        "merge_loop_params",
        "two parameters of a `loop` that start equal (the same atom, or two statements computing the same expression) and whose next values are the same computation (one's with the other parameter in its place) → one parameter; the second's result becomes a copy of the first's (reverse mode's residuals saved twice)",
        merge_loop_params,
    ),
    Rule::on_stmt(
        "onehot_sum",
        "Σ_i (select (i == e) x_i 0), as an accumulating `for` or a counted `loop` adding into a parameter from 0.0 → 0.0 + x_e (0 when e is out of range); the body must not fail and e must not depend on i",
        onehot_sum,
    ),
];

/// The variables a loop statement binds for its blocks (counter,
/// parameters) and those blocks; `None` unless every block repeats.
fn loop_bound(e: &Expr) -> Option<(FxHashSet<VarId>, Vec<&Block>)> {
    let mut bound = FxHashSet::default();
    let mut blocks = vec![];
    for scope in walk::scopes(e) {
        if !scope.binds.repeats() {
            return None;
        }
        bound.extend(scope.binds.index());
        bound.extend(scope.binds.params().iter().map(|p| p.var));
        blocks.push(scope.block);
    }
    (!blocks.is_empty()).then_some((bound, blocks))
}

/// Whether a statement is worth hoisting: copies and literals are free.
fn worth_hoisting(s: &Stmt) -> bool {
    !matches!(s.expr, Expr::Atom(_))
}

/// How an invariant statement leaves its loop.
#[derive(Clone, Copy, PartialEq)]
enum Leave {
    Stays,
    Moves,
    /// its reads are in range only where the loop runs (`v[0]` in `for i <
    /// n`, unchecked because `n >= 1` there): it moves as `if n > 0 then st
    /// else zeros`
    WhenRuns,
}

fn licm(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let (bound, blocks) = loop_bound(&s.expr)?;
    let (range, trips) = own_range(&s.expr);
    // per block: how each top-level statement leaves
    let mut hoist: Vec<Vec<Leave>> = vec![];
    let mut any = false;
    for b in &blocks {
        let mut variant: FxHashSet<VarId> = bound.clone();
        let mut marks = vec![Leave::Stays; b.stmts.len()];
        let defs = super::bounds::Local::of(&[b]);
        for (k, st) in b.stmts.iter().enumerate() {
            let free = walk::free_vars_stmt(st);
            if !(free.iter().any(|v| variant.contains(v)) || ctx.can_fail(st) || !worth_hoisting(st)) {
                let zeros_exist = || st.binds.iter().all(|x| x.ty.shape.iter().all(|d| d.provably_nonneg(&|v| ctx.is_nonneg(v))));
                marks[k] = match super::bounds::reads_when_moved(st, &[], range.as_ref(), &defs, ctx) {
                    Moved::Holds => Leave::Moves,
                    Moved::WhereTheLoopRuns if trips.is_some() && zeros_exist() => Leave::WhenRuns,
                    Moved::WhereTheLoopRuns => Leave::Stays,
                };
            }
            if marks[k] == Leave::Stays {
                variant.extend(st.binds.iter().map(|x| x.var));
            } else {
                any = true;
            }
        }
        hoist.push(marks);
    }
    if !any {
        return None;
    }
    let mut taken: Vec<(Stmt, Leave)> = vec![];
    let mut new = s.clone();
    for (b, marks) in walk::sub_blocks_mut(&mut new.expr).zip(&hoist) {
        let mut k = 0;
        b.stmts.retain(|st| {
            let m = marks[k];
            k += 1;
            if m != Leave::Stays {
                taken.push((st.clone(), m));
            }
            m == Leave::Stays
        });
    }
    let mut out: Vec<Stmt> = vec![];
    let mut ran: Option<Atom> = None;
    for (st, m) in taken {
        if m == Leave::Moves {
            out.push(st);
            continue;
        }
        let trips = trips.expect("WhenRuns needs the loop's trip count");
        let ran = *ran.get_or_insert_with(|| {
            let v = ctx.fresh("ran");
            out.push(bind(v, Type::scalar(Scalar::Bool), Expr::Prim(Prim::Gt, vec![trips, Atom::Lit(Lit::I64(0))])));
            Atom::Var(v)
        });
        out.extend(only_if_ran(ran, st, ctx)?);
    }
    out.push(new);
    Some(out)
}

/// The range of a counted loop's index, and its trip count as an atom.
fn own_range(e: &Expr) -> (Option<Bound>, Option<Atom>) {
    match e {
        Expr::For { ivar, size, .. } | Expr::ForAcc { ivar, size, .. } => (Some(Bound { x: Size::var(*ivar), upper: size.clone() }), size.as_atom()),
        Expr::Loop { kind: LoopKind::Count { ivar, n, .. }, .. } => (Size::of_atom(n).map(|upper| Bound { x: Size::var(*ivar), upper }), Some(*n)),
        _ => (None, None),
    }
}

/// `st` as `if ran then st else zeros`, binding the same variables.
fn only_if_ran(ran: Atom, mut st: Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let binds = st.binds.clone();
    let mut pre = vec![];
    let mut zeros_of = vec![];
    for x in &binds {
        let (stmts, z) = zeros(&x.ty, ctx)?;
        pre.extend(stmts);
        zeros_of.push(z);
    }
    for x in &mut st.binds {
        x.var = ctx.fresh_like(x.var);
    }
    let then_b = Block { result: st.binds.iter().map(|x| Atom::Var(x.var)).collect(), stmts: vec![st] };
    let else_b = Block { stmts: pre, result: zeros_of };
    Some(vec![Stmt { binds, expr: Expr::If { cond: ran, then_b, else_b }, loc: None }])
}

fn loop_zero(s: &Stmt, _ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::Loop { init, kind: LoopKind::Count { n: Atom::Lit(Lit::I64(n)), .. }, .. } = &s.expr else { return None };
    (*n <= 0).then(|| copies(&s.binds, init))
}

fn loop_one(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::Loop { params, init, kind: LoopKind::Count { ivar, n: Atom::Lit(Lit::I64(1)), .. }, body } = &s.expr else { return None };
    let mut subst: FxHashMap<VarId, Atom> = params.iter().map(|p| p.var).zip(init.iter().copied()).collect();
    subst.insert(*ivar, Atom::Lit(Lit::I64(0)));
    let body = body.clone();
    let copy = copy_block(&body, subst, ctx);
    let mut out = copy.stmts;
    out.extend(copies(&s.binds, &copy.result));
    Some(out)
}

/// Whether two atoms in scope hold the same value: the same atom, or two
/// variables bound by statements computing the same expression (already
/// run, so neither failed, and the IR is pure).
fn same_value(a: &Atom, b: &Atom, ctx: &Ctx) -> bool {
    let one = |a: &Atom| var(a).and_then(|v| ctx.def(v)).filter(|s| s.binds.len() == 1);
    a == b || matches!((one(a), one(b)), (Some(x), Some(y)) if x.expr == y.expr)
}

/// Value numbering of a loop body under the hypothesis that each
/// parameter holds the same value as its class representative (`merge`:
/// parameter → representative): every variable maps to the first variable
/// computing the same expression of the same values. Statements with nested
/// blocks only match when identical (their own binders differ), which is
/// conservative.
fn value_numbers(body: &Block, merge: FxHashMap<VarId, Atom>) -> FxHashMap<VarId, Atom> {
    let mut c = walk::Copier { map: merge, fresh: None };
    let mut seen: FxHashMap<String, VarId> = FxHashMap::default();
    for st in &body.stmts {
        let [b] = st.binds.as_slice() else { continue };
        let key = format!("{:?}:{:?}", b.ty, c.stmt(st).expr);
        match seen.get(&key) {
            Some(first) => {
                c.map.insert(b.var, Atom::Var(*first));
            }
            None => {
                seen.insert(key, b.var);
            }
        }
    }
    c.map
}

fn merge_loop_params(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::Loop { params, init, kind, body } = &s.expr else { return None };
    if s.binds.len() != params.len() {
        return None;
    }
    // classes of parameters that start equal, refined until each member's
    // next value numbers like its representative's: then, by induction over
    // the iterations, every class holds one value throughout
    let mut rep: Vec<usize> = (0..params.len()).collect();
    for b in 1..params.len() {
        if let Some(a) = (0..b).find(|&a| rep[a] == a && params[a].ty == params[b].ty && same_value(&init[a], &init[b], ctx)) {
            rep[b] = a;
        }
    }
    let merge_of = |rep: &[usize]| -> FxHashMap<VarId, Atom> {
        (0..params.len()).filter(|&b| rep[b] != b).map(|b| (params[b].var, Atom::Var(params[rep[b]].var))).collect()
    };
    loop {
        if rep.iter().enumerate().all(|(b, a)| *a == b) {
            return None;
        }
        let vn = value_numbers(body, merge_of(&rep));
        let num = |a: &Atom| var(a).and_then(|v| vn.get(&v).copied()).unwrap_or(*a);
        // split each class by its members' next values: a member joins the
        // first earlier member of its old class with the same next value
        let next: Vec<Atom> = (0..params.len()).map(|b| num(&body.result[b])).collect();
        let old = rep.clone();
        for b in 0..params.len() {
            rep[b] = (0..=b).find(|&a| old[a] == old[b] && next[a] == next[b]).unwrap_or(b);
        }
        if rep == old {
            break;
        }
    }
    let mut c = walk::Copier { map: merge_of(&rep), fresh: None };
    let (mut body, kind) = (
        c.block(body),
        match kind {
            LoopKind::While { cond } => LoopKind::While { cond: c.block(cond) },
            k => k.clone(),
        },
    );
    let keep = |b: &usize| rep[*b] == *b;
    let pick = |xs: &[Binder]| (0..xs.len()).filter(keep).map(|b| xs[b].clone()).collect::<Vec<_>>();
    // a merged parameter's step statement computes what its representative's
    // does (same value number: it fails exactly when that one fails), so it
    // goes when only the result read it; `dce` takes what fed it
    let kept: FxHashSet<VarId> = (0..params.len()).filter(keep).filter_map(|b| var(&body.result[b])).collect();
    let dead: FxHashSet<VarId> =
        (0..params.len()).filter(|b| !keep(b)).filter_map(|b| var(&body.result[b])).filter(|v| ctx.uses(*v) == 1 && !kept.contains(v)).collect();
    body.stmts.retain(|st| !st.binds.iter().any(|x| dead.contains(&x.var)));
    body.result = (0..params.len()).filter(keep).map(|b| body.result[b]).collect();
    let new_init = (0..params.len()).filter(keep).map(|b| init[b]).collect();
    let mut out = vec![Stmt { binds: pick(&s.binds), expr: Expr::Loop { params: pick(params), init: new_init, kind, body }, loc: s.loc.clone() }];
    for b in (0..params.len()).filter(|b| !keep(b)) {
        out.extend(copies(&s.binds[b..=b], &[Atom::Var(s.binds[rep[b]].var)]));
    }
    Some(out)
}

/// The replacement of a one-hot sum over `i < n`: the body once at `i = e`,
/// then `y_k = 0.0 + x_k` for each summed value, guarded by `0 <= e < n`
/// unless that is proven.
fn collapse(binds: &[Binder], body: &Block, i: VarId, n: &Size, terms: &[(Atom, Atom)], ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let e = terms[0].1;
    let copy = copy_block(body, FxHashMap::from_iter([(i, e)]), ctx);
    let map: FxHashMap<VarId, Atom> =
        body.stmts.iter().flat_map(|s| s.binds.iter()).map(|b| b.var).zip(copy.stmts.iter().flat_map(|s| s.binds.iter()).map(|b| Atom::Var(b.var))).collect();
    let moved = |a: &Atom| match a {
        Atom::Var(v) if *v == i => e,
        Atom::Var(v) => map.get(v).copied().unwrap_or(*a),
        Atom::Lit(_) => *a,
    };
    let mut at_e = copy.stmts;
    let mut sums = vec![];
    for (b, (x, _)) in binds.iter().zip(terms) {
        let y = ctx.fresh_like(b.var);
        at_e.push(bind(y, b.ty.clone(), Expr::Prim(Prim::Add, vec![super::lit_f(b.ty.elem, 0.0), moved(x)])));
        sums.push(Atom::Var(y));
    }
    if ctx.provably_below(&e, n) {
        at_e.extend(copies(binds, &sums));
        return Some(at_e);
    }
    let (mut out, ok) = in_range(e, n, ctx)?;
    let zeros: Vec<Atom> = binds.iter().map(|b| super::lit_f(b.ty.elem, 0.0)).collect();
    out.push(Stmt {
        binds: binds.to_vec(),
        expr: Expr::If { cond: ok, then_b: Block { stmts: at_e, result: sums }, else_b: Block { stmts: vec![], result: zeros } },
        loc: None,
    });
    Some(out)
}

fn onehot_sum(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    if ctx.can_fail(s) || s.binds.iter().any(|b| !b.ty.shape.is_empty() || !b.ty.elem.is_float()) {
        return None;
    }
    match &s.expr {
        Expr::ForAcc { ivar, size, body, acc } if acc.iter().all(|a| *a) => {
            let local = walk::bound_vars_block(body);
            let terms: Vec<(Atom, Atom)> = body.result.iter().map(|r| one_hot_term(body, r, *ivar, &local)).collect::<Option<_>>()?;
            if terms.iter().any(|t| t.1 != terms[0].1) {
                return None;
            }
            let (ivar, size, body) = (*ivar, size.clone(), body.clone());
            collapse(&s.binds, &body, ivar, &size, &terms, ctx)
        }
        Expr::Loop { params, init, kind: LoopKind::Count { ivar, n, .. }, body } => {
            // every parameter p: starts at 0.0, becomes p + select (i == e) x 0, read nowhere else
            let local = walk::bound_vars_block(body);
            let mut terms = vec![];
            for (k, p) in params.iter().enumerate() {
                if !super::is_lit(&init[k], 0.0) || ctx.uses(p.var) != 1 {
                    return None;
                }
                let Atom::Var(w) = body.result[k] else { return None };
                let Expr::Prim(Prim::Add, xs) = &local_def(body, w)?.expr else { return None };
                let term = match (xs[0], xs[1]) {
                    (Atom::Var(a), t) if a == p.var => t,
                    (t, Atom::Var(b)) if b == p.var => t,
                    _ => return None,
                };
                terms.push(one_hot_term(body, &term, *ivar, &local)?);
            }
            if terms.is_empty() || terms.iter().any(|t| t.1 != terms[0].1) {
                return None;
            }
            let n = Size::of_atom(n)?;
            let (ivar, body) = (*ivar, body.clone());
            collapse(&s.binds, &body, ivar, &n, &terms, ctx)
        }
        _ => None,
    }
}

/// The statements of `body` each result needs (by index), transitively.
fn needed_by(body: &Block, results: &[usize]) -> Vec<bool> {
    let mut live: FxHashSet<VarId> = results.iter().filter_map(|j| super::var(&body.result[*j])).collect();
    let mut need = vec![false; body.stmts.len()];
    for (k, st) in body.stmts.iter().enumerate().rev() {
        if st.binds.iter().any(|b| live.contains(&b.var)) {
            need[k] = true;
            live.extend(walk::free_vars_stmt(st));
        }
    }
    need
}

fn fission_invariant(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let (ivar, size, body, acc) = match &s.expr {
        Expr::For { ivar, size, body } => (*ivar, size, body, None),
        Expr::ForAcc { ivar, size, body, acc } => (*ivar, size, body, Some(acc)),
        _ => return None,
    };
    if s.binds.len() < 2 || ctx.innermost_loop().is_none() && !ctx.scope_repeats() || ctx.can_fail(s) {
        return None;
    }
    if size.vars().iter().any(|v| !ctx.outside_innermost_loop(*v)) {
        return None;
    }
    let local = walk::bound_vars_block(body);
    let invariant = |j: usize| {
        let need = needed_by(body, &[j]);
        let mut free: FxHashSet<VarId> = body.stmts.iter().zip(&need).filter(|(_, n)| **n).flat_map(|(st, _)| walk::free_vars_stmt(st)).collect();
        free.extend(super::var(&body.result[j]));
        free.iter().all(|v| *v == ivar || local.contains(v) || ctx.outside_innermost_loop(*v))
    };
    let (inv, rest): (Vec<usize>, Vec<usize>) = (0..s.binds.len()).partition(|j| invariant(*j));
    if inv.is_empty() || rest.is_empty() {
        return None;
    }
    let part = |js: &[usize]| {
        let need = needed_by(body, js);
        let stmts = body.stmts.iter().zip(&need).filter(|(_, n)| **n).map(|(st, _)| st.clone()).collect();
        let block = Block { stmts, result: js.iter().map(|j| body.result[*j]).collect() };
        let acc = acc.map(|a| js.iter().map(|j| a[*j]).collect::<Vec<bool>>());
        let binds: Vec<Binder> = js.iter().map(|j| s.binds[*j].clone()).collect();
        (block, acc, binds)
    };
    let loop_of = |ivar: VarId, block: Block, acc: Option<Vec<bool>>, binds: Vec<Binder>| Stmt {
        binds,
        expr: match acc {
            Some(acc) => Expr::ForAcc { ivar, size: size.clone(), body: block, acc },
            None => Expr::For { ivar, size: size.clone(), body: block },
        },
        loc: s.loc.clone(),
    };
    let (inv_block, inv_acc, inv_binds) = part(&inv);
    let (rest_block, rest_acc, rest_binds) = part(&rest);
    let fresh_i = ctx.fresh_like(ivar);
    let inv_block = copy_block(&inv_block, FxHashMap::from_iter([(ivar, Atom::Var(fresh_i))]), ctx);
    Some(vec![loop_of(fresh_i, inv_block, inv_acc, inv_binds), loop_of(ivar, rest_block, rest_acc, rest_binds)])
}

/// Primitives worth computing once instead of once per outer iteration.
fn expensive(p: Prim) -> bool {
    p.row().cost == Cost::Expensive
}

/// A statement found inside a nest of `for`s in a loop body: the path of
/// `for` statement indices leading to its block, and its index there.
struct Found {
    path: Vec<usize>,
    at: usize,
}

/// Search the `for` nests of `b` (depth >= 1 below the loop body) for
/// expensive statements that depend on nothing `variant` holds, in order
/// (`variant` grows by what depends on it; a later candidate may be
/// hoistable where an earlier one's nest is not).
fn find_invariants(b: &Block, variant: &mut FxHashSet<VarId>, path: &mut Vec<usize>, ctx: &Ctx, out: &mut Vec<Found>) {
    for (k, s) in b.stmts.iter().enumerate() {
        let free = walk::free_vars_stmt(s);
        let is_variant = free.iter().any(|v| variant.contains(v));
        if !is_variant && !path.is_empty() && !ctx.can_fail(s) && matches!(&s.expr, Expr::Prim(p, _) if expensive(*p)) && s.binds.len() == 1 {
            out.push(Found { path: path.clone(), at: k });
        }
        if is_variant {
            variant.extend(s.binds.iter().map(|x| x.var));
        }
        if let Expr::For { ivar, size, body } | Expr::ForAcc { ivar, size, body, .. } = &s.expr {
            if size.vars().iter().any(|v| variant.contains(v)) {
                variant.insert(*ivar);
            }
            path.push(k);
            find_invariants(body, variant, path, ctx, out);
            path.pop();
        }
    }
}

/// The `for` statements along `path` from `b`, outermost first.
fn nest<'b>(b: &'b Block, path: &[usize]) -> Vec<&'b Stmt> {
    let mut out = vec![];
    let mut cur = b;
    for &k in path {
        let s = &cur.stmts[k];
        out.push(s);
        if let Expr::For { body, .. } | Expr::ForAcc { body, .. } = &s.expr {
            cur = body;
        }
    }
    out
}

fn hoist_invariant_nest(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let (bound, blocks) = loop_bound(&s.expr)?;
    let [body] = blocks.as_slice() else { return None };
    let mut variant = bound;
    let mut candidates = vec![];
    find_invariants(body, &mut variant, &mut vec![], ctx, &mut candidates);
    candidates.iter().find_map(|found| hoisted(s, body, found, &variant, ctx))
}

/// [`hoist_invariant_nest`] of the statement `found` points at: its table
/// built before `s`, read in its place; `None` when its nest is ragged or
/// what it needs varies with the loop.
fn hoisted(s: &Stmt, body: &Block, found: &Found, variant: &FxHashSet<VarId>, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    // the nest of `for`s around the statement, and what it needs at each level
    let fors = nest(body, &found.path);
    let mut levels: Vec<(VarId, Size, &Block)> = vec![];
    for f in &fors {
        let (Expr::For { ivar, size, body } | Expr::ForAcc { ivar, size, body, .. }) = &f.expr else { return None };
        levels.push((*ivar, size.clone(), body));
    }
    // a level whose size depends on an outer level's index is ragged: the
    // table would have no type (`for i < n. for j < i`, as `sum_cond_range`
    // makes)
    let indices: Vec<VarId> = levels.iter().map(|(i, _, _)| *i).collect();
    if levels.iter().any(|(_, n, _)| n.vars().iter().any(|v| indices.contains(v))) {
        return None;
    }
    let (_, _, inner) = levels.last()?;
    let target = &inner.stmts[found.at];
    let elem = target.binds[0].clone();
    // per level, the statements the target needs (by dependence), innermost first
    let mut needed: FxHashSet<VarId> = walk::free_vars_stmt(target);
    let mut slices: Vec<Vec<Stmt>> = vec![vec![]; levels.len()];
    slices[levels.len() - 1].push(target.clone());
    // the table's loops, around the statements each level needs
    let table_loops: Vec<Bound> = levels.iter().map(|(i, n, _)| Bound { x: Size::var(*i), upper: n.clone() }).collect();
    let defs = super::bounds::Local::of(&[body]);
    let left = own_range(&s.expr).0;
    let holds = |st: &Stmt, levels: &[Bound]| super::bounds::reads_when_moved(st, levels, left.as_ref(), &defs, ctx) == Moved::Holds;
    if !holds(target, &table_loops) {
        return None;
    }
    for (lv, (_, _, b)) in levels.iter().enumerate().rev() {
        let upto = if lv == levels.len() - 1 { found.at } else { found.path[lv + 1] };
        for st in b.stmts[..upto].iter().rev() {
            if st.binds.iter().any(|x| needed.contains(&x.var)) {
                if walk::free_vars_stmt(st).iter().any(|v| variant.contains(v)) || ctx.can_fail(st) || !holds(st, &table_loops[..=lv]) {
                    return None;
                }
                needed.extend(walk::free_vars_stmt(st));
                slices[lv].insert(0, st.clone());
            }
        }
    }
    // build the array over the nest: for j1'. (slice 1; for j2'. (…; target))
    let mut shape: Vec<Size> = levels.iter().map(|(_, n, _)| n.clone()).collect();
    let mut built: Option<(Block, Type)> = None;
    for lv in (0..levels.len()).rev() {
        let mut stmts = slices[lv].clone();
        let result = match built.take() {
            None => Atom::Var(elem.var),
            Some((inner_block, _)) => {
                let v = ctx.fresh("inv");
                // a `for` over level lv + 1 and everything inside it
                let ty = Type { elem: elem.ty.elem, shape: shape[lv + 1..].to_vec() };
                stmts.push(Stmt {
                    binds: vec![Binder { var: v, ty }],
                    expr: Expr::For { ivar: levels[lv + 1].0, size: levels[lv + 1].1.clone(), body: inner_block },
                    loc: None,
                });
                Atom::Var(v)
            }
        };
        let ty = Type { elem: elem.ty.elem, shape: shape[lv + 1..].to_vec() };
        built = Some((Block { stmts, result: vec![result] }, ty));
    }
    let (block0, _) = built?;
    shape.truncate(levels.len());
    let table_ty = Type { elem: elem.ty.elem, shape: shape.clone() };
    let whole = Block {
        stmts: vec![Stmt {
            binds: vec![Binder { var: elem.var, ty: table_ty.clone() }],
            expr: Expr::For { ivar: levels[0].0, size: levels[0].1.clone(), body: block0 },
            loc: None,
        }],
        result: vec![Atom::Var(elem.var)],
    };
    // everything the table reads must be in scope before the loop
    if walk::free_vars_block(&whole).iter().any(|v| ctx.type_of(&Atom::Var(*v)).is_none()) {
        return None;
    }
    let copy = copy_block(&whole, FxHashMap::default(), ctx);
    let table = copy.result[0];
    // replace the statement by a read of the table at the nest's indices
    let read = Stmt {
        binds: vec![elem.clone()],
        expr: Expr::Index { arr: table, idx: levels.iter().map(|(i, _, _)| Atom::Var(*i)).collect(), checks: vec![None; levels.len()] },
        loc: None,
    };
    let mut new = s.clone();
    let mut cur: &mut Block = match &mut new.expr {
        Expr::For { body, .. } | Expr::ForAcc { body, .. } => body,
        Expr::Loop { body, kind: LoopKind::Count { .. }, .. } => body,
        _ => return None,
    };
    for &k in &found.path {
        let (Expr::For { body, .. } | Expr::ForAcc { body, .. }) = &mut cur.stmts[k].expr else { return None };
        cur = body;
    }
    cur.stmts[found.at] = read;
    let mut out = copy.stmts;
    out.push(new);
    Some(out)
}

fn for_ignores_index(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::For { ivar, size, body } = &s.expr else { return None };
    if walk::free_vars_block(body).contains(ivar) || body.stmts.iter().any(|st| ctx.can_fail(st)) {
        return None;
    }
    let defs = super::bounds::Local::of(&[body]);
    let range = Bound { x: Size::var(*ivar), upper: size.clone() };
    if !body.stmts.iter().all(|st| super::bounds::reads_when_moved(st, &[], Some(&range), &defs, ctx) == Moved::Holds) {
        return None;
    }
    let n = size.as_atom()?;
    if ctx.can_fail(s) {
        return None;
    }
    let mut out = body.stmts.clone();
    for (b, r) in s.binds.iter().zip(&body.result) {
        out.push(bind(b.var, b.ty.clone(), Expr::Replicate { n, val: *r }));
    }
    Some(out)
}

fn for_one(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::For { ivar, size, body } = &s.expr else { return None };
    if size.as_const() != Some(1) {
        return None;
    }
    let (ivar, body) = (*ivar, body.clone());
    let copy = copy_block(&body, FxHashMap::from_iter([(ivar, Atom::Lit(Lit::I64(0)))]), ctx);
    let mut out = copy.stmts;
    for (b, r) in s.binds.iter().zip(&copy.result) {
        out.push(bind(b.var, b.ty.clone(), Expr::ArrayLit(vec![*r])));
    }
    Some(out)
}

/// The largest constant size `unroll_for` copies out, and the most
/// statements its copies may add up to: fixed small vectors (a 2-d or
/// 3-d state, a quaternion) become scalars, whose arrays then go
/// (`index_array_lit`); anything larger stays a loop.
const UNROLL_MAX: i64 = 4;
/// An accumulating `for` of up to 8 terms is one chunk of the fixed order,
/// whose lane tree `unroll_for` writes out.
const UNROLL_SUM_MAX: i64 = 8;
const UNROLL_STMTS: usize = 96;

fn unroll_for(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let (ivar, size, body, acc) = match &s.expr {
        Expr::For { ivar, size, body } => (*ivar, size, body, None),
        Expr::ForAcc { ivar, size, body, acc } => (*ivar, size, body, Some(acc)),
        _ => return None,
    };
    let k = size.as_const()?;
    // a one-iteration `for` is `for_one`'s
    let (smallest, largest) = if acc.is_some() { (1, UNROLL_SUM_MAX) } else { (2, UNROLL_MAX) };
    if !(smallest..=largest).contains(&k) || body.stmts.len() * k as usize > UNROLL_STMTS || !reads_and_arithmetic(body) {
        return None;
    }
    let summed = |j: usize| acc.is_some_and(|a| a[j]);
    // scalar results only: a stacked row would be copied into the literal
    // (a `for` writes it in place), a summed row would need a loop to add
    if s.binds.iter().enumerate().any(|(j, b)| b.ty.shape.len() != usize::from(!summed(j)) || (summed(j) && b.ty.elem == Scalar::Bool)) {
        return None;
    }
    let copies: Vec<Block> = (0..k).map(|i| copy_block(body, FxHashMap::from_iter([(ivar, Atom::Lit(Lit::I64(i)))]), ctx)).collect();
    let mut out: Vec<Stmt> = copies.iter().flat_map(|c| c.stmts.iter().cloned()).collect();
    for (j, b) in s.binds.iter().enumerate() {
        if !summed(j) {
            out.push(bind(b.var, b.ty.clone(), Expr::ArrayLit(copies.iter().map(|c| c.result[j]).collect())));
            continue;
        }
        // the fixed order (LANGUAGE.md §10): at most 8 terms are one chunk,
        // term i in lane i (from -0.0, which adds nothing), the lanes
        // combined pairwise, then the start value: `0 + T`
        let mut lanes: Vec<Atom> = copies.iter().map(|c| c.result[j]).collect();
        for (x, y) in crate::ir::accumulate::tree_pairs(lanes.len()) {
            let v = ctx.fresh("sum");
            out.push(bind(v, b.ty.clone(), Expr::Prim(Prim::Add, vec![lanes[x], lanes[y]])));
            lanes[x] = Atom::Var(v);
        }
        out.push(bind(b.var, b.ty.clone(), Expr::Prim(Prim::Add, vec![super::lit_f(b.ty.elem, 0.0), lanes[0]])));
    }
    Some(out)
}

/// A body of copies, reads and scalar primitives only (no loops, branches
/// or array construction): copying it is cheap and keeps its failures (a
/// checked read, an integer division) in the loop's order.
fn reads_and_arithmetic(b: &Block) -> bool {
    b.stmts.iter().all(|s| matches!(s.expr, Expr::Atom(_) | Expr::Prim(..) | Expr::Index { .. }))
}

/// Zeros of type `ty` for an accumulator that added nothing: a literal, or
/// `for`s over the axes returning one (`None` when an axis might be
/// negative: the `for` would fail where the accumulator did not).
fn zeros(ty: &Type, ctx: &mut Ctx) -> Option<(Vec<Stmt>, Atom)> {
    let zero = super::lit_f(ty.elem, 0.0);
    if ty.shape.is_empty() {
        return Some((vec![], zero));
    }
    let mut block = Block { stmts: vec![], result: vec![zero] };
    for d in (0..ty.shape.len()).rev() {
        let (i, v) = (ctx.fresh("i"), ctx.fresh("zeros"));
        let t = Type { elem: ty.elem, shape: ty.shape[d..].to_vec() };
        block = Block { stmts: vec![bind(v, t, Expr::For { ivar: i, size: ty.shape[d].clone(), body: block })], result: vec![Atom::Var(v)] };
    }
    let s = block.stmts.pop()?;
    if ctx.can_fail(&s) {
        return None;
    }
    Some((vec![s], block.result[0]))
}

fn for_zero(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let (size, acc) = match &s.expr {
        Expr::For { size, .. } => (size, None),
        Expr::ForAcc { size, acc, .. } => (size, Some(acc)),
        _ => return None,
    };
    if size.as_const() != Some(0) {
        return None;
    }
    let acc: Vec<bool> = acc.cloned().unwrap_or_else(|| vec![false; s.binds.len()]);
    let mut out = vec![];
    for (b, summed) in s.binds.iter().zip(acc) {
        if summed {
            if b.ty.elem == Scalar::Bool {
                return None;
            }
            let (stmts, z) = zeros(&b.ty, ctx)?;
            out.extend(stmts);
            out.push(bind(b.var, b.ty.clone(), Expr::Atom(z)));
        } else {
            out.push(bind(b.var, b.ty.clone(), Expr::ArrayLit(vec![])));
        }
    }
    Some(out)
}

/// The range of `i` where comparison `p xs` holds, for `sum_cond_range`:
/// `(e, k, below)`, an exclusive upper bound `e + k` when `below`, else an
/// inclusive lower bound `e + k`, with `e` the operand that is not `i`.
pub(crate) fn cond_bound(p: Prim, xs: &[Atom], i: VarId) -> Option<(Atom, i64, bool)> {
    use Prim::*;
    let iv = Atom::Var(i);
    let (left, e) = match (xs.first()? == &iv, xs.get(1)? == &iv) {
        (true, false) => (true, xs[1]),
        (false, true) => (false, xs[0]),
        _ => return None,
    };
    // as `i OP e`
    let op = match (p, left) {
        (op, true) => op,
        (Lt, false) => Gt,
        (Le, false) => Ge,
        (Gt, false) => Lt,
        (Ge, false) => Le,
        _ => return None,
    };
    match op {
        Lt => Some((e, 0, true)),
        Le => Some((e, 1, true)),
        Gt => Some((e, 1, false)),
        Ge => Some((e, 0, false)),
        _ => None,
    }
}

/// The trip count (a `max … 0`, known non-negative) of a loop over `i < n`
/// run only where `i OP e` holds (`cond_bound`'s `(e, k, below)`), and the
/// first index when that is a lower bound; the statements computing them
/// go to `out`.
pub(crate) fn cond_range(e: Atom, k: i64, below: bool, n: Atom, out: &mut Vec<Stmt>, ctx: &mut Ctx) -> (Atom, Option<Atom>) {
    let int = Type::scalar(Scalar::I64);
    let mut op = |p: Prim, a: Atom, b: Atom, ctx: &mut Ctx| {
        let v = ctx.fresh("range");
        out.push(bind(v, int.clone(), Expr::Prim(p, vec![a, b])));
        Atom::Var(v)
    };
    let one = Atom::Lit(Lit::I64(1));
    let zero_i = Atom::Lit(Lit::I64(0));
    if below {
        // i < min(e, n) (for i <= e: min(e, n - 1) + 1, which cannot overflow)
        let hi = if k == 0 {
            op(Prim::Min, e, n, ctx)
        } else {
            let last = op(Prim::Sub, n, one, ctx);
            let m = op(Prim::Min, e, last, ctx);
            op(Prim::Add, m, one, ctx)
        };
        (op(Prim::Max, hi, zero_i, ctx), None)
    } else {
        // i from lo = clamp(e + k, 0, n) to n
        let m = op(Prim::Min, e, n, ctx);
        let m = if k == 0 { m } else { op(Prim::Add, m, one, ctx) };
        let m = op(Prim::Max, m, zero_i, ctx);
        let lo = op(Prim::Min, m, n, ctx);
        let left = op(Prim::Sub, n, lo, ctx);
        (op(Prim::Max, left, zero_i, ctx), Some(lo))
    }
}

fn sum_cond_range(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::ForAcc { ivar, size, body, acc } = &s.expr else { return None };
    // statements before the comparison that only the `then` branch reads
    // (a table read at i) move into it: they cannot fail
    let [pre @ .., cmp, branch] = body.stmts.as_slice() else { return None };
    let Expr::If { cond: Atom::Var(c), then_b, else_b } = &branch.expr else { return None };
    let pre_binds: Vec<VarId> = pre.iter().flat_map(|st| st.binds.iter().map(|x| x.var)).collect();
    let read_outside_then = |v: &VarId| walk::free_vars_stmt(cmp).contains(v) || walk::free_vars_block(else_b).contains(v) || *c == *v;
    if pre_binds.iter().any(read_outside_then) || ctx.stmts_can_fail(pre) {
        return None;
    }
    let Expr::Prim(p, xs) = &cmp.expr else { return None };
    // (a float zero of either sign: x + -0.0 is x too)
    let zero = |a: &Atom| match a {
        Atom::Lit(Lit::F64(x)) => *x == 0.0,
        Atom::Lit(Lit::F32(x)) => *x == 0.0,
        Atom::Lit(Lit::I64(x)) => *x == 0,
        Atom::Lit(Lit::I32(x)) => *x == 0,
        _ => false,
    };
    let results_are_the_branch = body.result.len() == branch.binds.len() && body.result.iter().zip(&branch.binds).all(|(r, b)| *r == Atom::Var(b.var));
    if !acc.iter().all(|a| *a)
        || cmp.binds.len() != 1
        || cmp.binds[0].var != *c
        || !else_b.stmts.is_empty()
        || !else_b.result.iter().all(zero)
        || !results_are_the_branch
        || walk::free_vars_block(then_b).contains(c)
    {
        return None;
    }
    let (e, k, below) = cond_bound(*p, xs, *ivar)?;
    let n = size.as_atom()?;
    let int = Type::scalar(Scalar::I64);
    if ctx.type_of(&e) != Some(int.clone()) || e == Atom::Var(*c) {
        return None;
    }
    let mut out = vec![];
    let (count, offset) = cond_range(e, k, below, n, &mut out, ctx);
    let Atom::Var(count) = count else { return None };
    let mut new_body = then_b.clone();
    new_body.stmts.splice(0..0, pre.iter().cloned());
    let new_ivar = match offset {
        None => *ivar,
        Some(lo) => {
            let j = ctx.fresh_like(*ivar);
            new_body.stmts.insert(0, bind(*ivar, int.clone(), Expr::Prim(Prim::Add, vec![Atom::Var(j), lo])));
            j
        }
    };
    out.push(Stmt {
        binds: s.binds.clone(),
        expr: Expr::ForAcc { ivar: new_ivar, size: Size::var(count), body: new_body, acc: acc.clone() },
        loc: s.loc.clone(),
    });
    Some(out)
}

/// `for j < m (sums/stacks) { P; let xs = for p < k { B }; in xs }` (P
/// binding scalars, each result of the outer loop one of the inner loop's
/// rows (of scalars, or of rows: a `[c][w]` filter gradient), at least one
/// summed over j) → the scalars of P that B needs stacked over j
/// first, then `for p < k. for j < m (sums/stacks) { B }`. A row summed
/// over j becomes a scalar sum per p, built where it is made instead of
/// written as a row and added back; a row stacked over j comes out
/// transposed (`[k][m]`), so a `transpose` gives the original. Fires only
/// where the nest then walks memory better: B reads some array with j as
/// its last index (contiguous in the new inner loop) and nothing with p
/// last that also varies with j (contiguous only in the old one); the
/// matrix-multiply gradient's `dA` sums, not a matrix-vector gradient's.
fn interchange_sum(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::ForAcc { ivar: j, size: m, body, acc } = &s.expr else { return None };
    // the inner loop: the body's one `for`; the other statements (P) may
    // come after it as long as they do not read it
    let at = body.stmts.iter().position(|st| matches!(st.expr, Expr::For { .. }))?;
    let inner = &body.stmts[at];
    let Expr::For { ivar: p, size: k, body: b } = &inner.expr else { return None };
    let (j, p) = (*j, *p);
    let prefix: Vec<Stmt> = body.stmts.iter().enumerate().filter(|(t, _)| *t != at).map(|(_, st)| st.clone()).collect();
    let reads_inner = |st: &Stmt| walk::free_vars_stmt(st).iter().any(|v| inner.binds.iter().any(|ib| ib.var == *v));
    if prefix[at..].iter().any(reads_inner) {
        return None;
    }
    // outer result t is inner row pos[t], or a scalar of P (`extra`);
    // every inner row exactly once
    let pos: Vec<Option<usize>> = body.result.iter().map(|r| inner.binds.iter().position(|ib| Some(ib.var) == var(r))).collect();
    let extra = |t: usize| pos[t].is_none();
    let bound_in_p = |r: &Atom| var(r).is_some_and(|v| prefix.iter().any(|st| st.binds.iter().any(|x| x.var == v)));
    if (0..pos.len()).any(|t| extra(t) && !bound_in_p(&body.result[t])) {
        return None;
    }
    let mut sorted: Vec<usize> = pos.iter().flatten().copied().collect();
    sorted.sort_unstable();
    let summed_row = acc.iter().zip(&pos).any(|(a, q)| *a && q.is_some());
    if sorted != (0..inner.binds.len()).collect::<Vec<_>>() || !summed_row || inner.binds.iter().any(|ib| ib.ty.shape.is_empty()) {
        return None;
    }
    // P binds scalars (it is tabled over j); nothing in the nest can fail,
    // since its iterations run in another order
    let prefix_binds = || prefix.iter().flat_map(|st| st.binds.iter());
    if prefix_binds().any(|x| !x.ty.shape.is_empty()) {
        return None;
    }
    // where only the loop's own size can fail (a window's `l - w + 1`),
    // the interchanged nest runs under `m >= 0` and the loop as it was,
    // with its error, otherwise
    let guarded = ctx.can_fail(s);
    if guarded && (ctx.size_nonneg(m) || ctx.size_ran(m) || ctx.stmts_can_fail(&body.stmts) || s.binds.iter().any(|x| !x.ty.elem.is_float())) {
        return None;
    }
    let varies_with_j = |v: &VarId| *v == j || prefix_binds().any(|x| x.var == *v);
    if k.vars().iter().any(varies_with_j) || !walks_better_interchanged(b, j, p, ctx) {
        return None;
    }
    // 1. the values of P that B reads, one table over j each
    let read_by_b = walk::free_vars_stmt(inner);
    let needed: Vec<Binder> = prefix_binds().filter(|x| read_by_b.contains(&x.var)).cloned().collect();
    let extras: Vec<usize> = (0..pos.len()).filter(|t| extra(*t)).collect();
    let mut out = vec![];
    let mut reads = vec![];
    if !needed.is_empty() || !extras.is_empty() {
        // with the outer loop's results that P computes (summed or stacked
        // as they were)
        let tables: Vec<Binder> = needed.iter().map(|x| Binder { var: ctx.fresh("tbl"), ty: Type { elem: x.ty.elem, shape: vec![m.clone()] } }).collect();
        let mut binds = tables.clone();
        binds.extend(extras.iter().map(|t| s.binds[*t].clone()));
        let mut results: Vec<Atom> = needed.iter().map(|x| Atom::Var(x.var)).collect();
        results.extend(extras.iter().map(|t| body.result[*t]));
        let fill = Block { stmts: prefix.to_vec(), result: results };
        let j1 = ctx.fresh_like(j);
        let fill = copy_block(&fill, FxHashMap::from_iter([(j, Atom::Var(j1))]), ctx);
        let sums: Vec<bool> = needed.iter().map(|_| false).chain(extras.iter().map(|t| acc[*t])).collect();
        let expr = if sums.iter().any(|a| *a) {
            Expr::ForAcc { ivar: j1, size: m.clone(), body: fill, acc: sums }
        } else {
            Expr::For { ivar: j1, size: m.clone(), body: fill }
        };
        out.push(Stmt { binds, expr, loc: s.loc.clone() });
        for (x, t) in needed.iter().zip(&tables) {
            reads.push(bind(x.var, x.ty.clone(), Expr::Index { arr: Atom::Var(t.var), idx: vec![Atom::Var(j)], checks: vec![None] }));
        }
    }
    // the inner loop's rows from here on: outer result t is row pos[t]
    let rows_at: Vec<usize> = (0..pos.len()).filter(|t| !extra(*t)).collect();
    let row_acc: Vec<bool> = rows_at.iter().map(|t| acc[*t]).collect();
    let row_binds: Vec<Binder> = rows_at.iter().map(|t| s.binds[*t].clone()).collect();
    let pos: Vec<usize> = rows_at.iter().map(|t| pos[*t].unwrap_or(0)).collect();
    let (acc_all, acc, s_binds) = (acc, &row_acc, &row_binds);
    // 2. for p < k. for j < m (the outer loop's sums and stacks). B
    let mut stmts = reads;
    stmts.extend(b.stmts.iter().cloned());
    let raw = Block { stmts, result: pos.iter().map(|t| b.result[*t]).collect() };
    let (j2, p2) = (ctx.fresh_like(j), ctx.fresh_like(p));
    let inner_body = copy_block(&raw, FxHashMap::from_iter([(j, Atom::Var(j2)), (p, Atom::Var(p2))]), ctx);
    // per p: a sum over j (a scalar, or the rest of a row of rank 2 or
    // more), or a column stacked over j
    let rest = |t: usize| inner.binds[pos[t]].ty.shape[1..].to_vec();
    let sums: Vec<Binder> = (0..pos.len())
        .map(|t| {
            let shape = if acc[t] { rest(t) } else { std::iter::once(m.clone()).chain(rest(t)).collect() };
            Binder { var: ctx.fresh("r"), ty: Type { elem: s_binds[t].ty.elem, shape } }
        })
        .collect();
    let rows: Vec<Binder> = (0..pos.len())
        .map(|t| {
            if acc[t] {
                s_binds[t].clone()
            } else {
                Binder { var: ctx.fresh("cols"), ty: Type { elem: s_binds[t].ty.elem, shape: [k.clone(), m.clone()].into_iter().chain(rest(t)).collect() } }
            }
        })
        .collect();
    let nest = Block {
        stmts: vec![Stmt { binds: sums.clone(), expr: Expr::ForAcc { ivar: j2, size: m.clone(), body: inner_body, acc: acc.clone() }, loc: inner.loc.clone() }],
        result: sums.iter().map(|x| Atom::Var(x.var)).collect(),
    };
    out.push(Stmt { binds: rows.clone(), expr: Expr::For { ivar: p2, size: k.clone(), body: nest }, loc: s.loc.clone() });
    for t in (0..pos.len()).filter(|t| !acc[*t]) {
        out.push(bind(s_binds[t].var, s_binds[t].ty.clone(), Expr::Transpose(Atom::Var(rows[t].var))));
    }
    if !guarded {
        return Some(out);
    }
    let results: Vec<Atom> = s.binds.iter().map(|x| Atom::Var(x.var)).collect();
    let then_b = copy_block(&Block { stmts: out, result: results.clone() }, FxHashMap::default(), ctx);
    // the else branch only fails: the loop over the negative size, summing
    // rows of zeros (not the original body, which this rule would take again)
    let mut els = vec![];
    let mut zeros = vec![];
    for (t, x) in s.binds.iter().enumerate() {
        let shape = if acc_all[t] { &x.ty.shape[..] } else { &x.ty.shape[1..] };
        let mut z = super::lit_f(x.ty.elem, 0.0);
        for d in (0..shape.len()).rev() {
            let n = materialized(&shape[d], &mut els, ctx);
            let v = ctx.fresh("zeros");
            els.push(bind(v, Type { elem: x.ty.elem, shape: shape[d..].to_vec() }, Expr::Replicate { n, val: z }));
            z = Atom::Var(v);
        }
        zeros.push(z);
    }
    let failing: Vec<Binder> = s.binds.iter().map(|x| Binder { var: ctx.fresh_like(x.var), ty: x.ty.clone() }).collect();
    let j3 = ctx.fresh_like(j);
    let empty = Block { stmts: vec![], result: zeros };
    els.push(Stmt { binds: failing.clone(), expr: Expr::ForAcc { ivar: j3, size: m.clone(), body: empty, acc: acc_all.clone() }, loc: s.loc.clone() });
    let else_b = Block { stmts: els, result: failing.iter().map(|x| Atom::Var(x.var)).collect() };
    let mut pre = vec![];
    let n = materialized(m, &mut pre, ctx);
    let ok = ctx.fresh("ran");
    pre.push(bind(ok, Type::scalar(Scalar::Bool), Expr::Prim(Prim::Ge, vec![n, Atom::Lit(Lit::I64(0))])));
    pre.push(Stmt { binds: s.binds.clone(), expr: Expr::If { cond: Atom::Var(ok), then_b, else_b }, loc: s.loc.clone() });
    Some(pre)
}

/// `size` as an `i64` atom, its arithmetic appended to `out`.
pub(crate) fn materialized(size: &Size, out: &mut Vec<Stmt>, ctx: &mut Ctx) -> Atom {
    size.materialize(&mut |p, xs| {
        let t = ctx.fresh("len");
        out.push(bind(t, Type::scalar(Scalar::I64), Expr::Prim(p, xs)));
        Atom::Var(t)
    })
}

/// `interchange_sum`'s locality test on the inner body `b` (over `p`, in
/// a loop over `j`), nested loops in it included: some read has `j` (or
/// `j` plus something: a window `x[t + o]`, a packed triangle's column
/// `l[f(p) + j]`) as its last index and none has `p` last with `j` among
/// its other indices.
fn walks_better_interchanged(b: &Block, j: VarId, p: VarId, ctx: &Ctx) -> bool {
    let mut stmts = vec![];
    walk::for_each_stmt(b, &mut |st| stmts.push(st));
    let (jv, pv) = (Atom::Var(j), Atom::Var(p));
    let defs: FxHashMap<VarId, &Stmt> = stmts.iter().flat_map(|st| st.binds.iter().map(move |x| (x.var, *st))).collect();
    let lookup = |v: VarId| defs.get(&v).copied().or_else(|| ctx.def(v));
    let shifted_j = |a: &Atom| super::bounds::unit_stride(a, j, &lookup);
    let reads = || {
        stmts.iter().filter_map(|st| match &st.expr {
            Expr::Index { idx, .. } => idx.last().map(|last| (last, idx)),
            _ => None,
        })
    };
    reads().any(|(last, _)| *last == jv || shifted_j(last)) && !reads().any(|(last, idx)| *last == pv && idx.contains(&jv))
}

/// `for i (sums) { …; let y = transpose x; in …, y, … }` with the sum of
/// `y` the only use of `y` → the sum of `x`, transposed once after the
/// loop: the same additions on the same elements, one copy instead of
/// one per iteration (and a `transpose` after it cancels).
fn transpose_out_of_sum(s: &Stmt, ctx: &mut Ctx) -> Option<Vec<Stmt>> {
    let Expr::ForAcc { ivar, size, body, acc } = &s.expr else { return None };
    let t = (0..acc.len()).find(|t| {
        acc[*t]
            && var(&body.result[*t]).is_some_and(|y| {
                ctx.uses(y) == 1 && matches!(local_def(body, y), Some(d) if matches!(d.expr, Expr::Transpose(Atom::Var(_))) && d.binds.len() == 1)
            })
    })?;
    let y = var(&body.result[t])?;
    let Expr::Transpose(x) = local_def(body, y)?.expr else { return None };
    let ty = &s.binds[t].ty;
    let mut shape = ty.shape.clone();
    shape.swap(0, 1);
    let summed = Binder { var: ctx.fresh("sum_t"), ty: Type { elem: ty.elem, shape } };
    let mut body = body.clone();
    body.stmts.retain(|st| st.binds.first().map(|b| b.var) != Some(y));
    body.result[t] = x;
    let mut binds = s.binds.clone();
    binds[t] = summed.clone();
    Some(vec![
        Stmt { binds, expr: Expr::ForAcc { ivar: *ivar, size: size.clone(), body, acc: acc.clone() }, loc: s.loc.clone() },
        bind(s.binds[t].var, ty.clone(), Expr::Transpose(Atom::Var(summed.var))),
    ])
}
