//! Lexer for `.ard` source: turns text into a list of tokens with byte spans.
//!
//! The raw scanning is done by `logos`; unknown characters become diagnostics
//! (and are dropped from the token list so that parsing can go on). Number
//! literals are scanned as one token (digits, optional fraction and exponent,
//! optional alphanumeric suffix) and decoded by [`decode_number`].

use crate::diag::Diagnostic;
use crate::syntax::ast::{FloatSuffix, IntSuffix, Span};
use logos::Logos;

#[derive(Logos, Clone, Copy, Debug, PartialEq, Eq)]
#[logos(skip r"[ \t\r\n\f]+")]
#[logos(skip(r"--[^\n]*", allow_greedy = true))]
pub enum TokenKind {
    #[token("def")]
    Def,
    #[token("entry")]
    Entry,
    #[token("derivative")]
    Derivative,
    #[token("let")]
    Let,
    #[token("in")]
    In,
    #[token("if")]
    If,
    #[token("then")]
    Then,
    #[token("else")]
    Else,
    #[token("for")]
    For,
    #[token("loop")]
    Loop,
    #[token("while")]
    While,
    #[token("do")]
    Do,
    #[token("with")]
    With,
    #[token("true")]
    True,
    #[token("false")]
    False,

    #[regex(r"[a-zA-Z_][a-zA-Z0-9_']*")]
    Ident,
    /// A string literal, the label of `trace "label" e` (no escapes but
    /// `\"` and `\\`, on one line).
    #[regex(r#""([^"\\\n]|\\.)*""#)]
    Str,
    /// Any number literal; see [`decode_number`].
    #[regex(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?([a-zA-Z_][a-zA-Z0-9_']*)?")]
    Number,

    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token(",")]
    Comma,
    #[token(":")]
    Colon,
    #[token(":>")]
    ColonGt,
    #[token("->")]
    Arrow,
    #[token("\\")]
    Backslash,
    #[token(".")]
    Dot,
    #[token("=")]
    Assign,
    #[token("|>")]
    Pipe,
    #[token("||")]
    OrOr,
    #[token("&&")]
    AndAnd,
    #[token("==")]
    EqEq,
    #[token("!=")]
    NotEq,
    #[token("<")]
    Lt,
    #[token("<=")]
    Le,
    #[token(">")]
    Gt,
    #[token(">=")]
    Ge,
    #[token("+")]
    Plus,
    #[token("-")]
    Minus,
    #[token("*")]
    Star,
    #[token("/")]
    Slash,
    #[token("%")]
    Percent,
    #[token("**")]
    StarStar,
    #[token("!")]
    Bang,

    /// End of input; never produced by logos, appended by [`lex`].
    Eof,
}

