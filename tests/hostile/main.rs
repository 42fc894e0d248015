//! Hostile input: every case runs the `arden` binary as a subprocess under a
//! virtual-memory limit (`ulimit -v`) and a wall-clock limit, and asserts a
//! clean outcome — exit code 1 with a located message (or 0 where the input
//! is valid), never an abort, a signal, a hang or unbounded memory
//! (issue 8, items 7–15). One module per area of the compiler.

#[path = "../common/mod.rs"]
mod common;
mod frontend;
mod interp;
mod lower;
mod runtime;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The outcome of one limited run.
#[derive(Debug)]
pub struct Outcome {
    /// `None` when the process was killed by a signal (abort, overflow) or
    /// by the time limit.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    pub timed_out: bool,
}

/// Limits of one run.
#[derive(Clone, Copy)]
pub struct Limits {
    pub memory_mb: u64,
    pub seconds: u64,
}

pub const DEFAULT: Limits = Limits { memory_mb: 2048, seconds: 30 };

/// Run `arden ARGS…` (with `stdin` fed in) under `limits`.
pub fn run_limited(args: &[&str], stdin: &[u8], limits: Limits) -> Outcome {
    let exe = env!("CARGO_BIN_EXE_arden");
    let script = format!("ulimit -v {}; exec \"$0\" \"$@\"", limits.memory_mb * 1024);
    let start = Instant::now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(exe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn arden");
    // stdin is fed and stdout/stderr drained on their own threads: a child
    // writing more than a pipe buffer must not look like a hang
    let feed = child.stdin.take().map(|mut sin| {
        let bytes = stdin.to_vec();
        std::thread::spawn(move || {
            let _ = sin.write_all(&bytes);
        })
    });
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = vec![];
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out_reader = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err_reader = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = start + Duration::from_secs(limits.seconds);
    let mut timed_out = false;
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            timed_out = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = child.wait().expect("wait");
    if let Some(f) = feed {
        let _ = f.join();
    }
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Outcome {
        code: if timed_out { None } else { status.code() },
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        elapsed: start.elapsed(),
        timed_out,
    }
}

/// A scratch file for one case (unique per test name), written with `bytes`.
pub fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("arden-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write scratch file");
    p
}

/// Assert a clean user error: exit 1, no timeout, and `needle` (plus a
/// `file:line:col` location when `located`) in stderr.
pub fn assert_user_error(o: &Outcome, needle: &str, located: bool) {
    assert!(!o.timed_out, "timed out after {:?}; stderr: {}", o.elapsed, o.stderr);
    assert_eq!(o.code, Some(1), "expected exit 1; stderr: {}", o.stderr);
    assert!(!o.stderr.contains("panicked"), "panic: {}", o.stderr);
    assert!(o.stderr.contains(needle), "expected `{needle}` in stderr: {}", o.stderr);
    if located {
        assert!(has_location(&o.stderr), "expected a file:line:col location in: {}", o.stderr);
    }
}

/// Assert success (exit 0) within the limits.
pub fn assert_ok(o: &Outcome) {
    assert!(!o.timed_out, "timed out after {:?}; stderr: {}", o.elapsed, o.stderr);
    assert_eq!(o.code, Some(0), "expected exit 0; stderr: {}", o.stderr);
}

/// Whether `s` contains `something:LINE:COL`.
pub fn has_location(s: &str) -> bool {
    s.split_whitespace().any(|w| {
        // `at f.ard:3:7: message`: the location may end in punctuation
        let w = w.trim_end_matches(|c: char| !c.is_ascii_digit());
        let parts: Vec<&str> = w.rsplitn(3, ':').collect();
        parts.len() == 3 && parts[0].trim_end_matches(|c: char| !c.is_ascii_digit()).parse::<u32>().is_ok() && parts[1].parse::<u32>().is_ok()
    })
}
