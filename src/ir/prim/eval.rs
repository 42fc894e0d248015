//! The scalar semantics of the primitives the table cannot say with one
//! maths function per width, on literal operands (the rows of `prim.rs`
//! point here).
//!
//! Integers wrap on overflow; integer `div`/`rem` truncate and fail on a
//! zero divisor. Floats follow IEEE through Rust's `f64`/`f32` operations,
//! so `f32` is computed in single precision. `min`/`max` (and `relu`)
//! return NaN when an operand is NaN; on bools they are `and`/`or`.

use crate::ir::Lit;

/// Why a primitive gives no value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fault {
    /// integer `div` or `rem` by zero: a run-time error of the program
    DivisionByZero,
    /// `size_mul` outside `i64`: a run-time error of the program
    SizeOverflow,
    /// operands of the wrong number or types: an internal error, since the
    /// verifier rejects such IR
    IllTyped,
}

type Res = Result<Lit, Fault>;

/// Float unary operation: the expression is written once for both widths.
macro_rules! float1 {
    ($args:expr, $v:ident => $e:expr) => {
        match $args[0] {
            Lit::F64($v) => Ok(Lit::F64($e)),
            Lit::F32($v) => Ok(Lit::F32($e)),
            Lit::I64(_) | Lit::I32(_) | Lit::Bool(_) => Err(Fault::IllTyped),
        }
    };
}

/// Numeric binary operation with one expression for floats and one for ints.
macro_rules! num2 {
    ($args:expr, $a:ident, $b:ident => $fe:expr, $ie:expr) => {
        match ($args[0], $args[1]) {
            (Lit::F64($a), Lit::F64($b)) => Ok(Lit::F64($fe)),
            (Lit::F32($a), Lit::F32($b)) => Ok(Lit::F32($fe)),
            (Lit::I64($a), Lit::I64($b)) => Ok(Lit::I64($ie)),
            (Lit::I32($a), Lit::I32($b)) => Ok(Lit::I32($ie)),
            _ => Err(Fault::IllTyped),
        }
    };
}

/// Numeric unary operation.
macro_rules! num1 {
    ($args:expr, $a:ident => $fe:expr, $ie:expr) => {
        match $args[0] {
            Lit::F64($a) => Ok(Lit::F64($fe)),
            Lit::F32($a) => Ok(Lit::F32($fe)),
            Lit::I64($a) => Ok(Lit::I64($ie)),
            Lit::I32($a) => Ok(Lit::I32($ie)),
            Lit::Bool(_) => Err(Fault::IllTyped),
        }
    };
}

/// Comparison of two scalars of one type.
macro_rules! cmp2 {
    ($args:expr, $op:tt) => {
        match ($args[0], $args[1]) {
            (Lit::F64(a), Lit::F64(b)) => Ok(Lit::Bool(a $op b)),
            (Lit::F32(a), Lit::F32(b)) => Ok(Lit::Bool(a $op b)),
            (Lit::I64(a), Lit::I64(b)) => Ok(Lit::Bool(a $op b)),
            (Lit::I32(a), Lit::I32(b)) => Ok(Lit::Bool(a $op b)),
            (Lit::Bool(a), Lit::Bool(b)) => Ok(Lit::Bool(a $op b)),
            _ => Err(Fault::IllTyped),
        }
    };
}

/// Integer division or remainder with the zero check; floats use `$fop`.
macro_rules! intdiv {
    ($args:expr, $method:ident, $fop:tt) => {
        match ($args[0], $args[1]) {
            (Lit::F64(a), Lit::F64(b)) => Ok(Lit::F64(a $fop b)),
            (Lit::F32(a), Lit::F32(b)) => Ok(Lit::F32(a $fop b)),
            (Lit::I64(_), Lit::I64(0)) | (Lit::I32(_), Lit::I32(0)) => Err(Fault::DivisionByZero),
            (Lit::I64(a), Lit::I64(b)) => Ok(Lit::I64(a.$method(b))),
            (Lit::I32(a), Lit::I32(b)) => Ok(Lit::I32(a.$method(b))),
            _ => Err(Fault::IllTyped),
        }
    };
}

