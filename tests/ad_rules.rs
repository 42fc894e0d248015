//! Every differentiable primitive's JVP rule against central finite
//! differences at many random points of its domain (property tests), and a
//! check, driven by the primitive table, that no differentiable primitive
//! is left out.

use arden::ir::prim::{Accepts, Typing};
use arden::ir::{Block, Expr, Prim, Scalar, walk};
use arden::{Program, Stage, Value};
use proptest::prelude::*;
use std::collections::BTreeSet;

/// name, source of the function of `x` (and `y`), domain of x, domain of y.
const RULES: &[(&str, &str, (f64, f64), (f64, f64))] = &[
    ("exp", "exp x", (-5.0, 5.0), (0.0, 0.0)),
    ("log", "log x", (0.1, 10.0), (0.0, 0.0)),
    ("sqrt", "sqrt x", (0.1, 10.0), (0.0, 0.0)),
    ("sin", "sin x", (-3.0, 3.0), (0.0, 0.0)),
    ("cos", "cos x", (-3.0, 3.0), (0.0, 0.0)),
    ("tan", "tan x", (-1.2, 1.2), (0.0, 0.0)),
    ("tanh", "tanh x", (-3.0, 3.0), (0.0, 0.0)),
    ("asin", "asin x", (-0.9, 0.9), (0.0, 0.0)),
    ("acos", "acos x", (-0.9, 0.9), (0.0, 0.0)),
    ("atan", "atan x", (-5.0, 5.0), (0.0, 0.0)),
    ("sinh", "sinh x", (-3.0, 3.0), (0.0, 0.0)),
    ("cosh", "cosh x", (-3.0, 3.0), (0.0, 0.0)),
    ("abs", "abs x", (0.1, 5.0), (0.0, 0.0)),
    ("abs_neg", "abs (0.0 - x)", (0.1, 5.0), (0.0, 0.0)),
    ("floor", "floor x + x", (0.05, 0.95), (0.0, 0.0)),
    ("ceil", "ceil x * x", (1.05, 1.95), (0.0, 0.0)),
    ("lgamma", "lgamma x", (0.2, 10.0), (0.0, 0.0)),
    ("lgamma_neg", "lgamma x", (-1.9, -1.1), (0.0, 0.0)),
    ("digamma", "jvp lgamma x 1.0", (0.2, 10.0), (0.0, 0.0)),
    ("erf", "erf x", (-3.0, 3.0), (0.0, 0.0)),
    ("erfc", "erfc x", (-3.0, 3.0), (0.0, 0.0)),
    ("log1p", "log1p x", (-0.9, 10.0), (0.0, 0.0)),
    ("expm1", "expm1 x", (-5.0, 5.0), (0.0, 0.0)),
    ("sigmoid", "sigmoid x", (-6.0, 6.0), (0.0, 0.0)),
    ("softplus", "softplus x", (-30.0, 30.0), (0.0, 0.0)),
    ("logsigmoid", "logsigmoid x", (-30.0, 30.0), (0.0, 0.0)),
    ("logaddexp", "logaddexp x y", (-5.0, 5.0), (-5.0, 5.0)),
    ("xlogy", "xlogy x y", (-5.0, 5.0), (0.1, 5.0)),
    ("relu", "relu x", (0.1, 5.0), (0.0, 0.0)),
    ("relu_neg", "relu (0.0 - x) + x", (0.1, 5.0), (0.0, 0.0)),
    ("neg", "-x", (-5.0, 5.0), (0.0, 0.0)),
    ("f32", "f64 (f32 x) * 0.0 + x * x", (-2.0, 2.0), (0.0, 0.0)),
    ("add", "x + y", (-5.0, 5.0), (-5.0, 5.0)),
    ("sub", "x - y", (-5.0, 5.0), (-5.0, 5.0)),
    ("mul", "x * y", (-5.0, 5.0), (-5.0, 5.0)),
    ("div", "x / y", (-5.0, 5.0), (0.5, 5.0)),
    ("rem", "x % y", (0.1, 5.0), (0.7, 0.9)),
    ("pow", "pow x y", (0.1, 5.0), (-2.0, 2.0)),
    ("starstar", "x ** y", (0.1, 5.0), (-2.0, 2.0)),
    ("atan2", "atan2 x y", (-5.0, 5.0), (0.5, 5.0)),
    ("min", "min x (x + y)", (-5.0, 5.0), (0.5, 2.0)),
    ("max", "max x (x - y)", (-5.0, 5.0), (0.5, 2.0)),
    ("select", "if x > y then x * x else y * x", (-5.0, 5.0), (-5.0, 5.0)),
    // the tangent of `max` is a `select`, differentiated here
    ("select_max", "jvp (\\x -> max (x * x) y) x 1.0", (1.0, 2.0), (-5.0, 5.0)),
];

fn program() -> Program {
    let mut src = String::new();
    for (name, body, ..) in RULES {
        src.push_str(&format!(
            "entry f_{name} (x: f64) (y: f64) : f64 = {body}\n\
             entry dx_{name} (x: f64) (y: f64) : f64 = jvp (\\x -> {body}) x 1.0\n\
             entry dy_{name} (x: f64) (y: f64) : f64 = jvp (\\y -> {body}) y 1.0\n"
        ));
    }
    Program::from_source("rules.ard", &src).unwrap_or_else(|e| panic!("{e}"))
}

thread_local! {
    static PROGRAM: Program = program();
}

