//! `arden gradbench` against real GradBench runs of the golden tool.
//!
//! `../shared/gradbench/logs/*.jsonl` (beside the repository; the small
//! ones are also carried in `tests/gradbench_logs`) are logs of
//! GradBench's harness driving its golden tool: each line is a `message`
//! sent to the tool or the golden tool's `response`. Every log is replayed
//! here: each message goes to a fresh `arden gradbench` process, each
//! response's protocol is checked, and each `evaluate` output is compared
//! with the golden output by GradBench's rule (PROTOCOL.md §0: same JSON
//! structure and keys, integers equal, numbers within
//! |a-b| / max(1, |a|+|b|) ≤ 1e-4); saddle and particle also against the
//! constants their evals validate with.
//!
//! Where the golden comparison is weak, extra checks: ode's gradient
//! against central differences of the (golden-checked) primal, det's
//! gradient against cofactors computed here by Gaussian elimination, the
//! protocol's failure responses, and the timing loop.

mod common;

use arden::gradbench::json::kind;
use serde_json::{Value as Json, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

// ---- where the logs are ------------------------------------------------------

/// `../shared/gradbench/logs` beside the repository, when it is there (CI
/// always has it).
fn shared_logs() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/gradbench/logs");
    dir.is_dir().then_some(dir)
}

/// The small logs (under 100 kB) carried in the repository, so that a
/// user's clone, which has nothing beside it, still replays them; the
/// large ones (gmm, kmeans, lstm, ht) are replayed only where `../shared`
/// is present.
fn carried_logs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gradbench_logs")
}

/// The log's lines, or `None` (with the reason printed) when this clone has
/// no copy of it.
fn log_lines(name: &str) -> Option<Vec<Json>> {
    let file = format!("{name}.jsonl");
    let path = shared_logs().map(|d| d.join(&file)).filter(|p| p.is_file()).unwrap_or_else(|| carried_logs().join(&file));
    if !path.is_file() {
        eprintln!(
            "skipped: logs/{file} is not carried in tests/gradbench_logs (too large) and ../shared/gradbench/logs \
             is not beside this clone"
        );
        return None;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    Some(
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}:{}: not JSON: {e}", path.display(), i + 1)))
            .collect(),
    )
}

fn log_names(dir: &std::path::Path) -> Vec<String> {
    let mut logs: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".jsonl")).map(str::to_string))
        .collect();
    logs.sort();
    logs
}

// ---- the tool as a child process ---------------------------------------------

struct Tool {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Tool {
    fn start(extra: &[&str]) -> Tool {
        let mut child = Command::new(env!("CARGO_BIN_EXE_arden"))
            .arg("gradbench")
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start arden gradbench");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Tool { child, stdin, stdout }
    }

    /// Send raw bytes (a line, newline added).
    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).and_then(|_| stdin.write_all(b"\n")).and_then(|_| stdin.flush()).expect("write to the tool");
    }

    /// The next response line, parsed.
    fn receive(&mut self) -> Json {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).expect("read from the tool");
        assert!(n > 0, "the tool closed its stdout (crashed?)");
        assert!(line.ends_with('\n'), "response not terminated by a newline: {line:?}");
        assert_eq!(line.trim_end_matches('\n').lines().count(), 1, "a response must be one line: {line:?}");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("the tool wrote a line that is not JSON ({e}): {line}"))
    }

    fn ask(&mut self, msg: &Json) -> Json {
        self.send_raw(msg.to_string().as_bytes());
        self.receive()
    }

    /// Close stdin: the tool must exit 0 without writing anything more.
    fn finish(mut self) {
        drop(self.stdin.take());
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        assert!(rest.is_empty(), "the tool wrote more than one line per message: {rest:?}");
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the tool exited with {status}");
    }
}

// ---- GradBench's comparison rule ------------------------------------------------

