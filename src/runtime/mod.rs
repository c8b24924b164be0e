//! Runtimes execute step programs. `sim` models CUDA's stream and event semantics on the
//! CPU, deterministically.

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod sim;

use std::fmt;

/// What `--runtime cuda` says in a binary built without the `cuda` feature.
pub const NO_CUDA: &str = "--runtime cuda: this binary was built without CUDA support; build it with \
     `cargo build --release --features cuda` on a machine with the CUDA toolkit (see the README)";

/// How the cuda runtime aligns the devices' clocks on the timeline (shown in the UI).
pub const GPU_CLOCK_NOTE: &str = "GPU times: CUDA timing events, placed on the host clock by one anchor event \
     per device recorded on an idle stream (it completes on submission: error ≈ a few µs); idle time \
     between separate runs (steps taken one by one) is cut out";

/// What watching costs on GPUs (shown in the UI; the sim's observations change nothing).
pub const GPU_OBSERVE_NOTE: &str = "Observing synchronises: every frame, step and check waits for the GPUs to \
     finish the steps it shows (on the sim, watching never changes the run)";

/// A call that failed, named as the learner wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpError {
    /// `None` during setup.
    pub step: Option<u64>,
    pub thread: usize,
    pub op_index: usize,
    /// The call, rendered as CUDA code.
    pub call: String,
    /// The driver's error name.
    pub error: String,
    /// Why, in plain words.
    pub why: String,
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let when = self.step.map_or("setup".to_string(), |s| format!("step {s}"));
        write!(
            f,
            "{when}, host thread {t} (dev{t}), call {i}: `{call}` failed: {err} ({why})",
            t = self.thread,
            i = self.op_index,
            call = self.call,
            err = self.error,
            why = self.why
        )
    }
}

impl std::error::Error for OpError {}
