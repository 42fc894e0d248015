//! `arden bench`, run as a process: the JSON report on both backends, the
//! compile cache seen from it, run-time errors and the help text.

mod common;
use common::{TempDir, c_compiler_or_skip};
use std::process::{Command, Output};

/// `arden ARGS` with its own C cache directory.
fn arden(cache: &TempDir, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arden")).args(args).env("ARDEN_CACHE_DIR", &cache.0).env_remove("ARDEN_CFLAGS").output().expect("the arden binary runs")
}

#[track_caller]
fn assert_exit(o: &Output, code: i32) {
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(code), "--- stdout:\n{out}\n--- stderr:\n{err}");
    assert!(!err.contains("internal compiler error") && !err.contains("panicked"), "{err}");
}

const DOT: [&str; 7] = ["examples/dot.ard", "--entry", "dot", "--arg", "[1, 2, 3]", "--arg", "[4, 5, 6]"];

/// `arden bench examples/dot.ard ... --runs 3 --min-seconds 0 --json EXTRA`, parsed.
fn bench_json(cache: &TempDir, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["bench"];
    args.extend(DOT);
    args.extend(["--runs", "3", "--min-seconds", "0", "--json"]);
    args.extend(extra);
    let o = arden(cache, &args);
    assert_exit(&o, 0);
    let text = String::from_utf8(o.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "one JSON object on one line: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The fields every report has, with sane values.
#[track_caller]
fn check_times(j: &serde_json::Value) {
    assert_eq!(j["entry"], "dot");
    assert_eq!(j["runs"], 3, "{j}");
    let (min, median, mean) = (j["min_ns"].as_u64().unwrap(), j["median_ns"].as_u64().unwrap(), j["mean_ns"].as_u64().unwrap());
    assert!(min > 0 && min <= median && min <= mean, "{j}");
    // a dot product of 3 elements takes far less than a second a call
    assert!(mean < 1_000_000_000, "{j}");
    assert!(j["compile_ms"].as_f64().unwrap() >= 0.0, "{j}");
    assert!(j["frontend_ms"].as_f64().unwrap() > 0.0, "{j}");
    assert!(j["total_s"].as_f64().unwrap() > 0.0, "{j}");
}

#[test]
fn json_report_on_the_interpreter() {
    let cache = TempDir::new("interp");
    let j = bench_json(&cache, &["--backend", "interp"]);
    check_times(&j);
    assert_eq!(j["backend"], "interp");
    assert_eq!(j["threads"], 1);
    assert_eq!(j["compile_ms"], 0.0);
    assert_eq!(j["cached"], false);
    assert!(j["peak_bytes"].is_null(), "{j}");
}

#[test]
fn json_report_on_the_c_backend_compiled_then_cached() {
    if !c_compiler_or_skip("json_report_on_the_c_backend_compiled_then_cached") {
        return;
    }
    let cache = TempDir::new("c");
    let first = bench_json(&cache, &["--backend", "c", "--threads", "1"]);
    check_times(&first);
    assert_eq!(first["backend"], "c");
    assert_eq!(first["threads"], 1);
    assert_eq!(first["cached"], false, "a fresh cache directory: {first}");
    assert!(first["compile_ms"].as_f64().unwrap() > 0.0, "{first}");
    // the result (one f64) is the only array-free output: no big buffers
    let peak = first["peak_bytes"].as_i64().unwrap();
    assert!((0..1 << 20).contains(&peak), "{first}");

    let second = bench_json(&cache, &["--backend", "c", "--threads", "2"]);
    check_times(&second);
    assert_eq!(second["threads"], 2);
    assert_eq!(second["cached"], true, "the library of the first run: {second}");

    // the default backend is C when a compiler is found
    let default = bench_json(&cache, &[]);
    assert_eq!(default["backend"], "c");
}

#[test]
fn min_seconds_adds_runs() {
    let cache = TempDir::new("min");
    let mut args = vec!["bench"];
    args.extend(DOT);
    args.extend(["--backend", "interp", "--runs", "1", "--min-seconds", "0.05", "--json"]);
    let o = arden(&cache, &args);
    assert_exit(&o, 0);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // a call takes microseconds: 0.05 s needs many more than one
    assert!(j["runs"].as_u64().unwrap() > 10, "{j}");
    assert!(j["total_s"].as_f64().unwrap() >= 0.05, "{j}");
}

#[test]
fn table_without_json() {
    let cache = TempDir::new("table");
    let mut args = vec!["bench"];
    args.extend(DOT);
    args.extend(["--backend", "interp", "--runs", "2", "--min-seconds", "0"]);
    let o = arden(&cache, &args);
    assert_exit(&o, 0);
    let out = String::from_utf8(o.stdout).unwrap();
    for word in ["backend interp", "min", "median", "mean", "2 timed"] {
        assert!(out.contains(word), "{word} missing from:\n{out}");
    }
}

#[test]
fn runtime_error_exits_1_with_the_message() {
    let cache = TempDir::new("err");
    let prog = cache.0.join("oob.ard");
    std::fs::write(&prog, "entry pick [n] (a: [n]f64) (i: i64) : f64 = a[i]\n").unwrap();
    let prog = prog.display().to_string();
    let mut backends = vec!["interp"];
    if c_compiler_or_skip("runtime_error_exits_1_with_the_message (the C half)") {
        backends.push("c");
    }
    for b in backends {
        let o = arden(&cache, &["bench", &prog, "--arg", "[1, 2]", "--arg", "5", "--backend", b, "--runs", "3", "--min-seconds", "0", "--json"]);
        assert_exit(&o, 1);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("error: runtime error: index out of bounds") && err.contains("oob.ard:1:47") && err.contains("index 5 into an axis of size 2"),
            "{b}: {err}"
        );
        assert!(o.stdout.is_empty(), "no report after an error");
    }
}

#[test]
fn argument_and_usage_errors() {
    let cache = TempDir::new("usage");
    // a missing argument: a user error, as for `arden run`
    let o = arden(&cache, &["bench", "examples/dot.ard", "--entry", "dot", "--arg", "[1]", "--backend", "interp"]);
    assert_exit(&o, 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("takes 2 arguments"));
    // several entries and no --entry: a usage error
    let o = arden(&cache, &["bench", "examples/dot.ard"]);
    assert_exit(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("arden bench --help"));
    let o = arden(&cache, &["bench", "examples/dot.ard", "--min-seconds", "-1"]);
    assert_exit(&o, 2);
}

#[test]
fn help_has_every_flag_and_an_example() {
    let cache = TempDir::new("help");
    let o = arden(&cache, &["bench", "--help"]);
    assert_exit(&o, 0);
    let out = String::from_utf8(o.stdout).unwrap();
    for flag in ["FILE", "--entry", "--arg", "--backend", "--threads", "--runs", "--min-seconds", "--json", "Examples:", "arden bench "] {
        assert!(out.contains(flag), "{flag} missing from:\n{out}");
    }
    let o = arden(&cache, &["--help"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("bench"));
}
