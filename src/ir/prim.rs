//! Every scalar primitive in one table: one row per primitive says its
//! printed name, the built-in function that applies it, its arity, the
//! scalar types it accepts and returns, whether it is worth hoisting out of
//! a loop, whether it can fail, how it evaluates (`prim/eval.rs`,
//! `prim/special.rs`) and how C spells it. The verifier, the interpreter,
//! the optimiser's folding and costs, the C emitter, the printer and the
//! built-ins of `lower` read the row; the derivative of each primitive is
//! the one thing kept elsewhere, in `ad/rules.rs`.
//!
//! Adding a primitive is a row here, a rule in `ad/rules.rs` (the compiler
//! asks for it: its match is exhaustive), a line in LANGUAGE.md (and an
//! example: `tests/docs.rs`) and a row of `tests/ad_rules.rs`, whose
//! coverage check reads `Prim::ALL`; `tests/c_backend.rs` then checks that
//! C gives the interpreter's bits. A maths library function the interpreter
//! calls must be the one the C spelling names.

pub mod eval;
pub mod special;
pub mod vmath;

use super::{Lit, Scalar};
use eval::Fault;
use rustc_hash::FxHashMap;
use std::sync::OnceLock;

/// One primitive's entry in the table.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// the name `arden ir` prints (`add`, `isnan`, `convert.f32`)
    pub name: &'static str,
    /// the built-in function of LANGUAGE.md §6 that is this primitive, if
    /// any (`is_nan`; `add` is the operator `+`, `digamma` has none)
    pub builtin: Option<&'static str>,
    pub arity: usize,
    pub typing: Typing,
    pub cost: Cost,
    pub traps: Traps,
    pub eval: Eval,
    /// how the C backend spells it, per kind of operand
    pub c: CSpelling,
}

/// The scalar types a primitive accepts and the type it returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Typing {
    /// operands of one type, which the result has
    Same(Accepts),
    /// operands of one type; the result is bool
    Test(Accepts),
    /// one operand of any type, converted to the given type
    To(Scalar),
    /// `select c a b`: a bool condition, then two operands of one type,
    /// which the result has
    Select,
}

/// Which operand types a primitive accepts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Accepts {
    Any,
    /// integers and floats
    Numeric,
    Float,
    Bool,
    /// `i64` and `i32`
    Int,
}

impl Accepts {
    pub fn accepts(self, s: Scalar) -> bool {
        match self {
            Accepts::Any => true,
            Accepts::Numeric => s != Scalar::Bool,
            Accepts::Float => s.is_float(),
            Accepts::Bool => s == Scalar::Bool,
            Accepts::Int => s.is_int(),
        }
    }

    /// The adjective for error messages (`float operands`).
    pub fn describe(self) -> &'static str {
        match self {
            Accepts::Any => "scalar",
            Accepts::Numeric => "numeric",
            Accepts::Float => "float",
            Accepts::Bool => "bool",
            Accepts::Int => "integer",
        }
    }
}

impl Typing {
    /// The operand whose type decides the operation (`select`'s first
    /// value; the first operand otherwise).
    pub fn typed_operand(self) -> usize {
        match self {
            Typing::Select => 1,
            Typing::Same(_) | Typing::Test(_) | Typing::To(_) => 0,
        }
    }
}

/// What the optimiser's loop-invariant code motion weighs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cost {
    /// an instruction or two: not worth a hoisted variable
    Cheap,
    /// a division or a maths library call: computed once instead of once
    /// per outer iteration when it does not depend on the loop
    Expensive,
}

/// Whether a primitive can fail at run time.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Traps {
    Never,
    /// integer operands with a zero divisor are the run-time error
    /// "integer division by zero" (floats follow IEEE)
    IntZeroDivisor,
    /// a product outside `i64` is the run-time error a size that overflows
    /// is (`Size::eval`), never a wrapped value
    SizeOverflow,
}

/// How a primitive evaluates on literal operands of the right number.
#[derive(Clone, Copy, Debug)]
pub enum Eval {
    /// a float function computed in each width's own precision (so the
    /// interpreter and C call the same maths library function)
    Float(fn(f64) -> f64, fn(f32) -> f32),
    /// a binary float function, in each width's own precision
    Float2(fn(f64, f64) -> f64, fn(f32, f32) -> f32),
    /// a float function computed in `f64` and rounded for `f32` (the
    /// special functions, whose C copy computes in `double`)
    Wide(fn(f64) -> f64),
    /// anything else, on the operands as literals
    Lits(fn(&[Lit]) -> Result<Lit, Fault>),
}

