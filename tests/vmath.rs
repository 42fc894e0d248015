//! The vector math kernels (`src/ir/prim/vmath/`): the Rust and the C twin
//! give the same bits (the C compiled with the backend's flags, in loops gcc
//! vectorises), their error against MPFR's correctly rounded values (`rug`)
//! stays within the bounds LANGUAGE.md §10 states, and the special values
//! are libm's (C99 Annex F).
//!
//! The MPFR comparison needs `--features mpfr` (the `rug` crate on the
//! system's libmpfr and libgmp: `apt-get install libmpfr-dev libgmp-dev`),
//! so that a plain `cargo test` needs nothing beyond a C compiler;
//! `.ci/run` runs it.
//!
//! Point counts: `ARDEN_VMATH_POINTS` (default 10^6 per function for the
//! bitwise check, a tenth of it for the ULP check, which runs MPFR per
//! point); `ARDEN_VMATH_POINTS=10000000 cargo test --release --test vmath`
//! is the full run.

mod common;

use arden::ir::prim::vmath;
#[cfg(feature = "mpfr")]
use rug::{Float, float::Round, ops::Pow};

#[cfg(feature = "mpfr")]
const PREC: u32 = 256;

/// The correctly rounded reference of a kernel (MPFR), with `--features mpfr`.
#[cfg(feature = "mpfr")]
type Reference = fn(&Float, &Float) -> Float;
#[cfg(not(feature = "mpfr"))]
type Reference = ();

/// A reference function, or nothing without MPFR (the tokens are dropped
/// unchecked, so the table compiles without `rug`).
#[cfg(feature = "mpfr")]
macro_rules! mpfr {
    ($e:expr) => {
        $e
    };
}
#[cfg(not(feature = "mpfr"))]
macro_rules! mpfr {
    ($e:expr) => {
        ()
    };
}

fn points() -> usize {
    std::env::var("ARDEN_VMATH_POINTS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000)
}

/// SplitMix64: reproducible points without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    /// `±2^e·m` with `e` uniform in `[lo, hi)`: every magnitude equally often.
    fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let x = (self.uniform(lo, hi) * std::f64::consts::LN_2).exp();
        if self.next() & 1 == 0 { x } else { -x }
    }
}

/// One function under test: its Rust kernel, its C name, the MPFR
/// reference, the ranges where its points are dense, and its error bound
/// (in ULPs) inside those ranges.
#[cfg_attr(not(feature = "mpfr"), allow(dead_code))]
struct Kernel {
    name: &'static str,
    rust: fn(f64, f64) -> f64,
    reference: Reference,
    binary: bool,
    dense: &'static [(f64, f64)],
    max_ulp: f64,
    /// the bound is checked for `|x|` below this (sin and cos: LANGUAGE.md §13)
    domain: f64,
}

fn unary(name: &'static str, rust: fn(f64, f64) -> f64, reference: Reference, dense: &'static [(f64, f64)], max_ulp: f64) -> Kernel {
    let domain = if name == "sin" || name == "cos" { 1e13 } else { f64::INFINITY };
    Kernel { name, rust, reference, binary: false, dense, max_ulp, domain }
}