/// Mismatches between an expected and an actual output, by
/// `gradbench.comparison.compare_json_objects`: types must agree (an integer
/// and a float are interchangeable), objects have the same keys, lists the
/// same length, integers are equal, two numbers of which one is a float are
/// within |a-b| / max(1, |a|+|b|) ≤ tolerance (NaN passes, as in numpy).
fn compare(expected: &Json, actual: &Json, tol: f64, path: &str, out: &mut Vec<String>) {
    match (expected, actual) {
        (Json::Number(e), Json::Number(a)) => {
            if e.is_f64() || a.is_f64() {
                let (e, a) = (e.as_f64().unwrap(), a.as_f64().unwrap());
                let d = (a - e).abs() / (a.abs() + e.abs()).max(1.0);
                if d > tol {
                    out.push(format!("{path}: {e} != {a}"));
                }
            } else if e != a {
                out.push(format!("{path}: {e} != {a}"));
            }
        }
        (Json::Array(e), Json::Array(a)) => {
            if e.len() != a.len() {
                out.push(format!("{path}: expected a list of length {}, got length {}", e.len(), a.len()));
            } else {
                for (i, (x, y)) in e.iter().zip(a).enumerate() {
                    compare(x, y, tol, &format!("{path}[{i}]"), out);
                }
            }
        }
        (Json::Object(e), Json::Object(a)) => {
            let keys: std::collections::BTreeSet<&String> = e.keys().chain(a.keys()).collect();
            for k in keys {
                match (e.get(k), a.get(k)) {
                    (Some(x), Some(y)) => compare(x, y, tol, &format!("{path}.{k}"), out),
                    (None, _) => out.push(format!("unexpected key {path}.{k}")),
                    (_, None) => out.push(format!("missing key {path}.{k}")),
                }
            }
        }
        (e, a) if std::mem::discriminant(e) != std::mem::discriminant(a) => out.push(format!("{path}: expected {}, got {}", kind(e), kind(a))),
        (e, a) => {
            if e != a {
                out.push(format!("{path}: {e} != {a}"))
            }
        }
    }
}

fn mismatches(expected: &Json, actual: &Json) -> Vec<String> {
    let mut out = vec![];
    compare(expected, actual, 1e-4, "output", &mut out);
    out
}

#[test]
fn the_comparison_rule_is_gradbenchs() {
    assert!(mismatches(&json!(1.0), &json!(1.00005)).is_empty());
    assert!(mismatches(&json!(1000.0), &json!(1000.15)).is_empty(), "relative for large values");
    assert!(!mismatches(&json!(1000.0), &json!(1000.25)).is_empty());
    assert!(!mismatches(&json!(0.0), &json!(0.0002)).is_empty(), "absolute for small values");
    assert!(mismatches(&json!(2), &json!(2.0)).is_empty(), "int and float are interchangeable");
    assert!(!mismatches(&json!(2), &json!(3)).is_empty(), "integers are exact");
    assert!(!mismatches(&json!([1.0]), &json!(1.0)).is_empty());
    assert!(!mismatches(&json!([1.0, 2.0]), &json!([1.0])).is_empty());
    assert!(!mismatches(&json!({"a": 1.0}), &json!({"a": 1.0, "d": 2})).is_empty(), "an extra key is a mismatch");
    assert!(!mismatches(&json!({"a": 1.0}), &json!({"b": 1.0})).is_empty());
}

// ---- protocol checks ---------------------------------------------------------------

/// A timing list: `{"name": string, "nanoseconds": non-negative integer}`s.
fn check_timings(t: &Json, ctx: &str) -> Vec<(String, u64)> {
    let list = t.as_array().unwrap_or_else(|| panic!("{ctx}: `timings` must be a list: {t}"));
    list.iter()
        .map(|e| {
            let obj = e.as_object().unwrap_or_else(|| panic!("{ctx}: a timing must be an object: {e}"));
            let keys: Vec<&String> = obj.keys().collect();
            assert_eq!(keys.len(), 2, "{ctx}: a timing has exactly `name` and `nanoseconds`: {e}");
            let name = obj["name"].as_str().unwrap_or_else(|| panic!("{ctx}: timing name must be a string: {e}"));
            let ns = obj["nanoseconds"].as_u64().unwrap_or_else(|| panic!("{ctx}: nanoseconds must be a non-negative integer: {e}"));
            assert!(obj["nanoseconds"].is_u64(), "{ctx}: nanoseconds written as an integer: {e}");
            (name.to_string(), ns)
        })
        .collect()
}

