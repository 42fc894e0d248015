//! The C backend against the reference interpreter: every `-- test:` case
//! of `tests/programs/`, `tests/ad_programs/` and `examples/` runs on both,
//! at 1 thread and at 2, 3 and 16 threads with every parallel path forced
//! on (a zero work threshold, `common::thread_options`); results agree bit
//! for bit, run-time errors agree in message and location, and a call
//! leaves no buffer behind but its results. Each file compiles to one
//! shared library (cached under a per-run directory).

mod common;
use arden::api::{Backend, CallOptions, Team};
use arden::runtime::ArrayData;
use arden::{Program, Value};
use common::*;

/// The tests use the user's cache (`ARDEN_CACHE_DIR` or ~/.cache/arden),
/// as the command-line and README tests do, so the examples are compiled
/// once for all of them.
fn cache_env() {}

/// Bit for bit (any NaN matches any NaN): the backends share every
/// primitive's algorithm and the order of sums (LANGUAGE.md §10).
fn close(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Equal values: floats bit for bit, everything else exactly.
pub fn same(x: &Value, y: &Value) -> bool {
    match (x, y) {
        (Value::F64(a), Value::F64(b)) => close(*a, *b),
        (Value::F32(a), Value::F32(b)) => close(*a as f64, *b as f64),
        (Value::I64(a), Value::I64(b)) => a == b,
        (Value::I32(a), Value::I32(b)) => a == b,
        (Value::Bool(a), Value::Bool(b)) => a == b,
        (Value::Tuple(a), Value::Tuple(b)) => a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b)),
        (Value::Array(a), Value::Array(b)) => {
            a.shape == b.shape
                && match (&a.data, &b.data) {
                    (ArrayData::F64(p), ArrayData::F64(q)) => p.iter().zip(q).all(|(a, b)| close(*a, *b)),
                    (ArrayData::F32(p), ArrayData::F32(q)) => p.iter().zip(q).all(|(a, b)| close(*a as f64, *b as f64)),
                    (p, q) => p == q,
                }
        }
        _ => false,
    }
}

fn count_arrays(v: &Value) -> i64 {
    match v {
        Value::Array(_) => 1,
        Value::Tuple(vs) => vs.iter().map(count_arrays).sum(),
        _ => 0,
    }
}

/// `flags`: extra C compiler flags (the corpus and the differentiation
/// programs use `-O1`, which compiles in half the time of `-O3`; the
/// examples use the default flags).
fn run_dir(dir: &str, flags: &[&str]) {
    run_dir_with(dir, flags, &arden::opt::OptOptions::default())
}

