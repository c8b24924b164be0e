//! Several 2D steps per pass over memory: `fused_steps_2d` (kernels/fdtd2d.cu) on the
//! CPU, step for step, so that the sim runs what the GPU runs and the tests can take the
//! algorithm apart.
//!
//! A pass of `k` steps reads a snapshot of the fields taken before it and writes the
//! fields. Each tile (`tiling.y` rows by `tiling.x` columns of the rows the pass writes)
//! loads its cells and `m = k + 1` rows and columns around them — its region — from the
//! snapshot, runs the `k` steps of [`super`] on the region and writes back only its
//! own cells (and the Mur state of its own columns). Tiles read only the snapshot and write
//! only their own cells, so their order does not matter (on the GPU they run at once). A
//! cell at the region's edge that lacks a neighbour keeps its value: it goes wrong, and a
//! wrong value moves one cell a step — twice in one step at a Mur row, which reads its inner
//! neighbour's new value, hence `k + 1` and not `k` — so the tile's own cells, `m` away,
//! come out with the bits of `k` one-kernel steps. Where the region meets the end of the
//! array or of an update's rows, the pass does exactly what the one-kernel steps do: cells
//! beyond are the snapshot's, as they are the fields' there. (The GPU reads the same
//! values without a copy a pass: its passes alternate between the fields and a snapshot
//! buffer, src/runtime/cuda/plane.rs.)
//!
//! A region as wide as `tiling.x + 2·(tiling.steps + 1)` columns or wider holds the whole
//! row (the kernel's shared arrays are that wide): then its columns wrap exactly when the
//! sides are periodic; a narrower region wraps its column indices and leaves the cells at
//! its edges as above.

use std::ops::Range;

use std::mem::take;

use super::{Copy, PlaneShare};
use crate::geometry::pass::Pass;
use crate::physics::{EndCondition, PlacedSource};

/// What one device's pass updates, in local rows: `update_h` on `h`, `update_e` on `e`,
/// sources, end rows and PEC sides on `s` (each one-kernel launch's rows); the end rows
/// there (`(condition, row)` of the bottom and the top one) and the sources on `s`.
pub struct Rows {
    pub h: Range<usize>,
    pub e: Range<usize>,
    pub s: Range<usize>,
    pub ends: [Option<(EndCondition, usize)>; 2],
    pub sources: Vec<(usize, PlacedSource)>,
    pub ch: f32,
}

impl Rows {
    /// The rows a launch described by `p` updates.
    pub fn of(p: &Pass, ch: f32) -> Rows {
        let s = p.span.clone();
        let end = |e: Option<(EndCondition, usize)>| e.filter(|(_, row)| s.contains(row));
        Rows {
            h: p.h.clone(),
            e: p.e.clone(),
            ends: p.ends.map(end),
            sources: p
                .sources
                .iter()
                .filter(|(row, _)| s.contains(row))
                .cloned()
                .collect(),
            s,
            ch,
        }
    }
}

/// Tile columns and rows, and steps per pass (src/kernels.rs for the GPU's).
#[derive(Debug, Clone, Copy)]
pub struct Tiling {
    pub x: usize,
    pub y: usize,
    pub steps: usize,
}

/// `steps` steps from step `step` of `p` on the fields `ez` and `h` of `slab`'s device, by
/// passes of at most `tiling.steps` steps.
pub fn pass(
    slab: &mut PlaneShare,
    ez: &mut [f32],
    h: &mut [f32],
    p: &Rows,
    steps: usize,
    step: u64,
    tiling: Tiling,
) {
    let Some(w) = written(&[&p.h, &p.e, &p.s]) else {
        return;
    };
    let mut prev = [take(&mut slab.prev_bottom), take(&mut slab.prev_top)];
    for (t0, k) in sub_passes(steps, tiling.steps) {
        let input = Copy {
            ez: ez.to_vec(),
            h: h.to_vec(),
            prev: prev.clone(),
        };
        let mut out = Out {
            ez,
            h,
            prev: &mut prev,
        };
        sub_pass(slab, &input, &mut out, p, w.clone(), k, step + t0 as u64, tiling);
    }
    [slab.prev_bottom, slab.prev_top] = prev;
}

/// The passes of a round of `steps` steps, at most `most` steps each: `(first step, steps)`.
pub fn sub_passes(steps: usize, most: usize) -> Vec<(usize, usize)> {
    (0..steps)
        .step_by(most.max(1))
        .map(|t0| (t0, (steps - t0).min(most)))
        .collect()
}

