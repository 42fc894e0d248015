//! Hostile input: frontend cases (filled in by the frontend work of issue 8).
#[allow(unused_imports)]
use super::*;
