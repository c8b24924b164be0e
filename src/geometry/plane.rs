//! 2D TMz Yee (FDTD) physics in float32: the kernels on a slab of rows.
//!
//! Fields are normalised as in 1D (`H` carries `η0·H`), so every curl coefficient in
//! vacuum is the Courant number `S = c·dt/dx` (`dx = dy`; stable for `S ≤ 1/√2`). Cell
//! `(i, j)` — column `i`, row `j` — holds `Ez` at `(i, j)·dx`, `Hx` at `(i, j + ½)·dx`
//! and `Hy` at `(i + ½, j)·dx`. A slab's arrays are row-major: `Ez` has `nx` floats per
//! row; the `H` array has `2·nx` per row, `Hx` of the row then its `Hy`, so that one row
//! of `H` is one contiguous halo (devices split the grid by rows).
//!
//! # Order of operations in one step (the only place it is written down)
//!
//! 1. `update_h` for every row `j` in `0..ny-1` and column `i`:
//!    `Hx[j][i] = Hx[j][i] + S·(Ez[j][i] − Ez[j+1][i])`, and
//!    `Hy[j][i] = Hy[j][i] + S·(Ez[j][i+1] − Ez[j][i])` for `i` in `0..nx-1` — with
//!    periodic sides also `i = nx−1`, whose right neighbour is column 0. (Row `ny−1`'s `H`
//!    lies beyond the last `Ez` row and stays 0.)
//! 2. `update_e` for every row `j` in `1..ny-1` and column `i` in `1..nx-1` (periodic
//!    sides: every column, column −1 being `nx−1`):
//!    `Ez[j][i] = ca·Ez[j][i] + cb·((Hy[j][i] − Hy[j][i−1]) − (Hx[j][i] − Hx[j−1][i]))`.
//! 3. `sources`, in scenario order, on each of their columns: soft `Ez += f(t)`, hard
//!    `Ez = f(t)`, `t = step + 1`, `f` in f64 rounded once to f32 (as in 1D).
//! 4. `boundaries`: the first and last rows as the 1D ends, column by column — PEC sets
//!    the row to 0; first-order Mur sets `Ez[0][i] = prev[i] + m[i]·(Ez[1][i] − Ez[0][i])`,
//!    `prev[i]` being `Ez[1][i]` after the previous step (mirrored at the top); then PEC
//!    sides set columns 0 and `nx−1` to 0 (periodic sides do nothing).
//!
//! As in 1D, every expression is plain `+`, `−`, `·` on f32, never contracted into fused
//! multiply-adds, so every implementation of these steps agrees bit for bit.

use std::ops::Range;

pub mod fused;

use crate::physics::{EndCondition, PlacedSource};

/// One device's share of a plane (a slab of rows) as the kernels see it: row width, side condition and coefficients
/// of every held row (halo rows included; zero outside the grid).
#[derive(Debug, Clone)]
pub struct PlaneShare {
    pub nx: usize,
    /// The `H` curl coefficient (the Courant number).
    pub ch: f32,
    pub periodic: bool,
    /// `ca`, `cb` per `Ez` cell, row-major over the held rows (never changed: an
    /// observation's fork shares them).
    pub ca: std::sync::Arc<[f32]>,
    pub cb: std::sync::Arc<[f32]>,
    /// The Mur state of the bottom and top rows (one per column), where this device
    /// holds them.
    pub prev_bottom: Vec<f32>,
    pub prev_top: Vec<f32>,
    /// The Mur coefficients of those rows, per column.
    pub mur_bottom: Vec<f32>,
    pub mur_top: Vec<f32>,
    /// What a split pass's save leaves for its parts (the GPU's split buffer): made by the
    /// first save, reused after.
    pub saved: Option<Box<Copy>>,
}

/// One copy of a device's fields: `Ez`, `H`, and the Mur state of the bottom and top rows
/// (a pass's snapshot; a split pass's saved copy).
#[derive(Debug, Clone, Default)]
pub struct Copy {
    ez: Vec<f32>,
    h: Vec<f32>,
    prev: [Vec<f32>; 2],
}

impl Copy {
    /// A copy of zeros, as the GPU's zeroed buffer before any save.
    pub fn zeros(ez: usize, h: usize, prev: [usize; 2]) -> Copy {
        Copy {
            ez: vec![0.0; ez],
            h: vec![0.0; h],
            prev: prev.map(|n| vec![0.0; n]),
        }
    }

