//! Stable, readable printer of the core IR.
//!
//! The output depends only on the IR (no hash-map order, no addresses), so it
//! is what snapshot tests compare and what `arden ir` shows. Syntax:
//!
//! ```text
//! entry dot [n] (a_1: [n]f64) (b_2: [n]f64) : f64 =
//!   let t_4: [n]f64 = for i_3 < n {
//!     let x_5: f64 = index a_1[i_3]
//!     let y_6: f64 = index b_2[i_3]
//!     let z_7: f64 = mul x_5 y_6
//!     in z_7
//!   }
//!   let s_8: f64 = reduce add (0.0) t_4
//!   in s_8
//! ```
//!
//! Variables print as `name_id` (`Function::var_name`), except size
//! parameters, which print with their plain name (`n`) everywhere, in sizes
//! and as operands alike. Each block level indents by two spaces. Source
//! locations are not printed (they would make snapshots path-dependent).

use super::{Atom, Binder, Block, Expr, Function, Lambda, Lit, LoopKind, Module, ReduceOp, Shape, Size, Stmt, Type, VarId};
use std::collections::HashMap;
use std::fmt::Write;

/// Print one function; the text ends with a newline.
pub fn print_function(f: &Function) -> String {
    let p = Printer::new(f);
    let mut out = String::new();
    out.push_str("entry ");
    out.push_str(&f.name);
    if !f.size_params.is_empty() {
        let names: Vec<&str> = f.size_params.iter().map(|(n, _)| n.as_str()).collect();
        let _ = write!(out, " [{}]", names.join(", "));
    }
    for b in &f.params {
        let _ = write!(out, " ({})", p.binder(b));
    }
    let results: Vec<String> = f.result_shape.leaves().into_iter().map(|t| p.ty(t)).collect();
    if results.len() == 1 {
        let _ = writeln!(out, " : {} =", results[0]);
    } else {
        let _ = writeln!(out, " : ({}) =", results.join(", "));
    }
    p.block_body(&f.body, 1, &mut out);
    out
}

/// Print every function of a module, separated by blank lines.
pub fn print_module(m: &Module) -> String {
    m.functions.iter().map(print_function).collect::<Vec<_>>().join("\n")
}

/// Print one statement of `f` (as it would appear at block level 0, without
/// a trailing newline). Used by the verifier's messages.
pub fn print_stmt(f: &Function, s: &Stmt) -> String {
    let p = Printer::new(f);
    let mut out = String::new();
    p.stmt(s, 0, &mut out);
    while out.ends_with('\n') {
        out.pop();
    }
    out
}

/// Print a type of `f` (`[n][m]f64`), naming size parameters plainly.
pub fn print_type(f: &Function, t: &Type) -> String {
    Printer::new(f).ty(t)
}

/// `[n][m]f64`-style rendering using the entry's size-parameter names.
pub fn type_str(func: &Function, ty: &Type) -> String {
    let dims: String = ty.shape.iter().map(|s| format!("[{}]", s.display_with(&|v| size_name(func, v)))).collect();
    format!("{dims}{}", ty.elem.name())
}

fn size_name(func: &Function, v: VarId) -> String {
    func.size_params.iter().find(|(_, x)| *x == v).map(|(n, _)| n.clone()).unwrap_or_else(|| func.var_name(v))
}

/// A parameter or result shape in the surface syntax (`([n]f64, f64)`),
/// as argument errors and `arden build`'s header show it.
pub fn shape_str(func: &Function, shape: &Shape) -> String {
    match shape {
        Shape::Leaf(t) => type_str(func, t),
        Shape::Tuple(ts) => format!("({})", ts.iter().map(|t| shape_str(func, t)).collect::<Vec<_>>().join(", ")),
    }
}

/// Print a size of `f`.
pub fn print_size(f: &Function, s: &Size) -> String {
    Printer::new(f).size(s)
}

/// Print an operand of `f`.
pub fn print_atom(f: &Function, a: &Atom) -> String {
    Printer::new(f).atom(a)
}