pub fn add(x: &[Lit]) -> Res {
    num2!(x, a, b => a + b, a.wrapping_add(b))
}

pub fn sub(x: &[Lit]) -> Res {
    num2!(x, a, b => a - b, a.wrapping_sub(b))
}

pub fn mul(x: &[Lit]) -> Res {
    num2!(x, a, b => a * b, a.wrapping_mul(b))
}

pub fn size_mul(x: &[Lit]) -> Res {
    match (x[0], x[1]) {
        (Lit::I64(a), Lit::I64(b)) => a.checked_mul(b).map(Lit::I64).ok_or(Fault::SizeOverflow),
        (Lit::I32(a), Lit::I32(b)) => a.checked_mul(b).map(Lit::I32).ok_or(Fault::SizeOverflow),
        _ => Err(Fault::IllTyped),
    }
}

pub fn div(x: &[Lit]) -> Res {
    intdiv!(x, wrapping_div, /)
}

/// Integer binary operation on the two's complement bits (one expression
/// per width: `$a`, `$b` are `u64` or `u32`).
macro_rules! bits2 {
    ($args:expr, $a:ident, $b:ident => $e64:expr, $e32:expr) => {
        match ($args[0], $args[1]) {
            (Lit::I64(x), Lit::I64(y)) => {
                let ($a, $b) = (x as u64, y as u64);
                Ok(Lit::I64(($e64) as i64))
            }
            (Lit::I32(x), Lit::I32(y)) => {
                let ($a, $b) = (x as u32, y as u32);
                Ok(Lit::I32(($e32) as i32))
            }
            _ => Err(Fault::IllTyped),
        }
    };
}

pub fn bit_and(x: &[Lit]) -> Res {
    bits2!(x, a, b => a & b, a & b)
}

pub fn bit_or(x: &[Lit]) -> Res {
    bits2!(x, a, b => a | b, a | b)
}

pub fn bit_xor(x: &[Lit]) -> Res {
    bits2!(x, a, b => a ^ b, a ^ b)
}

/// Shifts by a count outside `0..width` (negative included) give 0.
pub fn shift_left(x: &[Lit]) -> Res {
    bits2!(x, a, b => a.checked_shl(b.try_into().unwrap_or(u32::MAX)).unwrap_or(0), a.checked_shl(b).unwrap_or(0))
}

/// Logical: zeros come in from the left.
pub fn shift_right(x: &[Lit]) -> Res {
    bits2!(x, a, b => a.checked_shr(b.try_into().unwrap_or(u32::MAX)).unwrap_or(0), a.checked_shr(b).unwrap_or(0))
}

pub fn rem(x: &[Lit]) -> Res {
    intdiv!(x, wrapping_rem, %)
}

pub fn neg(x: &[Lit]) -> Res {
    num1!(x, a => -a, a.wrapping_neg())
}

pub fn abs(x: &[Lit]) -> Res {
    num1!(x, a => a.abs(), a.wrapping_abs())
}

pub fn min(x: &[Lit]) -> Res {
    match (x[0], x[1]) {
        (Lit::Bool(a), Lit::Bool(b)) => Ok(Lit::Bool(a && b)),
        _ => num2!(x, a, b => fmin(a, b), a.min(b)),
    }
}

