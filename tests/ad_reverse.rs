//! Reverse mode against the truth: for every entry of the corpus, the
//! forward-mode programs and the examples, at the points its `-- test:`
//! lines use and along random `xdot` and `ybar`,
//! ⟨ybar, jvp f x xdot⟩ = ⟨vjp f x ybar, xdot⟩ (forward and reverse agree,
//! which with the finite-difference checks of `ad_forward` pins reverse
//! mode down); the reverse IR verifies; and the cost of a gradient is a
//! small constant times the cost of the function (the table prints with
//! `cargo test --release --test ad_reverse -- --nocapture`).

mod common;
use arden::runtime::{ArrayData, Value};
use common::*;

fn dot(a: &Value, b: &Value) -> (f64, f64) {
    let (mut xs, mut ys) = (vec![], vec![]);
    floats(a, &mut xs);
    floats(b, &mut ys);
    assert_eq!(xs.len(), ys.len(), "shapes differ");
    xs.iter().zip(&ys).fold((0.0, 0.0), |(s, m), (x, y)| (s + x * y, m + (x * y).abs()))
}

fn total(c: arden::OpCounts) -> f64 {
    (c.arith + c.reads + c.writes).max(1) as f64
}

#[test]
fn vjp_is_the_transpose_of_jvp_on_every_program() {
    with_big_stack(|| {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut compared, mut failures, mut table) = (0usize, vec![], vec![]);
        for dir in ["tests/programs", "tests/ad_programs", "examples"] {
            for path in ard_files(dir) {
                let text = std::fs::read_to_string(&path).unwrap();
                // f32 values round differently along the two orders of summation
                let tol = if text.contains("f32") { 1e-6 } else { 1e-9 };
                let prog = arden::Program::from_file(&path).unwrap();
                for case in cases(&text) {
                    if case.expect.is_none() {
                        continue;
                    }
                    let Ok(args) = args_for(&prog, &case) else { continue };
                    let entry = prog.entry(&case.entry).unwrap();
                    let xdot: Vec<Value> = args.iter().map(|a| direction(a, &mut rng)).collect();
                    let Ok(((y, dy), _)) = entry.jvp(&args, &xdot) else { continue };
                    let ybar = direction(&y, &mut rng);
                    let where_ = format!("{}:{} `{}`", path.display(), case.line, case.entry);
                    let ((y2, xbar), vcounts) = match entry.vjp(&args, &ybar) {
                        Ok(r) => r,
                        Err(e) => {
                            failures.push(format!("{where_}: vjp failed: {e}"));
                            continue;
                        }
                    };
                    if y.to_json() != y2.to_json() {
                        failures.push(format!("{where_}: the primal differs under vjp: {} vs {}", y.to_json(), y2.to_json()));
                    }
                    let (lhs, lm) = dot(&ybar, &dy);
                    let (rhs, rm) = dot(&xbar, &Value::Tuple(xdot.clone()));
                    if !lhs.is_finite() || !rhs.is_finite() {
                        continue;
                    }
                    compared += 1;
                    if (lhs - rhs).abs() > tol * (1.0 + lm.max(rm)) {
                        failures.push(format!("{where_}: <ybar, jvp> = {lhs} but <vjp, xdot> = {rhs}"));
                    }
                    if matches!(y, Value::F64(_)) {
                        if let Ok((_, counts)) = entry.call_counting(&args) {
                            // a gradient writes one value per float input even
                            // where the function reads only a few of them
                            let mut inputs = vec![];
                            args.iter().for_each(|a| floats(a, &mut inputs));
                            table.push((where_.clone(), total(vcounts) / total(counts).max(inputs.len() as f64)));
                        }
                    }
                }
            }
        }
        table.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
        println!("ops(grad f) / max(ops(f), float inputs) for scalar-output entries, highest first:");
        for (name, r) in &table {
            println!("  {r:6.2}  {name}");
        }
        println!("compared {compared} cases");
        assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
        assert!(compared > 500, "only {compared} cases compared");
    });
}

/// The cheap gradient principle on the workloads of the issue: a gradient
/// costs at most 4 times its function (operation counts of the
/// interpreter: arithmetic + reads + writes; `vjp` with `ybar = 1`, which
/// is what `grad` runs).
#[test]
fn gradients_cost_at_most_four_times_their_function() {
    with_big_stack(|| {
        let mut rng = Rng(0x1234_5678_9ABC_DEF1);
        let mut vec = |n: usize| Value::array(vec![n], ArrayData::F64((0..n).map(|_| rng.unit()).collect()));
        let mat = |v: Value, r: usize, c: usize| match v {
            Value::Array(a) => Value::array(vec![r, c], a.data.clone()),
            _ => unreachable!(),
        };
        let (d, k, n) = (4usize, 5usize, 60usize);
        let gmm = arden::Program::from_file(std::path::Path::new("examples/gmm.ard")).unwrap();
        let kmeans = arden::Program::from_file(std::path::Path::new("examples/kmeans.ard")).unwrap();
        let rk4 = arden::Program::from_file(std::path::Path::new("examples/rk4_grad.ard")).unwrap();
        let lse = arden::Program::from_file(std::path::Path::new("examples/logsumexp.ard")).unwrap();
        let loss = arden::Program::from_source(
            "loss.ard",
            "entry loss [n][k][m] (a: [n][k]f64) (b: [k][m]f64) : f64 =\n  sum (map (\\row -> sum (map (\\c -> c * c) row)) (matmul a b))",
        )
        .unwrap();
        let workloads: Vec<(&str, &arden::Program, &str, Vec<Value>)> = vec![
            ("logsumexp n=1000", &lse, "lse", vec![vec(1000)]),
            ("matmul loss 20x20", &loss, "loss", vec![mat(vec(400), 20, 20), mat(vec(400), 20, 20)]),
            (
                "GMM d=4 k=5 n=60",
                &gmm,
                "gmm_objective",
                vec![vec(k), mat(vec(k * d), k, d), mat(vec(k * d), k, d), mat(vec(k * d * (d - 1) / 2), k, d * (d - 1) / 2), mat(vec(n * d), n, d), Value::F64(1.0), Value::I64(0)],
            ),
            (
                "RK4 Lotka-Volterra 100 steps",
                &rk4,
                "lv_loss",
                vec![Value::array(vec![4], ArrayData::F64(vec![1.1, 0.4, 0.1, 0.4])), Value::array(vec![2], ArrayData::F64(vec![10.0, 10.0])), Value::F64(0.01), Value::I64(100)],
            ),
            ("k-means n=200 k=5 d=3", &kmeans, "cost", vec![mat(vec(600), 200, 3), mat(vec(15), 5, 3)]),
        ];
        let mut worst = vec![];
        for (name, prog, entry, args) in workloads {
            let e = prog.entry(entry).unwrap();
            let (_, fc) = e.call_counting(&args).unwrap();
            let (_, gc) = e.vjp(&args, &Value::F64(1.0)).unwrap();
            let ratio = total(gc) / total(fc);
            println!("{ratio:5.2}  {name}  (f: {:.0} ops, grad: {:.0} ops)", total(fc), total(gc));
            if ratio > 4.0 {
                worst.push(format!("{name}: {ratio:.2}"));
            }
        }
        assert!(worst.is_empty(), "gradients costing more than 4x: {worst:?}");
    });
}
