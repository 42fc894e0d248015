//! Tidy check of the module layering (issue 25, item 5): a module of
//! `src/` names, through `crate::` paths, only the modules below it in the
//! pipeline (`ALLOWED`), so no back-arrow such as `syntax` → `types` or
//! `backend` → `api` comes back.
//!
//! The rule, as `module_dependencies_point_down` reads it:
//! - A module is a top-level folder or file of `src/` (`syntax`, `api`),
//!   except `backend`, whose parts are modules of their own
//!   (`backend::c`, `backend::interp`, `backend::limits`). `lib.rs`
//!   declares them all, and `main.rs` with its `bench.rs` is a client of
//!   the library: these are not checked.
//! - A dependency is every `crate::` path outside comments, `use` trees
//!   (`crate::{ir, diag::Source}`) expanded, naming another module.
//! - Tests are not checked: files named `tests.rs`, a `#[cfg(test)] mod
//!   x;` line, and everything after a `#[cfg(test)]` item with a body
//!   (test modules come last in their file).

use std::collections::BTreeSet;
use std::path::Path;

/// Each module and the modules it may name.
const ALLOWED: &[(&str, &[&str])] = &[
    ("diag", &[]),
    ("ir", &[]),
    ("syntax", &["diag"]),
    ("types", &["diag", "syntax", "ir"]),
    ("runtime", &["ir"]),
    ("lower", &["diag", "syntax", "types", "ir"]),
    ("ad", &["ir"]),
    ("opt", &["diag", "ir"]),
    ("backend::limits", &[]),
    ("backend::interp", &["ir", "runtime", "backend::limits"]),
    ("backend::c", &["ir", "runtime", "backend::limits"]),
    ("api", &["diag", "syntax", "types", "ir", "runtime", "lower", "ad", "opt", "backend::limits", "backend::interp", "backend::c"]),
    ("gradbench", &["api", "runtime", "backend::c"]),
];

