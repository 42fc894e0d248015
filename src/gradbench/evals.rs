//! The twelve GradBench evals: for each, its arden program
//! (`gradbench/EVAL.ard`, compiled into the binary) and the conversion of
//! an `evaluate` message's input into the entry's arguments and of the
//! entry's result into the output GradBench expects. The numerical work,
//! derivatives included, is all in the programs; this file only moves data
//! (ba's expansion of its compressed input and sampling of its CSR
//! Jacobian, ht's two variants, lstm's flat gradient, gmm's four keys).

use super::json::{self as j, field};
use crate::runtime::Value;
use crate::runtime::value::ArrayData;
use serde_json::{Value as Json, json};

/// Turns the entry's result into the `output` of the response.
pub type Finish = Box<dyn Fn(&Value) -> Result<Json, String>>;

/// A call ready to run: the entry, its arguments, and how to report its
/// result.
pub struct Prepared {
    pub entry: &'static str,
    pub args: Vec<Value>,
    pub finish: Finish,
}

/// One eval: its module name, program and input conversion.
pub struct Eval {
    pub name: &'static str,
    /// Path of the program in the repository, used in messages.
    pub file: &'static str,
    pub source: &'static str,
    /// The protocol's function names.
    pub functions: &'static [&'static str],
    pub prepare: fn(function: &str, input: &Json) -> Result<Prepared, String>,
}

macro_rules! program {
    ($name:literal) => {
        (concat!("gradbench/", $name, ".ard"), include_str!(concat!("../../gradbench/", $name, ".ard")))
    };
}

macro_rules! eval {
    ($name:literal, [$($f:literal),*], $prepare:expr) => {
        Eval {
            name: $name,
            file: program!($name).0,
            source: program!($name).1,
            functions: &[$($f),*],
            prepare: $prepare,
        }
    };
}

/// Every eval, in GradBench's order.
pub static EVALS: &[Eval] = &[
    eval!("hello", ["square", "double"], hello),
    eval!("llsq", ["primal", "gradient"], llsq),
    eval!("lse", ["primal", "gradient"], lse),
    eval!("ode", ["primal", "gradient"], ode),
    eval!("det", ["primal", "gradient"], det),
    eval!("kmeans", ["cost", "dir"], kmeans),
    eval!("gmm", ["objective", "jacobian"], gmm),
    eval!("ba", ["objective", "jacobian"], ba),
    eval!("ht", ["objective", "jacobian"], ht),
    eval!("lstm", ["objective", "jacobian"], lstm),
    eval!("saddle", ["rr", "ff", "fr", "rf"], saddle),
    eval!("particle", ["rr", "ff", "fr", "rf"], particle),
];

/// The eval named `name`.
pub fn find(name: &str) -> Option<&'static Eval> {
    EVALS.iter().find(|e| e.name == name)
}

/// Every eval's name, for messages.
pub fn names() -> String {
    EVALS.iter().map(|e| e.name).collect::<Vec<_>>().join(", ")
}

fn as_is() -> Finish {
    Box::new(|v| Ok(j::to_json(v)))
}

fn f64_scalar(x: f64) -> Value {
    Value::F64(x)
}

fn positive(x: i64, what: &str) -> Result<i64, String> {
    if x < 1 { Err(format!("`{what}` must be at least 1, not {x}")) } else { Ok(x) }
}

fn hello(function: &str, input: &Json) -> Result<Prepared, String> {
    let x = j::number(input, "input")?;
    let entry = if function == "square" { "square" } else { "double" };
    Ok(Prepared { entry, args: vec![f64_scalar(x)], finish: as_is() })
}

fn llsq(function: &str, input: &Json) -> Result<Prepared, String> {
    let x = j::f64_array(field(input, "x")?, 1, "x")?;
    let n = positive(j::integer(field(input, "n")?, "n")?, "n")?;
    let entry = if function == "primal" { "primal" } else { "gradient" };
    Ok(Prepared { entry, args: vec![x, Value::I64(n)], finish: as_is() })
}

fn lse(function: &str, input: &Json) -> Result<Prepared, String> {
    let x = j::f64_array(field(input, "x")?, 1, "x")?;
    if x.shape()[0] == 0 {
        return Err("`x` must not be empty".into());
    }
    let entry = if function == "primal" { "primal" } else { "gradient" };
    Ok(Prepared { entry, args: vec![x], finish: as_is() })
}

