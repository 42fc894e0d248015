//! Emitting IR statements during a transform: fresh variables named in the
//! function's name table, the types of all variables, and zeros.

use crate::ir::{Atom, Binder, Block, Expr, Lit, Prim, Scalar, Size, Stmt, Type, VarId};

/// The size held by an `i64` operand.
pub fn size_of_atom(a: &Atom) -> Size {
    Size::of_atom(a).unwrap_or(Size::constant(0))
}
use rustc_hash::FxHashMap;

pub struct Builder<'a> {
    names: &'a mut Vec<String>,
    /// The type of every variable bound so far.
    types: FxHashMap<VarId, Type>,
    /// Statement lists under construction, innermost last.
    blocks: Vec<Vec<Stmt>>,
    /// Arrays that are `replicate n v`: reading them is reading `v`.
    replicas: FxHashMap<VarId, Atom>,
    /// Arrays reverse mode stores for its backward sweep (extra results of
    /// parallel loops, states and residuals saved by sequential loops).
    pub residuals: Vec<VarId>,
    /// Cotangent arrays whose zeros are structural (one-hot by
    /// construction), recorded in `Function::onehot` for the optimiser.
    pub onehot: Vec<VarId>,
    /// `i64` variables known to be `>= 0`: the size parameters.
    pub nonneg: rustc_hash::FxHashSet<VarId>,
    /// The first variable whose type was asked but is not known: a bug of
    /// the transform that asked, reported by `ad::expand` as an error.
    unknown: std::cell::Cell<Option<VarId>>,
}

impl<'a> Builder<'a> {
    /// A builder for `f`, knowing the types of all its variables.
    pub fn for_function(names: &'a mut Vec<String>, f_params: &[Binder], sizes: &[(String, VarId)], body: &Block) -> Self {
        let mut types = FxHashMap::default();
        for (_, v) in sizes {
            types.insert(*v, Type::scalar(Scalar::I64));
        }
        for p in f_params {
            types.insert(p.var, p.ty.clone());
        }
        crate::ir::walk::binder_types(body, &mut types);
        let nonneg = sizes.iter().map(|(_, v)| *v).collect();
        Builder {
            names,
            types,
            blocks: vec![vec![]],
            replicas: FxHashMap::default(),
            residuals: vec![],
            onehot: vec![],
            nonneg,
            unknown: std::cell::Cell::new(None),
        }
    }

    pub fn fresh(&mut self, hint: &str) -> VarId {
        VarId::fresh(self.names, hint)
    }

    pub fn name(&self, v: VarId) -> String {
        self.names.get(v.0 as usize).cloned().unwrap_or_default()
    }

    /// The type of an operand. Asking for a variable not bound yet is an
    /// internal error: the first such variable is recorded and the whole
    /// transform fails with it ([`unknown_variable`](Self::unknown_variable)),
    /// so the `f64` answered meanwhile never reaches its output.
    pub fn type_of(&self, a: &Atom) -> Type {
        match a {
            Atom::Lit(l) => Type::scalar(l.scalar()),
            Atom::Var(v) => self.types.get(v).cloned().unwrap_or_else(|| {
                if self.unknown.get().is_none() {
                    self.unknown.set(Some(*v));
                }
                Type::scalar(Scalar::F64)
            }),
        }
    }

    /// The first variable [`type_of`](Self::type_of) did not know, if any.
    pub fn unknown_variable(&self) -> Option<VarId> {
        self.unknown.get()
    }

    /// Record the types a statement binds without emitting it (for code
    /// that is assembled into a block later).
    pub fn declare(&mut self, s: &Stmt) {
        crate::ir::walk::stmt_types(s, &mut self.types);
    }

    pub fn set_type(&mut self, v: VarId, ty: Type) {
        self.types.insert(v, ty);
    }

    pub fn begin(&mut self) {
        self.blocks.push(vec![]);
    }

    pub fn end(&mut self) -> Vec<Stmt> {
        self.blocks.pop().unwrap_or_default()
    }

    pub fn push(&mut self, s: Stmt) {
        if let (Expr::Replicate { val, .. }, [bind]) = (&s.expr, s.binds.as_slice()) {
            self.replicas.insert(bind.var, *val);
        }
        crate::ir::walk::stmt_types(&s, &mut self.types);
        match self.blocks.last_mut() {
            Some(b) => b.push(s),
            None => self.blocks.push(vec![s]),
        }
    }