/// Check `response` as the answer to `msg` (for every kind), and return it.
fn check_response(msg: &Json, response: &Json, ctx: &str) {
    assert_eq!(response["id"], msg["id"], "{ctx}: the response must carry the message's id: {response}");
    let obj = response.as_object().unwrap_or_else(|| panic!("{ctx}: a response is an object: {response}"));
    match msg["kind"].as_str().unwrap() {
        "start" => {
            for k in obj.keys() {
                assert!(["id", "tool", "config"].contains(&k.as_str()), "{ctx}: unexpected key `{k}` in {response}");
            }
        }
        "define" => {
            assert_eq!(response["success"], json!(true), "{ctx}: define failed: {response}");
            if let Some(t) = obj.get("timings") {
                for (name, _) in check_timings(t, ctx) {
                    assert_ne!(name, "evaluate", "{ctx}: compilation must not be timed as `evaluate`");
                }
            }
        }
        "evaluate" => {
            assert_eq!(response["success"], json!(true), "{ctx}: evaluate failed: {response}");
            assert!(obj.contains_key("output"), "{ctx}: no output");
            let timings = check_timings(&response["timings"], ctx);
            let runs = timings.iter().filter(|(n, _)| n == "evaluate").count();
            let min_runs = msg["input"].get("min_runs").and_then(Json::as_u64).unwrap_or(1).max(1) as usize;
            assert!(runs >= min_runs, "{ctx}: {runs} evaluate timings for min_runs = {min_runs}");
        }
        _ => assert_eq!(obj.len(), 1, "{ctx}: `{}` needs only the id: {response}", msg["kind"]),
    }
}

// ---- replaying a log ------------------------------------------------------------------

/// What to do with each evaluate besides comparing it with the golden output.
type Extra = fn(tool: &mut Tool, msg: &Json, ours: &Json, golden: &Json) -> Vec<String>;

/// Replay `logs/NAME.jsonl`; `special` handles evals whose golden output is
/// not the whole story. Returns the number of evaluate outputs compared.
fn replay(name: &str, tool_args: &[&str], special: Option<Extra>) -> usize {
    let Some(lines) = log_lines(name) else { return 0 };
    let mut tool = Tool::start(tool_args);
    let mut pending: Option<(Json, Json)> = None;
    let mut compared = 0;
    let mut failures = vec![];
    for (i, line) in lines.iter().enumerate() {
        let ctx = format!("logs/{name}.jsonl:{}", i + 1);
        if let Some(msg) = line.get("message") {
            assert!(pending.is_none(), "{ctx}: two messages in a row in the log");
            let response = tool.ask(msg);
            check_response(msg, &response, &ctx);
            if msg["kind"] == "evaluate" {
                let ns: u64 = check_timings(&response["timings"], &ctx).iter().filter(|(n, _)| n == "evaluate").map(|(_, t)| t).sum();
                eprintln!(
                    "{name}: {} {} — {:.3} ms",
                    msg["function"].as_str().unwrap_or("?"),
                    msg.get("description").and_then(Json::as_str).unwrap_or(""),
                    ns as f64 / 1e6
                );
            }
            pending = Some((msg.clone(), response));
        } else if let Some(golden) = line.get("response") {
            let (msg, ours) = pending.take().unwrap_or_else(|| panic!("{ctx}: a response without a message"));
            assert_eq!(golden["id"], msg["id"], "{ctx}: the log's response does not answer its message");
            if msg["kind"] != "evaluate" {
                continue;
            }
            compared += 1;
            let what = format!("{ctx}: {} {}", msg["function"], msg.get("description").unwrap_or(&Json::Null));
            let out = &ours["output"];
            let gold = &golden["output"];
            let mut found = match special {
                Some(f) => f(&mut tool, &msg, out, gold),
                None => mismatches(gold, out),
            };
            found.truncate(10);
            if !found.is_empty() {
                failures.push(format!("{what}:\n  {}", found.join("\n  ")));
            }
        } else {
            panic!("{ctx}: neither a message nor a response");
        }
    }
    tool.finish();
    assert!(failures.is_empty(), "{name}: outputs differ from the golden tool's:\n{}", failures.join("\n"));
    assert!(compared > 0, "{name}: the log has no evaluate messages");
    compared
}

