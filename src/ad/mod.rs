//! `ad`: automatic differentiation on the core IR.
//!
//! `lower` turns the surface operators into `Expr::Jvp` nodes (`jvp`,
//! `jvp2`, `jacfwd`) and `Expr::Vjp` nodes (`grad`, `vjp`, `vjp2`, `jacrev`;
//! `hessian` is a `Jvp` of a `Vjp`): a closed lambda with its inputs. This
//! stage expands every such node, innermost first, into ordinary IR: by the
//! forward-mode transform of `jvp.rs`, which consults the rule table of
//! `rules.rs`, or by reverse mode in `vjp/` (linearize with the same rules,
//! transpose with `transpose.rs`). Innermost first is what rules out
//! perturbation confusion: an inner derivative is already plain IR when an
//! outer one differentiates it, and every transform names its variables
//! itself.

mod build;
mod guard;
mod jvp;
mod loops;
mod reads;
pub mod rules;
mod transpose;
mod vjp;

use crate::ir::{Atom, Binder, Block, Expr, Function, Module, Stmt, VarId};
use build::Builder;

/// A derivative that cannot be formed (reported as a compile error).
#[derive(Clone, Debug, PartialEq)]
pub struct AdError {
    pub message: String,
    pub loc: Option<crate::ir::Loc>,
}

/// The forward derivative of a whole function: a function taking the
/// parameters and then one tangent per parameter, returning the results and
/// then their tangents (used by `Entry::jvp` and the derivative tests).
pub fn jvp_function(f: &Function) -> Result<Function, AdError> {
    let mut g = f.clone();
    let primals: Vec<Binder> = f.params.iter().map(|p| Binder { var: VarId::fresh(&mut g.names, &g_name(f, p.var)), ty: p.ty.clone() }).collect();
    let tangents: Vec<Binder> =
        f.params.iter().map(|p| Binder { var: VarId::fresh(&mut g.names, &format!("d{}", g_name(f, p.var))), ty: p.ty.clone() }).collect();
    let result_shape = on_primals(&f.result_shape, f, &primals);
    let result_tys: Vec<crate::ir::Type> = f.result_shape.leaves().into_iter().cloned().collect();
    let binds: Vec<Binder> = result_tys.iter().chain(result_tys.iter()).map(|t| Binder { var: VarId::fresh(&mut g.names, "r"), ty: t.clone() }).collect();
    let jvp = Expr::Jvp {
        lam: crate::ir::Lambda { params: f.params.clone(), body: f.body.clone() },
        primals: primals.iter().map(|b| Atom::Var(b.var)).collect(),
        tangents: tangents.iter().map(|b| Atom::Var(b.var)).collect(),
    };
    let mut stmts = vec![Stmt { binds: binds.clone(), expr: jvp, loc: None }];
    let outer: Vec<&crate::ir::Type> = result_shape.leaves().into_iter().chain(result_shape.leaves()).collect();
    let result = on_outer_sizes(&mut g, &binds, &outer, &mut stmts);
    g.body = Block { stmts, result };
    g.params = primals.into_iter().chain(tangents).collect();
    g.param_shapes = f.param_shapes.iter().cloned().chain(f.param_shapes.iter().map(|(n, s)| (format!("d{n}"), s.clone()))).collect();
    g.result_shape = crate::ir::Shape::Tuple(vec![result_shape.clone(), result_shape]);
    g.name = format!("jvp_{}", f.name);
    expand_function(&mut g, false)?;
    Ok(g)
}