    /// These fields, into the copy's buffers.
    pub(crate) fn set(&mut self, ez: &[f32], h: &[f32], prev: [&Vec<f32>; 2]) {
        for (to, from) in [(&mut self.ez, ez), (&mut self.h, h)] {
            to.clear();
            to.extend_from_slice(from);
        }
        for (to, from) in self.prev.iter_mut().zip(prev) {
            to.clone_from(from);
        }
    }
}

impl PlaneShare {
    /// The slab of a device owning the rows `rows` with `halo` halo rows a side:
    /// coefficients of its held rows (zero outside the grid), its Mur rows.
    pub fn new(
        s: &crate::scenario::Scenario,
        c: &super::coefficients::Coefficients,
        rows: Range<usize>,
        halo: usize,
    ) -> Result<PlaneShare, crate::memory::OutOfMemory> {
        use crate::memory::filled;
        let (nx, lo, hi) = (s.nx, rows.start, rows.end);
        let len = (hi - lo + 2 * halo) * nx;
        let mut ca = filled(len, 0.0f32, "a device's coefficients")?;
        let mut cb = filled(len, 0.0f32, "a device's coefficients")?;
        let (first, last) = (lo.saturating_sub(halo), (hi + halo).min(s.cells));
        let at = (first + halo - lo) * nx;
        ca[at..at + (last - first) * nx].copy_from_slice(&c.ca[first * nx..last * nx]);
        cb[at..at + (last - first) * nx].copy_from_slice(&c.cb[first * nx..last * nx]);
        Ok(PlaneShare {
            nx,
            ch: c.ch,
            periodic: s.sides == crate::scenario::Sides::Periodic,
            ca: ca.into(),
            cb: cb.into(),
            prev_bottom: vec![0.0; if lo == 0 { nx } else { 0 }],
            prev_top: vec![0.0; if hi == s.cells { nx } else { 0 }],
            mur_bottom: c.mur_rows.0.clone(),
            mur_top: c.mur_rows.1.clone(),
            saved: None,
        })
    }
}

impl PlaneShare {
    /// Sources, the end rows and the sides over the local rows `r`.
    pub fn sources_boundaries(
        &mut self,
        ez: &mut [f32],
        r: Range<usize>,
        sources: &[(usize, PlacedSource)],
        ends: [Option<(EndCondition, usize)>; 2],
        step: u64,
    ) {
        let nx = self.nx;
        for (row, src) in sources {
            if r.contains(row) {
                for col in src.columns.clone() {
                    src.apply(&mut ez[row * nx + col], step);
                }
            }
        }
        let [bottom, top] = ends;
        if let Some((cond, l)) = bottom.filter(|(_, l)| r.contains(l)) {
            let mur = matches!(cond, EndCondition::Mur(_))
                .then_some((&self.mur_bottom[..], &mut self.prev_bottom[..]));
            apply_end_row(ez, nx, l, l + 1, mur);
        }
        if let Some((cond, e)) = top.filter(|(_, e)| r.contains(e)) {
            let mur =
                matches!(cond, EndCondition::Mur(_)).then_some((&self.mur_top[..], &mut self.prev_top[..]));
            apply_end_row(ez, nx, e, e - 1, mur);
        }
        if !self.periodic {
            pec_sides(ez, nx, r);
        }
    }
}

/// `update_h` over the local rows `rows` (row `rows.end` of `ez` must exist).
pub fn update_h(ez: &[f32], h: &mut [f32], nx: usize, rows: Range<usize>, ch: f32, periodic: bool) {
    for j in rows {
        let e = &ez[j * nx..(j + 1) * nx];
        let up = &ez[(j + 1) * nx..(j + 2) * nx];
        let (hx, hy) = h[2 * j * nx..2 * (j + 1) * nx].split_at_mut(nx);
        for i in 0..nx {
            hx[i] += ch * (e[i] - up[i]);
        }
        for i in 0..nx - 1 {
            hy[i] += ch * (e[i + 1] - e[i]);
        }
        if periodic {
            hy[nx - 1] += ch * (e[0] - e[nx - 1]);
        }
    }
}

