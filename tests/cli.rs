//! The `arden` command line, run as a process: help texts, exit codes
//! (0 success, 1 user error, 2 usage error), data in and out.

mod common;
use common::{TempDir, c_compiler_or_skip};
use std::process::{Command, Output};

fn arden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arden")).args(args).output().expect("the arden binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn assert_exit(o: &Output, code: i32) {
    assert_eq!(o.status.code(), Some(code), "expected exit status {code}\n--- stdout:\n{}\n--- stderr:\n{}", stdout(o), stderr(o));
    assert!(!stderr(o).contains("internal compiler error"), "{}", stderr(o));
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
}

#[test]
fn top_level_help_lists_commands() {
    let o = arden(&["--help"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    for cmd in ["check", "run", "ir"] {
        assert!(out.contains(cmd), "{cmd} missing from:\n{out}");
    }
    assert_exit(&arden(&["--version"]), 0);
}

#[test]
fn subcommand_help_mentions_every_flag() {
    let cases: [(&str, &[&str]); 3] = [
        ("check", &["FILE", "--strict-bounds"]),
        ("run", &["FILE", "--entry", "--arg", "--output", "--count-ops", "@", ".npy"]),
        ("ir", &["FILE", "--entry", "--stage", "lower"]),
    ];
    for (cmd, flags) in cases {
        for help in ["--help", "-h"] {
            let o = arden(&[cmd, help]);
            assert_exit(&o, 0);
            let out = stdout(&o);
            // The short help (`-h`) shows only the flags themselves.
            for f in flags.iter().filter(|f| help == "--help" || f.starts_with("--") || **f == "FILE") {
                assert!(out.contains(f), "`arden {cmd} {help}` does not mention {f}:\n{out}");
            }
        }
        // `arden help CMD` works too.
        assert_exit(&arden(&["help", cmd]), 0);
    }
}

#[test]
fn usage_errors_exit_2() {
    let dir = TempDir::new("usage");
    let f = dir.write("f.ard", "entry f : f64 = 1.0\n");
    for args in [
        vec![],
        vec!["frobnicate"],
        vec!["check"],
        vec!["run"],
        vec!["check", f.as_str(), "--no-such-flag"],
        vec!["run", f.as_str(), "--entry"],
        vec!["ir", f.as_str(), "--stage", "final"],
    ] {
        let o = arden(&args);
        assert_exit(&o, 2);
        assert!(!stderr(&o).is_empty(), "{args:?}: no message");
    }
    let o = arden(&["ir", &f, "--stage", "bogus"]);
    assert!(stderr(&o).contains("lower"), "allowed stages not listed:\n{}", stderr(&o));
}

#[test]
fn missing_file_exits_1() {
    let dir = TempDir::new("missing");
    let f = dir.path("nope.ard").display().to_string();
    for args in [vec!["check", f.as_str()], vec!["run", f.as_str()], vec!["ir", f.as_str()]] {
        let o = arden(&args);
        assert_exit(&o, 1);
        let err = stderr(&o);
        assert!(err.contains("error: cannot read") && err.contains("nope.ard"), "{args:?}:\n{err}");
        assert!(stdout(&o).is_empty());
    }
}

/// These need the whole compiler (parser, lowering, interpreter); they are
/// not ignored, so they fail until it exists.
mod needs_compiler {
    use super::*;
    use arden::Value;
    use arden::runtime::ArrayData;
    use arden::runtime::data::{read_npy, write_npy};

    const DOT: &str = "entry dot [n] (a: [n]f64) (b: [n]f64) : f64 = sum (for i. a[i] * b[i])\n";
    const UNPROVEN: &str = "entry f (a: [3]f64) (i: i64) : f64 = a[i]\n";
    const MULTI: &str = "\
entry scale [n] (a: [n]f64) (k: f64) : [n]f64 = for i. a[i] * k
entry pair (x: f64) : (f64, i64) = (x, 3)
";

    #[test]
    fn run_dot() {
        let dir = TempDir::new("dot");
        let f = dir.write("dot.ard", DOT);
        let o = arden(&["run", &f, "--arg", "[1,2,3]", "--arg", "[4,5,6]"]);
        assert_exit(&o, 0);
        assert_eq!(stdout(&o).trim(), "32.0");
        let o = arden(&["run", &f, "--entry", "dot", "-a", "[1, 2, 3]", "-a", "[4, 5, 6]"]);
        assert_exit(&o, 0);
        assert_eq!(stdout(&o), "32.0\n");
    }

    /// `--fast-math` lets the C compiler reassociate: a long dot product
    /// of values that do not cancel agrees with the exact one to rounding;
    /// the interpreter ignores the flag (with a note) and stays exact; the
    /// fast library is cached apart from the exact one.
    #[test]
    fn fast_math_reassociates_in_c_only() {
        let dir = TempDir::new("fastmath");
        let f = dir.write("dot.ard", DOT);
        let vec = |k: usize| format!("[{}]", (0..10_000).map(|i| format!("{}", 1.0 + ((i * k) % 7) as f64 / 3.0)).collect::<Vec<_>>().join(", "));
        let (a, b) = (dir.write("a.json", &vec(1)), dir.write("b.json", &vec(3)));
        let cache = dir.path("cache");
        let run = |extra: &[&str]| {
            let mut args = vec!["run", &f, "--arg"];
            let (aa, bb) = (format!("@{a}"), format!("@{b}"));
            args.extend([aa.as_str(), "--arg", bb.as_str()]);
            args.extend(extra);
            Command::new(env!("CARGO_BIN_EXE_arden")).args(&args).env("ARDEN_CACHE_DIR", &cache).output().unwrap()
        };
        let libraries = || std::fs::read_dir(&cache).map(|d| d.count()).unwrap_or(0);
        let exact = run(&["--backend", "c", "--threads", "1"]);
        assert_exit(&exact, 0);
        let after_exact = libraries();
        let fast = run(&["--backend", "c", "--threads", "1", "--fast-math"]);
        assert_exit(&fast, 0);
        assert!(libraries() > after_exact, "the --fast-math library shares the exact one's cache entry");
        let interp = run(&["--backend", "interp", "--fast-math"]);
        assert_exit(&interp, 0);
        assert!(stderr(&interp).contains("--fast-math applies to the C backend only"), "{}", stderr(&interp));
        let (e, q): (f64, f64) = (stdout(&exact).trim().parse().unwrap(), stdout(&fast).trim().parse().unwrap());
        assert!((e - q).abs() <= 1e-12 * e.abs(), "{e} vs {q}");
        assert_eq!(stdout(&interp), stdout(&exact), "the C backend at one thread is exact without --fast-math");
    }

    #[test]
    fn shape_mismatch_names_parameter_and_shapes() {
        let dir = TempDir::new("mismatch");
        let f = dir.write("dot.ard", DOT);
        let o = arden(&["run", &f, "--arg", "[1,2,3]", "--arg", "[1,2]"]);
        assert_exit(&o, 1);
        let err = stderr(&o);
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains("`b`"), "{err}");
        assert!(err.contains("[2]"), "{err}");
        assert!(err.contains("[n]f64") && err.contains("n = 3"), "{err}");
        assert!(stdout(&o).is_empty());
    }

    #[test]
    fn bad_argument_values() {
        let dir = TempDir::new("badargs");
        let f = dir.write("dot.ard", DOT);
        // Wrong count.
        let o = arden(&["run", &f, "--arg", "[1,2,3]"]);
        assert_exit(&o, 1);
        assert!(stderr(&o).contains("entry `dot` takes 2 arguments (a: [n]f64, b: [n]f64) but 1 was given"), "{}", stderr(&o));
        let o = arden(&["run", &f, "--arg", "[1]", "--arg", "[1]", "--arg", "[1]"]);
        assert_exit(&o, 1);
        // Not JSON, wrong rank, ragged: the parameter is named.
        for (bad, want) in [("[1,2", "cannot parse argument as JSON"), ("[[1],[2]]", "expected a 1-d array of f64"), ("true", "expected a 1-d array")] {
            let o = arden(&["run", &f, "--arg", "[1]", "--arg", bad]);
            assert_exit(&o, 1);
            let err = stderr(&o);
            assert!(err.contains("argument 2 (`b`)") && err.contains(want), "{bad}: {err}");
        }
        // Negative numbers are values, not flags.
        let o = arden(&["run", &f, "--arg", "[-1]", "--arg", "[-2]"]);
        assert_exit(&o, 0);
        assert_eq!(stdout(&o).trim(), "2.0");
    }

    #[test]
    fn output_npy_and_json() {
        let dir = TempDir::new("output");
        let f = dir.write("dot.ard", DOT);
        let out = dir.path("out.npy");
        let o = arden(&["run", &f, "--arg", "[1,2,3]", "--arg", "[4,5,6]", "--output", &out.display().to_string()]);
        assert_exit(&o, 0);
        assert!(stdout(&o).is_empty());
        assert_eq!(read_npy(&out), Ok(Value::F64(32.0)));

        let m = dir.write("multi.ard", MULTI);
        let out2 = dir.path("scaled.npy");
        let o = arden(&["run", &m, "--entry", "scale", "--arg", "[1,2]", "--arg", "3", "-o", &out2.display().to_string()]);
        assert_exit(&o, 0);
        assert_eq!(read_npy(&out2), Ok(Value::array(vec![2], ArrayData::F64(vec![3.0, 6.0].into()))));

        let out3 = dir.path("scaled.json");
        let o = arden(&["run", &m, "--entry", "scale", "--arg", "[1,2]", "--arg", "3", "-o", &out3.display().to_string()]);
        assert_exit(&o, 0);
        assert_eq!(std::fs::read_to_string(&out3).unwrap().trim(), "[3.0, 6.0]");

        // A tuple result cannot go to .npy.
        let o = arden(&["run", &m, "--entry", "pair", "--arg", "1", "--output", &dir.path("t.npy").display().to_string()]);
        assert_exit(&o, 1);
        assert!(stderr(&o).contains("tuple"), "{}", stderr(&o));
        let o = arden(&["run", &m, "--entry", "pair", "--arg", "1"]);
        assert_exit(&o, 0);
        assert_eq!(stdout(&o).trim(), "[1.0, 3]");
    }

    #[test]
    fn file_arguments() {
        let dir = TempDir::new("files");
        let f = dir.write("dot.ard", DOT);
        let a = dir.write("a.json", "[1, 2, 3]\n");
        let b = dir.path("b.npy");
        write_npy(&b, &Value::array(vec![3], ArrayData::F64(vec![4.0, 5.0, 6.0].into()))).unwrap();
        let o = arden(&["run", &f, "--arg", &format!("@{a}"), "--arg", &format!("@{}", b.display())]);
        assert_exit(&o, 0);
        assert_eq!(stdout(&o).trim(), "32.0");
        // Wrong dtype in the .npy file: both types are named.
        let bi = dir.path("bi.npy");
        write_npy(&bi, &Value::array(vec![3], ArrayData::I64(vec![4, 5, 6].into()))).unwrap();
        let o = arden(&["run", &f, "--arg", &format!("@{a}"), "--arg", &format!("@{}", bi.display())]);
        assert_exit(&o, 1);
        let err = stderr(&o);
        assert!(err.contains("int64") && err.contains("f64") && err.contains("`b`"), "{err}");
        // Missing data file.
        let o = arden(&["run", &f, "--arg", &format!("@{a}"), "--arg", "@/no/such/file.npy"]);
        assert_exit(&o, 1);
        assert!(stderr(&o).contains("cannot read"), "{}", stderr(&o));
    }

    #[test]
    fn count_ops() {
        let dir = TempDir::new("ops");
        let f = dir.write("dot.ard", DOT);
        let o = arden(&["run", &f, "--arg", "[1,2,3]", "--arg", "[4,5,6]", "--count-ops"]);
        assert_exit(&o, 0);
        assert_eq!(stdout(&o).trim(), "32.0");
        let err = stderr(&o);
        assert!(err.contains("ops: arith=") && err.contains(" reads=") && err.contains(" writes="), "{err}");
    }

    #[test]
    fn entry_selection() {
        let dir = TempDir::new("entries");
        let m = dir.write("multi.ard", MULTI);
        let o = arden(&["run", &m, "--arg", "1"]);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(err.contains("scale") && err.contains("pair") && err.contains("--entry"), "{err}");
        let o = arden(&["run", &m, "--entry", "nope", "--arg", "1"]);
        assert_exit(&o, 1);
        assert!(stderr(&o).contains("no entry point named `nope`"), "{}", stderr(&o));
        assert!(!stderr(&o).contains("did you mean"), "{}", stderr(&o));
        // a misspelt entry gets the close one
        let o = arden(&["run", &m, "--entry", "sacle", "--arg", "1"]);
        assert_exit(&o, 1);
        assert!(stderr(&o).contains("no entry point named `sacle` (did you mean `scale`?)"), "{}", stderr(&o));
    }

    #[test]
    fn runtime_error_exits_1() {
        let dir = TempDir::new("runtime");
        let f = dir.write("f.ard", UNPROVEN);
        let o = arden(&["run", &f, "--arg", "[1,2,3]", "--arg", "2"]);
        assert_exit(&o, 0);
        assert_eq!(stdout(&o).trim(), "3.0");
        let o = arden(&["run", &f, "--arg", "[1,2,3]", "--arg", "5"]);
        assert_exit(&o, 1);
        assert!(stderr(&o).starts_with("error: runtime error: "), "{}", stderr(&o));
    }

    #[test]
    fn check_and_strict_bounds() {
        let dir = TempDir::new("check");
        let d = dir.write("dot.ard", DOT);
        let o = arden(&["check", &d, "--strict-bounds"]);
        assert_exit(&o, 0);
        assert_eq!(stdout(&o), format!("{d}: ok (1 entry point)\n"));

        let f = dir.write("f.ard", UNPROVEN);
        let o = arden(&["check", &f]);
        assert_exit(&o, 0);
        assert!(stdout(&o).contains(": ok ("));
        let o = arden(&["check", &f, "--strict-bounds"]);
        assert_exit(&o, 1);
        let err = stderr(&o);
        let listed: Vec<&str> = err.lines().filter(|l| l.starts_with(&format!("{f}:1:"))).collect();
        assert_eq!(listed.len(), 1, "{err}");
        assert!(err.contains("1 bounds check could not be proven"), "{err}");

        let bad = dir.write("bad.ard", "entry g (x: f64) : f64 = x +\n");
        let o = arden(&["check", &bad]);
        assert_exit(&o, 1);
        assert!(stderr(&o).contains("bad.ard"), "{}", stderr(&o));
        assert!(stdout(&o).is_empty());
    }

    #[test]
    fn ir_prints_entries() {
        let dir = TempDir::new("ir");
        let d = dir.write("dot.ard", DOT);
        let o = arden(&["ir", &d]);
        assert_exit(&o, 0);
        assert!(stdout(&o).contains("entry dot"), "{}", stdout(&o));
        let o = arden(&["ir", &d, "--stage", "lower", "--entry", "dot"]);
        assert_exit(&o, 0);
        assert!(stdout(&o).starts_with("entry dot"));

        let m = dir.write("multi.ard", MULTI);
        let o = arden(&["ir", &m, "--entry", "pair"]);
        assert_exit(&o, 0);
        assert!(stdout(&o).contains("entry pair") && !stdout(&o).contains("entry scale"));
        let o = arden(&["ir", &m, "--entry", "nope"]);
        assert_exit(&o, 1);
    }
}

/// The C backend is the default when a C compiler is found; without one
/// (`CC` names a missing program) the run falls back to the interpreter
/// with a note; `--count-ops` alone means the interpreter.
#[test]
fn default_backend_is_c_with_a_fallback() {
    let dot = ["run", "examples/dot.ard", "--entry", "dot", "--arg", "[1]", "--arg", "[2]", "--stats"];
    if c_compiler_or_skip("default_backend_is_c_with_a_fallback (the C half)") {
        let o = arden(&dot);
        assert_exit(&o, 0);
        assert!(stderr(&o).contains("backend=c"), "{}", stderr(&o));
        assert_eq!(stdout(&o).trim(), "2.0");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_arden")).args(dot).env("CC", "/nonexistent/cc").output().unwrap();
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("note: no C compiler found") && stderr(&o).contains("backend=interp"), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "2.0");
    let o = Command::new(env!("CARGO_BIN_EXE_arden")).args(dot).args(["--backend", "c"]).env("CC", "/nonexistent/cc").output().unwrap();
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("no C compiler found"), "{}", stderr(&o));
    let o = arden(&["run", "examples/dot.ard", "--entry", "dot", "--arg", "[1]", "--arg", "[2]", "--count-ops"]);
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("ops: arith="), "{}", stderr(&o));
}