fn run_dir_with(dir: &str, flags: &[&str], opt: &arden::opt::OptOptions) {
    if !c_compiler_or_skip(dir) {
        return;
    }
    cache_env();
    let mut failures = vec![];
    let mut ran = 0;
    for path in ard_files(dir) {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.display().to_string();
        if std::env::var("ARDEN_TEST_TRACE").is_ok() {
            eprintln!("{name}");
        }
        let prog = Program::from_file_with(&path, opt).unwrap_or_else(|e| panic!("{name}: {e}"));
        let interp = prog.compile(Backend::Interp).unwrap();
        let opts = arden::backend::c::COptions { extra_flags: flags.iter().map(|s| s.to_string()).collect() };
        let native = match prog.compile_with(Backend::C, &opts) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{name}: C backend: {e}"));
                continue;
            }
        };
        for case in cases(&text) {
            let Ok(args) = args_for(&prog, &case) else { continue };
            let want = interp.entry(&case.entry).unwrap().call(&args);
            let entry = native.entry(&case.entry).unwrap();
            if let Some(why) = entry.refused() {
                failures.push(format!("{name}:{}: refused: {why}", case.line));
                continue;
            }
            if std::env::var("ARDEN_TEST_TRACE").is_ok() {
                eprintln!("  line {}", case.line);
            }
            for opts in common::thread_options() {
                ran += 1;
                let got = entry.call_with(&args, &opts);
                match (&want, &got) {
                    (Ok(w), Ok((g, stats))) => {
                        if !same(w, g) {
                            failures.push(format!("{name}:{} ({} threads): interpreter {} but C {}", case.line, opts.threads, w.to_json(), g.to_json()));
                        }
                        let live = stats.map_or(0, |s| s.live_buffers);
                        let params: i64 = args.iter().map(count_arrays).sum();
                        if live > count_arrays(g) + params {
                            failures.push(format!("{name}:{} ({} threads): {live} buffers left after the call", case.line, opts.threads));
                        }
                    }
                    (Err(w), Err(g)) if w.to_string() == g.to_string() => {}
                    (w, g) => failures.push(format!(
                        "{name}:{} ({} threads): interpreter {} but C {}",
                        case.line,
                        opts.threads,
                        w.as_ref().map(|v| v.to_json()).unwrap_or_else(|e| e.to_string()),
                        g.as_ref().map(|(v, _)| v.to_json()).unwrap_or_else(|e| e.to_string())
                    )),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {ran} runs differ:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn corpus_programs_agree() {
    with_big_stack(|| run_dir("tests/programs", &["-O1"]));
}

#[test]
fn differentiation_programs_agree() {
    with_big_stack(|| run_dir("tests/ad_programs", &["-O1"]));
}

#[test]
fn examples_agree() {
    with_big_stack(|| run_dir("examples", &[]));
}

/// `--precision f32` (issue 28 item 6): every example compiles as a
/// single-precision program and C gives the interpreter's f32 bits.
#[test]
fn examples_agree_in_single_precision() {
    let single = arden::opt::OptOptions { single_precision: true, ..Default::default() };
    with_big_stack(move || run_dir_with("examples", &["-O1"], &single));
}

/// Many threads calling one compiled entry at once (`Compiled` is `Send +
/// Sync`); each call has its own context, so results stay right.
#[test]
fn many_threads_call_one_entry() {
    if !c_compiler_or_skip("many_threads_call_one_entry") {
        return;
    }
    cache_env();
    let src = "entry f [n] (x: [n]f64) (k: i64) : ([n]f64, f64) =\n  let y = for i. x[i] * f64 k + 1.0\n  in (y, sum y)\n\
               entry g [n] (x: [n]f64) (i: i64) : f64 = x[i]\n";
    let prog = Program::from_source("conc.ard", src).unwrap();
    let compiled = std::sync::Arc::new(prog.compile(Backend::C).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let c = compiled.clone();
            std::thread::spawn(move || {
                let f = c.entry("f").unwrap();
                let g = c.entry("g").unwrap();
                let opts = if t % 2 == 0 {
                    CallOptions { threads: 1, par_min: 1 << 15, team: Team::Fixed }
                } else {
                    CallOptions { threads: 2, par_min: 0, team: Team::Fixed }
                };
                let calls = if t % 2 == 0 { 1000 } else { 200 };
                for k in 0..calls {
                    let n = 1 + (k + t) % 17;
                    let x: Vec<f64> = (0..n).map(|i| i as f64).collect();
                    let xv = Value::array(vec![n], ArrayData::F64(x.clone().into()));
                    let (v, _) = f.call_with(&[xv.clone(), Value::I64(k as i64)], &opts).unwrap();
                    let y: Vec<f64> = x.iter().map(|a| a * k as f64 + 1.0).collect();
                    let want = Value::Tuple(vec![Value::array(vec![n], ArrayData::F64(y.clone().into())), Value::F64(y.iter().sum())]);
                    assert!(same(&v, &want), "thread {t} call {k}: {}", v.to_json());
                    // an error in one thread does not disturb the others
                    let e = g.call_with(&[xv, Value::I64(n as i64 + 3)], &opts).unwrap_err().to_string();
                    assert!(e.contains("index out of bounds at conc.ard:4:"), "{e}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Errors inside a parallel loop: the lowest failing iteration's error,
/// as the interpreter (which runs iterations in order) reports it.
#[test]
fn parallel_errors_match_the_interpreter() {
    if !c_compiler_or_skip("parallel_errors_match_the_interpreter") {
        return;
    }
    cache_env();
    let src = "entry f [n] (x: [n]f64) (idx: [n]i64) : [n]f64 = for i. x[idx[i]] * 2.0\n";
    let prog = Program::from_source("perr.ard", src).unwrap();
    let native = prog.compile(Backend::C).unwrap();
    let interp = prog.compile(Backend::Interp).unwrap();
    for bad in [vec![0i64, 1, 99, 2, -5, 3, 100, 0], vec![7, 7, 7, 7, 7, 7, 7, -1], vec![-3, 50, 1, 2, 3, 4, 5, 6]] {
        let n = bad.len();
        let args = [Value::array(vec![n], ArrayData::F64((0..n).map(|i| i as f64).collect())), Value::array(vec![n], ArrayData::I64(bad.into()))];
        let want = interp.entry("f").unwrap().call(&args).unwrap_err().to_string();
        for threads in [1, 2] {
            let got = native.entry("f").unwrap().call_with(&args, &CallOptions { threads, par_min: 0, team: Team::Fixed }).unwrap_err().to_string();
            assert_eq!(got, want);
        }
    }
}

/// A size product outside `i64` is the error a size that overflows is, on
/// both backends, also where the optimiser removed what it sized: reverse
/// mode's stack of `n * m * k` saved states with k = 2^62 (before, its
/// wrapped size made the error "cannot unflatten an axis of size 0").
#[test]
fn size_products_that_overflow_are_errors() {
    let src = "entry g2 [n][m] (x: [n][m]f64) (c: f64) (k: i64) : [n][m]f64 =\n  \
               grad (\\y -> let s = loop s = y for t < k do for i j. c * ((if i > 0 then s[i - 1, j] else 0.0) + s[i, j]) in sum (for i. sum (for j. s[i, j] * s[i, j]))) x\n";
    let Some((native, interp)) = c_and_interp("size_products_that_overflow_are_errors", src) else { return };
    let args = [Value::array(vec![2, 2], ArrayData::F64(vec![1.0, 2.0, 3.0, 4.0].into())), Value::F64(0.1), Value::I64(1 << 62)];
    let want = interp.entry("g2").unwrap().call(&args).unwrap_err().to_string();
    assert!(want.contains("size arithmetic overflows i64"), "{want}");
    for threads in [1, 2] {
        let got = native.entry("g2").unwrap().call_with(&args, &CallOptions { threads, par_min: 0, team: Team::Fixed }).unwrap_err().to_string();
        assert_eq!(got, want);
    }
    let small = [args[0].clone(), Value::F64(0.1), Value::I64(3)];
    let (a, b) = (interp.entry("g2").unwrap().call(&small).unwrap(), native.entry("g2").unwrap().call(&small).unwrap());
    assert!(same(&a, &b), "{} vs {}", a.to_json(), b.to_json());
}

/// A row an accumulating `for` stacks (the matrix-multiply gradient's `dB`
/// rows after `interchange_sum`) is built in place in the enclosing
/// `for`'s result, as a plain `for`'s row is: no copy per row, and the
/// same bits as the interpreter at 1 and 2 threads.
#[test]
fn accumulating_rows_are_written_in_place() {
    let src = "def loss [n][k][m] (a: [n][k]f64) (b: [k][m]f64) : f64 = sum (map (\\row -> sum (map (\\c -> c * c) row)) (matmul a b))\n\
               entry g [n][k][m] (a: [n][k]f64) (b: [k][m]f64) : ([n][k]f64, [k][m]f64) = grad (\\(x, y) -> loss x y) (a, b)\n";
    let prog = Program::from_source("acc_rows.ard", src).unwrap();
    let func = prog.entry("g").unwrap().function().clone();
    let ir = arden::ir::print::print_function(&func);
    assert!(ir.contains("(add, stack)") && !ir.contains("transpose"), "{ir}");
    let c = arden::backend::c::emit::emit_function(&func, 0).unwrap();
    assert!(!c.contains("ard_copy("), "a row is copied:\n{c}");
    let Some((compiled, interp)) = c_and_interp("acc_rows.ard", src) else { return };
    let m = |r: usize, c: usize, f: &dyn Fn(usize) -> f64| Value::array(vec![r, c], ArrayData::F64((0..r * c).map(f).collect::<Vec<_>>().into()));
    let args = [m(4, 3, &|i| [1.5, -0.0, 2.0, -3.25, 1e150, 0.5][i % 6]), m(3, 5, &|i| (i as f64 - 7.0) * 0.375)];
    for opts in common::thread_options() {
        let (got, _) = compiled.entry("g").unwrap().call_with(&args, &opts).unwrap();
        let (want, _) = interp.entry("g").unwrap().call_with(&args, &CallOptions::default()).unwrap();
        assert!(same(&got, &want), "{} vs {}", got.to_json(), want.to_json());
    }
}

/// A row a `for` body builds with an inner `for` only to have it summed
/// (`sum (for i. for j. e)`, reverse mode's cotangent rows) is added into
/// the accumulator element by element as the inner `for` makes it: no row
/// allocated per iteration and no second pass to add it. The same
/// additions in the same order: bitwise the interpreter's (signed zeros,
/// integer sums) at 1 and 2 threads.
#[test]
fn summed_rows_are_added_in_place() {
    let src = "entry f [n][m] (x: [n][m]f64) : [m]f64 = sum (for i. for j. x[i, j] * 2.0 - 0.0)\n\
               entry g [n][m] (x: [n][m]i64) : [m]i64 = sum (for i. for j. x[i, j] * 3)\n\
               entry h [n][m] (x: [n][m]f64) : ([m]f64, f64) = let r = for i. for j. x[i, j] * 2.0 in (sum r, sum (for i. r[i, 0]))\n\
               entry k [n][m] (x: [n][m]f64) : [m][m]f64 = sum (for i. for j. for l. x[i, j] * x[i, l] * x[i, l] - 0.0)\n\
               entry q [n][m] (x: [n][m]f64) : [m][3]f64 = sum (for i. for j. concat [x[i, j]] (for (l < 2). x[i, l + 1] - x[i, j]))\n";
    let prog = Program::from_source("sum_rows.ard", src).unwrap();
    // rows of rows too (`k`): each inner row is added as it is made
    for e in ["f", "g", "k"] {
        let func = prog.entry(e).unwrap().function().clone();
        let c = arden::backend::c::emit::emit_function(&func, 0).unwrap();
        assert!(!c.contains("ard_a[ard_e] + ard_x[ard_e]") && !c.contains("ard_add64(ard_a[ard_e]"), "{e}: a row is built, then added:\n{c}");
    }
    let Some((compiled, interp)) = c_and_interp("sum_rows.ard", src) else { return };
    let xf = Value::array(vec![3, 4], ArrayData::F64(vec![-0.0, 1.5, -0.0, 1e300, -0.0, -2.0, 0.0, 1e300, -0.0, 0.5, -0.0, -1e300].into()));
    let xi = Value::array(vec![3, 4], ArrayData::I64(vec![1, -2, 3, 4, 5, 6, -7, 8, 9, 10, 11, -12].into()));
    for (e, x) in [("f", &xf), ("g", &xi), ("h", &xf), ("k", &xf), ("q", &xf)] {
        for opts in common::thread_options() {
            let (got, _) = compiled.entry(e).unwrap().call_with(std::slice::from_ref(x), &opts).unwrap();
            let (want, _) = interp.entry(e).unwrap().call_with(std::slice::from_ref(x), &CallOptions::default()).unwrap();
            assert!(same(&got, &want), "{e}: {} vs {}", got.to_json(), want.to_json());
        }
    }
}

/// A read of an array whose axes have constant lengths in its type uses
/// those lengths as strides, which the C compiler folds into the address
/// (LeNet's `[12][6][5][5]` filters: 5% of an epoch), not the run-time
/// `.d[j]`; an axis known only at run time keeps `.d[j]`. The
/// interpreter's bits at every thread count.
#[test]
fn constant_axes_give_constant_strides() {
    let src = "entry f [n] (k: [3][4][5]f64) (x: [n][5]f64) : f64 = sum (for a. sum (for b. sum (for c. k[a, b, c] * x[(a + b) % n, c])))\n";
    let prog = Program::from_source("strides.ard", src).unwrap();
    let c = arden::backend::c::emit::emit_function(&prog.entry("f").unwrap().function().clone(), 0).unwrap();
    assert!(c.contains(" * ((int64_t)4LL) + ard_i") && c.contains(" * ((int64_t)5LL) + ard_i"), "no constant strides:\n{c}");
    assert!(!c.contains(".d[1] + ard_i") && !c.contains(".d[2] + ard_i"), "a run-time stride of a constant axis:\n{c}");
    let Some((compiled, interp)) = c_and_interp("strides.ard", src) else { return };
    let k = Value::array(vec![3, 4, 5], ArrayData::F64((0..60).map(|i| (i as f64 - 29.5) * 0.37).collect::<Vec<_>>().into()));
    let x = Value::array(vec![2, 5], ArrayData::F64(vec![1.0, -2.0, 0.5, 1e16, -0.0, 3.0, 0.25, -1e16, 2.0, 1.5].into()));
    let args = [k, x];
    let (want, _) = interp.entry("f").unwrap().call_with(&args, &CallOptions::default()).unwrap();
    for opts in common::thread_options() {
        let (got, _) = compiled.entry("f").unwrap().call_with(&args, &opts).unwrap();
        assert!(same(&got, &want), "{} vs {}", got.to_json(), want.to_json());
    }
}

/// A summing `for` whose body calls vector maths (`pow` here, with one
/// operand fixed per inner loop, as least squares has it forward and
/// backward) runs in the lane loop gcc vectorises, not as 8 straight-line
/// copies with register lanes (which ran `pow` scalar: 2x the time); the
/// interpreter's bits at every thread count, special values included.
#[test]
fn sums_of_vector_maths_use_the_lane_loop() {
    let src = "entry fwd [n][m] (x: [m]f64) (t: [n]f64) : [n]f64 = for i. sum (for j. x[j] * t[i] ** f64 j)\n\
               entry bwd [n][m] (r: [n]f64) (t: [n]f64) (x: [m]f64) : [m]f64 = for j. sum (for i. r[i] * t[i] ** (f64 j + x[j]))\n";
    let prog = Program::from_source("vm_sums.ard", src).unwrap();
    for e in ["fwd", "bwd"] {
        let func = prog.entry(e).unwrap().function().clone();
        let c = arden::backend::c::emit::emit_function(&func, 0).unwrap();
        assert!(c.contains("ard_vm_pow("), "{e}: no pow:\n{c}");
        assert!(c.contains("[ARD_LANES]; memcpy(ard_L"), "{e}: the sum is not a lane loop:\n{c}");
        assert!(!c.contains("_0_7 = -0.0"), "{e}: the sum keeps 8 register lanes:\n{c}");
    }
    let Some((compiled, interp)) = c_and_interp("vm_sums.ard", src) else { return };
    let n = 37;
    let special = [0.0, -0.0, 1.0, -1.0, -2.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e300, -1e-310];
    let t: Vec<f64> = (0..n).map(|i| if i < special.len() { special[i] } else { (i as f64 - 18.0) / 7.0 }).collect();
    let r: Vec<f64> = (0..n).map(|i| 0.5 - (i % 5) as f64 * 0.25).collect();
    let m = 19;
    let x: Vec<f64> = (0..m)
        .map(|j| {
            if j % 3 == 0 {
                0.5
            } else if j == 4 {
                f64::NAN
            } else {
                -(j as f64) / 4.0
            }
        })
        .collect();
    let arr = |v: &Vec<f64>| Value::array(vec![v.len()], ArrayData::F64(v.clone().into()));
    for (e, args) in [("fwd", vec![arr(&x), arr(&t)]), ("bwd", vec![arr(&r), arr(&t), arr(&x)])] {
        let (want, _) = interp.entry(e).unwrap().call_with(&args, &CallOptions::default()).unwrap();
        for opts in common::thread_options() {
            let (got, _) = compiled.entry(e).unwrap().call_with(&args, &opts).unwrap();
            assert!(same(&got, &want), "{e} at {} threads: {} vs {}", opts.threads, got.to_json(), want.to_json());
        }
    }
}

/// `src` compiled for the C backend and for the interpreter; `None`, with
/// a note, when no C compiler is found (a failure under CI).
fn c_and_interp(name: &str, src: &str) -> Option<(arden::api::Compiled, arden::api::Compiled)> {
    if !c_compiler_or_skip(name) {
        return None;
    }
    cache_env();
    let prog = Program::from_source(name, src).unwrap();
    Some((prog.compile(Backend::C).unwrap(), prog.compile(Backend::Interp).unwrap()))
}

/// An array whose last use is an `if` belongs to the branch that runs: an
/// `update` there writes in place. Before, the emitter kept the array
/// alive across the branches and the update copied it, so the logsumexp
/// gradient (`onehot_add` updates one element of the cotangent) held two
/// arrays of n elements at its peak instead of one.
#[test]
fn an_update_in_a_branch_writes_in_place() {
    let src = "def lse [n] (x: [n]f64) : f64 =\n  let mx = maximum x\n  in mx + log (sum (for i. exp (x[i] - mx)))\n\
               entry g [n] (x: [n]f64) : [n]f64 = grad lse x\n";
    let Some((compiled, interp)) = c_and_interp("branch_update.ard", src) else { return };
    let n = 100_000;
    let x = Value::array(vec![n], ArrayData::F64((0..n).map(|i| ((i * 7919) % 1000) as f64 / 100.0).collect()));
    let (got, stats) =
        compiled.entry("g").unwrap().call_with(std::slice::from_ref(&x), &CallOptions { threads: 1, par_min: 1 << 15, team: Team::Fixed }).unwrap();
    let (want, _) = interp.entry("g").unwrap().call_with(&[x], &CallOptions::default()).unwrap();
    assert!(same(&got, &want));
    let result_bytes = 8 * n as i64;
    let peak = stats.unwrap().peak_bytes;
    assert!(peak < result_bytes * 3 / 2, "peak {peak} bytes for a result of {result_bytes}: the branch copied the array");
}

/// A `for` stacking scalars writes over a vector that dies there and that
/// its body reads only at its own index (element i read before element i
/// is stored), when nobody else holds the buffer: the logsumexp gradient's
/// adjoint over its table of exponentials (above: one array at the peak).
/// Not over a vector read elsewhere (`y[n - 1 - i]`), nor one still held
/// by a tuple that outlives the loop; the interpreter's bits at every
/// thread count, and the peak of one array where the buffer serves.
#[test]
fn maps_write_over_the_vector_they_consume() {
    let src = "entry over [n] (x: [n]f64) : (f64, [n]f64) =\n  let (s, y) = (sum (for i. exp x[i]), for i. exp x[i])\n  in (s, for i. y[i] * s - 1.0)\n\
               entry mirror [n] (x: [n]f64) : [n]f64 = let y = for i. exp x[i] in for i. y[n - 1 - i] - y[i]\n\
               entry held [n] (x: [n]f64) : ([n]f64, [n]f64) = let y = for i. exp x[i] in (y, for i. y[i] * 2.0)\n";
    let Some((compiled, interp)) = c_and_interp("maps_write_over.ard", src) else { return };
    for n in [0usize, 1, 3, 8, 17, 1000, 40_000] {
        let x = Value::array(vec![n], ArrayData::F64((0..n).map(|i| ((i * 7919) % 1000) as f64 / 250.0 - 2.0).collect()));
        for e in ["over", "mirror", "held"] {
            agrees_at_every_thread_count(&compiled, &interp, e, std::slice::from_ref(&x), &format!("{e} at n = {n}"));
        }
        if n == 40_000 {
            let one = CallOptions { threads: 1, par_min: 1 << 15, team: Team::Fixed };
            let (_, stats) = compiled.entry("over").unwrap().call_with(std::slice::from_ref(&x), &one).unwrap();
            let peak = stats.unwrap().peak_bytes;
            assert!(peak < 8 * n as i64 * 3 / 2, "peak {peak} bytes for a result of {}: the map made a second array", 8 * n);
        }
    }
}

/// Inside a parallel `for` each thread counts its allocations in its own
/// list (shared counters made two threads slower than one): at the end of
/// the region the counts are added up, so a call still leaves only its
/// results registered, and the peak, which then adds each thread's own
/// peak, is never below the peak of the same call on one thread.
#[test]
fn parallel_allocation_counts_add_up() {
    // every iteration builds, reads twice and drops an array of m elements
    let src = "entry f [n][m] (x: [n][m]f64) : ([n]f64, f64) =\n  let r = for i. let t = for j. x[i, j] * 2.0 in maximum t - minimum t\n  in (r, sum r)\n";
    let Some((compiled, interp)) = c_and_interp("par_alloc.ard", src) else { return };
    let (n, m) = (64, 1000);
    let x = Value::array(vec![n, m], ArrayData::F64((0..n * m).map(|i| ((i * 7919) % 1009) as f64).collect()));
    let (want, _) = interp.entry("f").unwrap().call_with(std::slice::from_ref(&x), &CallOptions::default()).unwrap();
    let mut peaks = vec![];
    for opts in common::thread_options() {
        for _ in 0..20 {
            let (got, stats) = compiled.entry("f").unwrap().call_with(std::slice::from_ref(&x), &opts).unwrap();
            assert!(same(&got, &want), "{} threads: {}", opts.threads, got.to_json());
            let stats = stats.unwrap();
            // the result array and the argument's wrapper
            assert!(stats.live_buffers <= 2, "{} threads: {} buffers left after the call", opts.threads, stats.live_buffers);
            peaks.push((opts.threads, stats.peak_bytes));
        }
    }
    let one = peaks.iter().filter(|p| p.0 == 1).map(|p| p.1).max().unwrap();
    assert!(one >= 8 * (n + m) as i64, "one thread: peak {one}");
    assert!(peaks.iter().filter(|p| p.0 == 2).all(|p| p.1 >= one), "{peaks:?}");
}

/// A float `scatter_add` skips the store of a value that changes no bit
/// (reverse mode pads its pairs with `(0, 0.0)`, whose stores to element
/// 0 were a chain of dependent additions): the signs of zeros come out as
/// the interpreter's, bit for bit, on one thread and on two.
#[test]
fn scatter_add_of_zeros_keeps_the_signs_of_zeros() {
    let src = "entry s [n][k] (d: [n]f64) (ix: [k]i64) (v: [k]f64) : [n]f64 = scatter_add d ix v\n\
               entry s32 [n][k] (d: [n]f32) (ix: [k]i64) (v: [k]f32) : [n]f32 = scatter_add d ix v\n";
    let Some((compiled, interp)) = c_and_interp("scatter_zeros.ard", src) else { return };
    let bits = |v: &Value| match v {
        Value::Array(a) => match &a.data {
            ArrayData::F64(x) => x.iter().map(|f| f.to_bits()).collect::<Vec<u64>>(),
            ArrayData::F32(x) => x.iter().map(|f| f.to_bits() as u64).collect(),
            _ => panic!("not floats"),
        },
        _ => panic!("not an array"),
    };
    let dest = [-0.0, 0.0, -0.0, 1.0, -0.0, f64::NAN];
    let ix = [0i64, 0, 1, 2, 2, 3, 4, 4, 5, 5];
    let vals = [0.0, -0.0, -0.0, -0.0, 0.0, 0.0, -0.0, -0.0, 0.0, -0.0];
    for f32 in [false, true] {
        let arr = |x: &[f64]| {
            if f32 {
                Value::array(vec![x.len()], ArrayData::F32(x.iter().map(|v| *v as f32).collect()))
            } else {
                Value::array(vec![x.len()], ArrayData::F64(x.to_vec().into()))
            }
        };
        let args = [arr(&dest), Value::array(vec![ix.len()], ArrayData::I64(ix.to_vec().into())), arr(&vals)];
        let name = if f32 { "s32" } else { "s" };
        let (want, _) = interp.entry(name).unwrap().call_with(&args, &CallOptions::default()).unwrap();
        for opts in common::thread_options() {
            let (got, _) = compiled.entry(name).unwrap().call_with(&args, &opts).unwrap();
            assert_eq!(bits(&got), bits(&want), "{name} at {} threads: {} vs {}", opts.threads, got.to_json(), want.to_json());
        }
    }
}

/// Operands for the float primitives: zeros of both signs, tiny, ordinary
/// and huge values, infinities, NaN, and a sweep over [-20, 20].
fn float_operands() -> Vec<f64> {
    let mut xs = vec![0.0, -0.0, 1e-300, -1e-300, 1e-10, -1e-10, 0.5, -0.5, 1.0, -1.0, 0.999, -0.999, 2.0, 2.5, 30.0, -30.0, 700.0, 1e300, -1e300];
    xs.extend([f64::INFINITY, f64::NEG_INFINITY, f64::NAN, f64::MIN_POSITIVE, f64::MAX]);
    xs.extend((0..400).map(|k| -20.0 + 0.1 * k as f64 + 0.013_579));
    xs
}

/// Every float primitive a built-in applies, taken from `Prim::ALL`, gives
/// the interpreter's bits in C, in `f64` and `f32`, at 1 and 2 threads:
/// both call the same maths library and the same special-function code
/// (any NaN matches any NaN).
#[test]
fn float_primitives_give_the_interpreters_bits() {
    use arden::ir::Prim;
    use arden::ir::prim::{Accepts, Typing};
    let mut src = String::new();
    let mut entries = vec![];
    for p in Prim::ALL {
        let row = p.row();
        let (Some(name), Typing::Same(Accepts::Float | Accepts::Numeric | Accepts::Any)) = (row.builtin, row.typing) else { continue };
        let call = if row.arity == 1 { format!("{name} x") } else { format!("{name} x y") };
        for t in ["f64", "f32"] {
            src.push_str(&format!("entry {name}_{t} [n] (xs: [n]{t}) (ys: [n]{t}) : [n]{t} = map2 (\\x y -> {call}) xs ys\n"));
            entries.push(format!("{name}_{t}"));
        }
    }
    assert!(entries.len() >= 40, "{entries:?}");
    let Some((compiled, interp)) = c_and_interp("float_prims.ard", &src) else { return };
    let bits = |v: &Value| match v {
        Value::Array(a) => match &a.data {
            ArrayData::F64(x) => x.iter().map(|f| if f.is_nan() { None } else { Some(f.to_bits()) }).collect::<Vec<_>>(),
            ArrayData::F32(x) => x.iter().map(|f| if f.is_nan() { None } else { Some(f.to_bits() as u64) }).collect(),
            _ => panic!("not floats"),
        },
        _ => panic!("not an array"),
    };
    let xs = float_operands();
    let ys: Vec<f64> = xs.iter().rev().copied().collect();
    for e in &entries {
        let arr = |x: &[f64]| {
            if e.ends_with("f32") {
                Value::array(vec![x.len()], ArrayData::F32(x.iter().map(|v| *v as f32).collect()))
            } else {
                Value::array(vec![x.len()], ArrayData::F64(x.to_vec().into()))
            }
        };
        let args = [arr(&xs), arr(&ys)];
        let (want, _) = interp.entry(e).unwrap().call_with(&args, &CallOptions::default()).unwrap();
        for opts in [CallOptions { threads: 1, par_min: 1 << 15, team: Team::Fixed }, CallOptions { threads: 2, par_min: 0, team: Team::Fixed }] {
            let (got, _) = compiled.entry(e).unwrap().call_with(&args, &opts).unwrap();
            assert_eq!(bits(&got), bits(&want), "{e} at {} threads: {} vs {}", opts.threads, got.to_json(), want.to_json());
        }
    }
}

/// A row of scalars written as an array literal (what `unroll_for` makes
/// of a small `for`) is built in place in the stacking `for`'s result, as
/// a row built by an inner `for` is: no buffer and no copy per row.
#[test]
fn literal_rows_are_written_in_place() {
    let src = "entry f [n] (x: [n]f64) : [n][3]f64 = for j. [x[j], x[j] * 2.0, -x[j]]\n\
               entry g [n] (x: [n]f64) : [n][2]f64 = for j. for (i < 2). x[j] + f64 i\n";
    let prog = Program::from_source("rows.ard", src).unwrap();
    for e in ["f", "g"] {
        let func = prog.entry(e).unwrap().function().clone();
        let c = arden::backend::c::emit::emit_function(&func, 0).unwrap();
        assert!(!c.contains("ard_copy("), "{e}: a row is copied:\n{c}");
    }
    let Some((compiled, interp)) = c_and_interp("rows.ard", src) else { return };
    let x = Value::array(vec![5], ArrayData::F64(vec![1.5, -0.0, 2.0, -3.25, 1e300].into()));
    for e in ["f", "g"] {
        for opts in common::thread_options() {
            let (got, _) = compiled.entry(e).unwrap().call_with(std::slice::from_ref(&x), &opts).unwrap();
            let (want, _) = interp.entry(e).unwrap().call_with(std::slice::from_ref(&x), &CallOptions::default()).unwrap();
            assert!(same(&got, &want), "{e}: {} vs {}", got.to_json(), want.to_json());
        }
    }
}

/// `replicate n 0.0` (and `0`, `false`) is a zeroed allocation (calloc for
/// fresh memory, a memset for a recycled buffer) instead of a fill loop;
/// `-0.0` keeps its loop. Checked bitwise against the interpreter where a
/// freed buffer of the same size holds other values first (the recycled
/// path) and at a size calloc takes from fresh pages, and that the
/// generated C has no fill loop for the zeros.
#[test]
fn zero_replicates_are_zeroed_allocations() {
    let src = "entry f [n] (x: [n]f64) : ([n]f64, [n]f64, [n]i64, [n]bool, f64) =\n  \
               let junk = scan (+) 1.0 x\n  \
               let s = sum junk + sum (reverse junk)\n  \
               in (replicate n 0.0, replicate n (-0.0), replicate n 0, replicate n false, s)\n";
    let prog = Program::from_source("zeros.ard", src).unwrap();
    let c = arden::backend::c::emit::emit_function(prog.entry("f").unwrap().function(), 0).unwrap();
    assert_eq!(c.matches("ard_new_zero_at(").count(), 3, "{c}");
    let Some((compiled, interp)) = c_and_interp("zeros.ard", src) else { return };
    for n in [0usize, 5, 1000, 3_000_000] {
        let x = Value::array(vec![n], ArrayData::F64((0..n).map(|i| i as f64 - 2.5).collect()));
        let (got, _) =
            compiled.entry("f").unwrap().call_with(std::slice::from_ref(&x), &CallOptions { threads: 1, par_min: 1 << 15, team: Team::Fixed }).unwrap();
        let (want, _) = interp.entry("f").unwrap().call_with(std::slice::from_ref(&x), &CallOptions::default()).unwrap();
        assert_eq!(got.to_json(), want.to_json(), "n = {n}");
        let Value::Tuple(parts) = &got else { panic!("a tuple") };
        let Value::Array(neg) = &parts[1] else { panic!("an array") };
        let ArrayData::F64(neg) = &neg.data else { panic!("f64") };
        assert!(neg.iter().all(|v| v.to_bits() == (-0.0f64).to_bits()), "n = {n}: -0.0 lost its sign");
    }
}

/// A call's arrays are not faulted in afresh at every call: glibc served
/// buffers of 128 KiB or more by `mmap` (and gave a freed heap top of more
/// than 256 KiB back), so each call took a page fault per 4 KiB of every
/// large array, and gradients whose arrays crossed 128 KiB between n and
/// 4n grew 6-8x (issue 24, `rotfor` in bench/linear). The runtime keeps
/// buffers under 4 MiB in the heap: a second call faults (almost) nowhere.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn a_second_call_reuses_the_heap_pages_of_the_first() {
    let src = "entry g [n] (y: [n]f64) : [n]f64 = grad (\\(y: [n]f64) -> sum (for i. (reverse y)[i] * (rotate 3 y)[i])) y\n";
    let Some((compiled, _)) = c_and_interp("heap_pages.ard", src) else { return };
    let n = 100_000;
    let y = Value::array(vec![n], ArrayData::F64((0..n).map(|i| 1.0 + (i % 7) as f64 / 100.0).collect()));
    let g = compiled.entry("g").unwrap();
    let opts = CallOptions { threads: 1, par_min: 1 << 15, team: Team::Fixed };
    // the faults of this thread (other tests run beside it)
    let faults = || {
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) }, 0);
        usage.ru_minflt
    };
    let (first, _) = g.call_with(std::slice::from_ref(&y), &opts).unwrap();
    drop(first);
    let before = faults();
    let (second, stats) = g.call_with(std::slice::from_ref(&y), &opts).unwrap();
    let taken = faults() - before;
    drop(second);
    // its arrays: 5 of n elements (800 KB each), about 1,000 pages
    assert!(stats.unwrap().peak_bytes >= 4 * 8 * n as i64);
    assert!(taken < 100, "the second call took {taken} page faults");
}

/// Buffers of 4 MiB or more (mmapped by malloc, a fresh mapping at every
/// call) are kept for the next call of the same size, results the caller
/// drops included: a gradient's 10 MB result took the kernel's page faults
/// and clearing at every call (logsumexp's gradient, bench/notes.md). The
/// second call of an entry with a 32 MB result faults (almost) nowhere;
/// without the cache it takes one fault per 2 MiB huge page at the least.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn large_buffers_are_kept_for_the_next_call() {
    let src = "entry f [n] (x: [n]f64) : [n]f64 = for i. x[i] * 2.0 + 1.0\n";
    let Some((compiled, _)) = c_and_interp("kept_buffers.ard", src) else { return };
    let n = 4 << 20;
    let x = Value::array(vec![n], ArrayData::F64((0..n).map(|i| (i % 13) as f64).collect()));
    let f = compiled.entry("f").unwrap();
    let opts = CallOptions { threads: 1, par_min: 1 << 15, team: Team::Fixed };
    let faults = || {
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) }, 0);
        usage.ru_minflt
    };
    let x2 = Value::array(vec![n], ArrayData::F64((0..n).map(|i| (i % 7) as f64).collect()));
    // results stay in the runtime's buffer (no copy into a Vec to fault in)
    let (first, _) = f.call_borrowed(&[x.as_arg()], &opts, None).unwrap();
    drop(first);
    let args = [x2.as_arg()];
    let before = faults();
    let (second, _) = f.call_borrowed(&args, &opts, None).unwrap();
    let taken = faults() - before;
    let Value::Array(a) = second.into_value() else { panic!("not an array") };
    let ArrayData::F64(v) = &a.data else { panic!("not f64") };
    assert!(v.iter().enumerate().all(|(i, y)| *y == (i % 7) as f64 * 2.0 + 1.0), "the second call's result is wrong");
    assert!(taken < 8, "the second call took {taken} page faults");
}

/// Sums combine in the fixed order of LANGUAGE.md §10 on both backends and
/// at every thread count: 10^7 copies of 0.1 sum to the same bits
/// everywhere, within the documented bound (each lane adds at most 512
/// terms, then trees), far closer than a left-to-right sum.
#[test]
fn long_sums_are_pairwise_and_thread_independent() {
    let src = "entry s (k: i64) : f64 = sum (replicate k 0.1)\n\
               entry f (k: i64) : f64 = sum (for (i < k). f64 (i % 2) * 0.2)\n\
               entry cols (k: i64) : [2]f64 = sum (replicate k [0.1, -0.3])\n";
    let Some((compiled, interp)) = c_and_interp("long_sums.ard", src) else { return };
    let n = 10_000_000usize;
    let left_to_right = (0..n).fold(0.0f64, |a, _| a + 0.1);
    let exact = 1e6;
    let bound = (512.0 + 3.0 + (n as f64 / 4096.0).log2()) * f64::EPSILON / 2.0 * exact;
    let args = [Value::I64(n as i64)];
    for e in ["s", "f", "cols"] {
        let (want, _) = interp.entry(e).unwrap().call_with(&args, &CallOptions::default()).unwrap();
        let got = match &want {
            Value::F64(x) => *x,
            Value::Array(a) => match &a.data {
                ArrayData::F64(v) => v[0],
                _ => unreachable!(),
            },
            _ => unreachable!(),
        };
        assert!((got - exact).abs() <= bound, "{e}: {got} is further than {bound} from {exact}");
        assert!((left_to_right - exact).abs() > 1e4 * (got - exact).abs(), "{e}: {got} against {left_to_right} left to right");
        for opts in common::thread_options() {
            let (c, _) = compiled.entry(e).unwrap().call_with(&args, &opts).unwrap();
            assert!(same(&c, &want), "{e} at {} threads: {} vs {}", opts.threads, c.to_json(), want.to_json());
        }
    }
}

/// An outermost `for` of a few constant iterations runs in order and the
/// loops in its body in parallel (`SHORT_OUTER` in the emitter), rows an
/// inner `for` adds into the outer sum included: the interpreter's bits
/// at every thread count.
#[test]
fn short_outer_loops_agree() {
    let src = "entry f [n] (x: [n]f64) : [3]f64 = for (r < 3). sum (for i. x[i] * f64 r)\n\
               entry g [n] (x: [n]f64) : [n]f64 = sum (for (r < 3). for i. x[i] * f64 r + 0.1)\n\
               entry h [n] (x: [n]f64) : f64 = sum (for (r < 2). sum (for i. x[i] - f64 r))\n";
    let Some((compiled, interp)) = c_and_interp("short_outer.ard", src) else { return };
    let x = Value::array(vec![100_003], ArrayData::F64((0..100_003).map(|i| (i as f64 * 0.37).sin() * 1e3).collect::<Vec<_>>().into()));
    for e in ["f", "g", "h"] {
        let (want, _) = interp.entry(e).unwrap().call_with(std::slice::from_ref(&x), &CallOptions::default()).unwrap();
        for opts in common::thread_options() {
            let (got, _) = compiled.entry(e).unwrap().call_with(std::slice::from_ref(&x), &opts).unwrap();
            assert!(same(&got, &want), "{e} at {} threads", opts.threads);
        }
    }
}

/// The same with the outer size known only at run time (a batch): with
/// twice as many threads as iterations (or, for a sum, chunks) the loop
/// runs in order and its body's loops in parallel. A convolution's filter
/// gradient (a sum over the batch of `[f][c][w]` rows) and its forward map,
/// an error in one of the batch's iterations (the first one's message), at
/// batch sizes on both sides of the choice: the interpreter's bits and
/// errors at every thread count.
#[test]
fn short_outer_loops_chosen_at_run_time_agree() {
    let src = "def conv [b][c][l][f][w] (filt: [f][c][w]f64) (x: [b][c][l]f64) : [b][f][l - w + 1]f64 =\n\
               \x20 for s k (t < l - w + 1). tanh (sum (for ch. sum (for o. x[s, ch, t + o] * filt[k, ch, o])))\n\
               entry fwd [b][c][l][f][w] (filt: [f][c][w]f64) (x: [b][c][l]f64) : [b][f][l - w + 1]f64 = conv filt x\n\
               entry grad_f [b][c][l][f][w] (filt: [f][c][w]f64) (x: [b][c][l]f64) : [f][c][w]f64 =\n\
               \x20 grad (\\g -> sum (flatten (flatten (conv g x)))) filt\n\
               entry pick [b][n] (x: [b][n]f64) (ix: [b]i64) : [b][n]f64 = for s. for i. x[s, ix[s]] * x[s, i]\n";
    let Some((compiled, interp)) = c_and_interp("short_outer_rt.ard", src) else { return };
    let (c, l, f, w) = (3, 700, 4, 5);
    let filt = Value::array(vec![f, c, w], ArrayData::F64((0..f * c * w).map(|i| (i as f64 * 0.61).sin() * 0.3).collect::<Vec<_>>().into()));
    for b in [1, 2, 3, 9, 17] {
        let x = Value::array(vec![b, c, l], ArrayData::F64((0..b * c * l).map(|i| (i as f64 * 0.37).cos()).collect::<Vec<_>>().into()));
        for e in ["fwd", "grad_f"] {
            let args = [filt.clone(), x.clone()];
            let (want, _) = interp.entry(e).unwrap().call_with(&args, &CallOptions::default()).unwrap();
            for opts in common::thread_options() {
                let (got, _) = compiled.entry(e).unwrap().call_with(&args, &opts).unwrap();
                assert!(same(&got, &want), "{e}, batch {b}, {} threads", opts.threads);
            }
        }
        let n = 5000;
        let x = Value::array(vec![b, n], ArrayData::F64((0..b * n).map(|i| i as f64).collect::<Vec<_>>().into()));
        for bad in [None, Some(0), Some(b - 1)] {
            let ix: Vec<i64> = (0..b).map(|s| if Some(s) == bad { n as i64 + s as i64 } else { s as i64 }).collect();
            let args = [x.clone(), Value::array(vec![b], ArrayData::I64(ix.into()))];
            let want = interp.entry("pick").unwrap().call_with(&args, &CallOptions::default()).map(|(v, _)| v.to_json()).map_err(|e| e.to_string());
            for opts in common::thread_options() {
                let got = compiled.entry("pick").unwrap().call_with(&args, &opts).map(|(v, _)| v.to_json()).map_err(|e| e.to_string());
                assert_eq!(got, want, "pick, batch {b}, bad {bad:?}, {} threads", opts.threads);
            }
        }
    }
}

/// A window read `x[t + o]` adds its loop counters in plain C (no wrapping
/// helper), so that gcc sees the lanes' reads as one contiguous load; a
/// sum with a value that is no counter keeps the wrapping helper, whose
/// bits the interpreter's `wrapping_add` gives at the extremes.
#[test]
fn counters_add_in_plain_c() {
    let src = "entry win [l][w] (x: [l]f64) (f: [w]f64) : [l - w + 1]f64 = for (t < l - w + 1). sum (for o. x[t + o] * f[o])\n\
               entry wrap (a: i64) (b: i64) : (i64, i64) = (a + b, a - b)\n";
    let prog = Program::from_source("counters.ard", src).unwrap();
    let c = arden::backend::c::emit::emit_function(prog.entry("win").unwrap().function(), 0).unwrap();
    assert!(!c.contains("ard_add64("), "a wrapping add of counters:\n{c}");
    let c = arden::backend::c::emit::emit_function(prog.entry("wrap").unwrap().function(), 0).unwrap();
    assert!(c.contains("ard_add64(") && c.contains("ard_sub64("), "no wrapping arithmetic for parameters:\n{c}");
    let Some((compiled, interp)) = c_and_interp("counters.ard", src) else { return };
    for (a, b) in [(i64::MAX, 1), (i64::MIN, 1), (i64::MIN, -1), (5, 7)] {
        let args = [Value::I64(a), Value::I64(b)];
        let want = interp.entry("wrap").unwrap().call(&args).unwrap().to_json();
        assert_eq!(compiled.entry("wrap").unwrap().call(&args).unwrap().to_json(), want, "{a} and {b}");
    }
    let x = Value::array(vec![1000], ArrayData::F64((0..1000).map(|i| (i as f64 * 0.37).sin()).collect::<Vec<_>>().into()));
    let f = Value::array(vec![5], ArrayData::F64(vec![0.5, -1.0, 2.0, 0.25, 1.5].into()));
    agrees_at_every_thread_count(&compiled, &interp, "win", &[x, f], "win");
}

/// `entry` of `compiled` gives the interpreter's bits on `args` with every
/// call option of [`common::thread_options`].
fn agrees_at_every_thread_count(compiled: &arden::api::Compiled, interp: &arden::api::Compiled, entry: &str, args: &[Value], what: &str) {
    let (want, _) = interp.entry(entry).unwrap().call_with(args, &CallOptions::default()).unwrap();
    for opts in common::thread_options() {
        let (got, _) = compiled.entry(entry).unwrap().call_with(args, &opts).unwrap();
        assert!(same(&got, &want), "{what} at {} threads", opts.threads);
    }
}

/// A short chunk of a sum with a small body (fewer than 8 terms: a sum of
/// 1-7 terms, or the last chunk of one of at most 512) adds its terms in
/// registers, each term's copy of the body guarded by whether it exists,
/// not through lanes in memory; the interpreter's bits at every length
/// from 0 to 17 (each tail length, one and two chunks) and thread count.
#[test]
fn short_chunks_add_in_registers() {
    let src = "entry gm [n][m] (x: [n][m]f64) (y: [m]f64) : [n]f64 = for i. sum (for j. x[i, j] * y[j] * y[j])\n";
    let prog = Program::from_source("short.ard", src).unwrap();
    let c = arden::backend::c::emit::emit_function(prog.entry("gm").unwrap().function(), 0).unwrap();
    assert!(c.contains(" + 6 < ard_hi"), "no guarded copies for a short chunk:\n{c}");
    let Some((compiled, interp)) = c_and_interp("short.ard", src) else { return };
    for m in 0..18usize {
        let n = 37;
        let x = Value::array(vec![n, m], ArrayData::F64((0..n * m).map(|i| 1.0 + (i as f64 * 0.61).sin().abs()).collect::<Vec<_>>().into()));
        // terms of three magnitudes: another order of the lanes changes bits
        let y = Value::array(vec![m], ArrayData::F64((0..m).map(|i| (i as f64 * 1.3).cos() * 10f64.powi(i as i32 % 3)).collect::<Vec<_>>().into()));
        agrees_at_every_thread_count(&compiled, &interp, "gm", &[x, y], &format!("m = {m}"));
    }
}

/// A counted loop whose array state its body passes on by updates alone
/// (reverse mode's in-place additions, `scatter_nest`) makes the state
/// unique once, before the loop, and updates it without testing: no
/// `if (ard_unique(` per element. A state shared with a value used after
/// the loop (`kept`) or an argument (`param`) is copied first, so that
/// value is unchanged; the interpreter's results and errors either way.
#[test]
fn loop_states_updated_in_place_are_made_unique_once() {
    let src = "entry kept [n] (a: [n]f64) (p: [4]i64) : ([n]f64, [n]f64) =\n\
                 let c = for (i < n). a[i] * 2.0\n\
                 let b = loop acc = c for i < 4 do (let o = acc[p[i]] in acc with [p[i]] = o + 1.0)\n\
                 in (c, b)\n\
               entry param [n] (a: [n]f64) (p: [4]i64) : [n]f64 =\n\
                 loop acc = a for i < 4 do (let o = acc[p[i]] in acc with [p[i]] = o + 0.5)\n";
    let prog = Program::from_source("unique.ard", src).unwrap();
    for e in ["kept", "param"] {
        let c = arden::backend::c::emit::emit_function(prog.entry(e).unwrap().function(), 0).unwrap();
        assert!(!c.contains("if (ard_unique("), "{e}: a uniqueness test per update:\n{c}");
        assert!(c.contains("if (!ard_unique("), "{e}: no uniqueness made before the loop:\n{c}");
    }
    let Some((compiled, interp)) = c_and_interp("unique.ard", src) else { return };
    let a = Value::array(vec![3], ArrayData::F64(vec![1.0, 2.0, 3.0].into()));
    for (e, p) in [("kept", [0, 2, 2, 1]), ("param", [0, 2, 2, 1]), ("param", [0, 5, 2, 1])] {
        let args = [a.clone(), Value::array(vec![4], ArrayData::I64(p.to_vec().into()))];
        let want = interp.entry(e).unwrap().call(&args).map(|v| v.to_json()).map_err(|x| x.to_string());
        for opts in common::thread_options() {
            let got = compiled.entry(e).unwrap().call_with(&args, &opts).map(|(v, _)| v.to_json()).map_err(|x| x.to_string());
            assert_eq!(got, want, "{e} {p:?} at {} threads", opts.threads);
        }
    }
    let kept = interp.entry("kept").unwrap().call(&[a.clone(), Value::array(vec![4], ArrayData::I64(vec![0, 2, 2, 1].into()))]).unwrap();
    assert_eq!(kept.to_json().to_string(), "[[2.0, 4.0, 6.0], [3.0, 5.0, 8.0]]");
}

/// An `update` at a position its block read from the same array just
/// before (reverse mode's in-place additions) is not checked again: that
/// read failed first. An update at another position keeps its check. The
/// interpreter's results and errors either way.
#[test]
fn updates_after_a_read_of_their_position_are_unchecked() {
    let src = "entry bump [n] (x: [n]f64) (i: i64) (j: i64) : [n]f64 = let o = x[i] in x with [i] = o + 1.0\n\
               entry set [n] (x: [n]f64) (i: i64) (j: i64) : [n]f64 = let o = x[j] in x with [i] = o\n";
    let prog = Program::from_source("upd_read.ard", src).unwrap();
    let c_of = |e: &str| arden::backend::c::emit::emit_function(prog.entry(e).unwrap().function(), 0).unwrap();
    assert!(!c_of("bump").contains("update index"), "a second check:\n{}", c_of("bump"));
    assert!(c_of("set").contains("update index"), "no check of an unread position:\n{}", c_of("set"));
    let Some((compiled, interp)) = c_and_interp("upd_read.ard", src) else { return };
    let x = Value::array(vec![4], ArrayData::F64(vec![1.0, 2.0, 3.0, 4.0].into()));
    for e in ["bump", "set"] {
        for (i, j) in [(0, 3), (3, 0), (4, 0), (-1, 2), (2, 7)] {
            let args = [x.clone(), Value::I64(i), Value::I64(j)];
            let want = interp.entry(e).unwrap().call(&args).map(|v| v.to_json()).map_err(|e| e.to_string());
            let got = compiled.entry(e).unwrap().call(&args).map(|v| v.to_json()).map_err(|e| e.to_string());
            assert_eq!(got, want, "{e} at {i}, {j}");
        }
    }
}

/// Copies of whole arrays and rows of 256 KiB or more (`with`, a copy
/// before writing, reverse mode's saved states) and zero fills of reused
/// buffers are split among the threads outside parallel regions: the same
/// array, to the last byte, at every thread count, for lengths around the
/// split (a cache line per piece) and a second call reusing the buffers.
#[test]
fn large_copies_split_among_threads_agree() {
    let src = "entry upd [m][n] (x: [m][n]f64) : [m][n]f64 =\n\
               \x20 loop a = x for t < m do a with [t] = for i. a[t, i] * 2.0 + f64 t\n\
               entry keep [m][n] (x: [m][n]f64) : ([m][n]f64, [m][n]f64) = (x with [0] = x[m - 1], x)\n\
               entry zeros [m][n] (x: [m][n]f64) : [m][n]f64 = for r. for i. x[r, i] + 0.0\n";
    let Some((compiled, interp)) = c_and_interp("large_copies.ard", src) else { return };
    for n in [32_767, 32_768, 32_769, 100_003, 600_001] {
        let m = 3;
        let x = Value::array(vec![m, n], ArrayData::F64((0..m * n).map(|i| (i as f64 * 0.37).sin()).collect::<Vec<_>>().into()));
        for e in ["upd", "keep", "zeros"] {
            let args = [x.clone()];
            let (want, _) = interp.entry(e).unwrap().call_with(&args, &CallOptions::default()).unwrap();
            for opts in common::thread_options() {
                for call in 0..2 {
                    let (got, _) = compiled.entry(e).unwrap().call_with(&args, &opts).unwrap();
                    assert!(same(&got, &want), "{e}, n = {n}, {} threads, call {call}", opts.threads);
                }
            }
        }
    }
}

/// The text from the innermost `for (` before the first `marker` in `c` to
/// that marker: the head and body of the loop computing it.
fn loop_around<'a>(c: &'a str, marker: &str) -> &'a str {
    let at = c.find(marker).unwrap_or_else(|| panic!("no {marker} in\n{c}"));
    let start = c[..at].rfind("for (").unwrap_or_else(|| panic!("no loop around {marker} in\n{c}"));
    &c[start..at]
}

