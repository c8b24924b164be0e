//! Domain decomposition: each device owns a contiguous range of cells plus [`HALO`] halo
//! cells per side, and runs the kernels over the cells it holds. Halo values arrive from
//! outside — the runtimes move them; this module only says where they live.
//!
//! Local layout of every per-device array: index `i` holds global cell `lo − HALO + i`,
//! so `HALO..HALO + m` are the owned cells. A one-step exchange needs only the halo cells
//! next to the owned ones: `update_h` on the last owned cell reads `Ex` of the right
//! neighbour's first cell, and `update_e` on the first owned cell reads `Hy` of the left
//! neighbour's last cell. The wide-halo modes use them all: they compute some of their
//! neighbours' cells too, and exchange once every few steps (src/fused.rs).

use std::ops::Range;
use std::sync::OnceLock;

use crate::fused::{self, Held};

pub use crate::access::{Access, Buffer, Field, Kernel, Part};

mod split;

use crate::memory::{OutOfMemory, filled, reserve};
use crate::physics::{self, Coefficients, EndCondition, PlacedSource};
use crate::scenario::Scenario;
use crate::tmz::{self, Slab};

/// Halo cells on each side of every device's arrays: the most steps a wide-halo mode may
/// run between exchanges.
pub const HALO: usize = crate::fused::MAX_STEPS;

/// `(Ex, Hy)` of every owned cell of the grid, in order.
pub type Gathered = (Vec<f32>, Vec<f32>);

/// The reference's gathered fields, shared by the device threads that compare with them.
pub type Reference = std::sync::Arc<Gathered>;

/// Cells per tile of the fused pass on the CPU (the GPU's blocks take 2048): a tile's
/// fields and coefficients stay in the L2 cache.
const FUSED_TILE: usize = 8192;

/// One device's share of the grid, with its own copy of the fields and coefficients.
#[derive(Debug, Clone)]
pub struct DeviceState {
    pub index: usize,
    /// Global range of owned cells.
    pub lo: usize,
    pub hi: usize,
    /// Cells in the whole grid.
    pub n: usize,
    pub ex: Vec<f32>,
    pub hy: Vec<f32>,
    /// `(local start, local end, ca, cb)`: runs of cells with equal coefficients, so the
    /// kernel streams only the fields (materials are a few regions, not per-cell data).
    coef_runs: Vec<(usize, usize, f32, f32)>,
    ch: f32,
    sources: Vec<(usize, PlacedSource)>,
    left_end: Option<EndCondition>,
    right_end: Option<EndCondition>,
    prev_left: f32,
    prev_right: f32,
    /// This device as the fused kernel sees it, built at its first pass.
    held: OnceLock<Held>,
    /// A 2D grid: rows of cells (`ex` is then `Ez`, `hy` the `H` rows: `Hx` then `Hy`).
    slab: Option<Box<Slab>>,
    /// The strips the last `fused_save` kept (made by the first one).
    margins: Option<Box<fused::Margins>>,
}

/// The scenario's sources on the owned cells `cells` and `halo` cells each side, with
/// their local index (global cell `lo − halo` is local 0), in scenario order.
pub fn place_sources(s: &Scenario, cells: Range<usize>, halo: usize) -> Vec<(usize, PlacedSource)> {
    let held = cells.start.saturating_sub(halo)..cells.end + halo;
    s.sources
        .iter()
        .filter(|src| held.contains(&src.position))
        .map(|src| {
            let placed = PlacedSource {
                position: src.position,
                columns: src.columns.clone(),
                kind: src.kind,
                injection: src.injection,
                amplitude: src.amplitude,
            };
            (src.position + halo - cells.start, placed)
        })
        .collect()
}

