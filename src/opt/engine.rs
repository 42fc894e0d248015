//! Applying a strategy to a function body: the traversals of paper 002 over
//! arden's tree of blocks and statements, with the scope every rule sees,
//! exact use counts kept up to date after each rewrite, fuel, and rule
//! counts for the report.

use super::rule::{BlockInfo, Ctx, Rule, Scope, State};
use super::strategy::{Schedule, Strategy};
use crate::ir::pass::Invalid;
use crate::ir::walk::stmt_uses;
use crate::ir::{Atom, Block, Expr, Size, Stmt, VarId, walk};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// The schedule ran out of fuel (a step budget): it probably loops.
#[derive(Debug)]
pub struct OutOfFuel;

/// Why [`Engine::run`] stopped before the end of the schedule.
#[derive(Debug)]
pub enum Stopped {
    OutOfFuel,
    /// the check after a phase rejected its output
    Invalid(Invalid),
}

impl From<OutOfFuel> for Stopped {
    fn from(_: OutOfFuel) -> Stopped {
        Stopped::OutOfFuel
    }
}

/// A check of the body after a phase: the phase's number (from 1), the
/// phase, the body and the function's name table.
pub type AfterPhase<'a> = dyn FnMut(usize, &Strategy, &mut Block, &mut Vec<String>) -> Result<(), Invalid> + 'a;

/// The phases of a strategy: the operands of its outermost `;`s
/// (`a ; b ; c` is `a ; (b ; c)`: phases `a`, `b`, `c`).
pub fn phases(main: &Strategy) -> Vec<&Strategy> {
    let mut out = vec![];
    let mut rest = main;
    while let Strategy::Seq(a, c) = rest {
        out.push(a.as_ref());
        rest = c;
    }
    out.push(rest);
    out
}

type R<T> = Result<T, OutOfFuel>;

/// Where a statement node is after a strategy succeeded on it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum At {
    /// at this index of its block (earlier statements may have been inserted)
    Index(usize),
    /// deleted
    Gone,
}

/// The lookup tables of the statements before a position in one block,
/// extended lazily as a walk moves forward.
#[derive(Default)]
struct Index {
    map: FxHashMap<VarId, usize>,
    avail: FxHashMap<String, usize>,
    done: usize,
}

impl Index {
    fn extend(&mut self, stmts: &[Stmt], k: usize, want_cse: bool) {
        for (j, s) in stmts.iter().enumerate().take(k).skip(self.done) {
            for b in &s.binds {
                self.map.insert(b.var, j);
            }
            if want_cse && let Some(key) = cse_key(s) {
                self.avail.entry(key).or_insert(j);
            }
            // a `for` that has run had a size >= 0 (`Ctx::size_ran`)
            if let Expr::For { size, .. } | Expr::ForAcc { size, .. } = &s.expr {
                self.avail.entry(ran_key(size)).or_insert(j);
            }
        }
        self.done = self.done.max(k);
    }

    fn reset(&mut self) {
        *self = Index::default();
    }
}

/// The key under which `Index` records that a `for` of size `size` ran
/// before a position (no `cse_key` starts with `#`).
pub fn ran_key(size: &crate::ir::Size) -> String {
    format!("#ran {size:?}")
}

/// The structural key of a statement `cse` compares: the expression and
/// the result types, for expressions without nested blocks.
pub fn cse_key(s: &Stmt) -> Option<String> {
    let nested = walk::sub_blocks(&s.expr).next().is_some();
    if nested || matches!(s.expr, Expr::Atom(_) | Expr::Fail { .. }) {
        return None;
    }
    let tys: Vec<_> = s.binds.iter().map(|b| &b.ty).collect();
    Some(format!("{:?}{:?}", s.expr, tys))
}

pub struct Engine<'r> {
    rules: &'r [Rule],
    sched: &'r Schedule,
    pub st: State,
    fuel: u64,
    /// how often each rule fired
    pub counts: BTreeMap<&'static str, u64>,
    /// with tracing on: one line per rewrite
    pub trace: Option<Vec<String>>,
    /// the path of the position being rewritten, for the trace
    path: Vec<String>,
}

