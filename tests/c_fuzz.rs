//! Random programs on both backends: the generator of `tests/ad_fuzz/`
//! (well-typed programs from every construct, with their reverse-mode
//! gradient or Jacobian as a second entry) run on the interpreter and on
//! the C backend, at 1 thread and at 2, 3 and 16 threads with every
//! parallel path forced on (`common::thread_options`); results agree bit
//! for bit and errors agree exactly.
//! The programs are compiled in batches (one shared library per batch).
//! `ARDEN_C_FUZZ_CASES` (default 2,000 in `cargo test`: the C compiler is
//! the cost, about 15 s of CPU per batch of 100 at -O0, so the batches are
//! shared between two threads) and `ARDEN_FUZZ_SEED` (default 1).

#[path = "common/mod.rs"]
mod common;
#[path = "ad_fuzz/programs.rs"]
#[allow(dead_code)]
mod programs;

use arden::api::{Backend, Compiled};
use arden::backend::c::COptions;
use arden::runtime::ArrayData;
use arden::runtime::data::value_from_json;
use arden::{Program, Value};
use common::{c_compiler_or_skip, with_big_stack};
use programs::Ty;

const PARAMS: &str = "[n][k] (x: f64) (y: f64) (v: [n]f64) (w: [k]f64) (m: [k][n]f64) (p: i64)";

/// Bit for bit (any NaN matches any NaN): the backends share every
/// primitive's algorithm and the order of sums (LANGUAGE.md §10).
fn close(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn same(x: &Value, y: &Value) -> bool {
    match (x, y) {
        (Value::F64(a), Value::F64(b)) => close(*a, *b),
        (Value::Tuple(a), Value::Tuple(b)) => a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b)),
        (Value::Array(a), Value::Array(b)) => {
            a.shape == b.shape
                && match (&a.data, &b.data) {
                    (ArrayData::F64(p), ArrayData::F64(q)) => p.iter().zip(q).all(|(a, b)| close(*a, *b)),
                    (p, q) => p == q,
                }
        }
        (a, b) => a == b,
    }
}

struct Prepared {
    source: String,
    prog: Program,
    args: Vec<Value>,
}

fn prepare(seed: u64) -> Option<Prepared> {
    let sm = programs::sample(seed);
    let rt = if sm.body.ty == Ty::VN { "[n]f64" } else { "f64" };
    let mut source = format!("def body {PARAMS} : {rt} =\n  {}\n\nentry f {PARAMS} : {rt} = body x y v w m p\n", sm.body.text());
    if sm.body.ty == Ty::VN {
        source += &format!("entry d {PARAMS} : [n][n]f64 = jacrev (\\u -> body x y u w m p) v\n");
    } else {
        source += &format!("entry d {PARAMS} : ([n]f64, [k][n]f64) = grad (\\(u, a) -> body x y u w a p) (v, m)\n");
    }
    let prog = Program::from_source("fuzz.ard", &source).ok()?;
    let e = prog.entry("f").ok()?;
    let args = e.params().iter().zip(sm.args.as_array()?).map(|((_, s), j)| value_from_json(j, s)).collect::<Result<Vec<_>, _>>().ok()?;
    Some(Prepared { source, prog, args })
}

const BATCH: u64 = 100;

/// Run the batches `lane`, `lane + lanes`, ... of `cases` programs; returns
/// the calls compared and the differences found.
fn run(cases: u64, seed0: u64, lane: u64, lanes: u64) -> (u64, Vec<String>) {
    let mut failures = vec![];
    let mut compared = 0;
    let mut start = lane * BATCH;
    while start < cases {
        let end = (start + BATCH).min(cases);
        let progs: Vec<Prepared> = (start..end).filter_map(|i| prepare(seed0.wrapping_add(i))).collect();
        let functions: Vec<_> = progs.iter().flat_map(|p| p.prog.module().functions.clone()).collect();
        // -O0: these libraries are large, compiled once and run on tiny inputs
        let native = Compiled::from_functions(functions, Backend::C, &COptions { extra_flags: vec!["-O0".into()] }).expect("the batch compiles");
        let mut k = 0;
        for p in &progs {
            let interp = p.prog.compile(Backend::Interp).unwrap();
            for j in 0..p.prog.module().functions.len() {
                let name = &p.prog.module().functions[j].name;
                let want = interp.entry(name).unwrap().call(&p.args);
                let entry = native.entry_at(k + j).unwrap();
                if let Some(why) = entry.refused() {
                    failures.push(format!("refused: {why}\n{}", p.source));
                    continue;
                }
                for opts in common::thread_options() {
                    compared += 1;
                    let got = entry.call_with(&p.args, &opts).map(|(v, _)| v);
                    let ok = match (&want, &got) {
                        (Ok(a), Ok(b)) => same(a, b),
                        (Err(a), Err(b)) => a.to_string() == b.to_string(),
                        _ => false,
                    };
                    if !ok {
                        failures.push(format!(
                            "entry `{name}` ({} threads): interpreter {} but C {}\n{}",
                            opts.threads,
                            want.as_ref().map(|v| v.to_json()).unwrap_or_else(|e| e.to_string()),
                            got.as_ref().map(|v| v.to_json()).unwrap_or_else(|e| e.to_string()),
                            p.source
                        ));
                    }
                }
            }
            k += p.prog.module().functions.len();
        }
        start += lanes * BATCH;
        if failures.len() > 5 {
            break;
        }
    }
    (compared, failures)
}

#[test]
fn random_programs_agree_on_both_backends() {
    if !c_compiler_or_skip("random_programs_agree_on_both_backends") {
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("arden-cache");
    // SAFETY: the only test of this binary.
    unsafe { std::env::set_var("ARDEN_CACHE_DIR", dir) };
    let cases = std::env::var("ARDEN_C_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let seed = std::env::var("ARDEN_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    const LANES: u64 = 2;
    let lanes: Vec<_> = (0..LANES).map(|lane| std::thread::spawn(move || with_big_stack(move || run(cases, seed, lane, LANES)))).collect();
    let (mut compared, mut failures) = (0, vec![]);
    for l in lanes {
        let (c, f) = l.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        compared += c;
        failures.extend(f);
    }
    assert!(
        failures.is_empty(),
        "{} differences (of {compared} calls); the first:\n{}",
        failures.len(),
        failures.iter().take(5).cloned().collect::<Vec<_>>().join("\n---\n")
    );
    eprintln!("{compared} calls agree");
}
