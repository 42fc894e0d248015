//! Recursive-descent parser for `.ard` source.
//!
//! [`parse`] never panics: every syntax error becomes a [`Diagnostic`], the
//! declaration it occurred in is dropped, and parsing resumes at the next
//! `def`/`entry` token, so several independent mistakes are reported at once.
//! Deep nesting is bounded ([`MAX_DEPTH`]) and the stack is grown on demand.
//!
//! Precedence, lowest first: `|>`; `:>`; `||`; `&&`; comparisons
//! (non-associative); `+ -`; `* / %`; `**` (right associative); unary `-` `!`
//! (tighter than `**`: `-x ** 2.0` is `(-x) ** 2.0`, as LANGUAGE.md §5 says);
//! application; postfix `a[i]` and `t.0`. `let`, `if`, `\`, `for`, `loop` extend as far
//! right as possible and may start any operand; a lambda may also be the last
//! argument of an application (`f \x -> e`).

use crate::diag::{Diagnostic, Source};
use crate::syntax::ast::*;
use crate::syntax::lexer::{NumLit, Token, TokenKind, decode_number, lex};

/// How deeply expressions, types and patterns may nest before the parser
/// gives up with a diagnostic.
pub const MAX_DEPTH: usize = 500;

/// The largest source text accepted (2 MiB). Compile-time memory grows
/// linearly with the source: about 140 bytes per source byte to parse the
/// worst case (`x+x+…`), and up to about 500 bytes per source byte to lower
/// and differentiate it and keep both IRs; this keeps the worst case near
/// 1 GB. The largest real programs are a few hundred kilobytes.
pub const MAX_SOURCE_BYTES: usize = 2 << 20;

/// The deepest expression tree accepted, counting every level: a chain
/// `x + x + … + x` of n operators is n levels deep, as is a chain of n
/// `let`s. Every later stage walks the tree recursively (on a stack grown on
/// the heap), at a cost of up to a few kilobytes per level, so the depth is
/// bounded independently of the source size.
pub const MAX_EXPR_DEPTH: usize = 250_000;

/// The most operators in one size expression between brackets (`[n+m+…]`).
pub const MAX_SIZE_OPERATORS: usize = 500;

/// The diagnostic for a source over [`MAX_SOURCE_BYTES`], of `len` bytes
/// when known (`None` for a stream that goes on).
pub fn source_too_large(len: Option<u64>) -> Diagnostic {
    let size = match len {
        Some(n) => format!("{n} bytes"),
        None => format!("more than {MAX_SOURCE_BYTES} bytes"),
    };
    Diagnostic::new(format!("source file is too large: {size} (the limit is {MAX_SOURCE_BYTES} bytes, {} MiB)", MAX_SOURCE_BYTES >> 20), 0..0)
        .label("the file starts here")
        .hint("pass large data as arguments (`--arg @data.json` or `@data.npy`) rather than writing it into the source")
}

/// Parse a whole source file: all declarations that parsed, and every lexical
/// and syntax error (sorted by position). A source over [`MAX_SOURCE_BYTES`]
/// is not parsed: one diagnostic says so.
pub fn parse(source: &Source) -> (Program, Vec<Diagnostic>) {
    if source.text.len() > MAX_SOURCE_BYTES {
        return (Program { decls: vec![], rules: vec![] }, vec![source_too_large(Some(source.text.len() as u64))]);
    }
    let (toks, lex_diags) = lex(&source.text);
    let mut p = Parser { text: &source.text, toks, pos: 0, diags: lex_diags, depth: 0 };
    let prog = p.program();
    let mut diags = p.diags;
    diags.sort_by_key(|d| d.span.start);
    (prog, diags)
}

/// Parse for checking: every diagnostic of [`parse`], and only the
/// declarations that can be checked further despite them. A declaration is
/// left out when it did not parse, when a diagnostic falls inside it (or in
/// the text after it, before the next declaration), or when it uses, directly
/// or through others, a declaration left out. The rest are well-formed and
/// independent of every error, so their own errors (types, sizes) can be
/// reported along with the syntax errors without follow-on noise.
pub fn parse_checkable(source: &Source) -> (Program, Vec<Diagnostic>) {
    let (mut prog, diags) = parse(source);
    if diags.is_empty() {
        return (prog, diags);
    }
    // Region of declaration i: from its keyword to the next `def`/`entry`.
    let (toks, _) = lex(&source.text);
    let decl_toks: Vec<usize> = (0..toks.len()).filter(|&j| matches!(toks[j].kind, T::Def | T::Entry | T::Derivative)).collect();
    let decl_starts: Vec<usize> = decl_toks.iter().map(|&j| toks[j].span.start).collect();
    let region_end = |start: usize| {
        let k = decl_starts.partition_point(|&s| s <= start);
        decl_starts.get(k).copied().unwrap_or(usize::MAX)
    };
    let mut diag_starts: Vec<usize> = diags.iter().map(|d| d.span.start).collect();
    diag_starts.sort_unstable();
    let has_diag_in = |lo: usize, hi: usize| {
        let k = diag_starts.partition_point(|&s| s < lo);
        diag_starts.get(k).is_some_and(|&s| s < hi)
    };
    // Names of the declarations that did not parse, or only with errors.
    let parsed: std::collections::HashSet<usize> = prog.decls.iter().chain(&prog.rules).map(|d| d.span.start).collect();
    let mut bad: Vec<String> = vec![];
    for &j in &decl_toks {
        if !parsed.contains(&toks[j].span.start)
            && let Some(t) = toks.get(j + 1)
            && t.kind == T::Ident
        {
            bad.push(source.text[t.span.clone()].to_string());
        }
    }
    // A top-level `let x = ...` (an error) was meant to declare `x`.
    let mut spans: Vec<Span> = prog.decls.iter().map(|d| d.span.clone()).collect();
    spans.sort_by_key(|s| s.start);
    let in_decl = |at: usize| {
        let k = spans.partition_point(|s| s.start <= at);
        k > 0 && at < spans[k - 1].end
    };
    for j in 0..toks.len() {
        if toks[j].kind == T::Let
            && !in_decl(toks[j].span.start)
            && let Some(t) = toks.get(j + 1)
            && t.kind == T::Ident
        {
            bad.push(source.text[t.span.clone()].to_string());
        }
    }
    let mut keep: Vec<bool> = prog.decls.iter().map(|d| !has_diag_in(d.span.start, region_end(d.span.start))).collect();
    for (d, k) in prog.decls.iter().zip(&keep) {
        if !k {
            bad.push(d.name.name.clone());
        }
    }
    // Leave out, transitively, every declaration that uses a bad name.
    let mut users: std::collections::HashMap<String, Vec<usize>> = std::collections::HashMap::new();
    for (i, d) in prog.decls.iter().enumerate() {
        for n in super::free::free_names(d) {
            users.entry(n).or_default().push(i);
        }
    }
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    while let Some(name) = bad.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        for &i in users.get(&name).map(Vec::as_slice).unwrap_or(&[]) {
            if keep[i] {
                keep[i] = false;
                bad.push(prog.decls[i].name.name.clone());
            }
        }
    }
    let mut k = keep.into_iter();
    prog.decls.retain(|_| k.next().unwrap_or(false));
    (prog, diags)
}

/// Parse a single expression (the whole input must be one expression).
/// Useful for tests and tools.
pub fn parse_expr(source: &Source) -> (Option<Expr>, Vec<Diagnostic>) {
    let (toks, lex_diags) = lex(&source.text);
    let mut p = Parser { text: &source.text, toks, pos: 0, diags: lex_diags, depth: 0 };
    let mut e = p.expr_after("the start of the input").ok();
    if e.is_some() && !p.at(TokenKind::Eof) {
        let _ = p.error_expected::<()>("unexpected input after the expression".to_string());
        e = None;
    }
    let mut diags = p.diags;
    diags.sort_by_key(|d| d.span.start);
    (e, diags)
}

/// Parse a single type (the whole input must be one type).
pub fn parse_type(source: &Source) -> (Option<TypeExpr>, Vec<Diagnostic>) {
    let (toks, lex_diags) = lex(&source.text);
    let mut p = Parser { text: &source.text, toks, pos: 0, diags: lex_diags, depth: 0 };
    let mut t = p.ty().ok();
    if t.is_some() && !p.at(TokenKind::Eof) {
        let _ = p.error_expected::<()>("unexpected input after the type".to_string());
        t = None;
    }
    let mut diags = p.diags;
    diags.sort_by_key(|d| d.span.start);
    (t, diags)
}

/// The error has already been recorded in `Parser::diags`.
type PResult<T> = Result<T, ()>;

struct Parser<'a> {
    text: &'a str,
    toks: Vec<Token>,
    pos: usize,
    diags: Vec<Diagnostic>,
    depth: usize,
}

use TokenKind as T;

fn starts_expr(k: TokenKind) -> bool {
    matches!(
        k,
        T::Ident | T::Number | T::True | T::False | T::LParen | T::LBracket | T::Backslash | T::Minus | T::Bang | T::Let | T::If | T::For | T::Loop | T::Str
    )
}

/// Tokens that can start an argument of an application.
fn starts_arg(k: TokenKind) -> bool {
    matches!(k, T::Ident | T::Number | T::True | T::False | T::LParen | T::LBracket | T::Backslash | T::Str)
}

fn binop_of(k: TokenKind) -> Option<BinOp> {
    Some(match k {
        T::OrOr => BinOp::Or,
        T::AndAnd => BinOp::And,
        T::EqEq => BinOp::Eq,
        T::NotEq => BinOp::Ne,
        T::Lt => BinOp::Lt,
        T::Le => BinOp::Le,
        T::Gt => BinOp::Gt,
        T::Ge => BinOp::Ge,
        T::Plus => BinOp::Add,
        T::Minus => BinOp::Sub,
        T::Star => BinOp::Mul,
        T::Slash => BinOp::Div,
        T::Percent => BinOp::Rem,
        T::StarStar => BinOp::Pow,
        _ => return None,
    })
}

fn is_comparison(k: TokenKind) -> bool {
    matches!(k, T::EqEq | T::NotEq | T::Lt | T::Le | T::Gt | T::Ge)
}

fn mk(kind: ExprKind, span: Span) -> Expr {
    Expr { kind, span }
}

impl<'a> Parser<'a> {
    // ----- token helpers -------------------------------------------------

