//! What a fused pass (or a part of one) covers on a device, in local slices: what the
//! device's share needs of it beyond its own state.

use std::ops::Range;

use crate::physics::{EndCondition, PlacedSource};

/// What a fused pass (or a part of one) covers, in local slices: the device, where each
/// kernel is defined on it, what this launch's kernels cover, its sources and ends.
#[derive(Debug, Clone)]
pub struct Pass<'a> {
    pub lo: usize,
    pub hi: usize,
    pub halo: usize,
    /// Where `update_h` and `update_e` are defined on the device.
    pub h_valid: Range<usize>,
    pub e_valid: Range<usize>,
    /// What this launch's `update_h`, `update_e` and sources cover; `span` the pass's.
    pub h: Range<usize>,
    pub e: Range<usize>,
    pub span: Range<usize>,
    /// The device's sources, local slice and source, in scenario order.
    pub sources: &'a [(usize, PlacedSource)],
    /// The grid's first and last end where this device holds them: condition, local slice.
    pub ends: [Option<(EndCondition, usize)>; 2],
    pub steps: usize,
    pub step: u64,
}
