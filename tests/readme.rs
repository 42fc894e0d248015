//! The README's promise: every `cargo run --release -- …` command it shows
//! works, and where a `# → output` line follows, prints exactly that.

use std::process::Command;

/// Split a command line the way a POSIX shell would for our simple cases:
/// whitespace separates words, single quotes group.
fn shell_words(s: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur = String::new();
    let mut in_quote = false;
    let mut any = false;
    for ch in s.chars() {
        match ch {
            '\'' => {
                in_quote = !in_quote;
                any = true;
            }
            c if c.is_whitespace() && !in_quote => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

#[test]
fn readme_commands_work_as_shown() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    let mut ran = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim().strip_prefix("cargo run --release -- ") else { continue };
        let args = shell_words(rest);
        let out = Command::new(env!("CARGO_BIN_EXE_arden")).args(&args).current_dir(root).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "README line {}: `{line}` failed:\n{}{}", i + 1, stdout, String::from_utf8_lossy(&out.stderr));
        if let Some(expected) = lines.get(i + 1).and_then(|l| l.trim().strip_prefix("# → ")) {
            assert_eq!(stdout.trim(), expected.trim(), "README line {}: `{line}`", i + 1);
        }
        ran += 1;
    }
    assert!(ran >= 6, "expected the README to show at least 6 example commands, found {ran}");
}
