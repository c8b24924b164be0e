//! The program language's tokens.

use std::ops::Range;

use crate::program::lang::excerpt;

/// A syntax error: where (byte offsets) and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    pub span: Range<usize>,
    pub reason: String,
}

pub(super) fn err<T>(span: Range<usize>, reason: impl Into<String>) -> Result<T, SyntaxError> {
    Err(SyntaxError {
        span,
        reason: reason.into(),
    })
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Ident(String),
    Num(i64),
    /// Punctuation and operators: `(`, `<<<`, `&&`, `++`, …
    Sym(&'static str),
    /// `#pragma omp barrier`
    Barrier,
}

const SYMS: [&str; 27] = [
    "<<<", ">>>", "&&", "||", "==", "!=", "<=", ">=", "++", "(", ")", "{", "}", "[", "]", ";", ",", "+", "-",
    "*", "/", "%", "<", ">", "=", "!", "&",
];

/// Whether `c` ends a line: `\n`, and `\r` alone or before `\n` (as C++ compilers read
/// it), so that a `//` comment ends where the compiler of an export would end it.
pub fn is_line_break(c: char) -> bool {
    c == '\n' || c == '\r'
}

/// The end of the line `at` is on: the offset of its line break, or the text's end.
pub fn line_end(text: &str, at: usize) -> usize {
    let at = at.min(text.len());
    text[at..].find(is_line_break).map_or(text.len(), |e| at + e)
}

/// The tokens of `text`, and the spans of the `//` comments (each to its line's end, the break excluded)
/// pushed onto `comments`.
pub(super) fn lex_with_comments(
    text: &str,
    comments: &mut Vec<Range<usize>>,
) -> Result<Vec<(Tok, Range<usize>)>, SyntaxError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if text[i..].starts_with("//") {
            let end = line_end(text, i);
            comments.push(i..end);
            i = end;
        } else if text[i..].starts_with("/*") {
            let end = text[i + 2..].find("*/").ok_or(SyntaxError {
                span: i..i + 2,
                reason: "a comment that never ends (no */)".into(),
            })?;
            i += end + 4;
        } else if c == b'#' {
            let line_end = line_end(text, i);
            let line = &text[i + 1..line_end];
            let line = match line.find("//") {
                Some(c) => {
                    comments.push(i + 1 + c..line_end);
                    &line[..c]
                }
                None => line,
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            if words != ["pragma", "omp", "barrier"] {
                return err(i..line_end, "the only directive is `#pragma omp barrier`");
            }
            out.push((Tok::Barrier, i..line_end));
            i = line_end;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            // `0x10`, `1e9`, `1.5`, `10u`: not read as `0` and a name after it.
            if i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                let end = i + b[i..]
                    .iter()
                    .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_' || *c == b'.'))
                    .unwrap_or(b.len() - i);
                return err(
                    start..end,
                    format!(
                        "`{}`: numbers are decimal integers (no 0x, exponent, fraction or suffix)",
                        excerpt(&text[start..end])
                    ),
                );
            }
            let n = text[start..i].parse().map_err(|_| SyntaxError {
                span: start..i,
                reason: "a number too large".into(),
            })?;
            out.push((Tok::Num(n), start..i));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Ident(text[start..i].to_string()), start..i));
        } else if let Some(s) = SYMS.iter().find(|s| text[i..].starts_with(**s)) {
            out.push((Tok::Sym(s), i..i + s.len()));
            i += s.len();
        } else {
            let ch = text[i..].chars().next().unwrap_or('?');
            return err(
                i..i + ch.len_utf8(),
                format!("`{}` has no meaning here", excerpt(ch.encode_utf8(&mut [0; 4]))),
            );
        }
    }
    Ok(out)
}
