//! The forward-mode (JVP) rule of every scalar primitive, in one table.
//! `jvp.rs` handles the array constructs; everything a primitive knows about
//! its derivative is here. Conventions at kinks follow LANGUAGE.md §7:
//! `max`/`min` route the tangent to the first extremal argument, `abs` and
//! `relu` have derivative 0 at 0, comparisons and integer operations have no
//! tangent.

use super::AdError;
use super::build::{Builder, lit};
use crate::ir::{Atom, Prim, Scalar};

/// Tangent of `y = op(args)` given the operand tangents (`None` = zero).
/// `s` is the scalar type of the result. Returns `None` for a zero tangent.
pub fn prim_jvp(b: &mut Builder, op: Prim, args: &[Atom], y: Atom, dargs: &[Option<Atom>], s: Scalar) -> Result<Option<Atom>, AdError> {
    use Prim::*;
    if dargs.iter().all(Option::is_none) || !s.is_float() && !matches!(op, Convert(_)) {
        return Ok(None);
    }
    let d = |k: usize| dargs.get(k).copied().flatten();
    let x = args[0];
    let mut r = R { b, s };
    Ok(match op {
        Add => r.add(d(0), d(1)),
        Sub => r.sub(d(0), d(1)),
        Mul => {
            let l = r.scale(d(0), args[1]);
            let rt = r.scale(d(1), x);
            r.add(l, rt)
        }
        // d(a/b) = (da - y db) / b
        Div => {
            let ydb = r.scale(d(1), y);
            let num = r.sub(d(0), ydb);
            num.map(|n| r.p(Div, vec![n, args[1]]))
        }
        // a % b = a - b trunc(a/b): d = da - trunc(a/b) db
        Rem => {
            let q = r.p(Div, vec![x, args[1]]);
            let t = r.trunc(q);
            let tdb = r.scale(d(1), t);
            r.sub(d(0), tdb)
        }
        Neg => d(0).map(|dx| r.p(Neg, vec![dx])),
        Abs => d(0).map(|dx| {
            let pos = r.cmp(Gt, x, r.zero());
            let neg = r.cmp(Lt, x, r.zero());
            let mdx = r.p(Neg, vec![dx]);
            let inner = r.p(Select, vec![neg, mdx, r.zero()]);
            r.p(Select, vec![pos, dx, inner])
        }),
        Min | Max => {
            let c = r.cmp(if op == Max { Ge } else { Le }, x, args[1]);
            let (da, db) = (r.or_zero(d(0)), r.or_zero(d(1)));
            Some(r.p(Select, vec![c, da, db]))
        }
        // d(a^b) = b a^(b-1) da + y log(a) db
        Pow => {
            let da_term = d(0).map(|da| {
                let bm1 = r.p(Sub, vec![args[1], r.one()]);
                let pw = r.p(Pow, vec![x, bm1]);
                let f = r.p(Mul, vec![args[1], pw]);
                r.p(Mul, vec![f, da])
            });
            let db_term = d(1).map(|db| {
                let lg = r.p(Log, vec![x]);
                let f = r.p(Mul, vec![y, lg]);
                r.p(Mul, vec![f, db])
            });
            r.add(da_term, db_term)
        }
        Exp => r.scale(d(0), y),
        Log => d(0).map(|dx| r.p(Div, vec![dx, x])),
        Sqrt => d(0).map(|dx| {
            let two_y = r.p(Mul, vec![lit(r.s, 2.0), y]);
            r.p(Div, vec![dx, two_y])
        }),
        Sin => {
            let c = r.p(Cos, vec![x]);
            r.scale(d(0), c)
        }
        Cos => {
            let sn = r.p(Sin, vec![x]);
            let m = r.p(Neg, vec![sn]);
            r.scale(d(0), m)
        }
        // d tan = (1 + y^2) dx; d tanh = (1 - y^2) dx
        Tan | Tanh => {
            let y2 = r.p(Mul, vec![y, y]);
            let f = r.p(if op == Tan { Add } else { Sub }, vec![r.one(), y2]);
            r.scale(d(0), f)
        }
        Asin | Acos => {
            let x2 = r.p(Mul, vec![x, x]);
            let om = r.p(Sub, vec![r.one(), x2]);
            let sq = r.p(Sqrt, vec![om]);
            let dx = d(0).expect("nonzero");
            let q = r.p(Div, vec![dx, sq]);
            Some(if op == Asin { q } else { r.p(Neg, vec![q]) })
        }
        Atan => {
            let x2 = r.p(Mul, vec![x, x]);
            let op1 = r.p(Add, vec![r.one(), x2]);
            d(0).map(|dx| r.p(Div, vec![dx, op1]))
        }
        Sinh => {
            let c = r.p(Cosh, vec![x]);
            r.scale(d(0), c)
        }
        Cosh => {
            let sn = r.p(Sinh, vec![x]);
            r.scale(d(0), sn)
        }
        // atan2 a b: (b da - a db) / (a^2 + b^2)
        Atan2 => {
            let (a, bb) = (x, args[1]);
            let t1 = r.scale(d(0), bb);
            let t2 = r.scale(d(1), a);
            let num = r.sub(t1, t2);
            let a2 = r.p(Mul, vec![a, a]);
            let b2 = r.p(Mul, vec![bb, bb]);
            let den = r.p(Add, vec![a2, b2]);
            num.map(|n| r.p(Div, vec![n, den]))
        }
        Floor | Ceil => None,
        Lgamma => {
            let dg = r.p(Digamma, vec![x]);
            r.scale(d(0), dg)
        }
        Digamma => {
            let tg = r.p(Trigamma, vec![x]);
            r.scale(d(0), tg)
        }
        Trigamma => {
            return Err(AdError { message: "the derivative of `lgamma` can be taken at most twice (no tetragamma function)".into(), loc: None });
        }
        // d erf = 2/sqrt(pi) exp(-x^2) dx; d erfc = -d erf
        Erf | Erfc => {
            let x2 = r.p(Mul, vec![x, x]);
            let m = r.p(Neg, vec![x2]);
            let e = r.p(Exp, vec![m]);
            let c = if op == Erf { std::f64::consts::FRAC_2_SQRT_PI } else { -std::f64::consts::FRAC_2_SQRT_PI };
            let f = r.p(Mul, vec![lit(r.s, c), e]);
            r.scale(d(0), f)
        }
        // d log1p = dx / (1 + x)
        Log1p => {
            let op1 = r.p(Add, vec![r.one(), x]);
            d(0).map(|dx| r.p(Div, vec![dx, op1]))
        }
        // d expm1 = e^x dx = (1 + y) dx
        Expm1 => {
            let op1 = r.p(Add, vec![r.one(), y]);
            r.scale(d(0), op1)
        }
        // d sigmoid = y (1 - y) dx
        Sigmoid => {
            let om = r.p(Sub, vec![r.one(), y]);
            let f = r.p(Mul, vec![y, om]);
            r.scale(d(0), f)
        }
        // d softplus = sigmoid x dx; d logsigmoid = sigmoid (-x) dx
        Softplus => {
            let sg = r.p(Sigmoid, vec![x]);
            r.scale(d(0), sg)
        }
        LogSigmoid => {
            let nx = r.p(Neg, vec![x]);
            let sg = r.p(Sigmoid, vec![nx]);
            r.scale(d(0), sg)
        }
        // d logaddexp a b = sigmoid (a - b) da + sigmoid (b - a) db
        LogAddExp => {
            let (ab, ba) = (r.p(Sub, vec![x, args[1]]), r.p(Sub, vec![args[1], x]));
            let (sa, sb) = (r.p(Sigmoid, vec![ab]), r.p(Sigmoid, vec![ba]));
            let ta = r.scale(d(0), sa);
            let tb = r.scale(d(1), sb);
            r.add(ta, tb)
        }
        // d xlogy x y = log y dx + (x / y) dy, the second 0 where x == 0 (the
        // function is 0 along that line, also at y = 0)
        Xlogy => {
            let ly = r.p(Log, vec![args[1]]);
            let tx = r.scale(d(0), ly);
            let q = r.p(Div, vec![x, args[1]]);
            let zero_x = r.cmp(Eq, x, r.zero());
            let q = r.p(Select, vec![zero_x, r.zero(), q]);
            let ty = r.scale(d(1), q);
            r.add(tx, ty)
        }
        Relu => d(0).map(|dx| {
            let pos = r.cmp(Gt, x, r.zero());
            r.p(Select, vec![pos, dx, r.zero()])
        }),
        Convert(t) => match d(0) {
            Some(dx) if t.is_float() => Some(r.b.prim(Convert(t), vec![dx], t)),
            _ => None,
        },
        Select => {
            if d(1).is_none() && d(2).is_none() {
                None
            } else {
                let (da, db) = (r.or_zero(d(1)), r.or_zero(d(2)));
                Some(r.p(Select, vec![x, da, db]))
            }
        }
        IsNan | Eq | Ne | Lt | Le | Gt | Ge | And | Or | Not | BitAnd | BitOr | BitXor | ShiftLeft | ShiftRight | SizeMul => None,
    })
}

