//! A fused pass in parts (`fused_save`, `fused_boundary`, `fused_interior`) on a device:
//! what each runs and what each touches (src/fused.rs has the algorithm).

use std::ops::Range;

use super::{Access, Buffer, DeviceState, FUSED_TILE, Field, Kernel, Part};
use crate::fused;

impl DeviceState {
    /// `fused_save` over `cells`: the fields next to every cut between the tiles of both
    /// parts, and the Mur state, as they are (the GPU's strips), for the parts to read their
    /// margins from. In 2D, where the pass is not split (its own snapshot is the whole
    /// region), the whole round's pass, from step `step`: it reads the halos now, before a
    /// neighbour may store into them, and the parts run nothing.
    pub fn fused_save(&mut self, cells: &Range<usize>, steps: usize, step: u64) {
        if self.slab.is_some() {
            return self.fused(cells, steps, step);
        }
        let span = self.kernel_range(Kernel::FusedSave { steps: steps as u32 }, cells);
        let cuts = fused::split_cuts(&span, steps, FUSED_TILE);
        let prev = [self.prev_left, self.prev_right];
        let m = self.margins.get_or_insert_with(Box::default);
        m.save((&self.ex, &self.hy), prev, &span, cuts, steps);
    }

    /// The tiles of `part` of a split pass of `steps` steps over the held part of `cells`
    /// (src/fused.rs [`fused::pass_tiles`]), their margins from the last `fused_save` (zeros
    /// before any, as the GPU's strips). A `fused_store` pass reads its halo cells from the
    /// save too and writes back only the owned cells (its stores into the neighbours are
    /// the runtime's: [`DeviceState::stores`]). In 2D, where the pass is not split, the
    /// save ran the whole pass: the parts run nothing (the same bits).
    pub fn fused_part(&mut self, cells: &Range<usize>, steps: usize, step: u64, part: Part) {
        let kernel = Kernel::FusedPart {
            steps: steps as u32,
            part,
        };
        let span = self.kernel_range(kernel, cells);
        if self.slab.is_some() || span.is_empty() {
            return;
        }
        let own = match part {
            Part::Store => self.owned_local(),
            _ => span.clone(),
        };
        let before = self.margins.take().unwrap_or_default();
        let mut f = fused::Fields {
            ex: std::mem::take(&mut self.ex),
            hy: std::mem::take(&mut self.hy),
            prev: [self.prev_left, self.prev_right],
        };
        let tiles = fused::part_tiles(&span, steps, part, FUSED_TILE);
        fused::pass_tiles(self.held(), &mut f, &before, &span, &own, tiles, steps, step);
        (self.ex, self.hy, [self.prev_left, self.prev_right]) = (f.ex, f.hy, f.prev);
        self.margins = Some(before);
    }

    /// What `fused_save` and the parts touch, for the hazard checker: the save reads the
    /// fields over the span (it copies the cells next to each cut) and the Mur state, and
    /// writes the margins; a part reads the margins and its own cells, and writes its own
    /// cells (and the ends among them) — a `fused_store` pass its owned ones. In 2D the
    /// save is the whole pass (as `fused_steps`) and the parts touch nothing of their
    /// device (a store reads the rows it stores, which the save wrote).
    pub(super) fn split_accesses(&self, kernel: Kernel, cells: &Range<usize>, out: &mut Vec<Access>) {
        let r = self.kernel_range(kernel, cells);
        if r.is_empty() {
            return;
        }
        let g = |r: &Range<usize>| self.global(r.start)..self.global(r.start) + r.len();
        let acc = |buffer, cells, write| Access { buffer, cells, write };
        let fields = [Buffer::Field(Field::Ex), Buffer::Field(Field::Hy)];
        if self.slab.is_some() {
            if let Kernel::FusedSave { steps } = kernel {
                out.extend(self.accesses(Kernel::Fused { steps }, cells));
            }
            for (_, o) in self.stores(kernel, cells) {
                for b in fields {
                    out.push(acc(b, o.clone(), false));
                }
            }
            return;
        }
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
                let own = self.owned_local();
                // A store pass writes back only the owned cells of its tiles.
                let cut = |o: &Range<usize>| match part {
                    Part::Store => {
                        let a = o.start.max(own.start);
                        a..o.end.min(own.end).max(a)
                    }
                    _ => o.clone(),
                };
                for o in fused::part_cells(&r, steps as usize, part).iter().map(cut) {
                    if o.is_empty() {
                        continue;
                    }
                    for b in fields {
                        out.push(acc(b, g(&o), false));
                        out.push(acc(b, g(&o), true));
                    }
                    self.end_accesses(&o, out);
                }
            }
            _ => {}
        }
    }

    /// What a launch of `kernel` over `cells` stores into the neighbours' memory: for a
    /// `fused_store` pass, `(-1, cells)` into the left one's halo and `(1, cells)` into the
    /// right one's, global cells (rows in 2D) of both fields; nothing for other kernels.
    pub fn stores(&self, kernel: Kernel, cells: &Range<usize>) -> Vec<(isize, Range<usize>)> {
        let Kernel::FusedPart {
            steps,
            part: Part::Store,
        } = kernel
        else {
            return Vec::new();
        };
        if self.kernel_range(kernel, cells).is_empty() {
            return Vec::new();
        }
        fused::stores(self.lo, self.hi, steps as usize, (self.lo > 0, self.hi < self.n))
    }
}
