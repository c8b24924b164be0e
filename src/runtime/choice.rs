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

    /// The same runtime for `n` logical devices: on GPUs, the distinct GPUs of the list in
    /// order, the devices over them in blocks (2 → 0,1; 4 → 0,0,1,1 on two GPUs).
    pub fn for_devices(&self, n: usize) -> RuntimeChoice {
        match self {
            RuntimeChoice::Sim { jitter } => RuntimeChoice::Sim { jitter: *jitter },
            RuntimeChoice::Cuda { gpus } => {
                let mut distinct: Vec<i32> = Vec::new();
                for g in gpus {
                    if !distinct.contains(g) {
                        distinct.push(*g);
                    }
                }
                let k = distinct.len().max(1);
                RuntimeChoice::Cuda {
                    gpus: (0..n)
                        .map(|d| distinct.get(d * k / n.max(1)).copied().unwrap_or(0))
                        .collect(),
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn for_devices_spreads_devices_over_the_listed_gpus_in_blocks() {
        let two = RuntimeChoice::Cuda {
            gpus: vec![3, 5, 3, 5],
        };
        assert_eq!(two.for_devices(2), RuntimeChoice::Cuda { gpus: vec![3, 5] });
        assert_eq!(
            two.for_devices(4),
            RuntimeChoice::Cuda {
                gpus: vec![3, 3, 5, 5]
            }
        );
        assert_eq!(two.for_devices(3), RuntimeChoice::Cuda { gpus: vec![3, 3, 5] });
        let one = RuntimeChoice::Cuda { gpus: vec![0] };
        assert_eq!(one.for_devices(2), RuntimeChoice::Cuda { gpus: vec![0, 0] });
        let sim = RuntimeChoice::Sim { jitter: Some(7) };
        assert_eq!(sim.for_devices(5), sim);
    }
}
