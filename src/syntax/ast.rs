//! The surface syntax tree produced by the parser. Every node carries the byte
//! span of the source it came from, so later stages can point at it.

/// Byte offsets into the source text.
pub use crate::diag::Span;

#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub decls: Vec<Decl>,
    /// `derivative f …` declarations: user derivative rules, by the name
    /// of the function they are for (not in `decls`: the name is `f`'s)
    pub rules: Vec<Decl>,
}

impl Program {
    /// The program with every `f64` read as `f32`: types, float literals
    /// (suffixed `f64` or not) and the conversion `f64 x` (`--precision
    /// f32`), so one program serves both precisions.
    pub fn in_single_precision(&mut self) {
        for d in self.decls.iter_mut().chain(self.rules.iter_mut()) {
            d.params.iter_mut().filter_map(|p| p.ty.as_mut()).for_each(TypeExpr::in_single_precision);
            if let Some(t) = &mut d.ret {
                t.in_single_precision();
            }
            d.body.in_single_precision();
        }
    }
}

/// `def name [n][m] (p: t) ... : ret = body` or the same with `entry`.
#[derive(Clone, Debug, PartialEq)]
pub struct Decl {
    pub is_entry: bool,
    /// `derivative f (params) (tangents) = …`: the forward derivative rule
    /// of the `def f` of the same name
    pub is_rule: bool,
    pub name: Ident,
    pub size_params: Vec<Ident>,
    pub params: Vec<Param>,
    pub ret: Option<TypeExpr>,
    pub body: Expr,
    /// Span of the whole declaration.
    pub span: Span,
}

/// A function or lambda parameter: a pattern with an optional type.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub pat: Pat,
    pub ty: Option<TypeExpr>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Pat {
    Var(Ident),
    /// `(a, b)`; `()` is the empty tuple pattern.
    Tuple(Vec<Pat>, Span),
}

