//! `arden gradbench`: a tool for the GradBench benchmark
//! (<https://github.com/gradbench/gradbench>). It reads the protocol's
//! messages, one JSON object per line, on stdin and writes one response
//! line per message on stdout:
//!
//! - `start` → `{"id", "tool": "arden"}`;
//! - `define` → compiles the eval's program (`gradbench/EVAL.ard`, built
//!   into the binary) with the C backend when a C compiler is found, else
//!   for the interpreter; reports the compile time as a `compile` timing;
//! - `evaluate` → converts the input to arguments, runs the entry
//!   `min_runs` times and for at least `min_seconds`, timing each run
//!   (`evaluate` timings, integer nanoseconds), and converts the last
//!   result to the eval's output;
//! - `analysis` and any other kind → `{"id"}`.
//!
//! Every failure (malformed JSON, unknown module or function, an input of
//! the wrong shape, a run-time error) is a `"success": false` response with
//! an `error`; nothing else is ever written to stdout.

pub mod evals;
pub mod json;

use crate::api::{Backend, CallOptions, Compiled, Program};
use crate::runtime::Value;
use serde_json::{Map, Value as Json, json};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

/// Options of `arden gradbench`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    about = "Speak the GradBench protocol on stdin/stdout (all 12 evals)",
    long_about = "Run as a GradBench tool: read the protocol's messages (one JSON object per line) \
on stdin and answer each with one JSON line on stdout. Implements all twelve evals (hello, llsq, \
lse, ode, det, kmeans, gmm, ba, ht, lstm, saddle, particle); their programs are gradbench/*.ard in \
the repository, compiled into the binary, and every derivative is computed by arden's own AD.\n\n\
`define` compiles the eval's program (C backend when a C compiler is found, else the \
interpreter) and reports the compile time as a `compile` timing, so no `evaluate` timing \
includes compilation; `evaluate` runs the function min_runs times and for at least min_seconds, \
one `evaluate` timing per run. Malformed messages, unknown modules or functions, inputs of the \
wrong shape and run-time errors get a `\"success\": false` response with an `error`.\n\n\
Examples:\n  \
echo '{\"id\":0,\"kind\":\"define\",\"module\":\"lse\"}' | arden gradbench\n  \
gradbench run --eval 'gradbench eval lse' --tool 'arden gradbench'    (from GradBench's harness)"
)]
pub struct Args {
    /// Use every core (OpenMP threads of the C backend); by default the
    /// evals run on one thread, as GradBench expects.
    #[arg(long)]
    pub multithreaded: bool,

    /// Force a backend: `c` (fails `define` when no C compiler is found)
    /// or `interp`. Default: `c` when a C compiler is found, else `interp`.
    #[arg(long, value_name = "BACKEND", value_parser = ["c", "interp"])]
    pub backend: Option<String>,

    /// Let the C compiler reassociate floating-point arithmetic (as `arden
    /// run --fast-math`): sums and dot products vectorise, results differ
    /// from the exact ones in the last bits. Off by default.
    #[arg(long)]
    pub fast_math: bool,
}

/// Serve the protocol on stdin and stdout until stdin ends.
pub fn main(args: &Args) -> Result<(), String> {
    let mut session = Session::new(args);
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(format!("cannot read stdin: {e}")),
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        let response = session.handle(&text);
        let mut out = stdout.lock();
        let written = out.write_all(response.as_bytes()).and_then(|_| out.write_all(b"\n")).and_then(|_| out.flush());
        if let Err(e) = written {
            // The harness closed the pipe: nothing more to answer.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(format!("cannot write to stdout: {e}"));
        }
    }
}

/// A defined module: its compiled program.
struct Module {
    eval: &'static evals::Eval,
    /// The C backend's library (or the interpreter, see `backend`).
    compiled: Compiled,
    /// The interpreter, for entries the C backend refuses.
    interp: Compiled,
}

/// The state of one protocol session: the modules defined so far.
pub struct Session {
    threads: usize,
    backend: Option<Backend>,
    fast_math: bool,
    modules: HashMap<&'static str, Module>,
}

impl Session {
    pub fn new(args: &Args) -> Session {
        let threads = if args.multithreaded { crate::backend::c::default_threads() } else { 1 };
        let backend = match args.backend.as_deref() {
            Some("c") => Some(Backend::C),
            Some("interp") => Some(Backend::Interp),
            _ => None,
        };
        Session { threads, backend, fast_math: args.fast_math, modules: HashMap::new() }
    }