fn ode(function: &str, input: &Json) -> Result<Prepared, String> {
    let x = j::f64_array(field(input, "x")?, 1, "x")?;
    if x.shape()[0] == 0 {
        return Err("`x` must not be empty".into());
    }
    let s = positive(j::integer(field(input, "s")?, "s")?, "s")?;
    let entry = if function == "primal" { "primal" } else { "gradient" };
    Ok(Prepared { entry, args: vec![x, Value::I64(s)], finish: as_is() })
}

fn det(function: &str, input: &Json) -> Result<Prepared, String> {
    let a = j::f64_array(field(input, "A")?, 1, "A")?;
    let ell = j::integer(field(input, "ell")?, "ell")?;
    // ell! permutations: beyond 13 the expansion would run for days (and
    // 21! overflows the i64 permutation numbers).
    if !(1..=13).contains(&ell) {
        return Err(format!("`ell` must be between 1 and 13, not {ell}"));
    }
    let len = a.shape()[0];
    if len as i64 != ell * ell {
        return Err(format!("`A` has {len} elements, but an ell × ell matrix with ell = {ell} has {}", ell * ell));
    }
    let entry = if function == "primal" { "primal" } else { "gradient" };
    Ok(Prepared { entry, args: vec![a, Value::I64(ell)], finish: as_is() })
}

fn kmeans(function: &str, input: &Json) -> Result<Prepared, String> {
    let points = j::f64_array(field(input, "points")?, 2, "points")?;
    let centroids = j::f64_array(field(input, "centroids")?, 2, "centroids")?;
    if points.shape()[0] == 0 || centroids.shape()[0] == 0 {
        return Err("`points` and `centroids` must not be empty".into());
    }
    let entry = if function == "cost" { "cost" } else { "dir" };
    Ok(Prepared { entry, args: vec![points, centroids], finish: as_is() })
}

fn gmm(function: &str, input: &Json) -> Result<Prepared, String> {
    let d = j::integer(field(input, "d")?, "d")?;
    let k = j::integer(field(input, "k")?, "k")?;
    let n = j::integer(field(input, "n")?, "n")?;
    let m = j::integer(field(input, "m")?, "m")?;
    let gamma = j::number(field(input, "gamma")?, "gamma")?;
    let alpha = j::f64_array(field(input, "alpha")?, 1, "alpha")?;
    let mu = j::f64_array(field(input, "mu")?, 2, "mu")?;
    let q = j::f64_array(field(input, "q")?, 2, "q")?;
    let l = j::f64_array(field(input, "l")?, 2, "l")?;
    let x = j::f64_array(field(input, "x")?, 2, "x")?;
    let (d, k, n) = (d as usize, k as usize, n as usize);
    let expect =
        [("alpha", &alpha, vec![k]), ("mu", &mu, vec![k, d]), ("q", &q, vec![k, d]), ("l", &l, vec![k, d * d.saturating_sub(1) / 2]), ("x", &x, vec![n, d])];
    for (name, v, want) in expect {
        // An empty list of rows has no row length to compare.
        let got = v.shape();
        if got != want && !(got.len() == 2 && got[0] == 0 && want[0] == 0) {
            return Err(format!("`{name}` has shape {got:?}, but d = {d}, k = {k}, n = {n} need {want:?}"));
        }
    }
    if k == 0 {
        return Err("`k` must be at least 1".into());
    }
    let args = vec![alpha, mu, q, l, x, Value::F64(gamma), Value::I64(m)];
    if function == "objective" {
        return Ok(Prepared { entry: "objective", args, finish: as_is() });
    }
    let finish: Finish = Box::new(|v| {
        Ok(json!({
            "alpha": j::to_json(j::component(v, 0)?),
            "mu": j::to_json(j::component(v, 1)?),
            "q": j::to_json(j::component(v, 2)?),
            "l": j::to_json(j::component(v, 3)?),
        }))
    });
    Ok(Prepared { entry: "jacobian", args, finish })
}