/// The reverse derivative of a whole function: a function taking the
/// parameters and then one cotangent per result, returning the results and
/// then the cotangent of every parameter (used by `Entry::vjp` and the
/// derivative tests).
pub fn vjp_function(f: &Function) -> Result<Function, AdError> {
    let mut g = f.clone();
    let primals: Vec<Binder> = f.params.iter().map(|p| Binder { var: VarId::fresh(&mut g.names, &g_name(f, p.var)), ty: p.ty.clone() }).collect();
    let result_tys: Vec<crate::ir::Type> = f.result_shape.leaves().into_iter().cloned().collect();
    if let Some(p) = f.params.iter().find(|p| result_tys.iter().any(|t| t.shape.iter().any(|d| d.vars().contains(&p.var)))) {
        // the cotangent parameter would need the size `k` of a value
        // parameter in its type, which only size parameters may give
        let (e, k) = (&f.name, g_name(f, p.var));
        return Err(AdError {
            message: format!(
                "a whole-entry vjp of `{e}` is not supported: its result's size is the value of its parameter `{k}` (use `vjp` inside the program)"
            ),
            loc: None,
        });
    }
    let result_shape = on_primals(&f.result_shape, f, &primals);
    let cts: Vec<Binder> = result_shape.leaves().into_iter().map(|t| Binder { var: VarId::fresh(&mut g.names, "ybar"), ty: t.clone() }).collect();
    let binds: Vec<Binder> =
        result_tys.iter().chain(f.params.iter().map(|p| &p.ty)).map(|t| Binder { var: VarId::fresh(&mut g.names, "r"), ty: t.clone() }).collect();
    let vjp = Expr::Vjp {
        lam: crate::ir::Lambda { params: f.params.clone(), body: f.body.clone() },
        primals: primals.iter().map(|b| Atom::Var(b.var)).collect(),
        cotangents: cts.iter().map(|b| Atom::Var(b.var)).collect(),
    };
    let mut stmts = vec![Stmt { binds: binds.clone(), expr: vjp, loc: None }];
    let outer: Vec<&crate::ir::Type> = result_shape.leaves().into_iter().chain(f.params.iter().map(|p| &p.ty)).collect();
    let result = on_outer_sizes(&mut g, &binds, &outer, &mut stmts);
    g.body = Block { stmts, result };
    g.params = primals.into_iter().chain(cts).collect();
    let params_shape = crate::ir::Shape::Tuple(f.param_shapes.iter().map(|(_, s)| s.clone()).collect());
    g.param_shapes = f.param_shapes.iter().cloned().chain(std::iter::once(("ybar".to_string(), result_shape.clone()))).collect();
    g.result_shape = crate::ir::Shape::Tuple(vec![result_shape, params_shape]);
    g.name = format!("vjp_{}", f.name);
    expand_function(&mut g, false)?;
    Ok(g)
}

/// `shape` (a result shape of `f`) with the sizes that name a parameter of
/// `f` (`entry e (k: i64) : [k]f64`) naming its copy in `primals` instead:
/// the derivative function's parameters are the copies.
fn on_primals(shape: &crate::ir::Shape, f: &Function, primals: &[Binder]) -> crate::ir::Shape {
    use crate::ir::{Shape, Size, Type};
    let copy = |v: VarId| f.params.iter().zip(primals).find(|(p, _)| p.var == v).map_or(Size::var(v), |(_, q)| Size::var(q.var));
    match shape {
        Shape::Leaf(t) => Shape::Leaf(Type { elem: t.elem, shape: t.shape.iter().map(|d| d.subst(&copy)).collect() }),
        Shape::Tuple(ts) => Shape::Tuple(ts.iter().map(|t| on_primals(t, f, primals)).collect()),
    }
}

/// The results `binds` of the derivative statement, typed by the sizes
/// inside it, as the derivative function returns them (`outer`): a result
/// whose size names a parameter (`[k]f64` for `k: i64`) names the
/// parameter's copy outside, the same value, so it is coerced to that type
/// (the optimiser propagates the inner copy of `k` into the body's types
/// but not into the function's result shape).
fn on_outer_sizes(g: &mut Function, binds: &[Binder], outer: &[&crate::ir::Type], stmts: &mut Vec<Stmt>) -> Vec<Atom> {
    binds
        .iter()
        .zip(outer)
        .map(|(b, &t)| {
            if b.ty == *t {
                return Atom::Var(b.var);
            }
            let v = VarId::fresh(&mut g.names, "r");
            let loc = crate::ir::Loc { file: "<derivative>".into(), line: 0, col: 0 };
            stmts.push(Stmt { binds: vec![Binder { var: v, ty: t.clone() }], expr: Expr::Coerce { arr: Atom::Var(b.var), loc }, loc: None });
            Atom::Var(v)
        })
        .collect()
}

fn g_name(f: &Function, v: crate::ir::VarId) -> String {
    f.names.get(v.0 as usize).cloned().unwrap_or_default()
}

/// The statements of `lam`'s body with its parameters bound to `args`
/// (every variable it binds renamed, so a lambda can be inlined many
/// times), pushed onto `b`; its results.
fn inline_lambda(b: &mut Builder, lam: &crate::ir::Lambda, args: &[Atom]) -> Vec<Atom> {
    let map = lam.params.iter().map(|p| p.var).zip(args.iter().copied()).collect();
    let mut fresh = |v: VarId| {
        let n = b.name(v);
        b.fresh(&n)
    };
    let copy = crate::ir::walk::Copier { map, fresh: Some(&mut fresh) }.block(&lam.body);
    for st in copy.stmts {
        b.push(st);
    }
    copy.result
}

