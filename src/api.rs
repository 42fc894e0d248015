//! The public Rust API shared by the command line, the tests and later front
//! ends: load a program, look up an entry, call it with values.
//!
//! ```no_run
//! use arden::{Program, Value};
//! let prog = Program::from_file("examples/dot.ard").unwrap();
//! let out = prog.entry("dot").unwrap().call(&[Value::Tuple(vec![])]);
//! ```

use crate::backend::interp;
pub use crate::backend::interp::OpCounts;
use crate::diag::{self, Diagnostic, Source};
use crate::ir::print::{shape_str, type_str};
use crate::ir::{self, Function, Loc, Scalar, Shape, VarId};
use crate::lower::{self, LowerOptions};
use crate::runtime::Value;
use std::collections::HashMap;
use std::path::Path;

/// Everything that can go wrong between a file and a result.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    Io { path: String, message: String },
    /// Syntax or type errors; `rendered` shows them with source snippets.
    #[error("{rendered}")]
    Compile { rendered: String, diagnostics: Vec<Diagnostic> },
    /// No entry point of that name.
    #[error("no entry point named `{name}`{}; entry points: {available}", did_you_mean(.name, .available))]
    NoEntry { name: String, available: String },
    /// Arguments of the wrong number, type or shape.
    #[error("{0}")]
    Arguments(String),
    /// A failure while running: bounds, coercion, division by zero.
    #[error("runtime error: {0}")]
    Runtime(String),
    /// The optimiser stopped (out of fuel) or its schedule is invalid.
    #[error("{0}")]
    Optimize(String),
    /// The C backend could not compile or load the program.
    #[error("C backend: {0}")]
    Backend(String),
    /// A compiler bug caught by a check: with pass checking on
    /// (`ir::pass`), a pass produced IR that does not verify.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<crate::ir::pass::Invalid> for Error {
    fn from(e: crate::ir::pass::Invalid) -> Error {
        Error::Internal(e.to_string())
    }
}

/// The compiler stages whose IR can be shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Lower,
    Ad,
    Opt,
}

/// A compiled program.
pub struct Program {
    source: Source,
    /// The IR as `lower` produced it (derivative operators unexpanded).
    lowered: ir::Module,
    /// The IR after the `ad` stage.
    expanded: ir::Module,
    /// The IR after the `opt` stage: what runs.
    module: ir::Module,
    /// What the optimiser did.
    report: crate::opt::Report,
    /// The optimiser's options (derivatives built later are optimised alike).
    opt: crate::opt::OptOptions,
    unproven_checks: Vec<(Loc, String)>,
}

