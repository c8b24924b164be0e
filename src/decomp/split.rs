//! A fused pass in parts (`fused_save`, `fused_boundary`, `fused_interior`) on a device:
//! what each runs and what each touches (src/fused.rs has the algorithm).

use std::ops::Range;

use super::{Access, Buffer, DeviceState, Field, Kernel, Part};
use crate::fused;

impl DeviceState {
    /// `fused_save` over `cells`: on a line the fields next to every cut between the tiles
    /// of both parts, and the Mur state, as they are (the GPU's strips), for the parts to
    /// read their margins from; on a plane the round's passes but the last
    /// ([`crate::geometry::Share::fused_save`]).
    pub fn fused_save(&mut self, cells: &Range<usize>, kernel: Kernel, step: u64) {
        self.with_share(|share, e, h, p| share.fused_save(e, h, p), kernel, cells, step);
    }

    /// The tiles of `part` of a split pass over the held part of `cells` (src/fused.rs
    /// [`fused::pass_tiles`]), their margins from the last `fused_save` (on a plane: the
    /// round's last pass over the part's rows, from what the save kept). A `fused_store`
    /// pass writes back only the owned cells (its stores into the neighbours are the
    /// runtime's: [`DeviceState::stores`]).
    pub fn fused_part(&mut self, cells: &Range<usize>, kernel: Kernel, step: u64, part: Part) {
        let own = match part {
            Part::Store => self.owned_local(),
            _ => self.kernel_range(kernel, cells),
        };
        self.with_share(
            |share, e, h, p| share.fused_part(e, h, p, part, own),
            kernel,
            cells,
            step,
        );
    }

    /// What `fused_save` and the parts touch, for the hazard checker: the save reads the
    /// fields over the span (it copies the cells next to each cut) and the Mur state, and
    /// writes the margins; a part reads the margins and its own cells, and writes its own
    /// cells (and the ends among them) — a `fused_store` pass its owned ones. On a plane
    /// the save also writes the fields over the span (its passes alternate between them
    /// and a snapshot) and the Mur state of the ends there.
    pub(super) fn split_accesses(&self, kernel: Kernel, cells: &Range<usize>, out: &mut Vec<Access>) {
        let r = self.kernel_range(kernel, cells);
        if r.is_empty() {
            return;
        }
        let g = |r: &Range<usize>| self.global(r.start)..self.global(r.start) + r.len();
        let acc = |buffer, cells, write| Access { buffer, cells, write };
        let fields = [Buffer::Field(Field::E), Buffer::Field(Field::H)];
        if !self.grid.splits_pass() {
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
                // A plane's save runs passes: they write the fields and the ends' state.
                let writes: &[bool] = if self.grid.save_writes_fields() {
                    &[false, true]
                } else {
                    &[false]
                };
                for &write in writes {
                    for b in fields {
                        out.push(acc(b, g(&r), write));
                    }
                }
                let (l, e) = self.end_cells();
                let ends = [
                    (self.left_end.is_some() && r.contains(&l), 0),
                    (self.right_end.is_some() && r.contains(&e), 1),
                ];
                for (_, state) in ends.into_iter().filter(|(here, _)| *here) {
                    for &write in writes {
                        out.push(acc(Buffer::Ends, state..state + 1, write));
                    }
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
                for o in fused::part_cells(&r, steps as usize, part, self.grid.split_align())
                    .iter()
                    .map(cut)
                {
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