impl DeviceState {
    pub fn new(
        index: usize,
        cells: Range<usize>,
        s: &Scenario,
        c: &Coefficients,
    ) -> Result<Self, OutOfMemory> {
        let (lo, hi, n) = (cells.start, cells.end, s.cells);
        let m = hi - lo;
        let len = m + 2 * HALO;
        let mut coef_runs: Vec<(usize, usize, f32, f32)> = Vec::new();
        for i in 0..len {
            let k = (lo + i).checked_sub(HALO).filter(|&k| k < n);
            let (a, b) = k.map_or((0.0, 0.0), |k| (c.ca[k], c.cb[k]));
            match coef_runs.last_mut() {
                Some(run) if run.2.to_bits() == a.to_bits() && run.3.to_bits() == b.to_bits() => {
                    run.1 = i + 1
                }
                _ => coef_runs.push((i, i + 1, a, b)),
            }
        }
        let sources = place_sources(s, lo..hi, HALO);
        let slab = s
            .two_d()
            .then(|| Slab::new(s, c, lo..hi, HALO).map(Box::new))
            .transpose()?;
        let nx = s.nx;
        let h_width = if slab.is_some() { 2 * nx } else { 1 };
        Ok(DeviceState {
            index,
            lo,
            hi,
            n,
            ex: filled(len * nx, 0.0, "a device's fields")?,
            hy: filled(len * h_width, 0.0, "a device's fields")?,
            coef_runs: if slab.is_some() { Vec::new() } else { coef_runs },
            ch: c.ch,
            sources,
            left_end: (lo == 0).then(|| EndCondition::new(s.left, c.mur_left)),
            right_end: (hi == n).then(|| EndCondition::new(s.right, c.mur_right)),
            prev_left: 0.0,
            prev_right: 0.0,
            held: OnceLock::new(),
            slab,
            margins: None,
        })
    }

    /// The device without its memory: where it lies, its sources and its ends — all the
    /// hazard checker asks of it ([`DeviceState::accesses`]); its fields are empty.
    pub fn shape(index: usize, cells: Range<usize>, s: &Scenario) -> DeviceState {
        let (lo, hi, n) = (cells.start, cells.end, s.cells);
        DeviceState {
            index,
            lo,
            hi,
            n,
            ex: Vec::new(),
            hy: Vec::new(),
            coef_runs: Vec::new(),
            ch: 0.0,
            sources: place_sources(s, lo..hi, HALO),
            left_end: (lo == 0).then(|| EndCondition::new(s.left, 0.0)),
            right_end: (hi == n).then(|| EndCondition::new(s.right, 0.0)),
            prev_left: 0.0,
            prev_right: 0.0,
            held: OnceLock::new(),
            slab: None,
            margins: None,
        }
    }

    /// [`DeviceState::shape`] of every device of `s`.
    pub fn shapes(s: &Scenario) -> Vec<DeviceState> {
        s.ranges()
            .into_iter()
            .enumerate()
            .map(|(d, r)| DeviceState::shape(d, r, s))
            .collect()
    }

    /// A copy of the device's memory and end state (the fused kernel's view of it is
    /// rebuilt if asked for): an observation's fork.
    pub fn fork(&self) -> DeviceState {
        DeviceState {
            index: self.index,
            lo: self.lo,
            hi: self.hi,
            n: self.n,
            ex: self.ex.clone(),
            hy: self.hy.clone(),
            coef_runs: self.coef_runs.clone(),
            ch: self.ch,
            sources: self.sources.clone(),
            left_end: self.left_end,
            right_end: self.right_end,
            prev_left: self.prev_left,
            prev_right: self.prev_right,
            held: OnceLock::new(),
            slab: self.slab.clone(),
            margins: self.margins.clone(),
        }
    }

    /// Floats per cell (1D) or row (2D) of a field: `Ez` has `nx` per row, `H` `2·nx`.
    pub fn width(&self, f: Field) -> usize {
        f.floats_per_row(self.nx())
    }

    /// A 2D device's slab (its coefficients, sides and Mur rows); `None` in 1D.
    pub fn slab(&self) -> Option<&Slab> {
        self.slab.as_deref()
    }

    /// Cells per row: 1 in 1D.
    pub fn nx(&self) -> usize {
        self.slab.as_ref().map_or(1, |s| s.nx)
    }

    /// Number of owned cells.
    pub fn cells(&self) -> usize {
        self.hi - self.lo
    }

    /// Local index of global cell `k` (halos included).
    pub fn local(&self, k: usize) -> usize {
        k + HALO - self.lo
    }

    /// Local indices of the owned cells.
    pub fn owned_local(&self) -> Range<usize> {
        HALO..HALO + self.cells()
    }

    /// Local index of the left / right end cell of the grid, where this device owns it.
    pub fn end_cells(&self) -> (usize, usize) {
        (HALO, HALO + self.cells() - 1)
    }

    /// Held cells of `cells` on which a kernel is defined, as local indices.
    fn clamp(&self, cells: &Range<usize>, valid: Range<usize>) -> Range<usize> {
        let a = cells.start.max(self.lo.saturating_sub(HALO)).max(valid.start);
        let b = cells.end.min(self.hi + HALO).min(valid.end);
        if a >= b {
            0..0
        } else {
            self.local(a)..self.local(b)
        }
    }