impl Program {
    /// Read and compile a `.ard` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Program, Error> {
        Program::from_file_with(path, &crate::opt::OptOptions::default())
    }

    /// Compile source text; `name` is the file name shown in messages.
    pub fn from_source(name: &str, text: &str) -> Result<Program, Error> {
        Program::from_source_with(name, text, &crate::opt::OptOptions::default())
    }

    /// Read and compile a `.ard` file with the given optimiser options.
    pub fn from_file_with(path: impl AsRef<Path>, opt: &crate::opt::OptOptions) -> Result<Program, Error> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let source = crate::syntax::read_source(path, &name).map_err(|e| Error::Io { path: name.clone(), message: e.to_string() })?;
        let source = source.map_err(|(s, d)| Error::Compile { rendered: diag::render(&s, std::slice::from_ref(&d)), diagnostics: vec![d] })?;
        Program::from_source_with(&name, &source.text, opt)
    }

    /// Compile source text with the given optimiser options (`-O0`, a
    /// user schedule, fuel, extra rules).
    pub fn from_source_with(name: &str, text: &str, opt: &crate::opt::OptOptions) -> Result<Program, Error> {
        let source = Source::new(name, text);
        let diagnostics = check_source(&source, opt.single_precision);
        if !diagnostics.0.is_empty() {
            return Err(Error::Compile { rendered: diag::render(&source, &diagnostics.0), diagnostics: diagnostics.0 });
        }
        let lowered = diagnostics.1.expect("lowering succeeded when no diagnostics were reported");
        crate::ir::pass::check_module("lower", &lowered.module)?;
        let module = crate::ad::expand(&lowered.module).map_err(|e| {
            let at = e.loc.as_ref().map(|l| source.offset_of(l.line, l.col)).unwrap_or(0);
            let d = Diagnostic::new(e.message, at..at + 1).label("while differentiating this");
            Error::Compile { rendered: diag::render(&source, std::slice::from_ref(&d)), diagnostics: vec![d] }
        })?;
        crate::ir::pass::check_module("ad", &module)?;
        // `expanded` keeps calls with user rules as `custom_jvp` nodes, for
        // derivatives of whole entries; what runs has their bodies
        let (optimized, report) = crate::opt::optimize(&crate::ad::inline_rules(&module), opt).map_err(optimize_error)?;
        Ok(Program { source, lowered: lowered.module, expanded: module, module: optimized, report, opt: opt.clone(), unproven_checks: lowered.unproven_checks })
    }

    /// The source the program was compiled from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The core IR that runs (after every stage), one function per entry point.
    pub fn module(&self) -> &ir::Module {
        &self.module
    }

    /// The core IR after the named stage: `lower` (derivative operators
    /// still as `jvp` nodes), `ad` (derivatives expanded) or `opt`
    /// (optimised: what runs).
    pub fn module_at(&self, stage: Stage) -> &ir::Module {
        match stage {
            Stage::Lower => &self.lowered,
            Stage::Ad => &self.expanded,
            Stage::Opt => &self.module,
        }
    }

    /// What the optimiser did: rules fired per entry, steps, the trace.
    pub fn opt_report(&self) -> &crate::opt::Report {
        &self.report
    }

    /// Bounds checks the compiler could not prove (location, description).
    pub fn unproven_checks(&self) -> &[(Loc, String)] {
        &self.unproven_checks
    }

    /// Names of the entry points in declaration order.
    pub fn entry_names(&self) -> Vec<&str> {
        self.module.functions.iter().map(|f| f.name.as_str()).collect()
    }

    /// Look up an entry point by name.
    pub fn entry(&self, name: &str) -> Result<Entry<'_>, Error> {
        match self.module.functions.iter().find(|f| f.name == name) {
            Some(func) => Ok(Entry { func, expanded: self.expanded.functions.iter().find(|f| f.name == name), opt: &self.opt }),
            None => Err(Error::NoEntry {
                name: name.to_string(),
                available: if self.module.functions.is_empty() { "(none)".to_string() } else { self.entry_names().join(", ") },
            }),
        }
    }
}

/// ` (did you mean `dot`?)` when an entry of `available` (comma-separated)
/// is close to `name`.
fn did_you_mean(name: &str, available: &str) -> String {
    match crate::diag::closest_name(name, available.split(", "), usize::MAX) {
        Some(c) => format!(" (did you mean `{c}`?)"),
        None => String::new(),
    }
}

/// The optimiser's error: out of fuel is the user's schedule, invalid IR a
/// compiler bug.
fn optimize_error(e: crate::opt::OptError) -> Error {
    match e {
        crate::opt::OptError::Invalid(invalid) => invalid.into(),
        e @ crate::opt::OptError::OutOfFuel { .. } => Error::Optimize(e.to_string()),
    }
}

/// Parse and lower, collecting every diagnostic of both stages.
fn check_source(source: &Source, single_precision: bool) -> (Vec<Diagnostic>, Option<lower::Lowered>) {
    let (mut ast, mut diags) = crate::syntax::parse_checkable(source);
    if single_precision {
        ast.in_single_precision();
    }
    let opts = LowerOptions { single_precision, ..LowerOptions::default() };
    if !diags.is_empty() {
        // Still check the declarations that are independent of the syntax errors.
        if !ast.decls.is_empty()
            && let Err(ds) = lower::lower(&ast, source, &opts)
        {
            diags.extend(ds);
        }
        return (diags, None);
    }
    match lower::lower(&ast, source, &opts) {
        Ok(l) => (diags, Some(l)),
        Err(ds) => {
            diags.extend(ds);
            (diags, None)
        }
    }
}

/// An entry point ready to be called.
pub struct Entry<'p> {
    func: &'p Function,
    /// the entry as the `ad` stage left it (before optimisation)
    expanded: Option<&'p Function>,
    /// how the program was optimised: derivatives built on demand get the same
    opt: &'p crate::opt::OptOptions,
}