impl<'r> Engine<'r> {
    pub fn new(rules: &'r [Rule], sched: &'r Schedule, st: State, fuel: u64, trace: bool) -> Self {
        Engine { rules, sched, st, fuel, counts: BTreeMap::new(), trace: trace.then(Vec::new), path: vec![] }
    }

    /// Run the schedule's main strategy on a function body, one phase at a
    /// time (the operands of its outermost `;`s, see [`phases`]), showing
    /// `after_phase` each phase that succeeded, its number from 1 and the
    /// body and name table it left. The `;`s run as `at_block` runs them:
    /// a step each, and a phase that fails after others succeeded undoes
    /// them all.
    pub fn run(&mut self, body: &mut Block, info: &BlockInfo, mut after_phase: Option<&mut AfterPhase<'_>>) -> Result<bool, Stopped> {
        let sched = self.sched;
        let phases = phases(&sched.main);
        let later_may_fail = phases.iter().skip(1).any(|p| may_fail(p, sched));
        let mut snapshot = None;
        for (k, phase) in phases.iter().enumerate() {
            if k + 1 < phases.len() {
                self.spend()?;
            }
            if k == 0 && later_may_fail {
                snapshot = Some(body.clone());
            }
            if !self.at_block(phase, body, info, None)? {
                if let Some(snap) = snapshot.filter(|_| k > 0) {
                    self.restore_block(body, snap);
                }
                return Ok(false);
            }
            if let Some(check) = after_phase.as_mut() {
                check(k + 1, phase, body, &mut self.st.names).map_err(Stopped::Invalid)?;
            }
        }
        Ok(true)
    }

    /// Fuel not spent yet.
    pub fn fuel_left(&self) -> u64 {
        self.fuel
    }

    fn spend(&mut self) -> R<()> {
        if self.fuel == 0 {
            return Err(OutOfFuel);
        }
        self.fuel -= 1;
        Ok(())
    }