/// The elementwise epilogue of a contracted product (`tanh` of the sums
/// plus a bias: a two-layer network's hidden layer) is a plain counted
/// loop the C compiler vectorises: the sum inside it is a read of the
/// kernel's buffer, not a loop, so no stop check runs per element (before,
/// every element polled the stop flag, an early exit, and the loop ran
/// scalar: 90% of the network's loss). The interpreter's bits at every
/// thread count.
#[test]
fn contraction_epilogues_are_plain_loops() {
    let src = "entry f [n][k][m] (a: [n][k]f64) (b: [m][k]f64) (c: [m]f64) : [n][m]f64 =\n  \
               for i j. tanh (sum (for p. a[i, p] * b[j, p]) + c[j])\n";
    let prog = Program::from_source("epilogue.ard", src).unwrap();
    let c = arden::backend::c::emit::emit_function(prog.entry("f").unwrap().function(), 0).unwrap();
    let body = loop_around(&c, "ard_vm_tanh(");
    assert!(!body.contains("ARD_STOPPING"), "a stop check in the epilogue's loop:\n{body}");
    let Some((compiled, interp)) = c_and_interp("epilogue.ard", src) else { return };
    let (n, k, m) = (37usize, 19usize, 23usize);
    let mat = |r: usize, c: usize, s: f64| Value::array(vec![r, c], ArrayData::F64((0..r * c).map(|i| ((i as f64) * s).sin()).collect()));
    let args = [mat(n, k, 0.37), mat(m, k, 0.11), Value::array(vec![m], ArrayData::F64((0..m).map(|i| i as f64 / 7.0 - 1.0).collect()))];
    let (want, _) = interp.entry("f").unwrap().call_with(&args, &CallOptions::default()).unwrap();
    for opts in common::thread_options() {
        let (got, _) = compiled.entry("f").unwrap().call_with(&args, &opts).unwrap();
        assert!(same(&got, &want), "at {} threads: {} vs {}", opts.threads, got.to_json(), want.to_json());
    }
}

