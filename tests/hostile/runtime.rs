//! Hostile input: run-time readers and the command line.
use super::*;

#[test]
fn harness_reports_usage_error() {
    let o = run_limited(&["run"], b"", DEFAULT);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
}