macro_rules! replay_tests {
    ($($test:ident: $log:literal $(, $special:expr)?;)*) => {
        $(
            #[test]
            fn $test() {
                #[allow(unused_mut, unused_assignments)]
                let mut special: Option<Extra> = None;
                $( special = Some($special); )?
                replay($log, &[], special);
            }
        )*
        /// Every log in the directory has a replay test above.
        const REPLAYED: &[&str] = &[$($log),*];
    };
}

replay_tests! {
    replay_hello: "hello", hello_check;
    replay_llsq: "llsq";
    replay_lse: "lse";
    replay_ode: "ode", ode_check;
    replay_det: "det", det_check;
    replay_kmeans: "kmeans";
    replay_gmm: "gmm";
    replay_ba: "ba";
    replay_ht_complicated: "ht";
    replay_ht_simple: "ht-simple";
    replay_lstm: "lstm";
    replay_saddle: "saddle", saddle_check;
    replay_particle: "particle", particle_check;
}

#[test]
fn every_log_is_replayed() {
    let mut known: Vec<String> = REPLAYED.iter().map(|s| s.to_string()).collect();
    known.sort();
    if let Some(dir) = shared_logs() {
        assert_eq!(log_names(&dir), known, "every log in ../shared/gradbench/logs needs a replay test");
        // The carried copies are the shared logs, byte for byte.
        for name in log_names(&carried_logs()) {
            let file = format!("{name}.jsonl");
            let same = std::fs::read(carried_logs().join(&file)).ok() == std::fs::read(dir.join(&file)).ok();
            assert!(same, "tests/gradbench_logs/{file} differs from ../shared/gradbench/logs/{file}: copy it again");
        }
    } else {
        eprintln!("../shared/gradbench/logs is not beside this clone: checking the carried logs only");
    }
    for name in log_names(&carried_logs()) {
        assert!(known.contains(&name), "tests/gradbench_logs/{name}.jsonl has no replay test");
    }
}

/// The same gmm runs with `--multithreaded` (OpenMP threads) give the same outputs.
#[test]
fn replay_gmm_multithreaded() {
    replay("gmm", &["--multithreaded"], None);
}

// ---- evals with extra checks ----------------------------------------------------------

/// hello's own validation: `np.isclose(output, 2 * input)` or `input²`.
fn hello_check(_: &mut Tool, msg: &Json, ours: &Json, golden: &Json) -> Vec<String> {
    let mut found = mismatches(golden, ours);
    let (x, y) = (msg["input"].as_f64().unwrap(), ours.as_f64().unwrap_or(f64::NAN));
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-8 + 1e-5 * b.abs();
    let want = if msg["function"] == "square" { x * x } else { 2.0 * x };
    if !close(y, want) {
        found.push(format!("{} of {x} is {want}, not {y}", msg["function"]));
    }
    found
}

/// saddle's validation constant (its run.py): every coordinate 8.246e-6.
fn saddle_check(_: &mut Tool, _: &Json, ours: &Json, golden: &Json) -> Vec<String> {
    let mut found = mismatches(golden, ours);
    found.extend(mismatches(&json!(vec![8.246324826140356e-06; 4]), ours));
    found
}

/// particle's validation constant (its run.py).
fn particle_check(_: &mut Tool, _: &Json, ours: &Json, golden: &Json) -> Vec<String> {
    let mut found = mismatches(golden, ours);
    found.extend(mismatches(&json!(0.2071918746486116), ours));
    found
}

fn floats(j: &Json) -> Vec<f64> {
    j.as_array().unwrap_or_else(|| panic!("expected a list of numbers: {j}")).iter().map(|x| x.as_f64().unwrap()).collect()
}