/// Sums of every length up to 70 terms and at the edges of the chunk
/// lengths (8 terms a chunk up to 512, 4096 from 262,144), where the C
/// backend takes different paths: an outermost sum whose lanes are a local
/// array the lane loop vectorises, short inner sums with lanes in
/// registers and the chunks' results on the stack, a long inner body
/// (not copied per lane), a sum beside a stacked result. The
/// interpreter's bits at every thread count.
#[test]
fn sums_of_every_length_agree() {
    let src = "entry outer [n] (x: [n]f64) : f64 = sum (for i. exp (x[i] - 0.5))\n\
               entry inner [m][n] (x: [m][n]f64) : [m]f64 = for r. sum (for i. (x[r, i] - 0.25) * x[r, i])\n\
               entry inner_long [m][n] (x: [m][n]f64) : [m]f64 =\n  \
                 for r. sum (for i. let y = x[r, i] - 0.25 in exp y * y + log1p (y * y) - sin y * cos y + tanh y * (y - 1.0) / (y + 4.0))\n\
               entry beside [n] (x: [n]f64) : ([n]f64, f64) = (for i. exp x[i], sum (for i. x[i] * x[i]))\n\
               entry both [n] (x: [n]f64) : f64 = sum (for i. x[i] * 3.0) + sum (for i. 1.0 / (x[i] + 9.0))\n";
    let Some((compiled, interp)) = c_and_interp("sum_lengths.ard", src) else { return };
    let term = |i: usize| ((i as f64) * 0.7).sin() * [1.0, 1e3, 1e-3, 1e6][i % 4] / 1e6 + ((i * 7 % 11) as f64 - 5.0) * 0.4;
    let vec = |n: usize| Value::array(vec![n], ArrayData::F64((0..n).map(term).collect()));
    let lengths: Vec<usize> = (0..=70).chain([511, 512, 513, 4095, 4097, 262_143, 262_145, 300_001]).collect();
    for n in lengths {
        let rows = if n > 5000 { 1 } else { 3 };
        let mat = Value::array(vec![rows, n], ArrayData::F64((0..rows * n).map(term).collect()));
        for (e, arg) in [("outer", vec(n)), ("inner", mat.clone()), ("inner_long", mat), ("beside", vec(n)), ("both", vec(n))] {
            let args = [arg];
            let (want, _) = interp.entry(e).unwrap().call_with(&args, &CallOptions::default()).unwrap();
            for opts in common::thread_options() {
                let (got, _) = compiled.entry(e).unwrap().call_with(&args, &opts).unwrap();
                assert!(same(&got, &want), "{e}, n = {n}, {} threads: {} vs {}", opts.threads, got.to_json(), want.to_json());
            }
        }
    }
}

