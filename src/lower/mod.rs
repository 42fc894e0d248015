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
pub mod builtins;
mod diff;
mod emit;
mod expr;
mod lift;
mod scan;
#[cfg(test)]
mod tests;
mod value;

use crate::diag::{Diagnostic, Source};
use crate::ir::{Block, Loc, Module, Size, SizeError, Stmt, VarId};
use crate::syntax::ast::{self, Span};
use crate::types::{Ty, decls};
use rustc_hash::{FxHashMap, FxHashSet};

/// Options of the lowering stage: the compile-time budgets (issue 8,
/// item 10). `Default` reads `ARDEN_MAX_INLINE_STATEMENTS` and
/// `ARDEN_MAX_INLINE_DEPTH` from the environment when they are set.
#[derive(Clone, Debug)]
pub struct LowerOptions {
    /// Most IR statements the whole program (every entry point and every
    /// `def` checked on its own) may produce while every call is inlined.
    pub max_inline_statements: usize,
    /// Most calls that may be nested while inlining.
    pub max_inline_depth: usize,
    /// the program was read in single precision (`--precision f32`): the
    /// prelude's literals are `f32` too
    pub single_precision: bool,
}

/// Default of [`LowerOptions::max_inline_statements`]. The largest programs
/// of the corpus and examples produce about 500 statements.
pub const DEFAULT_MAX_INLINE_STATEMENTS: usize = 1_000_000;

/// Most parts (tuples, data, functions, counted with repetition) one
/// compile-time tuple value may have; see `Lowerer::within_tuple_budget`.
/// Real programs' tuples have a handful of parts; every data part becomes
/// IR variables of its own.
pub const MAX_TUPLE_PARTS: usize = 100_000;

/// Default of [`LowerOptions::max_inline_depth`].
pub const DEFAULT_MAX_INLINE_DEPTH: usize = 150;

impl Default for LowerOptions {
    fn default() -> Self {
        let env = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.trim().parse::<usize>().ok()).filter(|n| *n > 0).unwrap_or(default);
        LowerOptions {
            max_inline_statements: env("ARDEN_MAX_INLINE_STATEMENTS", DEFAULT_MAX_INLINE_STATEMENTS),
            max_inline_depth: env("ARDEN_MAX_INLINE_DEPTH", DEFAULT_MAX_INLINE_DEPTH),
            single_precision: false,
        }
    }
}

/// Result of lowering: the IR, plus every bounds check that could not be
/// proven (location and a description), for `check --strict-bounds`.
pub struct Lowered {
    pub module: Module,
    pub unproven_checks: Vec<(Loc, String)>,
}

/// The prelude: built-ins that are easiest to state in arden itself. Their
/// arguments are checked by `builtins.rs` before the body is inlined, so
/// errors point at the user's call, never in here.
const PRELUDE: &str = include_str!("prelude.ard");

/// Type-check and lower a parsed program: one IR function per entry.
pub fn lower(program: &ast::Program, source: &Source, opts: &LowerOptions) -> Result<Lowered, Vec<Diagnostic>> {
    let prelude_src = Source::new("<prelude>", PRELUDE);
    let (mut prelude, pdiags) = crate::syntax::parse(&prelude_src);
    assert!(pdiags.is_empty(), "the prelude must parse: {pdiags:?}");
    if opts.single_precision {
        prelude.in_single_precision();
    }

    let mut diags = decls::check_duplicates(program);
    // A name defined twice is reported once; the other declarations are
    // still checked, and calls to that name are not (which one was meant?).
    let mut seen: FxHashSet<&str> = FxHashSet::default();
    let twice: FxHashSet<&str> = program.decls.iter().map(|d| d.name.name.as_str()).filter(|n| !seen.insert(n)).collect();
    let (recursion, on_cycle) = decls::check_recursion(program);
    diags.extend(recursion);
    let mut l = Lowerer::new(program, &prelude, source);
    l.opts = opts.clone();
    l.diags = diags;
    // Recursive declarations are reported once; calls to them are not checked again.
    l.broken.extend(on_cycle.iter().copied());
    l.broken.extend(program.decls.iter().enumerate().filter(|(_, d)| twice.contains(d.name.name.as_str())).map(|(i, _)| i));
    let mut module = Module::default();
    l.register_rules(false);
    l.register_rules(true);
    // Defs first: one that fails on its own is marked broken, and calls to
    // it are not checked again (one mistake, one message).
    for (i, d) in program.decls.iter().enumerate() {
        if !d.is_entry && !l.broken.contains(&i) && !l.over_budget {
            l.check_def(i);
        }
    }
    for (i, d) in program.decls.iter().enumerate() {
        if d.is_entry
            && !l.broken.contains(&i)
            && !l.over_budget
            && let Some(f) = l.lower_entry(i)
        {
            module.functions.push(f);
        }
    }
    if l.diags.is_empty() { Ok(Lowered { module, unproven_checks: l.unproven }) } else { Err(l.take_diagnostics()) }
}

