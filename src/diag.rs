//! Diagnostics shared by every compile stage: a message, the span it is
//! about, optional extra labels and a hint. Rendered as file:line:col with the
//! source line and a caret, by `codespan-reporting`.

use crate::syntax::ast::Span;
use codespan_reporting::diagnostic::{Diagnostic as CsDiag, Label};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term;

#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    /// One-line summary, e.g. "mismatched sizes".
    pub message: String,
    /// Where the culprit is.
    pub span: Span,
    /// Text printed under the caret.
    pub label: String,
    /// Further places worth showing (e.g. where a size came from).
    pub notes: Vec<(Span, String)>,
    /// A suggestion of what to do.
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn new(message: impl Into<String>, span: Span) -> Self {
        Diagnostic { message: message.into(), span, label: String::new(), notes: vec![], hint: None }
    }
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
    pub fn note(mut self, span: Span, text: impl Into<String>) -> Self {
        self.notes.push((span, text.into()));
        self
    }
}

/// A source file: its name (as shown in messages) and text.
#[derive(Clone, Debug)]
pub struct Source {
    pub name: String,
    pub text: String,
}

impl Source {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        Source { name: name.into(), text: text.into() }
    }

    /// 1-based line and column of a byte offset (column counts characters).
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = clamp_to_char_boundary(&self.text, offset);
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map(|p| p + 1).unwrap_or(0);
        let col = self.text[line_start..offset].chars().count() + 1;
        (line, col)
    }

    /// Byte offset of a 1-based line and column (clamped to the text).
    pub fn offset_of(&self, line: usize, col: usize) -> usize {
        let mut offset = 0;
        for (i, l) in self.text.split_inclusive('\n').enumerate() {
            if i + 1 == line {
                let within: usize = l.chars().take(col.saturating_sub(1)).map(char::len_utf8).sum();
                return offset + within;
            }
            offset += l.len();
        }
        self.text.len()
    }

    /// `file:line:col` of a byte offset.
    pub fn location(&self, offset: usize) -> String {
        let (l, c) = self.line_col(offset);
        format!("{}:{}:{}", self.name, l, c)
    }
}

fn clamp_to_char_boundary(text: &str, mut offset: usize) -> usize {
    offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

fn clamp_span(text: &str, span: &Span) -> Span {
    let start = clamp_to_char_boundary(text, span.start);
    let end = clamp_to_char_boundary(text, span.end.max(start));
    start..end
}

/// Render diagnostics as plain text (no colours), one after the other.
pub fn render(source: &Source, diags: &[Diagnostic]) -> String {
    let file = SimpleFile::new(source.name.clone(), source.text.clone());
    let config = term::Config::default();
    let mut out = String::new();
    for d in diags {
        let mut labels = vec![Label::primary((), clamp_span(&source.text, &d.span)).with_message(d.label.clone())];
        for (s, t) in &d.notes {
            labels.push(Label::secondary((), clamp_span(&source.text, s)).with_message(t.clone()));
        }
        let mut cs = CsDiag::error().with_message(d.message.clone()).with_labels(labels);
        if let Some(h) = &d.hint {
            cs = cs.with_notes(vec![format!("hint: {h}")]);
        }
        // Writing into a Vec cannot fail; a failure here would only lose the snippet.
        let _ = term::emit_to_string(&mut out, &config, &file, &cs);
    }
    out
}