/// Arithmetic on tangents of scalar type `s`, with `None` as zero.
struct R<'b, 'a> {
    b: &'b mut Builder<'a>,
    s: Scalar,
}

impl R<'_, '_> {
    fn p(&mut self, op: Prim, args: Vec<Atom>) -> Atom {
        self.b.prim(op, args, self.s)
    }
    fn cmp(&mut self, op: Prim, a: Atom, c: Atom) -> Atom {
        self.b.prim(op, vec![a, c], Scalar::Bool)
    }
    fn zero(&self) -> Atom {
        lit(self.s, 0.0)
    }
    fn one(&self) -> Atom {
        lit(self.s, 1.0)
    }
    fn or_zero(&self, a: Option<Atom>) -> Atom {
        a.unwrap_or(self.zero())
    }
    fn add(&mut self, a: Option<Atom>, c: Option<Atom>) -> Option<Atom> {
        match (a, c) {
            (Some(a), Some(c)) => Some(self.p(Prim::Add, vec![a, c])),
            (a, None) => a,
            (None, c) => c,
        }
    }
    fn sub(&mut self, a: Option<Atom>, c: Option<Atom>) -> Option<Atom> {
        match (a, c) {
            (Some(a), Some(c)) => Some(self.p(Prim::Sub, vec![a, c])),
            (a, None) => a,
            (None, Some(c)) => Some(self.p(Prim::Neg, vec![c])),
        }
    }
    fn scale(&mut self, a: Option<Atom>, f: Atom) -> Option<Atom> {
        a.map(|a| self.p(Prim::Mul, vec![f, a]))
    }
    /// Truncation toward zero: floor for non-negative, ceil for negative.
    fn trunc(&mut self, q: Atom) -> Atom {
        let nonneg = self.cmp(Prim::Ge, q, self.zero());
        let f = self.p(Prim::Floor, vec![q]);
        let c = self.p(Prim::Ceil, vec![q]);
        self.p(Prim::Select, vec![nonneg, f, c])
    }
}
