//! Hostile input: interp cases (filled in by the interp work of issue 8).
#[allow(unused_imports)]
use super::*;
