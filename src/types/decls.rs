//! Checks over the whole list of declarations, made before lowering:
//! duplicate names and recursion (direct or mutual), which arden rejects
//! because every call is inlined at compile time.

use crate::diag::Diagnostic;
use crate::syntax::ast::{Decl, Expr, ExprKind, IndexArg, LoopKind, Param, Pat, Program};
use std::collections::{HashMap, HashSet};

/// Report declarations that reuse a name.
pub fn check_duplicates(prog: &Program) -> Vec<Diagnostic> {
    let mut seen: HashMap<&str, &Decl> = HashMap::new();
    let mut out = vec![];
    for d in &prog.decls {
        if let Some(first) = seen.get(d.name.name.as_str()) {
            out.push(
                Diagnostic::new(format!("`{}` is defined more than once", d.name.name), d.name.span.clone())
                    .label("second definition")
                    .note(first.name.span.clone(), "first defined here")
                    .hint("rename one of the two declarations"),
            );
        } else {
            seen.insert(&d.name.name, d);
        }
    }
    out
}

/// Report every cycle in the call graph once, at the first declaration of
/// the cycle in source order. Also returns every declaration on a cycle,
/// so lowering can skip them and still check the rest.
pub fn check_recursion(prog: &Program) -> (Vec<Diagnostic>, Vec<usize>) {
    let index: HashMap<&str, usize> = prog.decls.iter().enumerate().map(|(i, d)| (d.name.name.as_str(), i)).collect();
    let calls: Vec<Vec<usize>> = prog
        .decls
        .iter()
        .map(|d| {
            let mut free = vec![];
            let mut bound: Vec<String> = d.size_params.iter().map(|s| s.name.clone()).collect();
            for p in &d.params {
                bind_pat(&p.pat, &mut bound);
            }
            free_vars(&d.body, &mut bound, &mut free);
            let mut targets: Vec<usize> = free.iter().filter_map(|n| index.get(n.as_str()).copied()).collect();
            targets.sort();
            targets.dedup();
            targets
        })
        .collect();
    let mut out = vec![];
    let mut reported: HashSet<usize> = HashSet::new();
    for start in 0..prog.decls.len() {
        if reported.contains(&start) {
            continue;
        }
        if let Some(cycle) = find_cycle(start, &calls) {
            for &c in &cycle {
                reported.insert(c);
            }
            let names: Vec<&str> = cycle.iter().chain(std::iter::once(&cycle[0])).map(|&i| prog.decls[i].name.name.as_str()).collect();
            let d = &prog.decls[start];
            let msg = if cycle.len() == 1 {
                format!("`{}` is recursive: it calls itself", d.name.name)
            } else {
                format!("`{}` is recursive through {}", d.name.name, names.join(" -> "))
            };
            out.push(
                Diagnostic::new(msg, d.name.span.clone())
                    .label("recursion is not allowed")
                    .hint("arden inlines every call at compile time; write the repetition with `loop ... for i < n do ...` or `loop ... while ... do ...`"),
            );
        }
    }
    let mut on_cycle: Vec<usize> = reported.into_iter().collect();
    on_cycle.sort();
    (out, on_cycle)
}

/// A path from `start` back to itself, if any.
fn find_cycle(start: usize, calls: &[Vec<usize>]) -> Option<Vec<usize>> {
    let mut stack = vec![(start, 0usize)];
    let mut path = vec![start];
    let mut visited = HashSet::new();
    visited.insert(start);
    while let Some((node, next)) = stack.pop() {
        if next < calls[node].len() {
            stack.push((node, next + 1));
            let t = calls[node][next];
            if t == start {
                return Some(path.clone());
            }
            if visited.insert(t) {
                stack.push((t, 0));
                path.push(t);
            }
        } else {
            path.pop();
        }
    }
    None
}

fn bind_pat(p: &Pat, bound: &mut Vec<String>) {
    match p {
        Pat::Var(id) => bound.push(id.name.clone()),
        Pat::Tuple(ps, _) => ps.iter().for_each(|p| bind_pat(p, bound)),
    }
}

fn with_scope(bound: &mut Vec<String>, f: impl FnOnce(&mut Vec<String>)) {
    let mark = bound.len();
    f(bound);
    bound.truncate(mark);
}

fn bind_params(ps: &[Param], bound: &mut Vec<String>) {
    for p in ps {
        bind_pat(&p.pat, bound);
    }
}

/// Names used in `e` that are not bound inside it (nor in `bound`).
pub fn free_vars(e: &Expr, bound: &mut Vec<String>, out: &mut Vec<String>) {
    stacker::maybe_grow(64 * 1024, 1024 * 1024, || free_vars_inner(e, bound, out))
}

fn free_vars_inner(e: &Expr, bound: &mut Vec<String>, out: &mut Vec<String>) {
    match &e.kind {
        ExprKind::Int(..) | ExprKind::Float(..) | ExprKind::Bool(_) | ExprKind::OpSection(_) => {}
        ExprKind::Var(n) => {
            if !bound.iter().any(|b| b == n) {
                out.push(n.clone());
            }
        }
        ExprKind::Tuple(es) | ExprKind::Array(es) => es.iter().for_each(|x| free_vars(x, bound, out)),
        ExprKind::Index(a, args) => {
            free_vars(a, bound, out);
            for arg in args {
                match arg {
                    IndexArg::Single(x) => free_vars(x, bound, out),
                    IndexArg::Slice(lo, hi) => {
                        free_vars(lo, bound, out);
                        free_vars(hi, bound, out);
                    }
                }
            }
        }
        ExprKind::Proj(a, _, _) | ExprKind::Un(_, a) | ExprKind::Coerce(a, _) => free_vars(a, bound, out),
        ExprKind::App(f, args) => {
            free_vars(f, bound, out);
            args.iter().for_each(|x| free_vars(x, bound, out));
        }
        ExprKind::Bin(_, a, b) => {
            free_vars(a, bound, out);
            free_vars(b, bound, out);
        }
        ExprKind::Let(p, _, e1, e2) => {
            free_vars(e1, bound, out);
            with_scope(bound, |b| {
                bind_pat(p, b);
                free_vars(e2, b, out);
            });
        }
        ExprKind::If(c, t, f) => {
            free_vars(c, bound, out);
            free_vars(t, bound, out);
            free_vars(f, bound, out);
        }
        ExprKind::Lambda(ps, body) => with_scope(bound, |b| {
            bind_params(ps, b);
            free_vars(body, b, out);
        }),
        ExprKind::For(idxs, body) => with_scope(bound, |b| {
            for ix in idxs {
                if let Some(bd) = &ix.bound {
                    free_vars(bd, b, out);
                }
                b.push(ix.name.name.clone());
            }
            free_vars(body, b, out);
        }),
        ExprKind::Loop { pat, init, kind, body } => {
            free_vars(init, bound, out);
            with_scope(bound, |b| {
                bind_pat(pat, b);
                match kind {
                    LoopKind::For(i, n) => {
                        free_vars(n, b, out);
                        b.push(i.name.clone());
                    }
                    LoopKind::While(c) => free_vars(c, b, out),
                }
                free_vars(body, b, out);
            });
        }
    }
}