    /// The local cells a kernel launched over global `cells` works on: held cells where
    /// the kernel is defined (the CUDA runtime launches exactly these).
    pub fn kernel_range(&self, kernel: Kernel, cells: &Range<usize>) -> Range<usize> {
        let r = match kernel {
            Kernel::UpdateH => self.clamp(cells, 0..self.n - 1),
            Kernel::UpdateE => self.clamp(cells, 1..self.n - 1),
            Kernel::SourcesBoundaries
            | Kernel::Fused { .. }
            | Kernel::FusedSave { .. }
            | Kernel::FusedPart { .. } => self.clamp(cells, 0..self.n),
        };
        // update_h reads Ex one cell to the right, update_e Hy one to the left: never past
        // the ends of the array.
        let len = self.cells() + 2 * HALO;
        match kernel {
            Kernel::UpdateH => r.start..r.end.min(len - 1),
            Kernel::UpdateE => r.start.max(1)..r.end.max(1),
            _ => r,
        }
    }

    /// Everything kernel `kernel` launched over global `cells` reads and writes on this
    /// device: the cells [`DeviceState::run`] touches (from the same [`kernel_range`]),
    /// for the hazard checker. `update_h` reads `Ex` one cell to the right, `update_e`
    /// `Hy` one to the left; an end reads its inner neighbour and its Mur state.
    ///
    /// [`kernel_range`]: DeviceState::kernel_range
    pub fn accesses(&self, kernel: Kernel, cells: &Range<usize>) -> Vec<Access> {
        let g = |r: Range<usize>| self.global(r.start)..self.global(r.start) + r.len();
        let acc = |buffer, cells, write| Access { buffer, cells, write };
        let (ex, hy) = (Buffer::Field(Field::Ex), Buffer::Field(Field::Hy));
        let mut out = Vec::new();
        match kernel {
            Kernel::FusedSave { .. } | Kernel::FusedPart { .. } => {
                self.split_accesses(kernel, cells, &mut out)
            }
            Kernel::UpdateH | Kernel::UpdateE | Kernel::Fused { .. } => {
                let r = self.kernel_range(kernel, cells);
                if r.is_empty() {
                    return out;
                }
                match kernel {
                    Kernel::UpdateH => {
                        out.push(acc(hy, g(r.clone()), false));
                        out.push(acc(hy, g(r.clone()), true));
                        out.push(acc(ex, g(r.start..r.end + 1), false));
                    }
                    Kernel::UpdateE => {
                        out.push(acc(ex, g(r.clone()), false));
                        out.push(acc(ex, g(r.clone()), true));
                        out.push(acc(hy, g(r.start - 1..r.end), false));
                    }
                    _ => {
                        for b in [ex, hy] {
                            out.push(acc(b, g(r.clone()), false));
                            out.push(acc(b, g(r.clone()), true));
                        }
                        self.end_accesses(&r, &mut out);
                    }
                }
            }
            Kernel::SourcesBoundaries => {
                let r = self.clamp(cells, 0..self.n);
                for (i, _) in self.sources_in(&r) {
                    out.push(acc(ex, g(*i..*i + 1), false));
                    out.push(acc(ex, g(*i..*i + 1), true));
                }
                self.end_accesses(&r, &mut out);
            }
        }
        out
    }

    /// The ends among the local cells `r`: each reads its cell, its inner neighbour and
    /// its Mur state, and writes its cell and its Mur state.
    fn end_accesses(&self, r: &Range<usize>, out: &mut Vec<Access>) {
        let ex = Buffer::Field(Field::Ex);
        let (l, e) = self.end_cells();
        let ends = [
            (self.left_end.is_some() && r.contains(&l), l..l + 2, l, 0),
            (self.right_end.is_some() && r.contains(&e), e - 1..e + 1, e, 1),
        ];
        for (here, read, cell, state) in ends {
            if here {
                let g = self.global(read.start);
                out.push(Access {
                    buffer: ex,
                    cells: g..g + read.len(),
                    write: false,
                });
                out.push(Access {
                    buffer: ex,
                    cells: self.global(cell)..self.global(cell) + 1,
                    write: true,
                });
                for write in [false, true] {
                    out.push(Access {
                        buffer: Buffer::Ends,
                        cells: state..state + 1,
                        write,
                    });
                }
            }
        }
    }

