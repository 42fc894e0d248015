//! Random and broken source never panics the compiler: 10,000+ inputs
//! (token soup, and corpus programs with tokens deleted, duplicated, swapped
//! or replaced) each either compile to IR that verifies, or come back with
//! diagnostics that carry a location.

mod common;
use common::*;

const TOKENS: &[&str] = &[
    "def",
    "entry",
    "let",
    "in",
    "if",
    "then",
    "else",
    "for",
    "loop",
    "while",
    "do",
    "true",
    "false",
    "x",
    "y",
    "a",
    "n",
    "f",
    "i",
    "j",
    "sum",
    "map",
    "iota",
    "reduce",
    "scatter_add",
    "dot",
    "jvp",
    "jvp2",
    "jacfwd",
    "stop_gradient",
    "grad",
    "(",
    ")",
    "[",
    "]",
    ",",
    ".",
    ":",
    "=",
    "==",
    "->",
    "\\",
    "+",
    "-",
    "*",
    "/",
    "%",
    "**",
    "<",
    "<=",
    ">",
    "|>",
    "&&",
    "||",
    "!",
    ":>",
    "0",
    "1",
    "2.5",
    "1e3",
    "3i32",
    "f64",
    "f32",
    "i64",
    "bool",
    "idx",
    "[n]f64",
    "\n",
    " ",
    "--c\n",
    "999999999999999999999",
    "@",
    "\"",
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

// ------------------------------------------------------------------------
// Past the front end: argument binding, the JSON and `.npy` readers, the
// interpreter and AD at run time, on corpus programs with mutated
// arguments and files (issue 8). Most cases run in process; a smaller
// number run the `arden` binary end to end.

use arden::ir::{Scalar, Shape};
use arden::runtime::data;
use arden::{Program, Value};
use serde_json::Value as Json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One corpus program with its `-- test:` argument lists.
struct Target {
    path: std::path::PathBuf,
    prog: Program,
    /// (entry, JSON arguments) of every test line that names an entry.
    cases: Vec<(String, Vec<Json>)>,
    /// Programs with `while` loops get no new in-range numbers (only values
    /// the reader refuses, and structural changes), so a mutated argument
    /// cannot make a loop spin forever (`collatz (-3)` does).
    has_while: bool,
}

fn corpus_targets() -> Vec<Target> {
    let mut out = vec![];
    for dir in ["tests/programs", "tests/ad_programs", "examples"] {
        for path in ard_files(dir) {
            let text = std::fs::read_to_string(&path).unwrap();
            let Ok(prog) = Program::from_source(&path.display().to_string(), &text) else { continue };
            let cases: Vec<(String, Vec<Json>)> = cases(&text).into_iter().filter(|c| prog.entry(&c.entry).is_ok()).map(|c| (c.entry, c.args)).collect();
            if !cases.is_empty() {
                out.push(Target { path, prog, cases, has_while: text.contains("while") });
            }
        }
    }
    out
}

/// The element type of a parameter shape's leaves (the first one for tuples).
fn leaf_elem(shape: &Shape) -> Option<Scalar> {
    match shape {
        Shape::Leaf(t) => Some(t.elem),
        Shape::Tuple(cs) => cs.iter().find_map(leaf_elem),
    }
}

fn num(x: f64) -> Json {
    serde_json::Number::from_f64(x).map_or(Json::String("NaN".into()), Json::Number)
}

/// A replacement for one scalar of a parameter of element type `elem`.
/// Integers stay small or out of range (a loop count of 2^40 would only be
/// slow, not wrong); floats go anywhere. With `tame` (programs with `while`
/// loops), only values the reader refuses.
fn wild_scalar(rng: &mut Rng, elem: Option<Scalar>, tame: bool) -> Json {
    let k = rng.below(12);
    match elem {
        Some(Scalar::I64) | Some(Scalar::I32) => match k {
            0 => Json::from(u64::MAX),
            1 => num(1e19),
            // Just out of range: 2^31 for i32, 2^63 for i64.
            2 if elem == Some(Scalar::I32) => Json::from(1i64 << 31),
            2 => Json::from(1u64 << 63),
            3 => num(2.5),
            4 => Json::String("NaN".into()),
            5 => Json::Null,
            6 => Json::Bool(true),
            // In `while` programs, only values that are refused.
            _ if tame => Json::String("7".into()),
            _ => Json::from(rng.below(14) as i64 - 3),
        },
        Some(Scalar::Bool) => match k {
            0 => Json::from(1),
            1 => Json::Null,
            _ => Json::Bool(rng.below(2) == 0),
        },
        _ if tame => match k {
            0 => Json::Null,
            1 => Json::Bool(true),
            _ => Json::String("2.5".into()),
        },
        _ => match k {
            0 => Json::String("NaN".into()),
            1 => Json::String("Infinity".into()),
            2 => Json::String("-Infinity".into()),
            3 => num(1e39),
            4 => num(-1e308),
            5 => num(5e-324),
            6 => Json::from(i64::MIN),
            7 => Json::Bool(false),
            8 => num(0.0),
            _ => num(rng.unit() * 10f64.powi(rng.below(7) as i32 - 3)),
        },
    }
}

/// Every node of a JSON tree, as paths of child indices.
fn node_paths(j: &Json, path: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    out.push(path.clone());
    if let Json::Array(xs) = j {
        for (i, x) in xs.iter().enumerate() {
            path.push(i);
            node_paths(x, path, out);
            path.pop();
        }
    }
}

fn node_at<'a>(j: &'a mut Json, path: &[usize]) -> &'a mut Json {
    path.iter().fold(j, |cur, &i| &mut cur.as_array_mut().unwrap()[i])
}