/// State of the elaborator. Per-function state (`names`, `sym`, blocks) is
/// reset for each entry point.
pub(crate) struct Lowerer<'a> {
    prog: &'a ast::Program,
    prelude: &'a ast::Program,
    source: &'a Source,
    decls: FxHashMap<&'a str, usize>,
    prelude_decls: FxHashMap<&'a str, usize>,
    /// `derivative f`: the index (in `prog.rules`, or the prelude's) of
    /// each `def`'s rule, by (declaration index, whether in the prelude)
    rules: FxHashMap<(usize, bool), usize>,
    /// declarations whose rule is being elaborated: inside it (and inside
    /// the function itself) their calls are plain calls
    plain: Vec<(usize, bool)>,
    /// while a rule is elaborated: its function, the leaves of its value
    /// parameters, and the rule's parameters standing for the function's
    /// results there (its own call at those values reads them, not recomputes)
    rule_results: Vec<((usize, bool), Vec<crate::ir::Atom>, Vec<crate::ir::Atom>, crate::types::Ty)>,
    diags: Vec<Diagnostic>,
    unproven: Vec<(Loc, String)>,
    /// Variable names, indexed by id (for the printer and messages).
    names: Vec<String>,
    /// one-hot seeds built by `jacfwd`/`jacrev` in the function being lowered
    onehot: Vec<crate::ir::VarId>,
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
    /// Budgets.
    opts: LowerOptions,
    /// IR statements emitted so far, for the whole program.
    emitted: usize,
    /// A budget ran out: elaboration unwinds and nothing else is lowered.
    over_budget: bool,
    /// The calls being inlined, outermost first (for budget messages).
    chain: Vec<ChainLink>,
    /// Sizes written in annotations, in normal form, with the text the user
    /// wrote (for messages).
    size_text: FxHashMap<Size, String>,
    /// Where the lines of the user's source start (every emitted statement
    /// gets a location: a rescan per statement made lowering quadratic).
    lines: LineTable,
}

/// Start offset of every line, and whether the line is ASCII (then the
/// column is a byte difference; otherwise characters are counted).
pub(crate) struct LineTable {
    starts: Vec<usize>,
    ascii: Vec<bool>,
}

impl LineTable {
    fn new(text: &str) -> LineTable {
        let mut starts = vec![0];
        let mut ascii = vec![];
        let mut line_ascii = true;
        for (i, b) in text.bytes().enumerate() {
            line_ascii &= b.is_ascii();
            if b == b'\n' {
                starts.push(i + 1);
                ascii.push(line_ascii);
                line_ascii = true;
            }
        }
        ascii.push(line_ascii);
        LineTable { starts, ascii }
    }

    /// 1-based line and column (in characters) of a byte offset.
    fn line_col(&self, text: &str, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let start = self.starts[line];
        let col = if self.ascii[line] { offset - start } else { text[start..offset].chars().count() };
        (line + 1, col + 1)
    }
}

