//! A 2D device's kernel launches (kernels/fdtd2d.cu): the same calls as in 1D over rows.

use std::ops::Range;

use super::buffers::PassBuffers;
use super::device::*;
use super::launch::{Arg, Launch};
use super::owned::{BufferView, copy};
use super::shared::BLOCK;
use super::sys::{self, DriverError};
use crate::decomp::{Kernel, Part};
use crate::geometry::plane::fused::{self, Rows};
use crate::kernels::{MAX_SOURCES, STEPS_2D, THREADS_2D, TILE_2D_X, TILE_2D_Y, shared_2d};
use crate::physics::EndCondition;
use crate::scenario::Injection;

/// Most rows one launch covers (a grid's y dimension).
const MAX_ROWS: usize = 65_535;

/// One copy of a 2D device's fields on the GPU: `Ez`, `H` and the Mur state.
type Copy = (BufferView, BufferView, BufferView);

/// What a launch of `fused_steps_2d` needs beside its two copies: the pass's rows, the
/// rows its tiles cut (`tiles`, within `w`), its steps and first step.
struct SubPass<'a> {
    p: &'a Rows,
    w: Range<usize>,
    tiles: Range<usize>,
    k: usize,
    step: u64,
}

impl Dev {
    /// A fused pass of `steps` steps over `cells` on a 2D device from step `step`, whole or
    /// split (src/geometry/plane/fused.rs): passes of at most [`STEPS_2D`] steps, each one
    /// launch of `fused_steps_2d` (kernels/fdtd2d.cu) reading one copy of the fields and
    /// writing another. A whole pass alternates between the fields and the snapshot buffer
    /// and ends in the fields; a split pass's save runs all passes but the last, the last
    /// of them into the split buffer; its parts run the last pass from there over their
    /// rows into the fields. The bits of the one-kernel steps over the same rows. More
    /// sources on the rows than the kernel takes: the one-kernel steps themselves (a whole
    /// pass and a save run the round, the parts nothing).
    pub(super) fn launch_fused_2d(
        &self,
        kernel: Kernel,
        cells: &Range<usize>,
        st: sys::Stream,
        step: u64,
        steps: u32,
    ) -> Result<(), DriverError> {
        let Some(slab) = self.meta.share().plane() else {
            return Ok(());
        };
        let pass = self.meta.pass(kernel, cells, step);
        let p = Rows::of(&pass, slab.ch);
        let Some(w) = fused::written(&[&p.h, &p.e, &p.s]) else {
            return Ok(());
        };
        if p.sources.len() > MAX_SOURCES {
            return match kernel {
                Kernel::FusedPart { .. } => Ok(()),
                _ => self.launch_steps_2d(cells, st, step, steps),
            };
        }
        let (fields, snapshot, split) = self.copies_2d();
        let passes = fused::sub_passes(steps as usize, STEPS_2D);
        let sub = |i: usize, tiles: Range<usize>| {
            let (t0, k) = passes[i];
            let w = w.clone();
            SubPass {
                p: &p,
                w,
                tiles,
                k,
                step: step + t0 as u64,
            }
        };
        let n = passes.len();
        match kernel {
            Kernel::FusedPart { part, .. } => {
                let own = match part {
                    Part::Store => self.meta.owned_local(),
                    _ => 0..usize::MAX,
                };
                for r in crate::fused::part_cells(&pass.span, pass.steps, part, self.meta.grid.split_align())
                {
                    let r = r.start.max(own.start).max(w.start)..r.end.min(own.end).min(w.end);
                    if !r.is_empty() {
                        self.sub_pass_2d(fields, split, sub(n - 1, r), st)?;
                    }
                }
            }
            Kernel::FusedSave { .. } if n == 1 => {
                let held = self.views().e.floats() / slab.nx;
                let rows = w.start.saturating_sub(STEPS_2D + 1)..(w.end + STEPS_2D + 1).min(held);
                copy_rows(split, fields, rows, slab.nx, st)?;
            }
            Kernel::FusedSave { .. } => {
                let mut input = fields;
                for i in 0..n - 1 {
                    let out = if i + 2 == n {
                        split
                    } else if fused::into_fields(i, n - 1) {
                        fields
                    } else {
                        snapshot
                    };
                    self.sub_pass_2d(out, input, sub(i, w.clone()), st)?;
                    input = out;
                }
            }
            _ => {
                // Alternating, the last pass writing the fields: with an odd count the
                // first copies the fields into the snapshot and reads it; then no pass
                // copies (the kernel keeps the rows next to the written ones up to date).
                let held = self.views().e.floats() / slab.nx;
                for i in 0..n {
                    let into_fields = (n - i) % 2 == 1;
                    if i == 0 && into_fields {
                        // The rows the tiles' regions load: the written rows and k + 1 a side.
                        let m = passes[0].1 + 1;
                        let rows = w.start.saturating_sub(m)..(w.end + m).min(held);
                        copy_rows(snapshot, fields, rows, slab.nx, st)?;
                    }
                    let (out, input) = if into_fields {
                        (fields, snapshot)
                    } else {
                        (snapshot, fields)
                    };
                    self.sub_pass_2d(out, input, sub(i, w.clone()), st)?;
                }
            }
        }
        Ok(())
    }

