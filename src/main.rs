//! `arden`: the command line, a thin client of the library API
//! (`arden::Program`, `Entry`, `runtime::data`).
//!
//! Exit codes: 0 success; 1 user error (compile error, bad argument,
//! run-time error, unreadable file); 2 usage error (bad flags, and `run`
//! without `--entry` on a program with several entry points).

use arden::api::Error;
use arden::backend::limits;
use arden::ir::{self, Function};
use arden::runtime::data;
use arden::{Program, Value};
use clap::{Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod bench;

/// Stack for the compiling thread: compilation recurses over the program.
const STACK_SIZE: usize = 256 << 20;

/// Counts the bytes the process holds, so that `--max-memory` is checked
/// against them.
#[global_allocator]
static ALLOC: limits::CountingAlloc = limits::CountingAlloc;

#[derive(Parser, Debug)]
#[command(
    name = "arden",
    version,
    about = "Compiler and runtime for the arden array language",
    long_about = "Compiler and runtime for the arden array language: a strict, pure \
functional language with sizes in the types, index safety and differentiation built in.\n\n\
Examples:\n  \
arden check model.ard\n  \
arden run dot.ard --entry dot --arg '[1, 2, 3]' --arg '[4, 5, 6]'\n  \
arden ir dot.ard --entry dot\n\n\
Exit codes: 0 success, 1 user error (compile error, bad argument, run-time error), 2 usage error.",
    propagate_version = true,
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Check(CheckArgs),
    Run(RunArgs),
    Ir(IrArgs),
    Opt(OptCmdArgs),
    Build(BuildArgs),
    Gradbench(arden::gradbench::Args),
    Bench(bench::BenchArgs),
}

/// Write a C library for the program's entry points.
#[derive(clap::Args, Debug)]
#[command(
    about = "Write the program as a C library (a .c and a documented .h)",
    long_about = "Compile a program to C and write FILE_STEM.c and FILE_STEM.h into a directory: one \
function `arden_ENTRY` per entry point (inputs as pointers plus sizes, array results allocated \
by the library, an error code and message). The header's first comment gives the one-line \
command that compiles it into a C program. `--prefix P` puts P instead of `arden_` before the entry names (libraries \
with different prefixes link into one program: all else in them is `static`); an entry \
name with a prime is encoded one-to-one (`f'` becomes `arden_0f_p`, `_` in it `_u`).\n\n\
Examples:\n  \
arden build dot.ard -o out/\n  \
arden build dot.ard -o out/ --prefix dot_\n  \
arden build dot.ard --emit-c > dot.c"
)]
struct BuildArgs {
    /// The program (a `.ard` file), e.g. `dot.ard`.
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// The directory to write the `.c` and `.h` into (created if missing).
    #[arg(long, short = 'o', value_name = "DIR", required_unless_present = "emit_c")]
    output: Option<PathBuf>,

    /// Print the C library to stdout instead of writing files.
    #[arg(long)]
    emit_c: bool,

    /// The prefix of the exported C names (default `arden_`): entry `dot`
    /// becomes `PREFIXdot` and the library's free function `PREFIXfree`.
    /// A C identifier starting with a letter (not `ard_`). An entry name
    /// with a prime is encoded one-to-one (`f'` becomes `PREFIX0f_p`).
    #[arg(long, value_name = "PREFIX", default_value = arden::backend::c::emit::DEFAULT_PREFIX)]
    prefix: String,

    #[command(flatten)]
    opt: OptArgs,
}

/// The optimiser's options, shared by `run`, `ir`, `build` and `opt`.
#[derive(clap::Args, Debug, Clone)]
struct OptArgs {
    /// Optimisation level: `-O0` runs what automatic differentiation
    /// produced; `-O1` (the default) runs the rewrite schedule (see
    /// `arden opt --print-default`).
    #[arg(short = 'O', value_name = "LEVEL", default_value = "1", value_parser = clap::value_parser!(u8).range(0..=1))]
    opt_level: u8,

    /// Optimise with the strategy in FILE instead of the default schedule,
    /// e.g. `--schedule examples/paper001.sched` (implies -O1).
    #[arg(long, value_name = "FILE")]
    schedule: Option<PathBuf>,

    /// Stop a schedule after this many strategy steps per entry point (a
    /// schedule that never finishes is reported, never hangs).
    #[arg(long, value_name = "STEPS", default_value_t = arden::opt::DEFAULT_FUEL)]
    fuel: u64,

    /// Verify the IR after lowering, differentiation and each optimiser
    /// phase, and name the pass that left it invalid (a compiler bug);
    /// for compiler development. Also `ARDEN_VERIFY_PASSES=1`.
    #[arg(long)]
    verify_passes: bool,

    /// Compile every `trace "label" e` to plain `e`: nothing is printed and
    /// the program runs as if it had no traces (for benchmarks).
    #[arg(long)]
    no_trace: bool,