impl<'p> Entry<'p> {
    /// The IR of this entry point.
    pub fn function(&self) -> &'p Function {
        self.func
    }

    /// Parameter names and their surface shapes.
    pub fn params(&self) -> &'p [(String, Shape)] {
        &self.func.param_shapes
    }

    /// Call with one value per parameter (tuples as `Value::Tuple`).
    pub fn call(&self, args: &[Value]) -> Result<Value, Error> {
        self.call_counting(args).map(|(v, _)| v)
    }

    /// The forward derivative: the result at `args` and its tangent along
    /// `tangents` (one per parameter, same shapes), with the operation
    /// counts of the differentiated program.
    pub fn jvp(&self, args: &[Value], tangents: &[Value]) -> Result<((Value, Value), OpCounts), Error> {
        let g = self.jvp_function()?;
        let all: Vec<Value> = args.iter().chain(tangents).cloned().collect();
        let (sizes, flat) = bind_arguments(&g, &all)?;
        let mut counts = OpCounts::default();
        let results = interp::run(&g, &sizes, &flat, &mut counts).map_err(|e| Error::Runtime(e.message))?;
        let mut it = results.into_iter();
        let y = rebuild(&self.func.result_shape, &mut it);
        let dy = rebuild(&self.func.result_shape, &mut it);
        Ok(((y, dy), counts))
    }

    /// The reverse derivative: the result at `args` and the cotangent of
    /// every parameter given the result's cotangent `ybar` (same shape as
    /// the result), with the operation counts of the differentiated program.
    pub fn vjp(&self, args: &[Value], ybar: &Value) -> Result<((Value, Value), OpCounts), Error> {
        let g = self.vjp_function()?;
        let all: Vec<Value> = args.iter().cloned().chain(std::iter::once(ybar.clone())).collect();
        let (sizes, flat) = bind_arguments(&g, &all)?;
        let mut counts = OpCounts::default();
        let results = interp::run(&g, &sizes, &flat, &mut counts).map_err(|e| Error::Runtime(e.message))?;
        let mut it = results.into_iter();
        let y = rebuild(&self.func.result_shape, &mut it);
        let xbar = self.func.param_shapes.iter().map(|(_, s)| rebuild(s, &mut it)).collect();
        Ok(((y, Value::Tuple(xbar)), counts))
    }

    /// The forward derivative of this entry as a function of its
    /// parameters then one tangent per parameter, optimised like the program.
    pub fn jvp_function(&self) -> Result<Function, Error> {
        let f = self.primal_before_ad()?;
        let g = crate::ad::jvp_function(&f).map_err(|e| self.cannot_differentiate(e))?;
        crate::ir::pass::check_function("ad (jvp_function)", &g)?;
        self.optimized("forward", g)
    }

    /// The primal that derivatives are built from: the entry optimised
    /// without the rules whose output differentiates badly
    /// (`opt::NOT_BEFORE_AD`); the entry itself where those never fired.
    fn primal_before_ad(&self) -> Result<Function, Error> {
        let Some(expanded) = self.expanded else { return Ok(self.func.clone()) };
        if self.opt.level == crate::opt::Level::O0 {
            return Ok(expanded.clone());
        }
        let module = crate::ir::Module { functions: vec![expanded.clone()] };
        let (mut m, _) = crate::opt::optimize(&module, &self.opt.before_ad()).map_err(optimize_error)?;
        Ok(m.functions.pop().expect("one function in, one out"))
    }

    /// The reverse derivative of this entry as a function of its
    /// parameters then the result's cotangent, optimised like the program.
    pub fn vjp_function(&self) -> Result<Function, Error> {
        let f = self.primal_before_ad()?;
        let g = crate::ad::vjp_function(&f).map_err(|e| self.cannot_differentiate(e))?;
        crate::ir::pass::check_function("ad (vjp_function)", &g)?;
        self.optimized("reverse", g)
    }

    fn cannot_differentiate(&self, e: crate::ad::AdError) -> Error {
        let at = e.loc.map(|l| format!(" (at {}:{}:{})", l.file, l.line, l.col)).unwrap_or_default();
        Error::Arguments(format!("cannot differentiate `{}`: {}{at}", self.func.name, e.message))
    }

    fn optimized(&self, mode: &str, g: Function) -> Result<Function, Error> {
        let module = crate::ir::Module { functions: vec![g] };
        // the derivative is a new function: optimised whatever entries were chosen
        let opt = crate::opt::OptOptions { entries: None, ..self.opt.clone() };
        let (mut m, _) = crate::opt::optimize(&module, &opt).map_err(optimize_error)?;
        let g = m.functions.pop().expect("one function in, one out");
        if let Err(e) = crate::ir::verify::verify_function(&g) {
            return Err(Error::Arguments(format!("internal: the {mode} derivative of `{}` does not verify: {e}", self.func.name)));
        }
        Ok(g)
    }

    /// Call and also return the interpreter's operation counts.
    pub fn call_counting(&self, args: &[Value]) -> Result<(Value, OpCounts), Error> {
        let (sizes, flat) = bind_arguments(self.func, args)?;
        let mut counts = OpCounts::default();
        let results = interp::run(self.func, &sizes, &flat, &mut counts).map_err(|e| Error::Runtime(e.message))?;
        let mut it = results.into_iter();
        let value = rebuild(&self.func.result_shape, &mut it);
        Ok((value, counts))
    }
}

