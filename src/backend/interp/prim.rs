//! Scalar primitives.
//!
//! Integers wrap on overflow; integer `Div`/`Rem` truncate and fail on a zero
//! divisor. Floats follow IEEE (through Rust's `f64`/`f32` methods, so `f32`
//! operations are computed in single precision), except `lgamma` and `erf`,
//! which are computed in `f64` and rounded for `f32`. `min`/`max` (and
//! `relu`) return NaN when an operand is NaN.

use super::special::{digamma, lgamma, trigamma};
use super::{RuntimeError, at, internal};
use crate::backend::vmath;
use crate::ir::{Loc, Prim, Scalar};
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

/// Float unary operation: the expression is written once for both widths.
macro_rules! float1 {
    ($p:expr, $args:expr, $v:ident => $e:expr) => {
        match $args[0] {
            Value::F64($v) => Value::F64($e),
            Value::F32($v) => Value::F32($e),
            _ => return Err(bad($p, $args)),
        }
    };
}

/// Float binary operation.
macro_rules! float2 {
    ($p:expr, $args:expr, $a:ident, $b:ident => $e:expr) => {
        match (&$args[0], &$args[1]) {
            (&Value::F64($a), &Value::F64($b)) => Value::F64($e),
            (&Value::F32($a), &Value::F32($b)) => Value::F32($e),
            _ => return Err(bad($p, $args)),
        }
    };
}

/// Float operation by a vector math kernel: `f32` through `f64` (the C
/// backend spells it the same way).
macro_rules! vm {
    ($p:expr, $args:expr, $f:path) => {
        match $args[0] {
            Value::F64(a) => Value::F64($f(a)),
            Value::F32(a) => Value::F32($f(a as f64) as f32),
            _ => return Err(bad($p, $args)),
        }
    };
}

/// Numeric binary operation with one expression for floats and one for ints.
macro_rules! num2 {
    ($p:expr, $args:expr, $a:ident, $b:ident => $fe:expr, $ie:expr) => {
        match (&$args[0], &$args[1]) {
            (&Value::F64($a), &Value::F64($b)) => Value::F64($fe),
            (&Value::F32($a), &Value::F32($b)) => Value::F32($fe),
            (&Value::I64($a), &Value::I64($b)) => Value::I64($ie),
            (&Value::I32($a), &Value::I32($b)) => Value::I32($ie),
            _ => return Err(bad($p, $args)),
        }
    };
}

/// Comparison of two scalars of one type.
macro_rules! cmp2 {
    ($p:expr, $args:expr, $op:tt) => {
        Value::Bool(match (&$args[0], &$args[1]) {
            (Value::F64(a), Value::F64(b)) => a $op b,
            (Value::F32(a), Value::F32(b)) => a $op b,
            (Value::I64(a), Value::I64(b)) => a $op b,
            (Value::I32(a), Value::I32(b)) => a $op b,
            (Value::Bool(a), Value::Bool(b)) => a $op b,
            _ => return Err(bad($p, $args)),
        })
    };
}

/// Integer division or remainder with the zero check.
macro_rules! intdiv {
    ($p:expr, $args:expr, $loc:expr, $method:ident, $fop:tt) => {
        match (&$args[0], &$args[1]) {
            (&Value::F64(a), &Value::F64(b)) => Value::F64(a $fop b),
            (&Value::F32(a), &Value::F32(b)) => Value::F32(a $fop b),
            (&Value::I64(a), &Value::I64(b)) => {
                if b == 0 {
                    return Err(div_zero($loc));
                }
                Value::I64(a.$method(b))
            }
            (&Value::I32(a), &Value::I32(b)) => {
                if b == 0 {
                    return Err(div_zero($loc));
                }
                Value::I32(a.$method(b))
            }
            _ => return Err(bad($p, $args)),
        }
    };
}

fn div_zero(loc: &Option<Loc>) -> RuntimeError {
    RuntimeError { message: format!("integer division by zero{}", at(loc)) }
}

