//! A step is a program: for each host thread (one per device) the list of CUDA calls it
//! issues every step. Both runtimes execute exactly this list; the UI shows it as code.

pub mod file;
pub mod lang;
pub mod meta;
pub mod modes;
mod ops;
#[cfg(test)]
pub(crate) mod oracle;
pub mod rules;

pub use file::{ProgramFile, Watch, build, build_for, check_args};
pub use modes::Mode;
pub use ops::*;
