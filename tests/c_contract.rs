//! The C backend's contraction kernel (`src/backend/c/contract.rs`,
//! `contract.h`) against the interpreter, bit for bit: generated matrix
//! and matrix-vector products with every operand layout it accepts
//! (transposed, broadcast, an extra fixed axis), both operand orders,
//! with and without an epilogue after the sum, at sizes around the
//! kernel's tile and block edges, on 1, 2 and 3 threads. Each generated
//! entry must also be one the kernel computes (`ard_contract` in its C).

mod common;
use arden::api::{Backend, CallOptions, Team};
use arden::runtime::ArrayData;
use arden::{Program, Value};
use common::*;

/// How the row operand is read: its type and the read, over `i` and `p`.
const ROW_OPERANDS: &[(&str, &str)] = &[("[n][k]f64", "a[i, p]"), ("[k][n]f64", "a[p, i]"), ("[2][n][k]f64", "a[1, i, p]")];
/// How the column operand is read, over `p` and `j`.
const COL_OPERANDS: &[(&str, &str)] = &[("[k][m]f64", "b[p, j]"), ("[m][k]f64", "b[j, p]"), ("[k][3][m]f64", "b[p, 2, j]")];
/// What the nest does with the sum `s` (the sums themselves, or more).
const EPILOGUES: &[&str] = &["S", "S + c[j]", "tanh (S) * c[j]"];

struct Case {
    name: String,
    a: &'static str,
    b: &'static str,
    /// a matrix-vector product (`for j.`, the row operand a vector)
    single: bool,
}

/// One entry per combination; the text of the program and its cases.
fn program() -> (String, Vec<Case>) {
    let (mut src, mut cases) = (String::new(), vec![]);
    for (ai, (at, ar)) in ROW_OPERANDS.iter().chain([&("[k]f64", "a[p]")]).enumerate() {
        for (bi, (bt, br)) in COL_OPERANDS.iter().enumerate() {
            for (ei, epi) in EPILOGUES.iter().enumerate() {
                let single = *ar == "a[p]";
                let swap = (ai + bi + ei) % 2 == 1;
                let product = if swap { format!("{br} * {ar}") } else { format!("{ar} * {br}") };
                let body = epi.replace('S', &format!("sum (for p. {product})"));
                let name = format!("e{ai}_{bi}_{ei}");
                let (loops, out) = if single { ("for j.", "[m]f64") } else { ("for i j.", "[n][m]f64") };
                let sizes = if single { "[k][m]" } else { "[n][k][m]" };
                src.push_str(&format!("entry {name} {sizes} (a: {at}) (b: {bt}) (c: [m]f64) : {out} =\n  {loops} {body}\n\n"));
                cases.push(Case { name, a: at, b: bt, single });
            }
        }
    }
    (src, cases)
}

/// An array of type text `t` (e.g. `[k][3][m]f64`) at sizes n, k, m.
fn array(t: &str, (n, k, m): (usize, usize, usize), rng: &mut Rng) -> Value {
    let shape: Vec<usize> = t
        .trim_end_matches("f64")
        .trim_matches(|c| c == '[' || c == ']')
        .split("][")
        .map(|d| match d {
            "n" => n,
            "k" => k,
            "m" => m,
            _ => d.parse().unwrap(),
        })
        .collect();
    let len = shape.iter().product();
    Value::array(shape, ArrayData::F64((0..len).map(|_| rng.unit()).collect()))
}

