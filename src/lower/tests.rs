//! Unit tests of `lower`: size inference, index proofs, rejections.

use crate::api::{Error, Program};
use crate::ir::{self, Expr, Stmt};
use crate::runtime::{ArrayData, Value};

fn compile(src: &str) -> Program {
    match Program::from_source("t.ard", src) {
        Ok(p) => {
            ir::verify::verify_module(p.module()).expect("lowered IR verifies");
            p
        }
        Err(e) => panic!("does not compile:\n{e}"),
    }
}

fn errors(src: &str) -> String {
    match Program::from_source("t.ard", src) {
        Ok(_) => panic!("compiled, but should not:\n{src}"),
        Err(Error::Compile { rendered, .. }) => rendered,
        Err(e) => panic!("unexpected error {e}"),
    }
}

fn vec_f64(xs: &[f64]) -> Value {
    Value::array(vec![xs.len()], ArrayData::F64(xs.to_vec()))
}

/// Every index statement of a block, recursively.
fn indexes(b: &ir::Block, out: &mut Vec<Stmt>) {
    for s in &b.stmts {
        match &s.expr {
            Expr::Index { .. } => out.push(s.clone()),
            Expr::For { body, .. } => indexes(body, out),
            Expr::Loop { body, .. } => indexes(body, out),
            Expr::If { then_b, else_b, .. } => {
                indexes(then_b, out);
                indexes(else_b, out);
            }
            _ => {}
        }
    }
}

#[test]
fn for_size_is_inferred_from_indexing() {
    let p = compile("entry f [n][m] (a: [n][m]f64) : [m][n]f64 = for j i. a[i, j]");
    let out = p.entry("f").unwrap().call(&[Value::array(vec![2, 3], ArrayData::F64(vec![1., 2., 3., 4., 5., 6.]))]).unwrap();
    assert_eq!(out.to_json(), "[[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]");
}

#[test]
fn affine_indexes_are_proven_in_bounds() {
    // Paper 003's self-convolution: a[n-1-i] needs no run-time check.
    let p = compile("entry conv [n] (a: [n]f64) : f64 = sum (for i. a[i] * a[n-1-i])");
    assert!(p.unproven_checks().is_empty(), "{:?}", p.unproven_checks());
    let mut idx = vec![];
    indexes(&p.module().functions[0].body, &mut idx);
    assert!(idx.iter().all(|s| matches!(&s.expr, Expr::Index { checks, .. } if checks.iter().all(Option::is_none))));
    let v = p.entry("conv").unwrap().call(&[vec_f64(&[1., 2., 3.])]).unwrap();
    assert_eq!(v, Value::F64(10.0));
    // a[i+1] over idx (n-1) is safe too.
    let p = compile("entry d [n] (a: [n]f64) : [n-1]f64 = for (i < n - 1). a[i+1] - a[i]");
    assert!(p.unproven_checks().is_empty(), "{:?}", p.unproven_checks());
}

#[test]
fn unprovable_indexes_get_checks() {
    let p = compile("entry f [n] (a: [n]f64) (k: i64) : f64 = a[k] + a[0]");
    assert_eq!(p.unproven_checks().len(), 2);
    let err = p.entry("f").unwrap().call(&[vec_f64(&[1., 2.]), Value::I64(5)]).unwrap_err();
    assert!(err.to_string().contains("out of bounds"), "{err}");
}

#[test]
fn dot_of_different_lengths_is_a_compile_error() {
    let e = errors("entry f (a: [3]f64) (b: [4]f64) : f64 = dot a b");
    assert!(e.contains("[3]f64") && e.contains("[4]f64"), "{e}");
    let e = errors(
        "def mydot [n] (a: [n]f64) (b: [n]f64) : f64 = sum (for i. a[i] * b[i])\n\
         entry f (a: [3]f64) (b: [4]f64) : f64 = mydot a b",
    );
    assert!(e.contains("[4]f64") && e.contains("t.ard:2:"), "{e}");
}

#[test]
fn sizes_compare_by_normal_form() {
    let src = "def tri [d] (x: [d]f64) (l: [d*(d-1)/2]f64) : f64 = sum x + sum l\n\
               entry f [d] (x: [d]f64) (l: [(d*d - d)/2]f64) : f64 = tri x l";
    let p = compile(src);
    let v = p.entry("f").unwrap().call(&[vec_f64(&[1., 2., 3.]), vec_f64(&[1., 1., 1.])]).unwrap();
    assert_eq!(v, Value::F64(9.0));
    let err = p.entry("f").unwrap().call(&[vec_f64(&[1., 2., 3.]), vec_f64(&[1., 1.])]).unwrap_err();
    assert!(err.to_string().contains("parameter `l`"), "{err}");
}

