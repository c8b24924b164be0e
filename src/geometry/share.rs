//! A device's share of the grid: what its kernels need beyond the fields (coefficients,
//! the Mur state of the ends it holds, a fused pass's strips), and the kernels themselves
//! over local slices. `DeviceState` holds one and knows nothing of what it holds.

use std::ops::Range;

use super::coefficients::Coefficients;
use super::grid::Grid;
use super::line::LineShare;
pub use super::pass::Pass;
use super::plane::{self, PlaneShare, fused as plane_fused};
use crate::fused::{Held, Part};
use crate::memory::OutOfMemory;
use crate::physics::{EndCondition, PlacedSource};
use crate::scenario::Scenario;

/// One device's share, by geometry.
#[derive(Debug, Clone)]
pub enum Share {
    Line(Box<LineShare>),
    Plane(Box<PlaneShare>),
    #[cfg(test)]
    Ladder(Box<super::ladder::LadderShare>),
}

impl Share {
    /// The share of a device owning slices `rows` with `halo` halo slices a side.
    pub fn new(
        s: &Scenario,
        c: &Coefficients,
        rows: Range<usize>,
        halo: usize,
    ) -> Result<Share, OutOfMemory> {
        Ok(match Grid::of(s) {
            Grid::Line => {
                let first = rows.start as isize - halo as isize;
                Share::Line(Box::new(LineShare::new(c, first, rows.len() + 2 * halo)))
            }
            Grid::Plane { .. } => Share::Plane(Box::new(PlaneShare::new(s, c, rows, halo)?)),
            #[cfg(test)]
            Grid::Ladder => {
                let first = rows.start as isize - halo as isize;
                let len = rows.len() + 2 * halo;
                Share::Ladder(Box::new(super::ladder::LadderShare::new(c, first, len)))
            }
        })
    }

    /// The share of a device without memory (the checker's shape of it).
    pub fn shape() -> Share {
        Share::Line(Box::default())
    }

    /// A copy of the state: an observation's fork.
    pub fn fork(&self) -> Share {
        match self {
            Share::Line(l) => Share::Line(Box::new(l.fork())),
            Share::Plane(p) => Share::Plane(p.clone()),
            #[cfg(test)]
            Share::Ladder(l) => Share::Ladder(l.clone()),
        }
    }

    pub fn update_h(&self, e: &[f32], h: &mut [f32], r: Range<usize>) {
        match self {
            Share::Line(l) => l.update_h(e, h, r),
            Share::Plane(p) => plane::update_h(e, h, p.nx, r, p.ch, p.periodic),
            #[cfg(test)]
            Share::Ladder(l) => l.update_h(e, h, r),
        }
    }

    pub fn update_e(&self, e: &mut [f32], h: &[f32], r: Range<usize>) {
        match self {
            Share::Line(l) => l.update_e(e, h, r),
            Share::Plane(p) => plane::update_e(e, h, p, r),
            #[cfg(test)]
            Share::Ladder(l) => l.update_e(e, h, r),
        }
    }

    /// Sources on the local slices `r`, then the grid's ends among them (and, on a plane,
    /// its sides).
    pub fn sources_boundaries(
        &mut self,
        e: &mut [f32],
        r: Range<usize>,
        sources: &[(usize, PlacedSource)],
        ends: [Option<(EndCondition, usize)>; 2],
        step: u64,
    ) {
        match self {
            Share::Line(l) => l.sources_boundaries(e, r, sources, ends, step),
            Share::Plane(p) => p.sources_boundaries(e, r, sources, ends, step),
            #[cfg(test)]
            Share::Ladder(l) => l.sources_boundaries(e, r, sources, ends, step),
        }
    }

    /// `p.steps` steps in one fused pass over `p.span`.
    pub fn fused(&mut self, e: &mut Vec<f32>, h: &mut Vec<f32>, p: &Pass) {
        match self {
            Share::Line(l) => l.fused(e, h, p),
            Share::Plane(s) => plane_pass(s, e, h, p),
            #[cfg(test)]
            Share::Ladder(l) => l.pass(e, h, p),
        }
    }

    /// `fused_save`: on a line the strips the parts read; on a plane every pass of the
    /// round but the last, the last of them into the saved copy the parts read.
    pub fn fused_save(&mut self, e: &mut [f32], h: &mut [f32], p: &Pass) {
        match self {
            Share::Line(l) => l.fused_save(e, h, p),
            Share::Plane(s) => plane_save(s, e, h, p),
            #[cfg(test)]
            Share::Ladder(l) => l.pass(e, h, p),
        }
    }