    /// Global cell of local index `i`.
    fn global(&self, i: usize) -> usize {
        self.lo + i - HALO
    }

    /// Sources on the local cells `local`, with their local index, in scenario order.
    pub fn sources_in(&self, local: &Range<usize>) -> impl Iterator<Item = &(usize, PlacedSource)> {
        self.sources.iter().filter(move |(i, _)| local.contains(i))
    }

    /// The grid ends this device holds: `(left, right)`.
    pub fn ends(&self) -> (Option<EndCondition>, Option<EndCondition>) {
        (self.left_end, self.right_end)
    }

    /// Per-cell `(ca, cb)` of the local array, halos included (zero outside the grid).
    pub fn coefficient_arrays(&self) -> (Vec<f32>, Vec<f32>) {
        let len = self.cells() + 2 * HALO;
        let (mut ca, mut cb) = (vec![0.0; len], vec![0.0; len]);
        for &(s, e, a, b) in &self.coef_runs {
            ca[s..e].fill(a);
            cb[s..e].fill(b);
        }
        (ca, cb)
    }

    /// `update_h` over the held part of the global range `cells`.
    pub fn update_h(&mut self, cells: &Range<usize>) {
        let r = self.kernel_range(Kernel::UpdateH, cells);
        if let Some(s) = &self.slab {
            tmz::update_h(&self.ex, &mut self.hy, s.nx, r, self.ch, s.periodic);
        } else if !r.is_empty() {
            physics::update_h(&mut self.hy[r.clone()], &self.ex[r.start..r.end + 1], self.ch);
        }
    }

    /// `update_e` over the held part of the global range `cells`.
    pub fn update_e(&mut self, cells: &Range<usize>) {
        let r = self.kernel_range(Kernel::UpdateE, cells);
        if let Some(s) = &self.slab {
            tmz::update_e(&mut self.ex, &self.hy, s, r);
        } else if !r.is_empty() {
            for &(s, e, ca, cb) in &self.coef_runs {
                let (a, b) = (s.max(r.start), e.min(r.end));
                if a < b {
                    physics::update_e(&mut self.ex[a..b], &self.hy[a - 1..b], ca, cb);
                }
            }
        }
    }

    /// Sources on the held part of `cells`, then the grid ends among them.
    pub fn sources_boundaries(&mut self, cells: &Range<usize>, step: u64) {
        let r = self.clamp(cells, 0..self.n);
        if r.is_empty() {
            return;
        }
        if self.slab.is_some() {
            return self.sources_boundaries_2d(r, step);
        }
        for (i, src) in &self.sources {
            if r.contains(i) {
                src.apply(&mut self.ex[*i], step);
            }
        }
        let (l, e) = self.end_cells();
        if let Some(cond) = self.left_end.filter(|_| r.contains(&l)) {
            let inner = self.ex[l + 1];
            physics::apply_end(cond, &mut self.ex[l], inner, &mut self.prev_left);
        }
        if let Some(cond) = self.right_end.filter(|_| r.contains(&e)) {
            let inner = self.ex[e - 1];
            physics::apply_end(cond, &mut self.ex[e], inner, &mut self.prev_right);
        }
    }

    /// Runs one kernel.
    pub fn run(&mut self, kernel: Kernel, cells: &Range<usize>, step: u64) {
        match kernel {
            Kernel::UpdateH => self.update_h(cells),
            Kernel::UpdateE => self.update_e(cells),
            Kernel::SourcesBoundaries => self.sources_boundaries(cells, step),
            Kernel::Fused { steps } => self.fused(cells, steps as usize, step),
            Kernel::FusedSave { steps } => self.fused_save(cells, steps as usize, step),
            Kernel::FusedPart { steps, part } => self.fused_part(cells, steps as usize, step, part),
        }
    }

    /// This device as the fused kernel sees it: coefficients per cell, where each kernel
    /// is defined, sources and ends, in the local layout.
    pub fn held(&self) -> &Held {
        self.held.get_or_init(|| self.build_held())
    }

    /// [`DeviceState::held`], for a caller that needs nothing else of the device (the
    /// GPU bench, the fused algorithm's tests).
    pub fn into_held(mut self) -> Held {
        match self.held.take() {
            Some(h) => h,
            None => self.build_held(),
        }
    }

