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
    Data {
        ty: Ty,
        leaves: Vec<Atom>,
    },
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

    /// Whether this value, counted with repetition (a tuple that holds
    /// the same component twice counts it twice: tuples are copied at
    /// compile time), has at most `budget` parts (tuples, data, functions).
    /// Stops counting as soon as the budget is spent, so the cost is at
    /// most `budget` steps however large the value is.
    pub fn fits_in(&self, budget: &mut usize) -> bool {
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        match self {
            Val::Tuple(vs) => vs.iter().all(|v| v.fits_in(budget)),
            _ => true,
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

/// A persistent environment: cheap to extend and to capture in closures,
/// with lookups that do not depend on how many names are in scope.
///
/// A hash trie (16-way, on the name's 64-bit hash) with path copying:
/// `bind` copies one path of at most 16 nodes and shares the rest, and
/// `lookup` follows one path. A linked list made every lookup of a global
/// or built-in name walk every local binding (100,000 `let`s took minutes).
#[derive(Clone, Debug, Default)]
pub struct Env {
    root: Option<Rc<EnvNode>>,
}

#[derive(Debug)]
enum EnvNode {
    /// Every binding whose name has this hash (almost always one).
    Leaf { hash: u64, entries: Vec<(Rc<str>, Val)> },
    /// Children by the next 4 bits of the hash; `bitmap` says which exist.
    Branch { bitmap: u16, children: Vec<Rc<EnvNode>> },
}

const BITS: u32 = 4;

fn name_hash(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    name.hash(&mut h);
    h.finish()
}

fn slot(hash: u64, shift: u32) -> u16 {
    ((hash >> shift) & ((1 << BITS) - 1)) as u16
}

impl EnvNode {
    fn insert(node: Option<&Rc<EnvNode>>, hash: u64, shift: u32, name: &str, val: Val) -> EnvNode {
        match node.map(|n| &**n) {
            None => EnvNode::Leaf { hash, entries: vec![(Rc::from(name), val)] },
            Some(EnvNode::Leaf { hash: h, entries }) if *h == hash || shift >= 64 => {
                let mut entries: Vec<(Rc<str>, Val)> = entries.iter().filter(|(n, _)| &**n != name).cloned().collect();
                entries.push((Rc::from(name), val));
                EnvNode::Leaf { hash: *h, entries }
            }
            Some(EnvNode::Leaf { hash: h, .. }) => {
                // Two hashes meet: push the existing leaf one level down.
                let old = node.expect("a leaf").clone();
                let bit = 1u16 << slot(*h, shift);
                let branch = Rc::new(EnvNode::Branch { bitmap: bit, children: vec![old] });
                EnvNode::insert(Some(&branch), hash, shift, name, val)
            }
            Some(EnvNode::Branch { bitmap, children }) => {
                let s = slot(hash, shift);
                let bit = 1u16 << s;
                let pos = (bitmap & (bit - 1)).count_ones() as usize;
                let mut children = children.clone();
                if bitmap & bit != 0 {
                    children[pos] = Rc::new(EnvNode::insert(Some(&children[pos]), hash, shift + BITS, name, val));
                } else {
                    children.insert(pos, Rc::new(EnvNode::insert(None, hash, shift + BITS, name, val)));
                }
                EnvNode::Branch { bitmap: bitmap | bit, children }
            }
        }
    }
}

impl Env {
    pub fn bind(&self, name: &str, val: Val) -> Env {
        let root = EnvNode::insert(self.root.as_ref(), name_hash(name), 0, name, val);
        Env { root: Some(Rc::new(root)) }
    }

    pub fn lookup(&self, name: &str) -> Option<&Val> {
        let hash = name_hash(name);
        let mut cur = self.root.as_deref()?;
        let mut shift = 0;
        loop {
            match cur {
                EnvNode::Leaf { entries, .. } => return entries.iter().find(|(n, _)| &**n == name).map(|(_, v)| v),
                EnvNode::Branch { bitmap, children } => {
                    let bit = 1u16 << slot(hash, shift);
                    if bitmap & bit == 0 {
                        return None;
                    }
                    cur = &children[(bitmap & (bit - 1)).count_ones() as usize];
                    shift += BITS;
                }
            }
        }
    }

    /// Names in scope (for "did you mean" hints), at most `limit` of them,
    /// in no particular order.
    #[cfg(test)]
    pub fn names(&self, limit: usize) -> Vec<String> {
        self.names_where(limit, &|_| true)
    }

    /// Names in scope that `keep` accepts, reading at most `scan` names.
    pub fn names_where(&self, scan: usize, keep: &dyn Fn(&str) -> bool) -> Vec<String> {
        let mut out = vec![];
        let mut read = 0;
        let mut stack: Vec<&EnvNode> = self.root.as_deref().into_iter().collect();
        while let Some(n) = stack.pop() {
            match n {
                EnvNode::Leaf { entries, .. } => {
                    for (name, _) in entries {
                        if read >= scan {
                            return out;
                        }
                        read += 1;
                        if keep(name) {
                            out.push(name.to_string());
                        }
                    }
                }
                EnvNode::Branch { children, .. } => stack.extend(children.iter().map(|c| &**c)),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Atom, Lit};

    fn int(k: i64) -> Val {
        Val::data(Ty::Scalar(crate::ir::Scalar::I64), Atom::Lit(Lit::I64(k)))
    }

    fn get(e: &Env, n: &str) -> Option<i64> {
        match e.lookup(n) {
            Some(Val::Data { leaves, .. }) => match leaves[0] {
                Atom::Lit(Lit::I64(k)) => Some(k),
                _ => None,
            },
            _ => None,
        }
    }

    #[test]
    fn shadowing_and_persistence() {
        let e0 = Env::default();
        let e1 = e0.bind("x", int(1));
        let e2 = e1.bind("y", int(2));
        let e3 = e2.bind("x", int(3));
        assert_eq!(get(&e0, "x"), None);
        assert_eq!(get(&e1, "x"), Some(1));
        assert_eq!(get(&e2, "x"), Some(1));
        assert_eq!(get(&e3, "x"), Some(3));
        assert_eq!(get(&e3, "y"), Some(2));
        assert_eq!(e3.names(usize::MAX).len(), 2);
    }

    #[test]
    fn many_names() {
        let mut envs = vec![Env::default()];
        for k in 0..5000 {
            let e = envs.last().unwrap().bind(&format!("v{k}"), int(k));
            envs.push(e);
        }
        let last = envs.last().unwrap();
        for k in 0..5000 {
            assert_eq!(get(last, &format!("v{k}")), Some(k));
            // an older environment does not see later names
            assert_eq!(get(&envs[k as usize], &format!("v{k}")), None);
        }
        assert_eq!(last.names(usize::MAX).len(), 5000);
        assert_eq!(last.names(10).len(), 10);
    }
}
