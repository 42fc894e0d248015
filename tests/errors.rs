//! Every wrong program of `tests/errors/` is rejected at compile time with a
//! diagnostic that names the place (file:line:col, a caret) and contains the
//! phrase its `-- expect:` line names; the whole rendered message is a
//! snapshot (`tests/snapshots/`), reviewed when it changes.

mod common;
use common::*;

#[test]
fn wrong_programs_get_diagnostics() {
    with_big_stack(|| {
        let files = ard_files("tests/errors");
        assert!(files.len() >= 30, "expected at least 30 wrong programs, found {}", files.len());
        let mut failures = vec![];
        for path in &files {
            let text = std::fs::read_to_string(path).unwrap();
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            let rel = format!("tests/errors/{stem}.ard");
            let expects: Vec<String> = text.lines().filter_map(|l| l.trim().strip_prefix("-- expect:")).map(|s| s.trim().to_lowercase()).collect();
            let count: Option<usize> = text.lines().find_map(|l| l.trim().strip_prefix("-- errors:")).map(|s| s.trim().parse().unwrap());
            match arden::Program::from_source(&rel, &text) {
                Ok(_) => failures.push(format!("{rel}: compiled, but it is wrong")),
                Err(arden::Error::Compile { rendered, diagnostics }) => {
                    let lower = rendered.to_lowercase();
                    for e in &expects {
                        if !lower.contains(e.as_str()) {
                            failures.push(format!("{rel}: diagnostic lacks `{e}`:\n{rendered}"));
                        }
                    }
                    if !rendered.contains(&format!("{rel}:")) || !rendered.contains('^') {
                        failures.push(format!("{rel}: diagnostic lacks a location or caret:\n{rendered}"));
                    }
                    if let Some(n) = count
                        && diagnostics.len() != n
                    {
                        failures.push(format!("{rel}: expected {n} diagnostics, got {}:\n{rendered}", diagnostics.len()));
                    }
                    insta::assert_snapshot!(stem.clone(), rendered);
                }
                Err(e) => failures.push(format!("{rel}: unexpected error kind: {e}")),
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    });
}