    fn build_held(&self) -> Held {
        let (ca, cb) = self.coefficient_arrays();
        let all = 0..usize::MAX;
        let (l, r) = self.end_cells();
        Held {
            lo: self.lo,
            hi: self.hi,
            halo: HALO,
            ch: self.ch,
            ca,
            cb,
            h_valid: self.kernel_range(Kernel::UpdateH, &all),
            e_valid: self.kernel_range(Kernel::UpdateE, &all),
            sources: self.sources.clone(),
            left: self.left_end.map(|c| (c, l)),
            right: self.right_end.map(|c| (c, r)),
        }
    }

    /// `steps` steps from step `step` over the held part of `cells` in one pass of tiles
    /// (src/fused.rs): the cells within `steps` of the ends of that span come out stale.
    pub fn fused(&mut self, cells: &Range<usize>, steps: usize, step: u64) {
        let span = self.kernel_range(Kernel::Fused { steps: steps as u32 }, cells);
        if span.is_empty() {
            return;
        }
        if self.slab.is_some() {
            return self.fused_2d(cells, steps, step);
        }
        let mut f = fused::Fields {
            ex: std::mem::take(&mut self.ex),
            hy: std::mem::take(&mut self.hy),
            prev: [self.prev_left, self.prev_right],
        };
        fused::pass(self.held(), &mut f, span, steps, step, FUSED_TILE);
        (self.ex, self.hy, [self.prev_left, self.prev_right]) = (f.ex, f.hy, f.prev);
    }

    pub fn field(&self, f: Field) -> &[f32] {
        match f {
            Field::Ex => &self.ex,
            Field::Hy => &self.hy,
        }
    }

    pub fn field_mut(&mut self, f: Field) -> &mut [f32] {
        match f {
            Field::Ex => &mut self.ex,
            Field::Hy => &mut self.hy,
        }
    }

    /// Values of `f` at global cells `cells` (owned or halo).
    pub fn read(&self, f: Field, cells: &Range<usize>) -> &[f32] {
        let w = self.width(f);
        &self.field(f)[self.local(cells.start) * w..self.local(cells.end) * w]
    }

    /// Writes `values` into `f` at global cells starting at `start` (owned or halo).
    pub fn write(&mut self, f: Field, start: usize, values: &[f32]) {
        let i = self.local(start) * self.width(f);
        self.field_mut(f)[i..i + values.len()].copy_from_slice(values);
    }

    /// The owned part of a field.
    pub fn owned(&self, f: Field) -> &[f32] {
        let (o, w) = (self.owned_local(), self.width(f));
        &self.field(f)[o.start * w..o.end * w]
    }

    /// Sets the owned part of both fields (tests, initial conditions).
    pub fn set_owned(&mut self, ex: &[f32], hy: &[f32]) {
        let o = self.owned_local();
        let (we, wh) = (self.width(Field::Ex), self.width(Field::Hy));
        self.ex[o.start * we..o.end * we].copy_from_slice(&ex[self.lo * we..self.hi * we]);
        self.hy[o.start * wh..o.end * wh].copy_from_slice(&hy[self.lo * wh..self.hi * wh]);
    }

    /// What a 2D fused pass over the held rows of `cells` updates: each one-kernel
    /// launch's rows, the end rows and sources among them (for the sim's pass and the GPU's).
    pub fn pass_2d(&self, cells: &Range<usize>) -> tmz::fused::Pass {
        let range = |k| self.kernel_range(k, cells);
        let sr = range(Kernel::SourcesBoundaries);
        let (l, e) = self.end_cells();
        let end = |c: Option<EndCondition>, row: usize| c.filter(|_| sr.contains(&row)).map(|c| (c, row));
        tmz::fused::Pass {
            h: range(Kernel::UpdateH),
            e: range(Kernel::UpdateE),
            ends: [end(self.left_end, l), end(self.right_end, e)],
            sources: self
                .sources
                .iter()
                .filter(|(row, _)| sr.contains(row))
                .cloned()
                .collect(),
            s: sr,
            ch: self.ch,
        }
    }