    /// The float type `f64` stands for: `f32` runs the program in single
    /// precision (every `f64` type, literal suffix and conversion `f64 x`
    /// read as `f32`; unsuffixed literals follow), so one program serves
    /// both precisions. Array arguments must then be f32 (`.npy` files of
    /// float32); JSON numbers are rounded to f32.
    #[arg(long, value_name = "f64|f32", default_value = "f64", value_parser = ["f64", "f32"])]
    precision: String,
}

impl OptArgs {
    /// The library's options; reads and parses the schedule file.
    fn options(&self) -> Result<arden::opt::OptOptions, Failure> {
        if self.verify_passes {
            arden::ir::pass::set_checking(true);
        }
        let mut o = arden::opt::OptOptions::level(self.opt_level);
        o.fuel = self.fuel;
        o.traces = !self.no_trace;
        o.single_precision = self.precision == "f32";
        if let Some(path) = &self.schedule {
            check_program_file(path)?;
            let text = std::fs::read_to_string(path).map_err(|e| Failure::User(format!("cannot read {}: {e}", path.display())))?;
            let names: Vec<&str> = arden::opt::rules::builtin().iter().map(|r| r.name).collect();
            let sched = arden::opt::schedule::parse(&path.display().to_string(), &text, &names).map_err(|e| Failure::Rendered(e.rendered))?;
            o.level = arden::opt::Level::O1;
            o.schedule = Some(sched);
        }
        Ok(o)
    }

    fn load(&self, file: &Path) -> Result<Program, Failure> {
        Ok(Program::from_file_with(file, &self.options()?)?)
    }

    /// [`OptArgs::load`] optimising only `entry` when it is named (the
    /// only one that will run; with several entries and none named, the
    /// command stops with a usage error anyway).
    fn load_for(&self, file: &Path, entry: Option<&str>) -> Result<Program, Failure> {
        let mut o = self.options()?;
        o.entries = entry.map(|e| vec![e.to_string()]);
        Ok(Program::from_file_with(file, &o)?)
    }
}

/// Type- and size-check a program.
#[derive(clap::Args, Debug)]
#[command(
    about = "Type- and size-check a program",
    long_about = "Type- and size-check a program without running it.\n\n\
Prints `FILE: ok (N entry points)` on success. On errors, prints every diagnostic with its \
source location and exits with status 1.\n\n\
Every call is inlined while checking; a program that inlines to more than \
ARDEN_MAX_INLINE_STATEMENTS IR statements (default 1000000) or nests calls deeper than \
ARDEN_MAX_INLINE_DEPTH (default 150) is refused with the call chain (environment variables).\n\n\
Examples:\n  \
arden check model.ard\n  \
arden check model.ard --strict-bounds"
)]
struct CheckArgs {
    /// The program to check (a `.ard` file), e.g. `model.ard`.
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// Fail if any index could not be proven in bounds.
    ///
    /// Lists every bounds check the compiler could not prove (each would be
    /// checked at run time) as `FILE:LINE:COL: DESCRIPTION` and exits with
    /// status 1 if there is any. Example: `arden check model.ard --strict-bounds`.
    #[arg(long)]
    strict_bounds: bool,
}

/// Run an entry point.
#[derive(clap::Args, Debug)]
#[command(
    about = "Run an entry point and print its result as JSON",
    long_about = "Compile a program, call one entry point with the given arguments and print \
the result as JSON on one line (non-finite floats as NaN, Infinity, -Infinity).\n\n\
Arguments bind to the entry's parameters in order. Each is a JSON scalar or nested JSON array \
(`3`, `2.5`, `[[1,2],[3,4]]`, `true`), a JSON array with one element per component for a tuple \
parameter, or `@file.json` / `@file.npy` to read it from a file. Arguments whose shapes \
contradict the entry's size parameters are refused before the call.\n\n\
Examples:\n  \
arden run dot.ard --arg '[1, 2, 3]' --arg '[4, 5, 6]'\n  \
arden run model.ard --entry loss --arg @weights.npy --arg @data.json\n  \
arden run model.ard --entry predict --arg @x.npy --output y.npy"
)]
struct RunArgs {
    /// The program to run (a `.ard` file), e.g. `dot.ard`.
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// The entry point to call, e.g. `--entry dot`.
    ///
    /// May be left out when the program has exactly one entry point.
    #[arg(long, short = 'e', value_name = "NAME")]
    entry: Option<String>,

    /// One argument per parameter, in order, e.g. `--arg '[1, 2, 3]'`.
    ///
    /// JSON text (`3`, `2.5`, `true`, `[[1, 2], [3, 4]]`; NaN, Infinity and
    /// -Infinity are accepted for floats), a JSON array of the components for
    /// a tuple parameter, or `@path.json` / `@path.npy` to read the value
    /// from a file (`.npy`: float64, float32, int64, int32 or bool, C or Fortran order).
    /// Files must be regular files (not devices or pipes) of at most 1 GiB;
    /// the environment variable ARDEN_MAX_INPUT_BYTES changes the limit.
    /// Integers must fit their type and f32 values must not overflow.
    /// Example: `--arg '[1, 2, 3]' --arg @b.npy`.
    #[arg(long = "arg", short = 'a', value_name = "VALUE", allow_hyphen_values = true)]
    args: Vec<String>,