/// A primitive's C spelling for float, integer and bool operands (of the
/// operand `Typing::typed_operand` names).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CSpelling {
    pub float: Spell,
    pub int: Spell,
    pub bool: Spell,
}

/// One way to write a primitive in C; `a`, `b`, `c` are the operands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Spell {
    /// not defined on this kind of operand (the verifier rejects it)
    Undefined,
    /// a C operator: `(a OP b)`, or `(OP a)` with one operand
    Op(&'static str),
    /// a C operator whose int result is a bool: `(uint8_t)(a OP b)`, or
    /// `(uint8_t)OP a` with one operand
    BoolOp(&'static str),
    /// a maths library function: `f(a, …)` on double, `ff(a, …)` on float
    Libm(&'static str),
    /// a runtime function on double: `(float)f((double)a)` on float
    Wide(&'static str),
    /// a runtime function per width: `f64(a, …)` on f64/i64, `f32(a, …)`
    /// on f32/i32
    Sized(&'static str),
    /// a runtime function of a double: `f((double)a)`
    OfDouble(&'static str),
    /// a cast or other prefix: `(double)a`
    Prefix(&'static str),
    /// a C predicate macro: `(uint8_t)(f(a) != 0)`
    Predicate(&'static str),
    /// `(uint8_t)(a != 0)`
    NonZero,
    /// `(a ? b : c)`
    Conditional,
}

impl CSpelling {
    /// The spelling for operands of type `s`.
    pub fn on(&self, s: Scalar) -> Spell {
        match s {
            Scalar::F64 | Scalar::F32 => self.float,
            Scalar::I64 | Scalar::I32 => self.int,
            Scalar::Bool => self.bool,
        }
    }
}

/// Defined on floats only.
const fn floats(float: Spell) -> CSpelling {
    CSpelling { float, int: Spell::Undefined, bool: Spell::Undefined }
}

/// Defined on integers and floats.
const fn numeric(float: Spell, int: Spell) -> CSpelling {
    CSpelling { float, int, bool: Spell::Undefined }
}

/// Defined on integers only.
const fn ints(int: Spell) -> CSpelling {
    CSpelling { float: Spell::Undefined, int, bool: Spell::Undefined }
}

/// Defined on bools only.
const fn bools(bool: Spell) -> CSpelling {
    CSpelling { float: Spell::Undefined, int: Spell::Undefined, bool }
}

/// The same spelling on every type.
const fn every(s: Spell) -> CSpelling {
    CSpelling { float: s, int: s, bool: s }
}

const FLOAT: Typing = Typing::Same(Accepts::Float);
const NUMERIC: Typing = Typing::Same(Accepts::Numeric);
const COMPARISON: Typing = Typing::Test(Accepts::Any);
const LOGIC: Typing = Typing::Same(Accepts::Bool);
const BITS: Typing = Typing::Same(Accepts::Int);

/// Declares `Prim` with one variant per row (plus `Convert`, one row per
/// target type), `Prim::ALL` and `Prim::row`, all from one list, so no
/// primitive can miss a row or be left out of `ALL`.
macro_rules! primitives {
    ($($(#[$doc:meta])* $variant:ident => $row:expr,)*) => {
        /// Scalar primitive operations. All operands have the same scalar
        /// type unless their row's `Typing` says otherwise.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        pub enum Prim {
            $($(#[$doc])* $variant,)*
            /// convert to the given scalar type
            Convert(Scalar),
        }

        impl Prim {
            /// Every primitive, each conversion target included.
            pub const ALL: &'static [Prim] = &[
                $(Prim::$variant,)*
                Prim::Convert(Scalar::F64),
                Prim::Convert(Scalar::F32),
                Prim::Convert(Scalar::I64),
                Prim::Convert(Scalar::I32),
                Prim::Convert(Scalar::Bool),
            ];

            /// This primitive's row of the table.
            pub fn row(self) -> &'static Row {
                match self {
                    $(Prim::$variant => {
                        const ROW: Row = $row;
                        &ROW
                    })*
                    Prim::Convert(to) => convert_row(to),
                }
            }
        }
    };
}

// The built-ins come first, in the order "did you mean" suggestions try them.
primitives! {
    Exp => Row { name: "exp", builtin: Some("exp"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                 eval: Eval::Wide(vmath::exp), c: floats(Spell::Wide("ard_vm_exp")) },
    Log => Row { name: "log", builtin: Some("log"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                 eval: Eval::Wide(vmath::log), c: floats(Spell::Wide("ard_vm_log")) },
    Sqrt => Row { name: "sqrt", builtin: Some("sqrt"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                  eval: Eval::Float(f64::sqrt, f32::sqrt), c: floats(Spell::Libm("sqrt")) },
    Sin => Row { name: "sin", builtin: Some("sin"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                 eval: Eval::Wide(vmath::sin), c: floats(Spell::Wide("ard_vm_sin")) },
    Cos => Row { name: "cos", builtin: Some("cos"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                 eval: Eval::Wide(vmath::cos), c: floats(Spell::Wide("ard_vm_cos")) },
    Tan => Row { name: "tan", builtin: Some("tan"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                 eval: Eval::Float(f64::tan, f32::tan), c: floats(Spell::Libm("tan")) },
    Tanh => Row { name: "tanh", builtin: Some("tanh"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                  eval: Eval::Wide(vmath::tanh), c: floats(Spell::Wide("ard_vm_tanh")) },
    Asin => Row { name: "asin", builtin: Some("asin"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                  eval: Eval::Float(f64::asin, f32::asin), c: floats(Spell::Libm("asin")) },
    Acos => Row { name: "acos", builtin: Some("acos"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                  eval: Eval::Float(f64::acos, f32::acos), c: floats(Spell::Libm("acos")) },
    Atan => Row { name: "atan", builtin: Some("atan"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                  eval: Eval::Float(f64::atan, f32::atan), c: floats(Spell::Libm("atan")) },
    Sinh => Row { name: "sinh", builtin: Some("sinh"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                  eval: Eval::Float(f64::sinh, f32::sinh), c: floats(Spell::Libm("sinh")) },
    Cosh => Row { name: "cosh", builtin: Some("cosh"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                  eval: Eval::Float(f64::cosh, f32::cosh), c: floats(Spell::Libm("cosh")) },
    /// wrapping for integers
    Abs => Row { name: "abs", builtin: Some("abs"), arity: 1, typing: NUMERIC, cost: Cost::Cheap, traps: Traps::Never,
                 eval: Eval::Lits(eval::abs), c: numeric(Spell::Libm("fabs"), Spell::Sized("ard_abs")) },
    Floor => Row { name: "floor", builtin: Some("floor"), arity: 1, typing: FLOAT, cost: Cost::Cheap, traps: Traps::Never,
                   eval: Eval::Float(f64::floor, f32::floor), c: floats(Spell::Libm("floor")) },
    Ceil => Row { name: "ceil", builtin: Some("ceil"), arity: 1, typing: FLOAT, cost: Cost::Cheap, traps: Traps::Never,
                  eval: Eval::Float(f64::ceil, f32::ceil), c: floats(Spell::Libm("ceil")) },
    Lgamma => Row { name: "lgamma", builtin: Some("lgamma"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                    eval: Eval::Wide(special::lgamma), c: floats(Spell::Wide("ard_lgamma")) },
    Erf => Row { name: "erf", builtin: Some("erf"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                 eval: Eval::Wide(vmath::erf), c: floats(Spell::Wide("ard_vm_erf")) },
    /// `1 / (1 + e^-x)`, never exp of a large positive number
    Sigmoid => Row { name: "sigmoid", builtin: Some("sigmoid"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                     eval: Eval::Wide(vmath::sigmoid), c: floats(Spell::Wide("ard_vm_sigmoid")) },
    /// `max x 0`, NaN for NaN
    Relu => Row { name: "relu", builtin: Some("relu"), arity: 1, typing: FLOAT, cost: Cost::Cheap, traps: Traps::Never,
                  eval: Eval::Lits(eval::relu), c: floats(Spell::Sized("ard_relu")) },
    /// float -> bool
    IsNan => Row { name: "isnan", builtin: Some("is_nan"), arity: 1, typing: Typing::Test(Accepts::Float), cost: Cost::Cheap, traps: Traps::Never,
                   eval: Eval::Lits(eval::is_nan), c: floats(Spell::Predicate("isnan")) },
    Atan2 => Row { name: "atan2", builtin: Some("atan2"), arity: 2, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                   eval: Eval::Float2(f64::atan2, f32::atan2), c: floats(Spell::Libm("atan2")) },
    /// NaN when an operand is NaN; `and` on bools
    Min => Row { name: "min", builtin: Some("min"), arity: 2, typing: Typing::Same(Accepts::Any), cost: Cost::Cheap, traps: Traps::Never,
                 eval: Eval::Lits(eval::min),
                 c: CSpelling { float: Spell::Sized("ard_fmin"), int: Spell::Sized("ard_imin"), bool: Spell::BoolOp("&&") } },
    /// NaN when an operand is NaN; `or` on bools
    Max => Row { name: "max", builtin: Some("max"), arity: 2, typing: Typing::Same(Accepts::Any), cost: Cost::Cheap, traps: Traps::Never,
                 eval: Eval::Lits(eval::max),
                 c: CSpelling { float: Spell::Sized("ard_fmax"), int: Spell::Sized("ard_imax"), bool: Spell::BoolOp("||") } },
    Pow => Row { name: "pow", builtin: Some("pow"), arity: 2, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                 eval: Eval::Float2(vmath::pow, vmath::pow_through_f64), c: floats(Spell::Wide("ard_vm_pow")) },
    /// `log (1 + x)`, accurate near 0
    Log1p => Row { name: "log1p", builtin: Some("log1p"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                   eval: Eval::Wide(vmath::log1p), c: floats(Spell::Wide("ard_vm_log1p")) },
    /// `exp x - 1`, accurate near 0
    Expm1 => Row { name: "expm1", builtin: Some("expm1"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                   eval: Eval::Wide(vmath::expm1), c: floats(Spell::Wide("ard_vm_expm1")) },
    /// `1 - erf x`, accurate for large x
    Erfc => Row { name: "erfc", builtin: Some("erfc"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                  eval: Eval::Float(libm::erfc, libm::erfcf), c: floats(Spell::Libm("erfc")) },
    /// `log (1 + exp x)`, stable for every x: `max x 0 + log1p (exp (-|x|))`
    Softplus => Row { name: "softplus", builtin: Some("softplus"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                      eval: Eval::Wide(vmath::softplus), c: floats(Spell::Wide("ard_vm_softplus")) },
    /// `log (sigmoid x)` = `-softplus (-x)`
    LogSigmoid => Row { name: "logsigmoid", builtin: Some("logsigmoid"), arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                        eval: Eval::Wide(vmath::logsigmoid), c: floats(Spell::Wide("ard_vm_logsigmoid")) },
    /// `log (exp a + exp b)` = `max a b + log1p (exp (-|a - b|))`; ±∞ when the larger is
    LogAddExp => Row { name: "logaddexp", builtin: Some("logaddexp"), arity: 2, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                       eval: Eval::Float2(vmath::logaddexp, vmath::logaddexp_through_f64), c: floats(Spell::Wide("ard_vm_logaddexp")) },
    /// `x * log y`, and 0 where `x == 0` (also for y = 0 or NaN)
    Xlogy => Row { name: "xlogy", builtin: Some("xlogy"), arity: 2, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                   eval: Eval::Float2(vmath::xlogy, vmath::xlogy_through_f64), c: floats(Spell::Wide("ard_vm_xlogy")) },
    /// wrapping for integers
    Add => Row { name: "add", builtin: None, arity: 2, typing: NUMERIC, cost: Cost::Cheap, traps: Traps::Never,
                 eval: Eval::Lits(eval::add), c: numeric(Spell::Op("+"), Spell::Sized("ard_add")) },
    Sub => Row { name: "sub", builtin: None, arity: 2, typing: NUMERIC, cost: Cost::Cheap, traps: Traps::Never,
                 eval: Eval::Lits(eval::sub), c: numeric(Spell::Op("-"), Spell::Sized("ard_sub")) },
    Mul => Row { name: "mul", builtin: None, arity: 2, typing: NUMERIC, cost: Cost::Cheap, traps: Traps::Never,
                 eval: Eval::Lits(eval::mul), c: numeric(Spell::Op("*"), Spell::Sized("ard_mul")) },
    /// float division, or truncating integer division (error on zero)
    Div => Row { name: "div", builtin: None, arity: 2, typing: NUMERIC, cost: Cost::Expensive, traps: Traps::IntZeroDivisor,
                 eval: Eval::Lits(eval::div), c: numeric(Spell::Op("/"), Spell::Sized("ard_div")) },
    /// truncating remainder (error on zero for integers)
    Rem => Row { name: "rem", builtin: None, arity: 2, typing: NUMERIC, cost: Cost::Cheap, traps: Traps::IntZeroDivisor,
                 eval: Eval::Lits(eval::rem), c: numeric(Spell::Libm("fmod"), Spell::Sized("ard_rem")) },
    /// the product of two sizes, checked: an error where it leaves `i64`
    /// (how sizes are materialised, so a product of non-negative sizes is
    /// provably non-negative)
    SizeMul => Row { name: "size_mul", builtin: None, arity: 2, typing: BITS, cost: Cost::Cheap, traps: Traps::SizeOverflow,
                     eval: Eval::Lits(eval::size_mul), c: ints(Spell::Sized("ard_mul")) },
    Neg => Row { name: "neg", builtin: None, arity: 1, typing: NUMERIC, cost: Cost::Cheap, traps: Traps::Never,
                 eval: Eval::Lits(eval::neg), c: numeric(Spell::Op("-"), Spell::Sized("ard_neg")) },
    /// derivative of `Lgamma`
    Digamma => Row { name: "digamma", builtin: None, arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                     eval: Eval::Wide(special::digamma), c: floats(Spell::Wide("ard_digamma")) },
    /// derivative of `Digamma`
    Trigamma => Row { name: "trigamma", builtin: None, arity: 1, typing: FLOAT, cost: Cost::Expensive, traps: Traps::Never,
                      eval: Eval::Wide(special::trigamma), c: floats(Spell::Wide("ard_trigamma")) },
    Eq => Row { name: "eq", builtin: None, arity: 2, typing: COMPARISON, cost: Cost::Cheap, traps: Traps::Never,
                eval: Eval::Lits(eval::eq), c: every(Spell::BoolOp("==")) },
    Ne => Row { name: "ne", builtin: None, arity: 2, typing: COMPARISON, cost: Cost::Cheap, traps: Traps::Never,
                eval: Eval::Lits(eval::ne), c: every(Spell::BoolOp("!=")) },
    Lt => Row { name: "lt", builtin: None, arity: 2, typing: COMPARISON, cost: Cost::Cheap, traps: Traps::Never,
                eval: Eval::Lits(eval::lt), c: every(Spell::BoolOp("<")) },
    Le => Row { name: "le", builtin: None, arity: 2, typing: COMPARISON, cost: Cost::Cheap, traps: Traps::Never,
                eval: Eval::Lits(eval::le), c: every(Spell::BoolOp("<=")) },
    Gt => Row { name: "gt", builtin: None, arity: 2, typing: COMPARISON, cost: Cost::Cheap, traps: Traps::Never,
                eval: Eval::Lits(eval::gt), c: every(Spell::BoolOp(">")) },
    Ge => Row { name: "ge", builtin: None, arity: 2, typing: COMPARISON, cost: Cost::Cheap, traps: Traps::Never,
                eval: Eval::Lits(eval::ge), c: every(Spell::BoolOp(">=")) },
    And => Row { name: "and", builtin: None, arity: 2, typing: LOGIC, cost: Cost::Cheap, traps: Traps::Never,
                 eval: Eval::Lits(eval::and), c: bools(Spell::BoolOp("&&")) },
    Or => Row { name: "or", builtin: None, arity: 2, typing: LOGIC, cost: Cost::Cheap, traps: Traps::Never,
                eval: Eval::Lits(eval::or), c: bools(Spell::BoolOp("||")) },
    Not => Row { name: "not", builtin: None, arity: 1, typing: LOGIC, cost: Cost::Cheap, traps: Traps::Never,
                 eval: Eval::Lits(eval::not), c: bools(Spell::BoolOp("!")) },
    /// bitwise operations on integers (two's complement bits)
    BitAnd => Row { name: "bit_and", builtin: Some("bit_and"), arity: 2, typing: BITS, cost: Cost::Cheap, traps: Traps::Never,
                    eval: Eval::Lits(eval::bit_and), c: ints(Spell::Sized("ard_band")) },
    BitOr => Row { name: "bit_or", builtin: Some("bit_or"), arity: 2, typing: BITS, cost: Cost::Cheap, traps: Traps::Never,
                   eval: Eval::Lits(eval::bit_or), c: ints(Spell::Sized("ard_bor")) },
    BitXor => Row { name: "bit_xor", builtin: Some("bit_xor"), arity: 2, typing: BITS, cost: Cost::Cheap, traps: Traps::Never,
                    eval: Eval::Lits(eval::bit_xor), c: ints(Spell::Sized("ard_bxor")) },
    /// `a` shifted left by `b` bits; 0 when `b` is negative or not below the width
    ShiftLeft => Row { name: "shift_left", builtin: Some("shift_left"), arity: 2, typing: BITS, cost: Cost::Cheap, traps: Traps::Never,
                       eval: Eval::Lits(eval::shift_left), c: ints(Spell::Sized("ard_shl")) },
    /// logical right shift (zeros from the left); 0 for counts outside the width
    ShiftRight => Row { name: "shift_right", builtin: Some("shift_right"), arity: 2, typing: BITS, cost: Cost::Cheap, traps: Traps::Never,
                        eval: Eval::Lits(eval::shift_right), c: ints(Spell::Sized("ard_shr")) },
    /// `select c a b`: `c` is bool; `a`, `b` scalars of one type
    Select => Row { name: "select", builtin: None, arity: 3, typing: Typing::Select, cost: Cost::Cheap, traps: Traps::Never,
                    eval: Eval::Lits(eval::select), c: every(Spell::Conditional) },
}

/// The maths library functions Rust's standard library does not offer,
/// called as the C backend calls them, for the same bits.
mod libm {
    unsafe extern "C" {
        #[link_name = "erfc"]
        safe fn c_erfc(x: f64) -> f64;
        #[link_name = "erfcf"]
        safe fn c_erfcf(x: f32) -> f32;
    }

    pub fn erfc(x: f64) -> f64 {
        c_erfc(x)
    }

    pub fn erfcf(x: f32) -> f32 {
        c_erfcf(x)
    }
}

/// The rows of `Convert`, one per target type: floats to integers truncate
/// toward zero and saturate (NaN gives 0), integers wrap, bools are 0/1,
/// anything to bool is `!= 0`.
fn convert_row(to: Scalar) -> &'static Row {
    const fn row(name: &'static str, builtin: Option<&'static str>, to: Scalar, eval: Eval, c: CSpelling) -> Row {
        Row { name, builtin, arity: 1, typing: Typing::To(to), cost: Cost::Cheap, traps: Traps::Never, eval, c }
    }
    const TO_F64: Row = row("convert.f64", Some("f64"), Scalar::F64, Eval::Lits(eval::to_f64), every(Spell::Prefix("(double)")));
    const TO_F32: Row = row("convert.f32", Some("f32"), Scalar::F32, Eval::Lits(eval::to_f32), every(Spell::Prefix("(float)")));
    const TO_I64: Row = row(
        "convert.i64",
        Some("i64"),
        Scalar::I64,
        Eval::Lits(eval::to_i64),
        CSpelling { float: Spell::OfDouble("ard_f2i64"), int: Spell::Prefix("(int64_t)"), bool: Spell::Prefix("(int64_t)") },
    );
    const TO_I32: Row = row(
        "convert.i32",
        Some("i32"),
        Scalar::I32,
        Eval::Lits(eval::to_i32),
        CSpelling { float: Spell::OfDouble("ard_f2i32"), int: Spell::Prefix("(int32_t)(uint32_t)(uint64_t)"), bool: Spell::Prefix("(int32_t)") },
    );
    const TO_BOOL: Row = row("convert.bool", None, Scalar::Bool, Eval::Lits(eval::to_bool), every(Spell::NonZero));
    match to {
        Scalar::F64 => &TO_F64,
        Scalar::F32 => &TO_F32,
        Scalar::I64 => &TO_I64,
        Scalar::I32 => &TO_I32,
        Scalar::Bool => &TO_BOOL,
    }
}

impl Prim {
    /// The printed name (`add`, `convert.f32`).
    pub fn name(self) -> &'static str {
        self.row().name
    }

    pub fn arity(self) -> usize {
        self.row().arity
    }

    /// The primitive a built-in function of the surface language is (a map
    /// built once: lowering asks at every use of a built-in).
    pub fn from_builtin(name: &str) -> Option<Prim> {
        static BY_BUILTIN: OnceLock<FxHashMap<&'static str, Prim>> = OnceLock::new();
        BY_BUILTIN.get_or_init(|| Prim::ALL.iter().filter_map(|p| Some((p.row().builtin?, *p))).collect()).get(name).copied()
    }

    /// The value on literal operands, exactly as a run computes it (the
    /// interpreter runs this; the optimiser folds constants with it, so
    /// folding never changes a bit).
    pub fn eval(self, args: &[Lit]) -> Result<Lit, Fault> {
        let row = self.row();
        if args.len() != row.arity {
            return Err(Fault::IllTyped);
        }
        match row.eval {
            Eval::Float(f64_fn, f32_fn) => match args[0] {
                Lit::F64(a) => Ok(Lit::F64(f64_fn(a))),
                Lit::F32(a) => Ok(Lit::F32(f32_fn(a))),
                Lit::I64(_) | Lit::I32(_) | Lit::Bool(_) => Err(Fault::IllTyped),
            },
            Eval::Float2(f64_fn, f32_fn) => match (args[0], args[1]) {
                (Lit::F64(a), Lit::F64(b)) => Ok(Lit::F64(f64_fn(a, b))),
                (Lit::F32(a), Lit::F32(b)) => Ok(Lit::F32(f32_fn(a, b))),
                _ => Err(Fault::IllTyped),
            },
            Eval::Wide(f) => match args[0] {
                Lit::F64(a) => Ok(Lit::F64(f(a))),
                Lit::F32(a) => Ok(Lit::F32(f(a as f64) as f32)),
                Lit::I64(_) | Lit::I32(_) | Lit::Bool(_) => Err(Fault::IllTyped),
            },
            Eval::Lits(f) => f(args),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_builtins_found() {
        for (k, p) in Prim::ALL.iter().enumerate() {
            assert!(Prim::ALL[..k].iter().all(|q| q.name() != p.name() && q != p), "{p:?} twice");
            if let Some(b) = p.row().builtin {
                assert_eq!(Prim::from_builtin(b), Some(*p));
            }
        }
    }

    /// Every kind of operand a primitive accepts has a C spelling, and the
    /// kinds it rejects have none.
    #[test]
    fn c_spelling_matches_typing() {
        for p in Prim::ALL {
            let row = p.row();
            for s in [Scalar::F64, Scalar::F32, Scalar::I64, Scalar::I32, Scalar::Bool] {
                let accepted = match row.typing {
                    Typing::Same(a) | Typing::Test(a) => a.accepts(s),
                    Typing::To(_) | Typing::Select => true,
                };
                assert_eq!(row.c.on(s) != Spell::Undefined, accepted, "{p:?} on {s:?}");
            }
        }
    }

    /// The evaluation agrees with the typing on every operand type: a value
    /// of the promised type where the typing accepts the operands, an
    /// internal error where it does not.
    #[test]
    fn eval_matches_typing() {
        let one = |s: Scalar| match s {
            Scalar::F64 => Lit::F64(1.0),
            Scalar::F32 => Lit::F32(1.0),
            Scalar::I64 => Lit::I64(1),
            Scalar::I32 => Lit::I32(1),
            Scalar::Bool => Lit::Bool(true),
        };
        for p in Prim::ALL {
            let row = p.row();
            for s in [Scalar::F64, Scalar::F32, Scalar::I64, Scalar::I32, Scalar::Bool] {
                let mut args = vec![one(s); row.arity];
                if row.typing == Typing::Select {
                    args[0] = Lit::Bool(true);
                }
                let want = match row.typing {
                    Typing::Same(a) => a.accepts(s).then_some(s),
                    Typing::Test(a) => a.accepts(s).then_some(Scalar::Bool),
                    Typing::To(to) => Some(to),
                    Typing::Select => Some(s),
                };
                assert_eq!(p.eval(&args).ok().map(Lit::scalar), want, "{p:?} on {s:?}");
            }
            assert_eq!(p.eval(&vec![Lit::F64(1.0); row.arity + 1]), Err(Fault::IllTyped));
        }
    }
}