/// Loops fused by `fuse_consumer_for` (a row computed in the loop that
/// reads it, in the reverse programs of a two-layer network and of softmax
/// cross-entropy too): the interpreter's bits at every thread count, and
/// its errors where both fused loops can fail.
#[test]
fn vertically_fused_loops_give_the_interpreters_bits() {
    let src = "def mlp [b][d][h] ((w1, w2): ([h][d]f64, [h]f64)) (x: [b][d]f64) (y: [b]f64) : f64 =\n\
               \x20 let hidden = for i j. tanh (sum (for p. x[i, p] * w1[j, p]))\n\
               \x20 let out = for i. sum (for j. hidden[i, j] * w2[j])\n\
               \x20 in sum (for i. (out[i] - y[i]) * (out[i] - y[i]))\n\
               entry mlp_grad [b][d][h] (w1: [h][d]f64) (w2: [h]f64) (x: [b][d]f64) (y: [b]f64) : ([h][d]f64, [h]f64) = grad (\\p -> mlp p x y) (w1, w2)\n\
               def ce [n][d][c] (w: [c][d]f64) (x: [n][d]f64) (label: [n]i64) : f64 =\n\
               \x20 let logits = for i k. sum (for p. x[i, p] * w[k, p])\n\
               \x20 in sum (for i. let mx = maximum logits[i] in mx + log (sum (for k. exp (logits[i, k] - mx))) - logits[i, label[i]])\n\
               entry ce_grad [n][d][c] (w: [c][d]f64) (x: [n][d]f64) (label: [n]i64) : [c][d]f64 = grad (\\v -> ce v x label) w\n\
               entry part [n] (x: [n]f64) (y: [n]f64) : ([n]f64, f64) =\n\
               \x20 let (a, b) = unzip (for i. (x[i] * 2.0, exp y[i]))\n\
               \x20 let t = for i. a[i] + 1.0\n\
               \x20 in (t, sum (for i. b[i] * t[i] + b[i]))\n\
               entry failing [n] (x: [n]f64) (j: [n]i64) : (f64, f64) =\n\
               \x20 let (a, b) = unzip (for i. (x[j[i]], exp x[i]))\n\
               \x20 in (sum a, sum (for i. b[i] * x[j[n - 1 - i]] + b[i]))\n";
    let prog = Program::from_source("vfuse.ard", src).unwrap();
    for e in ["mlp_grad", "ce_grad", "part", "failing"] {
        assert!(prog.opt_report().fired.iter().any(|(f, m)| f == e && m.contains_key("fuse_consumer_for")), "{e}");
    }
    let Some((compiled, interp)) = c_and_interp("vfuse.ard", src) else { return };
    let arr = |shape: Vec<usize>, f: &dyn Fn(usize) -> f64| {
        let n = shape.iter().product();
        Value::array(shape, ArrayData::F64((0..n).map(f).collect::<Vec<_>>().into()))
    };
    let ints = |v: Vec<i64>| Value::array(vec![v.len()], ArrayData::I64(v.into()));
    let wave = |i: usize| ((i * 7919) % 101) as f64 / 37.0 - 1.3;
    let (b, d, h, n, c) = (70, 5, 9, 67, 4);
    let cases: Vec<(&str, Vec<Value>)> = vec![
        ("mlp_grad", vec![arr(vec![h, d], &|i| wave(i) * 0.3), arr(vec![h], &wave), arr(vec![b, d], &|i| wave(i + 3)), arr(vec![b], &|i| wave(i + 11))]),
        ("ce_grad", vec![arr(vec![c, d], &|i| wave(i) * 0.5), arr(vec![n, d], &|i| wave(i + 5)), ints((0..n as i64).map(|i| (i * 3) % c as i64).collect())]),
        ("ce_grad", vec![arr(vec![c, d], &wave), arr(vec![n, d], &wave), ints((0..n as i64).map(|i| if i == 40 { 9 } else { i % 4 }).collect())]),
        ("part", vec![arr(vec![n], &wave), arr(vec![n], &|i| wave(i + 1))]),
        ("failing", vec![arr(vec![n], &wave), ints((0..n as i64).collect())]),
        ("failing", vec![arr(vec![n], &wave), ints((0..n as i64).map(|i| if i == 50 { -1 } else { i }).collect())]),
    ];
    for (e, args) in cases {
        let want = interp.entry(e).unwrap().call_with(&args, &CallOptions::default()).map(|r| r.0);
        for opts in common::thread_options() {
            let got = compiled.entry(e).unwrap().call_with(&args, &opts).map(|r| r.0);
            match (&got, &want) {
                (Ok(g), Ok(w)) => assert!(same(g, w), "{e}: {} vs {}", g.to_json(), w.to_json()),
                (Err(g), Err(w)) => assert_eq!(g.to_string(), w.to_string(), "{e}"),
                _ => panic!("{e}: C {:?} but the interpreter {:?}", got.as_ref().map(|v| v.to_json()), want.as_ref().map(|v| v.to_json())),
            }
        }
    }
}

