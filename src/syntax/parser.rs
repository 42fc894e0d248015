//! Parser (to be written).
use crate::{diag::{Diagnostic, Source}, syntax::ast::Program};
pub fn parse(_source: &Source) -> (Program, Vec<Diagnostic>) { todo!() }
