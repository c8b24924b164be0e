//! The numbers the CUDA kernels (kernels/*.cu) and the Rust code must agree on, in one
//! place: build.rs passes each to nvcc as `-DNAME=value`, and the kernels refuse to
//! compile without them.

/// Cells per block of `fused_steps` (a tile).
pub const TILE: usize = 2048;
/// Steps per pass `fused_steps` supports (its source table has this many rows); also the
/// halo width every device holds.
pub const MAX_STEPS: usize = 16;
/// Sources `fused_steps` supports in one device's held cells.
pub const MAX_SOURCES: usize = 8;
/// Threads per block of the reduction kernel (its shared arrays have this many entries)
/// and of the two-kernel step.
pub const BLOCK: u32 = 256;

/// `-D` definitions for nvcc.
pub fn defines() -> [(&'static str, u64); 4] {
    [
        ("TILE", TILE as u64),
        ("MAX_STEPS", MAX_STEPS as u64),
        ("MAX_SOURCES", MAX_SOURCES as u64),
        ("BLOCK", u64::from(BLOCK)),
    ]
}
