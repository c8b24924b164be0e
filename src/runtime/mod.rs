//! Runtimes execute step programs. `sim` models CUDA's stream and event semantics on the
//! CPU, deterministically.

mod choice;
#[cfg(feature = "cuda")]
pub mod cuda;
// Without the `cuda` feature the same names exist and say how to get CUDA support:
// callers never write `#[cfg]`.
#[cfg(not(feature = "cuda"))]
#[path = "no_cuda.rs"]
pub mod cuda;
mod seam;
pub mod sim;

pub use choice::{RuntimeChoice, start};
pub use seam::*;
