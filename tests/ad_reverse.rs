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
                        // a result sized by a value parameter (`(k: i64) : [k]f64`)
                        // has no whole-entry vjp; the language's `vjp` works there
                        Err(e) if e.to_string().contains("its result's size is the value of its parameter") => continue,
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
                    if matches!(y, Value::F64(_))
                        && let Ok((_, counts)) = entry.call_counting(&args)
                    {
                        // a gradient writes one value per float input even
                        // where the function reads only a few of them
                        let mut inputs = vec![];
                        args.iter().for_each(|a| floats(a, &mut inputs));
                        table.push((where_.clone(), total(vcounts) / total(counts).max(inputs.len() as f64)));
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
        // The cheap gradient principle, at most 6x, for every scalar-output
        // entry but two kinds whose function does (almost) no arithmetic per
        // element, so that the adjoint's own arithmetic dominates: `power`, a
        // loop whose body is one multiplication (its transpose needs two
        // multiplications and an addition, plus saving and reading the
        // state: 7 per iteration), and `prod_all`, a product reduction (its
        // transpose is exact with zeros: prefix and suffix products, 12 per
        // element). Both are bounded here so they cannot grow unnoticed.
        // Also the Cholesky-based `logdet` and Gaussian likelihoods through
        // it (r23, examples/gp_fit.ard): `logdet`'s rule factorises again
        // (no CSE of loops yet) and the rules' triangular solves take whole
        // matrices (LANGUAGE.md §13); 6-10x here, bounded below like the
        // others.
        let exempt = ["`power`", "`prod_all`", "r23_linear_algebra.ard:3 `ld`", "r23_linear_algebra.ard:13 `fnll`", "gp_fit.ard:1 `loss`"];
        let over: Vec<&(String, f64)> = table.iter().filter(|(name, r)| *r > 6.0 && !exempt.iter().any(|e| name.ends_with(e))).collect();
        assert!(over.is_empty(), "gradients costing more than 6x their function: {over:?}");
        assert!(table.iter().all(|(_, r)| *r <= 13.0), "an exempt gradient costs more than 13x: {:?}", table.first());
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
        // a sequential recurrence per row, inside a parallel loop over rows:
        // the rows' cotangents must not be threaded whole through each loop
        let rows = arden::Program::from_source(
            "rows.ard",
            "entry f [n][m] (b: [n][m]f64) : f64 =\n  sum (for r. loop s = 0.0 for c < m do s * 0.5 + b[r, (c + r) % m] * f64 (c + 1))",
        )
        .unwrap();
        let workloads: Vec<(&str, &arden::Program, &str, Vec<Value>)> = vec![
            ("loops in a parallel map 40x40", &rows, "f", vec![mat(vec(1600), 40, 40)]),
            ("logsumexp n=1000", &lse, "lse", vec![vec(1000)]),
            ("matmul loss 20x20", &loss, "loss", vec![mat(vec(400), 20, 20), mat(vec(400), 20, 20)]),
            (
                "GMM d=4 k=5 n=60",
                &gmm,
                "gmm_objective",
                vec![
                    vec(k),
                    mat(vec(k * d), k, d),
                    mat(vec(k * d), k, d),
                    mat(vec(k * d * (d - 1) / 2), k, d * (d - 1) / 2),
                    mat(vec(n * d), n, d),
                    Value::F64(1.0),
                    Value::I64(0),
                ],
            ),
            (
                "RK4 Lotka-Volterra 100 steps",
                &rk4,
                "lv_loss",
                vec![
                    Value::array(vec![4], ArrayData::F64(vec![1.1, 0.4, 0.1, 0.4].into())),
                    Value::array(vec![2], ArrayData::F64(vec![10.0, 10.0].into())),
                    Value::F64(0.01),
                    Value::I64(100),
                ],
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

/// Paper 003's sharing problem: `x = a + a; y = x + x; z = y + y; ...`
/// doubles a value k times. Its gradient is 2^k, and the transformed
/// program costs a constant per link: one cotangent addition per use, no
/// primal work repeated.
#[test]
fn shared_values_cost_one_addition_per_use() {
    let chain = |k: usize| {
        let mut body = String::from("let x0 = a\n");
        for i in 1..=k {
            body.push_str(&format!("  let x{i} = x{} + x{}\n", i - 1, i - 1));
        }
        format!("entry f (a: f64) : f64 =\n  {body}  in x{k}\nentry g (a: f64) : f64 = grad f a\n")
    };
    let mut ops = vec![];
    for k in [3usize, 10, 20, 40] {
        let prog = arden::Program::from_source("chain.ard", &chain(k)).unwrap();
        let (g, counts) = prog.entry("g").unwrap().call_counting(&[Value::F64(0.7)]).unwrap();
        assert_eq!(g, Value::F64(2f64.powi(k as i32)), "gradient of the {k}-link chain");
        ops.push((k, total(counts)));
    }
    println!("ops(grad) by chain length: {ops:?}");
    for w in ops.windows(2) {
        let per_link = (w[1].1 - w[0].1) / (w[1].0 - w[0].0) as f64;
        assert!(per_link <= 3.0, "each link should cost a forward addition and two cotangent additions, got {per_link}");
    }
}

/// `jacrev` equals `jacfwd`; `hessian` is symmetric and equals central
/// finite differences of `grad`, which equals finite differences of the
/// function; `grad (grad ...)` and `jvp` of `grad` agree with `hessian`.
#[test]
fn jacobians_and_hessians_agree_across_modes_and_with_finite_differences() {
    let src = "
def rosen [n] (x: [n]f64) : f64 =
  sum (for (i < n - 1). 100.0 * (x[i + 1] - x[i] * x[i]) * (x[i + 1] - x[i] * x[i]) + (1.0 - x[i]) * (1.0 - x[i]))
def mix [n] (x: [n]f64) : f64 =
  logsumexp (for i. x[i] * x[(i + 1) % n]) + (loop s = 0.0 for i < n do s * 0.5 + sin x[i]) + maximum (map (\\v -> v * v) x)
def vecf [n] (x: [n]f64) : [n]f64 = softmax (for i. x[i] * x[n - 1 - i] + cos x[i])
entry f_rosen [n] (x: [n]f64) : f64 = rosen x
entry g_rosen [n] (x: [n]f64) : [n]f64 = grad rosen x
entry h_rosen [n] (x: [n]f64) : [n][n]f64 = hessian rosen x
entry f_mix [n] (x: [n]f64) : f64 = mix x
entry g_mix [n] (x: [n]f64) : [n]f64 = grad mix x
entry h_mix [n] (x: [n]f64) : [n][n]f64 = hessian mix x
entry gg_mix [n] (x: [n]f64) (k: i64) : [n]f64 = grad (\\y -> (grad mix y)[k]) x
entry hvp_mix [n] (x: [n]f64) (v: [n]f64) : [n]f64 = jvp (\\y -> grad mix y) x v
entry jr_vec [n] (x: [n]f64) : [n][n]f64 = jacrev vecf x
entry jf_vec [n] (x: [n]f64) : [n][n]f64 = jacfwd vecf x
";
    let prog = arden::Program::from_source("modes.ard", src).unwrap();
    let call = |e: &str, args: &[Value]| prog.entry(e).unwrap().call(args).unwrap();
    let vecv = |xs: &[f64]| Value::array(vec![xs.len()], ArrayData::F64(xs.to_vec().into()));
    let nums = |v: &Value| {
        let mut out = vec![];
        floats(v, &mut out);
        out
    };
    let close = |a: f64, b: f64, tol: f64| (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()));
    let x = [0.3, -0.7, 1.1, 0.45];
    let n = x.len();
    // jacrev = jacfwd
    let (jr, jf) = (nums(&call("jr_vec", &[vecv(&x)])), nums(&call("jf_vec", &[vecv(&x)])));
    assert!(jr.iter().zip(&jf).all(|(a, b)| close(*a, *b, 1e-12)), "jacrev {jr:?} vs jacfwd {jf:?}");
    for name in ["rosen", "mix"] {
        let h = nums(&call(&format!("h_{name}"), &[vecv(&x)]));
        let g = nums(&call(&format!("g_{name}"), &[vecv(&x)]));
        let eps = 1e-5;
        for i in 0..n {
            let (mut xp, mut xm) = (x, x);
            xp[i] += eps;
            xm[i] -= eps;
            // grad vs finite differences of f
            let (fp, fm) = (nums(&call(&format!("f_{name}"), &[vecv(&xp)]))[0], nums(&call(&format!("f_{name}"), &[vecv(&xm)]))[0]);
            assert!(close(g[i], (fp - fm) / (2.0 * eps), 1e-6), "{name}: grad[{i}] = {} vs FD {}", g[i], (fp - fm) / (2.0 * eps));
            // hessian column vs finite differences of grad
            let (gp, gm) = (nums(&call(&format!("g_{name}"), &[vecv(&xp)])), nums(&call(&format!("g_{name}"), &[vecv(&xm)])));
            for j in 0..n {
                let fd = (gp[j] - gm[j]) / (2.0 * eps);
                assert!(close(h[j * n + i], fd, 1e-5), "{name}: H[{j}][{i}] = {} vs FD of grad {fd}", h[j * n + i]);
                assert!(close(h[i * n + j], h[j * n + i], 1e-12), "{name}: H is not symmetric at ({i}, {j})");
            }
        }
    }
    // grad of a gradient component and jvp of grad are rows / products of the Hessian
    let h = nums(&call("h_mix", &[vecv(&x)]));
    for k in 0..n {
        let row = nums(&call("gg_mix", &[vecv(&x), Value::I64(k as i64)]));
        assert!((0..n).all(|j| close(row[j], h[k * n + j], 1e-12)), "grad (grad mix)[{k}] = {row:?}");
    }
    let v = [1.0, -2.0, 0.5, 0.25];
    let hv = nums(&call("hvp_mix", &[vecv(&x), vecv(&v)]));
    for i in 0..n {
        let want: f64 = (0..n).map(|j| h[i * n + j] * v[j]).sum();
        assert!(close(hv[i], want, 1e-12), "Hessian-vector product [{i}]: {} vs {want}", hv[i]);
    }
}

/// A gradient fails where its function fails: reverse mode must not drop a
/// dead `iota` of a negative count (it used to, and returned 2.0).
#[test]
fn a_gradient_fails_where_its_function_fails() {
    let src = "entry f (x: f64) (k: i64) : f64 = let a = iota k in x * 2.0\n\
               entry g (x: f64) (k: i64) : f64 = grad (\\y -> let a = iota k in y * 2.0) x\n";
    for level in [0, 1] {
        let prog = arden::Program::from_source_with("dead.ard", src, &arden::opt::OptOptions::level(level)).unwrap();
        for e in ["f", "g"] {
            let err = prog.entry(e).unwrap().call(&[Value::F64(1.0), Value::I64(-1)]).unwrap_err();
            assert!(err.to_string().contains("negative size -1 in `iota`"), "-O{level} `{e}`: {err}");
            assert_eq!(prog.entry(e).unwrap().call(&[Value::F64(1.0), Value::I64(3)]).unwrap(), Value::F64(2.0));
        }
    }
}

/// Issue 24, item 1: gradients as cheap as their functions. Each pattern
/// once had a gradient quadratic in `n` while the function is linear: a
/// read of a derived array (`reverse`, a slice, `rotate`, `concat`, `map`,
/// a row) inside a loop transposed into a one-hot cotangent of the whole
/// array per iteration, and the transposed loop of a scan with another
/// operator than `+` zeroed a cotangent row before reading it, so the
/// zeroing copied the array at every step. The last three compute an array
/// or a reduction the same at every iteration of a `for` (moved before the
/// loop before differentiation). `lastonly` and `passon` replace their
/// state at every iteration without reading it (reverse mode added a
/// whole cotangent per iteration; now only the last iteration runs), and
/// `ifprod` reduces the whole array in one branch of a `for` (a whole
/// cotangent per iteration, zeros in the other branch; now moved out).
const LINEAR_PATTERNS: &str = "
def scanmul [n] (y: [n]f64) : f64 = sum (scan (*) 1.0 y)
def scanmax [n] (y: [n]f64) : f64 = sum (scan max (-1.0e300) y)
def scanuser [n] (y: [n]f64) : f64 = sum (scan (\\a b -> a * b + b) 0.0 y)
def scantup [n] (y: [n]f64) : f64 =
  let (a, b) = unzip (scan (\\(p, q) (r, s) -> (p * r, q * s + r)) (1.0, 1.0) (zip y (map cos y))) in sum a + 2.0 * sum b
def slicefor [n] (y: [n]f64) : f64 = sum (for (i < n - 1). y[1:n][i] * y[i])
def revfor [n] (y: [n]f64) : f64 = sum (for i. (reverse y)[i] * y[i])
def rotfor [n] (y: [n]f64) : f64 = sum (for i. (reverse y)[i] * (rotate 3 y)[i])
def rotneg [n] (y: [n]f64) : f64 = sum (for i. y[i] * (rotate (-5) y)[i])
def catfor [n] (y: [n]f64) : f64 = sum (for i. (concat y y)[i + n] * y[i])
def catmid [n] (y: [n]f64) : f64 = sum (for (i < 2 * n). (concat y (map sin y))[i] * 0.5)
def mapfor [n] (y: [n]f64) : f64 = sum (for i. y[i] * (map sin y)[i])
def revloop [n] (y: [n]f64) : f64 = loop s = 0.0 for i < n do s + (reverse y)[i] * y[i]
def rotloop [n] (y: [n]f64) : f64 = loop s = 0.0 for i < n do s * 0.5 + (rotate 3 y)[i] * y[i]
def catloop [n] (y: [n]f64) : f64 = loop s = 0.0 for i < n do s + (concat y y)[i + n] * y[i]
def sliceloop [n] (y: [n]f64) : f64 = let m = n - 1 in loop s = 0.0 for i < m do s + y[1:n][i] * y[i]
def maploop [n] (y: [n]f64) : f64 = loop s = 0.0 for i < n do s + y[i] * (map sin y)[i]
def rowloop [n] (m: [3][n]f64) : f64 = loop s = 0.0 for j < n do s + m[1][j] * m[0][j]
def rowfor [n] (m: [3][n]f64) : f64 = sum (for j. m[1][j] * m[2][j])
def flatfor [n] (m: [3][n]f64) : f64 = sum (for (i < 3 * n). (flatten m)[i] * (flatten m)[i])
def trfor [n] (m: [3][n]f64) : f64 = sum (for j. (transpose m)[j][2] * m[0][j])
def loopread [n] (y: [n]f64) : f64 = sum (for i. (loop u = y for j < 2 do map (\\v -> v * 0.5 + 1.0) u)[i] * y[i])
def scanread [n] (y: [n]f64) : f64 = sum (for (q < n). (scan (+) 0.0 y)[q] * y[q])
def minread [n] (y: [n]f64) : f64 = sum (for i. y[i] * minimum (map sin y))
def lastonly [n] (y: [n]f64) : f64 = sum (loop u = y for i < n do y) * y[0]
def passon [n] (y: [n]f64) : f64 = let (a, b) = loop (a, b) = (y, y) for i < n do (a, y) in sum a * sum b
def ifprod [n] (y: [n]f64) : f64 = sum (for i. if i == n - 1 then prod y else y[i] * y[i + 1])
";

const LINEAR_VECTOR: &[&str] = &[
    "scanmul",
    "scanmax",
    "scanuser",
    "scantup",
    "slicefor",
    "revfor",
    "rotfor",
    "rotneg",
    "catfor",
    "catmid",
    "mapfor",
    "revloop",
    "rotloop",
    "catloop",
    "sliceloop",
    "maploop",
    "loopread",
    "scanread",
    "minread",
    "lastonly",
    "passon",
    "ifprod",
];
const LINEAR_MATRIX: &[&str] = &["rowloop", "rowfor", "flatfor", "trfor"];

fn linear_program(level: u8) -> arden::Program {
    let mut src = LINEAR_PATTERNS.to_string();
    for (names, ty) in [(LINEAR_VECTOR, "[n]f64"), (LINEAR_MATRIX, "[3][n]f64")] {
        for p in names.iter() {
            src += &format!("entry f_{p} [n] (y: {ty}) : f64 = {p} y\nentry g_{p} [n] (y: {ty}) : {ty} = grad {p} y\n");
        }
    }
    arden::Program::from_source_with("linear.ard", &src, &arden::opt::OptOptions::level(level)).unwrap()
}

/// Values near 1 (products over hundreds of elements stay finite).
fn linear_arg(matrix: bool, n: usize, seed: u64) -> Value {
    let mut rng = Rng(seed | 1);
    let mut vec = |len: usize| (0..len).map(|_| 0.97 + 0.06 * rng.unit().abs().fract()).collect::<Vec<f64>>();
    if matrix { Value::array(vec![3, n], ArrayData::F64(vec(3 * n).into())) } else { Value::array(vec![n], ArrayData::F64(vec(n).into())) }
}

/// Every `update a[i] = v` is the last read of `a` in its block, so that it
/// writes in place (both backends copy an array read again later).
fn updates_are_last_uses(b: &arden::ir::Block, bad: &mut Vec<String>, f: &arden::ir::Function) {
    use arden::ir::{Atom, Expr};
    for (k, s) in b.stmts.iter().enumerate() {
        if let Expr::Update { arr: Atom::Var(a), .. } = &s.expr {
            let later = b.stmts[k + 1..].iter().any(|t| arden::ir::walk::free_vars_stmt(t).contains(a));
            if later || b.result.contains(&Atom::Var(*a)) {
                bad.push(format!("{}: `{}` is read after `update` writes it", f.name, f.var_name(*a)));
            }
        }
        for blk in arden::ir::walk::sub_blocks(&s.expr) {
            updates_are_last_uses(blk, bad, f);
        }
    }
}

#[test]
fn reads_of_derived_arrays_and_scans_have_linear_gradients() {
    with_big_stack(|| {
        let mut failures = vec![];
        for level in [0u8, 1] {
            let prog = linear_program(level);
            // the IR: no update whose array is read afterwards
            let stage = if level == 0 { arden::Stage::Ad } else { arden::Stage::Opt };
            for f in &prog.module_at(stage).functions {
                if f.name.starts_with("g_") {
                    updates_are_last_uses(&f.body, &mut failures, f);
                }
            }
            for (names, matrix) in [(LINEAR_VECTOR, false), (LINEAR_MATRIX, true)] {
                for p in names.iter() {
                    let (f, g) = (prog.entry(&format!("f_{p}")).unwrap(), prog.entry(&format!("g_{p}")).unwrap());
                    // the gradient against central differences
                    let n = 7;
                    let x = linear_arg(matrix, n, 11);
                    let grad = g.call(std::slice::from_ref(&x)).unwrap();
                    let (mut gs, mut xs) = (vec![], vec![]);
                    floats(&grad, &mut gs);
                    floats(&x, &mut xs);
                    let h = 1e-6;
                    for (k, gk) in gs.iter().enumerate() {
                        let at = |d: f64| {
                            let mut e = vec![0.0; xs.len()];
                            e[k] = d;
                            let dir = if matrix { Value::array(vec![3, n], ArrayData::F64(e.into())) } else { Value::array(vec![n], ArrayData::F64(e.into())) };
                            let mut out = vec![];
                            floats(&f.call(&[shift(&x, &dir, 1.0)]).unwrap(), &mut out);
                            out[0]
                        };
                        let fd = (at(h) - at(-h)) / (2.0 * h);
                        if (fd - gk).abs() > 1e-5 * (1.0 + gk.abs()) {
                            failures.push(format!("-O{level} `{p}`: gradient[{k}] = {gk}, central difference {fd}"));
                        }
                    }
                    // operation counts from n to 4n: 4x when linear, 16x when quadratic
                    let ops = |n: usize| total(g.call_counting(&[linear_arg(matrix, n, 5)]).unwrap().1);
                    let (fops, small, large) = (total(f.call_counting(&[linear_arg(matrix, 400, 5)]).unwrap().1), ops(100), ops(400));
                    let growth = large / small;
                    if growth > 5.0 {
                        failures.push(format!("-O{level} `{p}`: the gradient's operations grow {growth:.1}x from n = 100 to 400"));
                    }
                    if large > 12.0 * fops {
                        failures.push(format!("-O{level} `{p}`: the gradient costs {:.1}x its function at n = 400", large / fops));
                    }
                }
            }
        }
        assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    });
}

/// The reads are rewritten to reads of the sources, never at a changed
/// meaning: a failing slice still fails (with its message), on both levels.
#[test]
fn rewritten_reads_keep_their_checks() {
    let src = "entry g [n] (y: [n]f64) (k: i64) : [n]f64 = grad (\\(y: [n]f64) -> sum (for (i < 2). y[i] * y[k:k+2][i])) y\n";
    for level in [0, 1] {
        let prog = arden::Program::from_source_with("slice.ard", src, &arden::opt::OptOptions::level(level)).unwrap();
        let g = prog.entry("g").unwrap();
        let v = |xs: &[f64]| Value::array(vec![xs.len()], ArrayData::F64(xs.to_vec().into()));
        let err = g.call(&[v(&[1.0, 2.0]), Value::I64(1)]).unwrap_err();
        assert!(err.to_string().contains("slice [1:3] out of bounds at slice.ard:1:"), "-O{level}: {err}");
        assert_eq!(g.call(&[v(&[1.0, 2.0, 3.0]), Value::I64(1)]).unwrap(), v(&[2.0, 4.0, 2.0]));
    }
}

/// Gradients of stencils (guarded shifted reads, zero outside the array:
/// 1-d shifts of 1 and 2, a 2-d five-point stencil with a diagonal, a 3-d
/// stencil, two steps each) against central finite differences; their
/// cotangent scatters are gathers (`scatter_stencil`).
#[test]
fn stencil_gradients_match_finite_differences() {
    let src = "
def s1 [n] (u: [n]f64) : [n]f64 =
  for i. sin u[i] * (if i > 1 then u[i - 2] else 0.0) + (if i < n - 1 then u[i + 1] * u[i + 1] else 0.0)
def s2 [n][m] (u: [n][m]f64) : [n][m]f64 =
  for i j.
    let up = if i > 0 then u[i - 1, j] else 0.0
    let down = if i < n - 1 then u[i + 1, j] else 0.0
    let left = if j > 0 then u[i, j - 1] else 0.0
    let right = if j < m - 1 then u[i, j + 1] else 0.0
    let diag = if i > 0 && j < m - 1 then u[i - 1, j + 1] else 0.0
    in sin u[i, j] * up + down * down + 0.5 * left * right - diag
def s3 [a][b][c] (u: [a][b][c]f64) : [a][b][c]f64 =
  for i j k.
    let x = if i > 1 then u[i - 2, j, k] else 0.0
    let y = if j < b - 1 then u[i, j + 1, k] else 0.0
    let z = if k > 0 && j > 0 then u[i, j - 1, k - 1] else 0.0
    in cos u[i, j, k] * x + y * y - z
entry f1 [n] (x: [n]f64) : f64 = sum (s1 (s1 x))
entry g1 [n] (x: [n]f64) : [n]f64 = grad f1 x
entry f2 [n][m] (x: [n][m]f64) : f64 = sum (flatten (s2 (s2 x)))
entry g2 [n][m] (x: [n][m]f64) : [n][m]f64 = grad f2 x
entry f3 [a][b][c] (x: [a][b][c]f64) : f64 = sum (flatten (flatten (s3 (s3 x))))
entry g3 [a][b][c] (x: [a][b][c]f64) : [a][b][c]f64 = grad f3 x
";
    let prog = arden::Program::from_source("stencils.ard", src).unwrap();
    let mut seed = 7u64;
    let mut rnd = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    };
    for (name, shape) in [("1", vec![7]), ("2", vec![4, 5]), ("3", vec![4, 3, 3])] {
        let len: usize = shape.iter().product();
        let x: Vec<f64> = (0..len).map(|_| rnd()).collect();
        let val = |xs: &[f64]| Value::array(shape.clone(), ArrayData::F64(xs.to_vec().into()));
        let f = |xs: &[f64]| {
            let mut out = vec![];
            floats(&prog.entry(&format!("f{name}")).unwrap().call(&[val(xs)]).unwrap(), &mut out);
            out[0]
        };
        let mut g = vec![];
        floats(&prog.entry(&format!("g{name}")).unwrap().call(&[val(&x)]).unwrap(), &mut g);
        let eps = 1e-6;
        for i in 0..len {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[i] += eps;
            xm[i] -= eps;
            let fd = (f(&xp) - f(&xm)) / (2.0 * eps);
            assert!((g[i] - fd).abs() <= 1e-6 * (1.0 + fd.abs()), "g{name}[{i}] = {} vs finite differences {fd}", g[i]);
        }
        let fired = prog.opt_report().fired.iter().find(|(e, _)| *e == format!("g{name}")).map(|(_, m)| m.clone()).unwrap_or_default();
        assert!(fired.contains_key("scatter_stencil"), "g{name}: {fired:?}");
    }
}

/// An entry whose result is sized by a value parameter (`(k: i64) :
/// [k]f64`): its whole-entry jvp names the parameter's copy in its result
/// shape (before, the optimiser left the shape naming the inner copy and
/// the IR failed verification), and its whole-entry vjp, whose cotangent
/// parameter would need that size, is refused with a clear error.
#[test]
fn results_sized_by_a_value_parameter() {
    let src = "entry e (k: i64) (x: f64) : [k]f64 = (scan (\\s i -> (s * x, s + f64 i)) 1.0 k).1\n";
    let prog = arden::Program::from_source("sized.ard", src).unwrap();
    let entry = prog.entry("e").unwrap();
    let args = [Value::I64(3), Value::F64(2.0)];
    let ((y, dy), _) = entry.jvp(&args, &[Value::I64(0), Value::F64(1.0)]).unwrap();
    assert_eq!(y.to_json().to_string(), "[1.0, 3.0, 6.0]");
    // d/dx of [1, x + 1, x^2 + 2] at x = 2
    assert_eq!(dy.to_json().to_string(), "[0.0, 1.0, 4.0]");
    let err = entry.vjp(&args, &y).unwrap_err().to_string();
    assert!(err.contains("its result's size is the value of its parameter `k`"), "{err}");
}
