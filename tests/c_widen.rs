//! Outer-loop vectorisation of short sums (`src/backend/c/widen.rs`)
//! against the interpreter, bit for bit: maps and folds whose iterations
//! each compute short float sums run 8 iterations side by side, each sum
//! still in the fixed order (LANGUAGE.md §10). Sums of every length from 0
//! to 70 and a few long ones (which keep the plain loops) across
//! outer loops of odd lengths, on 1, 2, 3 and 16 threads, with terms whose
//! magnitudes differ enough that any other order changes bits. Each entry
//! must also be one the emitter widens.

mod common;
use arden::api::{Backend, CallOptions};
use arden::runtime::ArrayData;
use arden::{Program, Value};
use common::*;

const SRC: &str = "
-- a map of short sums (outermost: the body of a parallel loop)
entry sq [n][k] (a: [n][k]f64) (b: [k]f64) : [n]f64 =
  for i. sum (for p. (a[i, p] - b[p]) * (a[i, p] - b[p]))

-- nested sums in the inner map of a parallel nest (a convolution), with an epilogue
entry conv [m][k][l][w] (x: [m][k][l]f64) (f: [k][w]f64) : [m][l - w + 1]f64 =
  for s (t < l - w + 1). tanh (sum (for ch. sum (for o. x[s, ch, t + o] * f[ch, o])) + 1.0)

-- a fold over sums (k-means' cost): the sums of 8 rows at once, the minimum in order
entry nearest [n][k][d] (x: [n][d]f64) (c: [k][d]f64) : [n]f64 =
  for i. minimum (for j. sum (for a. (x[i, a] - c[j, a]) * (x[i, a] - c[j, a])))

-- single precision, and a sum whose terms are themselves sums of two lengths
entry sq32 [n][k] (a: [n][k]f32) (b: [k]f32) : [n]f32 =
  for i. sum (for p. a[i, p] * b[p] + sum (for q. a[i, q] * a[i, q]))

-- a sum over rows (into the accumulator's lanes) of a row's maximum, a short
-- sum and a checked read: softmax cross-entropy
entry xent [n][k] (z: [n][k]f64) (label: [n]i64) : f64 =
  sum (for i.
    let mx = maximum z[i]
    in mx + log (sum (for p. exp (z[i, p] - mx))) - z[i, label[i]])

-- maps inside the group (8 lanes per element), a triangle over a map's index
-- with a checked packed read, and a map's maximum: a GMM component's term
entry quad [n][d] (x: [n][d]f64) (m: [d]f64) (l: [d*(d-1)/2]f64) : f64 =
  sum (for i.
    let v = for a. x[i, a] - m[a]
    let qv = for j. v[j] + sum (for (p < d). if p < j then l[p * (2 * d - p - 1) / 2 + j - p - 1] * v[p] else 0.0)
    in maximum qv + sum (for a. qv[a] * qv[a]))

-- a map whose iterations give a scalar and a row of the group (the rows its
-- gradient saves in the forward pass: copied out lane by lane)
entry gquad [n][k][d] (x: [n][d]f64) (mu: [k][d]f64) : [k][d]f64 =
  grad (\\mu' -> sum (for i. logsumexp (for j.
    let v = for a. x[i, a] - mu'[j, a]
    let q = for (a < d). v[a] + sum (for (p < d). if p < a then v[p] * x[i, p] else 0.0)
    in sum (for a. q[a] * q[a])))) mu
";

/// `n` labels below `k`.
fn labels(n: usize, k: usize, rng: &mut Rng) -> Value {
    let ls: Vec<i64> = (0..n).map(|_| rng.below(k) as i64).collect();
    Value::array(vec![n], ArrayData::I64(ls.into()))
}

/// An array of the given shape: values of magnitudes 1e-8 to 1e16 and of
/// both signs (and some -0.0), so that the order of a sum shows in its bits.
fn array(shape: &[usize], f32: bool, rng: &mut Rng) -> Value {
    let len = shape.iter().product();
    let xs: Vec<f64> = (0..len)
        .map(|_| match rng.below(10) {
            0 => -0.0,
            1 => rng.unit() * 1e16,
            2 => rng.unit() * 1e-8,
            _ => rng.unit(),
        })
        .collect();
    if f32 {
        Value::array(shape.to_vec(), ArrayData::F32(xs.iter().map(|x| *x as f32).collect::<Vec<f32>>().into()))
    } else {
        Value::array(shape.to_vec(), ArrayData::F64(xs.into()))
    }
}

