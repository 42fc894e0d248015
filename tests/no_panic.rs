//! Random and broken source never panics the compiler: 10,000+ inputs
//! (token soup, and corpus programs with tokens deleted, duplicated, swapped
//! or replaced) each either compile to IR that verifies, or come back with
//! diagnostics that carry a location.

mod common;
use common::*;

const TOKENS: &[&str] = &[
    "def", "entry", "let", "in", "if", "then", "else", "for", "loop", "while", "do", "true", "false", "x", "y", "a", "n",
    "f", "i", "j", "sum", "map", "iota", "reduce", "scatter_add", "dot", "jvp", "jvp2", "jacfwd", "stop_gradient", "grad", "(", ")", "[", "]", ",", ".", ":", "=", "==",
    "->", "\\", "+", "-", "*", "/", "%", "**", "<", "<=", ">", "|>", "&&", "||", "!", ":>", "0", "1", "2.5", "1e3",
    "3i32", "f64", "f32", "i64", "bool", "idx", "[n]f64", "\n", " ", "--c\n", "999999999999999999999", "@", "\"",
];

/// Split source into rough tokens (words, numbers, single symbols) keeping whitespace separate.
fn tokenize(s: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur = String::new();
    for ch in s.chars() {
        if ch.is_alphanumeric() || ch == '_' || ch == '.' || ch == '\'' {
            cur.push(ch);
        } else {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            out.push(ch.to_string());
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn mutate(rng: &mut Rng, toks: &[String]) -> String {
    let mut t = toks.to_vec();
    for _ in 0..1 + rng.below(3) {
        if t.is_empty() {
            break;
        }
        let i = rng.below(t.len());
        match rng.below(4) {
            0 => {
                t.remove(i);
            }
            1 => {
                let x = t[i].clone();
                t.insert(i, x);
            }
            2 => {
                let j = rng.below(t.len());
                t.swap(i, j);
            }
            _ => t[i] = TOKENS[rng.below(TOKENS.len())].to_string(),
        }
    }
    t.concat()
}

fn soup(rng: &mut Rng) -> String {
    let n = rng.below(40);
    (0..n).map(|_| TOKENS[rng.below(TOKENS.len())]).collect::<Vec<_>>().join(" ")
}

fn check_one(src: &str) -> Result<(), String> {
    let r = std::panic::catch_unwind(|| arden::Program::from_source("fuzz.ard", src));
    match r {
        Err(_) => Err(format!("PANIC on:\n{src}")),
        Ok(Ok(p)) => arden::ir::verify::verify_module(p.module()).map_err(|e| format!("IR does not verify ({e}) for:\n{src}")),
        Ok(Err(arden::Error::Compile { rendered, diagnostics })) => {
            if diagnostics.is_empty() || !rendered.contains("fuzz.ard:") {
                Err(format!("diagnostic without location for:\n{src}\n{rendered}"))
            } else {
                Ok(())
            }
        }
        Ok(Err(e)) => Err(format!("unexpected error {e} for:\n{src}")),
    }
}

#[test]
fn random_and_mutated_sources_never_panic() {
    with_big_stack(|| {
        std::panic::set_hook(Box::new(|_| {}));
        let mut corpus: Vec<Vec<String>> = vec![];
        for dir in ["tests/programs", "tests/ad_programs", "tests/errors", "examples"] {
            for p in ard_files(dir) {
                corpus.push(tokenize(&std::fs::read_to_string(p).unwrap()));
            }
        }
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut failures = vec![];
        let total = 10_500;
        for k in 0..total {
            let src = if k % 3 == 0 || corpus.is_empty() {
                soup(&mut rng)
            } else {
                let which = rng.below(corpus.len());
                mutate(&mut rng, &corpus[which])
            };
            if let Err(e) = check_one(&src) {
                failures.push(e);
                if failures.len() > 5 {
                    break;
                }
            }
        }
        let _ = std::panic::take_hook();
        assert!(failures.is_empty(), "{}", failures.join("\n-----\n"));
    });
}

/// A syntax error in one more, unrelated declaration hides none of a
/// program's diagnostics (issue 8, item 15): for every wrong program of
/// `tests/errors/`, with a broken declaration added before and after it, all
/// of its diagnostics are still reported, plus the new one.
#[test]
fn an_unrelated_syntax_error_hides_no_other_diagnostic() {
    with_big_stack(|| {
        let mut failures = vec![];
        for path in ard_files("tests/errors") {
            let text = std::fs::read_to_string(&path).unwrap();
            let messages = |src: &str| match arden::Program::from_source("e.ard", src) {
                Err(arden::Error::Compile { diagnostics, .. }) => diagnostics.into_iter().map(|d| (d.message, d.label)).collect::<Vec<_>>(),
                Ok(_) => vec![],
                Err(e) => vec![(e.to_string(), String::new())],
            };
            let want = messages(&text);
            for (prefix, suffix) in [("def zz_broken (x: f64) : f64 = x ) x\n", ""), ("", "\ndef zz_broken = 1 +\n")] {
                let got = messages(&format!("{prefix}{text}{suffix}"));
                let missing: Vec<_> = want.iter().filter(|w| !got.contains(w)).collect();
                if !missing.is_empty() || got.len() != want.len() + 1 {
                    failures.push(format!("{}: with a broken declaration added, missing {missing:?}; got {got:?}", path.display()));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}
