//! `runtime::cuda` in a binary built without the `cuda` feature: the same names, and every
//! way in says how to get CUDA support, so callers never write `#[cfg]`.

use anyhow::Result;
use std::sync::Arc;

use crate::decomp::{Gathered, Reference};
use crate::error::UsageError;
use crate::program::Program;
use crate::runtime::seam::{MicroView, NO_CUDA, Runtime};
use crate::scenario::Scenario;
use crate::snapshot::Partial;
use crate::trace::TraceRecord;

fn refused<T>() -> Result<T> {
    Err(UsageError(NO_CUDA.into()).into())
}

/// A rank other than 0 of several processes: needs CUDA support.
pub fn follow(
    _: &Scenario,
    _: Program,
    _gpu: i32,
    _: &crate::world::World,
    _build: &dyn Fn(&str) -> Result<Program>,
) -> Result<()> {
    refused()
}

/// Without CUDA support no run uses CUDA: the environment is left as it is.
pub fn default_queues() {}

/// The GPUs visible here: none without CUDA support.
pub fn default_gpus() -> Result<Vec<i32>> {
    refused()
}

/// Whether a program with flags fits the GPUs' hardware queues: without CUDA support no
/// program runs on a GPU, so none is refused here (every way onto a GPU refuses first).
pub fn check_flags(_: &Program, _gpus: &[i32]) -> Result<(), UsageError> {
    Ok(())
}

/// The GPU measurements of `bench --runtime cuda`.
pub mod probe {
    use super::refused;
    use anyhow::Result;

    pub fn gpu_names() -> Result<Vec<String>> {
        refused()
    }
    pub fn copy_bandwidth(_gpu: i32) -> Result<f64> {
        refused()
    }
    pub fn link(_src: i32, _dst: i32) -> Result<(bool, f64, f64, f64)> {
        refused()
    }
    pub fn launch_cost(_gpu: i32) -> Result<f64> {
        refused()
    }

    /// The fused kernel's own runner: no value of it exists here.
    pub enum WideRun {}

    impl WideRun {
        pub fn new(_: &crate::scenario::Scenario, _: &[i32], _k: usize) -> Result<WideRun> {
            refused()
        }
        pub fn check(&mut self, _: &crate::scenario::Scenario, _passes: usize) -> Result<usize> {
            match *self {}
        }
        pub fn time(&mut self, _passes: usize) -> Result<f64> {
            match *self {}
        }
    }
}

/// The cuda runtime, which this binary cannot start: no value of it exists.
pub enum CudaBackend {}

impl CudaBackend {
    pub fn new(_: &Scenario, _: Arc<Program>, _: &[i32], _watched: bool) -> Result<CudaBackend> {
        refused()
    }
}

impl Runtime for CudaBackend {
    fn name(&self) -> &'static str {
        match *self {}
    }
    fn step(&self) -> u64 {
        match *self {}
    }
    fn at_boundary(&self) -> bool {
        match *self {}
    }
    fn run_batch(&mut self, _: u64) -> Result<()> {
        match *self {}
    }
    fn run_to(&mut self, _: u64) -> Result<()> {
        match *self {}
    }
    fn next_boundary(&self) -> u64 {
        match *self {}
    }
    fn micro_step(&mut self) -> Result<()> {
        match *self {}
    }
    fn set_program(&mut self, _: Arc<Program>) -> Result<()> {
        match *self {}
    }
    fn fields(&mut self) -> Result<Gathered> {
        match *self {}
    }
    fn reduce(&mut self, _: &Arc<crate::snapshot::Edges>, _: Option<&Reference>) -> Result<Vec<Partial>> {
        match *self {}
    }
    fn drain_copies(&mut self, _: &mut dyn FnMut(usize, usize, usize, f64)) {
        match *self {}
    }
    fn timeline(&self) -> (Vec<TraceRecord>, Option<u64>) {
        match *self {}
    }
    fn clock_us(&self) -> f64 {
        match *self {}
    }
    fn micro(&mut self, _: bool) -> MicroView {
        match *self {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_way_in_says_how_to_get_cuda_support() {
        let s = crate::scenario::load(None).unwrap();
        let p = std::sync::Arc::new(crate::program::Mode::Events.program(&s.ranges()));
        for e in [
            super::CudaBackend::new(&s, p, &[0], false).err().unwrap(),
            super::default_gpus().unwrap_err(),
        ] {
            assert!(e.to_string().contains("--features cuda"), "{e}");
        }
    }
}
