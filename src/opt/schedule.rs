//! The schedule text syntax: parsed by [`parse`], printed by the `Display`
//! of [`Schedule`] (the two round-trip).
//!
//! ```text
//! -- a comment runs to the end of the line
//! let fuse = fuse_index_for <+ fuse_index_iota in
//! let simplify = inline_atom <+ fold_constant in
//! repeat(everywhere(fuse <+ simplify)) ; everywhere(try(cse)) ; id
//! ```
//!
//! Grammar (EBNF; whitespace and `--` comments may appear between tokens):
//!
//! ```text
//! schedule  = { let } strategy ;
//! let       = "let" name "=" strategy "in" ;
//! strategy  = sequence { "<+" sequence } ;          (* right-associative *)
//! sequence  = atom { ";" atom } ;                    (* right-associative *)
//! atom      = "id" | "fail"
//!           | rule                                   (* a name in `known_rules` *)
//!           | name                                   (* a let defined above *)
//!           | combinator "(" strategy ")"
//!           | "(" strategy ")" ;
//! combinator = "try" | "repeat" | "one" | "all" | "topDown" | "bottomUp"
//!            | "normalize" | "innermost" | "everywhere" ;
//! name      = ident - keyword - combinator - rule ;
//! keyword   = "let" | "in" | "id" | "fail" ;
//! ident     = ( letter | "_" ) { letter | digit | "_" } ;  (* ASCII *)
//! ```
//!
//! `;` binds tighter than `<+`. A let may use only the lets before it (no
//! recursion), may not reuse a keyword, combinator, rule or earlier let name.
//!
//! Errors stop at the first one and are rendered like program compile
//! errors (file:line:col, the line, a caret, a hint). Input is bounded:
//! at most [`MAX_SCHEDULE_BYTES`] bytes and [`MAX_NESTING`] levels, so a
//! hostile schedule gets an error rather than a stack overflow, here or in
//! the (recursive) passes that later walk the strategy tree.

use super::strategy::{Schedule, Strategy};
use crate::diag::Span;
use crate::diag::{self, Diagnostic, Source};
use rustc_hash::FxHashMap;
use std::fmt;

/// Largest schedule accepted, in bytes (1 MiB).
pub const MAX_SCHEDULE_BYTES: usize = 1 << 20;

/// Deepest nesting accepted. Every `(`, combinator argument, and every
/// further operand of a `;` or `<+` chain is one level deeper (the operands
/// of a right-associative chain do nest in the tree), so the depth of the
/// resulting `Strategy` tree is bounded too.
pub const MAX_NESTING: usize = 200;

/// Words that are never rule or let names.
const KEYWORDS: &[&str] = &["let", "in", "id", "fail"];

/// Names longer than this get no "did you mean": similarity is quadratic in
/// the length, and a name this long is no typo.
const MAX_SUGGEST_LEN: usize = 64;

/// Jaro-Winkler similarity from which a name is suggested. Catches a
/// dropped, doubled or swapped letter and a shortened suffix
/// (`fuse_idx` → `fuse_index_for`) without suggesting unrelated names.
const MIN_SIMILARITY: f64 = 0.85;

/// At most this many names are listed in a hint.
const MAX_LISTED: usize = 30;

/// Names and quoted tokens longer than this are cut in messages.
const MAX_SHOWN_NAME: usize = 60;

/// A schedule that does not parse: the first error found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleError {
    /// The diagnostic as `diag::render` prints it (location, source line,
    /// caret, label, hint).
    pub rendered: String,
    /// 1-based line of the error.
    pub line: usize,
    /// 1-based column (in characters) of the error.
    pub column: usize,
    /// The one-line summary, e.g. "unknown rule or strategy `fuse_idx`".
    pub message: String,
}

impl ScheduleError {
    fn new(source: &Source, d: Diagnostic) -> Self {
        let (line, column) = source.line_col(d.span.start);
        ScheduleError { rendered: diag::render(source, std::slice::from_ref(&d)), line, column, message: d.message }
    }
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rendered)
    }
}

impl std::error::Error for ScheduleError {}

/// Parse a schedule; `name` is the file name shown in messages;
/// `known_rules` the rule names a `Rule` may use.
pub fn parse(name: &str, text: &str, known_rules: &[&str]) -> Result<Schedule, ScheduleError> {
    if text.len() > MAX_SCHEDULE_BYTES {
        // Only the first line is shown, so there is no need to index the rest.
        let first_line = text.split('\n').next().unwrap_or("");
        let source = Source::new(name, first_line);
        return Err(ScheduleError::new(&source, too_large(text.len())));
    }
    // `Source::new` drops a byte order mark: parse its text so that spans
    // and the rendered source agree.
    let source = Source::new(name, text);
    Parser::new(&source.text, known_rules).schedule().map_err(|d| ScheduleError::new(&source, d))
}

// ---------------------------------------------------------------- lexer

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'t> {
    Ident(&'t str),
    LParen,
    RParen,
    Semi,
    Choice,
    Equals,
    End,
}

#[derive(Clone, Debug)]
struct Token<'t> {
    tok: Tok<'t>,
    span: Span,
}

