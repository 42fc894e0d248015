//! Diagnostics shared by every compile stage: a message, the span it is
//! about, optional extra labels and a hint. Rendered as file:line:col with the
//! source line and a caret, by `codespan-reporting`.

use codespan_reporting::diagnostic::{Diagnostic as CsDiag, Label};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term;

/// A byte range of a source text.
pub type Span = std::ops::Range<usize>;

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
///
/// A UTF-8 byte order mark at the start of the text is dropped, so offsets
/// and columns count from the first character after it.
#[derive(Clone, Debug)]
pub struct Source {
    pub name: String,
    pub text: String,
    /// Byte offset of the start of every line (the first is 0), for
    /// `line_col` by binary search instead of a rescan per lookup.
    line_starts: Vec<usize>,
}

impl Source {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let mut text: String = text.into();
        if text.starts_with('\u{feff}') {
            text.drain(..'\u{feff}'.len_utf8());
        }
        let line_starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        Source { name: name.into(), text, line_starts }
    }

    /// 1-based line and column of a byte offset (column counts characters).
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = clamp_to_char_boundary(&self.text, offset);
        // The last line start at or before `offset`.
        let line = self.line_starts.partition_point(|&s| s <= offset).max(1);
        let line_start = self.line_starts[line - 1];
        let col = self.text[line_start..offset].chars().count() + 1;
        (line, col)
    }

    /// Byte offset of a 1-based line and column (clamped to the text).
    pub fn offset_of(&self, line: usize, col: usize) -> usize {
        let Some(&start) = line.checked_sub(1).and_then(|l| self.line_starts.get(l)) else {
            return self.text.len();
        };
        let end = self.line_starts.get(line).copied().unwrap_or(self.text.len());
        let within: usize = self.text[start..end].chars().take(col.saturating_sub(1)).map(char::len_utf8).sum();
        start + within
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

/// At most this many diagnostics are rendered; the rest are counted in a
/// final line ("and N more errors"), so a broken or hostile file cannot
/// flood the terminal.
pub const MAX_RENDERED_DIAGNOSTICS: usize = 50;

/// Source lines longer than this (in bytes) are not shown whole: the
/// snippet is a window of the line around the culprit, with `…` marking the
/// cut ends, so a one-line megabyte file does not print a megabyte per error.
pub const MAX_SHOWN_LINE: usize = 240;

/// Render diagnostics as plain text (no colours), one after the other; after
/// [`MAX_RENDERED_DIAGNOSTICS`] of them, only a count of the others.
pub fn render(source: &Source, diags: &[Diagnostic]) -> String {
    let file = SimpleFile::new(source.name.as_str(), source.text.as_str());
    let config = term::Config::default();
    let mut out = String::new();
    for d in diags.iter().take(MAX_RENDERED_DIAGNOSTICS) {
        let long_line = std::iter::once(&d.span).chain(d.notes.iter().map(|(s, _)| s)).any(|s| {
            let (l, _) = source.line_col(s.start);
            source.line_len(l) > MAX_SHOWN_LINE
        });
        if long_line {
            render_clipped(source, d, &config, &mut out);
            continue;
        }
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
    if diags.len() > MAX_RENDERED_DIAGNOSTICS {
        let more = diags.len() - MAX_RENDERED_DIAGNOSTICS;
        out.push_str(&format!("error: and {more} more error{} (only the first {MAX_RENDERED_DIAGNOSTICS} are shown)\n", if more == 1 { "" } else { "s" }));
    }
    out
}

impl Source {
    /// Length in bytes of 1-based line `line` (without its newline).
    fn line_len(&self, line: usize) -> usize {
        let start = self.line_starts[line - 1];
        let end = self.line_starts.get(line).map_or(self.text.len(), |&e| e - 1);
        end.saturating_sub(start)
    }
}

/// One window of one source line, shown as if it were the whole file, with
/// the true line and column numbers.
struct Window<'s> {
    name: &'s str,
    text: String,
    line: usize,
    /// 1-based column, in the real line, of the first character after the
    /// leading `…` (or of the first character when nothing is cut).
    first_col: usize,
    /// Bytes of the leading `…` (0 or 3).
    lead: usize,
}

impl<'a> codespan_reporting::files::Files<'a> for Window<'a> {
    type FileId = ();
    type Name = &'a str;
    type Source = &'a str;
    fn name(&'a self, (): ()) -> Result<&'a str, codespan_reporting::files::Error> {
        Ok(self.name)
    }
    fn source(&'a self, (): ()) -> Result<&'a str, codespan_reporting::files::Error> {
        Ok(&self.text)
    }
    fn line_index(&'a self, (): (), _: usize) -> Result<usize, codespan_reporting::files::Error> {
        Ok(0)
    }
    fn line_number(&'a self, (): (), _: usize) -> Result<usize, codespan_reporting::files::Error> {
        Ok(self.line)
    }
    fn column_number(&'a self, (): (), _: usize, byte_index: usize) -> Result<usize, codespan_reporting::files::Error> {
        let at = clamp_to_char_boundary(&self.text, byte_index.max(self.lead));
        Ok(self.first_col + self.text[self.lead..at].chars().count())
    }
    fn line_range(&'a self, (): (), _: usize) -> Result<Span, codespan_reporting::files::Error> {
        Ok(0..self.text.len())
    }
}

/// Render `d`, whose place is on a very long line, with a window of that line
/// around its primary span; notes elsewhere are listed by location.
fn render_clipped(source: &Source, d: &Diagnostic, config: &term::Config, out: &mut String) {
    let text = &source.text;
    let span = clamp_span(text, &d.span);
    let (line, col) = source.line_col(span.start);
    let line_start = source.line_starts[line - 1];
    let line_end = line_start + source.line_len(line);
    let win_start = clamp_to_char_boundary(text, span.start.saturating_sub(MAX_SHOWN_LINE / 3).max(line_start));
    let win_end = clamp_to_char_boundary(text, (span.start + 2 * MAX_SHOWN_LINE / 3).min(line_end));
    let lead = if win_start > line_start { "…" } else { "" };
    let tail = if win_end < line_end { "…" } else { "" };
    let window = Window {
        name: &source.name,
        text: format!("{lead}{}{tail}", &text[win_start..win_end]),
        line,
        first_col: col - text[win_start..span.start].chars().count(),
        lead: lead.len(),
    };
    let shift = |s: &Span| -> Option<Span> {
        (s.start >= win_start && s.start <= win_end).then(|| s.start - win_start + lead.len()..s.end.clamp(s.start, win_end) - win_start + lead.len())
    };
    let mut labels = vec![Label::primary((), shift(&span).unwrap_or(lead.len()..lead.len())).with_message(d.label.clone())];
    let mut notes = vec![];
    for (s, t) in &d.notes {
        match shift(&clamp_span(text, s)) {
            Some(w) => labels.push(Label::secondary((), w).with_message(t.clone())),
            None => notes.push(format!("note: {}: {t}", source.location(s.start))),
        }
    }
    if let Some(h) = &d.hint {
        notes.push(format!("hint: {h}"));
    }
    let cs = CsDiag::error().with_message(d.message.clone()).with_labels(labels).with_notes(notes);
    let _ = term::emit_to_string(out, config, &window, &cs);
}

/// The candidate closest to `name` for a "did you mean" hint: the fewest
/// insertions, deletions, substitutions and swaps of neighbours (optimal
/// string alignment, so `cuont` is one swap from `count`), at most a third
/// of `name`'s length (at least 1); of equally close candidates, one of
/// `name`'s length (a swap or a wrong letter is likelier than a lost one:
/// `tahn` is `tanh`, not `tan`), then the first. At most `limit` candidates
/// of a near enough length are compared.
pub fn closest_name<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>, limit: usize) -> Option<&'a str> {
    let chars = name.chars().count();
    let max_d = (name.len() / 3).max(1);
    let mut best: Option<((usize, usize), &str)> = None;
    for c in candidates.into_iter().filter(|c| c.chars().count().abs_diff(chars) <= max_d && *c != name).take(limit) {
        let d = strsim::osa_distance(name, c);
        let key = (d, c.chars().count().abs_diff(chars));
        if d <= max_d && best.is_none_or(|(k, _)| key < k) {
            best = Some((key, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The old definition: a rescan from the start.
    fn line_col_naive(text: &str, offset: usize) -> (usize, usize) {
        let offset = clamp_to_char_boundary(text, offset);
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map(|p| p + 1).unwrap_or(0);
        (line, text[line_start..offset].chars().count() + 1)
    }

    #[test]
    fn line_col_agrees_with_a_rescan() {
        for text in ["", "a", "\n", "ab\ncd\n\nefg", "é∑x\n\u{1F600}y\r\nz\n"] {
            let s = Source::new("t", text);
            for off in 0..=text.len() + 2 {
                let (l, c) = s.line_col(off);
                assert_eq!((l, c), line_col_naive(text, off), "{text:?} at {off}");
                if text.is_char_boundary(off.min(text.len())) && off <= text.len() {
                    assert_eq!(s.offset_of(l, c), off, "{text:?} at {off}");
                }
            }
        }
        let s = Source::new("t", "ab\ncd");
        assert_eq!(s.offset_of(0, 1), 5);
        assert_eq!(s.offset_of(9, 1), 5);
        assert_eq!(s.offset_of(1, 99), 3);
        assert_eq!(s.location(4), "t:2:2");
    }

    #[test]
    fn byte_order_mark_is_dropped() {
        let s = Source::new("t", "\u{feff}def\nx");
        assert_eq!(s.text, "def\nx");
        assert_eq!(s.line_col(0), (1, 1));
        // Only at the start.
        assert_eq!(Source::new("t", "a\u{feff}").text, "a\u{feff}");
    }

    #[test]
    fn long_lines_are_shown_in_a_window() {
        let text = format!("def f = {}y + x\nnext", "x + ".repeat(100_000));
        let s = Source::new("t.ard", text.clone());
        let at = text.find('y').unwrap();
        let d = Diagnostic::new("unknown name `y`", at..at + 1).label("here").note(0..3, "in this").hint("h");
        let out = render(&s, &[d]);
        assert!(out.len() < 2000, "{out}");
        assert!(out.contains("t.ard:1:400009"), "{out}");
        assert!(out.contains("…x + x + ") && out.contains("y + x"), "{out}");
        assert!(out.contains("note: t.ard:1:1: in this"), "{out}");
        assert!(out.contains("= hint: h"), "{out}");
        // The caret is under the `y`.
        let lines: Vec<&str> = out.lines().collect();
        let src = lines.iter().position(|l| l.contains("y + x")).unwrap();
        let chars_before = |l: &str, c: char| l[..l.find(c).unwrap()].chars().count();
        assert_eq!(chars_before(lines[src + 1], '^'), chars_before(lines[src], 'y'), "{out}");
        // At the start of a long line: no leading `…`.
        let d = Diagnostic::new("bad", 4..7).label("here");
        let out = render(&s, &[d]);
        assert!(out.contains("t.ard:1:5") && out.contains("│ def f = x") && out.contains("^^^ here"), "{out}");
        // Short lines are shown whole.
        let s = Source::new("t.ard", "def f = y\n");
        let out = render(&s, &[Diagnostic::new("bad", 8..9)]);
        assert!(out.contains("1 │ def f = y\n"), "{out}");
    }

    #[test]
    fn rendering_is_capped() {
        let s = Source::new("t", "abc\n");
        let d = |i: usize| Diagnostic::new(format!("problem {i}"), 0..1);
        let out = render(&s, &(0..120).map(d).collect::<Vec<_>>());
        assert_eq!(out.matches("error: problem").count(), MAX_RENDERED_DIAGNOSTICS);
        assert!(out.ends_with("error: and 70 more errors (only the first 50 are shown)\n"), "{out}");
        let out = render(&s, &(0..51).map(d).collect::<Vec<_>>());
        assert!(out.contains("and 1 more error (only"), "{out}");
        let out = render(&s, &(0..50).map(d).collect::<Vec<_>>());
        assert!(!out.contains("more error"), "{out}");
    }
}