/// ba's compressed input expanded as GradBench's reference does: n copies
/// of the camera, m of the point, p weights and features; observation i
/// uses camera i mod n and point i mod m.
fn ba(function: &str, input: &Json) -> Result<Prepared, String> {
    let n = positive(j::integer(field(input, "n")?, "n")?, "n")? as usize;
    let m = positive(j::integer(field(input, "m")?, "m")?, "m")? as usize;
    let p = positive(j::integer(field(input, "p")?, "p")?, "p")? as usize;
    let cam = j::f64_data(&j::f64_array(field(input, "cam")?, 1, "cam")?)?;
    let x = j::f64_data(&j::f64_array(field(input, "x")?, 1, "x")?)?;
    let w = j::number(field(input, "w")?, "w")?;
    let feat = j::f64_data(&j::f64_array(field(input, "feat")?, 1, "feat")?)?;
    for (name, v, len) in [("cam", &cam, 11), ("x", &x, 3), ("feat", &feat, 2)] {
        if v.len() != len {
            return Err(format!("`{name}` must have {len} elements, not {}", v.len()));
        }
    }
    // Refuse problems whose expansion would not fit in memory.
    let total = 11 * n + 3 * m + 5 * p;
    if total > 1 << 31 {
        return Err(format!("the expanded problem (n = {n}, m = {m}, p = {p}) is too large"));
    }
    let cams = Value::array(vec![n, 11], ArrayData::F64(cam.iter().copied().cycle().take(11 * n).collect()));
    let xs = Value::array(vec![m, 3], ArrayData::F64(x.iter().copied().cycle().take(3 * m).collect()));
    let ws = Value::array(vec![p], ArrayData::F64(vec![w; p].into()));
    let feats = Value::array(vec![p, 2], ArrayData::F64(feat.iter().copied().cycle().take(2 * p).collect()));
    let obs = Value::array(vec![p, 2], ArrayData::I64((0..p).flat_map(|i| [(i % n) as i64, (i % m) as i64]).collect()));
    let args = vec![cams, xs, ws, feats, obs];
    if function == "objective" {
        // Only observation 0 is sent, with the number of observations.
        let finish: Finish = Box::new(move |v| {
            let reproj = j::f64_data(j::component(v, 0)?)?;
            let werr = j::f64_data(j::component(v, 1)?)?;
            Ok(json!({
                "reproj_error": {"elements": [reproj[0], reproj[1]], "repeated": reproj.len() / 2},
                "w_err": {"element": werr[0], "repeated": werr.len()},
            }))
        });
        return Ok(Prepared { entry: "objective", args, finish });
    }
    // The CSR Jacobian's sample: the first 30 entries and the last one of
    // the row pointers, the columns and the values (columns and values come
    // in two parts, the reprojection blocks and the weight entries, whose
    // concatenation is the CSR array).
    let finish: Finish = Box::new(|v| {
        let rows = j::i64_data(j::component(v, 0)?)?;
        let cols = j::component(v, 1)?;
        let vals = j::component(v, 2)?;
        let (block_cols, wcols) = (j::i64_data(j::component(cols, 0)?)?, j::i64_data(j::component(cols, 1)?)?);
        let (blocks, wd) = (j::f64_data(j::component(vals, 0)?)?, j::f64_data(j::component(vals, 1)?)?);
        fn sample<T: Copy + Into<Json>>(head: &[T], tail: &[T]) -> Json {
            let mut s: Vec<Json> = head.iter().chain(tail).take(30).map(|&x| x.into()).collect();
            if let Some(&last) = tail.last().or(head.last()) {
                s.push(last.into());
            }
            Json::Array(s)
        }
        Ok(json!({"rows": sample(&rows, &[]), "cols": sample(&block_cols, &wcols), "vals": sample(&blocks, &wd)}))
    });
    Ok(Prepared { entry: "jacobian", args, finish })
}

