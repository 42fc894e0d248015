//! Last uses of array variables, so that the interpreter can give up its
//! reference to an array when nothing reads it any more: memory is freed
//! at the last use, and an `update` or `scatter_add` whose destination is at
//! its last use writes in place (the array is uniquely owned then) instead
//! of copying it. This keeps reverse mode's residual saving in sequential
//! loops linear (one row written per iteration, not the whole array copied).
//!
//! The analysis is per block, backwards: an array variable bound in a block
//! (by one of its statements, or as a parameter of the loop, lambda or
//! `for` that owns the block) dies at the last statement of that block that
//! reads it, a use inside a nested block counting as a use by the statement
//! that holds it. A variable bound outside a block is never dropped inside
//! it (a loop body runs many times). A dying variable that a statement reads
//! exactly once, directly as an operand (not from a nested block), may be
//! *moved* out of the environment by that statement; result atoms bound in
//! the block are moved out likewise.

use crate::ir::walk;
use crate::ir::{Atom, Binder, Block, Expr, VarId};
use rustc_hash::{FxHashMap, FxHashSet};

#[derive(Default, Debug)]
pub(super) struct StmtLive {
    /// Array variables to remove from the environment after the statement.
    pub drop: Vec<VarId>,
    /// Those of `drop` the statement may take out of the environment.
    pub moves: Vec<VarId>,
}

#[derive(Default, Debug)]
pub(super) struct BlockLive {
    pub stmts: Vec<StmtLive>,
    /// Per result atom: whether it may be moved out.
    pub moves: Vec<bool>,
}

#[derive(Default)]
pub(super) struct Liveness {
    blocks: FxHashMap<*const Block, BlockLive>,
    /// Variables never dropped (reverse mode's stored arrays, which the
    /// interpreter measures after the run).
    pinned: FxHashSet<VarId>,
}

impl Liveness {
    /// Analyse a function body whose parameters are `params`; `pinned`
    /// variables are never dropped.
    pub fn of_function(body: &Block, params: &[Binder], pinned: &[VarId]) -> Liveness {
        let mut l = Liveness { blocks: FxHashMap::default(), pinned: pinned.iter().copied().collect() };
        l.block(body, params);
        l
    }

    pub fn get(&self, b: &Block) -> Option<&BlockLive> {
        self.blocks.get(&(b as *const Block))
    }

    /// Analyse `b` (whose owner binds `params`) and the blocks inside it;
    /// returns the variables `b` reads that it does not bind.
    fn block(&mut self, b: &Block, params: &[Binder]) -> FxHashSet<VarId> {
        // blocks nest as deeply as the program does
        stacker::maybe_grow(64 * 1024, 2 * 1024 * 1024, || self.block_inner(b, params))
    }

    fn block_inner(&mut self, b: &Block, params: &[Binder]) -> FxHashSet<VarId> {
        let mut local: FxHashSet<VarId> = FxHashSet::default();
        let mut bound: FxHashSet<VarId> = FxHashSet::default();
        for p in params {
            bound.insert(p.var);
            if !p.ty.shape.is_empty() {
                local.insert(p.var);
            }
        }
        for s in &b.stmts {
            for x in &s.binds {
                bound.insert(x.var);
                if !x.ty.shape.is_empty() {
                    local.insert(x.var);
                }
            }
        }
        local.retain(|v| !self.pinned.contains(v));
        let uses: Vec<(Vec<VarId>, FxHashSet<VarId>)> = b.stmts.iter().map(|s| self.stmt_uses(&s.expr)).collect();

        // a result atom is moved out unless it is read again later in the list
        let moves: Vec<bool> =
            b.result.iter().enumerate().map(|(k, a)| matches!(a, Atom::Var(v) if local.contains(v) && !b.result[k + 1..].contains(a))).collect();
        let mut live: FxHashSet<VarId> = b
            .result
            .iter()
            .filter_map(|a| match a {
                Atom::Var(v) => Some(*v),
                Atom::Lit(_) => None,
            })
            .collect();

        let mut infos: Vec<StmtLive> = (0..b.stmts.len()).map(|_| StmtLive::default()).collect();
        for k in (0..b.stmts.len()).rev() {
            let s = &b.stmts[k];
            let (direct, nested) = &uses[k];
            let info = &mut infos[k];
            for x in &s.binds {
                if local.contains(&x.var) && !live.contains(&x.var) {
                    info.drop.push(x.var);
                }
            }
            for v in direct.iter().chain(nested.iter()) {
                if local.contains(v) && !live.contains(v) && !info.drop.contains(v) {
                    info.drop.push(*v);
                    if !nested.contains(v) && direct.iter().filter(|d| *d == v).count() == 1 {
                        info.moves.push(*v);
                    }
                }
            }
            live.extend(direct.iter().copied());
            live.extend(nested.iter().copied());
        }
        self.blocks.insert(b as *const Block, BlockLive { stmts: infos, moves });

        let mut free = live;
        free.retain(|v| !bound.contains(v));
        free
    }

    /// The variables an expression reads directly as operands (with
    /// repetitions), and those its nested blocks read from outside them.
    fn stmt_uses(&mut self, e: &Expr) -> (Vec<VarId>, FxHashSet<VarId>) {
        let mut direct = Vec::new();
        walk::for_each_operand(e, &mut |a| {
            if let Atom::Var(v) = a {
                direct.push(*v);
            }
        });
        let mut nested = FxHashSet::default();
        let mut bound = vec![];
        for scope in walk::scopes(e) {
            // a block owns its parameters (a `while` condition owns none:
            // it only reads the ones the loop body consumes)
            nested.extend(self.block(scope.block, scope.binds.params()));
            bound.extend(scope.binds.index());
            if let walk::Binds::LoopCondition { params } = scope.binds {
                bound.extend(params.iter().map(|p| p.var));
            }
        }
        for v in bound {
            nested.remove(&v);
        }
        (direct, nested)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Scalar, Size, Stmt, Type};

    fn arr(v: u32) -> Binder {
        Binder { var: VarId(v), ty: Type::array(Scalar::F64, vec![Size::constant(3)]) }
    }

    #[test]
    fn last_uses_and_moves() {
        // a0 param; let a1 = a0; let a2 = concat a1 a1; let a3 = a2 (a3 unused); in a1
        let body = Block {
            stmts: vec![
                Stmt { binds: vec![arr(1)], expr: Expr::Atom(Atom::Var(VarId(0))), loc: None },
                Stmt { binds: vec![arr(2)], expr: Expr::Concat(Atom::Var(VarId(1)), Atom::Var(VarId(1))), loc: None },
                Stmt { binds: vec![arr(3)], expr: Expr::Atom(Atom::Var(VarId(2))), loc: None },
            ],
            result: vec![Atom::Var(VarId(1))],
        };
        let l = Liveness::of_function(&body, &[arr(0)], &[]);
        let b = l.get(&body).unwrap();
        assert_eq!(b.stmts[0].drop, vec![VarId(0)]);
        assert_eq!(b.stmts[0].moves, vec![VarId(0)]);
        // a1 is still a result: not dropped by the concat, which reads it twice
        assert!(b.stmts[1].drop.is_empty());
        // a3 is never read: dropped at once; a2 dies there and is moved
        assert_eq!(b.stmts[2].drop, vec![VarId(3), VarId(2)]);
        assert_eq!(b.stmts[2].moves, vec![VarId(2)]);
        assert_eq!(b.moves, vec![true]);
    }
}
