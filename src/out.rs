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

/// A progress bar on standard error, drawn only where that is a terminal: `what`, the bar,
/// how many `unit`s of `len` are done, the rate in whole units a second, the time left.
pub fn progress(len: u64, what: &str, unit: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    let per = unit.to_string();
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{msg:>10}} [{{bar:40}}] {{pos}}/{{len}} {unit}, {{rate}}, eta {{eta}}"
        ))
        .expect("valid template")
        // indicatif's {per_sec} prints four decimals ("26,843.0003/s"): whole units.
        .with_key(
            "rate",
            move |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0} {per}/s", state.per_sec());
            },
        )
        .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}