/// ode: the golden tool's `gradient` is not the derivative of RK4 but of
/// the ODE's exact solution (y_{n-1}(tf) = x_0 ··· x_{n-1} tf^n / n!), so
/// where one RK4 step cannot reach the last component (n = 5, s = 1: RK4's
/// y_4 is identically 0, and so is its gradient) no honest derivative
/// matches it. Our gradient must equal central differences of our primal
/// (which is compared with the golden RK4 primal in the same log), and
/// must match the golden output by GradBench's rule wherever the golden
/// output is itself the RK4 derivative (agrees with the differences).
fn ode_check(tool: &mut Tool, msg: &Json, ours: &Json, golden: &Json) -> Vec<String> {
    if msg["function"] != "gradient" {
        return mismatches(golden, ours);
    }
    let x = floats(&msg["input"]["x"]);
    let s = msg["input"]["s"].clone();
    let n = x.len();
    let g = floats(ours);
    let mut last = |x: &[f64]| -> f64 {
        let r = tool.ask(&json!({"id": 1_000_000, "kind": "evaluate", "module": "ode", "function": "primal",
                                 "input": {"x": x, "s": s, "min_runs": 1, "min_seconds": 0}}));
        assert_eq!(r["success"], json!(true), "{r}");
        floats(&r["output"])[n - 1]
    };
    let mut fd = vec![0.0; n];
    for i in 0..n {
        let h = 1e-5 * x[i].abs().max(1e-3);
        let (mut up, mut down) = (x.clone(), x.clone());
        up[i] += h;
        down[i] -= h;
        fd[i] = (last(&up) - last(&down)) / (2.0 * h);
    }
    let scale = g.iter().chain(&fd).fold(0.0f64, |m, v| m.max(v.abs()));
    let mut found: Vec<String> = (0..n)
        .filter(|&i| (g[i] - fd[i]).abs() > 1e-6 * scale + 1e-300)
        .map(|i| format!("d y[n-1] / d x[{i}]: AD {} but central differences {}", g[i], fd[i]))
        .collect();
    let golden_is_rk4 = mismatches(golden, &json!(fd)).is_empty();
    if golden_is_rk4 {
        found.extend(mismatches(golden, ours));
    } else {
        eprintln!(
            "ode: {}: the golden gradient is the exact solution's, not RK4's (central differences of the RK4 primal disagree with it); checked against the differences only",
            msg["description"]
        );
    }
    found
}

/// det: the golden comparison, plus the gradient against cofactors and the
/// primal against Gaussian elimination.
fn det_check(_: &mut Tool, msg: &Json, ours: &Json, golden: &Json) -> Vec<String> {
    let mut found = mismatches(golden, ours);
    let a = floats(&msg["input"]["A"]);
    let ell = msg["input"]["ell"].as_u64().unwrap() as usize;
    found.extend(check_det_output(&a, ell, &msg["function"], ours));
    found
}

fn check_det_output(a: &[f64], ell: usize, function: &Json, ours: &Json) -> Vec<String> {
    if function == "primal" {
        let (want, got) = (det_by_elimination(a, ell), ours.as_f64().unwrap());
        return if (want - got).abs() <= 1e-10 * want.abs().max(1e-3) { vec![] } else { vec![format!("det is {want} by elimination, not {got}")] };
    }
    let g = floats(ours);
    let c = cofactors(a, ell);
    let scale = c.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    (0..ell * ell)
        .filter(|&k| (g[k] - c[k]).abs() > 1e-10 * scale.max(1e-3))
        .map(|k| format!("d det / d A[{}][{}] is the cofactor {}, not {}", k / ell, k % ell, c[k], g[k]))
        .collect()
}

/// The determinant by Gaussian elimination with partial pivoting.
fn det_by_elimination(a: &[f64], n: usize) -> f64 {
    let mut m = a.to_vec();
    let mut det = 1.0;
    for col in 0..n {
        let p = (col..n).max_by(|&i, &j| m[i * n + col].abs().total_cmp(&m[j * n + col].abs())).unwrap();
        if m[p * n + col] == 0.0 {
            return 0.0;
        }
        if p != col {
            for k in 0..n {
                m.swap(p * n + k, col * n + k);
            }
            det = -det;
        }
        det *= m[col * n + col];
        for r in col + 1..n {
            let f = m[r * n + col] / m[col * n + col];
            for k in col..n {
                m[r * n + k] -= f * m[col * n + k];
            }
        }
    }
    det
}

/// cof[i][j] = (-1)^(i+j) det(A without row i and column j), row-major.
fn cofactors(a: &[f64], n: usize) -> Vec<f64> {
    let mut out = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            let minor: Vec<f64> = (0..n).filter(|&r| r != i).flat_map(|r| (0..n).filter(move |&c| c != j).map(move |c| a[r * n + c])).collect();
            let sign = if (i + j) % 2 == 0 { 1.0 } else { -1.0 };
            out[i * n + j] = sign * det_by_elimination(&minor, n - 1);
        }
    }
    out
}

