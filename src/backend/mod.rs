//! Backends that run core IR, and the limits (memory, time, Ctrl-C) both honour.
pub mod c;
pub mod interp;
pub mod limits;
pub mod vmath;
