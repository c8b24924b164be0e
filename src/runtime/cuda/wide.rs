//! The fused kernel on GPUs, for the bench: several steps per pass (`kernels/fused.cu`)
//! and, on several GPUs, as many steps per halo exchange (src/fused.rs documents both).
//! One host thread drives every GPU: per pass, each GPU saves its tile margins, runs the
//! pass and records `done`; then each pulls `k` cells of both fields from each
//! neighbour after the neighbour's `done`, and records `pulled`; the next pass on a GPU
//! waits for its neighbours' `pulled` (they have read its cells) before writing them.

use anyhow::{Result, anyhow};
use std::ops::Range;
use std::time::Instant;

use super::launch::launch;
use super::owned::{
    BufferView, DeviceBuffer, EventArena, LoadedModule, OwnedStream, PrimaryContext, copy_peer,
};
use super::shared::FUSED_PTX;
use super::sys;
use crate::decomp::{DeviceState, Domain};
use crate::fused::{Held, MAX_SOURCES, MAX_STEPS, Part};
use crate::geometry::Coefficients;
use crate::physics::EndCondition;
use crate::scenario::Injection;
use crate::scenario::Scenario;

use crate::kernels::{FUSED_THREADS, TILE};

/// The device buffers of a fused pass: the fields, coefficients and Mur state, and the
/// margins (`strip_*`, [`strip_floats`] each) and Mur state (`prev_in`, [`PREV_IN_FLOATS`])
/// saved before it.
#[derive(Debug, Clone, Copy)]
pub(super) struct FusedBufs {
    pub ex: BufferView,
    pub hy: BufferView,
    pub ca: BufferView,
    pub cb: BufferView,
    pub prev: BufferView,
    pub prev_in: BufferView,
    pub strip_ex: BufferView,
    pub strip_hy: BufferView,
}

/// Floats of the strips of one pass over `len` cells: a strip per cut between tiles, a
/// split pass's two boundary tiles included.
fn pass_strip_floats(len: usize) -> usize {
    (len.div_ceil(TILE) + 3) * 2 * (MAX_STEPS + 1)
}

/// Floats of each strip buffer for an array of `len` cells: a whole pass's strips, then a
/// split pass's (a `fused_steps` between a `fused_save` and its parts leaves them be).
pub(super) fn strip_floats(len: usize) -> usize {
    2 * pass_strip_floats(len)
}

/// Floats of the `prev_in` buffer: a whole pass's saved Mur state, then a split pass's.
pub(super) const PREV_IN_FLOATS: usize = 4;

impl FusedBufs {
    /// The buffers as a split pass uses them: its own strips and saved Mur state.
    fn split(self, len: usize) -> FusedBufs {
        FusedBufs {
            prev_in: self.prev_in.slice(2..PREV_IN_FLOATS),
            strip_ex: self.strip_ex.slice(pass_strip_floats(len)..strip_floats(len)),
            strip_hy: self.strip_hy.slice(pass_strip_floats(len)..strip_floats(len)),
            ..self
        }
    }
}

/// Which tiles one launch of `fused_steps` runs: every tile of a whole pass, or one part
/// of a split pass (its tiles cut as `kernels/fused.cu` `cut` and src/fused.rs `split`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Tiles {
    All,
    Part(Part),
}

/// `(e, tiles of the pass, blocks, first, jump)` of a launch over `len` cells, `steps`
/// steps (the kernel's arguments; see `cut` and `fused_steps` in kernels/fused.cu).
fn tiling(len: usize, steps: usize, tiles: Tiles) -> (usize, usize, usize, usize, usize) {
    match tiles {
        Tiles::All => (0, len.div_ceil(TILE), len.div_ceil(TILE), 0, 0),
        Tiles::Part(part) => {
            let [_, mid, _] = crate::fused::split(&(0..len), steps, 1);
            let m = mid.len().div_ceil(TILE);
            match part {
                Part::Boundary => (2 * steps, m + 2, 2, 0, m),
                Part::Interior => (2 * steps, m + 2, m, 1, 0),
                Part::Store => (2 * steps, m + 2, m + 2, 0, 0),
            }
        }
    }
}

