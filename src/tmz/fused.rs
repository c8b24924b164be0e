//! Several 2D steps per pass over memory: `fused_steps_2d` (kernels/fdtd2d.cu) on the
//! CPU, step for step, so that the sim runs what the GPU runs and the tests can take the
//! algorithm apart.
//!
//! A pass of `k` steps reads a snapshot of the fields taken before it and writes the
//! fields. Each tile (`tiling.y` rows by `tiling.x` columns of the rows the pass writes)
//! loads its cells and `m = k + 1` rows and columns around them — its region — from the
//! snapshot, runs the `k` steps of [`crate::tmz`] on the region and writes back only its
//! own cells (and the Mur state of its own columns). Tiles read only the snapshot and write
//! only their own cells, so their order does not matter (on the GPU they run at once). A
//! cell at the region's edge that lacks a neighbour keeps its value: it goes wrong, and a
//! wrong value moves one cell a step — twice in one step at a Mur row, which reads its inner
//! neighbour's new value, hence `k + 1` and not `k` — so the tile's own cells, `m` away,
//! come out with the bits of `k` one-kernel steps. Where the region meets the end of the
//! array or of an update's rows, the pass does exactly what the one-kernel steps do: cells
//! beyond are the snapshot's, as they are the fields' there.
//!
//! A region as wide as `tiling.x + 2·(tiling.steps + 1)` columns or wider holds the whole
//! row (the kernel's shared arrays are that wide): then its columns wrap exactly when the
//! sides are periodic; a narrower region wraps its column indices and leaves the cells at
//! its edges as above.

use std::ops::Range;

use super::Slab;
use crate::physics::{EndCondition, PlacedSource};
use crate::scenario::Injection;

/// What one device's pass updates, in local rows: `update_h` on `h`, `update_e` on `e`,
/// sources, end rows and PEC sides on `s` (each one-kernel launch's rows); the end rows
/// there (`(condition, row)` of the bottom and the top one) and the sources on `s`.
pub struct Pass<'a> {
    pub h: Range<usize>,
    pub e: Range<usize>,
    pub s: Range<usize>,
    pub ends: [Option<(EndCondition, usize)>; 2],
    pub sources: Vec<&'a (usize, PlacedSource)>,
    pub ch: f32,
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
    slab: &mut Slab,
    ez: &mut [f32],
    h: &mut [f32],
    p: &Pass,
    steps: usize,
    step: u64,
    tiling: Tiling,
) {
    let nx = slab.nx;
    let written: Vec<&Range<usize>> = [&p.h, &p.e, &p.s].into_iter().filter(|r| !r.is_empty()).collect();
    let (Some(w0), Some(w1)) = (
        written.iter().map(|r| r.start).min(),
        written.iter().map(|r| r.end).max(),
    ) else {
        return;
    };
    for t0 in (0..steps).step_by(tiling.steps.max(1)) {
        let k = (steps - t0).min(tiling.steps);
        let snap = Snapshot {
            ez: ez.to_vec(),
            h: h.to_vec(),
            prev: [slab.prev_bottom.clone(), slab.prev_top.clone()],
        };
        for r0 in (w0..w1).step_by(tiling.y) {
            for c0 in (0..nx).step_by(tiling.x) {
                let own = (r0..(r0 + tiling.y).min(w1), c0..(c0 + tiling.x).min(nx));
                let mut region = Region::load(slab, &snap, own, k, tiling);
                for t in 0..k {
                    region.step(slab, p, step + (t0 + t) as u64);
                }
                region.store(slab, ez, h, p);
            }
        }
    }
}

/// The fields, and the Mur state of the bottom and top rows, as a pass begins.
struct Snapshot {
    ez: Vec<f32>,
    h: Vec<f32>,
    prev: [Vec<f32>; 2],
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
    right: Vec<Option<usize>>,
    left: Vec<Option<usize>>,
    ez: Vec<f32>,
    hx: Vec<f32>,
    hy: Vec<f32>,
    ca: Vec<f32>,
    cb: Vec<f32>,
    prev: [Vec<f32>; 2],
}