    #[command(flatten)]
    opt: OptArgs,

    /// Write the result to a file instead of printing it, e.g. `--output out.npy`.
    ///
    /// A path ending in `.json` gets the JSON text; any other path gets NumPy
    /// `.npy` format, which needs a single scalar or array result (not a tuple).
    /// The file is replaced atomically (written to a temporary file in the
    /// same directory, then renamed): a failed write leaves an old file intact.
    #[arg(long, short = 'o', value_name = "PATH")]
    output: Option<PathBuf>,

    /// Print the interpreter's operation counts to stderr after the result.
    ///
    /// Prints `ops: arith=A reads=R writes=W` (arithmetic operations, array
    /// element reads, array element writes); the counts are deterministic.
    /// Entries using reverse mode (`grad`, `vjp`...) also print `stored=S`:
    /// the values stored for the backward sweep, all alive when it starts.
    /// Example: `arden run dot.ard --arg '[1,2]' --arg '[3,4]' --count-ops`.
    #[arg(long)]
    count_ops: bool,

    /// Memory limit for the run, e.g. `--max-memory 512M` or `4G`.
    ///
    /// A number of bytes with an optional unit K, M, G or T (powers of
    /// 1024). An array that would take the process over the limit stops
    /// the run with an error naming the statement and the size asked for.
    /// Default: the machine's available memory (MemAvailable in
    /// /proc/meminfo).
    #[arg(long, value_name = "SIZE", value_parser = limits::parse_size)]
    max_memory: Option<u64>,

    /// Stop the run with an error after SECONDS, e.g. `--timeout 10`.
    ///
    /// The error names the loop that was running. Counts the entry's run,
    /// not compilation. Default: no limit (Ctrl-C also stops a run, with
    /// exit code 130).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    timeout: Option<f64>,

    /// The backend that runs the entry: `c` or `interp`.
    ///
    /// `c` generates C with OpenMP for the entry, compiles it with `$CC` or
    /// `cc` (cached under `ARDEN_CACHE_DIR` or the user cache directory, so
    /// later runs do not compile again; extra compiler flags from
    /// `ARDEN_CFLAGS`) and calls it in-process; `interp` is the reference
    /// interpreter. Default: `c` when a C compiler is found, else `interp`
    /// with a note (also when the C backend fails, with the reason);
    /// `--count-ops` alone means `interp`. Both backends honour
    /// `--max-memory`, `--timeout` and Ctrl-C. Entries of more than 50,000
    /// IR statements run on the interpreter (C compilers take minutes over
    /// them; `ARDEN_C_MAX_STATEMENTS` changes the limit).
    #[arg(long, value_enum, value_name = "BACKEND")]
    backend: Option<BackendArg>,

    /// Threads for the C backend, e.g. `--threads 4` (default:
    /// `ARDEN_NUM_THREADS`, else every core, fewer while other processes
    /// keep cores busy; `ARDEN_DYNAMIC_THREADS=0|1` turns that off or on).
    /// `--threads 1` runs without OpenMP.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: Option<u16>,

    /// Let the C compiler reassociate floating-point arithmetic (C backend).
    ///
    /// Sums and dot products then run as several partial sums in vector
    /// registers: often 2-3x faster for reduction-heavy code (GMM, k-means,
    /// least squares), with results that differ in the last bits (and, where
    /// the order decides it, in overflow or cancellation) and the sign of a
    /// zero result unspecified. NaN and infinities still propagate, except
    /// that `x - x` may become 0 for an infinite or NaN `x`. The interpreter
    /// always computes exactly as written. Without the flag, the C backend
    /// at one thread gives bitwise the interpreter's results.
    #[arg(long)]
    fast_math: bool,

    /// Print the backend, compile time, run time and (C backend) the peak
    /// bytes of arrays allocated by the call to stderr.
    #[arg(long)]
    stats: bool,
}

/// A positive number of seconds.
fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() && x < 1e9 => Ok(x),
        _ => Err(format!("`{text}` is not a positive number of seconds (e.g. 10 or 0.5)")),
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum BackendArg {
    /// C with OpenMP, compiled and loaded (fast).
    C,
    /// The reference interpreter.
    Interp,
}

/// Print the compiler's intermediate representation.
#[derive(clap::Args, Debug)]
#[command(
    about = "Print the intermediate representation of a program",
    long_about = "Compile a program and print its core IR after a compiler stage, one function \
per entry point. Useful to see what the compiler made of a program and which indexing \
operations carry a run-time bounds check (marked `!`).\n\n\
Examples:\n  \
arden ir dot.ard\n  \
arden ir model.ard --entry loss --stage lower\n  \
arden ir model.ard --stage ad"
)]
struct IrArgs {
    /// The program (a `.ard` file), e.g. `dot.ard`.
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// Print only this entry point, e.g. `--entry dot`.
    #[arg(long, short = 'e', value_name = "NAME")]
    entry: Option<String>,