/// The kernel's `Sources` struct (kernels/fused.cu): values of steps `step..step + steps`
/// of the sources on `span`, their cells relative to `span`.
fn sources_bytes(h: &Held, span: &Range<usize>, steps: usize, step: u64) -> Vec<u8> {
    let on: Vec<_> = h.sources.iter().filter(|(i, _)| span.contains(i)).collect();
    let mut value = [[0.0f32; MAX_SOURCES]; MAX_STEPS];
    let (mut pos, mut hard) = ([0i32; MAX_SOURCES], [0i32; MAX_SOURCES]);
    for (j, (i, src)) in on.iter().enumerate().take(MAX_SOURCES) {
        for (t, row) in value.iter_mut().enumerate().take(steps) {
            row[j] = src.value(step + t as u64);
        }
        pos[j] = (i - span.start) as i32;
        hard[j] = i32::from(src.injection == Injection::Hard);
    }
    let mut out = Vec::with_capacity(4 * (MAX_STEPS * MAX_SOURCES + 2 * MAX_SOURCES + 1));
    for row in &value {
        row.iter().for_each(|v| out.extend_from_slice(&v.to_ne_bytes()));
    }
    pos.iter()
        .chain(&hard)
        .for_each(|v| out.extend_from_slice(&v.to_ne_bytes()));
    out.extend_from_slice(&(on.len().min(MAX_SOURCES) as i32).to_ne_bytes());
    out
}

/// Issues one pass of `steps` steps from step `step` over the local cells `span` of `h`
/// on `s`: `fused_edges`, then `fused_steps` on the sub-array (at most [`MAX_SOURCES`]
/// sources on it: the runtime checks programs with `check_fused`, the bench its grids).
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_fused(
    (edges, fused): (sys::Function, sys::Function),
    s: sys::Stream,
    b: FusedBufs,
    h: &Held,
    span: Range<usize>,
    steps: usize,
    step: u64,
) -> Result<(), sys::DriverError> {
    launch_save(edges, s, b, span.clone(), steps, false)?;
    launch_tiles(fused, s, b, h, span, steps, step, Tiles::All, None)
}

/// `fused_edges`: the strips around every cut between the tiles of a pass over `span`
/// (a split pass's when `split`), and the Mur state.
pub(super) fn launch_save(
    edges: sys::Function,
    s: sys::Stream,
    b: FusedBufs,
    span: Range<usize>,
    steps: usize,
    split: bool,
) -> Result<(), sys::DriverError> {
    use super::launch::Arg::{I32, Ptr};
    let (off, len) = (span.start, span.len());
    let margin = steps + 1;
    let whole = if split {
        Tiles::Part(Part::Interior)
    } else {
        Tiles::All
    };
    let (e, tiles, ..) = tiling(len, steps, whole);
    let b = if split { b.split(len) } else { b };
    launch(
        edges,
        tiles as u32 + 1,
        2 * margin as u32,
        s,
        &[
            Ptr(b.ex.at(off)),
            Ptr(b.hy.at(off)),
            Ptr(b.prev.ptr()),
            Ptr(b.strip_ex.ptr()),
            Ptr(b.strip_hy.ptr()),
            Ptr(b.prev_in.ptr()),
            I32(len as i32),
            I32(margin as i32),
            I32(e as i32),
        ],
    )
}

/// A `fused_store` pass's own cells and stores: the local cells it reads from and writes
/// back to the fields (the rest of its span, its halos, from the strips), how many cells
/// it stores at each end of them, and where: the left and right neighbours' memory, where
/// there is a neighbour.
#[derive(Debug, Clone)]
pub(super) struct Stores {
    pub own: Range<usize>,
    pub n: usize,
    pub left: Option<Store>,
    pub right: Option<Store>,
}

/// One side's store: its global cells (rows in 2D), and the neighbour's `Ex` and `Hy` at
/// them (peer memory).
#[derive(Debug, Clone)]
pub(super) struct Store {
    pub cells: Range<usize>,
    pub ex: BufferView,
    pub hy: BufferView,
}