/// `fused_save` of a split pass: every pass of the round but the last, the last of them
/// into the saved copy `saved` (which the parts' last pass reads), as the GPU runs them
/// (src/runtime/cuda/plane.rs): the first into the snapshot buffer, then alternating, so
/// that the fields hold the second pass's result when there are four. With one pass the
/// save copies the fields.
#[allow(clippy::too_many_arguments)]
pub fn save(
    slab: &mut PlaneShare,
    saved: &mut Copy,
    ez: &mut [f32],
    h: &mut [f32],
    p: &Rows,
    steps: usize,
    step: u64,
    tiling: Tiling,
) {
    let Some(w) = written(&[&p.h, &p.e, &p.s]) else {
        return;
    };
    saved.set(ez, h, [&slab.prev_bottom, &slab.prev_top]);
    let passes = sub_passes(steps, tiling.steps);
    let before = passes.len().saturating_sub(1);
    for (i, &(t0, k)) in passes[..before].iter().enumerate() {
        let input = saved.clone();
        let Copy {
            ez: x_ez,
            h: x_h,
            prev,
        } = saved;
        let mut out = Out {
            ez: x_ez,
            h: x_h,
            prev,
        };
        sub_pass(slab, &input, &mut out, p, w.clone(), k, step + t0 as u64, tiling);
        if into_fields(i, before) {
            ez.copy_from_slice(&saved.ez);
            h.copy_from_slice(&saved.h);
            [slab.prev_bottom, slab.prev_top] = saved.prev.clone();
        }
    }
}

/// Whether pass `i` (from 0) of a save's `before` passes writes the fields (on the GPU: the
/// second of three; the others the snapshot buffer, the last the saved copy).
pub fn into_fields(i: usize, before: usize) -> bool {
    i % 2 == 1 && i + 1 < before
}

/// A part of a split pass: the round's last pass over the rows `rows` (each range cut by
/// its own tiles), from the saved copy into the fields.
#[allow(clippy::too_many_arguments)]
pub fn part(
    slab: &mut PlaneShare,
    saved: &Copy,
    ez: &mut [f32],
    h: &mut [f32],
    p: &Rows,
    rows: &[Range<usize>],
    steps: usize,
    step: u64,
    tiling: Tiling,
) {
    let Some(w) = written(&[&p.h, &p.e, &p.s]) else {
        return;
    };
    let Some(&(t0, k)) = sub_passes(steps, tiling.steps).last() else {
        return;
    };
    let mut prev = [take(&mut slab.prev_bottom), take(&mut slab.prev_top)];
    for r in rows {
        let r = r.start.max(w.start)..r.end.min(w.end);
        if !r.is_empty() {
            let mut out = Out {
                ez,
                h,
                prev: &mut prev,
            };
            sub_pass(slab, saved, &mut out, p, r, k, step + t0 as u64, tiling);
        }
    }
    [slab.prev_bottom, slab.prev_top] = prev;
}

/// One pass of `k` steps: the tiles cutting `rows` read `input` and write their own cells
/// (and the Mur state of their own columns) into `out`.
#[allow(clippy::too_many_arguments)]
fn sub_pass(
    slab: &PlaneShare,
    input: &Copy,
    out: &mut Out,
    p: &Rows,
    rows: Range<usize>,
    k: usize,
    step: u64,
    tiling: Tiling,
) {
    let nx = slab.nx;
    for r0 in rows.clone().step_by(tiling.y) {
        for c0 in (0..nx).step_by(tiling.x) {
            let own = (r0..(r0 + tiling.y).min(rows.end), c0..(c0 + tiling.x).min(nx));
            let mut region = Region::load(slab, input, own, k, tiling);
            for t in 0..k {
                region.step(slab, p, step + t as u64);
            }
            region.store(slab, out, p);
        }
    }
}

/// The rows a pass writes, which its tiles cut: from the first row any of its updates
/// covers to the last (`None` when none covers any).
pub fn written(updates: &[&Range<usize>]) -> Option<Range<usize>> {
    let on = || updates.iter().filter(|r| !r.is_empty());
    Some(on().map(|r| r.start).min()?..on().map(|r| r.end).max()?)
}

/// Where a pass writes: the fields (or a copy of them) and a Mur state.
struct Out<'a> {
    ez: &'a mut [f32],
    h: &'a mut [f32],
    prev: &'a mut [Vec<f32>; 2],
}

