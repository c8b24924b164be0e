//! A 2D device's kernel launches (kernels/fdtd2d.cu): the same calls as in 1D over rows.

use std::ops::Range;

use super::device::*;
use super::launch::{Arg, Launch};
use super::shared::BLOCK;
use crate::decomp::Kernel;
use crate::physics::EndCondition;
use crate::scenario::Injection;

/// Most rows one launch covers (a grid's y dimension).
const MAX_ROWS: usize = 65_535;

impl Dev {
    /// The launches of one of the step's kernels over the local rows `r` of a 2D device
    /// in step `step`; `None` for the fused kernel (run as its steps, see `launch`).
    pub(super) fn launches_2d(&self, kernel: Kernel, r: Range<usize>, step: u64) -> Option<Vec<Launch>> {
        let slab = self.meta.slab()?;
        let views = self.views();
        let [ez, h, ca, cb, prev, mur, ..] = views[..] else {
            unreachable!("eight buffers")
        };
        let nx = slab.nx as u32;
        let periodic = Arg::I32(i32::from(slab.periodic));
        let across = nx.div_ceil(BLOCK);
        let chunks = || {
            (r.start..r.end)
                .step_by(MAX_ROWS)
                .map(|a| (a as u32, (r.end - a).min(MAX_ROWS) as u32))
        };
        let mut out = Vec::new();
        match kernel {
            Kernel::Fused { .. } | Kernel::FusedSave { .. } | Kernel::FusedPart { .. } => return None,
            Kernel::UpdateH => {
                for (start, rows) in chunks() {
                    let args = [
                        Arg::Ptr(h.ptr()),
                        Arg::Ptr(ez.ptr()),
                        Arg::F32(self.ch),
                        Arg::U32(nx),
                        Arg::U32(start),
                        Arg::U32(rows),
                        periodic,
                    ];
                    out.push(Launch::new(self.k.update_h_2d, (across, rows), BLOCK, &args));
                }
            }
            Kernel::UpdateE => {
                for (start, rows) in chunks() {
                    let args = [
                        Arg::Ptr(ez.ptr()),
                        Arg::Ptr(h.ptr()),
                        Arg::Ptr(ca.ptr()),
                        Arg::Ptr(cb.ptr()),
                        Arg::U32(nx),
                        Arg::U32(start),
                        Arg::U32(rows),
                        periodic,
                    ];
                    out.push(Launch::new(self.k.update_e_2d, (across, rows), BLOCK, &args));
                }
            }
            Kernel::SourcesBoundaries => {
                for (row, src) in self.meta.sources_in(&r) {
                    let at = row * slab.nx + src.columns.start;
                    let count = src.columns.len();
                    let args = [
                        Arg::Ptr(ez.slice(at..at + count).ptr()),
                        Arg::U32(count as u32),
                        Arg::F32(src.value(step)),
                        Arg::I32(i32::from(src.injection == Injection::Hard)),
                    ];
                    let grid = ((count as u32).div_ceil(BLOCK), 1);
                    out.push(Launch::new(self.k.apply_source_2d, grid, BLOCK, &args));
                }
                let (first, last) = self.meta.end_cells();
                let (bottom, top) = self.meta.ends();
                let kind = |c: Option<EndCondition>, local: usize| match c.filter(|_| r.contains(&local)) {
                    None => 0,
                    Some(EndCondition::Pec) => 1,
                    Some(EndCondition::Mur(_)) => 2,
                };
                let (b, t) = (kind(bottom, first), kind(top, last));
                if b != 0 || t != 0 {
                    let args = [
                        Arg::Ptr(ez.ptr()),
                        Arg::Ptr(prev.ptr()),
                        Arg::Ptr(mur.ptr()),
                        Arg::U32(nx),
                        Arg::U32(first as u32),
                        Arg::U32(last as u32),
                        Arg::I32(b),
                        Arg::I32(t),
                    ];
                    out.push(Launch::new(self.k.end_rows_2d, (across, 1), BLOCK, &args));
                }
                if !slab.periodic {
                    let rows = r.len() as u32;
                    let args = [
                        Arg::Ptr(ez.ptr()),
                        Arg::U32(nx),
                        Arg::U32(r.start as u32),
                        Arg::U32(rows),
                    ];
                    let grid = (rows.div_ceil(BLOCK), 1);
                    out.push(Launch::new(self.k.pec_sides_2d, grid, BLOCK, &args));
                }
            }
        }
        Some(out)
    }
}
