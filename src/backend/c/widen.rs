//! Outer-loop vectorisation of short sums: a `for` that builds a vector of
//! scalars, each computed by nested sums (`for t. f (sum (for ch. sum (for
//! o. x[ch, t + o] * w[ch, o])))`, a convolution), runs its iterations in
//! groups of [`W`] consecutive ones side by side. Every scalar of the body
//! becomes `W` lanes (`ard_wvN`, a GCC vector, rt.h's `ard_x8*`, where the
//! type has one), every statement a loop over the lanes that the C compiler
//! vectorises, and each nested sum keeps its fixed order (LANGUAGE.md §10)
//! per lane: chunks, 8 accumulators, pairwise combination, the
//! accumulators and trees whole vectors (as lane arrays gcc kept them in
//! memory between statements). A read whose last index is the group's
//! index plus a shared value (`x[ch, t + o]`) is one vector load, and a
//! chunk (8 terms or a short last one) of a short straight-line body is unrolled, so
//! that each term's accumulator is a register. Only the loop over the lanes is added, so each
//! element has the bits of the scalar code; what is won is that a sum of 5
//! or 16 terms, alone too short for vector units, now fills them across
//! the outer iterations. Bodies qualify when they only compute scalars
//! (primitives, array reads, nested float sums of a length fixed for the
//! group, maxima and minima of rows) or short maps of them (`for a. x[i,
//! a] - mu[j, a]`: `ard_wvX[n][8]` on the stack, read and folded per lane)
//! and cannot stop (checked on the emitted C). Statements that read no lane
//! (a triangle's packed index, a read at a shared position) run once per
//! group. A map may give several results per iteration, scalars or rows
//! that a map of the group computes (the rows a gradient's forward pass
//! saves): each lane's row is copied out to its place. A summing `for` (softmax cross-entropy's sum over rows)
//! adds each group into the accumulator's lanes as its plain loop would.
//! A check that fails in a group (a checked read, an integer division)
//! does not report: the group runs again one iteration at a time, so the
//! error is the first failing iteration's, as in the interpreter. A fold
//! over the iterations (`minimum (for j. sum ...)`, a counted `loop`) runs
//! its sums for the group's lanes and then its step lane by lane in order,
//! except a minimum or maximum, which each lane folds into a vector and
//! the lanes combine as the fold in order would (`extremum_fold`).

use super::{Em, R, Row, at_str, ctype, var_names_in};
use crate::ir::{Atom, Block, Expr, ReduceOp, Stmt, VarId, walk};
use rustc_hash::{FxHashMap, FxHashSet};

/// Lanes per group: 8 doubles fill an AVX-512 register (two AVX2 ones).
pub const W: usize = 8;

/// The declaration of `W` lanes of C type `ct` named `name`: a GCC vector
/// (rt.h's `ard_x8*`) where the element type has one, so that the lane
/// loops' arrays can live in vector registers; indexing (`name[l]`) is the
/// same either way.
fn lanes_decl(ct: &str, name: &str) -> String {
    // `name` may carry outer dimensions (`ard_lnK[8]`): lanes innermost
    match lanes_type(ct) {
        Some(v) => format!("{v} {name};"),
        None => format!("{ct} {name}[{W}];"),
    }
}

/// rt.h's vector of `W` elements of C type `ct`, if it has one.
fn lanes_type(ct: &str) -> Option<&'static str> {
    match ct {
        "double" => Some("ard_x8d"),
        "float" => Some("ard_x8f"),
        "int64_t" => Some("ard_x8l"),
        "int32_t" => Some("ard_x8i"),
        _ => None,
    }
}

/// Whether `b` is a body the widened form can emit: scalars made by
/// primitives, reads and nested float sums (of such bodies), with at least
/// one sum (without one the plain loop already vectorises); besides them,
/// unchecked rows of arrays (`let r = x[i]`, a view: an `ard_arr` per lane)
/// and float maxima and minima (`maximum r`, folded lane by lane).
pub fn widenable(b: &Block) -> bool {
    !b.result.is_empty() && b.result.iter().all(|r| scalar_or_map(b, r)) && widenable_stmts(&b.stmts)
}

/// Whether the result `r` of `b` is a scalar, or a row that a map of the
/// body computes (its lane row is copied out per lane).
fn scalar_or_map(b: &Block, r: &Atom) -> bool {
    let Atom::Var(v) = r else { return true };
    match b.stmts.iter().find(|s| s.binds.iter().any(|x| x.var == *v)) {
        Some(s) => s.binds.iter().all(|x| x.ty.rank() == 0) || matches!((&s.expr, &s.binds[..]), (Expr::For { .. }, [x]) if x.ty.rank() == 1),
        None => true,
    }
}

fn widenable_stmts(stmts: &[Stmt]) -> bool {
    fn ok(stmts: &[Stmt], sums: &mut usize) -> bool {
        stmts.iter().all(|s| {
            let row = matches!(s.expr, Expr::For { .. }) || is_row_view(s);
            if s.binds.iter().any(|x| x.ty.rank() > 0) && !row {
                return false;
            }
            match &s.expr {
                Expr::Prim(..) | Expr::Atom(_) | Expr::Index { .. } => true,
                Expr::Reduce { op, ne, arrs } => {
                    ne.len() == 1 && matches!(arrs[..], [Atom::Var(_)]) && s.binds.len() == 1 && Em::lane_extremum(op, s.binds[0].ty.elem).is_some()
                }
                Expr::ForAcc { body, acc, .. } => {
                    *sums += 1;
                    acc.len() == 1 && acc[0] && s.binds.len() == 1 && s.binds[0].ty.elem.is_float() && body.result.len() == 1 && ok(&body.stmts, sums)
                }
                Expr::For { body, .. } => matches!(&s.binds[..], [x] if x.ty.rank() == 1) && body.result.len() == 1 && ok(&body.stmts, sums),
                _ => false,
            }
        })
    }
    let mut sums = 0;
    ok(stmts, &mut sums) && sums > 0
}

/// `let r = index a[i]`: one unchecked row (a view) of an array.
fn is_row_view(s: &Stmt) -> bool {
    matches!(&s.expr, Expr::Index { checks, .. } if checks.iter().all(Option::is_none)) && matches!(&s.binds[..], [x] if x.ty.rank() == 1)
}

/// Whether the C of `s` checks something that can fail (a checked read):
/// such statements get a lane loop of their own, whose jump to the group's
/// rerun keeps only that loop from being vectorised.
fn checks(s: &Stmt) -> bool {
    matches!(&s.expr, Expr::Index { checks, .. } if checks.iter().any(Option::is_some))
        || matches!(&s.expr, Expr::Prim(p, _) if p.row().traps != crate::ir::prim::Traps::Never && s.binds.iter().any(|x| x.ty.elem.is_int()))
}

