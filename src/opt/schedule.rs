//! The schedule text syntax (parsed by `parse`, printed by `Display`).
//! TEMPORARY minimal parser, replaced by the full one (errors, limits).

use super::strategy::{Schedule, Strategy};

#[derive(Debug)]
pub struct ScheduleError {
    pub rendered: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl std::fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.rendered)
    }
}

impl std::error::Error for ScheduleError {}

pub fn parse(name: &str, text: &str, known_rules: &[&str]) -> Result<Schedule, ScheduleError> {
    let stripped: String = text.lines().map(|l| l.split("--").next().unwrap_or("")).collect::<Vec<_>>().join(" ");
    let mut toks = vec![];
    let cs: Vec<char> = stripped.chars().collect();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let s = i;
            while i < cs.len() && (cs[i].is_alphanumeric() || cs[i] == '_') {
                i += 1;
            }
            toks.push(cs[s..i].iter().collect::<String>());
        } else if c == '<' && cs.get(i + 1) == Some(&'+') {
            toks.push("<+".into());
            i += 2;
        } else {
            toks.push(c.to_string());
            i += 1;
        }
    }
    let err = |m: String| ScheduleError { rendered: format!("{name}: {m}"), line: 1, column: 1, message: m };
    let mut p = P { t: toks, k: 0, lets: vec![], rules: known_rules };
    let mut lets = vec![];
    while p.peek() == Some("let") {
        p.k += 1;
        let n = p.next().ok_or_else(|| err("name".into()))?;
        p.expect("=").map_err(err)?;
        let s = p.choice().map_err(err)?;
        p.expect("in").map_err(err)?;
        p.lets.push(n.clone());
        lets.push((n, s));
    }
    let main = p.choice().map_err(err)?;
    Ok(Schedule { lets, main })
}

struct P<'a> {
    t: Vec<String>,
    k: usize,
    lets: Vec<String>,
    rules: &'a [&'a str],
}

impl P<'_> {
    fn peek(&self) -> Option<&str> {
        self.t.get(self.k).map(|s| s.as_str())
    }
    fn next(&mut self) -> Option<String> {
        self.k += 1;
        self.t.get(self.k - 1).cloned()
    }
    fn expect(&mut self, s: &str) -> Result<(), String> {
        if self.peek() == Some(s) {
            self.k += 1;
            Ok(())
        } else {
            Err(format!("expected `{s}`"))
        }
    }
    fn choice(&mut self) -> Result<Strategy, String> {
        let a = self.seq()?;
        if self.peek() == Some("<+") {
            self.k += 1;
            return Ok(Strategy::lchoice(a, self.choice()?));
        }
        Ok(a)
    }
    fn seq(&mut self) -> Result<Strategy, String> {
        let a = self.atom()?;
        if self.peek() == Some(";") {
            self.k += 1;
            return Ok(Strategy::seq(a, self.seq()?));
        }
        Ok(a)
    }
    fn atom(&mut self) -> Result<Strategy, String> {
        let t = self.next().ok_or("expected a strategy")?;
        match t.as_str() {
            "(" => {
                let s = self.choice()?;
                self.expect(")")?;
                Ok(s)
            }
            "id" => Ok(Strategy::Id),
            "fail" => Ok(Strategy::Fail),
            n if Strategy::UNARY.contains(&n) => {
                self.expect("(")?;
                let s = self.choice()?;
                self.expect(")")?;
                Ok(Strategy::unary(n, s).expect("unary"))
            }
            n if self.lets.iter().any(|l| l == n) => Ok(Strategy::Ref(n.to_string())),
            n if self.rules.contains(&n) => Ok(Strategy::Rule(n.to_string())),
            n => Err(format!("unknown rule `{n}`")),
        }
    }
}
