//! A test-only third geometry that proves DESIGN.md's walk-through ("Adding a geometry"):
//! a *ladder* of rungs, split across devices rung by rung, whose field layout is neither
//! the line's nor the plane's — a slice of `E` holds two floats (the rails `Ea`, `Eb`), a
//! slice of `H` one (the rung `Hr`). Its physics is a toy (two coupled 1D lines, every
//! end a conductor); what it proves is that the decomposition, the programs, the checker,
//! the sim and a headless run take a new layout from `Grid` and `Share` alone.
//!
//! A scenario named [`NAME`] is a ladder (test builds only).

use std::ops::Range;

use super::coefficients::Coefficients;
use super::pass::Pass;
use crate::physics::{EndCondition, PlacedSource};

/// The scenario name that makes a grid a ladder.
pub const NAME: &str = "toy-ladder";

/// A device's share of a ladder: the coefficients of its local rungs.
#[derive(Debug, Clone, Default)]
pub struct LadderShare {
    ca: Vec<f32>,
    cb: Vec<f32>,
    ch: f32,
}

impl LadderShare {
    /// The share of the local rungs `0..len`, global rung `first + i` at local `i` (rungs
    /// outside the grid have zero coefficients).
    pub fn new(c: &Coefficients, first: isize, len: usize) -> LadderShare {
        let at = |i: usize| {
            usize::try_from(first + i as isize)
                .ok()
                .filter(|&k| k < c.ca.len())
        };
        LadderShare {
            ca: (0..len).map(|i| at(i).map_or(0.0, |k| c.ca[k])).collect(),
            cb: (0..len).map(|i| at(i).map_or(0.0, |k| c.cb[k])).collect(),
            ch: c.ch,
        }
    }

    /// `Hr[i] = Hr[i] + ch·(((Ea[i] − Ea[i+1]) + (Eb[i] − Eb[i+1]))·½)` over rungs `r`.
    pub fn update_h(&self, e: &[f32], h: &mut [f32], r: Range<usize>) {
        for i in r {
            let (a, b) = (e[2 * i] - e[2 * i + 2], e[2 * i + 1] - e[2 * i + 3]);
            h[i] += self.ch * ((a + b) * 0.5);
        }
    }

    /// `Ea[i] = ca·Ea[i] + cb·d`, `Eb[i] = ca·Eb[i] + cb·(d·½)` with `d = Hr[i−1] − Hr[i]`.
    pub fn update_e(&self, e: &mut [f32], h: &[f32], r: Range<usize>) {
        for i in r {
            let d = h[i - 1] - h[i];
            e[2 * i] = self.ca[i] * e[2 * i] + self.cb[i] * d;
            e[2 * i + 1] = self.ca[i] * e[2 * i + 1] + self.cb[i] * (d * 0.5);
        }
    }

    /// Sources on rail `Ea` of the rungs in `r`, then every end among them zeroed.
    pub fn sources_boundaries(
        &self,
        e: &mut [f32],
        r: Range<usize>,
        sources: &[(usize, PlacedSource)],
        ends: [Option<(EndCondition, usize)>; 2],
        step: u64,
    ) {
        for (i, src) in sources {
            if r.contains(i) {
                src.apply(&mut e[2 * i], step);
            }
        }
        for (_, i) in ends.into_iter().flatten().filter(|(_, i)| r.contains(i)) {
            e[2 * i] = 0.0;
            e[2 * i + 1] = 0.0;
        }
    }

    /// A fused pass: its steps as one-kernel steps over the pass's ranges (a ladder has no
    /// cache-blocked kernel; the pass is not split, so its save runs it).
    pub fn pass(&self, e: &mut [f32], h: &mut [f32], p: &Pass) {
        for t in 0..p.steps {
            self.update_h(e, h, p.h.clone());
            self.update_e(e, h, p.e.clone());
            self.sources_boundaries(e, p.span.clone(), p.sources, p.ends, p.step + t as u64);
        }
    }

    /// Per-float `(ca, cb)` of the local rungs `0..len`: each rung's twice (two rails).
    pub fn coefficient_arrays(&self, len: usize) -> (Vec<f32>, Vec<f32>) {
        let twice = |v: &[f32]| v[..len].iter().flat_map(|&x| [x, x]).collect();
        (twice(&self.ca), twice(&self.cb))
    }
}

#[cfg(test)]
mod tests;
