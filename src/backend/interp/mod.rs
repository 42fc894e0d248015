//! The reference interpreter over the core IR (to be written).
use crate::ir::Function;
use crate::runtime::Value;

/// Operation counts of one call: scalar arithmetic, element reads and writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    pub arith: u64,
    pub reads: u64,
    pub writes: u64,
}

/// A run-time failure: bounds, failed size coercion, division by zero...
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeError {
    pub message: String,
}

/// Run `func` with concrete sizes for `func.size_params` (same order) and flat
/// arguments for `func.params`; returns the flat results.
pub fn run(_func: &Function, _sizes: &[i64], _args: &[Value], _counts: &mut OpCounts) -> Result<Vec<Value>, RuntimeError> {
    todo!()
}