pub fn max(x: &[Lit]) -> Res {
    match (x[0], x[1]) {
        (Lit::Bool(a), Lit::Bool(b)) => Ok(Lit::Bool(a || b)),
        _ => num2!(x, a, b => fmax(a, b), a.max(b)),
    }
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

pub fn relu(x: &[Lit]) -> Res {
    float1!(x, a => if a > 0.0 || a.is_nan() { a } else { 0.0 })
}

pub fn is_nan(x: &[Lit]) -> Res {
    match x[0] {
        Lit::F64(a) => Ok(Lit::Bool(a.is_nan())),
        Lit::F32(a) => Ok(Lit::Bool(a.is_nan())),
        Lit::I64(_) | Lit::I32(_) | Lit::Bool(_) => Err(Fault::IllTyped),
    }
}

pub fn eq(x: &[Lit]) -> Res {
    cmp2!(x, ==)
}

pub fn ne(x: &[Lit]) -> Res {
    cmp2!(x, !=)
}

pub fn lt(x: &[Lit]) -> Res {
    cmp2!(x, <)
}

pub fn le(x: &[Lit]) -> Res {
    cmp2!(x, <=)
}

pub fn gt(x: &[Lit]) -> Res {
    cmp2!(x, >)
}

pub fn ge(x: &[Lit]) -> Res {
    cmp2!(x, >=)
}

pub fn and(x: &[Lit]) -> Res {
    match (x[0], x[1]) {
        (Lit::Bool(a), Lit::Bool(b)) => Ok(Lit::Bool(a && b)),
        _ => Err(Fault::IllTyped),
    }
}

pub fn or(x: &[Lit]) -> Res {
    match (x[0], x[1]) {
        (Lit::Bool(a), Lit::Bool(b)) => Ok(Lit::Bool(a || b)),
        _ => Err(Fault::IllTyped),
    }
}

pub fn not(x: &[Lit]) -> Res {
    match x[0] {
        Lit::Bool(a) => Ok(Lit::Bool(!a)),
        Lit::F64(_) | Lit::F32(_) | Lit::I64(_) | Lit::I32(_) => Err(Fault::IllTyped),
    }
}

pub fn select(x: &[Lit]) -> Res {
    match x[0] {
        Lit::Bool(c) if x[1].scalar() == x[2].scalar() => Ok(if c { x[1] } else { x[2] }),
        _ => Err(Fault::IllTyped),
    }
}

/// 0 or 1.
fn bit(b: bool) -> u8 {
    u8::from(b)
}

pub fn to_f64(x: &[Lit]) -> Res {
    Ok(Lit::F64(match x[0] {
        Lit::F64(a) => a,
        Lit::F32(a) => a as f64,
        Lit::I64(a) => a as f64,
        Lit::I32(a) => a as f64,
        Lit::Bool(a) => bit(a) as f64,
    }))
}

pub fn to_f32(x: &[Lit]) -> Res {
    Ok(Lit::F32(match x[0] {
        Lit::F64(a) => a as f32,
        Lit::F32(a) => a,
        Lit::I64(a) => a as f32,
        Lit::I32(a) => a as f32,
        Lit::Bool(a) => bit(a) as f32,
    }))
}

/// Floats truncate toward zero and saturate, NaN gives 0 (Rust's `as`).
pub fn to_i64(x: &[Lit]) -> Res {
    Ok(Lit::I64(match x[0] {
        Lit::F64(a) => a as i64,
        Lit::F32(a) => a as i64,
        Lit::I64(a) => a,
        Lit::I32(a) => a as i64,
        Lit::Bool(a) => a as i64,
    }))
}

/// Floats as for `to_i64`; `i64` wraps.
pub fn to_i32(x: &[Lit]) -> Res {
    Ok(Lit::I32(match x[0] {
        Lit::F64(a) => a as i32,
        Lit::F32(a) => a as i32,
        Lit::I64(a) => a as i32,
        Lit::I32(a) => a,
        Lit::Bool(a) => a as i32,
    }))
}

pub fn to_bool(x: &[Lit]) -> Res {
    Ok(Lit::Bool(match x[0] {
        Lit::F64(a) => a != 0.0,
        Lit::F32(a) => a != 0.0,
        Lit::I64(a) => a != 0,
        Lit::I32(a) => a != 0,
        Lit::Bool(a) => a,
    }))
}
