//! Backends that run core IR.
pub mod interp;