/// `update_e` over the local rows `rows` (row `rows.start − 1` of `h` must exist).
pub fn update_e(ez: &mut [f32], h: &[f32], s: &PlaneShare, rows: Range<usize>) {
    let nx = s.nx;
    for j in rows {
        let (below, row) = (&h[2 * (j - 1) * nx..2 * j * nx], &h[2 * j * nx..2 * (j + 1) * nx]);
        let (hx_below, (hx, hy)) = (&below[..nx], row.split_at(nx));
        let base = j * nx;
        let cell = |i: usize, left: usize, ez: &mut [f32]| {
            let k = base + i;
            ez[k] = s.ca[k] * ez[k] + s.cb[k] * ((hy[i] - hy[left]) - (hx[i] - hx_below[i]));
        };
        if s.periodic {
            cell(0, nx - 1, ez);
        }
        for i in 1..nx - 1 {
            cell(i, i - 1, ez);
        }
        if s.periodic {
            cell(nx - 1, nx - 2, ez);
        }
    }
}

/// First-order Mur (or PEC) on the end row `end` whose inner neighbour is `inner`.
pub fn apply_end_row(ez: &mut [f32], nx: usize, end: usize, inner: usize, mur: Option<(&[f32], &mut [f32])>) {
    match mur {
        None => ez[end * nx..(end + 1) * nx].fill(0.0),
        Some((m, prev)) => {
            for i in 0..nx {
                let v = ez[inner * nx + i];
                let e = &mut ez[end * nx + i];
                *e = prev[i] + m[i] * (v - *e);
                prev[i] = v;
            }
        }
    }
}

/// PEC sides: columns 0 and `nx − 1` of the local rows `rows` set to 0.
pub fn pec_sides(ez: &mut [f32], nx: usize, rows: Range<usize>) {
    for j in rows {
        ez[j * nx] = 0.0;
        ez[j * nx + nx - 1] = 0.0;
    }
}

/// Discrete electromagnetic energy of a lossless 2D grid, conserved by the Yee scheme:
/// `Σ eps_r·Ez^n² + Σ H^(n−½)·H^(n+½)` over both `H` components (up to `dx²·eps0/2`) —
/// the 1D sum, over `ny` rows of `nx` cells of `Ez` and `2·nx` of `H`.
pub use crate::physics::staggered_energy;

#[cfg(test)]
mod tests {
    use super::*;

    fn slab(nx: usize, rows: usize, periodic: bool) -> PlaneShare {
        PlaneShare {
            nx,
            ch: 0.5,
            periodic,
            ca: vec![1.0; nx * rows].into(),
            cb: vec![0.5; nx * rows].into(),
            prev_bottom: vec![0.0; nx],
            prev_top: vec![0.0; nx],
            mur_bottom: vec![0.0; nx],
            mur_top: vec![0.0; nx],
            saved: None,
        }
    }

    #[test]
    fn a_periodic_row_is_the_same_wherever_it_is_cut() {
        // A field that depends only on the column, shifted by one column, updates to the
        // shifted result: no column is special when the sides are periodic.
        let (nx, rows) = (7, 4);
        let s = slab(nx, rows, true);
        let make = |shift: usize| {
            let ez: Vec<f32> = (0..nx * rows)
                .map(|k| (((k % nx) + shift) % nx) as f32 * 0.25)
                .collect();
            let mut h = vec![0.0; 2 * nx * rows];
            update_h(&ez, &mut h, nx, 0..rows - 1, 0.5, true);
            let mut ez = ez;
            update_e(&mut ez, &h, &s, 1..rows - 1);
            ez
        };
        let (a, b) = (make(0), make(1));
        for j in 1..rows - 1 {
            for i in 0..nx {
                assert_eq!(
                    b[j * nx + i].to_bits(),
                    a[j * nx + (i + 1) % nx].to_bits(),
                    "row {j} col {i}"
                );
            }
        }
    }

    #[test]
    fn pec_sides_and_rows_hold_zero() {
        let (nx, rows) = (5, 4);
        let mut ez = vec![1.0; nx * rows];
        pec_sides(&mut ez, nx, 0..rows);
        apply_end_row(&mut ez, nx, 0, 1, None);
        assert!(ez[..nx].iter().all(|&v| v == 0.0));
        assert!((0..rows).all(|j| ez[j * nx] == 0.0 && ez[j * nx + nx - 1] == 0.0));
        assert_eq!(ez[nx + 1], 1.0);
    }
}