fn bits(v: &Value) -> Vec<u64> {
    let mut xs = vec![];
    floats(v, &mut xs);
    xs.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn contractions_give_the_interpreters_bits_at_any_thread_count() {
    if !c_compiler_or_skip("contractions_give_the_interpreters_bits_at_any_thread_count") {
        return;
    }
    let (src, cases) = program();
    let prog = Program::from_source("contract.ard", &src).unwrap();
    let generated = arden::backend::c::emit::emit_module(prog.module());
    let compiled = prog.compile(Backend::C).unwrap();
    let interp = prog.compile(Backend::Interp).unwrap();
    for (f, case) in prog.module().functions.iter().zip(&cases) {
        let text = arden::backend::c::emit::emit_function(f, 0).unwrap();
        assert!(text.contains("ard_contract(ctx"), "`{}` is not computed by the kernel:\n{}", case.name, src);
    }
    assert!(generated.entries.iter().all(|e| e.is_ok()));
    // sizes around the tile edges, plus the k-block (256), row-block (96)
    // and column-block (2048) edges
    let mut sizes = vec![(0, 3, 4), (3, 0, 4), (3, 4, 0), (1, 1, 1), (7, 5, 17), (6, 16, 16), (13, 33, 9), (2, 300, 40), (100, 20, 30), (2, 3, 2100)];
    let mut rng = Rng(0x00c0_17ac_7000_0001);
    for _ in 0..6 {
        sizes.push((1 + rng.below(40), 1 + rng.below(70), 1 + rng.below(40)));
    }
    for case in &cases {
        for &(n, k, m) in &sizes {
            let args = vec![array(case.a, (n, k, m), &mut rng), array(case.b, (n, k, m), &mut rng), array("[m]f64", (n, k, m), &mut rng)];
            let (want, _) = interp.entry(&case.name).unwrap().call_with(&args, &CallOptions::default()).unwrap();
            for threads in [1, 2, 3] {
                let opts = CallOptions { threads, par_min: 0, team: Team::Fixed };
                let (got, _) = compiled.entry(&case.name).unwrap().call_with(&args, &opts).unwrap();
                assert_eq!(bits(&got), bits(&want), "`{}` at n={n} k={k} m={m} on {threads} threads (single loop: {})", case.name, case.single);
            }
        }
    }
}

/// The cotangent of a matrix product's right operand (a dense layer's
/// weights): reverse mode sums one outer product per row; the emitter
/// stacks the row scales and hands the sum to the kernel
/// (`contract.rs`, `OuterProducts`). Same bits as the interpreter.
#[test]
fn outer_product_sums_give_the_interpreters_bits() {
    if !c_compiler_or_skip("outer_product_sums_give_the_interpreters_bits") {
        return;
    }
    let src = "entry gw [n][k][m] (a: [n][k]f64) (w: [m][k]f64) (c: [n][m]f64) : [m][k]f64 =\n  vjp (\\v -> for i j. sum (for p. a[i, p] * v[j, p])) w c\n\n\
               entry gt [n][k][m] (a: [n][k]f64) (w: [k][m]f64) (c: [n][m]f64) : [k][m]f64 =\n  vjp (\\v -> for i j. tanh (sum (for p. v[p, j] * a[i, p]))) w c\n\n\
               entry gb [n][k][m] (a: [k][n]f64) (w: [m][k]f64) (c: [n][m]f64) : [m][k]f64 =\n  vjp (\\v -> for i j. sum (for p. a[p, i] * v[j, p]) * 2.0) w c\n";
    let prog = Program::from_source("outer.ard", src).unwrap();
    for f in &prog.module().functions {
        let text = arden::backend::c::emit::emit_function(f, 0).unwrap();
        // `gt` also needs the forward product (for the derivative of tanh)
        let calls = if f.name == "gt" { 2 } else { 1 };
        assert!(text.matches("ard_contract(ctx").count() >= calls, "`{}`: the outer products are not summed by the kernel:\n{text}", f.name);
    }
    let compiled = prog.compile(Backend::C).unwrap();
    let interp = prog.compile(Backend::Interp).unwrap();
    let mut rng = Rng(0x0075_7e20_0000_0003);
    for (n, k, m) in [(0, 3, 4), (1, 1, 1), (5, 7, 3), (40, 17, 9), (300, 6, 20), (7, 300, 5)] {
        for (name, at, wt) in [("gw", "[n][k]f64", "[m][k]f64"), ("gt", "[n][k]f64", "[k][m]f64"), ("gb", "[k][n]f64", "[m][k]f64")] {
            let args = vec![array(at, (n, k, m), &mut rng), array(wt, (n, k, m), &mut rng), array("[n][m]f64", (n, k, m), &mut rng)];
            let (want, _) = interp.entry(name).unwrap().call_with(&args, &CallOptions::default()).unwrap();
            for threads in [1, 2, 3] {
                let (got, _) = compiled.entry(name).unwrap().call_with(&args, &CallOptions { threads, par_min: 0, team: Team::Fixed }).unwrap();
                assert_eq!(bits(&got), bits(&want), "`{name}` at n={n} k={k} m={m} on {threads} threads");
            }
        }
    }
}

/// A product whose reads carry run-time bounds checks is left to the
/// generic loops (the kernel reads without checking), and still fails
/// with the interpreter's message when an index is out of range.
#[test]
fn a_checked_read_keeps_the_generic_loops() {
    if !c_compiler_or_skip("a_checked_read_keeps_the_generic_loops") {
        return;
    }
    let src = "entry f [n][k][m] (a: [n][k]f64) (b: [k][m]f64) (o: i64) : [n][m]f64 =\n  for i j. sum (for p. a[i, p] * b[p, j + o])\n";
    let prog = Program::from_source("checked.ard", src).unwrap();
    let text = arden::backend::c::emit::emit_function(&prog.module().functions[0], 0).unwrap();
    assert!(!text.contains("ard_contract(ctx"), "a checked read went to the kernel");
    let compiled = prog.compile(Backend::C).unwrap();
    let interp = prog.compile(Backend::Interp).unwrap();
    let mut rng = Rng(7);
    let args = vec![array("[n][k]f64", (3, 4, 5), &mut rng), array("[k][m]f64", (3, 4, 5), &mut rng), Value::I64(1)];
    let c_err = compiled.entry("f").unwrap().call(&args).unwrap_err().to_string();
    let i_err = interp.entry("f").unwrap().call(&args).unwrap_err().to_string();
    assert_eq!(c_err, i_err);
    assert!(c_err.contains("out of bounds"), "{c_err}");
}

/// A matrix-vector product whose results are summed again (`sum (for i.
/// f (sum (for p. a[i, p] * x[p])))`, a loss over a layer's outputs): the
/// kernel computes the inner sums, the summing loop reads them. Same bits
/// as the interpreter; a failing read in the epilogue still fails with
/// the interpreter's message.
#[test]
fn matrix_vector_products_summed_again_give_the_interpreters_bits() {
    if !c_compiler_or_skip("matrix_vector_products_summed_again_give_the_interpreters_bits") {
        return;
    }
    let src = "entry sq [n][k] (a: [n][k]f64) (x: [k]f64) (y: [n]f64) (o: i64) : f64 =\n  sum (for i. let r = sum (for p. a[i, p] * x[p]) - y[i] in r * r)\n\n\
               entry tr [n][k] (a: [k][n]f64) (x: [k]f64) (y: [n]f64) (o: i64) : f64 =\n  sum (for i. tanh (sum (for p. x[p] * a[p, i])) * y[i])\n\n\
               entry two [n][k] (a: [n][k]f64) (x: [k]f64) (y: [n]f64) (o: i64) : (f64, f64) =\n  let (u, v) = reduce (\\(a1, b1) (a2, b2) -> (a1 + a2, b1 + b2)) (0.0, 0.0) (for i. let s = sum (for p. a[i, p] * x[p]) in (s, s * y[i]))\n  in (u, v)\n\n\
               entry bad [n][k] (a: [n][k]f64) (x: [k]f64) (y: [n]f64) (o: i64) : f64 =\n  sum (for i. sum (for p. a[i, p] * x[p]) * y[i + o])\n";
    let prog = Program::from_source("again.ard", src).unwrap();
    for f in &prog.module().functions {
        let text = arden::backend::c::emit::emit_function(f, 0).unwrap();
        if f.name != "two" {
            assert!(text.contains("ard_contract(ctx"), "`{}` is not computed by the kernel:\n{text}", f.name);
        }
    }
    let compiled = prog.compile(Backend::C).unwrap();
    let interp = prog.compile(Backend::Interp).unwrap();
    let mut rng = Rng(0x00a9_a170_0000_0005);
    for (n, k) in [(0, 3), (3, 0), (1, 1), (7, 5), (13, 33), (300, 17), (5, 700), (2000, 9)] {
        for (name, at) in [("sq", "[n][k]f64"), ("tr", "[k][n]f64"), ("two", "[n][k]f64"), ("bad", "[n][k]f64")] {
            let args = vec![array(at, (n, k, 1), &mut rng), array("[k]f64", (n, k, 1), &mut rng), array("[n]f64", (n, k, 1), &mut rng), Value::I64(0)];
            let (want, _) = interp.entry(name).unwrap().call_with(&args, &CallOptions::default()).unwrap();
            for threads in [1, 2, 3] {
                let (got, _) = compiled.entry(name).unwrap().call_with(&args, &CallOptions { threads, par_min: 0, team: Team::Fixed }).unwrap();
                assert_eq!(bits(&got), bits(&want), "`{name}` at n={n} k={k} on {threads} threads");
            }
        }
    }
    let args = vec![array("[n][k]f64", (9, 4, 1), &mut rng), array("[k]f64", (9, 4, 1), &mut rng), array("[n]f64", (9, 4, 1), &mut rng), Value::I64(1)];
    let i_err = interp.entry("bad").unwrap().call(&args).unwrap_err().to_string();
    assert!(i_err.contains("out of bounds"), "{i_err}");
    for threads in [1, 2, 3] {
        let c_err = compiled.entry("bad").unwrap().call_with(&args, &CallOptions { threads, par_min: 0, team: Team::Fixed }).unwrap_err().to_string();
        assert_eq!(c_err, i_err, "on {threads} threads");
    }
}

/// Products inside a loop over another index (a batch): each iteration's
/// nest is a kernel call writing its row of the result (with or without
/// an epilogue, which then replaces the sums in place). Same bits as the
/// interpreter at 1, 2 and 3 threads; a failing epilogue read still fails
/// with the interpreter's message.
#[test]
fn batched_contractions_give_the_interpreters_bits() {
    if !c_compiler_or_skip("batched_contractions_give_the_interpreters_bits") {
        return;
    }
    let src = "entry plain [q][n][k][m] (a: [q][n][k]f64) (b: [q][k][m]f64) (c: [m]f64) (v: [k]f64) (o: i64) : [q][n][m]f64 =\n  for r. for i j. sum (for p. a[r, i, p] * b[r, p, j])\n\n\
               entry epi [q][n][k][m] (a: [q][n][k]f64) (b: [q][k][m]f64) (c: [m]f64) (v: [k]f64) (o: i64) : [q][n][m]f64 =\n  for r. for i j. tanh (sum (for p. a[r, i, p] * b[r, p, j]) + c[j])\n\n\
               entry shared [q][n][k][m] (a: [q][n][k]f64) (b: [q][k][m]f64) (c: [m]f64) (v: [k]f64) (o: i64) : [q][n][m]f64 =\n  for r. for i j. sum (for p. b[r, p, j] * a[r, i, p]) * c[j]\n\n\
               entry vec [q][n][k][m] (a: [q][n][k]f64) (b: [q][k][m]f64) (c: [m]f64) (v: [k]f64) (o: i64) : [q][m]f64 =\n  for r. for j. sum (for p. v[p] * b[r, p, j]) - c[j]\n\n\
               entry bad [q][n][k][m] (a: [q][n][k]f64) (b: [q][k][m]f64) (c: [m]f64) (v: [k]f64) (o: i64) : [q][n][m]f64 =\n  for r. for i j. sum (for p. a[r, i, p] * b[r, p, j]) * c[j + o]\n";
    let prog = Program::from_source("batched.ard", src).unwrap();
    for f in &prog.module().functions {
        let text = arden::backend::c::emit::emit_function(f, 0).unwrap();
        assert!(text.contains("ard_contract(ctx"), "`{}` is not computed by the kernel:\n{text}", f.name);
    }
    let compiled = prog.compile(Backend::C).unwrap();
    let interp = prog.compile(Backend::Interp).unwrap();
    let mut rng = Rng(0x00ba_7c4e_0000_0007);
    let filled = |shape: Vec<usize>, rng: &mut Rng| {
        let len = shape.iter().product();
        Value::array(shape, ArrayData::F64((0..len).map(|_| rng.unit()).collect()))
    };
    let arrays = |(q, n, k, m): (usize, usize, usize, usize), rng: &mut Rng| {
        (filled(vec![q, n, k], rng), filled(vec![q, k, m], rng), filled(vec![m], rng), filled(vec![k], rng))
    };
    for sizes in [(0, 2, 3, 4), (2, 0, 3, 4), (2, 3, 0, 4), (2, 3, 4, 0), (1, 1, 1, 1), (3, 7, 5, 17), (4, 13, 33, 9), (2, 40, 300, 20), (5, 1, 9, 40)] {
        let (a, b, c, v) = arrays(sizes, &mut rng);
        for name in ["plain", "epi", "shared", "vec"] {
            let args = vec![a.clone(), b.clone(), c.clone(), v.clone(), Value::I64(0)];
            let want = interp.entry(name).unwrap().call_with(&args, &CallOptions::default()).map(|(v, _)| bits(&v)).map_err(|e| e.to_string());
            for threads in [1, 2, 3] {
                let got = compiled
                    .entry(name)
                    .unwrap()
                    .call_with(&args, &CallOptions { threads, par_min: 0, team: Team::Fixed })
                    .map(|(v, _)| bits(&v))
                    .map_err(|e| e.to_string());
                assert_eq!(got, want, "`{name}` at {sizes:?} on {threads} threads");
            }
        }
    }
    let (a, b, c, v) = arrays((3, 4, 5, 6), &mut rng);
    let args = vec![a, b, c, v, Value::I64(1)];
    let i_err = interp.entry("bad").unwrap().call(&args).unwrap_err().to_string();
    assert!(i_err.contains("out of bounds"), "{i_err}");
    for threads in [1, 2, 3] {
        let c_err = compiled.entry("bad").unwrap().call_with(&args, &CallOptions { threads, par_min: 0, team: Team::Fixed }).unwrap_err().to_string();
        assert_eq!(c_err, i_err, "on {threads} threads");
    }
}

/// A layer whose only reader is a sum at the same indices (a two-layer
/// network's hidden layer read by the output layer) stays a kernel: the
/// nest fusion of `fuse_index_for` once fused it into its reader, which
/// turned the product back into scalar loops (the network's loss 5 ms →
/// 24 ms). Same bits as the interpreter.
#[test]
fn a_layer_read_once_by_a_sum_stays_a_kernel() {
    if !c_compiler_or_skip("a_layer_read_once_by_a_sum_stays_a_kernel") {
        return;
    }
    let src = "entry loss [b][d][h] (w1: [h][d]f64) (w2: [h]f64) (x: [b][d]f64) : f64 =\n\
               \x20 let hidden = for i j. tanh (sum (for p. x[i, p] * w1[j, p]))\n\
               \x20 in sum (for i. sum (for j. hidden[i, j] * w2[j]))\n";
    let prog = Program::from_source("layer.ard", src).unwrap();
    let text = arden::backend::c::emit::emit_function(&prog.module().functions[0], 0).unwrap();
    assert!(text.contains("ard_contract(ctx"), "the hidden layer is not a kernel:\n{text}");
    let compiled = prog.compile(Backend::C).unwrap();
    let interp = prog.compile(Backend::Interp).unwrap();
    let mut rng = Rng(0x00c0_17ac_7000_0009);
    for (b, d, h) in [(0, 3, 4), (1, 1, 1), (13, 7, 9), (40, 32, 20)] {
        let args = vec![array("[n][k]f64", (h, d, 0), &mut rng), array("[n]f64", (h, 0, 0), &mut rng), array("[n][k]f64", (b, d, 0), &mut rng)];
        let (want, _) = interp.entry("loss").unwrap().call_with(&args, &CallOptions::default()).unwrap();
        for threads in [1, 2, 3] {
            let (got, _) = compiled.entry("loss").unwrap().call_with(&args, &CallOptions { threads, par_min: 0, team: Team::Fixed }).unwrap();
            assert_eq!(bits(&got), bits(&want), "b={b} d={d} h={h} on {threads} threads");
        }
    }
}