/// `--timeout` and `--max-memory` stop a run on both backends, with the
/// same message naming the loop or the statement.
#[test]
fn limits_hold_on_both_backends() {
    let dir = TempDir::new("limits");
    let spin = dir.write("spin.ard", "entry spin (x: f64) : f64 =\n  loop y = x while y > 0.0 do y + 1.0\n");
    // (`minimum a + maximum a` reads `a` twice: it is built, not fused away)
    let big = dir.write("big.ard", "entry big (n: i64) : f64 =\n  let a = for (i < n). f64 i in\n  minimum a + maximum a\n");
    let backends: &[&str] = if c_compiler_or_skip("limits_hold_on_both_backends (the C half)") { &["c", "interp"] } else { &["interp"] };
    for b in backends {
        let t0 = std::time::Instant::now();
        let o = arden(&["run", &spin, "--arg", "1", "--timeout", "0.3", "--backend", b]);
        assert_exit(&o, 1);
        assert!(stderr(&o).contains("time limit of 0.3 s exceeded at") && stderr(&o).contains("spin.ard:2:3"), "{b}: {}", stderr(&o));
        assert!(t0.elapsed().as_secs() < 30, "{b}: the time limit did not stop the loop promptly");
        let o = arden(&["run", &big, "--arg", "100000000", "--max-memory", "100M", "--backend", b]);
        assert_exit(&o, 1);
        assert!(
            stderr(&o).contains("out of memory at") && stderr(&o).contains("big.ard:2:11") && stderr(&o).contains("over the memory limit of 104857600 bytes"),
            "{b}: {}",
            stderr(&o)
        );
        let o = arden(&["run", &big, "--arg", "1000", "--max-memory", "100M", "--backend", b]);
        assert_exit(&o, 0);
        assert_eq!(stdout(&o).trim(), "999.0");
    }
}