impl TokenKind {
    /// How the token reads in a message, e.g. "`)`" or "end of input".
    pub fn describe(self) -> &'static str {
        use TokenKind::*;
        match self {
            Def => "`def`",
            Entry => "`entry`",
            Derivative => "`derivative`",
            Let => "`let`",
            In => "`in`",
            If => "`if`",
            Then => "`then`",
            Else => "`else`",
            For => "`for`",
            Loop => "`loop`",
            While => "`while`",
            Do => "`do`",
            With => "`with`",
            True => "`true`",
            False => "`false`",
            Ident => "an identifier",
            Number => "a number",
            Str => "a string",
            LParen => "`(`",
            RParen => "`)`",
            LBracket => "`[`",
            RBracket => "`]`",
            Comma => "`,`",
            Colon => "`:`",
            ColonGt => "`:>`",
            Arrow => "`->`",
            Backslash => "`\\`",
            Dot => "`.`",
            Assign => "`=`",
            Pipe => "`|>`",
            OrOr => "`||`",
            AndAnd => "`&&`",
            EqEq => "`==`",
            NotEq => "`!=`",
            Lt => "`<`",
            Le => "`<=`",
            Gt => "`>`",
            Ge => "`>=`",
            Plus => "`+`",
            Minus => "`-`",
            Star => "`*`",
            Slash => "`/`",
            Percent => "`%`",
            StarStar => "`**`",
            Bang => "`!`",
            Eof => "end of input",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub kind: TokenKind,
    pub span: Span,
}

/// Lex a whole source text. The returned list always ends with an `Eof` token
/// whose span is `len..len`. Unknown characters are reported and skipped.
pub fn lex(text: &str) -> (Vec<Token>, Vec<Diagnostic>) {
    let mut toks = Vec::new();
    let mut diags: Vec<Diagnostic> = Vec::new();
    let mut lexer = TokenKind::lexer(text);
    while let Some(res) = lexer.next() {
        let span = lexer.span();
        match res {
            Ok(kind) => toks.push(Token { kind, span }),
            Err(()) => {
                let bad = lexer.slice();
                // Merge a run of adjacent unknown characters into one message.
                if let Some(last) = diags.last_mut()
                    && last.span.end == span.start
                    && last.message.starts_with("unknown character")
                {
                    last.span.end = span.end;
                    last.message = format!("unknown characters {}", show_chars(&text[last.span.clone()]));
                    continue;
                }
                let first = bad.chars().next().unwrap_or('?');
                if first == '"' {
                    diags.push(Diagnostic::new("this string is not closed on its line", span).label("no closing `\"`").hint(unknown_char_hint(first)));
                    continue;
                }
                diags.push(
                    Diagnostic::new(format!("unknown character {}", show_chars(bad)), span).label("not part of arden's syntax").hint(unknown_char_hint(first)),
                );
            }
        }
    }
    toks.push(Token { kind: TokenKind::Eof, span: text.len()..text.len() });
    (toks, diags)
}

/// Characters as the user wrote them, in backquotes: `"`, `∑∑`. Characters
/// that would not show (controls, invisible formatting and spacing
/// characters) are named by code point instead: U+200B.
fn show_chars(s: &str) -> String {
    let invisible = |c: char| {
        c.is_control()
            || (c.is_whitespace() && c != ' ')
            || matches!(c, '\u{00ad}' | '\u{034f}' | '\u{061c}' | '\u{115f}' | '\u{1160}' | '\u{17b4}' | '\u{17b5}'
                | '\u{180b}'..='\u{180f}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{206f}'
                | '\u{3164}' | '\u{fe00}'..='\u{fe0f}' | '\u{feff}' | '\u{ffa0}' | '\u{fff0}'..='\u{fffb}'
                | '\u{e0000}'..='\u{e0fff}')
    };
    if s.chars().any(invisible) { s.chars().map(|c| format!("U+{:04X}", c as u32)).collect::<Vec<_>>().join(" ") } else { format!("`{s}`") }
}

fn unknown_char_hint(c: char) -> &'static str {
    match c {
        '|' => "did you mean `||` (or) or `|>` (pipe)?",
        '&' => "did you mean `&&` (and)?",
        '^' => "write powers as `x ** y`",
        ';' => "arden has no statements; chain bindings with `let x = e in ...`",
        '"' => "strings are only `trace` labels and `assert` messages, on one line, closed by `\"`",
        '\'' => "arden has no characters",
        '{' | '}' => "arden has no braces; group with parentheses",
        '#' => "comments start with `--`",
        '~' => "write negation as `-x` and logical not as `!b`",
        '@' | '$' | '?' | '`' => "remove this character",
        _ => "remove this character; identifiers are ASCII letters, digits, `_` and `'`",
    }
}

/// A decoded number literal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NumLit {
    Int(i64, Option<IntSuffix>),
    Float(f64, Option<FloatSuffix>),
}