    /// The compiler stage whose output to print, e.g. `--stage ad`.
    ///
    /// `lower`: the core IR as lowered from the source (inlined, specialised,
    /// with bounds checks; derivative operators still as `jvp` and `vjp`
    /// nodes). `ad`: after automatic differentiation (every `jvp` and `vjp`
    /// expanded into ordinary IR: reverse mode as a forward sweep storing
    /// residuals, then a backward sweep) — this is what runs.
    #[arg(long, value_enum, default_value_t = Stage::Opt, value_name = "STAGE")]
    stage: Stage,

    #[command(flatten)]
    opt: OptArgs,
}

/// Run the optimiser on a program and report what it did.
#[derive(clap::Args, Debug)]
#[command(
    about = "Optimise a program and report which rules fired",
    long_about = "Run the optimiser (rewrite rules scheduled by a strategy, papers 001/002/000) on \
every entry point, or one, and report how often each rule fired, the strategy steps spent, \
the IR's size before and after, and with --trace every rewrite and where it happened. With \
arguments (`--arg`, as for `run`), it also runs the entry on the interpreter before and after \
optimisation and prints both operation counts and whether the results agree.\n\n\
Schedules are text: rule names combined with `;` (then), `<+` (or else), `id`, `fail`, \
`try(s)`, `repeat(s)`, `one(s)`, `all(s)`, `topDown(s)`, `bottomUp(s)`, `normalize(s)`, \
`innermost(s)`, `everywhere(s)`, parentheses, `let NAME = S in ...` and `--` comments. \
`--print-default` shows the default schedule, `--list-rules` every rule.\n\n\
Examples:\n  \
arden opt model.ard --entry grad_loss --trace\n  \
arden opt model.ard --schedule my.sched --entry f --arg '[1, 2]'\n  \
arden opt --print-default > my.sched"
)]
struct OptCmdArgs {
    /// The program (a `.ard` file); not needed with --print-default or --list-rules.
    #[arg(value_name = "FILE", required_unless_present_any = ["print_default", "list_rules"])]
    file: Option<PathBuf>,

    /// Report only this entry point.
    #[arg(long, short = 'e', value_name = "NAME")]
    entry: Option<String>,

    /// Print every rewrite: the rule and the statement it rewrote.
    #[arg(long)]
    trace: bool,

    /// Print the default schedule and exit.
    #[arg(long)]
    print_default: bool,

    /// Print every rule with its one-line description and exit.
    #[arg(long)]
    list_rules: bool,

    /// Arguments for the entry (as for `run`): also count operations before and after.
    #[arg(long = "arg", short = 'a', value_name = "VALUE", allow_hyphen_values = true)]
    args: Vec<String>,

    #[command(flatten)]
    opt: OptArgs,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// The core IR straight after lowering.
    Lower,
    /// The core IR after automatic differentiation.
    Ad,
    /// The core IR after the optimiser: what runs.
    Opt,
}

/// How a command failed.
#[derive(Debug, PartialEq)]
enum Failure {
    /// Printed as `error: MSG`, exit status 1.
    User(String),
    /// Already formatted diagnostics, printed as they are, exit status 1.
    Rendered(String),
    /// Printed as `error: MSG` with a pointer to `--help`, exit status 2.
    Usage { msg: String, command: &'static str },
    /// A run stopped by Ctrl-C: printed as `error: MSG`, exit status 130.
    Interrupted(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        match e {
            Error::Compile { rendered, .. } => Failure::Rendered(rendered),
            other => Failure::User(other.to_string()),
        }
    }
}

type Outcome = Result<(), Failure>;

fn main() -> ExitCode {
    // Help and version exit 0; clap's usage errors exit 2.
    let cli = Cli::parse();
    let worker = std::thread::Builder::new().name("arden".into()).stack_size(STACK_SIZE).spawn(move || {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|info| {
            let msg = panic_message(info.payload());
            let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            eprintln!("internal compiler error: {msg}{at} (please report)");
        }));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| execute(cli)));
        std::panic::set_hook(prev);
        result
    });
    let result = match worker {
        Ok(handle) => handle.join().unwrap_or(Err(Box::new("worker thread failed"))),
        Err(e) => {
            eprintln!("error: cannot start the compiler thread: {e}");
            return ExitCode::from(1);
        }
    };
    let outcome = match result {
        Ok(o) => o,
        // The panic hook already printed the message.
        Err(_) => return ExitCode::from(1),
    };
    let _ = std::io::stdout().flush();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::User(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(1)
        }
        Err(Failure::Rendered(text)) => {
            eprint!("{text}");
            if !text.ends_with('\n') {
                eprintln!();
            }
            ExitCode::from(1)
        }
        Err(Failure::Interrupted(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(130)
        }
        Err(Failure::Usage { msg, command }) => {
            eprintln!("error: {msg}\n\nFor more information, try 'arden {command} --help'.");
            ExitCode::from(2)
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

fn execute(cli: Cli) -> Outcome {
    match cli.command {
        Command::Check(a) => check(&a),
        Command::Run(a) => run(&a),
        Command::Ir(a) => ir_cmd(&a),
        Command::Opt(a) => opt_cmd(&a),
        Command::Build(a) => build_cmd(&a),
        Command::Gradbench(a) => arden::gradbench::main(&a).map_err(Failure::User),
        Command::Bench(a) => bench::bench(&a),
    }
}

/// Write to stdout; a closed pipe (`arden ir f.ard | head`) is not an error.
fn print_out(text: &str) -> Outcome {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::User(format!("cannot write to stdout: {e}"))),
    }
}

