//! A grid's shape as everything above the kernels sees it: which geometry, the fields it
//! exchanges and the components each holds, how a point is named, how the gathered fields
//! are laid out and dumped. The one place (with `line.rs`, `plane.rs` and `share.rs`) that
//! knows which geometries there are.
//!
//! Every geometry is split across devices along one axis into *slices*: a slice is a cell
//! of a line, a row of a plane. The decomposition, the programs, the checker, the
//! scheduler and the observation model count slices and never ask what one holds; a
//! field's slice is `width(field)` floats, its components side by side.

pub use crate::access::Field;
use crate::access::Kernel;
use crate::cost::FUSED_2D_BYTES_PER_CELL;
use crate::scenario::{Scenario, Sides};

/// Which grid: a line of cells (1D, `Ex` and `Hy`) or a TMz plane of rows (`Ez`, `Hx`,
/// `Hy`). Plain data; what differs between them is in this module's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Grid {
    #[default]
    Line,
    Plane {
        nx: usize,
        periodic: bool,
    },
    /// The test-only toy of DESIGN.md's walk-through (`ladder.rs`): a line of rungs, two
    /// floats of `E` and one of `H` a slice.
    #[cfg(test)]
    Ladder,
}

/// One named component of a field, as it lies in the field's slice: `floats` from `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Component {
    pub name: &'static str,
    pub field: Field,
    pub at: usize,
    pub floats: usize,
}

/// How messages name what the devices split: `(plural, the TOML key, singular)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Units {
    pub many: &'static str,
    pub key: &'static str,
    pub one: &'static str,
}

impl Grid {
    /// The scenario's grid.
    pub fn of(s: &Scenario) -> Grid {
        #[cfg(test)]
        if s.name == super::ladder::NAME {
            return Grid::Ladder;
        }
        match s.nx {
            0 | 1 => Grid::Line,
            nx => Grid::Plane {
                nx,
                periodic: s.sides == Sides::Periodic,
            },
        }
    }

    /// Floats of field `f` in one slice: the sum of its components' (a test holds the two
    /// together), matched here because every halo copy asks it.
    pub fn width(self, f: Field) -> usize {
        match (self, f) {
            (Grid::Line, _) => 1,
            (Grid::Plane { nx, .. }, Field::E) => nx,
            (Grid::Plane { nx, .. }, Field::H) => 2 * nx,
            #[cfg(test)]
            (Grid::Ladder, Field::E) => 2,
            #[cfg(test)]
            (Grid::Ladder, Field::H) => 1,
        }
    }

    /// Points (cells of the grid) in one slice.
    pub fn per_slice(self) -> usize {
        match self {
            Grid::Line => 1,
            Grid::Plane { nx, .. } => nx,
            #[cfg(test)]
            Grid::Ladder => 1,
        }
    }

    /// Points of a grid of `slices` slices.
    pub fn points(self, slices: usize) -> usize {
        slices.saturating_mul(self.per_slice())
    }

    /// The fields' components, in the order the snapshot and the inspector show them.
    pub fn components(self) -> Vec<Component> {
        let c = |name, field, at, floats| Component {
            name,
            field,
            at,
            floats,
        };
        match self {
            Grid::Line => vec![c("Ex", Field::E, 0, 1), c("Hy", Field::H, 0, 1)],
            Grid::Plane { nx, .. } => vec![
                c("Ez", Field::E, 0, nx),
                c("Hx", Field::H, 0, nx),
                c("Hy", Field::H, nx, nx),
            ],
            #[cfg(test)]
            Grid::Ladder => vec![
                c("Ea", Field::E, 0, 1),
                c("Eb", Field::E, 1, 1),
                c("Hr", Field::H, 0, 1),
            ],
        }
    }

