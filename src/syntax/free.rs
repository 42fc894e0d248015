//! The free names of a declaration: the names its body uses that neither
//! its parameters nor a binding inside it bind. `types::decls` builds the
//! call graph from them, `parse_checkable` leaves out the declarations that
//! use a broken one.

use super::ast::{Decl, Expr, ExprKind, IndexArg, LoopKind, Param, Pat};
use std::collections::HashMap;

/// The free names of `d`'s body, its size parameters and parameters bound;
/// sorted, each once.
pub fn free_names(d: &Decl) -> Vec<String> {
    let mut bound = Bound::default();
    for s in &d.size_params {
        bound.push(s.name.clone());
    }
    bind_params(&d.params, &mut bound);
    let mut free = vec![];
    free_vars(&d.body, &mut bound, &mut free);
    free.sort();
    free.dedup();
    free
}

/// Names bound in the current scope: a stack (to leave scopes) and a count
/// per name (so a lookup does not scan every enclosing binding).
#[derive(Default)]
struct Bound {
    stack: Vec<String>,
    count: HashMap<String, usize>,
}

impl Bound {
    fn push(&mut self, name: String) {
        *self.count.entry(name.clone()).or_insert(0) += 1;
        self.stack.push(name);
    }

    fn contains(&self, name: &str) -> bool {
        self.count.get(name).is_some_and(|c| *c > 0)
    }

    fn truncate(&mut self, mark: usize) {
        while self.stack.len() > mark {
            let name = self.stack.pop().expect("above the mark");
            if let Some(c) = self.count.get_mut(&name) {
                *c -= 1;
                if *c == 0 {
                    self.count.remove(&name);
                }
            }
        }
    }
}

fn bind_pat(p: &Pat, bound: &mut Bound) {
    match p {
        Pat::Var(id) => bound.push(id.name.clone()),
        Pat::Tuple(ps, _) => ps.iter().for_each(|p| bind_pat(p, bound)),
    }
}

fn with_scope(bound: &mut Bound, f: impl FnOnce(&mut Bound)) {
    let mark = bound.stack.len();
    f(bound);
    bound.truncate(mark);
}

fn bind_params(ps: &[Param], bound: &mut Bound) {
    for p in ps {
        bind_pat(&p.pat, bound);
    }
}

/// Names used in `e` that are not bound inside it (nor in `bound`).
fn free_vars(e: &Expr, bound: &mut Bound, out: &mut Vec<String>) {
    stacker::maybe_grow(64 * 1024, 1024 * 1024, || free_vars_inner(e, bound, out))
}

fn free_vars_inner(e: &Expr, bound: &mut Bound, out: &mut Vec<String>) {
    match &e.kind {
        ExprKind::Int(..) | ExprKind::Float(..) | ExprKind::Bool(_) | ExprKind::OpSection(_) => {}
        ExprKind::Var(n) => {
            if !bound.contains(n) {
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
        ExprKind::Proj(a, _, _) | ExprKind::Un(_, a) | ExprKind::Coerce(a, _) | ExprKind::Trace(_, a) => free_vars(a, bound, out),
        ExprKind::App(f, args) => {
            free_vars(f, bound, out);
            args.iter().for_each(|x| free_vars(x, bound, out));
        }
        ExprKind::Bin(_, a, b) | ExprKind::With(a, b) | ExprKind::Assert(_, a, b) => {
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
