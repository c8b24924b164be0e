//! A fused pass in parts (`fused_save`, `fused_boundary`, `fused_interior`) on a device:
//! what each runs and what each touches (src/fused.rs has the algorithm).

use std::ops::Range;

use super::{Access, Buffer, DeviceState, FUSED_TILE, Field, Kernel, Part};
use crate::fused;

impl DeviceState {
    /// `fused_save` over `cells`: the fields next to every cut between the tiles of both
    /// parts, and the Mur state, as they are (the GPU's strips), for the parts to read their
    /// margins from. In 2D, where the pass is not split (its own snapshot is the whole
    /// region), nothing.
    pub fn fused_save(&mut self, cells: &Range<usize>, steps: usize) {
        if self.slab.is_some() {
            return;
        }
        let span = self.kernel_range(Kernel::FusedSave { steps: steps as u32 }, cells);
        let cuts = fused::split_cuts(&span, steps, FUSED_TILE);
        let prev = [self.prev_left, self.prev_right];
        let m = self.margins.get_or_insert_with(Box::default);
        m.save((&self.ex, &self.hy), prev, &span, cuts, steps);
    }

    /// The tiles of `part` of a split pass of `steps` steps over the held part of `cells`
    /// (src/fused.rs [`fused::pass_tiles`]), their margins from the last `fused_save` (zeros
    /// before any, as the GPU's strips). In 2D, where the pass is not split, the boundary
    /// runs the whole round's pass over the span and the interior nothing: the same bits.
    pub fn fused_part(&mut self, cells: &Range<usize>, steps: usize, step: u64, part: Part) {
        let kernel = Kernel::FusedPart {
            steps: steps as u32,
            part,
        };
        if self.slab.is_some() {
            if kernel.steps_2d() > 0 {
                self.fused(cells, steps, step);
            }
            return;
        }
        let span = self.kernel_range(kernel, cells);
        if span.is_empty() {
            return;
        }
        let before = self.margins.take().unwrap_or_default();
        let mut f = fused::Fields {
            ex: std::mem::take(&mut self.ex),
            hy: std::mem::take(&mut self.hy),
            prev: [self.prev_left, self.prev_right],
        };
        let tiles = fused::part_tiles(&span, steps, part, FUSED_TILE);
        fused::pass_tiles(self.held(), &mut f, &before, &span, tiles, steps, step);
        (self.ex, self.hy, [self.prev_left, self.prev_right]) = (f.ex, f.hy, f.prev);
        self.margins = Some(before);
    }

    /// What `fused_save` and the parts touch, for the hazard checker: the save reads the
    /// fields over the span (it copies the cells next to each cut) and the Mur state, and
    /// writes the margins; a part reads the margins and its own cells, and writes its own
    /// cells (and the ends among them).
    pub(super) fn split_accesses(&self, kernel: Kernel, cells: &Range<usize>, out: &mut Vec<Access>) {
        let r = self.kernel_range(kernel, cells);
        if r.is_empty() {
            return;
        }
        let g = |r: &Range<usize>| self.global(r.start)..self.global(r.start) + r.len();
        let acc = |buffer, cells, write| Access { buffer, cells, write };
        let fields = [Buffer::Field(Field::Ex), Buffer::Field(Field::Hy)];
        match kernel {
            Kernel::FusedSave { .. } => {
                for b in fields {
                    out.push(acc(b, g(&r), false));
                }
                let (l, e) = self.end_cells();
                let ends = [
                    (self.left_end.is_some() && r.contains(&l), 0),
                    (self.right_end.is_some() && r.contains(&e), 1),
                ];
                for (_, state) in ends.into_iter().filter(|(here, _)| *here) {
                    out.push(acc(Buffer::Ends, state..state + 1, false));
                }
                out.push(acc(Buffer::Margins, g(&r), true));
            }
            Kernel::FusedPart { steps, part } => {
                out.push(acc(Buffer::Margins, g(&r), false));
                for o in &fused::part_cells(&r, steps as usize, part) {
                    for b in fields {
                        out.push(acc(b, g(o), false));
                        out.push(acc(b, g(o), true));
                    }
                    self.end_accesses(o, out);
                }
            }
            _ => {}
        }
    }
}