/// A result as JSON on stdout, streamed (a result's text may be far larger
/// than memory: 3·10^9 empty rows are 12 GB of `[], `).
fn print_json(value: &Value) -> Outcome {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    match value.write_json(&mut out).and_then(|_| out.write_all(b"\n")).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::User(format!("cannot write to stdout: {e}"))),
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn check(a: &CheckArgs) -> Outcome {
    check_program_file(&a.file)?;
    let prog = Program::from_file(&a.file)?;
    if a.strict_bounds {
        let checks = prog.unproven_checks();
        if !checks.is_empty() {
            let mut text = String::new();
            for (loc, desc) in checks {
                text.push_str(&format!("{loc}: {desc}\n"));
            }
            eprint!("{text}");
            return Err(Failure::User(format!("{} could not be proven", plural(checks.len(), "bounds check", "bounds checks"))));
        }
    }
    let n = prog.entry_names().len();
    print_out(&format!("{}: ok ({})\n", a.file.display(), plural(n, "entry point", "entry points")))
}

/// The entry to use: the one named, or the only one.
fn choose_entry(file: &Path, names: &[&str], requested: Option<&str>, command: &'static str) -> Result<String, Failure> {
    if let Some(name) = requested {
        return Ok(name.to_string());
    }
    match names {
        [one] => Ok(one.to_string()),
        [] => Err(Failure::User(format!("{} has no entry points (declare one with `entry`)", file.display()))),
        many => Err(Failure::Usage {
            msg: format!("{} has {} entry points ({}); choose one with --entry NAME", file.display(), many.len(), many.join(", ")),
            command,
        }),
    }
}

/// Parse the `--arg` values against the entry's parameters.
fn bind_args(func: &Function, specs: &[String]) -> Result<Vec<Value>, Failure> {
    let params = &func.param_shapes;
    if specs.len() != params.len() {
        let list = params.iter().map(|(n, s)| format!("{n}: {}", arden::ir::print::shape_str(func, s))).collect::<Vec<_>>().join(", ");
        let takes = match params.len() {
            0 => "no arguments".to_string(),
            n => format!("{} ({list})", plural(n, "argument", "arguments")),
        };
        return Err(Failure::User(format!(
            "entry `{}` takes {takes} but {} given",
            func.name,
            match specs.len() {
                1 => "1 was".to_string(),
                n => format!("{n} were"),
            }
        )));
    }
    params
        .iter()
        .zip(specs)
        .enumerate()
        .map(|(k, ((name, shape), spec))| data::parse_arg(spec, shape).map_err(|e| Failure::User(format!("argument {} (`{name}`): {e}", k + 1))))
        .collect()
}