/// `fused_steps` on the tiles `which` of a pass over `span`, margins from the strips;
/// with `stores`, a `fused_store` pass.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_tiles(
    fused: sys::Function,
    s: sys::Stream,
    b: FusedBufs,
    h: &Held,
    span: Range<usize>,
    steps: usize,
    step: u64,
    which: Tiles,
    stores: Option<&Stores>,
) -> Result<(), sys::DriverError> {
    use super::launch::Arg::{Bytes, F32, I32, Ptr};
    let (off, len) = (span.start, span.len());
    let (e, _, blocks, first, jump) = tiling(len, steps, which);
    if blocks == 0 {
        return Ok(());
    }
    let b = if which == Tiles::All { b } else { b.split(len) };
    let at = |p: BufferView| p.at(off);
    let rel = |r: &Range<usize>| {
        let a = r.start.clamp(span.start, span.end) - off;
        let z = r.end.clamp(span.start, span.end) - off;
        (a as i32, z.max(a) as i32)
    };
    let end = |e: Option<(EndCondition, usize)>| match e.filter(|(_, i)| span.contains(i)) {
        None => (0, 0, 0.0),
        Some((EndCondition::Pec, i)) => (1, (i - off) as i32, 0.0),
        Some((EndCondition::Mur(m), i)) => (2, (i - off) as i32, m),
    };
    let ((lk, li, lm), (rk, ri, rm)) = (end(h.left), end(h.right));
    let (h_lo, h_hi) = rel(&h.h_valid);
    let (e_lo, e_hi) = rel(&h.e_valid);
    let sources = sources_bytes(h, &span, steps, step);
    let (own, n) = stores.map_or(((0, len as i32), 0), |st| (rel(&st.own), st.n as i32));
    let null = super::owned::DevicePtr::NULL;
    let side = |v: Option<&Store>| v.map_or((null, null), |v| (v.ex.ptr(), v.hy.ptr()));
    let (l, r) = (
        side(stores.and_then(|st| st.left.as_ref())),
        side(stores.and_then(|st| st.right.as_ref())),
    );
    launch(
        fused,
        blocks as u32,
        FUSED_THREADS,
        s,
        &[
            Ptr(at(b.ex)),
            Ptr(at(b.hy)),
            Ptr(at(b.ca)),
            Ptr(at(b.cb)),
            Ptr(b.prev.ptr()),
            Ptr(b.prev_in.ptr()),
            Ptr(b.strip_ex.ptr()),
            Ptr(b.strip_hy.ptr()),
            Bytes(&sources),
            I32(len as i32),
            I32(steps as i32),
            F32(h.ch),
            I32(h_lo),
            I32(h_hi),
            I32(e_lo),
            I32(e_hi),
            I32(lk),
            I32(li),
            F32(lm),
            I32(rk),
            I32(ri),
            F32(rm),
            I32(e as i32),
            I32(first as i32),
            I32(jump as i32),
            I32(own.0),
            I32(own.1),
            I32(n),
            Ptr(l.0),
            Ptr(l.1),
            Ptr(r.0),
            Ptr(r.1),
        ],
    )
}

/// One GPU's part of a wide run. Its fields are freed in order (each owner in its
/// `Drop`): events, stream, buffers, module, and the context last.
struct Gpu {
    held: Held,
    edges: sys::Function,
    steps: sys::Function,
    done: sys::Event,
    pulled: sys::Event,
    bufs: FusedBufs,
    _events: EventArena,
    stream: OwnedStream,
    buffers: Vec<DeviceBuffer>,
    _module: LoadedModule,
    ctx: PrimaryContext,
}

pub struct WideRun {
    gpus: Vec<Gpu>,
    /// Steps per pass, and halo cells pulled from each neighbour per pass (the same).
    k: usize,
    /// Steps done.
    pub step: u64,
}

impl WideRun {
    /// The scenario's devices one per GPU of `gpus`, `k` steps per pass and exchange.
    pub fn new(s: &Scenario, gpus: &[i32], k: usize) -> Result<Self> {
        let ranges = s.ranges();
        if ranges.len() != gpus.len() {
            return Err(anyhow!("{} devices for {} GPUs", ranges.len(), gpus.len()));
        }
        if !(1..=MAX_STEPS).contains(&k) || ranges.iter().any(|r| r.len() < k) {
            return Err(anyhow!(
                "{k} steps per pass: each GPU must own at least that many cells"
            ));
        }
        let c = Coefficients::new(s)?;
        let mut out = Vec::new();
        for (d, (r, &g)) in ranges.into_iter().zip(gpus).enumerate() {
            let held = DeviceState::new(d, r, s, &c)?
                .into_held()
                .ok_or_else(|| anyhow!("the fused runner runs a line"))?;
            if held.sources.len() > MAX_SOURCES {
                return Err(anyhow!("more than {MAX_SOURCES} sources on one GPU"));
            }
            let context = PrimaryContext::retain(g)?;
            let ctx = context.get();
            let module = LoadedModule::load(FUSED_PTX, ctx)?;
            let len = held.len();
            let strip = strip_floats(len);
            let buffers = [len, len, len, len, 2, PREV_IN_FLOATS, strip, strip]
                .into_iter()
                .map(|n| DeviceBuffer::zeroed(n, ctx))
                .collect::<Result<Vec<_>, _>>()?;
            buffers[2].upload(&held.ca)?;
            buffers[3].upload(&held.cb)?;
            let v: Vec<BufferView> = buffers.iter().map(DeviceBuffer::view).collect();
            let bufs = FusedBufs {
                ex: v[0],
                hy: v[1],
                ca: v[2],
                cb: v[3],
                prev: v[4],
                prev_in: v[5],
                strip_ex: v[6],
                strip_hy: v[7],
            };
            let mut events = EventArena::new(ctx);
            out.push(Gpu {
                edges: module.function("fused_edges")?,
                steps: module.function("fused_steps")?,
                done: events.create(false)?,
                pulled: events.create(false)?,
                held,
                bufs,
                _events: events,
                stream: OwnedStream::new(ctx)?,
                buffers,
                _module: module,
                ctx: context,
            });
        }
        for a in 0..out.len() {
            for b in [a.wrapping_sub(1), a + 1] {
                if b < out.len() && sys::can_access_peer(out[a].ctx.device(), out[b].ctx.device())? {
                    sys::set_current(out[a].ctx.get())?;
                    sys::enable_peer_access(out[b].ctx.get())?;
                }
            }
        }
        Ok(WideRun {
            gpus: out,
            k,
            step: 0,
        })
    }