/// Replace every `custom_jvp` node left in `block` (nested blocks too) by
/// its primal lambda's body: after differentiation the rule has done its
/// part, and no later stage knows the node.
fn inline_custom(b: &mut Builder, block: Block) -> Block {
    b.begin();
    for mut s in block.stmts {
        match s.expr {
            Expr::CustomJvp { primal, args, .. } => {
                b.begin();
                let outs = inline_lambda(b, &primal, &args);
                let inlined = b.end();
                // the inlined body may itself hold custom nodes
                let inlined = inline_custom(b, Block { stmts: inlined, result: vec![] });
                for st in inlined.stmts {
                    b.push(st);
                }
                for (x, o) in s.binds.into_iter().zip(outs) {
                    b.push(Stmt { binds: vec![x], expr: Expr::Atom(o), loc: None });
                }
            }
            _ => {
                for blk in crate::ir::walk::sub_blocks_mut(&mut s.expr) {
                    *blk = inline_custom(b, std::mem::take(blk));
                }
                b.push(s);
            }
        }
    }
    Block { stmts: b.end(), result: block.result }
}

/// Expand every `jvp` node of every function. Calls of functions with a
/// user rule stay `custom_jvp` nodes (so a derivative of a whole entry
/// taken later still uses the rule): [`inline_rules`] makes the module
/// runnable.
pub fn expand(module: &Module) -> Result<Module, AdError> {
    let mut out = module.clone();
    for f in &mut out.functions {
        expand_function(f, true)?;
    }
    Ok(out)
}

/// The module with every `custom_jvp` node replaced by its primal body.
pub fn inline_rules(module: &Module) -> Module {
    let mut out = module.clone();
    for f in &mut out.functions {
        let body = std::mem::take(&mut f.body);
        let mut b = Builder::for_function(&mut f.names, &f.params, &f.size_params, &body);
        f.body = inline_custom(&mut b, body);
    }
    out
}

fn expand_function(f: &mut Function, keep_rules: bool) -> Result<(), AdError> {
    // derivatives of expanded functions see `for` + `reduce`, not accumulators
    crate::ir::accumulate::unfuse(f);
    let body = std::mem::take(&mut f.body);
    let mut b = Builder::for_function(&mut f.names, &f.params, &f.size_params, &body);
    let expanded = expand_block(&mut b, body);
    if let Some(v) = b.unknown_variable() {
        let message = format!("internal: differentiating `{}` asked for the type of `{}_{}`, which is not bound", f.name, b.name(v), v.0);
        return Err(AdError { message, loc: None });
    }
    let expanded = if keep_rules { expanded? } else { inline_custom(&mut b, expanded?) };
    let top: rustc_hash::FxHashSet<crate::ir::VarId> = expanded.stmts.iter().flat_map(|s| s.binds.iter().map(|x| x.var)).collect();
    f.stored = b.residuals.iter().copied().filter(|v| top.contains(v)).collect();
    f.onehot.extend(std::mem::take(&mut b.onehot));
    f.body = expanded;
    // whole-array cotangents summed over a parallel loop: accumulated
    crate::ir::accumulate::function(f);
    Ok(())
}

/// Expand the `jvp` and `vjp` nodes of a block (and of every nested block).
fn expand_block(b: &mut Builder, block: Block) -> Result<Block, AdError> {
    let mut stmts = vec![];
    for mut s in block.stmts {
        match &mut s.expr {
            Expr::Jvp { .. } | Expr::Vjp { .. } => {
                // the inner derivatives first, then this one
                let (mut lam, primals, others, reverse) = match s.expr {
                    Expr::Jvp { lam, primals, tangents } => (lam, primals, tangents, false),
                    Expr::Vjp { lam, primals, cotangents } => (lam, primals, cotangents, true),
                    _ => unreachable!("matched above"),
                };
                lam.body = expand_block(b, lam.body)?;
                // reads of derived arrays become reads of their sources
                lam.body = reads::normalize(b, lam.body, reverse);
                b.begin();
                let r = if reverse {
                    vjp::expand_vjp(b, &lam, &primals, &others, &s.binds, s.loc.as_ref())
                } else {
                    jvp::expand_jvp(b, &lam, &primals, &others, &s.binds, s.loc.as_ref())
                };
                let expanded = b.end();
                r?;
                stmts.extend(expanded);
                continue;
            }
            e => crate::ir::walk::try_map_sub_blocks(e, |blk| expand_block(b, blk))?,
        }
        stmts.push(s);
    }
    Ok(Block { stmts, result: block.result })
}