impl Region {
    fn load(
        slab: &Slab,
        snap: &Snapshot,
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
        let right = (0..w)
            .map(|lc| {
                if lc + 1 < w {
                    Some(lc + 1)
                } else {
                    wrap.then_some(0)
                }
            })
            .collect();
        let left = (0..w)
            .map(|lc| {
                if lc > 0 {
                    Some(lc - 1)
                } else {
                    wrap.then_some(w - 1)
                }
            })
            .collect();
        let rows = rz - ra;
        let mut r = Region {
            own,
            cs,
            ra,
            rows,
            col,
            right,
            left,
            ez: Vec::with_capacity(rows * w),
            hx: Vec::with_capacity(rows * w),
            hy: Vec::with_capacity(rows * w),
            ca: Vec::with_capacity(rows * w),
            cb: Vec::with_capacity(rows * w),
            prev: [Vec::new(), Vec::new()],
        };
        for j in ra..rz {
            for &g in &r.col {
                r.ez.push(snap.ez[j * nx + g]);
                r.hx.push(snap.h[2 * j * nx + g]);
                r.hy.push(snap.h[2 * j * nx + nx + g]);
                r.ca.push(slab.ca[j * nx + g]);
                r.cb.push(slab.cb[j * nx + g]);
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
    fn step(&mut self, slab: &Slab, p: &Pass, step: u64) {
        let (nx, w, ra, rows) = (slab.nx, self.col.len(), self.ra, self.rows);
        let local = |r: &Range<usize>| r.start.max(ra) - ra..r.end.min(ra + rows).max(ra) - ra;
        let ch = p.ch;
        for lr in local(&p.h) {
            for lc in 0..w {
                let s = lr * w + lc;
                if lr + 1 < rows {
                    self.hx[s] += ch * (self.ez[s] - self.ez[s + w]);
                }
                if let Some(rn) = self.right[lc].filter(|_| self.col[lc] + 1 < nx || slab.periodic) {
                    self.hy[s] += ch * (self.ez[lr * w + rn] - self.ez[s]);
                }
            }
        }
        let e = local(&p.e);
        for lr in e.start.max(1)..e.end {
            for lc in 0..w {
                let g = self.col[lc];
                let Some(ln) = self.left[lc] else { continue };
                if !slab.periodic && (g == 0 || g + 1 == nx) {
                    continue;
                }
                let s = lr * w + lc;
                let curl = (self.hy[s] - self.hy[lr * w + ln]) - (self.hx[s] - self.hx[s - w]);
                self.ez[s] = self.ca[s] * self.ez[s] + self.cb[s] * curl;
            }
        }
        for (row, src) in p.sources.iter().map(|x| (x.0, &x.1)) {
            let Some(lr) = row.checked_sub(ra).filter(|&lr| lr < rows) else {
                continue;
            };
            for lc in (0..w).filter(|&lc| src.columns.contains(&self.col[lc])) {
                let v = src.value(step);
                let cell = &mut self.ez[lr * w + lc];
                *cell = if src.injection == Injection::Hard {
                    v
                } else {
                    *cell + v
                };
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
    fn end_rows(&mut self, slab: &Slab, p: &Pass) {
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
    fn store(&self, slab: &mut Slab, ez: &mut [f32], h: &mut [f32], p: &Pass) {
        let (nx, w) = (slab.nx, self.col.len());
        let lc_of = |g: usize| (g as isize - self.cs) as usize;
        for j in self.own.0.clone() {
            for g in self.own.1.clone() {
                let s = (j - self.ra) * w + lc_of(g);
                ez[j * nx + g] = self.ez[s];
                h[2 * j * nx + g] = self.hx[s];
                h[2 * j * nx + nx + g] = self.hy[s];
            }
        }
        let ends = [&mut slab.prev_bottom, &mut slab.prev_top];
        for ((prev, end), mine) in ends.into_iter().zip(&p.ends).zip(&self.prev) {
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