fn is_json_path(p: &Path) -> bool {
    p.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// Refuse a program FILE that is not a regular file (`/dev/zero`, a FIFO, a
/// directory) before reading it: reading one may never end.
fn check_program_file(file: &Path) -> Outcome {
    match std::fs::metadata(file) {
        Ok(m) if m.is_dir() => Err(Failure::User(format!("cannot read {}: it is a directory", file.display()))),
        Ok(m) if !m.is_file() => {
            Err(Failure::User(format!("cannot read {}: it is not a regular file (a device, pipe or socket); pass a regular file", file.display())))
        }
        // Missing files and the like are reported by the reader.
        _ => Ok(()),
    }
}

fn run(a: &RunArgs) -> Outcome {
    check_program_file(&a.file)?;
    let prog = a.opt.load_for(&a.file, a.entry.as_deref())?;
    let name = choose_entry(&a.file, &prog.entry_names(), a.entry.as_deref(), "run")?;
    let entry = prog.entry(&name)?;
    let func = entry.function();
    if let Some(out) = &a.output
        && !is_json_path(out)
        && matches!(func.result_shape, ir::Shape::Tuple(_))
    {
        return Err(Failure::User(format!(
            "--output .npy needs a single array result; entry `{}` returns a tuple {}",
            func.name,
            arden::ir::print::shape_str(func, &func.result_shape)
        )));
    }
    let args = bind_args(func, &a.args)?;
    if a.count_ops && a.backend == Some(BackendArg::C) {
        return Err(Failure::Usage { msg: "--count-ops counts the interpreter's operations; it cannot be combined with --backend c".into(), command: "run" });
    }
    start_limits(a);
    let backend = choose_backend(a);
    if a.fast_math && backend == BackendArg::Interp {
        eprintln!("note: --fast-math applies to the C backend only; the interpreter computes exactly as written");
    }
    let compiled = match backend {
        BackendArg::C => compile_entry(&prog, &name, a.backend == Some(BackendArg::C), a.fast_math)?,
        BackendArg::Interp => None,
    };
    // The time limit counts the run, not the compilation.
    if let Some(t) = a.timeout {
        limits::set_timeout(std::time::Duration::from_secs_f64(t));
    }
    if let Some(compiled) = compiled {
        return run_compiled(a, &compiled, &name, &args);
    }
    if a.threads.is_some() {
        eprintln!("note: --threads applies to the C backend only; the interpreter runs on one thread");
    }
    let t0 = std::time::Instant::now();
    if a.count_ops {
        let (value, counts) = entry.call_counting(&args).map_err(stopped_or)?;
        emit_result(a, &value)?;
        let stored = if func.stored.is_empty() { String::new() } else { format!(" stored={}", counts.stored) };
        eprintln!("ops: arith={} reads={} writes={}{stored}", counts.arith, counts.reads, counts.writes);
        Ok(())
    } else {
        let value = entry.call(&args).map_err(stopped_or)?;
        if a.stats {
            eprintln!("stats: backend=interp run={:.3}ms", t0.elapsed().as_secs_f64() * 1e3);
        }
        emit_result(a, &value)
    }
}

/// A run-time error, or the exit for Ctrl-C when that is what stopped it.
fn stopped_or(e: Error) -> Failure {
    match limits::stop() {
        limits::INTERRUPTED => Failure::Interrupted(e.to_string()),
        _ => Failure::from(e),
    }
}

/// `--backend`, else the C backend when a C compiler is found (with a note
/// on stderr when it is not), else the interpreter. `--count-ops` alone
/// means the interpreter (it counts the interpreter's operations).
fn choose_backend(a: &RunArgs) -> BackendArg {
    match a.backend {
        Some(b) => b,
        None if a.count_ops => BackendArg::Interp,
        None if arden::backend::c::find_compiler().is_some() => BackendArg::C,
        None => {
            eprintln!(
                "note: no C compiler found, so this runs on the (much slower) interpreter; install one \
(e.g. `apt-get install gcc`) or set $CC for compiled, multicore runs"
            );
            BackendArg::Interp
        }
    }
}

/// Set the run's memory limit and make Ctrl-C stop it (the time limit
/// starts after compilation, in `run`).
fn start_limits(a: &RunArgs) {
    limits::set_max_memory(a.max_memory.or_else(limits::available_memory));
    // Ctrl-C asks the run to stop (both backends poll the flag in their
    // loops); a second Ctrl-C ends the process at once.
    let _ = ctrlc::set_handler(|| {
        if limits::stop() == limits::INTERRUPTED {
            std::process::exit(130);
        }
        limits::interrupt();
    });
}

/// Compile just the entry `run` calls, with the C backend. Asked for
/// explicitly (`--backend c`), every failure is an error; as the default,
/// a failure is a note on stderr and the run falls back to the
/// interpreter (`None`).
fn compile_entry(prog: &Program, entry: &str, explicit: bool, fast_math: bool) -> Result<Option<arden::Compiled>, Failure> {
    let failed = |why: String| {
        if limits::stop() == limits::INTERRUPTED {
            return Err(Failure::Interrupted("interrupted while compiling".into()));
        }
        if explicit {
            return Err(Failure::User(why));
        }
        eprintln!("note: {why}; running on the interpreter instead");
        Ok(None)
    };
    if arden::backend::c::find_compiler().is_none() {
        return failed("--backend c: no C compiler found (install one, e.g. gcc, or set $CC)".into());
    }
    let compiled = match prog.compile_entries(&[entry], arden::Backend::C, &arden::backend::c::COptions::with_fast_math(fast_math)) {
        Ok(c) => c,
        Err(e) => return failed(e.to_string()),
    };
    if let Some(why) = compiled.entry(entry)?.refused() {
        return failed(format!("the C backend cannot compile `{entry}`: {why}"));
    }
    if limits::stop() == limits::INTERRUPTED {
        return Err(Failure::Interrupted("interrupted while compiling".into()));
    }
    Ok(Some(compiled))
}

fn run_compiled(a: &RunArgs, compiled: &arden::Compiled, name: &str, args: &[Value]) -> Outcome {
    let mut options = compiled.options();
    if let Some(n) = a.threads {
        options.threads = n as usize;
        options.team = arden::backend::c::Team::dynamic_if(arden::backend::c::default_dynamic(false));
    }
    let t0 = std::time::Instant::now();
    let (value, stats) = compiled.entry(name)?.call_with(args, &options).map_err(stopped_or)?;
    let run_time = t0.elapsed();
    if a.stats {
        let lib = compiled.library().expect("the C backend has a library");
        eprintln!(
            "stats: backend=c threads={} compile={:.3}ms ({}) run={:.3}ms peak_bytes={}",
            stats.map_or(options.threads, |s| s.threads),
            lib.build_time.as_secs_f64() * 1e3,
            if lib.compiled { "compiled" } else { "cached" },
            run_time.as_secs_f64() * 1e3,
            stats.map_or(0, |s| s.peak_bytes)
        );
    }
    emit_result(a, &value)
}

fn emit_result(a: &RunArgs, value: &Value) -> Outcome {
    match &a.output {
        None => print_json(value),
        // Both writers replace the file atomically (temporary file, then rename).
        Some(path) if is_json_path(path) => data::write_file_atomic_with(path, |f| {
            let mut f = f;
            value.write_json(&mut f)?;
            f.write_all(b"\n")
        })
        .map_err(Failure::User),
        Some(path) => data::write_npy(path, value).map_err(Failure::User),
    }
}

fn build_cmd(a: &BuildArgs) -> Outcome {
    let prog = a.opt.load(&a.file)?;
    let stem = a.file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "arden".into());
    let (c, h) = arden::backend::c::emit::emit_library(prog.module(), &a.file.display().to_string(), &stem, &a.prefix).map_err(Failure::User)?;
    if a.emit_c {
        return print_out(&c);
    }
    let dir = a.output.as_ref().expect("clap requires -o without --emit-c");
    std::fs::create_dir_all(dir).map_err(|e| Failure::User(format!("cannot create {}: {e}", dir.display())))?;
    for (ext, text) in [("c", &c), ("h", &h)] {
        let path = dir.join(format!("{stem}.{ext}"));
        std::fs::write(&path, text).map_err(|e| Failure::User(format!("cannot write {}: {e}", path.display())))?;
    }
    print_out(&format!("wrote {0}/{stem}.c and {0}/{stem}.h\n", dir.display()))
}

