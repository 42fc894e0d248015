//! The optimiser (papers 001, 002, 000): rewrite rules scheduled by a
//! strategy language. Runs after `ad`, before any backend; every backend
//! runs its output.
//!
//! - `rule.rs`: what a rule is and what it may ask (`Ctx`: definitions in
//!   scope, use counts, loop ranges, fresh variables).
//! - `rules/`: the catalogue, one file per family, each with a `RULES` table.
//! - `strategy.rs`: strategies as data; `schedule.rs`: their text syntax.
//! - `engine.rs`: applying a strategy to a function, with fuel.
//! - `default.sched`: the default pipeline, in the schedule syntax.
//!
//! **Invariant:** every rule preserves the meaning of the program bit for
//! bit, except `mul_onehot` whose doc says where it differs (structural
//! zeros against NaN/∞) and the rules that say they reassociate
//! (`onehot_scatter`, `sum_cond_range`: a sum's terms in another order
//! than the fixed order of sums).

pub mod engine;
pub mod rule;
pub mod rules;
pub mod schedule;
pub mod strategy;

pub use rule::{Ctx, Rule};
pub use strategy::{Schedule, Strategy};

use crate::ir::{Binder, Block, Function, Module, Scalar, Type, VarId};
use rule::{BlockInfo, State};
use std::collections::BTreeMap;

/// The default pipeline, in the schedule syntax (`arden opt --print-default`).
pub const DEFAULT_SCHEDULE: &str = include_str!("default.sched");

/// Steps a schedule may take per function before it is stopped.
pub const DEFAULT_FUEL: u64 = 50_000_000;

/// Optimisation level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Level {
    /// no rewriting: what `ad` produced runs
    O0,
    /// the default schedule (or the user's)
    #[default]
    O1,
}

/// How to optimise: the level, a user schedule, fuel, extra rules.
#[derive(Clone)]
pub struct OptOptions {
    pub level: Level,
    /// a user schedule replacing the default one
    pub schedule: Option<Schedule>,
    pub fuel: u64,
    /// rules registered in addition to the built-in ones
    pub extra_rules: Vec<Rule>,
    /// record every rewrite in the report
    pub trace: bool,
    /// optimise only these entry points (the others stay as `ad` left
    /// them): `arden run` needs only the entry it runs
    pub entries: Option<Vec<String>>,
    /// keep `trace` statements (false: each becomes the value it traces,
    /// at every level, `-O0` too)
    pub traces: bool,
    /// read every `f64` of the program as `f32` (`--precision f32`; see
    /// `syntax::ast::Program::in_single_precision`)
    pub single_precision: bool,
}

impl Default for OptOptions {
    fn default() -> Self {
        OptOptions {
            level: Level::O1,
            schedule: None,
            fuel: DEFAULT_FUEL,
            extra_rules: vec![],
            trace: false,
            entries: None,
            traces: true,
            single_precision: false,
        }
    }
}

impl OptOptions {
    /// Options for `-O0` (`0`) or `-O1` (`1`).
    pub fn level(level: u8) -> OptOptions {
        OptOptions { level: if level == 0 { Level::O0 } else { Level::O1 }, ..OptOptions::default() }
    }

    /// These options for a primal that is differentiated next (derivatives
    /// built on demand from an entry, `api::Entry::vjp_function`): the
    /// schedule without [`NOT_BEFORE_AD`].
    pub fn before_ad(&self) -> OptOptions {
        let sched = self.schedule.clone().unwrap_or_else(default_schedule);
        OptOptions { schedule: Some(sched.without(NOT_BEFORE_AD)), entries: None, trace: false, ..self.clone() }
    }

    /// Every rule a schedule may name: built-in first, then the extra ones.
    pub fn rules(&self) -> Vec<Rule> {
        let mut all = rules::builtin();
        all.extend(self.extra_rules.iter().copied());
        all
    }
}

/// Why optimisation stopped early.
#[derive(Debug, thiserror::Error)]
pub enum OptError {
    #[error(
        "the optimisation schedule did not finish within {fuel} steps on entry `{function}`; a `repeat` or `normalize` of a strategy that always succeeds never stops (raise the limit with --fuel)"
    )]
    OutOfFuel { function: String, fuel: u64 },
    /// with pass checking on (`ir::pass`), a phase's output did not verify
    #[error("internal error: {0}")]
    Invalid(#[from] crate::ir::pass::Invalid),
}

