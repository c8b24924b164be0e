//! The numbers the CUDA kernels (kernels/*.cu) and the Rust code must agree on, in one
//! place: build.rs passes each to nvcc as `-DNAME=value`, and the kernels refuse to
//! compile without them.

/// Steps per pass `fused_steps` supports (its source table has this many rows); also the
/// halo width every device holds.
pub const MAX_STEPS: usize = 16;
/// Consecutive cells each thread of `fused_steps` holds in registers (a lane's run).
pub const LANE_CELLS: usize = 16;
/// Warps per block of `fused_steps`. Each holds 32 runs, `MAX_STEPS + 1` cells of them a
/// margin at each side, and owns the rest.
pub const FUSED_WARPS: usize = 4;
/// Threads per block of `fused_steps`.
pub const FUSED_THREADS: u32 = 32 * FUSED_WARPS as u32;
/// Cells per block of `fused_steps` (a tile): its warps' own cells, 4 × 478.
pub const TILE: usize = FUSED_WARPS * (32 * LANE_CELLS - 2 * (MAX_STEPS + 1));
/// Sources `fused_steps` supports in one device's held cells.
pub const MAX_SOURCES: usize = 8;
/// Columns and rows of a tile of `fused_steps_2d` (kernels/fdtd2d.cu). With its margins
/// of `STEPS_2D + 1` cells a side a tile's region is 64 columns (two warps' width) by 48
/// rows (six of a block's eight rows of threads).
pub const TILE_2D_X: usize = 54;
pub const TILE_2D_Y: usize = 38;
/// Steps per pass of `fused_steps_2d`: a round of `k` steps is `k / STEPS_2D` passes (the
/// last one shorter). The margins, which every tile computes as well as its own cells,
/// are a step wider each: 4 steps cost 1.5 times a tile's cells (16 would cost 3.4).
pub const STEPS_2D: usize = 4;
/// Threads per block of `fused_steps_2d`.
pub const THREADS_2D: u32 = 256;

/// Bytes of dynamic shared memory a block of `fused_steps_2d` takes: its region of
/// `Ez`, `Hx` and `Hy` (a plain tile's pass keeps `ca` and `cb` there instead). Three
/// arrays, not five: 37 KiB a block lets four blocks share an SM.
pub const fn shared_2d() -> u32 {
    let m = STEPS_2D + 1;
    (3 * 4 * (TILE_2D_X + 2 * m) * (TILE_2D_Y + 2 * m)) as u32
}

/// Threads per block of the reduction kernel (its shared arrays have this many entries)
/// and of the two-kernel step.
pub const BLOCK: u32 = 256;

// What the kernels assume of these numbers (they also refuse to compile otherwise): a
// lane's cells are bits of a 32-bit mask in `fused_steps`; a plain 2D tile's region is two
// warps wide and its rows split evenly over a block's warps (`plain_pass`).
const _: () = assert!(LANE_CELLS <= 32 && 32 * LANE_CELLS > 2 * (MAX_STEPS + 1));
const _: () = assert!(TILE_2D_X + 2 * (STEPS_2D + 1) == 64);
const _: () = assert!((TILE_2D_Y + 2 * (STEPS_2D + 1)).is_multiple_of(THREADS_2D as usize / 32));

/// `-D` definitions for nvcc.
pub fn defines() -> [(&'static str, u64); 11] {
    [
        ("THREADS_2D", u64::from(THREADS_2D)),
        ("LANE_CELLS", LANE_CELLS as u64),
        ("FUSED_WARPS", FUSED_WARPS as u64),
        ("FUSED_THREADS", u64::from(FUSED_THREADS)),
        ("TILE", TILE as u64),
        ("TILE_2D_X", TILE_2D_X as u64),
        ("TILE_2D_Y", TILE_2D_Y as u64),
        ("STEPS_2D", STEPS_2D as u64),
        ("MAX_STEPS", MAX_STEPS as u64),
        ("MAX_SOURCES", MAX_SOURCES as u64),
        ("BLOCK", u64::from(BLOCK)),
    ]
}