fn fmin<T: PartialOrd + Copy>(a: T, b: T) -> T {
    #[allow(clippy::eq_op)]
    let nan = |x: T| x != x;
    if nan(a) {
        a
    } else if nan(b) || b < a {
        b
    } else {
        a
    }
}

fn fmax<T: PartialOrd + Copy>(a: T, b: T) -> T {
    #[allow(clippy::eq_op)]
    let nan = |x: T| x != x;
    if nan(a) {
        a
    } else if nan(b) || b > a {
        b
    } else {
        a
    }
}

/// Convert a scalar to `to`: floats to ints truncate toward zero and
/// saturate (NaN gives 0), bools are 0/1, anything to bool is `!= 0`.
fn convert(to: Scalar, x: &Value) -> Option<Value> {
    let b2 = |b: bool| if b { 1.0 } else { 0.0 };
    Some(match to {
        Scalar::F64 => Value::F64(match *x {
            Value::F64(a) => a,
            Value::F32(a) => a as f64,
            Value::I64(a) => a as f64,
            Value::I32(a) => a as f64,
            Value::Bool(a) => b2(a),
            _ => return None,
        }),
        Scalar::F32 => Value::F32(match *x {
            Value::F64(a) => a as f32,
            Value::F32(a) => a,
            Value::I64(a) => a as f32,
            Value::I32(a) => a as f32,
            Value::Bool(a) => b2(a) as f32,
            _ => return None,
        }),
        Scalar::I64 => Value::I64(match *x {
            Value::F64(a) => a as i64,
            Value::F32(a) => a as i64,
            Value::I64(a) => a,
            Value::I32(a) => a as i64,
            Value::Bool(a) => a as i64,
            _ => return None,
        }),
        Scalar::I32 => Value::I32(match *x {
            Value::F64(a) => a as i32,
            Value::F32(a) => a as i32,
            Value::I64(a) => a as i32,
            Value::I32(a) => a,
            Value::Bool(a) => a as i32,
            _ => return None,
        }),
        Scalar::Bool => Value::Bool(match *x {
            Value::F64(a) => a != 0.0,
            Value::F32(a) => a != 0.0,
            Value::I64(a) => a != 0,
            Value::I32(a) => a != 0,
            Value::Bool(a) => a,
            _ => return None,
        }),
    })
}

fn arity(p: Prim) -> usize {
    use Prim::*;
    match p {
        Neg | Abs | Exp | Log | Sqrt | Sin | Cos | Tan | Tanh | Asin | Acos | Atan | Sinh | Cosh | Floor | Ceil | Lgamma | Digamma | Trigamma | Erf
        | Sigmoid | Relu | IsNan | Not | Convert(_) => 1,
        Select => 3,
        _ => 2,
    }
}