    pub fn emit(&mut self, expr: Expr, ty: Type, hint: &str) -> Atom {
        let var = self.fresh(hint);
        self.push(Stmt { binds: vec![Binder { var, ty }], expr, loc: None });
        Atom::Var(var)
    }

    pub fn emit_many(&mut self, expr: Expr, tys: Vec<Type>, hint: &str) -> Vec<Atom> {
        let binds: Vec<Binder> = tys.into_iter().map(|ty| Binder { var: self.fresh(hint), ty }).collect();
        let atoms = binds.iter().map(|b| Atom::Var(b.var)).collect();
        self.push(Stmt { binds, expr, loc: None });
        atoms
    }

    /// A scalar primitive of result type `s`.
    pub fn prim(&mut self, op: Prim, args: Vec<Atom>, s: Scalar) -> Atom {
        self.emit(Expr::Prim(op, args), Type::scalar(s), "d")
    }

    pub fn size(&mut self, s: &Size) -> Atom {
        s.materialize(&mut |op, args| self.prim(op, args, Scalar::I64))
    }

    /// An array (or scalar) of type `ty` with every element `x`: one flat
    /// `replicate`, shaped by `unflatten`s (reshapes, which copy nothing).
    pub fn filled(&mut self, ty: &Type, x: Atom) -> Atom {
        if ty.rank() == 0 {
            return x;
        }
        let total = ty.shape.iter().skip(1).fold(ty.shape[0].clone(), |a, d| a.mul(d));
        let n = self.size(&total);
        let mut z = self.emit(Expr::Replicate { n, val: x }, Type { elem: ty.elem, shape: vec![total] }, "fill");
        // [d0*..*dk] -> [d0*..*d(k-1)][dk], innermost axis first
        for k in (1..ty.rank()).rev() {
            let outer = ty.shape[..k].iter().skip(1).fold(ty.shape[0].clone(), |a, d| a.mul(d));
            let (n, m) = (self.size(&outer), self.size(&ty.shape[k]));
            let shape = [vec![outer], ty.shape[k..].to_vec()].concat();
            z = self.emit(Expr::Unflatten { arr: z, n, m }, Type { elem: ty.elem, shape }, "fill");
        }
        z
    }

    /// `arr[idx...]` without a bounds check (the caller knows it is in range).
    pub fn index(&mut self, arr: Atom, idx: Vec<Atom>) -> Atom {
        if let (Atom::Var(v), Some((_, rest))) = (arr, idx.split_first())
            && let Some(val) = self.replicas.get(&v).copied()
        {
            return if rest.is_empty() { val } else { self.index(val, rest.to_vec()) };
        }
        let t = self.type_of(&arr);
        let ty = Type { elem: t.elem, shape: t.shape[idx.len().min(t.rank())..].to_vec() };
        let checks = vec![None; idx.len()];
        self.emit(Expr::Index { arr, idx, checks }, ty, "r")
    }

    /// `x + y` for scalars or arrays of type `ty` (elementwise `for`s).
    pub fn add_values(&mut self, ty: &Type, x: Atom, y: Atom) -> Atom {
        if ty.rank() == 0 {
            return self.prim(Prim::Add, vec![x, y], ty.elem);
        }
        let ivar = self.fresh("e");
        self.begin();
        let (xr, yr) = (self.index(x, vec![Atom::Var(ivar)]), self.index(y, vec![Atom::Var(ivar)]));
        let r = self.add_values(&ty.row(), xr, yr);
        let stmts = self.end();
        self.emit(Expr::For { ivar, size: ty.shape[0].clone(), body: Block { stmts, result: vec![r] } }, ty.clone(), "acc")
    }

    /// An array (or scalar) of zeros of type `ty`.
    pub fn zeros(&mut self, ty: &Type) -> Atom {
        self.filled(ty, lit(ty.elem, 0.0))
    }
}

/// A literal of scalar type `s`.
pub fn lit(s: Scalar, x: f64) -> Atom {
    Atom::Lit(Lit::of(s, x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_variable_is_recorded_not_taken_for_f64() {
        let mut names = vec!["x".to_string()];
        let x = Binder { var: VarId(0), ty: Type::scalar(Scalar::F32) };
        let b = Builder::for_function(&mut names, std::slice::from_ref(&x), &[], &Block::default());
        assert_eq!(b.type_of(&Atom::Var(x.var)), x.ty);
        assert_eq!(b.unknown_variable(), None);
        b.type_of(&Atom::Var(VarId(7)));
        b.type_of(&Atom::Var(VarId(8)));
        assert_eq!(b.unknown_variable(), Some(VarId(7)), "the first unknown variable is the one reported");
    }
}