/// Mutate one node of one argument: a new scalar, an element removed or
/// duplicated (ragged arrays, mismatched sizes), an empty array, an extra
/// level of nesting, or a level removed.
fn mutate_json(rng: &mut Rng, arg: &mut Json, elem: Option<Scalar>, tame: bool) {
    let mut paths = vec![];
    node_paths(arg, &mut vec![], &mut paths);
    let path = &paths[rng.below(paths.len())];
    let node = node_at(arg, path);
    match (rng.below(8), node) {
        (0, Json::Array(xs)) if !xs.is_empty() => {
            let i = rng.below(xs.len());
            xs.remove(i);
        }
        (1, Json::Array(xs)) if !xs.is_empty() && xs.len() < 64 => {
            let i = rng.below(xs.len());
            let x = xs[i].clone();
            xs.insert(i, x);
        }
        (2, node) => *node = Json::Array(vec![]),
        (3, node) => *node = Json::Array(vec![node.clone()]),
        (4, Json::Array(xs)) if !xs.is_empty() => {
            let first = xs[0].clone();
            *node_at(arg, path) = first;
        }
        (_, node) => {
            if node.is_array() && rng.below(2) == 0 {
                // Descend to a scalar leaf below this node.
                let mut cur = node;
                while let Json::Array(xs) = cur {
                    if xs.is_empty() {
                        return;
                    }
                    let i = rng.below(xs.len());
                    cur = &mut xs[i];
                }
                *cur = wild_scalar(rng, elem, tame);
            } else {
                *node = wild_scalar(rng, elem, tame);
            }
        }
    }
}

/// A character-level change to JSON text.
fn mutate_text(rng: &mut Rng, text: &str) -> String {
    const BITS: &[&str] = &["[", "]", ",", "-", "-0", "0", ".", "e", "9", "\"", "NaN", "Infinity", " ", "1e39", "\u{e9}", "\u{feff}", "null", "{}"];
    let mut chars: Vec<String> = text.chars().map(String::from).collect();
    for _ in 0..1 + rng.below(3) {
        let i = rng.below(chars.len() + 1);
        match rng.below(3) {
            0 if i < chars.len() => {
                chars.remove(i);
            }
            _ => chars.insert(i, BITS[rng.below(BITS.len())].to_string()),
        }
    }
    chars.concat()
}

/// A byte-level change to a `.npy` file, aimed at the header about half the time.
fn mutate_npy(rng: &mut Rng, bytes: &[u8]) -> Vec<u8> {
    const HEADER_BITS: &[&[u8]] =
        &[b"[", b"(", b")", b"'", b",", b"1", b"-", b"}", b"{", b"L", b"99999999999", b"'descr': '<i4', ", b"True", b" ", b"\n", b"'shape': (2, 2), "];
    let mut b = bytes.to_vec();
    let header_end = b.iter().position(|&c| c == b'\n').map_or(b.len(), |p| p + 1);
    for _ in 0..1 + rng.below(3) {
        match rng.below(9) {
            // A data byte: the file stays valid, a value changes.
            7 | 8 if b.len() > header_end => {
                let i = header_end + rng.below(b.len() - header_end);
                b[i] = rng.below(256) as u8;
            }
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 => {
                let n = rng.below(b.len() + 1);
                b.truncate(n);
            }
            2 => b.extend((0..1 + rng.below(16)).map(|_| rng.below(256) as u8)),
            3 if b.len() > 9 => {
                // The header length field.
                b[8] = rng.below(256) as u8;
                b[9] = [0u8, 1, 255][rng.below(3)];
            }
            _ => {
                let i = rng.below(header_end.min(b.len()) + 1);
                let bit = HEADER_BITS[rng.below(HEADER_BITS.len())];
                b.splice(i..i, bit.iter().copied());
            }
        }
    }
    b
}

