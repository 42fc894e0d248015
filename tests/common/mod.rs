//! Shared helpers of the integration tests: the `-- test:` line format of
//! `tests/programs/*.ard` and `examples/*.ard`, comparing results, and
//! [`c_compiler_or_skip`], the one way a test skips for want of a C
//! compiler.
#![allow(dead_code)]

use arden::api::{CallOptions, Team};
use arden::runtime::data::value_from_json;
use arden::runtime::{Array, ArrayData};
use arden::{Program, Value};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// One `-- test: {...}` line.
pub struct Case {
    pub entry: String,
    pub args: Vec<serde_json::Value>,
    pub expect: Option<serde_json::Value>,
    pub expect_error: Option<String>,
    pub line: usize,
}

pub fn cases(text: &str) -> Vec<Case> {
    let mut out = vec![];
    for (i, line) in text.lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("-- test:") else { continue };
        let j: serde_json::Value = serde_json::from_str(rest.trim()).unwrap_or_else(|e| panic!("line {}: bad test JSON: {e}", i + 1));
        out.push(Case {
            entry: j["entry"].as_str().expect("entry").to_string(),
            args: j["args"].as_array().cloned().unwrap_or_default(),
            expect: j.get("expect").cloned(),
            expect_error: j.get("expect_error").and_then(|e| e.as_str()).map(str::to_string),
            line: i + 1,
        });
    }
    out
}

pub fn ard_files(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ard"))
        .collect();
    files.sort();
    files
}

/// Is the environment variable `CI` set (to anything but empty, `0` or
/// `false`)? `.ci/run` sets `CI=true`.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// A test that cannot check anything here: prints `skipped: WHY (TEST)`
/// outside CI; under CI it panics, so that no test passes there without
/// checking anything.
pub fn skip_unless_ci(test: &str, why: &str) {
    if in_ci() {
        panic!("{test}: {why}, and CI is set: the test would pass without checking anything");
    }
    eprintln!("skipped: {why} ({test})");
}

/// Is there a C compiler for the native backend? Without one, a test that
/// needs it prints `skipped: no C compiler (TEST)` and returns early, so a
/// plain `cargo test` passes on a machine without gcc; under CI a missing
/// compiler is a failure ([`skip_unless_ci`]).
pub fn c_compiler_or_skip(test: &str) -> bool {
    if arden::backend::c::find_compiler().is_some() {
        return true;
    }
    skip_unless_ci(test, "no C compiler found (install gcc, or set CC)");
    false
}

/// Convert JSON arguments to values using the entry's parameter shapes.
pub fn args_for(prog: &Program, case: &Case) -> Result<Vec<Value>, String> {
    let entry = prog.entry(&case.entry).map_err(|e| e.to_string())?;
    let params = entry.params();
    if params.len() != case.args.len() {
        return Err(format!("{} params but {} args", params.len(), case.args.len()));
    }
    params.iter().zip(&case.args).map(|((_, shape), j)| value_from_json(j, shape)).collect()
}

fn close(a: f64, b: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= 1e-12 + 1e-9 * a.abs().max(b.abs())
}

