//! The README's promise: every `cargo run --release -- …` command it shows
//! works, and where a `# → output` line follows, prints exactly that.

mod common;
use common::shell_words;
use std::process::Command;

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