/// What a link of the call chain calls (named only when reported).
#[derive(Clone, Debug)]
pub(crate) enum ChainName {
    Decl(usize, bool),
    Lambda,
    Builtin(&'static str),
    Op(&'static str),
}

/// One call being inlined: what is called and where (in user code).
#[derive(Clone, Debug)]
pub(crate) struct ChainLink {
    /// `f`, `map`, `a lambda`, ...
    name: ChainName,
    /// Identity of the function (declaration or lambda body), to tell
    /// self-application from a long chain of different functions.
    key: (u8, usize, usize),
    span: Span,
}

impl<'a> Lowerer<'a> {
    fn new(prog: &'a ast::Program, prelude: &'a ast::Program, source: &'a Source) -> Self {
        Lowerer {
            prog,
            prelude,
            source,
            decls: prog.decls.iter().enumerate().map(|(i, d)| (d.name.name.as_str(), i)).collect(),
            prelude_decls: prelude.decls.iter().enumerate().map(|(i, d)| (d.name.name.as_str(), i)).collect(),
            rules: FxHashMap::default(),
            plain: vec![],
            rule_results: vec![],
            diags: vec![],
            unproven: vec![],
            names: vec![],
            onehot: vec![],
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
            opts: LowerOptions::default(),
            emitted: 0,
            over_budget: false,
            chain: vec![],
            size_text: FxHashMap::default(),
            lines: LineTable::new(&source.text),
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
        self.chain.clear();
        self.size_text.clear();
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
            } else {
                let calls = self.calls_behind(&d.span);
                d.notes.extend(calls);
            }
            self.diags.push(d);
        }
        value::Val::Error
    }

    /// The calls that made a declaration's body fail: for an error inside a
    /// user declaration elaborated at a call (its sizes and types come from
    /// the arguments), the innermost call of it made from outside its body,
    /// then the calls of the declarations around that one (up to three).
    fn calls_behind(&self, at: &Span) -> Vec<(Span, String)> {
        let mut notes: Vec<(Span, String)> = vec![];
        for link in self.chain.iter().rev() {
            let ChainName::Decl(index, false) = link.name else { continue };
            let decl = self.decl(index, false);
            let inside = |s: &Span| decl.span.start <= s.start && s.end <= decl.span.end;
            let name = &decl.name.name;
            if notes.is_empty() && inside(at) && !inside(&link.span) {
                notes.push((link.span.clone(), format!("the error comes from this call of `{name}`")));
            } else if !notes.is_empty() && notes.len() < 4 {
                notes.push((link.span.clone(), format!("called from this call of `{name}`")));
            }
        }
        notes
    }

    fn loc(&self, span: &Span) -> Loc {
        let s = self.at(span);
        let (line, col) = self.lines.line_col(&self.source.text, s.start);
        Loc { file: self.source.name.clone(), line, col }
    }

    /// The text of a span of user source (for messages).
    fn snippet(&self, span: &Span) -> String {
        let s = self.at(span);
        self.source.text.get(s.start..s.end).unwrap_or("").to_string()
    }

    /// Render a type with the names of size variables.
    fn show(&self, ty: &Ty) -> String {
        ty.display_sizes(&|s| self.show_size(s))
    }

    /// A size as the user wrote it when it came from an annotation
    /// (`d*(d-1)/2`), else its normal form (`(d*d - d)/2`).
    fn show_size(&self, s: &Size) -> String {
        if let Some(text) = self.size_text.get(s) {
            return text.clone();
        }
        s.display_with(&|v| self.size_var_name(v))
    }

    /// Turn a refused size computation into an error at `span`.
    fn checked_size(&mut self, r: Result<Size, SizeError>, span: &Span, what: &str) -> Option<Size> {
        match r {
            Ok(s) => Some(s),
            Err(e) => {
                let hint = match e {
                    SizeError::Overflow => "sizes are i64 values; no array can have this many elements".to_string(),
                    SizeError::TooLarge => {
                        "write the size with fewer terms (name a product with a size parameter), or coerce with `:>` to a simpler size".to_string()
                    }
                };
                let label = match e {
                    SizeError::Overflow => "this size does not fit in i64",
                    SizeError::TooLarge => "this size multiplies out to too many terms",
                };
                self.error(Diagnostic::new(format!("{e} in {what}"), span.clone()).label(label).hint(hint));
                None
            }
        }
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