impl Token<'_> {
    fn is_word(&self, word: &str) -> bool {
        self.tok == Tok::Ident(word)
    }

    /// The token as named in "found …".
    fn describe(&self) -> String {
        match self.tok {
            Tok::Ident(name) => format!("`{}`", shown(name)),
            Tok::LParen => "`(`".into(),
            Tok::RParen => "`)`".into(),
            Tok::Semi => "`;`".into(),
            Tok::Choice => "`<+`".into(),
            Tok::Equals => "`=`".into(),
            Tok::End => "the end of the schedule".into(),
        }
    }
}

/// Tokens on demand, so that a bad character after the first syntax error
/// is never reported in its place.
struct Lexer<'t> {
    text: &'t str,
    pos: usize,
    /// End of the last token: where the end of input is reported, so the
    /// caret sits right after the last thing written rather than on a
    /// trailing blank line or comment.
    last_end: usize,
}

impl<'t> Lexer<'t> {
    fn new(text: &'t str, pos: usize) -> Self {
        Lexer { text, pos, last_end: pos }
    }

    fn skip_blanks_and_comments(&mut self) {
        loop {
            let rest = &self.text[self.pos..];
            let trimmed = rest.trim_start_matches(|c: char| c.is_ascii_whitespace());
            self.pos += rest.len() - trimmed.len();
            if !trimmed.starts_with("--") {
                return;
            }
            self.pos += trimmed.find('\n').unwrap_or(trimmed.len());
        }
    }

    fn next_token(&mut self) -> Result<Token<'t>, Diagnostic> {
        self.skip_blanks_and_comments();
        let start = self.pos;
        let rest = &self.text[start..];
        let Some(c) = rest.chars().next() else {
            return Ok(Token { tok: Tok::End, span: self.last_end..self.last_end });
        };
        let (tok, len) = match c {
            '(' => (Tok::LParen, 1),
            ')' => (Tok::RParen, 1),
            ';' => (Tok::Semi, 1),
            '=' => (Tok::Equals, 1),
            '<' if rest.starts_with("<+") => (Tok::Choice, 2),
            c if c.is_ascii_alphabetic() || c == '_' => {
                let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                (Tok::Ident(&rest[..len]), len)
            }
            other => return Err(unexpected_character(other, start, rest)),
        };
        self.pos += len;
        self.last_end = self.pos;
        Ok(Token { tok, span: start..self.pos })
    }
}

// ---------------------------------------------------------------- parser

