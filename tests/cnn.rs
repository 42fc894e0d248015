//! The CNN case study (`examples/cnn/lenet.ard`, seed paper 000) at a size
//! CI can afford: a few random images and weights. The batch gradient
//! agrees with central finite differences of the batch loss along random
//! directions; the C backend gives the interpreter's bits for the gradient
//! and for an epoch of SGD at every thread count; and `train_epoch` is the
//! SGD steps `w - lr * batch_grad` over consecutive batches. (The full-size
//! check against JAX — first batch's gradient and the weights after one
//! epoch, to 1e-15 — is `bench/cnn.py --check`; it needs the shared data.)

mod common;
use arden::api::{Backend, CallOptions};
use arden::runtime::ArrayData;
use arden::{Program, Value};
use common::*;

const SHAPES: [&[usize]; 6] = [&[6, 5, 5], &[6], &[12, 6, 5, 5], &[12], &[10, 12, 4, 4], &[10]];

fn program() -> Program {
    Program::from_file(std::path::Path::new("examples/cnn/lenet.ard")).unwrap()
}

fn random(shape: &[usize], scale: f64, rng: &mut Rng) -> Value {
    let len = shape.iter().product();
    Value::array(shape.to_vec(), ArrayData::F64((0..len).map(|_| scale * rng.unit()).collect()))
}

/// Weights like make_data.py's (uniform, scaled by the fan-in), `n`
/// images with values in [0, 1] and labels.
fn inputs(n: usize, seed: u64) -> (Vec<Value>, Value, Value) {
    let mut rng = Rng(seed);
    let weights = SHAPES.iter().map(|s| random(s, 1.0 / (s[1..].iter().product::<usize>().max(1) as f64).sqrt(), &mut rng)).collect();
    let images = Value::array(vec![n, 28, 28], ArrayData::F64((0..n * 784).map(|_| 0.5 + 0.5 * rng.unit()).collect()));
    let labels = Value::array(vec![n], ArrayData::I64((0..n).map(|_| rng.below(10) as i64).collect()));
    (weights, images, labels)
}

fn bits(v: &Value) -> Vec<u64> {
    let mut xs = vec![];
    floats(v, &mut xs);
    xs.iter().map(|x| x.to_bits()).collect()
}

fn args(weights: &[Value], rest: &[Value]) -> Vec<Value> {
    weights.iter().chain(rest).cloned().collect()
}

#[test]
fn batch_gradient_matches_finite_differences() {
    with_big_stack(|| {
        let prog = program();
        let (w, x, y) = inputs(3, 0x0c77_0000_0000_0001);
        let grad = prog.entry("batch_grad").unwrap().call(&args(&w, &[x.clone(), y.clone()])).unwrap();
        let mut g = vec![];
        floats(&grad, &mut g);
        let loss = |w: &[Value]| match prog.entry("batch_loss").unwrap().call(&args(w, &[x.clone(), y.clone()])).unwrap() {
            Value::F64(v) => v,
            v => panic!("batch_loss gave {}", v.to_json()),
        };
        let mut rng = Rng(0x0c77_0000_0000_0002);
        for _ in 0..4 {
            let d: Vec<Value> = w.iter().map(|v| direction(v, &mut rng)).collect();
            let h = 1e-5;
            let plus: Vec<Value> = w.iter().zip(&d).map(|(v, d)| shift(v, d, h)).collect();
            let minus: Vec<Value> = w.iter().zip(&d).map(|(v, d)| shift(v, d, -h)).collect();
            let fd = (loss(&plus) - loss(&minus)) / (2.0 * h);
            let mut dd = vec![];
            d.iter().for_each(|v| floats(v, &mut dd));
            let exact: f64 = g.iter().zip(&dd).map(|(a, b)| a * b).sum();
            assert!((fd - exact).abs() <= 1e-7 * (1.0 + exact.abs()), "directional derivative {exact} against finite differences {fd}");
        }
    });
}

#[test]
fn c_backend_gives_the_interpreters_bits_for_gradient_and_epoch() {
    if !c_compiler_or_skip("c_backend_gives_the_interpreters_bits_for_gradient_and_epoch") {
        return;
    }
    with_big_stack(|| {
        let prog = program();
        let (w, x, y) = inputs(4, 0x0c77_0000_0000_0003);
        let interp = prog.compile(Backend::Interp).unwrap();
        let compiled = prog.compile(Backend::C).unwrap();
        let calls = [
            ("batch_grad", args(&w, &[x.clone(), y.clone()])),
            ("train_epoch", args(&w, &[x.clone(), y.clone(), Value::F64(2.0), Value::I64(2)])),
            ("predict", args(&w, std::slice::from_ref(&x))),
        ];
        for (entry, a) in &calls {
            let (want, _) = interp.entry(entry).unwrap().call_with(a, &CallOptions::default()).unwrap();
            for opts in thread_options() {
                let (got, _) = compiled.entry(entry).unwrap().call_with(a, &opts).unwrap();
                assert_eq!(bits(&got), bits(&want), "`{entry}` on {} threads", opts.threads);
            }
        }
    });
}

#[test]
fn an_epoch_is_sgd_steps_over_consecutive_batches() {
    with_big_stack(|| {
        let prog = program();
        let (w, x, y) = inputs(5, 0x0c77_0000_0000_0004);
        let (lr, batch) = (0.5, 2usize);
        // ⌊5 / 2⌋ = 2 steps; the fifth image is never used
        let epoch = prog.entry("train_epoch").unwrap().call(&args(&w, &[x.clone(), y.clone(), Value::F64(lr), Value::I64(batch as i64)])).unwrap();
        let (mut xs, mut ys) = (vec![], vec![]);
        floats(&x, &mut xs);
        let Value::Array(ya) = &y else { panic!() };
        let ArrayData::I64(yv) = &ya.data else { panic!() };
        let mut cur = w.clone();
        for step in 0..2 {
            let xb = Value::array(vec![batch, 28, 28], ArrayData::F64(xs[step * batch * 784..(step + 1) * batch * 784].to_vec().into()));
            ys.clear();
            ys.extend_from_slice(&yv[step * batch..(step + 1) * batch]);
            let yb = Value::array(vec![batch], ArrayData::I64(ys.clone().into()));
            let Value::Tuple(g) = prog.entry("batch_grad").unwrap().call(&args(&cur, &[xb, yb])).unwrap() else { panic!("batch_grad is a tuple") };
            cur = cur.iter().zip(&g).map(|(v, g)| shift(v, g, -lr)).collect();
        }
        let (mut got, mut want) = (vec![], vec![]);
        floats(&epoch, &mut got);
        cur.iter().for_each(|v| floats(v, &mut want));
        assert_eq!(got.len(), 3898);
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-14 * (1.0 + b.abs()), "train_epoch {a} against two SGD steps {b}");
        }
    });
}
