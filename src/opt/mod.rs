//! The optimiser (papers 001, 002, 000): rewrite rules scheduled by a
//! strategy language. Runs after `ad`, before any backend.

pub mod schedule;
pub mod strategy;

pub use strategy::{Schedule, Strategy};