    /// A 2D fused pass over the held rows of `cells`: the GPU's tiles and passes
    /// (src/tmz/fused.rs, with kernels/fdtd2d.cu's sizes), the bits of the one-kernel steps.
    fn fused_2d(&mut self, cells: &Range<usize>, steps: usize, step: u64) {
        let p = self.pass_2d(cells);
        let tiling = tmz::fused::Tiling {
            x: crate::kernels::TILE_2D_X,
            y: crate::kernels::TILE_2D_Y,
            steps: crate::kernels::STEPS_2D,
        };
        if let Some(s) = self.slab.as_mut() {
            tmz::fused::pass(s, &mut self.ex, &mut self.hy, &p, steps, step, tiling);
        }
    }

    /// Sources, the end rows and the sides of a 2D slab over the local rows `r`.
    fn sources_boundaries_2d(&mut self, r: Range<usize>, step: u64) {
        let Some(s) = self.slab.as_mut() else {
            return;
        };
        let nx = s.nx;
        for (row, src) in &self.sources {
            if r.contains(row) {
                for col in src.columns.clone() {
                    src.apply(&mut self.ex[row * nx + col], step);
                }
            }
        }
        let (l, e) = (HALO, HALO + self.hi - self.lo - 1);
        if let Some(cond) = self.left_end.filter(|_| r.contains(&l)) {
            let mur =
                matches!(cond, EndCondition::Mur(_)).then_some((&s.mur_bottom[..], &mut s.prev_bottom[..]));
            tmz::apply_end_row(&mut self.ex, nx, l, l + 1, mur);
        }
        if let Some(cond) = self.right_end.filter(|_| r.contains(&e)) {
            let mur = matches!(cond, EndCondition::Mur(_)).then_some((&s.mur_top[..], &mut s.prev_top[..]));
            tmz::apply_end_row(&mut self.ex, nx, e, e - 1, mur);
        }
        if !s.periodic {
            tmz::pec_sides(&mut self.ex, nx, r);
        }
    }
}

/// Where each halo comes from: for the boundary between device `d` and `d + 1`,
/// `Hy` of `d`'s last cell goes to `d + 1`'s left halo (after `update_h`), and `Ex` of
/// `d + 1`'s first cell goes to `d`'s right halo (after `update_e` and the sources).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interface {
    /// The left device; its right neighbour is `left + 1`.
    pub left: usize,
    /// Global index of the left device's last cell.
    pub last_of_left: usize,
}

impl Interface {
    /// `(src device, src cell, dst device, dst cell)` of the halo copy of `f`.
    pub fn copy(&self, f: Field) -> (usize, usize, usize, usize) {
        let k = self.last_of_left;
        match f {
            Field::Hy => (self.left, k, self.left + 1, k),
            Field::Ex => (self.left + 1, k + 1, self.left, k + 1),
        }
    }
}

/// The whole grid as a set of devices.
#[derive(Debug, Clone)]
pub struct Domain {
    pub devices: Vec<DeviceState>,
}

impl Domain {
    pub fn new(s: &Scenario, c: &Coefficients) -> Result<Self, OutOfMemory> {
        let devices = s
            .ranges()
            .into_iter()
            .enumerate()
            .map(|(i, r)| DeviceState::new(i, r, s, c))
            .collect::<Result<_, _>>()?;
        Ok(Domain { devices })
    }

    /// The single-domain reference: one device, no halos to move.
    pub fn reference(s: &Scenario, c: &Coefficients) -> Result<Self, OutOfMemory> {
        Ok(Domain {
            devices: vec![DeviceState::new(0, 0..s.cells, s, c)?],
        })
    }

    pub fn interfaces(&self) -> Vec<Interface> {
        self.devices
            .windows(2)
            .map(|w| Interface {
                left: w[0].index,
                last_of_left: w[0].hi - 1,
            })
            .collect()
    }

    /// Copies one halo cell (a row in 2D) as the runtimes do, immediately.
    pub fn copy_halo(&mut self, i: Interface, f: Field) {
        let (src, k_src, dst, k_dst) = i.copy(f);
        let v = self.devices[src].read(f, &(k_src..k_src + 1)).to_vec();
        self.devices[dst].write(f, k_dst, &v);
    }

    /// One step with the plainest correct exchange: every kernel of a phase on every
    /// device, then that phase's halos. The reference ordering the runtimes must match.
    pub fn step(&mut self, step: u64) {
        let faces = self.interfaces();
        for d in &mut self.devices {
            d.update_h(&(d.lo..d.hi));
        }
        for &i in &faces {
            self.copy_halo(i, Field::Hy);
        }
        for d in &mut self.devices {
            let owned = d.lo..d.hi;
            d.update_e(&owned);
            d.sources_boundaries(&owned, step);
        }
        for &i in &faces {
            self.copy_halo(i, Field::Ex);
        }
    }