    /// The device's copies of its 2D fields: the fields, the snapshot buffer a whole
    /// pass alternates with, the split buffer a save leaves for the parts.
    fn copies_2d(&self) -> (Copy, Copy, Copy) {
        let v = self.views();
        let PassBuffers::Plane {
            snap_e,
            snap_h,
            split_e,
            split_h,
            ..
        } = v.pass
        else {
            unreachable!("a plane's buffers")
        };
        let len = v.e.floats();
        let row2 = v.prev.floats();
        let copy = |e: BufferView, h| (e.slice(0..len), h, e.slice(len..len + row2));
        ((v.e, v.h, v.prev), copy(snap_e, snap_h), copy(split_e, split_h))
    }

    /// One launch of `fused_steps_2d`: `s.k` steps of the tiles cutting `s.tiles` from
    /// `input` into `out` (the rows next to the written ones copied too when the tiles
    /// cut every written row).
    fn sub_pass_2d(&self, out: Copy, input: Copy, s: SubPass, st: sys::Stream) -> Result<(), DriverError> {
        let Some(slab) = self.meta.share().plane() else {
            return Ok(());
        };
        let v = self.views();
        let PassBuffers::Plane { mur, .. } = v.pass else {
            unreachable!("a plane's buffers")
        };
        let (p, nx) = (s.p, slab.nx);
        let held = v.e.floats() / nx;
        let (first, last) = self.meta.end_cells();
        let [bottom, top] = p.ends.map(|e| end_kind(e.map(|(c, _)| c)));
        let grid = (
            nx.div_ceil(TILE_2D_X) as u32,
            s.tiles.len().div_ceil(TILE_2D_Y) as u32,
        );
        let src = sources_2d(&p.sources, s.step, s.k);
        let i = |x: usize| Arg::I32(x as i32);
        let args = [
            Arg::Ptr(out.0.ptr()),
            Arg::Ptr(out.1.ptr()),
            Arg::Ptr(input.0.ptr()),
            Arg::Ptr(input.1.ptr()),
            Arg::Ptr(v.ca.ptr()),
            Arg::Ptr(v.cb.ptr()),
            Arg::Ptr(out.2.ptr()),
            Arg::Ptr(input.2.ptr()),
            Arg::Ptr(mur.ptr()),
            Arg::Bytes(&src),
            i(nx),
            Arg::I32(i32::from(slab.periodic)),
            Arg::F32(self.ch),
            i(s.k),
            i(held),
            i(s.w.start),
            i(s.w.end),
            i(s.tiles.start),
            i(s.tiles.end),
            i(p.h.start),
            i(p.h.end),
            i(p.e.start),
            i(p.e.end),
            i(p.s.start),
            i(p.s.end),
            i(first),
            i(last),
            Arg::I32(bottom),
            Arg::I32(top),
        ];
        Launch::new(self.k.fused_steps_2d, grid, THREADS_2D, &args)
            .with_shared(shared_2d())
            .run(st)
    }

    /// `steps` one-kernel steps over `cells` from step `step`, launch after launch.
    fn launch_steps_2d(
        &self,
        cells: &Range<usize>,
        st: sys::Stream,
        step: u64,
        steps: u32,
    ) -> Result<(), DriverError> {
        for t in 0..u64::from(steps) {
            for k in [Kernel::UpdateH, Kernel::UpdateE, Kernel::SourcesBoundaries] {
                for l in self.launches(k, cells, step + t).unwrap_or_default() {
                    l.run(st)?;
                }
            }
        }
        Ok(())
    }