impl Pat {
    pub fn span(&self) -> Span {
        match self {
            Pat::Var(id) => id.span.clone(),
            Pat::Tuple(_, s) => s.clone(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarKind {
    F64,
    F32,
    I64,
    I32,
    Bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TypeExpr {
    Scalar(ScalarKind, Span),
    /// `idx n`
    Idx(SizeExpr, Span),
    /// `[n]t`
    Array(SizeExpr, Box<TypeExpr>, Span),
    /// `(t1, t2)`; `()` is the unit type.
    Tuple(Vec<TypeExpr>, Span),
    /// `t1 -> t2` (right associative)
    Fun(Box<TypeExpr>, Box<TypeExpr>, Span),
}

impl TypeExpr {
    fn in_single_precision(&mut self) {
        match self {
            TypeExpr::Scalar(k, _) => {
                if *k == ScalarKind::F64 {
                    *k = ScalarKind::F32;
                }
            }
            TypeExpr::Idx(..) => {}
            TypeExpr::Array(_, t, _) => t.in_single_precision(),
            TypeExpr::Tuple(ts, _) => ts.iter_mut().for_each(TypeExpr::in_single_precision),
            TypeExpr::Fun(a, b, _) => {
                a.in_single_precision();
                b.in_single_precision();
            }
        }
    }

    pub fn span(&self) -> Span {
        match self {
            TypeExpr::Scalar(_, s) | TypeExpr::Idx(_, s) | TypeExpr::Array(_, _, s) | TypeExpr::Tuple(_, s) | TypeExpr::Fun(_, _, s) => s.clone(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SizeOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// A size expression inside `[...]` or after `idx`.
#[derive(Clone, Debug, PartialEq)]
pub enum SizeExpr {
    Var(Ident),
    Lit(i64, Span),
    Bin(SizeOp, Box<SizeExpr>, Box<SizeExpr>, Span),
}

impl SizeExpr {
    pub fn span(&self) -> Span {
        match self {
            SizeExpr::Var(id) => id.span.clone(),
            SizeExpr::Lit(_, s) | SizeExpr::Bin(_, _, _, s) => s.clone(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Pow,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "||",
            BinOp::And => "&&",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Pow => "**",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Not,
}

/// One index position in `a[...]`.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexArg {
    /// `a[i]`
    Single(Expr),
    /// `a[lo:hi]`
    Slice(Box<Expr>, Box<Expr>),
}

/// One index variable of a `for`: `i` or `(i < n)`.
#[derive(Clone, Debug, PartialEq)]
pub struct ForIndex {
    pub name: Ident,
    pub bound: Option<Expr>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum LoopKind {
    /// `for i < n`
    For(Ident, Box<Expr>),
    /// `while cond`
    While(Box<Expr>),
}

/// An expression node.
///
/// Long operator chains (`x + x + ... + x`) and `let` chains make trees as
/// deep as the source is long, so nothing about an `Expr` may recurse on the
/// native stack without bound: `Drop` is iterative, and `Clone`, `PartialEq`
/// and `Debug` grow the stack on the heap as needed (`stacker`).
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

/// Red zone and segment size of the stack growth in the recursive impls.
const RED_ZONE: usize = 64 * 1024;
const SEGMENT: usize = 1024 * 1024;

impl Clone for Expr {
    fn clone(&self) -> Self {
        stacker::maybe_grow(RED_ZONE, SEGMENT, || Expr { kind: self.kind.clone(), span: self.span.clone() })
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        stacker::maybe_grow(RED_ZONE, SEGMENT, || self.span == other.span && self.kind == other.kind)
    }
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        stacker::maybe_grow(RED_ZONE, SEGMENT, || f.debug_struct("Expr").field("kind", &self.kind).field("span", &self.span).finish())
    }
}

impl Drop for Expr {
    /// Iterative: the children of every node are detached (their kinds moved
    /// to an explicit stack, leaving leaves behind) before the node itself is
    /// dropped, so no drop recurses more than one level.
    fn drop(&mut self) {
        if self.kind.is_leaf() {
            return;
        }
        let mut stack = vec![std::mem::replace(&mut self.kind, ExprKind::Bool(false))];
        while let Some(mut kind) = stack.pop() {
            kind.for_each_child_mut(&mut |child: &mut Expr| {
                if !child.kind.is_leaf() {
                    stack.push(std::mem::replace(&mut child.kind, ExprKind::Bool(false)));
                }
            });
            // `kind` now owns only leaves: dropping it recurses one level.
        }
    }
}

impl Expr {
    /// [`Program::in_single_precision`] of one expression. (A variable
    /// the program itself names `f64` is renamed too: type names are not
    /// keywords, but shadowing the conversion is not worth supporting here.)
    pub fn in_single_precision(&mut self) {
        stacker::maybe_grow(RED_ZONE, SEGMENT, || {
            match &mut self.kind {
                // an unsuffixed float literal is f32 too: no f64 is left for it
                // to be (`if c then 1.0 else 0.0`, `log 2.0` have no context)
                ExprKind::Float(_, suffix @ (None | Some(FloatSuffix::F64))) => *suffix = Some(FloatSuffix::F32),
                ExprKind::Var(v) if v == "f64" => *v = "f32".to_string(),
                ExprKind::Let(_, Some(t), _, _) | ExprKind::Coerce(_, t) => t.in_single_precision(),
                ExprKind::Lambda(ps, _) => ps.iter_mut().filter_map(|p| p.ty.as_mut()).for_each(TypeExpr::in_single_precision),
                _ => {}
            }
            self.kind.for_each_child_mut(&mut |c| c.in_single_precision());
        })
    }

    /// Whether the tree has more than `limit` levels (this node is level 1);
    /// found without recursion.
    pub fn is_deeper_than(&self, limit: usize) -> bool {
        let mut stack = vec![(self, 1usize)];
        while let Some((e, d)) = stack.pop() {
            if d > limit {
                return true;
            }
            e.kind.for_each_child(&mut |c| stack.push((c, d + 1)));
        }
        false
    }
}

impl ExprKind {
    /// Whether this node has no child expressions.
    fn is_leaf(&self) -> bool {
        matches!(self, ExprKind::Int(..) | ExprKind::Float(..) | ExprKind::Bool(_) | ExprKind::Var(_) | ExprKind::OpSection(_))
    }

    /// Call `f` on every direct child expression.
    pub fn for_each_child<'a>(&'a self, f: &mut dyn FnMut(&'a Expr)) {
        match self {
            ExprKind::Int(..) | ExprKind::Float(..) | ExprKind::Bool(_) | ExprKind::Var(_) | ExprKind::OpSection(_) => {}
            ExprKind::Tuple(es) | ExprKind::Array(es) => es.iter().for_each(f),
            ExprKind::Index(a, args) => {
                f(a);
                for arg in args {
                    match arg {
                        IndexArg::Single(e) => f(e),
                        IndexArg::Slice(lo, hi) => {
                            f(lo);
                            f(hi);
                        }
                    }
                }
            }
            ExprKind::Proj(e, _, _) | ExprKind::Un(_, e) | ExprKind::Lambda(_, e) | ExprKind::Coerce(e, _) | ExprKind::Trace(_, e) => f(e),
            ExprKind::App(h, args) => {
                f(h);
                args.iter().for_each(f);
            }
            ExprKind::Bin(_, a, b) | ExprKind::Let(_, _, a, b) | ExprKind::With(a, b) | ExprKind::Assert(_, a, b) => {
                f(a);
                f(b);
            }
            ExprKind::If(c, a, b) => {
                f(c);
                f(a);
                f(b);
            }
            ExprKind::For(idxs, body) => {
                for ix in idxs {
                    if let Some(b) = &ix.bound {
                        f(b);
                    }
                }
                f(body);
            }
            ExprKind::Loop { init, kind, body, .. } => {
                f(init);
                match kind {
                    LoopKind::For(_, n) => f(n),
                    LoopKind::While(c) => f(c),
                }
                f(body);
            }
        }
    }

    /// Call `f` on every direct child expression, mutably.
    pub fn for_each_child_mut(&mut self, f: &mut dyn FnMut(&mut Expr)) {
        match self {
            ExprKind::Int(..) | ExprKind::Float(..) | ExprKind::Bool(_) | ExprKind::Var(_) | ExprKind::OpSection(_) => {}
            ExprKind::Tuple(es) | ExprKind::Array(es) => es.iter_mut().for_each(f),
            ExprKind::Index(a, args) => {
                f(a);
                for arg in args {
                    match arg {
                        IndexArg::Single(e) => f(e),
                        IndexArg::Slice(lo, hi) => {
                            f(lo);
                            f(hi);
                        }
                    }
                }
            }
            ExprKind::Proj(e, _, _) | ExprKind::Un(_, e) | ExprKind::Lambda(_, e) | ExprKind::Coerce(e, _) | ExprKind::Trace(_, e) => f(e),
            ExprKind::App(h, args) => {
                f(h);
                args.iter_mut().for_each(f);
            }
            ExprKind::Bin(_, a, b) | ExprKind::Let(_, _, a, b) | ExprKind::With(a, b) | ExprKind::Assert(_, a, b) => {
                f(a);
                f(b);
            }
            ExprKind::If(c, a, b) => {
                f(c);
                f(a);
                f(b);
            }
            ExprKind::For(idxs, body) => {
                for ix in idxs {
                    if let Some(b) = &mut ix.bound {
                        f(b);
                    }
                }
                f(body);
            }
            ExprKind::Loop { init, kind, body, .. } => {
                f(init);
                match kind {
                    LoopKind::For(_, n) => f(n),
                    LoopKind::While(c) => f(c),
                }
                f(body);
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntSuffix {
    I64,
    I32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatSuffix {
    F64,
    F32,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// Integer literal with an optional `i64`/`i32` suffix.
    Int(i64, Option<IntSuffix>),
    /// Float literal with an optional `f64`/`f32` suffix.
    Float(f64, Option<FloatSuffix>),
    Bool(bool),
    Var(String),
    /// `(a, b)`; `()` is the empty tuple. `(e)` is just `e`, not a 1-tuple.
    Tuple(Vec<Expr>),
    /// `[e1, e2]`
    Array(Vec<Expr>),
    /// `a[i, j]`, `a[lo:hi]`
    Index(Box<Expr>, Vec<IndexArg>),
    /// `t.0`; the span is the span of the field number.
    Proj(Box<Expr>, usize, Span),
    /// `f x y`; also what `x |> f` parses to (`App(f, [x])`).
    App(Box<Expr>, Vec<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Un(UnOp, Box<Expr>),
    /// An operator used as a function: `(+)`, `(*)`, `(max)` is just Var.
    OpSection(BinOp),
    /// `let p: t = e1 in e2`
    Let(Pat, Option<TypeExpr>, Box<Expr>, Box<Expr>),
    If(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `\x (y: f64) -> e`
    Lambda(Vec<Param>, Box<Expr>),
    /// `for i j. e` / `for (i < n). e`
    For(Vec<ForIndex>, Box<Expr>),
    /// `loop p = init for i < n do body` / `loop p = init while c do body`
    Loop {
        pat: Pat,
        init: Box<Expr>,
        kind: LoopKind,
        body: Box<Expr>,
    },
    /// `e :> t`
    Coerce(Box<Expr>, TypeExpr),
    /// `a with [i, j] = v`: a copy of `a` with the element (or row) at the
    /// indexes replaced; the first expression is the `a[i, j]` it replaces.
    With(Box<Expr>, Box<Expr>),
    /// `trace "label" e`: `e`, printed with its label when it is computed.
    Trace(String, Box<Expr>),
    /// `assert "message" cond e`: `e`, or a run-time error with the
    /// message where `cond` is false.
    Assert(String, Box<Expr>, Box<Expr>),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `x + x + … + x`, left nested, `n` operators deep.
    fn chain(n: usize) -> Expr {
        let mut e = Expr { kind: ExprKind::Var("x".into()), span: 0..1 };
        for i in 0..n {
            let rhs = Expr { kind: ExprKind::Var("x".into()), span: i..i + 1 };
            e = Expr { kind: ExprKind::Bin(BinOp::Add, Box::new(e), Box::new(rhs)), span: 0..i + 1 };
        }
        e
    }

    #[test]
    fn deep_trees_drop_clone_and_compare_on_a_small_stack() {
        // 200,000 levels on a 256 kB stack: a recursive drop, clone or
        // comparison would overflow it many times over.
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let e = chain(200_000);
                assert!(e.is_deeper_than(200_000));
                assert!(!e.is_deeper_than(200_001));
                let c = e.clone();
                assert!(c == e);
                drop(c);
                let lets = (0..200_000).fold(Expr { kind: ExprKind::Int(0, None), span: 0..1 }, |body, i| Expr {
                    kind: ExprKind::Let(
                        Pat::Var(Ident { name: format!("a{i}"), span: 0..1 }),
                        None,
                        Box::new(Expr { kind: ExprKind::Float(1.0, None), span: 0..1 }),
                        Box::new(body),
                    ),
                    span: 0..1,
                });
                drop(lets);
                drop(e);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