/// `b` with its unchecked views (`let r = index a[j]`, a row of an array
/// bound outside `b`) folded into the reads of them (`index r[i]` becomes
/// `index a[j, i]`) where every use of the view is such a read: a view of
/// the current iteration is then just more index arithmetic per lane.
pub fn fold_views(b: &Block) -> Block {
    let mut out = b.clone();
    let mut k = 0;
    while k < out.stmts.len() {
        let s = &out.stmts[k];
        let view = match &s.expr {
            Expr::Index { arr: Atom::Var(a), idx, checks } if s.binds.len() == 1 && s.binds[0].ty.rank() > 0 && checks.iter().all(|c| c.is_none()) => {
                Some((s.binds[0].var, *a, idx.clone(), checks.clone()))
            }
            _ => None,
        };
        if let Some((v, a, idx, checks)) = view {
            let rest = &out.stmts[k + 1..];
            let mut all = 0;
            for t in rest {
                walk::visit_expr(&t.expr, &mut |u| all += usize::from(u == v), &mut |_| {});
            }
            let reads: usize = rest.iter().map(|t| reads_of(&t.expr, v)).sum();
            let in_result = out.result.contains(&Atom::Var(v));
            if all == reads && !in_result {
                let mut rest: Vec<Stmt> = out.stmts.drain(k + 1..).collect();
                for t in &mut rest {
                    fold_into(&mut t.expr, v, a, &idx, &checks);
                }
                out.stmts.pop();
                out.stmts.extend(rest);
                continue;
            }
        }
        k += 1;
    }
    out
}

/// How many times `e` (or a sum in it) reads `v` as `index v[..]`.
fn reads_of(e: &Expr, v: VarId) -> usize {
    match e {
        Expr::Index { arr: Atom::Var(a), .. } => usize::from(*a == v),
        Expr::ForAcc { body, .. } => body.stmts.iter().map(|s| reads_of(&s.expr, v)).sum(),
        _ => 0,
    }
}

fn fold_into(e: &mut Expr, v: VarId, a: VarId, idx: &[Atom], checks: &[crate::ir::Check]) {
    match e {
        Expr::Index { arr, idx: i2, checks: c2 } if *arr == Atom::Var(v) => {
            *arr = Atom::Var(a);
            i2.splice(0..0, idx.iter().cloned());
            c2.splice(0..0, checks.iter().cloned());
        }
        Expr::ForAcc { body, .. } => body.stmts.iter_mut().for_each(|s| fold_into(&mut s.expr, v, a, idx, checks)),
        _ => {}
    }
}

/// The longest sum the widened form computes: longer ones vectorise
/// along their own terms (8 accumulators over contiguous reads, which the
/// lanes of the outer loop may not be), so a group with one runs as before.
pub const SHORT: usize = 64;

/// The most statements of a widened sum's body written out 8 times for a
/// whole chunk (more would be C for gcc to compile for little gain).
const UNROLLED_TERM_STATEMENTS: usize = 8;

/// Whether a widened sum's body is a few plain statements (no loop, no
/// vector maths: 8 inlined copies of `pow` made llsq's gradient 5% slower):
/// its whole chunks are unrolled.
fn straight_line(b: &Block) -> bool {
    b.stmts.len() <= UNROLLED_TERM_STATEMENTS
        && b.stmts.iter().all(|s| matches!(s.expr, Expr::Prim(..) | Expr::Atom(_) | Expr::Index { .. }))
        && !super::calls_vector_maths(b)
}

/// Whether `s` reads no lane: a plain statement the group runs once.
fn uniform(s: &Stmt, wide: &FxHashSet<VarId>) -> bool {
    let mut reads_lane = false;
    walk::visit_expr(&s.expr, &mut |u| reads_lane |= wide.contains(&u), &mut |_| {});
    !reads_lane && matches!(s.expr, Expr::Prim(..) | Expr::Atom(_) | Expr::Index { .. })
}

/// The longest map a group computes for all its lanes (on the stack, 8
/// values per element: 16 KiB for f64); a longer one reruns the group.
const SHORT_ROWS: usize = 256;

/// The sums of `stmts`, nested ones included.
fn sum_sizes<'b>(stmts: &'b [Stmt], out: &mut Vec<&'b crate::ir::Size>) {
    for s in stmts {
        if let Expr::ForAcc { size, body, .. } = &s.expr {
            out.push(size);
            sum_sizes(&body.stmts, out);
        }
    }
}

/// The lengths of the maps of `stmts` (not those nested in them).
fn map_sizes(stmts: &[Stmt]) -> Vec<&crate::ir::Size> {
    stmts.iter().filter_map(|s| if let Expr::For { size, .. } = &s.expr { Some(size) } else { None }).collect()
}

/// Whether the per-lane rest of a widened fold is `p' = min p x` (or
/// `max`) for its one parameter `p`, an f64 `x` of the lanes, returning
/// `p'`: the C comparison that replaces (`<`, `>`) and `x`.
fn extremum_step(rest: &Block, pvars: &[VarId], wide: &FxHashSet<VarId>, ty: &FxHashMap<VarId, crate::ir::Type>) -> Option<(&'static str, VarId)> {
    let ([s], [p], [Atom::Var(r)]) = (&rest.stmts[..], pvars, &rest.result[..]) else { return None };
    let Expr::Prim(op, xs) = &s.expr else { return None };
    let cmp = match op {
        crate::ir::Prim::Min => "<",
        crate::ir::Prim::Max => ">",
        _ => return None,
    };
    let [Atom::Var(a), Atom::Var(x)] = &xs[..] else { return None };
    let f64_lanes = ty.get(x).is_some_and(|t| t.rank() == 0 && t.elem == crate::ir::Scalar::F64);
    (a == p && wide.contains(x) && f64_lanes && s.binds.len() == 1 && s.binds[0].var == *r).then_some((cmp, *x))
}

impl Em {
    /// The C condition that every sum of `stmts` is short ([`SHORT`]
    /// terms at most), evaluated before the group; `None` when a length
    /// depends on a value of the region (`bound`, or a variable `stmts`
    /// bind): it could not be tested there.
    fn short_guard(&self, stmts: &[Stmt], bound: &[VarId]) -> Option<String> {
        let block = Block { stmts: stmts.to_vec(), result: vec![] };
        let mut inside = walk::bound_vars_block(&block);
        inside.extend(bound.iter().copied());
        let mut sizes = vec![];
        sum_sizes(stmts, &mut sizes);
        // a sum as long as a map of the group (over its elements, in the
        // lanes: a logsumexp over components) is bounded by the map's own
        // check (`SHORT_ROWS`)
        let maps: Vec<String> = map_sizes(stmts).into_iter().map(|z| self.size(z)).collect();
        let mut conds = vec![];
        for z in sizes {
            let c = self.size(z);
            let names = var_names_in(&c);
            if names.iter().any(|v| bound.contains(v)) {
                return None;
            }
            // a length set inside the group (a map's index: a triangle's
            // rows) is bounded by that map's too
            if names.iter().all(|v| !inside.contains(v)) && !maps.contains(&c) {
                conds.push(format!("{c} <= {SHORT}"));
            }
        }
        Some(if conds.is_empty() { "1".into() } else { conds.join(" && ") })
    }