struct Parser<'t> {
    text: &'t str,
    lexer: Lexer<'t>,
    peeked: Option<Token<'t>>,
    known_rules: &'t [&'t str],
    /// Looked up for every name; a list could be long (hostile inputs).
    rule_set: FxHashMap<&'t str, ()>,
    /// Lets defined so far, with the span of their name.
    lets: FxHashMap<&'t str, Span>,
    /// The same names in order, for hints.
    let_order: Vec<&'t str>,
    /// The let whose strategy is being parsed, to explain a recursive use.
    defining: Option<&'t str>,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str, known_rules: &'t [&'t str]) -> Self {
        Parser {
            text,
            lexer: Lexer::new(text, 0),
            peeked: None,
            known_rules,
            rule_set: known_rules.iter().map(|r| (*r, ())).collect(),
            lets: FxHashMap::default(),
            let_order: vec![],
            defining: None,
        }
    }

    fn peek(&mut self) -> Result<&Token<'t>, Diagnostic> {
        if self.peeked.is_none() {
            self.peeked = Some(self.lexer.next_token()?);
        }
        Ok(self.peeked.as_ref().expect("just filled"))
    }

    fn bump(&mut self) -> Result<Token<'t>, Diagnostic> {
        match self.peeked.take() {
            Some(t) => Ok(t),
            None => self.lexer.next_token(),
        }
    }

    /// Consume the next token if it is `tok`.
    fn eat(&mut self, tok: Tok<'_>) -> Result<bool, Diagnostic> {
        let found = self.peek()?.tok == tok;
        if found {
            self.peeked = None;
        }
        Ok(found)
    }

    fn is_rule(&self, name: &str) -> bool {
        self.rule_set.contains_key(name)
    }

    fn schedule(mut self) -> Result<Schedule, Diagnostic> {
        let first = self.peek()?;
        if first.tok == Tok::End {
            return Err(empty_schedule(first.span.clone()));
        }
        let mut lets = vec![];
        while self.peek()?.is_word("let") {
            lets.push(self.let_binding()?);
        }
        let main = self.strategy(1)?;
        self.expect_end()?;
        Ok(Schedule { lets, main })
    }

    /// `let NAME = STRATEGY in`
    fn let_binding(&mut self) -> Result<(String, Strategy), Diagnostic> {
        let let_token = self.bump()?;
        let name_token = self.bump()?;
        let Tok::Ident(name) = name_token.tok else {
            return Err(Diagnostic::new(format!("expected a name after `let`, found {}", name_token.describe()), name_token.span)
                .label("expected the let's name here")
                .hint("a let reads `let NAME = STRATEGY in`"));
        };
        self.check_let_name(name, &name_token.span)?;
        let equals = self.bump()?;
        if equals.tok != Tok::Equals {
            return Err(Diagnostic::new(format!("expected `=` after `let {}`, found {}", shown(name), equals.describe()), equals.span)
                .label("expected `=` here")
                .hint("a let reads `let NAME = STRATEGY in`"));
        }
        self.defining = Some(name);
        let body = self.strategy(1)?;
        self.defining = None;
        let after = self.bump()?;
        if !after.is_word("in") {
            let mut d = Diagnostic::new(format!("expected `in` after the let's strategy, found {}", after.describe()), after.span.clone())
                .label("expected `in` here")
                .note(let_token.span, "the let began here");
            d = d.hint(match after.tok {
                Tok::End => "a let is followed by `in` and the rest of the schedule: `let NAME = STRATEGY in MAIN`".to_string(),
                Tok::Ident(_) | Tok::LParen => missing_operator_hint(),
                Tok::RParen => "this `)` has no matching `(`".to_string(),
                _ => "a let reads `let NAME = STRATEGY in`".to_string(),
            });
            return Err(d);
        }
        self.lets.insert(name, name_token.span);
        self.let_order.push(name);
        Ok((name.to_string(), body))
    }

    /// A let name must not be confused with anything else a name can mean.
    fn check_let_name(&self, name: &str, span: &Span) -> Result<(), Diagnostic> {
        let refuse = |message: String, hint: &str| Err(Diagnostic::new(message, span.clone()).label("not usable as a let name").hint(hint));
        if KEYWORDS.contains(&name) {
            return refuse(format!("`{name}` is a keyword and cannot be a let name"), "pick another name");
        }
        if Strategy::UNARY.contains(&name) {
            return refuse(format!("`{name}` is a combinator and cannot be a let name"), "pick another name");
        }
        if self.is_rule(name) {
            return refuse(format!("`{}` is already a rule name", shown(name)), "pick another name; a let may not hide a rule");
        }
        if let Some(first) = self.lets.get(name) {
            return Err(Diagnostic::new(format!("`{}` is already defined by a let", shown(name)), span.clone())
                .label("defined again here")
                .note(first.clone(), "first defined here")
                .hint("give each let its own name"));
        }
        Ok(())
    }

    /// `sequence { "<+" sequence }`, folded to the right. A loop rather
    /// than recursion: the stack does not grow with the chain's length.
    fn strategy(&mut self, depth: usize) -> Result<Strategy, Diagnostic> {
        let mut alternatives = vec![self.sequence(depth)?];
        while self.eat(Tok::Choice)? {
            alternatives.push(self.sequence(depth + alternatives.len())?);
        }
        Ok(fold_right(alternatives, Strategy::lchoice))
    }

    /// `atom { ";" atom }`, folded to the right.
    fn sequence(&mut self, depth: usize) -> Result<Strategy, Diagnostic> {
        let mut steps = vec![self.atom(depth)?];
        while self.eat(Tok::Semi)? {
            steps.push(self.atom(depth + steps.len())?);
        }
        Ok(fold_right(steps, Strategy::seq))
    }

    fn atom(&mut self, depth: usize) -> Result<Strategy, Diagnostic> {
        let token = self.bump()?;
        if depth > MAX_NESTING {
            return Err(too_deep(token.span));
        }
        match token.tok {
            Tok::LParen => {
                let inner = self.strategy(depth + 1)?;
                self.expect_close(&token.span, "to close this `(`")?;
                Ok(inner)
            }
            Tok::Ident(name) => self.named(name, token.span, depth),
            _ => Err(expected_strategy(&token)),
        }
    }

    /// An atom that starts with a name.
    fn named(&mut self, name: &'t str, span: Span, depth: usize) -> Result<Strategy, Diagnostic> {
        if name == "let" || name == "in" {
            return Err(expected_strategy(&Token { tok: Tok::Ident(name), span }));
        }
        if self.peek()?.tok == Tok::LParen {
            if !Strategy::UNARY.contains(&name) {
                return Err(self.not_a_combinator(name, span));
            }
            let open = self.bump()?;
            let argument = self.strategy(depth + 1)?;
            self.expect_close(&(span.start..open.span.end), &format!("to close the `(` of `{name}(`"))?;
            return Ok(Strategy::unary(name, argument).expect("checked to be a unary combinator"));
        }
        match name {
            "id" => Ok(Strategy::Id),
            "fail" => Ok(Strategy::Fail),
            _ if self.lets.contains_key(name) => Ok(Strategy::Ref(name.to_string())),
            _ if self.is_rule(name) => Ok(Strategy::rule(name)),
            _ if Strategy::UNARY.contains(&name) => Err(missing_argument(name, span)),
            _ if self.defining == Some(name) => Err(Diagnostic::new(format!("let `{}` refers to itself", shown(name)), span)
                .label("used inside its own definition")
                .hint("lets are not recursive; to apply a strategy until it fails, use `repeat(…)`")),
            _ => Err(self.unknown_name(name, span)),
        }
    }

    fn expect_close(&mut self, open: &Span, note: &str) -> Result<(), Diagnostic> {
        let token = self.bump()?;
        if token.tok == Tok::RParen {
            return Ok(());
        }
        let hint = match token.tok {
            Tok::Ident(_) | Tok::LParen => missing_operator_hint(),
            Tok::End => "the schedule ends before the `(` is closed".to_string(),
            _ => "parentheses must be balanced".to_string(),
        };
        Err(Diagnostic::new(format!("expected `)`, found {}", token.describe()), token.span)
            .label("expected `)` here")
            .note(open.clone(), note.to_string())
            .hint(hint))
    }

    /// After the main strategy only the end of the schedule may follow.
    fn expect_end(&mut self) -> Result<(), Diagnostic> {
        let token = self.bump()?;
        let hint = match token.tok {
            Tok::End => return Ok(()),
            Tok::Ident("let") => "lets come first: `let NAME = STRATEGY in MAIN`".to_string(),
            Tok::Ident("in") => "`in` ends a let, and no let is open here".to_string(),
            Tok::Ident(_) | Tok::LParen => missing_operator_hint(),
            Tok::RParen => "this `)` has no matching `(`".to_string(),
            _ => "`=` only follows the name in `let NAME = STRATEGY in`".to_string(),
        };
        Err(Diagnostic::new(format!("expected `;`, `<+` or the end of the schedule, found {}", token.describe()), token.span)
            .label("unexpected after the schedule's strategy")
            .hint(hint))
    }

    /// `NAME(` where NAME is no combinator.
    fn not_a_combinator(&self, name: &str, span: Span) -> Diagnostic {
        let what = if KEYWORDS.contains(&name) {
            Some("a keyword")
        } else if self.is_rule(name) {
            Some("a rule")
        } else if self.lets.contains_key(name) {
            Some("a let name")
        } else {
            None
        };
        let combinators = format!("combinators: {}", Strategy::UNARY.join(", "));
        match what {
            Some(what) => Diagnostic::new(format!("`{}` is {what}, not a combinator", shown(name)), span)
                .label("takes no argument")
                .hint(format!("only combinators take `(…)`; {combinators}")),
            None => {
                let guess = closest(name, Strategy::UNARY.iter().copied());
                let hint = match guess {
                    Some(g) => format!("did you mean `{g}`?\n{combinators}"),
                    None => combinators,
                };
                Diagnostic::new(format!("unknown combinator `{}`", shown(name)), span).label("not a combinator").hint(hint)
            }
        }
    }

    fn unknown_name(&self, name: &str, span: Span) -> Diagnostic {
        if let Some(later) = self.defined_later(name, span.end) {
            return Diagnostic::new(format!("`{}` is used before its let", shown(name)), span)
                .label("not defined yet")
                .note(later, "defined here, later")
                .hint("a let may only use the lets above it; move that let up");
        }
        let candidates = self.known_rules.iter().copied().chain(self.let_order.iter().copied()).chain(["id", "fail"]);
        let mut hint = match closest(name, candidates) {
            Some(g) => format!("did you mean `{g}`?\n"),
            None => String::new(),
        };
        hint += &if self.known_rules.is_empty() { "there are no known rules".to_string() } else { format!("known rules: {}", listing(self.known_rules)) };
        if !self.let_order.is_empty() {
            hint += &format!("\nlets in scope: {}", listing(&self.let_order));
        }
        Diagnostic::new(format!("unknown rule or strategy `{}`", shown(name)), span).label("not a rule or a let above").hint(hint)
    }

    /// Where a later `let` defines `name`, if one does: scans the rest of
    /// the schedule once (only on the error path) up to a bad character.
    fn defined_later(&self, name: &str, from: usize) -> Option<Span> {
        let mut lexer = Lexer::new(self.text, from);
        let mut after_let = false;
        loop {
            let token = lexer.next_token().ok()?;
            match token.tok {
                Tok::End => return None,
                Tok::Ident(n) if after_let && n == name => return Some(token.span),
                _ => after_let = token.is_word("let"),
            }
        }
    }
}