/// Check arguments against the entry's parameters and bind size parameters
/// from their shapes. Returns the size values (in `size_params` order) and
/// the flat argument list.
fn bind_arguments<A: ArgLike>(func: &Function, args: &[A]) -> Result<(Vec<i64>, Vec<A>), Error> {
    if args.len() != func.param_shapes.len() {
        return Err(Error::Arguments(format!(
            "entry `{}` takes {} argument{} ({}), but {} {} given",
            func.name,
            func.param_shapes.len(),
            if func.param_shapes.len() == 1 { "" } else { "s" },
            func.param_shapes.iter().map(|(n, s)| format!("{n}: {}", shape_str(func, s))).collect::<Vec<_>>().join(", "),
            args.len(),
            if args.len() == 1 { "was" } else { "were" }
        )));
    }
    let mut flat = vec![];
    let mut leaves = vec![];
    for ((name, shape), arg) in func.param_shapes.iter().zip(args) {
        flatten_arg(func, name, shape, arg, &mut flat, &mut leaves)?;
    }
    // Bind size variables: first from plain-variable dimensions, then check all.
    // Where arguments disagree on a size, the one blamed is the one whose
    // length differs from the most common one (the first parameter's among
    // equally common lengths), so that in `f (w: [n]f64) (x: [n]f64) (y: [n]f64)`
    // a `w` of the wrong length is reported as an error about `w`.
    let mut uses: Vec<(VarId, Vec<(usize, i64)>)> = vec![];
    for (k, (_, ty, val)) in leaves.iter().enumerate() {
        let given = val.shape();
        for (d, s) in ty.shape.iter().enumerate() {
            if let Some(v) = s.as_var() {
                match uses.iter_mut().find(|(u, _)| *u == v) {
                    Some((_, l)) => l.push((k, given[d] as i64)),
                    None => uses.push((v, vec![(k, given[d] as i64)])),
                }
            }
        }
    }
    let mut known: HashMap<VarId, i64> = HashMap::new();
    for (v, l) in &uses {
        let count = |g: i64| l.iter().filter(|(_, h)| *h == g).count();
        // the most common length, the earliest among equals
        let best = l.iter().map(|(_, g)| *g).fold(None, |b: Option<i64>, g| match b {
            Some(b) if count(b) >= count(g) => Some(b),
            _ => Some(g),
        });
        let best = best.expect("a size variable is bound by at least one use");
        known.insert(*v, best);
        if let Some(&(k, _)) = l.iter().find(|(_, g)| *g != best) {
            let (name, ty, val) = &leaves[k];
            let from = &leaves[l.iter().find(|(_, g)| *g == best).expect("the best length is used").0].0;
            let sname = func.size_params.iter().find(|(_, x)| x == v).map(|(n, _)| n.clone()).unwrap_or_else(|| func.var_name(*v));
            return Err(Error::Arguments(format!(
                "parameter `{name}` expects shape {} but was given shape {} (with {sname} = {best} from parameter `{from}`)",
                type_str(func, ty),
                val.shape().iter().map(|d| format!("[{d}]")).collect::<String>(),
            )));
        }
    }
    for (name, ty, val) in &leaves {
        let given = val.shape();
        for (d, s) in ty.shape.iter().enumerate() {
            let want = s.eval(&|v| known.get(&v).copied().ok_or_else(|| "unbound".to_string()));
            match want {
                Ok(w) if w == given[d] as i64 => {}
                Ok(_) => return Err(shape_mismatch(func, name, ty, &given, &known)),
                Err(_) => {
                    return Err(Error::Arguments(format!(
                        "cannot determine the size `{}` of parameter `{name}` from the arguments",
                        s.display_with(&|v| func.var_name(v))
                    )));
                }
            }
        }
    }
    let mut sizes = vec![];
    for (sname, v) in &func.size_params {
        match known.get(v) {
            Some(k) => sizes.push(*k),
            None => {
                return Err(Error::Arguments(format!(
                    "size parameter `{sname}` of entry `{}` does not appear in any parameter's shape, so no argument determines it",
                    func.name
                )));
            }
        }
    }
    Ok((sizes, flat))
}

