//! Strategies as data (paper 002): rules combined by `;`, `<+`, `try`,
//! `repeat`, `one`, `all` and the traversals built on them. A strategy is
//! applied to a position of a function's body and either succeeds (having
//! possibly rewritten it) or fails (leaving it unchanged).
//!
//! Positions form a tree: a block's children are its statements, a
//! statement's children are the blocks nested in it (loop bodies, branches,
//! reduction lambdas, a `while` condition). Rules match statements and fail
//! on blocks.

use std::fmt;

/// A strategy expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Succeeds without rewriting.
    Id,
    /// Always fails.
    Fail,
    /// A rule of the rule set, by name.
    Rule(String),
    /// A sub-strategy named by `let` in the schedule.
    Ref(String),
    /// `s1 ; s2`: `s2` on the result of `s1`; fails if either fails.
    Seq(Box<Strategy>, Box<Strategy>),
    /// `s1 <+ s2`: `s1`, or `s2` on the original when `s1` fails.
    LChoice(Box<Strategy>, Box<Strategy>),
    /// `try(s)` = `s <+ id`.
    Try(Box<Strategy>),
    /// `repeat(s)` = `try(s ; repeat(s))`: `s` until it fails.
    Repeat(Box<Strategy>),
    /// `one(s)`: `s` on the first child where it succeeds; fails if none.
    One(Box<Strategy>),
    /// `all(s)`: `s` on every child; fails if it fails on one.
    All(Box<Strategy>),
    /// `topDown(s)` = `s <+ one(topDown(s))`: one rewrite, at the first
    /// position in pre-order where `s` succeeds.
    TopDown(Box<Strategy>),
    /// `bottomUp(s)` = `one(bottomUp(s)) <+ s`: one rewrite, at the first
    /// position in post-order where `s` succeeds.
    BottomUp(Box<Strategy>),
    /// `normalize(s)` = `repeat(topDown(s))`: rewrite until no position
    /// matches, restarting from the root after every rewrite.
    Normalize(Box<Strategy>),
    /// `innermost(s)` = `repeat(bottomUp(s))`.
    Innermost(Box<Strategy>),
    /// `everywhere(s)`: one pre-order sweep that tries `s` at every
    /// position (the children of a rewritten position are those of the
    /// rewrite); succeeds when `s` succeeded somewhere. Linear where
    /// `normalize` is quadratic: `repeat(everywhere(s))` reaches the same
    /// normal form in a few sweeps.
    Everywhere(Box<Strategy>),
}

impl Strategy {
    pub fn seq(a: Strategy, b: Strategy) -> Strategy {
        Strategy::Seq(Box::new(a), Box::new(b))
    }
    pub fn lchoice(a: Strategy, b: Strategy) -> Strategy {
        Strategy::LChoice(Box::new(a), Box::new(b))
    }
    pub fn rule(name: &str) -> Strategy {
        Strategy::Rule(name.to_string())
    }

    /// The combinators that take one strategy argument, by their name in
    /// the schedule syntax.
    pub const UNARY: &'static [&'static str] = &["try", "repeat", "one", "all", "topDown", "bottomUp", "normalize", "innermost", "everywhere"];

    /// Build a unary combinator from its schedule name.
    pub fn unary(name: &str, s: Strategy) -> Option<Strategy> {
        let b = Box::new(s);
        Some(match name {
            "try" => Strategy::Try(b),
            "repeat" => Strategy::Repeat(b),
            "one" => Strategy::One(b),
            "all" => Strategy::All(b),
            "topDown" => Strategy::TopDown(b),
            "bottomUp" => Strategy::BottomUp(b),
            "normalize" => Strategy::Normalize(b),
            "innermost" => Strategy::Innermost(b),
            "everywhere" => Strategy::Everywhere(b),
            _ => return None,
        })
    }

    fn unary_parts(&self) -> Option<(&'static str, &Strategy)> {
        Some(match self {
            Strategy::Try(s) => ("try", s),
            Strategy::Repeat(s) => ("repeat", s),
            Strategy::One(s) => ("one", s),
            Strategy::All(s) => ("all", s),
            Strategy::TopDown(s) => ("topDown", s),
            Strategy::BottomUp(s) => ("bottomUp", s),
            Strategy::Normalize(s) => ("normalize", s),
            Strategy::Innermost(s) => ("innermost", s),
            Strategy::Everywhere(s) => ("everywhere", s),
            _ => return None,
        })
    }

    /// Binding strength in the text syntax: `<+` (1) binds looser than `;` (2).
    fn precedence(&self) -> u8 {
        match self {
            Strategy::LChoice(..) => 1,
            Strategy::Seq(..) => 2,
            _ => 3,
        }
    }
}