    /// The lowercase name of a field as a whole, as the Program panel writes copies of it:
    /// on a line the component's (`ex`, `hy`); on a plane `ez` and `h` (both components).
    pub fn field_word(self, f: Field) -> &'static str {
        match (self, f) {
            (Grid::Line, f) => f.name(),
            (Grid::Plane { .. }, Field::E) => "ez",
            (Grid::Plane { .. }, Field::H) => "h",
            #[cfg(test)]
            (Grid::Ladder, Field::E) => "e",
            #[cfg(test)]
            (Grid::Ladder, Field::H) => "hr",
        }
    }

    /// The slice holding point `k` and the point's index within the slice.
    pub fn locate(self, k: usize) -> (usize, usize) {
        let w = self.per_slice();
        (k / w, k % w)
    }

    /// Point `k` as messages name it: `cell 5`, `(x 3, y 4)`.
    pub fn point(self, k: usize) -> String {
        match self {
            Grid::Line => format!("cell {k}"),
            Grid::Plane { nx, .. } => format!("(x {}, y {})", k % nx, k / nx),
            #[cfg(test)]
            Grid::Ladder => format!("rung {k}"),
        }
    }

    /// Point `k`'s coordinates alone: `5`, `x 3, y 4`.
    pub fn coordinates(self, k: usize) -> String {
        match self {
            #[cfg(test)]
            Grid::Ladder => k.to_string(),
            Grid::Line => k.to_string(),
            Grid::Plane { nx, .. } => format!("x {}, y {}", k % nx, k / nx),
        }
    }

    /// How points are numbered, where it needs saying: on a plane `on its 2D grid,
    /// row · nx + column`; `None` on a line.
    pub fn numbering(self) -> Option<String> {
        match self {
            Grid::Line => None,
            #[cfg(test)]
            Grid::Ladder => None,
            Grid::Plane { nx, .. } => Some(format!("on its 2D grid, row · {nx} + column")),
        }
    }

    /// The component and point of index `i` of gathered field `f` (slices of
    /// `width(f)` floats, in order): `Ex at cell 5`, `Hx at (x 3, y 4)`.
    pub fn at(self, f: Field, i: usize) -> String {
        let w = self.width(f);
        let (slice, k) = (i / w, i % w);
        let c = self
            .components()
            .into_iter()
            .find(|c| c.field == f && (c.at..c.at + c.floats).contains(&k))
            .expect("every float of a slice is a component's");
        let point = slice * self.per_slice() + (k - c.at);
        format!("{} at {}", c.name, self.point(point))
    }

    /// The point of index `i` of gathered field `f`, whichever component it is.
    pub fn point_of(self, f: Field, i: usize) -> usize {
        let w = self.width(f);
        (i / w) * self.per_slice() + (i % w) % self.per_slice()
    }

    /// The grid's shape, slowest axis first: `[cells]`, `[ny, nx]`.
    pub fn shape(self, slices: usize) -> Vec<usize> {
        match self {
            Grid::Line => vec![slices],
            #[cfg(test)]
            Grid::Ladder => vec![slices],
            Grid::Plane { nx, .. } => vec![slices, nx],
        }
    }

    /// Every component's value at point `k`, from slices `e` and `h` of the point's slice.
    pub fn values(self, k: usize, e: &[f32], h: &[f32]) -> Vec<(&'static str, f32)> {
        let i = self.locate(k).1;
        self.components()
            .into_iter()
            .map(|c| {
                let slice = if c.field == Field::E { e } else { h };
                (c.name, slice[c.at + i])
            })
            .collect()
    }

    /// What the devices split, as messages say it.
    pub fn units(self) -> Units {
        match self {
            Grid::Line => Units {
                many: "cells",
                key: "grid.cells",
                one: "cell",
            },
            Grid::Plane { .. } => Units {
                many: "rows",
                key: "grid.ny",
                one: "row",
            },
            #[cfg(test)]
            Grid::Ladder => Units {
                many: "rungs",
                key: "grid.cells",
                one: "rung",
            },
        }
    }

    /// The two ends of the split axis: `(first, last)`.
    pub fn end_names(self) -> (&'static str, &'static str) {
        match self {
            Grid::Line => ("left", "right"),
            #[cfg(test)]
            Grid::Ladder => ("left", "right"),
            Grid::Plane { .. } => ("bottom", "top"),
        }
    }

    /// A grid of `slices` slices in words: `4096`, `16384 (128 rows of 128)`.
    pub fn size(self, slices: usize) -> String {
        match self {
            Grid::Line => slices.to_string(),
            #[cfg(test)]
            Grid::Ladder => slices.to_string(),
            Grid::Plane { nx, .. } => format!("{} ({slices} rows of {nx})", self.points(slices)),
        }
    }

    /// The grid as a CUDA export's `halo.cuh` reads it (the `grid` line of its
    /// data/scenario.txt): `line`, or `plane NX pec|periodic` (what its side columns do).
    pub fn export_shape(self) -> String {
        match self {
            Grid::Line => "line".into(),
            #[cfg(test)]
            Grid::Ladder => "line".into(),
            Grid::Plane { nx, periodic } => {
                format!("plane {nx} {}", if periodic { "periodic" } else { "pec" })
            }
        }
    }

    /// The kernels a CUDA export of this grid keeps (`//@if 1d` or `2d` in halo.cuh).
    pub fn export_kernels(self) -> &'static str {
        match self {
            Grid::Line => "1d",
            #[cfg(test)]
            Grid::Ladder => "1d",
            Grid::Plane { .. } => "2d",
        }
    }

    /// A grid of `slices` slices, short: `4096 cells`, `128×128 cells`.
    pub fn extent(self, slices: usize) -> String {
        match self {
            Grid::Line => format!("{slices} cells"),
            #[cfg(test)]
            Grid::Ladder => format!("{slices} rungs"),
            Grid::Plane { nx, .. } => format!("{nx}×{slices} cells"),
        }
    }

    /// `--dump-fields`: each component of the gathered fields `(e, h)` of `slices`
    /// slices as `(file name, values, shape)` — `ex.npy`, `hy.npy` of `(cells)` on a line;
    /// `ez.npy`, `hx.npy`, `hy.npy` of `(ny, nx)` on a plane.
    pub fn dump(self, slices: usize, (e, h): (&[f32], &[f32])) -> Vec<(String, Vec<f32>, Vec<usize>)> {
        let shape = self.shape(slices);
        self.components()
            .into_iter()
            .map(|c| {
                let (data, w) = if c.field == Field::E {
                    (e, self.width(Field::E))
                } else {
                    (h, self.width(Field::H))
                };
                let values = data
                    .chunks(w)
                    .flat_map(|s| s[c.at..c.at + c.floats].iter().copied())
                    .collect();
                (format!("{}.npy", c.name.to_lowercase()), values, shape.clone())
            })
            .collect()
    }

    /// Whether a fused pass runs in parts (`fused_save`, then its parts in any launches):
    /// on a line (the save keeps strips, the parts run tiles) and on a plane (the save runs
    /// the round's passes but the last, the parts the last over their rows).
    pub fn splits_pass(self) -> bool {
        match self {
            Grid::Line | Grid::Plane { .. } => true,
            #[cfg(test)]
            Grid::Ladder => false,
        }
    }

    /// What a split pass's cuts are aligned to ([`crate::fused::split`]): a plane's tile
    /// rows, so that its parts launch no more tiles than the whole pass (measured: one
    /// row of tiles less a round on 16384² over two devices); 1 on a line, whose parts'
    /// tiles are cut where the cells are.
    pub fn split_align(self) -> usize {
        match self {
            Grid::Plane { .. } => crate::kernels::TILE_2D_Y,
            _ => 1,
        }
    }

    /// Whether a split pass's save writes the fields (a plane's runs passes that alternate
    /// between them and a snapshot) as well as reading them.
    pub fn save_writes_fields(self) -> bool {
        matches!(self, Grid::Plane { .. })
    }

    /// What a part of a split pass is made of, as the program view names it: `tiles` of
    /// a line, `rows` of a plane.
    pub fn part_noun(self) -> &'static str {
        match self {
            Grid::Plane { .. } => "rows",
            _ => "tiles",
        }
    }

    /// Bytes a kernel moves per owned slice, for the cost model: on a line
    /// [`Kernel::bytes_per_cell`]; on a plane `update_h` reads `Ez` and updates `Hx` and
    /// `Hy` (20 B a cell), `update_e` reads both and `ca`, `cb` and updates `Ez` (24 B), a
    /// fused pass runs its steps at the measured 13 B a cell a step: a whole pass the
    /// round's, a save all but the last pass's ([`Grid::steps_run`]), a part the last's.
    pub fn bytes_per_slice(self, kernel: Kernel) -> f64 {
        let per = match (self, kernel) {
            (Grid::Line, k) => return k.bytes_per_cell(),
            #[cfg(test)]
            (Grid::Ladder, k) => return 1.5 * k.bytes_per_cell(),
            (_, Kernel::UpdateH) => 20.0,
            (_, Kernel::UpdateE) => 24.0,
            (_, Kernel::SourcesBoundaries) => 0.0,
            (_, k @ (Kernel::Fused { .. } | Kernel::FusedSave { .. } | Kernel::FusedPart { .. })) => {
                FUSED_2D_BYTES_PER_CELL * f64::from(self.steps_run(k))
            }
        };
        per * self.per_slice() as f64
    }

    /// Steps a fused launch runs over its cells: a whole pass the round's; on a plane a
    /// split pass's save all passes of at most [`crate::kernels::STEPS_2D`] steps but the
    /// last, its parts the last; on a line every launch the round's (a save runs none but
    /// is costed by its strips).
    pub fn steps_run(self, kernel: Kernel) -> u32 {
        let steps = kernel.fused_steps().unwrap_or(0);
        let passes = super::plane::fused::sub_passes(steps as usize, crate::kernels::STEPS_2D);
        let last = passes.last().map_or(0, |&(_, k)| k as u32);
        match (self, kernel) {
            (Grid::Plane { .. }, Kernel::FusedSave { .. }) => steps - last,
            (Grid::Plane { .. }, Kernel::FusedPart { .. }) => last,
            _ => steps,
        }
    }

    /// Whether the sim's device threads may run a whole step as one cache-blocked pass
    /// (`update_h`, `update_e` and the sources, tile by tile): on a line.
    pub fn tiles_a_step(self) -> bool {
        matches!(self, Grid::Line)
    }

    /// The point in the middle of a grid of `slices` slices (of a plane: the middle
    /// point of the middle row).
    pub fn middle(self, slices: usize) -> usize {
        slices / 2 * self.per_slice() + self.per_slice() / 2
    }

    /// Whether a fused pass refuses more sources on a device than its kernel takes (a
    /// line's); a plane's runs its steps as one-kernel launches then.
    pub fn fused_sources_limited(self) -> bool {
        matches!(self, Grid::Line)
    }

    /// The heat map's `(columns, rows)` of points, where the plot is a map; `None` where
    /// it is a line of columns.
    pub fn map(self, slices: usize) -> Option<(usize, usize)> {
        match self {
            Grid::Line => None,
            #[cfg(test)]
            Grid::Ladder => None,
            Grid::Plane { nx, .. } => Some((nx, slices)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fields_width_is_the_floats_of_its_components() {
        for grid in [
            Grid::Line,
            Grid::Ladder,
            Grid::Plane {
                nx: 7,
                periodic: false,
            },
        ] {
            for f in [Field::E, Field::H] {
                let sum: usize = grid
                    .components()
                    .iter()
                    .filter(|c| c.field == f)
                    .map(|c| c.floats)
                    .sum();
                assert_eq!(grid.width(f), sum, "{grid:?} {f:?}");
            }
        }
    }
}