    /// Lane `l` of a scalar of the widened region: its lane array, or the
    /// value itself for one defined outside (the same in every lane).
    fn lane(&self, a: &Atom, wide: &FxHashSet<VarId>) -> String {
        match a {
            Atom::Var(v) if wide.contains(v) => format!("ard_wv{}[ard_l]", v.0),
            a => self.atom(a),
        }
    }

    /// Iterations `lo..n` of a map `for` (index `ivar`, its scalar results
    /// into the rank-1 row) or of a summing one (outlined, its scalar
    /// results added into the 8 lanes of the accumulator: iteration `g +
    /// l` into lane `l`, `lo` a multiple of 8, as the plain loop does) in
    /// groups of [`W`], then the last iterations one by one. A check that
    /// fails in a group (a checked read, an integer division) jumps to the
    /// group's rerun: its iterations one by one, as the plain loop, so the
    /// first failing one reports its error (the body is pure: nothing was
    /// written yet). `Ok(false)` (nothing emitted) when the body could stop
    /// or has a sum whose length cannot be tested before the group.
    /// `outlined`: in the function of an outermost `for` (`Em::outline`),
    /// whose iterations each name themselves for errors (`ard_it`) and stop
    /// after a failed earlier one: a group does so as its first iteration.
    pub(super) fn widened_map(&mut self, lo: &str, n: &str, ivar: VarId, body: &Block, rows: &[Row], outlined: bool) -> R<bool> {
        if self.narrow {
            return Ok(false);
        }
        match rows {
            [Row::Summed { len, ty, lanes: true, .. }] if outlined && ty.rank() == 0 && len == "1" => {}
            // rows of the group beside at least one scalar: a map whose
            // results are all rows (a convolution's batch over its
            // positions) is widened inside, along the rows
            _ if rows.iter().all(|r| matches!(r, Row::Stacked { ty, .. } if ty.rank() <= 2))
                && rows.iter().any(|r| matches!(r, Row::Stacked { ty, .. } if ty.rank() == 1)) => {}
            _ => return Ok(false),
        }
        let Some(guard) = self.short_guard(&body.stmts, &[ivar]) else { return Ok(false) };
        let (mark, ind, borrowed) = (self.out.len(), self.ind, self.borrowed.clone());
        let k = self.fresh();
        let g = format!("ard_wg{k}");
        let redo = format!("ard_wr{k}");
        let end = format!("ard_we{k}");
        self.open("{");
        self.line(&format!("int64_t {g} = {lo};"));
        self.open("for (;;) {");
        self.line(&format!("int64_t {end} = {n};"));
        self.line(&format!("if ({guard})"));
        self.open(&format!("for (; {g} + {W} <= {n}; {g} += {W}) {{"));
        if outlined {
            self.line(&format!("if (ard_par && ard_failed_before(ctx, {g})) return 0;"));
            self.line(&format!("const int64_t ard_it = ard_par ? {g} : ard_it0; (void)ard_it;"));
        }
        self.poll();
        self.open("{");
        let mut wide = FxHashSet::default();
        wide.insert(ivar);
        self.line(&lanes_decl("int64_t", &format!("ard_wv{}", ivar.0)));
        self.line(&format!("for (int ard_l = 0; ard_l < {W}; ard_l++) ard_wv{}[ard_l] = {g} + ard_l;", ivar.0));
        self.lane_bases.insert(ivar, g.clone());
        let outer_redo = self.redo.replace(redo.clone());
        // lanes of the outlined loop itself read only its own range of
        // rows: no transposed copy of a whole matrix for them
        let outer_rows = std::mem::replace(&mut self.lanes_own_rows, outlined);
        let emitted = self.wblock(body, &mut wide);
        self.lanes_own_rows = outer_rows;
        self.redo = outer_redo;
        let stored = match emitted {
            Ok(true) => self.store_lanes(&g, body, rows, &wide),
            other => other,
        };
        self.lane_rows.clear();
        self.lane_bases.clear();
        if !stored? {
            self.out.truncate(mark);
            self.ind = ind;
            self.borrowed = borrowed;
            return Ok(false);
        }
        self.line("continue;");
        self.close("}");
        if self.out[mark..].contains(&format!("goto {redo};")) {
            self.line(&format!("{redo}: {end} = {g} + {W}; break;"));
        }
        self.close("}");
        // when the group runs unconditionally, loops in the rest are not
        // widened again; a guarded one may leave every iteration to the rest
        let narrow = self.narrow || guard == "1";
        let outer_narrow = std::mem::replace(&mut self.narrow, narrow);
        let rest = self.one_by_one(&g, &end, ivar, body, rows, outlined);
        self.narrow = outer_narrow;
        rest?;
        self.line(&format!("if ({end} == {n}) break;"));
        self.line(&format!("{g} = {end};"));
        self.close("}");
        self.close("}");
        Ok(true)
    }

