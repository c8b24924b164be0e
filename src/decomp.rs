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

use crate::fused::Held;
use crate::geometry::{Grid, Pass, Share};

pub use crate::access::{Access, Buffer, Field, Kernel, Part};

mod split;

use crate::geometry::Coefficients;
use crate::memory::{OutOfMemory, filled, reserve};
use crate::physics::{EndCondition, PlacedSource};
use crate::scenario::Scenario;

/// Halo cells on each side of every device's arrays: the most steps a wide-halo mode may
/// run between exchanges.
pub const HALO: usize = crate::fused::MAX_STEPS;

/// The `E` and `H` fields of every owned slice of the grid, in order (each slice
/// `Grid::width` floats: on a plane `Ez`, then `Hx` and `Hy`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gathered {
    pub e: Vec<f32>,
    pub h: Vec<f32>,
}

impl Gathered {
    pub fn field(&self, f: Field) -> &[f32] {
        match f {
            Field::E => &self.e,
            Field::H => &self.h,
        }
    }

    /// Cells of either field whose bits differ from `other`'s (cells one has and the
    /// other lacks count too).
    pub fn differing_cells(&self, other: &Gathered) -> usize {
        let count = |x: &[f32], y: &[f32]| {
            x.iter()
                .zip(y)
                .filter(|(p, q)| p.to_bits() != q.to_bits())
                .count()
                + x.len().abs_diff(y.len())
        };
        count(&self.e, &other.e) + count(&self.h, &other.h)
    }
}

/// The single-domain reference run (one device, no halos to move), shared read-only with
/// the device threads that compare a frame with it: they read its fields where they lie,
/// no copy. It steps on once they have let go (were one still holding it, a copy steps).
/// Another process receives its fields alone (`Reference::given`), which do not step.
#[derive(Debug, Clone)]
pub struct Reference(std::sync::Arc<Referred>);

#[derive(Debug, Clone)]
enum Referred {
    Run(Domain),
    Given(Gathered),
}

impl Reference {
    pub fn new(s: &Scenario, c: &Coefficients) -> Result<Self, OutOfMemory> {
        Ok(Reference(std::sync::Arc::new(Referred::Run(Domain::reference(
            s, c,
        )?))))
    }

    /// Fields received from the process that runs the reference.
    pub fn given(g: Gathered) -> Reference {
        Reference(std::sync::Arc::new(Referred::Given(g)))
    }

    /// Steps the run on; fields received (`given`) are one step's and stay as they are.
    pub fn step(&mut self, step: u64) {
        if let Referred::Run(d) = std::sync::Arc::make_mut(&mut self.0) {
            d.step(step);
        }
    }

    /// The run's one device (every slice of the grid); `None` for fields received.
    pub fn state(&self) -> Option<&DeviceState> {
        match &*self.0 {
            Referred::Run(d) => d.devices.first(),
            Referred::Given(_) => None,
        }
    }

    /// The whole grid's `(E, H)`, `grid.width(field)` floats a slice.
    pub fn fields(&self) -> (&[f32], &[f32]) {
        match &*self.0 {
            Referred::Run(d) => (d.devices[0].owned(Field::E), d.devices[0].owned(Field::H)),
            Referred::Given(g) => (&g.e, &g.h),
        }
    }
}

