//! Backends that run core IR.
pub mod c;
pub mod interp;
