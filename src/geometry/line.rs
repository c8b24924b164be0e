//! A device's share of a line (1D): its coefficients as runs, the Mur state of the ends
//! it holds, and the kernels over local cells (`src/physics.rs` has the update formulas,
//! `src/fused.rs` the fused pass).

use std::ops::Range;
use std::sync::OnceLock;

use super::coefficients::Coefficients;
use super::pass::Pass;
use crate::fused::{self, Held, Part};
use crate::physics::{self, EndCondition, PlacedSource};

/// Cells per tile of the fused pass on the CPU (the GPU's blocks take 2048): a tile's
/// fields and coefficients stay in the L2 cache.
pub const FUSED_TILE: usize = 8192;

#[derive(Debug, Clone, Default)]
pub struct LineShare {
    /// `(local start, local end, ca, cb)`: runs of cells with equal coefficients, so the
    /// kernel streams only the fields (materials are a few regions, not per-cell data).
    runs: Vec<(usize, usize, f32, f32)>,
    ch: f32,
    /// The end cells' inner neighbours after the previous step: left, right.
    prev: [f32; 2],
    /// This device as the fused kernel sees it, built at its first pass.
    held: OnceLock<Held>,
    /// The strips the last `fused_save` kept (made by the first one).
    margins: Option<Box<fused::Margins>>,
}

impl LineShare {
    /// The share of the local cells `0..len`, global cell `first + i` at local `i`
    /// (`first` may be negative: cells outside `0..n` have zero coefficients).
    pub fn new(c: &Coefficients, first: isize, len: usize) -> LineShare {
        let n = c.ca.len();
        let mut runs: Vec<(usize, usize, f32, f32)> = Vec::new();
        for i in 0..len {
            let k = usize::try_from(first + i as isize).ok().filter(|&k| k < n);
            let (a, b) = k.map_or((0.0, 0.0), |k| (c.ca[k], c.cb[k]));
            match runs.last_mut() {
                Some(run) if run.2.to_bits() == a.to_bits() && run.3.to_bits() == b.to_bits() => {
                    run.1 = i + 1
                }
                _ => runs.push((i, i + 1, a, b)),
            }
        }
        LineShare {
            runs,
            ch: c.ch,
            ..LineShare::default()
        }
    }

    /// A copy of the state (the fused kernel's view of it is rebuilt if asked for).
    pub fn fork(&self) -> LineShare {
        LineShare {
            runs: self.runs.clone(),
            ch: self.ch,
            prev: self.prev,
            held: OnceLock::new(),
            margins: self.margins.clone(),
        }
    }

    /// Per-cell `(ca, cb)` of the local cells `0..len` (zero outside the grid).
    pub fn coefficient_arrays(&self, len: usize) -> (Vec<f32>, Vec<f32>) {
        let (mut ca, mut cb) = (vec![0.0; len], vec![0.0; len]);
        for &(s, e, a, b) in &self.runs {
            ca[s..e].fill(a);
            cb[s..e].fill(b);
        }
        (ca, cb)
    }

    pub fn update_h(&self, ex: &[f32], hy: &mut [f32], r: Range<usize>) {
        if !r.is_empty() {
            physics::update_h(&mut hy[r.clone()], &ex[r.start..r.end + 1], self.ch);
        }
    }

    pub fn update_e(&self, ex: &mut [f32], hy: &[f32], r: Range<usize>) {
        if r.is_empty() {
            return;
        }
        for &(s, e, ca, cb) in &self.runs {
            let (a, b) = (s.max(r.start), e.min(r.end));
            if a < b {
                physics::update_e(&mut ex[a..b], &hy[a - 1..b], ca, cb);
            }
        }
    }