// ------------------------------------------------------- diagnostics

fn too_large(len: usize) -> Diagnostic {
    Diagnostic::new(format!("schedule is too large: {len} bytes (the limit is {MAX_SCHEDULE_BYTES} bytes, 1 MiB)"), 0..0)
        .label("in this file")
        .hint("a schedule names rules and combinators; one this large was probably not meant to be a schedule")
}

fn too_deep(span: Span) -> Diagnostic {
    Diagnostic::new(format!("schedule nests more than {MAX_NESTING} levels deep"), span)
        .label(format!("level {}", MAX_NESTING + 1))
        .hint("every `(`, combinator and further `;` or `<+` operand nests one level deeper; name parts of the schedule with `let`")
}

fn empty_schedule(span: Span) -> Diagnostic {
    Diagnostic::new("empty schedule", span).label("expected a strategy").hint("a schedule is a strategy such as `repeat(everywhere(RULE))`; `id` does nothing")
}

fn expected_strategy(found: &Token<'_>) -> Diagnostic {
    let hint = match found.tok {
        Tok::End => "finish the schedule with a strategy: a rule, a let name, `id`, `fail`, `COMBINATOR(…)` or `(…)`",
        Tok::Semi | Tok::Choice => "`;` and `<+` go between two strategies",
        Tok::RParen => "`()` is no strategy; `id` is the one that does nothing",
        Tok::Ident("let") => "lets come first, each ending in `in`: `let NAME = STRATEGY in MAIN`",
        Tok::Ident("in") => "a let needs a strategy between `=` and `in`",
        _ => "a strategy is a rule, a let name, `id`, `fail`, `COMBINATOR(…)` or `(…)`",
    };
    Diagnostic::new(format!("expected a strategy, found {}", found.describe()), found.span.clone()).label("expected a strategy here").hint(hint)
}

