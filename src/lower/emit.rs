//! Building IR statements: fresh variables, statements with binders, and
//! materialising symbolic sizes as `i64` values.

use super::Lowerer;
use super::value::Val;
use crate::ir::{Atom, Binder, Expr, Lit, Loc, Prim, Scalar, Size, Stmt, Type, VarId};
use crate::types::Ty;

impl Lowerer<'_> {
    pub(super) fn fresh(&mut self, name: &str) -> VarId {
        VarId::fresh(&mut self.names, name)
    }

    /// Push `let binders = expr` into the current block and return the atoms.
    pub(super) fn emit(&mut self, expr: Expr, tys: Vec<Type>, name: &str, loc: Option<Loc>) -> Vec<Atom> {
        let binds: Vec<Binder> = tys.into_iter().map(|ty| Binder { var: self.fresh(name), ty }).collect();
        let atoms = binds.iter().map(|b| Atom::Var(b.var)).collect();
        self.push_stmt(Stmt { binds, expr, loc });
        atoms
    }

    pub(super) fn emit1(&mut self, expr: Expr, ty: Type, name: &str, loc: Option<Loc>) -> Atom {
        self.emit(expr, vec![ty], name, loc)[0]
    }

    pub(super) fn push_stmt(&mut self, s: Stmt) {
        self.emitted += 1;
        match self.blocks.last_mut() {
            Some(b) => b.push(s),
            None => self.blocks.push(vec![s]),
        }
    }

    /// A scalar primitive; records the symbolic value of `i64` arithmetic so
    /// sizes computed at run time still compare symbolically.
    pub(super) fn prim(&mut self, op: Prim, args: Vec<Atom>, out: Scalar, loc: Option<Loc>) -> Atom {
        let sym = if out == Scalar::I64 && args.len() == 2 {
            let a = self.size_of_atom(args[0]);
            let b = self.size_of_atom(args[1]);
            // Arithmetic that overflows or grows too large keeps no
            // symbolic value: the result is then an opaque variable.
            match (op, a, b) {
                (Prim::Add, Some(a), Some(b)) => a.try_add(&b).ok(),
                (Prim::Sub, Some(a), Some(b)) => a.try_sub(&b).ok(),
                (Prim::Mul | Prim::SizeMul, Some(a), Some(b)) => a.try_mul(&b).ok(),
                (Prim::Div, Some(a), Some(b)) => a.try_div(&b).ok(),
                _ => None,
            }
        } else {
            None
        };
        let name = match op {
            Prim::Convert(_) => "c",
            Prim::Eq | Prim::Ne | Prim::Lt | Prim::Le | Prim::Gt | Prim::Ge => "b",
            _ => "t",
        };
        let a = self.emit1(Expr::Prim(op, args), Type::scalar(out), name, loc);
        if let (Some(s), Atom::Var(v)) = (sym, a) {
            self.sym.insert(v, s);
        }
        a
    }

    /// The symbolic size an `i64` atom stands for.
    pub(super) fn size_of_atom(&self, a: Atom) -> Option<Size> {
        match a {
            Atom::Lit(Lit::I64(c)) => Some(Size::constant(c)),
            Atom::Var(v) => Some(self.sym.get(&v).cloned().unwrap_or_else(|| Size::var(v))),
            _ => None,
        }
    }

    /// An `i64` atom holding the value of a size (emitting arithmetic if needed).
    pub(super) fn materialize(&mut self, s: &Size) -> Atom {
        let atom = s.materialize(&mut |op, args| self.prim(op, args, Scalar::I64, None));
        if let Atom::Var(v) = atom {
            self.sym.insert(v, s.clone());
        }
        atom
    }

    /// A value of type `i64` holding a size.
    pub(super) fn size_value(&mut self, s: &Size) -> Val {
        let a = self.materialize(s);
        Val::data(Ty::Scalar(Scalar::I64), a)
    }
}

/// The literal `0` or `1`-like constants of a scalar type.
pub(super) fn lit_of(s: Scalar, x: f64) -> Atom {
    Atom::Lit(Lit::of(s, x))
}

/// Lowest and highest values of a scalar type (neutral elements of max/min).
pub(super) fn lowest(s: Scalar) -> Atom {
    Atom::Lit(match s {
        Scalar::F64 => Lit::F64(f64::NEG_INFINITY),
        Scalar::F32 => Lit::F32(f32::NEG_INFINITY),
        Scalar::I64 => Lit::I64(i64::MIN),
        Scalar::I32 => Lit::I32(i32::MIN),
        Scalar::Bool => Lit::Bool(false),
    })
}

pub(super) fn highest(s: Scalar) -> Atom {
    Atom::Lit(match s {
        Scalar::F64 => Lit::F64(f64::INFINITY),
        Scalar::F32 => Lit::F32(f32::INFINITY),
        Scalar::I64 => Lit::I64(i64::MAX),
        Scalar::I32 => Lit::I32(i32::MAX),
        Scalar::Bool => Lit::Bool(true),
    })
}