/// Prints in the schedule syntax, with the fewest parentheses that parse
/// back to the same tree (`;` and `<+` associate to the right).
impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let operand = |f: &mut fmt::Formatter<'_>, s: &Strategy, min: u8| {
            if s.precedence() < min { write!(f, "({s})") } else { write!(f, "{s}") }
        };
        match self {
            Strategy::Id => write!(f, "id"),
            Strategy::Fail => write!(f, "fail"),
            Strategy::Rule(n) | Strategy::Ref(n) => write!(f, "{n}"),
            Strategy::Seq(a, b) => {
                operand(f, a, 3)?;
                write!(f, " ; ")?;
                operand(f, b, 2)
            }
            Strategy::LChoice(a, b) => {
                operand(f, a, 2)?;
                write!(f, " <+ ")?;
                operand(f, b, 1)
            }
            other => {
                let (name, s) = other.unary_parts().expect("every other strategy is unary");
                write!(f, "{name}({s})")
            }
        }
    }
}

/// A parsed schedule: named sub-strategies (`let name = s in …`, each may
/// use the ones before it) and the strategy to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub lets: Vec<(String, Strategy)>,
    pub main: Strategy,
}

impl Strategy {
    /// This strategy with every rule of `rules` replaced by `fail` (in a
    /// left choice `r <+ s`, that leaves `s`).
    pub fn without(&self, rules: &[&str]) -> Strategy {
        let b = |s: &Strategy| Box::new(s.without(rules));
        match self {
            Strategy::Rule(n) if rules.contains(&n.as_str()) => Strategy::Fail,
            Strategy::Id | Strategy::Fail | Strategy::Rule(_) | Strategy::Ref(_) => self.clone(),
            Strategy::Seq(x, y) => Strategy::Seq(b(x), b(y)),
            Strategy::LChoice(x, y) => Strategy::LChoice(b(x), b(y)),
            Strategy::Try(x) => Strategy::Try(b(x)),
            Strategy::Repeat(x) => Strategy::Repeat(b(x)),
            Strategy::One(x) => Strategy::One(b(x)),
            Strategy::All(x) => Strategy::All(b(x)),
            Strategy::TopDown(x) => Strategy::TopDown(b(x)),
            Strategy::BottomUp(x) => Strategy::BottomUp(b(x)),
            Strategy::Normalize(x) => Strategy::Normalize(b(x)),
            Strategy::Innermost(x) => Strategy::Innermost(b(x)),
            Strategy::Everywhere(x) => Strategy::Everywhere(b(x)),
        }
    }
}

impl Schedule {
    /// This schedule with every rule of `rules` replaced by `fail`, in its
    /// `let`s too.
    pub fn without(&self, rules: &[&str]) -> Schedule {
        Schedule { lets: self.lets.iter().map(|(n, s)| (n.clone(), s.without(rules))).collect(), main: self.main.without(rules) }
    }

    /// The strategy a `let` name stands for.
    pub fn lookup(&self, name: &str) -> Option<&Strategy> {
        self.lets.iter().rev().find(|(n, _)| n == name).map(|(_, s)| s)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, s) in &self.lets {
            writeln!(f, "let {n} = {s} in")?;
        }
        writeln!(f, "{}", self.main)
    }
}
