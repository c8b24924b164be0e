//! Errors a caller must tell apart: bad input (exit code 2) versus failures (exit code 1);
//! `dispatch::exit_code` maps them.

use std::fmt;

/// A bad argument or input file that is not a scenario (those are `ScenarioError`).
#[derive(Debug, Clone, PartialEq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The UI was ended by a signal (the terminal is restored): exit 128 + its number.
#[derive(Debug, Clone, PartialEq)]
pub struct Signalled(pub i32);

impl fmt::Display for Signalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            1 => "SIGHUP",
            2 => "SIGINT",
            3 => "SIGQUIT",
            15 => "SIGTERM",
            _ => "a signal",
        };
        write!(f, "stopped by {name} (signal {})", self.0)
    }
}

impl std::error::Error for Signalled {}

/// A failure already reported on standard output (the `--json` document says what was
/// found): exit with this code and print nothing more.
#[derive(Debug, Clone, PartialEq)]
pub struct Reported(pub u8);

impl fmt::Display for Reported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "reported on standard output (exit {})", self.0)
    }
}

impl std::error::Error for Reported {}

/// A number as a message shows it: plain where short, in exponent form where huge or tiny
/// (`1e308`, not 309 digits).
pub fn num(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-4..1e9).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}
