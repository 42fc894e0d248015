//! `docs/LANGUAGE.md` is checked, not just written: every example in it runs.
//!
//! The format of its examples:
//! - A fenced block opened with ```` ```arden ```` is a complete program. It
//!   carries `-- test: {"entry", "args", "expect" | "expect_error"}` lines
//!   (the corpus format of `tests/programs/`, see `tests/common/mod.rs`) and
//!   every one of them must give its stated result; or it carries
//!   `-- compile-error: TEXT` lines, and then it must fail to compile with
//!   diagnostics containing each TEXT. A block with neither is an error, so
//!   no example goes unchecked by accident.
//! - In a fenced ```` ```sh ```` block, every line starting with `arden ` is
//!   run with the `arden` binary from the repository root. The `# ` lines
//!   right after it state the outcome: `# → TEXT` (stdout is TEXT),
//!   `# stderr: TEXT` (stderr contains TEXT), `# exit N: TEXT` (exit status
//!   N, stderr contains TEXT). Without an `# exit` line the command must
//!   exit 0.
//! - Other blocks (```` ```text ````, grammar sketches) are not run.
//!
//! A second test checks that every built-in in the table of
//! `src/lower/builtins.rs` is applied to an argument in at least one checked
//! program, and named in the text.

mod common;
use common::*;
use std::collections::BTreeSet;
use std::process::Command;

/// A fenced block of the document: its info string, first line number
/// (1-based, of the first line inside the fence) and text.
struct Block {
    lang: String,
    line: usize,
    text: String,
}