    /// Issues one pass of `k` steps and its exchange (nothing waits on the host).
    pub fn pass(&mut self) -> Result<()> {
        let (k, n) = (self.k, self.gpus.len());
        for d in 0..n {
            let g = &self.gpus[d];
            sys::set_current(g.ctx.get())?;
            if self.step > 0 {
                for e in [d.wrapping_sub(1), d + 1].into_iter().filter(|&e| e < n) {
                    sys::stream_wait_event(g.stream.get(), self.gpus[e].pulled)?;
                }
            }
            let span = 0..g.held.len();
            launch_fused(
                (g.edges, g.steps),
                g.stream.get(),
                g.bufs,
                &g.held,
                span,
                k,
                self.step,
            )?;
            sys::record(g.done, g.stream.get())?;
        }
        if n > 1 {
            for d in 0..n {
                let g = &self.gpus[d];
                sys::set_current(g.ctx.get())?;
                let w = self.k;
                for e in [d.wrapping_sub(1), d + 1].into_iter().filter(|&e| e < n) {
                    let p = &self.gpus[e];
                    sys::stream_wait_event(g.stream.get(), p.done)?;
                    // From the neighbour's owned cells next to us into our halo.
                    let first = if e < d { g.held.lo - w } else { g.held.hi };
                    let (from, to) = (p.held.local(first), g.held.local(first));
                    for (dst, src) in [(g.bufs.ex, p.bufs.ex), (g.bufs.hy, p.bufs.hy)] {
                        let (dst, src) = (dst.slice(to..to + w), src.slice(from..from + w));
                        copy_peer(dst, g.ctx.get(), src, p.ctx.get(), g.stream.get())?;
                    }
                }
                sys::record(g.pulled, g.stream.get())?;
            }
        }
        self.step += k as u64;
        Ok(())
    }

    pub fn synchronize(&self) -> Result<()> {
        for g in &self.gpus {
            sys::set_current(g.ctx.get())?;
            sys::stream_synchronize(g.stream.get())?;
        }
        Ok(())
    }

    /// Both fields' owned cells of every GPU, in grid order.
    pub fn fields(&self) -> Result<crate::decomp::Gathered> {
        self.synchronize()?;
        let mut out = crate::decomp::Gathered::default();
        for g in &self.gpus {
            sys::set_current(g.ctx.get())?;
            let mut buf = vec![0.0; g.held.len()];
            for (f, v) in [(&g.buffers[0], &mut out.e), (&g.buffers[1], &mut out.h)] {
                f.download(&mut buf)?;
                v.extend_from_slice(&buf[g.held.owned()]);
            }
        }
        Ok(out)
    }

    /// Runs `passes` passes and compares with the CPU reference run as many steps from
    /// step 0 (call first): the number of cells that differ in either field.
    pub fn check(&mut self, s: &Scenario, passes: usize) -> Result<usize> {
        if self.step != 0 {
            return Err(anyhow!("check from step 0"));
        }
        for _ in 0..passes {
            self.pass()?;
        }
        let got = self.fields()?;
        let want = Domain::reference_fields(s, &Coefficients::new(s)?, self.step)?;
        Ok(got.differing_cells(&want))
    }

    /// Wall-clock µs per step over `passes` passes (issued, then waited for).
    pub fn time(&mut self, passes: usize) -> Result<f64> {
        self.synchronize()?;
        let t0 = Instant::now();
        for _ in 0..passes {
            self.pass()?;
        }
        self.synchronize()?;
        Ok(t0.elapsed().as_secs_f64() * 1e6 / (passes * self.k) as f64)
    }
}

impl Drop for WideRun {
    /// Every GPU finishes its work; then each frees what it owns, in order.
    fn drop(&mut self) {
        for g in &self.gpus {
            if sys::set_current(g.ctx.get()).is_ok() {
                let _ = sys::synchronize_context();
            }
        }
    }
}
