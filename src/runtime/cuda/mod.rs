//! The cuda runtime: the same step programs on real GPUs, one host thread per logical
//! device, through the driver API: `sys` (raw calls), `owned` and `launch` (the owning
//! types over them) hold all the unsafe code; the rest of the crate denies it.
//!
//! Each thread makes its device's primary context current, owns its streams (created
//! non-blocking, so nothing synchronises behind the program's back), buffers, module and
//! the events the program creates on its device, and issues exactly its part of the
//! program. Host barriers are real barriers between the threads. Peer copies are timed
//! with a pair of timing events around each; every other event is ordering-only.

mod backend;
mod buffers;
mod device;
mod exec;
#[allow(unsafe_code)]
mod launch;
mod nccl;
#[allow(unsafe_code)]
mod nccl_sys;
#[allow(unsafe_code)]
mod owned;
mod plane;
pub mod probe;
mod remote;
mod runtime;
mod shared;
mod snapshot;
#[allow(unsafe_code)]
mod sys;
mod watchdog;
mod wide;

pub use backend::CudaBackend;

pub use runtime::{CudaRuntime, check_flags, default_gpus, default_queues, visible};

/// A rank other than 0 of several processes: see [`CudaRuntime::follow`].
pub fn follow(
    s: &crate::scenario::Scenario,
    program: crate::program::Program,
    gpu: i32,
    world: &crate::world::World,
    build: &dyn Fn(&str) -> anyhow::Result<crate::program::Program>,
) -> anyhow::Result<()> {
    CudaRuntime::follow(s, program, gpu, world, build)
}
pub use shared::{CopyTime, MicroPart, Ran};
