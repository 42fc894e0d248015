//! `lower`: type and size checking while inlining and specialising the
//! surface program into the core IR.
//!
//! Every function call is resolved at compile time (LANGUAGE.md §8), so the
//! elaborator evaluates the program symbolically: data becomes IR atoms with
//! a surface type, functions and tuples stay compile-time values, and each
//! call is checked against the actual argument types as it is inlined. This
//! gives monomorphic, first-order IR directly, and size parameters are
//! inferred at every call site by matching the argument shapes.
//!
//! Files: `value.rs` (compile-time values), `expr.rs` (expressions),
//! `apply.rs` (calls, parameters, annotations), `builtins.rs` (the prelude's
//! primitives), `prelude.ard` (built-ins written in arden), `bounds.rs`
//! (index-safety proofs), `emit.rs` (building IR statements).

mod apply;
mod bounds;
mod diff;
pub mod builtins;
mod emit;
mod expr;
mod value;
#[cfg(test)]
mod tests;

use crate::diag::{Diagnostic, Source};
use crate::ir::{Block, Loc, Module, Size, Stmt, VarId};
use crate::syntax::ast::{self, Span};
use crate::types::{decls, Ty};
use rustc_hash::{FxHashMap, FxHashSet};

/// Options of the lowering stage.
#[derive(Clone, Debug, Default)]
pub struct LowerOptions {}

/// Result of lowering: the IR, plus every bounds check that could not be
/// proven (location and a description), for `check --strict-bounds`.
pub struct Lowered {
    pub module: Module,
    pub unproven_checks: Vec<(Loc, String)>,
}

/// How deep calls may nest while inlining; deeper means a function value
/// applied to itself (recursion through values), which arden rejects.
const MAX_INLINE_DEPTH: usize = 150;

/// The prelude: built-ins that are easiest to state in arden itself. Their
/// arguments are checked by `builtins.rs` before the body is inlined, so
/// errors point at the user's call, never in here.
const PRELUDE: &str = include_str!("prelude.ard");

/// Type-check and lower a parsed program: one IR function per entry.
pub fn lower(program: &ast::Program, source: &Source, _opts: &LowerOptions) -> Result<Lowered, Vec<Diagnostic>> {
    let prelude_src = Source::new("<prelude>", PRELUDE);
    let (prelude, pdiags) = crate::syntax::parse(&prelude_src);
    assert!(pdiags.is_empty(), "the prelude must parse: {pdiags:?}");

    let duplicates = decls::check_duplicates(program);
    if !duplicates.is_empty() {
        return Err(duplicates);
    }
    let (recursion, on_cycle) = decls::check_recursion(program);
    let mut l = Lowerer::new(program, &prelude, source);
    l.diags = recursion;
    // Recursive declarations are reported once; calls to them are not checked again.
    l.broken.extend(on_cycle.iter().copied());
    let mut module = Module::default();
    // Defs first: one that fails on its own is marked broken, and calls to
    // it are not checked again (one mistake, one message).
    for (i, d) in program.decls.iter().enumerate() {
        if !d.is_entry && !l.broken.contains(&i) {
            l.check_def(i);
        }
    }
    for (i, d) in program.decls.iter().enumerate() {
        if d.is_entry && !l.broken.contains(&i) {
            if let Some(f) = l.lower_entry(i) {
                module.functions.push(f);
            }
        }
    }
    if l.diags.is_empty() {
        Ok(Lowered { module, unproven_checks: l.unproven })
    } else {
        Err(l.take_diagnostics())
    }
}

/// State of the elaborator. Per-function state (`names`, `sym`, blocks) is
/// reset for each entry point.
pub(crate) struct Lowerer<'a> {
    prog: &'a ast::Program,
    prelude: &'a ast::Program,
    source: &'a Source,
    decls: FxHashMap<&'a str, usize>,
    prelude_decls: FxHashMap<&'a str, usize>,
    diags: Vec<Diagnostic>,
    unproven: Vec<(Loc, String)>,
    /// Variable names, indexed by id (for the printer and messages).
    names: Vec<String>,
    /// Known symbolic value of `i64` variables (e.g. `t = n + 1`).
    sym: FxHashMap<VarId, Size>,
    /// Variables known to be >= 0 (sizes).
    nonneg: FxHashSet<VarId>,
    /// Variables of type `idx n`, with `n`.
    idx_range: FxHashMap<VarId, Size>,
    /// Statement lists under construction, innermost last.
    blocks: Vec<Vec<Stmt>>,
    /// Inline depth (calls currently being elaborated).
    depth: usize,
    /// While inlining a prelude body, messages and run-time locations point
    /// at the user's call instead (innermost last; `None` = user code).
    span_override: Vec<Option<Span>>,
    /// Size inference for `for i.`: placeholder variable -> size found.
    probes: FxHashMap<VarId, Option<Size>>,
    /// Weaker hints for the same: an axis indexed by `i + c`.
    probe_offsets: FxHashMap<VarId, Size>,
    /// Whether diagnostics are currently collected (off while probing).
    quiet: usize,
    /// Errors suppressed while quiet (tells a trial elaboration it failed).
    quiet_errors: usize,
    /// Names of size parameters, for messages.
    size_names: FxHashMap<VarId, String>,
    /// User declarations whose own check failed.
    broken: FxHashSet<usize>,
}