/// What a run did, per function.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// (function, rule → times it fired)
    pub fired: Vec<(String, BTreeMap<&'static str, u64>)>,
    /// with `trace`: (function, one line per rewrite)
    pub trace: Vec<(String, Vec<String>)>,
    /// strategy steps spent, per function
    pub steps: Vec<(String, u64)>,
    /// time spent optimising, per function
    pub elapsed: Vec<(String, std::time::Duration)>,
}

/// Rules whose output differentiates worse than their input, left out when
/// a primal is optimised to be differentiated next (`OptOptions::before_ad`):
/// `sum_cond_range` makes a loop whose size depends on an outer index, and
/// reverse mode of such a ragged loop scatters each iteration's cotangent
/// into a whole zero array (the GMM d=10 gradient from the optimised
/// objective cost 105M operations with it, 74.5M without); `fuse_minmax_for`
/// makes a loop whose reverse mode saves its accumulator at every step
/// (see docs/OPTIMISER.md). Derivatives written in the program (`grad`,
/// `vjp`, … in the source) are expanded before any optimisation and are
/// not concerned.
pub const NOT_BEFORE_AD: &[&str] = &["sum_cond_range", "fuse_minmax_for"];

/// The default schedule, parsed.
pub fn default_schedule() -> Schedule {
    let names: Vec<&str> = rules::builtin().iter().map(|r| r.name).collect();
    schedule::parse("default.sched", DEFAULT_SCHEDULE, &names).expect("the default schedule parses")
}

/// Optimise every function of a module.
pub fn optimize(m: &Module, opts: &OptOptions) -> Result<(Module, Report), OptError> {
    let mut out = m.clone();
    let mut report = Report::default();
    if !opts.traces {
        out.functions.iter_mut().for_each(|f| crate::ir::walk::remove_traces(&mut f.body));
    }
    if opts.level == Level::O0 {
        return Ok((out, report));
    }
    let sched = opts.schedule.clone().unwrap_or_else(default_schedule);
    let rules = opts.rules();
    for f in &mut out.functions {
        if opts.entries.as_ref().is_some_and(|only| !only.contains(&f.name)) {
            continue;
        }
        optimize_function(f, &sched, &rules, opts, &mut report)?;
    }
    Ok((out, report))
}

/// Optimise one function with a parsed schedule.
pub fn optimize_function(f: &mut Function, sched: &Schedule, rules: &[Rule], opts: &OptOptions, report: &mut Report) -> Result<(), OptError> {
    let t0 = std::time::Instant::now();
    let mut st = State {
        names: std::mem::take(&mut f.names),
        onehot: f.onehot.iter().copied().collect(),
        want_cse: mentions(sched, "cse"),
        nonneg: f.size_params.iter().map(|(_, v)| *v).collect(),
        nonneg_sizes: parameter_axes(f),
        entry_sizes: entry_sizes(f),
        ..State::default()
    };
    walk_uses(f, &mut st);
    let info = BlockInfo {
        params: f.params.iter().cloned().chain(f.size_params.iter().map(|(_, v)| Binder { var: *v, ty: Type::scalar(Scalar::I64) })).collect(),
        index: None,
        repeats: false,
        parallel: false,
    };
    let mut engine = engine::Engine::new(rules, sched, st, opts.fuel, opts.trace);
    let mut body = std::mem::take(&mut f.body);
    let outcome = {
        let mut check = |k: usize, phase: &Strategy, body: &mut Block, names: &mut Vec<String>| verify_phase(f, k, phase, body, names);
        let after_phase: Option<&mut engine::AfterPhase<'_>> = if crate::ir::pass::checking() { Some(&mut check) } else { None };
        stacker::maybe_grow(1 << 20, 64 << 20, || engine.run(&mut body, &info, after_phase))
    };
    f.body = body;
    f.names = std::mem::take(&mut engine.st.names);
    match outcome {
        Err(engine::Stopped::OutOfFuel) => return Err(OptError::OutOfFuel { function: f.name.clone(), fuel: opts.fuel }),
        Err(engine::Stopped::Invalid(e)) => return Err(e.into()),
        Ok(_) => {}
    }
    // whatever the schedule removed is no longer stored for the backward
    // sweep, nor what became a result (the copy that named it is gone)
    let top: rustc_hash::FxHashSet<VarId> = f.body.stmts.iter().flat_map(|s| s.binds.iter().map(|b| b.var)).collect();
    let results: rustc_hash::FxHashSet<VarId> = f
        .body
        .result
        .iter()
        .filter_map(|a| match a {
            crate::ir::Atom::Var(v) => Some(*v),
            crate::ir::Atom::Lit(_) => None,
        })
        .collect();
    f.stored.retain(|v| top.contains(v) && !results.contains(v));
    f.onehot = engine.st.onehot.iter().copied().filter(|v| top.contains(v)).collect();
    f.onehot.sort();
    report.fired.push((f.name.clone(), engine.counts.clone()));
    report.steps.push((f.name.clone(), opts.fuel - engine.fuel_left()));
    report.elapsed.push((f.name.clone(), t0.elapsed()));
    if let Some(t) = engine.trace.take() {
        report.trace.push((f.name.clone(), t));
    }
    Ok(())
}