/// Arrows that break the layering and are being removed by other work
/// (issue 25): tolerated until then; the test fails once one is gone, so
/// that its line is removed.
const BEING_REMOVED: &[(&str, &str, &str)] = &[];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The module a file of `src/` belongs to (`None` for `lib.rs` and the binary's files).
fn module_of(rel: &Path) -> Option<String> {
    let comps: Vec<String> = rel.iter().map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
    match comps.as_slice() {
        [file] if file == "lib" || file == "main" || file == "bench" => None,
        [first, second, ..] if first == "backend" && second != "mod" => Some(format!("backend::{second}")),
        [first, ..] => Some(first.clone()),
        [] => None,
    }
}

/// The module a path after `crate::` names: its first component, or its
/// first two under `backend`.
fn module_named(path: &[String]) -> Option<String> {
    match path {
        [first, second, ..] if first == "backend" => Some(format!("backend::{second}")),
        [first, ..] => Some(first.clone()),
        [] => None,
    }
}

/// The paths of a use tree starting at `text` (what follows `crate::`):
/// `ir::{self, Function}` gives `ir::self` and `ir::Function`.
fn use_tree_paths(text: &str) -> Vec<Vec<String>> {
    fn tree(chars: &[char], at: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let mut path = prefix;
        loop {
            if chars.get(*at) == Some(&'{') {
                *at += 1;
                loop {
                    while chars.get(*at).is_some_and(|c| c.is_whitespace() || *c == ',') {
                        *at += 1;
                    }
                    match chars.get(*at) {
                        None => return,
                        Some('}') => {
                            *at += 1;
                            return;
                        }
                        Some(_) => tree(chars, at, path.clone(), out),
                    }
                }
            }
            let start = *at;
            while chars.get(*at).is_some_and(|c| c.is_alphanumeric() || *c == '_') {
                *at += 1;
            }
            if *at > start {
                path.push(chars[start..*at].iter().collect());
            }
            if chars.get(*at) == Some(&':') && chars.get(*at + 1) == Some(&':') {
                *at += 2;
                continue;
            }
            // `as name`, `*`, or the end of the path
            while chars.get(*at).is_some_and(|c| !matches!(c, ',' | '}' | ';' | '\n')) && chars.get(*at) != Some(&'{') {
                *at += 1;
            }
            out.push(path);
            return;
        }
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = vec![];
    tree(&chars, &mut 0, vec![], &mut out);
    out
}

/// The code of a file that is not a test: comments and test modules left out.
fn non_test_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            match lines.next() {
                Some(item) if item.trim_end().ends_with(';') => continue,
                _ => break,
            }
        }
        let code = match line.find("//") {
            Some(k) if line[..k].matches('"').count() % 2 == 0 => &line[..k],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The modules `code` names through `crate::` paths.
fn modules_used(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (k, _) in code.match_indices("crate::") {
        let preceded_by_ident = code[..k].chars().last().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
        if preceded_by_ident {
            continue;
        }
        for path in use_tree_paths(&code[k + "crate::".len()..]) {
            out.extend(module_named(&path));
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src/ is readable").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") && p.file_name().is_some_and(|n| n != "tests.rs") {
            out.push(p);
        }
    }
}

/// Every (module, module it names, file) of `src/`.
fn dependencies() -> Vec<(String, String, String)> {
    let src = root().join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    files.sort();
    let mut out = vec![];
    for path in files {
        let rel = path.strip_prefix(&src).expect("under src/");
        let Some(from) = module_of(rel) else { continue };
        let text = std::fs::read_to_string(&path).expect("readable source");
        for to in modules_used(&non_test_code(&text)) {
            if to != from {
                out.push((from.clone(), to, format!("src/{}", rel.display())));
            }
        }
    }
    out
}

#[test]
fn module_dependencies_point_down() {
    let allowed = |from: &str, to: &str| ALLOWED.iter().any(|(m, tos)| *m == from && tos.contains(&to));
    let known: BTreeSet<&str> = ALLOWED.iter().map(|(m, _)| *m).collect();
    let mut wrong = vec![];
    let mut still_there = BTreeSet::new();
    for (from, to, file) in dependencies() {
        if !known.contains(from.as_str()) {
            wrong.push(format!("{file}: module `{from}` has no line in ALLOWED"));
        } else if !known.contains(to.as_str()) {
            wrong.push(format!("{file}: names `crate::{to}`, which is no module of ALLOWED"));
        } else if BEING_REMOVED.iter().any(|(f, t, _)| *f == from && *t == to) {
            still_there.insert((from.clone(), to.clone()));
        } else if !allowed(&from, &to) {
            wrong.push(format!("{file}: `{from}` must not use `{to}` (see ALLOWED in tests/layering.rs)"));
        }
    }
    for (from, to, why) in BEING_REMOVED {
        if !still_there.contains(&(from.to_string(), to.to_string())) {
            wrong.push(format!("`{from}` → `{to}` ({why}) is gone: remove its line from BEING_REMOVED"));
        }
    }
    assert!(wrong.is_empty(), "module layering broken:\n  {}", wrong.join("\n  "));
}

#[test]
fn the_scanner_reads_what_the_rule_says() {
    let paths = use_tree_paths("ir::{self, print::{shape_str as s}, Function};\n");
    assert_eq!(paths, vec![vec!["ir", "self"], vec!["ir", "print", "shape_str"], vec!["ir", "Function"]]);
    let code = non_test_code(
        "use crate::diag::Span; // crate::api in a comment\n/// [x](crate::lower::X)\n#[cfg(test)]\nmod tests;\nlet x = crate::backend::c::compile(m);\n#[cfg(test)]\nmod tests {\n    use crate::api;\n}\n",
    );
    let used: Vec<String> = modules_used(&code).into_iter().collect();
    assert_eq!(used, vec!["backend::c", "diag"]);
    assert_eq!(module_of(Path::new("backend/interp/mod.rs")).as_deref(), Some("backend::interp"));
    assert_eq!(module_of(Path::new("backend/mod.rs")).as_deref(), Some("backend"));
    assert_eq!(module_of(Path::new("api.rs")).as_deref(), Some("api"));
}
