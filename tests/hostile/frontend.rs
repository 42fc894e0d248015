//! Hostile input: front end (issue 8, items 3, 8, 11 and 15). Long and deep
//! sources, sources over the size limit, a byte order mark, invalid UTF-8,
//! out-of-range literals, floods of errors.
use super::*;

/// Limits for the front-end cases: well under the default, so that a return
/// of the old per-node costs shows up as a failure here.
const FRONT: Limits = Limits { memory_mb: 1536, seconds: 30 };

fn check(name: &str, bytes: &[u8]) -> Outcome {
    let p = scratch(name, bytes);
    run_limited(&["check", p.to_str().unwrap()], b"", FRONT)
}

/// `x + x + … + x` with `n` terms, as the body of entry `f`.
fn flat_sum(n: usize, sep: &str) -> String {
    let mut s = String::from("entry f (x: f64) : f64 =\n  x");
    for _ in 1..n {
        s.push_str(sep);
        s.push('x');
    }
    s.push('\n');
    s
}

#[test]
fn long_flat_sum_compiles_and_runs() {
    // 200,000 terms, 800 kB: a tree 200,000 levels deep that the parser,
    // lowering and drop all walk without overflowing the stack.
    let p = scratch("flat_sum.ard", flat_sum(200_000, " + ").as_bytes());
    let o = run_limited(&["run", p.to_str().unwrap(), "--entry", "f", "--arg", "0.5"], b"", FRONT);
    assert_ok(&o);
    assert_eq!(o.stdout.trim(), "100000.0", "stderr: {}", o.stderr);
}

#[test]
fn flat_sum_deeper_than_the_limit_is_refused() {
    // 300,000 terms in 600 kB: more than MAX_EXPR_DEPTH levels.
    let o = check("deep_sum.ard", flat_sum(300_000, "+").as_bytes());
    assert_user_error(&o, "the body of `f` is too deeply nested", true);
    assert!(o.stderr.contains("deep_sum.ard:2:3"), "{}", o.stderr);
    assert!(o.stderr.contains("more than 250000 levels"), "{}", o.stderr);
}

#[test]
fn long_postfix_chain_is_refused_not_crashed() {
    // `x[0][0]…` and `t.0.0…` are chains too.
    let src = format!("entry f (x: [1]f64) : f64 = x{}\n", "[0]".repeat(300_000));
    assert_user_error(&check("deep_index.ard", src.as_bytes()), "too deeply nested", true);
    let src = format!("entry f (x: (f64, f64)) : f64 = x{}\n", ".0".repeat(300_000));
    assert_user_error(&check("deep_proj.ard", src.as_bytes()), "too deeply nested", true);
}

#[test]
fn deep_parentheses_are_refused() {
    let src = format!("entry f (x: f64) : f64 = {}x{}\n", "(".repeat(200_000), ")".repeat(200_000));
    assert_user_error(&check("deep_parens.ard", src.as_bytes()), "nested too deeply", true);
    let src = format!("entry f (x: f64) : f64 = {}x\n", "- ".repeat(200_000));
    assert_user_error(&check("deep_neg.ard", src.as_bytes()), "nested too deeply", true);
}

#[test]
fn long_size_expression_is_refused() {
    let src = format!("entry f (x: [{}]f64) : f64 = x[0]\n", vec!["1"; 100_000].join("+"));
    assert_user_error(&check("long_size.ard", src.as_bytes()), "size expression is too long", true);
}

#[test]
fn source_over_the_size_limit_is_refused() {
    // 5 MB of comments: over MAX_SOURCE_BYTES (2 MiB), refused before lexing.
    let mut src = String::from("entry f (x: f64) : f64 = x\n");
    while src.len() < 5_000_000 {
        src.push_str("-- a comment line to make the file large\n");
    }
    let o = check("too_large.ard", src.as_bytes());
    assert_user_error(&o, "source file is too large", true);
    assert!(o.stderr.contains(&format!("{} bytes", src.len())), "{}", o.stderr);
    assert!(o.stderr.contains("the limit is 2097152 bytes, 2 MiB"), "{}", o.stderr);
    assert!(o.elapsed.as_secs() < 5, "took {:?}", o.elapsed);
}