/// A tile's region: rows `ra..ra + rows`, columns `col[0..w]` (global, in order), its
/// fields and coefficients row-major `w` wide, and the Mur state of its columns.
struct Region {
    own: (Range<usize>, Range<usize>),
    /// The first column before wrapping: local column `lc` is global `cs + lc` mod `nx`.
    cs: isize,
    ra: usize,
    rows: usize,
    col: Vec<usize>,
    /// Whether the region holds the whole row of a periodic grid: then its first and last
    /// columns are neighbours.
    wrap: bool,
    ez: Vec<f32>,
    hx: Vec<f32>,
    hy: Vec<f32>,
    ca: Vec<f32>,
    cb: Vec<f32>,
    prev: [Vec<f32>; 2],
}

impl Region {
    fn load(
        slab: &PlaneShare,
        snap: &Copy,
        own: (Range<usize>, Range<usize>),
        k: usize,
        tiling: Tiling,
    ) -> Region {
        let (nx, m) = (slab.nx, k + 1);
        let held = snap.ez.len() / nx;
        let (ra, rz) = (own.0.start.saturating_sub(m), (own.0.end + m).min(held));
        let full = nx <= tiling.x + 2 * (tiling.steps + 1);
        let (cs, w) = if full {
            (0, nx as isize)
        } else if slab.periodic {
            (own.1.start as isize - m as isize, (own.1.len() + 2 * m) as isize)
        } else {
            let cs = own.1.start.saturating_sub(m);
            (cs as isize, ((own.1.end + m).min(nx) - cs) as isize)
        };
        let col: Vec<usize> = (0..w)
            .map(|lc| (cs + lc).rem_euclid(nx as isize) as usize)
            .collect();
        let w = col.len();
        let wrap = full && slab.periodic;
        let rows = rz - ra;
        let mut r = Region {
            own,
            cs,
            ra,
            rows,
            col,
            wrap,
            ez: Vec::with_capacity(rows * w),
            hx: Vec::with_capacity(rows * w),
            hy: Vec::with_capacity(rows * w),
            ca: Vec::with_capacity(rows * w),
            cb: Vec::with_capacity(rows * w),
            prev: [Vec::new(), Vec::new()],
        };
        // Unwrapped columns are one slice of each row.
        let (c0, straight) = (r.col[0], r.col[w - 1] + 1 == r.col[0] + w);
        for j in ra..rz {
            let (e, h) = (j * nx, 2 * j * nx);
            if straight {
                r.ez.extend_from_slice(&snap.ez[e + c0..e + c0 + w]);
                r.hx.extend_from_slice(&snap.h[h + c0..h + c0 + w]);
                r.hy.extend_from_slice(&snap.h[h + nx + c0..h + nx + c0 + w]);
                r.ca.extend_from_slice(&slab.ca[e + c0..e + c0 + w]);
                r.cb.extend_from_slice(&slab.cb[e + c0..e + c0 + w]);
                continue;
            }
            for &g in &r.col {
                r.ez.push(snap.ez[e + g]);
                r.hx.push(snap.h[h + g]);
                r.hy.push(snap.h[h + nx + g]);
                r.ca.push(slab.ca[e + g]);
                r.cb.push(slab.cb[e + g]);
            }
        }
        for (p, s) in r.prev.iter_mut().zip(&snap.prev) {
            if !s.is_empty() {
                *p = r.col.iter().map(|&g| s[g]).collect();
            }
        }
        r
    }

