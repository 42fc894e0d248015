//! Forward mode against the truth: for every program of the corpus and the
//! examples, the JVP of each entry (at the points its `-- test:` lines use,
//! along random directions) equals central finite differences; the
//! differentiated IR verifies; and the cost of a JVP is a small constant
//! times the cost of the function (printed as a table with
//! `cargo test --release --test ad_forward -- --nocapture`).

mod common;
use arden::runtime::{ArrayData, Value};
use common::*;

#[test]
fn jvp_matches_finite_differences_on_every_program() {
    with_big_stack(|| {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let (mut compared, mut skipped_kinks) = (0usize, 0usize);
        let mut failures = vec![];
        let mut table = vec![];
        for dir in ["tests/programs", "examples"] {
            for path in ard_files(dir) {
                let text = std::fs::read_to_string(&path).unwrap();
                let prog = arden::Program::from_file(&path).unwrap();
                for f in &prog.module().functions {
                    let g = arden::ad::jvp_function(f).unwrap_or_else(|e| panic!("{}: {}", f.name, e.message));
                    arden::ir::verify::verify_function(&g).unwrap_or_else(|e| panic!("{}: jvp IR: {e}", path.display()));
                }
                for case in cases(&text) {
                    if case.expect.is_none() {
                        continue;
                    }
                    let Ok(args) = args_for(&prog, &case) else { continue };
                    // Move off the test's exact point a little: test points are
                    // often special (ties, exact convergence after one step), and
                    // there a derivative of the branch taken is right but finite
                    // differences average two branches.
                    let nudge: Vec<Value> = args.iter().map(|a| direction(a, &mut rng)).collect();
                    let h0 = 1e-3 * scale_of(&args);
                    let args: Vec<Value> = args.iter().zip(&nudge).map(|(x, d)| shift(x, d, h0)).collect();
                    let entry = prog.entry(&case.entry).unwrap();
                    let dirs: Vec<Value> = args.iter().map(|a| direction(a, &mut rng)).collect();
                    let ((y, dy), jcounts) = match entry.jvp(&args, &dirs) {
                        Ok(r) => r,
                        Err(e) => {
                            failures.push(format!("{}:{}: jvp failed: {e}", path.display(), case.line));
                            continue;
                        }
                    };
                    let Ok((y0, counts)) = entry.call_counting(&args) else { continue };
                    assert!(
                        matches(
                            &y0,
                            &serde_json::from_str(
                                &y.to_json().replace("NaN", "\"NaN\"").replace("-Infinity", "\"-Infinity\"").replace("Infinity", "\"Infinity\"")
                            )
                            .unwrap_or(serde_json::Value::Null)
                        ) || y0.to_json() == y.to_json(),
                        "{}: primal differs under jvp",
                        path.display()
                    );
                    let total = |c: arden::OpCounts| (c.arith + c.reads + c.writes).max(1) as f64;
                    table.push((format!("{}:{}", path.file_name().unwrap().to_string_lossy(), case.entry), total(jcounts) / total(counts)));
                    let mut tangent = vec![];
                    floats(&dy, &mut tangent);
                    if tangent.is_empty() {
                        continue;
                    }
                    let h = 1e-6 * scale_of(&args);
                    let fd = |h: f64| -> Option<Vec<f64>> {
                        let plus: Vec<Value> = args.iter().zip(&dirs).map(|(x, d)| shift(x, d, h)).collect();
                        let minus: Vec<Value> = args.iter().zip(&dirs).map(|(x, d)| shift(x, d, -h)).collect();
                        let (p, m) = (entry.call(&plus).ok()?, entry.call(&minus).ok()?);
                        let (mut pf, mut mf) = (vec![], vec![]);
                        floats(&p, &mut pf);
                        floats(&m, &mut mf);
                        Some(pf.iter().zip(&mf).map(|(a, b)| (a - b) / (2.0 * h)).collect())
                    };
                    let (Some(f1), Some(f2)) = (fd(h), fd(h / 8.0)) else { continue };
                    for ((t, a), b) in tangent.iter().zip(&f1).zip(&f2) {
                        if !t.is_finite() || !a.is_finite() || !b.is_finite() {
                            continue;
                        }
                        // Two step sizes disagreeing means a kink or jump here
                        // (floor, max, if): finite differences say nothing.
                        if (a - b).abs() > 1e-4 * (1.0 + a.abs()) {
                            skipped_kinks += 1;
                            continue;
                        }
                        compared += 1;
                        // The two step sizes also estimate the finite-difference error.
                        if (t - a).abs() > 1e-5 * (1.0 + a.abs()) + 10.0 * (a - b).abs() {
                            failures.push(format!("{}:{} `{}`: jvp {t} vs finite differences {a}", path.display(), case.line, case.entry));
                        }
                    }
                }
            }
        }
        table.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
        println!("ops(jvp f) / ops(f), highest first:");
        for (name, r) in &table {
            println!("  {r:6.2}  {name}");
        }
        let mean = table.iter().map(|t| t.1).sum::<f64>() / table.len() as f64;
        println!("compared {compared} tangent components ({skipped_kinks} skipped at kinks); mean ratio {mean:.2}");
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert!(compared > 500, "only {compared} components compared");
        assert!(table.iter().all(|t| t.1 < 12.0), "a jvp costs more than 12x its function: {:?}", table.first());
    });
}

/// Forward-mode gradients of a dot product cost O(n) JVPs of O(n) each as
/// AD writes them (`-O0`); the optimiser removes the one-hot sums (paper
/// 001), which `tests/opt.rs` checks at -O1.
#[test]
fn jacfwd_of_dot_grows_like_n_unoptimised() {
    let src = "entry f [n] (a: [n]f64) (b: [n]f64) : f64 = dot a b\n\
               entry g [n] (a: [n]f64) (b: [n]f64) : [n]f64 = jacfwd (\\v -> dot v b) a";
    let prog = arden::Program::from_source_with("jacdot.ard", src, &arden::opt::OptOptions::level(0)).unwrap();
    for n in [10usize, 100, 1000] {
        let a = Value::array(vec![n], ArrayData::F64((0..n).map(|i| i as f64).collect()));
        let b = Value::array(vec![n], ArrayData::F64((0..n).map(|i| 1.0 + i as f64).collect()));
        let (_, cf) = prog.entry("f").unwrap().call_counting(&[a.clone(), b.clone()]).unwrap();
        let (grad, cg) = prog.entry("g").unwrap().call_counting(&[a, b.clone()]).unwrap();
        assert_eq!(grad, b, "the gradient of a·b in a is b");
        let ratio = cg.arith as f64 / cf.arith as f64;
        println!("n = {n:5}: ops(jacfwd dot) / ops(dot) = {ratio:.1} (arith {} / {})", cg.arith, cf.arith);
        assert!(ratio > n as f64 / 2.0 && ratio < 4.0 * n as f64, "expected growth like n, got {ratio}");
    }
}
