//! Yee (FDTD) physics in float32: sources, ends, and the 1D update formulas
//! (`src/geometry/coefficients.rs` has the coefficients of both geometries).
//!
//! Fields are normalised so that `Hy` carries `η0·H`; then both update coefficients in
//! vacuum are the Courant number `S = c·dt/dx`. Cell `k` holds `Ex[k]` at `x = k·dx` and
//! `Hy[k]` at `x = (k + ½)·dx`.
//!
//! # Order of operations in one step (the only place it is written down)
//!
//! 1. `update_h` for every cell `k` in `0..n-1`: `Hy[k] = Hy[k] + S·(Ex[k] − Ex[k+1])`.
//!    `Hy[n-1]` lies beyond the last `Ex` node and stays 0.
//! 2. `update_e` for every cell `k` in `1..n-1`:
//!    `Ex[k] = ca[k]·Ex[k] + cb[k]·(Hy[k-1] − Hy[k])`. `Ex[0]` and `Ex[n-1]` belong to the
//!    boundaries.
//! 3. `sources`, in scenario order: soft `Ex[p] = Ex[p] + f(t)`, hard `Ex[p] = f(t)`,
//!    with `t = step + 1` (the time level `Ex` has just reached), `f` evaluated in f64 and
//!    rounded once to f32.
//! 4. `boundaries`: PEC sets the end node to 0; first-order Mur sets
//!    `Ex[0] = prev1 + m·(Ex[1] − Ex[0])` where `prev1` is `Ex[1]` of the previous step and
//!    `m = (c − 1)/(c + 1)`, `c` the local Courant number (mirrored at the right end).
//!
//! Every expression is written as plain `+`, `−`, `·` on f32: Rust never contracts them
//! into fused multiply-adds, and the CUDA kernels are built with `--fmad=false`, so every
//! implementation of these steps agrees bit for bit.

use crate::scenario::{Boundary, Injection, SourceKind};

/// Source waveform value at time `t` (in steps).
pub fn waveform(kind: &SourceKind, t: f64) -> f64 {
    match *kind {
        SourceKind::Gaussian { delay, width } => {
            let x = (t - delay) / width;
            (-0.5 * x * x).exp()
        }
        SourceKind::Ricker { delay, period } => {
            let a = std::f64::consts::PI * (t - delay) / period;
            (1.0 - 2.0 * a * a) * (-a * a).exp()
        }
        SourceKind::Sinusoid { period } => (2.0 * std::f64::consts::PI * t / period).sin(),
    }
}

/// `Hy[j] = Hy[j] + ch·(Ex[j] − Ex[j+1])` for every `j` of `hy`; `ex` is one longer.
#[inline]
pub fn update_h(hy: &mut [f32], ex: &[f32], ch: f32) {
    let n = hy.len();
    let (e0, e1) = (&ex[..n], &ex[1..n + 1]);
    for j in 0..n {
        hy[j] += ch * (e0[j] - e1[j]);
    }
}

/// `Ex[j] = ca·Ex[j] + cb·(Hy[j-1] − Hy[j])` over a run of cells of one material; `hy`
/// starts one cell to the left and is one longer than `ex`.
#[inline]
pub fn update_e(ex: &mut [f32], hy: &[f32], ca: f32, cb: f32) {
    let n = ex.len();
    let (h0, h1) = (&hy[..n], &hy[1..n + 1]);
    for j in 0..n {
        ex[j] = ca * ex[j] + cb * (h0[j] - h1[j]);
    }
}

/// One source placed on a cell, ready to apply.
#[derive(Debug, Clone)]
pub struct PlacedSource {
    pub position: usize,
    /// The columns of its row it drives (`0..1` in 1D).
    pub columns: std::ops::Range<usize>,
    pub kind: SourceKind,
    pub injection: Injection,
    pub amplitude: f64,
}

impl PlacedSource {
    /// The f32 value this source contributes after step `step` (0-based).
    pub fn value(&self, step: u64) -> f32 {
        (self.amplitude * waveform(&self.kind, step as f64 + 1.0)) as f32
    }

    pub fn apply(&self, cell: &mut f32, step: u64) {
        let v = self.value(step);
        match self.injection {
            Injection::Soft => *cell += v,
            Injection::Hard => *cell = v,
        }
    }
}

/// What one end of the grid does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EndCondition {
    Pec,
    /// First-order Mur with its coefficient.
    Mur(f32),
}

impl EndCondition {
    pub fn new(b: Boundary, mur: f32) -> Self {
        match b {
            Boundary::Pec => EndCondition::Pec,
            Boundary::Mur => EndCondition::Mur(mur),
        }
    }
}

/// Applies one end condition. `end` is the boundary node, `inner` its neighbour (already
/// updated this step), `prev_inner` the neighbour's value after the previous step, which is
/// then advanced.
#[inline]
pub fn apply_end(cond: EndCondition, end: &mut f32, inner: f32, prev_inner: &mut f32) {
    match cond {
        EndCondition::Pec => *end = 0.0,
        EndCondition::Mur(m) => *end = *prev_inner + m * (inner - *end),
    }
    *prev_inner = inner;
}

/// Discrete electromagnetic energy of a lossless grid, conserved exactly by the Yee
/// scheme: `Σ eps_r·Ex^n² + Σ Hy^(n−½)·Hy^(n+½)` (up to the constant factor `dx·eps0/2`).
/// `eps_r[k]` is `S/cb[k]` for lossless cells.
pub fn staggered_energy(ex: &[f32], hy_before: &[f32], hy_after: &[f32], eps_r: &[f64]) -> f64 {
    let e: f64 = ex
        .iter()
        .zip(eps_r)
        .map(|(&e, &r)| r * f64::from(e) * f64::from(e))
        .sum();
    let h: f64 = hy_before
        .iter()
        .zip(hy_after)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum();
    e + h
}
