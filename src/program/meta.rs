//! What a program file says of itself in its header: the `//!` lines at its top, each
//! `key: value`, a value going on over the lines below it that are indented further.
//!
//! ```text
//! //! summary: Correct: record on the producer's stream, wait on the consumer's stream
//! //! verdict: correct
//! //! order: 1
//! //! lesson:
//! //!     Correct. The producer records an event after the kernel that writes …
//! ```
//!
//! The modes' files carry every key (the mode list, the lesson overlay and the tests read
//! them there); to the language these lines are comments.

/// Whether a program orders every access (`correct`), computes wrong values (`broken`) or
/// stops with a driver error (`fails`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Correct,
    Broken,
    Fails,
}

/// A header's keys; each is `None` where the file does not give it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meta {
    /// One line: what the program is and does.
    pub summary: Option<String>,
    pub verdict: Option<Verdict>,
    /// Where the program is listed among the modes (ascending).
    pub order: Option<u32>,
    /// What it teaches: a few lines, the rules it shows cited by number.
    pub lesson: Option<String>,
}

/// The keys a header may hold.
pub const KEYS: [&str; 4] = ["summary", "verdict", "order", "lesson"];

/// The header of `text`, or the 1-based line of its first fault and why.
pub fn header(text: &str) -> Result<Meta, (usize, String)> {
    let mut meta = Meta::default();
    let mut values: Vec<(usize, &str, Vec<&str>)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some(rest) = line.strip_prefix("//!") else {
            break;
        };
        let (indent, body) = (rest.len() - rest.trim_start().len(), rest.trim());
        match values.last_mut() {
            Some((_, _, lines)) if indent > 1 || body.is_empty() => lines.push(body),
            _ => {
                let Some((key, value)) = body.split_once(':') else {
                    return Err((i + 1, format!("`{body}`: a header line is `key: value`")));
                };
                if !KEYS.contains(&key) {
                    return Err((
                        i + 1,
                        format!("`{key}`: the header's keys are {}", KEYS.join(", ")),
                    ));
                }
                if values.iter().any(|(_, k, _)| *k == key) {
                    return Err((i + 1, format!("`{key}` is given twice")));
                }
                let value = value.trim();
                values.push((
                    i + 1,
                    key,
                    if value.is_empty() { Vec::new() } else { vec![value] },
                ));
            }
        }
    }
    for (line, key, lines) in values {
        let value = lines.join("\n").trim_end().to_string();
        match key {
            "summary" => meta.summary = Some(value),
            "lesson" => meta.lesson = Some(value),
            "order" => {
                let n = value
                    .parse()
                    .map_err(|_| (line, format!("order `{value}`: a whole number")))?;
                meta.order = Some(n);
            }
            _ => {
                meta.verdict = Some(match value.as_str() {
                    "correct" => Verdict::Correct,
                    "broken" => Verdict::Broken,
                    "fails" => Verdict::Fails,
                    v => return Err((line, format!("verdict `{v}`: correct, broken or fails"))),
                })
            }
        }
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_gives_its_keys_and_a_lesson_over_several_lines() {
        let m = header(
            "//! summary: One line\n//! verdict: broken\n//! order: 3\n//! lesson:\n//!     First,\n\
             //!\n//!     then after a blank.\nprogram x;\n//! summary: not the header\n",
        )
        .unwrap();
        assert_eq!(m.summary.as_deref(), Some("One line"));
        assert_eq!(m.verdict, Some(Verdict::Broken));
        assert_eq!(m.order, Some(3));
        assert_eq!(m.lesson.as_deref(), Some("First,\n\nthen after a blank."));
        assert_eq!(header("program x;\n").unwrap(), Meta::default());
    }

    #[test]
    fn a_bad_header_names_its_line() {
        assert_eq!(header("//! verdict: maybe\n").unwrap_err().0, 1);
        assert!(
            header("//! summary: a\n//! sumary: b\n")
                .unwrap_err()
                .1
                .contains("`sumary`")
        );
        assert!(header("//! order: x\n").unwrap_err().1.contains("whole number"));
        assert!(
            header("//! summary: a\n//! summary: b\n")
                .unwrap_err()
                .1
                .contains("twice")
        );
        assert!(header("//! no colon here\n").is_err());
    }
}