    /// Answer one message line with one response line (without the newline).
    pub fn handle(&mut self, line: &str) -> String {
        let response = match serde_json::from_str::<Json>(line) {
            Err(e) => failure(Json::Null, format!("malformed message: not JSON ({e})")),
            Ok(msg) => {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.dispatch(&msg)));
                match result {
                    Ok(r) => r,
                    Err(payload) => {
                        let what = payload
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| payload.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "unknown panic".into());
                        failure(id_of(&msg), format!("internal error: {what}"))
                    }
                }
            }
        };
        serde_json::to_string(&response)
            .unwrap_or_else(|e| serde_json::to_string(&failure(Json::Null, format!("internal error: cannot write the response: {e}"))).unwrap())
    }

    fn dispatch(&mut self, msg: &Json) -> Json {
        let id = id_of(msg);
        let Json::Object(obj) = msg else {
            return failure(Json::Null, format!("malformed message: expected a JSON object, found {}", json::kind(msg)));
        };
        if !obj.contains_key("id") {
            return failure(Json::Null, "malformed message: it has no `id`".into());
        }
        let kind = match obj.get("kind") {
            Some(Json::String(k)) => k.as_str(),
            Some(other) => return failure(id, format!("malformed message: `kind` must be a string, not {}", json::kind(other))),
            None => return failure(id, "malformed message: it has no `kind`".into()),
        };
        match kind {
            "start" => json!({"id": id, "tool": "arden"}),
            "define" => match obj.get("module").and_then(Json::as_str) {
                None => failure(id, "malformed message: `define` needs a string `module`".into()),
                Some(name) => match self.define(name) {
                    Ok(elapsed) => json!({
                        "id": id,
                        "success": true,
                        "timings": [{"name": "compile", "nanoseconds": nanos(elapsed)}],
                    }),
                    Err(e) => failure(id, e),
                },
            },
            "evaluate" => match self.evaluate(obj) {
                Ok((output, timings)) => {
                    let timings: Vec<Json> = timings.into_iter().map(|t| json!({"name": "evaluate", "nanoseconds": nanos(t)})).collect();
                    json!({"id": id, "success": true, "output": output, "timings": timings})
                }
                Err(e) => failure(id, e),
            },
            // `analysis` and kinds this tool does not know need only the id.
            _ => json!({"id": id}),
        }
    }

    /// Compile the module's program (once); the time it took.
    fn define(&mut self, name: &str) -> Result<Duration, String> {
        let eval = evals::find(name).ok_or_else(|| format!("unknown module `{name}`; this tool implements {}", evals::names()))?;
        if self.modules.contains_key(eval.name) {
            return Ok(Duration::ZERO);
        }
        let t0 = Instant::now();
        let program = Program::from_source(eval.file, eval.source).map_err(|e| format!("cannot compile {}: {e}", eval.file))?;
        let backend = match self.backend {
            Some(b) => b,
            None if crate::backend::c::find_compiler().is_some() => Backend::C,
            None => Backend::Interp,
        };
        let interp = program.compile(Backend::Interp).map_err(|e| e.to_string())?;
        let compiled = program
            .compile_with(backend, &crate::backend::c::COptions::with_fast_math(self.fast_math))
            .map_err(|e| format!("cannot compile {}: {e}", eval.file))?;
        for name in program.entry_names() {
            if let Some(why) = compiled.entry(name).ok().and_then(|e| e.refused().map(str::to_string)) {
                eprintln!("arden gradbench: {}: `{name}` runs on the interpreter: {why}", eval.file);
            }
        }
        let elapsed = t0.elapsed();
        self.modules.insert(eval.name, Module { eval, compiled, interp });
        Ok(elapsed)
    }

    /// Run an `evaluate` message: the last output and one time per run.
    fn evaluate(&mut self, obj: &Map<String, Json>) -> Result<(Json, Vec<Duration>), String> {
        let module = obj.get("module").and_then(Json::as_str).ok_or("malformed message: `evaluate` needs a string `module`")?;
        let function = obj.get("function").and_then(Json::as_str).ok_or("malformed message: `evaluate` needs a string `function`")?;
        let input = obj.get("input").ok_or("malformed message: `evaluate` needs an `input`")?;
        // GradBench always defines a module first; compile it here otherwise
        // (outside the timed runs).
        self.define(module)?;
        let m = &self.modules[module];
        if !m.eval.functions.contains(&function) {
            return Err(format!("module `{module}` has no function `{function}`; its functions are {}", m.eval.functions.join(", ")));
        }
        let (min_runs, min_seconds) = runs(input)?;
        let prepared = (m.eval.prepare)(function, input).map_err(|e| format!("invalid input: {e}"))?;
        let entry = match m.compiled.entry(prepared.entry) {
            Ok(e) if e.refused().is_none() => e,
            _ => m.interp.entry(prepared.entry).map_err(|e| e.to_string())?,
        };
        let options = CallOptions { threads: self.threads, ..m.compiled.options() };
        let mut timings = Vec::new();
        let mut elapsed = Duration::ZERO;
        // the arguments borrowed and the results kept in the buffers the
        // call made: the timed call neither copies its inputs nor its
        // outputs (BA's Jacobian at GradBench's largest size is 0.6 GB);
        // the result becomes a `Value` once, after the last run
        let args: Vec<_> = prepared.args.iter().map(Value::as_arg).collect();
        let mut output = None;
        while timings.len() < min_runs.max(1) || elapsed < min_seconds {
            // the previous run's result goes first: kept alive, it doubled
            // the memory held during a call with a large result
            drop(output.take());
            let t0 = Instant::now();
            let result = entry.call_borrowed(&args, &options, None);
            let t = t0.elapsed();
            let (out, _) = result.map_err(|e| e.to_string())?;
            output = Some(out);
            timings.push(t);
            elapsed += t;
        }
        let output = output.expect("at least one run").into_value();
        let json = (prepared.finish)(&output)?;
        Ok((json, timings))
    }
}