    fn rule(&self, name: &str) -> Option<&'r Rule> {
        self.rules.iter().find(|r| r.name == name)
    }

    fn resolve(&self, name: &str) -> &'r Strategy {
        let sched: &'r Schedule = self.sched;
        sched.lookup(name).unwrap_or(&Strategy::Fail)
    }

    // ---- use counts -------------------------------------------------

    fn count_stmt(&mut self, s: &Stmt, delta: i32) {
        let uses = &mut self.st.uses;
        stmt_uses(s, &mut |v| {
            let c = uses.entry(v).or_insert(0);
            *c = (*c as i64 + delta as i64).max(0) as u32;
        });
    }

    fn count_atoms(&mut self, xs: &[Atom], delta: i32) {
        for a in xs {
            if let Atom::Var(v) = a {
                let c = self.st.uses.entry(*v).or_insert(0);
                *c = (*c as i64 + delta as i64).max(0) as u32;
            }
        }
    }

    /// Replace statements `k..=last` of `b` by `rep`, keeping use counts exact.
    fn splice(&mut self, b: &mut Block, k: usize, last: usize, rep: Vec<Stmt>) -> At {
        for s in &b.stmts[k..=last] {
            self.count_stmt(s, -1);
        }
        for s in &rep {
            self.count_stmt(s, 1);
        }
        let n = rep.len();
        b.stmts.splice(k..=last, rep);
        if n == 0 { At::Gone } else { At::Index(k + n - 1) }
    }

    fn restore_block(&mut self, b: &mut Block, snapshot: Block) {
        for s in std::mem::take(&mut b.stmts) {
            self.count_stmt(&s, -1);
        }
        let old = std::mem::take(&mut b.result);
        self.count_atoms(&old, -1);
        for s in &snapshot.stmts {
            self.count_stmt(s, 1);
        }
        self.count_atoms(&snapshot.result, 1);
        *b = snapshot;
    }

    fn fired(&mut self, rule: &'static str, what: &str) {
        *self.counts.entry(rule).or_insert(0) += 1;
        if let Some(t) = self.trace.as_mut() {
            t.push(format!("{rule} at {}{what}", self.path.join(" > ")));
        }
    }

    // ---- statements ---------------------------------------------------

    /// Apply `s` at statement `k` of `b`; `None` when it fails.
    fn at_stmt(&mut self, s: &Strategy, b: &mut Block, k: usize, idx: &mut Index, info: &BlockInfo, parent: Option<&Scope>) -> R<Option<At>> {
        self.spend()?;
        Ok(match s {
            Strategy::Id => Some(At::Index(k)),
            Strategy::Fail => None,
            Strategy::Rule(name) => self.rule_at_stmt(name, b, k, idx, info, parent),
            Strategy::Ref(name) => {
                let t = self.resolve(name);
                self.at_stmt(t, b, k, idx, info, parent)?
            }
            Strategy::Seq(a, c) => {
                let snapshot = may_fail(c, self.sched).then(|| b.stmts[k].clone());
                match self.at_stmt(a, b, k, idx, info, parent)? {
                    None => None,
                    Some(At::Gone) => Some(At::Gone),
                    Some(At::Index(k2)) => match self.at_stmt(c, b, k2, idx, info, parent)? {
                        Some(at) => Some(at),
                        None => {
                            if let Some(snap) = snapshot {
                                self.splice(b, k, k2, vec![snap]);
                                idx.reset();
                            }
                            None
                        }
                    },
                }
            }
            Strategy::LChoice(a, c) => match self.at_stmt(a, b, k, idx, info, parent)? {
                Some(at) => Some(at),
                None => self.at_stmt(c, b, k, idx, info, parent)?,
            },
            Strategy::Try(a) => Some(self.at_stmt(a, b, k, idx, info, parent)?.unwrap_or(At::Index(k))),
            Strategy::Repeat(a) => Some(self.repeat_stmt(a, b, k, idx, info, parent, &|e, a, b, k, idx, info, p| e.at_stmt(a, b, k, idx, info, p))?),
            Strategy::One(a) => self.one_child(a, b, k, idx, info, parent)?.then_some(At::Index(k)),
            Strategy::All(a) => self.all_children(a, b, k, idx, info, parent)?.then_some(At::Index(k)),
            Strategy::TopDown(a) => self.top_down_stmt(a, b, k, idx, info, parent)?,
            Strategy::BottomUp(a) => self.bottom_up_stmt(a, b, k, idx, info, parent)?,
            Strategy::Normalize(a) => Some(self.repeat_stmt(a, b, k, idx, info, parent, &|e, a, b, k, idx, info, p| e.top_down_stmt(a, b, k, idx, info, p))?),
            Strategy::Innermost(a) => Some(self.repeat_stmt(a, b, k, idx, info, parent, &|e, a, b, k, idx, info, p| e.bottom_up_stmt(a, b, k, idx, info, p))?),
            Strategy::Everywhere(a) => self.sweep_stmt(a, b, k, idx, info, parent)?,
        })
    }

    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn repeat_stmt(
        &mut self,
        a: &Strategy,
        b: &mut Block,
        mut k: usize,
        idx: &mut Index,
        info: &BlockInfo,
        parent: Option<&Scope>,
        step: &dyn Fn(&mut Self, &Strategy, &mut Block, usize, &mut Index, &BlockInfo, Option<&Scope>) -> R<Option<At>>,
    ) -> R<At> {
        loop {
            self.spend()?;
            match step(self, a, b, k, idx, info, parent)? {
                None => return Ok(At::Index(k)),
                Some(At::Gone) => return Ok(At::Gone),
                Some(At::Index(k2)) => k = k2,
            }
        }
    }

    fn rule_at_stmt(&mut self, name: &str, b: &mut Block, k: usize, idx: &mut Index, info: &BlockInfo, parent: Option<&Scope>) -> Option<At> {
        let rule = self.rule(name)?;
        let f = rule.stmt?;
        idx.extend(&b.stmts, k, self.st.want_cse);
        let rep = {
            let scope = Scope { stmts: &b.stmts[..k], index: &idx.map, avail: &idx.avail, info, parent };
            let mut ctx = Ctx { scope: &scope, st: &mut self.st };
            f(&b.stmts[k], &mut ctx)?
        };
        let what = match b.stmts[k].binds.first() {
            Some(x) => format!(" (`{}`)", self.st.names.get(x.var.0 as usize).map(|n| format!("{n}_{}", x.var.0)).unwrap_or_default()),
            None => String::new(),
        };
        self.fired(rule.name, &what);
        Some(self.splice(b, k, k, rep))
    }

    /// Run `f` on each block nested in statement `k`, with the scope there.
    fn with_children(
        &mut self,
        b: &mut Block,
        k: usize,
        idx: &mut Index,
        info: &BlockInfo,
        parent: Option<&Scope>,
        f: &mut dyn FnMut(&mut Self, &mut Block, &BlockInfo, &Scope) -> R<bool>,
    ) -> R<()> {
        idx.extend(&b.stmts, k, self.st.want_cse);
        let (pre, post) = b.stmts.split_at_mut(k);
        let scope = Scope { stmts: pre, index: &idx.map, avail: &idx.avail, info, parent };
        let label = post[0].binds.first().map(|x| format!("{}_{}", self.st.names.get(x.var.0 as usize).cloned().unwrap_or_default(), x.var.0));
        if let Some(l) = &label {
            self.path.push(l.clone());
        }
        let mut result = Ok(());
        for (child, cinfo) in children_mut(&mut post[0].expr) {
            match f(self, child, &cinfo, &scope) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if label.is_some() {
            self.path.pop();
        }
        result
    }

    fn one_child(&mut self, a: &Strategy, b: &mut Block, k: usize, idx: &mut Index, info: &BlockInfo, parent: Option<&Scope>) -> R<bool> {
        let mut hit = false;
        self.with_children(b, k, idx, info, parent, &mut |e, child, ci, sc| {
            hit = e.at_block(a, child, ci, Some(sc))?;
            Ok(!hit)
        })?;
        Ok(hit)
    }

    fn all_children(&mut self, a: &Strategy, b: &mut Block, k: usize, idx: &mut Index, info: &BlockInfo, parent: Option<&Scope>) -> R<bool> {
        let snapshot = may_fail(a, self.sched).then(|| b.stmts[k].clone());
        let mut ok = true;
        self.with_children(b, k, idx, info, parent, &mut |e, child, ci, sc| {
            ok = e.at_block(a, child, ci, Some(sc))?;
            Ok(ok)
        })?;
        if !ok && let Some(snap) = snapshot {
            self.splice(b, k, k, vec![snap]);
        }
        Ok(ok)
    }

    fn top_down_stmt(&mut self, a: &Strategy, b: &mut Block, k: usize, idx: &mut Index, info: &BlockInfo, parent: Option<&Scope>) -> R<Option<At>> {
        if let Some(at) = self.at_stmt(a, b, k, idx, info, parent)? {
            return Ok(Some(at));
        }
        let mut hit = false;
        self.with_children(b, k, idx, info, parent, &mut |e, child, ci, sc| {
            hit = e.top_down_block(a, child, ci, Some(sc))?;
            Ok(!hit)
        })?;
        Ok(hit.then_some(At::Index(k)))
    }

    fn bottom_up_stmt(&mut self, a: &Strategy, b: &mut Block, k: usize, idx: &mut Index, info: &BlockInfo, parent: Option<&Scope>) -> R<Option<At>> {
        let mut hit = false;
        self.with_children(b, k, idx, info, parent, &mut |e, child, ci, sc| {
            hit = e.bottom_up_block(a, child, ci, Some(sc))?;
            Ok(!hit)
        })?;
        if hit {
            return Ok(Some(At::Index(k)));
        }
        self.at_stmt(a, b, k, idx, info, parent)
    }

    /// `everywhere(a)` at a statement: `a` here, then in the children of
    /// what it left; `None` when `a` succeeded nowhere.
    fn sweep_stmt(&mut self, a: &Strategy, b: &mut Block, k: usize, idx: &mut Index, info: &BlockInfo, parent: Option<&Scope>) -> R<Option<At>> {
        let (pos, mut fired) = match self.at_stmt(a, b, k, idx, info, parent)? {
            None => (k, false),
            Some(At::Gone) => return Ok(Some(At::Gone)),
            Some(At::Index(k2)) => (k2, true),
        };
        self.with_children(b, pos, idx, info, parent, &mut |e, child, ci, sc| {
            fired |= e.sweep_block(a, child, ci, Some(sc))?;
            Ok(true)
        })?;
        Ok(fired.then_some(At::Index(pos)))
    }

    // ---- blocks ---------------------------------------------------------

    /// Apply `s` to a whole block; `false` when it fails.
    fn at_block(&mut self, s: &Strategy, b: &mut Block, info: &BlockInfo, parent: Option<&Scope>) -> R<bool> {
        self.spend()?;
        Ok(match s {
            Strategy::Id => true,
            Strategy::Fail => false,
            Strategy::Rule(name) => self.rule_at_block(name, b, info, parent),
            Strategy::Ref(name) => {
                let t = self.resolve(name);
                self.at_block(t, b, info, parent)?
            }
            Strategy::Seq(a, c) => {
                let snapshot = may_fail(c, self.sched).then(|| b.clone());
                if !self.at_block(a, b, info, parent)? {
                    false
                } else if self.at_block(c, b, info, parent)? {
                    true
                } else {
                    if let Some(snap) = snapshot {
                        self.restore_block(b, snap);
                    }
                    false
                }
            }
            Strategy::LChoice(a, c) => self.at_block(a, b, info, parent)? || self.at_block(c, b, info, parent)?,
            Strategy::Try(a) => {
                self.at_block(a, b, info, parent)?;
                true
            }
            Strategy::Repeat(a) => {
                while self.at_block(a, b, info, parent)? {
                    self.spend()?;
                }
                true
            }
            Strategy::One(a) => {
                let mut idx = Index::default();
                let mut k = 0;
                let mut hit = false;
                while k < b.stmts.len() && !hit {
                    hit = self.at_stmt(a, b, k, &mut idx, info, parent)?.is_some();
                    k += 1;
                }
                hit
            }
            Strategy::All(a) => {
                let snapshot = may_fail(a, self.sched).then(|| b.clone());
                let mut idx = Index::default();
                let mut k = 0;
                let mut ok = true;
                while k < b.stmts.len() {
                    match self.at_stmt(a, b, k, &mut idx, info, parent)? {
                        None => {
                            ok = false;
                            break;
                        }
                        Some(At::Gone) => {}
                        Some(At::Index(k2)) => k = k2 + 1,
                    }
                }
                if !ok && let Some(snap) = snapshot {
                    self.restore_block(b, snap);
                }
                ok
            }
            Strategy::TopDown(a) => self.top_down_block(a, b, info, parent)?,
            Strategy::BottomUp(a) => self.bottom_up_block(a, b, info, parent)?,
            Strategy::Normalize(a) => {
                while self.top_down_block(a, b, info, parent)? {
                    self.spend()?;
                }
                true
            }
            Strategy::Innermost(a) => {
                while self.bottom_up_block(a, b, info, parent)? {
                    self.spend()?;
                }
                true
            }
            Strategy::Everywhere(a) => self.sweep_block(a, b, info, parent)?,
        })
    }

    fn rule_at_block(&mut self, name: &str, b: &mut Block, info: &BlockInfo, parent: Option<&Scope>) -> bool {
        let Some(rule) = self.rule(name) else { return false };
        if let Some(f) = rule.stmts {
            return self.stmts_rule_at_block(rule, f, b, info, parent);
        }
        let Some(f) = rule.block else { return false };
        let Some(result) = self.at_block_end(b, info, parent, f) else { return false };
        let old = std::mem::replace(&mut b.result, result);
        self.count_atoms(&old, -1);
        let new = b.result.clone();
        self.count_atoms(&new, 1);
        self.fired(rule.name, " (block result)");
        true
    }

    /// Run `f` on block `b` with the scope at its end (every statement of
    /// the block in view), as block-level rules see it.
    fn at_block_end<T>(&mut self, b: &Block, info: &BlockInfo, parent: Option<&Scope>, f: impl FnOnce(&Block, &mut Ctx) -> T) -> T {
        let mut idx = Index::default();
        idx.extend(&b.stmts, b.stmts.len(), false);
        let scope = Scope { stmts: &b.stmts, index: &idx.map, avail: &idx.avail, info, parent };
        let mut ctx = Ctx { scope: &scope, st: &mut self.st };
        f(b, &mut ctx)
    }

    /// A rule over a block's statement list: the whole list is replaced,
    /// and use counts follow (old statements out, new ones in).
    fn stmts_rule_at_block(&mut self, rule: &'r Rule, f: super::rule::StmtsFn, b: &mut Block, info: &BlockInfo, parent: Option<&Scope>) -> bool {
        let Some(new) = self.at_block_end(b, info, parent, f) else { return false };
        for s in &new {
            self.count_stmt(s, 1);
        }
        for s in std::mem::replace(&mut b.stmts, new) {
            self.count_stmt(&s, -1);
        }
        self.fired(rule.name, " (block statements)");
        true
    }

    fn top_down_block(&mut self, a: &Strategy, b: &mut Block, info: &BlockInfo, parent: Option<&Scope>) -> R<bool> {
        if self.at_block(a, b, info, parent)? {
            return Ok(true);
        }
        let mut idx = Index::default();
        for k in 0..b.stmts.len() {
            if self.top_down_stmt(a, b, k, &mut idx, info, parent)?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn bottom_up_block(&mut self, a: &Strategy, b: &mut Block, info: &BlockInfo, parent: Option<&Scope>) -> R<bool> {
        let mut idx = Index::default();
        for k in 0..b.stmts.len() {
            if self.bottom_up_stmt(a, b, k, &mut idx, info, parent)?.is_some() {
                return Ok(true);
            }
        }
        self.at_block(a, b, info, parent)
    }

    /// `everywhere(a)` over a block: every statement in order, then the
    /// block's results.
    fn sweep_block(&mut self, a: &Strategy, b: &mut Block, info: &BlockInfo, parent: Option<&Scope>) -> R<bool> {
        let mut idx = Index::default();
        let mut fired = false;
        let mut k = 0;
        while k < b.stmts.len() {
            match self.sweep_stmt(a, b, k, &mut idx, info, parent)? {
                None => k += 1,
                Some(At::Gone) => fired = true,
                Some(At::Index(k2)) => {
                    fired = true;
                    k = k2 + 1;
                }
            }
        }
        Ok(self.at_block(a, b, info, parent)? | fired)
    }
}

/// Whether `s` can fail (then a `;` before it keeps a snapshot to undo).
fn may_fail(s: &Strategy, sched: &Schedule) -> bool {
    match s {
        Strategy::Id | Strategy::Try(_) | Strategy::Repeat(_) | Strategy::Normalize(_) | Strategy::Innermost(_) => false,
        Strategy::Ref(n) => sched.lookup(n).is_none_or(|t| may_fail(t, sched)),
        Strategy::Seq(a, c) => may_fail(a, sched) || may_fail(c, sched),
        Strategy::LChoice(a, c) => may_fail(a, sched) && may_fail(c, sched),
        Strategy::All(a) => may_fail(a, sched),
        _ => true,
    }
}

/// The blocks nested in `e` with what each binds and whether it repeats.
pub fn children_mut(e: &mut Expr) -> Vec<(&mut Block, BlockInfo)> {
    walk::scopes_mut(e).map(|scope| (scope.block, block_info(&scope.binds))).collect()
}

fn block_info(binds: &walk::Binds) -> BlockInfo {
    let looped = |params: &[crate::ir::Binder], index| BlockInfo { params: params.to_vec(), index, repeats: true, parallel: false };
    match *binds {
        walk::Binds::ForBody { ivar, size } => BlockInfo { parallel: true, ..looped(&[], Some((ivar, size.clone()))) },
        walk::Binds::LoopBody { params, counter } => {
            let mut info = looped(params, None);
            if let Some((ivar, n)) = counter {
                match Size::of_atom(n) {
                    Some(size) => info.index = Some((ivar, size)),
                    None => info.params.push(crate::ir::Binder { var: ivar, ty: crate::ir::Type::scalar(crate::ir::Scalar::I64) }),
                }
            }
            info
        }
        // the condition sees the loop's parameters, as the body does
        walk::Binds::LoopCondition { params } | walk::Binds::Operator { params } => looped(params, None),
        walk::Binds::Branch => BlockInfo::default(),
        walk::Binds::Derivative { params } => BlockInfo { params: params.to_vec(), index: None, repeats: false, parallel: false },
    }
}