/// Decode the text of a `Number` token. On error, returns a diagnostic
/// (message, label, hint) and a placeholder value so parsing can go on.
pub fn decode_number(text: &str, span: Span) -> Result<NumLit, Box<(NumLit, Diagnostic)>> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_end = i;
    let mut is_float = false;
    if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
        is_float = true;
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            is_float = true;
            i = j;
        }
    }
    let body = &text[..i];
    let suffix = &text[i..];
    let placeholder = if is_float { NumLit::Float(0.0, None) } else { NumLit::Int(0, None) };
    let float_suffix = match suffix {
        "f64" => Some(Some(FloatSuffix::F64)),
        "f32" => Some(Some(FloatSuffix::F32)),
        "" if is_float => Some(None),
        _ => None,
    };
    if let Some(fs) = float_suffix {
        return match body.parse::<f64>() {
            Ok(v) if v.is_infinite() || (fs == Some(FloatSuffix::F32) && (v as f32).is_infinite()) => {
                let (ty, max) = if fs == Some(FloatSuffix::F32) { ("f32", "3.4028235e38") } else { ("f64", "1.7976931348623157e308") };
                Err(Box::new((
                    placeholder,
                    Diagnostic::new("float literal is out of range", span)
                        .label(format!("too large for {ty}: it would be infinity"))
                        .hint(format!("the largest {ty} is {max}")),
                )))
            }
            Ok(v) => Ok(NumLit::Float(v, fs)),
            Err(_) => Err(Box::new((placeholder, Diagnostic::new("malformed float literal", span).label("cannot read this number")))),
        };
    }
    let int_suffix = match suffix {
        "" => None,
        "i64" => Some(IntSuffix::I64),
        "i32" => Some(IntSuffix::I32),
        _ => {
            let msg = format!("invalid suffix `{suffix}` on a number literal");
            let suf_span = span.start + i..span.end;
            let hint = if is_float && (suffix == "i32" || suffix == "i64") {
                "a literal with a fraction or exponent is a float: use `f32` or `f64`"
            } else {
                "the suffixes are `i32`, `i64` (integers) and `f32`, `f64` (floats)"
            };
            return Err(Box::new((placeholder, Diagnostic::new(msg, suf_span).label("unknown suffix").hint(hint))));
        }
    };
    if is_float {
        let d = Diagnostic::new(format!("invalid suffix `{suffix}` on a float literal"), span.start + i..span.end)
            .label("integer suffix on a float")
            .hint("a literal with a fraction or exponent is a float: use `f32` or `f64`");
        return Err(Box::new((placeholder, d)));
    }
    let digits = &text[..int_end];
    let too_large = |max: &str| {
        Box::new((
            NumLit::Int(0, int_suffix),
            Diagnostic::new("integer literal is too large", span.clone())
                .label(format!("does not fit in {}", if int_suffix == Some(IntSuffix::I32) { "i32" } else { "i64" }))
                .hint(format!("the largest value is {max}; write a float literal (e.g. `{digits}.0`) for big numbers")),
        ))
    };
    match digits.parse::<i64>() {
        Ok(v) => {
            if int_suffix == Some(IntSuffix::I32) && v > i32::MAX as i64 {
                return Err(too_large("2147483647"));
            }
            Ok(NumLit::Int(v, int_suffix))
        }
        Err(_) => Err(too_large(if int_suffix == Some(IntSuffix::I32) { "2147483647" } else { "9223372036854775807" })),
    }
}

#[cfg(test)]
mod tests {
    use super::TokenKind::*;
    use super::*;