/// `min_runs` (default 1) and `min_seconds` (default 0) of an input object.
fn runs(input: &Json) -> Result<(usize, Duration), String> {
    let Json::Object(obj) = input else { return Ok((1, Duration::ZERO)) };
    let min_runs = match obj.get("min_runs") {
        None => 1,
        Some(v) => match v.as_u64() {
            Some(k) if k <= 1_000_000_000 => k as usize,
            _ => return Err(format!("invalid input: `min_runs` must be a non-negative integer, not {v}")),
        },
    };
    let min_seconds = match obj.get("min_seconds") {
        None => Duration::ZERO,
        Some(v) => match v.as_f64() {
            Some(s) if (0.0..1e9).contains(&s) => Duration::from_secs_f64(s),
            _ => return Err(format!("invalid input: `min_seconds` must be a non-negative number of seconds, not {v}")),
        },
    };
    Ok((min_runs, min_seconds))
}

fn id_of(msg: &Json) -> Json {
    msg.get("id").cloned().unwrap_or(Json::Null)
}

fn failure(id: Json, error: String) -> Json {
    json!({"id": id, "success": false, "error": error})
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        Session::new(&Args { multithreaded: false, backend: Some("interp".into()), fast_math: false })
    }

    fn ask(s: &mut Session, line: &str) -> Json {
        serde_json::from_str(&s.handle(line)).unwrap()
    }

    #[test]
    fn protocol_basics() {
        let mut s = session();
        assert_eq!(ask(&mut s, r#"{"id": 0, "kind": "start", "eval": "hello"}"#), json!({"id": 0, "tool": "arden"}));
        let r = ask(&mut s, r#"{"id": 1, "kind": "define", "module": "hello"}"#);
        assert_eq!(r["success"], json!(true));
        assert!(r["timings"][0]["nanoseconds"].is_u64());
        let r = ask(&mut s, r#"{"id": 2, "kind": "evaluate", "module": "hello", "function": "double", "input": 3.0}"#);
        assert_eq!(r["output"], json!(6.0));
        assert_eq!(r["timings"][0]["name"], json!("evaluate"));
        assert_eq!(ask(&mut s, r#"{"id": 3, "kind": "analysis", "of": 2, "valid": true}"#), json!({"id": 3}));
        assert_eq!(ask(&mut s, r#"{"id": 4, "kind": "frobnicate"}"#), json!({"id": 4}));
    }

    #[test]
    fn failures_are_responses() {
        let mut s = session();
        let r = ask(&mut s, "{not json");
        assert_eq!((r["id"].clone(), r["success"].clone()), (Json::Null, json!(false)));
        let r = ask(&mut s, r#"{"id": 1, "kind": "define", "module": "nope"}"#);
        assert!(r["error"].as_str().unwrap().contains("unknown module `nope`"));
        let r = ask(&mut s, r#"{"id": 2, "kind": "evaluate", "module": "hello", "function": "cube", "input": 1}"#);
        assert!(r["error"].as_str().unwrap().contains("no function `cube`"));
        let r = ask(&mut s, r#"{"id": 3, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": [[1]]}}"#);
        assert!(r["error"].as_str().unwrap().contains("invalid input"), "{r}");
        let r = ask(&mut s, r#"{"id": 4, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": [1, 2], "min_runs": 3}}"#);
        assert_eq!(r["timings"].as_array().unwrap().len(), 3);
    }
}