/// ht: the model and correspondences as arrays; the complicated variant
/// when `us` is not empty (as GradBench's reference decides).
fn ht(function: &str, input: &Json) -> Result<Prepared, String> {
    let theta = j::f64_array(field(input, "theta")?, 1, "theta")?;
    if theta.shape() != [26] {
        return Err(format!("`theta` must have 26 elements, not {}", theta.shape()[0]));
    }
    let data = field(input, "data")?;
    let model = field(data, "model")?;
    let parents = j::i64_array(field(model, "parents")?, 1, "parents")?;
    let base_relatives = j::f64_array(field(model, "base_relatives")?, 3, "base_relatives")?;
    let inverse_base_absolutes = j::f64_array(field(model, "inverse_base_absolutes")?, 3, "inverse_base_absolutes")?;
    let base_positions = j::f64_array(field(model, "base_positions")?, 2, "base_positions")?;
    let weights = j::f64_array(field(model, "weights")?, 2, "weights")?;
    let triangles = j::i64_array(field(model, "triangles")?, 2, "triangles")?;
    let is_mirrored = j::boolean(field(model, "is_mirrored")?, "is_mirrored")?;
    let correspondences = j::i64_array(field(data, "correspondences")?, 1, "correspondences")?;
    let points = j::f64_array(field(data, "points")?, 2, "points")?;
    let us_json = field(input, "us")?;
    let bones = parents.shape()[0];
    // Bones own theta's finger columns in groups of four: 22 in the data.
    if bones > 22 {
        return Err(format!("the model has {bones} bones; theta poses at most 22"));
    }
    for (name, v, want) in [("base_relatives", &base_relatives, vec![bones, 4, 4]), ("inverse_base_absolutes", &inverse_base_absolutes, vec![bones, 4, 4])] {
        if v.shape() != want {
            return Err(format!("`{name}` has shape {:?}, but {bones} bones need {want:?}", v.shape()));
        }
    }
    let complicated = !matches!(us_json, Json::Array(a) if a.is_empty());
    let mut args = vec![theta];
    if complicated {
        args.push(j::f64_array(us_json, 2, "us")?);
    }
    args.extend([parents, base_relatives, inverse_base_absolutes, base_positions, weights, triangles, Value::Bool(is_mirrored), correspondences, points]);
    let entry = match (function == "objective", complicated) {
        (true, false) => "objective_simple",
        (true, true) => "objective_complicated",
        (false, false) => "jacobian_simple",
        (false, true) => "jacobian_complicated",
    };
    Ok(Prepared { entry, args, finish: as_is() })
}

/// lstm: the gradient is sent flat, main_params row by row, then
/// extra_params row by row.
fn lstm(function: &str, input: &Json) -> Result<Prepared, String> {
    let main = j::f64_array(field(input, "main_params")?, 2, "main_params")?;
    let extra = j::f64_array(field(input, "extra_params")?, 2, "extra_params")?;
    let state = j::f64_array(field(input, "state")?, 2, "state")?;
    let sequence = j::f64_array(field(input, "sequence")?, 2, "sequence")?;
    let (ms, es, ss, qs) = (main.shape(), extra.shape(), state.shape(), sequence.shape());
    if ms[0] % 2 != 0 || ms[0] == 0 {
        return Err(format!("`main_params` must have 2 rows per layer, not {}", ms[0]));
    }
    if es[0] != 3 {
        return Err(format!("`extra_params` must have 3 rows, not {}", es[0]));
    }
    if qs[0] < 2 {
        return Err(format!("`sequence` must have at least 2 characters, not {}", qs[0]));
    }
    let _ = ss;
    let args = vec![main, extra, state, sequence];
    if function == "objective" {
        return Ok(Prepared { entry: "objective", args, finish: as_is() });
    }
    let finish: Finish = Box::new(|v| {
        let mut flat = j::f64_data(j::component(v, 0)?)?;
        flat.extend(j::f64_data(j::component(v, 1)?)?);
        Ok(Json::from(flat))
    });
    Ok(Prepared { entry: "jacobian", args, finish })
}

fn saddle(function: &str, input: &Json) -> Result<Prepared, String> {
    let start = j::f64_array(field(input, "start")?, 1, "start")?;
    if start.shape() != [2] {
        return Err(format!("`start` must have 2 elements, not {}", start.shape()[0]));
    }
    Ok(Prepared { entry: mode(function), args: vec![start], finish: as_is() })
}

fn particle(function: &str, input: &Json) -> Result<Prepared, String> {
    let w = j::number(field(input, "w")?, "w")?;
    Ok(Prepared { entry: mode(function), args: vec![Value::F64(w)], finish: as_is() })
}

fn mode(function: &str) -> &'static str {
    match function {
        "rr" => "rr",
        "ff" => "ff",
        "fr" => "fr",
        _ => "rf",
    }
}