fn call(p: &Program, entry: &str, x: f64, y: f64) -> f64 {
    match p.entry(entry).unwrap().call(&[Value::F64(x), Value::F64(y)]).unwrap() {
        Value::F64(v) => v,
        other => panic!("{other:?}"),
    }
}

fn check(p: &Program, k: usize, u: f64, v: f64) -> Result<(), TestCaseError> {
    let (name, _, (xa, xb), (ya, yb)) = RULES[k];
    let x = xa + (xb - xa) * u;
    let y = if ya == yb { 0.0 } else { ya + (yb - ya) * v };
    for (wrt, d) in [("dx", (1.0, 0.0)), ("dy", (0.0, 1.0))] {
        let got = call(p, &format!("{wrt}_{name}"), x, y);
        let h = 1e-6;
        let f = |t: f64| call(p, &format!("f_{name}"), x + t * d.0, y + t * d.1);
        let fd = (f(h) - f(-h)) / (2.0 * h);
        prop_assert!((got - fd).abs() <= 1e-6 * (1.0 + fd.abs()), "{name}: d/{wrt} at x={x}, y={y}: rule gives {got}, finite differences {fd}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
    #[test]
    fn every_rule_matches_finite_differences(k in 0..RULES.len(), u in 0.0f64..1.0, v in 0.0f64..1.0) {
        PROGRAM.with(|p| check(p, k, u, v))?;
    }
}

/// Differentiable primitives without a derivative rule, each with the
/// error its derivative gives.
const NO_RULE: &[(&str, &str)] = &[("trigamma", "at most twice")];

/// Whether a primitive can have a nonzero tangent: its result can be a float.
fn differentiable(p: Prim) -> bool {
    match p.row().typing {
        Typing::Same(Accepts::Any | Accepts::Numeric | Accepts::Float) | Typing::Select => true,
        Typing::To(to) => to == Scalar::F64 || to == Scalar::F32,
        Typing::Same(Accepts::Bool | Accepts::Int) | Typing::Test(_) => false,
    }
}

fn prims_in(b: &Block, found: &mut BTreeSet<&'static str>) {
    for s in &b.stmts {
        if let Expr::Prim(p, _) = &s.expr {
            found.insert(p.name());
        }
        for inner in walk::sub_blocks(&s.expr) {
            prims_in(inner, found);
        }
    }
}

/// Every differentiable primitive of `Prim::ALL` occurs in a function of
/// `RULES` (after `jvp` expansion, so `digamma` counts), whose derivative
/// the property test checks; the ones without a rule say so.
#[test]
fn every_differentiable_primitive_has_a_checked_rule() {
    let mut covered = BTreeSet::new();
    PROGRAM.with(|p| {
        for f in &p.module_at(Stage::Ad).functions {
            if f.name.starts_with("f_") {
                prims_in(&f.body, &mut covered);
            }
        }
    });
    let missing: Vec<&str> = Prim::ALL
        .iter()
        .filter(|p| differentiable(**p) && !covered.contains(p.name()) && !NO_RULE.iter().any(|(n, _)| *n == p.name()))
        .map(|p| p.name())
        .collect();
    assert!(missing.is_empty(), "no finite-difference check of the derivative of {missing:?}: add a row to RULES");
    let lgamma_thrice = "entry f (x: f64) : f64 = jvp (\\x -> jvp (\\x -> jvp lgamma x 1.0) x 1.0) x 1.0";
    for (name, error) in NO_RULE {
        let p = Prim::ALL.iter().find(|p| p.name() == *name).unwrap_or_else(|| panic!("`{name}` is no primitive"));
        assert!(differentiable(*p), "`{name}` has no tangent anyway");
        let src = match *name {
            "trigamma" => lgamma_thrice,
            other => panic!("no program differentiates `{other}`"),
        };
        let e = Program::from_source("no_rule.ard", src).err().unwrap_or_else(|| panic!("the derivative of `{name}` compiled"));
        assert!(e.to_string().contains(error), "{e}");
    }
}

/// The conventions of LANGUAGE.md §7 at non-differentiable points.
#[test]
fn conventions_at_kinks() {
    let src = "entry a (x: f64) : f64 = jvp abs x 1.0\n\
               entry r (x: f64) : f64 = jvp relu x 1.0\n\
               entry mx (x: f64) : (f64, f64) = (jvp (\\x -> max x 1.0) x 1.0, jvp (\\y -> max 1.0 y) x 1.0)\n\
               entry mxv (x: f64) : f64 = jvp (\\x -> maximum [x, 1.0, x]) x 1.0\n\
               entry mxw (x: f64) : f64 = jvp (\\y -> maximum [1.0, y]) x 1.0\n\
               entry cmp (x: f64) : f64 = jvp (\\x -> if x < 1.0 then 2.0 * x else 3.0 * x) x 1.0";
    let p = Program::from_source("kinks.ard", src).unwrap();
    let run = |e: &str, x: f64| p.entry(e).unwrap().call(&[Value::F64(x)]).unwrap().to_json();
    assert_eq!(run("a", 0.0), "0.0");
    assert_eq!(run("r", 0.0), "0.0");
    // the first maximal argument gets the derivative
    assert_eq!(run("mx", 1.0), "[1.0, 0.0]");
    assert_eq!(run("mxv", 1.0), "1.0");
    assert_eq!(run("mxw", 1.0), "0.0");
    // `if` differentiates the branch taken
    assert_eq!(run("cmp", 1.0), "3.0");
}
