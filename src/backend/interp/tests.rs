//! Unit tests: hand-built IR for every expression, every primitive, the
//! operation counts, every run-time error and empty arrays.

use super::*;
use crate::ir::verify::testkit::*;
use crate::ir::verify::verify_function;
use crate::ir::{Binder, Prim, Scalar, Stmt};

// ---- helpers ---------------------------------------------------------------

fn fa(xs: &[f64]) -> Value {
    Value::array(vec![xs.len()], ArrayData::F64(xs.to_vec().into()))
}
fn fm(r: usize, c: usize, xs: &[f64]) -> Value {
    Value::array(vec![r, c], ArrayData::F64(xs.to_vec().into()))
}
fn ia(xs: &[i64]) -> Value {
    Value::array(vec![xs.len()], ArrayData::I64(xs.to_vec().into()))
}
fn at_loc(mut s: Stmt) -> Stmt {
    s.loc = Some(loc());
    s
}
fn f64v(n: &[Size]) -> Type {
    arr(Scalar::F64, n)
}

/// A function under construction: size parameters, parameters with their
/// argument values, and top-level statements.
#[derive(Default)]
struct Prog {
    nm: Names,
    sizes: Vec<(String, VarId, i64)>,
    params: Vec<(Binder, Value)>,
    stmts: Vec<Stmt>,
}

impl Prog {
    fn var(&mut self, name: &str) -> VarId {
        self.nm.var(name)
    }
    fn size(&mut self, name: &str, val: i64) -> VarId {
        let v = self.var(name);
        self.sizes.push((name.into(), v, val));
        v
    }
    fn param(&mut self, name: &str, ty: Type, val: Value) -> VarId {
        let v = self.var(name);
        self.params.push((bd(v, ty), val));
        v
    }
    fn let1(&mut self, name: &str, ty: Type, e: Expr) -> VarId {
        let v = self.var(name);
        self.stmts.push(let1(v, ty, e));
        v
    }
    fn let_at(&mut self, name: &str, ty: Type, e: Expr) -> VarId {
        let v = self.var(name);
        self.stmts.push(at_loc(let1(v, ty, e)));
        v
    }

    fn build(self, result: Vec<Atom>) -> (Function, Vec<i64>, Vec<Value>) {
        let mut tys: Vec<Option<Type>> = vec![None; self.nm.0.len()];
        for (_, v, _) in &self.sizes {
            tys[v.0 as usize] = Some(i64t());
        }
        for (b, _) in &self.params {
            tys[b.var.0 as usize] = Some(b.ty.clone());
        }
        for s in &self.stmts {
            for b in &s.binds {
                tys[b.var.0 as usize] = Some(b.ty.clone());
            }
        }
        let rtys = result
            .iter()
            .map(|a| match a {
                Atom::Var(v) => tys[v.0 as usize].clone().expect("result bound at top level"),
                Atom::Lit(l) => Type::scalar(l.scalar()),
            })
            .collect();
        let sizes = self.sizes.iter().map(|s| s.2).collect();
        let args = self.params.iter().map(|p| p.1.clone()).collect();
        let f = func(
            "t",
            self.nm,
            self.sizes.iter().map(|(n, v, _)| (n.as_str(), *v)).collect(),
            self.params.into_iter().map(|p| p.0).collect(),
            rtys,
            block(self.stmts, result),
        );
        (f, sizes, args)
    }

    /// Verify, run, and return the results and counts.
    fn run(self, result: Vec<Atom>) -> (Result<Vec<Value>, RuntimeError>, OpCounts) {
        let (f, sizes, args) = self.build(result);
        if let Err(e) = verify_function(&f) {
            panic!("test IR does not verify: {e}");
        }
        let mut c = OpCounts::default();
        let r = run(&f, &sizes, &args, &mut c);
        (r, c)
    }

    fn ok(self, result: Vec<Atom>) -> Vec<Value> {
        match self.run(result).0 {
            Ok(v) => v,
            Err(e) => panic!("unexpected error: {}", e.message),
        }
    }

    fn err(self, result: Vec<Atom>) -> String {
        match self.run(result).0 {
            Ok(v) => panic!("expected an error, got {v:?}"),
            Err(e) => e.message,
        }
    }
}

fn counts(arith: u64, reads: u64, writes: u64) -> OpCounts {
    OpCounts { arith, reads, writes, stored: 0 }
}

fn run_fn(f: &Function, sizes: &[i64], args: &[Value]) -> (Result<Vec<Value>, RuntimeError>, OpCounts) {
    verify_function(f).unwrap();
    let mut c = OpCounts::default();
    let r = run(f, sizes, args, &mut c);
    (r, c)
}

// ---- whole functions from the IR test kit ---------------------------------

#[test]
fn dot_product_and_counts() {
    let f = dot();
    let (r, c) = run_fn(&f, &[3], &[fa(&[1.0, 2.0, 3.0]), fa(&[4.0, 5.0, 6.0])]);
    assert_eq!(r.unwrap(), vec![Value::F64(32.0)]);
    // for: n index reads of a and of b (2n reads), n muls, n writes of the
    // product array; sum: n additions and n reads.
    assert_eq!(c, counts(2 * 3, 3 * 3, 3));
    // empty: the sum of nothing is the neutral element
    let (r, c) = run_fn(&f, &[0], &[fa(&[]), fa(&[])]);
    assert_eq!(r.unwrap(), vec![Value::F64(0.0)]);
    assert_eq!(c, OpCounts::default());
}

#[test]
fn outer_product_and_checked_index() {
    let f = outer();
    let x = fa(&[1.0, 2.0]);
    let y = fa(&[1.0, 10.0, 100.0]);
    let (r, c) = run_fn(&f, &[2, 3], &[x.clone(), y.clone(), Value::I64(1)]);
    assert_eq!(r.unwrap(), vec![fm(2, 3, &[2.0, 20.0, 200.0, 2.0, 20.0, 200.0])]);
    // outer loop: 2 reads of x[k] + inner: 3 reads, 3 muls, 3 writes each;
    // the inner `for` builds its row in place, so the result adds no writes
    assert_eq!(c, counts(6, 2 + 6, 6));
    let (r, _) = run_fn(&f, &[2, 3], &[x.clone(), y.clone(), Value::I64(7)]);
    assert_eq!(r.unwrap_err().message, "index out of bounds at t.ard:1:1: index 7 into an axis of size 2");
    let (r, _) = run_fn(&f, &[2, 3], &[x, y, Value::I64(-1)]);
    assert_eq!(r.unwrap_err().message, "index out of bounds at t.ard:1:1: index -1 into an axis of size 2");
    // n = 0: the checked index is never reached, the result is [0][3]
    let (r, _) = run_fn(&f, &[0, 3], &[fa(&[]), fa(&[1.0, 2.0, 3.0]), Value::I64(7)]);
    assert_eq!(r.unwrap(), vec![Value::array(vec![0, 3], ArrayData::F64(vec![].into()))]);
}