fn missing_argument(name: &str, span: Span) -> Diagnostic {
    Diagnostic::new(format!("combinator `{name}` needs an argument"), span)
        .label(format!("expected `(` after `{name}`"))
        .hint(format!("write `{name}(STRATEGY)`, e.g. `{name}(id)`"))
}

fn missing_operator_hint() -> String {
    "two strategies in a row need `;` (sequence) or `<+` (choice) between them".to_string()
}

fn unexpected_character(c: char, at: usize, rest: &str) -> Diagnostic {
    let hint = match c {
        '<' | '+' | '|' => "left choice is written `<+`",
        '-' | '#' | '/' => "comments start with `--`",
        ',' => "a combinator takes one strategy; combine strategies with `;` or `<+`",
        '[' | ']' | '{' | '}' => "group with `(` and `)`",
        '0'..='9' => "names start with a letter or `_`",
        c if c.is_whitespace() => "this is a non-ASCII space; use a plain space",
        _ => "a schedule is made of names, `(`, `)`, `;`, `<+`, `=` and `--` comments",
    };
    let hint = if rest.starts_with("//") { "comments start with `--`" } else { hint };
    Diagnostic::new(format!("unexpected character `{}`", c.escape_debug()), at..at + c.len_utf8()).label("not part of the schedule syntax").hint(hint)
}

// ------------------------------------------------------------ helpers

/// `[a, b, c]` → `a op (b op c)`.
fn fold_right(items: Vec<Strategy>, op: fn(Strategy, Strategy) -> Strategy) -> Strategy {
    items.into_iter().rev().reduce(|rest, item| op(item, rest)).expect("a chain has at least one operand")
}

/// The candidate most like `name`, if one is alike enough.
fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    if name.len() > MAX_SUGGEST_LEN {
        return None;
    }
    candidates
        .filter(|c| c.len() <= 2 * MAX_SUGGEST_LEN && *c != name)
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(score, _)| *score >= MIN_SIMILARITY)
        // Of equally similar candidates the first wins (`max_by` would keep the last).
        .fold(None, |best: Option<(f64, &str)>, (score, c)| match best {
            Some((b, _)) if b >= score => best,
            _ => Some((score, c)),
        })
        .map(|(_, c)| c)
}

/// `a, b, c` (at most `MAX_LISTED` names, then how many more).
fn listing(names: &[&str]) -> String {
    let mut out = names.iter().take(MAX_LISTED).map(|n| shown(n)).collect::<Vec<_>>().join(", ");
    if names.len() > MAX_LISTED {
        out += &format!(" and {} more", names.len() - MAX_LISTED);
    }
    out
}