/// Print a literal: `1.0`, `1.0f32`, `3`, `3i32`, `true`.
pub fn print_lit(l: &Lit) -> String {
    match l {
        Lit::F64(x) => format!("{x:?}"),
        Lit::F32(x) => format!("{x:?}f32"),
        Lit::I64(x) => format!("{x}"),
        Lit::I32(x) => format!("{x}i32"),
        Lit::Bool(b) => format!("{b}"),
    }
}

struct Printer<'a> {
    f: &'a Function,
    size_names: HashMap<VarId, &'a str>,
}

fn indent(level: usize, out: &mut String) {
    for _ in 0..level {
        out.push_str("  ");
    }
}

impl<'a> Printer<'a> {
    fn new(f: &'a Function) -> Printer<'a> {
        Printer { f, size_names: f.size_params.iter().map(|(n, v)| (*v, n.as_str())).collect() }
    }

    fn var(&self, v: VarId) -> String {
        match self.size_names.get(&v) {
            Some(n) => n.to_string(),
            None => self.f.var_name(v),
        }
    }

    fn atom(&self, a: &Atom) -> String {
        match a {
            Atom::Var(v) => self.var(*v),
            Atom::Lit(l) => print_lit(l),
        }
    }

    fn atoms(&self, xs: &[Atom]) -> String {
        xs.iter().map(|a| self.atom(a)).collect::<Vec<_>>().join(", ")
    }

    /// One atom bare, otherwise a parenthesised list.
    fn atom_group(&self, xs: &[Atom]) -> String {
        if xs.len() == 1 { self.atom(&xs[0]) } else { format!("({})", self.atoms(xs)) }
    }

    fn size(&self, s: &Size) -> String {
        s.display_with(&|v| self.var(v))
    }

    fn ty(&self, t: &Type) -> String {
        let mut out = String::new();
        for d in &t.shape {
            let _ = write!(out, "[{}]", self.size(d));
        }
        out.push_str(t.elem.name());
        out
    }

    fn binder(&self, b: &Binder) -> String {
        format!("{}: {}", self.var(b.var), self.ty(&b.ty))
    }

    fn binders(&self, bs: &[Binder]) -> String {
        bs.iter().map(|b| self.binder(b)).collect::<Vec<_>>().join(", ")
    }

    /// The statements of a block at `level`, then `in results`.
    fn block_body(&self, b: &Block, level: usize, out: &mut String) {
        for s in &b.stmts {
            self.stmt(s, level, out);
        }
        indent(level, out);
        out.push_str("in ");
        if b.result.len() == 1 {
            out.push_str(&self.atom(&b.result[0]));
        } else {
            let _ = write!(out, "({})", self.atoms(&b.result));
        }
        out.push('\n');
    }

    /// `{`, newline, the block one level deeper, then `}` at `level` (no newline).
    fn braced(&self, b: &Block, level: usize, out: &mut String) {
        out.push_str("{\n");
        self.block_body(b, level + 1, out);
        indent(level, out);
        out.push('}');
    }

    fn stmt(&self, s: &Stmt, level: usize, out: &mut String) {
        indent(level, out);
        out.push_str("let ");
        if s.binds.len() == 1 {
            out.push_str(&self.binder(&s.binds[0]));
        } else {
            let _ = write!(out, "({})", self.binders(&s.binds));
        }
        out.push_str(" = ");
        self.expr(&s.expr, level, out);
        out.push('\n');
    }

    fn lambda(&self, l: &Lambda, level: usize, out: &mut String) {
        let k = l.params.len() / 2;
        let (acc, elem) = l.params.split_at(k);
        let _ = write!(out, "\\({}) ({}) ", self.binders(acc), self.binders(elem));
        self.braced(&l.body, level, out);
    }

    fn reduce_op(&self, op: &ReduceOp, level: usize, out: &mut String) {
        match op {
            ReduceOp::Add => out.push_str("add"),
            ReduceOp::Mul => out.push_str("mul"),
            ReduceOp::Max => out.push_str("max"),
            ReduceOp::Min => out.push_str("min"),
            ReduceOp::Lambda(l) => self.lambda(l, level, out),
        }
    }

    fn expr(&self, e: &Expr, level: usize, out: &mut String) {
        match e {
            Expr::Atom(a) => out.push_str(&self.atom(a)),
            Expr::Prim(p, args) => {
                out.push_str(p.name());
                for a in args {
                    out.push(' ');
                    out.push_str(&self.atom(a));
                }
            }
            Expr::Index { arr, idx, checks } => {
                let parts: Vec<String> = idx
                    .iter()
                    .enumerate()
                    .map(|(k, i)| {
                        let checked = matches!(checks.get(k), Some(Some(_)));
                        format!("{}{}", self.atom(i), if checked { "!" } else { "" })
                    })
                    .collect();
                let _ = write!(out, "index {}[{}]", self.atom(arr), parts.join(", "));
            }
            Expr::Slice { arr, lo, hi, check } => {
                let bang = if check.is_some() { "!" } else { "" };
                let _ = write!(out, "slice{} {}[{}:{}]", bang, self.atom(arr), self.atom(lo), self.atom(hi));
            }
            Expr::For { ivar, size, body } => {
                let _ = write!(out, "for {} < {} ", self.var(*ivar), self.size(size));
                self.braced(body, level, out);
            }
            Expr::ForAcc { ivar, size, body, acc } => {
                // `for i < n (stack, add, ...)`: how each result is combined
                let how: Vec<&str> = acc.iter().map(|&a| if a { "add" } else { "stack" }).collect();
                let _ = write!(out, "for {} < {} ({}) ", self.var(*ivar), self.size(size), how.join(", "));
                self.braced(body, level, out);
            }
            Expr::Reduce { op, ne, arrs } | Expr::Scan { op, ne, arrs } => {
                out.push_str(if matches!(e, Expr::Reduce { .. }) { "reduce " } else { "scan " });
                self.reduce_op(op, level, out);
                let _ = write!(out, " ({}) {}", self.atoms(ne), self.atom_group(arrs));
            }
            Expr::ArgExt { max, arr } => {
                let _ = write!(out, "{} {}", if *max { "argmax" } else { "argmin" }, self.atom(arr));
            }
            Expr::Loop { params, init, kind, body } => {
                // Malformed IR may have counts that differ: show what is there.
                let ps: Vec<String> = (0..params.len().max(init.len()))
                    .map(|k| {
                        let p = params.get(k).map_or("?".to_string(), |p| self.binder(p));
                        let i = init.get(k).map_or("?".to_string(), |i| self.atom(i));
                        format!("{p} = {i}")
                    })
                    .collect();
                let _ = write!(out, "loop ({}) ", ps.join(", "));
                match kind {
                    LoopKind::Count { ivar, n, down } => {
                        let dir = if *down { " down" } else { "" };
                        let _ = write!(out, "for {} < {}{dir} ", self.var(*ivar), self.atom(n));
                        self.braced(body, level, out);
                    }
                    LoopKind::While { cond } => {
                        out.push_str("while ");
                        self.braced(cond, level, out);
                        out.push_str(" do ");
                        self.braced(body, level, out);
                    }
                }
            }
            Expr::If { cond, then_b, else_b } => {
                let _ = write!(out, "if {} then ", self.atom(cond));
                self.braced(then_b, level, out);
                out.push_str(" else ");
                self.braced(else_b, level, out);
            }
            Expr::Update { arr, idx, val, .. } => {
                let _ = write!(out, "update {}[{}] = {}", self.atom(arr), self.atom(idx), self.atom(val));
            }
            Expr::ScatterAdd { dest, idxs, vals, .. } => {
                let _ = write!(out, "scatter_add {} {} {}", self.atom(dest), self.atom(idxs), self.atom(vals));
            }
            Expr::Iota { n } => {
                let _ = write!(out, "iota {}", self.atom(n));
            }
            Expr::Replicate { n, val } => {
                let _ = write!(out, "replicate {} {}", self.atom(n), self.atom(val));
            }
            Expr::ArrayLit(xs) => {
                let _ = write!(out, "[{}]", self.atoms(xs));
            }
            Expr::Concat(a, b) => {
                let _ = write!(out, "concat {} {}", self.atom(a), self.atom(b));
            }
            Expr::Transpose(a) => {
                let _ = write!(out, "transpose {}", self.atom(a));
            }
            Expr::Flatten(a) => {
                let _ = write!(out, "flatten {}", self.atom(a));
            }
            Expr::Unflatten { arr, n, m } => {
                let _ = write!(out, "unflatten {} {} {}", self.atom(n), self.atom(m), self.atom(arr));
            }
            Expr::Reverse(a) => {
                let _ = write!(out, "reverse {}", self.atom(a));
            }
            Expr::Rotate { k, arr } => {
                let _ = write!(out, "rotate {} {}", self.atom(k), self.atom(arr));
            }
            Expr::Coerce { arr, .. } => {
                let _ = write!(out, "coerce {}", self.atom(arr));
            }
            Expr::Fail { msg, .. } => {
                let _ = write!(out, "fail {msg:?}");
            }
            Expr::StopGradient(a) => {
                let _ = write!(out, "stop_gradient {}", self.atom(a));
            }
            Expr::CustomJvp { primal, rule, args } => {
                let list = args.iter().map(|a| self.atom(a)).collect::<Vec<_>>().join(", ");
                let _ = write!(out, "custom_jvp ({list}) \\({}) ", self.binders(&primal.params));
                self.braced(&primal.body, level, out);
                let _ = write!(out, " rule \\({}) ", self.binders(&rule.params));
                self.braced(&rule.body, level, out);
            }
            Expr::Trace { label, args } => {
                let list = args.iter().map(|a| self.atom(a)).collect::<Vec<_>>().join(", ");
                let _ = write!(out, "trace {label:?} ({list})");
            }
            Expr::Jvp { lam, primals, tangents } => {
                let list = |xs: &[Atom]| xs.iter().map(|a| self.atom(a)).collect::<Vec<_>>().join(", ");
                let _ = write!(out, "jvp ({}) ({}) \\({}) ", list(primals), list(tangents), self.binders(&lam.params));
                self.braced(&lam.body, level, out);
            }
            Expr::Vjp { lam, primals, cotangents } => {
                let list = |xs: &[Atom]| xs.iter().map(|a| self.atom(a)).collect::<Vec<_>>().join(", ");
                let _ = write!(out, "vjp ({}) ({}) \\({}) ", list(primals), list(cotangents), self.binders(&lam.params));
                self.braced(&lam.body, level, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::verify::testkit::*;

    #[test]
    fn prints_dot() {
        let want = "\
entry dot [n] (a_1: [n]f64) (b_2: [n]f64) : f64 =
  let t_4: [n]f64 = for i_3 < n {
    let x_5: f64 = index a_1[i_3]
    let y_6: f64 = index b_2[i_3]
    let z_7: f64 = mul x_5 y_6
    in z_7
  }
  let s_8: f64 = reduce add (0.0) t_4
  in s_8
";
        assert_eq!(print_function(&dot()), want);
    }

    #[test]
    fn prints_nested_for_and_checked_index() {
        let want = "\
entry outer [n, m] (x_2: [n]f64) (y_3: [m]f64) (k_4: i64) : [n][m]f64 =
  let res_11: [n][m]f64 = for i_5 < n {
    let xi_7: f64 = index x_2[k_4!]
    let r_10: [m]f64 = for j_6 < m {
      let yj_8: f64 = index y_3[j_6]
      let p_9: f64 = mul xi_7 yj_8
      in p_9
    }
    in r_10
  }
  in res_11
";
        assert_eq!(print_function(&outer()), want);
    }

    #[test]
    fn prints_loops_if_lambda_scatter() {
        let want = "\
entry misc [n] (xs_1: [n]f64) (is_2: [n]i64) : (f64, i64, [n]f64) =
  let (acc_9: f64, cnt_10: i64) = loop (acc_3: f64 = 0.0, cnt_4: i64 = 0) for i_5 < n {
    let e_6: f64 = index xs_1[i_5]
    let acc_7: f64 = add acc_3 e_6
    let cnt_8: i64 = add cnt_4 1
    in (acc_7, cnt_8)
  }
  let w_14: f64 = loop (w_11: f64 = acc_9) while {
    let c_12: bool = gt w_11 1.0
    in c_12
  } do {
    let w_13: f64 = div w_11 2.0
    in w_13
  }
  let b_15: bool = gt cnt_10 0
  let r_17: f64 = if b_15 then {
    in w_14
  } else {
    let ng_16: f64 = neg w_14
    in ng_16
  }
  let (best_25: f64, at_26: i64) = reduce \\(p_18: f64, p_19: i64) (q_20: f64, q_21: i64) {
    let gt_22: bool = gt q_20 p_18
    let m_23: f64 = select gt_22 q_20 p_18
    let m_24: i64 = select gt_22 q_21 p_19
    in (m_23, m_24)
  } (-inf, -1) (xs_1, is_2)
  let z_27: [n]f64 = replicate n 0.0
  let sa_28: [n]f64 = scatter_add z_27 is_2 xs_1
  let tot_29: f64 = add r_17 best_25
  in (tot_29, at_26, sa_28)
";
        assert_eq!(print_function(&misc()), want);
    }

    #[test]
    fn prints_array_ops_and_literals() {
        let want = "\
entry shapes [n] (a_1: [n][3]f64) (k_2: i64) : ([n][3]f64, f32, i32, bool) =
  let t_3: [3][n]f64 = transpose a_1
  let fl_4: [3*n]f64 = flatten t_3
  let u_5: [3][n]f64 = unflatten 3 n fl_4
  let cc_6: [2*n][3]f64 = concat a_1 a_1
  let r_7: [n][3]f64 = reverse a_1
  let ro_8: [n][3]f64 = rotate k_2 r_7
  let l_9: [2]f64 = [1.0, -2.5]
  let io_10: [n]i64 = iota n
  let am_11: i64 = argmax l_9
  let sl_12: [k_2][3]f64 = slice! ro_8[0:k_2]
  let co_13: [n][3]f64 = coerce sl_12
  let scn_14: [n][3]f64 = scan max (-inf) co_13
  let fa_15: f64 = fail \"a \\\"bad\\\" size\"
  let cv_16: f32 = convert.f32 fa_15
  let q_17: i32 = add 3i32 -4i32
  let bb_18: bool = and true false
  in (scn_14, cv_16, q_17, bb_18)
";
        assert_eq!(print_function(&shapes()), want);
    }

    #[test]
    fn module_separates_functions_and_is_stable() {
        let m = Module { functions: vec![dot(), outer()] };
        let text = print_module(&m);
        assert_eq!(text, format!("{}\n{}", print_function(&dot()), print_function(&outer())));
        assert!(text.contains("  in s_8\n\nentry outer"));
        assert_eq!(text, print_module(&m.clone()));
        assert_eq!(print_module(&Module::default()), "");
    }

    #[test]
    fn literals_and_unnamed_vars() {
        assert_eq!(print_lit(&Lit::F64(1.0)), "1.0");
        assert_eq!(print_lit(&Lit::F64(1e-7)), "1e-7");
        assert_eq!(print_lit(&Lit::F32(1.0)), "1.0f32");
        assert_eq!(print_lit(&Lit::I64(3)), "3");
        assert_eq!(print_lit(&Lit::I32(3)), "3i32");
        assert_eq!(print_lit(&Lit::Bool(true)), "true");
        let mut f = dot();
        f.names[5].clear();
        f.body.stmts.truncate(0);
        f.body.result = vec![];
        f.result_shape = crate::ir::Shape::Tuple(vec![]);
        f.body.stmts.push(st(vec![], Expr::Fail { msg: "x".into(), loc: loc() }));
        f.body.stmts.push(let1(VarId(5), f64t(), Expr::Atom(Atom::Lit(Lit::F64(2.0)))));
        assert_eq!(print_function(&f), "entry dot [n] (a_1: [n]f64) (b_2: [n]f64) : () =\n  let () = fail \"x\"\n  let v5: f64 = 2.0\n  in ()\n");
    }
}
