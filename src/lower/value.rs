//! Compile-time values of the elaborator: data (IR atoms plus their surface
//! type), tuples, and functions, which exist only at compile time.

use crate::ir::Atom;
use crate::syntax::ast::{BinOp, Expr, Param, Span};
use crate::types::Ty;
use std::rc::Rc;

#[derive(Clone, Debug)]
pub enum Val {
    /// A scalar, index, array or array of tuples: its surface type and its
    /// flat leaves (one IR atom per leaf of `ty.leaf_types()`).
    Data { ty: Ty, leaves: Vec<Atom> },
    Tuple(Vec<Val>),
    Fun(Rc<FunVal>),
    /// The value of an expression that already reported an error; every
    /// operation on it quietly yields `Error` again, so one mistake gives one
    /// message.
    Error,
}

impl Val {
    pub fn data(ty: Ty, leaf: Atom) -> Val {
        Val::Data { ty, leaves: vec![leaf] }
    }

    /// The single atom of a scalar or plain array.
    pub fn atom(&self) -> Option<Atom> {
        match self {
            Val::Data { leaves, .. } if leaves.len() == 1 => Some(leaves[0]),
            _ => None,
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Val::Error)
    }

    pub fn contains_fun(&self) -> bool {
        match self {
            Val::Fun(_) => true,
            Val::Tuple(vs) => vs.iter().any(Val::contains_fun),
            _ => false,
        }
    }

    pub fn contains_error(&self) -> bool {
        match self {
            Val::Error => true,
            Val::Tuple(vs) => vs.iter().any(Val::contains_error),
            _ => false,
        }
    }
}

/// A function value, possibly partially applied.
#[derive(Debug)]
pub struct FunVal {
    pub kind: FunKind,
    /// Arguments collected so far, with the spans of the argument expressions.
    pub args: Vec<(Val, Span)>,
}

#[derive(Debug)]
pub enum FunKind {
    /// A top-level declaration (user or prelude).
    Decl { index: usize, prelude: bool },
    /// `\x y -> e`, closing over `env`.
    Lambda { params: Vec<Param>, body: Rc<Expr>, env: Env, prelude: bool },
    /// A primitive built-in (see `builtins.rs`).
    Builtin(&'static str),
    /// `(+)` and friends.
    Op(BinOp),
}

impl FunKind {
    pub fn arity(&self, lowerer_decl_arity: impl Fn(usize, bool) -> usize) -> usize {
        match self {
            FunKind::Decl { index, prelude } => lowerer_decl_arity(*index, *prelude),
            FunKind::Lambda { params, .. } => params.len(),
            FunKind::Builtin(name) => super::builtins::arity(name),
            FunKind::Op(_) => 2,
        }
    }
}

/// A persistent environment: cheap to extend and to capture in closures.
#[derive(Clone, Debug, Default)]
pub struct Env(Option<Rc<EnvNode>>);

#[derive(Debug)]
pub struct EnvNode {
    name: String,
    val: Val,
    next: Env,
}

impl Env {
    pub fn bind(&self, name: &str, val: Val) -> Env {
        Env(Some(Rc::new(EnvNode { name: name.to_string(), val, next: self.clone() })))
    }

    pub fn lookup(&self, name: &str) -> Option<&Val> {
        let mut cur = &self.0;
        while let Some(node) = cur {
            if node.name == name {
                return Some(&node.val);
            }
            cur = &node.next.0;
        }
        None
    }

    /// All names in scope (for "did you mean" hints).
    pub fn names(&self) -> Vec<String> {
        let mut out = vec![];
        let mut cur = &self.0;
        while let Some(node) = cur {
            out.push(node.name.clone());
            cur = &node.next.0;
        }
        out
    }
}
