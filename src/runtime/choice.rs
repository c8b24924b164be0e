//! Which runtime a run drives, and starting it: the one place that knows every runtime.

use anyhow::Result;
use std::sync::Arc;

use super::seam::Runtime;
use crate::program::Program;
use crate::scenario::Scenario;

/// Which runtime a run drives.
#[derive(Debug, Clone, PartialEq)]
pub enum RuntimeChoice {
    /// Virtual GPUs on the CPU; `jitter` shuffles the modelled costs with this seed.
    Sim { jitter: Option<u64> },
    /// Real GPUs: the physical GPU of each logical device.
    Cuda { gpus: Vec<i32> },
}

impl RuntimeChoice {
    /// `sim` or `cuda`.
    pub fn name(&self) -> &'static str {
        match self {
            RuntimeChoice::Sim { .. } => "sim",
            RuntimeChoice::Cuda { .. } => "cuda",
        }
    }
}

/// Starts `choice` on `s` running `program` from step 0. `watched`: a UI looks at it (the
/// cuda runtime then times a window of calls now and then for the timeline). Errors here
/// (no GPU, a bad GPU list) are the user's to fix: callers show them before a UI starts.
pub fn start(
    choice: &RuntimeChoice,
    s: &Scenario,
    program: Arc<Program>,
    watched: bool,
) -> Result<Box<dyn Runtime>> {
    Ok(match choice {
        RuntimeChoice::Sim { jitter } => Box::new(super::sim::SimBackend::new(s, program, *jitter)?),
        RuntimeChoice::Cuda { gpus } => Box::new(super::cuda::CudaBackend::new(s, program, gpus, watched)?),
    })
}