/// Call an entry in process and, now and then, its forward and reverse
/// derivatives. Errors are fine; panics are caught by the caller.
fn exercise(prog: &Program, entry: &str, args: &[Value], rng: &mut Rng) {
    let Ok(e) = prog.entry(entry) else { return };
    let Ok(y) = e.call(args) else { return };
    let _ = y.to_json();
    if rng.below(4) == 0 {
        let tangents: Vec<Value> = args.iter().map(|a| direction(a, rng)).collect();
        let _ = e.jvp(args, &tangents);
        let _ = e.vjp(args, &direction(&y, rng));
    }
}

/// Whether every integer in `v` is small (a mutated loop count stays cheap).
fn ints_small(v: &Value) -> bool {
    let small = |x: i64| (-3..=20).contains(&x);
    match v {
        Value::I64(x) => small(*x),
        Value::I32(x) => small(*x as i64),
        Value::Array(a) => match &a.data {
            arden::runtime::ArrayData::I64(xs) => xs.iter().all(|&x| small(x)),
            arden::runtime::ArrayData::I32(xs) => xs.iter().all(|&x| small(x as i64)),
            _ => true,
        },
        Value::Tuple(vs) => vs.iter().all(ints_small),
        _ => true,
    }
}

/// Progress shared with the watchdog: the case number and a description.
type Progress = Arc<Mutex<(usize, String)>>;

/// Run `work` on a big stack while the calling thread checks that no single
/// case takes longer than `per_case`.
fn with_watchdog(per_case: Duration, work: impl FnOnce(Progress) -> Vec<String> + Send + 'static) -> Vec<String> {
    let progress: Progress = Arc::new(Mutex::new((0, String::new())));
    let p2 = progress.clone();
    let handle = std::thread::Builder::new().stack_size(256 << 20).spawn(move || work(p2)).unwrap();
    let mut last = (usize::MAX, Instant::now());
    while !handle.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
        let (k, desc) = progress.lock().map(|g| g.clone()).unwrap_or_default();
        if k != last.0 {
            last = (k, Instant::now());
        } else if last.1.elapsed() > per_case {
            panic!("case {k} still running after {per_case:?}:\n{desc}");
        }
    }
    handle.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}

fn describe(t: &Target, entry: &str, args: &[String]) -> String {
    format!("{} --entry {entry} {}", t.path.display(), args.iter().map(|a| format!("--arg '{a}'")).collect::<Vec<_>>().join(" "))
}