    /// The launches of one of the step's kernels over the local rows `r` of a 2D device
    /// in step `step`; `None` for the fused kernel (run as its steps, see `launch`).
    pub(super) fn launches_2d(&self, kernel: Kernel, r: Range<usize>, step: u64) -> Option<Vec<Launch>> {
        let slab = self.meta.share().plane()?;
        let v = self.views();
        let (ez, h, ca, cb, prev) = (v.e, v.h, v.ca, v.cb, v.prev);
        let PassBuffers::Plane { mur, .. } = v.pass else {
            unreachable!("a plane's buffers")
        };
        let nx = slab.nx as u32;
        let periodic = Arg::I32(i32::from(slab.periodic));
        let across = nx.div_ceil(BLOCK);
        let chunks = || {
            (r.start..r.end)
                .step_by(MAX_ROWS)
                .map(|a| (a as u32, (r.end - a).min(MAX_ROWS) as u32))
        };
        let mut out = Vec::new();
        match kernel {
            Kernel::Fused { .. } | Kernel::FusedSave { .. } | Kernel::FusedPart { .. } => return None,
            Kernel::UpdateH => {
                for (start, rows) in chunks() {
                    let args = [
                        Arg::Ptr(h.ptr()),
                        Arg::Ptr(ez.ptr()),
                        Arg::F32(self.ch),
                        Arg::U32(nx),
                        Arg::U32(start),
                        Arg::U32(rows),
                        periodic,
                    ];
                    out.push(Launch::new(self.k.update_h_2d, (across, rows), BLOCK, &args));
                }
            }
            Kernel::UpdateE => {
                for (start, rows) in chunks() {
                    let args = [
                        Arg::Ptr(ez.ptr()),
                        Arg::Ptr(h.ptr()),
                        Arg::Ptr(ca.ptr()),
                        Arg::Ptr(cb.ptr()),
                        Arg::U32(nx),
                        Arg::U32(start),
                        Arg::U32(rows),
                        periodic,
                    ];
                    out.push(Launch::new(self.k.update_e_2d, (across, rows), BLOCK, &args));
                }
            }
            Kernel::SourcesBoundaries => {
                for (row, src) in self.meta.sources_in(&r) {
                    let at = row * slab.nx + src.columns.start;
                    let count = src.columns.len();
                    let args = [
                        Arg::Ptr(ez.slice(at..at + count).ptr()),
                        Arg::U32(count as u32),
                        Arg::F32(src.value(step)),
                        Arg::I32(i32::from(src.injection == Injection::Hard)),
                    ];
                    let grid = ((count as u32).div_ceil(BLOCK), 1);
                    out.push(Launch::new(self.k.apply_source_2d, grid, BLOCK, &args));
                }
                let (first, last) = self.meta.end_cells();
                let (bottom, top) = self.meta.ends();
                let kind = |c: Option<EndCondition>, row: usize| end_kind(c.filter(|_| r.contains(&row)));
                let (b, t) = (kind(bottom, first), kind(top, last));
                if b != 0 || t != 0 {
                    let args = [
                        Arg::Ptr(ez.ptr()),
                        Arg::Ptr(prev.ptr()),
                        Arg::Ptr(mur.ptr()),
                        Arg::U32(nx),
                        Arg::U32(first as u32),
                        Arg::U32(last as u32),
                        Arg::I32(b),
                        Arg::I32(t),
                    ];
                    out.push(Launch::new(self.k.end_rows_2d, (across, 1), BLOCK, &args));
                }
                if !slab.periodic {
                    let rows = r.len() as u32;
                    let args = [
                        Arg::Ptr(ez.ptr()),
                        Arg::U32(nx),
                        Arg::U32(r.start as u32),
                        Arg::U32(rows),
                    ];
                    let grid = (rows.div_ceil(BLOCK), 1);
                    out.push(Launch::new(self.k.pec_sides_2d, grid, BLOCK, &args));
                }
            }
        }
        Some(out)
    }
}

/// The code an end row's condition has in the 2D kernels (`end_rows_2d`,
/// `fused_steps_2d`): 0 none, 1 PEC, 2 first-order Mur.
fn end_kind(c: Option<EndCondition>) -> i32 {
    match c {
        None => 0,
        Some(EndCondition::Pec) => 1,
        Some(EndCondition::Mur(_)) => 2,
    }
}

/// Rows `rows` of `Ez` and `H`, and the Mur state, from one copy of a 2D device's fields
/// (`ez`, `h`, `prev`) into another, on `st`.
fn copy_rows(
    to: Copy,
    from: Copy,
    rows: Range<usize>,
    nx: usize,
    st: sys::Stream,
) -> Result<(), DriverError> {
    let (a, z) = (rows.start, rows.end);
    copy(to.0.slice(a * nx..z * nx), from.0.slice(a * nx..z * nx), st)?;
    copy(
        to.1.slice(2 * a * nx..2 * z * nx),
        from.1.slice(2 * a * nx..2 * z * nx),
        st,
    )?;
    copy(to.2, from.2, st)
}

/// The kernel's `Sources2d` struct (kernels/fdtd2d.cu): the values of steps
/// `step..step + steps` of each of `sources` (at most [`MAX_SOURCES`]), their rows and
/// columns, hard or soft, and how many.
fn sources_2d(sources: &[(usize, crate::physics::PlacedSource)], step: u64, steps: usize) -> Vec<u8> {
    let mut value = [[0.0f32; MAX_SOURCES]; STEPS_2D];
    let mut ints = [[0i32; MAX_SOURCES]; 4];
    for (i, (row, src)) in sources.iter().enumerate() {
        for (t, v) in value.iter_mut().enumerate().take(steps) {
            v[i] = src.value(step + t as u64);
        }
        ints[0][i] = *row as i32;
        ints[1][i] = src.columns.start as i32;
        ints[2][i] = src.columns.end as i32;
        ints[3][i] = i32::from(src.injection == Injection::Hard);
    }
    let mut out = Vec::with_capacity(4 * (STEPS_2D * MAX_SOURCES + 4 * MAX_SOURCES + 1));
    for x in value.iter().flatten() {
        out.extend_from_slice(&x.to_ne_bytes());
    }
    for x in ints.iter().flatten() {
        out.extend_from_slice(&x.to_ne_bytes());
    }
    out.extend_from_slice(&(sources.len() as i32).to_ne_bytes());
    out
}
