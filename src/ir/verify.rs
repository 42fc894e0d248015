//! The IR verifier (to be written).