    /// A part of a split pass: its tiles (a line's), or its rows' last pass (a plane's),
    /// writing back only the cells `own` (a `fused_store` pass's owned cells).
    pub fn fused_part(
        &mut self,
        e: &mut Vec<f32>,
        h: &mut Vec<f32>,
        p: &Pass,
        part: Part,
        own: Range<usize>,
    ) {
        match self {
            Share::Line(l) => l.fused_part(e, h, p, part, own),
            Share::Plane(s) => plane_part(s, e, h, p, part, own),
            #[cfg(test)]
            Share::Ladder(_) => {}
        }
    }

    /// The 1D fused kernel's view of the device (its GPU launches take it); `None` on a
    /// plane, whose pass takes the share itself.
    pub fn held(&self, p: &Pass) -> Option<&Held> {
        match self {
            Share::Line(l) => Some(l.held(p)),
            Share::Plane(_) => None,
            #[cfg(test)]
            Share::Ladder(_) => None,
        }
    }

    /// [`Share::held`], taken.
    pub fn into_held(self, p: &Pass) -> Option<Held> {
        match self {
            Share::Line(l) => Some((*l).into_held(p)),
            Share::Plane(_) => None,
            #[cfg(test)]
            Share::Ladder(_) => None,
        }
    }

    /// Per-slice-float `(ca, cb)` of the local slices `0..len` (zero outside the grid).
    pub fn coefficient_arrays(&self, len: usize) -> (Vec<f32>, Vec<f32>) {
        match self {
            Share::Line(l) => l.coefficient_arrays(len),
            Share::Plane(p) => (p.ca.to_vec(), p.cb.to_vec()),
            #[cfg(test)]
            Share::Ladder(l) => l.coefficient_arrays(len),
        }
    }

    /// The plane's share, for its GPU launches; `None` on a line.
    pub fn plane(&self) -> Option<&PlaneShare> {
        match self {
            Share::Plane(p) => Some(p),
            Share::Line(_) => None,
            #[cfg(test)]
            Share::Ladder(_) => None,
        }
    }
}

/// The tiling of a plane's fused passes: kernels/fdtd2d.cu's sizes (src/kernels.rs).
fn plane_tiling() -> plane_fused::Tiling {
    plane_fused::Tiling {
        x: crate::kernels::TILE_2D_X,
        y: crate::kernels::TILE_2D_Y,
        steps: crate::kernels::STEPS_2D,
    }
}

/// A plane's fused pass over the rows `p` covers: the GPU's tiles and passes
/// (src/geometry/plane/fused.rs, with kernels/fdtd2d.cu's sizes), the bits of the
/// one-kernel steps.
fn plane_pass(s: &mut PlaneShare, ez: &mut [f32], h: &mut [f32], p: &Pass) {
    if p.span.is_empty() {
        return;
    }
    let rows = plane_fused::Rows::of(p, s.ch);
    plane_fused::pass(s, ez, h, &rows, p.steps, p.step, plane_tiling());
}

/// A plane's `fused_save`: the round's passes but the last ([`plane_fused::save`]).
fn plane_save(s: &mut PlaneShare, ez: &mut [f32], h: &mut [f32], p: &Pass) {
    if p.span.is_empty() {
        return;
    }
    let rows = plane_fused::Rows::of(p, s.ch);
    let mut saved = s.saved.take().unwrap_or_default();
    plane_fused::save(s, &mut saved, ez, h, &rows, p.steps, p.step, plane_tiling());
    s.saved = Some(saved);
}

/// The grid a plane's share is a slab of.
fn plane_grid(s: &PlaneShare) -> Grid {
    Grid::Plane {
        nx: s.nx,
        periodic: s.periodic,
    }
}

/// A part of a plane's split pass: the round's last pass over the part's rows
/// ([`crate::fused::part_cells`] of the span, cut on the grid's tile rows as the model and
/// the GPU cut it: [`Grid::split_align`]) within `own`, from what the last save kept
/// (zeros before any, as the GPU's zeroed buffer).
fn plane_part(s: &mut PlaneShare, ez: &mut [f32], h: &mut [f32], p: &Pass, part: Part, own: Range<usize>) {
    if p.span.is_empty() {
        return;
    }
    let rows: Vec<Range<usize>> =
        crate::fused::part_cells(&p.span, p.steps, part, plane_grid(s).split_align())
            .into_iter()
            .map(|r| r.start.max(own.start)..r.end.min(own.end))
            .filter(|r| !r.is_empty())
            .collect();
    let saved = s.saved.take().unwrap_or_else(|| {
        let prev = [s.prev_bottom.len(), s.prev_top.len()];
        Box::new(plane::Copy::zeros(ez.len(), h.len(), prev))
    });
    let r = plane_fused::Rows::of(p, s.ch);
    plane_fused::part(s, &saved, ez, h, &r, &rows, p.steps, p.step, plane_tiling());
    s.saved = Some(saved);
}