fn kernels() -> Vec<Kernel> {
    vec![
        unary("exp", |x, _| vmath::exp(x), mpfr!(|x, _| x.clone().exp()), &[(-745.2, 709.8), (-1.0, 1.0)], 1.0),
        unary("expm1", |x, _| vmath::expm1(x), mpfr!(|x, _| x.clone().exp_m1()), &[(-40.0, 709.8), (-1.0, 1.0)], 1.0),
        unary("log", |x, _| vmath::log(x), mpfr!(|x, _| x.clone().ln()), &[(0.0, 1e308), (0.5, 2.0)], 1.0),
        unary("log1p", |x, _| vmath::log1p(x), mpfr!(|x, _| x.clone().ln_1p()), &[(-1.0, 1e308), (-0.5, 1.0)], 1.0),
        unary("tanh", |x, _| vmath::tanh(x), mpfr!(|x, _| x.clone().tanh()), &[(-20.0, 20.0), (-1.0, 1.0)], 1.5),
        unary(
            "sigmoid",
            |x, _| vmath::sigmoid(x),
            mpfr!(|x: &Float, _: &Float| {
                let e = Float::with_val(PREC, -x).exp();
                Float::with_val(PREC, 1.0 / (e + 1u32))
            }),
            &[(-745.0, 40.0), (-5.0, 5.0)],
            1.5,
        ),
        unary("sin", |x, _| vmath::sin(x), mpfr!(|x, _| x.clone().sin()), &[(-1e6, 1e6), (-7.0, 7.0)], 1.0),
        unary("cos", |x, _| vmath::cos(x), mpfr!(|x, _| x.clone().cos()), &[(-1e6, 1e6), (-7.0, 7.0)], 1.0),
        unary("erf", |x, _| vmath::erf(x), mpfr!(|x, _| x.clone().erf()), &[(-6.5, 6.5), (-1.0, 1.0)], 1.0),
        Kernel {
            name: "pow",
            rust: vmath::pow,
            reference: mpfr!(|x: &Float, y: &Float| Float::with_val(PREC, x.pow(y))),
            binary: true,
            dense: &[(0.0, 1000.0), (-100.0, 100.0)],
            max_ulp: 1.5,
            domain: f64::INFINITY,
        },
    ]
}

/// `n` points for `k`: a third random bit patterns, a third uniform in the
/// dense ranges, a third log-uniform in magnitude; `pow` pairs them with
/// exponents, a quarter of them integers (so negative bases count).
fn inputs(k: &Kernel, n: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = Rng(seed);
    let mut xs = Vec::with_capacity(n);
    let mut ys = Vec::with_capacity(n);
    for i in 0..n {
        let x = match i % 3 {
            0 => f64::from_bits(rng.next()),
            1 => {
                let (lo, hi) = k.dense[(i / 3) % k.dense.len()];
                if k.binary { rng.uniform(0.0, 4.0) } else { rng.uniform(lo, hi) }
            }
            _ => rng.log_uniform(-60.0, 60.0),
        };
        xs.push(x);
        let y = match (i / 3) % 4 {
            0 => f64::from_bits(rng.next()),
            1 => rng.uniform(k.dense[1].0, k.dense[1].1).round(),
            2 => rng.uniform(-30.0, 30.0),
            _ => rng.log_uniform(-30.0, 12.0),
        };
        ys.push(y);
    }
    (xs, ys)
}

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// The kernels compiled by the C compiler with the backend's flags, one
/// vectorisable loop per function.
struct CKernels {
    lib: libloading::Library,
    _dir: common::TempDir,
}

type Batch1 = unsafe extern "C" fn(*const f64, *mut f64, i64);
type Batch2 = unsafe extern "C" fn(*const f64, *const f64, *mut f64, i64);

impl CKernels {
    fn build() -> Option<CKernels> {
        if !common::c_compiler_or_skip("vmath") {
            return None;
        }
        let mut src = vmath::c_source();
        for k in kernels() {
            let n = k.name;
            if k.binary {
                src += &format!(
                    "void b_{n}(const double *x, const double *y, double *o, long n) {{ for (long i = 0; i < n; i++) o[i] = ard_vm_{n}(x[i], y[i]); }}\n"
                );
            } else {
                src += &format!("void b_{n}(const double *x, double *o, long n) {{ for (long i = 0; i < n; i++) o[i] = ard_vm_{n}(x[i]); }}\n");
            }
        }
        let dir = common::TempDir::new("vmath");
        let c = dir.write("vmath.c", &src);
        let so = dir.0.join("vmath.so");
        let cc = arden::backend::c::find_compiler().unwrap();
        let out =
            std::process::Command::new(&cc.argv[0]).args(&cc.argv[1..]).args(arden::backend::c::FLAGS).arg("-o").arg(&so).arg(&c).arg("-lm").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // SAFETY: the library is the one just compiled from `src`.
        let lib = unsafe { libloading::Library::new(&so) }.unwrap();
        Some(CKernels { lib, _dir: dir })
    }

