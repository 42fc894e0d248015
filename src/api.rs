//! The public Rust API (to be written).
pub use crate::backend::interp::OpCounts;
pub struct Program;
pub struct Entry;
pub enum Error {}
