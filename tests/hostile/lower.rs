//! Hostile input: lower cases (filled in by the lower work of issue 8).
#[allow(unused_imports)]
use super::*;