type Leaf<'a, A> = (String, &'a ir::Type, A);

fn flatten_arg<'a, A: ArgLike>(func: &Function, name: &str, shape: &'a Shape, arg: &A, flat: &mut Vec<A>, leaves: &mut Vec<Leaf<'a, A>>) -> Result<(), Error> {
    match (shape, arg.tuple()) {
        (Shape::Tuple(shapes), Some(vals)) if shapes.len() == vals.len() => {
            for (i, (s, v)) in shapes.iter().zip(vals).enumerate() {
                flatten_arg(func, &format!("{name}.{i}"), s, v, flat, leaves)?;
            }
            Ok(())
        }
        (Shape::Leaf(ty), _) if arg.elem() == Some(ty.elem) && arg.shape().len() == ty.rank() => {
            flat.push(arg.clone());
            leaves.push((name.to_string(), ty, arg.clone()));
            Ok(())
        }
        _ => Err(Error::Arguments(format!("parameter `{name}` expects {}, but was given {}", shape_str(func, shape), describe_value(arg)))),
    }
}

fn shape_mismatch(func: &Function, name: &str, ty: &ir::Type, given: &[usize], known: &HashMap<VarId, i64>) -> Error {
    let bound: Vec<String> = func.size_params.iter().filter_map(|(n, v)| known.get(v).map(|k| format!("{n} = {k}"))).collect();
    Error::Arguments(format!(
        "parameter `{name}` expects shape {} but was given shape {}{}",
        type_str(func, ty),
        given.iter().map(|d| format!("[{d}]")).collect::<String>(),
        if bound.is_empty() { String::new() } else { format!(" (with {} from the other arguments)", bound.join(", ")) }
    ))
}

fn describe_value<A: ArgLike>(v: &A) -> String {
    match v.tuple() {
        Some(vs) => format!("a tuple of {} values", vs.len()),
        None => {
            let dims: String = v.shape().iter().map(|d| format!("[{d}]")).collect();
            format!("a value of type {dims}{}", v.elem().map(Scalar::name).unwrap_or("?"))
        }
    }
}

fn rebuild(shape: &Shape, it: &mut impl Iterator<Item = Value>) -> Value {
    match shape {
        Shape::Leaf(_) => it.next().expect("interpreter returned one value per result leaf"),
        Shape::Tuple(ts) => Value::Tuple(ts.iter().map(|t| rebuild(t, it)).collect()),
    }
}

// ---- choosing a backend -------------------------------------------------

use crate::backend::c;
pub use crate::backend::c::{CallOptions, CallStats, Team};
use std::sync::Arc;

/// Which backend runs a program's entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The reference interpreter.
    Interp,
    /// C with OpenMP, compiled by the system C compiler and loaded.
    C,
}

/// A program prepared for one backend. `Send + Sync`: many threads may call
/// its entries at once.
pub struct Compiled {
    functions: Vec<Function>,
    lib: Option<Arc<c::Library>>,
    options: CallOptions,
}

impl Program {
    /// Prepare every entry for `backend`: for `Backend::C`, generate C,
    /// compile it (or find it in the cache) and load it. An entry the C
    /// backend refuses reports why when called ([`CompiledEntry::refused`]).
    pub fn compile(&self, backend: Backend) -> Result<Compiled, Error> {
        self.compile_with(backend, &c::COptions::default())
    }

    /// [`Program::compile`] with C compiler options (extra flags).
    pub fn compile_with(&self, backend: Backend, opts: &c::COptions) -> Result<Compiled, Error> {
        Compiled::from_functions(self.module.functions.clone(), backend, opts)
    }