    /// Sources on the local cells `r`, then the grid's ends among them.
    pub fn sources_boundaries(
        &mut self,
        ex: &mut [f32],
        r: Range<usize>,
        sources: &[(usize, PlacedSource)],
        ends: [Option<(EndCondition, usize)>; 2],
        step: u64,
    ) {
        for (i, src) in sources {
            if r.contains(i) {
                src.apply(&mut ex[*i], step);
            }
        }
        let [left, right] = ends;
        if let Some((cond, l)) = left.filter(|(_, l)| r.contains(l)) {
            let inner = ex[l + 1];
            physics::apply_end(cond, &mut ex[l], inner, &mut self.prev[0]);
        }
        if let Some((cond, e)) = right.filter(|(_, e)| r.contains(e)) {
            let inner = ex[e - 1];
            physics::apply_end(cond, &mut ex[e], inner, &mut self.prev[1]);
        }
    }

    /// This device as the fused kernel sees it.
    pub fn held(&self, p: &Pass) -> &Held {
        self.held.get_or_init(|| self.build_held(p))
    }

    /// [`LineShare::held`], taken.
    pub fn into_held(mut self, p: &Pass) -> Held {
        match self.held.take() {
            Some(h) => h,
            None => self.build_held(p),
        }
    }

    fn build_held(&self, p: &Pass) -> Held {
        let (ca, cb) = self.coefficient_arrays(p.hi - p.lo + 2 * p.halo);
        let [left, right] = p.ends;
        Held {
            lo: p.lo,
            hi: p.hi,
            halo: p.halo,
            ch: self.ch,
            ca,
            cb,
            h_valid: p.h_valid.clone(),
            e_valid: p.e_valid.clone(),
            sources: p.sources.to_vec(),
            left,
            right,
        }
    }

    /// `steps` steps from step `step` over the local cells `p.span` in one pass of tiles
    /// (src/fused.rs): the cells within `steps` of the ends of that span come out stale.
    pub fn fused(&mut self, ex: &mut Vec<f32>, hy: &mut Vec<f32>, p: &Pass) {
        if p.span.is_empty() {
            return;
        }
        let mut f = fused::Fields {
            ex: std::mem::take(ex),
            hy: std::mem::take(hy),
            prev: self.prev,
        };
        self.held(p);
        let held = self.held.get().expect("built above");
        fused::pass(held, &mut f, p.span.clone(), p.steps, p.step, FUSED_TILE);
        (*ex, *hy, self.prev) = (f.ex, f.hy, f.prev);
    }

    /// `fused_save` over `p.span`: the fields next to every cut between the tiles of both
    /// parts, and the Mur state, as they are (the GPU's strips), for the parts to read
    /// their margins from.
    pub fn fused_save(&mut self, ex: &[f32], hy: &[f32], p: &Pass) {
        let cuts = fused::split_cuts(&p.span, p.steps, FUSED_TILE);
        let m = self.margins.get_or_insert_with(Box::default);
        m.save((ex, hy), self.prev, &p.span, cuts, p.steps);
    }

    /// The tiles of `part` of a split pass over `p.span` (src/fused.rs
    /// [`fused::pass_tiles`]), their margins from the last `fused_save` (zeros before any,
    /// as the GPU's strips). A `fused_store` pass reads its halo cells from the save too
    /// and writes back only the owned cells `own`.
    pub fn fused_part(
        &mut self,
        ex: &mut Vec<f32>,
        hy: &mut Vec<f32>,
        p: &Pass,
        part: Part,
        own: Range<usize>,
    ) {
        if p.span.is_empty() {
            return;
        }
        let before = self.margins.take().unwrap_or_default();
        let mut f = fused::Fields {
            ex: std::mem::take(ex),
            hy: std::mem::take(hy),
            prev: self.prev,
        };
        let tiles = fused::part_tiles(&p.span, p.steps, part, FUSED_TILE);
        self.held(p);
        let held = self.held.get().expect("built above");
        fused::pass_tiles(held, &mut f, &before, &p.span, &own, tiles, p.steps, p.step);
        (*ex, *hy, self.prev) = (f.ex, f.hy, f.prev);
        self.margins = Some(before);
    }
}