    fn run(&self, k: &Kernel, xs: &[f64], ys: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; xs.len()];
        let sym = format!("b_{}", k.name);
        // SAFETY: `b_NAME` is defined above with this signature; the buffers have `xs.len()` elements.
        unsafe {
            if k.binary {
                let f: libloading::Symbol<Batch2> = self.lib.get(sym.as_bytes()).unwrap();
                f(xs.as_ptr(), ys.as_ptr(), out.as_mut_ptr(), xs.len() as i64);
            } else {
                let f: libloading::Symbol<Batch1> = self.lib.get(sym.as_bytes()).unwrap();
                f(xs.as_ptr(), out.as_mut_ptr(), xs.len() as i64);
            }
        }
        out
    }
}

#[test]
fn rust_and_c_give_the_same_bits() {
    let Some(c) = CKernels::build() else { return };
    let n = points();
    for (seed, k) in kernels().iter().enumerate() {
        let (mut xs, mut ys) = inputs(k, n, 1000 + seed as u64);
        for &e in EDGES {
            xs.push(e);
            ys.push(e);
        }
        let got = c.run(k, &xs, &ys);
        let bad: Vec<String> = (0..xs.len())
            .filter(|&i| !same(got[i], (k.rust)(xs[i], ys[i])))
            .take(5)
            .map(|i| format!("{}({:e}, {:e}): C {:e}, Rust {:e}", k.name, xs[i], ys[i], got[i], (k.rust)(xs[i], ys[i])))
            .collect();
        assert!(bad.is_empty(), "{} of {} points differ, e.g.\n{}", bad.len(), xs.len(), bad.join("\n"));
        eprintln!("{}: {} points, same bits", k.name, xs.len());
    }
}

#[cfg(feature = "mpfr")]
/// `y`'s error against the exact `r` in ULPs of the correctly rounded
/// result (subnormal ULPs below 2^-1022); 0 or ∞ where one is not finite.
fn ulp_error(y: f64, r: &Float) -> f64 {
    let rounded = r.to_f64_round(Round::Nearest);
    if !rounded.is_finite() || !y.is_finite() || r.is_zero() {
        return if same(y, rounded) || (y == 0.0 && rounded == 0.0) { 0.0 } else { f64::INFINITY };
    }
    let exp = r.get_exp().unwrap_or(0).max(-1021);
    let diff = Float::with_val(PREC, Float::with_val(PREC, y) - r).abs();
    (diff >> (exp - 53)).to_f64()
}

#[cfg(feature = "mpfr")]
fn max_error(k: &Kernel, xs: &[f64], ys: &[f64]) -> (f64, f64, f64) {
    let mut worst = (0.0, f64::NAN, f64::NAN);
    for (&x, &y) in xs.iter().zip(ys) {
        let (fx, fy) = (Float::with_val(PREC, x), Float::with_val(PREC, y));
        if !x.is_finite() || !y.is_finite() || x.abs() >= k.domain {
            continue;
        }
        let e = ulp_error((k.rust)(x, y), &(k.reference)(&fx, &fy));
        if e > worst.0 {
            worst = (e, x, y);
        }
    }
    worst
}

#[cfg(feature = "mpfr")]
#[test]
fn error_against_mpfr_is_bounded() {
    let n = (points() / 10).max(1000);
    let mut report = Vec::new();
    for (seed, k) in kernels().iter().enumerate() {
        let (xs, ys) = inputs(k, n, 2000 + seed as u64);
        let (e, x, y) = max_error(k, &xs, &ys);
        let ok = if e <= k.max_ulp { "" } else { "  TOO LARGE" };
        report.push(format!("{}: max {e:.3} ULP at ({x:e}, {y:e}) over {n} points{ok}", k.name));
    }
    let report = report.join("\n");
    eprintln!("{report}");
    assert!(!report.contains("TOO LARGE"), "{report}");
}

