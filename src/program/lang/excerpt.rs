//! Input quoted in a message: at most [`MAX_QUOTE`] bytes of it, control characters
//! escaped, so that a huge or hostile file cannot make a huge or terminal-moving error.

/// The most bytes of its input a message quotes.
pub const MAX_QUOTE: usize = 200;

/// At most [`MAX_QUOTE`] bytes of `s` (cut at a character's start, `…` where cut), with
/// control and bidirectional characters written as escapes (`\n`, `\u{1b}`).
pub fn excerpt(s: &str) -> String {
    let mut cut = s.len().min(MAX_QUOTE);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = String::with_capacity(cut + 8);
    for c in s[..cut].chars() {
        if c.is_control() || invisible(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if cut < s.len() {
        out.push('…');
    }
    out
}

/// Bidirectional and zero-width format characters: they reorder or hide what a terminal
/// shows.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excerpt_is_bounded_cut_on_a_character_and_escaped() {
        assert_eq!(excerpt("a + b"), "a + b");
        assert_eq!(excerpt("a\u{1b}[2J\r"), "a\\u{1b}[2J\\r");
        assert_eq!(excerpt("x\u{202e}y"), "x\\u{202e}y");
        let long = "é".repeat(1000);
        let e = excerpt(&long);
        assert!(e.ends_with('…'), "{e}");
        assert_eq!(e.len(), MAX_QUOTE + '…'.len_utf8());
        assert_eq!(excerpt(&"x".repeat(MAX_QUOTE)), "x".repeat(MAX_QUOTE));
    }
}