fn ir_cmd(a: &IrArgs) -> Outcome {
    check_program_file(&a.file)?;
    let prog = a.opt.load(&a.file)?;
    let stage = match a.stage {
        Stage::Lower => arden::Stage::Lower,
        Stage::Ad => arden::Stage::Ad,
        Stage::Opt => arden::Stage::Opt,
    };
    let module = prog.module_at(stage);
    let text = match &a.entry {
        Some(name) => {
            prog.entry(name)?;
            let f = module.functions.iter().find(|f| &f.name == name).expect("entry exists at every stage");
            ir::print::print_function(f)
        }
        None => ir::print::print_module(module),
    };
    print_out(&text)
}

fn opt_cmd(a: &OptCmdArgs) -> Outcome {
    if a.print_default {
        return print_out(arden::opt::DEFAULT_SCHEDULE);
    }
    if a.list_rules {
        let rules = arden::opt::rules::builtin();
        let width = rules.iter().map(|r| r.name.len()).max().unwrap_or(0);
        let text: String = rules.iter().map(|r| format!("{:width$}  {}\n", r.name, r.doc)).collect();
        return print_out(&text);
    }
    let file = a.file.as_ref().expect("clap requires FILE here");
    check_program_file(file)?;
    let mut opts = a.opt.options()?;
    opts.trace = a.trace;
    let unopt = Program::from_file_with(file, &arden::opt::OptOptions::level(0))?;
    let t0 = std::time::Instant::now();
    let prog = Program::from_file_with(file, &opts)?;
    let compile = t0.elapsed();
    let names: Vec<String> = match &a.entry {
        Some(n) => {
            prog.entry(n)?;
            vec![n.clone()]
        }
        None => prog.entry_names().iter().map(|s| s.to_string()).collect(),
    };
    if !a.args.is_empty() && names.len() != 1 {
        return Err(Failure::Usage { msg: "--arg needs --entry when the program has several entry points".into(), command: "opt" });
    }
    let report = prog.opt_report();
    let mut out = String::new();
    for name in &names {
        let before = unopt.entry(name)?.function();
        let after = prog.entry(name)?.function();
        let (sb, lb) = ir_size(&before.body);
        let (sa, la) = ir_size(&after.body);
        out += &format!("entry {name}: {sb} statements ({lb} loops) before, {sa} ({la} loops) after\n");
        if let Some((_, steps)) = report.steps.iter().find(|(f, _)| f == name) {
            let ms = report.elapsed.iter().find(|(f, _)| f == name).map_or(0.0, |(_, t)| t.as_secs_f64() * 1e3);
            out += &format!("  strategy steps: {steps}, {ms:.1} ms\n");
        }
        if let Some((_, fired)) = report.fired.iter().find(|(f, _)| f == name) {
            let total: u64 = fired.values().sum();
            out += &format!("  rewrites: {total}\n");
            for (rule, n) in fired {
                out += &format!("    {rule:<20} {n}\n");
            }
        }
        if let Some((_, lines)) = report.trace.iter().find(|(f, _)| f == name) {
            out += "  trace:\n";
            for l in lines {
                out += &format!("    {l}\n");
            }
        }
        if !a.args.is_empty() {
            let args = bind_args(before, &a.args)?;
            let (v0, c0) = unopt.entry(name)?.call_counting(&args)?;
            let (v1, c1) = prog.entry(name)?.call_counting(&args)?;
            out += &format!("  ops before: arith={} reads={} writes={} stored={}\n", c0.arith, c0.reads, c0.writes, c0.stored);
            out += &format!("  ops after:  arith={} reads={} writes={} stored={}\n", c1.arith, c1.reads, c1.writes, c1.stored);
            let same = format!("{v0:?}") == format!("{v1:?}");
            out += &format!("  results: {}\n", if same { "identical" } else { "DIFFER" });
        }
    }
    let opt_ms: f64 = report.elapsed.iter().map(|(_, t)| t.as_secs_f64() * 1e3).sum();
    out += &format!("optimiser: {opt_ms:.1} ms for all entry points (compiling took {:.1} ms in all)\n", compile.as_secs_f64() * 1e3);
    print_out(&out)
}

