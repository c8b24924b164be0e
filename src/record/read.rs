//! Reading a recording, of either version, as a stream: the file opened without waiting (a
//! FIFO must not hang), refused unless it is a regular file, then read a record (binary.rs)
//! or a line (format.rs) at a time through a buffer, every length bounded, so no input makes
//! haloscope read or hold more than the recording's calls.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use anyhow::Result;

use super::ahead::Head;
use super::format::Call;
use super::{binary, format};
use crate::error::UsageError;

/// A recording read: its calls and what the reader noted (a recording cut short).
#[derive(Debug, Default)]
pub struct Recording {
    pub calls: Vec<Call>,
    /// Said of the file as a whole: "ends inside a record at byte N: …".
    pub notes: Vec<String>,
}

/// Opens `path` for reading without blocking (a FIFO with no writer opens at once); anything
/// but a regular file is refused, saying what it is (exit 2).
pub fn open_regular(path: &Path, what: &str) -> Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(|e| UsageError(format!("{what} {}: {e}", path.display())))?;
    let t = file
        .metadata()
        .map_err(|e| UsageError(format!("{what} {}: {e}", path.display())))?
        .file_type();
    if t.is_file() {
        return Ok(file);
    }
    let kind = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    };
    Err(UsageError(format!("{what} {}: not a regular file: {kind}", path.display())).into())
}

/// The recording at `path` (`--recording`), streamed: see [`read`].
pub fn open(path: &Path) -> Result<Recording> {
    let file = open_regular(path, "--recording")?;
    read(path, BufReader::with_capacity(1 << 16, file))
}

/// A recording of either version read from `r`, a record or line at a time; a bad record or
/// line as `file:N: why`, an impossible record length as `file: byte N: why` (exit 2).
pub fn read(path: &Path, mut r: impl BufRead) -> Result<Recording> {
    let head = head(path, &mut r)?;
    known(path, &head)?;
    let (calls, notes) = if binary::is_magic(&head) {
        binary::read(path, r)?
    } else {
        let mut calls = Vec::new();
        let notes = format::each(path, std::io::Cursor::new(head).chain(r), |c| calls.push(c))?;
        (calls, notes)
    };
    Ok(Recording { calls, notes })
}

/// The recording at `path`, read as [`open`] reads it, each call handed to `call` as it is
/// read (none held): what the reader noted.
pub fn each(path: &Path, mut call: impl FnMut(Call)) -> Result<Vec<String>> {
    let file = open_regular(path, "--recording")?;
    let mut r = BufReader::with_capacity(1 << 16, file);
    let head = head(path, &mut r)?;
    known(path, &head)?;
    if binary::is_magic(&head) {
        binary::each(path, r, call)
    } else {
        format::each(path, std::io::Cursor::new(head).chain(r), &mut call)
    }
}

/// [`each`] for the checker's first pass: each call's head (binary.rs reads the values of
/// only the calls [`Head::needs_values`]).
pub fn heads(path: &Path, mut head: impl FnMut(&Head)) -> Result<Vec<String>> {
    let file = open_regular(path, "--recording")?;
    let mut r = BufReader::with_capacity(1 << 16, file);
    let first = self::head(path, &mut r)?;
    known(path, &first)?;
    if binary::is_magic(&first) {
        binary::heads(path, r, head)
    } else {
        format::each(path, std::io::Cursor::new(first).chain(r), |c| {
            head(&Head {
                name: &c.name,
                thread: c.thread,
                seq_in: c.seq_in,
                seq_out: c.seq_out,
                call: Some(&c),
            })
        })
    }
}

/// `head`, a file's first bytes, refused at once unless it begins as a recording does
/// (`haloscope-recording `): whatever follows is never read. A file that ends inside that
/// line is refused saying at which byte.
fn known(path: &Path, head: &[u8]) -> Result<()> {
    const LINE: &[u8] = b"haloscope-recording ";
    if head.starts_with(LINE) && (head.len() == binary::MAGIC.len() || head.ends_with(b"\n")) {
        return Ok(());
    }
    let why = if head.is_empty() {
        "an empty file, not a haloscope recording".to_string()
    } else if LINE.starts_with(head) || head.starts_with(LINE) {
        format!(
            "ends at byte {} inside its first line (`haloscope-recording N`): no calls",
            head.len()
        )
    } else {
        format!(
            "not a haloscope recording: it begins `{}`, not `haloscope-recording 4` (or 3, 2, 1)",
            super::format::clip(&String::from_utf8_lossy(head))
        )
    };
    Err(UsageError(format!("{}: {why}", path.display())).into())
}

/// The first bytes of `r`, as many as version 2's magic line has (fewer if it ends first).
fn head(path: &Path, r: &mut impl BufRead) -> Result<Vec<u8>> {
    let mut head = Vec::with_capacity(binary::MAGIC.len());
    r.take(binary::MAGIC.len() as u64)
        .read_to_end(&mut head)
        .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    Ok(head)
}

/// The calls and host threads of the recording at `path`, read as [`open`] reads it but
/// only counted (`haloscope record`'s closing summary: nothing grows with the calls): a
/// recording cut short counts its whole records; an impossible length is an error naming
/// the file and its byte.
pub fn tally(path: &Path) -> Result<binary::Tally> {
    let file = open_regular(path, "recording")?;
    let mut r = BufReader::with_capacity(1 << 16, file);
    let head = head(path, &mut r)?;
    known(path, &head)?;
    if binary::is_magic(&head) {
        return binary::tally(path, r);
    }
    let mut t = binary::Tally::default();
    format::each(path, std::io::Cursor::new(head).chain(r), |c| {
        t.calls += 1;
        t.threads = t.threads.max(c.thread.saturating_add(1));
        if c.name.starts_with("host_")
            && let Some(sync) = c.opt("sync")
        {
            *t.host.entry(sync).or_default() += 1;
        }
    })?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `haloscope record`'s closing count on a recording whose length is corrupt after the
    /// run: an error naming the byte, never a "capacity overflow" panic or an abort; a
    /// recording cut short counts its whole records.
    #[test]
    fn the_closing_count_of_a_corrupt_recording_is_an_error_naming_its_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.recording");
        let mut f = binary::MAGIC.to_vec();
        f.extend_from_slice(b"\x03\x00pi");
        // A length of 2^63 (the old count allocated it).
        f.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
        f.extend_from_slice(b"\x02\x00");
        std::fs::write(&path, &f).unwrap();
        let e = tally(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: byte 26: a record length of ", path.display())),
            "{e}"
        );
        // Cut inside the third record: the two whole ones (no call among them).
        let mut f = binary::MAGIC.to_vec();
        f.extend_from_slice(b"\x03\x00pi\x03\x00pi\x09\x02");
        std::fs::write(&path, &f).unwrap();
        assert_eq!(tally(&path).unwrap(), binary::Tally::default());
        let r = open(&path).unwrap();
        assert_eq!(r.notes, [binary::cut_note(30)]);
    }
}