/// A name as quoted in a message, cut if very long.
fn shown(name: &str) -> String {
    match name.char_indices().nth(MAX_SHOWN_NAME) {
        Some((cut, _)) => format!("{}…", &name[..cut]),
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::{ProptestConfig, any, prop, prop_assert, prop_assert_eq, prop_oneof, proptest};
    use proptest::strategy::{BoxedStrategy, Strategy as _};

    const RULES: &[&str] = &["fuse_index_for", "fuse_index_iota", "inline_atom", "fold_constant", "cse"];

    fn ok(text: &str) -> Schedule {
        parse("s.sched", text, RULES).unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(text: &str) -> ScheduleError {
        match parse("s.sched", text, RULES) {
            Ok(s) => panic!("parsed {text:?} as {s:?}"),
            Err(e) => e,
        }
    }

    /// The error's message, its position, and that the rendering shows both
    /// and the hint part `hint`.
    fn check(text: &str, message: &str, line_col: (usize, usize), hint: &str) -> ScheduleError {
        let e = err(text);
        assert_eq!(e.message, message, "{e}");
        assert_eq!((e.line, e.column), line_col, "{e}");
        assert!(e.rendered.contains(&format!("error: {message}")), "{e}");
        assert!(e.rendered.contains(&format!("s.sched:{}:{}", line_col.0, line_col.1)), "{e}");
        assert!(e.rendered.contains(hint), "missing hint {hint:?} in\n{e}");
        e
    }

    fn r(n: &str) -> Strategy {
        Strategy::rule(n)
    }

    #[test]
    fn parses_the_example() {
        let text = "-- a comment runs to the end of the line\n\
                    let fuse = fuse_index_for <+ fuse_index_iota in\n\
                    let simplify = inline_atom <+ fold_constant in\n\
                    repeat(everywhere(fuse <+ simplify)) ; everywhere(try(cse)) ; id\n";
        let s = ok(text);
        assert_eq!(
            s.lets,
            vec![
                ("fuse".to_string(), Strategy::lchoice(r("fuse_index_for"), r("fuse_index_iota"))),
                ("simplify".to_string(), Strategy::lchoice(r("inline_atom"), r("fold_constant"))),
            ]
        );
        let fuse_or_simplify = Strategy::lchoice(Strategy::Ref("fuse".into()), Strategy::Ref("simplify".into()));
        let first = Strategy::Repeat(Box::new(Strategy::Everywhere(Box::new(fuse_or_simplify))));
        let second = Strategy::Everywhere(Box::new(Strategy::Try(Box::new(r("cse")))));
        assert_eq!(s.main, Strategy::seq(first, Strategy::seq(second, Strategy::Id)));
        assert_eq!(ok(&s.to_string()), s);
    }

    #[test]
    fn precedence_and_associativity() {
        let (a, b, c) = (r("cse"), r("inline_atom"), r("fold_constant"));
        let abc = "cse ; inline_atom <+ fold_constant";
        assert_eq!(ok(abc).main, Strategy::lchoice(Strategy::seq(a.clone(), b.clone()), c.clone()));
        let abc = "cse <+ inline_atom ; fold_constant";
        assert_eq!(ok(abc).main, Strategy::lchoice(a.clone(), Strategy::seq(b.clone(), c.clone())));
        let abc = "cse ; inline_atom ; fold_constant";
        assert_eq!(ok(abc).main, Strategy::seq(a.clone(), Strategy::seq(b.clone(), c.clone())));
        let abc = "cse <+ inline_atom <+ fold_constant";
        assert_eq!(ok(abc).main, Strategy::lchoice(a.clone(), Strategy::lchoice(b.clone(), c.clone())));
        let abc = "(cse ; inline_atom) ; fold_constant";
        assert_eq!(ok(abc).main, Strategy::seq(Strategy::seq(a.clone(), b.clone()), c.clone()));
        let abc = "(((cse <+ inline_atom)));fold_constant";
        assert_eq!(ok(abc).main, Strategy::seq(Strategy::lchoice(a, b), c));
    }

    #[test]
    fn every_combinator_keyword_and_layout() {
        for name in Strategy::UNARY {
            let s = ok(&format!("{name}( id )"));
            assert_eq!(s.main, Strategy::unary(name, Strategy::Id).unwrap());
        }
        assert_eq!(ok("fail").main, Strategy::Fail);
        // Comments and blanks anywhere, CRLF line ends, a byte order mark, no final newline.
        let s = ok("\u{feff}let--c\r\n\tx--c\n=--c\ncse--c\nin--c\n  try\t(x)--c");
        assert_eq!(s.lets, vec![("x".to_string(), r("cse"))]);
        assert_eq!(s.main, Strategy::Try(Box::new(Strategy::Ref("x".into()))));
        assert_eq!(ok("cse--").main, r("cse"));
    }

    #[test]
    fn unknown_name_suggests_and_lists() {
        let e = check("let fuse = fuse_idx in fuse", "unknown rule or strategy `fuse_idx`", (1, 12), "did you mean `fuse_index_for`?");
        assert!(e.rendered.contains("known rules: fuse_index_for, fuse_index_iota, inline_atom, fold_constant, cse"), "{e}");
        // Lets in scope are suggested and listed too.
        let e = check("let simplify = cse in simplfy", "unknown rule or strategy `simplfy`", (1, 23), "did you mean `simplify`?");
        assert!(e.rendered.contains("lets in scope: simplify"), "{e}");
        // Nothing alike: only the list.
        let e = check("zzz", "unknown rule or strategy `zzz`", (1, 1), "known rules: ");
        assert!(!e.rendered.contains("did you mean"), "{e}");
        let e = parse("s", "x", &[]).unwrap_err();
        assert!(e.rendered.contains("there are no known rules"), "{e}");
    }

    #[test]
    fn lets_are_neither_recursive_nor_forward() {
        check("let a = try(a) in a", "let `a` refers to itself", (1, 13), "lets are not recursive");
        let e = check("let a = b in\nlet b = cse in\na", "`b` is used before its let", (1, 9), "move that let up");
        assert!(e.rendered.contains("defined here, later"), "{e}");
    }

    #[test]
    fn combinator_errors() {
        check("repeat ; cse", "combinator `repeat` needs an argument", (1, 1), "write `repeat(STRATEGY)`");
        let e = check("reapeat(cse)", "unknown combinator `reapeat`", (1, 1), "did you mean `repeat`?");
        assert!(e.rendered.contains("combinators: try, repeat, one, all, topDown, bottomUp, normalize, innermost, everywhere"), "{e}");
        check("cse(id)", "`cse` is a rule, not a combinator", (1, 1), "only combinators take `(…)`");
        check("id(cse)", "`id` is a keyword, not a combinator", (1, 1), "only combinators take `(…)`");
        check("let f = cse in f(id)", "`f` is a let name, not a combinator", (1, 16), "combinators: try");
        let e = check("try(cse", "expected `)`, found the end of the schedule", (1, 8), "before the `(` is closed");
        assert!(e.rendered.contains("to close the `(` of `try(`"), "{e}");
    }

    #[test]
    fn what_was_expected() {
        check("cse ; ; id", "expected a strategy, found `;`", (1, 7), "go between two strategies");
        check("cse ;", "expected a strategy, found the end of the schedule", (1, 6), "finish the schedule");
        check("cse <+\n-- trailing comment\n\n", "expected a strategy, found the end of the schedule", (1, 7), "finish");
        check("(cse id)", "expected `)`, found `id`", (1, 6), "need `;` (sequence) or `<+` (choice)");
        check("()", "expected a strategy, found `)`", (1, 2), "`id` is the one that does nothing");
        check("let x = cse id", "expected `in` after the let's strategy, found `id`", (1, 13), "need `;`");
        check("let x = cse", "expected `in` after the let's strategy, found the end of the schedule", (1, 12), "in MAIN");
        check("let x cse in x", "expected `=` after `let x`, found `cse`", (1, 7), "`let NAME = STRATEGY in`");
        check("let = cse in x", "expected a name after `let`, found `=`", (1, 5), "`let NAME = STRATEGY in`");
        check("let x = in x", "expected a strategy, found `in`", (1, 9), "between `=` and `in`");
        check("let x = cse in", "expected a strategy, found the end of the schedule", (1, 15), "finish");
        check("cse ; let x = id in x", "expected a strategy, found `let`", (1, 7), "lets come first");
        check("cse id", "expected `;`, `<+` or the end of the schedule, found `id`", (1, 5), "need `;`");
        check("cse)", "expected `;`, `<+` or the end of the schedule, found `)`", (1, 4), "no matching `(`");
        check("cse in", "expected `;`, `<+` or the end of the schedule, found `in`", (1, 5), "no let is open");
        check("cse\nlet x = id in x", "expected `;`, `<+` or the end of the schedule, found `let`", (2, 1), "lets come first");
    }

    #[test]
    fn empty_schedules() {
        for text in ["", "  \n\t", "-- only a comment\n-- and another", "\u{feff}"] {
            check(text, "empty schedule", (1, 1), "`id` does nothing");
        }
    }

    #[test]
    fn stray_characters() {
        check("cse # c", "unexpected character `#`", (1, 5), "comments start with `--`");
        check("cse // c", "unexpected character `/`", (1, 5), "comments start with `--`");
        check("cse < id", "unexpected character `<`", (1, 5), "left choice is written `<+`");
        check("cse | id", "unexpected character `|`", (1, 5), "left choice is written `<+`");
        check("try(cse, id)", "unexpected character `,`", (1, 8), "takes one strategy");
        check("-- é\nid ; é", "unexpected character `é`", (2, 6), "made of names");
        check("id\u{a0};id", "unexpected character `\\u{a0}`", (1, 3), "non-ASCII space");
        check("1cse", "unexpected character `1`", (1, 1), "start with a letter");
        // The first error wins: a syntax error before a bad character.
        check("; #", "expected a strategy, found `;`", (1, 1), "between two strategies");
    }

    #[test]
    fn bad_let_names() {
        check("let id = cse in id", "`id` is a keyword and cannot be a let name", (1, 5), "pick another name");
        check("let in = cse in id", "`in` is a keyword and cannot be a let name", (1, 5), "pick another name");
        check("let try = cse in id", "`try` is a combinator and cannot be a let name", (1, 5), "pick another name");
        check("let cse = id in cse", "`cse` is already a rule name", (1, 5), "may not hide a rule");
        let e = check("let a = cse in\nlet a = id in a", "`a` is already defined by a let", (2, 5), "its own name");
        assert!(e.rendered.contains("first defined here"), "{e}");
    }

    #[test]
    fn error_type_displays_the_rendering() {
        let e = err("cse ;");
        assert_eq!(e.to_string(), e.rendered);
        let boxed: Box<dyn std::error::Error> = Box::new(e.clone());
        assert_eq!(boxed.to_string(), e.rendered);
        // Rendered like a program error: location, source line, caret, label, hint.
        assert!(e.rendered.starts_with("error: expected a strategy"), "{e}");
        assert!(e.rendered.contains("┌─ s.sched:1:6") && e.rendered.contains("1 │ cse ;"), "{e}");
        assert!(e.rendered.contains("^ expected a strategy here") && e.rendered.contains("= hint: "), "{e}");
    }

    #[test]
    fn deep_nesting_is_refused_without_overflow() {
        let open = "(".repeat(100_000);
        let e = check(&open, "schedule nests more than 200 levels deep", (1, 201), "name parts of the schedule");
        assert!(e.rendered.len() < 4000, "{e}");
        check(&"try(".repeat(100_000), "schedule nests more than 200 levels deep", (1, 801), "`let`");
        // Long chains nest too (the tree is right-leaning).
        let chain = vec!["cse"; 100_000].join(";");
        check(&chain, "schedule nests more than 200 levels deep", (1, 801), "`let`");
        // Just under the limit is fine, and round-trips.
        let deep = format!("{}cse{}", "try(".repeat(199), ")".repeat(199));
        let s = ok(&deep);
        assert_eq!(ok(&s.to_string()), s);
        let chain = ok(&vec!["cse"; 200].join(" <+ "));
        assert_eq!(ok(&chain.to_string()), chain);
    }

    #[test]
    fn size_limit() {
        let big = format!("cse{}", " ".repeat(MAX_SCHEDULE_BYTES));
        let e = check(&big, &format!("schedule is too large: {} bytes (the limit is 1048576 bytes, 1 MiB)", MAX_SCHEDULE_BYTES + 3), (1, 1), "");
        assert!(e.rendered.len() < 2000, "{e}");
        // A schedule at the limit, of many lets, parses quickly.
        let mut text = String::new();
        let mut i = 0;
        while text.len() < MAX_SCHEDULE_BYTES - 100 {
            text += &format!("let l{i} = cse <+ id in\n");
            i += 1;
        }
        text += &format!("l{}", i - 1);
        let t = std::time::Instant::now();
        let s = ok(&text);
        assert_eq!(s.lets.len(), i);
        assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
        // An unknown name among them: the hint lists a bounded number.
        let e = err(&format!("{text} ; l_unknown"));
        assert!(e.rendered.contains(&format!("and {} more", i - MAX_LISTED)) && e.rendered.len() < 4000, "{e}");
        // A megabyte-long name is cut in the message.
        let e = err(&"x".repeat(MAX_SCHEDULE_BYTES));
        assert!(e.message.len() < 200 && e.rendered.len() < 4000, "{e}");
    }

    // ------------------------------------------------------- properties

    const LET_NAMES: &[&str] = &["a", "b2", "_c"];

    /// Random strategy trees over some rules and the given lets.
    fn tree(lets: usize) -> BoxedStrategy<Strategy> {
        let mut leaves = vec![Strategy::Id, Strategy::Fail, r("cse"), r("inline_atom"), r("fold_constant")];
        leaves.extend(LET_NAMES[..lets].iter().map(|n| Strategy::Ref(n.to_string())));
        prop::sample::select(leaves)
            .prop_recursive(7, 48, 2, |inner| {
                prop_oneof![
                    (inner.clone(), inner.clone()).prop_map(|(a, b)| Strategy::seq(a, b)),
                    (inner.clone(), inner.clone()).prop_map(|(a, b)| Strategy::lchoice(a, b)),
                    (prop::sample::select(Strategy::UNARY), inner).prop_map(|(c, s)| Strategy::unary(c, s).unwrap()),
                ]
            })
            .boxed()
    }

    /// Random schedules: each let uses the lets before it, the main all.
    fn schedule() -> impl proptest::strategy::Strategy<Value = Schedule> {
        (0..=LET_NAMES.len()).prop_flat_map(|n| {
            let bodies: Vec<BoxedStrategy<Strategy>> = (0..n).map(tree).collect();
            (bodies, tree(n)).prop_map(|(bodies, main)| Schedule { lets: LET_NAMES.iter().map(|s| s.to_string()).zip(bodies).collect(), main })
        })
    }

    /// Text made of the schedule's tokens, some stray characters, blanks
    /// and comments: mostly wrong, sometimes right.
    fn token_soup() -> impl proptest::strategy::Strategy<Value = String> {
        let pieces = vec![
            "(", ")", ";", "<+", "<", "=", "let", "in", "id", "fail", "try", "repeat", "reapeat", "cse", "cs", "a", "b", " ", "\n", "-- c\n", "-", "#", "é",
            "\u{feff}", "\r\n", "\t", "1",
        ];
        prop::collection::vec(prop::sample::select(pieces), 0..40).prop_map(|v| v.concat())
    }

    /// Parsing never panics; errors point into the text; what parses
    /// prints back to itself.
    fn parse_is_total(text: &str) -> Result<(), proptest::test_runner::TestCaseError> {
        match parse("p", text, RULES) {
            Ok(s) => prop_assert_eq!(parse("p", &s.to_string(), RULES), Ok(s)),
            Err(e) => {
                prop_assert!(e.line >= 1 && e.column >= 1);
                prop_assert!(e.line <= text.lines().count().max(1) + 1, "{}", e);
                prop_assert!(e.rendered.starts_with(&format!("error: {}", e.message)), "{}", e);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn printed_schedules_parse_back(s in schedule()) {
            let text = s.to_string();
            prop_assert_eq!(parse("p", &text, RULES), Ok(s), "{}", text);
        }

        #[test]
        fn random_bytes_never_panic(bytes in any::<Vec<u8>>()) {
            parse_is_total(&String::from_utf8_lossy(&bytes))?;
        }

        #[test]
        fn token_soup_never_panics(text in token_soup()) {
            parse_is_total(&text)?;
        }
    }
}