/// Evaluate `p` on scalar operands; `loc` is the statement's location (for
/// the integer division error).
pub(super) fn eval_prim(p: Prim, args: &[Value], loc: &Option<Loc>) -> Result<Value, RuntimeError> {
    use Prim::*;
    if args.len() != arity(p) {
        return Err(internal(format!("`{p:?}` takes {} operand(s) but has {}", arity(p), args.len())));
    }
    Ok(match p {
        Add => num2!(p, args, a, b => a + b, a.wrapping_add(b)),
        Sub => num2!(p, args, a, b => a - b, a.wrapping_sub(b)),
        Mul => num2!(p, args, a, b => a * b, a.wrapping_mul(b)),
        Div => intdiv!(p, args, loc, wrapping_div, /),
        Rem => intdiv!(p, args, loc, wrapping_rem, %),
        Min => match (&args[0], &args[1]) {
            (Value::Bool(a), Value::Bool(b)) => Value::Bool(*a && *b),
            _ => num2!(p, args, a, b => fmin(a, b), a.min(b)),
        },
        Max => match (&args[0], &args[1]) {
            (Value::Bool(a), Value::Bool(b)) => Value::Bool(*a || *b),
            _ => num2!(p, args, a, b => fmax(a, b), a.max(b)),
        },
        Neg => match args[0] {
            Value::F64(a) => Value::F64(-a),
            Value::F32(a) => Value::F32(-a),
            Value::I64(a) => Value::I64(a.wrapping_neg()),
            Value::I32(a) => Value::I32(a.wrapping_neg()),
            _ => return Err(bad(p, args)),
        },
        Abs => match args[0] {
            Value::F64(a) => Value::F64(a.abs()),
            Value::F32(a) => Value::F32(a.abs()),
            Value::I64(a) => Value::I64(a.wrapping_abs()),
            Value::I32(a) => Value::I32(a.wrapping_abs()),
            _ => return Err(bad(p, args)),
        },
        Pow => float2!(p, args, a, b => vmath::pow(a as f64, b as f64) as _),
        Atan2 => float2!(p, args, a, b => a.atan2(b)),
        Exp => vm!(p, args, vmath::exp),
        Log => vm!(p, args, vmath::log),
        Sqrt => float1!(p, args, a => a.sqrt()),
        Sin => vm!(p, args, vmath::sin),
        Cos => vm!(p, args, vmath::cos),
        Tan => float1!(p, args, a => a.tan()),
        Tanh => vm!(p, args, vmath::tanh),
        Asin => float1!(p, args, a => a.asin()),
        Acos => float1!(p, args, a => a.acos()),
        Atan => float1!(p, args, a => a.atan()),
        Sinh => float1!(p, args, a => a.sinh()),
        Cosh => float1!(p, args, a => a.cosh()),
        Floor => float1!(p, args, a => a.floor()),
        Ceil => float1!(p, args, a => a.ceil()),
        Sigmoid => vm!(p, args, vmath::sigmoid),
        Relu => float1!(p, args, a => if a > 0.0 || a.is_nan() { a } else { 0.0 }),
        Lgamma => match args[0] {
            Value::F64(a) => Value::F64(lgamma(a)),
            Value::F32(a) => Value::F32(lgamma(a as f64) as f32),
            _ => return Err(bad(p, args)),
        },
        Digamma => match args[0] {
            Value::F64(a) => Value::F64(digamma(a)),
            Value::F32(a) => Value::F32(digamma(a as f64) as f32),
            _ => return Err(bad(p, args)),
        },
        Trigamma => match args[0] {
            Value::F64(a) => Value::F64(trigamma(a)),
            Value::F32(a) => Value::F32(trigamma(a as f64) as f32),
            _ => return Err(bad(p, args)),
        },
        Erf => vm!(p, args, vmath::erf),
        IsNan => match args[0] {
            Value::F64(a) => Value::Bool(a.is_nan()),
            Value::F32(a) => Value::Bool(a.is_nan()),
            _ => return Err(bad(p, args)),
        },
        Eq => cmp2!(p, args, ==),
        Ne => cmp2!(p, args, !=),
        Lt => cmp2!(p, args, <),
        Le => cmp2!(p, args, <=),
        Gt => cmp2!(p, args, >),
        Ge => cmp2!(p, args, >=),
        And => match (&args[0], &args[1]) {
            (Value::Bool(a), Value::Bool(b)) => Value::Bool(*a && *b),
            _ => return Err(bad(p, args)),
        },
        Or => match (&args[0], &args[1]) {
            (Value::Bool(a), Value::Bool(b)) => Value::Bool(*a || *b),
            _ => return Err(bad(p, args)),
        },
        Not => match args[0] {
            Value::Bool(a) => Value::Bool(!a),
            _ => return Err(bad(p, args)),
        },
        Convert(to) => match convert(to, &args[0]) {
            Some(v) => v,
            None => return Err(bad(p, args)),
        },
        Select => match (&args[0], &args[1], &args[2]) {
            (Value::Bool(c), a, b) if std::mem::discriminant(a) == std::mem::discriminant(b) && !matches!(a, Value::Array(_) | Value::Tuple(_)) => {
                if *c {
                    a.clone()
                } else {
                    b.clone()
                }
            }
            _ => return Err(bad(p, args)),
        },
    })
}