#[test]
fn recursion_and_function_values_are_rejected() {
    assert!(errors("def f (x: f64) : f64 = f x\nentry g (x: f64) : f64 = f x").contains("recursive"));
    assert!(errors("def f (x: f64) : f64 = g x\ndef g (x: f64) : f64 = f x\nentry h (x: f64) : f64 = g x").contains("f -> g -> f"));
    assert!(errors("entry f (x: f64) : f64 = let g = [\\y -> y] in x").contains("function"));
    assert!(errors("entry f (b: bool) (x: f64) : f64 = (if b then sin else cos) x").contains("`if` cannot choose between functions"));
    assert!(errors("entry f (x: f64) : f64 = let w = \\g -> g g in w w x").contains("nest too deeply"));
}

#[test]
fn several_independent_errors_are_all_reported() {
    let e = errors("def a (x: f64) : f64 = x + true\ndef b (x: f64) : f64 = y\nentry c (x: f64) : f64 = if x then 1.0 else 2.0");
    assert_eq!(e.matches("error").count(), 3, "{e}");
}

#[test]
fn literals_adapt_to_float_context() {
    let p = compile("entry f (x: f64) : f64 = loop s = 0 for i < 3 do s + 2 * x");
    assert_eq!(p.entry("f").unwrap().call(&[Value::F64(1.5)]).unwrap(), Value::F64(9.0));
}

#[test]
fn constants_and_use_before_definition() {
    let p = compile("entry f (x: f64) : f64 = c * sq x\ndef sq x = x * x\ndef c : f64 = 3.0");
    assert_eq!(p.entry("f").unwrap().call(&[Value::F64(2.0)]).unwrap(), Value::F64(12.0));
}

#[test]
fn derivative_misuse_is_a_compile_error() {
    let e = errors("entry f (x: [3]f64) (d: [4]f64) : [3]f64 = jvp (\\v -> for i. v[i] * 2.0) x d");
    assert!(e.contains("tangent of `jvp`") && e.contains("[3]f64") && e.contains("[4]f64"), "{e}");
    let e = errors("entry f (x: [3]f64) : f64 = jvp (\\v -> sum v) x 1.0");
    assert!(e.contains("tangent") && e.contains("f64"), "{e}");
    let e = errors("entry f (x: [3]f64) : [2][3]f64 = jacfwd (\\v -> (sum v, sum v)) x");
    assert!(e.contains("`jacfwd`") && e.contains("(f64, f64)"), "{e}");
    let e = errors("entry f (n: i64) : i64 = jvp (\\k -> k * k) n 1");
    assert!(e.contains("`jvp` differentiates") && e.contains("i64"), "{e}");
    let e = errors("entry f (x: f64) : f64 = jvp 3.0 x 1.0");
    assert!(e.contains("must be a function"), "{e}");
    let e = errors("entry f (x: [2][2]f64) : f64 = jacfwd (\\m -> m[0, 0]) x");
    assert!(e.contains("`jacfwd` needs an f64/f32 scalar or vector point"), "{e}");
    let e = errors("entry f (x: [2]f64) : [2]f64 = grad (\\y -> y) x");
    assert!(e.contains("`grad` needs a function returning an f64/f32 scalar, but this one returns [2]f64"), "{e}");
    let e = errors("entry f (x: [2]f64) : [2]f64 = vjp (\\y -> y) x [1.0]");
    assert!(e.contains("the cotangent of `vjp` must have the type of the function's result"), "{e}");
    let e = errors("entry f (x: [2]f64) : [2][2]f64 = hessian (\\y -> y) x");
    assert!(e.contains("`hessian` needs a function returning an f64/f32 scalar"), "{e}");
}

#[test]
fn vjp_nodes_are_expanded_by_the_ad_stage() {
    let p = compile("entry f (x: f64) : (f64, f64) = vjp2 (\\y -> sin y * y) x 2.0");
    let lowered = ir::print::print_module(p.module_at(crate::api::Stage::Lower));
    let expanded = ir::print::print_module(p.module());
    assert!(lowered.contains("vjp ("), "{lowered}");
    assert!(!expanded.contains("vjp ("), "{expanded}");
    ir::verify::verify_module(p.module()).unwrap();
    let v = p.entry("f").unwrap().call(&[Value::F64(0.5)]).unwrap();
    let want = (0.5f64.sin() * 0.5, 2.0 * (0.5f64.cos() * 0.5 + 0.5f64.sin()));
    assert_eq!(v, Value::Tuple(vec![Value::F64(want.0), Value::F64(want.1)]));
}

#[test]
fn jvp_nodes_are_expanded_by_the_ad_stage() {
    let p = compile("entry f (x: f64) : (f64, f64) = jvp2 (\\y -> sin y * y) x 1.0");
    let lowered = ir::print::print_module(p.module_at(crate::api::Stage::Lower));
    let expanded = ir::print::print_module(p.module());
    assert!(lowered.contains("jvp ("), "{lowered}");
    assert!(!expanded.contains("jvp ("), "{expanded}");
    ir::verify::verify_module(p.module_at(crate::api::Stage::Lower)).unwrap();
    let v = p.entry("f").unwrap().call(&[Value::F64(0.5)]).unwrap();
    let want = (0.5f64.sin() * 0.5, 0.5f64.cos() * 0.5 + 0.5f64.sin());
    assert_eq!(v, Value::Tuple(vec![Value::F64(want.0), Value::F64(want.1)]));
}