    /// One step: `update_h`, `update_e`, the sources, the end rows, the PEC sides.
    fn step(&mut self, slab: &PlaneShare, p: &Rows, step: u64) {
        let (nx, w, ra, rows) = (slab.nx, self.col.len(), self.ra, self.rows);
        let local = |r: &Range<usize>| r.start.max(ra) - ra..r.end.min(ra + rows).max(ra) - ra;
        let ch = p.ch;
        // A region's columns are consecutive (wrapped when periodic): a column's right
        // neighbour is the next one, the last column's only when the whole periodic row is
        // held (column 0); likewise to the left. Only the grid's last column (non-periodic)
        // has no H_y update, and it can only be the region's last column.
        let wrap = self.wrap;
        let last_is_edge = !slab.periodic && self.col[w - 1] == nx - 1;
        for lr in local(&p.h) {
            let row = lr * w..(lr + 1) * w;
            if lr + 1 < rows {
                let (e, up) = (&self.ez[row.clone()], &self.ez[row.end..row.end + w]);
                for ((h, a), b) in self.hx[row.clone()].iter_mut().zip(e).zip(up) {
                    *h += ch * (a - b);
                }
            }
            let (e, hy) = (&self.ez[row.clone()], &mut self.hy[row.clone()]);
            for lc in 0..w - 1 {
                hy[lc] += ch * (e[lc + 1] - e[lc]);
            }
            if wrap {
                hy[w - 1] += ch * (e[0] - e[w - 1]);
            }
        }
        let e = local(&p.e);
        let cols = 1..if last_is_edge { w - 1 } else { w };
        for lr in e.start.max(1)..e.end {
            let row = lr * w..(lr + 1) * w;
            let (hx, below) = (&self.hx[row.clone()], &self.hx[row.start - w..row.start]);
            let hy = &self.hy[row.clone()];
            let (ez, ca, cb) = (
                &mut self.ez[row.clone()],
                &self.ca[row.clone()],
                &self.cb[row.clone()],
            );
            let cell = |lc: usize, ln: usize, ez: &mut [f32]| {
                let curl = (hy[lc] - hy[ln]) - (hx[lc] - below[lc]);
                ez[lc] = ca[lc] * ez[lc] + cb[lc] * curl;
            };
            if wrap {
                cell(0, w - 1, ez);
            }
            for lc in cols.clone() {
                cell(lc, lc - 1, ez);
            }
        }
        for (row, src) in p.sources.iter().map(|(row, src)| (*row, src)) {
            let Some(lr) = row.checked_sub(ra).filter(|&lr| lr < rows) else {
                continue;
            };
            for lc in (0..w).filter(|&lc| src.columns.contains(&self.col[lc])) {
                src.apply(&mut self.ez[lr * w + lc], step);
            }
        }
        self.end_rows(slab, p);
        if !slab.periodic {
            let (first, last) = (self.col[0] == 0, self.col[w - 1] == nx - 1);
            for lr in local(&p.s) {
                if first {
                    self.ez[lr * w] = 0.0;
                }
                if last {
                    self.ez[lr * w + w - 1] = 0.0;
                }
            }
        }
    }

    /// The bottom end row (inner neighbour above) and the top one (below), column by
    /// column: PEC zero, Mur from the state and the inner neighbour's new value.
    fn end_rows(&mut self, slab: &PlaneShare, p: &Rows) {
        let (w, ra, rz) = (self.col.len(), self.ra, self.ra + self.rows);
        for (side, end) in p.ends.iter().enumerate() {
            let Some((cond, row)) = *end else { continue };
            let inner = if side == 0 { row + 1 } else { row.wrapping_sub(1) };
            if row < ra || row >= rz || inner < ra || inner >= rz {
                continue;
            }
            let mur = if side == 0 {
                &slab.mur_bottom
            } else {
                &slab.mur_top
            };
            for lc in 0..w {
                let (s, i) = ((row - ra) * w + lc, (inner - ra) * w + lc);
                let v = self.ez[i];
                match cond {
                    EndCondition::Pec => self.ez[s] = 0.0,
                    EndCondition::Mur(_) => {
                        let prev = &mut self.prev[side][lc];
                        self.ez[s] = *prev + mur[self.col[lc]] * (v - self.ez[s]);
                        *prev = v;
                    }
                }
            }
        }
    }

    /// The tile's own cells into the fields, and the Mur state of its own columns where
    /// it holds a Mur end row.
    fn store(&self, slab: &PlaneShare, out: &mut Out, p: &Rows) {
        let (nx, w) = (slab.nx, self.col.len());
        let (ez, h) = (&mut *out.ez, &mut *out.h);
        let lc_of = |g: usize| (g as isize - self.cs) as usize;
        // Own columns are never wrapped: one slice of each row.
        let (g0, g1) = (self.own.1.start, self.own.1.end);
        let at = lc_of(g0)..lc_of(g0) + (g1 - g0);
        for j in self.own.0.clone() {
            let s = (j - self.ra) * w;
            let (e, hr) = (j * nx, 2 * j * nx);
            ez[e + g0..e + g1].copy_from_slice(&self.ez[s + at.start..s + at.end]);
            h[hr + g0..hr + g1].copy_from_slice(&self.hx[s + at.start..s + at.end]);
            h[hr + nx + g0..hr + nx + g1].copy_from_slice(&self.hy[s + at.start..s + at.end]);
        }
        for ((prev, end), mine) in out.prev.iter_mut().zip(&p.ends).zip(&self.prev) {
            if let Some((EndCondition::Mur(_), row)) = *end
                && self.own.0.contains(&row)
            {
                for g in self.own.1.clone() {
                    prev[g] = mine[lc_of(g)];
                }
            }
        }
    }
}
