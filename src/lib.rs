//! arden: a compiler and runtime for a functional array language with
//! automatic differentiation built in.
//!
//! The pipeline, one module per stage:
//! `syntax` (lex, parse) → `types` (surface types, declaration checks) →
//! `lower` (type and size checking while inlining and specialising into the
//! core IR) → `ir` (the core IR, its printer and verifier) →
//! `backend::interp` (the reference interpreter). `runtime` holds values and
//! data formats; `api` is the small public interface every front end uses.

pub mod ad;
pub mod api;
pub mod backend;
pub mod diag;
pub mod gradbench;
pub mod ir;
pub mod lower;
pub mod opt;
pub mod runtime;
pub mod syntax;
pub mod types;

pub use api::{Backend, Compiled, CompiledEntry, Entry, Error, OpCounts, Program, Stage};
pub use runtime::Value;
