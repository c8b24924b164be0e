//! Reading an input file (scenario, program, tour, keymap) the one way every one is read:
//! at most [`MAX_INPUT_BYTES`] (a larger file, or `/dev/zero`, is refused after reading
//! one byte more, not after reading gigabytes), and as UTF-8 text, a bad byte named by
//! its line and column.

use std::io::Read;
use std::path::Path;

use super::model::ScenarioError;

/// The largest input file: every real one is a few KiB.
pub const MAX_INPUT_BYTES: u64 = 16 << 20;

/// The text of `path`, a `what` ("scenario file", "program file", …), or why it cannot be
/// read; `hint` is appended to a missing file's reason.
pub fn read_text(path: &Path, what: &str, hint: &str) -> Result<String, ScenarioError> {
    let origin = path.display().to_string();
    let refuse = |location, reason: String| ScenarioError {
        origin: origin.clone(),
        location,
        field: None,
        reason,
    };
    let mut bytes = Vec::new();
    let read = std::fs::File::open(path).and_then(|f| f.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes));
    if let Err(e) = read {
        let hint = if e.kind() == std::io::ErrorKind::NotFound {
            hint
        } else {
            ""
        };
        return Err(refuse(None, format!("cannot read {what}: {e}{hint}")));
    }
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(refuse(
            None,
            format!("cannot read {what}: larger than {} MiB", MAX_INPUT_BYTES >> 20),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        // The prefix before the bad byte is valid UTF-8.
        let before = std::str::from_utf8(&bytes[..valid]).unwrap_or_default();
        refuse(
            Some(super::raw::line_col(before, valid)),
            format!("cannot read {what}: not UTF-8 text (byte 0x{:02x})", bytes[valid]),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_byte_is_named_by_line_and_column_and_a_huge_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, b"ab\n\xc3\xa9x\xffz").unwrap();
        let e = read_text(&p, "program file", "").unwrap_err();
        assert_eq!(e.location, Some((2, 3)), "{e}");
        assert!(
            e.to_string()
                .contains(":2:3: cannot read program file: not UTF-8"),
            "{e}"
        );
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(MAX_INPUT_BYTES + 1).unwrap();
        let e = read_text(&p, "scenario file", "").unwrap_err();
        assert!(e.reason.contains("larger than 16 MiB"), "{e}");
        let e = read_text(Path::new("/dev/zero"), "keymap", "").unwrap_err();
        assert!(e.reason.contains("larger than 16 MiB"), "{e}");
    }
}