#[test]
fn loops_if_lambda_reduce_scatter() {
    let f = misc();
    let xs = fa(&[3.0, 9.0, 4.0]);
    let is = ia(&[2, 0, 2]);
    let (r, c) = run_fn(&f, &[3], &[xs, is]);
    // acc = 16, halved while > 1: 16 -> 8 -> 4 -> 2 -> 1; cnt = 3 > 0 so r = 1;
    // best = 9 at index 0; tot = 10; scatter: [9, 0, 7]
    assert_eq!(r.unwrap(), vec![Value::F64(10.0), Value::I64(0), fa(&[9.0, 0.0, 7.0])]);
    // arith: counted loop 3*2, while 5 conds + 4 divs, cond of if 1, lambda
    // 3*3, scatter 3 adds, tot 1 = 29. reads: loop 3, lambda 3+3,
    // scatter 3 idx + 3 vals + 3 dest = 18. writes: replicate 3, scatter 3.
    assert_eq!(c, counts(6 + 9 + 1 + 9 + 3 + 1, 3 + 6 + 9, 3 + 3));
    // empty: loop runs zero times, while does not run (0 > 1 false), the
    // lambda reduce returns its neutral elements
    let (r, _) = run_fn(&f, &[0], &[fa(&[]), ia(&[])]);
    assert_eq!(r.unwrap(), vec![Value::F64(f64::NEG_INFINITY), Value::I64(-1), fa(&[])]);
}

#[test]
fn scatter_add_out_of_range() {
    let f = misc();
    let (r, _) = run_fn(&f, &[3], &[fa(&[1.0, 2.0, 3.0]), ia(&[0, 5, 1])]);
    assert_eq!(r.unwrap_err().message, "scatter_add index 5 out of range for size 3 at t.ard:1:1");
    let (r, _) = run_fn(&f, &[3], &[fa(&[1.0, 2.0, 3.0]), ia(&[0, -1, 1])]);
    assert_eq!(r.unwrap_err().message, "scatter_add index -1 out of range for size 3 at t.ard:1:1");
}