    /// A group's results into its rows: a scalar into element `g + l` of
    /// its stacked row or into lane `l` of its sum, a map of the group
    /// (`ard_wvR[e][l]`) into row `g + l`. False (nothing to emit) for
    /// any other result.
    fn store_lanes(&mut self, g: &str, body: &Block, rows: &[Row], wide: &FxHashSet<VarId>) -> R<bool> {
        for (r, row) in body.result.iter().zip(rows) {
            let lanes = match r {
                Atom::Var(v) => self.lane_rows.get(v).cloned(),
                _ => None,
            };
            let x = self.lane(r, wide);
            match (row, lanes) {
                (Row::Stacked { out, ty, .. }, None) if ty.rank() == 1 => {
                    let p = self.elem_ptr(out, ty.elem);
                    self.line(&format!("for (int ard_l = 0; ard_l < {W}; ard_l++) {p}[{g} + ard_l] = {x};"));
                }
                (Row::Stacked { out, len, ty }, Some(n)) if ty.rank() == 2 => {
                    let p = self.elem_ptr(out, ty.elem);
                    let Atom::Var(v) = r else { unreachable!("a lane row is a variable") };
                    self.line(&format!(
                        "for (int64_t ard_e = 0; ard_e < {n}; ard_e++) for (int ard_l = 0; ard_l < {W}; ard_l++) {p}[({g} + ard_l) * ({len}) + ard_e] = ard_wv{}[ard_e][ard_l];",
                        v.0
                    ));
                }
                (Row::Summed { ptr, ty, .. }, None) => {
                    let sum = Self::op_expr(&ReduceOp::Add, ty.elem, &format!("{ptr}[ard_l]"), &x)?;
                    self.line(&format!("for (int ard_l = 0; ard_l < {W}; ard_l++) {ptr}[ard_l] = {sum};"));
                }
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    /// [`Em::widened_map`]'s iterations `lo..hi` one at a time: those
    /// after the last group, or a group rerun (`hi = lo + 8`) after a check
    /// failed in it, so that the first failing iteration reports (or a map
    /// was too long for the lanes: then the groups go on after it).
    fn one_by_one(&mut self, lo: &str, hi: &str, ivar: VarId, body: &Block, rows: &[Row], outlined: bool) -> R<()> {
        self.polled_loop("ard_i", lo, hi, "ard_it", false, |em| {
            if outlined {
                em.line("if (ard_par && ard_failed_before(ctx, ard_i)) return 0;");
                em.line("const int64_t ard_it = ard_par ? ard_i : ard_it0; (void)ard_it;");
            }
            em.for_body(ivar, body, rows)
        })
    }

    /// A counted `loop` with scalar parameters (`minimum (for j. sum ...)`,
    /// a fold) whose body computes sums that do not depend on the
    /// parameters: per group of [`W`] iterations those statements run for
    /// all lanes at once, then the rest of the body (what reads the
    /// parameters) runs lane by lane in order, as the loop would. The last
    /// iterations run as before. `Ok(false)`: nothing emitted.
    pub(super) fn widened_loop(&mut self, s: &Stmt, params: &[crate::ir::Binder], init: &[Atom], ivar: VarId, n: &Atom, body: &Block) -> R<bool> {
        if self.narrow || params.iter().any(|p| p.ty.rank() > 0) || s.binds.len() != params.len() {
            return Ok(false);
        }
        let body = fold_views(body);
        let mut dep: FxHashSet<VarId> = params.iter().map(|p| p.var).collect();
        let (mut pre, mut rest) = (vec![], vec![]);
        // from the first statement that reads a parameter on, everything
        // stays in the per-lane rest: a sum hoisted above it could report
        // its error (a negative length) before one of that statement
        for t in &body.stmts {
            let mut uses = !rest.is_empty();
            walk::visit_expr(&t.expr, &mut |u| uses |= dep.contains(&u), &mut |_| {});
            if uses {
                dep.extend(t.binds.iter().map(|x| x.var));
                rest.push(t.clone());
            } else {
                pre.push(t.clone());
            }
        }
        if !widenable_stmts(&pre) {
            return Ok(false);
        }
        let Some(guard) = self.short_guard(&pre, &[ivar]) else { return Ok(false) };
        let (mark, ind, borrowed) = (self.out.len(), self.ind, self.borrowed.clone());
        let k = self.fresh();
        for (p, a) in params.iter().zip(init) {
            self.decl(p.var)?;
            let src = self.atom(a);
            self.line(&format!("{} = {src};", self.v(p.var)));
        }
        let pvars: Vec<VarId> = params.iter().map(|p| p.var).collect();
        let g = format!("ard_wg{k}");
        let nn = self.int(n);
        self.open("{");
        self.line(&format!("int64_t {g} = 0, ard_wn{k} = {nn};"));
        let pre_bound: FxHashSet<VarId> = pre.iter().flat_map(|t| t.binds.iter().map(|b| b.var)).collect();
        let rest_block = Block { stmts: rest.clone(), result: body.result.clone() };
        let extremum = extremum_step(&rest_block, &pvars, &pre_bound, &self.ty);
        if extremum.is_some() {
            let pv = self.v(params[0].var);
            self.line(&format!(
                "ard_x8d ard_em{k} = {{{pv}, {pv}, {pv}, {pv}, {pv}, {pv}, {pv}, {pv}}}; ard_x8l ard_ei{k} = {{-8, -8, -8, -8, -8, -8, -8, -8}};"
            ));
        }
        self.line(&format!("if ({guard})"));
        self.open(&format!("for (; {g} + {W} <= ard_wn{k}; {g} += {W}) {{"));
        self.poll();
        let mut wide = FxHashSet::default();
        wide.insert(ivar);
        self.line(&lanes_decl("int64_t", &format!("ard_wv{}", ivar.0)));
        self.line(&format!("for (int ard_l = 0; ard_l < {W}; ard_l++) ard_wv{}[ard_l] = {g} + ard_l;", ivar.0));
        self.lane_bases.insert(ivar, g.clone());
        if !self.wblock(&Block { stmts: pre, result: vec![] }, &mut wide)? {
            self.out.truncate(mark);
            self.ind = ind;
            self.borrowed = borrowed;
            return Ok(false);
        }
        let rest = rest_block;
        if let Some((cmp, x)) = extremum {
            return self.extremum_fold(k, s, &params[0], cmp, x, ivar, &g, &body);
        }
        self.open(&format!("for (int ard_l = 0; ard_l < {W}; ard_l++) {{"));
        let mut used = vec![];
        for t in &rest.stmts {
            walk::visit_expr(
                &t.expr,
                &mut |u| {
                    if wide.contains(&u) && !used.contains(&u) {
                        used.push(u)
                    }
                },
                &mut |_| {},
            );
        }
        for a in &rest.result {
            if let Atom::Var(u) = a
                && wide.contains(u)
                && !used.contains(u)
            {
                used.push(*u);
            }
        }
        for u in &used {
            let t = self.ty.get(u).map_or("int64_t", |t| ctype(t.elem));
            self.line(&format!("const {t} {} = ard_wv{}[ard_l]; (void){};", self.v(*u), u.0, self.v(*u)));
        }
        self.loop_step(k, params, &pvars, &rest)?;
        self.close("}");
        self.close("}");
        self.fold_tail(k, s, params, ivar, &g, &body)
    }

    /// The end of [`Em::widened_loop`] after its groups: the last
    /// iterations one at a time, then the loop's results.
    fn fold_tail(&mut self, k: usize, s: &Stmt, params: &[crate::ir::Binder], ivar: VarId, g: &str, body: &Block) -> R<bool> {
        self.open(&format!("for (; {g} < ard_wn{k}; {g}++) {{"));
        let iv = self.v(ivar);
        self.line(&format!("const int64_t {iv} = {g}; (void){iv};"));
        self.poll();
        let pvars: Vec<VarId> = params.iter().map(|p| p.var).collect();
        self.loop_step(k, params, &pvars, body)?;
        self.close("}");
        self.close("}");
        for (b, p) in s.binds.iter().zip(params) {
            self.line(&format!("{} = {};", self.v(b.var), self.v(p.var)));
        }
        Ok(true)
    }

    /// The rest of [`Em::widened_loop`] for a fold `p = min p x` (`max`) of
    /// f64 lane values `x`: each lane folds its own iterations into a
    /// vector (the value, and the group it came from: `-8` for the start
    /// value; lane `l` of group `g` is iteration `g + l`), with the fold's own rule (a NaN stays; a NaN or a
    /// strictly smaller value replaces), and after the groups the lanes
    /// are combined into what the fold in order gives: the first NaN, else
    /// the first iteration equal to the extremum (only zeros of both signs
    /// are equal with other bits). The 8 compares per group in order had
    /// taken a third of k-means' cost.
    #[allow(clippy::too_many_arguments)]
    fn extremum_fold(&mut self, k: usize, s: &Stmt, p: &crate::ir::Binder, cmp: &str, x: VarId, ivar: VarId, g: &str, body: &Block) -> R<bool> {
        // the lanes' vectors `ard_emK` (values) and `ard_eiK` (iterations)
        // were started from the parameter before the groups
        let pv = self.v(p.var);
        self.line(&format!("ard_x8l ard_et{k} = (ard_em{k} == ard_em{k}) & ((ard_wv{x} != ard_wv{x}) | (ard_wv{x} {cmp} ard_em{k}));", x = x.0));
        self.line(&format!("ard_em{k} = (ard_x8d)(((ard_x8l)ard_wv{x} & ard_et{k}) | ((ard_x8l)ard_em{k} & ~ard_et{k}));", x = x.0));
        // the group's first iteration, lane `l` adds `l` (a broadcast, not
        // the lanes' index vector, which gcc then had to build per group)
        self.line(&format!("ard_ei{k} = (((ard_x8l){{0}} + {g}) & ard_et{k}) | (ard_ei{k} & ~ard_et{k});"));
        self.close("}");
        // the lanes in order: a NaN first, else the extremum, the earliest
        self.open("{");
        self.line("int ard_b = 0;");
        self.open(&format!("for (int ard_l = 1; ard_l < {W}; ard_l++) {{"));
        self.line(&format!("const double ard_ml = ard_em{k}[ard_l], ard_mb = ard_em{k}[ard_b];"));
        self.line(&format!("const int ard_first = ard_ei{k}[ard_l] + ard_l < ard_ei{k}[ard_b] + ard_b;"));
        self.line(&format!(
            "if (isnan(ard_mb) ? isnan(ard_ml) && ard_first : isnan(ard_ml) || ard_ml {cmp} ard_mb || (ard_ml == ard_mb && ard_first)) ard_b = ard_l;"
        ));
        self.close("}");
        self.line(&format!("{pv} = ard_em{k}[ard_b];"));
        self.close("}");
        self.fold_tail(k, s, std::slice::from_ref(p), ivar, g, body)
    }

    /// One iteration of a loop's body: its results become the parameters.
    fn loop_step(&mut self, k: usize, params: &[crate::ir::Binder], pvars: &[VarId], body: &Block) -> R<()> {
        let mut temps = vec![];
        for (j, p) in params.iter().enumerate() {
            let tn = format!("ard_t{k}_{j}");
            self.decl_named(&tn, &p.ty);
            temps.push(tn);
        }
        self.open("{");
        self.block(body, pvars, &temps)?;
        self.close("}");
        for (p, tn) in params.iter().zip(&temps) {
            self.line(&format!("{} = {tn};", self.v(p.var)));
        }
        Ok(())
    }

    /// The statements of `b` for all lanes: runs of plain statements as one
    /// loop over the lanes (a statement that checks something in a loop of
    /// its own), sums by [`Em::widened_sum`], maxima and minima by
    /// [`Em::widened_extremum`]. Every value the block binds is added to
    /// `wide` (a lane array). False when a nested sum's length differs
    /// between lanes or a statement cannot be emitted for lanes.
    fn wblock(&mut self, b: &Block, wide: &mut FxHashSet<VarId>) -> R<bool> {
        let mut i = 0;
        while i < b.stmts.len() {
            let s = &b.stmts[i];
            let done = match &s.expr {
                Expr::ForAcc { ivar, size, body, .. } => self.widened_sum(s, *ivar, size, body, wide)?,
                Expr::Reduce { op, ne, arrs } => self.widened_extremum(s, op, &ne[0], &arrs[0], wide)?,
                Expr::For { ivar, size, body } => self.widened_row(s, *ivar, size, body, wide)?,
                _ if uniform(s, wide) => self.uniform_stmt(s)?,
                _ if self.reads_lane_row(s) => self.lane_row_read(s, wide)?,
                _ if self.contiguous_read(s, wide).is_some() => self.vector_read(s, wide)?,
                _ if self.column_read(s, wide).is_some() => self.transposed_read(s, wide)?,
                _ if checks(s) => self.lane_run(std::slice::from_ref(s), wide)?,
                _ => {
                    let j = (i + 1..b.stmts.len()).find(|&j| self.emitted_apart(&b.stmts[j], wide)).unwrap_or(b.stmts.len());
                    let ok = self.lane_run(&b.stmts[i..j], wide)?;
                    i = j - 1;
                    ok
                }
            };
            if !done {
                return Ok(false);
            }
            i += 1;
        }
        Ok(true)
    }

    /// Whether `s` reads a map the group computes (`ard_wvR[e][lane]`).
    fn reads_lane_row(&self, s: &Stmt) -> bool {
        matches!(&s.expr, Expr::Index { arr: Atom::Var(a), .. } if self.lane_rows.contains_key(a))
    }

    /// Whether [`Em::wblock`] emits `s` on its own, not in a run of plain
    /// statements sharing one lane loop.
    fn emitted_apart(&self, s: &Stmt, wide: &FxHashSet<VarId>) -> bool {
        matches!(s.expr, Expr::ForAcc { .. } | Expr::Reduce { .. } | Expr::For { .. })
            || checks(s)
            || uniform(s, wide)
            || self.reads_lane_row(s)
            || self.contiguous_read(s, wide).is_some()
            || self.column_read(s, wide).is_some()
    }

    /// For an unchecked read `m[r, c]` of an `f64` matrix parameter of the
    /// outlined loop body (the same for all its iterations) whose row `r`
    /// is `base + l` in lane `l` and whose column `c` is shared (k-means'
    /// centres `c[j, a]`, lanes `j`): the C of `m`, `base` and `c`. The
    /// lanes walk down a column, 8 rows apart in memory.
    fn column_read(&self, s: &Stmt, wide: &FxHashSet<VarId>) -> Option<(String, String, String)> {
        let Expr::Index { arr: arr @ Atom::Var(m), idx, checks } = &s.expr else { return None };
        let t = self.ty.get(m)?;
        let [r, c] = &idx[..] else { return None };
        let parameter = !self.lanes_own_rows && self.outlined_bound.as_ref().is_some_and(|b| !b.contains(m));
        let shared = !matches!(c, Atom::Var(v) if wide.contains(v));
        if !parameter || !shared || wide.contains(m) || t.rank() != 2 || t.elem != crate::ir::Scalar::F64 || checks.iter().any(Option::is_some) {
            return None;
        }
        Some((self.atom(arr), self.lane_base(r, wide)?, self.int(c)))
    }

    /// [`Em::column_read`]'s read: one vector load from the transposed
    /// copy the outlined function makes before its iterations
    /// (`transposing_wrapper`), or lane by lane where it made none.
    fn transposed_read(&mut self, s: &Stmt, wide: &mut FxHashSet<VarId>) -> R<bool> {
        let Some((m, base, c)) = self.column_read(s, wide) else { return Ok(false) };
        let copy = match self.transposed.iter().find(|(_, x)| *x == m) {
            Some((p, _)) => p.clone(),
            None => {
                let p = format!("ard_hT{}", self.fresh());
                self.transposed.push((p.clone(), m.clone()));
                p
            }
        };
        let v = s.binds[0].var.0;
        self.line(&format!("ard_x8d ard_wv{v};"));
        self.line(&format!("if ({copy}) memcpy(&ard_wv{v}, {copy} + ({c}) * {m}.d[0] + ({base}), sizeof ard_wv{v});"));
        self.line(&format!(
            "else for (int ard_l = 0; ard_l < {W}; ard_l++) ard_wv{v}[ard_l] = ((const double *){m}.p)[(({base}) + ard_l) * {m}.d[1] + ({c})];"
        ));
        wide.insert(s.binds[0].var);
        Ok(true)
    }

    /// The base of the lanes of `a` if lane `l` of it holds `base + l`.
    fn lane_base(&self, a: &Atom, wide: &FxHashSet<VarId>) -> Option<String> {
        match a {
            Atom::Var(v) if wide.contains(v) => self.lane_bases.get(v).cloned(),
            _ => None,
        }
    }

    /// Records that `x = a ± b` holds `base ± b` in lane `l` when `a` holds
    /// `base + l` and `b` is the same in every lane (a window's `t + o`).
    fn note_lane_base(&mut self, s: &Stmt, wide: &FxHashSet<VarId>) {
        let (Expr::Prim(p, args), [x]) = (&s.expr, &s.binds[..]) else { return };
        if x.ty.rank() != 0 || x.ty.elem != crate::ir::Scalar::I64 || args.len() != 2 {
            return;
        }
        let shared = |a: &Atom| !matches!(a, Atom::Var(v) if wide.contains(v));
        let base = match (p, self.lane_base(&args[0], wide), self.lane_base(&args[1], wide)) {
            (crate::ir::Prim::Add, Some(b), None) if shared(&args[1]) => format!("({b} + {})", self.int(&args[1])),
            (crate::ir::Prim::Add, None, Some(b)) if shared(&args[0]) => format!("({} + {b})", self.int(&args[0])),
            (crate::ir::Prim::Sub, Some(b), None) if shared(&args[1]) => format!("({b} - {})", self.int(&args[1])),
            _ => return,
        };
        self.lane_bases.insert(x.var, base);
    }

    /// For an unchecked read of a whole element of an array the group
    /// shares, at shared indices but the last, which is `base + l` in lane
    /// `l`: the C of the array and of that base. The lanes are then 8
    /// consecutive elements, one vector load (gcc did not see that through
    /// the lane array of indices, and loaded them one by one).
    fn contiguous_read(&self, s: &Stmt, wide: &FxHashSet<VarId>) -> Option<(String, String)> {
        let Expr::Index { arr: arr @ Atom::Var(a), idx, checks } = &s.expr else { return None };
        let (last, rest) = idx.split_last()?;
        let t = self.ty.get(a)?;
        let shared = |i: &Atom| !matches!(i, Atom::Var(v) if wide.contains(v));
        if wide.contains(a) || t.rank() != idx.len() || checks.iter().any(Option::is_some) || !rest.iter().all(shared) {
            return None;
        }
        lanes_type(ctype(t.elem))?;
        Some((self.atom(arr), self.lane_base(last, wide)?))
    }

    /// [`Em::contiguous_read`]'s read: 8 consecutive elements into the
    /// lane vector.
    fn vector_read(&mut self, s: &Stmt, wide: &mut FxHashSet<VarId>) -> R<bool> {
        let (Some((x, base)), Expr::Index { arr, idx, .. }) = (self.contiguous_read(s, wide), &s.expr) else { return Ok(false) };
        let t = self.atom_ty(arr);
        let mut off = String::new();
        for (j, i) in idx.iter().enumerate() {
            let iv = if j + 1 == idx.len() { base.clone() } else { self.int(i) };
            let stride = super::axis_len(&x, &t, j);
            off = if j == 0 { format!("({iv})") } else { format!("({off}) * {stride} + ({iv})") };
        }
        let v = s.binds[0].var;
        let p = self.elem_ptr(&x, t.elem);
        self.line(&lanes_decl(ctype(t.elem), &format!("ard_wv{}", v.0)));
        self.line(&format!("memcpy(&ard_wv{}, {p} + {off}, sizeof ard_wv{});", v.0, v.0));
        wide.insert(v);
        Ok(true)
    }

    /// `maximum r` or `minimum r` (a float fold, `ne` first) for every
    /// lane, each by rt.h's 8-lane fold as the plain code calls it (the
    /// ordered fold's bits); a row longer than one fold's chunk reruns the
    /// group.
    fn widened_extremum(&mut self, s: &Stmt, op: &ReduceOp, ne: &Atom, arr: &Atom, wide: &mut FxHashSet<VarId>) -> R<bool> {
        let (x, t) = (s.binds[0].var, s.binds[0].ty.elem);
        if let Atom::Var(a) = arr
            && let Some(n) = self.lane_rows.get(a).cloned()
        {
            // a map of the group: the ordered fold, lane by lane
            let (ct, e) = (ctype(t), self.lane(ne, wide));
            let step = Self::op_expr(op, t, &format!("ard_wv{}[ard_l]", x.0), &format!("ard_wv{}[ard_e][ard_l]", a.0))?;
            self.line(&lanes_decl(ct, &format!("ard_wv{}", x.0)));
            self.line(&format!("for (int ard_l = 0; ard_l < {W}; ard_l++) ard_wv{}[ard_l] = {e};", x.0));
            self.line(&format!("for (int64_t ard_e = 0; ard_e < {n}; ard_e++) for (int ard_l = 0; ard_l < {W}; ard_l++) ard_wv{}[ard_l] = {step};", x.0));
            wide.insert(x);
            return Ok(true);
        }
        let (Some(fold), Some(redo)) = (Self::lane_extremum(op, t), self.redo.clone()) else { return Ok(false) };
        let (ct, a, e) = (ctype(t), self.lane(arr, wide), self.lane(ne, wide));
        self.line(&lanes_decl(ct, &format!("ard_wv{}", x.0)));
        self.open(&format!("for (int ard_l = 0; ard_l < {W}; ard_l++) {{"));
        self.line(&format!("const ard_arr ard_r = {a};"));
        self.line(&format!("if (ard_r.d[0] > ARD_CHUNK) goto {redo};"));
        self.line(&format!("ard_wv{}[ard_l] = {fold}((const {ct} *)ard_r.p, 0, ard_r.d[0], {e});", x.0));
        self.close("}");
        wide.insert(x);
        Ok(true)
    }

    /// A statement that reads no lane (index arithmetic of an inner
    /// loop, a row of an array by a shared index, a read at a shared
    /// position): once for the group, the same value in every lane.
    fn uniform_stmt(&mut self, s: &Stmt) -> R<bool> {
        let start = self.out.len();
        self.owned_stack.push(FxHashSet::default());
        for x in &s.binds {
            self.decl(x.var)?;
        }
        let emitted = self.stmt(s, &[]);
        self.owned_stack.pop();
        emitted?;
        Ok(self.lanes_can_run(start))
    }

    /// `index r[e]` of a map the group computes (`ard_wvR[e][lane]`),
    /// checked against its length if the read is.
    fn lane_row_read(&mut self, s: &Stmt, wide: &mut FxHashSet<VarId>) -> R<bool> {
        let Expr::Index { arr: Atom::Var(a), idx, checks } = &s.expr else { return Ok(false) };
        let (Some(n), [i]) = (self.lane_rows.get(a).cloned(), &idx[..]) else { return Ok(false) };
        let x = &s.binds[0];
        let e = self.lane(i, wide);
        self.line(&lanes_decl(ctype(x.ty.elem), &format!("ard_wv{}", x.var.0)));
        self.open(&format!("for (int ard_l = 0; ard_l < {W}; ard_l++) {{"));
        self.line(&format!("const int64_t ard_e = {e};"));
        if checks.iter().any(Option::is_some) {
            let Some(redo) = self.redo.clone() else { return Ok(false) };
            self.line(&format!("if ((uint64_t)ard_e >= (uint64_t)({n})) goto {redo};"));
        }
        self.line(&format!("ard_wv{}[ard_l] = ard_wv{}[ard_e][ard_l];", x.var.0, a.0));
        self.close("}");
        wide.insert(x.var);
        Ok(true)
    }

    /// A map (`for j < n`, scalar results) inside the group, for all lanes:
    /// `ard_wvX[n][8]` on the stack (a map longer than [`SHORT_ROWS`] or of
    /// negative length reruns the group), its body widened per element.
    fn widened_row(&mut self, s: &Stmt, ivar: VarId, size: &crate::ir::Size, body: &Block, wide: &mut FxHashSet<VarId>) -> R<bool> {
        let x = &s.binds[0];
        let n = self.size(size);
        let Some(redo) = self.redo.clone() else { return Ok(false) };
        if var_names_in(&n).iter().any(|v| wide.contains(v)) || !x.ty.elem.is_float() && !x.ty.elem.is_int() {
            return Ok(false);
        }
        let k = self.fresh();
        self.line(&format!("const int64_t ard_wn{k} = {n};"));
        self.line(&format!("if (ard_wn{k} < 0 || ard_wn{k} > {SHORT_ROWS}) goto {redo};"));
        // (a VLA of no elements is undefined behaviour: one at least)
        self.line(&format!("{} ard_wv{}[ard_wn{k} > 0 ? ard_wn{k} : 1][{W}];", ctype(x.ty.elem), x.var.0));
        self.open(&format!("for (int64_t ard_j{k} = 0; ard_j{k} < ard_wn{k}; ard_j{k}++) {{"));
        self.line(&format!("const int64_t {} = ard_j{k}; (void){};", self.v(ivar), self.v(ivar)));
        let mut inner = wide.clone();
        if !self.wblock(body, &mut inner)? {
            return Ok(false);
        }
        let r = self.lane(&body.result[0], &inner);
        self.line(&format!("for (int ard_l = 0; ard_l < {W}; ard_l++) ard_wv{}[ard_j{k}][ard_l] = {r};", x.var.0));
        self.close("}");
        self.lane_rows.insert(x.var, format!("ard_wn{k}"));
        wide.insert(x.var);
        Ok(true)
    }

    /// Whether the C emitted since `start` may run for lanes: it stops or
    /// fails only by rerunning the group, and takes no reference.
    fn lanes_can_run(&self, start: usize) -> bool {
        let c = &self.out[start..];
        let redo = self.redo.as_ref().map(|r| format!("goto {r};"));
        let other_jump = c.lines().any(|l| l.contains("goto ") && redo.as_ref().is_none_or(|r| l.trim() != r));
        !(other_jump || c.contains("ard_release") || c.contains("ard_retain") || c.contains("ARD_STOPPING"))
    }

    /// Plain statements (scalars, and rows as `ard_arr` views) as one loop
    /// over the lanes: lane arrays read at the start, each result stored to
    /// its lane array at the end. False when the C of a statement can stop
    /// or fail other than by rerunning the group, or takes a reference.
    fn lane_run(&mut self, stmts: &[Stmt], wide: &mut FxHashSet<VarId>) -> R<bool> {
        let start = self.out.len();
        let mut used: Vec<VarId> = vec![];
        let mut bound: FxHashSet<VarId> = FxHashSet::default();
        for s in stmts {
            walk::visit_expr(
                &s.expr,
                &mut |u| {
                    if wide.contains(&u) && !bound.contains(&u) && !used.contains(&u) {
                        used.push(u);
                    }
                },
                &mut |_| {},
            );
            bound.extend(s.binds.iter().map(|x| x.var));
        }
        let lane_type = |t: &crate::ir::Type| if t.rank() > 0 { "ard_arr" } else { ctype(t.elem) };
        for s in stmts {
            for x in &s.binds {
                self.line(&lanes_decl(lane_type(&x.ty), &format!("ard_wv{}", x.var.0)));
            }
        }
        self.open(&format!("for (int ard_l = 0; ard_l < {W}; ard_l++) {{"));
        for u in &used {
            let t = self.ty.get(u).map_or("int64_t", lane_type);
            self.line(&format!("const {t} {} = ard_wv{}[ard_l];", self.v(*u), u.0));
        }
        // the group owns no array: a row view borrows the array (bound
        // outside the group, alive throughout it) instead of referencing it
        self.owned_stack.push(FxHashSet::default());
        for s in stmts {
            for x in &s.binds {
                self.decl(x.var)?;
            }
            let emitted = self.stmt(s, &[]);
            if emitted.is_err() {
                self.owned_stack.pop();
            }
            emitted?;
            for x in &s.binds {
                self.line(&format!("ard_wv{0}[ard_l] = {1};", x.var.0, self.v(x.var)));
            }
        }
        self.owned_stack.pop();
        self.close("}");
        wide.extend(bound);
        for s in stmts {
            self.note_lane_base(s, wide);
        }
        Ok(self.lanes_can_run(start))
    }

    /// One term of a widened sum for all lanes, added into the lane
    /// vector `acc` (GCC vector arithmetic, a shared term broadcast: each
    /// lane's add is the lane loop's).
    fn sum_term(&mut self, body: &Block, wide: &FxHashSet<VarId>, acc: &str, t: crate::ir::Scalar) -> R<bool> {
        let mut inner = wide.clone();
        if !self.wblock(body, &mut inner)? {
            return Ok(false);
        }
        let r = match &body.result[0] {
            Atom::Var(v) if inner.contains(v) => format!("ard_wv{}", v.0),
            a => self.atom(a),
        };
        self.line(&format!("{acc} = {};", Self::op_expr(&ReduceOp::Add, t, acc, &r)?));
        Ok(true)
    }

    /// A float sum for every lane, in the fixed order: its length `size`
    /// (the same in every lane: false otherwise) cut into chunks; in a
    /// chunk, term `i` goes to accumulator `i % 8` of every lane; the 8 are
    /// combined pairwise, and the chunks' results are combined pairwise as
    /// they come (a stack of partial trees: chunk `c` completes the trees
    /// of the trailing zero bits of `c + 1`; at the end the stack is folded
    /// from the top, which is the tree over all chunks); then `0 + T`.
    fn widened_sum(&mut self, s: &Stmt, ivar: VarId, size: &crate::ir::Size, body: &Block, wide: &mut FxHashSet<VarId>) -> R<bool> {
        let x = s.binds[0].var;
        let t = s.binds[0].ty.elem;
        let ct = ctype(t);
        let n = self.size(size);
        if var_names_in(&n).iter().any(|v| wide.contains(v)) {
            return Ok(false);
        }
        let k = self.fresh();
        let add = |a: &str, b: &str| Self::op_expr(&ReduceOp::Add, t, a, b);
        self.line(&lanes_decl(ct, &format!("ard_wv{}", x.0)));
        self.open("{");
        self.line(&format!("const int64_t ard_n{k} = {n};"));
        self.open(&format!("if (ard_n{k} < 0)"));
        self.fail("negative size %lld in a `for`%s", &[format!("(long long)ard_n{k}"), at_str(&s.loc)]);
        self.ind -= 1;
        self.line(&format!("const int64_t ard_cl{k} = ard_rchunk(ard_n{k}), ard_nc{k} = ard_n{k} > 0 ? ard_nchunks(ard_n{k}, ard_cl{k}) : 0;"));
        // the stack's top in a variable of its own (a register): a sum of
        // one chunk pushes, folds and reads it without a store and reload
        // of a vector (its forwarding stall was an eighth of conv1d)
        self.line(&format!("{} {} int ard_sp{k} = 0;", lanes_decl(ct, &format!("ard_st{k}[64]")), lanes_decl(ct, &format!("ard_top{k}"))));
        self.open(&format!("for (int64_t ard_c{k} = 0; ard_c{k} < ard_nc{k}; ard_c{k}++) {{"));
        let (fail, at) = (self.fail.clone(), self.at.clone());
        self.line(&format!("if (ard_c{k} > 0 && ARD_STOPPING(ctx)) {{ ard_stopped(ctx, ard_it, {at}); goto {fail}; }}"));
        self.line(&format!("const int64_t ard_lo{k} = ard_c{k} * ard_cl{k}, ard_hi{k} = ard_n{k} - ard_lo{k} > ard_cl{k} ? ard_lo{k} + ard_cl{k} : ard_n{k};"));
        self.line(&lanes_decl(ct, &format!("ard_ln{k}[8]")));
        self.line(&format!("for (int ard_e = 0; ard_e < 8; ard_e++) for (int ard_l = 0; ard_l < {W}; ard_l++) ard_ln{k}[ard_e][ard_l] = -0.0;"));
        if straight_line(body) {
            // a chunk of at most 8 terms (chunks start at multiples of 8,
            // so term `lo + e` goes to accumulator `e`): the loop unrolled,
            // so that each term's accumulator is a constant one and stays
            // in a register (a window of 5 terms: conv1d 2.55 -> 1.60 ms).
            // Whole chunks apart: the exit test made k-means' 20% slower;
            // the short form first (k-means 8% slower the other way round,
            // layout); 7 explicitly guarded copies instead of the loop with
            // an exit were 1.5x slower (gcc kept the lanes in memory)
            for (test, exit) in [("< 8", true), ("== 8", false)] {
                self.open(&format!("if (ard_hi{k} - ard_lo{k} {test}) {{"));
                self.line("#pragma GCC unroll 8");
                self.open(&format!("for (int ard_e{k} = 0; ard_e{k} < 8; ard_e{k}++) {{"));
                if exit {
                    self.line(&format!("if (ard_e{k} == ard_hi{k} - ard_lo{k}) break;"));
                }
                self.line(&format!("const int64_t {} = ard_lo{k} + ard_e{k}; (void){};", self.v(ivar), self.v(ivar)));
                if !self.sum_term(body, wide, &format!("ard_ln{k}[ard_e{k}]"), t)? {
                    return Ok(false);
                }
                self.close("}");
                self.close("} else");
            }
        }
        self.open(&format!("for (int64_t ard_i{k} = ard_lo{k}; ard_i{k} < ard_hi{k}; ard_i{k}++) {{"));
        self.line(&format!("const int64_t {} = ard_i{k}; (void){};", self.v(ivar), self.v(ivar)));
        if !self.sum_term(body, wide, &format!("ard_ln{k}[ard_i{k} & 7]"), t)? {
            return Ok(false);
        }
        self.close("}");
        let t8 = Self::tree8_of(t, &|e| format!("ard_ln{k}[{e}]"))?;
        self.line(&format!("if (ard_sp{k} > 0) ard_st{k}[ard_sp{k} - 1] = ard_top{k};"));
        self.line(&format!("ard_top{k} = {t8};"));
        self.line(&format!("ard_sp{k}++;"));
        let merge = add(&format!("ard_st{k}[ard_sp{k} - 2]"), &format!("ard_top{k}"))?;
        self.open(&format!("for (int64_t ard_b = ard_c{k} + 1; (ard_b & 1) == 0; ard_b >>= 1) {{"));
        self.line(&format!("ard_top{k} = {merge};"));
        self.line(&format!("ard_sp{k}--;"));
        self.close("}");
        self.close("}");
        self.open(&format!("for (; ard_sp{k} > 1; ard_sp{k}--) {{"));
        self.line(&format!("ard_top{k} = {merge};"));
        self.close("}");
        let fin = add(&format!("({ct})0"), &format!("ard_top{k}"))?;
        self.line(&format!("ard_wv{} = ard_nc{k} > 0 ? {fin} : ({}){{0}};", x.0, lanes_type(ct).unwrap_or(ct)));
        self.close("}");
        wide.insert(x);
        Ok(true)
    }
}
