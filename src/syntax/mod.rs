//! Lexing and parsing of `.ard` source into the surface syntax tree.
pub mod ast;
pub mod lexer;
pub mod parser;

pub use parser::{MAX_SOURCE_BYTES, parse, parse_checkable};
