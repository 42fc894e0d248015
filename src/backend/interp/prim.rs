//! Scalar primitives: the interpreter's values through the primitive
//! table's evaluation (`ir/prim.rs`), with its faults as run-time errors.

use super::{RuntimeError, at, internal};
use crate::ir::prim::eval::Fault;
use crate::ir::{Lit, Loc, Prim};
use crate::runtime::Value;

fn bad(p: Prim, args: &[Value]) -> RuntimeError {
    let tys: Vec<String> = args
        .iter()
        .map(|a| match a.elem() {
            Some(s) if matches!(a, Value::Array(_)) => format!("[..]{}", s.name()),
            Some(s) => s.name().to_string(),
            None => "tuple".into(),
        })
        .collect();
    internal(format!("`{p:?}` applied to ({})", tys.join(", ")))
}

fn lit_of(v: &Value) -> Option<Lit> {
    Some(match *v {
        Value::F64(x) => Lit::F64(x),
        Value::F32(x) => Lit::F32(x),
        Value::I64(x) => Lit::I64(x),
        Value::I32(x) => Lit::I32(x),
        Value::Bool(x) => Lit::Bool(x),
        _ => return None,
    })
}

fn value_of(l: Lit) -> Value {
    match l {
        Lit::F64(x) => Value::F64(x),
        Lit::F32(x) => Value::F32(x),
        Lit::I64(x) => Value::I64(x),
        Lit::I32(x) => Value::I32(x),
        Lit::Bool(x) => Value::Bool(x),
    }
}

/// The most operands a primitive has (`select`).
const MAX_OPERANDS: usize = 3;

/// Evaluate `p` on scalar operands; `loc` is the statement's location (for
/// the integer division error).
pub(super) fn eval_prim(p: Prim, args: &[Value], loc: &Option<Loc>) -> Result<Value, RuntimeError> {
    let mut lits = [Lit::Bool(false); MAX_OPERANDS];
    if args.len() > MAX_OPERANDS {
        return Err(bad(p, args));
    }
    for (l, a) in lits.iter_mut().zip(args) {
        *l = lit_of(a).ok_or_else(|| bad(p, args))?;
    }
    match p.eval(&lits[..args.len()]) {
        Ok(l) => Ok(value_of(l)),
        Err(Fault::DivisionByZero) => Err(RuntimeError { message: format!("integer division by zero{}", at(loc)) }),
        Err(Fault::SizeOverflow) => Err(RuntimeError { message: format!("{}{}", crate::ir::size::overflow_message(), at(loc)) }),
        Err(Fault::IllTyped) => Err(bad(p, args)),
    }
}