fn bits(v: &Value) -> Vec<u64> {
    let mut xs = vec![];
    floats(v, &mut xs);
    xs.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn widened_sums_give_the_interpreters_bits_at_any_thread_count() {
    if !c_compiler_or_skip("widened_sums_give_the_interpreters_bits_at_any_thread_count") {
        return;
    }
    let prog = Program::from_source("widen.ard", SRC).unwrap();
    for f in &prog.module().functions {
        let text = arden::backend::c::emit::emit_function(f, 0).unwrap();
        assert!(text.contains("ard_wv"), "`{}` is not widened:\n{text}", f.name);
        // the forms whose bits this test is for: a window's read `x[s, ch,
        // t + o]` as one vector load, and whole chunks of 8 terms unrolled
        if f.name == "conv" {
            assert!(text.contains("memcpy(&ard_wv"), "`conv`'s window read is not one vector load:\n{text}");
        }
        if f.name == "nearest" {
            assert!(text.contains("ard_hT"), "`nearest` does not read the centres from a transposed copy:\n{text}");
        }
        if f.name == "sq" || f.name == "nearest" || f.name == "conv" {
            assert!(text.contains("#pragma GCC unroll 8"), "`{}`'s whole chunks are not unrolled:\n{text}", f.name);
            // and a short chunk (a window of 5) term by term into constant accumulators
            assert!(text.contains("< 8) {") && text.contains(") break;"), "`{}`'s short chunks are not unrolled:\n{text}", f.name);
        }
    }
    let compiled = prog.compile(Backend::C).unwrap();
    let interp = prog.compile(Backend::Interp).unwrap();
    let mut rng = Rng(0x0057_1de0_0000_0001);
    let mut lengths: Vec<usize> = (0..=70).collect();
    lengths.extend([129, 600, 1100, 5000]);
    for (t, &k) in lengths.iter().enumerate() {
        // odd outer lengths: whole groups of 8 and a rest, or only a rest
        let n = [1, 7, 9, 17, 23][t % 5];
        let small = k.min(40);
        let cases: Vec<(&str, Vec<Value>)> = vec![
            ("sq", vec![array(&[n, k], false, &mut rng), array(&[k], false, &mut rng)]),
            ("sq32", vec![array(&[n, small], true, &mut rng), array(&[small], true, &mut rng)]),
            // 3 points (the outlined loop's range below 8: the centres are
            // read in place) and n + 8 (from 9 on: a transposed copy)
            ("nearest", vec![array(&[3, k], false, &mut rng), array(&[n + 8, k], false, &mut rng)]),
            ("nearest", vec![array(&[n + 8, k], false, &mut rng), array(&[n + 8, k], false, &mut rng)]),
            ("xent", vec![array(&[n + 16, small.max(1)], false, &mut rng), labels(n + 16, small.max(1), &mut rng)]),
            // maps of up to 70 elements, and of 260: past 256 a group reruns one iteration at a time
            ("quad", {
                let d = if k > 128 { 260 } else { k.min(70) };
                vec![array(&[n + 8, d], false, &mut rng), array(&[d], false, &mut rng), array(&[d * d.saturating_sub(1) / 2], false, &mut rng)]
            }),
            // k + 1 components (whole groups and a rest) of up to 70 dimensions, 260 past the lanes' limit
            ("gquad", {
                let d = if k > 128 { 260 } else { k.min(70) };
                vec![array(&[3, d], false, &mut rng), array(&[n + 1, d], false, &mut rng)]
            }),
            // window w = k % 9 + 1 over 2 batches, k % 12 channels, n + w + 3 positions
            ("conv", {
                let w = k % 9 + 1;
                vec![array(&[2, k % 12, n + w + 3], false, &mut rng), array(&[k % 12, w], false, &mut rng)]
            }),
        ];
        for (name, args) in cases {
            let (want, _) = interp.entry(name).unwrap().call_with(&args, &CallOptions::default()).unwrap();
            for opts in thread_options() {
                let (got, _) = compiled.entry(name).unwrap().call_with(&args, &opts).unwrap();
                assert_eq!(bits(&got), bits(&want), "`{name}` with sums of {k} terms, outer length {n}, on {} threads", opts.threads);
            }
        }
    }
}

/// A body whose reads are checked at run time (or that can fail another
/// way) is widened, and a group where a check fails runs again one
/// iteration at a time: the error is the first failing iteration's, as in
/// the interpreter, whichever lanes fail and on any thread count. A sum
/// whose length differs between iterations (a triangle) is not widened,
/// and gives the same bits.
#[test]
fn failing_bodies_rerun_their_group_and_ragged_ones_are_not_widened() {
    if !c_compiler_or_skip("failing_bodies_rerun_their_group_and_ragged_ones_are_not_widened") {
        return;
    }
    let src = "entry shifted [n][k] (a: [n][k]f64) (o: i64) : [n]f64 =\n  for i. sum (for p. a[i, p] * a[i, p + o])\n\n\
               entry tri [n] (a: [n][n]f64) : [n]f64 =\n  for i. sum (for (p < i). a[i, p] * a[p, i])\n";
    let prog = Program::from_source("ragged.ard", src).unwrap();
    for f in &prog.module().functions {
        let text = arden::backend::c::emit::emit_function(f, 0).unwrap();
        assert_eq!(text.contains("ard_wv"), f.name == "shifted", "`{}`:\n{text}", f.name);
    }
    let compiled = prog.compile(Backend::C).unwrap();
    let interp = prog.compile(Backend::Interp).unwrap();
    let mut rng = Rng(11);
    let a = array(&[9, 9], false, &mut rng);
    for o in [0, 1] {
        let args = vec![a.clone(), Value::I64(o)];
        let want = interp.entry("shifted").unwrap().call(&args).map(|v| bits(&v)).map_err(|e| e.to_string());
        for opts in thread_options() {
            let got = compiled.entry("shifted").unwrap().call_with(&args, &opts).map(|(v, _)| bits(&v)).map_err(|e| e.to_string());
            assert_eq!(got, want, "shifted by {o} on {} threads", opts.threads);
        }
    }
    let want = interp.entry("tri").unwrap().call(std::slice::from_ref(&a)).unwrap();
    for opts in thread_options() {
        let (got, _) = compiled.entry("tri").unwrap().call_with(std::slice::from_ref(&a), &opts).unwrap();
        assert_eq!(bits(&got), bits(&want), "tri on {} threads", opts.threads);
    }
    // labels out of range in one lane, in two lanes of a group (the later
    // lane's index differs), and in two groups
    let prog = Program::from_source("widen.ard", SRC).unwrap();
    let compiled = prog.compile(Backend::C).unwrap();
    let interp = prog.compile(Backend::Interp).unwrap();
    let z = array(&[40, 5], false, &mut rng);
    for bad in [vec![(13, 5)], vec![(14, 7), (11, -1)], vec![(33, 6), (20, -2)], vec![(39, 5)]] {
        let mut ls: Vec<i64> = (0..40).map(|i| i % 5).collect();
        for &(i, l) in &bad {
            ls[i] = l;
        }
        let args = vec![z.clone(), Value::array(vec![40], ArrayData::I64(ls.into()))];
        let want = interp.entry("xent").unwrap().call(&args).map(|v| bits(&v)).map_err(|e| e.to_string());
        assert!(want.is_err(), "{bad:?}");
        for opts in thread_options() {
            let got = compiled.entry("xent").unwrap().call_with(&args, &opts).map(|(v, _)| bits(&v)).map_err(|e| e.to_string());
            assert_eq!(got, want, "labels {bad:?} on {} threads", opts.threads);
        }
    }
}

/// In a fold, a statement that reads the loop's parameter and fails comes
/// before a sum of negative length: the sum is not hoisted above it (it
/// stays in the per-lane rest), so the error is the read's, as in the
/// interpreter; with a valid read the sum's own error is reported.
#[test]
fn a_fold_reports_its_first_error() {
    if !c_compiler_or_skip("a_fold_reports_its_first_error") {
        return;
    }
    let src = "entry h [n] (a: [n]f64) (k: i64) (o: i64) : i64 =\n  loop acc = 0 for j < n do\n    let y = a[acc + o]\n    let s = sum (for (p < k). a[j] * f64 p)\n    in if y + s > 0.0 then acc + 1 else acc\n";
    let prog = Program::from_source("order.ard", src).unwrap();
    let compiled = prog.compile(Backend::C).unwrap();
    let interp = prog.compile(Backend::Interp).unwrap();
    let mut rng = Rng(5);
    let a = array(&[11], false, &mut rng);
    for (k, o) in [(-1, 100), (-1, 0), (3, 0), (3, 100)] {
        let args = vec![a.clone(), Value::I64(k), Value::I64(o)];
        let want = interp.entry("h").unwrap().call(&args).map_err(|e| e.to_string());
        for opts in thread_options() {
            let got = compiled.entry("h").unwrap().call_with(&args, &opts).map(|(v, _)| v).map_err(|e| e.to_string());
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "k={k} o={o} on {} threads", opts.threads);
        }
    }
}

