//! A step is a program: for each host thread (one per device) the list of CUDA calls it
//! issues every step. Both runtimes execute exactly this list; the UI shows it as code.

pub mod modes;
mod ops;
pub mod rules;

pub use modes::Mode;
pub use ops::*;
