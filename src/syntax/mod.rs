//! Lexing and parsing of `.ard` source into the surface syntax tree, and
//! reading a source file within the parser's size limit.

pub mod ast;
pub mod free;
pub mod lexer;
pub mod parser;

pub use parser::{MAX_SOURCE_BYTES, parse, parse_checkable};

use crate::diag::{Diagnostic, Source};

/// Read a source file, at most [`MAX_SOURCE_BYTES`] plus one bytes of it. `Ok(Err((source, diagnostic)))` when the file can be
/// read but not used: it is too large (the source is then its first line),
/// or it is not UTF-8 (the diagnostic points at the first bad byte).
pub fn read_source(path: &std::path::Path, name: &str) -> std::io::Result<Result<Source, (Source, Diagnostic)>> {
    use std::io::Read;
    let max = MAX_SOURCE_BYTES;
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    let mut bytes = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > max {
        let first_line = bytes.iter().take(200).take_while(|&&b| b != b'\n').copied().collect::<Vec<u8>>();
        let cut = if bytes.get(first_line.len()).is_some_and(|&b| b != b'\n') { "…" } else { "" };
        let shown = Source::new(name, format!("{}{cut}", String::from_utf8_lossy(&first_line)));
        let len = meta.is_file().then(|| meta.len().max(bytes.len() as u64));
        return Ok(Err((shown, parser::source_too_large(len))));
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Ok(Source::new(name, text))),
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let bytes = e.into_bytes();
            let bad = bytes[at];
            // The text before `at` is unchanged, and the bad sequence becomes one U+FFFD.
            let shown = Source::new(name, String::from_utf8_lossy(&bytes).into_owned());
            let at = at - (bytes.len() - bytes.strip_prefix(b"\xef\xbb\xbf").map_or(bytes.len(), <[u8]>::len));
            let d = Diagnostic::new("source file is not valid UTF-8", at..at + '\u{fffd}'.len_utf8())
                .label(format!("byte 0x{bad:02x} does not start a valid UTF-8 character"))
                .hint("arden reads source files as UTF-8; convert the file, e.g. with `iconv -f latin1 -t utf-8`");
            Ok(Err((shown, d)))
        }
    }
}
