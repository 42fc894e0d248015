//! `--timeout` and Ctrl-C stop compiled code as they stop the interpreter:
//! loops free of checks (innermost `for` loops, which must vectorise) poll
//! the stop flag between chunks of their iterations, on one thread and on
//! several (issue 23, item 3).

mod common;

use common::TempDir;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The README's example: one innermost `for` of `n` iterations, summed
/// (no array is built: 3·10⁹ iterations take a minute or more).
const SPIN: &str = "entry spin (n: i64) : f64 = sum (for (i < n). sin (f64 i))\n";
/// The same in a loop of one iteration (its body depends on `j`, so the
/// optimiser keeps the nesting).
const SPIN_NESTED: &str = "entry spin (n: i64) : f64 = sum (for (j < 1). sum (for (i < n). sin (f64 (i + j))))\n";
/// Longest a stopped run may take (generous: a loaded machine compiles the
/// C first, and this counts the start of the process too).
const PROMPT: Duration = Duration::from_secs(30);

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_arden")).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the arden binary runs")
}

/// Wait for `child` at most `limit`; a run still going then is killed and
/// the test fails (before the fix these runs went on for minutes).
#[track_caller]
fn finish_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("{what}: still running after {limit:?}; stderr: {}", String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Compile `file` (so that the C compiler's time is not part of what is
/// timed) by running its entry once on a small argument.
fn warm(file: &str, entry: &str) {
    let o = finish_within(spawn(&["run", file, "--entry", entry, "--arg", "10", "--backend", "c"]), Duration::from_secs(300), "warm-up");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn timeout_stops_innermost_compiled_loops() {
    if !common::c_compiler_or_skip("timeout_stops_innermost_compiled_loops") {
        return;
    }
    let dir = TempDir::new("timeout");
    for (file, entry, at) in [(dir.write("spin.ard", SPIN), "spin", "spin.ard:1:33"), (dir.write("nested.ard", SPIN_NESTED), "spin", "nested.ard:1:51")] {
        warm(&file, entry);
        for threads in ["1", "2"] {
            let what = format!("{file} --threads {threads}");
            let t0 = Instant::now();
            let o = finish_within(
                spawn(&["run", &file, "--entry", entry, "--arg", "3000000000", "--timeout", "1", "--backend", "c", "--threads", threads]),
                PROMPT,
                &what,
            );
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "{what}: {err}");
            assert!(err.contains("time limit of 1 s exceeded") && err.contains(at), "{what}: {err}");
            assert!(t0.elapsed() < PROMPT, "{what}");
        }
    }
}

#[test]
fn ctrl_c_stops_a_compiled_run() {
    if !common::c_compiler_or_skip("ctrl_c_stops_a_compiled_run") {
        return;
    }
    let dir = TempDir::new("sigint");
    let file = dir.write("spin.ard", SPIN);
    warm(&file, "spin");
    for threads in ["1", "2"] {
        let child = spawn(&["run", &file, "--entry", "spin", "--arg", "3000000000", "--backend", "c", "--threads", threads]);
        std::thread::sleep(Duration::from_millis(1500));
        // one SIGINT: the run stops at its next poll (a second one would
        // end the process at once)
        // SAFETY: signalling a child process this test started and has not reaped.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) }, 0);
        let t0 = Instant::now();
        let o = finish_within(child, Duration::from_secs(10), &format!("SIGINT at {threads} threads"));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(130), "{err}");
        assert!(err.contains("interrupted at") && err.contains("spin.ard:1:33") && err.contains("Ctrl-C"), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(5), "threads {threads}: stopped only after {:?}", t0.elapsed());
    }
}