#[test]
fn mutated_arguments_and_files_never_panic_in_process() {
    let failures = with_watchdog(Duration::from_secs(20), |progress| {
        std::panic::set_hook(Box::new(|_| {}));
        let targets = corpus_targets();
        assert!(targets.len() >= 40, "only {} corpus programs with tests", targets.len());
        let mut rng = Rng(0xA5A5_1234_DEAD_BEEF);
        let mut failures = vec![];
        let (mut calls, mut bound, mut npy_ok) = (0usize, 0usize, 0usize);
        let total = 10_200;
        for k in 0..total {
            let t = &targets[rng.below(targets.len())];
            let (entry, json_args) = &t.cases[rng.below(t.cases.len())];
            let params: Vec<(String, Shape)> = t.prog.entry(entry).unwrap().params().to_vec();
            if params.is_empty() || params.len() != json_args.len() {
                continue;
            }
            let mut texts: Vec<String> = json_args.iter().map(|j| j.to_string()).collect();
            let which = rng.below(params.len());
            let mode = k % 10;
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut args: Vec<Result<Value, String>> = vec![];
                let mut npy_case = None;
                if mode < 6 {
                    // Structural and value mutations of the JSON.
                    let mut j = json_args.clone();
                    for _ in 0..1 + rng.below(2) {
                        let w = rng.below(params.len());
                        mutate_json(&mut rng, &mut j[w], leaf_elem(&params[w].1), t.has_while);
                    }
                    texts = j.iter().map(|j| j.to_string()).collect();
                } else if mode < 8 {
                    // Text mutations (skipped for `while` programs: values could go wild).
                    if !t.has_while {
                        texts[which] = mutate_text(&mut rng, &texts[which]);
                    }
                } else {
                    // `.npy` bytes of a correct argument, mutated.
                    if let Shape::Leaf(_) = params[which].1
                        && let Ok(v) = data::value_from_json(&json_args[which], &params[which].1)
                        && let Ok(bytes) = data::npy_bytes(&v)
                    {
                        npy_case = Some(mutate_npy(&mut rng, &bytes));
                    }
                }
                let mut desc = describe(t, entry, &texts);
                if npy_case.is_some() {
                    desc.push_str(&format!(" (argument {} from mutated .npy bytes)", which + 1));
                }
                *progress.lock().unwrap() = (k, desc);
                for (i, ((_, shape), text)) in params.iter().zip(&texts).enumerate() {
                    if i == which
                        && let Some(bytes) = &npy_case
                    {
                        let v = data::npy_from_bytes("mutated.npy", bytes);
                        if v.is_ok() {
                            npy_ok += 1;
                        }
                        // Values read from .npy go through the same check as files.
                        args.push(v.and_then(|v| {
                            let expect = data::value_from_json(&json_args[i], shape)?;
                            if v.elem() != expect.elem() || v.shape().len() != expect.shape().len() || (t.has_while && v.shape() != expect.shape()) {
                                return Err("type".into());
                            }
                            if (t.has_while || !ints_small(&v)) && v.to_json() != expect.to_json() {
                                return Err("values changed in a while program".into());
                            }
                            Ok(v)
                        }));
                    } else {
                        let streamed = data::parse_arg(text, shape);
                        // The streaming reader agrees with the JSON-tree one (on
                        // bad input both fail, possibly naming different faults:
                        // the tree reader checks a row's length before its elements).
                        if let Ok(tree) = data::parse_json_text(text) {
                            let tree = data::value_from_json(&tree, shape);
                            let same = match (&tree, &streamed) {
                                (Ok(a), Ok(b)) => a.to_json() == b.to_json() && a.shape() == b.shape(),
                                (Err(_), Err(_)) => true,
                                _ => false,
                            };
                            assert!(same, "readers disagree on {text}: {tree:?} vs {streamed:?}");
                        }
                        args.push(streamed);
                    }
                }
                if let Ok(args) = args.into_iter().collect::<Result<Vec<_>, _>>() {
                    bound += 1;
                    calls += 1;
                    exercise(&t.prog, entry, &args, &mut rng);
                }
            }));
            if let Err(payload) = result {
                let what = payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
                failures.push(format!("PANIC ({what}) on case {k}: {}", describe(t, entry, &texts)));
                if failures.len() > 5 {
                    break;
                }
            }
        }
        let _ = std::panic::take_hook();
        eprintln!("{total} cases: {bound} bound all arguments, {calls} calls, {npy_ok} mutated .npy files decoded");
        assert!(!failures.is_empty() || (bound > 2_000 && npy_ok > 100), "too few cases reach the interpreter: {bound} bound, {npy_ok} .npy decoded");
        failures
    });
    assert!(failures.is_empty(), "{}", failures.join("\n-----\n"));
}

/// Reader-only cases: the `.npy` decoder on mutated example data files and
/// the JSON reader on mutated text, for every parameter shape in the corpus.
#[test]
fn mutated_data_files_never_panic_the_readers() {
    let failures = with_watchdog(Duration::from_secs(10), |progress| {
        std::panic::set_hook(Box::new(|_| {}));
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/gmm_d10_k25_n1000");
        let seeds: Vec<Vec<u8>> = ["alpha", "mu", "q", "l"].iter().map(|f| std::fs::read(dir.join(format!("{f}.npy"))).unwrap()).collect();
        let mut rng = Rng(0x0123_4567_89AB_CDEF);
        let mut failures = vec![];
        for k in 0..4_000 {
            let seed = rng.below(seeds.len());
            let bytes = mutate_npy(&mut rng, &seeds[seed]);
            *progress.lock().unwrap() = (k, format!("{bytes:?}"));
            let r = std::panic::catch_unwind(|| {
                if let Ok(v) = data::npy_from_bytes("m.npy", &bytes) {
                    // What decodes encodes and decodes back the same.
                    let again = data::npy_from_bytes("again.npy", &data::npy_bytes(&v).unwrap()).unwrap();
                    assert_eq!(again.to_json(), v.to_json());
                }
            });
            if r.is_err() {
                failures.push(format!("PANIC decoding {bytes:?}"));
            }
        }
        let _ = std::panic::take_hook();
        failures
    });
    assert!(failures.is_empty(), "{}", failures.join("\n-----\n"));
}