    fn kinds(s: &str) -> Vec<TokenKind> {
        let (t, d) = lex(s);
        assert!(d.is_empty(), "{d:?}");
        t.into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn keywords_idents_comments() {
        assert_eq!(kinds("def define x' _y -- comment\nentry in int"), vec![Def, Ident, Ident, Ident, Entry, In, Ident, Eof]);
    }

    #[test]
    fn operators() {
        assert_eq!(
            kinds("|> || && == != < <= > >= + - * / % ** ! = : :> -> \\ . , ( ) [ ]"),
            vec![
                Pipe, OrOr, AndAnd, EqEq, NotEq, Lt, Le, Gt, Ge, Plus, Minus, Star, Slash, Percent, StarStar, Bang, Assign, Colon, ColonGt, Arrow, Backslash,
                Dot, Comma, LParen, RParen, LBracket, RBracket, Eof
            ]
        );
        assert_eq!(kinds("a-->b\nc"), vec![Ident, Ident, Eof]);
        assert_eq!(kinds("a - -b"), vec![Ident, Minus, Minus, Ident, Eof]);
    }

    #[test]
    fn numbers() {
        assert_eq!(kinds("1 2.5 2e-3 1.5f32 3i32 t.0.1"), vec![Number, Number, Number, Number, Number, Ident, Dot, Number, Eof]);
        assert_eq!(kinds("1e-x"), vec![Number, Minus, Ident, Eof]);
        assert_eq!(kinds("1.x"), vec![Number, Dot, Ident, Eof]);
        let d = |s: &str| decode_number(s, 0..s.len());
        assert_eq!(d("3"), Ok(NumLit::Int(3, None)));
        assert_eq!(d("3i32"), Ok(NumLit::Int(3, Some(IntSuffix::I32))));
        assert_eq!(d("3i64"), Ok(NumLit::Int(3, Some(IntSuffix::I64))));
        assert_eq!(d("1.0"), Ok(NumLit::Float(1.0, None)));
        assert_eq!(d("2e-3"), Ok(NumLit::Float(2e-3, None)));
        assert_eq!(d("1.5f32"), Ok(NumLit::Float(1.5, Some(FloatSuffix::F32))));
        assert_eq!(d("1f64"), Ok(NumLit::Float(1.0, Some(FloatSuffix::F64))));
        assert_eq!(d("2E+2"), Ok(NumLit::Float(200.0, None)));
        assert!(d("99999999999999999999").is_err());
        assert!(d("3000000000i32").is_err());
        assert_eq!(d("9223372036854775807"), Ok(NumLit::Int(i64::MAX, None)));
        assert!(d("1.5i32").is_err());
        // Out of range floats are errors, not infinity.
        assert!(d("1e400").is_err());
        assert!(d("1e309f64").is_err());
        assert!(d("1e39f32").is_err());
        assert_eq!(d("1e38f32"), Ok(NumLit::Float(1e38, Some(FloatSuffix::F32))));
        assert_eq!(d("1.7976931348623157e308"), Ok(NumLit::Float(f64::MAX, None)));
        assert_eq!(d("1e-400"), Ok(NumLit::Float(0.0, None)));
        assert!(d("3abc").is_err());
        assert!(d("1e").is_err());
    }

    #[test]
    fn unknown_chars() {
        let (t, d) = lex("a $ b ∑∑ c");
        assert_eq!(t.iter().map(|t| t.kind).collect::<Vec<_>>(), vec![Ident, Ident, Ident, Eof]);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].span, 2..3);
        assert!(d[1].message.contains("∑∑"), "{}", d[1].message);
        assert!(d[0].hint.is_some());
        // Printed as written, not with Rust escapes.
        let (_, d) = lex("x 'a' y");
        assert_eq!(d[0].message, "unknown character `'`");
        let (t, d) = lex("trace \"a \\\"b\\\" c\" x \"open");
        assert_eq!(t.iter().map(|t| t.kind).collect::<Vec<_>>(), vec![Ident, Str, Ident, Eof]);
        assert_eq!(d[0].message, "this string is not closed on its line");
        let (_, d) = lex("a \u{200b} b \u{1}");
        assert_eq!(d[0].message, "unknown character U+200B");
        assert_eq!(d[1].message, "unknown character U+0001");
        let (_, d) = lex("a é\u{feff}");
        assert_eq!(d[0].message, "unknown characters U+00E9 U+FEFF");
        let (_, d) = lex("a | b & c ; ^");
        assert_eq!(d.len(), 4);
        assert!(d[0].hint.as_ref().unwrap().contains("||"));
    }
}