/// Float `maximum`/`minimum` run 16 elements at a time (rt.h's
/// `ard_lanes_*`): the result is still the ordered fold's, bit for bit —
/// the first NaN (of several, with different payloads and signs), else
/// the first of the equal extremes (`-0.0` before `0.0` gives `-0.0`),
/// infinities — at every length around the vector and chunk sizes and on
/// every thread count.
#[test]
fn lane_extrema_keep_the_ordered_folds_bits() {
    let src = "entry mx [n] (x: [n]f64) : (f64, f64) = (maximum x, minimum x)\n\
               entry mx32 [n] (x: [n]f32) : (f32, f32) = (maximum x, minimum x)\n\
               entry rows [m][n] (x: [m][n]f64) : [m]f64 = for r. maximum x[r] - minimum x[r]\n\
               entry am [n] (x: [n]f64) : (i64, i64) = (argmax x, argmin x)\n\
               entry am32 [n] (x: [n]f32) : (i64, i64) = (argmax x, argmin x)\n";
    let Some((compiled, interp)) = c_and_interp("lane_extrema.ard", src) else { return };
    let bits = |v: &Value| {
        let mut xs = vec![];
        common::floats(v, &mut xs);
        xs.iter().map(|f| f.to_bits()).collect::<Vec<u64>>()
    };
    let nan_a = f64::from_bits(0x7ff8_0000_0000_0001);
    let nan_b = f64::from_bits(0xfff8_0000_0000_0002);
    let mut rng = common::Rng(0x1a9e_5eed);
    let lengths: Vec<usize> = (0..=40).chain([63, 64, 65, 4095, 65_535, 65_536, 65_537, 200_001]).collect();
    for n in lengths {
        // kinds of arrays: ordinary; zeros of both signs among negative
        // numbers (the maximum a tie of zeros);
        // two NaNs; infinities; all -inf; ties of equal nonzero extremes
        for kind in 0..6 {
            let mut x: Vec<f64> = (0..n).map(|_| rng.unit() * 10.0 - 5.0).collect();
            let at = |rng: &mut common::Rng| rng.below(n.max(1));
            if n > 0 {
                match kind {
                    1 => x.iter_mut().for_each(|v| *v = [0.0, -0.0, -*v - 5.0, *v - 5.0][rng.below(4)]),
                    2 => {
                        let (i, j) = (at(&mut rng), at(&mut rng));
                        x[j] = nan_b;
                        x[i] = nan_a;
                    }
                    3 => {
                        let (i, j) = (at(&mut rng), at(&mut rng));
                        x[i] = f64::INFINITY;
                        x[j] = f64::NEG_INFINITY;
                    }
                    4 => x.iter_mut().for_each(|v| *v = f64::NEG_INFINITY),
                    5 => x.iter_mut().for_each(|v| *v = v.round()),
                    _ => {}
                }
            }
            let (x64, x32) =
                (Value::array(vec![n], ArrayData::F64(x.clone().into())), Value::array(vec![n], ArrayData::F32(x.iter().map(|v| *v as f32).collect())));
            let cases =
                [("mx", x64.clone()), ("mx32", x32.clone()), ("rows", Value::array(vec![1, n], ArrayData::F64(x.clone().into()))), ("am", x64), ("am32", x32)];
            for (e, arg) in cases {
                let args = [arg];
                let want = interp.entry(e).unwrap().call_with(&args, &CallOptions::default()).map(|(v, _)| v);
                for opts in common::thread_options() {
                    let got = compiled.entry(e).unwrap().call_with(&args, &opts).map(|(v, _)| v);
                    let show = |r: &Result<Value, _>| r.as_ref().map(|v| (v.to_json(), bits(v))).map_err(|e: &arden::Error| e.to_string());
                    assert_eq!(show(&got), show(&want), "{e}, n = {n}, kind {kind}, {} threads", opts.threads);
                }
            }
        }
    }
}