#[test]
fn shapes_function_errors_in_order() {
    let f = shapes();
    let a = fm(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    // k = n: everything succeeds up to the `fail`
    let (r, _) = run_fn(&f, &[2], &[a.clone(), Value::I64(2)]);
    assert_eq!(r.unwrap_err().message, "a \"bad\" size at t.ard:1:1");
    // k < n: the slice is fine but the coercion to [n][3] fails
    let (r, _) = run_fn(&f, &[2], &[a.clone(), Value::I64(1)]);
    assert_eq!(r.unwrap_err().message, "size coercion failed at t.ard:1:1: value has shape [1][3] but [2][3] was required");
    // k > n: the checked slice fails
    let (r, _) = run_fn(&f, &[2], &[a, Value::I64(3)]);
    assert_eq!(r.unwrap_err().message, "slice [0:3] out of bounds at t.ard:1:1 for an axis of size 2");
}

// ---- primitives ------------------------------------------------------------

fn p(op: Prim, args: &[Value]) -> Value {
    prim::eval_prim(op, args, &None).unwrap_or_else(|e| panic!("{op:?}: {}", e.message))
}

fn pf(op: Prim, args: &[f64]) -> f64 {
    match p(op, &args.iter().map(|&x| Value::F64(x)).collect::<Vec<_>>()) {
        Value::F64(x) => x,
        v => panic!("{op:?} gave {v:?}"),
    }
}

#[test]
fn every_float_prim() {
    use Prim::*;
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
    let cases: &[(Prim, &[f64], f64)] = &[
        (Add, &[1.5, 2.0], 3.5),
        (Sub, &[1.5, 2.0], -0.5),
        (Mul, &[1.5, 2.0], 3.0),
        (Div, &[1.0, 4.0], 0.25),
        (Rem, &[7.5, 2.0], 1.5),
        (Rem, &[-7.5, 2.0], -1.5),
        (Neg, &[2.0], -2.0),
        (Abs, &[-2.0], 2.0),
        (Min, &[1.0, -1.0], -1.0),
        (Max, &[1.0, -1.0], 1.0),
        (Pow, &[2.0, 10.0], 1024.0),
        (Exp, &[1.0], std::f64::consts::E),
        (Log, &[std::f64::consts::E], 1.0),
        (Sqrt, &[9.0], 3.0),
        (Sin, &[0.5], 0.479_425_538_604_203),
        (Cos, &[0.5], 0.877_582_561_890_372_8),
        (Tan, &[0.5], 0.546_302_489_843_790_5),
        (Tanh, &[0.5], 0.462_117_157_260_009_76),
        (Asin, &[0.5], std::f64::consts::FRAC_PI_6),
        (Acos, &[0.5], std::f64::consts::FRAC_PI_3),
        (Atan, &[1.0], std::f64::consts::FRAC_PI_4),
        (Sinh, &[1.0], 1.175_201_193_643_801_4),
        (Cosh, &[1.0], 1.543_080_634_815_243_7),
        (Atan2, &[1.0, -1.0], 3.0 * std::f64::consts::FRAC_PI_4),
        (Floor, &[-1.5], -2.0),
        (Ceil, &[-1.5], -1.0),
        (Lgamma, &[5.0], 24.0f64.ln()),
        (Erf, &[1.0], 0.842_700_792_949_714_9),
        (Sigmoid, &[0.0], 0.5),
        (Sigmoid, &[2.0], 0.880_797_077_977_882_3),
        (Sigmoid, &[-2.0], 0.119_202_922_022_117_58),
        (Sigmoid, &[-1000.0], 0.0),
        (Sigmoid, &[1000.0], 1.0),
        (Relu, &[-3.0], 0.0),
        (Relu, &[3.0], 3.0),
    ];
    for (op, args, want) in cases {
        let got = pf(*op, args);
        assert!(close(got, *want), "{op:?}{args:?} = {got}, want {want}");
    }
    // NaN propagation in min/max/relu, IEEE elsewhere
    assert!(pf(Min, &[f64::NAN, 1.0]).is_nan());
    assert!(pf(Min, &[1.0, f64::NAN]).is_nan());
    assert!(pf(Max, &[1.0, f64::NAN]).is_nan());
    assert!(pf(Max, &[f64::NAN, 1.0]).is_nan());
    assert!(pf(Relu, &[f64::NAN]).is_nan());
    assert!(pf(Sigmoid, &[f64::NAN]).is_nan());
    assert_eq!(pf(Div, &[1.0, 0.0]), f64::INFINITY);
    assert!(pf(Log, &[-1.0]).is_nan());
    assert_eq!(p(IsNan, &[Value::F64(f64::NAN)]), Value::Bool(true));
    assert_eq!(p(IsNan, &[Value::F32(1.0)]), Value::Bool(false));
    // f32 operations stay in f32
    assert_eq!(p(Add, &[Value::F32(0.1), Value::F32(0.2)]), Value::F32(0.1f32 + 0.2f32));
    assert_eq!(p(Exp, &[Value::F32(1.0)]), Value::F32(1.0f32.exp()));
    assert_eq!(p(Lgamma, &[Value::F32(5.0)]), Value::F32(24.0f64.ln() as f32));
    assert_eq!(p(Erf, &[Value::F32(0.0)]), Value::F32(0.0));
    assert_eq!(p(Max, &[Value::F32(1.0), Value::F32(2.0)]), Value::F32(2.0));
}

#[test]
fn every_int_bool_prim() {
    use Prim::*;
    let (i, j) = (Value::I64, Value::I32);
    assert_eq!(p(Add, &[i(i64::MAX), i(1)]), i(i64::MIN));
    assert_eq!(p(Sub, &[j(i32::MIN), j(1)]), j(i32::MAX));
    assert_eq!(p(Mul, &[i(1 << 62), i(4)]), i(0));
    assert_eq!(p(Div, &[i(-7), i(2)]), i(-3));
    assert_eq!(p(Rem, &[i(-7), i(2)]), i(-1));
    assert_eq!(p(Div, &[i(i64::MIN), i(-1)]), i(i64::MIN));
    assert_eq!(p(Rem, &[j(i32::MIN), j(-1)]), j(0));
    assert_eq!(p(Div, &[j(7), j(2)]), j(3));
    assert_eq!(p(Neg, &[i(i64::MIN)]), i(i64::MIN));
    assert_eq!(p(Abs, &[j(-4)]), j(4));
    assert_eq!(p(Min, &[i(3), i(-4)]), i(-4));
    assert_eq!(p(Max, &[j(3), j(-4)]), j(3));
    assert_eq!(p(Min, &[Value::Bool(true), Value::Bool(false)]), Value::Bool(false));
    assert_eq!(p(Max, &[Value::Bool(true), Value::Bool(false)]), Value::Bool(true));
    // comparisons on every type
    let t = Value::Bool(true);
    let f = Value::Bool(false);
    assert_eq!(p(Eq, &[i(1), i(1)]), t);
    assert_eq!(p(Ne, &[j(1), j(1)]), f);
    assert_eq!(p(Lt, &[Value::F64(1.0), Value::F64(2.0)]), t);
    assert_eq!(p(Le, &[Value::F32(2.0), Value::F32(2.0)]), t);
    assert_eq!(p(Gt, &[Value::Bool(true), Value::Bool(false)]), t);
    assert_eq!(p(Ge, &[i(1), i(2)]), f);
    assert_eq!(p(Eq, &[Value::F64(f64::NAN), Value::F64(f64::NAN)]), f);
    assert_eq!(p(Ne, &[Value::F64(f64::NAN), Value::F64(f64::NAN)]), t);
    assert_eq!(p(And, &[t.clone(), f.clone()]), f);
    assert_eq!(p(Or, &[t.clone(), f.clone()]), t);
    assert_eq!(p(Not, std::slice::from_ref(&f)), t);
    assert_eq!(p(Select, &[t.clone(), i(1), i(2)]), i(1));
    assert_eq!(p(Select, &[f.clone(), Value::F64(1.0), Value::F64(2.0)]), Value::F64(2.0));
    // conversions
    let cv = |s: Scalar, x: Value| p(Convert(s), &[x]);
    assert_eq!(cv(Scalar::I64, Value::F64(-2.7)), i(-2));
    assert_eq!(cv(Scalar::I64, Value::F64(1e300)), i(i64::MAX));
    assert_eq!(cv(Scalar::I32, Value::F64(f64::NAN)), j(0));
    assert_eq!(cv(Scalar::I32, Value::F64(-1e10)), j(i32::MIN));
    assert_eq!(cv(Scalar::I32, i(1 << 32 | 5)), j(5));
    assert_eq!(cv(Scalar::F64, i(3)), Value::F64(3.0));
    assert_eq!(cv(Scalar::F32, Value::F64(0.1)), Value::F32(0.1));
    assert_eq!(cv(Scalar::F64, t.clone()), Value::F64(1.0));
    assert_eq!(cv(Scalar::I64, t.clone()), i(1));
    assert_eq!(cv(Scalar::I32, f.clone()), j(0));
    assert_eq!(cv(Scalar::Bool, i(-3)), t);
    assert_eq!(cv(Scalar::Bool, j(0)), f);
    assert_eq!(cv(Scalar::Bool, Value::F64(0.0)), f);
    assert_eq!(cv(Scalar::I64, j(-9)), i(-9));
    // ill-typed operands are internal errors, not panics
    let e = prim::eval_prim(Add, &[i(1), Value::F64(1.0)], &None).unwrap_err();
    assert!(e.message.starts_with("internal:"), "{}", e.message);
    let e = prim::eval_prim(Exp, &[i(1)], &None).unwrap_err();
    assert!(e.message.starts_with("internal:"), "{}", e.message);
    let e = prim::eval_prim(Add, &[i(1)], &None).unwrap_err();
    assert!(e.message.starts_with("internal:"), "{}", e.message);
}

#[test]
fn integer_division_by_zero() {
    for op in [Prim::Div, Prim::Rem] {
        let mut g = Prog::default();
        let x = g.param("x", i64t(), Value::I64(7));
        let y = g.param("y", i64t(), Value::I64(0));
        let q = g.let_at("q", i64t(), prim(op, vec![v(x), v(y)]));
        assert_eq!(g.err(vec![v(q)]), "integer division by zero at t.ard:1:1");
    }
    // without a location
    let mut g = Prog::default();
    let x = g.param("x", sc(Scalar::I32), Value::I32(7));
    let q = g.let1("q", sc(Scalar::I32), prim(Prim::Div, vec![v(x), Atom::Lit(Lit::I32(0))]));
    assert_eq!(g.err(vec![v(q)]), "integer division by zero");
}

#[test]
fn prims_are_counted() {
    let mut g = Prog::default();
    let x = g.param("x", f64t(), Value::F64(2.0));
    let a = g.let1("a", f64t(), prim(Prim::Mul, vec![v(x), v(x)]));
    let b = g.let1("b", boolt(), prim(Prim::Gt, vec![v(a), f(3.0)]));
    let c = g.let1("c", f64t(), prim(Prim::Select, vec![v(b), v(a), v(x)]));
    let d = g.let1("d", i64t(), prim(Prim::Convert(Scalar::I64), vec![v(c)]));
    let e = g.let1("e", i64t(), Expr::Atom(v(d)));
    let (r, k) = g.run(vec![v(e), v(b)]);
    assert_eq!(r.unwrap(), vec![Value::I64(4), Value::Bool(true)]);
    assert_eq!(k, counts(4, 0, 0));
}

// ---- array expressions -----------------------------------------------------

#[test]
fn index_rows_and_scalars() {
    let mut g = Prog::default();
    let a = g.param("a", f64v(&[c(2), c(3)]), fm(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let r = g.let1("r", f64v(&[c(3)]), Expr::Index { arr: v(a), idx: vec![i(1)], checks: vec![Some(loc())] });
    let x = g.let1("x", f64t(), Expr::Index { arr: v(a), idx: vec![i(1), Atom::Lit(Lit::I32(2))], checks: vec![None, Some(loc())] });
    let (res, k) = g.run(vec![v(r), v(x)]);
    assert_eq!(res.unwrap(), vec![fa(&[4.0, 5.0, 6.0]), Value::F64(6.0)]);
    // a row of 3 is 3 reads and 3 writes; a scalar is one read
    assert_eq!(k, counts(0, 4, 3));

    // checked inner axis
    let mut g = Prog::default();
    let a = g.param("a", f64v(&[c(2), c(3)]), fm(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let x = g.let1("x", f64t(), Expr::Index { arr: v(a), idx: vec![i(0), i(3)], checks: vec![None, Some(loc())] });
    assert_eq!(g.err(vec![v(x)]), "index out of bounds at t.ard:1:1: index 3 into an axis of size 3");

    // an unchecked index that is out of bounds is an internal error, not a panic
    let mut g = Prog::default();
    let a = g.param("a", f64v(&[c(2)]), fa(&[1.0, 2.0]));
    let x = g.let1("x", f64t(), Expr::Index { arr: v(a), idx: vec![i(2)], checks: vec![None] });
    assert!(g.err(vec![v(x)]).starts_with("internal: unchecked index out of bounds"));
}

#[test]
fn slices() {
    let mut g = Prog::default();
    let n = g.size("n", 4);
    let a = g.param("a", f64v(&[sz(n), c(2)]), fm(4, 2, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]));
    let k = g.var("k");
    let s = g.let1("s", f64v(&[sz(k), c(2)]), Expr::Slice { arr: v(a), lo: i(1), hi: i(3), check: Some(loc()) });
    let e = g.var("e");
    let e2 = g.let1("e", f64v(&[sz(e), c(2)]), Expr::Slice { arr: v(a), lo: i(4), hi: i(4), check: Some(loc()) });
    let _ = (k, e);
    // binder sizes need not be in scope for the interpreter; the verifier wants them
    let (f, sizes, args) = g.build(vec![v(s), v(e2)]);
    let mut cnt = OpCounts::default();
    let r = run(&f, &sizes, &args, &mut cnt).unwrap();
    assert_eq!(r, vec![fm(2, 2, &[2.0, 3.0, 4.0, 5.0]), Value::array(vec![0, 2], ArrayData::F64(vec![].into()))]);
    assert_eq!(cnt, counts(0, 4, 4));

    for (lo, hi) in [(-1, 2), (3, 2), (0, 5)] {
        let mut g = Prog::default();
        let a = g.param("a", f64v(&[c(4)]), fa(&[0.0, 1.0, 2.0, 3.0]));
        let s = g.let1("s", f64v(&[c(4)]), Expr::Slice { arr: v(a), lo: i(lo), hi: i(hi), check: Some(loc()) });
        let (f, sizes, args) = g.build(vec![v(s)]);
        let e = run(&f, &sizes, &args, &mut OpCounts::default()).unwrap_err();
        assert_eq!(e.message, format!("slice [{lo}:{hi}] out of bounds at t.ard:1:1 for an axis of size 4"));
    }
}

#[test]
fn for_builds_arrays_of_rows_and_handles_empty() {
    // for i < n: (i, [i, i]) -> [n]i64 and [n][2]i64
    for n_val in [3, 0] {
        let mut g = Prog::default();
        let n = g.size("n", n_val);
        let iv = g.var("i");
        let row = g.var("row");
        let body = block(vec![let1(row, arr(Scalar::I64, &[c(2)]), Expr::Replicate { n: i(2), val: v(iv) })], vec![v(iv), v(row)]);
        let (xs, ys) = (g.var("xs"), g.var("ys"));
        g.stmts.push(st(vec![bd(xs, arr(Scalar::I64, &[sz(n)])), bd(ys, arr(Scalar::I64, &[sz(n), c(2)]))], Expr::For { ivar: iv, size: sz(n), body }));
        let (r, k) = g.run(vec![v(xs), v(ys)]);
        let nn = n_val as usize;
        let ys_data: Vec<i64> = (0..n_val).flat_map(|x| [x, x]).collect();
        assert_eq!(r.unwrap(), vec![Value::array(vec![nn], ArrayData::I64((0..n_val).collect())), Value::array(vec![nn, 2], ArrayData::I64(ys_data.into())),]);
        // replicate writes 2 per iteration, the for writes n + 2n
        assert_eq!(k, counts(0, 0, 2 * n_val as u64 + 3 * n_val as u64));
    }
}

#[test]
fn negative_for_size() {
    let mut g = Prog::default();
    let n = g.size("n", 4);
    let iv = g.var("i");
    let xs = g.let_at("xs", arr(Scalar::I64, &[sz(n).sub(&c(5))]), Expr::For { ivar: iv, size: sz(n).sub(&c(5)), body: block(vec![], vec![v(iv)]) });
    assert_eq!(g.err(vec![v(xs)]), "negative size -1 in a `for` at t.ard:1:1");
}

#[test]
fn builtin_reductions_and_scans() {
    let m = fm(3, 2, &[1.0, 5.0, 4.0, 2.0, 3.0, f64::NAN]);
    let mut g = Prog::default();
    let a = g.param("a", f64v(&[c(3), c(2)]), m);
    let red = |op: ReduceOp, ne: f64| Expr::Reduce { op, ne: vec![f(ne)], arrs: vec![v(a)] };
    let s = g.let1("s", f64v(&[c(2)]), red(ReduceOp::Add, 0.0));
    let p = g.let1("p", f64v(&[c(2)]), red(ReduceOp::Mul, 1.0));
    let mx = g.let1("mx", f64v(&[c(2)]), red(ReduceOp::Max, f64::NEG_INFINITY));
    let mn = g.let1("mn", f64v(&[c(2)]), red(ReduceOp::Min, f64::INFINITY));
    let sc_ = g.let1("sc", f64v(&[c(3), c(2)]), Expr::Scan { op: ReduceOp::Add, ne: vec![f(0.0)], arrs: vec![v(a)] });
    let (r, k) = g.run(vec![v(s), v(p), v(mx), v(mn), v(sc_)]);
    let r = r.unwrap();
    let get = |x: &Value| match x {
        Value::Array(a) => match &a.data {
            ArrayData::F64(d) => d.clone(),
            _ => panic!(),
        },
        _ => panic!(),
    };
    assert_eq!(get(&r[0])[0], 8.0);
    assert!(get(&r[0])[1].is_nan());
    assert_eq!(get(&r[1])[0], 12.0);
    assert_eq!(get(&r[2])[0], 4.0);
    assert!(get(&r[2])[1].is_nan());
    assert_eq!(get(&r[3])[0], 1.0);
    assert!(get(&r[3])[1].is_nan());
    let scan = get(&r[4]);
    assert_eq!(&scan[..5], &[1.0, 5.0, 5.0, 7.0, 8.0]);
    assert!(scan[5].is_nan());
    // 4 reductions of 6 elements (6 arith, 6 reads, 2 writes each), one scan (6, 6, 6)
    assert_eq!(k, counts(5 * 6, 5 * 6, 4 * 2 + 6));

    // 1-d integer reductions give scalars; empty ones give the neutral element
    for (xs, sum, mx) in [(vec![3i64, -1, 7], 9i64, 7i64), (vec![], 0, i64::MIN)] {
        let mut g = Prog::default();
        let n = g.size("n", xs.len() as i64);
        let a = g.param("a", arr(Scalar::I64, &[sz(n)]), ia(&xs));
        let s = g.let1("s", i64t(), Expr::Reduce { op: ReduceOp::Add, ne: vec![i(0)], arrs: vec![v(a)] });
        let m = g.let1("m", i64t(), Expr::Reduce { op: ReduceOp::Max, ne: vec![i(i64::MIN)], arrs: vec![v(a)] });
        let sc_ = g.let1("sc", arr(Scalar::I64, &[sz(n)]), Expr::Scan { op: ReduceOp::Min, ne: vec![i(i64::MAX)], arrs: vec![v(a)] });
        let r = g.ok(vec![v(s), v(m), v(sc_)]);
        let mins: Vec<i64> = xs
            .iter()
            .scan(i64::MAX, |acc, &x| {
                *acc = (*acc).min(x);
                Some(*acc)
            })
            .collect();
        assert_eq!(r, vec![Value::I64(sum), Value::I64(mx), ia(&mins)]);
    }
}

#[test]
fn lambda_scan_over_pairs() {
    // running (sum, count of positives) over (xs, bs)
    let mut g = Prog::default();
    let n = g.size("n", 4);
    let xs = g.param("xs", f64v(&[sz(n)]), fa(&[1.0, -2.0, 3.0, 4.0]));
    let ks = g.param("ks", arr(Scalar::I64, &[sz(n)]), ia(&[1, 0, 1, 1]));
    let (a1, a2, e1, e2, s1, s2) = (g.var("a1"), g.var("a2"), g.var("e1"), g.var("e2"), g.var("s1"), g.var("s2"));
    let lam = Lambda {
        params: vec![bd(a1, f64t()), bd(a2, i64t()), bd(e1, f64t()), bd(e2, i64t())],
        body: block(vec![let1(s1, f64t(), prim(Prim::Add, vec![v(a1), v(e1)])), let1(s2, i64t(), prim(Prim::Add, vec![v(a2), v(e2)]))], vec![v(s1), v(s2)]),
    };
    let (o1, o2) = (g.var("o1"), g.var("o2"));
    g.stmts.push(st(
        vec![bd(o1, f64v(&[sz(n)])), bd(o2, arr(Scalar::I64, &[sz(n)]))],
        Expr::Scan { op: ReduceOp::Lambda(lam), ne: vec![f(0.0), i(0)], arrs: vec![v(xs), v(ks)] },
    ));
    let (r, k) = g.run(vec![v(o1), v(o2)]);
    assert_eq!(r.unwrap(), vec![fa(&[1.0, -1.0, 2.0, 6.0]), ia(&[1, 1, 2, 3])]);
    // the body does 2 adds per element; 8 elements read; 8 written
    assert_eq!(k, counts(8, 8, 8));
}

#[test]
fn lambda_reduce_over_rows() {
    // elementwise max of rows with a lambda over [3] rows (the rows are arrays)
    let mut g = Prog::default();
    let a = g.param("a", f64v(&[c(2), c(3)]), fm(2, 3, &[1.0, 9.0, 3.0, 4.0, 5.0, 6.0]));
    let z = g.let1("z", f64v(&[c(3)]), Expr::Replicate { n: i(3), val: f(0.0) });
    let (acc, el, j, x, y, m, out) = (g.var("acc"), g.var("el"), g.var("j"), g.var("x"), g.var("y"), g.var("m"), g.var("out"));
    let body = block(
        vec![
            let1(x, f64t(), Expr::Index { arr: v(acc), idx: vec![v(j)], checks: vec![None] }),
            let1(y, f64t(), Expr::Index { arr: v(el), idx: vec![v(j)], checks: vec![None] }),
            let1(m, f64t(), prim(Prim::Max, vec![v(x), v(y)])),
        ],
        vec![v(m)],
    );
    let lam = Lambda {
        params: vec![bd(acc, f64v(&[c(3)])), bd(el, f64v(&[c(3)]))],
        body: block(vec![let1(out, f64v(&[c(3)]), Expr::For { ivar: j, size: c(3), body })], vec![v(out)]),
    };
    let r = g.let1("r", f64v(&[c(3)]), Expr::Reduce { op: ReduceOp::Lambda(lam), ne: vec![v(z)], arrs: vec![v(a)] });
    let (res, _) = g.run(vec![v(r)]);
    assert_eq!(res.unwrap(), vec![fa(&[4.0, 9.0, 6.0])]);
}

#[test]
fn argmax_argmin() {
    let mut g = Prog::default();
    let a = g.param("a", f64v(&[c(5)]), fa(&[1.0, 7.0, -2.0, 7.0, -2.0]));
    let mx = g.let1("mx", i64t(), Expr::ArgExt { max: true, arr: v(a) });
    let mn = g.let1("mn", i64t(), Expr::ArgExt { max: false, arr: v(a) });
    let (r, k) = g.run(vec![v(mx), v(mn)]);
    assert_eq!(r.unwrap(), vec![Value::I64(1), Value::I64(2)]);
    assert_eq!(k, counts(8, 10, 0));
    // NaN wins
    let mut g = Prog::default();
    let a = g.param("a", f64v(&[c(3)]), fa(&[1.0, f64::NAN, 9.0]));
    let mx = g.let1("mx", i64t(), Expr::ArgExt { max: true, arr: v(a) });
    assert_eq!(g.ok(vec![v(mx)]), vec![Value::I64(1)]);
    // empty
    let mut g = Prog::default();
    let a = g.param("a", f64v(&[c(0)]), fa(&[]));
    let mx = g.let_at("mx", i64t(), Expr::ArgExt { max: true, arr: v(a) });
    assert_eq!(g.err(vec![v(mx)]), "argmax of an empty array at t.ard:1:1");
    let mut g = Prog::default();
    let a = g.param("a", f64v(&[c(0)]), fa(&[]));
    let mn = g.let_at("mn", i64t(), Expr::ArgExt { max: false, arr: v(a) });
    assert_eq!(g.err(vec![v(mn)]), "argmin of an empty array at t.ard:1:1");
}

#[test]
fn loops_count_and_while() {
    // factorial by a counted loop; a negative count runs zero times
    for (n, want) in [(5, 120), (0, 1), (-3, 1)] {
        let mut g = Prog::default();
        let nn = g.param("n", i64t(), Value::I64(n));
        let (acc, iv, i1, acc2, out) = (g.var("acc"), g.var("i"), g.var("i1"), g.var("acc2"), g.var("out"));
        g.stmts.push(let1(
            out,
            i64t(),
            Expr::Loop {
                params: vec![bd(acc, i64t())],
                init: vec![i(1)],
                kind: LoopKind::Count { ivar: iv, n: v(nn), down: false },
                body: block(
                    vec![let1(i1, i64t(), prim(Prim::Add, vec![v(iv), i(1)])), let1(acc2, i64t(), prim(Prim::Mul, vec![v(acc), v(i1)]))],
                    vec![v(acc2)],
                ),
            },
        ));
        let (r, k) = g.run(vec![v(out)]);
        assert_eq!(r.unwrap(), vec![Value::I64(want)]);
        assert_eq!(k, counts(2 * n.max(0) as u64, 0, 0));
    }
    // collatz steps of 6 with a while loop carrying two values
    let mut g = Prog::default();
    let (x, st_, c1, ev, h, t3, t31, nx, s1, ox, os) =
        (g.var("x"), g.var("st"), g.var("c"), g.var("ev"), g.var("h"), g.var("t3"), g.var("t31"), g.var("nx"), g.var("s1"), g.var("ox"), g.var("os"));
    let r2 = g.var("r2");
    let cond = block(vec![let1(c1, boolt(), prim(Prim::Ne, vec![v(x), i(1)]))], vec![v(c1)]);
    let body = block(
        vec![
            let1(r2, i64t(), prim(Prim::Rem, vec![v(x), i(2)])),
            let1(ev, boolt(), prim(Prim::Eq, vec![v(r2), i(0)])),
            let1(h, i64t(), prim(Prim::Div, vec![v(x), i(2)])),
            let1(t3, i64t(), prim(Prim::Mul, vec![v(x), i(3)])),
            let1(t31, i64t(), prim(Prim::Add, vec![v(t3), i(1)])),
            let1(nx, i64t(), prim(Prim::Select, vec![v(ev), v(h), v(t31)])),
            let1(s1, i64t(), prim(Prim::Add, vec![v(st_), i(1)])),
        ],
        vec![v(nx), v(s1)],
    );
    g.stmts.push(st(
        vec![bd(ox, i64t()), bd(os, i64t())],
        Expr::Loop { params: vec![bd(x, i64t()), bd(st_, i64t())], init: vec![i(6), i(0)], kind: LoopKind::While { cond }, body },
    ));
    // 6 3 10 5 16 8 4 2 1: 8 steps, 9 conditions
    let (r, k) = g.run(vec![v(ox), v(os)]);
    assert_eq!(r.unwrap(), vec![Value::I64(1), Value::I64(8)]);
    assert_eq!(k, counts(9 + 8 * 7, 0, 0));
}

#[test]
fn if_evaluates_only_the_taken_branch() {
    for (b, want) in [(true, 1), (false, 2)] {
        let mut g = Prog::default();
        let cnd = g.param("c", boolt(), Value::Bool(b));
        let (q, out) = (g.var("q"), g.var("out"));
        // the untaken branch would divide by zero
        let bad = block(vec![let1(q, i64t(), prim(Prim::Div, vec![i(1), i(0)]))], vec![v(q)]);
        let (then_b, else_b) = if b { (block(vec![], vec![i(1)]), bad) } else { (bad, block(vec![], vec![i(2)])) };
        g.stmts.push(let1(out, i64t(), Expr::If { cond: v(cnd), then_b, else_b }));
        let (r, k) = g.run(vec![v(out)]);
        assert_eq!(r.unwrap(), vec![Value::I64(want)]);
        assert_eq!(k, OpCounts::default());
    }
}

#[test]
fn building_arrays() {
    let mut g = Prog::default();
    let n = g.size("n", 3);
    let io = g.let1("io", arr(Scalar::I64, &[sz(n)]), Expr::Iota { n: v(n) });
    let rs = g.let1("rs", arr(Scalar::Bool, &[c(2)]), Expr::Replicate { n: i(2), val: Atom::Lit(Lit::Bool(true)) });
    let rr = g.let1("rr", arr(Scalar::I64, &[c(2), sz(n)]), Expr::Replicate { n: i(2), val: v(io) });
    let l1 = g.let1("l1", f64v(&[c(2)]), Expr::ArrayLit(vec![f(1.0), f(2.0)]));
    let l2 = g.let1("l2", arr(Scalar::I64, &[c(2), sz(n)]), Expr::ArrayLit(vec![v(io), v(io)]));
    let l0 = g.let1("l0", f64v(&[c(0), c(4)]), Expr::ArrayLit(vec![]));
    let (r, k) = g.run(vec![v(io), v(rs), v(rr), v(l1), v(l2), v(l0)]);
    assert_eq!(
        r.unwrap(),
        vec![
            ia(&[0, 1, 2]),
            Value::array(vec![2], ArrayData::Bool(vec![true, true].into())),
            Value::array(vec![2, 3], ArrayData::I64(vec![0, 1, 2, 0, 1, 2].into())),
            fa(&[1.0, 2.0]),
            Value::array(vec![2, 3], ArrayData::I64(vec![0, 1, 2, 0, 1, 2].into())),
            Value::array(vec![0, 4], ArrayData::F64(vec![].into())),
        ]
    );
    // writes: iota 3, rep 2, rep of rows 6, lit 2, lit of rows 6; reads: 6 + 6
    assert_eq!(k, counts(0, 12, 3 + 2 + 6 + 2 + 6));

    // n = 0
    let mut g = Prog::default();
    let n = g.size("n", 0);
    let io = g.let1("io", arr(Scalar::I64, &[sz(n)]), Expr::Iota { n: v(n) });
    let rr = g.let1("rr", arr(Scalar::I64, &[sz(n), sz(n)]), Expr::Replicate { n: v(n), val: v(io) });
    assert_eq!(g.ok(vec![v(io), v(rr)]), vec![ia(&[]), Value::array(vec![0, 0], ArrayData::I64(vec![].into()))]);

    // negative counts
    let mut g = Prog::default();
    let n = g.size("n", -2);
    let io = g.let_at("io", arr(Scalar::I64, &[sz(n)]), Expr::Iota { n: v(n) });
    assert_eq!(g.err(vec![v(io)]), "negative size -2 in `iota` at t.ard:1:1");
    let mut g = Prog::default();
    let n = g.size("n", -2);
    let io = g.let_at("io", f64v(&[sz(n)]), Expr::Replicate { n: v(n), val: f(1.0) });
    assert_eq!(g.err(vec![v(io)]), "negative size -2 in `replicate` at t.ard:1:1");

    // absurdly large arrays are an error, not an aborted allocation
    let mut g = Prog::default();
    let n = g.size("n", 1 << 40);
    let io = g.let_at("io", f64v(&[sz(n)]), Expr::Replicate { n: v(n), val: f(1.0) });
    assert_eq!(g.err(vec![v(io)]), "array of shape [1099511627776] is too large at t.ard:1:1");
}

#[test]
fn reshaping_and_reordering() {
    let mut g = Prog::default();
    let a = g.param("a", f64v(&[c(2), c(3)]), fm(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let b = g.param("b", f64v(&[c(1), c(3)]), fm(1, 3, &[7.0, 8.0, 9.0]));
    let cc = g.let1("cc", f64v(&[c(3), c(3)]), Expr::Concat(v(a), v(b)));
    let t = g.let1("t", f64v(&[c(3), c(2)]), Expr::Transpose(v(a)));
    let fl = g.let1("fl", f64v(&[c(6)]), Expr::Flatten(v(a)));
    let u = g.let1("u", f64v(&[c(3), c(2)]), Expr::Unflatten { arr: v(fl), n: i(3), m: i(2) });
    let rv = g.let1("rv", f64v(&[c(3), c(3)]), Expr::Reverse(v(cc)));
    let r1 = g.let1("r1", f64v(&[c(6)]), Expr::Rotate { k: i(2), arr: v(fl) });
    let r2 = g.let1("r2", f64v(&[c(6)]), Expr::Rotate { k: i(-1), arr: v(fl) });
    let r3 = g.let1("r3", f64v(&[c(6)]), Expr::Rotate { k: i(13), arr: v(fl) });
    let (r, k) = g.run(vec![v(cc), v(t), v(fl), v(u), v(rv), v(r1), v(r2), v(r3)]);
    assert_eq!(
        r.unwrap(),
        vec![
            fm(3, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]),
            fm(3, 2, &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]),
            fa(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            fm(3, 2, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            fm(3, 3, &[7.0, 8.0, 9.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0]),
            fa(&[3.0, 4.0, 5.0, 6.0, 1.0, 2.0]),
            fa(&[6.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
            fa(&[2.0, 3.0, 4.0, 5.0, 6.0, 1.0]),
        ]
    );
    // flatten and unflatten are reshapes: nothing copied
    let copied = 9 + 6 + 9 + 6 * 3;
    assert_eq!(k, counts(0, copied, copied));

    // transpose of a rank-3 array moves whole rows
    let mut g = Prog::default();
    let a = g.param("a", f64v(&[c(2), c(2), c(2)]), Value::array(vec![2, 2, 2], ArrayData::F64((0..8).map(|x| x as f64).collect())));
    let t = g.let1("t", f64v(&[c(2), c(2), c(2)]), Expr::Transpose(v(a)));
    assert_eq!(g.ok(vec![v(t)]), vec![Value::array(vec![2, 2, 2], ArrayData::F64(vec![0.0, 1.0, 4.0, 5.0, 2.0, 3.0, 6.0, 7.0].into()))]);

    // empty arrays
    let mut g = Prog::default();
    let e = g.param("e", f64v(&[c(0), c(2)]), Value::array(vec![0, 2], ArrayData::F64(vec![].into())));
    let t = g.let1("t", f64v(&[c(2), c(0)]), Expr::Transpose(v(e)));
    let fl = g.let1("fl", f64v(&[c(0)]), Expr::Flatten(v(e)));
    let rv = g.let1("rv", f64v(&[c(0), c(2)]), Expr::Reverse(v(e)));
    let ro = g.let1("ro", f64v(&[c(0), c(2)]), Expr::Rotate { k: i(3), arr: v(e) });
    let cc = g.let1("cc", f64v(&[c(0), c(2)]), Expr::Concat(v(e), v(e)));
    let u = g.let1("u", f64v(&[c(0), c(5)]), Expr::Unflatten { arr: v(fl), n: i(0), m: i(5) });
    let empty = |s: Vec<usize>| Value::array(s, ArrayData::F64(vec![].into()));
    assert_eq!(
        g.ok(vec![v(t), v(fl), v(rv), v(ro), v(cc), v(u)]),
        vec![empty(vec![2, 0]), empty(vec![0]), empty(vec![0, 2]), empty(vec![0, 2]), empty(vec![0, 2]), empty(vec![0, 5])]
    );

    // unflatten with the wrong sizes
    let mut g = Prog::default();
    let a = g.param("a", f64v(&[c(6)]), fa(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let nn = g.param("n", i64t(), Value::I64(4));
    let u = g.let_at("u", f64v(&[sz(nn), c(2)]), Expr::Unflatten { arr: v(a), n: v(nn), m: i(2) });
    assert_eq!(g.err(vec![v(u)]), "cannot unflatten an axis of size 6 into [4][2] at t.ard:1:1");
}

#[test]
fn coerce_checks_shapes() {
    let mut g = Prog::default();
    let n = g.size("n", 3);
    let m = g.size("m", 3);
    let a = g.param("a", f64v(&[sz(n)]), fa(&[1.0, 2.0, 3.0]));
    let b = g.let1("b", f64v(&[sz(m)]), Expr::Coerce { arr: v(a), loc: loc() });
    let (r, k) = g.run(vec![v(b)]);
    assert_eq!(r.unwrap(), vec![fa(&[1.0, 2.0, 3.0])]);
    assert_eq!(k, OpCounts::default());

    let mut g = Prog::default();
    let n = g.size("n", 3);
    let m = g.size("m", 4);
    let a = g.param("a", f64v(&[sz(n)]), fa(&[1.0, 2.0, 3.0]));
    let b = g.let1("b", f64v(&[sz(m)]), Expr::Coerce { arr: v(a), loc: loc() });
    assert_eq!(g.err(vec![v(b)]), "size coercion failed at t.ard:1:1: value has shape [3] but [4] was required");
}

#[test]
fn scatter_add_rows_and_empty() {
    let mut g = Prog::default();
    let d = g.param("d", f64v(&[c(3), c(2)]), fm(3, 2, &[1.0; 6]));
    let is = g.param("is", arr(Scalar::I64, &[c(2)]), ia(&[2, 2]));
    let vs = g.param("vs", f64v(&[c(2), c(2)]), fm(2, 2, &[1.0, 2.0, 3.0, 4.0]));
    let s = g.let1("s", f64v(&[c(3), c(2)]), Expr::ScatterAdd { dest: v(d), idxs: v(is), vals: v(vs), loc: loc() });
    let (r, k) = g.run(vec![v(s), v(d)]);
    assert_eq!(r.unwrap(), vec![fm(3, 2, &[1.0, 1.0, 1.0, 1.0, 5.0, 7.0]), fm(3, 2, &[1.0; 6])]);
    // 4 adds; reads: 2 indexes + 4 values + 4 destination elements; 4 writes
    assert_eq!(k, counts(4, 10, 4));

    let mut g2 = Prog::default();
    let d = g2.param("d", arr(Scalar::I64, &[c(0)]), ia(&[]));
    let is = g2.param("is", arr(Scalar::I64, &[c(0)]), ia(&[]));
    let s = g2.let1("s", arr(Scalar::I64, &[c(0)]), Expr::ScatterAdd { dest: v(d), idxs: v(is), vals: v(is), loc: loc() });
    assert_eq!(g2.ok(vec![v(s)]), vec![ia(&[])]);
}

#[test]
fn fail_and_internal_errors() {
    let mut g = Prog::default();
    let x = g.let1("x", f64t(), Expr::Fail { msg: "size must be positive".into(), loc: loc() });
    assert_eq!(g.err(vec![v(x)]), "size must be positive at t.ard:1:1");

    // unbound variable: an internal error, not a panic
    let mut g = Prog::default();
    let ghost = g.var("ghost");
    let x = g.let1("x", f64t(), Expr::Atom(v(ghost)));
    let (f, sizes, args) = g.build(vec![v(x)]);
    let e = run(&f, &sizes, &args, &mut OpCounts::default()).unwrap_err();
    assert!(e.message.starts_with("internal: unbound variable"), "{}", e.message);
    // wrong number of arguments or wrong argument shapes
    let f = dot();
    let e = run(&f, &[3], &[fa(&[1.0])], &mut OpCounts::default()).unwrap_err();
    assert!(e.message.starts_with("internal:"), "{}", e.message);
    let e = run(&f, &[3], &[fa(&[1.0]), fa(&[1.0, 2.0, 3.0])], &mut OpCounts::default()).unwrap_err();
    assert!(e.message.starts_with("internal: argument a_1"), "{}", e.message);
}

#[test]
fn deep_nesting_does_not_overflow_the_stack() {
    // 3000 nested ifs
    let mut g = Prog::default();
    let mut inner = block(vec![], vec![i(7)]);
    for _ in 0..3000 {
        let o = g.var("o");
        inner = block(vec![let1(o, i64t(), Expr::If { cond: Atom::Lit(Lit::Bool(true)), then_b: inner, else_b: block(vec![], vec![i(0)]) })], vec![v(o)]);
    }
    g.stmts = inner.stmts;
    let (f, sizes, args) = g.build(inner.result);
    let r = run(&f, &sizes, &args, &mut OpCounts::default()).unwrap();
    assert_eq!(r, vec![Value::I64(7)]);
}

/// A GMM-sized workload: for each of n points and k components, a d×d
/// lower-triangular matrix-vector product (n*k*d*d ≈ 2.5M multiply-adds).
#[test]
fn gmm_sized_workload_is_fast_enough() {
    let (n, k, d) = (1000i64, 25i64, 10i64);
    let mut g = Prog::default();
    let nv = g.size("n", n);
    let kv = g.size("k", k);
    let dv = g.size("d", d);
    let xs =
        g.param("x", f64v(&[sz(nv), sz(dv)]), Value::array(vec![n as usize, d as usize], ArrayData::F64((0..n * d).map(|t| (t % 7) as f64 * 0.1).collect())));
    let qs = g.param(
        "q",
        f64v(&[sz(kv), sz(dv), sz(dv)]),
        Value::array(vec![k as usize, d as usize, d as usize], ArrayData::F64((0..k * d * d).map(|t| (t % 5) as f64 * 0.01).collect())),
    );
    let (i_, j_, r_, c_) = (g.var("i"), g.var("j"), g.var("r"), g.var("c"));
    let (xi, qj, qr, prods, pr, x_c, q_rc, m, dotv, sq, rows, tot, per) = (
        g.var("xi"),
        g.var("qj"),
        g.var("qr"),
        g.var("prods"),
        g.var("pr"),
        g.var("xc"),
        g.var("qrc"),
        g.var("m"),
        g.var("dot"),
        g.var("sq"),
        g.var("rows"),
        g.var("tot"),
        g.var("per"),
    );
    let ty_d = f64v(&[sz(dv)]);
    let inner = block(
        vec![
            let1(x_c, f64t(), Expr::Index { arr: v(xi), idx: vec![v(c_)], checks: vec![None] }),
            let1(q_rc, f64t(), Expr::Index { arr: v(qj), idx: vec![v(r_), v(c_)], checks: vec![None, None] }),
            let1(m, f64t(), prim(Prim::Mul, vec![v(x_c), v(q_rc)])),
        ],
        vec![v(m)],
    );
    let row = block(
        vec![
            let1(prods, ty_d.clone(), Expr::For { ivar: c_, size: sz(dv), body: inner }),
            let1(dotv, f64t(), Expr::Reduce { op: ReduceOp::Add, ne: vec![f(0.0)], arrs: vec![v(prods)] }),
            let1(sq, f64t(), prim(Prim::Mul, vec![v(dotv), v(dotv)])),
        ],
        vec![v(sq)],
    );
    let comp = block(
        vec![
            let1(qj, f64v(&[sz(dv), sz(dv)]), Expr::Index { arr: v(qs), idx: vec![v(j_)], checks: vec![None] }),
            let1(rows, ty_d.clone(), Expr::For { ivar: r_, size: sz(dv), body: row }),
            let1(tot, f64t(), Expr::Reduce { op: ReduceOp::Add, ne: vec![f(0.0)], arrs: vec![v(rows)] }),
        ],
        vec![v(tot)],
    );
    let point = block(
        vec![
            let1(xi, ty_d.clone(), Expr::Index { arr: v(xs), idx: vec![v(i_)], checks: vec![None] }),
            let1(pr, f64v(&[sz(kv)]), Expr::For { ivar: j_, size: sz(kv), body: comp }),
            let1(per, f64t(), Expr::Reduce { op: ReduceOp::Max, ne: vec![f(f64::NEG_INFINITY)], arrs: vec![v(pr)] }),
        ],
        vec![v(per)],
    );
    let all = g.let1("all", f64v(&[sz(nv)]), Expr::For { ivar: i_, size: sz(nv), body: point });
    let total = g.let1("total", f64t(), Expr::Reduce { op: ReduceOp::Add, ne: vec![f(0.0)], arrs: vec![v(all)] });
    let _ = qr;
    let start = std::time::Instant::now();
    let (r, cnt) = g.run(vec![v(total)]);
    let el = start.elapsed();
    assert!(matches!(r.unwrap()[0], Value::F64(x) if x.is_finite() && x > 0.0));
    let nkdd = (n * k * d * d) as u64;
    assert_eq!(cnt.arith, nkdd + nkdd + 2 * (n * k * d) as u64 + (n * k) as u64 + n as u64);
    // generous even for debug builds; release takes well under a second
    assert!(el.as_secs() < 60, "took {el:?}");
}

/// In-place `update` and `scatter_add` never change a value still read
/// later: the array is written in place only at its last use.
#[test]
fn in_place_writes_respect_later_reads() {
    // a1 = a0 (moved copy); b = update a1[0] = 9 (a1 still read: copies);
    // c = update b[1] = 8 (b's last use: in place); s = scatter_add c [2] [1] (in place)
    let mut g = Prog::default();
    let a0 = g.param("a0", f64v(&[c(3)]), fa(&[1.0, 2.0, 3.0]));
    let a1 = g.let1("a1", f64v(&[c(3)]), Expr::Atom(v(a0)));
    let b = g.let1("b", f64v(&[c(3)]), Expr::Update { arr: v(a1), idx: i(0), val: f(9.0), loc: loc() });
    let cc = g.let1("c", f64v(&[c(3)]), Expr::Update { arr: v(b), idx: i(1), val: f(8.0), loc: loc() });
    let is = g.let1("is", arr(Scalar::I64, &[c(1)]), Expr::ArrayLit(vec![i(2)]));
    let vs = g.let1("vs", f64v(&[c(1)]), Expr::ArrayLit(vec![f(1.0)]));
    let s = g.let1("s", f64v(&[c(3)]), Expr::ScatterAdd { dest: v(cc), idxs: v(is), vals: v(vs), loc: loc() });
    let out = g.ok(vec![v(a0), v(a1), v(s)]);
    assert_eq!(out, vec![fa(&[1.0, 2.0, 3.0]), fa(&[1.0, 2.0, 3.0]), fa(&[9.0, 8.0, 4.0])]);

    // a loop threading an array through `update` (reverse mode's residual
    // saving): the initial array, read after the loop, keeps its value
    let mut g = Prog::default();
    let z = g.let1("z", f64v(&[c(4)]), Expr::Replicate { n: i(4), val: f(0.0) });
    let (acc, k, acc2) = (g.var("acc"), g.var("k"), g.var("acc2"));
    let kf = g.var("kf");
    let body = block(
        vec![
            let1(kf, Type::scalar(Scalar::F64), Expr::Prim(Prim::Convert(Scalar::F64), vec![v(k)])),
            let1(acc2, f64v(&[c(4)]), Expr::Update { arr: v(acc), idx: v(k), val: v(kf), loc: loc() }),
        ],
        vec![v(acc2)],
    );
    let out_v = g.var("out");
    g.stmts.push(let1(
        out_v,
        f64v(&[c(4)]),
        Expr::Loop { params: vec![bd(acc, f64v(&[c(4)]))], init: vec![v(z)], kind: LoopKind::Count { ivar: k, n: i(4), down: false }, body },
    ));
    let (r, counts_) = g.run(vec![v(out_v), v(z)]);
    assert_eq!(r.unwrap(), vec![fa(&[0.0, 1.0, 2.0, 3.0]), fa(&[0.0; 4])]);
    // counted as one row written per update, whether copied or in place
    assert_eq!(counts_.writes, 4 + 4);
}