#[test]
fn endless_source_stream_is_refused() {
    // The command line refuses anything but a regular file at once.
    let o = run_limited(&["check", "/dev/zero"], b"", Limits { memory_mb: 512, seconds: 30 });
    assert_user_error(&o, "not a regular file", false);
    // The library, given one anyway, stops reading after the limit.
    match arden::Program::from_file("/dev/zero") {
        Err(e) => {
            let m = e.to_string();
            assert!(m.contains("source file is too large") && m.contains("more than 2097152 bytes"), "{m}");
        }
        Ok(_) => panic!("/dev/zero compiled"),
    }
}

#[test]
fn byte_order_mark_is_accepted() {
    let p = scratch("bom.ard", b"\xef\xbb\xbfentry f (x: f64) : f64 = x * 2.0\n");
    let o = run_limited(&["run", p.to_str().unwrap(), "--entry", "f", "--arg", "1.5"], b"", FRONT);
    assert_ok(&o);
    assert_eq!(o.stdout.trim(), "3.0");
    // Columns count from after the mark.
    let o = check("bom_err.ard", b"\xef\xbb\xbfentry f (x: f64) : f64 = y\n");
    assert_user_error(&o, "bom_err.ard:1:26", true);
}

#[test]
fn invalid_utf8_is_located() {
    let o = check("latin1.ard", b"entry f (x: f64) : f64 =\n  x -- caf\xe9\n");
    assert_user_error(&o, "not valid UTF-8", true);
    assert!(o.stderr.contains("latin1.ard:2:11"), "{}", o.stderr);
    assert!(o.stderr.contains("byte 0xe9"), "{}", o.stderr);
}

#[test]
fn out_of_range_literals_are_errors() {
    let o = check("inf.ard", b"entry f (x: f64) : f64 = x + 1e400\n");
    assert_user_error(&o, "float literal is out of range", true);
    assert!(o.stderr.contains("inf.ard:1:30"), "{}", o.stderr);
    let o = check("int.ard", b"entry f (x: i64) : i64 = x + 99999999999999999999\n");
    assert_user_error(&o, "integer literal is too large", true);
}

#[test]
fn unknown_character_is_shown_as_written() {
    let o = check("quote.ard", b"entry f (x: f64) : f64 = 'x'\n");
    assert_user_error(&o, "unknown character `'`", true);
    assert!(!o.stderr.contains("\\'"), "{}", o.stderr);
    // a string (only a `trace` label) elsewhere is named as written too
    let o = check("quote.ard", b"entry f (x: f64) : f64 = \"x\"\n");
    assert_user_error(&o, "a string can only be the label of `trace`", true);
    assert!(!o.stderr.contains("\\\""), "{}", o.stderr);
}

#[test]
fn a_flood_of_errors_is_capped_and_fast() {
    // 20,000 declarations with two errors each: 50 are shown, then a count.
    let mut src = String::new();
    for i in 0..20_000 {
        src.push_str(&format!("def f{i} (x: f64) : f64 = x $ x + true\n"));
    }
    let o = check("flood.ard", src.as_bytes());
    assert_user_error(&o, "and 19950 more errors (only the first 50 are shown)", true);
    assert_eq!(o.stderr.matches("error: unknown character").count(), 50, "{}", &o.stderr[..2000]);
    assert!(o.elapsed.as_secs() < 5, "took {:?}", o.elapsed);
}

#[test]
fn twenty_thousand_defs_check_quickly() {
    // `line_col` was a rescan from the start per node: 9 s for this file.
    let mut src = String::new();
    for i in 0..20_000 {
        src.push_str(&format!("def f{i} (x: f64) : f64 = x * {i}.0 + 1.0\n"));
    }
    src.push_str("entry main (x: f64) : f64 = f19999 x + true\n");
    let o = check("defs.ard", src.as_bytes());
    assert_user_error(&o, "defs.ard:20001:", true);
    assert!(o.elapsed.as_secs() < 3, "took {:?}", o.elapsed);
}

#[test]
fn syntax_error_does_not_hide_type_error_elsewhere() {
    let o = check("both.ard", b"def broken (x: f64) : f64 = x +\nentry wrong (x: f64) : f64 = x > 1.0\n");
    assert_user_error(&o, "expected an expression after `+`", true);
    assert!(o.stderr.contains("both.ard:2:30"), "the type error in `wrong` is reported too: {}", o.stderr);
}