/// Statements and loops in a block, nested blocks included.
fn ir_size(b: &ir::Block) -> (usize, usize) {
    let (mut stmts, mut loops) = (0, 0);
    for s in &b.stmts {
        stmts += 1;
        if matches!(s.expr, ir::Expr::For { .. } | ir::Expr::ForAcc { .. } | ir::Expr::Loop { .. }) {
            loops += 1;
        }
        for c in ir::walk::sub_blocks(&s.expr) {
            let (a, b) = ir_size(c);
            stmts += a;
            loops += b;
        }
    }
    (stmts, loops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arden::ir::{Block, Scalar, Shape, Size, Type, VarId};
    use clap::CommandFactory;

    fn dot_fn() -> Function {
        let n = VarId(0);
        let vec_n = Shape::Leaf(Type::array(Scalar::F64, vec![Size::var(n)]));
        Function {
            name: "dot".into(),
            size_params: vec![("n".into(), n)],
            params: vec![],
            param_shapes: vec![("a".into(), vec_n.clone()), ("b".into(), vec_n)],
            result_shape: Shape::Leaf(Type::scalar(Scalar::F64)),
            body: Block::default(),
            names: vec!["n".into()],
            stored: vec![],
            onehot: vec![],
        }
    }

    fn user(r: Result<Vec<Value>, Failure>) -> String {
        match r {
            Err(Failure::User(m)) => m,
            other => panic!("expected a user error, got {other:?}"),
        }
    }

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn arg_count_errors() {
        let f = dot_fn();
        assert_eq!(user(bind_args(&f, &["[1]".into()])), "entry `dot` takes 2 arguments (a: [n]f64, b: [n]f64) but 1 was given");
        assert_eq!(user(bind_args(&f, &[])), "entry `dot` takes 2 arguments (a: [n]f64, b: [n]f64) but 0 were given");
        let mut g = dot_fn();
        g.param_shapes.clear();
        assert_eq!(user(bind_args(&g, &["1".into()])), "entry `dot` takes no arguments but 1 was given");
        g.param_shapes.push(("x".into(), Shape::Leaf(Type::scalar(Scalar::I64))));
        assert_eq!(user(bind_args(&g, &[])), "entry `dot` takes 1 argument (x: i64) but 0 were given");
    }

    #[test]
    fn arg_value_errors_name_the_parameter() {
        let f = dot_fn();
        let e = user(bind_args(&f, &["[1, 2]".into(), "[[1]]".into()]));
        assert_eq!(e, "argument 2 (`b`): expected a 1-d array of f64, got a 2-d array");
        let e = user(bind_args(&f, &["[1, 2".into(), "[1]".into()]));
        assert!(e.starts_with("argument 1 (`a`): cannot parse argument as JSON"), "{e}");
        let vals = bind_args(&f, &["[1, 2]".into(), "[-Infinity, 4]".into()]).unwrap();
        assert_eq!(vals[1].to_json(), "[-Infinity, 4.0]");
    }

    #[test]
    fn entry_choice() {
        let p = Path::new("f.ard");
        assert_eq!(choose_entry(p, &["a"], None, "run"), Ok("a".into()));
        assert_eq!(choose_entry(p, &["a", "b"], Some("b"), "run"), Ok("b".into()));
        assert_eq!(choose_entry(p, &["a", "b"], Some("zz"), "run"), Ok("zz".into()));
        match choose_entry(p, &["a", "b"], None, "run") {
            Err(Failure::Usage { msg, .. }) => assert_eq!(msg, "f.ard has 2 entry points (a, b); choose one with --entry NAME"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(choose_entry(p, &[], None, "run"), Err(Failure::User(_))));
    }

    #[test]
    fn parses_flags() {
        let cli = Cli::try_parse_from(["arden", "run", "f.ard", "--arg", "-1", "-a", "[1]", "-e", "x", "--count-ops"]).unwrap();
        let Command::Run(r) = cli.command else { panic!() };
        assert_eq!(r.args, vec!["-1", "[1]"]);
        assert_eq!(r.entry.as_deref(), Some("x"));
        assert!(r.count_ops);
        let e = Cli::try_parse_from(["arden", "ir", "f.ard", "--stage", "final"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("lower"));
        let e = Cli::try_parse_from(["arden", "check"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn user_errors_keep_api_messages() {
        let f: Failure = Error::Runtime("index 5 out of bounds".into()).into();
        assert_eq!(f, Failure::User("runtime error: index 5 out of bounds".into()));
        let f: Failure = Error::Compile { rendered: "error: x\n".into(), diagnostics: vec![] }.into();
        assert_eq!(f, Failure::Rendered("error: x\n".into()));
    }
}