/// Verify the body phase `k` left, in `f` (whose body and name table the
/// engine holds meanwhile), naming the phase.
fn verify_phase(f: &mut Function, k: usize, phase: &Strategy, body: &mut Block, names: &mut Vec<String>) -> Result<(), crate::ir::pass::Invalid> {
    std::mem::swap(&mut f.body, body);
    std::mem::swap(&mut f.names, names);
    let verdict = crate::ir::pass::verify_after(&format!("opt phase {k}: {phase}"), f);
    std::mem::swap(&mut f.body, body);
    std::mem::swap(&mut f.names, names);
    verdict
}

fn walk_uses(f: &Function, st: &mut State) {
    let uses = &mut st.uses;
    crate::ir::walk::visit_block(&f.body, &mut |v| *uses.entry(v).or_insert(0) += 1, &mut |_| {});
}

/// Whether a schedule names rule `name` anywhere (its lets included).
fn mentions(sched: &Schedule, name: &str) -> bool {
    fn names(s: &Strategy, name: &str) -> bool {
        match s {
            Strategy::Rule(n) => n == name,
            Strategy::Id | Strategy::Fail | Strategy::Ref(_) => false,
            Strategy::Seq(a, b) | Strategy::LChoice(a, b) => names(a, name) || names(b, name),
            Strategy::Try(a)
            | Strategy::Repeat(a)
            | Strategy::One(a)
            | Strategy::All(a)
            | Strategy::TopDown(a)
            | Strategy::BottomUp(a)
            | Strategy::Normalize(a)
            | Strategy::Innermost(a)
            | Strategy::Everywhere(a) => names(a, name),
        }
    }
    names(&sched.main, name) || sched.lets.iter().any(|(_, s)| names(s, name))
}

/// The axes of `f`'s array parameters that are not plain size parameters
/// or constants (those are known non-negative already), and the element
/// count of each parameter of rank 2 or more (`n * m` for `[n][m]`: the
/// array exists, so the product neither is negative nor overflowed; a
/// product of only some axes could have, beside an empty axis). Reverse
/// mode sizes its zero fills by such counts.
/// The sizes a call evaluates before the body runs, checking each product
/// and sum: every axis of an array parameter and, inside it, the operands of
/// its divisions (`(d*d - d)/2` evaluates `d*d - d` and `2`).
fn entry_sizes(f: &Function) -> Vec<crate::ir::Size> {
    fn with_parts(s: &crate::ir::Size, out: &mut Vec<crate::ir::Size>) {
        if s.as_var().is_some() || s.as_const().is_some() || out.contains(s) {
            return;
        }
        out.push(s.clone());
        for (mono, _) in s.terms() {
            for a in mono {
                if let crate::ir::SizeAtom::Div(p, q) = a {
                    with_parts(p, out);
                    with_parts(q, out);
                }
            }
        }
    }
    let mut out = vec![];
    for d in f.params.iter().flat_map(|p| &p.ty.shape) {
        with_parts(d, &mut out);
    }
    out
}

fn parameter_axes(f: &Function) -> Vec<crate::ir::Size> {
    let mut out: Vec<crate::ir::Size> = vec![];
    for p in &f.params {
        let count = (p.ty.shape.len() >= 2).then(|| p.ty.shape.iter().fold(crate::ir::Size::constant(1), |a, d| a.mul(d)));
        for d in p.ty.shape.iter().chain(&count) {
            if d.as_var().is_none() && d.as_const().is_none() && !out.contains(d) {
                out.push(d.clone());
            }
        }
    }
    out
}