    /// Prepare only the named entries (the C compiler's time grows with the
    /// code it is given: `arden run` compiles just the entry it runs).
    pub fn compile_entries(&self, names: &[&str], backend: Backend, opts: &c::COptions) -> Result<Compiled, Error> {
        for n in names {
            self.entry(n)?;
        }
        let functions = self.module.functions.iter().filter(|f| names.contains(&f.name.as_str())).cloned().collect();
        Compiled::from_functions(functions, backend, opts)
    }
}

impl Compiled {
    /// Prepare a set of functions (e.g. gathered from several programs, as
    /// the random-program tests do to compile many programs at once).
    /// Entries are then found by position with [`Compiled::entry_at`].
    pub fn from_functions(functions: Vec<Function>, backend: Backend, opts: &c::COptions) -> Result<Compiled, Error> {
        let lib = match backend {
            Backend::Interp => None,
            Backend::C => {
                let m = ir::Module { functions: functions.clone() };
                Some(Arc::new(c::compile(&m, opts).map_err(|e| Error::Backend(e.0))?))
            }
        };
        Ok(Compiled { functions, lib, options: CallOptions::default() })
    }

    /// The entry at position `k` (declaration order).
    pub fn entry_at(&self, k: usize) -> Option<CompiledEntry<'_>> {
        (k < self.functions.len()).then_some(CompiledEntry { c: self, k })
    }

    pub fn backend(&self) -> Backend {
        if self.lib.is_some() { Backend::C } else { Backend::Interp }
    }

    /// The loaded library (C backend only).
    pub fn library(&self) -> Option<&c::Library> {
        self.lib.as_deref()
    }

    /// Threads and parallel thresholds for every later call.
    pub fn set_options(&mut self, options: CallOptions) {
        self.options = options;
    }

    pub fn options(&self) -> CallOptions {
        self.options
    }

    pub fn entry(&self, name: &str) -> Result<CompiledEntry<'_>, Error> {
        match self.functions.iter().position(|f| f.name == name) {
            Some(k) => Ok(CompiledEntry { c: self, k }),
            None => Err(Error::NoEntry {
                name: name.to_string(),
                available: if self.functions.is_empty() {
                    "(none)".to_string()
                } else {
                    self.functions.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ")
                },
            }),
        }
    }
}

/// An entry of a [`Compiled`] program.
pub struct CompiledEntry<'c> {
    c: &'c Compiled,
    k: usize,
}

impl CompiledEntry<'_> {
    pub fn function(&self) -> &Function {
        &self.c.functions[self.k]
    }

    /// Why the C backend refused this entry (None when it runs compiled, and
    /// on the interpreter backend).
    pub fn refused(&self) -> Option<&str> {
        self.c.lib.as_ref().and_then(|l| l.refused(self.k))
    }

    /// Call with one value per parameter (tuples as `Value::Tuple`).
    pub fn call(&self, args: &[Value]) -> Result<Value, Error> {
        self.call_with(args, &self.c.options).map(|(v, _)| v)
    }

    /// Call with explicit options; the C backend also returns its
    /// statistics (peak bytes allocated, buffers left).
    pub fn call_with(&self, args: &[Value], options: &CallOptions) -> Result<(Value, Option<CallStats>), Error> {
        let func = &self.c.functions[self.k];
        let (sizes, flat) = bind_arguments(func, args)?;
        let (results, stats) = match &self.c.lib {
            None => {
                let mut counts = OpCounts::default();
                (interp::run(func, &sizes, &flat, &mut counts).map_err(|e| Error::Runtime(e.message))?, None)
            }
            Some(lib) => {
                let (r, s) = lib.call(self.k, func, &sizes, &flat, options).map_err(Error::Runtime)?;
                (r, Some(s))
            }
        };
        let mut it = results.into_iter();
        Ok((rebuild(&func.result_shape, &mut it), stats))
    }
}

// ---- borrowed arguments -------------------------------------------------

pub use crate::runtime::{ArgRef, ArrayRef, ForeignBuf, OutArray, Output};

/// What argument checking needs of an argument: owned [`Value`]s and
/// borrowed [`ArgRef`]s are checked alike, with the same messages.
trait ArgLike: Clone {
    fn elem(&self) -> Option<Scalar>;
    fn shape(&self) -> Vec<usize>;
    fn tuple(&self) -> Option<&[Self]>;
}