fn blocks(doc: &str) -> Vec<Block> {
    let mut out = vec![];
    let mut cur: Option<Block> = None;
    for (i, line) in doc.lines().enumerate() {
        let t = line.trim_start();
        match (&mut cur, t.strip_prefix("```")) {
            (None, Some(info)) => cur = Some(Block { lang: info.trim().to_string(), line: i + 2, text: String::new() }),
            (Some(_), Some(_)) => out.push(cur.take().expect("open block")),
            (Some(b), None) => {
                b.text.push_str(line);
                b.text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(cur.is_none(), "docs/LANGUAGE.md: a fenced block is not closed");
    out
}

fn doc() -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    std::fs::read_to_string(format!("{root}/docs/LANGUAGE.md")).expect("docs/LANGUAGE.md")
}

/// Run one ```arden block; failures are pushed as messages.
fn check_program(b: &Block, failures: &mut Vec<String>) -> usize {
    let at = |k: usize| format!("docs/LANGUAGE.md:{}", b.line + k - 1);
    let name = format!("docs/LANGUAGE.md:{}", b.line);
    let compile_errors: Vec<(usize, String)> =
        b.text.lines().enumerate().filter_map(|(i, l)| l.trim_start().strip_prefix("-- compile-error:").map(|m| (i + 1, m.trim().to_string()))).collect();
    let result = arden::Program::from_source(&name, &b.text);
    if !compile_errors.is_empty() {
        match result {
            Ok(_) => failures.push(format!("{}: compiles, but a compile error was expected", at(1))),
            Err(e) => {
                let text = e.to_string();
                for (k, want) in &compile_errors {
                    if !text.contains(want.as_str()) {
                        failures.push(format!("{}: the compile error does not contain `{want}`:\n{text}", at(*k)));
                    }
                }
            }
        }
        return compile_errors.len();
    }
    let prog = match result {
        Ok(p) => p,
        Err(e) => {
            failures.push(format!("{}: does not compile:\n{e}", at(1)));
            return 0;
        }
    };
    for stage in [arden::Stage::Lower, arden::Stage::Ad] {
        if let Err(e) = arden::ir::verify::verify_module(prog.module_at(stage)) {
            failures.push(format!("{}: IR verifier after {stage:?}: {e}", at(1)));
        }
    }
    let cases = cases(&b.text);
    if cases.is_empty() {
        failures.push(format!("{}: an `arden` block with neither `-- test:` nor `-- compile-error:` lines", at(1)));
    }
    for case in &cases {
        let here = at(case.line);
        let args = match args_for(&prog, case) {
            Ok(a) => a,
            Err(e) => {
                failures.push(format!("{here}: bad arguments: {e}"));
                continue;
            }
        };
        let result = prog.entry(&case.entry).and_then(|e| e.call(&args));
        match (&result, &case.expect, &case.expect_error) {
            (Ok(v), Some(want), _) if matches(v, want) => {}
            (Ok(v), Some(want), _) => failures.push(format!("{here}: got {} expected {want}", v.to_json())),
            (Err(e), _, Some(msg)) if e.to_string().contains(msg.as_str()) => {}
            (Err(e), _, _) => failures.push(format!("{here}: error: {e}")),
            (Ok(v), None, Some(msg)) => failures.push(format!("{here}: got {} but expected an error with `{msg}`", v.to_json())),
            (Ok(_), None, None) => failures.push(format!("{here}: test has neither expect nor expect_error")),
        }
    }
    cases.len()
}

/// Run the `arden …` lines of one ```sh block.
fn check_commands(b: &Block, failures: &mut Vec<String>) -> usize {
    let root = env!("CARGO_MANIFEST_DIR");
    let lines: Vec<&str> = b.text.lines().collect();
    let mut ran = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim().strip_prefix("arden ") else { continue };
        let here = format!("docs/LANGUAGE.md:{}", b.line + i);
        let out = Command::new(env!("CARGO_BIN_EXE_arden")).args(shell_words(rest)).current_dir(root).output().unwrap();
        ran += 1;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        let shown = format!("`{line}` exited {code:?} with\n{stdout}{stderr}");
        // The comment lines right after the command state its outcome.
        let mut want_code = 0;
        for note in lines[i + 1..].iter().map(|l| l.trim()).take_while(|l| l.starts_with("# ")) {
            if let Some(want) = note.strip_prefix("# → ") {
                if stdout.trim() != want.trim() {
                    failures.push(format!("{here}: {shown}\nexpected stdout `{want}`"));
                }
            } else if let Some(spec) = note.strip_prefix("# exit ") {
                let (n, want) = spec.split_once(':').unwrap_or((spec, ""));
                want_code = n.trim().parse().unwrap_or_else(|_| panic!("{here}: bad `# exit N: TEXT` line"));
                if !stderr.contains(want.trim()) {
                    failures.push(format!("{here}: {shown}\nexpected `{}` on stderr", want.trim()));
                }
            } else if let Some(want) = note.strip_prefix("# stderr: ")
                && !stderr.contains(want.trim())
            {
                failures.push(format!("{here}: {shown}\nexpected `{}` on stderr", want.trim()));
            }
        }
        if code != Some(want_code) {
            failures.push(format!("{here}: {shown}\nexpected exit status {want_code}"));
        }
    }
    ran
}

#[test]
fn language_reference_examples_give_their_stated_results() {
    let doc = doc();
    with_big_stack(move || {
        let mut failures = vec![];
        let (mut programs, mut cases, mut commands) = (0, 0, 0);
        for b in blocks(&doc) {
            match b.lang.as_str() {
                "arden" => {
                    programs += 1;
                    cases += check_program(&b, &mut failures);
                }
                "sh" => commands += check_commands(&b, &mut failures),
                _ => {}
            }
        }
        assert!(failures.is_empty(), "{} failures in docs/LANGUAGE.md:\n{}", failures.len(), failures.join("\n\n"));
        assert!(programs >= 40 && cases >= 100 && commands >= 10, "too few examples: {programs} programs, {cases} cases, {commands} commands");
        eprintln!("docs/LANGUAGE.md: {programs} programs, {cases} checked results, {commands} commands");
    });
}

/// The names of every built-in (`src/lower/builtins.rs` and the scalar
/// primitives of `src/ir/prim.rs`).
fn builtin_names() -> Vec<String> {
    let names: Vec<String> = arden::lower::builtins::names().into_iter().map(String::from).collect();
    assert!(names.len() > 60, "found only {} built-ins", names.len());
    names
}

/// The names applied to an argument in `code` (outside comments): a word
/// followed by one space and the start of an argument. This tells `f64 n`
/// (the conversion) from `(x: f64)` and `[n]f64` (the type).
fn applied_names(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let line = line.split(" -- ").next().unwrap_or("");
        if line.trim_start().starts_with("--") {
            continue;
        }
        let b = line.as_bytes();
        let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'\'';
        let mut i = 0;
        while i < b.len() {
            if is_word(b[i]) && (i == 0 || !is_word(b[i - 1])) {
                let start = i;
                while i < b.len() && is_word(b[i]) {
                    i += 1;
                }
                let after = &b[i..];
                let applied = after.len() >= 2 && after[0] == b' ' && (after[1].is_ascii_alphanumeric() || matches!(after[1], b'_' | b'(' | b'[' | b'\\'));
                if applied {
                    out.insert(line[start..i].to_string());
                }
            } else {
                i += 1;
            }
        }
    }
    out
}

#[test]
fn every_builtin_has_a_checked_example() {
    let doc = doc();
    let mut used = BTreeSet::new();
    for b in blocks(&doc) {
        let checked = b.lang == "arden" && b.text.contains("-- test:");
        if checked {
            used.extend(applied_names(&b.text));
        }
    }
    let missing: Vec<String> = builtin_names().into_iter().filter(|n| !used.contains(n)).collect();
    assert!(missing.is_empty(), "built-ins without a checked example in docs/LANGUAGE.md: {}", missing.join(", "));
    for name in builtin_names() {
        assert!(doc.contains(&format!("`{name}")), "docs/LANGUAGE.md does not mention `{name}`");
    }
}
