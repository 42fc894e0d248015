//! Checks over the whole list of declarations, made before lowering:
//! duplicate names and recursion (direct or mutual), which arden rejects
//! because every call is inlined at compile time.

use crate::diag::Diagnostic;
use crate::syntax::ast::{Decl, Program};
use crate::syntax::free::free_names;
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
            let mut targets: Vec<usize> = free_names(d).iter().filter_map(|n| index.get(n.as_str()).copied()).collect();
            targets.sort();
            targets
        })
        .collect();
    // Only declarations in a strongly connected component with a cycle can
    // be on a cycle; searching from the others (a long chain of calls)
    // would make this quadratic.
    let component = strongly_connected(&calls);
    let mut size = vec![0usize; prog.decls.len()];
    for &c in &component {
        size[c] += 1;
    }
    let mut out = vec![];
    let mut reported: HashSet<usize> = HashSet::new();
    for start in 0..prog.decls.len() {
        if reported.contains(&start) {
            continue;
        }
        let cyclic = size[component[start]] > 1 || calls[start].contains(&start);
        if !cyclic {
            continue;
        }
        if let Some(cycle) = find_cycle(start, &calls, &|t| component[t] == component[start]) {
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

/// The strongly connected component of every node (Tarjan's algorithm,
/// iterative, so long call chains cannot overflow the stack): components
/// are numbered, and two nodes share a number exactly when each reaches
/// the other.
fn strongly_connected(calls: &[Vec<usize>]) -> Vec<usize> {
    const UNSEEN: usize = usize::MAX;
    let n = calls.len();
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut component = vec![UNSEEN; n];
    let mut stack: Vec<usize> = vec![];
    let mut next_index = 0;
    let mut next_component = 0;
    for root in 0..n {
        if index[root] != UNSEEN {
            continue;
        }
        // (node, position of the next edge to follow)
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut edge)) = work.last_mut() {
            if let Some(&w) = calls[v].get(*edge) {
                *edge += 1;
                if index[w] == UNSEEN {
                    index[w] = next_index;
                    low[w] = next_index;
                    next_index += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component[w] = next_component;
                    if w == v {
                        break;
                    }
                }
                next_component += 1;
            }
        }
    }
    component
}

/// A path from `start` back to itself through nodes that `inside` accepts,
/// if any.
fn find_cycle(start: usize, calls: &[Vec<usize>], inside: &dyn Fn(usize) -> bool) -> Option<Vec<usize>> {
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
            if inside(t) && visited.insert(t) {
                stack.push((t, 0));
                path.push(t);
            }
        } else {
            path.pop();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Source;

    fn program(text: &str) -> Program {
        let (p, diags) = crate::syntax::parse(&Source::new("t.ard", text));
        assert!(diags.is_empty(), "{diags:?}");
        p
    }

    #[test]
    fn cycles_are_found_once_each() {
        let p = program(
            "def a x = b x\ndef b x = c x\ndef c x = a x\ndef d x = d x\ndef e x = a x\ndef f x = e x\ndef g x = h x\ndef h x = g x + i x\ndef i x = x",
        );
        let (diags, on_cycle) = check_recursion(&p);
        assert_eq!(on_cycle, vec![0, 1, 2, 3, 6, 7]);
        let msgs: Vec<&str> = diags.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(msgs, vec!["`a` is recursive through a -> b -> c -> a", "`d` is recursive: it calls itself", "`g` is recursive through g -> h -> g"]);
    }

    #[test]
    fn long_chains_and_deep_scopes_are_linear() {
        // 30,000 declarations, each calling the previous one, and a body
        // with 30,000 nested `let`s: both used to be quadratic.
        let mut text = String::from("def f0 x = x\n");
        for i in 1..30000 {
            text.push_str(&format!("def f{i} x = f{} x\n", i - 1));
        }
        text.push_str("def big x =\n");
        for i in 0..30000 {
            text.push_str(&format!("  let v{i} = x in\n"));
        }
        text.push_str("  f29999 v0\n");
        let p = program(&text);
        let t = std::time::Instant::now();
        let (diags, on_cycle) = check_recursion(&p);
        assert!(diags.is_empty() && on_cycle.is_empty());
        assert!(t.elapsed().as_secs() < 5, "took {:?}", t.elapsed());
    }
}