/// Inputs every function sees in both checks.
const EDGES: &[f64] = &[
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    2.0,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    f64::MIN_POSITIVE,
    5e-324,
    -5e-324,
    f64::MAX,
    f64::MIN,
    709.782712893384,
    709.7827128933841,
    -745.1332191019411,
    -745.1332191019412,
    -708.3964185322641,
    1e-300,
    -1e-20,
    3.0,
    -3.0,
    0.25,
];

#[test]
fn special_values_are_libms() {
    let inf = f64::INFINITY;
    let nan = f64::NAN;
    let cases: &[(&str, f64, f64)] = &[
        ("exp", 0.0, 1.0),
        ("exp", -0.0, 1.0),
        ("exp", inf, inf),
        ("exp", -inf, 0.0),
        ("exp", nan, nan),
        ("exp", 709.7827128933841, inf),
        ("exp", 709.782712893384, 1.7976931348622732e308),
        ("exp", -745.1332191019411, 5e-324),
        ("exp", -745.1332191019412, 0.0),
        ("exp", -1e4, 0.0),
        ("exp", 1e300, inf),
        ("expm1", -0.0, -0.0),
        ("expm1", 5e-324, 5e-324),
        ("expm1", -inf, -1.0),
        ("expm1", inf, inf),
        ("expm1", -50.0, -1.0),
        ("log", 0.0, -inf),
        ("log", -0.0, -inf),
        ("log", -1.0, nan),
        ("log", -inf, nan),
        ("log", inf, inf),
        ("log", 1.0, 0.0),
        ("log", nan, nan),
        ("log", 5e-324, -744.4400719213812),
        ("log1p", -1.0, -inf),
        ("log1p", -2.0, nan),
        ("log1p", -0.0, -0.0),
        ("log1p", 5e-324, 5e-324),
        ("log1p", inf, inf),
        ("tanh", -0.0, -0.0),
        ("tanh", inf, 1.0),
        ("tanh", -inf, -1.0),
        ("tanh", 5e-324, 5e-324),
        ("tanh", nan, nan),
        ("sigmoid", 0.0, 0.5),
        ("sigmoid", inf, 1.0),
        ("sigmoid", -inf, 0.0),
        ("sigmoid", nan, nan),
        ("sin", -0.0, -0.0),
        ("sin", inf, nan),
        ("sin", 5e-324, 5e-324),
        ("cos", 0.0, 1.0),
        ("cos", -inf, nan),
        ("erf", -0.0, -0.0),
        ("erf", inf, 1.0),
        ("erf", -inf, -1.0),
        ("erf", 6.0, 1.0),
        ("erf", nan, nan),
    ];
    let ks = kernels();
    for &(name, x, want) in cases {
        let k = ks.iter().find(|k| k.name == name).unwrap();
        let got = (k.rust)(x, 0.0);
        assert!(same(got, want), "{name}({x:e}) = {got:e}, want {want:e}");
    }
    let pows: &[(f64, f64, f64)] = &[
        (nan, 0.0, 1.0),
        (1.0, nan, 1.0),
        (-1.0, inf, 1.0),
        (-1.0, -inf, 1.0),
        (nan, 1.0, nan),
        (2.0, nan, nan),
        (0.0, -3.0, inf),
        (-0.0, -3.0, -inf),
        (-0.0, -2.0, inf),
        (-0.0, -0.5, inf),
        (0.0, -inf, inf),
        (-0.0, 3.0, -0.0),
        (-0.0, 2.0, 0.0),
        (0.5, inf, 0.0),
        (0.5, -inf, inf),
        (2.0, inf, inf),
        (2.0, -inf, 0.0),
        (-inf, -3.0, -0.0),
        (-inf, -2.0, 0.0),
        (-inf, 3.0, -inf),
        (-inf, 2.5, inf),
        (inf, -1.0, 0.0),
        (inf, 0.5, inf),
        (-8.0, 1.0 / 3.0, nan),
        (-2.0, 3.0, -8.0),
        (-2.0, 2.0, 4.0),
        (-2.0, 1e300, inf),
        (-0.5, 9007199254740993.0, 0.0),
        (2.0, 10.0, 1024.0),
        (2.0, -1074.0, 5e-324),
        (2.0, -1075.0, 0.0),
        (2.0, 1024.0, inf),
        (10.0, 308.0, 1e308),
        (0.0, 0.0, 1.0),
        (inf, 0.0, 1.0),
    ];
    for &(x, y, want) in pows {
        let got = vmath::pow(x, y);
        assert!(same(got, want), "pow({x:e}, {y:e}) = {got:e}, want {want:e}");
    }
}