fn expected_float(j: &serde_json::Value) -> Option<f64> {
    match j {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// Does `v` match the expected JSON (floats within tolerance)?
pub fn matches(v: &Value, j: &serde_json::Value) -> bool {
    match v {
        Value::Tuple(vs) => j.as_array().is_some_and(|js| js.len() == vs.len() && vs.iter().zip(js).all(|(v, j)| matches(v, j))),
        Value::Array(a) => {
            // Re-express as nested values row by row.
            let rows = split_rows(v);
            if a.shape.is_empty() {
                return matches(&rows[0], j);
            }
            j.as_array().is_some_and(|js| js.len() == rows.len() && rows.iter().zip(js).all(|(r, j)| matches(r, j)))
        }
        Value::F64(x) => expected_float(j).is_some_and(|e| close(*x, e)),
        Value::F32(x) => expected_float(j).is_some_and(|e| {
            let x = *x as f64;
            x.is_nan() && e.is_nan() || (x - e).abs() <= 1e-6 + 1e-5 * x.abs().max(e.abs())
        }),
        Value::I64(x) => j.as_i64() == Some(*x),
        Value::I32(x) => j.as_i64() == Some(*x as i64),
        Value::Bool(b) => j.as_bool() == Some(*b),
    }
}

fn split_rows(v: &Value) -> Vec<Value> {
    let Value::Array(a) = v else { return vec![v.clone()] };
    if a.shape.is_empty() {
        return vec![a.data.get(0)];
    }
    let n = a.shape[0];
    let inner: Vec<usize> = a.shape[1..].to_vec();
    let stride: usize = inner.iter().product();
    (0..n)
        .map(|i| {
            if inner.is_empty() {
                a.data.get(i)
            } else {
                let data = slice_data(&a.data, i * stride, stride);
                Value::array(inner.clone(), data)
            }
        })
        .collect()
}

fn slice_data(d: &arden::runtime::ArrayData, at: usize, len: usize) -> arden::runtime::ArrayData {
    use arden::runtime::ArrayData as D;
    match d {
        D::F64(v) => D::F64(v[at..at + len].to_vec().into()),
        D::F32(v) => D::F32(v[at..at + len].to_vec().into()),
        D::I64(v) => D::I64(v[at..at + len].to_vec().into()),
        D::I32(v) => D::I32(v[at..at + len].to_vec().into()),
        D::Bool(v) => D::Bool(v[at..at + len].to_vec().into()),
    }
}

/// Run `f` on a thread with a large stack (compilation recurses deeply on
/// pathological input; the command line does the same).
pub fn with_big_stack<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::Builder::new().stack_size(256 << 20).spawn(f).expect("spawn").join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// A small deterministic generator (xorshift), so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

/// A random direction with the shape of `v` (zero for integers and bools).
pub fn direction(v: &Value, rng: &mut Rng) -> Value {
    match v {
        Value::F64(_) => Value::F64(rng.unit()),
        Value::F32(_) => Value::F32(0.0),
        Value::I64(_) => Value::I64(0),
        Value::I32(_) => Value::I32(0),
        Value::Bool(b) => Value::Bool(*b),
        Value::Tuple(vs) => Value::Tuple(vs.iter().map(|x| direction(x, rng)).collect()),
        Value::Array(a) => {
            let data = match &a.data {
                ArrayData::F64(xs) => ArrayData::F64(xs.iter().map(|_| rng.unit()).collect()),
                ArrayData::F32(xs) => ArrayData::F32(vec![0.0; xs.len()].into()),
                ArrayData::I64(xs) => ArrayData::I64(vec![0; xs.len()].into()),
                ArrayData::I32(xs) => ArrayData::I32(vec![0; xs.len()].into()),
                ArrayData::Bool(xs) => ArrayData::Bool(xs.clone()),
            };
            Value::Array(Rc::new(Array::new(a.shape.clone(), data)))
        }
    }
}

/// `x + h * d` on the f64 parts.
pub fn shift(x: &Value, d: &Value, h: f64) -> Value {
    match (x, d) {
        (Value::F64(a), Value::F64(b)) => Value::F64(a + h * b),
        (Value::Tuple(xs), Value::Tuple(ds)) => Value::Tuple(xs.iter().zip(ds).map(|(x, d)| shift(x, d, h)).collect()),
        (Value::Array(a), Value::Array(b)) => match (&a.data, &b.data) {
            (ArrayData::F64(xs), ArrayData::F64(ds)) => {
                let data = ArrayData::F64(xs.iter().zip(ds).map(|(x, d)| x + h * d).collect());
                Value::Array(Rc::new(Array::new(a.shape.clone(), data)))
            }
            _ => x.clone(),
        },
        _ => x.clone(),
    }
}

/// The f64 numbers of a value, flattened.
pub fn floats(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::F64(x) => out.push(*x),
        // widened exactly (NaN payloads and signs included)
        Value::F32(x) => out.push(*x as f64),
        Value::Tuple(vs) => vs.iter().for_each(|x| floats(x, out)),
        Value::Array(a) => match &a.data {
            ArrayData::F64(xs) => out.extend(xs),
            ArrayData::F32(xs) => out.extend(xs.iter().map(|x| *x as f64)),
            _ => {}
        },
        _ => {}
    }
}

pub fn scale_of(v: &[Value]) -> f64 {
    let mut xs = vec![];
    v.iter().for_each(|x| floats(x, &mut xs));
    xs.iter().fold(1.0f64, |m, x| if x.is_finite() { m.max(x.abs()) } else { m })
}

/// Split a command line the way a POSIX shell would for our simple cases:
/// whitespace separates words, single quotes group.
pub fn shell_words(s: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur = String::new();
    let mut in_quote = false;
    let mut any = false;
    for ch in s.chars() {
        match ch {
            '\'' => {
                in_quote = !in_quote;
                any = true;
            }
            c if c.is_whitespace() && !in_quote => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// A fresh directory under the system temp dir, removed on drop (one per
/// `tag` and test process).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("arden-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// Write `text` to `name` inside; its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The call options the C backend is compared with the interpreter at:
/// 1 thread (the default threshold), then 2 threads, a team that changes
/// from region to region ([`varying_team`]) and 16 threads, with every
/// parallel path forced on (`par_min` 0). Sums and products combine in a
/// fixed order (LANGUAGE.md §10), so every thread count gives the
/// interpreter's bits; 3 splits the chunks unevenly, 16 gives most threads
/// one chunk or none.
pub fn thread_options() -> [CallOptions; 4] {
    [
        CallOptions { threads: 1, par_min: 1 << 15, team: Team::Fixed },
        CallOptions { threads: 2, par_min: 0, team: Team::Fixed },
        CallOptions { threads: 16, par_min: 0, team: Team::Each(varying_team) },
        CallOptions { threads: 16, par_min: 0, team: Team::Fixed },
    ]
}

/// 3, 1, 16, 2, 7, 3, … threads, one after the other per parallel region
/// (what the dynamic count may do within a call on a busy machine).
pub extern "C" fn varying_team(asked: std::ffi::c_int) -> std::ffi::c_int {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    const TEAMS: [std::ffi::c_int; 5] = [3, 1, 16, 2, 7];
    TEAMS[NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % TEAMS.len()].min(asked)
}