    /// The whole field, owned cells of every device in order.
    pub fn gather(&self, f: Field) -> Result<Vec<f32>, OutOfMemory> {
        let cells = self.devices.iter().map(|d| d.cells()).sum();
        let mut out = Vec::new();
        reserve(&mut out, cells, "the gathered fields")?;
        for d in &self.devices {
            out.extend_from_slice(d.owned(f));
        }
        Ok(out)
    }

    /// Sets both fields everywhere, halos included (initial conditions).
    pub fn set_fields(&mut self, ex: &[f32], hy: &[f32]) {
        for d in &mut self.devices {
            d.set_owned(ex, hy);
        }
        for i in self.interfaces() {
            self.copy_halo(i, Field::Hy);
            self.copy_halo(i, Field::Ex);
        }
    }
}

/// The first cell holding a value that is not finite (NaN or ±∞), if any.
pub fn first_non_finite(v: &[f32]) -> Option<usize> {
    // NaN and ±∞ are the floats whose exponent bits are all set. The largest exponent of a
    // chunk is a reduction the compiler vectorises; only a chunk that has one is searched.
    const EXP: u32 = 0x7f80_0000;
    let mut at = 0;
    for chunk in v.chunks(1024) {
        let top = chunk.iter().map(|x| x.to_bits() & EXP).max().unwrap_or(0);
        if top == EXP {
            return chunk.iter().position(|x| !x.is_finite()).map(|k| at + k);
        }
        at += chunk.len();
    }
    None
}

/// The one line a blown-up run ends with.
/// `cell` indexes the gathered field: in 2D (`nx > 1`) row-major, `nx` floats per row of
/// `Ez` and `2·nx` (`Hx` then `Hy`) per row of `H`.
pub fn not_finite(step: u64, field: Field, cell: usize, v: f32, nx: usize) -> String {
    let at = match (field, nx) {
        (Field::Ex, 1) => format!("Ex at cell {cell}"),
        (Field::Hy, 1) => format!("Hy at cell {cell}"),
        (Field::Ex, _) => format!("Ez at (x {}, y {})", cell % nx, cell / nx),
        (Field::Hy, _) => {
            let (row, k) = (cell / (2 * nx), cell % (2 * nx));
            let name = if k < nx { "Hx" } else { "Hy" };
            format!("{name} at (x {}, y {row})", k % nx)
        }
    };
    format!("the fields are not finite by step {step}: {at} is {v} ({PHYSICS_BLAME})")
}

/// What [`not_finite`] blames when nothing else is known about the run.
const PHYSICS_BLAME: &str = "the scheme blew up: a resonant or unbounded source, or an unstable material";

/// A failure's message, with a blown-up run blamed on its program's races first when the
/// checker found any (`hazards`; `check` names how to list them): races write stale or
/// half-updated cells, which the physics never would.
pub fn blame_races(message: &str, hazards: usize, check: &str) -> String {
    if hazards == 0 || !message.contains(PHYSICS_BLAME) {
        return message.to_string();
    }
    message.replace(
        PHYSICS_BLAME,
        &format!(
            "likely the program's races: the checker finds {hazards} hazard(s), `haloscope check {check}` \
             lists them; a correct mode on the same scenario tells whether the physics is stable"
        ),
    )
}

/// Largest |a − b| over two equally long fields, and the first index where they differ.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> (f32, Option<usize>) {
    let mut max = 0.0f32;
    let mut first = None;
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        // NaN is never "the same": a blown-up run is not bit-identical to anything.
        if x.to_bits() != y.to_bits() || x.is_nan() {
            first.get_or_insert(i);
            let d = (x - y).abs();
            max = if d.is_nan() { f32::INFINITY } else { max.max(d) };
        }
    }
    (max, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_is_a_difference_even_against_the_same_nan() {
        let nan = f32::NAN;
        assert_eq!(max_abs_diff(&[1.0, nan], &[1.0, nan]), (f32::INFINITY, Some(1)));
        assert_eq!(max_abs_diff(&[1.0, 2.0], &[1.0, 2.0]), (0.0, None));
        assert_eq!(first_non_finite(&[0.0, 1.0, f32::NEG_INFINITY, nan]), Some(2));
        assert_eq!(first_non_finite(&[0.0, 1.0]), None);
    }
}