impl ArgLike for Value {
    fn elem(&self) -> Option<Scalar> {
        Value::elem(self)
    }
    fn shape(&self) -> Vec<usize> {
        Value::shape(self)
    }
    fn tuple(&self) -> Option<&[Value]> {
        match self {
            Value::Tuple(vs) => Some(vs),
            _ => None,
        }
    }
}

impl ArgLike for ArgRef<'_> {
    fn elem(&self) -> Option<Scalar> {
        ArgRef::elem(self)
    }
    fn shape(&self) -> Vec<usize> {
        ArgRef::shape(self)
    }
    fn tuple(&self) -> Option<&[Self]> {
        match self {
            ArgRef::Tuple(vs) => Some(vs),
            _ => None,
        }
    }
}

impl CompiledEntry<'_> {
    /// [`CompiledEntry::call_with`] with borrowed arguments, checked the same
    /// way (same errors), and results that own their buffers ([`Output`]).
    /// No copies where none are needed: both backends read array arguments
    /// in place (the interpreter copies bool arrays: see
    /// [`ArrayRef::to_borrowed`]); array results keep the buffer the backend
    /// made (a Rust `Vec`, or the C runtime's as a [`ForeignBuf`]), and are
    /// copied only when they are (views of) arguments or share a buffer
    /// with another result. With `counts`, the call runs on the interpreter
    /// whatever the backend and adds its operation counts there.
    pub fn call_borrowed(&self, args: &[ArgRef], options: &CallOptions, counts: Option<&mut OpCounts>) -> Result<(Output, Option<CallStats>), Error> {
        let func = &self.c.functions[self.k];
        let (sizes, flat) = bind_arguments(func, args)?;
        let (results, stats) = match (&self.c.lib, counts) {
            (Some(lib), None) => {
                let (r, s) = lib.call_out(self.k, func, &sizes, &flat, options).map_err(Error::Runtime)?;
                (r, Some(s))
            }
            (_, counts) => {
                let mut local = OpCounts::default();
                let counts = counts.unwrap_or(&mut local);
                let r = interp::run_borrowed(func, &sizes, &flat, counts).map_err(|e| Error::Runtime(e.message))?;
                (r.into_iter().map(Output::from_value).collect::<Vec<_>>(), None)
            }
        };
        let mut it = results.into_iter();
        Ok((rebuild_output(&func.result_shape, &mut it), stats))
    }
}

fn rebuild_output(shape: &Shape, it: &mut impl Iterator<Item = Output>) -> Output {
    match shape {
        Shape::Leaf(_) => it.next().expect("one output per result leaf"),
        Shape::Tuple(ts) => Output::Tuple(ts.iter().map(|t| rebuild_output(t, it)).collect()),
    }
}

#[cfg(test)]
mod borrowed_tests {
    use super::*;

    /// On the interpreter, a result that is a borrowed argument is copied
    /// before it leaves the call (never a view of the caller's memory).
    #[test]
    fn interp_results_never_view_borrowed_arguments() {
        let src = "entry id [n] (x: [n]f64) : [n]f64 = x\nentry s [n] (x: [n]f64) : f64 = sum x\n";
        let c = Program::from_source("t.ard", src).unwrap().compile(Backend::Interp).unwrap();
        let xs = vec![1.0, 2.0, 3.0];
        let arg = [ArgRef::Array { shape: vec![3], data: ArrayRef::F64(&xs) }];
        let (out, _) = c.entry("id").unwrap().call_borrowed(&arg, &CallOptions::default(), None).unwrap();
        match out {
            Output::Array { shape, data: OutArray::Owned(d) } => {
                assert_eq!(shape, vec![3]);
                assert!(!d.is_borrowed());
                assert_ne!(d.as_ptr(), xs.as_ptr() as *const u8);
                assert_eq!(d, crate::runtime::ArrayData::F64(xs.clone().into()));
            }
            o => panic!("{o:?}"),
        }
        let (out, _) = c.entry("s").unwrap().call_borrowed(&arg, &CallOptions::default(), None).unwrap();
        assert!(matches!(out, Output::F64(x) if x == 6.0));
        assert_eq!(xs, [1.0, 2.0, 3.0]);
    }
}