/// The speed of 10^6 `exp`, `log`, `tanh`, … with libm and with the
/// kernels, best of 20 runs, in a C loop compiled with the backend's flags
/// (one thread). Run with `--ignored --nocapture`; the numbers are in
/// docs/PERFORMANCE.md's notes.
#[test]
#[ignore]
fn speed_against_libm() {
    if !common::c_compiler_or_skip("vmath speed") {
        return;
    }
    let funcs = [("exp", "exp(v)"), ("log", "log(v)"), ("tanh", "tanh(v)"), ("sin", "sin(v)"), ("erf", "erf(v)"), ("pow", "pow(v, 1.7)")];
    let mut src = vmath::c_source();
    src += "#include <time.h>\nstatic double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }\n";
    src += "typedef void (*loop_fn)(const double *, double *, long);\n";
    for (name, libm) in funcs {
        let ours = if name == "pow" { "ard_vm_pow(v, 1.7)".to_string() } else { format!("ard_vm_{name}(v)") };
        src += &format!("static void l_{name}(const double *x, double *y, long n) {{ for (long i = 0; i < n; i++) {{ double v = x[i]; y[i] = {libm}; }} }}\n");
        src += &format!("static void v_{name}(const double *x, double *y, long n) {{ for (long i = 0; i < n; i++) {{ double v = x[i]; y[i] = {ours}; }} }}\n");
    }
    src += "static double best(loop_fn f, const double *x, double *y, long n) { double b = 1e30; for (int r = 0; r < 20; r++) { double t = now(); f(x, y, n); t = now() - t; if (t < b) b = t; } return b; }\n";
    let calls: Vec<String> = funcs.iter().map(|(n, _)| format!("best(l_{n}, x, y, n), best(v_{n}, x, y, n)")).collect();
    src += &format!(
        "void run(const double *x, double *y, long n, double *out) {{ double t[] = {{{}}}; for (unsigned i = 0; i < sizeof t / sizeof t[0]; i++) out[i] = t[i]; }}\n",
        calls.join(", ")
    );
    let dir = common::TempDir::new("vmath-speed");
    let c = dir.write("speed.c", &src);
    if let Ok(keep) = std::env::var("ARDEN_VMATH_KEEP_C") {
        std::fs::write(keep, &src).unwrap();
    }
    let so = dir.0.join("speed.so");
    let cc = arden::backend::c::find_compiler().unwrap();
    let out =
        std::process::Command::new(&cc.argv[0]).args(&cc.argv[1..]).args(arden::backend::c::FLAGS).arg("-o").arg(&so).arg(&c).arg("-lm").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let n = 1_000_000;
    let mut rng = Rng(7);
    let xs: Vec<f64> = (0..n).map(|_| rng.uniform(0.01, 10.0)).collect();
    let mut ys = vec![0.0; n];
    let mut t = vec![0.0; 2 * funcs.len()];
    // SAFETY: `run` is defined above with this signature; `t` has one slot per timing.
    unsafe {
        let lib = libloading::Library::new(&so).unwrap();
        let run: libloading::Symbol<unsafe extern "C" fn(*const f64, *mut f64, i64, *mut f64)> = lib.get(b"run").unwrap();
        run(xs.as_ptr(), ys.as_mut_ptr(), n as i64, t.as_mut_ptr());
    }
    for (k, (name, _)) in funcs.iter().enumerate() {
        eprintln!("{name}: libm {:.2} ms, vmath {:.2} ms per 10^6 ({:.1}x)", t[2 * k] * 1e3, t[2 * k + 1] * 1e3, t[2 * k] / t[2 * k + 1]);
    }
}

