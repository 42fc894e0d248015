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
    Value::array(vec![xs.len()], ArrayData::F64(xs.to_vec().into()))
}

/// Every index statement of a block, recursively.
fn indexes(b: &ir::Block, out: &mut Vec<Stmt>) {
    ir::walk::for_each_stmt(b, &mut |s| {
        if matches!(s.expr, Expr::Index { .. }) {
            out.push(s.clone());
        }
    });
}

#[test]
fn for_size_is_inferred_from_indexing() {
    let p = compile("entry f [n][m] (a: [n][m]f64) : [m][n]f64 = for j i. a[i, j]");
    let out = p.entry("f").unwrap().call(&[Value::array(vec![2, 3], ArrayData::F64(vec![1., 2., 3., 4., 5., 6.].into()))]).unwrap();
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

// ---- issue 8: budgets, checked sizes, built-in size checks, messages ----

#[test]
fn line_table_agrees_with_source() {
    let text = "def f x =\n  x + 1\n\u{e9}t\u{e9} \u{2192} y\n\nlast";
    let src = crate::diag::Source::new("t.ard", text);
    let table = super::LineTable::new(text);
    for off in 0..=text.len() + 2 {
        assert_eq!(table.line_col(text, off), src.line_col(off), "offset {off}");
    }
}

#[test]
fn long_call_chain_is_not_called_recursion() {
    let mut src = String::from("def f0 (x: f64) : f64 = x\n");
    for i in 1..=200 {
        src.push_str(&format!("def f{i} (x: f64) : f64 = f{} x\n", i - 1));
    }
    src.push_str("entry main (x: f64) : f64 = f200 x\n");
    let e = errors(&src);
    assert!(e.contains("deeper than 150"), "{e}");
    assert!(e.contains("not recursion"), "{e}");
    assert!(e.contains("`f150` → `f149`"), "{e}");
    assert!(!e.contains("applied to itself is recursion"), "{e}");
    // 150 nested calls are fine
    let mut ok = String::from("def f0 (x: f64) : f64 = x\n");
    for i in 1..=140 {
        ok.push_str(&format!("def f{i} (x: f64) : f64 = f{} x\n", i - 1));
    }
    ok.push_str("entry main (x: f64) : f64 = f140 x\n");
    compile(&ok);
}

#[test]
fn self_application_is_still_called_recursion() {
    let e = errors("entry f (x: f64) : f64 = let w = \\g -> g g in w w x");
    assert!(e.contains("keeps calling itself") && e.contains("recursion"), "{e}");
}

#[test]
fn doubling_calls_hit_the_statement_budget() {
    let mut src = String::from("def f0 (x: f64) : f64 = sin x\n");
    for i in 1..=30 {
        src.push_str(&format!("def f{i} (x: f64) : f64 = f{0} x + f{0} x\n", i - 1));
    }
    src.push_str("entry main (x: f64) : f64 = f30 x\n");
    let t = std::time::Instant::now();
    let e = errors(&src);
    assert!(e.contains("IR statements") && e.contains("call chain") && e.contains("let y = f x in y + y"), "{e}");
    assert!(e.contains("ARDEN_MAX_INLINE_STATEMENTS"), "{e}");
    assert_eq!(e.matches("error").count(), 1, "one message: {e}");
    assert!(t.elapsed().as_secs() < 60, "took {:?}", t.elapsed());
}

#[test]
fn unflatten_sizes_must_multiply_out() {
    let e = errors("entry main [n] (a: [n]f64) : [2][n]f64 = unflatten 2 n a");
    assert!(e.contains("needs an outer axis of 2*n elements, but the array has n"), "{e}");
    assert!(e.contains(":>"), "{e}");
    // with a coercion it compiles, and is checked at run time
    let p = compile("entry main [n] (a: [n]f64) : [2][n]f64 = unflatten 2 n (a :> [2*n]f64)");
    let err = p.entry("main").unwrap().call(&[vec_f64(&[1., 2.])]).unwrap_err();
    assert!(err.to_string().contains("coercion"), "{err}");
    compile("entry main [n][m] (a: [n*m]f64) (b: [n]f64) (c: [m]f64) : [n][m]f64 = unflatten n m a");
    let e = errors("entry main (a: [6]f64) : [2][2]f64 = unflatten 2 2 a");
    assert!(e.contains("outer axis of 4 elements, but the array has 6"), "{e}");
    let e = errors("entry main (a: [6]f64) : [2][3]f64 = unflatten (0 - 2) (0 - 3) a");
    assert!(e.contains("negative"), "{e}");
}

#[test]
fn negative_constant_counts_and_slices_are_compile_errors() {
    assert!(errors("entry main (x: f64) : f64 = sum (replicate (0 - 1) x)").contains("count of `replicate` is negative (-1)"));
    assert!(errors("entry main (x: f64) : i64 = sum (iota (0 - 4))").contains("length given to `iota` is negative (-4)"));
    assert!(errors("entry main (a: [3]f64) : f64 = sum a[2:1]").contains("out of bounds"));
    assert!(errors("entry main (a: [3]f64) : f64 = sum a[0:4]").contains("out of bounds"));
    compile("entry main (a: [3]f64) : f64 = sum a[0:3] + sum a[3:3]");
    assert!(errors("entry main (x: f64) : f64 = sum (for (i < 0 - 2). x)").contains("bound of this `for` index is negative (-2)"));
}

#[test]
fn size_arithmetic_overflow_is_an_error() {
    let e = errors("entry main [n] (a: [n]f64) : [n*4611686018427387904*4]f64 = a");
    assert!(e.contains("overflows i64"), "{e}");
    let e = errors("entry main (a: [2][4611686018427387904]f64) : f64 = sum (flatten a)");
    assert!(e.contains("overflows i64") && e.contains("flatten"), "{e}");
    let e = errors("entry main (a: [9223372036854775807]f64) (b: [1]f64) : f64 = sum (concat a b)");
    assert!(e.contains("overflows i64") && e.contains("concat"), "{e}");
    // ordinary i64 arithmetic that overflows is not a size: it still compiles
    compile("entry main (x: i64) : i64 = x * 4611686018427387904 * 4");
}

#[test]
fn size_polynomials_have_a_budget() {
    let vars: Vec<String> = (0..8).map(|i| format!("a{i}")).collect();
    let sum = format!("({})", vars.join("+"));
    let size = vec![sum; 8].join("*");
    let params: String = vars.iter().map(|v| format!("(x{v}: [{v}]f64) ")).collect();
    let src = format!("entry main [{}] {params}: [{size}]f64 = replicate 3 1.0", vars.join("]["));
    let t = std::time::Instant::now();
    let e = errors(&src);
    assert!(e.contains("size expression too large"), "{e}");
    assert!(t.elapsed().as_secs() < 10, "took {:?}", t.elapsed());
    // sizes computed from i64 values at run time that blow up stay opaque
    compile(
        "entry main (k: i64) : f64 =\n  let a = k + 1 in let b = a * a in let c = b * b in let d = c * c in let e = d * d in let f = e * e in let g = f * f in let h = g * g in sum (replicate h 1.0)",
    );
}

#[test]
fn messages_say_what_the_user_wrote() {
    // a size shown as written, not as its normal form `(d*d - d)/2`
    let e = errors("def tri [d] (x: [d]f64) : [d*(d-1)/2]f64 = replicate (d*(d-1)/2) 0.0\nentry main [d] (x: [d]f64) : [d]f64 = tri x");
    assert!(e.contains("[d*(d-1)/2]f64") && !e.contains("d*d - d"), "{e}");
    // no trivial `n = n` binding in hints
    let e = errors("def g [n] (a: [n]f64) (b: [n]f64) : [n]f64 = a\nentry main [n] (a: [n]f64) (b: [n]f64) : [n+1]f64 = g a b");
    assert!(!e.contains("n = n"), "{e}");
    // map's function given too few arguments
    let e = errors("entry main (a: [3]f64) : [3]f64 = map (\\x y -> x + y) a");
    assert!(e.contains("the function given to `map` takes 2 arguments") && !e.contains("`for` body"), "{e}");
    let e = errors("entry main (a: [3]f64) : [3]f64 = map (\\x -> \\y -> x + y) a");
    assert!(e.contains("returns a function") && !e.contains("`for` body"), "{e}");
    // a user's own `for` still says `for`
    let e = errors("entry main (a: [3]f64) : f64 = let b = for (i < 3). (\\y -> a[i] + y) in 0.0");
    assert!(e.contains("`for` body"), "{e}");
}

#[test]
fn suggestions_and_scopes_scale() {
    // 20,000 names in scope and 300 unknown names: fast, and a close name is still suggested
    let mut src = String::from("entry main (x: f64) : f64 =\n");
    for i in 0..20000 {
        src.push_str(&format!("  let v{i} = x in\n"));
    }
    for i in 0..300 {
        src.push_str(&format!("  let w{i} = zzq{i} in\n"));
    }
    src.push_str("  v19999 + countt\n");
    let t = std::time::Instant::now();
    let e = errors(&src);
    assert!(t.elapsed().as_secs() < 20, "took {:?}", t.elapsed());
    assert!(e.contains("unknown name `zzq0`"), "{e}");
    let e = errors("def count (x: f64) : f64 = x\nentry main (x: f64) : f64 = cuont x");
    assert!(e.contains("did you mean `count`?"), "{e}");
}

/// Issue 24, item 3: `for i. (map sin y)[i] * y[i]` was refused ("`i` is
/// never used directly as an index into an array known outside the loop")
/// because the first array `i` indexed, built inside the body while
/// probing, had a stand-in size; `y[i]` first worked. Every operand order,
/// and arrays derived in other ways, now infer `n` from `y`.
#[test]
fn for_size_is_inferred_past_arrays_built_in_the_body() {
    let y = [0.5, 1.0, 2.0];
    let want: Vec<f64> = y.iter().map(|v: &f64| v.sin() * v).collect();
    for body in ["(map sin y)[i] * y[i]", "y[i] * (map sin y)[i]", "(map sin y)[i] * (map sin y)[i] / sin y[i] * y[i]"] {
        let src = format!("entry f [n] (y: [n]f64) : [n]f64 = for i. {body}");
        let out = compile(&src).entry("f").unwrap().call(&[vec_f64(&y)]).unwrap();
        let Value::Array(a) = out else { panic!("{body}: not an array") };
        let got: Vec<f64> = (0..3)
            .map(|k| match a.data.get(k) {
                Value::F64(x) => x,
                v => panic!("{v:?}"),
            })
            .collect();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{body}: {got:?} vs {want:?}");
        }
    }
    for body in ["(reverse y)[i] + y[i]", "y[i] + (reverse y)[i]", "(for j. y[j] * 2.0)[i] + y[i]", "y[i] + (concat y y)[i]"] {
        compile(&format!("entry f [n] (y: [n]f64) : [n]f64 = for i. {body}"));
    }
    // Only arrays built in the body: still an error, and it still says why.
    let e = errors("entry f [n] (y: [n]f64) : f64 = sum (for i. (map sin y)[i])");
    assert!(e.contains("cannot infer how many values `i` ranges over"), "{e}");
}
