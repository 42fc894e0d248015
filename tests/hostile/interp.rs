//! Hostile input: time and memory of a run (issue 8, items 5, 7 and 14),
//! on both backends where it applies: linear cost of reverse mode through
//! long sequential loops, allocation failures and the memory limit as
//! located errors, the time limit and Ctrl-C.
use super::*;

const RECURRENCE: &str = "\
entry f (x: f64) (n: i64) : f64 = loop w = x for k < n do sin w * 0.99 + x
entry g (x: f64) (n: i64) : f64 = grad (\\y -> loop w = y for k < n do sin w * 0.99 + y) x
entry big (n: i64) : f64 = sum (replicate n 1.0)
entry spin (x: f64) : f64 = loop w = x while w > 0.0 do w + 1.0
entry spin_for [n] (xs: [n]f64) : [n]f64 = for i. loop w = xs[i] while w > 0.0 do w + 1.0
";

fn program(name: &str) -> String {
    scratch(name, RECURRENCE.as_bytes()).to_string_lossy().into_owned()
}

/// The fastest of five runs of `grad` through `n` steps, in seconds (the
/// machine is shared: the minimum is the least noisy).
fn grad_seconds(file: &str, n: u64) -> f64 {
    let n = n.to_string();
    (0..5)
        .map(|_| {
            let o = run_limited(&["run", file, "--entry", "g", "--arg", "0.5", "--arg", &n], b"", DEFAULT);
            assert_ok(&o);
            o.elapsed.as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Item 5: reverse mode saves a loop's residuals with `update`, which the
/// interpreter used to copy whole at every step (10^5 steps took minutes).
/// Ten times the steps must cost at most 20 times the time (it was 100x).
#[test]
fn grad_through_a_long_loop_is_linear() {
    let file = program("recurrence_linear.ard");
    let t4 = grad_seconds(&file, 10_000);
    let t5 = grad_seconds(&file, 100_000);
    assert!(t5 <= 20.0 * t4.max(0.005), "grad through 1e5 steps took {t5:.3} s, through 1e4 steps {t4:.3} s: more than 20x");
    // 10^6 steps (8 MB of residuals) fits easily in 2 GB and a few seconds
    let o = run_limited(&["run", &file, "--entry", "g", "--arg", "0.5", "--arg", "1000000"], b"", DEFAULT);
    assert_ok(&o);
    assert!(o.stdout.trim().parse::<f64>().is_ok_and(|x| x.is_finite()), "{}", o.stdout);
}

/// Item 7: an array larger than the machine allows is a located error.
#[test]
fn huge_replicate_is_a_located_error() {
    let file = program("huge_replicate.ard");
    let o = run_limited(&["run", &file, "--entry", "big", "--arg", "1000000000"], b"", Limits { memory_mb: 1024, seconds: 20 });
    assert_user_error(&o, "out of memory", true);
    assert!(o.stderr.contains("8000000000 bytes"), "the size asked for: {}", o.stderr);
}

/// Item 7: `--max-memory` refuses what the machine would give.
#[test]
fn max_memory_is_checked_before_allocating() {
    let file = program("max_memory.ard");
    let o = run_limited(&["run", &file, "--entry", "big", "--arg", "20000000", "--max-memory", "64M"], b"", DEFAULT);
    assert_user_error(&o, "over the memory limit of 67108864 bytes", true);
    assert!(o.stderr.contains("160000000 bytes"), "{}", o.stderr);
    // the same call fits under a larger limit
    let o = run_limited(&["run", &file, "--entry", "big", "--arg", "20000000", "--max-memory", "1G"], b"", DEFAULT);
    assert_ok(&o);
    assert_eq!(o.stdout.trim(), "20000000.0");
    // a bad size is a usage error
    let o = run_limited(&["run", &file, "--entry", "big", "--arg", "1", "--max-memory", "lots"], b"", DEFAULT);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
}

/// Item 7: reverse mode's residual arrays for a loop of 10^9 steps are
/// refused cleanly (an error naming the entry, not an abort).
#[test]
fn huge_residual_storage_is_an_error() {
    let file = program("huge_residuals.ard");
    let o = run_limited(&["run", &file, "--entry", "g", "--arg", "0.5", "--arg", "1000000000"], b"", Limits { memory_mb: 1024, seconds: 20 });
    assert_user_error(&o, "out of memory", false);
    assert!(o.stderr.contains("entry `g`") && o.stderr.contains("8000000000 bytes"), "{}", o.stderr);
}

/// The backends to test the limits on: both when a C compiler is found
/// (without one, the C half is skipped with a note, or fails under CI).
fn backends() -> &'static [&'static str] {
    if crate::common::c_compiler_or_skip("hostile input limits (the C half)") { &["c", "interp"] } else { &["interp"] }
}

/// Item 14: `--timeout` stops a `while` loop that never ends, naming it,
/// on both backends.
#[test]
fn timeout_names_the_running_loop() {
    let file = program("timeout.ard");
    for b in backends() {
        let o = run_limited(&["run", &file, "--entry", "spin", "--arg", "1.0", "--timeout", "0.5", "--backend", b], b"", DEFAULT);
        assert_user_error(&o, "time limit of 0.5 s exceeded", true);
        assert!(o.stderr.contains(":4:"), "{b}: the loop is on line 4: {}", o.stderr);
        // the limit counts the run, not the compilation: allow for a cold compile
        assert!(o.elapsed.as_secs_f64() < 30.0, "{b}: took {:?}", o.elapsed);
        // inside a parallel `for` too
        let o = run_limited(&["run", &file, "--entry", "spin_for", "--arg", "[1, 2, 3]", "--timeout", "0.5", "--backend", b], b"", DEFAULT);
        assert_user_error(&o, "time limit", true);
    }
    // a bad value is a usage error
    let o = run_limited(&["run", &file, "--entry", "spin", "--arg", "1.0", "--timeout", "-1"], b"", DEFAULT);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
}

/// Item 14: Ctrl-C (SIGINT) ends a running loop promptly and cleanly, on
/// both backends.
#[test]
fn ctrl_c_stops_a_run() {
    let file = program("ctrl_c.ard");
    for b in backends() {
        // compile once (the C library is then cached), so that the signal
        // below reaches the running loop, not the compiler
        let _ = run_limited(&["run", &file, "--entry", "spin", "--arg", "1.0", "--timeout", "0.1", "--backend", b], b"", DEFAULT);
        let mut child = Command::new(env!("CARGO_BIN_EXE_arden"))
            .args(["run", &file, "--entry", "spin", "--arg", "1.0", "--backend", b])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn arden");
        std::thread::sleep(Duration::from_millis(700));
        assert!(child.try_wait().expect("wait").is_none(), "{b}: the loop ended by itself");
        let sent = Instant::now();
        let ok = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill").success();
        assert!(ok, "could not send SIGINT");
        loop {
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            if sent.elapsed() > Duration::from_secs(5) {
                let _ = child.kill();
                panic!("{b}: still running 5 s after SIGINT");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = child.wait_with_output().expect("output");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "{b}: {stderr}");
        assert!(stderr.contains("interrupted") && has_location(&stderr), "{b}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// Item 6: the gradient of a matrix-product loss accumulates the per-row
/// cotangent of `b` (`[k][m]` per iteration) in place instead of stacking
/// an `[n][k][m]` array (8 MB at n = 100, which the 4 MB limit refuses; the
/// accumulated gradient needs a few hundred kB).
#[test]
fn matmul_loss_gradient_accumulates_in_place() {
    let src = "entry loss_grad [n][m][k] (a: [n][m]f64) (b: [m][k]f64) : ([n][m]f64, [m][k]f64) =\n  \
               vjp (\\(x, y) -> sum (map (\\row -> sum (map (\\c -> c*c) row)) (matmul x y))) (a, b) 1.0\n";
    let file = scratch("matmul_loss.ard", src.as_bytes()).to_string_lossy().into_owned();
    let n = 100;
    let rows: Vec<String> = (0..n)
        .map(|i| {
            let row: Vec<String> = (0..n).map(|j| format!("{}", ((i * 7 + j * 3) % 11) as f64 / 11.0 - 0.5)).collect();
            format!("[{}]", row.join(","))
        })
        .collect();
    let m = scratch("matmul_a.json", format!("[{}]", rows.join(",")).as_bytes());
    let arg = format!("@{}", m.display());
    // (the result goes to a file: ~400 kB would fill the harness's pipe)
    let out = scratch("matmul_grad.json", b"");
    let out = out.to_string_lossy();
    let o = run_limited(&["run", &file, "--arg", &arg, "--arg", &arg, "--max-memory", "4M", "--output", &out], b"", DEFAULT);
    assert_ok(&o);
    let text = std::fs::read_to_string(&*out).expect("the result file");
    assert!(text.starts_with("[[[") && text.len() > 100_000, "{}", &text[..text.len().min(200)]);
}
