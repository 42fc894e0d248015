//! `ad`: automatic differentiation on the core IR.
//!
//! `lower` turns the surface operators `jvp`, `jvp2` and `jacfwd` into
//! `Expr::Jvp` nodes (a closed lambda with its primal and tangent inputs);
//! this stage expands every such node, innermost first, into ordinary IR by
//! the forward-mode transform of `jvp.rs`, which consults the rule table of
//! `rules.rs`. Innermost first is what rules out perturbation confusion: an
//! inner derivative is already plain IR when an outer one differentiates it,
//! and every transform names its tangent variables itself.

mod build;
mod jvp;
pub mod rules;

use crate::ir::{Block, Expr, Function, LoopKind, Module, ReduceOp};
use build::Builder;

/// A derivative that cannot be formed (reported as a compile error).
#[derive(Clone, Debug, PartialEq)]
pub struct AdError {
    pub message: String,
    pub loc: Option<crate::ir::Loc>,
}

/// Expand every `jvp` node of every function.
pub fn expand(module: &Module) -> Result<Module, AdError> {
    let mut out = module.clone();
    for f in &mut out.functions {
        expand_function(f)?;
    }
    Ok(out)
}

fn expand_function(f: &mut Function) -> Result<(), AdError> {
    let body = std::mem::take(&mut f.body);
    let mut b = Builder::for_function(&mut f.names, &f.params, &f.size_params, &body);
    f.body = expand_block(&mut b, body)?;
    Ok(())
}

/// Expand the `jvp` nodes of a block (and of every nested block).
fn expand_block(b: &mut Builder, block: Block) -> Result<Block, AdError> {
    let mut stmts = vec![];
    for mut s in block.stmts {
        match &mut s.expr {
            Expr::Jvp { .. } => {
                let Expr::Jvp { mut lam, primals, tangents } = s.expr else { unreachable!() };
                lam.body = expand_block(b, lam.body)?;
                b.begin();
                let r = jvp::expand_jvp(b, &lam, &primals, &tangents, &s.binds, s.loc.as_ref());
                let expanded = b.end();
                r?;
                stmts.extend(expanded);
                continue;
            }
            Expr::For { body, .. } => *body = expand_block(b, std::mem::take(body))?,
            Expr::Loop { body, kind, .. } => {
                *body = expand_block(b, std::mem::take(body))?;
                if let LoopKind::While { cond } = kind {
                    *cond = expand_block(b, std::mem::take(cond))?;
                }
            }
            Expr::If { then_b, else_b, .. } => {
                *then_b = expand_block(b, std::mem::take(then_b))?;
                *else_b = expand_block(b, std::mem::take(else_b))?;
            }
            Expr::Reduce { op: ReduceOp::Lambda(l), .. } | Expr::Scan { op: ReduceOp::Lambda(l), .. } => {
                l.body = expand_block(b, std::mem::take(&mut l.body))?;
            }
            _ => {}
        }
        stmts.push(s);
    }
    Ok(Block { stmts, result: block.result })
}
