//! The C backend under AddressSanitizer and UndefinedBehaviorSanitizer:
//! every program of the corpus, the differentiation programs and the
//! examples is compiled with `-fsanitize=address,undefined
//! -fno-sanitize-recover=all` and every `-- test:` case runs at 1 thread
//! and at 2 threads with every parallel path forced on. A report aborts the
//! run. The sanitized libraries are loaded into a child process started
//! with the ASan runtime preloaded (it must come first); leaks are checked
//! by the backend's own registry (no buffer may be left but the results),
//! as LeakSanitizer would also see the test harness's allocations.
//! Skipped, with a note, when the compiler has no ASan runtime.
//!
//! Not part of the default `cargo test`: compiling the whole corpus with
//! the sanitizers takes 4 to 9 minutes on a shared 2-core machine. Run it with
//! `cargo test --release --test c_sanitize -- --ignored` (it found a
//! stack overflow in `scatter_add`'s private copies that no other test saw).

mod common;
use arden::api::{Backend, CallOptions, Team};
use arden::backend::c::COptions;
use arden::{Program, Value};
use common::*;
use std::process::Command;

const FLAGS: &[&str] = &["-O1", "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"];

fn count_arrays(v: &Value) -> i64 {
    match v {
        Value::Array(_) => 1,
        Value::Tuple(vs) => vs.iter().map(count_arrays).sum(),
        _ => 0,
    }
}

fn run_everything() {
    let opts = COptions { extra_flags: FLAGS.iter().map(|s| s.to_string()).collect() };
    let mut failures = vec![];
    let mut runs = 0;
    for dir in ["tests/programs", "tests/ad_programs", "examples"] {
        for path in ard_files(dir) {
            let text = std::fs::read_to_string(&path).unwrap();
            let prog = Program::from_file(&path).unwrap();
            let native = prog.compile_with(Backend::C, &opts).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let interp = prog.compile(Backend::Interp).unwrap();
            for case in cases(&text) {
                let Ok(args) = args_for(&prog, &case) else { continue };
                let want = interp.entry(&case.entry).unwrap().call(&args);
                for o in [
                    CallOptions { threads: 1, par_min: 1 << 15, team: Team::Fixed },
                    CallOptions { threads: 4, par_min: 0, team: Team::Each(common::varying_team) },
                ] {
                    runs += 1;
                    let got = native.entry(&case.entry).unwrap().call_with(&args, &o);
                    match (&want, got) {
                        (Ok(_), Ok((v, s))) => {
                            let params: i64 = args.iter().map(count_arrays).sum();
                            if s.map_or(0, |s| s.live_buffers) > count_arrays(&v) + params {
                                failures.push(format!("{}:{}: buffers left after the call", path.display(), case.line));
                            }
                        }
                        (Err(_), Err(_)) => {}
                        _ => failures.push(format!("{}:{}: the backends disagree", path.display(), case.line)),
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("sanitized runs: {runs}, no report");
}

#[test]
#[ignore = "slow: compiles the corpus with ASan and UBSan (run with --ignored)"]
fn corpus_under_sanitizers() {
    if std::env::var_os("ARDEN_SANITIZER_CHILD").is_some() {
        with_big_stack(run_everything);
        return;
    }
    if !c_compiler_or_skip("corpus_under_sanitizers") {
        return;
    }
    let cc = std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".into());
    let cc: Vec<&str> = cc.split_whitespace().collect();
    let Ok(out) = Command::new(cc[0]).args(&cc[1..]).arg("-print-file-name=libasan.so").output() else {
        skip_unless_ci("corpus_under_sanitizers", "the C compiler does not run");
        return;
    };
    let asan = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !std::path::Path::new(&asan).is_absolute() || !std::path::Path::new(&asan).exists() {
        skip_unless_ci("corpus_under_sanitizers", "the C compiler has no ASan runtime");
        return;
    }
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("arden-cache");
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "corpus_under_sanitizers", "--nocapture", "--test-threads", "1", "--include-ignored"])
        .env("ARDEN_SANITIZER_CHILD", "1")
        .env("ARDEN_CACHE_DIR", cache)
        .env("LD_PRELOAD", &asan)
        .env("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
        .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(
        child.status.success() && stderr.contains("no report"),
        "sanitizer run failed ({}):\n{}",
        child.status,
        stderr.lines().rev().take(60).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    assert!(!stderr.contains("runtime error:") && !stderr.contains("AddressSanitizer"), "{stderr}");
}
