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

/// The hardware queues a GPU gives its streams where the user has not chosen: flag waits
/// of several devices on one GPU need one per stream (`runtime.rs`, `queues_enough`), and
/// 32 is the most a GPU gives.
const QUEUES: &str = "32";

/// Whether [`default_queues`] set the variable (the runtime's notes then say so).
static QUEUES_SET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets `CUDA_DEVICE_MAX_CONNECTIONS` to 32 where it is unset, before CUDA starts (while
/// the process has one thread).
pub fn default_queues() {
    const VAR: &str = "CUDA_DEVICE_MAX_CONNECTIONS";
    if std::env::var_os(VAR).is_none() && sys::set_env_single_threaded(VAR, QUEUES) {
        QUEUES_SET.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What the runtime's notes say when haloscope chose the GPUs' hardware queues.
fn queues_note() -> Option<String> {
    QUEUES_SET.load(std::sync::atomic::Ordering::Relaxed).then(|| {
        format!(
            "CUDA_DEVICE_MAX_CONNECTIONS was not set: haloscope set it to {QUEUES}, so that flag \
             waits of several devices on one GPU cannot hang (set it to choose another value)"
        )
    })
}
pub use runtime::{CudaRuntime, check_flags, default_gpus, visible};

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