impl<'a> Lowerer<'a> {
    fn new(prog: &'a ast::Program, prelude: &'a ast::Program, source: &'a Source) -> Self {
        Lowerer {
            prog,
            prelude,
            source,
            decls: prog.decls.iter().enumerate().map(|(i, d)| (d.name.name.as_str(), i)).collect(),
            prelude_decls: prelude.decls.iter().enumerate().map(|(i, d)| (d.name.name.as_str(), i)).collect(),
            diags: vec![],
            unproven: vec![],
            names: vec![],
            sym: FxHashMap::default(),
            nonneg: FxHashSet::default(),
            idx_range: FxHashMap::default(),
            blocks: vec![],
            depth: 0,
            span_override: vec![],
            probes: FxHashMap::default(),
            probe_offsets: FxHashMap::default(),
            quiet: 0,
            quiet_errors: 0,
            size_names: FxHashMap::default(),
            broken: FxHashSet::default(),
        }
    }

    fn reset_function_state(&mut self) {
        self.names.clear();
        self.sym.clear();
        self.nonneg.clear();
        self.idx_range.clear();
        self.blocks.clear();
        self.size_names.clear();
        self.depth = 0;
    }

    /// Deduplicated diagnostics (a body inlined twice reports once), in source order.
    fn take_diagnostics(&mut self) -> Vec<Diagnostic> {
        let mut seen = FxHashSet::default();
        let mut out: Vec<Diagnostic> = vec![];
        for d in std::mem::take(&mut self.diags) {
            if seen.insert((d.span.start, d.span.end, d.message.clone())) {
                out.push(d);
            }
        }
        out.sort_by_key(|d| d.span.start);
        out
    }

    /// The span to report for `span`: the user's call site inside the prelude.
    fn at(&self, span: &Span) -> Span {
        match self.span_override.last() {
            Some(Some(s)) => s.clone(),
            _ => span.clone(),
        }
    }

    /// Record a diagnostic (unless probing) and return the error value.
    fn error(&mut self, d: Diagnostic) -> value::Val {
        if self.quiet > 0 {
            self.quiet_errors += 1;
        } else {
            let mut d = d;
            d.span = self.at(&d.span);
            if matches!(self.span_override.last(), Some(Some(_))) {
                d.notes.clear();
            }
            self.diags.push(d);
        }
        value::Val::Error
    }

    fn loc(&self, span: &Span) -> Loc {
        let s = self.at(span);
        let (line, col) = self.source.line_col(s.start);
        Loc { file: self.source.name.clone(), line, col }
    }

    /// The text of a span of user source (for messages).
    fn snippet(&self, span: &Span) -> String {
        let s = self.at(span);
        self.source.text.get(s.start..s.end).unwrap_or("").to_string()
    }

    /// Render a type with the names of size variables.
    fn show(&self, ty: &Ty) -> String {
        ty.display(&|v| self.size_var_name(v))
    }

    fn show_size(&self, s: &Size) -> String {
        s.display_with(&|v| self.size_var_name(v))
    }

    fn size_var_name(&self, v: VarId) -> String {
        if let Some(n) = self.size_names.get(&v) {
            return n.clone();
        }
        match self.names.get(v.0 as usize) {
            Some(n) if !n.is_empty() => n.clone(),
            _ => format!("v{}", v.0),
        }
    }

    /// Every variable id handed out so far; ids at or above a mark were
    /// created after it (used to find values that escape their block).
    fn var_mark(&self) -> u32 {
        self.names.len() as u32
    }

    fn decl(&self, index: usize, prelude: bool) -> &'a ast::Decl {
        if prelude { &self.prelude.decls[index] } else { &self.prog.decls[index] }
    }
}

/// Blocks are built by pushing a statement list, elaborating, and popping.
impl Lowerer<'_> {
    fn begin_block(&mut self) {
        self.blocks.push(vec![]);
    }

    fn end_block(&mut self, result: Vec<crate::ir::Atom>) -> Block {
        let stmts = self.blocks.pop().unwrap_or_default();
        Block { stmts, result }
    }
}