/// gcc vectorises a loop over each kernel but `erf` (whose table rows gcc
/// does not gather) with the backend's flags, on x86-64 at AVX2 with FMA
/// (`x86-64-v3`) and at the host's width (`-march=native`) where the host
/// has FMA. At plain SSE2 the kernels' `fma()` is a libm call and the
/// loops stay scalar (same bits, slower). Other compilers and targets are
/// not checked (clang reports differently).
#[test]
#[cfg(target_arch = "x86_64")]
fn gcc_vectorises_every_kernel() {
    if !common::c_compiler_or_skip("vmath vectorisation") {
        return;
    }
    let cc = arden::backend::c::find_compiler().unwrap();
    let version = std::process::Command::new(&cc.argv[0]).arg("--version").output().unwrap();
    if !String::from_utf8_lossy(&version.stdout).contains("Free Software Foundation") {
        eprintln!("skipped: the C compiler is not gcc (vmath vectorisation)");
        return;
    }
    let mut src = vmath::c_source();
    let names: Vec<&str> = kernels().iter().map(|k| k.name).filter(|n| *n != "erf").collect();
    for n in &names {
        let call = if *n == "pow" { "ard_vm_pow(x[i], 1.7)".to_string() } else { format!("ard_vm_{n}(x[i])") };
        src += &format!("void b_{n}(const double *restrict x, double *restrict o, long n) {{\n  for (long i = 0; i < n; i++) o[i] = {call};\n}}\n");
    }
    // pow with one operand the same in every iteration but unknown to gcc
    // (least squares' `t[i] ** f64 j` in a loop over i or over j): a
    // special case that tests that operand alone was a select with a
    // scalar condition, which gcc does not vectorise (checked where AVX2
    // or more is there: at plain SSE2 gcc leaves these loops scalar)
    let invariant_first = src.lines().count() + 2;
    src += "void b_pow_y(const double *restrict x, double *restrict o, long n, double y) {\n  for (long i = 0; i < n; i++) o[i] = ard_vm_pow(x[i], y);\n}\n";
    src += "void b_pow_x(const double *restrict y, double *restrict o, long n, double x) {\n  for (long i = 0; i < n; i++) o[i] = ard_vm_pow(x, y[i]);\n}\n";
    let dir = common::TempDir::new("vmath-vec");
    let c = dir.write("vec.c", &src);
    let first_line = invariant_first - 3 * names.len();
    let native = if std::arch::is_x86_feature_detected!("fma") { &["-march=native"][..] } else { &[] };
    for march in native.iter().chain(&["-march=x86-64-v3"]) {
        let flags = arden::backend::c::FLAGS.iter().filter(|f| !f.starts_with("-march") && **f != "-w");
        let out = std::process::Command::new(&cc.argv[0])
            .args(&cc.argv[1..])
            .args(flags)
            .args([march, "-fopt-info-vec-optimized", "-o"])
            .arg(dir.0.join("vec.so"))
            .arg(&c)
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{report}");
        for (k, n) in names.iter().enumerate() {
            let line = format!("vec.c:{}:", first_line + 3 * k);
            assert!(
                report.lines().any(|l| l.contains(&line) && l.contains("loop vectorized")),
                "{march}: the loop over {n} (line {line}) is not vectorised:\n{report}"
            );
        }
        for (k, n) in ["pow(x[i], y)", "pow(x, y[i])"].iter().enumerate() {
            let line = format!("vec.c:{}:", invariant_first + 3 * k);
            assert!(
                report.lines().any(|l| l.contains(&line) && l.contains("loop vectorized")),
                "{march}: the loop over {n} (line {line}) is not vectorised:\n{report}"
            );
        }
    }
}
