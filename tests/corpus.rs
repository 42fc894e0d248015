//! Every program of `tests/programs/`, `tests/ad_programs/` and `examples/`
//! compiles, its IR passes the verifier after every stage, and every
//! `-- test:` line gives the expected result or the expected run-time error.

mod common;
use common::*;

fn run_dir(dir: &str, min_files: usize) {
    let files = ard_files(dir);
    assert!(files.len() >= min_files, "{dir}: expected at least {min_files} programs, found {}", files.len());
    let mut failures = vec![];
    let mut ran = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let name = path.display().to_string();
        let prog = match arden::Program::from_file(path) {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!("{name}: does not compile:\n{e}"));
                continue;
            }
        };
        for stage in [arden::Stage::Lower, arden::Stage::Ad] {
            if let Err(e) = arden::ir::verify::verify_module(prog.module_at(stage)) {
                failures.push(format!("{name}: IR verifier after {stage:?}: {e}"));
            }
        }
        let cases = cases(&text);
        if cases.is_empty() {
            failures.push(format!("{name}: no `-- test:` lines"));
        }
        for case in cases {
            ran += 1;
            let args = match args_for(&prog, &case) {
                Ok(a) => a,
                Err(e) => {
                    failures.push(format!("{name}:{}: bad arguments: {e}", case.line));
                    continue;
                }
            };
            let result = prog.entry(&case.entry).and_then(|e| e.call(&args));
            match (&result, &case.expect, &case.expect_error) {
                (Ok(v), Some(want), _) if matches(v, want) => {}
                (Ok(v), Some(want), _) => failures.push(format!("{name}:{}: got {} expected {want}", case.line, v.to_json())),
                (Err(e), _, Some(msg)) if e.to_string().contains(msg.as_str()) => {}
                (Err(e), _, _) => failures.push(format!("{name}:{}: error: {e}", case.line)),
                (Ok(v), None, Some(msg)) => failures.push(format!("{name}:{}: got {} but expected an error with `{msg}`", case.line, v.to_json())),
                (Ok(_), None, None) => failures.push(format!("{name}:{}: test has neither expect nor expect_error", case.line)),
            }
        }
    }
    assert!(failures.is_empty(), "{} of {ran} cases failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn corpus_programs_give_expected_results() {
    with_big_stack(|| run_dir("tests/programs", 40));
}

#[test]
fn differentiation_programs_give_expected_results() {
    with_big_stack(|| run_dir("tests/ad_programs", 20));
}

#[test]
fn examples_give_expected_results() {
    with_big_stack(|| run_dir("examples", 6));
}