/// `arden opt`: what fired, the default schedule, the rule list, traces,
/// counts before and after; `-O0`, `--schedule` and `--fuel` on `run`.
#[test]
fn the_optimiser_on_the_command_line() {
    for help in ["run", "ir", "build", "opt"] {
        let o = arden(&[help, "--help"]);
        assert_exit(&o, 0);
        for flag in ["-O", "--schedule", "--fuel"] {
            assert!(stdout(&o).contains(flag), "`arden {help} --help` lacks {flag}");
        }
    }
    let o = arden(&["opt", "--print-default"]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("repeat(everywhere("), "{}", stdout(&o));
    let o = arden(&["opt", "--list-rules"]);
    assert_exit(&o, 0);
    for rule in ["fuse_index_for", "licm", "onehot_sum", "mul_onehot", "cse", "dce"] {
        assert!(stdout(&o).contains(rule), "--list-rules lacks {rule}");
    }
    let a20 = "tests/ad_programs/a20_paper001.ard";
    let o = arden(&["opt", a20, "--entry", "d_dot_v1", "--trace", "--arg", "[1, 2, 3]", "--arg", "[4, 5, 6]"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("entry d_dot_v1:") && out.contains("onehot_sum") && out.contains("trace:"), "{out}");
    assert!(out.contains("ops before:") && out.contains("ops after:") && out.contains("results: identical"), "{out}");
    // the IR that runs has one loop; -O0 keeps the inner sum
    let o1 = stdout(&arden(&["ir", a20, "--entry", "d_dot_v1"]));
    let o0 = stdout(&arden(&["ir", a20, "--entry", "d_dot_v1", "-O0"]));
    assert_eq!(o1.matches(" < ").count(), 1, "{o1}");
    assert!(o0.matches(" < ").count() >= 3, "{o0}");
    assert_exit(&arden(&["ir", a20, "-O2"]), 2);
    // a user schedule, and the same result
    let args = ["--entry", "d_dot_v1", "--arg", "[1, 2, 3]", "--arg", "[4, 5, 6]", "--backend", "interp"];
    let with = arden(&[&["run", a20, "--schedule", "examples/paper001.sched"][..], &args[..]].concat());
    assert_exit(&with, 0);
    assert_eq!(stdout(&with).trim(), "[4.0, 5.0, 6.0]");
}

/// Schedule files are checked like programs: located errors with a caret,
/// the known rules for a misspelt one; a schedule that never stops is an
/// error (exit 1), not a hang.
#[test]
fn schedule_errors_are_located_and_loops_run_out_of_fuel() {
    let dir = TempDir::new("sched");
    let bad = dir.write("bad.sched", "-- mine\nrepeat(everywhere(fuse_idx))\n");
    let o = arden(&["run", "examples/dot.ard", "--entry", "dot", "--arg", "[1]", "--arg", "[2]", "--schedule", &bad]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("bad.sched:2:19") && err.contains("^^^^^^^^") && err.contains("did you mean `fuse_index_for`"), "{err}");
    let unclosed = dir.write("unclosed.sched", "try(cse");
    let o = arden(&["ir", "examples/dot.ard", "--schedule", &unclosed]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("expected `)`"), "{}", stderr(&o));
    let looping = dir.write("loop.sched", "repeat(everywhere(id))");
    let o = arden(&["run", "examples/dot.ard", "--entry", "dot", "--arg", "[1]", "--arg", "[2]", "--schedule", &looping, "--fuel", "10000"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("did not finish within 10000 steps on entry `dot`"), "{}", stderr(&o));
    let o = arden(&["run", "examples/dot.ard", "--entry", "dot", "--arg", "[1]", "--arg", "[2]", "--schedule", &dir.write("none.sched", "")]);
    assert_exit(&o, 1);
    assert_exit(&arden(&["run", "examples/dot.ard", "--schedule", "/nonexistent.sched"]), 1);
}

/// Arguments that disagree on a size: the one blamed is the one whose
/// length differs from the others' (not whichever comes later), and the
/// message names the parameter the size came from.
#[test]
fn size_mismatch_names_the_odd_parameter() {
    let dir = TempDir::new("oddsize");
    let f = dir.write("three.ard", "entry three [n] (w: [n]f64) (x: [n]f64) (y: [n]f64) : f64 = sum (for i. w[i] * x[i] * y[i])\n");
    let run = |w: &str, x: &str, y: &str| arden(&["run", &f, "--backend", "interp", "--arg", w, "--arg", x, "--arg", y]);
    let o = run("[1, 2, 3, 4]", "[1, 2, 3]", "[1, 2, 3]");
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("parameter `w` expects shape [n]f64 but was given shape [4] (with n = 3 from parameter `x`)"), "{}", stderr(&o));
    let o = run("[1, 2]", "[1, 2]", "[1, 2, 3]");
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("parameter `y` expects shape [n]f64 but was given shape [3] (with n = 2 from parameter `w`)"), "{}", stderr(&o));
    // two that disagree: the later one is blamed, naming the earlier
    let o = arden(&["run", &f, "--backend", "interp", "--arg", "[1]", "--arg", "[1, 2]", "--arg", "[1, 2, 3]"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("parameter `x` expects shape [n]f64 but was given shape [2] (with n = 1 from parameter `w`)"), "{}", stderr(&o));
    assert_exit(&run("[1, 2]", "[3, 4]", "[5, 6]"), 0);
}

/// `trace "label" e` (issue 28 item 4) prints the same characters on both
/// backends and at any thread count, in the order a sequential loop runs;
/// derivatives pass through it; `--no-trace` prints nothing and computes
/// the same.
#[test]
fn trace_prints_the_same_on_both_backends() {
    let dir = TempDir::new("trace");
    let file = dir.path("trace.ard");
    std::fs::write(
        &file,
        r#"
def show (x: f64) : f64 = trace "show" x
entry values (m: [2][3]f64) (k: i32) (f: f32) : f64 =
  let specials = trace "specials" [0.1, -0.0, 1e20, 1.5e-7, 5e-324, 1.0 / 0.0, -1.0 / 0.0, 0.0 / 0.0, 123456.0, 1.0 / 3.0]
  let pair = trace "pair" (k, f, m[1, 0] > 0.0, m)
  let s = loop acc = 0.0 for i < 3 do show (acc + m[0, i])
  in s + specials[0]
entry g [n] (x: [n]f64) : [n]f64 = grad (\v -> sum (trace "sq" (v * v))) x
"#,
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let want_values = "specials: [0.1, -0, 1e+20, 1.5e-07, 5e-324, inf, -inf, nan, 123456, 0.3333333333333333]\n\
                       pair: (-4, 0.33333334, true, [[1, 2, 3], [4.5, 5, 6]])\n\
                       show: 1\nshow: 3\nshow: 6\n";
    let values = ["--entry", "values", "--arg", "[[1, 2, 3], [4.5, 5, 6]]", "--arg", "-4", "--arg", "0.33333334"];
    let mut runs = vec![vec!["--backend", "interp"]];
    if c_compiler_or_skip("trace on the C backend") {
        runs.extend([vec!["--backend", "c", "--threads", "1"], vec!["--backend", "c", "--threads", "2"]]);
    }
    for backend in &runs {
        let o = arden(&[&["run", f], &values[..], &backend[..]].concat());
        assert_exit(&o, 0);
        assert_eq!(stdout(&o).trim(), "6.1", "{backend:?}");
        assert_eq!(stderr(&o), want_values, "{backend:?}");
        let o = arden(&[&["run", f, "--entry", "g", "--arg", "[1, -2]"], &backend[..]].concat());
        assert_exit(&o, 0);
        assert_eq!(stdout(&o).trim(), "[2.0, -4.0]", "{backend:?}");
        assert_eq!(stderr(&o), "sq: [1, 4]\n", "{backend:?}");
        let o = arden(&[&["run", f, "--no-trace"], &values[..], &backend[..]].concat());
        assert_exit(&o, 0);
        assert_eq!((stdout(&o).trim(), stderr(&o).as_str()), ("6.1", ""), "{backend:?}");
    }
}

/// `--precision f32` (issue 28 item 6): the same `f64` program runs in
/// single precision, literals included, on both backends.
#[test]
fn one_program_runs_in_both_precisions() {
    let dir = TempDir::new("precision");
    let file = dir.path("p.ard");
    std::fs::write(&file, "entry f [n] (x: [n]f64) : f64 = sum (for i. x[i] / 3.0) + f64 n * 1.0f64\n").unwrap();
    let f = file.to_str().unwrap();
    let o = arden(&["run", f, "--arg", "[1, 1]"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o).trim(), "2.6666666666666665");
    for backend in ["interp", "c"] {
        let o = arden(&["run", f, "--arg", "[1, 1]", "--precision", "f32", "--backend", backend]);
        assert_exit(&o, 0);
        assert_eq!(stdout(&o).trim(), "2.6666667", "{backend}");
    }
    let o = arden(&["ir", f, "--precision", "f32"]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("[n]f32") && !stdout(&o).contains("f64"), "{}", stdout(&o));
    let o = arden(&["run", f, "--arg", "[1, 2]", "--precision", "f16"]);
    assert_exit(&o, 2);
}