    fn tok(&self) -> &Token {
        &self.toks[self.pos.min(self.toks.len() - 1)]
    }
    fn peek(&self) -> TokenKind {
        self.tok().kind
    }
    fn peek_at(&self, n: usize) -> TokenKind {
        self.toks[(self.pos + n).min(self.toks.len() - 1)].kind
    }
    fn at(&self, k: TokenKind) -> bool {
        self.peek() == k
    }
    fn bump(&mut self) -> Token {
        let t = self.tok().clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }
    fn eat(&mut self, k: TokenKind) -> Option<Token> {
        if self.at(k) { Some(self.bump()) } else { None }
    }
    fn prev_end(&self) -> usize {
        if self.pos == 0 { 0 } else { self.toks[self.pos - 1].span.end }
    }
    fn slice(&self, span: &Span) -> &'a str {
        self.text.get(span.clone()).unwrap_or("")
    }

    /// Where to put the caret for an error at the current token: the token
    /// itself, or just after the previous token when the current one is the
    /// end of input or belongs to the next declaration.
    fn culprit(&self) -> Span {
        let t = self.tok();
        if matches!(t.kind, T::Eof | T::Def | T::Entry | T::Derivative) && self.pos > 0 {
            let e = self.prev_end();
            e..e
        } else {
            t.span.clone()
        }
    }

    fn found(&self) -> String {
        let t = self.tok();
        match t.kind {
            T::Ident | T::Number => format!("found `{}`", self.slice(&t.span)),
            T::Eof => "found end of input".to_string(),
            T::Def | T::Entry | T::Derivative if self.pos > 0 => "the declaration ends here, incomplete".to_string(),
            T::Def | T::Entry | T::Derivative => format!("found {}", t.kind.describe()),
            k => format!("found {}", k.describe()),
        }
    }

    /// Record "expected ..." at the current token and fail.
    fn error_expected<X>(&mut self, msg: String) -> PResult<X> {
        self.error_expected_hint(msg, None)
    }

    fn error_expected_hint<X>(&mut self, msg: String, hint: Option<String>) -> PResult<X> {
        let mut d = Diagnostic::new(msg, self.culprit()).label(self.found());
        let hint = hint.or_else(|| match self.peek() {
            T::Assign => Some("to compare two values use `==`; `=` only appears in `let`, `loop` and declarations".to_string()),
            T::Def | T::Entry | T::Derivative => Some(format!("the next {} starts before this declaration is complete", self.peek().describe())),
            _ => None,
        });
        if let Some(h) = hint {
            d = d.hint(h);
        }
        self.diags.push(d);
        Err(())
    }

    fn expect(&mut self, k: TokenKind, msg: &str) -> PResult<Token> {
        match self.eat(k) {
            Some(t) => Ok(t),
            None => self.error_expected(msg.to_string()),
        }
    }

    fn expect_hint(&mut self, k: TokenKind, msg: &str, hint: &str) -> PResult<Token> {
        match self.eat(k) {
            Some(t) => Ok(t),
            None => self.error_expected_hint(msg.to_string(), Some(hint.to_string())),
        }
    }

    fn ident(&mut self, msg: &str) -> PResult<Ident> {
        let t = self.expect(T::Ident, msg)?;
        Ok(Ident { name: self.slice(&t.span).to_string(), span: t.span })
    }

    /// Run `f` one nesting level deeper, on a stack that is grown if needed.
    fn nested<X>(&mut self, f: impl FnOnce(&mut Self) -> PResult<X>) -> PResult<X> {
        if self.depth >= MAX_DEPTH {
            self.diags.push(
                Diagnostic::new("expression is nested too deeply", self.tok().span.clone())
                    .label(format!("more than {MAX_DEPTH} levels of nesting"))
                    .hint("split the expression with `let` bindings"),
            );
            return Err(());
        }
        self.depth += 1;
        let r = stacker::maybe_grow(64 * 1024, 1024 * 1024, || f(self));
        self.depth -= 1;
        r
    }

    // ----- declarations --------------------------------------------------

    fn program(&mut self) -> Program {
        let (mut decls, mut rules) = (vec![], vec![]);
        loop {
            match self.peek() {
                T::Eof => break,
                T::Def | T::Entry | T::Derivative => match self.decl() {
                    Ok(d) if d.body.is_deeper_than(MAX_EXPR_DEPTH) => {
                        let at = d.body.span.start;
                        self.diags.push(
                                Diagnostic::new(format!("the body of `{}` is too deeply nested", d.name.name), at..at)
                                    .label(format!("more than {MAX_EXPR_DEPTH} levels of operations below the body"))
                                    .hint("every operator in a chain like `x + x + … + x` adds a level, as does every `let` in a row; bind parts of a long chain with `let`, or put the values in an array and use `sum`"),
                            );
                        self.recover();
                    }
                    Ok(d) => {
                        let name = d.name.name.clone();
                        if d.is_rule {
                            rules.push(d);
                        } else {
                            decls.push(d);
                        }
                        if !matches!(self.peek(), T::Eof | T::Def | T::Entry | T::Derivative | T::Let) {
                            let what = match self.peek() {
                                T::Ident | T::Number => format!("`{}`", self.slice(&self.tok().span)),
                                k => k.describe().to_string(),
                            };
                            let _: PResult<()> = self.error_expected_hint(
                                format!("unexpected {what} after the body of `{name}`"),
                                Some("a body is one expression; check for a missing operator, parenthesis or `let ... in`".to_string()),
                            );
                            self.recover();
                        }
                    }
                    Err(()) => self.recover(),
                },
                T::Let => {
                    let t = self.bump();
                    self.diags.push(
                        Diagnostic::new("`let` is not allowed at the top level", t.span)
                            .label("top-level `let`")
                            .hint("write `def c : f64 = 3.0` for constants"),
                    );
                    self.recover();
                }
                _ => {
                    let _: PResult<()> = self.error_expected_hint(
                        "expected a declaration (`def` or `entry`)".to_string(),
                        Some("a file is a list of `def name ... = body` and `entry name ... = body` declarations".to_string()),
                    );
                    self.bump();
                    self.recover();
                }
            }
        }
        Program { decls, rules }
    }

    /// Skip to the next `def`/`entry` (or the end of input), or to a `let`
    /// at the start of a line (most likely a mistaken top-level `let`, which
    /// then gets its own message).
    fn recover(&mut self) {
        loop {
            match self.peek() {
                T::Eof | T::Def | T::Entry | T::Derivative => return,
                T::Let if self.at_line_start() => return,
                _ => {
                    self.bump();
                }
            }
        }
    }

    /// Whether the current token is the first thing on its line.
    fn at_line_start(&self) -> bool {
        let start = self.tok().span.start;
        start == 0 || self.text.as_bytes().get(start - 1) == Some(&b'\n')
    }

    fn decl(&mut self) -> PResult<Decl> {
        let kw = self.bump();
        let is_entry = kw.kind == T::Entry;
        let what = match kw.kind {
            T::Entry => "entry",
            T::Derivative => "derivative",
            _ => "def",
        };
        let name = self.ident(&format!("expected a name after `{what}`"))?;
        let mut size_params = vec![];
        while self.at(T::LBracket) {
            let lb = self.bump();
            if self.at(T::RBracket) {
                return self.error_expected_hint(
                    "expected a size variable in `[...]`".to_string(),
                    Some("size binders are written `def f [n] (x: [n]f64) = ...`".to_string()),
                );
            }
            loop {
                size_params.push(self.ident("expected a size variable name in `[...]`")?);
                if self.eat(T::Comma).is_none() {
                    break;
                }
            }
            if !self.at(T::RBracket) {
                let d = Diagnostic::new("expected `]` after the size variable", self.culprit())
                    .label(self.found())
                    .note(lb.span, "size binder opened here")
                    .hint("each size binder is one name, e.g. `[n][m]`");
                self.diags.push(d);
                return Err(());
            }
            self.bump();
        }
        let mut params = vec![];
        while matches!(self.peek(), T::Ident | T::LParen) {
            params.push(self.param()?);
        }
        let ret = if self.eat(T::Colon).is_some() {
            if !matches!(self.peek(), T::Ident | T::LParen | T::LBracket) {
                return self.error_expected("expected the result type after `:`".to_string());
            }
            Some(self.ty()?)
        } else {
            None
        };
        if !self.at(T::Assign) {
            let hint = match self.peek() {
                T::LBracket => Some("size binders `[n]` come right after the name, before the parameters".to_string()),
                T::Arrow => Some("write the result type after `:`, as in `def f (x: f64) : f64 = ...`".to_string()),
                _ => Some(format!("a declaration reads `{what} name (x: t) ... : result = body`")),
            };
            return self.error_expected_hint(format!("expected `=` before the body of `{}`", name.name), hint);
        }
        self.bump();
        let body = self.expr_after("`=`")?;
        let span = kw.span.start..body.span.end;
        Ok(Decl { is_entry, is_rule: kw.kind == T::Derivative, name, size_params, params, ret, body, span })
    }

    /// A function or lambda parameter: `x`, `(x)`, `(x: t)`, `((a, b): t)`,
    /// `(a, b)`, `()`.
    fn param(&mut self) -> PResult<Param> {
        if self.at(T::Ident) {
            let id = self.ident("expected a parameter")?;
            let span = id.span.clone();
            return Ok(Param { pat: Pat::Var(id), ty: None, span });
        }
        let lp = self.expect(T::LParen, "expected a parameter")?;
        if let Some(rp) = self.eat(T::RParen) {
            let span = lp.span.start..rp.span.end;
            return Ok(Param { pat: Pat::Tuple(vec![], span.clone()), ty: None, span });
        }
        let first = self.pat()?;
        let (pat, ty) = if self.at(T::Comma) {
            let mut pats = vec![first];
            while self.eat(T::Comma).is_some() {
                pats.push(self.pat()?);
            }
            let rp = self.expect(T::RParen, "expected `)` after the tuple pattern")?;
            let span = lp.span.start..rp.span.end;
            return Ok(Param { pat: Pat::Tuple(pats, span.clone()), ty: None, span });
        } else if self.eat(T::Colon).is_some() {
            let t = self.ty()?;
            (first, Some(t))
        } else {
            (first, None)
        };
        if !self.at(T::RParen) {
            let msg = if ty.is_some() { "expected `)` after the parameter type" } else { "expected `:` or `)` after the parameter" };
            let d = Diagnostic::new(msg, self.culprit()).label(self.found()).note(lp.span.clone(), "parameter starts here");
            self.diags.push(d);
            return Err(());
        }
        let rp = self.bump();
        Ok(Param { pat, ty, span: lp.span.start..rp.span.end })
    }

    /// A pattern: a name, `()`, or a tuple of patterns `(a, (b, c))`.
    fn pat(&mut self) -> PResult<Pat> {
        self.nested(|p| match p.peek() {
            T::Ident => Ok(Pat::Var(p.ident("expected a pattern")?)),
            T::LParen => {
                let lp = p.bump();
                if let Some(rp) = p.eat(T::RParen) {
                    return Ok(Pat::Tuple(vec![], lp.span.start..rp.span.end));
                }
                let first = p.pat()?;
                if !p.at(T::Comma) {
                    p.expect(T::RParen, "expected `)` after the pattern")?;
                    return Ok(first);
                }
                let mut pats = vec![first];
                while p.eat(T::Comma).is_some() {
                    pats.push(p.pat()?);
                }
                let rp = p.expect(T::RParen, "expected `)` or `,` in the tuple pattern")?;
                Ok(Pat::Tuple(pats, lp.span.start..rp.span.end))
            }
            _ => p.error_expected_hint("expected a pattern".to_string(), Some("a pattern is a name or a tuple of patterns like `(a, b)`".to_string())),
        })
    }

    // ----- types ---------------------------------------------------------

    fn ty(&mut self) -> PResult<TypeExpr> {
        self.nested(|p| {
            let lhs = p.ty_atom()?;
            if p.eat(T::Arrow).is_some() {
                let rhs = p.ty()?;
                let span = lhs.span().start..rhs.span().end;
                Ok(TypeExpr::Fun(Box::new(lhs), Box::new(rhs), span))
            } else {
                Ok(lhs)
            }
        })
    }

    fn ty_atom(&mut self) -> PResult<TypeExpr> {
        match self.peek() {
            T::Ident => {
                let t = self.bump();
                let kind = match self.slice(&t.span) {
                    "f64" => ScalarKind::F64,
                    "f32" => ScalarKind::F32,
                    "i64" => ScalarKind::I64,
                    "i32" => ScalarKind::I32,
                    "bool" => ScalarKind::Bool,
                    "idx" => {
                        let n = self.size_atom("expected a size after `idx`")?;
                        let span = t.span.start..n.span().end;
                        return Ok(TypeExpr::Idx(n, span));
                    }
                    other => {
                        let hint = match other {
                            "int" | "integer" => "did you mean `i64`?",
                            "float" | "double" | "real" => "did you mean `f64`?",
                            "Bool" | "boolean" => "did you mean `bool`?",
                            _ => "the types are `f64`, `f32`, `i64`, `i32`, `bool`, `idx n`, `[n]t`, tuples `(t1, t2)` and functions `t1 -> t2`",
                        };
                        self.diags.push(Diagnostic::new(format!("unknown type `{other}`"), t.span).label("not a type").hint(hint));
                        return Err(());
                    }
                };
                Ok(TypeExpr::Scalar(kind, t.span))
            }
            T::LBracket => {
                let lb = self.bump();
                if self.at(T::RBracket) {
                    return self.error_expected_hint("expected a size in `[...]`".to_string(), Some("array types carry their size, e.g. `[n]f64`".to_string()));
                }
                let n = self.size_expr()?;
                self.expect(T::RBracket, "expected `]` after the size")?;
                if !matches!(self.peek(), T::Ident | T::LParen | T::LBracket) {
                    return self.error_expected("expected the element type after `]`".to_string());
                }
                let elem = self.nested(|p| p.ty_atom())?;
                let span = lb.span.start..elem.span().end;
                Ok(TypeExpr::Array(n, Box::new(elem), span))
            }
            T::LParen => {
                let lp = self.bump();
                if let Some(rp) = self.eat(T::RParen) {
                    return Ok(TypeExpr::Tuple(vec![], lp.span.start..rp.span.end));
                }
                let first = self.ty()?;
                if !self.at(T::Comma) {
                    self.expect(T::RParen, "expected `)` after the type")?;
                    return Ok(first);
                }
                let mut ts = vec![first];
                while self.eat(T::Comma).is_some() {
                    ts.push(self.ty()?);
                }
                let rp = self.expect(T::RParen, "expected `)` or `,` in the tuple type")?;
                Ok(TypeExpr::Tuple(ts, lp.span.start..rp.span.end))
            }
            _ => self.error_expected("expected a type".to_string()),
        }
    }

    fn size_expr(&mut self) -> PResult<SizeExpr> {
        let mut lhs = self.size_term()?;
        let mut ops = 0;
        loop {
            ops += 1;
            if ops > MAX_SIZE_OPERATORS && matches!(self.peek(), T::Plus | T::Minus) {
                return self.size_too_long();
            }
            let op = match self.peek() {
                T::Plus => SizeOp::Add,
                T::Minus => SizeOp::Sub,
                _ => break,
            };
            let t = self.bump();
            let rhs = self.size_term_after(&t)?;
            let span = lhs.span().start..rhs.span().end;
            lhs = SizeExpr::Bin(op, Box::new(lhs), Box::new(rhs), span);
        }
        Ok(lhs)
    }

    fn size_term_after(&mut self, op: &Token) -> PResult<SizeExpr> {
        let msg = format!("expected a size after `{}`", self.slice(&op.span));
        if !matches!(self.peek(), T::Ident | T::Number | T::LParen) {
            return self.error_expected(msg);
        }
        self.size_term()
    }

    fn size_term(&mut self) -> PResult<SizeExpr> {
        let mut lhs = self.size_atom("expected a size (a size variable, an integer or `(...)`)")?;
        let mut ops = 0;
        loop {
            ops += 1;
            if ops > MAX_SIZE_OPERATORS && matches!(self.peek(), T::Star | T::Slash) {
                return self.size_too_long();
            }
            let op = match self.peek() {
                T::Star => SizeOp::Mul,
                T::Slash => SizeOp::Div,
                _ => break,
            };
            let t = self.bump();
            let rhs = self.size_atom(&format!("expected a size after `{}`", self.slice(&t.span)))?;
            let span = lhs.span().start..rhs.span().end;
            lhs = SizeExpr::Bin(op, Box::new(lhs), Box::new(rhs), span);
        }
        Ok(lhs)
    }

    fn size_too_long<X>(&mut self) -> PResult<X> {
        self.diags.push(
            Diagnostic::new("size expression is too long", self.tok().span.clone())
                .label(format!("more than {MAX_SIZE_OPERATORS} operators in a row"))
                .hint("a size is a short formula such as `[n*m + 1]`; pass a long one in as a size parameter instead"),
        );
        Err(())
    }

    fn size_atom(&mut self, msg: &str) -> PResult<SizeExpr> {
        match self.peek() {
            T::Ident => Ok(SizeExpr::Var(self.ident(msg)?)),
            T::Number => {
                let t = self.bump();
                match decode_number(self.slice(&t.span), t.span.clone()) {
                    Ok(NumLit::Int(v, None)) => Ok(SizeExpr::Lit(v, t.span)),
                    Ok(_) => {
                        self.diags.push(
                            Diagnostic::new("a size must be a plain integer", t.span.clone())
                                .label("not a plain integer")
                                .hint("write sizes without suffix or fraction, e.g. `[3]f64`"),
                        );
                        Ok(SizeExpr::Lit(0, t.span))
                    }
                    Err(b) => {
                        self.diags.push(b.1);
                        Ok(SizeExpr::Lit(0, t.span))
                    }
                }
            }
            T::LParen => {
                let lp = self.bump();
                let inner = self.nested(|p| p.size_expr())?;
                if !self.at(T::RParen) {
                    let d = Diagnostic::new("expected `)` in the size expression", self.culprit()).label(self.found()).note(lp.span, "opened here");
                    self.diags.push(d);
                    return Err(());
                }
                self.bump();
                Ok(inner)
            }
            _ => self
                .error_expected_hint(msg.to_string(), Some("sizes are size variables and integers combined with `+ - * /`, e.g. `[d*(d-1)/2]f64`".to_string())),
        }
    }

    // ----- expressions ---------------------------------------------------

    /// A full expression, after checking one can start here.
    fn expr_after(&mut self, what: &str) -> PResult<Expr> {
        if !starts_expr(self.peek()) {
            return self.error_expected(format!("expected an expression after {what}"));
        }
        self.expr()
    }

    fn expr(&mut self) -> PResult<Expr> {
        self.nested(|p| p.pipe())
    }

    /// Check an operand can start after the operator token just consumed.
    fn operand_check(&mut self, op: &Token) -> PResult<()> {
        if starts_expr(self.peek()) {
            Ok(())
        } else {
            let msg = format!("expected an expression after `{}`", self.slice(&op.span));
            self.error_expected(msg)
        }
    }

    fn pipe(&mut self) -> PResult<Expr> {
        let mut lhs = self.coerce()?;
        while self.at(T::Pipe) {
            let t = self.bump();
            self.operand_check(&t)?;
            let f = self.coerce()?;
            let span = lhs.span.start..f.span.end;
            lhs = mk(ExprKind::App(Box::new(f), vec![lhs]), span);
        }
        Ok(lhs)
    }

    fn coerce(&mut self) -> PResult<Expr> {
        let mut lhs = self.with_update()?;
        while self.at(T::ColonGt) {
            self.bump();
            if !matches!(self.peek(), T::Ident | T::LParen | T::LBracket) {
                return self.error_expected_hint("expected a type after `:>`".to_string(), Some("a size coercion reads `e :> [m]f64`".to_string()));
            }
            let t = self.ty()?;
            let span = lhs.span.start..t.span().end;
            lhs = mk(ExprKind::Coerce(Box::new(lhs), t), span);
        }
        Ok(lhs)
    }

    /// `a with [i, j] = v` (left-associative: `a with [0] = x with [1] = y`);
    /// `v` is an operator expression, so `a with [i] = a[i] + 1` needs no
    /// parentheses.
    fn with_update(&mut self) -> PResult<Expr> {
        let mut lhs = self.or()?;
        while self.at(T::With) {
            let w = self.bump();
            if !self.at(T::LBracket) {
                return self.error_expected_hint("expected `[` after `with`".to_string(), Some("a functional update reads `a with [i] = v`".to_string()));
            }
            let target = self.index(lhs)?;
            if self.eat(T::Assign).is_none() {
                let d = Diagnostic::new("expected `=` after the indexes of `with`", self.culprit()).label(self.found()).note(w.span, "`with` here");
                self.diags.push(d.hint("a functional update reads `a with [i] = v`"));
                return Err(());
            }
            let t = Token { kind: T::Assign, span: self.prev_end() - 1..self.prev_end() };
            self.operand_check(&t)?;
            let v = self.or()?;
            let span = target.span.start..v.span.end;
            lhs = mk(ExprKind::With(Box::new(target), Box::new(v)), span);
        }
        Ok(lhs)
    }

    fn left_assoc(&mut self, ops: &[TokenKind], next: fn(&mut Self) -> PResult<Expr>) -> PResult<Expr> {
        let mut lhs = next(self)?;
        while ops.contains(&self.peek()) {
            let t = self.bump();
            let op = binop_of(t.kind).expect("operator token");
            self.operand_check(&t)?;
            let rhs = next(self)?;
            let span = lhs.span.start..rhs.span.end;
            lhs = mk(ExprKind::Bin(op, Box::new(lhs), Box::new(rhs)), span);
        }
        Ok(lhs)
    }

    fn or(&mut self) -> PResult<Expr> {
        self.left_assoc(&[T::OrOr], Self::and)
    }

    fn and(&mut self) -> PResult<Expr> {
        self.left_assoc(&[T::AndAnd], Self::cmp)
    }

    fn cmp(&mut self) -> PResult<Expr> {
        let mut lhs = self.add()?;
        let mut first: Option<Span> = None;
        while is_comparison(self.peek()) {
            let t = self.bump();
            if let Some(first_span) = &first {
                self.diags.push(
                    Diagnostic::new("comparison operators cannot be chained", t.span.clone())
                        .label("second comparison")
                        .note(first_span.clone(), "first comparison")
                        .hint("write `a < b && b < c`, or add parentheses"),
                );
            } else {
                first = Some(t.span.clone());
            }
            let op = binop_of(t.kind).expect("comparison token");
            self.operand_check(&t)?;
            let rhs = self.add()?;
            let span = lhs.span.start..rhs.span.end;
            lhs = mk(ExprKind::Bin(op, Box::new(lhs), Box::new(rhs)), span);
        }
        Ok(lhs)
    }

    fn add(&mut self) -> PResult<Expr> {
        self.left_assoc(&[T::Plus, T::Minus], Self::mul)
    }

    fn mul(&mut self) -> PResult<Expr> {
        self.left_assoc(&[T::Star, T::Slash, T::Percent], Self::pow)
    }

    /// `a ** b`, right associative; its operands are unary expressions, so
    /// `-x ** 2.0` is `(-x) ** 2.0` (LANGUAGE.md §5).
    fn pow(&mut self) -> PResult<Expr> {
        let base = self.neg()?;
        if self.at(T::StarStar) {
            let t = self.bump();
            self.operand_check(&t)?;
            let rhs = self.nested(|p| p.pow())?;
            let span = base.span.start..rhs.span.end;
            return Ok(mk(ExprKind::Bin(BinOp::Pow, Box::new(base), Box::new(rhs)), span));
        }
        Ok(base)
    }

    fn neg(&mut self) -> PResult<Expr> {
        let op = match self.peek() {
            T::Minus => UnOp::Neg,
            T::Bang => UnOp::Not,
            _ => return self.app(),
        };
        let t = self.bump();
        self.operand_check(&t)?;
        // The most negative integers are written as the negation of a
        // literal one past the largest: `-9223372036854775808`, `-2147483648i32`.
        if op == UnOp::Neg && self.at(T::Number) && !starts_arg(self.peek_at(1)) && !matches!(self.peek_at(1), T::Dot) {
            let suffix = match self.slice(&self.tok().span) {
                "9223372036854775808" => Some(None),
                "9223372036854775808i64" => Some(Some(IntSuffix::I64)),
                "2147483648i32" => Some(Some(IntSuffix::I32)),
                _ => None,
            };
            if let Some(suffix) = suffix {
                let lit = self.bump();
                let v = if suffix == Some(IntSuffix::I32) { i32::MIN as i64 } else { i64::MIN };
                return Ok(mk(ExprKind::Int(v, suffix), t.span.start..lit.span.end));
            }
        }
        let inner = self.nested(|p| p.neg())?;
        let span = t.span.start..inner.span.end;
        Ok(mk(ExprKind::Un(op, Box::new(inner)), span))
    }

    fn app(&mut self) -> PResult<Expr> {
        if matches!(self.peek(), T::Let | T::If | T::For | T::Loop | T::Backslash) {
            return self.block();
        }
        let mut head = self.postfix_atom()?;
        if matches!(&head.kind, ExprKind::Var(v) if v == "trace") && self.at(T::Str) {
            head = self.trace(head.span.start)?;
        } else if matches!(&head.kind, ExprKind::Var(v) if v == "assert") && self.at(T::Str) {
            head = self.assert(head.span.start)?;
        }
        let mut args = vec![];
        while starts_arg(self.peek()) {
            if self.at(T::Backslash) {
                // A lambda argument extends as far right as possible.
                args.push(self.block()?);
                break;
            }
            args.push(self.postfix_atom()?);
        }
        if args.is_empty() {
            return Ok(head);
        }
        let span = head.span.start..args.last().map_or(head.span.end, |a| a.span.end);
        Ok(mk(ExprKind::App(Box::new(head), args), span))
    }

    /// A string literal's text.
    fn string(&mut self) -> String {
        let t = self.bump();
        let quoted = self.slice(&t.span);
        quoted[1..quoted.len() - 1].replace("\\\"", "\"").replace("\\\\", "\\")
    }

    /// One argument of `trace` or `assert`.
    fn form_arg(&mut self, form: &str) -> PResult<Expr> {
        if !starts_arg(self.peek()) {
            return self.error_expected_hint(
                format!("expected an argument of `{form}`"),
                Some(format!("write `{form} \"…\" …`; parenthesise an argument unless it is a name or a literal")),
            );
        }
        if self.at(T::Backslash) { self.block() } else { self.postfix_atom() }
    }

    /// `assert "message" cond e`, after `assert`.
    fn assert(&mut self, start: usize) -> PResult<Expr> {
        let msg = self.string();
        let cond = self.form_arg("assert")?;
        let e = self.form_arg("assert")?;
        let span = start..e.span.end;
        Ok(mk(ExprKind::Assert(msg, Box::new(cond), Box::new(e)), span))
    }

    /// `trace "label" e`, after `trace`: the label, then one argument.
    fn trace(&mut self, start: usize) -> PResult<Expr> {
        let label = self.string();
        if !starts_arg(self.peek()) {
            return self.error_expected_hint(
                "expected the value to trace after the label".to_string(),
                Some("write `trace \"label\" e`; parenthesise `e` unless it is a name or a literal".to_string()),
            );
        }
        let e = if self.at(T::Backslash) { self.block()? } else { self.postfix_atom()? };
        let span = start..e.span.end;
        Ok(mk(ExprKind::Trace(label, Box::new(e)), span))
    }

    fn postfix_atom(&mut self) -> PResult<Expr> {
        let mut e = self.atom()?;
        loop {
            if self.at(T::LBracket) && self.tok().span.start == self.prev_end() {
                e = self.index(e)?;
            } else if self.at(T::Dot) && self.peek_at(1) == T::Number {
                self.bump();
                let num = self.bump();
                let text = self.slice(&num.span);
                let mut fields = vec![];
                let mut offset = num.span.start;
                let mut ok = !text.is_empty();
                for part in text.split('.') {
                    match part.parse::<usize>() {
                        Ok(n) if part.bytes().all(|b| b.is_ascii_digit()) => {
                            fields.push((n, offset..offset + part.len()));
                        }
                        _ => ok = false,
                    }
                    offset += part.len() + 1;
                }
                if !ok || fields.len() > 2 {
                    self.diags.push(
                        Diagnostic::new("expected a field number after `.`", num.span.clone())
                            .label("not a field number")
                            .hint("tuple fields are numbered from 0: `t.0`, `t.1`"),
                    );
                    return Err(());
                }
                for (n, fspan) in fields {
                    let span = e.span.start..fspan.end;
                    e = mk(ExprKind::Proj(Box::new(e), n, fspan), span);
                }
            } else {
                return Ok(e);
            }
        }
    }

    fn index(&mut self, e: Expr) -> PResult<Expr> {
        let lb = self.bump();
        if self.at(T::RBracket) {
            return self.error_expected_hint(
                "expected an index inside `[...]`".to_string(),
                Some("index with `a[i]`, `a[i, j]` or slice with `a[lo:hi]`".to_string()),
            );
        }
        let mut args = vec![];
        loop {
            let what = if args.is_empty() { "`[`" } else { "`,`" };
            let i = self.expr_after(what)?;
            if self.eat(T::Colon).is_some() {
                let hi = self.expr_after("`:`")?;
                args.push(IndexArg::Slice(Box::new(i), Box::new(hi)));
            } else {
                args.push(IndexArg::Single(i));
            }
            if self.eat(T::Comma).is_none() {
                break;
            }
        }
        if !self.at(T::RBracket) {
            let d = Diagnostic::new("expected `]` after the index", self.culprit()).label(self.found()).note(lb.span, "index opened here");
            let d = if self.at(T::Assign) { d.hint("to compare two values use `==`") } else { d };
            self.diags.push(d);
            return Err(());
        }
        let rb = self.bump();
        let span = e.span.start..rb.span.end;
        Ok(mk(ExprKind::Index(Box::new(e), args), span))
    }

    fn atom(&mut self) -> PResult<Expr> {
        match self.peek() {
            T::Ident => {
                let t = self.bump();
                Ok(mk(ExprKind::Var(self.slice(&t.span).to_string()), t.span))
            }
            T::Number => {
                let t = self.bump();
                let lit = match decode_number(self.slice(&t.span), t.span.clone()) {
                    Ok(l) => l,
                    Err(b) => {
                        let (l, d) = *b;
                        self.diags.push(d);
                        l
                    }
                };
                let kind = match lit {
                    NumLit::Int(v, s) => ExprKind::Int(v, s),
                    NumLit::Float(v, s) => ExprKind::Float(v, s),
                };
                Ok(mk(kind, t.span))
            }
            T::True | T::False => {
                let t = self.bump();
                Ok(mk(ExprKind::Bool(t.kind == T::True), t.span))
            }
            T::LParen => self.paren(),
            T::LBracket => self.array(),
            T::Let | T::If | T::For | T::Loop | T::Backslash => self.block(),
            T::Str => {
                let t = self.bump();
                self.diags.push(
                    Diagnostic::new("a string can only be the label of `trace` or the message of `assert`", t.span)
                        .label("a string here")
                        .hint("arden has no string values; `trace \"label\" e` prints `e` with its label, `assert \"message\" cond e` checks `cond`"),
                );
                Err(())
            }
            _ => self.error_expected("expected an expression".to_string()),
        }
    }

    fn paren(&mut self) -> PResult<Expr> {
        let lp = self.bump();
        if let Some(rp) = self.eat(T::RParen) {
            return Ok(mk(ExprKind::Tuple(vec![]), lp.span.start..rp.span.end));
        }
        if let Some(op) = binop_of(self.peek())
            && self.peek_at(1) == T::RParen
        {
            self.bump();
            let rp = self.bump();
            return Ok(mk(ExprKind::OpSection(op), lp.span.start..rp.span.end));
        }
        let first = self.expr_after("`(`")?;
        let mut elems = vec![first];
        while self.eat(T::Comma).is_some() {
            elems.push(self.expr_after("`,`")?);
        }
        if !self.at(T::RParen) {
            let msg = if elems.len() > 1 { "expected `)` or `,` in the tuple" } else { "expected `)`" };
            let mut d = Diagnostic::new(msg, self.culprit()).label(self.found()).note(lp.span.clone(), "unclosed `(`");
            if self.at(T::Assign) {
                d = d.hint("to compare two values use `==`");
            }
            self.diags.push(d);
            return Err(());
        }
        let rp = self.bump();
        let span = lp.span.start..rp.span.end;
        if elems.len() == 1 {
            let mut e = elems.pop().expect("one element");
            e.span = span;
            Ok(e)
        } else {
            Ok(mk(ExprKind::Tuple(elems), span))
        }
    }

    fn array(&mut self) -> PResult<Expr> {
        let lb = self.bump();
        if let Some(rb) = self.eat(T::RBracket) {
            let span = lb.span.start..rb.span.end;
            self.diags.push(
                Diagnostic::new("empty array literal; use `replicate 0 x`", span.clone())
                    .label("empty array")
                    .hint("the element type of `[]` is unknown; write `replicate 0 0.0` for an empty `[0]f64`"),
            );
            return Ok(mk(ExprKind::Array(vec![]), span));
        }
        let mut elems = vec![self.expr_after("`[`")?];
        while self.eat(T::Comma).is_some() {
            elems.push(self.expr_after("`,`")?);
        }
        if !self.at(T::RBracket) {
            let d = Diagnostic::new("expected `]` or `,` in the array literal", self.culprit()).label(self.found()).note(lb.span, "array starts here");
            self.diags.push(d);
            return Err(());
        }
        let rb = self.bump();
        Ok(mk(ExprKind::Array(elems), lb.span.start..rb.span.end))
    }

    /// `let`, `if`, `\`, `for`, `loop`: they extend as far right as possible.
    fn block(&mut self) -> PResult<Expr> {
        match self.peek() {
            T::Let => self.let_chain(),
            T::If => self.if_expr(),
            T::For => self.for_expr(),
            T::Loop => self.loop_expr(),
            _ => self.lambda(),
        }
    }

    fn lambda(&mut self) -> PResult<Expr> {
        let bs = self.bump();
        let mut params = vec![];
        while matches!(self.peek(), T::Ident | T::LParen) {
            params.push(self.param()?);
        }
        if params.is_empty() {
            return self
                .error_expected_hint("expected a parameter after `\\`".to_string(), Some("a lambda reads `\\x y -> e` or `\\(x: f64) -> e`".to_string()));
        }
        if !self.at(T::Arrow) {
            let hint =
                if self.at(T::Dot) { "a lambda reads `\\x -> e` (the `.` form is for `for i. e`)" } else { "a lambda reads `\\x y -> e` or `\\(x: f64) -> e`" };
            return self.error_expected_hint("expected `->` after the lambda parameters".to_string(), Some(hint.to_string()));
        }
        self.bump();
        let body = self.expr_after("`->`")?;
        let span = bs.span.start..body.span.end;
        Ok(mk(ExprKind::Lambda(params, Box::new(body)), span))
    }

    fn let_chain(&mut self) -> PResult<Expr> {
        let mut binds: Vec<(usize, Pat, Option<TypeExpr>, Expr)> = vec![];
        let body = loop {
            let kw = self.bump();
            let pat = self.pat()?;
            let (ty, value) = match &pat {
                Pat::Var(name) if matches!(self.peek(), T::Ident | T::LParen) => {
                    // `let f x (y: f64) = e1` is `let f = \x (y: f64) -> e1`.
                    let mut params = vec![];
                    while matches!(self.peek(), T::Ident | T::LParen) {
                        params.push(self.param()?);
                    }
                    if !self.at(T::Assign) {
                        let hint = if self.at(T::Colon) {
                            "a local function cannot have a result type annotation; annotate its parameters instead"
                        } else {
                            "a local function reads `let f x y = e1 in e2`"
                        };
                        return self.error_expected_hint(format!("expected `=` after the parameters of `{}`", name.name), Some(hint.to_string()));
                    }
                    self.bump();
                    let e1 = self.expr_after("`=`")?;
                    let span = params[0].span.start..e1.span.end;
                    (None, mk(ExprKind::Lambda(params, Box::new(e1)), span))
                }
                _ => {
                    let ty = if self.eat(T::Colon).is_some() { Some(self.ty()?) } else { None };
                    if !self.at(T::Assign) {
                        return self
                            .error_expected_hint("expected `=` in the `let` binding".to_string(), Some("a binding reads `let x = e1 in e2`".to_string()));
                    }
                    self.bump();
                    (ty, self.expr_after("`=`")?)
                }
            };
            binds.push((kw.span.start, pat, ty, value));
            if self.eat(T::In).is_some() {
                if self.at(T::Let) {
                    continue;
                }
                break self.expr_after("`in`")?;
            } else if self.at(T::Let) {
                continue;
            } else {
                let hint = match self.peek() {
                    T::Assign => "to compare two values use `==`".to_string(),
                    _ => "write `let x = e1 in e2`; `in` may only be left out when another `let` follows".to_string(),
                };
                return self.error_expected_hint("expected `in` after the `let` binding".to_string(), Some(hint));
            }
        };
        let mut e = body;
        while let Some((start, pat, ty, value)) = binds.pop() {
            let span = start..e.span.end;
            e = mk(ExprKind::Let(pat, ty, Box::new(value), Box::new(e)), span);
        }
        Ok(e)
    }

    fn if_expr(&mut self) -> PResult<Expr> {
        let kw = self.bump();
        let c = self.expr_after("`if`")?;
        self.expect(T::Then, "expected `then` after the condition")?;
        let a = self.expr_after("`then`")?;
        self.expect_hint(T::Else, "expected `else` after the `then` branch", "every `if` needs an `else` branch: `if c then a else b`")?;
        let b = self.expr_after("`else`")?;
        let span = kw.span.start..b.span.end;
        Ok(mk(ExprKind::If(Box::new(c), Box::new(a), Box::new(b)), span))
    }

    fn for_expr(&mut self) -> PResult<Expr> {
        let kw = self.bump();
        let mut idxs = vec![];
        loop {
            match self.peek() {
                T::Ident => {
                    let name = self.ident("expected an index variable")?;
                    idxs.push(ForIndex { name, bound: None });
                }
                T::LParen => {
                    self.bump();
                    let name = self.ident("expected an index variable after `(`")?;
                    self.expect_hint(T::Lt, "expected `<` after the index variable", "a bounded index reads `(i < n)`")?;
                    let bound = self.expr_after("`<`")?;
                    self.expect(T::RParen, "expected `)` after the bound")?;
                    idxs.push(ForIndex { name, bound: Some(bound) });
                }
                _ => break,
            }
        }
        if idxs.is_empty() {
            return self.error_expected_hint(
                "expected an index variable after `for`".to_string(),
                Some("a comprehension reads `for i. e` or `for (i < n). e`".to_string()),
            );
        }
        if !self.at(T::Dot) {
            let hint = if self.at(T::Lt) {
                "put a bound in parentheses: `for (i < n). e`"
            } else {
                "a comprehension reads `for i. e`, `for i j. e` or `for (i < n). e`"
            };
            return self.error_expected_hint("expected `.` after the `for` indices".to_string(), Some(hint.to_string()));
        }
        self.bump();
        let body = self.expr_after("`.`")?;
        let span = kw.span.start..body.span.end;
        Ok(mk(ExprKind::For(idxs, Box::new(body)), span))
    }

    fn loop_expr(&mut self) -> PResult<Expr> {
        let kw = self.bump();
        let pat = self.pat()?;
        self.expect_hint(T::Assign, "expected `=` after the loop variable", "a loop reads `loop acc = init for i < n do body`")?;
        let init = self.expr_after("`=`")?;
        let kind = match self.peek() {
            T::For => {
                self.bump();
                let i = self.ident("expected the loop counter after `for`")?;
                self.expect_hint(T::Lt, "expected `<` after the loop counter", "write `for i < n do body`")?;
                let n = self.expr_after("`<`")?;
                LoopKind::For(i, Box::new(n))
            }
            T::While => {
                self.bump();
                let c = self.expr_after("`while`")?;
                LoopKind::While(Box::new(c))
            }
            _ => {
                return self.error_expected_hint(
                    "expected `for` or `while` after the initial value of the loop".to_string(),
                    Some("a loop reads `loop acc = init for i < n do body` or `loop acc = init while cond do body`".to_string()),
                );
            }
        };
        self.expect_hint(T::Do, "expected `do` before the loop body", "a loop reads `loop acc = init for i < n do body`")?;
        let body = self.expr_after("`do`")?;
        let span = kw.span.start..body.span.end;
        Ok(mk(ExprKind::Loop { pat, init: Box::new(init), kind, body: Box::new(body) }, span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // ----- compact printers ------------------------------------------------

    fn size(s: &SizeExpr) -> String {
        match s {
            SizeExpr::Var(id) => id.name.clone(),
            SizeExpr::Lit(v, _) => v.to_string(),
            SizeExpr::Bin(op, a, b, _) => {
                let o = match op {
                    SizeOp::Add => "+",
                    SizeOp::Sub => "-",
                    SizeOp::Mul => "*",
                    SizeOp::Div => "/",
                };
                format!("({o} {} {})", size(a), size(b))
            }
        }
    }

    fn ty(t: &TypeExpr) -> String {
        match t {
            TypeExpr::Scalar(k, _) => format!("{k:?}").to_lowercase(),
            TypeExpr::Idx(n, _) => format!("idx {}", size(n)),
            TypeExpr::Array(n, e, _) => format!("[{}]{}", size(n), ty(e)),
            TypeExpr::Tuple(ts, _) => format!("({})", ts.iter().map(ty).collect::<Vec<_>>().join(", ")),
            TypeExpr::Fun(a, b, _) => format!("({} -> {})", ty(a), ty(b)),
        }
    }

    fn pat(p: &Pat) -> String {
        match p {
            Pat::Var(id) => id.name.clone(),
            Pat::Tuple(ps, _) => format!("({})", ps.iter().map(pat).collect::<Vec<_>>().join(", ")),
        }
    }

    fn param(p: &Param) -> String {
        match &p.ty {
            None => pat(&p.pat),
            Some(t) => format!("({}: {})", pat(&p.pat), ty(t)),
        }
    }

    fn sx(e: &Expr) -> String {
        use ExprKind::*;
        let list = |es: &[Expr]| es.iter().map(sx).collect::<Vec<_>>().join(" ");
        match &e.kind {
            Int(v, None) => v.to_string(),
            Int(v, Some(s)) => format!("{v}{}", format!("{s:?}").to_lowercase()),
            Float(v, None) => format!("{v:?}"),
            Float(v, Some(s)) => format!("{v:?}{}", format!("{s:?}").to_lowercase()),
            Bool(b) => b.to_string(),
            Var(x) => x.clone(),
            Tuple(es) => format!("(tuple {})", list(es)).replace("(tuple )", "(tuple)"),
            Array(es) => format!("[{}]", list(es)),
            Index(a, args) => {
                let args: Vec<String> = args
                    .iter()
                    .map(|a| match a {
                        IndexArg::Single(e) => sx(e),
                        IndexArg::Slice(lo, hi) => format!("(slice {} {})", sx(lo), sx(hi)),
                    })
                    .collect();
                format!("(idx {} {})", sx(a), args.join(" "))
            }
            Proj(t, n, _) => format!("(. {} {n})", sx(t)),
            App(f, args) => format!("(app {} {})", sx(f), list(args)),
            Bin(op, a, b) => format!("({} {} {})", op.symbol(), sx(a), sx(b)),
            Un(UnOp::Neg, a) => format!("(neg {})", sx(a)),
            Un(UnOp::Not, a) => format!("(not {})", sx(a)),
            OpSection(op) => format!("(op {})", op.symbol()),
            Let(p, t, e1, e2) => match t {
                None => format!("(let {} {} {})", pat(p), sx(e1), sx(e2)),
                Some(t) => format!("(let {}: {} {} {})", pat(p), ty(t), sx(e1), sx(e2)),
            },
            If(c, a, b) => format!("(if {} {} {})", sx(c), sx(a), sx(b)),
            Lambda(ps, b) => format!("(\\ {} {})", ps.iter().map(param).collect::<Vec<_>>().join(" "), sx(b)),
            For(is, b) => {
                let is: Vec<String> = is
                    .iter()
                    .map(|i| match &i.bound {
                        None => i.name.name.clone(),
                        Some(n) => format!("({} < {})", i.name.name, sx(n)),
                    })
                    .collect();
                format!("(for {} {})", is.join(" "), sx(b))
            }
            Loop { pat: p, init, kind, body } => {
                let k = match kind {
                    LoopKind::For(i, n) => format!("for {} {}", i.name, sx(n)),
                    LoopKind::While(c) => format!("while {}", sx(c)),
                };
                format!("(loop {} {} ({k}) {})", pat(p), sx(init), sx(body))
            }
            Coerce(e, t) => format!("(:> {} {})", sx(e), ty(t)),
            With(a, v) => format!("(with {} {})", sx(a), sx(v)),
            Trace(l, e) => format!("(trace {l:?} {})", sx(e)),
            Assert(m, c, e) => format!("(assert {m:?} {} {})", sx(c), sx(e)),
        }
    }

    fn ex(src: &str) -> String {
        let (e, d) = parse_expr(&Source::new("t", src));
        assert!(d.is_empty(), "unexpected diagnostics for {src:?}: {d:#?}");
        sx(&e.expect("expression"))
    }

    fn ex_raw(src: &str) -> (Option<Expr>, Vec<Diagnostic>) {
        parse_expr(&Source::new("t", src))
    }

    fn tyx(src: &str) -> String {
        let (t, d) = parse_type(&Source::new("t", src));
        assert!(d.is_empty(), "unexpected diagnostics for {src:?}: {d:#?}");
        ty(&t.expect("type"))
    }

    fn prog(src: &str) -> (Program, Vec<Diagnostic>) {
        parse(&Source::new("t.ard", src))
    }

    fn prog_ok(src: &str) -> Program {
        let (p, d) = prog(src);
        assert!(d.is_empty(), "unexpected diagnostics: {d:#?}");
        p
    }

    // ----- expressions -----------------------------------------------------

    #[test]
    fn literals() {
        assert_eq!(ex("3"), "3");
        assert_eq!(ex("3i32"), "3i32");
        assert_eq!(ex("3i64"), "3i64");
        assert_eq!(ex("1.0"), "1.0");
        assert_eq!(ex("2e-3"), "0.002");
        assert_eq!(ex("1.5f32"), "1.5f32");
        assert_eq!(ex("1f64"), "1.0f64");
        assert_eq!(ex("true && false"), "(&& true false)");
        let (_, d) = ex_raw("99999999999999999999 + 1");
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("too large"), "{:?}", d[0]);
        assert_eq!(d[0].span, 0..20);
        let (_, d) = ex_raw("3abc");
        assert!(d[0].message.contains("suffix"));
    }

    #[test]
    fn precedence() {
        assert_eq!(ex("a + b * c - d"), "(- (+ a (* b c)) d)");
        assert_eq!(ex("a || b && c == d + 1"), "(|| a (&& b (== c (+ d 1))))");
        assert_eq!(ex("a && b || c && d"), "(|| (&& a b) (&& c d))");
        assert_eq!(ex("a - b - c"), "(- (- a b) c)");
        assert_eq!(ex("a % b / c * d"), "(* (/ (% a b) c) d)");
        assert_eq!(ex("a ** b ** c"), "(** a (** b c))");
        // LANGUAGE.md §5: unary minus binds tighter than `**`.
        assert_eq!(ex("-2 ** 2"), "(** (neg 2) 2)");
        assert_eq!(ex("-x ** 2.0"), "(** (neg x) 2.0)");
        assert_eq!(ex("!a ** b"), "(** (not a) b)");
        assert_eq!(ex("2 ** -1"), "(** 2 (neg 1))");
        assert_eq!(ex("2 ** -x ** 2"), "(** 2 (** (neg x) 2))");
        assert_eq!(ex("a * -b ** c"), "(* a (** (neg b) c))");
        assert_eq!(ex("-f x ** 2"), "(** (neg (app f x)) 2)");
        assert_eq!(ex("a - -b ** 2 * c"), "(- a (* (** (neg b) 2) c))");
        assert_eq!(ex("-f x"), "(neg (app f x))");
        assert_eq!(ex("!a && b"), "(&& (not a) b)");
        assert_eq!(ex("a * -b"), "(* a (neg b))");
        assert_eq!(ex("- - a"), "(neg (neg a))");
        assert_eq!(ex("f x * g y z"), "(* (app f x) (app g y z))");
        assert_eq!(ex("f x ** 2"), "(** (app f x) 2)");
        assert_eq!(ex("(a <= b) != (c > d)"), "(!= (<= a b) (> c d))");
        assert_eq!(ex("f64 n / 2.0"), "(/ (app f64 n) 2.0)");
        assert_eq!(ex("(a + b) * c"), "(* (+ a b) c)");
    }

    #[test]
    fn chained_comparison_is_an_error() {
        let (_, d) = ex_raw("a < b < c");
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("cannot be chained"));
        assert_eq!(d[0].span, 6..7);
        assert!(d[0].hint.as_ref().unwrap().contains("&&"));
        let (_, d) = ex_raw("a == b == c");
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn pipes() {
        assert_eq!(ex("x |> f"), "(app f x)");
        assert_eq!(ex("x |> f a"), "(app (app f a) x)");
        assert_eq!(ex("xs |> map sq |> sum"), "(app sum (app (app map sq) xs))");
        assert_eq!(ex("a + b |> f"), "(app f (+ a b))");
        assert_eq!(ex("a || b |> f"), "(app f (|| a b))");
        let (_, d) = ex_raw("x |>");
        assert_eq!(d[0].message, "expected an expression after `|>`");
    }

    #[test]
    fn application_spans() {
        let (e, _) = ex_raw("f x (g y)");
        let e = e.unwrap();
        assert_eq!(e.span, 0..9);
        if let ExprKind::App(f, args) = &e.kind {
            assert_eq!(f.span, 0..1);
            assert_eq!(args[1].span, 4..9);
        } else {
            panic!()
        }
        let (e, _) = ex_raw("(f x) y");
        assert_eq!(e.unwrap().span, 0..7);
        let (e, _) = ex_raw("a + b*c");
        assert_eq!(e.unwrap().span, 0..7);
    }

    #[test]
    fn indexing_vs_array_argument() {
        assert_eq!(ex("a[i]"), "(idx a i)");
        assert_eq!(ex("a [i]"), "(app a [i])");
        assert_eq!(ex("f [1, 2]"), "(app f [1 2])");
        assert_eq!(ex("[1, 2, 3]"), "[1 2 3]");
        assert_eq!(ex("a[i, j]"), "(idx a i j)");
        assert_eq!(ex("a[i][j]"), "(idx (idx a i) j)");
        assert_eq!(ex("a[lo:hi]"), "(idx a (slice lo hi))");
        assert_eq!(ex("a[i+1:n-1]"), "(idx a (slice (+ i 1) (- n 1)))");
        assert_eq!(ex("f x[i] y"), "(app f (idx x i) y)");
        assert_eq!(ex("(f x)[0]"), "(idx (app f x) 0)");
        assert_eq!(ex("a[i] * b[i]"), "(* (idx a i) (idx b i))");
        assert_eq!(ex("f [[1, 2], [3, 4]][0]"), "(app f (idx [[1 2] [3 4]] 0))");
        let (_, d) = ex_raw("a[]");
        assert!(d[0].message.contains("expected an index"));
        let (_, d) = ex_raw("a[i");
        assert_eq!(d[0].message, "expected `]` after the index");
    }

    #[test]
    fn empty_array_literal() {
        let (e, d) = ex_raw("f []");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].message, "empty array literal; use `replicate 0 x`");
        assert_eq!(d[0].span, 2..4);
        assert!(e.is_some());
    }

    #[test]
    fn projections() {
        assert_eq!(ex("t.0"), "(. t 0)");
        assert_eq!(ex("t.1"), "(. t 1)");
        assert_eq!(ex("t.0.1"), "(. (. t 0) 1)");
        assert_eq!(ex("t.1.0.2"), "(. (. (. t 1) 0) 2)");
        assert_eq!(ex("f t.0 u.1"), "(app f (. t 0) (. u 1))");
        assert_eq!(ex("a[i].0"), "(. (idx a i) 0)");
        assert_eq!(ex("(f x).1[j]"), "(idx (. (app f x) 1) j)");
        assert_eq!(ex("-t.0"), "(neg (. t 0))");
        let (e, _) = ex_raw("t.0.12");
        let e = e.unwrap();
        assert_eq!(e.span, 0..6);
        match &e.kind {
            ExprKind::Proj(inner, 12, s) => {
                assert_eq!(s, &(4..6));
                match &inner.kind {
                    ExprKind::Proj(_, 0, s) => assert_eq!(s, &(2..3)),
                    k => panic!("{k:?}"),
                }
            }
            k => panic!("{k:?}"),
        }
        let (_, d) = ex_raw("t.1e5");
        assert!(d[0].message.contains("field number"));
    }

    #[test]
    fn operator_sections() {
        assert_eq!(ex("(+)"), "(op +)");
        assert_eq!(ex("(-)"), "(op -)");
        assert_eq!(ex("(*)"), "(op *)");
        assert_eq!(ex("(/)"), "(op /)");
        assert_eq!(ex("(%)"), "(op %)");
        assert_eq!(ex("(**)"), "(op **)");
        assert_eq!(ex("(==)"), "(op ==)");
        assert_eq!(ex("(<)"), "(op <)");
        assert_eq!(ex("(<=)"), "(op <=)");
        assert_eq!(ex("(&&)"), "(op &&)");
        assert_eq!(ex("reduce (+) 0 a"), "(app reduce (op +) 0 a)");
        assert_eq!(ex("(- x)"), "(neg x)");
        assert_eq!(ex("(max)"), "max");
    }

    #[test]
    fn tuples() {
        assert_eq!(ex("()"), "(tuple)");
        assert_eq!(ex("(a, b)"), "(tuple a b)");
        assert_eq!(ex("(a, (b, c), f x)"), "(tuple a (tuple b c) (app f x))");
        assert_eq!(ex("(a)"), "a");
    }

    #[test]
    fn lambdas() {
        assert_eq!(ex("\\x y -> x + y"), "(\\ x y (+ x y))");
        assert_eq!(ex("\\(x: f64) (y: [n]f64) -> y"), "(\\ (x: f64) (y: [n]f64) y)");
        assert_eq!(ex("\\(a, b) -> a"), "(\\ (a, b) a)");
        assert_eq!(ex("\\((a, b): (f64, f64)) -> a"), "(\\ ((a, b): (f64, f64)) a)");
        assert_eq!(ex("map (\\x -> x + 1) a"), "(app map (\\ x (+ x 1)) a)");
        assert_eq!(ex("\\x -> x |> f"), "(\\ x (app f x))");
        assert_eq!(ex("f \\x -> x + 1"), "(app f (\\ x (+ x 1)))");
        assert_eq!(ex("grad (\\x -> f x 2.0) 3.0"), "(app grad (\\ x (app f x 2.0)) 3.0)");
        let (_, d) = ex_raw("\\x . x");
        assert_eq!(d[0].message, "expected `->` after the lambda parameters");
        let (_, d) = ex_raw("\\ -> x");
        assert!(d[0].message.contains("parameter"));
    }

    #[test]
    fn if_then_else() {
        assert_eq!(ex("if a then b else c + 1"), "(if a b (+ c 1))");
        assert_eq!(ex("if a < b then f x else -y"), "(if (< a b) (app f x) (neg y))");
        assert_eq!(ex("1 + if a then 2 else 3"), "(+ 1 (if a 2 3))");
        let (_, d) = ex_raw("if x = 1 then a else b");
        assert_eq!(d[0].message, "expected `then` after the condition");
        assert_eq!(d[0].span, 5..6);
        assert!(d[0].hint.as_ref().unwrap().contains("=="));
        let (_, d) = ex_raw("if a then b");
        assert_eq!(d[0].message, "expected `else` after the `then` branch");
        assert!(d[0].hint.is_some());
    }

    #[test]
    fn lets() {
        assert_eq!(ex("let x = 1 in x + 2"), "(let x 1 (+ x 2))");
        assert_eq!(ex("let x: f64 = 1 in x"), "(let x: f64 1 x)");
        assert_eq!(ex("let x = 1 let y = 2 in x + y"), "(let x 1 (let y 2 (+ x y)))");
        assert_eq!(ex("let x = 1 in let y = 2 in y"), "(let x 1 (let y 2 y))");
        assert_eq!(ex("let (a, (b, c)) = t in a"), "(let (a, (b, c)) t a)");
        assert_eq!(ex("let () = u in 1"), "(let () u 1)");
        assert_eq!(ex("let x = 1 in x |> f"), "(let x 1 (app f x))");
        let (e, _) = ex_raw("let x = 1 let y = 2 in y");
        let e = e.unwrap();
        assert_eq!(e.span, 0..24);
        if let ExprKind::Let(_, _, _, body) = &e.kind {
            assert_eq!(body.span, 10..24);
        } else {
            panic!()
        }
    }

    #[test]
    fn let_function_sugar() {
        assert_eq!(ex("let f x (y: f64) = x + y in f 1 2.0"), "(let f (\\ x (y: f64) (+ x y)) (app f 1 2.0))");
        assert_eq!(ex("let g (a, b) = a in g p"), "(let g (\\ (a, b) a) (app g p))");
    }

    #[test]
    fn missing_in() {
        let (_, d) = ex_raw("let x = 1 x + 2 )");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].message, "expected `in` after the `let` binding");
        assert_eq!(d[0].span, 16..17);
        assert!(d[0].hint.as_ref().unwrap().contains("in"));
        let (_, d) = ex_raw("let x = 1");
        assert_eq!(d[0].message, "expected `in` after the `let` binding");
        assert_eq!(d[0].span, 9..9);
    }

    #[test]
    fn for_comprehensions() {
        assert_eq!(ex("for i. a[i]"), "(for i (idx a i))");
        assert_eq!(ex("for i j. a[i, j] + 1"), "(for i j (+ (idx a i j) 1))");
        assert_eq!(ex("for (i < n). i"), "(for (i < n) i)");
        assert_eq!(ex("for (i < n) (j < m + 1). 0.5"), "(for (i < n) (j < (+ m 1)) 0.5)");
        assert_eq!(ex("for (i < n) j. x"), "(for (i < n) j x)");
        assert_eq!(ex("sum (for p. a[i, p] * b[p, j])"), "(app sum (for p (* (idx a i p) (idx b p j))))");
        let (_, d) = ex_raw("for i < n. e");
        assert_eq!(d[0].message, "expected `.` after the `for` indices");
        assert!(d[0].hint.as_ref().unwrap().contains("(i < n)"));
    }

    #[test]
    fn loops() {
        assert_eq!(ex("loop acc = 0 for i < n do acc + i"), "(loop acc 0 (for i n) (+ acc i))");
        assert_eq!(ex("loop (a, b) = (0, 1.0) for i < n do (a + i, b * 2.0)"), "(loop (a, b) (tuple 0 1.0) (for i n) (tuple (+ a i) (* b 2.0)))");
        assert_eq!(ex("loop x = 1.0 while x < 10.0 do x * 2.0"), "(loop x 1.0 (while (< x 10.0)) (* x 2.0))");
        assert_eq!(ex("loop x = f y for i < length a do g x"), "(loop x (app f y) (for i (app length a)) (app g x))");
        assert_eq!(ex("loop x = for i. a[i] for j < n do x"), "(loop x (for i (idx a i)) (for j n) x)");
        let (_, d) = ex_raw("loop x = 0 for i < n x");
        assert_eq!(d[0].message, "expected `do` before the loop body");
        let (_, d) = ex_raw("loop x = 0 do x");
        assert!(d[0].message.contains("`for` or `while`"));
    }

    #[test]
    fn coercion() {
        assert_eq!(ex("x :> [m]f64"), "(:> x [m]f64)");
        assert_eq!(ex("a + b :> [n]f64 |> f"), "(app f (:> (+ a b) [n]f64))");
        assert_eq!(ex("concat a b :> [n + m]f64"), "(:> (app concat a b) [(+ n m)]f64)");
        let (_, d) = ex_raw("x :> 3");
        assert_eq!(d[0].message, "expected a type after `:>`");
    }

    // ----- types -----------------------------------------------------------

    #[test]
    fn types() {
        assert_eq!(tyx("f64"), "f64");
        assert_eq!(tyx("bool"), "bool");
        assert_eq!(tyx("[n]f64"), "[n]f64");
        assert_eq!(tyx("[n][m]i32"), "[n][m]i32");
        assert_eq!(tyx("[d*(d-1)/2]f64"), "[(/ (* d (- d 1)) 2)]f64");
        assert_eq!(tyx("[n+m-1]f32"), "[(- (+ n m) 1)]f32");
        assert_eq!(tyx("[3]i64"), "[3]i64");
        assert_eq!(tyx("idx n"), "idx n");
        assert_eq!(tyx("idx (n+1)"), "idx (+ n 1)");
        assert_eq!(tyx("idx 3"), "idx 3");
        assert_eq!(tyx("(f64, [n]i32)"), "(f64, [n]i32)");
        assert_eq!(tyx("()"), "()");
        assert_eq!(tyx("(f64)"), "f64");
        assert_eq!(tyx("f64 -> f64 -> f64"), "(f64 -> (f64 -> f64))");
        assert_eq!(tyx("([n]f64 -> f64) -> [n]f64"), "(([n]f64 -> f64) -> [n]f64)");
        assert_eq!(tyx("[n](f64, bool)"), "[n](f64, bool)");
        let (_, d) = parse_type(&Source::new("t", "float"));
        assert_eq!(d[0].message, "unknown type `float`");
        assert!(d[0].hint.as_ref().unwrap().contains("f64"));
        let (_, d) = parse_type(&Source::new("t", "[]f64"));
        assert!(d[0].message.contains("size"));
        let (_, d) = parse_type(&Source::new("t", "[1.5]f64"));
        assert!(d[0].message.contains("plain integer"));
    }

    // ----- declarations ----------------------------------------------------

    #[test]
    fn declarations() {
        let p = prog_ok(
            "def dot [n] (a: [n]f64) (b: [n]f64) : f64 =\n  sum (for i. a[i] * b[i])\n\
             entry lse_grad [n][m] (x: [n][m]f64) : [n]f64 = grad logsumexp x\n\
             def c : f64 = 3.0\n\
             def f x ((a, b): (f64, f64)) ((c, d)) (e) () = x\n",
        );
        assert_eq!(p.decls.len(), 4);
        let d = &p.decls[0];
        assert!(!d.is_entry);
        assert_eq!(d.name.name, "dot");
        assert_eq!(d.name.span, 4..7);
        assert_eq!(d.size_params.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["n"]);
        assert_eq!(d.params.iter().map(param).collect::<Vec<_>>(), ["(a: [n]f64)", "(b: [n]f64)"]);
        assert_eq!(d.params[0].span, 12..23);
        assert_eq!(ty(d.ret.as_ref().unwrap()), "f64");
        assert_eq!(sx(&d.body), "(app sum (for i (* (idx a i) (idx b i))))");
        assert_eq!(d.span.start, 0);
        assert_eq!(d.span.end, d.body.span.end);
        let e = &p.decls[1];
        assert!(e.is_entry);
        assert_eq!(e.size_params.len(), 2);
        let c = &p.decls[2];
        assert!(c.params.is_empty());
        assert_eq!(sx(&c.body), "3.0");
        let f = &p.decls[3];
        assert_eq!(f.params.iter().map(param).collect::<Vec<_>>(), ["x", "((a, b): (f64, f64))", "(c, d)", "e", "()"]);
        assert!(f.ret.is_none());
    }

    #[test]
    fn language_reference_example() {
        let src = "-- dot product: sizes are part of the types
def dot [n] (a: [n]f64) (b: [n]f64) : f64 =
  sum (for i. a[i] * b[i])

def matmul [n][k][m] (a: [n][k]f64) (b: [k][m]f64) : [n][m]f64 =
  for i j. sum (for p. a[i, p] * b[p, j])

def logsumexp [n] (x: [n]f64) : f64 =
  let mx = maximum x
  in mx + log (sum (for i. exp (x[i] - mx)))

entry lse [n] (x: [n]f64) : f64 = logsumexp x
entry lse_grad [n] (x: [n]f64) : [n]f64 = grad logsumexp x
def mean [n] (x: [n]f64) = sum x / f64 n
def tri [d] (x: [d*(d-1)/2]f64) : [d*(d-1)/2]f64 = x
def g (p: (f64, [n]f64)) (i: idx n) = p.1[i] + p.0
def h xs = xs |> map sq |> sum
";
        let p = prog_ok(src);
        assert_eq!(p.decls.len(), 9);
        assert_eq!(sx(&p.decls[2].body), "(let mx (app maximum x) (+ mx (app log (app sum (for i (app exp (- (idx x i) mx)))))))");
        assert_eq!(sx(&p.decls[8].body), "(app sum (app (app map sq) xs))");
    }

    #[test]
    fn prelude_parses() {
        let p = prog_ok(include_str!("../lower/prelude.ard"));
        assert!(p.decls.len() >= 9);
    }

    #[test]
    fn top_level_let() {
        let (p, d) = prog("let c = 3.0\ndef f x = x\n");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].message, "`let` is not allowed at the top level");
        assert_eq!(d[0].span, 0..3);
        assert_eq!(d[0].hint.as_deref(), Some("write `def c : f64 = 3.0` for constants"));
        assert_eq!(p.decls.len(), 1);
        // After a complete declaration, too.
        let (p, d) = prog("def a = 1\nlet b = 2\ndef f x = x\n");
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("top level"));
        assert_eq!(p.decls.len(), 2);
    }

    #[test]
    fn error_at_end_of_input() {
        let src = "def f (x: f64) : f64 = x +";
        let (p, d) = prog(src);
        assert!(p.decls.is_empty());
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].message, "expected an expression after `+`");
        assert_eq!(d[0].span, src.len()..src.len());
        assert_eq!(d[0].label, "found end of input");
        // Followed by another declaration: the caret stays after the `+`.
        let src = "def f (x: f64) : f64 = x +\n\ndef g = 1\n";
        let (p, d) = prog(src);
        assert_eq!(p.decls.len(), 1);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].span, 26..26);
    }

    #[test]
    fn missing_close_paren() {
        let (_, d) = prog("def f x = g (x + 1\ndef h = 2");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].message, "expected `)`");
        assert_eq!(d[0].notes[0].0, 12..13);
    }

    #[test]
    fn recovery_three_broken_defs() {
        let src = "\
def ok1 x = x + 1
def bad1 x = (x + 1
def ok2 (y: f64) : f64 = y * 2.0
def bad2 x = if x then 1
entry bad3 (x: [n]f64 : f64 = x
def ok3 = 3
";
        let (p, d) = prog(src);
        assert_eq!(d.len(), 3, "{d:#?}");
        assert_eq!(p.decls.iter().map(|d| d.name.name.as_str()).collect::<Vec<_>>(), ["ok1", "ok2", "ok3"]);
        assert_eq!(d[0].message, "expected `)`");
        assert_eq!(d[1].message, "expected `else` after the `then` branch");
        assert_eq!(d[2].message, "expected `)` after the parameter type");
        for x in &d {
            assert!(!x.label.is_empty());
        }
    }

    #[test]
    fn recovery_various() {
        let src = "\
def a x = x ) + 1
let b = 2
def c = [1, 2
def d = 1
) junk
let z = 1
def e (x f64) = x
def f : float = 1.0
def g = if x = 1 then 2 else 3
";
        let (p, d) = prog(src);
        let msgs: Vec<&str> = d.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(
            msgs,
            [
                "unexpected `)` after the body of `a`",
                // Recovery stops at a `let` that starts a line.
                "`let` is not allowed at the top level",
                "expected `]` or `,` in the array literal",
                "unexpected `)` after the body of `d`",
                "`let` is not allowed at the top level",
                "expected `:` or `)` after the parameter",
                "unknown type `float`",
                "expected `then` after the condition",
            ],
            "{d:#?}"
        );
        assert_eq!(p.decls.iter().map(|d| d.name.name.as_str()).collect::<Vec<_>>(), ["a", "d"]);
        assert!(d[7].hint.as_ref().unwrap().contains("=="));
    }

    #[test]
    fn show_rendering() {
        let src = "def f (x: f64) : f64 = x +\n\ndef g x = let y = 1 y + 1 )\ndef h = x $ 2\nlet c = 1\ndef k = if a = b then 1 else 2\n";
        let (_, d) = prog(src);
        let out = crate::diag::render(&Source::new("t.ard", src), &d);
        assert_eq!(d.len(), 5);
        assert_eq!(out.matches("hint:").count(), 5, "{out}");
        assert!(out.contains("t.ard:1:27"), "{out}");
    }

    #[test]
    fn decl_errors() {
        let (_, d) = prog("def = 3");
        assert_eq!(d[0].message, "expected a name after `def`");
        let (_, d) = prog("def f x [n] = 3");
        assert_eq!(d[0].message, "expected `=` before the body of `f`");
        assert!(d[0].hint.as_ref().unwrap().contains("size binders"));
        let (_, d) = prog("def f x =");
        assert_eq!(d[0].message, "expected an expression after `=`");
        let (_, d) = prog("3 + 4");
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("declaration"));
    }

    #[test]
    fn unknown_characters() {
        let (p, d) = prog("def f x = x $ 1\ndef g x = x ^ 2\n");
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].span, 12..13);
        assert!(d[0].message.contains("unknown character"));
        assert!(d[1].hint.as_ref().unwrap().contains("**"));
        assert_eq!(p.decls.len(), 2);
    }

    #[test]
    fn most_negative_integer_literals() {
        let int = |src: &str| match ex_raw(src) {
            (Some(Expr { kind: ExprKind::Int(v, s), .. }), d) if d.is_empty() => Some((v, s)),
            _ => None,
        };
        assert_eq!(int("-9223372036854775808"), Some((i64::MIN, None)));
        assert_eq!(int("-9223372036854775808i64"), Some((i64::MIN, Some(IntSuffix::I64))));
        assert_eq!(int("-2147483648i32"), Some((i32::MIN as i64, Some(IntSuffix::I32))));
        assert_eq!(ex("-9223372036854775808 + 1"), "(+ -9223372036854775808 1)");
        // Only right after a minus, and not as the head of an application.
        assert!(!ex_raw("9223372036854775808").1.is_empty());
        assert!(!ex_raw("- -9223372036854775809").1.is_empty());
        assert!(!ex_raw("-2147483649i32").1.is_empty());
        assert!(!ex_raw("-9223372036854775808 x").1.is_empty());
    }

    #[test]
    fn expression_depth_limit() {
        // A flat chain is as deep as it is long.
        let src = format!("def f = x{}\ndef g = 1", " + x".repeat(MAX_EXPR_DEPTH - 1));
        prog_ok(&src);
        let src = format!("def f = x{}\ndef g = 1", " + x".repeat(MAX_EXPR_DEPTH));
        let (p, d) = prog(&src);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].message.contains("the body of `f` is too deeply nested"), "{}", d[0].message);
        assert_eq!(d[0].span, 8..8);
        // The next declaration is still parsed.
        assert_eq!(p.decls.iter().map(|d| d.name.name.as_str()).collect::<Vec<_>>(), vec!["g"]);
    }

    #[test]
    fn size_expression_length_limit() {
        let ok = format!("def f (x: [{}]f64) = x", vec!["n"; MAX_SIZE_OPERATORS + 1].join("+"));
        prog_ok(&ok);
        let ok = format!("def f (x: [{}]f64) = x", vec!["n"; MAX_SIZE_OPERATORS + 1].join("*"));
        prog_ok(&ok);
        for op in ["+", "-", "*", "/"] {
            let bad = format!("def f (x: [{}]f64) = x", vec!["n"; MAX_SIZE_OPERATORS + 2].join(op));
            let (_, d) = prog(&bad);
            assert!(d.iter().any(|d| d.message == "size expression is too long"), "{op}: {d:?}");
        }
    }

    #[test]
    fn source_size_limit() {
        let big = format!("def f = 1\n{}", " ".repeat(MAX_SOURCE_BYTES));
        let (p, d) = parse(&Source::new("t", big));
        assert!(p.decls.is_empty());
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains(&format!("{} bytes (the limit is {MAX_SOURCE_BYTES} bytes", MAX_SOURCE_BYTES + 10)), "{}", d[0].message);
        let (p, d) = parse(&Source::new("t", format!("def f = 1{}", " ".repeat(MAX_SOURCE_BYTES - 9))));
        assert!(d.is_empty() && p.decls.len() == 1);
    }

    #[test]
    fn checkable_declarations() {
        let names = |src: &str| {
            let (p, d) = parse_checkable(&Source::new("t", src));
            (p.decls.iter().map(|d| d.name.name.clone()).collect::<Vec<_>>(), d.len())
        };
        // No errors: everything.
        assert_eq!(names("def a = 1\ndef b = a"), (vec!["a".to_string(), "b".to_string()], 0));
        // `b` did not parse; `c` uses it, `d` uses `c`; `e` is independent.
        let (kept, n) = names("def a = 1\ndef b = 1 +\ndef c = b\ndef d x = c + x\nentry e (x: f64) : f64 = x + a");
        assert_eq!((kept, n), (vec!["a".to_string(), "e".to_string()], 1));
        // A parameter or a local of the same name is not a use.
        let (kept, _) = names("def b = (\ndef c (b: f64) = b\ndef d = let b = 1 in b");
        assert_eq!(kept, vec!["c".to_string(), "d".to_string()]);
        // An error inside a parsed declaration (unknown character, chained
        // comparison, stray token after the body) leaves it out too.
        let (kept, n) = names("def a = 1 $ 2\ndef b = 1 < 2 < 3\ndef c = 1 )\ndef d = 4");
        assert_eq!((kept, n), (vec!["d".to_string()], 3));
        // A top-level `let x` was meant as a declaration of `x`.
        let (kept, _) = names("let k = 2.0\ndef a = k\ndef b = 1");
        assert_eq!(kept, vec!["b".to_string()]);
    }

    #[test]
    fn deep_nesting() {
        // Fine at moderate depth.
        let src = format!("def f = {}x{}", "(".repeat(200), ")".repeat(200));
        prog_ok(&src);
        let src = format!("def f = {}x", "- ".repeat(200));
        prog_ok(&src);
        // Too deep: a diagnostic, not a crash.
        for src in [
            format!("def f = {}x{}\ndef g = 1", "(".repeat(100_000), ")".repeat(100_000)),
            format!("def f = {}", "(".repeat(100_000)),
            format!("def f = {}x", "- ".repeat(100_000)),
            format!("def f = {}", "[".repeat(100_000)),
            format!("def f = {}x", "\\x -> ".repeat(100_000)),
            format!("def f = {}", "if a then ".repeat(100_000)),
            format!("def f = {}1", "x ** ".repeat(100_000)),
            format!("def f (x: {}f64) = x", "[n]".repeat(100_000)),
            format!("def f (x: {}f64) = x", "(".repeat(100_000)),
            format!("def f (x: [{}n]f64) = x", "(".repeat(100_000)),
            format!("def f ({}x) = x", "(".repeat(100_000)),
        ] {
            let (_, d) = prog(&src);
            assert!(d.iter().any(|d| d.message.contains("nested too deeply")), "{:?}", &d[..d.len().min(2)]);
        }
        // Long flat chains are not nesting.
        let src = format!("def f = x{}", " + x".repeat(5_000));
        prog_ok(&src);
        let src = format!("def f = {}x", "let a = 1 in ".repeat(5_000));
        prog_ok(&src);
    }

    /// A tiny deterministic PRNG (xorshift64*).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn no_panic_on_token_soup() {
        const VOCAB: &[&str] = &[
            "def",
            "entry",
            "let",
            "in",
            "if",
            "then",
            "else",
            "for",
            "loop",
            "while",
            "do",
            "true",
            "false",
            "x",
            "f",
            "n",
            "idx",
            "f64",
            "i32",
            "bool",
            "0",
            "1",
            "2.5",
            "1e3",
            "3i32",
            "1.5f32",
            "99999999999999999999",
            "t.0.1",
            ".",
            ",",
            ":",
            ":>",
            "->",
            "\\",
            "(",
            ")",
            "[",
            "]",
            "=",
            "|>",
            "||",
            "&&",
            "==",
            "!=",
            "<",
            "<=",
            ">",
            ">=",
            "+",
            "-",
            "*",
            "/",
            "%",
            "**",
            "!",
            "$",
            "é",
            "--c\n",
            "\n",
            " ",
            "a[",
            "[n]",
            "(+)",
        ];
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for _ in 0..3000 {
            let len = rng.below(40);
            let mut s = String::new();
            if rng.below(2) == 0 {
                s.push_str("def f x = ");
            }
            for _ in 0..len {
                s.push_str(VOCAB[rng.below(VOCAB.len())]);
                if rng.below(3) != 0 {
                    s.push(' ');
                }
            }
            let (p, d) = prog(&s);
            for dg in &d {
                assert!(dg.span.start <= dg.span.end && dg.span.end <= s.len(), "{s:?}: {dg:?}");
                assert!(!dg.message.is_empty());
            }
            let _ = crate::diag::render(&Source::new("t", s.clone()), &d);
            let _ = p;
        }
    }

    #[test]
    fn no_panic_on_random_bytes() {
        let mut rng = Rng(0xdead_beef_cafe_f00d);
        for _ in 0..3000 {
            let len = rng.below(80);
            let bytes: Vec<u8> =
                (0..len).map(|_| if rng.below(2) == 0 { (rng.next() & 0xff) as u8 } else { b"def x=()[].:\\-> 1+\n"[rng.below(19)] }).collect();
            let s = String::from_utf8_lossy(&bytes).into_owned();
            let (_, d) = prog(&s);
            for dg in &d {
                assert!(dg.span.end <= s.len(), "{s:?}: {dg:?}");
            }
        }
    }

    #[test]
    fn no_panic_on_mutated_programs() {
        let base = include_str!("../lower/prelude.ard");
        let mut rng = Rng(42);
        for _ in 0..2000 {
            let mut b: Vec<u8> = base.as_bytes().to_vec();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(b.len());
                match rng.below(3) {
                    0 => {
                        b.remove(i);
                    }
                    1 => b.insert(i, b"()[]=\\.,-:"[rng.below(10)]),
                    _ => b[i] = b"x1 (;"[rng.below(5)],
                }
            }
            let s = String::from_utf8_lossy(&b).into_owned();
            let _ = prog(&s);
        }
    }
}