/// A widened `minimum`/`maximum` fold keeps each lane's extremum in a
/// vector and combines the lanes after the groups: the result must be the
/// fold in order's, bit for bit — a NaN where a NaN came first (which
/// NaN a product gives is the C compiler's choice), else the first of the
/// equal extrema (`+0.0` and `-0.0` compare equal and the first wins), the
/// start value included. Dot products of rows drawn from {±0, ±1, ±∞,
/// NaN}, times a signed sum (a sum alone is never `-0.0`), make those cases common, at every
/// count of centres from 1 to 41 (whole groups of 8 and a rest).
#[test]
fn widened_extrema_are_the_fold_in_orders() {
    if !c_compiler_or_skip("widened_extrema_are_the_fold_in_orders") {
        return;
    }
    let src = "entry lo [n][k][d] (x: [n][d]f64) (c: [k][d]f64) : [n]f64 =\n  \
                 for i. minimum (for j. sum (for a. x[i, a] * c[j, a]) * sum (for a. c[j, a] - x[i, a]))\n\
               entry hi [n][k][d] (x: [n][d]f64) (c: [k][d]f64) : [n]f64 =\n  \
                 for i. maximum (for j. sum (for a. x[i, a] * c[j, a]) * sum (for a. c[j, a] - x[i, a]))\n";
    let prog = Program::from_source("extrema.ard", src).unwrap();
    for f in &prog.module().functions {
        let text = arden::backend::c::emit::emit_function(f, 0).unwrap();
        assert!(text.contains("ard_em"), "`{}`'s extremum is not kept in lane vectors:\n{text}", f.name);
    }
    let compiled = prog.compile(Backend::C).unwrap();
    let interp = prog.compile(Backend::Interp).unwrap();
    // bits, with every NaN one: which NaN a product of two gives is the C
    // compiler's choice (operands may be swapped), as LANGUAGE.md says
    let canon = |v: &Value| -> Vec<u64> { bits(v).into_iter().map(|b| if f64::from_bits(b).is_nan() { 0x7ff8_0000_0000_0000 } else { b }).collect() };
    let mut rng = Rng(0x00e7_0000_0000_0041);
    let nan = |payload: u64| f64::from_bits(0x7ff8_0000_0000_0000 | payload);
    let pick = |rng: &mut Rng, specials: bool| -> f64 {
        match rng.below(if specials { 9 } else { 5 }) {
            0 => 0.0,
            1 => -0.0,
            2 => 1.0,
            3 => -1.0,
            4 => 0.5,
            5 => f64::INFINITY,
            6 => f64::NEG_INFINITY,
            7 => nan(1 + rng.below(1000) as u64),
            _ => -nan(1 + rng.below(1000) as u64),
        }
    };
    for k in 1..=41 {
        for d in [1, 2] {
            let specials = k % 3 != 0;
            let n = 13;
            let x: Vec<f64> = (0..n * d).map(|_| pick(&mut rng, specials)).collect();
            let c: Vec<f64> = (0..k * d).map(|_| pick(&mut rng, specials)).collect();
            let args = vec![Value::array(vec![n, d], ArrayData::F64(x.into())), Value::array(vec![k, d], ArrayData::F64(c.into()))];
            for name in ["lo", "hi"] {
                let (want, _) = interp.entry(name).unwrap().call_with(&args, &CallOptions::default()).unwrap();
                for opts in thread_options() {
                    let (got, _) = compiled.entry(name).unwrap().call_with(&args, &opts).unwrap();
                    assert_eq!(canon(&got), canon(&want), "`{name}` over {k} centres of {d} dimensions on {} threads", opts.threads);
                }
            }
        }
    }
}