/// A small deterministic generator for inputs.
fn uniform(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect()
}

fn evaluate(tool: &mut Tool, id: u64, module: &str, function: &str, input: Json) -> Json {
    let msg = json!({"id": id, "kind": "evaluate", "module": module, "function": function, "input": input});
    let r = tool.ask(&msg);
    check_response(&msg, &r, &format!("{module} {function}"));
    r
}

/// det beyond the logs: ell = 1, 2, 3, 7 (one padded 8 × 8 minor) and
/// ell = 10 (rows 0 and 1 fixed per chunk: the path the large workloads
/// take), against elimination and cofactors.
#[test]
fn det_gradient_is_the_cofactor_matrix() {
    let mut tool = Tool::start(&[]);
    let mut failures = vec![];
    for (k, ell) in [1usize, 2, 3, 7, 10].into_iter().enumerate() {
        let a: Vec<f64> = uniform(k as u64 + 11, ell * ell).iter().map(|v| 2.0 * v - 1.0).collect();
        for function in ["primal", "gradient"] {
            let r = evaluate(&mut tool, k as u64, "det", function, json!({"A": a, "ell": ell, "min_runs": 1, "min_seconds": 0}));
            failures.extend(check_det_output(&a, ell, &json!(function), &r["output"]).into_iter().map(|m| format!("ell = {ell}: {m}")));
        }
    }
    tool.finish();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// ode with small n, where RK4's gradient is far from 0, against central
/// differences (the replay covers n = 5, 10 of the log; here n = 3..8 with
/// several step counts, reaching every component).
#[test]
fn ode_gradient_matches_differences() {
    let mut tool = Tool::start(&[]);
    let mut failures = vec![];
    for (k, (n, s)) in [(3usize, 1i64), (5, 2), (8, 3), (6, 20)].into_iter().enumerate() {
        let x = uniform(k as u64 + 3, n);
        let msg = json!({"id": 0, "kind": "evaluate", "module": "ode", "function": "gradient",
                         "input": {"x": x, "s": s, "min_runs": 1, "min_seconds": 0}});
        let r = tool.ask(&msg);
        check_response(&msg, &r, "ode");
        let g = floats(&r["output"]);
        assert!(g.iter().all(|v| v.abs() > 1e-8), "n = {n}, s = {s}: the gradient should not vanish: {g:?}");
        let errors = ode_check(&mut tool, &msg, &r["output"], &r["output"]);
        failures.extend(errors.into_iter().map(|e| format!("n = {n}, s = {s}: {e}")));
    }
    tool.finish();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---- protocol robustness ------------------------------------------------------------------

fn failed(r: &Json, id: Json, mentions: &str) {
    assert_eq!(r["id"], id, "{r}");
    assert_eq!(r["success"], json!(false), "expected a failure response: {r}");
    let e = r["error"].as_str().unwrap_or_else(|| panic!("a failure needs an error message: {r}"));
    assert!(e.contains(mentions), "the error should mention `{mentions}`: {e}");
}

/// Malformed messages, unknown kinds, modules and functions, and inputs of
/// the wrong shape get responses (`success: false` with an error where the
/// protocol has a `success`), and the tool goes on answering.
#[test]
fn bad_messages_get_failure_responses() {
    let mut tool = Tool::start(&[]);
    // a good evaluate, asked after each bad message: the tool still works
    let mut next_id = 100;
    let mut still_works = |tool: &mut Tool| {
        next_id += 1;
        let r = evaluate(tool, next_id, "lse", "primal", json!({"x": [1.0, 2.0, 3.0], "min_runs": 1, "min_seconds": 0}));
        assert!((r["output"].as_f64().unwrap() - 3.4076059644443806).abs() < 1e-12, "{r}");
    };
    let r = tool.ask(&json!({"id": 0, "kind": "start", "eval": "lse"}));
    assert_eq!(r, json!({"id": 0, "tool": "arden"}));
    let r = tool.ask(&json!({"id": 1, "kind": "define", "module": "lse"}));
    assert_eq!(r["success"], json!(true));
    still_works(&mut tool);

    tool.send_raw(b"{\"id\": 2, \"kind\": \"evaluate\"");
    failed(&tool.receive(), Json::Null, "malformed message");
    still_works(&mut tool);
    tool.send_raw(b"\xff\xfe not utf-8");
    failed(&tool.receive(), Json::Null, "malformed message");
    tool.send_raw(b"[1, 2, 3]");
    failed(&tool.receive(), Json::Null, "expected a JSON object");
    failed(&tool.ask(&json!({"kind": "start"})), Json::Null, "no `id`");
    failed(&tool.ask(&json!({"id": 3})), json!(3), "no `kind`");
    // a blank line is not a message: no response
    tool.send_raw(b"");
    still_works(&mut tool);

    // unknown kinds need only the id (PROTOCOL.md §0)
    assert_eq!(tool.ask(&json!({"id": 4, "kind": "frobnicate", "x": 1})), json!({"id": 4}));
    assert_eq!(tool.ask(&json!({"id": 5, "kind": "analysis", "of": 101, "valid": false, "error": "x"})), json!({"id": 5}));

    failed(&tool.ask(&json!({"id": 6, "kind": "define", "module": "fft"})), json!(6), "unknown module `fft`");
    failed(&tool.ask(&json!({"id": 7, "kind": "define"})), json!(7), "module");
    let ev = |id: u64, module: &str, function: &str, input: Json| json!({"id": id, "kind": "evaluate", "module": module, "function": function, "input": input});
    failed(&tool.ask(&ev(8, "fft", "primal", json!({}))), json!(8), "unknown module `fft`");
    failed(&tool.ask(&ev(9, "lse", "hessian", json!({"x": [1.0]}))), json!(9), "no function `hessian`");
    failed(&tool.ask(&json!({"id": 10, "kind": "evaluate", "module": "lse", "function": "primal"})), json!(10), "input");
    still_works(&mut tool);

    // inputs of the wrong shape or type
    failed(&tool.ask(&ev(11, "lse", "primal", json!({"x": [[1.0, 2.0]]}))), json!(11), "`x`");
    failed(&tool.ask(&ev(12, "lse", "primal", json!({"x": "abc"}))), json!(12), "`x`");
    failed(&tool.ask(&ev(13, "lse", "gradient", json!({"y": [1.0]}))), json!(13), "no field `x`");
    failed(&tool.ask(&ev(14, "lse", "primal", json!([1.0, 2.0]))), json!(14), "JSON object");
    failed(&tool.ask(&ev(15, "kmeans", "cost", json!({"points": [[1.0, 2.0]], "centroids": [[1.0, 2.0, 3.0]]}))), json!(15), "centroids");
    failed(&tool.ask(&ev(16, "kmeans", "cost", json!({"points": [[1.0, 2.0], [3.0]], "centroids": [[1.0, 2.0]]}))), json!(16), "not a regular array");
    let gmm_input = json!({"d": 2, "k": 1, "n": 1, "m": 0, "gamma": 1.0, "x": [[0.1, 0.2]], "alpha": [0.5],
                           "mu": [[0.0, 0.0]], "q": [[0.1, 0.1]], "l": [[0.3, 0.4]], "min_runs": 1, "min_seconds": 0});
    failed(&tool.ask(&ev(17, "gmm", "objective", gmm_input.clone())), json!(17), "`l`");
    let mut good = gmm_input.clone();
    good["l"] = json!([[0.3]]);
    assert_eq!(evaluate(&mut tool, 18, "gmm", "jacobian", good)["success"], json!(true));
    failed(&tool.ask(&ev(19, "det", "primal", json!({"A": [1.0, 2.0, 3.0, 4.0], "ell": 3}))), json!(19), "ell");
    failed(&tool.ask(&ev(20, "ode", "primal", json!({"x": [1.0], "s": 2.5}))), json!(20), "`s`");
    failed(&tool.ask(&ev(21, "lse", "primal", json!({"x": [1.0], "min_runs": -1}))), json!(21), "min_runs");
    failed(&tool.ask(&ev(22, "lse", "primal", json!({"x": []}))), json!(22), "empty");
    failed(&tool.ask(&ev(23, "ht", "objective", json!({"theta": [0.0]}))), json!(23), "theta");
    failed(
        &tool.ask(&ev(24, "ba", "objective", json!({"n": 1, "m": 1, "p": 1, "cam": [1.0], "x": [1.0, 2.0, 3.0], "w": 1.0, "feat": [0.0, 0.0]}))),
        json!(24),
        "cam",
    );
    still_works(&mut tool);
    tool.finish();
}

/// `min_runs` and `min_seconds`: one `evaluate` timing per run, at least
/// min_runs of them, and runs until min_seconds have been spent.
#[test]
fn timing_loop_follows_min_runs_and_min_seconds() {
    let mut tool = Tool::start(&[]);
    let x: Vec<f64> = uniform(7, 1000);
    let r = evaluate(&mut tool, 1, "lse", "gradient", json!({"x": x, "min_runs": 5, "min_seconds": 0}));
    let t = check_timings(&r["timings"], "lse");
    assert_eq!(t.len(), 5, "{r}");
    assert!(t.iter().all(|(n, _)| n == "evaluate"));
    let r = evaluate(&mut tool, 2, "lse", "primal", json!({"x": x, "min_runs": 1, "min_seconds": 0.05}));
    let t = check_timings(&r["timings"], "lse");
    let total: u64 = t.iter().map(|(_, ns)| ns).sum();
    assert!(total >= 50_000_000 && t.len() > 1, "runs until 0.05 s are spent: {} runs, {total} ns", t.len());
    // `define` reports its compile time under another name
    let r = tool.ask(&json!({"id": 3, "kind": "define", "module": "llsq"}));
    let t = check_timings(&r["timings"], "define");
    assert!(!t.is_empty() && t.iter().all(|(n, _)| n != "evaluate"), "{r}");
    tool.finish();
}

/// The `-- test:` lines of the programs in gradbench/, on the interpreter.
#[test]
fn programs_own_examples() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("gradbench");
    let mut ran = 0;
    for name in ["hello", "lse", "det", "saddle"] {
        let path = dir.join(format!("{name}.ard"));
        let text = std::fs::read_to_string(&path).unwrap();
        let prog = arden::Program::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for line in text.lines().filter_map(|l| l.strip_prefix("-- test:")) {
            let case: Json = serde_json::from_str(line).unwrap();
            let entry = prog.entry(case["entry"].as_str().unwrap()).unwrap();
            let args: Vec<arden::Value> = entry
                .params()
                .iter()
                .zip(case["args"].as_array().unwrap())
                .map(|((_, shape), j)| arden::runtime::data::value_from_json(j, shape).unwrap())
                .collect();
            let got: Json = serde_json::from_str(&entry.call(&args).unwrap().to_json()).unwrap();
            let bad = mismatches(&case["expect"], &got);
            assert!(bad.is_empty(), "{name}: {line}: {bad:?}");
            ran += 1;
        }
    }
    assert!(ran >= 6);
}

/// With a C compiler (CI has one), every entry of every eval runs compiled:
/// none falls back to the interpreter. Without one the test is skipped with
/// a note, and fails under CI.
#[test]
fn every_eval_runs_compiled() {
    if !common::c_compiler_or_skip("every_eval_runs_compiled") {
        return;
    }
    for eval in arden::gradbench::evals::EVALS {
        let prog = arden::Program::from_source(eval.file, eval.source).unwrap_or_else(|e| panic!("{}: {e}", eval.file));
        let compiled = prog.compile(arden::Backend::C).unwrap_or_else(|e| panic!("{}: {e}", eval.file));
        for name in prog.entry_names() {
            let entry = compiled.entry(name).unwrap();
            assert!(entry.refused().is_none(), "{}: `{name}` is refused by the C backend: {:?}", eval.file, entry.refused());
        }
    }
}

#[test]
fn help_describes_the_subcommand() {
    let out = Command::new(env!("CARGO_BIN_EXE_arden")).args(["gradbench", "--help"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for word in ["GradBench", "--multithreaded", "define", "evaluate", "min_runs"] {
        assert!(text.contains(word), "`arden gradbench --help` should mention {word}:\n{text}");
    }
}