/// A read at an integer chosen by `select` (reverse mode's stencils read
/// `x[i >= 1 ? i - 1 : 0]`) is a conditional read of the two elements,
/// which gcc vectorises, and integer selects have no branch: the same
/// bits as the interpreter, on every thread team, at lengths around the
/// vector width.
#[test]
fn reads_at_selected_indices_are_conditional_reads() {
    let src = "entry shift [n] (u: [n]f64) (w: [n]f64) : [n]f64 =\n  \
                 grad (\\v -> sum (for (i < n). ((if i > 0 then v[i - 1] else 0.0) + (if i < n - 2 then v[i + 2] else 0.0)) * w[i])) u\n\
               entry grid [n][m] (u: [n][m]f64) : [n][m]f64 =\n  \
                 grad (\\v -> sum (flatten (for (i < n) (j < m). (if j > 0 then v[i, j - 1] else 0.0) * (if i > 0 then v[i - 1, j] else 1.0)))) u\n";
    let prog = Program::from_source("sel_read.ard", src).unwrap();
    for e in ["shift", "grid"] {
        let c = arden::backend::c::emit::emit_function(prog.entry(e).unwrap().function(), 0).unwrap();
        assert!(c.contains(" ? ((double*)"), "{e}: no conditional read:\n{c}");
        assert!(!c.contains(" : ((int64_t)0LL))"), "{e}: an integer select with a branch:\n{c}");
    }
    let Some((compiled, interp)) = c_and_interp("sel_read.ard", src) else { return };
    for n in [1usize, 2, 3, 7, 9, 17, 33] {
        let vals = |k: usize, s: f64| -> Vec<f64> { (0..k).map(|i| (i as f64 * s).sin() * 10f64.powi(i as i32 % 7 - 3)).collect() };
        let cases = [
            ("shift", vec![Value::array(vec![n], ArrayData::F64(vals(n, 0.37).into())), Value::array(vec![n], ArrayData::F64(vals(n, 0.71).into()))]),
            ("grid", vec![Value::array(vec![n, n + 2], ArrayData::F64(vals(n * (n + 2), 0.29).into()))]),
        ];
        for (e, args) in cases {
            let want = interp.entry(e).unwrap().call(&args).unwrap();
            for opts in common::thread_options() {
                let (got, _) = compiled.entry(e).unwrap().call_with(&args, &opts).unwrap();
                assert!(same(&got, &want), "{e} n={n} at {} threads: {} vs {}", opts.threads, got.to_json(), want.to_json());
            }
        }
    }
}