/// The binary end to end: corpus programs run with mutated `--arg` values,
/// given inline, as `@file.json` or as `@file.npy`, some with `--output`.
/// Every run must end (within the watchdog's limit) with exit code 0 or 1,
/// an `error:` message on failure, no panic, and a readable output file on
/// success.
#[test]
fn mutated_command_lines_end_cleanly() {
    let exe = env!("CARGO_BIN_EXE_arden");
    let targets = corpus_targets();
    let dir = std::env::temp_dir().join(format!("arden-cli-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng(0xC0FF_EE00_1234_5678);
    let mut failures = vec![];
    let runs = 300;
    let mut exits = [0usize; 2];
    for k in 0..runs {
        let t = &targets[rng.below(targets.len())];
        let (entry, json_args) = &t.cases[rng.below(t.cases.len())];
        let params: Vec<(String, Shape)> = t.prog.entry(entry).unwrap().params().to_vec();
        if params.len() != json_args.len() {
            continue;
        }
        let mut j = json_args.clone();
        if !params.is_empty() && rng.below(4) != 0 {
            let w = rng.below(params.len());
            mutate_json(&mut rng, &mut j[w], leaf_elem(&params[w].1), t.has_while);
        }
        let mut cmd_args: Vec<String> = vec!["run".into(), t.path.display().to_string(), "--entry".into(), entry.clone()];
        for (i, (a, (_, shape))) in j.iter().zip(&params).enumerate() {
            let text = a.to_string();
            let spec = match rng.below(4) {
                0 => {
                    let f = dir.join(format!("a{k}_{i}.json"));
                    std::fs::write(&f, &text).unwrap();
                    format!("@{}", f.display())
                }
                1 if matches!(shape, Shape::Leaf(_)) => {
                    // The .npy of the (unmutated) argument, maybe damaged.
                    let Ok(v) = data::value_from_json(&json_args[i], shape) else { continue };
                    let mut bytes = data::npy_bytes(&v).unwrap();
                    if rng.below(2) == 0 {
                        let m = mutate_npy(&mut rng, &bytes);
                        let ok = data::npy_from_bytes("m", &m).is_ok_and(|w| (!t.has_while && ints_small(&w)) || w.to_json() == v.to_json());
                        if ok || data::npy_from_bytes("m", &m).is_err() {
                            bytes = m;
                        }
                    }
                    let f = dir.join(format!("a{k}_{i}.npy"));
                    std::fs::write(&f, &bytes).unwrap();
                    format!("@{}", f.display())
                }
                _ => text,
            };
            cmd_args.push("--arg".into());
            cmd_args.push(spec);
        }
        let out_file = match rng.below(4) {
            0 => Some(dir.join(format!("out{k}.npy"))),
            1 => Some(dir.join(format!("out{k}.json"))),
            _ => None,
        };
        if let Some(o) = &out_file {
            cmd_args.push("--output".into());
            cmd_args.push(o.display().to_string());
        }
        let shown = cmd_args.iter().map(|a| format!("'{a}'")).collect::<Vec<_>>().join(" ");
        let mut child =
            std::process::Command::new(exe).args(&cmd_args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            // a cold C compile of the largest entries is slow (the Hessian
            // through the linear algebra rules, r23's `hnll`: 47,000 lines
            // of C, 23-26 s on 2 cores): the watchdog is for hangs
            if start.elapsed() > Duration::from_secs(90) {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let o = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        let problem = match o.status.code() {
            None => Some("killed (signal or time limit)".to_string()),
            Some(c @ (0 | 1)) if !stderr.contains("panicked") && !stderr.contains("internal compiler error") => {
                exits[c as usize] += 1;
                if c == 1 && !stderr.starts_with("error") {
                    Some("exit 1 without an `error` message".to_string())
                } else if c == 0
                    && let Some(f) = &out_file
                {
                    let bytes = std::fs::read(f).unwrap_or_default();
                    let readable = if f.extension().is_some_and(|e| e == "npy") {
                        data::npy_from_bytes("out", &bytes).is_ok()
                    } else {
                        data::parse_json_text(&String::from_utf8_lossy(&bytes)).is_ok()
                    };
                    (!readable).then(|| "unreadable --output file".to_string())
                } else {
                    None
                }
            }
            Some(c) => Some(format!("exit code {c}")),
        };
        if let Some(p) = problem {
            failures.push(format!("{p}: arden {shown}\n{stderr}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{runs} command lines: {} succeeded, {} refused with exit 1", exits[0], exits[1]);
    assert!(failures.is_empty(), "{}", failures.join("\n-----\n"));
    assert!(exits[0] > runs / 10 && exits[1] > runs / 10, "{exits:?}");
}