/// One device's share of the grid, with its own copy of the fields and coefficients.
/// Everything here counts slices (cells of a line, rows of a plane); what a slice holds
/// is the geometry's ([`Grid`], [`Share`]).
#[derive(Debug, Clone)]
pub struct DeviceState {
    pub index: usize,
    /// Global range of owned slices.
    pub lo: usize,
    pub hi: usize,
    /// Slices in the whole grid.
    pub n: usize,
    pub grid: Grid,
    /// The fields, `grid.width(f)` floats a slice, halos included.
    pub e: Vec<f32>,
    pub h: Vec<f32>,
    /// The geometry's part of the device: coefficients, the ends' state, the kernels.
    share: Share,
    sources: Vec<(usize, PlacedSource)>,
    left_end: Option<EndCondition>,
    right_end: Option<EndCondition>,
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
        let mut d = DeviceState::shape(index, cells.clone(), s);
        let len = d.cells() + 2 * HALO;
        d.e = filled(len * d.width(Field::E), 0.0, "a device's fields")?;
        d.h = filled(len * d.width(Field::H), 0.0, "a device's fields")?;
        d.share = Share::new(s, c, cells, HALO)?;
        d.left_end = d.left_end.map(|_| EndCondition::new(s.left, c.mur_left));
        d.right_end = d.right_end.map(|_| EndCondition::new(s.right, c.mur_right));
        Ok(d)
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
            grid: Grid::of(s),
            e: Vec::new(),
            h: Vec::new(),
            share: Share::shape(),
            sources: place_sources(s, lo..hi, HALO),
            left_end: (lo == 0).then(|| EndCondition::new(s.left, 0.0)),
            right_end: (hi == n).then(|| EndCondition::new(s.right, 0.0)),
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
            grid: self.grid,
            e: self.e.clone(),
            h: self.h.clone(),
            share: self.share.fork(),
            sources: self.sources.clone(),
            left_end: self.left_end,
            right_end: self.right_end,
        }
    }

    /// Floats per slice of a field.
    pub fn width(&self, f: Field) -> usize {
        self.grid.width(f)
    }

    /// The geometry's part of the device (its GPU launches read it).
    pub fn share(&self) -> &Share {
        &self.share
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
        let (ex, hy) = (Buffer::Field(Field::E), Buffer::Field(Field::H));
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
        let ex = Buffer::Field(Field::E);
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

    /// Per-float `(ca, cb)` of the local array, halos included (zero outside the grid).
    pub fn coefficient_arrays(&self) -> (Vec<f32>, Vec<f32>) {
        self.share.coefficient_arrays(self.cells() + 2 * HALO)
    }

    /// The grid's ends this device holds, with their local slice.
    fn held_ends(&self) -> [Option<(EndCondition, usize)>; 2] {
        let (l, e) = self.end_cells();
        [self.left_end.map(|c| (c, l)), self.right_end.map(|c| (c, e))]
    }

    /// What a fused launch of `kernel` over global `cells` covers, from step `step`.
    pub fn pass(&self, kernel: Kernel, cells: &Range<usize>, step: u64) -> Pass<'_> {
        let all = 0..usize::MAX;
        let range = |k| self.kernel_range(k, cells);
        Pass {
            lo: self.lo,
            hi: self.hi,
            halo: HALO,
            h_valid: self.kernel_range(Kernel::UpdateH, &all),
            e_valid: self.kernel_range(Kernel::UpdateE, &all),
            h: range(Kernel::UpdateH),
            e: range(Kernel::UpdateE),
            span: range(kernel),
            sources: &self.sources,
            ends: self.held_ends(),
            steps: kernel.fused_steps().unwrap_or(0) as usize,
            step,
        }
    }

    /// `update_h` over the held part of the global range `cells`.
    pub fn update_h(&mut self, cells: &Range<usize>) {
        let r = self.kernel_range(Kernel::UpdateH, cells);
        self.share.update_h(&self.e, &mut self.h, r);
    }

    /// `update_e` over the held part of the global range `cells`.
    pub fn update_e(&mut self, cells: &Range<usize>) {
        let r = self.kernel_range(Kernel::UpdateE, cells);
        self.share.update_e(&mut self.e, &self.h, r);
    }

    /// Sources on the held part of `cells`, then the grid ends among them.
    pub fn sources_boundaries(&mut self, cells: &Range<usize>, step: u64) {
        let r = self.clamp(cells, 0..self.n);
        if r.is_empty() {
            return;
        }
        let ends = self.held_ends();
        self.share
            .sources_boundaries(&mut self.e, r, &self.sources, ends, step);
    }

    /// Runs one kernel.
    pub fn run(&mut self, kernel: Kernel, cells: &Range<usize>, step: u64) {
        match kernel {
            Kernel::UpdateH => self.update_h(cells),
            Kernel::UpdateE => self.update_e(cells),
            Kernel::SourcesBoundaries => self.sources_boundaries(cells, step),
            Kernel::Fused { .. } => self.fused(cells, kernel, step),
            Kernel::FusedSave { .. } => self.fused_save(cells, kernel, step),
            Kernel::FusedPart { part, .. } => self.fused_part(cells, kernel, step, part),
        }
    }

    /// This device as the 1D fused kernel sees it: coefficients per cell, where each
    /// kernel is defined, sources and ends, in the local layout (`None` where the geometry's
    /// pass takes its share itself).
    pub fn held(&self) -> Option<&Held> {
        let all = 0..usize::MAX;
        self.share.held(&self.pass(Kernel::Fused { steps: 0 }, &all, 0))
    }

    /// [`DeviceState::held`], for a caller that needs nothing else of the device (the
    /// GPU bench, the fused algorithm's tests).
    pub fn into_held(self) -> Option<Held> {
        let all = 0..usize::MAX;
        let share = self.share.fork();
        share.into_held(&self.pass(Kernel::Fused { steps: 0 }, &all, 0))
    }

    /// A fused pass (`kernel`'s steps from step `step`) over the held part of `cells` in
    /// one pass of tiles: the cells within `steps` of the ends of that span come out stale.
    pub fn fused(&mut self, cells: &Range<usize>, kernel: Kernel, step: u64) {
        self.with_share(|share, e, h, p| share.fused(e, h, p), kernel, cells, step);
    }

    /// Runs `f` on the share, the fields and the pass of `kernel` over `cells`.
    fn with_share(
        &mut self,
        f: impl FnOnce(&mut Share, &mut Vec<f32>, &mut Vec<f32>, &Pass),
        kernel: Kernel,
        cells: &Range<usize>,
        step: u64,
    ) {
        let (mut e, mut h) = (std::mem::take(&mut self.e), std::mem::take(&mut self.h));
        let mut share = std::mem::replace(&mut self.share, Share::shape());
        f(&mut share, &mut e, &mut h, &self.pass(kernel, cells, step));
        (self.share, self.e, self.h) = (share, e, h);
    }

    pub fn field(&self, f: Field) -> &[f32] {
        match f {
            Field::E => &self.e,
            Field::H => &self.h,
        }
    }

    pub fn field_mut(&mut self, f: Field) -> &mut [f32] {
        match f {
            Field::E => &mut self.e,
            Field::H => &mut self.h,
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

    /// Sets the owned part of both fields from the whole grid's (tests, initial conditions).
    pub fn set_owned(&mut self, g: &Gathered) {
        for f in [Field::E, Field::H] {
            let (o, w) = (self.owned_local(), self.width(f));
            let (lo, hi) = (self.lo * w, self.hi * w);
            self.field_mut(f)[o.start * w..o.end * w].copy_from_slice(&g.field(f)[lo..hi]);
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
            Field::H => (self.left, k, self.left + 1, k),
            Field::E => (self.left + 1, k + 1, self.left, k + 1),
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

    /// The reference's fields after `steps` steps from step 0.
    pub fn reference_fields(s: &Scenario, c: &Coefficients, steps: u64) -> Result<Gathered, OutOfMemory> {
        let mut r = Domain::reference(s, c)?;
        for t in 0..steps {
            r.step(t);
        }
        Ok(Gathered {
            e: r.gather(Field::E)?,
            h: r.gather(Field::H)?,
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
            self.copy_halo(i, Field::H);
        }
        for d in &mut self.devices {
            let owned = d.lo..d.hi;
            d.update_e(&owned);
            d.sources_boundaries(&owned, step);
        }
        for &i in &faces {
            self.copy_halo(i, Field::E);
        }
    }

    /// The whole field, owned slices of every device in order.
    pub fn gather(&self, f: Field) -> Result<Vec<f32>, OutOfMemory> {
        let floats = self.devices.iter().map(|d| d.owned(f).len()).sum();
        let mut out = Vec::new();
        reserve(&mut out, floats, "the gathered fields")?;
        for d in &self.devices {
            out.extend_from_slice(d.owned(f));
        }
        Ok(out)
    }

    /// Both fields, gathered.
    pub fn gathered(&self) -> Result<Gathered, OutOfMemory> {
        Ok(Gathered {
            e: self.gather(Field::E)?,
            h: self.gather(Field::H)?,
        })
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

/// The one line a blown-up run ends with: `i` indexes the gathered field `field` of
/// `grid`.
pub fn not_finite(step: u64, field: Field, i: usize, v: f32, grid: Grid) -> String {
    let at = grid.at(field, i);
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
