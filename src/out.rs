//! Standard output for the commands that print. A reader that goes away (`haloscope
//! --list | head -1`) ends the command quietly, as other Unix tools end, instead of a
//! panic from `println!`: writes fail with [`Closed`], which `main` turns into exit 141
//! (what a shell reports for SIGPIPE) and no message. The process keeps SIGPIPE ignored,
//! as Rust sets it, so that a closed socket of the rendezvous is an error and not a kill.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static WROTE: AtomicBool = AtomicBool::new(false);

/// Standard output was closed by its reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output was closed")
    }
}

impl std::error::Error for Closed {}

/// The exit status of a command whose reader went away: 128 + SIGPIPE, as a shell shows
/// a process that SIGPIPE ended.
pub const CLOSED_STATUS: u8 = 141;

/// Writes `text` to standard output and flushes it.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut o = std::io::stdout().lock();
    WROTE.store(true, Ordering::Relaxed);
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Closed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to standard output")),
    }
}

/// Writes `text` and a newline to standard output.
pub fn line(text: impl fmt::Display) -> anyhow::Result<()> {
    print(&format!("{text}\n"))
}

/// Whether anything was written to standard output (a `--json` failure prints its error
/// as the one JSON document only when nothing was).
pub fn wrote() -> bool {
    WROTE.load(Ordering::Relaxed)
}
