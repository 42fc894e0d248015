//! Reverse mode against the truth: for every entry of the corpus, the
//! forward-mode programs and the examples, at the points its `-- test:`
//! lines use and along random `xdot` and `ybar`,
//! ⟨ybar, jvp f x xdot⟩ = ⟨vjp f x ybar, xdot⟩ (forward and reverse agree,
//! which with the finite-difference checks of `ad_forward` pins reverse
//! mode down); the reverse IR verifies; and the cost of a gradient is a
//! small constant times the cost of the function (the table prints with
//! `cargo test --release --test ad_reverse -- --nocapture`).

mod common;
use arden::runtime::Value;
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
                            table.push((where_.clone(), total(vcounts) / total(counts)));
                        }
                    }
                }
            }
        }
        table.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
        println!("ops(grad f) / ops(f) for scalar-output entries, highest first:");
        for (name, r) in &table {
            println!("  {r:6.2}  {name}");
        }
        println!("compared {compared} cases");
        assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
        assert!(compared > 500, "only {compared} cases compared");
    });
}
